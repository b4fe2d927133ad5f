/* The timing executor's loops in closed form: a while loop or tile loop is stepped until its
 * state repeats with a period, then the remaining whole periods are added at once (exact:
 * the same cycles, counters and events as stepping; tests/unit/chip/test_timing_loop.c). */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "chip/timing_int.h"

/* ---- While loops and tile loops in closed form ----
 *
 * A loop of N iterations is stepped one iteration at a time only until its timing repeats.
 * After each iteration (a boundary) the state the body can read or write is put in a
 * normalized form: every time relative to L = min(horizon, barrier, pre), the earliest
 * cycle any later instruction may start (a prefetch's own barrier is `pre`; every other
 * instruction's is `barrier`, and both only move forward from horizon). A time at or
 * before L is written as L: every later use of it is a max() against a start >= L, so it
 * can no longer change anything (the open kernel's start, end and first cycle are the
 * exception and are kept exactly). The HBM port's reservations ending before L are left
 * out for the same reason. One iteration of the body maps a normalized state and the
 * iteration's phase (i mod P: the slot rotation v[i/q+off] and the predicates when=P:R of
 * the body's own instructions) to the next normalized state and to the same increments of
 * every counter, shifted by the same cycles; so once the normalized state at boundary b
 * equals the one at boundary b - P, every later period of P iterations repeats the one
 * just run, shifted by delta = L(b) - L(b-P) cycles. The remaining whole periods are then
 * added at once: times that changed in the period move by n * delta, counters grow by n
 * times their increase, events are copied shifted (up to the event cap), and the port's
 * reservation list becomes the one the periods would have appended, with its halving at
 * PORT_CAP applied as port_add applies it. The leftover iterations (fewer than P) are
 * stepped.
 *
 * The closed form is not used (the loop is stepped, as before) when: the body holds an
 * in-step copy (dma.in prefetch=2: it may start before L, in any gap of the port since the
 * step's start); the period P exceeds LOOP_MAX_PERIOD; the matched period changed a port
 * reservation that existed before it (only appending is replayed); or the port could halve
 * its list while more than PORT_CAP / 2 reservations may still delay a transfer. It is exact
 * (the same cycles, counters and events as stepping) under those conditions, with one
 * assumption about the halving: a period adds its reservations one by one without joining
 * two existing ones into one (a transfer that exactly fills a gap), so the list's length
 * grows by one per reservation added. tests/unit/chip/test_timing_loop.c compares both ways
 * on assembled and compiled programs.
 *
 * A kernel's tile loop (loop_cf.units: a body of unit instructions only) never moves the
 * barrier, so L stays at the kernel's start. Its frame is T (bnd_take): the earliest cycle
 * the body's units are free, at or after the barrier, which bounds every start in the
 * loop's remaining iterations (not after it: the loop's epilogue and the next kernel's
 * prefetches may start from L). A time of the state then matches (bnd_repeats) when it
 * moved with T (so it was written in the period, and will be in each later one), or is the
 * same and before the earlier boundary's T (written in no period, so in none later; it
 * cannot delay anything in the loop), or is dead at both; the starts of the port's
 * reservations past T likewise (the same start: the same reservation, growing, whose start
 * loop_skip keeps). op_dma and op_vec are counters there (read at the next kernel only). */

#define LOOP_MAX_PERIOD 1024
/* A boundary's signature header (bnd_take): tile, cur_op, pre_op, op_dma, op_vec. */
#define SIG_HDR 5
#define LOOP_MAX_STATE ((int64_t)1 << 22) /* (P + 1) x state words kept for matching */
/* Stepping a loop that never repeats: refused when this many instruction runs remain. */
#define LOOP_MAX_STEPPED ((int64_t)1 << 31)

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t r = a % b;
    a = b;
    b = r;
  }
  return a;
}

/* P := lcm(P, q); 0 once it passes LOOP_MAX_PERIOD. */
static int64_t lcm_capped(int64_t p, int64_t q) {
  if (p <= 0 || q <= 0) return 0;
  int64_t l = p / gcd64(p, q) * q;
  return l > LOOP_MAX_PERIOD ? 0 : l;
}

/* One boundary: the loop's state after some iterations. */
typedef struct {
  int64_t L;
  int64_t *raw;   /* the time variables' values */
  int64_t *sig;   /* the normalized state */
  int64_t nsig, capsig;
  int64_t *acc;   /* integer counters */
  double *dacc;   /* floating-point counters */
  int64_t npi, nev, issues;
  int64_t pbase, nhalve; /* the port's list: tstate.pbase, tstate.nhalve */
  int64_t dead;     /* tpu__timing_port_dead at the loop's end */
  int64_t ntail;    /* reservations ending at or after L: the last ntail of the list */
  int64_t op_dma;   /* m.op_dma (a counter in a tile loop's closed form) */
  int64_t op_vec;   /* m.op_vec (likewise) */
  int tile;         /* L is a tile loop's T; sig holds times as they are (bnd_take) */
  int64_t L0;       /* the permanent bound: times at or before it are dead */
  int has_tail;     /* sig holds them (bnd_take) */
} loop_bnd;

