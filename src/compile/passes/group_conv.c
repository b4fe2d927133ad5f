/* Grouped convolutions in the group-split layout (part of the fuse pass, before the
 * program-edge relayouts of relayout.c).
 *
 * The XLA TPU compiler runs a convolution of G feature groups, each of more than one input
 * feature, as a convolution over [B, spatial..., G, Cg]: the features split into the groups
 * and the group made the innermost spatial dimension (its window G wide over the group
 * dimension dilated G times, so each group meets only its own filter). That convolution
 * writes its result in its own layout, the batch in the sublanes and the group's Cog =
 * C_out / G output features in the lanes, spatial dimensions and then G major
 * ({4,0,3,2,1} for [B,H,W,G,Cog]); with fewer features than the lanes and a larger batch
 * (tile.c), the batch in the lanes and the features in the sublanes ({0,4,3,2,1}). Unless
 * Cog fills whole lanes and the batch one sublane tile — then those tiles are the merged
 * [B,H,W,G*Cog] tiles in order — a `copy` merges the groups back into the features, a kernel
 * of its own, wherever the result goes (bench/fidelity/families/compiled, every generation:
 * gconv_b8_56x56_c256to512_g32_k1_f32's f32[8,56,56,32,16]{4,0,3,2,1} copied into
 * {2,4,3,1,0}, 1,412,992 cycles on v4 beside the convolution's 1,451,084; inside
 * resnext_fwd_b4_7x7x2048_g32, f32[4,7,7,32,32] {4,0,3,2,1} -> {4,3,0,2,1}, 23,542 cycles
 * on v4, between the grouped convolution and the next; gconv_b8_28x28_c16to16_g4_k3_f32's
 * [8,28,28,4,4]{0,4,3,2,1}; no copy for gconv_b4_7x7_c2048to4096_g32_k1_bf16, Cog = 128,
 * batch 4, whose kernel writes bf16[4,7,7,4096]{3,0,2,1} itself).
 *
 * tpusim's arrays are row-major, so the layouts are made explicit: the convolution's kernel
 * returns its result split and transposed to [spatial..., G, B, Cog] (or [..., G, Cog, B]),
 * and a kLoop kernel `copy.group` transposes it back and merges the groups. Values are
 * unchanged. Depthwise convolutions (one input feature per group) are not split so (their
 * own emitter, tile_conv.c). */
#include <stdio.h>
#include <string.h>

#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"

/* Is cv a grouped convolution the compiler runs in its 5-D form (group_form): feature groups
 * of more than one input feature each? */
static int group_formed(const tpu_instr *cv) {
  if (cv->op != TPU_OP_CONVOLUTION || !cv->has_conv_dims || cv->noperands != 2 || cv->batch_group_count > 1 ||
      cv->feature_group_count <= 1 || cv->shape.rank + 1 > TPU_MAX_RANK)
    return 0;
  const tpu_conv_dims *cd = cv->conv;
  int64_t g = cv->feature_group_count, cin = cv->operands[0]->shape.dims[cd->in_feature];
  int64_t cout = cv->shape.dims[cd->out_feature];
  return !(cin % g || cout % g || cin / g <= 1); /* depthwise: one input feature a group */
}

int tpu__group_split(const tpu_chip *chip, const tpu_instr *cv, int *few) {
  *few = 0;
  if (!group_formed(cv)) return 0;
  const tpu_conv_dims *cd = cv->conv;
  int64_t g = cv->feature_group_count, cin = cv->operands[0]->shape.dims[cd->in_feature];
  int64_t cout = cv->shape.dims[cd->out_feature], nb = cv->shape.dims[cd->out_batch];
  (void)cin;
  /* a batch of one: the compiler's kernel writes [spatial..., G, Cog] row-major, which is
   * the merged [1, spatial..., G * Cog] byte for byte (libtpu probe, bf16[1,10,10,128] in 16
   * groups on v5e and v6e: one convolution_reduce_fusion, no copy; batch 2, 4, 8: a copy) */
  if (nb <= 1) return 0;
  int64_t lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128;
  int64_t sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8;
  int64_t taps = 1, cog = cout / g;
  for (int i = 0; i < cd->nspatial; i++) taps *= cv->operands[1]->shape.dims[cd->k_spatial[i]];
  *few = tpu__conv_batch_in_lanes(1, taps, cog, nb, lanes);
  return *few || cog % lanes || nb > sub;
}


/* Shape s with dimension d split into (g, s->dims[d] / g) at d, d + 1. */
static tpu_shape split_dim(const tpu_shape *s, int d, int64_t g, tpu_dtype t) {
  tpu_shape r = *s;
  r.layout_tail = NULL;
  r.has_layout = 0;
  r.rank = s->rank + 1;
  r.dtype = t;
  for (int i = 0, k = 0; i < s->rank; i++) {
    if (i == d) {
      r.dims[k++] = g;
      r.dims[k++] = s->dims[i] / g;
    } else {
      r.dims[k++] = s->dims[i];
    }
  }
  return r;
}

/* dim_labels text of one operand: its batch (or input) letter at b, feature (output) letter
 * at f, spatial i at sp[i], the group (spatial n) at g; dimensions after `split` shifted by one. */
static void labels(char *out, int rank, char bl, int b, char fl, int f, const int64_t *sp, int n, int g) {
  for (int d = 0; d < rank; d++) out[d] = '?';
  out[rank] = 0;
  out[b] = bl;
  out[f] = fl;
  for (int i = 0; i < n; i++) out[sp[i]] = (char)('0' + i);
  out[g] = (char)('0' + n);
}

/* The XLA TPU compiler's form of grouped convolution cv inside fused computation fc: the
 * activations split to [.., G, Cg], the filter to [.., Cg, G, Cog], and one convolution with
 * the group an innermost spatial dimension (window G, stride G - 1, lhs_dilate G: output g
 * meets only input g, at tap g; its compiled programs' dim_labels=b012f_01i2o->b012f), its
 * result reshaped back. Values are unchanged (the dilation's holes add only zeros). */
