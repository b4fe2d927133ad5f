/* PE-level, cycle-by-cycle simulation of a weight-stationary systolic array (real values). */
#include "chip/systolic.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"

/* How the array runs (docs/systolic.md has the timing diagrams):
 *
 * A fold is one R x C tile of W: fold f covers K-tile f % kt and N-tile f / kt (N outer, K
 * inner: SCALE-Sim's order, and it hands each output its K-tiles in ascending order).
 * Row m of A enters array row r at cycle S + m + r (S: the fold's stream start), carrying
 * its fold's tag; each PE takes the activation from its left neighbour and the partial sum
 * from the one above, as they stood at the end of the previous cycle.
 *
 * Serial (SCALE-Sim ws): into an idle array, every column shifts its R weights down the
 * weight registers themselves, one row per cycle, bottom row's weight first; then the fold
 * streams; the next load waits until the last output has left the bottom.
 *
 * Double-buffered: each column has a load bus; fold j's weights enter column c's bus from
 * cycle L_j + c (columns skewed like the activations), travel down one row per cycle and
 * are written into the shadow register of the row they are bound for; all R arrive in
 * cycle L_j + c + R - 1. A PE latches shadow -> weight when the first activation of a new
 * fold reaches it, so the switch travels with the data and folds stream back to back. The
 * sequencer starts fold j's load in the cycle fold j-1 starts streaming (its old shadow
 * contents are then latched row by row before the new ones land), and starts fold j's
 * stream once column 0 has had R load cycles and fold j-1 has fed its last row.
 *
 * Every PE checks that the weight it multiplies by belongs to the fold of the activation
 * it receives, and every shadow write checks it does not overwrite an unlatched weight;
 * a violation means the sequencer's timing is wrong and fails the run. */
typedef struct sim {
  int64_t R, C, M, K, N, kt, F;
  tpu_wload mode;
  const float *A, *W;
  float *out;
  uint8_t *seen;
  tpu_systolic_pe *pe;
  int64_t *L, *S;  /* F: each fold's load start and stream start cycle, -1 until known */
  float *feed_a;   /* R: activation entering each row's left edge this cycle */
  int32_t *feed_m; /* R: its row of A (-1: none or a padding row) */
  int32_t *feed_f; /* R: its fold (-1: nothing enters) */
  int64_t *rowf;   /* R: the latest fold that has started entering each row */
  int64_t *colf;   /* C: the oldest fold that may still be loading each column */

  int64_t next_load, next_stream; /* next fold to start loading / streaming */
  int64_t oldest;                 /* oldest fold that may still have data in the array */
  int live;                       /* work still in flight after the last cycle */
  int hazard;                     /* a PE met a weight of the wrong fold */
  int latched;                    /* PEs that latched this cycle */

  /* Measurements. */
  int64_t load_exposed, load_hidden, stream_cycles, macs, outputs_done;
  double mapping_sum, compute_sum;
} sim;

static int64_t fold_k0(const sim *s, int64_t f) { return (f % s->kt) * s->R; }
static int64_t fold_n0(const sim *s, int64_t f) { return (f / s->kt) * s->C; }

/* Serial load, one cycle: every column moves its weight registers down one row and takes
 * the next weight at the top (bottom row's first), so after R cycles PE (r, c) holds
 * W[k0 + r][n0 + c]. Weights outside K or N are padding (index -1, value 0). */
static void serial_shift(sim *s, int64_t f, int64_t q) {
  const int64_t R = s->R, C = s->C, k = fold_k0(s, f) + (R - 1 - q), n0 = fold_n0(s, f);
  for (int64_t c = 0; c < C; c++) {
    for (int64_t r = R - 1; r > 0; r--) {
      tpu_systolic_pe *dst = &s->pe[r * C + c];
      const tpu_systolic_pe *src = &s->pe[(r - 1) * C + c];
      dst->w = src->w;
      dst->wk = src->wk;
      dst->wn = src->wn;
      dst->wf = src->wf;
    }
    const int64_t n = n0 + c;
    const int valid = k < s->K && n < s->N;
    tpu_systolic_pe *top = &s->pe[c];
    top->w = valid ? s->W[k * s->N + n] : 0.0f;
    top->wk = valid ? (int32_t)k : -1;
    top->wn = valid ? (int32_t)n : -1;
    top->wf = (int32_t)f;
  }
}

