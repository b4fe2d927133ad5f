/* Private to the timing executor (timing.c) and its loops in closed form (timing_loop.c):
 * the machine state both step and the two entry points between them. */
#ifndef TPUSIM_CHIP_TIMING_INT_H
#define TPUSIM_CHIP_TIMING_INT_H

#include <stdint.h>

#include "chip/timing.h"

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
  int64_t op_vec;     /* the open kernel's vector cycles so far (vpu, eup, xlu) */
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
  unsigned char *op_hbm;  /* per op: OP_HBM_MOVES | OP_HBM_READS | OP_VECTOR | OP_TRANSFERS | OP_HBM_WRITES | OP_MXU_HBM | OP_HBM_LOADS | ... */
  unsigned char *op_i8;   /* per op: 1 when a matmul instruction of it takes 8-bit integers (int8_matmul_s) */
  int64_t mov;            /* extra start cost of a matmul/convolution kernel reading HBM, cycles */
  int64_t mwr;            /* extra start cost of one writing its result to HBM, cycles */
  int64_t i8s;            /* extra start cost of one of 8-bit integers, cycles */
  int64_t mbase;          /* extra start cost of every matmul/convolution kernel, cycles */
  int mres_free;          /* chip matmul_resident_no_start, unless TPUSIM_NO_MATMUL_RESIDENT_START */
  double bpc;             /* HBM bytes per cycle */
  int64_t cap_events;
  int64_t *hbm_ready;     /* per HBM buffer: completion of its latest writer (dma.out/.hbm) */
  int64_t *op_lo, *op_hi; /* per op: the VMEM address hull of its buffers (lo == hi: none) */
  double *op_moved;       /* per op: the share of its transfers' bytes that move on the port
                           * (1 less the share of its reads in place in VMEM; OP_IN_PLACE) */
  int64_t *op_res;        /* per op: the stream cycles of a vector kernel whose operands and
                           * result all stay in VMEM with no transfer: its reads (resident_cycles) */
  int64_t *op_pass;       /* per op: such a kernel's per-element stream costs, which its vector
                           * work overlaps (resident_pass_cycles) */
  int64_t *pi;            /* HBM port busy intervals [pi[2j], pi[2j+1]), sorted, disjoint */
  int npi, pcap;          /* intervals held, room for (PORT_CAP ... PORT_MAX) */
  int64_t pbase;          /* intervals dropped from the front so far (pi[0]'s place in the
                           * list of every interval kept: the closed form's count) */
  int64_t nhalve;         /* halvings so far (port_add) */
  int64_t port_floor;     /* intervals before this were dropped at a halving: treat it as busy */
  unsigned char *reach;   /* per place 0..ninsns (before instruction i runs): REACH_* below */
  int64_t flat;           /* the iteration counted over every enclosing loop (tpu_insn.pflat) */
  int wdepth;             /* while loops (loop instructions of no op) open around the instruction */
  int64_t issues;         /* instruction runs so far (a guard against runaway programs) */
  int last_spf;           /* the last in-step copy (dma.in prefetch=2), -1: none */
  unsigned char *lmark;   /* zeroed scratch for a loop's closed form: slots, insns, HBM buffers, ops */
  struct loop_cf **lcache; /* per loop instruction: its closed form's state (timing_loop.c) */
} tstate;

#define MAX_ISSUES ((int64_t)2000000000)

/* The port intervals kept for prefetches to fill gaps between. Only a prefetch reads them,
 * and it starts at or after port_dead(): an interval ending by then is dead and is dropped
 * when the list is full (nothing changes: every figure is as if it were kept). The list
 * starts with room for PORT_CAP and grows up to PORT_MAX; full of live intervals there, the
 * older half is dropped (port_floor), which can only delay a prefetch, never advance it. */
#define PORT_CAP 4096
#define PORT_MAX (1 << 20)

/* What may still run from a place in the program (tstate.reach), following loops back. */
enum {
  REACH_PRE = 1, /* a prefetch (dma.in prefetch=1) before a kernel or sync resets m.pre */
  REACH_PF = 2,  /* a prefetch at all */
  REACH_SPF = 4  /* an in-step copy (dma.in prefetch=2): it may start at the step's start */
};

/* The earliest cycle any later prefetch may start from place pos (timing.c). */
int64_t tpu__timing_port_dead(const tstate *t, int pos);

/* Cycles of one matmul instruction; hide_fill: its systolic fill and drain (R + C - 2
 * cycles) are not exposed; fold: an f32 product's bf16 passes stream as one (timing_matmul.c). */
int tpu__timing_no_int8_wload(void); /* TPUSIM_NO_INT8_WLOAD set: int8_weight_load_cycles off */
tpu_status tpu__timing_matmul_cycles(const tpu_insn *in, const tpu_chip *chip, int hide_fill, int fold,
                                     int64_t *out, tpu_diag *d);

/* Runs instructions [lo, hi) of iteration iter (timing.c). */
tpu_status tpu__timing_run_range(tstate *t, int lo, int hi, int64_t iter);
/* Runs the loop opening at instruction i, in closed form where it applies (timing_loop.c). */
tpu_status tpu__timing_run_loop(tstate *t, int i);
/* Grows the events array to room for `cap` events (at most TPU_TIMING_MAX_EVENTS; a spare
 * full one when it reaches that, tpu__timeline_full_events); 0: out of memory. */
int tpu__timing_events_grow(tstate *t, int64_t cap);
/* Frees what tpu__timing_run_loop kept for the run. */
void tpu__timing_loops_free(tstate *t);

#endif
