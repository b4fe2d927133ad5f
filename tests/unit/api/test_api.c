/* The public simulator API (include/tpusim/tpusim.h): load errors, values against JAX's,
 * timing metrics, the profile, report files, a pod module, bad arguments, and allocation
 * failure at every point of a run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/npy.h"
#include "check.h"
#include "tpusim/tpusim.h"

static char g_dir[64];

/* examples/NAME as a caller's array (data owned by *t). */
static tpu_sim_array load_npy(const char *name, tpu_tensor *t) {
  char path[256];
  snprintf(path, sizeof path, "examples/%s", name);
  tpu_diag d;
  tpu_sim_array a;
  memset(&a, 0, sizeof a);
  if (tpu_npy_read(path, t, &d) != TPU_OK) {
    fprintf(stderr, "cannot read %s: %s\n", path, d.msg);
    exit(1);
  }
  CHECK_EQ_INT(t->dtype, TPU_F32); /* every fixture used here is float32 */
  a.dtype = TPU_SIM_F32;
  a.rank = t->rank;
  memcpy(a.dims, t->dims, sizeof a.dims);
  a.data = t->data;
  a.nbytes = t->nbytes;
  return a;
}

static double max_abs_diff(const tpu_sim_array *a, const tpu_tensor *want) {
  if (a->dtype != TPU_SIM_F32 || a->nbytes != want->nbytes) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a->nbytes / 4; i++) {
    double e = fabs((double)((const float *)a->data)[i] - (double)((const float *)want->data)[i]);
    m = e > m ? e : m;
  }
  return m;
}

static void test_load_errors(void) {
  tpu_diag d;
  memset(&d, 0, sizeof d);
  tpu_sim_module *m = (tpu_sim_module *)1;
  const char *bad = "HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n  ROOT b = f32[3] add(a, a)\n}\n";
  CHECK_EQ_INT(tpu_sim_load_text("bad.hlo", bad, strlen(bad), &m, &d), TPU_ERR_INVALID);
  CHECK(m == NULL);
  CHECK_EQ_STR(d.file, "bad.hlo");
  CHECK_EQ_INT(d.line, 4);
  char buf[1024];
  tpu_diag_format(&d, buf, sizeof buf);
  CHECK(strncmp(buf, "bad.hlo:4:", 10) == 0 && strstr(buf, ": error: "));
  CHECK_EQ_INT(tpu_sim_load_file("/nonexistent.hlo", &m, &d), TPU_ERR_IO);
  CHECK(m == NULL);
  CHECK_EQ_INT(tpu_sim_load_text("x", NULL, 5, &m, &d), TPU_ERR_ARG);
}

