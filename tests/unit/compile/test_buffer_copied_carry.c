/* Temp the XLA TPU compiler's memory_analysis() counts beyond its buffer assignment's heap
 * (buffer_assign.c copied_carry_extra): a while body that rewrites a state element with a
 * matmul reading that element (copy insertion copies the old value first) beside other state
 * elements it rewrites in heap buffers adds min(the copied bytes, those other bytes).
 * Probes outside the corpus, libtpu compile-only, v5e (bench/plan_memory/probes loopx_*,
 * README): a bf16[4096,8192] carry replaced by tanh(x·W) beside an f32 state updated by exp of
 * 16 MiB: +16 MiB; of 256 MiB: +64 MiB (the carry's size); an accumulator the matmul's
 * kernel adds into (select_add_fusion, in place): +0. */
#include <stdio.h>

#include "unit/compile/backend_util.h"

static tpu_chip g_chip;

static const int64_t MiB = 1 << 20;
static const int64_t CONSTS = 4 * 512; /* the step's four scalar constants, in the footprint */

/* The temp of a loop of 2 steps over (i, x, W, v): x' by `newx` (x of type `xty`), v' =
 * exp(v), v = f32[vrows,8192]; the step returns the sums of x and v. */
static int64_t temp_of(int vrows, const char *newx, const char *xty, const char *extra_comp) {
  char src[6000];
  snprintf(src, sizeof src,
           "HloModule copied\n"
           "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT c = f32[] add(a, b)\n}\n"
           "%s"
           "cond {\n"
           "  s = (s32[], %s, bf16[8192,8192], f32[%d,8192]) parameter(0)\n"
           "  i = s32[] get-tuple-element(s), index=0\n"
           "  n = s32[] constant(2)\n"
           "  ROOT c = pred[] compare(i, n), direction=LT\n"
           "}\n"
           "body {\n"
           "  s = (s32[], %s, bf16[8192,8192], f32[%d,8192]) parameter(0)\n"
           "  i = s32[] get-tuple-element(s), index=0\n"
           "  x = %s get-tuple-element(s), index=1\n"
           "  W = bf16[8192,8192] get-tuple-element(s), index=2\n"
           "  v = f32[%d,8192] get-tuple-element(s), index=3\n"
           "  %s\n"
           "  q = f32[%d,8192] exponential(v)\n"
           "  one = s32[] constant(1)\n"
           "  i1 = s32[] add(i, one)\n"
           "  ROOT r = (s32[], %s, bf16[8192,8192], f32[%d,8192]) tuple(i1, x1, W, q)\n"
           "}\n"
           "ENTRY e {\n"
           "  x0 = %s parameter(0)\n"
           "  W0 = bf16[8192,8192] parameter(1)\n"
           "  v0 = f32[%d,8192] parameter(2)\n"
           "  i0 = s32[] constant(0)\n"
           "  init = (s32[], %s, bf16[8192,8192], f32[%d,8192]) tuple(i0, x0, W0, v0)\n"
           "  l = (s32[], %s, bf16[8192,8192], f32[%d,8192]) while(init), condition=cond, body=body\n"
           "  xf = %s get-tuple-element(l), index=1\n"
           "  vf = f32[%d,8192] get-tuple-element(l), index=3\n"
           "  z = f32[] constant(0)\n"
           "  xc = f32[8192,8192] convert(xf)\n"
           "  rx = f32[] reduce(xc, z), dimensions={0,1}, to_apply=add\n"
           "  rv = f32[] reduce(vf, z), dimensions={0,1}, to_apply=add\n"
           "  ROOT out = f32[] add(rx, rv)\n"
           "}\n",
           extra_comp, xty, vrows, xty, vrows, xty, vrows, newx, vrows, xty, vrows, xty, vrows, xty, vrows, xty, vrows,
           xty, vrows);
  tpu_module *m = parse(src);
  CHECK(m != NULL);
  if (!m) return -1;
  tpu_diag d;
  tpu_program *p = compile(m, &g_chip, &d);
  if (!p) fprintf(stderr, "compile: %s\n", d.msg);
  CHECK(p != NULL);
  /* the heap and the copied carry: the footprint less arguments, outputs and constants
   * (memory_analysis()'s temp adds the heap's fragmentation where it is larger:
   * test_buffer_all_reduce memory_analysis_counts_fragmentation) */
  int64_t t = p ? p->hbm_footprint - p->hbm_arg - p->hbm_out + p->hbm_alias - CONSTS : -1;
  if (p) printf("heap and copied carry %lld, memory_analysis() temp %lld bytes\n", (long long)t, (long long)p->hbm_temp);
  tpu_program_free(p);
  tpu_module_free(m);
  return t;
}

int main(void) {
  if (!closed_form_v5e(&g_chip)) return 1;
  const char *bx = "bf16[8192,8192]", *fx = "f32[8192,8192]";
  const char *dotx = "x1 = bf16[8192,8192] dot(x, W), lhs_contracting_dims={1}, rhs_contracting_dims={0}";
  const char *tanh_comp =
      "dt {\n"
      "  p0 = bf16[8192,8192] parameter(0)\n"
      "  p1 = bf16[8192,8192] parameter(1)\n"
      "  d = bf16[8192,8192] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  ROOT t = bf16[8192,8192] tanh(d)\n"
      "}\n";
  const char *acc_comp =
      "da {\n"
      "  p0 = f32[8192,8192] parameter(0)\n"
      "  p1 = bf16[8192,8192] parameter(1)\n"
      "  d = f32[8192,8192] dot(p1, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  ROOT a = f32[8192,8192] add(p0, d)\n"
      "}\n";
  /* 400 MiB of heap without it: the carry's state (128 MiB) and v's beside the loop, the
   * f32 convert of the final carry (256 MiB) after it; memory_analysis() adds the term even
   * where the heap's peak lies outside the loop (probe loopx_v16_post: +16.2 MiB) */
  CHECK_EQ_INT(temp_of(512, dotx, bx, ""), 400 * MiB + 16 * MiB);
  CHECK_EQ_INT(temp_of(8192, dotx, bx, ""), 640 * MiB + 128 * MiB); /* min: the carry's 128 MiB */
  CHECK_EQ_INT(temp_of(512, "x1 = bf16[8192,8192] fusion(x, W), kind=kOutput, calls=dt", bx, tanh_comp),
               400 * MiB + 16 * MiB);
  /* x + A·W in the matmul's kernel: the accumulator streams beside the result, in place */
  CHECK_EQ_INT(temp_of(512, "x1 = f32[8192,8192] fusion(x, W), kind=kOutput, calls=da", fx, acc_comp), 272 * MiB + 512);
  CHECK_DONE();
}
