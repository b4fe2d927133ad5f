/* The DCN model: a collective's exchange between slices, each chip's share through its
 * host's NICs (shared by the chips of the host that send at once), plus a latency per
 * dependent step (docs/pod.md, "Many slices"). */
#include "pod/dcn.h"

#include "base/alloc.h"

/* Host block dimensions within a slice: 2 along x, then what is left of chips_per_host
 * along y, then z (clipped to the slice). */
static void host_block(const tpu_topology *t, int64_t b[3]) {
  int64_t cph = t->chips_per_host > 0 ? t->chips_per_host : 1;
  b[0] = t->dims[0] < 2 ? t->dims[0] : (cph < 2 ? cph : 2);
  if (b[0] < 1) b[0] = 1;
  int64_t left = cph / b[0];
  b[1] = left < t->dims[1] ? left : t->dims[1];
  if (b[1] < 1) b[1] = 1;
  left /= b[1];
  b[2] = left < t->dims[2] ? left : t->dims[2];
  if (b[2] < 1) b[2] = 1;
}

int64_t tpu_dcn_host(const tpu_topology *t, int64_t chip) {
  int64_t b[3], c[3], in = chip % t->chips_per_slice, slice = chip / t->chips_per_slice;
  host_block(t, b);
  c[0] = in % t->dims[0];
  c[1] = in / t->dims[0] % t->dims[1];
  c[2] = in / (t->dims[0] * t->dims[1]);
  int64_t hx = (t->dims[0] + b[0] - 1) / b[0], hy = (t->dims[1] + b[1] - 1) / b[1],
          hz = (t->dims[2] + b[2] - 1) / b[2];
  return ((slice * hz + c[2] / b[2]) * hy + c[1] / b[1]) * hx + c[0] / b[0];
}

void tpu_dcn_share(tpu_ici_kind kind, int64_t K, int64_t m, double v, double *bytes, int64_t *steps) {
  double f = K > 0 ? (double)(K - 1) / (double)K : 0, mm = m > 0 ? (double)m : 1;
  *steps = K - 1;
  switch (kind) {
    case TPU_ICI_ALL_REDUCE: /* an all-reduce of the V/m share each chip holds after the
                              * in-slice reduce-scatter: a ring's reduce-scatter + gather */
      *bytes = 2 * f * v / mm;
      *steps = 2 * (K - 1);
      break;
    case TPU_ICI_REDUCE_SCATTER: *bytes = f * v / mm; break;     /* after the in-slice one */
    case TPU_ICI_ALL_GATHER: *bytes = (double)(K - 1) * v; break; /* each shard to K-1 slices */
    case TPU_ICI_ALL_TO_ALL: *bytes = f * v; break;               /* the blocks for other slices */
    case TPU_ICI_PERMUTE: *bytes = v, *steps = 1; break;
    default: *bytes = v / mm; break;                              /* broadcast: one share each */
  }
}

tpu_status tpu_dcn_time(const tpu_topology *t, const tpu_dcn_phase *ph, tpu_dcn_result *r, tpu_diag *d) {
  *r = (tpu_dcn_result){0, 0, 0, 0, 0};
  if (ph->nchips <= 0) return TPU_OK;
  double host_bw = t->dcn_host_bw > 0 ? t->dcn_host_bw : t->dcn_bw * (double)(t->chips_per_host > 0 ? t->chips_per_host : 1);
  if (!(host_bw > 0))
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "the %s has no data-center network bandwidth to join slices", t->chip);
  /* A slice smaller than a host runs on a VM with that share of the host's NICs. */
  int64_t b[3];
  host_block(t, b);
  int64_t per_host = b[0] * b[1] * b[2], cph = t->chips_per_host > 0 ? t->chips_per_host : 1;
  if (per_host < cph) host_bw *= (double)per_host / (double)cph;
  int64_t nhosts = 0, hx = (t->dims[0] + b[0] - 1) / b[0], hy = (t->dims[1] + b[1] - 1) / b[1],
          hz = (t->dims[2] + b[2] - 1) / b[2];
  nhosts = hx * hy * hz * t->slices;
  int64_t *cnt = tpu_calloc((size_t)nhosts, sizeof *cnt);
  if (!cnt) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  for (int64_t i = 0; i < ph->nchips; i++) {
    int64_t c = ph->chips[i];
    if (c < 0 || c >= t->nchips) {
      tpu_free(cnt);
      return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "chip %lld is not in the %lld chips of the slices", (long long)c,
                      (long long)t->nchips);
    }
    int64_t h = tpu_dcn_host(t, c);
    if (cnt[h]++ == 0) r->hosts++;
    if (cnt[h] > r->max_per_host) r->max_per_host = cnt[h];
  }
  tpu_free(cnt);
  r->rate = host_bw / (double)r->max_per_host;
  if (t->pcie_bw > 0 && t->pcie_bw < r->rate) r->rate = t->pcie_bw;
  r->latency_seconds = (double)ph->steps * t->dcn_latency_s;
  r->seconds = ph->bytes / r->rate + r->latency_seconds;
  return TPU_OK;
}
