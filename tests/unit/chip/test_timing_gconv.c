/* Grouped convolutions' kernels and merge copies against the XLA TPU compiler's costs, through
 * tpusim's whole compilation (group_conv.c's split form): the step floor left out for an f32
 * result of whole registers kept in VMEM and for v6e's one-window kernels (lower.c
 * group_rows_on_chip, tile_conv.c tpu__conv_group_window), and the merge copy timed as a
 * sublane relayout per result tile (copy_kind.c group_merge_tiles), and a batch-in-lanes
 * grouped kernel's floor (tile_conv.c lanes_cycles). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "chip/program.h"
#include "chip/timing.h"
#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "timing_util.h"

/* The cycles of the op named `name` (or, with name NULL, the convolution's kernel: kind
 * fusion:kOutput) of HLO program src on chip c; -1 if none. */
static double cycles_of(const char *src, const tpu_chip *c, const char *name) {
  tpu_program *p = compile_all(src, c);
  CHECK(p != NULL);
  if (!p) return -1;
  double t = -1;
  for (int i = 0; i < p->nops && t < 0; i++)
    if (p->ops[i].name && (name ? !strcmp(p->ops[i].name, name)
                                : p->ops[i].kind && !strcmp(p->ops[i].kind, "fusion:kOutput")))
      t = op_cycles(p, c, p->ops[i].name);
  tpu_program_free(p);
  return t;
}

static const char *FMT = "HloModule m\nENTRY e {\n x = %s[%d,14,14,256] parameter(0)\n w = %s[%d,%d,32,256] parameter(1)\n"
                         " ROOT c = %s[%d,14,14,256] convolution(x, w), window={size=%dx%d pad=%d_%dx%d_%d},"
                         " dim_labels=b01f_01io->b01f, feature_group_count=8\n}\n";

static double gconv(const char *dt, int b, int k, const tpu_chip *c, const char *name) {
  char src[640];
  int pd = k / 2;
  snprintf(src, sizeof src, FMT, dt, b, dt, k, k, dt, b, k, k, pd, pd, pd, pd);
  return cycles_of(src, c, name);
}

/* An f32 grouped convolution of batch 8 (whole 32-bit registers of the batch) whose result
 * stays in VMEM for its merge copy (v5e): its kernel costs its MXU work, well under the
 * 1,568 steps x conv_group_step_cycles (libtpu probe, compile-only, [8,14,14,256] in 8
 * groups, 1x1: 3,392 cycles on v5e, 2.2 a step). The floor stays for bf16 (18,251 cycles),
 * for batch 4 (packed rows of half a register), and where the result goes to HBM (v5p:
 * 13,195 cycles, 8.4 a step). */
static void group_rows_on_chip(const tpu_chip *v5e, const tpu_chip *v5p) {
  double steps = 8 * 196, f32 = gconv("f32", 8, 1, v5e, NULL), bf = gconv("bf16", 8, 1, v5e, NULL);
  double b4 = gconv("f32", 4, 1, v5e, NULL), p = gconv("f32", 8, 1, v5p, NULL);
  double fe = steps * v5e->conv_group_step_cycles, fp = steps * v5p->conv_group_step_cycles;
  printf("grouped [8,14,14,256] g8 1x1 on v5e: f32 %.0f cycles (the compiler 3,392), bf16 %.0f (18,251), f32 batch 4"
         " %.0f; floor %.0f; v5p f32 %.0f, floor %.0f (13,195)\n", f32, bf, b4, fe, p, fp);
  CHECK(f32 > 0 && f32 < 0.7 * fe);
  CHECK(bf >= fe && b4 >= 0.5 * fe);
  CHECK(p >= fp);
}

/* The merge copy of f32 groups of 128 features at batch 2 (gconv_b2_28x28_c128to128_g2_k3_f32's
 * form, smaller): a sublane relayout of the split result into T(2,128) tiles, one per output
 * position's batch, at relayout_tile_cycles each after its start (the compiler's copy.4 of
 * f32[2,28,28,2,64] on v5e, 1,568 tiles: 15,659 cycles); without the chip's figure it is a
 * transfer, far less. Eight groups of f32 fill whole registers: no such floor, the chip's
 * figure changes nothing (the compiler: 212 cycles for f32[2,14,14,8,64] within VMEM). */
