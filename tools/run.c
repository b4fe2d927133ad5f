/* tpusim run: parse, verify and run an HLO program on the TPU backend (values and timing) or the reference. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/diskcache.h"
#include "base/alloc.h"
#include "base/file.h"
#include "base/json.h"
#include "base/npy.h"
#include "base/strbuf.h"
#include "chip/exec.h"
#include "chip/program.h"
#include "chip/timing.h"
#include "mosaic/mosaic.h"
#include "cli.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "pallas.h"
#include "ir/verify.h"
#include "ref/ref.h"
#include "report/report.h"
#include "report/source.h"
#include "ir/collective.h"
#include "compile/spmd/spmd.h"
#include "pod/cost.h"
#include "pod/topology.h"
#include "pod/megascale.h"
#include "pod/mpi.h"
#include "pod/podio.h"
#include "pod/sharding.h"
#include <inttypes.h>

#define MAX_INPUTS 4096
#define MAX_OUT_SH 4096

static void usage(FILE *f) {
  fprintf(f,
          "usage: tpusim run PROG.hlo [-i IN.npy]... [-o DIR] [--backend tpu|ref] [--chip NAME|FILE]\n"
          "                 [--precision default|high|highest] [--mode full|timing]\n"
          "                 [--report R.json] [--trace T.json] [--top N] [--seed N] [--per-device] [--quiet]\n"
          "\n"
          "Runs the entry computation of an HLO module (as JAX's as_text(dialect=\"hlo\") prints it).\n"
          "  -i IN.npy      one per entry parameter, in parameter order; the dtype must match\n"
          "                 (a float32 array is accepted for a bf16, f16 or float8 parameter and\n"
          "                 rounded to nearest even); a 0-d array gives a scalar\n"
          "  -o DIR         write each leaf of the result as DIR/0.npy, DIR/1.npy, ... (bf16 and\n"
          "                 float8 as float32)\n"
          "  --backend tpu  (default) compile for the chip, compute values with TPU numerics (MXU\n"
          "                 passes for dots and convolutions) and time the program per unit\n"
          "  --backend ref  the reference interpreter (the semantics spec); no timing\n"
          "  --chip C       a chip preset name or chip JSON file (default v5e; see tpusim chips)\n"
          "  --precision P  run every f32 dot/convolution at P (default: each op's operand_precision)\n"
          "  --mode timing  cycles only: no values, no inputs, no result files (same cycles as full)\n"
          "  --first-step   time a first step: no parameter prefetched on chip by a previous step (by\n"
          "                 default a step is one of a loop, its largest matmul parameter prefetched)\n"
          "  --sync-collectives  each chip waits at every collective where the program places it (by\n"
          "                 default a collective starts once its operands are ready and overlaps the\n"
          "                 compute up to the first use of its result, as XLA's TPU scheduler arranges)\n"
          "  --report FILE  write the metrics, breakdown and per-op profile as JSON\n"
          "  --trace FILE   write the unit timeline in the Chrome trace format (Perfetto, chrome://tracing)\n"
          "  --top N        ops listed in the printed profile (default 10; 0 for all)\n"
          "  --seed N       with no -i, inputs are random and reproducible from N (default 0)\n"
          "  --topology T   the slice the module's chips form: 4x4x8, 2x4, or a slice name (v5p-128,\n"
          "                 v5e-256); default: the chip's usual slice for the module's devices\n"
          "  --slices K     K such slices joined by the data-center network (DCN bandwidth from the chip)\n"
          "  --mesh N=S,... the device mesh for a program with sharding annotations (JAX's lowered HLO\n"
          "                 carries its own); tpusim partitions it over the mesh's chips (docs/spmd.md)\n"
          "  --no-windowed-einsum  gather and reduce-scatter over every chip where the chip's XLA\n"
          "                 compiler passes a dot's operand or partial sums round a ring (v4, v5e, v5p\n"
          "                 slices of 8 to 16 or 32 chips; docs/spmd.md)\n"
          "  --per-device   (modules of several devices) write each device's result as DIR/devD/K.npy\n"
          "                 instead of the global arrays\n"
          "  --out-sharding S  the sharding of the result (HLO syntax, e.g. '{devices=[2,4]<=[8]}'), once\n"
          "                 per result leaf or once for all: XLA's compiled modules do not print it;\n"
          "                 @FILE reads one per line\n"
          "Modules with replica_count x num_partitions > 1 run every device (the pod): -i takes global\n"
          "arrays, cut into shards by each parameter's sharding= (without one: the same array for\n"
          "every device, or one row per device when it has an extra leading axis of that size);\n"
          "results are assembled by --out-sharding or the ROOT's sharding= (without either: stacked,\n"
          "one row per device).\n"
          "  --cache-dir D  keep what compiling and timing produced in folder D (default\n"
          "                 $TPUSIM_CACHE_DIR, else $XDG_CACHE_HOME/tpusim or ~/.cache/tpusim; bound\n"
          "                 $TPUSIM_CACHE_MAX_MB, default 1024): a later run of the same program with\n"
          "                 the same settings and build reuses it, with identical output\n"
          "  --no-cache     neither read nor write that cache (also: TPUSIM_CACHE=0)\n"
          "  --quiet        print nothing on success\n"
          "Exit status: 0 success, 2 bad program, input or option (one line on stderr), 1 cannot\n"
          "write results.\n");
}

/* splitmix64: a small, reproducible generator for random inputs. */
static uint64_t next_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Random values: floats uniform in [-1, 1); integers in [0, 16); pred fair coin. Small
 * integers keep random indices (gather, dynamic-slice) meaningful. */
