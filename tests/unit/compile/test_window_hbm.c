/* A pooling window kernel that reads its input from HBM (chip/timing.c, chip
 * window_hbm_factor): the XLA TPU compiler costs its transfers more than their stream time.
 * libtpu max and sum pools of f32 read from HBM (bench/fidelity/probes/pool_relayout.py, data
 * pool_relayout.jsonl): beyond tpusim's other costs, 1.10-1.37 times their transfers on v5p once
 * the compiler's halo re-reads are taken out, median 1.247; f32[8,93,93,384]{3,0,2,1} max-pooled
 * 3x3 at stride 3 (no halo) costs the compiler 143,608 cycles on v5p, where tpusim charged
 * 110,285 (-23 %) with its transfers at the stream rate. A window reading its input in place in
 * VMEM is unchanged (test_vmem pool_window_in_place). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util.h"
#include "unit/compile/backend_util.h"

/* The compiler's own form of the pool: one kOutput window fusion, its input in HBM. */
static const char *pool_hbm =
    "HloModule m\nr {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT c = f32[] maximum(a, b)\n}\n"
    "f {\n  p = f32[8,93,93,384]{3,0,2,1} parameter(0)\n  i = f32[] constant(-inf)\n"
    "  ROOT y = f32[8,31,31,384]{3,0,2,1} reduce-window(p, i), window={size=1x3x3x1 stride=1x3x3x1}, to_apply=r\n}\n"
    "ENTRY e {\n  x = f32[8,93,93,384]{3,0,2,1} parameter(0)\n"
    "  ROOT o = f32[8,31,31,384]{3,0,2,1} fusion(x), kind=kOutput, calls=f\n}\n";

static void window_hbm_factor(void) {
  tpu_chip v5p;
  tpu_diag d;
  CHECK(tpu_chip_load("v5p", &v5p, &d) == TPU_OK);
  CHECK_NEAR(v5p.window_hbm_factor, 1.247, 1e-9);
  tpu_chip none = v5p;
  none.window_hbm_factor = 0;
  const int64_t with = step_cycles_of(pool_hbm, &v5p, 0), without = step_cycles_of(pool_hbm, &none, 0);
  /* the input and the result at the stream rate, times the factor less one */
  const double bytes = 8.0 * 93 * 93 * 384 * 4 + 8.0 * 31 * 31 * 384 * 4;
  const double want = (1.247 - 1) * bytes / (tpu_chip_hbm_stream_bw(&v5p) / v5p.clock_hz);
  printf("v5p f32[8,93,93,384] 3x3/3 max pool from HBM: %lld cycles, %lld without window_hbm_factor "
         "(+%lld, want +%.0f); compiler 143,608\n",
         (long long)with, (long long)without, (long long)(with - without), want);
  CHECK(fabs((double)(with - without) / want - 1) < 0.03);
  CHECK(fabs((double)with / 143608 - 1) < 0.08);
  CHECK((double)without / 143608 < 0.8); /* the gap the factor closes */
}

int main(void) {
  window_hbm_factor();
  CHECK_DONE();
}
