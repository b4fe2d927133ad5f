/* IR verifier driver: call graph, entry layout, shared helpers, elementwise and control-flow
 * rules; the other families live in verify_movement.c, verify_reduce.c, verify_contract.c. */
#include "ir/custom_call.h"
#include "ir/verify.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

/* ---- Shared helpers ---- */

static size_t put_shape(const tpu_shape *s, char *buf, size_t n, size_t at) {
  /* Appends s (without layout) at buf[at]; truncates safely; returns the new length. */
  int k;
  if (at >= n) return at;
  if (s->dtype == TPU_TUPLE) {
    k = snprintf(buf + at, n - at, "(");
    at += k > 0 ? (size_t)k : 0;
    for (int i = 0; i < s->ntuple && at < n; i++) {
      if (i) {
        k = snprintf(buf + at, n - at, ", ");
        at += k > 0 ? (size_t)k : 0;
      }
      at = put_shape(&s->elems[i], buf, n, at);
    }
    if (at < n) {
      k = snprintf(buf + at, n - at, ")");
      at += k > 0 ? (size_t)k : 0;
    }
    return at;
  }
  k = snprintf(buf + at, n - at, "%s[", tpu_dtype_name(s->dtype));
  at += k > 0 ? (size_t)k : 0;
  for (int i = 0; i < s->rank && at < n; i++) {
    k = snprintf(buf + at, n - at, i ? ",%lld" : "%lld", (long long)s->dims[i]);
    at += k > 0 ? (size_t)k : 0;
  }
  if (at < n) {
    k = snprintf(buf + at, n - at, "]");
    at += k > 0 ? (size_t)k : 0;
  }
  return at;
}

const char *tpu__vshape(const tpu_shape *s, tpu__vbuf *b) {
  b->s[0] = 0;
  put_shape(s, b->s, sizeof b->s, 0);
  return b->s;
}