/* What one loop's body can touch, and its boundaries. */
typedef struct loop_cf {
  int lo, hi;       /* body: instructions [lo, hi) */
  int64_t period;   /* 0: no closed form */
  int64_t **vars;   /* time variables the body reads or writes; vars[0..2]: the open
                     * kernel's op_start, op_end, op_first (kept exactly) */
  int nvars;
  int *slots, nsl;  /* VMEM slots the body references (their by_dma flags) */
  int *ops, nops;   /* ops whose statistics the body changes */
  int nacc, ndacc;
  loop_bnd *ring;   /* period + 1 boundaries */
  int pre_live;     /* a prefetch may start at m.pre before a kernel or sync resets it */
  unsigned units;   /* a tile loop (below): the units its body's instructions issue on; 0: not one */
  int cur_op;       /* the kernel open at entry it was built for (tstate.lcache) */
  uint32_t quiet;   /* mstate's times (vars[0 .. NM)) no instruction of the body reads or
                     * writes (quiet_vars): held exactly in the signature */
} loop_cf;

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

static int g_loops_stepwise; /* tpu_timing_set_loops_stepwise */

void tpu_timing_set_loops_stepwise(int on) { g_loops_stepwise = on; }

static void loop_cf_free(loop_cf *c) {
  tpu_free(c->vars);
  tpu_free(c->slots);
  tpu_free(c->ops);
  if (c->ring)
    for (int64_t k = 0; k <= c->period; k++) {
      tpu_free(c->ring[k].raw);
      tpu_free(c->ring[k].sig);
      tpu_free(c->ring[k].acc);
      tpu_free(c->ring[k].dacc);
    }
  tpu_free(c->ring);
  memset(c, 0, sizeof *c);
}

/* ORDER: loop_cf_init's vars: the open kernel's three times, each unit's free time, the
 * port's, barrier, pre, horizon, each link's free time, ici_busy_to. */
enum { V_UNIT = 3, V_PORT = V_UNIT + TPU_UNIT_COUNT, V_BARRIER, V_PRE, V_HORIZON, V_LANE,
       V_ICI_BUSY = V_LANE + TPU_INSN_LANES, NM };
_Static_assert(NM <= 32, "loop_cf.quiet holds one bit per mstate time");

/* The mstate times no instruction of [lo, hi) (nested structures included) reads or writes:
 * a unit's free time read and written only by that unit's instructions (the vector unit's
 * by the transcendental unit's too: issue), the port's by transfers, the links' and their
 * busy end by collectives. Such a time is the same at every boundary of the loop, so it
 * cannot tell one iteration from another, though it may lie ahead of L (a collective still
 * on the links while a kernel's tile loop runs beside it): the signature holds it as it is
 * instead of relative to L, where it would look different at each boundary and the loop
 * would never repeat. */
static uint32_t quiet_vars(const tpu_program *p, int lo, int hi) {
  uint32_t touched = 0;
  for (int j = lo; j < hi; j++) {
    const tpu_insn *in = &p->insns[j];
    switch (in->opc) {
      case TPU_ISA_LOOP:
      case TPU_ISA_COND:
      case TPU_ISA_CASE:
      case TPU_ISA_ENDCOND:
      case TPU_ISA_END:
      case TPU_ISA_KERNEL:
      case TPU_ISA_SYNC:
      case TPU_ISA_WAIT:
        continue;
      default:
        break;
    }
    int u = tpu_isa_unit(in->opc);
    if (u < 0 || u >= TPU_UNIT_COUNT) return 0; /* not known: nothing is quiet */
    touched |= 1u << (V_UNIT + u);
    if (in->opc == TPU_ISA_EUP) touched |= 1u << (V_UNIT + TPU_UNIT_VPU);
    if (u == TPU_UNIT_DMA_IN || u == TPU_UNIT_DMA_OUT) touched |= 1u << V_PORT;
    if (u == TPU_UNIT_ICI)
      for (int l = 0; l <= TPU_INSN_LANES; l++) touched |= 1u << (V_LANE + l); /* and V_ICI_BUSY */
  }
  uint32_t quiet = 0;
  for (int v = V_UNIT; v < NM; v++)
    if (v != V_BARRIER && v != V_PRE && v != V_HORIZON && !(touched >> v & 1)) quiet |= 1u << v;
  return quiet;
}

/* The body's period and the state it touches; c->period = 0 when the closed form does not
 * apply. Returns 0 on out-of-memory. */
