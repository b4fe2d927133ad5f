/* Elementwise reference kernels (ref/elementwise.c) on floats: arithmetic, rounding, transcendentals, denormals. */
#include "elementwise_util.h"

/* Expected values below come from JAX 0.10.2 on CPU (jax.jit of lax ops, or StableHLO
 * compiled by the CPU client for ops JAX does not emit, e.g. integer power). */

static void test_float_binary(void) {
  const float nan = NAN, inf = INFINITY;
  const float a[] = {nan, 1.0f, -0.0f, 0.0f, 3.0f, -2.0f}, b[] = {1.0f, nan, 0.0f, -0.0f, 2.0f, -5.0f};
  tpu_tensor r = bin("f32", "f32", "maximum", "", mk(TPU_F32, 6, a), mk(TPU_F32, 6, b));
  float *f = r.data;
  CHECK(isnan(f[0]) && isnan(f[1]));
  CHECK_F32BITS(r, fbits(f[0]), fbits(f[1]), 0x0u, 0x0u, fbits(3.0f), fbits(-2.0f));
  tpu_tensor_free(&r);
  r = bin("f32", "f32", "minimum", "", mk(TPU_F32, 6, a), mk(TPU_F32, 6, b));
  f = r.data;
  CHECK(isnan(f[0]) && isnan(f[1]));
  CHECK_F32BITS(r, fbits(f[0]), fbits(f[1]), 0x80000000u, 0x80000000u, fbits(2.0f), fbits(-5.0f));
  tpu_tensor_free(&r);
  const float ra[] = {5.5f, -5.5f, 5.5f, 1.0f, inf, 0.0f}, rb[] = {2, 2, -2, 0, 1, inf};
  r = bin("f32", "f32", "remainder", "", mk(TPU_F32, 6, ra), mk(TPU_F32, 6, rb));
  f = r.data;
  CHECK(f[0] == 1.5f && f[1] == -1.5f && f[2] == 1.5f && isnan(f[3]) && isnan(f[4]) && f[5] == 0.0f);
  tpu_tensor_free(&r);
  const float pa[] = {nan, 0, -8, 2, -2, 0, 1, 2.0f, 10.0f, 0.5f};
  const float pb[] = {0, -1, 1.0f / 3, 0.5f, 0.5f, 0, nan, 0.5f, -2.0f, 3.3f};
  r = bin("f32", "f32", "power", "", mk(TPU_F32, 10, pa), mk(TPU_F32, 10, pb));
  f = r.data;
  CHECK(f[0] == 1 && f[1] == inf && isnan(f[2]) && f[3] == 0x1.6a09e6p+0f && isnan(f[4]) && f[5] == 1 && f[6] == 1);
  CHECK(ulps32(f[7], 0x1.6a09e6p+0f) <= 1 && ulps32(f[8], 0x1.47ae14p-7f) <= 1 && ulps32(f[9], 0x1.9fdf8cp-4f) <= 1);
  tpu_tensor_free(&r);
  const float ya[] = {0.0f, -0.0f, 1, 0.0f, 1.0f, -2.0f, 3.0f}, xa[] = {-0.0f, -0.0f, 0, 0.0f, 2.0f, 0.5f, -4.0f};
  r = bin("f32", "f32", "atan2", "", mk(TPU_F32, 7, ya), mk(TPU_F32, 7, xa));
  f = r.data;
  CHECK(f[0] == 0x1.921fb6p+1f && f[1] == -0x1.921fb6p+1f && f[2] == 0x1.921fb6p+0f && fbits(f[3]) == 0);
  CHECK(ulps32(f[4], 0x1.dac67p-2f) <= 1 && ulps32(f[5], -0x1.5368cap+0f) <= 1 && ulps32(f[6], 0x1.3fc178p+1f) <= 1);
  tpu_tensor_free(&r);
  const double da[] = {1.0, -0.0, 1e300}, db[] = {3.0, 2.0, 1e10};
  r = bin("f64", "f64", "divide", "", mk(TPU_F64, 3, da), mk(TPU_F64, 3, db));
  CHECK_F64S(r, 1.0 / 3.0, -0.0, 1e290);
  tpu_tensor_free(&r);
}

