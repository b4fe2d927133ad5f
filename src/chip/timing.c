/* The unit-level timing executor: issues each instruction when its unit is free and the
 * VMEM slots it reads (and overwrites) are ready; fills a tpu_timeline. */
#include "chip/timing.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "chip/mxu.h"

/* The mutable part of the machine, copied whole when a conditional tries its branches. */
typedef struct {
  int64_t unit_free[TPU_UNIT_COUNT];
  int64_t port_free;  /* the HBM port shared by both DMA directions */
  int64_t barrier;    /* nothing issues before this (kernel/sync/wait) */
  int64_t pre;        /* the barrier a prefetch dma.in obeys: the one before the last kernel */
  int pre_op;         /* the op whose kernel runs while prefetches of the next one issue, -1 */
  int64_t horizon;    /* the latest completion so far */
  double hbm_wait;
  int cur_op;         /* the op whose kernel is open, -1 */
  int64_t op_start, op_end;
  int64_t op_first;   /* the open kernel's barrier: its first instruction may issue */
  int64_t op_dma;     /* the open kernel's transfer cycles so far, each at its full length */
  int64_t lane_free[TPU_INSN_LANES]; /* ici: when each kind of link (+x -x +y -y +z -z, DCN) is free */
  int64_t ici_busy_to;  /* ici: the end of the links' busy time counted so far */
} mstate;

typedef struct {
  const tpu_program *p;
  const tpu_chip *chip;
  tpu_diag *d;
  tpu_timeline *tl;
  int record, dry;
  mstate m;
  int64_t *ready, *sfree; /* per VMEM slot */
  unsigned char *by_dma;  /* per VMEM slot: was its last writer a DMA */
  int *slot0;             /* per VMEM buffer: index of its first slot */
  int nslots;
  int64_t *last_end;      /* per instruction: completion of its latest run */
  int64_t *dur;           /* per instruction: unit cycles of one run */
  int64_t *pdur;          /* per DMA instruction: cycles of one run on the HBM port (<= dur) */
  int64_t *gdur;          /* per DMA instruction: of pdur, the cycles it moves bytes; the rest
                           * (a vector kernel's stream costs) holds the port for its kernel's
                           * transfers but leaves it to prefetches (<= pdur) */
  int *match;             /* loop -> end, cond -> endcond, case -> next case/endcond */
  int64_t lat;            /* HBM latency, cycles */
  int64_t kov;            /* fixed start cost of each kernel, cycles */
  unsigned char *op_hbm;  /* per op: OP_HBM_MOVES | OP_HBM_READS | OP_VECTOR */
  int64_t mov;            /* extra start cost of a matmul/convolution kernel, cycles */
  double bpc;             /* HBM bytes per cycle */
  int64_t cap_events;
  int64_t *hbm_ready;     /* per HBM buffer: completion of its latest writer (dma.out/.hbm) */
  int64_t *op_lo, *op_hi; /* per op: the VMEM address hull of its buffers (lo == hi: none) */
  int64_t *pi;            /* HBM port busy intervals [pi[2j], pi[2j+1]), sorted, disjoint */
  int npi;
  int64_t port_floor;     /* intervals before this were dropped: treat it as busy */
  int64_t issues;         /* instruction runs so far (a guard against runaway programs) */
} tstate;

#define MAX_ISSUES ((int64_t)2000000000)

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The port intervals kept for prefetches to fill gaps between; older ones are dropped
 * (port_floor), which can only delay a prefetch, never advance it. */
#define PORT_CAP 4096

/* Records [s, e) as busy on the HBM port, merging with touching neighbours. */
static void port_add(tstate *t, int64_t s, int64_t e) {
  if (e <= s) return;
  int j = t->npi;
  while (j > 0 && t->pi[2 * (j - 1)] > s) j--; /* first interval starting after s */
  if (j > 0 && t->pi[2 * (j - 1) + 1] == s) { /* extends the previous one */
    t->pi[2 * (j - 1) + 1] = e;
    if (j < t->npi && t->pi[2 * j] == e) {
      t->pi[2 * (j - 1) + 1] = t->pi[2 * j + 1];
      memmove(&t->pi[2 * j], &t->pi[2 * j + 2], (size_t)(t->npi - j - 1) * 2 * sizeof(int64_t));
      t->npi--;
    }
    return;
  }
  if (j < t->npi && t->pi[2 * j] == e) { /* extends the next one backwards */
    t->pi[2 * j] = s;
    return;
  }
  if (t->npi == PORT_CAP) { /* drop the older half */
    int h = PORT_CAP / 2;
    t->port_floor = t->pi[2 * (h - 1) + 1];
    memmove(t->pi, &t->pi[2 * h], (size_t)(t->npi - h) * 2 * sizeof(int64_t));
    t->npi -= h;
    j -= h;
    if (j < 0) j = 0;
    if (s < t->port_floor) return; /* only a prefetch could land there, and none does */
  }
  memmove(&t->pi[2 * j + 2], &t->pi[2 * j], (size_t)(t->npi - j) * 2 * sizeof(int64_t));
  t->pi[2 * j] = s;
  t->pi[2 * j + 1] = e;
  t->npi++;
}

/* The earliest start >= s at which the port is idle for dur cycles. */
static int64_t port_gap(const tstate *t, int64_t s, int64_t dur) {
  if (s < t->port_floor) s = t->port_floor;
  for (int j = 0; j < t->npi; j++) {
    if (t->pi[2 * j + 1] <= s) continue;
    if (t->pi[2 * j] >= s + dur) return s;
    s = t->pi[2 * j + 1];
  }
  return s;
}

/* May prefetch dma.in `in` start early? Only while a kernel runs whose VMEM buffers it
 * does not overlap (the compiler places them apart; an assembled program may not). */
static int prefetch_ok(const tstate *t, const tpu_insn *in) {
  if (in->prefetch == 2) return in->opc == TPU_ISA_DMA_IN && in->dst.buf >= 0; /* in-step copy: VMEM reserved for it */
  if (!in->prefetch || in->opc != TPU_ISA_DMA_IN || t->m.pre_op < 0 || in->dst.buf < 0)
    return 0;
  const tpu_vmem_buf *b = &t->p->vmem[in->dst.buf];
  int64_t lo = b->offset, hi = b->offset + b->slot_bytes * b->nslots;
  int64_t plo = t->op_lo[t->m.pre_op], phi = t->op_hi[t->m.pre_op];
  return plo >= phi || hi <= plo || phi <= lo;
}

/* Cycles of one matmul instruction on mx MXUs whose b products are dealt to `sb` groups of
 * MXUs as whole products (sb = 1: every MXU works on each product), the mx / sb MXUs of a
 * group splitting N's column tiles first and then M (docs/timing.md). */
