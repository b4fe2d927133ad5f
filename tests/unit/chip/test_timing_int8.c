/* 8-bit integer matmuls on a chip whose compiler runs them apart from bf16 (v6e): the MXU
 * work at int8_mxu_rate instead of the published int8_rate, and the kernel's start plus
 * int8_matmul_s (timing.c kernel_start, op_i8); a bf16 dot of the same shape is untouched.
 * v4 (one TensorCore, "v4:core"): s8 runs slower than bf16 (int8_mxu_rate 0.919 < int8_rate
 * 1), and a start-dominated s8 dot is pinned at 10 % to the compiler's figure
 * (bench/fidelity/probes/int8_matmul.py v4). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "chip/chip.h"
#include "timing_util.h"

static const char *k_fmt =
    "HloModule i8\n"
    "\n"
    "ENTRY %%main (x: %s[%d,%d], w: %s[%d,%d]) -> %s[%d,%d] {\n"
    "  %%x = %s[%d,%d] parameter(0)\n"
    "  %%w = %s[%d,%d] parameter(1)\n"
    "  ROOT %%d = %s[%d,%d] dot(%%x, %%w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "}\n";

/* The cycles and MXU cycles of [m,k] x [k,n] on `chip`. */
static int run_mkn(const tpu_chip *chip, const char *in, const char *acc, int m, int kk, int n, int64_t *cycles,
                   int64_t *mxu) {
  char src[1024];
  snprintf(src, sizeof src, k_fmt, in, m, kk, in, kk, n, acc, m, n, in, m, kk, in, kk, n, acc, m, n);
  tpu_program *p = compile_all_prec(src, chip, 0);
  if (!p) return 0;
  tpu_diag d;
  int ok = 0;
  tpu_timeline tl;
  int op = -1;
  for (int k = 0; k < p->nops; k++)
    if (p->ops[k].m > 0) op = k;
  if (op >= 0 && tpu_timing_run(p, chip, 0, &tl, &d) == TPU_OK) {
    *cycles = tl.ops[op].cycles;
    *mxu = tl.ops[op].unit_cycles[TPU_UNIT_MXU];
    tpu_timeline_free(&tl);
    ok = 1;
  }
  tpu_program_free(p);
  return ok;
}

/* The dot [64,512] x [512,512]. */
static int run(const tpu_chip *chip, const char *in, const char *acc, int64_t *cycles, int64_t *mxu) {
  return run_mkn(chip, in, acc, 64, 512, 512, cycles, mxu);
}

/* v4, one TensorCore: s8 at 0.919 of bf16's MXU rate, the start, and the compiler's figure. */
static void check_v4(void) {
  tpu_chip chip, plain;
  tpu_diag d;
  CHECK(tpu_chip_load("v4:core", &chip, &d) == TPU_OK);
  CHECK(chip.int8_mxu_rate > 0.85 && chip.int8_mxu_rate < 1 && chip.int8_rate == 1 && chip.int8_matmul_s > 0);
  plain = chip;
  plain.int8_mxu_rate = 0;
  plain.int8_matmul_s = 0;
  int64_t c8 = 0, m8 = 0, p8 = 0, pm8 = 0, cb = 0, mb = 0, pb = 0, pmb = 0, s8 = 0, sm8 = 0;
  CHECK(run(&chip, "s8", "s32", &c8, &m8));
  CHECK(run(&plain, "s8", "s32", &p8, &pm8));
  CHECK(run(&chip, "bf16", "f32", &cb, &mb));
  CHECK(run(&plain, "bf16", "f32", &pb, &pmb));
  const int64_t i8s = (int64_t)llround(chip.int8_matmul_s * chip.clock_hz);
  /* libtpu (int8_matmul.py v4): s8 [8,128] x [128,128] 2,037 cycles, its start most of it */
  CHECK(run_mkn(&chip, "s8", "s32", 8, 128, 128, &s8, &sm8));
  printf("v4:core s8 [64,512] x [512,512]: %lld cycles (MXU %lld), %lld at int8_rate without the start (MXU %lld); "
         "bf16 %lld / %lld; s8 [8,128] x [128,128] %lld (compiler 2,037)\n",
         (long long)c8, (long long)m8, (long long)p8, (long long)pm8, (long long)cb, (long long)pb, (long long)s8);
  /* the MXU slower than bf16's: its cycles over the plain rate's 1 / int8_mxu_rate */
  CHECK(pm8 > 0 && m8 > pm8 && fabs((double)m8 / (double)pm8 - 1.0 / chip.int8_mxu_rate) < 0.02);
  CHECK(c8 - p8 >= i8s + (m8 - pm8) - 2);
  CHECK(cb == pb && mb == pmb);
  CHECK(fabs((double)s8 / 2037.0 - 1.0) < 0.10);
}

int main(void) {
  tpu_chip chip, plain;
  tpu_diag d;
  CHECK(tpu_chip_load("v6e", &chip, &d) == TPU_OK);
  CHECK(chip.int8_mxu_rate > 1 && chip.int8_mxu_rate < chip.int8_rate && chip.int8_matmul_s > 0);
  plain = chip; /* the same chip without the two fields: the published int8_rate, no extra start */
  plain.int8_mxu_rate = 0;
  plain.int8_matmul_s = 0;
  int64_t c8 = 0, m8 = 0, p8 = 0, pm8 = 0, cb = 0, mb = 0, pb = 0, pmb = 0;
  CHECK(run(&chip, "s8", "s32", &c8, &m8));
  CHECK(run(&plain, "s8", "s32", &p8, &pm8));
  CHECK(run(&chip, "bf16", "f32", &cb, &mb));
  CHECK(run(&plain, "bf16", "f32", &pb, &pmb));
  const int64_t i8s = (int64_t)llround(chip.int8_matmul_s * chip.clock_hz);
  printf("v6e s8 [64,512] x [512,512]: %lld cycles (MXU %lld), %lld at int8_rate without the start (MXU %lld); "
         "bf16 %lld / %lld\n",
         (long long)c8, (long long)m8, (long long)p8, (long long)pm8, (long long)cb, (long long)pb);
  /* the MXU at int8_mxu_rate: its cycles over the published rate's in their ratio */
  CHECK(pm8 > 0 && fabs((double)m8 / (double)pm8 - chip.int8_rate / chip.int8_mxu_rate) < 0.02);
  /* the kernel's start pays int8_matmul_s on top of the slower MXU */
  CHECK(c8 - p8 >= i8s + (m8 - pm8) - 2);
  /* bf16 is untouched */
  CHECK(cb == pb && mb == pmb);
  check_v4();
  CHECK_DONE();
}