tpu_status tpu__vfail(tpu_diag *d, const tpu_instr *in, const char *cfile, int cline, const char *fmt, ...) {
  char msg[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return tpu__fail(d, TPU_ERR_INVALID, in->loc, cfile, cline, "%s '%s': %s", tpu_op_name(in->op), in->name, msg);
}

tpu_status tpu__vneed_array(const tpu_instr *in, int k, tpu_diag *d) {
  const tpu_shape *s = &in->operands[k]->shape;
  if (tpu_dtype_is_array(s->dtype)) return TPU_OK;
  tpu__vbuf b;
  return TPU_VFAIL(d, in, "operand %d ('%s') must be an array, not %s", k, in->operands[k]->name, tpu__vshape(s, &b));
}

tpu_status tpu__vneed_scalar(const tpu_instr *in, int k, tpu_diag *d) {
  const tpu_shape *s = &in->operands[k]->shape;
  if (tpu_dtype_is_array(s->dtype) && s->rank == 0) return TPU_OK;
  tpu__vbuf b;
  return TPU_VFAIL(d, in, "operand %d ('%s') must be a scalar, not %s", k, in->operands[k]->name, tpu__vshape(s, &b));
}

tpu_status tpu__vexpect(const tpu_instr *in, const tpu_shape *want, tpu_diag *d) {
  if (tpu_shape_equal(&in->shape, want)) return TPU_OK;
  tpu__vbuf a, b;
  return TPU_VFAIL(d, in, "result shape is %s but the operands give %s", tpu__vshape(&in->shape, &a), tpu__vshape(want, &b));
}

tpu_status tpu__vexpect_tuple(const tpu_instr *in, int n, tpu_diag *d) {
  if (in->shape.dtype == TPU_TUPLE && in->shape.ntuple == n) return TPU_OK;
  tpu__vbuf a;
  return TPU_VFAIL(d, in, "result shape is %s, expected a tuple of %d elements", tpu__vshape(&in->shape, &a), n);
}

tpu_status tpu__vexpect_elem(const tpu_instr *in, int i, const tpu_shape *want, tpu_diag *d) {
  if (tpu_shape_equal(&in->shape.elems[i], want)) return TPU_OK;
  tpu__vbuf a, b;
  return TPU_VFAIL(d, in, "result element %d is %s but the operands give %s", i, tpu__vshape(&in->shape.elems[i], &a),
                   tpu__vshape(want, &b));
}

tpu_shape tpu__varray(tpu_dtype t, int rank, const int64_t *dims) {
  tpu_shape s;
  memset(&s, 0, sizeof s);
  s.dtype = t;
  s.rank = rank;
  if (rank && dims) memcpy(s.dims, dims, sizeof(int64_t) * (size_t)rank);
  return s;
}

int tpu__vsame_dims(const tpu_shape *a, const tpu_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

int tpu__vadd(int64_t a, int64_t b, int64_t *out) {
  if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return 0;
  *out = a + b;
  return 1;
}

int tpu__vmul(int64_t a, int64_t b, int64_t *out) {
  if (a == 0 || b == 0) {
    *out = 0;
    return 1;
  }
  if (a == -1 || b == -1) {
    if (a == INT64_MIN || b == INT64_MIN) return 0;
    *out = a * b;
    return 1;
  }
  if ((a > 0 && b > 0 && a > INT64_MAX / b) || (a < 0 && b < 0 && a < INT64_MAX / b) ||
      (a > 0 && b < 0 && b < INT64_MIN / a) || (a < 0 && b > 0 && a < INT64_MIN / b))
    return 0;
  *out = a * b;
  return 1;
}

int tpu__vwindow_out(int64_t n, const tpu_window_dim *w, int64_t *out) {
  /* Dilated input: (n-1)*base_dilation + 1 (0 when n == 0); padded by lo and hi. The
   * dilated window is (size-1)*window_dilation + 1; the output counts the strided window
   * positions that fit: 0 when the window is larger than the padded input. */
  int64_t dil = 0, padded, win, t;
  if (n > 0) {
    if (!tpu__vmul(n - 1, w->base_dilation, &dil) || !tpu__vadd(dil, 1, &dil)) return 0;
  }
  if (!tpu__vadd(dil, w->pad_lo, &padded) || !tpu__vadd(padded, w->pad_hi, &padded)) return 0;
  if (padded < 0) return 0;
  if (!tpu__vmul(w->size - 1, w->window_dilation, &win) || !tpu__vadd(win, 1, &win)) return 0;
  if (padded < win) {
    *out = 0;
    return 1;
  }
  t = (padded - win) / w->stride;
  *out = t + 1;
  return 1;
}

tpu_status tpu__vscalar_comp(const tpu_instr *in, const tpu_comp *c, const char *role, int nparams,
                             tpu_dtype (*param_type)(const tpu_instr *in, int i), int nres,
                             tpu_dtype (*res_type)(const tpu_instr *in, int i), tpu_diag *d) {
  tpu__vbuf a, b;
  if (!c) return TPU_VFAIL(d, in, "needs a '%s' computation", role);
  if (c->nparams != nparams)
    return TPU_VFAIL(d, in, "%s computation '%s' takes %d parameters, expected %d", role, c->name, c->nparams, nparams);
  for (int i = 0; i < nparams; i++) {
    tpu_shape want = tpu__varray(param_type(in, i), 0, NULL);
    if (!tpu_shape_equal(&c->params[i]->shape, &want))
      return TPU_VFAIL(d, in, "%s computation '%s' parameter %d is %s, expected %s", role, c->name, i,
                       tpu__vshape(&c->params[i]->shape, &a), tpu__vshape(&want, &b));
  }
  const tpu_shape *r = &c->root->shape;
  if (nres == 1) {
    tpu_shape want = tpu__varray(res_type(in, 0), 0, NULL);
    if (!tpu_shape_equal(r, &want))
      return TPU_VFAIL(d, in, "%s computation '%s' returns %s, expected %s", role, c->name, tpu__vshape(r, &a),
                       tpu__vshape(&want, &b));
    return TPU_OK;
  }
  if (r->dtype != TPU_TUPLE || r->ntuple != nres)
    return TPU_VFAIL(d, in, "%s computation '%s' returns %s, expected a tuple of %d scalars", role, c->name,
                     tpu__vshape(r, &a), nres);
  for (int i = 0; i < nres; i++) {
    tpu_shape want = tpu__varray(res_type(in, i), 0, NULL);
    if (!tpu_shape_equal(&r->elems[i], &want))
      return TPU_VFAIL(d, in, "%s computation '%s' returns %s as element %d, expected %s", role, c->name,
                       tpu__vshape(&r->elems[i], &a), i, tpu__vshape(&want, &b));
  }
  return TPU_OK;
}

/* ---- Elementwise ---- */

static int type_allowed(tpu_op_types ty, tpu_dtype t) {
  switch (ty) {
    case TPU_TY_F: return tpu_dtype_is_float(t);
    case TPU_TY_I: return tpu_dtype_is_int(t);
    case TPU_TY_N: return tpu_dtype_is_float(t) || tpu_dtype_is_int(t);
    case TPU_TY_L: return t == TPU_PRED || tpu_dtype_is_int(t);
    case TPU_TY_A: return tpu_dtype_is_array(t);
    case TPU_TY_R: return tpu_dtype_is_array(t) && !tpu_dtype_is_complex(t);
    case TPU_TY_FC: return tpu_dtype_is_float(t) || tpu_dtype_is_complex(t);
    case TPU_TY_NC: return tpu_dtype_is_float(t) || tpu_dtype_is_int(t) || tpu_dtype_is_complex(t);
  }
  return 0;
}

static const char *types_desc(tpu_op_types ty) {
  switch (ty) {
    case TPU_TY_F: return "a floating-point type";
    case TPU_TY_I: return "an integer type";
    case TPU_TY_N: return "a floating-point or integer type";
    case TPU_TY_L: return "pred or an integer type";
    case TPU_TY_A: return "an array type";
    case TPU_TY_R: return "a non-complex array type";
    case TPU_TY_FC: return "a floating-point or complex type";
    case TPU_TY_NC: return "a floating-point, integer or complex type";
  }
  return "?";
}

/* All operands arrays with the dims and element type of operand 0, allowed by the table. */
static tpu_status check_same_operands(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  for (int k = 0; k < in->noperands; k++) TPU_TRY(tpu__vneed_array(in, k, d));
  const tpu_shape *s0 = &in->operands[0]->shape;
  tpu_dtype w;
  int mixed = tpu_instr_mixed_float(in, &w); /* float types may differ: see tpu_instr_mixed_float */
  for (int k = 1; k < in->noperands; k++) {
    const tpu_shape *s = &in->operands[k]->shape;
    if (mixed ? !tpu__vsame_dims(s, s0) : !tpu_shape_equal(s, s0))
      return TPU_VFAIL(d, in, "operand %d is %s but operand 0 is %s; elementwise operands must have the same shape", k,
                       tpu__vshape(s, &a), tpu__vshape(s0, &b));
  }
  tpu_op_types ty = tpu_op_types_of(in->op);
  if (!type_allowed(ty, s0->dtype))
    return TPU_VFAIL(d, in, "element type %s is not allowed (expects %s)", tpu_dtype_name(s0->dtype), types_desc(ty));
  return TPU_OK;
}

static tpu_status verify_compare(const tpu_instr *in, tpu_diag *d) {
  TPU_TRY(check_same_operands(in, d));
  int has_dir = 0;
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, "direction")) has_dir = 1;
  if (!has_dir) return TPU_VFAIL(d, in, "needs a 'direction' attribute (EQ, NE, LT, LE, GT or GE)");
  tpu_dtype t = in->operands[0]->shape.dtype;
  int ok = 1;
  switch (in->cmp_type) {
    case TPU_CMPT_DEFAULT: break;
    case TPU_CMPT_FLOAT: ok = tpu_dtype_is_float(t) || tpu_dtype_is_complex(t); break; /* XLA's default for complex */
    case TPU_CMPT_TOTALORDER: ok = tpu_dtype_is_float(t); break;
    case TPU_CMPT_SIGNED: ok = tpu_dtype_is_signed(t); break;
    case TPU_CMPT_UNSIGNED: ok = tpu_dtype_kind(t) == 'u' || t == TPU_PRED; break;
  }
  if (!ok) return TPU_VFAIL(d, in, "comparison type does not fit element type %s", tpu_dtype_name(t));
  if (tpu_dtype_is_complex(t) && in->direction != TPU_CMP_EQ && in->direction != TPU_CMP_NE)
    return TPU_VFAIL(d, in, "complex values (%s) compare only with direction EQ or NE", tpu_dtype_name(t));
  const tpu_shape *s = &in->operands[0]->shape;
  tpu_shape want = tpu__varray(TPU_PRED, s->rank, s->dims);
  return tpu__vexpect(in, &want, d);
}

