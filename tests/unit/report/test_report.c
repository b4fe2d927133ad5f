/* Reports on a hand-built timeline: exact metrics (MFU, intensity, roofline, breakdown),
 * the per-op profile, the JSON report and the Chrome trace (parsed back as JSON). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/json.h"
#include "check.h"
#include "report/report.h"

/* A chip with round numbers: one 100x100 MXU at 1 GHz = 2e13 FLOP/s; 1e11 B/s of HBM, so
 * the ridge point is 200 FLOP/B. */
static void make_chip(tpu_chip *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "toy");
  snprintf(c->title, sizeof c->title, "Toy TPU");
  c->clock_hz = 1e9;
  c->tensorcores = c->mxus_per_core = 1;
  c->mxu_rows = c->mxu_cols = 100;
  c->mac_input = TPU_BF16;
  c->mac_accum = TPU_F32;
  c->hbm_bw = 1e11;
  c->prov[TPU_CHIP_PEAK_BF16_FLOPS].status = TPU_PROV_UNKNOWN;
  c->prov[TPU_CHIP_PEAK_INT8_OPS].status = TPU_PROV_UNKNOWN;
  c->prov[TPU_CHIP_INT8_RATE].status = TPU_PROV_UNKNOWN;
}

static tpu_event g_events[] = {
    {TPU_UNIT_MXU, 0, 100, 600, 0},   {TPU_UNIT_MXU, 1, 200, 300, 0},    {TPU_UNIT_VPU, 0, 500, 800, 1},
    {TPU_UNIT_EUP, 0, 700, 750, 1},   {TPU_UNIT_DMA_IN, 0, 0, 150, 0},   {TPU_UNIT_DMA_OUT, 0, 800, 900, 1},
};
static tpu_op_stat g_ops[2];

/* 1000 cycles at 1 GHz = 1 us. MXU busy [100,600), vector alone [600,800), DMA alone
 * [0,100) and [800,900), nothing [900,1000). */
static void make_timeline(tpu_timeline *t) {
  memset(t, 0, sizeof *t);
  memset(g_ops, 0, sizeof g_ops);
  g_ops[0] = (tpu_op_stat){.name = "dot.1", .kind = "dot", .count = 1, .cycles = 600, .flops = 7.5e6, .padded_flops = 9.5e6,
                           .hbm_bytes = 6e4, .memory_bound = 0};
  g_ops[0].unit_cycles[TPU_UNIT_MXU] = 500;
  g_ops[1] = (tpu_op_stat){.name = "fusion.2", .kind = "fusion:kLoop", .count = 2, .cycles = 400, .flops = 5e5,
                           .padded_flops = 5e5, .hbm_bytes = 4e4, .memory_bound = 1};
  t->clock_hz = 1e9;
  t->total_cycles = 1000;
  t->busy[TPU_UNIT_MXU] = 500;
  t->busy[TPU_UNIT_VPU] = 300;
  t->busy[TPU_UNIT_EUP] = 50;
  t->busy[TPU_UNIT_DMA_IN] = 150;
  t->busy[TPU_UNIT_DMA_OUT] = 100;
  t->hbm_wait_cycles = 150;
  t->flops = 8e6;
  t->padded_flops = 1e7;
  t->hbm_bytes = 1e5;
  t->ops = g_ops;
  t->nops = 2;
  t->events = g_events;
  t->nevents = (int64_t)(sizeof g_events / sizeof g_events[0]);
}

