/* The HLO passes' layout decisions and the kernels they add around a layout (through
 * tpu_compile_hlo): relayout copies of convolutions, dot results, readers of parameters and
 * gathers; entry parameter and result layouts and their copies; memory-space copies; the
 * NCHW weight-gradient layout; space-to-batch's kernels around a small-batch convolution; a
 * convolution input's copy into its layout.
 * Moved from test_passes.c, unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "util.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "ref/ref.h"
#include "passes_util.h"

/* Convolution layouts at the program's edge (compile/passes/relayout.c): bf16[32,56,56,64] pads
 * alike row-major and in the convolution's layout, so the program returns it row-major
 * through a relayout kernel (the XLA TPU compiler's `copy`); bf16[32,14,14,256] pads its
 * 14 rows to 16 row-major, so it leaves in the convolution's layout, one kernel. */
static void test_conv_relayout(void) {
  const char *fmt =
      "HloModule m\nENTRY e {\n x = bf16[32,%d,%d,%d] parameter(0)\n w = bf16[3,3,%d,%d] parameter(1)\n"
      " c = bf16[32,%d,%d,%d] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n"
      " z = bf16[] constant(0)\n zb = bf16[32,%d,%d,%d] broadcast(z), dimensions={}\n"
      " ROOT r = bf16[32,%d,%d,%d] maximum(c, zb)\n}\n";
  char src[1024];
  int hw[2] = {56, 14}, f[2] = {64, 256}, want[2] = {2, 1};
  for (int i = 0; i < 2; i++) {
    int h = hw[i], c = f[i];
    snprintf(src, sizeof src, fmt, h, h, c, c, c, h, h, c, h, h, c, h, h, c);
    tpu_module *m = compile_src(src);
    if (!m) continue;
    const tpu_instr *root = m->entry->root;
    int kernels = 0;
    for (int j = 0; j < m->entry->ninstrs; j++)
      kernels += m->entry->instrs[j]->op == TPU_OP_FUSION || m->entry->instrs[j]->op == TPU_OP_TRANSPOSE;
    printf("conv to bf16[32,%d,%d,%d]: %d kernels, root %s\n", h, h, c, kernels, tpu_op_name(root->op));
    CHECK_EQ_INT(kernels, want[i]);
    CHECK(root->op == (want[i] == 2 ? TPU_OP_TRANSPOSE : TPU_OP_FUSION));
    /* the kernel writes the convolution's layout: spatial dimensions, batch, features */
    if (want[i] == 2) CHECK(root->operands[0]->shape.dims[2] == 32 && root->operands[0]->shape.dims[3] == c);
    tpu_module_free(m);
  }
}

/* A kernel of elementwise ops over a convolution's result that the convolution's kernel wrote
 * (a batch norm's normalisation after its statistics, the residual add, the ReLU) writes the
 * convolution's layout too, and a result leaving the program in another layout goes through a
 * relayout copy after it, as in the XLA TPU compiler's programs (resnet_bottleneck_fwd_b8_56x56x256:
 * fusion.19 bf16[8,56,56,256]{3,0,2,1} then copy.2 into row-major, 91,966 cycles on v5e;
 * resnet_basic_fwd_b8_56x56x64: fusion.16, copy.2; mbconv_fwd_b8_112x112_16to24: fusion.21
 * then copy.2 into {2,3,1,0}). At 14x14 the convolution's layout pads less than row-major:
 * the program returns it, no copy. */
static void test_conv_reader_relayout(void) {
  const char *fmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
      "ENTRY e {\n x = bf16[8,%d,%d,%d] parameter(0)\n w = bf16[3,3,%d,%d] parameter(1)\n"
      " c = bf16[8,%d,%d,%d] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n"
      " cf = f32[8,%d,%d,%d] convert(c)\n z = f32[] constant(0)\n"
      " s = f32[%d] reduce(cf, z), dimensions={0,1,2}, to_apply=add\n"
      " sb = f32[8,%d,%d,%d] broadcast(s), dimensions={3}\n d = f32[8,%d,%d,%d] subtract(cf, sb)\n"
      " xf = f32[8,%d,%d,%d] convert(x)\n a = f32[8,%d,%d,%d] add(d, xf)\n"
      " zb = f32[8,%d,%d,%d] broadcast(z), dimensions={}\n m = f32[8,%d,%d,%d] maximum(a, zb)\n"
      " ROOT r = bf16[8,%d,%d,%d] convert(m)\n}\n";
  char src[2048];
  int hw[2] = {56, 14}, f[2] = {64, 256}, want[2] = {1, 0};
  for (int i = 0; i < 2; i++) {
    int h = hw[i], c = f[i];
    snprintf(src, sizeof src, fmt, h, h, c, c, c, h, h, c, h, h, c, c, h, h, c, h, h, c, h, h, c, h, h, c, h, h, c,
             h, h, c, h, h, c);
    tpu_module *m = compile_src(src);
    if (!m) continue;
    const tpu_instr *root = m->entry->root;
    int copies = 0;
    for (int j = 0; j < m->entry->ninstrs; j++) copies += m->entry->instrs[j]->op == TPU_OP_TRANSPOSE;
    printf("conv, norm, residual to bf16[8,%d,%d,%d]: %d relayout copies, root %s\n", h, h, c, copies,
           tpu_op_name(root->op));
    CHECK_EQ_INT(copies, want[i]);
    /* the elementwise kernel writes the convolution's layout: spatial dimensions, batch, features */
    if (want[i]) {
      CHECK(root->op == TPU_OP_TRANSPOSE && root->operands[0]->op == TPU_OP_FUSION);
      if (root->op == TPU_OP_TRANSPOSE) CHECK(root->operands[0]->shape.dims[2] == 8 && root->operands[0]->shape.dims[3] == c);
    }
    tpu_module_free(m);
  }
}

/* A convolution of fewer output features than the lanes and a larger batch writes the batch
 * in the lanes, its features in the sublanes (tile.c), even a batch of 8 that fills one
 * sixteenth of them: a result leaving the program is relaid out by a copy after the kernel
 * into the least padded layout, as in the XLA TPU compiler's programs (tconv_b8_7x7_c128to3,
 * the input gradients of conv_grad_nchw_*_c3to*: bf16[8,3,28,28]{0,1,3,2:T(4,128)} copied
 * into {3,0,2,1}, 2,249-6,400 cycles on every generation). */
static void test_conv_batch_lanes_relayout(void) {
  tpu_module *m = compile_src(
      "HloModule m\nENTRY e {\n x = bf16[8,14,14,128] parameter(0)\n w = bf16[3,3,128,3] parameter(1)\n"
      " ROOT c = bf16[8,14,14,3] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n}\n");
  if (!m) return;
  const tpu_instr *root = m->entry->root;
  CHECK(root->op == TPU_OP_TRANSPOSE);
  /* the kernel writes spatial dimensions, features, batch */
  if (root->op == TPU_OP_TRANSPOSE) CHECK(root->operands[0]->shape.dims[2] == 3 && root->operands[0]->shape.dims[3] == 8);
  tpu_module_free(m);
}

/* A plain convolution of a batch under the sublanes writes its batch in a tile of its rows
 * (T(2,128) for 1 or 2, T(4,128) for 4) and its result leaves through a relayout copy where
 * row-major pads less, as in the XLA TPU compiler's programs (libtpu probes,
 * bench/fidelity/probes/small_batch_conv.py: bf16[1,31,31,64] from [3,3,256,64], rhs_dilate 4,
 * ends in a copy; bf16[2,31,31,256] and bf16[4,31,31,64] are returned in their T(2,128) and
 * T(4,128) tiles). A depthwise convolution of batch 1 keeps its result row-major (not probed). */
