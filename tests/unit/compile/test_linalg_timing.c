/* cholesky and triangular-solve on the TPU back end (src/compile/backend/linalg.c, docs/timing.md):
 * useful flops n^3/3 and k^2 m; the MXU's busy cycles equal the sum of the blocked
 * algorithm's matmuls, panel by panel (the MXU model's own formula per matmul); the vector
 * units' equal the triangles' register counts; the steps run one after another; a matrix
 * too large for VMEM streams each step's operands (its HBM bytes are the algorithm's); a
 * batch splits into equal groups; the program prints and assembles back to itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chip/program.h"
#include "chip/timing.h"
#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/verify.h"

static tpu_chip g_chip;

static tpu_program *compile_text(const char *src, int precision, tpu_module **mod) {
  tpu_module *m = NULL;
  tpu_diag d;
  tpu_program *p = NULL;
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = &g_chip;
  o.precision_override = precision;
  if (tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK ||
      tpu_compile_backend(m, &o, &p, &d) != TPU_OK) {
    char buf[1200];
    tpu_diag_format(&d, buf, sizeof buf);
    fprintf(stderr, "compile: %s\n%s\n", buf, src);
    tpu_module_free(m);
    return NULL;
  }
  *mod = m;
  return p;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* MXU cycles of b products m x k by k x n on all of v5e's MXUs at `passes`. */
static int64_t mm(int64_t m, int64_t k, int64_t n, int64_t b, int passes) {
  if (m <= 0 || k <= 0 || n <= 0) return 0;
  tpu_insn in = tpu_insn_make(TPU_ISA_MATMUL, -1);
  in.m = m;
  in.k = k;
  in.n = n;
  in.b = b;
  in.mxus = (int)(g_chip.mxus_per_core * g_chip.tensorcores);
  in.passes = passes;
  in.dtype = TPU_F32;
  int64_t c = 0;
  tpu_diag d;
  if (tpu_timing_matmul_cycles(&in, &g_chip, &c, &d) != TPU_OK) return -1;
  return c;
}

/* Registers a w x w triangle's steps touch: sum over s of ceil((w-s)/8) x ceil(w/128). */
static int64_t tri(int64_t w) {
  int64_t v = 0;
  for (int64_t s = 0; s < w; s++) v += cdiv(w - s, 8) * cdiv(w, 128);
  return v;
}

typedef struct {
  int64_t total, busy[TPU_UNIT_COUNT];
  double hbm;
} run;

static int time_it(const tpu_program *p, run *r) {
  tpu_timeline tl;
  tpu_diag d;
  if (tpu_timing_run(p, &g_chip, 0, &tl, &d) != TPU_OK) return 0;
  r->total = tl.total_cycles;
  memcpy(r->busy, tl.busy, sizeof r->busy);
  r->hbm = 0;
  for (int i = 0; i < p->nops; i++) r->hbm += tl.ops[i].hbm_bytes;
  tpu_timeline_free(&tl);
  return 1;
}

/* Expected MXU and vector cycles of a cholesky of order n (one matrix, f32). */
static void chol_expect(int64_t n, int passes, int64_t *mxu, int64_t *vpu, int64_t *xlu, int64_t *eup) {
  *mxu = *vpu = *xlu = *eup = 0;
  for (int64_t i = 0; i < n; i += 128) {
    int64_t w = n - i < 128 ? n - i : 128, r = n - i - w, tri_n = r > 0 ? 2 : 1;
    *mxu += mm(n - i, i, w, 1, passes) + mm(r, w, w, 1, passes);
    *vpu += 3 * tri(w) * tri_n;
    *xlu += tri(w) * tri_n;
    *eup += w * tri_n;
  }
}

static void cholesky_small(void) {
  const char *src = "HloModule m\nENTRY e {\n a = f32[512,512] parameter(0)\n"
                    " ROOT c = f32[512,512] cholesky(a), lower=true\n}\n";
  tpu_module *m = NULL;
  tpu_program *p = compile_text(src, -1, &m);
  CHECK(p != NULL);
  if (!p) return;
  CHECK(p->nops == 1 && p->ops[0].flops == 512.0 * 512 * 512 / 3);
  run r;
  CHECK(time_it(p, &r));
  int64_t mxu, vpu, xlu, eup;
  chol_expect(512, 6, &mxu, &vpu, &xlu, &eup);
  CHECK_EQ_INT(r.busy[TPU_UNIT_MXU], mxu);
  CHECK_EQ_INT(r.busy[TPU_UNIT_VPU], vpu);
  CHECK_EQ_INT(r.busy[TPU_UNIT_XLU], xlu);
  CHECK_EQ_INT(r.busy[TPU_UNIT_EUP], eup);
  CHECK_EQ_INT(vpu, 3 * 1088 * 7); /* 4 panels: 3 with a panel below (2 triangles), 1 without */
  /* Serial: update, triangles, solve one after another, plus loading and storing the matrix. */
  CHECK(r.total >= mxu + vpu + xlu + eup);
  CHECK(r.total < mxu + vpu + xlu + eup + 2 * (512 * 512 * 4) / (int64_t)(g_chip.hbm_bw / g_chip.clock_hz) + 4000);
  CHECK(r.hbm == 2.0 * 512 * 512 * 4); /* resident: read once, written once */
  /* The program assembles back to itself. */
  char *t1 = tpu_program_text(p);
  tpu_program *q = NULL;
  tpu_diag d;
  CHECK(t1 && tpu_program_parse("p.s", t1, strlen(t1), &q, &d) == TPU_OK);
  char *t2 = q ? tpu_program_text(q) : NULL;
  CHECK(t2 && !strcmp(t1, t2));
  free(t1);
  free(t2);
  tpu_program_free(q);
  tpu_program_free(p);
  tpu_module_free(m);
  /* bf16 operands: one pass; --precision default on f32: one pass as well. */
  p = compile_text(src, 0, &m);
  CHECK(p && time_it(p, &r));
  chol_expect(512, 1, &mxu, &vpu, &xlu, &eup);
  CHECK_EQ_INT(r.busy[TPU_UNIT_MXU], mxu);
  tpu_program_free(p);
  tpu_module_free(m);
}