static void group_merge_relayout(const tpu_chip *v5e) {
  const char *fmt = "HloModule m\nENTRY e {\n x = f32[2,14,14,128] parameter(0)\n w = f32[3,3,%d,128] parameter(1)\n"
                    " ROOT c = f32[2,14,14,128] convolution(x, w), window={size=3x3 pad=1_1x1_1},"
                    " dim_labels=b01f_01io->b01f, feature_group_count=%d\n}\n";
  char src[512];
  tpu_chip off = *v5e;
  off.relayout_tile_cycles = 0;
  const double kov = v5e->kernel_overhead_s * v5e->clock_hz, floor = kov + hbm_lat(v5e) + 392 * v5e->relayout_tile_cycles;
  snprintf(src, sizeof src, fmt, 64, 2);
  double t = cycles_of(src, v5e, "copy.group"), t0 = cycles_of(src, &off, "copy.group");
  snprintf(src, sizeof src, fmt, 16, 8);
  double t8 = cycles_of(src, v5e, "copy.group"), t8off = cycles_of(src, &off, "copy.group");
  printf("merge copy of f32[2,14,14,2,64] on v5e: %.0f cycles, floor %.0f; without relayout_tile_cycles %.0f;"
         " 8 groups %.0f, without %.0f\n", t, floor, t0, t8, t8off);
  CHECK(t >= floor && t < 1.1 * floor);
  CHECK(t0 > 0 && t0 < 0.8 * floor);
  CHECK(t8 > 0 && t8 == t8off);
}

/* On v6e (mxu_fill_hidden) a grouped convolution of bf16 at batch 2 in one window of the
 * compiler's (its grouped layout within half the kernel's VMEM) costs the MXU passes over its
 * unpadded rows and a start (libtpu probe, compile-only: bf16 [2,14,14,256] in 8 groups,
 * 3x3, 3,948 cycles: 16 passes x 392 rows / 4 MXUs = 1,568 plus the start), not 1,568 steps x
 * conv_group_step_cycles (8,000), nor rows of 8 (four times the passes); a windowed one keeps
 * the floor ([8,28,28,256]: 29,308 cycles for 6,272 steps), as does the small one on a chip
 * without mxu_fill_hidden. */
static void group_one_window(const tpu_chip *v6e) {
  char src[640];
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[%d,%d,%d,256] parameter(0)\n w = bf16[3,3,32,256] parameter(1)\n"
                    " ROOT c = bf16[%d,%d,%d,256] convolution(x, w), window={size=3x3 pad=1_1x1_1},"
                    " dim_labels=b01f_01io->b01f, feature_group_count=8\n}\n";
  tpu_chip off = *v6e;
  off.mxu_fill_hidden = 0;
  snprintf(src, sizeof src, fmt, 2, 14, 14, 2, 14, 14);
  double t = cycles_of(src, v6e, NULL), t0 = cycles_of(src, &off, NULL);
  snprintf(src, sizeof src, fmt, 8, 28, 28, 8, 28, 28);
  double tw = cycles_of(src, v6e, NULL);
  const double c = v6e->conv_group_step_cycles;
  printf("v6e grouped bf16 [2,14,14,256] g8 3x3: %.0f cycles (the compiler 3,948), floor %.0f; without mxu_fill_hidden"
         " %.0f; [8,28,28,256] %.0f, floor %.0f (29,308)\n", t, 1568 * c, t0, tw, 6272 * c);
  CHECK(t > 0 && t < 0.7 * 1568 * c);
  CHECK(t0 >= 1568 * c);
  CHECK(tw >= 6272 * c);
}

/* The merge copy of an f32 result in whole registers (8 groups or more, the compiler's merged
 * form with Cog in the lanes): off the core (v4's CMEM) a relayout of two half-register units
 * a result tile, within VMEM (v5e) a windowed copy of 4 KiB tiles with no start (libtpu probe,
 * compile-only, f32 [4,20,20,256] in 8 groups, 1x1: copy.4 of 1,600 T(8,128) tiles, v4 51,900
 * cycles, v5e 816; without the rule: a transfer, v4 9,606, v5e 20,425). */
