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
#include "util.h"

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


/* SCALE-Sim 3.0.0 (pip package scalesim, ws dataflow, GEMM input, SRAMs large enough for
 * no stalls) on these shapes, run by the script in docs/systolic.md: R C M K N, then its
 * COMPUTE_REPORT Total Cycles, Overall Util %, Mapping Efficiency %, Compute Util %. */
static const struct {
  int64_t R, C, M, K, N, total;
  double overall, mapping, compute;
} k_scalesim[] = {
    {4, 4, 6, 4, 4, 15, 40.0, 100.0, 31.57894736842105},
    {4, 4, 1, 1, 1, 10, 0.625, 6.25, 0.4464285714285714},
    {1, 1, 1, 1, 1, 1, 100.0, 100.0, 50.0},
    {3, 5, 7, 10, 11, 191, 26.8760907504363, 61.111111111111114, 21.38888888888889},
    {8, 8, 20, 30, 17, 503, 31.68489065606362, 66.40625, 27.1045918367347},
    {16, 16, 33, 40, 50, 947, 27.224128827877507, 65.10416666666666, 22.855718085106382},
    {5, 3, 2, 16, 9, 155, 12.387096774193548, 80.0, 10.666666666666664},
    {32, 32, 64, 100, 70, 1895, 23.08707124010554, 56.966145833333336, 19.290123456790116},
    {2, 7, 9, 3, 15, 107, 27.03604806408545, 53.57142857142857, 20.08928571428571},
    {16, 4, 1, 33, 5, 209, 1.2335526315789473, 42.96875, 1.1307565789473684},
    {8, 16, 100, 64, 64, 4159, 76.94157249338784, 100.0, 68.96551724137935},
    {1, 8, 5, 3, 20, 116, 32.327586206896555, 83.33333333333334, 20.833333333333336},
};

static void test_scalesim_totals(void) {
  for (size_t i = 0; i < sizeof k_scalesim / sizeof k_scalesim[0]; i++) {
    tpu_mxu_cycles c;
    tpu_diag d;
    CHECK(tpu_mxu_tile_cycles(k_scalesim[i].R, k_scalesim[i].C, k_scalesim[i].M,
                              k_scalesim[i].K, k_scalesim[i].N, TPU_WLOAD_SERIAL, &c,
                              &d) == TPU_OK);
    CHECK_EQ_INT(c.total, k_scalesim[i].total);
    CHECK_NEAR(100.0 * c.overall_util, k_scalesim[i].overall, 1e-9);
    CHECK_NEAR(100.0 * c.mapping_efficiency, k_scalesim[i].mapping, 1e-9);
    CHECK_NEAR(100.0 * c.compute_util, k_scalesim[i].compute, 1e-9);
    /* the PE-level array gives the same total for the same shape */
    CHECK(check_shape(k_scalesim[i].R, k_scalesim[i].C, k_scalesim[i].M, k_scalesim[i].K,
                      k_scalesim[i].N, TPU_WLOAD_SERIAL, 0));
  }
}

/* Hand-computed closed forms (docs/systolic.md): s = R + C + M - 2 streaming cycles per
 * fold; serial total = F*(R + s) - 1; double-buffered total = R + F*s + (F-1)*max(0, R-s) - 1.
 */