static void test_conv_small_batch_relayout(void) {
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[%d,31,31,256] parameter(0)\n w = bf16[3,3,%d,%d] parameter(1)\n"
                    " ROOT c = bf16[%d,31,31,%d] convolution(x, w), window={size=3x3 pad=4_4x4_4 rhs_dilate=4x4},"
                    " dim_labels=b01f_01io->b01f%s\n}\n";
  struct { int b, ci, co; const char *groups; int copy; } cs[] = {
      {1, 256, 64, "", 1}, {2, 256, 256, "", 0}, {4, 256, 64, "", 0}, {1, 1, 256, ", feature_group_count=256", 0}};
  char src[640];
  for (int i = 0; i < 4; i++) {
    snprintf(src, sizeof src, fmt, cs[i].b, cs[i].ci, cs[i].co, cs[i].b, cs[i].co, cs[i].groups);
    tpu_module *m = compile_src(src);
    if (!m) continue;
    const tpu_instr *root = m->entry->root;
    printf("batch %d, %d to %d features%s: root %s\n", cs[i].b, cs[i].ci, cs[i].co, cs[i].groups, tpu_op_name(root->op));
    CHECK(root->op == (cs[i].copy ? TPU_OP_TRANSPOSE : TPU_OP_FUSION));
    /* the kernel writes spatial dimensions, batch, features */
    if (cs[i].copy && root->op == TPU_OP_TRANSPOSE)
      CHECK(root->operands[0]->shape.dims[2] == cs[i].b && root->operands[0]->shape.dims[3] == cs[i].co);
    tpu_module_free(m);
  }
}

/* Entry parameters take the least padded layout (relayout.c tpu__fuse_param_layouts): a
 * max-pool's bf16[32,112,112,64] is {2,3,1,0} (112 in the lanes, where row-major pads 64 to
 * 128) and its reduce-window reads it through one copy into row-major, as in the XLA TPU
 * compiler's programs; an elementwise reader reads it in place; an array that row-major
 * pads least keeps the layout given; a convolution's input is copied into the convolution's
 * layout (test_conv_input_copy). Values are unchanged (the conformance corpus's max-pool
 * takes the copy too). */
/* A slice, concatenate or pad whose result leaves the program (itself or through
 * elementwise ops) reads its operand in the result's layout: a parameter laid out otherwise
 * is read through a copy into it, a kernel of its own, as in the XLA TPU compiler's programs
 * (bf16[33,33,7]{1,2,0} concatenated into bf16[33,33,135]{2,1,0}; f32[195,65,7,99]{3,0,2,1}
 * split and scaled into f32[65,65,7,99]{3,1,2,0}). A lone strided slice slices in place and a
 * pad a convolution reads is laid out for the convolution: no copy. */
static void test_reader_relayout(void) {
  struct { const char *what, *src; int copies; } cs[] = {
      {"concatenate",
       "HloModule m\nENTRY e {\n a = bf16[33,33,7] parameter(0)\n b = bf16[33,33,128] parameter(1)\n"
       " ROOT c = bf16[33,33,135] concatenate(a, b), dimensions={2}\n}\n", 1},
      {"split and scaled",
       "HloModule m\nENTRY e {\n x = f32[195,65,7,99] parameter(0)\n"
       " s0 = f32[65,65,7,99] slice(x), slice={[0:65], [0:65], [0:7], [0:99]}\n"
       " s1 = f32[65,65,7,99] slice(x), slice={[65:130], [0:65], [0:7], [0:99]}\n"
       " k = f32[] constant(2)\n kb = f32[65,65,7,99] broadcast(k), dimensions={}\n"
       " m0 = f32[65,65,7,99] multiply(s0, kb)\n m1 = f32[65,65,7,99] multiply(s1, kb)\n"
       " ROOT t = (f32[65,65,7,99], f32[65,65,7,99]) tuple(m0, m1)\n}\n", 1},
      {"pad",
       "HloModule m\nENTRY e {\n x = s8[128,64,7] parameter(0)\n z = s8[] constant(0)\n"
       " ROOT p = s8[130,70,9] pad(x, z), padding=1_1x1_5x1_1\n}\n", 1},
      /* row-major parameters (they pad least so) concatenated into a result that pads least
       * as {0,1}: each copied into it (s8[7,16], s8[1,16], s8[7,16]; s8[128,16] is {0,1}) */
      {"row-major parameters concatenated",
       "HloModule m\nENTRY e {\n a = s8[7,16] parameter(0)\n b = s8[1,16] parameter(1)\n c = s8[7,16] parameter(2)\n"
       " d = s8[128,16] parameter(3)\n ROOT r = s8[143,16] concatenate(a, b, c, d), dimensions={0}\n}\n", 3},
      {"lone strided slice",
       "HloModule m\nENTRY e {\n x = f32[64,7,16] parameter(0)\n"
       " ROOT s = f32[64,7,6] slice(x), slice={[0:64], [0:7], [0:16:3]}\n}\n", 0},
      {"pad into a convolution",
       "HloModule m\nENTRY e {\n x = bf16[16,100,768] parameter(0)\n w = bf16[2,768,768] parameter(1)\n"
       " z = bf16[] constant(0)\n p = bf16[16,101,768] pad(x, z), padding=0_0x1_0x0_0\n"
       " ROOT c = bf16[16,100,768] convolution(p, w), window={size=2}, dim_labels=b0f_0io->b0f\n}\n", 0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    tpu_module *m = compile_src(cs[i].src);
    if (!m) continue;
    int copies = 0;
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *in = m->entry->instrs[j];
      if (in->op != TPU_OP_COPY || in->operands[0]->op != TPU_OP_PARAMETER) continue;
      copies++;
      /* into the result's tiling, and a kernel of its own (its reader is not this copy) */
      CHECK(in->shape.minor_to_major[0] != in->operands[0]->shape.minor_to_major[0] ||
            in->shape.minor_to_major[1] != in->operands[0]->shape.minor_to_major[1]);
    }
    printf("%s: %d relayout copies of a parameter\n", cs[i].what, copies);
    CHECK_EQ_INT(copies, cs[i].copies);
    tpu_module_free(m);
  }
}

/* A dot's result leaves the program in the matrix unit's layout (a free dimension of each
 * operand in the tile, batch dimensions major) or through a relayout kernel of its own: a
 * result whose least padded tiling holds a batch dimension (bf16[3,256,128,4] transposed
 * from a dot over batch 4, {2,3,1,0}) or no free dimension of one operand (a batched
 * matrix-vector product f32[2,512]), as the XLA TPU compiler's programs end in a copy; a
 * GEMM's [M,N] result does not. */
