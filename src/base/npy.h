/* NumPy .npy files to and from host tensors. */
#ifndef TPU_BASE_NPY_H
#define TPU_BASE_NPY_H

#include "base/status.h"
#include "base/tensor.h"

/* Reads a .npy file (format 1.0, 2.0 or 3.0). Supported dtypes: |b1 -> TPU_PRED, i1/i2/i4/i8
 * -> TPU_S8..TPU_S64, u1/u2/u4/u8 -> TPU_U8..TPU_U64, f2/f4/f8 -> TPU_F16/TPU_F32/TPU_F64, in
 * either byte order (big-endian data is converted). fortran_order True is accepted and the
 * data transposed into the row-major order tpu_tensor uses. A 0-d array gives rank 0. Bool
 * bytes other than 0 read as 1. The data must fill the file exactly. Every failure (bad
 * magic or header, unsupported dtype, truncation, trailing bytes, size overflow, an array
 * the host has not the memory for) returns an error at FILE:0:BYTE, the byte offset where
 * the file goes wrong (0: the file as a whole), and leaves `out` empty (safe to
 * tpu_tensor_free). */
tpu_status tpu_npy_read(const char *path, tpu_tensor *out, tpu_diag *d);

/* The same from `len` bytes in memory; `name` stands for the file in errors. */
tpu_status tpu_npy_read_mem(const char *name, const void *data, size_t len, tpu_tensor *out, tpu_diag *d);

/* Writes format 1.0, C order, little-endian. TPU_BF16 and the float8 types are written as
 * <f4 (exact widening);
 * other array dtypes as their own descriptor. The bytes go to "PATH.tmp", which is renamed
 * over PATH only once complete, so a failure never leaves a partial PATH. Tuples and tokens
 * are rejected (TPU_ERR_ARG). */
tpu_status tpu_npy_write(const char *path, const tpu_tensor *t, tpu_diag *d);

#endif
