/* Fast MXU kernels: bit-identical to a scalar reference of the mxu.h contract on many shapes,
 * array depths, thread counts and special values; int8 wrap-around; f32 precision passes. */
#include <float.h>
#include <math.h>

#include "base/alloc.h"
#include "chip/mxu.h"
#include "chip/mxu_kernel_int.h"
#include "check.h"

/* ---- The contract, written out independently of the kernel ---- */

/* out[m,n]: for each K-tile of R rows, psum starts at +0 and takes psum + a*w (the product
 * rounded to f32, then the sum, as the PE-level array does) down the tile in k order; the
 * accumulator stores the first tile's psum and adds later ones; a NaN result is written as
 * 0x7fc00000. ISO C mode keeps a*w + psum from being contracted into an FMA. */
static void ref_bf16(const tpu_bf16 *A, const tpu_bf16 *W, float *out, int64_t M, int64_t K,
                     int64_t N, int64_t R) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      float acc = 0.0f;
      for (int64_t t = 0; t * R < K; t++) {
        float psum = 0.0f;
        for (int64_t r = 0; r < R && t * R + r < K; r++) {
          int64_t k = t * R + r;
          psum = psum + tpu_bf16_to_f32(A[m * K + k]) * tpu_bf16_to_f32(W[k * N + n]);
        }
        acc = t == 0 ? psum : acc + psum;
      }
      out[m * N + n] = isnan(acc) ? tpu_f32_from_bits(0x7fc00000u) : acc;
    }
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 16);
}
static float rnd_unit(void) { return (float)((rnd() & 0xffffff) / 8388608.0 - 1.0); }

/* bf16 specials: NaNs (both signs, payloads), infinities, signed zeros, subnormals, the
 * largest finite, the smallest normal, and values whose products overflow or underflow. */
static const uint16_t specials[] = {0x7fc0, 0xffc1, 0x7f81, 0x7f80, 0xff80, 0x0000, 0x8000,
                                    0x0001, 0x8001, 0x007f, 0x0040, 0x7f7f, 0xff7f, 0x0080,
                                    0x8080, 0x5f80, 0x1b80, 0x9b80, 0x3f80, 0xbf80};

/* mode 0: random normal-range values; 1: random with 1/8 specials; 2: any bit pattern. */
static void fill_bf16(tpu_bf16 *x, int64_t n, int mode) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t r = rnd();
    if (mode == 2)
      x[i].bits = (uint16_t)r;
    else if (mode == 1 && (r & 7) == 0)
      x[i].bits = specials[(r >> 3) % (sizeof specials / sizeof specials[0])];
    else
      x[i] = tpu_bf16_from_f32(rnd_unit() * 4.0f);
  }
}

static int same_bits(const float *a, const float *b, int64_t n, int64_t *where) {
  for (int64_t i = 0; i < n; i++)
    if (tpu_f32_bits(a[i]) != tpu_f32_bits(b[i])) {
      *where = i;
      return 0;
    }
  return 1;
}

/* Runs kernel and reference on one random case; returns 1 when bit-identical. */
static int check_case(int64_t M, int64_t K, int64_t N, int64_t R, int threads, int mode) {
  tpu_bf16 *A = malloc(sizeof(tpu_bf16) * (size_t)(M * K + 1));
  tpu_bf16 *W = malloc(sizeof(tpu_bf16) * (size_t)(K * N + 1));
  float *got = malloc(sizeof(float) * (size_t)(M * N));
  float *want = malloc(sizeof(float) * (size_t)(M * N));
  fill_bf16(A, M * K, mode);
  fill_bf16(W, K * N, mode);
  for (int64_t i = 0; i < M * N; i++) got[i] = 12345.0f; /* every entry must be written */
  tpu_mxu_matmul_bf16(A, W, got, M, K, N, R, threads);
  ref_bf16(A, W, want, M, K, N, R);
  int64_t at = -1;
  int ok = same_bits(got, want, M * N, &at);
  if (!ok)
    fprintf(stderr, "mismatch M=%lld K=%lld N=%lld R=%lld threads=%d mode=%d at %lld: %08x vs %08x\n",
            (long long)M, (long long)K, (long long)N, (long long)R, threads, mode, (long long)at,
            tpu_f32_bits(got[at]), tpu_f32_bits(want[at]));
  free(A);
  free(W);
  free(got);
  free(want);
  return ok;
}

/* One-row dot product through the kernel: out = sum over k of a[k]*w[k] with depth R. */
static float dot1(const float *a, const float *w, int64_t K, int64_t R) {
  tpu_bf16 A[16], W[16];
  for (int64_t k = 0; k < K; k++) {
    A[k] = tpu_bf16_from_f32(a[k]);
    W[k] = tpu_bf16_from_f32(w[k]);
  }
  float out = -1.0f;
  tpu_mxu_matmul_bf16(A, W, &out, 1, K, 1, R, 1);
  return out;
}

