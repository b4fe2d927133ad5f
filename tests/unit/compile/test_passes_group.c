/* Grouped convolutions in the group-split layout (compile/passes/group_conv.c): the kernel
 * writes [spatial..., G, B, Cog] (or [..., G, Cog, B] with the batch in the lanes) and a
 * kLoop kernel `copy.group` merges the groups back into the features, as the XLA TPU
 * compiler's programs do; values unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ref/ref.h"
#include "passes_util.h"

/* The entry's copy.group kernel, or NULL. */
static const tpu_instr *group_copy(const tpu_module *m) {
  for (int j = 0; j < m->entry->ninstrs; j++) {
    const tpu_instr *in = m->entry->instrs[j];
    if (in->op == TPU_OP_FUSION && !strncmp(in->name, "copy.group", 10)) return in;
  }
  return NULL;
}

static void same_values(const char *src, const tpu_module *m) {
  tpu_module *m0 = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse("g.hlo", src, strlen(src), &m0, &d) == TPU_OK);
  if (!m0) return;
  tpu_tensor args[2], r0, r1;
  memset(&r0, 0, sizeof r0);
  memset(&r1, 0, sizeof r1);
  for (int a = 0; a < 2; a++) {
    const tpu_shape *s = &m0->entry->params[a]->shape;
    CHECK(tpu_tensor_alloc(&args[a], s->dtype, s->rank, s->dims, &d) == TPU_OK);
    uint32_t seed = 99u + (uint32_t)a;
    for (int64_t e = 0; e < tpu_shape_numel(s); e++) {
      seed = seed * 1664525u + 1013904223u;
      tpu_tensor_set_f64(&args[a], e, (double)(int32_t)(seed >> 8) / (double)(1 << 23) - 0.5);
    }
  }
  CHECK(tpu_ref_run(m0, args, 2, &r0, &d) == TPU_OK);
  CHECK(tpu_ref_run(m, args, 2, &r1, &d) == TPU_OK);
  CHECK(same_bits(&r0, &r1));
  for (int a = 0; a < 2; a++) tpu_tensor_free(&args[a]);
  tpu_tensor_free(&r0);
  tpu_tensor_free(&r1);
  tpu_module_free(m0);
}

/* gconv_b8_56x56_c256to512_g32_k1_f32's form, smaller: 8 groups of 4 input and 8 output
 * features; the kernel convolves [B,H,W,G,Cg] with the group a spatial dimension, writes
 * f32[14,14,8,8,8] (H, W, G, B, Cog) and one copy merges it. A relu after the convolution
 * stays in its kernel. */
static void test_group_split(void) {
  const char *src =
      "HloModule m\nENTRY e {\n x = f32[8,14,14,32] parameter(0)\n w = f32[3,3,4,64] parameter(1)\n"
      " c = f32[8,14,14,64] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f,"
      " feature_group_count=8\n"
      " z = f32[] constant(0)\n zb = f32[8,14,14,64] broadcast(z), dimensions={}\n"
      " ROOT r = f32[8,14,14,64] maximum(c, zb)\n}\n";
  tpu_module *m = compile_src(src);
  if (!m) return;
  const tpu_instr *cp = group_copy(m);
  CHECK(cp != NULL);
  if (cp) {
    const tpu_shape *k = &cp->operands[0]->shape;
    printf("grouped convolution: kernel writes [%lld,%lld,%lld,%lld,%lld], copy %s\n", (long long)k->dims[0],
           (long long)k->dims[1], (long long)k->dims[2], (long long)k->dims[3], (long long)k->dims[4], cp->name);
    CHECK(k->rank == 5 && k->dims[0] == 14 && k->dims[1] == 14 && k->dims[2] == 8 && k->dims[3] == 8 && k->dims[4] == 8);
    CHECK(cp == m->entry->root);
    /* the relu is computed in the convolution's kernel */
    const tpu_instr *kr = cp->operands[0];
    int relu = 0;
    for (int j = 0; kr->op == TPU_OP_FUSION && j < kr->calls->ninstrs; j++) relu |= kr->calls->instrs[j]->op == TPU_OP_MAXIMUM;
    CHECK(relu);
    /* the convolution in the compiler's form: [B,14,14,8,4] x [3,3,4,8,8], the group an
     * innermost spatial dimension (window 8, stride 7, lhs_dilate 8), no feature groups */
    const tpu_instr *c5 = NULL;
    for (int j = 0; kr->op == TPU_OP_FUSION && j < kr->calls->ninstrs; j++)
      if (kr->calls->instrs[j]->op == TPU_OP_CONVOLUTION) c5 = kr->calls->instrs[j];
    CHECK(c5 && c5->shape.rank == 5 && c5->feature_group_count == 1 && c5->conv->nspatial == 3);
    if (c5 && c5->nwindow == 3)
      CHECK(c5->window[2].size == 8 && c5->window[2].stride == 7 && c5->window[2].base_dilation == 8 &&
            c5->operands[0]->shape.dims[4] == 4 && c5->operands[1]->shape.dims[3] == 8);
  }
  same_values(src, m);
  tpu_module_free(m);
}

