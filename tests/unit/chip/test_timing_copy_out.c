/* A compiled program's copy kernel out of VMEM into HBM (copy_kind.c tpu__copy_out_of_vmem,
 * tpu_prog_op copy_out): the XLA TPU compiler charges its HBM write, a 16-bit result's stream
 * pass over its result's tiles and its start, nothing for reading its operand in VMEM. libtpu
 * probes off the corpus (bench/fidelity/probes/copy_out.py, data/copy_out.jsonl): a 1x1
 * convolution's bf16[4,64,64,512] result relaid out of VMEM {3,2,0,1} into HBM {3,2,1,0} costs
 * 117,384 cycles on v5e (tpusim 154,993 with the read charged at vmem_read_cost 1) and 71,208
 * on v6e (74,653 at 0.2). A copy into VMEM, or between HBM arrays, is not one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "chip/chip.h"
#include "timing_util.h"

static int find_op(const tpu_program *p, const char *name) {
  for (int k = 0; p && k < p->nops; k++)
    if (!strcmp(p->ops[k].name, name)) return k;
  return -1;
}

/* x negated into `mid` (its layout tail says where it lives), then copied into `to` */
static const char *prog(char *buf, size_t n, const char *shape, const char *mid, const char *to) {
  snprintf(buf, n,
           "HloModule co\n\nENTRY %%main (x: %s) -> %s {\n  %%x = %s{3,2,1,0:T(8,128)} parameter(0)\n"
           "  %%f = %s%s negate(%%x)\n  ROOT %%c = %s%s copy(%%f)\n}\n",
           shape, shape, shape, shape, mid, shape, to);
  return buf;
}

/* The copy's cycles with the rule and without (its flag cleared); -1 when it is not flagged. */
static int check_one(const char *chipname, const char *shape, const char *mid, const char *to, int64_t *with,
                     int64_t *without) {
  tpu_chip chip;
  tpu_diag d;
  CHECK(tpu_chip_load(chipname, &chip, &d) == TPU_OK);
  char buf[1024];
  tpu_program *p = compile_all_prec(prog(buf, sizeof buf, shape, mid, to), &chip, 0);
  CHECK(p != NULL);
  if (!p) return -1;
  int c = find_op(p, "c");
  CHECK(c >= 0);
  if (c < 0 || !p->ops[c].copy_out) {
    tpu_program_free(p);
    return 0;
  }
  *with = (int64_t)op_cycles(p, &chip, "c");
  /* the text form carries the flag */
  char *text = tpu_program_text(p);
  CHECK(text && strstr(text, " copy_out=1") != NULL);
  tpu_program *q = NULL;
  CHECK(text && tpu_program_parse("copy_out.tasm", text, strlen(text), &q, &d) == TPU_OK);
  if (q) CHECK(q->ops[c].copy_out == 1 && (int64_t)op_cycles(q, &chip, "c") == *with);
  tpu_program_free(q);
  tpu_free(text);
  p->ops[c].copy_out = 0;
  *without = (int64_t)op_cycles(p, &chip, "c");
  tpu_program_free(p);
  return 1;
}

int main(void) {
  int64_t w = 0, wo = 0;
  /* the probe's copy: 117,384 cycles in the v5e compiler */
  const char *sh = "bf16[4,64,64,512]", *mid = "{3,2,0,1:T(8,128)(2,1)S(1)}", *to = "{3,2,1,0:T(8,128)(2,1)}";
  CHECK(check_one("v5e", sh, mid, to, &w, &wo) == 1);
  printf("v5e bf16[4,64,64,512] VMEM {3,2,0,1} -> HBM {3,2,1,0}: %lld cycles, %lld without the rule (compiler 117,384)\n",
         (long long)w, (long long)wo);
  CHECK(fabs((double)w / 117384.0 - 1.0) < 0.05);
  CHECK(wo > 1.25 * 117384.0);
  /* v6e (vmem_read_cost 0.2): 71,208 in the compiler */
  CHECK(check_one("v6e", sh, mid, to, &w, &wo) == 1);
  printf("v6e the same: %lld cycles, %lld without the rule (compiler 71,208)\n", (long long)w, (long long)wo);
  CHECK(fabs((double)w / 71208.0 - 1.0) < 0.05);
  CHECK(wo > w);
  /* v5p keeps the operand in HBM in tpusim (vmem_assign.c): not taken there */
  CHECK(check_one("v5p", sh, mid, to, &w, &wo) == 0);
  /* a copy into VMEM, or HBM to HBM: not one */
  CHECK(check_one("v5e", "f32[4,56,56,128]", "{3,1,2,0:T(8,128)}", "{3,2,1,0:T(8,128)S(1)}", &w, &wo) == 0);
  CHECK(check_one("v5e", "f32[4,56,56,128]", "{3,1,2,0:T(8,128)}", "{3,2,1,0:T(8,128)}", &w, &wo) == 0);
  CHECK_DONE();
}
