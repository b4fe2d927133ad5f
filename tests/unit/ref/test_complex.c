/* Complex numbers on the reference interpreter: literals, real/imag/complex, elementwise
 * ops against independent closed forms, compare/select/convert, movement, reduce, dot, and
 * fft (FFT/IFFT/RFFT/IRFFT, lengths 1-16 incl. 6, 7, 12, 2-D and 3-D) against a direct DFT
 * summed in long double. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "ref_util.h"

/* A complex tensor from interleaved (re, im) pairs. */
static tpu_tensor mkz(tpu_dtype t, int rank, const int64_t *dims, const double *parts) {
  tpu_tensor x = mk(t, rank, dims, NULL);
  tpu_tensor p = x;
  p.dtype = tpu_dtype_complex_part(t);
  for (int64_t i = 0; parts && i < 2 * tpu_tensor_numel(&x); i++) tpu_tensor_set_f64(&p, i, parts[i]);
  return x;
}

static double part(const tpu_tensor *t, int64_t i, int im) {
  tpu_tensor p = *t;
  p.dtype = tpu_dtype_complex_part(t->dtype);
  return tpu_tensor_get_f64(&p, 2 * i + im);
}

/* Each part of element i within tol of (re, im). */
static void expect_z(const char *what, const tpu_tensor *t, int64_t i, double re, double im, double tol) {
  double gr = part(t, i, 0), gi = part(t, i, 1);
  if (!(fabs(gr - re) <= tol && fabs(gi - im) <= tol)) {
    fprintf(stderr, "%s[%lld]: got (%.17g, %.17g), want (%.17g, %.17g), tol %g\n", what, (long long)i, gr, gi, re, im,
            tol);
    CHECK(0);
  }
}

/* ---- literals ---- */

static void test_literals(void) {
  const char *src = "HloModule m\nENTRY e {\n"
                    "  a = c64[2] constant({(1, 2), (-3.5, 0.25)})\n"
                    "  b = c128[] constant((1e-300, -inf))\n"
                    "  c = c64[2,1] constant({ {(nan, 0)}, {(0, -0)} })\n"
                    "  ROOT t = (c64[2], c128[], c64[2,1]) tuple(a, b, c)\n}\n";
  tpu_module *m = NULL;
  tpu_diag d;
  CHECK_EQ_INT(tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d), TPU_OK);
  if (!m) return;
  char *p1 = tpu_hlo_print(m);
  CHECK(p1 && strstr(p1, "c64[2] constant({(1, 2), (-3.5, 0.25)})"));
  CHECK(p1 && strstr(p1, "c128[] constant((1e-300, -inf))"));
  CHECK(p1 && strstr(p1, "{ {(nan, 0)}, {(0, -0)} }") == NULL); /* canonical spacing */
  CHECK(p1 && strstr(p1, "{{(nan, 0)}, {(0, -0)}}"));
  tpu_module *m2 = NULL;
  CHECK_EQ_INT(tpu_hlo_parse("t2.hlo", p1, strlen(p1), &m2, &d), TPU_OK);
  char *p2 = m2 ? tpu_hlo_print(m2) : NULL;
  CHECK(p2 && !strcmp(p1, p2)); /* print(parse(x)) is a fixed point */
  tpu_tensor out;
  if (run(src, NULL, 0, &out)) {
    expect_z("lit a", &out.elems[0], 1, -3.5, 0.25, 0);
    CHECK(part(&out.elems[1], 0, 0) == 1e-300 && isinf(part(&out.elems[1], 0, 1)));
    CHECK(isnan(part(&out.elems[2], 0, 0)) && signbit(part(&out.elems[2], 1, 1)));
  }
  tpu_tensor_free(&out);
  free(p1);
  free(p2);
  tpu_module_free(m);
  tpu_module_free(m2);
  /* Malformed complex literals fail with a location. */
  const char *bad[] = {"c64[1] constant({1})", "c64[1] constant({(1 2)})", "c64[1] constant({(1, 2})",
                       "c64[1] constant({(1, x)})", "c64[] constant((1, 2, 3))"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[256];
    snprintf(text, sizeof text, "HloModule m\nENTRY e {\n  ROOT a = %s\n}\n", bad[i]);
    tpu_module *mb = NULL;
    CHECK(tpu_hlo_parse("b.hlo", text, strlen(text), &mb, &d) != TPU_OK);
    CHECK(d.line == 3 && d.col > 0);
    tpu_module_free(mb);
  }
}

/* ---- parts ---- */

