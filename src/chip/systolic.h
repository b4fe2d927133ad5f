/* PE-level systolic array: the per-cycle grid state, the probe, and the dataflow animation. */
#ifndef TPU_CHIP_SYSTOLIC_H
#define TPU_CHIP_SYSTOLIC_H

#include <stdint.h>
#include <stdio.h>

#include "chip/mxu.h"

/* One processing element's registers at the end of a cycle. Indices are into the operands
 * of tpu_systolic_run (A is M x K, W is K x N); -1 marks "nothing here" (a bubble, or a
 * padding PE outside K or N). Fold tags (-1: none) say which fold a value belongs to. */
typedef struct tpu_systolic_pe {
  /* What every cycle touches first (kept together for speed). */
  float w;            /* weight in use */
  float a;            /* activation this PE used this cycle; moves right next cycle */
  float psum;         /* partial sum this PE produced this cycle; moves down next cycle */
  int32_t wk, wf;     /* w = W[wk][wn] of fold wf; wk = -1: no weight (passes psum on) */
  int32_t am, af;     /* a = A[am][k of this row] of fold af; am = -1: bubble/padding row */
  int32_t pm, pf;     /* psum belongs to output row pm of fold pf; pm = -1: bubble */
  int32_t wn;
  /* Double-buffered loading. */
  float w_shadow;     /* the next fold's weight, latched when its first activation arrives */
  float wb;           /* weight passing down the column's load bus */
  int32_t sk, sn, sf; /* w_shadow = W[sk][sn] of fold sf; sf = -1: empty */
  int32_t bk, bn, bf, bd; /* wb = W[bk][bn] of fold bf, bound for row bd; bf = -1: empty */
} tpu_systolic_pe;

/* What the array did in one cycle, handed to the probe after the cycle's update. */
typedef struct tpu_systolic_state {
  int64_t cycle;             /* 0-based; cycle 0 shifts in the first weight row */
  int64_t R, C, M, K, N;
  tpu_wload mode;
  int64_t folds;             /* ceil(K/R) * ceil(N/C); fold f = n_tile * ceil(K/R) + k_tile */
  const tpu_systolic_pe *pe; /* R*C PEs, row-major (pe[r*C + c]) */
  int64_t stream_fold;       /* latest fold to start streaming (-1: none yet); earlier folds
                                may still be draining (see the PEs' fold tags) */
  int64_t stream_k0, stream_n0; /* its first row of W / first column of W */
  int64_t load_fold;         /* fold shifting weights into column 0 this cycle (-1: none) */
  int64_t load_k0, load_n0;
  int64_t load_rows;         /* rows of that fold shifted into column 0, this cycle included */
  int latched;               /* double-buffered: PEs that latched a shadow weight this cycle */
  int64_t outputs_done;      /* (m, n, K-tile) partial sums that have left the bottom */
  const float *out;          /* M x N accumulator so far (row-major; untouched cells 0) */
  const uint8_t *out_seen;   /* M x N: 1 once a first K-tile psum has been stored there */
} tpu_systolic_state;

/* Per-cycle observer. on_cycle returning anything but TPU_OK stops the run, which then
 * returns that status (the probe fills `d` itself). `user` is the probe owner's. */
struct tpu_systolic_probe {
  tpu_status (*on_cycle)(tpu_systolic_probe *self, const tpu_systolic_state *s, tpu_diag *d);
  void *user;
};

/* Largest array and cycle count the animations accept (they keep every cycle's grid). */
#define TPU_SYSTOLIC_ANIM_MAX_DIM 32
#define TPU_SYSTOLIC_ANIM_MAX_CYCLES 4096

/* Prints every cycle of tpu_systolic_run on A (M x K) x W (K x N) as a text grid: the weight
 * in each PE, the activation moving right, the partial sum moving down, and the outputs
 * leaving the bottom. Fails with TPU_ERR_LIMIT beyond the limits above. */
tpu_status tpu_systolic_animate_text(FILE *f, int64_t R, int64_t C, int64_t M, int64_t K,
                                     int64_t N, const float *A, const float *W, tpu_wload mode,
                                     tpu_diag *d);

/* Writes a self-contained HTML page (inline SVG and script, no network) stepping through the
 * same cycles with next/prev/play buttons and a slider. Written to a temporary file and
 * renamed, so a failure leaves no partial `path`. */
tpu_status tpu_systolic_animate_html(const char *path, int64_t R, int64_t C, int64_t M,
                                     int64_t K, int64_t N, const float *A, const float *W,
                                     tpu_wload mode, tpu_diag *d);

#endif