static int loop_cf_init(tstate *t, int i, loop_cf *c) {
  memset(c, 0, sizeof *c);
  const tpu_program *p = t->p;
  c->lo = i + 1;
  c->hi = t->match[i];
  int64_t P = 1;
  /* an in-step copy that can still run (in the body, after it, or in an enclosing loop's
   * body) may start in any gap of the port since the step's start: stepped */
  if (t->last_spf >= i) return 1;
  if (t->last_spf >= 0) {
    int from = i;
    for (int j = 0; j < i; j++)
      if (p->insns[j].opc == TPU_ISA_LOOP && t->match[j] > i) {
        from = j;
        break;
      }
    if (t->last_spf >= from) return 1;
  }
  /* m.pre is read only by a prefetch's start (as a max everywhere else) and is reset by
   * the next kernel or sync: unless a prefetch can run in the body or after it before
   * one of those (in this loop's own nesting; an enclosing structure's end counts as a
   * prefetch), it cannot hold back L. Otherwise a tile loop's L stays at its kernel's start
   * and the port's reservations since then are all ahead of it. */
  for (int j = c->lo; j < c->hi && !c->pre_live; j++) c->pre_live = p->insns[j].prefetch != 0;
  for (int j = c->hi + 1, depth = 0; j < p->ninsns && !c->pre_live; j++) {
    const tpu_insn *in = &p->insns[j];
    if (in->opc == TPU_ISA_KERNEL || in->opc == TPU_ISA_SYNC) break;
    if (in->prefetch != 0) c->pre_live = 1;
    else if (in->opc == TPU_ISA_LOOP || in->opc == TPU_ISA_COND) depth++;
    else if (in->opc == TPU_ISA_END || in->opc == TPU_ISA_ENDCOND) c->pre_live = depth-- == 0;
    else if (in->opc == TPU_ISA_CASE) c->pre_live = depth == 0;
  }
  /* and wherever the port's list takes m.pre as the bound of what is dead (port_dead), so
   * that every interval it keeps ends after L */
  if (t->reach[c->hi] & REACH_PRE) c->pre_live = 1;
  /* a tile loop: a body of unit instructions only (no kernel, sync, wait, nested structure,
   * collective or prefetch), whose L is the earliest its units are free (tile_L) */
  for (int j = c->lo; j < c->hi; j++) {
    const tpu_insn *in = &p->insns[j];
    int u = tpu_isa_unit(in->opc);
    int unit_insn = in->opc != TPU_ISA_LOOP && in->opc != TPU_ISA_COND && in->opc != TPU_ISA_KERNEL &&
                    in->opc != TPU_ISA_SYNC && in->opc != TPU_ISA_WAIT && in->opc != TPU_ISA_END &&
                    in->opc != TPU_ISA_CASE && in->opc != TPU_ISA_ENDCOND;
    if (!unit_insn || u < 0 || u == TPU_UNIT_ICI || in->prefetch != 0) {
      c->units = 0;
      break;
    }
    c->units |= 1u << u;
  }
  /* the phase: the body's own instructions (nested loops count their own iterations, and a
   * conditional's branches run as iteration 0) */
  for (int j = c->lo; j < c->hi && P; j++) /* deeper: a multiple of the phase its i repeats with */
    if (p->insns[j].pmod > 0 && p->insns[j].pflat) P = lcm_capped(P, p->insns[j].pmod);
  for (int j = c->lo; j < c->hi && P;) {
    const tpu_insn *in = &p->insns[j];
    if (in->pmod > 0) P = lcm_capped(P, in->pmod);
    for (int s = 0; s <= TPU_INSN_MAX_SRC && P; s++) {
      tpu_vref r = s < TPU_INSN_MAX_SRC ? in->src[s] : in->dst;
      if (r.buf >= 0 && r.div > 0) P = lcm_capped(P, (int64_t)r.div * p->vmem[r.buf].nslots);
    }
    j = (in->opc == TPU_ISA_LOOP || in->opc == TPU_ISA_COND) ? t->match[j] + 1 : j + 1;
  }
  if (!P) return 1;
  /* what the body touches, marked in the run's zeroed scratch and listed (cleared below) */
  unsigned char *ms = t->lmark, *mi = ms + t->nslots, *mh = mi + p->ninsns, *mo = mh + p->nhbm;
  int *list = tpu_malloc(((size_t)t->nslots + (size_t)p->ninsns + (size_t)p->nhbm + (size_t)p->nops + 1) * sizeof *list);
  if (!list) return 0;
  int *ls = list, *li = ls + t->nslots, *lh = li + p->ninsns, *lo = lh + p->nhbm;
  int nsl = 0, ni = 0, nh = 0, no = 0;
  for (int j = c->lo; j < c->hi; j++) {
    const tpu_insn *in = &p->insns[j];
    for (int s = 0; s <= TPU_INSN_MAX_SRC; s++) {
      tpu_vref r = s < TPU_INSN_MAX_SRC ? in->src[s] : in->dst;
      if (r.buf < 0) continue;
      for (int k = 0; k < p->vmem[r.buf].nslots; k++) {
        int sl = t->slot0[r.buf] + k;
        if (!ms[sl]) ls[nsl++] = sl;
        ms[sl] = 1;
      }
    }
    if (!mi[j]) li[ni++] = j;
    mi[j] = 1;
    if (in->opc == TPU_ISA_WAIT && in->at >= 0 && in->at < p->ninsns && !mi[in->at]) {
      mi[in->at] = 1;
      li[ni++] = in->at;
    }
    int hb[2] = {in->hbm, in->hbm2};
    for (int k = 0; k < 2; k++)
      if (hb[k] >= 0 && hb[k] < p->nhbm && !mh[hb[k]]) {
        mh[hb[k]] = 1;
        lh[nh++] = hb[k];
      }
    if (in->op >= 0 && in->op < p->nops && !mo[in->op]) {
      mo[in->op] = 1;
      lo[no++] = in->op;
    }
  }
  if (t->m.cur_op >= 0 && !mo[t->m.cur_op]) { /* the kernel open at entry closes in the body */
    mo[t->m.cur_op] = 1;
    lo[no++] = t->m.cur_op;
  }
  for (int k = 0; k < nsl; k++) ms[ls[k]] = 0;
  for (int k = 0; k < ni; k++) mi[li[k]] = 0;
  for (int k = 0; k < nh; k++) mh[lh[k]] = 0;
  for (int k = 0; k < no; k++) mo[lo[k]] = 0;
  /* in increasing order, as a scan of the marks would list them */
  qsort(ls, (size_t)nsl, sizeof *ls, cmp_int);
  qsort(li, (size_t)ni, sizeof *li, cmp_int);
  qsort(lh, (size_t)nh, sizeof *lh, cmp_int);
  qsort(lo, (size_t)no, sizeof *lo, cmp_int);
  const int nm = NM; /* mstate's times (below) */
  c->nvars = nm + 2 * nsl + ni + nh;
  c->vars = tpu_malloc((size_t)c->nvars * sizeof *c->vars);
  c->slots = tpu_malloc((size_t)(nsl ? nsl : 1) * sizeof *c->slots);
  c->ops = tpu_malloc((size_t)(no ? no : 1) * sizeof *c->ops);
  c->nacc = TPU_UNIT_COUNT + 2 + no * (2 + TPU_UNIT_COUNT);
  c->ndacc = 2 + no;
  if ((int64_t)(P + 1) * (c->nvars + c->nacc + 2 * nsl) > LOOP_MAX_STATE) {
    tpu_free(list);
    loop_cf_free(c);
    return 1; /* too much to keep: stepped */
  }
  c->ring = tpu_calloc((size_t)P + 1, sizeof *c->ring);
  int ok = c->vars && c->slots && c->ops && c->ring;
  for (int64_t k = 0; ok && k <= P; k++) {
    c->ring[k].raw = tpu_malloc((size_t)c->nvars * sizeof(int64_t));
    c->ring[k].acc = tpu_malloc((size_t)c->nacc * sizeof(int64_t));
    c->ring[k].dacc = tpu_malloc((size_t)c->ndacc * sizeof(double));
    ok = c->ring[k].raw && c->ring[k].acc && c->ring[k].dacc;
  }
  if (!ok) {
    tpu_free(list);
    loop_cf_free(c);
    return 0;
  }
  c->period = P;
  c->quiet = quiet_vars(p, c->lo, c->hi);
  int v = 0;
  mstate *m = &t->m;
  c->vars[v++] = &m->op_start; /* ORDER: the three kept exactly come first */
  c->vars[v++] = &m->op_end;
  c->vars[v++] = &m->op_first;
  assert(v == V_UNIT);
  for (int u = 0; u < TPU_UNIT_COUNT; u++) c->vars[v++] = &m->unit_free[u];
  assert(v == V_PORT);
  c->vars[v++] = &m->port_free;
  c->vars[v++] = &m->barrier;
  c->vars[v++] = &m->pre;
  c->vars[v++] = &m->horizon;
  assert(v == V_LANE);
  for (int l = 0; l < TPU_INSN_LANES; l++) c->vars[v++] = &m->lane_free[l];
  c->vars[v++] = &m->ici_busy_to;
  assert(v == NM);
  /* mstate's other fields: hbm_wait (a counter), cur_op, pre_op, op_dma and op_vec (exact, in the
   * signature). A new field must be added here or there. */
  _Static_assert(sizeof(mstate) == sizeof(int64_t) * (TPU_UNIT_COUNT + 13 + TPU_INSN_LANES),
                 "mstate changed: update loop_cf_init");
  for (int k = 0; k < nsl; k++) {
    c->slots[k] = ls[k];
    c->vars[v++] = &t->ready[ls[k]];
    c->vars[v++] = &t->sfree[ls[k]];
  }
  for (int k = 0; k < ni; k++) c->vars[v++] = &t->last_end[li[k]];
  for (int k = 0; k < nh; k++) c->vars[v++] = &t->hbm_ready[lh[k]];
  assert(v == c->nvars);
  for (int k = 0; k < no; k++) c->ops[k] = lo[k];
  c->nsl = nsl;
  c->nops = no;
  tpu_free(list);
  return 1;
}

