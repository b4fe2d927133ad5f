/* tpusim run: the command line (usage, options, --out-sharding @FILE) into run_opts. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "run.h"

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

const char *const tpu__run_precisions[] = {"default", "high", "highest"};

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
int tpu__run_parse_args(int argc, char **argv, run_opts *o) {
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
        if (!strcmp(p, tpu__run_precisions[k])) o->precision = k;
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
