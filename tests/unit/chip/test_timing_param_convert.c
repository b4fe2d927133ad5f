/* tpusim's own compilation of a batch norm after a convolution whose scale and offset are
 * bf16[C] parameters widened to f32: the converts are kernels of their own (fuse.c
 * param_widening, the XLA TPU compiler's `convert` f32[C] kernels), and the normalization that
 * reads them where they stay, in VMEM, is charged as when it read the parameters themselves
 * (vmem_assign.c own_param_convert: a share of its stream costs spread over them, not the
 * whole resident cost). So the program with bf16 parameters lasts the same program with f32
 * parameters plus the two convert kernels, within 25 % of theirs, on v5e and v6e (without the read rule
 * the normalization pays its whole stream costs: v5e +2,589 cycles beyond that). */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "chip/chip.h"
#include "timing_util.h"

#define BN_SRC(SCALES) \
  "HloModule bn\n" \
  "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n" \
  "ENTRY e {\n" \
  " x = bf16[8,16,16,96] parameter(0)\n w = bf16[3,3,96,96] parameter(1)\n" \
  SCALES \
  " y = bf16[8,16,16,96] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n" \
  " yf = f32[8,16,16,96] convert(y)\n z = f32[] constant(0)\n" \
  " s = f32[96] reduce(yf, z), dimensions={0,1,2}, to_apply=add\n" \
  " n = f32[] constant(2048)\n nb = f32[96] broadcast(n), dimensions={}\n m = f32[96] divide(s, nb)\n" \
  " mb = f32[8,16,16,96] broadcast(m), dimensions={3}\n d = f32[8,16,16,96] subtract(yf, mb)\n" \
  " q = f32[8,16,16,96] multiply(d, d)\n s2 = f32[96] reduce(q, z), dimensions={0,1,2}, to_apply=add\n" \
  " v = f32[96] divide(s2, nb)\n e = f32[] constant(1e-05)\n eb = f32[96] broadcast(e), dimensions={}\n" \
  " ve = f32[96] add(v, eb)\n r = f32[96] rsqrt(ve)\n rb = f32[8,16,16,96] broadcast(r), dimensions={3}\n" \
  " dn = f32[8,16,16,96] multiply(d, rb)\n" \
  " gb = f32[8,16,16,96] broadcast(gf), dimensions={3}\n sc = f32[8,16,16,96] multiply(dn, gb)\n" \
  " bb = f32[8,16,16,96] broadcast(bf), dimensions={3}\n o = f32[8,16,16,96] add(sc, bb)\n" \
  " ROOT ob = bf16[8,16,16,96] convert(o)\n}\n"

static const char *k_bf16 = BN_SRC(" g = bf16[96] parameter(2)\n b = bf16[96] parameter(3)\n"
                                   " gf = f32[96] convert(g)\n bf = f32[96] convert(b)\n");
static const char *k_f32 = BN_SRC(" gf = f32[96] parameter(2)\n bf = f32[96] parameter(3)\n");

static int converts(const tpu_program *p) {
  int n = 0;
  for (int i = 0; i < p->nops; i++) n += p->ops[i].kind && !strcmp(p->ops[i].kind, "convert");
  return n;
}

static void check_chip(const char *name) {
  tpu_chip chip;
  tpu_diag d;
  CHECK(tpu_chip_load(name, &chip, &d) == TPU_OK);
  tpu_program *pb = compile_all(k_bf16, &chip), *pf = compile_all(k_f32, &chip);
  CHECK(pb != NULL && pf != NULL);
  if (!pb || !pf) {
    tpu_program_free(pb);
    tpu_program_free(pf);
    return;
  }
  double tb = program_cycles(pb, &chip), tf = program_cycles(pf, &chip), cvt = 0;
  int nc = converts(pb);
  for (int i = 0; i < pb->nops; i++)
    if (pb->ops[i].kind && !strcmp(pb->ops[i].kind, "convert")) cvt += op_cycles(pb, &chip, pb->ops[i].name);
  printf("%s: bf16 scale/offset %.0f cycles (%d convert kernel(s), %.0f), f32 %.0f\n", name, tb, nc, cvt, tf);
  CHECK_EQ_INT(nc, 2);
  CHECK(tb > tf + 0.75 * cvt && tb < tf + 1.25 * cvt);
  tpu_program_free(pb);
  tpu_program_free(pf);
}

int main(void) {
  check_chip("v5e");
  check_chip("v6e");
  CHECK_DONE();
}