/* Room in b's signature for `extra` more words; 0 on out-of-memory. */
static int bnd_reserve(loop_bnd *b, int64_t extra) {
  if (b->nsig + extra <= b->capsig) return 1;
  int64_t nc = b->capsig ? b->capsig : 256;
  while (nc < b->nsig + extra) nc *= 2;
  int64_t *ns = tpu_realloc(b->sig, (size_t)nc * sizeof *ns);
  if (!ns) return 0;
  b->sig = ns;
  b->capsig = nc;
  return 1;
}

/* Records the state at a boundary into b. The port's reservations after L (the tail) go
 * into the signature only when `prev`, the boundary a period before (NULL: none), had as
 * many: boundaries match only with tails of one length, so a boundary whose tail grew or
 * shrank over the last period is matched a period later at most (the closed form is exact:
 * when it starts changes no figure). A tail that grows every iteration (transfers queued
 * ahead of the compute) then costs nothing per iteration instead of its length. Returns 0
 * on out-of-memory. */
static int bnd_take(const tstate *t, const loop_cf *c, loop_bnd *b, const loop_bnd *prev) {
  const mstate *m = &t->m;
  int64_t L = m->horizon;
  if (m->barrier < L) L = m->barrier;
  if (c->pre_live && m->pre < L) L = m->pre;
  const int64_t L0 = L; /* the permanent bound: a time at or before it is dead */
  int64_t T = L0;       /* a tile loop's bound for its own remaining iterations */
  if (c->units) {
    T = INT64_MAX;
    for (int u = 0; u < TPU_UNIT_COUNT; u++)
      if (c->units >> u & 1) {
        int64_t f = m->unit_free[u] > m->barrier ? m->unit_free[u] : m->barrier;
        if (f < T) T = f;
      }
    if (T < L0) T = L0;
    L = T;
  }
  b->L = L;
  b->op_dma = m->op_dma;
  b->op_vec = m->op_vec;
  b->tile = c->units && T > L0;
  b->L0 = L0;
  b->nsig = 0;
  /* a tile loop's op_dma and op_vec are counters (read at the next kernel only); otherwise state */
  const int tile = c->units && T > L0;
  /* the header, the times, the slots' flags, the port's floor and tail length: written
   * through a local cursor (the signature's words are the run's most frequent stores) */
  if (!bnd_reserve(b, SIG_HDR + (int64_t)c->nvars + c->nsl + 2)) return 0;
  int64_t *w = b->sig;
  *w++ = tile;
  *w++ = m->cur_op;
  *w++ = m->pre_op;
  *w++ = c->units ? 0 : m->op_dma;
  *w++ = c->units ? 0 : m->op_vec;
  for (int v = 0; v < c->nvars; v++) {
    int64_t x = b->raw[v] = *c->vars[v];
    if (v < NM && (c->quiet >> v & 1)) /* as it is: the body leaves it */
      *w++ = x;
    else if (tile) /* as it is, compared by bnd_repeats */
      *w++ = v < 3 && m->cur_op < 0 ? 0 : x;
    else if (v < 3)
      *w++ = m->cur_op >= 0 ? x - L : 0;
    else
      *w++ = (x > L ? x : L) - L;
  }
  for (int s = 0; s < c->nsl; s++) *w++ = t->by_dma[c->slots[s]];
  *w++ = (t->port_floor > L ? t->port_floor : L) - L;
  /* the port's reservations still ahead of L: a suffix of the list (disjoint intervals in
   * order, so their ends increase: the first ending at or after L, by bisection) */
  int64_t lo = 0, hi = t->npi;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (t->pi[2 * mid + 1] >= L) hi = mid;
    else lo = mid + 1;
  }
  int64_t j = lo;
  b->ntail = t->npi - j;
  *w++ = b->ntail;
  b->nsig = w - b->sig;
  b->has_tail = !prev || prev->ntail == b->ntail;
  if (b->has_tail) {
    if (!bnd_reserve(b, 2 * b->ntail)) return 0;
    w = b->sig + b->nsig;
    for (int64_t k = j; k < t->npi; k++) {
      int64_t s0 = t->pi[2 * k];
      *w++ = tile ? s0 /* as it is: a prefetch of a later kernel may fill the gap before it */
                  : (s0 > L - 1 ? s0 : L - 1) - L;
      *w++ = t->pi[2 * k + 1] - L;
    }
    b->nsig = w - b->sig;
  }
  b->npi = t->npi;
  b->pbase = t->pbase;
  b->nhalve = t->nhalve;
  b->dead = tpu__timing_port_dead(t, c->hi);
  b->nev = t->tl->nevents;
  b->issues = t->issues;
  const tpu_timeline *tl = t->tl;
  int a = 0;
  for (int u = 0; u < TPU_UNIT_COUNT; u++) b->acc[a++] = tl->busy[u];
  b->acc[a++] = tl->ici_wait_cycles;
  b->acc[a++] = tl->spf_wait_cycles;
  b->dacc[0] = m->hbm_wait;
  b->dacc[1] = tl->ici_bytes;
  for (int k = 0; k < c->nops; k++) {
    const tpu_op_stat *s = &tl->ops[c->ops[k]];
    b->acc[a++] = s->count;
    b->acc[a++] = s->cycles;
    for (int u = 0; u < TPU_UNIT_COUNT; u++) b->acc[a++] = s->unit_cycles[u];
    b->dacc[2 + k] = s->hbm_bytes;
  }
  return 1;
}