static tpu_status random_value(tpu_tensor *t, const tpu_shape *s, uint64_t *rng, tpu_diag *d) {
  if (s->dtype == TPU_TUPLE) {
    TPU_TRY(tpu_tensor_alloc_tuple(t, s->ntuple, d));
    for (int i = 0; i < s->ntuple; i++) {
      tpu_status st = random_value(&t->elems[i], &s->elems[i], rng, d);
      if (st != TPU_OK) {
        tpu_tensor_free(t);
        return st;
      }
    }
    return TPU_OK;
  }
  if (s->dtype == TPU_TOKEN) {
    memset(t, 0, sizeof *t);
    t->dtype = TPU_TOKEN;
    return TPU_OK;
  }
  TPU_TRY(tpu_tensor_alloc(t, s->dtype, s->rank, s->dims, d));
  int64_t n = tpu_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = next_rand(rng);
    if (tpu_dtype_is_float(s->dtype)) tpu_tensor_set_f64(t, i, (double)(r >> 11) * 0x1p-52 - 1.0);
    else if (tpu_dtype_is_complex(s->dtype)) { /* both parts uniform in [-1, 1) */
      tpu_tensor parts = *t;
      parts.dtype = tpu_dtype_complex_part(s->dtype);
      tpu_tensor_set_f64(&parts, 2 * i, (double)(r >> 11) * 0x1p-52 - 1.0);
      tpu_tensor_set_f64(&parts, 2 * i + 1, (double)(next_rand(rng) >> 11) * 0x1p-52 - 1.0);
    }
    else if (s->dtype == TPU_PRED) tpu_tensor_set_i64(t, i, (int64_t)(r & 1));
    else tpu_tensor_set_i64(t, i, (int64_t)(r % 16));
  }
  return TPU_OK;
}

static void summary_stats(const tpu_tensor *t, FILE *f) {
  int64_t n = tpu_tensor_numel(t);
  if (t->dtype == TPU_TOKEN || n == 0) return;
  if (tpu_dtype_is_complex(t->dtype)) { /* moduli */
    tpu_tensor parts = *t;
    parts.dtype = tpu_dtype_complex_part(t->dtype);
    double mx = 0, sum = 0;
    int64_t nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
      double v = hypot(tpu_tensor_get_f64(&parts, 2 * i), tpu_tensor_get_f64(&parts, 2 * i + 1));
      if (!isfinite(v)) {
        nonfinite++;
        continue;
      }
      mx = v > mx ? v : mx;
      sum += v;
    }
    if (n > nonfinite) fprintf(f, "  |z| max %.6g  mean %.6g", mx, sum / (double)(n - nonfinite));
    if (nonfinite) fprintf(f, "  non-finite %lld", (long long)nonfinite);
    return;
  }
  if (tpu_dtype_is_float(t->dtype)) {
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    int64_t nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
      double v = tpu_tensor_get_f64(t, i);
      if (!isfinite(v)) {
        nonfinite++;
        continue;
      }
      mn = v < mn ? v : mn;
      mx = v > mx ? v : mx;
      sum += v;
    }
    if (n > nonfinite) fprintf(f, "  min %.6g  max %.6g  mean %.6g", mn, mx, sum / (double)(n - nonfinite));
    if (nonfinite) fprintf(f, "  non-finite %lld", (long long)nonfinite);
  } else {
    int64_t mn = INT64_MAX, mx = INT64_MIN;
    for (int64_t i = 0; i < n; i++) {
      int64_t v = tpu_tensor_get_i64(t, i);
      mn = v < mn ? v : mn;
      mx = v > mx ? v : mx;
    }
    fprintf(f, "  min %lld  max %lld", (long long)mn, (long long)mx);
  }
}