static void test_dot_relayout(void) {
  struct { const char *what, *src; int relaid; } cs[] = {
      {"transposed batched dot",
       "HloModule m\nENTRY e {\n b = bf16[128,4,512] parameter(0)\n a = bf16[512,256,4,3] parameter(1)\n"
       " d = bf16[4,128,256,3] dot(b, a), lhs_batch_dims={1}, lhs_contracting_dims={2}, rhs_batch_dims={2},"
       " rhs_contracting_dims={0}\n ROOT t = bf16[3,256,128,4] transpose(d), dimensions={3,2,1,0}\n}\n", 1},
      {"batched matrix-vector",
       "HloModule m\nENTRY e {\n a = f32[2,512,128] parameter(0)\n b = f32[2,128] parameter(1)\n"
       " ROOT d = f32[2,512] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0},"
       " rhs_contracting_dims={1}\n}\n", 1},
      {"f32 batched matrix-vector, its rows in the lanes",
       "HloModule m\nENTRY e {\n a = f32[32,128,3,96] parameter(0)\n b = f32[3,128,32] parameter(1)\n"
       " ROOT d = f32[32,96] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={1,2}, rhs_batch_dims={2},"
       " rhs_contracting_dims={1,0}\n}\n", 0},
      {"bf16 batched matrix-vector, its rows in the lanes",
       "HloModule m\nENTRY e {\n a = bf16[4,128,3,96] parameter(0)\n b = bf16[3,128,4] parameter(1)\n"
       " ROOT d = bf16[4,96] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={1,2}, rhs_batch_dims={2},"
       " rhs_contracting_dims={1,0}\n}\n", 1},
      {"gemm",
       "HloModule m\nENTRY e {\n a = bf16[1024,512] parameter(0)\n b = bf16[512,256] parameter(1)\n"
       " ROOT d = bf16[1024,256] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n", 0},
      /* the matrix unit writes the last free dimension of the activations (28) in the
       * sublanes; the least padded tiling puts the 4 images there (swin's MLP) */
      {"dot of several free dimensions, another in the tile",
       "HloModule m\nENTRY e {\n x = bf16[4,28,28,768] parameter(0)\n w = bf16[768,192] parameter(1)\n"
       " ROOT d = bf16[4,28,28,192] dot(x, w), lhs_contracting_dims={3}, rhs_contracting_dims={0}\n}\n", 1},
      {"the same dot under a residual add",
       "HloModule m\nENTRY e {\n x = bf16[4,28,28,768] parameter(0)\n w = bf16[768,192] parameter(1)\n"
       " r = bf16[4,28,28,192] parameter(2)\n"
       " d = bf16[4,28,28,192] dot(x, w), lhs_contracting_dims={3}, rhs_contracting_dims={0}\n"
       " ROOT a = bf16[4,28,28,192] add(d, r)\n}\n", 1},
      /* a free dimension of size 1 is none: 197 is the last of the left operand's */
      {"free dimension of size 1",
       "HloModule m\nENTRY e {\n a = f32[197,197,4,1] parameter(0)\n b = f32[197,8,4] parameter(1)\n"
       " ROOT d = f32[4,197,1,8] dot(a, b), lhs_batch_dims={2}, lhs_contracting_dims={0}, rhs_batch_dims={2},"
       " rhs_contracting_dims={0}\n}\n", 0},
      /* an operand with two free dimensions: the convolution writes the rhs's (256) in the
       * lanes; the least padded [256,3,512]{2,0,1} has the lhs's 512 there (dot_result_orient.py) */
      {"several free dimensions, the lhs's in the lanes",
       "HloModule m\nENTRY e {\n b = bf16[512,512] parameter(0)\n a = bf16[512,3,256] parameter(1)\n"
       " d = bf16[512,3,256] dot(b, a), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
       " ROOT t = bf16[256,3,512] transpose(d), dimensions={2,1,0}\n}\n", 1},
      {"several free dimensions, the rhs's in the lanes",
       "HloModule m\nENTRY e {\n a = bf16[256,5,384] parameter(0)\n b = bf16[256,256] parameter(1)\n"
       " d = bf16[5,384,256] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
       " ROOT t = bf16[384,5,256] transpose(d), dimensions={1,0,2}\n}\n", 0},
      {"one free dimension each, the lhs's in the lanes",
       "HloModule m\nENTRY e {\n a = bf16[256,384] parameter(0)\n b = bf16[256,256] parameter(1)\n"
       " d = bf16[384,256] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
       " ROOT t = bf16[256,384] transpose(d), dimensions={1,0}\n}\n", 0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    tpu_module *m = compile_src(cs[i].src);
    if (!m) continue;
    const tpu_instr *r = m->entry->root;
    int relaid = (r->op == TPU_OP_TRANSPOSE || r->op == TPU_OP_COPY) && r->noperands == 1 &&
                 (r->operands[0]->op == TPU_OP_DOT || r->operands[0]->op == TPU_OP_FUSION);
    printf("%s: result %s\n", cs[i].what, relaid ? "relaid out by a kernel of its own" : "written by the dot's kernel");
    CHECK_EQ_INT(relaid, cs[i].relaid);
    if (relaid && r->operands[0]->op == TPU_OP_FUSION) {
      const tpu_instr *fr = r->operands[0]->calls->root;
      CHECK(fr->op == TPU_OP_DOT || fr->op == TPU_OP_ADD); /* the dot, or its epilogue */
    }
    tpu_module_free(m);
  }
}

static void test_param_layouts(void) {
  const char *pool = "window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x0_1x0_1x0_0}, to_apply=mx";
  char src[1024];
  struct { int hw, c; const char *root; int minor, copies; } cs[] = {
      {112, 64, "pool", 2, 1}, {112, 64, "max", 2, 0}, {56, 128, "pool", 3, 0}, {112, 64, "conv", 2, 1}};
  for (int i = 0; i < 4; i++) {
    int h = cs[i].hw, c = cs[i].c, oh = h / 2;
    if (!strcmp(cs[i].root, "pool"))
      snprintf(src, sizeof src,
               "HloModule m\nmx {\n a = bf16[] parameter(0)\n b = bf16[] parameter(1)\n ROOT m = bf16[] maximum(a, b)\n}\n"
               "ENTRY e {\n x = bf16[32,%d,%d,%d]{3,2,1,0} parameter(0)\n z = bf16[] constant(-inf)\n"
               " ROOT r = bf16[32,%d,%d,%d]{3,2,1,0} reduce-window(x, z), %s\n}\n", h, h, c, oh, oh, c, pool);
    else if (!strcmp(cs[i].root, "max"))
      snprintf(src, sizeof src,
               "HloModule m\nENTRY e {\n x = bf16[32,%d,%d,%d]{3,2,1,0} parameter(0)\n z = bf16[] constant(0)\n"
               " zb = bf16[32,%d,%d,%d]{3,2,1,0} broadcast(z), dimensions={}\n"
               " ROOT r = bf16[32,%d,%d,%d]{3,2,1,0} maximum(x, zb)\n}\n", h, h, c, h, h, c, h, h, c);
    else
      snprintf(src, sizeof src,
               "HloModule m\nENTRY e {\n x = bf16[32,%d,%d,%d]{3,2,1,0} parameter(0)\n w = bf16[3,3,%d,%d] parameter(1)\n"
               " ROOT r = bf16[32,%d,%d,%d] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n}\n",
               h, h, c, c, c, h, h, c);
    tpu_module *m = compile_src(src);
    if (!m) continue;
    const tpu_instr *x = NULL;
    int copies = 0;
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *in = m->entry->instrs[j];
      if (in->op == TPU_OP_PARAMETER && in->index == 0) x = in;
      if (in->op == TPU_OP_COPY && in->operands[0]->op == TPU_OP_PARAMETER) {
        copies++;
        /* row-major for the pooling window; the convolution's layout (batch in the sublanes) for it */
        CHECK(in->shape.minor_to_major[0] == 3 && in->shape.minor_to_major[1] == (strcmp(cs[i].root, "conv") ? 2 : 0));
      }
    }
    CHECK(x != NULL);
    if (!x) continue;
    printf("bf16[32,%d,%d,%d] read by %s: minor dimension %d, %d relayout copies\n", h, h, c, cs[i].root,
           x->shape.minor_to_major[0], copies);
    CHECK_EQ_INT(x->shape.minor_to_major[0], cs[i].minor);
    if (cs[i].minor == 2) CHECK_EQ_INT(x->shape.minor_to_major[1], 3); /* the 64 features in the sublanes */
    CHECK_EQ_INT(copies, cs[i].copies);
    tpu_module_free(m);
  }
  /* rank 2 too: f32[2048,7] is {0,1} in the compiler's entry layouts (7 rows padded to 8,
   * not 7 lanes padded to 128); f32[64,256] pads alike both ways and stays row-major */
  tpu_module *m = compile_src("HloModule m\nENTRY e {\n x = f32[2048,7]{1,0} parameter(0)\n"
                              " y = f32[64,256]{1,0} parameter(1)\n ax = f32[2048,7] abs(x)\n ay = f32[64,256] abs(y)\n"
                              " ROOT t = (f32[2048,7], f32[64,256]) tuple(ax, ay)\n}\n");
  if (m) {
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *in = m->entry->instrs[j];
      if (in->op != TPU_OP_PARAMETER) continue;
      CHECK_EQ_INT(in->shape.minor_to_major[0], in->index == 0 ? 0 : 1);
    }
    tpu_module_free(m);
  }
  /* a transpose of a parameter so laid out that its bytes are the result's, row-major, is a
   * bitcast: it joins its reader's kernel (bf16[256,3]{0,1} -> [3,256], then + 1: one
   * kernel, as the compiler's add_bitcast_fusion) */
  m = compile_src("HloModule m\nENTRY e {\n x = bf16[256,3]{1,0} parameter(0)\n"
                  " t = bf16[3,256] transpose(x), dimensions={1,0}\n c = bf16[] constant(1)\n"
                  " cb = bf16[3,256] broadcast(c), dimensions={}\n ROOT a = bf16[3,256] add(t, cb)\n}\n");
  if (m) {
    int kernels = 0;
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *in = m->entry->instrs[j];
      if (in->op != TPU_OP_PARAMETER && in->op != TPU_OP_CONSTANT) kernels++;
      CHECK(in->op != TPU_OP_TRANSPOSE);
    }
    CHECK_EQ_INT(kernels, 1);
    tpu_module_free(m);
  }
  /* dimensions of size 1 hold no order: bf16[16,1,8] (entry layout {0,2,1}, 16 in the lanes)
   * transposed to [8,16,1] is a bitcast too, one kernel with the multiply reading it (the
   * compiler's bitcast of einsum_abcd_bca_adb's b.1 to [8,16]) */
  m = compile_src("HloModule m\nENTRY e {\n x = bf16[16,1,8]{2,1,0} parameter(0)\n y = bf16[8,16,1,64] parameter(1)\n"
                  " t = bf16[8,16,1] transpose(x), dimensions={2,0,1}\n"
                  " tb = bf16[8,16,1,64] broadcast(t), dimensions={0,1,2}\n ROOT a = bf16[8,16,1,64] multiply(tb, y)\n}\n");
  if (m) {
    int kernels = 0;
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *in = m->entry->instrs[j];
      if (in->op != TPU_OP_PARAMETER && in->op != TPU_OP_CONSTANT) kernels++;
      if (in->op == TPU_OP_PARAMETER && in->index == 0) CHECK_EQ_INT(in->shape.minor_to_major[0], 0);
      CHECK(in->op != TPU_OP_TRANSPOSE);
    }
    printf("bf16[16,1,8]{0,2,1} transposed to [8,16,1], then a multiply: %d kernels\n", kernels);
    CHECK_EQ_INT(kernels, 1);
    tpu_module_free(m);
  }
  /* a transpose whose result leaves the program (through an add) is laid out as the program's
   * result, the least padded tiling: JAX's {2,3,4,1,0} puts 8 elements in the lanes, the
   * compiler's {0,2,4,3,1} keeps the parameter's 128 there, so the transpose only reorders
   * tiles and joins the add's kernel (transpose_128x3x3x197x8_p01432_fused_f32: one kLoop
   * fusion); a transpose that moves the lanes (f32[256,512] -> [512,256], then + 1) stays a
   * kernel of its own */
  for (int lanes_move = 0; lanes_move < 2; lanes_move++) {
    m = compile_src(lanes_move ? "HloModule m\nENTRY e {\n x = f32[256,512]{1,0} parameter(0)\n"
                                 " t = f32[512,256]{0,1} transpose(x), dimensions={1,0}\n c = f32[] constant(1)\n"
                                 " cb = f32[512,256] broadcast(c), dimensions={}\n ROOT a = f32[512,256]{0,1} add(t, cb)\n}\n"
                               : "HloModule m\nENTRY e {\n x = f32[128,3,3,197,8]{4,3,2,1,0} parameter(0)\n"
                                 " t = f32[128,3,8,197,3]{2,3,4,1,0} transpose(x), dimensions={0,1,4,3,2}\n"
                                 " c = f32[] constant(1)\n cb = f32[128,3,8,197,3] broadcast(c), dimensions={}\n"
                                 " ROOT a = f32[128,3,8,197,3]{2,3,4,1,0} add(t, cb)\n}\n");
    if (!m) continue;
    int kernels = 0, transposes = 0;
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *in = m->entry->instrs[j];
      if (in->op != TPU_OP_PARAMETER && in->op != TPU_OP_CONSTANT) kernels++;
      transposes += in->op == TPU_OP_TRANSPOSE;
    }
    printf("transpose %s the lanes, read by an add that leaves the program: %d kernels\n",
           lanes_move ? "moving" : "keeping", kernels);
    CHECK_EQ_INT(kernels, lanes_move ? 2 : 1);
    CHECK_EQ_INT(transposes, lanes_move ? 1 : 0);
    tpu_module_free(m);
  }
}