static tpu_status group_form(tpu_builder *b, tpu_comp *fc, tpu_instr *cv) {
  const tpu_conv_dims *cd = cv->conv;
  int64_t g = cv->feature_group_count;
  int n = cd->nspatial, fi = (int)cd->in_feature, ko = (int)cd->k_out, fo = (int)cd->out_feature;
  tpu_instr *x = cv->operands[0], *w = cv->operands[1], *x5, *w5, *c5, *back;
  tpu_shape xs = split_dim(&x->shape, fi, g, x->shape.dtype), ws = split_dim(&w->shape, ko, g, w->shape.dtype);
  tpu_shape os = split_dim(&cv->shape, fo, g, cv->shape.dtype);
  TPU_TRY(tpu_build_instr(b, fc, TPU_OP_RESHAPE, "group_in", &xs, &x, 1, cv->loc, &x5));
  TPU_TRY(tpu_build_instr(b, fc, TPU_OP_RESHAPE, "group_filter", &ws, &w, 1, cv->loc, &w5));
  tpu_instr *ops[2] = {x5, w5};
  TPU_TRY(tpu_build_clone_instr(b, fc, cv, ops, &c5));
  c5->shape = os;
  /* dimensions after the split one move up by one */
  int64_t isp[TPU_MAX_RANK], ksp[TPU_MAX_RANK], osp[TPU_MAX_RANK];
  for (int i = 0; i < n; i++) {
    isp[i] = cd->in_spatial[i] < fi ? cd->in_spatial[i] : cd->in_spatial[i] + 1;
    ksp[i] = cd->k_spatial[i] < ko ? cd->k_spatial[i] : cd->k_spatial[i] + 1;
    osp[i] = cd->out_spatial[i] < fo ? cd->out_spatial[i] : cd->out_spatial[i] + 1;
  }
  int ib = (int)(cd->in_batch < fi ? cd->in_batch : cd->in_batch + 1);
  int ki = (int)(cd->k_in < ko ? cd->k_in : cd->k_in + 1);
  int ob = (int)(cd->out_batch < fo ? cd->out_batch : cd->out_batch + 1);
  char li[TPU_MAX_RANK + 1], lk[TPU_MAX_RANK + 1], lo[TPU_MAX_RANK + 1], dl[3 * TPU_MAX_RANK + 8];
  labels(li, xs.rank, 'b', ib, 'f', fi + 1, isp, n, fi);
  labels(lk, ws.rank, 'i', ki, 'o', ko + 1, ksp, n, ko);
  labels(lo, os.rank, 'b', ob, 'f', fo + 1, osp, n, fo);
  snprintf(dl, sizeof dl, "%s_%s->%s", li, lk, lo);
  TPU_TRY(tpu_build_set_attr(b, c5, "dim_labels", dl));
  TPU_TRY(tpu_build_set_attr(b, c5, "feature_group_count", "1"));
  /* the window: the old dimensions, then the group's */
  char wb[64 * (TPU_MAX_RANK + 1) + 64];
  static const char *const keys[] = {"size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal"};
  size_t a = (size_t)snprintf(wb, sizeof wb, "{");
  for (int f = 0; f < 6 && a < sizeof wb; f++) {
    a += (size_t)snprintf(wb + a, sizeof wb - a, "%s%s=", f ? " " : "", keys[f]);
    for (int i = 0; i <= n && a < sizeof wb; i++) {
      const tpu_window_dim *d = i < n && i < cv->nwindow ? &cv->window[i] : NULL;
      const char *sep = i ? "x" : "";
      long long v = f == 0 ? (d ? d->size : g) : f == 1 ? (d ? d->stride : g - 1) : f == 3 ? (d ? d->base_dilation : g)
                                                                                  : f == 4 ? (d ? d->window_dilation : 1)
                                                                                  : (d && d->reversal ? 1 : 0);
      if (f == 2) a += (size_t)snprintf(wb + a, sizeof wb - a, "%s%lld_%lld", sep, d ? (long long)d->pad_lo : 0LL,
                                        d ? (long long)d->pad_hi : 0LL);
      else a += (size_t)snprintf(wb + a, sizeof wb - a, "%s%lld", sep, v);
    }
  }
  if (a < sizeof wb) snprintf(wb + a, sizeof wb - a, "}");
  TPU_TRY(tpu_build_set_attr(b, c5, "window", wb));
  TPU_TRY(tpu_build_instr(b, fc, TPU_OP_RESHAPE, "group_out", &cv->shape, &c5, 1, cv->loc, &back));
  tpu_build_replace_uses(fc, cv, back);
  back->operands[0] = c5;
  if (fc->root == cv) tpu_build_set_root(fc, back);
  return TPU_OK;
}


/* Does fused computation c reduce its parameter p (a reduce reading it through elementwise
 * ops, converts, reshapes or transposes)? */
static int reduces_param(const tpu_comp *c, const tpu_instr *p) {
  for (int i = 0; i < c->ninstrs; i++) {
    const tpu_instr *r = c->instrs[i];
    if (r->op != TPU_OP_REDUCE || r->noperands < 1) continue;
    const tpu_instr *x = r->operands[0];
    for (int depth = 0; depth < 8 && x; depth++) {
      if (x == p) return 1;
      tpu_op_class k = tpu_op_class_of(x->op);
      if (x->noperands < 1 || (k != TPU_CLS_UNARY && k != TPU_CLS_BINARY && x->op != TPU_OP_CONVERT &&
                               x->op != TPU_OP_RESHAPE && x->op != TPU_OP_TRANSPOSE && x->op != TPU_OP_BITCAST))
        break;
      const tpu_instr *next = NULL;
      for (int j = 0; j < x->noperands && !next; j++)
        if (x->operands[j] == p || x->operands[j]->op != TPU_OP_BROADCAST) next = x->operands[j];
      x = next;
    }
  }
  return 0;
}


