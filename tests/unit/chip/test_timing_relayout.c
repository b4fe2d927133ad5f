/* The relayout rule of the timing executor (timing.c port_floor_op, tile.c relayout_off_core):
 * a copy or transpose that moves the lanes' dimension from HBM to HBM lasts at least two
 * kernel starts (kernel_overhead_s + HBM latency each), as the XLA TPU compiler charges such
 * small copies on v4 and v5p; one that keeps the lanes' dimension, or whose operand or result
 * is in VMEM, pays one; tpusim's own copy of a parameter into another layout for a concatenate
 * is not one on v5e (the compiler's copy writes VMEM there) but is on v5p. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "chip/chip.h"
#include "chip/program.h"
#include "chip/timing.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/verify.h"

static tpu_program *compile_src(const char *src, tpu_chip *chip) {
  tpu_diag d;
  tpu_module *m = NULL;
  if (tpu_hlo_parse("relayout.hlo", src, strlen(src), &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK) {
    tpu_module_free(m);
    return NULL;
  }
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = chip;
  tpu_program *p = NULL;
  if (tpu_compile(m, &o, &p, &d) != TPU_OK) p = NULL;
  tpu_module_free(m);
  return p;
}

static int64_t op_cycles(const tpu_program *p, const tpu_chip *chip, int op) {
  tpu_timeline tl;
  tpu_diag d;
  if (tpu_timing_run(p, chip, 0, &tl, &d) != TPU_OK) return -1;
  int64_t c = tl.ops[op].cycles;
  tpu_timeline_free(&tl);
  return c;
}

static int find_op(const tpu_program *p, const char *name) {
  for (int k = 0; p && k < p->nops; k++)
    if (!strcmp(p->ops[k].name, name)) return k;
  return -1;
}

/* A compiled program's copy of x: `to` is the result's layout (with its tail). */
static const char *copy_src(char *buf, size_t n, const char *shape, const char *from, const char *to) {
  snprintf(buf, n,
           "HloModule cp\n\nENTRY %%main (x: %s) -> %s {\n  %%x = %s%s parameter(0)\n"
           "  ROOT %%c = %s%s copy(%%x)\n}\n",
           shape, shape, shape, from, shape, to);
  return buf;
}

static void check_compiled(const char *chipname) {
  tpu_chip chip;
  tpu_diag d;
  CHECK(tpu_chip_load(chipname, &chip, &d) == TPU_OK);
  const double lat = chip.hbm_latency_s > 0 ? chip.hbm_latency_s : TPU_TIMING_DEFAULT_HBM_LATENCY_S;
  const int64_t start = llround(chip.kernel_overhead_s * chip.clock_hz) + llround(lat * chip.clock_hz);
  CHECK(start > 500);
  char buf[1024];
  /* f32[8,64] {1,0} -> {0,1}: the lanes' dimension moves, HBM to HBM */
  tpu_program *p = compile_src(copy_src(buf, sizeof buf, "f32[8,64]", "{1,0:T(8,128)}", "{0,1:T(8,128)}"), &chip);
  CHECK(p != NULL);
  if (!p) return;
  int c = find_op(p, "c");
  CHECK(c >= 0 && p->ops[c].relayout == 1);
  int64_t with = op_cycles(p, &chip, c);
  /* the text form carries the flag */
  char *text = tpu_program_text(p);
  CHECK(text && strstr(text, " relayout=1") != NULL);
  tpu_program *q = NULL;
  CHECK(text && tpu_program_parse("relayout.tasm", text, strlen(text), &q, &d) == TPU_OK);
  if (q) CHECK(q->ops[c].relayout == 1 && op_cycles(q, &chip, c) == with);
  tpu_program_free(q);
  tpu_free(text);
  p->ops[c].relayout = 0;
  int64_t without = op_cycles(p, &chip, c);
  printf("%s: f32[8,64] {1,0} -> {0,1} HBM to HBM: %lld cycles, %lld without the rule (two starts %lld)\n", chipname,
         (long long)with, (long long)without, (long long)(2 * start));
  CHECK(with == 2 * start);
  CHECK(without < 2 * start - 400);
  tpu_program_free(p);
  /* the same copy into VMEM, or one keeping the lanes' dimension: no flag */
  p = compile_src(copy_src(buf, sizeof buf, "f32[8,64]", "{1,0:T(8,128)}", "{0,1:T(8,128)S(1)}"), &chip);
  CHECK(p && p->ops[find_op(p, "c")].relayout == 0);
  tpu_program_free(p);
  p = compile_src(copy_src(buf, sizeof buf, "bf16[4,2,512]", "{2,1,0:T(2,128)(2,1)}", "{2,0,1:T(4,128)(2,1)}"), &chip);
  CHECK(p && p->ops[find_op(p, "c")].relayout == 0);
  tpu_program_free(p);
}

/* tpusim's own compilation: a concatenate along the lanes of two bf16[16,7] parameters
 * (laid out {0,1}, 7 in the sublanes) reads them through copies into row-major. */
static const char *k_concat =
    "HloModule cat\n\nENTRY %main (a: bf16[16,7], b: bf16[16,100]) -> bf16[16,107] {\n"
    "  %a = bf16[16,7] parameter(0)\n  %b = bf16[16,100] parameter(1)\n"
    "  ROOT %r = bf16[16,107] concatenate(%a, %b), dimensions={1}\n}\n";

static int flagged_copies(const char *chipname) {
  tpu_chip chip;
  tpu_diag d;
  if (tpu_chip_load(chipname, &chip, &d) != TPU_OK) return -1;
  tpu_program *p = compile_src(k_concat, &chip);
  if (!p) return -1;
  int n = 0, copies = 0;
  for (int k = 0; k < p->nops; k++) {
    copies += !strcmp(p->ops[k].kind, "copy");
    n += p->ops[k].relayout;
  }
  tpu_program_free(p);
  return copies == 1 ? n : -1;
}

int main(void) {
  check_compiled("v5p");
  check_compiled("v4:core");
  int v5e = flagged_copies("v5e"), v5p = flagged_copies("v5p");
  printf("own concatenate's relayout copies flagged: v5e %d, v5p %d\n", v5e, v5p);
  CHECK(v5e == 0);
  CHECK(v5p == 1);
  CHECK_DONE();
}
