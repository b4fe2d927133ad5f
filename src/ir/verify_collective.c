/* Verifier rules for collectives: the groups partition the module's devices (replica_count
 * x num_partitions) and each result has the shape XLA gives it for the group size. */
#include <string.h>

#include "ir/collective.h"
#include "ir/verify.h"

/* The operands' shapes as the collective's result would be without communication: the
 * operand for one operand, a tuple of them for several. */
static const tpu_shape *operand_shape(const tpu_instr *in, int k) { return &in->operands[k]->shape; }

/* Result leaf k of a collective with n results: the result itself for one, else element k. */
static const tpu_shape *result_leaf(const tpu_shape *r, int n, int k) {
  if (n == 1 && r->dtype != TPU_TUPLE) return r;
  return r->dtype == TPU_TUPLE && k < r->ntuple ? &r->elems[k] : NULL;
}

/* Checks result leaves against the operands with dimension `dim` scaled: result = operand
 * * num / den along dim (all-gather: num = group size; reduce-scatter: den = group size). */
static tpu_status check_scaled(const tpu_instr *in, const tpu_shape *r, int64_t dim, int64_t num, int64_t den,
                               tpu_diag *d) {
  tpu__vbuf a, b;
  int n = in->noperands;
  if (n > 1 && (r->dtype != TPU_TUPLE || r->ntuple != n))
    return TPU_VFAIL(d, in, "has %d operands, so its result must be a tuple of %d arrays", n, n);
  for (int k = 0; k < n; k++) {
    const tpu_shape *s = operand_shape(in, k), *o = result_leaf(r, n, k);
    if (!o || !tpu_dtype_is_array(s->dtype)) return TPU_VFAIL(d, in, "operand %d must be an array", k);
    if (num == 1 && den == 1) {
      if (!tpu_shape_equal(o, s))
        return TPU_VFAIL(d, in, "result %s does not match operand %d %s", tpu__vshape(o, &a), k, tpu__vshape(s, &b));
      continue;
    }
    if (dim < 0 || dim >= s->rank)
      return TPU_VFAIL(d, in, "dimension %lld is out of range for operand %d of rank %d", (long long)dim, k, s->rank);
    if (s->dims[dim] % den)
      return TPU_VFAIL(d, in, "operand %d dimension %lld (size %lld) does not split into %lld parts, one per device of "
                       "the group", k, (long long)dim, (long long)s->dims[dim], (long long)den);
    tpu_shape want = *s;
    want.has_layout = 0;
    want.dims[dim] = s->dims[dim] / den * num;
    if (o->dtype != want.dtype || !tpu__vsame_dims(o, &want))
      return TPU_VFAIL(d, in, "result %s does not match operand %d %s with dimension %lld %s %lld (the group size)",
                       tpu__vshape(o, &a), k, tpu__vshape(s, &b), (long long)dim, num > 1 ? "times" : "divided by",
                       (long long)(num > 1 ? num : den));
  }
  return TPU_OK;
}

static tpu_status one_dimension(const tpu_instr *in, int64_t *dim, tpu_diag *d) {
  if (in->dimensions.n != 1) return TPU_VFAIL(d, in, "needs dimensions={d}: one dimension");
  *dim = in->dimensions.v[0];
  return TPU_OK;
}

static tpu_dtype elem_type(const tpu_instr *in, int i) {
  (void)i;
  return in->operands[0]->shape.dtype;
}

/* to_apply reduces two scalars of the operands' (common) element type to one. */
static tpu_status check_reducer(const tpu_instr *in, tpu_diag *d) {
  if (!in->to_apply) return TPU_VFAIL(d, in, "needs to_apply (the reduction)");
  for (int k = 0; k < in->noperands; k++) {
    const tpu_shape *s = operand_shape(in, k);
    if (!tpu_dtype_is_array(s->dtype)) return TPU_VFAIL(d, in, "operand %d must be an array", k);
    if (s->dtype != operand_shape(in, 0)->dtype)
      return TPU_VFAIL(d, in, "operands %d and 0 differ in element type; one to_apply reduces them all", k);
  }
  return tpu__vscalar_comp(in, in->to_apply, "to_apply", 2, elem_type, 1, elem_type, d);
}

