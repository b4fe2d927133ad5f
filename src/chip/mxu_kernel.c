/* Fast MXU kernels: blocked, vectorised, multi-threaded matmuls bit-identical to the PE-level
 * array (the accumulation contract is in mxu.h; docs/numerics.md explains it for users).
 *
 * Each PE step is two roundings, psum = psum + (a*w rounded to f32), as the PE-level array
 * (systolic.c) computes it. For bf16 operands the product is exact in f32 except when it
 * overflows (to inf) or falls below 2^-126 with more bits than a subnormal holds; there a
 * fused multiply-add would differ, so none is used. This relies on the compiler not
 * contracting a*b + c into an FMA: ISO C mode (-std=c11, as CMakeLists.txt sets) makes GCC
 * default to -ffp-contract=off; tests/unit/chip/test_mxu_kernel.c catches a contraction. */
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/par.h"
#include "base/tensor.h"
#include "chip/mxu.h"
#include "chip/mxu_kernel_int.h"

#if defined(__GNUC__) && defined(__x86_64__)
#define MXU_X86 1
#include <immintrin.h>
#define TGT_AVX2 __attribute__((target("avx2")))
#define TGT_AVX2_FMA __attribute__((target("avx2,fma")))
#define TGT_AVX512 __attribute__((target("avx512f")))
#define TGT_AVX512_FMA __attribute__((target("avx512f,fma")))
#define TGT_AVX512BW __attribute__((target("avx512f,avx512bw")))
#define ALWAYS_INLINE __attribute__((always_inline)) inline
#else
#define MXU_X86 0
#define ALWAYS_INLINE inline
#endif

/* Blocking, BLIS-style. A micro-tile is MR rows x NR columns of out held in registers (12
 * AVX2 or AVX-512 accumulators; NR is the micro-kernel's: 16, or 32 for AVX-512). The
 * k-loop of one micro-kernel call never crosses a K-tile boundary,
 * so the registers hold exactly the array's psum for that tile; a K-tile longer than KC_MAX
 * is cut into chunks whose psums are carried through memory (an exact store and reload).
 * Packed A (MC x KC_MAX f32 = 144 KiB) is meant to stay in L2, a packed B micro-panel
 * (KC_MAX x NR f32 = 16 KiB) in L1, packed B (KC_MAX x NC f32 = 2 MiB) in L3. */
enum { MR = 6, NR16 = 16, NR_MAX = 32, KC_MAX = 256, MC = 144, NC = 2048, MAX_THREADS = TPU_MAX_THREADS };

/* Multiply-adds (M*K*N) a thread must get for threads to be started: about a millisecond. */
#define PAR_MIN_MACS 4e6

#define CANON_NAN_BITS 0x7fc00000u

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static inline float canon_nan(float v) { return isnan(v) ? tpu_f32_from_bits(CANON_NAN_BITS) : v; }

/* ---- Code path selection ----
 * The instruction set is chosen when a product starts, from the CPU it runs on (tpu_cpu_has:
 * the C library's detection, no cpuid at start-up) and the path a test or benchmark forces:
 * AVX-512 (NR = 32), AVX2 (NR = 16), or plain C (NR = 16). Each path sums the same products in the same order. */

static tpu__mxu_path g_path = TPU__MXU_PATH_AUTO;
static int g_allow_fma = 1;

int tpu__mxu_allow_fma(int allow) {
  int old = g_allow_fma;
  g_allow_fma = allow != 0;
  return old;
}

tpu__mxu_path tpu__mxu_set_path(tpu__mxu_path p) {
  tpu__mxu_path old = g_path;
  g_path = p;
  return old;
}

static int cpu_avx2(void) {
#if MXU_X86
  return tpu_cpu_has(TPU_CPU_AVX2);
#else
  return 0;
#endif
}
static int cpu_avx512(void) {
#if MXU_X86
  return tpu_cpu_has(TPU_CPU_AVX512F) && tpu_cpu_has(TPU_CPU_AVX512BW);
#else
  return 0;
#endif
}
static int cpu_fma(void) {
#if MXU_X86
  return tpu_cpu_has(TPU_CPU_FMA);
#else
  return 0;
#endif
}

int tpu__mxu_path_supported(tpu__mxu_path p) {
  switch (p) {
  case TPU__MXU_PATH_AUTO:
  case TPU__MXU_PATH_SCALAR: return 1;
  case TPU__MXU_PATH_AVX2: return cpu_avx2();
  case TPU__MXU_PATH_AVX512: return cpu_avx512();
  }
  return 0;
}

typedef enum { ISA_SCALAR, ISA_AVX2, ISA_AVX512 } mxu_isa;

/* The instruction set of the current setting on this CPU: a forced path the CPU lacks takes
 * the best one below it. */
static mxu_isa cur_isa(void) {
  tpu__mxu_path p = g_path;
  if (p == TPU__MXU_PATH_SCALAR) return ISA_SCALAR;
  if ((p == TPU__MXU_PATH_AUTO || p == TPU__MXU_PATH_AVX512) && cpu_avx512()) return ISA_AVX512;
  return cpu_avx2() ? ISA_AVX2 : ISA_SCALAR;
}

const char *tpu__mxu_kernel_name(void) {
  static const char *names[] = {"scalar", "avx2", "avx512"};
  return names[cur_isa()];
}

/* ---- Threads ---- */

/* How many threads to use for `units` independent pieces of M*K*N multiply-adds: `n` when
 * the caller gives it (tests), else tpu_threads() as long as each thread gets at least
 * PAR_MIN_MACS (a thread costs its start and, on a busy machine, a wait to be scheduled at
 * the join; small products run faster on one). */
static int plan_threads(int n, int64_t units, double macs) {
  if (n <= 0) return tpu_par_threads(units, macs, PAR_MIN_MACS);
  if (n > MAX_THREADS) n = MAX_THREADS;
  if (n > units) n = (int)units;
  return n < 1 ? 1 : n;
}

/* ---- Packing: operands widened (exactly) to f32 panels ----
 * Each packer exists for bf16 sources (_bf16) and f32 sources (_f32, copied as they are). */

/* A full panel of A (six rows) for k in blocks of 8: each row's 8 values loaded as one
 * vector, the 6 x 8 block transposed in registers (two zero rows make it 8 x 8) and written
 * as 8 groups of six, each store's last two lanes overwritten by the next group's (so only
 * while at least one more k follows the block). Returns the k up to which it packed; the
 * scalar loop does the rest. Same values as the scalar loop: a bf16 value widened is its
 * bits shifted up 16, an f32 value is copied. */
