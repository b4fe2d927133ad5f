/* A select-and-scatter (a max pool's gradient) runs in the XLA TPU compiler's layout of its own
 * (compile/passes/sas_layout.c): the dimensions its window slides along major, the two others
 * in the least padded tile of few rows; its operand and source copied in and its result copied
 * back where laid out otherwise; the gradient's forward pool in its operand's layout. libtpu
 * probes off the corpus (bench/fidelity/probes/sas_layout.py, data/sas_layout.jsonl):
 * f32[1,4000,32] window 2 runs in {2,0,1:T(1,128)} with three copies (v5e copy and copy.1 700
 * cycles each, windowed within VMEM; v4 copy.2 27,616), bf16[2,60,60,32] 3x3/2 in {3,0,2,1}
 * with three, f32[16,9,9,5] 2x2/2 in {0,3,2,1} and f32[4,20,20,128] in {3,0,2,1} with none
 * (their parameters arrive so). Without the rule tpusim ran the select-and-scatter in the
 * program's layout and no copy (max_gradpool1d_1x3000x64_w3s1_same_f32 -79 % on v4). */
#include <stdio.h>
#include <string.h>

#include "passes_util.h"
#include "unit/compile/backend_util.h"

static const char *fmt =
    "HloModule m\n"
    "mx {\n a = %s[] parameter(0)\n b = %s[] parameter(1)\n ROOT m = %s[] maximum(a, b)\n}\n"
    "ge {\n a = %s[] parameter(0)\n b = %s[] parameter(1)\n ROOT g = pred[] compare(a, b), direction=GE\n}\n"
    "ad {\n a = %s[] parameter(0)\n b = %s[] parameter(1)\n ROOT s = %s[] add(a, b)\n}\n"
    "ENTRY e {\n x = %s[%s] parameter(0)\n z = %s[] constant(-inf)\n"
    " r = %s[%s] reduce-window(x, z), window={size=%s stride=%s}, to_apply=mx\n"
    " c = %s[] constant(2)\n cb = %s[%s] broadcast(c), dimensions={}\n m = %s[%s] multiply(r, cb)\n"
    " zz = %s[] constant(0)\n"
    " ROOT g = %s[%s] select-and-scatter(x, m, zz), window={size=%s stride=%s}, select=ge, scatter=ad\n}\n";

static void program(char *out, size_t n, const char *t, const char *x, const char *o, const char *w, const char *s) {
  snprintf(out, n, fmt, t, t, t, t, t, t, t, t, t, x, t, t, o, w, s, t, t, o, t, o, t, t, x, w, s);
}

/* The select-and-scatter's layout (minor to major, as "2,0,1") and the copies of the compiled
 * entry: sas copies (*sas), other copies (*other). */
static void layout_of(const char *src, char *lay, size_t n, int *sas, int *other) {
  *sas = *other = -1;
  lay[0] = 0;
  tpu_module *m = compile_src(src);
  if (!m) return;
  *sas = *other = 0;
  for (int i = 0; i < m->entry->ninstrs; i++) {
    const tpu_instr *c = m->entry->instrs[i];
    if (c->op == TPU_OP_SELECT_AND_SCATTER) {
      size_t k = 0;
      for (int d = 0; d < c->shape.rank && k + 4 < n; d++)
        k += (size_t)snprintf(lay + k, n - k, d ? ",%d" : "%d", c->shape.has_layout ? c->shape.minor_to_major[d] : c->shape.rank - 1 - d);
    }
    if (c->op != TPU_OP_COPY) continue;
    if (c->name && !strncmp(c->name, "copy.sas_", 9)) (*sas)++;
    else (*other)++;
  }
  tpu_module_free(m);
}

static void expect(const char *t, const char *x, const char *o, const char *w, const char *s, const char *want, int copies) {
  char src[2400], lay[64];
  int sas, other;
  program(src, sizeof src, t, x, o, w, s);
  layout_of(src, lay, sizeof lay, &sas, &other);
  printf("%s[%s] window %s stride %s: select-and-scatter {%s}, %d copies around it, %d others (expected {%s}, %d, 0)\n", t,
         x, w, s, lay, sas, other, want, copies);
  CHECK(!strcmp(lay, want) && sas == copies && other == 0);
}

static void layouts(void) {
  expect("f32", "1,4000,32", "1,3999,32", "1x2x1", "1x1x1", "2,0,1", 3);
  expect("f32", "4,1200,256", "4,600,256", "1x2x1", "1x2x1", "2,0,1", 3);
  expect("bf16", "2,60,60,32", "2,29,29,32", "1x3x3x1", "1x2x2x1", "3,0,2,1", 3);
  expect("f32", "3,50,50,8", "3,49,49,8", "1x2x2x1", "1x1x1x1", "3,0,2,1", 3);
  expect("f32", "16,9,9,5", "16,4,4,5", "1x2x2x1", "1x2x2x1", "0,3,2,1", 0);
  expect("f32", "4,20,20,128", "4,10,10,128", "1x2x2x1", "1x2x2x1", "3,0,2,1", 0);
}

/* The copies' cycles against the compiler's (probe f32[1,4000,32] window 2): v5e's copies in
 * are its windowed copies within VMEM (700 each: 7 windows of 640 small tiles), v4's copy back
 * at least the small-tile floor (4,000 T(1,128) tiles) and within the compiler's 27,616. */
static void cycles(void) {
  char src[2400];
  program(src, sizeof src, "f32", "1,4000,32", "1,3999,32", "1x2x1", "1x1x1");
  tpu_chip c;
  tpu_module *m = NULL;
  tpu_program *p = compile_for_with("v5e", src, 1, &c, &m);
  double in = named_op_value(p, &c, "copy.sas_operand", 1), src_in = named_op_value(p, &c, "copy.sas_source", 1);
  printf("v5e copies into the select-and-scatter's layout: %.0f and %.0f cycles (the compiler 700, 700)\n", in, src_in);
  CHECK(in >= 630 && in <= 770 && src_in >= 630 && src_in <= 770);
  tpu_program_free(p);
  tpu_module_free(m);
  p = compile_for_with("v4:core", src, 1, &c, &m);
  double out = named_op_value(p, &c, "copy.sas_result", 1);
  printf("v4 copy back: %.0f cycles (the compiler 27,616; floor 4,000 tiles x %.1f)\n", out, c.small_tile_transpose_cycles);
  CHECK(out >= 4000 * c.small_tile_transpose_cycles && out <= 27616 * 1.1);
  tpu_program_free(p);
  tpu_module_free(m);
}

int main(void) {
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &g_chip, &d) == TPU_OK);
  layouts();
  cycles();
  CHECK_DONE();
}
