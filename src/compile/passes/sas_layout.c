/* The layout a select-and-scatter (a max pool's gradient) runs in, and the copies around it
 * (own compilation only, part of the fuse pass's first step beside window_layout.c: a
 * compiled program's layouts are its own).
 *
 * The XLA TPU compiler lays a select-and-scatter out with the dimensions its window slides
 * along major, in order (the first the most major), and the two others in the tile: of
 * those, the pair (lanes, sublanes) that pads least in tiles of as few rows as the sublane
 * dimension has (1, 2, 4 or 8 rows; bf16 at least 2), the nearer row-major on a tie. Its
 * operand and its source are copied into that layout where they arrive laid out otherwise
 * (`copy`, `copy.1`), and its result copied back (`copy.2`) where the value leaves in
 * another layout (a program result: the least padded one where that pads strictly less
 * than row-major, relayout.c). libtpu probes off the corpus (bench/fidelity/probes/
 * sas_layout.py, data/sas_layout.jsonl, 10 max-pool gradients on v4, v5e, v5p and v6e,
 * every one of them so): f32[1,4000,32] {1,2,0} -> {2,0,1:T(1,128)} and back, f32[2,2500,96]
 * {2,0,1:T(2,128)}, f32[4,1200,256] {2,1,0} -> {2,0,1:T(4,128)}, bf16[2,60,60,32]
 * {2,3,1,0} -> {3,0,2,1:T(2,128)}, f32[3,50,50,8] -> {3,0,2,1:T(4,128)}; f32[16,9,9,5] runs
 * in {0,3,2,1:T(8,128)}, its parameter's least padded layout already: no copy; the families
 * corpus's five alike (f32[8,7,7,3] {2,0,3,1} -> {0,3,2,1:T(4,128)}). The source's
 * elementwise producer (the gradient's multiply) is laid out as its operand arrives (the
 * forward pool's layout, window_layout.c), as the compiler's layout assignment does.
 *
 * The copies are marked `sas_copy` (in, out): the back end times a lane-moving one into or
 * out of small tiles at the compiler's small-tile rate (copy_kind.c
 * tpu__small_tile_transpose_tiles), as it times the compiled program's. Values are
 * unchanged. */
#include <string.h>

#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

static int slides(const tpu_instr *w, int d) {
  return d >= 0 && d < w->nwindow && (w->window[d].size > 1 || w->window[d].stride > 1 || w->window[d].base_dilation > 1);
}

static int same_layout(const tpu_shape *a, const tpu_shape *b) {
  int ra = a->rank;
  for (int i = 0; i < ra; i++) {
    int x = a->has_layout ? a->minor_to_major[i] : ra - 1 - i, y = b->has_layout ? b->minor_to_major[i] : ra - 1 - i;
    if (x != y) return 0;
  }
  return 1;
}

int tpu__sas_layout(const tpu_chip *chip, const tpu_instr *s, tpu_shape *out) {
  if (s->op != TPU_OP_SELECT_AND_SCATTER || s->noperands != 3) return 0;
  const tpu_shape *x = &s->operands[0]->shape;
  int r = x->rank;
  if (r < 2 || s->nwindow != r || x->layout_tail ||
      s->shape.layout_tail || s->operands[1]->shape.layout_tail || s->shape.dtype == TPU_TUPLE)
    return 0;
  int q = -1, m = -1, nfree = 0, any = 0;
  for (int d = 0; d < r; d++) nfree += !slides(s, d), any |= slides(s, d);
  if (nfree < 2 || !any) return 0;
  int64_t best = -1;
  for (int mm = r - 1; mm >= 0; mm--)
    for (int qq = r - 1; qq >= 0; qq--) {
      if (qq == mm || slides(s, mm) || slides(s, qq)) continue;
      int64_t b = tpu__tiled_as(chip, x, qq, mm);
      if (best < 0 || b < best) best = b, q = qq, m = mm;
    }
  *out = *x;
  out->has_layout = 1;
  int j = 0;
  out->minor_to_major[j++] = (int8_t)m;
  out->minor_to_major[j++] = (int8_t)q;
  for (int d = r - 1; d >= 0; d--) /* the other free dimensions, then the window's, major in order */
    if (d != m && d != q && !slides(s, d)) out->minor_to_major[j++] = (int8_t)d;
  for (int d = r - 1; d >= 0; d--)
    if (slides(s, d)) out->minor_to_major[j++] = (int8_t)d;
  return 1;
}

/* The operand whose layout elementwise op v (unary, binary, convert) takes, as the compiler's
 * layout assignment has it: its first operand of v's own dimensions that is not a broadcast
 * or constant; NULL for other ops, none such, or past depth 8. */
static tpu_instr *layout_source(tpu_instr *v, int depth) {
  tpu_op_class c = tpu_op_class_of(v->op);
  if (depth >= 8 || !(c == TPU_CLS_UNARY || c == TPU_CLS_BINARY || v->op == TPU_OP_CONVERT)) return NULL;
  for (int i = 0; i < v->noperands; i++) {
    tpu_instr *o = v->operands[i];
    if (o->op != TPU_OP_BROADCAST && o->op != TPU_OP_CONSTANT && o->shape.rank == v->shape.rank &&
        !memcmp(o->shape.dims, v->shape.dims, sizeof v->shape.dims[0] * (size_t)v->shape.rank))
      return o;
  }
  return NULL;
}

