/* Reference kernels: elementwise unary and binary ops, compare, select, clamp, and the scalar reducer helpers. */
#include <tgmath.h> /* one float kernel body serves f32 (expf, ...) and f64 (exp, ...) */

#include "base/bf16.h"
#include "base/cpu.h"
#include "ref/elementwise_int.h"

/* ---- Canonical block loads and stores ---- */

/* Dense (step 1) loops vectorize; step 0 loads one scalar and fills. OT is the buffer type. */
#define LOAD_LOOP(OT, CT, CONV)                                        \
  do {                                                                 \
    const CT *q_ = (const CT *)p + i0;                                 \
    if (step) {                                                        \
      for (int k = 0; k < n; k++) o[k] = CONV(q_[k]);                  \
    } else {                                                           \
      const OT v_ = CONV(q_[0]);                                       \
      for (int k = 0; k < n; k++) o[k] = v_;                           \
    }                                                                  \
  } while (0)
#define AS_I64(x) ((int64_t)(x))
#define AS_SAME(x) (x)
#define AS_PRED(x) ((int64_t)((x) != 0))
#define F8E5M2_TO_F32(x) tpu_f8_to_f32((x), 0)
#define F8E4M3FN_TO_F32(x) tpu_f8_to_f32((x), 1)

void tpu__ew_load_f32(const void *p, tpu_dtype t, int64_t i0, int64_t step, int n, float *o) {
  switch (t) {
    case TPU_BF16: LOAD_LOOP(float, tpu_bf16, tpu_bf16_to_f32); break;
    case TPU_F16: LOAD_LOOP(float, tpu_f16, tpu_f16_to_f32); break;
    case TPU_F8E5M2: LOAD_LOOP(float, tpu_f8, F8E5M2_TO_F32); break;
    case TPU_F8E4M3FN: LOAD_LOOP(float, tpu_f8, F8E4M3FN_TO_F32); break;
    default: LOAD_LOOP(float, float, AS_SAME); break;
  }
}

void tpu__ew_load_f64(const void *p, int64_t i0, int64_t step, int n, double *o) { LOAD_LOOP(double, double, AS_SAME); }

void tpu__ew_load_int(const void *p, tpu_dtype t, int64_t i0, int64_t step, int n, int64_t *o) {
  switch (t) {
    case TPU_PRED: LOAD_LOOP(int64_t, uint8_t, AS_PRED); break;
    case TPU_S8: case TPU_S4: LOAD_LOOP(int64_t, int8_t, AS_I64); break;
    case TPU_S16: LOAD_LOOP(int64_t, int16_t, AS_I64); break;
    case TPU_S32: LOAD_LOOP(int64_t, int32_t, AS_I64); break;
    case TPU_S64: LOAD_LOOP(int64_t, int64_t, AS_I64); break;
    case TPU_U8: case TPU_U4: LOAD_LOOP(int64_t, uint8_t, AS_I64); break;
    case TPU_U16: LOAD_LOOP(int64_t, uint16_t, AS_I64); break;
    case TPU_U32: LOAD_LOOP(int64_t, uint32_t, AS_I64); break;
    case TPU_U64: LOAD_LOOP(int64_t, uint64_t, tpu__ew_s64); break;
    default: break;
  }
}

void tpu__ew_store_f32(void *p, tpu_dtype t, int64_t i0, int n, const float *v) {
  switch (t) {
    case TPU_BF16:
      for (int k = 0; k < n; k++) ((tpu_bf16 *)p)[i0 + k] = tpu_bf16_from_f32(v[k]);
      break;
    case TPU_F16:
      for (int k = 0; k < n; k++) ((tpu_f16 *)p)[i0 + k] = tpu_f16_from_f32(v[k]);
      break;
    case TPU_F8E5M2: case TPU_F8E4M3FN:
      for (int k = 0; k < n; k++) ((tpu_f8 *)p)[i0 + k] = tpu_f8_from_f64((double)v[k], t == TPU_F8E4M3FN);
      break;
    default: memcpy((float *)p + i0, v, sizeof(float) * (size_t)n); break;
  }
}

void tpu__ew_store_f64(void *p, int64_t i0, int n, const double *v) {
  memcpy((double *)p + i0, v, sizeof(double) * (size_t)n);
}

/* Truncation through the unsigned type keeps the conversion well defined. */
#define STORE_INT(CT, UT)                                                                 \
  for (int k = 0; k < n; k++) {                                                           \
    UT u_ = (UT)tpu__ew_u64(v[k]);                                                        \
    memcpy((CT *)p + i0 + k, &u_, sizeof u_);                                             \
  }                                                                                       \
  break

void tpu__ew_store_int(void *p, tpu_dtype t, int64_t i0, int n, const int64_t *v) {
  switch (t) {
    case TPU_PRED:
      for (int k = 0; k < n; k++) ((uint8_t *)p)[i0 + k] = v[k] != 0;
      break;
    case TPU_S8: STORE_INT(int8_t, uint8_t);
    case TPU_S4: /* one element per byte, wrapped to 4 bits and sign-extended (XLA wraps s4/u4) */
      for (int k = 0; k < n; k++) ((int8_t *)p)[i0 + k] = (int8_t)(((tpu__ew_u64(v[k]) & 15) ^ 8) - 8);
      break;
    case TPU_U4:
      for (int k = 0; k < n; k++) ((uint8_t *)p)[i0 + k] = (uint8_t)(tpu__ew_u64(v[k]) & 15);
      break;
    case TPU_S16: STORE_INT(int16_t, uint16_t);
    case TPU_S32: STORE_INT(int32_t, uint32_t);
    case TPU_S64: STORE_INT(int64_t, uint64_t);
    case TPU_U8: STORE_INT(uint8_t, uint8_t);
    case TPU_U16: STORE_INT(uint16_t, uint16_t);
    case TPU_U32: STORE_INT(uint32_t, uint32_t);
    case TPU_U64: STORE_INT(uint64_t, uint64_t);
    default: break;
  }
}

static tpu_status alloc_out(const tpu_instr *in, int zero, tpu_tensor *out, tpu_diag *d) {
  tpu_diag tmp; /* written by the allocation only when it fails */
  tpu_status st = zero ? tpu_tensor_alloc(out, in->shape.dtype, in->shape.rank, in->shape.dims, &tmp)
                       : tpu_tensor_alloc_uninit(out, in->shape.dtype, in->shape.rank, in->shape.dims, &tmp);
  if (st != TPU_OK) return TPU_FAIL(d, st, in->loc, "'%s': %s", in->name, tmp.msg);
  return TPU_OK;
}

tpu_status tpu__ew_alloc_out(const tpu_instr *in, tpu_tensor *out, tpu_diag *d) { return alloc_out(in, 1, out, d); }

tpu_status tpu__ew_alloc_out_uninit(const tpu_instr *in, tpu_tensor *out, tpu_diag *d) {
  return alloc_out(in, 0, out, d);
}