#if MXU_X86
TGT_AVX2 static inline __m256 load8_bf16(const tpu_bf16 *s) {
  __m128i h = _mm_loadu_si128((const __m128i *)(const void *)s);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
TGT_AVX2 static inline __m256 load8_f32(const float *s) { return _mm256_loadu_ps(s); }

#define DEFINE_PACK6(SUF, T)                                                                   \
  TGT_AVX2 static int64_t pack6_avx2_##SUF(const T *s0, int64_t K, int64_t kc, float *dst) {  \
    int64_t k = 0;                                                                             \
    __m256 z = _mm256_setzero_ps();                                                            \
    for (; k + 8 < kc; k += 8) {                                                               \
      const T *s = s0 + k;                                                                     \
      __m256 r0 = load8_##SUF(s), r1 = load8_##SUF(s + K), r2 = load8_##SUF(s + 2 * K);        \
      __m256 r3 = load8_##SUF(s + 3 * K), r4 = load8_##SUF(s + 4 * K);                         \
      __m256 r5 = load8_##SUF(s + 5 * K);                                                      \
      __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);                 \
      __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);                 \
      __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);                 \
      __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);       \
      __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);       \
      __m256 u4 = _mm256_shuffle_ps(t4, z, 0x44), u5 = _mm256_shuffle_ps(t4, z, 0xee);         \
      __m256 u6 = _mm256_shuffle_ps(t5, z, 0x44), u7 = _mm256_shuffle_ps(t5, z, 0xee);         \
      float *o = dst + k * MR;                                                                 \
      _mm256_storeu_ps(o + 0 * MR, _mm256_permute2f128_ps(u0, u4, 0x20));                      \
      _mm256_storeu_ps(o + 1 * MR, _mm256_permute2f128_ps(u1, u5, 0x20));                      \
      _mm256_storeu_ps(o + 2 * MR, _mm256_permute2f128_ps(u2, u6, 0x20));                      \
      _mm256_storeu_ps(o + 3 * MR, _mm256_permute2f128_ps(u3, u7, 0x20));                      \
      _mm256_storeu_ps(o + 4 * MR, _mm256_permute2f128_ps(u0, u4, 0x31));                      \
      _mm256_storeu_ps(o + 5 * MR, _mm256_permute2f128_ps(u1, u5, 0x31));                      \
      _mm256_storeu_ps(o + 6 * MR, _mm256_permute2f128_ps(u2, u6, 0x31));                      \
      _mm256_storeu_ps(o + 7 * MR, _mm256_permute2f128_ps(u3, u7, 0x31));                      \
    }                                                                                          \
    return k;                                                                                  \
  }
DEFINE_PACK6(bf16, tpu_bf16)
DEFINE_PACK6(f32, float)
#endif

static int64_t pack6_bf16(const tpu_bf16 *s0, int64_t K, int64_t kc, float *dst) {
#if MXU_X86
  if (cur_isa() != ISA_SCALAR) return pack6_avx2_bf16(s0, K, kc, dst);
#endif
  (void)s0, (void)K, (void)kc, (void)dst;
  return 0;
}
static int64_t pack6_f32(const float *s0, int64_t K, int64_t kc, float *dst) {
#if MXU_X86
  if (cur_isa() != ISA_SCALAR) return pack6_avx2_f32(s0, K, kc, dst);
#endif
  (void)s0, (void)K, (void)kc, (void)dst;
  return 0;
}

#define AS_F32(x) (x)
#define DEFINE_PACKERS(SUF, T, CONV)                                                           \
  /* Packs A rows [i0, i0+mc) x columns [k0, k0+kc) as MR-row panels: panel p holds, for    \
   * each k, the MR values A[i0 + p*MR + r][k0 + k]; rows past mc are +0 (their outputs are  \
   * never stored). */                                                                       \
  static void pack_a_##SUF(const void *Av, int64_t K, int64_t i0, int64_t mc, int64_t k0,   \
                           int64_t kc, float *dst, int nr) {                                 \
    const T *A = Av;                                                                         \
    (void)nr;                                                                                \
    for (int64_t p = 0; p < mc; p += MR) {                                                   \
      int64_t rows = min64(MR, mc - p);                                                      \
      if (rows == MR) { /* six read streams, contiguous writes */                            \
        const T *s0 = A + (i0 + p) * K + k0, *s1 = s0 + K, *s2 = s1 + K, *s3 = s2 + K;       \
        const T *s4 = s3 + K, *s5 = s4 + K;                                                  \
        for (int64_t k = pack6_##SUF(s0, K, kc, dst); k < kc; k++) {                         \
          float *o = dst + k * MR;                                                           \
          o[0] = CONV(s0[k]), o[1] = CONV(s1[k]), o[2] = CONV(s2[k]);                        \
          o[3] = CONV(s3[k]), o[4] = CONV(s4[k]), o[5] = CONV(s5[k]);                        \
        }                                                                                    \
      } else {                                                                               \
        for (int64_t r = 0; r < MR; r++) {                                                   \
          if (r < rows) {                                                                    \
            const T *src = A + (i0 + p + r) * K + k0;                                        \
            for (int64_t k = 0; k < kc; k++) dst[k * MR + r] = CONV(src[k]);                 \
          } else {                                                                           \
            for (int64_t k = 0; k < kc; k++) dst[k * MR + r] = 0.0f;                         \
          }                                                                                  \
        }                                                                                    \
      }                                                                                      \
      dst += kc * MR;                                                                        \
    }                                                                                        \
  }                                                                                          \
  /* Packs W rows [k0, k0+kc) x columns [j0, j0+nc) as nr-column panels: panel p holds, for \
   * each k, the nr values W[k0 + k][j0 + p*nr + c]; columns past nc are +0. */             \
  static void pack_b_##SUF(const void *Wv, int64_t N, int64_t k0, int64_t kc, int64_t j0,   \
                           int64_t nc, float *dst, int nr) {                                 \
    const T *W = Wv;                                                                         \
    for (int64_t p = 0; p < nc; p += nr) {                                                   \
      int64_t cols = min64(nr, nc - p);                                                      \
      for (int64_t k = 0; k < kc; k++) {                                                     \
        const T *src = W + (k0 + k) * N + j0 + p;                                            \
        float *o = dst + k * nr;                                                             \
        for (int64_t c = 0; c < cols; c++) o[c] = CONV(src[c]);                              \
        for (int64_t c = cols; c < nr; c++) o[c] = 0.0f;                                     \
      }                                                                                      \
      dst += kc * nr;                                                                        \
    }                                                                                        \
  }                                                                                          \
  /* For C = W^T x A^T. Packs W^T rows [i0, i0+mc) (columns of W) x k [k0, k0+kc) in the   \
   * layout of pack_a: panel p holds, for each k, W[k0 + k][i0 + p*MR + r]. */               \
  static void pack_wt_##SUF(const void *Wv, int64_t N, int64_t i0, int64_t mc, int64_t k0,  \
                            int64_t kc, float *dst, int nr) {                                \
    const T *W = Wv;                                                                         \
    (void)nr;                                                                                \
    for (int64_t p = 0; p < mc; p += MR) {                                                   \
      int64_t rows = min64(MR, mc - p);                                                      \
      for (int64_t k = 0; k < kc; k++) {                                                     \
        const T *src = W + (k0 + k) * N + i0 + p;                                            \
        float *o = dst + k * MR;                                                             \
        for (int64_t r = 0; r < rows; r++) o[r] = CONV(src[r]);                              \
        for (int64_t r = rows; r < MR; r++) o[r] = 0.0f;                                     \
      }                                                                                      \
      dst += kc * MR;                                                                        \
    }                                                                                        \
  }                                                                                          \
  /* For C = W^T x A^T. Packs A^T k [k0, k0+kc) x columns [j0, j0+nc) (rows of A) in the   \
   * layout of pack_b: panel p holds, for each k, A[j0 + p*nr + c][k0 + k]. */               \
  static void pack_at_##SUF(const void *Av, int64_t K, int64_t k0, int64_t kc, int64_t j0,  \
                            int64_t nc, float *dst, int nr) {                                \
    const T *A = Av;                                                                         \
    for (int64_t p = 0; p < nc; p += nr) {                                                   \
      int64_t cols = min64(nr, nc - p);                                                      \
      for (int64_t c = 0; c < nr; c++) {                                                     \
        if (c < cols) {                                                                      \
          const T *src = A + (j0 + p + c) * K + k0;                                          \
          for (int64_t k = 0; k < kc; k++) dst[k * nr + c] = CONV(src[k]);                   \
        } else {                                                                             \
          for (int64_t k = 0; k < kc; k++) dst[k * nr + c] = 0.0f;                           \
        }                                                                                    \
      }                                                                                      \
      dst += kc * nr;                                                                        \
    }                                                                                        \
  }