/* Double-buffered load bus, one cycle: every column's bus moves down one row, column c
 * takes the next weight of the fold whose window [L + c, L + c + R) holds cycle t, and a
 * weight that reached its row is written into that PE's shadow register. Runs after the
 * array step, so a PE latching this cycle saw the shadow as it was at the cycle's start. */
static void bus_step(sim *s, int64_t t) {
  const int64_t R = s->R, C = s->C;
  for (int64_t c = 0; c < C; c++) {
    for (int64_t r = R - 1; r > 0; r--) {
      tpu_systolic_pe *dst = &s->pe[r * C + c];
      const tpu_systolic_pe *src = &s->pe[(r - 1) * C + c];
      dst->wb = src->wb;
      dst->bk = src->bk;
      dst->bn = src->bn;
      dst->bf = src->bf;
      dst->bd = src->bd;
    }
    tpu_systolic_pe *top = &s->pe[c];
    top->bf = -1;
    top->bk = top->bn = top->bd = -1;
    top->wb = 0.0f;
    while (s->colf[c] < s->next_load && t >= s->L[s->colf[c]] + c + R) s->colf[c]++;
    const int64_t f = s->colf[c];
    if (f < s->next_load && t >= s->L[f] + c) {
      const int64_t q = t - s->L[f] - c, row = R - 1 - q;
      const int64_t k = fold_k0(s, f) + row, n = fold_n0(s, f) + c;
      const int valid = k < s->K && n < s->N;
      top->wb = valid ? s->W[k * s->N + n] : 0.0f;
      top->bk = valid ? (int32_t)k : -1;
      top->bn = valid ? (int32_t)n : -1;
      top->bf = (int32_t)f;
      top->bd = (int32_t)row;
    }
    for (int64_t r = 0; r < R; r++) {
      tpu_systolic_pe *e = &s->pe[r * C + c];
      if (e->bf < 0 || e->bd != r) continue;
      if (e->sf >= 0 && e->sf != e->wf) s->hazard = 1; /* unlatched weight overwritten */
      e->w_shadow = e->wb;
      e->sk = e->bk;
      e->sn = e->bn;
      e->sf = e->bf;
      e->bf = -1;
    }
  }
}

/* Per-fold utilisation terms as SCALE-Sim defines them (see mxu_model.c), counted from the
 * weights of the fold as the loads deliver them. */
static void account_fold(sim *s, int64_t f) {
  const int64_t rows = s->K - fold_k0(s, f) < s->R ? s->K - fold_k0(s, f) : s->R;
  const int64_t cols = s->N - fold_n0(s, f) < s->C ? s->N - fold_n0(s, f) : s->C;
  const double pes = (double)s->R * (double)s->C, used = (double)(rows * cols);
  s->mapping_sum += used / pes;
  s->compute_sum += used * (double)s->M / (pes * (double)(2 * s->R + 2 * s->C + s->M - 3));
}

/* What enters each row's left edge at cycle t: row r carries row m = t - S_f - r of A for
 * the latest fold f that has started, while 0 <= m < M. Returns whether row 0 takes one. */
static int fill_feed(sim *s, int64_t t) {
  for (int64_t r = 0; r < s->R; r++) {
    while (s->rowf[r] + 1 < s->next_stream && t - r >= s->S[s->rowf[r] + 1]) s->rowf[r]++;
    const int64_t f = s->rowf[r];
    const int64_t m = f >= 0 ? t - s->S[f] - r : -1;
    s->feed_a[r] = 0.0f;
    s->feed_m[r] = -1;
    s->feed_f[r] = -1;
    if (f < 0 || m < 0 || m >= s->M) continue;
    const int64_t k = fold_k0(s, f) + r;
    s->feed_f[r] = (int32_t)f; /* padding rows still carry the fold's switch */
    if (k < s->K) {
      s->feed_a[r] = s->A[m * s->K + k];
      s->feed_m[r] = (int32_t)m;
    }
  }
  return s->feed_f[0] >= 0;
}

/* Every PE takes its left neighbour's activation and its upper neighbour's partial sum
 * from the previous cycle. Visiting rows bottom-up and columns right-to-left lets each PE
 * read neighbours that have not been updated yet this cycle, so one grid suffices. Sets
 * s->live: whether any work is still in flight (an activation that will reach another PE,
 * or a partial sum that will move down). */
