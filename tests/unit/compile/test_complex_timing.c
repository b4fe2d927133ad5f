/* The compiler on complex programs: the HLO passes keep complex values (no real-number
 * identities on complex constants); elementwise costs per complex element (docs/timing.md),
 * fft as 5 N log2 N flops on the vector unit plus transpose-unit shuffles, a complex dot
 * as four real matmuls; each program lowers and times. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"
#include "unit/compile/backend_util.h"

static tpu_chip g_chip;


/* Register-operations of op `op` on unit `u` (a single-tile kernel: each insn runs once). */
static int64_t unit_ops(const tpu_program *p, int op, tpu_isa_op u) {
  int64_t n = 0;
  for (int i = 0; i < p->ninsns; i++)
    if (p->insns[i].op == op && p->insns[i].opc == u) n += p->insns[i].vregs * p->insns[i].ops;
  return n;
}

/* Total cycles of a timing run (-1 on failure); *mxu gets the MXU's busy cycles. */
static int64_t times_mxu(const tpu_program *p, int64_t *mxu) {
  tpu_timeline tl;
  tpu_diag d;
  if (tpu_timing_run(p, &g_chip, 1, &tl, &d) != TPU_OK) return -1;
  int64_t c = tl.total_cycles;
  if (mxu) *mxu = tl.busy[TPU_UNIT_MXU];
  tpu_timeline_free(&tl);
  return c;
}

