/* Helpers shared by the back-end tests (test_backend*.c, test_vmem.c): parse and compile HLO
 * text, round-trip a program through its asm, find its ops and HBM buffers, and the v5e
 * preset reduced to the published figures the closed-form checks assume. */
#ifndef TPU_TESTS_BACKEND_UTIL_H
#define TPU_TESTS_BACKEND_UTIL_H

#include <string.h>

#include "chip/chip.h"
#include "chip/program.h"
#include "chip/timing.h"
#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/verify.h"

static inline tpu_module *parse(const char *src) {
  tpu_module *m = NULL;
  tpu_diag d;
  if (tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK) {
    char buf[1200];
    tpu_diag_format(&d, buf, sizeof buf);
    fprintf(stderr, "parse: %s\n", buf);
    tpu_module_free(m);
    return NULL;
  }
  return m;
}

static inline tpu_program *compile(tpu_module *m, const tpu_chip *chip, tpu_diag *d) {
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = chip;
  o.precision_override = -1;
  tpu_program *p = NULL;
  if (tpu_compile_backend(m, &o, &p, d) != TPU_OK) return NULL;
  return p;
}

/* disassemble(assemble(text)) == text, and the reassembled program times the same on chip. */
static inline int program_roundtrip(const tpu_program *p, const char *name, const tpu_chip *chip) {
  char *t1 = tpu_program_text(p);
  tpu_program *q = NULL;
  tpu_diag d;
  int ok = t1 && tpu_program_parse(name, t1, strlen(t1), &q, &d) == TPU_OK;
  if (!ok) {
    char buf[1200];
    tpu_diag_format(&d, buf, sizeof buf);
    fprintf(stderr, "  %s: assemble failed: %s\n", name, buf);
  }
  char *t2 = ok ? tpu_program_text(q) : NULL;
  if (ok && (!t2 || strcmp(t1, t2) != 0)) {
    fprintf(stderr, "  %s: asm round trip differs\n", name);
    ok = 0;
  }
  if (ok) {
    tpu_timeline a, b;
    tpu_diag d1, d2;
    tpu_status s1 = tpu_timing_run(p, chip, 0, &a, &d1), s2 = tpu_timing_run(q, chip, 0, &b, &d2);
    if (s1 != s2 || (s1 == TPU_OK && a.total_cycles != b.total_cycles)) {
      fprintf(stderr, "  %s: reassembled program times differently\n", name);
      ok = 0;
    }
    if (s1 == TPU_OK) tpu_timeline_free(&a);
    if (s2 == TPU_OK) tpu_timeline_free(&b);
  }
  tpu_free(t1);
  tpu_free(t2);
  tpu_program_free(q);
  return ok;
}

static inline int hbm_named(const tpu_program *p, const char *name) {
  for (int i = 0; i < p->nhbm; i++)
    if (!strcmp(p->hbm[i].name, name)) return i;
  return -1;
}

static inline int op_named(const tpu_program *p, const char *name) {
  for (int i = 0; i < p->nops; i++)
    if (p->ops[i].name && !strcmp(p->ops[i].name, name)) return i;
  return -1;
}

/* src parsed and compiled for chip c (NULL when either fails, which is checked); *m to free
 * after the program, which borrows it. */
static inline tpu_program *compile_src_on(const char *src, const tpu_chip *c, tpu_module **m) {
  *m = parse(src);
  CHECK(*m != NULL);
  if (!*m) return NULL;
  tpu_diag d;
  tpu_program *p = compile(*m, c, &d);
  CHECK(p != NULL);
  return p;
}

/* `src` compiled for chip preset `name` (loaded into *c); NULL on any failure (checked).
 * With `passes`, through the HLO passes first (inline, simplify, fuse), as `tpusim compile`. */
static inline tpu_program *compile_for_with(const char *name, const char *src, int passes, tpu_chip *c, tpu_module **m) {
  tpu_diag d;
  *m = NULL;
  CHECK(tpu_chip_load(name, c, &d) == TPU_OK);
  if (!passes) return compile_src_on(src, c, m);
  *m = parse(src);
  CHECK(*m != NULL);
  if (!*m) return NULL;
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = c;
  o.precision_override = -1;
  tpu_program *p = NULL;
  CHECK(tpu_compile(*m, &o, &p, &d) == TPU_OK);
  return p;
}

static inline tpu_program *compile_for(const char *name, const char *src, tpu_chip *c, tpu_module **m) {
  return compile_for_with(name, src, 0, c, m);
}

