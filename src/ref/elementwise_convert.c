/* Reference kernels: convert, bitcast-convert, reduce-precision and is-finite. */
#include "base/bf16.h"
#include "ref/elementwise_int.h"

typedef union {
  float f[TPU_EW_BLOCK];
  double d[TPU_EW_BLOCK];
  int64_t i[TPU_EW_BLOCK];
} cv_buf;

/* Float -> integer as XLA converts: truncate toward zero, saturate at the type's range,
 * NaN -> 0. Returns the canonical int64 (u64 as its bits). */
static int64_t sat_to_int(double v, tpu_dtype t) {
  if (v != v) return 0;
  const int w = tpu_dtype_bits(t); /* 4 for s4/u4: they saturate at -8..7 and 0..15 */
  if (tpu_dtype_is_signed(t)) {
    const double lim = ldexp(1.0, w - 1);
    if (v >= lim) return tpu__ew_s64((((uint64_t)1) << (w - 1)) - 1);
    if (v <= -lim) return tpu__ew_s64(~((((uint64_t)1) << (w - 1)) - 1));
    return (int64_t)v;
  }
  const double lim = ldexp(1.0, w);
  if (!(v > -1.0)) return 0;
  if (v >= lim) return tpu__ew_s64(w >= 64 ? ~(uint64_t)0 : (((uint64_t)1) << w) - 1);
  return tpu__ew_s64((uint64_t)v);
}

/* Integer (canonical int64 of type `from`) -> double / float, one rounding to nearest even. */
static double int_to_f64(int64_t v, tpu_dtype from) {
  return tpu_dtype_is_signed(from) || from == TPU_PRED ? (double)v : (double)tpu__ew_u64(v);
}
static float int_to_f32(int64_t v, tpu_dtype from) {
  return tpu_dtype_is_signed(from) || from == TPU_PRED ? (float)v : (float)tpu__ew_u64(v);
}

/* Converts m elements starting at s. Float <-> float goes through f32 as XLA on CPU does
 * (so f64 -> bf16/f16 and integer -> bf16 round twice); the f32 <-> f64 step flushes
 * denormals; float -> pred is x != 0 with denormals read as zero. */
static void convert_block(tpu_dtype from, tpu_dtype to, const void *src, void *dst, int64_t s, int m, cv_buf *x,
                          cv_buf *y) {
  const tpu_ew_class cf = tpu__ew_class(from), ct = tpu__ew_class(to);
  switch (cf) {
    case TPU_EW_INT:
      tpu__ew_load_int(src, from, s, 1, m, x->i);
      if (ct == TPU_EW_INT) {
        tpu__ew_store_int(dst, to, s, m, x->i);
      } else if (ct == TPU_EW_F64) {
        for (int i = 0; i < m; i++) y->d[i] = int_to_f64(x->i[i], from);
        tpu__ew_store_f64(dst, s, m, y->d);
      } else {
        for (int i = 0; i < m; i++) y->f[i] = int_to_f32(x->i[i], from);
        tpu__ew_store_f32(dst, to, s, m, y->f);
      }
      break;
    case TPU_EW_F32:
      tpu__ew_load_f32(src, from, s, 1, m, x->f);
      if (to == TPU_PRED) {
        for (int i = 0; i < m; i++) y->i[i] = tpu__ew_flush32(x->f[i]) != 0;
        tpu__ew_store_int(dst, to, s, m, y->i);
      } else if (ct == TPU_EW_INT) {
        for (int i = 0; i < m; i++) y->i[i] = sat_to_int(x->f[i], to);
        tpu__ew_store_int(dst, to, s, m, y->i);
      } else if (ct == TPU_EW_F64) {
        for (int i = 0; i < m; i++) y->d[i] = tpu__ew_flush32(x->f[i]);
        tpu__ew_store_f64(dst, s, m, y->d);
      } else {
        tpu__ew_store_f32(dst, to, s, m, x->f);
      }
      break;
    case TPU_EW_F64:
      tpu__ew_load_f64(src, s, 1, m, x->d);
      if (to == TPU_PRED) {
        for (int i = 0; i < m; i++) y->i[i] = tpu__ew_flush64(x->d[i]) != 0;
        tpu__ew_store_int(dst, to, s, m, y->i);
      } else if (ct == TPU_EW_INT) {
        for (int i = 0; i < m; i++) y->i[i] = sat_to_int(x->d[i], to);
        tpu__ew_store_int(dst, to, s, m, y->i);
      } else if (ct == TPU_EW_F64) {
        tpu__ew_store_f64(dst, s, m, x->d);
      } else {
        for (int i = 0; i < m; i++) y->f[i] = tpu__ew_flush32((float)tpu__ew_flush64(x->d[i]));
        tpu__ew_store_f32(dst, to, s, m, y->f);
      }
      break;
  }
}

