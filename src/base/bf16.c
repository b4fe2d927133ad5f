/* Conversions to and from the 16-bit float formats. */
#include "base/bf16.h"

#include <math.h>

/* Rounds a finite double to a binary format with `mant` explicit mantissa bits, exponent
 * range [emin, emax] (unbiased, normal numbers), returning the rounded value as a double;
 * overflow gives +-inf. Round to nearest, ties to even; subnormals keep the fixed spacing
 * 2^(emin - mant). */
static double round_to_format(double d, int mant, int emin, int emax) {
  if (d == 0 || isnan(d) || isinf(d)) return d;
  double a = fabs(d);
  int e;
  frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) -> unbiased exponent e-1 */
  int ue = e - 1;
  if (ue < emin) ue = emin;
  double quantum = ldexp(1.0, ue - mant);
  double q = a / quantum;          /* exact: scaling by a power of two */
  double r = nearbyint(q);         /* default rounding mode: nearest even */
  double res = r * quantum;
  double maxv = ldexp(2.0 - ldexp(1.0, -mant), emax);
  if (res > maxv) res = INFINITY;
  return d < 0 ? -res : res;
}

void tpu_bf16_from_f32_n(const float *src, tpu_bf16 *dst, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u = tpu_f32_bits(src[i]);
    uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x0040u;
    dst[i].bits = (uint16_t)(nan ? quiet : rounded);
  }
}

tpu_bf16 tpu_bf16_from_f64(double d) {
  if (isnan(d)) {
    tpu_bf16 r = {(uint16_t)(signbit(d) ? 0xffc0u : 0x7fc0u)};
    return r;
  }
  double v = round_to_format(d, 7, -126, 127);
  return tpu_bf16_from_f32((float)v); /* exact now */
}

/* f64 -> f16 on the bits, no libm: one rounding to nearest, ties to even, from the double's
 * 53-bit significand. A value at or past 65520 rounds to inf (the carry out of the largest
 * exponent's mantissa lands on the inf code, 0x7c00); below 2^-14 the spacing stays 2^-24
 * (subnormals), and a double subnormal, far below 2^-25, goes to zero. Sign kept on zero. */
tpu_f16 tpu_f16_from_f64(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  uint16_t sign = (uint16_t)((u >> 48) & 0x8000u);
  uint64_t a = u & 0x7fffffffffffffffull;
  tpu_f16 h;
  if (a > 0x7ff0000000000000ull) { /* NaN: the quiet code, sign kept */
    h.bits = sign | 0x7e00u;
    return h;
  }
  int ue = (int)(a >> 52) - 1023;
  if (ue >= 16) { /* 65536 and up, inf included */
    h.bits = sign | 0x7c00u;
    return h;
  }
  uint64_t m = (a & 0x000fffffffffffffull) | (a >> 52 ? 0x0010000000000000ull : 0);
  int shift = 42, field = ue + 15; /* 53 -> 11 significant bits; biased f16 exponent */
  if (ue < -14) { /* subnormal: a = k * 2^-24, k = m >> (42 + (-14 - ue)) rounded */
    shift = 42 + (-14 - ue);
    field = 0;
    if (shift > 54) { /* below 2^-25 (a quarter of the spacing or less): zero */
      h.bits = sign;
      return h;
    }
  }
  uint64_t k = m >> shift, rest = m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
  /* normal: the implicit bit of k (1024) is dropped by subtracting it from the field */
  uint32_t bits = field ? ((uint32_t)field << 10) + (uint32_t)(k - 1024) : (uint32_t)k;
  bits += rest > half || (rest == half && (k & 1)); /* a carry moves into the exponent */
  h.bits = sign | (uint16_t)bits;
  return h;
}

tpu_f16 tpu_f16_from_f32(float f) {
  if (isnan(f)) {
    uint32_t u = tpu_f32_bits(f);
    tpu_f16 r = {(uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu))};
    return r;
  }
  return tpu_f16_from_f64((double)f); /* f32 -> f64 exact, so one rounding */
}

tpu_f8 tpu_f8_from_f64(double d, int e4m3fn) {
  const int mant = e4m3fn ? 3 : 2, bias = e4m3fn ? 7 : 15;
  uint8_t sign = signbit(d) ? 0x80u : 0;
  tpu_f8 r;
  if (isnan(d)) {
    r.bits = sign | (e4m3fn ? 0x7fu : 0x7eu);
    return r;
  }
  /* e4m3fn's exponent 15 holds normal numbers (only its top code is NaN): round as for a
   * format whose largest exponent is 8, then refuse what passes 448 */
  double v = round_to_format(d, mant, 1 - bias, e4m3fn ? 8 : 15);
  double a = fabs(v);
  if (isinf(a) || (e4m3fn && a > 448.0)) {
    r.bits = sign | (e4m3fn ? 0x7fu : 0x7cu);
    return r;
  }
  if (a == 0) {
    r.bits = sign;
    return r;
  }
  int e;
  double m = frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  int ue = e - 1;
  if (ue < 1 - bias) { /* subnormal: a = k * 2^(1 - bias - mant) */
    r.bits = sign | (uint8_t)ldexp(a, bias - 1 + mant);
    return r;
  }
  uint8_t frac = (uint8_t)((ldexp(m, 1) - 1.0) * (double)(1 << mant));
  r.bits = sign | (uint8_t)((ue + bias) << mant) | frac;
  return r;
}

float tpu_f8_to_f32(tpu_f8 v, int e4m3fn) {
  const int mant = e4m3fn ? 3 : 2, bias = e4m3fn ? 7 : 15;
  int e = (v.bits & 0x7f) >> mant, m = v.bits & ((1 << mant) - 1);
  float sign = (v.bits & 0x80) ? -1.0f : 1.0f;
  if (e4m3fn && (v.bits & 0x7f) == 0x7f) return sign * NAN;
  if (!e4m3fn && e == 31) return m ? sign * NAN : sign * INFINITY;
  if (e == 0) return sign * ldexpf((float)m, 1 - bias - mant);
  return sign * ldexpf((float)((1 << mant) + m), e - bias - mant);
}
