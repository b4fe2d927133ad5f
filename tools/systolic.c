/* tpusim systolic: SCALE-Sim config + topology in, COMPUTE_REPORT.csv out; array animation. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "chip/mxu.h"
#include "chip/scalesim.h"
#include "chip/systolic.h"
#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: tpusim systolic -c CONFIG.cfg [-t TOPOLOGY.csv] [-i conv|gemm] [-p OUTDIR]\n"
          "                       [--scalesim-compat] [--pe-level] [-q]\n"
          "       tpusim systolic --batch LIST [-p OUTDIR] [--scalesim-compat] [--pe-level] [-q]\n"
          "       tpusim systolic --animate [--rows R] [--cols C] [-M M] [-K K] [-N N]\n"
          "                       [--html FILE] [--scalesim-compat]\n"
          "\n"
          "Reads SCALE-Sim's configuration and topology files as they are and writes\n"
          "OUTDIR/<run_name>/COMPUTE_REPORT.csv with SCALE-Sim's columns (ws dataflow only).\n"
          "\n"
          "  -c FILE             SCALE-Sim .cfg (ArrayHeight/ArrayWidth, Dataflow = ws, ...)\n"
          "  -t FILE             topology CSV (default: the config's TopologyCsvLoc)\n"
          "  -i conv|gemm        topology kind: conv layers (default) or 'name, M, N, K,' GEMMs\n"
          "  -p DIR              output folder (default ./results, as SCALE-Sim)\n"
          "  --scalesim-compat   weights load serially, as SCALE-Sim v2 models ws: Total Cycles\n"
          "                      and the utilisation columns equal SCALE-Sim's. Without it the\n"
          "                      TPU's double-buffered weight loading applies and the report\n"
          "                      adds 'Cycles Saved' (serial total minus ours).\n"
          "  --pe-level          run the cycle-by-cycle PE array (computing and checking real\n"
          "                      values) instead of the closed form; the cycles are the same\n"
          "  -q                  no per-layer table on stdout\n"
          "  --batch LIST        many runs in one process: each line of LIST is 'RUN_ID CONFIG\n"
          "                      TOPOLOGY [conv|gemm]' (paths from LIST's folder; # comments);\n"
          "                      run RUN_ID's report goes to OUTDIR/RUN_ID/<run_name>/\n"
          "  -l FILE, -s Y|N     SCALE-Sim's layout and trace options: accepted, ignored\n"
          "\n"
          "  --animate           show every cycle of an R x C array computing A[M,K] x W[K,N]\n"
          "                      (default 4x4 array, M=6 K=4 N=4; small integer operands) as\n"
          "                      text on stdout, or with --html FILE as a self-contained page;\n"
          "                      double-buffered weights unless --scalesim-compat\n"
          "\n"
          "Exit status: 0 ok, 1 could not write the report, 2 bad input.\n");
}

typedef struct {
  const char *cfg, *topo, *kind, *outdir, *html, *batch;
  int compat, pe_level, quiet, animate, batch_i;
  int64_t rows, cols, M, K, N; /* --animate sizes */
  int kind_i, mkn_i;           /* argument positions of -i and of the largest of -M, -K, -N */
} opts;

/* Small deterministic integers in [-2, 2]: exact in bf16, and every sum of products stays
 * an exact f32 integer while 4*K < 2^24, so the PE array's output can be checked exactly. */
static float operand(uint64_t i, uint64_t j, uint64_t salt) {
  uint64_t h = (i * 0x9E3779B97F4A7C15ull) ^ (j * 0xC2B2AE3D27D4EB4Full) ^ salt;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return (float)((int)(h % 5u) - 2);
}

/* The operands both --pe-level and --animate feed the array: A is M x K, W is K x N. */
static void fill_operands(float *A, float *W, int64_t M, int64_t K, int64_t N) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t k = 0; k < K; k++) A[m * K + k] = operand((uint64_t)m, (uint64_t)k, 1);
  for (int64_t k = 0; k < K; k++)
    for (int64_t n = 0; n < N; n++) W[k * N + n] = operand((uint64_t)k, (uint64_t)n, 2);
}

/* Runs one layer on the PE-level array with real values and checks every output against
 * an exact integer product. */
