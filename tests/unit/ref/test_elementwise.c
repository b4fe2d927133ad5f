/* Elementwise reference kernels: every op on edge values, checked against what JAX/XLA on CPU gives. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/bf16.h"
#include "check.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "ref/ref.h"
#include "ref/ref_int.h"
#include "ref/elementwise_int.h"

/* Expected values below come from JAX 0.10.2 on CPU (jax.jit of lax ops, or StableHLO
 * compiled by the CPU client for ops JAX does not emit, e.g. integer power). */

static tpu_tensor mk(tpu_dtype t, int n, const void *data) {
  tpu_tensor v;
  int64_t dims[1] = {n};
  if (tpu_tensor_alloc(&v, t, 1, dims, NULL) != TPU_OK) abort();
  memcpy(v.data, data, tpu_dtype_size(t) * (size_t)n);
  return v;
}

static tpu_tensor mk_bf16(int n, const float *f) {
  tpu_bf16 b[64];
  for (int i = 0; i < n; i++) b[i] = tpu_bf16_from_f32(f[i]);
  return mk(TPU_BF16, n, b);
}

static tpu_tensor mk_f16(int n, const uint16_t *bits) { return mk(TPU_F16, n, bits); }

/* Parses and runs `hlo` on args; the result goes to *out (freed by the caller). */
static tpu_status run_prog(const char *hlo, tpu_tensor *args, int nargs, tpu_tensor *out, tpu_diag *d) {
  tpu_module *m = NULL;
  memset(out, 0, sizeof *out);
  tpu_status st = tpu_hlo_parse("t.hlo", hlo, strlen(hlo), &m, d);
  if (st != TPU_OK) {
    fprintf(stderr, "parse failed: %s\n%s\n", d->msg, hlo);
    return st;
  }
  st = tpu_ref_run(m, args, nargs, out, d);
  tpu_module_free(m);
  for (int i = 0; i < nargs; i++) tpu_tensor_free(&args[i]);
  return st;
}

static tpu_tensor run_ok(const char *hlo, tpu_tensor *args, int nargs) {
  tpu_tensor out;
  tpu_diag d;
  memset(&d, 0, sizeof d);
  tpu_status st = run_prog(hlo, args, nargs, &out, &d);
  if (st != TPU_OK) fprintf(stderr, "run failed: %s\n%s\n", d.msg, hlo);
  CHECK_EQ_INT(st, TPU_OK);
  return out;
}

/* r = OP(a) with result type rty (ty for the operand). */
static tpu_tensor un(const char *ty, const char *rty, const char *op, const char *attrs, tpu_tensor a) {
  char h[512];
  int n = (int)a.dims[0];
  snprintf(h, sizeof h, "HloModule t\nENTRY e {\n  a = %s[%d] parameter(0)\n  ROOT r = %s[%d] %s(a)%s\n}\n", ty, n,
           rty, n, op, attrs);
  return run_ok(h, &a, 1);
}

static tpu_tensor bin(const char *ty, const char *rty, const char *op, const char *attrs, tpu_tensor a, tpu_tensor b) {
  char h[512];
  int n = (int)a.dims[0];
  tpu_tensor args[2] = {a, b};
  snprintf(h, sizeof h,
           "HloModule t\nENTRY e {\n  a = %s[%d] parameter(0)\n  b = %s[%d] parameter(1)\n  ROOT r = %s[%d] %s(a, b)%s\n}\n",
           ty, n, ty, n, rty, n, op, attrs);
  return run_ok(h, args, 2);
}

static uint32_t fbits(float f) { return tpu_f32_bits(f); }

/* Distance in units in the last place between two finite floats of the same sign. */
static long ulps32(float a, float b) {
  int32_t ia = (int32_t)fbits(a), ib = (int32_t)fbits(b);
  if (ia < 0) ia = (int32_t)0x80000000 - ia;
  if (ib < 0) ib = (int32_t)0x80000000 - ib;
  long dd = (long)ia - (long)ib;
  return dd < 0 ? -dd : dd;
}

#define CHECK_I64S(t, ...)                                                        \
  do {                                                                            \
    const int64_t want_[] = {__VA_ARGS__};                                        \
    CHECK_EQ_INT(tpu_tensor_numel(&(t)), (int64_t)(sizeof want_ / sizeof *want_)); \
    for (size_t i_ = 0; i_ < sizeof want_ / sizeof *want_; i_++)                  \
      CHECK_EQ_INT(tpu_tensor_get_i64(&(t), (int64_t)i_), want_[i_]);             \
  } while (0)

#define CHECK_U64S(t, ...)                                                          \
  do {                                                                              \
    const uint64_t want_[] = {__VA_ARGS__};                                         \
    for (size_t i_ = 0; i_ < sizeof want_ / sizeof *want_; i_++)                    \
      CHECK(((const uint64_t *)(t).data)[i_] == want_[i_]);                         \
  } while (0)

#define CHECK_F32BITS(t, ...)                                                   \
  do {                                                                          \
    const uint32_t want_[] = {__VA_ARGS__};                                     \
    for (size_t i_ = 0; i_ < sizeof want_ / sizeof *want_; i_++)                \
      CHECK_EQ_INT(fbits(((const float *)(t).data)[i_]), want_[i_]);            \
  } while (0)

