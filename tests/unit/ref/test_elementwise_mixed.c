/* Elementwise reference kernels on the mixed-precision operands and results XLA's TPU compiler leaves (hlo/mixed.c). */
#include "elementwise_util.h"

/* Expected values below come from JAX 0.10.2 on CPU (jax.jit of lax ops, or StableHLO
 * compiled by the CPU client for ops JAX does not emit, e.g. integer power). */

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

int main(void) {
  test_mixed_float();
  test_mixed_result();
  CHECK_DONE();
}
