/* The layout a sort runs in (part of the fuse pass's entry layouts, after param_layout.c's).
 *
 * The XLA TPU compiler's sort of a [B, N] array along its minor dimension N runs with the
 * batch in the lanes and N in the sublanes (layout {0,1}: 128 independent sorts side by
 * side) unless N fills the lanes and B does not: {0,1} when N < 128 or B, rounded up to the
 * sublanes (8), reaches 128; else the array as it is ({1,0}). libtpu probes on v5p of f32
 * [B, N] sorted with an iota: 96, 112, 120 x 256 and 112, 120 x 1000 run {1,0}; 121, 124,
 * 127, 128 x 256, 8 x 8, 8 x 100, 16 x 64, 1 x 8, 1 x 127, 96 x 127 run {0,1}; 121 x 256 on
 * v5e and v6e and 16 x 64 on v4 alike; the families corpus's 24 compiled sorts follow it
 * (sort_64x100_bf16 {0,1}, sort_kv_1x1000_f32 {1,0}, sort_desc_8x1000_f32 {1,0},
 * top_k_b1024n8k2_f32 {0,1}, approx_max_k_b32n50257k4_f32's [32,256] {1,0}).
 *
 * The sort's operands come in that layout: an iota is generated in it; an entry parameter
 * laid out otherwise (param_layout.c: the layout that pads least) and a custom call's result
 * (PartialReduce's bins) are copied into it first, a kernel of their own (sort_64x100_bf16's
 * `copy` of bf16[64,100]{1,0}, approx_max_k_b128n50257k8_f32's copy.3 and copy.4 of the
 * bins); other producers are written in it by their own kernels (moe_top2's softmax
 * fusions), no copy. A sorted array that leaves the program, itself or through a slice
 * (top_k's first k) or elementwise ops, where the program's result is laid out otherwise
 * (the layout that pads least), is copied back whole before it: sort_64x100_bf16's copy.1,
 * top_k_b1024n4096k128_bf16's copy.2 and copy.3 of [1024,4096] before the slices,
 * approx_max_k_b1n8k8_f32's copy.1 and copy.2; top_k_b1024n8k2_f32's [1024,2] results pad
 * least in {0,1} and are sliced straight from the sort's. Values are unchanged. */
#include <string.h>

#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

static int same_tiling(const tpu_shape *s, int second, int minor) {
  int m = s->has_layout ? s->minor_to_major[0] : s->rank - 1;
  int q = s->has_layout ? s->minor_to_major[1] : s->rank - 2;
  return m == minor && q == second;
}

/* The program result v reaches through slices and elementwise ops (depth-limited), or NULL
 * when some use of it is neither or it does not leave the program. */
static const tpu_instr *leaves_as(const tpu_comp *entry, const tpu_uses *u, const tpu_instr *v, int depth) {
  if (tpu__entry_result(entry, v)) return v;
  if (depth > 6 || v->id < 0 || v->id >= u->n || u->nusers[v->id] != 1) return NULL;
  const tpu_instr *w = u->users[v->id][0];
  tpu_op_class c = tpu_op_class_of(w->op);
  if (w->op != TPU_OP_SLICE && c != TPU_CLS_UNARY && c != TPU_CLS_BINARY && w->op != TPU_OP_CONVERT) return NULL;
  return leaves_as(entry, u, w, depth + 1);
}

/* The tiling (second, minor) sort s runs in, or 0 when it is its operands' own. */
static int sort_tiling(const tpu_chip *chip, const tpu_instr *s, int *second, int *minor) {
  if (s->op != TPU_OP_SORT || s->noperands < 1 || s->dimensions.n != 1) return 0;
  const tpu_shape *x = &s->operands[0]->shape;
  int r = x->rank, d = (int)s->dimensions.v[0];
  if (r < 2 || d != r - 1 || x->layout_tail) return 0;
  int64_t lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128, sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8;
  int64_t n = x->dims[d], b = tpu_shape_numel(x) / (n > 0 ? n : 1);
  if (n >= lanes && (b + sub - 1) / sub * sub < lanes) return 0;
  *second = d;
  *minor = r - 2;
  return 1;
}

