/* The back end's MXU kernels (compile/backend/tile.c, tile_conv.c): dot tiles, two-dot fusions, fused
 * epilogues, operand reuse against the closed form, K-split accumulators, depthwise convolutions. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util.h"
#include "unit/compile/backend_util.h"

static tpu_chip g_chip;

static int roundtrip(const tpu_program *p, const char *name) { return program_roundtrip(p, name, &g_chip); }

static void dot_tiles(void) {
  tpu_module *m = parse(
      "HloModule d\n"
      "ENTRY e {\n"
      "  a = bf16[100,300] parameter(0)\n"
      "  b = bf16[300,200] parameter(1)\n"
      "  ROOT c = f32[100,200] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "}\n");
  CHECK(m != NULL);
  if (!m) return;
  tpu_diag d;
  tpu_program *p = compile(m, &g_chip, &d);
  CHECK(p != NULL);
  if (p) {
    CHECK_EQ_INT(p->nops, 1);
    CHECK_EQ_INT(p->ops[0].m, 100);
    CHECK_EQ_INT(p->ops[0].k, 300);
    CHECK_EQ_INT(p->ops[0].n, 200);
    CHECK_NEAR(p->ops[0].flops, 2.0 * 100 * 300 * 200, 0);
    /* M to 8 sublanes, K to 128 rows, N to 128 columns: 104 x 384 x 256. */
    CHECK_NEAR(p->ops[0].padded_flops, 2.0 * 104 * 384 * 256, 0);
    int mm = 0;
    for (int i = 0; i < p->ninsns; i++)
      if (p->insns[i].opc == TPU_ISA_MATMUL) {
        mm++;
        CHECK_EQ_INT(p->insns[i].passes, 1);
        CHECK_EQ_INT(p->insns[i].dtype, TPU_BF16);
      }
    CHECK_EQ_INT(mm, 1);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* A fusion holding two dots (a Pallas attention kernel written as one fusion: scores
 * q k^T, their exponential, then p v) runs both on the MXUs: the op counts both dots'
 * flops, its tile loop issues a matmul for each, and its MXU cycles cover both dots'
 * multiply-adds (src/compile/backend/tile.c tpu__fusion_xdots). */
