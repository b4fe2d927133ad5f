/* The JSON report (--report FILE.json). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/file.h"
#include "base/json.h"
#include "report/report.h"
#include "chip/program.h"
#include "report/source.h"

static void kv_num(tpu_json_writer *w, const char *k, double v) {
  tpu_json_key(w, k);
  tpu_json_number(w, v); /* inf/NaN become null */
}

static void kv_int(tpu_json_writer *w, const char *k, int64_t v) {
  tpu_json_key(w, k);
  tpu_json_int(w, v);
}

static void kv_str(tpu_json_writer *w, const char *k, const char *v) {
  tpu_json_key(w, k);
  if (v) tpu_json_string(w, v);
  else tpu_json_null(w);
}

static void write_ops(tpu_json_writer *w, const tpu_timeline *t, const tpu_profile *p) {
  tpu_json_key(w, "ops");
  tpu_json_begin_array(w);
  for (int i = 0; p && i < p->nrows; i++) {
    const tpu_profile_row *r = &p->rows[i];
    tpu_json_begin_object(w);
    kv_str(w, "name", r->name);
    kv_str(w, "kind", r->kind);
    kv_int(w, "count", r->count);
    kv_int(w, "cycles", r->cycles);
    kv_num(w, "seconds", r->time_s);
    kv_num(w, "fraction_of_step", r->frac);
    kv_num(w, "flops", r->flops);
    kv_num(w, "padded_flops", r->padded_flops);
    kv_num(w, "padding_waste", r->padding_waste);
    kv_num(w, "hbm_bytes", r->hbm_bytes);
    kv_num(w, "arithmetic_intensity", r->ai);
    kv_num(w, "flops_per_s", r->flops_per_s);
    kv_str(w, "bound", r->memory_bound ? "memory" : "compute");
    if (r->src) { /* where the user wrote it */
      if (r->src->op_name) kv_str(w, "op_name", r->src->op_name);
      if (r->src->source_file) {
        kv_str(w, "source_file", r->src->source_file);
        kv_int(w, "source_line", r->src->source_line);
      }
      if (r->src->function) kv_str(w, "function", r->src->function);
      if (r->src->fused) kv_str(w, "fused_ops", r->src->fused);
    }
    tpu_json_key(w, "unit_cycles");
    tpu_json_begin_object(w);
    if (r->op >= 0 && r->op < t->nops)
      for (int u = 0; u < TPU_UNIT_COUNT; u++) kv_int(w, tpu_unit_name((tpu_unit)u), t->ops[r->op].unit_cycles[u]);
    tpu_json_end_object(w);
    tpu_json_end_object(w);
  }
  tpu_json_end_array(w);
}

