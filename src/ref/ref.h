/* The reference interpreter: runs a module on host tensors; the semantics spec. */
#ifndef TPU_REF_REF_H
#define TPU_REF_REF_H

#include "ir/ir.h"

/* Runs the entry computation on `args` (one per entry parameter, shapes checked) and
 * stores the result (an array or a tuple) in *out, which the caller frees with
 * tpu_tensor_free. Runtime errors (a while loop past the iteration limit, memory) carry
 * the instruction's location. The module must have passed tpu_ir_verify. */
tpu_status tpu_ref_run(const tpu_module *m, const tpu_tensor *args, int nargs, tpu_tensor *out,
                       tpu_diag *d);

/* A replacement kernel for dot and convolution (the chip executor puts the MXU numerics
 * here). Called with the instruction and its two evaluated operands; it either computes the
 * result into `out` (allocated for in->shape) and sets *handled = 1, or sets *handled = 0
 * and leaves `out` untouched so the reference kernel runs instead. On failure it returns an
 * error with `out` freed. */
typedef tpu_status (*tpu_ref_dot_conv_fn)(void *user, const tpu_instr *in, const tpu_tensor *lhs,
                                          const tpu_tensor *rhs, tpu_tensor *out, int *handled,
                                          tpu_diag *d);

/* Called after each while loop finishes, with the iterations it ran (for timing loops
 * whose trip count only the values tell). Returns a failure to stop the run. */
typedef tpu_status (*tpu_ref_while_fn)(void *user, const tpu_instr *in, int64_t iters, tpu_diag *d);

/* The device a run is one of, and how it meets the others (the pod executor provides it).
 * Device id = replica * partitions + partition, as XLA numbers them. At every collective
 * each device of the pod calls `exchange` with its operands, in program order; exchange
 * returns once every device has posted the same instruction, with all[dev] = device dev's
 * operands (valid until `release`). Then each device computes its own result from its
 * group's operands and calls `release`, which returns once every device has read. Either
 * fails (and the run stops) when another device failed or reached a different collective. */
typedef struct tpu_ref_comm {
  int64_t replicas, partitions, device;
  tpu_status (*exchange)(void *user, const tpu_instr *in, const tpu_tensor *const *mine,
                         const tpu_tensor *const *const **all, tpu_diag *d);
  tpu_status (*release)(void *user, const tpu_instr *in, tpu_diag *d);
  void *user;
  int64_t local_first, local_count; /* the devices this process runs (threads sharing memory) */
} tpu_ref_comm;

typedef struct tpu_ref_opts {
  tpu_ref_dot_conv_fn dot_conv; /* NULL: the reference kernels */
  void *user;                   /* passed to dot_conv and on_while */
  tpu_ref_while_fn on_while;    /* NULL: none */
  const tpu_ref_comm *comm;     /* NULL: a pod of one (device 0; groups of one run as the identity) */
  const char *who;              /* names the backend in refusals; NULL: "the reference interpreter" */
  int64_t scan_block;           /* > 0: a forward scan (cumsum) longer than this runs in blocks of
                                 * it, as the XLA TPU compiler rewrites it (ref/window.c); 0: in
                                 * window order */
  /* NULL, or called at each Pallas call with its leading n scalar operands (dynamic grid
   * bounds, scalar prefetch) before it runs (the timing counts the kernel on them), and the
   * loop iteration it runs in, counted over every loop around it (-1: none). */
  tpu_status (*on_mosaic)(void *user, const tpu_instr *in, const tpu_tensor *const *args, int n, int64_t flat,
                          tpu_diag *d);
  int vector_reduce;            /* 1: an f32 add-reduce over either minor dimension sums in the TPU
                                 * vector unit's order (partial sums per 8x128 register position,
                                 * then a log-step tree; ref/reduce.c); 0: sequentially */
} tpu_ref_opts;

/* tpu_ref_run with options (`o` may be NULL, which is tpu_ref_run). */
tpu_status tpu_ref_run_opts(const tpu_module *m, const tpu_tensor *args, int nargs,
                            const tpu_ref_opts *o, tpu_tensor *out, tpu_diag *d);

/* Progress of value runs, for long ones: called on the run's own thread after each
 * instruction of the entry computation (step of nsteps) and after each iteration of a while
 * loop the entry runs (iteration >= 1; 0 otherwise). In a pod only device 0 reports. One hook
 * for the process (NULL: none); set it before the run. */
typedef void (*tpu_ref_progress_fn)(void *user, int64_t step, int64_t nsteps, int64_t iteration);
void tpu_ref_set_progress(tpu_ref_progress_fn fn, void *user);

/* The most iterations one while loop may run before the run fails (0 = no limit). */
void tpu_ref_set_while_limit(int64_t limit);

/* Loads the .npy file for entry parameter `idx` and checks it against the parameter's
 * shape: dims and dtype must match, except that a float32 array is accepted for a bf16 or
 * f16 parameter and rounded to nearest even. */
tpu_status tpu_ref_load_input(const char *path, int idx, const tpu_shape *s, tpu_tensor *t, tpu_diag *d);
/* The same check on an array already in memory: takes *t (freed on failure; on success it
 * may be replaced by its bf16/f16 rounding). Errors name `loc` (may be tpu_noloc()). */
tpu_status tpu_ref_accept_input(tpu_tensor *t, int idx, const tpu_shape *s, tpu_loc loc, tpu_diag *d);

/* "f32[2,3]" for an array value. */
void tpu_ref_describe(const tpu_tensor *t, char *buf, size_t n);

/* Host callbacks: custom-call "xla_ffi_python_cpu_callback" (what the PJRT plugin lowers
 * jax.debug.print, jax.debug.callback, pure_callback and io_callback to; its
 * backend_config is the callback's number in the registering process). The hook gets the
 * number, the device that runs it, the operands' array leaves (tokens left out: raw bytes in
 * the tensors' row-major order) and room for the result's array leaves, which it fills. It
 * returns 0, or non-zero with a message in err (a NUL-terminated line). One hook for the
 * process (NULL: such programs are refused); set it before the run. */
typedef int (*tpu_host_callback_fn)(uint64_t id, int64_t device, int nin, void *const *in, const int64_t *in_bytes,
                                    int nout, void *const *out, const int64_t *out_bytes, char *err, int errlen);
void tpu_ref_set_host_callback(tpu_host_callback_fn fn);

#endif