/* For -start ops, the part of the result that holds the collective's result. */
static tpu_status start_result(const tpu_instr *in, const tpu_shape **r, tpu_diag *d) {
  *r = &in->shape;
  if (in->op == TPU_OP_ALL_REDUCE_START) return TPU_OK;
  if (in->op == TPU_OP_ALL_GATHER_START || in->op == TPU_OP_COLLECTIVE_PERMUTE_START) {
    if (in->shape.dtype != TPU_TUPLE || in->shape.ntuple < 2)
      return TPU_VFAIL(d, in, "the result must be a tuple (operands, results%s)",
                       in->op == TPU_OP_COLLECTIVE_PERMUTE_START ? ", ..." : "");
    *r = &in->shape.elems[1];
  }
  return TPU_OK;
}

tpu_status tpu__verify_collective(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  if (in->shape.dtype == TPU_TOKEN) return TPU_VFAIL(d, in, "the result must be an array or a tuple");
  if (tpu_collective_is_done(in->op)) {
    const tpu_instr *s = in->operands[0];
    tpu_opcode want = in->op == TPU_OP_ALL_REDUCE_DONE   ? TPU_OP_ALL_REDUCE_START
                      : in->op == TPU_OP_ALL_GATHER_DONE ? TPU_OP_ALL_GATHER_START
                                                         : TPU_OP_COLLECTIVE_PERMUTE_START;
    if (s->op != want) return TPU_VFAIL(d, in, "the operand must be a %s", tpu_op_name(want));
    const tpu_shape *r;
    TPU_TRY(start_result(s, &r, d));
    if (!tpu_shape_equal(r, &in->shape))
      return TPU_VFAIL(d, in, "result %s does not match the result %s of its %s", tpu__vshape(&in->shape, &a),
                       tpu__vshape(r, &b), tpu_op_name(want));
    return TPU_OK;
  }
  if (in->noperands < 1) return TPU_VFAIL(d, in, "needs at least one operand");
  int64_t replicas = 1, partitions = 1;
  if (in->parent && in->parent->module) tpu_module_device_grid(in->parent->module, &replicas, &partitions);
  tpu_opcode base = tpu_collective_base(in->op);
  const tpu_shape *r;
  TPU_TRY(start_result(in, &r, d));
  int64_t size = 1, dim = 0;
  if (base == TPU_OP_COLLECTIVE_PERMUTE) {
    TPU_TRY(tpu_collective_check_groups(in, replicas, partitions, d));
    if (in->noperands != 1)
      return TPU_VFAIL(d, in, "takes one operand (the in-place form with output buffers is not supported)");
    if (!tpu_shape_equal(r, operand_shape(in, 0)))
      return TPU_VFAIL(d, in, "result %s does not match the operand %s", tpu__vshape(r, &a),
                       tpu__vshape(operand_shape(in, 0), &b));
    return TPU_OK;
  }
  TPU_TRY(tpu_collective_group_size(in, replicas, partitions, &size, d));
  switch (base) {
    case TPU_OP_ALL_REDUCE:
      TPU_TRY(check_reducer(in, d));
      return check_scaled(in, r, 0, 1, 1, d);
    case TPU_OP_REDUCE_SCATTER:
      TPU_TRY(check_reducer(in, d));
      TPU_TRY(one_dimension(in, &dim, d));
      return check_scaled(in, r, dim, 1, size, d);
    case TPU_OP_ALL_GATHER:
      TPU_TRY(one_dimension(in, &dim, d));
      return check_scaled(in, r, dim, size, 1, d);
    case TPU_OP_COLLECTIVE_BROADCAST: return check_scaled(in, r, 0, 1, 1, d);
    case TPU_OP_ALL_TO_ALL:
      if (in->dimensions.n == 0) { /* tuple form: operand j goes to member j */
        if (in->noperands != size)
          return TPU_VFAIL(d, in, "has %d operands but its groups have %lld devices; without dimensions= each "
                           "operand goes to one device", in->noperands, (long long)size);
        return check_scaled(in, r, 0, 1, 1, d);
      }
      TPU_TRY(one_dimension(in, &dim, d));
      /* Same shape out as in, split into `size` chunks along dim. */
      TPU_TRY(check_scaled(in, r, dim, 1, 1, d));
      for (int k = 0; k < in->noperands; k++)
        if (operand_shape(in, k)->dims[dim] % size)
          return TPU_VFAIL(d, in, "operand %d dimension %lld (size %lld) does not split into %lld parts, one per "
                           "device of the group", k, (long long)dim, (long long)operand_shape(in, k)->dims[dim],
                           (long long)size);
      return TPU_OK;
    default: return TPU_VFAIL(d, in, "has no verifier rule");
  }
}
