/* The Mosaic interpreter: the grid loop with its BlockSpec windows moved HBM<->VMEM as
 * Pallas's TPU pipeline moves them, scalar prefetch, scratch, control flow, memrefs, DMAs
 * and semaphores. Values are exact values of their element types (held as doubles). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "mosaic/mosaic_int.h"

tpu_status tpu__mo_fail(mo_ctx *c, const tpu_mo_op *op, tpu_status st, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!op) return TPU_FAIL(c->d, st, c->k->loc, "Pallas kernel '%s': %s", c->k->name, msg);
  return TPU_FAIL(c->d, st, c->k->loc, "Pallas kernel '%s', %s (kernel line %d%s%s): %s", c->k->name, op->name,
                  op->line, op->src ? ", " : "", op->src ? op->src : "", msg);
}

static void val_clear(mo_val *v) {
  if (v->kind != TPU_MO_MEMREF && v->kind != TPU_MO_SEM) tpu_free(v->v);
  memset(v, 0, sizeof *v);
}

double *tpu__mo_def(mo_ctx *c, int id, const tpu_mo_type *t, tpu_status *st) {
  mo_val *v = &c->vals[id];
  val_clear(v);
  int64_t n = tpu__mo_numel(t->rank, t->dims);
  if (n < 0 || n > ((int64_t)1 << 31)) {
    *st = tpu__mo_fail(c, NULL, TPU_ERR_LIMIT, "a vector of %lld elements", (long long)n);
    return NULL;
  }
  v->v = tpu_calloc((size_t)n + 1, sizeof(double));
  if (!v->v) {
    *st = tpu__mo_fail(c, NULL, TPU_ERR_NOMEM, "out of memory");
    return NULL;
  }
  v->set = 1;
  v->kind = t->kind == TPU_MO_VECTOR ? TPU_MO_VECTOR : TPU_MO_SCALAR;
  v->dt = t->dt;
  v->rank = t->rank;
  memcpy(v->dims, t->dims, sizeof v->dims);
  return v->v;
}

void tpu__mo_def_nodata(mo_ctx *c, int id, const tpu_mo_type *t) {
  mo_val *v = &c->vals[id];
  val_clear(v);
  v->set = 1;
  v->kind = TPU_MO_VECTOR;
  v->dt = t->dt;
  v->rank = t->rank;
  memcpy(v->dims, t->dims, sizeof v->dims);
}

static tpu_status set_scalar(mo_ctx *c, int id, const tpu_mo_type *t, double x) {
  tpu_status st = TPU_OK;
  double *p = tpu__mo_def(c, id, t, &st);
  if (!p) return st;
  p[0] = tpu__mo_round_ty(t, x);
  return TPU_OK;
}

/* Storage the run owns (zeroed), freed at the end. */
static double *own(mo_ctx *c, int64_t n) {
  double *p = tpu__mo_zeroed(n);
  if (!p) return NULL;
  tpu__mo_lock(c); /* other devices' remote DMAs read the list */
  if (c->nowned == c->capowned) {
    int cap = c->capowned ? 2 * c->capowned : 16;
    double **w = tpu_realloc(c->owned, sizeof *w * (size_t)cap);
    int64_t *wn = w ? tpu_realloc(c->ownn, sizeof *wn * (size_t)cap) : NULL;
    if (w) c->owned = w;
    if (wn) c->ownn = wn;
    if (!w || !wn) {
      tpu__mo_unlock(c);
      tpu__mo_release(p, n);
      return NULL;
    }
    c->capowned = cap;
  }
  c->ownn[c->nowned] = n;
  c->owned[c->nowned++] = p;
  tpu__mo_unlock(c);
  return p;
}

static void set_view(mo_val *v, double *base, int64_t off, int rank, const int64_t *dims, const int64_t *str,
                     tpu_dtype dt, tpu_mo_space sp, int sem) {
  val_clear(v);
  v->set = 1;
  v->kind = sem && rank == 0 ? TPU_MO_SEM : TPU_MO_MEMREF;
  v->base = base;
  v->off = off;
  v->rank = rank;
  v->dt = dt;
  v->space = sp;
  for (int i = 0; i < rank; i++) {
    v->dims[i] = dims[i];
    v->str[i] = str[i];
  }
}

static void row_major(int rank, const int64_t *dims, int64_t *str) {
  int64_t a = 1;
  for (int i = rank - 1; i >= 0; i--) {
    str[i] = a;
    a *= dims[i];
  }
}

/* A fresh memref of type t (scratch, allocations). */
static tpu_status alloc_ref(mo_ctx *c, int id, const tpu_mo_type *t) {
  int64_t n = tpu__mo_numel(t->rank, t->dims), str[TPU_MO_MAX_RANK];
  double *p = own(c, n);
  if (!p) return tpu__mo_fail(c, NULL, TPU_ERR_NOMEM, "out of memory");
  row_major(t->rank, t->dims, str);
  set_view(&c->vals[id], p, 0, t->rank, t->dims, str, t->dt, t->space, t->sem);
  if (t->kind == TPU_MO_SEM) c->vals[id].kind = TPU_MO_SEM;
  return TPU_OK;
}

static tpu_status run_block(mo_ctx *c, const tpu_mo_block *b);

/* memref.alloca / tpu.sem_alloc (pl.run_scoped): a buffer live while its region runs. Each
 * op keeps one buffer for the run (its contents are undefined at each allocation), so a
 * scope inside a loop does not grow the run's memory; semaphores start at zero each time. */
static tpu_status scoped_ref(mo_ctx *c, const tpu_mo_op *op) {
  const tpu_mo_type *t = &op->rest[0];
  int id = op->res[0];
  if (!c->scoped) {
    c->scoped = tpu_calloc((size_t)c->k->nvalues + 1, sizeof *c->scoped);
    if (!c->scoped) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
  }
  if (!c->scoped[id].base) {
    TPU_TRY(alloc_ref(c, id, t));
    c->scoped[id] = c->vals[id];
  }
  val_clear(&c->vals[id]);
  c->vals[id] = c->scoped[id];
  if (t->sem) {
    int64_t n = tpu__mo_numel(t->rank, t->dims);
    for (int64_t e = 0; e < n; e++) c->scoped[id].base[e] = 0;
  }
  return TPU_OK;
}

static int64_t sval(mo_ctx *c, int id) { return (int64_t)c->vals[id].v[0]; }

/* Element offset of indices idx (count n, leading dims) in view m; -1 out of bounds. */
static int64_t elem_off(const mo_val *m, const int64_t *idx, int n) {
  int64_t o = m->off;
  for (int i = 0; i < n; i++) {
    if (idx[i] < 0 || idx[i] >= m->dims[i]) return -1;
    o += idx[i] * m->str[i];
  }
  return o;
}

