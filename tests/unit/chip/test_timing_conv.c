/* Convolution timing against the XLA TPU compiler's costs: taps padded to the lanes, a small
 * batch in the sublanes, a batched dot written as a convolution, a grouped convolution's steps,
 * a small batch's result-tile rows, a transposed convolution's input-driven floor, a packed convolution's per-position floor,
 * the sublane relayouts around them, a batch-in-lanes convolution's floor.
 * Moved from test_timing.c, unchanged; run on the v5e preset as it is. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "chip/mxu.h"
#include "chip/program.h"
#include "chip/timing.h"
#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "timing_util.h"

static tpu_chip g_v5e;

/* A filter convolution runs tap by tap with its input features as the contraction, padded
 * to the 128 lanes at each tap (the XLA TPU compiler's cost): a 3x3 convolution over 64
 * features takes as long as one over 128, and reports half the FLOPs. A weight gradient
 * (the window is the image) is one GEMM over all its taps. */
static void conv_taps_padded(void) {
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[32,28,28,%d] parameter(0)\n w = bf16[3,3,%d,128] parameter(1)\n"
                    " ROOT y = bf16[32,28,28,128] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n}\n";
  char src[512];
  double cyc[2] = {0, 0}, fl[2] = {0, 0};
  int feats[2] = {64, 128};
  for (int i = 0; i < 2; i++) {
    snprintf(src, sizeof src, fmt, feats[i], feats[i]);
    int nk = 0;
    cyc[i] = stream_time(src, &g_v5e, &nk);
    tpu_program *p = compile_src(src, &g_v5e, -1);
    CHECK(p != NULL);
    if (!p) return;
    for (int j = 0; j < p->nops; j++) fl[i] += p->ops[j].flops;
    tpu_program_free(p);
  }
  printf("3x3 convolution over 64 / 128 features: %.0f / %.0f cycles, %.3g / %.3g FLOPs\n", cyc[0], cyc[1], fl[0], fl[1]);
  CHECK(cyc[0] > 0.9 * cyc[1] && cyc[0] <= cyc[1]);
  CHECK_NEAR(fl[0], fl[1] / 2, 1);
  /* 3 output features and a batch of 32: the batch takes the MXU columns and the features
   * join the rows, so the kernel costs well under a full 128-column pass per output pixel
   * (which it would cost padded, as one with 128 features does) */
  const char *few = "HloModule m\nENTRY e {\n x = bf16[32,28,28,128] parameter(0)\n w = bf16[3,3,128,%d] parameter(1)\n"
                    " ROOT y = bf16[32,28,28,%d] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n}\n";
  int outs[2] = {3, 128};
  for (int i = 0; i < 2; i++) {
    snprintf(src, sizeof src, few, outs[i], outs[i]);
    int nk = 0;
    cyc[i] = stream_time(src, &g_v5e, &nk);
  }
  printf("3x3 convolution to 3 / 128 features, batch 32: %.0f / %.0f cycles\n", cyc[0], cyc[1]);
  CHECK(cyc[0] < 0.6 * cyc[1]);
}

/* The XLA TPU compiler's convolution emitters keep the batch in the sublanes: each output
 * position's MXU rows are the batch rounded up to the 8 sublanes, so a transposed
 * convolution (input dilated 2x2, 4x4 window) over a batch of 1 takes what one over 8 does,
 * one over 16 twice that; the FLOPs stay the batch's own. With the batch so padded, the
 * taps' features are one contraction, not each padded to the lanes: a 3x3 convolution of a
 * batch of 2 over 32 features takes about a quarter of one over 128. Not where the compiler
 * folds the last spatial dimension into the batch (space to batch: 16 wide or more). The
 * transposed convolution is timed without the chip's input-driven floor (conv_scatter_*,
 * whatever the batch up to 16, and the rows it puts over the input: conv_scatter_input_rows),
 * so that its MXU rows alone decide. */
static void conv_batch_in_sublanes(void) {
  tpu_chip rows = g_v5e;
  rows.conv_scatter_cycles = 0;
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[%d,64,64,128] parameter(0)\n w = bf16[4,4,128,128] parameter(1)\n"
                    " ROOT y = bf16[%d,130,130,128] convolution(x, w), window={size=4x4 pad=3_3x3_3 lhs_dilate=2x2},"
                    " dim_labels=b01f_01io->b01f\n}\n";
  char src[512];
  int bs[3] = {1, 8, 16};
  double cyc[3] = {0, 0, 0}, fl[3] = {0, 0, 0};
  for (int i = 0; i < 3; i++) {
    snprintf(src, sizeof src, fmt, bs[i], bs[i]);
    int nk = 0;
    cyc[i] = stream_time(src, &rows, &nk);
    tpu_program *p = compile_src(src, &rows, -1);
    CHECK(p != NULL);
    if (!p) return;
    for (int j = 0; j < p->nops; j++) fl[i] += p->ops[j].flops;
    tpu_program_free(p);
  }
  printf("transposed convolution, batch 1 / 8 / 16: %.0f / %.0f / %.0f cycles, %.3g / %.3g FLOPs\n", cyc[0], cyc[1],
         cyc[2], fl[0], fl[1]);
  CHECK(cyc[0] > 0.9 * cyc[1] && cyc[0] <= 1.02 * cyc[1]);
  CHECK(cyc[2] > 1.8 * cyc[1] && cyc[2] < 2.2 * cyc[1]);
  CHECK(fl[0] > 0.124 * fl[1] && fl[0] < 0.126 * fl[1]);
  /* 14 wide: not folded into the batch (space to batch), so batch 2 is padded to the 8
   * rows (32 features: packed with the taps, conv_batch_tile_rows); against batch 8 over
   * 128 features, each tap padded to the lanes */
  const char *f3 = "HloModule m\nENTRY e {\n x = bf16[%d,512,14,%d] parameter(0)\n w = bf16[3,3,%d,256] parameter(1)\n"
                   " ROOT y = bf16[%d,512,14,256] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n}\n";
  int feats[2] = {32, 128}, fb[2] = {2, 8};
  for (int i = 0; i < 2; i++) {
    snprintf(src, sizeof src, f3, fb[i], feats[i], feats[i], fb[i]);
    int nk = 0;
    cyc[i] = stream_time(src, &g_v5e, &nk);
  }
  printf("3x3 convolution of batch 2 over 32 / batch 8 over 128 features: %.0f / %.0f cycles\n", cyc[0], cyc[1]);
  /* batch 2's floor is one step per position and tile of 128 output features (conv_output_tiles:
   * the compiler's batch 2 / batch 8 over 32 features to 256 at 21x21 is 13,951 / 20,414) */
  CHECK(cyc[0] > 0.25 * cyc[1] && cyc[0] < 0.65 * cyc[1]);
  /* 112 wide: the compiler folds it into the batch 8 ways, so batch 1 is not padded: an
   * eighth of batch 8's time, and its features padded at every tap as batch 8's are */
  const char *f4 = "HloModule m\nENTRY e {\n x = bf16[%d,112,112,32] parameter(0)\n w = bf16[3,3,32,256] parameter(1)\n"
                   " ROOT y = bf16[%d,112,112,256] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n}\n";
  int bb[2] = {1, 8};
  for (int i = 0; i < 2; i++) {
    snprintf(src, sizeof src, f4, bb[i], bb[i]);
    int nk = 0;
    cyc[i] = stream_time(src, &g_v5e, &nk);
  }
  printf("3x3 convolution 112 wide over 32 features, batch 1 / 8: %.0f / %.0f cycles\n", cyc[0], cyc[1]);
  CHECK(cyc[0] > 0.1 * cyc[1] && cyc[0] < 0.16 * cyc[1]);
}

/* A batched dot as the XLA TPU compiler writes it (attention's P x V for 8 queries), a
 * convolution whose spatial dimensions are the batch (input-dilated so that every output meets one input element and one tap of
 * its own): timed as the batched dot it is, and planned as one (each batch its own weight
 * block: the 134 MB of V for decode attention's P x V no longer counts as one weight, which
 * did not fit a v4 TensorCore's VMEM). */