/* A gather reads its table in the layout that keeps each gathered slice whole (relayout.c
 * gather_layout), as the XLA TPU compiler lays it out: x[:, i] of row-major f32[64,30522]
 * through a copy laid out {0,1}; x[i] of bf16[8192,64] (an entry parameter laid out {0,1},
 * 8192 in the lanes) through a copy into row-major; x[i] of row-major f32[30522,768], a
 * gather of points and a gather of one slice (a dynamic-slice to the compiler) read the
 * table as it is. */
static void test_gather_layouts(void) {
  struct { const char *table, *gather; int copies, minor; } cs[] = {
      {"f32[64,30522]{1,0}", "f32[64,7] gather(t, i), offset_dims={0}, collapsed_slice_dims={1}, start_index_map={1}, "
       "index_vector_dim=1, slice_sizes={64,1}", 1, 0},
      {"bf16[8192,64]{1,0}", "bf16[7,64] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
       "index_vector_dim=1, slice_sizes={1,64}", 1, 1},
      {"f32[30522,768]{1,0}", "f32[7,768] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
       "index_vector_dim=1, slice_sizes={1,768}", 0, -1},
      {"f32[64,30522]{1,0}", "f32[7] gather(t, j), offset_dims={}, collapsed_slice_dims={0,1}, start_index_map={0,1}, "
       "index_vector_dim=1, slice_sizes={1,1}", 0, -1},
      {"f32[64,30522]{1,0}", "f32[64,1] gather(t, k), offset_dims={0}, collapsed_slice_dims={1}, start_index_map={1}, "
       "index_vector_dim=1, slice_sizes={64,1}", 0, -1}};
  for (int c = 0; c < 5; c++) {
    char src[900];
    snprintf(src, sizeof src,
             "HloModule m\nENTRY e {\n t = %s parameter(0)\n i = s32[7,1] parameter(1)\n j = s32[7,2] parameter(2)\n"
             " k = s32[1,1] parameter(3)\n ROOT g = %s\n}\n", cs[c].table, cs[c].gather);
    tpu_module *m = compile_src(src);
    if (!m) continue;
    int copies = 0, minor = -1, reads_copy = 0;
    for (int q = 0; q < m->entry->ninstrs; q++) {
      const tpu_instr *in = m->entry->instrs[q];
      if (in->op == TPU_OP_COPY && in->operands[0]->op == TPU_OP_PARAMETER) copies++, minor = in->shape.minor_to_major[0];
      if (in->op == TPU_OP_GATHER) reads_copy = in->operands[0]->op == TPU_OP_COPY;
    }
    printf("gather of %s: %d relayout copies (minor dimension %d)\n", cs[c].table, copies, minor);
    CHECK_EQ_INT(copies, cs[c].copies);
    CHECK_EQ_INT(minor, cs[c].minor);
    CHECK_EQ_INT(reads_copy, cs[c].copies);
    tpu_module_free(m);
  }
}

/* A parameter updated in place (dynamic-update-slice, scatter) that the caller did not donate
 * is copied first, as the XLA TPU compiler copies it (compile/passes/param_copy.c); a donated one
 * (input_output_alias) is updated where it lies. */
