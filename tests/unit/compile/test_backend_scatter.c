/* Tests of the scatter kernel's two forms (scatter_form.c): staged in VMEM (the whole
 * operand read and written once) or row by row (only the rows the updates touch), as the
 * XLA TPU compiler chooses by the VMEM the operand needs; and the copies it makes of
 * parameters it updates and of output leaves (param_copy.c). */
#include <stdio.h>

#include "backend_util.h"

static tpu_chip g_chip;

/* The padded bytes kernel `op` moves when src is compiled for chip preset `chip`; -1 when
 * it cannot be compiled or has no such op. */
static double op_bytes(const char *chip, const char *src, const char *op) {
  tpu_module *m = NULL;
  tpu_program *p = compile_for(chip, src, &g_chip, &m);
  double b = -1;
  if (p) {
    int i = op_named(p, op);
    CHECK(i >= 0);
    if (i >= 0) b = p->ops[i].padded_bytes;
  }
  tpu_program_free(p);
  tpu_module_free(m);
  return b;
}

/* A lone scatter-add of M rows of f32[M,D] into f32[N,D] (operand `opnd`: a parameter, or
 * "zeros" for a broadcast of 0). */
static char *scatter_src(char *buf, size_t n, int N, int D, int M, int zeros) {
  snprintf(buf, n,
           "HloModule s\n"
           "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] add(a, b) }\n"
           "ENTRY e {\n"
           "  t = f32[%d,%d]{1,0} parameter(0)\n"
           "  z = f32[] constant(0)\n"
           "  zb = f32[%d,%d]{1,0} broadcast(z), dimensions={}\n"
           "  i = s32[%d,1]{1,0} parameter(1)\n"
           "  u = f32[%d,%d]{1,0} parameter(2)\n"
           "  ROOT s = f32[%d,%d]{1,0} scatter(%s, i, u), update_window_dims={1}, inserted_window_dims={0},"
           " scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n"
           "}\n",
           N, D, N, D, M, M, D, N, D, zeros ? "zb" : "t");
  return buf;
}

/* The compiler's kCustom scatter_fusion (its result aliasing operand 0, which a copy of the
 * parameter fills first), of M rows of f32[M,D] into f32[N,D]. */
static char *fusion_src(char *buf, size_t n, int N, int D, int M) {
  snprintf(buf, n,
           "HloModule f\n"
           "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] add(a, b) }\n"
           "fc { p0 = f32[%d,%d]{1,0:T(8,128)} parameter(0)\n"
           "  p1 = s32[%d,1]{1,0:T(8,128)} parameter(1)\n"
           "  p2 = f32[%d,%d]{1,0:T(8,128)} parameter(2)\n"
           "  ROOT s = f32[%d,%d]{1,0:T(8,128)} scatter(p0, p1, p2), update_window_dims={1}, inserted_window_dims={0},"
           " scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add }\n"
           "ENTRY e {\n"
           "  t = f32[%d,%d]{1,0:T(8,128)} parameter(0)\n"
           "  i = s32[%d,1]{1,0:T(8,128)} parameter(1)\n"
           "  u = f32[%d,%d]{1,0:T(8,128)} parameter(2)\n"
           "  c = f32[%d,%d]{1,0:T(8,128)} copy(t)\n"
           "  ROOT scatter_fusion = f32[%d,%d]{1,0:T(8,128)} fusion(c, i, u), kind=kCustom, calls=fc\n"
           "}\n",
           N, D, M, M, D, N, D, N, D, M, M, D, N, D, N, D);
  return buf;
}

static char g_src[4096];

/* The padded bytes of the indices, s32[512,1] (a row of lanes each). */
static const double g_idx = 512.0 * 128 * 4;

/* Row by row: a scatter of 512 rows into a 25.6 MB f32[50000,128] (more than v5e's 16 MiB
 * of scoped VMEM) moves its rows (updates read, rows read and written back: 3 x 256 KiB)
 * and the indices, not the operand — lone, and as the compiler's kCustom fusion
 * (scatter_add_50257x1024_m16_bf16's scatter_fusion beside its 206 MB copy). */