/* ---- Float kernels (one body for float and double via <tgmath.h>) ---- */

#define DEFINE_FLOAT_KERNELS(T, SUF, FLUSH)                                                            \
  static T fmax_##SUF(T a, T b) {                                                                      \
    if (a != a) return a;                                                                              \
    if (b != b) return b;                                                                              \
    if (a == b) return signbit(a) ? b : a; /* +0 is the larger zero */                                 \
    return a > b ? a : b;                                                                              \
  }                                                                                                    \
  static T fmin_##SUF(T a, T b) {                                                                      \
    if (a != a) return a;                                                                              \
    if (b != b) return b;                                                                              \
    if (a == b) return signbit(a) ? a : b; /* -0 is the smaller zero */                                \
    return a < b ? a : b;                                                                              \
  }                                                                                                    \
  /* Computes a[i] = a[i] OP b[i] (both buffers are scratch); 0 if OP is not a float op. */            \
  static int fbin_##SUF(tpu_opcode op, T *a, T *b, int n) {                                            \
    for (int i = 0; i < n; i++) a[i] = FLUSH(a[i]);                                                    \
    for (int i = 0; i < n; i++) b[i] = FLUSH(b[i]);                                                    \
    switch (op) {                                                                                      \
      case TPU_OP_ADD: for (int i = 0; i < n; i++) a[i] = a[i] + b[i]; break;                          \
      case TPU_OP_SUBTRACT: for (int i = 0; i < n; i++) a[i] = a[i] - b[i]; break;                     \
      case TPU_OP_MULTIPLY: for (int i = 0; i < n; i++) a[i] = a[i] * b[i]; break;                     \
      case TPU_OP_DIVIDE: for (int i = 0; i < n; i++) a[i] = a[i] / b[i]; break;                       \
      case TPU_OP_REMAINDER: for (int i = 0; i < n; i++) a[i] = fmod(a[i], b[i]); break;               \
      case TPU_OP_POWER: for (int i = 0; i < n; i++) a[i] = pow(a[i], b[i]); break;                    \
      case TPU_OP_ATAN2: for (int i = 0; i < n; i++) a[i] = atan2(a[i], b[i]); break;                  \
      case TPU_OP_MAXIMUM: for (int i = 0; i < n; i++) a[i] = fmax_##SUF(a[i], b[i]); break;           \
      case TPU_OP_MINIMUM: for (int i = 0; i < n; i++) a[i] = fmin_##SUF(a[i], b[i]); break;           \
      default: return 0;                                                                               \
    }                                                                                                  \
    for (int i = 0; i < n; i++) a[i] = FLUSH(a[i]);                                                    \
    return 1;                                                                                          \
  }                                                                                                    \
  static T logistic_##SUF(T x) {                                                                       \
    if (x >= 0) return (T)1 / ((T)1 + exp(-x));                                                        \
    T e = exp(x); /* x < 0 (or NaN): exp cannot overflow */                                            \
    return e / ((T)1 + e);                                                                             \
  }                                                                                                    \
  /* Computes a[i] = OP a[i] in place; 0 if OP is not a float op. negate and abs only move      \
   * bits (no flushing), as XLA's do. */                                                               \
  static int fun_##SUF(tpu_opcode op, T *a, int n) {                                                   \
    if (op == TPU_OP_NEGATE) {                                                                         \
      for (int i = 0; i < n; i++) a[i] = -a[i];                                                        \
      return 1;                                                                                        \
    }                                                                                                  \
    if (op == TPU_OP_ABS) {                                                                            \
      for (int i = 0; i < n; i++) a[i] = fabs(a[i]);                                                   \
      return 1;                                                                                        \
    }                                                                                                  \
    for (int i = 0; i < n; i++) a[i] = FLUSH(a[i]);                                                    \
    switch (op) {                                                                                      \
      case TPU_OP_SIGN:                                                                                \
        for (int i = 0; i < n; i++) a[i] = (a[i] != a[i] || a[i] == 0) ? a[i] : copysign((T)1, a[i]); \
        break;                                                                                         \
      case TPU_OP_FLOOR: for (int i = 0; i < n; i++) a[i] = floor(a[i]); break;                        \
      case TPU_OP_CEIL: for (int i = 0; i < n; i++) a[i] = ceil(a[i]); break;                          \
      case TPU_OP_ROUND_AFZ: for (int i = 0; i < n; i++) a[i] = round(a[i]); break;                    \
      case TPU_OP_ROUND_EVEN: for (int i = 0; i < n; i++) a[i] = nearbyint(a[i]); break;               \
      case TPU_OP_EXP: for (int i = 0; i < n; i++) a[i] = exp(a[i]); break;                            \
      case TPU_OP_EXPM1: for (int i = 0; i < n; i++) a[i] = expm1(a[i]); break;                        \
      case TPU_OP_LOG: for (int i = 0; i < n; i++) a[i] = log(a[i]); break;                            \
      case TPU_OP_LOG1P: for (int i = 0; i < n; i++) a[i] = log1p(a[i]); break;                        \
      case TPU_OP_SQRT: for (int i = 0; i < n; i++) a[i] = sqrt(a[i]); break;                          \
      case TPU_OP_RSQRT: for (int i = 0; i < n; i++) a[i] = (T)1 / sqrt(a[i]); break;                  \
      case TPU_OP_CBRT: for (int i = 0; i < n; i++) a[i] = cbrt(a[i]); break;                          \
      case TPU_OP_TANH: for (int i = 0; i < n; i++) a[i] = tanh(a[i]); break;                          \
      case TPU_OP_LOGISTIC: for (int i = 0; i < n; i++) a[i] = logistic_##SUF(a[i]); break;            \
      case TPU_OP_SINE: for (int i = 0; i < n; i++) a[i] = sin(a[i]); break;                           \
      case TPU_OP_COSINE: for (int i = 0; i < n; i++) a[i] = cos(a[i]); break;                         \
      case TPU_OP_TAN: for (int i = 0; i < n; i++) a[i] = tan(a[i]); break;                            \
      case TPU_OP_ERF: for (int i = 0; i < n; i++) a[i] = erf(a[i]); break;                            \
      default: return 0;                                                                               \
    }                                                                                                  \
    for (int i = 0; i < n; i++) a[i] = FLUSH(a[i]);                                                    \
    return 1;                                                                                          \
  }

DEFINE_FLOAT_KERNELS(float, f32, tpu__ew_flush32)
DEFINE_FLOAT_KERNELS(double, f64, tpu__ew_flush64)

/* ---- Integer kernels: two's complement on int64 holding canonical values ---- */

static int int_bits(tpu_dtype t) { return t == TPU_PRED ? 1 : tpu_dtype_bits(t); }
static uint64_t width_mask(int w) { return w >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << w) - 1); }

