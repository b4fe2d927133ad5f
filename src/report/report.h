/* Reports from a timing run: step metrics, roofline, breakdown, per-op profile, JSON report and Chrome trace. */
#ifndef TPU_REPORT_REPORT_H
#define TPU_REPORT_REPORT_H

#include <stdio.h>

#include "chip/chip.h"
#include "chip/timeline.h"
#include "ir/ir.h"

/* Which listed peak MFU is measured against. */
typedef enum {
  TPU_PEAK_BF16 = 0, /* float programs: bf16 MXU peak (f32 dots run as bf16 passes, so an
                        f32 dot at HIGH or HIGHEST can reach at most 1/3 or 1/6 of it) */
  TPU_PEAK_INT8      /* programs whose every dot/convolution is s8 x s8 */
} tpu_peak_kind;

const char *tpu_peak_kind_name(tpu_peak_kind k); /* "bf16", "int8" */

/* TPU_PEAK_INT8 when the module has dots/convolutions and all are s8 x s8; else BF16. */
tpu_peak_kind tpu_report_peak_kind(const tpu_module *m);

/* Where the step's cycles went, as an exclusive split that sums to the step:
 *   MXU busy     cycles with any MXU lane busy;
 *   vector busy  cycles with the vector, transcendental or transpose unit busy, MXU idle;
 *   HBM wait     cycles with no compute unit busy while data moves or is awaited: the
 *                cycles with only DMA engines busy, or the timeline's hbm_wait_cycles
 *                (compute waiting on DMA, HBM latency included) when larger, capped by
 *                the cycles with no compute unit busy;
 *   idle         the rest.
 * From the events when the timeline has all of them (fewer than TPU_TIMING_MAX_EVENTS,
 * chip/timing.h); otherwise estimated from the per-unit totals (MXU busy, then vector
 * busy, then hbm_wait_cycles, each capped by what is left of the step) and
 * `from_events` is 0. */
typedef enum { TPU_BD_MXU = 0, TPU_BD_VECTOR, TPU_BD_HBM_WAIT, TPU_BD_ICI_WAIT, TPU_BD_IDLE, TPU_BD_COUNT } tpu_bd_part;
const char *tpu_bd_part_name(tpu_bd_part p); /* "mxu_busy", "vector_busy", "hbm_wait", "idle" */

typedef struct tpu_report_metrics {
  int64_t cycles;          /* step time in core cycles */
  double clock_hz;
  double step_s;           /* cycles / clock_hz */
  double flops;            /* useful FLOPs of the step */
  double padded_flops;     /* FLOPs spent including padding to tiles */
  double padding_waste;    /* (padded - useful) / padded, 0..1; 0 when nothing was padded */
  double flops_per_s;      /* achieved: flops / step_s */
  tpu_peak_kind peak_kind;
  double peak_flops_per_s; /* the chip's listed (or derived) peak per chip */
  double mfu;              /* flops_per_s / peak, 0..1 */
  double hbm_bytes;        /* bytes moved between HBM and VMEM */
  double hbm_bw;           /* the chip's HBM bandwidth, B/s */
  double hbm_bw_used;      /* hbm_bytes / step_s, B/s */
  double ai;               /* arithmetic intensity flops / hbm_bytes, FLOP/B (inf when no bytes) */
  double ridge_ai;         /* peak / hbm_bw, FLOP/B */
  double attainable;       /* min(peak, ai * hbm_bw), FLOP/s */
  double roofline_frac;    /* flops_per_s / attainable, 0..1 */
  int memory_bound;        /* ai < ridge_ai */
  int64_t bd_cycles[TPU_BD_COUNT];
  double bd_frac[TPU_BD_COUNT];   /* bd_cycles / cycles */
  int bd_from_events;
  double unit_util[TPU_UNIT_COUNT]; /* busy[u] / cycles (units overlap; not a split) */
} tpu_report_metrics;

/* Computes the metrics of a timeline for a chip. The clock is the timeline's (the chip's
 * when the timeline has none). Fails (TPU_ERR_ARG) without a positive clock, peak or HBM
 * bandwidth, or with negative cycles; TPU_ERR_NOMEM when the event sweep cannot allocate. */
tpu_status tpu_report_metrics_compute(const tpu_timeline *t, const tpu_chip *chip, tpu_peak_kind pk,
                                      tpu_report_metrics *out, tpu_diag *d);

