/* Internal: the Mosaic interpreter's values and the helpers its files share. */
#ifndef TPU_MOSAIC_MOSAIC_INT_H
#define TPU_MOSAIC_MOSAIC_INT_H

#include "mosaic/mosaic.h"

/* A runtime value. Scalars and vectors own `v` (numel doubles, each exactly a value of
 * `dt`); memrefs and semaphores are views into storage the run owns (`base` + offset +
 * strides, in elements). */
typedef struct mo_val {
  int set;
  tpu_mo_kind kind;
  tpu_dtype dt;
  int rank;
  int64_t dims[TPU_MO_MAX_RANK];
  double *v;
  double *base;                     /* memref / semaphore */
  int64_t off;
  int64_t str[TPU_MO_MAX_RANK];
  tpu_mo_space space;
} mo_val;

typedef tpu_mosaic_work mo_work;

typedef struct mo_ctx {
  const tpu_mosaic *k;
  const tpu_mosaic_opts *o;
  tpu_diag *d;
  mo_val *vals;
  const tpu_mo_op *yield; /* the terminator the last block ran */
  mo_work work;           /* accumulated since the caller reset it */
  int sublanes, lanes;    /* the vector register's shape (8 x 128) */
  int count;              /* tpu_mosaic_count: vectors carry no data */
  double **owned;         /* storage the run allocated (freed at the end) */
  int nowned, capowned;
  mo_val *scoped;         /* per value id: the buffer of its memref.alloca / tpu.sem_alloc */
} mo_ctx;

int64_t tpu__mo_numel(int rank, const int64_t *dims);
/* x rounded to a value of dt (ints wrap to their width; pred: 0/1). */
double tpu__mo_round(tpu_dtype dt, double x);
/* Sets value `id` to a fresh array of the type (contents zero); returns its data or NULL. */
double *tpu__mo_def(mo_ctx *c, int id, const tpu_mo_type *t, tpu_status *st);
/* Sets value `id` to a vector of type t without data (count mode). */
void tpu__mo_def_nodata(mo_ctx *c, int id, const tpu_mo_type *t);
/* Errors name the kernel, the op and its source line. */
tpu_status tpu__mo_fail(mo_ctx *c, const tpu_mo_op *op, tpu_status st, const char *fmt, ...) TPU_PRINTF(4, 5);
/* The vector/arith/math ops (vec.c): TPU_ERR_UNSUPPORTED with *handled = 0 when not one. */
tpu_status tpu__mo_vec_op(mo_ctx *c, const tpu_mo_op *op, int *handled);
/* Vector registers a vector of this shape fills ((8,128) tiles of its minor two dims). */
int64_t tpu__mo_vregs(const mo_ctx *c, int rank, const int64_t *dims, tpu_dtype dt);

#endif
