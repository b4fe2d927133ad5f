/* The unit-level timing executor: issues each instruction when its unit is free and the
 * VMEM slots it reads (and overwrites) are ready; fills a tpu_timeline. */
#include "chip/timing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/env.h"
#include "chip/timing_int.h"

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The earliest cycle a prefetch run from place pos on may start: none reads the port's list
 * before it (an interval ending by then is dead). A prefetch starts at or after m.pre. From
 * here on m.barrier is never below min(barrier, horizon) (a kernel sets it to the horizon or
 * later, a sync to the horizon, a wait only raises it) and the horizon only grows, so m.pre,
 * which a kernel or sync sets to one of them and a wait only raises, is never below that
 * either once reset: where no prefetch can read it before a reset (REACH_PRE), the bound is
 * min(barrier, horizon). None at all to come: every interval is dead. An in-step copy to
 * come may start anywhere since the step's start: none is. The bound never goes down as the
 * run goes on. */
int64_t tpu__timing_port_dead(const tstate *t, int pos) {
  unsigned r = t->reach[pos];
  if (r & REACH_SPF) return INT64_MIN;
  if (!(r & REACH_PF)) return INT64_MAX;
  int64_t d = t->m.barrier < t->m.horizon ? t->m.barrier : t->m.horizon;
  if ((r & REACH_PRE) && t->m.pre < d) d = t->m.pre;
  return d;
}

/* Makes room for one more interval in a full list: drops the dead ones (port_dead from place
 * pos), grows the list while it is over half live, and halves it when PORT_MAX intervals are
 * all live. *j, the place the new one goes, moves with the list. Returns 0 when the new
 * interval is to be left out (it falls before a halving's floor), -1 on out-of-memory. */
static int port_room(tstate *t, int pos, int64_t s, int *j) {
  const int64_t dead = tpu__timing_port_dead(t, pos);
  int lo = 0, hi = t->npi; /* the ends increase: the dead ones are a prefix */
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (t->pi[2 * mid + 1] <= dead) lo = mid + 1;
    else hi = mid;
  }
  if (lo > 0) {
    memmove(t->pi, &t->pi[2 * lo], (size_t)(t->npi - lo) * 2 * sizeof(int64_t));
    t->npi -= lo;
    t->pbase += lo;
    *j = *j > lo ? *j - lo : 0;
  }
  if (t->npi > t->pcap / 2 && t->pcap < PORT_MAX) {
    int64_t *np = tpu_realloc(t->pi, (size_t)t->pcap * 4 * sizeof(int64_t));
    if (!np) return -1;
    t->pi = np;
    t->pcap *= 2;
  }
  if (t->npi == t->pcap) { /* PORT_MAX live intervals: drop the older half */
    int h = t->pcap / 2;
    t->port_floor = t->pi[2 * (h - 1) + 1];
    memmove(t->pi, &t->pi[2 * h], (size_t)(t->npi - h) * 2 * sizeof(int64_t));
    t->npi -= h;
    t->pbase += h;
    t->nhalve++;
    *j -= h;
    if (*j < 0) *j = 0;
    if (s < t->port_floor) return 0; /* only a prefetch could land there, and none does */
  }
  return 1;
}

/* Records [s, e) as busy on the HBM port, merging with touching neighbours; pos: the place
 * the run goes on from. Returns 0 on out-of-memory. */
static int port_add(tstate *t, int pos, int64_t s, int64_t e) {
  if (e <= s) return 1;
  int j = t->npi;
  while (j > 0 && t->pi[2 * (j - 1)] > s) j--; /* first interval starting after s */
  if (j > 0 && t->pi[2 * (j - 1) + 1] == s) { /* extends the previous one */
    t->pi[2 * (j - 1) + 1] = e;
    if (j < t->npi && t->pi[2 * j] == e) {
      t->pi[2 * (j - 1) + 1] = t->pi[2 * j + 1];
      memmove(&t->pi[2 * j], &t->pi[2 * j + 2], (size_t)(t->npi - j - 1) * 2 * sizeof(int64_t));
      t->npi--;
    }
    return 1;
  }
  if (j < t->npi && t->pi[2 * j] == e) { /* extends the next one backwards */
    t->pi[2 * j] = s;
    return 1;
  }
  if (t->npi == t->pcap) {
    int r = port_room(t, pos, s, &j);
    if (r <= 0) return r == 0;
  }
  memmove(&t->pi[2 * j + 2], &t->pi[2 * j], (size_t)(t->npi - j) * 2 * sizeof(int64_t));
  t->pi[2 * j] = s;
  t->pi[2 * j + 1] = e;
  t->npi++;
  return 1;
}

