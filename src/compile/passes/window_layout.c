/* The layout a pooling reduce-window runs in (part of the fuse pass's first step, own
 * compilation only: a compiled program's layouts are its own).
 *
 * The XLA TPU compiler's layout assignment gives a reduce-window the layout of its result
 * that pads least in whole (sublanes x lanes) tiles, where that pads strictly less than its
 * operand's layout would; on a tie it keeps its operand's, unless the result's own
 * (row-major) layout ties too: then that (libtpu v5e probes outside the corpus: f32 and bf16
 * [32,33,33,128] laid out {3,0,2,1} and max-pooled 2x2/2, 2x2/1 or 3x3/2 into [32,16,16,128]
 * or [32,32,32,128], which pad alike either way, run row-major after a copy of the
 * parameter; pooled 3x3/1 into [32,31,31,128], 31 rows padding to 32 row-major, they stay
 * {3,0,2,1}, a kOutput kernel). Read from the 22 pooling programs
 * of bench/fidelity (families and corpus, the same on v4, v5e, v5p and v6e):
 * f32[32,112,112,3] laid out {2,1,3,0} is pooled into f32[32,110,110,3]{2,0,3,1} (110 in the
 * lanes and the batch of 32 in the sublanes pads 1.16x, {2,1,3,0} 1.19x); f32[8,56,56,256]
 * row-major into f32[8,18,18,256]{3,0,2,1} (18 rows pad to 24 row-major); f32[8,112,112,512]
 * and f32[8,3000,512] stay row-major (nothing to pad either way); bf16[1,112,112,64]{2,3,1,0}
 * stays {2,3,1,0}; bf16[32,112,112,64]{2,3,1,0} is pooled row-major (it ties with
 * {3,0,2,1}, both 2x, where {2,3,1,0} pads 2.3x).
 *
 * Where the window slides along the tile of that layout (its sublanes or lanes) and an entry
 * parameter arrives tiled otherwise, a `copy` into the window's layout is a kernel of its own
 * (f32[32,112,112,3] {2,1,3,0} -> {2,0,3,1}: 15,330 cycles on v5e, then the reduce-window).
 * Where it slides along major dimensions only, the compiler runs the reduce-window as a
 * convolution-like kOutput kernel that relays its operand out as it reads it (its
 * fusion.2 of f32[8,56,56,256] holds the copy to {3,0,2,1}): no copy of its own. Scans and
 * windows over a whole dimension are left as they are (scan_rewrite.c, tile.c). */
#include <string.h>

#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"

/* Does reduce-window w slide along dimension d of its operand? */
static int slides(const tpu_instr *w, int d) {
  return d >= 0 && d < w->nwindow && (w->window[d].size > 1 || w->window[d].stride > 1 || w->window[d].base_dilation > 1);
}

/* A pooling window: every dimension it slides along is longer than the window (not a scan
 * or a whole row's maximum), and it has one operand and one init value. */
static int pooling(const tpu_instr *w) {
  const tpu_shape *s = &w->operands[0]->shape;
  if (w->op != TPU_OP_REDUCE_WINDOW || w->noperands != 2 || w->shape.dtype == TPU_TUPLE || w->shape.rank < 2 ||
      w->nwindow != s->rank || w->shape.layout_tail || s->layout_tail)
    return 0;
  int any = 0;
  for (int d = 0; d < s->rank; d++) {
    if (!slides(w, d)) continue;
    if (w->window[d].size >= s->dims[d] && w->window[d].size > 1) return 0;
    any = 1;
  }
  return any;
}

static void tiling_of(const tpu_shape *s, int *second, int *minor) {
  *second = s->has_layout ? s->minor_to_major[1] : s->rank - 2;
  *minor = s->has_layout ? s->minor_to_major[0] : s->rank - 1;
}


/* Bytes of s tiled (second, minor) in whole (sublanes x lanes) tiles: the compiler weighs a
 * pooled value's layouts so, not in the smaller tiles of a value of few rows (f32[1,3,3,96]
 * is pooled row-major, 3 rows in one tile, not with its batch of 1 in 1-row tiles;
 * f32[8,3,3,3]{2,0,3,1} stays so, not {0,3,2,1} with its 3 features in 4-row tiles). */
