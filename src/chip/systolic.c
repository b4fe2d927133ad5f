/* PE-level, cycle-by-cycle simulation of a weight-stationary systolic array (real values). */
#include "chip/systolic.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"

/* The array's registers, the sequencer's counters, and what has been measured so far. A
 * fold is one R x C tile of W: fold f covers K-tile f % kt and N-tile f / kt (N outer, K
 * inner: SCALE-Sim's order, and it hands each output its K-tiles in ascending order). */
typedef struct sim {
  int64_t R, C, M, K, N, kt, F;
  tpu_wload mode;
  const float *A, *W;
  float *out;
  uint8_t *seen;
  tpu_systolic_pe *pe;
  float *feed_a;   /* R: activation entering each row's left edge this cycle */
  int32_t *feed_m; /* R: its row of A, -1 for a bubble */

  /* Sequencer. */
  int stream_active;
  int64_t sfold, sk0, sn0, u; /* streaming fold, its W origin, stream cycle counter */
  int64_t lfold, lk0, ln0, lrows; /* fold shifting in (-1 none) and rows shifted so far */
  int ready;                      /* a fully shifted fold waits (serial: in w, double: shadow) */
  int64_t ready_fold;
  int64_t next_load, folds_done;

  /* Measurements. */
  int64_t load_exposed, load_hidden, stream_cycles, macs, outputs_done;
  double mapping_sum, compute_sum;
} sim;

static void fold_origin(const sim *s, int64_t f, int64_t *k0, int64_t *n0) {
  *k0 = (f % s->kt) * s->R;
  *n0 = (f / s->kt) * s->C;
}

/* One cycle of weight shifting: every column moves its chain down one row and takes the
 * next weight at the top. The bottom row's weight goes in first, so after R shifts PE
 * (r, c) holds W[k0 + r][n0 + c]. Serial mode shifts the weights in use, double-buffered
 * mode the shadow registers. Weights outside K or N are padding (index -1, value 0). */
static void shift_weights(sim *s) {
  const int64_t R = s->R, C = s->C;
  const int64_t k = s->lk0 + (R - 1 - s->lrows);
  const int shadow = s->mode == TPU_WLOAD_DOUBLE;
  for (int64_t c = 0; c < C; c++) {
    for (int64_t r = R - 1; r > 0; r--) {
      tpu_systolic_pe *dst = &s->pe[r * C + c];
      const tpu_systolic_pe *src = &s->pe[(r - 1) * C + c];
      if (shadow) {
        dst->w_shadow = src->w_shadow;
        dst->sk = src->sk;
        dst->sn = src->sn;
      } else {
        dst->w = src->w;
        dst->wk = src->wk;
        dst->wn = src->wn;
      }
    }
    const int64_t n = s->ln0 + c;
    const int valid = k < s->K && n < s->N;
    const float w = valid ? s->W[k * s->N + n] : 0.0f;
    const int32_t wk = valid ? (int32_t)k : -1, wn = valid ? (int32_t)n : -1;
    tpu_systolic_pe *top = &s->pe[c];
    if (shadow) {
      top->w_shadow = w;
      top->sk = wk;
      top->sn = wn;
    } else {
      top->w = w;
      top->wk = wk;
      top->wn = wn;
    }
  }
  s->lrows++;
}

/* Per-fold utilisation terms as SCALE-Sim defines them (see mxu_model.c), counted from the
 * weights actually held by the grid when the fold starts streaming. */
static void account_fold(sim *s) {
  int64_t used = 0;
  for (int64_t i = 0; i < s->R * s->C; i++) used += s->pe[i].wk >= 0;
  const double pes = (double)s->R * (double)s->C;
  s->mapping_sum += (double)used / pes;
  s->compute_sum +=
      (double)used * (double)s->M / (pes * (double)(2 * s->R + 2 * s->C + s->M - 3));
}