static void test_mlp(void) {
  tpu_diag d;
  memset(&d, 0, sizeof d);
  tpu_sim_module *m = NULL;
  CHECK_EQ_INT(tpu_sim_load_file("examples/mlp.hlo", &m, &d), TPU_OK);
  if (!m) return;
  CHECK_EQ_INT(tpu_sim_module_nparams(m), 5);
  CHECK_EQ_INT(tpu_sim_module_devices(m), 1);
  tpu_sim_array p;
  CHECK_EQ_INT(tpu_sim_module_param(m, 1, &p, &d), TPU_OK);
  CHECK(p.dtype == TPU_SIM_F32 && p.rank == 2 && p.dims[0] == 64 && p.dims[1] == 128 && p.nbytes == 64 * 128 * 4);
  CHECK_EQ_INT(tpu_sim_module_param(m, 5, &p, &d), TPU_ERR_ARG);

  tpu_tensor ts[6];
  tpu_sim_array in[5];
  for (int i = 0; i < 5; i++) {
    char name[32];
    snprintf(name, sizeof name, "mlp.in%d.npy", i);
    in[i] = load_npy(name, &ts[i]);
  }
  load_npy("mlp.out0.npy", &ts[5]);

  tpu_sim_options o;
  tpu_sim_options_init(&o);
  o.precision = "highest";
  tpu_sim_result *r = NULL;
  CHECK_EQ_INT(tpu_sim_run(m, &o, in, 5, &r, &d), TPU_OK);
  tpu_sim_metrics full;
  memset(&full, 0, sizeof full);
  if (r) {
    CHECK_EQ_INT(tpu_sim_result_noutputs(r), 1);
    tpu_sim_array out;
    CHECK_EQ_INT(tpu_sim_result_output(r, 0, &out, &d), TPU_OK);
    CHECK(out.rank == 2 && out.dims[0] == 8 && out.dims[1] == 10);
    CHECK(max_abs_diff(&out, &ts[5]) < 1e-5); /* JAX's result on CPU */
    CHECK_EQ_INT(tpu_sim_result_output(r, 1, &out, &d), TPU_ERR_ARG);
    CHECK(tpu_sim_result_timed(r));
    CHECK_EQ_INT(tpu_sim_result_metrics(r, &full, &d), TPU_OK);
    CHECK_EQ_STR(full.chip, "v5e");
    CHECK(full.cycles > 0);
    CHECK_NEAR(full.step_s, (double)full.cycles / full.clock_hz, 1e-15);
    CHECK(full.flops >= 2.0 * 8 * 64 * 128 + 2.0 * 8 * 128 * 10);
    CHECK_NEAR(full.mfu, full.flops / full.step_s / full.peak_flops_per_s, 1e-12);
    CHECK_EQ_STR(full.peak_kind, "bf16");
    int64_t parts = 0;
    double frac = 0;
    for (int k = 0; k < full.nparts; k++) {
      parts += full.part_cycles[k];
      frac += full.part_frac[k];
    }
    CHECK_EQ_INT(parts, full.cycles);
    CHECK_NEAR(frac, 1.0, 1e-9);
    CHECK_EQ_STR(full.part_name[0], "mxu_busy");
    CHECK_EQ_STR(full.unit_name[0], "mxu");
    int nops = tpu_sim_result_nops(r);
    CHECK(nops > 0);
    double flops = 0;
    int64_t prev = INT64_MAX;
    for (int i = 0; i < nops; i++) {
      tpu_sim_op op;
      CHECK_EQ_INT(tpu_sim_result_op(r, i, &op, &d), TPU_OK);
      CHECK(op.name && op.kind && op.cycles <= prev);
      CHECK(op.op_name == NULL && op.source_file == NULL && op.source_line == 0); /* no metadata in mlp.hlo */
      prev = op.cycles;
      flops += op.flops;
    }
    CHECK_NEAR(flops, full.flops, 1e-6 * full.flops);
    tpu_sim_op op;
    CHECK_EQ_INT(tpu_sim_result_op(r, nops, &op, &d), TPU_ERR_ARG);
    char path[128];
    snprintf(path, sizeof path, "%s/r.json", g_dir);
    CHECK_EQ_INT(tpu_sim_result_write_json(r, path, &d), TPU_OK);
    CHECK(access(path, F_OK) == 0);
    remove(path);
    snprintf(path, sizeof path, "%s/t.json", g_dir);
    CHECK_EQ_INT(tpu_sim_result_write_trace(r, path, &d), TPU_OK);
    CHECK(access(path, F_OK) == 0);
    remove(path);
    CHECK_EQ_INT(tpu_sim_result_write_json(r, "/nonexistent/dir/r.json", &d), TPU_ERR_IO);
  }
  tpu_sim_result_free(r);

  /* Timing only: the same cycles (at the same precision), no outputs. The module handle
   * runs again. */
  o.mode = "timing";
  r = NULL;
  CHECK_EQ_INT(tpu_sim_run(m, &o, NULL, 0, &r, &d), TPU_OK);
  if (r) {
    tpu_sim_metrics tm;
    CHECK_EQ_INT(tpu_sim_result_metrics(r, &tm, &d), TPU_OK);
    CHECK_EQ_INT(tm.cycles, full.cycles);
    CHECK_EQ_INT(tpu_sim_result_noutputs(r), 0);
  }
  tpu_sim_result_free(r);

  /* Timing without events: the same cycles, the parts from the unit totals, no trace; the
   * cache keeps it apart from the timing with events (each run gets its own kind). */
  for (int pass = 0; pass < 2; pass++) {
    o.no_events = 1;
    r = NULL;
    CHECK_EQ_INT(tpu_sim_run(m, &o, NULL, 0, &r, &d), TPU_OK);
    if (r) {
      tpu_sim_metrics tm;
      CHECK_EQ_INT(tpu_sim_result_metrics(r, &tm, &d), TPU_OK);
      CHECK_EQ_INT(tm.cycles, full.cycles);
      CHECK_EQ_INT(tm.parts_from_events, 0);
      char tp[128];
      snprintf(tp, sizeof tp, "%s/t0.json", g_dir);
      CHECK_EQ_INT(tpu_sim_result_write_trace(r, tp, &d), TPU_ERR_ARG);
    }
    tpu_sim_result_free(r);
    o.no_events = 0;
    r = NULL;
    CHECK_EQ_INT(tpu_sim_run(m, &o, NULL, 0, &r, &d), TPU_OK);
    if (r) {
      tpu_sim_metrics tm;
      CHECK_EQ_INT(tpu_sim_result_metrics(r, &tm, &d), TPU_OK);
      CHECK_EQ_INT(tm.cycles, full.cycles);
      CHECK_EQ_INT(tm.parts_from_events, full.parts_from_events);
    }
    tpu_sim_result_free(r);
  }
  CHECK_EQ_INT(full.parts_from_events, 1);
  r = NULL;
  CHECK_EQ_INT(tpu_sim_run(m, &o, in, 5, &r, &d), TPU_ERR_ARG); /* timing takes no inputs */
  CHECK(r == NULL);

  /* The reference backend: values, no timing. */
  tpu_sim_options_init(&o);
  o.backend = "ref";
  CHECK_EQ_INT(tpu_sim_run(m, &o, in, 5, &r, &d), TPU_OK);
  if (r) {
    tpu_sim_array out;
    CHECK_EQ_INT(tpu_sim_result_output(r, 0, &out, &d), TPU_OK);
    CHECK(max_abs_diff(&out, &ts[5]) < 1e-5);
    CHECK(!tpu_sim_result_timed(r));
    CHECK_EQ_INT(tpu_sim_result_metrics(r, &full, &d), TPU_ERR_ARG);
    CHECK_EQ_INT(tpu_sim_result_nops(r), 0);
  }
  tpu_sim_result_free(r);
  r = NULL;

  /* Bad arguments: each an error with a message, nothing returned. */
  char buf[1024];
  o.precision = "highest";
  CHECK_EQ_INT(tpu_sim_run(m, &o, in, 5, &r, &d), TPU_ERR_ARG);
  tpu_sim_options_init(&o);
  o.backend = "gpu";
  CHECK_EQ_INT(tpu_sim_run(m, &o, in, 5, &r, &d), TPU_ERR_ARG);
  tpu_diag_format(&d, buf, sizeof buf);
  CHECK_EQ_STR(buf, "error: unknown backend 'gpu' (available: tpu, ref)");
  tpu_sim_options_init(&o);
  CHECK_EQ_INT(tpu_sim_run(m, &o, in, 4, &r, &d), TPU_ERR_ARG);
  tpu_diag_format(&d, buf, sizeof buf);
  CHECK_EQ_STR(buf, "examples/mlp.hlo:0:0: error: the entry computation 'main.2' takes 5 parameters; 4 inputs were given");
  tpu_sim_array bad = in[1];
  bad.nbytes -= 4;
  tpu_sim_array in2[5];
  memcpy(in2, in, sizeof in2);
  in2[1] = bad;
  CHECK_EQ_INT(tpu_sim_run(m, &o, in2, 5, &r, &d), TPU_ERR_ARG);
  in2[1] = in[1];
  in2[1].dtype = 99;
  CHECK_EQ_INT(tpu_sim_run(m, &o, in2, 5, &r, &d), TPU_ERR_ARG);
  in2[1] = in[1];
  in2[1].dims[0] = 32;
  in2[1].nbytes /= 2;
  CHECK_EQ_INT(tpu_sim_run(m, &o, in2, 5, &r, &d), TPU_ERR_ARG);
  tpu_diag_format(&d, buf, sizeof buf);
  CHECK_EQ_STR(buf, "error: input 1 is f32[32,128] but parameter 1 is f32[64,128] (the dimensions differ)");
  o.chip = "no-such-chip";
  CHECK(tpu_sim_run(m, &o, in, 5, &r, &d) != TPU_OK && r == NULL);
  CHECK(strstr(d.msg, "no-such-chip") || strstr(d.file, "no-such-chip"));

  /* Allocation failure at every point of a run: an error, never a crash or a leak. */
  tpu_sim_options_init(&o);
  int ok_seen = 0;
  long n;
  for (n = 1; n < 1000000 && !ok_seen; n++) {
    tpu_sim_cache_clear(); /* cold: every step of the pipeline runs */
    tpu_alloc_fail_after(n);
    tpu_status s = tpu_sim_run(m, &o, in, 5, &r, &d);
    tpu_alloc_fail_after(0);
    if (s == TPU_OK) ok_seen = 1;
    else if (s != TPU_ERR_NOMEM) {
      fprintf(stderr, "allocation %ld: status %s: %s\n", n, tpu_status_name(s), d.msg);
      CHECK_EQ_INT(s, TPU_ERR_NOMEM);
    }
    if (s != TPU_OK) CHECK(r == NULL);
    tpu_sim_result_free(r);
    r = NULL;
  }
  CHECK(ok_seen);
  CHECK(n > 100); /* the run allocates, and each allocation failed in turn */
  printf("allocation failure injected at each of %ld points\n", n - 2);
  for (int i = 0; i < 6; i++) tpu_tensor_free(&ts[i]);
  tpu_sim_module_free(m);
}