static void step_array(sim *s, int64_t t) {
  const int64_t R = s->R, C = s->C, M = s->M;
  const int dbl = s->mode == TPU_WLOAD_DOUBLE;
  tpu_systolic_pe *P = s->pe;
  int64_t macs = 0;
  int live = 0, hazard = 0, latched = 0;
  const int64_t newest = s->next_stream - 1;
  s->latched = 0;
  if (newest < 0) { /* nothing has entered the array yet: every PE holds a bubble */
    s->live = 0;
    return;
  }
  /* Only a band of each row can hold data: fold f's row m meets PE (r, c) at cycle
   * S_f + m + r + c, so row r holds data in columns t - r - S_f - (M-1) .. t - r - S_f for
   * the folds in flight. PEs outside the band hold bubbles and receive bubbles, so
   * updating them changes nothing; the band is widened by one column at its trailing edge
   * so the PE the data just left becomes a bubble. */
  while (s->oldest < newest && t - (R - 1) - s->S[s->oldest] - M > C - 1) s->oldest++;
  for (int64_t r = R - 1; r >= 0; r--) {
    tpu_systolic_pe *row = &P[r * C];
    const tpu_systolic_pe *up = r > 0 ? &P[(r - 1) * C] : NULL;
    int64_t lo = t - r - s->S[newest] - M, hi = t - r - s->S[s->oldest];
    if (lo < 0) lo = 0;
    if (hi > C - 1) hi = C - 1;
    for (int64_t c = hi; c >= lo; c--) {
      tpu_systolic_pe *pe = &row[c];
      float ain;
      int32_t amin, afin;
      if (c > 0) {
        ain = row[c - 1].a;
        amin = row[c - 1].am;
        afin = row[c - 1].af;
      } else {
        ain = s->feed_a[r];
        amin = s->feed_m[r];
        afin = s->feed_f[r];
      }
      if (afin >= 0 && afin != pe->wf) {
        if (dbl && pe->sf == afin) { /* the new fold's first activation: switch weights */
          pe->w = pe->w_shadow;
          pe->wk = pe->sk;
          pe->wn = pe->sn;
          pe->wf = pe->sf;
          latched++;
        } else {
          hazard = 1;
        }
      }
      float pin = 0.0f; /* the partial sum enters the top PE as +0.0f */
      int32_t pmin = amin, pfin = afin;
      if (up) {
        pin = up[c].psum;
        pmin = up[c].pm;
        pfin = up[c].pf;
      }
      pe->a = ain;
      pe->am = amin;
      pe->af = afin;
      if (pe->wk >= 0) {
        /* Two roundings, as the contract writes it: the product to f32, then the sum. */
        float prod = ain * pe->w;
        pe->psum = pin + prod;
        macs += amin >= 0;
      } else {
        pe->psum = pin; /* no weight: padding passes the partial sum through */
      }
      pe->pm = pmin;
      pe->pf = pfin;
      live |= (pmin >= 0 && r < R - 1) | (afin >= 0 && c < C - 1);
    }
  }
  s->macs += macs;
  s->live = live;
  s->hazard |= hazard;
  s->latched = latched;
}

/* Outputs leaving the bottom row this cycle go to the accumulator: the first K-tile's
 * partial sum is stored, later ones are added in tile order; a NaN final value is written
 * as the canonical quiet NaN. */
static void collect_outputs(sim *s) {
  const int64_t C = s->C, N = s->N;
  const tpu_systolic_pe *bottom = &s->pe[(s->R - 1) * C];
  for (int64_t c = 0; c < C; c++) {
    const int32_t m = bottom[c].pm;
    if (m < 0) continue;
    const int64_t f = bottom[c].pf, n = fold_n0(s, f) + c, ktile = f % s->kt;
    if (n >= N) continue;
    float *o = &s->out[(int64_t)m * N + n];
    float v = ktile == 0 ? bottom[c].psum : *o + bottom[c].psum;
    if (ktile == s->kt - 1 && isnan(v)) v = tpu_f32_from_bits(0x7fc00000u);
    *o = v;
    s->seen[(int64_t)m * N + n] = 1;
    s->outputs_done++;
  }
}

