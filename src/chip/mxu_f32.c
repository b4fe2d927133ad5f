/* The MXU on f32 operands: each operand split into bf16 parts (exactly), the parts' products
 * run through the bf16 kernel (mxu_kernel.c) in the passes the precision config asks for, and
 * summed in a fixed order (the contract is in mxu.h; docs/numerics.md, "f32 operands"). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/tensor.h"
#include "chip/mxu.h"
#include "chip/mxu_kernel_int.h"

/* A NaN the array returns: the canonical quiet NaN (as mxu_kernel.c's). */
static inline float canon_nan(float v) { return isnan(v) ? tpu_f32_from_bits(0x7fc00000u) : v; }

/* ---- f32 operands: bf16 passes per the precision config ---- */

/* tpu__mxu_split_f32, inlined into the splitting loops. */
static inline void split_f32(float x, tpu_bf16 parts[3]) {
  tpu_bf16 zero = {0};
  uint32_t u = tpu_f32_bits(x);
  parts[1] = parts[2] = zero;
  if ((u & 0x7fffffffu) >= 0x7f800000u) { /* inf/NaN: x - x1 would be NaN */
    parts[0] = tpu_bf16_from_f32(x);
    return;
  }
  tpu_bf16 hi = tpu_bf16_from_f32(x);
  if ((hi.bits & 0x7fffu) == 0x7f80u) hi.bits = (uint16_t)(u >> 16); /* overflowed: truncate */
  float r1 = x - tpu_bf16_to_f32(hi); /* exact: hi is within a factor 2 of x (Sterbenz) */
  tpu_bf16 mid = tpu_bf16_from_f32(r1);
  float r2 = r1 - tpu_bf16_to_f32(mid); /* exact for the same reason */
  parts[0] = hi;
  parts[1] = mid;
  parts[2] = tpu_bf16_from_f32(r2);
}

void tpu__mxu_split_f32(float x, tpu_bf16 parts[3]) { split_f32(x, parts); }

/* The first nparts parts of n values, as f32 (exact): part q of x[i] at out[q * n + i]. */
static void split_all(const float *x, size_t n, int nparts, float *out) {
  if (nparts == 1) {
    /* Part 0 alone, branch-free so it vectorizes: bf16(x) rounded to nearest even (NaN:
     * quieted, its top bits kept), a finite x that overflows to inf truncated instead;
     * the same bits as split_f32's part 0. */
    for (size_t i = 0; i < n; i++) {
      uint32_t u, a, r, o;
      memcpy(&u, &x[i], 4);
      a = u & 0x7fffffffu;
      r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
      r = (a < 0x7f800000u && (r & 0x7fffffffu) == 0x7f800000u) ? (u & 0xffff0000u) : r;
      o = a > 0x7f800000u ? ((u & 0xffff0000u) | 0x00400000u) : r;
      memcpy(&out[i], &o, 4);
    }
    return;
  }
  for (size_t i = 0; i < n; i++) {
    tpu_bf16 s[3];
    split_f32(x[i], s);
    for (int q = 0; q < nparts; q++) out[q * n + i] = tpu_bf16_to_f32(s[q]);
  }
}
void tpu__mxu_round_bf16(const float *x, size_t n, float *out) { split_all(x, n, 1, out); }

tpu_status tpu_mxu_matmul_f32(const float *A, const float *W, float *out, int64_t M, int64_t K,
                              int64_t N, int64_t R, tpu_precision p, int nthreads, tpu_diag *d) {
  return tpu__mxu_matmul_f32_batch(A, W, out, 1, M, K, N, R, p, nthreads, d);
}

tpu_status tpu__mxu_matmul_f32_batch(const float *A, const float *W, float *out, int64_t nb, int64_t M,
                                     int64_t K, int64_t N, int64_t R, tpu_precision p, int nthreads,
                                     tpu_diag *d) {
  if (nb < 1)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "matmul: %lld matrices", (long long)nb);
  if (M < 0 || K < 0 || N < 0)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "matmul: negative size %lldx%lldx%lld",
                    (long long)M, (long long)K, (long long)N);
  if (R < 1)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "matmul: array depth R=%lld must be >= 1",
                    (long long)R);
  if (p != TPU_PREC_DEFAULT && p != TPU_PREC_HIGH && p != TPU_PREC_HIGHEST)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "matmul: unknown precision %d", (int)p);
  size_t mk, kn, mn, bytes;
  if (!tpu_mul_ok((size_t)M, (size_t)K, &mk) || !tpu_mul_ok((size_t)K, (size_t)N, &kn) ||
      !tpu_mul_ok((size_t)M, (size_t)N, &mn) || !tpu_mul_ok(mk, (size_t)nb, &mk) ||
      !tpu_mul_ok(kn, (size_t)nb, &kn) || !tpu_mul_ok(mn, (size_t)nb, &mn) || mk > SIZE_MAX - kn ||
      !tpu_mul_ok(mk + kn, 3 * sizeof(tpu_bf16), &bytes) ||
      !tpu_mul_ok(mn, sizeof(float), &bytes))
    return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(), "matmul: %lldx%lldx%lld is too large",
                    (long long)M, (long long)K, (long long)N);
  if ((mk && !A) || (kn && !W) || (mn && !out))
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "matmul: NULL operand");
  if (mn == 0) return TPU_OK;
  int nparts = p == TPU_PREC_DEFAULT ? 1 : p == TPU_PREC_HIGH ? 2 : 3;
  float *ap = tpu_malloc((mk ? mk : 1) * nparts * sizeof(float));
  float *wp = tpu_malloc((kn ? kn : 1) * nparts * sizeof(float));
  float *tmp = nparts > 1 ? tpu_malloc(mn * sizeof(float)) : NULL;
  if (!ap || !wp || (nparts > 1 && !tmp)) {
    tpu_free(ap);
    tpu_free(wp);
    tpu_free(tmp);
    return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "matmul: out of memory for bf16 parts");
  }
  /* Part q of A lives at ap + q*mk, part q of W at wp + q*kn (mk, kn, mn: all nb matrices). */
  split_all(A, mk, nparts, ap);
  split_all(W, kn, nparts, wp);
  if (nparts == 1) {
    tpu__mxu_matmul_bf16f(ap, wp, out, nb, M, K, N, R, nthreads);
  } else {
    /* The low passes, smallest terms first (pairs are {A part, W part}); then NaNs in their
     * sum become +0 (infinities stay) and the high pass A1 x W1 is added last. */
    static const int high_passes[2][2] = {{1, 0}, {0, 1}};
    static const int highest_passes[5][2] = {{1, 1}, {0, 2}, {2, 0}, {0, 1}, {1, 0}};
    const int(*passes)[2] = nparts == 2 ? high_passes : highest_passes;
    int npasses = nparts == 2 ? 2 : 5;
    for (int s = 0; s < npasses; s++) {
      const float *pa = ap + passes[s][0] * mk, *pw = wp + passes[s][1] * kn;
      tpu__mxu_matmul_bf16f(pa, pw, s == 0 ? out : tmp, nb, M, K, N, R, nthreads);
      if (s > 0)
        for (size_t i = 0; i < mn; i++) out[i] = out[i] + tmp[i];
    }
    for (size_t i = 0; i < mn; i++)
      if (isnan(out[i])) out[i] = 0.0f;
    tpu__mxu_matmul_bf16f(ap, wp, tmp, nb, M, K, N, R, nthreads);
    for (size_t i = 0; i < mn; i++) out[i] = canon_nan(out[i] + tmp[i]);
  }
  tpu_free(ap);
  tpu_free(wp);
  tpu_free(tmp);
  return TPU_OK;
}