static void test_parts(void) {
  int64_t dims[1] = {3};
  tpu_tensor z = mkz(TPU_C64, 1, dims, (double[]){1, 2, -3, 4.5, 0, -0.0}), out;
  const char *src = "HloModule m\nENTRY e {\n  z = c64[3] parameter(0)\n  re = f32[3] real(z)\n  im = f32[3] imag(z)\n"
                    "  c = c64[3] complex(im, re)\n  x = f32[3] real(re)\n  y = f32[3] imag(re)\n"
                    "  ROOT t = (f32[3], f32[3], c64[3], f32[3], f32[3]) tuple(re, im, c, x, y)\n}\n";
  if (run(src, &z, 1, &out)) {
    double re[3] = {1, -3, 0}, im[3] = {2, 4.5, -0.0};
    for (int i = 0; i < 3; i++) {
      CHECK(tpu_tensor_get_f64(&out.elems[0], i) == re[i]);
      CHECK(tpu_tensor_get_f64(&out.elems[1], i) == im[i]);
      expect_z("complex(im, re)", &out.elems[2], i, im[i], re[i], 0);
      CHECK(tpu_tensor_get_f64(&out.elems[3], i) == re[i]); /* real of a real: itself */
      CHECK(tpu_tensor_get_f64(&out.elems[4], i) == 0);     /* imag of a real: zeros */
    }
    CHECK(signbit(tpu_tensor_get_f64(&out.elems[1], 2))); /* bits move: -0 stays -0 */
  }
  tpu_tensor_free(&out);
  tpu_tensor_free(&z);
}

/* ---- elementwise against closed forms ---- */

typedef struct {
  const char *op;
  double (*re)(double a, double b), (*im)(double a, double b);
} unary_case;

static double exp_re(double a, double b) { return exp(a) * cos(b); }
static double exp_im(double a, double b) { return exp(a) * sin(b); }
static double log_re(double a, double b) { return log(hypot(a, b)); }
static double log_im(double a, double b) { return atan2(b, a); }
static double sin_re(double a, double b) { return sin(a) * cosh(b); }
static double sin_im(double a, double b) { return cos(a) * sinh(b); }
static double cos_re(double a, double b) { return cos(a) * cosh(b); }
static double cos_im(double a, double b) { return -sin(a) * sinh(b); }
/* tanh(a+bi) = (sinh 2a + i sin 2b) / (cosh 2a + cos 2b) */
static double tanh_re(double a, double b) { return sinh(2 * a) / (cosh(2 * a) + cos(2 * b)); }
static double tanh_im(double a, double b) { return sin(2 * b) / (cosh(2 * a) + cos(2 * b)); }
/* tan(a+bi) = (sin 2a + i sinh 2b) / (cos 2a + cosh 2b) */
static double tan_re(double a, double b) { return sin(2 * a) / (cos(2 * a) + cosh(2 * b)); }
static double tan_im(double a, double b) { return sinh(2 * b) / (cos(2 * a) + cosh(2 * b)); }
/* principal sqrt: t = sqrt((r + |a|)/2); a >= 0: (t, b/2t); a < 0: (|b|/2t, sign(b) t) (no cancellation) */
static double sqrt_re(double a, double b) {
  double t = sqrt((hypot(a, b) + fabs(a)) / 2);
  return a >= 0 ? t : fabs(b) / (2 * t);
}
static double sqrt_im(double a, double b) {
  double t = sqrt((hypot(a, b) + fabs(a)) / 2);
  return a >= 0 ? b / (2 * t) : copysign(t, b);
}
static double rsqrt_re(double a, double b) {
  double x = sqrt_re(a, b), y = sqrt_im(a, b);
  return x / (x * x + y * y);
}
static double rsqrt_im(double a, double b) {
  double x = sqrt_re(a, b), y = sqrt_im(a, b);
  return -y / (x * x + y * y);
}
static double expm1_re(double a, double b) { return exp(a) * cos(b) - 1; }
static double log1p_re(double a, double b) { return log(hypot(1 + a, b)); }
static double log1p_im(double a, double b) { return atan2(b, 1 + a); }
static double neg_re(double a, double b) { return -a; }
static double neg_im(double a, double b) { return -b; }
static double abs_re(double a, double b) { return hypot(a, b); }
static double zero(double a, double b) { return 0; }
static double sign_re(double a, double b) { return a / hypot(a, b); }
static double sign_im(double a, double b) { return b / hypot(a, b); }
/* logistic(z) = 1 / (1 + exp(-z)) */
static double logi_re(double a, double b) {
  double dr = 1 + exp(-a) * cos(b), di = -exp(-a) * sin(b);
  return dr / (dr * dr + di * di);
}
static double logi_im(double a, double b) {
  double dr = 1 + exp(-a) * cos(b), di = -exp(-a) * sin(b);
  return -di / (dr * dr + di * di);
}

