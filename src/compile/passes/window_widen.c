/* A pooling window reads its narrow operand itself (the last steps of the fuse pass, own
 * compilation and compiled programs alike).
 *
 * The XLA TPU compiler folds a widening float convert into the reduce-window that reads it:
 * an average pool over bf16, `reduce-window(convert(x) to f32, 0.0f)`, becomes
 * `reduce-window(bf16 x, f32 0)`, one kernel that reads x's bf16 bytes and sums in f32, no
 * f32 copy of x written and read back (bench/fidelity/families/compiled, v4, v5e, v5p and
 * v6e alike: avgpool1d_32x3000x96_w3s1_valid_bf16's reduce_window_sum.7 reads bf16
 * [32,3000,96]{1,2,0}; avgpool2d_1x7x7x96_w5s3_same_bf16's bf16[1,7,7,96]{3,2,1,0}; libtpu
 * v4 and v5e probes outside the corpus: bf16[16,20,20,8]{2,3,1,0} summed 3x3, and
 * bf16[16,2048,128] summed 4-wide whose f32 value another op reads too, that op's kernel
 * converting again). It does so where x is already laid out as the window runs; where the
 * window runs in another layout the convert joins the relayout instead
 * (avgpool2d_1x14x14x3_w3s3_same_bf16: `copy_convert_fusion` from {2,1,3,0} into {2,3,1,0},
 * then the window reads f32).
 *
 * tpusim's IR keeps one type per op (a compiled program's mixed reduce-window is split into
 * a `widen` convert and the window at parse time, hlo/mixed.c), so the folded form is a
 * kLoop fusion of the convert and the window: one kernel reading x. A window that slides
 * along major dimensions only is a kOutput fusion with its operand's converts already
 * (fuse.c); scans and windows over a whole dimension (cumulative ops, a row's maximum) are
 * not pooling windows and keep their form. */
#include <string.h>

#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"

/* A pooling window: one operand and one init value, sliding along some dimension, every
 * window shorter than its operand's dimension, no dilation of the base. */
static int pooling(const tpu_instr *w) {
  if (w->op != TPU_OP_REDUCE_WINDOW || w->noperands != 2 || w->shape.dtype == TPU_TUPLE) return 0;
  const tpu_shape *s = &w->operands[0]->shape;
  if (w->nwindow != s->rank) return 0;
  int any = 0;
  for (int d = 0; d < s->rank; d++) {
    const tpu_window_dim *x = &w->window[d];
    if (x->base_dilation > 1) return 0;
    if (x->size <= 1 && x->stride <= 1) continue;
    if (x->size >= s->dims[d] && x->size > 1) return 0;
    any = 1;
  }
  return any;
}

/* Lays out alike (the same minor-to-major order, a shape without a layout row-major; tiles
 * and memory spaces aside). */
static int same_order(const tpu_shape *a, const tpu_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int d = 0; d < a->rank; d++) {
    int x = a->has_layout ? a->minor_to_major[d] : a->rank - 1 - d, y = b->has_layout ? b->minor_to_major[d] : b->rank - 1 - d;
    if (x != y) return 0;
  }
  return 1;
}

int tpu__window_reads_narrow(const tpu_comp *c, const tpu_instr *w) {
  if (!pooling(w)) return 0;
  const tpu_instr *cv = w->operands[0];
  if (cv->op != TPU_OP_CONVERT || cv->noperands != 1 || cv->parent != c) return 0;
  const tpu_shape *x = &cv->operands[0]->shape;
  if (!tpu_dtype_is_float(x->dtype) || !tpu_dtype_is_float(cv->shape.dtype) ||
      tpu_dtype_size(x->dtype) >= tpu_dtype_size(cv->shape.dtype))
    return 0;
  return same_order(x, &w->shape);
}

tpu_status tpu__fuse_window_widen(tpu_builder *b, tpu_comp *entry) {
  if (!entry) return TPU_OK;
  int n = entry->ninstrs, changed = 0;
  for (int i = 0; i < n; i++) {
    tpu_instr *w = entry->instrs[i];
    if (!tpu__window_reads_narrow(entry, w)) continue;
    tpu_instr *cv = w->operands[0], *x = cv->operands[0];
    tpu_comp *fc = NULL;
    tpu_instr *p = NULL, *cc = NULL, *wc = NULL, *fu = NULL, *ops[2];
    TPU_TRY(tpu_build_comp(b, "fused_computation", entry, &fc));
    TPU_TRY(tpu_build_param(b, fc, 0, "param_0", &x->shape, &p));
    TPU_TRY(tpu_build_clone_instr(b, fc, cv, &p, &cc));
    /* widened in place, in x's layout (the window reads x as it lies) */
    if (x->shape.has_layout) {
      memcpy(cc->shape.minor_to_major, x->shape.minor_to_major, sizeof x->shape.minor_to_major[0] * (size_t)x->shape.rank);
      cc->shape.has_layout = 1;
    }
    ops[0] = cc;
    /* the init value: a scalar constant cloned in, else a parameter of its own */
    tpu_instr *init = w->operands[1], *ext[2] = {x, init};
    int next = 1;
    if (init->op == TPU_OP_CONSTANT) {
      TPU_TRY(tpu_build_clone_instr(b, fc, init, NULL, &ops[1]));
    } else {
      TPU_TRY(tpu_build_param(b, fc, 1, "param_1", &init->shape, &ops[1]));
      next = 2;
    }
    TPU_TRY(tpu_build_clone_instr(b, fc, w, ops, &wc));
    tpu_build_set_root(fc, wc);
    TPU_TRY(tpu_build_finish(b, fc));
    TPU_TRY(tpu_build_instr_like(b, entry, w, TPU_OP_FUSION, w->name, &w->shape, ext, next, &fu));
    TPU_TRY(tpu_build_set_attr(b, fu, "kind", "kLoop"));
    TPU_TRY(tpu_build_set_attr(b, fu, "calls", fc->name));
    tpu_build_replace_uses(entry, w, fu); /* the convert stays only for its other readers */
    /* the kernel keeps the window's name (a compiled program's op of that name) */
    const char *name = w->name;
    w->name = fu->name;
    fu->name = name;
    changed = 1;
  }
  if (!changed) return TPU_OK;
  return tpu_build_remove_dead(b, entry) < 0 ? b->d->status : TPU_OK;
}
