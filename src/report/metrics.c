/* Step metrics from a timeline: FLOP/s, MFU, roofline position and the cycle breakdown. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "chip/timing.h"
#include "report/report.h"

const char *tpu_peak_kind_name(tpu_peak_kind k) { return k == TPU_PEAK_INT8 ? "int8" : "bf16"; }

const char *tpu_bd_part_name(tpu_bd_part p) {
  static const char *const names[TPU_BD_COUNT] = {"mxu_busy", "vector_busy", "hbm_wait", "ici_wait", "idle"};
  return (unsigned)p < TPU_BD_COUNT ? names[p] : "?";
}

tpu_peak_kind tpu_report_peak_kind(const tpu_module *m) {
  int ndots = 0, nint8 = 0;
  for (int c = 0; c < m->ncomps; c++)
    for (int i = 0; i < m->comps[c]->ninstrs; i++) {
      const tpu_instr *in = m->comps[c]->instrs[i];
      if ((in->op != TPU_OP_DOT && in->op != TPU_OP_CONVOLUTION) || in->noperands != 2) continue;
      ndots++;
      nint8 += in->operands[0]->shape.dtype == TPU_S8 && in->operands[1]->shape.dtype == TPU_S8;
    }
  return ndots > 0 && nint8 == ndots ? TPU_PEAK_INT8 : TPU_PEAK_BF16;
}

/* Unit classes for the sweep. */
enum { CLS_MXU, CLS_VEC, CLS_DMA, CLS_ICI, CLS_N };

static int class_of(tpu_unit u) {
  switch (u) {
    case TPU_UNIT_MXU: return CLS_MXU;
    case TPU_UNIT_VPU:
    case TPU_UNIT_EUP:
    case TPU_UNIT_XLU: return CLS_VEC;
    case TPU_UNIT_ICI: return CLS_ICI;
    default: return CLS_DMA;
  }
}

typedef struct {
  int64_t t;
  int cls, delta; /* +1 at a start, -1 at an end */
} edge;

static int cmp_edge(const void *a, const void *b) {
  const edge *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return x->delta - y->delta; /* ends before starts at the same cycle */
}

