/* Reference kernels: dot (dot_general) and convolution, with a defined accumulation type and order. */
#include <math.h>
#include <string.h>

#include "base/bf16.h"
#include "base/tensor.h"
#include "chip/mxu.h"
#include "ref/im2col.h"
#include "ref/ref_int.h"

/* Accumulation domain (the spec): integer operands with an integer result accumulate in
 * 64-bit two's complement and wrap to the result type (the same as wrapping at the result
 * width at every step). Otherwise operands are converted to f32 and products accumulated in
 * f32 (bf16/f16 products are exact in f32), or in f64 when an operand or the result is
 * f64; the sum is rounded once to the result type at the end. */
typedef enum { ACC_F32, ACC_F64, ACC_INT, ACC_C64, ACC_C128 } acc_kind;

/* Complex dots (operands and result of one complex type, as the verifier requires):
 * c64 products are formed in f64 (exact) and rounded once per part to f32, then
 * accumulated in f32 pairs in the same order as real dots; c128 forms and accumulates
 * in f64. */
static acc_kind acc_of(tpu_dtype l, tpu_dtype r, tpu_dtype o) {
  if (l == TPU_C64) return ACC_C64;
  if (l == TPU_C128) return ACC_C128;
  if (l == TPU_F64 || r == TPU_F64 || o == TPU_F64) return ACC_F64;
  if (tpu_dtype_is_float(l) || tpu_dtype_is_float(r) || tpu_dtype_is_float(o)) return ACC_F32;
  return ACC_INT;
}

static size_t acc_size(acc_kind k) { return k == ACC_F32 ? sizeof(float) : k == ACC_C128 ? 16 : 8; }


/* Integers are converted straight to f32 (one rounding), floats exactly. */
static float load_f32(tpu_dtype t, const void *p, int64_t i) {
  switch (t) {
    case TPU_S64: return (float)((const int64_t *)p)[i];
    case TPU_U64: return (float)((const uint64_t *)p)[i];
    case TPU_F64: return (float)((const double *)p)[i];
    default: return (float)tpu_load_f64(t, p, i);
  }
}

/* Integers sign- or zero-extended to 64 bits (as unsigned, so sums wrap without UB). */
static uint64_t load_u64(tpu_dtype t, const void *p, int64_t i) {
  switch (t) {
    case TPU_PRED: return ((const uint8_t *)p)[i] != 0;
    case TPU_S8: case TPU_S4: return (uint64_t)(int64_t)((const int8_t *)p)[i];
    case TPU_S16: return (uint64_t)(int64_t)((const int16_t *)p)[i];
    case TPU_S32: return (uint64_t)(int64_t)((const int32_t *)p)[i];
    case TPU_S64: return (uint64_t)((const int64_t *)p)[i];
    case TPU_U8: case TPU_U4: return ((const uint8_t *)p)[i];
    case TPU_U16: return ((const uint16_t *)p)[i];
    case TPU_U32: return ((const uint32_t *)p)[i];
    case TPU_U64: return ((const uint64_t *)p)[i];
    default: return 0;
  }
}

/* Float to integer as XLA's convert does it: truncate toward zero, saturate, NaN -> 0. */
static void store_int_from_f64(tpu_dtype t, void *p, int64_t i, double v) {
  if (t == TPU_PRED) {
    ((uint8_t *)p)[i] = v != 0;
    return;
  }
  double lo, hi;
  switch (t) {
    case TPU_S4: lo = -8.0, hi = 7.0; break;
    case TPU_U4: lo = 0, hi = 15.0; break;
    case TPU_S8: lo = -128.0, hi = 127.0; break;
    case TPU_S16: lo = -32768.0, hi = 32767.0; break;
    case TPU_S32: lo = -2147483648.0, hi = 2147483647.0; break;
    case TPU_S64: lo = -9223372036854775808.0, hi = 9223372036854775807.0; break;
    case TPU_U8: lo = 0, hi = 255.0; break;
    case TPU_U16: lo = 0, hi = 65535.0; break;
    case TPU_U32: lo = 0, hi = 4294967295.0; break;
    default: lo = 0, hi = 18446744073709551615.0; break;
  }
  v = isnan(v) ? 0 : trunc(v);
  int at_hi = v >= hi; /* hi may round up past the type's maximum (s64, u64) */
  if (v < lo) v = lo;
  switch (t) {
    case TPU_S4: ((int8_t *)p)[i] = at_hi ? 7 : (int8_t)v; break;
    case TPU_U4: ((uint8_t *)p)[i] = at_hi ? 15 : (uint8_t)v; break;
    case TPU_S8: ((int8_t *)p)[i] = at_hi ? INT8_MAX : (int8_t)v; break;
    case TPU_S16: ((int16_t *)p)[i] = at_hi ? INT16_MAX : (int16_t)v; break;
    case TPU_S32: ((int32_t *)p)[i] = at_hi ? INT32_MAX : (int32_t)v; break;
    case TPU_S64: ((int64_t *)p)[i] = at_hi ? INT64_MAX : (int64_t)v; break;
    case TPU_U8: ((uint8_t *)p)[i] = at_hi ? UINT8_MAX : (uint8_t)v; break;
    case TPU_U16: ((uint16_t *)p)[i] = at_hi ? UINT16_MAX : (uint16_t)v; break;
    case TPU_U32: ((uint32_t *)p)[i] = at_hi ? UINT32_MAX : (uint32_t)v; break;
    default: ((uint64_t *)p)[i] = at_hi ? UINT64_MAX : (uint64_t)v; break;
  }
}

