/* Verifier rules for data movement: broadcast, reshape, bitcast, transpose, slice,
 * dynamic-slice, dynamic-update-slice, concatenate, pad, reverse, convert, bitcast-convert,
 * copy. */
#include <string.h>

#include "ir/layout.h"
#include "ir/verify.h"

/* Every value of `dims` is a dimension of a rank-`rank` shape, none repeated. */
static tpu_status check_dim_list(const tpu_instr *in, const tpu_i64s *dims, int rank, const char *what, tpu_diag *d) {
  unsigned char seen[TPU_MAX_RANK] = {0};
  for (int i = 0; i < dims->n; i++) {
    int64_t v = dims->v[i];
    if (v < 0 || v >= rank)
      return TPU_VFAIL(d, in, "%s %lld is out of range for rank %d", what, (long long)v, rank);
    if (seen[v]) return TPU_VFAIL(d, in, "%s %lld is repeated", what, (long long)v);
    seen[v] = 1;
  }
  return TPU_OK;
}

static tpu_status verify_broadcast(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  const tpu_shape *s = &in->operands[0]->shape, *r = &in->shape;
  if (!tpu_dtype_is_array(r->dtype)) return TPU_VFAIL(d, in, "the result must be an array");
  if (in->dimensions.n != s->rank)
    return TPU_VFAIL(d, in, "dimensions has %d entries but the operand has rank %d", in->dimensions.n, s->rank);
  TPU_TRY(check_dim_list(in, &in->dimensions, r->rank, "broadcast dimension", d));
  for (int i = 0; i < s->rank; i++) {
    int64_t o = in->dimensions.v[i];
    if (s->dims[i] != r->dims[o])
      return TPU_VFAIL(d, in, "operand dimension %d has size %lld but result dimension %lld has size %lld", i,
                       (long long)s->dims[i], (long long)o, (long long)r->dims[o]);
  }
  if (r->dtype != s->dtype)
    return TPU_VFAIL(d, in, "result shape is %s but the operand is %s; the element type must not change",
                     tpu__vshape(r, &a), tpu__vshape(s, &b));
  return TPU_OK;
}

static tpu_status verify_reshape(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  const tpu_shape *s = &in->operands[0]->shape, *r = &in->shape;
  if (!tpu_dtype_is_array(r->dtype)) return TPU_VFAIL(d, in, "the result must be an array");
  if (in->op == TPU_OP_BITCAST) {
    /* A bitcast reinterprets the same bytes: optimized XLA dumps use it for reshapes and
     * for same-width element type changes. */
    size_t rb = (size_t)tpu_shape_numel(r) * tpu_dtype_size(r->dtype), sb = (size_t)tpu_shape_numel(s) * tpu_dtype_size(s->dtype);
    /* or the same bytes in memory: the XLA TPU compiler views a tiled array's padded bytes
     * as bytes (bf16[32,56,56,64]{3,2,1,0:T(8,128)(2,1)} as s8[25690112] on v6e) */
    if (rb != sb && tpu_shape_physical_bytes(r) == tpu_shape_physical_bytes(s)) return TPU_OK;
    if (rb != sb)
      return TPU_VFAIL(d, in, "result shape %s has %zu bytes but the operand %s has %zu", tpu__vshape(r, &a), rb,
                       tpu__vshape(s, &b), sb);
    return TPU_OK;
  }
  if (r->dtype != s->dtype)
    return TPU_VFAIL(d, in, "result shape is %s but the operand is %s; the element type must not change",
                     tpu__vshape(r, &a), tpu__vshape(s, &b));
  if (tpu_shape_numel(r) != tpu_shape_numel(s))
    return TPU_VFAIL(d, in, "result shape %s has %lld elements but the operand %s has %lld", tpu__vshape(r, &a),
                     (long long)tpu_shape_numel(r), tpu__vshape(s, &b), (long long)tpu_shape_numel(s));
  return TPU_OK;
}

