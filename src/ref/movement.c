/* Reference kernels for data movement: broadcast, reshape, bitcast, transpose, slice,
 * dynamic-slice, dynamic-update-slice, concatenate, pad, reverse, iota, copy. */
#include <string.h>

#include "base/alloc.h"
#include "base/bf16.h"
#include "ir/layout.h"
#include "ref/elementwise_int.h"
#include "ref/ref_int.h"

/* Allocates `out` as an array of the given type and dims; a failure is reported at the
 * instruction's location. */
static tpu_status alloc_at(tpu_tensor *out, tpu_dtype t, int rank, const int64_t *dims, const tpu_instr *in,
                           tpu_diag *d) {
  tpu_diag inner;
  tpu_status st = tpu_tensor_alloc(out, t, rank, dims, &inner);
  if (st != TPU_OK) return TPU_FAIL(d, st, in->loc, "%s", inner.msg);
  return TPU_OK;
}

static tpu_status alloc_like(tpu_tensor *out, const tpu_instr *in, tpu_diag *d) {
  return alloc_at(out, in->shape.dtype, in->shape.rank, in->shape.dims, in, d);
}

/* Copies one run of n elements of es bytes: dst[i*ds] = src[i*ss] (strides in elements,
 * possibly zero or negative). Fixed-size memcpy keeps it free of aliasing problems and
 * compiles to plain loads and stores. */
static void copy_run(char *dst, int64_t ds, const char *src, int64_t ss, int64_t n, size_t es) {
  if (ds == 1 && ss == 1) {
    memcpy(dst, src, (size_t)n * es);
    return;
  }
  switch (es) {
    case 1:
      for (int64_t i = 0; i < n; i++) dst[i * ds] = src[i * ss];
      break;
    case 2:
      for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds * 2, src + i * ss * 2, 2);
      break;
    case 4:
      for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds * 4, src + i * ss * 4, 4);
      break;
    case 8:
      for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds * 8, src + i * ss * 8, 8);
      break;
    default:
      for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds * (int64_t)es, src + i * ss * (int64_t)es, es);
      break;
  }
}

/* One tile of a transpose: rows i (destination contiguous, source stride si) by columns j
 * (source contiguous, destination stride dj). */
#define TILE_COPY(T)                                                                           \
  for (int64_t jj = j0; jj < j1; jj++)                                                         \
    for (int64_t ii = i0; ii < i1; ii++) memcpy(d + (jj * dj + ii) * (int64_t)sizeof(T), s + (jj + ii * si) * (int64_t)sizeof(T), sizeof(T));

enum { TILE = 16 };

/* copy_box's transposing case (its merged dims n, strides ds and ss): dimension r-1 is
 * contiguous in the destination, dimension j in the source; the two are copied in TILE x TILE
 * tiles for every index of the others. */
static void copy_box_tiled(char *dst, const char *src, size_t es, int r, const int64_t *n, const int64_t *ds,
                           const int64_t *ss, int j) {
  int64_t on[TPU_MAX_RANK], ods[TPU_MAX_RANK], oss[TPU_MAX_RANK], idx[TPU_MAX_RANK] = {0};
  int orank = 0;
  for (int k = 0; k < r - 1; k++)
    if (k != j) on[orank] = n[k], ods[orank] = ds[k], oss[orank] = ss[k], orank++;
  int64_t ni = n[r - 1], si = ss[r - 1], nj = n[j], dj = ds[j];
  int64_t doff = 0, soff = 0;
  for (;;) {
    char *d = dst + doff * (int64_t)es;
    const char *s = src + soff * (int64_t)es;
    for (int64_t j0 = 0; j0 < nj; j0 += TILE) {
      int64_t j1 = j0 + TILE < nj ? j0 + TILE : nj;
      for (int64_t i0 = 0; i0 < ni; i0 += TILE) {
        int64_t i1 = i0 + TILE < ni ? i0 + TILE : ni;
        switch (es) {
          case 1: TILE_COPY(uint8_t) break;
          case 2: TILE_COPY(uint16_t) break;
          case 4: TILE_COPY(uint32_t) break;
          default: TILE_COPY(uint64_t) break;
        }
      }
    }
    int k = orank - 1;
    for (; k >= 0; k--) {
      idx[k]++;
      doff += ods[k];
      soff += oss[k];
      if (idx[k] < on[k]) break;
      doff -= ods[k] * on[k];
      soff -= oss[k] * on[k];
      idx[k] = 0;
    }
    if (k < 0) return;
  }
}

