/* The back end's buffer assignment (compile/backend/buffer_assign.c): HBM overflow fails with the message,
 * dead values' bytes reused, values larger than VMEM through HBM, loop-carried buffers. */

#include <stdio.h>
#include <string.h>

#include "util.h"
#include "unit/compile/backend_util.h"

static tpu_chip g_chip;

static void hbm_overflow(void) {
  /* 3 x 8 GiB of f32 on a 16 GiB chip. */
  tpu_module *m = parse(
      "HloModule big\n"
      "ENTRY e {\n"
      "  a = f32[65536,32768] parameter(0)\n"
      "  b = f32[65536,32768] parameter(1)\n"
      "  ROOT c = f32[65536,32768] add(a, b)\n"
      "}\n");
  CHECK(m != NULL);
  if (!m) return;
  tpu_diag d;
  tpu_program *p = compile(m, &g_chip, &d);
  CHECK(p == NULL);
  CHECK_EQ_INT(d.status, TPU_ERR_LIMIT);
  char want[200];
  snprintf(want, sizeof want, "program needs %lld bytes of HBM; v5e has %lld",
           (long long)3 * 65536 * 32768 * 4, (long long)g_chip.hbm_bytes);
  CHECK(strstr(d.msg, want) != NULL);
  CHECK(strstr(d.msg, "'c'") != NULL);
  if (!strstr(d.msg, want)) fprintf(stderr, "  got: %s\n", d.msg);
  tpu_program_free(p);
  tpu_module_free(m);
}