static tpu_status verify_transpose(const tpu_instr *in, tpu_diag *d) {
  const tpu_shape *s = &in->operands[0]->shape;
  if (in->dimensions.n != s->rank)
    return TPU_VFAIL(d, in, "dimensions has %d entries but the operand has rank %d; it must be a permutation",
                     in->dimensions.n, s->rank);
  TPU_TRY(check_dim_list(in, &in->dimensions, s->rank, "permutation entry", d));
  tpu_shape want = tpu__varray(s->dtype, s->rank, NULL);
  for (int i = 0; i < s->rank; i++) want.dims[i] = s->dims[in->dimensions.v[i]];
  return tpu__vexpect(in, &want, d);
}

static tpu_status verify_slice(const tpu_instr *in, tpu_diag *d) {
  const tpu_shape *s = &in->operands[0]->shape;
  if (in->nslice != s->rank)
    return TPU_VFAIL(d, in, "slice has %d ranges but the operand has rank %d", in->nslice, s->rank);
  tpu_shape want = tpu__varray(s->dtype, s->rank, NULL);
  for (int i = 0; i < s->rank; i++) {
    const tpu_slice_dim *sd = &in->slice[i];
    if (sd->stride < 1) return TPU_VFAIL(d, in, "slice dimension %d has stride %lld; it must be >= 1", i, (long long)sd->stride);
    if (sd->start < 0 || sd->start > sd->limit || sd->limit > s->dims[i])
      return TPU_VFAIL(d, in, "slice dimension %d range [%lld:%lld] does not fit 0 <= start <= limit <= %lld", i,
                       (long long)sd->start, (long long)sd->limit, (long long)s->dims[i]);
    int64_t len = sd->limit - sd->start;
    want.dims[i] = len / sd->stride + (len % sd->stride != 0);
  }
  return tpu__vexpect(in, &want, d);
}

/* Operands first..first+rank-1 are scalar integer start indices. */
static tpu_status check_starts(const tpu_instr *in, int first, int rank, tpu_diag *d) {
  tpu__vbuf a;
  if (in->noperands != first + rank)
    return TPU_VFAIL(d, in, "has %d start indices for a rank-%d operand; it needs one scalar per dimension",
                     in->noperands - first, rank);
  for (int k = first; k < in->noperands; k++) {
    const tpu_shape *s = &in->operands[k]->shape;
    if (!tpu_dtype_is_int(s->dtype) || s->rank != 0)
      return TPU_VFAIL(d, in, "start index operand %d is %s; it must be a scalar integer", k, tpu__vshape(s, &a));
  }
  return TPU_OK;
}

static tpu_status verify_dynamic_slice(const tpu_instr *in, tpu_diag *d) {
  if (in->noperands < 1) return TPU_VFAIL(d, in, "needs an operand");
  TPU_TRY(tpu__vneed_array(in, 0, d));
  const tpu_shape *s = &in->operands[0]->shape;
  TPU_TRY(check_starts(in, 1, s->rank, d));
  if (in->dynamic_slice_sizes.n != s->rank)
    return TPU_VFAIL(d, in, "dynamic_slice_sizes has %d entries but the operand has rank %d", in->dynamic_slice_sizes.n,
                     s->rank);
  tpu_shape want = tpu__varray(s->dtype, s->rank, NULL);
  for (int i = 0; i < s->rank; i++) {
    int64_t z = in->dynamic_slice_sizes.v[i];
    if (z < 0 || z > s->dims[i])
      return TPU_VFAIL(d, in, "slice size %lld of dimension %d does not fit in %lld", (long long)z, i, (long long)s->dims[i]);
    want.dims[i] = z;
  }
  return tpu__vexpect(in, &want, d);
}

static tpu_status verify_dynamic_update_slice(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  if (in->noperands < 2) return TPU_VFAIL(d, in, "needs an operand and an update");
  TPU_TRY(tpu__vneed_array(in, 0, d));
  TPU_TRY(tpu__vneed_array(in, 1, d));
  const tpu_shape *s = &in->operands[0]->shape, *u = &in->operands[1]->shape;
  TPU_TRY(check_starts(in, 2, s->rank, d));
  if (u->dtype != s->dtype || u->rank != s->rank)
    return TPU_VFAIL(d, in, "the update %s must have the element type and rank of the operand %s", tpu__vshape(u, &a),
                     tpu__vshape(s, &b));
  for (int i = 0; i < s->rank; i++)
    if (u->dims[i] > s->dims[i])
      return TPU_VFAIL(d, in, "update dimension %d has size %lld, larger than the operand's %lld", i,
                       (long long)u->dims[i], (long long)s->dims[i]);
  return tpu__vexpect(in, s, d);
}

