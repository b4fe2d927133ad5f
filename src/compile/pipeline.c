/* The compile pipeline: runs the named passes in order, verifies after each HLO pass and
 * prints the module after the one --dump-after names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "compile/backend/backend.h"
#include "compile/passes/hlo_passes.h"
#include "compile/spmd/spmd.h"
#include "hlo/hlo.h"
#include "ir/verify.h"

const char *const tpu_compile_pass_names[] = {"inline", "spmd-partition", "simplify", "combine-collectives",
                                              "fuse",   "memory-schedule", "tile",           "layout",   "buffer-assign",
                                              "schedule", "lower",        NULL};

typedef struct {
  const char *name;
  tpu_status (*run)(tpu_module *m, const tpu_compile_opts *o, tpu_diag *d);
} hlo_pass;

/* TPUSIM_PASS_TIMES=1: each pass's host time on stderr (profiling the compiler). */
double tpu__pass_clock(void) {
  static int on = -1;
  if (on < 0) {
    const char *e = getenv("TPUSIM_PASS_TIMES");
    on = e && *e && strcmp(e, "0");
  }
  if (!on) return -1;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void tpu__pass_report(const char *name, double t0) {
  if (t0 >= 0) fprintf(stderr, "tpusim: pass %-20s %9.3f ms\n", name, tpu__pass_clock() - t0);
}

/* spmd-partition: partitions a program that carries sharding annotations over the mesh
 * it names (tpusim run does it before computing values; then this is a no-op). */
static tpu_status tpu__pass_spmd(tpu_module *m, const tpu_compile_opts *o, tpu_diag *d) {
  if (!o->mesh && !tpu_spmd_needed(m)) return TPU_OK;
  tpu_mesh mesh;
  int found = 1;
  if (o->mesh) TPU_TRY(tpu_mesh_parse(o->mesh, &mesh, d));
  else TPU_TRY(tpu_mesh_from_module(m, &mesh, &found, d));
  if (found) tpu_mesh_configure(&mesh, o->chip, o->precision_override, o->no_windowed_einsum);
  tpu_status st = found ? tpu_spmd_partition(m, &mesh, d) : TPU_OK;
  tpu_mesh_free(&mesh);
  return st;
}

static const hlo_pass k_hlo_passes[] = {
    {"inline", tpu__pass_inline},
    {"spmd-partition", tpu__pass_spmd},
    {"simplify", tpu__pass_simplify},
    {"combine-collectives", tpu__pass_combine},
    {"fuse", tpu__pass_fuse},
    {"memory-schedule", tpu__pass_mem_schedule},
};

/* An unknown --dump-after name is a usage error listing the valid names. */
static tpu_status check_dump_name(const tpu_compile_opts *o, tpu_diag *d) {
  if (!o->dump_after) return TPU_OK;
  for (int i = 0; tpu_compile_pass_names[i]; i++)
    if (!strcmp(o->dump_after, tpu_compile_pass_names[i])) return TPU_OK;
  char list[256] = "";
  for (int i = 0; tpu_compile_pass_names[i]; i++) {
    size_t n = strlen(list);
    snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", tpu_compile_pass_names[i]);
  }
  return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "unknown pass '%s' for --dump-after (passes: %s)", o->dump_after, list);
}

static tpu_status dump(const tpu_module *m, const tpu_compile_opts *o, tpu_diag *d) {
  char *text = tpu_hlo_print(m);
  if (!text) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory printing the module");
  FILE *f = o->dump ? o->dump : stdout;
  int bad = fputs(text, f) == EOF;
  tpu_free(text);
  if (bad) return TPU_FAIL(d, TPU_ERR_IO, tpu_noloc(), "cannot write the dump");
  return TPU_OK;
}

tpu_status tpu_compile_hlo(tpu_module *m, const tpu_compile_opts *o, tpu_diag *d) {
  tpu_diag local;
  if (!d) d = &local; /* the passes read back the status they set */
  TPU_TRY(check_dump_name(o, d));
  for (size_t i = 0; i < sizeof k_hlo_passes / sizeof k_hlo_passes[0]; i++) {
    const hlo_pass *p = &k_hlo_passes[i];
    double t0 = tpu__pass_clock();
    TPU_TRY(p->run(m, o, d));
    tpu__pass_report(p->name, t0);
    tpu_diag vd;
    t0 = tpu__pass_clock();
    tpu_status st = tpu_ir_verify(m, &vd);
    tpu__pass_report("(verify)", t0);
    if (st == TPU_ERR_NOMEM) {
      *d = vd;
      return st;
    }
    if (st != TPU_OK) {
      /* A pass that breaks the IR is a compiler bug: say which pass and what broke. */
      tpu_loc at = tpu_loc_at(vd.file[0] ? m->file : NULL, vd.line, vd.col);
      return TPU_FAIL(d, TPU_ERR_INVALID, at, "internal error: pass '%s' produced an ill-formed module: %s", p->name,
                      vd.msg);
    }
    if (o->dump_after && !strcmp(o->dump_after, p->name)) TPU_TRY(dump(m, o, d));
  }
  return TPU_OK;
}

tpu_status tpu_compile(tpu_module *m, const tpu_compile_opts *o, tpu_program **out, tpu_diag *d) {
  *out = NULL;
  TPU_TRY(tpu_compile_hlo(m, o, d));
  return tpu_compile_backend(m, o, out, d);
}
