/* Transposing copies into and out of tiles of fewer than 8 rows (copy_kind.c
 * tpu__small_tile_transpose_tiles, the chips' small_tile_transpose_cycles): a compiled program's
 * copy that moves the lanes' dimension with a side in T(2,128) tiles lasts at least its start
 * plus small_tile_transpose_cycles per tile of that side (libtpu probes off the families corpus,
 * bench/fidelity/probes/pool_grad_copies.py: a max-pool gradient of bf16[1,96,96,64] lays its
 * operand out with the window's dimensions major, {3,0,2,1:T(2,128)(2,1)}, 9,216 tiles: 44,086
 * cycles into HBM on v5p, 58,464 CMEM to CMEM on v4, its result back out of VMEM into HBM
 * 33,124 on v5e (where tpusim's transfers already pass the floor), within VMEM a windowed copy
 * of 1,400 on v5e, no floor). Without the figure tpusim charged v5p a third of that. */
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

#define WIN "{2,3,1,0:T(8,128)(2,1)%s}"
#define SMALL "{3,0,2,1:T(2,128)(2,1)%s}"

/* p copied into memory space `mid` in layout `from`, then into layout `to` in space `dst`:
 * the second copy's cycles on c */
static double copy_cycles(const tpu_chip *c, const char *from, const char *mid, const char *to, const char *dst) {
  char lf[64], lt[64], src[1024];
  snprintf(lf, sizeof lf, from, mid);
  snprintf(lt, sizeof lt, to, dst);
  char lp[64];
  snprintf(lp, sizeof lp, from, "");
  snprintf(src, sizeof src,
           "HloModule m\nENTRY e {\n p = bf16[1,96,96,64]%s parameter(0)\n a = bf16[1,96,96,64]%s copy(p)\n"
           " ROOT b = bf16[1,96,96,64]%s copy(a)\n}\n",
           lp, lf, lt);
  tpu_program *p = compile_src(src, c, -1);
  CHECK(p != NULL);
  double t = p ? op_cycles(p, c, "b") : -1;
  tpu_program_free(p);
  return t;
}

static void load(const char *name, tpu_chip *c, tpu_chip *off) {
  tpu_diag d;
  if (tpu_chip_load(name, c, &d) != TPU_OK) {
    fprintf(stderr, "cannot load %s\n", name);
    CHECK(0);
  }
  CHECK(c->small_tile_transpose_cycles > 0);
  *off = *c;
  off->small_tile_transpose_cycles = 0;
}

int main(void) {
  tpu_chip v5p, v5p_off, v5e, v5e_off, v4, v4_off;
  load("v5p", &v5p, &v5p_off);
  load("v5e", &v5e, &v5e_off);
  load("v4:core", &v4, &v4_off);
  /* into T(2,128) tiles in HBM from VMEM (v5p) */
  double f = v5p.kernel_overhead_s * v5p.clock_hz + 9216 * v5p.small_tile_transpose_cycles;
  double in = copy_cycles(&v5p, WIN, "S(1)", SMALL, ""), in_off = copy_cycles(&v5p_off, WIN, "S(1)", SMALL, "");
  printf("v5p bf16[1,96,96,64] into T(2,128) tiles in HBM: %.0f cycles, floor %.0f (the compiler: 44,086);"
         " without small_tile_transpose_cycles %.0f\n", in, f, in_off);
  CHECK(in >= f - 2 && in < 1.1 * f);
  CHECK(in_off > 0 && in_off < 0.6 * f);
  /* out of T(2,128) tiles in VMEM into HBM (v5e); within VMEM a windowed copy, no floor */
  f = v5e.kernel_overhead_s * v5e.clock_hz + 9216 * v5e.small_tile_transpose_cycles;
  double out = copy_cycles(&v5e, SMALL, "S(1)", WIN, ""), out_off = copy_cycles(&v5e_off, SMALL, "S(1)", WIN, "");
  double within = copy_cycles(&v5e, WIN, "S(1)", SMALL, "S(1)");
  printf("v5e bf16[1,96,96,64] out of T(2,128) tiles in VMEM: %.0f cycles, floor %.0f (the compiler: 33,124);"
         " without small_tile_transpose_cycles %.0f; within VMEM %.0f (the compiler: 1,400)\n", out, f, out_off,
         within);
  CHECK(out >= f - 2 && out < 1.25 * f);
  CHECK(within > 0 && within < 0.2 * f);
  /* v4 keeps both sides in CMEM (S(3)) */
  f = v4.kernel_overhead_s * v4.clock_hz + 9216 * v4.small_tile_transpose_cycles;
  double cm = copy_cycles(&v4, WIN, "S(3)", SMALL, "S(3)"), cm_off = copy_cycles(&v4_off, WIN, "S(3)", SMALL, "S(3)");
  printf("v4 bf16[1,96,96,64] into T(2,128) tiles, CMEM to CMEM: %.0f cycles, floor %.0f (the compiler: 58,464);"
         " without small_tile_transpose_cycles %.0f\n", cm, f, cm_off);
  CHECK(cm >= f - 2 && cm < 1.1 * f);
  CHECK(cm_off > 0 && cm_off < 0.8 * f);
  CHECK_DONE();
}