/* mkdir -p: creates dir and any missing parents; 0 on success, else errno is set. */
static int mkdir_p(const char *dir) {
  char buf[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(buf, dir, n + 1);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
  struct stat st;
  if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

/* Writes the leaves as dir/K.npy (dir is the result set's temporary folder, or a devD/ in
 * it; created here); tokens write nothing. */
static int write_outputs(const char *dir, const tpu_tensor **leaves, int n, tpu_diag *d) {
  if (mkdir_p(dir) != 0) {
    TPU_FAIL(d, TPU_ERR_IO, tpu_loc_at(dir, 0, 0), "cannot create the output directory: %s", strerror(errno));
    return 0;
  }
  size_t plen = strlen(dir) + 32;
  char *path = tpu_malloc(plen);
  if (!path) {
    TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
    return 0;
  }
  int k;
  for (k = 0; k < n; k++) {
    snprintf(path, plen, "%s/%d.npy", dir, k);
    if (leaves[k]->dtype == TPU_TOKEN) continue;
    if (tpu_npy_write(path, leaves[k], d) != TPU_OK) break;
  }
  tpu_free(path);
  return k == n;
}

/* Every device's result leaves into DIR/devD/ (DIR created when missing). */
static int write_per_device(const char *dir, const tpu_tensor *per_dev, int64_t ndev, tpu_diag *d) {
  if (mkdir_p(dir) != 0) {
    TPU_FAIL(d, TPU_ERR_IO, tpu_loc_at(dir, 0, 0), "cannot create the output directory: %s", strerror(errno));
    return 0;
  }
  size_t plen = strlen(dir) + 32;
  char *path = tpu_malloc(plen);
  int ok = path != NULL;
  if (!ok) TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  for (int64_t k = 0; ok && k < ndev; k++) {
    int n = tpu_tensor_count_leaves(&per_dev[k]);
    const tpu_tensor **leaves = tpu_calloc((size_t)n + 1, sizeof *leaves);
    if (!leaves) {
      TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
      ok = 0;
      break;
    }
    tpu_tensor_collect_leaves(&per_dev[k], leaves);
    snprintf(path, plen, "%s/dev%lld", dir, (long long)k);
    ok = write_outputs(path, leaves, n, d);
    tpu_free(leaves);
  }
  tpu_free(path);
  return ok;
}

/* Options of one run. */
typedef struct {
  const char *prog, *outdir, *backend, *chip, *report, *trace, *mesh, *topology;
  const char *cache_dir; /* --cache-dir (NULL: the default folder) */
  int no_cache;
  const char **inputs;
  int64_t slices;
  const char *out_sh[MAX_OUT_SH];
  int nout_sh;
  char *sh_text; /* --out-sharding @FILE: the file's text (out_sh points into it) */
  int ninputs, quiet, timing, precision, top, per_device, first_step, sync_collectives, no_window;
  int partitioned; /* tpusim partitioned the program (spmd-partition): the better-plan hint applies */
  uint64_t seed;
  /* where each came from: argument positions of the verb's argv (-1: not given) */
  int outdir_i, chip_i, mesh_i, topology_i, slices_i, per_device_i, prog_i;
  tpu_loc out_sh_loc[MAX_OUT_SH]; /* <command line>:N:1 or FILE:LINE:COL of @FILE's lines */
} run_opts;

static const char *const k_precisions[] = {"default", "high", "highest"};

/* --out-sharding @FILE: each non-empty line is one result's sharding. */
static int read_shardings(const char *path, run_opts *o) {
  FILE *f = fopen(path, "rb");
  if (!f) return tpu_cli_file_error(path, 0, 0, "cannot read the shardings file: %s", strerror(errno));
  tpu_free(o->sh_text);
  size_t cap = 4096, n = 0;
  o->sh_text = tpu_malloc(cap);
  for (int c; o->sh_text && (c = fgetc(f)) != EOF;) {
    if (n + 2 > cap) {
      char *nt = tpu_realloc(o->sh_text, cap *= 2);
      if (!nt) tpu_free(o->sh_text);
      o->sh_text = nt;
      if (!nt) break;
    }
    o->sh_text[n++] = (char)c;
  }
  fclose(f);
  if (!o->sh_text) return tpu_cli_file_error(path, 0, 0, "out of memory reading the shardings file");
  o->sh_text[n] = 0;
  if (strlen(o->sh_text) != n) {
    size_t at = strlen(o->sh_text);
    int line = 1, col = 1;
    for (size_t k = 0; k < at; k++) {
      if (o->sh_text[k] == '\n') line++, col = 1;
      else col++;
    }
    return tpu_cli_file_error(path, line, col, "a NUL byte: a shardings file is text");
  }
  int lineno = 0;
  for (char *line = o->sh_text, *next; line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    lineno++;
    int col = 1;
    while (*line == ' ' || *line == '\t' || *line == '\r') line++, col++;
    size_t len = strlen(line);
    while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t')) line[--len] = 0;
    if (!*line) continue;
    if (o->nout_sh == MAX_OUT_SH) return tpu_cli_file_error(path, lineno, col, "more than %d shardings", MAX_OUT_SH);
    o->out_sh_loc[o->nout_sh] = tpu_loc_at(path, lineno, col);
    o->out_sh[o->nout_sh++] = line;
  }
  return 0;
}

/* Options that take a value (so that one given last reads as missing its value). */
static int takes_value(const char *a) {
  static const char *const k[] = {"-i", "-o", "--backend", "--chip", "--report", "--trace", "--precision", "--mode",
                                  "--seed", "--top", "--out-sharding", "--topology", "--slices", "--mesh",
                                  "--cache-dir"};
  for (size_t j = 0; j < sizeof k / sizeof k[0]; j++)
    if (!strcmp(a, k[j])) return 1;
  return 0;
}

/* Parses argv; returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, run_opts *o) {
  int backend_i = -1, mode_i = -1;
  o->outdir_i = o->chip_i = o->mesh_i = o->topology_i = o->slices_i = o->per_device_i = o->prog_i = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int has_next = i + 1 < argc;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "-i") && has_next) {
      if (o->ninputs == MAX_INPUTS) return tpu_cli_arg_error(i, 1, "more than %d inputs", MAX_INPUTS);
      o->inputs[o->ninputs++] = argv[++i];
    } else if (!strcmp(a, "-o") && has_next) {
      o->outdir = argv[++i];
      o->outdir_i = i;
    } else if (!strcmp(a, "--backend") && has_next) {
      o->backend = argv[++i];
      backend_i = i;
    } else if (!strcmp(a, "--chip") && has_next) {
      o->chip = argv[++i];
      o->chip_i = i;
    } else if (!strcmp(a, "--report") && has_next) {
      o->report = argv[++i];
    } else if (!strcmp(a, "--trace") && has_next) {
      o->trace = argv[++i];
    } else if (!strcmp(a, "--precision") && has_next) {
      const char *p = argv[++i];
      o->precision = -2;
      for (int k = 0; k < 3; k++)
        if (!strcmp(p, k_precisions[k])) o->precision = k;
      if (o->precision == -2) return tpu_cli_arg_error(i, 1, "unknown precision '%s' (default, high or highest)", p);
    } else if (!strcmp(a, "--mode") && has_next) {
      const char *m = argv[++i];
      if (strcmp(m, "full") && strcmp(m, "timing"))
        return tpu_cli_arg_error(i, 1, "unknown mode '%s' (full or timing)", m);
      o->timing = !strcmp(m, "timing");
      mode_i = i;
    } else if ((!strcmp(a, "--seed") || !strcmp(a, "--top")) && has_next) {
      char *end;
      errno = 0;
      unsigned long long v = strtoull(argv[++i], &end, 10);
      if (errno || *end || argv[i][0] == '-' || !argv[i][0] || (a[2] == 't' && v > 1000000))
        return tpu_cli_arg_error(i, 1, "%s takes a whole number from 0 to %s, not '%s'", a,
                                 a[2] == 't' ? "1000000" : "2^64-1", argv[i]);
      if (a[2] == 's') o->seed = v;
      else o->top = (int)v;
    } else if (!strcmp(a, "--out-sharding") && has_next) {
      const char *v = argv[++i];
      if (v[0] == '@') { /* one sharding per line of a file */
        if (read_shardings(v + 1, o) != 0) return 2;
        continue;
      }
      if (o->nout_sh == MAX_OUT_SH) return tpu_cli_arg_error(i, 1, "more than %d --out-sharding options", MAX_OUT_SH);
      o->out_sh_loc[o->nout_sh] = tpu_cli_arg_loc(i, 1);
      o->out_sh[o->nout_sh++] = v;
    } else if (!strcmp(a, "--topology") && has_next) {
      o->topology = argv[++i];
      o->topology_i = i;
    } else if (!strcmp(a, "--slices") && has_next) {
      char *end;
      errno = 0;
      long long v = strtoll(argv[++i], &end, 10);
      if (errno || end == argv[i] || *end || v < 1 || v > 4096)
        return tpu_cli_arg_error(i, 1, "--slices takes a number of slices from 1 to 4096, not '%s'", argv[i]);
      o->slices = v;
      o->slices_i = i;
    } else if (!strcmp(a, "--mesh") && has_next) {
      o->mesh = argv[++i];
      o->mesh_i = i;
    } else if (!strcmp(a, "--per-device")) {
      o->per_device = 1;
      o->per_device_i = i;
    } else if (!strcmp(a, "--first-step")) {
      o->first_step = 1;
    } else if (!strcmp(a, "--sync-collectives")) {
      o->sync_collectives = 1;
    } else if (!strcmp(a, "--no-windowed-einsum")) {
      o->no_window = 1;
    } else if (!strcmp(a, "--cache-dir") && has_next) {
      o->cache_dir = argv[++i];
    } else if (!strcmp(a, "--no-cache")) {
      o->no_cache = 1;
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
      o->quiet = 1;
    } else if (a[0] == '-' && a[1]) {
      if (i + 1 == argc && takes_value(a))
        return tpu_cli_arg_error(i, 1, "%s needs a value (see tpusim run --help)", a);
      return tpu_cli_arg_error(i, 1, "unknown option '%s' (see tpusim run --help)", a);
    } else if (!o->prog) {
      o->prog = a;
      o->prog_i = i;
    } else {
      return tpu_cli_arg_error(i, 1, "more than one program given ('%s' and '%s')", o->prog, a);
    }
  }
  if (!o->prog)
    return tpu_cli_arg_error(-1, 0, "no program given (usage: tpusim run PROG.hlo [options]; see tpusim run --help)");
  int tpu = !strcmp(o->backend, "tpu");
  if (!tpu && strcmp(o->backend, "ref") != 0)
    return tpu_cli_arg_error(backend_i, 1, "unknown backend '%s' (available: tpu, ref)", o->backend);
  if (!tpu && (o->timing || o->report || o->trace || o->chip || o->precision >= 0 || o->topology || o->slices > 1 ||
               o->first_step || o->sync_collectives))
    return tpu_cli_arg_error(backend_i, 1, "--mode, --chip, --precision, --topology, --slices, --first-step, "
                             "--sync-collectives, --report and --trace need --backend tpu");
  if (o->timing && (o->outdir || o->ninputs))
    return tpu_cli_arg_error(mode_i, 1, "--mode timing computes no values: it takes no -i inputs and writes no -o "
                             "results");
  if (o->outdir && tpu_outset_check(o->outdir, o->outdir_i) != 0) return 2;
  return -1;
}