/* vector.load / tpu.vector_store and kin: a vector of `vdims` at indices of memref m. The
 * vector covers m's trailing dims; mask (may be NULL) skips elements on store. */
static tpu_status xfer(mo_ctx *c, const tpu_mo_op *op, const mo_val *m, const int64_t *start, int vrank,
                       const int64_t *vdims, double *vec, int store, int add, const double *mask, const int64_t *vstr) {
  if (m->kind != TPU_MO_MEMREF) return tpu__mo_fail(c, op, TPU_ERR_INVALID, "not a memref");
  int lead = m->rank - vrank;
  if (lead < 0) {
    /* A vector of higher rank than the ref: its leading 1s. */
    int64_t n = tpu__mo_numel(vrank, vdims);
    if (n != tpu__mo_numel(m->rank, m->dims)) return tpu__mo_fail(c, op, TPU_ERR_INVALID, "a vector larger than its memref");
    vrank = m->rank;
    vdims = m->dims;
    lead = 0;
  }
  int64_t n = tpu__mo_numel(vrank, vdims), idx[TPU_MO_MAX_RANK], full[TPU_MO_MAX_RANK];
  for (int64_t e = 0; e < n; e++) {
    int64_t r = e;
    for (int i = vrank - 1; i >= 0; i--) {
      idx[i] = vdims[i] ? r % vdims[i] : 0;
      r = vdims[i] ? r / vdims[i] : 0;
    }
    for (int i = 0; i < m->rank; i++)
      full[i] = start[i] + (i >= lead ? idx[i - lead] * (vstr ? vstr[i] : 1) : 0);
    int64_t o = elem_off(m, full, m->rank);
    if (o < 0) {
      if (store && !(mask && mask[e] == 0)) {
        char b[160];
        int k = 0;
        for (int i = 0; i < m->rank && k < (int)sizeof b - 24; i++) k += snprintf(b + k, sizeof b - (size_t)k, "%s%lld", i ? "," : "", (long long)full[i]);
        return tpu__mo_fail(c, op, TPU_ERR_RUNTIME, "store out of bounds at [%s]", b);
      }
      if (!store) {
        char b[160];
        int k = 0;
        for (int i = 0; i < m->rank && k < (int)sizeof b - 24; i++) k += snprintf(b + k, sizeof b - (size_t)k, "%s%lld", i ? "," : "", (long long)full[i]);
        return tpu__mo_fail(c, op, TPU_ERR_RUNTIME, "load out of bounds at [%s]", b);
      }
      continue;
    }
    if (!store) vec[e] = m->base[o];
    else if (!mask || mask[e] != 0) m->base[o] = tpu__mo_round(m->dt, add ? m->base[o] + vec[e] : vec[e]);
  }
  return TPU_OK;
}

static void indices(mo_ctx *c, const tpu_mo_op *op, int first, int n, int64_t *idx) {
  for (int i = 0; i < n && i < TPU_MO_MAX_RANK; i++) idx[i] = sval(c, op->opd[first + i]);
}

/* operandSegmentSizes: the size of segment s (default `def`). */
static int segment(const tpu_mo_op *op, int s, int def) {
  int64_t v[8];
  int n = tpu_mo_attr_ints(op, "operandSegmentSizes", v, 8);
  return n > s ? (int)v[s] : def;
}

static tpu_status load_store(mo_ctx *c, const tpu_mo_op *op) {
  int64_t idx[TPU_MO_MAX_RANK] = {0}, vstr[TPU_MO_MAX_RANK];
  int store = op->code == TPU_MO_VSTORE || op->code == TPU_MO_TVSTORE || op->code == TPU_MO_MSTORE ||
              op->code == TPU_MO_STRIDED_STORE;
  int base = store ? 1 : 0;
  const mo_val *m = &c->vals[op->opd[base]];
  if (m->kind != TPU_MO_MEMREF) return tpu__mo_fail(c, op, TPU_ERR_INVALID, "not a memref");
  int nidx = op->code == TPU_MO_TVSTORE ? segment(op, 2, m->rank) : m->rank;
  if (nidx > op->nopd - base - 1) nidx = op->nopd - base - 1;
  indices(c, op, base + 1, nidx, idx);
  int ns = tpu_mo_attr_ints(op, "strides", vstr, TPU_MO_MAX_RANK);
  const int64_t *sp = ns > 0 ? vstr : NULL;
  const double *mask = NULL;
  if (op->code == TPU_MO_TVSTORE && segment(op, 3, 0) > 0) mask = c->vals[op->opd[op->nopd - 1]].v;
  int64_t add = 0;
  if (op->code == TPU_MO_TVSTORE) tpu_mo_attr_int(op, "add", &add);
  if (op->code == TPU_MO_MLOAD || op->code == TPU_MO_MSTORE) { /* a scalar */
    if (!m->base) { /* count mode: an operand in HBM has no data */
      c->work.scalar_ops++;
      return store ? TPU_OK : set_scalar(c, op->res[0], &op->rest[0], 0);
    }
    int64_t o = elem_off(m, idx, m->rank);
    if (o < 0) return tpu__mo_fail(c, op, TPU_ERR_RUNTIME, "scalar access out of bounds");
    c->work.scalar_ops++;
    if (store) {
      m->base[o] = tpu__mo_round(m->dt, c->vals[op->opd[0]].v[0]);
      return TPU_OK;
    }
    return set_scalar(c, op->res[0], &op->rest[0], m->base[o]);
  }
  /* Vector loads and stores issue in the load/store slots, beside the VALU's: not priced. */
  if (c->count) {
    if (!store) tpu__mo_def_nodata(c, op->res[0], &op->rest[0]);
    return TPU_OK;
  }
  if (store) {
    const mo_val *v = &c->vals[op->opd[0]];
    return xfer(c, op, m, idx, v->rank, v->dims, v->v, 1, (int)add, mask, sp);
  }
  tpu_status st = TPU_OK;
  const tpu_mo_type *t = &op->rest[0];
  double *r = tpu__mo_def(c, op->res[0], t, &st);
  if (!r) return st;
  return xfer(c, op, m, idx, t->rank, t->dims, r, 0, 0, NULL, sp);
}

