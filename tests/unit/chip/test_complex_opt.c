/* XLA's optimized HLO (opt.hlo: fusions, scheduled, metadata) of the complex and FFT
 * conformance cases runs on the reference interpreter and on the chip executor, and both
 * agree with JAX's outputs within each case's tolerance (complex leaves by modulus). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/npy.h"
#include "chip/chip.h"
#include "chip/exec.h"
#include "check.h"
#include "compare.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "ref/ref.h"

static tpu_chip g_chip;

static void print_diag(const char *what, const tpu_diag *d) {
  char buf[1200];
  tpu_diag_format(d, buf, sizeof buf);
  fprintf(stderr, "  %s: %s\n", what, buf);
}

/* Mismatching elements of `got`'s leaves against dir/out<k>.npy (-1 if they cannot be compared). */
static long compare_outputs(const char *dir, const char *what, const tpu_tensor *got, double rtol, double atol) {
  int n = tpu_tensor_count_leaves(got);
  const tpu_tensor **leaves = calloc((size_t)n, sizeof *leaves);
  tpu_tensor_collect_leaves(got, leaves);
  long bad = 0;
  int k;
  for (k = 0; k < n; k++) {
    char path[1024];
    tpu_tensor want;
    tpu_diag d;
    snprintf(path, sizeof path, "%s/out%d.npy", dir, k);
    if (tpu_npy_read(path, &want, &d) != TPU_OK) {
      print_diag(what, &d);
      bad = -1;
      break;
    }
    bad += test_compare_leaf(what, k, leaves[k], &want, rtol, atol);
    tpu_tensor_free(&want);
  }
  free(leaves);
  return bad;
}

static void run_case(const char *name) {
  char dir[256], path[512];
  snprintf(dir, sizeof dir, "tests/conformance/cases/%s", name);
  tpu_diag d;
  double rtol = 0, atol = 0;
  tpu_json_doc meta;
  snprintf(path, sizeof path, "%s/meta.json", dir);
  CHECK(tpu_json_parse_file(path, &meta, &d) == TPU_OK);
  const tpu_json *tol = tpu_json_get(meta.root, "tol");
  const tpu_json *r = tol ? tpu_json_get(tol, "rtol") : NULL, *a = tol ? tpu_json_get(tol, "atol") : NULL;
  if (r && r->kind == TPU_JSON_NUMBER) rtol = r->num;
  if (a && a->kind == TPU_JSON_NUMBER) atol = a->num;
  tpu_json_doc_free(&meta);
  CHECK(rtol > 0 && atol > 0);
  tpu_module *m = NULL;
  snprintf(path, sizeof path, "%s/opt.hlo", dir);
  if (tpu_hlo_parse_file(path, &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK) {
    print_diag(name, &d);
    CHECK(0);
    tpu_module_free(m);
    return;
  }
  int np = m->entry->nparams, nargs;
  tpu_tensor *args = calloc((size_t)np + 1, sizeof *args);
  for (nargs = 0; nargs < np; nargs++) {
    snprintf(path, sizeof path, "%s/in%d.npy", dir, nargs);
    if (tpu_ref_load_input(path, nargs, &m->entry->params[nargs]->shape, &args[nargs], &d) != TPU_OK) {
      print_diag(name, &d);
      break;
    }
  }
  CHECK_EQ_INT(nargs, np);
  if (nargs == np) {
    tpu_tensor ref, chip;
    int ok1 = tpu_ref_run(m, args, nargs, &ref, &d) == TPU_OK;
    if (!ok1) print_diag(name, &d);
    int ok2 = tpu_chip_run_values(m, &g_chip, -1, args, nargs, &chip, &d) == TPU_OK;
    if (!ok2) print_diag(name, &d);
    CHECK(ok1 && ok2);
    char what[300];
    snprintf(what, sizeof what, "%s opt.hlo (ref)", name);
    if (ok1) CHECK_EQ_INT(compare_outputs(dir, what, &ref, rtol, atol), 0);
    snprintf(what, sizeof what, "%s opt.hlo (tpu)", name);
    if (ok2) CHECK_EQ_INT(compare_outputs(dir, what, &chip, rtol, atol), 0);
    if (ok1) tpu_tensor_free(&ref);
    if (ok2) tpu_tensor_free(&chip);
  }
  for (int i = 0; i < nargs; i++) tpu_tensor_free(&args[i]);
  free(args);
  tpu_module_free(m);
}

int main(void) {
  tpu_diag d;
  if (tpu_chip_load("v5e", &g_chip, &d) != TPU_OK) {
    fprintf(stderr, "cannot load v5e\n");
    return 1;
  }
  const char *cases[] = {"fft_c2c", "fft_real", "fft_nd", "complex_elementwise", "complex_reduce_dot"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(cases[i]);
  CHECK_DONE();
}
