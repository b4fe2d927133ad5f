/* Reference kernel: fft (FFT, IFFT, RFFT, IRFFT over the 1-3 minor dims), computed in double. */
#include <complex.h>
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "ref/ref_int.h"

/* The numerics (docs/numerics.md): values are loaded exactly into double complex, every
 * 1-D transform is a mixed-radix decimation in time (recursive on the smallest prime
 * factor; a prime length is a direct DFT), with twiddles exp(-+2 pi i j/L) from a table of
 * cos/sin computed in double; IFFT and IRFFT scale by 1/N (N the product of fft_length)
 * at the end; the result's parts are rounded once to the element type, no denormal
 * flushing. Any length works; a prime length L costs O(L^2) per line. */

typedef double complex zc;

/* One length's plan: its twiddle table (sign < 0: forward). */
typedef struct {
  int64_t n;
  zc *w; /* w[j] = exp(sign * 2 pi i j / n) */
  zc *line, *res, *scratch;
} plan;

static void plan_free(plan *p) {
  tpu_free(p->w);
  tpu_free(p->line);
  tpu_free(p->res);
  tpu_free(p->scratch);
  memset(p, 0, sizeof *p);
}

static int plan_init(plan *p, int64_t n, int sign) {
  memset(p, 0, sizeof *p);
  p->n = n;
  size_t m = (size_t)(n ? n : 1);
  p->w = tpu_malloc(m * sizeof(zc));
  p->line = tpu_malloc(m * sizeof(zc));
  p->res = tpu_malloc(m * sizeof(zc));
  p->scratch = tpu_malloc(m * sizeof(zc));
  if (!p->w || !p->line || !p->res || !p->scratch) {
    plan_free(p);
    return 0;
  }
  for (int64_t j = 0; j < n; j++) {
    /* angle in [0, 2 pi): reduce j first so the argument stays small and exact-ish */
    double t = 2.0 * M_PI * (double)j / (double)n;
    p->w[j] = CMPLX(cos(t), sign * sin(t));
  }
  return 1;
}

static int64_t smallest_factor(int64_t n) {
  if (n % 2 == 0) return 2;
  for (int64_t f = 3; f * f <= n; f += 2)
    if (n % f == 0) return f;
  return n;
}

/* out[k] = sum_j x[j*s] w_L^(jk), k < L, for L dividing the plan's n (w_L^e = pw[(e mod L) * (n/L)]).
 * `tmp` holds at least L values of scratch per recursion level (p values used). */
static void dft_rec(const plan *pl, const zc *x, int64_t s, zc *out, int64_t L, zc *tmp) {
  if (L == 1) {
    out[0] = x[0];
    return;
  }
  const int64_t scale = pl->n / L;
  const int64_t p = smallest_factor(L);
  if (p == L) { /* direct DFT */
    for (int64_t k = 0; k < L; k++) {
      zc acc = 0;
      int64_t e = 0; /* j*k mod L, updated by adding k */
      for (int64_t j = 0; j < L; j++) {
        acc += x[j * s] * pl->w[e * scale];
        e += k;
        if (e >= L) e -= L;
      }
      out[k] = acc;
    }
    return;
  }
  const int64_t m = L / p;
  for (int64_t r = 0; r < p; r++) dft_rec(pl, x + r * s, s * p, out + r * m, m, tmp);
  /* X[k + m q] = sum_r w_L^(r (k + m q)) Y_r[k] */
  for (int64_t k = 0; k < m; k++) {
    for (int64_t r = 0; r < p; r++) tmp[r] = out[r * m + k];
    for (int64_t q = 0; q < p; q++) {
      const int64_t kk = k + m * q;
      zc acc = 0;
      int64_t e = 0; /* r*kk mod L */
      int64_t step = kk % L;
      for (int64_t r = 0; r < p; r++) {
        acc += tmp[r] * pl->w[e * scale];
        e += step;
        if (e >= L) e -= L;
      }
      out[kk] = acc;
    }
  }
}

/* Transforms every line along axis `ax` of the row-major array `a` (dims[0..rank)). */
static void transform_axis(zc *a, int rank, const int64_t *dims, int ax, plan *pl) {
  int64_t n = dims[ax], inner = 1, outer = 1;
  for (int i = ax + 1; i < rank; i++) inner *= dims[i];
  for (int i = 0; i < ax; i++) outer *= dims[i];
  if (n <= 1) return;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      zc *base = a + o * n * inner + in;
      for (int64_t j = 0; j < n; j++) pl->line[j] = base[j * inner];
      dft_rec(pl, pl->line, 1, pl->res, n, pl->scratch);
      for (int64_t j = 0; j < n; j++) base[j * inner] = pl->res[j];
    }
}

static tpu_status nomem(const tpu_instr *in, tpu_diag *d) {
  return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "fft '%s': out of memory", in->name);
}

/* Runs the transforms of axes [first, last) of a work array of `rank` dims; 0 on OOM. */
static int transform_axes(zc *w, int rank, const int64_t *dims, int first, int last, int sign) {
  for (int ax = first; ax < last; ax++) {
    plan pl;
    if (!plan_init(&pl, dims[ax], sign)) return 0;
    transform_axis(w, rank, dims, ax, &pl);
    plan_free(&pl);
  }
  return 1;
}