static void test_unary(void) {
  const unary_case cases[] = {
      {"exponential", exp_re, exp_im}, {"log", log_re, log_im},       {"sine", sin_re, sin_im},
      {"cosine", cos_re, cos_im},      {"tanh", tanh_re, tanh_im},    {"tan", tan_re, tan_im},
      {"sqrt", sqrt_re, sqrt_im},      {"rsqrt", rsqrt_re, rsqrt_im}, {"exponential-minus-one", expm1_re, exp_im},
      {"log-plus-one", log1p_re, log1p_im}, {"negate", neg_re, neg_im}, {"sign", sign_re, sign_im},
      {"logistic", logi_re, logi_im},
  };
  const double zs[] = {0.5, -1.25, -2, 0.75, 1.5, 2.5, -0.3, -0.4, 3, -4, -1, 0.001};
  const int n = 6;
  for (int dt = 0; dt < 2; dt++) {
    tpu_dtype t = dt ? TPU_C128 : TPU_C64;
    const char *tn = dt ? "c128" : "c64", *pn = dt ? "f64" : "f32";
    double tol_rel = dt ? 1e-14 : 2e-7; /* c64: rounded once from double; c128: a few ulp */
    int64_t dims[1] = {n};
    tpu_tensor z = mkz(t, 1, dims, zs), out;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      char src[512];
      snprintf(src, sizeof src, "HloModule m\nENTRY e {\n  z = %s[6] parameter(0)\n  ROOT r = %s[6] %s(z)\n}\n", tn, tn,
               cases[k].op);
      if (!run(src, &z, 1, &out)) {
        CHECK(0);
        continue;
      }
      for (int i = 0; i < n; i++) {
        double a = part(&z, i, 0), b = part(&z, i, 1);
        double wr = cases[k].re(a, b), wi = cases[k].im(a, b);
        double tol = tol_rel * (fabs(wr) + fabs(wi) + 1e-30) + (dt ? 0 : 1e-38);
        char what[64];
        snprintf(what, sizeof what, "%s %s", tn, cases[k].op);
        expect_z(what, &out, i, wr, wi, tol);
      }
      tpu_tensor_free(&out);
    }
    /* abs -> the part type */
    char src[512];
    snprintf(src, sizeof src, "HloModule m\nENTRY e {\n  z = %s[6] parameter(0)\n  ROOT r = %s[6] abs(z)\n}\n", tn, pn);
    if (run(src, &z, 1, &out)) {
      CHECK_EQ_INT(out.dtype, tpu_dtype_complex_part(t));
      for (int i = 0; i < n; i++)
        CHECK_NEAR(tpu_tensor_get_f64(&out, i), abs_re(part(&z, i, 0), part(&z, i, 1)), tol_rel * 4);
    }
    tpu_tensor_free(&out);
    tpu_tensor_free(&z);
  }
  (void)zero;
  /* Exact corner values: |3+4i| = 5, sign(3+4i) = 0.6+0.8i (to f32), sign(0) = 0, sqrt(-4) = 2i, log(-1) = i pi. */
  int64_t d4[1] = {4};
  tpu_tensor z = mkz(TPU_C64, 1, d4, (double[]){3, 4, 0, 0, -4, 0, -1, 0}), out;
  const char *src = "HloModule m\nENTRY e {\n  z = c64[4] parameter(0)\n  a = f32[4] abs(z)\n  s = c64[4] sign(z)\n"
                    "  q = c64[4] sqrt(z)\n  l = c64[4] log(z)\n  ROOT t = (f32[4], c64[4], c64[4], c64[4]) tuple(a, s, q, l)\n}\n";
  if (run(src, &z, 1, &out)) {
    CHECK(tpu_tensor_get_f64(&out.elems[0], 0) == 5);
    expect_z("sign", &out.elems[1], 0, (float)0.6, (float)0.8, 0);
    expect_z("sign 0", &out.elems[1], 1, 0, 0, 0);
    expect_z("sqrt -4", &out.elems[2], 2, 0, 2, 0);
    expect_z("log -1", &out.elems[3], 3, 0, (float)M_PI, 0);
  }
  tpu_tensor_free(&out);
  tpu_tensor_free(&z);
}

static void test_binary(void) {
  int64_t dims[1] = {3};
  /* x = 1+2i, -3+0.5i, 2-2i ; y = 3-4i, 0.25+1i, -1-1i */
  tpu_tensor a[2] = {mkz(TPU_C128, 1, dims, (double[]){1, 2, -3, 0.5, 2, -2}),
                     mkz(TPU_C128, 1, dims, (double[]){3, -4, 0.25, 1, -1, -1})},
             out;
  const char *src = "HloModule m\nENTRY e {\n  x = c128[3] parameter(0)\n  y = c128[3] parameter(1)\n"
                    "  a = c128[3] add(x, y)\n  s = c128[3] subtract(x, y)\n  m = c128[3] multiply(x, y)\n"
                    "  d = c128[3] divide(x, y)\n  p = c128[3] power(x, y)\n"
                    "  ROOT t = (c128[3], c128[3], c128[3], c128[3], c128[3]) tuple(a, s, m, d, p)\n}\n";
  if (run(src, a, 2, &out)) {
    for (int i = 0; i < 3; i++) {
      double p = part(&a[0], i, 0), q = part(&a[0], i, 1), r = part(&a[1], i, 0), s = part(&a[1], i, 1);
      expect_z("add", &out.elems[0], i, p + r, q + s, 0);
      expect_z("sub", &out.elems[1], i, p - r, q - s, 0);
      expect_z("mul", &out.elems[2], i, p * r - q * s, p * s + q * r, 0); /* small dyadic values: exact */
      double den = r * r + s * s;
      expect_z("div", &out.elems[3], i, (p * r + q * s) / den, (q * r - p * s) / den, 1e-15);
      /* x^y = exp(y log x) */
      double lr = log(hypot(p, q)), li = atan2(q, p);
      double er = r * lr - s * li, ei = r * li + s * lr;
      expect_z("pow", &out.elems[4], i, exp(er) * cos(ei), exp(er) * sin(ei), 1e-13 * exp(er));
    }
  }
  tpu_tensor_free(&out);
  tpu_tensor_free(&a[0]);
  tpu_tensor_free(&a[1]);
  /* c64 multiply rounds each part once: (1 + 2^-20 i)(1 + 2^-20 i) = 1 - 2^-40 + 2^-19 i -> (1, 2^-19) in f32. */
  int64_t d1[1] = {1};
  tpu_tensor z = mkz(TPU_C64, 1, d1, (double[]){1, ldexp(1, -20)});
  const char *src2 = "HloModule m\nENTRY e {\n  x = c64[1] parameter(0)\n  ROOT m = c64[1] multiply(x, x)\n}\n";
  if (run(src2, &z, 1, &out)) expect_z("c64 mul", &out, 0, 1, ldexp(1, -19), 0);
  tpu_tensor_free(&out);
  tpu_tensor_free(&z);
}

