/* The bundled pod examples (examples/pod: XLA's partitioned programs for 8 and 64 devices)
 * from global inputs to global results, against the values JAX computed: the reference
 * backend within f32 rounding, the TPU backend at --precision highest within the same
 * tolerance (six bf16 passes carry f32 accuracy); and the real TPU compiler's partitioned
 * output for a v5e 2x4 slice (tiled layouts, copy-start/copy-done) on the TPU backend. */
#include <stdio.h>
#include <string.h>

#include "base/npy.h"
#include "check.h"
#include "chip/chip.h"
#include "compare.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "pod/podio.h"
#include "util.h"

static tpu_chip g_chip;

static void run_example(const char *name, int backends, double rtol, double atol) {
  char path[512];
  tpu_diag d;
  snprintf(path, sizeof path, "examples/pod/%s.hlo", name);
  tpu_module *m = NULL;
  if (tpu_hlo_parse_file(path, &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK) {
    fprintf(stderr, "%s: %s\n", path, d.msg);
    CHECK(0);
    tpu_module_free(m);
    return;
  }
  snprintf(path, sizeof path, "examples/pod/%s.shardings", name);
  char *sh = test_read_file(path);
  CHECK(sh != NULL);
  const char *lines[16];
  int nl = 0;
  for (char *l = sh ? strtok(sh, "\n") : NULL; l && nl < 16; l = strtok(NULL, "\n")) lines[nl++] = l;
  tpu_podio pc;
  CHECK(tpu_podio_prepare(m, lines, nl, &pc, &d) == TPU_OK);
  snprintf(path, sizeof path, "examples/pod/%s.inputs", name);
  char *inl = test_read_file(path);
  CHECK(inl != NULL);
  tpu_tensor args[8];
  int nargs = 0;
  for (char *l = inl ? strtok(inl, "\n") : NULL; l && nargs < 8; l = strtok(NULL, "\n")) {
    snprintf(path, sizeof path, "examples/pod/%s", l);
    CHECK(tpu_podio_load(&pc, m, nargs, path, &args[nargs], &d) == TPU_OK);
    nargs++;
  }
  CHECK(nargs == m->entry->nparams);
  tpu_tensor res[2];
  memset(res, 0, sizeof res);
  for (int backend = 0; backend < 2; backend++) {
    if (!(backends & (1 << backend))) continue;
    tpu_status st = tpu_podio_values(&pc, m, backend ? &g_chip : NULL, backend ? TPU_PREC_HIGHEST : -1, args, nargs,
                                     NULL, &res[backend], NULL, &d);
    CHECK(st == TPU_OK);
    if (st != TPU_OK) {
      fprintf(stderr, "%s (%s): %s\n", name, backend ? "tpu" : "ref", d.msg);
      memset(&res[backend], 0, sizeof res[backend]);
      continue;
    }
    const tpu_tensor *leaves[16];
    int n = tpu_tensor_count_leaves(&res[backend]);
    CHECK(n == pc.nout && n <= 16);
    tpu_tensor_collect_leaves(&res[backend], leaves);
    for (int k = 0; k < n && k < 16; k++) {
      tpu_tensor want;
      snprintf(path, sizeof path, "examples/pod/%s.out%d.npy", name, k);
      CHECK(tpu_npy_read(path, &want, &d) == TPU_OK);
      long bad = test_compare_leaf(name, k, leaves[k], &want, rtol, atol);
      if (bad) fprintf(stderr, "%s (%s) result %d: %ld element(s) off\n", name, backend ? "tpu" : "ref", k, bad);
      CHECK(bad == 0);
      tpu_tensor_free(&want);
    }
  }
  tpu_tensor_free(&res[0]);
  tpu_tensor_free(&res[1]);
  for (int i = 0; i < nargs; i++) tpu_tensor_free(&args[i]);
  tpu_podio_free(&pc);
  free(sh);
  free(inl);
  tpu_module_free(m);
}

int main(void) {
  tpu_diag d;
  if (tpu_chip_load("v5e", &g_chip, &d) != TPU_OK) {
    fprintf(stderr, "chip: %s\n", d.msg);
    return 1;
  }
  run_example("mlp", 3, 1e-5, 1e-6);
  run_example("dp64", 3, 1e-5, 1e-6);
  /* XLA TPU's own partitioned output (bf16 gradients; JAX on CPU rounds in other places):
   * within two bf16 ulps of the largest gradient. */
  run_example("tpu_fsdp", 2, 1e-2, 2e-6);
  CHECK_DONE();
}