static tpu_status copy_to(tpu_builder *b, tpu_comp *c, tpu_instr *x, int second, int minor, const char *hint,
                          tpu_instr **out) {
  tpu_shape to = x->shape;
  to.layout_tail = NULL;
  tpu__tile_layout(&to, minor, second);
  return tpu_build_instr_like(b, c, x, TPU_OP_COPY, hint, &to, &x, 1, out);
}

tpu_status tpu__sort_layouts(tpu_builder *b, tpu_comp *entry, const tpu_chip *chip, int *changed) {
  tpu_uses u;
  TPU_TRY(tpu_build_uses(b, entry, &u));
  tpu_status st = TPU_OK;
  int n = entry->ninstrs;
  for (int i = 0; st == TPU_OK && i < n; i++) {
    tpu_instr *s = entry->instrs[i];
    int second, minor;
    if (!sort_tiling(chip, s, &second, &minor)) continue;
    for (int k = 0; st == TPU_OK && k < s->noperands; k++) {
      tpu_instr *o = s->operands[k];
      if (same_tiling(&o->shape, second, minor)) continue;
      if (o->op == TPU_OP_IOTA && u.nusers[o->id] == 1) {
        tpu__tile_layout(&o->shape, minor, second); /* generated in the sort's layout */
        *changed = 1;
      } else if (o->op == TPU_OP_PARAMETER ||
                 (o->op == TPU_OP_GET_TUPLE_ELEMENT && o->operands[0]->op == TPU_OP_CUSTOM_CALL)) {
        tpu_instr *c;
        st = copy_to(b, entry, o, second, minor, "copy.sort_layout", &c);
        if (st == TPU_OK) s->operands[k] = c, *changed = 1;
      }
    }
    /* its results in its layout */
    if (s->shape.dtype != TPU_TUPLE) tpu__tile_layout(&s->shape, minor, second);
    for (int k = 0; s->shape.dtype == TPU_TUPLE && k < s->shape.ntuple; k++)
      if (s->shape.elems[k].rank == s->operands[0]->shape.rank) tpu__tile_layout(&s->shape.elems[k], minor, second);
    for (int k = 0; s->id < u.n && k < u.nusers[s->id]; k++) {
      tpu_instr *g = u.users[s->id][k];
      if (g->op == TPU_OP_GET_TUPLE_ELEMENT && g->shape.rank == s->operands[0]->shape.rank)
        tpu__tile_layout(&g->shape, minor, second);
    }
    *changed = 1;
    /* the sorted arrays that leave the program laid out otherwise go back whole first */
    int single = s->shape.dtype != TPU_TUPLE; /* a sort of one array is its result itself */
    for (int k = 0; st == TPU_OK && s->id < u.n && k < (single ? 1 : u.nusers[s->id]); k++) {
      tpu_instr *g = single ? s : u.users[s->id][k];
      if ((!single && g->op != TPU_OP_GET_TUPLE_ELEMENT) || g->id >= u.n) continue;
      const tpu_instr *res = leaves_as(entry, &u, g, 0);
      if (!res || !tpu_dtype_is_array(res->shape.dtype) || res->shape.rank != g->shape.rank) continue;
      int rs = res->shape.rank - 2, rm = res->shape.rank - 1, ls, lm;
      if (tpu__least_tiling(chip, &res->shape, &ls, &lm) < tpu__tiled_as(chip, &res->shape, rs, rm)) rs = ls, rm = lm;
      if (rs == second && rm == minor) continue;
      tpu_instr *c;
      st = copy_to(b, entry, g, rs, rm, "copy.sort_result", &c);
      if (st != TPU_OK) break;
      for (int j = 0; j < u.nusers[g->id]; j++) {
        tpu_instr *w = u.users[g->id][j];
        for (int q = 0; q < w->noperands; q++)
          if (w->operands[q] == g) w->operands[q] = c;
      }
      if (tpu__entry_result(entry, g)) {
        if (entry->root == g) tpu_build_set_root(entry, c);
        else
          for (int q = 0; q < entry->root->noperands; q++)
            if (entry->root->operands[q] == g) entry->root->operands[q] = c;
      }
      *changed = 1;
    }
  }
  tpu_build_uses_free(&u);
  return st;
}
