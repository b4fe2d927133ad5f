/* A compiled program's copy from HBM into VMEM (S(1)) that moves the lanes' dimension
 * (copy_kind.c tpu__copy_in_transpose_tiles, the chips' copy_in_transpose_tile_cycles): the
 * XLA TPU compiler charges it per tile (8 rows of 128 lanes) of its HBM operand's layout.
 * libtpu probes off the corpus (bench/fidelity/probes/copy_in.py, data/copy_in.jsonl): a 1x1
 * convolution's bf16[8,64,64,32] input, laid out {2,3,1,0} (W in the lanes), copied into VMEM
 * {3,0,2,1} costs 32,256 cycles on v5e and 26,560 on v6e (2,048 tiles); f32[4,64,64,32] 16,128
 * and 13,280 (1,024 tiles). Not a copy that keeps the lanes, nor one out of VMEM. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chip/chip.h"
#include "timing_util.h"

/* x in HBM in layout `from`, copied into `to`, negated back into HBM {3,2,1,0} */
static const char *prog(char *buf, size_t n, const char *shape, const char *from, const char *to) {
  snprintf(buf, n,
           "HloModule ci\n\nENTRY %%main (x: %s) -> %s {\n  %%x = %s%s parameter(0)\n"
           "  %%c = %s%s copy(%%x)\n  ROOT %%f = %s{3,2,1,0:T(8,128)} negate(%%c)\n}\n",
           shape, shape, shape, from, shape, to, shape);
  return buf;
}

/* The copy's cycles with the chip's field and with it cleared. */
static void check_one(const char *chipname, const char *shape, const char *from, const char *to, int64_t *with,
                      int64_t *without) {
  tpu_chip chip;
  tpu_diag d;
  CHECK(tpu_chip_load(chipname, &chip, &d) == TPU_OK);
  char buf[1024];
  for (int off = 0; off < 2; off++) {
    if (off) chip.copy_in_transpose_tile_cycles = 0;
    tpu_program *p = compile_all_prec(prog(buf, sizeof buf, shape, from, to), &chip, 0);
    CHECK(p != NULL);
    *(off ? without : with) = p ? (int64_t)op_cycles(p, &chip, "c") : -1;
    tpu_program_free(p);
  }
}

int main(void) {
  int64_t w = 0, wo = 0;
  const char *hbm = "{2,3,1,0:T(8,128)(2,1)}", *vmem = "{3,0,2,1:T(8,128)(2,1)S(1)}";
  check_one("v5e", "bf16[8,64,64,32]", hbm, vmem, &w, &wo);
  printf("v5e bf16[8,64,64,32] HBM {2,3,1,0} -> VMEM {3,0,2,1}: %lld cycles, %lld without the rule (compiler 32,256)\n",
         (long long)w, (long long)wo);
  CHECK(fabs((double)w / 32256.0 - 1.0) < 0.05);
  CHECK(wo < 0.9 * 32256.0);
  check_one("v6e", "bf16[8,64,64,32]", hbm, vmem, &w, &wo);
  printf("v6e the same: %lld cycles, %lld without the rule (compiler 26,560)\n", (long long)w, (long long)wo);
  CHECK(fabs((double)w / 26560.0 - 1.0) < 0.05);
  CHECK(wo < 0.9 * 26560.0);
  check_one("v5e", "f32[4,64,64,32]", "{2,3,1,0:T(8,128)}", "{3,0,2,1:T(8,128)S(1)}", &w, &wo);
  printf("v5e f32[4,64,64,32]: %lld cycles, %lld without (compiler 16,128)\n", (long long)w, (long long)wo);
  CHECK(fabs((double)w / 16128.0 - 1.0) < 0.05);
  /* a copy into VMEM that keeps the lanes (a sublane relayout): not one */
  check_one("v5e", "bf16[8,64,64,32]", "{3,2,1,0:T(8,128)(2,1)}", vmem, &w, &wo);
  CHECK(w == wo);
  /* v5p has no such field: unchanged */
  check_one("v5p", "bf16[8,64,64,32]", hbm, vmem, &w, &wo);
  CHECK(w == wo);
  CHECK_DONE();
}
