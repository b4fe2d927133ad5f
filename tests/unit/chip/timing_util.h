/* Helpers shared by the timing tests against closed forms (test_timing.c, test_timing_conv.c,
 * test_timing_gconv.c, test_timing_evict.c, test_timing_int8.c, ...):
 * HLO text compiled by the back end, a program's time on a chip, the assembler, HBM latency. */
#ifndef TPU_TESTS_TIMING_UTIL_H
#define TPU_TESTS_TIMING_UTIL_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "chip/program.h"
#include "chip/timing.h"
#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/verify.h"

static inline tpu_program *compile_src(const char *src, const tpu_chip *chip, int prec) {
  tpu_module *m = NULL;
  tpu_diag d;
  if (tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK) {
    tpu_module_free(m);
    return NULL;
  }
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = chip;
  o.precision_override = prec;
  tpu_program *p = NULL;
  if (tpu_compile_backend(m, &o, &p, &d) != TPU_OK) {
    char buf[1200];
    tpu_diag_format(&d, buf, sizeof buf);
    fprintf(stderr, "compile: %s\n", buf);
  }
  if (p) p->module = NULL; /* the module goes; the program does not need it for timing */
  tpu_module_free(m);
  return p;
}

/* HLO program src compiled for chip c through every pass, as `tpusim run` compiles it (the
 * HLO passes too: the input's relayout into the convolution's layout is its own kernel), at
 * precision_override prec (-1: the program's own; 0: what zeroed options give). */
static inline tpu_program *compile_all_prec(const char *src, const tpu_chip *c, int prec) {
  tpu_module *m = NULL;
  tpu_diag d;
  tpu_program *p = NULL;
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = c;
  o.precision_override = prec;
  if (tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK) {
    fprintf(stderr, "%s\n", d.msg);
  } else if (tpu_compile(m, &o, &p, &d) != TPU_OK) {
    fprintf(stderr, "%s\n", d.msg);
    tpu_program_free(p);
    p = NULL;
  }
  if (p) p->module = NULL; /* the module goes; the program does not need it for timing */
  tpu_module_free(m);
  return p;
}

static inline tpu_program *compile_all(const char *src, const tpu_chip *c) { return compile_all_prec(src, c, -1); }

static inline int64_t hbm_lat(const tpu_chip *c) {
  double s = c->hbm_latency_s > 0 ? c->hbm_latency_s : TPU_TIMING_DEFAULT_HBM_LATENCY_S;
  return (int64_t)llround(s * c->clock_hz);
}

static inline tpu_program *assemble(const char *text) {
  tpu_program *p = NULL;
  tpu_diag d;
  if (tpu_program_parse("t.s", text, strlen(text), &p, &d) != TPU_OK) {
    char buf[1200];
    tpu_diag_format(&d, buf, sizeof buf);
    fprintf(stderr, "assemble: %s\n", buf);
  }
  return p;
}

/* The compiler-derived per-element stream costs (chip stream_pass_bytes, lone_op_bytes,
 * lone_op_min_bytes, transpose_bytes): each kernel's time is its bytes plus those
 * bytes-equivalents at the streaming rate, plus its start and the HBM latency. */
static inline double stream_time(const char *src, const tpu_chip *c, int *nkernels) {
  tpu_program *p = compile_src(src, c, -1);
  CHECK(p != NULL);
  if (!p) return -1;
  tpu_timeline tl;
  tpu_diag d;
  double t = -1;
  if (tpu_timing_run(p, c, 0, &tl, &d) == TPU_OK) {
    t = (double)tl.total_cycles;
    tpu_timeline_free(&tl);
  }
  *nkernels = p->nops;
  tpu_program_free(p);
  return t;
}

/* Total cycles of program p on chip c, -1 on failure. */
static inline double program_cycles(const tpu_program *p, const tpu_chip *c) {
  tpu_timeline tl;
  tpu_diag d;
  double t = -1;
  if (tpu_timing_run(p, c, 0, &tl, &d) == TPU_OK) {
    t = (double)tl.total_cycles;
    tpu_timeline_free(&tl);
  }
  return t;
}

/* The cycles of HLO text compiled for c (a CHECK fails when it does not compile; -1 then). */
static inline double compiled_cycles(const char *src, const tpu_chip *c) {
  tpu_program *p = compile_all(src, c);
  CHECK(p != NULL);
  double t = p ? program_cycles(p, c) : -1;
  tpu_program_free(p);
  return t;
}


/* The cycles of program p's op named `name` on chip c (its kernel, start to end), -1 if none. */
static inline double op_cycles(const tpu_program *p, const tpu_chip *c, const char *name) {
  tpu_timeline tl;
  tpu_diag d;
  double t = -1;
  if (tpu_timing_run(p, c, 0, &tl, &d) != TPU_OK) return -1;
  for (int i = 0; i < p->nops; i++)
    if (p->ops[i].name && !strcmp(p->ops[i].name, name)) t = (double)tl.ops[i].cycles;
  tpu_timeline_free(&tl);
  return t;
}

#endif