/* Stores accumulator element i (of kind k in acc) as element i of the result `o`: one
 * rounding from the accumulator to the result type. */
static void store_acc(acc_kind k, const void *acc, tpu_tensor *o, int64_t i) {
  void *p = o->data;
  if (k == ACC_INT) {
    uint64_t v = ((const uint64_t *)acc)[i];
    switch (o->dtype) {
      case TPU_PRED: ((uint8_t *)p)[i] = v != 0; break;
      case TPU_S8:
      case TPU_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
      case TPU_S4: ((int8_t *)p)[i] = (int8_t)(((v & 15) ^ 8) - 8); break;
      case TPU_U4: ((uint8_t *)p)[i] = (uint8_t)(v & 15); break;
      case TPU_S16:
      case TPU_U16: {
        uint16_t u = (uint16_t)v;
        memcpy((char *)p + 2 * i, &u, 2);
        break;
      }
      case TPU_S32:
      case TPU_U32: {
        uint32_t u = (uint32_t)v;
        memcpy((char *)p + 4 * i, &u, 4);
        break;
      }
      default: memcpy((char *)p + 8 * i, &v, 8); break;
    }
    return;
  }
  if (k == ACC_C64 || k == ACC_C128) { /* the result has the accumulator's type */
    memcpy((char *)p + acc_size(k) * (size_t)i, (const char *)acc + acc_size(k) * (size_t)i, acc_size(k));
    return;
  }
  if (k == ACC_F32) {
    float v = ((const float *)acc)[i];
    switch (o->dtype) {
      case TPU_F32: ((float *)p)[i] = v; break;
      case TPU_BF16: ((tpu_bf16 *)p)[i] = tpu_bf16_from_f32(v); break;
      case TPU_F16: ((tpu_f16 *)p)[i] = tpu_f16_from_f32(v); break;
      case TPU_F64: ((double *)p)[i] = v; break;
      case TPU_F8E5M2: case TPU_F8E4M3FN: ((tpu_f8 *)p)[i] = tpu_f8_from_f64(v, o->dtype == TPU_F8E4M3FN); break;
      default: store_int_from_f64(o->dtype, p, i, v); break;
    }
    return;
  }
  double v = ((const double *)acc)[i];
  switch (o->dtype) {
    case TPU_F64: ((double *)p)[i] = v; break;
    case TPU_F32: ((float *)p)[i] = (float)v; break;
    case TPU_BF16: ((tpu_bf16 *)p)[i] = tpu_bf16_from_f64(v); break;
    case TPU_F16: ((tpu_f16 *)p)[i] = tpu_f16_from_f64(v); break;
    case TPU_F8E5M2: case TPU_F8E4M3FN: ((tpu_f8 *)p)[i] = tpu_f8_from_f64(v, o->dtype == TPU_F8E4M3FN); break;
    default: store_int_from_f64(o->dtype, p, i, v); break;
  }
}