static void batched_dot_as_conv(void) {
  const char *dot = "HloModule m\nENTRY e {\n p = bf16[8,32,8,2048] parameter(0)\n v = bf16[8,32,2048,128] parameter(1)\n"
                    " ROOT o = bf16[8,32,8,128] dot(p, v), lhs_batch_dims={0,1}, lhs_contracting_dims={3},"
                    " rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n}\n";
  const char *conv = "HloModule m\nENTRY e {\n p = bf16[8,32,2048,8]{2,1,0,3} parameter(0)\n v = bf16[8,32,2048,128] parameter(1)\n"
                     " ROOT o = bf16[8,32,8,128] convolution(p, v), window={size=8x32 stride=7x31 lhs_dilate=8x32},"
                     " dim_labels=01fb_01io->01bf\n}\n";
  int nk = 0;
  double td = stream_time(dot, &g_v5e, &nk), tc = stream_time(conv, &g_v5e, &nk);
  printf("P x V of 256 heads, 8 queries, on v5e: dot %.0f cycles, as the compiler's convolution %.0f\n", td, tc);
  CHECK(td > 0 && tc > 0 && fabs(tc / td - 1) < 0.1);
  tpu_chip core;
  tpu_diag d;
  CHECK(tpu_chip_load("v4:core", &core, &d) == TPU_OK);
  tpu_program *p = compile_src(conv, &core, -1);
  CHECK(p != NULL); /* fits the 16 MiB of one v4 TensorCore */
  tpu_program_free(p);
}

/* A grouped convolution's kernel takes at least conv_group_step_cycles per step (one output
 * position's batch in the sublanes, for one group) whatever its groups' features and window,
 * as the XLA TPU compiler's cost model charges its grouped emitter: 16 groups over
 * [8,28,28,*] are 16 x 784 steps, with 8 or 64 features per group, a 1x1 or 3x3 window, and
 * written as the compiler writes it (the groups a spatial dimension: window 16, stride 15,
 * lhs_dilate 16). Batch 4 takes what batch 8 does, batch 16 twice that; a batch of 32 goes to
 * the lanes (no steps). The steps survive the program's text form. */
static void conv_group_steps(void) {
  const double c = g_v5e.conv_group_step_cycles;
  CHECK(c > 0);
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[%d,28,28,%d] parameter(0)\n w = bf16[%d,%d,%d,%d] parameter(1)\n"
                    " ROOT y = bf16[%d,28,28,%d] convolution(x, w), window={size=%dx%d pad=%d_%dx%d_%d},"
                    " dim_labels=b01f_01io->b01f, feature_group_count=16\n}\n";
  struct {
    int b, f, k;
    double steps;
  } cases[] = {{8, 8, 1, 16 * 784}, {8, 64, 1, 16 * 784}, {8, 8, 3, 16 * 784}, {4, 8, 1, 16 * 784}, {16, 8, 1, 2 * 16 * 784}};
  char src[640];
  double t8 = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int b = cases[i].b, f = cases[i].f, k = cases[i].k, pd = k / 2;
    snprintf(src, sizeof src, fmt, b, 16 * f, k, k, f, 16 * f, b, 16 * f, k, k, pd, pd, pd, pd);
    tpu_program *p = compile_src(src, &g_v5e, -1);
    CHECK(p != NULL);
    if (!p) return;
    double t = program_cycles(p, &g_v5e), floor = cases[i].steps * c;
    printf("grouped convolution, 16 groups of %d features, %dx%d, batch %d: %.0f cycles, %.0f steps x %.2f = %.0f\n", f,
           k, k, b, t, cases[i].steps, c, floor);
    /* (the 3x3 window's MXU work, its taps padded to the lanes, may exceed the steps) */
    CHECK(t >= floor && (k > 1 || t < 1.1 * floor));
    if (i == 0) {
      t8 = t;
      /* disassembled and assembled again, the program takes as long */
      char *txt = tpu_program_text(p);
      tpu_program *q = NULL;
      tpu_diag d;
      CHECK(txt != NULL && strstr(txt, " steps=") != NULL);
      CHECK(txt && tpu_program_parse("p.tpu", txt, strlen(txt), &q, &d) == TPU_OK);
      if (q) CHECK(program_cycles(q, &g_v5e) == t);
      tpu_program_free(q);
      tpu_free(txt);
    }
    tpu_program_free(p);
  }
  /* the compiler's own form of the first case: the groups a spatial dimension */
  const char *five = "HloModule m\nENTRY e {\n x = bf16[8,28,28,16,8] parameter(0)\n w = bf16[1,1,8,16,8] parameter(1)\n"
                     " ROOT y = bf16[8,28,28,16,8] convolution(x, w), window={size=1x1x16 stride=1x1x15 lhs_dilate=1x1x16},"
                     " dim_labels=b012f_01i2o->b012f\n}\n";
  int nk = 0;
  double t5 = stream_time(five, &g_v5e, &nk);
  printf("the same as the compiler writes it (groups spatial): %.0f cycles\n", t5);
  CHECK(t5 >= 16 * 784 * c && t5 < 1.1 * 16 * 784 * c && fabs(t5 / t8 - 1) < 0.05);
  /* batch 32: in the lanes, no steps: well under 16 x 784 x 4 steps */
  snprintf(src, sizeof src, fmt, 32, 128, 1, 1, 8, 128, 32, 128, 1, 1, 0, 0, 0, 0);
  double t32 = stream_time(src, &g_v5e, &nk);
  printf("batch 32: %.0f cycles (4 x 16 x 784 steps would be %.0f)\n", t32, 4 * 16 * 784 * c);
  CHECK(t32 > 0 && t32 < 0.5 * 4 * 16 * 784 * c);
  /* without the chip's figure, its MXU work alone: far less */
  tpu_chip off = g_v5e;
  off.conv_group_step_cycles = 0;
  snprintf(src, sizeof src, fmt, 8, 128, 1, 1, 8, 128, 8, 128, 1, 1, 0, 0, 0, 0);
  double toff = stream_time(src, &off, &nk);
  printf("without conv_group_step_cycles: %.0f cycles\n", toff);
  CHECK(toff > 0 && toff < 0.5 * t8);
}

/* The floor is the convolution emitter's, not the groups': a plain convolution with the batch
 * in the sublanes takes at least conv_group_step_cycles per output position's batch too (the
 * compiled families corpus: conv3d_b2_8x14x14_c16to16_k1s1's 1x1x1 kernel, 1,568 steps,
 * 20,400 cycles on v5e and 22,977 on v4, 13.0 and 14.7 a step, where its MXU work alone is
 * 8,487 and 6,998). Fewer than 8 output features go to an emitter with the batch in the lanes
 * (tconv_b2_28x28_c256to3_k4s4_valid): no steps there. */
static void conv_plain_steps(void) {
  const double c = g_v5e.conv_group_step_cycles;
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[2,8,14,14,16] parameter(0)\n w = bf16[1,1,1,16,%d] parameter(1)\n"
                    " ROOT y = bf16[2,8,14,14,%d] convolution(x, w), window={size=1x1x1}, dim_labels=b012f_012io->b012f\n}\n";
  char src[512];
  int nk = 0;
  snprintf(src, sizeof src, fmt, 16, 16);
  double t = stream_time(src, &g_v5e, &nk);
  printf("1x1x1 convolution bf16[2,8,14,14,16] to 16 features: %.0f cycles, 1568 steps x %.2f = %.0f\n", t, c, 1568 * c);
  CHECK(t >= 1568 * c && t < 1.3 * 1568 * c);
  /* one step per output position: 8 x 14 x 14 positions, the batch of 2 in one register */
  tpu_program *p = compile_src(src, &g_v5e, -1);
  CHECK(p != NULL);
  int64_t steps = 0;
  for (int i = 0; p && i < p->ninsns; i++)
    if (p->insns[i].opc == TPU_ISA_MATMUL) steps += p->insns[i].steps;
  printf("steps: %lld\n", (long long)steps);
  CHECK(steps == 1568);
  tpu_program_free(p);
  snprintf(src, sizeof src, fmt, 3, 3);
  double t3 = stream_time(src, &g_v5e, &nk);
  printf("to 3 features: %.0f cycles\n", t3);
  CHECK(t3 > 0 && t3 < 0.6 * 1568 * c);
  tpu_chip off = g_v5e;
  off.conv_group_step_cycles = 0;
  snprintf(src, sizeof src, fmt, 16, 16);
  double toff = stream_time(src, &off, &nk);
  printf("without conv_group_step_cycles: %.0f cycles\n", toff);
  CHECK(toff > 0 && toff < 0.5 * t);
}