/* tpu.memref_slice(ref, base indices..., dynamic sizes...), memref_squeeze, reshape. */
static tpu_status view_op(mo_ctx *c, const tpu_mo_op *op) {
  const mo_val *m = &c->vals[op->opd[0]];
  const tpu_mo_type *t = &op->rest[0];
  mo_val nv = *m;
  nv.v = NULL;
  if (op->code == TPU_MO_MEMREF_SLICE) {
    int64_t idx[TPU_MO_MAX_RANK] = {0};
    int n = m->rank < op->nopd - 1 ? m->rank : op->nopd - 1;
    indices(c, op, 1, n, idx);
    int64_t o = m->off;
    for (int i = 0; i < m->rank; i++) {
      int64_t sz = t->dims[i] >= 0 ? t->dims[i] : (op->nopd > 1 + m->rank + i ? sval(c, op->opd[1 + m->rank + i]) : 1);
      if (idx[i] < 0 || idx[i] + sz > m->dims[i])
        return tpu__mo_fail(c, op, TPU_ERR_RUNTIME, "slice [%lld, +%lld) of a dimension of %lld", (long long)idx[i],
                            (long long)sz, (long long)m->dims[i]);
      o += idx[i] * m->str[i];
      nv.dims[i] = sz;
    }
    nv.off = o;
  } else if (op->code == TPU_MO_MEMREF_SQUEEZE) {
    int k = 0, drop = m->rank - t->rank;
    for (int i = 0; i < m->rank; i++) {
      if (drop > 0 && m->dims[i] == 1 && (k >= t->rank || t->dims[k] != 1 || m->rank - i > t->rank - k)) {
        drop--;
        continue;
      }
      nv.dims[k] = m->dims[i];
      nv.str[k++] = m->str[i];
    }
    nv.rank = t->rank;
  } else { /* reshape / bitcast of a contiguous ref: same elements, new dims */
    if (tpu__mo_numel(t->rank, t->dims) != tpu__mo_numel(m->rank, m->dims))
      return tpu__mo_fail(c, op, TPU_ERR_UNSUPPORTED, "a memref reshape that changes the element count is not modelled");
    nv.rank = t->rank;
    memcpy(nv.dims, t->dims, sizeof nv.dims);
    row_major(t->rank, t->dims, nv.str);
  }
  nv.dt = t->dt;
  nv.kind = t->kind == TPU_MO_SEM ? TPU_MO_SEM : TPU_MO_MEMREF;
  mo_val *dst = &c->vals[op->res[0]];
  val_clear(dst);
  *dst = nv;
  dst->set = 1;
  return TPU_OK;
}

/* Copies the block of value view src into view dst (same dims). */
static void copy_view(const mo_val *src, const mo_val *dst) {
  int64_t n = tpu__mo_numel(src->rank, src->dims), idx[TPU_MO_MAX_RANK];
  for (int64_t e = 0; e < n; e++) {
    int64_t r = e, so = src->off, dof = dst->off;
    for (int i = src->rank - 1; i >= 0; i--) {
      idx[i] = r % src->dims[i];
      r /= src->dims[i];
    }
    for (int i = 0; i < src->rank; i++) {
      so += idx[i] * src->str[i];
      dof += idx[i] * dst->str[i];
    }
    dst->base[dof] = tpu__mo_round(dst->dt, src->base[so]);
  }
}

static double *sem_cell(const mo_val *s) { return s->base + s->off; }

static tpu_status dma(mo_ctx *c, const tpu_mo_op *op) {
  /* enqueue_dma(source, [source_semaphore], target, target_semaphore, [device_id], [core_id]) */
  int seg[6] = {segment(op, 0, 1), segment(op, 1, 0), segment(op, 2, 1), segment(op, 3, 1), segment(op, 4, 0), segment(op, 5, 0)};
  int p = 0;
  const mo_val *src = &c->vals[op->opd[p]];
  p += seg[0];
  const mo_val *ssem = seg[1] ? &c->vals[op->opd[p]] : NULL;
  p += seg[1];
  const mo_val *dst = &c->vals[op->opd[p]];
  p += seg[2];
  const mo_val *tsem = &c->vals[op->opd[p]];
  p += seg[3];
  int64_t dev = seg[4] ? sval(c, op->opd[p]) : c->o->device_id;
  int remote = dev != c->o->device_id;
  if (tpu__mo_numel(src->rank, src->dims) != tpu__mo_numel(dst->rank, dst->dims) || src->rank != dst->rank)
    return tpu__mo_fail(c, op, TPU_ERR_INVALID, "a DMA between refs of different shapes");
  int64_t n = tpu__mo_numel(src->rank, src->dims);
  double bytes = (double)n * (double)tpu_dtype_size(dst->dt);
  if (remote && c->count) { /* timing one device: the target's buffers are not there */
    tpu__mo_ici_note(c, dev, bytes, 1);
    if (ssem) *sem_cell(ssem) += 1;
    return TPU_OK;
  }
  tpu_status st = TPU_OK;
  mo_val rdst = *dst, rsem = *tsem;
  tpu__mo_lock(c);
  if (remote) st = tpu__mo_remote(c, op, dev, dst, &rdst);
  if (remote && st == TPU_OK) st = tpu__mo_remote(c, op, dev, tsem, &rsem);
  if (st == TPU_OK) {
    if (src->base && rdst.base) copy_view(src, &rdst); /* count mode: HBM has no data */
    /* The copy is done at once; the semaphores count the DMA so its wait can check it. */
    if (ssem) *sem_cell(ssem) += 1;
    *sem_cell(&rsem) += 1;
    tpu__mo_sem_changed(c);
  }
  tpu__mo_unlock(c);
  if (st != TPU_OK) return st;
  if (remote) {
    tpu__mo_ici_note(c, dev, bytes, 1);
  } else {
    c->work.dma_bytes += bytes;
    c->work.ndma++;
  }
  return TPU_OK;
}

static tpu_status run_op(mo_ctx *c, const tpu_mo_op *op);

/* Runs a region's block with `nargs` argument values (copied in), leaving c->yield set. */
static tpu_status run_region(mo_ctx *c, const tpu_mo_block *b, const mo_val *args, int nargs) {
  if (b->nargs != nargs) return tpu__mo_fail(c, NULL, TPU_ERR_INVALID, "a region of %d arguments given %d", b->nargs, nargs);
  for (int i = 0; i < nargs; i++) {
    mo_val *v = &c->vals[b->args[i]];
    const mo_val *a = &args[i];
    val_clear(v);
    *v = *a;
    if (a->kind != TPU_MO_MEMREF && a->kind != TPU_MO_SEM) {
      int64_t n = tpu__mo_numel(a->rank, a->dims);
      v->v = tpu_malloc(sizeof(double) * (size_t)(n + 1));
      if (!v->v) return tpu__mo_fail(c, NULL, TPU_ERR_NOMEM, "out of memory");
      memcpy(v->v, a->v, sizeof(double) * (size_t)n);
    }
  }
  return run_block(c, b);
}

