/* Convolution as a matrix product: the patch (im2col) and kernel matrices, shared by the reference and the chip executor. */
#include "ref/im2col.h"

#include <string.h>

#include "base/par.h"

int tpu_conv_geom_init(const tpu_instr *in, const int64_t *ldims, const int64_t *rdims, tpu_conv_geom *g) {
  const tpu_conv_dims *cd = in->conv;
  int ns = cd->nspatial;
  memset(g, 0, sizeof *g);
  if (!in->has_conv_dims || in->nwindow != ns || ns + 2 > TPU_MAX_RANK || in->shape.rank != ns + 2) return 0;
  g->ns = ns;
  g->G = in->feature_group_count, g->BG = in->batch_group_count;
  g->nin = ldims[cd->in_batch], g->cin = ldims[cd->in_feature];
  g->kin = rdims[cd->k_in], g->cout = rdims[cd->k_out];
  if (g->G < 1 || g->BG < 1 || g->kin * g->G != g->cin || g->cout % g->G || g->nin % g->BG || g->cout % g->BG)
    return 0;
  g->nob = g->nin / g->BG;
  g->odims[cd->out_batch] = g->nob;
  g->odims[cd->out_feature] = g->cout;
  g->nsp = g->nkpos = 1;
  for (int s = 0; s < ns; s++) {
    const tpu_window_dim *w = &in->window[s];
    int64_t kd = rdims[cd->k_spatial[s]], n = ldims[cd->in_spatial[s]];
    if (w->size != kd || w->stride < 1 || w->base_dilation < 1 || w->window_dilation < 1) return 0;
    int64_t padded = (n ? (n - 1) * w->base_dilation + 1 : 0) + w->pad_lo + w->pad_hi;
    int64_t eff = kd ? (kd - 1) * w->window_dilation + 1 : 0;
    g->lsp[s] = n;
    g->ksp[s] = kd;
    g->osp[s] = padded >= eff ? (padded - eff) / w->stride + 1 : 0;
    g->odims[cd->out_spatial[s]] = g->osp[s];
    g->nsp *= g->osp[s];
    g->nkpos *= kd;
  }
  for (int k = 0; k < ns + 2; k++)
    if (in->shape.dims[k] != g->odims[k]) return 0;
  return 1;
}

void tpu_conv_pack_orders(const tpu_instr *in, int *lorder, int *rorder) {
  const tpu_conv_dims *cd = in->conv;
  int ns = cd->nspatial;
  lorder[0] = (int)cd->in_batch;
  for (int s = 0; s < ns; s++) lorder[1 + s] = (int)cd->in_spatial[s], rorder[s] = (int)cd->k_spatial[s];
  lorder[ns + 1] = (int)cd->in_feature;
  rorder[ns] = (int)cd->k_in;
  rorder[ns + 1] = (int)cd->k_out;
}

int64_t tpu_conv_run_end(const tpu_conv_geom *g, int64_t o0) {
  int64_t og = g->cout / g->G, obg = g->cout / g->BG;
  int64_t e1 = (o0 / og + 1) * og, e2 = (o0 / obg + 1) * obg;
  return e1 < e2 ? e1 : e2;
}

typedef struct {
  const tpu_instr *in;
  const tpu_conv_geom *g;
  const float *pl;
  int64_t b0, f0; /* first lhs batch index and feature of this run */
  int64_t m0; /* the first row of A */
  float *A;
} patch_job;

/* dst[0..n) = src[0..n), or +0s when src is NULL: short runs inline (no call per run). */
static inline void put_run(float *dst, const float *src, int64_t n) {
  if (n > 64) {
    if (src)
      memcpy(dst, src, sizeof *dst * (size_t)n);
    else
      memset(dst, 0, sizeof *dst * (size_t)n);
  } else if (src) {
    for (int64_t z = 0; z < n; z++) dst[z] = src[z];
  } else {
    for (int64_t z = 0; z < n; z++) dst[z] = 0.0f;
  }
}

/* The packed lhs offset of kernel position ks seen from output position opos, over the
 * first n spatial dimensions; *valid 0 when it falls on padding or a dilation hole. */
static int64_t lhs_offset(const patch_job *j, const int64_t *opos, const int64_t *ks, int n, const int64_t *lstr,
                          int *valid) {
  int64_t loff = 0;
  *valid = 1;
  for (int s = 0; s < n && *valid; s++) {
    const tpu_window_dim *w = &j->in->window[s];
    int64_t pos = opos[s] * w->stride - w->pad_lo + ks[s] * w->window_dilation;
    if (w->base_dilation > 1) {
      if (pos % w->base_dilation) *valid = 0;
      pos /= w->base_dilation;
    }
    if (pos < 0 || pos >= j->g->lsp[s]) *valid = 0;
    loff += pos * lstr[s + 1];
  }
  return loff;
}