/* Copies an n-d box of `dims` elements: for every index i, dst[sum i_k*dstr_k] =
 * src[sum i_k*sstr_k] (strides in elements; src strides may be 0 for broadcasting or
 * negative for reversal). Unit dims are dropped and dims contiguous in both are merged,
 * so the inner loop runs over the longest possible run. */
void tpu__ref_copy_box(void *dst, const void *src, size_t es, int rank, const int64_t *dims, const int64_t *dstr,
                       const int64_t *sstr) {
  int64_t n[TPU_MAX_RANK], ds[TPU_MAX_RANK], ss[TPU_MAX_RANK];
  int r = 0;
  for (int k = 0; k < rank; k++) {
    if (dims[k] == 0) return;
    if (dims[k] == 1) continue;
    if (r > 0 && ds[r - 1] == dstr[k] * dims[k] && ss[r - 1] == sstr[k] * dims[k]) {
      n[r - 1] *= dims[k];
      ds[r - 1] = dstr[k];
      ss[r - 1] = sstr[k];
      continue;
    }
    n[r] = dims[k];
    ds[r] = dstr[k];
    ss[r] = sstr[k];
    r++;
  }
  char *d = dst;
  const char *s = src;
  if (r == 0) {
    memcpy(d, s, es);
    return;
  }
  /* A transpose (the destination's run strided in the source, another dimension contiguous
   * there): copied in square tiles, so that each source line read is used whole. */
  if (r >= 2 && ds[r - 1] == 1 && ss[r - 1] != 1 && n[r - 1] >= 8 && (es == 4 || es == 8 || es == 2 || es == 1)) {
    int j = -1;
    for (int k = r - 2; k >= 0 && j < 0; k--)
      if (ss[k] == 1 && n[k] >= 8) j = k;
    if (j >= 0) {
      copy_box_tiled(d, s, es, r, n, ds, ss, j);
      return;
    }
  }
  int64_t idx[TPU_MAX_RANK];
  for (int k = 0; k < r; k++) idx[k] = 0; /* (not `= {0}`: a `rep stos` per call, as tensor.h says) */
  int64_t doff = 0, soff = 0; /* element offsets of the current run */
  for (;;) {
    copy_run(d + doff * (int64_t)es, ds[r - 1], s + soff * (int64_t)es, ss[r - 1], n[r - 1], es);
    int k = r - 2;
    for (; k >= 0; k--) {
      idx[k]++;
      doff += ds[k];
      soff += ss[k];
      if (idx[k] < n[k]) break;
      doff -= ds[k] * n[k];
      soff -= ss[k] * n[k];
      idx[k] = 0;
    }
    if (k < 0) return;
  }
}

/* A start index from a scalar of any integer type; unsigned values above INT64_MAX
 * saturate (they clamp to the top like any other too-large start). */
int64_t tpu__ref_read_index(const tpu_tensor *t, int64_t i) {
  if (t->dtype == TPU_U64) {
    uint64_t u;
    memcpy(&u, (const char *)t->data + i * 8, 8);
    return u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)u;
  }
  return tpu_tensor_get_i64(t, i);
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static tpu_status broadcast(const tpu_instr *in, const tpu_tensor *x, tpu_tensor *out, tpu_diag *d) {
  TPU_TRY(alloc_like(out, in, d));
  int64_t xs[TPU_MAX_RANK], os[TPU_MAX_RANK], ss[TPU_MAX_RANK];
  for (int i = 0; i < out->rank; i++) ss[i] = 0;
  tpu__ref_strides(x->rank, x->dims, xs);
  tpu__ref_strides(out->rank, out->dims, os);
  for (int i = 0; i < in->dimensions.n && i < x->rank; i++) ss[in->dimensions.v[i]] = xs[i];
  tpu__ref_copy_box(out->data, x->data, tpu_dtype_size(out->dtype), out->rank, out->dims, os, ss);
  return TPU_OK;
}

