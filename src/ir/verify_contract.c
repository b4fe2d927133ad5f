/* Verifier rules for contractions and indexed access: dot, convolution, gather, scatter
 * (dimension numbers as XLA's operation semantics define them, batching dims included). */
#include <string.h>

#include "ir/verify.h"

static int numeric(tpu_dtype t) { return tpu_dtype_is_float(t) || tpu_dtype_is_int(t); }

/* Values of `l` are dimensions in [0, bound) without repeats (and increasing when
 * `sorted`); marks them in seen[] (which may hold marks from an earlier list that must
 * stay disjoint from this one). */
static tpu_status check_dims(const tpu_instr *in, const tpu_i64s *l, int bound, int sorted, unsigned char *seen,
                             const char *what, tpu_diag *d) {
  for (int i = 0; i < l->n; i++) {
    int64_t v = l->v[i];
    if (v < 0 || v >= bound) return TPU_VFAIL(d, in, "%s %lld is out of range [0, %d)", what, (long long)v, bound);
    if (sorted && i && v <= l->v[i - 1]) return TPU_VFAIL(d, in, "%s must be sorted and distinct", what);
    if (seen[v]) return TPU_VFAIL(d, in, "%s %lld is repeated or used twice", what, (long long)v);
    seen[v] = 1;
  }
  return TPU_OK;
}

/* ---- dot ---- */

static tpu_status verify_dot(const tpu_instr *in, tpu_diag *d) {
  TPU_TRY(tpu__vneed_array(in, 0, d));
  TPU_TRY(tpu__vneed_array(in, 1, d));
  const tpu_shape *l = &in->operands[0]->shape, *r = &in->operands[1]->shape;
  const tpu_dot_dims *dd = &in->dot;
  int nc = tpu_dtype_is_complex(l->dtype) + tpu_dtype_is_complex(r->dtype) + tpu_dtype_is_complex(in->shape.dtype);
  if (nc && (nc != 3 || l->dtype != r->dtype || r->dtype != in->shape.dtype))
    return TPU_VFAIL(d, in, "a complex dot needs operands and result of one complex type (%s, %s -> %s)",
                     tpu_dtype_name(l->dtype), tpu_dtype_name(r->dtype), tpu_dtype_name(in->shape.dtype));
  if (!nc && (!numeric(l->dtype) || !numeric(r->dtype) || !numeric(in->shape.dtype)))
    return TPU_VFAIL(d, in, "operands and result must have numeric element types");
  if (dd->lhs_batch.n != dd->rhs_batch.n)
    return TPU_VFAIL(d, in, "lhs has %d batch dimensions but rhs has %d", dd->lhs_batch.n, dd->rhs_batch.n);
  if (dd->lhs_contract.n != dd->rhs_contract.n)
    return TPU_VFAIL(d, in, "lhs has %d contracting dimensions but rhs has %d", dd->lhs_contract.n, dd->rhs_contract.n);
  unsigned char lseen[TPU_MAX_RANK] = {0}, rseen[TPU_MAX_RANK] = {0};
  TPU_TRY(check_dims(in, &dd->lhs_batch, l->rank, 0, lseen, "lhs batch dimension", d));
  TPU_TRY(check_dims(in, &dd->lhs_contract, l->rank, 0, lseen, "lhs contracting dimension", d));
  TPU_TRY(check_dims(in, &dd->rhs_batch, r->rank, 0, rseen, "rhs batch dimension", d));
  TPU_TRY(check_dims(in, &dd->rhs_contract, r->rank, 0, rseen, "rhs contracting dimension", d));
  for (int i = 0; i < dd->lhs_batch.n; i++) {
    int64_t a = l->dims[dd->lhs_batch.v[i]], b = r->dims[dd->rhs_batch.v[i]];
    if (a != b)
      return TPU_VFAIL(d, in, "batch dimension sizes differ: lhs dimension %lld is %lld, rhs dimension %lld is %lld",
                       (long long)dd->lhs_batch.v[i], (long long)a, (long long)dd->rhs_batch.v[i], (long long)b);
  }
  for (int i = 0; i < dd->lhs_contract.n; i++) {
    int64_t a = l->dims[dd->lhs_contract.v[i]], b = r->dims[dd->rhs_contract.v[i]];
    if (a != b)
      return TPU_VFAIL(d, in, "contracting dimension sizes differ: lhs dimension %lld is %lld, rhs dimension %lld is %lld",
                       (long long)dd->lhs_contract.v[i], (long long)a, (long long)dd->rhs_contract.v[i], (long long)b);
  }
  int rank = l->rank + r->rank - dd->lhs_batch.n - dd->lhs_contract.n - dd->rhs_contract.n;
  if (rank > TPU_MAX_RANK) return TPU_VFAIL(d, in, "the result would have rank %d, above the limit %d", rank, TPU_MAX_RANK);
  tpu_shape want = tpu__varray(in->shape.dtype, 0, NULL);
  for (int i = 0; i < dd->lhs_batch.n; i++) want.dims[want.rank++] = l->dims[dd->lhs_batch.v[i]];
  for (int i = 0; i < l->rank; i++)
    if (!lseen[i]) want.dims[want.rank++] = l->dims[i];
  for (int i = 0; i < r->rank; i++)
    if (!rseen[i]) want.dims[want.rank++] = r->dims[i];
  return tpu__vexpect(in, &want, d);
}

