/* The differential family for XLA's optimized programs: every conformance case's opt.hlo
 * (XLA CPU's post-optimization HLO of the same JAX program: fusions, layouts, bitcasts
 * between layouts, scheduled, custom calls) on both backends — reference, and TPU at
 * --precision highest — must give JAX's values within the case's tolerance, as its
 * prog.hlo does (test_conformance). A value that depends on something tpusim ignores
 * (a layout, a custom call) fails here. Runs that fail for a known reason are listed in
 * tests/programs/known_failures.txt as "conformance/NAME opt.hlo BACKEND: why" (a listed run
 * that passes fails the test). The cases lowered for TPU (linalg_*) have XLA CPU's program for
 * the same TPU lowering (tests/conformance/gen_linalg_opt.py: cholesky and triangular-solve
 * expanded into while loops). */
#include "cases.h"
#include "check.h"

#define CASES "tests/conformance/cases"

int main(void) {
  tpu_diag d;
  tpu_chip chip;
  if (tpu_chip_load("v5e", &chip, &d) != TPU_OK) return 1;
  case_known known;
  case_known_load("tests/programs/known_failures.txt", &known);
  CHECK(known.text != NULL);
  int n;
  char **names = case_list(CASES, &n);
  CHECK(names != NULL);
  int runs = 0, passed = 0, cases = 0;
  for (int i = 0; names && i < n; i++) {
    if (case_has(CASES, names[i], "opt.hlo")) {
      cases++;
      double rtol, atol;
      case_tol(CASES, names[i], &rtol, &atol);
      char key[300];
      snprintf(key, sizeof key, "conformance/%s", names[i]);
      for (int b = 0; b < 2; b++) {
        int ok = case_run(&chip, CASES, names[i], "opt.hlo", b, rtol, atol);
        runs++;
        passed += ok;
        CHECK(case_known_expect(&known, key, "opt.hlo", b, ok));
      }
    }
    free(names[i]);
  }
  free(names);
  int listed;
  CHECK_EQ_INT(case_known_unseen(&known, "conformance/", &listed), 0);
  case_known_free(&known);
  printf("XLA's optimized programs: %d of %d runs match JAX (%d cases, reference and TPU backends; %d known failures)\n",
         passed, runs, cases, listed);
  CHECK(cases >= 60);
  CHECK_DONE();
}