/* f32 accumulator values of a f32 or bf16 tensor, one run of n elements with stride s. */
static void pack_run_f32(const tpu_tensor *t, int64_t off, int64_t s, int64_t n, float *o) {
  if (t->dtype == TPU_F32) {
    const float *p = (const float *)t->data + off;
    if (s == 1) memcpy(o, p, sizeof *o * (size_t)n);
    else for (int64_t i = 0; i < n; i++) o[i] = p[i * s];
  } else {
    const tpu_bf16 *p = (const tpu_bf16 *)t->data + off;
    for (int64_t i = 0; i < n; i++) o[i] = tpu_bf16_to_f32(p[i * s]);
  }
}

/* store_acc for elements 0..n-1. */
static void store_all(acc_kind k, const void *acc, tpu_tensor *o, int64_t n) {
  if (k == ACC_F32 && o->dtype == TPU_F32) {
    memcpy(o->data, acc, sizeof(float) * (size_t)n);
    return;
  }
  for (int64_t e = 0; e < n; e++) store_acc(k, acc, o, e);
}

static size_t pack_bytes(const tpu_tensor *t, acc_kind k) {
  int64_t n = tpu_tensor_numel(t);
  return acc_size(k) * (size_t)(n ? n : 1);
}

/* Gives back a pack() buffer. */
static void pack_free(void *buf, const tpu_tensor *t, acc_kind k) { tpu_pool_free(buf, pack_bytes(t, k)); }

/* Copies t into a new contiguous buffer of accumulator values (pack_free gives it back), its
 * dimensions visited in `order` (a permutation of 0..rank-1; the first is slowest). NULL
 * when memory runs out. */
static void *pack(const tpu_tensor *t, acc_kind k, const int *order) {
  int rank = t->rank;
  int64_t n = tpu_tensor_numel(t), str[TPU_MAX_RANK], pdims[TPU_MAX_RANK], pstr[TPU_MAX_RANK], idx[TPU_MAX_RANK] = {0};
  void *buf = tpu_pool_alloc(pack_bytes(t, k));
  if (!buf) return NULL;
  tpu__ref_strides(rank, t->dims, str);
  for (int j = 0; j < rank; j++) pdims[j] = t->dims[order[j]], pstr[j] = str[order[j]];
  if (k == ACC_F32 && (t->dtype == TPU_F32 || t->dtype == TPU_BF16) && rank > 0 && n > 0) {
    /* Runs along the fastest visited dimension. */
    int64_t len = pdims[rank - 1], off = 0;
    for (int64_t e = 0; e < n; e += len) {
      pack_run_f32(t, off, pstr[rank - 1], len, (float *)buf + e);
      for (int j = rank - 2; j >= 0; j--) {
        off += pstr[j];
        if (++idx[j] < pdims[j]) break;
        off -= pstr[j] * pdims[j];
        idx[j] = 0;
      }
    }
    return buf;
  }
  int64_t off = 0;
  for (int64_t e = 0; e < n; e++) {
    if (k == ACC_F32) ((float *)buf)[e] = load_f32(t->dtype, t->data, off);
    else if (k == ACC_F64) ((double *)buf)[e] = tpu_load_f64(t->dtype, t->data, off);
    else if (k == ACC_C64 || k == ACC_C128) memcpy((char *)buf + acc_size(k) * (size_t)e,
                                                   (const char *)t->data + acc_size(k) * (size_t)off, acc_size(k));
    else ((uint64_t *)buf)[e] = load_u64(t->dtype, t->data, off);
    for (int j = rank - 1; j >= 0; j--) {
      off += pstr[j];
      if (++idx[j] < pdims[j]) break;
      off -= pstr[j] * pdims[j];
      idx[j] = 0;
    }
  }
  return buf;
}

/* ---- dot ---- */

/* Checks a list of distinct dimension numbers of a rank-`rank` operand and marks them. */
static int mark_dims(const tpu_i64s *l, int rank, int *used) {
  for (int i = 0; i < l->n; i++) {
    int64_t k = l->v[i];
    if (k < 0 || k >= rank || used[k]) return 0;
    used[k] = 1;
  }
  return 1;
}

/* C[b][i][j] = sum over p of A[b][i][p] * B[b][p][j], the sum taken in increasing p from
 * zero (i-p-j loop order: each C row is updated once per p). */
