/* Private helpers of the elementwise kernels: block loads/stores in canonical types, denormal flushing. */
#ifndef TPU_REF_ELEMENTWISE_INT_H
#define TPU_REF_ELEMENTWISE_INT_H

#include <float.h>
#include <math.h>
#include <string.h>

#include "ref/ref_int.h"

/* Elements per block: kernels load a block into a canonical buffer, compute, then store. */
#define TPU_EW_BLOCK 256

/* Canonical computation classes: bf16/f16/f32 compute in float (rounded once to the
 * element type on store), f64 in double, integers and pred in int64 (signed types
 * sign-extended, unsigned zero-extended, pred 0/1; u64 keeps its bits). */
typedef enum { TPU_EW_F32, TPU_EW_F64, TPU_EW_INT } tpu_ew_class;

static inline tpu_ew_class tpu__ew_class(tpu_dtype t) {
  return t == TPU_F64 ? TPU_EW_F64 : tpu_dtype_is_float(t) ? TPU_EW_F32 : TPU_EW_INT;
}

/* XLA on CPU runs float arithmetic with denormals flushed (DAZ on inputs, FTZ on
 * results), as a TPU does; kernels apply these where XLA's arithmetic does. */
static inline float tpu__ew_flush32(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }
static inline double tpu__ew_flush64(double x) { return fabs(x) < DBL_MIN ? copysign(0.0, x) : x; }

/* Portable two's-complement reinterpretations (no implementation-defined conversions). */
static inline int64_t tpu__ew_s64(uint64_t u) {
  int64_t s;
  memcpy(&s, &u, sizeof s);
  return s;
}
static inline uint64_t tpu__ew_u64(int64_t s) { return (uint64_t)s; }

/* Loads n elements of `t` starting at element i0 with stride `step` (0 = one scalar
 * broadcast, 1 = dense) into a canonical buffer. */
void tpu__ew_load_f32(const void *p, tpu_dtype t, int64_t i0, int64_t step, int n, float *o);
void tpu__ew_load_f64(const void *p, int64_t i0, int64_t step, int n, double *o);
void tpu__ew_load_int(const void *p, tpu_dtype t, int64_t i0, int64_t step, int n, int64_t *o);

/* Stores n canonical values at elements i0.. of `t`: float to bf16/f16 rounds to nearest
 * even, integers truncate (two's complement), pred stores v != 0. */
void tpu__ew_store_f32(void *p, tpu_dtype t, int64_t i0, int n, const float *v);
void tpu__ew_store_f64(void *p, int64_t i0, int n, const double *v);
void tpu__ew_store_int(void *p, tpu_dtype t, int64_t i0, int n, const int64_t *v);

/* The f32 block kernels of the binary and unary ops: a[i] = a[i] OP b[i] (both buffers
 * are scratch), a[i] = OP a[i]; each returns 0 (computing nothing) for an op it does not
 * define, so n = 0 asks whether it does. Element by element exactly what the unfused
 * kernels compute. */
int tpu__ew_f32_binary(tpu_opcode op, float *a, float *b, int n);
int tpu__ew_f32_unary(tpu_opcode op, float *a, int n);
/* dst[i] = a[i*sa] OP b[i*sb] (sa, sb: 1, or 0 for a scalar), what tpu__ew_f32_binary
 * computes, in one pass (n <= TPU_EW_BLOCK; dst may alias a or b; inputs not modified).
 * fa = 0 (fb = 0) promises a dense a (b) is flushed already (tpu__ew_flush32(x) == x), so
 * its flush is skipped; 1 is always right. */
void tpu__ew_f32_binary_to(tpu_opcode op, float *dst, const float *a, int sa, int fa, const float *b, int sb,
                           int fb, int n);
/* o[i] = a[i*sa] OP b[i*sb] for n s32 (sg = 1) or u32 elements (strides 0 or 1; o aliases
 * neither operand), with the results the unfused op gives: returns 0 (and writes nothing)
 * when OP is not one of the ops run on the 32-bit values themselves (add, subtract,
 * multiply, and, or, xor, the three shifts, maximum, minimum). */
int tpu__ew_i32_binary(tpu_opcode op, int sg, uint32_t *o, const uint32_t *a, int sa, const uint32_t *b, int sb, int n);
/* The unit-stride kernel of tpu__ew_i32_binary's op (the same arithmetic) on n elements (o
 * aliases neither a nor b; a may be b), or NULL where it has none: a caller that runs one op
 * many times looks it up once. */
typedef void (*tpu__ew_i32_fn)(uint32_t *restrict o, const uint32_t *restrict a, const uint32_t *restrict b, int64_t n);
tpu__ew_i32_fn tpu__ew_i32_binary_fn(tpu_opcode op, int sg);
/* o[i] = compare(a[i], b[i]) for the f32 compare `in` (its direction and type), n elements. */
void tpu__ew_f32_compare(const tpu_instr *in, uint8_t *o, const float *a, const float *b, int n);
/* *acc = *acc OP x[i] for i = 0..n-1 in order, each step what tpu__ew_f32_binary computes
 * (op: a binary op it defines). */
void tpu__ew_f32_fold(tpu_opcode op, float *acc, const float *x, int64_t n);

/* Allocates `out` for in->shape, zero-filled, failing at the instruction's location; the
 * _uninit form leaves it unfilled, for kernels that write every element. */
tpu_status tpu__ew_alloc_out(const tpu_instr *in, tpu_tensor *out, tpu_diag *d);
tpu_status tpu__ew_alloc_out_uninit(const tpu_instr *in, tpu_tensor *out, tpu_diag *d);

/* elementwise_convert.c: convert, bitcast-convert, reduce-precision, is-finite. */
tpu_status tpu__ref_ew_convert(const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out, tpu_diag *d);

#endif
