/* Verifier rules for reductions and ordering: reduce, reduce-window, select-and-scatter,
 * sort, topk. */
#include <string.h>

#include "ir/verify.h"

/* Reducer parameter i (of 2N) and result i (of N) have the type of init value i. */
static tpu_dtype reducer_type(const tpu_instr *in, int i) {
  int n = in->noperands / 2;
  return in->operands[n + i % n]->shape.dtype;
}

/* N inputs (arrays, equal dims, element types equal to their inits), N scalar inits. */
static tpu_status check_inputs_inits(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  if (in->noperands < 2 || in->noperands % 2)
    return TPU_VFAIL(d, in, "takes N inputs and N init values; got %d operands", in->noperands);
  int n = in->noperands / 2;
  const tpu_shape *s0 = &in->operands[0]->shape;
  for (int k = 0; k < n; k++) {
    TPU_TRY(tpu__vneed_array(in, k, d));
    TPU_TRY(tpu__vneed_scalar(in, n + k, d));
    const tpu_shape *s = &in->operands[k]->shape, *init = &in->operands[n + k]->shape;
    if (!tpu__vsame_dims(s, s0))
      return TPU_VFAIL(d, in, "input %d is %s but input 0 is %s; inputs must have the same dims", k, tpu__vshape(s, &a),
                       tpu__vshape(s0, &b));
    if (init->dtype != s->dtype)
      return TPU_VFAIL(d, in, "init value %d is %s but input %d has element type %s", k, tpu__vshape(init, &a), k,
                       tpu_dtype_name(s->dtype));
  }
  return tpu__vscalar_comp(in, in->to_apply, "to_apply", 2 * n, reducer_type, n, reducer_type, d);
}

/* The result: one array of `dims` per input, with its init's element type; a tuple when
 * there are several. */
static tpu_status expect_per_input(const tpu_instr *in, int rank, const int64_t *dims, tpu_diag *d) {
  int n = in->noperands / 2;
  if (n == 1) {
    tpu_shape want = tpu__varray(in->operands[1]->shape.dtype, rank, dims);
    return tpu__vexpect(in, &want, d);
  }
  TPU_TRY(tpu__vexpect_tuple(in, n, d));
  for (int k = 0; k < n; k++) {
    tpu_shape want = tpu__varray(in->operands[n + k]->shape.dtype, rank, dims);
    TPU_TRY(tpu__vexpect_elem(in, k, &want, d));
  }
  return TPU_OK;
}

static tpu_status verify_reduce_op(const tpu_instr *in, tpu_diag *d) {
  TPU_TRY(check_inputs_inits(in, d));
  const tpu_shape *s = &in->operands[0]->shape;
  unsigned char reduced[TPU_MAX_RANK] = {0};
  for (int i = 0; i < in->dimensions.n; i++) {
    int64_t v = in->dimensions.v[i];
    if (v < 0 || v >= s->rank)
      return TPU_VFAIL(d, in, "reduce dimension %lld is out of range for rank %d", (long long)v, s->rank);
    if (reduced[v]) return TPU_VFAIL(d, in, "reduce dimension %lld is repeated", (long long)v);
    reduced[v] = 1;
  }
  int64_t dims[TPU_MAX_RANK];
  int rank = 0;
  for (int i = 0; i < s->rank; i++)
    if (!reduced[i]) dims[rank++] = s->dims[i];
  return expect_per_input(in, rank, dims, d);
}

/* A window over a rank-`rank` array: one entry per dimension, no reversal. */
static tpu_status check_window(const tpu_instr *in, int rank, tpu_diag *d) {
  if (in->nwindow != rank)
    return TPU_VFAIL(d, in, "window has %d dimensions but the operand has rank %d", in->nwindow, rank);
  for (int i = 0; i < rank; i++)
    if (in->window[i].reversal) return TPU_VFAIL(d, in, "window dimension %d is reversed; only convolutions reverse", i);
  return TPU_OK;
}

static tpu_status window_dims(const tpu_instr *in, const tpu_shape *s, int64_t *dims, tpu_diag *d) {
  for (int i = 0; i < s->rank; i++)
    if (!tpu__vwindow_out(s->dims[i], &in->window[i], &dims[i]))
      return TPU_VFAIL(d, in, "window dimension %d overflows or pads the input to a negative size", i);
  return TPU_OK;
}

static tpu_status verify_reduce_window(const tpu_instr *in, tpu_diag *d) {
  TPU_TRY(check_inputs_inits(in, d));
  const tpu_shape *s = &in->operands[0]->shape;
  TPU_TRY(check_window(in, s->rank, d));
  int64_t dims[TPU_MAX_RANK];
  TPU_TRY(window_dims(in, s, dims, d));
  return expect_per_input(in, s->rank, dims, d);
}

static tpu_dtype sas_select_type(const tpu_instr *in, int i) { return in->operands[0]->shape.dtype; }
static tpu_dtype sas_pred_type(const tpu_instr *in, int i) { return TPU_PRED; }
static tpu_dtype sas_scatter_type(const tpu_instr *in, int i) { return in->operands[1]->shape.dtype; }

