/* PE-level systolic array vs. its closed form (cycles) and the MXU contract (values). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/bf16.h"
#include "chip/mxu.h"
#include "chip/systolic.h"
#include "check.h"

/* ---- The contract's scalar reference (src/chip/mxu.h), written independently of the
 * array: per output, per K-tile of R rows, psum = +0 then psum = psum + a*w down the rows
 * (product rounded to f32, then the sum); the first K-tile stored, later ones added in
 * order; NaN results canonical. */
static void reference(int64_t R, int64_t M, int64_t K, int64_t N, const float *A,
                      const float *W, float *out) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      float acc = 0.0f;
      for (int64_t k0 = 0; k0 < K; k0 += R) {
        float psum = 0.0f;
        for (int64_t k = k0; k < k0 + R && k < K; k++) {
          float prod = A[m * K + k] * W[k * N + n];
          psum = psum + prod;
        }
        acc = k0 == 0 ? psum : acc + psum;
      }
      if (isnan(acc)) acc = tpu_f32_from_bits(0x7fc00000u);
      out[m * N + n] = acc;
    }
}

/* xorshift64*: deterministic operands. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1dull;
}

/* A bf16 value: mostly small ordinary numbers (so sums stay finite and exercise rounding),
 * sometimes any bit pattern at all, sometimes one of the special values. */
static float bf16_value(int specials) {
  uint64_t x = rng();
  unsigned pick = (unsigned)(x % 16);
  tpu_bf16 b;
  if (specials && pick == 0) {
    b.bits = (uint16_t)(x >> 16);
  } else if (specials && pick == 1) {
    static const uint16_t sp[] = {0x7fc0, 0xffc1, 0x7f80, 0xff80, 0x8000, 0x0000,
                                  0x0001, 0x807f, 0x0040, 0x7f7f, 0xff7f, 0x0080};
    b.bits = sp[(x >> 20) % (sizeof sp / sizeof sp[0])];
  } else {
    /* sign, exponent within 2^-6 .. 2^5, 7 random mantissa bits */
    unsigned sign = (unsigned)((x >> 32) & 1), e = 121 + (unsigned)((x >> 33) % 12);
    b.bits = (uint16_t)(sign << 15 | e << 7 | ((x >> 40) & 0x7f));
  }
  return tpu_bf16_to_f32(b);
}

static int same_bits(const float *a, const float *b, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (tpu_f32_bits(a[i]) != tpu_f32_bits(b[i])) return 0;
  return 1;
}

/* Runs one shape in one mode: the array's cycles against the closed form field by field,
 * its values against the reference bit for bit. Returns 1 when all agree. */
static int check_shape(int64_t R, int64_t C, int64_t M, int64_t K, int64_t N, tpu_wload mode,
                       int specials) {
  float *A = tpu_malloc((size_t)(M * K) * sizeof(float));
  float *W = tpu_malloc((size_t)(K * N) * sizeof(float));
  float *got = tpu_malloc((size_t)(M * N) * sizeof(float));
  float *want = tpu_malloc((size_t)(M * N) * sizeof(float));
  CHECK(A && W && got && want);
  if (!A || !W || !got || !want) return 0;
  for (int64_t i = 0; i < M * K; i++) A[i] = bf16_value(specials);
  for (int64_t i = 0; i < K * N; i++) W[i] = bf16_value(specials);
  tpu_diag d;
  tpu_mxu_cycles pe, cf;
  tpu_status s1 = tpu_systolic_run(R, C, M, K, N, mode, A, W, got, &pe, NULL, &d);
  tpu_status s2 = tpu_mxu_tile_cycles(R, C, M, K, N, mode, &cf, &d);
  reference(R, M, K, N, A, W, want);
  int ok = s1 == TPU_OK && s2 == TPU_OK && pe.total == cf.total && pe.folds == cf.folds &&
           pe.weight_load == cf.weight_load &&
           pe.weight_load_hidden == cf.weight_load_hidden && pe.stream == cf.stream &&
           pe.mac_ops == cf.mac_ops && fabs(pe.overall_util - cf.overall_util) < 1e-12 &&
           fabs(pe.mapping_efficiency - cf.mapping_efficiency) < 1e-12 &&
           fabs(pe.compute_util - cf.compute_util) < 1e-12 && same_bits(got, want, M * N);
  if (!ok)
    fprintf(stderr,
            "mismatch R=%lld C=%lld M=%lld K=%lld N=%lld mode=%d: total %lld vs %lld, "
            "load %lld vs %lld, hidden %lld vs %lld, stream %lld vs %lld, macs %lld vs %lld, "
            "values %s\n",
            (long long)R, (long long)C, (long long)M, (long long)K, (long long)N, (int)mode,
            (long long)pe.total, (long long)cf.total, (long long)pe.weight_load,
            (long long)cf.weight_load, (long long)pe.weight_load_hidden,
            (long long)cf.weight_load_hidden, (long long)pe.stream, (long long)cf.stream,
            (long long)pe.mac_ops, (long long)cf.mac_ops,
            same_bits(got, want, M * N) ? "equal" : "differ");
  tpu_free(A);
  tpu_free(W);
  tpu_free(got);
  tpu_free(want);
  return ok;
}

/* The sweep: every array shape from the list (square and not) against sizes from 1 up past
 * several folds in each dimension, both weight-loading modes. */
static void test_sweep(void) {
  static const int64_t dims[] = {1, 2, 3, 4, 5, 8, 16};
  const int nd = (int)(sizeof dims / sizeof dims[0]);
  int runs = 0, fails = 0;
  for (int i = 0; i < nd; i++)
    for (int j = 0; j < nd; j++) {
      const int64_t R = dims[i], C = dims[j];
      /* sizes: 1, within one tile, exactly one tile, just past, several folds */
      const int64_t ks[] = {1, R > 1 ? R - 1 : 1, R, R + 1, 3 * R + 2};
      const int64_t ns[] = {1, C, C + 1, 2 * C + 3};
      const int64_t ms[] = {1, 2, R + 3, 2 * R + C + 1};
      for (int a = 0; a < 5; a++)
        for (int b = 0; b < 4; b++) {
          /* every K and N pairing; M cycles through its list so each M meets each K */
          const int64_t M = ms[(a + b) % 4];
          for (int mode = 0; mode < 2; mode++) {
            runs++;
            if (!check_shape(R, C, M, ks[a], ns[b], (tpu_wload)mode, (a + b) % 3 == 0))
              fails++;
          }
        }
    }
  CHECK_EQ_INT(fails, 0);
  CHECK(runs == nd * nd * 5 * 4 * 2);
}

static void test_non_square(void) {
  static const int64_t shapes[][2] = {{3, 7}, {7, 3}, {1, 16}, {16, 1}, {2, 9}, {12, 5}};
  int fails = 0;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const int64_t R = shapes[i][0], C = shapes[i][1];
    for (int mode = 0; mode < 2; mode++) {
      fails += !check_shape(R, C, 5, 2 * R + 1, 3 * C - 1, (tpu_wload)mode, 1);
      fails += !check_shape(R, C, 1, R, C, (tpu_wload)mode, 0);
      fails += !check_shape(R, C, 3 * R, 1, 2 * C, (tpu_wload)mode, 1);
    }
  }
  CHECK_EQ_INT(fails, 0);
}

int main(void) {
  test_sweep();
  test_non_square();
  CHECK_DONE();
}
