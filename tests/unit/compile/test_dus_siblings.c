/* A loop step's updates of its stacked outputs at the step's position run as one multi-output
 * fusion (compile/passes/fuse_ops.c tpu__fuse_dus_siblings), as the XLA TPU compiler's
 * compiled LSTM training step writes six f32 stacks in one bitcast_dynamic-update-slice
 * fusion, at one start index or at several; with TPUSIM_NO_DUS_SIBLINGS=1 a fusion holds one update and the rest are kernels. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "passes_util.h"

/* A scan of 8 steps: a = tanh(h), e = exp(a), b = e a; a and b stacked at step i, b + e
 * carried on (its own kernel).
 * With `shift`, b's stack is written one row further on: a different position, one fusion
 * still (the compiler's, bench/fidelity/probes/dus_siblings.py). */
static char *scan(int shift) {
  static char buf[4096];
  snprintf(buf, sizeof buf,
           "HloModule scan\n"
           "cond {\n s = (s32[], f32[4,128], f32[9,4,128], f32[9,4,128]) parameter(0)\n"
           " i = s32[] get-tuple-element(s), index=0\n n = s32[] constant(8)\n"
           " ROOT c = pred[] compare(i, n), direction=LT\n}\n"
           "body {\n s = (s32[], f32[4,128], f32[9,4,128], f32[9,4,128]) parameter(0)\n"
           " i = s32[] get-tuple-element(s), index=0\n h = f32[4,128] get-tuple-element(s), index=1\n"
           " A = f32[9,4,128] get-tuple-element(s), index=2\n B = f32[9,4,128] get-tuple-element(s), index=3\n"
           " z = s32[] constant(0)\n one = s32[] constant(1)\n i1 = s32[] add(i, one)\n"
           " a = f32[4,128] tanh(h)\n e = f32[4,128] exponential(a)\n b = f32[4,128] multiply(e, a)\n"
           " g = f32[4,128] add(b, e)\n"
           " ra = f32[1,4,128] reshape(a)\n rb = f32[1,4,128] reshape(b)\n"
           " A1 = f32[9,4,128] dynamic-update-slice(A, ra, i, z, z)\n"
           " B1 = f32[9,4,128] dynamic-update-slice(B, rb, %s, z, z)\n"
           " ROOT r = (s32[], f32[4,128], f32[9,4,128], f32[9,4,128]) tuple(i1, g, A1, B1)\n}\n"
           "ENTRY e {\n h0 = f32[4,128] parameter(0)\n A0 = f32[9,4,128] parameter(1)\n"
           " B0 = f32[9,4,128] parameter(2)\n i0 = s32[] constant(0)\n"
           " init = (s32[], f32[4,128], f32[9,4,128], f32[9,4,128]) tuple(i0, h0, A0, B0)\n"
           " l = (s32[], f32[4,128], f32[9,4,128], f32[9,4,128]) while(init), condition=cond, body=body\n"
           " ROOT o = f32[9,4,128] get-tuple-element(l), index=3\n}\n",
           shift ? "i1" : "i");
  return buf;
}

/* Kernels of the loop body after fusion: its fusions and its bare updates. */
static int body_kernels(const char *txt) {
  const char *b = strstr(txt, "\nbody");
  if (!b) return -1;
  const char *e = strstr(b, "\n}");
  char *body = strndup(b, e ? (size_t)(e - b) : strlen(b));
  int k = count_in(body, " fusion(") + count_in(body, " dynamic-update-slice(");
  free(body);
  return k;
}

/* the body's fusion of a, e, b and both updates, and b + e's; with the switch (run this
 * test under TPUSIM_NO_DUS_SIBLINGS=1: it fails) a's update is one fusion, b's another */
static void test_siblings(void) {
  char *t0 = dump_src_after(scan(0), "/tmp/tpusim_test_dus0.hlo", "fuse");
  char *t1 = dump_src_after(scan(1), "/tmp/tpusim_test_dus1.hlo", "fuse");
  if (!t0 || !t1) return;
  int same = body_kernels(t0), shifted = body_kernels(t1);
  printf("two stacks at one position: %d kernel(s), at two positions: %d\n", same, shifted);
  CHECK_EQ_INT(same, 2);
  CHECK_EQ_INT(shifted, 2);
  free(t0);
  free(t1);
}

int main(void) {
  test_siblings();
  CHECK_DONE();
}