#define CHECK_F64S(t, ...)                                                      \
  do {                                                                          \
    const double want_[] = {__VA_ARGS__};                                       \
    for (size_t i_ = 0; i_ < sizeof want_ / sizeof *want_; i_++)                \
      CHECK(tpu_tensor_get_f64(&(t), (int64_t)i_) == want_[i_]);                \
  } while (0)

static void test_int_divide(void) {
  const int8_t a8[] = {7, -7, -128, 127, 5, 0}, b8[] = {0, 0, -1, 0, 2, 0};
  tpu_tensor r = bin("s8", "s8", "divide", "", mk(TPU_S8, 6, a8), mk(TPU_S8, 6, b8));
  CHECK_I64S(r, -1, -1, -128, -1, 2, -1);
  tpu_tensor_free(&r);
  r = bin("s8", "s8", "remainder", "", mk(TPU_S8, 6, a8), mk(TPU_S8, 6, b8));
  CHECK_I64S(r, 7, -7, 0, 127, 1, 0);
  tpu_tensor_free(&r);
  const int64_t a64[] = {7, -7, INT64_MIN, INT64_MAX, 5, 0, -7}, b64[] = {0, 0, -1, 0, 2, 0, 2};
  r = bin("s64", "s64", "divide", "", mk(TPU_S64, 7, a64), mk(TPU_S64, 7, b64));
  CHECK_I64S(r, -1, -1, INT64_MIN, -1, 2, -1, -3);
  tpu_tensor_free(&r);
  r = bin("s64", "s64", "remainder", "", mk(TPU_S64, 7, a64), mk(TPU_S64, 7, b64));
  CHECK_I64S(r, 7, -7, 0, INT64_MAX, 1, 0, -1);
  tpu_tensor_free(&r);
  const uint32_t a32[] = {7, 250, 0, 4294967295u, 5, 0}, b32[] = {0, 0, 0, 0, 2, 0};
  r = bin("u32", "u32", "divide", "", mk(TPU_U32, 6, a32), mk(TPU_U32, 6, b32));
  CHECK_I64S(r, 4294967295ll, 4294967295ll, 4294967295ll, 4294967295ll, 2, 4294967295ll);
  tpu_tensor_free(&r);
  r = bin("u32", "u32", "remainder", "", mk(TPU_U32, 6, a32), mk(TPU_U32, 6, b32));
  CHECK_I64S(r, 7, 250, 0, 4294967295ll, 1, 0);
  tpu_tensor_free(&r);
  const uint64_t au[] = {7, UINT64_MAX, UINT64_MAX}, bu[] = {0, 2, 0};
  r = bin("u64", "u64", "divide", "", mk(TPU_U64, 3, au), mk(TPU_U64, 3, bu));
  CHECK_U64S(r, UINT64_MAX, UINT64_MAX / 2, UINT64_MAX);
  tpu_tensor_free(&r);
  const uint8_t a8u[] = {250, 7}, b8u[] = {0, 0};
  r = bin("u8", "u8", "divide", "", mk(TPU_U8, 2, a8u), mk(TPU_U8, 2, b8u));
  CHECK_I64S(r, 255, 255);
  tpu_tensor_free(&r);
}

static void test_int_arith(void) {
  /* Wrapping add/sub/mul and the wrapping unary ops. */
  const int8_t a[] = {127, -128, 100, -1}, b[] = {1, -1, 3, -1};
  tpu_tensor r = bin("s8", "s8", "add", "", mk(TPU_S8, 4, a), mk(TPU_S8, 4, b));
  CHECK_I64S(r, -128, 127, 103, -2);
  tpu_tensor_free(&r);
  r = bin("s8", "s8", "subtract", "", mk(TPU_S8, 4, a), mk(TPU_S8, 4, b));
  CHECK_I64S(r, 126, -127, 97, 0);
  tpu_tensor_free(&r);
  r = bin("s8", "s8", "multiply", "", mk(TPU_S8, 4, a), mk(TPU_S8, 4, b));
  CHECK_I64S(r, 127, -128, 44, 1);
  tpu_tensor_free(&r);
  r = bin("s8", "s8", "maximum", "", mk(TPU_S8, 4, a), mk(TPU_S8, 4, b));
  CHECK_I64S(r, 127, -1, 100, -1);
  tpu_tensor_free(&r);
  const uint64_t ua[] = {UINT64_MAX, 1}, ub[] = {1, UINT64_MAX};
  r = bin("u64", "u64", "minimum", "", mk(TPU_U64, 2, ua), mk(TPU_U64, 2, ub));
  CHECK_U64S(r, 1, 1);
  tpu_tensor_free(&r);
  r = bin("u64", "u64", "add", "", mk(TPU_U64, 2, ua), mk(TPU_U64, 2, ub));
  CHECK_U64S(r, 0, 0);
  tpu_tensor_free(&r);
  const int16_t sa[] = {0x0f0f, -1}, sb[] = {0x00ff, 0x1234};
  r = bin("s16", "s16", "and", "", mk(TPU_S16, 2, sa), mk(TPU_S16, 2, sb));
  CHECK_I64S(r, 0x000f, 0x1234);
  tpu_tensor_free(&r);
  r = bin("s16", "s16", "xor", "", mk(TPU_S16, 2, sa), mk(TPU_S16, 2, sb));
  CHECK_I64S(r, 0x0ff0, (int16_t)0xedcb);
  tpu_tensor_free(&r);

  const int8_t u[] = {-128, 127, 0, -1, 5, -5};
  const char *ops[] = {"abs", "negate", "sign", "not", "popcnt", "count-leading-zeros"};
  const int64_t want[6][6] = {{-128, 127, 0, 1, 5, 5},  {-128, -127, 0, 1, -5, 5}, {-1, 1, 0, -1, 1, -1},
                              {127, -128, -1, 0, -6, 4}, {1, 7, 0, 8, 2, 7},       {0, 1, 8, 0, 5, 0}};
  for (int k = 0; k < 6; k++) {
    r = un("s8", "s8", ops[k], "", mk(TPU_S8, 6, u));
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(tpu_tensor_get_i64(&r, i), want[k][i]);
    tpu_tensor_free(&r);
  }
  const uint8_t v[] = {0, 1, 255, 128};
  const char *uops[] = {"not", "popcnt", "count-leading-zeros", "negate", "sign", "abs"};
  const int64_t uwant[6][4] = {{255, 254, 0, 127}, {0, 1, 8, 1}, {8, 7, 0, 0},
                               {0, 255, 1, 128},   {0, 1, 1, 1}, {0, 1, 255, 128}};
  for (int k = 0; k < 6; k++) {
    r = un("u8", "u8", uops[k], "", mk(TPU_U8, 4, v));
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(tpu_tensor_get_i64(&r, i), uwant[k][i]);
    tpu_tensor_free(&r);
  }
  const int64_t w[] = {0, -1, INT64_MIN, 1};
  r = un("s64", "s64", "count-leading-zeros", "", mk(TPU_S64, 4, w));
  CHECK_I64S(r, 64, 0, 0, 63);
  tpu_tensor_free(&r);
  r = un("s64", "s64", "abs", "", mk(TPU_S64, 4, w));
  CHECK_I64S(r, 0, 1, INT64_MIN, 1);
  tpu_tensor_free(&r);
  r = un("s64", "s64", "popcnt", "", mk(TPU_S64, 4, w));
  CHECK_I64S(r, 0, 64, 1, 1);
  tpu_tensor_free(&r);
}