/* examples/pod/mlp: 8 devices, global inputs, results by the shardings file's lines. */
static void test_pod(void) {
  tpu_diag d;
  tpu_sim_module *m = NULL;
  CHECK_EQ_INT(tpu_sim_load_file("examples/pod/mlp.hlo", &m, &d), TPU_OK);
  if (!m) return;
  CHECK_EQ_INT(tpu_sim_module_devices(m), 8);
  tpu_sim_array p;
  CHECK_EQ_INT(tpu_sim_module_param(m, 0, &p, &d), TPU_OK);
  CHECK(p.rank == 2 && p.dims[0] == 16 && p.dims[1] == 32); /* global, not the 8 x 32 shard */
  tpu_tensor ts[5];
  tpu_sim_array in[2] = {load_npy("pod/mlp.a.npy", &ts[0]), load_npy("pod/mlp.w.npy", &ts[1])};
  for (int k = 0; k < 3; k++) {
    char name[32];
    snprintf(name, sizeof name, "pod/mlp.out%d.npy", k);
    load_npy(name, &ts[2 + k]);
  }
  const char *sh[] = {"{devices=[2,4]<=[8]}", "{devices=[4,2]<=[2,4]T(1,0) last_tile_dim_replicate}", "{replicated}"};
  tpu_sim_options o;
  tpu_sim_options_init(&o);
  o.out_shardings = sh;
  o.n_out_shardings = 3;
  o.precision = "highest";
  tpu_sim_result *r = NULL;
  CHECK_EQ_INT(tpu_sim_run(m, &o, in, 2, &r, &d), TPU_OK);
  if (r) {
    CHECK_EQ_INT(tpu_sim_result_noutputs(r), 3);
    for (int k = 0; k < 3; k++) {
      tpu_sim_array out;
      CHECK_EQ_INT(tpu_sim_result_output(r, k, &out, &d), TPU_OK);
      CHECK(max_abs_diff(&out, &ts[2 + k]) < 1e-5);
    }
    tpu_sim_metrics mt;
    CHECK_EQ_INT(tpu_sim_result_metrics(r, &mt, &d), TPU_OK);
    CHECK(mt.devices == 8 && mt.ici_bytes > 0 && mt.part_cycles[3] > 0);
    CHECK_EQ_STR(mt.part_name[3], "ici_wait");
  }
  tpu_sim_result_free(r);
  r = NULL;
  /* Each profiled op's source from the metadata and stack frames gen.py's JAX wrote: the
   * dot at gen.py:25 (h = jnp.tanh(a @ w)), the all-reduce of jnp.sum at line 26. */
  o.mode = "timing";
  o.n_out_shardings = 0;
  CHECK_EQ_INT(tpu_sim_run(m, &o, NULL, 0, &r, &d), TPU_OK);
  int seen_dot = 0, seen_ar = 0;
  for (int i = 0; r && i < tpu_sim_result_nops(r); i++) {
    tpu_sim_op op;
    CHECK_EQ_INT(tpu_sim_result_op(r, i, &op, &d), TPU_OK);
    CHECK(op.op_name != NULL && op.source_file != NULL && op.function != NULL);
    if (!op.op_name || !op.source_file || !op.function) continue;
    const char *want = "examples/pod/gen.py";
    size_t n = strlen(op.source_file), w = strlen(want);
    CHECK(n >= w && !strcmp(op.source_file + n - w, want));
    CHECK_EQ_STR(op.function, "f");
    if (!strcmp(op.op_name, "jit(f)/dot_general")) {
      seen_dot = 1;
      CHECK_EQ_INT(op.source_line, 25);
    }
    if (!strcmp(op.kind, "all-reduce")) {
      seen_ar = 1;
      CHECK_EQ_STR(op.op_name, "jit(f)/reduce_sum");
      CHECK_EQ_INT(op.source_line, 26);
    }
  }
  CHECK(seen_dot && seen_ar);
  tpu_sim_result_free(r);
  r = NULL;
  /* Allocation failure at every point of a timing run that reads the debug tables. */
  int ok_seen = 0;
  long n;
  for (n = 1; n < 1000000 && !ok_seen; n++) {
    tpu_sim_cache_clear(); /* cold: every step of the pipeline runs */
    tpu_alloc_fail_after(n);
    tpu_status s = tpu_sim_run(m, &o, NULL, 0, &r, &d);
    tpu_alloc_fail_after(0);
    if (s == TPU_OK) ok_seen = 1;
    else CHECK_EQ_INT(s, TPU_ERR_NOMEM);
    tpu_sim_result_free(r);
    r = NULL;
  }
  CHECK(ok_seen && n > 100);
  o.mode = NULL;
  o.n_out_shardings = 2; /* neither one nor one per leaf */
  CHECK_EQ_INT(tpu_sim_run(m, &o, in, 2, &r, &d), TPU_ERR_ARG);
  CHECK(r == NULL);
  for (int i = 0; i < 5; i++) tpu_tensor_free(&ts[i]);
  tpu_sim_module_free(m);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/tpusim_api_XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return 1;
  }
  CHECK_EQ_INT(tpu_sim_dtype_size(TPU_SIM_BF16), 2);
  CHECK_EQ_STR(tpu_sim_dtype_name(TPU_SIM_F32), "f32");
  CHECK_EQ_STR(tpu_sim_dtype_name(TPU_SIM_C64), "c64");
  CHECK_EQ_STR(tpu_sim_dtype_name(TPU_SIM_F8E4M3FN), "f8e4m3fn");
  CHECK_EQ_INT(tpu_sim_dtype_size(TPU_SIM_F8E5M2), 1);
  CHECK(tpu_sim_dtype_name(17) == NULL);
  test_load_errors();
  test_mlp();
  test_pod();
  rmdir(g_dir);
  CHECK_DONE();
}
