/* bf16, f16 and float8: every bit pattern round-trips; rounding matches an independent oracle. */
#include <math.h>

#include "base/bf16.h"
#include "check.h"

/* Oracle: nearest of the two bf16 neighbours by exact double arithmetic, ties to even. */
static uint16_t oracle_bf16(float f) {
  uint32_t u = tpu_f32_bits(f);
  uint16_t lo = (uint16_t)(u >> 16);
  uint16_t hi = (uint16_t)(lo + 1);
  double x = f;
  double dlo = tpu_f32_from_bits((uint32_t)lo << 16);
  double dhi = (hi & 0x7f80u) == 0x7f80u && (lo & 0x7fffu) == 0x7f7fu
                   ? (signbit(x) ? -1 : 1) * ldexp(1.0, 128) /* next step past max: inf */
                   : (double)tpu_f32_from_bits((uint32_t)hi << 16);
  double elo = fabs(x - dlo), ehi = fabs(dhi - x);
  if (elo < ehi) return lo;
  if (ehi < elo) return hi;
  return (lo & 1) ? hi : lo;
}

/* Oracle for float8 (e4m3fn when e4): the nearest of the 256 codes' values by exact double
 * arithmetic, ties to the even code; past the largest finite value the next step of its
 * exponent (480 for e4m3fn, 65536 for e5m2) stands for overflow: NaN in e4m3fn, inf in
 * e5m2. Returns the code, sign included. */
static uint8_t oracle_f8(double x, int e4) {
  const double over = e4 ? 480.0 : 65536.0;
  uint8_t sign = signbit(x) ? 0x80 : 0;
  double a = fabs(x), best = -1;
  int code = 0;
  if (a >= over) return sign | (e4 ? 0x7f : 0x7c); /* (below it the errors are exact) */
  for (int c = 0; c < 128; c++) {
    tpu_f8 v = {(uint8_t)c};
    double f = tpu_f8_to_f32(v, e4);
    if (isnan(f) || isinf(f)) continue;
    double err = fabs(a - f);
    if (best < 0 || err < best || (err == best && (c & 1) == 0)) best = err, code = c;
  }
  double eo = fabs(over - a);
  if (eo < best || (eo == best && (code & 1))) return sign | (e4 ? 0x7f : 0x7c);
  return (uint8_t)(sign | code);
}

