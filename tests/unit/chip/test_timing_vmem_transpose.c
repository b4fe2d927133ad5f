/* A copy or transpose that moves the lanes' dimension out of VMEM into HBM on a chip that keeps
 * values in VMEM (copy_kind.c tpu__vmem_transpose_op, chip vmem_transpose_tile_cycles): the
 * XLA TPU compiler charges it its start and a fixed time per tile of its result, whatever the
 * dtype, nothing for its read or the transpose's per-element cost. libtpu probes off the corpus
 * (bench/fidelity/probes/vmem_transpose.py, data/vmem_transpose.jsonl): einsum('acb,ad->bcd')
 * at a=256, b=384, c=5, d=256, bf16: the dot writes bf16[384,5,256]{0,2,1} into VMEM (S(1)) and
 * `copy.1` relays it out into {2,0,1}, 480 tiles, 7,796 cycles on v5e and 6,500 on v6e (tpusim
 * charged 14,861 and 11,419). Checked in tpusim's own compilation (the dot's result kept in VMEM
 * by vmem_assign.c, relaid by relayout.c's copy) and on the compiled form. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chip/chip.h"
#include "timing_util.h"

static const char *k_own =
    "HloModule ein, entry_computation_layout={(bf16[256,5,384]{2,1,0}, bf16[256,256]{1,0})->bf16[384,5,256]{0,1,2}}\n\n"
    "ENTRY main.1 {\n"
    "  y.1 = bf16[256,256]{1,0} parameter(1)\n"
    "  x.1 = bf16[256,5,384]{2,1,0} parameter(0)\n"
    "  dot_general.1 = bf16[256,5,384]{2,1,0} dot(y.1, x.1), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
    "  ROOT transpose.1 = bf16[384,5,256]{0,1,2} transpose(dot_general.1), dimensions={2,1,0}\n"
    "}\n";

/* the compiled form: a kernel's result in `mid` copied into `to` */
static const char *compiled(char *buf, size_t n, const char *dt, const char *mid, const char *to) {
  snprintf(buf, n,
           "HloModule vt\n\nENTRY %%main (x: %s[384,5,256]) -> %s[384,5,256] {\n"
           "  %%x = %s[384,5,256]{0,2,1:T(8,128)} parameter(0)\n  %%f = %s[384,5,256]%s negate(%%x)\n"
           "  ROOT %%c = %s[384,5,256]%s copy(%%f)\n}\n",
           dt, dt, dt, dt, mid, dt, to);
  return buf;
}

/* The named op's cycles on chip `name` with the chip's vmem_transpose_tile_cycles (with) and
 * without it (without); the program compiled through every pass. */
static void cycles(const char *src, const char *name, const char *chipname, const char *op, double *with,
                   double *without, double *kov, double *rate) {
  tpu_chip chip;
  tpu_diag d;
  CHECK(tpu_chip_load(chipname, &chip, &d) == TPU_OK);
  *kov = chip.kernel_overhead_s * chip.clock_hz;
  *rate = chip.vmem_transpose_tile_cycles;
  tpu_program *p = compile_all_prec(src, &chip, 0);
  CHECK(p != NULL);
  *with = p ? op_cycles(p, &chip, op) : -1;
  tpu_program_free(p);
  chip.vmem_transpose_tile_cycles = 0;
  p = compile_all_prec(src, &chip, 0);
  CHECK(p != NULL);
  *without = p ? op_cycles(p, &chip, op) : -1;
  tpu_program_free(p);
  printf("%s on %s: %s %.0f cycles, %.0f without vmem_transpose_tile_cycles (start %.0f + 480 x %.2f = %.0f)\n", name,
         chipname, op, *with, *without, *kov, *rate, *kov + 480 * *rate);
}

int main(void) {
  double w, wo, kov, rate;
  /* own compilation: the relayout copy of the dot's result */
  cycles(k_own, "acb,ad->bcd bf16", "v5e", "copy.relayout", &w, &wo, &kov, &rate);
  CHECK(rate > 0 && fabs(w / (kov + 480 * rate) - 1.0) < 0.02);
  CHECK(fabs(w / 7796.0 - 1.0) < 0.10); /* the compiler's copy.1 */
  CHECK(wo > 1.5 * 7796.0);
  cycles(k_own, "acb,ad->bcd bf16", "v6e", "copy.relayout", &w, &wo, &kov, &rate);
  CHECK(rate > 0 && fabs(w / (kov + 480 * rate) - 1.0) < 0.02);
  CHECK(fabs(w / 6500.0 - 1.0) < 0.10);
  CHECK(wo > 1.5 * 6500.0);
  /* v5p and v4 read the dot's result from HBM in tpusim: unchanged */
  cycles(k_own, "acb,ad->bcd bf16", "v5p", "copy.relayout", &w, &wo, &kov, &rate);
  CHECK(w == wo);
  /* the compiled form, bf16 and f32 alike (480 tiles each: T(8,128)(2,1) and T(8,128)) */
  char buf[1024];
  compiled(buf, sizeof buf, "bf16", "{0,2,1:T(8,128)(2,1)S(1)}", "{2,0,1:T(8,128)(2,1)}");
  cycles(buf, "compiled bf16 S(1) -> HBM", "v5e", "c", &w, &wo, &kov, &rate);
  CHECK(fabs(w / (kov + 480 * rate) - 1.0) < 0.02 && wo > 1.5 * w);
  compiled(buf, sizeof buf, "f32", "{0,2,1:T(8,128)S(1)}", "{2,0,1:T(8,128)}");
  double wf;
  cycles(buf, "compiled f32 S(1) -> HBM", "v5e", "c", &wf, &wo, &kov, &rate);
  CHECK(fabs(wf / w - 1.0) < 0.02 && wo > 1.3 * wf);
  /* keeping the lanes: not one (a sublane relayout, relayout_tile_cycles) */
  compiled(buf, sizeof buf, "bf16", "{0,2,1:T(8,128)(2,1)S(1)}", "{0,1,2:T(8,128)(2,1)}");
  cycles(buf, "compiled bf16 S(1) -> HBM keeping the lanes", "v5e", "c", &w, &wo, &kov, &rate);
  CHECK(w == wo);
  /* HBM to HBM: not one */
  compiled(buf, sizeof buf, "bf16", "{0,2,1:T(8,128)(2,1)}", "{2,0,1:T(8,128)(2,1)}");
  cycles(buf, "compiled bf16 HBM -> HBM", "v5e", "c", &w, &wo, &kov, &rate);
  CHECK(w == wo);
  CHECK_DONE();
}
