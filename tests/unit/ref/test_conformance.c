/* Conformance against real JAX: every program under tests/conformance/cases runs on the
 * reference interpreter and its results match JAX's (integers and bools exactly; floats
 * within the tolerance of each output |got - want| <= atol + rtol * |want| (the case's, at most
 * 2e-4 / 2e-5 for an f32 output unless meta.json's out_tol names it: cases.h), NaN matching NaN and
 * infinities matching exactly). Set TPU_CONF_ONLY=name to run one case. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "cases.h"
#include "base/npy.h"
#include "check.h"
#include "compare.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "ref/ref.h"

static int file_exists(const char *p) {
  FILE *f = fopen(p, "rb");
  if (f) fclose(f);
  return f != NULL;
}

static void print_diag(const char *what, const tpu_diag *d) {
  char buf[1200];
  tpu_diag_format(d, buf, sizeof buf);
  fprintf(stderr, "  %s: %s\n", what, buf);
}

/* Runs one case; returns 1 if it passes. */
static int run_case(const char *dir, const char *cname) {
  char path[2048];
  tpu_diag d;
  int pass = 0;
  tpu_module *m = NULL;
  tpu_tensor *args = NULL, result;
  memset(&result, 0, sizeof result);
  int nargs = 0;
  double rtol = 1e-5, atol = 1e-5;
  tpu_json_doc meta;
  snprintf(path, sizeof path, "%s/meta.json", dir);
  if (tpu_json_parse_file(path, &meta, &d) == TPU_OK) {
    const tpu_json *tol = tpu_json_get(meta.root, "tol");
    const tpu_json *r = tol ? tpu_json_get(tol, "rtol") : NULL, *a = tol ? tpu_json_get(tol, "atol") : NULL;
    if (r && r->kind == TPU_JSON_NUMBER) rtol = r->num;
    if (a && a->kind == TPU_JSON_NUMBER) atol = a->num;
    tpu_json_doc_free(&meta);
  }
  snprintf(path, sizeof path, "%s/prog.hlo", dir);
  if (tpu_hlo_parse_file(path, &m, &d) != TPU_OK) {
    print_diag("parse", &d);
    goto out;
  }
  if (tpu_ir_verify(m, &d) != TPU_OK) {
    print_diag("verify", &d);
    goto out;
  }
  args = calloc((size_t)m->entry->nparams + 1, sizeof *args);
  for (nargs = 0; nargs < m->entry->nparams; nargs++) {
    snprintf(path, sizeof path, "%s/in%d.npy", dir, nargs);
    if (tpu_ref_load_input(path, nargs, &m->entry->params[nargs]->shape, &args[nargs], &d) != TPU_OK) {
      print_diag("input", &d);
      goto out;
    }
  }
  if (tpu_ref_run(m, args, nargs, &result, &d) != TPU_OK) {
    print_diag("run", &d);
    goto out;
  }
  int n = tpu_tensor_count_leaves(&result), k = 0;
  const tpu_tensor **leaves = calloc((size_t)n, sizeof *leaves);
  tpu_tensor_collect_leaves(&result, leaves);
  long bad = 0;
  int nwant = 0;
  for (k = 0;; k++) {
    snprintf(path, sizeof path, "%s/out%d.npy", dir, k);
    if (!file_exists(path)) break;
    nwant++;
    if (k >= n) continue;
    tpu_tensor want;
    if (tpu_npy_read(path, &want, &d) != TPU_OK) {
      print_diag("expected output", &d);
      bad++;
      continue;
    }
    double r, a; /* per output (tests/cases.h case_out_tol) */
    case_out_tol("tests/conformance/cases", cname, k, leaves[k], rtol, atol, &r, &a);
    bad += test_compare_leaf(cname, k, leaves[k], &want, r, a);
    tpu_tensor_free(&want);
  }
  if (nwant != n) {
    fprintf(stderr, "  %s: %d results, JAX gave %d\n", cname, n, nwant);
    bad++;
  }
  free(leaves);
  pass = bad == 0;
out:
  tpu_tensor_free(&result);
  for (int i = 0; i < nargs; i++) tpu_tensor_free(&args[i]);
  free(args);
  tpu_module_free(m);
  return pass;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void) {
  const char *only = getenv("TPU_CONF_ONLY");
  DIR *dir = opendir("tests/conformance/cases");
  CHECK(dir != NULL);
  if (!dir) CHECK_DONE();
  char *names[1024];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dir)) && n < 1024)
    if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
  closedir(dir);
  qsort(names, (size_t)n, sizeof names[0], cmp_str);
  int passed = 0, ran = 0;
  for (int i = 0; i < n; i++) {
    if (only && strcmp(only, names[i])) {
      free(names[i]);
      continue;
    }
    char path[1024];
    snprintf(path, sizeof path, "tests/conformance/cases/%.900s", names[i]);
    int ok = run_case(path, names[i]);
    printf("%-34s %s\n", names[i], ok ? "ok" : "FAIL");
    passed += ok;
    ran++;
    if (!ok) fprintf(stderr, "FAIL: %s\n", names[i]);
    CHECK(ok);
    free(names[i]);
  }
  printf("%d/%d conformance cases pass\n", passed, ran);
  if (!only) CHECK(ran >= 45);
  CHECK_DONE();
}