static void two_dot_fusion(void) {
  static const char *src =
      "HloModule attn\n"
      "fused {\n"
      "  q = bf16[16,1024,128] parameter(0)\n"
      "  k = bf16[16,512,128] parameter(1)\n"
      "  v = bf16[16,512,128] parameter(2)\n"
      "  s = f32[16,1024,512] dot(q, k), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={2}\n"
      "  e = f32[16,1024,512] exponential(s)\n"
      "  p = bf16[16,1024,512] convert(e)\n"
      "  ROOT o = f32[16,1024,128] dot(p, v), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}\n"
      "}\n"
      "ENTRY e {\n"
      "  q = bf16[16,1024,128] parameter(0)\n"
      "  k = bf16[16,512,128] parameter(1)\n"
      "  v = bf16[16,512,128] parameter(2)\n"
      "  ROOT f = f32[16,1024,128] fusion(q, k, v), kind=kOutput, calls=fused\n"
      "}\n";
  tpu_module *m = NULL;
  tpu_program *p = compile_src_on(src, &g_chip, &m);
  if (p) {
    const double one = 2.0 * 16 * 1024 * 128 * 512; /* each dot's flops */
    CHECK_EQ_INT(p->nops, 1);
    CHECK(p->ops[0].flops >= 2 * one && p->ops[0].flops < 2 * one * 1.01);
    /* both dots' MXU work per tile: a 128 x 512 and a 512 x 128 weight */
    int k128 = 0, k512 = 0;
    for (int i = 0; i < p->ninsns; i++)
      if (p->insns[i].opc == TPU_ISA_MATMUL) {
        k128 += p->insns[i].k == 128 || p->insns[i].n == 512;
        k512 += p->insns[i].k == 512 && p->insns[i].n == 128;
      }
    CHECK(k128 > 0);
    CHECK(k512 > 0);
    tpu_timeline tl;
    if (time_program(p, &g_chip, &tl)) {
      /* 2 x 16 x 1024 x 128 x 512 multiply-adds at the MXUs' peak */
      double macs = (double)g_chip.mxu_rows * (double)g_chip.mxu_cols * (double)g_chip.mxus_per_core *
                    (double)(g_chip.tensorcores > 0 ? g_chip.tensorcores : 1);
      CHECK((double)tl.total_cycles >= one / macs); /* one dot alone: one/2 MACs */
      tpu_timeline_free(&tl);
    }
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* A dot with a residual add fused after it: the addend is read once, one output block's
 * slice at a time (not whole with each weight block). */
static void epilogue_slices(void) {
  tpu_module *m = parse(
      "HloModule epi\n"
      "fused {\n"
      "  p0 = bf16[4096,4096] parameter(0)\n"
      "  p1 = bf16[4096,4096] parameter(1)\n"
      "  p2 = bf16[4096,4096] parameter(2)\n"
      "  d = bf16[4096,4096] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  ROOT s = bf16[4096,4096] add(d, p2)\n"
      "}\n"
      "ENTRY e {\n"
      "  r = bf16[4096,4096] parameter(0)\n"
      "  a = bf16[4096,4096] parameter(1)\n"
      "  b = bf16[4096,4096] parameter(2)\n"
      "  ROOT f = bf16[4096,4096] fusion(a, b, r), kind=kOutput, calls=fused\n"
      "}\n");
  CHECK(m != NULL);
  if (!m) return;
  tpu_diag d;
  tpu_program *p = compile(m, &g_chip, &d);
  CHECK(p != NULL);
  if (p) {
    const int64_t whole = (int64_t)4096 * 4096 * 2;
    int64_t bm = 0, bn = 0, bk = 0, b_div = 0, r_bytes = 0, a_bytes = 0;
    tpu_timeline tl;
    CHECK(tpu_timing_run(p, &g_chip, 0, &tl, &d) == TPU_OK);
    for (int i = 0; i < p->ninsns; i++)
      if (p->insns[i].opc == TPU_ISA_MATMUL) {
        bm = p->insns[i].m;
        bn = p->insns[i].n;
        bk = p->insns[i].k;
        b_div = p->insns[i].src[1].div;
      }
    CHECK(bm > 0 && bn > 0);
    if (bm > 0 && bn > 0) {
      int64_t mb = 4096 / bm, nb = 4096 / bn;
      CHECK(mb * nb > 1); /* several output blocks, so a whole-addend load would show */
      /* With one K step the outer loop's operand is read once and the other once per outer
       * block (weight-stationary when n is outer: B's load period is mb); with K split,
       * A once per column block and B once per row block. Addend and result once. */
      int64_t kb = 4096 / bk, ab = whole * nb, bbytes = whole * mb;
      if (kb == 1 && b_div == mb && mb > 1) ab = whole * nb, bbytes = whole;
      else if (kb == 1) ab = whole;
      CHECK_NEAR(tl.hbm_bytes, (double)(ab + bbytes + 2 * whole), 0);
      CHECK(tl.hbm_bytes < (double)(whole * nb + whole * mb + 2 * whole) || mb == 1 || nb == 1);
    }
    /* Bytes per execution of the loads from r and a, over the tile loop. */
    for (int i = 0; i < p->ninsns; i++) {
      const tpu_insn *x = &p->insns[i];
      if (x->opc != TPU_ISA_DMA_IN || x->hbm < 0) continue;
      if (!strcmp(p->hbm[x->hbm].name, "r")) r_bytes = x->bytes;
      if (!strcmp(p->hbm[x->hbm].name, "a")) a_bytes = x->bytes;
    }
    CHECK(a_bytes > 0);
    if (bm > 0 && bn > 0) CHECK_EQ_INT(r_bytes, bm * bn * 2); /* one output block of bf16 */
    tpu_timeline_free(&tl);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* HBM bytes of a matmul against the closed form (each operand read once, the output
 * written once) when an operand panel fits VMEM, on chip c. Returns the bytes moved. */
static double dot_bytes(const tpu_chip *c, const char *dt, const char *ot, int64_t M, int64_t K, int64_t N,
                        int64_t *tiles) {
  char src[600];
  snprintf(src, sizeof src,
           "HloModule mm\nENTRY e {\n  a = %s[%lld,%lld] parameter(0)\n  b = %s[%lld,%lld] parameter(1)\n"
           "  ROOT c = %s[%lld,%lld] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
           dt, (long long)M, (long long)K, dt, (long long)K, (long long)N, ot, (long long)M, (long long)N);
  tpu_module *m = parse(src);
  CHECK(m != NULL);
  if (!m) return -1;
  tpu_diag d;
  tpu_program *p = compile(m, c, &d);
  CHECK(p != NULL);
  double bytes = -1;
  if (p) {
    tpu_timeline tl;
    CHECK(tpu_timing_run(p, c, 0, &tl, &d) == TPU_OK);
    bytes = tl.hbm_bytes;
    *tiles = p->ops[0].tiles;
    CHECK(roundtrip(p, "dot_bytes"));
    tpu_timeline_free(&tl);
  }
  tpu_program_free(p);
  tpu_module_free(m);
  return bytes;
}

static void operand_reuse(void) {
  tpu_diag d;
  tpu_chip v1;
  CHECK(tpu_chip_load("v1", &v1, &d) == TPU_OK);
  int64_t tiles = 0;
  /* TPU v1, a CNN0-like layer (M = 8 x 19 x 19 positions, 3x3x256 -> 256): the 576 KiB
   * weight panel stays in the Unified Buffer while the activations stream past it, so
   * every operand is read once although M is split into several blocks. Tiled layout:
   * (8,128) tiles for every type (s8 packs 4 rows per word within them), so the 2888
   * rows of the s8 lhs and of the s32 output need no padding. */
  double b = dot_bytes(&v1, "s8", "s32", 2888, 2304, 256, &tiles);
  CHECK_NEAR(b, 2888.0 * 2304 + 2304.0 * 256 + 2888.0 * 256 * 4, 0);
  CHECK(tiles > 1);
  /* v5e, bf16 16384 x 4096 by 4096 x 1024: 8 MiB of weights fit the VMEM budget. */
  b = dot_bytes(&g_chip, "bf16", "bf16", 16384, 4096, 1024, &tiles);
  CHECK_NEAR(b, 2.0 * (16384.0 * 4096 + 4096.0 * 1024 + 16384.0 * 1024), 0);
  CHECK(tiles > 1);
  /* 1024^3 bf16: pipelined over several tiles and still at the closed form. */
  b = dot_bytes(&g_chip, "bf16", "bf16", 1024, 1024, 1024, &tiles);
  CHECK_NEAR(b, 2.0 * 3 * 1024 * 1024, 0);
  CHECK(tiles > 1);
  /* 16384^3 bf16: no whole operand (512 MiB) fits VMEM, so a panel is re-read; the bytes
   * exceed the closed form but stay below the square-block scheme that re-reads A per
   * column block and B per row block (1024 blocks: 16 x each operand). */
  b = dot_bytes(&g_chip, "bf16", "bf16", 16384, 16384, 16384, &tiles);
  const double whole = 2.0 * 16384 * 16384;
  CHECK(b >= 3 * whole);
  CHECK(b < 34 * whole);
  printf("16384^3 bf16 on v5e: %.3g bytes = %.2f x the closed form, %lld tiles\n", b, b / (3 * whole),
         (long long)tiles);
}

/* A matmul split along K accumulates each output block in one f32 buffer: the block's
 * store is not overlapped with the next block's first K step (the XLA TPU compiler's
 * estimates: bf16 [4096,32768] x [32768,4096] on v5e, 64 K steps of 512 per 1024x1024
 * block, 8,884,880 cycles: its MXU work, 8,388,608, plus a store per block). */
static void k_split_accumulator(void) {
  tpu_chip c;
  tpu_module *m = NULL;
  tpu_program *p = compile_for("v5e",
                               "HloModule k\nENTRY e {\n  a = bf16[4096,32768] parameter(0)\n"
                               "  b = bf16[32768,4096] parameter(1)\n"
                               "  ROOT c = bf16[4096,4096] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
                               &c, &m);
  if (p) {
    int out = -1, ksplit = 0;
    for (int i = 0; i < p->ninsns; i++) {
      if (p->insns[i].opc == TPU_ISA_MATMUL) {
        out = p->insns[i].dst.buf;
        ksplit |= p->insns[i].k < 32768;
      }
    }
    CHECK(ksplit);
    CHECK(out >= 0 && p->vmem[out].nslots == 1);
    tpu_timeline tl;
    if (time_program(p, &c, &tl)) {
      double mxu = (double)tl.busy[TPU_UNIT_MXU], st = (double)tl.busy[TPU_UNIT_DMA_OUT];
      printf("K-split bf16 [4096,32768] x [32768,4096] on v5e: %lld cycles, MXU %.0f, stores %.0f (compiler 8,884,880)\n",
             (long long)tl.total_cycles, mxu, st);
      CHECK((double)tl.total_cycles >= mxu + 0.9 * st);
      tpu_timeline_free(&tl);
    }
    tpu_program_free(p);
  }
  tpu_module_free(m);
}

/* Times p on c and checks its step is within 5 % of the compiler's estimate for it. */
static void check_near_compiler(tpu_program *p, const tpu_chip *c, double compiler, const char *what) {
  tpu_timeline tl;
  if (!time_program(p, c, &tl)) return;
  double r = (double)tl.total_cycles / compiler;
  printf("%s: %lld cycles, %.3f x the compiler's\n", what, (long long)tl.total_cycles, r);
  CHECK(r > 0.95 && r < 1.05);
  tpu_timeline_free(&tl);
}

/* Blocks of whole MXU column tiles: the XLA TPU compiler sizes a matmul's windows in tiles
 * (libtpu compile-only, v5e bf16 [12288,4096] x [4096,28672], its lhs prefetched into VMEM:
 * kernel window 4096 x 256, output window 768 x 256, iteration bounds 112 x 16 x 1, one K
 * step, 22,489,110 cycles). With N split only into 1-8, 12, 16, ... 256 blocks the 256-wide
 * blocks (112 of them) were out of reach and tpusim split K instead, exposing each output
 * block's store: 27.4 M cycles, 1.22x the compiler's. */
static void column_tile_blocks(void) {
  tpu_chip c;
  tpu_module *m = NULL;
  tpu_program *p = compile_for("v5e",
                               "HloModule n\nENTRY e {\n  a = bf16[12288,4096] parameter(0)\n"
                               "  b = bf16[4096,28672] parameter(1)\n"
                               "  ROOT c = bf16[12288,28672] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
                               &c, &m);
  CHECK(p != NULL);
  if (p) {
    int ksplit = 0, mm = 0;
    for (int i = 0; i < p->ninsns; i++)
      if (p->insns[i].opc == TPU_ISA_MATMUL) {
        mm++;
        ksplit |= p->insns[i].k < 4096;
        CHECK_EQ_INT(p->insns[i].n % 128, 0);
      }
    CHECK(mm > 0);
    CHECK(!ksplit);
    check_near_compiler(p, &c, 22489110.0, "bf16 [12288,4096] x [4096,28672] on v5e");
    tpu_program_free(p);
  }
  tpu_module_free(m);
}

/* With both operands in HBM the narrow whole-K column blocks are not taken: the XLA TPU
 * compiler keeps wide blocks and splits K (libtpu compile-only, v5e bf16 [12288,5120] x
 * [5120,28672], neither operand prefetched: 1024 x 640 x 1024 blocks, 28 x 12 x 8,
 * 32,602,352 cycles); offered the 256-column blocks tpusim streamed the rhs 24 times past
 * 512 x 5120 lhs blocks, 28.6 M cycles, 0.876x the compiler's. */
static void wide_blocks_from_hbm(void) {
  tpu_chip c;
  tpu_module *m = NULL;
  tpu_program *p = compile_for("v5e",
                               "HloModule n\nENTRY e {\n  a = bf16[12288,5120] parameter(0)\n"
                               "  b = bf16[5120,28672] parameter(1)\n"
                               "  ROOT c = bf16[12288,28672] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
                               &c, &m);
  CHECK(p != NULL);
  if (p) {
    CHECK_EQ_INT(p->xprefetch_bytes, 0);
    for (int i = 0; i < p->ninsns; i++)
      if (p->insns[i].opc == TPU_ISA_MATMUL) CHECK(p->insns[i].n > 256);
    check_near_compiler(p, &c, 32602352.0, "bf16 [12288,5120] x [5120,28672] on v5e");
    tpu_program_free(p);
  }
  tpu_module_free(m);
}

/* The output buffers of program p's matmul result (-1: no matmul), whether its K is split
 * (a step's k below `k`) and whether its store frees it (store_frees). */
static int out_slots(const tpu_program *p, int64_t k, int *ksplit, int *frees) {
  int out = -1;
  *ksplit = 0;
  *frees = 0;
  for (int i = 0; i < p->ninsns; i++)
    if (p->insns[i].opc == TPU_ISA_MATMUL) {
      out = p->insns[i].dst.buf;
      *ksplit |= p->insns[i].k < k;
    }
  if (out >= 0) *frees = p->vmem[out].store_frees;
  return out >= 0 ? p->vmem[out].nslots : -1;
}

/* With one K step and both operands streaming from HBM, neither fitting on chip (bf16
 * [32768,2048] and [2048,32768], 128 MiB each, over the 112 MiB of VMEM beside v5e's
 * scoped 16), the XLA TPU compiler charges each output block's store beside its MXU work
 * (libtpu compile-only, v5e, neither operand prefetched: 368 x 2048 x 768 blocks, one K
 * step, 39,498,826 cycles): one output buffer, the next block waiting for the store's
 * bytes. Overlapping the store (two output buffers) made it 34.2 M cycles, 0.867x. */
static void exposed_store_from_hbm(void) {
  tpu_chip c;
  tpu_module *m = NULL;
  tpu_program *p = compile_for("v5e",
                               "HloModule s\nENTRY e {\n  a = bf16[32768,2048] parameter(0)\n"
                               "  b = bf16[2048,32768] parameter(1)\n"
                               "  ROOT c = bf16[32768,32768] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
                               &c, &m);
  CHECK(p != NULL);
  if (p) {
    CHECK_EQ_INT(p->xprefetch_bytes, 0);
    int ksplit, frees;
    CHECK_EQ_INT(out_slots(p, 2048, &ksplit, &frees), 1);
    CHECK(!ksplit);
    CHECK(frees);
    check_near_compiler(p, &c, 39498826.0, "bf16 [32768,2048] x [2048,32768] on v5e");
    tpu_program_free(p);
  }
  tpu_module_free(m);
}

/* There the block search times a K-split block's store with its 16-bit pass, as the timing
 * does: with the bytes alone it took K-split blocks for v5e bf16 [65536,1024] x
 * [1024,65536] (the compiler: 592 x 1024 x 1152, one K step, 91,400,836 cycles) and came to
 * 1.40x the compiler's. */
static void k_split_store_pass(void) {
  tpu_chip c;
  tpu_module *m = NULL;
  tpu_program *p = compile_for("v5e",
                               "HloModule s\nENTRY e {\n  a = bf16[65536,1024] parameter(0)\n"
                               "  b = bf16[1024,65536] parameter(1)\n"
                               "  ROOT c = bf16[65536,65536] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
                               &c, &m);
  CHECK(p != NULL);
  if (p) {
    check_near_compiler(p, &c, 91400836.0, "bf16 [65536,1024] x [1024,65536] on v5e");
    tpu_program_free(p);
  }
  tpu_module_free(m);
}

/* Operands that fit on chip are not streamed both: the compiler copies one in (on v4 into
 * CMEM: bench/fidelity/compiled/mlp_train_step_bf16.v4.hlo reads x of bf16 [2048,1024] x
 * [1024,4096] through a copy-done, one K step) and overlaps each block's
 * store with the next block's work, so the kernel keeps two output buffers though tpusim
 * streams both operands from HBM (v4 has no VMEM beside its scoped 16 MiB). One output
 * buffer there made the corpus' v4 layers 9-29 % slower than the compiler. */
static void overlapped_store_on_chip(void) {
  tpu_chip c;
  tpu_module *m = NULL;
  tpu_program *p = compile_for("v4:core",
                               "HloModule s\nENTRY e {\n  a = bf16[2048,1024] parameter(0)\n"
                               "  b = bf16[1024,4096] parameter(1)\n"
                               "  ROOT c = bf16[2048,4096] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
                               &c, &m);
  CHECK(p != NULL);
  if (p) {
    int ksplit, frees;
    CHECK_EQ_INT(out_slots(p, 1024, &ksplit, &frees), 2);
    CHECK(!ksplit && !frees);
    tpu_program_free(p);
  }
  tpu_module_free(m);
}

/* Depthwise convolutions as the XLA TPU compiler runs them (bench/fidelity/probes/depthwise:
 * its estimates for a 3x3 depthwise convolution over bf16[8,28,28,256], forward and filter
 * gradient). The forward packs the 256 one-feature groups along the diagonal of the MXU's
 * weight tile, 128 features (a register's lanes) to a block: 9 taps x 2 blocks x 6,272 rows
 * of pushes over the MXUs, not 256 groups of 128-wide tiles. The filter gradient (batch_group
 * _count = 256, one output feature per group) is vector work: 2 x 9 x 1,568 f32 registers. */
static void depthwise_convs(void) {
  static const char *fwd =
      "HloModule dw\nENTRY e {\n  x = bf16[8,28,28,256] parameter(0)\n  w = bf16[3,3,1,256] parameter(1)\n"
      "  ROOT c = bf16[8,28,28,256] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, "
      "feature_group_count=256\n}\n";
  static const char *wgrad =
      "HloModule dwg\nENTRY e {\n  x = bf16[8,28,28,256] parameter(0)\n  g = bf16[8,28,28,256] parameter(1)\n"
      "  ROOT c = bf16[3,3,1,256] convolution(x, g), window={size=28x28 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf, "
      "batch_group_count=256\n}\n";
  /* the compiler's estimated_cycles (its fusion; clocks as the presets') and the band each
   * generation holds today */
  static const struct { const char *chip; int64_t fwd, wgrad; double band; } gens[] = {
      {"v4:core", 36746, 25044, 0.10}, {"v5e", 37569, 9439, 0.10}, {"v5p", 21308, 6170, 0.10}, {"v6e", 33704, 5312, 0.20}};
  /* (wgrad: the compiler's figure inside its backward program, operands already on chip) */
  for (size_t i = 0; i < sizeof gens / sizeof gens[0]; i++) {
    tpu_chip c;
    tpu_module *m = NULL;
    tpu_program *p = compile_for_with(gens[i].chip, fwd, 1, &c, &m);
    tpu_timeline tl;
    if (p && time_program(p, &c, &tl)) {
      int64_t mxus = (int64_t)c.mxus_per_core * (c.tensorcores > 0 ? c.tensorcores : 1);
      int64_t pushes = 9 * 2 * 8 * 28 * 28 / mxus; /* taps x lane blocks x rows, over the MXUs */
      printf("depthwise fwd %s: %lld cycles (compiler %lld), MXU busy %lld (diagonal blocks %lld)\n", gens[i].chip,
             (long long)tl.total_cycles, (long long)gens[i].fwd, (long long)tl.busy[TPU_UNIT_MXU], (long long)pushes);
      CHECK(fabs((double)tl.total_cycles / (double)gens[i].fwd - 1) <= gens[i].band);
      CHECK(tl.busy[TPU_UNIT_MXU] >= pushes && tl.busy[TPU_UNIT_MXU] <= pushes * 11 / 10 + 256);
      tpu_timeline_free(&tl);
    }
    tpu_program_free(p);
    tpu_module_free(m);
    p = compile_for_with(gens[i].chip, wgrad, 1, &c, &m);
    if (p && time_program(p, &c, &tl)) {
      printf("depthwise filter gradient %s: %lld cycles (compiler %lld), MXU busy %lld, VPU busy %lld\n", gens[i].chip,
             (long long)tl.total_cycles, (long long)gens[i].wgrad, (long long)tl.busy[TPU_UNIT_MXU],
             (long long)tl.busy[TPU_UNIT_VPU]);
      /* standalone it also reads its two operands from HBM, which the compiler's backward
       * program had prefetched: its vector work is checked against the closed form */
      double vops = c.vector_ops_per_cycle > 0 ? c.vector_ops_per_cycle : 1;
      int64_t vwork = (int64_t)(2.0 * 9 * 1568 / (vops * (c.tensorcores > 0 ? c.tensorcores : 1)));
      CHECK(tl.busy[TPU_UNIT_VPU] >= vwork && tl.busy[TPU_UNIT_VPU] <= vwork * 6 / 5);
      CHECK_EQ_INT(tl.busy[TPU_UNIT_MXU], 0);
      tpu_timeline_free(&tl);
    }
    tpu_program_free(p);
    tpu_module_free(m);
  }
}

int main(void) {
  if (!closed_form_v5e(&g_chip)) return 1;
  depthwise_convs();
  dot_tiles();
  two_dot_fusion();
  k_split_accumulator();
  column_tile_blocks();
  wide_blocks_from_hbm();
  exposed_store_from_hbm();
  overlapped_store_on_chip();
  k_split_store_pass();
  epilogue_slices();
  operand_reuse();
  CHECK_DONE();
}