DEFINE_PACKERS(bf16, tpu_bf16, tpu_bf16_to_f32)
DEFINE_PACKERS(f32, float, AS_F32)

typedef void (*pack_fn)(const void *src, int64_t ld, int64_t i0, int64_t n0, int64_t k0, int64_t kn, float *dst,
                        int nr);

/* ---- Micro-kernels ----
 * One call computes psum[MR][nr] over kc k-steps of packed panels a (kc x MR) and b (kc x
 * NRK, the kernel's panel width), in k order, each step psum = psum + a*w (product rounded,
 * then the sum). psum starts at +0 (in == NULL) or at carried values `in` (MR*NRK,
 * row-major). With `carry` non-NULL the psums are stored there; otherwise they finish the
 * K-tile into out (mr x nr valid entries; psum (i, j) goes to out[i*ldo + j], or to
 * out[j*ldo + i] when `trans`): stored as they are for the first K-tile, added to out for
 * later ones, NaNs made canonical.
 *
 * The _fma kernels compute each step as one fused multiply-add, round(psum + a*w). That is
 * the same value as round(psum + round(a*w)) exactly when a*w needs no rounding, and the
 * driver takes them only then (products_exact below). */
typedef void (*ukernel_fn)(int64_t kc, const float *a, const float *b, const float *in,
                           float *carry, float *out, int64_t ldo, int mr, int nr, int first,
                           int trans, int canon);

static void finish_scalar(const float *ps, int nrk, float *out, int64_t ldo, int mr, int nr, int first,
                          int trans, int canon) {
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) {
      float *o = trans ? out + j * ldo + i : out + i * ldo + j;
      float v = first ? ps[i * nrk + j] : *o + ps[i * nrk + j];
      *o = canon ? canon_nan(v) : v;
    }
}

static void ukernel_scalar(int64_t kc, const float *a, const float *b, const float *in,
                           float *carry, float *out, int64_t ldo, int mr, int nr, int first,
                           int trans, int canon) {
  float c[MR * NR16];
  for (int i = 0; i < MR * NR16; i++) c[i] = in ? in[i] : 0.0f;
  for (int64_t k = 0; k < kc; k++, a += MR, b += NR16)
    for (int i = 0; i < mr; i++)
      for (int j = 0; j < nr; j++) c[i * NR16 + j] = c[i * NR16 + j] + a[i] * b[j];
  if (carry)
    memcpy(carry, c, sizeof c);
  else
    finish_scalar(c, NR16, out, ldo, mr, nr, first, trans, canon);
}

#if MXU_X86
TGT_AVX2 static inline void finish8(__m256 p, float *o, int first, int canon) {
  __m256 v = first ? p : _mm256_add_ps(_mm256_loadu_ps(o), p);
  if (!canon) {
    _mm256_storeu_ps(o, v);
    return;
  }
  __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  v = _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32((int)CANON_NAN_BITS)), nan);
  _mm256_storeu_ps(o, v);
}

TGT_AVX512 static inline void finish16(__m512 p, float *o, int first, int canon) {
  __m512 v = first ? p : _mm512_add_ps(_mm512_loadu_ps(o), p);
  if (canon) {
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    v = _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(_mm512_set1_epi32((int)CANON_NAN_BITS)));
  }
  _mm512_storeu_ps(o, v);
}

/* The 6 x 16 AVX2 micro-kernel: two ymm accumulators per row; per k, two loads of b, six
 * broadcasts of a and twelve steps: a multiply and an add each (on AMD Zen these issue to
 * different pipes, which keeps the FMA kernel's throughput), or with STEP = an FMA, one. */