/* A batch larger than the features with a window of several taps: the batch in the lanes,
 * the group's features in the sublanes (gconv_b8_28x28_c16to16_g4_k3_f32's
 * [8,28,28,4,4]{0,4,3,2,1}): the kernel writes [H, W, G, Cog, B]. */
static void test_group_split_batch_lanes(void) {
  const char *src =
      "HloModule m\nENTRY e {\n x = f32[8,7,7,16] parameter(0)\n w = f32[3,3,4,16] parameter(1)\n"
      " ROOT c = f32[8,7,7,16] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f,"
      " feature_group_count=4\n}\n";
  tpu_module *m = compile_src(src);
  if (!m) return;
  const tpu_instr *cp = group_copy(m);
  CHECK(cp != NULL);
  if (cp) {
    const tpu_shape *k = &cp->operands[0]->shape;
    CHECK(k->rank == 5 && k->dims[2] == 4 && k->dims[3] == 4 && k->dims[4] == 8);
  }
  same_values(src, m);
  tpu_module_free(m);
}

/* No copy where the split layout is the merged one (Cog fills the lanes, the batch one tile
 * of sublanes: gconv_b4_7x7_c2048to4096_g32_k1_bf16 writes bf16[4,7,7,4096]{3,0,2,1} from
 * its kernel), nor for a batch of one (libtpu probe: bf16[1,10,10,128] in 16 groups is one
 * kernel writing [10,10,16,16] row-major), nor for a depthwise convolution (one input
 * feature a group), nor without groups. */
static void test_no_group_split(void) {
  const char *srcs[] = {
      "HloModule m\nENTRY e {\n x = bf16[4,7,7,256] parameter(0)\n w = bf16[1,1,128,256] parameter(1)\n"
      " ROOT c = bf16[4,7,7,256] convolution(x, w), window={size=1x1}, dim_labels=b01f_01io->b01f,"
      " feature_group_count=2\n}\n",
      "HloModule m\nENTRY e {\n x = bf16[1,10,10,128] parameter(0)\n w = bf16[1,1,8,256] parameter(1)\n"
      " ROOT c = bf16[1,10,10,256] convolution(x, w), window={size=1x1}, dim_labels=b01f_01io->b01f,"
      " feature_group_count=16\n}\n",
      "HloModule m\nENTRY e {\n x = bf16[8,14,14,64] parameter(0)\n w = bf16[3,3,1,64] parameter(1)\n"
      " ROOT c = bf16[8,14,14,64] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f,"
      " feature_group_count=64\n}\n",
      "HloModule m\nENTRY e {\n x = bf16[8,14,14,64] parameter(0)\n w = bf16[3,3,64,64] parameter(1)\n"
      " ROOT c = bf16[8,14,14,64] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n}\n",
  };
  for (size_t i = 0; i < sizeof srcs / sizeof srcs[0]; i++) {
    tpu_module *m = compile_src(srcs[i]);
    if (!m) continue;
    CHECK(group_copy(m) == NULL);
    tpu_module_free(m);
  }
}

/* A kernel that reduces the grouped convolution's result (a batch norm's variance, which
 * reads the mean back; the mean's sum is the convolution kernel's own) reads the split
 * result, as resnext_fwd_b4_14x14x1024_g32's multiply_reduce_fusion reads the compiler's
 * bf16[4,14,14,32,16]{4,0,3,2,1} and sums it to f32[32,16], its elementwise work on the split
 * registers; the merge copy serves the other readers. */
static void test_group_split_reduce(void) {
  const char *src =
      "HloModule m\nadd {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
      "ENTRY e {\n x = f32[8,14,14,32] parameter(0)\n w = f32[3,3,4,64] parameter(1)\n"
      " c = f32[8,14,14,64] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f,"
      " feature_group_count=8\n z = f32[] constant(0)\n"
      " s = f32[64] reduce(c, z), dimensions={0,1,2}, to_apply=add\n"
      " sb = f32[8,14,14,64] broadcast(s), dimensions={3}\n d = f32[8,14,14,64] subtract(c, sb)\n"
      " q = f32[8,14,14,64] multiply(d, d)\n"
      " r = f32[64] reduce(q, z), dimensions={0,1,2}, to_apply=add\n"
      " t = f32[8,14,14,64] tanh(c)\n"
      " ROOT o = (f32[64], f32[8,14,14,64]) tuple(r, t)\n}\n";
  tpu_module *m = compile_src(src);
  if (!m) return;
  int split_reads = 0;
  for (int j = 0; j < m->entry->ninstrs; j++) {
    const tpu_instr *in = m->entry->instrs[j];
    int reduces = 0, split = 0;
    for (int k = 0; in->op == TPU_OP_FUSION && k < in->calls->ninstrs; k++) reduces |= in->calls->instrs[k]->op == TPU_OP_REDUCE;
    for (int k = 0; reduces && k < in->noperands; k++) split += in->operands[k]->shape.rank == 5;
    split_reads += split;
    /* the square and its sum on the split registers: f32[8,14,14,8,8] -> f32[8,8] */
    for (int k = 0; split && k < in->calls->ninstrs; k++) {
      const tpu_instr *r = in->calls->instrs[k];
      if (r->op == TPU_OP_REDUCE) CHECK(r->operands[0]->shape.rank == 5 && r->shape.rank == 2);
    }
  }
  printf("grouped convolution's statistics: %d kernel(s) read the split result\n", split_reads);
  CHECK_EQ_INT(split_reads, 1);
  tpu_module *m0 = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse("g.hlo", src, strlen(src), &m0, &d) == TPU_OK);
  tpu_module_free(m0);
  same_values(src, m);
  tpu_module_free(m);
}