static void test_hand_computed(void) {
  tpu_mxu_cycles c;
  tpu_diag d;
  /* 4x4 array, 6x4 by 4x4: one fold, s = 12: 4 + 12 - 1 = 15 either way */
  CHECK(tpu_mxu_tile_cycles(4, 4, 6, 4, 4, TPU_WLOAD_SERIAL, &c, &d) == TPU_OK);
  CHECK_EQ_INT(c.total, 15);
  CHECK_EQ_INT(c.folds, 1);
  CHECK(tpu_mxu_tile_cycles(4, 4, 6, 4, 4, TPU_WLOAD_DOUBLE, &c, &d) == TPU_OK);
  CHECK_EQ_INT(c.total, 15);
  /* 128x128, 256x512 by 512x256: F = 4*2 = 8, T = 256, s = 128+128+256-2 = 510.
   * serial 8*(128+510) - 1 = 5103; double-buffered 128 + 7*max(128,256) + 510 - 1 = 2429
   * (every later load hidden, fill and drain paid once) */
  CHECK(tpu_mxu_tile_cycles(128, 128, 256, 512, 256, TPU_WLOAD_SERIAL, &c, &d) == TPU_OK);
  CHECK_EQ_INT(c.total, 5103);
  CHECK_EQ_INT(c.weight_load, 1024);
  CHECK_EQ_INT(c.stream, 4080);
  CHECK(tpu_mxu_tile_cycles(128, 128, 256, 512, 256, TPU_WLOAD_DOUBLE, &c, &d) == TPU_OK);
  CHECK_EQ_INT(c.total, 2429);
  CHECK_EQ_INT(c.weight_load, 128);
  CHECK_EQ_INT(c.weight_load_hidden, 896);
  CHECK_EQ_INT(c.stream, 2302);
  /* 16x1 array, 1x48 by 48x1: F = 3, T = 1 < R = 16, s = 16: 15 load cycles per later fold
   * show. double: 16 + 2*16 + 16 - 1 = 63, loads 16 + 2*15 = 46 shown, 2*1 hidden */
  CHECK(tpu_mxu_tile_cycles(16, 1, 1, 48, 1, TPU_WLOAD_DOUBLE, &c, &d) == TPU_OK);
  CHECK_EQ_INT(c.total, 63);
  CHECK_EQ_INT(c.weight_load, 46);
  CHECK_EQ_INT(c.weight_load_hidden, 2);
  CHECK_EQ_INT(c.stream, 18);
  /* bad sizes */
  CHECK(tpu_mxu_tile_cycles(0, 4, 1, 1, 1, TPU_WLOAD_SERIAL, &c, &d) == TPU_ERR_ARG);
  CHECK(tpu_mxu_tile_cycles(4, 4, 1, -3, 1, TPU_WLOAD_DOUBLE, &c, &d) == TPU_ERR_ARG);
  CHECK(tpu_mxu_tile_cycles(4, 4, 1, 1, 1, (tpu_wload)7, &c, &d) == TPU_ERR_ARG);
}

/* IEEE specials through the array: inf*0 makes NaN, written canonical; -0 and subnormals
 * follow the reference exactly. */
static void test_specials(void) {
  const float inf = tpu_f32_from_bits(0x7f800000u), sub = tpu_f32_from_bits(0x00010000u);
  const float A[2 * 3] = {inf, 1.0f, 2.0f, -0.0f, sub, tpu_f32_from_bits(0xffc10000u)};
  const float W[3 * 2] = {0.0f, 1.0f, -0.0f, 3.0f, 0.5f, -1.0f};
  float got[4], want[4];
  tpu_mxu_cycles c;
  tpu_diag d;
  for (int mode = 0; mode < 2; mode++) {
    CHECK(tpu_systolic_run(2, 2, 2, 3, 2, (tpu_wload)mode, A, W, got, &c, NULL, &d) == TPU_OK);
    reference(2, 2, 3, 2, A, W, want);
    CHECK(same_bits(got, want, 4));
    CHECK_EQ_INT(tpu_f32_bits(got[0]), 0x7fc00000); /* inf * 0 */
    CHECK_EQ_INT(tpu_f32_bits(got[1]), 0x7f800000); /* inf * 1 + ... */
    CHECK_EQ_INT(tpu_f32_bits(got[2]), 0x7fc00000); /* a NaN input, sign dropped */
  }
  /* a subnormal product survives (no flush to zero) */
  const float a1 = sub, w1 = 1.0f;
  CHECK(tpu_systolic_run(1, 1, 1, 1, 1, TPU_WLOAD_SERIAL, &a1, &w1, got, &c, NULL, &d) ==
        TPU_OK);
  CHECK_EQ_INT(tpu_f32_bits(got[0]), 0x00010000);
}

