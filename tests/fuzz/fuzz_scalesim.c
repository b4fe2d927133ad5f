/* libFuzzer target for SCALE-Sim inputs (src/chip/scalesim.c): the input is read as a .cfg
 * file and as a conv and a gemm topology CSV; each must end in a clean error located at a
 * line of the input (or 0:0, the file as a whole), or parse, and every parsed layer then
 * runs through the closed-form MXU model on the config's array (or 128 x 128) as
 * `tpusim systolic` does. Built by scripts/fuzz (CMake option TPU_FUZZ). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chip/mxu.h"
#include "chip/scalesim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what, const tpu_diag *d) {
  fprintf(stderr, "fuzz_scalesim: %s (%s:%d:%d: %s)\n", what, d->file, d->line, d->col, d->msg);
  abort();
}

static void check_error(const tpu_diag *d, const char *name) {
  /* a line, or 0:0 for the file as a whole (a missing section) */
  if (strcmp(d->file, name) || d->line < 0 || d->col < 0 || (d->line == 0 && d->col != 0))
    die("an error without a location", d);
  if (!d->msg[0]) die("an empty message", d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tpu_diag d;
  memset(&d, 0, sizeof d);
  const char *text = (const char *)data;
  int64_t R = 128, C = 128;
  tpu_scalesim_config cfg;
  if (tpu_scalesim_config_parse("fuzz.cfg", text, size, &cfg, &d) == TPU_OK) {
    R = cfg.array_rows;
    C = cfg.array_cols;
    (void)tpu_scalesim_config_require_ws(&cfg, &d);
    tpu_scalesim_config_deinit(&cfg);
  } else if (d.status != TPU_ERR_NOMEM) {
    check_error(&d, "fuzz.cfg");
  }
  for (int kind = 0; kind < 2; kind++) {
    tpu_scalesim_topology t;
    memset(&d, 0, sizeof d);
    if (tpu_scalesim_topology_parse("fuzz.csv", text, size, (tpu_scalesim_input)kind, &t, &d) != TPU_OK) {
      if (d.status != TPU_ERR_NOMEM) check_error(&d, "fuzz.csv");
      continue;
    }
    for (int64_t i = 0; i < t.n && i < 64; i++) {
      const tpu_scalesim_layer *l = &t.layers[i];
      tpu_mxu_cycles c;
      for (int mode = 0; mode < 2; mode++)
        if (tpu_mxu_tile_cycles(R, C, l->M, l->K, l->N, mode ? TPU_WLOAD_DOUBLE : TPU_WLOAD_SERIAL, &c, &d) == TPU_OK) {
          tpu_scalesim_row row;
          tpu_scalesim_row_from_cycles(&c, R, C, &row);
        }
    }
    tpu_scalesim_topology_deinit(&t);
  }
  return 0;
}