/* Whether the period from boundary a to boundary b repeats from b on: the same normalized
 * state, and no halving of the port's list in it. */
static int bnd_repeats(const tstate *t, const loop_cf *c, const loop_bnd *a, const loop_bnd *b) {
  if (!a->has_tail || !b->has_tail) return 0;
  if (a->nsig != b->nsig || a->tile != b->tile) return 0;
  if (!a->tile) {
    if (memcmp(a->sig, b->sig, (size_t)a->nsig * sizeof(int64_t))) return 0;
  } else {
    /* a tile loop: the header exactly; each time x either moved with T (x - T the same:
     * written in the period, as it will be in every later one), or is the same and was
     * before a's T (not written in the period: it cannot be in any later one), or is dead
     * at both (at or before L0); so does the start of each reservation of the tail (the same
     * start before a's T: the same reservation, growing) */
    const int64_t hdr = SIG_HDR, vend = hdr + c->nvars, tail0 = vend + c->nsl + 2;
    for (int64_t q = 0; q < a->nsig; q++) {
      int64_t x = a->sig[q], y = b->sig[q];
      int time = (q >= hdr && q < vend && !(q - hdr < NM && (c->quiet >> (q - hdr) & 1))) ||
                 (q >= tail0 && (q - tail0) % 2 == 0);
      if (!time) {
        if (x != y) return 0;
        continue;
      }
      int moved = y - b->L == x - a->L;
      int kept = x == y && x < a->L;
      int dead = x <= a->L0 && y <= b->L0 && (q >= vend || q - hdr >= 3);
      if (!moved && !kept && !dead) return 0;
    }
  }
  const int64_t cnt = (b->pbase + b->npi) - (a->pbase + a->npi);
  return cnt >= 0 && a->nhalve == b->nhalve;
}

