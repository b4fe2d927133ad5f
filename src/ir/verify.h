/* The IR verifier: shape inference and well-formedness checks for a parsed module. */
#ifndef TPU_IR_VERIFY_H
#define TPU_IR_VERIFY_H

#include "ir/ir.h"

/* Checks that every computation of `m` is well formed: operand counts from the op table,
 * element types, every attribute index in range, every dimension relationship, and that
 * each instruction's declared shape equals the one inferred from its operands and
 * attributes (layouts are not compared). Called computations must have the parameters
 * their callers pass and return what their callers expect; every computation must be
 * reachable from the entry; entry parameters and root must match the module's
 * entry_computation_layout when one is given. On failure returns TPU_ERR_INVALID (or
 * TPU_ERR_NOMEM) and fills `d` with the offending instruction's location and a message
 * "OPCODE 'NAME': FACT". A verified module is what the interpreter's kernels rely on. */
tpu_status tpu_ir_verify(const tpu_module *m, tpu_diag *d);

/* ---- Internal: shared by src/ir/verify*.c ---- */

/* A buffer for one shape printed without its layout. */
typedef struct {
  char s[320];
} tpu__vbuf;
const char *tpu__vshape(const tpu_shape *s, tpu__vbuf *b);

/* Fails with TPU_ERR_INVALID at in->loc; the message is prefixed "OPCODE 'NAME': ". */
tpu_status tpu__vfail(tpu_diag *d, const tpu_instr *in, const char *cfile, int cline, const char *fmt, ...)
    TPU_PRINTF(5, 6);
#define TPU_VFAIL(d, in, ...) tpu__vfail((d), (in), __FILE__, __LINE__, __VA_ARGS__)

/* Operand k must be an array (not a tuple or token). */
tpu_status tpu__vneed_array(const tpu_instr *in, int k, tpu_diag *d);
/* Operand k must be a rank-0 array. */
tpu_status tpu__vneed_scalar(const tpu_instr *in, int k, tpu_diag *d);
/* The instruction's result shape must equal `want` (ignoring layout). */
tpu_status tpu__vexpect(const tpu_instr *in, const tpu_shape *want, tpu_diag *d);
/* The result must be a tuple of exactly n elements. */
tpu_status tpu__vexpect_tuple(const tpu_instr *in, int n, tpu_diag *d);
/* Element i of the (tuple) result must equal `want`. */
tpu_status tpu__vexpect_elem(const tpu_instr *in, int i, const tpu_shape *want, tpu_diag *d);
/* An array shape with the given element type and dims. */
tpu_shape tpu__varray(tpu_dtype t, int rank, const int64_t *dims);
/* Both dims lists are equal (rank and every size). */
int tpu__vsame_dims(const tpu_shape *a, const tpu_shape *b);
/* A scalar computation applied by `in` (a reducer, comparator, ...): `role` names the
 * attribute in messages. It must take nparams rank-0 parameters, parameter i of type
 * param_type(in, i); it must return one rank-0 value of res_type(in, 0) when nres == 1,
 * else a tuple of nres of them. */
tpu_status tpu__vscalar_comp(const tpu_instr *in, const tpu_comp *c, const char *role, int nparams,
                             tpu_dtype (*param_type)(const tpu_instr *in, int i), int nres,
                             tpu_dtype (*res_type)(const tpu_instr *in, int i), tpu_diag *d);
/* Checked int64 arithmetic: return 0 on overflow. */
int tpu__vadd(int64_t a, int64_t b, int64_t *out);
int tpu__vmul(int64_t a, int64_t b, int64_t *out);
/* Output size of one window dimension over an input of size n (dilation, padding,
 * stride as XLA defines them); returns 0 when the arithmetic overflows or the padded
 * input is negative. */
int tpu__vwindow_out(int64_t n, const tpu_window_dim *w, int64_t *out);

/* Per-family rules; each handles the opcodes listed in its file's header. */
tpu_status tpu__verify_movement(const tpu_instr *in, tpu_diag *d);
tpu_status tpu__verify_reduce(const tpu_instr *in, tpu_diag *d);
tpu_status tpu__verify_contract(const tpu_instr *in, tpu_diag *d);
tpu_status tpu__verify_collective(const tpu_instr *in, tpu_diag *d);
tpu_status tpu__verify_complex(const tpu_instr *in, tpu_diag *d);
tpu_status tpu__verify_linalg(const tpu_instr *in, tpu_diag *d);

#endif