static void test_param_copies(void) {
  static const char *fmt =
      "HloModule m%s\nENTRY e {\n c = bf16[16,512,16,64] parameter(0)\n u = bf16[16,16,16,64] parameter(1)\n"
      " p = s32[] parameter(2)\n z = s32[] constant(0)\n"
      " ROOT r = bf16[16,512,16,64] dynamic-update-slice(c, u, z, p, z, z)\n}\n";
  for (int don = 0; don < 2; don++) {
    char src[512];
    snprintf(src, sizeof src, fmt, don ? ", input_output_alias={ {}: (0, {}, may-alias) }" : "");
    tpu_module *m = compile_src(src);
    if (!m) continue;
    int copies = 0;
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *in = m->entry->instrs[j];
      if (in->op == TPU_OP_COPY && in->operands[0]->op == TPU_OP_PARAMETER && in->operands[0]->index == 0) copies++;
    }
    printf("dynamic-update-slice into a parameter%s: %d copies of it\n", don ? " (donated)" : "", copies);
    CHECK_EQ_INT(copies, don ? 0 : 1);
    tpu_module_free(m);
  }
}

/* A result that is a non-donated parameter's buffer (the parameter, a same-layout copy of it
 * that simplify drops, a bitcast of it) gets a copy kernel of its own, as XLA's copy insertion
 * gives it (compile/passes/param_copy.c); a donated one (input_output_alias) is returned as is,
 * and a computed result is not copied. */
static void test_result_copies(void) {
  static const struct {
    const char *alias, *body;
    int want;
  } cases[] = {
      {"", " ROOT r = f32[8,128]{1,0} copy(p)\n", 1},
      {"", " ROOT r = f32[8,128]{1,0} parameter(1)\n", 1},
      {"", " ROOT r = f32[1024]{0} bitcast(p)\n", 1},
      {"", " n = f32[8,128]{1,0} negate(p)\n ROOT r = (f32[8,128]{1,0}, f32[8,128]{1,0}) tuple(n, p)\n", 1},
      {"", " ROOT r = f32[8,128]{1,0} negate(p)\n", 0},
      {", input_output_alias={ {}: (0, {}, may-alias) }", " ROOT r = f32[8,128]{1,0} copy(p)\n", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char src[512];
    snprintf(src, sizeof src, "HloModule m%s\nENTRY e {\n p = f32[8,128]{1,0} parameter(0)\n%s%s}\n", cases[i].alias,
             strstr(cases[i].body, "parameter(1)") ? "" : " q = f32[8,128]{1,0} parameter(1)\n", cases[i].body);
    tpu_module *m = compile_src(src);
    if (!m) continue;
    int copies = 0;
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *in = m->entry->instrs[j];
      const tpu_instr *x = in->op == TPU_OP_COPY ? in->operands[0] : NULL;
      while (x && x->op == TPU_OP_BITCAST) x = x->operands[0];
      if (x && x->op == TPU_OP_PARAMETER) copies++;
    }
    printf("result case %zu: %d copies of a parameter\n", i, copies);
    CHECK_EQ_INT(copies, cases[i].want);
    tpu_module_free(m);
  }
}

/* A same-layout copy is an identity within one memory space, which simplify drops; a copy
 * between memory spaces (a compiled program's VMEM value, S(1), written back to HBM) moves the
 * bytes and stays. */
static void test_memory_space_copy(void) {
  static const char *fmt = "HloModule m\nENTRY e {\n p = bf16[2,3]{1,0:T(2,128)(2,1)} parameter(0)\n"
                           " n = bf16[2,3]{1,0:T(2,128)(2,1)%s} negate(p)\n"
                           " ROOT r = bf16[2,3]{1,0:T(2,128)(2,1)} copy(n)\n}\n";
  for (int vm = 0; vm < 2; vm++) {
    char src[512];
    snprintf(src, sizeof src, fmt, vm ? "S(1)" : "");
    char *out = dump_src_after(src, "copy_space_test.hlo", "simplify");
    if (!out) continue;
    printf("same-layout copy%s: %d copies after simplify\n", vm ? " out of S(1)" : "", count_in(out, " copy("));
    CHECK_EQ_INT(count_in(out, " copy("), vm ? 1 : 0);
    free(out);
  }
}

/* An NCHW input read only by a convolution takes the convolution's layout (features in the
 * lanes, batch in the sublanes) where its features fill the lanes, as the XLA TPU compiler's
 * entry layout {1,0,3,2} for bf16[16,128,28,28] (compile/passes/relayout.c); a weight gradient's
 * input (its "features" the batch of 16) keeps row-major, unless the forward convolution
 * reads it too. */
static void test_nchw_param_layout(void) {
  static const char *fmt =
      "HloModule m\nENTRY e {\n x = bf16[16,%d,28,28] parameter(0)\n w = bf16[128,%d,3,3] parameter(1)\n"
      " ROOT c = bf16[16,128,28,28] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01\n}\n";
  int cs[2] = {128, 96};
  for (int i = 0; i < 2; i++) {
    char src[512];
    snprintf(src, sizeof src, fmt, cs[i], cs[i]);
    tpu_module *m = compile_src(src);
    if (!m) continue;
    const tpu_instr *x = NULL;
    for (int j = 0; j < m->entry->ninstrs; j++)
      if (m->entry->instrs[j]->op == TPU_OP_PARAMETER && m->entry->instrs[j]->index == 0) x = m->entry->instrs[j];
    CHECK(x != NULL);
    if (x) {
      printf("NCHW input with %d features: minor dimension %d\n", cs[i], x->shape.minor_to_major[0]);
      if (cs[i] == 128) CHECK(x->shape.has_layout && x->shape.minor_to_major[0] == 1 && x->shape.minor_to_major[1] == 0);
      else CHECK(!x->shape.has_layout || x->shape.minor_to_major[0] == 3);
    }
    tpu_module_free(m);
  }
  /* Read by the forward convolution and by the weight gradient (batch and features swapped,
   * fb01_io01->01bf): the forward reading's layout, as the compiler's {1,0,3,2} for
   * conv_grad_nchw_hwio_nchw_b8_14_c128to128_k1; with 96 features too, the least padded layout
   * (session 30: libtpu lays this very program's bf16[8,96,14,14] out {1,0,3,2} on v4 and v5e;
   * probes/swapped_param.py). */
  static const char *fmt2 =
      "HloModule m\nENTRY e {\n x = bf16[8,%d,14,14] parameter(0)\n w = bf16[1,1,%d,128] parameter(1)\n"
      " dy = bf16[8,128,14,14] parameter(2)\n"
      " c = bf16[8,128,14,14] convolution(x, w), window={size=1x1}, dim_labels=bf01_01io->bf01\n"
      " g = bf16[1,1,%d,128] convolution(x, dy), window={size=14x14}, dim_labels=fb01_io01->01bf\n"
      " ROOT t = (bf16[8,128,14,14], bf16[1,1,%d,128]) tuple(c, g)\n}\n";
  for (int i = 0; i < 2; i++) {
    char src[768];
    snprintf(src, sizeof src, fmt2, cs[i], cs[i], cs[i], cs[i]);
    tpu_module *m = compile_src(src);
    if (!m) continue;
    const tpu_instr *x = NULL;
    for (int j = 0; j < m->entry->ninstrs; j++)
      if (m->entry->instrs[j]->op == TPU_OP_PARAMETER && m->entry->instrs[j]->index == 0) x = m->entry->instrs[j];
    CHECK(x != NULL);
    if (x) {
      printf("NCHW input with %d features, forward and weight gradient: minor dimension %d\n", cs[i],
             x->shape.minor_to_major[0]);
      CHECK(x->shape.has_layout && x->shape.minor_to_major[0] == 1 && x->shape.minor_to_major[1] == 0);
    }
    tpu_module_free(m);
  }
}