static double ms_between(const struct timespec *a, const struct timespec *b) {
  return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

/* Gives loops whose trip count the compiler could not find the mean trips the values ran
 * (full mode only: timing mode fails on such loops). Returns how many loops it set. */
static int apply_trips(tpu_program *p, const tpu_loop_trips *t) {
  int set = 0;
  for (int i = 0; i < p->ninsns; i++) {
    const tpu_insn *in = &p->insns[i];
    if (in->opc != TPU_ISA_LOOP || in->trips >= 0) continue;
    for (int k = 0; k < t->n; k++)
      if (t->v[k].runs > 0 && tpu_loc_same(t->v[k].loc, in->loc)) {
        set += tpu_program_set_loop_trips_at(p, in->loc, (t->v[k].iters + t->v[k].runs / 2) / t->v[k].runs);
        break;
      }
  }
  return set;
}

/* Shows the phase being worked on when standard error is a terminal (a large program
 * takes a while to compile, run or time); `what` NULL clears it. Silent with --quiet and
 * when standard error is a file or pipe, so error output stays one line. */
static void progress(const run_opts *o, const char *what) {
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
static tpu_status pod_topology(const run_opts *o, const tpu_chip *chip, int64_t ndev, tpu_topology *t, int *set,
                               tpu_diag *d) {
  return tpu_topology_for_run(o->topology, o->slices, chip, ndev, t, set, d);
}

/* The whole file (NULL if it cannot be read; *len its size). */
static char *read_text(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = tpu_malloc(cap + 1);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      char *nb = tpu_realloc(buf, cap * 2 + 1);
      if (!nb) tpu_free(buf);
      buf = nb;
      cap *= 2;
    }
  }
  fclose(f);
  if (buf) buf[n] = 0;
  *len = n;
  return buf;
}