static double load_part(tpu_dtype t, const void *p, int64_t i) {
  return t == TPU_F32 || t == TPU_C64 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static void store_part(tpu_dtype t, void *p, int64_t i, double v) {
  if (t == TPU_F32 || t == TPU_C64) ((float *)p)[i] = (float)v;
  else ((double *)p)[i] = v;
}

tpu_status tpu__ref_fft(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                        tpu_diag *d) {
  (void)ip;
  tpu_tensor_zero(out);
  const tpu_tensor *a = args[0];
  const tpu_i64s *len = &in->fft_length;
  const int R = a->rank, r = len->n;
  if (in->noperands != 1 || r < 1 || r > 3 || R < r || !tpu_dtype_is_array(in->shape.dtype) || in->shape.rank != R)
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "fft '%s': operand and fft_length do not fit", in->name);
  const tpu_fft_type ty = in->fft_type;
  /* The work array: batch dims, then the full fft_length dims. */
  int64_t wd[TPU_MAX_RANK] = {0}; /* set below for i < R (R >= 1); cleared for musl-gcc's -Wmaybe-uninitialized */
  int64_t total = 1, N = 1;
  for (int i = 0; i < R; i++) wd[i] = i < R - r ? a->dims[i] : len->v[i - (R - r)];
  for (int i = 0; i < R; i++) total *= wd[i];
  for (int i = 0; i < r; i++) N *= len->v[i];
  /* The operand and result must fit the work dims (the verifier checked the same). */
  const int64_t last = wd[R - 1], half = last / 2 + 1;
  for (int i = 0; i < R; i++) {
    int64_t want_in = wd[i], want_out = wd[i];
    if (i == R - 1 && ty == TPU_FFT_IRFFT) want_in = half;
    if (i == R - 1 && ty == TPU_FFT_RFFT) want_out = half;
    if (a->dims[i] != want_in || in->shape.dims[i] != want_out)
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "fft '%s': operand and fft_length do not fit", in->name);
  }
  TPU_TRY(tpu_tensor_alloc(out, in->shape.dtype, in->shape.rank, in->shape.dims, d));
  if (total == 0) return TPU_OK;
  zc *w = tpu_malloc((size_t)total * sizeof(zc));
  if (!w) {
    tpu_tensor_free(out);
    return nomem(in, d);
  }
  const tpu_dtype it = a->dtype, ot = out->dtype;
  const int64_t rows = total / last;
  int ok = 1;
  if (ty == TPU_FFT_FFT || ty == TPU_FFT_IFFT) {
    for (int64_t e = 0; e < total; e++) w[e] = CMPLX(load_part(it, a->data, 2 * e), load_part(it, a->data, 2 * e + 1));
    ok = transform_axes(w, R, wd, R - r, R, ty == TPU_FFT_FFT ? -1 : 1);
  } else if (ty == TPU_FFT_RFFT) {
    for (int64_t e = 0; e < total; e++) w[e] = CMPLX(load_part(it, a->data, e), 0.0);
    ok = transform_axes(w, R, wd, R - r, R, -1);
  } else {
    /* IRFFT: the half spectrum goes into the first `half` columns; inverse transforms
     * along the leading fft dims (on those columns), then each row is extended
     * Hermitian-symmetrically (bin k > n/2 = conj(bin n-k)) and inverse transformed; the
     * result is the real part, so the imaginary parts of bin 0 and (even n) bin n/2
     * never reach it, as in numpy's irfftn. */
    for (int64_t row = 0; row < rows; row++)
      for (int64_t k = 0; k < last; k++) {
        int64_t e = row * half + k;
        w[row * last + k] = k < half ? CMPLX(load_part(it, a->data, 2 * e), load_part(it, a->data, 2 * e + 1)) : 0;
      }
    ok = transform_axes(w, R, wd, R - r, R - 1, 1);
    for (int64_t row = 0; ok && row < rows; row++) {
      zc *x = w + row * last;
      for (int64_t k = half; k < last; k++) x[k] = conj(x[last - k]);
    }
    if (ok) ok = transform_axes(w, R, wd, R - 1, R, 1);
  }
  if (!ok) {
    tpu_free(w);
    tpu_tensor_free(out);
    return nomem(in, d);
  }
  const double div = (ty == TPU_FFT_IFFT || ty == TPU_FFT_IRFFT) && N > 0 ? (double)N : 1.0;
  if (ty == TPU_FFT_IRFFT) {
    for (int64_t e = 0; e < total; e++) store_part(ot, out->data, e, creal(w[e]) / div);
  } else if (ty == TPU_FFT_RFFT) {
    for (int64_t row = 0; row < rows; row++)
      for (int64_t k = 0; k < half; k++) {
        zc v = w[row * last + k];
        int64_t e = row * half + k;
        store_part(ot, out->data, 2 * e, creal(v));
        store_part(ot, out->data, 2 * e + 1, cimag(v));
      }
  } else {
    for (int64_t e = 0; e < total; e++) {
      store_part(ot, out->data, 2 * e, creal(w[e]) / div);
      store_part(ot, out->data, 2 * e + 1, cimag(w[e]) / div);
    }
  }
  tpu_free(w);
  return TPU_OK;
}