static tpu_status pe_level_layer(int64_t R, int64_t C, const tpu_scalesim_layer *l,
                                 tpu_wload mode, tpu_mxu_cycles *cyc, tpu_diag *d) {
  const int64_t M = l->M, K = l->K, N = l->N;
  const double elems = (double)M * (double)K + (double)K * (double)N + (double)M * (double)N;
  if (elems > (double)((int64_t)1 << 31) || 4.0 * (double)K >= 16777216.0)
    return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(),
                    "layer '%s' is too large for --pe-level (M=%lld K=%lld N=%lld)", l->name,
                    (long long)M, (long long)K, (long long)N);
  float *A = tpu_malloc((size_t)(M * K) * sizeof *A);
  float *W = tpu_malloc((size_t)(K * N) * sizeof *W);
  float *out = tpu_malloc((size_t)(M * N) * sizeof *out);
  /* The exact product in int32: operands are integers in [-2, 2] and 4K < 2^24, so every
   * partial sum fits and the loop vectorizes. */
  int32_t *acc = tpu_calloc((size_t)N, sizeof *acc);
  int32_t *Wi = tpu_malloc((size_t)(K * N) * sizeof *Wi);
  tpu_status st = TPU_OK;
  if (!A || !W || !out || !acc || !Wi) {
    st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory for layer '%s'", l->name);
    goto done;
  }
  fill_operands(A, W, M, K, N);
  for (int64_t i = 0; i < K * N; i++) Wi[i] = (int32_t)W[i];
  st = tpu_systolic_run(R, C, M, K, N, mode, A, W, out, cyc, NULL, d);
  if (st != TPU_OK) goto done;
  for (int64_t m = 0; m < M && st == TPU_OK; m++) {
    memset(acc, 0, (size_t)N * sizeof *acc);
    for (int64_t k = 0; k < K; k++) {
      const int32_t a = (int32_t)A[m * K + k];
      if (!a) continue;
      const int32_t *wrow = Wi + k * N;
      for (int64_t n = 0; n < N; n++) acc[n] += a * wrow[n];
    }
    for (int64_t n = 0; n < N; n++)
      if ((double)out[m * N + n] != (double)acc[n]) {
        st = TPU_FAIL(d, TPU_ERR_RUNTIME, tpu_noloc(),
                      "layer '%s': PE array output [%lld, %lld] = %g, exact product %lld",
                      l->name, (long long)m, (long long)n, (double)out[m * N + n],
                      (long long)acc[n]);
        break;
      }
  }
done:
  tpu_free(A);
  tpu_free(W);
  tpu_free(Wi);
  tpu_free(out);
  tpu_free(acc);
  return st;
}

/* Cycles of one layer in one weight-loading mode, closed form or PE level. Failures are
 * located at the layer's topology row. */
static tpu_status layer_cycles(const tpu_scalesim_config *cfg, const tpu_scalesim_topology *t,
                               int64_t i, tpu_wload mode, int pe_level, tpu_mxu_cycles *c,
                               tpu_diag *d) {
  const tpu_scalesim_layer *l = &t->layers[i];
  tpu_diag inner;
  memset(&inner, 0, sizeof inner);
  tpu_status st =
      pe_level ? pe_level_layer(cfg->array_rows, cfg->array_cols, l, mode, c, &inner)
               : tpu_mxu_tile_cycles(cfg->array_rows, cfg->array_cols, l->M, l->K, l->N, mode, c,
                                     &inner);
  if (st == TPU_OK) return TPU_OK;
  tpu_loc loc = {t->path, l->line, 1};
  return TPU_FAIL(d, st, loc, "layer '%s': %s", l->name, inner.msg);
}