static void test_compare_select_convert(void) {
  int64_t dims[1] = {3};
  tpu_tensor a[3] = {mkz(TPU_C128, 1, dims, (double[]){1, 2, 3, 4, 5, 6}),
                     mkz(TPU_C128, 1, dims, (double[]){1, 2, 3, -4, 0, 6}),
                     mk(TPU_S32, 1, dims, (double[]){7, -8, 9})},
             out;
  const char *src = "HloModule m\nENTRY e {\n  x = c128[3] parameter(0)\n  y = c128[3] parameter(1)\n  k = s32[3] parameter(2)\n"
                    "  eq = pred[3] compare(x, y), direction=EQ\n  ne = pred[3] compare(x, y), direction=NE, type=FLOAT\n"
                    "  s = c128[3] select(ne, x, y)\n  c = c64[3] convert(k)\n  w = c64[3] convert(x)\n  b = c128[3] convert(c)\n"
                    "  ROOT t = (pred[3], pred[3], c128[3], c64[3], c64[3], c128[3]) tuple(eq, ne, s, c, w, b)\n}\n";
  if (run(src, a, 3, &out)) {
    int eq[3] = {1, 0, 0};
    for (int i = 0; i < 3; i++) {
      CHECK_EQ_INT(tpu_tensor_get_i64(&out.elems[0], i), eq[i]);
      CHECK_EQ_INT(tpu_tensor_get_i64(&out.elems[1], i), !eq[i]);
      expect_z("select", &out.elems[2], i, part(eq[i] ? &a[1] : &a[0], i, 0), part(eq[i] ? &a[1] : &a[0], i, 1), 0);
      expect_z("convert s32", &out.elems[3], i, tpu_tensor_get_f64(&a[2], i), 0, 0);
      expect_z("convert c128->c64", &out.elems[4], i, part(&a[0], i, 0), part(&a[0], i, 1), 0);
      expect_z("convert c64->c128", &out.elems[5], i, tpu_tensor_get_f64(&a[2], i), 0, 0);
    }
  }
  tpu_tensor_free(&out);
  for (int i = 0; i < 3; i++) tpu_tensor_free(&a[i]);
}

