/* The differential family for XLA's optimized programs: every conformance case's opt.hlo
 * (XLA CPU's post-optimization HLO of the same JAX program: fusions, layouts, bitcasts
 * between layouts, scheduled, custom calls) on both backends — reference, and TPU at
 * --precision highest — must give JAX's values within the case's tolerance, as its
 * prog.hlo does (test_conformance). A value that depends on something tpusim ignores
 * (a layout, a custom call) fails here. Cases lowered for TPU only (linalg: XLA CPU would
 * call LAPACK) have no opt.hlo. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/npy.h"
#include "check.h"
#include "chip/chip.h"
#include "chip/exec.h"
#include "compare.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "ref/ref.h"

#define CASES "tests/conformance/cases"

static tpu_chip g_chip;

static int run(const char *cname, int backend, double rtol, double atol) {
  char path[1024];
  tpu_diag d;
  snprintf(path, sizeof path, CASES "/%s/opt.hlo", cname);
  tpu_module *m = NULL;
  if (tpu_hlo_parse_file(path, &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK) {
    fprintf(stderr, "  %s: %s (line %d)\n", path, d.msg, d.line);
    tpu_module_free(m);
    return 0;
  }
  int n = m->entry->nparams, ok = 1;
  tpu_tensor *args = calloc((size_t)n + 1, sizeof *args);
  for (int i = 0; ok && i < n; i++) {
    snprintf(path, sizeof path, CASES "/%s/in%d.npy", cname, i);
    if (tpu_ref_load_input(path, i, &m->entry->params[i]->shape, &args[i], &d) != TPU_OK) {
      fprintf(stderr, "  %s: %s\n", path, d.msg);
      ok = 0;
    }
  }
  tpu_tensor res;
  memset(&res, 0, sizeof res);
  if (ok && (backend ? tpu_chip_run_values(m, &g_chip, TPU_PREC_HIGHEST, args, n, &res, &d)
                     : tpu_ref_run(m, args, n, &res, &d)) != TPU_OK) {
    fprintf(stderr, "  %s opt.hlo (%s): %s\n", cname, backend ? "tpu" : "ref", d.msg);
    ok = 0;
  }
  if (ok) {
    int nl = tpu_tensor_count_leaves(&res);
    const tpu_tensor **leaves = calloc((size_t)nl + 1, sizeof *leaves);
    tpu_tensor_collect_leaves(&res, leaves);
    int k = 0;
    for (;; k++) {
      snprintf(path, sizeof path, CASES "/%s/out%d.npy", cname, k);
      FILE *f = fopen(path, "rb");
      if (!f) break;
      fclose(f);
      tpu_tensor want;
      if (k >= nl || tpu_npy_read(path, &want, &d) != TPU_OK) {
        ok = 0;
        break;
      }
      char label[256];
      snprintf(label, sizeof label, "%s opt.hlo (%s)", cname, backend ? "tpu" : "ref");
      if (test_compare_leaf(label, k, leaves[k], &want, rtol, atol)) ok = 0;
      tpu_tensor_free(&want);
    }
    if (k != nl) {
      fprintf(stderr, "  %s: %d results, JAX gave %d\n", cname, nl, k);
      ok = 0;
    }
    free(leaves);
  }
  tpu_tensor_free(&res);
  for (int i = 0; i < n; i++) tpu_tensor_free(&args[i]);
  free(args);
  tpu_module_free(m);
  return ok;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void) {
  tpu_diag d;
  if (tpu_chip_load("v5e", &g_chip, &d) != TPU_OK) return 1;
  DIR *dir = opendir(CASES);
  CHECK(dir != NULL);
  if (!dir) return 1;
  char *names[512];
  int n = 0;
  for (struct dirent *e; (e = readdir(dir)) && n < 512;)
    if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
  closedir(dir);
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  int runs = 0, passed = 0, cases = 0;
  for (int i = 0; i < n; i++) {
    char path[512];
    snprintf(path, sizeof path, CASES "/%s/opt.hlo", names[i]);
    FILE *f = fopen(path, "rb");
    if (f) {
      fclose(f);
      cases++;
      double rtol = 1e-5, atol = 1e-5;
      tpu_json_doc doc;
      snprintf(path, sizeof path, CASES "/%s/meta.json", names[i]);
      if (tpu_json_parse_file(path, &doc, &d) == TPU_OK) {
        const tpu_json *tol = tpu_json_get(doc.root, "tol");
        const tpu_json *r = tol ? tpu_json_get(tol, "rtol") : NULL, *a = tol ? tpu_json_get(tol, "atol") : NULL;
        if (r && r->kind == TPU_JSON_NUMBER) rtol = r->num;
        if (a && a->kind == TPU_JSON_NUMBER) atol = a->num;
        tpu_json_doc_free(&doc);
      }
      for (int b = 0; b < 2; b++) {
        runs++;
        passed += run(names[i], b, rtol, atol);
      }
    }
    free(names[i]);
  }
  printf("XLA's optimized programs: %d of %d runs match JAX (%d cases, reference and TPU backends)\n", passed, runs,
         cases);
  CHECK(cases >= 60);
  CHECK_EQ_INT(passed, runs);
  CHECK_DONE();
}
