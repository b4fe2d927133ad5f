/* Elementwise reference kernels (ref/elementwise_convert.c): convert, bitcast-convert, reduce-precision, is-finite. */
#include "elementwise_util.h"

/* Expected values below come from JAX 0.10.2 on CPU (jax.jit of lax ops, or StableHLO
 * compiled by the CPU client for ops JAX does not emit, e.g. integer power). */

static void test_convert_float_to_int(void) {
  const float nan = NAN, inf = INFINITY;
  const float x[] = {nan, inf, -inf, 3e9f, -3e9f, 2.9f, -2.9f, -0.5f, 255.7f, 256, -129, 1e20f, -1e20f, 2147483520.0f};
  struct {
    const char *ty;
    int64_t want[14];
  } cases[] = {
      {"s8", {0, 127, -128, 127, -128, 2, -2, 0, 127, 127, -128, 127, -128, 127}},
      {"u8", {0, 255, 0, 255, 0, 2, 0, 0, 255, 255, 0, 255, 0, 255}},
      {"s16", {0, 32767, -32768, 32767, -32768, 2, -2, 0, 255, 256, -129, 32767, -32768, 32767}},
      {"s32", {0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, 2, -2, 0, 255, 256, -129, INT32_MAX, INT32_MIN, 2147483520}},
      {"u32", {0, 4294967295ll, 0, 3000000000ll, 0, 2, 0, 0, 255, 256, 0, 4294967295ll, 0, 2147483520}},
      {"s64", {0, INT64_MAX, INT64_MIN, 3000000000ll, -3000000000ll, 2, -2, 0, 255, 256, -129, INT64_MAX, INT64_MIN, 2147483520}},
      {"u64", {0, -1 /* UINT64_MAX */, 0, 3000000000ll, 0, 2, 0, 0, 255, 256, 0, -1, 0, 2147483520}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    tpu_tensor r = un("f32", cases[k].ty, "convert", "", mk(TPU_F32, 14, x));
    for (int i = 0; i < 14; i++) {
      if (tpu_tensor_get_i64(&r, i) != cases[k].want[i]) fprintf(stderr, "f32->%s [%d]\n", cases[k].ty, i);
      CHECK_EQ_INT(tpu_tensor_get_i64(&r, i), cases[k].want[i]);
    }
    tpu_tensor_free(&r);
  }
  const double xd[] = {nan, 9.3e18, -9.3e18, 1.9e19, -1.0};
  tpu_tensor r = un("f64", "s64", "convert", "", mk(TPU_F64, 5, xd));
  CHECK_I64S(r, 0, INT64_MAX, INT64_MIN, INT64_MAX, -1);
  tpu_tensor_free(&r);
  r = un("f64", "u64", "convert", "", mk(TPU_F64, 5, xd));
  CHECK_U64S(r, 0, 9300000000000000000ull, 0, UINT64_MAX, 0);
  tpu_tensor_free(&r);
  r = un("f64", "s32", "convert", "", mk(TPU_F64, 5, xd));
  CHECK_I64S(r, 0, INT32_MAX, INT32_MIN, INT32_MAX, -1);
  tpu_tensor_free(&r);
  const float xb[] = {nan, 3e9f, -300, 70000};
  r = un("bf16", "s32", "convert", "", mk_bf16(4, xb));
  CHECK_I64S(r, 0, INT32_MAX, -300, 70144);
  tpu_tensor_free(&r);
  r = un("bf16", "u16", "convert", "", mk_bf16(4, xb));
  CHECK_I64S(r, 0, 65535, 0, 65535);
  tpu_tensor_free(&r);
  r = un("bf16", "pred", "convert", "", mk_bf16(4, xb));
  CHECK_I64S(r, 1, 1, 1, 1);
  tpu_tensor_free(&r);
}

static void test_convert_to_float(void) {
  /* Integer -> bf16 goes through f32 (two roundings), as XLA on CPU does. */
  const int32_t v[] = {(1 << 24) + (1 << 16) + 1, (1 << 24) + (1 << 16), INT32_MAX, -((1 << 24) + (1 << 16) + 1), 16777217};
  tpu_tensor r = un("s32", "bf16", "convert", "", mk(TPU_S32, 5, v));
  CHECK_F64S(r, 16777216.0, 16777216.0, 2147483648.0, -16777216.0, 16777216.0);
  tpu_tensor_free(&r);
  const int32_t h[] = {65519, 65520, 2049, 2051, 100000};
  r = un("s32", "f16", "convert", "", mk(TPU_S32, 5, h));
  CHECK_F64S(r, 65504.0, INFINITY, 2048.0, 2052.0, INFINITY);
  tpu_tensor_free(&r);
  const int64_t w[] = {(1ll << 53) + 1, (1ll << 60) + (1ll << 36) + 1, ((1ll << 24) + (1ll << 16) + 1) << 30};
  r = un("s64", "f32", "convert", "", mk(TPU_S64, 3, w));
  CHECK_F64S(r, 9007199254740992.0, 1.1529216420458004e+18, 1.808476725365965e+16);
  tpu_tensor_free(&r);
  r = un("s64", "bf16", "convert", "", mk(TPU_S64, 3, w));
  CHECK_F64S(r, 9007199254740992.0, 1.152921504606847e+18, 1.8014398509481984e+16);
  tpu_tensor_free(&r);
  r = un("s64", "f64", "convert", "", mk(TPU_S64, 3, w));
  CHECK_F64S(r, 9007199254740992.0, 1.1529215733263237e+18, 1.808476832740147e+16);
  tpu_tensor_free(&r);
  const uint64_t u[] = {UINT64_MAX, (1ull << 63) + 1};
  r = un("u64", "f32", "convert", "", mk(TPU_U64, 2, u));
  CHECK_F64S(r, 1.8446744073709552e+19, 9.223372036854776e+18);
  tpu_tensor_free(&r);
  /* f64 -> bf16/f16 also round via f32. */
  const double d[] = {1 + 0x1p-8 + 0x1p-30, 1 + 0x1p-11 + 0x1p-40};
  r = un("f64", "bf16", "convert", "", mk(TPU_F64, 2, d));
  CHECK_F64S(r, 1.0, 1.0);
  tpu_tensor_free(&r);
  r = un("f64", "f16", "convert", "", mk(TPU_F64, 2, d));
  CHECK_F64S(r, 1.00390625, 1.0);
  tpu_tensor_free(&r);
  const float f[] = {1e-6f, 6e-8f, 2.98e-8f, 65519, 65520, NAN, -2.5f};
  r = un("f32", "f16", "convert", "", mk(TPU_F32, 7, f));
  CHECK_F64S(r, 1.0132789611816406e-06, 5.960464477539063e-08, 0.0, 65504.0, INFINITY);
  CHECK(isnan(tpu_tensor_get_f64(&r, 5)) && tpu_tensor_get_f64(&r, 6) == -2.5);
  tpu_tensor_free(&r);
  const uint8_t p[] = {0, 1, 1};
  r = un("pred", "f32", "convert", "", mk(TPU_PRED, 3, p));
  CHECK_F64S(r, 0.0, 1.0, 1.0);
  tpu_tensor_free(&r);
  const int32_t s[] = {0, -5, 7};
  r = un("s32", "pred", "convert", "", mk(TPU_S32, 3, s));
  CHECK_I64S(r, 0, 1, 1);
  tpu_tensor_free(&r);
  r = un("s32", "u8", "convert", "", mk(TPU_S32, 3, s));
  CHECK_I64S(r, 0, 251, 7);
  tpu_tensor_free(&r);
  const uint32_t big[] = {4294967295u};
  r = un("u32", "s64", "convert", "", mk(TPU_U32, 1, big));
  CHECK_I64S(r, 4294967295ll);
  tpu_tensor_free(&r);
  r = un("u32", "f64", "convert", "", mk(TPU_U32, 1, big));
  CHECK_F64S(r, 4294967295.0);
  tpu_tensor_free(&r);
  const uint16_t hb[] = {0x0001, 0x7bff};
  r = un("f16", "bf16", "convert", "", mk_f16(2, hb));
  CHECK_F64S(r, 5.9604644775390625e-08, 65536.0);
  tpu_tensor_free(&r);
}

static void test_bitcast_convert(void) {
  const float f[] = {1.0f, -2.0f};
  tpu_tensor r = un("f32", "s32", "bitcast-convert", "", mk(TPU_F32, 2, f));
  CHECK_I64S(r, 0x3f800000, (int32_t)0xc0000000);
  tpu_tensor_free(&r);
  /* f32[2] -> u8[2,4]: the new minor dim holds the bytes, least significant first. */
  const char *h = "HloModule t\nENTRY e {\n  a = f32[2] parameter(0)\n  ROOT r = u8[2,4] bitcast-convert(a)\n}\n";
  tpu_tensor args[1] = {mk(TPU_F32, 2, f)};
  r = run_ok(h, args, 1);
  CHECK_I64S(r, 0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0);
  tpu_tensor_free(&r);
  const char *h2 = "HloModule t\nENTRY e {\n  a = u16[2,2] parameter(0)\n  ROOT r = f32[2] bitcast-convert(a)\n}\n";
  const uint16_t u[] = {0x0000, 0x3f80, 0x0000, 0xc000};
  int64_t dims[2] = {2, 2};
  tpu_tensor_alloc(&args[0], TPU_U16, 2, dims, NULL);
  memcpy(args[0].data, u, sizeof u);
  r = run_ok(h2, args, 1);
  CHECK_F64S(r, 1.0, -2.0);
  tpu_tensor_free(&r);
  /* Byte counts that disagree are an error at the instruction, not a crash. */
  const char *h3 = "HloModule t\nENTRY e {\n  a = f32[2] parameter(0)\n  ROOT r = u8[2,3] bitcast-convert(a)\n}\n";
  args[0] = mk(TPU_F32, 2, f);
  tpu_diag d;
  memset(&d, 0, sizeof d);
  CHECK_EQ_INT(run_prog(h3, args, 1, &r, &d), TPU_ERR_INVALID);
  CHECK_EQ_INT(d.line, 4);
  CHECK(r.data == NULL);
}

static void test_reduce_precision(void) {
  const float nan = NAN, inf = INFINITY;
  const float x[] = {1e-6f, 6.2e-5f, 6.1e-5f, 65504, 65519, 65520, 1e10f, nan, inf, 1.0009765625f, 1.00048828125f,
                     1.00146484375f, 3.14159f, -0.0f, 1e-40f};
  tpu_tensor r = un("f32", "f32", "reduce-precision", ", exponent_bits=5, mantissa_bits=10", mk(TPU_F32, 15, x));
  const float *f = r.data;
  const double w1[] = {0.0, 6.198883056640625e-05, 0.0, 65504.0, 65504.0, INFINITY, INFINITY, 0, INFINITY,
                       1.0009765625, 1.0, 1.001953125, 3.140625, -0.0, 0.0};
  for (int i = 0; i < 15; i++)
    if (i != 7) CHECK(f[i] == w1[i]);
  CHECK(isnan(f[7]) && signbit(f[13]));
  tpu_tensor_free(&r);
  r = un("f32", "f32", "reduce-precision", ", exponent_bits=8, mantissa_bits=7", mk(TPU_F32, 15, x));
  f = r.data;
  const double w2[] = {9.98377799987793e-07, 6.198883056640625e-05, 6.103515625e-05, 65536, 65536, 65536, 9999220736.0,
                       0, INFINITY, 1, 1, 1, 3.140625, -0.0, 9.183549615799121e-41};
  for (int i = 0; i < 15; i++)
    if (i != 7) CHECK(f[i] == (float)w2[i]);
  tpu_tensor_free(&r);
  r = un("f32", "f32", "reduce-precision", ", exponent_bits=8, mantissa_bits=0", mk(TPU_F32, 15, x));
  CHECK_F32BITS(r, 0x35800000u, 0x38800000u, 0x38800000u, 0x47800000u, 0x47800000u, 0x47800000u, 0x50000000u,
                fbits(((float *)r.data)[7]), 0x7f800000u, 0x3f800000u, 0x3f800000u, 0x3f800000u, 0x40800000u,
                0x80000000u, 0x0u);
  CHECK(isnan(((float *)r.data)[7]));
  tpu_tensor_free(&r);
  const float y[] = {0.5f, 1, 1.5f, 2, 3, 4, 5, 7, 8, 1.25f, 1.75f, 0.3f};
  r = un("f32", "f32", "reduce-precision", ", exponent_bits=2, mantissa_bits=1", mk(TPU_F32, 12, y));
  CHECK_F64S(r, 0.0, 1.0, 1.5, 2.0, 3.0, INFINITY, INFINITY, INFINITY, INFINITY, 1.0, 2.0, 0.0);
  tpu_tensor_free(&r);
  r = un("f32", "f32", "reduce-precision", ", exponent_bits=1, mantissa_bits=1", mk(TPU_F32, 12, y));
  CHECK_F64S(r, 0.0, 0.0, 0.0, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, 0.0, INFINITY, 0.0);
  tpu_tensor_free(&r);
  const double xd[] = {1e-6, 65519, 1 + 0x1p-11 + 0x1p-40};
  r = un("f64", "f64", "reduce-precision", ", exponent_bits=5, mantissa_bits=10", mk(TPU_F64, 3, xd));
  CHECK_F64S(r, 0.0, 65504.0, 1.0009765625);
  tpu_tensor_free(&r);
  const float xb[] = {1.0f, 1.03125f, 1.09375f, 3e5f, 1e-5f};
  r = un("bf16", "bf16", "reduce-precision", ", exponent_bits=5, mantissa_bits=4", mk_bf16(5, xb));
  CHECK_F64S(r, 1.0, 1.0, 1.125, INFINITY, 0.0);
  tpu_tensor_free(&r);
}

static void test_is_finite(void) {
  const float x[] = {1e-40f, INFINITY, NAN, -INFINITY, 3e38f};
  tpu_tensor r = un("f32", "pred", "is-finite", "", mk(TPU_F32, 5, x));
  CHECK_I64S(r, 1, 0, 0, 0, 1);
  tpu_tensor_free(&r);
  r = un("bf16", "pred", "is-finite", "", mk_bf16(5, x));
  CHECK_I64S(r, 1, 0, 0, 0, 1);
  tpu_tensor_free(&r);
}

int main(void) {
  test_convert_float_to_int();
  test_convert_to_float();
  test_bitcast_convert();
  test_reduce_precision();
  test_is_finite();
  CHECK_DONE();
}
