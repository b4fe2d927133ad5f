/* Elementwise reference kernels (ref/elementwise.c) on integers and pred: divide, arithmetic, power, shifts, logic. */
#include "elementwise_util.h"

/* Expected values below come from JAX 0.10.2 on CPU (jax.jit of lax ops, or StableHLO
 * compiled by the CPU client for ops JAX does not emit, e.g. integer power). */

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

/* u32 and s32 (their own 32-bit path, ref/elementwise.c bin32): wrapping, the type's sign in
 * maximum/minimum, a count read as unsigned. */
static void test_32bit(void) {
  const uint32_t ua[] = {0xffffffffu, 1, 0x80000000u, 7}, ub[] = {1, 0xffffffffu, 0x80000000u, 0xffffffffu};
  tpu_tensor r = bin("u32", "u32", "add", "", mk(TPU_U32, 4, ua), mk(TPU_U32, 4, ub));
  CHECK_I64S(r, 0, 0, 0, 6);
  tpu_tensor_free(&r);
  r = bin("u32", "u32", "multiply", "", mk(TPU_U32, 4, ua), mk(TPU_U32, 4, ub));
  CHECK_I64S(r, 0xffffffffll, 0xffffffffll, 0, 0xfffffff9ll);
  tpu_tensor_free(&r);
  r = bin("u32", "u32", "maximum", "", mk(TPU_U32, 4, ua), mk(TPU_U32, 4, ub));
  CHECK_I64S(r, 0xffffffffll, 0xffffffffll, 0x80000000ll, 0xffffffffll);
  tpu_tensor_free(&r);
  r = bin("u32", "u32", "minimum", "", mk(TPU_U32, 4, ua), mk(TPU_U32, 4, ub));
  CHECK_I64S(r, 1, 1, 0x80000000ll, 7);
  tpu_tensor_free(&r);
  r = bin("u32", "u32", "shift-left", "", mk(TPU_U32, 4, ua), mk(TPU_U32, 4, ub));
  CHECK_I64S(r, 0xfffffffell, 0, 0, 0);
  tpu_tensor_free(&r);
  r = bin("u32", "u32", "shift-right-arithmetic", "", mk(TPU_U32, 4, ua), mk(TPU_U32, 4, ub));
  CHECK_I64S(r, 0xffffffffll, 0, 0xffffffffll, 0);
  tpu_tensor_free(&r);
  const int32_t sa[] = {-1, 1, INT32_MIN, 7}, sb[] = {1, -1, INT32_MIN, -1};
  r = bin("s32", "s32", "maximum", "", mk(TPU_S32, 4, sa), mk(TPU_S32, 4, sb));
  CHECK_I64S(r, 1, 1, INT32_MIN, 7);
  tpu_tensor_free(&r);
  r = bin("s32", "s32", "minimum", "", mk(TPU_S32, 4, sa), mk(TPU_S32, 4, sb));
  CHECK_I64S(r, -1, -1, INT32_MIN, -1);
  tpu_tensor_free(&r);
  r = bin("s32", "s32", "subtract", "", mk(TPU_S32, 4, sa), mk(TPU_S32, 4, sb));
  CHECK_I64S(r, -2, 2, 0, 8);
  tpu_tensor_free(&r);
  const uint32_t three[] = {3, 3, 3, 3};
  r = bin("u32", "u32", "xor", "", mk(TPU_U32, 4, ua), mk(TPU_U32, 4, three));
  CHECK_I64S(r, 0xfffffffcll, 2, 0x80000003ll, 4);
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

int main(void) {
  test_int_divide();
  test_int_arith();
  test_int_power();
  test_shifts();
  test_32bit();
  test_pred_ops();
  CHECK_DONE();
}