static void write_report(tpu_json_writer *w, const tpu_report_info *info, const tpu_chip *chip, const tpu_timeline *t,
                         const tpu_report_metrics *r, const tpu_profile *p) {
  tpu_json_begin_object(w);
  kv_str(w, "tool", "tpusim");
  kv_str(w, "version", tpu_version());
  kv_str(w, "program", info ? info->program : NULL);
  kv_str(w, "backend", info ? info->backend : NULL);
  kv_str(w, "mode", info ? info->mode : NULL);
  kv_str(w, "precision", info ? info->precision : NULL);

  tpu_json_key(w, "chip");
  tpu_json_begin_object(w);
  kv_str(w, "name", chip->name);
  kv_str(w, "title", chip->title);
  kv_num(w, "clock_hz", chip->clock_hz);
  kv_int(w, "tensorcores", chip->tensorcores);
  kv_int(w, "mxus_per_core", chip->mxus_per_core);
  kv_int(w, "mxu_rows", chip->mxu_rows);
  kv_int(w, "mxu_cols", chip->mxu_cols);
  kv_num(w, "hbm_bw", chip->hbm_bw);
  kv_int(w, "hbm_bytes", chip->hbm_bytes);
  kv_int(w, "vmem_bytes", chip->vmem_bytes);
  tpu_json_end_object(w);

  tpu_json_key(w, "step");
  tpu_json_begin_object(w);
  kv_int(w, "cycles", r->cycles);
  kv_num(w, "clock_hz", r->clock_hz);
  kv_num(w, "seconds", r->step_s);
  tpu_json_end_object(w);

  tpu_json_key(w, "flops");
  tpu_json_begin_object(w);
  kv_num(w, "useful", r->flops);
  kv_num(w, "padded", r->padded_flops);
  kv_num(w, "padding_waste", r->padding_waste);
  kv_num(w, "achieved_per_s", r->flops_per_s);
  kv_str(w, "peak_kind", tpu_peak_kind_name(r->peak_kind));
  kv_num(w, "peak_per_s", r->peak_flops_per_s);
  kv_num(w, "mfu", r->mfu);
  tpu_json_end_object(w);

  tpu_json_key(w, "hbm");
  tpu_json_begin_object(w);
  kv_num(w, "bytes", r->hbm_bytes);
  kv_num(w, "bandwidth", r->hbm_bw);
  kv_num(w, "used_bandwidth", r->hbm_bw_used);
  if (info && info->xprefetch_bytes > 0) {
    /* read on chip, not in `bytes`: loaded while the previous step ran */
    tpu_json_key(w, "cross_program_prefetch");
    tpu_json_begin_object(w);
    kv_str(w, "buffer", info->xprefetch_name);
    kv_num(w, "bytes", info->xprefetch_bytes);
    kv_str(w, "memory", info->xprefetch_memory);
    tpu_json_end_object(w);
  }
  const tpu_program *pg = info ? info->prog : NULL;
  double *spf = pg && pg->nhbm > 0 ? tpu_calloc((size_t)pg->nhbm, sizeof *spf) : NULL;
  double spf_bytes = 0;
  int spf_largest = -1;
  if (spf && tpu_report_step_prefetch(pg, spf, &spf_bytes, &spf_largest) > 0) {
    /* copied into VMEM while other kernels run: in `bytes`, and what readers waited for them */
    tpu_json_key(w, "in_step_prefetch");
    tpu_json_begin_object(w);
    tpu_json_key(w, "buffers");
    tpu_json_begin_array(w);
    for (int h = 0; h < pg->nhbm; h++) {
      if (spf[h] <= 0) continue;
      tpu_json_begin_object(w);
      kv_str(w, "buffer", pg->hbm[h].name);
      kv_num(w, "bytes", spf[h]);
      tpu_json_end_object(w);
    }
    tpu_json_end_array(w);
    kv_num(w, "bytes", spf_bytes);
    kv_int(w, "wait_cycles", t->spf_wait_cycles);
    tpu_json_end_object(w);
  }
  tpu_free(spf);
  tpu_json_end_object(w);

  tpu_json_key(w, "roofline");
  tpu_json_begin_object(w);
  kv_num(w, "arithmetic_intensity", r->ai); /* null when the step moved no bytes */
  kv_num(w, "ridge_point", r->ridge_ai);
  kv_num(w, "attainable_flops_per_s", r->attainable);
  kv_num(w, "fraction_of_attainable", r->roofline_frac);
  kv_str(w, "bound", r->memory_bound ? "memory" : "compute");
  tpu_json_end_object(w);

  tpu_json_key(w, "breakdown");
  tpu_json_begin_object(w);
  kv_str(w, "source", r->bd_from_events ? "events" : "unit totals");
  for (int b = 0; b < TPU_BD_COUNT; b++) {
    tpu_json_key(w, tpu_bd_part_name((tpu_bd_part)b));
    tpu_json_begin_object(w);
    kv_int(w, "cycles", r->bd_cycles[b]);
    kv_num(w, "fraction", r->bd_frac[b]);
    tpu_json_end_object(w);
  }
  tpu_json_end_object(w);

  tpu_json_key(w, "units");
  tpu_json_begin_array(w);
  for (int u = 0; u < TPU_UNIT_COUNT; u++) {
    tpu_json_begin_object(w);
    kv_str(w, "name", tpu_unit_name((tpu_unit)u));
    kv_int(w, "busy_cycles", t->busy[u]);
    kv_num(w, "utilization", r->unit_util[u]);
    tpu_json_end_object(w);
  }
  tpu_json_end_array(w);
  kv_int(w, "hbm_wait_cycles", t->hbm_wait_cycles);

  write_ops(w, t, p);
  if (info->extra) info->extra(info->extra_user, w);
  tpu_json_end_object(w);
}

int tpu_report_step_prefetch(const tpu_program *p, double *by_buffer, double *bytes, int *largest) {
  *bytes = 0;
  *largest = -1;
  if (!p || p->nhbm <= 0) return 0;
  double *b = by_buffer ? by_buffer : tpu_calloc((size_t)p->nhbm, sizeof *b);
  if (!b) return 0;
  if (by_buffer) memset(b, 0, (size_t)p->nhbm * sizeof *b);
  for (int i = 0; i < p->ninsns; i++) /* one pass: the copies' pieces, by their HBM source */
    if (p->insns[i].prefetch == 2 && p->insns[i].hbm >= 0 && p->insns[i].hbm < p->nhbm)
      b[p->insns[i].hbm] += (double)p->insns[i].bytes;
  int n = 0;
  for (int h = 0; h < p->nhbm; h++) {
    if (b[h] <= 0) continue;
    n++;
    *bytes += b[h];
    if (*largest < 0 || b[h] > b[*largest]) *largest = h;
  }
  if (!by_buffer) tpu_free(b);
  return n;
}

void tpu_report_info_prefetch(tpu_report_info *info, const tpu_program *p) {
  info->prog = p;
  int on = p && p->xprefetch_bytes > 0 && p->xprefetch_hbm >= 0 && p->xprefetch_hbm < p->nhbm;
  info->xprefetch_name = on ? p->hbm[p->xprefetch_hbm].name : NULL;
  info->xprefetch_memory = on && p->xprefetch_cmem ? "CMEM" : "VMEM";
  info->xprefetch_bytes = on ? (double)p->xprefetch_bytes : 0;
}

tpu_status tpu_report_write_json(const char *path, const tpu_report_info *info, const tpu_chip *chip,
                                 const tpu_timeline *t, const tpu_report_metrics *r, const tpu_profile *p,
                                 tpu_diag *d) {
  char *tmp;
  FILE *f;
  TPU_TRY(tpu_file_begin(path, &tmp, &f, d));
  tpu_json_writer w;
  tpu_json_writer_init(&w, f, 2);
  write_report(&w, info, chip, t, r, p);
  tpu_diag wd;
  tpu_status st = tpu_json_writer_finish(&w, &wd);
  if (st != TPU_OK) {
    tpu_file_commit(path, tmp, f, 0, d);
    return TPU_FAIL(d, st, tpu_loc_at(path, 0, 0), "cannot write the report: %s", wd.msg);
  }
  return tpu_file_commit(path, tmp, f, 1, d);
}
