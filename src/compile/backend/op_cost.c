/* The vector-unit and transcendental-unit (EUP) operations each elementwise op costs per
 * element, real and complex, and a scalar computation's (a reducer's or comparator's) count
 * of them: the op table of docs/timing.md, read by the tile pass (tile.c) when it prices an
 * instruction's vector work. Sources beside each entry. */
#include "compile/backend/backend.h"

/* Vector-unit operations of a real sine or cosine per 32-bit register. */
#define TPU__SINE_VPU_OPS 150

/* Vector-unit and transcendental-unit operations per element of an elementwise op. */
void tpu__elem_cost(tpu_opcode op, tpu_dtype t, int64_t *vpu, int64_t *eup) {
  int f = tpu_dtype_is_float(t);
  *vpu = 1;
  *eup = 0;
  switch (op) {
    case TPU_OP_DIVIDE: *vpu = f ? 2 : 20; *eup = f ? 1 : 0; break;
    case TPU_OP_REMAINDER: *vpu = f ? 5 : 22; *eup = f ? 1 : 0; break;
    case TPU_OP_POWER: *vpu = 3; *eup = 2; break;
    case TPU_OP_ATAN2: *vpu = 20; *eup = 1; break;
    case TPU_OP_SIGN: case TPU_OP_CLAMP: *vpu = 2; break;
    /* one EUP push and no VPU operation: 64 chained exps, tanhs, rsqrts of f32[4096,4096]
     * take the XLA TPU compiler's cost model 538,460 cycles on v5e, 1,048,576 pushes at
     * its 2 per cycle; logs 800,604 (a VPU operation more), logistics 1,587,036
     * (two pushes: exp and reciprocal; bench/fidelity/corpus/eup.json) */
    case TPU_OP_EXP: case TPU_OP_SQRT: case TPU_OP_RSQRT: case TPU_OP_TANH:
      *vpu = 0; *eup = 1; break;
    case TPU_OP_LOG: *vpu = 1; *eup = 1; break;
    case TPU_OP_LOGISTIC: *vpu = 2; *eup = 2; break;
    case TPU_OP_EXPM1: case TPU_OP_LOG1P: *vpu = 3; *eup = 1; break;
    case TPU_OP_CBRT: *vpu = 3; *eup = 2; break;
    /* a polynomial after a range reduction, on 32-bit registers (a 16-bit value widened,
     * tpu__elem_widened): k = 2 and 6 chained sin(y) * 0.5 over f32[2048,2048] take the XLA TPU
     * compiler's cost model 38.75 cycles per register per link on v5e (4 vector ops per
     * cycle: 155 ops, the multiply's one included), 99.5 on v4 (1.48 per cycle: 147), 35.75
     * on v6e (143); bf16 the same per 32-bit register, and 19.375 per v5p device (38.75 per
     * TensorCore: 155); cosine as sine (bench/fidelity/corpus/vector_ops.json) */
    case TPU_OP_SINE: case TPU_OP_COSINE: *vpu = TPU__SINE_VPU_OPS; break;
    case TPU_OP_TAN: *vpu = 34; *eup = 1; break;
    case TPU_OP_ERF: *vpu = 12; *eup = 1; break;
    case TPU_OP_REDUCE_PRECISION: *vpu = 4; break;
    case TPU_OP_POPCNT: case TPU_OP_CLZ: *vpu = 4; break;
    default: break;
  }
}

/* Whether an elementwise op's vector operations run on 32-bit registers whatever its
 * element type (a 16-bit value widened first, as on the EUP): the compiler times sine of
 * bf16[2048,2048] as that of f32[2048,2048] on v4, v5e and v6e (vector_ops.json "sinb"). */
int tpu__elem_widened(tpu_opcode op) { return op == TPU_OP_SINE || op == TPU_OP_COSINE; }

/* The same for an op on complex elements, per element (docs/timing.md): the real
 * vector-unit operations it takes on the real and imaginary planes. */
void tpu__complex_elem_cost(tpu_opcode op, int64_t *vpu, int64_t *eup) {
  *eup = 0;
  switch (op) {
    case TPU_OP_MULTIPLY: *vpu = 6; break;                 /* 4 multiplies, 2 adds */
    case TPU_OP_DIVIDE: *vpu = 11; *eup = 1; break;        /* Smith: ratio, 6 mul/add, 1 reciprocal */
    case TPU_OP_ABS: *vpu = 5; *eup = 1; break;            /* scaled hypot: a square root */
    case TPU_OP_SIGN: *vpu = 8; *eup = 2; break;           /* abs, then two divides */
    case TPU_OP_COMPARE: *vpu = 3; break;                  /* two compares and an and */
    case TPU_OP_EXP: *vpu = 2 * 16 + 2; *eup = 1; break;   /* exp(re) (cos, sin)(im) */
    case TPU_OP_EXPM1: *vpu = 2 * 16 + 6; *eup = 1; break;
    case TPU_OP_LOG: case TPU_OP_LOG1P: *vpu = 5 + 20 + 2; *eup = 3; break; /* log|z|, atan2 */
    case TPU_OP_SQRT: case TPU_OP_RSQRT: *vpu = 12; *eup = 3; break;
    case TPU_OP_SINE: case TPU_OP_COSINE: *vpu = 4 * 16 + 6; *eup = 2; break; /* sin, cos, sinh, cosh */
    case TPU_OP_TANH: case TPU_OP_TAN: case TPU_OP_LOGISTIC: *vpu = 4 * 16 + 17; *eup = 3; break;
    case TPU_OP_POWER: *vpu = 27 + 6 + 34; *eup = 4; break; /* exp(y log x) */
    default: *vpu = 2; break; /* add, subtract, negate, select, convert: one op per plane */
  }
}

int tpu__is_elementwise(tpu_opcode op) {
  tpu_op_class c = tpu_op_class_of(op);
  return c == TPU_CLS_UNARY || c == TPU_CLS_BINARY || c == TPU_CLS_TERNARY ||
         op == TPU_OP_COMPARE || op == TPU_OP_SELECT || op == TPU_OP_CLAMP ||
         op == TPU_OP_IS_FINITE || op == TPU_OP_CONVERT;
}

/* Elementwise operations of a scalar computation (a reducer or comparator). */
int64_t tpu__comp_ops(const tpu_comp *c) {
  int64_t n = 0;
  for (int i = 0; c && i < c->ninstrs; i++)
    if (tpu__is_elementwise(c->instrs[i]->op)) n++;
  return n ? n : 1;
}