static tpu_status verify_concatenate(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  if (in->noperands < 1) return TPU_VFAIL(d, in, "needs at least one operand");
  for (int k = 0; k < in->noperands; k++) TPU_TRY(tpu__vneed_array(in, k, d));
  const tpu_shape *s0 = &in->operands[0]->shape;
  if (in->dimensions.n != 1) return TPU_VFAIL(d, in, "dimensions must name exactly one dimension");
  int64_t cd = in->dimensions.v[0];
  if (cd < 0 || cd >= s0->rank)
    return TPU_VFAIL(d, in, "concatenate dimension %lld is out of range for rank %d", (long long)cd, s0->rank);
  tpu_shape want = *s0;
  want.has_layout = 0;
  for (int k = 1; k < in->noperands; k++) {
    const tpu_shape *s = &in->operands[k]->shape;
    int ok = s->dtype == s0->dtype && s->rank == s0->rank;
    for (int i = 0; ok && i < s->rank; i++) ok = i == cd || s->dims[i] == s0->dims[i];
    if (!ok)
      return TPU_VFAIL(d, in, "operand %d is %s but operand 0 is %s; they may differ only in dimension %lld", k,
                       tpu__vshape(s, &a), tpu__vshape(s0, &b), (long long)cd);
    if (!tpu__vadd(want.dims[cd], s->dims[cd], &want.dims[cd])) return TPU_VFAIL(d, in, "the result size overflows");
  }
  return tpu__vexpect(in, &want, d);
}

static tpu_status verify_pad(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  TPU_TRY(tpu__vneed_array(in, 0, d));
  TPU_TRY(tpu__vneed_scalar(in, 1, d));
  const tpu_shape *s = &in->operands[0]->shape, *v = &in->operands[1]->shape;
  /* XLA's TPU compiler pads bf16 with an f32 value (e.g. -inf); the value is converted. */
  if (v->dtype != s->dtype && !(tpu_dtype_is_float(v->dtype) && tpu_dtype_is_float(s->dtype)))
    return TPU_VFAIL(d, in, "the padding value %s must have the operand's element type %s", tpu__vshape(v, &a),
                     tpu_dtype_name(s->dtype));
  if (in->npadding != s->rank)
    return TPU_VFAIL(d, in, "padding has %d dimensions but the operand has rank %d", in->npadding, s->rank);
  tpu_shape want = tpu__varray(s->dtype, s->rank, NULL);
  for (int i = 0; i < s->rank; i++) {
    const tpu_pad_dim *p = &in->padding[i];
    int64_t n = s->dims[i], inner, out;
    if (p->interior < 0)
      return TPU_VFAIL(d, in, "padding dimension %d has interior %lld; it must be >= 0", i, (long long)p->interior);
    if (!tpu__vmul(n > 0 ? n - 1 : 0, p->interior, &inner) || !tpu__vadd(inner, n, &out) ||
        !tpu__vadd(out, p->lo, &out) || !tpu__vadd(out, p->hi, &out))
      return TPU_VFAIL(d, in, "padding dimension %d overflows", i);
    if (out < 0)
      return TPU_VFAIL(d, in, "padding dimension %d gives a negative size %lld", i, (long long)out);
    want.dims[i] = out;
  }
  if (!tpu_shape_equal(&in->shape, &want))
    return TPU_VFAIL(d, in, "result shape is %s but the padding gives %s", tpu__vshape(&in->shape, &a), tpu__vshape(&want, &b));
  return TPU_OK;
}

