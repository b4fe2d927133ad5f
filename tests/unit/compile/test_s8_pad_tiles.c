/* An 8-bit pad runs in 8-row tiles (compile/passes/s8_pad_tiles.c): where the XLA TPU compiler
 * tiles the operand in 32 rows (second-minor dimension a multiple of 32, more than one column
 * of tiles) it copies it first, and copies the result back where the program's result is
 * tiled in 32 rows too (libtpu probes, bench/fidelity/probes/s8_pad.py and small_tiles.py:
 * s8[256,64] padded to [258,64] runs copy, pad, copy; [2048,256] to [2050,256] copy, pad;
 * [1000,7], [128,128] (one column of tiles) and bf16 pads one pad kernel). */
#include <stdio.h>
#include <string.h>

#include "passes_util.h"
#include "unit/compile/backend_util.h"

static const char *fmt = "HloModule p\nENTRY e {\n x = %s[%s] parameter(0)\n z = %s[] constant(0)\n"
                         " ROOT r = %s[%s] pad(x, z), padding=%s\n}\n";

/* The s8_pad copies of the compiled entry: before the pad (*in), after it (*out). */
static void copies_of(const char *dt, const char *shape, const char *out_shape, const char *pad, int *in, int *out) {
  char src[800];
  snprintf(src, sizeof src, fmt, dt, shape, dt, dt, out_shape, pad);
  *in = *out = -1;
  tpu_module *m = compile_src(src);
  if (!m) return;
  *in = *out = 0;
  for (int i = 0; i < m->entry->ninstrs; i++) {
    const tpu_instr *c = m->entry->instrs[i];
    if (c->op != TPU_OP_COPY || !c->name) continue;
    if (!strncmp(c->name, "copy.s8_pad_in", 14)) (*in)++;
    if (!strncmp(c->name, "copy.s8_pad_out", 15)) (*out)++;
  }
  tpu_module_free(m);
}

static void expect(const char *dt, const char *shape, const char *out_shape, const char *pad, int in, int out) {
  int i, o;
  copies_of(dt, shape, out_shape, pad, &i, &o);
  printf("%s[%s] padded %s to [%s]: %d copy in, %d copy out (expected %d, %d)\n", dt, shape, pad, out_shape, i, o, in, out);
  CHECK(i == in && o == out);
}

static void s8_pad_copies(void) {
  expect("s8", "256,64", "258,64", "1_1x0_0", 1, 1);    /* {0,1}: 64 rows of 256 */
  expect("s8", "300,64", "304,64", "2_2x0_0", 1, 1);    /* {0,1}: 64 rows of 300 */
  expect("s8", "64,1000", "64,1003", "0_0x1_2", 1, 1);  /* {1,0}: 64 rows of 1000 */
  expect("s8", "2048,256", "2050,256", "1_1x0_0", 1, 0); /* 2050 rows: 8-row tiles */
  expect("s8", "64,1000", "66,1000", "1_1x0_0", 1, 0);
  expect("s8", "2048,256", "2048,259", "0_0x1_2", 0, 0); /* relaid into {0,1} by a copy of its own */
  expect("s8", "1000,7", "1002,7", "1_1x0_0", 0, 0);     /* {0,1}: 7 rows */
  expect("s8", "320,48", "320,50", "0_0x1_1", 0, 0);     /* {0,1}: 48 rows */
  expect("s8", "128,128", "130,130", "1_1x1_1", 0, 0);   /* one column of tiles: a bitcast */
  expect("bf16", "256,64", "258,64", "1_1x0_0", 0, 0);
}

/* On v5e the s8[256,64] pad takes three kernels as the compiler's (2,002 + 2,095 + 2,089
 * cycles); without the rule tpusim ran one, a third of the compiler's time. */
static void s8_pad_kernels(void) {
  char src[800];
  snprintf(src, sizeof src, fmt, "s8", "256,64", "s8", "s8", "258,64", "1_1x0_0");
  tpu_chip c;
  tpu_module *m = NULL;
  tpu_program *p = compile_for_with("v5e", src, 1, &c, &m);
  double in = named_op_value(p, &c, "copy.s8_pad_in", 1), out = named_op_value(p, &c, "copy.s8_pad_out", 1);
  printf("v5e copies around the pad of s8[256,64]: in %.0f, out %.0f cycles\n", in, out);
  CHECK(in > 0 && out > 0);
  tpu_program_free(p);
  tpu_module_free(m);
}

int main(void) {
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &g_chip, &d) == TPU_OK);
  s8_pad_copies();
  s8_pad_kernels();
  CHECK_DONE();
}
