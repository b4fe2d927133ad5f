/* Verifier rules for cholesky and triangular-solve (XLA's shape rules): square minor
 * dimensions of a floating-point (non-complex) type, leading dimensions batch, the boolean
 * attributes true or false and transpose_a one of XLA's three values. */
#include <string.h>

#include "ir/verify.h"

static const char *attr(const tpu_instr *in, const char *name) {
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, name)) return in->attrs[i].value;
  return NULL;
}

/* A boolean attribute: absent (false), true or false; else an error naming it. */
static tpu_status boolean(const tpu_instr *in, const char *name, int *out, tpu_diag *d) {
  const char *v = attr(in, name);
  *out = v && !strcmp(v, "true");
  if (v && strcmp(v, "true") && strcmp(v, "false"))
    return TPU_VFAIL(d, in, "%s=%s: expected true or false", name, v);
  return TPU_OK;
}

tpu_status tpu__verify_linalg(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  int lower, left = 0, unit;
  TPU_TRY(boolean(in, "lower", &lower, d));
  const tpu_shape *am = &in->operands[0]->shape;
  if (in->op == TPU_OP_CHOLESKY) {
    if (!tpu_dtype_is_float(am->dtype) || am->rank < 2 || am->dims[am->rank - 1] != am->dims[am->rank - 2])
      return TPU_VFAIL(d, in, "the operand %s must be floating point with square minor dimensions", tpu__vshape(am, &a));
    return tpu__vexpect(in, am, d);
  }
  TPU_TRY(boolean(in, "left_side", &left, d));
  TPU_TRY(boolean(in, "unit_diagonal", &unit, d));
  const char *t = attr(in, "transpose_a");
  if (t && strcmp(t, "NO_TRANSPOSE") && strcmp(t, "TRANSPOSE") && strcmp(t, "ADJOINT"))
    return TPU_VFAIL(d, in, "transpose_a=%s: expected NO_TRANSPOSE, TRANSPOSE or ADJOINT", t);
  const tpu_shape *bm = &in->operands[1]->shape;
  if (!tpu_dtype_is_float(am->dtype) || am->dtype != bm->dtype || am->rank < 2 || am->rank != bm->rank ||
      am->dims[am->rank - 1] != am->dims[am->rank - 2])
    return TPU_VFAIL(d, in, "a %s must be floating point and square in its minor dimensions, and b %s of the same "
                     "type and rank", tpu__vshape(am, &a), tpu__vshape(bm, &b));
  for (int i = 0; i < am->rank - 2; i++)
    if (am->dims[i] != bm->dims[i])
      return TPU_VFAIL(d, in, "a %s and b %s differ in batch dimension %d", tpu__vshape(am, &a), tpu__vshape(bm, &b), i);
  int64_t k = am->dims[am->rank - 1], need = bm->dims[bm->rank - (left ? 2 : 1)];
  if (k != need)
    return TPU_VFAIL(d, in, "a is %lldx%lld but b's %s dimension is %lld (left_side=%s)", (long long)k, (long long)k,
                     left ? "row" : "column", (long long)need, left ? "true" : "false");
  return tpu__vexpect(in, bm, d);
}
