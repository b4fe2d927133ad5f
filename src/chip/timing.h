/* The unit-level timing executor: cycles of a TPU program on one chip (docs/timing.md). */
#ifndef TPU_CHIP_TIMING_H
#define TPU_CHIP_TIMING_H

#include "chip/chip.h"
#include "chip/program.h"
#include "chip/timeline.h"

/* HBM latency used when the chip file gives none (an assumption; docs/timing.md). */
#define TPU_TIMING_DEFAULT_HBM_LATENCY_S 500e-9

/* The chip's HBM latency in seconds, the default where its file gives none. */
static inline double tpu_timing_hbm_latency_s(const tpu_chip *c) {
  return c->hbm_latency_s > 0 ? c->hbm_latency_s : TPU_TIMING_DEFAULT_HBM_LATENCY_S;
}
/* At most this many events are recorded; later ones are dropped (tpu_timeline.nevents
 * then equals the cap while the busy totals still count everything). */
#define TPU_TIMING_MAX_EVENTS 1000000

/* Whether a timeline's events stopped at TPU_TIMING_MAX_EVENTS (reports should say so). */
static inline int tpu_timing_events_truncated(const tpu_timeline *t) {
  return t->nevents >= TPU_TIMING_MAX_EVENTS;
}

/* Runs `p` on `chip` and fills *out (tpu_timeline_free). Timing never looks at values:
 * the same program always gives the same cycles. Fails with TPU_ERR_UNSUPPORTED naming
 * the loop when a loop's trip count is unknown (see tpu_program_set_loop_trips). */
tpu_status tpu_timing_run(const tpu_program *p, const tpu_chip *chip, int record_events,
                          tpu_timeline *out, tpu_diag *d);

/* 1: time every loop iteration by iteration; 0 (the default): in closed form once an
 * iteration's timing repeats (src/chip/timing.c, docs/timing.md). The same cycles either
 * way; the switch is for tests and measurements. Process-wide. */
void tpu_timing_set_loops_stepwise(int on);

/* Cycles one matmul instruction keeps the MXUs busy on `chip` (0 with a diagnostic on
 * bad sizes): the tile model tpu_mxu_tile_cycles with double-buffered weights, the
 * product split across in->mxus MXUs, times the bf16 passes, divided by the chip's int8
 * rate for 8-bit operands. */
tpu_status tpu_timing_matmul_cycles(const tpu_insn *in, const tpu_chip *chip, int64_t *out,
                                    tpu_diag *d);
/* The same for a Pallas kernel's matmul: an f32 product's bf16 passes stream as column folds
 * of one product (one systolic fill and drain), not passes x the tile model. */
tpu_status tpu_timing_pallas_matmul_cycles(const tpu_insn *in, const tpu_chip *chip, int64_t *out,
                                           tpu_diag *d);

#endif
