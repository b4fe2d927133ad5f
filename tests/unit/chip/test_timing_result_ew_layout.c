/* A rank-2 elementwise program whose result the compiler lays out itself (no layouts in the
 * HLO text: JAX's out_layout_modes "default"): the XLA TPU compiler lays the result out as it
 * pads least ({0,1}: the rows in the lanes) and gives the elementwise ops before it that
 * layout, so its one kernel computes on the least padded registers (tile.c value_vregs;
 * libtpu probes off the corpus, bench/fidelity/probes/result_ew_layout.py,
 * data/result_ew_layout.jsonl: f32[3000,5] 1,409 cycles on v4, f32[2000,12] 1,679, tpusim
 * before the rule 2,337 and 2,275 with 5 and 12 columns padded to 128 lanes). Pinned at 10 %;
 * TPUSIM_NO_RESULT_EW_LAYOUT=1 (the rule off) must land above 1.3x. */
#include <stdlib.h>

#include "timing_util.h"

#define PROG(R, C, OP)                                                                                             \
  "HloModule m\n"                                                                                              \
  "ENTRY e {\n"                                                                                                \
  "  a = f32[" #R "," #C "] parameter(0)\n"                                                                    \
  "  b = f32[" #R "," #C "] parameter(1)\n"                                                                    \
  "  m = f32[" #R "," #C "] multiply(a, b)\n"                                                                  \
  "  x = f32[" #R "," #C "] add(m, a)\n"                                                                       \
  "  y = f32[" #R "," #C "] " OP "(x)\n"                                                                         \
  "  ROOT z = f32[" #R "," #C "] maximum(y, b)\n"                                                              \
  "}\n"


static void one(const char *what, const char *src, double compiler) {
  tpu_chip c;
  tpu_diag d;
  if (tpu_chip_load("v4:core", &c, &d) != TPU_OK) {
    CHECK(0);
    return;
  }
  unsetenv("TPUSIM_NO_RESULT_EW_LAYOUT");
  double t = compiled_cycles(src, &c);
  setenv("TPUSIM_NO_RESULT_EW_LAYOUT", "1", 1);
  double t_off = compiled_cycles(src, &c);
  unsetenv("TPUSIM_NO_RESULT_EW_LAYOUT");
  printf("v4 %s: %.0f cycles (the compiler: %.0f); without the rule %.0f\n", what, t, compiler, t_off);
  CHECK(fabs(t / compiler - 1) < 0.10);
  CHECK(t_off > 1.3 * compiler);
}

int main(void) {
  one("f32[3000,5] multiply, add, tanh, maximum", PROG(3000, 5, "tanh"), 1409);
  one("f32[2000,12] multiply, add, exponential, maximum", PROG(2000, 12, "exponential"), 1679);
  CHECK_DONE();
}
