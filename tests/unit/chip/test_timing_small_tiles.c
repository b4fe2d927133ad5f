/* Kernels that move tiles of less than one vector register (copy_kind.c tpu__relayout_tiles):
 * a compiled program's pad within VMEM into packed tiles of half a register (bf16
 * T(8,128)(2,1)) or a quarter (s8 T(8,128)(4,1)) costs relayout_tile_cycles per result tile
 * after its start, as the XLA TPU compiler's pads do (libtpu probes off the families corpus,
 * bench/fidelity/probes/small_tiles.py: bf16[304,6,128] within VMEM, 304 tiles, 5,824 cycles on
 * v5e and 3,710 on v6e); the same pad of f32 (whole-register tiles) does not. Run on the v5e
 * and v6e presets as they are. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "chip/program.h"
#include "chip/timing.h"
#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "timing_util.h"

/* The compiled form: the pad's operand and result in VMEM (S(1)), a consumer writing HBM. */
static double pad_cycles(const tpu_chip *chip, const char *dt, const char *tile) {
  char src[640];
  snprintf(src, sizeof src,
           "HloModule m\nENTRY e {\n x = %s[300,6,128]{2,1,0:%s} parameter(0)\n z = %s[] constant(0)\n"
           " p = %s[300,6,128]{2,1,0:%sS(1)} negate(x)\n"
           " q = %s[304,6,128]{2,1,0:%sS(1)} pad(p, z), padding=0_4x0_0x0_0\n"
           " ROOT n = %s[304,6,128]{2,1,0:%s} negate(q)\n}\n",
           dt, tile, dt, dt, tile, dt, tile, dt, tile);
  tpu_program *p = compile_src(src, chip, -1);
  CHECK(p != NULL);
  double c = p ? op_cycles(p, chip, "q") : -1;
  tpu_program_free(p);
  return c;
}

static void pad_into_packed_tiles(const char *name) {
  tpu_chip chip, off;
  tpu_diag d;
  if (tpu_chip_load(name, &chip, &d) != TPU_OK) {
    CHECK(0);
    return;
  }
  CHECK(chip.relayout_tile_cycles > 0);
  off = chip;
  off.relayout_tile_cycles = 0;
  const double kov = chip.kernel_overhead_s * chip.clock_hz, f = kov + hbm_lat(&chip) + 304 * chip.relayout_tile_cycles;
  double bf = pad_cycles(&chip, "bf16", "T(8,128)(2,1)"), s8 = pad_cycles(&chip, "s8", "T(8,128)(4,1)");
  double bf_off = pad_cycles(&off, "bf16", "T(8,128)(2,1)");
  double f32 = pad_cycles(&chip, "f32", "T(8,128)"), f32_off = pad_cycles(&off, "f32", "T(8,128)");
  double bf16_whole = pad_cycles(&chip, "bf16", "T(16,128)(2,1)");
  printf("%s: pad within VMEM to [304,6,128]: bf16 T(8,128)(2,1) %.0f cycles, floor %.0f (the compiler: v5e 5,824,"
         " v6e 3,710), without relayout_tile_cycles %.0f; s8 T(8,128)(4,1) %.0f; f32 T(8,128) %.0f (without %.0f);"
         " bf16 T(16,128)(2,1) %.0f\n",
         name, bf, f, bf_off, s8, f32, f32_off, bf16_whole);
  CHECK(bf >= f && bf < 1.1 * f);
  CHECK(s8 >= f && s8 < 1.1 * f);
  CHECK(bf_off > 0 && bf_off < 0.8 * f);
  CHECK(f32 > 0 && f32 == f32_off); /* whole registers: no tile cost */
  CHECK(bf16_whole > 0 && bf16_whole < 0.8 * f);
}

int main(void) {
  pad_into_packed_tiles("v5e");
  pad_into_packed_tiles("v6e");
  CHECK_DONE();
}