int main(void) {
  /* Every bf16 pattern: widening is exact and narrowing gives the same bits back. */
  for (uint32_t b = 0; b < 65536; b++) {
    tpu_bf16 x = {(uint16_t)b};
    float f = tpu_bf16_to_f32(x);
    tpu_bf16 y = tpu_bf16_from_f32(f);
    if (isnan(f)) {
      CHECK(isnan(tpu_bf16_to_f32(y)));
      CHECK_EQ_INT(y.bits & 0x8000u, b & 0x8000u);
    } else {
      CHECK_EQ_INT(y.bits, b);
      tpu_bf16 z = tpu_bf16_from_f64((double)f);
      CHECK_EQ_INT(z.bits, b);
    }
  }
  /* Rounding from f32: a stride through all 2^32 patterns plus every low-half tie. */
  for (uint64_t u = 0; u < (1ull << 32); u += 4099) {
    float f = tpu_f32_from_bits((uint32_t)u);
    if (isnan(f)) continue;
    CHECK_EQ_INT(tpu_bf16_from_f32(f).bits, oracle_bf16(f));
  }
  for (uint32_t hi = 0; hi < 65536; hi += 7) {
    for (uint32_t low = 0x7ffe; low <= 0x8001; low++) {
      float f = tpu_f32_from_bits((hi << 16) | low);
      if (isnan(f)) continue;
      CHECK_EQ_INT(tpu_bf16_from_f32(f).bits, oracle_bf16(f));
    }
  }
  /* The bulk conversion gives tpu_bf16_from_f32's bits (NaNs included) for every upper half
   * with low halves at and around the ties, zero and the top; odd lengths reach the tail a
   * vector loop leaves. */
  {
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff};
    enum { NL = sizeof lows / sizeof lows[0] };
    static float src[65536 * NL];
    static tpu_bf16 dst[65536 * NL];
    for (uint32_t hi = 0; hi < 65536; hi++)
      for (int k = 0; k < NL; k++) src[hi * NL + k] = tpu_f32_from_bits((hi << 16) | lows[k]);
    long bad = 0;
    for (size_t n = 65536 * NL; n >= 65536 * NL - 9; n -= 3) {
      memset(dst, 0xa5, sizeof dst);
      tpu_bf16_from_f32_n(src, dst, n);
      for (size_t i = 0; i < n; i++) bad += dst[i].bits != tpu_bf16_from_f32(src[i]).bits;
      bad += n < 65536 * NL && dst[n].bits != 0xa5a5; /* nothing past n written */
    }
    CHECK_EQ_INT(bad, 0);
  }
  /* Named cases: ties to even, overflow to inf, NaN quiet, signed zero. */
  CHECK_EQ_INT(tpu_bf16_from_f32(1.0f + 0x1p-8f).bits, 0x3f80);       /* tie -> even (down) */
  CHECK_EQ_INT(tpu_bf16_from_f32(1.0f + 3 * 0x1p-8f).bits, 0x3f82);   /* tie -> even (up) */
  CHECK_EQ_INT(tpu_bf16_from_f32(3.4e38f).bits, 0x7f80);              /* rounds to inf */
  CHECK_EQ_INT(tpu_bf16_from_f32(-0.0f).bits, 0x8000);
  CHECK_EQ_INT(tpu_bf16_from_f32(tpu_f32_from_bits(0x7f800001u)).bits, 0x7fc0);
  /* Double rounding avoided: this f64 is just above a bf16 tie but its f32 is the tie. */
  double d = 1.0 + 0x1p-8 + 0x1p-40;
  CHECK_EQ_INT(tpu_bf16_from_f64(d).bits, 0x3f81);
  CHECK_EQ_INT(tpu_bf16_from_f32((float)d).bits, 0x3f80);

  /* f16: every pattern round-trips through f32. */
  for (uint32_t b = 0; b < 65536; b++) {
    tpu_f16 h = {(uint16_t)b};
    float f = tpu_f16_to_f32(h);
    tpu_f16 g = tpu_f16_from_f32(f);
    if (isnan(f)) {
      CHECK(isnan(tpu_f16_to_f32(g)));
    } else {
      CHECK_EQ_INT(g.bits, b);
    }
  }
#ifdef __FLT16_MAX__
  /* f32 -> f16 rounding against the compiler's _Float16. */
  for (uint64_t u = 0; u < (1ull << 32); u += 9973) {
    float f = tpu_f32_from_bits((uint32_t)u);
    if (isnan(f)) continue;
    _Float16 r = (_Float16)f;
    uint16_t rb;
    memcpy(&rb, &r, 2);
    CHECK_EQ_INT(tpu_f16_from_f32(f).bits, rb);
  }