static void test_hand_cases(void) {
  const float big = 16777216.0f; /* 2^24: adding 1 rounds back to 2^24 (tie to even) */
  float ones[4] = {1, 1, 1, 1}, w[4] = {big, 1, 1, 1};
  /* The K-tile depth changes the bits: R=2 sums the trailing 1s in their own tile. */
  CHECK_EQ_INT(tpu_f32_bits(dot1(ones, w, 4, 4)), tpu_f32_bits(big));
  CHECK_EQ_INT(tpu_f32_bits(dot1(ones, w, 4, 1)), tpu_f32_bits(big));
  CHECK_EQ_INT(tpu_f32_bits(dot1(ones, w, 4, 2)), tpu_f32_bits(big + 2.0f));
  /* psum enters as +0: (-1)*0 gives +0, not -0. */
  float m1[1] = {-1}, z[1] = {0};
  CHECK_EQ_INT(tpu_f32_bits(dot1(m1, z, 1, 1)), 0);
  /* A product that underflows: -2^-200 rounds to -0, and +0 + -0 = +0 (a fused
   * multiply-add would give -0). */
  float t1[1] = {ldexpf(1, -100)}, t2[1] = {-ldexpf(1, -100)};
  CHECK_EQ_INT(tpu_f32_bits(dot1(t1, t2, 1, 1)), 0);
  /* The product is rounded before the add: 2^-149 + (2^-150 rounded to 0) = 2^-149, where
   * one rounding of 1.5 * 2^-149 would tie to 2^-148. */
  float u1[2] = {ldexpf(1, -75), ldexpf(1, -75)}, u2[2] = {ldexpf(1, -74), ldexpf(1, -75)};
  CHECK_EQ_INT(tpu_f32_bits(dot1(u1, u2, 2, 2)), 1);
  /* Subnormal products are kept, not flushed. */
  float s1[1] = {ldexpf(1, -70)}, s2[1] = {ldexpf(1.5f, -70)};
  CHECK_EQ_INT(tpu_f32_bits(dot1(s1, s2, 1, 4)), tpu_f32_bits(ldexpf(1.5f, -140)));
  /* A product past FLT_MAX is inf before it meets -max in the psum (one rounding would
   * give max). */
  float bmax = tpu_bf16_to_f32((tpu_bf16){0x7f7f});
  float o1[2] = {1, bmax}, o2[2] = {-bmax, 2};
  CHECK_EQ_INT(tpu_f32_bits(dot1(o1, o2, 2, 2)), 0x7f800000u);
  /* Signed zeros: -0 products added to a psum that starts at +0 give +0, in every tile. */
  float z1[2] = {-1, 1}, z2[2] = {0, -0.0f};
  CHECK_EQ_INT(tpu_f32_bits(dot1(z1, z2, 2, 1)), 0);
  /* NaN in, any sign or payload: canonical quiet NaN out; inf*0 and inf-inf likewise. */
  tpu_bf16 na[2] = {{0xffc1}, {0x3f80}}, nw[2] = {{0x3f80}, {0x3f80}};
  float out = 0;
  tpu_mxu_matmul_bf16(na, nw, &out, 1, 2, 1, 128, 1);
  CHECK_EQ_INT(tpu_f32_bits(out), 0x7fc00000u);
  float i1[2] = {INFINITY, 1}, i2[2] = {0, 1};
  CHECK_EQ_INT(tpu_f32_bits(dot1(i1, i2, 2, 2)), 0x7fc00000u);
  float i3[2] = {INFINITY, -INFINITY}, i4[2] = {1, 1};
  CHECK_EQ_INT(tpu_f32_bits(dot1(i3, i4, 2, 1)), 0x7fc00000u);
  CHECK_EQ_INT(tpu_f32_bits(dot1(i3, i4, 1, 1)), 0x7f800000u);
  /* K = 0: no tiles, the accumulator's +0. */
  out = 5;
  tpu_mxu_matmul_bf16(na, nw, &out, 1, 0, 1, 8, 1);
  CHECK_EQ_INT(tpu_f32_bits(out), 0);
}

static void test_shapes(void) {
  static const int64_t depths[] = {1, 3, 8, 128, 256};
  static const int64_t dims[] = {1, 2, 5, 6, 7, 15, 16, 17, 31, 33, 64, 97, 130, 257, 300};
  int nd = (int)(sizeof dims / sizeof dims[0]);
  int fails = 0, cases = 0;
  /* A walk through M x K x N triples, each with every depth and a rotating thread count. */
  for (int i = 0; i < 60; i++) {
    int64_t M = dims[rnd() % nd], K = dims[rnd() % nd], N = dims[rnd() % nd];
    if (M * K * N > 3000000) K = 1 + K / 8; /* keep the reference quick */
    for (int r = 0; r < 5; r++, cases++) fails += !check_case(M, K, N, depths[r], 1 + (cases % 4), 1);
  }
  /* The big ones: 300^3, and K past KC_MAX in one tile (psums carried through memory). */
  fails += !check_case(300, 300, 300, 128, 2, 0);
  fails += !check_case(300, 300, 300, 256, 3, 1);
  fails += !check_case(37, 700, 45, 700, 2, 1);
  fails += !check_case(13, 600, 29, 1000000, 4, 1);
  fails += !check_case(40, 517, 70, 513, 1, 1);
  fails += !check_case(1, 300, 300, 128, 4, 1);
  fails += !check_case(300, 300, 1, 128, 4, 1);
  fails += !check_case(200, 600, 3, 600, 2, 1); /* narrow N (C = out^T) with carried psums */
  fails += !check_case(97, 300, 15, 8, 3, 2);
  /* Every thread count on one shape, plus the auto choice. */
  for (int t = 0; t <= 4; t++) fails += !check_case(64, 100, 130, 8, t, 1);
  /* Every bit pattern mixed: NaNs, infinities and huge products everywhere. */
  fails += !check_case(50, 70, 90, 3, 2, 2);
  fails += !check_case(33, 300, 65, 256, 4, 2);
  CHECK_EQ_INT(fails, 0);
}

static void test_scalar_path(void) {
  tpu__mxu_path old = tpu__mxu_set_path(TPU__MXU_PATH_SCALAR);
  CHECK_EQ_STR(tpu__mxu_kernel_name(), "scalar");
  int fails = 0;
  fails += !check_case(17, 40, 33, 3, 1, 1);
  fails += !check_case(70, 300, 50, 128, 2, 1);
  fails += !check_case(20, 600, 20, 600, 3, 2);
  fails += !check_case(50, 300, 4, 256, 2, 1);
  CHECK_EQ_INT(fails, 0);
  tpu__mxu_set_path(old);
}

/* When the packing buffers cannot be allocated the kernel still gives the same bits. */
static void test_alloc_failure(void) {
  int fails = 0;
  for (long n = 1; n <= 3; n++) {
    tpu_alloc_fail_after(n);
    fails += !check_case(40, 300, 50, 256, 1, 1);
    tpu_alloc_fail_after(0);
  }
  CHECK_EQ_INT(fails, 0);
}

