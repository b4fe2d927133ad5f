/* Chip executor values: dot and convolution on the MXU numerics inside the reference interpreter. */
#include "chip/exec.h"

#include <string.h>

#include "base/alloc.h"
#include "base/bf16.h"
#include "chip/mxu_kernel_int.h"
#include "ref/im2col.h"
#include "ref/ref.h"

typedef struct {
  const tpu_chip *chip;
  int precision_override; /* -1, or a tpu_precision */
  tpu_loop_trips *trips;  /* NULL: not recorded */
} exec_ctx;

static int is_mxu_float(tpu_dtype t) { return t == TPU_BF16 || t == TPU_F16 || t == TPU_F32; }

tpu_exec_path tpu_chip_exec_path(tpu_dtype lhs, tpu_dtype rhs, tpu_dtype result) {
  if (lhs == TPU_S8 && rhs == TPU_S8) {
    int narrow_int = tpu_dtype_is_int(result) && result != TPU_PRED && !tpu_dtype_is_int4(result) &&
                     tpu_dtype_size(result) <= 4; /* an s4/u4 result wraps on the reference path */
    return narrow_int ? TPU_EXEC_S8 : TPU_EXEC_REF;
  }
  if (!is_mxu_float(lhs) || !is_mxu_float(rhs) || !is_mxu_float(result)) return TPU_EXEC_REF;
  if (lhs == TPU_BF16 && rhs == TPU_BF16) return TPU_EXEC_BF16;
  return TPU_EXEC_F32;
}

/* Element i of a bf16/f16/f32/s8 array as f32 (exact for all four). */
static float load_f32(const tpu_tensor *t, int64_t i) {
  switch (t->dtype) {
    case TPU_BF16: return tpu_bf16_to_f32(((const tpu_bf16 *)t->data)[i]);
    case TPU_F16: return tpu_f16_to_f32(((const tpu_f16 *)t->data)[i]);
    case TPU_F32: return ((const float *)t->data)[i];
    case TPU_S8: return (float)((const int8_t *)t->data)[i];
    default: return 0.0f;
  }
}

/* Copies t into buf as f32, its dimensions visited in `order` (the first slowest). */
static void pack_f32(const tpu_tensor *t, const int *order, float *buf) {
  int rank = t->rank;
  int64_t n = tpu_tensor_numel(t), str[TPU_MAX_RANK], pd[TPU_MAX_RANK], ps[TPU_MAX_RANK], idx[TPU_MAX_RANK] = {0};
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) str[i] = s, s *= t->dims[i];
  for (int j = 0; j < rank; j++) pd[j] = t->dims[order[j]], ps[j] = str[order[j]];
  if (rank == 0) {
    if (n) buf[0] = load_f32(t, 0);
    return;
  }
  /* f32 or bf16 visited transposed (the fastest visited dimension strided, the next one
   * contiguous): TILE x TILE tiles, so that each source line read is used whole (an
   * attention's K, [b, kv, h, d] visited as [b, h, d, kv], read element by element a line
   * apart took 30 % of a warm `tpusim run`). */
  enum { TILE = 16 };
  if ((t->dtype == TPU_F32 || t->dtype == TPU_BF16) && rank >= 2 && ps[rank - 1] != 1 && ps[rank - 2] == 1 &&
      pd[rank - 1] >= TILE && pd[rank - 2] >= TILE) {
    int64_t ni = pd[rank - 1], si = ps[rank - 1], nj = pd[rank - 2], off = 0;
    for (int64_t e = 0; e < n; e += ni * nj) {
      float *o = buf + e;
      for (int64_t j0 = 0; j0 < nj; j0 += TILE)
        for (int64_t i0 = 0; i0 < ni; i0 += TILE) {
          int64_t j1 = j0 + TILE < nj ? j0 + TILE : nj, i1 = i0 + TILE < ni ? i0 + TILE : ni;
          if (t->dtype == TPU_F32) {
            const float *p = (const float *)t->data + off;
            for (int64_t jj = j0; jj < j1; jj++)
              for (int64_t ii = i0; ii < i1; ii++) o[jj * ni + ii] = p[jj + ii * si];
          } else {
            const tpu_bf16 *p = (const tpu_bf16 *)t->data + off;
            for (int64_t jj = j0; jj < j1; jj++)
              for (int64_t ii = i0; ii < i1; ii++) o[jj * ni + ii] = tpu_bf16_to_f32(p[jj + ii * si]);
          }
        }
      for (int j = rank - 3; j >= 0; j--) {
        off += ps[j];
        if (++idx[j] < pd[j]) break;
        off -= ps[j] * pd[j];
        idx[j] = 0;
      }
    }
    return;
  }
  /* Runs along the fastest visited dimension, typed. */
  int64_t off = 0, len = pd[rank - 1], st = ps[rank - 1];
  for (int64_t e = 0; e < n; e += len) {
    float *o = buf + e;
    switch (t->dtype) {
      case TPU_F32: {
        const float *p = (const float *)t->data + off;
        if (st == 1) memcpy(o, p, sizeof *o * (size_t)len);
        else for (int64_t i = 0; i < len; i++) o[i] = p[i * st];
        break;
      }
      case TPU_BF16: {
        const tpu_bf16 *p = (const tpu_bf16 *)t->data + off;
        for (int64_t i = 0; i < len; i++) o[i] = tpu_bf16_to_f32(p[i * st]);
        break;
      }
      default:
        for (int64_t i = 0; i < len; i++) o[i] = load_f32(t, off + i * st);
        break;
    }
    for (int j = rank - 2; j >= 0; j--) {
      off += ps[j];
      if (++idx[j] < pd[j]) break;
      off -= ps[j] * pd[j];
      idx[j] = 0;
    }
  }
}

