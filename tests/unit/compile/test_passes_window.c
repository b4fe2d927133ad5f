/* Pooling reduce-windows in own compilation (compile/passes/window_layout.c and fuse.c, through
 * tpu_compile_hlo on v5e): the layout each runs in, the copies of a parameter into it, and
 * which windows fuse with their neighbours. */
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
 * along its lanes; f32[8,7,7,3]{2,0,3,1} stays so (in whole 8-row tiles {0,3,2,1} pads alike).
 * A result whose own row-major tiling pads no more than its operand's runs row-major: libtpu
 * v5e probes outside the corpus pool f32 and bf16 [32,33,33,128] (the parameter {3,0,2,1}) by
 * 2x2/2, 2x2/1 and 3x3/2 into row-major [32,16,16,128] or [32,32,32,128] through a copy of
 * the parameter, and by 3x3/1 into [32,31,31,128]{3,0,2,1} (31 rows pad to 32) with none. */
static void test_window_layouts(void) {
  struct { const char *ty; int n, h, w, c, k, s, pad; const char *layout; int copies; } cs[] = {
      {"f32", 32, 112, 112, 3, 3, 1, 0, "{2,0,3,1}", 1},
      {"f32", 8, 56, 56, 256, 3, 3, 0, "{3,0,2,1}", 0},
      {"f32", 8, 112, 112, 512, 3, 1, 1, "{3,2,1,0}", 0},
      {"bf16", 1, 112, 112, 64, 2, 1, 0, "{2,3,1,0}", 0},
      {"f32", 8, 7, 7, 3, 2, 2, 0, "{2,0,3,1}", 0},
      {"f32", 32, 33, 33, 128, 2, 2, 0, "{3,2,1,0}", 1},
      {"bf16", 32, 33, 33, 128, 2, 1, 0, "{3,2,1,0}", 1},
      {"f32", 32, 33, 33, 128, 3, 1, 0, "{3,0,2,1}", 0},
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

/* A pooling window that slides along major dimensions only is a kOutput kernel with its
 * operand's convert and its elementwise consumers, as the compiler's `fusion.5` of
 * avgpool2d_8x28x28x256_w3s2_same_bf16 (convert, reduce-window, scale, convert: one kernel of
 * 17,586 cycles on v5e); one that slides along its tile is a kernel of its own and the
 * scaling another (avgpool2d_8x112x112x512_w3s1_same_f32: the compiler's reduce-window, then
 * its broadcast_multiply_fusion); so is bf16[1,7,7,96]'s, pooled row-major: layouts are
 * weighed in whole 8-row tiles (its batch of 1 in 1-row tiles would pad less;
 * avgpool2d_1x7x7x96_w5s3_same_bf16's reduce-window is {3,2,1,0} on every generation). */
static void test_window_fusion(void) {
  struct { int n, h, c, k, s, pad; const char *ty; int kernels, fused; } cs[] = {
      {8, 28, 256, 3, 2, 1, "bf16", 1, 1},
      {8, 112, 512, 3, 1, 1, "f32", 2, 0},
      {1, 7, 96, 5, 3, 2, "bf16", -1, 0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    int o = (cs[i].h + 2 * cs[i].pad - cs[i].k) / cs[i].s + 1;
    char src[1536];
    snprintf(src, sizeof src,
             "HloModule m\nadd {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
             "ENTRY e {\n x = %s[%d,%d,%d,%d]{3,2,1,0} parameter(0)\n xf = f32[%d,%d,%d,%d] convert(x)\n"
             " z = f32[] constant(0)\n r = f32[%d,%d,%d,%d] reduce-window(xf, z), window={size=1x%dx%dx1 stride=1x%dx%dx1"
             " pad=0_0x%d_%dx%d_%dx0_0}, to_apply=add\n k = f32[] constant(9)\n kb = f32[%d,%d,%d,%d] broadcast(k), dimensions={}\n"
             " d = f32[%d,%d,%d,%d] divide(r, kb)\n ROOT y = %s[%d,%d,%d,%d] convert(d)\n}\n",
             cs[i].ty, cs[i].n, cs[i].h, cs[i].h, cs[i].c, cs[i].n, cs[i].h, cs[i].h, cs[i].c, cs[i].n, o, o, cs[i].c, cs[i].k,
             cs[i].k, cs[i].s, cs[i].s, cs[i].pad, cs[i].pad, cs[i].pad, cs[i].pad, cs[i].n, o, o, cs[i].c, cs[i].n, o, o, cs[i].c, cs[i].ty,
             cs[i].n, o, o, cs[i].c);
    tpu_module *m = compile_src(src);
    if (!m) continue;
    int kernels = 0, fused = 0;
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *in = m->entry->instrs[j];
      if (in->op == TPU_OP_PARAMETER || in->op == TPU_OP_CONSTANT) continue;
      kernels++;
      if (in->op == TPU_OP_FUSION && find_op(in->calls, TPU_OP_REDUCE_WINDOW)) fused = find_op(in->calls, TPU_OP_DIVIDE) != NULL;
    }
    printf("%s[%d,%d,%d,%d] average-pooled by %d: %d kernels, the window %s\n", cs[i].ty, cs[i].n, cs[i].h, cs[i].h,
           cs[i].c, cs[i].s, kernels, fused ? "fused" : "a kernel of its own");
    if (cs[i].kernels >= 0) CHECK_EQ_INT(kernels, cs[i].kernels);
    CHECK_EQ_INT(fused, cs[i].fused);
    tpu_module_free(m);
  }
}

/* A pooling window reads the narrow value a widening convert feeds it when that value is
 * laid out as the window runs (window_widen.c): the XLA TPU compiler's reduce-window of
 * avgpool2d_1x7x7x96_w5s3_same_bf16 and avgpool1d_32x3000x96_w3s1_valid_bf16 reads the bf16
 * parameter and sums in f32, no f32 copy of it written first; where the window runs in another
 * layout (bf16[32,112,112,3]{2,1,3,0} pooled in {2,0,3,1}) the convert stays apart (the
 * compiler's copy_convert_fusion). One that another op reads too still folds into the window
 * (libtpu v4/v5e probe: bf16[16,2048,128] summed 4-wide, its f32 value also doubled: the
 * window reads the bf16 parameter, the doubling converts again in its own kernel). */
static void test_window_reads_narrow(void) {
  struct { int n, h, c; const char *extra; int folded; } cs[] = {
      {1, 7, 96, "", 1},
      {1, 3000, 96, "", 1},
      {32, 112, 3, "", 0},
      {1, 7, 96, "xf", 1},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    int one_d = cs[i].h > 1000, o = one_d ? cs[i].h - 2 : (cs[i].h - 3) / 2 + 1;
    char src[1536], xs[64], os[64];
    if (one_d) {
      snprintf(xs, sizeof xs, "[%d,%d,%d]", cs[i].n, cs[i].h, cs[i].c);
      snprintf(os, sizeof os, "[%d,%d,%d]", cs[i].n, o, cs[i].c);
    } else {
      snprintf(xs, sizeof xs, "[%d,%d,%d,%d]", cs[i].n, cs[i].h, cs[i].h, cs[i].c);
      snprintf(os, sizeof os, "[%d,%d,%d,%d]", cs[i].n, o, o, cs[i].c);
    }
    const char *win = one_d ? "size=1x3x1" : "size=1x3x3x1 stride=1x2x2x1";
    if (*cs[i].extra)
      snprintf(src, sizeof src,
               "HloModule m\nadd {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
               "ENTRY e {\n x = bf16%s parameter(0)\n xf = f32%s convert(x)\n z = f32[] constant(0)\n"
               " r = f32%s reduce-window(xf, z), window={%s}, to_apply=add\n ROOT t = (f32%s, f32%s) tuple(r, xf)\n}\n",
               xs, xs, os, win, os, xs);
    else
      snprintf(src, sizeof src,
               "HloModule m\nadd {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
               "ENTRY e {\n x = bf16%s parameter(0)\n xf = f32%s convert(x)\n z = f32[] constant(0)\n"
               " r = f32%s reduce-window(xf, z), window={%s}, to_apply=add\n k = f32[] constant(9)\n"
               " kb = f32%s broadcast(k), dimensions={}\n d = f32%s divide(r, kb)\n ROOT y = bf16%s convert(d)\n}\n",
               xs, xs, os, win, os, os, os);
    tpu_module *m = compile_src(src);
    if (!m) continue;
    int folded = 0;
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *in = m->entry->instrs[j];
      if (in->op != TPU_OP_FUSION || !find_op(in->calls, TPU_OP_REDUCE_WINDOW)) continue;
      /* the window's kernel widens its bf16 operand itself */
      folded = find_op(in->calls, TPU_OP_CONVERT) != NULL && in->noperands >= 1 && in->operands[0]->op == TPU_OP_PARAMETER &&
               in->operands[0]->shape.dtype == TPU_BF16;
    }
    printf("bf16%s summed in f32%s: the window %s\n", xs, *cs[i].extra ? " (the f32 value returned too)" : "",
           folded ? "reads the bf16 parameter" : "reads an f32 value");
    CHECK_EQ_INT(folded, cs[i].folded);
    tpu_module_free(m);
  }
}

int main(void) {
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &g_chip, &d) == TPU_OK);
  test_window_layouts();
  test_window_fusion();
  test_window_reads_narrow();
  CHECK_DONE();
}