/* Movement ops move 8- and 16-byte elements whole; reduce adds complex values; dot multiplies them. */
static void test_movement_reduce_dot(void) {
  int64_t dims[2] = {2, 3};
  double v[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  tpu_tensor x = mkz(TPU_C128, 2, dims, v), out;
  const char *src = "HloModule m\nadd {\n  a = c128[] parameter(0)\n  b = c128[] parameter(1)\n  ROOT s = c128[] add(a, b)\n}\n"
                    "ENTRY e {\n  x = c128[2,3] parameter(0)\n  t = c128[3,2] transpose(x), dimensions={1,0}\n"
                    "  z = c128[] constant((0.5, -0.5))\n  p = c128[3,4] pad(t, z), padding=0_0x1_1\n"
                    "  s = c128[2,2] slice(p), slice={[1:3], [1:3]}\n  c = c128[4,3] concatenate(x, x), dimensions={0}\n"
                    "  r = c128[3] reduce(x, z), dimensions={0}, to_apply=add\n"
                    "  b = c128[2,2,3] broadcast(x), dimensions={1,2}\n"
                    "  d = c128[2,2] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
                    "  ROOT o = (c128[3,4], c128[2,2], c128[4,3], c128[3], c128[2,2,3], c128[2,2]) tuple(p, s, c, r, b, d)\n}\n";
  if (run(src, &x, 1, &out)) {
    /* x[i][j] = (1 + 2(3i+j), 2 + 2(3i+j)) */
#define XR(i, j) (1.0 + 2.0 * (3 * (i) + (j)))
#define XI(i, j) (2.0 + 2.0 * (3 * (i) + (j)))
    expect_z("pad corner", &out.elems[0], 0, 0.5, -0.5, 0);
    expect_z("pad t[2][1]", &out.elems[0], 2 * 4 + 2, XR(1, 2), XI(1, 2), 0);
    expect_z("slice", &out.elems[1], 0, XR(0, 1), XI(0, 1), 0); /* p[1][1] = t[1][0] = x[0][1] */
    expect_z("concat", &out.elems[2], 3 * 3 + 2, XR(1, 2), XI(1, 2), 0);
    for (int j = 0; j < 3; j++) expect_z("reduce", &out.elems[3], j, 0.5 + XR(0, j) + XR(1, j), -0.5 + XI(0, j) + XI(1, j), 0);
    expect_z("broadcast", &out.elems[4], 6 + 4, XR(1, 1), XI(1, 1), 0);
    for (int i = 0; i < 2; i++)
      for (int k = 0; k < 2; k++) {
        double re = 0, im = 0;
        for (int j = 0; j < 3; j++) {
          re += XR(i, j) * XR(k, j) - XI(i, j) * XI(k, j);
          im += XR(i, j) * XI(k, j) + XI(i, j) * XR(k, j);
        }
        expect_z("dot", &out.elems[5], 2 * i + k, re, im, 0);
      }
#undef XR
#undef XI
  }
  tpu_tensor_free(&out);
  tpu_tensor_free(&x);
}

/* gather, scatter (complex add), dynamic-update-slice, dynamic-slice, reverse on c128; iota on c64. */
static void test_gather_scatter(void) {
  const char *src =
      "HloModule m\nadd {\n  a = c128[] parameter(0)\n  b = c128[] parameter(1)\n  ROOT s = c128[] add(a, b)\n}\n"
      "ENTRY e {\n  x = c128[4,2] parameter(0)\n  i = s32[3,1] constant({{1}, {3}, {1}})\n"
      "  u = c128[3,2] constant({{(1, 1), (2, 2)}, {(3, 3), (4, 4)}, {(5, 5), (6, 6)}})\n"
      "  sc = c128[4,2] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0}, "
      "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n"
      "  g = c128[3,2] gather(sc, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
      "index_vector_dim=1, slice_sizes={1,2}\n"
      "  k = s32[] constant(2)\n  z = s32[] constant(0)\n  up = c128[1,2] constant({{(9, -9), (8, -8)}})\n"
      "  dus = c128[4,2] dynamic-update-slice(x, up, k, z)\n  ds = c128[2,2] dynamic-slice(dus, k, z), dynamic_slice_sizes={2,2}\n"
      "  rv = c128[4,2] reverse(x), dimensions={0}\n  io = c64[3] iota(), iota_dimension=0\n"
      "  ROOT t = (c128[4,2], c128[3,2], c128[2,2], c128[4,2], c64[3]) tuple(sc, g, ds, rv, io)\n}\n";
  int64_t dims[2] = {4, 2};
  double v[16];
  for (int e = 0; e < 8; e++) v[2 * e] = e, v[2 * e + 1] = 10 * e; /* x[r][c] = e + 10e i, e = 2r + c */
  tpu_tensor x = mkz(TPU_C128, 2, dims, v), out;
  if (run(src, &x, 1, &out)) {
    double sr[8], si[8];
    for (int e = 0; e < 8; e++) sr[e] = e, si[e] = 10 * e;
    const int rows[3] = {1, 3, 1};
    for (int r = 0; r < 3; r++)
      for (int c = 0; c < 2; c++) sr[2 * rows[r] + c] += 2 * r + c + 1, si[2 * rows[r] + c] += 2 * r + c + 1;
    for (int e = 0; e < 8; e++) expect_z("scatter", &out.elems[0], e, sr[e], si[e], 0);
    for (int r = 0; r < 3; r++)
      for (int c = 0; c < 2; c++) expect_z("gather", &out.elems[1], 2 * r + c, sr[2 * rows[r] + c], si[2 * rows[r] + c], 0);
    expect_z("dynamic-slice", &out.elems[2], 0, 9, -9, 0);
    expect_z("dynamic-slice", &out.elems[2], 3, 7, 70, 0);
    for (int e = 0; e < 8; e++) expect_z("reverse", &out.elems[3], e, 2 * (3 - e / 2) + e % 2, 10 * (2 * (3 - e / 2) + e % 2), 0);
    for (int e = 0; e < 3; e++) expect_z("iota", &out.elems[4], e, e, 0, 0);
  }
  tpu_tensor_free(&out);
  tpu_tensor_free(&x);
}

/* ---- fft ---- */

/* The DFT of `in` (rank dims, transform over the last r with lengths len) in long double:
 * sign -1 forward, +1 inverse (unscaled). Interleaved parts. */
static void dft_nd(const long double *in, long double *out, int rank, const int64_t *dims, int r, int sign) {
  int64_t total = 1;
  for (int i = 0; i < rank; i++) total *= dims[i];
  int64_t tsize = 1;
  for (int i = rank - r; i < rank; i++) tsize *= dims[i];
  int64_t batch = total / tsize;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t ko = 0; ko < tsize; ko++) {
      long double sr = 0, si = 0;
      for (int64_t jo = 0; jo < tsize; jo++) {
        /* phase = sum over axes of k_a j_a / L_a */
        long double ph = 0;
        int64_t kk = ko, jj = jo;
        for (int a = rank - 1; a >= rank - r; a--) {
          int64_t L = dims[a], ka = kk % L, ja = jj % L;
          kk /= L, jj /= L;
          ph += (long double)((ka * ja) % L) / (long double)L;
        }
        long double ang = sign * 2.0L * 3.14159265358979323846264338327950288L * ph;
        long double c = cosl(ang), s = sinl(ang), xr = in[2 * (b * tsize + jo)], xi = in[2 * (b * tsize + jo) + 1];
        sr += xr * c - xi * s;
        si += xr * s + xi * c;
      }
      out[2 * (b * tsize + ko)] = sr;
      out[2 * (b * tsize + ko) + 1] = si;
    }
}