#define GEMM(T)                                                                 \
  do {                                                                          \
    const T *A = pa, *Bm = pb;                                                  \
    T *C = pc;                                                                  \
    for (int64_t b = 0; b < nb; b++)                                            \
      for (int64_t i = 0; i < nm; i++) {                                        \
        T *c = C + (b * nm + i) * nn;                                           \
        const T *a = A + (b * nm + i) * nk;                                     \
        for (int64_t p = 0; p < nk; p++) {                                      \
          const T av = a[p];                                                    \
          const T *brow = Bm + (b * nk + p) * nn;                               \
          for (int64_t j = 0; j < nn; j++) c[j] += av * brow[j];                \
        }                                                                       \
      }                                                                         \
  } while (0)

/* GEMM on complex pairs (re, im) of T: each product's parts formed in double and rounded
 * once to T, then added to the T accumulators in GEMM's order. */
#define CGEMM(T)                                                                     \
  do {                                                                               \
    const T *A = pa, *Bm = pb;                                                       \
    T *C = pc;                                                                       \
    for (int64_t b = 0; b < nb; b++)                                                 \
      for (int64_t i = 0; i < nm; i++) {                                             \
        T *c = C + 2 * (b * nm + i) * nn;                                            \
        const T *a = A + 2 * (b * nm + i) * nk;                                      \
        for (int64_t p = 0; p < nk; p++) {                                           \
          const double ar = a[2 * p], ai = a[2 * p + 1];                             \
          const T *brow = Bm + 2 * (b * nk + p) * nn;                                \
          for (int64_t j = 0; j < nn; j++) {                                         \
            const double br = brow[2 * j], bi = brow[2 * j + 1];                     \
            c[2 * j] += (T)(ar * br - ai * bi);                                      \
            c[2 * j + 1] += (T)(ar * bi + ai * br);                                  \
          }                                                                          \
        }                                                                            \
      }                                                                              \
  } while (0)

/* dot_general: result dims are batch dims, then lhs free dims, then rhs free dims (each
 * in operand order); contracting dims pair up in the listed order and their index runs
 * row-major over the listed order, which is the summation order. The precision config is
 * not modelled here: the reference computes the HLO meaning at full accumulator precision
 * (as XLA on CPU does); the chip executor models the MXU passes. */
static tpu_status dot_kernel(const tpu_instr *in, const tpu_tensor *lhs, const tpu_tensor *rhs, tpu_tensor *out,
                             tpu_diag *d) {
  const tpu_dot_dims *dn = &in->dot;
  int lr = lhs->rank, rr = rhs->rank;
  int lused[TPU_MAX_RANK] = {0}, rused[TPU_MAX_RANK] = {0};
  if (dn->lhs_batch.n != dn->rhs_batch.n || dn->lhs_contract.n != dn->rhs_contract.n ||
      !mark_dims(&dn->lhs_batch, lr, lused) || !mark_dims(&dn->lhs_contract, lr, lused) ||
      !mark_dims(&dn->rhs_batch, rr, rused) || !mark_dims(&dn->rhs_contract, rr, rused))
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "dot dimension numbers do not fit the operands");
  int lorder[TPU_MAX_RANK], rorder[TPU_MAX_RANK], lo = 0, ro = 0;
  int64_t odims[TPU_MAX_RANK];
  int orank = 0;
  int64_t nb = 1, nm = 1, nk = 1, nn = 1;
  for (int i = 0; i < dn->lhs_batch.n; i++) {
    int64_t l = lhs->dims[dn->lhs_batch.v[i]], r = rhs->dims[dn->rhs_batch.v[i]];
    if (l != r) return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "dot batch dimension %d sizes differ: %lld vs %lld", i, (long long)l, (long long)r);
    lorder[lo++] = (int)dn->lhs_batch.v[i];
    rorder[ro++] = (int)dn->rhs_batch.v[i];
    odims[orank++] = l;
    nb *= l;
  }
  for (int k = 0; k < lr; k++)
    if (!lused[k]) lorder[lo++] = k, odims[orank++] = lhs->dims[k], nm *= lhs->dims[k];
  for (int i = 0; i < dn->lhs_contract.n; i++) {
    int64_t l = lhs->dims[dn->lhs_contract.v[i]], r = rhs->dims[dn->rhs_contract.v[i]];
    if (l != r) return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "dot contracting dimension %d sizes differ: %lld vs %lld", i, (long long)l, (long long)r);
    lorder[lo++] = (int)dn->lhs_contract.v[i];
    rorder[ro++] = (int)dn->rhs_contract.v[i];
    nk *= l;
  }
  for (int k = 0; k < rr; k++)
    if (!rused[k]) {
      rorder[ro++] = k;
      if (orank >= TPU_MAX_RANK) return TPU_FAIL(d, TPU_ERR_LIMIT, in->loc, "dot result rank exceeds %d", TPU_MAX_RANK);
      odims[orank++] = rhs->dims[k];
      nn *= rhs->dims[k];
    }
  int same = tpu_dtype_is_array(in->shape.dtype) && in->shape.rank == orank;
  for (int k = 0; same && k < orank; k++) same = in->shape.dims[k] == odims[k];
  if (!same) return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "dot result shape does not match its operands");
  TPU_TRY(tpu_tensor_alloc_uninit(out, in->shape.dtype, orank, odims, d));

  acc_kind k = acc_of(lhs->dtype, rhs->dtype, out->dtype);
  int64_t on = nb * nm * nn;
  void *pa = pack(lhs, k, lorder), *pb = pack(rhs, k, rorder);
  void *pc = tpu_calloc((size_t)(on ? on : 1), acc_size(k));
  if (!pa || !pb || !pc) {
    pack_free(pa, lhs, k);
    pack_free(pb, rhs, k);
    tpu_free(pc);
    tpu_tensor_free(out);
    return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  }
  if (k == ACC_F32) tpu_gemm_f32_seq(pa, pb, pc, nb, nm, nk, nn, 0); /* GEMM(float)'s order */
  else if (k == ACC_F64) GEMM(double);
  else if (k == ACC_C64) CGEMM(float);
  else if (k == ACC_C128) CGEMM(double);
  else GEMM(uint64_t);
  store_all(k, pc, out, on);
  pack_free(pa, lhs, k);
  pack_free(pb, rhs, k);
  tpu_free(pc);
  return TPU_OK;
}