static tpu_status verify_select(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  for (int k = 0; k < 3; k++) TPU_TRY(tpu__vneed_array(in, k, d));
  const tpu_shape *p = &in->operands[0]->shape, *t = &in->operands[1]->shape, *f = &in->operands[2]->shape;
  if (p->dtype != TPU_PRED) return TPU_VFAIL(d, in, "the predicate must be pred, not %s", tpu_dtype_name(p->dtype));
  tpu_dtype w;
  int mixed = tpu_instr_mixed_float(in, &w); /* float types may differ: see tpu_instr_mixed_float */
  if (mixed ? !tpu__vsame_dims(t, f) : !tpu_shape_equal(t, f))
    return TPU_VFAIL(d, in, "on_true is %s but on_false is %s; they must have the same shape", tpu__vshape(t, &a),
                     tpu__vshape(f, &b));
  if (p->rank != 0 && !tpu__vsame_dims(p, t))
    return TPU_VFAIL(d, in, "the predicate is %s; it must be a scalar or have the dims of %s", tpu__vshape(p, &a),
                     tpu__vshape(t, &b));
  if (mixed) {
    tpu_shape want = tpu__varray(w, t->rank, t->dims);
    return tpu__vexpect(in, &want, d);
  }
  return tpu__vexpect(in, t, d);
}

static tpu_status verify_clamp(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  for (int k = 0; k < 3; k++) TPU_TRY(tpu__vneed_array(in, k, d));
  const tpu_shape *x = &in->operands[1]->shape;
  if (!type_allowed(tpu_op_types_of(in->op), x->dtype))
    return TPU_VFAIL(d, in, "element type %s is not allowed (expects %s)", tpu_dtype_name(x->dtype),
                     types_desc(tpu_op_types_of(in->op)));
  for (int k = 0; k < 3; k += 2) {
    const tpu_shape *s = &in->operands[k]->shape;
    int same_type = s->dtype == x->dtype || (tpu_dtype_is_float(s->dtype) && tpu_dtype_is_float(x->dtype));
    if (!same_type || (s->rank != 0 && !tpu__vsame_dims(s, x)))
      return TPU_VFAIL(d, in, "bound %s is %s; it must be a scalar or the shape of the operand %s", k ? "max" : "min",
                       tpu__vshape(s, &a), tpu__vshape(x, &b));
  }
  tpu_dtype w;
  if (tpu_instr_mixed_float(in, &w)) {
    tpu_shape want = tpu__varray(w, x->rank, x->dims);
    return tpu__vexpect(in, &want, d);
  }
  return tpu__vexpect(in, x, d);
}

static tpu_status verify_elementwise(const tpu_instr *in, tpu_diag *d) {
  TPU_TRY(check_same_operands(in, d));
  const tpu_shape *s = &in->operands[0]->shape;
  if (in->op == TPU_OP_REDUCE_PRECISION) {
    if (in->exponent_bits < 1 || in->exponent_bits > 64)
      return TPU_VFAIL(d, in, "exponent_bits is %d; it must be in [1, 64]", in->exponent_bits);
    if (in->mantissa_bits < 0 || in->mantissa_bits > 64)
      return TPU_VFAIL(d, in, "mantissa_bits is %d; it must be in [0, 64]", in->mantissa_bits);
  }
  tpu_dtype w;
  if (tpu_instr_mixed_float(in, &w)) {
    tpu_shape want = tpu__varray(w, s->rank, s->dims);
    return tpu__vexpect(in, &want, d);
  }
  if (in->op == TPU_OP_ABS && tpu_dtype_is_complex(s->dtype)) { /* |z| is real */
    tpu_shape want = tpu__varray(tpu_dtype_complex_part(s->dtype), s->rank, s->dims);
    return tpu__vexpect(in, &want, d);
  }
  return tpu__vexpect(in, s, d);
}

/* ---- Structure and control flow ---- */

/* Callee `c` must take the operands of `in` as its parameters and return `in`'s shape. */
static tpu_status check_call(const tpu_instr *in, const tpu_comp *c, const char *role, int first, tpu_diag *d) {
  tpu__vbuf a, b;
  if (!c) return TPU_VFAIL(d, in, "needs a '%s' computation", role);
  int n = in->noperands - first;
  if (c->nparams != n)
    return TPU_VFAIL(d, in, "passes %d operands but %s computation '%s' takes %d parameters", n, role, c->name, c->nparams);
  for (int i = 0; i < n; i++) {
    const tpu_shape *s = &in->operands[first + i]->shape;
    if (!tpu_shape_equal(s, &c->params[i]->shape))
      return TPU_VFAIL(d, in, "operand %d is %s but %s computation '%s' parameter %d is %s", first + i, tpu__vshape(s, &a),
                       role, c->name, i, tpu__vshape(&c->params[i]->shape, &b));
  }
  if (!tpu_shape_equal(&in->shape, &c->root->shape))
    return TPU_VFAIL(d, in, "result shape is %s but %s computation '%s' returns %s", tpu__vshape(&in->shape, &a), role,
                     c->name, tpu__vshape(&c->root->shape, &b));
  return TPU_OK;
}