/* 64 panels timed in 16 groups of 4 (each group's mean shape): within 1 % of the
 * panel-by-panel sum. Far faster than the vector unit alone doing n^3/3 flops. */
static void cholesky_grouped(void) {
  const char *src = "HloModule m\nENTRY e {\n a = f32[8192,8192] parameter(0)\n"
                    " ROOT c = f32[8192,8192] cholesky(a), lower=false\n}\n";
  tpu_module *m = NULL;
  tpu_program *p = compile_text(src, -1, &m);
  CHECK(p != NULL);
  if (!p) return;
  run r;
  CHECK(time_it(p, &r));
  int64_t mxu, vpu, xlu, eup;
  chol_expect(8192, 6, &mxu, &vpu, &xlu, &eup);
  double rel = (double)(r.busy[TPU_UNIT_MXU] - mxu) / (double)mxu;
  CHECK(rel > -0.01 && rel < 0.01);
  CHECK_EQ_INT(r.busy[TPU_UNIT_VPU], vpu);
  CHECK((double)r.total < 8192.0 * 8192 * 8192 / 3 / 1024 / 4);
  /* 256 MiB per matrix in and out: streamed. HBM bytes: per panel, l[i:, :i] and the
   * panel read, the panel written. */
  double bytes = 0;
  for (int64_t i = 0; i < 8192; i += 128) bytes += (double)((8192 - i) * i + 2 * (8192 - i) * 128) * 4;
  CHECK(r.hbm == bytes);
  CHECK(p->vmem_peak <= g_chip.vmem_bytes / 4 * 3);
  tpu_program_free(p);
  tpu_module_free(m);
}

/* triangular-solve, 2 x (256 x 256 triangle, 64 right-hand sides), both sides. */
static void solves(void) {
  for (int left = 0; left < 2; left++) {
    char src[512];
    snprintf(src, sizeof src,
             "HloModule m\nENTRY e {\n a = f32[2,256,256] parameter(0)\n b = f32[%s] parameter(1)\n"
             " ROOT x = f32[%s] triangular-solve(a, b), left_side=%s, lower=true, transpose_a=TRANSPOSE\n}\n",
             left ? "2,256,64" : "2,64,256", left ? "2,256,64" : "2,64,256", left ? "true" : "false");
    tpu_module *m = NULL;
    tpu_program *p = compile_text(src, -1, &m);
    CHECK(p != NULL);
    if (!p) continue;
    CHECK(p->ops[0].flops == 2.0 * 256 * 256 * 64);
    run r;
    CHECK(time_it(p, &r));
    int64_t mxu = 0;
    for (int64_t i = 0; i < 256; i += 128)
      mxu += left ? mm(128, i, 64, 2, 6) + mm(128, 128, 64, 2, 6) : mm(64, i, 128, 2, 6) + mm(64, 128, 128, 2, 6);
    CHECK_EQ_INT(r.busy[TPU_UNIT_MXU], mxu);
    CHECK_EQ_INT(r.busy[TPU_UNIT_VPU], 3 * tri(128) * 2 * 2);
    CHECK(r.total >= mxu + 4 * tri(128) * 2 * 2 + 128 * 2 * 2); /* vpu 3, xlu 1 per register */
    tpu_program_free(p);
    tpu_module_free(m);
  }
}

/* A batch larger than VMEM holds at once: equal groups in a loop, each matrix timed once. */
static void batched(void) {
  const char *src = "HloModule m\nENTRY e {\n a = f32[40,1024,1024] parameter(0)\n"
                    " ROOT c = f32[40,1024,1024] cholesky(a), lower=true\n}\n";
  tpu_module *m = NULL;
  tpu_program *p = compile_text(src, -1, &m);
  CHECK(p != NULL);
  if (!p) return;
  int loops = 0;
  int64_t trips = 0;
  for (int i = 0; i < p->ninsns; i++)
    if (p->insns[i].opc == TPU_ISA_LOOP) loops++, trips = p->insns[i].trips;
  CHECK(loops == 1 && trips > 1 && 40 % trips == 0);
  run r;
  CHECK(time_it(p, &r));
  int64_t mxu = 0;
  for (int64_t i = 0; i < 1024; i += 128) {
    int64_t r2 = 1024 - i - 128;
    mxu += mm(1024 - i, i, 128, 40 / trips, 6) + mm(r2, 128, 128, 40 / trips, 6);
  }
  CHECK_EQ_INT(r.busy[TPU_UNIT_MXU], mxu * trips);
  CHECK(r.hbm == 2.0 * 40 * 1024 * 1024 * 4);
  tpu_program_free(p);
  tpu_module_free(m);
}

int main(void) {
  tpu_diag d;
  if (tpu_chip_load("v5e", &g_chip, &d) != TPU_OK) return 1;
  /* closed forms on the published figures (one VPU op per cycle, DMAs at hbm_bw, no
   * per-kernel start cost), not the preset's calibration to the XLA cost model */
  g_chip.hbm_efficiency = g_chip.kernel_overhead_s = g_chip.vector_ops_per_cycle = 0;
  g_chip.matmul_overhead_s = g_chip.matmul_base_s = g_chip.matmul_write_s = g_chip.eup_pushes_per_cycle = 0;
  cholesky_small();
  cholesky_grouped();
  solves();
  batched();
  CHECK_DONE();
}