#define MXU_AVX2_STEP_MA(c, a, b) _mm256_add_ps(c, _mm256_mul_ps(a, b))
#define MXU_AVX2_STEP_FMA(c, a, b) _mm256_fmadd_ps(a, b, c)
#define DEFINE_UKERNEL_AVX2(NAME, TGT, STEP)                                                     \
  TGT static void NAME(int64_t kc, const float *a, const float *b, const float *in, float *carry, \
                       float *out, int64_t ldo, int mr, int nr, int first, int trans, int canon) { \
    __m256 c0a, c0b, c1a, c1b, c2a, c2b, c3a, c3b, c4a, c4b, c5a, c5b;                           \
    if (!carry && mr == MR && nr == NR16 && !trans) {                                            \
      /* The accumulator tile was last touched a whole K-tile ago and is likely out of L1/L2: \
       * fetch it while the k-loop runs. */                                                      \
      for (int i = 0; i < MR; i++) {                                                             \
        _mm_prefetch((const char *)(out + i * ldo), _MM_HINT_T0);                                \
        _mm_prefetch((const char *)(out + i * ldo + NR16 - 1), _MM_HINT_T0);                     \
      }                                                                                          \
    }                                                                                            \
    if (in) {                                                                                    \
      c0a = _mm256_loadu_ps(in + 0 * NR16), c0b = _mm256_loadu_ps(in + 0 * NR16 + 8);           \
      c1a = _mm256_loadu_ps(in + 1 * NR16), c1b = _mm256_loadu_ps(in + 1 * NR16 + 8);           \
      c2a = _mm256_loadu_ps(in + 2 * NR16), c2b = _mm256_loadu_ps(in + 2 * NR16 + 8);           \
      c3a = _mm256_loadu_ps(in + 3 * NR16), c3b = _mm256_loadu_ps(in + 3 * NR16 + 8);           \
      c4a = _mm256_loadu_ps(in + 4 * NR16), c4b = _mm256_loadu_ps(in + 4 * NR16 + 8);           \
      c5a = _mm256_loadu_ps(in + 5 * NR16), c5b = _mm256_loadu_ps(in + 5 * NR16 + 8);           \
    } else {                                                                                     \
      c0a = c0b = c1a = c1b = c2a = c2b = c3a = c3b = c4a = c4b = c5a = c5b = _mm256_setzero_ps(); \
    }                                                                                            \
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR16) {                                       \
      __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8), av;                           \
      av = _mm256_broadcast_ss(a + 0), c0a = STEP(c0a, av, b0), c0b = STEP(c0b, av, b1);         \
      av = _mm256_broadcast_ss(a + 1), c1a = STEP(c1a, av, b0), c1b = STEP(c1b, av, b1);         \
      av = _mm256_broadcast_ss(a + 2), c2a = STEP(c2a, av, b0), c2b = STEP(c2b, av, b1);         \
      av = _mm256_broadcast_ss(a + 3), c3a = STEP(c3a, av, b0), c3b = STEP(c3b, av, b1);         \
      av = _mm256_broadcast_ss(a + 4), c4a = STEP(c4a, av, b0), c4b = STEP(c4b, av, b1);         \
      av = _mm256_broadcast_ss(a + 5), c5a = STEP(c5a, av, b0), c5b = STEP(c5b, av, b1);         \
    }                                                                                            \
    if (carry || mr < MR || nr < NR16 || trans) {                                                \
      float tmp[MR * NR16];                                                                      \
      float *dst = carry ? carry : tmp;                                                          \
      _mm256_storeu_ps(dst + 0 * NR16, c0a), _mm256_storeu_ps(dst + 0 * NR16 + 8, c0b);          \
      _mm256_storeu_ps(dst + 1 * NR16, c1a), _mm256_storeu_ps(dst + 1 * NR16 + 8, c1b);          \
      _mm256_storeu_ps(dst + 2 * NR16, c2a), _mm256_storeu_ps(dst + 2 * NR16 + 8, c2b);          \
      _mm256_storeu_ps(dst + 3 * NR16, c3a), _mm256_storeu_ps(dst + 3 * NR16 + 8, c3b);          \
      _mm256_storeu_ps(dst + 4 * NR16, c4a), _mm256_storeu_ps(dst + 4 * NR16 + 8, c4b);          \
      _mm256_storeu_ps(dst + 5 * NR16, c5a), _mm256_storeu_ps(dst + 5 * NR16 + 8, c5b);          \
      if (!carry) finish_scalar(tmp, NR16, out, ldo, mr, nr, first, trans, canon);              \
      return;                                                                                    \
    }                                                                                            \
    finish8(c0a, out + 0 * ldo, first, canon), finish8(c0b, out + 0 * ldo + 8, first, canon);    \
    finish8(c1a, out + 1 * ldo, first, canon), finish8(c1b, out + 1 * ldo + 8, first, canon);    \
    finish8(c2a, out + 2 * ldo, first, canon), finish8(c2b, out + 2 * ldo + 8, first, canon);    \
    finish8(c3a, out + 3 * ldo, first, canon), finish8(c3b, out + 3 * ldo + 8, first, canon);    \
    finish8(c4a, out + 4 * ldo, first, canon), finish8(c4b, out + 4 * ldo + 8, first, canon);    \
    finish8(c5a, out + 5 * ldo, first, canon), finish8(c5b, out + 5 * ldo + 8, first, canon);    \
  }
DEFINE_UKERNEL_AVX2(ukernel_avx2, TGT_AVX2, MXU_AVX2_STEP_MA)
DEFINE_UKERNEL_AVX2(ukernel_avx2_fma, TGT_AVX2_FMA, MXU_AVX2_STEP_FMA)

/* The 6 x 32 AVX-512 micro-kernel: the AVX2 one with zmm registers (twelve accumulators of
 * 16 lanes; per k two loads of b, six broadcasts of a). */
#define MXU_AVX512_STEP_MA(c, a, b) _mm512_add_ps(c, _mm512_mul_ps(a, b))
#define MXU_AVX512_STEP_FMA(c, a, b) _mm512_fmadd_ps(a, b, c)
#define DEFINE_UKERNEL_AVX512(NAME, TGT, STEP)                                                   \
  TGT static void NAME(int64_t kc, const float *a, const float *b, const float *in, float *carry, \
                       float *out, int64_t ldo, int mr, int nr, int first, int trans, int canon) { \
    __m512 c0a, c0b, c1a, c1b, c2a, c2b, c3a, c3b, c4a, c4b, c5a, c5b;                           \
    if (!carry && mr == MR && nr == NR_MAX && !trans) {                                          \
      for (int i = 0; i < MR; i++) {                                                             \
        _mm_prefetch((const char *)(out + i * ldo), _MM_HINT_T0);                                \
        _mm_prefetch((const char *)(out + i * ldo + NR_MAX - 1), _MM_HINT_T0);                   \
      }                                                                                          \
    }                                                                                            \
    if (in) {                                                                                    \
      c0a = _mm512_loadu_ps(in + 0 * NR_MAX), c0b = _mm512_loadu_ps(in + 0 * NR_MAX + 16);       \
      c1a = _mm512_loadu_ps(in + 1 * NR_MAX), c1b = _mm512_loadu_ps(in + 1 * NR_MAX + 16);       \
      c2a = _mm512_loadu_ps(in + 2 * NR_MAX), c2b = _mm512_loadu_ps(in + 2 * NR_MAX + 16);       \
      c3a = _mm512_loadu_ps(in + 3 * NR_MAX), c3b = _mm512_loadu_ps(in + 3 * NR_MAX + 16);       \
      c4a = _mm512_loadu_ps(in + 4 * NR_MAX), c4b = _mm512_loadu_ps(in + 4 * NR_MAX + 16);       \
      c5a = _mm512_loadu_ps(in + 5 * NR_MAX), c5b = _mm512_loadu_ps(in + 5 * NR_MAX + 16);       \
    } else {                                                                                     \
      c0a = c0b = c1a = c1b = c2a = c2b = c3a = c3b = c4a = c4b = c5a = c5b = _mm512_setzero_ps(); \
    }                                                                                            \
    for (int64_t k = 0; k < kc; k++, a += MR, b += NR_MAX) {                                     \
      __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), av;                          \
      av = _mm512_set1_ps(a[0]), c0a = STEP(c0a, av, b0), c0b = STEP(c0b, av, b1);               \
      av = _mm512_set1_ps(a[1]), c1a = STEP(c1a, av, b0), c1b = STEP(c1b, av, b1);               \
      av = _mm512_set1_ps(a[2]), c2a = STEP(c2a, av, b0), c2b = STEP(c2b, av, b1);               \
      av = _mm512_set1_ps(a[3]), c3a = STEP(c3a, av, b0), c3b = STEP(c3b, av, b1);               \
      av = _mm512_set1_ps(a[4]), c4a = STEP(c4a, av, b0), c4b = STEP(c4b, av, b1);               \
      av = _mm512_set1_ps(a[5]), c5a = STEP(c5a, av, b0), c5b = STEP(c5b, av, b1);               \
    }                                                                                            \
    if (carry || mr < MR || nr < NR_MAX || trans) {                                              \
      float tmp[MR * NR_MAX];                                                                    \
      float *dst = carry ? carry : tmp;                                                          \
      _mm512_storeu_ps(dst + 0 * NR_MAX, c0a), _mm512_storeu_ps(dst + 0 * NR_MAX + 16, c0b);     \
      _mm512_storeu_ps(dst + 1 * NR_MAX, c1a), _mm512_storeu_ps(dst + 1 * NR_MAX + 16, c1b);     \
      _mm512_storeu_ps(dst + 2 * NR_MAX, c2a), _mm512_storeu_ps(dst + 2 * NR_MAX + 16, c2b);     \
      _mm512_storeu_ps(dst + 3 * NR_MAX, c3a), _mm512_storeu_ps(dst + 3 * NR_MAX + 16, c3b);     \
      _mm512_storeu_ps(dst + 4 * NR_MAX, c4a), _mm512_storeu_ps(dst + 4 * NR_MAX + 16, c4b);     \
      _mm512_storeu_ps(dst + 5 * NR_MAX, c5a), _mm512_storeu_ps(dst + 5 * NR_MAX + 16, c5b);     \
      if (!carry) finish_scalar(tmp, NR_MAX, out, ldo, mr, nr, first, trans, canon);            \
      return;                                                                                    \
    }                                                                                            \
    finish16(c0a, out + 0 * ldo, first, canon), finish16(c0b, out + 0 * ldo + 16, first, canon); \
    finish16(c1a, out + 1 * ldo, first, canon), finish16(c1b, out + 1 * ldo + 16, first, canon); \
    finish16(c2a, out + 2 * ldo, first, canon), finish16(c2b, out + 2 * ldo + 16, first, canon); \
    finish16(c3a, out + 3 * ldo, first, canon), finish16(c3b, out + 3 * ldo + 16, first, canon); \
    finish16(c4a, out + 4 * ldo, first, canon), finish16(c4b, out + 4 * ldo + 16, first, canon); \
    finish16(c5a, out + 5 * ldo, first, canon), finish16(c5b, out + 5 * ldo + 16, first, canon); \
  }