static tpu_status transpose(const tpu_instr *in, const tpu_tensor *x, tpu_tensor *out, tpu_diag *d) {
  TPU_TRY(alloc_like(out, in, d));
  int64_t xs[TPU_MAX_RANK], os[TPU_MAX_RANK], ss[TPU_MAX_RANK];
  tpu__ref_strides(x->rank, x->dims, xs);
  tpu__ref_strides(out->rank, out->dims, os);
  for (int i = 0; i < out->rank; i++) ss[i] = xs[in->dimensions.v[i]];
  tpu__ref_copy_box(out->data, x->data, tpu_dtype_size(out->dtype), out->rank, out->dims, os, ss);
  return TPU_OK;
}

/* Reshape, bitcast and copy: the row-major element sequence is unchanged. */
static tpu_status same_elements(const tpu_instr *in, const tpu_tensor *x, tpu_tensor *out, tpu_diag *d) {
  TPU_TRY(alloc_like(out, in, d));
  size_t n = out->nbytes < x->nbytes ? out->nbytes : x->nbytes;
  if (n) memcpy(out->data, x->data, n);
  return TPU_OK;
}

/* bitcast reinterprets the operand's buffer: result element j is whatever the operand
 * stores at j's physical position, by both shapes' layouts (minor_to_major and tiling). It
 * is a reshape when both buffers are plain row-major; otherwise a permutation, which needs
 * equal element sizes and never reads padding -- except a result without padding of its own
 * that spans the operand's whole buffer (the XLA TPU compiler's view of a tiled buffer as
 * flat rows to send it, or ZeroCrop's): the padding's slots read as zeros. */
static tpu_status bitcast(const tpu_instr *in, const tpu_tensor *x, tpu_tensor *out, tpu_diag *d) {
  const tpu_shape *rs = &in->shape, *xs = &in->operands[0]->shape;
  tpu_layout rl, xl;
  TPU_TRY(tpu_layout_read(rs, in->loc, &rl, d));
  TPU_TRY(tpu_layout_read(xs, in->loc, &xl, d));
  if (tpu_layout_is_row_major(rs, &rl) && tpu_layout_is_row_major(xs, &xl)) return same_elements(in, x, out, d);
  size_t es = tpu_dtype_size(rs->dtype);
  if (es != tpu_dtype_size(xs->dtype))
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc,
                    "bitcast '%s' changes the element size between non-row-major layouts (a tiled array's bytes "
                    "viewed as another type); its values are not modelled (time the program with --mode timing)",
                    in->name);
  int64_t n = tpu_shape_numel(rs), xn = tpu_shape_numel(xs);
  int64_t *roff = tpu_malloc(sizeof *roff * (size_t)(n ? n : 1));
  int64_t *xoff = tpu_malloc(sizeof *xoff * (size_t)(xn ? xn : 1));
  int64_t *where = NULL, rphys, xphys;
  tpu_status st = TPU_OK;
  if (!roff || !xoff) {
    st = TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory evaluating '%s'", in->name);
    goto out;
  }
  tpu_layout_offsets(rs, &rl, roff, &rphys);
  tpu_layout_offsets(xs, &xl, xoff, &xphys);
  if (rphys != xphys) {
    st = TPU_FAIL(d, TPU_ERR_INVALID, in->loc,
                  "bitcast '%s': the result's buffer holds %lld elements in its layout but the operand's %lld",
                  in->name, (long long)rphys, (long long)xphys);
    goto out;
  }
  where = tpu_malloc(sizeof *where * (size_t)(xphys ? xphys : 1)); /* physical slot -> operand element, -1: padding */
  if (!where) {
    st = TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory evaluating '%s'", in->name);
    goto out;
  }
  for (int64_t p = 0; p < xphys; p++) where[p] = -1;
  for (int64_t i = 0; i < xn; i++) where[xoff[i]] = i;
  st = alloc_like(out, in, d);
  for (int64_t j = 0; st == TPU_OK && j < n; j++) {
    int64_t i = where[roff[j]];
    if (i < 0 && rphys == n) { /* the whole buffer viewed flat: padding reads as zeros */
      memset((char *)out->data + j * (int64_t)es, 0, es);
      continue;
    }
    if (i < 0) {
      tpu_tensor_free(out);
      st = TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "bitcast '%s' reads padding of its operand's tiled layout", in->name);
      break;
    }
    memcpy((char *)out->data + j * (int64_t)es, (const char *)x->data + i * (int64_t)es, es);
  }