/* ---- convolution ---- */

static tpu_status verify_convolution(const tpu_instr *in, tpu_diag *d) {
  TPU_TRY(tpu__vneed_array(in, 0, d));
  TPU_TRY(tpu__vneed_array(in, 1, d));
  const tpu_shape *l = &in->operands[0]->shape, *k = &in->operands[1]->shape;
  const tpu_conv_dims *c = in->conv;
  if (!numeric(l->dtype) || !numeric(k->dtype) || !numeric(in->shape.dtype))
    return TPU_VFAIL(d, in, "operands and result must have numeric element types");
  if (!in->has_conv_dims) return TPU_VFAIL(d, in, "needs a 'dim_labels' attribute");
  int ns = c->nspatial;
  if (l->rank != ns + 2)
    return TPU_VFAIL(d, in, "dim_labels describe a rank-%d input but the lhs has rank %d", ns + 2, l->rank);
  if (k->rank != ns + 2)
    return TPU_VFAIL(d, in, "dim_labels describe a rank-%d kernel but the rhs has rank %d", ns + 2, k->rank);
  if (in->nwindow != ns)
    return TPU_VFAIL(d, in, "window has %d dimensions but dim_labels have %d spatial dimensions", in->nwindow, ns);
  int64_t fgc = in->feature_group_count, bgc = in->batch_group_count;
  if (fgc < 1 || bgc < 1) return TPU_VFAIL(d, in, "feature_group_count and batch_group_count must be >= 1");
  if (fgc > 1 && bgc > 1) return TPU_VFAIL(d, in, "feature_group_count and batch_group_count cannot both exceed 1");
  int64_t batch = l->dims[c->in_batch], in_f = l->dims[c->in_feature];
  int64_t k_in = k->dims[c->k_in], k_out = k->dims[c->k_out];
  if (in_f % fgc != 0 || in_f / fgc != k_in)
    return TPU_VFAIL(d, in,
                     "input features (%lld) divided by feature_group_count (%lld) must equal the kernel's input "
                     "features (%lld)",
                     (long long)in_f, (long long)fgc, (long long)k_in);
  if (k_out % fgc != 0)
    return TPU_VFAIL(d, in, "kernel output features (%lld) must be divisible by feature_group_count (%lld)",
                     (long long)k_out, (long long)fgc);
  if (batch % bgc != 0)
    return TPU_VFAIL(d, in, "input batch (%lld) must be divisible by batch_group_count (%lld)", (long long)batch,
                     (long long)bgc);
  if (k_out % bgc != 0)
    return TPU_VFAIL(d, in, "kernel output features (%lld) must be divisible by batch_group_count (%lld)",
                     (long long)k_out, (long long)bgc);
  tpu_shape want = tpu__varray(in->shape.dtype, ns + 2, NULL);
  want.dims[c->out_batch] = batch / bgc;
  want.dims[c->out_feature] = k_out;
  for (int i = 0; i < ns; i++) {
    const tpu_window_dim *w = &in->window[i];
    if (w->size != k->dims[c->k_spatial[i]])
      return TPU_VFAIL(d, in, "window dimension %d has size %lld but the kernel's spatial dimension is %lld", i,
                       (long long)w->size, (long long)k->dims[c->k_spatial[i]]);
    if (!tpu__vwindow_out(l->dims[c->in_spatial[i]], w, &want.dims[c->out_spatial[i]]))
      return TPU_VFAIL(d, in, "window dimension %d overflows or pads the input to a negative size", i);
  }
  return tpu__vexpect(in, &want, d);
}