/* ---- convolution ---- */

/* One output element: the sum over kernel spatial positions (row-major over spatial
 * dimensions 0, 1, ...; the outer loop) and then over the input features of the group
 * (the inner loop), in that order, from zero. Positions on padding or on lhs-dilation
 * holes are skipped (they are zeros). */
#define CONV_SUM(T)                                                                      \
  do {                                                                                   \
    const T *L = pl, *R = pr;                                                            \
    T acc = 0;                                                                           \
    int64_t ks[TPU_MAX_RANK] = {0};                                                      \
    for (int64_t q = 0; q < nkpos; q++) {                                                \
      int64_t loff = lbase, roff = rbase;                                                \
      int valid = 1;                                                                     \
      for (int s = 0; s < ns && valid; s++) {                                            \
        const tpu_window_dim *w = &in->window[s];                                        \
        int64_t p = oidx[cd->out_spatial[s]] * w->stride - w->pad_lo + ks[s] * w->window_dilation; \
        if (w->base_dilation > 1) {                                                      \
          if (p % w->base_dilation) valid = 0;                                           \
          p /= w->base_dilation;                                                         \
        }                                                                                \
        if (p < 0 || p >= lhs->dims[cd->in_spatial[s]]) valid = 0;                      \
        loff += p * lstr[cd->in_spatial[s]];                                             \
        roff += (w->reversal ? kdims[s] - 1 - ks[s] : ks[s]) * rstr[cd->k_spatial[s]];   \
      }                                                                                  \
      if (valid)                                                                         \
        for (int64_t z = 0; z < kin; z++) acc += L[loff + z * lfs] * R[roff + z * rfs];  \
      for (int s = ns - 1; s >= 0; s--) {                                                \
        if (++ks[s] < kdims[s]) break;                                                   \
        ks[s] = 0;                                                                       \
      }                                                                                  \
    }                                                                                    \
    ((T *)pc)[e] = acc;                                                                  \
  } while (0)

/* An f32-accumulated convolution as patches x kernel on the sequential-sum GEMM: each
 * output element gets the same products in the same order as CONV_SUM (kernel position,
 * then input feature), except that a position on padding or a dilation hole adds the
 * product +0 x w instead of nothing. That changes nothing when w is finite (the sum is never
 * -0, so adding a zero leaves it as it is), so it runs only when every kernel value is
 * finite; *done = 0 leaves the convolution to the direct loop. */
