/* tpusim run: parse, verify and run an HLO program on the TPU backend (values and timing) or the reference. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/sysinfo.h>
#endif

#include "compile/spmd/spmd.h"
#include "ir/collective.h"
#include "ir/verify.h"
#include "pallas.h"
#include "pod/megascale.h"
#include "pod/mpi.h"
#include "cli.h"
#include "run.h"

static double ms_between(const struct timespec *a, const struct timespec *b) {
  return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

/* Shows the phase being worked on when standard error is a terminal (a large program
 * takes a while to compile, run or time); `what` NULL clears it. Silent with --quiet and
 * when standard error is a file or pipe, so error output stays one line. */
void tpu__run_progress(const run_opts *o, const char *what) {
  if (o->quiet || !isatty(2)) return;
  if (what) fprintf(stderr, "\r\033[Ktpusim: %s ...", what);
  else fprintf(stderr, "\r\033[K");
  fflush(stderr);
}

/* While values are computed: which entry instruction (and loop iteration) the run is at,
 * with the time so far, refreshed at most ten times a second on a terminal. */
typedef struct {
  struct timespec t0, last;
} value_progress;

static double secs_between(const struct timespec *a, const struct timespec *b) {
  return (double)(b->tv_sec - a->tv_sec) + 1e-9 * (double)(b->tv_nsec - a->tv_nsec);
}

static void on_value_progress(void *user, int64_t step, int64_t nsteps, int64_t iteration) {
  value_progress *vp = user;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (secs_between(&vp->last, &now) < 0.1) return;
  vp->last = now;
  fprintf(stderr, "\r\033[Ktpusim: computing values: instruction %lld of %lld", (long long)step, (long long)nsteps);
  if (iteration > 0) fprintf(stderr, ", loop iteration %lld", (long long)iteration);
  fprintf(stderr, " (%.1f s)", secs_between(&vp->t0, &now));
  fflush(stderr);
}

/* The pod's topology: --topology (or the chip's default slice for the devices), times
 * --slices. Returns 0 when the options give none (the cost model picks the default). */
tpu_status tpu__run_pod_topology(const run_opts *o, const tpu_chip *chip, int64_t ndev, tpu_topology *t, int *set,
                                 tpu_diag *d) {
  return tpu_topology_for_run(o->topology, o->slices, chip, ndev, t, set, d);
}

/* --out-sharding: one per result leaf, or one for all; each names the module's devices.
 * Refused at the option (or its line of @FILE). */
static tpu_status check_out_shardings(const run_opts *o, const tpu_module *m, int64_t ndev, tpu_diag *d) {
  if (!o->nout_sh) return TPU_OK;
  const tpu_shape *root = &m->entry->root->shape;
  int nleaf = 0;
  const tpu_shape *stack[64];
  int sp = 0;
  const tpu_shape *leaf[MAX_OUT_SH];
  stack[sp++] = root;
  while (sp) { /* the leaves in order (a tuple's elements pushed in reverse) */
    const tpu_shape *s = stack[--sp];
    if (s->dtype == TPU_TUPLE) {
      for (int i = s->ntuple - 1; i >= 0 && sp < 64; i--) stack[sp++] = &s->elems[i];
    } else if (nleaf < MAX_OUT_SH) {
      leaf[nleaf++] = s;
    } else {
      nleaf++;
    }
  }
  if (o->nout_sh != 1 && o->nout_sh != nleaf)
    return TPU_FAIL(d, TPU_ERR_ARG, o->out_sh_loc[0],
                    "%d --out-sharding given; the result has %d leaves (give one per leaf, or one for all)", o->nout_sh,
                    nleaf);
  for (int k = 0; k < nleaf && k < MAX_OUT_SH; k++) {
    int j = o->nout_sh == 1 ? 0 : k;
    tpu_sharding sh;
    TPU_TRY(tpu_sharding_parse(o->out_sh[j], o->out_sh_loc[j], &sh, d));
    tpu_status st = TPU_OK;
    if (sh.kind != TPU_SHARD_TUPLE) {
      char what[64];
      snprintf(what, sizeof what, "result %d", k);
      st = tpu_sharding_check(&sh, leaf[k], ndev, o->out_sh_loc[j], what, d);
    }
    tpu_sharding_free(&sh);
    TPU_TRY(st);
  }
  return TPU_OK;
}

/* Bytes the host can still give (MemAvailable), or 0 when unknown. */
static uint64_t host_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  uint64_t kb = 0;
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kb) == 1) break;
    fclose(f);
  }
  if (kb) return kb * 1024;
  long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

