/* Mixed precision in compiled programs.
 *
 * The XLA TPU compiler's optimized programs (verified there with mixed precision allowed)
 * fold a narrowing convert into the op before it: a fusion computes
 *   reduce_max.0 = bf16[4096] reduce(f32[1000,4096] x, f32[] -inf), dimensions={0}
 * or a select of two f32 values with a bf16 result. The op runs at its operands' precision
 * (the reducer is f32)
 * and its result is then rounded to the declared type. tpusim's IR keeps one type per op,
 * so right after parsing such an op takes its operands' float type and a `convert` to the
 * declared type follows it (same name stem, same metadata): values are those of the op
 * followed by a round to nearest even, and every pass and backend sees ordinary HLO.
 * A reduce or reduce-window whose input's float type differs from its init value's (a bf16
 * input summed with an f32 init) reads its input converted to the init's type first.
 * A variadic reduce (an argmax's max and index) whose tuple result declares a narrower float
 * element than its init value's (f32 maxima returned as bf16) computes each element in its
 * init's type and converts that element (get-tuple-element, convert, tuple); an all-reduce
 * (one operand or several) declaring bf16 sums of f32 operands sums in f32 likewise.
 * Only float-to-float differences are split; anything else is left to the verifier. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "hlo/hlo.h"
#include "ir/build.h"

/* The float type the op computes in, or TPU_TUPLE when it needs no split: a reduce or
 * reduce-window computes in its init value's type (its reducer's); an elementwise op, select
 * or clamp whose value operands all have one float type computes in that type. Elementwise
 * ops whose operands' float types differ among themselves convert them to the result type
 * instead (tpu_instr_mixed_float, XLA's float type correction): those are left alone. */
static tpu_dtype computes_in(const tpu_instr *in) {
  if (in->shape.dtype == TPU_TUPLE || in->noperands < 1) return TPU_TUPLE;
  if (in->op == TPU_OP_REDUCE || in->op == TPU_OP_REDUCE_WINDOW)
    return in->noperands == 2 ? in->operands[1]->shape.dtype : TPU_TUPLE;
  if (in->op == TPU_OP_ALL_REDUCE) return in->noperands == 1 ? in->operands[0]->shape.dtype : TPU_TUPLE;
  tpu_op_class k = tpu_op_class_of(in->op);
  if (k != TPU_CLS_UNARY && k != TPU_CLS_BINARY && k != TPU_CLS_TERNARY && in->op != TPU_OP_SELECT &&
      in->op != TPU_OP_CLAMP)
    return TPU_TUPLE;
  int first = in->op == TPU_OP_SELECT; /* the predicate is not a value */
  if (in->noperands <= first) return TPU_TUPLE; /* malformed: the verifier refuses it */
  tpu_dtype t = in->operands[first]->shape.dtype;
  for (int i = first + 1; i < in->noperands; i++)
    if (in->operands[i]->shape.dtype != t) return TPU_TUPLE;
  return t;
}

/* Splits variadic reduce `in` (its tuple elements declared narrower than their init values'
 * float types) into the reduce at the inits' types, a convert of each such element and a
 * tuple; *changed when it did. */
static tpu_status split_variadic(tpu_builder *b, tpu_comp *c, tpu_instr *in, int *changed) {
  int k = in->shape.ntuple;
  /* element j computes in its init value's type (reduce) or its operand's (all-reduce) */
  int off = in->op == TPU_OP_REDUCE ? k : 0;
  if (in->shape.dtype != TPU_TUPLE || k < 1 || in->noperands != off + k ||
      (in->op != TPU_OP_REDUCE && in->op != TPU_OP_ALL_REDUCE) || (in->op == TPU_OP_REDUCE && k < 2))
    return TPU_OK;
  int any = 0;
  for (int j = 0; j < k; j++) {
    tpu_dtype want = in->operands[off + j]->shape.dtype, have = in->shape.elems[j].dtype;
    any |= want != have && tpu_dtype_is_float(want) && tpu_dtype_is_float(have);
  }
  if (!any) return TPU_OK;
  if (k > 8) return TPU_OK;
  /* the declared elements stay with the new tuple; the reduce gets its own list */
  tpu_shape *declared = in->shape.elems, *wide = tpu_arena_alloc(&b->m->arena, sizeof *wide * (size_t)k);
  if (!wide) return TPU_ERR_NOMEM;
  for (int j = 0; j < k; j++) {
    tpu_dtype want = in->operands[off + j]->shape.dtype;
    wide[j] = declared[j];
    if (tpu_dtype_is_float(want) && tpu_dtype_is_float(declared[j].dtype) && want != declared[j].dtype) {
      wide[j].dtype = want;
      wide[j].layout_tail = NULL;
    }
  }
  in->shape.elems = wide;
  tpu_instr *parts[8];
  for (int j = 0; j < k; j++) {
    tpu_instr *g;
    tpu_shape gs = in->shape.elems[j];
    TPU_TRY(tpu_build_instr_like(b, c, in, TPU_OP_GET_TUPLE_ELEMENT, in->name, &gs, &in, 1, &g));
    g->index = j;
    char idx[24];
    snprintf(idx, sizeof idx, "%d", j);
    TPU_TRY(tpu_build_set_attr(b, g, "index", idx));
    parts[j] = g;
    if (gs.dtype != declared[j].dtype)
      TPU_TRY(tpu_build_instr_like(b, c, in, TPU_OP_CONVERT, in->name, &declared[j], &g, 1, &parts[j]));
  }
  tpu_shape ts = in->shape;
  ts.elems = declared;
  tpu_instr *t;
  TPU_TRY(tpu_build_instr_like(b, c, in, TPU_OP_TUPLE, in->name, &ts, parts, k, &t));
  tpu_build_replace_uses(c, in, t);
  for (int j = 0; j < k; j++) /* replace_uses rewired the new elements' own operand too */
    if (parts[j]->op == TPU_OP_CONVERT) parts[j]->operands[0]->operands[0] = in;
    else parts[j]->operands[0] = in;
  *changed = 1;
  return TPU_OK;
}