static void test_metrics(void) {
  tpu_chip c;
  tpu_timeline t;
  tpu_report_metrics r;
  tpu_diag d;
  make_chip(&c);
  make_timeline(&t);
  CHECK(tpu_report_metrics_compute(&t, &c, TPU_PEAK_BF16, &r, &d) == TPU_OK);
  CHECK_EQ_INT(r.cycles, 1000);
  CHECK_NEAR(r.step_s, 1e-6, 1e-18);
  CHECK_NEAR(r.flops_per_s, 8e12, 1e-3);
  CHECK_NEAR(r.peak_flops_per_s, 2e13, 1e-3);
  CHECK_NEAR(r.mfu, 0.4, 1e-12);
  CHECK_NEAR(r.padding_waste, 0.2, 1e-12);
  CHECK_NEAR(r.ai, 80, 1e-12);
  CHECK_NEAR(r.ridge_ai, 200, 1e-12);
  CHECK_EQ_INT(r.memory_bound, 1);
  CHECK_NEAR(r.attainable, 8e12, 1e-3);
  CHECK_NEAR(r.roofline_frac, 1.0, 1e-12);
  CHECK_NEAR(r.hbm_bw_used, 1e11, 1e-3);
  CHECK_EQ_INT(r.bd_from_events, 1);
  CHECK_EQ_INT(r.bd_cycles[TPU_BD_MXU], 500);
  CHECK_EQ_INT(r.bd_cycles[TPU_BD_VECTOR], 200);
  CHECK_EQ_INT(r.bd_cycles[TPU_BD_HBM_WAIT], 200);
  CHECK_EQ_INT(r.bd_cycles[TPU_BD_IDLE], 100);
  CHECK_NEAR(r.bd_frac[TPU_BD_MXU], 0.5, 1e-15);
  CHECK_NEAR(r.unit_util[TPU_UNIT_VPU], 0.3, 1e-15);

  /* The timing model saw compute wait on HBM longer than DMA was busy (latency): 250 of
   * the 300 cycles without compute are waiting; beyond 300 it is capped. */
  t.hbm_wait_cycles = 250;
  CHECK(tpu_report_metrics_compute(&t, &c, TPU_PEAK_BF16, &r, &d) == TPU_OK);
  CHECK_EQ_INT(r.bd_cycles[TPU_BD_HBM_WAIT], 250);
  CHECK_EQ_INT(r.bd_cycles[TPU_BD_IDLE], 50);
  CHECK_EQ_INT(r.bd_cycles[TPU_BD_MXU], 500);
  t.hbm_wait_cycles = 1000;
  CHECK(tpu_report_metrics_compute(&t, &c, TPU_PEAK_BF16, &r, &d) == TPU_OK);
  CHECK_EQ_INT(r.bd_cycles[TPU_BD_HBM_WAIT], 300);
  CHECK_EQ_INT(r.bd_cycles[TPU_BD_IDLE], 0);
  t.hbm_wait_cycles = 150;

  /* Without events: estimated from the totals (MXU 500, vector max(300, 50) = 300, then
   * hbm_wait_cycles 150 capped by the 200 left, idle the rest). */
  t.events = NULL;
  t.nevents = 0;
  CHECK(tpu_report_metrics_compute(&t, &c, TPU_PEAK_BF16, &r, &d) == TPU_OK);
  CHECK_EQ_INT(r.bd_from_events, 0);
  CHECK_EQ_INT(r.bd_cycles[TPU_BD_MXU], 500);
  CHECK_EQ_INT(r.bd_cycles[TPU_BD_VECTOR], 300);
  CHECK_EQ_INT(r.bd_cycles[TPU_BD_HBM_WAIT], 150);
  CHECK_EQ_INT(r.bd_cycles[TPU_BD_IDLE], 50);

  /* A compute-bound step: 1e5 bytes and 4e7 FLOPs = 400 FLOP/B, above the ridge; the
   * attainable rate is the peak. No bytes at all: infinite intensity, compute-bound. */
  t.flops = 4e7;
  CHECK(tpu_report_metrics_compute(&t, &c, TPU_PEAK_BF16, &r, &d) == TPU_OK);
  CHECK_EQ_INT(r.memory_bound, 0);
  CHECK_NEAR(r.attainable, 2e13, 1e-3);
  CHECK_NEAR(r.mfu, 2.0, 1e-12); /* 4e13 FLOP/s on a 2e13 chip: the report does not clamp */
  t.hbm_bytes = 0;
  CHECK(tpu_report_metrics_compute(&t, &c, TPU_PEAK_BF16, &r, &d) == TPU_OK);
  CHECK(isinf(r.ai));
  CHECK_EQ_INT(r.memory_bound, 0);

  /* int8 peak: the toy chip has none. */
  CHECK(tpu_report_metrics_compute(&t, &c, TPU_PEAK_INT8, &r, &d) == TPU_ERR_ARG);
  c.mac_input = TPU_S8;
  CHECK(tpu_report_metrics_compute(&t, &c, TPU_PEAK_INT8, &r, &d) == TPU_OK);
  CHECK_NEAR(r.peak_flops_per_s, 2e13, 1e-3);
  c.hbm_bw = 0;
  CHECK(tpu_report_metrics_compute(&t, &c, TPU_PEAK_INT8, &r, &d) == TPU_ERR_ARG);
}

