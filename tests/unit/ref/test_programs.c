/* Programs from real libraries (tests/programs: flax linen/nnx, optax, equinox, jax.random,
 * jax.nn, jnp.linalg, layouts, more than 64 parameter leaves, loops, remat, bf16), each as
 * JAX lowered it (prog.hlo) and as XLA optimized it (opt.hlo), on both backends — reference,
 * and TPU at --precision highest — against JAX's values within the case's tolerance.
 * Combinations that fail for a known reason are listed in tests/programs/known_failures.txt
 * ("CASE FILE BACKEND: why"); the test fails on any other failure, on a listed combination
 * that passes and on a listed one that no run names (so the list stays true). */
#include "cases.h"
#include "check.h"

#define CASES "tests/programs/cases"

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
  int runs = 0, passed = 0;
  const char *files[2] = {"prog.hlo", "opt.hlo"};
  for (int i = 0; names && i < n; i++) {
    double rtol, atol;
    case_tol(CASES, names[i], &rtol, &atol);
    for (int f = 0; f < 2; f++)
      for (int b = 0; b < 2; b++) {
        int ok = case_run(&chip, CASES, names[i], files[f], b, rtol, atol);
        runs++;
        passed += ok;
        CHECK(case_known_expect(&known, names[i], files[f], b, ok));
      }
    free(names[i]);
  }
  free(names);
  int listed;
  CHECK_EQ_INT(case_known_unseen(&known, "", &listed), 0);
  case_known_free(&known);
  printf("real-library programs: %d of %d runs match JAX (%d cases x prog/opt x ref/tpu; %d known failures)\n", passed,
         runs, n, listed);
  CHECK(n >= 20);
  CHECK_DONE();
}
