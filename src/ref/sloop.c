/* While loops on integer slots: a small integer loop compiled once into steps on one buffer (ref/sloop.h). */
#include "ref/sloop.h"

#include <string.h>

#include "base/alloc.h"
#include "ref/elementwise_int.h"

/* How deep calls are inlined, and the most bytes a loop's buffer holds (its state twice,
 * every value of an iteration, the constants): beyond either the loop is stepped op by op. */
enum { MAX_DEPTH = 16, MAX_BYTES = 1 << 20 };

typedef enum { K_BIN, K_CMP, K_SEL, K_PRED2I, K_BOX, K_FILL, K_COPY } skind;

/* One step: out = f(a, b, c), every operand a byte offset into the run's buffer. */
typedef struct {
  skind kind;
  tpu_opcode op;    /* K_BIN */
  tpu_cmp_dir dir;  /* K_CMP */
  int sg;           /* K_BIN, K_CMP: the 32-bit values signed */
  int es;           /* K_SEL, K_BOX, K_FILL: element bytes */
  int pscalar;      /* K_SEL: one predicate for every element */
  int box;          /* K_BOX: its boxes[] entry */
  int64_t n;        /* elements of out */
  size_t out, a, b, c;
} sstep;

/* A broadcast or slice as tpu__ref_copy_box runs it (strides in elements). */
typedef struct {
  int rank;
  int64_t dims[TPU_MAX_RANK], dstr[TPU_MAX_RANK], sstr[TPU_MAX_RANK];
} sbox;

typedef struct {
  size_t off;
  const void *data;
  size_t bytes;
} sconst;

/* The state's element i: its slot, its next value's slot, where that value is computed. */
typedef struct {
  size_t off, next, src, bytes;
  tpu_dtype t;
  int rank;
  int64_t dims[TPU_MAX_RANK];
} sstate;

struct tpu__sloop {
  sstep *s;
  int ns, ncond; /* steps [0, ncond) compute the condition, the rest the body */
  sbox *bx;
  sconst *k;
  int nk;
  sstate *st;
  int nst, tuple; /* tuple: the state is a tuple of nst arrays, else one array */
  size_t cond, bytes;
  const tpu_instr *w;
};

/* A value while compiling: an array in a slot (tup < 0) or a tuple of values (el[tup ..]). */
typedef struct {
  size_t off;
  int64_t n;
  tpu_dtype t;
  int tup, ntup;
} sval;

typedef struct {
  sval *v;
  int nv, capv;
  int *el;
  int nel, capel;
  sstep *s;
  int ns, caps;
  sbox *bx;
  int nb, capb;
  sconst *k;
  int nk, capk;
  size_t bytes;
} bld;

static int g_on = 1;

void tpu__sloop_enable(int on) { g_on = on; }

/* Room for one more of p's elements (es bytes each); 0 when out of memory. */
static int room(void **p, int n, int *cap, size_t es) {
  if (n < *cap) return 1;
  int nc = *cap ? 2 * *cap : 32;
  void *q = tpu_realloc(*p, (size_t)nc * es);
  if (!q) return 0;
  *p = q;
  *cap = nc;
  return 1;
}

static int ok_type(tpu_dtype t) { return t == TPU_S32 || t == TPU_U32 || t == TPU_PRED; }
static int is_i32(tpu_dtype t) { return t == TPU_S32 || t == TPU_U32; }

static int new_val(bld *b, sval v) {
  if (!room((void **)&b->v, b->nv, &b->capv, sizeof *b->v)) return -1;
  b->v[b->nv] = v;
  return b->nv++;
}

/* A new slot for an array of shape s: its value's index, or -1. */
static int new_slot(bld *b, const tpu_shape *s) {
  int64_t n = tpu_shape_numel(s);
  if (!ok_type(s->dtype) || n < 0 || n > MAX_BYTES) return -1;
  size_t bytes = (size_t)n * tpu_dtype_size(s->dtype);
  sval v = {b->bytes, n, s->dtype, -1, 0};
  b->bytes += (bytes + 15) & ~(size_t)15;
  if (b->bytes > MAX_BYTES) return -1;
  return new_val(b, v);
}