/* The earliest start >= s at which the port is idle for dur cycles. */
static int64_t port_gap(const tstate *t, int64_t s, int64_t dur) {
  if (s < t->port_floor) s = t->port_floor;
  /* the intervals are disjoint and in order, so their ends increase: skip those ending by s
   * by bisection (a prefetch of a long step searched the whole list: 30 % of its time) */
  int lo = 0, hi = t->npi;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (t->pi[2 * mid + 1] <= s) lo = mid + 1;
    else hi = mid;
  }
  for (int j = lo; j < t->npi; j++) {
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

static int64_t slot_of(const tstate *t, tpu_vref r, int64_t iter) {
  const tpu_vmem_buf *b = &t->p->vmem[r.buf];
  int64_t k = (r.div ? iter / r.div : 0) + r.off;
  return t->slot0[r.buf] + k % b->nslots;
}

enum { OP_HBM_MOVES = 1, OP_HBM_READS = 2, OP_VECTOR = 4, OP_TRANSFERS = 8, OP_HBM_WRITES = 16, OP_MXU_HBM = 32,
       OP_HBM_LOADS = 64, OP_IN_PLACE = 128 };
/* A matmul kernel whose 16-bit results pay the stream pass (out_scale) lasts at least its
 * transfers end to end: the pass holds only the result transfers, so the kernel's reads and
 * MXU work overlap it, but the XLA TPU compiler's memory-bound matmuls take their input
 * transfers plus their result transfers with the pass (bf16 [M,K] x [K,128] with 268 MB of
 * input, K = 512 ... 8192: 1,187,481 ... 705,347 cycles on v5e, the input's 612K plus a
 * result pass of 459K ... 29K, plus 9 %); the MXU work still hides behind them. */
static void port_floor_op(tstate *t) {
  int op = t->m.cur_op;
  if (op < 0) return;
  int64_t floor = 0;
  if (t->p->ops[op].out_scale > 1 && t->m.op_dma > 0) floor = t->m.op_first + t->m.op_dma;
  /* A relayout between HBM arrays (a copy or transpose that moves the lanes' dimension,
   * reading HBM itself and writing HBM) lasts at least two kernel starts (kov + lat each):
   * the XLA TPU compiler charges such a copy of a few KiB twice what a copy that keeps the
   * lanes costs (v5p: 4,312-4,646 cycles for 9 B - 16 KiB, 2,122-2,323 keeping them; v4
   * 1,277-1,400 against 639-710; bench/fidelity/families/compiled), while a large one costs
   * its transfers, which the second start overlaps (v5p f32[1024,256]: 5,860). */
  if (t->p->ops[op].relayout && t->kov > 0 &&
      (t->op_hbm[op] & (OP_HBM_LOADS | OP_HBM_WRITES)) == (OP_HBM_LOADS | OP_HBM_WRITES)) {
    int64_t two = t->m.op_start + 2 * (t->kov + t->lat);
    if (two > floor) floor = two;
  }
  /* A kernel with a least time (tpu_prog_op.min_cycles) lasts it from its start; one with a
   * least body (min_body_cycles) lasts that after the chip's fixed kernel start (kov). */
  if (t->p->ops[op].min_cycles > 0) {
    int64_t least = t->m.op_start + (int64_t)ceil(t->p->ops[op].min_cycles);
    if (least > floor) floor = least;
  }
  if (t->p->ops[op].min_body_cycles > 0) {
    int64_t least = t->m.op_start + t->kov + (int64_t)ceil(t->p->ops[op].min_body_cycles);
    if (least > floor) floor = least;
  }
  /* A vector kernel whose operands and result all stay in VMEM lasts its per-element stream
   * costs (resident_pass_cycles: its stream pass over the elements) after its start and its
   * reads from VMEM, its vector work overlapping them: the XLA TPU compiler times
   * grouped-query attention's softmax kernels over scores kept in VMEM at their start, reads
   * and stream pass alone, the exponentials' vector work hidden (v5e
   * llama_fwd_b2s512d1024h16kv4: the row sum of exp(s - max) over bf16[2,4,4,512,512] 118,424
   * cycles, the normalisation into VMEM 119,208; libtpu probes
   * bench/fidelity/probes/resident_softmax.py), while a kernel without a pass pays its vector
   * work after its reads (f32 x * scale VMEM to VMEM: bench/fidelity/probes/resident_chain.py). */
  /* A matmul kernel whose epilogue reduces its product (reduce_epilogue: attention's q.k^T
   * with the row max, exp and row sums) lasts, on a chip with epilogue_reduce_serial, at least
   * its transfers and then its vector work: the XLA TPU compiler's v5p kernels of that form
   * hide neither behind the other (nine f32-score attention shapes off the corpora, tpusim
   * timing the compiler's own programs: the overlap is 0.59-0.77 of the compiler's cycles,
   * transfers plus vector work 0.74-0.91, plus the MXU work too 0.92-1.20; v5e's overlap
   * 0.75-0.83, its sum with the MXU work 1.30-1.64; libtpu probes
   * bench/fidelity/probes/reduce_epilogue.py). The MXU work stays overlapped: adding it
   * over-charges the families' convolutions with batch-norm statistics and bf16-score
   * attention (docs/timing.md, "Reducing epilogues"). */
  if (t->chip->epilogue_reduce_serial && t->p->ops[op].reduce_epilogue && t->m.op_dma > 0) {
    int64_t least = t->m.op_first + t->m.op_dma + t->m.op_vec;
    if (least > floor) floor = least;
  }
  /* A loop kernel the compiler runs in several blocks (tpu_prog_op.blocks, chip
   * stream_block_elems) lasts at least its start, the HBM latency, its transfers at the
   * streaming rate (its bytes and per-element stream costs), one block's vector work and
   * stream_block_fill_cycles: the XLA TPU compiler's v4 kernels of x * a + b over f32 / bf16
   * [R, 1152] cost that much more than their transfers overlapping their vector work once
   * they take two blocks or more (f32 [400,1152] 9,751 cycles in 2 blocks, 1,459 over the
   * overlap), while one block costs its start, read, vector work and write end to end
   * (libtpu probes bench/fidelity/probes/loop_blocks.py, data/loop_blocks.jsonl). */
  if (t->p->ops[op].blocks > 1 && t->chip->stream_block_fill_cycles > 0) {
    const tpu_prog_op *o = &t->p->ops[op];
    const double moved = o->padded_bytes + (o->xbytes > 0 ? o->xbytes : 0);
    int64_t least = t->m.op_start + t->kov + t->lat + (int64_t)ceil(moved / t->bpc) +
                    (int64_t)ceil(t->chip->stream_block_fill_cycles);
    if (least > floor) floor = least;
  }
  if (t->op_pass && t->op_pass[op] > 0) {
    const int starts = t->p->ops[op].starts > 1 ? t->p->ops[op].starts : 1;
    int64_t least = t->m.op_first + t->op_pass[op] * starts;
    if (least > floor) floor = least;
  }
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

int tpu__timing_events_grow(tstate *t, int64_t cap) {
  tpu_timeline *tl = t->tl;
  if (cap > TPU_TIMING_MAX_EVENTS) cap = TPU_TIMING_MAX_EVENTS;
  if (cap <= t->cap_events) return 1;
  tpu_event *full = cap == TPU_TIMING_MAX_EVENTS ? tpu__timeline_full_events() : NULL;
  if (full) {
    if (tl->nevents) memcpy(full, tl->events, (size_t)tl->nevents * sizeof *full);
    tpu_free(tl->events);
    tl->events = full;
  } else {
    tpu_event *ne = tpu_realloc(tl->events, (size_t)cap * sizeof *ne);
    if (!ne) return 0;
    tl->events = ne;
  }
  t->cap_events = cap;
  return 1;
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
  if ((in->opc == TPU_ISA_DMA_IN || in->opc == TPU_ISA_DMA_HBM) && !in->onchip) done = end + t->lat;
  /* Inside a while loop's body a kernel's own HBM read, fetched ahead while the kernel
   * before it ran, is usable no earlier than the HBM latency after the kernel's barrier: the
   * XLA TPU compiler costs each kernel of a body from its own start, the first block's
   * latency included, and overlaps nothing across its kernels but its explicit copies
   * (copy-start/copy-done). Over the 224 body kernels of the families corpus' compiled scans
   * tpusim was under the compiler by a median of 328 / 760 / 883 / 887 cycles on v4 / v5e /
   * v5p / v6e (its latency 525 / 750 / 875 / 875), against 109 for straight-line kernels on
   * v5e; with the floor 129 / 110 / 83 / 67 (docs/timing.md, kernel start). */
  if (t->wdepth > 0 && pf && in->prefetch == 1 && in->opc == TPU_ISA_DMA_IN && !in->onchip && t->kov > 0 &&
      in->op >= 0 && in->op == t->m.cur_op && !t->p->ops[in->op].scalar && done < t->m.barrier + t->lat)
    done = t->m.barrier + t->lat;
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
    if (!port_add(t, idx + 1, start, start + (t->gdur[idx] < pend - start ? t->gdur[idx] : pend - start)))
      return TPU_FAIL(t->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory timing the HBM port");
  }
  if (in->opc == TPU_ISA_DMA_OUT && in->hbm >= 0) t->hbm_ready[in->hbm] = end;
  if (in->opc == TPU_ISA_DMA_HBM && in->hbm2 >= 0) t->hbm_ready[in->hbm2] = end;
  /* A matmul's one output buffer written whole by each step (store_frees: one K step,
   * schedule.c too_large_for_chip) is free again once its result's bytes have moved: the next step
   * waits for the store's transfer, not its 16-bit pass (the XLA TPU compiler's estimate of
   * a one-K-step bf16 matmul streaming both operands from HBM is its MXU work plus the
   * result's bytes at HBM bandwidth: v5e [32768,2048] x [2048,32768], 368 x 2048 x 768
   * blocks, 39,498,826 cycles; docs/timing-mxu.md). */
  int64_t sfree_end = end;
  if (in->opc == TPU_ISA_DMA_OUT && in->src[0].buf >= 0 && t->p->vmem[in->src[0].buf].store_frees &&
      t->pdur[idx] < dur)
    sfree_end = start + t->pdur[idx];
  for (int s = 0; s < TPU_INSN_MAX_SRC; s++)
    if (rs[s] >= 0 && t->sfree[rs[s]] < sfree_end) t->sfree[rs[s]] = sfree_end;
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
    if (u == TPU_UNIT_VPU || u == TPU_UNIT_EUP || u == TPU_UNIT_XLU) t->m.op_vec += dur;
  }
  if (t->dry) return TPU_OK;
  tpu_timeline *tl = t->tl;
  tl->busy[u] += busy;
  if (in->op >= 0) {
    tpu_op_stat *s = &tl->ops[in->op];
    s->unit_cycles[u] += dur;
    /* a dma.hbm from VMEM (onchip=1) writes its bytes once */
    if (is_dma && (!in->onchip || in->opc == TPU_ISA_DMA_HBM))
      s->hbm_bytes += (double)in->bytes * (in->opc == TPU_ISA_DMA_HBM && !in->onchip ? 2 : 1);
  }
  if (in->opc == TPU_ISA_ICI) tl->ici_bytes += (double)in->bytes;
  if (t->record && dur > 0) {
    if (tl->nevents == t->cap_events && t->cap_events < TPU_TIMING_MAX_EVENTS &&
        !tpu__timing_events_grow(t, t->cap_events * 2))
      return TPU_FAIL(t->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory recording events");
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
  int64_t port_floor, pbase, nhalve;
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
  s->pbase = t->pbase;
  s->nhalve = t->nhalve;
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
  t->pbase = s->pbase;
  t->nhalve = s->nhalve;
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

/* A compiled program's vector kernel whose operands and result all stay in VMEM, with no
 * transfer in its program (a producer's result kept where the next kernel reads it), still
 * pays what its transfers would have: the per-element stream costs (xbytes) and the share
 * of an HBM read the chip's compiler charges for each operand byte read from VMEM
 * (vmem_read_cost), at the HBM stream rate, as an on-chip dma.in / dma.out of the same
 * bytes does (durations). The XLA TPU compiler times such kernels so: v5e reductions of
 * bf16[8,128,768] kept in VMEM to f32[8,128] in VMEM, 13,395 cycles against 2,673 for the
 * vector work alone (docs/timing.md). */
static int64_t resident_cycles(const tstate *t, int op) {
  const tpu_prog_op *o = &t->p->ops[op];
  if (o->scalar || o->m > 0 || (t->op_hbm[op] & (OP_TRANSFERS | OP_VECTOR)) != OP_VECTOR) return 0;
  double read = o->bytes - o->out_bytes;
  double x = t->chip->vmem_read_cost * (read > 0 ? read : 0);
  return x > 0 ? (int64_t)ceil(x / t->bpc) : 0;
}

/* A resident kernel's per-element stream costs (xbytes: its stream pass over the elements,
 * ...) in cycles at the HBM stream rate; its vector work overlaps them (port_floor_op). */
static int64_t resident_pass_cycles(const tstate *t, int op) {
  const tpu_prog_op *o = &t->p->ops[op];
  if (o->scalar || o->m > 0 || (t->op_hbm[op] & (OP_TRANSFERS | OP_VECTOR)) != OP_VECTOR) return 0;
  /* A scan's window kernel (o->scan) whose input and result both stay in VMEM pays no window
   * start: the XLA TPU compiler's figure for one is below that start whatever its size (v5e /
   * v6e 2,660-2,866 cycles for the 0.5 to 4 MB scans of the families corpus between their
   * relayout copies into and out of S(1): cummin_128x8x128_ax2_rev_s32, cumsum_1000x1024_ax1_f32,
   * cummin_158x129x33_ax2_s32), where one reading VMEM and writing HBM pays it as a pool's does
   * (bench/fidelity/probes/scan_start.py, its input prefetched: v5e 3,870 cycles at f32[16,8,128]) */
  const double x = o->scan ? o->xbytes - tpu_chip_window_start(t->chip, 1) * t->bpc : o->xbytes;
  return x > 0 ? (int64_t)ceil(x / t->bpc) : 0;
}

/* Marks OP_MXU_HBM on each op whose matmul instruction reads a VMEM buffer that a transfer
 * of the same op fills from HBM (an in-step copy, prefetch=2, is not the kernel's own load):
 * the compiler charges a matmul kernel's read start when the MXU streams an operand from HBM,
 * not when only an operand of its fused vector work does (v5p, (x @ w) + (x @ w2) with x @ w
 * in HBM: the kernel adding it 2,440 cycles, the one reading x from HBM 4,537). Returns 0 when
 * out of memory. */
static int mark_mxu_hbm(tstate *t) {
  const tpu_program *p = t->p;
  if (!t->op_hbm || p->nvmem <= 0) return 1;
  int *filled = tpu_malloc((size_t)p->nvmem * sizeof(int));
  if (!filled) return 0;
  for (int v = 0; v < p->nvmem; v++) filled[v] = -1;
  for (int i = 0; i < p->ninsns; i++) {
    const tpu_insn *q = &p->insns[i];
    if (q->opc == TPU_ISA_DMA_IN && !q->onchip && q->prefetch != 2 && q->op >= 0 && q->dst.buf >= 0 &&
        q->dst.buf < p->nvmem)
      filled[q->dst.buf] = q->op;
  }
  for (int i = 0; i < p->ninsns; i++) {
    const tpu_insn *q = &p->insns[i];
    if (q->opc != TPU_ISA_MATMUL || q->op < 0 || q->op >= p->nops) continue;
    for (int k = 0; k < TPU_INSN_MAX_SRC; k++) {
      int b = q->src[k].buf;
      if (b >= 0 && b < p->nvmem && filled[b] == q->op) t->op_hbm[q->op] |= OP_MXU_HBM;
    }
  }
  tpu_free(filled);
  return 1;
}

/* The cycles between a kernel barrier and the kernel's first instruction: the chip's fixed
 * per-op cost (kernel_overhead_s; none for an op of scalars); a matmul kernel adds
 * matmul_base_s, plus matmul_overhead_s when its MXU reads an operand it loaded from HBM
 * (OP_MXU_HBM) and matmul_write_s when it writes its result to HBM, each paid on its own:
 * the compiler charges the two ends of a matmul kernel's pipeline apart (v6e bf16 [8,256] x
 * [256,768], 4,463 cycles from HBM to HBM, 2,324 from HBM to VMEM; v5e 4,034 and 4,009:
 * writing costs v6e 2,139 cycles, v5e none; bench/fidelity/probes/matmul_start.py,
 * docs/timing.md kernel start). One that reads and writes only VMEM pays matmul_base_s
 * alone (none on v6e: the compiler's v6e kernels of that kind cost their MXU work plus about
 * 1,024 cycles, 512^3 1,536, 512x512x1536 2,560, against 4,496 for a 128^3 dot between HBM
 * arrays). A vector kernel that reads nothing from HBM still waits the HBM latency's worth
 * before it starts, as one that does waits for its first block: the compiler times its smallest vector kernels alike wherever their operands live (v6e:
 * 2,116-2,164 cycles for 2-64 KiB, every operand and the result in VMEM or not; v5e
 * 1,824-1,888, v5p 2,122-2,169; docs/fidelity.md). A chip without kernel_overhead_s
 * pays neither. A matmul kernel of 8-bit integers adds int8_matmul_s (op_i8: v6e's compiler
 * starts its int8 kernels 1,195 cycles later than its bf16 ones, probes/int8_matmul.py).
 * On a chip with matmul_resident_no_start (v5e) a matmul kernel with no transfer at all
 * (its operands and its 32-bit result all stay in VMEM; a 16-bit result kept there pays its
 * stream pass as an on-chip transfer, lower.c) pays no start, only its MXU work: the XLA TPU
 * compiler's v5e kernels of an LSTM step's x @ W + h @ U + b into f32, reading the first
 * dot's result and h, U, b copied in, cost 256 cycles plus the MXU's rows (288 for [8,128] x
 * [128,512], 1,056 for [200,256] x [256,1024]), while the same kernel with a bf16 result
 * (2,121 and 4,521) or reading h from HBM pays the start (libtpu probes
 * bench/fidelity/probes/chain_dot.py). */
static int64_t kernel_start(const tstate *t, int op) {
  if (op < 0) return t->kov;
  const tpu_prog_op *o = &t->p->ops[op];
  if (o->scalar || o->dma) return 0;
  if (o->m > 0 && t->mres_free && !(t->op_hbm[op] & OP_TRANSFERS) && !(t->op_i8 && t->op_i8[op])) return 0;
  if (o->m > 0)
    return t->kov + t->mbase + ((t->op_hbm[op] & OP_MXU_HBM) ? t->mov : 0) +
           ((t->op_hbm[op] & OP_HBM_WRITES) ? t->mwr : 0) + (t->op_i8 && t->op_i8[op] ? t->i8s : 0);
  /* (a pooling window reading its input in place: its start, chip window_start_cycles,
   * is what its compiler charges beyond its kernel overhead and result, the latency in it) */
  const int lat = t->kov > 0 && (t->op_hbm[op] & (OP_VECTOR | OP_HBM_READS)) == OP_VECTOR &&
                  !(o->window && (t->op_hbm[op] & OP_IN_PLACE));
  /* (a resident kernel's reads from VMEM, op_res, are part of its start; its per-element
   * stream costs, op_pass, are not: they overlap its vector work, port_floor_op) */
  int64_t one = t->kov + (lat ? t->lat : 0) + t->op_res[op];
  return o->starts > 1 ? one * o->starts : one; /* the compiler's kernels of one op (vmem_source.c) */
}


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
    st = tpu__timing_run_range(t, k + 1, t->match[k], 0);
    if (st == TPU_OK && t->m.horizon > best_end) {
      best_end = t->m.horizon;
      best = k;
    }
  }
  t->dry = saved_dry;
  snap_restore(t, &s);
  snap_free(&s);
  if (st == TPU_OK && best >= 0) st = tpu__timing_run_range(t, best + 1, t->match[best], 0);
  return st;
}


tpu_status tpu__timing_run_range(tstate *t, int lo, int hi, int64_t iter) {
  for (int i = lo; i < hi;) {
    const tpu_insn *in = &t->p->insns[i];
    if (in->pmod && (in->pflat ? t->flat : iter) % in->pmod != in->prem) {
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
        if (in->op < 0) t->wdepth++;
        TPU_TRY(tpu__timing_run_loop(t, i));
        if (in->op < 0) t->wdepth--;
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
          t->m.op_vec = 0;
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

/* tstate.reach: what may still run from each place, found backwards over the program's
 * control flow (a loop's end goes back to its body's start or on past it, a loop may be
 * skipped, a case's branch may be taken or not) until nothing changes. A kernel or sync that
 * runs every time resets m.pre (REACH_PRE stops there). Returns 0 on out-of-memory. */
static int reach_compute(tstate *t) {
  const tpu_program *p = t->p;
  const int n = p->ninsns;
  int *head = tpu_malloc((size_t)(n ? n : 1) * sizeof *head); /* per loop end: its loop */
  if (!head) return 0;
  for (int i = 0; i < n; i++) head[i] = -1;
  for (int i = 0; i < n; i++)
    if (p->insns[i].opc == TPU_ISA_LOOP && t->match[i] > i && t->match[i] < n) head[t->match[i]] = i;
  memset(t->reach, 0, (size_t)n + 1);
  for (int changed = 1; changed;) {
    changed = 0;
    for (int i = n - 1; i >= 0; i--) {
      const tpu_insn *in = &p->insns[i];
      int succ[2] = {i + 1, -1};
      if (in->opc == TPU_ISA_LOOP || in->opc == TPU_ISA_CASE) succ[1] = t->match[i] + 1 <= n ? t->match[i] + 1 : -1;
      if (in->opc == TPU_ISA_END && head[i] >= 0) succ[1] = head[i] + 1;
      unsigned r = 0;
      for (int k = 0; k < 2; k++)
        if (succ[k] >= 0 && succ[k] <= n) r |= t->reach[succ[k]];
      if ((in->opc == TPU_ISA_KERNEL || in->opc == TPU_ISA_SYNC) && !in->pmod) r &= ~(unsigned)REACH_PRE;
      if (in->opc == TPU_ISA_DMA_IN && in->prefetch == 1) r |= REACH_PRE | REACH_PF;
      if (in->opc == TPU_ISA_DMA_IN && in->prefetch == 2) r |= REACH_SPF;
      if (r != t->reach[i]) {
        t->reach[i] = (unsigned char)r;
        changed = 1;
      }
    }
  }
  tpu_free(head);
  return 1;
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
        double b = (double)in->bytes * (in->opc == TPU_ISA_DMA_HBM && !in->onchip ? 2.0 : 1.0);
        const double moved = b;
        /* an in-step copy of a whole parameter (prefetch=2) is a plain transfer: none of
         * its reader's stream costs */
        const tpu_prog_op *o = in->op >= 0 && in->prefetch != 2 ? &t->p->ops[in->op] : NULL;
        /* A pooling window kernel reading its input in place in VMEM (OP_IN_PLACE) moves only
         * its result: its stream costs (the window's start, the result's passes) ride on the
         * result's transfers, and its reads take no cycles of the port (the XLA TPU compiler's
         * window kernel from VMEM costs its result's transfer plus its start, whatever the
         * input's size: libtpu max pools of f32[16,20,20,256] 3x3 with strides 1 and 2, the
         * same 6.5 MB input in VMEM, 14,792 and 6,453 cycles on v5e, the difference the
         * results' 5.3 and 1.3 MB; bench/fidelity/probes/pool_inplace.py). */
        const int in_place = o && o->window && (t->op_hbm[in->op] & OP_IN_PLACE);
        if (in_place && in->opc == TPU_ISA_DMA_IN) {
          t->pdur[i] = t->gdur[i] = 0;
          if (in->onchip) break;
          c = (int64_t)ceil((double)in->bytes / t->bpc); /* a small operand from HBM: its bytes */
          t->pdur[i] = t->gdur[i] = c;
          break;
        }
        if (in_place && o->xbytes > 0 && o->padded_bytes > 0)
          b *= 1.0 + o->xbytes / (o->padded_bytes * t->op_moved[in->op]);
        else if (o && o->xbytes > 0 && o->padded_bytes > 0) b *= 1.0 + o->xbytes / o->padded_bytes;
        /* A pooling window kernel that reads its input from HBM (not in place in VMEM) moves
         * its bytes slower than the stream rate (chip window_hbm_factor): libtpu max and sum
         * pools of f32 [8..32, 28..112, 28..112, 128..512] read from HBM cost the compiler
         * 1.13-1.32 times their transfers beyond tpusim's other costs on v5p once its input
         * windows' halo re-reads are taken out (bench/fidelity/probes/pool_relayout.py) */
        if (o && o->window && !o->scan && !in_place && !in->onchip && t->chip->window_hbm_factor > 1 &&
            (in->opc == TPU_ISA_DMA_IN || in->opc == TPU_ISA_DMA_OUT))
          b += moved * (t->chip->window_hbm_factor - 1.0);
        /* a matmul kernel's reads stream slower than a vector kernel's on some chips (chip
         * matmul_stream_efficiency: the XLA TPU compiler's decode-shaped matmuls) */
        if (o && o->m > 0 && in->opc == TPU_ISA_DMA_IN && !in->onchip && t->chip->matmul_stream_efficiency > 0)
          b /= t->chip->matmul_stream_efficiency;
        /* a matmul's 16-bit results: their pass holds the transfer, not the port. A chip
         * whose matmul results have a pass of their own (result_pass_bytes, measured on
         * results written to HBM: v6e) pays it only there: one kept in VMEM pays none (v6e,
         * families corpus tune split --compiled, median / p90 20.0 / 72.3 % -> 18.8 / 68.2 %).
         * Elsewhere the pass is the vector kernels' and a result kept in VMEM pays it too
         * (v5e, test_vmem matmul_result_on_chip). */
        const int kept = in->onchip && t->chip->result_pass_bytes > 0;
        const double pass = o && in->opc == TPU_ISA_DMA_OUT && o->out_scale > 1 && !kept ? o->out_scale : 1.0;
        if (in->onchip && in->opc != TPU_ISA_DMA_HBM) {
          /* data that stays in VMEM: the stream costs without the transfer (docs/isa.md) */
          double x = b * pass - (double)in->bytes;
          /* a vector kernel's read of a value kept in VMEM: the part of an HBM read's cost
           * the chip's compiler charges for it (chip vmem_read_cost) */
          if (in->opc == TPU_ISA_DMA_IN && !(o && (o->window || o->copy_out)))
            x += t->chip->vmem_read_cost * (double)in->bytes;
          /* a vector kernel's write into VMEM for the program's own copy out: the share of
           * an HBM write the chip's compiler charges for it (chip vmem_write_cost) */
          if (in->opc == TPU_ISA_DMA_OUT && o && o->vmem_write) x += t->chip->vmem_write_cost * (double)in->bytes;
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
      case TPU_ISA_MATMUL: {
        /* A chip with mxu_fill_hidden runs a matmul kernel that moves nothing to or from HBM
         * (its operands and result all kept in VMEM) with its instructions back to back, the
         * systolic fill and drain of each overlapping the next one's rows: its compiler times
         * such kernels at the rows they stream plus a fixed start (v6e: bf16 [8,480] x
         * [480,20] 1,036 cycles, [2048,256] x [256,256] 1,536, [1024,512] x [512,512] 2,048,
         * whether tpusim cuts it into one matmul instruction or two; docs/timing.md, MXU).
         * A kernel streaming from HBM waits for each block and exposes them. */
        const int hide = t->chip->mxu_fill_hidden && in->op >= 0 && !(t->op_hbm[in->op] & OP_HBM_MOVES);
        /* A Pallas kernel's f32 matmul is the MXU's own f32 instruction: libtpu's bundles of
         * the guide's kernel with f32 blocks of 128^3 on v5e (bench/pallas/pipeline_bundles.py
         * method) hold 4 vmatmul.f32 and the same 4 vpop on MXU 0 as its bf16 kernel, the
         * passes run inside the MXU and drained once: they fold into one product. (XLA's
         * kernels keep passes x the tile model, calibrated on the compiler's estimates.) */
        const int fold = in->op >= 0 && t->p->ops[in->op].kind && !strncmp(t->p->ops[in->op].kind, "pallas:", 7);
        TPU_TRY(tpu__timing_matmul_cycles(in, t->chip, hide, fold, &c, t->d));
        /* A grouped convolution's kernel takes at least conv_group_step_cycles per step: one
         * output position's batch (a register's 8 sublanes) for one group, whatever the
         * group's features (8 to 64) and window (1x1 or 3x3), f32 or bf16 (the XLA TPU
         * compiler's grouped emitter; docs/timing.md, MXU). */
        if (in->steps > 0 && t->chip->conv_group_step_cycles > 0) {
          double g = (double)in->steps * t->chip->conv_group_step_cycles;
          if (g > (double)c) c = (int64_t)ceil(g);
        }
        /* the least time the lowering set (an input-dilated convolution's emitter) */
        if (in->min_cycles > c) c = in->min_cycles;
        break;
      }
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
  double lat_s = tpu_timing_hbm_latency_s(chip);
  t.lat = (int64_t)llround(lat_s * chip->clock_hz);
  t.kov = chip->kernel_overhead_s > 0 ? (int64_t)llround(chip->kernel_overhead_s * chip->clock_hz) : 0;
  t.mov = chip->matmul_overhead_s > 0 ? (int64_t)llround(chip->matmul_overhead_s * chip->clock_hz) : 0;
  t.mwr = chip->matmul_write_s > 0 ? (int64_t)llround(chip->matmul_write_s * chip->clock_hz) : 0;
  t.mbase = chip->matmul_base_s > 0 ? (int64_t)llround(chip->matmul_base_s * chip->clock_hz) : 0;
  t.mres_free = chip->matmul_resident_no_start > 0 && !tpu_env_flag("TPUSIM_NO_MATMUL_RESIDENT_START");
  t.i8s = chip->int8_matmul_s > 0 ? (int64_t)llround(chip->int8_matmul_s * chip->clock_hz) : 0;
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
  t.op_i8 = tpu_calloc((size_t)(p->nops ? p->nops : 1), 1);
  t.op_res = tpu_calloc((size_t)(p->nops ? p->nops : 1), sizeof(int64_t));
  t.op_pass = tpu_calloc((size_t)(p->nops ? p->nops : 1), sizeof(int64_t));
  for (int i = 0; t.op_hbm && i < p->ninsns; i++) {
    const tpu_insn *q = &p->insns[i];
    if (q->op < 0 || q->op >= p->nops) continue;
    if ((q->opc == TPU_ISA_DMA_IN || q->opc == TPU_ISA_DMA_OUT) && !q->onchip && q->hbm >= 0 && q->prefetch != 2)
      t.op_hbm[q->op] |= OP_HBM_MOVES;
    if ((q->opc == TPU_ISA_DMA_IN && !q->onchip && q->prefetch != 2) || (q->opc == TPU_ISA_DMA_HBM && !q->onchip))
      t.op_hbm[q->op] |= OP_HBM_READS; /* the transfers that wait the HBM latency (issue) */
    if ((q->opc == TPU_ISA_DMA_OUT && !q->onchip && q->hbm >= 0) || q->opc == TPU_ISA_DMA_HBM)
      t.op_hbm[q->op] |= OP_HBM_WRITES;
    if ((q->opc == TPU_ISA_DMA_IN && !q->onchip && q->hbm >= 0 && !q->prefetch) || (q->opc == TPU_ISA_DMA_HBM && !q->onchip))
      t.op_hbm[q->op] |= OP_HBM_LOADS; /* reads HBM itself (not a copy made before it starts) */
    if (q->opc == TPU_ISA_VPU || q->opc == TPU_ISA_EUP || q->opc == TPU_ISA_XLU) t.op_hbm[q->op] |= OP_VECTOR;
    if (t.op_i8 && q->opc == TPU_ISA_MATMUL && (q->dtype == TPU_S8 || q->dtype == TPU_U8)) t.op_i8[q->op] = 1;
    if (q->opc == TPU_ISA_DMA_IN || q->opc == TPU_ISA_DMA_OUT || q->opc == TPU_ISA_DMA_HBM) t.op_hbm[q->op] |= OP_TRANSFERS;
  }
  /* a window kernel whose reads are mostly of VMEM (its input kept there: a cross-program
   * prefetch or a producer's result), not HBM: OP_IN_PLACE (durations) */
  double *rd = tpu_calloc((size_t)(p->nops ? p->nops : 1) * 3, sizeof(double));
  t.op_moved = tpu_calloc((size_t)(p->nops ? p->nops : 1), sizeof(double));
  for (int i = 0; rd && i < p->ninsns; i++) {
    const tpu_insn *q = &p->insns[i];
    if (q->op < 0 || q->op >= p->nops || q->prefetch == 2) continue;
    if (q->opc == TPU_ISA_DMA_IN) rd[3 * q->op + (q->onchip ? 1 : 0)] += (double)q->bytes;
    if (q->opc == TPU_ISA_DMA_OUT) rd[3 * q->op + 2] += (double)q->bytes;
  }
  for (int o = 0; rd && t.op_moved && t.op_hbm && o < p->nops; o++) {
    const double all = rd[3 * o] + rd[3 * o + 1] + rd[3 * o + 2];
    if (!p->ops[o].window || rd[3 * o + 1] <= rd[3 * o] || all <= rd[3 * o + 1]) continue;
    t.op_hbm[o] |= OP_IN_PLACE;
    t.op_moved[o] = 1.0 - rd[3 * o + 1] / all;
  }
  tpu_free(rd);
  const int mxu_marked = mark_mxu_hbm(&t);
  for (int o = 0; t.op_hbm && t.op_res && o < p->nops; o++) t.op_res[o] = resident_cycles(&t, o);
  for (int o = 0; t.op_hbm && t.op_pass && o < p->nops; o++) t.op_pass[o] = resident_pass_cycles(&t, o);
  t.pi = tpu_malloc((size_t)PORT_CAP * 2 * sizeof(int64_t));
  t.pcap = PORT_CAP;
  t.reach = tpu_calloc(ni + 1, 1);
  t.lmark = tpu_calloc((size_t)t.nslots + (size_t)p->ninsns + (size_t)p->nhbm + (size_t)p->nops + 1, 1);
  t.last_spf = -1;
  for (int i = 0; i < p->ninsns; i++)
    if (p->insns[i].opc == TPU_ISA_DMA_IN && p->insns[i].prefetch == 2) t.last_spf = i;
  out->ops = tpu_calloc((size_t)(p->nops ? p->nops : 1), sizeof(tpu_op_stat));
  tpu_status st = TPU_OK;
  if (!t.ready || !t.sfree || !t.by_dma || !t.slot0 || !t.last_end || !t.dur || !t.pdur || !t.gdur || !t.match ||
      !t.hbm_ready || !t.op_lo || !t.op_hi || !t.op_hbm || !t.op_moved || !t.op_res || !t.op_pass || !t.pi || !t.reach || !t.lmark || !out->ops ||
      !mxu_marked) {
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
  if (!reach_compute(&t)) {
    st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory starting the timing run");
    goto done;
  }
  st = durations(&t);
  if (st == TPU_OK) st = tpu__timing_run_range(&t, 0, p->ninsns, 0);
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
  tpu_free(t.op_i8);
  tpu_free(t.op_moved);
  tpu_free(t.op_res);
  tpu_free(t.op_pass);
  tpu_free(t.pi);
  tpu_free(t.reach);
  tpu_free(t.lmark);
  tpu__timing_loops_free(&t);
  if (st != TPU_OK) tpu_timeline_free(out);
  return st;
}
