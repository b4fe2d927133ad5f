/* A copy that moves the lanes' dimension between HBM arrays (copy_kind.c tpu__relayout_rows, the
 * chips' hbm_relayout_row_cycles): the XLA TPU compiler's kernel lasts a fixed time per row of 128
 * lanes of its two sides, start to end, v5p's two TensorCores sharing the rows (libtpu probes
 * off the corpora, bench/fidelity/probes/hbm_rows.py, data/hbm_rows.jsonl, on v5p):
 *  - a 3x3 stride-2 max pool over bf16[16,96,96,64]: the compiler lays the parameter out with W
 *    in the lanes ({2,3,1,0}) and copies it row-major for the window, HBM to HBM, 191,180
 *    cycles (245,760 rows), timed from its compiled copy and as tpusim's own compilation's
 *    copy.relayout (window_layout.c), which is the same copy.
 * Pinned at 10 %; without the field each is under 0.9 of the compiler's figure. */
#include "timing_util.h"

#define COMPILED_COPY                                                                                          \
  "HloModule m, is_scheduled=true\n"                                                                           \
  "ENTRY e {\n"                                                                                                \
  "  a = bf16[16,96,96,64]{2,3,1,0:T(8,128)(2,1)} parameter(0)\n"                                              \
  "  ROOT c = bf16[16,96,96,64]{3,2,1,0:T(8,128)(2,1)} copy(a)\n"                                              \
  "}\n"

#define OWN_POOL                                                                                               \
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

static double copy_cycles(const char *src, const tpu_chip *c, const char *name) {
  tpu_program *p = compile_all(src, c);
  CHECK(p != NULL);
  double t = p ? op_cycles(p, c, name) : -1;
  tpu_program_free(p);
  return t;
}

static void one(const char *what, const char *src, const char *name, double compiler) {
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
  one("compiled copy bf16[16,96,96,64] {2,3,1,0} -> {3,2,1,0}", COMPILED_COPY, "c", 191180);
  one("own max pool's copy of bf16[16,96,96,64] into row-major", OWN_POOL, "copy.relayout", 191180);
  CHECK_DONE();
}