out:
  tpu_free(roff);
  tpu_free(xoff);
  tpu_free(where);
  return st;
}

static tpu_status slice(const tpu_instr *in, const tpu_tensor *x, tpu_tensor *out, tpu_diag *d) {
  TPU_TRY(alloc_like(out, in, d));
  int64_t xs[TPU_MAX_RANK], os[TPU_MAX_RANK], ss[TPU_MAX_RANK];
  tpu__ref_strides(x->rank, x->dims, xs);
  tpu__ref_strides(out->rank, out->dims, os);
  int64_t off = 0;
  for (int i = 0; i < x->rank; i++) {
    off += in->slice[i].start * xs[i];
    ss[i] = xs[i] * in->slice[i].stride;
  }
  size_t es = tpu_dtype_size(out->dtype);
  if (tpu_tensor_numel(out) == 0) return TPU_OK;
  tpu__ref_copy_box(out->data, (const char *)x->data + off * (int64_t)es, es, out->rank, out->dims, os, ss);
  return TPU_OK;
}

/* Start indices of dynamic-slice / dynamic-update-slice: one scalar operand per dim
 * from operand `first` on (or, in the old form, one rank-1 operand), each clamped to
 * [0, dim - size] as XLA does so the window stays inside the operand. */
static void dyn_starts(const tpu_tensor *const *args, int nargs, int first, const tpu_tensor *x, const int64_t *size,
                       int64_t *start) {
  for (int i = 0; i < x->rank; i++) {
    int64_t s = 0;
    if (nargs == first + 1 && args[first]->rank == 1) s = tpu__ref_read_index(args[first], i);
    else if (first + i < nargs) s = tpu__ref_read_index(args[first + i], 0);
    start[i] = clamp64(s, 0, x->dims[i] - size[i]);
  }
}

static tpu_status dynamic_slice(const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out, tpu_diag *d) {
  const tpu_tensor *x = args[0];
  TPU_TRY(alloc_like(out, in, d));
  int64_t start[TPU_MAX_RANK], xs[TPU_MAX_RANK], os[TPU_MAX_RANK];
  dyn_starts(args, in->noperands, 1, x, out->dims, start);
  tpu__ref_strides(x->rank, x->dims, xs);
  tpu__ref_strides(out->rank, out->dims, os);
  int64_t off = 0;
  for (int i = 0; i < x->rank; i++) off += start[i] * xs[i];
  size_t es = tpu_dtype_size(out->dtype);
  if (tpu_tensor_numel(out) == 0) return TPU_OK;
  tpu__ref_copy_box(out->data, (const char *)x->data + off * (int64_t)es, es, out->rank, out->dims, os, xs);
  return TPU_OK;
}

static tpu_status dynamic_update_slice(const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                                       tpu_diag *d) {
  const tpu_tensor *x = args[0], *u = args[1];
  TPU_TRY(alloc_like(out, in, d));
  if (x->nbytes) memcpy(out->data, x->data, x->nbytes);
  int64_t start[TPU_MAX_RANK], xs[TPU_MAX_RANK], us[TPU_MAX_RANK];
  dyn_starts(args, in->noperands, 2, x, u->dims, start);
  tpu__ref_strides(x->rank, x->dims, xs);
  tpu__ref_strides(u->rank, u->dims, us);
  int64_t off = 0;
  for (int i = 0; i < x->rank; i++) off += start[i] * xs[i];
  size_t es = tpu_dtype_size(out->dtype);
  if (tpu_tensor_numel(u) == 0) return TPU_OK;
  tpu__ref_copy_box((char *)out->data + off * (int64_t)es, u->data, es, u->rank, u->dims, xs, us);
  return TPU_OK;
}

