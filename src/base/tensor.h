/* Host tensors: dense row-major arrays (dims[0] slowest) and tuples of them. */
#ifndef TPU_BASE_TENSOR_H
#define TPU_BASE_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/dtype.h"
#include "base/status.h"

#define TPU_MAX_RANK 16

/* A value: an array (dtype != TPU_TUPLE) or a tuple of values. Layouts from HLO are
 * physical and do not change the logical row-major order used here. `data` is owned
 * (from tpu_malloc) and freed by tpu_tensor_free; tuple elements are owned too. */
typedef struct tpu_tensor {
  tpu_dtype dtype;
  int rank;
  int64_t dims[TPU_MAX_RANK];
  void *data;
  size_t nbytes;
  int ntuple;
  struct tpu_tensor *elems;
} tpu_tensor;

/* Sets every field of t to zero (an empty tensor). The interpreter clears a value's struct
 * on every allocation, move and free; GCC expands one constant memset of this 168-byte
 * struct as `rep stos`, whose start-up cost on x86 was 8-14 % of a loop of small ops
 * (perf, random_fold_in_loop), so it is cleared in pieces the compiler writes as vector
 * stores. */
static inline void tpu_tensor_zero(tpu_tensor *t) {
  _Static_assert(sizeof(tpu_tensor) > 128 && sizeof(tpu_tensor) <= 192, "tpu_tensor_zero's pieces");
  char *p = (char *)t;
  memset(p, 0, 64);
  memset(p + 64, 0, 64);
  memset(p + 128, 0, sizeof(tpu_tensor) - 128);
}

/* Allocates a zero-filled array; fails with TPU_ERR_LIMIT on size overflow and
 * TPU_ERR_NOMEM when memory runs out. */
tpu_status tpu_tensor_alloc(tpu_tensor *t, tpu_dtype dtype, int rank, const int64_t *dims,
                            tpu_diag *d);
/* Freed array buffers of 64 KiB or more are kept and reused for arrays of the same byte
 * size: up to 256 MiB while a run is active (between begin and end, nested and from any
 * thread), 64 MiB between runs (the outermost end trims to that). A tensor's data must be a
 * block of at least nbytes from the allocation hook, as every tensor here has. */
void tpu_tensor_pool_begin(void);
void tpu_tensor_pool_end(void);
/* Scratch buffers through the same pool: n bytes (not zeroed), given back with the same n. */
void *tpu_pool_alloc(size_t n);
void tpu_pool_free(void *p, size_t n);
/* tpu_tensor_alloc without the zero fill, for kernels that write every element. */
tpu_status tpu_tensor_alloc_uninit(tpu_tensor *t, tpu_dtype dtype, int rank, const int64_t *dims, tpu_diag *d);
/* Allocates a tuple of `n` empty elements (each to be filled by the caller). */
tpu_status tpu_tensor_alloc_tuple(tpu_tensor *t, int n, tpu_diag *d);
/* Deep copy. */
tpu_status tpu_tensor_clone(tpu_tensor *dst, const tpu_tensor *src, tpu_diag *d);
void tpu_tensor_free(tpu_tensor *t);
int64_t tpu_tensor_numel(const tpu_tensor *t);
/* Element count of dims with overflow check; returns 0 on overflow (and sets *ok = 0). */
int64_t tpu_dims_numel(int rank, const int64_t *dims, int *ok);

/* Leaves of a value (arrays; tuples flattened depth-first, in order): the count, and
 * pointers to them in `out` (room for the count). */
int tpu_tensor_count_leaves(const tpu_tensor *t);
void tpu_tensor_collect_leaves(const tpu_tensor *t, const tpu_tensor **out);

/* Element access as double / int64 (any array dtype), for tests and slow paths. Complex
 * elements read as their real part; a set writes the real part and a zero imaginary part. */
double tpu_tensor_get_f64(const tpu_tensor *t, int64_t i);
/* Element i of a raw array of `dtype` as double. */
double tpu_load_f64(tpu_dtype dtype, const void *p, int64_t i);
int64_t tpu_tensor_get_i64(const tpu_tensor *t, int64_t i);
void tpu_tensor_set_f64(tpu_tensor *t, int64_t i, double v);
void tpu_tensor_set_i64(tpu_tensor *t, int64_t i, int64_t v);

#endif