static int64_t times(const tpu_program *p) { return times_mxu(p, NULL); }

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* c64[8,128] is two (8,128) f32 registers (one per plane): 1024 complex elements. */
static void elementwise(void) {
  static const struct {
    const char *op, *res;
    int64_t vpu, eup;
  } cases[] = {{"add", "c64", 2, 0}, {"multiply", "c64", 6, 0}, {"divide", "c64", 11, 1}, {"abs", "f32", 5, 1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char src[512];
    if (!strcmp(cases[i].op, "abs"))
      snprintf(src, sizeof src, "HloModule m\nENTRY e {\n  a = c64[8,128] parameter(0)\n  ROOT r = f32[8,128] abs(a)\n}\n");
    else
      snprintf(src, sizeof src,
               "HloModule m\nENTRY e {\n  a = c64[8,128] parameter(0)\n  b = c64[8,128] parameter(1)\n"
               "  ROOT r = %s[8,128] %s(a, b)\n}\n",
               cases[i].res, cases[i].op);
    tpu_module *m = NULL;
    tpu_program *p = compile_src_on(src, &g_chip, &m);
    CHECK(p != NULL);
    if (!p) continue;
    int k = op_named(p, "r");
    CHECK(k >= 0);
    if (k >= 0) {
      /* the ISA runs ops per register of the kernel's largest array (2 here), rounded up */
      CHECK_EQ_INT(unit_ops(p, k, TPU_ISA_VPU), 2 * cdiv(cases[i].vpu, 2));
      CHECK_EQ_INT(unit_ops(p, k, TPU_ISA_EUP), 2 * cdiv(cases[i].eup, 2));
      CHECK_NEAR(p->ops[k].flops, 1024.0 * (double)cases[i].vpu, 0);
    }
    CHECK(times(p) > 0);
    tpu_program_free(p);
    tpu_module_free(m);
  }
}

/* fft c64[8,128] over 128 points: 5 * 1024 * 7 = 35840 flops = 35 register-ops of
 * butterflies + 2 to write the result; the minor-dim shuffles: 7 stages x 2 registers. */
static void fft_cost(void) {
  tpu_module *m = NULL;
  tpu_program *p = compile_src_on("HloModule m\nENTRY e {\n  a = c64[8,128] parameter(0)\n"
                                "  ROOT r = c64[8,128] fft(a), fft_type=FFT, fft_length={128}\n}\n", &g_chip, &m);
  CHECK(p != NULL);
  if (p) {
    int k = op_named(p, "r");
    CHECK_NEAR(p->ops[k].flops, 5.0 * 1024 * 7, 0);
    CHECK_EQ_INT(unit_ops(p, k, TPU_ISA_VPU), 2 * cdiv(35 + 2, 2));
    CHECK_EQ_INT(unit_ops(p, k, TPU_ISA_XLU), 2 * 7);
    CHECK(times(p) > 0);
  }
  tpu_program_free(p);
  tpu_module_free(m);
  /* RFFT f32[8,128] -> c64[8,65]: half the flops (17920 -> 18 ops) + 2 result registers
   * (c64[8,65] pads to one (8,128) tile per plane). */
  p = compile_src_on("HloModule m\nENTRY e {\n  a = f32[8,128] parameter(0)\n"
                   "  ROOT r = c64[8,65] fft(a), fft_type=RFFT, fft_length={128}\n}\n", &g_chip, &m);
  CHECK(p != NULL);
  if (p) {
    int k = op_named(p, "r");
    CHECK_NEAR(p->ops[k].flops, 0.5 * 5.0 * 1024 * 7, 0);
    CHECK_EQ_INT(unit_ops(p, k, TPU_ISA_VPU), 2 * cdiv(18 + 2, 2));
    CHECK(times(p) > 0);
  }
  tpu_program_free(p);
  tpu_module_free(m);
  /* A 2-D FFT costs both axes: 5 N (log2 8 + log2 128) with N = 8 * 128 * 4. */
  p = compile_src_on("HloModule m\nENTRY e {\n  a = c64[4,8,128] parameter(0)\n"
                   "  ROOT r = c64[4,8,128] fft(a), fft_type=IFFT, fft_length={8,128}\n}\n", &g_chip, &m);
  CHECK(p != NULL);
  if (p) CHECK_NEAR(p->ops[op_named(p, "r")].flops, 5.0 * 4096 * (3 + 7), 0);
  tpu_program_free(p);
  tpu_module_free(m);
}

/* A c64 dot is 4 real f32 matmuls: 4 x the passes of its precision, 8 real flops a MAC. */
static void complex_dot(void) {
  const char *fmt = "HloModule m\nENTRY e {\n  a = %s[1024,1024] parameter(0)\n  b = %s[1024,1024] parameter(1)\n"
                    "  ROOT r = %s[1024,1024] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}%s\n}\n";
  const char *prec[2] = {"", ", operand_precision={highest,highest}"};
  for (int q = 0; q < 2; q++) {
    char sc[512], sr[512];
    snprintf(sc, sizeof sc, fmt, "c64", "c64", "c64", prec[q]);
    snprintf(sr, sizeof sr, fmt, "f32", "f32", "f32", prec[q]);
    tpu_module *mc = NULL, *mr = NULL;
    tpu_program *pc = compile_src_on(sc, &g_chip, &mc), *pr = compile_src_on(sr, &g_chip, &mr);
    CHECK(pc && pr);
    if (pc && pr) {
      int passes_c = 0, passes_r = 0;
      for (int i = 0; i < pc->ninsns; i++)
        if (pc->insns[i].opc == TPU_ISA_MATMUL) passes_c = pc->insns[i].passes;
      for (int i = 0; i < pr->ninsns; i++)
        if (pr->insns[i].opc == TPU_ISA_MATMUL) passes_r = pr->insns[i].passes;
      CHECK_EQ_INT(passes_r, q ? 6 : 1);
      CHECK_EQ_INT(passes_c, 4 * passes_r);
      CHECK_NEAR(pc->ops[op_named(pc, "r")].flops, 8.0 * 1024 * 1024 * 1024, 0);
      int64_t bc = 0, br = 0, tc = times_mxu(pc, &bc), tr = times_mxu(pr, &br);
      CHECK(tc > 0 && tr > 0);
      /* four times the MXU busy cycles of the real dot of the same shape (at this size both
       * pick blocks that keep the MXUs equally fed; small dots overlap differently) */
      CHECK_EQ_INT(bc, 4 * br);
    }
    tpu_program_free(pc);
    tpu_program_free(pr);
    tpu_module_free(mc);
    tpu_module_free(mr);
  }
}

/* x + (0, 5i), x * (1, 3i), x * (1, 0i), x - (0, 1i): simplify must keep every op (a complex
 * constant with real part 0 or 1 is not an identity), so values match the unsimplified run. */
static void passes_keep_values(void) {
  const char *src = "HloModule m\nENTRY e {\n  x = c64[2] parameter(0)\n"
                    "  a = c64[] constant((0, 5))\n  ab = c64[2] broadcast(a), dimensions={}\n  s = c64[2] add(x, ab)\n"
                    "  b = c64[] constant((1, 3))\n  bb = c64[2] broadcast(b), dimensions={}\n  m = c64[2] multiply(s, bb)\n"
                    "  c = c64[] constant((1, 0))\n  cb = c64[2] broadcast(c), dimensions={}\n  n = c64[2] multiply(m, cb)\n"
                    "  d = c64[] constant((0, 1))\n  db = c64[2] broadcast(d), dimensions={}\n  ROOT r = c64[2] subtract(n, db)\n}\n";
  tpu_module *m1 = NULL, *m2 = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse("t.hlo", src, strlen(src), &m1, &d) == TPU_OK && tpu_ir_verify(m1, &d) == TPU_OK);
  CHECK(tpu_hlo_parse("t.hlo", src, strlen(src), &m2, &d) == TPU_OK && tpu_ir_verify(m2, &d) == TPU_OK);
  if (!m1 || !m2) return;
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = &g_chip;
  o.precision_override = -1;
  CHECK(tpu_compile_hlo(m2, &o, &d) == TPU_OK);
  tpu_tensor x, r1, r2;
  int64_t dims[1] = {2};
  CHECK(tpu_tensor_alloc(&x, TPU_C64, 1, dims, &d) == TPU_OK);
  float v[4] = {1.5f, -2.0f, INFINITY, 0.25f}; /* inf * (1 + 0i) makes a NaN part */
  memcpy(x.data, v, sizeof v);
  CHECK(tpu_ref_run(m1, &x, 1, &r1, &d) == TPU_OK);
  CHECK(tpu_ref_run(m2, &x, 1, &r2, &d) == TPU_OK);
  /* (1.5 - 2i + 5i)(1 + 3i) = (1.5 + 3i)(1 + 3i) = -7.5 + 7.5i; then *(1+0i), - i */
  const float *g = r1.data;
  CHECK(g[0] == -7.5f && g[1] == 6.5f);
  CHECK(isnan(((const float *)r1.data)[2]) || isnan(((const float *)r1.data)[3]));
  CHECK(memcmp(r1.data, r2.data, r1.nbytes) == 0);
  tpu_tensor_free(&x);
  tpu_tensor_free(&r1);
  tpu_tensor_free(&r2);
  tpu_module_free(m1);
  tpu_module_free(m2);
}

int main(void) {
  if (!closed_form_v5e(&g_chip)) return 1;
  passes_keep_values();
  elementwise();
  fft_cost();
  complex_dot();
  CHECK_DONE();
}