static tpu_status matmul_split_cycles(const tpu_insn *in, const tpu_chip *chip, int64_t mx,
                                      int64_t sb, int64_t *out, tpu_diag *d) {
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
  tpu_mxu_cycles mc;
  TPU_TRY(tpu_mxu_tile_cycles(R, C, m1, in->k, ncols, TPU_WLOAD_DOUBLE, &mc, d));
  /* A chip that loads a weight tile in W < R cycles exposes W - T per fold, not R - T
   * (the systolic model of tpu_mxu_tile_cycles shifts one row per cycle). */
  int64_t W = chip->mxu_weight_load_cycles;
  if (W > 0 && W < R) {
    int64_t T = m1, F = mc.folds;
    mc.weight_load = W + (F - 1) * (W > T ? W - T : 0);
  }
  int64_t cyc = (mc.weight_load + mc.stream) * (in->passes > 0 ? in->passes : 1);
  if ((in->dtype == TPU_S8 || in->dtype == TPU_U8) && chip->int8_rate > 1)
    cyc = (int64_t)ceil((double)cyc / chip->int8_rate);
  *out = cyc;
  return TPU_OK;
}

tpu_status tpu_timing_matmul_cycles(const tpu_insn *in, const tpu_chip *chip, int64_t *out,
                                    tpu_diag *d) {
  int64_t lanes = chip->mxus_per_core * chip->tensorcores;
  int64_t mx = in->mxus < lanes ? in->mxus : lanes;
  if (mx < 1) mx = 1;
  TPU_TRY(matmul_split_cycles(in, chip, mx, 1, out, d));
  /* A chip with mxu_batch_spread gives each MXU whole products of a batched matmul when
   * that is faster: each streams all M rows of its products, where splitting M leaves
   * short folds that expose their weight loads (v6e: 128 products of 64 x 64 x 64 in VMEM
   * take the compiler 3,072 cycles at M = 16, 32 and 64 alike; docs/timing.md). */
  if (chip->mxu_batch_spread && in->b > 1 && mx > 1) {
    int64_t alt = 0;
    TPU_TRY(matmul_split_cycles(in, chip, mx, mx < in->b ? mx : in->b, &alt, d));
    if (alt < *out) *out = alt;
  }
  return TPU_OK;
}

static int64_t slot_of(const tstate *t, tpu_vref r, int64_t iter) {
  const tpu_vmem_buf *b = &t->p->vmem[r.buf];
  int64_t k = (r.div ? iter / r.div : 0) + r.off;
  return t->slot0[r.buf] + k % b->nslots;
}

/* A matmul kernel whose 16-bit results pay the stream pass (out_scale) lasts at least its
 * transfers end to end: the pass holds only the result transfers, so the kernel's reads and
 * MXU work overlap it, but the XLA TPU compiler's memory-bound matmuls take their input
 * transfers plus their result transfers with the pass (bf16 [M,K] x [K,128] with 268 MB of
 * input, K = 512 ... 8192: 1,187,481 ... 705,347 cycles on v5e, the input's 612K plus a
 * result pass of 459K ... 29K, plus 9 %); the MXU work still hides behind them. */
static void port_floor_op(tstate *t) {
  int op = t->m.cur_op;
  if (op < 0 || t->p->ops[op].out_scale <= 1 || t->m.op_dma <= 0) return;
  int64_t floor = t->m.op_first + t->m.op_dma;
  if (floor > t->m.horizon) t->m.horizon = floor;
  if (floor > t->m.op_end) t->m.op_end = floor;
}

static void close_op(tstate *t) {
  if (t->m.cur_op >= 0 && !t->dry) {
    tpu_op_stat *s = &t->tl->ops[t->m.cur_op];
    if (t->m.op_end > t->m.op_start) s->cycles += t->m.op_end - t->m.op_start;
  }
  t->m.cur_op = -1;
}

