/* Chrome trace event format export (--trace FILE.json): one track per unit lane, "X" events in microseconds. */
#include <string.h>

#include "base/alloc.h"
#include "base/file.h"
#include "base/json.h"
#include "report/report.h"
#include "report/source.h"

/* Lanes beyond this share the last track (no unit has nearly as many). */
#define MAX_LANES 1024

static int lane_of(const tpu_event *e) { return e->lane < 0 ? 0 : e->lane >= MAX_LANES ? MAX_LANES - 1 : e->lane; }
static int64_t tid_of(tpu_unit u, int lane) { return (int64_t)u * MAX_LANES + lane + 1; }

static void meta(tpu_json_writer *w, const char *what, int64_t tid, const char *key, const char *sval, int64_t ival) {
  tpu_json_begin_object(w);
  tpu_json_key(w, "name");
  tpu_json_string(w, what);
  tpu_json_key(w, "ph");
  tpu_json_string(w, "M");
  tpu_json_key(w, "pid");
  tpu_json_int(w, 0);
  if (tid >= 0) {
    tpu_json_key(w, "tid");
    tpu_json_int(w, tid);
  }
  tpu_json_key(w, "args");
  tpu_json_begin_object(w);
  tpu_json_key(w, key);
  if (sval) tpu_json_string(w, sval);
  else tpu_json_int(w, ival);
  tpu_json_end_object(w);
  tpu_json_end_object(w);
}

tpu_status tpu_report_write_trace(const char *path, const tpu_chip *chip, const tpu_timeline *t, tpu_diag *d) {
  return tpu_report_write_trace_ex(path, chip, t, NULL, NULL, d);
}

void tpu_trace_track(struct tpu_json_writer *w, int tid, const char *name) { meta(w, "thread_name", tid, "name", name, 0); }

void tpu_trace_event(struct tpu_json_writer *w, int tid, const char *name, const char *cat, double start_us,
                     double dur_us) {
  tpu_json_begin_object(w);
  tpu_json_key(w, "name");
  tpu_json_string(w, name);
  tpu_json_key(w, "cat");
  tpu_json_string(w, cat);
  tpu_json_key(w, "ph");
  tpu_json_string(w, "X");
  tpu_json_key(w, "ts");
  tpu_json_number(w, start_us);
  tpu_json_key(w, "dur");
  tpu_json_number(w, dur_us);
  tpu_json_key(w, "pid");
  tpu_json_int(w, 0);
  tpu_json_key(w, "tid");
  tpu_json_int(w, tid);
  tpu_json_end_object(w);
}

tpu_status tpu_report_write_trace_ex(const char *path, const tpu_chip *chip, const tpu_timeline *t,
                                     void (*extra)(void *user, struct tpu_json_writer *w, double clock_hz), void *user,
                                     tpu_diag *d) {
  if (!t->events || t->nevents <= 0)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_loc_at(path, 0, 0), "the timing run recorded no events to trace");
  double clock = t->clock_hz > 0 ? t->clock_hz : chip->clock_hz;
  if (!(clock > 0)) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "trace: no clock frequency");
  /* Which tracks exist. */
  unsigned char *used = tpu_calloc((size_t)TPU_UNIT_COUNT * MAX_LANES, 1);
  if (!used) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory for the trace");
  for (int64_t i = 0; i < t->nevents; i++) {
    const tpu_event *e = &t->events[i];
    if ((unsigned)e->unit < TPU_UNIT_COUNT) used[(size_t)e->unit * MAX_LANES + (size_t)lane_of(e)] = 1;
  }
  char *tmp;
  FILE *f;
  tpu_status st = tpu_file_begin(path, &tmp, &f, d);
  if (st != TPU_OK) {
    tpu_free(used);
    return st;
  }
  tpu_json_writer w;
  tpu_json_writer_init(&w, f, 0);
  tpu_json_begin_object(&w);
  tpu_json_key(&w, "displayTimeUnit");
  tpu_json_string(&w, "ns");
  tpu_json_key(&w, "traceEvents");
  tpu_json_begin_array(&w);
  char title[160];
  snprintf(title, sizeof title, "tpusim %s (%s, %.4g GHz)", chip->title[0] ? chip->title : chip->name, chip->name,
           clock / 1e9);
  meta(&w, "process_name", -1, "name", title, 0);
  for (int u = 0; u < TPU_UNIT_COUNT; u++)
    for (int l = 0; l < MAX_LANES; l++) {
      if (!used[(size_t)u * MAX_LANES + (size_t)l]) continue;
      char name[64];
      snprintf(name, sizeof name, "%s %d", tpu_unit_name((tpu_unit)u), l);
      meta(&w, "thread_name", tid_of((tpu_unit)u, l), "name", name, 0);
      meta(&w, "thread_sort_index", tid_of((tpu_unit)u, l), "sort_index", NULL, tid_of((tpu_unit)u, l));
    }
  for (int64_t i = 0; i < t->nevents; i++) {
    const tpu_event *e = &t->events[i];
    if ((unsigned)e->unit >= TPU_UNIT_COUNT || e->end < e->start) continue;
    const tpu_op_stat *op = e->op >= 0 && e->op < t->nops ? &t->ops[e->op] : NULL;
    tpu_json_begin_object(&w);
    tpu_json_key(&w, "name");
    tpu_json_string(&w, op && op->name ? op->name : tpu_unit_name(e->unit));
    tpu_json_key(&w, "cat");
    tpu_json_string(&w, op && op->kind ? op->kind : tpu_unit_name(e->unit));
    tpu_json_key(&w, "ph");
    tpu_json_string(&w, "X");
    tpu_json_key(&w, "ts");
    tpu_json_number(&w, (double)e->start * 1e6 / clock);
    tpu_json_key(&w, "dur");
    tpu_json_number(&w, (double)(e->end - e->start) * 1e6 / clock);
    tpu_json_key(&w, "pid");
    tpu_json_int(&w, 0);
    tpu_json_key(&w, "tid");
    tpu_json_int(&w, tid_of(e->unit, lane_of(e)));
    tpu_json_key(&w, "args");
    tpu_json_begin_object(&w);
    tpu_json_key(&w, "start_cycle");
    tpu_json_int(&w, e->start);
    tpu_json_key(&w, "cycles");
    tpu_json_int(&w, e->end - e->start);
    if (op && op->src && op->src->op_name) {
      tpu_json_key(&w, "op_name");
      tpu_json_string(&w, op->src->op_name);
    }
    if (op && op->src && op->src->source_file) {
      char where[600];
      snprintf(where, sizeof where, "%s:%d", op->src->source_file, op->src->source_line);
      tpu_json_key(&w, "source");
      tpu_json_string(&w, where);
    }
    tpu_json_end_object(&w);
    tpu_json_end_object(&w);
  }
  if (extra) extra(user, &w, clock);
  tpu_json_end_array(&w);
  tpu_json_end_object(&w);
  tpu_free(used);
  tpu_diag wd;
  st = tpu_json_writer_finish(&w, &wd);
  if (st != TPU_OK) {
    tpu_file_commit(path, tmp, f, 0, d);
    return TPU_FAIL(d, st, tpu_loc_at(path, 0, 0), "cannot write the trace: %s", wd.msg);
  }
  return tpu_file_commit(path, tmp, f, 1, d);
}