/* An input-dilated (transposed) convolution with the batch in the sublanes: the XLA TPU
 * compiler's emitter walks the input, every input position's batch meeting every tap, and
 * charges the input times the output features, with floors per input position and tap and
 * per output position (chips' conv_scatter_*_cycles, from libtpu probes of these shapes:
 * bf16 [4,16,16,128] x [4,4,128,256], lhs_dilate 2x2, 270,416 cycles on v4, 73,515 on v5e).
 * The batch up to 16 and the dilation leave the input-driven term alone; batch 32 and the
 * compiler's space-to-batch result (batch not outermost) take other emitters. */
static void conv_scatter(void) {
  tpu_chip v4;
  tpu_diag d;
  CHECK(tpu_chip_load("v4:core", &v4, &d) == TPU_OK);
  CHECK(v4.conv_scatter_cycles > 0 && v4.conv_scatter_tap_cycles > 0 && v4.conv_scatter_out_cycles > 0);
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[%d,16,16,%d] parameter(0)\n w = bf16[%d,%d,%d,%d] parameter(1)\n"
                    " ROOT y = bf16[%d,%d,%d,%d] convolution(x, w), window={size=%dx%d pad=2_2x2_2 lhs_dilate=%dx%d},"
                    " dim_labels=b01f_01io->b01f\n}\n";
  char src[640];
  int nk = 0;
#define SCATTER(b, ci, co, k, ld)                                                                     \
  (snprintf(src, sizeof src, fmt, b, ci, k, k, ci, co, b, 15 * (ld) + 6 - (k), 15 * (ld) + 6 - (k), co, k, k, ld, ld), \
   stream_time(src, &v4, &nk))
  /* 256 input positions x 16 taps x 128 x 256 features: 8,192 units (each time below within 9 %
   * above its floor, so that a floor moved by 10 % fails) */
  double a = 256 * 16 * 2 * v4.conv_scatter_cycles, t = SCATTER(4, 128, 256, 4, 2);
  printf("transposed convolution bf16[4,16,16,128] x [4,4,128,256], lhs_dilate 2 on v4: %.0f cycles, input-driven %.0f\n", t, a);
  CHECK(t >= a && t < 1.09 * a);
  double t1 = SCATTER(1, 128, 256, 4, 2), t16 = SCATTER(16, 128, 256, 4, 2), t4d = SCATTER(4, 128, 256, 4, 4);
  printf("batch 1: %.0f, batch 16: %.0f, lhs_dilate 4 (62x62 outputs): %.0f\n", t1, t16, t4d);
  CHECK(t1 >= a && t1 < 1.09 * a && t16 >= a && t16 < 1.09 * a && t4d >= a && t4d < 1.09 * a);
  /* 32 features in and out: the tap floor */
  double f = 256 * 16 * v4.conv_scatter_tap_cycles, t32 = SCATTER(4, 32, 32, 4, 2);
  printf("32 to 32 features: %.0f cycles, tap floor %.0f\n", t32, f);
  CHECK(t32 >= f && t32 < 1.09 * f);
  /* a 3x3 window at lhs_dilate 4 over 32 input features: the output floor, 63 x 63 x 2 */
  double o = 63 * 63 * 2 * v4.conv_scatter_out_cycles, t3 = SCATTER(4, 32, 256, 3, 4);
  printf("3x3, lhs_dilate 4, 32 to 256 features: %.0f cycles, output floor %.0f\n", t3, o);
  CHECK(t3 >= o && t3 < 1.09 * o);
  /* batch 32: another emitter, no floor */
  double tb = SCATTER(32, 128, 256, 4, 2);
  printf("batch 32: %.0f cycles (8 x the input-driven term would be %.0f)\n", tb, 8 * a);
  CHECK(tb > 0 && tb < 0.5 * 8 * a);
#undef SCATTER
  /* the floor survives the program's text form */
  snprintf(src, sizeof src, fmt, 4, 128, 4, 4, 128, 256, 4, 32, 32, 256, 4, 4, 2, 2);
  tpu_program *p = compile_src(src, &v4, -1), *q = NULL;
  CHECK(p != NULL);
  char *txt = p ? tpu_program_text(p) : NULL;
  CHECK(txt != NULL && strstr(txt, " min_cycles=") != NULL);
  CHECK(txt && tpu_program_parse("p.tpu", txt, strlen(txt), &q, &d) == TPU_OK);
  if (p && q) CHECK(program_cycles(q, &v4) == program_cycles(p, &v4));
  tpu_program_free(q);
  tpu_program_free(p);
  tpu_free(txt);
  /* the compiler's space-to-batch result (batch second, the last dimension in pieces): no floor */
  const char *s2b = "HloModule m\nENTRY e {\n x = bf16[16,8,6,128] parameter(0)\n w = bf16[4,4,128,256] parameter(1)\n"
                    " ROOT y = bf16[32,8,8,256] convolution(x, w), window={size=4x4 pad=2_2x0_0 lhs_dilate=2x2},"
                    " dim_labels=0b1f_01io->0b1f\n}\n";
  double ts = stream_time(s2b, &v4, &nk), as = 16 * 6 * 16 * 2 * v4.conv_scatter_cycles;
  printf("space-to-batch form: %.0f cycles (the input-driven term would be %.0f)\n", ts, as);
  CHECK(ts > 0 && ts < 0.8 * as);
  /* without the chip's figures, the MXU work alone: far less */
  tpu_chip off = v4;
  off.conv_scatter_cycles = 0;
  snprintf(src, sizeof src, fmt, 4, 128, 4, 4, 128, 256, 4, 32, 32, 256, 4, 4, 2, 2);
  double toff = stream_time(src, &off, &nk);
  printf("without conv_scatter_cycles: %.0f cycles\n", toff);
  CHECK(toff > 0 && toff < 0.5 * t);
}

/* The scatter emitters walk the input: a transposed convolution's MXU rows are its input
 * positions' batch (padded to the sublanes), not the dilated image's outputs, most of whose
 * taps meet holes; the FLOPs stay the outputs'. Libtpu probe outside the corpora, v5e, bf16
 * [2,32,32,256] x [4,4,256,64], lhs_dilate 2x2, pad 3 (66x66 outputs): 151,711 cycles; rows
 * over the outputs gave 2.00 times that. */
static double kernel_cycles(const char *src, const tpu_chip *c);
static void conv_scatter_input_rows(void) {
  const char *src = "HloModule m\nENTRY e {\n x = bf16[2,32,32,256] parameter(0)\n w = bf16[4,4,256,64] parameter(1)\n"
                    " ROOT y = bf16[2,66,66,64] convolution(x, w), window={size=4x4 pad=3_3x3_3 lhs_dilate=2x2},"
                    " dim_labels=b01f_01io->b01f\n}\n";
  double t = kernel_cycles(src, &g_v5e), want = 151711;
  tpu_program *p = compile_src(src, &g_v5e, -1);
  CHECK(p != NULL);
  double fl = 0;
  for (int j = 0; p && j < p->nops; j++) fl += p->ops[j].flops;
  tpu_program_free(p);
  double fo = 2.0 * 2 * 66 * 66 * 16 * 256 * 64;
  printf("transposed convolution [2,32,32,256] -> 64 on v5e: %.0f cycles (compiler %.0f), %.4g FLOPs (outputs' %.4g)\n", t, want,
         fl, fo);
  CHECK(t > 0.8 * want && t < 1.25 * want);
  CHECK(fl > 0.999 * fo && fl < 1.001 * fo);
}

/* A transposed convolution of fewer output features than the sublanes costs what one of 8
 * does (session 30; libtpu probes outside the corpora, bench/fidelity/probes/tconv_sweep.py):
 * v5e bf16 [8,9,9,96] x [3,3,96,Co], lhs_dilate 2x2, pad 2_1 (18x18 outputs), 8,030 cycles at
 * Co = 3 and 4, 8,049 at 8 (the batch in the lanes at 3 or 4: another layout, the same
 * figure); on v6e, whose compiler times kernels at the rows they stream, up to 8 features are
 * the batch-in-lanes emitter's start and input positions' taps (conv_lanes_*_cycles): [8,13,13,48]
 * x [4,4,48,Co], lhs_dilate 4x4, pad 3 (52x52 outputs), 4,941 / 4,963 cycles at Co = 3 / 8,
 * where the sublanes' floors give 1.8-3.2 times that. */
