/* Which reference kernel (a file of src/ref) evaluates each opcode: the table the
 * interpreter (interp.c) dispatches through and constant folding (compile/passes/simplify.c) runs. */
#include "ref/ref_int.h"

tpu_ref_kernel tpu__ref_kernel_of(tpu_opcode op) {
  switch (op) {
    case TPU_OP_BROADCAST:
    case TPU_OP_RESHAPE:
    case TPU_OP_BITCAST:
    case TPU_OP_TRANSPOSE:
    case TPU_OP_SLICE:
    case TPU_OP_DYNAMIC_SLICE:
    case TPU_OP_DYNAMIC_UPDATE_SLICE:
    case TPU_OP_CONCATENATE:
    case TPU_OP_PAD:
    case TPU_OP_REVERSE:
    case TPU_OP_IOTA:
    case TPU_OP_COPY: return tpu__ref_movement;
    case TPU_OP_GATHER:
    case TPU_OP_SCATTER: return tpu__ref_gather_scatter;
    case TPU_OP_RNG_BIT_GENERATOR: return tpu__ref_rng;
    case TPU_OP_REDUCE:
    case TPU_OP_REDUCE_WINDOW:
    case TPU_OP_SELECT_AND_SCATTER:
    case TPU_OP_SORT:
    case TPU_OP_TOPK:
    case TPU_OP_MAP: return tpu__ref_reduce;
    case TPU_OP_DOT:
    case TPU_OP_CONVOLUTION: return tpu__ref_dot_conv;
    case TPU_OP_CHOLESKY:
    case TPU_OP_TRIANGULAR_SOLVE: return tpu__ref_linalg;
    case TPU_OP_COMPARE:
    case TPU_OP_SELECT:
    case TPU_OP_CLAMP:
    case TPU_OP_CONVERT:
    case TPU_OP_BITCAST_CONVERT:
    case TPU_OP_IS_FINITE: return tpu__ref_elementwise;
    case TPU_OP_REAL:
    case TPU_OP_IMAG:
    case TPU_OP_COMPLEX: return tpu__ref_complex;
    case TPU_OP_FFT: return tpu__ref_fft;
    default: break;
  }
  switch (tpu_op_class_of(op)) {
    case TPU_CLS_UNARY:
    case TPU_CLS_BINARY:
    case TPU_CLS_TERNARY: return tpu__ref_elementwise;
    default: return NULL;
  }
}