/* A probe sees every cycle once, in order, with the grid as the contract describes. */
typedef struct count_probe {
  tpu_systolic_probe base;
  int64_t cycles, next, macs_seen, stop_at;
  int order_ok, latched;
} count_probe;

static tpu_status count_cycle(tpu_systolic_probe *self, const tpu_systolic_state *s,
                              tpu_diag *d) {
  count_probe *p = (count_probe *)self;
  if (s->cycle != p->next) p->order_ok = 0;
  p->next = s->cycle + 1;
  p->cycles++;
  p->latched += s->latched;
  for (int64_t i = 0; i < s->R * s->C; i++) {
    const tpu_systolic_pe *e = &s->pe[i];
    if (e->wk >= 0 && e->am >= 0) {
      p->macs_seen++;
      /* PE (r, c) multiplies fold f's activation by W[k0(f) + r][n0(f) + c] */
      const int64_t kt = (s->K + s->R - 1) / s->R;
      if (e->wf != e->af || e->wk != (e->wf % kt) * s->R + i / s->C ||
          e->wn != (e->wf / kt) * s->C + i % s->C)
        p->order_ok = 0;
    }
  }
  if (p->stop_at >= 0 && s->cycle == p->stop_at)
    return TPU_FAIL(d, TPU_ERR_RUNTIME, tpu_noloc(), "stopped by probe");
  return TPU_OK;
}

static void test_probe(void) {
  enum { R = 3, C = 2, M = 4, K = 7, N = 5 };
  float A[M * K], W[K * N], out[M * N];
  for (int i = 0; i < M * K; i++) A[i] = bf16_value(0);
  for (int i = 0; i < K * N; i++) W[i] = bf16_value(0);
  for (int mode = 0; mode < 2; mode++) {
    count_probe p = {{count_cycle, NULL}, 0, 0, 0, -1, 1, 0};
    tpu_mxu_cycles c;
    tpu_diag d;
    CHECK(tpu_systolic_run(R, C, M, K, N, (tpu_wload)mode, A, W, out, &c, &p.base, &d) ==
          TPU_OK);
    CHECK_EQ_INT(p.cycles, c.total + 1);
    CHECK(p.order_ok);
    CHECK_EQ_INT(p.macs_seen, (int64_t)M * K * N);
    CHECK_EQ_INT(p.latched, mode == TPU_WLOAD_DOUBLE ? c.folds * R * C : 0);
    count_probe stop = {{count_cycle, NULL}, 0, 0, 0, 5, 1, 0};
    d.msg[0] = 0;
    CHECK(tpu_systolic_run(R, C, M, K, N, (tpu_wload)mode, A, W, out, &c, &stop.base, &d) ==
          TPU_ERR_RUNTIME);
    CHECK_EQ_INT(stop.cycles, 6);
    CHECK_EQ_STR(d.msg, "stopped by probe");
  }
}

/* A probe that only watches: the run then advances one cycle at a time, while without a
 * probe it runs cycles in blocks between sequencer decisions (src/chip/systolic.c). Both
 * must give the same values and counts. It also checks that an empty load-bus slot is
 * empty in every field. */
typedef struct watch_probe {
  tpu_systolic_probe base;
  int64_t cycles;
  int bus_ok;
} watch_probe;

static tpu_status watch_cycle(tpu_systolic_probe *self, const tpu_systolic_state *s,
                              tpu_diag *d) {
  watch_probe *p = (watch_probe *)self;
  p->cycles++;
  for (int64_t i = 0; i < s->R * s->C; i++) {
    const tpu_systolic_pe *e = &s->pe[i];
    if (e->bf < 0 && (e->bk != -1 || e->bn != -1 || e->bd != -1 || tpu_f32_bits(e->wb) != 0))
      p->bus_ok = 0;
  }
  return TPU_OK;
}