/* ---- int8 ---- */

static void test_s8(void) {
  /* Wrap-around: 131073 products of (-128)(-128) = 2^31 + 2^14 wraps to -2^31 + 2^14. */
  int64_t K = 131073;
  int8_t *a = malloc((size_t)K), *w = malloc((size_t)K);
  memset(a, 0x80, (size_t)K);
  memset(w, 0x80, (size_t)K);
  int32_t out = 0;
  tpu_mxu_matmul_s8(a, w, &out, 1, K, 1, 1);
  CHECK_EQ_INT(out, -2147483647 - 1 + 16384);
  free(a);
  free(w);
  /* Random shapes against an int64 sum reduced mod 2^32. */
  static const int64_t shapes[][3] = {{1, 1, 1}, {7, 300, 9}, {64, 129, 513}, {33, 1, 70}, {300, 300, 300}};
  int fails = 0;
  for (int s = 0; s < 5; s++) {
    int64_t M = shapes[s][0], KK = shapes[s][1], N = shapes[s][2];
    int8_t *A = malloc((size_t)(M * KK)), *W = malloc((size_t)(KK * N));
    int32_t *got = malloc(sizeof(int32_t) * (size_t)(M * N));
    for (int64_t i = 0; i < M * KK; i++) A[i] = (int8_t)(rnd() & 0xff);
    for (int64_t i = 0; i < KK * N; i++) W[i] = (int8_t)((rnd() & 1) ? -128 : (int)(rnd() & 0xff));
    for (int path = 0; path < 4; path++) {
      if (!tpu__mxu_path_supported((tpu__mxu_path)path)) continue;
      tpu__mxu_path old = tpu__mxu_set_path((tpu__mxu_path)path);
      tpu_mxu_matmul_s8(A, W, got, M, KK, N, 1 + s % 4);
      tpu__mxu_set_path(old);
      for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
          int64_t sum = 0;
          for (int64_t k = 0; k < KK; k++) sum += (int64_t)A[m * KK + k] * W[k * N + n];
          uint32_t u = (uint32_t)((uint64_t)sum & 0xffffffffu);
          int32_t want = u >= 0x80000000u ? (int32_t)(u - 0x80000000u) - 2147483647 - 1 : (int32_t)u;
          fails += got[m * N + n] != want;
        }
    }
    free(A);
    free(W);
    free(got);
  }
  CHECK_EQ_INT(fails, 0);
}

/* ---- f32 operands ---- */

static float bf(tpu_bf16 b) { return tpu_bf16_to_f32(b); }

static void test_split(void) {
  tpu_bf16 p[3];
  /* 1 + 2^-8 + 2^-17: rounds up to 1 + 2^-7, leaving -2^-8 + 2^-17. */
  float x = 1.0f + ldexpf(1, -8) + ldexpf(1, -17);
  tpu__mxu_split_f32(x, p);
  CHECK(bf(p[0]) == 1.0f + ldexpf(1, -7));
  CHECK(bf(p[1]) == -ldexpf(1, -8));
  CHECK(bf(p[2]) == ldexpf(1, -17));
  /* FLT_MAX would round to inf: the high part truncates to the largest bf16 instead. */
  tpu__mxu_split_f32(FLT_MAX, p);
  CHECK_EQ_INT(p[0].bits, 0x7f7f);
  CHECK((double)bf(p[0]) + bf(p[1]) + bf(p[2]) == (double)FLT_MAX);
  tpu__mxu_split_f32(-INFINITY, p);
  CHECK_EQ_INT(p[0].bits, 0xff80);
  CHECK_EQ_INT(p[1].bits | p[2].bits, 0);
  tpu__mxu_split_f32(NAN, p);
  CHECK(isnan(bf(p[0])));
  CHECK_EQ_INT(p[1].bits | p[2].bits, 0);
  /* Exact for every finite f32 of magnitude >= 2^-110 (sampled). */
  int bad = 0;
  for (int i = 0; i < 200000; i++) {
    uint32_t u = rnd() ^ (rnd() << 16);
    float f = tpu_f32_from_bits(u);
    if (!isfinite(f) || fabsf(f) < ldexpf(1, -110)) continue;
    tpu__mxu_split_f32(f, p);
    bad += (double)bf(p[0]) + (double)bf(p[1]) + (double)bf(p[2]) != (double)f;
  }
  CHECK_EQ_INT(bad, 0);
}

/* The pass plan, recomputed from the bf16 reference: the low passes summed smallest first,
 * NaN -> +0, then the high pass added. */
static void ref_f32(const float *A, const float *W, float *out, int64_t M, int64_t K, int64_t N,
                    int64_t R, tpu_precision p) {
  tpu_bf16 *ap[3], *wp[3];
  for (int q = 0; q < 3; q++) {
    ap[q] = malloc(sizeof(tpu_bf16) * (size_t)(M * K + 1));
    wp[q] = malloc(sizeof(tpu_bf16) * (size_t)(K * N + 1));
  }
  tpu_bf16 s[3];
  for (int64_t i = 0; i < M * K; i++) {
    tpu__mxu_split_f32(A[i], s);
    for (int q = 0; q < 3; q++) ap[q][i] = s[q];
  }
  for (int64_t i = 0; i < K * N; i++) {
    tpu__mxu_split_f32(W[i], s);
    for (int q = 0; q < 3; q++) wp[q][i] = s[q];
  }
  float *t = malloc(sizeof(float) * (size_t)(M * N));
  if (p == TPU_PREC_DEFAULT) {
    ref_bf16(ap[0], wp[0], out, M, K, N, R);
  } else {
    static const int hi3[2][2] = {{1, 0}, {0, 1}};
    static const int hi6[5][2] = {{1, 1}, {0, 2}, {2, 0}, {0, 1}, {1, 0}};
    int n = p == TPU_PREC_HIGH ? 2 : 5;
    for (int i = 0; i < n; i++) {
      const int *pq = p == TPU_PREC_HIGH ? hi3[i] : hi6[i];
      ref_bf16(ap[pq[0]], wp[pq[1]], i ? t : out, M, K, N, R);
      for (int64_t e = 0; i && e < M * N; e++) out[e] += t[e];
    }
    ref_bf16(ap[0], wp[0], t, M, K, N, R);
    for (int64_t e = 0; e < M * N; e++) {
      float v = (isnan(out[e]) ? 0.0f : out[e]) + t[e];
      out[e] = isnan(v) ? tpu_f32_from_bits(0x7fc00000u) : v;
    }
  }
  free(t);
  for (int q = 0; q < 3; q++) {
    free(ap[q]);
    free(wp[q]);
  }
}

