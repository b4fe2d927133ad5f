/* tpusim run: parse, verify and run an HLO program; inputs and results as .npy. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/npy.h"
#include "cli.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "ref/ref.h"

#define MAX_INPUTS 4096

static void usage(FILE *f) {
  fprintf(f,
          "usage: tpusim run PROG.hlo [-i IN.npy]... [-o DIR] [--backend ref] [--seed N] [--quiet]\n"
          "\n"
          "Runs the entry computation of an HLO module (as JAX's as_text(dialect=\"hlo\") prints it).\n"
          "  -i IN.npy      one per entry parameter, in parameter order; the dtype must match\n"
          "                 (a float32 array is accepted for a bf16 or f16 parameter and rounded\n"
          "                 to nearest even); a 0-d array gives a scalar\n"
          "  -o DIR         write each leaf of the result as DIR/0.npy, DIR/1.npy, ... (bf16 as float32)\n"
          "  --backend ref  the reference interpreter (the semantics spec)\n"
          "  --seed N       with no -i, inputs are random and reproducible from N (default 0)\n"
          "  --quiet        print nothing on success\n"
          "Exit status: 0 success, 2 bad program or input (one line on stderr), 1 cannot write results.\n");
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
    else if (s->dtype == TPU_PRED) tpu_tensor_set_i64(t, i, (int64_t)(r & 1));
    else tpu_tensor_set_i64(t, i, (int64_t)(r % 16));
  }
  return TPU_OK;
}

/* Leaves of a result, depth-first. */
static int count_leaves(const tpu_tensor *t) {
  if (t->dtype != TPU_TUPLE) return 1;
  int n = 0;
  for (int i = 0; i < t->ntuple; i++) n += count_leaves(&t->elems[i]);
  return n;
}

static void collect_leaves(const tpu_tensor *t, const tpu_tensor **out, int *k) {
  if (t->dtype != TPU_TUPLE) {
    out[(*k)++] = t;
    return;
  }
  for (int i = 0; i < t->ntuple; i++) collect_leaves(&t->elems[i], out, k);
}

static void summary_stats(const tpu_tensor *t, FILE *f) {
  int64_t n = tpu_tensor_numel(t);
  if (t->dtype == TPU_TOKEN || n == 0) return;
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

static int write_outputs(const char *dir, const tpu_tensor **leaves, int n, tpu_diag *d) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
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
  if (k < n) { /* all or nothing: remove what this run wrote */
    for (int j = 0; j < k; j++) {
      snprintf(path, plen, "%s/%d.npy", dir, j);
      unlink(path);
    }
  }
  tpu_free(path);
  return k == n;
}

int tpu_cli_run(int argc, char **argv) {
  const char *prog = NULL, *outdir = NULL, *backend = "ref";
  const char **inputs = tpu_calloc(MAX_INPUTS, sizeof *inputs);
  int ninputs = 0, quiet = 0;
  uint64_t seed = 0;
  int rc = 2;
  if (!inputs) {
    fprintf(stderr, "error: out of memory\n");
    return 2;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int has_next = i + 1 < argc;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      tpu_free(inputs);
      return 0;
    } else if (!strcmp(a, "-i") && has_next) {
      if (ninputs == MAX_INPUTS) {
        fprintf(stderr, "error: more than %d inputs\n", MAX_INPUTS);
        goto done;
      }
      inputs[ninputs++] = argv[++i];
    } else if (!strcmp(a, "-o") && has_next) {
      outdir = argv[++i];
    } else if (!strcmp(a, "--backend") && has_next) {
      backend = argv[++i];
    } else if (!strcmp(a, "--seed") && has_next) {
      char *end;
      errno = 0;
      seed = strtoull(argv[++i], &end, 10);
      if (errno || *end || argv[i][0] == '-') {
        fprintf(stderr, "error: --seed takes a non-negative integer, not '%s'\n", argv[i]);
        goto done;
      }
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
      quiet = 1;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "error: unknown or incomplete option '%s' (see tpusim run --help)\n", a);
      goto done;
    } else if (!prog) {
      prog = a;
    } else {
      fprintf(stderr, "error: more than one program given ('%s' and '%s')\n", prog, a);
      goto done;
    }
  }
  if (!prog) {
    fprintf(stderr, "error: no program given (usage: tpusim run PROG.hlo [options]; see tpusim run --help)\n");
    goto done;
  }
  if (strcmp(backend, "ref") != 0) {
    fprintf(stderr, "error: unknown backend '%s' (available: ref)\n", backend);
    goto done;
  }

  tpu_diag d;
  memset(&d, 0, sizeof d);
  tpu_module *m = NULL;
  tpu_tensor *args = NULL;
  tpu_tensor result;
  memset(&result, 0, sizeof result);
  const tpu_tensor **leaves = NULL;
  int nargs = 0;
  struct timespec t0, t1;
  if (tpu_hlo_parse_file(prog, &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK) {
    tpu_cli_report(&d);
    goto cleanup;
  }
  const tpu_comp *e = m->entry;
  if (ninputs && ninputs != e->nparams) {
    fprintf(stderr, "%s: error: the entry computation '%s' takes %d parameters; %d inputs were given\n", prog, e->name,
            e->nparams, ninputs);
    goto cleanup;
  }
  args = tpu_calloc((size_t)(e->nparams ? e->nparams : 1), sizeof *args);
  if (!args) {
    fprintf(stderr, "error: out of memory\n");
    goto cleanup;
  }
  uint64_t rng = seed;
  for (nargs = 0; nargs < e->nparams; nargs++) {
    tpu_status st = ninputs ? tpu_ref_load_input(inputs[nargs], nargs, &e->params[nargs]->shape, &args[nargs], &d)
                            : random_value(&args[nargs], &e->params[nargs]->shape, &rng, &d);
    if (st != TPU_OK) {
      tpu_cli_report(&d);
      goto cleanup;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (tpu_ref_run(m, args, nargs, &result, &d) != TPU_OK) {
    tpu_cli_report(&d);
    goto cleanup;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  int nleaves = count_leaves(&result), k = 0;
  leaves = tpu_calloc((size_t)nleaves, sizeof *leaves);
  if (!leaves) {
    fprintf(stderr, "error: out of memory\n");
    goto cleanup;
  }
  collect_leaves(&result, leaves, &k);
  if (outdir && !write_outputs(outdir, leaves, nleaves, &d)) {
    tpu_cli_report(&d);
    rc = 1;
    goto cleanup;
  }
  if (!quiet) {
    printf("%s: module %s, entry %s, %d computation(s), %d input(s)%s\n", prog, m->name, e->name, m->ncomps, nargs,
           ninputs ? "" : " (random)");
    printf("backend ref: %.3f ms\n", (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    for (int i = 0; i < nleaves; i++) {
      char desc[256];
      tpu_ref_describe(leaves[i], desc, sizeof desc);
      printf("result %d: %s", i, desc);
      summary_stats(leaves[i], stdout);
      if (outdir) printf("  -> %s/%d.npy", outdir, i);
      printf("\n");
    }
  }
  rc = 0;
cleanup:
  tpu_free(leaves);
  tpu_tensor_free(&result);
  for (int i = 0; i < nargs; i++) tpu_tensor_free(&args[i]);
  tpu_free(args);
  tpu_module_free(m);
done:
  tpu_free(inputs);
  return rc;
}
