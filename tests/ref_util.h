/* Helpers for reference-interpreter unit tests: run HLO text, build input tensors. */
#ifndef TPU_TESTS_REF_UTIL_H
#define TPU_TESTS_REF_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/tensor.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "ref/ref.h"

/* Parses, verifies and runs `src`; returns 1 on success (printing the diagnostic if not). */
static inline int run(const char *src, const tpu_tensor *args, int nargs, tpu_tensor *out) {
  tpu_module *m = NULL;
  tpu_diag d;
  char buf[1200];
  memset(out, 0, sizeof *out);
  tpu_status st = tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d);
  if (st == TPU_OK) st = tpu_ir_verify(m, &d);
  if (st == TPU_OK) st = tpu_ref_run(m, args, nargs, out, &d);
  if (st != TPU_OK) {
    tpu_diag_format(&d, buf, sizeof buf);
    fprintf(stderr, "%s\n%s\n", buf, src);
  }
  tpu_module_free(m);
  return st == TPU_OK;
}

/* A tensor of `t` with `dims`, filled from `v` (row-major) when `v` is not NULL. */
static inline tpu_tensor mk(tpu_dtype t, int rank, const int64_t *dims, const double *v) {
  tpu_tensor x;
  tpu_diag d;
  if (tpu_tensor_alloc(&x, t, rank, dims, &d) != TPU_OK) {
    fprintf(stderr, "alloc failed\n");
    exit(1);
  }
  for (int64_t i = 0; v && i < tpu_tensor_numel(&x); i++) tpu_tensor_set_f64(&x, i, v[i]);
  return x;
}

#endif
