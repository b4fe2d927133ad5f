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

static int64_t cycles_of(const char *src, const tpu_chip *c) {
  tpu_module *m = parse(src);
  CHECK(m != NULL);
  if (!m) return -1;
  tpu_diag d;
  tpu_program *p = NULL;
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = c;
  o.precision_override = -1;
  CHECK(tpu_compile(m, &o, &p, &d) == TPU_OK);
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
  int64_t p = cycles_of(pad, &v5e), n = cycles_of(neg, &v5e), i = cycles_of(inner, &v5e);
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