static void test_f32_passes(void) {
  tpu_diag d;
  /* One product by hand: x = 1 + 2^-8 + 2^-17 squared. HIGH: (x2*x1 + x1*x2) + x1*x1;
   * HIGHEST adds x2*x2, x1*x3, x3*x1 first. Here every partial sum is exact in f32. */
  float x = 1.0f + ldexpf(1, -8) + ldexpf(1, -17), out = 0;
  double x1 = 1 + ldexp(1, -7), x2 = -ldexp(1, -8), x3 = ldexp(1, -17);
  CHECK_EQ_INT(tpu_mxu_matmul_f32(&x, &x, &out, 1, 1, 1, 128, TPU_PREC_DEFAULT, 1, &d), TPU_OK);
  CHECK(out == (float)(x1 * x1));
  CHECK_EQ_INT(tpu_mxu_matmul_f32(&x, &x, &out, 1, 1, 1, 128, TPU_PREC_HIGH, 1, &d), TPU_OK);
  CHECK(out == (float)(2 * x1 * x2 + x1 * x1));
  CHECK_EQ_INT(tpu_mxu_matmul_f32(&x, &x, &out, 1, 1, 1, 128, TPU_PREC_HIGHEST, 1, &d), TPU_OK);
  CHECK(out == (float)(x2 * x2 + 2 * x1 * x3 + 2 * x1 * x2 + x1 * x1));
  CHECK(out == x * x); /* here HIGHEST is the correctly rounded f32 product */
  /* 1 x inf: the low passes give 0 x inf = NaN, which must not reach the result. */
  float one = 1, inf = INFINITY;
  for (int p = 0; p < 3; p++) {
    CHECK_EQ_INT(tpu_mxu_matmul_f32(&one, &inf, &out, 1, 1, 1, 8, (tpu_precision)p, 1, &d), TPU_OK);
    CHECK_EQ_INT(tpu_f32_bits(out), 0x7f800000u);
  }
  float zero = 0;
  CHECK_EQ_INT(tpu_mxu_matmul_f32(&zero, &inf, &out, 1, 1, 1, 8, TPU_PREC_HIGHEST, 1, &d), TPU_OK);
  CHECK_EQ_INT(tpu_f32_bits(out), 0x7fc00000u);
  /* Whole matrices, specials included: bit-identical to the pass plan on the reference. */
  int fails = 0;
  static const int64_t shp[][4] = {{5, 7, 9, 3}, {40, 130, 33, 128}, {17, 300, 20, 256}};
  for (int s = 0; s < 3; s++)
    for (int p = 0; p < 3; p++) {
      int64_t M = shp[s][0], K = shp[s][1], N = shp[s][2], R = shp[s][3];
      float *A = malloc(sizeof(float) * (size_t)(M * K)), *W = malloc(sizeof(float) * (size_t)(K * N));
      float *got = malloc(sizeof(float) * (size_t)(M * N)), *want = malloc(sizeof(float) * (size_t)(M * N));
      for (int64_t i = 0; i < M * K; i++) A[i] = (rnd() & 15) ? rnd_unit() : tpu_f32_from_bits(rnd());
      for (int64_t i = 0; i < K * N; i++) W[i] = (rnd() & 15) ? rnd_unit() : tpu_f32_from_bits(rnd());
      CHECK_EQ_INT(tpu_mxu_matmul_f32(A, W, got, M, K, N, R, (tpu_precision)p, 1 + s, &d), TPU_OK);
      ref_f32(A, W, want, M, K, N, R, (tpu_precision)p);
      int64_t at;
      fails += !same_bits(got, want, M * N, &at);
      free(A);
      free(W);
      free(got);
      free(want);
    }
  CHECK_EQ_INT(fails, 0);
}

/* Accuracy against f64 on random data, as error / sum |a*w| (the scale of the dot product). */
static void test_f32_accuracy(void) {
  enum { M = 16, K = 64, N = 16 };
  static float A[M * K], W[K * N], out[M * N];
  for (int i = 0; i < M * K; i++) A[i] = rnd_unit();
  for (int i = 0; i < K * N; i++) W[i] = rnd_unit();
  double worst[3] = {0, 0, 0};
  tpu_diag d;
  for (int p = 0; p < 3; p++) {
    CHECK_EQ_INT(tpu_mxu_matmul_f32(A, W, out, M, K, N, 8, (tpu_precision)p, 2, &d), TPU_OK);
    for (int m = 0; m < M; m++)
      for (int n = 0; n < N; n++) {
        double s = 0, mag = 0;
        for (int k = 0; k < K; k++) {
          s += (double)A[m * K + k] * W[k * N + n];
          mag += fabs((double)A[m * K + k] * W[k * N + n]);
        }
        double e = fabs(out[m * N + n] - s) / mag;
        if (e > worst[p]) worst[p] = e;
      }
  }
  printf("f32 relative error: DEFAULT %.3g HIGH %.3g HIGHEST %.3g\n", worst[0], worst[1], worst[2]);
  CHECK(worst[0] < 1e-2);
  CHECK(worst[1] < 1e-5);
  CHECK(worst[2] < 1e-6);
  CHECK(worst[2] < worst[1] && worst[1] < worst[0]);
}