/* A snapshot of values (deep copies of arrays) the caller frees with free_vals. */
static mo_val *snap(mo_ctx *c, const int *ids, int n) {
  mo_val *s = tpu_calloc((size_t)n + 1, sizeof *s);
  if (!s) return NULL;
  for (int i = 0; i < n; i++) {
    s[i] = c->vals[ids[i]];
    if (s[i].kind != TPU_MO_MEMREF && s[i].kind != TPU_MO_SEM) {
      int64_t m = tpu__mo_numel(s[i].rank, s[i].dims);
      s[i].v = tpu_malloc(sizeof(double) * (size_t)(m + 1));
      if (!s[i].v) {
        for (int j = 0; j < i; j++)
          if (s[j].kind != TPU_MO_MEMREF && s[j].kind != TPU_MO_SEM) tpu_free(s[j].v);
        tpu_free(s);
        return NULL;
      }
      if (c->vals[ids[i]].v) memcpy(s[i].v, c->vals[ids[i]].v, sizeof(double) * (size_t)m);
    }
  }
  return s;
}

static void free_vals(mo_val *s, int n) {
  for (int i = 0; s && i < n; i++)
    if (s[i].kind != TPU_MO_MEMREF && s[i].kind != TPU_MO_SEM) tpu_free(s[i].v);
  tpu_free(s);
}

/* Moves a snapshot into result ids (takes ownership of the arrays). */
static void give(mo_ctx *c, const int *ids, mo_val *s, int n) {
  for (int i = 0; i < n; i++) {
    val_clear(&c->vals[ids[i]]);
    c->vals[ids[i]] = s[i];
    s[i].v = NULL;
    s[i].kind = TPU_MO_MEMREF; /* nothing left to free */
  }
}

static tpu_status yield_into(mo_ctx *c, const tpu_mo_op *op, int first) {
  const tpu_mo_op *y = c->yield;
  int n = y ? y->nopd - first : 0;
  if (n != op->nres) return tpu__mo_fail(c, op, TPU_ERR_INVALID, "a region yields %d values for %d results", n, op->nres);
  mo_val *s = snap(c, y->opd + first, n);
  if (!s) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
  give(c, op->res, s, n);
  free_vals(s, n);
  return TPU_OK;
}

static tpu_status run_for(mo_ctx *c, const tpu_mo_op *op) {
  int64_t lb = sval(c, op->opd[0]), ub = sval(c, op->opd[1]), step = sval(c, op->opd[2]);
  if (step <= 0) return tpu__mo_fail(c, op, TPU_ERR_RUNTIME, "scf.for with step %lld", (long long)step);
  int nit = op->nopd - 3;
  mo_val *cur = snap(c, op->opd + 3, nit);
  if (!cur) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
  tpu_status st = TPU_OK;
  mo_val *args = tpu_calloc((size_t)nit + 2, sizeof *args);
  if (!args) st = tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
  double ivd = 0;
  for (int64_t i = lb; st == TPU_OK && i < ub; i += step) {
    ivd = (double)i;
    args[0] = (mo_val){.set = 1, .kind = TPU_MO_SCALAR, .dt = op->reg[0].argt[0].dt, .rank = 0, .v = &ivd};
    for (int j = 0; j < nit; j++) args[1 + j] = cur[j];
    st = run_region(c, &op->reg[0], args, nit + 1);
    if (st != TPU_OK) break;
    c->work.scalar_ops += 2;
    mo_val *nx = snap(c, c->yield->opd, c->yield->nopd);
    if (!nx) {
      st = tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
      break;
    }
    free_vals(cur, nit);
    cur = nx;
  }
  if (st == TPU_OK) give(c, op->res, cur, op->nres < nit ? op->nres : nit);
  free_vals(cur, nit);
  tpu_free(args);
  return st;
}

static tpu_status run_while(mo_ctx *c, const tpu_mo_op *op) {
  int n = op->nopd;
  mo_val *cur = snap(c, op->opd, n);
  if (!cur) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
  tpu_status st = TPU_OK;
  for (int64_t it = 0;; it++) {
    if (it > ((int64_t)1 << 32)) {
      st = tpu__mo_fail(c, op, TPU_ERR_LIMIT, "scf.while ran 2^32 iterations");
      break;
    }
    st = run_region(c, &op->reg[0], cur, n);
    if (st != TPU_OK) break;
    const tpu_mo_op *cond = c->yield;
    int go = sval(c, cond->opd[0]) != 0;
    mo_val *nx = snap(c, cond->opd + 1, cond->nopd - 1);
    if (!nx) {
      st = tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
      break;
    }
    if (!go) {
      give(c, op->res, nx, op->nres);
      free_vals(nx, cond->nopd - 1);
      break;
    }
    st = run_region(c, &op->reg[1], nx, cond->nopd - 1);
    free_vals(nx, cond->nopd - 1);
    if (st != TPU_OK) break;
    free_vals(cur, n);
    cur = snap(c, c->yield->opd, c->yield->nopd);
    if (!cur) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
  }
  free_vals(cur, n);
  return st;
}

static tpu_status constant(mo_ctx *c, const tpu_mo_op *op) {
  const char *a = tpu_mo_attr(op, "value");
  const tpu_mo_type *t = &op->rest[0];
  if (!a) return tpu__mo_fail(c, op, TPU_ERR_INVALID, "a constant without a value");
  if (c->count && t->kind == TPU_MO_VECTOR) { /* no values when counting: a vector's elements are never read */
    tpu__mo_def_nodata(c, op->res[0], t);
    return TPU_OK;
  }
  tpu_status st = TPU_OK;
  double *r = tpu__mo_def(c, op->res[0], t, &st);
  if (!r) return st;
  int64_t n = tpu__mo_numel(t->rank, t->dims);
  if (a[0] == 'D' && a[1] == ':') {
    const char *p = a + 2;
    for (int64_t e = 0; e < n && *p; e++) {
      char *q;
      double x = !strncmp(p, "true", 4) ? 1 : !strncmp(p, "false", 5) ? 0 : strtod(p, &q);
      if (!strncmp(p, "true", 4) || !strncmp(p, "false", 5)) q = (char *)p + (p[0] == 't' ? 4 : 5);
      r[e] = tpu__mo_round_ty(t, x);
      p = *q == ',' ? q + 1 : q;
    }
    return TPU_OK;
  }
  double x;
  if ((a[0] == 'i' || a[0] == 'f' || a[0] == 'd') && a[1] == ':') {
    const char *p = a + 2;
    x = !strcmp(p, "True") || !strcmp(p, "true") ? 1 : !strcmp(p, "False") || !strcmp(p, "false") ? 0
        : !strcmp(p, "inf") ? INFINITY : !strcmp(p, "-inf") ? -INFINITY : !strcmp(p, "nan") ? NAN : strtod(p, NULL);
  } else {
    return tpu__mo_fail(c, op, TPU_ERR_UNSUPPORTED, "a constant '%s' is not modelled", a);
  }
  for (int64_t e = 0; e < n; e++) r[e] = tpu__mo_round_ty(t, x);
  return TPU_OK;
}