static tpu_status verify_while(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  const tpu_shape *st = &in->operands[0]->shape;
  const tpu_comp *cond = in->condition, *body = in->body;
  if (!cond) return TPU_VFAIL(d, in, "needs a 'condition' computation");
  if (!body) return TPU_VFAIL(d, in, "needs a 'body' computation");
  if (cond->nparams != 1 || !tpu_shape_equal(&cond->params[0]->shape, st))
    return TPU_VFAIL(d, in, "condition computation '%s' must take one parameter of the state shape %s", cond->name,
                     tpu__vshape(st, &a));
  tpu_shape pred = tpu__varray(TPU_PRED, 0, NULL);
  if (!tpu_shape_equal(&cond->root->shape, &pred))
    return TPU_VFAIL(d, in, "condition computation '%s' returns %s, expected pred[]", cond->name,
                     tpu__vshape(&cond->root->shape, &a));
  if (body->nparams != 1 || !tpu_shape_equal(&body->params[0]->shape, st))
    return TPU_VFAIL(d, in, "body computation '%s' must take one parameter of the state shape %s", body->name,
                     tpu__vshape(st, &a));
  if (!tpu_shape_equal(&body->root->shape, st))
    return TPU_VFAIL(d, in, "body computation '%s' returns %s, expected the state shape %s", body->name,
                     tpu__vshape(&body->root->shape, &a), tpu__vshape(st, &b));
  return tpu__vexpect(in, st, d);
}

static tpu_status verify_conditional(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  int has_list = 0, has_pred = 0;
  for (int i = 0; i < in->nattrs; i++) {
    if (!strcmp(in->attrs[i].name, "branch_computations")) has_list = 1;
    if (!strcmp(in->attrs[i].name, "true_computation") || !strcmp(in->attrs[i].name, "false_computation")) has_pred = 1;
  }
  if (has_list && has_pred)
    return TPU_VFAIL(d, in, "gives both branch_computations and true_computation/false_computation");
  if (!has_list && !has_pred) return TPU_VFAIL(d, in, "needs branch_computations or true_computation and false_computation");
  if (in->noperands < 1) return TPU_VFAIL(d, in, "needs a branch index operand");
  const tpu_shape *ix = &in->operands[0]->shape;
  int is_pred = ix->dtype == TPU_PRED;
  if (!tpu_dtype_is_array(ix->dtype) || ix->rank != 0 || (!is_pred && ix->dtype != TPU_S32))
    return TPU_VFAIL(d, in, "the branch index is %s; it must be pred[] or s32[]", tpu__vshape(ix, &a));
  if (in->nbranches < 1) return TPU_VFAIL(d, in, "has no branch computations");
  for (int i = 0; i < in->nbranches; i++)
    if (!in->branches[i])
      return TPU_VFAIL(d, in, "needs both true_computation and false_computation");
  if (is_pred && in->nbranches != 2)
    return TPU_VFAIL(d, in, "a pred branch index selects between 2 branches, not %d", in->nbranches);
  if (has_pred && !is_pred) return TPU_VFAIL(d, in, "true_computation/false_computation need a pred branch index");
  if (in->noperands != in->nbranches + 1)
    return TPU_VFAIL(d, in, "has %d branches but %d branch operands", in->nbranches, in->noperands - 1);
  for (int i = 0; i < in->nbranches; i++) {
    const tpu_comp *c = in->branches[i];
    const tpu_shape *op = &in->operands[i + 1]->shape;
    if (c->nparams != 1 || !tpu_shape_equal(&c->params[0]->shape, op))
      return TPU_VFAIL(d, in, "branch %d computation '%s' must take one parameter of shape %s", i, c->name,
                       tpu__vshape(op, &a));
    if (!tpu_shape_equal(&c->root->shape, &in->shape))
      return TPU_VFAIL(d, in, "branch %d computation '%s' returns %s, expected the result shape %s", i, c->name,
                       tpu__vshape(&c->root->shape, &a), tpu__vshape(&in->shape, &b));
  }
  return TPU_OK;
}

static tpu_status verify_tuple(const tpu_instr *in, tpu_diag *d) {
  TPU_TRY(tpu__vexpect_tuple(in, in->noperands, d));
  for (int i = 0; i < in->noperands; i++) TPU_TRY(tpu__vexpect_elem(in, i, &in->operands[i]->shape, d));
  return TPU_OK;
}

static tpu_status verify_gte(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a;
  const tpu_shape *t = &in->operands[0]->shape;
  if (t->dtype != TPU_TUPLE) return TPU_VFAIL(d, in, "the operand is %s, not a tuple", tpu__vshape(t, &a));
  if (in->index < 0 || in->index >= t->ntuple)
    return TPU_VFAIL(d, in, "index %lld is out of range for a tuple of %d elements", (long long)in->index, t->ntuple);
  return tpu__vexpect(in, &t->elems[in->index], d);
}

static tpu_dtype map_param_type(const tpu_instr *in, int i) { return in->operands[i]->shape.dtype; }
static tpu_dtype map_res_type(const tpu_instr *in, int i) { return in->shape.dtype; }