/* The human summary `tpusim run` prints (several lines). */
void tpu_report_print_summary(FILE *f, const tpu_report_metrics *r);
/* 1234567 -> "1.235 M" plus unit, into buf (n bytes). */
void tpu_report_si(char *buf, size_t n, double v, const char *unit);
/* s seconds as "12.3 ms", "456 us" (4 significant digits) */
void tpu_report_time(char *buf, size_t n, double s);

/* ---- Per-op profile (report/profile.c) ---- */

typedef struct tpu_profile_row {
  int op;                 /* index into tpu_timeline.ops */
  const char *name, *kind; /* borrowed from the timeline */
  int64_t count, cycles;
  double time_s;          /* cycles / clock */
  double frac;            /* of the step */
  double flops, padded_flops, hbm_bytes;
  double ai;              /* flops / hbm_bytes (inf when no bytes) */
  double flops_per_s;     /* achieved while it ran */
  double padding_waste;   /* (padded - useful) / padded, 0..1 */
  int memory_bound;       /* from the timing model: DMA time exceeded compute time */
  const struct tpu_op_source *src; /* the JAX op name and source line (NULL: unknown) */
} tpu_profile_row;

typedef struct tpu_profile {
  tpu_profile_row *rows; /* by cycles, largest first; ties by name */
  int nrows;
} tpu_profile;

tpu_status tpu_report_profile(const tpu_timeline *t, double clock_hz, tpu_profile *out, tpu_diag *d);
void tpu_profile_free(tpu_profile *p);
/* The top `top` rows as a table (all when top <= 0). */
void tpu_report_print_profile(FILE *f, const tpu_profile *p, int top);

/* ---- Files (report/report_json.c, report/trace.c) ---- */

/* What the run was, for the report header. Any field may be NULL. */
struct tpu_json_writer; /* base/json.h */
struct tpu_program;     /* chip/program.h */
typedef struct tpu_report_info {
  const char *program;   /* the HLO path */
  const char *backend;   /* "tpu" */
  const char *mode;      /* "full" or "timing" */
  const char *precision; /* "per-op", "default", "high", "highest" */
  /* Optional: writes more members into the report's top-level object (the pod section). */
  void (*extra)(void *user, struct tpu_json_writer *w);
  void *extra_user;
  /* The entry parameter the previous step prefetched on chip (xprefetch_bytes 0: none). */
  const char *xprefetch_name, *xprefetch_memory;
  double xprefetch_bytes;
  /* The compiled program, for the parameters it copies into VMEM within the step (NULL: none). */
  const struct tpu_program *prog;
} tpu_report_info;

/* The parameters program p copies into VMEM within the step (dma.in prefetch=2): how many,
 * their bytes, the largest one's HBM buffer index (-1 when none) and, when by_buffer is not
 * NULL (p->nhbm entries), each HBM buffer's copied bytes. */
int tpu_report_step_prefetch(const struct tpu_program *p, double *by_buffer, double *bytes, int *largest);

/* Sets info's cross-program prefetch from the compiled program (none when p is NULL). */
void tpu_report_info_prefetch(tpu_report_info *info, const struct tpu_program *p);

/* Writes the whole report as JSON to `path` (through a temporary file renamed into place,
 * so a failure leaves no partial file). */
tpu_status tpu_report_write_json(const char *path, const tpu_report_info *info, const tpu_chip *chip,
                                 const tpu_timeline *t, const tpu_report_metrics *r, const tpu_profile *p,
                                 tpu_diag *d);

/* Writes the timeline's events in the Chrome trace event format (a JSON object with
 * "traceEvents"; Perfetto UI and chrome://tracing open it): one track (thread) per unit
 * lane named "UNIT LANE", "X" complete events with ts/dur in microseconds, the op's name
 * and kind. Fails (TPU_ERR_ARG) when the timeline recorded no events. */
tpu_status tpu_report_write_trace(const char *path, const tpu_chip *chip, const tpu_timeline *t, tpu_diag *d);
/* The same with `extra` writing more events (tracks of its own: thread ids from 1000) into
 * traceEvents, with tpu_trace_track / tpu_trace_event. */
tpu_status tpu_report_write_trace_ex(const char *path, const tpu_chip *chip, const tpu_timeline *t,
                                     void (*extra)(void *user, struct tpu_json_writer *w, double clock_hz), void *user,
                                     tpu_diag *d);
void tpu_trace_track(struct tpu_json_writer *w, int tid, const char *name);
void tpu_trace_event(struct tpu_json_writer *w, int tid, const char *name, const char *cat, double start_us,
                     double dur_us);


#endif