static void group_merge_whole(const tpu_chip *v4, const tpu_chip *v5e) {
  const char *src = "HloModule m\nENTRY e {\n x = f32[4,20,20,256] parameter(0)\n w = f32[1,1,32,256] parameter(1)\n"
                    " ROOT c = f32[4,20,20,256] convolution(x, w), window={size=1x1},"
                    " dim_labels=b01f_01io->b01f, feature_group_count=8\n}\n";
  double t4 = cycles_of(src, v4, "copy.group"), t5 = cycles_of(src, v5e, "copy.group");
  double floor = 2.0 * 1600 * v4->relayout_tile_cycles;
  printf("whole-register merge copy f32[4,20,20,8,32]: v4 %.0f cycles (the compiler 51,900), floor %.0f; v5e %.0f (816)\n",
         t4, floor, t5);
  CHECK(t4 >= floor && t4 < 1.2 * 51900);
  CHECK(t5 > 0 && t5 < 2000);
}

/* A grouped convolution of 2-4 output features a group and a larger batch: the XLA TPU
 * compiler puts the batch in the lanes ({0,4,3,2,1} for its [B,H,W,G,Cog]) and its kernel
 * costs what a batch-in-lanes convolution of 3-4 features does (tile_conv.c lanes_cycles),
 * the groups' window one tap of G output positions: a fixed part plus, per output position
 * of [H,W,G], a position's and each filter tap's cycles, whatever the batch (4-8), the
 * group's input features (4-16) or Cog (2 or 4) (libtpu probes, compile-only, bf16
 * [8,14,14,32] x [3,3,4,32] in 8 groups: v4 40,055 cycles, v5e 33,681; 1,568 positions).
 * Without the rule its window over the groups (stride G - 1, the input dilated) left it its
 * MXU work alone, under half of that; 2 features a group ([4,14,14,16] -> 8 in 4 groups,
 * 3x3: v5e 18,568) likewise. */
static void group_batch_in_lanes(const tpu_chip *v4, const tpu_chip *v5e) { /* v4: one TensorCore, as the compiler's figure */
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[%d,14,14,%d] parameter(0)\n w = bf16[3,3,4,%d] parameter(1)\n"
                    " ROOT c = bf16[%d,14,14,%d] convolution(x, w), window={size=3x3 pad=1_1x1_1},"
                    " dim_labels=b01f_01io->b01f, feature_group_count=%d\n}\n";
  char src[512];
  tpu_chip off4 = *v4, off5 = *v5e;
  off4.conv_lanes_tap_cycles = off5.conv_lanes_tap_cycles = 0;
  snprintf(src, sizeof src, fmt, 8, 32, 32, 8, 32, 8);
  double t4 = cycles_of(src, v4, NULL), t5 = cycles_of(src, v5e, NULL);
  double o4 = cycles_of(src, &off4, NULL), o5 = cycles_of(src, &off5, NULL);
  snprintf(src, sizeof src, fmt, 4, 16, 8, 4, 8, 4);
  double c2 = cycles_of(src, v5e, NULL), c2off = cycles_of(src, &off5, NULL);
  printf("grouped bf16 [8,14,14,32] g8 3x3, batch in the lanes: v4 %.0f cycles (the compiler 40,055; without the rule"
         " %.0f), v5e %.0f (33,681; %.0f); 2 features a group, batch 4: v5e %.0f (18,568; %.0f)\n",
         t4, o4, t5, o5, c2, c2off);
  CHECK(t4 > 0.85 * 40055 && t4 < 1.15 * 40055);
  CHECK(t5 > 0.85 * 33681 && t5 < 1.15 * 33681);
  CHECK(o4 > 0 && o4 < 0.5 * 40055 && o5 > 0 && o5 < 0.5 * 33681);
  CHECK(c2 > 0.85 * 18568 && c2 < 1.15 * 18568 && c2off < 0.5 * 18568);
}

