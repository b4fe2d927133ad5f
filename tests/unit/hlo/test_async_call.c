/* The XLA TPU compiler's SparseCore offload (v5p, v6e): computations marked
 * execution_thread="sparsecore", reached through call-start/call-done after the
 * PrepareAsyncCallStart/Done custom calls. Parsed (the thread kept and printed), run on both
 * backends (the called computation's values: a scatter-add) and timed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "chip/exec.h"
#include "chip/program.h"
#include "chip/timing.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "ref/ref.h"

/* moe_top2_train's router-gradient scatter-add in the compiler's form, cut to 8 rows. */
static const char *k_src =
    "HloModule sc\n"
    "%add (a: f32[], b: f32[]) -> f32[] {\n"
    "  %a = f32[]{:T(128)S(7)} parameter(0)\n"
    "  %b = f32[]{:T(128)S(7)} parameter(1)\n"
    "  ROOT %s = f32[]{:T(128)S(7)} add(%a, %b)\n"
    "}, execution_thread=\"sparsecore\"\n"
    "%fused (p0: f32[8], p1: s32[4], p2: f32[4]) -> f32[8] {\n"
    "  %p0 = f32[8]{0:T(1024)} parameter(0)\n"
    "  %p1 = s32[4]{0:T(1024)} parameter(1)\n"
    "  %p2 = f32[4]{0:T(1024)} parameter(2)\n"
    "  ROOT %sc = f32[8]{0:T(1024)} scatter(%p0, %p1, %p2), update_window_dims={}, inserted_window_dims={0}, "
    "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add\n"
    "}, execution_thread=\"sparsecore\"\n"
    "%inner (q0: f32[8], q1: s32[4], q2: f32[4]) -> f32[8] {\n"
    "  %q0 = f32[8]{0:T(1024)} parameter(0)\n"
    "  %q1 = s32[4]{0:T(1024)} parameter(1)\n"
    "  %q2 = f32[4]{0:T(1024)} parameter(2)\n"
    "  ROOT %f = f32[8]{0:T(1024)} fusion(%q0, %q1, %q2), kind=kCustom, calls=%fused\n"
    "}, execution_thread=\"sparsecore\"\n"
    "%called (r0: f32[8], r1: s32[4], r2: f32[4], r3: token[]) -> f32[8] {\n"
    "  %r3 = token[] parameter(3)\n"
    "  %r0 = f32[8]{0:T(1024)} parameter(0)\n"
    "  %r1 = s32[4]{0:T(1024)} parameter(1)\n"
    "  %r2 = f32[4]{0:T(1024)} parameter(2)\n"
    "  %cs = ((f32[8]{0:T(1024)}, s32[4]{0:T(1024)}, f32[4]{0:T(1024)}), f32[8]{0:T(1024)}, u32[]{:S(8)}) "
    "call-start(%r0, %r1, %r2), async_execution_thread=\"sparsecore\", to_apply=%inner\n"
    "  ROOT %cd = f32[8]{0:T(1024)} call-done(%cs)\n"
    "}, execution_thread=\"sparsecore\"\n"
    "ENTRY %main (x: f32[8], i: s32[4], u: f32[4]) -> f32[8] {\n"
    "  %x = f32[8]{0:T(1024)} parameter(0)\n"
    "  %i = s32[4]{0:T(1024)} parameter(1)\n"
    "  %u = f32[4]{0:T(1024)} parameter(2)\n"
    "  %prep = s32[]{:S(2)} custom-call(), custom_call_target=\"PrepareAsyncCallStart\"\n"
    "  %tok = token[] custom-call(%prep), custom_call_target=\"PrepareAsyncCallDone\"\n"
    "  %start = ((f32[8]{0:T(1024)}, s32[4]{0:T(1024)}, f32[4]{0:T(1024)}, token[]), f32[8]{0:T(1024)}) "
    "call-start(%x, %i, %u, %tok), async_execution_thread=\"sparsecore\", to_apply=%called\n"
    "  %done = f32[8]{0:T(1024)} call-done(%start)\n"
    "  ROOT %r = f32[8]{0:T(1024)} multiply(%done, %done)\n"
    "}\n";

