/* spmd-partition's resharding: the collectives and slices that move a value from one
 * sharding to another (all-gather, all-to-all, collective-permute, reduce-scatter of partial
 * sums, each chip's block by dynamic-slice at an offset from partition-id), with the
 * bookkeeping the cost model reads (collectives emitted, their dependences). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strbuf.h"
#include "compile/passes/hlo_passes.h"
#include "compile/spmd/spmd_int.h"
#include "ir/build.h"

tpu_status tpu__spmd_fail_at(sp *s, const tpu_instr *in, const char *what) {
  return TPU_FAIL(s->d, TPU_ERR_UNSUPPORTED, in->loc, "spmd-partition: '%s' (%s): %s", tpu_instr_user_name(in),
                  tpu_op_name(in->op), what);
}

tpu_status tpu__spmd_instr(sp *s, tpu_opcode op, const char *hint, const tpu_shape *shape, tpu_instr *const *ops, int n,
                           tpu_loc loc, tpu_instr **out) {
  /* Named after the instruction it serves ("dot_general.9.all-reduce" for "spmd.all-reduce")
   * and carrying its metadata (JAX op and source line), so reports say which op of the
   * program a collective or a slice is for. */
  char name[192];
  if (s->cur && !strncmp(hint, "spmd.", 5)) {
    snprintf(name, sizeof name, "%s.%s", tpu_instr_user_name(s->cur), hint + 5);
    hint = name;
  }
  return s->cur ? tpu_build_instr_like(&s->b, s->c, s->cur, op, hint, shape, ops, n, out)
                : tpu_build_instr(&s->b, s->c, op, hint, shape, ops, n, loc, out);
}

/* convert(x) to dtype t on x's per-chip shape. */
tpu_status tpu__spmd_convert(sp *s, tpu_instr *x, tpu_dtype t, tpu_loc loc, tpu_instr **out) {
  tpu_shape c = x->shape;
  c.dtype = t;
  c.has_layout = 0;
  c.layout_tail = NULL;
  return tpu__spmd_instr(s, TPU_OP_CONVERT, t == TPU_BF16 ? "spmd.to_bf16" : "spmd.from_bf16", &c, &x, 1, loc, out);
}

tpu_shape tpu__spmd_scalar(tpu_dtype t) {
  tpu_shape sc;
  memset(&sc, 0, sizeof sc);
  sc.dtype = t;
  return sc;
}

tpu_status tpu__spmd_const(sp *s, tpu_dtype t, int64_t v, const tpu_shape *sh, tpu_loc loc, tpu_instr **out) {
  tpu_tensor c;
  TPU_TRY(tpu_tensor_alloc(&c, t, 0, NULL, s->d));
  tpu_tensor_set_i64(&c, 0, v);
  TPU_TRY(tpu_build_constant(&s->b, s->c, "spmd.c", &c, NULL, out));
  if (!sh) return TPU_OK;
  tpu_shape r = *sh;
  r.dtype = t;
  r.has_layout = 0;
  r.layout_tail = NULL;
  TPU_TRY(tpu__spmd_instr(s, TPU_OP_BROADCAST, "spmd.bcast", &r, out, 1, loc, out));
  return tpu_build_set_attr(&s->b, *out, "dimensions", "{}");
}

static tpu_status const_s32(sp *s, int64_t v, tpu_instr **out) {
  return tpu__spmd_const(s, TPU_S32, v, NULL, tpu_noloc(), out);
}

tpu_status tpu__spmd_gte(sp *s, tpu_instr *t, int i, tpu_loc loc, tpu_instr **out) {
  TPU_TRY(tpu__spmd_instr(s, TPU_OP_GET_TUPLE_ELEMENT, "spmd.gte", &t->shape.elems[i], &t, 1, loc, out));
  char ix[24];
  snprintf(ix, sizeof ix, "%d", i);
  return tpu_build_set_attr(&s->b, *out, "index", ix);
}

tpu_status tpu__spmd_tuple(sp *s, tpu_instr *const *parts, int n, tpu_loc loc, tpu_instr **out) {
  tpu_shape ts;
  memset(&ts, 0, sizeof ts);
  ts.dtype = TPU_TUPLE;
  ts.ntuple = n;
  ts.elems = tpu_arena_alloc(&s->m->arena, sizeof *ts.elems * (size_t)(n + 1));
  if (!ts.elems) return TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory");
  for (int i = 0; i < n; i++) ts.elems[i] = parts[i]->shape;
  return tpu__spmd_instr(s, TPU_OP_TUPLE, "spmd.tuple", &ts, parts, n, loc, out);
}

/* This chip's position in the mesh (s32[]): partition-id, through the mesh's device list. */
static tpu_status position(sp *s, tpu_loc loc, tpu_instr **out) {
  if (s->pos) {
    *out = s->pos;
    return TPU_OK;
  }
  tpu_shape u = tpu__spmd_scalar(TPU_U32), i32 = tpu__spmd_scalar(TPU_S32);
  tpu_instr *pid, *cv;
  TPU_TRY(tpu__spmd_instr(s, TPU_OP_PARTITION_ID, "spmd.pid", &u, NULL, 0, loc, &pid));
  TPU_TRY(tpu__spmd_instr(s, TPU_OP_CONVERT, "spmd.pid", &i32, &pid, 1, loc, &cv));
  if (s->mesh->ids) { /* position = inverse[device] */
    tpu_tensor t;
    int64_t n = s->mesh->ndev;
    TPU_TRY(tpu_tensor_alloc(&t, TPU_S32, 1, &n, s->d));
    for (int64_t p = 0; p < n; p++) tpu_tensor_set_i64(&t, s->mesh->ids[p], p);
    tpu_instr *tab, *ds, *args[2];
    TPU_TRY(tpu_build_constant(&s->b, s->c, "spmd.positions", &t, NULL, &tab));
    tpu_shape one = i32;
    one.rank = 1;
    one.dims[0] = 1;
    args[0] = tab;
    args[1] = cv;
    TPU_TRY(tpu__spmd_instr(s, TPU_OP_DYNAMIC_SLICE, "spmd.pos", &one, args, 2, loc, &ds));
    TPU_TRY(tpu_build_set_attr(&s->b, ds, "dynamic_slice_sizes", "{1}"));
    TPU_TRY(tpu__spmd_instr(s, TPU_OP_RESHAPE, "spmd.pos", &i32, &ds, 1, loc, &cv));
  }
  s->pos = cv;
  *out = cv;
  return TPU_OK;
}

