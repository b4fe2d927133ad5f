/* bf16, f16 and the float8 formats as their own types, with round-to-nearest-even
 * conversion from f32/f64. */
#ifndef TPU_BASE_BF16_H
#define TPU_BASE_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Wrapping the bits in a struct keeps them from mixing silently with integers. */
typedef struct { uint16_t bits; } tpu_bf16;
typedef struct { uint16_t bits; } tpu_f16;

static inline uint32_t tpu_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float tpu_f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* f32 -> bf16, round to nearest even; NaN stays NaN (quiet bit set, sign kept). */
static inline tpu_bf16 tpu_bf16_from_f32(float f) {
  uint32_t u = tpu_f32_bits(f);
  tpu_bf16 r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r.bits = (uint16_t)((u >> 16) | 0x0040u);
    return r;
  }
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  r.bits = (uint16_t)(u >> 16);
  return r;
}

/* tpu_bf16_from_f32 over n values, dst[i] from src[i] (the same bits), branch-free so that
 * the compiler vectorizes it: an f32 input file for a bf16 parameter is converted whole. */
void tpu_bf16_from_f32_n(const float *src, tpu_bf16 *dst, size_t n);

static inline float tpu_bf16_to_f32(tpu_bf16 b) { return tpu_f32_from_bits((uint32_t)b.bits << 16); }

/* f64 -> bf16 rounds once, directly (not via f32, which would double-round). */
tpu_bf16 tpu_bf16_from_f64(double d);

/* f32/f64 -> f16, round to nearest even, subnormals and overflow to inf handled. */
tpu_f16 tpu_f16_from_f32(float f);
tpu_f16 tpu_f16_from_f64(double d);
/* f16 -> f32, exact; inline, as the element loads of f16 operands call it per value. */
static inline float tpu_f16_to_f32(tpu_f16 h) {
  uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t frac = h.bits & 0x3ffu;
  if (exp == 0x1f) return tpu_f32_from_bits(sign | 0x7f800000u | (frac << 13));
  if (exp == 0) /* subnormal frac * 2^-24: exact in f32 (frac < 2^10, a power-of-two scale) */
    return tpu_f32_from_bits(sign | tpu_f32_bits((float)frac * 0x1p-24f));
  return tpu_f32_from_bits(sign | ((exp - 15 + 127) << 23) | (frac << 13));
}

/* One float8 value, either format: e4m3fn (sign, 4 exponent bits, bias 7, 3 mantissa bits;
 * no infinity, S.1111.111 is NaN, largest 448) or e5m2 (bias 15, 2 mantissa bits, IEEE-like
 * with infinities). As ml_dtypes and XLA convert: round to nearest even, subnormals kept;
 * a value that rounds beyond the largest finite one is NaN in e4m3fn, inf in e5m2. */
typedef struct { uint8_t bits; } tpu_f8;
tpu_f8 tpu_f8_from_f64(double d, int e4m3fn);
float tpu_f8_to_f32(tpu_f8 v, int e4m3fn);

#endif