/* Sign-extends the low w bits of v. */
static int64_t sext(uint64_t v, int w) {
  if (w >= 64) return tpu__ew_s64(v);
  uint64_t m = (uint64_t)1 << (w - 1);
  return tpu__ew_s64(((v & width_mask(w)) ^ m) - m);
}

/* Brings wrapped int64 values back to the canonical form for integer type t of width w. */
static void canon_block(int64_t *a, int n, tpu_dtype t, int w) {
  if (w >= 64) return;
  const uint64_t mask = width_mask(w), m = (uint64_t)1 << (w - 1);
  if (tpu_dtype_is_signed(t))
    for (int i = 0; i < n; i++) a[i] = tpu__ew_s64(((tpu__ew_u64(a[i]) & mask) ^ m) - m);
  else
    for (int i = 0; i < n; i++) a[i] = tpu__ew_s64(tpu__ew_u64(a[i]) & mask);
}

static int popcount64(uint64_t v) {
  int c = 0;
  for (; v; v &= v - 1) c++;
  return c;
}

static int bitlen64(uint64_t v) {
  int c = 0;
  for (; v; v >>= 1) c++;
  return c;
}

/* Integer power by repeated squaring (wrapping); XLA's rule for a negative exponent:
 * 1 for base 1, +-1 for base -1 by parity, else 0. */
static int64_t ipow(int64_t a, int64_t b, int is_signed) {
  if (is_signed && b < 0) {
    if (a == 1) return 1;
    if (a == -1) return (tpu__ew_u64(b) & 1) ? -1 : 1;
    return 0;
  }
  uint64_t base = tpu__ew_u64(a), e = tpu__ew_u64(b), r = 1;
  while (e) {
    if (e & 1) r *= base;
    base *= base;
    e >>= 1;
  }
  return tpu__ew_s64(r);
}

static int pred_binary_ok(tpu_opcode op) {
  return op == TPU_OP_ADD || op == TPU_OP_MULTIPLY || op == TPU_OP_MAXIMUM || op == TPU_OP_MINIMUM ||
         op == TPU_OP_AND || op == TPU_OP_OR || op == TPU_OP_XOR;
}

/* a[i] = a[i] OP b[i] for pred (add/maximum are or, multiply/minimum are and, as XLA's
 * evaluator defines them on booleans) and integers; 0 if OP does not apply. */
static int ibin(tpu_opcode op, tpu_dtype t, int64_t *a, const int64_t *b, int n) {
  if (t == TPU_PRED) {
    switch (op) {
      case TPU_OP_ADD: case TPU_OP_MAXIMUM: case TPU_OP_OR: for (int i = 0; i < n; i++) a[i] |= b[i]; break;
      case TPU_OP_MULTIPLY: case TPU_OP_MINIMUM: case TPU_OP_AND: for (int i = 0; i < n; i++) a[i] &= b[i]; break;
      case TPU_OP_XOR: for (int i = 0; i < n; i++) a[i] ^= b[i]; break;
      default: return 0;
    }
    return 1;
  }
  const int w = int_bits(t), sg = tpu_dtype_is_signed(t);
  const uint64_t mask = width_mask(w);
  const int64_t smin = sext((uint64_t)1 << (w - 1), w);
  switch (op) {
    case TPU_OP_ADD: for (int i = 0; i < n; i++) a[i] = tpu__ew_s64(tpu__ew_u64(a[i]) + tpu__ew_u64(b[i])); break;
    case TPU_OP_SUBTRACT: for (int i = 0; i < n; i++) a[i] = tpu__ew_s64(tpu__ew_u64(a[i]) - tpu__ew_u64(b[i])); break;
    case TPU_OP_MULTIPLY: for (int i = 0; i < n; i++) a[i] = tpu__ew_s64(tpu__ew_u64(a[i]) * tpu__ew_u64(b[i])); break;
    case TPU_OP_DIVIDE: /* x/0 = all bits set; INT_MIN/-1 = INT_MIN */
      for (int i = 0; i < n; i++) {
        if (b[i] == 0) a[i] = -1;
        else if (sg) a[i] = (a[i] == smin && b[i] == -1) ? smin : a[i] / b[i];
        else a[i] = tpu__ew_s64(tpu__ew_u64(a[i]) / tpu__ew_u64(b[i]));
      }
      break;
    case TPU_OP_REMAINDER: /* x%0 = x; INT_MIN%-1 = 0; the sign follows the dividend */
      for (int i = 0; i < n; i++) {
        if (b[i] == 0) continue;
        if (sg) a[i] = (a[i] == smin && b[i] == -1) ? 0 : a[i] % b[i];
        else a[i] = tpu__ew_s64(tpu__ew_u64(a[i]) % tpu__ew_u64(b[i]));
      }
      break;
    case TPU_OP_POWER: for (int i = 0; i < n; i++) a[i] = ipow(a[i], b[i], sg); break;
    case TPU_OP_MAXIMUM:
      for (int i = 0; i < n; i++)
        if (sg ? b[i] > a[i] : tpu__ew_u64(b[i]) > tpu__ew_u64(a[i])) a[i] = b[i];
      break;
    case TPU_OP_MINIMUM:
      for (int i = 0; i < n; i++)
        if (sg ? b[i] < a[i] : tpu__ew_u64(b[i]) < tpu__ew_u64(a[i])) a[i] = b[i];
      break;
    case TPU_OP_AND: for (int i = 0; i < n; i++) a[i] &= b[i]; break;
    case TPU_OP_OR: for (int i = 0; i < n; i++) a[i] |= b[i]; break;
    case TPU_OP_XOR: for (int i = 0; i < n; i++) a[i] ^= b[i]; break;
    /* Shift counts are read as unsigned; a count >= the width shifts everything out. */
    case TPU_OP_SHIFT_LEFT:
      for (int i = 0; i < n; i++) {
        uint64_t s = tpu__ew_u64(b[i]) & mask;
        a[i] = s >= (uint64_t)w ? 0 : tpu__ew_s64(tpu__ew_u64(a[i]) << s);
      }
      break;
    case TPU_OP_SHIFT_RIGHT_LOGICAL:
      for (int i = 0; i < n; i++) {
        uint64_t s = tpu__ew_u64(b[i]) & mask;
        a[i] = s >= (uint64_t)w ? 0 : tpu__ew_s64((tpu__ew_u64(a[i]) & mask) >> s);
      }
      break;
    case TPU_OP_SHIFT_RIGHT_ARITHMETIC: /* on the bits as signed, also for unsigned types */
      for (int i = 0; i < n; i++) {
        uint64_t s = tpu__ew_u64(b[i]) & mask;
        int64_t v = sext(tpu__ew_u64(a[i]), w);
        if (s >= (uint64_t)w) a[i] = v < 0 ? -1 : 0;
        else a[i] = v >= 0 ? v >> s : ~((~v) >> s);
      }
      break;
    default: return 0;
  }
  canon_block(a, n, t, w);
  return 1;
}