static void test_f32_errors(void) {
  tpu_diag d;
  float a = 1, out = 7;
  CHECK_EQ_INT(tpu_mxu_matmul_f32(&a, &a, &out, -1, 1, 1, 8, TPU_PREC_HIGH, 1, &d), TPU_ERR_ARG);
  CHECK_EQ_INT(tpu_mxu_matmul_f32(&a, &a, &out, 1, 1, 1, 0, TPU_PREC_HIGH, 1, &d), TPU_ERR_ARG);
  CHECK_EQ_INT(tpu_mxu_matmul_f32(&a, &a, &out, 1, 1, 1, 8, (tpu_precision)7, 1, &d), TPU_ERR_ARG);
  CHECK_EQ_INT(tpu_mxu_matmul_f32(NULL, &a, &out, 1, 1, 1, 8, TPU_PREC_HIGH, 1, &d), TPU_ERR_ARG);
  CHECK_EQ_INT(tpu_mxu_matmul_f32(&a, &a, &out, INT64_MAX / 2, 4, 1, 8, TPU_PREC_HIGH, 1, &d),
               TPU_ERR_LIMIT);
  CHECK(out == 7);
  /* Out of memory at each allocation: either NOMEM with out untouched, or the right bits. */
  enum { M = 9, K = 300, N = 11 };
  static float A[M * K], W[K * N], got[M * N], want[M * N];
  for (int i = 0; i < M * K; i++) A[i] = rnd_unit();
  for (int i = 0; i < K * N; i++) W[i] = rnd_unit();
  ref_f32(A, W, want, M, K, N, 256, TPU_PREC_HIGHEST);
  tpu_alloc_fail_after(0);
  CHECK_EQ_INT(tpu_mxu_matmul_f32(A, W, got, M, K, N, 256, TPU_PREC_HIGHEST, 1, &d), TPU_OK);
  long count = tpu_alloc_fail_after(0);
  CHECK(count >= 3);
  int nomem = 0, bad = 0;
  for (long n = 1; n <= count; n++) {
    for (int i = 0; i < M * N; i++) got[i] = -3.0f;
    tpu_alloc_fail_after(n);
    tpu_status st = tpu_mxu_matmul_f32(A, W, got, M, K, N, 256, TPU_PREC_HIGHEST, 1, &d);
    tpu_alloc_fail_after(0);
    int64_t at;
    if (st == TPU_ERR_NOMEM) {
      nomem++;
      for (int i = 0; i < M * N; i++) bad += got[i] != -3.0f;
    } else {
      bad += st != TPU_OK || !same_bits(got, want, M * N, &at);
    }
  }
  CHECK_EQ_INT(nomem, 3);
  CHECK_EQ_INT(bad, 0);
}

/* ---- Against the PE-level array (src/chip/systolic.c) ---- */

static void test_vs_systolic(void) {
  static const int64_t cases[][5] = {/* R, C, M, K, N */
                                     {1, 1, 3, 4, 5},    {3, 4, 5, 7, 9},    {8, 8, 17, 40, 19},
                                     {4, 16, 9, 33, 50}, {16, 4, 7, 50, 13}, {32, 32, 20, 100, 40}};
  int fails = 0;
  for (int c = 0; c < 6; c++)
    for (int mode = 0; mode < 3; mode++) {
      int64_t R = cases[c][0], C = cases[c][1], M = cases[c][2], K = cases[c][3], N = cases[c][4];
      tpu_bf16 *A = malloc(sizeof(tpu_bf16) * (size_t)(M * K));
      tpu_bf16 *W = malloc(sizeof(tpu_bf16) * (size_t)(K * N));
      float *Af = malloc(sizeof(float) * (size_t)(M * K)), *Wf = malloc(sizeof(float) * (size_t)(K * N));
      float *pe = malloc(sizeof(float) * (size_t)(M * N)), *fast = malloc(sizeof(float) * (size_t)(M * N));
      fill_bf16(A, M * K, mode);
      fill_bf16(W, K * N, mode);
      for (int64_t i = 0; i < M * K; i++) Af[i] = tpu_bf16_to_f32(A[i]);
      for (int64_t i = 0; i < K * N; i++) Wf[i] = tpu_bf16_to_f32(W[i]);
      tpu_mxu_cycles cyc;
      tpu_diag d;
      tpu_wload wl = (c + mode) % 2 ? TPU_WLOAD_DOUBLE : TPU_WLOAD_SERIAL;
      tpu_status st = tpu_systolic_run(R, C, M, K, N, wl, Af, Wf, pe, &cyc, NULL, &d);
      CHECK_EQ_INT(st, TPU_OK);
      tpu_mxu_matmul_bf16(A, W, fast, M, K, N, R, 1 + c % 4);
      int64_t at;
      if (st == TPU_OK && !same_bits(pe, fast, M * N, &at)) {
        fprintf(stderr, "vs systolic: R=%lld C=%lld M=%lld K=%lld N=%lld mode=%d at %lld: %08x vs %08x\n",
                (long long)R, (long long)C, (long long)M, (long long)K, (long long)N, mode,
                (long long)at, tpu_f32_bits(pe[at]), tpu_f32_bits(fast[at]));
        fails++;
      }
      free(A);
      free(W);
      free(Af);
      free(Wf);
      free(pe);
      free(fast);
    }
  CHECK_EQ_INT(fails, 0);
}

/* The reference interpreter's f32 dot order: each element sums a*w from +0 in k order (two
 * roundings per step), NaNs as they come. */
static void ref_seq(const float *A, const float *W, float *out, int64_t M, int64_t K, int64_t N) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; k++) acc = acc + A[m * K + k] * W[k * N + n];
      out[m * N + n] = acc;
    }
}

