/* A compiled program's copy of 32-bit values that keeps the lanes' dimension and gathers tiles of
 * fewer than 8 rows into whole registers (copy_kind.c whole_register_gather_tiles, the chips'
 * whole_relayout_tile_cycles and whole_relayout_window_cycles): the XLA TPU compiler's copy
 * merging a grouped convolution's f32 split result [B,H,W,G,Cog] {4,0,3,2,1:T(2,128)} (the
 * batch in the sublanes) into {4,3,0,2,1:T(8,128)} (the groups in the sublanes). Within VMEM
 * on v5e and v6e it costs no kernel start, 16 cycles a window and 0.5 a result tile (libtpu
 * probes off the families corpus, bench/fidelity/probes/gconv_merge.py: f32[2,10,10,8,32], 200
 * tiles, 116 cycles on v5e and v6e; [2,12,12,8,64], 288 tiles, 160); v4 keeps both sides in
 * CMEM and pays a relayout of two half-register units a tile ([2,10,10,8,32]: 6,251). Without
 * the rule tpusim charged v5e a kernel start, about 1,800 cycles. */
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

/* f32[B,H,H,G,C] in `from` tiles in memory space `sp` copied into T(8,128) tiles there: the
 * copy's cycles on c */
static double merge_cycles(const tpu_chip *c, int b, int h, int g, int cog, const char *sp) {
  char src[1024];
  snprintf(src, sizeof src,
           "HloModule m\nENTRY e {\n p = f32[%d,%d,%d,%d,%d]{4,0,3,2,1:T(%d,128)} parameter(0)\n"
           " a = f32[%d,%d,%d,%d,%d]{4,0,3,2,1:T(%d,128)%s} copy(p)\n"
           " ROOT m = f32[%d,%d,%d,%d,%d]{4,3,0,2,1:T(8,128)%s} copy(a)\n}\n",
           b, h, h, g, cog, b, b, h, h, g, cog, b, sp, b, h, h, g, cog, sp);
  tpu_program *p = compile_src(src, c, -1);
  CHECK(p != NULL);
  double t = p ? op_cycles(p, c, "m") : -1;
  tpu_program_free(p);
  return t;
}

static void load(const char *name, tpu_chip *c, tpu_chip *off) {
  tpu_diag d;
  if (tpu_chip_load(name, c, &d) != TPU_OK) {
    fprintf(stderr, "cannot load %s\n", name);
    CHECK(0);
  }
  *off = *c;
  off->whole_relayout_tile_cycles = 0;
}

int main(void) {
  tpu_chip v5e, v5e_off, v6e, v6e_off, v4, v4_off;
  load("v5e", &v5e, &v5e_off);
  load("v6e", &v6e, &v6e_off);
  load("v4:core", &v4, &v4_off);
  CHECK(v5e.whole_relayout_tile_cycles > 0 && v6e.whole_relayout_tile_cycles > 0);
  double a = merge_cycles(&v5e, 2, 10, 8, 32, "S(1)"), a_off = merge_cycles(&v5e_off, 2, 10, 8, 32, "S(1)");
  double b = merge_cycles(&v6e, 2, 12, 8, 64, "S(1)"), b_off = merge_cycles(&v6e_off, 2, 12, 8, 64, "S(1)");
  printf("merge copy f32[2,10,10,8,32] T(2,128) -> T(8,128) within VMEM, v5e: %.0f cycles (the compiler 116),"
         " without whole_relayout_tile_cycles %.0f\n", a, a_off);
  printf("merge copy f32[2,12,12,8,64] within VMEM, v6e: %.0f cycles (the compiler 160), without %.0f\n", b, b_off);
  CHECK(a >= 110 && a <= 125);
  CHECK(b >= 150 && b <= 170);
  /* v4: CMEM on both sides, two relayout units a tile after the kernel start */
  double c = merge_cycles(&v4, 2, 10, 8, 32, "S(3)");
  printf("merge copy f32[2,10,10,8,32] CMEM to CMEM, v4: %.0f cycles (the compiler 6,251)\n", c);
  CHECK(c >= 2.0 * 200 * v4.relayout_tile_cycles && c < 1.25 * 6251);
  (void)v4_off;
  CHECK_DONE();
}