/* a[i] = OP a[i] for pred (not only) and integers; 0 if OP does not apply. */
static int iun(tpu_opcode op, tpu_dtype t, int64_t *a, int n) {
  if (t == TPU_PRED) {
    if (op != TPU_OP_NOT) return 0;
    for (int i = 0; i < n; i++) a[i] = !a[i];
    return 1;
  }
  const int w = int_bits(t), sg = tpu_dtype_is_signed(t);
  const uint64_t mask = width_mask(w);
  switch (op) {
    case TPU_OP_NEGATE: for (int i = 0; i < n; i++) a[i] = tpu__ew_s64(0 - tpu__ew_u64(a[i])); break;
    case TPU_OP_ABS: /* abs(INT_MIN) wraps to INT_MIN */
      for (int i = 0; i < n; i++)
        if (sg && a[i] < 0) a[i] = tpu__ew_s64(0 - tpu__ew_u64(a[i]));
      break;
    case TPU_OP_SIGN: for (int i = 0; i < n; i++) a[i] = sg ? (a[i] > 0) - (a[i] < 0) : a[i] != 0; break;
    case TPU_OP_NOT: for (int i = 0; i < n; i++) a[i] = ~a[i]; break;
    case TPU_OP_POPCNT: for (int i = 0; i < n; i++) a[i] = popcount64(tpu__ew_u64(a[i]) & mask); break;
    case TPU_OP_CLZ: for (int i = 0; i < n; i++) a[i] = w - bitlen64(tpu__ew_u64(a[i]) & mask); break;
    default: return 0;
  }
  canon_block(a, n, t, w);
  return 1;
}

/* ---- Block drivers ---- */

typedef union {
  float f[TPU_EW_BLOCK];
  double d[TPU_EW_BLOCK];
  int64_t i[TPU_EW_BLOCK];
} ew_buf;

static int binary_applies(tpu_opcode op, tpu_dtype t) {
  if (tpu_dtype_is_complex(t)) return 0; /* ref/complex.c */
  switch (tpu__ew_class(t)) {
    case TPU_EW_INT: return t == TPU_PRED ? pred_binary_ok(op) : op != TPU_OP_ATAN2 && tpu_op_class_of(op) == TPU_CLS_BINARY;
    default:
      return op == TPU_OP_ADD || op == TPU_OP_SUBTRACT || op == TPU_OP_MULTIPLY || op == TPU_OP_DIVIDE ||
             op == TPU_OP_REMAINDER || op == TPU_OP_POWER || op == TPU_OP_ATAN2 || op == TPU_OP_MAXIMUM ||
             op == TPU_OP_MINIMUM;
  }
}

/* The s32/u32 binary ops on the 32-bit values (no widening to blocks of int64 and back): the
 * same results as ibin, which wraps modulo 2^32, reads a shift count as unsigned (a count
 * >= 32 shifts everything out) and compares by the type's sign. One expression per op, used
 * by bin32 (strided) and by the unit-stride kernels tpu__ew_i32_binary_fn hands out. */
#define I32_OPS(X)                                                                  \
  X(add, x + y)                                                                     \
  X(sub, x - y)                                                                     \
  X(mul, x * y)                                                                     \
  X(and, x & y)                                                                     \
  X(or, x | y)                                                                      \
  X(xor, x ^ y)                                                                     \
  X(shl, y >= 32 ? 0u : x << y)                                                     \
  X(shrl, y >= 32 ? 0u : x >> y)                                                    \
  X(shra, (x >> 31) ? (y >= 32 ? ~0u : ~(~x >> y)) : (y >= 32 ? 0u : x >> y)) /* on the bits as signed */ \
  X(smax, (int32_t)y > (int32_t)x ? y : x)                                          \
  X(umax, y > x ? y : x)                                                            \
  X(smin, (int32_t)y < (int32_t)x ? y : x)                                          \
  X(umin, y < x ? y : x)

#define I32_FN(NAME, EXPR)                                                                   \
  static void i32_##NAME(uint32_t *o, const uint32_t *a, int64_t sa, const uint32_t *b, int64_t sb, \
                         int64_t n) {                                                        \
    for (int64_t i = 0; i < n; i++) {                                                        \
      const uint32_t x = a[i * sa], y = b[i * sb];                                           \
      o[i] = (EXPR);                                                                         \
    }                                                                                        \
  }                                                                                          \
  static void i32u_##NAME(uint32_t *restrict o, const uint32_t *restrict a, const uint32_t *restrict b, \
                          int64_t n) {                                                       \
    for (int64_t i = 0; i < n; i++) {                                                        \
      const uint32_t x = a[i], y = b[i];                                                     \
      o[i] = (EXPR);                                                                         \
    }                                                                                        \
  }
I32_OPS(I32_FN)
#undef I32_FN

typedef void (*i32_strided)(uint32_t *, const uint32_t *, int64_t, const uint32_t *, int64_t, int64_t);

/* The op's index in I32_OPS, or -1. */
static int i32_index(tpu_opcode op, int sg) {
  switch (op) {
    case TPU_OP_ADD: return 0;
    case TPU_OP_SUBTRACT: return 1;
    case TPU_OP_MULTIPLY: return 2;
    case TPU_OP_AND: return 3;
    case TPU_OP_OR: return 4;
    case TPU_OP_XOR: return 5;
    case TPU_OP_SHIFT_LEFT: return 6;
    case TPU_OP_SHIFT_RIGHT_LOGICAL: return 7;
    case TPU_OP_SHIFT_RIGHT_ARITHMETIC: return 8;
    case TPU_OP_MAXIMUM: return sg ? 9 : 10;
    case TPU_OP_MINIMUM: return sg ? 11 : 12;
    default: return -1;
  }
}

#define I32_STRIDED(NAME, EXPR) i32_##NAME,
static const i32_strided i32_strided_fns[] = {I32_OPS(I32_STRIDED)};
#undef I32_STRIDED
#define I32_UNIT(NAME, EXPR) i32u_##NAME,
static const tpu__ew_i32_fn i32_unit_fns[] = {I32_OPS(I32_UNIT)};
#undef I32_UNIT

/* run_binary for s32 and u32 (strides 0 or 1); 0 when OP is not one of I32_OPS. */
static int bin32(tpu_opcode op, int sg, uint32_t *o, const uint32_t *a, int64_t sa, const uint32_t *b, int64_t sb,
                 int64_t n) {
  int k = i32_index(op, sg);
  if (k < 0) return 0;
  i32_strided_fns[k](o, a, sa, b, sb, n);
  return 1;
}

int tpu__ew_i32_binary(tpu_opcode op, int sg, uint32_t *o, const uint32_t *a, int sa, const uint32_t *b, int sb, int n) {
  return bin32(op, sg, o, a, sa, b, sb, n);
}

tpu__ew_i32_fn tpu__ew_i32_binary_fn(tpu_opcode op, int sg) {
  int k = i32_index(op, sg);
  return k < 0 ? NULL : i32_unit_fns[k];
}