static void test_int_power(void) {
  const int32_t a[] = {2, 2, -1, -1, 1, 0, 0, 3, -2, 2, -1, -1, 5};
  const int32_t b[] = {-1, 0, -1, -2, -5, -1, 0, 40, 3, 31, 7, -3, 2};
  tpu_tensor r = bin("s32", "s32", "power", "", mk(TPU_S32, 13, a), mk(TPU_S32, 13, b));
  CHECK_I64S(r, 0, 1, -1, 1, 1, 0, 1, 689956897, -8, INT32_MIN, -1, -1, 25);
  tpu_tensor_free(&r);
  const uint8_t ua[] = {2, 3, 255, 0}, ub[] = {7, 5, 2, 0};
  r = bin("u8", "u8", "power", "", mk(TPU_U8, 4, ua), mk(TPU_U8, 4, ub));
  CHECK_I64S(r, 128, 243, 1, 1);
  tpu_tensor_free(&r);
  const int64_t la[] = {3, -3}, lb[] = {41, 41};
  r = bin("s64", "s64", "power", "", mk(TPU_S64, 2, la), mk(TPU_S64, 2, lb));
  CHECK_I64S(r, -420491770248316829ll, 420491770248316829ll);
  tpu_tensor_free(&r);
}

static void test_shifts(void) {
  const int32_t a[] = {1, -8, -8, 5, -1}, b[] = {32, 33, -1, 31, 40};
  tpu_tensor r = bin("s32", "s32", "shift-left", "", mk(TPU_S32, 5, a), mk(TPU_S32, 5, b));
  CHECK_I64S(r, 0, 0, 0, INT32_MIN, 0);
  tpu_tensor_free(&r);
  r = bin("s32", "s32", "shift-right-logical", "", mk(TPU_S32, 5, a), mk(TPU_S32, 5, b));
  CHECK_I64S(r, 0, 0, 0, 0, 0);
  tpu_tensor_free(&r);
  r = bin("s32", "s32", "shift-right-arithmetic", "", mk(TPU_S32, 5, a), mk(TPU_S32, 5, b));
  CHECK_I64S(r, 0, -1, -1, 0, -1);
  tpu_tensor_free(&r);
  const int32_t c[] = {-8, -8, 0x40000000}, e[] = {1, 2, 1};
  r = bin("s32", "s32", "shift-right-arithmetic", "", mk(TPU_S32, 3, c), mk(TPU_S32, 3, e));
  CHECK_I64S(r, -4, -2, 0x20000000);
  tpu_tensor_free(&r);
  r = bin("s32", "s32", "shift-right-logical", "", mk(TPU_S32, 3, c), mk(TPU_S32, 3, e));
  CHECK_I64S(r, 0x7ffffffc, 0x3ffffffe, 0x20000000);
  tpu_tensor_free(&r);
  const uint8_t ua[] = {0x80, 0x81, 1}, ub[] = {8, 7, 255};
  r = bin("u8", "u8", "shift-left", "", mk(TPU_U8, 3, ua), mk(TPU_U8, 3, ub));
  CHECK_I64S(r, 0, 128, 0);
  tpu_tensor_free(&r);
  r = bin("u8", "u8", "shift-right-logical", "", mk(TPU_U8, 3, ua), mk(TPU_U8, 3, ub));
  CHECK_I64S(r, 0, 1, 0);
  tpu_tensor_free(&r);
  r = bin("u8", "u8", "shift-right-arithmetic", "", mk(TPU_U8, 3, ua), mk(TPU_U8, 3, ub));
  CHECK_I64S(r, 255, 255, 0);
  tpu_tensor_free(&r);
}