/* Per device, the values path holds at least its parameters and its result, and about
 * 18 KB of interpreter state (measured: 1,000 and 4,000 devices of a 16-element add, max
 * RSS 22 and 77 MB). A run that needs more than the host has is refused before it starts,
 * instead of growing until the host kills it. */
#define DEVICE_OVERHEAD_BYTES (18 * 1024)

static uint64_t shape_bytes(const tpu_shape *s) {
  if (s->dtype == TPU_TUPLE) {
    uint64_t b = 0;
    for (int i = 0; i < s->ntuple; i++) b += shape_bytes(&s->elems[i]);
    return b;
  }
  int ok;
  int64_t n = tpu_dims_numel(s->rank, s->dims, &ok);
  return ok && n > 0 ? (uint64_t)n * tpu_dtype_size(s->dtype) : 0;
}

/* Half the host's free memory (sysinfo: one system call), at most 64 MB, or 0 when unknown:
 * a need within it is within MemAvailable too (free memory less the kernel's small reserves,
 * plus what it can reclaim; the cap for a container whose /proc/meminfo shows its own limit
 * where sysinfo shows the host's), so that small runs skip reading /proc/meminfo, which the
 * kernel writes out as text on every read (tens of us, a few % of a small warm run). */
static uint64_t host_surely_available(void) {
#ifdef __linux__
  struct sysinfo si;
  if (sysinfo(&si) == 0) {
    uint64_t half = (uint64_t)si.freeram * (si.mem_unit ? si.mem_unit : 1) / 2, cap = (uint64_t)64 << 20;
    return half < cap ? half : cap;
  }
#endif
  return 0;
}

static tpu_status check_host_memory(const tpu_module *m, int64_t ndev, tpu_diag *d) {
  const tpu_comp *e = m->entry;
  uint64_t per = DEVICE_OVERHEAD_BYTES + shape_bytes(&e->root->shape);
  for (int i = 0; i < e->nparams; i++) per += shape_bytes(&e->params[i]->shape);
  double need = (double)per * (double)ndev;
  if (need <= (double)host_surely_available()) return TPU_OK;
  uint64_t have = host_available();
  if (!have) return TPU_OK;
  if (need <= (double)have) return TPU_OK;
  return TPU_FAIL(d, TPU_ERR_LIMIT, e->root->loc,
                  "computing the values of %lld device(s) needs at least %.3g GB (%.3g MB each: parameters, result "
                  "and interpreter state); this host has %.3g GB available (--mode timing computes no values)",
                  (long long)ndev, need / 1e9, (double)per / 1e6, (double)have / 1e9);
}

static void opts_free(run_opts *o) {
  tpu_free(o->inputs);
  tpu_free(o->out_sh);
  tpu_free(o->out_sh_loc);
  tpu_free(o->sh_text);
}