/* o[i] = a[i*sa] OP b[i*sb] for n elements of dtype t (strides 0 or 1). o may alias a or b.
 * The caller has checked binary_applies. */
static void run_binary(tpu_opcode op, tpu_dtype t, void *o, const void *a, int64_t sa, const void *b, int64_t sb,
                       int64_t n) {
  if ((t == TPU_S32 || t == TPU_U32) && !(o == b && sb == 0 && n > 1) && !(o == a && sa == 0 && n > 1) &&
      bin32(op, t == TPU_S32, o, a, sa, b, sb, n))
    return; /* (element by element: o may alias a dense operand, not a broadcast one) */
  ew_buf x, y;
  for (int64_t s = 0; s < n; s += TPU_EW_BLOCK) {
    int m = (int)(n - s < TPU_EW_BLOCK ? n - s : TPU_EW_BLOCK);
    switch (tpu__ew_class(t)) {
      case TPU_EW_F32:
        tpu__ew_load_f32(a, t, s * sa, sa, m, x.f);
        tpu__ew_load_f32(b, t, s * sb, sb, m, y.f);
        fbin_f32(op, x.f, y.f, m);
        tpu__ew_store_f32(o, t, s, m, x.f);
        break;
      case TPU_EW_F64:
        tpu__ew_load_f64(a, s * sa, sa, m, x.d);
        tpu__ew_load_f64(b, s * sb, sb, m, y.d);
        fbin_f64(op, x.d, y.d, m);
        tpu__ew_store_f64(o, s, m, x.d);
        break;
      case TPU_EW_INT:
        tpu__ew_load_int(a, t, s * sa, sa, m, x.i);
        tpu__ew_load_int(b, t, s * sb, sb, m, y.i);
        ibin(op, t, x.i, y.i, m);
        tpu__ew_store_int(o, t, s, m, x.i);
        break;
    }
  }
}

static int unary_applies(tpu_opcode op, tpu_dtype t) {
  ew_buf x;
  switch (tpu__ew_class(t)) {
    case TPU_EW_INT: return iun(op, t, x.i, 0);
    default: return fun_f32(op, x.f, 0);
  }
}

static void run_unary(tpu_opcode op, tpu_dtype t, void *o, const void *a, int64_t n) {
  ew_buf x;
  for (int64_t s = 0; s < n; s += TPU_EW_BLOCK) {
    int m = (int)(n - s < TPU_EW_BLOCK ? n - s : TPU_EW_BLOCK);
    switch (tpu__ew_class(t)) {
      case TPU_EW_F32:
        tpu__ew_load_f32(a, t, s, 1, m, x.f);
        fun_f32(op, x.f, m);
        tpu__ew_store_f32(o, t, s, m, x.f);
        break;
      case TPU_EW_F64:
        tpu__ew_load_f64(a, s, 1, m, x.d);
        fun_f64(op, x.d, m);
        tpu__ew_store_f64(o, s, m, x.d);
        break;
      case TPU_EW_INT:
        tpu__ew_load_int(a, t, s, 1, m, x.i);
        iun(op, t, x.i, m);
        tpu__ew_store_int(o, t, s, m, x.i);
        break;
    }
  }
}

/* Total order keys: -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN as unsigned integers. */
static uint32_t key32(float f) {
  uint32_t u = tpu_f32_bits(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
static uint64_t key64(double f) {
  uint64_t u;
  memcpy(&u, &f, sizeof u);
  return (u & 0x8000000000000000ull) ? ~u : (u | 0x8000000000000000ull);
}

uint8_t tpu__ref_cmp_result(tpu_cmp_dir dir, int lt, int eq, int gt) {
  switch (dir) {
    case TPU_CMP_EQ: return (uint8_t)eq;
    case TPU_CMP_NE: return (uint8_t)!eq;
    case TPU_CMP_LT: return (uint8_t)lt;
    case TPU_CMP_LE: return (uint8_t)(lt || eq);
    case TPU_CMP_GT: return (uint8_t)gt;
    case TPU_CMP_GE: return (uint8_t)(gt || eq);
  }
  return 0;
}

/* compare: FLOAT (default for floats) compares values with denormals read as zero and
 * NaN unordered; TOTALORDER compares bit-pattern keys; integers compare SIGNED or
 * UNSIGNED (the dtype's own signedness by default; pred is unsigned). */
static void run_compare(const tpu_instr *in, tpu_dtype t, uint8_t *o, const void *a, int64_t sa, const void *b,
                        int64_t sb, int64_t n) {
  ew_buf x, y;
  const tpu_cmp_dir dir = in->direction;
  const int total = in->cmp_type == TPU_CMPT_TOTALORDER;
  const int w = tpu__ew_class(t) == TPU_EW_INT ? int_bits(t) : 0;
  int sg = tpu_dtype_is_signed(t);
  if (in->cmp_type == TPU_CMPT_SIGNED) sg = 1;
  if (in->cmp_type == TPU_CMPT_UNSIGNED || t == TPU_PRED) sg = 0;
  for (int64_t s = 0; s < n; s += TPU_EW_BLOCK) {
    int m = (int)(n - s < TPU_EW_BLOCK ? n - s : TPU_EW_BLOCK);
    uint8_t *r = o + s;
    switch (tpu__ew_class(t)) {
      case TPU_EW_F32:
        tpu__ew_load_f32(a, t, s * sa, sa, m, x.f);
        tpu__ew_load_f32(b, t, s * sb, sb, m, y.f);
        for (int i = 0; i < m; i++) {
          if (total) {
            uint32_t ka = key32(x.f[i]), kb = key32(y.f[i]);
            r[i] = tpu__ref_cmp_result(dir, ka < kb, ka == kb, ka > kb);
          } else {
            float p = tpu__ew_flush32(x.f[i]), q = tpu__ew_flush32(y.f[i]);
            r[i] = tpu__ref_cmp_result(dir, p < q, p == q, p > q);
          }
        }
        break;
      case TPU_EW_F64:
        tpu__ew_load_f64(a, s * sa, sa, m, x.d);
        tpu__ew_load_f64(b, s * sb, sb, m, y.d);
        for (int i = 0; i < m; i++) {
          if (total) {
            uint64_t ka = key64(x.d[i]), kb = key64(y.d[i]);
            r[i] = tpu__ref_cmp_result(dir, ka < kb, ka == kb, ka > kb);
          } else {
            double p = tpu__ew_flush64(x.d[i]), q = tpu__ew_flush64(y.d[i]);
            r[i] = tpu__ref_cmp_result(dir, p < q, p == q, p > q);
          }
        }
        break;
      case TPU_EW_INT:
        tpu__ew_load_int(a, t, s * sa, sa, m, x.i);
        tpu__ew_load_int(b, t, s * sb, sb, m, y.i);
        for (int i = 0; i < m; i++) {
          if (sg) {
            int64_t p = sext(tpu__ew_u64(x.i[i]), w), q = sext(tpu__ew_u64(y.i[i]), w);
            r[i] = tpu__ref_cmp_result(dir, p < q, p == q, p > q);
          } else {
            uint64_t mask = width_mask(w), p = tpu__ew_u64(x.i[i]) & mask, q = tpu__ew_u64(y.i[i]) & mask;
            r[i] = tpu__ref_cmp_result(dir, p < q, p == q, p > q);
          }
        }
        break;
    }
  }
}

/* clamp(lo, x, hi) = minimum(maximum(x, lo), hi) with those ops' exact semantics. */
static void run_clamp(tpu_dtype t, void *o, const void *lo, int64_t sl, const void *x, const void *hi, int64_t sh,
                      int64_t n) {
  run_binary(TPU_OP_MAXIMUM, t, o, x, 1, lo, sl, n);
  run_binary(TPU_OP_MINIMUM, t, o, o, 1, hi, sh, n);
}

#define SELECT_LOOP(CT)                                                                               \
  for (int64_t i = 0; i < n; i++)                                                                     \
    ((CT *)o)[i] = p[i * sp] ? ((const CT *)a)[i * sa] : ((const CT *)b)[i * sb];                     \
  break

static void run_select(size_t esize, void *o, const uint8_t *p, int64_t sp, const void *a, int64_t sa,
                       const void *b, int64_t sb, int64_t n) {
  switch (esize) {
    case 1: SELECT_LOOP(uint8_t);
    case 2: SELECT_LOOP(uint16_t);
    case 4: SELECT_LOOP(uint32_t);
    case 8: SELECT_LOOP(uint64_t);
    default: /* c128 */
      for (int64_t i = 0; i < n; i++)
        memcpy((char *)o + esize * (size_t)i,
               p[i * sp] ? (const char *)a + esize * (size_t)(i * sa) : (const char *)b + esize * (size_t)(i * sb), esize);
      break;
  }
}

/* ---- The kernel ---- */

/* Operand k must be an array of dtype `want` with the result's dims, or (when scalar_ok)
 * a rank-0 array; *step gets 1 (dense) or 0 (broadcast scalar). */
static tpu_status check_operand(const tpu_instr *in, const tpu_tensor *const *args, int k, tpu_dtype want,
                                int scalar_ok, int64_t *step, tpu_diag *d) {
  const tpu_tensor *v = args[k];
  if (!tpu_dtype_is_array(v->dtype) || v->dtype != want)
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "%s '%s': operand %d is %s, expected %s", tpu_op_name(in->op),
                    in->name, k, tpu_dtype_name(v->dtype), tpu_dtype_name(want));
  if (scalar_ok && v->rank == 0 && in->shape.rank != 0) {
    *step = 0;
    return TPU_OK;
  }
  int same = v->rank == in->shape.rank;
  for (int i = 0; same && i < v->rank; i++) same = v->dims[i] == in->shape.dims[i];
  if (!same)
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "%s '%s': operand %d does not have the result's dimensions",
                    tpu_op_name(in->op), in->name, k);
  *step = 1;
  return TPU_OK;
}