static sstep *new_step(bld *b, skind kind, int out) {
  if (!room((void **)&b->s, b->ns, &b->caps, sizeof *b->s)) return NULL;
  sstep *s = &b->s[b->ns++];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->n = b->v[out].n;
  s->out = b->v[out].off;
  return s;
}

/* An array value of type t (any of them when t is TPU_TUPLE) with n elements. */
static int arr(const bld *b, int v, tpu_dtype t, int64_t n) {
  return v >= 0 && b->v[v].tup < 0 && (t == TPU_TUPLE || b->v[v].t == t) && b->v[v].n == n;
}

/* A broadcast or slice of operand value x into a new slot for in. */
static int box_step(bld *b, const tpu_instr *in, int x) {
  const tpu_shape *xs = &in->operands[0]->shape, *rs = &in->shape;
  if (!arr(b, x, rs->dtype, tpu_shape_numel(xs))) return -1;
  int r = new_slot(b, rs);
  if (r < 0 || !room((void **)&b->bx, b->nb, &b->capb, sizeof *b->bx)) return -1;
  sbox *bx = &b->bx[b->nb];
  int64_t xstr[TPU_MAX_RANK];
  tpu__ref_strides(xs->rank, xs->dims, xstr);
  bx->rank = rs->rank;
  for (int i = 0; i < rs->rank; i++) bx->dims[i] = rs->dims[i], bx->sstr[i] = 0;
  tpu__ref_strides(rs->rank, rs->dims, bx->dstr);
  size_t es = tpu_dtype_size(rs->dtype), src = b->v[x].off;
  if (in->op == TPU_OP_BROADCAST) {
    if (in->dimensions.n != xs->rank) return -1;
    for (int i = 0; i < xs->rank; i++) bx->sstr[in->dimensions.v[i]] = xstr[i];
  } else { /* slice */
    if (xs->rank != rs->rank || in->nslice != xs->rank) return -1;
    for (int i = 0; i < xs->rank; i++) {
      src += (size_t)(in->slice[i].start * xstr[i]) * es;
      bx->sstr[i] = xstr[i] * in->slice[i].stride;
    }
  }
  /* a scalar broadcast (every source stride 0) fills; a box whose dims, merged as
   * tpu__ref_copy_box merges them, are one dense run in both is a memcpy */
  int fill = 1, run = 0, dense = 1;
  int64_t ds = 0, ss = 0;
  for (int i = 0; i < bx->rank; i++) {
    if (bx->dims[i] == 1) continue;
    fill &= bx->sstr[i] == 0;
    if (run && ds == bx->dstr[i] * bx->dims[i] && ss == bx->sstr[i] * bx->dims[i]) {
      ds = bx->dstr[i], ss = bx->sstr[i];
      continue;
    }
    dense &= !run;
    run = 1;
    ds = bx->dstr[i], ss = bx->sstr[i];
  }
  dense &= !run || (ds == 1 && ss == 1);
  sstep *s = new_step(b, fill ? K_FILL : dense ? K_COPY : K_BOX, r);
  if (!s) return -1;
  s->es = (int)es;
  s->box = b->nb++;
  s->a = src;
  return r;
}

static int instance(bld *b, const tpu_comp *c, const int *args, int nargs, int depth);

