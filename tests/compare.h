/* Comparing a result leaf with an expected array within |got - want| <= atol + rtol |want|
 * (NaN matches NaN, infinities must be equal, integers exact), shared by the tests that
 * check values against JAX and XLA. */
#ifndef TPU_TESTS_COMPARE_H
#define TPU_TESTS_COMPARE_H

#include <math.h>
#include <stdio.h>

#include "base/tensor.h"

/* Compares one leaf; returns the number of mismatching elements (printing the first few). */
static inline long test_compare_leaf(const char *cname, int k, const tpu_tensor *got, const tpu_tensor *want, double rtol, double atol) {
  if (got->rank != want->rank) {
    fprintf(stderr, "  %s out%d: rank %d, want %d\n", cname, k, got->rank, want->rank);
    return 1;
  }
  for (int i = 0; i < got->rank; i++)
    if (got->dims[i] != want->dims[i]) {
      fprintf(stderr, "  %s out%d: dim %d is %lld, want %lld\n", cname, k, i, (long long)got->dims[i],
              (long long)want->dims[i]);
      return 1;
    }
  if (tpu_dtype_is_complex(got->dtype) || tpu_dtype_is_complex(want->dtype)) {
    /* complex: |got - want| <= atol + rtol |want| with complex moduli; NaN parts match NaN */
    if (got->dtype != want->dtype) {
      fprintf(stderr, "  %s out%d: dtype %s, want %s\n", cname, k, tpu_dtype_name(got->dtype), tpu_dtype_name(want->dtype));
      return 1;
    }
    tpu_tensor gp = *got, wp = *want;
    gp.dtype = wp.dtype = tpu_dtype_complex_part(got->dtype);
    long cbad = 0;
    for (int64_t i = 0; i < tpu_tensor_numel(got); i++) {
      double gr = tpu_tensor_get_f64(&gp, 2 * i), gi = tpu_tensor_get_f64(&gp, 2 * i + 1);
      double wr = tpu_tensor_get_f64(&wp, 2 * i), wi = tpu_tensor_get_f64(&wp, 2 * i + 1);
      int ok;
      if (isnan(gr) || isnan(gi) || isnan(wr) || isnan(wi)) ok = (isnan(gr) || isnan(gi)) && (isnan(wr) || isnan(wi));
      else if (isinf(gr) || isinf(gi) || isinf(wr) || isinf(wi)) ok = gr == wr && gi == wi;
      else ok = hypot(gr - wr, gi - wi) <= atol + rtol * hypot(wr, wi);
      if (!ok && cbad < 5)
        fprintf(stderr, "  %s out%d[%lld]: got (%.9g, %.9g), want (%.9g, %.9g)\n", cname, k, (long long)i, gr, gi, wr,
                wi);
      if (!ok) cbad++;
    }
    return cbad;
  }
  int is_float = tpu_dtype_is_float(got->dtype);
  if (is_float != tpu_dtype_is_float(want->dtype)) {
    fprintf(stderr, "  %s out%d: dtype %s, want %s\n", cname, k, tpu_dtype_name(got->dtype), tpu_dtype_name(want->dtype));
    return 1;
  }
  long bad = 0;
  double worst = 0;
  int64_t n = tpu_tensor_numel(got);
  for (int64_t i = 0; i < n; i++) {
    int ok;
    if (is_float) {
      double g = tpu_tensor_get_f64(got, i), w = tpu_tensor_get_f64(want, i);
      if (isnan(w) || isnan(g)) ok = isnan(w) && isnan(g);
      else if (isinf(w) || isinf(g)) ok = g == w;
      else {
        double err = fabs(g - w), lim = atol + rtol * fabs(w);
        ok = err <= lim;
        if (err / (lim > 0 ? lim : 1) > worst) worst = err / (lim > 0 ? lim : 1);
      }
      if (!ok && bad < 5)
        fprintf(stderr, "  %s out%d[%lld]: got %.9g, want %.9g\n", cname, k, (long long)i, g, w);
    } else {
      int64_t g = tpu_tensor_get_i64(got, i), w = tpu_tensor_get_i64(want, i);
      ok = g == w;
      if (!ok && bad < 5)
        fprintf(stderr, "  %s out%d[%lld]: got %lld, want %lld\n", cname, k, (long long)i, (long long)g, (long long)w);
    }
    if (!ok) bad++;
  }
  return bad;
}

#endif