/* ---- gather ---- */

static tpu_status check_indices(const tpu_instr *in, int k, int64_t ivd, tpu_diag *d) {
  tpu__vbuf a;
  const tpu_shape *s = &in->operands[k]->shape;
  if (!tpu_dtype_is_array(s->dtype) || !tpu_dtype_is_int(s->dtype))
    return TPU_VFAIL(d, in, "the indices are %s; they must be an integer array", tpu__vshape(s, &a));
  if (ivd < 0 || ivd > s->rank)
    return TPU_VFAIL(d, in, "index_vector_dim %lld is out of range [0, %d]", (long long)ivd, s->rank);
  return TPU_OK;
}

/* Batching dims of the operand and of the indices pair up with equal sizes; the indices'
 * ones avoid index_vector_dim. */
static tpu_status check_batching(const tpu_instr *in, const tpu_shape *op, const tpu_i64s *obd, const tpu_shape *ix,
                                 const tpu_i64s *ibd, int64_t ivd, const char *oname, const char *iname, tpu_diag *d) {
  unsigned char seen[TPU_MAX_RANK] = {0};
  TPU_TRY(check_dims(in, ibd, ix->rank, 0, seen, iname, d));
  if (ibd->n != obd->n) return TPU_VFAIL(d, in, "%s has %d entries but %s has %d", iname, ibd->n, oname, obd->n);
  for (int i = 0; i < ibd->n; i++) {
    if (ibd->v[i] == ivd) return TPU_VFAIL(d, in, "%s may not include index_vector_dim %lld", iname, (long long)ivd);
    if (op->dims[obd->v[i]] != ix->dims[ibd->v[i]])
      return TPU_VFAIL(d, in, "batching dimension sizes differ: operand dimension %lld is %lld, indices dimension %lld is %lld",
                       (long long)obd->v[i], (long long)op->dims[obd->v[i]], (long long)ibd->v[i],
                       (long long)ix->dims[ibd->v[i]]);
  }
  return TPU_OK;
}

/* The index map: one operand dimension per index vector entry, distinct, not batching. */
static tpu_status check_index_map(const tpu_instr *in, const tpu_i64s *map, int64_t nvec, int orank,
                                  const unsigned char *batching, const char *what, tpu_diag *d) {
  unsigned char seen[TPU_MAX_RANK] = {0};
  if (map->n != nvec)
    return TPU_VFAIL(d, in, "%s has %d entries but the index vector has %lld", what, map->n, (long long)nvec);
  TPU_TRY(check_dims(in, map, orank, 0, seen, what, d));
  for (int i = 0; i < map->n; i++)
    if (batching[map->v[i]]) return TPU_VFAIL(d, in, "%s %lld is a batching dimension", what, (long long)map->v[i]);
  return TPU_OK;
}