static const tpu_mo_op *func_named(const tpu_mosaic *k, const char *name) {
  for (int i = 0; i < k->nfuncs; i++) {
    const char *s = tpu_mo_attr(k->funcs[i], "sym_name");
    if (s && !strncmp(s, "s:", 2) && !strcmp(s + 2, name)) return k->funcs[i];
  }
  return NULL;
}

static tpu_status run_op(mo_ctx *c, const tpu_mo_op *op) {
  switch (op->code) {
    case TPU_MO_CONSTANT: return constant(c, op);
    case TPU_MO_RETURN: case TPU_MO_YIELD: case TPU_MO_CONDITION: case TPU_MO_TYIELD:
      c->yield = op;
      return TPU_OK;
    case TPU_MO_IF: {
      int cond = sval(c, op->opd[0]) != 0;
      c->work.scalar_ops++;
      if (!cond && op->nreg < 2) return TPU_OK;
      const tpu_mo_block *b = &op->reg[cond ? 0 : 1];
      if (!b->nops && !op->nres) return TPU_OK;
      TPU_TRY(run_region(c, b, NULL, 0));
      return op->nres ? yield_into(c, op, 0) : TPU_OK;
    }
    case TPU_MO_FOR: return run_for(c, op);
    case TPU_MO_WHILE: return run_while(c, op);
    case TPU_MO_REGION:
      TPU_TRY(run_region(c, &op->reg[0], NULL, 0));
      return op->nres ? yield_into(c, op, 0) : TPU_OK;
    case TPU_MO_CALL: {
      const char *callee = tpu_mo_attr(op, "callee");
      const tpu_mo_op *f = callee && callee[0] == '@' ? func_named(c->k, callee + 1) : NULL;
      if (!f || f->nreg != 1) return tpu__mo_fail(c, op, TPU_ERR_INVALID, "a call of an unknown function");
      mo_val *a = snap(c, op->opd, op->nopd);
      if (!a) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
      tpu_status st = run_region(c, &f->reg[0], a, op->nopd);
      free_vals(a, op->nopd);
      return st == TPU_OK && op->nres ? yield_into(c, op, 0) : st;
    }
    case TPU_MO_VLOAD: case TPU_MO_VSTORE: case TPU_MO_TVSTORE: case TPU_MO_TLOAD: case TPU_MO_TVLOAD:
    case TPU_MO_MLOAD: case TPU_MO_MSTORE: case TPU_MO_STRIDED_LOAD: case TPU_MO_STRIDED_STORE:
      return load_store(c, op);
    case TPU_MO_MEMREF_SLICE: case TPU_MO_MEMREF_SQUEEZE: case TPU_MO_MEMREF_RESHAPE: case TPU_MO_MEMREF_BITCAST:
    case TPU_MO_REINTERPRET_CAST: case TPU_MO_ERASE_LAYOUT:
      return view_op(c, op);
    case TPU_MO_ASSUME_MULTIPLE: case TPU_MO_ASSUME_LAYOUT: {
      mo_val *s = snap(c, op->opd, 1);
      if (!s) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
      give(c, op->res, s, 1);
      free_vals(s, 1);
      return TPU_OK;
    }
    case TPU_MO_SEM_ALLOC: case TPU_MO_ALLOCA: return scoped_ref(c, op);
    case TPU_MO_SEM_SIGNAL: {
      /* sem_signal(semaphore, amount, [device_id], [core_id]) */
      int64_t dev = op->nopd > 2 && segment(op, 2, 0) ? sval(c, op->opd[2]) : c->o->device_id;
      c->work.scalar_ops++;
      if (dev != c->o->device_id && c->count) {
        tpu__mo_ici_note(c, dev, 0, 0);
        return TPU_OK;
      }
      mo_val r = c->vals[op->opd[0]];
      tpu_status st = TPU_OK;
      tpu__mo_lock(c);
      if (dev != c->o->device_id) st = tpu__mo_remote(c, op, dev, &c->vals[op->opd[0]], &r);
      if (st == TPU_OK) {
        *sem_cell(&r) += (double)sval(c, op->opd[1]);
        tpu__mo_sem_changed(c);
      }
      tpu__mo_unlock(c);
      return st;
    }
    case TPU_MO_SEM_WAIT: case TPU_MO_WAIT_DMA: {
      double amt = op->code == TPU_MO_SEM_WAIT ? (double)sval(c, op->opd[1]) : 1;
      if (op->code == TPU_MO_SEM_WAIT) c->work.scalar_ops++;
      tpu__mo_lock(c);
      tpu_status st = tpu__mo_sem_take(c, op, sem_cell(&c->vals[op->opd[0]]), amt);
      tpu__mo_unlock(c);
      return st;
    }
    case TPU_MO_SEM_READ: {
      tpu__mo_lock(c);
      double v = *sem_cell(&c->vals[op->opd[0]]);
      tpu__mo_unlock(c);
      return set_scalar(c, op->res[0], &op->rest[0], v);
    }
    case TPU_MO_SEM_BARRIER: {
      int64_t none[1] = {0};
      set_view(&c->vals[op->res[0]], c->barrier, 0, 0, none, none, TPU_S32, TPU_MO_SEMMEM, 1);
      return TPU_OK;
    }
    case TPU_MO_ENQUEUE_DMA: return dma(c, op);
    case TPU_MO_DEVICE_ID: return set_scalar(c, op->res[0], &op->rest[0], c->o->device_id);
    case TPU_MO_CORE_ID: return set_scalar(c, op->res[0], &op->rest[0], 0);
    case TPU_MO_TRACE_START: case TPU_MO_TRACE_STOP: case TPU_MO_DELAY: return TPU_OK;
    case TPU_MO_TLOG: case TPU_MO_TLOG_BUFFER: return tpu__mo_log(c, op);
    default: break;
  }
  int handled = 0;
  tpu_status st = tpu__mo_vec_op(c, op, &handled);
  if (handled) return st;
  return tpu__mo_fail(c, op, TPU_ERR_UNSUPPORTED, "the operation '%s' is not modelled yet", op->name);
}

static tpu_status run_block(mo_ctx *c, const tpu_mo_block *b) {
  c->yield = NULL;
  for (int i = 0; i < b->nops; i++) {
    const tpu_mo_op *op = b->ops[i];
    for (int j = 0; j < op->nopd; j++)
      if (!c->vals[op->opd[j]].set) return tpu__mo_fail(c, op, TPU_ERR_INVALID, "uses a value not defined yet");
    TPU_TRY(run_op(c, op));
    if (op->code == TPU_MO_RETURN || op->code == TPU_MO_YIELD || op->code == TPU_MO_CONDITION || op->code == TPU_MO_TYIELD)
      c->yield = op;
  }
  return TPU_OK;
}