typedef struct {
  tpu_builder *b;
  tpu_comp *c;
  const tpu_instr *m; /* the merged value [.., C] */
  tpu_instr *t;       /* the split one [.., G, Cog] */
  int fd;             /* the features' dimension of m (G at fd, Cog at fd + 1 in t) */
  int64_t g;
  const int64_t *perm; /* the convolution's layout (split_one): physical order, major first */
  int r5;
  const tpu_instr *from[32];
  tpu_instr *to[32];
  int n;
} chain;

static int same_dims(const tpu_shape *a, const tpu_shape *b) {
  return a->rank == b->rank && !memcmp(a->dims, b->dims, sizeof a->dims[0] * (size_t)a->rank);
}

/* Shape s (of the split rank) laid out as the convolution writes it: perm lists the split
 * dimensions major first, so the lanes hold perm[r5 - 1] and the sublanes perm[r5 - 2]. The
 * XLA TPU compiler's statistics kernel computes in this layout, not in the one that pads
 * least: resnext_fwd_b8_28x28x512_g32's multiply_reduce_fusion works on
 * f32[8,28,28,32,8]{4,0,3,2,1:T(8,128)}, 8 of 128 lanes, 365,408 cycles on v5e beside
 * 23,367 for the same statistics on the ungrouped bf16[8,28,28,256] (14.6 and 14.9 cycles
 * per register). The value is marked `tile_layout=kept`: the back end counts its registers
 * and tiles in that layout (tile.c value_vregs, layout.c reduce_tiled_elems), where it lays
 * out other fused values as they pad least. */
static void set_split_layout(tpu_shape *s, const int64_t *perm, int r5) {
  s->has_layout = 1;
  s->layout_tail = NULL;
  for (int k = 0; k < r5; k++) s->minor_to_major[k] = (int8_t)perm[r5 - 1 - k];
}

static tpu_status keep_layout(tpu_builder *b, tpu_instr *x) { return tpu_build_set_attr(b, x, "tile_layout", "kept"); }

/* x (of the merged shape, computed from it elementwise) in the split shape, or NULL. */
static tpu_instr *split_of(chain *k, const tpu_instr *x, int depth) {
  if (x == k->m) return k->t;
  for (int i = 0; i < k->n; i++)
    if (k->from[i] == x) return k->to[i];
  if (depth > 12 || k->n == 32 || !same_dims(&x->shape, &k->m->shape)) return NULL;
  tpu_shape s = split_dim(&x->shape, k->fd, k->g, x->shape.dtype);
  set_split_layout(&s, k->perm, k->r5);
  tpu_instr *r = NULL, *ops[3];
  tpu_op_class cl = tpu_op_class_of(x->op);
  char buf[64];
  if (x->op == TPU_OP_BROADCAST && x->noperands == 1) {
    tpu_instr *o = x->operands[0];
    if (o->shape.rank == 0) {
      if (tpu_build_instr(k->b, k->c, TPU_OP_BROADCAST, "group_bcast", &s, &o, 1, x->loc, &r) != TPU_OK) return NULL;
      if (tpu_build_set_attr(k->b, r, "dimensions", "{}") != TPU_OK) return NULL;
    } else if (o->shape.rank == 1 && x->dimensions.n == 1 && x->dimensions.v[0] == k->fd) {
      tpu_shape os = split_dim(&o->shape, 0, k->g, o->shape.dtype);
      tpu_instr *o2;
      if (tpu_build_instr(k->b, k->c, TPU_OP_RESHAPE, "group_split", &os, &o, 1, x->loc, &o2) != TPU_OK) return NULL;
      if (tpu_build_instr(k->b, k->c, TPU_OP_BROADCAST, "group_bcast", &s, &o2, 1, x->loc, &r) != TPU_OK) return NULL;
      snprintf(buf, sizeof buf, "{%d,%d}", k->fd, k->fd + 1);
      if (tpu_build_set_attr(k->b, r, "dimensions", buf) != TPU_OK) return NULL;
    } else {
      return NULL;
    }
  } else if ((cl == TPU_CLS_UNARY || cl == TPU_CLS_BINARY || cl == TPU_CLS_TERNARY || x->op == TPU_OP_CONVERT) &&
             x->noperands <= 3) {
    for (int i = 0; i < x->noperands; i++)
      if (!(ops[i] = split_of(k, x->operands[i], depth + 1))) return NULL;
    if (tpu_build_clone_instr(k->b, k->c, x, ops, &r) != TPU_OK) return NULL;
    r->shape = s;
  } else {
    return NULL;
  }
  if (keep_layout(k->b, r) != TPU_OK) return NULL;
  k->from[k->n] = x, k->to[k->n] = r, k->n++;
  return r;
}

/* The reduces of fused computation c over the merged value m computed in the split shape t:
 * elementwise ops on the group-split registers (Cog of the lanes), as the compiler's kernel
 * computes a batch norm's statistics on its split result, the features' dimension kept;
 * the reduced dimensions are summed in the same order (values unchanged). */