static tpu_status conv_gemm(const tpu_instr *in, const tpu_tensor *lhs, const tpu_tensor *rhs, tpu_tensor *out,
                            int *done, tpu_diag *d) {
  tpu_conv_geom g;
  *done = 0;
  if (!tpu_conv_geom_init(in, lhs->dims, rhs->dims, &g)) return TPU_OK;
  int lorder[TPU_MAX_RANK], rorder[TPU_MAX_RANK];
  tpu_conv_pack_orders(in, lorder, rorder);
  int64_t M = g.nob * g.nsp, K = g.nkpos * g.kin, on = tpu_tensor_numel(out), rn = tpu_tensor_numel(rhs);
  float *pl = pack(lhs, ACC_F32, lorder), *pr = pack(rhs, ACC_F32, rorder);
  float *pc = tpu_calloc((size_t)(on ? on : 1), sizeof *pc);
  int64_t *off = tpu_malloc(sizeof *off * tpu_conv_count(M));
  int64_t fs, maxn = g.cout / (g.G > g.BG ? g.G : g.BG), mb = tpu_conv_row_block(&g);
  float *A = tpu_malloc(sizeof *A * tpu_conv_count(mb * K));
  float *W = tpu_malloc(sizeof *W * tpu_conv_count(K * maxn));
  float *C = tpu_malloc(sizeof *C * tpu_conv_count(mb * maxn));
  tpu_status st = TPU_OK;
  if (!pl || !pr || !pc || !off || !A || !W || !C) st = TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  int finite = 1;
  for (int64_t i = 0; st == TPU_OK && i < rn; i++) finite &= isfinite(pr[i]) != 0;
  if (st == TPU_OK && finite) {
    tpu_conv_out_offsets(in, &g, off, &fs);
    for (int64_t o0 = 0; o0 < g.cout;) {
      int64_t o1 = tpu_conv_run_end(&g, o0), N = o1 - o0;
      tpu_conv_kernel_matrix(in, &g, pr, o0, o1, W);
      for (int64_t m0 = 0; m0 < M; m0 += mb) {
        int64_t m1 = m0 + mb < M ? m0 + mb : M;
        tpu_conv_patches(in, &g, pl, o0, m0, m1, A);
        tpu_gemm_f32_seq(A, W, C, 1, m1 - m0, K, N, 0);
        for (int64_t m = m0; m < m1; m++)
          for (int64_t j = 0; j < N; j++) pc[off[m] + (o0 + j) * fs] = C[(m - m0) * N + j];
      }
      o0 = o1;
    }
    store_all(ACC_F32, pc, out, on);
    *done = 1;
  }
  pack_free(pl, lhs, ACC_F32);
  pack_free(pr, rhs, ACC_F32);
  tpu_free(pc);
  tpu_free(off);
  tpu_free(A);
  tpu_free(W);
  tpu_free(C);
  return st;
}

/* Convolution as XLA defines it (ConvGeneralDilated): the lhs is dilated by
 * base_dilation (lhs_dilate) and padded by pad_lo/pad_hi (negative = cropped), the kernel
 * is dilated by window_dilation (rhs_dilate) and optionally reversed, and slides by stride.
 * feature_group_count G: input features split into G groups of C_in/G (the kernel's input
 * feature size); output feature o uses group o / (C_out/G). batch_group_count BG: the
 * input batch splits into BG groups of N/BG (the output batch size); output feature o uses
 * batch group o / (C_out/BG), i.e. input batch b + group*(N/BG). */
