/* Reductions that need no reduction (part of the simplify pass): a sum over a broadcast's
 * new dimensions as a multiply, a reduce over dimensions of one element as an elementwise op.
 *
 * reduce(broadcast(x), 0, add) over dimensions the broadcast added is x times their
 * element count: XLA's algebraic simplifier rewrites it so, and its TPU compiler then runs
 * no reduction at all (probed with libtpu on v5e: the column sum of g broadcast to
 * f32[8192,4096] compiles to one `broadcast_multiply_fusion` of 1,885 cycles, where a sum
 * over g x r of the same size, which it keeps, takes 332,064). JAX's layer-norm gradient
 * has such a sum (the bias gradient of a loss summed with weight 1 is the sum of a
 * broadcast 1.0 over the rows). tpusim does the same where
 *   - the reduce has one operand, an initial value of +0 or 0, and adds,
 *   - its operand is a broadcast, maybe through converts (applied to x instead, which is
 *     exact: each element is converted alike), and
 *   - every reduced dimension is one the broadcast added,
 * for f32, f64 and integer sums (whose count is exact in the type up to 2^24 elements for
 * f32). Values: x * N rounded once, as XLA computes it, where the sum rounded N times. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/env.h"
#include "compile/passes/hlo_passes.h"
#include "ir/build.h"
#include "ref/ref_int.h"

tpu_status tpu__reduce_of_broadcast(tpu_builder *b, tpu_comp *c, tpu_instr *in, tpu_instr **repl) {
  *repl = NULL;
  if (in->op != TPU_OP_REDUCE || in->noperands != 2 || !tpu__is_adder(in->to_apply) ||
      !tpu__is_splat(in->operands[1], 0))
    return TPU_OK;
  tpu_dtype t = in->shape.dtype;
  if (t != TPU_F32 && t != TPU_F64 && !tpu_dtype_is_int(t)) return TPU_OK;
  /* through converts to the broadcast: at most a few, each kept to re-apply to x */
  tpu_instr *chain[4];
  int nc = 0;
  tpu_instr *bc = in->operands[0];
  while (bc->op == TPU_OP_CONVERT && nc < 4) {
    chain[nc++] = bc;
    bc = bc->operands[0];
  }
  if (bc->op != TPU_OP_BROADCAST || bc->noperands != 1) return TPU_OK;
  const tpu_i64s *red = &in->dimensions, *map = &bc->dimensions;
  int64_t n = 1;
  for (int i = 0; i < red->n; i++) {
    if (tpu_i64s_find(map, red->v[i]) >= 0) return TPU_OK; /* sums along x's own dimension */
    n *= bc->shape.dims[red->v[i]];
  }
  if (t == TPU_F32 && n > (1 << 24)) return TPU_OK;
  /* x through the converts, innermost first */
  tpu_instr *x = bc->operands[0];
  for (int k = nc - 1; k >= 0; k--) {
    tpu_shape s = x->shape;
    s.dtype = chain[k]->shape.dtype;
    s.layout_tail = NULL;
    s.has_layout = 0;
    TPU_TRY(tpu_build_instr_like(b, c, in, TPU_OP_CONVERT, "sum.bcast", &s, &x, 1, &x));
  }
  /* x broadcast into the reduce's shape: each mapped dimension shifts down past the
   * reduced ones before it */
  int64_t nd[TPU_MAX_RANK];
  for (int i = 0; i < map->n; i++) {
    int64_t d = map->v[i], below = 0;
    for (int j = 0; j < red->n; j++) below += red->v[j] < d;
    nd[i] = d - below;
  }
  tpu_shape rs = in->shape;
  char dims[TPU_MAX_RANK * 24 + 4];
  tpu_instr *xb, *k, *kb, *ops[2];
  TPU_TRY(tpu_build_instr_like(b, c, in, TPU_OP_BROADCAST, "sum.bcast", &rs, &x, 1, &xb));
  TPU_TRY(tpu_build_set_attr(b, xb, "dimensions", tpu_dims_text(dims, sizeof dims, nd, (int)map->n)));
  tpu_tensor cnt;
  TPU_TRY(tpu_tensor_alloc(&cnt, t, 0, NULL, b->d));
  if (tpu_dtype_is_float(t))
    tpu_tensor_set_f64(&cnt, 0, (double)n);
  else
    tpu_tensor_set_i64(&cnt, 0, n);
  TPU_TRY(tpu_build_constant(b, c, "sum.count", &cnt, NULL, &k));
  TPU_TRY(tpu_build_instr_like(b, c, in, TPU_OP_BROADCAST, "sum.bcast", &rs, &k, 1, &kb));
  TPU_TRY(tpu_build_set_attr(b, kb, "dimensions", "{}"));
  ops[0] = xb;
  ops[1] = kb;
  return tpu_build_instr_like(b, c, in, TPU_OP_MULTIPLY, in->name, &rs, ops, 2, repl);
}