static tpu_status issue(tstate *t, int idx, int64_t iter) {
  const tpu_insn *in = &t->p->insns[idx];
  const int u = tpu_isa_unit(in->opc);
  const int is_dma = u == TPU_UNIT_DMA_IN || u == TPU_UNIT_DMA_OUT;
  /* A prefetch obeys the barrier before the running kernel, its HBM source's writer and
   * its slot; it then takes the first gap on the port (docs/timing.md). */
  const int pf = prefetch_ok(t, in);
  /* ICI: a collective waits for the kinds of link it loads (tpu_insn lane; all when 0) */
  int64_t ufree = t->m.unit_free[u];
  /* The EUP's pushes take the vector unit's issue slots too: a kernel's transcendental and
   * VPU work add up, as in the XLA TPU compiler's cost model (64 chained exp(y) * 0.5 over
   * f32[4096,4096]: 800,604 cycles on v5e, the 524,288 of the exps alone plus the 262,144
   * of the multiplies; bench/fidelity/corpus/eup.json). */
  const int eup_serial = in->opc == TPU_ISA_EUP;
  if (eup_serial && t->m.unit_free[TPU_UNIT_VPU] > ufree) ufree = t->m.unit_free[TPU_UNIT_VPU];
  unsigned lanes = u == TPU_UNIT_ICI ? (in->lane ? (unsigned)in->lane : (1u << TPU_INSN_LANES) - 1) : 0;
  if (u == TPU_UNIT_ICI) {
    ufree = 0;
    for (int l = 0; l < TPU_INSN_LANES; l++)
      if (lanes >> l & 1 && t->m.lane_free[l] > ufree) ufree = t->m.lane_free[l];
  }
  /* an in-step copy (prefetch=2) may start from the step's start */
  int64_t t_nd = pf ? (in->prefetch == 2 ? 0 : t->m.pre) : (t->m.barrier > ufree ? t->m.barrier : ufree);
  int64_t t_dma = 0;
  if (is_dma && !pf && t->m.port_free > t_nd) t_nd = t->m.port_free;
  if (pf && in->hbm >= 0 && t->hbm_ready[in->hbm] > t_nd) t_nd = t->hbm_ready[in->hbm];
  int64_t rs[TPU_INSN_MAX_SRC];
  for (int s = 0; s < TPU_INSN_MAX_SRC; s++) {
    rs[s] = -1;
    if (in->src[s].buf < 0) continue;
    int64_t k = rs[s] = slot_of(t, in->src[s], iter);
    if (t->by_dma[k]) {
      if (t->ready[k] > t_dma) t_dma = t->ready[k];
    } else if (t->ready[k] > t_nd) {
      t_nd = t->ready[k];
    }
  }
  int64_t ws = -1;
  int part = 0; /* another part of a slot a DMA is filling and nothing has read yet */
  if (in->dst.buf >= 0) {
    ws = slot_of(t, in->dst, iter);
    if (t->sfree[ws] > t_nd) t_nd = t->sfree[ws];
    part = is_dma && t->by_dma[ws] && t->ready[ws] > t->sfree[ws];
    if (!part && t->ready[ws] > t_nd) t_nd = t->ready[ws];
  }
  int64_t start = t_nd > t_dma ? t_nd : t_dma;
  if (pf) start = port_gap(t, start, t->dur[idx]);
  if (!is_dma && t_dma > t_nd) t->m.hbm_wait += (double)(t_dma - t_nd);
  int64_t dur = t->dur[idx];
  if (start > ((int64_t)1 << 62) - dur - t->lat)
    return TPU_FAIL(t->d, TPU_ERR_LIMIT, tpu_noloc(), "program runs longer than 2^62 cycles");
  int64_t end = start + dur, done = end;
  if ((in->opc == TPU_ISA_DMA_IN && !in->onchip) || in->opc == TPU_ISA_DMA_HBM) done = end + t->lat;
  if (!pf || end > t->m.unit_free[u]) t->m.unit_free[u] = end;
  if (eup_serial && end > t->m.unit_free[TPU_UNIT_VPU]) t->m.unit_free[TPU_UNIT_VPU] = end;
  int64_t busy = dur;
  if (u == TPU_UNIT_ICI) {
    int64_t lf = 0;
    for (int l = 0; l < TPU_INSN_LANES; l++) {
      if (lanes >> l & 1) t->m.lane_free[l] = end;
      if (t->m.lane_free[l] > lf) lf = t->m.lane_free[l];
    }
    t->m.unit_free[u] = lf; /* the links are all free then */
    /* the links' busy time: the union of the collectives' spans */
    int64_t from = start > t->m.ici_busy_to ? start : t->m.ici_busy_to;
    busy = end > from ? end - from : 0;
    if (end > t->m.ici_busy_to) t->m.ici_busy_to = end;
  }
  if (is_dma) {
    int64_t pend = start + (t->pdur[idx] < dur ? t->pdur[idx] : dur);
    if (!pf || pend > t->m.port_free) t->m.port_free = pend;
    port_add(t, start, start + (t->gdur[idx] < pend - start ? t->gdur[idx] : pend - start));
  }
  if (in->opc == TPU_ISA_DMA_OUT && in->hbm >= 0) t->hbm_ready[in->hbm] = end;
  if (in->opc == TPU_ISA_DMA_HBM && in->hbm2 >= 0) t->hbm_ready[in->hbm2] = end;
  for (int s = 0; s < TPU_INSN_MAX_SRC; s++)
    if (rs[s] >= 0 && t->sfree[rs[s]] < end) t->sfree[rs[s]] = end;
  if (ws >= 0) {
    if (!part || done > t->ready[ws]) t->ready[ws] = done;
    t->by_dma[ws] = (unsigned char)is_dma;
  }
  t->last_end[idx] = done;
  /* A collective on the links holds up nothing until a wait at it (asynchronous -start), nor
   * does an in-step copy (its reader's wait: the chip's time spent waiting on it). */
  const int async = u == TPU_UNIT_ICI || in->prefetch == 2;
  if (!async && done > t->m.horizon) t->m.horizon = done;
  if (in->op >= 0 && in->op == t->m.cur_op) {
    /* a prefetch's cycles overlap the previous kernel: the op's window opens at its barrier */
    if (!pf && start < t->m.op_start) t->m.op_start = start;
    if (in->prefetch != 2 && done > t->m.op_end) t->m.op_end = done;
    if (is_dma && !pf) t->m.op_dma += dur;
  }
  if (t->dry) return TPU_OK;
  tpu_timeline *tl = t->tl;
  tl->busy[u] += busy;
  if (in->op >= 0) {
    tpu_op_stat *s = &tl->ops[in->op];
    s->unit_cycles[u] += dur;
    if (is_dma && !in->onchip) s->hbm_bytes += (double)in->bytes * (in->opc == TPU_ISA_DMA_HBM ? 2 : 1);
  }
  if (in->opc == TPU_ISA_ICI) tl->ici_bytes += (double)in->bytes;
  if (t->record && dur > 0) {
    if (tl->nevents == t->cap_events && t->cap_events < TPU_TIMING_MAX_EVENTS) {
      int64_t nc = t->cap_events * 2 < TPU_TIMING_MAX_EVENTS ? t->cap_events * 2 : TPU_TIMING_MAX_EVENTS;
      tpu_event *ne = tpu_realloc(tl->events, (size_t)nc * sizeof *ne);
      if (!ne) return TPU_FAIL(t->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory recording events");
      tl->events = ne;
      t->cap_events = nc;
    }
    if (tl->nevents < t->cap_events) {
      tpu_event *e = &tl->events[tl->nevents++];
      e->unit = (tpu_unit)u;
      e->lane = 0;
      e->start = start;
      e->end = end;
      e->op = in->op;
    }
  }
  return TPU_OK;
}

/* Snapshot of everything a branch can change, for trying each branch of a cond. */
typedef struct {
  mstate m;
  int64_t *ready, *sfree, *last_end, *hbm_ready, *pi;
  int npi;
  int64_t port_floor;
  unsigned char *by_dma;
} snap;

static int snap_take(const tstate *t, snap *s) {
  s->m = t->m;
  size_t ns = (size_t)(t->nslots ? t->nslots : 1), ni = (size_t)(t->p->ninsns ? t->p->ninsns : 1);
  s->ready = tpu_malloc(ns * sizeof(int64_t));
  s->sfree = tpu_malloc(ns * sizeof(int64_t));
  s->by_dma = tpu_malloc(ns);
  s->last_end = tpu_malloc(ni * sizeof(int64_t));
  s->hbm_ready = tpu_malloc((size_t)(t->p->nhbm ? t->p->nhbm : 1) * sizeof(int64_t));
  s->pi = tpu_malloc((size_t)(t->npi ? t->npi : 1) * 2 * sizeof(int64_t));
  if (!s->ready || !s->sfree || !s->by_dma || !s->last_end || !s->hbm_ready || !s->pi) return 0;
  memcpy(s->hbm_ready, t->hbm_ready, (size_t)t->p->nhbm * sizeof(int64_t));
  memcpy(s->pi, t->pi, (size_t)t->npi * 2 * sizeof(int64_t));
  s->npi = t->npi;
  s->port_floor = t->port_floor;
  memcpy(s->ready, t->ready, (size_t)t->nslots * sizeof(int64_t));
  memcpy(s->sfree, t->sfree, (size_t)t->nslots * sizeof(int64_t));
  memcpy(s->by_dma, t->by_dma, (size_t)t->nslots);
  memcpy(s->last_end, t->last_end, (size_t)t->p->ninsns * sizeof(int64_t));
  return 1;
}

static void snap_restore(tstate *t, const snap *s) {
  t->m = s->m;
  memcpy(t->ready, s->ready, (size_t)t->nslots * sizeof(int64_t));
  memcpy(t->sfree, s->sfree, (size_t)t->nslots * sizeof(int64_t));
  memcpy(t->by_dma, s->by_dma, (size_t)t->nslots);
  memcpy(t->last_end, s->last_end, (size_t)t->p->ninsns * sizeof(int64_t));
  memcpy(t->hbm_ready, s->hbm_ready, (size_t)t->p->nhbm * sizeof(int64_t));
  memcpy(t->pi, s->pi, (size_t)s->npi * 2 * sizeof(int64_t));
  t->npi = s->npi;
  t->port_floor = s->port_floor;
}

static void snap_free(snap *s) {
  tpu_free(s->ready);
  tpu_free(s->sfree);
  tpu_free(s->by_dma);
  tpu_free(s->last_end);
  tpu_free(s->hbm_ready);
  tpu_free(s->pi);
}

/* Per-op flags of tstate.op_hbm. */
enum { OP_HBM_MOVES = 1, OP_HBM_READS = 2, OP_VECTOR = 4 };

/* The cycles between a kernel barrier and the kernel's first instruction: the chip's fixed
 * per-op cost (kernel_overhead_s; none for an op of scalars); a matmul kernel that moves data
 * to or from HBM adds matmul_overhead_s. One that reads and writes only VMEM does not: the
 * compiler's v6e kernels of that kind cost their MXU work plus about 1,024 cycles (512^3:
 * 1,536; 512x512x1536: 2,560), against 4,496 for a 128^3 dot between HBM arrays
 * (docs/timing.md). A vector kernel that reads nothing from HBM still waits the HBM
 * latency's worth before it starts, as one that does waits for its first block: the
 * compiler times its smallest vector kernels alike wherever their operands live (v6e:
 * 2,116-2,164 cycles for 2-64 KiB, every operand and the result in VMEM or not; v5e
 * 1,824-1,888, v5p 2,122-2,169; docs/fidelity.md). A chip without kernel_overhead_s
 * pays neither. */
static int64_t kernel_start(const tstate *t, int op) {
  if (op < 0) return t->kov;
  const tpu_prog_op *o = &t->p->ops[op];
  if (o->scalar) return 0;
  if (o->m > 0) return t->kov + ((t->op_hbm[op] & OP_HBM_MOVES) ? t->mov : 0);
  return t->kov + (t->kov > 0 && (t->op_hbm[op] & (OP_VECTOR | OP_HBM_READS)) == OP_VECTOR ? t->lat : 0);
}

static tpu_status run_range(tstate *t, int lo, int hi, int64_t iter);

static tpu_status run_cond(tstate *t, int c) {
  /* The costliest branch: try each from the same state, keep the latest finisher. Timing
   * must not look at the predicate's value, so this is an upper bound (docs/timing.md). */
  int endc = t->match[c];
  snap s;
  memset(&s, 0, sizeof s);
  if (!snap_take(t, &s)) {
    snap_free(&s);
    return TPU_FAIL(t->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory timing a conditional");
  }
  int saved_dry = t->dry, best = -1;
  int64_t best_end = -1;
  t->dry = 1;
  tpu_status st = TPU_OK;
  for (int k = c + 1; k < endc && st == TPU_OK; k = t->match[k]) {
    snap_restore(t, &s);
    st = run_range(t, k + 1, t->match[k], 0);
    if (st == TPU_OK && t->m.horizon > best_end) {
      best_end = t->m.horizon;
      best = k;
    }
  }
  t->dry = saved_dry;
  snap_restore(t, &s);
  snap_free(&s);
  if (st == TPU_OK && best >= 0) st = run_range(t, best + 1, t->match[best], 0);
  return st;
}

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
 * on assembled and compiled programs. */

#define LOOP_MAX_PERIOD 64
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
  int64_t first[2]; /* the port's first reservation */
  int64_t ntail;    /* reservations ending at or after L: the last ntail of the list */
  int has_tail;     /* sig holds them (bnd_take) */
} loop_bnd;

/* What one loop's body can touch, and its boundaries. */
typedef struct {
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
} loop_cf;

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
  int from = i;
  for (int j = 0; j < i; j++)
    if (p->insns[j].opc == TPU_ISA_LOOP && t->match[j] > i) {
      from = j;
      break;
    }
  for (int j = from; j < p->ninsns; j++)
    if (p->insns[j].opc == TPU_ISA_DMA_IN && p->insns[j].prefetch == 2) return 1;
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
  /* the phase: the body's own instructions (nested loops count their own iterations, and a
   * conditional's branches run as iteration 0) */
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
  unsigned char *mark = tpu_calloc((size_t)(t->nslots + p->ninsns + p->nhbm + p->nops) + 1, 1);
  unsigned char *ms = mark, *mi = mark + t->nslots, *mh = mi + p->ninsns, *mo = mh + p->nhbm;
  if (!mark) return 0;
  int nsl = 0, ni = 0, nh = 0, no = 0;
  for (int j = c->lo; j < c->hi; j++) {
    const tpu_insn *in = &p->insns[j];
    for (int s = 0; s <= TPU_INSN_MAX_SRC; s++) {
      tpu_vref r = s < TPU_INSN_MAX_SRC ? in->src[s] : in->dst;
      if (r.buf < 0) continue;
      for (int k = 0; k < p->vmem[r.buf].nslots; k++) {
        int sl = t->slot0[r.buf] + k;
        if (!ms[sl]) nsl++;
        ms[sl] = 1;
      }
    }
    if (!mi[j]) ni++;
    mi[j] = 1;
    if (in->opc == TPU_ISA_WAIT && in->at >= 0 && in->at < p->ninsns && !mi[in->at]) {
      mi[in->at] = 1;
      ni++;
    }
    int hb[2] = {in->hbm, in->hbm2};
    for (int k = 0; k < 2; k++)
      if (hb[k] >= 0 && hb[k] < p->nhbm && !mh[hb[k]]) {
        mh[hb[k]] = 1;
        nh++;
      }
    if (in->op >= 0 && in->op < p->nops && !mo[in->op]) {
      mo[in->op] = 1;
      no++;
    }
  }
  if (t->m.cur_op >= 0 && !mo[t->m.cur_op]) { /* the kernel open at entry closes in the body */
    mo[t->m.cur_op] = 1;
    no++;
  }
  const int nm = 3 + TPU_UNIT_COUNT + 4 + TPU_INSN_LANES + 1; /* mstate's times (below) */
  c->nvars = nm + 2 * nsl + ni + nh;
  c->vars = tpu_malloc((size_t)c->nvars * sizeof *c->vars);
  c->slots = tpu_malloc((size_t)(nsl ? nsl : 1) * sizeof *c->slots);
  c->ops = tpu_malloc((size_t)(no ? no : 1) * sizeof *c->ops);
  c->nacc = TPU_UNIT_COUNT + 2 + no * (2 + TPU_UNIT_COUNT);
  c->ndacc = 2 + no;
  if ((int64_t)(P + 1) * (c->nvars + c->nacc + 2 * nsl) > LOOP_MAX_STATE) {
    tpu_free(mark);
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
    tpu_free(mark);
    loop_cf_free(c);
    return 0;
  }
  c->period = P;
  int v = 0;
  mstate *m = &t->m;
  c->vars[v++] = &m->op_start; /* ORDER: the three kept exactly come first */
  c->vars[v++] = &m->op_end;
  c->vars[v++] = &m->op_first;
  for (int u = 0; u < TPU_UNIT_COUNT; u++) c->vars[v++] = &m->unit_free[u];
  c->vars[v++] = &m->port_free;
  c->vars[v++] = &m->barrier;
  c->vars[v++] = &m->pre;
  c->vars[v++] = &m->horizon;
  for (int l = 0; l < TPU_INSN_LANES; l++) c->vars[v++] = &m->lane_free[l];
  c->vars[v++] = &m->ici_busy_to;
  /* mstate's other fields: hbm_wait (a counter), cur_op, pre_op, op_dma (exact, in the
   * signature). A new field must be added here or there. */
  _Static_assert(sizeof(mstate) == sizeof(int64_t) * (TPU_UNIT_COUNT + 12 + TPU_INSN_LANES),
                 "mstate changed: update loop_cf_init");
  for (int s = 0, k = 0; s < t->nslots; s++)
    if (ms[s]) {
      c->slots[k++] = s;
      c->vars[v++] = &t->ready[s];
      c->vars[v++] = &t->sfree[s];
    }
  for (int j = 0; j < p->ninsns; j++)
    if (mi[j]) c->vars[v++] = &t->last_end[j];
  for (int h = 0; h < p->nhbm; h++)
    if (mh[h]) c->vars[v++] = &t->hbm_ready[h];
  assert(v == c->nvars);
  for (int o = 0, k = 0; o < p->nops; o++)
    if (mo[o]) c->ops[k++] = o;
  c->nsl = nsl;
  c->nops = no;
  tpu_free(mark);
  return 1;
}