static void conv_scatter_few_features(void) {
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[8,%d,%d,%d] parameter(0)\n w = bf16[%d,%d,%d,%d] parameter(1)\n"
                    " ROOT y = bf16[8,%d,%d,%d] convolution(x, w), window={size=%dx%d pad=%s lhs_dilate=%dx%d},"
                    " dim_labels=b01f_01io->b01f\n}\n";
  char src[640];
  tpu_chip v6e;
  tpu_diag d;
  CHECK(tpu_chip_load("v6e", &v6e, &d) == TPU_OK);
  double t5[2], t6 = 0;
  int co[2] = {3, 8};
  for (int i = 0; i < 2; i++) {
    snprintf(src, sizeof src, fmt, 9, 9, 96, 3, 3, 96, co[i], 18, 18, co[i], 3, 3, "2_1x2_1", 2, 2);
    t5[i] = kernel_cycles(src, &g_v5e);
  }
  snprintf(src, sizeof src, fmt, 13, 13, 48, 4, 4, 48, 3, 52, 52, 3, 4, 4, "3_3x3_3", 4, 4);
  t6 = kernel_cycles(src, &v6e);
  printf("transposed convolution to 3 / 8 features on v5e: %.0f / %.0f cycles (compiler 8,030 / 8,049); to 3 on v6e %.0f "
         "(compiler 4,941)\n", t5[0], t5[1], t6);
  CHECK(t5[1] > 0 && t5[0] > 0.9 * t5[1] && t5[0] < 1.1 * t5[1]);
  CHECK(t6 > 0.9 * 4941 && t6 < 1.1 * 4941);
}

/* The cycles of the convolution kernel of HLO program src on chip c (the op of kind
 * fusion:kOutput or convolution), -1 if none. */
static double kernel_cycles(const char *src, const tpu_chip *c) {
  tpu_program *p = compile_all(src, c);
  CHECK(p != NULL);
  if (!p) return -1;
  double t = -1;
  for (int i = 0; i < p->nops && t < 0; i++)
    if (p->ops[i].kind && (!strcmp(p->ops[i].kind, "fusion:kOutput") || !strcmp(p->ops[i].kind, "convolution")))
      t = op_cycles(p, c, p->ops[i].name);
  tpu_program_free(p);
  return t;
}

/* A convolution of at most 4 input features, the batch in the sublanes: the XLA TPU compiler
 * packs the features with the filter's taps into the sublanes and walks the output
 * positions, each position's batch meeting every MXU weight tile of the packed contraction;
 * its kernel lasts (weight tiles + 1) x chip conv_packed_cycles per position and 16 rows of
 * batch (libtpu probes on v5e, bf16 [8,56,56,Ci] x [7,7,Ci,Co], stride 3, 17 x 17 outputs:
 * Ci = 3, Co = 512 (2 x 4 tiles) 43,426 cycles; Co = 128 13,634; Ci = 8, not packed, 25,255).
 * The contraction is one: its features are not padded to the lanes at each tap. */
static void conv_packed(void) {
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[%d,56,56,%d] parameter(0)\n w = bf16[%d,%d,%d,%d] parameter(1)\n"
                    " ROOT y = bf16[%d,%d,%d,%d] convolution(x, w), window={size=%dx%d stride=%dx%d},"
                    " dim_labels=b01f_01io->b01f\n}\n";
  char src[640];
#define PACKED(chip, b, ci, co, k, s)                                                                       \
  (snprintf(src, sizeof src, fmt, b, ci, k, k, ci, co, b, (56 - (k)) / (s) + 1, (56 - (k)) / (s) + 1, co, k, k, s, s), \
   kernel_cycles(src, chip))
  const double c = g_v5e.conv_packed_cycles;
  CHECK(c > 0);
  double f512 = 289 * 9 * c, t512 = PACKED(&g_v5e, 8, 3, 512, 7, 3);
  double f128 = 289 * 3 * c, t128 = PACKED(&g_v5e, 8, 3, 128, 7, 3);
  printf("packed convolution [8,56,56,3] x [7,7,3,512] / [7,7,3,128], stride 3, on v5e: %.0f / %.0f cycles,"
         " floors %.0f / %.0f (the compiler: 43,426 / 13,634)\n", t512, t128, f512, f128);
  CHECK(t512 >= f512 && t512 < 1.05 * f512 && t128 >= f128 && t128 < 1.05 * f128);
  /* 16 rows of batch cost what 8 do (the compiler: 48,166) */
  double t16 = PACKED(&g_v5e, 16, 3, 512, 7, 3);
  printf("batch 16: %.0f cycles\n", t16);
  CHECK(t16 >= f512 && t16 < 1.05 * f512);
  /* 8 input features: not packed, no floor (the compiler: 25,255, under the 4 features' 43,426) */
  double t8 = PACKED(&g_v5e, 8, 8, 512, 7, 3);
  printf("8 input features: %.0f cycles\n", t8);
  CHECK(t8 > 0 && t8 < 0.7 * t512);
  /* v4's core and v6e's 256 x 256 weight tiles (the compiler: 48,255 and 17,436) */
  tpu_chip v4, v6e;
  tpu_diag d;
  CHECK(tpu_chip_load("v4:core", &v4, &d) == TPU_OK && tpu_chip_load("v6e", &v6e, &d) == TPU_OK);
  double t4 = PACKED(&v4, 8, 3, 512, 7, 3), t6 = PACKED(&v6e, 8, 3, 512, 7, 3);
  double f4 = 289 * 9 * v4.conv_packed_cycles, f6 = 289 * 3 * v6e.conv_packed_cycles;
  printf("v4 core / v6e: %.0f / %.0f cycles, floors %.0f / %.0f\n", t4, t6, f4, f6);
  CHECK(t4 >= f4 && t4 < 1.05 * f4 && t6 >= f6 && t6 < 1.05 * f6);
  /* without the chip's figure, its MXU work alone: far less */
  tpu_chip off = g_v5e;
  off.conv_packed_cycles = 0;
  double toff = PACKED(&off, 8, 3, 512, 7, 3);
  printf("without conv_packed_cycles: %.0f cycles\n", toff);
  CHECK(toff > 0 && toff < 0.5 * t512);
  /* one contraction: a 3x3 window at stride 1 over 3 features is 27 deep (one K tile of the
   * MXU), where over 8 features each tap fills the 128 lanes (9 tiles): padded FLOPs */
  double pf[2] = {0, 0};
  int feats[2] = {3, 8};
  for (int i = 0; i < 2; i++) {
    snprintf(src, sizeof src, fmt, 8, feats[i], 3, 3, feats[i], 128, 8, 54, 54, 128, 3, 3, 1, 1);
    tpu_program *pp = compile_all(src, &g_v5e);
    CHECK(pp != NULL);
    for (int j = 0; pp && j < pp->nops; j++)
      if (pp->ops[j].m > 0) pf[i] += pp->ops[j].padded_flops;
    tpu_program_free(pp);
  }
  printf("3x3 at stride 1, 3 / 8 features: %.4g / %.4g padded MXU FLOPs\n", pf[0], pf[1]);
  CHECK(pf[0] > 0 && pf[0] < 0.2 * pf[1]);
  /* a 1x1 window at stride 1 (a pointwise product): no floor */
  double t1 = PACKED(&g_v5e, 8, 3, 128, 1, 1), f1 = 56 * 56 * 2 * c;
  printf("1x1 at stride 1: %.0f cycles (the floor would be %.0f)\n", t1, f1);
  CHECK(t1 > 0 && t1 < 0.7 * f1);
#undef PACKED
  /* the floor survives the program's text form */
  snprintf(src, sizeof src, fmt, 8, 3, 7, 7, 3, 512, 8, 17, 17, 512, 7, 7, 3, 3);
  tpu_program *p = compile_all(src, &g_v5e), *q = NULL;
  CHECK(p != NULL);
  char *txt = p ? tpu_program_text(p) : NULL;
  CHECK(txt != NULL && strstr(txt, " min_cycles=") != NULL);
  CHECK(txt && tpu_program_parse("p.tpu", txt, strlen(txt), &q, &d) == TPU_OK);
  if (p && q) CHECK(program_cycles(q, &g_v5e) == program_cycles(p, &g_v5e));
  tpu_program_free(q);
  tpu_program_free(p);
  tpu_free(txt);
}

/* The cycles of src's op `name` on v5e, t[0] as the chip has it and t[1] with
 * relayout_tile_cycles 0 (-1: no such op). */
static void with_and_without_relayout(const char *src, const char *name, double t[2]) {
  tpu_chip off = g_v5e;
  off.relayout_tile_cycles = 0;
  const tpu_chip *chips[2] = {&g_v5e, &off};
  for (int i = 0; i < 2; i++) {
    t[i] = -1;
    tpu_program *p = compile_all(src, chips[i]);
    CHECK(p != NULL);
    if (p) t[i] = op_cycles(p, chips[i], name);
    tpu_program_free(p);
  }
}