/* ---- the grid ---- */

typedef struct {
  double *hbm;            /* the operand / result (row-major, owned) */
  int rank;
  int64_t dims[TPU_MO_MAX_RANK];
  tpu_dtype dt;
  double *vmem;           /* the window's block buffer */
  int64_t bdims[TPU_MO_MAX_RANK];
  int64_t cur[TPU_MO_MAX_RANK]; /* block indices of the block in vmem */
  int have;
  int is_out;
} win_state;

static int64_t wstart(const tpu_mo_window *w, int i, int64_t bi) { return tpu_mo_window_start(w, i, bi); }

static void move_block(win_state *s, const tpu_mo_window *w, int to_vmem) {
  int64_t n = tpu__mo_numel(w->rank, s->bdims), idx[TPU_MO_MAX_RANK];
  for (int64_t e = 0; e < n; e++) {
    int64_t r = e, o = 0;
    int in = 1;
    for (int i = w->rank - 1; i >= 0; i--) {
      idx[i] = r % s->bdims[i];
      r /= s->bdims[i];
    }
    for (int i = 0; i < w->rank; i++) {
      int64_t g = wstart(w, i, s->cur[i]) + idx[i];
      if (g < 0 || g >= s->dims[i]) in = 0;
      o = o * s->dims[i] + g;
    }
    if (to_vmem) s->vmem[e] = in ? s->hbm[o] : 0; /* a partial edge block: the rest unspecified (0) */
    else if (in) s->hbm[o] = s->vmem[e];
  }
}

/* Runs index map `f` on the grid point (and the prefetch refs) into out[rank]. */
static tpu_status index_map(mo_ctx *c, const tpu_mo_op *f, const int64_t *gi, const mo_val *pf, int npf, int64_t *out,
                            int rank) {
  const tpu_mo_block *b = &f->reg[0];
  int n = c->k->ngrid + npf;
  mo_val args[TPU_MO_MAX_RANK + 16];
  double g[TPU_MO_MAX_RANK];
  if (n > TPU_MO_MAX_RANK + 16 || b->nargs != n)
    return tpu__mo_fail(c, f, TPU_ERR_INVALID, "an index map of %d arguments for a grid of %d and %d prefetch operands",
                        b->nargs, c->k->ngrid, npf);
  for (int i = 0; i < c->k->ngrid; i++) {
    g[i] = (double)gi[i];
    args[i] = (mo_val){.set = 1, .kind = TPU_MO_SCALAR, .dt = TPU_S32, .v = &g[i]};
  }
  for (int i = 0; i < npf; i++) args[c->k->ngrid + i] = pf[i];
  mo_work keep = c->work;
  TPU_TRY(run_region(c, b, args, n));
  c->work = keep; /* the pipeline's address arithmetic: not the kernel's work */
  if (!c->yield || c->yield->nopd != rank)
    return tpu__mo_fail(c, f, TPU_ERR_INVALID, "an index map returns %d indices for a window of rank %d",
                        c->yield ? c->yield->nopd : 0, rank);
  for (int i = 0; i < rank; i++) out[i] = sval(c, c->yield->opd[i]);
  return TPU_OK;
}

/* A block must start inside its array (a partial edge block may run past the end): the
 * pipeline's DMA of a block wholly outside it fails the TPU's DMA bounds check (the core
 * halts), and Pallas's TPU interpret mode raises "Out-of-bounds block index". */
static tpu_status check_block(mo_ctx *c, const tpu_mo_window *wi, const win_state *s, int w, int nin, const int64_t *gi,
                              const int64_t *bi) {
  for (int i = 0; i < wi->rank; i++) {
    int64_t b0 = wstart(wi, i, bi[i]);
    if (bi[i] >= 0 && b0 < s->dims[i]) continue;
    char at[16 * TPU_MO_MAX_RANK], idx[16 * TPU_MO_MAX_RANK];
    size_t na = 0, ni = 0;
    at[0] = idx[0] = 0;
    for (int j = 0; j < c->k->ngrid && na < sizeof at - 24; j++)
      na += (size_t)snprintf(at + na, sizeof at - na, "%s%lld", j ? ", " : "", (long long)gi[j]);
    for (int j = 0; j < wi->rank && ni < sizeof idx - 24; j++)
      ni += (size_t)snprintf(idx + ni, sizeof idx - ni, "%s%lld", j ? ", " : "", (long long)bi[j]);
    return tpu__mo_fail(c, wi->map, TPU_ERR_INVALID,
                        "the index map of %s %d gives block (%s) at grid step (%s): its dimension %d starts at "
                        "element %lld of %lld, outside the array (a TPU's DMA bounds check halts the core)",
                        w < nin ? "input" : "output", w < nin ? w : w - nin, idx, at, i, (long long)b0,
                        (long long)s->dims[i]);
  }
  return TPU_OK;
}

/* Per grid step: called after each step with the work it did (for the timing). */
typedef void (*step_fn)(void *user, const mo_work *w);

