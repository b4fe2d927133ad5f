/* A pad kernel of its own (compile/backend/layout.c whole_window_pad): the XLA TPU compiler
 * runs it over windows of its result, reading an input window of each window's size, and
 * times it as the unfused elementwise kernel over its result (libtpu probes,
 * bench/fidelity/probes/pad_window.py: v5e f32 [16,192,256] padded to [16,384,256], 47,440
 * cycles, the same as negate of f32[16,384,256]). An interior pad is not such a kernel. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util.h"
#include "unit/compile/backend_util.h"

static void pad_window(void) {
  tpu_chip v5e;
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &v5e, &d) == TPU_OK);
  const char *pad = "HloModule p\nENTRY e {\n  x = f32[16,192,256] parameter(0)\n  k = f32[] constant(0)\n"
                    "  ROOT r = f32[16,384,256] pad(x, k), padding=0_0x0_192x0_0\n}\n";
  const char *neg = "HloModule n\nENTRY e {\n  x = f32[16,384,256] parameter(0)\n"
                    "  ROOT r = f32[16,384,256] negate(x)\n}\n";
  const char *inner = "HloModule p\nENTRY e {\n  x = f32[16,192,256] parameter(0)\n  k = f32[] constant(0)\n"
                      "  ROOT r = f32[16,383,256] pad(x, k), padding=0_0x0_0_1x0_0\n}\n";
  int64_t p = step_cycles_of(pad, &v5e, 1), n = step_cycles_of(neg, &v5e, 1), i = step_cycles_of(inner, &v5e, 1);
  printf("v5e f32 [16,192,256] -> [16,384,256] pad %lld cycles (compiler 47,440), negate of the result %lld "
         "(compiler 47,440); interior pad %lld\n",
         (long long)p, (long long)n, (long long)i);
  /* without the rule the pad moves its operand's bytes and none of the lone kernel's stream
   * costs: 22,602 cycles */
  CHECK(fabs((double)p - 47440.0) <= 0.05 * 47440.0);
  CHECK(fabs((double)p - (double)n) <= 0.02 * (double)n);
  /* an interior pad keeps its own pricing (not the elementwise kernel's) */
  CHECK(i > 0 && i != p);
}

int main(void) {
  pad_window();
  CHECK_DONE();
}
