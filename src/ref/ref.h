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

typedef struct tpu_ref_opts {
  tpu_ref_dot_conv_fn dot_conv; /* NULL: the reference kernels */
  void *user;                   /* passed to dot_conv and on_while */
  tpu_ref_while_fn on_while;    /* NULL: none */
} tpu_ref_opts;

/* tpu_ref_run with options (`o` may be NULL, which is tpu_ref_run). */
tpu_status tpu_ref_run_opts(const tpu_module *m, const tpu_tensor *args, int nargs,
                            const tpu_ref_opts *o, tpu_tensor *out, tpu_diag *d);

/* The most iterations one while loop may run before the run fails (0 = no limit). */
void tpu_ref_set_while_limit(int64_t limit);

/* Loads the .npy file for entry parameter `idx` and checks it against the parameter's
 * shape: dims and dtype must match, except that a float32 array is accepted for a bf16 or
 * f16 parameter and rounded to nearest even. */
tpu_status tpu_ref_load_input(const char *path, int idx, const tpu_shape *s, tpu_tensor *t, tpu_diag *d);

/* "f32[2,3]" for an array value. */
void tpu_ref_describe(const tpu_tensor *t, char *buf, size_t n);

#endif