static char *slurp(FILE *f) {
  fflush(f);
  long n = ftell(f);
  rewind(f);
  char *s = calloc((size_t)n + 1, 1);
  if (fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = 0;
  return s;
}

static void test_print(void) {
  tpu_chip c;
  tpu_timeline t;
  tpu_report_metrics r;
  tpu_profile p;
  tpu_diag d;
  make_chip(&c);
  make_timeline(&t);
  CHECK(tpu_report_metrics_compute(&t, &c, TPU_PEAK_BF16, &r, &d) == TPU_OK);
  CHECK(tpu_report_profile(&t, 1e9, &p, &d) == TPU_OK);
  CHECK_EQ_INT(p.nrows, 2);
  CHECK_EQ_STR(p.rows[0].name, "dot.1");
  CHECK_EQ_STR(p.rows[1].name, "fusion.2");
  CHECK_NEAR(p.rows[0].frac, 0.6, 1e-15);
  CHECK_NEAR(p.rows[0].padding_waste, 2e6 / 9.5e6, 1e-15);
  CHECK_NEAR(p.rows[0].ai, 125, 1e-12);
  CHECK_NEAR(p.rows[0].flops_per_s, 1.25e13, 1e-3);
  CHECK_NEAR(p.rows[1].time_s, 4e-7, 1e-20);
  CHECK_EQ_INT(p.rows[1].memory_bound, 1);
  FILE *f = tmpfile();
  tpu_report_print_summary(f, &r);
  tpu_report_print_profile(f, &p, 1);
  char *s = slurp(f);
  CHECK(strstr(s, "step time: 1 us (1000 cycles at 1 GHz)") != NULL);
  CHECK(strstr(s, "MFU: 40.00% of 20 TFLOP/s bf16 peak") != NULL);
  CHECK(strstr(s, "intensity 80 FLOP/B, ridge 200 FLOP/B: memory-bound") != NULL);
  CHECK(strstr(s, "MXU busy 50.0%  vector busy 20.0%  waiting on HBM 20.0%  idle 10.0%") != NULL);
  CHECK(strstr(s, "dot.1") != NULL);
  CHECK(strstr(s, "fusion.2") == NULL); /* top 1 only */
  CHECK(strstr(s, "1 more op(s)") != NULL);
  if (check_failures_) fputs(s, stderr);
  free(s);
  fclose(f);
  tpu_profile_free(&p);
}

static const tpu_json *item(const tpu_json *a, size_t i) { return a && i < a->count ? a->items[i] : NULL; }
static double num_at(const tpu_json *o, const char *k1, const char *k2) {
  const tpu_json *v = tpu_json_get(tpu_json_get(o, k1), k2);
  return v && v->kind == TPU_JSON_NUMBER ? v->num : NAN;
}

static void test_json_report(const char *dir) {
  tpu_chip c;
  tpu_timeline t;
  tpu_report_metrics r;
  tpu_profile p;
  tpu_diag d;
  make_chip(&c);
  make_timeline(&t);
  CHECK(tpu_report_metrics_compute(&t, &c, TPU_PEAK_BF16, &r, &d) == TPU_OK);
  CHECK(tpu_report_profile(&t, 1e9, &p, &d) == TPU_OK);
  char path[600];
  snprintf(path, sizeof path, "%s/r.json", dir);
  tpu_report_info info = {"prog.hlo", "tpu", "full", "default", NULL, NULL, "w.1", "VMEM", 4096, NULL};
  CHECK(tpu_report_write_json(path, &info, &c, &t, &r, &p, &d) == TPU_OK);
  tpu_json_doc doc;
  int ok = tpu_json_parse_file(path, &doc, &d) == TPU_OK;
  CHECK(ok);
  if (ok) {
    const tpu_json *root = doc.root;
    CHECK_NEAR(num_at(root, "flops", "mfu"), 0.4, 1e-15);
    CHECK_NEAR(num_at(root, "flops", "padding_waste"), 0.2, 1e-15);
    CHECK_NEAR(num_at(root, "roofline", "arithmetic_intensity"), 80, 1e-12);
    CHECK_NEAR(num_at(root, "roofline", "ridge_point"), 200, 1e-12);
    CHECK_EQ_STR(tpu_json_get(tpu_json_get(root, "roofline"), "bound")->str, "memory");
    CHECK_NEAR(num_at(root, "step", "cycles"), 1000, 0);
    CHECK_NEAR(num_at(tpu_json_get(root, "breakdown"), "vector_busy", "cycles"), 200, 0);
    CHECK_NEAR(num_at(tpu_json_get(root, "breakdown"), "idle", "fraction"), 0.1, 1e-15);
    CHECK_EQ_STR(tpu_json_get(root, "program")->str, "prog.hlo");
    const tpu_json *xpf = tpu_json_get(tpu_json_get(root, "hbm"), "cross_program_prefetch");
    CHECK(xpf != NULL);
    if (xpf) {
      CHECK_EQ_STR(tpu_json_get(xpf, "buffer")->str, "w.1");
      CHECK_NEAR(tpu_json_get(xpf, "bytes")->num, 4096, 0);
    }
    const tpu_json *ops = tpu_json_get(root, "ops");
    CHECK(ops && ops->count == 2);
    CHECK_EQ_STR(tpu_json_get(item(ops, 0), "name")->str, "dot.1");
    CHECK_EQ_STR(tpu_json_get(item(ops, 1), "bound")->str, "memory");
    CHECK_NEAR(num_at(item(ops, 0), "unit_cycles", "mxu"), 500, 0);
    CHECK_EQ_INT(tpu_json_get(root, "units")->count, TPU_UNIT_COUNT);
    tpu_json_doc_free(&doc);
  }
  /* No bytes: intensity is null in JSON. */
  t.hbm_bytes = 0;
  CHECK(tpu_report_metrics_compute(&t, &c, TPU_PEAK_BF16, &r, &d) == TPU_OK);
  CHECK(tpu_report_write_json(path, &info, &c, &t, &r, &p, &d) == TPU_OK);
  if (tpu_json_parse_file(path, &doc, &d) == TPU_OK) {
    CHECK(tpu_json_get(tpu_json_get(doc.root, "roofline"), "arithmetic_intensity")->kind == TPU_JSON_NULL);
    tpu_json_doc_free(&doc);
  } else {
    CHECK(0);
  }
  /* An unwritable place fails and leaves nothing. */
  snprintf(path, sizeof path, "%s/no/such/dir/r.json", dir);
  CHECK(tpu_report_write_json(path, &info, &c, &t, &r, &p, &d) == TPU_ERR_IO);
  CHECK(access(path, F_OK) != 0);
  tpu_profile_free(&p);
}

static void test_trace(const char *dir) {
  tpu_chip c;
  tpu_timeline t;
  tpu_diag d;
  make_chip(&c);
  make_timeline(&t);
  char path[600];
  snprintf(path, sizeof path, "%s/t.json", dir);
  CHECK(tpu_report_write_trace(path, &c, &t, &d) == TPU_OK);
  tpu_json_doc doc;
  int ok = tpu_json_parse_file(path, &doc, &d) == TPU_OK;
  CHECK(ok);
  if (ok) {
    const tpu_json *ev = tpu_json_get(doc.root, "traceEvents");
    CHECK(ev && ev->kind == TPU_JSON_ARRAY);
    int nx = 0, nthreads = 0, found = 0;
    int64_t tids[16];
    for (size_t i = 0; ev && i < ev->count; i++) {
      const tpu_json *e = ev->items[i];
      const char *ph = tpu_json_get(e, "ph")->str, *name = tpu_json_get(e, "name")->str;
      if (!strcmp(ph, "M") && !strcmp(name, "thread_name") && nthreads < 16)
        tids[nthreads++] = tpu_json_get(e, "tid")->ival;
      if (strcmp(ph, "X")) continue;
      nx++;
      int64_t tid = tpu_json_get(e, "tid")->ival;
      int known = 0;
      for (int k = 0; k < nthreads; k++) known |= tids[k] == tid;
      CHECK(known); /* every event is on a named track */
      if (!strcmp(name, "dot.1") && fabs(tpu_json_get(e, "ts")->num - 0.1) < 1e-12) {
        CHECK_NEAR(tpu_json_get(e, "dur")->num, 0.5, 1e-12);
        CHECK_EQ_STR(tpu_json_get(e, "cat")->str, "dot");
        found = 1;
      }
    }
    CHECK_EQ_INT(nx, 6);
    CHECK_EQ_INT(nthreads, 6); /* mxu 0, mxu 1, vpu 0, eup 0, dma-in 0, dma-out 0 */
    CHECK(found);
    tpu_json_doc_free(&doc);
  }
  t.events = NULL;
  t.nevents = 0;
  snprintf(path, sizeof path, "%s/t2.json", dir);
  CHECK(tpu_report_write_trace(path, &c, &t, &d) == TPU_ERR_ARG);
  CHECK(access(path, F_OK) != 0);
}

int main(void) {
  char dir[] = "/tmp/tpu_report_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  test_metrics();
  test_print();
  test_json_report(dir);
  test_trace(dir);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
  CHECK_DONE();
}