DEFINE_UKERNEL_AVX512(ukernel_avx512, TGT_AVX512, MXU_AVX512_STEP_MA)
DEFINE_UKERNEL_AVX512(ukernel_avx512_fma, TGT_AVX512_FMA, MXU_AVX512_STEP_FMA)
#endif

/* ---- When a fused multiply-add gives the array's bits ----
 * A product of two bf16 values has at most 16 significant bits, so it is exact in f32 unless
 * it overflows or falls below 2^-126 (where a subnormal may not hold its bits). Over a whole
 * product A x W that holds when every value is finite, max|a| max|w| < 2^128 and
 * min|a| min|w| >= 2^-126 over the nonzero values (a zero factor gives a zero product, exact,
 * with the sign the rounded product has). Then round(psum + a*w) = round(psum + round(a*w))
 * for every step, including overflowing and cancelling sums. */

/* Largest |x| and smallest nonzero |x| as f32 bit patterns (absolute values compare as
 * their bits); *bad set when some value is inf or NaN. */
typedef struct abs_range {
  uint32_t max, minnz;
} abs_range;

/* The scans read every operand value once per product, before any thread starts, so they
 * are vectorised for the instruction set the kernels use (16-bit lanes for bf16: |x|'s bits
 * and |x|'s bits - 1, which wraps a zero to the top, give the same order as the f32 bits). */
static ALWAYS_INLINE abs_range range_f32_body(const float *x, size_t n) {
  uint32_t mx = 0, mnm1 = UINT32_MAX; /* min of |x| - 1: zero wraps to the top */
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    u &= 0x7fffffffu;
    mx = u > mx ? u : mx;
    mnm1 = u - 1u < mnm1 ? u - 1u : mnm1;
  }
  return (abs_range){mx, mnm1 + 1u};
}

static ALWAYS_INLINE abs_range range_bf16_body(const tpu_bf16 *x, size_t n) {
  uint16_t mx = 0, mnm1 = UINT16_MAX;
  for (size_t i = 0; i < n; i++) {
    uint16_t u = (uint16_t)(x[i].bits & 0x7fffu), um1 = (uint16_t)(u - 1u);
    mx = u > mx ? u : mx;
    mnm1 = um1 < mnm1 ? um1 : mnm1;
  }
  return (abs_range){(uint32_t)mx << 16, (uint32_t)(uint16_t)(mnm1 + 1u) << 16};
}

#if MXU_X86
TGT_AVX512BW static abs_range range_f32_avx512(const float *x, size_t n) { return range_f32_body(x, n); }
TGT_AVX512BW static abs_range range_bf16_avx512(const tpu_bf16 *x, size_t n) { return range_bf16_body(x, n); }
TGT_AVX2 static abs_range range_f32_avx2(const float *x, size_t n) { return range_f32_body(x, n); }
TGT_AVX2 static abs_range range_bf16_avx2(const tpu_bf16 *x, size_t n) { return range_bf16_body(x, n); }
#endif

static abs_range range_f32(const float *x, size_t n) {
#if MXU_X86
  mxu_isa isa = cur_isa();
  if (isa == ISA_AVX512) return range_f32_avx512(x, n);
  if (isa == ISA_AVX2) return range_f32_avx2(x, n);
#endif
  return range_f32_body(x, n);
}

static abs_range range_bf16(const tpu_bf16 *x, size_t n) {
#if MXU_X86
  mxu_isa isa = cur_isa();
  if (isa == ISA_AVX512) return range_bf16_avx512(x, n);
  if (isa == ISA_AVX2) return range_bf16_avx2(x, n);
#endif
  return range_bf16_body(x, n);
}

static int products_exact(abs_range a, abs_range w) {
  if (a.max >= 0x7f800000u || w.max >= 0x7f800000u) return 0; /* inf or NaN */
  if (a.max == 0 || w.max == 0) return 1;                     /* every product is a zero */
  double amax = tpu_f32_from_bits(a.max), wmax = tpu_f32_from_bits(w.max);
  double amin = tpu_f32_from_bits(a.minnz), wmin = tpu_f32_from_bits(w.minnz);
  return amax * wmax < 0x1p128 && amin * wmin >= 0x1p-126; /* exact in double */
}

int tpu__mxu_products_exact(const void *A, size_t na, const void *W, size_t nw, int f32) {
  abs_range ra = f32 ? range_f32(A, na) : range_bf16(A, na);
  abs_range rw = f32 ? range_f32(W, nw) : range_bf16(W, nw);
  return products_exact(ra, rw);
}

/* ---- bf16 driver ---- */

/* Packing buffers of one task (NULL where not needed or not allocated). */
typedef struct bf16_ws {
  float *apack, *bpack, *carry;
  void *raw[3];
  size_t rawn[3]; /* their sizes, for the pool */
  int ok; /* all needed buffers present; else the task takes the direct path */
} bf16_ws;