static tpu_status run_grid(mo_ctx *c, const tpu_instr *in, const tpu_tensor *const *args, int nargs, tpu_tensor *out) {
  const tpu_mosaic *k = c->k;
  const tpu_mo_block *body = &k->main->reg[0];
  int nout = in->shape.dtype == TPU_TUPLE ? in->shape.ntuple : 1;
  int64_t grid[TPU_MO_MAX_RANK];
  const tpu_tensor *const *sargs = args ? args : c->scalars; /* count mode: the known scalars */
  int64_t steps = tpu_mosaic_grid(k, in, sargs, grid);
  /* the call's operands: dynamic grid bounds, scalar prefetch, then the windows' inputs */
  int pf0 = k->ndyn;
  if (args) args += pf0;
  if (sargs) sargs += pf0;
  nargs -= pf0;
  int nin = nargs - k->nprefetch;
  if (nin < 0 || nin + nout != k->nwindows)
    return tpu__mo_fail(c, NULL, TPU_ERR_INVALID, "the kernel has %d operands after %d prefetch ones; the call gives %d inputs and %d outputs",
                        k->nwindows, k->nprefetch, nin, nout);
  tpu_status st = TPU_OK;
  win_state *ws = tpu_calloc((size_t)k->nwindows + 1, sizeof *ws);
  mo_val *pf = tpu_calloc((size_t)k->nprefetch + 1, sizeof *pf);
  if (!ws || !pf) {
    tpu_free(ws);
    tpu_free(pf);
    return tpu__mo_fail(c, NULL, TPU_ERR_NOMEM, "out of memory");
  }
  /* The barrier semaphore first: every device allocates in the same order (pod.c). */
  c->barrier = own(c, 1);
  if (!c->barrier) st = tpu__mo_fail(c, NULL, TPU_ERR_NOMEM, "out of memory");
  /* Scalar prefetch operands: in SMEM, whole. */
  for (int i = 0; i < k->nprefetch && st == TPU_OK; i++) {
    const tpu_shape *sh = &in->operands[pf0 + i]->shape;
    int64_t n = tpu__mo_numel(sh->rank, sh->dims), str[TPU_MO_MAX_RANK];
    double *p = own(c, n);
    if (!p) {
      st = tpu__mo_fail(c, NULL, TPU_ERR_NOMEM, "out of memory");
      break;
    }
    for (int64_t e = 0; sargs && e < n; e++) p[e] = tpu_tensor_get_f64(sargs[i], e); /* count mode: zeros unless known */
    row_major(sh->rank, sh->dims, str);
    set_view(&pf[i], p, 0, sh->rank, sh->dims, str, sh->dtype, TPU_MO_SMEM, 0);
    pf[i].v = NULL;
  }
  /* Operands and results in HBM; window buffers in VMEM. */
  for (int w = 0; w < k->nwindows && st == TPU_OK; w++) {
    win_state *s = &ws[w];
    const tpu_shape *sh = w < nin ? &in->operands[pf0 + k->nprefetch + w]->shape
                                  : (in->shape.dtype == TPU_TUPLE ? &in->shape.elems[w - nin] : &in->shape);
    s->is_out = w >= nin;
    s->rank = sh->rank;
    s->dt = sh->dtype;
    memcpy(s->dims, sh->dims, sizeof(int64_t) * (size_t)sh->rank);
    int64_t n = tpu__mo_numel(s->rank, s->dims);
    s->hbm = c->count ? NULL : own(c, n);
    if (!s->hbm && !c->count) {
      st = tpu__mo_fail(c, NULL, TPU_ERR_NOMEM, "out of memory");
      break;
    }
    if (!s->is_out && !c->count)
      for (int64_t e = 0; e < n; e++) s->hbm[e] = tpu_tensor_get_f64(args[k->nprefetch + w], e);
    const tpu_mo_window *wi = &k->win[w];
    if (wi->has_map) {
      if (wi->rank != s->rank) {
        st = tpu__mo_fail(c, NULL, TPU_ERR_INVALID, "window %d has rank %d for an operand of rank %d", w, wi->rank, s->rank);
        break;
      }
      memcpy(s->bdims, wi->bounds, sizeof s->bdims);
      s->vmem = own(c, tpu__mo_numel(wi->rank, s->bdims));
      if (!s->vmem) st = tpu__mo_fail(c, NULL, TPU_ERR_NOMEM, "out of memory");
    }
  }
  /* Outputs aliased to inputs (input_output_aliases) start as those inputs. */
  for (int i = 0; i < in->nattrs && st == TPU_OK; i++) {
    if (strcmp(in->attrs[i].name, "output_to_operand_aliasing")) continue;
    const char *p = in->attrs[i].value;
    while ((p = strchr(p, '{')) != NULL) {
      long long o = 0, a = -1;
      if (sscanf(p, "{%lld}: (%lld", &o, &a) == 2 || (sscanf(p, "{}: (%lld", &a) == 1 && ((o = 0), 1))) {
        int wo = nin + (int)o, wa = (int)a - pf0 - k->nprefetch;
        if (wo < k->nwindows && wa >= 0 && wa < nin && ws[wo].hbm && ws[wa].hbm)
          memcpy(ws[wo].hbm, ws[wa].hbm, sizeof(double) * (size_t)tpu__mo_numel(ws[wo].rank, ws[wo].dims));
      }
      p++;
    }
  }
  /* Scratch operands: allocated once for the whole grid. */
  int base = k->ngrid + k->nprefetch + k->nwindows;
  for (int i = 0; i < k->nscratch && st == TPU_OK; i++) st = alloc_ref(c, body->args[base + i], &body->argt[base + i]);
  int64_t gi[TPU_MO_MAX_RANK] = {0}, bi[TPU_MO_MAX_RANK];
  mo_val *args_v = tpu_calloc((size_t)body->nargs + 1, sizeof *args_v);
  double gvals[TPU_MO_MAX_RANK];
  if (!args_v && st == TPU_OK) st = tpu__mo_fail(c, NULL, TPU_ERR_NOMEM, "out of memory");
  if (k->nwindows > 64 && st == TPU_OK) st = tpu__mo_fail(c, NULL, TPU_ERR_UNSUPPORTED, "a kernel of more than 64 operands");
  if (st == TPU_OK && !c->count) st = tpu__mo_pod_join(c);
  memset(&c->work, 0, sizeof c->work);
  mo_memo *memo = c->count && st == TPU_OK && !c->o->no_memo ? tpu__mo_memo_new(k) : NULL;
  int64_t bodies = 0, maps = 0;
  for (int64_t step = 0; step < steps && st == TPU_OK; step++) {
    int64_t r = step;
    for (int i = k->ngrid - 1; i >= 0; i--) {
      gi[i] = r % grid[i];
      r /= grid[i];
    }
    for (int w = 0; w < k->nwindows && st == TPU_OK; w++) {
      win_state *s = &ws[w];
      const tpu_mo_window *wi = &k->win[w];
      if (!wi->has_map) continue;
      if (!memo || !tpu__mo_memo_map_get(memo, w, wi->rank, gi, bi)) {
        st = index_map(c, wi->map, gi, pf, k->nprefetch, bi, wi->rank);
        if (st == TPU_OK && memo) tpu__mo_memo_map_put(memo, w, wi->rank, gi, bi);
        maps++;
      }
      if (st != TPU_OK) break;
      if (!c->count) st = check_block(c, wi, s, w, nin, gi, bi);
      if (st != TPU_OK) break;
      int same = s->have && !memcmp(bi, s->cur, sizeof(int64_t) * (size_t)wi->rank);
      if (same) continue;
      /* The pipeline writes an output block back when the next step moves to another one;
       * it fetches an input block when its index changes. */
      if (s->is_out && s->have) {
        if (s->hbm) move_block(s, wi, 0);
        c->work.flushed |= (uint64_t)1 << w;
      }
      if (!s->is_out) c->work.fetched |= (uint64_t)1 << w;
      memcpy(s->cur, bi, sizeof s->cur);
      s->have = 1;
      /* An output block starts as what HBM holds (an aliased input, or the block as an
       * earlier visit wrote it back): a block revisited after others accumulates on as in
       * Pallas's interpret mode (on a TPU its slot still holds it when the visits alternate
       * between two blocks, the double-buffered case). */
      if (s->hbm) move_block(s, wi, 1);
    }
    if (st != TPU_OK) break;
    /* The body's arguments: grid indices, prefetch refs, windows, scratch. */
    for (int i = 0; i < k->ngrid; i++) {
      gvals[i] = (double)gi[i];
      args_v[i] = (mo_val){.set = 1, .kind = TPU_MO_SCALAR, .dt = TPU_S32, .v = &gvals[i]};
    }
    for (int i = 0; i < k->nprefetch; i++) args_v[k->ngrid + i] = pf[i];
    for (int w = 0; w < k->nwindows; w++) {
      win_state *s = &ws[w];
      const tpu_mo_window *wi = &k->win[w];
      const tpu_mo_type *at = &body->argt[k->ngrid + k->nprefetch + w];
      mo_val *v = &args_v[k->ngrid + k->nprefetch + w];
      int64_t str[TPU_MO_MAX_RANK];
      if (wi->has_map) {
        int64_t full[TPU_MO_MAX_RANK], kd[TPU_MO_MAX_RANK], ks[TPU_MO_MAX_RANK];
        row_major(wi->rank, s->bdims, full);
        int kr = 0;
        for (int i = 0; i < wi->rank; i++)
          if (!wi->squeezed[i]) {
            kd[kr] = s->bdims[i];
            ks[kr++] = full[i];
          }
        set_view(v, s->vmem, 0, kr, kd, ks, s->dt, TPU_MO_VMEM, 0);
      } else {
        row_major(s->rank, s->dims, str);
        set_view(v, s->hbm, 0, s->rank, s->dims, str, s->dt, at->space, 0);
      }
      v->v = NULL;
    }
    for (int i = 0; i < k->nscratch; i++) args_v[base + i] = c->vals[body->args[base + i]];
    mo_work pipe = c->work, w; /* the pipeline's fetches and write-backs; the body adds none */
    if (memo && tpu__mo_memo_get(memo, gi, &w)) {
      c->work = w;
    } else {
      memset(&c->work, 0, sizeof c->work);
      bodies++;
      st = run_region(c, body, args_v, body->nargs);
      if (st != TPU_OK) break;
      if (memo) tpu__mo_memo_put(memo, gi, &c->work);
    }
    c->work.fetched = pipe.fetched;
    c->work.flushed = pipe.flushed;
    if (c->o && c->o->on_step) c->o->on_step(c->o->user, step, &c->work);
    memset(&c->work, 0, sizeof c->work);
  }
  if (st == TPU_OK && !c->count) st = tpu__mo_pod_finish(c); /* other devices' DMAs land until then */
  for (int w = 0; w < k->nwindows && st == TPU_OK; w++)
    if (ws[w].is_out && ws[w].have) {
      if (ws[w].hbm) move_block(&ws[w], &k->win[w], 0);
      c->work.flushed |= (uint64_t)1 << w;
    }
  /* The epilogue: the last output blocks written back (a step past the last). */
  if (st == TPU_OK && c->o && c->o->on_step) c->o->on_step(c->o->user, steps, &c->work);
  tpu__mo_memo_free(memo);
  if (c->o->bodies) *c->o->bodies = bodies;
  if (c->o->maps) *c->o->maps = maps;
  if (c->count) { /* no values */
    tpu_free(args_v);
    tpu_free(ws);
    tpu_free(pf);
    return st;
  }
  /* The call's result. */
  if (st == TPU_OK) {
    if (in->shape.dtype == TPU_TUPLE) st = tpu_tensor_alloc_tuple(out, nout, c->d);
    for (int o = 0; o < nout && st == TPU_OK; o++) {
      win_state *s = &ws[nin + o];
      tpu_tensor *t = in->shape.dtype == TPU_TUPLE ? &out->elems[o] : out;
      st = tpu_tensor_alloc(t, s->dt, s->rank, s->dims, c->d);
      if (st != TPU_OK) break;
      int64_t n = tpu__mo_numel(s->rank, s->dims);
      for (int64_t e = 0; e < n; e++) tpu_tensor_set_f64(t, e, s->hbm[e]);
    }
    if (st != TPU_OK) tpu_tensor_free(out);
  }
  tpu_free(args_v);
  tpu_free(ws);
  tpu_free(pf);
  return st;
}