tpu_status tpu__hlo_split_mixed_precision(tpu_module *m, tpu_diag *d) {
  tpu_builder b;
  int inited = 0;
  for (int ci = 0; ci < m->ncomps; ci++) {
    tpu_comp *c = m->comps[ci];
    int changed = 0, n = c->ninstrs;
    for (int i = 0; i < n; i++) {
      tpu_instr *in = c->instrs[i];
      if ((in->op == TPU_OP_REDUCE || in->op == TPU_OP_REDUCE_WINDOW) && in->noperands == 2 &&
          in->operands[0]->shape.dtype != in->operands[1]->shape.dtype && tpu_dtype_is_float(in->operands[0]->shape.dtype) &&
          tpu_dtype_is_float(in->operands[1]->shape.dtype)) {
        /* a bf16 input with an f32 init value (the compiler's avg-pool sums): the input widened
         * to the reducer's type first */
        if (!inited) {
          TPU_TRY(tpu_builder_init(&b, m, d));
          inited = 1;
        }
        tpu_shape ws = in->operands[0]->shape;
        ws.dtype = in->operands[1]->shape.dtype;
        ws.layout_tail = NULL;
        tpu_instr *x = in->operands[0], *wide = NULL;
        tpu_status st = tpu_build_instr_like(&b, c, in, TPU_OP_CONVERT, "widen", &ws, &x, 1, &wide);
        if (st != TPU_OK) {
          tpu_builder_deinit(&b);
          return st;
        }
        in->operands[0] = wide;
        changed = 1;
      }
      if ((in->op == TPU_OP_REDUCE || in->op == TPU_OP_ALL_REDUCE) && in->shape.dtype == TPU_TUPLE) {
        if (!inited) {
          TPU_TRY(tpu_builder_init(&b, m, d));
          inited = 1;
        }
        tpu_status st = split_variadic(&b, c, in, &changed);
        if (st != TPU_OK) {
          tpu_builder_deinit(&b);
          return st;
        }
        continue;
      }
      tpu_dtype want = computes_in(in), have = in->shape.dtype;
      if (want == TPU_TUPLE || want == have || !tpu_dtype_is_float(want) || !tpu_dtype_is_float(have)) continue;
      if (!inited) {
        TPU_TRY(tpu_builder_init(&b, m, d));
        inited = 1;
      }
      tpu_shape declared = in->shape;
      in->shape.dtype = want;
      in->shape.layout_tail = NULL; /* the declared tiling is the narrow type's */
      tpu_instr *cv = NULL;
      tpu_status st = tpu_build_instr_like(&b, c, in, TPU_OP_CONVERT, in->name, &declared, &in, 1, &cv);
      if (st != TPU_OK) {
        tpu_builder_deinit(&b);
        return st;
      }
      tpu_build_replace_uses(c, in, cv);
      cv->operands[0] = in; /* replace_uses rewired the convert's own operand too */
      changed = 1;
    }
    if (changed) {
      tpu_status st = tpu_build_finish(&b, c);
      if (st != TPU_OK) {
        tpu_builder_deinit(&b);
        return st;
      }
    }
  }
  if (inited) tpu_builder_deinit(&b);
  return TPU_OK;
}
