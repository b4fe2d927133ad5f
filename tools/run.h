/* tpusim run: what the verb's files (run*.c) share: the options of one run and each file's entry points. */
#ifndef TPU_TOOLS_RUN_H
#define TPU_TOOLS_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "base/tensor.h"
#include "chip/chip.h"
#include "chip/exec.h"
#include "ir/ir.h"
#include "pod/podio.h"
#include "pod/topology.h"

#define MAX_INPUTS 4096
#define MAX_OUT_SH 4096

/* Options of one run. */
typedef struct {
  const char *prog, *outdir, *backend, *chip, *report, *trace, *mesh, *topology;
  const char *cache_dir; /* --cache-dir (NULL: the default folder) */
  int no_cache;
  const char **inputs;
  int64_t slices;
  const char **out_sh; /* MAX_OUT_SH of them (malloc'd: a process touches only those given) */
  int nout_sh;
  char *sh_text; /* --out-sharding @FILE: the file's text (out_sh points into it) */
  int ninputs, quiet, timing, precision, top, per_device, first_step, sync_collectives, no_window;
  int partitioned; /* tpusim partitioned the program (spmd-partition): the better-plan hint applies */
  uint64_t seed;
  /* where each came from: argument positions of the verb's argv (-1: not given) */
  int outdir_i, chip_i, mesh_i, topology_i, slices_i, per_device_i, prog_i;
  tpu_loc *out_sh_loc; /* MAX_OUT_SH: <command line>:N:1 or FILE:LINE:COL of @FILE's lines */
} run_opts;

/* --precision names, by run_opts.precision. */
extern const char *const tpu__run_precisions[3];

/* The better-plan hint (docs/spmd.md): the program partitioned again with tpusim's own plans
 * where they part from XLA's rule (tpu_mesh own_plans), compiled and timed as the
 * prediction is. */
typedef struct {
  int found;
  double step_s, ici_bytes;
  char *constraints; /* with_sharding_constraint lines */
} plan_hint;

/* run_args.c */
/* Parses argv; returns -1 to go on, else the exit status. */
int tpu__run_parse_args(int argc, char **argv, run_opts *o);

/* run_values.c */
/* Random values: floats uniform in [-1, 1); integers in [0, 16); pred fair coin (rng: a
 * splitmix64 state). */
tpu_status tpu__run_random_value(tpu_tensor *t, const tpu_shape *s, uint64_t *rng, tpu_diag *d);
void tpu__run_summary_stats(const tpu_tensor *t, FILE *f);
/* Writes the leaves as dir/K.npy (created here); tokens write nothing. 1 on success. */
int tpu__run_write_outputs(const char *dir, const tpu_tensor **leaves, int n, tpu_diag *d);
/* Every device's result leaves into DIR/devD/ (DIR created when missing). 1 on success. */
int tpu__run_write_per_device(const char *dir, const tpu_tensor *per_dev, int64_t ndev, tpu_diag *d);

/* run_hint.c */
/* The own plan, when it beats the prediction (step_s seconds, ici bytes each chip sends). */
void tpu__run_find_plan_hint(const run_opts *o, const tpu_chip *chip, double step_s, double ici, plan_hint *h);
void tpu__run_print_plan_hint(FILE *f, const plan_hint *h, double step_s, double ici);

/* run_timing.c */
/* tpu_chip_load through the disk cache (a loaded chip's image, keyed by its file's bytes). */
tpu_status tpu__run_chip_load(const run_opts *o, const char *name, tpu_chip *chip, tpu_diag *d);
/* Compiles and times the program, or replays a cached run with the same key. Exit status. */
int tpu__run_timing(const run_opts *o, tpu_module *m, const tpu_chip *chip, const tpu_loop_trips *trips,
                    const tpu_podio *pod);

/* run.c */
/* The phase being worked on, on a terminal only; `what` NULL clears it. */
void tpu__run_progress(const run_opts *o, const char *what);
/* The pod's topology: --topology (or the chip's default slice), times --slices. */
tpu_status tpu__run_pod_topology(const run_opts *o, const tpu_chip *chip, int64_t ndev, tpu_topology *t, int *set,
                                 tpu_diag *d);

#endif