/* mkdir that accepts an existing directory. */
static int ensure_dir(const char *path) {
  if (mkdir(path, 0777) == 0) return 0;
  if (errno != EEXIST) return -1;
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

/* One run: a config and a topology, its rows computed (run_compute), then its report
 * written (run_write). */
typedef struct {
  const char *cfg_path, *topo_arg; /* topo_arg: NULL takes the config's TopologyCsvLoc */
  char *cfg_own, *topo_own;        /* --batch: paths resolved against the list's folder */
  char *id;                        /* --batch: the run's id (its folder under -p) */
  tpu_scalesim_input kind;
  tpu_scalesim_config cfg;
  int have_cfg;
  tpu_scalesim_topology topo;
  tpu_scalesim_row *rows;
} sysrun;

static void run_free(sysrun *r) {
  tpu_free(r->rows);
  tpu_scalesim_topology_deinit(&r->topo);
  if (r->have_cfg) tpu_scalesim_config_deinit(&r->cfg);
  tpu_free(r->cfg_own);
  tpu_free(r->topo_own);
  tpu_free(r->id);
  memset(r, 0, sizeof *r);
}

/* Loads the run's files and computes every layer's row (printing the table unless -q).
 * Returns the exit status (0 ok). */
static int run_compute(const opts *o, sysrun *r) {
  tpu_diag d;
  memset(&d, 0, sizeof d);
  if (tpu_scalesim_config_load(r->cfg_path, &r->cfg, &d) != TPU_OK) return tpu_cli_report_file(&d, r->cfg_path);
  r->have_cfg = 1;
  if (tpu_scalesim_config_require_ws(&r->cfg, &d) != TPU_OK) return tpu_cli_report(&d);
  const char *topo_path = r->topo_arg ? r->topo_arg : r->cfg.topology_path;
  if (!topo_path)
    return tpu_cli_file_error(r->cfg_path, 0, 0, "no topology: give -t FILE or [network_presets] TopologyCsvLoc");
  if (tpu_scalesim_topology_load(topo_path, r->kind, &r->topo, &d) != TPU_OK) return tpu_cli_report_file(&d, topo_path);
  r->rows = tpu_calloc((size_t)r->topo.n + 1, sizeof *r->rows);
  if (!r->rows) {
    tpu_cli_file_error(topo_path, 0, 0, "out of memory for %lld layers", (long long)r->topo.n);
    return 1;
  }
  const int64_t R = r->cfg.array_rows, C = r->cfg.array_cols;
  if (!o->quiet) {
    printf("run %s: %lldx%lld array, ws dataflow, %s weight loading, %s\n", r->id ? r->id : r->cfg.run_name,
           (long long)R, (long long)C,
           o->compat ? "serial (SCALE-Sim compatible)" : "double-buffered (TPU)",
           o->pe_level ? "PE-level simulation (values checked)" : "closed form");
    printf("%-8s %-24s %10s %10s %10s %8s %14s %9s%s\n", "LayerID", "name", "M", "K", "N",
           "folds", "Total Cycles", "Util %", o->compat ? "" : "     Saved");
  }
  for (int64_t i = 0; i < r->topo.n; i++) {
    tpu_mxu_cycles serial, dbl;
    tpu_scalesim_row *row = &r->rows[i];
    if (layer_cycles(&r->cfg, &r->topo, i, TPU_WLOAD_SERIAL, o->pe_level, &serial, &d) != TPU_OK) {
      int rc = d.status == TPU_ERR_RUNTIME || d.status == TPU_ERR_NOMEM ? 1 : 2;
      tpu_cli_report(&d);
      return rc;
    }
    if (o->compat) {
      tpu_scalesim_row_from_cycles(&serial, R, C, row);
    } else {
      if (layer_cycles(&r->cfg, &r->topo, i, TPU_WLOAD_DOUBLE, o->pe_level, &dbl, &d) != TPU_OK) {
        int rc = d.status == TPU_ERR_RUNTIME || d.status == TPU_ERR_NOMEM ? 1 : 2;
        tpu_cli_report(&d);
        return rc;
      }
      tpu_scalesim_row_from_cycles(&dbl, R, C, row);
      row->cycles_saved = serial.total - dbl.total;
    }
    if (!o->quiet) {
      const tpu_scalesim_layer *l = &r->topo.layers[i];
      printf("%-8lld %-24s %10lld %10lld %10lld %8lld %14lld %9.2f", (long long)i, l->name,
             (long long)l->M, (long long)l->K, (long long)l->N, (long long)serial.folds,
             (long long)row->total_cycles, row->overall_util_pct);
      if (!o->compat) printf(" %9lld", (long long)row->cycles_saved);
      printf("\n");
    }
  }
  return 0;
}

/* Writes OUTDIR[/ID]/<run_name>/COMPUTE_REPORT.csv. Returns the exit status. */
static int run_write(const opts *o, const sysrun *r) {
  tpu_diag d;
  memset(&d, 0, sizeof d);
  const char *base = o->outdir;
  char *top = NULL, *dir = NULL, *report = NULL;
  int rc = 0;
  if (r->id) {
    size_t n0 = strlen(o->outdir) + strlen(r->id) + 2;
    if (!(top = tpu_malloc(n0))) {
      tpu_cli_file_error(o->outdir, 0, 0, "out of memory");
      return 1;
    }
    snprintf(top, n0, "%s/%s", o->outdir, r->id);
    base = top;
  }
  size_t n1 = strlen(base) + strlen(r->cfg.run_name) + 2;
  dir = tpu_malloc(n1);
  report = tpu_malloc(n1 + 20);
  if (!dir || !report) {
    tpu_cli_file_error(base, 0, 0, "out of memory");
    rc = 1;
    goto out;
  }
  snprintf(dir, n1, "%s/%s", base, r->cfg.run_name);
  snprintf(report, n1 + 20, "%s/COMPUTE_REPORT.csv", dir);
  if (ensure_dir(o->outdir) != 0 || (top && ensure_dir(top) != 0)) {
    tpu_cli_file_error(top && errno != ENOTDIR ? top : o->outdir, 0, 0, "cannot create the output folder: %s",
                       strerror(errno));
    rc = 1;
    goto out;
  }
  if (ensure_dir(dir) != 0) {
    tpu_cli_file_error(dir, 0, 0, "cannot create the run folder: %s", strerror(errno));
    rc = 1;
    goto out;
  }
  if (tpu_scalesim_report_write(report, r->rows, r->topo.n, !o->compat, &d) != TPU_OK) {
    tpu_cli_report(&d);
    rc = 1;
    goto out;
  }
  if (!o->quiet) printf("wrote %s\n", report);
out:
  tpu_free(top);
  tpu_free(dir);
  tpu_free(report);
  return rc;
}

static int run_report(const opts *o) {
  sysrun r;
  memset(&r, 0, sizeof r);
  r.kind = TPU_SCALESIM_CONV;
  if (o->kind && !strcmp(o->kind, "gemm")) r.kind = TPU_SCALESIM_GEMM;
  else if (o->kind && strcmp(o->kind, "conv")) {
    return tpu_cli_arg_error(o->kind_i, 1, "-i takes conv or gemm, not '%s'", o->kind);
  }
  r.cfg_path = o->cfg;
  r.topo_arg = o->topo;
  int rc = run_compute(o, &r);
  /* Everything is computed: only now touch the output folder. */
  if (rc == 0) rc = run_write(o, &r);
  run_free(&r);
  return rc;
}

/* A path of the batch list: as written when absolute, else from the list's folder. */
static char *batch_path(const char *list, const char *p) {
  const char *slash = strrchr(list, '/');
  size_t nd = p[0] == '/' || !slash ? 0 : (size_t)(slash - list) + 1;
  char *s = tpu_malloc(nd + strlen(p) + 1);
  if (!s) return NULL;
  memcpy(s, list, nd);
  strcpy(s + nd, p);
  return s;
}

/* --batch LIST: many runs in one process. Each line of LIST is `RUN_ID CONFIG TOPOLOGY
 * [conv|gemm]` (tests/scalesim/runs.txt's format; '#' starts a comment line; paths
 * relative to LIST's folder); run ID's report goes to OUTDIR/ID/<run_name>/. Every run is
 * computed before any report is written. */
static int run_batch(const opts *o) {
  if (o->cfg || o->topo || o->kind)
    return tpu_cli_arg_error(o->batch_i, 1, "--batch takes each run's config, topology and kind from its list, not -c, -t or -i");
  FILE *fp = fopen(o->batch, "rb");
  if (!fp) return tpu_cli_file_error(o->batch, 0, 0, "cannot open: %s", strerror(errno));
  enum { MAX_LIST = 1 << 20 };
  char *text = tpu_malloc(MAX_LIST + 1);
  size_t len = text ? fread(text, 1, MAX_LIST + 1, fp) : 0;
  int bad = !text ? 1 : ferror(fp) ? 2 : len > MAX_LIST ? 3 : 0;
  fclose(fp);
  if (bad) {
    tpu_free(text);
    tpu_cli_file_error(o->batch, 0, 0, bad == 1 ? "out of memory" : bad == 2 ? "cannot read" : "larger than 1 MiB");
    return bad == 1 ? 1 : 2;
  }
  sysrun *runs = NULL;
  int64_t nruns = 0, cap = 0;
  int rc = 0, line = 0;
  for (char *p = text; rc == 0 && p < text + len;) {
    char *eol = memchr(p, '\n', (size_t)(text + len - p));
    if (!eol) eol = text + len;
    line++;
    char *f[5];
    int nf = 0, col[5];
    for (char *q = p; q < eol && nf < 5;) {
      while (q < eol && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
      if (q >= eol) break;
      col[nf] = (int)(q - p) + 1;
      f[nf++] = q;
      while (q < eol && *q != ' ' && *q != '\t' && *q != '\r') q++;
      if (q < eol) *q++ = 0;
    }
    *eol = 0;
    p = eol + 1;
    if (nf == 0 || f[0][0] == '#') continue;
    if (nf < 3 || nf > 4) {
      rc = tpu_cli_file_error(o->batch, line, nf > 4 ? col[4] : 1,
                              "a run is 'RUN_ID CONFIG TOPOLOGY [conv|gemm]'; this line has %d field%s", nf,
                              nf == 1 ? "" : "s");
      break;
    }
    if (strchr(f[0], '/') || !strcmp(f[0], ".") || !strcmp(f[0], "..")) {
      rc = tpu_cli_file_error(o->batch, line, col[0], "run id '%s' is not a folder name", f[0]);
      break;
    }
    for (int64_t k = 0; k < nruns; k++)
      if (!strcmp(runs[k].id, f[0])) {
        rc = tpu_cli_file_error(o->batch, line, col[0], "run id '%s' is given twice", f[0]);
        break;
      }
    if (rc) break;
    tpu_scalesim_input kind = TPU_SCALESIM_CONV;
    if (nf == 4 && !strcmp(f[3], "gemm")) kind = TPU_SCALESIM_GEMM;
    else if (nf == 4 && strcmp(f[3], "conv")) {
      rc = tpu_cli_file_error(o->batch, line, col[3], "the kind is conv or gemm, not '%s'", f[3]);
      break;
    }
    if (nruns == cap) {
      int64_t nc = cap ? 2 * cap : 16;
      sysrun *g = tpu_realloc(runs, (size_t)nc * sizeof *g);
      if (!g) {
        rc = tpu_cli_file_error(o->batch, line, 1, "out of memory");
        break;
      }
      runs = g;
      cap = nc;
    }
    sysrun *r = &runs[nruns++];
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->id = tpu_malloc(strlen(f[0]) + 1);
    r->cfg_own = batch_path(o->batch, f[1]);
    r->topo_own = batch_path(o->batch, f[2]);
    if (!r->id || !r->cfg_own || !r->topo_own) {
      rc = tpu_cli_file_error(o->batch, line, 1, "out of memory");
      break;
    }
    strcpy(r->id, f[0]);
    r->cfg_path = r->cfg_own;
    r->topo_arg = r->topo_own;
  }
  if (rc == 0 && nruns == 0) rc = tpu_cli_file_error(o->batch, 0, 0, "the list names no run");
  for (int64_t k = 0; rc == 0 && k < nruns; k++) rc = run_compute(o, &runs[k]);
  /* Everything is computed: only now touch the output folder. */
  for (int64_t k = 0; rc == 0 && k < nruns; k++) rc = run_write(o, &runs[k]);
  for (int64_t k = 0; k < nruns; k++) run_free(&runs[k]);
  tpu_free(runs);
  tpu_free(text);
  return rc;
}

/* --animate: chip/systolic.h's renderers on small integer operands. */
static int run_animate(const opts *o) {
  tpu_diag d;
  memset(&d, 0, sizeof d);
  const int64_t M = o->M, K = o->K, N = o->N;
  if (M > 4096 || K > 4096 || N > 4096)
    return tpu_cli_arg_error(o->mkn_i, 1, "--animate takes M, K, N up to 4096");
  float *A = tpu_malloc((size_t)(M * K) * sizeof *A);
  float *W = tpu_malloc((size_t)(K * N) * sizeof *W);
  if (!A || !W) {
    tpu_free(A);
    tpu_free(W);
    tpu_cli_arg_error(o->mkn_i, 1, "out of memory for the operands");
    return 1;
  }
  fill_operands(A, W, M, K, N);
  const tpu_wload mode = o->compat ? TPU_WLOAD_SERIAL : TPU_WLOAD_DOUBLE;
  tpu_status st = o->html ? tpu_systolic_animate_html(o->html, o->rows, o->cols, M, K, N, A,
                                                      W, mode, &d)
                          : tpu_systolic_animate_text(stdout, o->rows, o->cols, M, K, N, A, W,
                                                      mode, &d);
  tpu_free(A);
  tpu_free(W);
  if (st != TPU_OK) {
    int rc = tpu_cli_report(&d);
    return d.status == TPU_ERR_IO || d.status == TPU_ERR_NOMEM ? 1 : rc;
  }
  if (o->html && !o->quiet) printf("wrote %s\n", o->html);
  return 0;
}

/* A positive integer option value. */
static int size_arg(const char *opt, const char *v, int argi, int64_t *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < 1 || x > 1000000) {
    tpu_cli_arg_error(argi, 1, "%s takes a whole number from 1 to 1000000, not '%s'", opt, v);
    return 0;
  }
  *out = x;
  return 1;
}

int tpu_cli_systolic(int argc, char **argv) {
  opts o;
  memset(&o, 0, sizeof o);
  o.outdir = "./results";
  o.rows = o.cols = 4;
  o.M = 6;
  o.K = o.N = 4;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    }
    if (!strcmp(a, "--scalesim-compat")) o.compat = 1;
    else if (!strcmp(a, "--pe-level")) o.pe_level = 1;
    else if (!strcmp(a, "-q")) o.quiet = 1;
    else if (!strcmp(a, "--animate")) o.animate = 1;
    else if (!strcmp(a, "--rows") || !strcmp(a, "--cols") || !strcmp(a, "-M") ||
             !strcmp(a, "-K") || !strcmp(a, "-N") || !strcmp(a, "--html")) {
      if (i + 1 >= argc) return tpu_cli_arg_error(i, 1, "%s needs a value", a);
      const char *v = argv[++i];
      int ok = 1;
      if (!strcmp(a, "--html")) o.html = v;
      else if (!strcmp(a, "--rows")) ok = size_arg(a, v, i, &o.rows);
      else if (!strcmp(a, "--cols")) ok = size_arg(a, v, i, &o.cols);
      else if (!strcmp(a, "-M")) ok = size_arg(a, v, i, &o.M);
      else if (!strcmp(a, "-K")) ok = size_arg(a, v, i, &o.K);
      else ok = size_arg(a, v, i, &o.N);
      if (!ok) return 2;
      if (a[0] == '-' && a[1] != '-' && (o.M > 4096 || o.K > 4096 || o.N > 4096) && !o.mkn_i) o.mkn_i = i;
    }
    else if (!strcmp(a, "-c") || !strcmp(a, "-t") || !strcmp(a, "-i") || !strcmp(a, "-p") ||
             !strcmp(a, "-l") || !strcmp(a, "-s") || !strcmp(a, "--batch")) {
      if (i + 1 >= argc) return tpu_cli_arg_error(i, 1, "%s needs a value", a);
      const char *v = argv[++i];
      if (a[1] == '-') o.batch = v, o.batch_i = i;
      else if (a[1] == 'c') o.cfg = v;
      else if (a[1] == 't') o.topo = v;
      else if (a[1] == 'i') o.kind = v, o.kind_i = i;
      else if (a[1] == 'p') o.outdir = v;
    } else {
      return tpu_cli_arg_error(i, 1, "unknown option '%s' (see tpusim systolic --help)", a);
    }
  }
  if (o.animate) return run_animate(&o);
  if (o.batch) return run_batch(&o);
  if (!o.cfg) return tpu_cli_arg_error(-1, 0, "-c CONFIG.cfg is required (see tpusim systolic --help)");
  return run_report(&o);
}
