/* A sort kernel's work and least time (tile pass): the bitonic network the XLA TPU compiler
 * emits, as libtpu's final VLIW bundles show it (bench/fidelity/probes/sort_bundles.py).
 *
 * The compiler's cost model gives no sort an estimate (every sort of the families corpus is
 * "unestimated"), so these counts come from its code. A sort of N elements runs the network of
 * the next power of two, P = 2^ceil(log2 N): log2P (log2P + 1) / 2 compare-exchange stages over
 * every 32-bit vector register of each operand (16-bit values are widened). Per register of the
 * key and stage it issues about
 *     8 + 3 x operands + the comparator's operations
 * vector ALU operations (vsel, vcmp, vxor, ...) with the sorted dimension in the lanes, 3 + ...
 * in the sublanes (no lane masks to build), counting the comparator as XLA lowers it: a
 * floating TOTALORDER compare expanded by ComparisonExpander (per side: compare with 0, xor,
 * select), a stable sort's tie-break by StableSortExpander (an iota operand; the comparator
 * both ways, an equality, the iotas' compare, a select). libtpu probes on v5e (tune shapes):
 * f32 keys with their iota 30.1-35.0 per register and stage in the lanes (comparator 19
 * operations), 28.2 in the sublanes; s32 19.2-19.7 (5); f32 key and value 33.9 (3 operands). Large sorts issue them at the vector
 * unit's rate (v5e: 3.7-3.8 per bundle against vector_ops_per_cycle 4).
 *
 * With the sorted dimension in the lanes ({1,0}: 8 rows of the batch, or fewer, share a
 * register), the stages whose distance is under 128 lanes exchange within a register through
 * the permute unit, and each such stage waits on it: sort_lane_stage_cycles per stage, once for
 * the kernel when its registers fit the register file (the compiler interleaves its row blocks)
 * and once per block of 8 rows when it loops over them. With the sorted dimension in the
 * sublanes ({0,1}: 128 independent sorts side by side) or a major one, the exchanges are whole
 * registers or sublane shuffles through VMEM and no such wait shows. */
#include <string.h>

#include "compile/backend/backend.h"

/* Operations of a comparator as XLA lowers it for the TPU (above); bitcasts are free. */
static int64_t comparator_ops(const tpu_comp *c) {
  int64_t n = 0;
  for (int i = 0; c && i < c->ninstrs; i++) {
    const tpu_instr *x = c->instrs[i];
    if (x->op == TPU_OP_BITCAST_CONVERT || !tpu__is_elementwise(x->op)) continue;
    n++;
    if (x->op == TPU_OP_COMPARE && x->cmp_type == TPU_CMPT_TOTALORDER && x->noperands == 2 &&
        tpu_dtype_is_float(x->operands[0]->shape.dtype))
      n += 6;
  }
  return n ? n : 1;
}

void tpu__sort_cost(const tpu__be *be, const tpu_instr *in, tpu__sort_work *w) {
  memset(w, 0, sizeof *w);
  if (in->noperands < 1) return;
  const tpu_shape *x = &in->operands[0]->shape;
  int64_t d = in->dimensions.n ? in->dimensions.v[0] : x->rank - 1;
  if (x->rank < 1 || d < 0 || d >= x->rank) return;
  int64_t n = x->dims[d], numel = tpu_shape_numel(x);
  int64_t batch = n > 0 ? numel / n : 0;
  if (n < 2 || batch < 1) {
    w->valu = tpu__vregs(be, x); /* nothing to exchange: a pass over the values */
    return;
  }
  const int64_t sub = be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8;
  const int64_t lanes = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
  int64_t lg = tpu__ilog2_ceil(n), p = (int64_t)1 << lg, lane_lg = tpu__ilog2_ceil(lanes);
  int64_t stages = lg * (lg + 1) / 2;
  int minor = x->has_layout ? x->minor_to_major[0] : x->rank - 1;
  int second = x->rank < 2 ? -1 : x->has_layout ? x->minor_to_major[1] : x->rank - 2;
  int64_t blocks, per_block, lane_stages = 0, network = 3;
  if (d == minor) { /* the lanes: blocks of `sub` rows, P / lanes registers each */
    blocks = (batch + sub - 1) / sub;
    per_block = p > lanes ? p / lanes : 1;
    for (int64_t k = 1; k <= lg; k++) lane_stages += k < lane_lg ? k : lane_lg;
    network = 8;
  } else if (d == second) { /* the sublanes: blocks of `lanes` sorts, P / sub registers each */
    blocks = (batch + lanes - 1) / lanes;
    per_block = p > sub ? p / sub : 1;
  } else { /* a major dimension: each position a whole register's worth of sorts */
    blocks = (batch + sub * lanes - 1) / (sub * lanes);
    per_block = p;
  }
  int64_t regs = blocks * per_block; /* registers of one operand */
  int64_t nops = in->noperands + (in->is_stable ? 1 : 0);
  int64_t comp = comparator_ops(in->to_apply) + (in->is_stable ? 4 : 0);
  w->valu = stages * regs * (network + 3 * nops + comp);
  w->perms = lane_stages * regs * nops;
  double lat = be->chip->sort_lane_stage_cycles;
  double vops = be->chip->vector_ops_per_cycle > 0 ? be->chip->vector_ops_per_cycle : 1;
  /* a sort of at most 32 registers an operand (half the register file, v0-v63 in the bundles)
   * is one straight-line network, its blocks interleaved: libtpu's kernels of f32[2,4096] and
   * s32[1,3000] with a value (32 registers) have no loop, f32[8,8192] (64) and s32[64,4096]
   * loop; a larger one loops over its blocks, each waiting on its own stages */
  int in_regs = regs <= 32;
  int64_t waits = in_regs ? 1 : blocks;
  w->body_cycles = (double)w->valu / vops + lat * (double)(lane_stages * waits);
  /* A chip whose TensorCores run as one device (megacore) shares a looping kernel's work out
   * and runs one that fits the registers on one core: libtpu's v5p kernels of f32[512,1024],
   * s32[64,4096], s32[200,3000] and f32[8,8192] take 0.50-0.60 of v5e's bundles, those of
   * f32[8,1024], s32[16,512], s32[32,256] and f32[256,64] 1.00-1.02. */
  if (!in_regs && be->chip->tensorcores > 1) w->body_cycles /= (double)be->chip->tensorcores;
}