/* The value of instruction in (its operands' values in map[]), steps added; -1: not here. */
static int instr(bld *b, const tpu_instr *in, const int *map, const int *args, int nargs, int depth) {
  int x = in->noperands > 0 ? map[in->operands[0]->id] : -1;
  const tpu_shape *rs = &in->shape;
  int64_t n = tpu_shape_numel(rs);
  switch (in->op) {
    case TPU_OP_PARAMETER: return in->index >= 0 && in->index < nargs ? args[in->index] : -1;
    case TPU_OP_GET_TUPLE_ELEMENT:
      if (x < 0 || b->v[x].tup < 0 || in->index < 0 || in->index >= b->v[x].ntup) return -1;
      return b->el[b->v[x].tup + in->index];
    case TPU_OP_TUPLE: {
      sval v = {0, 0, TPU_TUPLE, b->nel, in->noperands};
      for (int k = 0; k < in->noperands; k++) {
        if (map[in->operands[k]->id] < 0 || !room((void **)&b->el, b->nel, &b->capel, sizeof *b->el)) return -1;
        b->el[b->nel++] = map[in->operands[k]->id];
      }
      return new_val(b, v);
    }
    case TPU_OP_CALL: {
      if (!in->to_apply || in->noperands > 64) return -1;
      int a[64];
      for (int k = 0; k < in->noperands; k++)
        if ((a[k] = map[in->operands[k]->id]) < 0) return -1;
      return instance(b, in->to_apply, a, in->noperands, depth + 1);
    }
    case TPU_OP_CONSTANT: {
      const tpu_tensor *lit = in->literal;
      int r = new_slot(b, rs);
      if (r < 0 || !lit || lit->dtype != rs->dtype || lit->nbytes != (size_t)n * tpu_dtype_size(rs->dtype) ||
          !room((void **)&b->k, b->nk, &b->capk, sizeof *b->k))
        return -1;
      b->k[b->nk++] = (sconst){b->v[r].off, lit->data, lit->nbytes};
      return r;
    }
    case TPU_OP_RESHAPE:
    case TPU_OP_CONVERT: { /* the same bytes: a view of the operand's slot */
      if (x < 0 || b->v[x].tup >= 0 || b->v[x].n != n || !ok_type(rs->dtype)) return -1;
      tpu_dtype xt = b->v[x].t;
      if (in->op == TPU_OP_RESHAPE ? xt != rs->dtype : !(is_i32(xt) && is_i32(rs->dtype))) {
        if (!(in->op == TPU_OP_CONVERT && xt == TPU_PRED && is_i32(rs->dtype))) return -1;
        int r = new_slot(b, rs); /* pred to 0 / 1 */
        sstep *s = r < 0 ? NULL : new_step(b, K_PRED2I, r);
        if (!s) return -1;
        s->a = b->v[x].off;
        return r;
      }
      sval v = b->v[x];
      v.t = rs->dtype;
      return new_val(b, v);
    }
    case TPU_OP_BROADCAST:
    case TPU_OP_SLICE: return x < 0 ? -1 : box_step(b, in, x);
    case TPU_OP_COMPARE: {
      int y = in->noperands == 2 ? map[in->operands[1]->id] : -1;
      if (rs->dtype != TPU_PRED || x < 0 || !is_i32(b->v[x].t) || !arr(b, x, TPU_TUPLE, n) ||
          !arr(b, y, b->v[x].t, n))
        return -1;
      int r = new_slot(b, rs);
      sstep *s = r < 0 ? NULL : new_step(b, K_CMP, r);
      if (!s) return -1;
      /* the compare kernel's signedness: the type's, unless the comparison type says */
      s->sg = b->v[x].t == TPU_S32;
      if (in->cmp_type == TPU_CMPT_SIGNED) s->sg = 1;
      if (in->cmp_type == TPU_CMPT_UNSIGNED) s->sg = 0;
      s->dir = in->direction;
      s->a = b->v[x].off;
      s->b = b->v[y].off;
      return r;
    }
    case TPU_OP_SELECT: {
      if (in->noperands != 3) return -1;
      int y = map[in->operands[1]->id], z = map[in->operands[2]->id];
      if (x < 0 || b->v[x].tup >= 0 || b->v[x].t != TPU_PRED || (b->v[x].n != n && b->v[x].n != 1) ||
          !arr(b, y, rs->dtype, n) || !arr(b, z, rs->dtype, n))
        return -1;
      int r = new_slot(b, rs);
      sstep *s = r < 0 ? NULL : new_step(b, K_SEL, r);
      if (!s) return -1;
      s->es = (int)tpu_dtype_size(rs->dtype);
      s->pscalar = b->v[x].n != n;
      s->a = b->v[x].off;
      s->b = b->v[y].off;
      s->c = b->v[z].off;
      return r;
    }
    default: break;
  }
  /* a binary op on s32/u32 that tpu__ew_i32_binary runs */
  if (tpu_op_class_of(in->op) != TPU_CLS_BINARY || in->noperands != 2 || !is_i32(rs->dtype) ||
      !tpu__ew_i32_binary(in->op, 0, NULL, NULL, 0, NULL, 0, 0))
    return -1;
  int y = map[in->operands[1]->id];
  if (!arr(b, x, rs->dtype, n) || !arr(b, y, rs->dtype, n)) return -1;
  int r = new_slot(b, rs);
  sstep *s = r < 0 ? NULL : new_step(b, K_BIN, r);
  if (!s) return -1;
  s->op = in->op;
  s->sg = rs->dtype == TPU_S32;
  s->a = b->v[x].off;
  s->b = b->v[y].off;
  return r;
}