/* Space-to-batch's unfold kernel in tpusim's own compilation (tile.c s2b_unfold_tiles): a
 * dilated convolution of batch 1 over 28 x 28 runs on 8 pieces of 4 outputs along W; writing them
 * back is a sublane relayout into T(4,128) tiles, 28 x 8 = 224 of them, at the chip's
 * relayout_tile_cycles after its start (the compiler's dilconv_b1_28x28_c256to64_k3d2 on v5e:
 * copy.2, 3,849 cycles). */
static void s2b_unfold_relayout(void) {
  const char *src = "HloModule m\nENTRY e {\n x = bf16[1,28,28,256] parameter(0)\n w = bf16[3,3,256,64] parameter(1)\n"
                    " ROOT c = bf16[1,28,28,64] convolution(x, w), window={size=3x3 pad=2_2x2_2 rhs_dilate=2x2},"
                    " dim_labels=b01f_01io->b01f\n}\n";
  const double c = g_v5e.relayout_tile_cycles, kov = g_v5e.kernel_overhead_s * g_v5e.clock_hz;
  double t[2];
  with_and_without_relayout(src, "fusion", t);
  double f = kov + hbm_lat(&g_v5e) + 224 * c; /* after the start and the first load (tile.c) */
  printf("space-to-batch unfold of bf16[8,28,4,64] into T(4,128) on v5e: %.0f cycles, floor %.0f (the compiler:"
         " 3,849); without relayout_tile_cycles %.0f\n", t[0], f, t[1]);
  CHECK(t[0] >= f && t[0] < 1.1 * f);
  CHECK(t[1] > 0 && t[1] < 0.9 * f);
}

/* Space to batch's result leaving the program: the compiler unfolds into a layout with the
 * batch next to W and copies into the program's least padded one when that differs
 * (relayout.c s2b_result_relaid): bf16[2,28,28,256] into {3,0,2,1:T(2,128)}, 1,568 tiles
 * (dilconv_b2_28x28_c64to256_k3d2: 18,076 cycles on v5e); not at batch 1 with the features in
 * the lanes, nor a 1-D result row-major, the batch next to L. */
static void s2b_result_relayout(void) {
  const char *two = "HloModule m\nENTRY e {\n x = bf16[2,28,28,64] parameter(0)\n w = bf16[3,3,64,256] parameter(1)\n"
                    " ROOT c = bf16[2,28,28,256] convolution(x, w), window={size=3x3 pad=2_2x2_2 rhs_dilate=2x2},"
                    " dim_labels=b01f_01io->b01f\n}\n";
  const char *one = "HloModule m\nENTRY e {\n x = bf16[1,28,28,256] parameter(0)\n w = bf16[3,3,256,64] parameter(1)\n"
                    " ROOT c = bf16[1,28,28,64] convolution(x, w), window={size=3x3 pad=2_2x2_2 rhs_dilate=2x2},"
                    " dim_labels=b01f_01io->b01f\n}\n";
  const char *l1d = "HloModule m\nENTRY e {\n x = bf16[4,4096,128] parameter(0)\n w = bf16[4,128,128] parameter(1)\n"
                    " ROOT c = bf16[4,2048,128] convolution(x, w), window={size=4 stride=2 pad=1_1}, dim_labels=b0f_0io->b0f\n}\n";
  const double c = g_v5e.relayout_tile_cycles, kov = g_v5e.kernel_overhead_s * g_v5e.clock_hz;
  const char *srcs[3] = {two, one, l1d};
  double t[3] = {-1, -1, -1};
  for (int i = 0; i < 3; i++) {
    tpu_program *p = compile_all(srcs[i], &g_v5e);
    CHECK(p != NULL);
    if (p) t[i] = op_cycles(p, &g_v5e, "copy.relayout");
    tpu_program_free(p);
  }
  double f = kov + hbm_lat(&g_v5e) + 1568 * c; /* after the start and the first load (tile.c) */
  printf("space-to-batch result bf16[2,28,28,256] copied into T(2,128) on v5e: %.0f cycles, floor %.0f (the"
         " compiler: 18,076); batch 1: %.0f, 1-D row-major: %.0f (none: -1)\n", t[0], f, t[1], t[2]);
  CHECK(t[0] >= f && t[0] < 1.1 * f);
  CHECK(t[1] < 0);
  CHECK(t[2] < 0);
}

/* Space to batch's pad before a halo into the parameter's least padded layout: with the
 * batch of 2 in the sublanes, a pad into T(2,128) tiles at relayout_tile_cycles a tile
 * (tile.c relayout_tiles; dilconv_b2_28x28_c64to256_k3d2: bf16[28,2,32,64], 896 tiles,
 * 10,811 cycles on v5e). */
static void s2b_pad_small_tiles(void) {
  const char *src = "HloModule m\nENTRY e {\n x = bf16[2,28,28,64] parameter(0)\n w = bf16[3,3,64,256] parameter(1)\n"
                    " ROOT c = bf16[2,28,28,256] convolution(x, w), window={size=3x3 pad=2_2x2_2 rhs_dilate=2x2},"
                    " dim_labels=b01f_01io->b01f\n}\n";
  const double c = g_v5e.relayout_tile_cycles, kov = g_v5e.kernel_overhead_s * g_v5e.clock_hz;
  double t[2];
  with_and_without_relayout(src, "s2b.pad", t);
  double f = kov + hbm_lat(&g_v5e) + 896 * c; /* after the start and the first load (tile.c) */
  printf("space-to-batch pad of bf16[2,28,28,64] into T(2,128) on v5e: %.0f cycles, floor %.0f (the compiler:"
         " 10,811); without relayout_tile_cycles %.0f\n", t[0], f, t[1]);
  CHECK(t[0] >= f && t[0] < 1.2 * f);
  CHECK(t[1] > 0 && t[1] < 0.9 * f);
}

/* Space to batch's pad that the compiler runs in windows (copy_kind.c tpu__pad_window_tiles):
 * bf16[4,64,64,128] with a 2x2 stride-3 window is padded to [4,64,72,128], 2,304 tiles of
 * 4.5 MiB, more than a sixth of v5e's 16 MiB of scoped VMEM: pad_window_tile_cycles a tile
 * (libtpu probe, off the families corpus: 61,566 cycles in 18 windows); without the figure,
 * the pad's transfers alone. The compiled form likewise, its result in VMEM; one of 2,304 tiles
 * written to HBM (a standalone pad, layout.c) is not windowed so. */
static void s2b_pad_windows(void) {
  const char *src = "HloModule m\nENTRY e {\n x = bf16[4,64,64,128] parameter(0)\n w = bf16[2,2,128,128] parameter(1)\n"
                    " ROOT c = bf16[4,21,21,128] convolution(x, w), window={size=2x2 stride=3x3},"
                    " dim_labels=b01f_01io->b01f\n}\n";
  const double c = g_v5e.pad_window_tile_cycles, kov = g_v5e.kernel_overhead_s * g_v5e.clock_hz;
  CHECK(c > 0);
  tpu_chip off = g_v5e;
  off.pad_window_tile_cycles = 0;
  const tpu_chip *chips[2] = {&g_v5e, &off};
  double t[2] = {0, 0}, tc[2] = {0, 0};
  for (int i = 0; i < 2; i++) {
    tpu_program *p = compile_all(src, chips[i]);
    CHECK(p != NULL);
    if (p) t[i] = op_cycles(p, chips[i], "s2b.pad");
    tpu_program_free(p);
  }
  const char *cmp = "HloModule m\nENTRY e {\n p = bf16[64,4,64,128]{3,0,2,1:T(8,128)(2,1)S(1)} parameter(0)\n"
                    " z = bf16[] constant(0)\n"
                    " q = bf16[64,4,72,128]{3,0,2,1:T(8,128)(2,1)S(1)} pad(p, z), padding=0_0x0_0x0_8x0_0\n"
                    " ROOT n = bf16[64,4,72,128]{3,0,2,1:T(8,128)(2,1)} negate(q)\n}\n";
  for (int i = 0; i < 2; i++) {
    tpu_program *p = compile_src(cmp, chips[i], -1);
    CHECK(p != NULL);
    if (p) tc[i] = op_cycles(p, chips[i], "q");
    tpu_program_free(p);
  }
  /* the same pad written to HBM */
  char hbm[512];
  snprintf(hbm, sizeof hbm, "%s", cmp);
  char *q = strstr(hbm, "(2,1)S(1)} pad(");
  CHECK(q != NULL);
  if (q) memmove(q + 5, q + 9, strlen(q + 9) + 1);
  double th[2] = {0, 0};
  for (int i = 0; i < 2; i++) {
    tpu_program *p = compile_src(hbm, chips[i], -1);
    CHECK(p != NULL);
    if (p) th[i] = op_cycles(p, chips[i], "q");
    tpu_program_free(p);
  }
  double f = 2304 * c;
  printf("space-to-batch pad of bf16[4,64,64,128] to W 72 on v5e: %.0f cycles, floor %.0f (the compiler: 61,566);"
         " without pad_window_tile_cycles %.0f; compiled form %.0f, without %.0f\n", t[0], f, t[1], tc[0], tc[1]);
  CHECK(t[0] >= f && t[0] < f + 1.5 * kov);
  CHECK(t[1] > 0 && t[1] < 0.6 * f);
  CHECK(tc[0] >= f && tc[0] < f + 1.5 * kov);
  CHECK(tc[1] > 0 && tc[1] < 0.7 * f);
  printf("the same pad into HBM: %.0f cycles, without the figure %.0f\n", th[0], th[1]);
  CHECK(th[0] > 0 && th[0] == th[1]);
}