typedef struct bf16_job {
  const void *A, *W; /* tpu_bf16, or float when f32 */
  int f32;           /* f32 sources (bf16 values held as f32, or the reference's f32 GEMM) */
  int canon;         /* NaN results written as the canonical quiet NaN (the MXU) */
  float *out;
  int64_t M, K, N, R;
  /* The blocked loops compute C = A x W, or with `trans` C = W^T x A^T (C = out^T): the
   * same products summed in the same order, but a narrow N becomes the vectorised side. */
  int trans;
  int64_t rows, cols; /* of C: M x N, or N x M when trans */
  int split_n;        /* tasks own column ranges of C (1) or row ranges (0) */
  int64_t nb;         /* matrices: A, W and out hold nb of them back to back */
  int by_batch;       /* tasks own whole matrices (units are matrices) */
  ukernel_fn uk;
  int nr; /* the micro-kernel's panel width */
  bf16_ws ws[MAX_THREADS];
  /* Shared B panels (row split over several threads, one column block): the whole B side
   * (K x sb_ncw f32, chunk by chunk as bf16_region packs it) is packed once, each panel of
   * each chunk by whichever task claims it first (sb_next), instead of every task packing
   * all of it. A task waits only for a panel another task has claimed and is packing (a
   * claimer packs before it waits for anything), so tasks run one after another still end. */
  float *sb;
  int64_t sb_ncw, sb_npan, sb_nchunks, sb_units;
  int64_t *sb_kstart, *sb_kc; /* per chunk */
  atomic_llong sb_next;
  atomic_uchar *sb_done; /* per unit: chunk * sb_npan + panel */
  void *sb_raw;
  size_t sb_rawn;
} bf16_job;

static float job_a(const bf16_job *j, int64_t i) {
  return j->f32 ? ((const float *)j->A)[i] : tpu_bf16_to_f32(((const tpu_bf16 *)j->A)[i]);
}
static float job_w(const bf16_job *j, int64_t i) {
  return j->f32 ? ((const float *)j->W)[i] : tpu_bf16_to_f32(((const tpu_bf16 *)j->W)[i]);
}

/* The contract evaluated element by element with no workspace: the path taken when the
 * packing buffers cannot be allocated (the void API has no way to report failure). */
static void bf16_direct(const bf16_job *j, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  for (int64_t m = m0; m < m1; m++)
    for (int64_t n = n0; n < n1; n++) {
      float acc = 0.0f;
      for (int64_t k0 = 0; k0 < j->K;) {
        int64_t len = min64(j->R, j->K - k0);
        float psum = 0.0f;
        for (int64_t k = k0; k < k0 + len; k++) psum = psum + job_a(j, m * j->K + k) * job_w(j, k * j->N + n);
        acc = k0 == 0 ? psum : acc + psum;
        k0 += len;
      }
      j->out[m * j->N + n] = j->canon ? canon_nan(acc) : acc;
    }
}

/* A float buffer of n entries aligned to 64 bytes; *raw gets the pointer to free and *rawn
 * its size (tpu_pool_free). */
static float *alloc_floats(int64_t n, void **raw, size_t *rawn) {
  size_t bytes;
  *raw = NULL;
  *rawn = 0;
  if (n < 1 || !tpu_mul_ok((size_t)n, sizeof(float), &bytes) || bytes > SIZE_MAX - 64)
    return NULL;
  *rawn = bytes + 64;
  *raw = tpu_pool_alloc(bytes + 64);
  if (!*raw) return NULL;
  uintptr_t p = ((uintptr_t)*raw + 63) & ~(uintptr_t)63;
  return (float *)p;
}

/* The region [m0, m1) x [n0, n1) of C owned by the task with units [lo, hi). */
static void task_region(const bf16_job *j, int64_t lo, int64_t hi, int64_t *m0, int64_t *m1,
                        int64_t *n0, int64_t *n1) {
  if (j->split_n) {
    *m0 = 0, *m1 = j->rows, *n0 = lo * j->nr, *n1 = min64(hi * j->nr, j->cols);
  } else {
    *m0 = lo * MR, *m1 = min64(hi * MR, j->rows), *n0 = 0, *n1 = j->cols;
  }
}

static void ws_alloc(const bf16_job *j, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                     bf16_ws *w) {
  int64_t tile_max = min64(j->R, j->K);
  int need_carry = tile_max > KC_MAX;
  int64_t kcw = min64(KC_MAX, tile_max);
  int64_t ncw = min64(NC, (n1 - n0 + j->nr - 1) / j->nr * j->nr);
  int64_t rows_up = (m1 - m0 + MR - 1) / MR * MR;
  w->raw[1] = w->raw[2] = NULL;
  w->apack = alloc_floats(MC * kcw, &w->raw[0], &w->rawn[0]);
  w->bpack = w->apack && !j->sb ? alloc_floats(kcw * ncw, &w->raw[1], &w->rawn[1]) : NULL;
  int have_b = j->sb || w->bpack;
  w->carry = NULL;
  if (need_carry && w->apack && have_b)
    w->carry = alloc_floats(rows_up * ncw, &w->raw[2], &w->rawn[2]);
  w->ok = w->apack && have_b && (!need_carry || w->carry);
}

static void sb_free(bf16_job *j) {
  if (j->sb_raw) tpu_pool_free(j->sb_raw, j->sb_rawn);
  free(j->sb_kstart);
  free((void *)j->sb_done);
  j->sb = NULL;
  j->sb_raw = NULL;
  j->sb_kstart = j->sb_kc = NULL;
  j->sb_done = NULL;
}

static void ws_free(bf16_ws *w) {
  for (int i = 0; i < 3; i++)
    if (w->raw[i]) tpu_pool_free(w->raw[i], w->rawn[i]);
}

/* Packs every shared B unit (one nr-column panel of one chunk) no task has claimed yet. */
static void sb_pack_claimed(bf16_job *j) {
  pack_fn pk = j->trans ? (j->f32 ? pack_at_f32 : pack_at_bf16) : (j->f32 ? pack_b_f32 : pack_b_bf16);
  const void *src = j->trans ? j->A : j->W;
  int64_t ld = j->trans ? j->K : j->N;
  for (;;) {
    int64_t u = atomic_fetch_add_explicit(&j->sb_next, 1, memory_order_relaxed);
    if (u >= j->sb_units) return;
    int64_t c = u / j->sb_npan, p = u % j->sb_npan, kc = j->sb_kc[c];
    int64_t j0 = p * j->nr;
    pk(src, ld, j->sb_kstart[c], kc, j0, min64(j->nr, j->cols - j0),
       j->sb + j->sb_kstart[c] * j->sb_ncw + j0 * kc, j->nr);
    atomic_store_explicit(&j->sb_done[u], 1, memory_order_release);
  }
}

/* Waits until every panel of shared chunk c is packed (by tasks that claimed them: they are
 * packing, not waiting). */
static void sb_wait_chunk(const bf16_job *j, int64_t c) {
  for (int64_t u = c * j->sb_npan; u < (c + 1) * j->sb_npan; u++) {
    for (int spins = 0; !atomic_load_explicit(&j->sb_done[u], memory_order_acquire); spins++) {
      if (spins >= 64) sched_yield();
    }
  }
}

/* Sets up the shared B panels for a row split over t > 1 tasks within one column block, the
 * whole B side no larger than one task's B buffer (KC_MAX x NC); else leaves j->sb NULL. */
static atomic_llong g_last_shared_units;
int64_t tpu__mxu_last_shared_units(void) { return atomic_load(&g_last_shared_units); }