static void test_pred_ops(void) {
  const uint8_t p[] = {0, 0, 1, 1}, q[] = {0, 1, 0, 1};
  const char *ops[] = {"add", "multiply", "maximum", "minimum", "and", "or", "xor"};
  const int64_t want[7][4] = {{0, 1, 1, 1}, {0, 0, 0, 1}, {0, 1, 1, 1}, {0, 0, 0, 1},
                              {0, 0, 0, 1}, {0, 1, 1, 1}, {0, 1, 1, 0}};
  for (int k = 0; k < 7; k++) {
    tpu_tensor r = bin("pred", "pred", ops[k], "", mk(TPU_PRED, 4, p), mk(TPU_PRED, 4, q));
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(((uint8_t *)r.data)[i], want[k][i]);
    tpu_tensor_free(&r);
  }
  tpu_tensor r = un("pred", "pred", "not", "", mk(TPU_PRED, 4, p));
  CHECK_I64S(r, 1, 1, 0, 0);
  tpu_tensor_free(&r);
}

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

static void test_compare(void) {
  const float nan = NAN, inf = INFINITY;
  const float a[] = {-nan, -inf, -0.0f, 0.0f, 1.0f, nan, nan, -0.0f, nan};
  const float b[] = {-inf, -1.0f, 0.0f, -0.0f, 1.0f, inf, nan, -0.0f, -nan};
  const char *dirs[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  const int64_t tot[6][9] = {{0, 0, 0, 0, 1, 0, 1, 1, 0}, {1, 1, 1, 1, 0, 1, 0, 0, 1}, {1, 1, 1, 0, 0, 0, 0, 0, 0},
                             {1, 1, 1, 0, 1, 0, 1, 1, 0}, {0, 0, 0, 1, 0, 1, 0, 0, 1}, {0, 0, 0, 1, 1, 1, 1, 1, 1}};
  const int64_t flt[6][9] = {{0, 0, 1, 1, 1, 0, 0, 1, 0}, {1, 1, 0, 0, 0, 1, 1, 0, 1}, {0, 1, 0, 0, 0, 0, 0, 0, 0},
                             {0, 1, 1, 1, 1, 0, 0, 1, 0}, {0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 1, 1, 1, 0, 0, 1, 0}};
  for (int k = 0; k < 6; k++) {
    char attrs[64];
    snprintf(attrs, sizeof attrs, ", direction=%s, type=TOTALORDER", dirs[k]);
    tpu_tensor r = bin("f32", "pred", "compare", attrs, mk(TPU_F32, 9, a), mk(TPU_F32, 9, b));
    for (int i = 0; i < 9; i++) CHECK_EQ_INT(((uint8_t *)r.data)[i], tot[k][i]);
    tpu_tensor_free(&r);
    snprintf(attrs, sizeof attrs, ", direction=%s", dirs[k]);
    r = bin("f32", "pred", "compare", attrs, mk(TPU_F32, 9, a), mk(TPU_F32, 9, b));
    for (int i = 0; i < 9; i++) CHECK_EQ_INT(((uint8_t *)r.data)[i], flt[k][i]);
    tpu_tensor_free(&r);
    /* The same in bf16 and f64. */
    r = bin("bf16", "pred", "compare", attrs, mk_bf16(9, a), mk_bf16(9, b));
    for (int i = 0; i < 9; i++) CHECK_EQ_INT(((uint8_t *)r.data)[i], flt[k][i]);
    tpu_tensor_free(&r);
    double ad[9], bd[9];
    for (int i = 0; i < 9; i++) ad[i] = a[i], bd[i] = b[i];
    snprintf(attrs, sizeof attrs, ", direction=%s, type=TOTALORDER", dirs[k]);
    r = bin("f64", "pred", "compare", attrs, mk(TPU_F64, 9, ad), mk(TPU_F64, 9, bd));
    for (int i = 0; i < 9; i++) CHECK_EQ_INT(((uint8_t *)r.data)[i], tot[k][i]);
    tpu_tensor_free(&r);
  }
  const uint8_t u[] = {0, 255, 128}, v[] = {1, 0, 127};
  tpu_tensor r = bin("u8", "pred", "compare", ", direction=LT", mk(TPU_U8, 3, u), mk(TPU_U8, 3, v));
  CHECK_I64S(r, 1, 0, 0);
  tpu_tensor_free(&r);
  const int8_t s[] = {0, -1, -128}, t[] = {1, 0, 127};
  r = bin("s8", "pred", "compare", ", direction=LT, type=SIGNED", mk(TPU_S8, 3, s), mk(TPU_S8, 3, t));
  CHECK_I64S(r, 1, 1, 1);
  tpu_tensor_free(&r);
  const uint64_t ul[] = {UINT64_MAX, 1}, vl[] = {1, UINT64_MAX};
  r = bin("u64", "pred", "compare", ", direction=GT", mk(TPU_U64, 2, ul), mk(TPU_U64, 2, vl));
  CHECK_I64S(r, 1, 0);
  tpu_tensor_free(&r);
  const uint8_t p[] = {0, 1, 1}, q[] = {1, 0, 1};
  r = bin("pred", "pred", "compare", ", direction=LT", mk(TPU_PRED, 3, p), mk(TPU_PRED, 3, q));
  CHECK_I64S(r, 1, 0, 0);
  tpu_tensor_free(&r);
}

static void test_select_clamp(void) {
  /* Scalar pred selects whole arrays; clamp takes scalar bounds and propagates NaN. */
  const char *h1 = "HloModule t\nENTRY e {\n  p = pred[] parameter(0)\n  a = s16[3] parameter(1)\n"
                   "  b = s16[3] parameter(2)\n  ROOT r = s16[3] select(p, a, b)\n}\n";
  const uint8_t pt = 0;
  const int16_t a[] = {1, 2, 3}, b[] = {-1, -2, -3};
  tpu_tensor args[3];
  int64_t nodims[1] = {0};
  tpu_tensor_alloc(&args[0], TPU_PRED, 0, nodims, NULL);
  memcpy(args[0].data, &pt, 1);
  args[1] = mk(TPU_S16, 3, a);
  args[2] = mk(TPU_S16, 3, b);
  tpu_tensor r = run_ok(h1, args, 3);
  CHECK_I64S(r, -1, -2, -3);
  tpu_tensor_free(&r);
  const uint8_t pv[] = {1, 0, 1};
  r = un("f64", "f64", "negate", "", mk(TPU_F64, 1, (double[]){1.0})); /* exercise a 1-element path */
  CHECK_F64S(r, -1.0);
  tpu_tensor_free(&r);
  const char *h2 = "HloModule t\nENTRY e {\n  p = pred[3] parameter(0)\n  a = bf16[3] parameter(1)\n"
                   "  b = bf16[3] parameter(2)\n  ROOT r = bf16[3] select(p, a, b)\n}\n";
  const float fa[] = {1.5f, 2.5f, 3.5f}, fb[] = {-1, -2, -3};
  args[0] = mk(TPU_PRED, 3, pv);
  args[1] = mk_bf16(3, fa);
  args[2] = mk_bf16(3, fb);
  r = run_ok(h2, args, 3);
  CHECK_F64S(r, 1.5, -2.0, 3.5);
  tpu_tensor_free(&r);
  const char *h3 = "HloModule t\nENTRY e {\n  lo = f32[] constant(0)\n  x = f32[5] parameter(0)\n"
                   "  hi = f32[] constant(1)\n  ROOT r = f32[5] clamp(lo, x, hi)\n}\n";
  const float x[] = {-2.0f, 0.25f, 7.0f, NAN, -0.0f};
  args[0] = mk(TPU_F32, 5, x);
  r = run_ok(h3, args, 1);
  const float *f = r.data;
  CHECK(f[0] == 0.0f && f[1] == 0.25f && f[2] == 1.0f && isnan(f[3]) && fbits(f[4]) == 0u);
  tpu_tensor_free(&r);
  const char *h4 = "HloModule t\nENTRY e {\n  lo = s32[2] parameter(0)\n  x = s32[2] parameter(1)\n"
                   "  hi = s32[2] parameter(2)\n  ROOT r = s32[2] clamp(lo, x, hi)\n}\n";
  const int32_t lo[] = {3, 3}, xi[] = {5, 0}, hi[] = {2, 2};
  args[0] = mk(TPU_S32, 2, lo);
  args[1] = mk(TPU_S32, 2, xi);
  args[2] = mk(TPU_S32, 2, hi);
  r = run_ok(h4, args, 3);
  CHECK_I64S(r, 2, 2); /* lo > hi: hi wins, as XLA gives */
  tpu_tensor_free(&r);
}

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

static void test_large_blocks(void) {
  /* More elements than one block, with a broadcast scalar operand. */
  enum { N = 1000 };
  static int32_t a[N];
  for (int i = 0; i < N; i++) a[i] = i - 500;
  const char *h = "HloModule t\nENTRY e {\n  a = s32[1000] parameter(0)\n  c = s32[] constant(3)\n"
                  "  ROOT r = s32[1000] multiply(a, c)\n}\n";
  tpu_tensor args[1] = {mk(TPU_S32, N, a)};
  tpu_tensor r = run_ok(h, args, 1);
  int bad = 0;
  for (int i = 0; i < N; i++) bad += tpu_tensor_get_i64(&r, i) != 3 * (i - 500);
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&r);
  static float f[N];
  for (int i = 0; i < N; i++) f[i] = (float)i * 0.5f;
  args[0] = mk(TPU_F32, N, f);
  r = un("f32", "bf16", "convert", "", args[0]);
  bad = 0;
  for (int i = 0; i < N; i++) bad += tpu_tensor_get_f64(&r, i) != (double)tpu_bf16_to_f32(tpu_bf16_from_f32(f[i]));
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&r);
}