static tpu_status verify_gather(const tpu_instr *in, tpu_diag *d) {
  TPU_TRY(tpu__vneed_array(in, 0, d));
  const tpu_gather_dims *g = in->gather;
  const tpu_shape *op = &in->operands[0]->shape, *ix = &in->operands[1]->shape;
  int64_t ivd = g->index_vector_dim;
  TPU_TRY(check_indices(in, 1, ivd, d));
  int64_t nvec = ivd == ix->rank ? 1 : ix->dims[ivd];
  int nbatch = ix->rank - (ivd < ix->rank);
  int orank = op->rank;
  unsigned char collapsed[TPU_MAX_RANK] = {0}, batching[TPU_MAX_RANK] = {0}, offs[TPU_MAX_RANK * 2] = {0};
  TPU_TRY(check_dims(in, &g->collapsed_slice_dims, orank, 1, collapsed, "collapsed_slice_dims entry", d));
  TPU_TRY(check_dims(in, &g->operand_batching_dims, orank, 1, batching, "operand_batching_dims entry", d));
  for (int i = 0; i < orank; i++)
    if (collapsed[i] && batching[i])
      return TPU_VFAIL(d, in, "dimension %d is both collapsed and batching", i);
  TPU_TRY(check_batching(in, op, &g->operand_batching_dims, ix, &g->start_indices_batching_dims, ivd,
                         "operand_batching_dims", "start_indices_batching_dims", d));
  TPU_TRY(check_index_map(in, &g->start_index_map, nvec, orank, batching, "start_index_map entry", d));
  if (g->slice_sizes.n != orank)
    return TPU_VFAIL(d, in, "slice_sizes has %d entries but the operand has rank %d", g->slice_sizes.n, orank);
  for (int i = 0; i < orank; i++) {
    int64_t z = g->slice_sizes.v[i];
    if (z < 0 || z > op->dims[i])
      return TPU_VFAIL(d, in, "slice size %lld of dimension %d does not fit in %lld", (long long)z, i, (long long)op->dims[i]);
    if ((collapsed[i] || batching[i]) && z > 1)
      return TPU_VFAIL(d, in, "collapsed or batching dimension %d has slice size %lld; it must be 0 or 1", i, (long long)z);
  }
  int nwin = orank - g->collapsed_slice_dims.n - g->operand_batching_dims.n;
  if (g->offset_dims.n != nwin)
    return TPU_VFAIL(d, in, "offset_dims has %d entries but %d slice dimensions remain", g->offset_dims.n, nwin);
  int rank = nwin + nbatch;
  if (rank > TPU_MAX_RANK) return TPU_VFAIL(d, in, "the result would have rank %d, above the limit %d", rank, TPU_MAX_RANK);
  TPU_TRY(check_dims(in, &g->offset_dims, rank, 1, offs, "offset_dims entry", d));
  tpu_shape want = tpu__varray(op->dtype, rank, NULL);
  int wi = 0, bi = 0;
  for (int i = 0; i < rank; i++) {
    if (offs[i]) {
      while (collapsed[wi] || batching[wi]) wi++;
      want.dims[i] = g->slice_sizes.v[wi++];
    } else {
      if (bi == ivd) bi++;
      want.dims[i] = ix->dims[bi++];
    }
  }
  return tpu__vexpect(in, &want, d);
}

/* ---- scatter ---- */

static tpu_dtype scatter_type(const tpu_instr *in, int i) {
  int n = (in->noperands - 1) / 2;
  return in->operands[i % n]->shape.dtype;
}

