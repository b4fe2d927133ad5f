/* What a timing run produces: per-unit busy intervals, per-op statistics, totals. The
 * timing executor fills it; reports (src/report) read it. Cycles are core clock cycles. */
#ifndef TPU_CHIP_TIMELINE_H
#define TPU_CHIP_TIMELINE_H

#include <stdint.h>

#include "base/status.h"

/* The units of one TensorCore that run in parallel. ORDER UNIT. */
#define TPU_UNIT_LIST(X)                                   \
  X(MXU, "mxu", "matrix units")                            \
  X(VPU, "vpu", "vector unit")                             \
  X(EUP, "eup", "transcendental unit")                     \
  X(XLU, "xlu", "transpose/permute unit")                  \
  X(DMA_IN, "dma-in", "DMA engines, HBM to VMEM")          \
  X(DMA_OUT, "dma-out", "DMA engines, VMEM to HBM")                \
  X(ICI, "ici", "inter-chip links (collectives with other chips)")

typedef enum {
#define X(e, name, desc) TPU_UNIT_##e,
  TPU_UNIT_LIST(X)
#undef X
  TPU_UNIT_COUNT
} tpu_unit;

const char *tpu_unit_name(tpu_unit u);

/* One busy interval of one unit (lane = which MXU or DMA engine). */
typedef struct tpu_event {
  tpu_unit unit;
  int lane;
  int64_t start, end; /* cycles, end exclusive */
  int op;             /* index into tpu_timeline.ops */
} tpu_event;

/* Per top-level operation (a fused op, a dot, a copy...) of the executed program; ops
 * inside loops are counted once per iteration into the same entry. */
typedef struct tpu_op_stat {
  const char *name;        /* the HLO instruction name (owned by the program) */
  const char *kind;        /* "dot", "convolution", "fusion:kLoop", "reduce", ... */
  int64_t count;           /* times executed */
  int64_t cycles;          /* wall cycles from its first unit start to its last unit end, summed */
  int64_t unit_cycles[TPU_UNIT_COUNT]; /* busy cycles per unit */
  double flops;            /* useful FLOPs (2*M*N*K for matmuls; 1 per element op) */
  double padded_flops;     /* FLOPs the hardware spends including padding to tiles */
  double hbm_bytes;        /* bytes moved between HBM and VMEM */
  int memory_bound;        /* 1 if DMA time exceeds compute time */
  const struct tpu_op_source *src; /* where the user wrote it (report/source.h); NULL: unknown (borrowed) */
} tpu_op_stat;

typedef struct tpu_timeline {
  double clock_hz;
  int64_t total_cycles;               /* step time in cycles */
  int64_t busy[TPU_UNIT_COUNT];       /* cycles each unit (any lane) was busy */
  int64_t hbm_wait_cycles;            /* cycles compute units sat idle waiting on DMA */
  int64_t ici_wait_cycles;            /* cycles the chip waited for collectives to finish */
  int64_t spf_wait_cycles;            /* of hbm_wait_cycles: kernels waiting for in-step copies
                                       * of parameters into VMEM (dma.in prefetch=2) */
  double ici_bytes;                   /* bytes this chip sent over ICI */
  double flops, padded_flops, hbm_bytes;
  tpu_op_stat *ops;
  int nops;
  tpu_event *events;                  /* may be NULL when events were not recorded */
  int64_t nevents;
} tpu_timeline;

void tpu_timeline_free(tpu_timeline *t);
/* An events array with room for TPU_TIMING_MAX_EVENTS that a freed timeline left (the
 * caller owns it; tpu_free), or NULL: timing.c takes it when its array grows to the cap. */
tpu_event *tpu__timeline_full_events(void);

#endif