/* The value whose layout v arrives in, through the elementwise ops laid out as an operand. */
static tpu_instr *arrival(tpu_instr *v, int depth) {
  tpu_instr *o = layout_source(v, depth);
  return o ? arrival(o, depth + 1) : v;
}

/* Sets v and the elementwise ops between it and its arrival (above) to layout l. */
static void lay_chain(tpu_instr *v, const tpu_shape *l, int depth) {
  memcpy(v->shape.minor_to_major, l->minor_to_major, sizeof l->minor_to_major[0] * (size_t)l->rank);
  v->shape.has_layout = 1;
  tpu_instr *o = layout_source(v, depth);
  if (o) lay_chain(o, l, depth + 1);
}

static tpu_status sas_copy(tpu_builder *b, tpu_comp *entry, tpu_instr *x, const tpu_shape *to, const char *hint,
                           const char *mark, tpu_instr **out) {
  tpu_shape s = x->shape; /* x's dimensions in to's layout */
  memcpy(s.minor_to_major, to->minor_to_major, sizeof to->minor_to_major[0] * (size_t)to->rank);
  s.has_layout = 1;
  s.layout_tail = NULL;
  TPU_TRY(tpu_build_instr_like(b, entry, x, TPU_OP_COPY, hint, &s, &x, 1, out));
  return tpu_build_set_attr(b, *out, "sas_copy", mark);
}

tpu_status tpu__sas_layouts(tpu_builder *b, tpu_comp *entry, const tpu_chip *chip, int *changed) {
  if (!entry || !chip) return TPU_OK;
  int n = entry->ninstrs;
  for (int i = 0; i < n; i++) {
    tpu_instr *s = entry->instrs[i];
    tpu_shape L;
    if (!tpu__sas_layout(chip, s, &L)) continue;
    /* The forward pool of the gradient (the source computed elementwise from a reduce-window of
     * the same operand x) runs in x's own layout, its elementwise consumers too: no relayout of x
     * for it (window_layout.c's copy.relayout is undone) — the compiler's copy of the source
     * reads x's layout in every probe (f32[4,1200,256] {2,1,0}, bf16[2,60,60,32] {2,3,1,0},
     * f32[1,3000,64] {1,2,0}), and where x arrives in the select-and-scatter's layout
     * (f32[4,20,20,128] {3,0,2,1}, f32[16,9,9,5] {0,3,2,1}) nothing is copied. */
    tpu_instr *x = s->operands[0], *src = s->operands[1], *r = arrival(src, 0);
    if (r != src && r->op == TPU_OP_REDUCE_WINDOW && r->noperands == 2 && x->shape.has_layout && !r->shape.layout_tail) {
      tpu_instr *ro = r->operands[0];
      if (ro->op == TPU_OP_COPY && ro->noperands == 1 && ro->operands[0] == x && ro->name &&
          !strncmp(ro->name, "copy.relayout", 13))
        r->operands[0] = ro = x;
      if (ro == x) {
        lay_chain(src, &x->shape, 0);
        *changed = 1;
      }
    } else if (r != src && r->shape.has_layout) { /* another producer: its elementwise consumers take its layout */
      lay_chain(src, &r->shape, 0);
      *changed = 1;
    }
    /* the operand and the source: copied in where they arrive otherwise */
    for (int k = 0; k < 2; k++) {
      tpu_instr *v = s->operands[k];
      if (same_layout(&v->shape, &L)) continue;
      tpu_instr *c = NULL;
      TPU_TRY(sas_copy(b, entry, v, &L, k ? "copy.sas_source" : "copy.sas_operand", "in", &c));
      s->operands[k] = c;
      *changed = 1;
    }
    /* its result: where it leaves in another layout, copied back */
    tpu_shape back = s->shape;
    if (tpu__entry_result(entry, s)) {
      int rr = back.rank, ls, lm;
      if (tpu__least_tiling(chip, &back, &ls, &lm) < tpu__tiled_as(chip, &back, rr - 2, rr - 1))
        tpu__tile_layout(&back, lm, ls);
      else
        tpu__tile_layout(&back, rr - 1, rr - 2);
    }
    memcpy(s->shape.minor_to_major, L.minor_to_major, sizeof L.minor_to_major[0] * (size_t)L.rank);
    s->shape.has_layout = 1;
    *changed = 1;
    if (same_layout(&back, &L)) continue;
    tpu_instr *o = NULL;
    TPU_TRY(sas_copy(b, entry, s, &back, "copy.sas_result", "out", &o));
    for (int k = 0; k < entry->ninstrs; k++) {
      tpu_instr *u = entry->instrs[k];
      if (u == o) continue;
      for (int q = 0; q < u->noperands; q++)
        if (u->operands[q] == s) u->operands[q] = o;
    }
    if (entry->root == s) tpu_build_set_root(entry, o);
  }
  return TPU_OK;
}
