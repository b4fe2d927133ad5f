/* Reference kernels: complex elementwise ops (c64, c128), real, imag, complex, and complex compare. */
#include <complex.h>

#include "ref/elementwise_int.h"

/* The numerics (docs/numerics.md): every op loads both parts into a double complex,
 * computes in double, and rounds each part once to the element's part type. As on real
 * floats, arithmetic reads denormal parts as zero and flushes denormal results (c64 at the
 * f32 threshold, c128 at the f64 one); negate, real, imag and complex only move bits. */

typedef double complex zc;

static zc make_z(double re, double im) { return CMPLX(re, im); }

static double flush_part(tpu_dtype t, double x) {
  return t == TPU_C64 ? (double)tpu__ew_flush32((float)x) : tpu__ew_flush64(x);
}

/* Element i of a complex array, parts flushed when `daz`. */
static zc load_z(tpu_dtype t, const void *p, int64_t i, int daz) {
  double re, im;
  if (t == TPU_C64) {
    re = ((const float *)p)[2 * i];
    im = ((const float *)p)[2 * i + 1];
  } else {
    re = ((const double *)p)[2 * i];
    im = ((const double *)p)[2 * i + 1];
  }
  if (daz) re = flush_part(t, re), im = flush_part(t, im);
  return make_z(re, im);
}

static void store_z(tpu_dtype t, void *p, int64_t i, zc z, int ftz) {
  double re = creal(z), im = cimag(z);
  if (t == TPU_C64) {
    float fr = (float)re, fi = (float)im;
    if (ftz) fr = tpu__ew_flush32(fr), fi = tpu__ew_flush32(fi);
    ((float *)p)[2 * i] = fr;
    ((float *)p)[2 * i + 1] = fi;
  } else {
    if (ftz) re = tpu__ew_flush64(re), im = tpu__ew_flush64(im);
    ((double *)p)[2 * i] = re;
    ((double *)p)[2 * i + 1] = im;
  }
}

/* (a + bi)(c + di) by the textbook formula (no C Annex G infinity recovery, as XLA). */
static zc z_mul(zc x, zc y) {
  double a = creal(x), b = cimag(x), c = creal(y), d = cimag(y);
  return make_z(a * c - b * d, a * d + b * c);
}

/* Smith's algorithm: scales by the larger part of the divisor, so |y|^2 cannot overflow. */
static zc z_div(zc x, zc y) {
  double a = creal(x), b = cimag(x), c = creal(y), d = cimag(y);
  if (fabs(c) >= fabs(d)) {
    if (c == 0 && d == 0) return make_z(a / c, b / c); /* x / 0: the parts divided by zero */
    double r = d / c, den = c + d * r;
    return make_z((a + b * r) / den, (b - a * r) / den);
  }
  double r = c / d, den = c * r + d;
  return make_z((a * r + b) / den, (b * r - a) / den);
}

static zc z_expm1(zc z) {
  double a = creal(z), b = cimag(z);
  double s = sin(0.5 * b);
  /* exp(a)cos(b) - 1 = expm1(a)cos(b) - 2 sin^2(b/2), accurate near zero */
  return make_z(expm1(a) * cos(b) - 2.0 * s * s, exp(a) * sin(b));
}

static zc z_log1p(zc z) {
  double a = creal(z), b = cimag(z);
  double re = 0.5 * log1p(a * (2.0 + a) + b * b);
  if (!isfinite(re) || fabs(a) > 0.5 || fabs(b) > 0.5) re = log(cabs(make_z(1.0 + a, b)));
  return make_z(re, atan2(b, 1.0 + a));
}

/* x^y: 0^0 = 1, 0^y = 0 for Re(y) > 0 (and Im(y) = 0), else exp(y log x). */
static zc z_pow(zc x, zc y) {
  if (creal(x) == 0 && cimag(x) == 0) {
    if (creal(y) == 0 && cimag(y) == 0) return make_z(1, 0);
    if (creal(y) > 0 && cimag(y) == 0) return make_z(0, 0);
  }
  return cexp(z_mul(y, clog(x)));
}