/* A compiled program's copy that keeps the lanes' dimension and reorders the others (the
 * relayouts around a convolution's batch-in-sublanes layouts, T(2,128) and T(4,128) tiles)
 * costs the XLA TPU compiler its start plus relayout_tile_cycles per tile of the result,
 * whatever the tile's rows (compiled families, v5e: bf16[28,16,4,64] from {3,1,2,0:T(8,128)}
 * to {3,2,1,0:T(4,128)}, 448 tiles, 5,883 cycles; 896 tiles 9,950): its registers alone
 * cost a T(4,128) tile a quarter of a T(8,128) one. A result in whole f32 registers
 * (T(8,128), unpacked) moves whole tiles: no floor. */
static void relayout_tiles(void) {
  const char *fmt = "HloModule m\nENTRY e {\n p = %s[28,16,4,64]{3,1,2,0:T(8,128)%s} parameter(0)\n"
                    " a = %s[28,16,4,64]{3,1,2,0:T(8,128)%sS(1)} copy(p)\n"
                    " b = %s[28,16,4,64]{3,2,1,0:T(%d,128)%sS(1)} copy(a)\n"
                    " ROOT n = %s[28,16,4,64]{3,2,1,0:T(%d,128)%s} negate(b)\n}\n";
  char src[1024];
  const double c = g_v5e.relayout_tile_cycles, kov = g_v5e.kernel_overhead_s * g_v5e.clock_hz;
  CHECK(c > 0);
  tpu_chip off = g_v5e;
  off.relayout_tile_cycles = 0;
  double t[3] = {0, 0, 0};
  const tpu_chip *chips[3] = {&g_v5e, &off, &g_v5e};
  for (int i = 0; i < 3; i++) {
    const char *dt = i < 2 ? "bf16" : "f32", *pk = i < 2 ? "(2,1)" : "";
    int rows = i < 2 ? 4 : 8;
    snprintf(src, sizeof src, fmt, dt, pk, dt, pk, dt, rows, pk, dt, rows, pk);
    tpu_program *p = compile_src(src, chips[i], -1);
    CHECK(p != NULL);
    if (p) t[i] = op_cycles(p, chips[i], "b");
    tpu_program_free(p);
  }
  double f = kov + hbm_lat(&g_v5e) + 448 * c; /* after the start and the first load (tile.c) */
  printf("sublane relayout bf16[28,16,4,64] into T(4,128) tiles on v5e: %.0f cycles, floor %.0f (the compiler:"
         " 5,883); without relayout_tile_cycles %.0f; f32 into T(8,128): %.0f\n", t[0], f, t[1], t[2]);
  CHECK(t[0] >= f && t[0] < 1.1 * f);
  CHECK(t[1] > 0 && t[1] < 0.8 * f);
  CHECK(t[2] > 0 && t[2] < 0.8 * f);
  /* a pad into VMEM in T(2,128) tiles (the compiler: bf16[28,2,28,64] to [28,2,32,64], 896
   * tiles, 10,811 cycles) */
  const char *pad = "HloModule m\nENTRY e {\n p = bf16[28,2,28,64]{3,1,2,0:T(2,128)(2,1)} parameter(0)\n"
                    " z = bf16[] constant(0)\n"
                    " q = bf16[28,2,32,64]{3,1,2,0:T(2,128)(2,1)S(1)} pad(p, z), padding=0_0x0_0x2_2x0_0\n"
                    " ROOT n = bf16[28,2,32,64]{3,1,2,0:T(2,128)(2,1)} negate(q)\n}\n";
  double tp[2] = {0, 0};
  for (int i = 0; i < 2; i++) {
    tpu_program *p = compile_src(pad, chips[i], -1);
    CHECK(p != NULL);
    if (p) tp[i] = op_cycles(p, chips[i], "q");
    tpu_program_free(p);
  }
  double fp = kov + hbm_lat(&g_v5e) + 896 * c;
  printf("pad into T(2,128) tiles: %.0f cycles, floor %.0f (the compiler: 10,811); without: %.0f\n", tp[0], fp, tp[1]);
  CHECK(tp[0] >= fp && tp[0] < 1.1 * fp && tp[1] > 0 && tp[1] < 0.6 * fp);
}

/* A depthwise convolution with too few rows to cover the MXUs' weight loads (v6e: 4 MXUs,
 * 128-cycle loads, under 512 rows): each tap's diagonal block is a product dealt whole to an
 * MXU, which streams all its rows, rather than the rows split four ways with every fold
 * waiting for its load (libtpu probe, compile-only, v6e: bf16 [4,8,8,128] 7x7 stride 2, 64
 * rows, kernel 2,226 cycles, under its 49 loads end to end, 6,272; [1,6,6,128] 5x5 2,210).
 * Many rows (a batch of 16 over 20 x 20) keep the rows split, as does v5e (no mxu_batch_spread). */
static void depthwise_few_rows(void) {
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[%d,%d,%d,128] parameter(0)\n w = bf16[%d,%d,1,128] parameter(1)\n"
                    " ROOT y = bf16[%d,%d,%d,128] convolution(x, w), window={size=%dx%d stride=%dx%d pad=%d_%dx%d_%d},"
                    " dim_labels=b01f_01io->b01f, feature_group_count=128\n}\n";
  char src[640];
#define DW(chip, b, h, k, s)                                                                                     \
  (snprintf(src, sizeof src, fmt, b, h, h, k, k, b, (h + (k) / 2 * 2 - (k)) / (s) + 1, (h + (k) / 2 * 2 - (k)) / (s) + 1, \
            k, k, s, s, (k) / 2, (k) / 2, (k) / 2, (k) / 2),                                                    \
   kernel_cycles(src, chip))
  tpu_chip v6e, off;
  tpu_diag d;
  CHECK(tpu_chip_load("v6e", &v6e, &d) == TPU_OK);
  CHECK(v6e.mxu_batch_spread && v6e.mxu_weight_load_cycles == 128);
  off = v6e;
  off.mxu_batch_spread = 0;
  double t = DW(&v6e, 4, 8, 7, 2), toff = DW(&off, 4, 8, 7, 2);
  printf("depthwise [4,8,8,128] 7x7 s2 on v6e: %.0f cycles, rows split %.0f (the compiler: 2,226)\n", t, toff);
  CHECK(t > 0 && t < 0.7 * toff);
  double big = DW(&v6e, 16, 20, 3, 1), bigoff = DW(&off, 16, 20, 3, 1);
  printf("[16,20,20,128] 3x3: %.0f / %.0f cycles\n", big, bigoff);
  CHECK(big > 0 && big == bigoff);
#undef DW
}

/* A convolution of 3 or 4 output features with a batch of 8 or more: the XLA TPU compiler
 * lays the batch in the lanes and the features in the sublanes (its T(4,128) result tile),
 * and its cost model charges a fixed part, each output position, and each position's taps
 * times the input's 128-feature blocks, whatever the batch and the features (tile_conv.c
 * lanes_cycles; libtpu probes on v5e, bf16 [B,Ci,H,H] x [k,k,Co,Ci], pad k/2: B = 8,
 * Ci = 32, H = 28, k = 3, Co = 3: 20,386 cycles, the same at B = 32 and Co = 4; H = 14
 * 9,034; Ci = 256 34,517). The kernel lasts that; not 7 features (in the lanes, the compiler
 * another emitter), nor a 1x1 window. */
