/* Helpers shared by the elementwise reference-kernel tests (test_elementwise*.c): tensors from
 * literals, HLO snippets run on the reference, bit and ulp comparisons. */
#ifndef TPU_TESTS_ELEMENTWISE_UTIL_H
#define TPU_TESTS_ELEMENTWISE_UTIL_H

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

static inline tpu_tensor mk(tpu_dtype t, int n, const void *data) {
  tpu_tensor v;
  int64_t dims[1] = {n};
  if (tpu_tensor_alloc(&v, t, 1, dims, NULL) != TPU_OK) abort();
  memcpy(v.data, data, tpu_dtype_size(t) * (size_t)n);
  return v;
}

static inline tpu_tensor mk_bf16(int n, const float *f) {
  tpu_bf16 b[64];
  for (int i = 0; i < n; i++) b[i] = tpu_bf16_from_f32(f[i]);
  return mk(TPU_BF16, n, b);
}

static inline tpu_tensor mk_f16(int n, const uint16_t *bits) { return mk(TPU_F16, n, bits); }

/* Parses and runs `hlo` on args; the result goes to *out (freed by the caller). */
static inline tpu_status run_prog(const char *hlo, tpu_tensor *args, int nargs, tpu_tensor *out, tpu_diag *d) {
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

static inline tpu_tensor run_ok(const char *hlo, tpu_tensor *args, int nargs) {
  tpu_tensor out;
  tpu_diag d;
  memset(&d, 0, sizeof d);
  tpu_status st = run_prog(hlo, args, nargs, &out, &d);
  if (st != TPU_OK) fprintf(stderr, "run failed: %s\n%s\n", d.msg, hlo);
  CHECK_EQ_INT(st, TPU_OK);
  return out;
}

/* r = OP(a) with result type rty (ty for the operand). */
static inline tpu_tensor un(const char *ty, const char *rty, const char *op, const char *attrs, tpu_tensor a) {
  char h[512];
  int n = (int)a.dims[0];
  snprintf(h, sizeof h, "HloModule t\nENTRY e {\n  a = %s[%d] parameter(0)\n  ROOT r = %s[%d] %s(a)%s\n}\n", ty, n,
           rty, n, op, attrs);
  return run_ok(h, &a, 1);
}

static inline tpu_tensor bin(const char *ty, const char *rty, const char *op, const char *attrs, tpu_tensor a, tpu_tensor b) {
  char h[512];
  int n = (int)a.dims[0];
  tpu_tensor args[2] = {a, b};
  snprintf(h, sizeof h,
           "HloModule t\nENTRY e {\n  a = %s[%d] parameter(0)\n  b = %s[%d] parameter(1)\n  ROOT r = %s[%d] %s(a, b)%s\n}\n",
           ty, n, ty, n, rty, n, op, attrs);
  return run_ok(h, args, 2);
}

static inline uint32_t fbits(float f) { return tpu_f32_bits(f); }

/* Distance in units in the last place between two finite floats of the same sign. */
static inline long ulps32(float a, float b) {
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

#endif