static int bnd_push(loop_bnd *b, int64_t x) {
  if (b->nsig == b->capsig) {
    int64_t nc = b->capsig ? b->capsig * 2 : 256;
    int64_t *ns = tpu_realloc(b->sig, (size_t)nc * sizeof *ns);
    if (!ns) return 0;
    b->sig = ns;
    b->capsig = nc;
  }
  b->sig[b->nsig++] = x;
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
  b->L = L;
  b->nsig = 0;
  int ok = bnd_push(b, m->cur_op) && bnd_push(b, m->pre_op) && bnd_push(b, m->op_dma);
  for (int v = 0; ok && v < c->nvars; v++) {
    int64_t x = b->raw[v] = *c->vars[v];
    if (v < 3) ok = bnd_push(b, m->cur_op >= 0 ? x - L : 0);
    else ok = bnd_push(b, (x > L ? x : L) - L);
  }
  for (int s = 0; ok && s < c->nsl; s++) ok = bnd_push(b, t->by_dma[c->slots[s]]);
  ok = ok && bnd_push(b, (t->port_floor > L ? t->port_floor : L) - L);
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
  ok = ok && bnd_push(b, b->ntail);
  b->has_tail = !prev || prev->ntail == b->ntail;
  for (int64_t k = j; ok && b->has_tail && k < t->npi; k++)
    ok = bnd_push(b, (t->pi[2 * k] > L - 1 ? t->pi[2 * k] : L - 1) - L) && bnd_push(b, t->pi[2 * k + 1] - L);
  if (!ok) return 0;
  b->npi = t->npi;
  b->first[0] = t->npi ? t->pi[0] : 0;
  b->first[1] = t->npi ? t->pi[1] : 0;
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
 * state, and no halving of the port's list in it (its reservations before a's tail are
 * b's first ones). */
static int bnd_repeats(const tstate *t, const loop_bnd *a, const loop_bnd *b) {
  if (!a->has_tail || !b->has_tail) return 0;
  if (a->nsig != b->nsig || memcmp(a->sig, b->sig, (size_t)a->nsig * sizeof(int64_t))) return 0;
  if (b->npi < a->npi) return 0;
  if (a->npi > a->ntail) return t->pi[0] == a->first[0] && t->pi[1] == a->first[1];
  return a->npi + (b->issues - a->issues) < PORT_CAP;
}

/* Adds n more periods like the one from boundary a to boundary b (the current state). */
static tpu_status loop_skip(tstate *t, const loop_cf *c, const loop_bnd *a, const loop_bnd *b, int64_t n) {
  const int64_t delta = b->L - a->L;
  const int64_t cnt = b->npi - a->npi; /* reservations a period appends */
  const int64_t limit = ((int64_t)1 << 62) - t->m.horizon;
  if (delta > 0 && n > limit / delta)
    return TPU_FAIL(t->d, TPU_ERR_LIMIT, tpu_noloc(), "program runs longer than 2^62 cycles");
  if (cnt > 0 && n > (INT64_MAX / 4) / cnt)
    return TPU_FAIL(t->d, TPU_ERR_LIMIT, tpu_noloc(), "too many HBM port reservations to count");
  const int64_t shift = n * delta;
  /* the port: b's list holds the reservations before L (fixed from now on), then the tail
   * the next period rewrites (ntail of them). Each period freezes cnt reservations, the
   * ones the period before froze moved delta later, and leaves the tail moved delta later:
   * the list after n periods is b's up to its last frozen cnt, then those cnt for each
   * period, then the tail; the halving at PORT_CAP keeps the last `keep` of it. (The start
   * of a reservation that began before L is not carried exactly: nothing reads it, as no
   * in-step copy can run after the loop; loop_cf_init.) */
  const int64_t R = b->ntail, fixed = b->npi - R; /* b's reservations before the tail */
  int64_t total = b->npi + n * cnt, keep = total, dropped_end = -1;
  if (total > PORT_CAP) {
    int64_t first = PORT_CAP - b->npi + 1; /* the insert that finds the list full */
    int64_t r = n * cnt - first;
    keep = PORT_CAP / 2 + 1 + r % (PORT_CAP / 2);
  }
  if (cnt > 0 || shift) {
    int64_t *np = tpu_malloc((size_t)(keep ? keep : 1) * 2 * sizeof(int64_t));
    if (!np) return TPU_FAIL(t->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory timing a loop");
    for (int64_t k = total - keep - (keep < total); k < total; k++) {
      int64_t src, off = 0;
      if (k < fixed) {
        src = k;
      } else if (k < fixed + n * cnt) {
        int64_t z = k - fixed;
        src = fixed - cnt + z % cnt;
        off = (z / cnt + 1) * delta;
      } else {
        src = k - n * cnt;
        off = shift;
      }
      if (k < total - keep) {
        dropped_end = t->pi[2 * src + 1] + off; /* the last one the halving dropped */
        continue;
      }
      np[2 * (k - (total - keep))] = t->pi[2 * src] + off;
      np[2 * (k - (total - keep)) + 1] = t->pi[2 * src + 1] + off;
    }
    memcpy(t->pi, np, (size_t)keep * 2 * sizeof(int64_t));
    tpu_free(np);
    t->npi = (int)keep;
    if (dropped_end >= 0) t->port_floor = dropped_end;
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
    int64_t per = b->nev - a->nev;
    for (int64_t q = 1; q <= n && tl->nevents < TPU_TIMING_MAX_EVENTS; q++)
      for (int64_t e = 0; e < per && tl->nevents < TPU_TIMING_MAX_EVENTS; e++) {
        if (tl->nevents == t->cap_events) {
          int64_t nc = t->cap_events * 2 < TPU_TIMING_MAX_EVENTS ? t->cap_events * 2 : TPU_TIMING_MAX_EVENTS;
          tpu_event *ne = tpu_realloc(tl->events, (size_t)nc * sizeof *ne);
          if (!ne) return TPU_FAIL(t->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory recording events");
          tl->events = ne;
          t->cap_events = nc;
        }
        tpu_event ev = tl->events[a->nev + e];
        ev.start += q * delta;
        ev.end += q * delta;
        tl->events[tl->nevents++] = ev;
      }
  }
  return TPU_OK;
}

/* Runs loop instruction i: its iterations stepped until the timing repeats, then the rest
 * in closed form (above). */
static tpu_status run_loop(tstate *t, int i) {
  const tpu_insn *in = &t->p->insns[i];
  const int64_t N = in->trips;
  loop_cf c;
  memset(&c, 0, sizeof c);
  int cf = !g_loops_stepwise && N > 2;
  if (cf && !loop_cf_init(t, i, &c))
    return TPU_FAIL(t->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory timing a loop");
  const int64_t P = cf ? c.period : 0;
  cf = P > 0 && 2 * P < N;
  if (cf && !bnd_take(t, &c, &c.ring[0], NULL)) {
    loop_cf_free(&c);
    return TPU_FAIL(t->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory timing a loop");
  }
  const int64_t body = t->match[i] - i;
  tpu_status st = TPU_OK;
  for (int64_t k = 0; k < N && st == TPU_OK;) {
    if (++t->issues > MAX_ISSUES) {
      st = TPU_FAIL(t->d, TPU_ERR_LIMIT, tpu_noloc(),
                    "program runs more than %lld instructions and loop iterations; timing stopped",
                    (long long)MAX_ISSUES);
      break;
    }
    st = run_range(t, i + 1, t->match[i], k);
    k++;
    if (st != TPU_OK) break;
    if (cf && k > 1024 * P) cf = 0; /* it does not repeat: stop looking */
    if ((N - k) > LOOP_MAX_STEPPED / body && k >= 64 * (P > 0 ? P : 1) && !(cf && k + P <= N))
      st = TPU_FAIL(t->d, TPU_ERR_LIMIT, in->loc,
                    "while loop '%s': %lld iterations, and its timing does not repeat after %lld of them; "
                    "timing stopped", in->what ? in->what : "?", (long long)N, (long long)k);
    if (st != TPU_OK || !cf || k + P > N) continue;
    loop_bnd *b = &c.ring[k % (P + 1)];
    const loop_bnd *a = k >= P ? &c.ring[(k - P) % (P + 1)] : NULL;
    if (!bnd_take(t, &c, b, a)) {
      st = TPU_FAIL(t->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory timing a loop");
      break;
    }
    if (a && bnd_repeats(t, a, b)) {
      int64_t n = (N - k) / P, cnt = b->npi - a->npi;
      /* a halving in the skipped periods must drop only reservations before L */
      int halves = b->npi + n * cnt + (b->issues - a->issues) >= PORT_CAP;
      if (n > 0 && (!halves || b->ntail + (b->issues - a->issues) <= PORT_CAP / 2)) {
        st = loop_skip(t, &c, a, b, n);
        k += n * P;
        cf = 0;
        continue;
      }
    }
  }
  loop_cf_free(&c);
  return st;
}

static tpu_status run_range(tstate *t, int lo, int hi, int64_t iter) {
  for (int i = lo; i < hi;) {
    const tpu_insn *in = &t->p->insns[i];
    if (in->pmod && iter % in->pmod != in->prem) {
      i = (in->opc == TPU_ISA_LOOP || in->opc == TPU_ISA_COND) ? t->match[i] + 1 : i + 1;
      continue;
    }
    switch (in->opc) {
      case TPU_ISA_LOOP: {
        if (in->trips < 0)
          return TPU_FAIL(t->d, TPU_ERR_UNSUPPORTED, in->loc,
                          "while loop '%s': trip count unknown (its condition is not an induction "
                          "variable compared with a constant, and XLA gave no known_trip_count); timing "
                          "needs a static count: run with --mode full to take it from the values",
                          in->what ? in->what : "?");
        TPU_TRY(run_loop(t, i));
        i = t->match[i] + 1;
        continue;
      }
      case TPU_ISA_COND:
        TPU_TRY(run_cond(t, i));
        i = t->match[i] + 1;
        continue;
      case TPU_ISA_KERNEL:
        port_floor_op(t);
        t->m.pre = t->m.barrier;
        t->m.pre_op = t->m.cur_op;
        close_op(t);
        /* The kernel's fixed start cost delays its first instruction and counts in its
         * window (kernel_start). */
        t->m.barrier = t->m.horizon + kernel_start(t, in->op);
        if (in->op >= 0) {
          t->m.cur_op = in->op;
          t->m.op_start = t->m.horizon;
          t->m.op_end = t->m.barrier;
          t->m.op_first = t->m.barrier;
          t->m.op_dma = 0;
          if (!t->dry) t->tl->ops[in->op].count++;
        }
        break;
      case TPU_ISA_SYNC:
        t->m.barrier = t->m.pre = t->m.horizon;
        break;
      case TPU_ISA_WAIT:
        if ((t->p->insns[in->at].opc == TPU_ISA_ICI || t->p->insns[in->at].prefetch == 2) &&
            t->last_end[in->at] > t->m.horizon) {
          /* The chip idles until the collective (or the in-step copy) is done. */
          int64_t from = t->m.horizon > t->m.barrier ? t->m.horizon : t->m.barrier;
          int64_t idle = t->last_end[in->at] - from;
          if (idle > 0 && t->p->insns[in->at].opc == TPU_ISA_ICI) {
            if (!t->dry) t->tl->ici_wait_cycles += idle;
          } else if (idle > 0) { /* an in-step copy: the chip waits on HBM */
            t->m.hbm_wait += (double)idle;
            if (!t->dry) t->tl->spf_wait_cycles += idle;
          }
          t->m.horizon = t->last_end[in->at];
        }
        if (t->last_end[in->at] > t->m.barrier) t->m.barrier = t->last_end[in->at];
        if (t->last_end[in->at] > t->m.pre) t->m.pre = t->last_end[in->at];
        break;
      case TPU_ISA_END:
      case TPU_ISA_CASE:
      case TPU_ISA_ENDCOND:
        break;
      default:
        if (++t->issues > MAX_ISSUES)
          return TPU_FAIL(t->d, TPU_ERR_LIMIT, tpu_noloc(),
                          "program runs more than %lld instructions; timing stopped",
                          (long long)MAX_ISSUES);
        TPU_TRY(issue(t, i, iter));
    }
    i++;
  }
  return TPU_OK;
}

/* Matches loop/end and cond/case/endcond (the program was checked). */
static void match_control(const tpu_program *p, int *match) {
  int stack[256], depth = 0;
  for (int i = 0; i < p->ninsns; i++) {
    match[i] = -1;
    switch (p->insns[i].opc) {
      case TPU_ISA_LOOP:
      case TPU_ISA_COND:
        stack[depth++] = i;
        break;
      case TPU_ISA_CASE: {
        int c = stack[depth - 1];
        if (p->insns[c].opc == TPU_ISA_CASE) {
          match[c] = i;
          stack[depth - 1] = i;
        } else {
          stack[depth++] = i;
        }
        break;
      }
      case TPU_ISA_END:
        match[stack[--depth]] = i;
        break;
      case TPU_ISA_ENDCOND:
        if (p->insns[stack[depth - 1]].opc == TPU_ISA_CASE) match[stack[--depth]] = i;
        match[stack[--depth]] = i;
        break;
      default:
        break;
    }
  }
}

static tpu_status durations(tstate *t) {
  for (int i = 0; i < t->p->ninsns; i++) {
    const tpu_insn *in = &t->p->insns[i];
    int64_t c = 0;
    int64_t cores = t->chip->tensorcores > 0 ? t->chip->tensorcores : 1;
    switch (in->opc) {
      case TPU_ISA_DMA_IN:
      case TPU_ISA_DMA_OUT:
      case TPU_ISA_DMA_HBM: {
        /* an op's per-element stream costs (xbytes) spread over its transfers */
        double b = (double)in->bytes * (in->opc == TPU_ISA_DMA_HBM ? 2.0 : 1.0);
        const double moved = b;
        /* an in-step copy of a whole parameter (prefetch=2) is a plain transfer: none of
         * its reader's stream costs */
        const tpu_prog_op *o = in->op >= 0 && in->prefetch != 2 ? &t->p->ops[in->op] : NULL;
        if (o && o->xbytes > 0 && o->padded_bytes > 0) b *= 1.0 + o->xbytes / o->padded_bytes;
        /* a matmul kernel's reads stream slower than a vector kernel's on some chips (chip
         * matmul_stream_efficiency: the XLA TPU compiler's decode-shaped matmuls) */
        if (o && o->m > 0 && in->opc == TPU_ISA_DMA_IN && !in->onchip && t->chip->matmul_stream_efficiency > 0)
          b /= t->chip->matmul_stream_efficiency;
        /* a matmul's 16-bit results: their pass holds the transfer, not the port */
        const double pass = o && in->opc == TPU_ISA_DMA_OUT && o->out_scale > 1 ? o->out_scale : 1.0;
        if (in->onchip) {
          /* data that stays in VMEM: the stream costs without the transfer (docs/isa.md) */
          double x = b * pass - (double)in->bytes;
          /* a vector kernel's read of a value kept in VMEM: the part of an HBM read's cost
           * the chip's compiler charges for it (chip vmem_read_cost) */
          if (in->opc == TPU_ISA_DMA_IN) x += t->chip->vmem_read_cost * (double)in->bytes;
          c = x > 0 ? (int64_t)ceil(x / t->bpc) : 0;
          t->pdur[i] = pass > 1 ? 0 : c;
          t->gdur[i] = 0;
          break;
        }
        c = (int64_t)ceil(b / t->bpc);
        t->pdur[i] = c;
        /* the stream costs (xbytes) beyond the bytes: the kernel's transfers wait for them,
         * a prefetch may take the port meanwhile (the bytes move at the port's rate; a
         * 16-bit element's pass is the vector unit's and the transfer's, not HBM's) */
        t->gdur[i] = (int64_t)ceil(moved / t->bpc);
        if (t->gdur[i] > c) t->gdur[i] = c;
        if (pass > 1) c = (int64_t)ceil(b * pass / t->bpc);
        break;
      }
      case TPU_ISA_MATMUL:
        TPU_TRY(tpu_timing_matmul_cycles(in, t->chip, &c, t->d));
        break;
      case TPU_ISA_VPU:
      case TPU_ISA_EUP: {
        /* the VPU issues vector_ops_per_cycle register-wide operations per cycle (its ALU
         * slots), the EUP eup_pushes_per_cycle 32-bit registers (1 when the preset does not
         * say) */
        double r = in->opc == TPU_ISA_VPU ? t->chip->vector_ops_per_cycle : t->chip->eup_pushes_per_cycle;
        if (r <= 0) r = 1;
        c = (int64_t)ceil((double)in->vregs * (double)in->ops / ((double)cores * r));
        break;
      }
      case TPU_ISA_XLU:
        c = ceil_div(in->vregs * in->ops, cores);
        break;
      case TPU_ISA_ICI:
        c = in->cycles;
        break;
      default:
        break;
    }
    t->dur[i] = c;
  }
  return TPU_OK;
}

tpu_status tpu_timing_run(const tpu_program *p, const tpu_chip *chip, int record_events,
                          tpu_timeline *out, tpu_diag *d) {
  memset(out, 0, sizeof *out);
  TPU_TRY(tpu_program_check(p, d));
  if (chip->clock_hz <= 0 || chip->hbm_bw <= 0 || chip->mxu_rows <= 0 || chip->mxu_cols <= 0)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "chip '%s' lacks clock, HBM bandwidth or MXU size",
                    chip->name);
  tstate t;
  memset(&t, 0, sizeof t);
  t.p = p;
  t.chip = chip;
  t.d = d;
  t.tl = out;
  t.record = record_events;
  t.m.cur_op = t.m.pre_op = -1;
  t.bpc = tpu_chip_hbm_stream_bw(chip) / chip->clock_hz;
  double lat_s = chip->hbm_latency_s > 0 ? chip->hbm_latency_s : TPU_TIMING_DEFAULT_HBM_LATENCY_S;
  t.lat = (int64_t)llround(lat_s * chip->clock_hz);
  t.kov = chip->kernel_overhead_s > 0 ? (int64_t)llround(chip->kernel_overhead_s * chip->clock_hz) : 0;
  t.mov = chip->matmul_overhead_s > 0 ? (int64_t)llround(chip->matmul_overhead_s * chip->clock_hz) : 0;
  for (int v = 0; v < p->nvmem; v++) t.nslots += p->vmem[v].nslots;
  size_t ns = (size_t)(t.nslots ? t.nslots : 1), ni = (size_t)(p->ninsns ? p->ninsns : 1);
  t.ready = tpu_calloc(ns, sizeof(int64_t));
  t.sfree = tpu_calloc(ns, sizeof(int64_t));
  t.by_dma = tpu_calloc(ns, 1);
  t.slot0 = tpu_calloc((size_t)(p->nvmem ? p->nvmem : 1), sizeof(int));
  t.last_end = tpu_calloc(ni, sizeof(int64_t));
  t.dur = tpu_calloc(ni, sizeof(int64_t));
  t.pdur = tpu_calloc(ni, sizeof(int64_t));
  t.gdur = tpu_calloc(ni, sizeof(int64_t));
  t.match = tpu_calloc(ni, sizeof(int));
  t.hbm_ready = tpu_calloc((size_t)(p->nhbm ? p->nhbm : 1), sizeof(int64_t));
  t.op_lo = tpu_calloc((size_t)(p->nops ? p->nops : 1), sizeof(int64_t));
  t.op_hi = tpu_calloc((size_t)(p->nops ? p->nops : 1), sizeof(int64_t));
  t.op_hbm = tpu_calloc((size_t)(p->nops ? p->nops : 1), 1);
  for (int i = 0; t.op_hbm && i < p->ninsns; i++) {
    const tpu_insn *q = &p->insns[i];
    if (q->op < 0 || q->op >= p->nops) continue;
    if ((q->opc == TPU_ISA_DMA_IN || q->opc == TPU_ISA_DMA_OUT) && !q->onchip && q->hbm >= 0 && q->prefetch != 2)
      t.op_hbm[q->op] |= OP_HBM_MOVES;
    if ((q->opc == TPU_ISA_DMA_IN && !q->onchip && q->prefetch != 2) || q->opc == TPU_ISA_DMA_HBM)
      t.op_hbm[q->op] |= OP_HBM_READS; /* the transfers that wait the HBM latency (issue) */
    if (q->opc == TPU_ISA_VPU || q->opc == TPU_ISA_EUP || q->opc == TPU_ISA_XLU) t.op_hbm[q->op] |= OP_VECTOR;
  }
  t.pi = tpu_malloc((size_t)PORT_CAP * 2 * sizeof(int64_t));
  out->ops = tpu_calloc((size_t)(p->nops ? p->nops : 1), sizeof(tpu_op_stat));
  tpu_status st = TPU_OK;
  if (!t.ready || !t.sfree || !t.by_dma || !t.slot0 || !t.last_end || !t.dur || !t.pdur || !t.gdur || !t.match ||
      !t.hbm_ready || !t.op_lo || !t.op_hi || !t.op_hbm || !t.pi || !out->ops) {
    st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory starting the timing run");
    goto done;
  }
  if (record_events) {
    /* Events: one per unit instruction run; the array grows up to the cap. */
    t.cap_events = 1024;
    out->events = tpu_malloc((size_t)t.cap_events * sizeof(tpu_event));
    if (!out->events) {
      st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory for timing events");
      goto done;
    }
  }
  for (int v = 0, k = 0; v < p->nvmem; v++) {
    t.slot0[v] = k;
    k += p->vmem[v].nslots;
  }
  for (int v = 0; v < p->nvmem; v++) {
    const tpu_vmem_buf *b = &p->vmem[v];
    int64_t lo = b->offset, hi = b->offset + b->slot_bytes * b->nslots;
    if (b->op < 0 || hi <= lo) continue;
    if (t.op_lo[b->op] >= t.op_hi[b->op]) {
      t.op_lo[b->op] = lo;
      t.op_hi[b->op] = hi;
    }
    if (lo < t.op_lo[b->op]) t.op_lo[b->op] = lo;
    if (hi > t.op_hi[b->op]) t.op_hi[b->op] = hi;
  }
  match_control(p, t.match);
  st = durations(&t);
  if (st == TPU_OK) st = run_range(&t, 0, p->ninsns, 0);
  if (st != TPU_OK) goto done;
  port_floor_op(&t);
  close_op(&t);
  out->clock_hz = chip->clock_hz;
  /* A collective never waited for still ends the step. */
  out->total_cycles = t.m.horizon > t.m.unit_free[TPU_UNIT_ICI] ? t.m.horizon : t.m.unit_free[TPU_UNIT_ICI];
  out->hbm_wait_cycles = (int64_t)t.m.hbm_wait;
  if (out->hbm_wait_cycles > out->total_cycles) out->hbm_wait_cycles = out->total_cycles;
  out->nops = p->nops;
  for (int i = 0; i < p->nops; i++) {
    tpu_op_stat *s = &out->ops[i];
    const tpu_prog_op *o = &p->ops[i];
    s->name = o->name;
    s->kind = o->kind;
    s->flops = o->flops * (double)s->count;
    s->padded_flops = o->padded_flops * (double)s->count;
    int64_t dma = s->unit_cycles[TPU_UNIT_DMA_IN] + s->unit_cycles[TPU_UNIT_DMA_OUT];
    int64_t comp = 0;
    for (int u = TPU_UNIT_MXU; u <= TPU_UNIT_XLU; u++)
      if (s->unit_cycles[u] > comp) comp = s->unit_cycles[u];
    s->memory_bound = dma > comp;
    out->flops += s->flops;
    out->padded_flops += s->padded_flops;
    out->hbm_bytes += s->hbm_bytes;
  }
done:
  tpu_free(t.ready);
  tpu_free(t.sfree);
  tpu_free(t.by_dma);
  tpu_free(t.slot0);
  tpu_free(t.last_end);
  tpu_free(t.dur);
  tpu_free(t.pdur);
  tpu_free(t.gdur);
  tpu_free(t.match);
  tpu_free(t.hbm_ready);
  tpu_free(t.op_lo);
  tpu_free(t.op_hi);
  tpu_free(t.op_hbm);
  tpu_free(t.pi);
  if (st != TPU_OK) tpu_timeline_free(out);
  return st;
}