/* This chip's block index along the axes of one dimension (s32[]). */
static tpu_status block_index(sp *s, const int8_t *axes, int n, tpu_loc loc, tpu_instr **out) {
  tpu_instr *pos, *acc = NULL;
  TPU_TRY(position(s, loc, &pos));
  tpu_shape i32 = tpu__spmd_scalar(TPU_S32);
  for (int i = 0; i < n; i++) {
    int a = axes[i];
    int64_t stride = 1;
    for (int b = a + 1; b < s->mesh->naxes; b++) stride *= s->mesh->sizes[b];
    tpu_instr *cs, *cz, *q, *r, *ops[2];
    TPU_TRY(const_s32(s, stride, &cs));
    TPU_TRY(const_s32(s, s->mesh->sizes[a], &cz));
    ops[0] = pos;
    ops[1] = cs;
    TPU_TRY(tpu__spmd_instr(s, TPU_OP_DIVIDE, "spmd.coord", &i32, ops, 2, loc, &q));
    ops[0] = q;
    ops[1] = cz;
    TPU_TRY(tpu__spmd_instr(s, TPU_OP_REMAINDER, "spmd.coord", &i32, ops, 2, loc, &r));
    if (!acc) {
      acc = r;
    } else {
      tpu_instr *m, *sum;
      ops[0] = acc;
      ops[1] = cz;
      TPU_TRY(tpu__spmd_instr(s, TPU_OP_MULTIPLY, "spmd.block", &i32, ops, 2, loc, &m));
      ops[0] = m;
      ops[1] = r;
      TPU_TRY(tpu__spmd_instr(s, TPU_OP_ADD, "spmd.block", &i32, ops, 2, loc, &sum));
      acc = sum;
    }
  }
  if (!acc) TPU_TRY(const_s32(s, 0, &acc));
  *out = acc;
  return TPU_OK;
}

/* replica_groups text: the devices that differ only in the given axes, ordered by their
 * block index along them (major first). */
static void groups_text(const tpu_mesh *mesh, const int8_t *axes, int n, tpu_strbuf *b) {
  int in[MAXA] = {0};
  int64_t gsize = 1;
  for (int i = 0; i < n; i++) in[axes[i]] = 1, gsize *= mesh->sizes[axes[i]];
  tpu_strbuf_printf(b, "{");
  int64_t ngroups = mesh->ndev / gsize;
  for (int64_t g = 0; g < ngroups; g++) {
    /* g enumerates the other axes' coordinates (mesh order). */
    int64_t c[MAXA] = {0}, r = g;
    for (int a = mesh->naxes - 1; a >= 0; a--)
      if (!in[a]) c[a] = r % mesh->sizes[a], r /= mesh->sizes[a];
    tpu_strbuf_printf(b, "%s{", g ? "," : "");
    for (int64_t j = 0; j < gsize; j++) {
      int64_t rj = j;
      for (int i = n - 1; i >= 0; i--) c[axes[i]] = rj % mesh->sizes[axes[i]], rj /= mesh->sizes[axes[i]];
      int64_t pos = 0;
      for (int a = 0; a < mesh->naxes; a++) pos = pos * mesh->sizes[a] + c[a];
      tpu_strbuf_printf(b, "%s%lld", j ? "," : "", (long long)(mesh->ids ? mesh->ids[pos] : pos));
    }
    tpu_strbuf_printf(b, "}");
  }
  tpu_strbuf_printf(b, "}");
}

unsigned tpu__spmd_axes_mask(const int8_t *axes, int n) {
  unsigned m = 0;
  for (int i = 0; i < n; i++) m |= 1u << axes[i];
  return m;
}

int tpu__spmd_in_entry(const sp *s) { return s->dep && s->old == s->m->entry; }

/* Whether an entry collective of kind op over `axes` whose input depends on the collectives
 * in `deps` could join one emitted before (combine-collectives merges independent ones). */
int tpu__spmd_joins_emitted(const sp *s, tpu_opcode op, unsigned axes, uint64_t deps) {
  if (!tpu__spmd_in_entry(s)) return 0;
  for (int i = 0; i < s->nemitted; i++)
    if (s->emitted[i].op == op && s->emitted[i].axes == axes && !(deps >> i & 1)) return 1;
  return 0;
}

/* Sets attribute `name` of x to the text built in b (then freed). */
tpu_status tpu__spmd_set_attr_text(sp *s, tpu_instr *x, const char *name, tpu_strbuf *b, tpu_loc loc) {
  tpu_status st = b->oom ? TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory") : tpu_build_set_attr(&s->b, x, name, b->s);
  tpu_strbuf_deinit(b);
  return st;
}

