/* Reference kernels for gather and scatter with XLA's full dimension numbers (offset,
 * collapsed/inserted, batching dims, any index_vector_dim). */
#include <string.h>

#include "ref/ref_int.h"


static tpu_status alloc_fail_at(const tpu_instr *in, tpu_status st, const tpu_diag *inner, tpu_diag *d) {
  return TPU_FAIL(d, st, in->loc, "%s", inner->msg);
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The "batch" walk shared by gather and scatter: the index array's dims other than
 * index_vector_dim, in order, pair with the non-window dims of the result (gather) or
 * of the updates (scatter), in order. */
typedef struct {
  int n;                       /* number of batch dims */
  int64_t size[TPU_MAX_RANK];  /* extent of each */
  int64_t istr[TPU_MAX_RANK];  /* stride in the index array (elements) */
  int64_t ostr[TPU_MAX_RANK];  /* stride in the result / updates (elements) */
  int64_t idim[TPU_MAX_RANK];  /* which index-array dim it is */
  int64_t pos[TPU_MAX_RANK];   /* current coordinate */
  int64_t ioff, ooff;          /* current element offsets */
  int64_t vstr;                /* stride of the index vector's components (0 if implicit) */
} batch_walk;

static void walk_init(batch_walk *w, const tpu_tensor *idx, int64_t ivd, const tpu_tensor *res, const int *is_window) {
  int64_t is[TPU_MAX_RANK], rs[TPU_MAX_RANK];
  tpu__ref_strides(idx->rank, idx->dims, is);
  tpu__ref_strides(res->rank, res->dims, rs);
  memset(w, 0, sizeof *w);
  w->vstr = ivd < idx->rank ? is[ivd] : 0;
  int r = 0;
  for (int k = 0; k < idx->rank; k++) {
    if (k == ivd) continue;
    while (r < res->rank && is_window[r]) r++;
    if (r >= res->rank) break; /* unreachable for verified shapes */
    w->size[w->n] = idx->dims[k];
    w->istr[w->n] = is[k];
    w->ostr[w->n] = rs[r];
    w->idim[w->n] = k;
    w->n++;
    r++;
  }
}

/* Advances to the next batch position in row-major order; returns 0 when done. */
static int walk_next(batch_walk *w) {
  for (int k = w->n - 1; k >= 0; k--) {
    w->pos[k]++;
    w->ioff += w->istr[k];
    w->ooff += w->ostr[k];
    if (w->pos[k] < w->size[k]) return 1;
    w->ioff -= w->istr[k] * w->size[k];
    w->ooff -= w->ostr[k] * w->size[k];
    w->pos[k] = 0;
  }
  return 0;
}

/* The batch coordinate of index-array dim `idim` at the current position. */
static int64_t walk_coord(const batch_walk *w, int64_t idim) {
  for (int k = 0; k < w->n; k++)
    if (w->idim[k] == idim) return w->pos[k];
  return 0;
}

/* Fills start[] (one per operand dim) for the current batch position: index-vector
 * components go to the dims `map` names, batching dims take the batch coordinate of
 * their paired index dim, everything else starts at 0. */
static void read_start(const batch_walk *w, const tpu_tensor *idx, const tpu_i64s *map, const tpu_i64s *op_batch,
                       const tpu_i64s *idx_batch, int rank, int64_t *start) {
  int64_t vstr = w->vstr;
  for (int k = 0; k < rank; k++) start[k] = 0;
  for (int k = 0; k < map->n; k++) start[map->v[k]] = tpu__ref_read_index(idx, w->ioff + k * vstr);
  for (int k = 0; k < op_batch->n && k < idx_batch->n; k++) start[op_batch->v[k]] = walk_coord(w, idx_batch->v[k]);
}

static tpu_status gather(const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out, tpu_diag *d) {
  const tpu_tensor *x = args[0], *idx = args[1];
  const tpu_gather_dims *g = in->gather;
  tpu_diag inner;
  tpu_status st = tpu_tensor_alloc(out, in->shape.dtype, in->shape.rank, in->shape.dims, &inner);
  if (st != TPU_OK) return alloc_fail_at(in, st, &inner, d);
  if (tpu_tensor_numel(out) == 0) return TPU_OK;
  size_t es = tpu_dtype_size(out->dtype);
  int64_t xs[TPU_MAX_RANK], os[TPU_MAX_RANK];
  tpu__ref_strides(x->rank, x->dims, xs);
  tpu__ref_strides(out->rank, out->dims, os);

  /* The k-th offset dim of the result walks the k-th operand dim that is neither
   * collapsed nor a batching dim. */
  int is_off[TPU_MAX_RANK] = {0};
  for (int k = 0; k < g->offset_dims.n; k++) is_off[g->offset_dims.v[k]] = 1;
  int64_t bdims[TPU_MAX_RANK], bdstr[TPU_MAX_RANK], bsstr[TPU_MAX_RANK];
  int nw = 0;
  for (int dd = 0; dd < x->rank && nw < g->offset_dims.n; dd++) {
    if (tpu_i64s_find(&g->collapsed_slice_dims, dd) >= 0 || tpu_i64s_find(&g->operand_batching_dims, dd) >= 0) continue;
    bdims[nw] = g->slice_sizes.v[dd];
    bdstr[nw] = os[g->offset_dims.v[nw]];
    bsstr[nw] = xs[dd];
    nw++;
  }

  batch_walk w;
  walk_init(&w, idx, g->index_vector_dim, out, is_off);
  int64_t start[TPU_MAX_RANK];
  do {
    read_start(&w, idx, &g->start_index_map, &g->operand_batching_dims,
               &g->start_indices_batching_dims, x->rank, start);
    int64_t soff = 0;
    for (int k = 0; k < x->rank; k++) {
      /* Clamped so the whole slice lies inside the operand. */
      start[k] = clamp64(start[k], 0, x->dims[k] - g->slice_sizes.v[k]);
      soff += start[k] * xs[k];
    }
    tpu__ref_copy_box((char *)out->data + w.ooff * (int64_t)es, (const char *)x->data + soff * (int64_t)es, es, nw,
                      bdims, bdstr, bsstr);
  } while (walk_next(&w));
  return TPU_OK;
}

/* How a scatter combines old and new values. */
typedef enum { COMB_SET, COMB_KEEP, COMB_BINARY, COMB_CALL } comb_kind;

static comb_kind classify(const tpu_comp *c, int n, tpu_opcode *op) {
  const tpu_instr *r = c->root;
  if (n == 1 && r->op == TPU_OP_PARAMETER) return r->index == 1 ? COMB_SET : COMB_KEEP;
  if (n > 1 && r->op == TPU_OP_TUPLE && r->noperands == n) {
    int set = 1, keep = 1;
    for (int i = 0; i < n; i++) {
      const tpu_instr *o = r->operands[i];
      set &= o->op == TPU_OP_PARAMETER && o->index == n + i;
      keep &= o->op == TPU_OP_PARAMETER && o->index == i;
    }
    if (set) return COMB_SET;
    if (keep) return COMB_KEEP;
  }
  if (n == 1) {
    *op = tpu__ref_simple_reducer(c);
    if (*op != TPU_OP_COUNT) return COMB_BINARY;
  }
  return COMB_CALL;
}

/* Scatter state for the generic path: scalar argument buffers reused for every call. */
typedef struct {
  tpu_interp *ip;
  const tpu_comp *comp;
  int n;
  tpu_tensor scal[2 * 16];
  const tpu_tensor *argv[2 * 16];
} call_ctx;

static tpu_status scatter(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                          tpu_diag *d) {
  const tpu_scatter_dims *s = in->scatter;
  int n = (in->noperands - 1) / 2;
  if (n < 1 || n > 16)
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "scatter of %d operands is not supported (at most 16)", n);
  const tpu_tensor *idx = args[n];
  const tpu_tensor *const *upd = args + n + 1;
  const tpu_tensor *u0 = upd[0];
  tpu_tensor *res[16] = {0};
  tpu_status st;
  tpu_diag inner;

  /* The result starts as a copy of the operands. */
  if (n == 1) {
    st = tpu_tensor_clone(out, args[0], &inner);
    if (st != TPU_OK) return alloc_fail_at(in, st, &inner, d);
    res[0] = out;
  } else {
    st = tpu_tensor_alloc_tuple(out, n, &inner);
    for (int i = 0; st == TPU_OK && i < n; i++) st = tpu_tensor_clone(&out->elems[i], args[i], &inner);
    if (st != TPU_OK) {
      tpu_tensor_free(out);
      return alloc_fail_at(in, st, &inner, d);
    }
    for (int i = 0; i < n; i++) res[i] = &out->elems[i];
  }
  const tpu_tensor *x = res[0];
  if (tpu_tensor_numel(u0) == 0 || tpu_tensor_numel(x) == 0) return TPU_OK;

  tpu_opcode bop = TPU_OP_COUNT;
  comb_kind kind = classify(in->to_apply, n, &bop);
  if (kind == COMB_KEEP) return TPU_OK;

  int64_t xs[TPU_MAX_RANK], us[TPU_MAX_RANK];
  tpu__ref_strides(x->rank, x->dims, xs);
  tpu__ref_strides(u0->rank, u0->dims, us);

  /* Update window dim k walks the k-th operand dim that is neither inserted nor a
   * batching dim; wsize is the window extent per operand dim (1 where none). */
  int is_win[TPU_MAX_RANK] = {0};
  for (int k = 0; k < s->update_window_dims.n; k++) is_win[s->update_window_dims.v[k]] = 1;
  int64_t wsize[TPU_MAX_RANK], bdims[TPU_MAX_RANK], bxstr[TPU_MAX_RANK], bustr[TPU_MAX_RANK];
  for (int k = 0; k < x->rank; k++) wsize[k] = 1;
  int nw = 0;
  for (int dd = 0; dd < x->rank && nw < s->update_window_dims.n; dd++) {
    if (tpu_i64s_find(&s->inserted_window_dims, dd) >= 0 || tpu_i64s_find(&s->input_batching_dims, dd) >= 0) continue;
    int64_t ud = s->update_window_dims.v[nw];
    wsize[dd] = u0->dims[ud];
    bdims[nw] = u0->dims[ud];
    bxstr[nw] = xs[dd];
    bustr[nw] = us[ud];
    nw++;
  }

  call_ctx cc;
  memset(&cc, 0, sizeof cc);
  if (kind == COMB_CALL) {
    cc.ip = ip;
    cc.comp = in->to_apply;
    cc.n = n;
    for (int i = 0; st == TPU_OK && i < 2 * n; i++) {
      tpu_dtype t = i < n ? res[i]->dtype : upd[i - n]->dtype;
      st = tpu_tensor_alloc(&cc.scal[i], t, 0, NULL, &inner);
      cc.argv[i] = &cc.scal[i];
    }
    if (st != TPU_OK) {
      for (int i = 0; i < 2 * n; i++) tpu_tensor_free(&cc.scal[i]);
      tpu_tensor_free(out);
      return alloc_fail_at(in, st, &inner, d);
    }
  }

  size_t es[16], ues[16];
  for (int i = 0; i < n; i++) es[i] = tpu_dtype_size(res[i]->dtype), ues[i] = tpu_dtype_size(upd[i]->dtype);

  batch_walk w;
  walk_init(&w, idx, s->index_vector_dim, u0, is_win);
  int64_t start[TPU_MAX_RANK];
  do {
    read_start(&w, idx, &s->scatter_dims_to_operand_dims, &s->input_batching_dims,
               &s->scatter_indices_batching_dims, x->rank, start);
    /* XLA skips the whole update window when any part of it would fall outside. */
    int inside = 1;
    int64_t xoff = 0;
    for (int k = 0; k < x->rank; k++) {
      if (start[k] < 0 || start[k] > x->dims[k] - wsize[k]) inside = 0;
      xoff += start[k] * xs[k];
    }
    if (!inside) continue;
    if (kind == COMB_SET) {
      for (int i = 0; i < n; i++)
        tpu__ref_copy_box((char *)res[i]->data + xoff * (int64_t)es[i], (const char *)upd[i]->data + w.ooff * (int64_t)es[i],
                          es[i], nw, bdims, bxstr, bustr);
      continue;
    }
    /* Element by element over the window, in row-major window order. */
    int64_t pos[TPU_MAX_RANK] = {0};
    int64_t xo = xoff, uo = w.ooff;
    for (;;) {
      if (kind == COMB_BINARY) {
        tpu__ref_apply_binary(bop, x->dtype, (char *)res[0]->data + xo * (int64_t)es[0],
                              (const char *)upd[0]->data + uo * (int64_t)ues[0]);
      } else {
        for (int i = 0; i < n; i++) {
          memcpy(cc.scal[i].data, (const char *)res[i]->data + xo * (int64_t)es[i], es[i]);
          memcpy(cc.scal[n + i].data, (const char *)upd[i]->data + uo * (int64_t)ues[i], ues[i]);
        }
        tpu_tensor r;
        st = tpu__ref_call(cc.ip, cc.comp, cc.argv, 2 * n, &r, d);
        if (st != TPU_OK) goto fail;
        for (int i = 0; i < n; i++) {
          const tpu_tensor *v = n == 1 ? &r : &r.elems[i];
          memcpy((char *)res[i]->data + xo * (int64_t)es[i], v->data, es[i]);
        }
        tpu_tensor_free(&r);
      }
      int k = nw - 1;
      for (; k >= 0; k--) {
        pos[k]++;
        xo += bxstr[k];
        uo += bustr[k];
        if (pos[k] < bdims[k]) break;
        xo -= bxstr[k] * bdims[k];
        uo -= bustr[k] * bdims[k];
        pos[k] = 0;
      }
      if (k < 0) break;
    }
  } while (walk_next(&w));
  for (int i = 0; i < 2 * n; i++) tpu_tensor_free(&cc.scal[i]);
  return TPU_OK;
fail:
  for (int i = 0; i < 2 * n; i++) tpu_tensor_free(&cc.scal[i]);
  tpu_tensor_free(out);
  return st;
}

tpu_status tpu__ref_gather_scatter(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                                   tpu_diag *d) {
  tpu_tensor_zero(out);
  if (in->op == TPU_OP_GATHER) return gather(in, args, out, d);
  if (in->op == TPU_OP_SCATTER) return scatter(ip, in, args, out, d);
  return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "op '%s' is not gather or scatter", tpu_op_name(in->op));
}