static tpu_status verify_scatter(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  if (in->noperands < 3 || in->noperands % 2 == 0)
    return TPU_VFAIL(d, in, "takes N operands, the indices and N updates; got %d operands", in->noperands);
  int n = (in->noperands - 1) / 2;
  const tpu_scatter_dims *s = in->scatter;
  const tpu_shape *op = &in->operands[0]->shape, *ix = &in->operands[n]->shape, *up = &in->operands[n + 1]->shape;
  for (int k = 0; k < n; k++) {
    TPU_TRY(tpu__vneed_array(in, k, d));
    TPU_TRY(tpu__vneed_array(in, n + 1 + k, d));
    const tpu_shape *ok = &in->operands[k]->shape, *uk = &in->operands[n + 1 + k]->shape;
    if (!tpu__vsame_dims(ok, op))
      return TPU_VFAIL(d, in, "operand %d is %s but operand 0 is %s; they must have the same dims", k, tpu__vshape(ok, &a),
                       tpu__vshape(op, &b));
    if (!tpu__vsame_dims(uk, up) || uk->dtype != ok->dtype)
      return TPU_VFAIL(d, in, "update %d is %s; updates must share dims and match their operand's element type %s", k,
                       tpu__vshape(uk, &a), tpu_dtype_name(ok->dtype));
  }
  int64_t ivd = s->index_vector_dim;
  TPU_TRY(check_indices(in, n, ivd, d));
  int64_t nvec = ivd == ix->rank ? 1 : ix->dims[ivd];
  int nbatch = ix->rank - (ivd < ix->rank);
  int orank = op->rank;
  unsigned char inserted[TPU_MAX_RANK] = {0}, batching[TPU_MAX_RANK] = {0}, win[TPU_MAX_RANK] = {0};
  TPU_TRY(check_dims(in, &s->update_window_dims, up->rank, 1, win, "update_window_dims entry", d));
  TPU_TRY(check_dims(in, &s->inserted_window_dims, orank, 1, inserted, "inserted_window_dims entry", d));
  TPU_TRY(check_dims(in, &s->input_batching_dims, orank, 1, batching, "input_batching_dims entry", d));
  for (int i = 0; i < orank; i++)
    if (inserted[i] && batching[i]) return TPU_VFAIL(d, in, "dimension %d is both inserted and batching", i);
  TPU_TRY(check_batching(in, op, &s->input_batching_dims, ix, &s->scatter_indices_batching_dims, ivd,
                         "input_batching_dims", "scatter_indices_batching_dims", d));
  TPU_TRY(check_index_map(in, &s->scatter_dims_to_operand_dims, nvec, orank, batching,
                          "scatter_dims_to_operand_dims entry", d));
  if (s->update_window_dims.n + s->inserted_window_dims.n + s->input_batching_dims.n != orank)
    return TPU_VFAIL(d, in, "update_window_dims, inserted_window_dims and input_batching_dims have %d entries in all, "
                     "expected the operand rank %d",
                     s->update_window_dims.n + s->inserted_window_dims.n + s->input_batching_dims.n, orank);
  if (up->rank != s->update_window_dims.n + nbatch)
    return TPU_VFAIL(d, in, "the updates have rank %d, expected %d window dimensions plus %d scatter dimensions", up->rank,
                     s->update_window_dims.n, nbatch);
  int wi = 0, bi = 0;
  for (int i = 0; i < up->rank; i++) {
    if (win[i]) {
      while (inserted[wi] || batching[wi]) wi++;
      if (up->dims[i] > op->dims[wi])
        return TPU_VFAIL(d, in, "update window dimension %d has size %lld, larger than operand dimension %d (%lld)", i,
                         (long long)up->dims[i], wi, (long long)op->dims[wi]);
      wi++;
    } else {
      if (bi == ivd) bi++;
      if (up->dims[i] != ix->dims[bi])
        return TPU_VFAIL(d, in, "update scatter dimension %d has size %lld but indices dimension %d has %lld", i,
                         (long long)up->dims[i], bi, (long long)ix->dims[bi]);
      bi++;
    }
  }
  TPU_TRY(tpu__vscalar_comp(in, in->to_apply, "to_apply", 2 * n, scatter_type, n, scatter_type, d));
  if (n == 1) return tpu__vexpect(in, op, d);
  TPU_TRY(tpu__vexpect_tuple(in, n, d));
  for (int k = 0; k < n; k++) TPU_TRY(tpu__vexpect_elem(in, k, &in->operands[k]->shape, d));
  return TPU_OK;
}

tpu_status tpu__verify_contract(const tpu_instr *in, tpu_diag *d) {
  switch (in->op) {
    case TPU_OP_DOT: return verify_dot(in, d);
    case TPU_OP_CONVOLUTION: return verify_convolution(in, d);
    case TPU_OP_GATHER: return verify_gather(in, d);
    case TPU_OP_SCATTER: return verify_scatter(in, d);
    default: break;
  }
  return TPU_VFAIL(d, in, "has no contraction rule");
}