static tpu_status split_reduces(tpu_builder *b, tpu_comp *c, const tpu_instr *m, tpu_instr *t, int fd, int64_t g,
                                const int64_t *perm, int rank5) {
  chain k;
  memset(&k, 0, sizeof k);
  k.b = b, k.c = c, k.m = m, k.t = t, k.fd = fd, k.g = g, k.perm = perm, k.r5 = rank5;
  int n = c->ninstrs;
  for (int i = 0; i < n; i++) {
    tpu_instr *r = c->instrs[i];
    if (r->op != TPU_OP_REDUCE || r->noperands != 2 || r->shape.dtype == TPU_TUPLE ||
        !same_dims(&r->operands[0]->shape, &m->shape) || tpu_i64s_find(&r->dimensions, fd) >= 0)
      continue;
    tpu_instr *x5 = split_of(&k, r->operands[0], 0);
    if (!x5) continue;
    int rfd = fd; /* the features' position in r's result */
    int64_t dims[TPU_MAX_RANK];
    for (int j = 0; j < r->dimensions.n; j++) {
      rfd -= r->dimensions.v[j] < fd;
      dims[j] = r->dimensions.v[j] < fd ? r->dimensions.v[j] : r->dimensions.v[j] + 1;
    }
    tpu_shape rs = split_dim(&r->shape, rfd, g, r->shape.dtype);
    tpu_instr *ops[2] = {x5, r->operands[1]}, *r5, *back;
    char buf[TPU_MAX_RANK * 24 + 4];
    TPU_TRY(tpu_build_clone_instr(b, c, r, ops, &r5));
    r5->shape = rs;
    TPU_TRY(tpu_build_set_attr(b, r5, "dimensions", tpu_dims_text(buf, sizeof buf, dims, r->dimensions.n)));
    TPU_TRY(tpu_build_instr(b, c, TPU_OP_RESHAPE, "group_merge", &r->shape, &r5, 1, r->loc, &back));
    tpu_build_replace_uses(c, r, back);
    back->operands[0] = r5;
    if (c->root == r) tpu_build_set_root(c, back);
  }
  if (tpu_build_remove_dead(b, c) < 0) return b->d->status;
  return TPU_OK;
}

/* The kernels that reduce the merged result (a batch norm's statistics) read the split one
 * instead, as the XLA TPU compiler's do: resnext_fwd_b4_14x14x1024_g32's multiply_reduce_fusion
 * reads the grouped convolution's bf16[4,14,14,32,16]{4,0,3,2,1} (43,796 cycles on v6e) and
 * reduces it to f32[32,16]; the merge copy serves the next convolution. tpusim's kernel takes
 * the split result as its parameter and merges it in its registers (values unchanged). */
static tpu_status split_readers(tpu_builder *b, tpu_comp *entry, tpu_instr *f, tpu_instr *merged,
                                const tpu__made_set *made, const int64_t *inv, int r5, int fd, int64_t g) {
  char buf[TPU_MAX_RANK * 24 + 4];
  int64_t perm[TPU_MAX_RANK];
  for (int d = 0; d < r5; d++) perm[inv[d]] = d;
  for (int i = 0; i < entry->ninstrs; i++) {
    tpu_instr *u = entry->instrs[i];
    if (u == merged || u->op != TPU_OP_FUSION || !u->calls || !tpu__made_has(made, u->calls)) continue;
    for (int j = 0; j < u->noperands; j++) {
      if (u->operands[j] != merged) continue;
      tpu_comp *c = u->calls;
      tpu_instr *p = NULL;
      for (int k = 0; k < c->ninstrs && !p; k++)
        if (c->instrs[k]->op == TPU_OP_PARAMETER && c->instrs[k]->index == j) p = c->instrs[k];
      if (!p || !reduces_param(c, p)) continue;
      tpu_shape whole = p->shape;
      /* inside the kernel: the parameter in the split layout, transposed back and merged */
      tpu_shape un = f->shape;
      for (int d = 0; d < r5; d++) un.dims[d] = f->shape.dims[inv[d]];
      set_split_layout(&un, perm, r5); /* the parameter's own bytes: a bitcast */
      p->shape = f->shape;
      tpu_instr *t, *m;
      TPU_TRY(tpu_build_instr(b, c, TPU_OP_TRANSPOSE, "group_unlayout", &un, &p, 1, p->loc, &t));
      TPU_TRY(tpu_build_set_attr(b, t, "dimensions", tpu_dims_text(buf, sizeof buf, inv, r5)));
      TPU_TRY(keep_layout(b, t));
      TPU_TRY(tpu_build_instr(b, c, TPU_OP_RESHAPE, "group_merge", &whole, &t, 1, p->loc, &m));
      tpu_build_replace_uses(c, p, m);
      t->operands[0] = p;
      m->operands[0] = t;
      TPU_TRY(split_reduces(b, c, m, t, fd, g, perm, r5));
      TPU_TRY(tpu_build_finish(b, c));
      u->operands[j] = f;
    }
  }
  return TPU_OK;
}

/* Tuple shape s with leaf li replaced by `leaf` (a fresh element array: a tuple's shapes may
 * share theirs). */