/* out[M,N] = A[M,K] x W[K,N] (nb of them, back to back) on the MXU path `p` (A and W hold
 * f32 values exact in the path's input type). F32 and BF16 write f32 sums to out_f; S8
 * writes s32 sums to out_i. F32 at DEFAULT precision rounds A and W to bf16 in place (one
 * pass, the array's input) unless `rounded` says they already are. */
static tpu_status mxu_gemm(tpu_exec_path p, tpu_precision prec, int64_t R, float *A, float *W, int rounded, int64_t nb,
                           int64_t M, int64_t K, int64_t N, float *out_f, int32_t *out_i, const tpu_instr *in,
                           tpu_diag *d) {
  if (nb == 0 || M == 0 || N == 0) return TPU_OK;
  if (K == 0) { /* an empty sum: +0 */
    if (out_f) memset(out_f, 0, sizeof *out_f * (size_t)(nb * M * N));
    if (out_i) memset(out_i, 0, sizeof *out_i * (size_t)(nb * M * N));
    return TPU_OK;
  }
  if ((p == TPU_EXEC_F32 && prec == TPU_PREC_DEFAULT) || p == TPU_EXEC_BF16) {
    if (p == TPU_EXEC_F32 && !rounded) {
      tpu__mxu_round_bf16(A, (size_t)(nb * M * K), A);
      tpu__mxu_round_bf16(W, (size_t)(nb * K * N), W);
    }
    tpu__mxu_matmul_bf16f(A, W, out_f, nb, M, K, N, R, 0);
    return TPU_OK;
  }
  if (p == TPU_EXEC_F32) {
    tpu_diag md;
    tpu_status st = tpu__mxu_matmul_f32_batch(A, W, out_f, nb, M, K, N, R, prec, 0, &md);
    if (st != TPU_OK) return TPU_FAIL(d, st, in->loc, "'%s' on the MXU: %s", in->name, md.msg);
    return TPU_OK;
  }
  size_t na = (size_t)(nb * M * K), nw = (size_t)(nb * K * N);
  int8_t *a = tpu_malloc(na), *w = tpu_malloc(nw);
  if (!a || !w) {
    tpu_free(a);
    tpu_free(w);
    return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory running '%s' on the MXU", in->name);
  }
  for (size_t i = 0; i < na; i++) a[i] = (int8_t)A[i];
  for (size_t i = 0; i < nw; i++) w[i] = (int8_t)W[i];
  for (int64_t b = 0; b < nb; b++) tpu_mxu_matmul_s8(a + b * M * K, w + b * K * N, out_i + b * M * N, M, K, N, 0);
  tpu_free(a);
  tpu_free(w);
  return TPU_OK;
}