static void sb_setup(bf16_job *j, int t) {
  atomic_store(&g_last_shared_units, 0);
  j->sb = NULL;
  j->sb_raw = NULL;
  j->sb_kstart = j->sb_kc = NULL;
  j->sb_done = NULL;
  if (t < 2 || j->by_batch || j->split_n) return;
  int64_t ncw = (j->cols + j->nr - 1) / j->nr * j->nr;
  if (ncw > NC || j->K > KC_MAX * (NC / ncw)) return;
  int64_t nchunks = 0;
  for (int64_t k0 = 0; k0 < j->K; k0 += min64(j->R, j->K - k0))
    nchunks += (min64(j->R, j->K - k0) + KC_MAX - 1) / KC_MAX;
  j->sb_ncw = ncw;
  j->sb_npan = ncw / j->nr;
  j->sb_nchunks = nchunks;
  j->sb_units = nchunks * j->sb_npan;
  j->sb_kstart = malloc((size_t)nchunks * 2 * sizeof(int64_t));
  j->sb_done = malloc((size_t)j->sb_units * sizeof(atomic_uchar));
  float *sb = alloc_floats(j->K * ncw, &j->sb_raw, &j->sb_rawn);
  if (!j->sb_kstart || !j->sb_done || !sb) {
    sb_free(j);
    return;
  }
  j->sb_kc = j->sb_kstart + nchunks;
  int64_t c = 0;
  for (int64_t k0 = 0; k0 < j->K;) {
    int64_t tlen = min64(j->R, j->K - k0), nch = (tlen + KC_MAX - 1) / KC_MAX;
    for (int64_t i = 0; i < nch; i++, c++) {
      int64_t c0 = tlen * i / nch;
      j->sb_kstart[c] = k0 + c0;
      j->sb_kc[c] = tlen * (i + 1) / nch - c0;
    }
    k0 += tlen;
  }
  for (int64_t u = 0; u < j->sb_units; u++) atomic_init(&j->sb_done[u], 0);
  atomic_init(&j->sb_next, 0);
  j->sb = sb;
  atomic_store(&g_last_shared_units, j->sb_units);
}

/* Computes out[m0:m1, n0:n1] with packed panels and the micro-kernel. */
static void bf16_region(const bf16_job *j, const bf16_ws *w, int64_t m0, int64_t m1, int64_t n0,
                        int64_t n1) {
  int64_t K = j->K, N = j->N, R = j->R;
  if (m0 >= m1 || n0 >= n1) return;
  if (!w->ok) {
    if (j->trans)
      bf16_direct(j, n0, n1, m0, m1);
    else
      bf16_direct(j, m0, m1, n0, n1);
    return;
  }
  int need_carry = w->carry != NULL;
  pack_fn pk_at = j->f32 ? pack_at_f32 : pack_at_bf16, pk_b = j->f32 ? pack_b_f32 : pack_b_bf16;
  pack_fn pk_wt = j->f32 ? pack_wt_f32 : pack_wt_bf16, pk_a = j->f32 ? pack_a_f32 : pack_a_bf16;
  int nrk = j->nr;
  int64_t ncw = min64(NC, (n1 - n0 + nrk - 1) / nrk * nrk);
  int64_t chunk = 0; /* index of the current chunk, for the shared panels */
  if (j->sb) sb_pack_claimed((bf16_job *)j);
  for (int64_t jc = n0; jc < n1; jc += NC) {
    int64_t nc = min64(NC, n1 - jc);
    for (int64_t k0 = 0; k0 < K;) {
      int64_t tlen = min64(R, K - k0);
      int64_t nchunks = (tlen + KC_MAX - 1) / KC_MAX;
      for (int64_t c = 0; c < nchunks; c++) {
        int64_t c0 = tlen * c / nchunks, kc = tlen * (c + 1) / nchunks - c0;
        const float *bpack = w->bpack;
        if (j->sb) {
          sb_wait_chunk(j, chunk++);
          bpack = j->sb + (k0 + c0) * j->sb_ncw;
        } else if (j->trans) {
          pk_at(j->A, K, k0 + c0, kc, jc, nc, w->bpack, nrk);
        } else {
          pk_b(j->W, N, k0 + c0, kc, jc, nc, w->bpack, nrk);
        }
        for (int64_t ic = m0; ic < m1; ic += MC) {
          int64_t mc = min64(MC, m1 - ic);
          if (j->trans)
            pk_wt(j->W, N, ic, mc, k0 + c0, kc, w->apack, nrk);
          else
            pk_a(j->A, K, ic, mc, k0 + c0, kc, w->apack, nrk);
          for (int64_t jr = 0; jr < nc; jr += nrk) {
            int nr = (int)min64(nrk, nc - jr);
            for (int64_t ir = 0; ir < mc; ir += MR) {
              int mr = (int)min64(MR, mc - ir);
              float *cs = NULL;
              if (need_carry)
                cs = w->carry + (((ic - m0 + ir) / MR) * (ncw / nrk) + jr / nrk) * (MR * nrk);
              float *o = j->trans ? j->out + (jc + jr) * N + ic + ir
                                  : j->out + (ic + ir) * N + jc + jr;
              j->uk(kc, w->apack + ir * kc, bpack + jr * kc, c > 0 ? cs : NULL,
                    c + 1 < nchunks ? cs : NULL, o, N, mr, nr, k0 == 0, j->trans, j->canon);
            }
          }
        }
      }
      k0 += tlen;
    }
  }
}

static void bf16_range(void *ctx, int task, int64_t lo, int64_t hi) {
  const bf16_job *j = ctx;
  int64_t m0, m1, n0, n1;
  if (j->by_batch) {
    size_t es = j->f32 ? sizeof(float) : sizeof(tpu_bf16);
    for (int64_t b = lo; b < hi; b++) {
      bf16_job jb = *j;
      jb.A = (const char *)j->A + (size_t)(b * j->M * j->K) * es;
      jb.W = (const char *)j->W + (size_t)(b * j->K * j->N) * es;
      jb.out = j->out + b * j->M * j->N;
      bf16_region(&jb, &j->ws[task], 0, j->rows, 0, j->cols);
    }
    return;
  }
  task_region(j, lo, hi, &m0, &m1, &n0, &n1);
  bf16_region(j, &j->ws[task], m0, m1, n0, n1);
}

/* The micro-kernel for a product on the current path: FMA kernels only for bf16 values
 * (`bf16vals`) whose products are all exact. */
static ukernel_fn pick_ukernel(const void *A, const void *W, int f32, int bf16vals, int64_t nb, int64_t M,
                               int64_t K, int64_t N, int *nr) {
  mxu_isa isa = cur_isa();
  *nr = isa == ISA_AVX512 ? NR_MAX : NR16;
#if MXU_X86
  int fma = 0;
  if (isa != ISA_SCALAR && bf16vals && g_allow_fma && cpu_fma()) {
    fma = tpu__mxu_products_exact(A, (size_t)(nb * M * K), W, (size_t)(nb * K * N), f32);
  }
  if (isa == ISA_AVX512) return fma ? ukernel_avx512_fma : ukernel_avx512;
  if (isa == ISA_AVX2) return fma ? ukernel_avx2_fma : ukernel_avx2;
#else
  (void)A, (void)W, (void)f32, (void)bf16vals, (void)nb, (void)M, (void)K, (void)N;
#endif
  return ukernel_scalar;
}

