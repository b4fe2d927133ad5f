/* Convolution as a matrix product: the patch (im2col) and kernel matrices, shared by the
 * reference interpreter and the chip executor. */
#ifndef TPU_REF_IM2COL_H
#define TPU_REF_IM2COL_H

#include "base/status.h"
#include "ir/ir.h"

/* A convolution's geometry once the instruction is checked (tpu_conv_geom_init). Output
 * features [o0, o1) that share one feature group and one batch group are one product:
 * patches[M, K] x kernel[K, N] with M = nob * nsp rows (output batch, then output position
 * row-major over the spatial dimensions), K = nkpos * kin columns (kernel position q
 * row-major over the spatial dimensions, then input feature z of the group: the
 * reference's summation order) and N = o1 - o0. */
typedef struct tpu_conv_geom {
  int ns;
  int64_t nin, cin, kin, cout, G, BG; /* lhs batch and features, kernel input/output features, groups */
  int64_t nob, nsp, nkpos;            /* output batch, output positions, kernel positions */
  int64_t lsp[TPU_MAX_RANK];          /* lhs spatial sizes */
  int64_t osp[TPU_MAX_RANK];          /* output spatial sizes */
  int64_t ksp[TPU_MAX_RANK];          /* kernel spatial sizes */
  int64_t odims[TPU_MAX_RANK];        /* the result's dimensions */
} tpu_conv_geom;

/* Fills g from the instruction and operand dimensions; 0 when they do not fit together
 * (the reference kernel reports why). */
int tpu_conv_geom_init(const tpu_instr *in, const int64_t *ldims, const int64_t *rdims, tpu_conv_geom *g);

/* Dimension orders for packing the operands (first slowest): the lhs as [batch, spatial...,
 * feature], the kernel as [spatial..., input feature, output feature]. */
void tpu_conv_pack_orders(const tpu_instr *in, int *lorder, int *rorder);

/* The next run [o0, *o1) of output features in one feature group and one batch group. */
int64_t tpu_conv_run_end(const tpu_conv_geom *g, int64_t o0);

/* Patch matrix rows [m0, m1) for features [o0, ...): `pl` is the lhs packed in lorder as
 * f32; entries on padding or lhs-dilation holes are +0. `A` gets (m1 - m0) x K. Threads
 * over rows. */
void tpu_conv_patches(const tpu_instr *in, const tpu_conv_geom *g, const float *pl, int64_t o0, int64_t m0,
                      int64_t m1, float *A);

/* Rows of patches to build at once (about 512 KiB of them, or 16 MiB for a long K); and n as an
 * allocation count (at least 1). */
int64_t tpu_conv_row_block(const tpu_conv_geom *g);
static inline size_t tpu_conv_count(int64_t n) { return (size_t)(n > 0 ? n : 1); }

/* Kernel matrix K x N for features [o0, o1): `pr` is the kernel packed in rorder as f32;
 * window reversal is applied here. */
void tpu_conv_kernel_matrix(const tpu_instr *in, const tpu_conv_geom *g, const float *pr, int64_t o0, int64_t o1,
                            float *W);

/* Output offsets: element (m, j) of the product is element off[m] + (o0 + j) * fstride of
 * the result (row-major in g->odims); off has M entries. */
void tpu_conv_out_offsets(const tpu_instr *in, const tpu_conv_geom *g, int64_t *off, int64_t *fstride);

#endif