static tpu_status verify_bitcast_convert(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  const tpu_shape *s = &in->operands[0]->shape, *r = &in->shape;
  if (!tpu_dtype_is_array(r->dtype)) return TPU_VFAIL(d, in, "the result must be an array");
  size_t from = tpu_dtype_size(s->dtype), to = tpu_dtype_size(r->dtype);
  tpu_shape want = tpu__varray(r->dtype, s->rank, s->dims);
  if (from > to) {
    /* A wider element becomes from/to narrower ones: a new minor dimension. */
    if (s->rank == TPU_MAX_RANK) return TPU_VFAIL(d, in, "the result would exceed rank %d", TPU_MAX_RANK);
    want.dims[want.rank++] = (int64_t)(from / to);
  } else if (from < to) {
    /* to/from narrower elements along the minor dimension become one wider element. */
    if (s->rank == 0 || s->dims[s->rank - 1] != (int64_t)(to / from))
      return TPU_VFAIL(d, in, "converting %s to %s needs a minor dimension of size %zu", tpu__vshape(s, &a),
                       tpu_dtype_name(r->dtype), to / from);
    want.rank--;
  }
  if (!tpu_shape_equal(r, &want))
    return TPU_VFAIL(d, in, "result shape is %s but the bit widths give %s", tpu__vshape(r, &a), tpu__vshape(&want, &b));
  return TPU_OK;
}

tpu_status tpu__verify_movement(const tpu_instr *in, tpu_diag *d) {
  if (tpu_instr_moves_and_converts(in)) { /* checked as the move, in the operand's type */
    tpu_instr as = *in;
    as.shape.dtype = in->operands[0]->shape.dtype;
    return tpu__verify_movement(&as, d);
  }
  if (in->op == TPU_OP_COPY) {
    /* XLA's TPU compiler also uses copy to round an f32 operand to bf16 for the MXU (a copy
     * between floating types converts, rounding to nearest even). */
    const tpu_shape *s = &in->operands[0]->shape;
    if (in->shape.dtype != s->dtype && tpu_dtype_is_float(in->shape.dtype) && tpu_dtype_is_float(s->dtype)) {
      tpu_shape want = *s;
      want.dtype = in->shape.dtype;
      return tpu__vexpect(in, &want, d);
    }
    return tpu__vexpect(in, s, d);
  }
  if (in->op == TPU_OP_DYNAMIC_SLICE) return verify_dynamic_slice(in, d);
  if (in->op == TPU_OP_DYNAMIC_UPDATE_SLICE) return verify_dynamic_update_slice(in, d);
  if (in->op == TPU_OP_CONCATENATE) return verify_concatenate(in, d);
  if (in->op == TPU_OP_PAD) return verify_pad(in, d);
  TPU_TRY(tpu__vneed_array(in, 0, d));
  const tpu_shape *s = &in->operands[0]->shape;
  switch (in->op) {
    case TPU_OP_BROADCAST: return verify_broadcast(in, d);
    case TPU_OP_RESHAPE:
    case TPU_OP_BITCAST: return verify_reshape(in, d);
    case TPU_OP_TRANSPOSE: return verify_transpose(in, d);
    case TPU_OP_SLICE: return verify_slice(in, d);
    case TPU_OP_REVERSE: {
      TPU_TRY(check_dim_list(in, &in->dimensions, s->rank, "reverse dimension", d));
      return tpu__vexpect(in, s, d);
    }
    case TPU_OP_CONVERT: {
      if (!tpu_dtype_is_array(in->shape.dtype)) return TPU_VFAIL(d, in, "the result must be an array");
      if (tpu_dtype_is_complex(s->dtype) && !tpu_dtype_is_complex(in->shape.dtype)) /* as XLA: use real/imag */
        return TPU_VFAIL(d, in, "converting complex %s to real %s is not defined (take real or imag first)",
                         tpu_dtype_name(s->dtype), tpu_dtype_name(in->shape.dtype));
      tpu_shape want = tpu__varray(in->shape.dtype, s->rank, s->dims);
      return tpu__vexpect(in, &want, d);
    }
    case TPU_OP_BITCAST_CONVERT: return verify_bitcast_convert(in, d);
    default: break;
  }
  return TPU_VFAIL(d, in, "has no movement rule");
}