/* The better-plan hint (docs/spmd.md): the program partitioned again with tpusim's own plans
 * where they part from XLA's rule (tpu_mesh own_plans), compiled and timed as the
 * prediction is. */
typedef struct {
  int found;
  double step_s, ici_bytes;
  char *constraints; /* with_sharding_constraint lines */
} plan_hint;

/* Partitions a fresh parse of the program with own plans, compiles and times it: 1 with
 * *step_s, *ici and the constraints, 0 when it cannot or when own plans change nothing. */
static int time_own_plan(const run_opts *o, const tpu_chip *chip, double *step_s, double *ici, char **notes) {
  tpu_diag d;
  tpu_module *m = NULL;
  tpu_program *prog = NULL;
  tpu_timeline tl;
  memset(&tl, 0, sizeof tl);
  tpu_pod_cost_ctx pc;
  memset(&pc, 0, sizeof pc);
  tpu_mesh mesh;
  memset(&mesh, 0, sizeof mesh);
  tpu_strbuf nb;
  tpu_strbuf_init(&nb);
  int ok = 0, found = 0;
  if (tpu_cli_parse_program(o->prog, &m, &d) != TPU_OK) goto out;
  if ((o->mesh ? tpu_mesh_parse(o->mesh, &mesh, &d) : tpu_mesh_from_module(m, &mesh, &found, &d)) != TPU_OK ||
      (!o->mesh && !found))
    goto out;
  tpu_mesh_configure(&mesh, chip, o->precision, o->no_window);
  mesh.own_plans = 1;
  mesh.own_notes = &nb;
  if (tpu_spmd_partition(m, &mesh, &d) != TPU_OK || !nb.s || !nb.len) goto out;
  pc.chip = chip;
  tpu_topology topo;
  int have_topo = 0;
  if (pod_topology(o, chip, tpu_module_device_count(m), &topo, &have_topo, &d) != TPU_OK) goto out;
  if (have_topo) pc.topo = &topo;
  tpu_compile_opts co = {chip, NULL, NULL, o->precision, tpu_pod_coll_cost, &pc, o->sync_collectives, o->no_window,
                         NULL, NULL, tpu_pod_hops, NULL};
  if (tpu_compile(m, &co, &prog, &d) != TPU_OK || tpu_timing_run(prog, chip, 1, &tl, &d) != TPU_OK) goto out;
  *step_s = (double)tl.total_cycles / (tl.clock_hz > 0 ? tl.clock_hz : chip->clock_hz);
  *ici = tl.ici_bytes;
  *notes = tpu_strbuf_take(&nb);
  ok = *notes != NULL;
out:
  tpu_strbuf_deinit(&nb);
  tpu_mesh_free(&mesh);
  tpu_timeline_free(&tl);
  tpu_program_free(prog);
  tpu_pod_cost_free(&pc);
  tpu_module_free(m);
  return ok;
}

/* The own plan, when it beats the prediction: 5 % faster, or 10 % fewer bytes each chip
 * sends and no slower. */
static void find_plan_hint(const run_opts *o, const tpu_chip *chip, double step_s, double ici, plan_hint *h) {
  memset(h, 0, sizeof *h);
  double st, ib;
  char *notes = NULL;
  if (!time_own_plan(o, chip, &st, &ib, &notes)) return;
  if (st < 0.95 * step_s || (ib < 0.9 * ici && st <= step_s)) {
    h->found = 1;
    h->step_s = st;
    h->ici_bytes = ib;
    h->constraints = notes;
  } else {
    tpu_free(notes);
  }
}

static void print_plan_hint(FILE *f, const plan_hint *h, double step_s, double ici) {
  if (!h->found) return;
  char a[32], b[32];
  tpu_report_time(a, sizeof a, h->step_s);
  tpu_report_si(b, sizeof b, h->ici_bytes, "B");
  fprintf(f, "better plan (tpusim's own search; the prediction above is XLA's plan): %s per step (%+.1f%%), each chip "
          "sends %s over ICI (%+.1f%%), with these sharding constraints:\n", a, 100 * (h->step_s / step_s - 1), b,
          ici > 0 ? 100 * (h->ici_bytes / ici - 1) : 0);
  for (const char *p = h->constraints; p && *p;) {
    const char *e = strchr(p, '\n');
    int n = e ? (int)(e - p) : (int)strlen(p);
    fprintf(f, "  %.*s\n", n, p);
    p += n + (e != NULL);
  }
}

typedef struct {
  tpu_podio_report pod;
  const plan_hint *hint;
  double step_s, ici;
} report_extra;

/* The report's pod section, and the better-plan hint beside it. */
static void write_report_extra(void *user, tpu_json_writer *w) {
  report_extra *x = user;
  tpu_podio_write_json(&x->pod, w);
  if (!x->hint || !x->hint->found) return;
  tpu_json_key(w, "better_plan");
  tpu_json_begin_object(w);
  tpu_json_key(w, "step_s");
  tpu_json_number(w, x->hint->step_s);
  tpu_json_key(w, "predicted_step_s");
  tpu_json_number(w, x->step_s);
  tpu_json_key(w, "ici_bytes_per_chip");
  tpu_json_number(w, x->hint->ici_bytes);
  tpu_json_key(w, "predicted_ici_bytes_per_chip");
  tpu_json_number(w, x->ici);
  tpu_json_key(w, "constraints");
  tpu_json_begin_array(w);
  for (const char *p = x->hint->constraints; p && *p;) {
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    char *line = tpu_malloc(n + 1);
    if (line) {
      memcpy(line, p, n);
      line[n] = 0;
      tpu_json_string(w, line);
      tpu_free(line);
    }
    p += n + (e != NULL);
  }
  tpu_json_end_array(w);
  tpu_json_end_object(w);
}