static void test_reducer_helpers(void) {
  const char *h = "HloModule t\n"
                  "add_c {\n  p0 = f32[] parameter(0)\n  p1 = f32[] parameter(1)\n  ROOT s = f32[] add(p0, p1)\n}\n"
                  "swap_c {\n  p0 = f32[] parameter(0)\n  p1 = f32[] parameter(1)\n  ROOT s = f32[] maximum(p1, p0)\n}\n"
                  "max_c {\n  p0 = s8[] parameter(0)\n  p1 = s8[] parameter(1)\n  ROOT s = s8[] maximum(p0, p1)\n}\n"
                  "sub_c {\n  p0 = f32[] parameter(0)\n  p1 = f32[] parameter(1)\n  ROOT s = f32[] subtract(p0, p1)\n}\n"
                  "ENTRY e {\n  ROOT c = f32[] constant(0)\n}\n";
  tpu_module *m = NULL;
  tpu_diag d;
  memset(&d, 0, sizeof d);
  CHECK_EQ_INT(tpu_hlo_parse("t.hlo", h, strlen(h), &m, &d), TPU_OK);
  if (!m) return;
  CHECK_EQ_INT(tpu__ref_simple_reducer(tpu_module_find_comp(m, "add_c")), TPU_OP_ADD);
  CHECK_EQ_INT(tpu__ref_simple_reducer(tpu_module_find_comp(m, "swap_c")), TPU_OP_COUNT);
  CHECK_EQ_INT(tpu__ref_simple_reducer(tpu_module_find_comp(m, "max_c")), TPU_OP_MAXIMUM);
  CHECK_EQ_INT(tpu__ref_simple_reducer(tpu_module_find_comp(m, "sub_c")), TPU_OP_COUNT);
  tpu_module_free(m);
  int8_t a = 127, b = 1;
  tpu__ref_apply_binary(TPU_OP_ADD, TPU_S8, &a, &b);
  CHECK_EQ_INT(a, -128);
  float x = 1.0f, y = NAN;
  tpu__ref_apply_binary(TPU_OP_MAXIMUM, TPU_F32, &x, &y);
  CHECK(isnan(x));
  tpu_bf16 p = tpu_bf16_from_f32(1.0f), q = tpu_bf16_from_f32(0.005859375f);
  tpu__ref_apply_binary(TPU_OP_ADD, TPU_BF16, &p, &q);
  CHECK(tpu_bf16_to_f32(p) == 1.0078125f);
  uint8_t t = 1, u = 0;
  tpu__ref_apply_binary(TPU_OP_MINIMUM, TPU_PRED, &t, &u);
  CHECK_EQ_INT(t, 0);
  uint64_t big = UINT64_MAX, one = 1;
  tpu__ref_apply_binary(TPU_OP_MAXIMUM, TPU_U64, &one, &big);
  CHECK(one == UINT64_MAX);
}