/* Program p timed on chip c into *tl (the caller frees it): 1, or 0 when timing fails (checked). */
static inline int time_program(const tpu_program *p, const tpu_chip *c, tpu_timeline *tl) {
  tpu_diag d;
  int ok = tpu_timing_run(p, c, 0, tl, &d) == TPU_OK;
  CHECK(ok);
  return ok;
}

/* Program p (NULL allowed) timed on chip c: the cycles (with `cycles`) or the HBM bytes of
 * its op named `name`; -1 when p is NULL, timing fails (checked) or no op has that name. */
static inline double named_op_value(const tpu_program *p, const tpu_chip *c, const char *name, int cycles) {
  tpu_timeline tl;
  double v = -1;
  if (p && time_program(p, c, &tl)) {
    for (int i = 0; i < tl.nops; i++)
      if (!strcmp(tl.ops[i].name, name)) v = cycles ? (double)tl.ops[i].cycles : tl.ops[i].hbm_bytes;
    tpu_timeline_free(&tl);
  }
  return v;
}

/* src compiled for chip c and timed: 1 with *tl filled (the caller frees it), 0 when either
 * step fails (compile failures are checked). */
static inline int time_src(const char *src, const tpu_chip *c, tpu_timeline *tl) {
  tpu_module *m = NULL;
  tpu_diag d;
  tpu_program *p = compile_src_on(src, c, &m);
  int ok = p && tpu_timing_run(p, c, 0, tl, &d) == TPU_OK;
  tpu_program_free(p);
  tpu_module_free(m);
  return ok;
}

/* The v5e preset for closed forms on the published figures: DMAs at hbm_bw, no per-kernel
 * start cost, weights loaded a row per cycle, every operand read from HBM (no cross-program
 * prefetch), tiles in 3/4 of the published VMEM (no scoped limit). 0 when it cannot load. */
static inline int closed_form_v5e(tpu_chip *c) {
  tpu_diag d;
  if (tpu_chip_load("v5e", c, &d) != TPU_OK) {
    fprintf(stderr, "cannot load v5e\n");
    return 0;
  }
  c->hbm_efficiency = c->kernel_overhead_s = c->vector_ops_per_cycle = c->vector_load_ops = 0;
  c->matmul_overhead_s = c->matmul_base_s = c->matmul_write_s = c->eup_pushes_per_cycle = 0;
  c->mxu_weight_load_cycles = 0;
  c->scoped_vmem_bytes = 0;
  c->prov[TPU_CHIP_XPREFETCH_MAX_BYTES].status = TPU_PROV_ABSENT;
  return 1;
}

/* The step cycles of src on chip c, through the HLO passes (as `tpusim run`) or not. */
static inline int64_t step_cycles_of(const char *src, const tpu_chip *c, int passes) {
  tpu_module *m = parse(src);
  CHECK(m != NULL);
  if (!m) return -1;
  tpu_diag d;
  tpu_program *p = NULL;
  if (passes) {
    tpu_compile_opts o;
    memset(&o, 0, sizeof o);
    o.chip = c;
    o.precision_override = -1;
    CHECK(tpu_compile(m, &o, &p, &d) == TPU_OK);
  } else {
    p = compile(m, c, &d);
    CHECK(p != NULL);
  }
  int64_t cyc = -1;
  tpu_timeline tl;
  if (p && time_program(p, c, &tl)) {
    cyc = tl.total_cycles;
    tpu_timeline_free(&tl);
  }
  tpu_program_free(p);
  tpu_module_free(m);
  return cyc;
}

/* A collective link of flat cost for tests that compile one chip of a pod: 10 us, 8 MiB. */
static inline tpu_status flat_link(void *user, const tpu_instr *in, tpu_coll_cost *c, tpu_diag *d) {
  (void)user, (void)in, (void)d;
  c->seconds = 1e-5;
  c->bytes = 8 << 20;
  c->lanes = 0;
  return TPU_OK;
}

/* Compiles m for chip as one chip of a pod (its collectives cost link time, flat_link): the
 * HLO passes and the back end when `passes`, else the back end alone. */
static inline tpu_program *compile_pod_chip(tpu_module *m, const tpu_chip *chip, int passes) {
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = chip;
  o.precision_override = -1;
  o.coll_cost = flat_link;
  tpu_program *p = NULL;
  tpu_diag d;
  CHECK(m && (passes ? tpu_compile(m, &o, &p, &d) : tpu_compile_backend(m, &o, &p, &d)) == TPU_OK);
  return p;
}

#endif