/* Exclusive split from the events, clipped to [0, total). */
static tpu_status breakdown_events(const tpu_timeline *t, int64_t *bd, tpu_diag *d) {
  int64_t n = t->nevents, total = t->total_cycles;
  edge *e = tpu_malloc(sizeof *e * (size_t)(2 * n));
  if (!e) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory for the breakdown sweep");
  int64_t ne = 0;
  for (int64_t i = 0; i < n; i++) {
    const tpu_event *v = &t->events[i];
    int64_t s = v->start < 0 ? 0 : v->start, en = v->end > total ? total : v->end;
    if (en <= s || (unsigned)v->unit >= TPU_UNIT_COUNT) continue;
    e[ne++] = (edge){s, class_of(v->unit), +1};
    e[ne++] = (edge){en, class_of(v->unit), -1};
  }
  qsort(e, (size_t)ne, sizeof *e, cmp_edge);
  int64_t active[CLS_N] = {0}, prev = 0;
  memset(bd, 0, sizeof *bd * TPU_BD_COUNT);
  for (int64_t i = 0; i <= ne; i++) {
    int64_t now = i < ne ? e[i].t : total;
    int64_t span = now - prev;
    if (span > 0) {
      int part = active[CLS_MXU] ? TPU_BD_MXU
                 : active[CLS_VEC] ? TPU_BD_VECTOR
                 : active[CLS_DMA] ? TPU_BD_HBM_WAIT
                 : active[CLS_ICI] ? TPU_BD_ICI_WAIT
                                   : TPU_BD_IDLE;
      bd[part] += span;
    }
    prev = now;
    if (i < ne) active[e[i].cls] += e[i].delta;
  }
  tpu_free(e);
  /* Waiting on HBM also covers latency, when nothing is busy: take the timing model's
   * count of cycles compute waited on DMA where it is larger, out of the cycles with no
   * compute unit busy. */
  int64_t no_compute = bd[TPU_BD_HBM_WAIT] + bd[TPU_BD_IDLE];
  int64_t wait = t->hbm_wait_cycles > bd[TPU_BD_HBM_WAIT] ? t->hbm_wait_cycles : bd[TPU_BD_HBM_WAIT];
  bd[TPU_BD_HBM_WAIT] = wait < no_compute ? wait : no_compute;
  bd[TPU_BD_IDLE] = no_compute - bd[TPU_BD_HBM_WAIT];
  return TPU_OK;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Estimated split from the totals when no events were recorded. */
static void breakdown_totals(const tpu_timeline *t, int64_t *bd) {
  int64_t total = t->total_cycles, left = total;
  int64_t vec = t->busy[TPU_UNIT_VPU];
  if (t->busy[TPU_UNIT_EUP] > vec) vec = t->busy[TPU_UNIT_EUP];
  if (t->busy[TPU_UNIT_XLU] > vec) vec = t->busy[TPU_UNIT_XLU];
  bd[TPU_BD_MXU] = min64(t->busy[TPU_UNIT_MXU] > 0 ? t->busy[TPU_UNIT_MXU] : 0, left);
  left -= bd[TPU_BD_MXU];
  bd[TPU_BD_VECTOR] = min64(vec > 0 ? vec : 0, left);
  left -= bd[TPU_BD_VECTOR];
  bd[TPU_BD_HBM_WAIT] = min64(t->hbm_wait_cycles > 0 ? t->hbm_wait_cycles : 0, left);
  left -= bd[TPU_BD_HBM_WAIT];
  bd[TPU_BD_ICI_WAIT] = min64(t->ici_wait_cycles > 0 ? t->ici_wait_cycles : 0, left);
  left -= bd[TPU_BD_ICI_WAIT];
  bd[TPU_BD_IDLE] = left;
}

tpu_status tpu_report_metrics_compute(const tpu_timeline *t, const tpu_chip *chip, tpu_peak_kind pk,
                                      tpu_report_metrics *out, tpu_diag *d) {
  memset(out, 0, sizeof *out);
  double clock = t->clock_hz > 0 ? t->clock_hz : chip->clock_hz;
  double peak = pk == TPU_PEAK_INT8 ? tpu_chip_peak_int8(chip) : tpu_chip_peak_bf16(chip);
  if (!(clock > 0)) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "report: no clock frequency");
  if (!(peak > 0))
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "report: chip '%s' has no %s peak", chip->name, tpu_peak_kind_name(pk));
  if (!(chip->hbm_bw > 0)) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "report: chip '%s' has no HBM bandwidth", chip->name);
  if (t->total_cycles < 0) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "report: negative step cycles");
  out->cycles = t->total_cycles;
  out->clock_hz = clock;
  out->step_s = (double)t->total_cycles / clock;
  out->flops = t->flops;
  out->padded_flops = t->padded_flops;
  out->padding_waste = t->padded_flops > t->flops && t->padded_flops > 0 ? (t->padded_flops - t->flops) / t->padded_flops : 0;
  out->flops_per_s = out->step_s > 0 ? t->flops / out->step_s : 0;
  out->peak_kind = pk;
  out->peak_flops_per_s = peak;
  out->mfu = out->flops_per_s / peak;
  out->hbm_bytes = t->hbm_bytes;
  out->hbm_bw = chip->hbm_bw;
  out->hbm_bw_used = out->step_s > 0 ? t->hbm_bytes / out->step_s : 0;
  out->ai = t->hbm_bytes > 0 ? t->flops / t->hbm_bytes : INFINITY;
  out->ridge_ai = peak / chip->hbm_bw;
  out->memory_bound = out->ai < out->ridge_ai;
  out->attainable = out->memory_bound ? out->ai * chip->hbm_bw : peak;
  out->roofline_frac = out->attainable > 0 ? out->flops_per_s / out->attainable : 0;
  /* A capped event list misses the end of the step: use the totals then. */
  if (t->events && t->nevents > 0 && !tpu_timing_events_truncated(t)) {
    TPU_TRY(breakdown_events(t, out->bd_cycles, d));
    out->bd_from_events = 1;
  } else {
    breakdown_totals(t, out->bd_cycles);
  }
  for (int p = 0; p < TPU_BD_COUNT; p++)
    out->bd_frac[p] = t->total_cycles > 0 ? (double)out->bd_cycles[p] / (double)t->total_cycles : 0;
  for (int u = 0; u < TPU_UNIT_COUNT; u++)
    out->unit_util[u] = t->total_cycles > 0 ? (double)t->busy[u] / (double)t->total_cycles : 0;
  return TPU_OK;
}