static tpu_status concatenate(const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out, tpu_diag *d) {
  TPU_TRY(alloc_like(out, in, d));
  int dim = in->dimensions.n ? (int)in->dimensions.v[0] : 0;
  int64_t os[TPU_MAX_RANK], xs[TPU_MAX_RANK];
  tpu__ref_strides(out->rank, out->dims, os);
  size_t es = tpu_dtype_size(out->dtype);
  int64_t at = 0; /* position along `dim` where the next operand goes */
  for (int k = 0; k < in->noperands; k++) {
    const tpu_tensor *x = args[k];
    tpu__ref_strides(x->rank, x->dims, xs);
    if (tpu_tensor_numel(x) > 0)
      tpu__ref_copy_box((char *)out->data + at * os[dim] * (int64_t)es, x->data, es, x->rank, x->dims, os, xs);
    at += x->dims[dim];
  }
  return TPU_OK;
}

/* Pad: fill with the padding value, then place operand element j of each dim at
 * lo + j*(interior+1). Negative lo/hi crop: elements landing outside [0, out dim) are
 * dropped, so per dim only the operand range [j0, j1] is copied. */
static tpu_status pad(const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out, tpu_diag *d) {
  const tpu_tensor *x = args[0], *pv = args[1];
  TPU_TRY(alloc_like(out, in, d));
  size_t es = tpu_dtype_size(out->dtype);
  int64_t n = tpu_tensor_numel(out);
  if (n == 0) return TPU_OK;
  /* Fill by doubling copies of the padding value (converted when XLA gave another float
   * type: exact for f32 -inf/0 into bf16, rounded to nearest even otherwise). */
  char *o = out->data;
  if (pv->dtype != out->dtype) tpu_tensor_set_f64(out, 0, tpu_tensor_get_f64(pv, 0));
  else memcpy(o, pv->data, es);
  int64_t have = 1;
  while (have < n) {
    int64_t c = have < n - have ? have : n - have;
    memcpy(o + have * (int64_t)es, o, (size_t)c * es);
    have += c;
  }
  int64_t xs[TPU_MAX_RANK], os[TPU_MAX_RANK], cnt[TPU_MAX_RANK], dstr[TPU_MAX_RANK];
  tpu__ref_strides(x->rank, x->dims, xs);
  tpu__ref_strides(out->rank, out->dims, os);
  int64_t soff = 0, doff = 0;
  for (int i = 0; i < x->rank; i++) {
    const tpu_pad_dim *p = &in->padding[i];
    int64_t step = p->interior + 1;
    int64_t j0 = p->lo >= 0 ? 0 : (-p->lo + step - 1) / step;
    int64_t lastpos = out->dims[i] - 1 - p->lo; /* largest j*step allowed */
    int64_t j1 = lastpos < 0 ? -1 : lastpos / step;
    if (j1 > x->dims[i] - 1) j1 = x->dims[i] - 1;
    if (j1 < j0) return TPU_OK; /* nothing of the operand survives */
    cnt[i] = j1 - j0 + 1;
    soff += j0 * xs[i];
    doff += (p->lo + j0 * step) * os[i];
    dstr[i] = os[i] * step;
  }
  tpu__ref_copy_box(o + doff * (int64_t)es, (const char *)x->data + soff * (int64_t)es, es, x->rank, cnt, dstr, xs);
  return TPU_OK;
}

static tpu_status reverse(const tpu_instr *in, const tpu_tensor *x, tpu_tensor *out, tpu_diag *d) {
  TPU_TRY(alloc_like(out, in, d));
  if (tpu_tensor_numel(out) == 0) return TPU_OK;
  int64_t xs[TPU_MAX_RANK], os[TPU_MAX_RANK];
  tpu__ref_strides(x->rank, x->dims, xs);
  tpu__ref_strides(out->rank, out->dims, os);
  int64_t off = 0;
  for (int i = 0; i < in->dimensions.n; i++) {
    int k = (int)in->dimensions.v[i];
    if (k < 0 || k >= x->rank || xs[k] < 0) continue; /* a dim listed twice flips once */
    off += (x->dims[k] - 1) * xs[k];
    xs[k] = -xs[k];
  }
  size_t es = tpu_dtype_size(out->dtype);
  tpu__ref_copy_box(out->data, (const char *)x->data + off * (int64_t)es, es, out->rank, out->dims, os, xs);
  return TPU_OK;
}

