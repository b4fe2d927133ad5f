/* The chip executor's values: the reference interpreter with dot and convolution on the MXU numerics. */
#ifndef TPU_CHIP_EXEC_H
#define TPU_CHIP_EXEC_H

#include "base/tensor.h"
#include "chip/chip.h"
#include "chip/mxu.h"
#include "ir/ir.h"
#include "mosaic/mosaic.h"
#include "ref/ref.h"

/* Runs the entry computation of a verified module as the chip computes it and stores the
 * result in *out (the caller frees it with tpu_tensor_free). Every op except dot and
 * convolution runs the reference kernels, so integer, data-movement and elementwise
 * results are bit-identical to tpu_ref_run. Dots and convolutions run on the MXU model
 * (src/chip/mxu.h) with K-tiles of chip->mxu_rows rows:
 *   - bf16 x bf16: one bf16 pass (tpu_mxu_matmul_bf16), f32 accumulation;
 *   - an f32 or f16 operand (the other f32, f16 or bf16; all exact in f32): the f32 pass
 *     scheme of tpu_mxu_matmul_f32 at the precision max(operand_precision[0], [1])
 *     (DEFAULT = 1 pass, HIGH = 3, HIGHEST = 6), or at `precision_override` when >= 0 (a
 *     tpu_precision). f16 is treated as f32: an assumption, see docs/reports.md;
 *   - s8 x s8 with an integer result of at most 32 bits: tpu_mxu_matmul_s8 (s32 sums,
 *     wrapped to the result type);
 *   - anything else (f64, other integer types, integer x float) keeps the reference kernel.
 * The f32 sum is rounded once to the result type (f32 -> bf16/f16 to nearest even; to an
 * integer type as convert does it). Batch dimensions are looped. A convolution becomes one
 * matmul per group (im2col): the patch matrix has a row per output position and a column
 * per (kernel position, input feature) in the reference's summation order; padding and
 * lhs-dilation holes are zeros in it, as on the hardware. */
tpu_status tpu_chip_run_values(const tpu_module *m, const tpu_chip *chip, int precision_override,
                               const tpu_tensor *args, int nargs, tpu_tensor *out, tpu_diag *d);

/* The iterations of one while loop of the input, keyed by its source position (copies made
 * by inlining share it), summed over its `runs`. */
typedef struct tpu_loop_trip {
  const char *name;
  tpu_loc loc;
  int64_t iters, runs;
} tpu_loop_trip;

typedef struct tpu_loop_trips {
  tpu_loop_trip *v;
  int n, cap;
  tpu_mosaic_seen_set mosaic; /* the Pallas calls' scalar operands (src/mosaic/mosaic.h) */
} tpu_loop_trips;

void tpu_loop_trips_free(tpu_loop_trips *t);

/* tpu_chip_run_values that also records every while loop's trips into *trips (which the
 * caller zero-initialises and frees with tpu_loop_trips_free, also on failure). */
tpu_status tpu_chip_run_values_trips(const tpu_module *m, const tpu_chip *chip, int precision_override,
                                     const tpu_tensor *args, int nargs, tpu_loop_trips *trips, tpu_tensor *out,
                                     tpu_diag *d);

/* tpu_chip_run_values_trips as device comm->device of a pod (comm NULL: a pod of one). */
tpu_status tpu_chip_run_values_dev(const tpu_module *m, const tpu_chip *chip, int precision_override,
                                   const tpu_ref_comm *comm, const tpu_tensor *args, int nargs, tpu_loop_trips *trips,
                                   tpu_tensor *out, tpu_diag *d);

/* Which MXU path a dot or convolution with these operand and result types takes. */
typedef enum {
  TPU_EXEC_REF = 0, /* not on the MXU: the reference kernel */
  TPU_EXEC_BF16,    /* one bf16 pass */
  TPU_EXEC_F32,     /* f32 passes per precision */
  TPU_EXEC_S8       /* int8 MACs, s32 sums */
} tpu_exec_path;
tpu_exec_path tpu_chip_exec_path(tpu_dtype lhs, tpu_dtype rhs, tpu_dtype result);

#endif
