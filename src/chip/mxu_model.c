/* Closed-form cycle model of a weight-stationary R x C array (the oracle for the PE level). */
#include "chip/mxu.h"

/* Timeline of one product (all in clock cycles, 0-based cycle indices; derivation and the
 * PE-level check in docs/systolic.md):
 *
 *   folds F = ceil(K/R) * ceil(N/C): one fold is one R x C tile of W held in the array.
 *   Loading a fold shifts its weights down the columns, one row per cycle: R cycles.
 *   Streaming a fold: row m of A enters array row r at stream cycle m + r (the skew), meets
 *   PE (r, c) at m + r + c, and the finished partial sum leaves the bottom of column c at
 *   m + (R-1) + c. The last one (m = T-1, c = C-1) leaves at stream cycle T+R+C-3, so a
 *   fold streams for s = R + C + T - 2 cycles, fill and drain included (T = M).
 *
 *   Serial (SCALE-Sim ws): load, then stream, fold after fold: F * (R + s) cycles clocked.
 *
 *   Double-buffered (TPU-like): fold j+1's weights shift down a load bus into shadow
 *   registers while fold j streams, and each PE latches its shadow weight when the first
 *   activation of fold j+1 reaches it, so the weight switch travels with the data and the
 *   folds' activations enter back to back. Fold j+1 can start streaming once its R shift
 *   cycles are done (they start when fold j starts streaming) and fold j has fed its T
 *   rows: fold starts are max(R, T) apart. The R shift cycles hide behind the T streaming
 *   cycles when T >= R; otherwise R - T of them show per fold. Only the first fold's R
 *   load cycles are never hidden, and fill and drain are paid once, not per fold:
 *   R + (F-1)*max(R, T) + s cycles clocked, of which
 *     weight_load        = R + (F-1)*max(0, R-T)  (cycles the array's input waits)
 *     weight_load_hidden = (F-1)*min(R, T)        (shift cycles under streaming)
 *     stream             = F*T + R + C - 2        (every other cycle)
 *   In serial mode weight_load = F*R, weight_load_hidden = 0, stream = F*s.
 *
 *   total: cycles from the first weight load to the last output, as a difference of cycle
 *   indices, i.e. cycles clocked - 1. This is where SCALE-Sim's "- 1" lives: its Total
 *   Cycles is the index of the cycle in which the last output is written (the last line of
 *   its output demand matrix, counting from 0), folds * (2R + C + T - 2) - 1. So in both
 *   modes weight_load + stream == total + 1.
 *
 * Utilisations follow SCALE-Sim's definitions exactly (scalesim/compute/
 * systolic_compute_ws.py and single_layer_sim.py), in both modes:
 *   overall_util       = M*K*N / (R*C*total)             (its Overall Util, as a fraction)
 *   mapping_efficiency = mean over folds of used PEs / (R*C)  = K*N / (F*R*C)
 *   compute_util       = mean over folds of used PEs * T / (R*C*(2R + 2C + T - 3))
 *                      = M*K*N / (F*R*C*(2R + 2C + T - 3))
 * (SCALE-Sim's per-fold compute window 2R+2C+T-3 is its filter demand matrix's R load rows
 * plus R+C+T-2 stream rows, plus C-1 for the skew; we keep its number for comparability.) */
tpu_status tpu_mxu_tile_cycles(int64_t R, int64_t C, int64_t M, int64_t K, int64_t N,
                               tpu_wload mode, tpu_mxu_cycles *out, tpu_diag *d) {
  if (R <= 0 || C <= 0 || M <= 0 || K <= 0 || N <= 0)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(),
                    "systolic sizes must be positive (R=%lld C=%lld M=%lld K=%lld N=%lld)",
                    (long long)R, (long long)C, (long long)M, (long long)K, (long long)N);
  if (mode != TPU_WLOAD_SERIAL && mode != TPU_WLOAD_DOUBLE)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "unknown weight-loading mode %d", (int)mode);
  /* Keep every product below 2^62: each size below 2^20 covers any real array and GEMM
   * dimension we model; larger inputs are a limit, not a crash or an overflow. */
  const int64_t lim = (int64_t)1 << 20;
  const int64_t glim = (int64_t)1 << 40;
  if (R > lim || C > lim || M > glim || K > glim || N > glim ||
      (double)M * (double)K * (double)N > 4e18)
    return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(),
                    "systolic sizes too large (R=%lld C=%lld M=%lld K=%lld N=%lld)",
                    (long long)R, (long long)C, (long long)M, (long long)K, (long long)N);

  const int64_t T = M;
  const int64_t kt = (K + R - 1) / R, nt = (N + C - 1) / C;
  const int64_t F = kt * nt;
  const int64_t s = R + C + T - 2;
  tpu_mxu_cycles r = {0};
  r.folds = F;
  r.mac_ops = M * K * N;
  if (mode == TPU_WLOAD_SERIAL) {
    r.weight_load = F * R;
    r.weight_load_hidden = 0;
    r.stream = F * s;
  } else {
    r.weight_load = R + (F - 1) * (R > T ? R - T : 0);
    r.weight_load_hidden = (F - 1) * (R < T ? R : T);
    r.stream = F * T + R + C - 2;
  }
  r.total = r.weight_load + r.stream - 1;
  const double pes = (double)R * (double)C;
  /* total is 0 only for R = C = M = K = N = 1 (one clocked cycle); SCALE-Sim would divide
   * by zero there, we report the utilisation of that one cycle instead. */
  r.overall_util = (double)r.mac_ops / (pes * (double)(r.total > 0 ? r.total : 1));
  r.mapping_efficiency = ((double)K * (double)N) / ((double)F * pes);
  r.compute_util =
      (double)r.mac_ops / ((double)F * pes * (double)(2 * R + 2 * C + T - 3));
  *out = r;
  return TPU_OK;
}