static zc z_sign(zc z) {
  double r = cabs(z);
  if (r == 0) return make_z(0, 0);
  if (isnan(r)) return make_z(NAN, NAN);
  return make_z(creal(z) / r, cimag(z) / r);
}

/* Whether op is a complex unary (binary) op this file computes. */
static int unary_ok(tpu_opcode op) {
  switch (op) {
    case TPU_OP_NEGATE: case TPU_OP_ABS: case TPU_OP_SIGN: case TPU_OP_EXP: case TPU_OP_EXPM1: case TPU_OP_LOG:
    case TPU_OP_LOG1P: case TPU_OP_SQRT: case TPU_OP_RSQRT: case TPU_OP_TANH: case TPU_OP_LOGISTIC:
    case TPU_OP_SINE: case TPU_OP_COSINE: case TPU_OP_TAN: return 1;
    default: return 0;
  }
}

static int binary_ok(tpu_opcode op) {
  return op == TPU_OP_ADD || op == TPU_OP_SUBTRACT || op == TPU_OP_MULTIPLY || op == TPU_OP_DIVIDE ||
         op == TPU_OP_POWER;
}

static zc apply_unary(tpu_opcode op, zc z) {
  switch (op) {
    case TPU_OP_NEGATE: return -z;
    case TPU_OP_ABS: return make_z(cabs(z), 0);
    case TPU_OP_SIGN: return z_sign(z);
    case TPU_OP_EXP: return cexp(z);
    case TPU_OP_EXPM1: return z_expm1(z);
    case TPU_OP_LOG: return clog(z);
    case TPU_OP_LOG1P: return z_log1p(z);
    case TPU_OP_SQRT: return csqrt(z);
    case TPU_OP_RSQRT: return z_div(make_z(1, 0), csqrt(z));
    case TPU_OP_TANH: return ctanh(z);
    case TPU_OP_LOGISTIC: return z_div(make_z(1, 0), make_z(1, 0) + cexp(-z));
    case TPU_OP_SINE: return csin(z);
    case TPU_OP_COSINE: return ccos(z);
    case TPU_OP_TAN: return ctan(z);
    default: return z;
  }
}

static zc apply_binary(tpu_opcode op, zc x, zc y) {
  switch (op) {
    case TPU_OP_ADD: return x + y;
    case TPU_OP_SUBTRACT: return x - y;
    case TPU_OP_MULTIPLY: return z_mul(x, y);
    case TPU_OP_DIVIDE: return z_div(x, y);
    default: return z_pow(x, y);
  }
}

/* Element index of operand `v` for result element e: 0 for a broadcast scalar. */
static int64_t at(const tpu_tensor *v, int64_t e) { return v->rank == 0 ? 0 : e; }

static tpu_status bad(const tpu_instr *in, const char *what, tpu_diag *d) {
  return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "%s '%s': %s", tpu_op_name(in->op), in->name, what);
}

/* The operand has the result's element count (or is a scalar when scalar_ok). */
static int fits(const tpu_tensor *v, int64_t n, int scalar_ok) {
  return tpu_dtype_is_array(v->dtype) && (tpu_tensor_numel(v) == n || (scalar_ok && v->rank == 0));
}