int tpu_cli_run(int argc, char **argv) {
  tpu_chip_memo_off(); /* one chip, loaded once */
  run_opts o;
  memset(&o, 0, sizeof o);
  o.backend = "tpu";
  o.precision = -1;
  o.top = 10;
  /* the option arrays are malloc'd, not cleared: each entry is written before it is read,
   * and pages never written are never faulted in (a small warm run's start-up) */
  o.inputs = tpu_malloc(MAX_INPUTS * sizeof *o.inputs);
  o.out_sh = tpu_malloc(MAX_OUT_SH * sizeof *o.out_sh);
  o.out_sh_loc = tpu_malloc(MAX_OUT_SH * sizeof *o.out_sh_loc);
  if (!o.inputs || !o.out_sh || !o.out_sh_loc) {
    opts_free(&o);
    return tpu_cli_arg_error(-1, 0, "out of memory");
  }
  int rc = tpu__run_parse_args(argc, argv, &o);
  if (rc >= 0) {
    opts_free(&o);
    return rc;
  }
  rc = 2;
  int tpu = !strcmp(o.backend, "tpu");
  /* Under mpirun: every rank runs a block of the pod's devices; rank 0 reports. */
  int use_mpi = tpu_mpi_launched(), mpi_rank = 0, mpi_n = 1;
  tpu_pod_transport tr;
  memset(&tr, 0, sizeof tr);
  if (use_mpi) {
    tpu_diag md;
    memset(&md, 0, sizeof md);
    if (tpu_mpi_init(&mpi_rank, &mpi_n, &md) != TPU_OK) {
      tpu_cli_report_file(&md, o.prog);
      opts_free(&o);
      return 2;
    }
    if (mpi_rank > 0) {
      o.quiet = 1;
      if (!freopen("/dev/null", "w", stderr)) return 2; /* rank 0 reports the (shared) errors */
    }
  }

  tpu_diag d;
  memset(&d, 0, sizeof d);
  tpu_module *m = NULL;
  tpu_tensor *args = NULL;
  tpu_tensor result;
  memset(&result, 0, sizeof result);
  const tpu_tensor **leaves = NULL;
  int nargs = 0, nleaves = 0;
  tpu_chip chip;
  tpu_loop_trips trips;
  memset(&trips, 0, sizeof trips);
  tpu_podio pod;
  memset(&pod, 0, sizeof pod);
  tpu_tensor *per_dev = NULL;
  int64_t ndev = 1;
  struct timespec t0, t1;
  tpu_outset outs = {NULL, NULL};
  /* --out-sharding: read before anything runs, so that a malformed one is refused at its
   * argument (or line of @FILE) whatever the module's devices */
  for (int k = 0; k < o.nout_sh; k++) {
    tpu_sharding sh;
    if (tpu_sharding_parse(o.out_sh[k], o.out_sh_loc[k], &sh, &d) != TPU_OK) {
      tpu_cli_report(&d);
      goto cleanup;
    }
    tpu_sharding_free(&sh);
  }
  if (tpu_cli_parse_program(o.prog, &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK) {
    tpu_cli_report_file(&d, o.prog);
    goto cleanup;
  }
  if (tpu_megascale_present(m, NULL)) { /* one slice's program from libtpu: widened to --slices */
    int64_t per_slice = tpu_module_device_count(m);
    if (tpu_megascale_widen(m, o.slices, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK) {
      tpu_cli_report_file(&d, o.prog);
      goto cleanup;
    }
    if (!o.quiet)
      printf("multi-slice: one slice's program (%lld chips) run on %lld slices; its megascale send/recv pairs are "
             "collectives over DCN\n",
             (long long)per_slice, (long long)o.slices);
  }
  if (tpu && tpu__run_chip_load(&o, o.chip ? o.chip : "v5e", &chip, &d) != TPU_OK) {
    if (o.chip_i >= 0) tpu_cli_report_arg(&d, o.chip_i);
    else tpu_cli_report(&d);
    goto cleanup;
  }
  if (tpu && o.first_step) chip.prov[TPU_CHIP_XPREFETCH_MAX_BYTES].status = TPU_PROV_ABSENT; /* docs/timing.md */
  if (o.mesh || tpu_spmd_needed(m)) { /* sharding annotations: partition over the mesh first */
    tpu_mesh mesh;
    memset(&mesh, 0, sizeof mesh);
    int found = 0;
    tpu_status ms = o.mesh ? tpu_mesh_parse(o.mesh, &mesh, &d) : tpu_mesh_from_module(m, &mesh, &found, &d);
    if (ms != TPU_OK && o.mesh) {
      tpu_mesh_free(&mesh);
      tpu_cli_report_arg(&d, o.mesh_i);
      goto cleanup;
    }
    if (ms == TPU_OK && (o.mesh || found)) {
      tpu_mesh_configure(&mesh, tpu ? &chip : NULL, o.precision, o.no_window); /* priced for the chip */
      ms = tpu_spmd_partition(m, &mesh, &d);         /* one device: the annotations are dropped */
      o.partitioned = ms == TPU_OK;
      if (ms == TPU_OK && !o.quiet) {
        printf("spmd-partition: %lld chips (mesh", (long long)mesh.ndev);
        for (int k = 0; k < mesh.naxes; k++) printf(" %s=%lld", mesh.names[k], (long long)mesh.sizes[k]);
        int loops = 0; /* the windowed einsums it made (spmd_window.c names them) */
        for (int c = 0; c < m->ncomps; c++)
          for (int i = 0; i < m->comps[c]->ninstrs; i++) {
            const tpu_instr *x = m->comps[c]->instrs[i];
            loops += x->op == TPU_OP_WHILE && strstr(x->name, ".window.loop") != NULL;
          }
        if (loops)
          printf("); %d gather(s) or reduce-scatter(s) over every chip run as windowed einsums, as XLA's TPU compiler "
                 "does (--no-windowed-einsum: as collectives)\n",
                 loops);
        else
          printf(")\n");
      }
    }
    tpu_mesh_free(&mesh);
    if (ms != TPU_OK) {
      tpu_cli_report_file(&d, o.prog);
      goto cleanup;
    }
  }
  const tpu_comp *e = m->entry;
  ndev = tpu_module_device_count(m);
  if (check_out_shardings(&o, m, ndev, &d) != TPU_OK) {
    tpu_cli_report(&d);
    goto cleanup;
  }
  if (ndev > 1 && tpu_podio_prepare(m, o.out_sh, o.nout_sh, &pod, &d) != TPU_OK) {
    tpu_cli_report_file(&d, o.prog);
    goto cleanup;
  }
  if ((o.topology || o.slices > 1) && tpu) { /* the slices must hold the module's devices */
    tpu_topology topo;
    int set;
    if (tpu__run_pod_topology(&o, &chip, ndev, &topo, &set, &d) != TPU_OK) {
      tpu_cli_report_arg(&d, o.topology_i >= 0 ? o.topology_i : o.slices_i);
      goto cleanup;
    }
  }
  if (use_mpi && ndev > 1 && tpu_mpi_transport_new(ndev, &tr, &d) != TPU_OK) {
    tpu_cli_report_file(&d, o.prog);
    goto cleanup;
  }
  if (!o.quiet && use_mpi && ndev > 1)
    printf("mpi: %d ranks, %lld device(s) each (rank 0: devices 0..%lld)\n", mpi_n, (long long)tr.count,
           (long long)(tr.count - 1));
  if (o.per_device && ndev == 1) {
    tpu_cli_arg_error(o.per_device_i, 1, "--per-device needs a module of several devices (replica_count or "
                      "num_partitions above 1)");
    goto cleanup;
  }
  if (o.ninputs && o.ninputs != e->nparams) {
    tpu_cli_file_error(o.prog, 0, 0, "the entry computation '%s' takes %d parameters; %d inputs were given", e->name,
                       e->nparams, o.ninputs);
    goto cleanup;
  }
  if (!o.timing && ndev > 1 && tpu_pod_check_local(m, use_mpi ? tr.count : ndev, &d) != TPU_OK) {
    tpu_cli_report_file(&d, o.prog);
    goto cleanup;
  }
  if (!o.timing && check_host_memory(m, ndev, &d) != TPU_OK) {
    tpu_cli_report_file(&d, o.prog);
    goto cleanup;
  }
  if (!o.quiet) {
    printf("%s: module %s, entry %s, %d computation(s), %d input(s)%s\n", o.prog, m->name, e->name, m->ncomps,
           e->nparams, o.timing ? " (not needed: timing only)" : o.ninputs ? "" : " (random)");
    if (ndev > 1)
      printf("pod: %lld devices (%lld replica(s) x %lld partition(s)), one SPMD program\n", (long long)ndev,
             (long long)pod.replicas, (long long)pod.partitions);
  }
  if (!o.timing) {
    args = tpu_calloc((size_t)(e->nparams ? e->nparams : 1), sizeof *args);
    if (!args) {
      tpu_cli_file_error(o.prog, 0, 0, "out of memory");
      goto cleanup;
    }
    uint64_t rng = o.seed;
    for (nargs = 0; nargs < e->nparams; nargs++) {
      tpu_status st;
      if (ndev > 1) {
        tpu_shape g;
        tpu_podio_global_shape(&pod, m, nargs, &g);
        st = o.ninputs ? tpu_podio_load(&pod, m, nargs, o.inputs[nargs], &args[nargs], &d)
                       : tpu__run_random_value(&args[nargs], &g, &rng, &d);
      } else {
        st = o.ninputs ? tpu_ref_load_input(o.inputs[nargs], nargs, &e->params[nargs]->shape, &args[nargs], &d)
                       : tpu__run_random_value(&args[nargs], &e->params[nargs]->shape, &rng, &d);
      }
      if (st != TPU_OK) {
        tpu_cli_report_file(&d, o.ninputs ? o.inputs[nargs] : o.prog);
        goto cleanup;
      }
    }
    /* Values run on the module as written (the compiler then rewrites it in place). */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tpu__run_progress(&o, "computing values");
    value_progress vp;
    clock_gettime(CLOCK_MONOTONIC, &vp.t0);
    vp.last = vp.t0;
    if (!o.quiet && isatty(2)) tpu_ref_set_progress(on_value_progress, &vp);
    if (ndev > 1 && o.per_device) {
      per_dev = tpu_calloc((size_t)ndev, sizeof *per_dev);
      if (!per_dev) {
        tpu_cli_file_error(o.prog, 0, 0, "out of memory");
        goto cleanup;
      }
    }
    tpu_status st = ndev > 1 ? tpu_podio_values_dist(&pod, use_mpi ? &tr : NULL, m, tpu ? &chip : NULL, o.precision,
                                                       args, nargs, &trips, &result, per_dev, &d)
                    : tpu    ? tpu_chip_run_values_trips(m, &chip, o.precision, args, nargs, &trips, &result, &d)
                             : tpu_ref_run(m, args, nargs, &result, &d);
    tpu_ref_set_progress(NULL, NULL);
    tpu__run_progress(&o, NULL);
    if (st != TPU_OK) {
      tpu_cli_report_file(&d, o.prog);
      goto cleanup;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (mpi_rank > 0) { /* rank 0 has the results and reports */
      rc = 0;
      goto cleanup;
    }
    nleaves = tpu_tensor_count_leaves(&result);
    leaves = tpu_calloc((size_t)nleaves + 1, sizeof *leaves);
    if (!leaves) {
      tpu_cli_file_error(o.prog, 0, 0, "out of memory");
      goto cleanup;
    }
    tpu_tensor_collect_leaves(&result, leaves);
    if (!o.quiet && ndev > 1) {
      int plain = 0;
      for (int k = 0; k < pod.nout; k++) plain += pod.out_mode[k] == TPU_POD_IO_PLAIN;
      if (plain)
        printf("pod: %d result(s) have no sharding (XLA's compiled text omits it; see --out-sharding): each is "
               "stacked, one row per device\n", plain);
    }
    if (!o.quiet) {
      if (tpu)
        printf("backend tpu: chip %s (%s), precision %s; values in %.3f ms of host time\n", chip.name, chip.title,
               o.precision >= 0 ? tpu__run_precisions[o.precision] : "per-op", ms_between(&t0, &t1));
      else
        printf("backend ref: %.3f ms\n", ms_between(&t0, &t1));
    }
  } else if (!o.quiet) {
    printf("backend tpu: chip %s (%s), precision %s; timing only\n", chip.name, chip.title,
           o.precision >= 0 ? tpu__run_precisions[o.precision] : "per-op");
    char kn[128];
    const tpu_instr *u = tpu_mosaic_unknown_scalars(m, kn, sizeof kn);
    if (u) /* docs/pallas.md, "Time" */
      printf("note: %s:%d:%d: Pallas kernel '%s' is timed without its scalar operands' values (--mode timing "
             "computes none): scalar prefetch reads as zeros, a dynamic grid dimension takes a guess "
             "(docs/pallas.md); run with -i inputs to time it on their values\n",
             u->loc.file ? u->loc.file : o.prog, u->loc.line, u->loc.col, kn);
  }
  if (tpu && mpi_rank == 0) {
    int trc = tpu__run_timing(&o, m, &chip, &trips, &pod);
    if (trc != 0) {
      rc = trc;
      goto cleanup;
    }
  }
  if (o.outdir) { /* the set is written beside DIR, then swapped into place */
    int ok = tpu_outset_begin(&outs, o.outdir, &d) == TPU_OK &&
             (per_dev ? tpu__run_write_per_device(outs.tmp, per_dev, ndev, &d) : tpu__run_write_outputs(outs.tmp, leaves, nleaves, &d)) &&
             tpu_outset_commit(&outs, &d) == TPU_OK;
    if (!ok) {
      tpu_outset_abort(&outs);
      tpu_cli_report_file(&d, o.outdir);
      rc = 1;
      goto cleanup;
    }
  }
  if (!o.quiet)
    for (int i = 0; i < nleaves; i++) {
      char desc[256];
      tpu_ref_describe(leaves[i], desc, sizeof desc);
      printf("result %d: %s", i, desc);
      tpu__run_summary_stats(leaves[i], stdout);
      if (o.outdir && !per_dev) printf("  -> %s/%d.npy", o.outdir, i);
      printf("\n");
    }
  if (!o.quiet && o.outdir && per_dev)
    printf("per device: %s/dev0 ... %s/dev%lld\n", o.outdir, o.outdir, (long long)(ndev - 1));
  rc = 0;
cleanup:
  if (rc != 0 && mpi_rank == 0) { /* a failed run leaves nothing that looks like its results */
    tpu_outset_abort(&outs);
    if (o.outdir) tpu_outset_discard(o.outdir);
    if (o.report) unlink(o.report);
    if (o.trace) unlink(o.trace);
  }
  if (per_dev)
    for (int64_t k = 0; k < ndev; k++) tpu_tensor_free(&per_dev[k]);
  tpu_free(per_dev);
  tpu_podio_free(&pod);
  tpu_loop_trips_free(&trips);
  if (use_mpi) {
    tpu_mpi_transport_free(&tr);
    tpu_mpi_finalize();
  }
  tpu_free(leaves);
  tpu_tensor_free(&result);
  for (int i = 0; i < nargs; i++) tpu_tensor_free(&args[i]);
  tpu_free(args);
  tpu_module_free(m);
  opts_free(&o);
  return rc;
}
