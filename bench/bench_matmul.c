/* MXU fast kernel vs OpenBLAS sgemm: GFLOP/s on the same data and thread count, the ratio,
 * and a bit-exactness check of the kernel against the contract on sampled entries.
 * Usage: bench_matmul [--threads T] [--R DEPTH] [--min-time SECONDS] [--quick]
 *                     [--shape MxKxN] [--path auto|avx512|avx2|scalar] [--no-fma] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bf16.h"
#include "chip/mxu.h"
#include "chip/mxu_kernel_int.h"

#ifdef TPU_HAVE_OPENBLAS
#include <cblas.h>
#endif

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

/* One output entry by the contract (mxu.h): psums from +0 down each K-tile, psum + a*w with
 * the product rounded first (as the PE-level array does), the first tile stored, later tiles
 * added, NaN canonical. */
static float ref_entry(const tpu_bf16 *A, const tpu_bf16 *W, int64_t K, int64_t N, int64_t R,
                       int64_t m, int64_t n) {
  float acc = 0.0f;
  for (int64_t t = 0; t * R < K; t++) {
    float psum = 0.0f;
    for (int64_t k = t * R; k < K && k < (t + 1) * R; k++)
      psum = psum + tpu_bf16_to_f32(A[m * K + k]) * tpu_bf16_to_f32(W[k * N + n]);
    acc = t == 0 ? psum : acc + psum;
  }
  return isnan(acc) ? tpu_f32_from_bits(0x7fc00000u) : acc;
}

typedef struct shape {
  int64_t M, K, N;
} shape;

typedef struct run_ctx {
  const tpu_bf16 *A, *W;
  const float *Af, *Wf;
  float *out;
  int64_t M, K, N, R;
  int threads;
} run_ctx;

static void run_tpusim(const run_ctx *c) {
  tpu_mxu_matmul_bf16(c->A, c->W, c->out, c->M, c->K, c->N, c->R, c->threads);
}

#ifdef TPU_HAVE_OPENBLAS
static void run_openblas(const run_ctx *c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)c->M, (int)c->N, (int)c->K, 1.0f,
              c->Af, (int)c->K, c->Wf, (int)c->N, 0.0f, c->out, (int)c->N);
}
#endif

/* Best times of tpusim (t[0]) and, when present, OpenBLAS (t[1]), after one warm-up each.
 * The two alternate run by run until min_time has passed (at least 3 runs each), so on a
 * shared machine both see the same background load. */
static void best_times(const run_ctx *c, double min_time, double t[2]) {
  t[0] = t[1] = 1e30;
  run_tpusim(c);
#ifdef TPU_HAVE_OPENBLAS
  run_openblas(c);
#endif
  double start = now_s();
  for (int rep = 0; rep < 3 || now_s() - start < min_time; rep++) {
    double t0 = now_s();
    run_tpusim(c);
    double t1 = now_s();
    if (t1 - t0 < t[0]) t[0] = t1 - t0;
#ifdef TPU_HAVE_OPENBLAS
    run_openblas(c);
    double t2 = now_s();
    if (t2 - t1 < t[1]) t[1] = t2 - t1;
#endif
  }
}

int main(int argc, char **argv) {
  int threads = 2, quick = 0, fma = 1;
  int64_t R = 128;
  shape one = {0, 0, 0};
  double min_time = 0.5;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--R") && i + 1 < argc)
      R = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--min-time") && i + 1 < argc)
      min_time = atof(argv[++i]);
    else if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--no-fma"))
      fma = 0;
    else if (!strcmp(argv[i], "--path") && i + 1 < argc) {
      const char *p = argv[++i];
      tpu__mxu_path path = !strcmp(p, "scalar")   ? TPU__MXU_PATH_SCALAR
                           : !strcmp(p, "avx2")   ? TPU__MXU_PATH_AVX2
                           : !strcmp(p, "avx512") ? TPU__MXU_PATH_AVX512
                                                  : TPU__MXU_PATH_AUTO;
      if (strcmp(p, "auto") && path == TPU__MXU_PATH_AUTO) {
        fprintf(stderr, "error: --path wants auto, avx512, avx2 or scalar\n");
        return 2;
      }
      if (!tpu__mxu_path_supported(path)) {
        fprintf(stderr, "error: this CPU has no %s\n", p);
        return 2;
      }
      tpu__mxu_set_path(path);
    }
    else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
      long long m, k, n;
      if (sscanf(argv[++i], "%lldx%lldx%lld", &m, &k, &n) != 3 || m < 1 || k < 1 || n < 1) {
        fprintf(stderr, "error: --shape wants MxKxN with positive sizes\n");
        return 2;
      }
      one.M = m, one.K = k, one.N = n;
    }
    else {
      fprintf(stderr,
              "usage: %s [--threads T] [--R DEPTH] [--min-time S] [--quick] [--shape MxKxN] "
              "[--path auto|avx512|avx2|scalar] [--no-fma]\n",
              argv[0]);
      return 2;
    }
  }
  if (threads < 1 || R < 1) {
    fprintf(stderr, "error: --threads and --R must be >= 1\n");
    return 2;
  }
  static const shape all[] = {{256, 256, 256},   {512, 512, 512},   {1024, 1024, 1024},
                              {2048, 2048, 2048}, {32, 2048, 2048},  {2048, 2048, 32},
                              {2048, 64, 2048},   {1, 4096, 4096},   {4096, 4096, 1}};
  const shape *shapes = one.M ? &one : all;
  int nshapes = one.M ? 1 : quick ? 3 : (int)(sizeof all / sizeof all[0]);
