/* vmem_source.c: kernels without operands whose results stay in VMEM, which pay no kernel start. */
#include <string.h>

#include "compile/backend/backend.h"
#include "compile/passes/hlo_passes.h"

/* A leaf in VMEM (S(1)) whose tiles are whole 32-bit vector registers: T(8,128), or
 * T(1024) for a 1-D array, no packing suffix. A tuple: every leaf. */
static int vmem_full_tiles(const tpu_shape *s) {
  if (s->dtype == TPU_TUPLE) {
    for (int i = 0; i < s->ntuple; i++)
      if (!vmem_full_tiles(&s->elems[i])) return 0;
    return s->ntuple > 0;
  }
  if (!tpu__in_vmem(s) || tpu_dtype_size(s->dtype) != 4) return 0;
  const char *t = strstr(s->layout_tail, "T(");
  if (!t) return 0;
  const char *e = strchr(t, ')');
  if (!e || e[1] == '(') return 0; /* T(8,128)(2,1): a packed tile */
  return !strncmp(t, "T(8,128)", 8) || (s->rank == 1 && !strncmp(t, "T(1024)", 7));
}

/* A compiled program's kernel with no operands (an iota, a fusion of iotas and constants:
 * Threefry's counters) whose result stays in VMEM in whole 32-bit registers: the XLA TPU
 * compiler charges its stores alone, no kernel start (v5e and v6e, the families corpus: 44
 * such kernels of 1-64 KiB at 16-28 cycles, s32[1024,4096] 1,536; bench/fidelity/probes
 * cases_7 p_iota_sort_16x300 / 40x1200: 17 / 28 cycles on v5e and v6e). A result in HBM
 * (v5p's iotas) or CMEM (v4's, S(3)), or in tiles narrower than a register (T(1,128),
 * T(2,128), T(128) vectors, packed predicates) pays the start as any kernel: 1,824-2,134
 * cycles (p_iota_sort_3x500, 1x3000). */
static int vmem_source_kernel(const tpu_instr *in) {
  return in->noperands == 0 && (in->op == TPU_OP_IOTA || in->op == TPU_OP_FUSION) && vmem_full_tiles(&in->shape);
}

/* The sole reader of v in its computation, or NULL (none, or more than one). */
static const tpu_instr *sole_reader(const tpu_instr *v) {
  const tpu_instr *r = NULL;
  for (int i = 0; v->parent && i < v->parent->ninstrs; i++) {
    const tpu_instr *u = v->parent->instrs[i];
    for (int o = 0; o < u->noperands; o++)
      if (u->operands[o] == v) {
        if (r) return NULL;
        r = u;
      }
  }
  return r;
}

/* tpusim's own compilation's kernel with no operands (an iota, a fusion of iotas and
 * constants) on a chip that keeps such values in VMEM (one TensorCore, no CMEM: v5e, v6e),
 * in whole 32-bit registers as the compiler lays it out: no kernel start, as
 * vmem_source_kernel. The compiler folds a reshape of an iota into the iota and generates
 * an iota a sort reads in the sort's layout (sort_layout.c), so the tiles are those of the
 * value its readers take: a sort's operand layout through reshapes and bitcasts
 * (approx_max_k_b1n8k8_f32's s32[8] iota is the compiled s32[1,8]{0,1:T(8,128)S(1)}, 16
 * cycles on v5e and v6e), else its own. Whole registers: 32-bit elements, at least 5 rows
 * in the sublanes (a T(8,128) tile: t5's s32[64,64,1] 52 cycles, argsort_128x1000_s32's
 * iota 47), or a vector of more than 896 (T(1024): mistral's s32[1024] 16 cycles); a
 * shorter vector's T(128) or T(256) tile pays the start (llama's f32[32] 1,825 cycles,
 * whisper's f32[256] 1,824), as does a value the program returns (written to HBM). */
/* wide: the 32-bit words of a 64-bit integer kernel (tpu__wide_int_source_kernels), which
 * the compiler keeps in VMEM on v5p too. */
static int own_source_whole_registers(const tpu__be *be, const tpu_instr *in, int wide) {
  const tpu_chip *ch = be->chip;
  if (in->noperands != 0 || (in->op != TPU_OP_IOTA && in->op != TPU_OP_FUSION) || in->shape.layout_tail ||
      (ch->tensorcores > 1 && !wide) || ch->cmem_bytes > 0 || !in->parent || in->parent->root == in)
    return 0;
  const tpu_shape *s = &in->shape;
  const tpu_instr *v = in, *u = sole_reader(in);
  while (u && (u->op == TPU_OP_RESHAPE || u->op == TPU_OP_BITCAST) && u->parent->root != u) {
    v = u;
    u = sole_reader(u);
  }
  if (!u || u->op == TPU_OP_TUPLE) return 0;
  if (u->op == TPU_OP_SORT && u->noperands > 0) s = &u->operands[0]->shape;
  else s = &v->shape;
  if (!tpu_dtype_is_array(s->dtype) || tpu_dtype_size(s->dtype) != (wide ? 8 : 4) || s->rank < 1) return 0;
  const int64_t sub = ch->vector_sublanes > 0 ? ch->vector_sublanes : 8;
  const int64_t lanes = ch->vector_lanes > 0 ? ch->vector_lanes : 128;
  if (s->rank == 1) return s->dims[0] > (sub - 1) * lanes;
  int q = s->has_layout ? s->minor_to_major[1] : s->rank - 2;
  return s->dims[q] > sub / 2;
}

static int own_vmem_source_kernel(const tpu__be *be, const tpu_instr *in) {
  return own_source_whole_registers(be, in, 0);
}

int tpu__vmem_source_kernel(const tpu__be *be, const tpu_instr *in) {
  return vmem_source_kernel(in) || own_vmem_source_kernel(be, in);
}

/* tpusim's own operandless kernel with a 64-bit integer result (JAX's iota_2x32_shape: the
 * u64 row iota times the row length, over the rows once broadcasts sink): the XLA TPU
 * compiler has no 64-bit vector integers and computes the product's 32-bit words and the
 * carry between them as separate operandless u32 kernels, three on v4, v5e and v5p, two on
 * v6e (it fuses two siblings into one multi-output kernel): families corpus, compiled
 * random/dropout programs (random_bernoulli_8x1024: broadcast_add_fusion,
 * shift-right-logical_add_fusion and an or fusion, u32[8]{0:T(128)S(1)}), and libtpu
 * probes outside the corpus (uniform [16,2048]: three u32[16] kernels of 614 cycles on v4,
 * 2,124 on v5p; [2000,64]: three u32[2000]{0:T(1024)S(3)} of 645 on v4). Each pays the
 * kernel start, unless its words fill whole registers in VMEM (a vector of more than 896:
 * 18-31 cycles on v5e, v5p and v6e for 1,024-4,096 rows), then none (-1); v4 keeps them in
 * CMEM and pays the start. 0: not such a kernel. */
int tpu__wide_int_source_kernels(const tpu__be *be, const tpu_instr *in) {
  const tpu_chip *ch = be->chip;
  if (ch->wide_int_source_kernels <= 0 || in->noperands != 0 || in->shape.layout_tail ||
      (in->op != TPU_OP_IOTA && in->op != TPU_OP_FUSION) || !tpu_dtype_is_int(in->shape.dtype) ||
      tpu_dtype_size(in->shape.dtype) != 8 || !in->parent || in->parent->root == in)
    return 0;
  if (own_source_whole_registers(be, in, 1)) return -1;
  return (int)ch->wide_int_source_kernels;
}
