/* A concatenate's shift cost (chip concat_shift_cycles): the registers of a kernel's result
 * that lie before its operands along a concatenated dimension, which layout.c stream_costs
 * charges on the HBM port. */
#include <string.h>

#include "compile/backend/backend.h"

/* The vector registers of concatenate or pad x's result that lie before an operand along a
 * dimension other than the lanes: for a concatenate, each operand's offset along its
 * dimension over that dimension's size, summed over the operands, times the result's
 * registers; for a pad in a pad-and-combine tree (pad_combine), its low padding likewise.
 * The XLA TPU compiler lowers a concatenate so (each operand padded to the result's shape
 * with -inf or 0 and the pads combined by maximum or add: pad_maximum_fusion) and charges
 * the fusion per register of those shifts on top of its transfers, linear in the operands'
 * offsets and not in their sizes (libtpu probes, bench/fidelity/probes/concat_shift.py: bf16
 * [16,384,256] from two parts of 8 ... 256 rows costs v5e 30,892 ... 35,146 cycles, 17.2 per
 * row of the first part; three parts 128-128-128 and 32-320-32 cost alike, 37,918). Along the
 * lanes it shifts nothing so (two f32 [16,320,128] joined along the lanes: 26,074 cycles, its
 * transfers). v: the value x's result is (the kernel for its fused root), whose layout
 * decides the lanes and the registers. */
static double shift_regs(const tpu__be *be, const tpu_instr *v, const tpu_instr *x, int combined) {
  const tpu_shape *s = &x->shape;
  if (s->dtype == TPU_TUPLE || s->rank < 2 || !tpu_dtype_is_array(s->dtype)) return 0;
  int lane;
  int64_t bytes = tpu__value_tiling(be, v, s, &lane);
  double f = 0;
  /* (space to batch's join of a piece and its halo, space_to_batch.c "s2b.halo", is the
   * compiler's relayout copy of the unfold: no pads) */
  /* (of five operands or more the compiler writes each into the result in place instead, a
   * chain of dynamic-update-slice kernels and ConcatBitcast copies, no pads: five to eight
   * f32 or bf16 parts of [4..16,40..384,128..256] on v5e, bench/fidelity/probes/concat_shift.py
   * k5..k8 cases) */
  if (x->op == TPU_OP_CONCATENATE && x->dimensions.n == 1 && x->noperands <= 4 &&
      !(x->name && !strncmp(x->name, "s2b.", 4))) {
    int d = (int)x->dimensions.v[0];
    if (d == lane || s->dims[d] <= 0) return 0;
    int64_t off = 0;
    for (int j = 0; j + 1 < x->noperands; j++) {
      off += x->operands[j]->shape.dims[d];
      f += (double)off / (double)s->dims[d];
    }
  } else if (x->op == TPU_OP_PAD && x->padding && combined) {
    for (int d = 0; d < s->rank; d++)
      if (d != lane && x->padding[d].lo > 0 && s->dims[d] > 0) f += (double)x->padding[d].lo / (double)s->dims[d];
  }
  int64_t reg = (be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8) *
                (be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128) * 4;
  return f > 0 ? f * (double)((bytes + reg - 1) / reg) : 0;
}

/* The one dimension pad x pads (no interior padding), or -1. */
static int pad_dim(const tpu_instr *x) {
  int d = -1;
  for (int i = 0; x->padding && i < x->shape.rank; i++) {
    if (x->padding[i].interior) return -1;
    if (x->padding[i].lo || x->padding[i].hi) {
      if (d >= 0) return -1;
      d = i;
    }
  }
  return d;
}

/* Is x (in a fused computation) a tree of maximum / add / or ops of one shape whose leaves
 * are two or more pads of that shape along one dimension, the same for all (*dim): the
 * compiler's pad-and-combine form of a concatenate? (A reflect pad's nested pads along
 * several dimensions are not.) */
static int pad_combine(const tpu_instr *x, int depth, int *pads, int *dim) {
  if (x->op == TPU_OP_PAD) {
    int d = pad_dim(x);
    if (d < 0 || (*dim >= 0 && d != *dim) || x->operands[0]->op == TPU_OP_PAD) return 0;
    *dim = d;
    (*pads)++;
    return 1;
  }
  if (depth > 16 || x->noperands != 2 ||
      (x->op != TPU_OP_MAXIMUM && x->op != TPU_OP_ADD && x->op != TPU_OP_OR))
    return 0;
  for (int j = 0; j < 2; j++)
    if (x->operands[j]->shape.rank != x->shape.rank || !pad_combine(x->operands[j], depth + 1, pads, dim)) return 0;
  return 1;
}

/* The shift registers of kernel `in` (shift_regs): its own concatenate, or in its fused
 * computation each concatenate and, where the root is a pad-and-combine tree, each pad. */
double tpu__kernel_shift_regs(const tpu__be *be, const tpu_instr *in) {
  if (!(in->op == TPU_OP_FUSION && in->calls)) return shift_regs(be, in, in, 0);
  const tpu_instr *root = in->calls->root;
  int pads = 0, dim = -1, combined = root && pad_combine(root, 0, &pads, &dim) && pads >= 2;
  double sr = 0;
  for (int i = 0; i < in->calls->ninstrs; i++) {
    const tpu_instr *x = in->calls->instrs[i];
    if (x->op == TPU_OP_CONCATENATE || (x->op == TPU_OP_PAD && combined))
      sr += shift_regs(be, x == root || x->op == TPU_OP_PAD ? in : NULL, x, combined);
  }
  return sr;
}