static void test_blocks_match_single_cycles(void) {
  /* larger than the sweep: arrays past a block's 16 cycles in both directions, streams
   * longer and shorter than the array, several folds both ways */
  static const int64_t shapes[][5] = {{33, 33, 70, 100, 70}, {40, 24, 7, 90, 50},
                                      {24, 40, 130, 50, 90}, {64, 64, 20, 64, 64},
                                      {17, 48, 55, 35, 97}};
  int fails = 0;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const int64_t R = shapes[i][0], C = shapes[i][1], M = shapes[i][2], K = shapes[i][3],
                  N = shapes[i][4];
    float *A = tpu_malloc((size_t)(M * K) * sizeof(float));
    float *W = tpu_malloc((size_t)(K * N) * sizeof(float));
    float *o1 = tpu_malloc((size_t)(M * N) * sizeof(float));
    float *o2 = tpu_malloc((size_t)(M * N) * sizeof(float));
    CHECK(A && W && o1 && o2);
    if (!A || !W || !o1 || !o2) return;
    for (int64_t q = 0; q < M * K; q++) A[q] = bf16_value(1);
    for (int64_t q = 0; q < K * N; q++) W[q] = bf16_value(1);
    for (int mode = 0; mode < 2; mode++) {
      fails += !check_shape(R, C, M, K, N, (tpu_wload)mode, i % 2 == 0);
      watch_probe p = {{watch_cycle, NULL}, 0, 1};
      tpu_mxu_cycles c1, c2;
      tpu_diag d;
      CHECK(tpu_systolic_run(R, C, M, K, N, (tpu_wload)mode, A, W, o1, &c1, NULL, &d) ==
            TPU_OK);
      CHECK(tpu_systolic_run(R, C, M, K, N, (tpu_wload)mode, A, W, o2, &c2, &p.base, &d) ==
            TPU_OK);
      CHECK(same_bits(o1, o2, M * N));
      CHECK(memcmp(&c1, &c2, sizeof c1) == 0);
      CHECK_EQ_INT(p.cycles, c1.total + 1);
      CHECK(p.bus_ok);
    }
    tpu_free(A);
    tpu_free(W);
    tpu_free(o1);
    tpu_free(o2);
  }
  CHECK_EQ_INT(fails, 0);
}

static void test_errors_and_oom(void) {
  float a = 1.0f, w = 2.0f, o = 0.0f;
  tpu_mxu_cycles c;
  tpu_diag d;
  CHECK(tpu_systolic_run(0, 1, 1, 1, 1, TPU_WLOAD_SERIAL, &a, &w, &o, &c, NULL, &d) ==
        TPU_ERR_ARG);
  CHECK(tpu_systolic_run(1, 1, 1, 1, 1, TPU_WLOAD_SERIAL, NULL, &w, &o, &c, NULL, &d) ==
        TPU_ERR_ARG);
  CHECK(tpu_systolic_run(5000, 1, 1, 1, 1, TPU_WLOAD_SERIAL, &a, &w, &o, &c, NULL, &d) ==
        TPU_ERR_LIMIT);
  /* every allocation of a run failing in turn: an error, never a crash or a leak */
  enum { R = 3, C = 3, M = 4, K = 5, N = 4 };
  float A[M * K], W[K * N], out[M * N];
  for (int i = 0; i < M * K; i++) A[i] = 1.0f;
  for (int i = 0; i < K * N; i++) W[i] = 1.0f;
  tpu_alloc_fail_after(0);
  CHECK(tpu_systolic_run(R, C, M, K, N, TPU_WLOAD_DOUBLE, A, W, out, &c, NULL, &d) == TPU_OK);
  long n = tpu_alloc_fail_after(0);
  CHECK(n >= 1);
  for (long i = 1; i <= n; i++) {
    tpu_alloc_fail_after(i);
    CHECK(tpu_systolic_run(R, C, M, K, N, TPU_WLOAD_DOUBLE, A, W, out, &c, NULL, &d) ==
          TPU_ERR_NOMEM);
  }
  tpu_alloc_fail_after(0);
}