static void conv_lanes(void) {
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[%d,%d,%d,%d] parameter(0)\n w = bf16[%d,%d,%d,%d] parameter(1)\n"
                    " ROOT y = bf16[%d,%d,%d,%d] convolution(x, w), window={size=%dx%d pad=%d_%dx%d_%d},"
                    " dim_labels=bf01_01oi->bf01\n}\n";
  char src[640];
#define LANES(chip, b, ci, h, co, k)                                                                              \
  (snprintf(src, sizeof src, fmt, b, ci, h, h, k, k, co, ci, b, co, h, h, k, k, (k) / 2, (k) / 2, (k) / 2, (k) / 2), \
   kernel_cycles(src, chip))
  const tpu_chip *c = &g_v5e;
  CHECK(c->conv_lanes_tap_cycles > 0);
#define FLOOR(ch, h, taps, blocks) \
  ((ch)->conv_lanes_start_cycles + (double)(h) * (h) * ((ch)->conv_lanes_position_cycles + (taps) * (blocks) * (ch)->conv_lanes_tap_cycles))
  double t = LANES(c, 8, 32, 28, 3, 3), f = FLOOR(c, 28, 9, 1);
  double t32 = LANES(c, 32, 32, 28, 4, 3), t14 = LANES(c, 8, 32, 14, 3, 3), f14 = FLOOR(c, 14, 9, 1);
  double t256 = LANES(c, 8, 256, 28, 3, 3), f256 = FLOOR(c, 28, 9, 2);
  printf("batch-in-lanes convolution on v5e: %.0f / %.0f (B 32, Co 4) / %.0f (H 14) / %.0f (Ci 256) cycles, floors"
         " %.0f / %.0f / %.0f (the compiler: 20,386 / 20,386 / 9,034 / 34,517)\n", t, t32, t14, t256, f, f14, f256);
  CHECK(t >= f && t < 1.05 * f && t32 >= f && t32 < 1.05 * f && t14 >= f14 && t14 < 1.05 * f14);
  CHECK(t256 >= f256 && t256 < 1.05 * f256);
  /* 7 features and a 1x1 window: no floor, their MXU work alone */
  double t7 = LANES(c, 8, 32, 28, 7, 3), t1 = LANES(c, 8, 32, 28, 3, 1);
  printf("7 features / 1x1: %.0f / %.0f cycles\n", t7, t1);
  CHECK(t7 > 0 && t7 < 0.9 * f && t1 > 0 && t1 < 0.6 * f);
  /* without the chip's figures: far less */
  tpu_chip off = g_v5e;
  off.conv_lanes_tap_cycles = 0;
  double toff = LANES(&off, 8, 32, 28, 3, 3);
  printf("without conv_lanes_tap_cycles: %.0f cycles\n", toff);
  CHECK(toff > 0 && toff < 0.7 * t);
#undef FLOOR
#undef LANES
}

/* A plain convolution of a batch under the sublanes, a window of several taps at unit stride
 * over 128 or more input features (each tap its own contraction of whole lane tiles): its
 * MXU rows are the batch rounded up to the result tile's rows, 2 for a batch of 1 or 2, 4 for
 * 4, not the 8 sublanes (libtpu probes, bench/fidelity/probes/small_batch_conv.py: bf16
 * [B,31,31,256] x [3,3,256,64], rhs_dilate 4, v5e B = 2 / 4 / 8 20,013 / 25,661 / 43,508
 * cycles). 32 input features, packed with the taps into one contraction, keep the 8 rows
 * ([B,31,31,32] x [5,5,32,256], rhs_dilate 6: 28,987 / 34,833 / 46,200; tpusim pads batch 8's
 * taps to the lanes, 2.3 times the compiler's figure, a gap left). */
static void conv_batch_tile_rows(void) {
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[%d,31,31,%d] parameter(0)\n w = bf16[%d,%d,%d,%d] parameter(1)\n"
                    " ROOT y = bf16[%d,31,31,%d] convolution(x, w), window={size=%dx%d pad=%d_%dx%d_%d rhs_dilate=%dx%d},"
                    " dim_labels=b01f_01io->b01f\n}\n";
  char src[640];
  int bs[3] = {2, 4, 8};
  double wide[3], narrow[3];
  for (int i = 0; i < 3; i++) {
    int nk = 0;
    snprintf(src, sizeof src, fmt, bs[i], 256, 3, 3, 256, 64, bs[i], 64, 3, 3, 4, 4, 4, 4, 4, 4);
    wide[i] = stream_time(src, &g_v5e, &nk);
    snprintf(src, sizeof src, fmt, bs[i], 32, 5, 5, 32, 256, bs[i], 256, 5, 5, 12, 12, 12, 12, 6, 6);
    narrow[i] = stream_time(src, &g_v5e, &nk);
  }
  printf("3x3 rhs_dilate 4 over 256 features, batch 2 / 4 / 8: %.0f / %.0f / %.0f cycles (the compiler: 20,013 / "
         "25,661 / 43,508)\n", wide[0], wide[1], wide[2]);
  printf("5x5 rhs_dilate 6 over 32 features, batch 2 / 4 / 8: %.0f / %.0f / %.0f cycles\n", narrow[0], narrow[1],
         narrow[2]);
  CHECK(wide[0] > 0 && wide[0] < 0.45 * wide[2]);
  CHECK(wide[1] > 0.45 * wide[2] && wide[1] < 0.7 * wide[2]);
  CHECK(wide[2] > 0.9 * 43508 && wide[2] < 1.1 * 43508);
  CHECK(narrow[0] > 0.9 * narrow[1] && narrow[0] <= narrow[1]); /* both 8 rows (batch 8: each tap padded) */
  /* v6e (mxu_fill_hidden): a batch of 1 streams one row a position, no step floor (the
   * compiler: 5,567 cycles at batch 1, 13,834 at 2); 21 output features keep the floor */
  tpu_chip v6e;
  tpu_diag d;
  if (tpu_chip_load("v6e", &v6e, &d) != TPU_OK) {
    CHECK(0);
    return;
  }
  double one[2];
  int ob[2] = {1, 2};
  for (int i = 0; i < 2; i++) {
    int nk = 0;
    snprintf(src, sizeof src, fmt, ob[i], 256, 3, 3, 256, 64, ob[i], 64, 3, 3, 4, 4, 4, 4, 4, 4);
    one[i] = stream_time(src, &v6e, &nk);
  }
  printf("v6e, batch 1 / 2: %.0f / %.0f cycles (the compiler: 5,567 / 13,834)\n", one[0], one[1]);
  CHECK(one[0] > 0.8 * 5567 && one[0] < 0.8 * one[1]);
  int nk = 0;
  snprintf(src, sizeof src, fmt, 1, 256, 3, 3, 256, 21, 1, 21, 3, 3, 4, 4, 4, 4, 4, 4);
  double few = stream_time(src, &v6e, &nk);
  printf("v6e, batch 1 to 21 features: %.0f cycles\n", few);
  CHECK(few >= 961 * v6e.conv_group_step_cycles);
}

/* A step of the batch-in-sublanes emitter is one output position's batch for one 128-lane tile
 * of the output features, where the window has several taps (session 29, dilconv; libtpu probes
 * off the corpora, bench/fidelity/probes/dilconv_sweep.py: bf16 [2,21,21,32] x [3,3,32,Co],
 * rhs_dilate 10, the compiler 9,384 / 14,170 / 18,956 cycles on v5e at Co = 128 / 256 / 384).
 * Without the tiles, 256 features took 0.79 of the compiler's figure. */
static void conv_output_tiles(void) {
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[2,21,21,32] parameter(0)\n w = bf16[3,3,32,%d] parameter(1)\n"
                    " ROOT y = bf16[2,21,21,%d] convolution(x, w), window={size=3x3 pad=10_10x10_10 rhs_dilate=10x10},"
                    " dim_labels=b01f_01io->b01f\n}\n";
  char src[512];
  int nk = 0;
  snprintf(src, sizeof src, fmt, 256, 256);
  double t = stream_time(src, &g_v5e, &nk);
  snprintf(src, sizeof src, fmt, 384, 384);
  double t3 = stream_time(src, &g_v5e, &nk);
  printf("3x3 rhs_dilate 10, [2,21,21,32] to 256 / 384 features: %.0f / %.0f cycles (the compiler: 14,170 / 18,956)\n",
         t, t3);
  CHECK(t > 0.9 * 14170 && t < 1.1 * 14170);
  CHECK(t3 > 0.9 * 18956 && t3 < 1.1 * 18956);
  tpu_program *p = compile_src(src, &g_v5e, -1);
  CHECK(p != NULL);
  int64_t steps = 0;
  for (int i = 0; p && i < p->ninsns; i++)
    if (p->insns[i].opc == TPU_ISA_MATMUL) steps += p->insns[i].steps;
  printf("steps at 384 features: %lld (441 positions, more than one step each)\n", (long long)steps);
  CHECK(steps > 441);
  tpu_program_free(p);
}