static tpu_status verify_map(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  if (in->noperands < 1) return TPU_VFAIL(d, in, "needs at least one operand");
  for (int k = 0; k < in->noperands; k++) TPU_TRY(tpu__vneed_array(in, k, d));
  const tpu_shape *s0 = &in->operands[0]->shape;
  for (int k = 1; k < in->noperands; k++)
    if (!tpu__vsame_dims(&in->operands[k]->shape, s0))
      return TPU_VFAIL(d, in, "operand %d is %s but operand 0 is %s; map operands must have the same dims", k,
                       tpu__vshape(&in->operands[k]->shape, &a), tpu__vshape(s0, &b));
  if (in->dimensions.n) {
    int ok = in->dimensions.n == s0->rank;
    for (int i = 0; ok && i < in->dimensions.n; i++) ok = in->dimensions.v[i] == i;
    if (!ok) return TPU_VFAIL(d, in, "dimensions must list every operand dimension in order");
  }
  if (!tpu_dtype_is_array(in->shape.dtype)) return TPU_VFAIL(d, in, "the result must be an array");
  TPU_TRY(tpu__vscalar_comp(in, in->to_apply, "to_apply", in->noperands, map_param_type, 1, map_res_type, d));
  tpu_shape want = tpu__varray(in->shape.dtype, s0->rank, s0->dims);
  return tpu__vexpect(in, &want, d);
}

static tpu_status verify_iota(const tpu_instr *in, tpu_diag *d) {
  const tpu_shape *s = &in->shape;
  if (!tpu_dtype_is_array(s->dtype) || s->dtype == TPU_PRED)
    return TPU_VFAIL(d, in, "the result must be a numeric array");
  if (in->iota_dimension < 0 || in->iota_dimension >= s->rank)
    return TPU_VFAIL(d, in, "iota_dimension %lld is out of range for rank %d", (long long)in->iota_dimension, s->rank);
  return TPU_OK;
}

static tpu_status verify_rng_bits(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a;
  const tpu_shape *st = &in->operands[0]->shape;
  if (st->dtype != TPU_U64 || st->rank != 1)
    return TPU_VFAIL(d, in, "the state is %s; it must be a u64 vector", tpu__vshape(st, &a));
  int64_t n = st->dims[0];
  int ok = in->rng_algorithm == TPU_RNG_THREEFRY ? n == 2 : (n == 2 || n == 3);
  if (!ok)
    return TPU_VFAIL(d, in, "the state has %lld words; %s", (long long)n,
                     in->rng_algorithm == TPU_RNG_THREEFRY ? "three-fry needs 2" : "philox needs 2 or 3");
  TPU_TRY(tpu__vexpect_tuple(in, 2, d));
  TPU_TRY(tpu__vexpect_elem(in, 0, st, d));
  const tpu_shape *bits = &in->shape.elems[1];
  if (!tpu_dtype_is_int(bits->dtype))
    return TPU_VFAIL(d, in, "the bits are %s; they must be of an integer type", tpu__vshape(bits, &a));
  return TPU_OK;
}

static tpu_status verify_structure(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a;
  switch (in->op) {
    case TPU_OP_PARAMETER:
    case TPU_OP_CONSTANT:
      if (in->shape.dtype == TPU_TOKEN && in->op == TPU_OP_CONSTANT) return TPU_VFAIL(d, in, "a constant cannot be a token");
      return TPU_OK;
    case TPU_OP_IOTA: return verify_iota(in, d);
    case TPU_OP_TUPLE: return verify_tuple(in, d);
    case TPU_OP_GET_TUPLE_ELEMENT: return verify_gte(in, d);
    case TPU_OP_CALL: return check_call(in, in->to_apply, "to_apply", 0, d);
    case TPU_OP_FUSION: return check_call(in, in->calls, "calls", 0, d);
    case TPU_OP_WHILE: return verify_while(in, d);
    case TPU_OP_CONDITIONAL: return verify_conditional(in, d);
    case TPU_OP_MAP: return verify_map(in, d);
    case TPU_OP_OPT_BARRIER: return tpu__vexpect(in, &in->operands[0]->shape, d);
    case TPU_OP_CUSTOM_CALL: return tpu_custom_call_verify(in, d);
    case TPU_OP_CHOLESKY:
    case TPU_OP_TRIANGULAR_SOLVE: return tpu__verify_linalg(in, d);
    case TPU_OP_COPY_START: {
      /* (destination, source, context): XLA's asynchronous copy (e.g. a prefetch to VMEM). */
      const tpu_shape *s = &in->operands[0]->shape, *r = &in->shape;
      if (r->dtype != TPU_TUPLE || r->ntuple < 2 || !tpu_shape_equal(&r->elems[0], s) || !tpu_shape_equal(&r->elems[1], s))
        return TPU_VFAIL(d, in, "the result must be (copy, operand, context) with the operand's shape %s",
                         tpu__vshape(s, &a));
      return TPU_OK;
    }
    case TPU_OP_COPY_DONE: {
      const tpu_instr *st = in->operands[0];
      if (st->op != TPU_OP_COPY_START) return TPU_VFAIL(d, in, "the operand must be a copy-start");
      return tpu__vexpect(in, &st->shape.elems[0], d);
    }
    case TPU_OP_SLICE_START: {
      /* ((operand), slice, context): the TPU compiler's asynchronous slice (a weight's rows
       * prefetched into VMEM in pieces); slice= as for slice */
      const tpu_shape *s = &in->operands[0]->shape, *r = &in->shape;
      if (r->dtype != TPU_TUPLE || r->ntuple < 2 || r->elems[0].dtype != TPU_TUPLE || r->elems[0].ntuple != 1 ||
          !tpu_shape_equal(&r->elems[0].elems[0], s))
        return TPU_VFAIL(d, in, "the result must be ((operand), slice, context) with the operand's shape %s",
                         tpu__vshape(s, &a));
      tpu_instr sl = *in;
      sl.op = TPU_OP_SLICE;
      sl.shape = r->elems[1];
      return tpu__verify_movement(&sl, d);
    }
    case TPU_OP_SLICE_DONE: {
      const tpu_instr *st = in->operands[0];
      if (st->op != TPU_OP_SLICE_START) return TPU_VFAIL(d, in, "the operand must be a slice-start");
      return tpu__vexpect(in, &st->shape.elems[1], d);
    }
    case TPU_OP_AFTER_ALL: {
      for (int k = 0; k < in->noperands; k++)
        if (in->operands[k]->shape.dtype != TPU_TOKEN)
          return TPU_VFAIL(d, in, "operand %d is %s, not a token", k, tpu__vshape(&in->operands[k]->shape, &a));
      tpu_shape tok = tpu__varray(TPU_TOKEN, 0, NULL);
      return tpu__vexpect(in, &tok, d);
    }
    case TPU_OP_ADD_DEPENDENCY:
      if (in->operands[1]->shape.dtype != TPU_TOKEN)
        return TPU_VFAIL(d, in, "operand 1 is %s, not a token", tpu__vshape(&in->operands[1]->shape, &a));
      return tpu__vexpect(in, &in->operands[0]->shape, d);
    case TPU_OP_RNG_BIT_GENERATOR: return verify_rng_bits(in, d);
    case TPU_OP_PARTITION_ID:
    case TPU_OP_REPLICA_ID: {
      tpu_shape u = tpu__varray(TPU_U32, 0, NULL);
      return tpu__vexpect(in, &u, d);
    }
    case TPU_OP_COMPARE: return verify_compare(in, d);
    case TPU_OP_IS_FINITE: {
      TPU_TRY(check_same_operands(in, d));
      const tpu_shape *s = &in->operands[0]->shape;
      tpu_shape want = tpu__varray(TPU_PRED, s->rank, s->dims);
      return tpu__vexpect(in, &want, d);
    }
    case TPU_OP_SELECT: return verify_select(in, d);
    case TPU_OP_CLAMP: return verify_clamp(in, d);
    case TPU_OP_REAL:
    case TPU_OP_IMAG:
    case TPU_OP_COMPLEX:
    case TPU_OP_FFT: return tpu__verify_complex(in, d);
    default: break;
  }
  return TPU_VFAIL(d, in, "has no verifier rule");
}