/* Space-to-batch (compile/passes/space_to_batch.c): a convolution with a batch under 8 and
 * a padded last spatial dimension of at least 16 runs with batch 8B on 8 pieces of it, as
 * the XLA TPU compiler's programs do (bf16[2,14,14,128] 3x3: a bf16[16,14,2,64]
 * convolution). Its kernels are the compiler's: a pad where the pieces need zeros, the
 * halo's slice, the fold into the batch, the convolution, the unfold, and the slice back
 * where the pieces overrun the output (conv_nhwc_oihw_nhwc_b2_14_c128to64_k3: pad, slice,
 * copy, convolution, copy, slice), and a copy of that result into the program's layout where
 * the batch is not next to W or the features leave the lanes (relayout.c s2b_result_relaid:
 * the compiler's copy.5 into {3,0,2,1}; batch 1 with the features in the lanes has none:
 * f32[1,14,56,8] lays W = 56 in the lanes, so its copy is there too); a stride-4 window
 * tiling W = 32 exactly has no pad kernel (sconv_b4_32x32_c64to96_k4s4_same) nor slice back. Batch 8, a W of 14 without padding, and
 * a grouped convolution keep their convolution (the grouped one followed by its copy.group,
 * test_passes_group); W = 64 padded to 66 gives pieces of 9
 * (libtpu probe), W = 30 padded to 33 with stride 2 pieces of 6 inputs, 3 outputs; an
 * input-dilated (transposed) convolution as XLA's converter splits it. Values are
 * bit-identical on the reference interpreter, with a halo, a stride, a window dilation,
 * an input dilation and uneven padding. */