/* The first of the port's reservations [0, n) ending after `dead` (their ends increase). */
static int64_t first_after(const tstate *t, int64_t n, int64_t dead) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (t->pi[2 * mid + 1] <= dead) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* How many of e + m * delta (m = 1 ... n) end after `dead`. */
static int64_t copies_after(int64_t e, int64_t delta, int64_t n, int64_t dead) {
  if (e > dead) return n;
  if (delta <= 0) return 0;
  int64_t m0 = (dead - e) / delta + 1; /* the first m with e + m * delta > dead */
  return m0 > n ? 0 : n - m0 + 1;
}

/* port_dead after n more periods like a..b: barrier, horizon and m.pre moved as loop_skip
 * moves them. */
static int64_t dead_after(const tstate *t, const loop_cf *c, const loop_bnd *a, const loop_bnd *b, int64_t shift) {
  if (b->dead == INT64_MIN || b->dead == INT64_MAX) return b->dead;
  const int ib = V_BARRIER, ip = V_PRE, ih = V_HORIZON;
  int64_t x[3];
  const int at[3] = {ib, ip, ih};
  for (int k = 0; k < 3; k++) x[k] = b->raw[at[k]] + (b->raw[at[k]] != a->raw[at[k]] ? shift : 0);
  int64_t d = x[0] < x[2] ? x[0] : x[2];
  if ((t->reach[c->hi] & REACH_PRE) && x[1] < d) d = x[1];
  return d;
}

/* Whether n more periods like a..b leave the port's list without a halving: an upper bound
 * on its live reservations (those ending after port_dead) at any point of them is under
 * PORT_MAX. The bound never falls as the run goes on (loop_skip), so the live ones at any
 * point are at most the live ones before b's tail at b, the frozen reservations' copies
 * still live at the end where the bound moves with the period (each live one then has a
 * live copy at the end), else all those live after b's bound, the tail, and the
 * reservations one period adds. */
static int port_fits(const tstate *t, const loop_cf *c, const loop_bnd *a, const loop_bnd *b, int64_t n) {
  const int64_t cnt = (b->pbase + b->npi) - (a->pbase + a->npi), fixed = b->npi - b->ntail;
  const int64_t delta = b->L - a->L;
  if (cnt > 0 && delta <= 0) return 0;
  if (b->dead == INT64_MIN) return (double)b->npi + (double)n * (double)cnt + (double)(b->issues - a->issues) < PORT_MAX;
  const int64_t dfin = dead_after(t, c, a, b, n * delta);
  const int linear = b->dead != INT64_MAX && dfin - b->dead == n * delta;
  /* the reservations the period froze that the list already dropped were dead at b: where
   * the bound moves with the period their copies are too, else they are needed */
  if (fixed - cnt < 0 && !linear) return 0;
  int64_t live = b->ntail + (b->issues - a->issues) + (fixed - first_after(t, fixed, b->dead));
  for (int64_t f = fixed - cnt > 0 ? fixed - cnt : 0; f < fixed && live < PORT_MAX; f++) {
    int64_t e = t->pi[2 * f + 1];
    int64_t k = linear ? copies_after(e, delta, n, dfin) : copies_after(e, delta, n, b->dead);
    live = k > PORT_MAX - live ? PORT_MAX : live + k;
  }
  return live < PORT_MAX;
}