/* The 5-D form keeps the window's other attributes (a reversed, dilated filter). */
static void test_group_form_window(void) {
  const char *src =
      "HloModule m\nENTRY e {\n x = f32[4,12,12,16] parameter(0)\n w = f32[3,3,8,32] parameter(1)\n"
      " ROOT c = f32[4,12,12,32] convolution(x, w), window={size=3x3 pad=2_2x2_2 rhs_dilate=2x2 rhs_reversal=1x0},"
      " dim_labels=b01f_01io->b01f, feature_group_count=2\n}\n";
  tpu_module *m = compile_src(src);
  if (!m) return;
  const tpu_instr *c5 = NULL;
  for (int j = 0; j < m->entry->ninstrs; j++) {
    const tpu_instr *in = m->entry->instrs[j];
    for (int k = 0; in->op == TPU_OP_FUSION && k < in->calls->ninstrs; k++)
      if (in->calls->instrs[k]->op == TPU_OP_CONVOLUTION) c5 = in->calls->instrs[k];
  }
  CHECK(c5 && c5->nwindow == 3);
  if (c5 && c5->nwindow == 3)
    CHECK(c5->window[0].reversal && !c5->window[1].reversal && c5->window[0].window_dilation == 2 &&
          c5->window[1].pad_lo == 2 && c5->window[2].size == 2 && c5->window[2].base_dilation == 2);
  same_values(src, m);
  tpu_module_free(m);
}

/* Without a merge copy (a batch of one; whole lane tiles of features with one sublane tile of
 * batch) the convolution still runs in the compiler's 5-D form, the group a spatial
 * dimension and no feature groups, so its taps form one contraction rather than each padded
 * to the lanes (libtpu probes outside the corpus: bf16[1,14,14,256] in 8 groups, 3x3, costs
 * what [2,14,14,256] does, 18,082 / 18,672 cycles on v5e); values unchanged. */
static void test_group_form_without_copy(void) {
  const char *srcs[] = {
      "HloModule m\nENTRY e {\n x = bf16[1,14,14,256] parameter(0)\n w = bf16[3,3,32,256] parameter(1)\n"
      " ROOT c = bf16[1,14,14,256] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f,"
      " feature_group_count=8\n}\n",
      "HloModule m\nENTRY e {\n x = bf16[4,7,7,256] parameter(0)\n w = bf16[1,1,128,256] parameter(1)\n"
      " ROOT c = bf16[4,7,7,256] convolution(x, w), window={size=1x1}, dim_labels=b01f_01io->b01f,"
      " feature_group_count=2\n}\n",
  };
  for (size_t i = 0; i < sizeof srcs / sizeof srcs[0]; i++) {
    tpu_module *m = compile_src(srcs[i]);
    if (!m) continue;
    CHECK(group_copy(m) == NULL);
    const tpu_instr *c5 = NULL;
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *in = m->entry->instrs[j];
      for (int k = 0; in->op == TPU_OP_FUSION && k < in->calls->ninstrs; k++)
        if (in->calls->instrs[k]->op == TPU_OP_CONVOLUTION) c5 = in->calls->instrs[k];
    }
    printf("grouped convolution %zu without a copy: rank %d, %lld feature groups\n", i, c5 ? c5->shape.rank : 0,
           c5 ? (long long)c5->feature_group_count : 0LL);
    CHECK(c5 && c5->shape.rank == 5 && c5->feature_group_count <= 1 && c5->conv->nspatial == 3);
    same_values(srcs[i], m);
    tpu_module_free(m);
  }
}

int main(void) {
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &g_chip, &d) == TPU_OK);
  test_group_split();
  test_group_split_batch_lanes();
  test_group_split_reduce();
  test_group_form_window();
  test_no_group_split();
  test_group_form_without_copy();
  CHECK_DONE();
}
