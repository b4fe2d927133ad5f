/* tpusim run on a module of several devices (replica_count x num_partitions > 1): global
 * inputs are cut into each device's shard by the entry parameters' shardings, the devices
 * run together (src/pod/pod.h), and results are assembled into global arrays. */
#ifndef TPU_POD_PODIO_H
#define TPU_POD_PODIO_H

#include <stdio.h>

#include "base/tensor.h"
#include "chip/chip.h"
#include "chip/exec.h"
#include "ir/ir.h"
#include "pod/pod.h"
#include "pod/sharding.h"

typedef enum {
  TPU_POD_IO_PLAIN,  /* no sharding: inputs replicated (or stacked on a new leading axis of
                      * one per device, as jax.pmap takes them); outputs stacked */
  TPU_POD_IO_SHARDED /* a sharding= attribute: global array <-> shards */
} tpu_pod_io;

typedef struct tpu_podio {
  int64_t ndev, replicas, partitions;
  int nparams;
  tpu_pod_io *in_mode;
  tpu_sharding *in_sh;   /* per parameter (when SHARDED) */
  int nout;              /* result leaves */
  tpu_pod_io *out_mode;
  tpu_sharding *out_sh;  /* per result leaf (when SHARDED) */
  const tpu_shape **out_local; /* per result leaf: the per-device shape */
} tpu_podio;

/* Reads the module's shardings and checks them against its devices and shapes (errors at
 * the attribute). XLA's compiled modules carry the parameters' shardings but not the
 * result's: `out_sh` (n strings in HLO sharding syntax, one per result leaf, or one for
 * all) gives them; else the ROOT's sharding= attribute if any; else results are stacked. */
tpu_status tpu_podio_prepare(const tpu_module *m, const char *const *out_sh, int n_out_sh, tpu_podio *pc,
                               tpu_diag *d);
void tpu_podio_free(tpu_podio *pc);

/* The global shape of parameter i for random inputs (local x tiles; replicated when plain). */
void tpu_podio_global_shape(const tpu_podio *pc, const tpu_module *m, int i, tpu_shape *out);

/* Loads the global .npy for parameter i: its dims must shard into the parameter's shape. */
tpu_status tpu_podio_load(const tpu_podio *pc, const tpu_module *m, int i, const char *path, tpu_tensor *t,
                            tpu_diag *d);

/* The global shape parameter i is checked against for an input array of rank/dims: the
 * array's own dims when they shard into the parameter (uneven shards allowed), or one row
 * per device stacked on a new leading axis for a plain parameter; else the parameter's
 * global shape (so the check names it). */
void tpu_podio_input_shape(const tpu_podio *pc, const tpu_module *m, int i, int rank, const int64_t *dims,
                           tpu_shape *out);

/* Runs every device on its shards of the global args: the chip executor when `chip` is
 * given (trips of device 0 recorded into *trips), else the reference interpreter. The
 * global result goes to *result (a tuple when the module returns one); when per_device is
 * not NULL, every device's result is also kept there (per_device[dev], freed by the caller). */
tpu_status tpu_podio_values(const tpu_podio *pc, const tpu_module *m, const tpu_chip *chip, int precision,
                              const tpu_tensor *args, int nargs, tpu_loop_trips *trips, tpu_tensor *result,
                              tpu_tensor *per_device, tpu_diag *d);

/* The same over MPI ranks (tr from tpu_mpi_transport_new): this rank runs its block of
 * devices; rank 0 receives the global result (other ranks' *result stays empty). */
tpu_status tpu_podio_values_dist(const tpu_podio *pc, const tpu_pod_transport *tr, const tpu_module *m,
                                   const tpu_chip *chip, int precision, const tpu_tensor *args, int nargs,
                                   tpu_loop_trips *trips, tpu_tensor *result, tpu_tensor *per_device, tpu_diag *d);

/* The pod's part of the timing summary: the slice's totals, the communication share and
 * one line per collective (group size, bytes each chip sends, time, bus bandwidth). */
struct tpu_program;
struct tpu_timeline;
struct tpu_pod_cost_ctx;
void tpu_podio_print(FILE *f, const tpu_podio *pc, const struct tpu_program *p, const struct tpu_timeline *tl,
                     const tpu_chip *chip, double flops_per_s, int top, const struct tpu_pod_cost_ctx *costs);

/* The report's "pod" section (a tpu_report_info extra writer; user = tpu_podio_report). */
struct tpu_json_writer;
typedef struct {
  const tpu_podio *pc;
  const struct tpu_program *p;
  const struct tpu_timeline *tl;
  const tpu_chip *chip;
  const struct tpu_pod_cost_ctx *costs;
} tpu_podio_report;
void tpu_podio_write_json(void *user, struct tpu_json_writer *w);
/* The trace's pod tracks (a tpu_report_write_trace_ex extra writer; user = tpu_podio_report). */
void tpu_podio_trace(void *user, struct tpu_json_writer *w, double clock_hz);

#endif