/* Every PE takes its left neighbour's activation and its upper neighbour's partial sum
 * from the previous cycle. Visiting rows bottom-up and columns right-to-left lets each PE
 * read neighbours that have not been updated yet this cycle, so one grid suffices. Returns
 * whether any work is still in flight (an activation that will reach another PE, or a
 * partial sum that will move down). */
static int step_array(sim *s) {
  const int64_t R = s->R, C = s->C;
  tpu_systolic_pe *P = s->pe;
  int64_t macs = 0;
  int live = 0;
  for (int64_t r = R - 1; r >= 0; r--) {
    tpu_systolic_pe *row = &P[r * C];
    const tpu_systolic_pe *up = r > 0 ? &P[(r - 1) * C] : NULL;
    for (int64_t c = C - 1; c >= 0; c--) {
      tpu_systolic_pe *pe = &row[c];
      float ain;
      int32_t amin;
      if (c > 0) {
        ain = row[c - 1].a;
        amin = row[c - 1].am;
      } else {
        ain = s->feed_a[r];
        amin = s->feed_m[r];
      }
      float pin = 0.0f; /* the partial sum enters the top PE as +0.0f */
      int32_t pmin = amin;
      if (up) {
        pin = up[c].psum;
        pmin = up[c].pm;
      }
      pe->a = ain;
      pe->am = amin;
      if (pe->wk >= 0) {
        /* Two roundings, as the contract writes it: the product to f32, then the sum. */
        float prod = ain * pe->w;
        pe->psum = pin + prod;
        macs += amin >= 0;
      } else {
        pe->psum = pin; /* no weight: padding passes the partial sum through */
      }
      pe->pm = pmin;
      live |= (pmin >= 0 && r < R - 1) | (amin >= 0 && c < C - 1);
    }
  }
  s->macs += macs;
  return live;
}

/* Outputs leaving the bottom row this cycle go to the accumulator: the first K-tile's
 * partial sum is stored, later ones are added in tile order; a NaN final value is written
 * as the canonical quiet NaN. */
static void collect_outputs(sim *s) {
  const int64_t C = s->C, N = s->N;
  const tpu_systolic_pe *bottom = &s->pe[(s->R - 1) * C];
  const int64_t ktile = s->sfold % s->kt;
  const int last = ktile == s->kt - 1;
  for (int64_t c = 0; c < C; c++) {
    const int32_t m = bottom[c].pm;
    const int64_t n = s->sn0 + c;
    if (m < 0 || n >= N) continue;
    float *o = &s->out[(int64_t)m * N + n];
    float v = ktile == 0 ? bottom[c].psum : *o + bottom[c].psum;
    if (last && isnan(v)) v = tpu_f32_from_bits(0x7fc00000u);
    *o = v;
    s->seen[(int64_t)m * N + n] = 1;
    s->outputs_done++;
  }
}

static void fill_feed(sim *s) {
  for (int64_t r = 0; r < s->R; r++) {
    const int64_t m = s->u - r, k = s->sk0 + r;
    if (s->stream_active && m >= 0 && m < s->M && k < s->K) {
      s->feed_a[r] = s->A[m * s->K + k];
      s->feed_m[r] = (int32_t)m;
    } else {
      s->feed_a[r] = 0.0f;
      s->feed_m[r] = -1;
    }
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
  /* Tags are int32; the grid is R*C PE structs. */
  const int64_t dim_lim = 4096, idx_lim = INT32_MAX;
  if (R > dim_lim || C > dim_lim || M > idx_lim || K > idx_lim || N > idx_lim ||
      (double)M * (double)N > 1e12)
    return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(),
                    "systolic simulation too large (R=%lld C=%lld M=%lld K=%lld N=%lld)",
                    (long long)R, (long long)C, (long long)M, (long long)K, (long long)N);
  return TPU_OK;
}

