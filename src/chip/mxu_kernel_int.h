/* Private hooks of the fast MXU kernels (mxu_kernel.c), for tests and benchmarks. */
#ifndef TPU_CHIP_MXU_KERNEL_INT_H
#define TPU_CHIP_MXU_KERNEL_INT_H

#include "base/bf16.h"
#include "chip/mxu.h"

/* Which micro-kernel the bf16 and s8 kernels use. AUTO picks the best the CPU supports
 * (AVX-512, else AVX2 on x86-64 when present; with FMA where every product of the operands
 * is exact); SCALAR forces the portable C path, AVX2 and AVX512 that instruction set (or
 * the best one below it the CPU has). Every path gives the same bits; tests run each. */
typedef enum {
  TPU__MXU_PATH_AUTO = 0,
  TPU__MXU_PATH_SCALAR = 1,
  TPU__MXU_PATH_AVX2 = 2,
  TPU__MXU_PATH_AVX512 = 3
} tpu__mxu_path;

/* Whether this CPU runs the path (AUTO and SCALAR: always). */
int tpu__mxu_path_supported(tpu__mxu_path p);

/* Whether the vector paths may use fused multiply-adds where every product is exact (1, the
 * default) or never (0: the multiply-and-add kernels, for tests and benchmarks); returns the
 * previous setting. Process-wide, as tpu__mxu_set_path. */
int tpu__mxu_allow_fma(int allow);

/* Whether every product a*w of a value of A (na values) and one of W (nw values) is exact
 * in f32, so that the FMA kernels give the array's bits: every value finite, max|a| max|w|
 * < 2^128 and min|a| min|w| >= 2^-126 over the nonzero values (either side all zeros: 1).
 * bf16 values, or with f32 set f32 values; scanned with the current path's instructions. */
int tpu__mxu_products_exact(const void *A, size_t na, const void *W, size_t nw, int f32);

/* How many shared B units (one panel of one K chunk, packed once for all threads) the last
 * bf16 product started in this process set up: 0 where every task packed its own B. */
int64_t tpu__mxu_last_shared_units(void);

/* Sets the path for later calls, process-wide (not thread-safe: call it between matmuls);
 * returns the previous setting. */
tpu__mxu_path tpu__mxu_set_path(tpu__mxu_path p);

/* Name of the instruction set the current setting uses on this machine: "avx512", "avx2"
 * or "scalar". */
const char *tpu__mxu_kernel_name(void);

/* Splits an f32 value into three bf16 parts, x = p[0] + p[1] + p[2] exactly for finite x
 * with |x| >= 2^-110 (docs/numerics.md, "f32 operands"): p[0] = bf16(x) (round to nearest
 * even; if that overflows to inf for a finite x, the largest finite bf16 of x's sign),
 * p[1] = bf16(x - p[0]), p[2] = bf16(x - p[0] - p[1]). Non-finite x: p[0] = bf16(x),
 * p[1] = p[2] = +0. */
void tpu__mxu_split_f32(float x, tpu_bf16 parts[3]);

/* tpu_mxu_matmul_bf16 on nb matrix products stored back to back (A: nb x M x K, W:
 * nb x K x N, out: nb x M x N); threads take whole products when nb > 1. */
void tpu__mxu_matmul_bf16_batch(const tpu_bf16 *A, const tpu_bf16 *W, float *out, int64_t nb, int64_t M,
                                int64_t K, int64_t N, int64_t R, int nthreads);

/* Part 0 of tpu__mxu_split_f32 for n values, as f32: what DEFAULT precision feeds the
 * array (out may be x). */
void tpu__mxu_round_bf16(const float *x, size_t n, float *out);

/* tpu__mxu_matmul_bf16_batch on operands held as f32 (every value exactly a bf16). */
void tpu__mxu_matmul_bf16f(const float *A, const float *W, float *out, int64_t nb, int64_t M, int64_t K, int64_t N,
                           int64_t R, int nthreads);

/* tpu_mxu_matmul_f32 on nb matrix products stored back to back (as above). */
tpu_status tpu__mxu_matmul_f32_batch(const float *A, const float *W, float *out, int64_t nb, int64_t M,
                                     int64_t K, int64_t N, int64_t R, tpu_precision p, int nthreads,
                                     tpu_diag *d);

#endif