static void test_errors(void) {
  /* Unverified input with mismatched operand types fails at the instruction's line. */
  const char *h = "HloModule t\nENTRY e {\n  a = f32[2] parameter(0)\n  b = s32[2] parameter(1)\n"
                  "  ROOT r = f32[2] add(a, b)\n}\n";
  const float f[] = {1, 2};
  const int32_t s[] = {1, 2};
  tpu_tensor args[2] = {mk(TPU_F32, 2, f), mk(TPU_S32, 2, s)};
  tpu_tensor r;
  tpu_diag d;
  memset(&d, 0, sizeof d);
  CHECK_EQ_INT(run_prog(h, args, 2, &r, &d), TPU_ERR_INVALID);
  CHECK_EQ_INT(d.line, 5);
  CHECK(strstr(d.msg, "operand 1") != NULL);
  const char *h2 = "HloModule t\nENTRY e {\n  a = f32[2] parameter(0)\n  b = f32[2] parameter(1)\n"
                   "  ROOT r = f32[2] xor(a, b)\n}\n";
  args[0] = mk(TPU_F32, 2, f);
  args[1] = mk(TPU_F32, 2, f);
  memset(&d, 0, sizeof d);
  CHECK_EQ_INT(run_prog(h2, args, 2, &r, &d), TPU_ERR_INVALID);
  CHECK(strstr(d.msg, "not defined on f32") != NULL);
}

/* The XLA TPU compiler's mixed-precision results (hlo/mixed.c): a reduce of f32 values with a
 * bf16 result sums in f32 and rounds once; a select of two f32 values with a bf16 result
 * rounds the chosen value. 1 + 2^-8 + 2^-8 = 1.0078125 is exact in f32 and in bf16; summed in
 * bf16 each 1 + 2^-8 would round back to 1 (ties to even) and give 1.0. */
