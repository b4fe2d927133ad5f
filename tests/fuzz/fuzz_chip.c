/* libFuzzer target for chip files (src/chip/chip.c on src/base/json.c): any bytes must end
 * in a clean error located at a line and column of the input, or a chip whose every number
 * lies in its documented range; a chip that loads then compiles and times a small program
 * (a matmul, a reduce, an elementwise op) without a crash or sanitizer report. Built by
 * scripts/fuzz (CMake option TPU_FUZZ). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chip/chip.h"
#include "chip/program.h"
#include "chip/timing.h"
#include "compile/compile.h"
#include "hlo/hlo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char k_prog[] =
    "HloModule fuzz_chip\n"
    "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
    "ENTRY e {\n"
    "  x = bf16[256,512]{1,0} parameter(0)\n"
    "  w = bf16[512,384]{1,0} parameter(1)\n"
    "  y = f32[256,384]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  t = f32[256,384]{1,0} tanh(y)\n"
    "  z = f32[] constant(0)\n"
    "  ROOT r = f32[256]{0} reduce(t, z), dimensions={1}, to_apply=add\n"
    "}\n";

static void die(const char *what, const tpu_diag *d) {
  fprintf(stderr, "fuzz_chip: %s (%s:%d:%d: %s)\n", what, d->file, d->line, d->col, d->msg);
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tpu_diag d;
  memset(&d, 0, sizeof d);
  tpu_chip chip;
  if (tpu_chip_load_text("fuzz.json", (const char *)data, size, &chip, &d) != TPU_OK) {
    if (strcmp(d.file, "fuzz.json") || d.line < 1 || d.col < 1) die("an error without a line and column", &d);
    if (!d.msg[0]) die("an empty message", &d);
    return 0;
  }
  for (int f = 0; f < TPU_CHIP_NFIELDS; f++) {
    char k = tpu_chip_field_kind((tpu_chip_field)f);
    if ((k != 'f' && k != 'i') || !tpu_chip_known(&chip, (tpu_chip_field)f)) continue;
    double lo, hi, v = tpu_chip_value(&chip, (tpu_chip_field)f);
    tpu_chip_field_range((tpu_chip_field)f, &lo, &hi);
    if (!(v >= lo && v <= hi)) die("a value outside its range was accepted", &d);
  }
  tpu_module *m = NULL;
  if (tpu_hlo_parse("fuzz_chip.hlo", k_prog, sizeof k_prog - 1, &m, &d) != TPU_OK) die("the program", &d);
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = &chip;
  o.precision_override = -1;
  tpu_program *p = NULL;
  if (tpu_compile(m, &o, &p, &d) == TPU_OK) {
    tpu_timeline tl;
    memset(&tl, 0, sizeof tl);
    (void)tpu_timing_run(p, &chip, 0, &tl, &d);
    tpu_timeline_free(&tl);
  }
  tpu_program_free(p);
  tpu_module_free(m);
  return 0;
}
