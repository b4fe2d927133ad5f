/* tpusim run: the better-plan hint (docs/spmd.md), tpusim's own SPMD plans timed against XLA's. */

#include <stdio.h>
#include <string.h>

#include "base/strbuf.h"
#include "chip/timing.h"
#include "compile/spmd/spmd.h"
#include "ir/collective.h"
#include "pallas.h"
#include "pod/cost.h"
#include "report/report.h"
#include "cli.h"
#include "run.h"

/* Partitions a fresh parse of the program with own plans, compiles and times it: 1 with
 * *step_s, *ici and the constraints, 0 when it cannot or when own plans change nothing. */
static int time_own_plan(const run_opts *o, const tpu_chip *chip, double *step_s, double *ici, char **notes) {
  tpu_diag d;
  tpu_module *m = NULL;
  tpu_program *prog = NULL;
  tpu_timeline tl;
  memset(&tl, 0, sizeof tl);
  tpu_pod_cost_ctx pc;
  memset(&pc, 0, sizeof pc);
  tpu_mesh mesh;
  memset(&mesh, 0, sizeof mesh);
  tpu_strbuf nb;
  tpu_strbuf_init(&nb);
  int ok = 0, found = 0;
  if (tpu_cli_parse_program(o->prog, &m, &d) != TPU_OK) goto out;
  if ((o->mesh ? tpu_mesh_parse(o->mesh, &mesh, &d) : tpu_mesh_from_module(m, &mesh, &found, &d)) != TPU_OK ||
      (!o->mesh && !found))
    goto out;
  tpu_mesh_configure(&mesh, chip, o->precision, o->no_window);
  mesh.own_plans = 1;
  mesh.own_notes = &nb;
  if (tpu_spmd_partition(m, &mesh, &d) != TPU_OK || !nb.s || !nb.len) goto out;
  pc.chip = chip;
  tpu_topology topo;
  int have_topo = 0;
  if (tpu__run_pod_topology(o, chip, tpu_module_device_count(m), &topo, &have_topo, &d) != TPU_OK) goto out;
  if (have_topo) pc.topo = &topo;
  tpu_compile_opts co = {chip, NULL, NULL, o->precision, tpu_pod_coll_cost, &pc, o->sync_collectives, o->no_window,
                         NULL, NULL, tpu_pod_hops, NULL};
  if (tpu_compile(m, &co, &prog, &d) != TPU_OK || tpu_timing_run(prog, chip, 1, &tl, &d) != TPU_OK) goto out;
  *step_s = (double)tl.total_cycles / (tl.clock_hz > 0 ? tl.clock_hz : chip->clock_hz);
  *ici = tl.ici_bytes;
  *notes = tpu_strbuf_take(&nb);
  ok = *notes != NULL;
out:
  tpu_strbuf_deinit(&nb);
  tpu_mesh_free(&mesh);
  tpu_timeline_free(&tl);
  tpu_program_free(prog);
  tpu_pod_cost_free(&pc);
  tpu_module_free(m);
  return ok;
}

/* The own plan, when it beats the prediction: 5 % faster, or 10 % fewer bytes each chip
 * sends and no slower. */
void tpu__run_find_plan_hint(const run_opts *o, const tpu_chip *chip, double step_s, double ici, plan_hint *h) {
  memset(h, 0, sizeof *h);
  double st, ib;
  char *notes = NULL;
  if (!time_own_plan(o, chip, &st, &ib, &notes)) return;
  if (st < 0.95 * step_s || (ib < 0.9 * ici && st <= step_s)) {
    h->found = 1;
    h->step_s = st;
    h->ici_bytes = ib;
    h->constraints = notes;
  } else {
    tpu_free(notes);
  }
}

void tpu__run_print_plan_hint(FILE *f, const plan_hint *h, double step_s, double ici) {
  if (!h->found) return;
  char a[32], b[32];
  tpu_report_time(a, sizeof a, h->step_s);
  tpu_report_si(b, sizeof b, h->ici_bytes, "B");
  fprintf(f, "better plan (tpusim's own search; the prediction above is XLA's plan): %s per step (%+.1f%%), each chip "
          "sends %s over ICI (%+.1f%%), with these sharding constraints:\n", a, 100 * (h->step_s / step_s - 1), b,
          ici > 0 ? 100 * (h->ici_bytes / ici - 1) : 0);
  for (const char *p = h->constraints; p && *p;) {
    const char *e = strchr(p, '\n');
    int n = e ? (int)(e - p) : (int)strlen(p);
    fprintf(f, "  %.*s\n", n, p);
    p += n + (e != NULL);
  }
}