/* Compiles and times the program; what it prints goes to `out`. */
static int time_program(const run_opts *o, tpu_module *m, const tpu_chip *chip, const tpu_loop_trips *trips,
                        const tpu_podio *pod, FILE *out) {
  tpu_op_source *srcs = NULL;
  int nsrcs = 0;
  tpu_diag d;
  tpu_program *prog = NULL;
  tpu_timeline tl;
  memset(&tl, 0, sizeof tl);
  tpu_profile prof;
  memset(&prof, 0, sizeof prof);
  tpu_report_metrics r;
  int rc = 2;
  tpu_peak_kind pk = tpu_report_peak_kind(m); /* before fusion hides the dots */
  tpu_pod_cost_ctx pc;
  memset(&pc, 0, sizeof pc);
  plan_hint hint;
  memset(&hint, 0, sizeof hint);
  pc.chip = chip;
  tpu_topology topo;
  int have_topo = 0;
  if (pod_topology(o, chip, tpu_module_device_count(m), &topo, &have_topo, &d) != TPU_OK)
    return tpu_cli_report_arg(&d, o->topology_i >= 0 ? o->topology_i : o->slices_i);
  if (have_topo) pc.topo = &topo;
  tpu_compile_opts co = {chip, NULL, NULL, o->precision, tpu_pod_coll_cost, &pc, o->sync_collectives, o->no_window, NULL,
                         &trips->mosaic, tpu_pod_hops, NULL};
  progress(o, "compiling");
  tpu_status cst = tpu_compile(m, &co, &prog, &d);
  progress(o, NULL);
  if (cst != TPU_OK) {
    tpu_cli_report_file(&d, o->prog);
    goto out;
  }
  int nset = apply_trips(prog, trips);
  progress(o, "timing");
  tpu_status tst = tpu_timing_run(prog, chip, 1, &tl, &d);
  progress(o, NULL);
  /* Where each op came from (JAX op names and source lines, from the module's metadata). */
  if (tst == TPU_OK) {
    srcs = tpu_calloc((size_t)(prog->nops + 1), sizeof *srcs);
    size_t len = 0;
    char *text = read_text(o->prog, &len);
    tpu_sources *tab = NULL;
    if (srcs && text && tpu_sources_read(text, len, &tab, &d) == TPU_OK) {
      nsrcs = prog->nops;
      for (int i = 0; i < prog->nops && i < tl.nops; i++)
        if (tpu_sources_fill(tab, prog->ops[i].instr, &srcs[i]) &&
            (srcs[i].op_name || srcs[i].source_file))
          tl.ops[i].src = &srcs[i];
    }
    tpu_sources_free(tab);
    tpu_free(text);
  }
  if (tst != TPU_OK ||
      tpu_report_metrics_compute(&tl, chip, pk, &r, &d) != TPU_OK ||
      tpu_report_profile(&tl, r.clock_hz, &prof, &d) != TPU_OK) {
    tpu_cli_report_file(&d, o->prog);
    goto out;
  }
  if (!o->quiet) {
    if (nset) fprintf(out, "loops: trip counts of %d loop(s) taken from the values\n", nset);
    tpu_report_print_summary(out, &r);
    if (prog->xprefetch_bytes > 0) {
      char sz[48];
      tpu_report_si(sz, sizeof sz, (double)prog->xprefetch_bytes, "B");
      fprintf(out, "cross-program prefetch: %s (%s) read from %s; the previous step loads it, as XLA's TPU compiler "
              "does (a first step pays it: --first-step)\n",
              prog->hbm[prog->xprefetch_hbm].name, sz, prog->xprefetch_cmem ? "CMEM" : "VMEM");
    }
    double spf_bytes;
    int spf_big, nspf = tpu_report_step_prefetch(prog, NULL, &spf_bytes, &spf_big);
    if (nspf > 0) {
      char sz[48], wt[48];
      tpu_report_si(sz, sizeof sz, spf_bytes, "B");
      tpu_report_time(wt, sizeof wt, (double)tl.spf_wait_cycles / r.clock_hz);
      fprintf(out, "in-step prefetch: %d parameter(s), %s, copied into VMEM while other kernels run (largest: %s), "
              "as XLA's copy-start / copy-done do; %s%s\n", nspf, sz, prog->hbm[spf_big].name,
              tl.spf_wait_cycles > 0 ? "their readers waited " : "their readers did not wait for them",
              tl.spf_wait_cycles > 0 ? wt : "");
    }
  }
  double step_s = (double)tl.total_cycles / (tl.clock_hz > 0 ? tl.clock_hz : chip->clock_hz);
  if (o->partitioned && pod && pod->ndev > 1) {
    progress(o, "searching for a better plan");
    find_plan_hint(o, chip, step_s, tl.ici_bytes, &hint);
    progress(o, NULL);
  }
  if (!o->quiet) {
    if (pod && pod->ndev > 1) {
      tpu_podio_print(out, pod, prog, &tl, chip, r.flops_per_s, o->top, &pc);
      print_plan_hint(out, &hint, step_s, tl.ici_bytes);
    }
    tpu_report_print_profile(out, &prof, o->top);
  }
  rc = 0;
  tpu_podio_report pr = {pod, prog, &tl, chip, &pc};
  report_extra rx = {pr, &hint, step_s, tl.ici_bytes};
  tpu_report_info info = {o->prog, "tpu", o->timing ? "timing" : "full",
                          o->precision >= 0 ? k_precisions[o->precision] : "per-op",
                          pod && pod->ndev > 1 ? write_report_extra : NULL, &rx, NULL, NULL, 0, NULL};
  tpu_report_info_prefetch(&info, prog);
  if (o->report && tpu_report_write_json(o->report, &info, chip, &tl, &r, &prof, &d) != TPU_OK) {
    tpu_cli_report_file(&d, o->prog);
    rc = 1;
  }
  if (rc == 0 && o->trace) {
    if (tpu_report_write_trace_ex(o->trace, chip, &tl, pod && pod->ndev > 1 ? tpu_podio_trace : NULL, &pr, &d) !=
        TPU_OK) {
      tpu_cli_report_file(&d, o->prog);
      rc = 1;
    } else if (!o->quiet && tpu_timing_events_truncated(&tl)) {
      fprintf(out, "trace: the first %lld unit events only\n", (long long)tl.nevents);
    }
  }
out:
  tpu_free(hint.constraints);
  tpu_profile_free(&prof);
  tpu_timeline_free(&tl);
  tpu_program_free(prog);
  tpu_pod_cost_free(&pc);
  for (int i = 0; i < nsrcs; i++) tpu_op_source_free(&srcs[i]);
  tpu_free(srcs);
  return rc;
}

