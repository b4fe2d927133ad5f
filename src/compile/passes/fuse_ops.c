/* Which ops each kind of fusion may take, by opcode and operand shapes alone (the fuse pass's
 * classes; fuse.c decides groups from these and from the program around each op). */
#include <stdlib.h>

#include "base/env.h"
#include "compile/passes/fuse.h"
#include "ir/build.h"

/* Ops a loop fusion can hold: elementwise and cheap data movement. */
int tpu__fuse_loop_fusible(const tpu_instr *in) {
  if (in->shape.dtype == TPU_TUPLE || in->shape.dtype == TPU_TOKEN) return 0;
  switch (in->op) {
    case TPU_OP_COMPARE:
    case TPU_OP_SELECT:
    case TPU_OP_CLAMP:
    case TPU_OP_CONVERT:
    case TPU_OP_BITCAST_CONVERT:
    case TPU_OP_IS_FINITE:
    case TPU_OP_BROADCAST:
    case TPU_OP_RESHAPE:
    case TPU_OP_BITCAST:
    case TPU_OP_TRANSPOSE:
    case TPU_OP_SLICE:
    case TPU_OP_CONCATENATE:
    case TPU_OP_PAD:
    case TPU_OP_REVERSE:
    case TPU_OP_IOTA:
    case TPU_OP_CONSTANT:
    case TPU_OP_COPY: return 1;
    default: break;
  }
  tpu_op_class k = tpu_op_class_of(in->op);
  return k == TPU_CLS_UNARY || k == TPU_CLS_BINARY || k == TPU_CLS_TERNARY;
}

/* Producers a dot or convolution takes into its fusion (layout and type changes the MXU
 * feed path absorbs). */
int tpu__fuse_operand_producer(const tpu_instr *in) {
  switch (in->op) {
    case TPU_OP_DYNAMIC_SLICE: /* a layer's weights from a stacked buffer: read in place */
    case TPU_OP_SLICE:
    case TPU_OP_CONVERT:
    case TPU_OP_BROADCAST:
    case TPU_OP_TRANSPOSE:
    case TPU_OP_RESHAPE:
    case TPU_OP_BITCAST:
    case TPU_OP_COPY:
    case TPU_OP_CONSTANT:
    case TPU_OP_IOTA: return 1;
    default: return 0;
  }
}

int tpu__fuse_narrowing(const tpu_instr *in) {
  return in->op == TPU_OP_CONVERT && tpu_dtype_size(in->shape.dtype) < tpu_dtype_size(in->operands[0]->shape.dtype);
}

/* Work the compiler recomputes in each user's kernel rather than store: elementwise ops on
 * the values in place (no transpose, concatenation or padding), including the transcendental
 * unit's exp, log, tanh, sqrt, rsqrt, expm1, log1p, logistic and power, but not division,
 * sine, cosine, tangent, erf, cbrt, remainder or atan2. Read from its compiled programs:
 * f(x) feeding a row sum and a product with that sum is two kernels, each computing f,
 * for the first group, and f computed once for the second (bench/fidelity, docs/compiler-fusion.md). */
int tpu__fuse_transcendental(const tpu_instr *in) {
  switch (in->op) {
    case TPU_OP_EXP: case TPU_OP_LOG: case TPU_OP_TANH: case TPU_OP_SQRT: case TPU_OP_RSQRT:
    case TPU_OP_EXPM1: case TPU_OP_LOG1P: case TPU_OP_LOGISTIC: case TPU_OP_POWER: return 1;
    default: return 0;
  }
}

/* A loop-fusible value of one element computed from values of one element (JAX's
 * negative-index wrap of a dynamic-slice's start: lt, add, select), which the slice's kernel
 * takes in. The XLA TPU compiler runs the chain on the scalar unit in scalar memory (S(6):
 * `copy` of the index parameter, `add`, `lt`, `select` before add_bitcast_fusion in the
 * compiled dslice_cache_b1s1024h8d128_n1_bf16, none with estimated_cycles) and the kernel
 * reads the index there; in tpusim's kernel the index is read with the kernel's other
 * inputs, where as ops of their own the chain's first read of the parameter (a transfer's
 * latency, 0.5 us on v4) would wait before the kernel. A reduction's kernel already took the
 * chain (fuse.c may_join); a loop kernel now does too. TPUSIM_NO_SLICE_INDEX=1 leaves it out. */
int tpu__fuse_slice_index(const tpu_instr *x) {
  int off = tpu_env_flag("TPUSIM_NO_SLICE_INDEX");
  if (off || !tpu__fuse_loop_fusible(x) || !tpu_dtype_is_array(x->shape.dtype) || x->shape.rank != 0) return 0;
  for (int k = 0; k < x->noperands; k++)
    if (!tpu_dtype_is_array(x->operands[k]->shape.dtype) || tpu_shape_numel(&x->operands[k]->shape) != 1) return 0;
  return 1;
}

/* May a bare dynamic-update-slice join a loop fusion that already updates another buffer in
 * place (its root, or a result of its tuple root, a dynamic-update-slice)? Yes: XLA's TPU
 * compiler runs a scan step's updates of its stacked outputs as one multi-output fusion, at
 * one start index or at several (bench/fidelity/probes/dus_siblings.py: 2-6 f32/bf16 stacks, or
 * half of them one row further on, one fusion on v4, v5e, v5p and v6e; the compiled LSTM training step's
 * forward body writes six f32 stacks in bitcast_dynamic-update-slice_fusion.14).
 * TPUSIM_NO_DUS_SIBLINGS=1 keeps one update a fusion (the older rule). */
int tpu__fuse_dus_siblings(void) {
  return !tpu_env_flag("TPUSIM_NO_DUS_SIBLINGS");
}

/* A dynamic-slice at scalar offsets: the XLA TPU compiler computes it in the kernel that
 * reads it, reading only the window (a scan step's slice of its stacked inputs inside the
 * step's kernel: dynamic_slice.4 in the compiled cumsum_scan_t128b8d256's one fusion per
 * step, dynamic_slice.11/.12 in selective_scan_seq_b8l64d512n16's multiply_reduce_fusion),
 * unless that kernel reads its elements more than once through a broadcast (the same scan's
 * C slice, f32[8,16] broadcast over 512 features: dynamic-slice_bitcast_fusion.2, a kernel of
 * its own). */
int tpu__fuse_slice_producer(const tpu_instr *p) {
  if (p->op != TPU_OP_DYNAMIC_SLICE || p->noperands < 2 || p->shape.dtype == TPU_TUPLE) return 0;
  for (int i = 1; i < p->noperands; i++)
    if (p->operands[i]->shape.rank != 0) return 0;
  /* only along major dimensions of its operand's layout: a slice across the tile is a
   * kernel of its own (dslice_cache_b4s512h8d64_n1_f32: f32[4,512,8,64]{1,3,2,0} sliced along
   * the 512 in its lanes, the compiler's constant_dynamic-slice_fusion; along a major
   * dimension, dslice_cache_b1s1024h8d128_n1_bf16's slice is in its add_bitcast_fusion) */
  const tpu_shape *o = &p->operands[0]->shape;
  if (o->rank != p->shape.rank) return 0;
  for (int d = 0; d < o->rank; d++) {
    if (p->shape.dims[d] == o->dims[d]) continue;
    int pos = o->has_layout ? -1 : o->rank - 1 - d;
    for (int k = 0; o->has_layout && k < o->rank; k++)
      if (o->minor_to_major[k] == d) pos = k;
    if (pos < 2) return 0;
  }
  return 1;
}