static void patch_rows(void *ctx, int task, int64_t m0, int64_t m1) {
  const patch_job *j = ctx;
  const tpu_conv_geom *g = j->g;
  int ns = g->ns;
  int64_t K = g->nkpos * g->kin, kin = g->kin, lstr[TPU_MAX_RANK + 1];
  /* Strides of the packed lhs [batch, spatial..., feature]: lstr[0] the batch's, lstr[1 + s]
   * spatial dimension s's. */
  lstr[ns + 1] = 1;
  lstr[ns] = g->cin;
  for (int s = ns - 1; s >= 0; s--) lstr[s] = lstr[s + 1] * g->lsp[s];
  /* Along the last spatial dimension, kernel positions with no dilation read consecutive
   * input positions; with all the input features (one group) their features are one
   * contiguous run in both the input and the row: copied at once. */
  const tpu_window_dim *wl = ns ? &j->in->window[ns - 1] : NULL;
  int runs = ns && wl->window_dilation == 1 && wl->base_dilation == 1 && kin == g->cin;
  int64_t kw = ns ? g->ksp[ns - 1] : 1, nl = ns ? g->lsp[ns - 1] : 1;
  for (int64_t m = m0; m < m1; m++) {
    int64_t ob = m / g->nsp, sp = m % g->nsp, opos[TPU_MAX_RANK], ks[TPU_MAX_RANK] = {0};
    for (int s = ns - 1; s >= 0; s--) opos[s] = sp % g->osp[s], sp /= g->osp[s];
    const float *base = j->pl + (j->b0 + ob) * lstr[0] + j->f0;
    float *row = j->A + (m - j->m0) * K;
    if (runs) {
      int64_t p0 = opos[ns - 1] * wl->stride - wl->pad_lo; /* input position of kernel column 0 */
      int64_t lo = p0 < 0 ? -p0 : 0, hi = nl - p0 < kw ? nl - p0 : kw;
      if (hi < lo) hi = lo;
      for (int64_t q = 0; q < g->nkpos; q += kw) { /* the outer kernel positions */
        int valid;
        int64_t loff = lhs_offset(j, opos, ks, ns - 1, lstr, &valid);
        float *dst = row + q * kin;
        if (!valid || lo >= hi) {
          put_run(dst, NULL, kw * kin);
        } else {
          put_run(dst, NULL, lo * kin);
          put_run(dst + lo * kin, base + loff + (p0 + lo) * lstr[ns], (hi - lo) * kin);
          put_run(dst + hi * kin, NULL, (kw - hi) * kin);
        }
        for (int s = ns - 2; s >= 0; s--) {
          if (++ks[s] < g->ksp[s]) break;
          ks[s] = 0;
        }
      }
      continue;
    }
    for (int64_t q = 0; q < g->nkpos; q++) {
      int valid;
      int64_t loff = lhs_offset(j, opos, ks, ns, lstr, &valid);
      put_run(row + q * kin, valid ? base + loff : NULL, kin);
      for (int s = ns - 1; s >= 0; s--) {
        if (++ks[s] < g->ksp[s]) break;
        ks[s] = 0;
      }
    }
  }
  (void)task;
}

int64_t tpu_conv_row_block(const tpu_conv_geom *g) {
  /* Patches for about 512 KiB, which stay in a core's L2 while the product reads them; when
   * that is under 96 rows (a long K: the kernel matrix would be repacked too often), for
   * about 16 MiB. */
  int64_t K = g->nkpos * g->kin, M = g->nob * g->nsp, b = K > 0 ? ((int64_t)128 << 10) / K : M;
  if (b < 96) b = K > 0 ? ((int64_t)4 << 20) / K : M;
  if (b > M) b = M;
  return b < 1 ? 1 : b;
}

/* Threads for the patch rows: tasks own rows [m0 + lo, m0 + hi). */
static void patch_range(void *ctx, int task, int64_t lo, int64_t hi) {
  const patch_job *j = ctx;
  patch_rows(ctx, task, j->m0 + lo, j->m0 + hi);
}

void tpu_conv_patches(const tpu_instr *in, const tpu_conv_geom *g, const float *pl, int64_t o0, int64_t m0,
                      int64_t m1, float *A) {
  int64_t fg = o0 / (g->cout / g->G), bg = o0 / (g->cout / g->BG);
  patch_job j = {in, g, pl, bg * g->nob, fg * g->kin, m0, A};
  int64_t rows = m1 - m0;
  int t = tpu_par_threads(rows, (double)rows * (double)g->nkpos * (double)g->kin, 1 << 20);
  tpu_par_run(patch_range, &j, rows, t);
}

void tpu_conv_kernel_matrix(const tpu_instr *in, const tpu_conv_geom *g, const float *pr, int64_t o0, int64_t o1,
                            float *W) {
  int ns = g->ns;
  int64_t N = o1 - o0, kstr[TPU_MAX_RANK], ks[TPU_MAX_RANK] = {0};
  /* Strides of the packed kernel [spatial..., input feature, output feature]. */
  int64_t s1 = g->kin * g->cout;
  for (int s = ns - 1; s >= 0; s--) kstr[s] = s1, s1 *= g->ksp[s];
  for (int64_t q = 0; q < g->nkpos; q++) {
    int64_t roff = 0;
    for (int s = 0; s < ns; s++) roff += (in->window[s].reversal ? g->ksp[s] - 1 - ks[s] : ks[s]) * kstr[s];
    for (int64_t z = 0; z < g->kin; z++)
      memcpy(W + (q * g->kin + z) * N, pr + roff + z * g->cout + o0, sizeof *W * (size_t)N);
    for (int s = ns - 1; s >= 0; s--) {
      if (++ks[s] < g->ksp[s]) break;
      ks[s] = 0;
    }
  }
}

void tpu_conv_out_offsets(const tpu_instr *in, const tpu_conv_geom *g, int64_t *off, int64_t *fstride) {
  const tpu_conv_dims *cd = in->conv;
  int ns = g->ns;
  int64_t ostr[TPU_MAX_RANK], s1 = 1;
  for (int i = ns + 1; i >= 0; i--) ostr[i] = s1, s1 *= g->odims[i];
  *fstride = ostr[cd->out_feature];
  for (int64_t m = 0; m < g->nob * g->nsp; m++) {
    int64_t ob = m / g->nsp, sp = m % g->nsp, o = ob * ostr[cd->out_batch];
    for (int s = ns - 1; s >= 0; s--) o += (sp % g->osp[s]) * ostr[cd->out_spatial[s]], sp /= g->osp[s];
    off[m] = o;
  }
}
