/* The reducing-epilogue rule of the timing executor (timing.c port_floor_op, layout.c
 * reduces_product): a matmul kernel whose epilogue reduces its product (attention's q.k^T
 * with its row max and row sums) lasts, on a chip with epilogue_reduce_serial (v5p), its
 * transfers and its vector work end to end; a matmul kernel with an elementwise
 * epilogue only is not flagged, and a chip without the field (v5e) overlaps them. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "chip/chip.h"
#include "chip/program.h"
#include "chip/timing.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "timing_util.h"

/* The compiler's form: q.k^T in a fusion of its own, the max as a row-wide reduce-window,
 * exp and the row sums, the exponentials and the sums out (a v5p attention's first kernel). */
static const char *k_scores =
    "HloModule attn\n\n"
    "%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
    "  ROOT %s = f32[] add(%a, %b)\n}\n\n"
    "%max (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
    "  ROOT %m = f32[] maximum(%a, %b)\n}\n\n"
    "%qk (p0: bf16[16,512,128], p1: bf16[16,512,128]) -> f32[16,512,512] {\n"
    "  %p0 = bf16[16,512,128]{2,1,0:T(8,128)(2,1)} parameter(0)\n"
    "  %p1 = bf16[16,512,128]{2,1,0:T(8,128)(2,1)} parameter(1)\n"
    "  %d = bf16[16,512,512]{2,1,0:T(8,128)(2,1)} dot(%p0, %p1), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
    "rhs_batch_dims={0}, rhs_contracting_dims={2}\n"
    "  ROOT %c = f32[16,512,512]{2,1,0:T(8,128)} convert(%d)\n}\n\n"
    "%fused (q: bf16[16,512,128], k: bf16[16,512,128]) -> (f32[16,512], f32[16,512,512]) {\n"
    "  %q = bf16[16,512,128]{2,1,0:T(8,128)(2,1)} parameter(0)\n"
    "  %k = bf16[16,512,128]{2,1,0:T(8,128)(2,1)} parameter(1)\n"
    "  %s = f32[16,512,512]{2,1,0:T(8,128)} fusion(%q, %k), kind=kOutput, calls=%qk\n"
    "  %ninf = f32[] constant(-inf)\n"
    "  %rm = f32[16,512,512]{2,1,0:T(8,128)} reduce-window(%s, %ninf), window={size=1x1x1023 pad=0_0x0_0x511_511}, "
    "to_apply=%max\n"
    "  %sub = f32[16,512,512]{2,1,0:T(8,128)} subtract(%s, %rm)\n"
    "  %e = f32[16,512,512]{2,1,0:T(8,128)} exponential(%sub)\n"
    "  %zero = f32[] constant(0)\n"
    "  %sum = f32[16,512]{1,0:T(8,128)} reduce(%e, %zero), dimensions={2}, to_apply=%add\n"
    "  ROOT %t = (f32[16,512]{1,0:T(8,128)}, f32[16,512,512]{2,1,0:T(8,128)}) tuple(%sum, %e)\n}\n\n"
    "ENTRY %main (q: bf16[16,512,128], k: bf16[16,512,128]) -> (f32[16,512], f32[16,512,512]) {\n"
    "  %q = bf16[16,512,128]{2,1,0:T(8,128)(2,1)} parameter(0)\n"
    "  %k = bf16[16,512,128]{2,1,0:T(8,128)(2,1)} parameter(1)\n"
    "  ROOT %f = (f32[16,512]{1,0:T(8,128)}, f32[16,512,512]{2,1,0:T(8,128)}) fusion(%q, %k), kind=kOutput, "
    "calls=%fused\n}\n";