/* The merge copy of fewer merged features than the lanes: where Cog in the lanes and G in
 * the sublanes (tiles of G rows) pad no more than W in the lanes and Cog in the sublanes, the
 * compiler merges by the same sublane relayout, relayout_tile_cycles a result tile (libtpu
 * probe, compile-only, bf16 [4,10,10,32] in 2 groups, 3x3: copy.4 into
 * bf16[4,10,10,2,16]{4,3,0,2,1:T(2,128)}, 400 tiles, v4 6,176 cycles, v5e 5,447); where W is
 * wide it merges through W in the lanes instead ([2,56,56,32]: copy.4 into {2,4,3,1,0}, 43,720
 * on v4), which the floor of its 6,272 tiles would overstate. */
static void group_merge_narrow(const tpu_chip *v4, const tpu_chip *v5e) {
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[%d,%d,%d,32] parameter(0)\n w = bf16[3,3,16,32] parameter(1)\n"
                    " ROOT c = bf16[%d,%d,%d,32] convolution(x, w), window={size=3x3 pad=1_1x1_1},"
                    " dim_labels=b01f_01io->b01f, feature_group_count=2\n}\n";
  char src[512];
  snprintf(src, sizeof src, fmt, 4, 10, 10, 4, 10, 10);
  double t4 = cycles_of(src, v4, "copy.group"), t5 = cycles_of(src, v5e, "copy.group");
  snprintf(src, sizeof src, fmt, 2, 56, 56, 2, 56, 56);
  double w4 = cycles_of(src, v4, "copy.group"), wfloor = 6272 * v4->relayout_tile_cycles;
  printf("merge copy of bf16[4,10,10,2,16]: v4 %.0f cycles (the compiler 6,176), v5e %.0f (5,447); W-minor"
         " [2,56,56,2,16] v4 %.0f, relayout floor %.0f (the compiler 43,720)\n", t4, t5, w4, wfloor);
  CHECK(t4 > 0.85 * 6176 && t4 < 1.15 * 6176);
  CHECK(t5 > 0.8 * 5447 && t5 < 1.2 * 5447);
  CHECK(w4 > 0 && w4 < 0.8 * wfloor);
}

/* The layout copies around a grouped convolution whose result the compiler lays out with W in
 * the lanes (fewer features than W, a batch of 8): the parameter's copy into the split layout
 * and the merge copy out of it are lane transposes the compiler charges per tile of the split
 * side, its start included (group_conv.c mark_transposes, copy_kind.c
 * tpu__group_transpose_tiles; libtpu probe off the corpus, bench/fidelity/probes/gconv_copies.py,
 * bf16 [8,40,40,16] in 2 groups, 3x3: copy.2 and copy.4 of bf16[8,40,40,2,8], 3,200 tiles of
 * the split layout, 24,725 cycles each on v4, 14,830 on v5e). Without the rule the parameter's
 * copy is its transfers' (a third of the compiler's on v4); the merge copy's transfers already
 * cost about the compiler's figure on v4, and on v5e more (it reads the split result from HBM,
 * where the compiler keeps it in VMEM: left). */
static void group_transpose(const tpu_chip *v4, const tpu_chip *v5e) {
  const char *src = "HloModule m\nENTRY e {\n x = bf16[8,40,40,16] parameter(0)\n w = bf16[3,3,8,16] parameter(1)\n"
                    " ROOT c = bf16[8,40,40,16] convolution(x, w), window={size=3x3 pad=1_1x1_1},"
                    " dim_labels=b01f_01io->b01f, feature_group_count=2\n}\n";
  tpu_chip off4 = *v4, off5 = *v5e;
  off4.group_transpose_tile_cycles = off5.group_transpose_tile_cycles = 0;
  double i4 = cycles_of(src, v4, "copy.relayout"), o4 = cycles_of(src, v4, "copy.group");
  double i5 = cycles_of(src, v5e, "copy.relayout"), o5 = cycles_of(src, v5e, "copy.group");
  double n4 = cycles_of(src, &off4, "copy.relayout"), n5 = cycles_of(src, &off5, "copy.relayout");
  double m4 = cycles_of(src, &off4, "copy.group");
  printf("grouped bf16 [8,40,40,16] g2, W in the lanes: copy into the split layout v4 %.0f cycles, v5e %.0f (the compiler"
         " 24,725 / 14,830; without the rule %.0f / %.0f); merge copy v4 %.0f, v5e %.0f (24,725 / 14,830; v4 without %.0f)\n",
         i4, i5, n4, n5, o4, o5, m4);
  CHECK(i4 > 0.85 * 24725 && i4 < 1.15 * 24725 && o4 > 0.85 * 24725 && o4 < 1.15 * 24725);
  CHECK(i5 > 0.85 * 14830 && i5 < 1.15 * 14830 && o5 > 0.8 * 14830);
  CHECK(n4 > 0 && n4 < 0.7 * 24725 && n5 > 0 && n5 < 0.8 * 14830 && m4 > 0);
}