static double g_fft_worst; /* worst error seen, in units of the bound */

/* Element i of t (complex or real) against (wr, wi): c64/f32 within one ulp of f32 per part
 * plus 1e-12 of the input's L1 norm, c128/f64 within 1e-13 of the norm. */
static void expect_fft(const char *what, const tpu_tensor *t, int64_t i, long double wr, long double wi, double l1) {
  int cx = tpu_dtype_is_complex(t->dtype), wide = t->dtype == TPU_C128 || t->dtype == TPU_F64;
  double gr = cx ? part(t, i, 0) : tpu_tensor_get_f64(t, i), gi = cx ? part(t, i, 1) : 0;
  double vals[2] = {gr, gi}, want[2] = {(double)wr, (double)(cx ? wi : 0)};
  for (int k = 0; k < 2; k++) {
    double lim = wide ? 1e-13 * l1 + 1e-300 : ldexp(fabs(want[k]) > FLT_MIN ? 1 : 0, ilogb(fabs(want[k]) + 1e-300) - 23) + 1e-12 * l1;
    if (!wide && fabs(want[k]) <= FLT_MIN) lim = 1e-12 * l1 + 1e-38;
    double err = fabs(vals[k] - want[k]);
    if (err / lim > g_fft_worst) g_fft_worst = err / lim;
    if (!(err <= lim)) {
      fprintf(stderr, "%s[%lld].%s: got %.9g, want %.17g (err %.3g, bound %.3g)\n", what, (long long)i, k ? "im" : "re",
              vals[k], want[k], err, lim);
      CHECK(0);
      return;
    }
  }
}

/* Deterministic inputs in [-1, 1) with a few digits (exact in f32). */
static double val(int64_t i, int k) { return (double)((int)((i * 7919 + k * 104729 + 13) % 2001) - 1000) / 1024.0; }

/* Runs fft of `type` on an input of shape dims (complex `ct` for FFT/IFFT/IRFFT, its part
 * type for RFFT) and checks every output element against the long-double DFT. */