static long count_str(const char *hay, const char *needle) {
  long n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* The brief's example: a 4x4 array on a 6x4 by 4x4 product, as text and as a page. */
static void test_animation(void) {
  enum { R = 4, C = 4, M = 6, K = 4, N = 4 };
  float A[M * K], W[K * N];
  for (int i = 0; i < M * K; i++) A[i] = (float)(i % 7) - 3.0f;
  for (int i = 0; i < K * N; i++) W[i] = (float)(i % 5) * 0.5f;
  char path[64], needle[64];
  tpu_diag d;
  for (int mode = 0; mode < 2; mode++) {
    tpu_mxu_cycles c;
    CHECK(tpu_mxu_tile_cycles(R, C, M, K, N, (tpu_wload)mode, &c, &d) == TPU_OK);
    snprintf(path, sizeof path, "/tmp/tpu_test_systolic_%ld.html", (long)getpid());
    CHECK(tpu_systolic_animate_html(path, R, C, M, K, N, A, W, (tpu_wload)mode, &d) == TPU_OK);
    char *page = test_read_file(path);
    CHECK(page != NULL);
    if (page) {
      CHECK(strlen(page) > 1000);
      CHECK(strstr(page, "<svg") != NULL && strstr(page, "</html>") != NULL);
      CHECK(strstr(page, "http") == strstr(page, "http://www.w3.org/2000/svg"));
      for (int64_t t = 0; t <= c.total; t++) {
        snprintf(needle, sizeof needle, "{t:%lld,", (long long)t);
        CHECK_EQ_INT(count_str(page, needle), 1);
      }
      snprintf(needle, sizeof needle, "{t:%lld,", (long long)c.total + 1);
      CHECK(strstr(page, needle) == NULL);
      tpu_free(page);
    }
    remove(path);

    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f) continue;
    CHECK(tpu_systolic_animate_text(f, R, C, M, K, N, A, W, (tpu_wload)mode, &d) == TPU_OK);
    long n = ftell(f);
    rewind(f);
    char *text = tpu_malloc((size_t)n + 1);
    CHECK(text && fread(text, 1, (size_t)n, f) == (size_t)n);
    if (text) {
      text[n] = 0;
      CHECK_EQ_INT(count_str(text, "== cycle "), c.total + 1);
      snprintf(needle, sizeof needle, "== cycle %lld ==", (long long)c.total);
      CHECK(strstr(text, needle) != NULL);
      /* the last output, out[5][3], leaves in the last cycle */
      CHECK(strstr(text, "o5,3=") != NULL);
      tpu_free(text);
    }
    fclose(f);
  }
  /* too large: refused before anything is written */
  snprintf(path, sizeof path, "/tmp/tpu_test_systolic_big_%ld.html", (long)getpid());
  CHECK(tpu_systolic_animate_html(path, 64, 4, M, K, N, A, W, TPU_WLOAD_SERIAL, &d) ==
        TPU_ERR_LIMIT);
  CHECK(access(path, F_OK) != 0);
  CHECK(tpu_systolic_animate_html("/nonexistent-dir/x.html", R, C, M, K, N, A, W,
                                  TPU_WLOAD_SERIAL, &d) == TPU_ERR_IO);
}

int main(void) {
  test_sweep();
  test_non_square();
  test_scalesim_totals();
  test_hand_computed();
  test_specials();
  test_probe();
  test_blocks_match_single_cycles();
  test_errors_and_oom();
  test_animation();
  CHECK_DONE();
}