/* One instruction: arity from the table, then the op's rule. */
static tpu_status verify_instr(const tpu_instr *in, tpu_diag *d) {
  int arity = tpu_op_arity(in->op);
  if (arity >= 0 && in->noperands != arity)
    return TPU_VFAIL(d, in, "takes %d operand%s, got %d", arity, arity == 1 ? "" : "s", in->noperands);
  switch (tpu_op_class_of(in->op)) {
    case TPU_CLS_UNARY:
    case TPU_CLS_BINARY:
    case TPU_CLS_TERNARY: return verify_elementwise(in, d);
    case TPU_CLS_COLLECTIVE: return tpu__verify_collective(in, d);
    case TPU_CLS_PARSE_ONLY: return TPU_OK;
    case TPU_CLS_OTHER: break;
  }
  switch (in->op) {
    case TPU_OP_BROADCAST:
    case TPU_OP_RESHAPE:
    case TPU_OP_BITCAST:
    case TPU_OP_TRANSPOSE:
    case TPU_OP_SLICE:
    case TPU_OP_DYNAMIC_SLICE:
    case TPU_OP_DYNAMIC_UPDATE_SLICE:
    case TPU_OP_CONCATENATE:
    case TPU_OP_PAD:
    case TPU_OP_REVERSE:
    case TPU_OP_CONVERT:
    case TPU_OP_BITCAST_CONVERT:
    case TPU_OP_COPY: return tpu__verify_movement(in, d);
    case TPU_OP_REDUCE:
    case TPU_OP_REDUCE_WINDOW:
    case TPU_OP_SELECT_AND_SCATTER:
    case TPU_OP_SORT:
    case TPU_OP_TOPK: return tpu__verify_reduce(in, d);
    case TPU_OP_DOT:
    case TPU_OP_CONVOLUTION:
    case TPU_OP_GATHER:
    case TPU_OP_SCATTER: return tpu__verify_contract(in, d);
    default: return verify_structure(in, d);
  }
}

/* ---- Module level ---- */

/* Computations by address (for an index) and by name (for called_computations text). */
typedef struct {
  const tpu_comp *c;
  int idx;
} comp_key;

static int key_cmp(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const comp_key *)a)->c, y = (uintptr_t)((const comp_key *)b)->c;
  return x < y ? -1 : x > y;
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(((const comp_key *)a)->c->name, ((const comp_key *)b)->c->name);
}

typedef struct {
  const char *s;
  size_t n;
} name_ref;

static int name_ref_cmp(const void *key, const void *elem) {
  const name_ref *r = key;
  const char *nm = ((const comp_key *)elem)->c->name;
  size_t ln = strlen(nm);
  int c = memcmp(r->s, nm, r->n < ln ? r->n : ln);
  if (c) return c;
  return r->n < ln ? -1 : r->n > ln;
}

static int comp_index(const comp_key *keys, int n, const tpu_comp *c) {
  comp_key k = {c, 0};
  const comp_key *r = bsearch(&k, keys, (size_t)n, sizeof k, key_cmp);
  return r ? r->idx : -1;
}

/* A depth-first frame: computation, instruction, and where in that instruction's callees
 * the walk is: the resolved references (to_apply, condition, body, select, scatter, calls,
 * branches), then the names in `called_computations` attributes, which the parser keeps
 * as text (custom-call). */
typedef struct {
  int comp, instr;
  int edge;        /* next resolved reference */
  int attr;        /* next attribute to scan for called_computations */
  const char *cur; /* position in the current called_computations text, or NULL */
} frame;