static tpu_status verify_select_and_scatter(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  TPU_TRY(tpu__vneed_array(in, 0, d));
  TPU_TRY(tpu__vneed_array(in, 1, d));
  TPU_TRY(tpu__vneed_scalar(in, 2, d));
  const tpu_shape *s = &in->operands[0]->shape, *src = &in->operands[1]->shape, *init = &in->operands[2]->shape;
  if (src->dtype != s->dtype || init->dtype != s->dtype)
    return TPU_VFAIL(d, in, "source %s and init value %s must have the operand's element type %s", tpu__vshape(src, &a),
                     tpu__vshape(init, &b), tpu_dtype_name(s->dtype));
  TPU_TRY(check_window(in, s->rank, d));
  int64_t dims[TPU_MAX_RANK];
  TPU_TRY(window_dims(in, s, dims, d));
  tpu_shape want = tpu__varray(s->dtype, s->rank, dims);
  if (!tpu_shape_equal(src, &want))
    return TPU_VFAIL(d, in, "the source is %s but the window over the operand gives %s", tpu__vshape(src, &a),
                     tpu__vshape(&want, &b));
  TPU_TRY(tpu__vscalar_comp(in, in->select, "select", 2, sas_select_type, 1, sas_pred_type, d));
  TPU_TRY(tpu__vscalar_comp(in, in->scatter_comp, "scatter", 2, sas_scatter_type, 1, sas_scatter_type, d));
  return tpu__vexpect(in, s, d);
}

/* Comparator parameters 2k and 2k+1 have operand k's element type; it returns pred. */
static tpu_dtype sort_param_type(const tpu_instr *in, int i) { return in->operands[i / 2]->shape.dtype; }

static tpu_status verify_sort(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  if (in->noperands < 1) return TPU_VFAIL(d, in, "needs at least one operand");
  for (int k = 0; k < in->noperands; k++) TPU_TRY(tpu__vneed_array(in, k, d));
  const tpu_shape *s0 = &in->operands[0]->shape;
  for (int k = 1; k < in->noperands; k++)
    if (!tpu__vsame_dims(&in->operands[k]->shape, s0))
      return TPU_VFAIL(d, in, "operand %d is %s but operand 0 is %s; sort operands must have the same dims", k,
                       tpu__vshape(&in->operands[k]->shape, &a), tpu__vshape(s0, &b));
  if (in->dimensions.n != 1) return TPU_VFAIL(d, in, "dimensions must name exactly one dimension");
  int64_t sd = in->dimensions.v[0];
  if (sd < 0 || sd >= s0->rank)
    return TPU_VFAIL(d, in, "sort dimension %lld is out of range for rank %d", (long long)sd, s0->rank);
  TPU_TRY(tpu__vscalar_comp(in, in->to_apply, "to_apply", 2 * in->noperands, sort_param_type, 1, sas_pred_type, d));
  if (in->noperands == 1) return tpu__vexpect(in, s0, d);
  TPU_TRY(tpu__vexpect_tuple(in, in->noperands, d));
  for (int k = 0; k < in->noperands; k++) TPU_TRY(tpu__vexpect_elem(in, k, &in->operands[k]->shape, d));
  return TPU_OK;
}

static tpu_status verify_topk(const tpu_instr *in, tpu_diag *d) {
  TPU_TRY(tpu__vneed_array(in, 0, d));
  const tpu_shape *s = &in->operands[0]->shape;
  int has_k = 0;
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, "k")) has_k = 1;
  if (!has_k) return TPU_VFAIL(d, in, "needs a 'k' attribute");
  if (s->rank < 1) return TPU_VFAIL(d, in, "the operand must have rank >= 1");
  int64_t last = s->dims[s->rank - 1];
  if (in->k < 0 || in->k > last)
    return TPU_VFAIL(d, in, "k = %lld does not fit the last dimension of size %lld", (long long)in->k, (long long)last);
  TPU_TRY(tpu__vexpect_tuple(in, 2, d));
  tpu_shape vals = tpu__varray(s->dtype, s->rank, s->dims);
  vals.dims[s->rank - 1] = in->k;
  tpu_shape idx = vals;
  idx.dtype = TPU_S32;
  TPU_TRY(tpu__vexpect_elem(in, 0, &vals, d));
  return tpu__vexpect_elem(in, 1, &idx, d);
}

tpu_status tpu__verify_reduce(const tpu_instr *in, tpu_diag *d) {
  switch (in->op) {
    case TPU_OP_REDUCE: return verify_reduce_op(in, d);
    case TPU_OP_REDUCE_WINDOW: return verify_reduce_window(in, d);
    case TPU_OP_SELECT_AND_SCATTER: return verify_select_and_scatter(in, d);
    case TPU_OP_SORT: return verify_sort(in, d);
    case TPU_OP_TOPK: return verify_topk(in, d);
    default: break;
  }
  return TPU_VFAIL(d, in, "has no reduction rule");
}
