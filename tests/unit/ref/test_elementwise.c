/* Elementwise reference kernels (ref/elementwise.c): compare, select, clamp, f32 block kernels, reducers, bad input. */
#include "elementwise_util.h"

/* Expected values below come from JAX 0.10.2 on CPU (jax.jit of lax ops, or StableHLO
 * compiled by the CPU client for ops JAX does not emit, e.g. integer power). */

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
  test_compare();
  test_select_clamp();
  test_large_blocks();
  test_reducer_helpers();
  test_errors();
  CHECK_DONE();
}
