/* Programs from real libraries (tests/programs: flax linen/nnx, optax, equinox, jax.random,
 * jax.nn, jnp.linalg, layouts, more than 64 parameter leaves, loops), each as JAX lowered it
 * (prog.hlo) and as XLA optimized it (opt.hlo), on both backends against JAX's values.
 * Combinations that fail for a known reason are listed in tests/programs/known_failures.txt
 * ("CASE FILE BACKEND: why"); the test fails on any other failure and on a listed
 * combination that passes (so the list stays true). */
#include "cases.h"
#include "check.h"
#include "util.h"

#define CASES "tests/programs/cases"

int main(void) {
  tpu_diag d;
  tpu_chip chip;
  if (tpu_chip_load("v5e", &chip, &d) != TPU_OK) return 1;
  char *known = test_read_file("tests/programs/known_failures.txt");
  int n;
  char **names = case_list(CASES, &n);
  CHECK(names != NULL);
  int runs = 0, passed = 0, expected_fail = 0;
  const char *files[2] = {"prog.hlo", "opt.hlo"};
  for (int i = 0; names && i < n; i++) {
    double rtol, atol;
    case_tol(CASES, names[i], &rtol, &atol);
    for (int f = 0; f < 2; f++)
      for (int b = 0; b < 2; b++) {
        char key[300];
        snprintf(key, sizeof key, "\n%s %s %s:", names[i], files[f], b ? "tpu" : "ref");
        int listed = known && strstr(known, key) != NULL;
        runs++;
        int ok = case_run(&chip, CASES, names[i], files[f], b, rtol, atol);
        passed += ok;
        if (listed) {
          expected_fail++;
          if (ok) fprintf(stderr, "  %s passes but is listed in known_failures.txt\n", key + 1);
          CHECK(!ok);
        } else {
          CHECK(ok);
        }
      }
    free(names[i]);
  }
  free(names);
  free(known);
  printf("real-library programs: %d of %d runs match JAX (%d cases x prog/opt x ref/tpu; %d known failures)\n", passed,
         runs, n, expected_fail);
  CHECK(n >= 15);
  CHECK_DONE();
}