/* The next computation `in` calls, advancing f; returns 0 after the last one. A name that
 * is no computation of the module gives *out = NULL with the name in *name, *len. */
static int callee_next(const comp_key *byname, int n, const tpu_instr *in, frame *f, const tpu_comp **out,
                       const char **name, size_t *len) {
  const tpu_comp *fixed[6] = {in->to_apply, in->condition, in->body, in->select, in->scatter_comp, in->calls};
  while (f->edge < 6 + in->nbranches) {
    int e = f->edge++;
    const tpu_comp *c = e < 6 ? fixed[e] : in->branches[e - 6];
    if (c) {
      *out = c;
      return 1;
    }
  }
  for (;;) {
    if (!f->cur) {
      while (f->attr < in->nattrs && strcmp(in->attrs[f->attr].name, "called_computations")) f->attr++;
      if (f->attr >= in->nattrs) return 0;
      f->cur = in->attrs[f->attr++].value;
    }
    const char *p = f->cur;
    while (*p == '{' || *p == '}' || *p == ',' || *p == '%' || isspace((unsigned char)*p)) p++;
    const char *st = p;
    while (*p && *p != ',' && *p != '}' && !isspace((unsigned char)*p)) p++;
    if (p == st) {
      f->cur = NULL;
      continue;
    }
    f->cur = p;
    *name = st;
    *len = (size_t)(p - st);
    name_ref r = {st, *len};
    const comp_key *k = bsearch(&r, byname, (size_t)n, sizeof *byname, name_ref_cmp);
    *out = k ? k->c : NULL;
    return 1;
  }
}

/* Depth-first over call edges from computation `root`, appending computations to
 * order[] callees first and marking them reached. Iterative: the call graph can be deep
 * (the parser has already rejected cycles). */
static tpu_status dfs_calls(const tpu_module *m, const comp_key *byaddr, const comp_key *byname, int root,
                            unsigned char *state, int *order, int *norder, frame *stack, tpu_diag *d) {
  int sp = 0;
  if (state[root]) return TPU_OK;
  state[root] = 1;
  stack[sp++] = (frame){root, 0, 0, 0, NULL};
  while (sp) {
    frame *f = &stack[sp - 1];
    const tpu_comp *c = m->comps[f->comp];
    int pushed = 0;
    while (f->instr < c->ninstrs && !pushed) {
      const tpu_instr *in = c->instrs[f->instr];
      const tpu_comp *callee;
      const char *name = NULL;
      size_t len = 0;
      if (!callee_next(byname, m->ncomps, in, f, &callee, &name, &len)) {
        f->instr++;
        f->edge = f->attr = 0;
        f->cur = NULL;
        continue;
      }
      if (!callee)
        return TPU_VFAIL(d, in, "called_computations names '%.*s', which is not a computation of the module", (int)len,
                         name);
      int j = comp_index(byaddr, m->ncomps, callee);
      if (j >= 0 && !state[j]) {
        state[j] = 1;
        stack[sp++] = (frame){j, 0, 0, 0, NULL};
        pushed = 1;
      }
    }
    if (!pushed) {
      order[(*norder)++] = f->comp;
      sp--;
    }
  }
  return TPU_OK;
}

/* entry_computation_layout="{(f32[2]{0}, s32[])->f32[2]{0}}": a small tolerant shape
 * reader (layouts, tiling tails and memory spaces are skipped). */
typedef struct {
  const char *s;
  tpu_arena *arena;
  int depth, oom;
} lreader;

static void lskip(lreader *r) {
  /* Whitespace and the "index=5" comments XLA puts in long tuples. */
  for (;;) {
    while (isspace((unsigned char)*r->s)) r->s++;
    if (r->s[0] != '/' || r->s[1] != '*') return;
    const char *e = strstr(r->s + 2, "*/");
    if (!e) return;
    r->s = e + 2;
  }
}

static int lshape(lreader *r, tpu_shape *sh) {
  memset(sh, 0, sizeof *sh);
  lskip(r);
  if (++r->depth > 64) return 0;
  if (*r->s == '(') {
    r->s++;
    sh->dtype = TPU_TUPLE;
    tpu_shape tmp[64];
    tpu_shape *elems = tmp;
    int n = 0, cap = 64;
    lskip(r);
    if (*r->s == ')') {
      r->s++;
    } else {
      for (;;) {
        if (n == cap) { /* no fixed limit: training steps have hundreds of parameter leaves */
          tpu_shape *ne = tpu_arena_alloc(r->arena, sizeof(tpu_shape) * (size_t)cap * 2);
          if (!ne) {
            r->oom = 1;
            return 0;
          }
          memcpy(ne, elems, sizeof(tpu_shape) * (size_t)n);
          elems = ne;
          cap *= 2;
        }
        if (!lshape(r, &elems[n])) return 0;
        n++;
        lskip(r);
        if (*r->s == ',') {
          r->s++;
          continue;
        }
        if (*r->s != ')') return 0;
        r->s++;
        break;
      }
    }
    sh->ntuple = n;
    sh->elems = tpu_arena_alloc(r->arena, sizeof(tpu_shape) * (size_t)(n ? n : 1));
    if (!sh->elems) {
      r->oom = 1;
      return 0;
    }
    memcpy(sh->elems, elems, sizeof(tpu_shape) * (size_t)n);
    r->depth--;
    return 1;
  }
  const char *st = r->s;
  while (isalnum((unsigned char)*r->s)) r->s++;
  if (!tpu_dtype_parse(st, (size_t)(r->s - st), &sh->dtype) || *r->s != '[') return 0;
  r->s++;
  lskip(r);
  while (*r->s != ']') {
    char *end;
    if (!isdigit((unsigned char)*r->s) || sh->rank == TPU_MAX_RANK) return 0;
    long long v = strtoll(r->s, &end, 10);
    sh->dims[sh->rank++] = v;
    r->s = end;
    lskip(r);
    if (*r->s == ',') r->s++;
    else if (*r->s != ']') return 0;
    lskip(r);
  }
  r->s++;
  if (*r->s == '{') {
    int depth = 0;
    do {
      if (*r->s == '{') depth++;
      else if (*r->s == '}') depth--;
      else if (!*r->s) return 0;
      r->s++;
    } while (depth);
  }
  r->depth--;
  return 1;
}