/* f32 values: normal range, or with specials (NaN payloads, infinities, signed zeros,
 * subnormals, huge values) one time in eight. */
static void fill_f32(float *x, int64_t n, int specials_too) {
  static const uint32_t sp[] = {0x7fc00000u, 0xffc12345u, 0x7f800001u, 0x7f800000u, 0xff800000u, 0x80000000u,
                                0x00000001u, 0x807fffffu, 0x7f7fffffu, 0x00800000u, 0x3f800000u};
  for (int64_t i = 0; i < n; i++) {
    uint32_t r = rnd();
    x[i] = specials_too && (r & 7) == 0 ? tpu_f32_from_bits(sp[(r >> 3) % (sizeof sp / sizeof sp[0])])
                                        : rnd_unit() * 3.0f;
  }
}

/* Same bits, except that any NaN matches any NaN: which NaN payload survives when two meet
 * in a sum depends on the operand order the compiler picks for a commutative add, in the
 * scalar reference as in the kernel (docs/numerics.md: payloads are not modelled). */
static int same_bits_nan(const float *a, const float *b, int64_t n, int64_t *where) {
  for (int64_t i = 0; i < n; i++)
    if (tpu_f32_bits(a[i]) != tpu_f32_bits(b[i]) && !(isnan(a[i]) && isnan(b[i]))) {
      *where = i;
      return 0;
    }
  return 1;
}

/* tpu_gemm_f32_seq: the reference order on the blocked kernel, for batches of products,
 * long K (chunks carried through memory), narrow N, any thread count. */
static void test_gemm_seq(void) {
  static const int64_t shapes[][4] = {{1, 1, 1, 1}, {7, 300, 5, 1}, {13, 17, 40, 3}, {3, 600, 33, 2},
                                      {50, 9, 2, 4}, {1, 1000, 1, 1}, {6, 256, 16, 5}};
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
    int64_t M = shapes[c][0], K = shapes[c][1], N = shapes[c][2], nb = shapes[c][3];
    for (int sp = 0; sp < 2; sp++) {
      float *A = malloc(sizeof(float) * (size_t)(nb * M * K)), *W = malloc(sizeof(float) * (size_t)(nb * K * N));
      float *want = malloc(sizeof(float) * (size_t)(nb * M * N)), *got = malloc(sizeof(float) * (size_t)(nb * M * N));
      fill_f32(A, nb * M * K, sp);
      fill_f32(W, nb * K * N, sp);
      for (int64_t b = 0; b < nb; b++) ref_seq(A + b * M * K, W + b * K * N, want + b * M * N, M, K, N);
      for (int t = 1; t <= 3; t++) {
        tpu_gemm_f32_seq(A, W, got, nb, M, K, N, t);
        int64_t at = -1;
        if (!same_bits_nan(got, want, nb * M * N, &at)) {
          fprintf(stderr, "gemm_seq M=%lld K=%lld N=%lld nb=%lld threads=%d at %lld: %08x vs %08x\n", (long long)M,
                  (long long)K, (long long)N, (long long)nb, t, (long long)at, tpu_f32_bits(got[at]),
                  tpu_f32_bits(want[at]));
          CHECK(0);
        }
      }
      free(A);
      free(W);
      free(want);
      free(got);
    }
  }
}

/* A small tpu_gemm_f32_seq (summed element by element) gives the blocked kernel's bits: the
 * same product alone (small) and as one of 16 copies in a batch (past SEQ_SMALL_MACS = 512,
 * blocked), on ordinary values and on the special ones (signed zeros, subnormals, inf, NaN). */
static void test_gemm_seq_small(void) {
  static const int64_t shapes[][3] = {{18, 4, 1}, {1, 6, 18}, {3, 5, 7}, {8, 8, 8}, {1, 40, 1}, {2, 128, 2}};
  enum { COPIES = 16 };
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
    int64_t M = shapes[c][0], K = shapes[c][1], N = shapes[c][2];
    CHECK(M * K * N <= 512 && COPIES * M * K * N > 512);
    for (int sp = 0; sp < 2; sp++) {
      float *A = malloc(sizeof(float) * (size_t)(COPIES * M * K)), *W = malloc(sizeof(float) * (size_t)(COPIES * K * N));
      float *one = malloc(sizeof(float) * (size_t)(M * N)), *all = malloc(sizeof(float) * (size_t)(COPIES * M * N));
      fill_f32(A, M * K, sp);
      fill_f32(W, K * N, sp);
      for (int b = 1; b < COPIES; b++) {
        memcpy(A + b * M * K, A, sizeof(float) * (size_t)(M * K));
        memcpy(W + b * K * N, W, sizeof(float) * (size_t)(K * N));
      }
      tpu_gemm_f32_seq(A, W, one, 1, M, K, N, 1);
      tpu_gemm_f32_seq(A, W, all, COPIES, M, K, N, 1);
      for (int b = 0; b < COPIES; b++) {
        int64_t at = -1;
        if (!same_bits_nan(all + b * M * N, one, M * N, &at)) {
          fprintf(stderr, "gemm_seq small M=%lld K=%lld N=%lld copy %d at %lld: %08x vs %08x\n", (long long)M,
                  (long long)K, (long long)N, b, (long long)at, tpu_f32_bits(one[at]), tpu_f32_bits(all[b * M * N + at]));
          CHECK(0);
          break;
        }
      }
      free(A);
      free(W);
      free(one);
      free(all);
    }
  }
}

/* Batched products and bf16 values held as f32 give each product's tpu_mxu_matmul_bf16 bits,
 * for any thread count; tpu__mxu_round_bf16 is part 0 of the split. */
