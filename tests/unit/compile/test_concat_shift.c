/* A concatenate's shift cost (compile/backend/layout.c shift_regs, chip concat_shift_cycles):
 * the XLA TPU compiler runs a concatenate as each operand padded to the result's shape and the
 * pads combined by maximum, and charges per result register before each operand along the
 * concatenated dimension on top of the transfers (bench/fidelity/probes/concat_shift.py). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util.h"
#include "unit/compile/backend_util.h"

static void concat_src(char *buf, size_t n, int a, int axis) {
  /* bf16 [16,a,256] and [16,384-a,256] joined along axis 1, or [16,384,a] and
   * [16,384,512-a] along the lanes (axis 2) */
  if (axis == 1)
    snprintf(buf, n,
             "HloModule c\nENTRY e {\n  x = bf16[16,%d,256] parameter(0)\n  y = bf16[16,%d,256] parameter(1)\n"
             "  ROOT r = bf16[16,384,256] concatenate(x, y), dimensions={1}\n}\n",
             a, 384 - a);
  else
    snprintf(buf, n,
             "HloModule c\nENTRY e {\n  x = bf16[16,384,%d] parameter(0)\n  y = bf16[16,384,%d] parameter(1)\n"
             "  ROOT r = bf16[16,384,512] concatenate(x, y), dimensions={2}\n}\n",
             a, 512 - a);
}

/* The compiler's own form of the same concatenate (a compiled program's pad_maximum_fusion). */
static void pad_max_src(char *buf, size_t n, int a) {
  snprintf(buf, n,
           "HloModule c\nf {\n  p0 = bf16[16,%d,256]{2,1,0} parameter(0)\n  p1 = bf16[16,%d,256]{2,1,0} parameter(1)\n"
           "  k = bf16[] constant(-inf)\n  a = bf16[16,384,256]{2,1,0} pad(p0, k), padding=0_0x0_%dx0_0\n"
           "  b = bf16[16,384,256]{2,1,0} pad(p1, k), padding=0_0x%d_0x0_0\n"
           "  ROOT m = bf16[16,384,256]{2,1,0} maximum(a, b)\n}\n"
           "ENTRY e {\n  x = bf16[16,%d,256]{2,1,0} parameter(0)\n  y = bf16[16,%d,256]{2,1,0} parameter(1)\n"
           "  ROOT r = bf16[16,384,256]{2,1,0} fusion(x, y), kind=kLoop, calls=f\n}\n",
           a, 384 - a, 384 - a, a, a, 384 - a);
}

/* bf16 [16,384,256] from a first part of 64 or 256 rows: the shift grows by (256 - 64) rows
 * of 16 x 256, 384 registers of 16 x 128, times concat_shift_cycles (v5e 10.7: 4,109 cycles;
 * the compiler's 31,852 and 35,146 differ by 3,294); without the field the two cost alike.
 * Along the lanes nothing is added; the compiler's fused pads pay what the concatenate does. */
static void concat_shift(void) {
  tpu_chip v5e;
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &v5e, &d) == TPU_OK);
  CHECK_NEAR(v5e.concat_shift_cycles, 10.7, 1e-9);
  char src[1024];
  for (int with = 1; with >= 0; with--) {
    tpu_chip c = v5e;
    if (!with) c.concat_shift_cycles = 0;
    int64_t cyc[2], lanes[2], fused[2];
    int parts[2] = {64, 256};
    for (int i = 0; i < 2; i++) {
      concat_src(src, sizeof src, parts[i], 1);
      cyc[i] = step_cycles_of(src, &c, 1);
      concat_src(src, sizeof src, parts[i] == 64 ? 128 : 256, 2);
      lanes[i] = step_cycles_of(src, &c, 1);
      pad_max_src(src, sizeof src, parts[i]);
      fused[i] = step_cycles_of(src, &c, 0);
    }
    double want = with ? 10.7 * 384 : 0;
    printf("v5e bf16 [16,384,256] concatenate%s: first part 64 rows %lld, 256 rows %lld (+%lld, want %.0f); "
           "pad-and-max fusion %lld, %lld; along the lanes %lld, %lld\n",
           with ? "" : " (no concat_shift_cycles)", (long long)cyc[0], (long long)cyc[1],
           (long long)(cyc[1] - cyc[0]), want, (long long)fused[0], (long long)fused[1], (long long)lanes[0],
           (long long)lanes[1]);
    CHECK(fabs((double)(cyc[1] - cyc[0]) - want) <= 0.05 * 4109 + 16);
    CHECK(fabs((double)(fused[1] - fused[0]) - want) <= 0.05 * 4109 + 16);
    CHECK(llabs(lanes[1] - lanes[0]) <= 16);
  }
}

int main(void) {
  concat_shift();
  CHECK_DONE();
}
