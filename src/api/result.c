/* The public simulator API: a run's outputs, metrics, per-op profile, JSON report and trace. */
#include <string.h>

#include "api/api_int.h"
#include "base/alloc.h"
#include "chip/program.h"

_Static_assert(TPU_BD_COUNT <= TPU_SIM_MAX_PARTS, "tpu_sim_metrics has too few breakdown slots");
_Static_assert(TPU_UNIT_COUNT <= TPU_SIM_MAX_PARTS, "tpu_sim_metrics has too few unit slots");

void tpu_sim_result_free(tpu_sim_result *r) {
  if (!r) return;
  if (r->own_timing) {
    tpu__api_source_free_rows(r->src, r->prof.nrows);
    tpu_profile_free(&r->prof);
    tpu_timeline_free(&r->tl);
  }
  if (r->own_prog) {
    tpu_program_free(r->prog);
    tpu_module_free(r->compiled);
    tpu_pod_cost_free(&r->costs);
  }
  tpu__cache_release(r->cc);
  tpu_free(r->leaves);
  tpu_free(r->taken);
  tpu_tensor_free(&r->value);
  if (r->have_pod) tpu_podio_free(&r->pod);
  tpu_free(r->program);
  tpu_free(r);
}

int tpu_sim_result_noutputs(const tpu_sim_result *r) { return r ? r->nleaves : 0; }

tpu_status tpu_sim_result_output(const tpu_sim_result *r, int i, tpu_sim_array *out, tpu_diag *d) {
  if (!r || !out) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_result_output: no result or out-parameter");
  memset(out, 0, sizeof *out);
  if (i < 0 || i >= r->nleaves)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "output %d does not exist: the run has %d", i, r->nleaves);
  if (r->taken[i]) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "output %d was moved into a buffer", i);
  const tpu_tensor *t = r->leaves[i];
  out->dtype = tpu__api_public_dtype(t->dtype); /* -1 for a token */
  if (t->dtype == TPU_TOKEN) return TPU_OK;
  out->rank = t->rank;
  memcpy(out->dims, t->dims, sizeof out->dims[0] * (size_t)t->rank);
  out->data = t->data;
  out->nbytes = t->nbytes;
  return TPU_OK;
}

int tpu_sim_result_timed(const tpu_sim_result *r) { return r ? r->timed : 0; }

int64_t tpu_sim_result_hbm_peak(const tpu_sim_result *r) { return r && r->timed && r->prog ? r->prog->hbm_peak : 0; }

static tpu_status need_timing(const tpu_sim_result *r, tpu_diag *d) {
  if (!r) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "no result");
  if (!r->timed) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "the run was not timed (the ref backend computes values only)");
  return TPU_OK;
}

tpu_status tpu_sim_result_metrics(const tpu_sim_result *r, tpu_sim_metrics *out, tpu_diag *d) {
  if (!out) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_result_metrics: no out-parameter");
  memset(out, 0, sizeof *out);
  TPU_TRY(need_timing(r, d));
  const tpu_report_metrics *m = &r->metrics;
  snprintf(out->chip, sizeof out->chip, "%s", r->chip->name);
  out->devices = r->devices;
  out->cycles = m->cycles;
  out->clock_hz = m->clock_hz;
  out->step_s = m->step_s;
  out->flops = m->flops;
  out->padded_flops = m->padded_flops;
  out->padding_waste = m->padding_waste;
  out->flops_per_s = m->flops_per_s;
  out->peak_flops_per_s = m->peak_flops_per_s;
  out->peak_kind = tpu_peak_kind_name(m->peak_kind);
  out->mfu = m->mfu;
  out->hbm_bytes = m->hbm_bytes;
  out->hbm_bw = m->hbm_bw;
  out->hbm_bw_used = m->hbm_bw_used;
  out->ai = m->ai;
  out->ridge_ai = m->ridge_ai;
  out->attainable = m->attainable;
  out->roofline_frac = m->roofline_frac;
  out->memory_bound = m->memory_bound;
  out->ici_bytes = r->tl.ici_bytes;
  out->nparts = TPU_BD_COUNT;
  for (int k = 0; k < TPU_BD_COUNT; k++) {
    out->part_name[k] = tpu_bd_part_name((tpu_bd_part)k);
    out->part_cycles[k] = m->bd_cycles[k];
    out->part_frac[k] = m->bd_frac[k];
  }
  out->parts_from_events = m->bd_from_events;
  out->nunits = TPU_UNIT_COUNT;
  for (int u = 0; u < TPU_UNIT_COUNT; u++) {
    out->unit_name[u] = tpu_unit_name((tpu_unit)u);
    out->unit_util[u] = m->unit_util[u];
  }
  return TPU_OK;
}

int tpu_sim_result_nops(const tpu_sim_result *r) { return r && r->timed ? r->prof.nrows : 0; }

tpu_status tpu_sim_result_op(const tpu_sim_result *r, int i, tpu_sim_op *out, tpu_diag *d) {
  if (!out) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_result_op: no out-parameter");
  memset(out, 0, sizeof *out);
  TPU_TRY(need_timing(r, d));
  if (i < 0 || i >= r->prof.nrows)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "profile row %d does not exist: the profile has %d", i, r->prof.nrows);
  const tpu_profile_row *w = &r->prof.rows[i];
  out->name = w->name;
  out->kind = w->kind;
  out->count = w->count;
  out->cycles = w->cycles;
  out->time_s = w->time_s;
  out->frac = w->frac;
  out->flops = w->flops;
  out->padded_flops = w->padded_flops;
  out->hbm_bytes = w->hbm_bytes;
  out->ai = w->ai;
  out->flops_per_s = w->flops_per_s;
  out->padding_waste = w->padding_waste;
  out->memory_bound = w->memory_bound;
  out->op_name = r->src[i].op_name;
  out->source_file = r->src[i].source_file;
  out->source_line = r->src[i].source_line;
  out->function = r->src[i].function;
  return TPU_OK;
}

tpu_status tpu_sim_result_write_json(const tpu_sim_result *r, const char *path, tpu_diag *d) {
  TPU_TRY(need_timing(r, d));
  if (!path) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_result_write_json: no path");
  tpu_podio_report pr = {&r->pod, r->prog, &r->tl, r->chip, &r->costs};
  tpu_report_info info = {r->program, "tpu", r->mode, r->precision,
                          r->have_pod && r->pod.ndev > 1 ? tpu_podio_write_json : NULL, &pr, NULL, NULL, 0, NULL};
  tpu_report_info_prefetch(&info, r->prog);
  return tpu_report_write_json(path, &info, r->chip, &r->tl, &r->metrics, &r->prof, d);
}

tpu_status tpu_sim_result_write_trace(const tpu_sim_result *r, const char *path, tpu_diag *d) {
  TPU_TRY(need_timing(r, d));
  if (!path) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_result_write_trace: no path");
  return tpu_report_write_trace(path, r->chip, &r->tl, d);
}