/* The cache key of a timing run (api/diskcache.h): the build, the program's path and text,
 * the chip as loaded, every option that changes what time_program prints or writes, and
 * the loop trip counts the values gave. Fields are length-prefixed. NULL on out of memory. */
static void key_field(tpu_strbuf *k, const void *p, size_t n) {
  uint64_t len = p ? n : UINT64_MAX;
  tpu_strbuf_append(k, (const char *)&len, sizeof len);
  if (p && n) tpu_strbuf_append(k, p, n);
}

static void key_str(tpu_strbuf *k, const char *s) { key_field(k, s, s ? strlen(s) : 0); }

static void key_int(tpu_strbuf *k, int64_t v) { key_field(k, &v, sizeof v); }

static char *timing_key(const run_opts *o, const tpu_chip *chip, const tpu_loop_trips *trips, size_t *len) {
  size_t tlen = 0;
  char *text = read_text(o->prog, &tlen);
  if (!text) return NULL;
  tpu_strbuf k;
  tpu_strbuf_init(&k);
  key_str(&k, "tpusim run: timing");
  key_str(&k, tpu_dcache_build_id());
  key_str(&k, o->prog);
  key_field(&k, text, tlen);
  tpu_free(text);
  key_field(&k, chip, sizeof *chip);
  int64_t ints[] = {o->precision, o->timing, o->first_step, o->sync_collectives, o->no_window, o->quiet, o->top,
                    o->report != NULL, o->trace != NULL, o->slices, o->per_device, o->nout_sh};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) key_int(&k, ints[i]);
  key_str(&k, o->topology);
  key_str(&k, o->mesh);
  for (int i = 0; i < o->nout_sh; i++) key_str(&k, o->out_sh[i]);
  key_int(&k, trips->n);
  for (int i = 0; i < trips->n; i++) {
    const tpu_loop_trip *t = &trips->v[i];
    key_str(&k, t->name);
    key_str(&k, t->loc.file);
    int64_t v[] = {t->loc.line, t->loc.col, t->iters, t->runs};
    for (size_t j = 0; j < 4; j++) key_int(&k, v[j]);
  }
  key_int(&k, trips->mosaic.n); /* the Pallas calls' scalars the timing counts kernels on */
  for (int i = 0; i < trips->mosaic.n; i++) {
    const tpu_mosaic_seen *s = &trips->mosaic.v[i];
    key_str(&k, s->name);
    key_int(&k, s->loc.line);
    key_int(&k, s->loc.col);
    for (int j = 0; j < s->n; j++) key_field(&k, s->args[j].data, s->args[j].nbytes);
  }
  *len = k.len;
  return tpu_strbuf_take(&k);
}

/* Writes a cached file's bytes to path (whole or not at all). */
static int put_file(const run_opts *o, const char *path, const tpu_dcache_part *part) {
  char *tmp;
  FILE *f;
  tpu_diag d;
  tpu_status st = tpu_file_begin(path, &tmp, &f, &d);
  if (st == TPU_OK) st = tpu_file_commit(path, tmp, f, fwrite(part->data, 1, part->len, f) == part->len, &d);
  if (st != TPU_OK) tpu_cli_report_file(&d, o->prog);
  return st == TPU_OK;
}

/* Compiles and times the program, or replays what a run with the same key printed and
 * wrote (the disk cache: stdout, report, trace). Only complete, successful runs are stored. */
