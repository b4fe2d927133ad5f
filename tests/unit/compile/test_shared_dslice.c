/* A loop step's dynamic-slice of a stacked input at scalar offsets that several kernels read
 * is computed in each of them over its window, not a kernel of its own (compile/passes/fuse.c
 * shared_slice): the XLA TPU compiler's LSTM and GRU training steps read their stacked
 * residuals at the step's index inside the backward body's elementwise and matmul kernels,
 * no dynamic-slice kernel in the body (families lstm_train_t64b32i256h256 /
 * gru_train_t64b32i256h256 compiled, every generation; bench/fidelity/probes/scan_bwd.py).
 * With TPUSIM_NO_SHARED_DSLICE=1 the slice is a kernel of its own and this test fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "passes_util.h"

/* A scan of 8 steps reading x = X[i]: a row sum of tanh(x) h carried in s, and exp(x) + h
 * carried in h: two kernels (the reduce's and the elementwise one) read x. */
static const char *k_scan =
    "HloModule scan\n"
    "add {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = f32[] add(a, b)\n}\n"
    "cond {\n s = (s32[], f32[4,128], f32[4], f32[8,4,128]) parameter(0)\n"
    " i = s32[] get-tuple-element(s), index=0\n n = s32[] constant(8)\n"
    " ROOT c = pred[] compare(i, n), direction=LT\n}\n"
    "body {\n s = (s32[], f32[4,128], f32[4], f32[8,4,128]) parameter(0)\n"
    " i = s32[] get-tuple-element(s), index=0\n h = f32[4,128] get-tuple-element(s), index=1\n"
    " r = f32[4] get-tuple-element(s), index=2\n X = f32[8,4,128] get-tuple-element(s), index=3\n"
    " z = s32[] constant(0)\n one = s32[] constant(1)\n i1 = s32[] add(i, one)\n"
    " xs = f32[1,4,128] dynamic-slice(X, i, z, z), dynamic_slice_sizes={1,4,128}\n"
    " x = f32[4,128] reshape(xs)\n"
    " a = f32[4,128] tanh(x)\n p = f32[4,128] multiply(a, h)\n zf = f32[] constant(0)\n"
    " ps = f32[4] reduce(p, zf), dimensions={1}, to_apply=add\n r1 = f32[4] add(r, ps)\n"
    " q = f32[4,128] exponential(x)\n g = f32[4,128] add(q, h)\n"
    " ROOT o = (s32[], f32[4,128], f32[4], f32[8,4,128]) tuple(i1, g, r1, X)\n}\n"
    "ENTRY e {\n h0 = f32[4,128] parameter(0)\n r0 = f32[4] parameter(1)\n X0 = f32[8,4,128] parameter(2)\n"
    " i0 = s32[] constant(0)\n"
    " init = (s32[], f32[4,128], f32[4], f32[8,4,128]) tuple(i0, h0, r0, X0)\n"
    " l = (s32[], f32[4,128], f32[4], f32[8,4,128]) while(init), condition=cond, body=body\n"
    " ROOT o = f32[4] get-tuple-element(l), index=2\n}\n";

/* The loop body's computation text after fusion. */
static char *body_of(const char *txt) {
  const char *b = strstr(txt, "\nbody");
  if (!b) return NULL;
  const char *e = strstr(b, "\n}");
  return strndup(b, e ? (size_t)(e - b) : strlen(b));
}

static void test_shared_slice(void) {
  char *t = dump_src_after(k_scan, "/tmp/tpusim_test_shared_dslice.hlo", "fuse");
  if (!t) return;
  char *body = body_of(t);
  CHECK(body != NULL);
  if (body) {
    int bare = count_in(body, " dynamic-slice("), kernels = count_in(body, " fusion(");
    printf("body: %d bare dynamic-slice(s), %d fusion(s)\n", bare, kernels);
    CHECK_EQ_INT(bare, 0);
    CHECK(kernels >= 2);
    free(body);
  }
  free(t);
}

int main(void) {
  test_shared_slice();
  CHECK_DONE();
}