static void test_batch_and_bf16f(void) {
  enum { NB = 3, M = 9, K = 140, N = 20, R = 64, NA = NB * M * K, NW = NB * K * N, NO = NB * M * N };
  tpu_bf16 *A = malloc(sizeof(tpu_bf16) * NA), *W = malloc(sizeof(tpu_bf16) * NW);
  float *Af = malloc(sizeof(float) * NA), *Wf = malloc(sizeof(float) * NW);
  float *want = malloc(sizeof(float) * NO), *got = malloc(sizeof(float) * NO);
  fill_bf16(A, NA, 1);
  fill_bf16(W, NW, 1);
  for (int i = 0; i < NA; i++) Af[i] = tpu_bf16_to_f32(A[i]);
  for (int i = 0; i < NW; i++) Wf[i] = tpu_bf16_to_f32(W[i]);
  for (int b = 0; b < NB; b++) tpu_mxu_matmul_bf16(A + b * M * K, W + b * K * N, want + b * M * N, M, K, N, R, 1);
  for (int t = 1; t <= 3; t++) {
    int64_t at;
    tpu__mxu_matmul_bf16_batch(A, W, got, NB, M, K, N, R, t);
    CHECK(same_bits(got, want, NO, &at));
    tpu__mxu_matmul_bf16f(Af, Wf, got, NB, M, K, N, R, t);
    CHECK(same_bits(got, want, NO, &at));
  }
  float x[64], r[64];
  fill_f32(x, 64, 1);
  x[0] = tpu_f32_from_bits(0x7f7fffffu); /* rounds to inf: truncated */
  tpu__mxu_round_bf16(x, 64, r);
  for (int i = 0; i < 64; i++) {
    tpu_bf16 parts[3];
    tpu__mxu_split_f32(x[i], parts);
    CHECK_EQ_INT(tpu_f32_bits(r[i]), tpu_f32_bits(tpu_bf16_to_f32(parts[0])));
  }
  free(A);
  free(W);
  free(Af);
  free(Wf);
  free(want);
  free(got);
}

/* Every instruction set this CPU has gives the reference's bits: random shapes, specials,
 * carried psums, narrow N, threads; the s8 and f32-sequential kernels too. */
static void test_paths(void) {
  static const tpu__mxu_path paths[] = {TPU__MXU_PATH_SCALAR, TPU__MXU_PATH_AVX2, TPU__MXU_PATH_AVX512};
  static const char *names[] = {"scalar", "avx2", "avx512"};
  for (int p = 0; p < 3; p++) {
    if (!tpu__mxu_path_supported(paths[p])) {
      printf("path %s: not on this CPU\n", names[p]);
      continue;
    }
    tpu__mxu_path old = tpu__mxu_set_path(paths[p]);
    CHECK_EQ_STR(tpu__mxu_kernel_name(), names[p]);
    int fails = 0;
    for (int fma = 1; fma >= 0; fma--) { /* FMA kernels where allowed (mode 0's values), then none */
      tpu__mxu_allow_fma(fma);
      for (int mode = 0; mode < 3; mode++) {
        fails += !check_case(17, 40, 33, 3, 1, mode);
        fails += !check_case(70, 300, 50, 128, 2, mode);
        fails += !check_case(20, 600, 20, 600, 3, mode); /* psums carried between chunks */
        fails += !check_case(50, 300, 4, 256, 2, mode);  /* narrow N: C = out^T */
        fails += !check_case(37, 129, 97, 64, 2, mode);
        fails += !check_case(6, 64, 32, 128, 1, mode); /* one full AVX-512 tile */
      }
    }
    tpu__mxu_allow_fma(1);
    CHECK_EQ_INT(fails, 0);
    tpu__mxu_set_path(old);
  }
}

/* A fused multiply-add gives the array's bits only where every product is exact; the kernels
 * must not use one otherwise. Two finite cases where it would differ: a product that rounds
 * as a subnormal (a tie), and a product that overflows before a cancelling sum. */
static void test_fma_guard(void) {
  enum { M = 8, K = 3, N = 40 };
  const float cases[2][2][K] = {
      /* 2^-126 + 2^-149 + 1.5*2^-149: the rounded product 2^-148 gives 2^-126 + 3*2^-149,
       * a fused step 2^-126 + 2*2^-149 (the tie 2.5 goes to even). */
      {{0x1p-63f, 0x1p-75f, 0x1.8p-75f}, {0x1p-63f, 0x1p-74f, 0x1p-74f}},
      /* -1.5*2^127 + 2^64*2^64: the rounded product is inf (the sum inf), fused 2^126. */
      {{-0x1p127f, 0x1p64f, 0.0f}, {1.5f, 0x1p64f, 0.0f}},
  };
  static const tpu__mxu_path paths[] = {TPU__MXU_PATH_SCALAR, TPU__MXU_PATH_AVX2, TPU__MXU_PATH_AVX512};
  for (int c = 0; c < 2; c++) {
    tpu_bf16 A[M * K], W[K * N];
    for (int m = 0; m < M; m++)
      for (int k = 0; k < K; k++) A[m * K + k] = tpu_bf16_from_f32(cases[c][0][k]);
    for (int k = 0; k < K; k++)
      for (int n = 0; n < N; n++) W[k * N + n] = tpu_bf16_from_f32(cases[c][1][k]);
    float want[M * N], got[M * N];
    ref_bf16(A, W, want, M, K, N, K);
    CHECK_EQ_INT(tpu_f32_bits(want[0]), c == 0 ? tpu_f32_bits(0x1p-126f + 3 * 0x1p-149f) : 0x7f800000u);
    for (int p = 0; p < 3; p++) {
      if (!tpu__mxu_path_supported(paths[p])) continue;
      tpu__mxu_path old = tpu__mxu_set_path(paths[p]);
      int64_t at;
      tpu_mxu_matmul_bf16(A, W, got, M, K, N, K, 1);
      CHECK(same_bits(got, want, M * N, &at));
      float Af[M * K], Wf[K * N]; /* the same values held as f32 */
      for (int i = 0; i < M * K; i++) Af[i] = tpu_bf16_to_f32(A[i]);
      for (int i = 0; i < K * N; i++) Wf[i] = tpu_bf16_to_f32(W[i]);
      tpu__mxu_matmul_bf16f(Af, Wf, got, 1, M, K, N, K, 1);
      CHECK(same_bits(got, want, M * N, &at));
      tpu__mxu_set_path(old);
    }
  }
}