static tpu_status set_leaf(tpu_builder *b, tpu_shape *s, int li, const tpu_shape *leaf) {
  tpu_shape *e = tpu_arena_alloc(&b->m->arena, sizeof *e * (size_t)s->ntuple);
  if (!e) return TPU_FAIL(b->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory splitting a grouped convolution");
  for (int i = 0; i < s->ntuple; i++) e[i] = i == li ? *leaf : s->elems[i];
  s->elems = e;
  return TPU_OK;
}

/* The tiles of [.., rows, .., lanes, ..] (dimensions r and l of s) tiled with rows in the
 * sublanes and l in the lanes, the others major. */
static int64_t tiles_of(const tpu_chip *chip, const tpu_shape *s, int r, int l) {
  int64_t lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128;
  int64_t sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8, n = tpu_shape_numel(s);
  int64_t rows = s->dims[r], cols = s->dims[l];
  if (rows <= 0 || cols <= 0) return 0;
  return n / rows / cols * ((rows + sub - 1) / sub) * ((cols + lanes - 1) / lanes);
}

/* The XLA TPU compiler's layout copies around a grouped convolution whose merged result it
 * lays out with a spatial dimension (W) in the lanes, the least padded tiling (fewer features
 * than W, a batch of 4-16 in the sublanes or the lanes): its input, laid out so at the program's
 * edge, is copied into the split layout [B, spatial..., G, Cg] (Cg in the lanes and the batch in
 * the sublanes, or the batch in the lanes and Cg in the sublanes), and the result out of it back
 * into W in the lanes (from the split layout, or with the batch in the lanes from the merged
 * [B, spatial..., C] with C in the sublanes). Both are lane transposes the compiler charges per
 * tile of that split (or batch-in-lanes) side, whatever the side's memory and the dtype: compiled
 * families, tune, gconv_b8_56x56_c32to32_g2_k3_bf16's copy.2 and copy.4 (bf16[8,56,56,2,16]
 * {2,4,3,1,0} <-> {4,0,3,2,1}, 6,272 tiles) 58,478 / 38,784 / 52,140 / 34,800 cycles each on
 * v4 / v5e / v5p / v6e, gconv_b8_28x28_c16to16_g4_k3_f32's copy into [8,28,28,4,4]{0,4,3,2,1}
 * (3,136 tiles) exactly half; libtpu probes off the corpus (probes/group_lanes.py,
 * gconv_copies.py) chips' group_transpose_tile_cycles. Marks the convolution's kernel f with
 * group_in_tiles (the split input's tiles: the parameter copy feeding it pays them, copy_kind.c
 * tpu__group_transpose_tiles) and the merge copy cf with group_transpose (its tiles), where the
 * result's least padded tiling has the last spatial dimension in the lanes. Not a merge the
 * compiler keeps Cog in the lanes for (group_merge: a sublane relayout). */
static tpu_status mark_transposes(tpu_builder *b, const tpu_chip *chip, tpu_instr *f, tpu_instr *cf, const tpu_shape *xin,
                                  const tpu_conv_dims *cd, const tpu_shape *out, int few, int merge, int64_t g) {
  /* the probes' batches: 4, 8 and 16 fit alike */
  int64_t nb = out->dims[cd->out_batch];
  if (merge || cd->nspatial < 1 || g <= 1 || nb < 4 || nb > 16 || nb % 4) return TPU_OK;
  int q, m;
  tpu__least_tiling(chip, out, &q, &m);
  if (m != (int)cd->out_spatial[cd->nspatial - 1]) return TPU_OK;
  int fi = (int)cd->in_feature, ib = (int)cd->in_batch, fo = (int)cd->out_feature, ob = (int)cd->out_batch;
  /* a group's features dividing 16 (the probes' 4, 8, 16; with 12 the compiler copies through
   * other layouts: bf16 [8,48,48,24] in 2 groups) */
  if (16 % (xin->dims[fi] / g) || 16 % (out->dims[fo] / g)) return TPU_OK;
  tpu_shape xs = *xin, os = *out; /* the split shapes: [.., G, Cg, ..] with Cg at the features' place */
  xs.dims[fi] /= g;
  os.dims[fo] /= g;
  int wi = (int)cd->in_spatial[cd->nspatial - 1], wo = (int)cd->out_spatial[cd->nspatial - 1];
  /* each side's tiles: the split (or batch-in-lanes) side, and the side with W in the lanes */
  int64_t tin = (few ? tiles_of(chip, &xs, fi, ib) : tiles_of(chip, &xs, ib, fi)) * g;
  int64_t win = tiles_of(chip, &xs, fi, wi) * g;
  int64_t tout = few ? tiles_of(chip, out, fo, ob) : tiles_of(chip, &os, ob, fo) * g;
  int64_t wout = few ? tiles_of(chip, out, fo, wo) : tiles_of(chip, &os, fo, wo) * g;
  char buf[48];
  snprintf(buf, sizeof buf, "%lld,%lld", (long long)tin, (long long)win);
  TPU_TRY(tpu_build_set_attr(b, f, "group_in_tiles", buf));
  snprintf(buf, sizeof buf, "%lld,%lld", (long long)tout, (long long)wout);
  return tpu_build_set_attr(b, cf, "group_transpose", buf);
}

/* The split shape of s: feature dimension fd made [G, Cg] (G at fd, Cg at fd + 1); *w the
 * place of dimension wd in it. */
static tpu_shape split_at(const tpu_shape *s, int fd, int64_t g, int wd, int *w) {
  tpu_shape r = *s;
  r.layout_tail = NULL;
  r.has_layout = 0;
  r.rank = s->rank + 1;
  for (int d = 0, k = 0; d < s->rank; d++) {
    if (d == fd) {
      r.dims[k++] = g;
      r.dims[k++] = s->dims[d] / g;
    } else {
      r.dims[k++] = s->dims[d];
    }
  }
  *w = wd < fd ? wd : wd + 1;
  return r;
}

/* Does the XLA TPU compiler relay a grouped convolution whose merged features fill the lanes
 * through W (the last spatial dimension) in the lanes? Where a group's Cog output features
 * pad more in the lanes (G in the sublanes) than W does (Cog in the sublanes), it copies the
 * result out of the split layout into [B, spatial..., G, Cog] with W in the lanes (a lane
 * transpose charged per tile of both sides, group_transpose_*), bitcasts it to the merged
 * features and copies that into the features in the lanes; and its input likewise where a
 * group's Cg input features pad more in the lanes than W: the features out of the lanes, then
 * the lane transpose into the split layout. libtpu probes off the corpus
 * (probes/gconv_small_groups.py, data/gconv_small_groups.jsonl: f32 [4,28,28,256] in 32 groups,
 * 1x1, copies into and out of f32[4,28,28,32,8]{4,0,3,2,1} 294,378 / 171,360 cycles on v4,
 * 179,660 each on v5p, the features' lane copies 36,911 / 32,908; Cg 4-16, W 14-28, bf16 and
 * f32, 1x1 and 3x3 alike; W 7 with Cg 8 or Cog 32 with W 14 keep the sublane merge: compiled
 * families, tune, gconv_b4_7x7_c64to128_g8_k3_bf16, gconv_b8_14x14_c1024to1024_g32_k3_bf16).
 * In the probes' range: a batch of 2 or 4-16 (bf16 [2,28,28,256] in 32 groups: 163,968 /
 * 173,800 cycles each way on v4 / v5p, the law 153,554 / 157,296), a group's features dividing
 * 16 (with 12 the compiler goes through W in the lanes and the batch in the sublanes). */
static int wide_route(const tpu_chip *chip, const tpu_conv_dims *cd, const tpu_shape *out, const tpu_shape *xin,
                      int64_t g) {
  int64_t nb = out->dims[cd->out_batch];
  /* (v5e and v6e, keeping values in VMEM between kernels, make those copies within VMEM at a
   * few thousand cycles: f32 [4,28,28,256] in 32 groups, 4,000 each; their sublane merge
   * stands) */
  if (chip->cmem_bytes <= 0 && chip->tensorcores <= 1) return 0;
  if (cd->nspatial < 1 || g <= 1 || (nb != 2 && (nb < 4 || nb > 16 || nb % 4))) return 0;
  return !(16 % (xin->dims[cd->in_feature] / g) || 16 % (out->dims[cd->out_feature] / g));
}

/* The parameters of shape s (dims) that v is computed from by elementwise ops: *one the one
 * found (NULL for none); 0 where two differ, another op is met or the chain is deep. */
static int input_array(const tpu_instr *v, const tpu_shape *s, const tpu_instr **one, int depth) {
  if (v->op == TPU_OP_PARAMETER) {
    if (!same_dims(&v->shape, s)) return 1; /* (a broadcast's operand, a scale) */
    if (*one && *one != v) return 0;
    *one = v;
    return 1;
  }
  if (depth > 8) return 0;
  if (v->op == TPU_OP_BROADCAST || v->op == TPU_OP_CONSTANT) return 1;
  tpu_op_class k = tpu_op_class_of(v->op);
  int ew = k == TPU_CLS_UNARY || k == TPU_CLS_BINARY || k == TPU_CLS_TERNARY || v->op == TPU_OP_CONVERT ||
           v->op == TPU_OP_SELECT || v->op == TPU_OP_CLAMP;
  if (!ew || !same_dims(&v->shape, s)) return 0;
  for (int i = 0; i < v->noperands; i++)
    if (!input_array(v->operands[i], s, one, depth + 1)) return 0;
  return 1;
}

/* wide_route's copies in tpusim's own compilation: the merge copy cf marked group_transpose
 * with the tiles of its split and W-in-the-lanes sides, and, where the input's group pads
 * more in the lanes than W and f reads it as it is, a kLoop kernel `copy.group_in`
 * between them (values unchanged) marked likewise with the input's tiles. The features' lane
 * copies beside them (a tenth of the whole in the probes) are not made. */
static tpu_status mark_wide(tpu_builder *b, tpu_comp *entry, const tpu_chip *chip, tpu_instr *f, tpu_comp *fc,
                            const tpu_instr *cv_in, tpu_instr *cf, const tpu_shape *xin, const tpu_conv_dims *cd,
                            const tpu_shape *out, int64_t g, tpu__made_set *made) {
  int fi = (int)cd->in_feature, ib = (int)cd->in_batch, fo = (int)cd->out_feature, ob = (int)cd->out_batch;
  int wi = (int)cd->in_spatial[cd->nspatial - 1], wo = (int)cd->out_spatial[cd->nspatial - 1];
  tpu_shape xs = *xin, os = *out;
  xs.dims[fi] /= g;
  os.dims[fo] /= g;
  char buf[48];
  snprintf(buf, sizeof buf, "%lld,%lld", (long long)(tiles_of(chip, &os, ob, fo) * g),
           (long long)(tiles_of(chip, &os, fo, wo) * g));
  TPU_TRY(tpu_build_set_attr(b, cf, "group_transpose", buf));
  /* the merged result, W in the lanes, copied into the features in the lanes for its readers */
  if (!cf->shape.layout_tail && cf->shape.rank == out->rank) {
    tpu_shape to = cf->shape;
    tpu_instr *lane, *src = cf;
    tpu__tile_layout(&cf->shape, wo, fo);
    TPU_TRY(tpu_build_instr_like(b, entry, cf, TPU_OP_COPY, "copy.group_lanes", &to, &src, 1, &lane));
    tpu_build_replace_uses(entry, cf, lane);
    lane->operands[0] = cf;
  }
  int w5;
  tpu_shape xsp = split_at(xin, fi, g, wi, &w5);
  if (tpu__tiled_as(chip, &xsp, fi, fi + 1) <= tpu__tiled_as(chip, &xsp, fi + 1, w5)) return TPU_OK;
  /* the entry value f reads as the convolution's input, or the one array of its shape the
   * kernel computes it from elementwise (a batch norm's and relu's operand: the compiler
   * keeps those in a kernel of their own before its copies, which move as many tiles) */
  const tpu_instr *one = NULL;
  if (!input_array(cv_in, &cv_in->shape, &one, 0) || !one || one->parent != fc) return TPU_OK;
  cv_in = one;
  int k = (int)cv_in->index;
  if (k < 0 || k >= f->noperands) return TPU_OK;
  tpu_instr *x = f->operands[k];
  if (x->shape.rank != xin->rank || x->shape.layout_tail) return TPU_OK;
  tpu_comp *cc;
  tpu_instr *p, *c, *kin, *lane;
  /* the features out of the lanes: a copy into W in the lanes, the features in the sublanes */
  tpu_shape xsh = x->shape;
  tpu__tile_layout(&xsh, wi, fi);
  TPU_TRY(tpu_build_instr_like(b, entry, f, TPU_OP_COPY, "copy.group_lanes", &xsh, &x, 1, &lane));
  x = lane;
  tpu_shape ish = f->operands[k]->shape; /* the convolution reads it as before */
  TPU_TRY(tpu_build_comp(b, "fused_group_in", fc, &cc));
  TPU_TRY(tpu_build_param(b, cc, 0, "param_0", &xsh, &p));
  TPU_TRY(tpu_build_instr(b, cc, TPU_OP_COPY, "group_in", &ish, &p, 1, f->loc, &c));
  tpu_build_set_root(cc, c);
  TPU_TRY(tpu_build_finish(b, cc));
  TPU_TRY(tpu_build_instr_like(b, entry, f, TPU_OP_FUSION, "copy.group_in", &ish, &x, 1, &kin));
  TPU_TRY(tpu_build_set_attr(b, kin, "kind", "kLoop"));
  TPU_TRY(tpu_build_set_attr(b, kin, "calls", cc->name));
  snprintf(buf, sizeof buf, "%lld,%lld", (long long)(tiles_of(chip, &xs, ib, fi) * g),
           (long long)(tiles_of(chip, &xs, fi, wi) * g));
  TPU_TRY(tpu_build_set_attr(b, kin, "group_transpose", buf));
  if (!tpu__made_add(made, cc)) return TPU_FAIL(b->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory splitting '%s'", f->name);
  f->operands[k] = kin;
  return TPU_OK;
}

static tpu_status split_one(tpu_builder *b, tpu_comp *entry, tpu_instr *f, tpu__made_set *made, const tpu_chip *chip,
                            int *done) {
  *done = 0;
  tpu_comp *fc = f->calls;
  /* A kernel with several results (the convolution's and the per-channel sums taken from
   * its tiles, fuse_merge.c conv_column_sums: the compiler's convert_reduce_fusion, the g32
   * convolution's in resnext_*) splits the convolution's leaf li, which one
   * get-tuple-element `val` reads in the entry. */
  int li = -1;
  const tpu_instr *cv = NULL;
  tpu_instr *top = fc->root, *val = f;
  if (f->shape.dtype == TPU_TUPLE) {
    if (fc->root->op != TPU_OP_TUPLE || fc->root->noperands != f->shape.ntuple) return TPU_OK;
    for (int i = 0; i < fc->root->noperands; i++) {
      const tpu_instr *c = tpu__root_matmul(fc->root->operands[i], TPU_OP_CONVOLUTION);
      if (!c || c->shape.rank != fc->root->operands[i]->shape.rank) continue;
      if (cv) return TPU_OK; /* two convolutions' results */
      cv = c, li = i;
    }
    if (!cv) return TPU_OK;
    top = fc->root->operands[li];
    val = NULL;
    for (int i = 0; i < entry->ninstrs; i++) {
      tpu_instr *u = entry->instrs[i];
      if (u->op != TPU_OP_GET_TUPLE_ELEMENT || u->noperands != 1 || u->operands[0] != f || u->index != li) continue;
      if (val) return TPU_OK;
      val = u;
    }
    if (!val) return TPU_OK;
  } else {
    cv = tpu__root_matmul(fc->root, TPU_OP_CONVOLUTION);
  }
  int few;
  if (!cv || val->shape.rank != cv->shape.rank) return TPU_OK;
  if (!tpu__group_split(chip, cv, &few)) {
    /* no merge copy (a batch of one, or whole lane tiles of features and one sublane tile
     * of batch): the convolution still runs in the compiler's 5-D form, its taps one
     * contraction, not each padded to the lanes (libtpu probes outside the corpus: bf16
     * [1,14,14,256] in 8 groups, 3x3, 18,082 cycles on v5e, 2,280 on v6e, as [2,14,14,256]'s
     * 18,672 / 3,948; test_passes_group) */
    if (group_formed(cv)) {
      TPU_TRY(group_form(b, fc, (tpu_instr *)cv));
      if (tpu_build_remove_dead(b, fc) < 0) return b->d->status; /* the grouped convolution */
      TPU_TRY(tpu_build_finish(b, fc));
      *done = 1;
    }
    return TPU_OK;
  }
  /* the convolution in the compiler's form first (its result's layout below) */
  tpu_conv_dims cdims = *cv->conv;
  int64_t g = cv->feature_group_count;
  const tpu_shape xin = cv->operands[0]->shape;
  const tpu_instr *cv_in = cv->operands[0];
  TPU_TRY(group_form(b, fc, (tpu_instr *)cv));
  top = li < 0 ? fc->root : fc->root->operands[li]; /* (the convolution's result, re-formed) */
  const tpu_conv_dims *cd = &cdims;
  int rank = val->shape.rank, r5 = rank + 1, fd = (int)cd->out_feature, bd = (int)cd->out_batch;
  /* the split shape [.., G, Cog, ..] (the features' dimension fd becomes G at fd, Cog at fd + 1) */
  tpu_shape split = val->shape;
  split.layout_tail = NULL;
  split.has_layout = 0;
  split.rank = r5;
  for (int d = 0, k = 0; d < rank; d++) {
    if (d == fd) {
      split.dims[k++] = g;
      split.dims[k++] = val->shape.dims[d] / g;
    } else {
      split.dims[k++] = val->shape.dims[d];
    }
  }
  int b5 = bd < fd ? bd : bd + 1;
  /* the convolution's layout: spatial dimensions in order, G, then batch and Cog */
  int64_t perm[TPU_MAX_RANK], inv[TPU_MAX_RANK];
  int n = 0;
  for (int d = 0; d < r5; d++)
    if (d != b5 && d != fd && d != fd + 1) perm[n++] = d;
  perm[n++] = fd;
  perm[n++] = few ? fd + 1 : b5;
  perm[n++] = few ? b5 : fd + 1;
  for (int i = 0; i < r5; i++) inv[perm[i]] = i;
  tpu_shape conv_shape = split;
  for (int i = 0; i < r5; i++) conv_shape.dims[i] = split.dims[perm[i]];
  char buf[TPU_MAX_RANK * 24 + 4];
  /* inside the convolution's kernel: split, then into the convolution's layout */
  tpu_instr *rs, *t_in;
  TPU_TRY(tpu_build_instr(b, fc, TPU_OP_RESHAPE, "group_split", &split, &top, 1, top->loc, &rs));
  TPU_TRY(tpu_build_instr(b, fc, TPU_OP_TRANSPOSE, "group_layout", &conv_shape, &rs, 1, top->loc, &t_in));
  TPU_TRY(tpu_build_set_attr(b, t_in, "dimensions", tpu_dims_text(buf, sizeof buf, perm, r5)));
  if (li < 0) {
    tpu_build_set_root(fc, t_in);
  } else {
    fc->root->operands[li] = t_in;
    TPU_TRY(set_leaf(b, &fc->root->shape, li, &conv_shape));
    TPU_TRY(set_leaf(b, &f->shape, li, &conv_shape));
  }
  if (tpu_build_remove_dead(b, fc) < 0) return b->d->status; /* the grouped convolution */
  TPU_TRY(tpu_build_finish(b, fc));
  tpu_shape out_shape = val->shape;
  val->shape = conv_shape;
  /* the copy merging the groups back into the features: a kLoop kernel of its own */
  tpu_comp *cc;
  tpu_instr *p, *t_out, *merged, *cf;
  TPU_TRY(tpu_build_comp(b, "fused_group_merge", fc, &cc));
  TPU_TRY(tpu_build_param(b, cc, 0, "param_0", &conv_shape, &p));
  TPU_TRY(tpu_build_instr(b, cc, TPU_OP_TRANSPOSE, "group_unlayout", &split, &p, 1, f->loc, &t_out));
  TPU_TRY(tpu_build_set_attr(b, t_out, "dimensions", tpu_dims_text(buf, sizeof buf, inv, r5)));
  out_shape.layout_tail = NULL;
  TPU_TRY(tpu_build_instr(b, cc, TPU_OP_RESHAPE, "group_merge", &out_shape, &t_out, 1, f->loc, &merged));
  tpu_build_set_root(cc, merged);
  TPU_TRY(tpu_build_finish(b, cc));
  TPU_TRY(tpu_build_instr_like(b, entry, f, TPU_OP_FUSION, "copy.group", &out_shape, &val, 1, &cf));
  TPU_TRY(tpu_build_set_attr(b, cf, "kind", "kLoop"));
  TPU_TRY(tpu_build_set_attr(b, cf, "calls", cc->name));
  /* With the batch in the sublanes and the merged features filling the lanes, the compiler's
   * merge copy keeps Cog in the lanes: a sublane relayout (copy_kind.c relayout_tiles), marked
   * with the features' dimension of its split shape. With the batch in the lanes it moves
   * them, and with fewer merged features than the lanes the result may be laid out with a
   * spatial dimension in the lanes, the copy a transpose of them
   * (gconv_b8_56x56_c32to32_g2_k3_bf16: bf16[8,56,56,2,16] {4,0,3,2,1} -> {2,4,3,1,0}).
   * With fewer merged features than the lanes the compiler still keeps Cog in the lanes, G in
   * the sublanes in tiles of G rows, where that pads no more than W in the lanes and Cog in
   * the sublanes: its copy is then the same sublane relayout (compiled families, tune split,
   * 4 of 4 such programs, e.g. gconv_b4_14x14_c16to32_g2_k5_bf16's copy.5 into
   * bf16[4,14,14,2,16]{4,3,0,2,1:T(2,128)}, 784 tiles, 11,530 cycles on v4, 8,933 on v5e;
   * gconv_b2_14x14_c64to64_g4_k3_f32's into T(4,128); the W-minor merges where W is 56). */
  int64_t lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128;
  int w5 = -1;
  if (cd->nspatial > 0) {
    int wd = (int)cd->out_spatial[cd->nspatial - 1];
    w5 = wd < fd ? wd : wd + 1;
  }
  int cog_minor = w5 >= 0 && tpu__tiled_as(chip, &split, fd, fd + 1) <= tpu__tiled_as(chip, &split, fd + 1, w5);
  /* Features filling the lanes, but a group's Cog padding more in the lanes than W: the
   * compiler merges through W in the lanes (wide_route), not by a sublane relayout */
  int wide = !few && out_shape.dims[fd] >= lanes && !cog_minor && wide_route(chip, cd, &out_shape, &xin, g);
  int merge = !few && !wide && (out_shape.dims[fd] >= lanes || cog_minor);
  if (merge) {
    snprintf(buf, sizeof buf, "%d", fd);
    TPU_TRY(tpu_build_set_attr(b, cf, "group_merge", buf));
  }
  if (!wide) TPU_TRY(mark_transposes(b, chip, f, cf, &xin, cd, &out_shape, few, merge, g));
  if (!tpu__made_add(made, cc)) return TPU_FAIL(b->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory splitting '%s'", f->name);
  tpu_build_replace_uses(entry, val, cf);
  cf->operands[0] = val; /* replace_uses rewired the copy's own operand too */
  TPU_TRY(split_readers(b, entry, val, cf, made, inv, r5, fd, g));
  if (wide) TPU_TRY(mark_wide(b, entry, chip, f, fc, cv_in, cf, &xin, cd, &out_shape, g, made));
  *done = 1;
  return TPU_OK;
}

tpu_status tpu__fuse_group_layout(tpu_builder *b, tpu_comp *entry, tpu__made_set *made, const tpu_chip *chip) {
  int changed = 0, n = entry->ninstrs;
  for (int i = 0; i < n; i++) {
    tpu_instr *v = entry->instrs[i];
    if (v->op != TPU_OP_FUSION || !v->calls || !tpu__made_has(made, v->calls)) continue;
    int done;
    TPU_TRY(split_one(b, entry, v, made, chip, &done));
    changed |= done;
  }
  return changed ? tpu_build_finish(b, entry) : TPU_OK;
}