static tpu_status check_args(int64_t R, int64_t C, int64_t M, int64_t K, int64_t N,
                             tpu_wload mode, const float *A, const float *W, const float *out,
                             tpu_diag *d) {
  if (R <= 0 || C <= 0 || M <= 0 || K <= 0 || N <= 0)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(),
                    "systolic sizes must be positive (R=%lld C=%lld M=%lld K=%lld N=%lld)",
                    (long long)R, (long long)C, (long long)M, (long long)K, (long long)N);
  if (mode != TPU_WLOAD_SERIAL && mode != TPU_WLOAD_DOUBLE)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "unknown weight-loading mode %d", (int)mode);
  if (!A || !W || !out)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "systolic run needs A, W and out");
  /* Tags are int32 (fold count included); the grid is R*C PE structs. */
  const int64_t dim_lim = 4096, idx_lim = INT32_MAX;
  const double folds = ((double)K / (double)R + 1.0) * ((double)N / (double)C + 1.0);
  if (R > dim_lim || C > dim_lim || M > idx_lim || K > idx_lim || N > idx_lim ||
      (double)M * (double)N > 1e12 || folds > 1e8)
    return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(),
                    "systolic simulation too large (R=%lld C=%lld M=%lld K=%lld N=%lld)",
                    (long long)R, (long long)C, (long long)M, (long long)K, (long long)N);
  return TPU_OK;
}

static tpu_status notify(sim *s, tpu_systolic_probe *probe, int64_t t, int64_t load_fold,
                         tpu_diag *d) {
  tpu_systolic_state st;
  memset(&st, 0, sizeof st);
  st.cycle = t;
  st.R = s->R;
  st.C = s->C;
  st.M = s->M;
  st.K = s->K;
  st.N = s->N;
  st.mode = s->mode;
  st.folds = s->F;
  st.pe = s->pe;
  st.stream_fold = s->next_stream - 1;
  if (st.stream_fold >= 0) {
    st.stream_k0 = fold_k0(s, st.stream_fold);
    st.stream_n0 = fold_n0(s, st.stream_fold);
  }
  st.load_fold = load_fold;
  if (load_fold >= 0) {
    st.load_k0 = fold_k0(s, load_fold);
    st.load_n0 = fold_n0(s, load_fold);
    st.load_rows = t - s->L[load_fold] + 1;
  }
  st.latched = s->latched;
  st.outputs_done = s->outputs_done;
  st.out = s->out;
  st.out_seen = s->seen;
  return probe->on_cycle(probe, &st, d);
}

static void sim_free(sim *s) {
  tpu_free(s->pe);
  tpu_free(s->L);
  tpu_free(s->S);
  tpu_free(s->feed_a);
  tpu_free(s->feed_m);
  tpu_free(s->feed_f);
  tpu_free(s->rowf);
  tpu_free(s->colf);
  tpu_free(s->seen);
}