/* Computation c inlined on argument values args: the value of its root, or -1. */
static int instance(bld *b, const tpu_comp *c, const int *args, int nargs, int depth) {
  if (depth > MAX_DEPTH || nargs != c->nparams) return -1;
  int *map = tpu_malloc(((size_t)c->ninstrs + 1) * sizeof *map);
  if (!map) return -1;
  for (int i = 0; i <= c->ninstrs; i++) map[i] = -1;
  int r = 0;
  for (int i = 0; r >= 0 && i < c->norder; i++) {
    const tpu_instr *in = c->order[i];
    r = map[in->id] = instr(b, in, map, args, nargs, depth);
  }
  if (r >= 0) r = map[c->root->id];
  tpu_free(map);
  return r;
}

void tpu__sloop_free(tpu__sloop *l) {
  if (!l) return;
  tpu_free(l->s);
  tpu_free(l->bx);
  tpu_free(l->k);
  tpu_free(l->st);
  tpu_free(l);
}

static tpu__sloop *compile(bld *b, const tpu_instr *w) {
  const tpu_shape *ws = &w->shape;
  int tuple = ws->dtype == TPU_TUPLE, nst = tuple ? ws->ntuple : 1;
  if (nst < 1 || nst > 64) return NULL;
  tpu__sloop *l = tpu_calloc(1, sizeof *l);
  if (!l || !(l->st = tpu_calloc((size_t)nst, sizeof *l->st))) {
    tpu__sloop_free(l);
    return NULL;
  }
  l->w = w;
  l->nst = nst;
  l->tuple = tuple;
  int vs[64], param;
  for (int i = 0; i < nst; i++) { /* the state's slots, then the next state's */
    const tpu_shape *es = tuple ? &ws->elems[i] : ws;
    if (es->dtype == TPU_TUPLE || (vs[i] = new_slot(b, es)) < 0) goto fail;
    sstate *s = &l->st[i];
    s->off = b->v[vs[i]].off;
    s->bytes = (size_t)b->v[vs[i]].n * tpu_dtype_size(es->dtype);
    s->t = es->dtype;
    s->rank = es->rank;
    memcpy(s->dims, es->dims, sizeof(int64_t) * (size_t)es->rank);
  }
  for (int i = 0; i < nst; i++) {
    int nv = new_slot(b, tuple ? &ws->elems[i] : ws);
    if (nv < 0) goto fail;
    l->st[i].next = b->v[nv].off;
  }
  if (tuple) {
    sval v = {0, 0, TPU_TUPLE, b->nel, nst};
    for (int i = 0; i < nst; i++) {
      if (!room((void **)&b->el, b->nel, &b->capel, sizeof *b->el)) goto fail;
      b->el[b->nel++] = vs[i];
    }
    if ((param = new_val(b, v)) < 0) goto fail;
  } else {
    param = vs[0];
  }
  int c = instance(b, w->condition, &param, 1, 0);
  if (!arr(b, c, TPU_PRED, 1)) goto fail;
  l->cond = b->v[c].off;
  l->ncond = b->ns;
  int r = instance(b, w->body, &param, 1, 0);
  if (r < 0 || (tuple ? b->v[r].tup < 0 || b->v[r].ntup != nst : b->v[r].tup >= 0)) goto fail;
  for (int i = 0; i < nst; i++) {
    int e = tuple ? b->el[b->v[r].tup + i] : r;
    if (!arr(b, e, l->st[i].t, b->v[vs[i]].n)) goto fail;
    l->st[i].src = b->v[e].off;
  }
  if (b->bytes > MAX_BYTES) goto fail;
  l->s = b->s, l->ns = b->ns, b->s = NULL;
  l->bx = b->bx, b->bx = NULL;
  l->k = b->k, l->nk = b->nk, b->k = NULL;
  l->bytes = b->bytes ? b->bytes : 16;
  return l;
fail:
  tpu__sloop_free(l);
  return NULL;
}