static void test_mixed_result(void) {
  const char *h1 = "HloModule t\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
                   "ENTRY e {\n  a = f32[3] parameter(0)\n  z = f32[] constant(0)\n"
                   "  ROOT r = bf16[] reduce(a, z), dimensions={0}, to_apply=add\n}\n";
  const float fa[] = {1.0f, 0.00390625f, 0.00390625f};
  tpu_tensor args[3];
  args[0] = mk(TPU_F32, 3, fa);
  tpu_tensor r = run_ok(h1, args, 1);
  CHECK(r.dtype == TPU_BF16);
  CHECK(tpu_tensor_get_f64(&r, 0) == 1.0078125);
  tpu_tensor_free(&r);
  const char *h2 = "HloModule t\nENTRY e {\n  p = pred[2] parameter(0)\n  a = f32[2] parameter(1)\n"
                   "  b = f32[2] parameter(2)\n  ROOT r = bf16[2] select(p, a, b)\n}\n";
  const uint8_t pv[] = {1, 0};
  const float sa[] = {1.00390625f, 0}, sb[] = {0, 1.01171875f};
  args[0] = mk(TPU_PRED, 2, pv);
  args[1] = mk(TPU_F32, 2, sa);
  args[2] = mk(TPU_F32, 2, sb);
  r = run_ok(h2, args, 3);
  CHECK(r.dtype == TPU_BF16);
  CHECK_F64S(r, 1.0, 1.015625);
  tpu_tensor_free(&r);
  /* a bf16 input summed with an f32 init (the compiler's avg-pool): widened, summed in f32 */
  const char *h3 = "HloModule t\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
                   "ENTRY e {\n  a = bf16[3] parameter(0)\n  z = f32[] constant(0)\n"
                   "  ROOT r = f32[] reduce(a, z), dimensions={0}, to_apply=add\n}\n";
  const float ba[] = {1.0f, 0.00390625f, 0.00390625f};
  args[0] = mk_bf16(3, ba);
  r = run_ok(h3, args, 1);
  CHECK(r.dtype == TPU_F32);
  CHECK(tpu_tensor_get_f64(&r, 0) == 1.0078125);
  tpu_tensor_free(&r);
  /* a variadic reduce (max and argmax) of f32 values declaring a bf16 maximum (the TPU
   * compiler's fused argmax): compared in f32, so 1.00390625 wins over 1.0 (equal in bf16,
   * where the first index would), then rounded to bf16 */
  for (int el = 0; el < 2; el++) {
    char h4[1024];
    snprintf(h4, sizeof h4,
             "HloModule t\nam {\n  a = f32[] parameter(0)\n  i = s32[] parameter(1)\n  b = f32[] parameter(2)\n"
             "  j = s32[] parameter(3)\n  g = pred[] compare(a, b), direction=GE\n  m = f32[] select(g, a, b)\n"
             "  k = s32[] select(g, i, j)\n  ROOT t = (f32[], s32[]) tuple(m, k)\n}\n"
             "ENTRY e {\n  a = f32[3] parameter(0)\n  i = s32[3] iota(), iota_dimension=0\n  n = f32[] constant(-inf)\n"
             "  z = s32[] constant(0)\n  r = (bf16[], s32[]) reduce(a, i, n, z), dimensions={0}, to_apply=am\n"
             "  ROOT o = %s[] get-tuple-element(r), index=%d\n}\n", el ? "s32" : "bf16", el);
    const float va[] = {1.0f, 1.00390625f, 0.5f};
    args[0] = mk(TPU_F32, 3, va);
    r = run_ok(h4, args, 1);
    CHECK(r.dtype == (el ? TPU_S32 : TPU_BF16));
    CHECK(tpu_tensor_get_f64(&r, 0) == 1.0);
    tpu_tensor_free(&r);
  }
  /* an all-reduce declaring bf16 sums of f32 operands (the compiler's combined gradient
   * all-reduce with the convert folded in), alone and in a tuple: summed in f32, rounded */
  for (int tup = 0; tup < 2; tup++) {
    const char *h5 = tup ? "HloModule t\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
                           "ENTRY e {\n  a = f32[2] parameter(0)\n"
                           "  r = (bf16[2], bf16[2]) all-reduce(a, a), replica_groups={{0}}, to_apply=add\n"
                           "  ROOT o = bf16[2] get-tuple-element(r), index=1\n}\n"
                         : "HloModule t\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
                           "ENTRY e {\n  a = f32[2] parameter(0)\n"
                           "  ROOT r = bf16[2] all-reduce(a), replica_groups={{0}}, to_apply=add\n}\n";
    const float va[] = {1.00390625f, 1.01171875f};
    args[0] = mk(TPU_F32, 2, va);
    r = run_ok(h5, args, 1);
    CHECK(r.dtype == TPU_BF16);
    CHECK_F64S(r, 1.0, 1.015625);
    tpu_tensor_free(&r);
  }
}

/* Mixed float operands, as XLA's TPU compiler leaves them (float-type correction): each
 * operand is converted to the op's working type first — the result type, or the widest for
 * compare. 1.00390625 is exact in f32 and rounds to 1.0 in bf16 (ties to even). */
