/* Verifier rules for complex numbers: real, imag, complex, and fft (XLA's shape rules). */
#include <string.h>

#include "ir/verify.h"

static int has_attr(const tpu_instr *in, const char *name) {
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, name)) return 1;
  return 0;
}

/* real(z) / imag(z): the part type of a complex operand; a float operand is its own real
 * part (imag gives zeros of its type), as XLA defines them. */
static tpu_status verify_part(const tpu_instr *in, tpu_diag *d) {
  TPU_TRY(tpu__vneed_array(in, 0, d));
  const tpu_shape *s = &in->operands[0]->shape;
  if (!tpu_dtype_is_complex(s->dtype) && !tpu_dtype_is_float(s->dtype))
    return TPU_VFAIL(d, in, "element type %s is not allowed (expects a floating-point or complex type)",
                     tpu_dtype_name(s->dtype));
  tpu_shape want = tpu__varray(tpu_dtype_complex_part(s->dtype), s->rank, s->dims);
  return tpu__vexpect(in, &want, d);
}

/* complex(re, im): two f32 (or f64) arrays of one shape make a c64 (c128) array. */
static tpu_status verify_make(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  TPU_TRY(tpu__vneed_array(in, 0, d));
  TPU_TRY(tpu__vneed_array(in, 1, d));
  const tpu_shape *re = &in->operands[0]->shape, *im = &in->operands[1]->shape;
  if (!tpu_shape_equal(re, im))
    return TPU_VFAIL(d, in, "the real part is %s but the imaginary part is %s; they must have the same shape",
                     tpu__vshape(re, &a), tpu__vshape(im, &b));
  tpu_dtype c = tpu_dtype_complex_of(re->dtype);
  if (c == TPU_DTYPE_COUNT)
    return TPU_VFAIL(d, in, "the parts are %s; they must be f32 (c64) or f64 (c128)", tpu_dtype_name(re->dtype));
  tpu_shape want = tpu__varray(c, re->rank, re->dims);
  return tpu__vexpect(in, &want, d);
}

static const char *k_fft_names[] = {"FFT", "IFFT", "RFFT", "IRFFT"};

/* fft over the minor len(fft_length) dims (1 to 3). FFT/IFFT: complex to the same shape.
 * RFFT: f32/f64 whose minor dims equal fft_length, to c64/c128 whose last dim is
 * fft_length[-1]/2+1. IRFFT: the reverse (the input's minor dims are fft_length with the
 * last one n/2+1; the output's are fft_length). */
static tpu_status verify_fft(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a;
  TPU_TRY(tpu__vneed_array(in, 0, d));
  if (!has_attr(in, "fft_type")) return TPU_VFAIL(d, in, "needs an 'fft_type' attribute (FFT, IFFT, RFFT or IRFFT)");
  if (!has_attr(in, "fft_length")) return TPU_VFAIL(d, in, "needs an 'fft_length' attribute");
  const tpu_shape *s = &in->operands[0]->shape;
  const tpu_i64s *len = &in->fft_length;
  const char *ty = k_fft_names[in->fft_type];
  if (len->n < 1 || len->n > 3) return TPU_VFAIL(d, in, "fft_length has %d entries; FFT supports 1 to 3", len->n);
  if (s->rank < len->n)
    return TPU_VFAIL(d, in, "the operand %s has rank %d, less than the %d fft_length entries", tpu__vshape(s, &a),
                     s->rank, len->n);
  for (int i = 0; i < len->n; i++)
    if (len->v[i] < 0) return TPU_VFAIL(d, in, "fft_length[%d] is %lld; it must not be negative", i, (long long)len->v[i]);
  tpu_dtype out_t;
  switch (in->fft_type) {
    case TPU_FFT_FFT:
    case TPU_FFT_IFFT:
      if (!tpu_dtype_is_complex(s->dtype))
        return TPU_VFAIL(d, in, "%s needs a complex operand (c64 or c128), not %s", ty, tpu_dtype_name(s->dtype));
      out_t = s->dtype;
      break;
    case TPU_FFT_RFFT:
      out_t = tpu_dtype_complex_of(s->dtype);
      if (out_t == TPU_DTYPE_COUNT)
        return TPU_VFAIL(d, in, "RFFT needs an f32 or f64 operand, not %s", tpu_dtype_name(s->dtype));
      break;
    default:
      if (!tpu_dtype_is_complex(s->dtype))
        return TPU_VFAIL(d, in, "IRFFT needs a complex operand (c64 or c128), not %s", tpu_dtype_name(s->dtype));
      out_t = tpu_dtype_complex_part(s->dtype);
      break;
  }
  /* The operand's minor dims against fft_length. */
  for (int i = 0; i < len->n; i++) {
    int dim = s->rank - len->n + i;
    int64_t need = len->v[i];
    int last = i == len->n - 1;
    if (last && in->fft_type == TPU_FFT_IRFFT) need = len->v[i] / 2 + 1;
    if (s->dims[dim] != need)
      return TPU_VFAIL(d, in, "%s: operand dimension %d is %lld but fft_length gives %lld%s", ty, dim,
                       (long long)s->dims[dim], (long long)need,
                       last && in->fft_type == TPU_FFT_IRFFT ? " (fft_length/2+1)" : "");
  }
  tpu_shape want = tpu__varray(out_t, s->rank, s->dims);
  int ld = s->rank - 1;
  if (in->fft_type == TPU_FFT_RFFT) want.dims[ld] = len->v[len->n - 1] / 2 + 1;
  if (in->fft_type == TPU_FFT_IRFFT) want.dims[ld] = len->v[len->n - 1];
  return tpu__vexpect(in, &want, d);
}

tpu_status tpu__verify_complex(const tpu_instr *in, tpu_diag *d) {
  switch (in->op) {
    case TPU_OP_REAL:
    case TPU_OP_IMAG: return verify_part(in, d);
    case TPU_OP_COMPLEX: return verify_make(in, d);
    case TPU_OP_FFT: return verify_fft(in, d);
    default: break;
  }
  return TPU_VFAIL(d, in, "has no complex rule");
}