static void test_float_rounding_unary(void) {
  const float nan = NAN, inf = INFINITY;
  const float x[] = {-0.0f, 0.0f, nan, -3.5f, 2.5f, inf, -inf, 0.5f, -0.5f, 1.5f, -2.5f};
  struct {
    const char *op;
    uint32_t want[11];
  } cases[] = {
      {"sign", {0x80000000, 0, 0, 0xbf800000, 0x3f800000, 0x3f800000, 0xbf800000, 0x3f800000, 0xbf800000, 0x3f800000, 0xbf800000}},
      {"round-nearest-afz", {0x80000000, 0, 0, 0xc0800000, 0x40400000, 0x7f800000, 0xff800000, 0x3f800000, 0xbf800000, 0x40000000, 0xc0400000}},
      {"round-nearest-even", {0x80000000, 0, 0, 0xc0800000, 0x40000000, 0x7f800000, 0xff800000, 0, 0x80000000, 0x40000000, 0xc0000000}},
      {"floor", {0x80000000, 0, 0, 0xc0800000, 0x40000000, 0x7f800000, 0xff800000, 0, 0xbf800000, 0x3f800000, 0xc0400000}},
      {"ceil", {0x80000000, 0, 0, 0xc0400000, 0x40400000, 0x7f800000, 0xff800000, 0x3f800000, 0x80000000, 0x40000000, 0xc0000000}},
      {"abs", {0, 0, 0, 0x40600000, 0x40200000, 0x7f800000, 0x7f800000, 0x3f000000, 0x3f000000, 0x3fc00000, 0x40200000}},
      {"negate", {0, 0x80000000, 0, 0x40600000, 0xc0200000, 0xff800000, 0x7f800000, 0xbf000000, 0x3f000000, 0xbfc00000, 0x40200000}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    tpu_tensor r = un("f32", "f32", cases[k].op, "", mk(TPU_F32, 11, x));
    const float *f = r.data;
    for (int i = 0; i < 11; i++) {
      if (i == 2) {
        CHECK(isnan(f[i]));
        continue;
      }
      if (fbits(f[i]) != cases[k].want[i]) fprintf(stderr, "%s[%d]\n", cases[k].op, i);
      CHECK_EQ_INT(fbits(f[i]), cases[k].want[i]);
    }
    tpu_tensor_free(&r);
  }
  /* sign keeps a NaN's sign bit; abs clears it. */
  const float nn[] = {-nan};
  tpu_tensor r = un("f32", "f32", "sign", "", mk(TPU_F32, 1, nn));
  CHECK(isnan(((float *)r.data)[0]) && signbit(((float *)r.data)[0]));
  tpu_tensor_free(&r);
}

/* Transcendental functions: XLA uses its own approximations, tpusim uses libm; they agree
 * within a few ulps (measured max 5 ulps for f32 over 600k points, 1 bf16 ulp). */
static void test_transcendental(void) {
  const float x[] = {-3.5f, -1.25f, -0.3f, 0.0f, 0.1f, 0.7f, 1.5f, 4.0f, 20.0f};
  const float xp[] = {0.001f, 0.3f, 1.0f, 2.5f, 10.0f, 1e6f};
  struct {
    const char *op;
    int pos;
    float want[9];
  } cases[] = {
      {"exponential", 0, {0x1.eec102p-6f, 0x1.256184p-2f, 0x1.7b4c86p-1f, 1.0f, 0x1.1aec7cp+0f, 0x1.01c2a6p+1f, 0x1.1ed3fep+2f, 0x1.b4c904p+5f, 0x1.ceb088p+28f}},
      {"exponential-minus-one", 0, {-0x1.f089f8p-1f, -0x1.6d4f3ep-1f, -0x1.0966f2p-2f, 0.0f, 0x1.aec7b0p-4f, 0x1.03854cp+0f, 0x1.bda7fcp+1f, 0x1.acc904p+5f, 0x1.ceb088p+28f}},
      {"log", 1, {-0x1.ba18aap+2f, -0x1.34379p+0f, 0.0f, 0x1.d5241p-1f, 0x1.26bb1cp+1f, 0x1.ba18aap+3f}},
      {"log-plus-one", 1, {0x1.060356p-10f, 0x1.0ca938p-2f, 0x1.62e43p-1f, 0x1.40b514p+0f, 0x1.32ee3cp+1f, 0x1.ba18acp+3f}},
      {"sqrt", 1, {0x1.030dc6p-5f, 0x1.186f18p-1f, 1.0f, 0x1.94c584p+0f, 0x1.94c584p+1f, 0x1.f4p+9f}},
      {"rsqrt", 1, {0x1.f9f6e4p+4f, 0x1.d363d0p+0f, 1.0f, 0x1.43d136p-1f, 0x1.43d136p-2f, 0x1.0624dep-10f}},
      {"cbrt", 0, {-0x1.84aef2p+0f, -0x1.13c484p+0f, -0x1.56bfeap-1f, 0.0f, 0x1.db4c78p-2f, 0x1.c69b5ap-1f, 0x1.250bfep+0f, 0x1.965feap+0f, 0x1.5b720ap+1f}},
      {"tanh", 0, {-0x1.ff112ep-1f, -0x1.b2523cp-1f, -0x1.2a4ddap-2f, 0.0f, 0x1.983d76p-4f, 0x1.356fb2p-1f, 0x1.cf6f96p-1f, 0x1.ffa814p-1f, 1.0f}},
      {"logistic", 0, {0x1.e04068p-6f, 0x1.c81702p-3f, 0x1.b3c558p-2f, 0.5f, 0x1.0cca12p-1f, 0x1.561cb4p-1f, 0x1.a2991ep-1f, 0x1.f6ca82p-1f, 1.0f}},
      {"sine", 0, {0x1.6733b8p-2f, -0x1.e5e150p-1f, -0x1.2e9cdap-2f, 0.0f, 0x1.98eaeep-4f, 0x1.49d6e6p-1f, 0x1.feb7aap-1f, -0x1.837b9ep-1f, 0x1.d36d90p-1f}},
      {"cosine", 0, {-0x1.df774p-1f, 0x1.42e3dep-2f, 0x1.e921dep-1f, 1.0f, 0x1.fd713p-1f, 0x1.879966p-1f, 0x1.21bd54p-4f, -0x1.4eaa6p-1f, 0x1.a1e044p-2f}},
      {"tan", 0, {-0x1.7f936p-2f, -0x1.813994p+1f, -0x1.3cc2a6p-2f, 0.0f, 0x1.9af888p-4f, 0x1.af406cp-1f, 0x1.c33ed6p+3f, 0x1.2866fap+0f, 0x1.1e5b4ap+1f}},
      {"erf", 0, {-0x1.ffffe6p-1f, -0x1.d8865cp-1f, -0x1.50838cp-2f, 0.0f, 0x1.cca5eap-4f, 0x1.5b08cp-1f, 0x1.eea552p-1f, 1.0f, 1.0f}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    int n = cases[k].pos ? 6 : 9;
    tpu_tensor r = un("f32", "f32", cases[k].op, "", mk(TPU_F32, n, cases[k].pos ? xp : x));
    const float *f = r.data;
    for (int i = 0; i < n; i++) {
      long u = ulps32(f[i], cases[k].want[i]);
      if (u > 6) fprintf(stderr, "%s(%g) = %a, JAX %a (%ld ulps)\n", cases[k].op, (double)x[i], (double)f[i],
                         (double)cases[k].want[i], u);
      CHECK(u <= 6);
    }
    tpu_tensor_free(&r);
  }
  /* f64 in double. */
  double xd[9];
  for (int i = 0; i < 9; i++) xd[i] = x[i];
  const double want_log[9] = {0x1.e040681ccad94p-6, 0x1.c81702a88e0d5p-3, 0x1.b3c557116206bp-2, 0.5, 0x1.0cca1275cc234p-1,
                              0x1.561cb51365357p-1, 0x1.a2991f2a97914p-1, 0x1.f6ca82f0de1eap-1, 0x1.ffffffee4b79ap-1};
  tpu_tensor r = un("f64", "f64", "logistic", "", mk(TPU_F64, 9, xd));
  for (int i = 0; i < 9; i++) CHECK_NEAR(((double *)r.data)[i], want_log[i], 4e-16);
  tpu_tensor_free(&r);
  const double want_exp[9] = {0x1.eec1018e4ff66p-6, 0x1.25618372a584fp-2, 0x1.7b4c86505ba56p-1, 1.0, 0x1.1aec7b3cb2c38p+0,
                              0x1.01c2a5dedb440p+1, 0x1.1ed3fe64fc541p+2, 0x1.b4c902e273a58p+5, 0x1.ceb088b68e804p+28};
  r = un("f64", "f64", "exponential", "", mk(TPU_F64, 9, xd));
  for (int i = 0; i < 9; i++) CHECK_NEAR(((double *)r.data)[i] / want_exp[i], 1.0, 1e-15);
  tpu_tensor_free(&r);
  /* bf16: computed in f32, rounded once. */
  const uint16_t want_bf[4][9] = {
      {0x3cf7, 0x3e93, 0x3f3e, 0x3f80, 0x3f8d, 0x4001, 0x408f, 0x425a, 0x4de7},
      {0xbf80, 0xbf59, 0xbe96, 0x0000, 0x3dcc, 0x3f1b, 0x3f68, 0x3f80, 0x3f80},
      {0x3cf0, 0x3e64, 0x3eda, 0x3f00, 0x3f06, 0x3f2b, 0x3f51, 0x3f7b, 0x3f80},
      {0xffc0, 0xffc0, 0xbeb7, 0x0000, 0x3dc3, 0x3f08, 0x3f6b, 0x3fce, 0x4043}};
  const char *bops[4] = {"exponential", "tanh", "logistic", "log-plus-one"};
  for (int k = 0; k < 4; k++) {
    r = un("bf16", "bf16", bops[k], "", mk_bf16(9, x));
    const tpu_bf16 *b = r.data;
    for (int i = 0; i < 9; i++) {
      if (want_bf[k][i] == 0xffc0) {
        CHECK(isnan(tpu_bf16_to_f32(b[i])));
        continue;
      }
      int dd = (int)b[i].bits - (int)want_bf[k][i];
      CHECK(dd >= -1 && dd <= 1);
    }
    tpu_tensor_free(&r);
  }
}

static void test_low_precision_arith(void) {
  /* bf16: the f32 sum is rounded once (1 + 2^-8 + 2^-9 -> 1 + 2^-7; 1 + 2^-8 ties to 1). */
  const float a[] = {1.0f, 1.0f, 256.0f}, b[] = {0.005859375f, 0.00390625f, 1.0f};
  tpu_tensor r = bin("bf16", "bf16", "add", "", mk_bf16(3, a), mk_bf16(3, b));
  CHECK_F64S(r, 1.0078125, 1.0, 256.0);
  tpu_tensor_free(&r);
  /* f16 keeps subnormal results (6e-8 + 6e-8, 6e-5 * 1e-3); JAX gives bits 0x2 and 0x1. */
  const uint16_t h[] = {0x0001, 0x03ef, 0x068e}, g[] = {0x0001, 0x1419, 0x068e};
  r = bin("f16", "f16", "add", "", mk_f16(3, h), mk_f16(3, g));
  CHECK_EQ_INT(((uint16_t *)r.data)[0], 0x2);
  CHECK_EQ_INT(((uint16_t *)r.data)[1], 0x1458);
  tpu_tensor_free(&r);
  r = bin("f16", "f16", "multiply", "", mk_f16(3, h), mk_f16(3, g));
  CHECK_EQ_INT(((uint16_t *)r.data)[0], 0x0);
  CHECK_EQ_INT(((uint16_t *)r.data)[1], 0x1);
  tpu_tensor_free(&r);
}

static void test_denormals(void) {
  /* XLA on CPU flushes f32/f64 denormals in arithmetic and FLOAT compares, not in bit moves. */
  const float a[] = {1e-40f, 1e-20f, 1e-38f, -1e-40f}, b[] = {0.0f, 1e-20f, 0.5f, 0.0f};
  tpu_tensor r = bin("f32", "f32", "add", "", mk(TPU_F32, 4, a), mk(TPU_F32, 4, b));
  CHECK_F32BITS(r, 0x0u, 0x1ebce508u, 0x3f000000u, 0x0u); /* -0 + +0 = +0 */
  tpu_tensor_free(&r);
  r = bin("f32", "f32", "multiply", "", mk(TPU_F32, 4, a), mk(TPU_F32, 4, b));
  CHECK_F32BITS(r, 0x0u, 0x0u, 0x0u, 0x80000000u);
  tpu_tensor_free(&r);
  r = bin("f32", "pred", "compare", ", direction=GT", mk(TPU_F32, 4, a), mk(TPU_F32, 4, b));
  CHECK_I64S(r, 0, 0, 0, 0);
  tpu_tensor_free(&r);
  r = bin("f32", "pred", "compare", ", direction=GT, type=TOTALORDER", mk(TPU_F32, 4, a), mk(TPU_F32, 4, b));
  CHECK_I64S(r, 1, 0, 0, 0);
  tpu_tensor_free(&r);
  r = un("f32", "f32", "abs", "", mk(TPU_F32, 4, a));
  CHECK_F32BITS(r, 0x116c2u, fbits(1e-20f), fbits(1e-38f), 0x116c2u);
  tpu_tensor_free(&r);
  r = un("f32", "f32", "floor", "", mk(TPU_F32, 4, a));
  CHECK_F32BITS(r, 0x0u, 0x0u, 0x0u, 0x80000000u);
  tpu_tensor_free(&r);
  r = un("f32", "f64", "convert", "", mk(TPU_F32, 4, a));
  CHECK_F64S(r, 0.0, (double)1e-20f, 0.0 /* 1e-38 is below FLT_MIN */, -0.0);
  CHECK(signbit(((double *)r.data)[3]));
  tpu_tensor_free(&r);
  const float c[] = {1e-40f, -1e-40f, 1.1754942e-38f};
  r = un("f32", "bf16", "convert", "", mk(TPU_F32, 3, c));
  CHECK_EQ_INT(((uint16_t *)r.data)[0], 0x0001);
  CHECK_EQ_INT(((uint16_t *)r.data)[1], 0x8001);
  CHECK_EQ_INT(((uint16_t *)r.data)[2], 0x0080);
  tpu_tensor_free(&r);
  r = un("f32", "pred", "convert", "", mk(TPU_F32, 3, c));
  CHECK_I64S(r, 0, 0, 0);
  tpu_tensor_free(&r);
}

int main(void) {
  test_float_binary();
  test_float_rounding_unary();
  test_transcendental();
  test_low_precision_arith();
  test_denormals();
  CHECK_DONE();
}