#endif
  CHECK_EQ_INT(tpu_f16_from_f32(65520.0f).bits, 0x7c00); /* max + half ulp -> inf */
  CHECK_EQ_INT(tpu_f16_from_f32(0x1p-25f).bits, 0x0000); /* tie -> even zero */
  CHECK_EQ_INT(tpu_f16_from_f32(0x1.8p-25f).bits, 0x0001);
  /* f16 on the bits (tpu_f16_from_f64 without libm): around every pair of neighbouring
   * finite f16 values, the midpoint (exact in double and in f32) and the doubles and floats
   * just either side of it go to the nearer one, ties to the even code; past 65504 the next
   * step (65536) stands for inf. Both signs. */
  for (uint32_t b = 0; b < 0x7c00u; b++) {
    double lo = tpu_f16_to_f32((tpu_f16){(uint16_t)b});
    double hi = b == 0x7bffu ? 65536.0 : tpu_f16_to_f32((tpu_f16){(uint16_t)(b + 1)});
    double mid = (lo + hi) / 2;
    uint16_t even = (b & 1) ? (uint16_t)(b + 1) : (uint16_t)b;
    for (int neg = 0; neg <= 1; neg++) {
      double sg = neg ? -1.0 : 1.0;
      uint16_t sb = neg ? 0x8000u : 0;
      CHECK_EQ_INT(tpu_f16_from_f64(sg * lo).bits, sb | b);
      CHECK_EQ_INT(tpu_f16_from_f64(sg * mid).bits, sb | even);
      CHECK_EQ_INT(tpu_f16_from_f64(sg * nextafter(mid, 0)).bits, sb | b);
      CHECK_EQ_INT(tpu_f16_from_f64(sg * nextafter(mid, INFINITY)).bits, sb | (b + 1));
      CHECK_EQ_INT(tpu_f16_from_f32((float)(sg * mid)).bits, sb | even);
      CHECK_EQ_INT(tpu_f16_from_f32((float)(sg * nextafterf((float)mid, 0))).bits, sb | b);
      CHECK_EQ_INT(tpu_f16_from_f32((float)(sg * nextafterf((float)mid, INFINITY))).bits, sb | (b + 1));
    }
  }
  /* one rounding from f64: just above the tie 1 + 2^-11 is 1 + 2^-10, its f32 is the tie */
  CHECK_EQ_INT(tpu_f16_from_f64(1.0 + 0x1p-11 + 0x1p-40).bits, 0x3c01);
  CHECK_EQ_INT(tpu_f16_from_f32((float)(1.0 + 0x1p-11 + 0x1p-40)).bits, 0x3c00);
  CHECK_EQ_INT(tpu_f16_from_f64(1e300).bits, 0x7c00);
  CHECK_EQ_INT(tpu_f16_from_f64(-INFINITY).bits, 0xfc00);
  CHECK_EQ_INT(tpu_f16_from_f64(5e-324).bits, 0x0000);  /* a double subnormal: zero */
  CHECK_EQ_INT(tpu_f16_from_f64(-5e-324).bits, 0x8000); /* sign kept */
  CHECK_EQ_INT(tpu_f16_from_f64(-0.0).bits, 0x8000);
  CHECK_EQ_INT(tpu_f16_from_f64(NAN).bits, 0x7e00);
  CHECK_EQ_INT(tpu_f16_from_f64(-NAN).bits, 0xfe00);
  CHECK_EQ_INT(tpu_f16_from_f32(tpu_f32_from_bits(0xff802000u)).bits, 0xfe01); /* payload kept, quieted */
  CHECK_EQ_INT(tpu_f32_bits(tpu_f16_to_f32((tpu_f16){0x7c01u})), 0x7f802000u);
  CHECK_EQ_INT(tpu_f32_bits(tpu_f16_to_f32((tpu_f16){0x83ffu})), tpu_f32_bits(-1023 * 0x1p-24f));
  CHECK_EQ_INT(tpu_f32_bits(tpu_f16_to_f32((tpu_f16){0x0001u})), tpu_f32_bits(0x1p-24f));
  /* float8: the codes' values, every pattern back to itself, rounding against the oracle */
  tpu_f8 c7e = {0x7e}, c01 = {0x01}, c08 = {0x08}, c7b = {0x7b}, c7c = {0x7c};
  CHECK(tpu_f8_to_f32(c7e, 1) == 448.0f && tpu_f8_to_f32(c01, 1) == 0x1p-9f && tpu_f8_to_f32(c08, 1) == 0x1p-6f);
  CHECK(tpu_f8_to_f32(c7b, 0) == 57344.0f && isinf(tpu_f8_to_f32(c7c, 0)) && tpu_f8_to_f32(c01, 0) == 0x1p-16f);
  for (int e4 = 0; e4 <= 1; e4++) {
    for (int b = 0; b < 256; b++) {
      tpu_f8 x = {(uint8_t)b};
      float f = tpu_f8_to_f32(x, e4);
      tpu_f8 y = tpu_f8_from_f64(f, e4);
      if (isnan(f)) CHECK(isnan(tpu_f8_to_f32(y, e4)));
      else CHECK_EQ_INT(y.bits, b);
    }
    for (uint64_t u = 0; u < (1ull << 32); u += 65521) {
      float f = tpu_f32_from_bits((uint32_t)u);
      if (isnan(f)) continue;
      CHECK_EQ_INT(tpu_f8_from_f64(f, e4).bits, oracle_f8(f, e4));
    }
  }
  CHECK_EQ_INT(tpu_f8_from_f64(464.0, 1).bits, 0x7e); /* the tie below the NaN code: 448 */
  CHECK_EQ_INT(tpu_f8_from_f64(465.0, 1).bits, 0x7f); /* rounds past 448: NaN, no inf */
  CHECK_EQ_INT(tpu_f8_from_f64(-61440.0, 0).bits, 0xfc); /* e5m2 max + half ulp: -inf */
  CHECK_EQ_INT(tpu_f8_from_f64(0x1p-10, 1).bits, 0x00);  /* tie -> even zero */
  CHECK_DONE();
}
