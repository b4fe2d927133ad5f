/* A compiled program's sublane relayout within v4's CMEM (a copy keeping the lanes' dimension,
 * S(3) on both sides; copy_kind.c tpu__relayout_tile_cost, chips/v4.json cmem_relayout_*): the
 * XLA TPU compiler's kernel costs a part per result tile and a part per 32-bit sublane the tile
 * fills, whole f32 registers included. Pinned at 5 % on two copies from the probes' own compiled
 * programs, off the families corpus the rule was fitted on (bench/fidelity/probes/
 * cmem_relayout.py check): tcs_b4_24x24_c96to64_k3s2_same's bf16[48,32,8,64] {3,1,2,0} ->
 * {3,2,1,0} (1,536 T(8,128)(2,1) tiles, 4 sublanes: 34,592 cycles) and cumsum_2000x257_f32's
 * f32[33,8,16,128] (528 T(8,128) tiles, 8 sublanes: 17,106 cycles); with
 * TPUSIM_NO_CMEM_RELAYOUT_SUBLANES=1 (relayout_tile_cycles a tile, whole f32 registers not
 * priced) tpusim gave 0.72 and 0.60 of those, which fails the pins. A copy out of CMEM into HBM
 * does not move with the switch (its own figures differ: f32 T(8,128) 18.6-21.9 a tile). */
#include <stdlib.h>

#include "timing_util.h"

#define CMEM_COPY(T, FROM, TO)                                                                                 \
  "HloModule m, is_scheduled=true\n"                                                                           \
  "ENTRY e {\n"                                                                                                \
  "  a = " T FROM " parameter(0)\n"                                                                            \
  "  ROOT c = " T TO " copy(a)\n"                                                                              \
  "}\n"

static double copy_cycles(const char *src, const tpu_chip *c, int rule) {
  if (!rule) setenv("TPUSIM_NO_CMEM_RELAYOUT_SUBLANES", "1", 1);
  tpu_program *p = compile_all(src, c);
  CHECK(p != NULL);
  double t = p ? op_cycles(p, c, "c") : -1;
  tpu_program_free(p);
  unsetenv("TPUSIM_NO_CMEM_RELAYOUT_SUBLANES");
  return t;
}

static void pin(const tpu_chip *c, const char *what, const char *src, double compiler) {
  double t = copy_cycles(src, c, 1), t_off = copy_cycles(src, c, 0);
  printf("v4 %s: %.0f cycles (the compiler: %.0f); with TPUSIM_NO_CMEM_RELAYOUT_SUBLANES=1 %.0f\n", what, t, compiler,
         t_off);
  CHECK(fabs(t / compiler - 1) < 0.05); /* today +0.1 % and -2.0 %: a 10 % move of the rule either way fails */
  CHECK(t_off > 0 && t_off < 0.8 * compiler); /* the pin above fails without the rule */
}

int main(void) {
  tpu_chip c;
  tpu_diag d;
  CHECK(tpu_chip_load("v4:core", &c, &d) == TPU_OK);
  CHECK(c.cmem_relayout_tile_cycles > 0 && c.cmem_relayout_sublane_cycles > 0);
  pin(&c, "bf16[48,32,8,64] {3,1,2,0} -> {3,2,1,0} within CMEM",
      CMEM_COPY("bf16[48,32,8,64]", "{3,1,2,0:T(8,128)(2,1)S(3)}", "{3,2,1,0:T(8,128)(2,1)S(3)}"), 34592);
  pin(&c, "f32[33,8,16,128] {3,1,2,0} -> {3,2,1,0} within CMEM",
      CMEM_COPY("f32[33,8,16,128]", "{3,1,2,0:T(8,128)S(3)}", "{3,2,1,0:T(8,128)S(3)}"), 17106);
  /* out of CMEM into HBM: not this rule */
  const char *out = CMEM_COPY("f32[33,8,16,128]", "{3,1,2,0:T(8,128)S(3)}", "{3,2,1,0:T(8,128)}");
  double o = copy_cycles(out, &c, 1), o_off = copy_cycles(out, &c, 0);
  printf("v4 the same f32 copy into HBM: %.0f cycles, with the switch %.0f\n", o, o_off);
  CHECK(o > 0 && o == o_off);
  /* a chip without the fields (v5e: VMEM, not CMEM) does not move either */
  tpu_chip e;
  CHECK(tpu_chip_load("v5e", &e, &d) == TPU_OK);
  CHECK(e.cmem_relayout_sublane_cycles == 0);
  CHECK_DONE();
}