static int run_timing(const run_opts *o, tpu_module *m, const tpu_chip *chip, const tpu_loop_trips *trips,
                      const tpu_podio *pod) {
  tpu_dcache dc;
  tpu_dcache_open(&dc, o->cache_dir, o->no_cache || tpu_mpi_launched());
  size_t klen = 0;
  char *key = dc.dir ? timing_key(o, chip, trips, &klen) : NULL;
  tpu_dcache_part parts[3];
  if (key && tpu_dcache_get(&dc, key, klen, 3, parts)) {
    int rc = (!o->report || put_file(o, o->report, &parts[1])) && (!o->trace || put_file(o, o->trace, &parts[2])) ? 0 : 1;
    if (rc == 0) fwrite(parts[0].data, 1, parts[0].len, stdout);
    for (int i = 0; i < 3; i++) tpu_free(parts[i].data);
    tpu_free(key);
    tpu_dcache_close(&dc);
    return rc;
  }
  char *obuf = NULL;
  size_t olen = 0;
  FILE *out = key ? open_memstream(&obuf, &olen) : NULL;
  int rc = time_program(o, m, chip, trips, pod, out ? out : stdout);
  if (out) {
    int ok = fclose(out) == 0 && obuf;
    if (ok) fwrite(obuf, 1, olen, stdout);
    if (ok && rc == 0) {
      memset(parts, 0, sizeof parts);
      parts[0].data = (unsigned char *)obuf;
      parts[0].len = olen;
      if (o->report) parts[1].data = (unsigned char *)read_text(o->report, &parts[1].len);
      if (o->trace) parts[2].data = (unsigned char *)read_text(o->trace, &parts[2].len);
      if ((!o->report || parts[1].data) && (!o->trace || parts[2].data)) tpu_dcache_put(&dc, key, klen, 3, parts);
      tpu_free(parts[1].data);
      tpu_free(parts[2].data);
    }
    free(obuf); /* open_memstream's buffer comes from malloc */
  }
  tpu_free(key);
  tpu_dcache_close(&dc);
  return rc;
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

static tpu_status check_host_memory(const tpu_module *m, int64_t ndev, tpu_diag *d) {
  uint64_t have = host_available();
  if (!have) return TPU_OK;
  const tpu_comp *e = m->entry;
  uint64_t per = DEVICE_OVERHEAD_BYTES + shape_bytes(&e->root->shape);
  for (int i = 0; i < e->nparams; i++) per += shape_bytes(&e->params[i]->shape);
  double need = (double)per * (double)ndev;
  if (need <= (double)have) return TPU_OK;
  return TPU_FAIL(d, TPU_ERR_LIMIT, e->root->loc,
                  "computing the values of %lld device(s) needs at least %.3g GB (%.3g MB each: parameters, result "
                  "and interpreter state); this host has %.3g GB available (--mode timing computes no values)",
                  (long long)ndev, need / 1e9, (double)per / 1e6, (double)have / 1e9);
}

int tpu_cli_run(int argc, char **argv) {
  run_opts o;
  memset(&o, 0, sizeof o);
  o.backend = "tpu";
  o.precision = -1;
  o.top = 10;
  o.inputs = tpu_calloc(MAX_INPUTS, sizeof *o.inputs);
  if (!o.inputs) return tpu_cli_arg_error(-1, 0, "out of memory");
  int rc = parse_args(argc, argv, &o);
  if (rc >= 0) {
    tpu_free(o.inputs);
    tpu_free(o.sh_text);
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
      tpu_free(o.inputs);
      tpu_free(o.sh_text);
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
  if (tpu && tpu_chip_load(o.chip ? o.chip : "v5e", &chip, &d) != TPU_OK) {
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
    if (pod_topology(&o, &chip, ndev, &topo, &set, &d) != TPU_OK) {
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
                       : random_value(&args[nargs], &g, &rng, &d);
      } else {
        st = o.ninputs ? tpu_ref_load_input(o.inputs[nargs], nargs, &e->params[nargs]->shape, &args[nargs], &d)
                       : random_value(&args[nargs], &e->params[nargs]->shape, &rng, &d);
      }
      if (st != TPU_OK) {
        tpu_cli_report_file(&d, o.ninputs ? o.inputs[nargs] : o.prog);
        goto cleanup;
      }
    }
    /* Values run on the module as written (the compiler then rewrites it in place). */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    progress(&o, "computing values");
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
    progress(&o, NULL);
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
               o.precision >= 0 ? k_precisions[o.precision] : "per-op", ms_between(&t0, &t1));
      else
        printf("backend ref: %.3f ms\n", ms_between(&t0, &t1));
    }
  } else if (!o.quiet) {
    printf("backend tpu: chip %s (%s), precision %s; timing only\n", chip.name, chip.title,
           o.precision >= 0 ? k_precisions[o.precision] : "per-op");
    char kn[128];
    const tpu_instr *u = tpu_mosaic_unknown_scalars(m, kn, sizeof kn);
    if (u) /* docs/pallas.md, "Time" */
      printf("note: %s:%d:%d: Pallas kernel '%s' is timed without its scalar operands' values (--mode timing "
             "computes none): scalar prefetch reads as zeros, a dynamic grid dimension takes a guess "
             "(docs/pallas.md); run with -i inputs to time it on their values\n",
             u->loc.file ? u->loc.file : o.prog, u->loc.line, u->loc.col, kn);
  }
  if (tpu && mpi_rank == 0) {
    int trc = run_timing(&o, m, &chip, &trips, &pod);
    if (trc != 0) {
      rc = trc;
      goto cleanup;
    }
  }
  if (o.outdir) { /* the set is written beside DIR, then swapped into place */
    int ok = tpu_outset_begin(&outs, o.outdir, &d) == TPU_OK &&
             (per_dev ? write_per_device(outs.tmp, per_dev, ndev, &d) : write_outputs(outs.tmp, leaves, nleaves, &d)) &&
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
      summary_stats(leaves[i], stdout);
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
  tpu_free(o.inputs);
  tpu_free(o.sh_text);
  return rc;
}