/* Many features (f32 [4,28,28,256]) in groups of few (32 groups of 8), where a group's features
 * pad more in the lanes than W: on v4 and v5p the compiler relays the input and the result
 * through W in the lanes, the features' lane copy and then the lane transpose into the split
 * layout, and back (group_conv.c wide_route; libtpu probe off the corpus,
 * bench/fidelity/probes/gconv_small_groups.py: copies into and out of f32[4,28,28,32,8]
 * 179,660 cycles each on v5p, out of it 171,360 on v4; the whole program 618,324 on v5p,
 * tpusim 272,705 before the rule, no input copy and a sublane merge of 50,675). v5e keeps the
 * sublane merge (its copies stay in VMEM at 4,000 cycles: no input copy). */
static void group_wide_route(const tpu_chip *v4, const tpu_chip *v5e, const tpu_chip *v5p) {
  const char *src = "HloModule m\nENTRY e {\n x = f32[4,28,28,256] parameter(0)\n w = f32[1,1,8,256] parameter(1)\n"
                    " ROOT c = f32[4,28,28,256] convolution(x, w), window={size=1x1},"
                    " dim_labels=b01f_01io->b01f, feature_group_count=32\n}\n";
  double ip = cycles_of(src, v5p, "copy.group_in"), op = cycles_of(src, v5p, "copy.group");
  double o4 = cycles_of(src, v4, "copy.group"), i4 = cycles_of(src, v4, "copy.group_in");
  double lp = cycles_of(src, v5p, "copy.group_lanes"), i5 = cycles_of(src, v5e, "copy.group_in");
  printf("grouped f32 [4,28,28,256] g32 1x1, through W in the lanes: v5p copy into the split layout %.0f cycles, out of it"
         " %.0f (the compiler 179,660 each), a lane copy %.0f (32,908); v4 out %.0f (171,360), in %.0f (294,378); v5e"
         " input copy %.0f (none)\n", ip, op, lp, o4, i4, i5);
  CHECK(ip > 0.9 * 179660 && ip < 1.1 * 179660 && op > 0.9 * 179660 && op < 1.1 * 179660);
  CHECK(o4 > 0.9 * 171360 && o4 < 1.1 * 171360 && i4 > 0 && lp > 0 && i5 < 0);
}

int main(void) {
  tpu_chip v4, v5e, v5p, v6e;
  tpu_diag d;
  if (tpu_chip_load("v4", &v4, &d) != TPU_OK || tpu_chip_load("v5e", &v5e, &d) != TPU_OK || tpu_chip_load("v5p", &v5p, &d) != TPU_OK ||
      tpu_chip_load("v6e", &v6e, &d) != TPU_OK) {
    fprintf(stderr, "cannot load the presets\n");
    return 1;
  }
  group_rows_on_chip(&v5e, &v5p);
  group_merge_relayout(&v5e);
  group_one_window(&v6e);
  group_merge_whole(&v4, &v5e);
  tpu_chip v4c;
  if (tpu_chip_load("v4:core", &v4c, &d) != TPU_OK) {
    fprintf(stderr, "cannot load v4:core\n");
    return 1;
  }
  group_batch_in_lanes(&v4c, &v5e);
  group_merge_narrow(&v4c, &v5e);
  group_transpose(&v4c, &v5e);
  group_wide_route(&v4c, &v5e, &v5p);
  CHECK_DONE();
}