static int64_t whole_tiles(const tpu_chip *chip, const tpu_shape *s, int second, int minor) {
  int64_t sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8, lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128;
  int64_t major = 1;
  for (int d = 0; d < s->rank; d++)
    if (d != second && d != minor) major *= s->dims[d];
  return major * ((s->dims[second] + sub - 1) / sub * sub) * ((s->dims[minor] + lanes - 1) / lanes * lanes) *
         (int64_t)tpu_dtype_size(s->dtype);
}

/* Of layouts that pad alike, the one nearest row-major (tpu__least_tiling's order). */
int tpu__window_tiling(const tpu_chip *chip, const tpu_instr *w, int *second, int *minor) {
  if (!pooling(w)) return 0;
  const tpu_shape *s = &w->shape;
  int os, om;
  tiling_of(&w->operands[0]->shape, &os, &om);
  *second = os, *minor = om;
  int64_t best = whole_tiles(chip, s, os, om);
  /* its own (declared, row-major) tiling where that pads no more than the operand's */
  int rs, rm;
  tiling_of(s, &rs, &rm);
  int64_t own = whole_tiles(chip, s, rs, rm);
  if (own <= best) best = own, *second = rs, *minor = rm;
  for (int m = s->rank - 1; m >= 0; m--)
    for (int q = s->rank - 1; q >= 0; q--) {
      if (q == m) continue;
      int64_t b = whole_tiles(chip, s, q, m);
      if (b < best) best = b, *second = q, *minor = m;
    }
  return 1;
}

int tpu__window_in_tile(const tpu_instr *w, int second, int minor) { return slides(w, second) || slides(w, minor); }

int tpu__window_kernel(const tpu_instr *w) {
  if (w->op != TPU_OP_REDUCE_WINDOW || !w->shape.has_layout || !pooling(w)) return 0;
  return !tpu__window_in_tile(w, w->shape.minor_to_major[1], w->shape.minor_to_major[0]);
}

tpu_status tpu__fuse_window_layouts(tpu_builder *b, tpu_comp *entry, const tpu_chip *chip, int *changed) {
  int n = entry->ninstrs;
  for (int i = 0; i < n; i++) {
    tpu_instr *w = entry->instrs[i];
    int second, minor;
    if (w->op != TPU_OP_REDUCE_WINDOW || !tpu__window_tiling(chip, w, &second, &minor)) continue;
    tpu_instr *x = w->operands[0];
    int os, om;
    tiling_of(&x->shape, &os, &om);
    tpu_shape want = w->shape;
    if (os == second && om == minor && x->shape.has_layout)
      memcpy(want.minor_to_major, x->shape.minor_to_major, sizeof want.minor_to_major[0] * (size_t)want.rank);
    else
      tpu__tile_layout(&want, minor, second);
    want.has_layout = 1;
    if (!w->shape.has_layout || memcmp(w->shape.minor_to_major, want.minor_to_major, sizeof want.minor_to_major[0] * (size_t)want.rank)) {
      w->shape = want;
      *changed = 1;
    }
    if ((os == second && om == minor) || x->op != TPU_OP_PARAMETER || !tpu__window_in_tile(w, second, minor)) continue;
    /* the parameter through one copy per layout, shared by the windows that read it so */
    tpu_shape to = x->shape;
    tpu__tile_layout(&to, minor, second);
    tpu_instr *c = NULL;
    for (int k = n; k < entry->ninstrs && !c; k++) {
      tpu_instr *y = entry->instrs[k];
      if (y->op == TPU_OP_COPY && y->operands[0] == x &&
          !memcmp(y->shape.minor_to_major, to.minor_to_major, sizeof to.minor_to_major[0] * (size_t)to.rank))
        c = y;
    }
    if (!c) TPU_TRY(tpu_build_instr_like(b, entry, x, TPU_OP_COPY, "copy.relayout", &to, &x, 1, &c));
    w->operands[0] = c;
    *changed = 1;
  }
  return TPU_OK;
}