static tpu_status not_for_type(const tpu_instr *in, tpu_dtype t, tpu_diag *d) {
  return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "%s '%s': not defined on %s", tpu_op_name(in->op), in->name,
                  tpu_dtype_name(t));
}

static tpu_status check_arity(const tpu_instr *in, int n, tpu_diag *d) {
  if (in->noperands != n)
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "%s '%s': takes %d operands, has %d", tpu_op_name(in->op), in->name,
                    n, in->noperands);
  if (!tpu_dtype_is_array(in->shape.dtype))
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "%s '%s': the result must be an array", tpu_op_name(in->op), in->name);
  return TPU_OK;
}

tpu_status tpu__ref_elementwise(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                                tpu_diag *d) {
  (void)ip;
  tpu_tensor_zero(out);
  const tpu_opcode op = in->op;
  if (in->noperands >= 1 && tpu_dtype_is_complex(args[0]->dtype) && op != TPU_OP_CONVERT &&
      op != TPU_OP_BITCAST_CONVERT && op != TPU_OP_SELECT)
    return tpu__ref_complex_ew(in, args, out, d);
  if (op == TPU_OP_CONVERT || op == TPU_OP_BITCAST_CONVERT || op == TPU_OP_REDUCE_PRECISION || op == TPU_OP_IS_FINITE)
    return tpu__ref_ew_convert(in, args, out, d);
  const tpu_dtype t = in->shape.dtype;
  int64_t s0 = 1, s1 = 1, s2 = 1;
  if (op == TPU_OP_COMPARE) {
    TPU_TRY(check_arity(in, 2, d));
    const tpu_dtype ta = args[0]->dtype;
    if (t != TPU_PRED) return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "compare '%s': the result must be pred", in->name);
    TPU_TRY(check_operand(in, args, 0, ta, 1, &s0, d));
    TPU_TRY(check_operand(in, args, 1, ta, 1, &s1, d));
    TPU_TRY(tpu__ew_alloc_out_uninit(in, out, d));
    run_compare(in, ta, out->data, args[0]->data, s0, args[1]->data, s1, tpu_tensor_numel(out));
    return TPU_OK;
  }
  if (op == TPU_OP_SELECT) {
    TPU_TRY(check_arity(in, 3, d));
    TPU_TRY(check_operand(in, args, 0, TPU_PRED, 1, &s0, d));
    TPU_TRY(check_operand(in, args, 1, t, 0, &s1, d));
    TPU_TRY(check_operand(in, args, 2, t, 0, &s2, d));
    TPU_TRY(tpu__ew_alloc_out_uninit(in, out, d));
    run_select(tpu_dtype_size(t), out->data, args[0]->data, s0, args[1]->data, s1, args[2]->data, s2,
               tpu_tensor_numel(out));
    return TPU_OK;
  }
  if (op == TPU_OP_CLAMP) {
    TPU_TRY(check_arity(in, 3, d));
    TPU_TRY(check_operand(in, args, 0, t, 1, &s0, d));
    TPU_TRY(check_operand(in, args, 1, t, 0, &s1, d));
    TPU_TRY(check_operand(in, args, 2, t, 1, &s2, d));
    if (!binary_applies(TPU_OP_MAXIMUM, t) || t == TPU_PRED) return not_for_type(in, t, d);
    TPU_TRY(tpu__ew_alloc_out_uninit(in, out, d));
    run_clamp(t, out->data, args[0]->data, s0, args[1]->data, args[2]->data, s2, tpu_tensor_numel(out));
    return TPU_OK;
  }
  switch (tpu_op_class_of(op)) {
    case TPU_CLS_BINARY:
      TPU_TRY(check_arity(in, 2, d));
      TPU_TRY(check_operand(in, args, 0, t, 1, &s0, d));
      TPU_TRY(check_operand(in, args, 1, t, 1, &s1, d));
      if (!binary_applies(op, t)) return not_for_type(in, t, d);
      TPU_TRY(tpu__ew_alloc_out_uninit(in, out, d));
      run_binary(op, t, out->data, args[0]->data, s0, args[1]->data, s1, tpu_tensor_numel(out));
      return TPU_OK;
    case TPU_CLS_UNARY:
      TPU_TRY(check_arity(in, 1, d));
      TPU_TRY(check_operand(in, args, 0, t, 0, &s0, d));
      if (!unary_applies(op, t)) return not_for_type(in, t, d);
      TPU_TRY(tpu__ew_alloc_out_uninit(in, out, d));
      run_unary(op, t, out->data, args[0]->data, tpu_tensor_numel(out));
      return TPU_OK;
    default: break;
  }
  return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "'%s' is not an elementwise op", tpu_op_name(op));
}