static tpu_status notify(sim *s, tpu_systolic_probe *probe, int64_t t, int latched,
                         int loaded, int64_t load_fold_now, tpu_diag *d) {
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
  st.stream_fold = s->sfold;
  st.stream_k0 = s->sk0;
  st.stream_n0 = s->sn0;
  st.load_fold = loaded ? load_fold_now : -1;
  if (loaded) {
    fold_origin(s, load_fold_now, &st.load_k0, &st.load_n0);
    st.load_rows = s->lfold == load_fold_now ? s->lrows : s->R;
  }
  st.latched = latched;
  st.outputs_done = s->outputs_done;
  st.out = s->out;
  st.out_seen = s->seen;
  return probe->on_cycle(probe, &st, d);
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
  s.feed_a = tpu_calloc((size_t)R, sizeof *s.feed_a);
  s.feed_m = tpu_calloc((size_t)R, sizeof *s.feed_m);
  s.seen = tpu_calloc((size_t)(M * N), 1);
  if (!s.pe || !s.feed_a || !s.feed_m || !s.seen) {
    tpu_free(s.pe);
    tpu_free(s.feed_a);
    tpu_free(s.feed_m);
    tpu_free(s.seen);
    return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory for a %lldx%lld array",
                    (long long)R, (long long)C);
  }
  for (int64_t i = 0; i < R * C; i++) {
    s.pe[i].wk = s.pe[i].wn = s.pe[i].sk = s.pe[i].sn = -1;
    s.pe[i].am = s.pe[i].pm = -1;
  }
  memset(out, 0, (size_t)(M * N) * sizeof *out);
  s.sfold = s.lfold = s.ready_fold = -1;

  tpu_status st = TPU_OK;
  int64_t t = 0;
  for (;; t++) {
    /* The sequencer decides from the registers as they stood at the end of last cycle. */
    int latched = 0;
    if (!s.stream_active && s.ready) {
      /* Start streaming the waiting fold. Double-buffered: latch every shadow weight now
       * (the array is drained, so no PE still needs its old weight). */
      if (mode == TPU_WLOAD_DOUBLE) {
        for (int64_t i = 0; i < R * C; i++) {
          s.pe[i].w = s.pe[i].w_shadow;
          s.pe[i].wk = s.pe[i].sk;
          s.pe[i].wn = s.pe[i].sn;
        }
        latched = 1;
      }
      s.stream_active = 1;
      s.sfold = s.ready_fold;
      fold_origin(&s, s.sfold, &s.sk0, &s.sn0);
      s.u = 0;
      s.ready = 0;
      account_fold(&s);
    }
    /* Serial mode loads only into an idle array; double-buffered mode loads the shadow
     * registers whenever they are free (their last contents were latched). */
    if (s.lfold < 0 && !s.ready && s.next_load < s.F &&
        (mode == TPU_WLOAD_DOUBLE || !s.stream_active)) {
      s.lfold = s.next_load++;
      s.lrows = 0;
      fold_origin(&s, s.lfold, &s.lk0, &s.ln0);
    }
    const int loading = s.lfold >= 0;
    const int64_t load_fold_now = s.lfold;
    if (loading) {
      shift_weights(&s);
      if (s.lrows == R) {
        s.ready = 1;
        s.ready_fold = s.lfold;
        s.lfold = -1;
      }
    }

    fill_feed(&s);
    int live = step_array(&s);
    if (s.stream_active) {
      collect_outputs(&s);
      s.stream_cycles++;
      if (loading) s.load_hidden++;
    } else if (loading) {
      s.load_exposed++;
    }
    if (probe && probe->on_cycle) {
      st = notify(&s, probe, t, latched, loading, load_fold_now, d);
      if (st != TPU_OK) break;
    }
    if (s.stream_active) {
      s.u++;
      /* The fold is done once every row has been fed and nothing is left in flight: its
       * last output left the bottom in this cycle. */
      if (s.u >= M + R - 1 && !live) {
        s.stream_active = 0;
        s.folds_done++;
        if (s.folds_done == s.F) break;
      }
    }
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
  tpu_free(s.pe);
  tpu_free(s.feed_a);
  tpu_free(s.feed_m);
  tpu_free(s.seen);
  return st;
}