/* Stores one MXU result into element i of out: f32 sums rounded once to the float result
 * type; s32 sums wrapped to the integer result type (at most 32 bits). */
static void store_result(tpu_tensor *o, int64_t i, const float *sf, const int32_t *si, int64_t k) {
  void *p = o->data;
  if (si) {
    uint32_t u = (uint32_t)si[k];
    switch (o->dtype) {
      case TPU_S8:
      case TPU_U8: ((uint8_t *)p)[i] = (uint8_t)u; break;
      case TPU_S16:
      case TPU_U16: ((uint16_t *)p)[i] = (uint16_t)u; break;
      default: memcpy((char *)p + 4 * i, &u, 4); break;
    }
    return;
  }
  float v = sf[k];
  switch (o->dtype) {
    case TPU_BF16: ((tpu_bf16 *)p)[i] = tpu_bf16_from_f32(v); break;
    case TPU_F16: ((tpu_f16 *)p)[i] = tpu_f16_from_f32(v); break;
    default: ((float *)p)[i] = v; break;
  }
}

static tpu_precision precision_of(const exec_ctx *c, const tpu_instr *in) {
  if (c->precision_override >= 0) return (tpu_precision)c->precision_override;
  int p = in->precision[0] > in->precision[1] ? (int)in->precision[0] : (int)in->precision[1];
  return p >= TPU_PREC_CFG_HIGHEST ? TPU_PREC_HIGHEST : p == TPU_PREC_CFG_HIGH ? TPU_PREC_HIGH : TPU_PREC_DEFAULT;
}

/* Buffers for one MXU call (through the tensor pool); freed together. */
typedef struct {
  float *a, *w, *of;
  int32_t *oi;
  size_t na, nw, no; /* bytes */
} bufs;

static void bufs_free(bufs *b) {
  if (b->a) tpu_pool_free(b->a, b->na);
  if (b->w) tpu_pool_free(b->w, b->nw);
  if (b->of) tpu_pool_free(b->of, b->no);
  if (b->oi) tpu_pool_free(b->oi, b->no);
  memset(b, 0, sizeof *b);
}

/* Allocates A (na), W (nw) and the result (no) for path p; 0 when memory runs out. */
static int bufs_alloc(bufs *b, tpu_exec_path p, int64_t na, int64_t nw, int64_t no) {
  memset(b, 0, sizeof *b);
  b->na = sizeof(float) * (size_t)(na ? na : 1);
  b->nw = sizeof(float) * (size_t)(nw ? nw : 1);
  b->no = (p == TPU_EXEC_S8 ? sizeof(int32_t) : sizeof(float)) * (size_t)(no ? no : 1);
  b->a = tpu_pool_alloc(b->na);
  b->w = tpu_pool_alloc(b->nw);
  if (p == TPU_EXEC_S8) b->oi = tpu_pool_alloc(b->no);
  else b->of = tpu_pool_alloc(b->no);
  if (b->a && b->w && (b->oi || b->of)) return 1;
  bufs_free(b);
  return 0;
}

/* ---- dot ---- */