/* The same product with an elementwise epilogue only (its exponentials). */
static const char *k_plain =
    "HloModule ew\n\n"
    "%fused (q: bf16[16,512,128], k: bf16[16,512,128]) -> f32[16,512,512] {\n"
    "  %q = bf16[16,512,128]{2,1,0:T(8,128)(2,1)} parameter(0)\n"
    "  %k = bf16[16,512,128]{2,1,0:T(8,128)(2,1)} parameter(1)\n"
    "  %d = bf16[16,512,512]{2,1,0:T(8,128)(2,1)} dot(%q, %k), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
    "rhs_batch_dims={0}, rhs_contracting_dims={2}\n"
    "  %c = f32[16,512,512]{2,1,0:T(8,128)} convert(%d)\n"
    "  ROOT %e = f32[16,512,512]{2,1,0:T(8,128)} exponential(%c)\n}\n\n"
    "ENTRY %main (q: bf16[16,512,128], k: bf16[16,512,128]) -> f32[16,512,512] {\n"
    "  %q = bf16[16,512,128]{2,1,0:T(8,128)(2,1)} parameter(0)\n"
    "  %k = bf16[16,512,128]{2,1,0:T(8,128)(2,1)} parameter(1)\n"
    "  ROOT %f = f32[16,512,512]{2,1,0:T(8,128)} fusion(%q, %k), kind=kOutput, calls=%fused\n}\n";

static int find_op(const tpu_program *p, const char *name) {
  for (int k = 0; p && k < p->nops; k++)
    if (!strcmp(p->ops[k].name, name)) return k;
  return -1;
}

/* op's cycles and the sum of its DMA and vector unit cycles */
static int64_t op_and_unit_cycles(const tpu_program *p, const tpu_chip *chip, int op, int64_t *units) {
  tpu_timeline tl;
  tpu_diag d;
  if (tpu_timing_run(p, chip, 0, &tl, &d) != TPU_OK) return -1;
  int64_t c = tl.ops[op].cycles;
  const int64_t *u = tl.ops[op].unit_cycles;
  *units = u[TPU_UNIT_DMA_IN] + u[TPU_UNIT_DMA_OUT] + u[TPU_UNIT_VPU] + u[TPU_UNIT_EUP] + u[TPU_UNIT_XLU];
  tpu_timeline_free(&tl);
  return c;
}

int main(void) {
  tpu_chip v5p, v5e;
  tpu_diag d;
  CHECK(tpu_chip_load("v5p", &v5p, &d) == TPU_OK);
  CHECK(tpu_chip_load("v5e", &v5e, &d) == TPU_OK);
  CHECK(v5p.epilogue_reduce_serial == 1 && v5e.epilogue_reduce_serial == 0);

  tpu_program *p = compile_all(k_scores, &v5p);
  CHECK(p != NULL);
  if (!p) CHECK_DONE();
  int f = find_op(p, "f");
  CHECK(f >= 0 && p->ops[f].reduce_epilogue == 1);
  int64_t units = 0, with = op_and_unit_cycles(p, &v5p, f, &units);
  /* the text form carries the flag */
  char *text = tpu_program_text(p);
  CHECK(text && strstr(text, " reduce_epilogue=1") != NULL);
  tpu_program *q = NULL;
  CHECK(text && tpu_program_parse("epilogue.tasm", text, strlen(text), &q, &d) == TPU_OK);
  int64_t qu = 0;
  if (q) CHECK(q->ops[f].reduce_epilogue == 1 && op_and_unit_cycles(q, &v5p, f, &qu) == with);
  tpu_program_free(q);
  tpu_free(text);
  tpu_chip overlap = v5p;
  overlap.epilogue_reduce_serial = 0;
  int64_t ou = 0, without = op_and_unit_cycles(p, &overlap, f, &ou);
  printf("v5p q.k^T with exp and row sums: %lld cycles, %lld overlapped; DMA + vector %lld\n", (long long)with,
         (long long)without, (long long)units);
  CHECK(with >= units);
  CHECK(without + units / 20 < with);
  tpu_program_free(p);

  /* v5e: the same kernel overlaps */
  p = compile_all(k_scores, &v5e);
  CHECK(p != NULL && p->ops[find_op(p, "f")].reduce_epilogue == 1);
  if (p) {
    int64_t eu = 0, e5 = op_and_unit_cycles(p, &v5e, find_op(p, "f"), &eu);
    printf("v5e: %lld cycles; DMA + vector %lld\n", (long long)e5, (long long)eu);
    CHECK(e5 > 0 && e5 < eu);
  }
  tpu_program_free(p);

  /* an elementwise epilogue: not flagged */
  p = compile_all(k_plain, &v5p);
  CHECK(p != NULL && p->ops[find_op(p, "f")].reduce_epilogue == 0);
  tpu_program_free(p);
  CHECK_DONE();
}
