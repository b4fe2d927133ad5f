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
  const tpu_tensor *const *scalars; /* count mode: the call's known scalar operands, or NULL (zeros) */
  double **owned;         /* storage the run allocated (freed at the end), in allocation order */
  int64_t *ownn;          /* their element counts */
  int nowned, capowned;
  double *barrier;        /* the device's barrier semaphore (tpu.sem_barrier) */
  int collective;         /* the kernel talks to other devices */
  tpu_mo_pod *pod;        /* NULL: one device (tpu_mosaic_opts.pod) */
  mo_val *scoped;         /* per value id: the buffer of its memref.alloca / tpu.sem_alloc */
} mo_ctx;

int64_t tpu__mo_numel(int rank, const int64_t *dims);
/* x rounded to a value of dt (ints wrap to their width; pred: 0/1). */
double tpu__mo_round(tpu_dtype dt, double x);
/* x rounded to a value of type t: as tpu__mo_round, an i4 (t->bits) wrapped at 4 bits. */
double tpu__mo_round_ty(const tpu_mo_type *t, double x);
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
/* The bits of x held as a value of dt (floats their encoding, integers their unsigned
 * view), and the value of dt with those bits. */
uint64_t tpu__mo_bits(tpu_dtype dt, double x);
double tpu__mo_from_bits(tpu_dtype dt, uint64_t bits);
/* pack.c: tpu.pack_elementwise / tpu.unpack_elementwise. */
tpu_status tpu__mo_pack(mo_ctx *c, const tpu_mo_op *op);

/* memo.c: count mode's step memo. NULL when a step may change what later steps see (then
 * every step runs its body); else get gives the body's work at an earlier step whose grid
 * indices the body reads equal gi's, put records it. */
typedef struct mo_memo mo_memo;
mo_memo *tpu__mo_memo_new(const tpu_mosaic *k);
int tpu__mo_memo_get(const mo_memo *m, const int64_t *gi, mo_work *w);
void tpu__mo_memo_put(mo_memo *m, const int64_t *gi, const mo_work *w);
void tpu__mo_memo_free(mo_memo *m);
/* The same for window w's index map at grid point gi: 1 with bi[rank] when every component is
 * a grid index or was computed before at the same values of the grid indices it reads. */
int tpu__mo_memo_map_get(const mo_memo *m, int w, int rank, const int64_t *gi, int64_t *bi);
void tpu__mo_memo_map_put(mo_memo *m, int w, int rank, const int64_t *gi, const int64_t *bi);

/* zeroed.c: n + 1 zeroed doubles (large ones mapped: pages cleared when first touched), and
 * their release (n as allocated). */
double *tpu__mo_zeroed(int64_t n);
void tpu__mo_release(double *p, int64_t n);

/* log.c: tpu.log / tpu.log_buffer (pl.debug_print): the message on stderr when computing values. */
tpu_status tpu__mo_log(mo_ctx *c, const tpu_mo_op *op);

/* pod.c: a collective kernel's run among the pod's (NULL pod: one device, no locking). The
 * pod's lock guards every run's semaphores, allocation list and remote DMAs. */
void tpu__mo_lock(mo_ctx *c);
void tpu__mo_unlock(mo_ctx *c);
/* Before the first grid step: waits until every device's run has its buffers. */
tpu_status tpu__mo_pod_join(mo_ctx *c);
/* After the last grid step: waits until every device's run is done (a DMA from another
 * device may still land in this one's buffers until then). */
tpu_status tpu__mo_pod_finish(mo_ctx *c);
/* This run failed (c->d): the others stop with the same diagnostic. */
void tpu__mo_pod_fail(mo_ctx *c);
/* (lock held) Takes `amt` from semaphore `cell`, waiting for other devices' signals on a pod.
 * One device: a shortfall is an error (the kernel would hang); timing a collective kernel
 * (count mode) takes what is there (the other devices would signal the rest). */
tpu_status tpu__mo_sem_take(mo_ctx *c, const tpu_mo_op *op, double *cell, double amt);
/* (lock held) Semaphores changed: wakes the waiting runs. */
void tpu__mo_sem_changed(mo_ctx *c);
/* (lock held) *out: view v of this run's storage as the same place in device dev's run. */
tpu_status tpu__mo_remote(mo_ctx *c, const tpu_mo_op *op, int64_t dev, const mo_val *v, mo_val *out);
/* Count mode: a DMA of `bytes` (dmas 1) or a signal (dmas 0) to device dev. */
void tpu__mo_ici_note(mo_ctx *c, int64_t dev, double bytes, int dmas);

#endif