/* Adds n more periods like the one from boundary a to boundary b (the current state). */
static tpu_status loop_skip(tstate *t, const loop_cf *c, const loop_bnd *a, const loop_bnd *b, int64_t n) {
  const int64_t delta = b->L - a->L;
  const int64_t cnt = (b->pbase + b->npi) - (a->pbase + a->npi); /* reservations a period appends */
  const int64_t limit = ((int64_t)1 << 62) - t->m.horizon;
  if (delta > 0 && n > limit / delta)
    return TPU_FAIL(t->d, TPU_ERR_LIMIT, tpu_noloc(), "program runs longer than 2^62 cycles");
  if (cnt > 0 && n > (INT64_MAX / 4) / cnt)
    return TPU_FAIL(t->d, TPU_ERR_LIMIT, tpu_noloc(), "too many HBM port reservations to count");
  const int64_t shift = n * delta;
  /* the port: b's list holds the reservations before L, then the tail the next period
   * rewrites (ntail of them). Each period freezes cnt reservations, the ones the period
   * before froze moved delta later, and leaves the tail moved delta later: the list after n
   * periods is b's up to its tail, then those cnt for each period, then the tail. Of it the
   * ones still live after the periods are kept (port_dead; port_fits: no halving), so a loop
   * of 2^31 iterations keeps few. (The start of a reservation that began before L is not
   * carried exactly: nothing reads it, as no in-step copy can run after the loop;
   * loop_cf_init.) */
  const int64_t R = b->ntail, fixed = b->npi - R;
  if (cnt > 0 || shift) {
    const int64_t dead = dead_after(t, c, a, b, shift);
    const int64_t p0 = first_after(t, fixed, dead); /* the first live one before the tail */
    int64_t lo = 0, hi = n * cnt; /* the first live copy: copy k is frozen one k mod cnt moved (k / cnt + 1) periods */
    while (lo < hi) { /* (a frozen one the list dropped has dead copies: port_fits) */
      int64_t mid = lo + (hi - lo) / 2, src = fixed - cnt + mid % cnt;
      if (src < 0 || t->pi[2 * src + 1] + (mid / cnt + 1) * delta <= dead) lo = mid + 1;
      else hi = mid;
    }
    const int64_t ncopy = n * cnt - lo, total = (fixed - p0) + ncopy + R;
    int64_t *np = tpu_malloc((size_t)(ncopy + R > 0 ? ncopy + R : 1) * 2 * sizeof(int64_t));
    if (!np) return TPU_FAIL(t->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory timing a loop");
    for (int64_t k = lo, q = 0; k < n * cnt; k++, q++) {
      int64_t src = fixed - cnt + k % cnt, off = (k / cnt + 1) * delta;
      assert(src >= 0);
      np[2 * q] = t->pi[2 * src] + off;
      np[2 * q + 1] = t->pi[2 * src + 1] + off;
    }
    for (int64_t r = 0; r < R; r++) {
      /* the tail moves on, but in a tile loop one that began at the same time at a and b
       * is the same reservation, growing (bnd_repeats): its start stays */
      int64_t src = fixed + r, soff = shift;
      if (b->tile && t->pi[2 * src] == a->sig[SIG_HDR + c->nvars + c->nsl + 2 + 2 * r]) soff = 0;
      np[2 * (ncopy + r)] = t->pi[2 * src] + soff;
      np[2 * (ncopy + r) + 1] = t->pi[2 * src + 1] + shift;
    }
    if (total > t->pcap) {
      int64_t cap = t->pcap;
      while (cap < total) cap *= 2;
      int64_t *g = tpu_realloc(t->pi, (size_t)cap * 2 * sizeof(int64_t));
      if (!g) {
        tpu_free(np);
        return TPU_FAIL(t->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory timing a loop");
      }
      t->pi = g;
      t->pcap = (int)cap;
    }
    if (p0 > 0) memmove(t->pi, &t->pi[2 * p0], (size_t)(fixed - p0) * 2 * sizeof(int64_t));
    memcpy(&t->pi[2 * (fixed - p0)], np, (size_t)(ncopy + R) * 2 * sizeof(int64_t));
    tpu_free(np);
    t->npi = (int)total;
    t->pbase = b->pbase + b->npi + n * cnt - total;
  }
  if (c->units) {
    t->m.op_dma += n * (b->op_dma - a->op_dma);
    t->m.op_vec += n * (b->op_vec - a->op_vec);
  }
  /* times the period changed move on; the others stay */
  for (int v = 0; v < c->nvars; v++)
    if (b->raw[v] != a->raw[v]) *c->vars[v] += shift;
  if (t->dry) return TPU_OK;
  /* counters: n times the period's increase */
  tpu_timeline *tl = t->tl;
  int k = 0;
  for (int u = 0; u < TPU_UNIT_COUNT; u++, k++) tl->busy[u] += n * (b->acc[k] - a->acc[k]);
  tl->ici_wait_cycles += n * (b->acc[k] - a->acc[k]);
  k++;
  tl->spf_wait_cycles += n * (b->acc[k] - a->acc[k]);
  k++;
  t->m.hbm_wait += (double)n * (b->dacc[0] - a->dacc[0]);
  tl->ici_bytes += (double)n * (b->dacc[1] - a->dacc[1]);
  for (int o = 0; o < c->nops; o++) {
    tpu_op_stat *s = &tl->ops[c->ops[o]];
    s->count += n * (b->acc[k] - a->acc[k]);
    k++;
    s->cycles += n * (b->acc[k] - a->acc[k]);
    k++;
    for (int u = 0; u < TPU_UNIT_COUNT; u++, k++) s->unit_cycles[u] += n * (b->acc[k] - a->acc[k]);
    s->hbm_bytes += (double)n * (b->dacc[2 + o] - a->dacc[2 + o]);
  }
  /* events: the period's, copied for each later period (up to the cap) */
  if (t->record && b->nev > a->nev) {
    const int64_t per = b->nev - a->nev, room = TPU_TIMING_MAX_EVENTS - tl->nevents;
    const int64_t want = room <= 0 ? 0 : n > room / per ? room : n * per; /* events added */
    if (tl->nevents + want > t->cap_events) { /* room for all of them at once */
      int64_t nc = t->cap_events;
      while (nc < tl->nevents + want) nc *= 2;
      if (!tpu__timing_events_grow(t, nc))
        return TPU_FAIL(t->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory recording events");
    }
    const tpu_event *src = &tl->events[a->nev];
    tpu_event *dst = &tl->events[tl->nevents];
    for (int64_t q = 1, done = 0; done < want; q++) {
      const int64_t m = per < want - done ? per : want - done, sh = q * delta;
      for (int64_t e = 0; e < m; e++) {
        tpu_event ev = src[e];
        ev.start += sh;
        ev.end += sh;
        dst[done + e] = ev;
      }
      done += m;
    }
    tl->nevents += want;
  }
  return TPU_OK;
}

/* Loop i's closed-form state, built at its first entry with this kernel open and kept for
 * the run (a tile loop inside a layer loop is entered once per layer); NULL: out of memory. */
static loop_cf *loop_cf_get(tstate *t, int i) {
  if (!t->lcache && !(t->lcache = tpu_calloc((size_t)t->p->ninsns, sizeof *t->lcache))) return NULL;
  loop_cf *c = t->lcache[i];
  if (c && c->cur_op == t->m.cur_op) return c;
  if (!c) {
    if (!(c = tpu_calloc(1, sizeof *c))) return NULL;
    t->lcache[i] = c;
  }
  loop_cf_free(c);
  if (!loop_cf_init(t, i, c)) {
    c->cur_op = -2; /* no kernel's: built again next time */
    return NULL;
  }
  c->cur_op = t->m.cur_op;
  return c;
}

void tpu__timing_loops_free(tstate *t) {
  for (int i = 0; t->lcache && i < t->p->ninsns; i++)
    if (t->lcache[i]) {
      loop_cf_free(t->lcache[i]);
      tpu_free(t->lcache[i]);
    }
  tpu_free(t->lcache);
  t->lcache = NULL;
}

/* Runs loop instruction i: its iterations stepped until the timing repeats, then the rest
 * in closed form (above). */
tpu_status tpu__timing_run_loop(tstate *t, int i) {
  const tpu_insn *in = &t->p->insns[i];
  const int64_t N = in->trips;
  loop_cf *cp = NULL;
  int cf = !g_loops_stepwise && N > 2;
  if (cf && !(cp = loop_cf_get(t, i)))
    return TPU_FAIL(t->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory timing a loop");
  const int64_t P = cf ? cp->period : 0;
  cf = P > 0 && 2 * P < N;
  if (cf && !bnd_take(t, cp, &cp->ring[0], NULL))
    return TPU_FAIL(t->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory timing a loop");
  const int64_t body = t->match[i] - i;
  const int64_t flat0 = t->flat;
  tpu_status st = TPU_OK;
  for (int64_t k = 0; k < N && st == TPU_OK;) {
    t->flat = flat0 * N + k;
    if (++t->issues > MAX_ISSUES) {
      st = TPU_FAIL(t->d, TPU_ERR_LIMIT, tpu_noloc(),
                    "program runs more than %lld instructions and loop iterations; timing stopped",
                    (long long)MAX_ISSUES);
      break;
    }
    st = tpu__timing_run_range(t, i + 1, t->match[i], k);
    k++;
    if (st != TPU_OK) break;
    if (cf && k > 1024 * P) cf = 0; /* it does not repeat: stop looking */
    if ((N - k) > LOOP_MAX_STEPPED / body && k >= 64 * (P > 0 ? P : 1) && !(cf && k + P <= N))
      st = TPU_FAIL(t->d, TPU_ERR_LIMIT, in->loc,
                    "while loop '%s': %lld iterations, and its timing does not repeat after %lld of them; "
                    "timing stopped", in->what ? in->what : "?", (long long)N, (long long)k);
    if (st != TPU_OK || !cf || k + P > N) continue;
    loop_bnd *b = &cp->ring[k % (P + 1)];
    const loop_bnd *a = k >= P ? &cp->ring[(k - P) % (P + 1)] : NULL;
    if (!bnd_take(t, cp, b, a)) {
      st = TPU_FAIL(t->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory timing a loop");
      break;
    }
    if (a && bnd_repeats(t, cp, a, b)) {
      int64_t n = (N - k) / P;
      if (n > 0 && port_fits(t, cp, a, b, n)) {
        st = loop_skip(t, cp, a, b, n);
        k += n * P;
        cf = 0;
        continue;
      }
    }
  }
  t->flat = flat0;
  return st;
}