void tpu_report_si(char *buf, size_t n, double v, const char *unit) {
  static const char *const pre[] = {"", "k", "M", "G", "T", "P", "E"};
  int k = 0;
  double a = fabs(v);
  while (a >= 1000 && k < 6) a /= 1000, v /= 1000, k++;
  snprintf(buf, n, "%.4g %s%s", v, pre[k], unit);
}

void tpu_report_time(char *buf, size_t n, double s) {
  if (s >= 1) snprintf(buf, n, "%.4g s", s);
  else if (s >= 1e-3) snprintf(buf, n, "%.4g ms", s * 1e3);
  else if (s >= 1e-6) snprintf(buf, n, "%.4g us", s * 1e6);
  else snprintf(buf, n, "%.4g ns", s * 1e9);
}

void tpu_report_print_summary(FILE *f, const tpu_report_metrics *r) {
  char a[48], b[48], c[48];
  tpu_report_time(a, sizeof a, r->step_s);
  fprintf(f, "step time: %s (%lld cycles at %.4g GHz)\n", a, (long long)r->cycles, r->clock_hz / 1e9);
  tpu_report_si(a, sizeof a, r->flops, "FLOP");
  tpu_report_si(b, sizeof b, r->flops_per_s, "FLOP/s");
  tpu_report_si(c, sizeof c, r->peak_flops_per_s, "FLOP/s");
  fprintf(f, "FLOPs: %s  achieved: %s  MFU: %.2f%% of %s %s peak\n", a, b, 100 * r->mfu, c,
          tpu_peak_kind_name(r->peak_kind));
  tpu_report_si(a, sizeof a, r->hbm_bytes, "B");
  tpu_report_si(b, sizeof b, r->hbm_bw_used, "B/s");
  tpu_report_si(c, sizeof c, r->hbm_bw, "B/s");
  fprintf(f, "HBM: %s moved  %s of %s\n", a, b, c);
  if (isinf(r->ai)) fprintf(f, "roofline: no HBM traffic; compute-bound (ridge %.4g FLOP/B)", r->ridge_ai);
  else
    fprintf(f, "roofline: intensity %.4g FLOP/B, ridge %.4g FLOP/B: %s-bound", r->ai, r->ridge_ai,
            r->memory_bound ? "memory" : "compute");
  tpu_report_si(a, sizeof a, r->attainable, "FLOP/s");
  fprintf(f, "; attainable %s, achieved %.1f%% of it\n", a, 100 * r->roofline_frac);
  fprintf(f, "breakdown%s: MXU busy %.1f%%  vector busy %.1f%%  waiting on HBM %.1f%%  ",
          r->bd_from_events ? "" : " (estimated from unit totals)", 100 * r->bd_frac[TPU_BD_MXU],
          100 * r->bd_frac[TPU_BD_VECTOR], 100 * r->bd_frac[TPU_BD_HBM_WAIT]);
  if (r->bd_cycles[TPU_BD_ICI_WAIT] > 0) fprintf(f, "waiting on ICI %.1f%%  ", 100 * r->bd_frac[TPU_BD_ICI_WAIT]);
  fprintf(f, "idle %.1f%%\n", 100 * r->bd_frac[TPU_BD_IDLE]);
  if (r->padded_flops > 0) fprintf(f, "padding waste: %.1f%% of MXU FLOPs\n", 100 * r->padding_waste);
}