static void check_fft(tpu_dtype ct, const char *type, int rank, const int64_t *dims, int r, const int64_t *len) {
  const int is_r = !strcmp(type, "RFFT"), is_ir = !strcmp(type, "IRFFT"), inv = !strcmp(type, "IFFT") || is_ir;
  tpu_dtype pt = tpu_dtype_complex_part(ct);
  tpu_dtype in_t = is_r ? pt : ct, out_t = is_ir ? pt : ct;
  int64_t full[TPU_MAX_RANK], odims[TPU_MAX_RANK];
  for (int i = 0; i < rank; i++) full[i] = odims[i] = i < rank - r ? dims[i] : len[i - (rank - r)];
  if (is_r) odims[rank - 1] = len[r - 1] / 2 + 1;
  int64_t total = 1, N = 1, last = full[rank - 1], half = last / 2 + 1;
  for (int i = 0; i < rank; i++) total *= full[i];
  for (int i = 0; i < r; i++) N *= len[i];
  int64_t rows = total / (last ? last : 1);
  /* The input tensor and the full complex array the math sees. */
  tpu_tensor x = mk(in_t, rank, dims, NULL);
  tpu_tensor xp = x;
  xp.dtype = pt;
  long double *a = calloc((size_t)(2 * total), sizeof *a), *w = calloc((size_t)(2 * total), sizeof *w);
  double l1 = 0;
  int64_t nin = tpu_tensor_numel(&x);
  for (int64_t e = 0; e < nin; e++) {
    double re = val(e, 0), im = is_r ? 0 : val(e, 1);
    if (is_r) tpu_tensor_set_f64(&x, e, re);
    else tpu_tensor_set_f64(&xp, 2 * e, re), tpu_tensor_set_f64(&xp, 2 * e + 1, im);
  }
  if (!is_ir) {
    for (int64_t e = 0; e < total; e++) {
      a[2 * e] = is_r ? tpu_tensor_get_f64(&x, e) : part(&x, e, 0);
      a[2 * e + 1] = is_r ? 0 : part(&x, e, 1);
    }
  } else {
    /* Hermitian completion of the half spectrum along the last axis, after the inverse
     * along the leading axes (what numpy's irfftn does): build it by transforming the
     * leading axes of the half array first, then extend each row. */
    int64_t hd[TPU_MAX_RANK];
    for (int i = 0; i < rank; i++) hd[i] = full[i];
    hd[rank - 1] = half;
    int64_t htotal = rows * half;
    long double *h = calloc((size_t)(2 * htotal), sizeof *h), *g = calloc((size_t)(2 * htotal), sizeof *g);
    for (int64_t e = 0; e < htotal; e++) h[2 * e] = part(&x, e, 0), h[2 * e + 1] = part(&x, e, 1);
    if (r > 1) {
      /* inverse DFT over axes rank-r .. rank-2: move the last axis into the batch */
      int64_t td[TPU_MAX_RANK + 1];
      int tr = 0;
      for (int i = 0; i < rank - 1; i++) td[tr++] = hd[i];
      /* transform over axes [rank-r, rank-1) of an array laid out [..., L_{r-2}, half]: do it per column */
      int64_t inner = half, outer = htotal / half;
      int64_t tsz = 1;
      for (int i = rank - r; i < rank - 1; i++) tsz *= hd[i];
      int64_t batch = outer / tsz;
      long double *col = calloc((size_t)(2 * tsz), sizeof *col), *cres = calloc((size_t)(2 * tsz), sizeof *cres);
      for (int64_t b = 0; b < batch; b++)
        for (int64_t c = 0; c < inner; c++) {
          for (int64_t j = 0; j < tsz; j++) {
            col[2 * j] = h[2 * ((b * tsz + j) * inner + c)];
            col[2 * j + 1] = h[2 * ((b * tsz + j) * inner + c) + 1];
          }
          dft_nd(col, cres, r - 1, &hd[rank - r], r - 1, 1);
          for (int64_t j = 0; j < tsz; j++) {
            g[2 * ((b * tsz + j) * inner + c)] = cres[2 * j];
            g[2 * ((b * tsz + j) * inner + c) + 1] = cres[2 * j + 1];
          }
        }
      (void)td;
      (void)tr;
      free(col);
      free(cres);
    } else {
      memcpy(g, h, sizeof *g * (size_t)(2 * htotal));
    }
    for (int64_t row = 0; row < rows; row++)
      for (int64_t k = 0; k < last; k++) {
        long double re, im;
        if (k < half) re = g[2 * (row * half + k)], im = g[2 * (row * half + k) + 1];
        else re = g[2 * (row * half + last - k)], im = -g[2 * (row * half + last - k) + 1];
        if (k == 0 || (last % 2 == 0 && k == last / 2)) im = 0;
        a[2 * (row * last + k)] = re;
        a[2 * (row * last + k) + 1] = im;
      }
    free(h);
    free(g);
  }
  for (int64_t e = 0; e < 2 * total; e++) l1 += fabsl(a[e]);
  if (is_ir) {
    /* only the last axis is transformed here (the leading ones were done above) */
    dft_nd(a, w, rank, full, 1, 1);
  } else {
    dft_nd(a, w, rank, full, r, inv ? 1 : -1);
  }
  if (inv)
    for (int64_t e = 0; e < 2 * total; e++) w[e] /= (long double)N;
  if (is_ir) l1 /= (double)N;
  char src[1024], ds[128], os[128], ls[64];
  int n = 0, o = 0, l = 0;
  for (int i = 0; i < rank; i++) n += snprintf(ds + n, sizeof ds - (size_t)n, "%s%lld", i ? "," : "", (long long)dims[i]);
  for (int i = 0; i < rank; i++) o += snprintf(os + o, sizeof os - (size_t)o, "%s%lld", i ? "," : "", (long long)odims[i]);
  for (int i = 0; i < r; i++) l += snprintf(ls + l, sizeof ls - (size_t)l, "%s%lld", i ? "," : "", (long long)len[i]);
  snprintf(src, sizeof src, "HloModule m\nENTRY e {\n  x = %s[%s] parameter(0)\n  ROOT f = %s[%s] fft(x), fft_type=%s, fft_length={%s}\n}\n",
           tpu_dtype_name(in_t), ds, tpu_dtype_name(out_t), os, type, ls);
  tpu_tensor out;
  char what[320];
  snprintf(what, sizeof what, "%s %s[%s] len {%s}", type, tpu_dtype_name(in_t), ds, ls);
  if (run(src, &x, 1, &out)) {
    CHECK_EQ_INT(out.dtype, out_t);
    int64_t on = tpu_tensor_numel(&out), ol = odims[rank - 1];
    for (int64_t e = 0; e < on; e++) {
      int64_t row = e / (ol ? ol : 1), k = e % (ol ? ol : 1);
      int64_t src_e = row * last + k;
      expect_fft(what, &out, e, w[2 * src_e], w[2 * src_e + 1], l1);
    }
  } else {
    CHECK(0);
  }
  tpu_tensor_free(&out);
  tpu_tensor_free(&x);
  free(a);
  free(w);
}