static tpu_status check_entry_layout(const tpu_module *m, tpu_diag *d) {
  const tpu_attr *a = NULL;
  for (int i = 0; i < m->nattrs; i++)
    if (!strcmp(m->attrs[i].name, "entry_computation_layout")) a = &m->attrs[i];
  if (!a) return TPU_OK;
  tpu_arena arena;
  tpu_arena_init(&arena);
  lreader r = {a->value, &arena, 0, 0};
  tpu_shape params, result;
  tpu__vbuf x, y;
  tpu_status st = TPU_OK;
  const tpu_comp *e = m->entry;
  lskip(&r);
  int ok = *r.s == '{';
  if (ok) {
    r.s++;
    ok = lshape(&r, &params) && params.dtype == TPU_TUPLE;
  }
  if (ok) {
    lskip(&r);
    ok = r.s[0] == '-' && r.s[1] == '>';
    r.s += ok ? 2 : 0;
  }
  if (ok) ok = lshape(&r, &result);
  if (ok) {
    lskip(&r);
    ok = r.s[0] == '}' && !r.s[1];
  }
  if (r.oom) {
    st = TPU_FAIL(d, TPU_ERR_NOMEM, a->loc, "out of memory while verifying");
  } else if (!ok) {
    st = TPU_FAIL(d, TPU_ERR_INVALID, a->loc, "cannot read entry_computation_layout (expected {(SHAPE, ...)->SHAPE})");
  } else if (params.ntuple != e->nparams) {
    st = TPU_FAIL(d, TPU_ERR_INVALID, e->loc, "entry computation '%s' has %d parameters but entry_computation_layout lists %d",
                  e->name, e->nparams, params.ntuple);
  } else {
    for (int i = 0; i < e->nparams && st == TPU_OK; i++)
      if (!tpu_shape_equal(&params.elems[i], &e->params[i]->shape))
        st = TPU_VFAIL(d, e->params[i], "entry parameter %d is %s but entry_computation_layout gives %s", i,
                       tpu__vshape(&e->params[i]->shape, &x), tpu__vshape(&params.elems[i], &y));
    if (st == TPU_OK && !tpu_shape_equal(&result, &e->root->shape))
      st = TPU_VFAIL(d, e->root, "the entry result is %s but entry_computation_layout gives %s",
                     tpu__vshape(&e->root->shape, &x), tpu__vshape(&result, &y));
  }
  tpu_arena_deinit(&arena);
  return st;
}

tpu_status tpu_ir_verify(const tpu_module *m, tpu_diag *d) {
  if (!m || !m->entry || m->ncomps < 1) return TPU_FAIL(d, TPU_ERR_INVALID, tpu_noloc(), "the module has no entry computation");
  int n = m->ncomps;
  comp_key *keys = tpu_malloc(sizeof(comp_key) * (size_t)n), *byname = tpu_malloc(sizeof(comp_key) * (size_t)n);
  unsigned char *state = tpu_calloc((size_t)n, 1);
  int *order = tpu_malloc(sizeof(int) * (size_t)n);
  frame *stack = tpu_malloc(sizeof(frame) * (size_t)n);
  tpu_status st = TPU_OK;
  if (!keys || !byname || !state || !order || !stack) {
    st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory while verifying");
    goto done;
  }
  for (int i = 0; i < n; i++) keys[i] = (comp_key){m->comps[i], i};
  memcpy(byname, keys, sizeof(comp_key) * (size_t)n);
  qsort(keys, (size_t)n, sizeof *keys, key_cmp);
  qsort(byname, (size_t)n, sizeof *byname, name_cmp);
  int entry = comp_index(keys, n, m->entry), norder = 0;
  if (entry < 0) {
    st = TPU_FAIL(d, TPU_ERR_INVALID, m->entry->loc, "the entry computation is not in the module");
    goto done;
  }
  st = dfs_calls(m, keys, byname, entry, state, order, &norder, stack, d);
  if (st != TPU_OK) goto done;
  for (int i = 0; i < n; i++)
    if (!state[i]) {
      st = TPU_FAIL(d, TPU_ERR_INVALID, m->comps[i]->loc, "computation '%s' is not reachable from the entry computation '%s'",
                    m->comps[i]->name, m->entry->name);
      goto done;
    }
  /* Callees before callers, operands before users: the first error is reported at the
   * instruction that is wrong rather than at one of its users. */
  for (int i = 0; i < norder && st == TPU_OK; i++) {
    const tpu_comp *c = m->comps[order[i]];
    for (int p = 0; p < c->nparams; p++)
      if (!c->params[p] || c->params[p]->index != p) {
        st = TPU_FAIL(d, TPU_ERR_INVALID, c->loc, "computation '%s' has no parameter %d", c->name, p);
        break;
      }
    if (st != TPU_OK) break;
    if (c->is_entry && c != m->entry) {
      st = TPU_FAIL(d, TPU_ERR_INVALID, c->loc, "computation '%s' is marked ENTRY but is not the entry", c->name);
      break;
    }
    for (int k = 0; k < c->norder && st == TPU_OK; k++) st = verify_instr(c->order[k], d);
  }
  if (st == TPU_OK) st = check_entry_layout(m, d);
done:
  tpu_free(keys);
  tpu_free(byname);
  tpu_free(state);
  tpu_free(order);
  tpu_free(stack);
  return st;
}
