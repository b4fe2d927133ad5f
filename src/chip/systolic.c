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
 * a violation means the sequencer's timing is wrong and fails the run.
 *
 * How the simulation is organised for speed (the results do not depend on it):
 *
 * - The registers are a struct of arrays (one R*C array per field), so a row's update is a
 *   few branch-free loops the compiler vectorises.
 * - Cycles run in blocks between sequencer decisions. Within a block the array is updated
 *   row by row, each row for every cycle of the block, top row first. What crosses from
 *   row r-1 to row r (partial sums, serially loaded weights, the load bus) goes through a
 *   "wire": slot t - r (mod D) holds what row r-1 produced in cycle t-1, which row r takes
 *   in cycle t and replaces with what it produces, for row r+1 in cycle t+1. Activations
 *   move within a row. A row's registers and the wire slots it touches stay in the L1
 *   cache for the whole block. Every register of every PE that can hold data is still
 *   written in every cycle, exactly as in a cycle-major sweep.
 * - A block ends where the sequencer could next act. Decisions gated on "the array holds
 *   no data" are assumed not to fire while the latest fold's data provably fills the array
 *   (live_hint); every cycle's "holds data" flag is computed anyway, and after the block
 *   each skipped cycle is re-checked: had any decision fired, the run fails as a bug.
 * - Only a band of each row can hold data (see stream_row); only the band is updated. */

/* Cycles per block at most: the wire slots a row touches in one block (BLOCK_MAX * C * 12
 * bytes of partial sums) and its registers should fit a 32 KiB L1 cache for C = 128. */
enum { BLOCK_MAX = 16 };

/* The PE registers, one R*C array per field (the tpu_systolic_pe fields), row by row; within
 * a row, column c sits at position C-1-c, so that "take the left neighbour's activation" is
 * a forward loop. The shadow and bus fields exist in double-buffered mode only. Wire slots
 * use the same positions. */
typedef struct regs {
  float *w, *a, *ps, *ws, *wb;
  int32_t *wk, *wn, *wf, *am, *af, *pm, *pf, *sk, *sn, *sf, *bk, *bn, *bf, *bd;
} regs;

/* Wires between rows, D slots of C entries each (see above). ps/pm/pf: partial sums;
 * w/wk/wn/wf: serially loaded weights (serial mode); wb..bd: the load bus (double mode). */
typedef struct wires {
  int64_t D;
  float *ps, *w, *wb;
  int32_t *pm, *pf, *wk, *wn, *wf, *bk, *bn, *bf, *bd;
} wires;

typedef struct sim {
  int64_t R, C, M, K, N, kt, F;
  tpu_wload mode;
  int dbl;
  const float *A, *W;
  float *out;
  uint8_t *seen;
  regs g;
  wires x;
  int64_t *L, *S;  /* F: each fold's load start and stream start cycle */
  int64_t *rowf;   /* R: the latest fold that has started entering each row */
  int64_t *rowk;   /* R: that fold's first row of W */
  int64_t *colf;   /* C: the oldest fold that may still be loading each column */
  tpu_systolic_pe *view; /* R*C: the grid as the probe sees it (only with a probe) */

  int64_t next_load, next_stream; /* next fold to start loading / streaming */
  int64_t oldest;                 /* oldest fold that may still have data in the array */
  int64_t busold;                 /* oldest fold that may still be on a load bus */
  int live;                       /* work still in flight after the last cycle */
  int64_t hazard_at;              /* first cycle a PE met a weight of the wrong fold, or -1 */
  int latched;                    /* PEs that latched in the last block */
  int32_t keep;                   /* all ones (see stream_span) */

  /* The block being run: cycles t0 .. t0 + B - 1, and per cycle of it: */
  int64_t t0, B;
  int64_t oldest_at[BLOCK_MAX], busold_at[BLOCK_MAX];
  int32_t live_at[BLOCK_MAX];  /* nonzero: work in flight at the end of the cycle */
  int32_t feed0_at[BLOCK_MAX]; /* nonzero: an activation entered row 0 */

  /* Measurements. */
  int64_t load_exposed, load_hidden, stream_cycles, macs, outputs_done;
  double mapping_sum, compute_sum;
} sim;

