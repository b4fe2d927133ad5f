/* A compiled program's copy that moves the lanes' dimension between HBM arrays (copy_kind.c
 * tpu__relayout_rows, the chips' hbm_relayout_row_cycles): the XLA TPU compiler's kernel lasts
 * a fixed time per row of 128 lanes of its two sides, start to end (probes/hbm_rows.py,
 * probes/hbm_rows_corpus.py). The calibration corpus's compiled copy of bf16[32,112,112,64]
 * {3,0,2,1} -> {2,3,1,0} (conv_fwd_stem7x7_bf16's copy.2; 630,784 rows): 832,048 cycles on v4's
 * one-core device, 826,560 on v6e, where tpusim's transfers and register work took 489,215 and
 * 446,723. Pinned at 10 %; the pin fails without the field. In tpusim's own compilation the rule
 * is off on these chips (the compiler keeps such a copy's side in CMEM or VMEM): the same copy
 * as a transpose of an entry parameter is not priced. On v5p, which keeps nothing on chip between
 * kernels, own compilation pays it too: a 3x3 stride-2 max pool over bf16[16,96,96,64], whose
 * parameter the compiler lays out with W in the lanes ({2,3,1,0}) and copies row-major for the
 * window, HBM to HBM, in 191,180 cycles (245,760 rows; libtpu, data/hbm_rows.jsonl), timed from
 * that compiled copy and as tpusim's own copy.relayout (window_layout.c), the same copy. */
#include "timing_util.h"

#define COMPILED_COPY                                                                                          \
  "HloModule m, is_scheduled=true\n"                                                                           \
  "ENTRY e {\n"                                                                                                \
  "  a = bf16[32,112,112,64]{3,0,2,1:T(8,128)(2,1)} parameter(0)\n"                                            \
  "  ROOT c = bf16[32,112,112,64]{2,3,1,0:T(8,128)(2,1)} copy(a)\n"                                            \
  "}\n"

#define V5P_COPY                                                                                               \
  "HloModule m, is_scheduled=true\n"                                                                           \
  "ENTRY e {\n"                                                                                                \
  "  a = bf16[16,96,96,64]{2,3,1,0:T(8,128)(2,1)} parameter(0)\n"                                              \
  "  ROOT c = bf16[16,96,96,64]{3,2,1,0:T(8,128)(2,1)} copy(a)\n"                                              \
  "}\n"

#define V5P_OWN_POOL                                                                                           \
  "HloModule m\n"                                                                                              \
  "mx {\n"                                                                                                     \
  "  a = bf16[] parameter(0)\n"                                                                                \
  "  b = bf16[] parameter(1)\n"                                                                                \
  "  ROOT m = bf16[] maximum(a, b)\n"                                                                          \
  "}\n"                                                                                                        \
  "ENTRY e {\n"                                                                                                \
  "  x = bf16[16,96,96,64]{3,2,1,0} parameter(0)\n"                                                            \
  "  i = bf16[] constant(-inf)\n"                                                                              \
  "  ROOT r = bf16[16,48,48,64]{3,2,1,0} reduce-window(x, i), window={size=1x3x3x1 stride=1x2x2x1 "            \
  "pad=0_0x0_1x0_1x0_0}, to_apply=mx\n"                                                                        \
  "}\n"

#define OWN_TRANSPOSE                                                                                          \
  "HloModule m\n"                                                                                              \
  "ENTRY e {\n"                                                                                                \
  "  a = bf16[32,112,112,64]{3,2,1,0} parameter(0)\n"                                                          \
  "  ROOT t = bf16[32,64,112,112]{3,2,1,0} transpose(a), dimensions={0,3,1,2}\n"                               \
  "}\n"

static double copy_cycles(const char *src, const tpu_chip *c, const char *name) {
  tpu_program *p = compile_all(src, c);
  CHECK(p != NULL);
  double t = p ? op_cycles(p, c, name) : -1;
  tpu_program_free(p);
  return t;
}

static void one(const char *chip, double compiler) {
  tpu_chip c, off;
  tpu_diag d;
  CHECK(tpu_chip_load(chip, &c, &d) == TPU_OK);
  CHECK(c.hbm_relayout_row_cycles > 0);
  off = c;
  off.hbm_relayout_row_cycles = 0;
  double t = copy_cycles(COMPILED_COPY, &c, "c"), t_off = copy_cycles(COMPILED_COPY, &off, "c");
  printf("%s compiled copy bf16[32,112,112,64] {3,0,2,1} -> {2,3,1,0}: %.0f cycles (the compiler: %.0f); without "
         "hbm_relayout_row_cycles %.0f\n", chip, t, compiler, t_off);
  CHECK(fabs(t / compiler - 1) < 0.10);
  CHECK(t_off > 0 && t_off < 0.9 * compiler); /* the pin above fails without the rule */
  double own = copy_cycles(OWN_TRANSPOSE, &c, "t"), own_off = copy_cycles(OWN_TRANSPOSE, &off, "t");
  printf("%s own transpose of the same array: %.0f cycles, without the field %.0f\n", chip, own, own_off);
  CHECK(own > 0 && own == own_off);
}

static void v5p(const char *what, const char *src, const char *name, double compiler) {
  tpu_chip c, off;
  tpu_diag d;
  CHECK(tpu_chip_load("v5p", &c, &d) == TPU_OK);
  CHECK(c.hbm_relayout_row_cycles > 0);
  off = c;
  off.hbm_relayout_row_cycles = 0;
  double t = copy_cycles(src, &c, name), t_off = copy_cycles(src, &off, name);
  printf("v5p %s: %.0f cycles (the compiler: %.0f); without hbm_relayout_row_cycles %.0f\n", what, t, compiler, t_off);
  CHECK(fabs(t / compiler - 1) < 0.10);
  CHECK(t_off > 0 && t_off < 0.9 * compiler); /* the pin above fails without the rule */
}

int main(void) {
  one("v4:core", 832048);
  one("v6e", 826560);
  v5p("compiled copy bf16[16,96,96,64] {2,3,1,0} -> {3,2,1,0}", V5P_COPY, "c", 191180);
  v5p("own max pool's copy of bf16[16,96,96,64] into row-major", V5P_OWN_POOL, "copy.relayout", 191180);
  CHECK_DONE();
}
