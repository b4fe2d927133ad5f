/* v4's sublane relayout copies (tile.c relayout_tiles, chips/v4.json relayout_tile_cycles):
 * a compiled program's copy that keeps the lanes' dimension and reorders the others, with its
 * on-chip side in CMEM (S(3), where the XLA TPU compiler keeps v4's values between kernels),
 * lasts its start plus relayout_tile_cycles per tile of its result (libtpu v4 compilation of
 * dilconv_b2_28x28_c64to256_k3d2: the result copy into bf16[2,28,28,256]{3,0,2,1:T(2,128)},
 * 1,568 tiles, 21,368 cycles); the same copy between HBM arrays is no such kernel. */
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

/* x copied into `mid` (its memory space), then relaid out into {3,0,2,1:T(2,128)} in HBM */
static double relayout_cycles(const tpu_chip *c, const char *mid) {
  char src[1024];
  snprintf(src, sizeof src,
           "HloModule m\nENTRY e {\n p = bf16[2,28,28,256]{3,2,0,1:T(8,128)(2,1)} parameter(0)\n"
           " a = bf16[2,28,28,256]{3,2,0,1:T(8,128)(2,1)%s} copy(p)\n"
           " ROOT b = bf16[2,28,28,256]{3,0,2,1:T(2,128)(2,1)} copy(a)\n}\n",
           mid);
  tpu_program *p = compile_src(src, c, -1);
  CHECK(p != NULL);
  double t = p ? op_cycles(p, c, "b") : -1;
  tpu_program_free(p);
  return t;
}

int main(void) {
  tpu_chip v4, off;
  tpu_diag d;
  if (tpu_chip_load("v4:core", &v4, &d) != TPU_OK) {
    fprintf(stderr, "cannot load v4:core\n");
    return 1;
  }
  CHECK(v4.relayout_tile_cycles > 0);
  off = v4;
  off.relayout_tile_cycles = 0;
  const double floor = v4.kernel_overhead_s * v4.clock_hz + 1568 * v4.relayout_tile_cycles;
  double cmem = relayout_cycles(&v4, "S(3)"), vmem = relayout_cycles(&v4, "S(1)");
  double none = relayout_cycles(&off, "S(3)"), hbm = relayout_cycles(&v4, "");
  printf("v4 bf16[2,28,28,256] into T(2,128) tiles from CMEM: %.0f cycles, from VMEM %.0f, floor %.0f"
         " (the compiler: 21,368); without relayout_tile_cycles %.0f; HBM to HBM %.0f\n",
         cmem, vmem, floor, none, hbm);
  CHECK(cmem >= floor && cmem < 1.1 * floor);
  CHECK(vmem >= floor && vmem < 1.1 * floor);
  CHECK(none > 0 && none < 0.8 * floor);
  CHECK(hbm > 0 && hbm < 0.8 * floor);
  CHECK_DONE();
}