static int64_t fold_k0(const sim *s, int64_t f) { return (f % s->kt) * s->R; }
static int64_t fold_n0(const sim *s, int64_t f) { return (f / s->kt) * s->C; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Row r's slot of a wire in cycle t (t - r may be negative early in the run). */
static int64_t wire_slot(const sim *s, int64_t t, int64_t r) {
  const int64_t j = (t - r) % s->x.D;
  return (j < 0 ? j + s->x.D : j) * s->C;
}

/* The fold shifting weights into column 0 in cycle t, or -1 (loads take R cycles). */
static int64_t load_fold_at(const sim *s, int64_t t) {
  const int64_t l = s->next_load - 1;
  return l >= 0 && t < s->L[l] + s->R ? l : -1;
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

/* The sequencer at the start of cycle t, deciding from `live` (work in flight at the end of
 * cycle t-1). With apply = 0 it only says whether a decision would fire. */
static int decide(sim *s, int64_t t, int live, int apply) {
  int fired = 0;
  const int64_t j = s->next_stream;
  const int prev_fed = j == 0 || t >= s->S[j - 1] + s->M; /* fold j-1 fed its last row 0 */
  if (j < s->F && j < s->next_load && t >= s->L[j] + s->R && prev_fed && (s->dbl || !live)) {
    if (!apply) return 1;
    s->S[j] = t;
    s->next_stream++;
    account_fold(s, j);
    fired = 1;
  }
  const int64_t l = s->next_load;
  if (l < s->F) {
    /* double: once fold l-1 starts streaming; serial: into a drained, idle array */
    const int go = s->dbl ? (l <= s->next_stream)
                          : (l == s->next_stream && !live &&
                             (l == 0 || t >= s->S[l - 1] + s->M + s->R - 1));
    if (go) {
      if (!apply) return 1;
      s->L[l] = t;
      s->next_load++;
      fired = 1;
    }
  }
  return fired;
}

/* Done once every fold has fed its last row and nothing is in flight at the end of cycle t:
 * the last output left the bottom in cycle t. */
static int finished(const sim *s, int64_t t, int live) {
  return s->next_stream == s->F && t >= s->S[s->F - 1] + s->M + s->R - 2 && !live;
}

/* The last cycle at whose end the latest fold's data certainly still fills part of the
 * array (INT64_MIN / 4 if none): its last row of A enters row r at S + M - 1 + r and is
 * still moving right at column C - 2 (C >= 2) or its partial sum still moving down at
 * row R - 2 (C = 1). Only a hint for the block length: the cycles it covers are checked. */
static int64_t live_hint(const sim *s) {
  const int64_t f = s->next_stream - 1;
  if (f < 0) return INT64_MIN / 4;
  if (s->C >= 2) return s->S[f] + s->M + s->R + s->C - 4;
  if (s->R >= 2) return s->S[f] + s->M + s->R - 3;
  return INT64_MIN / 4;
}

/* How many cycles from t0 (after the sequencer acted at t0) can run as one block: up to
 * the first cycle where a decision could fire, or the termination check could succeed. */
static int64_t block_len(const sim *s, int64_t t0, int probe) {
  if (probe) return 1;
  int64_t end = t0 + BLOCK_MAX; /* exclusive */
  const int64_t hint = live_hint(s), j = s->next_stream, l = s->next_load;
  if (j < s->F && j < l) {
    int64_t e = s->L[j] + s->R;
    if (j > 0) e = max64(e, s->S[j - 1] + s->M);
    if (!s->dbl) e = max64(e, hint + 2);
    end = min64(end, e);
  }
  if (!s->dbl && l < s->F && l == j)
    end = min64(end, max64(l == 0 ? 0 : s->S[l - 1] + s->M + s->R - 1, hint + 2));
  if (j == s->F) end = min64(end, max64(s->S[s->F - 1] + s->M + s->R - 2, hint + 1) + 1);
  return end > t0 + 1 ? end - t0 : 1;
}

/* Serial load, row r in cycle t: the row takes the weights row r-1 held at the end of the
 * last cycle (from the wire); row 0 takes the next weight of each column (bottom row's
 * first), so after R cycles PE (r, c) holds W[k0 + r][n0 + c]. Weights outside K or N are
 * padding (index -1, value 0). */
static void load_row(sim *s, int64_t r, int64_t t, int64_t f, int64_t j) {
  const int64_t C = s->C, base = r * C;
  if (r == 0) {
    const int64_t k = fold_k0(s, f) + (s->R - 1 - (t - s->L[f])), n0 = fold_n0(s, f);
    for (int64_t c = 0; c < C; c++) {
      const int64_t n = n0 + c, p = j + C - 1 - c;
      const int valid = k < s->K && n < s->N;
      s->x.w[p] = valid ? s->W[k * s->N + n] : 0.0f;
      s->x.wk[p] = valid ? (int32_t)k : -1;
      s->x.wn[p] = valid ? (int32_t)n : -1;
      s->x.wf[p] = (int32_t)f;
    }
  }
  memcpy(s->g.w + base, s->x.w + j, (size_t)C * sizeof(float));
  memcpy(s->g.wk + base, s->x.wk + j, (size_t)C * sizeof(int32_t));
  memcpy(s->g.wn + base, s->x.wn + j, (size_t)C * sizeof(int32_t));
  memcpy(s->g.wf + base, s->x.wf + j, (size_t)C * sizeof(int32_t));
}

/* PEs at positions lo..hi of one row (position p = C-1-c holds column c, so the left
 * neighbour is p+1; lo..hi must not include position C-1, column 0), in ascending position,
 * so each reads its left neighbour before that is overwritten: take the activation and
 * compute psum = psum_in + a*w (the product rounded to f32, then the sum: the contract's
 * two roundings) where the PE holds a weight, else pass psum_in on. psum_in is read from
 * the wire slot, which then gets the new psum. A PE whose weight is not of the incoming
 * activation's fold passes psum_in on and sets *odd (latch_fix then deals with it). Returns
 * the MACs on real operands; ANDs every incoming activation fold tag into *neg_a (a result
 * >= 0 means one was >= 0: data in flight). Branch-free so that it vectorises; the partial sums' tags move in tag_span
 * (one loop over all fields would run out of registers). */
static int32_t mac_span(float *restrict a, int32_t *restrict am, int32_t *restrict af,
                        const float *restrict w, const int32_t *restrict wk,
                        const int32_t *restrict wf, float *restrict ps, float *restrict xps,
                        int64_t lo, int64_t hi, int32_t keep, int32_t *neg_a,
                        uint32_t *odd) {
  int32_t macs = 0, na = -1;
  uint32_t any = 0;
  for (int64_t p = lo; p <= hi; p++) {
    union {
      float f;
      uint32_t u;
    } va, vs, vp, v;
    va.f = a[p + 1];
    const float ain = va.f;
    const int32_t amin = am[p + 1], afin = af[p + 1];
    /* `keep` is all ones; masking the moved values with it stops the compiler from
     * splitting the register moves out of the loop into library copies (slower here). */
    va.u &= (uint32_t)keep;
    a[p] = va.f;
    am[p] = amin & keep;
    af[p] = afin & keep;
    const float pin = xps[p];
    const float prod = ain * w[p];
    const float sum = pin + prod;
    /* all ones: a real weight, of the activation's fold (else see latch_fix) */
    const uint32_t has = (uint32_t)-(int32_t)(wk[p] >= 0);
    const uint32_t odd_p = (uint32_t)-(int32_t)((afin >= 0) & (afin != wf[p]));
    const uint32_t use = has & ~odd_p;
    vs.f = sum;
    vp.f = pin;
    v.u = (vs.u & use) | (vp.u & ~use);
    ps[p] = v.f;
    xps[p] = v.f;
    macs += (int32_t)((use & ~(uint32_t)amin) >> 31);
    na &= afin;
    any |= odd_p;
  }
  *neg_a &= na;
  *odd |= any;
  return macs;
}

/* Called through a pointer the compiler cannot see through, so mac_span is compiled on its
 * own: inlined into the block loop its pointers spilled to the stack (about 2x slower). */
static int32_t (*volatile mac_fn)(float *restrict, int32_t *restrict, int32_t *restrict,
                                  const float *restrict, const int32_t *restrict,
                                  const int32_t *restrict, float *restrict, float *restrict,
                                  int64_t, int64_t, int32_t, int32_t *, uint32_t *) = mac_span;

/* The partial sums' tags at positions lo..hi pass through: each PE's takes the one coming
 * in from above (the wire slot, which keeps it for the row below). ANDs every row tag into
 * the result (>= 0: a partial sum in flight). */
static int32_t tag_span(int32_t *restrict pm, int32_t *restrict pf,
                        const int32_t *restrict xpm, const int32_t *restrict xpf, int64_t lo,
                        int64_t hi) {
  int32_t np = -1;
  for (int64_t p = lo; p <= hi; p++) {
    pm[p] = xpm[p];
    pf[p] = xpf[p];
    np &= xpm[p];
  }
  return np;
}

/* PE i met the first activation of a new fold after this cycle's move (its registers hold
 * the new activation; its psum and wire slot *x still the incoming partial sum): in
 * double-buffered mode, if its shadow holds that fold, it latches the shadow weight and
 * does its MAC now, as if the latch came first; any other mismatch is a sequencer hazard.
 * Once per PE per fold, so scalar. Returns the MACs done. */
static int latch_fix(sim *s, int64_t t, int64_t i, float *x) {
  regs *g = &s->g;
  const int32_t afin = g->af[i];
  if (afin < 0 || afin == g->wf[i]) return 0;
  if (!s->dbl || g->sf[i] != afin) {
    if (s->hazard_at < 0 || t < s->hazard_at) s->hazard_at = t;
    return 0;
  }
  g->w[i] = g->ws[i];
  g->wk[i] = g->sk[i];
  g->wn[i] = g->sn[i];
  g->wf[i] = g->sf[i];
  s->latched++;
  if (g->wk[i] < 0) return 0; /* no weight: the partial sum passes on */
  const float prod = g->a[i] * g->w[i];
  g->ps[i] = g->ps[i] + prod;
  *x = g->ps[i];
  return g->am[i] >= 0;
}

/* Row r in cycle t (block cycle i): activations move right, partial sums down, MACs. */
static void stream_row(sim *s, int64_t r, int64_t t, int64_t i, int64_t j) {
  const int64_t R = s->R, C = s->C, M = s->M;
  const int64_t newest = s->next_stream - 1;
  if (newest < 0) return; /* nothing has entered the array yet: every PE holds a bubble */
  /* What enters the row's left edge: row m = t - S_f - r of A for the latest fold f that has
   * started, while 0 <= m < M (padding rows still carry the fold's switch). */
  while (s->rowf[r] + 1 < s->next_stream && t - r >= s->S[s->rowf[r] + 1])
    s->rowk[r] = fold_k0(s, ++s->rowf[r]);
  const int64_t f = s->rowf[r];
  const int64_t m = f >= 0 ? t - s->S[f] - r : -1;
  float fa = 0.0f;
  int32_t fm = -1, ff = -1;
  if (f >= 0 && m >= 0 && m < M) {
    const int64_t k = s->rowk[r] + r;
    ff = (int32_t)f;
    if (k < s->K) {
      fa = s->A[m * s->K + k];
      fm = (int32_t)m;
    }
  }
  if (r == 0) s->feed0_at[i] = ff >= 0;
  /* Only a band of each row can hold data: fold f's row m meets PE (r, c) at cycle
   * S_f + m + r + c, so row r holds data in columns t - r - S_f - (M-1) .. t - r - S_f for
   * the folds in flight. PEs outside the band hold bubbles and receive bubbles, so
   * updating them changes nothing; the band is widened by one column at its trailing edge
   * so the PE the data just left becomes a bubble. Row r's band in cycle t lies within row
   * r-1's band in cycle t-1, so every partial sum read from the wire was written there.
   * In positions (p = C-1-c) the band is lo..hi. */
  const int64_t clo = max64(0, t - r - s->S[newest] - M);
  const int64_t chi = min64(C - 1, t - r - s->S[s->oldest_at[i]]);
  if (clo > chi) return;
  const int64_t lo = C - 1 - chi, hi = C - 1 - clo, feeds = hi == C - 1;
  const int64_t last = feeds ? hi - 1 : hi; /* last position fed from its left neighbour */
  const int64_t base = r * C;
  regs *g = &s->g;
  float *a = g->a + base, *xps = s->x.ps + j;
  int32_t *am = g->am + base, *af = g->af + base, *wf = g->wf + base;
  int32_t *xpm = s->x.pm + j, *xpf = s->x.pf + j;

  /* The top row's partial sums enter as +0.0f, tagged with the activation's row. */
  if (r == 0)
    for (int64_t p = lo; p <= hi; p++) {
      xps[p] = 0.0f;
      xpm[p] = p < C - 1 ? am[p + 1] : fm;
      xpf[p] = p < C - 1 ? af[p + 1] : ff;
    }

  int32_t neg_a = -1, unused = -1;
  int64_t macs = 0, from = lo;
  float *w = g->w + base, *ps = g->ps + base;
  int32_t *wk = g->wk + base, *pm = g->pm + base, *pf = g->pf + base;
  uint32_t odd = 0;
  if (from == 0 && last >= 0) { /* column C-1: its activation leaves the array next cycle */
    macs += mac_fn(a, am, af, w, wk, wf, ps, xps, 0, 0, s->keep, &unused, &odd);
    from = 1;
  }
  macs += mac_fn(a, am, af, w, wk, wf, ps, xps, from, last, s->keep, &neg_a, &odd);
  int32_t neg_p = tag_span(pm, pf, xpm, xpf, lo, hi);
  if (feeds) { /* column 0 takes the feed */
    const int64_t p = C - 1;
    a[p] = fa;
    am[p] = fm;
    af[p] = ff;
    const float pin = xps[p];
    const int mismatch = ff >= 0 && ff != wf[p];
    if (wk[p] >= 0 && !mismatch) {
      const float prod = fa * w[p];
      ps[p] = pin + prod;
      macs += fm >= 0;
    } else {
      ps[p] = pin;
    }
    xps[p] = ps[p];
    if (C > 1) neg_a &= ff;
    odd |= (uint32_t)mismatch;
  }
  if (odd)
    for (int64_t p = lo; p <= hi; p++) macs += latch_fix(s, t, base + p, &xps[p]);
  s->macs += macs;
  if (neg_a >= 0 || (r < R - 1 && neg_p >= 0)) s->live_at[i] = 1;
}

/* Double-buffered load bus, row r in cycle t (block cycle i), after the row's MACs (so a PE
 * latching this cycle saw its shadow as it was at the cycle's start): the row takes the bus
 * entries row r-1 held (from the wire); row 0 takes, in column c, the next weight of the
 * fold whose window [L + c, L + c + R) holds t. An entry that reached the row it is bound
 * for is written into that PE's shadow register and leaves the bus (the slot is emptied).
 * Fold f's entries can only be in columns t - L_f - R + 1 .. t - r - L_f of row r (the
 * lowest being the one landing), so only the band spanning the folds in flight is updated;
 * elsewhere empty entries would move onto empty entries. */
static void bus_row(sim *s, int64_t r, int64_t t, int64_t i, int64_t j) {
  const int64_t R = s->R, C = s->C, bo = s->busold_at[i];
  if (bo >= s->next_load) return;
  const int64_t clo = max64(0, t - s->L[s->next_load - 1] - R + 1);
  const int64_t chi = min64(C - 1, t - r - s->L[bo]);
  if (clo > chi) return;
  const int64_t lo = C - 1 - chi, hi = C - 1 - clo; /* positions */
  const int64_t base = r * C;
  float *xwb = s->x.wb + j;
  int32_t *xbk = s->x.bk + j, *xbn = s->x.bn + j, *xbf = s->x.bf + j, *xbd = s->x.bd + j;
  if (r == 0)
    for (int64_t c = clo; c <= chi; c++) {
      while (s->colf[c] < s->next_load && t >= s->L[s->colf[c]] + c + R) s->colf[c]++;
      const int64_t f = s->colf[c], p = C - 1 - c;
      xwb[p] = 0.0f;
      xbk[p] = xbn[p] = xbf[p] = xbd[p] = -1;
      if (f < s->next_load && t >= s->L[f] + c) {
        const int64_t row = R - 1 - (t - s->L[f] - c);
        const int64_t k = fold_k0(s, f) + row, n = fold_n0(s, f) + c;
        const int valid = k < s->K && n < s->N;
        xwb[p] = valid ? s->W[k * s->N + n] : 0.0f;
        xbk[p] = valid ? (int32_t)k : -1;
        xbn[p] = valid ? (int32_t)n : -1;
        xbf[p] = (int32_t)f;
        xbd[p] = (int32_t)row;
      }
    }
  regs *g = &s->g;
  const size_t n = (size_t)(hi - lo + 1);
  memcpy(g->wb + base + lo, xwb + lo, n * sizeof(float));
  memcpy(g->bk + base + lo, xbk + lo, n * sizeof(int32_t));
  memcpy(g->bn + base + lo, xbn + lo, n * sizeof(int32_t));
  memcpy(g->bf + base + lo, xbf + lo, n * sizeof(int32_t));
  memcpy(g->bd + base + lo, xbd + lo, n * sizeof(int32_t));
  int32_t lands = 0;
  for (int64_t p = lo; p <= hi; p++) lands |= (xbf[p] >= 0) & (xbd[p] == (int32_t)r);
  if (!lands) return;
  for (int64_t p = lo; p <= hi; p++) {
    if (xbf[p] < 0 || xbd[p] != (int32_t)r) continue;
    const int64_t e = base + p;
    if (g->sf[e] >= 0 && g->sf[e] != g->wf[e] && (s->hazard_at < 0 || t < s->hazard_at))
      s->hazard_at = t; /* an unlatched weight overwritten */
    g->ws[e] = xwb[p];
    g->sk[e] = xbk[p];
    g->sn[e] = xbn[p];
    g->sf[e] = xbf[p];
    g->wb[e] = xwb[p] = 0.0f;
    g->bk[e] = g->bn[e] = g->bf[e] = g->bd[e] = -1;
    xbk[p] = xbn[p] = xbf[p] = xbd[p] = -1;
  }
}

/* Outputs leaving the bottom row in cycle t go to the accumulator: the first K-tile's
 * partial sum is stored, later ones are added in tile order; a NaN final value is written
 * as the canonical quiet NaN. */
static void collect_outputs(sim *s) {
  const int64_t C = s->C, N = s->N, base = (s->R - 1) * C;
  int64_t f = -1, n0 = 0, ktile = 0;
  for (int64_t c = 0; c < C; c++) {
    const int64_t p = base + C - 1 - c;
    const int32_t m = s->g.pm[p];
    if (m < 0) continue;
    if (s->g.pf[p] != f) { /* usually one fold per cycle: divide once */
      f = s->g.pf[p];
      n0 = fold_n0(s, f);
      ktile = f % s->kt;
    }
    const int64_t n = n0 + c;
    if (n >= N) continue;
    float *o = &s->out[(int64_t)m * N + n];
    float v = ktile == 0 ? s->g.ps[p] : *o + s->g.ps[p];
    if (ktile == s->kt - 1 && isnan(v)) v = tpu_f32_from_bits(0x7fc00000u);
    *o = v;
    s->seen[(int64_t)m * N + n] = 1;
    s->outputs_done++;
  }
}

/* Fills wire slot t0 - r of each flow with row r-1's registers as they stand (the end of
 * cycle t0 - 1), for r = 1 .. R-1: what each row takes in the block's first cycle. */
static void wires_from_grid(sim *s, int64_t t0, int stream, int load, int bus) {
  const int64_t C = s->C;
  const size_t nf = (size_t)C * sizeof(float), ni = (size_t)C * sizeof(int32_t);
  for (int64_t r = 1; r < s->R; r++) {
    const int64_t j = wire_slot(s, t0, r), src = (r - 1) * C;
    if (stream) {
      memcpy(s->x.ps + j, s->g.ps + src, nf);
      memcpy(s->x.pm + j, s->g.pm + src, ni);
      memcpy(s->x.pf + j, s->g.pf + src, ni);
    }
    if (load) {
      memcpy(s->x.w + j, s->g.w + src, nf);
      memcpy(s->x.wk + j, s->g.wk + src, ni);
      memcpy(s->x.wn + j, s->g.wn + src, ni);
      memcpy(s->x.wf + j, s->g.wf + src, ni);
    }
    if (bus) {
      memcpy(s->x.wb + j, s->g.wb + src, nf);
      memcpy(s->x.bk + j, s->g.bk + src, ni);
      memcpy(s->x.bn + j, s->g.bn + src, ni);
      memcpy(s->x.bf + j, s->g.bf + src, ni);
      memcpy(s->x.bd + j, s->g.bd + src, ni);
    }
  }
}

/* Runs cycles t0 .. t0 + B - 1 (no sequencer decision among them but the one at t0): every
 * row for every cycle, top row first, then the per-cycle accounting. */
static void run_block(sim *s, int64_t t0, int64_t B, int decided) {
  const int64_t R = s->R, newest = s->next_stream - 1, lf = load_fold_at(s, t0);
  s->t0 = t0;
  s->B = B;
  s->latched = 0;
  for (int64_t i = 0; i < B; i++) {
    const int64_t t = t0 + i;
    if (newest >= 0)
      while (s->oldest < newest && t - (R - 1) - s->S[s->oldest] - s->M > s->C - 1) s->oldest++;
    while (s->busold < s->next_load && t > s->L[s->busold] + s->C + R - 2) s->busold++;
    s->oldest_at[i] = s->oldest;
    s->busold_at[i] = s->busold;
    s->live_at[i] = 0;
    s->feed0_at[i] = 0;
  }
  const int load = !s->dbl && lf >= 0, bus = s->dbl && s->busold_at[0] < s->next_load;
  /* Without a decision at t0, row r-1 wrote in cycle t0-1 (the last block) everything row r
   * reads now: its band only grows when a fold starts, and flows only start by decision. */
  if (decided) wires_from_grid(s, t0, newest >= 0, load, bus);
  const int64_t wrap = s->x.D * s->C;
  for (int64_t r = 0; r < R; r++) {
    int64_t j = wire_slot(s, t0, r); /* this row's slot, one further each cycle */
    for (int64_t i = 0; i < B; i++) {
      const int64_t t = t0 + i;
      if (load && t < s->L[lf] + R) load_row(s, r, t, lf, j);
      stream_row(s, r, t, i, j);
      if (bus) bus_row(s, r, t, i, j);
      if (r == R - 1) collect_outputs(s);
      j += s->C;
      if (j == wrap) j = 0;
    }
  }
  /* A cycle counts as an exposed weight load when weights shift into column 0 and no
   * activation enters: the array's input waits for weights. Every other cycle streams. */
  for (int64_t i = 0; i < B; i++) {
    const int loading = load_fold_at(s, t0 + i) >= 0, feeding = s->feed0_at[i] != 0;
    if (loading && !feeding)
      s->load_exposed++;
    else
      s->stream_cycles++;
    if (loading && feeding) s->load_hidden++;
  }
}

/* After a block: had the sequencer (or the termination check) acted at any cycle the block
 * ran through, the block would have been wrong. Returns the first such cycle, or -1. */
static int64_t check_block(sim *s) {
  for (int64_t i = 0; i < s->B; i++) {
    const int64_t t = s->t0 + i;
    if (i > 0 && decide(s, t, s->live_at[i - 1], 0)) return t;
    if (i < s->B - 1 && finished(s, t, s->live_at[i])) return t;
  }
  return -1;
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
  /* Tags are int32 (fold count included); the grid is R*C PEs of registers. */
  const int64_t dim_lim = 4096, idx_lim = INT32_MAX;
  const double folds = ((double)K / (double)R + 1.0) * ((double)N / (double)C + 1.0);
  if (R > dim_lim || C > dim_lim || M > idx_lim || K > idx_lim || N > idx_lim ||
      (double)M * (double)N > 1e12 || folds > 1e8)
    return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(),
                    "systolic simulation too large (R=%lld C=%lld M=%lld K=%lld N=%lld)",
                    (long long)R, (long long)C, (long long)M, (long long)K, (long long)N);
  return TPU_OK;
}

/* The grid as the probe sees it: one tpu_systolic_pe per PE, from the register arrays. */
static void fill_view(sim *s) {
  const regs *g = &s->g;
  for (int64_t v = 0; v < s->R * s->C; v++) {
    tpu_systolic_pe *e = &s->view[v];
    const int64_t i = v - v % s->C + (s->C - 1 - v % s->C); /* column c at position C-1-c */
    e->w = g->w[i];
    e->a = g->a[i];
    e->psum = g->ps[i];
    e->wk = g->wk[i];
    e->wf = g->wf[i];
    e->am = g->am[i];
    e->af = g->af[i];
    e->pm = g->pm[i];
    e->pf = g->pf[i];
    e->wn = g->wn[i];
    e->w_shadow = s->dbl ? g->ws[i] : 0.0f;
    e->wb = s->dbl ? g->wb[i] : 0.0f;
    e->sk = s->dbl ? g->sk[i] : -1;
    e->sn = s->dbl ? g->sn[i] : -1;
    e->sf = s->dbl ? g->sf[i] : -1;
    e->bk = s->dbl ? g->bk[i] : -1;
    e->bn = s->dbl ? g->bn[i] : -1;
    e->bf = s->dbl ? g->bf[i] : -1;
    e->bd = s->dbl ? g->bd[i] : -1;
  }
}

static tpu_status notify(sim *s, tpu_systolic_probe *probe, int64_t t, tpu_diag *d) {
  fill_view(s);
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
  st.pe = s->view;
  st.stream_fold = s->next_stream - 1;
  if (st.stream_fold >= 0) {
    st.stream_k0 = fold_k0(s, st.stream_fold);
    st.stream_n0 = fold_n0(s, st.stream_fold);
  }
  st.load_fold = load_fold_at(s, t);
  if (st.load_fold >= 0) {
    st.load_k0 = fold_k0(s, st.load_fold);
    st.load_n0 = fold_n0(s, st.load_fold);
    st.load_rows = t - s->L[st.load_fold] + 1;
  }
  st.latched = s->latched;
  st.outputs_done = s->outputs_done;
  st.out = s->out;
  st.out_seen = s->seen;
  return probe->on_cycle(probe, &st, d);
}

static void sim_free(sim *s) {
  float **fs[] = {&s->g.w, &s->g.a, &s->g.ps, &s->g.ws, &s->g.wb,
                  &s->x.ps, &s->x.w, &s->x.wb};
  int32_t **is[] = {&s->g.wk, &s->g.wn, &s->g.wf, &s->g.am, &s->g.af, &s->g.pm, &s->g.pf,
                    &s->g.sk, &s->g.sn, &s->g.sf, &s->g.bk, &s->g.bn, &s->g.bf, &s->g.bd,
                    &s->x.pm, &s->x.pf, &s->x.wk, &s->x.wn, &s->x.wf, &s->x.bk, &s->x.bn,
                    &s->x.bf, &s->x.bd};
  for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) tpu_free(*fs[i]);
  for (size_t i = 0; i < sizeof is / sizeof is[0]; i++) tpu_free(*is[i]);
  tpu_free(s->L);
  tpu_free(s->S);
  tpu_free(s->rowf);
  tpu_free(s->rowk);
  tpu_free(s->colf);
  tpu_free(s->seen);
  tpu_free(s->view);
}

