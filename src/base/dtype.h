/* Element types: one table gives names, sizes and NumPy descriptors. */
#ifndef TPU_BASE_DTYPE_H
#define TPU_BASE_DTYPE_H

#include <stddef.h>

/* X(ENUM, hlo name, byte size (in tpusim's memory: s4/u4 hold one element per byte), npy descr, kind) — kind: 'b' pred, 's' signed int,
 * 'u' unsigned int, 'f' float, 'c' complex (two floats: real then imaginary part),
 * 't' tuple, 'k' token. NumPy has no 4-bit integer: s4/u4 are written as int8/uint8 .npy
 * (one value per byte) and read from them when every value is in range. ORDER DTYPE. */
#define TPU_DTYPE_LIST(X)            \
  X(TPU_PRED, "pred", 1, "|b1", 'b') \
  X(TPU_S8, "s8", 1, "|i1", 's')     \
  X(TPU_S16, "s16", 2, "<i2", 's')   \
  X(TPU_S32, "s32", 4, "<i4", 's')   \
  X(TPU_S64, "s64", 8, "<i8", 's')   \
  X(TPU_U8, "u8", 1, "|u1", 'u')     \
  X(TPU_U16, "u16", 2, "<u2", 'u')   \
  X(TPU_U32, "u32", 4, "<u4", 'u')   \
  X(TPU_U64, "u64", 8, "<u8", 'u')   \
  X(TPU_BF16, "bf16", 2, "", 'f')    \
  X(TPU_F16, "f16", 2, "<f2", 'f')   \
  X(TPU_F32, "f32", 4, "<f4", 'f')   \
  X(TPU_F64, "f64", 8, "<f8", 'f')   \
  X(TPU_C64, "c64", 8, "<c8", 'c')   \
  X(TPU_C128, "c128", 16, "<c16", 'c') \
  X(TPU_F8E5M2, "f8e5m2", 1, "", 'f') \
  X(TPU_F8E4M3FN, "f8e4m3fn", 1, "", 'f') \
  X(TPU_S4, "s4", 1, "|i1", 's')     \
  X(TPU_U4, "u4", 1, "|u1", 'u')     \
  X(TPU_TUPLE, "tuple", 0, "", 't')  \
  X(TPU_TOKEN, "token", 0, "", 'k')

typedef enum {
#define X(e, name, size, descr, kind) e,
  TPU_DTYPE_LIST(X)
#undef X
  TPU_DTYPE_COUNT
} tpu_dtype;

const char *tpu_dtype_name(tpu_dtype t);
size_t tpu_dtype_size(tpu_dtype t);
const char *tpu_dtype_npy(tpu_dtype t);
char tpu_dtype_kind(tpu_dtype t);
/* Parses an HLO type name ("f32"); returns 0 if unknown. */
int tpu_dtype_parse(const char *s, size_t n, tpu_dtype *out);

static inline int tpu_dtype_is_float(tpu_dtype t) { return tpu_dtype_kind(t) == 'f'; }
static inline int tpu_dtype_is_int(tpu_dtype t) {
  char k = tpu_dtype_kind(t);
  return k == 's' || k == 'u';
}
static inline int tpu_dtype_is_signed(tpu_dtype t) { return tpu_dtype_kind(t) == 's'; }
static inline int tpu_dtype_is_complex(tpu_dtype t) { return tpu_dtype_kind(t) == 'c'; }
/* The type of one part of a complex type (c64 -> f32, c128 -> f64); other types unchanged. */
static inline tpu_dtype tpu_dtype_complex_part(tpu_dtype t) {
  return t == TPU_C64 ? TPU_F32 : t == TPU_C128 ? TPU_F64 : t;
}
/* The complex type made of two `t` (f32 -> c64, f64 -> c128); TPU_DTYPE_COUNT if none. */
static inline tpu_dtype tpu_dtype_complex_of(tpu_dtype t) {
  return t == TPU_F32 ? TPU_C64 : t == TPU_F64 ? TPU_C128 : TPU_DTYPE_COUNT;
}
/* The float8 formats (one byte; tpu_f8 in base/bf16.h). */
static inline int tpu_dtype_is_f8(tpu_dtype t) { return t == TPU_F8E5M2 || t == TPU_F8E4M3FN; }
/* The 4-bit integers (s4 -8..7, u4 0..15): one element per byte in tpusim's memory, two per
 * byte on the TPU (XLA's layouts give them element_size_in_bits 4). */
static inline int tpu_dtype_is_int4(tpu_dtype t) { return t == TPU_S4 || t == TPU_U4; }
/* Bits of one element as the hardware stores it (4 for s4/u4; 8 x the byte size otherwise). */
static inline int tpu_dtype_bits(tpu_dtype t) { return tpu_dtype_is_int4(t) ? 4 : (int)tpu_dtype_size(t) * 8; }
static inline int tpu_dtype_is_array(tpu_dtype t) { return t != TPU_TUPLE && t != TPU_TOKEN; }

#endif