static void test_fft(void) {
  static const int64_t lens[] = {1, 2, 3, 5, 6, 7, 8, 9, 12, 16};
  for (int ti = 0; ti < 2; ti++) {
    tpu_dtype ct = ti ? TPU_C128 : TPU_C64;
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
      int64_t L = lens[i];
      int64_t cdims[2] = {3, L}, rdims[2] = {3, L}, hdims[2] = {3, L / 2 + 1};
      check_fft(ct, "FFT", 2, cdims, 1, &L);
      check_fft(ct, "IFFT", 2, cdims, 1, &L);
      check_fft(ct, "RFFT", 2, rdims, 1, &L);
      check_fft(ct, "IRFFT", 2, hdims, 1, &L);
    }
    /* 2-D and 3-D transforms, with a batch dim */
    int64_t d2[3] = {2, 6, 5}, l2[2] = {6, 5};
    check_fft(ct, "FFT", 3, d2, 2, l2);
    check_fft(ct, "IFFT", 3, d2, 2, l2);
    int64_t d3[3] = {3, 4, 7}, l3[3] = {3, 4, 7};
    check_fft(ct, "FFT", 3, d3, 3, l3);
    check_fft(ct, "IFFT", 3, d3, 3, l3);
    int64_t rd2[3] = {2, 6, 12}, rl2[2] = {6, 12};
    check_fft(ct, "RFFT", 3, rd2, 2, rl2);
    int64_t hd2[3] = {2, 6, 4}, hl2[2] = {6, 7};
    check_fft(ct, "IRFFT", 3, hd2, 2, hl2);
    int64_t hd3[3] = {3, 4, 5}, hl3[3] = {3, 4, 8};
    check_fft(ct, "IRFFT", 3, hd3, 3, hl3);
    int64_t rd3[3] = {2, 3, 7}, rl3[3] = {2, 3, 7};
    check_fft(ct, "RFFT", 3, rd3, 3, rl3);
  }
  /* A longer prime and a power of two with many stages. */
  int64_t p[2] = {2, 97}, lp = 97, q[2] = {1, 1024}, lq = 1024;
  check_fft(TPU_C64, "FFT", 2, p, 1, &lp);
  check_fft(TPU_C64, "IFFT", 2, q, 1, &lq);
  fprintf(stderr, "fft: worst error %.3f of the bound\n", g_fft_worst);
}

/* IRFFT's result does not depend on the imaginary parts of bin 0 and (even lengths) bin n/2;
 * RFFT -> IRFFT is the identity. */
static void test_irfft_projection(void) {
  int64_t dims[1] = {4};
  tpu_tensor h = mkz(TPU_C64, 1, dims, (double[]){1, 5, 2, 3, -1, 1, 0.5, -7}), out;
  const char *src = "HloModule m\nENTRY e {\n  h = c64[4] parameter(0)\n  ROOT x = f32[6] fft(h), fft_type=IRFFT, fft_length={6}\n}\n";
  tpu_tensor h0 = mkz(TPU_C64, 1, dims, (double[]){1, 0, 2, 3, -1, 1, 0.5, 0}), out0;
  if (run(src, &h, 1, &out) && run(src, &h0, 1, &out0))
    for (int i = 0; i < 6; i++) CHECK(tpu_tensor_get_f64(&out, i) == tpu_tensor_get_f64(&out0, i));
  tpu_tensor_free(&out);
  tpu_tensor_free(&out0);
  tpu_tensor_free(&h);
  tpu_tensor_free(&h0);
  int64_t d7[1] = {7};
  double v[7] = {0.5, -1, 2, 0.25, 3, -2.5, 1};
  tpu_tensor x = mk(TPU_F64, 1, d7, v);
  const char *rt = "HloModule m\nENTRY e {\n  x = f64[7] parameter(0)\n  h = c128[4] fft(x), fft_type=RFFT, fft_length={7}\n"
                   "  ROOT y = f64[7] fft(h), fft_type=IRFFT, fft_length={7}\n}\n";
  if (run(rt, &x, 1, &out))
    for (int i = 0; i < 7; i++) CHECK_NEAR(tpu_tensor_get_f64(&out, i), v[i], 1e-15);
  tpu_tensor_free(&out);
  tpu_tensor_free(&x);
}

int main(void) {
  test_literals();
  test_parts();
  test_unary();
  test_binary();
  test_compare_select_convert();
  test_movement_reduce_dot();
  test_gather_scatter();
  test_fft();
  test_irfft_projection();
  CHECK_DONE();
}