/* ---- Scalar reducer helpers ---- */

tpu_opcode tpu__ref_simple_reducer(const tpu_comp *c) {
  if (!c || c->nparams != 2 || !c->root) return TPU_OP_COUNT;
  const tpu_instr *r = c->root;
  switch (r->op) {
    case TPU_OP_ADD: case TPU_OP_MULTIPLY: case TPU_OP_MAXIMUM: case TPU_OP_MINIMUM:
    case TPU_OP_AND: case TPU_OP_OR: case TPU_OP_XOR: break;
    default: return TPU_OP_COUNT;
  }
  /* Operand order matters for which NaN propagates, so only (p0, p1) qualifies. */
  if (r->noperands != 2 || r->operands[0] != c->params[0] || r->operands[1] != c->params[1]) return TPU_OP_COUNT;
  const tpu_dtype t = r->shape.dtype;
  if (!tpu_dtype_is_array(t) || r->shape.rank != 0) return TPU_OP_COUNT;
  for (int i = 0; i < 2; i++)
    if (c->params[i]->shape.dtype != t || c->params[i]->shape.rank != 0) return TPU_OP_COUNT;
  if (!binary_applies(r->op, t)) return TPU_OP_COUNT;
  return r->op;
}

void tpu__ref_apply_binary(tpu_opcode op, tpu_dtype t, void *a, const void *b) {
  if (!binary_applies(op, t)) return;
  run_binary(op, t, a, a, 1, b, 1, 1);
}

void tpu__ref_apply_binary_n(tpu_opcode op, tpu_dtype t, void *a, const void *b, int64_t sb, int64_t n) {
  if (!binary_applies(op, t)) return;
  run_binary(op, t, a, a, 1, b, sb, n);
}

/* ---- Block kernels for fused evaluation (ref/fused.c) ---- */

int tpu__ew_f32_binary(tpu_opcode op, float *a, float *b, int n) { return fbin_f32(op, a, b, n); }
/* The unary ops that are plain IEEE operations get an AVX2 clone (sqrt and division are
 * correctly rounded at any width); the rest are fun_f32 (libm calls). */
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
/* sqrt (rsqrt: 1/sqrt) of n flushed values, flushed: 8 at a time. vsqrtps and vdivps are
 * correctly rounded and give the default NaN for a negative input, as sqrtss does. */
__attribute__((target("avx2"))) static void sqrt_avx2(float *a, int n, int recip) {
  const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 sgnm = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
  const __m256 tiny = _mm256_set1_ps(FLT_MIN), one = _mm256_set1_ps(1.0f);
#define FL8(v) _mm256_blendv_ps((v), _mm256_and_ps((v), sgnm), _mm256_cmp_ps(_mm256_and_ps((v), absm), tiny, _CMP_LT_OQ))
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(a + i);
    x = FL8(x);
    __m256 r = _mm256_sqrt_ps(x);
    if (recip) r = _mm256_div_ps(one, r);
    _mm256_storeu_ps(a + i, FL8(r));
  }
#undef FL8
  for (; i < n; i++) {
    float x = tpu__ew_flush32(a[i]), r = sqrtf(x);
    a[i] = tpu__ew_flush32(recip ? 1.0f / r : r);
  }
}
/* Asked once: tpu_cpu_has reads the C library's detection (no cpuid at start-up, which the
 * ifunc resolvers of target_clones did through libgcc's probe at every process start). */
static int have_avx2(void) {
  static int have = -1;
  int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
  if (h < 0) __atomic_store_n(&have, h = tpu_cpu_has(TPU_CPU_AVX2), __ATOMIC_RELAXED);
  return h;
}
#else
static void sqrt_avx2(float *a, int n, int recip) { (void)a, (void)n, (void)recip; }
static int have_avx2(void) { return 0; }
#endif

/* The body of tpu__ew_f32_unary, built twice (EW_TWICE): for AVX2 and for any x86-64. */
static inline __attribute__((always_inline)) int ew_f32_unary(tpu_opcode op, float *a, int n) {
  if ((op == TPU_OP_SQRT || op == TPU_OP_RSQRT) && have_avx2()) {
    sqrt_avx2(a, n, op == TPU_OP_RSQRT);
    return 1;
  }
#define FL(x) (fabsf(x) < FLT_MIN ? copysignf(0.0f, (x)) : (x))
  switch (op) { /* as fun_f32: negate and abs move bits; others flush, apply, flush */
    case TPU_OP_NEGATE: for (int i = 0; i < n; i++) a[i] = -a[i]; return 1;
    case TPU_OP_ABS: for (int i = 0; i < n; i++) a[i] = fabsf(a[i]); return 1;
    case TPU_OP_SQRT:
      for (int i = 0; i < n; i++) {
        float x = FL(a[i]), r = sqrtf(x);
        a[i] = FL(r);
      }
      return 1;
    case TPU_OP_RSQRT:
      for (int i = 0; i < n; i++) {
        float x = FL(a[i]), r = 1.0f / sqrtf(x);
        a[i] = FL(r);
      }
      return 1;
    default: return fun_f32(op, a, n);
  }
#undef FL
}