tpu_status tpu__spmd_set_groups(sp *s, tpu_instr *x, const int8_t *axes, int n) {
  if (tpu__spmd_in_entry(s) && s->nemitted < 64) {
    s->emitted[s->nemitted].op = x->op;
    s->emitted[s->nemitted].axes = tpu__spmd_axes_mask(axes, n);
    s->cur_bits |= (uint64_t)1 << s->nemitted++;
  }
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  groups_text(s->mesh, axes, n, &b);
  char ch[32];
  snprintf(ch, sizeof ch, "%d", ++s->channel);
  tpu_status st = b.oom ? TPU_FAIL(s->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory") : TPU_OK;
  if (st == TPU_OK) st = tpu_build_set_attr(&s->b, x, "channel_id", ch);
  if (st == TPU_OK) st = tpu_build_set_attr(&s->b, x, "replica_groups", b.s);
  if (st == TPU_OK) st = tpu_build_set_attr(&s->b, x, "use_global_device_ids", "true");
  tpu_strbuf_deinit(&b);
  return st;
}

/* The local shape of a global shape under a sharding. */
tpu_shape tpu__spmd_local_shape(const sp *s, const tpu_shape *g, const dsh *h) {
  tpu_shape l = *g;
  l.has_layout = 0;
  l.layout_tail = NULL;
  if (h->manual) return l;
  for (int k = 0; k < g->rank; k++) l.dims[k] = g->dims[k] / factor(s->mesh, h, k);
  return l;
}

/* all-gather of dimension k (split over the given axes) of x. */
static tpu_status gather_dim(sp *s, tpu_instr *x, int k, const int8_t *axes, int n, tpu_loc loc, tpu_instr **out) {
  tpu_shape r = x->shape;
  int64_t f = 1;
  for (int i = 0; i < n; i++) f *= s->mesh->sizes[axes[i]];
  r.dims[k] *= f;
  r.has_layout = 0;
  TPU_TRY(tpu__spmd_instr(s, TPU_OP_ALL_GATHER, "spmd.all-gather", &r, &x, 1, loc, out));
  char dims[32];
  snprintf(dims, sizeof dims, "{%d}", k);
  TPU_TRY(tpu_build_set_attr(&s->b, *out, "dimensions", dims));
  return tpu__spmd_set_groups(s, *out, axes, n);
}

tpu_status tpu__spmd_block_offset(sp *s, const int8_t *axes, int n, int64_t len, tpu_loc loc, tpu_instr **out) {
  tpu_instr *idx, *clen, *ops[2];
  TPU_TRY(block_index(s, axes, n, loc, &idx));
  TPU_TRY(const_s32(s, len, &clen));
  tpu_shape i32 = tpu__spmd_scalar(TPU_S32);
  ops[0] = idx;
  ops[1] = clen;
  return tpu__spmd_instr(s, TPU_OP_MULTIPLY, "spmd.offset", &i32, ops, 2, loc, out);
}

/* This chip's block of dimension k of x, split over the given axes (no communication). */
tpu_status tpu__spmd_slice_at(sp *s, tpu_instr *x, int k, tpu_instr *off, int64_t len, const char *hint, tpu_loc loc,
                              tpu_instr **out) {
  tpu_instr *zero, *ops[TPU_MAX_RANK + 1];
  TPU_TRY(const_s32(s, 0, &zero));
  ops[0] = x;
  for (int i = 0; i < x->shape.rank; i++) ops[1 + i] = i == k ? off : zero;
  tpu_shape r = x->shape;
  r.dims[k] = len;
  r.has_layout = 0;
  TPU_TRY(tpu__spmd_instr(s, TPU_OP_DYNAMIC_SLICE, hint, &r, ops, 1 + x->shape.rank, loc, out));
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  tpu_strbuf_printf(&b, "{");
  for (int i = 0; i < r.rank; i++) tpu_strbuf_printf(&b, "%s%lld", i ? "," : "", (long long)r.dims[i]);
  tpu_strbuf_printf(&b, "}");
  return tpu__spmd_set_attr_text(s, *out, "dynamic_slice_sizes", &b, loc);
}

static tpu_status slice_dim(sp *s, tpu_instr *x, int k, const int8_t *axes, int n, tpu_loc loc, tpu_instr **out) {
  int64_t f = 1;
  for (int i = 0; i < n; i++) f *= s->mesh->sizes[axes[i]];
  int64_t len = x->shape.dims[k] / f;
  tpu_instr *off;
  TPU_TRY(tpu__spmd_block_offset(s, axes, n, len, loc, &off));
  return tpu__spmd_slice_at(s, x, k, off, len, "spmd.slice", loc, out);
}

tpu_status tpu__spmd_permute(sp *s, tpu_instr *x, const int64_t *src, const char *hint, tpu_loc loc, tpu_instr **out) {
  const int64_t *ids = s->mesh->ids;
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  tpu_strbuf_printf(&b, "{");
  int first = 1;
  for (int64_t q = 0; q < s->mesh->ndev; q++) {
    if (src[q] < 0) continue;
    tpu_strbuf_printf(&b, "%s{%lld,%lld}", first ? "" : ",", (long long)(ids ? ids[src[q]] : src[q]),
                      (long long)(ids ? ids[q] : q));
    first = 0;
  }
  tpu_strbuf_printf(&b, "}");
  tpu_shape l = x->shape;
  l.has_layout = 0;
  char ch[32];
  snprintf(ch, sizeof ch, "%d", ++s->channel);
  tpu_status st = b.oom ? TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory")
                        : tpu__spmd_instr(s, TPU_OP_COLLECTIVE_PERMUTE, hint, &l, &x, 1, loc, out);
  if (st == TPU_OK) st = tpu_build_set_attr(&s->b, *out, "channel_id", ch);
  if (st == TPU_OK) st = tpu_build_set_attr(&s->b, *out, "source_target_pairs", b.s);
  tpu_strbuf_deinit(&b);
  return st;
}

tpu_status tpu__spmd_shift(sp *s, tpu_instr *x, const dsh *h, int k, int dir, int wrap, const char *hint, tpu_loc loc,
                           tpu_instr **out) {
  const tpu_mesh *mesh = s->mesh;
  int64_t n = mesh->ndev, f = factor(mesh, h, k), *src = tpu_calloc((size_t)n + 1, sizeof *src);
  if (!src) return TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory");
  int in_ax[MAXA] = {0};
  for (int i = 0; i < h->n[k]; i++) in_ax[h->ax[k][i]] = 1;
  for (int64_t q = 0; q < n; q++) {
    src[q] = -1;
    int64_t want = tpu__spmd_block_at(mesh, h, k, q) + dir;
    if (wrap) want = (want % f + f) % f;
    for (int64_t p = 0; p < n && src[q] < 0; p++) {
      if (tpu__spmd_block_at(mesh, h, k, p) != want) continue;
      int same = 1; /* the other axes' coordinates agree */
      int64_t stride = 1;
      for (int a = mesh->naxes - 1; a >= 0 && same; a--) {
        if (!in_ax[a]) same = (p / stride) % mesh->sizes[a] == (q / stride) % mesh->sizes[a];
        stride *= mesh->sizes[a];
      }
      if (same) src[q] = p;
    }
  }
  tpu_status st = tpu__spmd_permute(s, x, src, hint, loc, out);
  tpu_free(src);
  return st;
}

static tpu_status all_to_all_groups(sp *s, tpu_instr *x, int i, int j, int64_t f, const int8_t *axes, int n,
                                    const char *groups, tpu_loc loc, tpu_instr **out);

/* Moves x's split from dimension i to dimension j over the same axes with one all-to-all
 * (each chip sends every other chip the part of its block that chip keeps): dimension j is
 * cut into (f, n_j/f), the all-to-all exchanges along the f pieces, and the pieces, which
 * arrive in block order of dimension i, are moved in front of it and merged. */
static tpu_status all_to_all_move(sp *s, tpu_instr *x, int i, int j, const int8_t *axes, int n, tpu_loc loc,
                                  tpu_instr **out) {
  int64_t f = 1;
  for (int a = 0; a < n; a++) f *= s->mesh->sizes[axes[a]];
  return all_to_all_groups(s, x, i, j, f, axes, n, NULL, loc, out);
}

/* all_to_all_move with f pieces among explicit replica groups (text; NULL: the devices that
 * differ only in `axes`). */
static tpu_status all_to_all_groups(sp *s, tpu_instr *x, int i, int j, int64_t f, const int8_t *axes, int n,
                                    const char *groups, tpu_loc loc, tpu_instr **out) {
  int rank = x->shape.rank;
  tpu_shape r = x->shape; /* [.., f, n_j/f, ..] */
  r.has_layout = 0;
  r.rank = rank + 1;
  for (int k = 0, d = 0; k < rank; k++) {
    if (k == j) {
      r.dims[d++] = f;
      r.dims[d++] = x->shape.dims[j] / f;
    } else {
      r.dims[d++] = x->shape.dims[k];
    }
  }
  tpu_instr *y, *z, *t;
  TPU_TRY(tpu__spmd_instr(s, TPU_OP_RESHAPE, "spmd.reshape", &r, &x, 1, loc, &y));
  TPU_TRY(tpu__spmd_instr(s, TPU_OP_ALL_TO_ALL, "spmd.all-to-all", &r, &y, 1, loc, &z));
  char dims[32];
  snprintf(dims, sizeof dims, "{%d}", j);
  TPU_TRY(tpu_build_set_attr(&s->b, z, "dimensions", dims));
  if (groups) {
    char ch[32];
    snprintf(ch, sizeof ch, "%d", ++s->channel);
    TPU_TRY(tpu_build_set_attr(&s->b, z, "channel_id", ch));
    TPU_TRY(tpu_build_set_attr(&s->b, z, "replica_groups", groups));
    TPU_TRY(tpu_build_set_attr(&s->b, z, "use_global_device_ids", "true"));
  } else {
    TPU_TRY(tpu__spmd_set_groups(s, z, axes, n));
  }
  /* Transpose the piece index (at j) to just before dimension i (at i' in r). */
  int ip = i < j ? i : i + 1, perm[TPU_MAX_RANK], np = 0;
  for (int k = 0; k < r.rank; k++) {
    if (k == j) continue;
    if (k == ip) perm[np++] = j;
    perm[np++] = k;
  }
  tpu_shape ts = r;
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  tpu_strbuf_printf(&b, "{");
  for (int k = 0; k < r.rank; k++) {
    ts.dims[k] = r.dims[perm[k]];
    tpu_strbuf_printf(&b, "%s%d", k ? "," : "", perm[k]);
  }
  tpu_strbuf_printf(&b, "}");
  tpu_status st = b.oom ? TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory")
                        : tpu__spmd_instr(s, TPU_OP_TRANSPOSE, "spmd.transpose", &ts, &z, 1, loc, &t);
  if (st == TPU_OK) st = tpu_build_set_attr(&s->b, t, "dimensions", b.s);
  tpu_strbuf_deinit(&b);
  TPU_TRY(st);
  tpu_shape m = x->shape; /* dimension i whole, j split */
  m.has_layout = 0;
  m.dims[i] *= f;
  m.dims[j] /= f;
  return tpu__spmd_instr(s, TPU_OP_RESHAPE, "spmd.reshape", &m, &t, 1, loc, out);
}

/* Block index along dimension k of mesh position p under sharding h (its axes, major first). */
int64_t tpu__spmd_block_at(const tpu_mesh *mesh, const dsh *h, int k, int64_t p) {
  int64_t b = 0;
  for (int i = 0; i < h->n[k]; i++) {
    int a = h->ax[k][i];
    int64_t stride = 1;
    for (int j = a + 1; j < mesh->naxes; j++) stride *= mesh->sizes[j];
    b = b * mesh->sizes[a] + (p / stride) % mesh->sizes[a];
  }
  return b;
}

/* Blocks of the same sizes held by other chips (P(x,y) -> P(y,x)): one collective-permute,
 * each chip receiving the block it needs from a chip that holds it. Returns 1 in *done when
 * it applies (every chip finds a distinct source). */
static tpu_status permute_have(sp *s, tpu_instr *x, const int64_t *have, const dsh *to, tpu_loc loc, tpu_instr **out,
                               int *done);

static tpu_status permute_blocks(sp *s, tpu_instr *x, const dsh *from, const dsh *to, tpu_loc loc, tpu_instr **out,
                                 int *done) {
  *done = 0;
  int rank = x->shape.rank;
  for (int k = 0; k < rank; k++)
    if (factor(s->mesh, from, k) != factor(s->mesh, to, k)) return TPU_OK;
  int64_t n = s->mesh->ndev;
  if (n > 4096) return TPU_OK;
  int64_t *have = tpu_calloc((size_t)(n * rank) + 1, sizeof *have);
  if (!have) return TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory");
  for (int64_t p = 0; p < n; p++)
    for (int k = 0; k < rank; k++) have[p * rank + k] = tpu__spmd_block_at(s->mesh, from, k, p);
  tpu_status st = permute_have(s, x, have, to, loc, out, done);
  tpu_free(have);
  return st;
}

/* Every block `to` wants lying inside a block `from` holds, on a chip that is not giving its
 * own (P(a, _) -> P(b, a): each chip wants a quarter of rows another chip holds half of):
 * each chip slices out, along the dimensions `from` splits, the part of its block one other
 * chip wants, one collective-permute delivers them, and each chip takes its own block of the
 * dimensions `from` leaves whole, as XLA's partitioner reshards by collective-permute
 * (1 in *done; 0 where the blocks do not nest, some chip finds no distinct source, or every
 * chip holds its own already). */
static tpu_status permute_sub_blocks(sp *s, tpu_instr *x, const dsh *from, const dsh *to, tpu_loc loc,
                                     tpu_instr **out, int *done) {
  *done = 0;
  const tpu_mesh *mesh = s->mesh;
  int rank = x->shape.rank, finer = 0;
  int64_t n = mesh->ndev, ratio[TPU_MAX_RANK];
  for (int k = 0; k < rank; k++) {
    int64_t ff = factor(mesh, from, k), ft = factor(mesh, to, k);
    if (ft % ff || x->shape.dims[k] % ft) return TPU_OK;
    ratio[k] = ft / ff;
    finer |= ratio[k] > 1;
  }
  if (!finer || n > 4096) return TPU_OK;
  int64_t *src = tpu_calloc((size_t)n + 1, sizeof *src), *dst = tpu_calloc((size_t)n + 1, sizeof *dst);
  if (!src || !dst) {
    tpu_free(src);
    tpu_free(dst);
    return TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory");
  }
  for (int64_t p = 0; p < n; p++) dst[p] = -1;
  int ok = 1, moves = 0;
  for (int64_t q = 0; q < n && ok; q++) {
    src[q] = -1;
    for (int64_t t = 0; t < n && src[q] < 0; t++) {
      int64_t p = (q + t) % n; /* itself first */
      if (dst[p] >= 0) continue;
      int in = 1;
      for (int k = 0; k < rank && in; k++)
        in = tpu__spmd_block_at(mesh, to, k, q) / ratio[k] == tpu__spmd_block_at(mesh, from, k, p);
      if (in) src[q] = p, dst[p] = q;
    }
    ok = src[q] >= 0;
    moves |= src[q] != q;
  }
  tpu_status st = TPU_OK;
  tpu_instr *y = x;
  for (int k = 0; ok && moves && st == TPU_OK && k < rank; k++) {
    if (ratio[k] == 1 || !from->n[k]) continue; /* (a dimension whole in `from`: sliced on arrival) */
    /* where, in its block, the part its receiver wants starts: a table by mesh position */
    int64_t len = x->shape.dims[k] / factor(mesh, to, k);
    tpu_tensor tab;
    st = tpu_tensor_alloc(&tab, TPU_S32, 1, &n, s->d);
    for (int64_t p = 0; st == TPU_OK && p < n; p++)
      tpu_tensor_set_i64(&tab, p, dst[p] < 0 ? 0 : tpu__spmd_block_at(mesh, to, k, dst[p]) % ratio[k] * len);
    tpu_instr *c = NULL, *pos = NULL, *ds = NULL, *off = NULL, *args[2];
    if (st == TPU_OK) st = tpu_build_constant(&s->b, s->c, "spmd.part", &tab, NULL, &c);
    if (st == TPU_OK) st = position(s, loc, &pos);
    tpu_shape one = tpu__spmd_scalar(TPU_S32), i32 = one;
    one.rank = 1;
    one.dims[0] = 1;
    args[0] = c;
    args[1] = pos;
    if (st == TPU_OK) st = tpu__spmd_instr(s, TPU_OP_DYNAMIC_SLICE, "spmd.part", &one, args, 2, loc, &ds);
    if (st == TPU_OK) st = tpu_build_set_attr(&s->b, ds, "dynamic_slice_sizes", "{1}");
    if (st == TPU_OK) st = tpu__spmd_instr(s, TPU_OP_RESHAPE, "spmd.part", &i32, &ds, 1, loc, &off);
    if (st == TPU_OK) st = tpu__spmd_slice_at(s, y, k, off, len, "spmd.part", loc, &y);
  }
  if (st == TPU_OK && ok && moves) {
    st = tpu__spmd_permute(s, y, src, "spmd.collective-permute", loc, out);
    for (int k = 0; st == TPU_OK && k < rank; k++)
      if (ratio[k] > 1 && !from->n[k]) st = slice_dim(s, *out, k, to->ax[k], to->n[k], loc, out);
    *done = st == TPU_OK;
  }
  tpu_free(src);
  tpu_free(dst);
  return st;
}

/* The collective-permute that gives every chip the blocks `to` wants of it, where mesh
 * position p holds blocks have[p * rank + k] of the dimensions k (1 in *done; 0 where some
 * chip finds no distinct source, or none moves). */
static tpu_status permute_have(sp *s, tpu_instr *x, const int64_t *have, const dsh *to, tpu_loc loc, tpu_instr **out,
                               int *done) {
  *done = 0;
  int rank = x->shape.rank;
  int64_t n = s->mesh->ndev;
  int64_t *src = tpu_calloc((size_t)n, sizeof *src);
  char *used = tpu_calloc((size_t)n, 1);
  if (!src || !used) {
    tpu_free(src);
    tpu_free(used);
    return TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory");
  }
  int ok = 1;
  for (int64_t q = 0; q < n && ok; q++) {
    src[q] = -1;
    for (int64_t t = 0; t < n && src[q] < 0; t++) {
      int64_t p = (q + t) % n; /* itself first */
      if (used[p]) continue;
      int same = 1;
      for (int k = 0; k < rank && same; k++) same = have[p * rank + k] == tpu__spmd_block_at(s->mesh, to, k, q);
      if (same) src[q] = p, used[p] = 1;
    }
    ok = src[q] >= 0;
  }
  int moves = 0;
  for (int64_t q = 0; ok && q < n; q++) moves |= src[q] != q;
  ok = ok && moves;
  tpu_status st = TPU_OK;
  if (ok) {
    st = tpu__spmd_permute(s, x, src, "spmd.collective-permute", loc, out);
    *done = st == TPU_OK;
  }
  tpu_free(src);
  tpu_free(used);
  return st;
}

/* Whether axes x are y with one axis more (at any place, the others in order): that axis. */
static int one_more_axis(const int8_t *x, int nx, const int8_t *y, int ny, int8_t *a) {
  if (nx != ny + 1) return 0;
  for (int p = 0; p < nx; p++) { /* x without its p-th axis */
    int same = 1;
    for (int t = 0, w = 0; t < nx && same; t++)
      if (t != p) same = x[t] == y[w++];
    if (same) {
      *a = x[p];
      return 1;
    }
  }
  return 0;
}

/* Whether `to` differs from `from` by one axis leaving dimension *i (its other axes, if any,
 * staying in their order) for dimension *j (whose axes keep their order, the moving one
 * anywhere among them): *a, and in *minor whether it goes to j's minor end. */
static int one_axis_moves(const dsh *from, const dsh *to, int rank, int *i, int *j, int8_t *a, int *minor) {
  *i = *j = -1;
  int8_t ai = -1, aj = -1;
  for (int k = 0; k < rank; k++) {
    if (same_dim(from, k, to, k)) continue;
    if (*i < 0 && one_more_axis(from->ax[k], from->n[k], to->ax[k], to->n[k], &ai)) *i = k;
    else if (*j < 0 && one_more_axis(to->ax[k], to->n[k], from->ax[k], from->n[k], &aj)) *j = k;
    else return 0;
  }
  if (*i < 0 || *j < 0 || ai != aj) return 0;
  *a = ai;
  *minor = to->ax[*j][to->n[*j] - 1] == ai;
  return 1;
}

/* The expert dispatch of one_axis_moves (axis a leaving dimension i, not its minor axis, for
 * the minor end of dimension j) as XLA's partitioner runs it: one all-to-all among the f
 * chips (f = a's size) that hold consecutive blocks of dimension i — each group then holds
 * one block of dimension i split f ways as `to` has it, dimension j's pieces in block order
 * — and one collective-permute that puts those blocks where `to` wants them. Among chips
 * numbered along the mesh, consecutive blocks are near each other where a's chips are not
 * (XLA's program for [(data, model), -] to [model, data] on v5e 2x4 exchanges between
 * neighbours; permuting first leaves the all-to-all two hops apart). *done: whether it
 * applies. */
static tpu_status a2a_then_permute(sp *s, tpu_instr *x, const dsh *from, const dsh *to, int i, int j, int8_t a,
                                   tpu_loc loc, tpu_instr **out, int *done) {
  *done = 0;
  const tpu_mesh *mesh = s->mesh;
  int rank = x->shape.rank;
  int64_t n = mesh->ndev, f = mesh->sizes[a];
  if (n > 4096 || f < 2 || factor(mesh, from, i) % f) return TPU_OK;
  int used_ax[MAXA] = {0};
  for (int k = 0; k < rank; k++)
    for (int t = 0; t < from->n[k]; t++) used_ax[from->ax[k][t]] = 1;
  int64_t *key = tpu_calloc((size_t)(n * (rank + MAXA)) + 1, sizeof *key); /* what a group shares */
  int64_t *have = tpu_calloc((size_t)(n * rank) + 1, sizeof *have);
  int64_t *grp = tpu_calloc((size_t)n + 1, sizeof *grp);
  char *done_p = tpu_calloc((size_t)n + 1, 1);
  tpu_status st = key && have && grp && done_p ? TPU_OK : TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory");
  const int nk = rank + MAXA;
  for (int64_t p = 0; st == TPU_OK && p < n; p++) {
    int64_t b = tpu__spmd_block_at(mesh, from, i, p);
    for (int k = 0; k < rank; k++) key[p * nk + k] = k == i ? b / f : tpu__spmd_block_at(mesh, from, k, p);
    int64_t stride = 1;
    for (int ax = mesh->naxes - 1; ax >= 0; ax--) { /* coordinates along replicating axes */
      key[p * nk + rank + ax] = used_ax[ax] ? 0 : (p / stride) % mesh->sizes[ax];
      stride *= mesh->sizes[ax];
    }
    /* after the all-to-all: dimension i's coarse block, dimension j's block split f ways */
    for (int k = 0; k < rank; k++) have[p * rank + k] = key[p * nk + k];
    have[p * rank + j] = tpu__spmd_block_at(mesh, from, j, p) * f + b % f;
  }
  tpu_strbuf g;
  tpu_strbuf_init(&g);
  tpu_strbuf_printf(&g, "{");
  int ok = st == TPU_OK, first = 1;
  for (int64_t p = 0; ok && p < n; p++) {
    if (done_p[p]) continue;
    int64_t m = 0;
    for (int64_t q = p; q < n && m <= f; q++)
      if (!done_p[q] && !memcmp(&key[q * nk], &key[p * nk], (size_t)nk * sizeof *key)) grp[m++] = q;
    ok = m == f;
    if (!ok) break;
    /* in block order of dimension i */
    tpu_strbuf_printf(&g, "%s{", first ? "" : ",");
    first = 0;
    for (int64_t r = 0; r < f && ok; r++) {
      int64_t who = -1;
      for (int64_t t = 0; t < m && who < 0; t++)
        if (tpu__spmd_block_at(mesh, from, i, grp[t]) % f == r) who = grp[t];
      ok = who >= 0;
      if (!ok) break;
      done_p[who] = 1;
      tpu_strbuf_printf(&g, "%s%lld", r ? "," : "", (long long)(mesh->ids ? mesh->ids[who] : who));
    }
    tpu_strbuf_printf(&g, "}");
  }
  tpu_strbuf_printf(&g, "}");
  if (ok && g.oom) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory");
  if (ok && st == TPU_OK) {
    tpu_instr *y;
    st = all_to_all_groups(s, x, i, j, f, &a, 1, g.s, loc, &y);
    int moved = 0;
    if (st == TPU_OK) st = permute_have(s, y, have, to, loc, out, &moved);
    if (st == TPU_OK && !moved) *out = y; /* the blocks are where `to` wants them */
    *done = st == TPU_OK;
  }
  tpu_strbuf_deinit(&g);
  tpu_free(key);
  tpu_free(have);
  tpu_free(grp);
  tpu_free(done_p);
  return st;
}

tpu_status tpu__spmd_reshard(sp *s, tpu_instr *x, const dsh *from, const dsh *to, tpu_loc loc, tpu_instr **out) {
  *out = x;
  if (!tpu_dtype_is_array(x->shape.dtype) || from->manual || to->manual) return TPU_OK;
  /* an element of a tuple built here is that value (a mask passed through a call's tuple is
   * still the broadcast it was) */
  while (x->op == TPU_OP_GET_TUPLE_ELEMENT && x->operands[0]->op == TPU_OP_TUPLE &&
         x->index < x->operands[0]->noperands && tpu_shape_equal(&x->shape, &x->operands[0]->operands[x->index]->shape))
    x = x->operands[0]->operands[x->index];
  int rank = x->shape.rank;
  /* A sum of partial results that is wanted split along one more dimension over the same
   * axes it was summed over, directly or after movement: a reduce-scatter of the partial
   * sums (half an all-reduce's bytes) instead of the all-reduce and a slice (FSDP's
   * gradients). */
  int moved;
  TPU_TRY(tpu__spmd_moved_sum_scatter(s, x, from, to, loc, out, &moved));
  if (moved) return TPU_OK;
  int bcast_only = x->op == TPU_OP_BROADCAST && x->noperands == 1;
  for (int k = 0; bcast_only && k < rank; k++) {
    int mapped = 0;
    for (int j = 0; j < x->dimensions.n; j++) mapped |= x->dimensions.v[j] == k;
    bcast_only = mapped ? same_dim(from, k, to, k) : !from->n[k];
  }
  if (bcast_only) {
    /* A broadcast split only along the dimensions it adds (a scalar's, a row's copies): each
     * chip broadcasts to its block, no need to build the whole array first. */
    tpu_shape l = x->shape; /* x's block under `from`, split further along added dimensions */
    l.has_layout = 0;
    l.layout_tail = NULL;
    for (int k = 0; k < rank; k++) l.dims[k] /= factor(s->mesh, to, k) / factor(s->mesh, from, k);
    TPU_TRY(tpu_build_clone_instr(&s->b, s->c, x, x->operands, out));
    (*out)->shape = l;
    return TPU_OK;
  }
  int ai = -1, aj = -1, other = 0; /* a split moving from dimension ai to aj on the same axes */
  for (int k = 0; k < rank; k++) {
    if (same_dim(from, k, to, k)) continue;
    if (from->n[k] && !to->n[k] && ai < 0) ai = k;
    else if (!from->n[k] && to->n[k] && aj < 0) aj = k;
    else other = 1;
  }
  if (!other && ai >= 0 && aj >= 0 && from->n[ai] == to->n[aj] && !memcmp(from->ax[ai], to->ax[aj], (size_t)to->n[aj]) &&
      rank < TPU_MAX_RANK && x->shape.dims[aj] % factor(s->mesh, to, aj) == 0)
    return all_to_all_move(s, x, ai, aj, to->ax[aj], to->n[aj], loc, out);
  if (same_sharding(from, to, rank)) return TPU_OK;
  /* One axis moving from a dimension (that may keep other axes) to the minor end of
   * another's (an expert dispatch: [(data, model), ..] to [model, data, ..]; [a, b] to
   * [(a, b), -]): a collective-permute that makes it the first dimension's minor axis if it
   * is not, then one all-to-all over that axis alone. */
  int mi, mj, minor;
  int8_t ma;
  if (rank < TPU_MAX_RANK && one_axis_moves(from, to, rank, &mi, &mj, &ma, &minor) &&
      x->shape.dims[mj] % s->mesh->sizes[ma] == 0 && !minor) {
    /* to a place of dimension mj other than its minor end ([a, b] to [-, (a, b)]): the
     * all-to-all over the axis puts it at the minor end, a collective-permute then moves the
     * blocks to the chips `to` wants them on (XLA's partitioner: one all-to-all, one
     * collective-permute; reshard_v5e_8x8_ab_to__ab) */
    int done;
    TPU_TRY(a2a_then_permute(s, x, from, to, mi, mj, ma, loc, out, &done));
    if (done) return TPU_OK;
  } else if (rank < TPU_MAX_RANK && one_axis_moves(from, to, rank, &mi, &mj, &ma, &minor) &&
             x->shape.dims[mj] % s->mesh->sizes[ma] == 0) {
    dsh mid = *from; /* dimension mi with the moving axis last */
    int w = 0;
    for (int t = 0; t < from->n[mi]; t++)
      if (from->ax[mi][t] != ma) mid.ax[mi][w++] = from->ax[mi][t];
    mid.ax[mi][w] = ma;
    tpu_instr *y = x;
    if (memcmp(mid.ax[mi], from->ax[mi], (size_t)from->n[mi])) {
      int done;
      TPU_TRY(a2a_then_permute(s, x, from, to, mi, mj, ma, loc, out, &done));
      if (done) return TPU_OK;
      TPU_TRY(permute_blocks(s, x, from, &mid, loc, &y, &done));
      if (!done) y = NULL;
    }
    if (y) return all_to_all_move(s, y, mi, mj, &ma, 1, loc, out);
  }
  if (is_split(from, rank) && is_split(to, rank)) {
    int done;
    TPU_TRY(permute_blocks(s, x, from, to, loc, out, &done));
    if (done) return TPU_OK;
    TPU_TRY(permute_sub_blocks(s, x, from, to, loc, out, &done));
    if (done) return TPU_OK;
  }
  dsh cur = *from;
  /* Slices first where the axes are free (less to gather), then gathers, then the rest. */
  int busy[MAXA] = {0};
  for (int k = 0; k < rank; k++)
    for (int i = 0; i < cur.n[k]; i++) busy[cur.ax[k][i]] = 1;
  for (int k = 0; k < rank; k++) {
    if (!to->n[k] || cur.n[k]) continue;
    int free_axes = 1;
    for (int i = 0; i < to->n[k]; i++) free_axes &= !busy[to->ax[k][i]];
    if (!free_axes) continue;
    TPU_TRY(slice_dim(s, *out, k, to->ax[k], to->n[k], loc, out));
    cur.n[k] = to->n[k];
    memcpy(cur.ax[k], to->ax[k], MAXA);
    for (int i = 0; i < to->n[k]; i++) busy[to->ax[k][i]] = 1;
  }
  for (int k = 0; k < rank; k++)
    if (cur.n[k] && !same_dim(&cur, k, to, k)) {
      TPU_TRY(gather_dim(s, *out, k, cur.ax[k], cur.n[k], loc, out));
      cur.n[k] = 0;
    }
  for (int k = 0; k < rank; k++)
    if (to->n[k] && !cur.n[k]) TPU_TRY(slice_dim(s, *out, k, to->ax[k], to->n[k], loc, out));
  return TPU_OK;
}


/* A tuple value whose elements are split (el), rebuilt with elements as `to` (NULL: whole). */
tpu_status tpu__spmd_reshard_tuple(sp *s, tpu_instr *x, const dsh *el, const dsh *to, tpu_loc loc, tpu_instr **out) {
  int n = x->shape.ntuple;
  tpu_instr **parts = tpu_calloc((size_t)(n + 1), sizeof *parts);
  if (!parts) return TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory");
  tpu_status st = TPU_OK;
  int changed = 0;
  for (int i = 0; st == TPU_OK && i < n; i++) {
    const dsh *want = to ? &to[i] : &k_repl;
    if (!tpu_dtype_is_array(x->shape.elems[i].dtype) || !memcmp(&el[i], want, sizeof *want)) continue;
    changed = 1;
  }
  if (!changed) {
    tpu_free(parts);
    *out = x;
    return TPU_OK;
  }
  for (int i = 0; st == TPU_OK && i < n; i++) {
    if (x->op == TPU_OP_TUPLE && x->noperands == n) { /* its elements directly */
      parts[i] = x->operands[i];
      if (tpu_dtype_is_array(x->shape.elems[i].dtype))
        st = tpu__spmd_reshard(s, parts[i], &el[i], to ? &to[i] : &k_repl, loc, &parts[i]);
      continue;
    }
    st = tpu__spmd_gte(s, x, i, loc, &parts[i]);
    if (st == TPU_OK && tpu_dtype_is_array(x->shape.elems[i].dtype))
      st = tpu__spmd_reshard(s, parts[i], &el[i], to ? &to[i] : &k_repl, loc, &parts[i]);
  }
  if (st == TPU_OK) st = tpu__spmd_tuple(s, parts, n, loc, out);
  tpu_free(parts);
  return st;
}

/* Operand i of old instruction `in` as sharded `to` (a tuple operand: its elements whole). */
tpu_instr *tpu__spmd_resharded(const sp *s, const tpu_instr *v, const dsh *from, const dsh *to, int bf16) {
  for (int k = 0; k < s->nreshards; k++)
    if (s->reshards[k].c == s->c && s->reshards[k].v == v && s->reshards[k].bf16 == bf16 &&
        !memcmp(&s->reshards[k].from, from, sizeof *from) && !memcmp(&s->reshards[k].to, to, sizeof *to))
      return s->reshards[k].out;
  return NULL;
}

void tpu__spmd_remember(sp *s, const tpu_instr *v, const dsh *from, const dsh *to, int bf16, tpu_instr *out) {
  if (s->nreshards == (int)(sizeof s->reshards / sizeof s->reshards[0])) return;
  s->reshards[s->nreshards].c = s->c;
  s->reshards[s->nreshards].v = v;
  s->reshards[s->nreshards].from = *from;
  s->reshards[s->nreshards].to = *to;
  s->reshards[s->nreshards].bf16 = bf16;
  s->reshards[s->nreshards++].out = out;
}

/* A broadcast wanted split otherwise: its operand resharded (the smaller array: a norm's
 * scale vector, 8 KB, rather than the activation-sized broadcast of it) and broadcast again
 * on each chip, as XLA's partitioner does (*done 0 when o is not such a broadcast). */
static tpu_status rebroadcast(sp *s, const tpu_instr *o, const dsh *to, tpu_loc loc, tpu_instr **out, int *done) {
  *done = 0;
  if (o->op != TPU_OP_BROADCAST || o->noperands != 1 || !tpu_dtype_is_array(o->shape.dtype)) return TPU_OK;
  const tpu_instr *src = o->operands[0];
  if (s->tsh[src->id] || s->sh[src->id].manual || s->sh[o->id].manual || !s->val[src->id] ||
      tpu_shape_numel(&src->shape) >= tpu_shape_numel(&o->shape))
    return TPU_OK;
  dsh want = k_repl;
  for (int i = 0; i < src->shape.rank; i++) {
    int r = (int)o->dimensions.v[i];
    want.n[i] = to->n[r];
    memcpy(want.ax[i], to->ax[r], MAXA);
  }
  if (!tpu__spmd_fits(s, &src->shape, &want)) return TPU_OK;
  tpu_instr *x;
  TPU_TRY(tpu__spmd_reshard(s, s->val[src->id], &s->sh[src->id], &want, loc, &x));
  TPU_TRY(tpu_build_clone_instr(&s->b, s->c, o, &x, out));
  (*out)->shape = tpu__spmd_local_shape(s, &o->shape, to);
  *done = 1;
  return TPU_OK;
}

tpu_status tpu__spmd_operand_as(sp *s, const tpu_instr *in, int i, const dsh *to, tpu_instr **out) {
  const tpu_instr *o = in->operands[i];
  if (s->tsh[o->id]) return tpu__spmd_reshard_tuple(s, s->val[o->id], s->tsh[o->id], NULL, in->loc, out);
  tpu_instr *v = s->val[o->id];
  const dsh *from = &s->sh[o->id];
  if ((*out = tpu__spmd_resharded(s, v, from, to, 0))) return TPU_OK;
  int done = 0;
  if (!same_sharding(from, to, o->shape.rank)) TPU_TRY(rebroadcast(s, o, to, in->loc, out, &done));
  if (done) {
    tpu__spmd_remember(s, v, from, to, 0, *out);
    return TPU_OK;
  }
  TPU_TRY(tpu__spmd_reshard(s, v, from, to, in->loc, out));
  if (*out != v) tpu__spmd_remember(s, v, from, to, 0, *out);
  return TPU_OK;
}

/* Whether sharding h fits shape g: every split dimension divides evenly, no axis twice. */
int tpu__spmd_fits(const sp *s, const tpu_shape *g, const dsh *h) {
  int seen[MAXA] = {0};
  for (int k = 0; k < g->rank; k++) {
    if (h->n[k] && g->dims[k] % factor(s->mesh, h, k)) return 0;
    for (int i = 0; i < h->n[k]; i++)
      if (seen[h->ax[k][i]]++) return 0;
  }
  return 1;
}

/* Emits a clone of `in` on the given per-chip operands with result sharding h. */
tpu_status tpu__spmd_emit_clone(sp *s, const tpu_instr *in, tpu_instr **ops, const dsh *h) {
  tpu_instr *x;
  TPU_TRY(tpu_build_clone_instr(&s->b, s->c, in, ops, &x));
  if (tpu_dtype_is_array(in->shape.dtype)) x->shape = tpu__spmd_local_shape(s, &in->shape, h);
  s->val[in->id] = x;
  s->sh[in->id] = *h;
  return TPU_OK;
}

/* An op run replicated: every operand gathered whole. */
tpu_status tpu__spmd_replicated_op(sp *s, const tpu_instr *in) {
  tpu_instr **ops = tpu_calloc((size_t)(in->noperands + 1), sizeof *ops);
  if (!ops) return TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  int manual = 0;
  for (int i = 0; i < in->noperands; i++) manual |= s->sh[in->operands[i]->id].manual;
  tpu_status st = TPU_OK;
  for (int i = 0; st == TPU_OK && i < in->noperands; i++) st = tpu__spmd_operand_as(s, in, i, &k_repl, &ops[i]);
  dsh h = k_repl;
  h.manual = manual;
  if (st == TPU_OK) st = tpu__spmd_emit_clone(s, in, ops, &h);
  tpu_free(ops);
  return st;
}
