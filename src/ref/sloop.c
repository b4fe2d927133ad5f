/* While loops on slots: a loop of arrays compiled once into steps on one buffer (ref/sloop.h). */
#include "ref/sloop.h"

#include <string.h>

#include "base/alloc.h"
#include "ref/elementwise_int.h"

/* How deep calls are inlined, and the most bytes a loop's buffer holds (its state twice,
 * every value of an iteration, the constants): beyond either the loop is stepped op by op. */
enum { MAX_DEPTH = 16, MAX_BYTES = 1 << 20 };

typedef enum { K_BIN, K_CMP, K_SEL, K_PRED2I, K_BOX, K_FILL, K_COPY, K_FBIN, K_FUN, K_FCMP, K_KERN, K_LOOP } skind;

/* Operands of a K_KERN step: the interpreter's kernel called on views of their slots. */
enum { MAX_KOPS = 8 };

/* One step: out = f(a, b, c), every operand a byte offset into the run's buffer. */
typedef struct {
  skind kind;
  tpu_opcode op;    /* K_BIN, K_FBIN, K_FUN */
  const tpu_instr *in; /* K_FCMP, K_KERN */
  tpu_ref_kernel k;    /* K_KERN */
  tpu__ew_i32_fn f;    /* K_BIN: its op's kernel (tpu__ew_i32_binary_fn) */
  size_t kops[MAX_KOPS]; /* K_KERN: the operands' slots */
  tpu_cmp_dir dir;  /* K_CMP */
  int sg;           /* K_BIN, K_CMP: the 32-bit values signed */
  int es;           /* K_SEL, K_BOX, K_FILL: element bytes */
  int pscalar;      /* K_SEL: one predicate for every element */
  int box;          /* K_BOX: its boxes[] entry; K_LOOP: its loops[] entry */
  int skip;         /* K_LOOP: the step after the loop's own (its condition's and body's) */
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

/* A state element of a loop: its slot, its next value's slot, where that value is computed
 * (the body's root), where its first value comes from (a nested loop's init). */
typedef struct {
  size_t off, next, src, init, bytes;
  tpu_dtype t;
  int rank;
  int64_t dims[TPU_MAX_RANK];
} sstate;

/* A loop: its state st[st0 .. st0 + nst), its condition's steps [clo, chi) (the pred at
 * byte cond), its body's [chi, bhi). loops[0] is the compiled loop; the others are loops
 * nested in it, each run by a K_LOOP step. */
typedef struct {
  const tpu_instr *w;
  int st0, nst, tuple; /* tuple: the state is a tuple of nst arrays, else one array */
  int clo, chi, bhi;
  size_t cond;
  int direct; /* no next state is read from a state slot an iteration rewrites: each copied once */
} sldesc;

struct tpu__sloop {
  sstep *s;
  int ns, npro; /* s[0 .. npro): steps on constants only, run once a run before the loop (hoist) */
  sbox *bx;
  sconst *k;
  int nk;
  sstate *st;
  sldesc *lp;
  size_t bytes;
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
  sstate *st;
  int nst, capst;
  sldesc *lp;
  int nlp, caplp;
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

void tpu__sloop_shape(const tpu__sloop *l, int *hoisted, int *direct) {
  *hoisted = l->npro;
  *direct = l->lp[0].direct;
}

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

/* Any array type: the fast steps check their own types, the rest run the kernels. */
static int ok_type(tpu_dtype t) { return tpu_dtype_is_array(t); }
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
static int loop_in(bld *b, const tpu_instr *w, int initv, int depth);

/* Any other op with a kernel of its own (not control flow, custom calls, collectives, nor
 * mixed float types), on arrays: the kernel itself, called on views of its operands' slots,
 * its result copied into the op's slot; a dot or convolution as the interpreter runs it
 * (the run's TPU numerics hook first, run_kernel). */
static int kernel_step(bld *b, const tpu_instr *in, const int *map) {
  tpu_dtype w;
  tpu_ref_kernel k = tpu__ref_kernel_of(in->op);
  if (in->op == TPU_OP_DOT || in->op == TPU_OP_CONVOLUTION) k = tpu__ref_dot_conv;
  if (!k || in->noperands > MAX_KOPS || in->op == TPU_OP_RNG || in->op == TPU_OP_CUSTOM_CALL ||
      tpu_op_class_of(in->op) == TPU_CLS_COLLECTIVE ||
      (in->noperands <= 3 && tpu_instr_mixed_float(in, &w)) || !tpu_dtype_is_array(in->shape.dtype))
    return -1;
  for (int j = 0; j < in->noperands; j++) {
    int v = map[in->operands[j]->id];
    if (!arr(b, v, in->operands[j]->shape.dtype, tpu_shape_numel(&in->operands[j]->shape))) return -1;
  }
  int r = new_slot(b, &in->shape);
  sstep *s = r < 0 ? NULL : new_step(b, K_KERN, r);
  if (!s) return -1;
  s->in = in;
  s->k = k;
  s->es = (int)tpu_dtype_size(in->shape.dtype);
  for (int j = 0; j < in->noperands; j++) s->kops[j] = b->v[map[in->operands[j]->id]].off;
  return r;
}

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
        if (!(in->op == TPU_OP_CONVERT && xt == TPU_PRED && is_i32(rs->dtype))) break; /* the kernel */
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
    case TPU_OP_WHILE: { /* a nested loop: a K_LOOP step, then its own steps */
      if (x < 0 || !room((void **)&b->s, b->ns, &b->caps, sizeof *b->s)) return -1;
      int si = b->ns++;
      memset(&b->s[si], 0, sizeof b->s[si]);
      b->s[si].kind = K_LOOP;
      b->s[si].box = b->nlp;
      int r = loop_in(b, in, x, depth + 1);
      if (r < 0) return -1;
      b->s[si].skip = b->ns;
      return r;
    }
    case TPU_OP_COMPARE: {
      int y = in->noperands == 2 ? map[in->operands[1]->id] : -1;
      if (rs->dtype != TPU_PRED || x < 0 || !arr(b, x, TPU_TUPLE, n) || !arr(b, y, b->v[x].t, n)) return -1;
      if (b->v[x].t == TPU_F32) { /* the f32 compare kernel's block function */
        int r = new_slot(b, rs);
        sstep *s = r < 0 ? NULL : new_step(b, K_FCMP, r);
        if (!s) return -1;
        s->in = in;
        s->a = b->v[x].off;
        s->b = b->v[y].off;
        return r;
      }
      if (!is_i32(b->v[x].t)) break; /* the kernel */
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
      if (tpu_dtype_size(rs->dtype) != 4 && tpu_dtype_size(rs->dtype) != 1) break; /* the kernel */
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
  tpu_op_class cls = tpu_op_class_of(in->op);
  int y = in->noperands == 2 ? map[in->operands[1]->id] : -1;
  if (cls == TPU_CLS_BINARY && in->noperands == 2 && arr(b, x, rs->dtype, n) && arr(b, y, rs->dtype, n) &&
      (is_i32(rs->dtype) ? tpu__ew_i32_binary(in->op, 0, NULL, NULL, 0, NULL, 0, 0)
                         : rs->dtype == TPU_F32 && tpu__ew_f32_binary(in->op, NULL, NULL, 0))) {
    /* s32/u32 on the 32-bit values (tpu__ew_i32_binary), f32 through its block kernel */
    int r = new_slot(b, rs);
    sstep *s = r < 0 ? NULL : new_step(b, is_i32(rs->dtype) ? K_BIN : K_FBIN, r);
    if (!s) return -1;
    s->op = in->op;
    s->sg = rs->dtype == TPU_S32;
    if (s->kind == K_BIN && !(s->f = tpu__ew_i32_binary_fn(s->op, s->sg))) return -1;
    s->a = b->v[x].off;
    s->b = b->v[y].off;
    return r;
  }
  if (cls == TPU_CLS_UNARY && in->noperands == 1 && rs->dtype == TPU_F32 && arr(b, x, TPU_F32, n) &&
      tpu__ew_f32_unary(in->op, NULL, 0)) {
    int r = new_slot(b, rs);
    sstep *s = r < 0 ? NULL : new_step(b, K_FUN, r);
    if (!s) return -1;
    s->op = in->op;
    s->a = b->v[x].off;
    return r;
  }
  return kernel_step(b, in, map);
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
  tpu_free(l->lp);
  tpu_free(l);
}

/* Loop w compiled into b: its state's slots (loaded from init value initv, or from the
 * run's tensor when initv < 0), its condition's and body's steps; the value of the loop (its
 * state's slots), or -1. */
static int loop_in(bld *b, const tpu_instr *w, int initv, int depth) {
  const tpu_shape *ws = &w->shape;
  int tuple = ws->dtype == TPU_TUPLE, nst = tuple ? ws->ntuple : 1;
  if (depth > MAX_DEPTH || nst < 1 || nst > 64 || w->noperands != 1 || !w->body || !w->condition ||
      w->body->nparams != 1 || w->condition->nparams != 1)
    return -1;
  if (initv >= 0 && (tuple ? b->v[initv].tup < 0 || b->v[initv].ntup != nst : b->v[initv].tup >= 0)) return -1;
  if (!room((void **)&b->lp, b->nlp, &b->caplp, sizeof *b->lp)) return -1;
  int li = b->nlp++, st0 = b->nst;
  int vs[64], param;
  for (int i = 0; i < nst; i++) { /* the state's slots, then the next state's */
    const tpu_shape *es = tuple ? &ws->elems[i] : ws;
    if (es->dtype == TPU_TUPLE || (vs[i] = new_slot(b, es)) < 0) return -1;
    if (!room((void **)&b->st, b->nst, &b->capst, sizeof *b->st)) return -1;
    sstate *s = &b->st[b->nst++];
    memset(s, 0, sizeof *s);
    s->off = b->v[vs[i]].off;
    s->bytes = (size_t)b->v[vs[i]].n * tpu_dtype_size(es->dtype);
    s->t = es->dtype;
    s->rank = es->rank;
    memcpy(s->dims, es->dims, sizeof(int64_t) * (size_t)es->rank);
    if (initv >= 0) {
      int e = tuple ? b->el[b->v[initv].tup + i] : initv;
      if (!arr(b, e, es->dtype, b->v[vs[i]].n)) return -1;
      s->init = b->v[e].off;
    }
  }
  for (int i = 0; i < nst; i++) {
    int nv = new_slot(b, tuple ? &ws->elems[i] : ws);
    if (nv < 0) return -1;
    b->st[st0 + i].next = b->v[nv].off;
  }
  if (tuple) {
    sval v = {0, 0, TPU_TUPLE, b->nel, nst};
    for (int i = 0; i < nst; i++) {
      if (!room((void **)&b->el, b->nel, &b->capel, sizeof *b->el)) return -1;
      b->el[b->nel++] = vs[i];
    }
    if ((param = new_val(b, v)) < 0) return -1;
  } else {
    param = vs[0];
  }
  sldesc L = {w, st0, nst, tuple, b->ns, 0, 0, 0, 0};
  int c = instance(b, w->condition, &param, 1, depth);
  if (!arr(b, c, TPU_PRED, 1)) return -1;
  L.cond = b->v[c].off;
  L.chi = b->ns;
  int r = instance(b, w->body, &param, 1, depth);
  if (r < 0 || (tuple ? b->v[r].tup < 0 || b->v[r].ntup != nst : b->v[r].tup >= 0)) return -1;
  for (int i = 0; i < nst; i++) {
    int e = tuple ? b->el[b->v[r].tup + i] : r;
    if (!arr(b, e, b->st[st0 + i].t, b->v[vs[i]].n)) return -1;
    b->st[st0 + i].src = b->v[e].off;
  }
  L.bhi = b->ns;
  b->lp[li] = L;
  return param;
}

/* The bytes step s reads: in[k] = {offset, bytes} (a strided box: its extent); their count. */
static int reads(const tpu__sloop *l, const sstep *s, size_t in[3][2]) {
  size_t n = (size_t)s->n, es = (size_t)s->es;
  switch (s->kind) {
    case K_BIN: case K_FBIN: case K_CMP: case K_FCMP:
      in[0][0] = s->a, in[0][1] = n * 4, in[1][0] = s->b, in[1][1] = n * 4;
      return 2;
    case K_FUN: in[0][0] = s->a, in[0][1] = n * 4; return 1;
    case K_PRED2I: in[0][0] = s->a, in[0][1] = n; return 1;
    case K_FILL: in[0][0] = s->a, in[0][1] = es; return 1;
    case K_COPY: in[0][0] = s->a, in[0][1] = n * es; return 1;
    case K_SEL:
      in[0][0] = s->a, in[0][1] = s->pscalar ? 1 : n;
      in[1][0] = s->b, in[1][1] = n * es, in[2][0] = s->c, in[2][1] = n * es;
      return 3;
    case K_BOX: {
      const sbox *bx = &l->bx[s->box];
      size_t last = 0;
      for (int i = 0; i < bx->rank; i++) {
        if (bx->dims[i] == 0) return -1;
        last += (size_t)(bx->dims[i] - 1) * (size_t)bx->sstr[i];
      }
      in[0][0] = s->a, in[0][1] = (last + 1) * es;
      return 1;
    }
    default: return -1; /* kernels, nested loops: kept in place */
  }
}

/* The bytes step s writes. */
static size_t writes(const sstep *s) {
  switch (s->kind) {
    case K_CMP: case K_FCMP: return (size_t)s->n;
    case K_BIN: case K_FBIN: case K_FUN: case K_PRED2I: return (size_t)s->n * 4;
    default: return (size_t)s->n * (size_t)s->es;
  }
}

/* Loop-invariant steps hoisted: a step that reads only constants' bytes (or such steps'
 * results) computes the same value every time it runs, and its slot is its own (every value
 * has a slot of its own; only the state's slots are rewritten), so it runs once, before the
 * loop, in the order of the steps. The steps' indices (loop bounds, skips) follow. */
static int hoist(tpu__sloop *l, int nlp) {
  if (l->ns == 0) return 1;
  uint8_t *kb = tpu_calloc(l->bytes, 1);
  int *pos = tpu_malloc(((size_t)l->ns + 1) * sizeof *pos);
  sstep *ns = tpu_malloc((size_t)l->ns * sizeof *ns);
  char *h = tpu_calloc((size_t)l->ns, 1);
  int ok = kb && pos && ns && h;
  if (ok) {
    for (int i = 0; i < l->nk; i++) memset(kb + l->k[i].off, 1, l->k[i].bytes);
    int npro = 0;
    for (int i = 0; i < l->ns; i++) {
      size_t in[3][2];
      int nin = reads(l, &l->s[i], in), c = nin >= 0;
      for (int k = 0; c && k < nin; k++)
        for (size_t j = 0; c && j < in[k][1]; j++) c = in[k][0] + j < l->bytes && kb[in[k][0] + j];
      if (!c) continue;
      h[i] = 1, npro++;
      size_t o = l->s[i].out, nb = writes(&l->s[i]);
      if (o + nb <= l->bytes) memset(kb + o, 1, nb);
    }
    int a = 0, r = npro;
    for (int i = 0; i < l->ns; i++) {
      pos[i] = r;
      if (h[i]) ns[a++] = l->s[i];
      else ns[r++] = l->s[i];
    }
    pos[l->ns] = r;
    for (int i = npro; i < l->ns; i++)
      if (ns[i].kind == K_LOOP) ns[i].skip = pos[ns[i].skip];
    for (int j = 0; j < nlp; j++) {
      sldesc *L = &l->lp[j];
      L->clo = pos[L->clo], L->chi = pos[L->chi], L->bhi = pos[L->bhi];
    }
    l->npro = npro;
    tpu_free(l->s);
    l->s = ns, ns = NULL;
  }
  tpu_free(kb);
  tpu_free(pos);
  tpu_free(ns);
  tpu_free(h);
  return ok;
}

static tpu__sloop *compile(bld *b, const tpu_instr *w) {
  if (loop_in(b, w, -1, 0) < 0 || b->bytes > MAX_BYTES) return NULL;
  tpu__sloop *l = tpu_calloc(1, sizeof *l);
  if (!l) return NULL;
  l->w = w;
  l->s = b->s, l->ns = b->ns, b->s = NULL;
  l->bx = b->bx, b->bx = NULL;
  l->k = b->k, l->nk = b->nk, b->k = NULL;
  l->st = b->st, b->st = NULL;
  l->lp = b->lp, b->lp = NULL;
  l->bytes = b->bytes ? b->bytes : 16;
  if (!hoist(l, b->nlp)) {
    tpu__sloop_free(l);
    return NULL;
  }
  for (int j = 0; j < b->nlp; j++) { /* (a state read from another's slot, as a swap: gathered first) */
    sldesc *L = &l->lp[j];
    L->direct = 1;
    for (int i = L->st0; i < L->st0 + L->nst; i++)
      for (int k = L->st0; k < L->st0 + L->nst; k++)
        if (l->st[i].src != l->st[i].off && l->st[k].src != l->st[k].off && l->st[i].bytes && l->st[k].bytes &&
            l->st[i].src < l->st[k].off + l->st[k].bytes && l->st[k].off < l->st[i].src + l->st[i].bytes)
          L->direct = 0;
  }
  return l;
}

tpu__sloop *tpu__sloop_compile(const tpu_instr *w) {
  if (!g_on || w->op != TPU_OP_WHILE || w->noperands != 1 || !w->body || !w->condition || w->body->nparams != 1 ||
      w->condition->nparams != 1)
    return NULL;
  bld b;
  memset(&b, 0, sizeof b);
  tpu__sloop *l = compile(&b, w);
  tpu_free(b.st);
  tpu_free(b.lp);
  tpu_free(b.v);
  tpu_free(b.el);
  tpu_free(b.s);
  tpu_free(b.bx);
  tpu_free(b.k);
  return l;
}

/* memcpy of distinct slots, inline for a loop's small values (a library call costs more
 * than the copy of a few words). */
static inline void cp(char *o, const char *a, size_t n) {
  if (n > 64) {
    memcpy(o, a, n);
    return;
  }
  for (; n >= 8; n -= 8, o += 8, a += 8) memcpy(o, a, 8);
  if (n >= 4) memcpy(o, a, 4), n -= 4, o += 4, a += 4;
  for (; n; n--) *o++ = *a++;
}

static tpu_status run_steps(const tpu__sloop *l, tpu_interp *ip, char *m, int lo, int hi, int64_t limit, tpu_diag *d);

static tpu_status begin(const tpu__sloop *l, tpu_interp *ip, const tpu_tensor *init, void **buf, tpu_diag *d) {
  const sldesc *L = &l->lp[0];
  *buf = NULL;
  if (L->tuple ? init->dtype != TPU_TUPLE || init->ntuple != L->nst : init->dtype == TPU_TUPLE)
    return TPU_FAIL(d, TPU_ERR_INVALID, l->w->loc, "while '%s': the state does not match the loop's shape",
                    l->w->name);
  for (int i = 0; i < L->nst; i++) {
    const tpu_tensor *e = L->tuple ? &init->elems[i] : init;
    if (e->dtype != l->st[i].t || e->nbytes != l->st[i].bytes)
      return TPU_FAIL(d, TPU_ERR_INVALID, l->w->loc, "while '%s': the state does not match the loop's shape",
                      l->w->name);
  }
  char *m = tpu_malloc(l->bytes);
  if (!m) return TPU_FAIL(d, TPU_ERR_NOMEM, l->w->loc, "out of memory running while '%s'", l->w->name);
  for (int i = 0; i < l->nk; i++) cp(m + l->k[i].off, l->k[i].data, l->k[i].bytes);
  for (int i = 0; i < L->nst; i++) cp(m + l->st[i].off, (L->tuple ? &init->elems[i] : init)->data, l->st[i].bytes);
  tpu_status st = run_steps(l, ip, m, 0, l->npro, 0, d); /* the hoisted steps */
  if (st != TPU_OK) {
    tpu_free(m);
    return st;
  }
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

/* The kernel of a K_KERN step on views of its operands' slots. */
static tpu_status run_kernel(tpu_interp *ip, const sstep *s, char *m, tpu_diag *d) {
  const tpu_instr *in = s->in;
  tpu_tensor view[MAX_KOPS], out;
  const tpu_tensor *args[MAX_KOPS];
  for (int j = 0; j < in->noperands; j++) {
    const tpu_shape *sh = &in->operands[j]->shape;
    tpu_tensor *t = &view[j];
    t->dtype = sh->dtype;
    t->rank = sh->rank;
    for (int k = 0; k < sh->rank; k++) t->dims[k] = sh->dims[k];
    t->data = m + s->kops[j];
    t->nbytes = (size_t)tpu_shape_numel(sh) * tpu_dtype_size(sh->dtype);
    t->ntuple = 0;
    t->elems = NULL;
    args[j] = t;
  }
  tpu_tensor_zero(&out);
  int handled = 0;
  if (s->k == tpu__ref_dot_conv && in->noperands == 2) { /* as the interpreter's eval: the hook first */
    const tpu_ref_opts *o = tpu__ref_opts(ip);
    if (o->dot_conv) TPU_TRY(o->dot_conv(o->user, in, args[0], args[1], &out, &handled, d));
  }
  if (!handled) TPU_TRY(s->k(ip, in, args, &out, d));
  size_t bytes = (size_t)s->n * (size_t)s->es;
  tpu_status st = out.dtype == in->shape.dtype && out.nbytes == bytes ? TPU_OK
                  : TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "%s '%s': the kernel's result does not have the op's shape",
                             tpu_op_name(in->op), in->name);
  if (st == TPU_OK && bytes) cp(m + s->out, out.data, bytes);
  tpu_tensor_free(&out);
  return st;
}

static tpu_status run_loop(const tpu__sloop *l, const sldesc *L, tpu_interp *ip, char *m, int64_t limit,
                           tpu__sloop_tick tick, int64_t *iters, tpu_diag *d);

static tpu_status run_steps(const tpu__sloop *l, tpu_interp *ip, char *m, int lo, int hi, int64_t limit, tpu_diag *d) {
  for (int i = lo; i < hi; i++) {
    const sstep *s = &l->s[i];
    switch (s->kind) {
      case K_FBIN:
        for (int64_t e = 0; e < s->n; e += TPU_EW_BLOCK) {
          int k = (int)(s->n - e < TPU_EW_BLOCK ? s->n - e : TPU_EW_BLOCK);
          tpu__ew_f32_binary_to(s->op, (float *)(void *)(m + s->out) + e, (const float *)(const void *)(m + s->a) + e,
                                1, 1, (const float *)(const void *)(m + s->b) + e, 1, 1, k);
        }
        break;
      case K_FUN: { /* on a copy in its own slot, as the kernel runs on its scratch block */
        float *o = (float *)(void *)(m + s->out);
        cp((char *)o, m + s->a, (size_t)s->n * sizeof(float));
        for (int64_t e = 0; e < s->n; e += TPU_EW_BLOCK)
          tpu__ew_f32_unary(s->op, o + e, (int)(s->n - e < TPU_EW_BLOCK ? s->n - e : TPU_EW_BLOCK));
        break;
      }
      case K_FCMP:
        for (int64_t e = 0; e < s->n; e += TPU_EW_BLOCK)
          tpu__ew_f32_compare(s->in, (uint8_t *)(m + s->out) + e, (const float *)(const void *)(m + s->a) + e,
                              (const float *)(const void *)(m + s->b) + e,
                              (int)(s->n - e < TPU_EW_BLOCK ? s->n - e : TPU_EW_BLOCK));
        break;
      case K_KERN: TPU_TRY(run_kernel(ip, s, m, d)); break;
      case K_LOOP: { /* its state from its init values, its iterations, the run's hook told */
        const sldesc *L = &l->lp[s->box];
        for (int j = L->st0; j < L->st0 + L->nst; j++)
          cp(m + l->st[j].off, m + l->st[j].init, l->st[j].bytes);
        int64_t it = 0;
        TPU_TRY(run_loop(l, L, ip, m, limit, NULL, &it, d));
        const tpu_ref_opts *o = tpu__ref_opts(ip);
        if (o->on_while) TPU_TRY(o->on_while(o->user, L->w, it, d));
        i = s->skip - 1;
        break;
      }
      case K_BIN: /* (its own slot: the operands' are others) */
        s->f((uint32_t *)(void *)(m + s->out), (const uint32_t *)(const void *)(m + s->a),
             (const uint32_t *)(const void *)(m + s->b), s->n);
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
        } else if (s->es == 1) {
          memset(m + s->out, *(const uint8_t *)(m + s->a), (size_t)s->n);
        } else {
          for (int64_t e = 0; e < s->n; e++) memcpy(m + s->out + (size_t)e * (size_t)s->es, m + s->a, (size_t)s->es);
        }
        break;
      case K_COPY: cp(m + s->out, m + s->a, (size_t)s->n * (size_t)s->es); break;
      case K_BOX: {
        const sbox *bx = &l->bx[s->box];
        if (s->n) tpu__ref_copy_box(m + s->out, m + s->a, (size_t)s->es, bx->rank, bx->dims, bx->dstr, bx->sstr);
        break;
      }
    }
  }
  return TPU_OK;
}

/* Loop L's iterations on its state's slots: *iters counts them; more than limit (> 0) fail
 * as the interpreter's loop does. */
static tpu_status run_loop(const tpu__sloop *l, const sldesc *L, tpu_interp *ip, char *m, int64_t limit,
                           tpu__sloop_tick tick, int64_t *iters, tpu_diag *d) {
  const sstate *st = l->st + L->st0;
  for (*iters = 0;; ++*iters) {
    TPU_TRY(run_steps(l, ip, m, L->clo, L->chi, limit, d));
    if (!((const uint8_t *)m)[L->cond]) return TPU_OK;
    if (limit > 0 && *iters >= limit)
      return TPU_FAIL(d, TPU_ERR_LIMIT, L->w->loc, "while loop '%s' ran past %lld iterations", L->w->name,
                      (long long)limit);
    TPU_TRY(run_steps(l, ip, m, L->chi, L->bhi, limit, d));
    if (L->direct) { /* no state read from a slot this rewrites */
      for (int i = 0; i < L->nst; i++)
        if (st[i].src != st[i].off) cp(m + st[i].off, m + st[i].src, st[i].bytes);
    } else { /* the next state gathered first: an element may be read from another one's slot */
      for (int i = 0; i < L->nst; i++)
        if (st[i].src != st[i].off) cp(m + st[i].next, m + st[i].src, st[i].bytes);
      for (int i = 0; i < L->nst; i++)
        if (st[i].src != st[i].off) cp(m + st[i].off, m + st[i].next, st[i].bytes);
    }
    if (tick) tick(ip, *iters + 1);
  }
}

static tpu_status end(const tpu__sloop *l, void *buf, tpu_tensor *out, tpu_diag *d) {
  const char *m = buf;
  tpu_status st = TPU_OK;
  if (out) {
    tpu_tensor_zero(out);
    const sldesc *L = &l->lp[0];
    if (L->tuple) st = tpu_tensor_alloc_tuple(out, L->nst, d);
    for (int i = 0; st == TPU_OK && i < L->nst; i++) {
      const sstate *s = &l->st[i];
      tpu_tensor *e = L->tuple ? &out->elems[i] : out;
      st = tpu_tensor_alloc_uninit(e, s->t, s->rank, s->dims, d);
      if (st == TPU_OK) cp(e->data, m + s->off, s->bytes);
    }
    if (st != TPU_OK) tpu_tensor_free(out);
  }
  tpu_free(buf);
  return st;
}

tpu_status tpu__sloop_run(const tpu__sloop *l, tpu_interp *ip, const tpu_tensor *init, int64_t limit,
                          tpu__sloop_tick tick, int64_t *iters, tpu_tensor *out, tpu_diag *d) {
  void *buf;
  *iters = 0;
  tpu_tensor_zero(out);
  TPU_TRY(begin(l, ip, init, &buf, d));
  tpu_status st = run_loop(l, &l->lp[0], ip, buf, limit, tick, iters, d);
  if (st != TPU_OK) {
    end(l, buf, NULL, d);
    return st;
  }
  return end(l, buf, out, d);
}
