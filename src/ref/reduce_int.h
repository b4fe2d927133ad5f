/* Private interface shared by the reduction, window and sort kernels (ref/reduce.c, window.c, sort.c). */
#ifndef TPU_REF_REDUCE_INT_H
#define TPU_REF_REDUCE_INT_H

#include "ref/ref_int.h"

/* Calls one computation on scalars many times without allocating per call: the argument
 * tensors are allocated once (rank 0, each of its parameter's dtype) and overwritten
 * before every call. Only the result of tpu__ref_call is allocated per call. */
typedef struct tpu__scall tpu__scall;
struct tpu__scall {
  tpu_interp *ip;
  const tpu_comp *comp;
  int nargs;
  tpu_tensor *args;        /* nargs scalars */
  const tpu_tensor **argp; /* &args[i], as tpu__ref_call takes them */
  tpu_loc loc;             /* the calling instruction, for diagnostics */
  /* Fast path (reduce.c): when every instruction of `comp` is a scalar parameter,
   * constant, compare, select, not (pred), add/multiply/maximum/minimum/and/or/xor or the
   * root tuple, it is evaluated in place on 8-byte slots (one per instruction id) with the
   * elementwise kernels' exact semantics, without tpu__ref_call. */
  int fast;
  uint64_t *slots;
};

/* Prepares calls of `comp`, which must take exactly `nargs` scalar parameters. */
tpu_status tpu__scall_init(tpu__scall *c, tpu_interp *ip, const tpu_comp *comp, int nargs, tpu_loc loc,
                           tpu_diag *d);
void tpu__scall_deinit(tpu__scall *c);

/* Storage of argument i (element size of its parameter's dtype). */
static inline void *tpu__scall_arg(tpu__scall *c, int i) { return c->args[i].data; }

/* Runs the computation; its result must be `nres` scalars of dtypes want[0..nres-1] (a
 * tuple when nres > 1, or a 1-tuple), copied to dst[i]. */
tpu_status tpu__scall_run(tpu__scall *c, void *const *dst, const tpu_dtype *want, int nres, tpu_diag *d);

/* Runs a predicate computation (a comparator or a select): *result = 0 or 1. */
tpu_status tpu__scall_pred(tpu__scall *c, int *result, tpu_diag *d);

/* Advances a row-major multi-index over dims; returns 0 once it wraps past the last one. */
static inline int tpu__next_index(int rank, const int64_t *dims, int64_t *idx) {
  for (int i = rank - 1; i >= 0; i--) {
    if (++idx[i] < dims[i]) return 1;
    idx[i] = 0;
  }
  return 0;
}

/* Kernels of window.c and sort.c (same contract as tpu__ref_reduce). */
tpu_status tpu__ref_reduce_window(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                                  tpu_tensor *out, tpu_diag *d);
tpu_status tpu__ref_select_and_scatter(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                                       tpu_tensor *out, tpu_diag *d);
tpu_status tpu__ref_sort(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                         tpu_diag *d);
tpu_status tpu__ref_topk(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                         tpu_diag *d);

#endif