int main(void) {
  tpu_module *m = NULL;
  tpu_diag d;
  tpu_status st = tpu_hlo_parse("sc.hlo", k_src, strlen(k_src), &m, &d);
  if (st == TPU_OK) st = tpu_ir_verify(m, &d);
  CHECK(st == TPU_OK);
  if (st != TPU_OK) {
    fprintf(stderr, "%s:%d:%d: %s\n", d.file, d.line, d.col, d.msg);
    return 1;
  }
  /* the thread of each computation is kept and printed back */
  int sc = 0;
  for (int k = 0; k < m->ncomps; k++) sc += m->comps[k]->execution_thread && !strcmp(m->comps[k]->execution_thread, "sparsecore");
  CHECK_EQ_INT(sc, 4);
  CHECK(m->entry->execution_thread == NULL);
  char *text = tpu_hlo_print(m);
  CHECK(text && strstr(text, "}, execution_thread=\"sparsecore\"\n"));
  tpu_module *m2 = NULL;
  CHECK(text && tpu_hlo_parse("printed.hlo", text, strlen(text), &m2, &d) == TPU_OK);
  tpu_module_free(m2);
  free(text);

  /* values: x + scatter-add of u at i (index 2 twice), squared, on both backends */
  tpu_tensor args[3], want, got;
  int64_t d8[1] = {8}, d4[1] = {4};
  tpu_tensor_alloc(&args[0], TPU_F32, 1, d8, &d);
  tpu_tensor_alloc(&args[1], TPU_S32, 1, d4, &d);
  tpu_tensor_alloc(&args[2], TPU_F32, 1, d4, &d);
  const int64_t idx[4] = {2, 5, 2, 7};
  for (int k = 0; k < 8; k++) tpu_tensor_set_f64(&args[0], k, k);
  for (int k = 0; k < 4; k++) {
    tpu_tensor_set_i64(&args[1], k, idx[k]);
    tpu_tensor_set_f64(&args[2], k, 10.0 * (k + 1));
  }
  double expect[8];
  for (int k = 0; k < 8; k++) expect[k] = k;
  for (int k = 0; k < 4; k++) expect[idx[k]] += 10.0 * (k + 1);
  CHECK(tpu_ref_run(m, args, 3, &want, &d) == TPU_OK);
  for (int k = 0; k < 8; k++) CHECK_NEAR(tpu_tensor_get_f64(&want, k), expect[k] * expect[k], 0);
  tpu_chip chip;
  CHECK(tpu_chip_load("v5p", &chip, &d) == TPU_OK);
  CHECK(tpu_chip_run_values(m, &chip, -1, args, 3, &got, &d) == TPU_OK);
  for (int k = 0; k < 8; k++) CHECK_NEAR(tpu_tensor_get_f64(&got, k), expect[k] * expect[k], 0);
  tpu_tensor_free(&want);
  tpu_tensor_free(&got);
  for (int k = 0; k < 3; k++) tpu_tensor_free(&args[k]);

  /* timing: the offloaded scatter is a kernel of its own */
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = &chip;
  tpu_program *p = NULL;
  st = tpu_compile(m, &o, &p, &d);
  CHECK(st == TPU_OK);
  if (st == TPU_OK) {
    tpu_timeline tl;
    CHECK(tpu_timing_run(p, &chip, 0, &tl, &d) == TPU_OK);
    int scatter = 0;
    for (int k = 0; k < p->nops; k++) scatter += p->ops[k].instr && p->ops[k].instr->op == TPU_OP_FUSION;
    CHECK(scatter >= 1);
    CHECK(tl.total_cycles > 0);
    tpu_timeline_free(&tl);
    tpu_program_free(p);
  }
  tpu_module_free(m);
  CHECK_DONE();
}
