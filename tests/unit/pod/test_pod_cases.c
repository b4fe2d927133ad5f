/* The pod corpus (tests/pod/cases, made by tests/pod/gen.py from JAX on 8 CPU devices):
 * every case's XLA-partitioned program (opt.hlo) on the pod executor — reference and TPU
 * backends — and its unpartitioned program (prog.hlo) partitioned by tpusim's own
 * spmd-partition, each from the global inputs to the global results, against JAX's
 * results (which gen.py checked equal the unsharded function's) within the case's
 * tolerance (0: bit-identical). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/npy.h"
#include "check.h"
#include "chip/chip.h"
#include "compare.h"
#include "compile/spmd/spmd.h"
#include "ir/collective.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "pod/podio.h"
#include "util.h"

#define CASES "tests/pod/cases"

static tpu_chip g_chip;

static int exists(const char *p) {
  FILE *f = fopen(p, "rb");
  if (f) fclose(f);
  return f != NULL;
}

/* Runs one program of a case; returns 1 if every result matches. */
static int run(const char *cname, const char *file, int partition, int backend, double rtol, double atol) {
  char path[1024];
  tpu_diag d;
  snprintf(path, sizeof path, CASES "/%s/%s", cname, file);
  tpu_module *m = NULL;
  if (tpu_hlo_parse_file(path, &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK ||
      (partition && tpu_spmd_partition(m, NULL, &d) != TPU_OK)) {
    fprintf(stderr, "  %s/%s: %s (line %d)\n", cname, file, d.msg, d.line);
    tpu_module_free(m);
    return 0;
  }
  if (partition && tpu_module_device_count(m) < 2) { /* values from one chip would prove nothing here */
    fprintf(stderr, "  %s/%s: not partitioned (one device)\n", cname, file);
    tpu_module_free(m);
    return 0;
  }
  /* XLA's text omits the results' shardings: take them from the case (tpusim's own
   * partitioning writes them on the root). */
  const char *lines[64];
  int nl = 0;
  char *sh = NULL;
  if (!partition) {
    snprintf(path, sizeof path, CASES "/%s/shardings", cname);
    sh = test_read_file(path);
    for (char *l = sh ? strtok(sh, "\n") : NULL; l && nl < 64; l = strtok(NULL, "\n")) lines[nl++] = l;
  }
  tpu_podio pc;
  int ok = tpu_podio_prepare(m, lines, nl, &pc, &d) == TPU_OK;
  if (!ok) fprintf(stderr, "  %s/%s: %s\n", cname, file, d.msg);
  tpu_tensor args[64];
  int nargs = 0;
  for (; ok && nargs < m->entry->nparams && nargs < 64; nargs++) {
    snprintf(path, sizeof path, CASES "/%s/in%d.npy", cname, nargs);
    if (tpu_podio_load(&pc, m, nargs, path, &args[nargs], &d) != TPU_OK) {
      fprintf(stderr, "  %s/%s: input %d: %s\n", cname, file, nargs, d.msg);
      ok = 0;
      break;
    }
  }
  tpu_tensor res;
  memset(&res, 0, sizeof res);
  if (ok && tpu_podio_values(&pc, m, backend ? &g_chip : NULL, backend ? TPU_PREC_HIGHEST : -1, args, nargs, NULL, &res,
                             NULL, &d) != TPU_OK) {
    fprintf(stderr, "  %s/%s (%s): %s\n", cname, file, backend ? "tpu" : "ref", d.msg);
    ok = 0;
  }
  if (ok) {
    const tpu_tensor *leaves[64];
    int n = tpu_tensor_count_leaves(&res);
    ok = n <= 64;
    if (ok) tpu_tensor_collect_leaves(&res, leaves);
    for (int k = 0; ok && k < n; k++) {
      tpu_tensor want;
      snprintf(path, sizeof path, CASES "/%s/out%d.npy", cname, k);
      if (tpu_npy_read(path, &want, &d) != TPU_OK) {
        fprintf(stderr, "  %s: %s\n", path, d.msg);
        ok = 0;
        break;
      }
      char label[256];
      snprintf(label, sizeof label, "%s/%s (%s)", cname, file, backend ? "tpu" : "ref");
      if (test_compare_leaf(label, k, leaves[k], &want, rtol, atol)) ok = 0;
      tpu_tensor_free(&want);
    }
  }
  tpu_tensor_free(&res);
  for (int i = 0; i < nargs; i++) tpu_tensor_free(&args[i]);
  tpu_podio_free(&pc);
  free(sh);
  tpu_module_free(m);
  return ok;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void) {
  tpu_diag d;
  if (tpu_chip_load("v5e", &g_chip, &d) != TPU_OK) {
    fprintf(stderr, "chip: %s\n", d.msg);
    return 1;
  }
  DIR *dir = opendir(CASES);
  CHECK(dir != NULL);
  if (!dir) return 1;
  char *names[256];
  int n = 0;
  for (struct dirent *e; (e = readdir(dir)) && n < 256;)
    if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
  closedir(dir);
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  int runs = 0, passed = 0;
  for (int i = 0; i < n; i++) {
    char path[512];
    snprintf(path, sizeof path, CASES "/%s/meta.json", names[i]);
    tpu_json_doc doc;
    double rtol = 1e-5, atol = 1e-5;
    if (tpu_json_parse_file(path, &doc, &d) == TPU_OK) {
      const tpu_json *r = tpu_json_get(doc.root, "rtol"), *a = tpu_json_get(doc.root, "atol");
      if (r && r->kind == TPU_JSON_NUMBER) rtol = r->num;
      if (a && a->kind == TPU_JSON_NUMBER) atol = a->num;
      tpu_json_doc_free(&doc);
    }
    for (int backend = 0; backend < 2; backend++) {
      runs++;
      passed += run(names[i], "opt.hlo", 0, backend, rtol, atol);
    }
    snprintf(path, sizeof path, CASES "/%s/prog.hlo", names[i]);
    if (exists(path)) {
      runs++;
      passed += run(names[i], "prog.hlo", 1, 0, rtol, atol);
    }
    snprintf(path, sizeof path, CASES "/%s/prog_gspmd.hlo", names[i]); /* GSPMD form: no mesh, shardings only */
    if (exists(path)) {
      runs++;
      passed += run(names[i], "prog_gspmd.hlo", 1, 0, rtol, atol);
    }
    free(names[i]);
  }
  printf("pod corpus: %d of %d runs match JAX (%d cases: opt.hlo on ref and tpu, prog.hlo and prog_gspmd.hlo "
         "partitioned by tpusim)\n",
         passed, runs, n);
  CHECK(n >= 20);
  CHECK_EQ_INT(passed, runs);
  CHECK_DONE();
}