static void test_space_to_batch(void) {
  const char *fmt = "HloModule m\nENTRY e {\n x = f32[%d,%d,%d,%d] parameter(0)\n w = f32[3,%d,%d,%d] parameter(1)\n"
                    " ROOT c = f32[%d,%d,%d,%d] convolution(x, w), window={%s}, dim_labels=b01f_01io->b01f%s\n}\n";
  struct {
    int b, h, w, c, oc, oh, ow;
    const char *win, *extra;
    int want_batch, want_w, want_kernels, want_pad;
    int kw; /* the window's width */
  } cases[] = {
      {2, 14, 14, 128, 64, 14, 14, "size=3x3 pad=1_1x1_1", "", 16, 2, 7, 1, 3},
      {8, 14, 14, 128, 64, 14, 14, "size=3x3 pad=1_1x1_1", "", 8, 14, 1, 0, 3},
      {2, 14, 14, 128, 64, 12, 12, "size=3x3", "", 2, 12, 1, 0, 3},
      {2, 8, 64, 64, 64, 8, 64, "size=3x3 pad=1_1x1_1", "", 16, 9, 7, 1, 3},
      {2, 14, 14, 128, 128, 14, 14, "size=3x3 pad=1_1x1_1", ", feature_group_count=2", 2, 14, 2, 0, 3},
      {1, 9, 30, 5, 7, 9, 15, "size=3x3 stride=1x2 pad=1_1x1_2 rhs_dilate=1x2", "", 8, 3, 7, 1, 3},
      {2, 8, 32, 64, 96, 8, 8, "size=3x3 stride=1x4 pad=1_1x0_0", "", 16, 1, 4, 0, 3},
      /* transposed (s2b_dilated): a low padding of the dilation, 4 inputs and 2 of halo a
       * piece, 8 outputs (the compiler's bf16[56,8,8,32] on 28 x 28); of the dilation less
       * one, pieces of 4 and no halo; at dilation 3 and a 5-tap window, a halo of 2 (XLA's
       * K / d is 1: too few for the piece's last output); kept: too narrow for a low
       * padding of the dilation (20 + 2 < 24), a stride, a low padding of 1 at dilation 3
       * (their second kernel the dilated input's) */
      {1, 14, 28, 16, 8, 14, 56, "size=3x4 pad=1_1x2_2 lhs_dilate=1x2", "", 8, 8, 7, 1, 4},
      {2, 14, 28, 16, 8, 14, 112, "size=3x4 pad=1_1x3_3 lhs_dilate=1x4", "", 16, 16, 6, 1, 4},
      {1, 14, 30, 16, 8, 14, 90, "size=3x5 pad=1_1x3_3 lhs_dilate=1x3", "", 8, 15, 7, 1, 5},
      /* (their third kernel the relayout copy of a batch of 1 out of its T(2,128) tiles:
       * test_conv_small_batch_relayout) */
      {1, 14, 20, 16, 8, 14, 40, "size=3x4 pad=1_1x2_2 lhs_dilate=1x2", "", 1, 40, 3, 0, 4},
      {1, 14, 28, 16, 8, 14, 28, "size=3x4 stride=1x2 pad=1_1x2_2 lhs_dilate=1x2", "", 1, 28, 3, 0, 4},
      {1, 14, 28, 16, 8, 14, 81, "size=3x4 pad=1_1x1_1 lhs_dilate=1x3", "", 1, 81, 3, 0, 4},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char src[1024];
    int ic = cases[i].extra[0] ? cases[i].c / 2 : cases[i].c;
    snprintf(src, sizeof src, fmt, cases[i].b, cases[i].h, cases[i].w, cases[i].c, cases[i].kw, ic,
             cases[i].oc, cases[i].b,
             cases[i].oh, cases[i].ow, cases[i].oc, cases[i].win, cases[i].extra);
    tpu_module *m0 = NULL, *m = compile_src(src);
    if (!m) continue;
    const tpu_instr *cv = NULL;
    int kernels = 0, conv_kernel_reshapes = 0, pads = 0;
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *in = m->entry->instrs[j];
      tpu_opcode op = in->op;
      if (op == TPU_OP_PARAMETER || op == TPU_OP_CONSTANT || op == TPU_OP_TUPLE || op == TPU_OP_GET_TUPLE_ELEMENT ||
          op == TPU_OP_BITCAST || op == TPU_OP_RESHAPE)
        continue;
      kernels++; /* a fusion, or one op of its own (the pad, a slice) */
      pads += op == TPU_OP_PAD;
      if (in->op != TPU_OP_FUSION) continue;
      int has_conv = 0, reshapes = 0;
      for (int k = 0; k < in->calls->ninstrs; k++) {
        const tpu_instr *x = in->calls->instrs[k];
        if (x->op == TPU_OP_CONVOLUTION) cv = x, has_conv = 1;
        reshapes += x->op == TPU_OP_RESHAPE;
      }
      if (has_conv) conv_kernel_reshapes = reshapes;
    }
    CHECK(cv != NULL);
    if (cv) {
      printf("convolution of f32[%d,%d,%d,%d] (%s%s): batch %lld, W %lld, %d kernels\n", cases[i].b, cases[i].h,
             cases[i].w, cases[i].c, cases[i].win, cases[i].extra, (long long)cv->shape.dims[0],
             (long long)cv->shape.dims[2], kernels);
      CHECK_EQ_INT((int)cv->shape.dims[0], cases[i].want_batch);
      CHECK_EQ_INT((int)cv->shape.dims[2], cases[i].want_w);
      CHECK_EQ_INT(kernels, cases[i].want_kernels);
      CHECK_EQ_INT(pads, cases[i].want_pad);
      /* the fold and unfold are not in the convolution's kernel (a grouped one splits its
       * result by group there, and its copy.group is the second kernel: group_conv.c) */
      if (!cases[i].extra[0]) CHECK_EQ_INT(conv_kernel_reshapes, 0);
    }
    /* values: the reference interpreter before and after the passes, bit for bit */
    tpu_diag d;
    CHECK(tpu_hlo_parse("s2b_test.hlo", src, strlen(src), &m0, &d) == TPU_OK);
    if (m0) {
      tpu_tensor args[2], r0, r1;
      memset(&r0, 0, sizeof r0);
      memset(&r1, 0, sizeof r1);
      for (int a = 0; a < 2; a++) {
        const tpu_shape *s = &m0->entry->params[a]->shape;
        CHECK(tpu_tensor_alloc(&args[a], TPU_F32, s->rank, s->dims, &d) == TPU_OK);
        uint32_t seed = 12345u + (uint32_t)a;
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
    tpu_module_free(m);
  }
}

/* Space to batch's split form carried forward (space_to_batch.c carry), as the XLA TPU
 * compiler's converter propagates it (bench/fidelity/probes/s2b_carry.py): after a batch-4 3x3
 * convolution on W = 14 (8 pieces of 2), a ReLU, a 1x1 convolution to 128 features and a
 * reduce over the batch and spatial dimensions read the split form (the 1x1 convolution runs
 * with batch 32 on W = 2; the reduce reads it through the mask of positions past W); the
 * residual add of a parameter reads it unfolded. Without the rule the 1x1 convolution keeps
 * batch 4 and W = 14. Values (small integers: every sum exact) bit-identical on the reference
 * interpreter before and after the passes. */
static void test_space_to_batch_carry(void) {
  const char *src =
      "HloModule m\n"
      "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = f32[4,14,14,64] parameter(0)\n w = f32[3,3,64,64] parameter(1)\n"
      " p = f32[1,1,64,128] parameter(2)\n y = f32[4,14,14,128] parameter(3)\n"
      " c = f32[4,14,14,64] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n"
      " z = f32[] constant(0)\n zb = f32[4,14,14,64] broadcast(z), dimensions={}\n"
      " r = f32[4,14,14,64] maximum(c, zb)\n"
      " q = f32[4,14,14,128] convolution(r, p), window={size=1x1}, dim_labels=b01f_01io->b01f\n"
      " s = f32[128] reduce(q, z), dimensions={0,1,2}, to_apply=add\n"
      " o = f32[4,14,14,128] add(q, y)\n"
      " ROOT t = (f32[128], f32[4,14,14,128]) tuple(s, o)\n}\n";
  tpu_module *m0 = NULL, *m = compile_src(src);
  if (!m) return;
  int64_t batch = 0, wd = 0;
  int masked = 0;
  for (int j = 0; j < m->entry->ninstrs; j++) {
    const tpu_instr *in = m->entry->instrs[j];
    if (in->op != TPU_OP_FUSION) continue;
    for (int k = 0; k < in->calls->ninstrs; k++) {
      const tpu_instr *x = in->calls->instrs[k];
      if (x->op == TPU_OP_CONVOLUTION && x->operands[1]->shape.rank == 4 && x->operands[1]->shape.dims[0] == 1 &&
          x->shape.dims[3] == 128)
        batch = x->shape.dims[0], wd = x->shape.dims[2];
      if (x->op == TPU_OP_REDUCE && x->operands[0]->op == TPU_OP_SELECT) masked = 1;
    }
  }
  printf("space-to-batch carried: 1x1 convolution batch %lld, W %lld, masked reduce %d\n", (long long)batch,
         (long long)wd, masked);
  CHECK_EQ_INT((int)batch, 32);
  CHECK_EQ_INT((int)wd, 2);
  CHECK_EQ_INT(masked, 1);
  tpu_diag d;
  CHECK(tpu_hlo_parse("s2b_carry.hlo", src, strlen(src), &m0, &d) == TPU_OK);
  if (m0) {
    tpu_tensor args[4], r0, r1;
    memset(&r0, 0, sizeof r0);
    memset(&r1, 0, sizeof r1);
    for (int a = 0; a < 4; a++) {
      const tpu_shape *sh = &m0->entry->params[a]->shape;
      CHECK(tpu_tensor_alloc(&args[a], TPU_F32, sh->rank, sh->dims, &d) == TPU_OK);
      uint32_t seed = 777u + (uint32_t)a;
      for (int64_t e = 0; e < tpu_shape_numel(sh); e++) {
        seed = seed * 1664525u + 1013904223u;
        tpu_tensor_set_f64(&args[a], e, (double)((seed >> 16) % 5) - 2.0);
      }
    }
    CHECK(tpu_ref_run(m0, args, 4, &r0, &d) == TPU_OK);
    CHECK(tpu_ref_run(m, args, 4, &r1, &d) == TPU_OK);
    CHECK(same_bits(&r0, &r1));
    for (int a = 0; a < 4; a++) tpu_tensor_free(&args[a]);
    tpu_tensor_free(&r0);
    tpu_tensor_free(&r1);
    tpu_module_free(m0);
  }
  tpu_module_free(m);
}

/* Space to batch's pad spans 8 pieces in the XLA TPU compiler's programs, 8 S wide, the last
 * piece's halo lying past the padded input, zeros written in the join (the compiler's pad of
 * sconv_b4_32x32_c256to32_k3s2_same, bf16[32,4,48,256]: pieces of 6; a libtpu probe of
 * f32[4,64,64,128] 2x2 stride 3: [64,4,72,128], pieces of 9); tpusim's pad takes a ninth piece
 * for that halo and records the compiler's span (s2b_span, W and 8 S) for the pad's windows
 * (copy_kind.c tpu__pad_window_tiles). */
static void test_space_to_batch_pad_width(void) {
  tpu_module *m = compile_src("HloModule m\nENTRY e {\n x = f32[4,64,64,128] parameter(0)\n"
                              " w = f32[2,2,128,128] parameter(1)\n"
                              " ROOT c = f32[4,21,21,128] convolution(x, w), window={size=2x2 stride=3x3},"
                              " dim_labels=b01f_01io->b01f\n}\n");
  CHECK(m != NULL);
  if (!m) return;
  const char *span = NULL;
  for (int j = 0; j < m->entry->ninstrs; j++)
    for (int a = 0; m->entry->instrs[j]->op == TPU_OP_PAD && a < m->entry->instrs[j]->nattrs; a++)
      if (!strcmp(m->entry->instrs[j]->attrs[a].name, "s2b_span")) span = m->entry->instrs[j]->attrs[a].value;
  printf("space to batch's pad of f32[4,64,64,128] (2x2 stride 3): the compiler's span %s (W = 72)\n",
         span ? span : "(none)");
  CHECK(span != NULL && !strcmp(span, "2,72"));
  tpu_module_free(m);
}

/* Space-to-batch on other forms, values bit-identical on the reference interpreter before and
 * after the passes: 1-D, NCHW, the batch after the spatial dimensions, 3-D, depthwise with
 * two outputs per group, integers, a bf16 convolution with an f32 result, window reversal. */
static void test_space_to_batch_forms(void) {
  static const char *const progs[] = {
      "x = f32[3,40,6] parameter(0)\n w = f32[5,6,4] parameter(1)\n"
      " ROOT c = f32[3,38,4] convolution(x, w), window={size=5 pad=1_1}, dim_labels=b0f_0io->b0f",
      "x = f32[2,6,9,30] parameter(0)\n w = f32[4,6,3,3] parameter(1)\n"
      " ROOT c = f32[2,4,9,30] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01",
      "x = f32[9,30,2,6] parameter(0)\n w = f32[3,3,6,4] parameter(1)\n"
      " ROOT c = f32[9,15,2,4] convolution(x, w), window={size=3x3 stride=1x2 pad=1_1x0_1}, dim_labels=01bf_01io->01bf",
      "x = f32[1,4,5,20,3] parameter(0)\n w = f32[2,2,3,3,5] parameter(1)\n"
      " ROOT c = f32[1,3,4,20,5] convolution(x, w), window={size=2x2x3 pad=0_0x0_0x1_1}, dim_labels=b012f_012io->b012f",
      "x = f32[2,8,24,4] parameter(0)\n w = f32[3,3,1,8] parameter(1)\n"
      " ROOT c = f32[2,8,24,8] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, "
      "feature_group_count=4",
      "x = s32[2,8,24,4] parameter(0)\n w = s32[3,3,4,8] parameter(1)\n"
      " ROOT c = s32[2,8,24,8] convolution(x, w), window={size=3x3 pad=1_1x1_1 rhs_reversal=0x1}, dim_labels=b01f_01io->b01f",
      "x = bf16[2,8,24,4] parameter(0)\n w = bf16[3,3,4,8] parameter(1)\n"
      " ROOT c = f32[2,8,24,8] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f",
  };
  for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
    char src[1024];
    snprintf(src, sizeof src, "HloModule m\nENTRY e {\n %s\n}\n", progs[i]);
    tpu_diag d;
    tpu_module *m0 = NULL, *m = compile_src(src);
    CHECK(tpu_hlo_parse("s2b_forms.hlo", src, strlen(src), &m0, &d) == TPU_OK);
    if (!m || !m0) {
      tpu_module_free(m);
      tpu_module_free(m0);
      continue;
    }
    int64_t batch = -1;
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *in = m->entry->instrs[j];
      for (int k = 0; in->op == TPU_OP_FUSION && k < in->calls->ninstrs; k++)
        if (in->calls->instrs[k]->op == TPU_OP_CONVOLUTION)
          batch = in->calls->instrs[k]->shape.dims[in->calls->instrs[k]->conv->out_batch];
    }
    const tpu_instr *c0 = m0->entry->root;
    printf("space-to-batch form %zu: batch %lld -> %lld\n", i, (long long)c0->shape.dims[c0->conv->out_batch],
           (long long)batch);
    CHECK_EQ_INT((int)batch, (int)(8 * c0->shape.dims[c0->conv->out_batch]));
    tpu_tensor args[2], r0, r1;
    memset(&r0, 0, sizeof r0);
    memset(&r1, 0, sizeof r1);
    for (int a = 0; a < 2; a++) {
      const tpu_shape *s = &m0->entry->params[a]->shape;
      CHECK(tpu_tensor_alloc(&args[a], s->dtype, s->rank, s->dims, &d) == TPU_OK);
      uint32_t seed = 777u + (uint32_t)a;
      for (int64_t e = 0; e < tpu_shape_numel(s); e++) {
        seed = seed * 1664525u + 1013904223u;
        double v = (double)(int32_t)(seed >> 8) / (double)(1 << 23) - 0.5;
        tpu_tensor_set_f64(&args[a], e, s->dtype == TPU_S32 ? (double)((seed >> 20) % 17) - 8.0 : v);
      }
    }
    CHECK(tpu_ref_run(m0, args, 2, &r0, &d) == TPU_OK);
    CHECK(tpu_ref_run(m, args, 2, &r1, &d) == TPU_OK);
    CHECK(same_bits(&r0, &r1));
    for (int a = 0; a < 2; a++) tpu_tensor_free(&args[a]);
    tpu_tensor_free(&r0);
    tpu_tensor_free(&r1);
    tpu_module_free(m0);
    tpu_module_free(m);
  }
}