tpu_status tpu__ref_complex_ew(const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out, tpu_diag *d) {
  tpu_tensor_zero(out);
  const tpu_opcode op = in->op;
  const tpu_dtype rt = in->shape.dtype;
  const int64_t n = tpu_shape_numel(&in->shape);
  if (in->noperands < 1 || !tpu_dtype_is_array(rt)) return bad(in, "needs array operands and result", d);
  const tpu_tensor *a = args[0];
  const tpu_dtype at0 = a->dtype;
  if (!fits(a, n, op != TPU_OP_REAL && op != TPU_OP_IMAG)) return bad(in, "operand 0 does not fit the result", d);
  if (op == TPU_OP_REAL || op == TPU_OP_IMAG) {
    if (rt != tpu_dtype_complex_part(at0) || !(tpu_dtype_is_complex(at0) || tpu_dtype_is_float(at0)))
      return bad(in, "the result must be the operand's part type", d);
    TPU_TRY(tpu__ew_alloc_out(in, out, d));
    size_t es = tpu_dtype_size(rt);
    if (!tpu_dtype_is_complex(at0)) { /* a real operand: real(x) = x, imag(x) = 0 */
      if (op == TPU_OP_REAL && n) memcpy(out->data, a->data, es * (size_t)n);
      return TPU_OK;
    }
    const char *src = (const char *)a->data + (op == TPU_OP_IMAG ? es : 0);
    for (int64_t e = 0; e < n; e++) memcpy((char *)out->data + es * (size_t)e, src + 2 * es * (size_t)e, es);
    return TPU_OK;
  }
  if (op == TPU_OP_COMPLEX) {
    const tpu_tensor *b = args[1];
    if (in->noperands != 2 || b->dtype != at0 || !fits(b, n, 1) || tpu_dtype_complex_of(at0) != rt)
      return bad(in, "needs two f32 (f64) operands of the result's shape", d);
    TPU_TRY(tpu__ew_alloc_out(in, out, d));
    size_t es = tpu_dtype_size(at0);
    for (int64_t e = 0; e < n; e++) {
      memcpy((char *)out->data + 2 * es * (size_t)e, (const char *)a->data + es * (size_t)at(a, e), es);
      memcpy((char *)out->data + 2 * es * (size_t)e + es, (const char *)b->data + es * (size_t)at(b, e), es);
    }
    return TPU_OK;
  }
  if (!tpu_dtype_is_complex(at0)) return bad(in, "expects a complex operand", d);
  if (op == TPU_OP_COMPARE) { /* EQ / NE on both parts, denormals read as zero */
    const tpu_tensor *b = args[1];
    if (in->noperands != 2 || b->dtype != at0 || !fits(b, n, 1) || rt != TPU_PRED)
      return bad(in, "needs two complex operands of one type and a pred result", d);
    if (in->direction != TPU_CMP_EQ && in->direction != TPU_CMP_NE)
      return bad(in, "complex values compare only with EQ or NE", d);
    TPU_TRY(tpu__ew_alloc_out(in, out, d));
    for (int64_t e = 0; e < n; e++) {
      zc x = load_z(at0, a->data, at(a, e), 1), y = load_z(at0, b->data, at(b, e), 1);
      int eq = creal(x) == creal(y) && cimag(x) == cimag(y);
      ((uint8_t *)out->data)[e] = (uint8_t)(in->direction == TPU_CMP_EQ ? eq : !eq);
    }
    return TPU_OK;
  }
  if (in->noperands == 1 && unary_ok(op)) {
    int to_real = op == TPU_OP_ABS;
    if (to_real ? rt != tpu_dtype_complex_part(at0) : rt != at0) return bad(in, "result type does not fit", d);
    TPU_TRY(tpu__ew_alloc_out(in, out, d));
    const int moves = op == TPU_OP_NEGATE;
    for (int64_t e = 0; e < n; e++) {
      zc r = apply_unary(op, load_z(at0, a->data, at(a, e), !moves));
      if (!to_real) {
        store_z(rt, out->data, e, r, !moves);
      } else if (rt == TPU_F32) {
        ((float *)out->data)[e] = tpu__ew_flush32((float)creal(r));
      } else {
        ((double *)out->data)[e] = tpu__ew_flush64(creal(r));
      }
    }
    return TPU_OK;
  }
  if (in->noperands == 2 && binary_ok(op)) {
    const tpu_tensor *b = args[1];
    if (b->dtype != at0 || rt != at0 || !fits(b, n, 1)) return bad(in, "needs operands of the result's type", d);
    TPU_TRY(tpu__ew_alloc_out(in, out, d));
    for (int64_t e = 0; e < n; e++)
      store_z(rt, out->data, e, apply_binary(op, load_z(at0, a->data, at(a, e), 1), load_z(at0, b->data, at(b, e), 1)), 1);
    return TPU_OK;
  }
  return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "%s '%s': not defined on %s", tpu_op_name(op), in->name,
                  tpu_dtype_name(at0));
}

/* Complex kernel entry for the op table (real, imag, complex). */
tpu_status tpu__ref_complex(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                            tpu_diag *d) {
  (void)ip;
  return tpu__ref_complex_ew(in, args, out, d);
}
