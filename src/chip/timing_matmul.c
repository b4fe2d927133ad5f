/* The cycles of one matmul instruction on the chip's MXUs (the systolic tile model, the
 * split of its products over the MXUs, 8-bit integer rates): tpu_timing_matmul_cycles and
 * the timing executor's per-instruction durations (timing.c) use it. Moved from timing.c. */
#include <math.h>
#include <stdlib.h>

#include "base/env.h"
#include "chip/mxu.h"
#include "chip/timing.h"
#include "chip/timing_int.h"

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* TPUSIM_NO_INT8_WLOAD=1: 8-bit integer weight loads overlap the rows as bf16 ones do (A/B of
 * int8_weight_load_cycles). */
int tpu__timing_no_int8_wload(void) {
  return tpu_env_flag("TPUSIM_NO_INT8_WLOAD");
}

/* Cycles of one matmul instruction on mx MXUs whose b products are dealt to `sb` groups of
 * MXUs as whole products (sb = 1: every MXU works on each product), the mx / sb MXUs of a
 * group splitting N's column tiles first and then M (docs/timing.md). */
static tpu_status matmul_split_cycles(const tpu_insn *in, const tpu_chip *chip, int64_t mx,
                                      int64_t sb, int hide_fill, int fold, int64_t *out, tpu_diag *d) {
  const int64_t R = chip->mxu_rows, C = chip->mxu_cols;
  int64_t nb = ceil_div(in->b, sb);
  mx /= sb;
  int64_t ntiles = ceil_div(in->n, C);
  int64_t sn = mx < ntiles ? mx : ntiles;
  int64_t sm = mx / sn;
  if (sm > in->m) sm = in->m;
  if (sm < 1) sm = 1;
  int64_t m1 = ceil_div(in->m, sm), n1 = ceil_div(in->n, sn);
  /* a group's nb products stream back to back through its MXUs with weights
   * double-buffered across them: nb * ceil(n1/C) column folds of one long product. */
  if ((double)nb * (double)ceil_div(n1, C) * (double)C > (double)((int64_t)1 << 40))
    return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(), "matmul too large to time (b=%lld n=%lld)",
                    (long long)in->b, (long long)in->n);
  int64_t ncols = nb * ceil_div(n1, C) * C;
  /* fold: the bf16 passes of an f32 product stream back to back as more column folds of one
   * product (one systolic fill and drain), not as separate products each filling and
   * draining the array (below: passes x the tile model) */
  const int64_t np = in->passes > 1 ? in->passes : 1;
  if (fold) ncols *= np;
  tpu_mxu_cycles mc;
  TPU_TRY(tpu_mxu_tile_cycles(R, C, m1, in->k, ncols, TPU_WLOAD_DOUBLE, &mc, d));
  /* A chip that loads a weight tile in W < R cycles exposes W - T per fold, not R - T
   * (the systolic model of tpu_mxu_tile_cycles shifts one row per cycle). */
  int64_t W = chip->mxu_weight_load_cycles;
  if (W > 0 && W < R) {
    int64_t T = m1, F = mc.folds;
    mc.weight_load = W + (F - 1) * (W > T ? W - T : 0);
  }
  /* the systolic fill and drain overlap the neighbouring instructions' work (matmul_cycles) */
  if (hide_fill) mc.stream -= R + C - 2;
  int64_t cyc = (mc.weight_load + mc.stream) * (fold ? 1 : np);
  /* 8-bit integers at the chip's int8 MXU rate (int8_mxu_rate where the compiler's cost
   * model runs them below the published int8_rate: v6e at 1.315, v4 at 0.919, slower
   * than its bf16) */
  const double i8 = chip->int8_mxu_rate > 0 ? chip->int8_mxu_rate : chip->int8_rate;
  const int is8 = in->dtype == TPU_S8 || in->dtype == TPU_U8;
  /* A chip with int8_weight_load_cycles W8 (v4) loads an 8-bit weight tiled in 32 rows
   * (in->i8_wide, tile.c) in W8 cycles a weight tile that its rows do not hide: the
   * instruction pays W8 for each of the weight tiles its MXUs load, spread evenly over the
   * sn MXUs that split N (never more than its folds), beside its rows at the int8 rate.
   * Derived from the XLA TPU compiler (bench/fidelity/probes/v4_gemm_sweep.py): on one v4
   * TensorCore its s8 [M,4096] x [4096,4096] costs 75-84 cycles a weight tile per MXU more
   * than the load overlapped as bf16's gave, at M = 8 to 512 alike (28,638 / 33,910 / 61,612 /
   * 172,214 cycles at M = 8 / 32 / 128 / 512; bf16 19,329 / 20,065 / 40,927 / 144,544);
   * [64,6144] x [6144,768] (6 column tiles on 4 MXUs) fits the even spread, not 2 tiles on
   * each MXU. Off with TPUSIM_NO_INT8_WLOAD=1. */
  if (is8 && in->i8_wide && chip->int8_weight_load_cycles > 0 && !tpu__timing_no_int8_wload()) {
    double rate = i8 > 0 ? i8 : 1;
    int64_t F = mc.folds, spread = ceil_div(nb * ntiles * ceil_div(in->k, R), sn);
    if (spread < F) F = spread;
    cyc = (int64_t)ceil((double)mc.stream / rate) + F * chip->int8_weight_load_cycles;
  } else if (is8 && i8 > 0 && i8 != 1)
    cyc = (int64_t)ceil((double)cyc / i8);
  *out = cyc;
  return TPU_OK;
}

/* Cycles of one matmul instruction; hide_fill: its systolic fill and drain (R + C - 2
 * cycles) are not exposed (durations: chip mxu_fill_hidden). */
tpu_status tpu__timing_matmul_cycles(const tpu_insn *in, const tpu_chip *chip, int hide_fill, int fold,
                                     int64_t *out, tpu_diag *d) {
  int64_t lanes = chip->mxus_per_core * chip->tensorcores;
  int64_t mx = in->mxus < lanes ? in->mxus : lanes;
  if (mx < 1) mx = 1;
  TPU_TRY(matmul_split_cycles(in, chip, mx, 1, hide_fill, fold, out, d));
  /* A chip with mxu_batch_spread gives each MXU whole products of a batched matmul when
   * that is faster: each streams all M rows of its products, where splitting M leaves
   * short folds that expose their weight loads (v6e: 128 products of 64 x 64 x 64 in VMEM
   * take the compiler 3,072 cycles at M = 16, 32 and 64 alike; docs/timing.md). */
  if (chip->mxu_batch_spread && in->b > 1 && mx > 1) {
    int64_t alt = 0;
    TPU_TRY(matmul_split_cycles(in, chip, mx, mx < in->b ? mx : in->b, hide_fill, fold, &alt, d));
    if (alt < *out) *out = alt;
  }
  return TPU_OK;
}

tpu_status tpu_timing_matmul_cycles(const tpu_insn *in, const tpu_chip *chip, int64_t *out,
                                    tpu_diag *d) {
  return tpu__timing_matmul_cycles(in, chip, 0, 0, out, d);
}

tpu_status tpu_timing_pallas_matmul_cycles(const tpu_insn *in, const tpu_chip *chip, int64_t *out,
                                           tpu_diag *d) {
  return tpu__timing_matmul_cycles(in, chip, 0, 1, out, d);
}