#ifdef TPU_HAVE_OPENBLAS
  openblas_set_num_threads(threads);
  printf("OpenBLAS: %s\n", openblas_get_config());
#endif
  tpu__mxu_allow_fma(fma);
  printf("tpusim micro-kernel: %s (%s), threads: %d, K-tile depth R: %lld\n", tpu__mxu_kernel_name(),
         fma ? "FMA where every product is exact" : "no FMA",
         threads, (long long)R);
  printf("%-18s %12s %12s %8s  %s\n", "M x K x N", "tpusim GF/s", "sgemm GF/s", "ratio",
         "bit-exact (sampled)");
  int all_exact = 1;
  for (int s = 0; s < nshapes; s++) {
    int64_t M = shapes[s].M, K = shapes[s].K, N = shapes[s].N;
    tpu_bf16 *A = malloc(sizeof(tpu_bf16) * (size_t)(M * K));
    tpu_bf16 *W = malloc(sizeof(tpu_bf16) * (size_t)(K * N));
    float *Af = malloc(sizeof(float) * (size_t)(M * K));
    float *Wf = malloc(sizeof(float) * (size_t)(K * N));
    float *out = malloc(sizeof(float) * (size_t)(M * N));
    if (!A || !W || !Af || !Wf || !out) {
      fprintf(stderr, "error: out of memory for %lldx%lldx%lld\n", (long long)M, (long long)K,
              (long long)N);
      return 1;
    }
    /* Values in [-2, 2) rounded to bf16; OpenBLAS gets the same values as f32. */
    for (int64_t i = 0; i < M * K; i++) {
      A[i] = tpu_bf16_from_f32((float)((rnd() & 0xffff) / 16384.0 - 2.0));
      Af[i] = tpu_bf16_to_f32(A[i]);
    }
    for (int64_t i = 0; i < K * N; i++) {
      W[i] = tpu_bf16_from_f32((float)((rnd() & 0xffff) / 16384.0 - 2.0));
      Wf[i] = tpu_bf16_to_f32(W[i]);
    }
    run_ctx c = {A, W, Af, Wf, out, M, K, N, R, threads};
    double flops = 2.0 * (double)M * (double)K * (double)N;
    double t[2];
    best_times(&c, min_time, t);
    /* The last run may have been OpenBLAS: run the kernel once more, then compare sampled
     * entries with the contract. */
    run_tpusim(&c);
    int samples = 64, exact = 0;
    for (int i = 0; i < samples; i++) {
      int64_t m = i == 0 ? M - 1 : (int64_t)(rnd() % (uint32_t)M);
      int64_t n = i == 0 ? N - 1 : (int64_t)(rnd() % (uint32_t)N);
      float want = ref_entry(A, W, K, N, R, m, n);
      exact += tpu_f32_bits(out[m * N + n]) == tpu_f32_bits(want);
    }
    all_exact &= exact == samples;
    char name[64];
    snprintf(name, sizeof name, "%lldx%lldx%lld", (long long)M, (long long)K, (long long)N);
#ifdef TPU_HAVE_OPENBLAS
    printf("%-18s %12.1f %12.1f %8.2f  %s (%d/%d)\n", name, flops / t[0] * 1e-9,
           flops / t[1] * 1e-9, t[1] / t[0], exact == samples ? "yes" : "NO", exact, samples);
#else
    printf("%-18s %12.1f %12s %8s  %s (%d/%d)\n", name, flops / t[0] * 1e-9, "n/a", "n/a",
           exact == samples ? "yes" : "NO", exact, samples);
#endif
    fflush(stdout);
    free(A);
    free(W);
    free(Af);
    free(Wf);
    free(out);
  }
  if (!all_exact) {
    fprintf(stderr, "error: the kernel differs from the contract on sampled entries\n");
    return 1;
  }
  return 0;
}