tpu__sloop *tpu__sloop_compile(const tpu_instr *w) {
  if (!g_on || w->op != TPU_OP_WHILE || w->noperands != 1 || !w->body || !w->condition || w->body->nparams != 1 ||
      w->condition->nparams != 1)
    return NULL;
  bld b;
  memset(&b, 0, sizeof b);
  tpu__sloop *l = compile(&b, w);
  tpu_free(b.v);
  tpu_free(b.el);
  tpu_free(b.s);
  tpu_free(b.bx);
  tpu_free(b.k);
  return l;
}

static tpu_status begin(const tpu__sloop *l, const tpu_tensor *init, void **buf, tpu_diag *d) {
  *buf = NULL;
  if (l->tuple ? init->dtype != TPU_TUPLE || init->ntuple != l->nst : init->dtype == TPU_TUPLE)
    return TPU_FAIL(d, TPU_ERR_INVALID, l->w->loc, "while '%s': the state does not match the loop's shape",
                    l->w->name);
  for (int i = 0; i < l->nst; i++) {
    const tpu_tensor *e = l->tuple ? &init->elems[i] : init;
    if (e->dtype != l->st[i].t || e->nbytes != l->st[i].bytes)
      return TPU_FAIL(d, TPU_ERR_INVALID, l->w->loc, "while '%s': the state does not match the loop's shape",
                      l->w->name);
  }
  char *m = tpu_malloc(l->bytes);
  if (!m) return TPU_FAIL(d, TPU_ERR_NOMEM, l->w->loc, "out of memory running while '%s'", l->w->name);
  for (int i = 0; i < l->nk; i++) memcpy(m + l->k[i].off, l->k[i].data, l->k[i].bytes);
  for (int i = 0; i < l->nst; i++)
    if (l->st[i].bytes) memcpy(m + l->st[i].off, (l->tuple ? &init->elems[i] : init)->data, l->st[i].bytes);
  *buf = m;
  return TPU_OK;
}

static inline uint8_t cmp(tpu_cmp_dir dir, int lt, int eq) {
  switch (dir) {
    case TPU_CMP_EQ: return (uint8_t)eq;
    case TPU_CMP_NE: return (uint8_t)!eq;
    case TPU_CMP_LT: return (uint8_t)lt;
    case TPU_CMP_LE: return (uint8_t)(lt || eq);
    case TPU_CMP_GT: return (uint8_t)(!lt && !eq);
    default: return (uint8_t)!lt; /* GE */
  }
}

