/* The reference interpreter's while loops (both backends compute values through it): a
 * loop's iterations reuse what a call of its condition and body needs (use counts, fusion
 * plan, the call's frame), so an iteration allocates only the values it computes. Checked by
 * counting allocations (the allocation hook's counter) for two trip counts of one loop:
 * their difference per iteration is the loop's own values, whatever the trip count. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "hlo/hlo.h"
#include "ref/ref.h"
#include "ref/sloop.h"

/* A loop of n iterations: i += 1, x = x * 2 + 1 through a called computation, and
 * acc += iota * 3 (a value of constants alone: computed at the first iteration only). */
static const char *SRC =
    "HloModule loop\n"
    "step {\n"
    "  p = f32[4] parameter(0)\n"
    "  two = f32[] constant(2)\n"
    "  b = f32[4] broadcast(two), dimensions={}\n"
    "  m = f32[4] multiply(p, b)\n"
    "  one = f32[] constant(1)\n"
    "  c = f32[4] broadcast(one), dimensions={}\n"
    "  ROOT r = f32[4] add(m, c)\n"
    "}\n"
    "body {\n"
    "  s = (s32[], f32[4], s32[], s32[4]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  x = f32[4] get-tuple-element(s), index=1\n"
    "  n = s32[] get-tuple-element(s), index=2\n"
    "  acc = s32[4] get-tuple-element(s), index=3\n"
    "  k = s32[] constant(1)\n"
    "  j = s32[] add(i, k)\n"
    "  y = f32[4] call(x), to_apply=step\n"
    "  io = s32[4] iota(), iota_dimension=0\n"
    "  three = s32[] constant(3)\n"
    "  b3 = s32[4] broadcast(three), dimensions={}\n"
    "  q = s32[4] multiply(io, b3)\n"
    "  acc2 = s32[4] add(acc, q)\n"
    "  ROOT t = (s32[], f32[4], s32[], s32[4]) tuple(j, y, n, acc2)\n"
    "}\n"
    "cond {\n"
    "  s = (s32[], f32[4], s32[], s32[4]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  n = s32[] get-tuple-element(s), index=2\n"
    "  ROOT lt = pred[] compare(i, n), direction=LT\n"
    "}\n"
    "ENTRY e {\n"
    "  n = s32[] parameter(0)\n"
    "  z = s32[] constant(0)\n"
    "  x0 = f32[4] constant({0, 1, 2, 3})\n"
    "  a0 = s32[4] constant({0, 0, 0, 0})\n"
    "  s0 = (s32[], f32[4], s32[], s32[4]) tuple(z, x0, n, a0)\n"
    "  w = (s32[], f32[4], s32[], s32[4]) while(s0), condition=cond, body=body\n"
    "  x = f32[4] get-tuple-element(w), index=1\n"
    "  a = s32[4] get-tuple-element(w), index=3\n"
    "  ROOT r = (f32[4], s32[4]) tuple(x, a)\n"
    "}\n";

/* Runs the loop for n iterations; returns the allocations the run made, checks the values. */
static long run_loop(const tpu_module *m, int n) {
  tpu_diag d;
  tpu_tensor arg, out;
  if (tpu_tensor_alloc(&arg, TPU_S32, 0, NULL, &d) != TPU_OK) return -1;
  tpu_tensor_set_i64(&arg, 0, n);
  tpu_alloc_fail_after(0); /* resets the counter */
  tpu_status st = tpu_ref_run(m, &arg, 1, &out, &d);
  long allocs = tpu_alloc_fail_after(0);
  CHECK_EQ_INT(st, TPU_OK);
  if (st == TPU_OK) {
    for (int e = 0; e < 4; e++) { /* x -> 2x + 1, n times: (x + 1) * 2^n - 1 */
      double want = (e + 1.0) * (double)(1 << n) - 1.0;
      CHECK(tpu_tensor_get_f64(&out.elems[0], e) == want);
      CHECK(tpu_tensor_get_i64(&out.elems[1], e) == 3 * e * n);
    }
    tpu_tensor_free(&out);
  }
  tpu_tensor_free(&arg);
  return allocs;
}

int main(void) {
  tpu_module *m = NULL;
  tpu_diag d;
  tpu__sloop_enable(0); /* the loop stepped by the interpreter (compiled to slots: test_interp_sloop) */
  CHECK_EQ_INT(tpu_hlo_parse("loop.hlo", SRC, strlen(SRC), &m, &d), TPU_OK);
  if (!m) CHECK_DONE();
  long a4 = run_loop(m, 4), a12 = run_loop(m, 12);
  double per = (double)(a12 - a4) / 8.0;
  /* An iteration computes: the condition's pred; the body's j, acc2 and the call's y (its two
   * broadcasts fuse into the multiply-add); the root tuple's element array. The call frames
   * of cond, body and step are the plans'; io, b3 and q are computed once; n passes from one
   * iteration's state to the next without a copy (the loop gives its state to the body, whose
   * get-tuple-elements take their elements: 6 per iteration without). */
  printf("while loop: %ld allocations for 4 iterations, %ld for 12: %.2f per iteration\n", a4, a12, per);
  CHECK(a4 > 0 && a12 > a4);
  CHECK(per <= 5.0);
  /* A module that keeps its plans (tpu_module.keep_plans: api/run.c's compiled programs)
   * makes them at its first run only: the next runs allocate what their values need (the
   * iterations' values, io/b3/q folded at the first run and kept). Without it every run
   * makes its plans again: the same count each time. */
  CHECK_EQ_INT((int)run_loop(m, 4), (int)a4);
  m->keep_plans = 1;
  long k1 = run_loop(m, 4), k2 = run_loop(m, 4), k3 = run_loop(m, 12);
  printf("kept plans: %ld allocations for the first run of 4 iterations, %ld for the next, %ld for 12\n", k1, k2, k3);
  CHECK_EQ_INT((int)k1, (int)a4 + 1); /* and the block the module keeps them in */
  CHECK(k2 < a4 - 16);                /* plans, frames and the folded io, b3, q: none made again */
  CHECK(k3 - k2 == a12 - a4);         /* the iterations' own values, as before */
  tpu_module_free(m); /* frees the kept plans (ASan: no leak) */
  CHECK_DONE();
}