tpu_status tpu_systolic_run(int64_t R, int64_t C, int64_t M, int64_t K, int64_t N,
                            tpu_wload mode, const float *A, const float *W, float *out,
                            tpu_mxu_cycles *cycles, tpu_systolic_probe *probe, tpu_diag *d) {
  TPU_TRY(check_args(R, C, M, K, N, mode, A, W, out, d));
  sim s;
  memset(&s, 0, sizeof s);
  s.R = R;
  s.C = C;
  s.M = M;
  s.K = K;
  s.N = N;
  s.mode = mode;
  s.A = A;
  s.W = W;
  s.out = out;
  s.kt = (K + R - 1) / R;
  s.F = s.kt * ((N + C - 1) / C);
  s.pe = tpu_calloc((size_t)(R * C), sizeof *s.pe);
  s.L = tpu_calloc((size_t)s.F, sizeof *s.L);
  s.S = tpu_calloc((size_t)s.F, sizeof *s.S);
  s.feed_a = tpu_calloc((size_t)R, sizeof *s.feed_a);
  s.feed_m = tpu_calloc((size_t)R, sizeof *s.feed_m);
  s.feed_f = tpu_calloc((size_t)R, sizeof *s.feed_f);
  s.rowf = tpu_calloc((size_t)R, sizeof *s.rowf);
  s.colf = tpu_calloc((size_t)C, sizeof *s.colf);
  s.seen = tpu_calloc((size_t)(M * N), 1);
  if (!s.pe || !s.L || !s.S || !s.feed_a || !s.feed_m || !s.feed_f || !s.rowf || !s.colf ||
      !s.seen) {
    sim_free(&s);
    return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory for a %lldx%lld array",
                    (long long)R, (long long)C);
  }
  for (int64_t i = 0; i < R * C; i++) {
    tpu_systolic_pe *e = &s.pe[i];
    e->wk = e->wn = e->wf = e->sk = e->sn = e->sf = -1;
    e->am = e->af = e->pm = e->pf = -1;
    e->bk = e->bn = e->bf = e->bd = -1;
  }
  for (int64_t r = 0; r < R; r++) s.rowf[r] = -1;
  memset(out, 0, (size_t)(M * N) * sizeof *out);

  tpu_status st = TPU_OK;
  const int64_t watchdog = s.F * (2 * R + C + M) + 2 * R + C + 16;
  int64_t t = 0;
  for (;; t++) {
    /* The sequencer decides from the state at the end of the last cycle. */
    const int64_t j = s.next_stream;
    const int prev_fed = j == 0 || t >= s.S[j - 1] + M; /* fold j-1 fed its last row 0 */
    if (j < s.F && j < s.next_load && t >= s.L[j] + R && prev_fed &&
        (mode == TPU_WLOAD_DOUBLE || !s.live)) {
      s.S[j] = t;
      s.next_stream++;
      account_fold(&s, j);
    }
    const int64_t l = s.next_load;
    if (l < s.F) {
      /* double: once fold l-1 starts streaming; serial: into a drained, idle array */
      int go = mode == TPU_WLOAD_DOUBLE ? (l <= s.next_stream)
                                        : (l == s.next_stream && !s.live &&
                                           (l == 0 || t >= s.S[l - 1] + M + R - 1));
      if (go) {
        s.L[l] = t;
        s.next_load++;
      }
    }
    /* The fold shifting into column 0 this cycle, if any (loads are R cycles per column). */
    int64_t load_fold = -1;
    if (s.next_load > 0 && t < s.L[s.next_load - 1] + R) load_fold = s.next_load - 1;
    if (mode == TPU_WLOAD_SERIAL && load_fold >= 0)
      serial_shift(&s, load_fold, t - s.L[load_fold]);

    const int feeding = fill_feed(&s, t);
    step_array(&s, t);
    if (mode == TPU_WLOAD_DOUBLE) bus_step(&s, t);
    collect_outputs(&s);
    /* A cycle counts as an exposed weight load when weights shift into column 0 and no
     * activation enters: the array's input waits for weights. Every other cycle streams. */
    if (load_fold >= 0 && !feeding)
      s.load_exposed++;
    else
      s.stream_cycles++;
    if (load_fold >= 0 && feeding) s.load_hidden++;
    if (s.hazard) {
      st = TPU_FAIL(d, TPU_ERR_RUNTIME, tpu_noloc(),
                    "systolic sequencer hazard at cycle %lld: a weight of the wrong fold",
                    (long long)t);
      break;
    }
    if (t > watchdog) { /* a bug guard, far beyond any schedule the sequencer makes */
      st = TPU_FAIL(d, TPU_ERR_RUNTIME, tpu_noloc(), "systolic sequencer stalled at cycle %lld",
                    (long long)t);
      break;
    }
    if (probe && probe->on_cycle) {
      st = notify(&s, probe, t, load_fold, d);
      if (st != TPU_OK) break;
    }
    /* Done once every fold has fed its last row and nothing is in flight: the last output
     * left the bottom in this cycle. */
    if (s.next_stream == s.F && t >= s.S[s.F - 1] + M + R - 2 && !s.live) break;
  }
  if (st == TPU_OK && cycles) {
    tpu_mxu_cycles c = {0};
    c.folds = s.F;
    c.total = t; /* index of the cycle the last output left in; cycle 0 loaded weights */
    c.weight_load = s.load_exposed;
    c.weight_load_hidden = s.load_hidden;
    c.stream = s.stream_cycles;
    c.mac_ops = s.macs;
    const double pes = (double)R * (double)C;
    c.overall_util = (double)c.mac_ops / (pes * (double)(c.total > 0 ? c.total : 1));
    c.mapping_efficiency = s.mapping_sum / (double)s.F;
    c.compute_util = s.compute_sum / (double)s.F;
    *cycles = c;
  }
  sim_free(&s);
  return st;
}
