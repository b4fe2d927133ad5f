/* Private interface of the reference interpreter: the op kernels and what they share.
 *
 * Kernel contract: `args` are the instruction's evaluated operands (in operand order;
 * never modified); the kernel allocates `out` for `in->shape` (tpu_tensor_alloc, or
 * tpu_ref_alloc_shape for tuples) and fills it. On failure it returns an error with the
 * instruction's location (in->loc) and leaves `out` freed (all zero). The module has been
 * verified (tpu_ir_verify), so kernels may rely on well-formed shapes and attributes; they
 * still never read or write out of bounds on any input values (indices are clamped as XLA
 * specifies). Values are dense row-major (dims[0] slowest); bf16/f16 are tpu_bf16/tpu_f16,
 * pred is one byte 0/1. */
#ifndef TPU_REF_REF_INT_H
#define TPU_REF_REF_INT_H

#include "ref/ref.h"

typedef struct tpu_interp tpu_interp;

/* The backend's name for refusals: "the reference interpreter" or the caller's (ref.h `who`). */
const char *tpu__ref_who(const tpu_interp *ip);
/* The run's options (never NULL). */
const tpu_ref_opts *tpu__ref_opts(const tpu_interp *ip);
/* The loop iteration running, counted over every loop around it (a nested loop's body runs
 * numbered outer pass by outer pass), or -1 outside loops. */
int64_t tpu__ref_flat(const tpu_interp *ip);
/* A Pallas/Mosaic kernel (tpu_custom_call): src/mosaic/call.c. */
tpu_status tpu__ref_mosaic(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                           tpu_diag *d);

typedef tpu_status (*tpu_ref_kernel)(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                                     tpu_tensor *out, tpu_diag *d);

/* Calls computation `c` on `nargs` values (each an array or tuple); the result goes to *out. */
tpu_status tpu__ref_call(tpu_interp *ip, const tpu_comp *c, const tpu_tensor *const *args, int nargs,
                         tpu_tensor *out, tpu_diag *d);

/* custom-call "xla_ffi_python_cpu_callback": the process's host-callback hook (host_callback.c). */
tpu_status tpu__ref_host_callback(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                                  tpu_tensor *out, tpu_diag *d);

/* Allocates a value for a shape (arrays zero-filled; tuples recursively). */
tpu_status tpu__ref_alloc_shape(tpu_tensor *out, const tpu_shape *s, tpu_diag *d);

/* If `c` is a scalar reducer of the form `ROOT r = op(p0, p1)` with op one of add,
 * multiply, maximum, minimum, and, or, xor, returns that opcode (so kernels can skip the
 * generic call); otherwise returns TPU_OP_COUNT. */
tpu_opcode tpu__ref_simple_reducer(const tpu_comp *c);
/* The backend's scan block (tpu_ref_opts.scan_block). */
int64_t tpu__ref_scan_block(const tpu_interp *ip);

/* Applies a simple reducer opcode to two scalars of dtype `t` (a = a OP b), with exactly
 * the semantics of the elementwise kernel for that op. */
void tpu__ref_apply_binary(tpu_opcode op, tpu_dtype t, void *a, const void *b);
/* The same on n elements: a[i] = a[i] OP b[i * sb] (sb: 1, or 0 for one b), each element
 * exactly what tpu__ref_apply_binary computes, a block at a time. */
void tpu__ref_apply_binary_n(tpu_opcode op, tpu_dtype t, void *a, const void *b, int64_t sb, int64_t n);

/* (a DIR b) from a three-way ordering: lt, eq, gt (all 0 when unordered, e.g. NaN), as
 * the compare kernel defines it (ref/elementwise.c). */
uint8_t tpu__ref_cmp_result(tpu_cmp_dir dir, int lt, int eq, int gt);

/* Row-major strides for dims. */
void tpu__ref_strides(int rank, const int64_t *dims, int64_t *strides);

/* Copies a box of `dims` elements of size `es`: dst[sum i_k*dstr_k] = src[sum i_k*sstr_k]
 * (strides in elements; source strides may be 0 to broadcast or negative to reverse).
 * Runs contiguous in both are copied with memcpy (ref/movement.c). */
void tpu__ref_copy_box(void *dst, const void *src, size_t es, int rank, const int64_t *dims, const int64_t *dstr,
                       const int64_t *sstr);
/* Element i of an integer array as int64 (u64 above INT64_MAX saturates), for indices. */
int64_t tpu__ref_read_index(const tpu_tensor *t, int64_t i);

/* The kernel that evaluates `op`, or NULL for the ops the interpreter core runs itself
 * (parameters, constants, tuples, calls, control flow, collectives). */
tpu_ref_kernel tpu__ref_kernel_of(tpu_opcode op);

/* Kernels, by file (each file owns its list). */
/* ref/elementwise.c: unary, binary, compare, select, clamp, convert, bitcast-convert,
 * is-finite, reduce-precision, map is not here. */
tpu_status tpu__ref_elementwise(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                                tpu_tensor *out, tpu_diag *d);
/* ref/movement.c: broadcast, reshape, bitcast, transpose, slice, dynamic-slice,
 * dynamic-update-slice, concatenate, pad, reverse, iota, copy. */
tpu_status tpu__ref_movement(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                             tpu_tensor *out, tpu_diag *d);
/* ref/gather.c: gather, scatter. */
tpu_status tpu__ref_gather_scatter(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                                   tpu_tensor *out, tpu_diag *d);
/* ref/rng.c: rng-bit-generator (threefry and philox as XLA defines them). */
tpu_status tpu__ref_rng(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                        tpu_tensor *out, tpu_diag *d);
/* ref/reduce.c: reduce, reduce-window, select-and-scatter, sort, topk, map. */
tpu_status tpu__ref_reduce(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                           tpu_tensor *out, tpu_diag *d);
/* ref/sort.c: the "PartialReduce" custom call (approximate top-k; ir/custom_call.h). */
tpu_status tpu__ref_partial_reduce(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                                   tpu_tensor *out, tpu_diag *d);
/* ref/collective.c: all-reduce, all-gather, reduce-scatter, all-to-all,
 * collective-permute, collective-broadcast and the -start/-done pairs, partition-id and
 * replica-id, on the run's tpu_ref_comm (or on one device without one). */
tpu_status tpu__ref_collective(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                               tpu_tensor *out, tpu_diag *d);
/* The run's communicator (NULL on one device). */
const tpu_ref_comm *tpu__ref_comm(const tpu_interp *ip);

/* ref/linalg.c: cholesky, triangular-solve. */
tpu_status tpu__ref_linalg(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                           tpu_diag *d);

/* ref/dot.c: dot, convolution. */
tpu_status tpu__ref_dot_conv(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                             tpu_tensor *out, tpu_diag *d);

/* ref/complex.c: real, imag, complex; tpu__ref_complex_ew also runs the elementwise ops
 * (unary, binary, compare) whose operand is complex, for ref/elementwise.c. */
tpu_status tpu__ref_complex(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                            tpu_tensor *out, tpu_diag *d);
tpu_status tpu__ref_complex_ew(const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out, tpu_diag *d);
/* ref/fft.c: fft (FFT, IFFT, RFFT, IRFFT over 1-3 minor dims), computed in double. */
tpu_status tpu__ref_fft(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                        tpu_tensor *out, tpu_diag *d);

#endif