static void run_steps(const tpu__sloop *l, char *m, int lo, int hi) {
  for (int i = lo; i < hi; i++) {
    const sstep *s = &l->s[i];
    switch (s->kind) {
      case K_BIN:
        for (int64_t e = 0; e < s->n; e += TPU_EW_BLOCK) {
          int k = (int)(s->n - e < TPU_EW_BLOCK ? s->n - e : TPU_EW_BLOCK);
          tpu__ew_i32_binary(s->op, s->sg, (uint32_t *)(void *)(m + s->out) + e,
                             (const uint32_t *)(const void *)(m + s->a) + e, 1,
                             (const uint32_t *)(const void *)(m + s->b) + e, 1, k);
        }
        break;
      case K_CMP: {
        const uint32_t *a = (const uint32_t *)(const void *)(m + s->a), *b = (const uint32_t *)(const void *)(m + s->b);
        uint8_t *o = (uint8_t *)(m + s->out);
        if (s->sg)
          for (int64_t e = 0; e < s->n; e++) o[e] = cmp(s->dir, (int32_t)a[e] < (int32_t)b[e], a[e] == b[e]);
        else
          for (int64_t e = 0; e < s->n; e++) o[e] = cmp(s->dir, a[e] < b[e], a[e] == b[e]);
        break;
      }
      case K_SEL: {
        const uint8_t *p = (const uint8_t *)(m + s->a);
        const int64_t ps = !s->pscalar;
        if (s->es == 4) {
          const uint32_t *x = (const uint32_t *)(const void *)(m + s->b), *y = (const uint32_t *)(const void *)(m + s->c);
          uint32_t *o = (uint32_t *)(void *)(m + s->out);
          for (int64_t e = 0; e < s->n; e++) o[e] = p[e * ps] ? x[e] : y[e];
        } else {
          const uint8_t *x = (const uint8_t *)(m + s->b), *y = (const uint8_t *)(m + s->c);
          uint8_t *o = (uint8_t *)(m + s->out);
          for (int64_t e = 0; e < s->n; e++) o[e] = p[e * ps] ? x[e] : y[e];
        }
        break;
      }
      case K_PRED2I: {
        const uint8_t *p = (const uint8_t *)(m + s->a);
        uint32_t *o = (uint32_t *)(void *)(m + s->out);
        for (int64_t e = 0; e < s->n; e++) o[e] = p[e] != 0;
        break;
      }
      case K_FILL:
        if (s->es == 4) {
          const uint32_t v = *(const uint32_t *)(const void *)(m + s->a);
          uint32_t *o = (uint32_t *)(void *)(m + s->out);
          for (int64_t e = 0; e < s->n; e++) o[e] = v;
        } else {
          memset(m + s->out, *(const uint8_t *)(m + s->a), (size_t)s->n);
        }
        break;
      case K_COPY: memcpy(m + s->out, m + s->a, (size_t)s->n * (size_t)s->es); break;
      case K_BOX: {
        const sbox *bx = &l->bx[s->box];
        if (s->n) tpu__ref_copy_box(m + s->out, m + s->a, (size_t)s->es, bx->rank, bx->dims, bx->dstr, bx->sstr);
        break;
      }
    }
  }
}

static int cond(const tpu__sloop *l, void *buf) {
  run_steps(l, buf, 0, l->ncond);
  return ((const uint8_t *)buf)[l->cond] != 0;
}

static void body(const tpu__sloop *l, void *buf) {
  char *m = buf;
  run_steps(l, m, l->ncond, l->ns);
  /* the next state gathered first: an element may be read from another one's slot */
  for (int i = 0; i < l->nst; i++)
    if (l->st[i].src != l->st[i].off) memcpy(m + l->st[i].next, m + l->st[i].src, l->st[i].bytes);
  for (int i = 0; i < l->nst; i++)
    if (l->st[i].src != l->st[i].off) memcpy(m + l->st[i].off, m + l->st[i].next, l->st[i].bytes);
}

static tpu_status end(const tpu__sloop *l, void *buf, tpu_tensor *out, tpu_diag *d) {
  const char *m = buf;
  tpu_status st = TPU_OK;
  if (out) {
    tpu_tensor_zero(out);
    if (l->tuple) st = tpu_tensor_alloc_tuple(out, l->nst, d);
    for (int i = 0; st == TPU_OK && i < l->nst; i++) {
      const sstate *s = &l->st[i];
      tpu_tensor *e = l->tuple ? &out->elems[i] : out;
      st = tpu_tensor_alloc_uninit(e, s->t, s->rank, s->dims, d);
      if (st == TPU_OK && s->bytes) memcpy(e->data, m + s->off, s->bytes);
    }
    if (st != TPU_OK) tpu_tensor_free(out);
  }
  tpu_free(buf);
  return st;
}

tpu_status tpu__sloop_run(const tpu__sloop *l, const tpu_tensor *init, int64_t limit, int64_t *iters,
                          tpu_tensor *out, tpu_diag *d) {
  void *buf;
  *iters = 0;
  tpu_tensor_zero(out);
  TPU_TRY(begin(l, init, &buf, d));
  while (cond(l, buf)) {
    if (limit > 0 && *iters >= limit) {
      end(l, buf, NULL, d);
      return TPU_FAIL(d, TPU_ERR_LIMIT, l->w->loc, "while loop '%s' ran past %lld iterations", l->w->name,
                      (long long)limit);
    }
    body(l, buf);
    ++*iters;
  }
  return end(l, buf, out, d);
}