static void rows_in_place(void) {
  const double rows = 512.0 * 128 * 4, opnd = 50000.0 * 128 * 4;
  double lone = op_bytes("v5e", scatter_src(g_src, sizeof g_src, 50000, 128, 512, 0), "s");
  double fused = op_bytes("v5e", fusion_src(g_src, sizeof g_src, 50000, 128, 512), "scatter_fusion");
  printf("row by row: lone %.0f B, fused %.0f B (rows %.0f B, operand %.0f B)\n", lone, fused, rows, opnd);
  CHECK_NEAR(lone, 3 * rows + g_idx, 0);
  CHECK_NEAR(fused, 3 * rows + g_idx, 0);
}

/* Staged: 512 rows into a 512 KB f32[1000,128] (the compiler reserves (1000 + 512) rows of
 * VMEM for it): the operand is read and written whole, the updates read once. One update
 * is a dynamic-update-slice (ScatterExpander): its row alone, whatever the operand. */
static void staged_whole(void) {
  const double rows = 512.0 * 128 * 4, opnd = 1000.0 * 128 * 4;
  double lone = op_bytes("v5e", scatter_src(g_src, sizeof g_src, 1000, 128, 512, 0), "s");
  double fused = op_bytes("v5e", fusion_src(g_src, sizeof g_src, 1000, 128, 512), "scatter_fusion");
  double one = op_bytes("v5e", scatter_src(g_src, sizeof g_src, 1000, 128, 1, 0), "s");
  printf("staged: lone %.0f B, fused %.0f B, one update %.0f B\n", lone, fused, one);
  CHECK_NEAR(lone, 2 * opnd + rows + g_idx, 0);
  CHECK_NEAR(fused, 2 * opnd + rows + g_idx, 0);
  CHECK(one > 0 && one <= 4 * 8 * 128 * 4);
}

/* Staged onto a broadcast scalar (a segment sum's zeros): the kernel fills its VMEM
 * operand, reads none of it (the compiler fuses the broadcast into its scatter kernel). */
static void staged_fill(void) {
  const double rows = 512.0 * 128 * 4, opnd = 1000.0 * 128 * 4;
  double zeros = op_bytes("v5e", scatter_src(g_src, sizeof g_src, 1000, 128, 512, 1), "s");
  printf("staged onto zeros: %.0f B\n", zeros);
  CHECK_NEAR(zeros, opnd + rows + g_idx, 0);
}

/* Where the compiler stops staging (v5e, f32 D=128, M=512: 30,541 rows staged, 30,546 row
 * by row; libtpu probes): 30,000 rows staged, 31,000 row by row; v6e's 32 MiB stages both
 * (the compiler's v6e scatter_add_50257x128_m4096_bf16 stages its 25.7 MB operand), and
 * of D=768 9,600 rows but not 9,650 (probes: 9,619 staged, 9,626 row by row; the room
 * beside the operand is 1/40 of the scoped VMEM, 819 KiB there). */
static void stage_limit(void) {
  const double rows = 512.0 * 128 * 4, rows768 = 512.0 * 768 * 4;
  double d = op_bytes("v6e", scatter_src(g_src, sizeof g_src, 9600, 768, 512, 0), "s");
  double e = op_bytes("v6e", scatter_src(g_src, sizeof g_src, 9650, 768, 512, 0), "s");
  printf("v6e D=768: 9600 rows %.0f B, 9650 rows %.0f B\n", d, e);
  CHECK_NEAR(d, 2 * 9600.0 * 3072 + rows768 + g_idx, 0);
  CHECK_NEAR(e, 3 * rows768 + g_idx, 0);
  double a = op_bytes("v5e", scatter_src(g_src, sizeof g_src, 30000, 128, 512, 0), "s");
  double b = op_bytes("v5e", scatter_src(g_src, sizeof g_src, 31000, 128, 512, 0), "s");
  double c = op_bytes("v6e", scatter_src(g_src, sizeof g_src, 31000, 128, 512, 0), "s");
  printf("v5e 30000 rows %.0f B, 31000 rows %.0f B; v6e 31000 rows %.0f B\n", a, b, c);
  CHECK_NEAR(a, 2 * 30000.0 * 512 + rows + g_idx, 0);
  CHECK_NEAR(b, 3 * rows + g_idx, 0);
  CHECK_NEAR(c, 2 * 31000.0 * 512 + rows + g_idx, 0);
}

