/* The MXU: a weight-stationary systolic array — closed-form timing, PE-level simulation,
 * and fast bit-exact numerics. */
#ifndef TPU_CHIP_MXU_H
#define TPU_CHIP_MXU_H

#include <stdint.h>

#include "base/bf16.h"
#include "base/status.h"

/* ---- Dataflow and accumulation order (the contract both the PE-level array and the fast
 * kernel implement; docs/numerics.md states it for users) ----
 *
 * An R x C array computes out[M,N] = A[M,K] x W[K,N]. W is cut into K-tiles of R rows
 * (the last may be shorter) and N-tiles of C columns. For one K-tile t and one output
 * element (m, n), the partial sum enters the top PE of column n as +0.0f and each PE r
 * (top to bottom) computes p = a[m, t*R + r] * w[t*R + r, n] rounded to f32, then
 * psum = psum + p rounded to f32: two roundings. (A bf16 x bf16 product is exact in f32
 * unless it overflows or falls below the normal range, so for in-range products this
 * equals fmaf(a, w, psum); at the extremes it does not, and the two roundings rule.)
 * The accumulator for (m, n) takes the first K-tile's psum as is and adds every later
 * K-tile's psum in tile order: acc = acc + psum_t, rounded to f32. Rows beyond K are
 * padding and contribute nothing. Subnormals are kept (no flush to zero). Any NaN result
 * is written as the canonical quiet NaN 0x7fc00000. int8 x int8 sums in s32 with
 * two's-complement wrap-around. */

typedef enum {
  TPU_WLOAD_SERIAL = 0, /* weights shift in, then activations stream (SCALE-Sim ws) */
  TPU_WLOAD_DOUBLE = 1  /* the next tile's weights shift in while the current computes */
} tpu_wload;

/* Cycle counts for one M x K by K x N product on an R x C array. */
typedef struct tpu_mxu_cycles {
  int64_t folds;              /* ceil(K/R) * ceil(N/C) */
  int64_t total;              /* cycles from the first weight load to the last output */
  int64_t weight_load;        /* cycles spent loading weights not hidden behind compute */
  int64_t weight_load_hidden; /* weight-load cycles overlapped with compute */
  int64_t stream;             /* cycles streaming activations incl. fill and drain */
  int64_t mac_ops;            /* useful MACs: M*K*N */
  double mapping_efficiency;  /* mean fraction of PEs holding a real weight, per fold */
  double compute_util;        /* SCALE-Sim's Compute Util (per-fold window; docs/systolic.md) */
  double overall_util;        /* mac_ops / (R*C*total) */
} tpu_mxu_cycles;

/* Closed-form tile model. Fails (TPU_ERR_ARG) on non-positive sizes. */
tpu_status tpu_mxu_tile_cycles(int64_t R, int64_t C, int64_t M, int64_t K, int64_t N,
                               tpu_wload mode, tpu_mxu_cycles *out, tpu_diag *d);

/* Optional per-cycle observer for the PE-level simulation (used by --animate). */
typedef struct tpu_systolic_probe tpu_systolic_probe;

/* PE-level, cycle-by-cycle simulation computing real values: out = A x W with the
 * accumulation order above. A is M x K, W is K x N, out is M x N, all row-major f32
 * (A and W must hold bf16-representable values; they are used as given). `cycles` gets
 * the same counts the closed form gives. `probe` may be NULL. */
tpu_status tpu_systolic_run(int64_t R, int64_t C, int64_t M, int64_t K, int64_t N,
                            tpu_wload mode, const float *A, const float *W, float *out,
                            tpu_mxu_cycles *cycles, tpu_systolic_probe *probe, tpu_diag *d);

/* Fast kernels, bit-identical to the PE-level array for the same R (the K-tile depth).
 * `nthreads` <= 0 picks the machine's core count. */
void tpu_mxu_matmul_bf16(const tpu_bf16 *A, const tpu_bf16 *W, float *out, int64_t M, int64_t K,
                         int64_t N, int64_t R, int nthreads);
void tpu_mxu_matmul_s8(const int8_t *A, const int8_t *W, int32_t *out, int64_t M, int64_t K,
                       int64_t N, int nthreads);

/* nb products (matrices back to back) out[M,N] = A[M,K] x W[K,N] in f32 with each element's products added in increasing k
 * from +0, each step sum = sum + a*w (product rounded, then the sum; no FMA), NaNs as the
 * arithmetic gives them: the reference interpreter's dot order (ref/dot.c), on this file's
 * blocked, threaded kernels. `nthreads` <= 0 picks tpu_threads(). */
void tpu_gemm_f32_seq(const float *A, const float *W, float *out, int64_t nb, int64_t M, int64_t K, int64_t N,
                      int nthreads);

/* f32 operands as XLA's precision config gives them on a TPU: DEFAULT = one bf16 pass,
 * HIGH = 3 passes (bf16x3), HIGHEST = 6 passes (bf16x6). The split and pass order are
 * documented in docs/numerics.md. */
typedef enum { TPU_PREC_DEFAULT = 0, TPU_PREC_HIGH = 1, TPU_PREC_HIGHEST = 2 } tpu_precision;
tpu_status tpu_mxu_matmul_f32(const float *A, const float *W, float *out, int64_t M, int64_t K,
                              int64_t N, int64_t R, tpu_precision p, int nthreads, tpu_diag *d);

#endif