/* ---- A reduce over dimensions of one element ----
 * A reduce whose result has as many elements as its operand (every reduced dimension has
 * size 1) combines each element with the init value only. XLA's algebraic simplifier
 * replaces it by a reshape of the operand, taking the init value as the reducer's identity
 * (algebraic_simplifier.cc HandleReduce: "If the reduction results in the same number of
 * elements, then the only possible side effect would be a reshape"), so the XLA TPU
 * compiler runs no reduction: JAX's sum over a keepdims axis of one element (the bias
 * gradients' sums over N = 1, H = W = 1 of a [1,1,1,C] value in the convnet training steps,
 * an f32 row statistic of [R,1]) is a bitcast in the reader's kernel. tpusim writes it as
 * op(broadcast(init), reshape(x)) with the reducer's op, the reduce's own arithmetic
 * (acc = init, acc = op(acc, x) once), so values are unchanged; the identities then drop
 * op where init is its identity (max with -inf, x + (-0)), and an add of +0 (JAX's sum) is
 * an elementwise op that fuses where the reshape goes. One-operand reduces whose reducer is
 * a binary op of its two parameters (tpu__ref_simple_reducer), of 32- or 64-bit floats, integers
 * or pred (the compiler keeps a bf16 or f16 one a reduction), in programs the compiler has not
 * laid out; TPUSIM_NO_UNIT_REDUCE=1 keeps them reductions. libtpu probes (probes/unit_reduce.py,
 * v5e and v4): f32 sums over [1,1,1,192] -> [192], [1000,1], [8,1,1,32,1] -> [8,32], an f32
 * max, an f32 product, a pred and: no reduce left in the compiled program. */
tpu_status tpu__reduce_of_one(tpu_builder *b, tpu_comp *c, tpu_instr *in, tpu_instr **repl) {
  *repl = NULL;
  if (in->op != TPU_OP_REDUCE || in->noperands != 2 || in->shape.dtype == TPU_TUPLE) return TPU_OK;
  tpu_instr *x = in->operands[0], *init = in->operands[1];
  if (tpu_shape_numel(&x->shape) != tpu_shape_numel(&in->shape) || x->shape.dtype != in->shape.dtype ||
      init->shape.rank != 0)
    return TPU_OK;
  /* a compiled program's reduce (tiled layouts) is the compiler's own kernel: a relayout,
   * bf16[9,1]{T(8,128)} to bf16[9]{T(256)} in the compiled cumsum_1024_ax0_rev_bf16 */
  if (x->shape.layout_tail || in->shape.layout_tail) return TPU_OK;
  tpu_opcode op = tpu__ref_simple_reducer(in->to_apply);
  if (op == TPU_OP_COUNT) return TPU_OK;
  /* a reduce of 16-bit floats stays a reduction kernel in the compiler's programs (bf16 sums
   * and maxima, an f16 sum: probes/unit_reduce.py, a `reduce` of 642-1,892 cycles) */
  if (tpu_dtype_is_float(in->shape.dtype) && tpu_dtype_size(in->shape.dtype) < 4) return TPU_OK;
  int off = tpu_env_flag("TPUSIM_NO_UNIT_REDUCE");
  if (off) return TPU_OK;
  tpu_shape rs = in->shape;
  tpu_instr *xr, *ib, *ops[2];
  TPU_TRY(tpu_build_instr_like(b, c, in, TPU_OP_RESHAPE, "reduce.one", &rs, &x, 1, &xr));
  TPU_TRY(tpu_build_instr_like(b, c, in, TPU_OP_BROADCAST, "reduce.init", &rs, &init, 1, &ib));
  TPU_TRY(tpu_build_set_attr(b, ib, "dimensions", "{}"));
  ops[0] = ib;
  ops[1] = xr;
  return tpu_build_instr_like(b, c, in, op, in->name, &rs, ops, 2, repl);
}