/* A program result the convolution's layout pads exactly as little as another layout, the batch
 * of 2 in the sublanes in T(2,128) tiles against H's 4 rows in T(4,128): the XLA TPU compiler
 * returns the layout nearest row-major (H in the sublanes) and copies the convolution's result
 * into it (session 30, conv3d; libtpu probes off the corpora,
 * bench/fidelity/probes/conv_result_tie.py: bf16[2,4,12,64] from [3,3,64,64], 4,453 + 2,083
 * cycles on v5e; a 3-D [2,8,10,10,16], D's 8 rows, 12,175 + 4,464). Without the copy tpusim's
 * figure is two thirds of the compiler's. */
static void conv_result_tie(void) {
  const char *src2 = "HloModule m\nENTRY e {\n x = bf16[2,4,12,64] parameter(0)\n w = bf16[3,3,64,64] parameter(1)\n"
                     " ROOT y = bf16[2,4,12,64] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n}\n";
  const char *src3 = "HloModule m\nENTRY e {\n x = bf16[2,8,10,10,16] parameter(0)\n w = bf16[1,1,1,16,16] parameter(1)\n"
                     " ROOT y = bf16[2,8,10,10,16] convolution(x, w), window={size=1x1x1}, dim_labels=b012f_012io->b012f\n}\n";
  /* through every pass, as `tpusim run` compiles (the relayout copy is the fuse pass's) */
  tpu_program *p2 = compile_all(src2, &g_v5e), *p3 = compile_all(src3, &g_v5e);
  CHECK(p2 != NULL && p3 != NULL);
  if (!p2 || !p3) {
    tpu_program_free(p2);
    tpu_program_free(p3);
    return;
  }
  double t2 = program_cycles(p2, &g_v5e), t3 = program_cycles(p3, &g_v5e);
  int nk = p2->nops, nk3 = p3->nops;
  tpu_program_free(p2);
  tpu_program_free(p3);
  printf("conv to bf16[2,4,12,64] / bf16[2,8,10,10,16] on v5e: %.0f / %.0f cycles, %d / %d kernels (the compiler: "
         "6,536 / 16,639, two kernels)\n", t2, t3, nk, nk3);
  CHECK(t2 > 0.9 * 6536 && t2 < 1.1 * 6536);
  CHECK(t3 > 0.9 * 16639 && t3 < 1.1 * 16639);
  CHECK_EQ_INT(nk, 2);
  CHECK_EQ_INT(nk3, 2);
}

/* Space to batch of a 1x1x1 convolution whose W (40) splits evenly into 8 pieces, where the
 * least padded layout of its input and result puts W in the lanes: the XLA TPU compiler relays
 * each through two copies (W out of the tile, a bitcast, the convolution's layout), each a
 * kernel on v4 and v5p, where no value stays in VMEM between kernels; on v5e the second is
 * within VMEM and tpusim's one fold and one unfold kernel stand for the pairs (session 30,
 * conv3d; libtpu probes off the corpora, bench/fidelity/probes/s2b_lanes.py: bf16
 * [2,8,40,40,16] x [1,1,1,16,16], 146,458 cycles on v4, the copies 21,384 + 28,032 each way).
 * Without the copies tpusim's v4 figure is 0.81 of the compiler's. */
static void s2b_lanes(void) {
  const char *src = "HloModule m\nENTRY e {\n x = bf16[2,8,40,40,16] parameter(0)\n w = bf16[1,1,1,16,16] parameter(1)\n"
                    " ROOT y = bf16[2,8,40,40,16] convolution(x, w), window={size=1x1x1}, dim_labels=b012f_012io->b012f\n}\n";
  tpu_chip v4;
  tpu_diag d;
  CHECK(tpu_chip_load("v4:core", &v4, &d) == TPU_OK);
  tpu_program *p4 = compile_all(src, &v4), *p5 = compile_all(src, &g_v5e);
  CHECK(p4 != NULL && p5 != NULL);
  if (!p4 || !p5) {
    tpu_program_free(p4);
    tpu_program_free(p5);
    return;
  }
  double t = program_cycles(p4, &v4);
  printf("space to batch of bf16[2,8,40,40,16], W in the lanes: %.0f cycles on v4, %d / %d kernels on v4 / v5e "
         "(the compiler: 146,458, 5 kernels on every generation)\n", t, p4->nops, p5->nops);
  CHECK(t > 0.9 * 146458 && t < 1.1 * 146458);
  CHECK_EQ_INT(p4->nops, 5);
  CHECK_EQ_INT(p5->nops, 3);
  tpu_program_free(p4);
  tpu_program_free(p5);
}

/* An activation read by a 1x1 convolution and its weight gradient (batch and features swapped),
 * neither reading's features filling the lanes, takes its least padded layout where that is one
 * of the two readings' (the features in the lanes, the batch of 8 in the sublanes), as the XLA
 * TPU compiler gives it (session 30, conv3d; libtpu probes off the corpora,
 * bench/fidelity/probes/swapped_param.py: NCHW bf16[8,200,14,14] {1,0,3,2} on every generation,
 * 16,746 cycles on v5e for the three kernels). Row-major, W's 14 padded to 128 lanes, tpusim's
 * figure was 2.3 times the compiler's. */
static void swapped_param_layout(void) {
  const char *src = "HloModule m\n"
                    "ENTRY main.1 {\n"
                    "  x.1 = bf16[8,200,14,14]{3,2,1,0} parameter(0)\n"
                    "  w.1 = bf16[64,200,1,1]{3,2,1,0} parameter(1)\n"
                    "  c.3 = bf16[8,64,14,14]{3,2,1,0} convolution(x.1, w.1), window={size=1x1}, dim_labels=bf01_oi01->bf01\n"
                    "  cf = f32[8,64,14,14]{3,2,1,0} convert(c.3)\n"
                    "  two = f32[] constant(2)\n"
                    "  twob = f32[8,64,14,14]{3,2,1,0} broadcast(two), dimensions={}\n"
                    "  m = f32[8,64,14,14]{3,2,1,0} multiply(cf, twob)\n"
                    "  dy = bf16[8,64,14,14]{3,2,1,0} convert(m)\n"
                    "  dx = bf16[8,200,14,14]{3,2,1,0} convolution(dy, w.1), window={size=1x1}, dim_labels=bf01_io01->bf01\n"
                    "  dw.4 = bf16[64,200,1,1]{3,2,1,0} convolution(x.1, dy), window={size=14x14}, dim_labels=fb01_io01->fb01\n"
                    "  ROOT t = (bf16[8,200,14,14]{3,2,1,0}, bf16[64,200,1,1]{3,2,1,0}) tuple(dx, dw.4)\n"
                    "}\n";
  tpu_program *p = compile_all(src, &g_v5e);
  CHECK(p != NULL);
  if (!p) return;
  double t = program_cycles(p, &g_v5e);
  printf("1x1 convolution and its gradients over NCHW bf16[8,200,14,14] on v5e: %.0f cycles (the compiler: 16,746)\n", t);
  CHECK(t > 0.9 * 16746 && t < 1.1 * 16746);
  tpu_program_free(p);
}

int main(void) {
  tpu_diag d;
  if (tpu_chip_load("v5e", &g_v5e, &d) != TPU_OK) {
    fprintf(stderr, "cannot load v5e\n");
    return 1;
  }
  conv_taps_padded();
  conv_batch_in_sublanes();
  conv_batch_tile_rows();
  conv_group_steps();
  conv_plain_steps();
  conv_output_tiles();
  conv_result_tie();
  s2b_lanes();
  swapped_param_layout();
  conv_scatter();
  conv_packed();
  conv_scatter_input_rows();
  conv_scatter_few_features();
  relayout_tiles();
  s2b_unfold_relayout();
  s2b_result_relayout();
  s2b_pad_small_tiles();
  s2b_pad_windows();
  batched_dot_as_conv();
  depthwise_few_rows();
  conv_lanes();
  CHECK_DONE();
}