/* A body built for AVX2 and for any x86-64, the one the CPU runs chosen at the call (as GCC's
 * target_clones did, without its ifunc resolver: that ran libgcc's cpuid probe at every
 * process start, a tenth of an empty `tpusim` process in a virtual machine, src/base/cpu.h).
 * The same IEEE operations either way: AVX2 without FMA only widens them. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define EW_TWICE(RET, RETURN, NAME, BODY, PARAMS, ARGS)                                                \
  __attribute__((target("avx2"))) static RET NAME##_avx2 PARAMS { RETURN BODY ARGS; }                   \
  static RET NAME##_any PARAMS { RETURN BODY ARGS; }                                                    \
  RET NAME PARAMS {                                                                                     \
    if (have_avx2())                                                                                    \
      RETURN NAME##_avx2 ARGS;                                                                          \
    else                                                                                                \
      RETURN NAME##_any ARGS;                                                                           \
  }
#else
#define EW_TWICE(RET, RETURN, NAME, BODY, PARAMS, ARGS) \
  RET NAME PARAMS { RETURN BODY ARGS; }
#endif
EW_TWICE(int, return, tpu__ew_f32_unary, ew_f32_unary, (tpu_opcode op, float *a, int n), (op, a, n))

void tpu__ew_f32_fold(tpu_opcode op, float *acc, const float *x, int64_t n) {
  float a = *acc;
  switch (op) { /* each step is fbin_f32 on one element: flush both, apply, flush */
    case TPU_OP_ADD:
      for (int64_t i = 0; i < n; i++) a = tpu__ew_flush32(tpu__ew_flush32(a) + tpu__ew_flush32(x[i]));
      break;
    case TPU_OP_MULTIPLY:
      for (int64_t i = 0; i < n; i++) a = tpu__ew_flush32(tpu__ew_flush32(a) * tpu__ew_flush32(x[i]));
      break;
    case TPU_OP_MAXIMUM:
      for (int64_t i = 0; i < n; i++) a = tpu__ew_flush32(fmax_f32(tpu__ew_flush32(a), tpu__ew_flush32(x[i])));
      break;
    case TPU_OP_MINIMUM:
      for (int64_t i = 0; i < n; i++) a = tpu__ew_flush32(fmin_f32(tpu__ew_flush32(a), tpu__ew_flush32(x[i])));
      break;
    default:
      for (int64_t i = 0; i < n; i++) {
        float b = x[i];
        fbin_f32(op, &a, &b, 1);
      }
      break;
  }
  *acc = a;
}

/* dst[i] = a[i*sa] OP b[i*sb] (strides 1, or 0 for a scalar) with fbin_f32's arithmetic
 * (inputs flushed, result flushed) in one pass; dst may alias a or b. fa = 0 (fb = 0) says a
 * dense a (b) holds flushed values already. Built for AVX2 too where the CPU has it: the same IEEE
 * operations, only wider (no FMA: nothing here is a multiply-add). */
/* One loop per operand shape (both dense, a scalar on either side) and per input that needs
 * its flush (flushing an already flushed value changes nothing), so each vectorizes. */
#define EW_FL(x) tpu__ew_flush32(x)
#define EW_AS(x) (x)
#define EW_DD(EXPR, FA, FB)                                                                             \
  for (int i = 0; i < n; i++) {                                                                         \
    float x = FA(a[i]), y = FB(b[i]);                                                                   \
    dst[i] = tpu__ew_flush32(EXPR);                                                                     \
  }
#define EW_DS(EXPR, FA)                                                                                 \
  for (int i = 0; i < n; i++) {                                                                         \
    float x = FA(a[i]);                                                                                 \
    dst[i] = tpu__ew_flush32(EXPR);                                                                     \
  }
#define EW_SD(EXPR, FB)                                                                                 \
  for (int i = 0; i < n; i++) {                                                                         \
    float y = FB(b[i]);                                                                                 \
    dst[i] = tpu__ew_flush32(EXPR);                                                                     \
  }
#define EW_LOOP(EXPR)                                                                                   \
  if (sa && sb) {                                                                                       \
    if (fa && fb) { EW_DD(EXPR, EW_FL, EW_FL) }                                                         \
    else if (fa) { EW_DD(EXPR, EW_FL, EW_AS) }                                                          \
    else if (fb) { EW_DD(EXPR, EW_AS, EW_FL) }                                                          \
    else { EW_DD(EXPR, EW_AS, EW_AS) }                                                                  \
  } else if (sa) {                                                                                      \
    const float y = tpu__ew_flush32(b[0]);                                                              \
    if (fa) { EW_DS(EXPR, EW_FL) }                                                                      \
    else { EW_DS(EXPR, EW_AS) }                                                                         \
  } else if (sb) {                                                                                      \
    const float x = tpu__ew_flush32(a[0]);                                                              \
    if (fb) { EW_SD(EXPR, EW_FL) }                                                                      \
    else { EW_SD(EXPR, EW_AS) }                                                                         \
  } else {                                                                                              \
    const float x = tpu__ew_flush32(a[0]), y = tpu__ew_flush32(b[0]), r = tpu__ew_flush32(EXPR);        \
    for (int i = 0; i < n; i++) dst[i] = r;                                                             \
  }                                                                                                     \
  return
static inline __attribute__((always_inline)) void ew_f32_binary_to(tpu_opcode op, float *dst, const float *a, int sa,
                                                                    int fa, const float *b, int sb, int fb, int n) {
  switch (op) {
    case TPU_OP_ADD: EW_LOOP(x + y);
    case TPU_OP_SUBTRACT: EW_LOOP(x - y);
    case TPU_OP_MULTIPLY: EW_LOOP(x * y);
    case TPU_OP_DIVIDE: EW_LOOP(x / y);
    case TPU_OP_MAXIMUM: EW_LOOP(fmax_f32(x, y));
    case TPU_OP_MINIMUM: EW_LOOP(fmin_f32(x, y));
    default: {
      float ta[TPU_EW_BLOCK], tb[TPU_EW_BLOCK];
      tpu__ew_load_f32(a, TPU_F32, 0, sa, n, ta);
      tpu__ew_load_f32(b, TPU_F32, 0, sb, n, tb);
      fbin_f32(op, ta, tb, n);
      memcpy(dst, ta, sizeof(float) * (size_t)n);
      return;
    }
  }
}
EW_TWICE(void, , tpu__ew_f32_binary_to, ew_f32_binary_to,
         (tpu_opcode op, float *dst, const float *a, int sa, int fa, const float *b, int sb, int fb, int n),
         (op, dst, a, sa, fa, b, sb, fb, n))
#undef EW_LOOP
#undef EW_DD
#undef EW_DS
#undef EW_SD
#undef EW_FL
#undef EW_AS

#define CMP_LOOP(OP)                                                                                    \
  for (int i = 0; i < n; i++) o[i] = (uint8_t)(tpu__ew_flush32(a[i]) OP tpu__ew_flush32(b[i]));        \
  return
void tpu__ew_f32_compare(const tpu_instr *in, uint8_t *o, const float *a, const float *b, int n) {
  if (in->cmp_type != TPU_CMPT_TOTALORDER)
    switch (in->direction) { /* run_compare's FLOAT results (NaN: all false but NE) in one pass */
      case TPU_CMP_EQ: CMP_LOOP(==);
      case TPU_CMP_NE: CMP_LOOP(!=);
      case TPU_CMP_LT: CMP_LOOP(<);
      case TPU_CMP_LE: CMP_LOOP(<=);
      case TPU_CMP_GT: CMP_LOOP(>);
      case TPU_CMP_GE: CMP_LOOP(>=);
    }
  run_compare(in, TPU_F32, o, a, 1, b, 1, n);
}
#undef CMP_LOOP