static tpu_status dot_mxu(const exec_ctx *c, tpu_exec_path p, const tpu_instr *in, const tpu_tensor *lhs,
                          const tpu_tensor *rhs, tpu_tensor *out, int *handled, tpu_diag *d) {
  const tpu_dot_dims *dn = &in->dot;
  int lr = lhs->rank, rr = rhs->rank;
  int lused[TPU_MAX_RANK] = {0}, rused[TPU_MAX_RANK] = {0};
  int lorder[TPU_MAX_RANK], rorder[TPU_MAX_RANK], lo = 0, ro = 0;
  int64_t nb = 1, nm = 1, nk = 1, nn = 1;
  /* A dot with a vector operand, or contracting only size-1 dimensions, runs on the vector
   * unit at f32 (the compiler's multiply + reduce, or multiply of broadcasts;
   * compile/passes/dot_reduce.c): the reference kernel's values. */
  if (tpu_dot_on_vector_unit(in, NULL) || tpu_dot_unit_contraction(in)) return TPU_OK;
  /* The module is verified; anything odd goes to the reference kernel, which reports it. */
  if (dn->lhs_batch.n != dn->rhs_batch.n || dn->lhs_contract.n != dn->rhs_contract.n) return TPU_OK;
  for (int i = 0; i < dn->lhs_batch.n; i++) {
    int l = (int)dn->lhs_batch.v[i], r = (int)dn->rhs_batch.v[i];
    if (l < 0 || l >= lr || r < 0 || r >= rr || lused[l] || rused[r] || lhs->dims[l] != rhs->dims[r]) return TPU_OK;
    lused[l] = rused[r] = 1;
    lorder[lo++] = l, rorder[ro++] = r, nb *= lhs->dims[l];
  }
  for (int i = 0; i < dn->lhs_contract.n; i++) {
    int l = (int)dn->lhs_contract.v[i], r = (int)dn->rhs_contract.v[i];
    if (l < 0 || l >= lr || r < 0 || r >= rr || lused[l] || rused[r] || lhs->dims[l] != rhs->dims[r]) return TPU_OK;
    lused[l] = rused[r] = 1;
  }
  for (int k = 0; k < lr; k++)
    if (!lused[k]) lorder[lo++] = k, nm *= lhs->dims[k];
  for (int i = 0; i < dn->lhs_contract.n; i++) {
    int l = (int)dn->lhs_contract.v[i], r = (int)dn->rhs_contract.v[i];
    lorder[lo++] = l, rorder[ro++] = r, nk *= lhs->dims[l];
  }
  for (int k = 0; k < rr; k++)
    if (!rused[k]) rorder[ro++] = k, nn *= rhs->dims[k];
  if (nb * nm * nn != tpu_shape_numel(&in->shape)) return TPU_OK;

  bufs b;
  if (!bufs_alloc(&b, p, nb * nm * nk, nb * nk * nn, nb * nm * nn))
    return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory running '%s' on the MXU", in->name);
  tpu_status ast = tpu_tensor_alloc_uninit(out, in->shape.dtype, in->shape.rank, in->shape.dims, d);
  if (ast != TPU_OK) {
    bufs_free(&b);
    return ast;
  }
  pack_f32(lhs, lorder, b.a);
  pack_f32(rhs, rorder, b.w);
  tpu_precision prec = precision_of(c, in);
  tpu_status st = mxu_gemm(p, prec, c->chip->mxu_rows, b.a, b.w, 0, nb, nm, nk, nn, b.of, b.oi, in, d);
  if (st != TPU_OK) {
    bufs_free(&b);
    tpu_tensor_free(out);
    return st;
  }
  if (out->dtype == TPU_F32 && b.of)
    memcpy(out->data, b.of, sizeof(float) * (size_t)(nb * nm * nn));
  else
    for (int64_t e = 0; e < nb * nm * nn; e++) store_result(out, e, b.of, b.oi, e);
  bufs_free(&b);
  *handled = 1;
  return TPU_OK;
}

/* ---- convolution (im2col) ---- */

/* Convolution as patches x kernel (ref/im2col.h) on the MXU path: positions on padding or
 * lhs-dilation holes feed +0 into the array, as a TPU's padded input does. Rows are built
 * and multiplied in blocks; each output element is the same whatever the block. */