static tpu_status run_any(const tpu_mosaic *k, const tpu_instr *in, const tpu_tensor *const *args, int nargs,
                          const tpu_tensor *const *scalars, const tpu_mosaic_opts *o, tpu_tensor *out, tpu_diag *d);

tpu_status tpu_mosaic_count(const tpu_mosaic *k, const tpu_instr *in, const tpu_mosaic_opts *o, tpu_diag *d) {
  tpu_tensor none;
  return run_any(k, in, NULL, in->noperands, NULL, o, &none, d);
}

tpu_status tpu_mosaic_count_scalars(const tpu_mosaic *k, const tpu_instr *in, const tpu_tensor *const *scalars,
                                    const tpu_mosaic_opts *o, tpu_diag *d) {
  tpu_tensor none;
  return run_any(k, in, NULL, in->noperands, scalars, o, &none, d);
}

tpu_status tpu_mosaic_run(const tpu_mosaic *k, const tpu_instr *in, const tpu_tensor *const *args, int nargs,
                          const tpu_mosaic_opts *o, tpu_tensor *out, tpu_diag *d) {
  return run_any(k, in, args, nargs, NULL, o, out, d);
}

static tpu_status run_any(const tpu_mosaic *k, const tpu_instr *in, const tpu_tensor *const *args, int nargs,
                          const tpu_tensor *const *scalars, const tpu_mosaic_opts *o, tpu_tensor *out, tpu_diag *d) {
  memset(out, 0, sizeof *out);
  static const tpu_mosaic_opts none = {0};
  mo_ctx c;
  memset(&c, 0, sizeof c);
  c.k = k;
  c.o = o ? o : &none;
  c.d = d;
  c.sublanes = 8;
  c.lanes = 128;
  c.count = args == NULL;
  c.scalars = scalars;
  c.collective = tpu_mosaic_is_collective(k);
  c.pod = c.count ? NULL : c.o->pod;
  c.vals = tpu_calloc((size_t)k->nvalues + 1, sizeof *c.vals);
  tpu_status st = c.vals ? run_grid(&c, in, args, nargs, out) : TPU_FAIL(d, TPU_ERR_NOMEM, k->loc, "out of memory");
  if (st != TPU_OK) tpu__mo_pod_fail(&c);
  for (int i = 0; c.vals && i < k->nvalues; i++) val_clear(&c.vals[i]);
  tpu_free(c.vals);
  tpu_free(c.scoped);
  for (int i = 0; i < c.nowned; i++) tpu__mo_release(c.owned[i], c.ownn[i]);
  tpu_free(c.owned);
  tpu_free(c.ownn);
  return st;
}