static tpu_status conv_kernel(const tpu_instr *in, const tpu_tensor *lhs, const tpu_tensor *rhs, tpu_tensor *out,
                              tpu_diag *d) {
  const tpu_conv_dims *cd = in->conv;
  int ns = cd->nspatial;
  if (!in->has_conv_dims || lhs->rank != ns + 2 || rhs->rank != ns + 2 || in->nwindow != ns ||
      !tpu_dtype_is_array(in->shape.dtype) || in->shape.rank != ns + 2)
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "convolution dim_labels and window do not fit the operand ranks");
  int64_t G = in->feature_group_count, BG = in->batch_group_count;
  int64_t nin = lhs->dims[cd->in_batch], cin = lhs->dims[cd->in_feature];
  int64_t kin = rhs->dims[cd->k_in], cout = rhs->dims[cd->k_out];
  if (G < 1 || BG < 1 || kin * G != cin || cout % G || nin % BG || cout % BG)
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc,
                    "convolution feature/batch group counts (%lld, %lld) do not divide the features and batch",
                    (long long)G, (long long)BG);
  int64_t odims[TPU_MAX_RANK], kdims[TPU_MAX_RANK];
  odims[cd->out_batch] = nin / BG;
  odims[cd->out_feature] = cout;
  for (int s = 0; s < ns; s++) {
    const tpu_window_dim *w = &in->window[s];
    kdims[s] = rhs->dims[cd->k_spatial[s]];
    if (w->size != kdims[s] || w->stride < 1 || w->base_dilation < 1 || w->window_dilation < 1)
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "convolution window dimension %d does not match the kernel", s);
    int64_t n = lhs->dims[cd->in_spatial[s]];
    int64_t padded = (n ? (n - 1) * w->base_dilation + 1 : 0) + w->pad_lo + w->pad_hi;
    int64_t eff = kdims[s] ? (kdims[s] - 1) * w->window_dilation + 1 : 0;
    odims[cd->out_spatial[s]] = padded >= eff ? (padded - eff) / w->stride + 1 : 0;
  }
  for (int k = 0; k < ns + 2; k++)
    if (in->shape.dims[k] != odims[k])
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "convolution result dimension %d is %lld, expected %lld", k,
                      (long long)in->shape.dims[k], (long long)odims[k]);
  TPU_TRY(tpu_tensor_alloc_uninit(out, in->shape.dtype, ns + 2, odims, d));

  acc_kind k = acc_of(lhs->dtype, rhs->dtype, out->dtype);
  if (k == ACC_F32) {
    int done = 0;
    tpu_status st = conv_gemm(in, lhs, rhs, out, &done, d);
    if (st != TPU_OK || done) {
      if (st != TPU_OK) tpu_tensor_free(out);
      return st;
    }
  }
  int ident[TPU_MAX_RANK];
  for (int i = 0; i < TPU_MAX_RANK; i++) ident[i] = i;
  int64_t on = tpu_tensor_numel(out);
  void *pl = pack(lhs, k, ident), *pr = pack(rhs, k, ident);
  void *pc = tpu_calloc((size_t)(on ? on : 1), acc_size(k));
  if (!pl || !pr || !pc) {
    pack_free(pl, lhs, k);
    pack_free(pr, rhs, k);
    tpu_free(pc);
    tpu_tensor_free(out);
    return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  }
  int64_t lstr[TPU_MAX_RANK], rstr[TPU_MAX_RANK], oidx[TPU_MAX_RANK] = {0};
  tpu__ref_strides(ns + 2, lhs->dims, lstr);
  tpu__ref_strides(ns + 2, rhs->dims, rstr);
  int64_t nkpos = 1;
  for (int s = 0; s < ns; s++) nkpos *= kdims[s];
  int64_t lfs = lstr[cd->in_feature], rfs = rstr[cd->k_in];
  int64_t ogroup = cout / G, obgroup = cout / BG, bsize = nin / BG;
  for (int64_t e = 0; e < on; e++) {
    int64_t of = oidx[cd->out_feature], ob = oidx[cd->out_batch];
    int64_t fg = of / ogroup, bg = of / obgroup;
    int64_t lbase = (ob + bg * bsize) * lstr[cd->in_batch] + fg * kin * lfs;
    int64_t rbase = of * rstr[cd->k_out];
    if (k == ACC_F32) CONV_SUM(float);
    else if (k == ACC_F64) CONV_SUM(double);
    else CONV_SUM(uint64_t);
    for (int j = ns + 1; j >= 0; j--) {
      if (++oidx[j] < odims[j]) break;
      oidx[j] = 0;
    }
  }
  for (int64_t e = 0; e < on; e++) store_acc(k, pc, out, e);
  pack_free(pl, lhs, k);
  pack_free(pr, rhs, k);
  tpu_free(pc);
  return TPU_OK;
}

tpu_status tpu__ref_dot_conv(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                             tpu_diag *d) {
  (void)ip;
  tpu_tensor_zero(out);
  if (in->noperands != 2) return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "%s takes 2 operands", tpu_op_name(in->op));
  if (in->op == TPU_OP_DOT) return dot_kernel(in, args[0], args[1], out, d);
  if (in->op == TPU_OP_CONVOLUTION) return conv_kernel(in, args[0], args[1], out, d);
  return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "op '%s' is not a dot or convolution", tpu_op_name(in->op));
}