/* A convolution's input parameter with fewer features than the lanes, which another layout
 * pads less than the convolution's: the parameter takes that layout and a copy relays it
 * into the convolution's (batch in the sublanes, features in the lanes), a kernel of its own,
 * as the XLA TPU compiler's programs (sconv_b8_224x224_c64to128_k2s3_valid: bf16[8,224,224,64]
 * {2,3,1,0} copied to {3,0,2,1}). Not with 128 features (the convolution's layout is the
 * parameter's), nor for a weight gradient's input (its window the image). */
static void test_conv_input_copy(void) {
  static const char *fmt =
      "HloModule m\nENTRY e {\n x = bf16[8,56,56,%d] parameter(0)\n w = bf16[%s] parameter(1)\n"
      " ROOT c = bf16[%s] convolution(x, w), window={%s}, dim_labels=%s\n}\n";
  struct {
    int f;
    const char *w, *out, *win, *dl;
    int copy;
  } cases[] = {{32, "3,3,32,64", "8,56,56,64", "size=3x3 pad=1_1x1_1", "b01f_01io->b01f", 1},
               {128, "3,3,128,64", "8,56,56,64", "size=3x3 pad=1_1x1_1", "b01f_01io->b01f", 0},
               {32, "8,56,56,64", "3,3,32,64", "size=56x56 pad=1_1x1_1", "f01b_i01o->01bf", 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char src[640];
    snprintf(src, sizeof src, fmt, cases[i].f, cases[i].w, cases[i].out, cases[i].win, cases[i].dl);
    tpu_module *m = compile_src(src);
    CHECK(m != NULL);
    if (!m) continue;
    const tpu_instr *x = NULL, *c = NULL;
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *v = m->entry->instrs[j];
      if (v->op == TPU_OP_PARAMETER && v->index == 0) x = v;
      if (v->op == TPU_OP_COPY && v->noperands == 1 && v->operands[0]->op == TPU_OP_PARAMETER) c = v;
    }
    CHECK(x != NULL);
    printf("input bf16[8,56,56,%d], %s: parameter minor %d, copy %s\n", cases[i].f, cases[i].dl,
           x && x->shape.has_layout ? x->shape.minor_to_major[0] : 3, c ? "yes" : "no");
    CHECK((c != NULL) == cases[i].copy);
    if (c && x) {
      CHECK(x->shape.has_layout && x->shape.minor_to_major[0] == 2 && x->shape.minor_to_major[1] == 3);
      CHECK(c->shape.has_layout && c->shape.minor_to_major[0] == 3 && c->shape.minor_to_major[1] == 0);
    }
    tpu_module_free(m);
  }
}

/* An input of at most 4 features read by a convolution and by its weight gradient (whose
 * window is the image and whose features are the batch): the parameter takes the layout
 * that pads least and one copy relays it into the weight gradient's, the batch in the lanes
 * and the features in the sublanes, as the XLA TPU compiler's programs
 * (conv_grad_nchw_hwio_nchw_b8_28_c3to32_k3: bf16[8,3,28,28] {3,0,2,1} copied to
 * {0,1,3,2}; conv_bwd_stem7x7_bf16: bf16[32,224,224,3] to {0,3,2,1}). Not with 64 features. */
static void test_wgrad_input_copy(void) {
  static const char *fmt =
      "HloModule m\nENTRY e {\n x = bf16[8,%d,28,28] parameter(0)\n w = bf16[3,3,%d,32] parameter(1)\n"
      " g = bf16[8,32,28,28] parameter(2)\n"
      " c = bf16[8,32,28,28] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_01io->bf01\n"
      " d = bf16[3,3,%d,32] convolution(x, g), window={size=28x28 pad=1_1x1_1}, dim_labels=fb01_io01->01bf\n"
      " ROOT t = (bf16[8,32,28,28], bf16[3,3,%d,32]) tuple(c, d)\n}\n";
  int feats[2] = {3, 64}, want[2] = {1, 0};
  for (int i = 0; i < 2; i++) {
    char src[900];
    snprintf(src, sizeof src, fmt, feats[i], feats[i], feats[i], feats[i]);
    tpu_module *m = compile_src(src);
    CHECK(m != NULL);
    if (!m) continue;
    const tpu_instr *c = NULL;
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *v = m->entry->instrs[j];
      if (v->op == TPU_OP_COPY && v->noperands == 1 && v->operands[0]->op == TPU_OP_PARAMETER &&
          v->operands[0]->index == 0)
        c = v;
    }
    printf("weight gradient's input bf16[8,%d,28,28]: copy %s\n", feats[i], c ? "yes" : "no");
    CHECK((c != NULL) == want[i]);
    if (c) CHECK(c->shape.has_layout && c->shape.minor_to_major[0] == 0 && c->shape.minor_to_major[1] == 1);
    tpu_module_free(m);
  }
}

int main(void) {
  test_conv_relayout(); /* before the chip is loaded, as it ran in test_passes.c */
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &g_chip, &d) == TPU_OK);
  test_param_layouts();
  test_gather_layouts();
  test_reader_relayout();
  test_dot_relayout();
  test_param_copies();
  test_result_copies();
  test_memory_space_copy();
  test_space_to_batch();
  test_space_to_batch_pad_width();
  test_space_to_batch_carry();
  test_space_to_batch_forms();
  test_nchw_param_layout();
  test_conv_input_copy();
  test_conv_batch_lanes_relayout();
  test_conv_small_batch_relayout();
  test_conv_reader_relayout();
  test_wgrad_input_copy();
  CHECK_DONE();
}