/* reduce-precision on the bits of an IEEE value with `ebits` exponent and `mbits`
 * mantissa bits: round the mantissa to `mant` bits (nearest even; a carry may bump the
 * exponent), then values above the reduced range become inf and values at or below its
 * smallest normal exponent become signed zero (no denormals); NaN stays as it was. */
static uint64_t reduce_bits(uint64_t x, int ebits, int mbits, int exp_bits, int mant_bits) {
  const uint64_t orig = x;
  const int nbits = 1 + ebits + mbits;
  const uint64_t emask = ((((uint64_t)1) << ebits) - 1) << mbits;
  const uint64_t mmask = (((uint64_t)1) << mbits) - 1;
  if (mant_bits < mbits) {
    const uint64_t last = ((uint64_t)1) << (mbits - mant_bits);
    const uint64_t bias = (last >> 1) - 1 + ((x & last) ? 1 : 0);
    x = (x + bias) & ~(last - 1);
  }
  if (exp_bits < ebits) {
    const uint64_t sign = x & (((uint64_t)1) << (nbits - 1));
    const uint64_t src_bias = (((uint64_t)1) << (ebits - 1)) - 1;
    const uint64_t red_bias = (((uint64_t)1) << (exp_bits - 1)) - 1;
    const uint64_t e = x & emask;
    if (e > ((src_bias + red_bias) << mbits)) x = sign | emask;
    else if (e <= ((src_bias - red_bias) << mbits)) x = sign;
  }
  if ((orig & emask) == emask && (orig & mmask) != 0) return orig; /* NaN */
  return x;
}

static tpu_status not_float(const tpu_instr *in, tpu_dtype t, tpu_diag *d) {
  return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "%s '%s': needs a float operand, not %s", tpu_op_name(in->op), in->name,
                  tpu_dtype_name(t));
}