static tpu_status conv_mxu(const exec_ctx *c, tpu_exec_path p, const tpu_instr *in, const tpu_tensor *lhs,
                           const tpu_tensor *rhs, tpu_tensor *out, int *handled, tpu_diag *d) {
  const tpu_conv_dims *cd = in->conv;
  int ns = cd->nspatial;
  tpu_conv_geom g;
  /* Shapes the reference kernel would reject go to it for its message. */
  if (!in->has_conv_dims || lhs->rank != ns + 2 || rhs->rank != ns + 2 || !tpu_conv_geom_init(in, lhs->dims, rhs->dims, &g))
    return TPU_OK;
  int lorder[TPU_MAX_RANK], rorder[TPU_MAX_RANK];
  tpu_conv_pack_orders(in, lorder, rorder);
  int64_t M = g.nob * g.nsp, K = g.nkpos * g.kin, mb = tpu_conv_row_block(&g), fs;
  int64_t maxn = g.cout / (g.G > g.BG ? g.G : g.BG);
  size_t npl = sizeof(float) * tpu_conv_count(tpu_tensor_numel(lhs));
  size_t npr = sizeof(float) * tpu_conv_count(tpu_tensor_numel(rhs)), noff = sizeof(int64_t) * tpu_conv_count(M);
  float *pl = tpu_pool_alloc(npl), *pr = tpu_pool_alloc(npr);
  int64_t *off = tpu_pool_alloc(noff);
  bufs b;
  int ok = bufs_alloc(&b, p, mb * K, K * maxn, mb * maxn);
  if (!pl || !pr || !off || !ok) {
    tpu_pool_free(pl, npl);
    tpu_pool_free(pr, npr);
    tpu_pool_free(off, noff);
    if (ok) bufs_free(&b);
    return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory running '%s' on the MXU", in->name);
  }
  tpu_status st = tpu_tensor_alloc_uninit(out, in->shape.dtype, ns + 2, g.odims, d);
  if (st == TPU_OK) {
    pack_f32(lhs, lorder, pl);
    pack_f32(rhs, rorder, pr);
    tpu_conv_out_offsets(in, &g, off, &fs);
    tpu_precision prec = precision_of(c, in);
    /* DEFAULT rounds each value to bf16: do it once on the operands, not on the patches. */
    int rounded = p == TPU_EXEC_F32 && prec == TPU_PREC_DEFAULT;
    if (rounded) {
      tpu__mxu_round_bf16(pl, (size_t)tpu_tensor_numel(lhs), pl);
      tpu__mxu_round_bf16(pr, (size_t)tpu_tensor_numel(rhs), pr);
    }
    for (int64_t o0 = 0; st == TPU_OK && o0 < g.cout;) {
      int64_t o1 = tpu_conv_run_end(&g, o0), N = o1 - o0;
      tpu_conv_kernel_matrix(in, &g, pr, o0, o1, b.w);
      for (int64_t m0 = 0; st == TPU_OK && m0 < M; m0 += mb) {
        int64_t m1 = m0 + mb < M ? m0 + mb : M;
        tpu_conv_patches(in, &g, pl, o0, m0, m1, b.a);
        st = mxu_gemm(p, prec, c->chip->mxu_rows, b.a, b.w, rounded, 1, m1 - m0, K, N, b.of, b.oi, in, d);
        if (st == TPU_OK && out->dtype == TPU_F32 && b.of) {
          float *o = out->data;
          for (int64_t m = m0; m < m1; m++)
            for (int64_t j = 0; j < N; j++) o[off[m] + (o0 + j) * fs] = b.of[(m - m0) * N + j];
        } else {
          for (int64_t m = m0; st == TPU_OK && m < m1; m++)
            for (int64_t j = 0; j < N; j++) store_result(out, off[m] + (o0 + j) * fs, b.of, b.oi, (m - m0) * N + j);
        }
      }
      o0 = o1;
    }
    if (st != TPU_OK) tpu_tensor_free(out);
  }
  tpu_pool_free(pl, npl);
  tpu_pool_free(pr, npr);
  tpu_pool_free(off, noff);
  bufs_free(&b);
  if (st == TPU_OK) *handled = 1;
  return st;
}

