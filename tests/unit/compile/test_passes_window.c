/* Pooling reduce-windows in own compilation (compile/passes/window_layout.c, through
 * tpu_compile_hlo on v5e): the layout each runs in and the copies of a parameter into it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "passes_util.h"

static const tpu_instr *find_op(const tpu_comp *c, tpu_opcode op) {
  for (int j = 0; j < c->ninstrs; j++)
    if (c->instrs[j]->op == op) return c->instrs[j];
  return NULL;
}

/* The reduce-window: at the entry, or inside the fusion that holds it. */
static const tpu_instr *find_window(const tpu_module *m) {
  const tpu_instr *w = find_op(m->entry, TPU_OP_REDUCE_WINDOW);
  for (int j = 0; !w && j < m->entry->ninstrs; j++)
    if (m->entry->instrs[j]->op == TPU_OP_FUSION) w = find_op(m->entry->instrs[j]->calls, TPU_OP_REDUCE_WINDOW);
  return w;
}

static int param_copies(const tpu_module *m) {
  int n = 0;
  for (int j = 0; j < m->entry->ninstrs; j++) {
    const tpu_instr *in = m->entry->instrs[j];
    n += in->op == TPU_OP_COPY && in->operands[0]->op == TPU_OP_PARAMETER;
  }
  return n;
}

/* The layout a pooling window runs in: its result's least padded tiling where that pads
 * strictly less than its operand's, else its operand's, as the XLA TPU compiler's programs
 * (bench/fidelity/families/compiled): f32[32,112,112,3] ({2,1,3,0}) is pooled into
 * [32,110,110,3]{2,0,3,1} through a copy (the window slides along the lanes, W);
 * f32[8,56,56,256] row-major into [8,18,18,256]{3,0,2,1} with no copy of its own (the window
 * slides along major dimensions only: the kernel relays out as it reads); f32[8,112,112,512]
 * stays row-major; bf16[1,112,112,64]{2,3,1,0} stays so, no copy, though the window slides
 * along its lanes. */
static void test_window_layouts(void) {
  struct { const char *ty; int n, h, w, c, k, s, pad; const char *layout; int copies; } cs[] = {
      {"f32", 32, 112, 112, 3, 3, 1, 0, "{2,0,3,1}", 1},
      {"f32", 8, 56, 56, 256, 3, 3, 0, "{3,0,2,1}", 0},
      {"f32", 8, 112, 112, 512, 3, 1, 1, "{3,2,1,0}", 0},
      {"bf16", 1, 112, 112, 64, 2, 1, 0, "{2,3,1,0}", 0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    int oh = (cs[i].h + 2 * cs[i].pad - cs[i].k) / cs[i].s + 1, ow = (cs[i].w + 2 * cs[i].pad - cs[i].k) / cs[i].s + 1;
    char src[1024];
    snprintf(src, sizeof src,
             "HloModule m\nmx {\n a = %s[] parameter(0)\n b = %s[] parameter(1)\n ROOT m = %s[] maximum(a, b)\n}\n"
             "ENTRY e {\n x = %s[%d,%d,%d,%d]{3,2,1,0} parameter(0)\n z = %s[] constant(-inf)\n"
             " ROOT r = %s[%d,%d,%d,%d]{3,2,1,0} reduce-window(x, z), window={size=1x%dx%dx1 stride=1x%dx%dx1"
             " pad=0_0x%d_%dx%d_%dx0_0}, to_apply=mx\n}\n",
             cs[i].ty, cs[i].ty, cs[i].ty, cs[i].ty, cs[i].n, cs[i].h, cs[i].w, cs[i].c, cs[i].ty, cs[i].ty, cs[i].n, oh,
             ow, cs[i].c, cs[i].k, cs[i].k, cs[i].s, cs[i].s, cs[i].pad, cs[i].pad, cs[i].pad, cs[i].pad);
    tpu_module *m = compile_src(src);
    if (!m) continue;
    const tpu_instr *w = find_window(m);
    CHECK(w != NULL);
    if (!w) {
      tpu_module_free(m);
      continue;
    }
    char got[64];
    int at = snprintf(got, sizeof got, "{");
    for (int d = 0; d < w->shape.rank; d++)
      at += snprintf(got + at, sizeof got - (size_t)at, "%s%d", d ? "," : "", w->shape.has_layout ? w->shape.minor_to_major[d] : w->shape.rank - 1 - d);
    snprintf(got + at, sizeof got - (size_t)at, "}");
    int copies = param_copies(m);
    printf("%s[%d,%d,%d,%d] pooled %dx%d/%d: window in %s, %d copies of the parameter\n", cs[i].ty, cs[i].n, cs[i].h,
           cs[i].w, cs[i].c, cs[i].k, cs[i].k, cs[i].s, got, copies);
    CHECK(!strcmp(got, cs[i].layout));
    CHECK_EQ_INT(copies, cs[i].copies);
    tpu_module_free(m);
  }
}

int main(void) {
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &g_chip, &d) == TPU_OK);
  test_window_layouts();
  CHECK_DONE();
}