/* The FMA guard's scan of the operands, on every instruction set, against its definition
 * evaluated here on the f32 values: arrays of every length up to 200 (vector bodies and
 * tails), each special value alone at each position among ordinary ones. */
static int exact_def(const float *a, size_t na, const float *w, size_t nw) {
  double amax = 0, wmax = 0, amin = INFINITY, wmin = INFINITY;
  for (size_t i = 0; i < na + nw; i++) {
    float v = i < na ? a[i] : w[i - na];
    if (!isfinite(v)) return 0;
    double x = fabs((double)v);
    double *mx = i < na ? &amax : &wmax, *mn = i < na ? &amin : &wmin;
    if (x > *mx) *mx = x;
    if (x != 0 && x < *mn) *mn = x;
  }
  if (amax == 0 || wmax == 0) return 1;
  return amax * wmax < 0x1p128 && amin * wmin >= 0x1p-126;
}

static void test_products_exact(void) {
  enum { MAXN = 200 };
  static const tpu__mxu_path paths[] = {TPU__MXU_PATH_SCALAR, TPU__MXU_PATH_AVX2, TPU__MXU_PATH_AVX512};
  tpu_bf16 a[MAXN], w[MAXN];
  float af[MAXN], wf[MAXN];
  int fails = 0, exact = 0, inexact = 0;
  for (int p = 0; p < 3; p++) {
    if (!tpu__mxu_path_supported(paths[p])) continue;
    tpu__mxu_path old = tpu__mxu_set_path(paths[p]);
    for (size_t n = 0; n <= MAXN; n += n < 40 ? 1 : 23) {
      size_t ns = sizeof specials / sizeof specials[0];
      for (size_t sp = 0; sp <= ns; sp++)
        for (size_t pos = 0; pos < (n ? n : 1); pos += n < 40 ? 1 : 7) {
          for (size_t i = 0; i < n; i++) { /* ordinary values 2^-8 .. 2^8, and zeros */
            uint32_t r = rnd();
            a[i].bits = (uint16_t)((r & 7) == 0 ? 0 : (0x3b80 + (r >> 3) % 0x0800) | (r & 0x8000));
            w[i].bits = (uint16_t)(0x3b80 + (r >> 17) % 0x0800);
          }
          if (n && sp < ns) (pos % 2 ? w : a)[pos].bits = specials[sp];
          for (size_t i = 0; i < n; i++) af[i] = tpu_bf16_to_f32(a[i]), wf[i] = tpu_bf16_to_f32(w[i]);
          size_t nw = n ? n - pos % n : 0; /* W shorter than A: its scan ends elsewhere */
          int want = exact_def(af, n, wf, nw);
          exact += want, inexact += !want;
          fails += tpu__mxu_products_exact(a, n, w, nw, 0) != want;
          fails += tpu__mxu_products_exact(af, n, wf, nw, 1) != want;
        }
    }
    tpu__mxu_set_path(old);
  }
  CHECK_EQ_INT(fails, 0);
  CHECK(exact > 0 && inexact > 0);
}

/* Row splits over several threads share one packed copy of W (or of A^T when C = out^T),
 * each panel packed by the first task to claim it: same bits as the contract on every path,
 * with chunks, carried psums, partial panels and more tasks than cores. */
static void test_shared_panels(void) {
  int fails = 0;
  for (int p = TPU__MXU_PATH_SCALAR; p <= TPU__MXU_PATH_AVX512; p++) {
    if (!tpu__mxu_path_supported((tpu__mxu_path)p)) continue;
    tpu__mxu_path old = tpu__mxu_set_path((tpu__mxu_path)p);
    fails += !check_case(300, 300, 64, 128, 2, 1);
    CHECK(tpu__mxu_last_shared_units() > 0); /* the shared path ran */
    fails += !check_case(300, 300, 50, 300, 3, 1); /* chunk past KC_MAX: carried psums */
    CHECK(tpu__mxu_last_shared_units() > 0);
    fails += !check_case(257, 97, 33, 8, 4, 2);
    fails += !check_case(200, 130, 17, 1, 2, 1);
    fails += !check_case(40, 300, 15, 128, 2, 1); /* narrow N: C = out^T */
    fails += !check_case(256, 256, 256, 128, 2, 0);
    CHECK(tpu__mxu_last_shared_units() > 0);
    fails += !check_case(256, 256, 256, 128, 1, 0);
    CHECK_EQ_INT((int)tpu__mxu_last_shared_units(), 0); /* one task packs its own */
    tpu__mxu_set_path(old);
  }
  CHECK_EQ_INT(fails, 0);
}

int main(void) {
  printf("micro-kernel: %s\n", tpu__mxu_kernel_name());
  test_gemm_seq();
  for (int p = TPU__MXU_PATH_SCALAR; p <= TPU__MXU_PATH_AVX512; p++) { /* every instruction set */
    if (!tpu__mxu_path_supported((tpu__mxu_path)p)) continue;
    tpu__mxu_path old = tpu__mxu_set_path((tpu__mxu_path)p);
    test_gemm_seq();
    tpu__mxu_set_path(old);
  }
  test_gemm_seq_small();
  test_batch_and_bf16f();
  test_hand_cases();
  test_shapes();
  test_shared_panels();
  test_scalar_path();
  test_paths();
  test_fma_guard();
  test_products_exact();
  test_alloc_failure();
  test_s8();
  test_split();
  test_f32_passes();
  test_f32_accuracy();
  test_f32_errors();
  test_vs_systolic();
  CHECK_DONE();
}