static void test_mixed_float(void) {
  const char *h1 = "HloModule t\nENTRY e {\n  p = pred[2] parameter(0)\n  a = bf16[2] parameter(1)\n"
                   "  b = f32[2] parameter(2)\n  ROOT r = bf16[2] select(p, a, b)\n}\n";
  const uint8_t pv[] = {1, 0};
  const float fa[] = {2.5f, 0}, fb[] = {0, 1.00390625f};
  tpu_tensor args[3];
  args[0] = mk(TPU_PRED, 2, pv);
  args[1] = mk_bf16(2, fa);
  args[2] = mk(TPU_F32, 2, fb);
  tpu_tensor r = run_ok(h1, args, 3);
  CHECK(r.dtype == TPU_BF16);
  CHECK_F64S(r, 2.5, 1.0);
  tpu_tensor_free(&r);
  const char *h2 = "HloModule t\nENTRY e {\n  a = bf16[2] parameter(0)\n  b = f32[2] parameter(1)\n"
                   "  ROOT r = f32[2] add(a, b)\n}\n";
  const float ga[] = {1, 3}, gb[] = {0.00390625f, -0.5f};
  args[0] = mk_bf16(2, ga);
  args[1] = mk(TPU_F32, 2, gb);
  r = run_ok(h2, args, 2);
  CHECK_F64S(r, 1.00390625, 2.5);
  tpu_tensor_free(&r);
  const char *h3 = "HloModule t\nENTRY e {\n  a = bf16[2] parameter(0)\n  b = f32[2] parameter(1)\n"
                   "  ROOT r = pred[2] compare(a, b), direction=LT\n}\n";
  args[0] = mk_bf16(2, ga);
  args[1] = mk(TPU_F32, 2, (float[]){1.00390625f, 2});
  r = run_ok(h3, args, 2); /* compared in f32: 1 < 1.00390625 holds */
  CHECK_I64S(r, 1, 0);
  tpu_tensor_free(&r);
  /* A data-movement op that changes the float type moves, then rounds (nearest even). */
  const char *h4 = "HloModule t\nENTRY e {\n  a = f32[4] parameter(0)\n"
                   "  ROOT r = bf16[2] slice(a), slice={[1:3]}\n}\n";
  args[0] = mk(TPU_F32, 4, (float[]){0, 1.00390625f, 3.0f, 7});
  r = run_ok(h4, args, 1);
  CHECK(r.dtype == TPU_BF16);
  CHECK_F64S(r, 1.0, 3.0);
  tpu_tensor_free(&r);
  /* An integer operand never mixes with a float one. */
  tpu_module *m = NULL;
  tpu_diag d;
  const char *bad = "HloModule t\nENTRY e {\n  a = s32[2] parameter(0)\n  b = f32[2] parameter(1)\n"
                    "  ROOT r = f32[2] add(a, b)\n}\n";
  CHECK(tpu_hlo_parse("t.hlo", bad, strlen(bad), &m, &d) == TPU_OK);
  CHECK(m && tpu_ir_verify(m, &d) != TPU_OK && strstr(d.msg, "same shape"));
  tpu_module_free(m);
}

static float flush_ref(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }

/* The f32 block kernels the fused evaluator uses (vectorised, AVX2 where the CPU has it)
 * against the scalar definition, on random bit patterns with denormals, signed zeros, NaNs
 * and negatives: sqrt, rsqrt, and binary ops with dense or scalar operands, flushed or not. */
static void test_block_kernels(void) {
  uint32_t s = 12345;
  static const tpu_opcode bops[] = {TPU_OP_ADD, TPU_OP_SUBTRACT, TPU_OP_MULTIPLY, TPU_OP_DIVIDE, TPU_OP_MAXIMUM,
                                    TPU_OP_MINIMUM, TPU_OP_POWER};
  int bad = 0;
  for (int rep = 0; rep < 400; rep++) {
    float a[256], b[256], r[256];
    for (int i = 0; i < 256; i++) {
      uint32_t u[2];
      for (int k = 0; k < 2; k++) {
        s = s * 1103515245u + 12345u;
        u[k] = s ^ (s >> 7) * 2654435761u;
        if ((s >> 3) % 13 == 0) u[k] &= 0x807fffffu; /* a denormal or zero */
      }
      memcpy(&a[i], &u[0], 4);
      memcpy(&b[i], &u[1], 4);
    }
    int n = 256 - rep % 9;
    for (int op = 0; op < 2; op++) {
      memcpy(r, a, sizeof a);
      tpu__ew_f32_unary(op ? TPU_OP_RSQRT : TPU_OP_SQRT, r, n);
      for (int i = 0; i < n; i++) {
        float x = flush_ref(a[i]), w = flush_ref(op ? 1.0f / sqrtf(x) : sqrtf(x));
        bad += memcmp(&w, &r[i], 4) != 0;
      }
    }
    for (size_t k = 0; k < sizeof bops / sizeof bops[0]; k++)
      for (int shape = 0; shape < 3; shape++) {
        int sa = shape != 1, sb = shape != 2;
        /* flags 0 only where the operand is flushed already */
        float fa[256];
        for (int i = 0; i < 256; i++) fa[i] = flush_ref(a[i]);
        tpu__ew_f32_binary_to(bops[k], r, rep % 2 ? fa : a, sa, rep % 2 ? 0 : 1, b, sb, 1, n);
        float x1[256], y1[256];
        for (int i = 0; i < n; i++) x1[i] = sa ? a[i] : a[0], y1[i] = sb ? b[i] : b[0];
        tpu__ew_f32_binary(bops[k], x1, y1, n);
        /* two NaN operands: which payload survives is not specified (docs/numerics.md) */
        for (int i = 0; i < n; i++) bad += memcmp(&x1[i], &r[i], 4) != 0 && !(isnan(x1[i]) && isnan(r[i]));
      }
  }
  CHECK_EQ_INT(bad, 0);
}

int main(void) {
  test_block_kernels();
  test_int_divide();
  test_int_arith();
  test_int_power();
  test_shifts();
  test_pred_ops();
  test_float_binary();
  test_float_rounding_unary();
  test_transcendental();
  test_low_precision_arith();
  test_denormals();
  test_compare();
  test_select_clamp();
  test_mixed_float();
  test_mixed_result();
  test_convert_float_to_int();
  test_convert_to_float();
  test_bitcast_convert();
  test_reduce_precision();
  test_is_finite();
  test_large_blocks();
  test_reducer_helpers();
  test_errors();
  CHECK_DONE();
}