/* nb matrix products out_b = A_b x W_b (matrices stored back to back). `canon`: the MXU's
 * products of bf16 values (NaNs canonical); else the reference's f32 sums in order. */
static void run_job(const void *A, const void *W, int f32, int canon, float *out, int64_t nb, int64_t M,
                    int64_t K, int64_t N, int64_t R, int nthreads) {
  if (nb <= 0 || M <= 0 || N <= 0 || K < 0) return;
  if (K == 0) { /* no K-tiles: the accumulator is never written past its +0 */
    for (int64_t i = 0; i < nb * M * N; i++) out[i] = 0.0f;
    return;
  }
  bf16_job j;
  j.f32 = f32;
  j.canon = canon;
  j.A = A;
  j.W = W;
  j.out = out;
  j.M = M;
  j.K = K;
  j.N = N;
  j.R = R <= 0 ? K : R; /* R < 1 is outside the contract: treat the array as deep as K */
  j.uk = pick_ukernel(A, W, f32, canon, nb, M, K, N, &j.nr);
  /* Fewer columns than a panel: put M on the vector side (C = out^T) to waste fewer lanes. */
  j.trans = N < j.nr && M > N;
  j.rows = j.trans ? N : M;
  j.cols = j.trans ? M : N;
  int64_t units_n = (j.cols + j.nr - 1) / j.nr, units_m = (j.rows + MR - 1) / MR;
  j.split_n = units_n >= units_m;
  j.nb = nb;
  j.by_batch = nb > 1;
  int64_t units = j.by_batch ? nb : j.split_n ? units_n : units_m;
  int t = plan_threads(nthreads, units, (double)nb * (double)M * (double)K * (double)N);
  sb_setup(&j, t);
  for (int i = 0; i < t; i++) {
    int64_t lo, hi, m0 = 0, m1 = j.rows, n0 = 0, n1 = j.cols;
    tpu_task_range(units, t, i, &lo, &hi);
    if (!j.by_batch) task_region(&j, lo, hi, &m0, &m1, &n0, &n1);
    ws_alloc(&j, m0, m1, n0, n1, &j.ws[i]);
  }
  tpu_par_run(bf16_range, &j, units, t);
  for (int i = 0; i < t; i++) ws_free(&j.ws[i]);
  sb_free(&j);
}

void tpu_mxu_matmul_bf16(const tpu_bf16 *A, const tpu_bf16 *W, float *out, int64_t M, int64_t K,
                         int64_t N, int64_t R, int nthreads) {
  run_job(A, W, 0, 1, out, 1, M, K, N, R, nthreads);
}

void tpu__mxu_matmul_bf16_batch(const tpu_bf16 *A, const tpu_bf16 *W, float *out, int64_t nb, int64_t M,
                                int64_t K, int64_t N, int64_t R, int nthreads) {
  run_job(A, W, 0, 1, out, nb, M, K, N, R, nthreads);
}

/* Products of at most this many multiply-adds in all are summed element by element: packing
 * panels, a workspace and the blocked loops cost more than the sums (a loop body's
 * f32[18,4] x f32[4] took 0.7 us that way). */
enum { SEQ_SMALL_MACS = 512 };

void tpu_gemm_f32_seq(const float *A, const float *W, float *out, int64_t nb, int64_t M, int64_t K, int64_t N,
                      int nthreads) {
  if (nb > 0 && M > 0 && N > 0 && K > 0 && (double)nb * (double)M * (double)K * (double)N <= SEQ_SMALL_MACS) {
    /* the same sums: from +0, each step sum + (a*w rounded), k increasing (no FMA: ISO C) */
    for (int64_t b = 0; b < nb; b++, A += M * K, W += K * N, out += M * N)
      for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
          float c = 0.0f;
          for (int64_t k = 0; k < K; k++) c = c + A[m * K + k] * W[k * N + n];
          out[m * N + n] = c;
        }
    return;
  }
  run_job(A, W, 1, 0, out, nb, M, K, N, K, nthreads);
}

/* ---- int8 ---- */

typedef struct s8_job {
  const int8_t *A, *W;
  int32_t *out;
  int64_t M, K, N;
  mxu_isa isa;
} s8_job;

/* Rows [m0, m1) of out. Sums run in uint32_t, whose wrap-around is defined, and are read
 * back through int32_t (the corresponding signed type), which gives two's-complement wrap.
 * Columns are blocked so a row of out and the W block stay in cache. */
static ALWAYS_INLINE void s8_rows_body(const s8_job *j, int64_t m0, int64_t m1) {
  enum { NB = 512 };
  int64_t K = j->K, N = j->N;
  for (int64_t n0 = 0; n0 < N; n0 += NB) {
    int64_t nb = min64(NB, N - n0);
    for (int64_t m = m0; m < m1; m++) {
      uint32_t *o = (uint32_t *)(void *)(j->out + m * N + n0);
      const int8_t *a = j->A + m * K;
      for (int64_t n = 0; n < nb; n++) o[n] = 0;
      for (int64_t k = 0; k < K; k++) {
        int32_t av = a[k];
        if (av == 0) continue;
        const int8_t *w = j->W + k * N + n0;
        for (int64_t n = 0; n < nb; n++) o[n] += (uint32_t)(av * (int32_t)w[n]);
      }
    }
  }
}

#if MXU_X86
TGT_AVX2 static void s8_rows_avx2(const s8_job *j, int64_t m0, int64_t m1) {
  s8_rows_body(j, m0, m1);
}
TGT_AVX512BW static void s8_rows_avx512(const s8_job *j, int64_t m0, int64_t m1) {
  s8_rows_body(j, m0, m1);
}
#endif
static void s8_rows_plain(const s8_job *j, int64_t m0, int64_t m1) { s8_rows_body(j, m0, m1); }

static void s8_range(void *ctx, int task, int64_t lo, int64_t hi) {
  const s8_job *j = ctx;
#if MXU_X86
  if (j->isa == ISA_AVX512) {
    s8_rows_avx512(j, lo, hi);
    return;
  }
  if (j->isa == ISA_AVX2) {
    s8_rows_avx2(j, lo, hi);
    return;
  }
#endif
  s8_rows_plain(j, lo, hi);
}

void tpu_mxu_matmul_s8(const int8_t *A, const int8_t *W, int32_t *out, int64_t M, int64_t K,
                       int64_t N, int nthreads) {
  if (M <= 0 || N <= 0 || K < 0) return;
  s8_job j = {A, W, out, M, K, N, cur_isa()};
  tpu_par_run(s8_range, &j, M, plan_threads(nthreads, M, (double)M * (double)K * (double)N));
}

/* f32 operands (bf16 passes per the precision config): mxu_f32.c, through tpu__mxu_matmul_bf16f. */
void tpu__mxu_matmul_bf16f(const float *A, const float *W, float *out, int64_t nb, int64_t M, int64_t K, int64_t N,
                           int64_t R, int nthreads) {
  run_job(A, W, 1, 1, out, nb, M, K, N, R, nthreads);
}