static tpu_status mxu_dot_conv(void *user, const tpu_instr *in, const tpu_tensor *lhs, const tpu_tensor *rhs,
                               tpu_tensor *out, int *handled, tpu_diag *d) {
  const exec_ctx *c = user;
  *handled = 0;
  tpu_exec_path p = tpu_chip_exec_path(lhs->dtype, rhs->dtype, in->shape.dtype);
  if (p == TPU_EXEC_REF) return TPU_OK;
  if (in->op == TPU_OP_DOT) return dot_mxu(c, p, in, lhs, rhs, out, handled, d);
  if (in->op == TPU_OP_CONVOLUTION) return conv_mxu(c, p, in, lhs, rhs, out, handled, d);
  return TPU_OK;
}

void tpu_loop_trips_free(tpu_loop_trips *t) {
  if (!t) return;
  tpu_mosaic_seen_free(&t->mosaic);
  tpu_free(t->v);
  memset(t, 0, sizeof *t);
}

static tpu_status record_while(void *user, const tpu_instr *in, int64_t iters, tpu_diag *d) {
  tpu_loop_trips *t = ((const exec_ctx *)user)->trips;
  for (int i = 0; i < t->n; i++)
    if (in->loc.line > 0 ? tpu_loc_same(t->v[i].loc, in->loc) : !strcmp(t->v[i].name, in->name)) {
      t->v[i].iters += iters;
      t->v[i].runs++;
      return TPU_OK;
    }
  if (t->n == t->cap) {
    int cap = t->cap ? 2 * t->cap : 8;
    tpu_loop_trip *v = tpu_realloc(t->v, sizeof *v * (size_t)cap);
    if (!v) return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory recording loop trips");
    t->v = v;
    t->cap = cap;
  }
  t->v[t->n++] = (tpu_loop_trip){tpu_instr_user_name(in), in->loc, iters, 1};
  return TPU_OK;
}

static tpu_status record_mosaic(void *user, const tpu_instr *in, const tpu_tensor *const *args, int n, int64_t flat,
                                tpu_diag *d) {
  return tpu_mosaic_seen_add(&((const exec_ctx *)user)->trips->mosaic, in, args, n, flat, d);
}

tpu_status tpu_chip_run_values(const tpu_module *m, const tpu_chip *chip, int precision_override,
                               const tpu_tensor *args, int nargs, tpu_tensor *out, tpu_diag *d) {
  return tpu_chip_run_values_trips(m, chip, precision_override, args, nargs, NULL, out, d);
}

tpu_status tpu_chip_run_values_trips(const tpu_module *m, const tpu_chip *chip, int precision_override,
                                     const tpu_tensor *args, int nargs, tpu_loop_trips *trips, tpu_tensor *out,
                                     tpu_diag *d) {
  return tpu_chip_run_values_dev(m, chip, precision_override, NULL, args, nargs, trips, out, d);
}

tpu_status tpu_chip_run_values_dev(const tpu_module *m, const tpu_chip *chip, int precision_override,
                                   const tpu_ref_comm *comm, const tpu_tensor *args, int nargs, tpu_loop_trips *trips,
                                   tpu_tensor *out, tpu_diag *d) {
  memset(out, 0, sizeof *out);
  if (!chip || chip->mxu_rows < 1)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "the chip has no MXU rows to run a matmul on");
  if (precision_override > TPU_PREC_HIGHEST)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "unknown precision %d", precision_override);
  exec_ctx c = {chip, precision_override < 0 ? -1 : precision_override, trips};
  /* scans in the XLA TPU compiler's blocks of 128 (its reduce-window rewrite's base length) */
  tpu_ref_opts o = {mxu_dot_conv, &c, trips ? record_while : NULL, comm, "the TPU back end", 128,
                    trips ? record_mosaic : NULL, 1};
  return tpu_ref_run_opts(m, args, nargs, &o, out, d);
}