static void reuse_and_layout(void) {
  /* A chain x -> a -> b -> c: a dies once b exists, so c reuses a's bytes. */
  tpu_module *m = parse(
      "HloModule chain\n"
      "ENTRY e {\n"
      "  x = f32[3,100] parameter(0)\n"
      "  a = f32[3,100] negate(x)\n"
      "  b = f32[3,100] exponential(a)\n"
      "  ROOT c = f32[3,100] negate(b)\n"
      "}\n");
  CHECK(m != NULL);
  if (!m) return;
  tpu_diag d;
  tpu_program *p = compile(m, &g_chip, &d);
  CHECK(p != NULL);
  if (p) {
    /* f32[3,100] pads to a (4,128) tile, the compiler's T(4,128) for 3 rows: 2048 bytes.
     * a and b stay in VMEM (vmem_residency). */
    CHECK_EQ_INT(p->nhbm, 2);
    for (int i = 0; i < p->nhbm; i++) CHECK_EQ_INT(p->hbm[i].bytes, 2048);
    CHECK_EQ_INT(p->hbm_footprint, 2 * 2048);
    CHECK_EQ_INT(p->nops, 3);
    CHECK_NEAR(p->ops[0].flops, 300, 0);
    CHECK_NEAR(p->ops[0].padded_flops, 1024, 0);
    CHECK_NEAR(p->ops[0].bytes, 2400, 0);
    CHECK_NEAR(p->ops[0].padded_bytes, 4096, 0);
    /* exponential: one EUP push per register. */
    int eup = 0;
    for (int i = 0; i < p->ninsns; i++)
      if (p->insns[i].opc == TPU_ISA_EUP && p->insns[i].op == 1) eup++;
    CHECK_EQ_INT(eup, 1);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* The same chain with values larger than VMEM: they go through HBM. Each elementwise op
 * writes over the operand that dies at it, and the result's buffer holds them all (XLA's
 * buffer assignment: a temporary may live in an output allocation before the output is
 * written): the argument and the output, no temporary heap. */
static void hbm_reuse(void) {
  tpu_module *m = parse(
      "HloModule chain\n"
      "ENTRY e {\n"
      "  x = f32[40960,1024] parameter(0)\n"
      "  a = f32[40960,1024] negate(x)\n"
      "  b = f32[40960,1024] exponential(a)\n"
      "  ROOT c = f32[40960,1024] negate(b)\n"
      "}\n");
  CHECK(m != NULL);
  if (!m) return;
  tpu_diag d;
  tpu_program *p = compile(m, &g_chip, &d);
  CHECK(p != NULL);
  if (p) {
    const int64_t sz = (int64_t)40960 * 1024 * 4; /* 160 MiB each, VMEM is 128 MiB */
    CHECK_EQ_INT(p->nhbm, 4);
    for (int i = 0; i < p->nhbm; i++) CHECK_EQ_INT(p->hbm[i].bytes, sz);
    CHECK_EQ_INT(p->hbm[3].offset, p->hbm[1].offset); /* c takes a's place */
    CHECK_EQ_INT(p->hbm[2].offset, p->hbm[1].offset); /* and b's */
    CHECK_EQ_INT(p->hbm_footprint, 2 * sz);
    CHECK_EQ_INT(p->hbm_arg, sz);
    CHECK_EQ_INT(p->hbm_out, sz);
    CHECK_EQ_INT(p->hbm_temp, 0);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* Buffer `name` shares no byte with any other buffer of the program. */
static int exclusive(const tpu_program *p, const char *name) {
  int b = -1;
  for (int i = 0; i < p->nhbm; i++)
    if (!strcmp(p->hbm[i].name, name)) b = i;
  if (b < 0) return 0;
  for (int i = 0; i < p->nhbm; i++)
    if (i != b && p->hbm[i].offset < p->hbm[b].offset + p->hbm[b].bytes &&
        p->hbm[b].offset < p->hbm[i].offset + p->hbm[i].bytes)
      return 0;
  return 1;
}

static void trip_counts(void) {
  tpu_module *m = parse(
      "HloModule w\n"
      "body {\n"
      "  p = (s32[], f32[8]) parameter(0)\n"
      "  i = s32[] get-tuple-element(p), index=0\n"
      "  one = s32[] constant(3)\n"
      "  i2 = s32[] add(i, one)\n"
      "  x = f32[8] get-tuple-element(p), index=1\n"
      "  y = f32[8] exponential(x)\n"
      "  ROOT t = (s32[], f32[8]) tuple(i2, y)\n"
      "}\n"
      "cond {\n"
      "  p = (s32[], f32[8]) parameter(0)\n"
      "  i = s32[] get-tuple-element(p), index=0\n"
      "  n = s32[] constant(20)\n"
      "  ROOT lt = pred[] compare(i, n), direction=LT\n"
      "}\n"
      "ENTRY e {\n"
      "  x = f32[8] parameter(0)\n"
      "  z = s32[] constant(2)\n"
      "  t = (s32[], f32[8]) tuple(z, x)\n"
      "  ROOT w = (s32[], f32[8]) while(t), condition=cond, body=body\n"
      "}\n");
  CHECK(m != NULL);
  if (!m) return;
  tpu_diag d;
  tpu_program *p = compile(m, &g_chip, &d);
  CHECK(p != NULL);
  if (p) {
    int found = 0;
    for (int i = 0; i < p->ninsns; i++)
      if (p->insns[i].opc == TPU_ISA_LOOP && p->insns[i].what && !strcmp(p->insns[i].what, "w")) {
        CHECK_EQ_INT(p->insns[i].trips, 6); /* i = 2, 5, 8, 11, 14, 17 */
        found = 1;
      }
    CHECK(found);
    /* Constants (used on every iteration) and the input keep their bytes to the end. */
    CHECK(exclusive(p, "one"));
    CHECK(exclusive(p, "n"));
    CHECK(exclusive(p, "z"));
    CHECK(exclusive(p, "x"));
    tpu_timeline tl;
    CHECK(tpu_timing_run(p, &g_chip, 0, &tl, &d) == TPU_OK);
    int y = -1;
    for (int i = 0; i < p->nops; i++)
      if (!strcmp(p->ops[i].name, "y")) y = i;
    CHECK(y >= 0);
    if (y >= 0) CHECK_EQ_INT(tl.ops[y].count, 6);
    tpu_timeline_free(&tl);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

int main(void) {
  if (!closed_form_v5e(&g_chip)) return 1;
  reuse_and_layout();
  hbm_reuse();
  trip_counts();
  hbm_overflow();
  CHECK_DONE();
}