/* Writes the integer k as one element of type t. Floats go through f32 as XLA's CPU
 * backend and evaluator do (int -> f32 -> bf16/f16, each rounding to nearest even); f64
 * converts directly. */
static void put_count(tpu_tensor *t, int64_t i, int64_t k) {
  switch (t->dtype) {
    case TPU_BF16: ((tpu_bf16 *)t->data)[i] = tpu_bf16_from_f32((float)k); break;
    case TPU_F16: ((tpu_f16 *)t->data)[i] = tpu_f16_from_f32((float)k); break;
    case TPU_F32: ((float *)t->data)[i] = (float)k; break;
    case TPU_F64: ((double *)t->data)[i] = (double)k; break;
    default: tpu_tensor_set_i64(t, i, k); break;
  }
}

/* Iota: one row of counts 0..n-1 along iota_dimension, broadcast over the other dims. */
static tpu_status iota(const tpu_instr *in, tpu_tensor *out, tpu_diag *d) {
  TPU_TRY(alloc_like(out, in, d));
  if (out->rank == 0) return TPU_OK; /* a scalar iota is 0 */
  int dim = (int)in->iota_dimension;
  if (dim < 0 || dim >= out->rank) dim = 0;
  int64_t len = out->dims[dim];
  tpu_tensor row;
  tpu_status st = alloc_at(&row, out->dtype, 1, &len, in, d);
  if (st != TPU_OK) {
    tpu_tensor_free(out);
    return st;
  }
  for (int64_t k = 0; k < len; k++) put_count(&row, k, k);
  int64_t os[TPU_MAX_RANK], ss[TPU_MAX_RANK] = {0};
  tpu__ref_strides(out->rank, out->dims, os);
  ss[dim] = 1;
  tpu__ref_copy_box(out->data, row.data, tpu_dtype_size(out->dtype), out->rank, out->dims, os, ss);
  tpu_tensor_free(&row);
  return TPU_OK;
}

tpu_status tpu__ref_movement(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                             tpu_diag *d) {
  tpu_tensor_zero(out);
  if (tpu_instr_moves_and_converts(in)) { /* move in the operand's type, then convert */
    tpu_instr as = *in;
    as.shape.dtype = args[0]->dtype;
    tpu_tensor moved;
    TPU_TRY(tpu__ref_movement(ip, &as, args, &moved, d));
    const tpu_tensor *m = &moved;
    tpu_instr cv = *in; /* then a convert of the moved elements */
    cv.op = TPU_OP_CONVERT;
    cv.noperands = 1;
    tpu_status st = tpu__ref_ew_convert(&cv, &m, out, d);
    tpu_tensor_free(&moved);
    return st;
  }
  switch (in->op) {
    case TPU_OP_BROADCAST: return broadcast(in, args[0], out, d);
    case TPU_OP_RESHAPE:
    case TPU_OP_COPY: /* copy changes only the layout, or rounds between floating types */
      if (in->shape.dtype != args[0]->dtype) return tpu__ref_ew_convert(in, args, out, d);
      return same_elements(in, args[0], out, d);
    case TPU_OP_BITCAST: return bitcast(in, args[0], out, d);
    case TPU_OP_TRANSPOSE: return transpose(in, args[0], out, d);
    case TPU_OP_SLICE: return slice(in, args[0], out, d);
    case TPU_OP_DYNAMIC_SLICE: return dynamic_slice(in, args, out, d);
    case TPU_OP_DYNAMIC_UPDATE_SLICE: return dynamic_update_slice(in, args, out, d);
    case TPU_OP_CONCATENATE: return concatenate(in, args, out, d);
    case TPU_OP_PAD: return pad(in, args, out, d);
    case TPU_OP_REVERSE: return reverse(in, args[0], out, d);
    case TPU_OP_IOTA: return iota(in, out, d);
    default: break;
  }
  return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "op '%s' is not a data-movement op", tpu_op_name(in->op));
}