tpu_status tpu__ref_ew_convert(const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out, tpu_diag *d) {
  tpu_tensor_zero(out);
  if (in->noperands != 1 || !tpu_dtype_is_array(args[0]->dtype) || !tpu_dtype_is_array(in->shape.dtype))
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "%s '%s': takes one array operand", tpu_op_name(in->op), in->name);
  const tpu_tensor *a = args[0];
  const tpu_dtype from = a->dtype, to = in->shape.dtype;
  const int64_t n = tpu_tensor_numel(a);
  if (in->op == TPU_OP_BITCAST_CONVERT) {
    /* Same bytes, reinterpreted: for different widths the last dim splits or joins
     * (little-endian element order, as XLA defines it on every platform). */
    if (from == TPU_PRED || to == TPU_PRED)
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "bitcast-convert '%s': pred has no bit pattern to reinterpret",
                      in->name);
    TPU_TRY(tpu__ew_alloc_out(in, out, d));
    if (out->nbytes != a->nbytes) {
      tpu_tensor_free(out);
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "bitcast-convert '%s': %zu bytes in, %zu bytes out", in->name,
                      a->nbytes, (size_t)tpu_dtype_size(to) * (size_t)tpu_shape_numel(&in->shape));
    }
    if (a->nbytes) memcpy(out->data, a->data, a->nbytes);
    return TPU_OK;
  }
  int same = a->rank == in->shape.rank;
  for (int i = 0; same && i < a->rank; i++) same = a->dims[i] == in->shape.dims[i];
  if (!same)
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "%s '%s': the operand does not have the result's dimensions",
                    tpu_op_name(in->op), in->name);
  cv_buf x, y;
  if (in->op == TPU_OP_CONVERT && (tpu_dtype_is_complex(from) || tpu_dtype_is_complex(to))) {
    /* To complex: each part converts as a real value does (a real operand gets imaginary
     * part 0); complex to real is not an XLA conversion (the verifier refuses it). */
    if (!tpu_dtype_is_complex(to))
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "convert '%s': complex %s to real %s is not defined", in->name,
                      tpu_dtype_name(from), tpu_dtype_name(to));
    const int parts = tpu_dtype_is_complex(from) ? 2 : 1;
    const tpu_dtype pf = tpu_dtype_complex_part(from), pt = tpu_dtype_complex_part(to);
    const size_t es = tpu_dtype_size(pt);
    const int64_t total = n * parts; /* parts of the source as a flat array of pf */
    tpu_tensor tmp;
    int64_t tdims[1] = {total};
    TPU_TRY(tpu_tensor_alloc(&tmp, pt, 1, tdims, d));
    tpu_status st = tpu__ew_alloc_out(in, out, d);
    if (st != TPU_OK) {
      tpu_tensor_free(&tmp);
      return st;
    }
    for (int64_t s = 0; s < total; s += TPU_EW_BLOCK) {
      int m = (int)(total - s < TPU_EW_BLOCK ? total - s : TPU_EW_BLOCK);
      convert_block(pf, pt, a->data, tmp.data, s, m, &x, &y);
    }
    if (parts == 2) {
      if (total) memcpy(out->data, tmp.data, es * (size_t)total);
    } else {
      for (int64_t e = 0; e < n; e++) memcpy((char *)out->data + 2 * es * (size_t)e, (char *)tmp.data + es * (size_t)e, es);
    }
    tpu_tensor_free(&tmp);
    return TPU_OK;
  }
  if (in->op == TPU_OP_CONVERT || in->op == TPU_OP_COPY) { /* copy: XLA TPU rounds f32 to bf16 with it */
    TPU_TRY(tpu__ew_alloc_out(in, out, d));
    for (int64_t s = 0; s < n; s += TPU_EW_BLOCK) {
      int m = (int)(n - s < TPU_EW_BLOCK ? n - s : TPU_EW_BLOCK);
      convert_block(from, to, a->data, out->data, s, m, &x, &y);
    }
    return TPU_OK;
  }
  if (!tpu_dtype_is_float(from)) return not_float(in, from, d);
  if (in->op == TPU_OP_IS_FINITE) {
    if (to != TPU_PRED) return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "is-finite '%s': the result must be pred", in->name);
    TPU_TRY(tpu__ew_alloc_out(in, out, d));
    uint8_t *o = out->data;
    for (int64_t s = 0; s < n; s += TPU_EW_BLOCK) {
      int m = (int)(n - s < TPU_EW_BLOCK ? n - s : TPU_EW_BLOCK);
      if (from == TPU_F64) {
        tpu__ew_load_f64(a->data, s, 1, m, x.d);
        for (int i = 0; i < m; i++) o[s + i] = isfinite(x.d[i]) != 0;
      } else {
        tpu__ew_load_f32(a->data, from, s, 1, m, x.f);
        for (int i = 0; i < m; i++) o[s + i] = isfinite(x.f[i]) != 0;
      }
    }
    return TPU_OK;
  }
  if (in->op == TPU_OP_REDUCE_PRECISION) {
    const int e = in->exponent_bits, mb = in->mantissa_bits;
    if (to != from) return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "reduce-precision '%s': result type differs", in->name);
    if (e < 1 || mb < 0)
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc,
                      "reduce-precision '%s': needs exponent_bits >= 1 and mantissa_bits >= 0 (got %d, %d)", in->name,
                      e, mb);
    TPU_TRY(tpu__ew_alloc_out(in, out, d));
    /* bf16/f16 values are reduced as f32 (exact) and rounded back, as XLA on CPU does. */
    for (int64_t s = 0; s < n; s += TPU_EW_BLOCK) {
      int m = (int)(n - s < TPU_EW_BLOCK ? n - s : TPU_EW_BLOCK);
      if (from == TPU_F64) {
        tpu__ew_load_f64(a->data, s, 1, m, x.d);
        for (int i = 0; i < m; i++) {
          uint64_t u;
          memcpy(&u, &x.d[i], 8);
          u = reduce_bits(u, 11, 52, e, mb);
          memcpy(&x.d[i], &u, 8);
        }
        tpu__ew_store_f64(out->data, s, m, x.d);
      } else {
        tpu__ew_load_f32(a->data, from, s, 1, m, x.f);
        for (int i = 0; i < m; i++) x.f[i] = tpu_f32_from_bits((uint32_t)reduce_bits(tpu_f32_bits(x.f[i]), 8, 23, e, mb));
        tpu__ew_store_f32(out->data, from, s, m, x.f);
      }
    }
    return TPU_OK;
  }
  return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "'%s' is not a conversion op", tpu_op_name(in->op));
}
