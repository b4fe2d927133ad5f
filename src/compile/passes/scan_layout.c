/* The layout a short scan's kernel runs in (part of the fuse pass's entry layouts, after
 * param_layout.c's parameter layouts).
 *
 * The XLA TPU compiler's kernel of a scan of rank 3 or more (a reduce-window whose window is
 * one whole dimension, jnp.cumsum's lowering) reads and writes its value row-major in the
 * order scan_rewrite.c gives it: the scanned dimension most major (scan_rewrite.c's
 * transposes), or in the lanes. An entry parameter the scan reads directly, laid out
 * otherwise (param_layout.c: the tiling that pads least), is copied into row-major first, a
 * kernel of its own, and a scan whose result leaves the program, where the program's result
 * pads least otherwise, is copied back after it: s32[80,126,80] scanned along axis 0 arrives
 * {1,2,0} (80 rows of 126 lanes), is copied to {2,1,0}, scanned, and copied back
 * (cummax_80x126x80_ax0_s32, bench/fidelity/families/compiled, all four generations: copy,
 * fusion, copy.1); s32[64,100,64] scanned along axis 2 (in the lanes) alike, {1,2,0} -> {2,1,0}
 * and back (libtpu probe on v5e, bench/fidelity/probes/scan_window.py: copy and copy.1 of 8,064
 * cycles each). A scan of rank 2 runs in its operand's layout (cumsum_1000x33_ax1_bf16's
 * {0,1}: no copy). Values are unchanged. */
#include <string.h>

#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

/* A scan reduce-window of rank 3 or more that tpusim's own compilation runs as one kernel:
 * one operand and init, the window the whole of one dimension padded by its length less one
 * on one side, unit strides, no dilation; not a compiled program's (tiled layouts). */
static int scan_kernel(const tpu_instr *w) {
  if (w->op != TPU_OP_REDUCE_WINDOW || w->noperands != 2 || w->shape.dtype == TPU_TUPLE || w->shape.rank < 3 ||
      w->shape.layout_tail || w->operands[0]->shape.layout_tail)
    return 0;
  const tpu_shape *s = &w->operands[0]->shape;
  if (w->nwindow != s->rank) return 0;
  int found = 0;
  for (int i = 0; i < w->nwindow; i++) {
    const tpu_window_dim *x = &w->window[i];
    if (x->stride > 1 || x->base_dilation > 1 || x->window_dilation > 1) return 0;
    if (x->size == 1 && x->pad_lo == 0 && x->pad_hi == 0) continue;
    const int64_t n = s->dims[i];
    if (found || n < 2 || x->size != n || !((x->pad_lo == n - 1 && x->pad_hi == 0) || (x->pad_lo == 0 && x->pad_hi == n - 1)))
      return 0;
    found = 1;
  }
  return found;
}

static int row_major_shape(const tpu_shape *s) {
  if (!s->has_layout) return 1;
  for (int i = 0; i < s->rank; i++)
    if (s->minor_to_major[i] != s->rank - 1 - i) return 0;
  return 1;
}

static void set_row_major(tpu_shape *s) {
  s->has_layout = 1;
  for (int i = 0; i < s->rank; i++) s->minor_to_major[i] = (int8_t)(s->rank - 1 - i);
}

tpu_status tpu__scan_layouts(tpu_builder *b, tpu_comp *entry, const tpu_chip *chip, int *changed) {
  int n = entry->ninstrs;
  for (int i = 0; i < n; i++) {
    tpu_instr *w = entry->instrs[i];
    if (!scan_kernel(w)) continue;
    tpu_instr *x = w->operands[0];
    if (x->op == TPU_OP_PARAMETER && !row_major_shape(&x->shape)) {
      tpu_instr *c = NULL; /* one copy per parameter, shared by the scans that read it */
      for (int k = n; k < entry->ninstrs && !c; k++) {
        tpu_instr *y = entry->instrs[k];
        if (y->op == TPU_OP_COPY && y->noperands == 1 && y->operands[0] == x && row_major_shape(&y->shape)) c = y;
      }
      if (!c) {
        tpu_shape to = x->shape;
        to.layout_tail = NULL;
        set_row_major(&to);
        TPU_TRY(tpu_build_instr_like(b, entry, x, TPU_OP_COPY, "copy.scan_layout", &to, &x, 1, &c));
      }
      w->operands[0] = c;
      *changed = 1;
    }
    if (!tpu__entry_result(entry, w)) continue;
    /* the result leaves in the program's layout: the least padded where that pads less */
    const tpu_shape *s = &w->shape;
    int r = s->rank, ls, lm;
    if (tpu__least_tiling(chip, s, &ls, &lm) >= tpu__tiled_as(chip, s, r - 2, r - 1)) continue;
    set_row_major(&w->shape);
    tpu_shape to = *s;
    tpu__tile_layout(&to, lm, ls);
    tpu_instr *c;
    TPU_TRY(tpu_build_instr_like(b, entry, w, TPU_OP_COPY, "copy.scan_result", &to, &w, 1, &c));
    if (entry->root == w) {
      tpu_build_set_root(entry, c);
    } else {
      for (int q = 0; q < entry->root->noperands; q++)
        if (entry->root->operands[q] == w) entry->root->operands[q] = c;
    }
    *changed = 1;
  }
  return TPU_OK;
}