/* A compiled program's in-place update of a parameter it may not overwrite, whose copy goes
 * through on-chip memory (v4: copy into CMEM S(3), copy-start / copy-done back, the
 * dynamic-update-slice into that): the parameter is still copied whole (the compiler's
 * copy.3 of scatter_set_50257x128_m1_bf16, 116,948 cycles on v4); tpusim's simplify drops
 * the copy into S(3), and param_copy copies the parameter for the update as it does one read
 * directly (was: no copy at all, -98 %). */
static void update_through_onchip_copy(void) {
  const char *src =
      "HloModule u\n"
      "ENTRY e {\n"
      "  t = f32[4096,128]{1,0:T(8,128)} parameter(0)\n"
      "  u = f32[8,128]{1,0:T(8,128)} parameter(1)\n"
      "  z = s32[]{:T(128)} constant(0)\n"
      "  c = f32[4096,128]{1,0:T(8,128)S(3)} copy(t)\n"
      "  cs = (f32[4096,128]{1,0:T(8,128)}, f32[4096,128]{1,0:T(8,128)S(3)}, u32[]{:S(2)}) copy-start(c)\n"
      "  cd = f32[4096,128]{1,0:T(8,128)} copy-done(cs)\n"
      "  ROOT d = f32[4096,128]{1,0:T(8,128)} dynamic-update-slice(cd, u, z, z)\n"
      "}\n";
  tpu_module *m = NULL;
  tpu_program *p = compile_for_with("v4", src, 1, &g_chip, &m);
  if (p) {
    int i = op_named(p, "copy.param");
    printf("update through CMEM: copy.param %s\n", i >= 0 ? "made" : "missing");
    CHECK(i >= 0);
    if (i >= 0) CHECK_NEAR(p->ops[i].padded_bytes, 2.0 * 4096 * 128 * 4, 0);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* One update into a parameter the program may not overwrite (bf16[8192,128], 2 MiB): the
 * compiler copies it whole, and on a one-TensorCore chip without CMEM (v5e, v6e) that copy
 * goes into VMEM (its compiled scatter_set_50257x128_m1_bf16's copy.3 into S(1), no kernel,
 * no estimate), the DMA engines' transfers in and back out: no kernel start, no 16-bit
 * stream pass, twice its bytes at the HBM rate. Elsewhere (v5p: HBM, v4: CMEM) and for a
 * copy only its in-place update reads (every dus_cache_*: a dynamic-update-slice of a new
 * value), it stays a vector kernel. */
static int64_t copy_cycles(const char *chip, const char *src, int *dma) {
  tpu_module *m = NULL;
  tpu_program *p = compile_for_with(chip, src, 1, &g_chip, &m);
  int64_t cyc = -1;
  *dma = -1;
  int i = p ? op_named(p, "copy.param") : -1;
  CHECK(i >= 0);
  tpu_timeline tl;
  if (i >= 0 && time_program(p, &g_chip, &tl)) {
    *dma = p->ops[i].dma;
    cyc = tl.ops[i].cycles;
    tpu_timeline_free(&tl);
  }
  tpu_program_free(p);
  tpu_module_free(m);
  return cyc;
}

static void one_update_copy_via_vmem(void) {
  const char *one =
      "HloModule o\n"
      "add { a = bf16[] parameter(0)\n b = bf16[] parameter(1)\n ROOT r = bf16[] add(a, b) }\n"
      "ENTRY e {\n"
      "  t = bf16[8192,128]{1,0} parameter(0)\n"
      "  i = s32[1,1]{1,0} parameter(1)\n"
      "  u = bf16[1,128]{1,0} parameter(2)\n"
      "  ROOT s = bf16[8192,128]{1,0} scatter(t, i, u), update_window_dims={1}, inserted_window_dims={0},"
      " scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n"
      "}\n";
  const char *dus =
      "HloModule d\n"
      "ENTRY e {\n"
      "  t = bf16[8192,128]{1,0} parameter(0)\n"
      "  u = bf16[1,128]{1,0} parameter(1)\n"
      "  z = s32[] parameter(2)\n"
      "  c = s32[] constant(0)\n"
      "  ROOT d = bf16[8192,128]{1,0} dynamic-update-slice(t, u, z, c)\n"
      "}\n";
  const double bytes = 8192.0 * 128 * 2;
  int d5e, d6e, d5p, d4, ddus;
  int64_t c5e = copy_cycles("v5e", one, &d5e);
  double rate = tpu_chip_hbm_stream_bw(&g_chip) / g_chip.clock_hz; /* v5e bytes per cycle */
  const double kov = g_chip.kernel_overhead_s * g_chip.clock_hz;
  int64_t c6e = copy_cycles("v6e", one, &d6e);
  int64_t c5p = copy_cycles("v5p", one, &d5p);
  copy_cycles("v4:core", one, &d4);
  int64_t cdus = copy_cycles("v5e", dus, &ddus);
  printf("one update's copy: v5e %lld cycles (dma %d; 2 x bytes at the HBM rate %.0f), v6e %lld (dma %d), "
         "v5p %lld (dma %d), v4 dma %d; a dynamic-update-slice's on v5e %lld (dma %d)\n",
         (long long)c5e, d5e, 2 * bytes / rate, (long long)c6e, d6e, (long long)c5p, d5p, d4, (long long)cdus, ddus);
  CHECK(d5e == 1 && d6e == 1 && d5p == 0 && d4 == 0 && ddus == 0);
  /* the transfers and one HBM latency, less than a kernel start more */
  CHECK((double)c5e >= 2 * bytes / rate && (double)c5e < 2 * bytes / rate + kov);
  CHECK(cdus > c5e * 3 / 2); /* the kernel copy: its start and the 16-bit stream pass */
}

/* One value returned in two output leaves (a scan step's `(c + x, c + x)` after CSE): XLA's
 * copy insertion copies the second leaf (param_copy.c copy_repeated), on v5e and v6e a DMA
 * out of VMEM with no kernel and no estimate, on v5p and v4 a vector kernel about as long as
 * the product's (libtpu, bench/fidelity/probes/dup_output.py: f32[64,512] copy.1 v5p 2,319
 * against 2,420 cycles, v4 910 against 1,815; cumsum_scan_step_b8d256). A leaf of another
 * value gets no copy. */
static void dup_output_copy(void) {
  static const char *src =
      "HloModule d\n"
      "ENTRY e {\n"
      "  a = f32[64,512]{1,0} parameter(0)\n"
      "  b = f32[64,512]{1,0} parameter(1)\n"
      "  m = f32[64,512]{1,0} multiply(a, b)\n"
      "  s = f32[64,512]{1,0} subtract(a, b)\n"
      "  ROOT t = (f32[64,512]{1,0}, f32[64,512]{1,0}, f32[64,512]{1,0}) tuple(m, s, m)\n"
      "}\n";
  const char *chips[] = {"v5e", "v6e", "v5p", "v4:core"};
  for (int c = 0; c < 4; c++) {
    tpu_module *m = NULL;
    tpu_program *p = compile_for_with(chips[c], src, 1, &g_chip, &m);
    int copies = 0, ci = -1, mi = -1;
    for (int i = 0; p && i < p->nops; i++) {
      if (p->ops[i].kind && !strcmp(p->ops[i].kind, "copy")) copies++, ci = i;
      if (p->ops[i].kind && !strcmp(p->ops[i].kind, "multiply")) mi = i;
    }
    tpu_timeline tl;
    if (p && ci >= 0 && mi >= 0 && time_program(p, &g_chip, &tl)) {
      const double kov = g_chip.kernel_overhead_s * g_chip.clock_hz;
      long long cc = (long long)tl.ops[ci].cycles, mc = (long long)tl.ops[mi].cycles;
      printf("%s: %d copy (dma %d) %lld cycles, the product %lld\n", chips[c], copies, p->ops[ci].dma, cc, mc);
      if (c < 2) CHECK(p->ops[ci].dma == 1 && (double)cc < kov);
      else CHECK(p->ops[ci].dma == 0 && cc * 2 >= mc && cc <= mc * 3 / 2);
      tpu_timeline_free(&tl);
    }
    CHECK(copies == 1 && mi >= 0);
    tpu_program_free(p);
    tpu_module_free(m);
  }
}

/* A compiled program returning one value twice, an asynchronous copy-start for one leaf and a
 * `copy` out of the value's memory space (CMEM S(3) on v4, VMEM S(1) elsewhere) for the other
 * (the LSTM/GRU steps' copy.1): the copy is no identity (simplify keeps it). On v4 and v5p
 * the compiler runs it as a vector kernel with its estimated_cycles (bf16[16,512]: v4 719,
 * v5p 2,154, compiled gru_step_b16i512h512); on v5e and v6e the DMA engines write it from
 * VMEM, no kernel, no estimated_cycles (copy_kind.c tpu__dup_output_copy). So is a leaf
 * copied out of VMEM alone (opt_lion_...'s copy.20 on v5e and v6e). */
static void compiled_output_copy(void) {
  static const char *fmt =
      "HloModule c\n"
      "ENTRY e {\n"
      "  a = bf16[16,512]{1,0:T(8,128)(2,1)} parameter(0)\n"
      "  b = bf16[16,512]{1,0:T(8,128)(2,1)} parameter(1)\n"
      "  m = bf16[16,512]{1,0:T(8,128)(2,1)S(%d)} multiply(a, b)\n"
      "  cs = (bf16[16,512]{1,0:T(8,128)(2,1)}, bf16[16,512]{1,0:T(8,128)(2,1)S(%d)}, u32[]{:S(2)}) copy-start(m)\n"
      "  c1 = bf16[16,512]{1,0:T(8,128)(2,1)} copy(m)\n"
      "  cd = bf16[16,512]{1,0:T(8,128)(2,1)} copy-done(cs)\n"
      "  ROOT t = (bf16[16,512]{1,0:T(8,128)(2,1)}, bf16[16,512]{1,0:T(8,128)(2,1)}) tuple(%s)\n"
      "}\n";
  const char *chips[] = {"v5e", "v6e", "v5p", "v4:core"};
  for (int c = 0; c < 4; c++)
    for (int alone = 0; alone < 2; alone++) {
      char src[1400];
      int sp = c == 3 ? 3 : 1;
      snprintf(src, sizeof src, fmt, sp, sp, alone ? "a, c1" : "cd, c1");
      tpu_module *m = NULL;
      tpu_program *p = compile_for_with(chips[c], src, 1, &g_chip, &m);
      int ci = p ? op_named(p, "c1") : -1, mi = p ? op_named(p, "m") : -1;
      tpu_timeline tl;
      if (p && ci >= 0 && mi >= 0 && time_program(p, &g_chip, &tl)) {
        const double kov = g_chip.kernel_overhead_s * g_chip.clock_hz;
        long long cc = (long long)tl.ops[ci].cycles, mc = (long long)tl.ops[mi].cycles;
        printf("%s%s: copy out of S(%d) (dma %d) %lld cycles, the product %lld\n", chips[c], alone ? " (alone)" : "", sp,
               p->ops[ci].dma, cc, mc);
        if (c < 2) CHECK(p->ops[ci].dma == 1 && (double)cc < kov);
        else CHECK(p->ops[ci].dma == 0 && (double)cc >= kov && (alone || cc <= mc * 3 / 2));
        tpu_timeline_free(&tl);
      }
      CHECK(ci >= 0 && mi >= 0);
      tpu_program_free(p);
      tpu_module_free(m);
    }
}

/* A segment sum (a scatter-add onto a broadcast of zeros, its indices s32[16] reshaped to
 * s32[16,1]) runs as one kernel: the XLA TPU compiler's kCustom scatter fusion takes in the
 * broadcast, which it fills its VMEM operand with, and the reshape of its indices
 * (segment_sum_m16x64_n197_bf16's scatter_custom_fusion on every generation); no kernel of
 * their own. A reshape something else reads too stays a kernel. */
static void segment_sum_one_kernel(void) {
  static const char *fmt =
      "HloModule g\n"
      "add { a = bf16[] parameter(0)\n b = bf16[] parameter(1)\n ROOT r = bf16[] add(a, b) }\n"
      "ENTRY e {\n"
      "  u = bf16[16,64]{1,0} parameter(0)\n"
      "  i = s32[16]{0} parameter(1)\n"
      "  z = bf16[] constant(0)\n"
      "  zb = bf16[197,64]{1,0} broadcast(z), dimensions={}\n"
      "  ix = s32[16,1]{1,0} reshape(i)\n"
      "  s = bf16[197,64]{1,0} scatter(zb, ix, u), update_window_dims={1}, inserted_window_dims={0},"
      " scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n"
      "%s}\n";
  char src[1200];
  const char *alone = "  ROOT t = (bf16[197,64]{1,0}) tuple(s)\n";
  const char *shared = "  n = s32[16,1]{1,0} negate(ix)\n  ROOT t = (bf16[197,64]{1,0}, s32[16,1]{1,0}) tuple(s, n)\n";
  const char *chips[] = {"v5e", "v4:core"};
  for (int c = 0; c < 2; c++)
    for (int k = 0; k < 2; k++) {
      snprintf(src, sizeof src, fmt, k ? shared : alone);
      tpu_module *m = NULL;
      tpu_program *p = compile_for_with(chips[c], src, 1, &g_chip, &m);
      int zb = p ? op_named(p, "zb") : -2, ix = p ? op_named(p, "ix") : -2, sc = p ? op_named(p, "s") : -2;
      printf("segment sum on %s%s: broadcast op %d, reshape op %d, scatter op %d\n", chips[c],
             k ? " (indices read twice)" : "", zb, ix, sc);
      CHECK(sc >= 0 && zb == -1);
      CHECK(k ? ix >= 0 : ix == -1);
      tpu_program_free(p);
      tpu_module_free(m);
    }
}

/* A compiled program's top-level dynamic-update-slice (in place, no window_config: the
 * compiler gives none of the 20 in its v5e families programs an estimate, e.g.
 * scatter_add_1000x128_m1_f32's ROOT dynamic-update-slice.1 of one row) is a DMA of the
 * update, no kernel start; tpusim's own compilation's stays a kernel. */
static void compiled_dus_dma(void) {
  static const char *compiled =
      "HloModule c, is_scheduled=true\n"
      "ENTRY e {\n"
      "  t = f32[1000,128]{1,0:T(8,128)} parameter(0)\n"
      "  u = f32[1,128]{1,0:T(1,128)} parameter(1)\n"
      "  i = s32[]{:T(128)} parameter(2)\n"
      "  z = s32[]{:T(128)} constant(0)\n"
      "  ROOT d = f32[1000,128]{1,0:T(8,128)} dynamic-update-slice(t, u, i, z)\n"
      "}\n";
  static const char *own =
      "HloModule o\n"
      "ENTRY e {\n"
      "  t = f32[1000,128]{1,0} parameter(0)\n"
      "  u = f32[1,128]{1,0} parameter(1)\n"
      "  i = s32[] parameter(2)\n"
      "  z = s32[] constant(0)\n"
      "  ROOT d = f32[1000,128]{1,0} dynamic-update-slice(t, u, i, z)\n"
      "}\n";
  int dma[2] = {-1, -1};
  int64_t cyc[2] = {-1, -1};
  for (int k = 0; k < 2; k++) {
    tpu_module *m = NULL;
    tpu_program *p = compile_for_with("v5e", k ? own : compiled, 1, &g_chip, &m);
    int i = p ? op_named(p, "d") : -1;
    CHECK(i >= 0);
    tpu_timeline tl;
    if (i >= 0 && time_program(p, &g_chip, &tl)) {
      dma[k] = p->ops[i].dma;
      cyc[k] = tl.ops[i].cycles;
      tpu_timeline_free(&tl);
    }
    tpu_program_free(p);
    tpu_module_free(m);
  }
  const double kov = g_chip.kernel_overhead_s * g_chip.clock_hz;
  printf("top-level dynamic-update-slice on v5e: compiled %lld cycles (dma %d), own %lld (dma %d), kernel start %.0f\n",
         (long long)cyc[0], dma[0], (long long)cyc[1], dma[1], kov);
  CHECK(dma[0] == 1 && dma[1] == 0);
  CHECK(cyc[0] >= 0 && (double)cyc[0] < kov); /* no kernel start */
}

int main(void) {
  rows_in_place();
  staged_whole();
  staged_fill();
  stage_limit();
  update_through_onchip_copy();
  one_update_copy_via_vmem();
  segment_sum_one_kernel();
  compiled_dus_dma();
  dup_output_copy();
  compiled_output_copy();
  CHECK_DONE();
}