/* Allocates the registers (bubbles, no weights) and wires. Returns 0 when out of memory. */
static int sim_alloc(sim *s, int with_view) {
  const size_t pes = (size_t)(s->R * s->C), wire = (size_t)(s->x.D * s->C);
  int ok = 1;
#define ALLOC(p, n, fill)                                              \
  do {                                                                 \
    (p) = tpu_malloc((n) * sizeof *(p));                               \
    if (!(p))                                                          \
      ok = 0;                                                          \
    else                                                               \
      for (size_t q_ = 0; q_ < (n); q_++) (p)[q_] = (fill);            \
  } while (0)
  /* Registers: bubbles and empty weights (tags -1, values 0). */
  ALLOC(s->g.w, pes, 0.0f);
  ALLOC(s->g.a, pes, 0.0f);
  ALLOC(s->g.ps, pes, 0.0f);
  ALLOC(s->g.wk, pes, -1);
  ALLOC(s->g.wn, pes, -1);
  ALLOC(s->g.wf, pes, -1);
  ALLOC(s->g.am, pes, -1);
  ALLOC(s->g.af, pes, -1);
  ALLOC(s->g.pm, pes, -1);
  ALLOC(s->g.pf, pes, -1);
  ALLOC(s->x.ps, wire, 0.0f);
  ALLOC(s->x.pm, wire, -1);
  ALLOC(s->x.pf, wire, -1);
  if (s->dbl) {
    ALLOC(s->g.ws, pes, 0.0f);
    ALLOC(s->g.wb, pes, 0.0f);
    ALLOC(s->g.sk, pes, -1);
    ALLOC(s->g.sn, pes, -1);
    ALLOC(s->g.sf, pes, -1);
    ALLOC(s->g.bk, pes, -1);
    ALLOC(s->g.bn, pes, -1);
    ALLOC(s->g.bf, pes, -1);
    ALLOC(s->g.bd, pes, -1);
    ALLOC(s->x.wb, wire, 0.0f);
    ALLOC(s->x.bk, wire, -1);
    ALLOC(s->x.bn, wire, -1);
    ALLOC(s->x.bf, wire, -1);
    ALLOC(s->x.bd, wire, -1);
  } else {
    ALLOC(s->x.w, wire, 0.0f);
    ALLOC(s->x.wk, wire, -1);
    ALLOC(s->x.wn, wire, -1);
    ALLOC(s->x.wf, wire, -1);
  }
  ALLOC(s->L, (size_t)s->F, 0);
  ALLOC(s->S, (size_t)s->F, 0);
  ALLOC(s->rowf, (size_t)s->R, -1);
  ALLOC(s->rowk, (size_t)s->R, 0);
  ALLOC(s->colf, (size_t)s->C, 0);
  ALLOC(s->seen, (size_t)(s->M * s->N), 0);
#undef ALLOC
  if (with_view) {
    s->view = tpu_calloc(pes, sizeof *s->view);
    if (!s->view) ok = 0;
  }
  return ok;
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
  s.dbl = mode == TPU_WLOAD_DOUBLE;
  s.A = A;
  s.W = W;
  s.out = out;
  s.kt = (K + R - 1) / R;
  s.F = s.kt * ((N + C - 1) / C);
  s.x.D = R + BLOCK_MAX - 1;
  s.hazard_at = -1;
  s.keep = -1;
  const int probing = probe && probe->on_cycle;
  if (!sim_alloc(&s, probing)) {
    sim_free(&s);
    return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory for a %lldx%lld array",
                    (long long)R, (long long)C);
  }
  memset(out, 0, (size_t)(M * N) * sizeof *out);

  tpu_status st = TPU_OK;
  const int64_t watchdog = s.F * (2 * R + C + M) + 2 * R + C + 16;
  int64_t t = 0;
  for (;;) {
    /* The sequencer decides from the state at the end of the last cycle. */
    const int decided = decide(&s, t, s.live, 1);
    const int64_t B = block_len(&s, t, probing);
    run_block(&s, t, B, decided);
    const int64_t last = t + B - 1;
    s.live = s.live_at[B - 1] != 0;
    if (s.hazard_at >= 0) {
      st = TPU_FAIL(d, TPU_ERR_RUNTIME, tpu_noloc(),
                    "systolic sequencer hazard at cycle %lld: a weight of the wrong fold",
                    (long long)s.hazard_at);
      break;
    }
    const int64_t missed = check_block(&s);
    if (missed >= 0 || last > watchdog) { /* bug guards */
      st = TPU_FAIL(d, TPU_ERR_RUNTIME, tpu_noloc(), "systolic sequencer %s at cycle %lld",
                    missed >= 0 ? "skipped a decision" : "stalled",
                    (long long)(missed >= 0 ? missed : last));
      break;
    }
    if (probing) {
      st = notify(&s, probe, last, d);
      if (st != TPU_OK) break;
    }
    t = last;
    if (finished(&s, t, s.live)) break;
    t++;
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
