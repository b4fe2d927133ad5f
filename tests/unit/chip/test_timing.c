/* The timing executor against closed forms: MXU tile model, DMA bytes/bandwidth + latency,
 * memory-bound elementwise at HBM bandwidth, compute-bound matmul near peak, precision
 * passes, conditionals, determinism. */
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

/* The matmul of program p (its last matmul instruction) and its tile-loop iterations. */
static const tpu_insn *the_matmul(const tpu_program *p, int64_t *tiles) {
  const tpu_insn *mm = NULL;
  for (int i = 0; i < p->ninsns; i++)
    if (p->insns[i].opc == TPU_ISA_MATMUL) mm = &p->insns[i];
  *tiles = mm && mm->op >= 0 ? p->ops[mm->op].tiles : 0;
  return mm;
}

/* MXU cycles of one block on v5e's 4 MXUs of 128 x 128: the N column tiles split over
 * the MXUs first, leftover MXUs split M (docs/timing.md), then the tile model. */
static int64_t block_cycles(const tpu_insn *mm) {
  int64_t ntiles = (mm->n + 127) / 128, sn = ntiles < 4 ? ntiles : 4, sm = 4 / sn;
  int64_t m1 = (mm->m + sm - 1) / sm, n1 = (mm->n + sn - 1) / sn;
  tpu_mxu_cycles mc;
  tpu_diag d;
  if (tpu_mxu_tile_cycles(128, 128, m1, mm->k, mm->b * ((n1 + 127) / 128) * 128, TPU_WLOAD_DOUBLE, &mc, &d) != TPU_OK)
    return -1;
  return mc.weight_load + mc.stream;
}

static void dot_matches_tile_model(void) {
  /* 1024^3 bf16 -> f32 on v5e: every operand panel fits VMEM, so the blocking reads each
   * operand once and writes the output once, and it pipelines (several tiles). */
  tpu_program *p = compile_src(
      "HloModule d\nENTRY e {\n  a = bf16[1024,1024] parameter(0)\n  b = bf16[1024,1024] parameter(1)\n"
      "  ROOT c = f32[1024,1024] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
      &g_v5e, -1);
  CHECK(p != NULL);
  if (!p) return;
  tpu_timeline tl;
  tpu_diag d;
  CHECK(tpu_timing_run(p, &g_v5e, 1, &tl, &d) == TPU_OK);
  int64_t tiles = 0;
  const tpu_insn *mm = the_matmul(p, &tiles);
  CHECK(mm != NULL && tiles > 1);
  if (mm) CHECK_EQ_INT(tl.busy[TPU_UNIT_MXU], tiles * block_cycles(mm));
  /* Closed form of the bytes: A and B once, the f32 output once. */
  CHECK_NEAR(tl.hbm_bytes, 2.0 * 1024 * 1024 * 2 + 4.0 * 1024 * 1024, 0);
  /* Faster than the same problem as one unpipelined block: in, compute, out in sequence. */
  tpu_mxu_cycles mc;
  CHECK(tpu_mxu_tile_cycles(128, 128, 1024, 1024, 1024 / 4, TPU_WLOAD_DOUBLE, &mc, &d) == TPU_OK);
  double bpc = g_v5e.hbm_bw / g_v5e.clock_hz;
  int64_t in_a = (int64_t)ceil(2.0 * 1024 * 1024 / bpc), out = (int64_t)ceil(4.0 * 1024 * 1024 / bpc);
  int64_t serial = 2 * in_a + hbm_lat(&g_v5e) + mc.weight_load + mc.stream + out;
  CHECK(tl.total_cycles < serial);
  /* ... and never faster than its MXU work or its DMA time. */
  CHECK(tl.total_cycles >= tl.busy[TPU_UNIT_MXU]);
  CHECK(tl.total_cycles >= 2 * in_a + out);
  printf("1024^3 bf16 on v5e: %lld tiles, %lld cycles (one serial block: %lld)\n", (long long)tiles,
         (long long)tl.total_cycles, (long long)serial);
  CHECK_NEAR(tl.flops, 2.0 * 1024 * 1024 * 1024, 0);
  CHECK(tl.nevents > 0);
  /* Events cover every unit's busy cycles. */
  int64_t ev_mxu = 0;
  for (int64_t i = 0; i < tl.nevents; i++)
    if (tl.events[i].unit == TPU_UNIT_MXU) ev_mxu += tl.events[i].end - tl.events[i].start;
  CHECK_EQ_INT(ev_mxu, tl.busy[TPU_UNIT_MXU]);
  tpu_timeline_free(&tl);
  tpu_program_free(p);
}

static void precision_passes(void) {
  const char *src =
      "HloModule d\nENTRY e {\n  a = f32[512,512] parameter(0)\n  b = f32[512,512] parameter(1)\n"
      "  ROOT c = f32[512,512] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  /* The blocking may differ per precision (the cost model weighs the MXU time); each is
   * tiles x passes x the tile model of its block. */
  static const int passes[3] = {1, 3, 6};
  for (int prec = 0; prec < 3; prec++) {
    tpu_program *p = compile_src(src, &g_v5e, prec);
    CHECK(p != NULL);
    if (!p) return;
    tpu_timeline tl;
    tpu_diag d;
    CHECK(tpu_timing_run(p, &g_v5e, 0, &tl, &d) == TPU_OK);
    int64_t tiles = 0;
    const tpu_insn *mm = the_matmul(p, &tiles);
    CHECK(mm != NULL);
    if (mm) {
      CHECK_EQ_INT(mm->passes, passes[prec]);
      CHECK_EQ_INT(tl.busy[TPU_UNIT_MXU], tiles * passes[prec] * block_cycles(mm));
    }
    tpu_timeline_free(&tl);
    tpu_program_free(p);
  }
}

static void copy_closed_form(void) {
  tpu_program *p = compile_src(
      "HloModule c\nENTRY e {\n  a = f32[4096,4096] parameter(0)\n  ROOT c = f32[4096,4096] copy(a)\n}\n",
      &g_v5e, -1);
  CHECK(p != NULL);
  if (!p) return;
  tpu_timeline tl;
  tpu_diag d;
  CHECK(tpu_timing_run(p, &g_v5e, 0, &tl, &d) == TPU_OK);
  double bytes = 2.0 * 4096 * 4096 * 4; /* read and write */
  int64_t want = (int64_t)ceil(bytes / (g_v5e.hbm_bw / g_v5e.clock_hz)) + hbm_lat(&g_v5e);
  CHECK_EQ_INT(tl.total_cycles, want);
  CHECK_NEAR(tl.hbm_bytes, bytes, 0);
  CHECK(tl.ops[0].memory_bound);
  tpu_timeline_free(&tl);
  tpu_program_free(p);
}

static void elementwise_at_hbm_bandwidth(void) {
  tpu_program *p = compile_src(
      "HloModule a\nENTRY e {\n  a = f32[8192,8192] parameter(0)\n  b = f32[8192,8192] parameter(1)\n"
      "  ROOT c = f32[8192,8192] add(a, b)\n}\n",
      &g_v5e, -1);
  CHECK(p != NULL);
  if (!p) return;
  tpu_timeline tl;
  tpu_diag d;
  CHECK(tpu_timing_run(p, &g_v5e, 0, &tl, &d) == TPU_OK);
  double bytes = 3.0 * 8192 * 8192 * 4;
  double ideal = bytes / (g_v5e.hbm_bw / g_v5e.clock_hz);
  printf("elementwise add 3 x 256 MiB: %lld cycles, bytes/bandwidth %.0f (%.3f%% over)\n",
         (long long)tl.total_cycles, ideal, 100.0 * ((double)tl.total_cycles / ideal - 1));
  CHECK(tl.total_cycles >= ideal);
  CHECK(tl.total_cycles <= ideal * 1.01);
  CHECK(tl.ops[0].memory_bound);
  CHECK(tl.hbm_wait_cycles > 0);
  tpu_timeline_free(&tl);
  tpu_program_free(p);
}

static void matmul_near_peak(void) {
  tpu_program *p = compile_src(
      "HloModule m\nENTRY e {\n  a = bf16[8192,8192] parameter(0)\n  b = bf16[8192,8192] parameter(1)\n"
      "  ROOT c = bf16[8192,8192] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
      &g_v5e, -1);
  CHECK(p != NULL);
  if (!p) return;
  tpu_timeline tl;
  tpu_diag d;
  CHECK(tpu_timing_run(p, &g_v5e, 0, &tl, &d) == TPU_OK);
  double peak = 2.0 * tpu_chip_macs_per_cycle(&g_v5e) * g_v5e.clock_hz;
  double achieved = tl.flops / ((double)tl.total_cycles / g_v5e.clock_hz);
  printf("8192^3 bf16 on v5e: %lld cycles, %.1f%% of peak\n", (long long)tl.total_cycles,
         100.0 * achieved / peak);
  CHECK(achieved >= 0.90 * peak);
  CHECK(achieved <= peak);
  CHECK(!tl.ops[0].memory_bound);
  /* Timing never looks at values: a second run is identical. */
  tpu_timeline t2;
  CHECK(tpu_timing_run(p, &g_v5e, 1, &t2, &d) == TPU_OK);
  CHECK_EQ_INT(t2.total_cycles, tl.total_cycles);
  for (int u = 0; u < TPU_UNIT_COUNT; u++) CHECK_EQ_INT(t2.busy[u], tl.busy[u]);
  tpu_timeline_free(&t2);
  tpu_timeline_free(&tl);
  tpu_program_free(p);
}

static void pipeline_and_cond(void) {
  /* A double-buffered stream loop: 10 loads of 1000 cycles each (longer than the HBM
   * latency, so two buffers hide it) and 10 VPU steps of 30 cycles. Loads run back to back
   * on the HBM port; each compute waits for its load plus the latency; the last compute
   * ends the program. */
  double bpc = g_v5e.hbm_bw / g_v5e.clock_hz;
  int64_t bytes = (int64_t)floor(bpc * 1000);
  int64_t tload = (int64_t)ceil((double)bytes / bpc);
  char text[2000];
  snprintf(text, sizeof text,
           ".program chip=\"v5e\"\n.op name=\"x\" kind=\"add\" flops=1 padded_flops=1 bytes=0 padded_bytes=0\n"
           ".vmem op=0 offset=0 slot_bytes=%lld slots=2\n.vmem op=0 offset=0 slot_bytes=4096 slots=2\n"
           "kernel op=0\ndma.in dst=v0[0] bytes=%lld op=0\nloop trips=9 op=0\n"
           "  dma.in dst=v0[i+1] bytes=%lld op=0\n  vpu src=v0[i] dst=v1[i] vregs=30 ops=1 op=0\nend\n"
           "vpu src=v0[1] dst=v1[1] vregs=30 ops=1 op=0\n",
           (long long)bytes, (long long)bytes, (long long)bytes);
  tpu_program *p = assemble(text);
  CHECK(p != NULL);
  if (!p) return;
  tpu_timeline tl;
  tpu_diag d;
  CHECK(tpu_timing_run(p, &g_v5e, 0, &tl, &d) == TPU_OK);
  CHECK_EQ_INT(tl.total_cycles, 10 * tload + hbm_lat(&g_v5e) + 30);
  CHECK_EQ_INT(tl.busy[TPU_UNIT_VPU], 300);
  CHECK_EQ_INT(tl.busy[TPU_UNIT_DMA_IN], 10 * tload);
  CHECK_EQ_INT(tl.ops[0].count, 1);
  tpu_timeline_free(&tl);
  tpu_program_free(p);

  /* cond: the costlier branch counts (an upper bound). */
  p = assemble(
      ".program chip=\"v5e\"\n.op name=\"a\" kind=\"x\" flops=0 padded_flops=0 bytes=0 padded_bytes=0\n"
      "cond trips=2 what=\"c\"\ncase trips=0\nkernel op=0\nvpu vregs=10 ops=1 op=0\n"
      "case trips=1\nkernel op=0\nvpu vregs=70 ops=2 op=0\nendcond\n");
  CHECK(p != NULL);
  if (!p) return;
  CHECK(tpu_timing_run(p, &g_v5e, 1, &tl, &d) == TPU_OK);
  CHECK_EQ_INT(tl.total_cycles, 140);
  CHECK_EQ_INT(tl.busy[TPU_UNIT_VPU], 140);
  CHECK_EQ_INT(tl.ops[0].count, 1);
  CHECK_EQ_INT(tl.nevents, 1);
  tpu_timeline_free(&tl);
  tpu_program_free(p);

  /* Events stop at the cap; the totals do not. */
  p = assemble(
      ".program chip=\"v5e\"\n.op name=\"a\" kind=\"x\" flops=0 padded_flops=0 bytes=0 padded_bytes=0\n"
      "kernel op=0\nloop trips=1200000\nvpu vregs=1 ops=2 op=0\nend\n");
  CHECK(p != NULL);
  if (!p) return;
  CHECK(tpu_timing_run(p, &g_v5e, 1, &tl, &d) == TPU_OK);
  CHECK_EQ_INT(tl.nevents, TPU_TIMING_MAX_EVENTS);
  CHECK(tpu_timing_events_truncated(&tl));
  CHECK_EQ_INT(tl.busy[TPU_UNIT_VPU], 2400000);
  CHECK_EQ_INT(tl.total_cycles, 2400000);
  tpu_timeline_free(&tl);
  tpu_program_free(p);

  /* An unknown trip count fails naming the loop; setting it makes the loop time. */
  p = assemble(
      ".program chip=\"v5e\"\n.op name=\"a\" kind=\"x\" flops=0 padded_flops=0 bytes=0 padded_bytes=0\n"
      "loop trips=-1 what=\"while.9\"\nkernel op=0\nvpu vregs=10 ops=1 op=0\nend\n");
  CHECK(p != NULL);
  if (!p) return;
  CHECK(tpu_timing_run(p, &g_v5e, 0, &tl, &d) == TPU_ERR_UNSUPPORTED);
  CHECK(strstr(d.msg, "while.9") != NULL);
  CHECK_EQ_INT(tpu_program_set_loop_trips(p, "while.9", 4), 1);
  CHECK(tpu_timing_run(p, &g_v5e, 0, &tl, &d) == TPU_OK);
  CHECK_EQ_INT(tl.total_cycles, 40);
  CHECK_EQ_INT(tl.ops[0].count, 4);
  CHECK_EQ_INT(tl.ops[0].cycles, 40);
  tpu_timeline_free(&tl);
  tpu_program_free(p);
}

static void megacore_and_int8(void) {
  tpu_chip v4;
  tpu_diag d;
  CHECK(tpu_chip_load("v4", &v4, &d) == TPU_OK);
  v4.hbm_efficiency = v4.kernel_overhead_s = v4.vector_ops_per_cycle = v4.matmul_overhead_s = v4.matmul_base_s = v4.matmul_write_s = v4.eup_pushes_per_cycle = 0;
  /* v4: 2 TensorCores x 4 MXUs as one logical core of 8 MXUs. */
  tpu_insn mm = tpu_insn_make(TPU_ISA_MATMUL, -1);
  mm.m = 1024;
  mm.k = 1024;
  mm.n = 1024;
  mm.b = 1;
  mm.mxus = 8;
  mm.passes = 1;
  mm.dtype = TPU_BF16;
  int64_t c = 0;
  CHECK(tpu_timing_matmul_cycles(&mm, &v4, &c, &d) == TPU_OK);
  tpu_mxu_cycles mc;
  CHECK(tpu_mxu_tile_cycles(128, 128, 1024, 1024, 128, TPU_WLOAD_DOUBLE, &mc, &d) == TPU_OK);
  /* v4 loads a weight tile in mxu_weight_load_cycles (64), not 128: only the first load,
   * W, is exposed when each fold streams 1024 rows */
  CHECK(v4.mxu_weight_load_cycles == 64);
  CHECK_EQ_INT(c, mc.weight_load - 128 + 64 + mc.stream);
  /* a fold of 16 rows exposes W - 16 of each later load, not 128 - 16 */
  mm.m = 8 * 2; /* two M halves would split across MXUs only when N runs out of tiles */
  int64_t c_small = 0;
  CHECK(tpu_timing_matmul_cycles(&mm, &v4, &c_small, &d) == TPU_OK);
  tpu_mxu_cycles ms;
  CHECK(tpu_mxu_tile_cycles(128, 128, 16, 1024, 128, TPU_WLOAD_DOUBLE, &ms, &d) == TPU_OK);
  CHECK_EQ_INT(c_small, 64 + (ms.folds - 1) * (64 - 16) + ms.stream);
  v4.mxu_weight_load_cycles = 0;
  mm.m = 1024;
  CHECK(tpu_timing_matmul_cycles(&mm, &v4, &c, &d) == TPU_OK);
  CHECK_EQ_INT(c, mc.weight_load + mc.stream);
  mm.dtype = TPU_S8;
  mm.mxus = 4;
  int64_t c8 = 0, cb = 0;
  CHECK(tpu_timing_matmul_cycles(&mm, &g_v5e, &c8, &d) == TPU_OK);
  mm.dtype = TPU_BF16;
  CHECK(tpu_timing_matmul_cycles(&mm, &g_v5e, &cb, &d) == TPU_OK);
  CHECK_EQ_INT(c8, (int64_t)ceil((double)cb / g_v5e.int8_rate));
}

/* mxu_batch_spread (v6e): 128 products of 64 x 64 x 64 on 4 MXUs, each MXU streaming 32
 * whole products (64-row folds, each exposing W - 64 of its weight load), not every MXU
 * taking 16 rows of each product (16-row folds exposing W - 16 each). */
static void batch_spread(void) {
  tpu_chip v6e;
  tpu_diag d;
  CHECK(tpu_chip_load("v6e", &v6e, &d) == TPU_OK);
  CHECK(v6e.mxu_batch_spread == 1 && v6e.mxu_rows == 256 && v6e.mxu_weight_load_cycles == 128);
  tpu_insn mm = tpu_insn_make(TPU_ISA_MATMUL, -1);
  mm.m = mm.k = mm.n = 64;
  mm.b = 128;
  mm.mxus = 4;
  mm.passes = 1;
  mm.dtype = TPU_BF16;
  int64_t spread = 0, split = 0;
  CHECK(tpu_timing_matmul_cycles(&mm, &v6e, &spread, &d) == TPU_OK);
  tpu_mxu_cycles ms;
  CHECK(tpu_mxu_tile_cycles(256, 256, 64, 64, 32 * 256, TPU_WLOAD_DOUBLE, &ms, &d) == TPU_OK);
  CHECK_EQ_INT(spread, 128 + (ms.folds - 1) * (128 - 64) + ms.stream);
  v6e.mxu_batch_spread = 0;
  CHECK(tpu_timing_matmul_cycles(&mm, &v6e, &split, &d) == TPU_OK);
  CHECK(tpu_mxu_tile_cycles(256, 256, 16, 64, 128 * 256, TPU_WLOAD_DOUBLE, &ms, &d) == TPU_OK);
  CHECK_EQ_INT(split, 128 + (ms.folds - 1) * (128 - 16) + ms.stream);
  CHECK(spread < split / 3);
  /* one product: nothing to deal out */
  v6e.mxu_batch_spread = 1;
  mm.b = 1;
  CHECK(tpu_timing_matmul_cycles(&mm, &v6e, &spread, &d) == TPU_OK);
  v6e.mxu_batch_spread = 0;
  CHECK(tpu_timing_matmul_cycles(&mm, &v6e, &split, &d) == TPU_OK);
  CHECK_EQ_INT(spread, split);
}

/* Two kernels, assembled: kernel 0 loads (L cycles), computes 5000 VPU cycles and stores
 * (L); kernel 1 loads a weight (h2, prefetch=1) and kernel 0's result (h1), then computes
 * 30 cycles. The weight load takes the port gap during kernel 0's compute, starting at L;
 * the dependent load waits for kernel 0's store, even when marked prefetch (its source's
 * writer), and so does a prefetch whose VMEM overlaps the running kernel's. */
/* Times program p (freed here) on v5e: its total cycles (-1 and a failed check if it does
 * not run); *dma_start, when given, the start of kernel 1's first load. */
static int64_t timed_total(tpu_program *p, int sync, int64_t *dma_start) {
  tpu_timeline tl;
  tpu_diag d;
  int64_t total = -1;
  if (dma_start) *dma_start = -1;
  if (tpu_timing_run(p, &g_v5e, sync, &tl, &d) == TPU_OK) {
    total = tl.total_cycles;
    for (int64_t e = 0; dma_start && e < tl.nevents; e++)
      if (tl.events[e].unit == TPU_UNIT_DMA_IN && tl.events[e].op == 1 && *dma_start < 0) *dma_start = tl.events[e].start;
    tpu_timeline_free(&tl);
  } else {
    CHECK(0);
  }
  tpu_program_free(p);
  return total;
}

static int64_t two_kernels(int pf_weight, int pf_dep, int64_t w_off, int64_t *w_start) {
  double bpc = g_v5e.hbm_bw / g_v5e.clock_hz;
  int64_t bytes = (int64_t)floor(bpc * 1000);
  char text[3000];
  snprintf(text, sizeof text,
           ".program chip=\"v5e\"\n"
           ".op name=\"a\" kind=\"exp\" flops=1 padded_flops=1 bytes=0 padded_bytes=0\n"
           ".op name=\"b\" kind=\"add\" flops=1 padded_flops=1 bytes=0 padded_bytes=0\n"
           ".hbm name=\"x\" offset=0 bytes=%lld\n.hbm name=\"y\" offset=%lld bytes=%lld\n"
           ".hbm name=\"w\" offset=%lld bytes=%lld\n"
           ".vmem op=0 offset=0 slot_bytes=%lld slots=1\n.vmem op=0 offset=%lld slot_bytes=%lld slots=1\n"
           ".vmem op=1 offset=%lld slot_bytes=%lld slots=1\n"
           ".vmem op=1 offset=%lld slot_bytes=%lld slots=1\n"
           ".vmem op=1 offset=%lld slot_bytes=4096 slots=1\n"
           "kernel op=0\ndma.in dst=v0[0] hbm=h0 bytes=%lld op=0\n"
           "vpu src=v0[0] dst=v1[0] vregs=5000 ops=1 op=0\n"
           "dma.out src=v1[0] hbm=h1 bytes=%lld op=0\n"
           "kernel op=1\ndma.in dst=v2[0] hbm=h2 bytes=%lld op=1%s\n"
           "dma.in dst=v3[0] hbm=h1 bytes=%lld op=1%s\n"
           "vpu src=v2[0],v3[0] dst=v4[0] vregs=30 ops=1 op=1\n",
           (long long)bytes, (long long)bytes, (long long)bytes, (long long)(2 * bytes),
           (long long)bytes, (long long)bytes, (long long)bytes, (long long)bytes,
           (long long)w_off, (long long)bytes, (long long)(w_off + bytes), (long long)bytes,
           (long long)(w_off + 2 * bytes), (long long)bytes, (long long)bytes, (long long)bytes,
           pf_weight ? " prefetch=1" : "", (long long)bytes, pf_dep ? " prefetch=1" : "");
  tpu_program *p = assemble(text);
  CHECK(p != NULL);
  if (!p) return -1;
  /* the flag survives the round trip */
  char *t1 = tpu_program_text(p);
  tpu_program *q = t1 ? assemble(t1) : NULL;
  char *t2 = q ? tpu_program_text(q) : NULL;
  CHECK(t1 && t2 && !strcmp(t1, t2));
  CHECK(t1 && (strstr(t1, "prefetch=1") != NULL) == (pf_weight || pf_dep));
  tpu_free(t1);
  tpu_free(t2);
  tpu_program_free(q);
  return timed_total(p, 1, w_start);
}

/* An in-step copy (prefetch=2): kernel 0 loads (L cycles), computes `vregs` VPU cycles and
 * stores (L); kernel 1 copies a whole parameter of `mult` L into its own VMEM buffer and
 * waits for it (the compiler's copy-start / copy-done), then computes 30 cycles. The copy
 * takes the first port gap long enough from the step's start. */
static int64_t in_step_copy(int mult, int vregs, int flag) {
  double bpc = g_v5e.hbm_bw / g_v5e.clock_hz;
  int64_t bytes = (int64_t)floor(bpc * 1000), w = bytes * mult;
  char text[3000];
  snprintf(text, sizeof text,
           ".program chip=\"v5e\"\n"
           ".op name=\"a\" kind=\"exp\" flops=1 padded_flops=1 bytes=0 padded_bytes=0\n"
           ".op name=\"b\" kind=\"dot\" flops=1 padded_flops=1 bytes=0 padded_bytes=0\n"
           ".hbm name=\"x\" offset=0 bytes=%lld\n.hbm name=\"y\" offset=%lld bytes=%lld\n"
           ".hbm name=\"w\" offset=%lld bytes=%lld\n"
           ".vmem op=0 offset=0 slot_bytes=%lld slots=1\n.vmem op=0 offset=%lld slot_bytes=%lld slots=1\n"
           ".vmem op=-1 offset=%lld slot_bytes=%lld slots=1\n.vmem op=1 offset=%lld slot_bytes=4096 slots=1\n"
           "kernel op=0\ndma.in dst=v0[0] hbm=h0 bytes=%lld op=0\n"
           "vpu src=v0[0] dst=v1[0] vregs=%d ops=1 op=0\n"
           "dma.out src=v1[0] hbm=h1 bytes=%lld op=0\n"
           "kernel op=1\ndma.in dst=v2[0] hbm=h2 bytes=%lld op=1%s\nwait at=5\n"
           "vpu dst=v3[0] vregs=30 ops=1 op=1\n",
           (long long)bytes, (long long)bytes, (long long)bytes, (long long)(2 * bytes), (long long)w,
           (long long)bytes, (long long)bytes, (long long)bytes, (long long)(2 * bytes), (long long)w,
           (long long)(2 * bytes + w), (long long)bytes, vregs, (long long)bytes, (long long)w,
           flag ? " prefetch=2" : "");
  tpu_program *p = assemble(text);
  CHECK(p != NULL);
  if (!p) return -1;
  char *t1 = tpu_program_text(p);
  CHECK(t1 && (strstr(t1, "prefetch=2") != NULL) == flag);
  tpu_free(t1);
  return timed_total(p, 0, NULL);
}

static void in_step_copies(void) {
  double bpc = g_v5e.hbm_bw / g_v5e.clock_hz;
  int64_t L = (int64_t)ceil(floor(bpc * 1000) / bpc), lat = hbm_lat(&g_v5e);
  int64_t end0 = 2 * L + lat + 5000;
  /* hidden in the gap while kernel 0 computes: kernel 1 only computes */
  CHECK_EQ_INT(in_step_copy(1, 5000, 1), end0 + 30);
  /* not marked: the copy runs after kernel 0, and kernel 1 waits for it */
  CHECK_EQ_INT(in_step_copy(1, 5000, 0), end0 + L + lat + 30);
  /* longer than the gap: it takes the port after kernel 0's store, as if not marked */
  CHECK_EQ_INT(in_step_copy(8, 5000, 1), end0 + 8 * L + lat + 30);
  CHECK_EQ_INT(in_step_copy(8, 5000, 0), end0 + 8 * L + lat + 30);
  /* a prefetch=2 needs an HBM source and a VMEM destination */
  const char *bad = ".program chip=\"v5e\"\n.op name=\"a\" kind=\"exp\" flops=1 padded_flops=1 bytes=0 padded_bytes=0\n"
                    ".vmem op=0 offset=0 slot_bytes=4096 slots=1\nkernel op=0\ndma.in dst=v0[0] bytes=64 op=0 prefetch=2\n";
  tpu_program *p = NULL;
  tpu_diag d;
  CHECK(tpu_program_parse("t.s", bad, strlen(bad), &p, &d) != TPU_OK);
  CHECK(p == NULL);
  tpu_program_free(p);
}

static void cross_kernel_prefetch(void) {
  double bpc = g_v5e.hbm_bw / g_v5e.clock_hz;
  int64_t bytes = (int64_t)floor(bpc * 1000);
  int64_t L = (int64_t)ceil((double)bytes / bpc), lat = hbm_lat(&g_v5e);
  int64_t end0 = 2 * L + lat + 5000, ws;
  int64_t apart = 4 * bytes; /* kernel 1's buffers lie above kernel 0's */
  /* no prefetch: everything of kernel 1 after kernel 0's store */
  CHECK_EQ_INT(two_kernels(0, 0, apart, &ws), end0 + 2 * L + lat + 30);
  CHECK_EQ_INT(ws, end0);
  /* the weight load starts at L, in the port gap while kernel 0 computes */
  CHECK_EQ_INT(two_kernels(1, 0, apart, &ws), end0 + L + lat + 30);
  CHECK_EQ_INT(ws, L);
  /* a dependent load marked prefetch still waits for its source's writer */
  CHECK_EQ_INT(two_kernels(1, 1, apart, &ws), end0 + L + lat + 30);
  CHECK_EQ_INT(ws, L);
  /* VMEM overlapping the running kernel's: no prefetch */
  CHECK_EQ_INT(two_kernels(1, 0, 0, &ws), end0 + 2 * L + lat + 30);
  CHECK_EQ_INT(ws, end0);

  /* Compiled: dot(dot(x, w1), w2), both results leaving through HBM. The second kernel's
   * weight (w2) loads are marked and start while the first kernel's MXU runs; its loads of
   * d1 are not marked and start after the first kernel's last instruction. */
  const char *src =
      "HloModule t\n\nENTRY e {\n  x = f32[1024,1024]{1,0} parameter(0)\n"
      "  w1 = f32[1024,1024]{1,0} parameter(1)\n  w2 = f32[1024,1024]{1,0} parameter(2)\n"
      "  d1 = f32[1024,1024]{1,0} dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  d2 = f32[1024,1024]{1,0} dot(d1, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  ROOT t = (f32[1024,1024]{1,0}, f32[1024,1024]{1,0}) tuple(d1, d2)\n}\n";
  tpu_program *p = compile_src(src, &g_v5e, -1);
  CHECK(p != NULL);
  if (!p) return;
  int op2 = -1, nw = 0, nd = 0, bad = 0;
  for (int i = 0; i < p->nops; i++)
    if (!strcmp(p->ops[i].name, "d2")) op2 = i;
  for (int i = 0; i < p->ninsns; i++) {
    const tpu_insn *in = &p->insns[i];
    if (in->opc != TPU_ISA_DMA_IN || in->op != op2) continue;
    const char *h = p->hbm[in->hbm].name;
    if (!strcmp(h, "w2")) nw += in->prefetch;
    if (!strcmp(h, "d1")) {
      nd++;
      bad += in->prefetch;
    }
  }
  CHECK(op2 >= 0);
  CHECK(nw >= 1);
  CHECK(nd >= 1);
  CHECK_EQ_INT(bad, 0);
  tpu_timeline tl;
  tpu_diag d;
  CHECK(tpu_timing_run(p, &g_v5e, 1, &tl, &d) == TPU_OK);
  int64_t mxu1_end = 0, first_end = 0, d2_first_load = -1, d2_late = 0, d2_early = 0;
  for (int64_t e = 0; e < tl.nevents; e++) {
    const tpu_event *ev = &tl.events[e];
    if (ev->op != op2 && ev->end > first_end) first_end = ev->end;
    if (ev->op != op2 && ev->unit == TPU_UNIT_MXU && ev->end > mxu1_end) mxu1_end = ev->end;
  }
  for (int64_t e = 0; e < tl.nevents; e++) {
    const tpu_event *ev = &tl.events[e];
    if (ev->op != op2 || ev->unit != TPU_UNIT_DMA_IN) continue;
    if (d2_first_load < 0 || ev->start < d2_first_load) d2_first_load = ev->start;
    if (ev->start < first_end) d2_early++;
    else d2_late++;
  }
  CHECK(d2_first_load >= 0 && d2_first_load < mxu1_end); /* overlaps the first kernel's MXU */
  CHECK_EQ_INT(d2_early, nw);                             /* only the marked loads moved */
  CHECK(d2_late >= nd);
  tpu_timeline_free(&tl);
  tpu_program_free(p);
}

/* hbm_efficiency scales the DMA rate; kernel_overhead_s delays each kernel's first
 * instruction and counts in its window, and a vector kernel that reads nothing from HBM
 * waits the HBM latency too (the compiler times its smallest vector kernels alike wherever
 * their operands live); vector_ops_per_cycle divides VPU work (closed forms on the
 * preset's own values). */
static void calibration_fields(void) {
  tpu_chip c = g_v5e;
  CHECK(c.hbm_efficiency > 0 && c.hbm_efficiency <= 1 && c.kernel_overhead_s > 0);
  CHECK_NEAR(tpu_chip_hbm_stream_bw(&c), c.hbm_bw * c.hbm_efficiency, 1);
  tpu_diag d;
  tpu_timeline tl;
  tpu_program *p = assemble(
      ".program chip=\"v5e\"\n.op name=\"a\" kind=\"x\" flops=0 padded_flops=0 bytes=0 padded_bytes=0\n"
      ".op name=\"b\" kind=\"x\" flops=0 padded_flops=0 bytes=0 padded_bytes=0\n"
      "kernel op=0\nvpu vregs=10 ops=1 op=0\nkernel op=1\nvpu vregs=20 ops=1 op=1\n");
  CHECK(p != NULL);
  if (!p) return;
  int64_t kov = (int64_t)llround(c.kernel_overhead_s * c.clock_hz), lat = hbm_lat(&c);
  CHECK(lat > 0);
  /* the VPU issues vector_ops_per_cycle register operations per cycle */
  CHECK(c.vector_ops_per_cycle >= 1);
  int64_t v10 = (int64_t)ceil(10 / c.vector_ops_per_cycle), v20 = (int64_t)ceil(20 / c.vector_ops_per_cycle);
  CHECK(tpu_timing_run(p, &c, 1, &tl, &d) == TPU_OK);
  CHECK_EQ_INT(tl.total_cycles, 2 * (kov + lat) + v10 + v20);
  CHECK_EQ_INT(tl.ops[0].cycles, kov + lat + v10);
  CHECK_EQ_INT(tl.ops[1].cycles, kov + lat + v20);
  CHECK_EQ_INT(tl.busy[TPU_UNIT_VPU], v10 + v20);
  tpu_timeline_free(&tl);
  tpu_program_free(p);
  /* the EUP takes eup_pushes_per_cycle pushes per cycle, and its pushes and the VPU's
   * operations add up (they share the issue slots), though neither reads the other's result */
  CHECK(c.eup_pushes_per_cycle == 2);
  p = assemble(".program chip=\"v5e\"\n.op name=\"a\" kind=\"x\" flops=0 padded_flops=0 bytes=0 padded_bytes=0\n"
               "kernel op=0\neup vregs=30 ops=1 op=0\nvpu vregs=20 ops=1 op=0\neup vregs=10 ops=1 op=0\n");
  CHECK(p != NULL);
  if (!p) return;
  CHECK(tpu_timing_run(p, &c, 1, &tl, &d) == TPU_OK);
  CHECK_EQ_INT(tl.busy[TPU_UNIT_EUP], 15 + 5);
  CHECK_EQ_INT(tl.total_cycles, kov + lat + 15 + v20 + 5);
  tpu_timeline_free(&tl);
  tpu_program_free(p);
  /* a matmul kernel (its op has an MXU problem) pays matmul_base_s, wherever its data is,
   * and does not wait the latency a vector kernel on chip waits; here only its vector work
   * reads HBM, so it pays no matmul_overhead_s (test_timing_mxu_start pins the MXU's own
   * reads and the writes); a vector kernel that reads HBM waits the latency once */
  int64_t mbase = (int64_t)llround(c.matmul_base_s * c.clock_hz);
  CHECK(mbase > 0);
  int64_t with_dma[2] = {0, 0};
  c.matmul_stream_efficiency = 0; /* the load at the same rate in both */
  c.matmul_resident_no_start = 0; /* (a matmul kernel with no transfer: test_timing_mxu_resident) */
  for (int mm = 0; mm < 2; mm++)
    for (int dma = 0; dma < 2; dma++) {
      char src[700];
      snprintf(src, sizeof src,
               ".program chip=\"v5e\"\n.op name=\"d\" kind=\"dot\" flops=0 padded_flops=0 bytes=0 padded_bytes=0%s\n"
               ".hbm name=\"x\" offset=0 bytes=4096\n.vmem op=0 offset=0 slot_bytes=4096 slots=1\n"
               "kernel op=0\n%svpu vregs=10 ops=1 op=0\n",
               mm ? " m=8 k=8 n=8 b=1 tiles=1" : "", dma ? "dma.in dst=v0[0] hbm=h0 bytes=4096 op=0\n" : "");
      p = assemble(src);
      CHECK(p != NULL);
      if (!p) return;
      CHECK(tpu_timing_run(p, &c, 1, &tl, &d) == TPU_OK);
      if (!dma) CHECK_EQ_INT(tl.total_cycles, kov + (mm ? mbase : lat) + v10); /* on chip */
      else with_dma[mm] = tl.total_cycles;
      if (dma && !mm) /* the latency once: its load, then the VPU */
        CHECK(tl.total_cycles > kov + lat + v10 && tl.total_cycles <= kov + lat + v10 + tl.busy[TPU_UNIT_DMA_IN]);
      tpu_timeline_free(&tl);
      tpu_program_free(p);
    }
  CHECK_EQ_INT(with_dma[1] - with_dma[0], mbase);
  /* a 64 MiB copy: 2 x bytes at the streaming rate + latency, after the kernel's start */
  p = compile_src("HloModule m\nENTRY e {\n  a = f32[4096,4096] parameter(0)\n"
                  "  ROOT c = f32[4096,4096] copy(a)\n}\n", &c, -1);
  CHECK(p != NULL);
  if (p) {
    CHECK(tpu_timing_run(p, &c, 0, &tl, &d) == TPU_OK);
    double bytes = 2.0 * 4096 * 4096 * 4;
    int64_t want = (int64_t)ceil(bytes / (tpu_chip_hbm_stream_bw(&c) / c.clock_hz)) + hbm_lat(&c) + kov;
    CHECK_NEAR((double)tl.total_cycles, (double)want, 2);
    tpu_timeline_free(&tl);
    tpu_program_free(p);
  }
}

static void stream_costs(void) {
  tpu_chip c = g_v5e;
  CHECK(c.stream_pass_bytes > 0 && c.lone_op_bytes > 0 && c.lone_op_min_bytes > 0 && c.transpose_bytes > 0);
  const double bpc = tpu_chip_hbm_stream_bw(&c) / c.clock_hz, N = 8192.0 * 8192.0;
  const double fixed = (double)hbm_lat(&c) + (double)llround(c.kernel_overhead_s * c.clock_hz);
  int nk = 0;
  struct {
    const char *what, *src;
    double bytes, extra; /* per element */
  } cases[] = {
      {"fused f32 scale: its bytes only",
       "HloModule m\nf { a = f32[8192,8192] parameter(0)\n t = f32[] constant(2)\n"
       " b = f32[8192,8192] broadcast(t), dimensions={}\n m = f32[8192,8192] multiply(a, b)\n"
       " ROOT r = f32[8192,8192] add(m, b) }\nENTRY e {\n a = f32[8192,8192] parameter(0)\n"
       " ROOT r = f32[8192,8192] fusion(a), kind=kLoop, calls=f\n}\n", 8, 0},
      {"fused bf16 scale: one stream pass for the 16-bit result",
       "HloModule m\nf { a = bf16[8192,8192] parameter(0)\n t = bf16[] constant(2)\n"
       " b = bf16[8192,8192] broadcast(t), dimensions={}\n m = bf16[8192,8192] multiply(a, b)\n"
       " ROOT r = bf16[8192,8192] add(m, b) }\nENTRY e {\n a = bf16[8192,8192] parameter(0)\n"
       " ROOT r = bf16[8192,8192] fusion(a), kind=kLoop, calls=f\n}\n", 4, c.stream_pass_bytes},
      {"fused bf16 scale to s8: one stream pass for the 8-bit result, as for a 16-bit one",
       "HloModule m\nf { a = bf16[8192,8192] parameter(0)\n t = bf16[] constant(2)\n"
       " b = bf16[8192,8192] broadcast(t), dimensions={}\n m = bf16[8192,8192] multiply(a, b)\n"
       " ROOT r = s8[8192,8192] convert(m) }\nENTRY e {\n a = bf16[8192,8192] parameter(0)\n"
       " ROOT r = s8[8192,8192] fusion(a), kind=kLoop, calls=f\n}\n", 3, c.stream_pass_bytes},
      {"fused f32 compare to pred: one stream pass for the 1-byte result",
       "HloModule m\nf { a = f32[8192,8192] parameter(0)\n t = f32[] constant(0)\n"
       " b = f32[8192,8192] broadcast(t), dimensions={}\n"
       " ROOT r = pred[8192,8192] compare(a, b), direction=GT }\nENTRY e {\n a = f32[8192,8192] parameter(0)\n"
       " ROOT r = pred[8192,8192] fusion(a), kind=kLoop, calls=f\n}\n", 5, c.stream_pass_bytes},
      {"lone f32 add of two parameters: the lone-op cost",
       "HloModule m\nENTRY e {\n a = f32[8192,8192] parameter(0)\n b = f32[8192,8192] parameter(1)\n"
       " ROOT r = f32[8192,8192] add(a, b)\n}\n", 12, c.lone_op_bytes},
      {"lone f32 reduce: a stream pass and the lone-op cost",
       "HloModule m\nadd { x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] add(x, y) }\n"
       "ENTRY e {\n a = f32[8192,8192] parameter(0)\n z = f32[] constant(0)\n"
       " ROOT r = f32[8192] reduce(a, z), dimensions={1}, to_apply=add\n}\n",
       4 + 4.0 / 8192, c.stream_pass_bytes + c.lone_op_bytes},
      {"lone f32 broadcast of a constant: the lone-op cost (the XLA TPU compiler's v6e long causal attention "
       "times its two f32[32,4096,4096] ones so)",
       "HloModule m\nENTRY e {\n t = f32[] constant(2)\n"
       " ROOT r = f32[8192,8192] broadcast(t), dimensions={}\n}\n", 4, c.lone_op_bytes},
      {"lone transpose moving the minor dimension",
       "HloModule m\nENTRY e {\n a = f32[8192,8192] parameter(0)\n"
       " ROOT r = f32[8192,8192] transpose(a), dimensions={1,0}\n}\n", 8, c.transpose_bytes},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    double t = stream_time(cases[i].src, &c, &nk);
    double want = N * (cases[i].bytes + cases[i].extra) / bpc + fixed;
    printf("%s: %.0f cycles, closed form %.0f (%+.3f%%)\n", cases[i].what, t, want, 100 * (t / want - 1));
    CHECK(nk == 1);
    CHECK(fabs(t / want - 1) < 0.01);
  }
  /* an in-place update of 16-bit values pays the pass for the elements it writes */
  tpu_program *p = compile_src("HloModule m\nENTRY e {\n a = bf16[8,1024,1024] parameter(0)\n"
                               " u = bf16[1,1024,1024] parameter(1)\n i = s32[] parameter(2)\n z = s32[] constant(0)\n"
                               " ROOT r = bf16[8,1024,1024] dynamic-update-slice(a, u, i, z, z)\n}\n", &c, -1);
  CHECK(p != NULL);
  if (p) {
    double xb = -1;
    for (int i = 0; i < p->nops; i++)
      if (p->ops[i].kind && !strcmp(p->ops[i].kind, "dynamic-update-slice")) xb = p->ops[i].xbytes;
    CHECK_NEAR(xb, c.stream_pass_bytes * 1024 * 1024, 1);
    tpu_program_free(p);
  }
  /* below lone_op_min_bytes an unfused op pays no lone-op cost */
  const char *small = "HloModule m\nENTRY e {\n a = f32[256,1024] parameter(0)\n"
                      " ROOT r = f32[256,1024] negate(a)\n}\n";
  CHECK(2.0 * 256 * 1024 * 4 < (double)c.lone_op_min_bytes);
  double t = stream_time(small, &c, &nk);
  tpu_chip c0 = c;
  c0.lone_op_bytes = 0;
  CHECK(t > 0 && t == stream_time(small, &c0, &nk));
  /* and one over it does */
  const char *big = "HloModule m\nENTRY e {\n a = f32[1024,1024] parameter(0)\n"
                    " ROOT r = f32[1024,1024] negate(a)\n}\n";
  CHECK(2.0 * 1024 * 1024 * 4 >= (double)c.lone_op_min_bytes);
  CHECK(stream_time(big, &c, &nk) > stream_time(big, &c0, &nk) + 0.9 * 1024 * 1024 * c.lone_op_bytes / bpc);
  /* an unfused reduce pays it from fewer bytes (lone_reduce_min_bytes; libtpu v5e: f32[R,1024]
   * summed over its rows costs 22,105 cycles at R = 1200, 39,512 at R = 1280) */
  const char *rfmt = "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
                     "ENTRY e {\n a = f32[%d,1024] parameter(0)\n z = f32[] constant(0)\n"
                     " ROOT r = f32[%d] reduce(a, z), dimensions={1}, to_apply=add\n}\n";
  char rsrc[512];
  CHECK(c.lone_reduce_min_bytes > 0 && c.lone_reduce_min_bytes < c.lone_op_min_bytes);
  snprintf(rsrc, sizeof rsrc, rfmt, 1200, 1200);
  double r_small = stream_time(rsrc, &c, &nk);
  CHECK(r_small > 0 && r_small == stream_time(rsrc, &c0, &nk));
  snprintf(rsrc, sizeof rsrc, rfmt, 1280, 1280);
  double r_big = stream_time(rsrc, &c, &nk), r_big0 = stream_time(rsrc, &c0, &nk);
  printf("f32[1280,1024] row sums: %.0f cycles, %.0f without the lone cost (libtpu 39,512)\n", r_big, r_big0);
  CHECK(r_big > r_big0 + 0.9 * 1280 * 1024 * c.lone_op_bytes / bpc);
}

/* A matmul writing 16-bit results pays the stream pass on them, holding its output
 * transfers but not the HBM port: bf16[8192,64] x bf16[64,512] with a bf16 result is bound
 * by that pass (the XLA TPU compiler: 62,609 cycles on v5e, 45,549 with an f32 result);
 * a compute-bound GEMM is slowed only by the pass of its last result blocks; a memory-bound
 * one lasts at least its input and result transfers end to end (timing.c port_floor_op). */
static void matmul_result_pass(void) {
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[%d,%d] parameter(0)\n w = bf16[%d,%d] parameter(1)\n"
                    " ROOT y = %s[%d,%d] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  char src[512];
  int nk = 0;
  const double bpc = tpu_chip_hbm_stream_bw(&g_v5e) / g_v5e.clock_hz;
  tpu_chip off = g_v5e;
  off.stream_pass_bytes = 0;
  snprintf(src, sizeof src, fmt, 8192, 64, 64, 512, "bf16", 8192, 512);
  double bf = stream_time(src, &g_v5e, &nk), bf_off = stream_time(src, &off, &nk);
  snprintf(src, sizeof src, fmt, 8192, 64, 64, 512, "f32", 8192, 512);
  double f32 = stream_time(src, &g_v5e, &nk);
  /* the pass: 8 MiB of results and stream_pass_bytes per element at the streaming rate */
  double pass = 8192.0 * 512 * (2 + g_v5e.stream_pass_bytes) / bpc;
  printf("bf16[8192,64] x [64,512]: bf16 result %.0f cycles (pass %.0f, without it %.0f), f32 result %.0f\n", bf, pass,
         bf_off, f32);
  CHECK(bf > pass && bf < 1.15 * pass);
  CHECK(f32 < 0.85 * bf);
  CHECK(bf > 1.5 * bf_off);
  /* a chip whose matmul results pay a pass of their own (result_pass_bytes, v6e's 3.78
   * against its elementwise 4.8) times them with it, not with stream_pass_bytes */
  tpu_chip own = g_v5e;
  own.result_pass_bytes = 1.0;
  snprintf(src, sizeof src, fmt, 8192, 64, 64, 512, "bf16", 8192, 512);
  double bf_own = stream_time(src, &own, &nk);
  double pass_own = 8192.0 * 512 * (2 + own.result_pass_bytes) / bpc;
  printf("  with result_pass_bytes 1.0: %.0f cycles (pass %.0f)\n", bf_own, pass_own);
  /* the same kernel, its pass shorter: what is beyond the pass stays the same */
  CHECK(bf_own > pass_own && bf_own < 0.8 * bf && fabs((bf_own - pass_own) - (bf - pass)) < 0.02 * bf);
  CHECK(tpu_chip_result_pass(&g_v5e) == g_v5e.stream_pass_bytes && tpu_chip_result_pass(&own) == 1.0);
  /* compute-bound: 4096^3 takes the same with and without the pass */
  snprintf(src, sizeof src, fmt, 4096, 4096, 4096, 4096, "bf16", 4096, 4096);
  double big = stream_time(src, &g_v5e, &nk), big_off = stream_time(src, &off, &nk);
  printf("bf16 4096^3: %.0f cycles, without the pass %.0f\n", big, big_off);
  CHECK(big < 1.05 * big_off);
  /* memory-bound: the kernel lasts at least its transfers end to end, the input's and the
   * result's with the pass (the compiler's [65536,2048] x [2048,128]: 806,163 cycles on
   * v5e, its 612K of input plus 115K of result pass and the rest exposed MXU work) */
  snprintf(src, sizeof src, fmt, 65536, 2048, 2048, 128, "bf16", 65536, 128);
  double mem = stream_time(src, &g_v5e, &nk), mem_off = stream_time(src, &off, &nk);
  /* (the input at the matmul streaming rate, matmul_stream_efficiency of the vector one) */
  const double eff = g_v5e.matmul_stream_efficiency > 0 ? g_v5e.matmul_stream_efficiency : 1;
  double ends = (65536.0 * 2048 * 2 / eff + 65536.0 * 128 * (2 + g_v5e.stream_pass_bytes)) / bpc;
  printf("bf16 [65536,2048] x [2048,128]: %.0f cycles, transfers end to end %.0f, without the pass %.0f\n", mem, ends,
         mem_off);
  CHECK(mem >= ends && mem < 1.05 * ends);
  CHECK(mem > mem_off);
}

/* Two DMAs filling parts of one VMEM slot run back to back on the port: the second does
 * not wait for the first's latency (a kernel with more operands than an instruction reads
 * packs several into one buffer); the reader waits for both. */
static void slot_filled_in_parts(void) {
  tpu_chip c = g_v5e;
  tpu_program *p = assemble(
      ".program chip=\"v5e\"\n.op name=\"a\" kind=\"x\" flops=0 padded_flops=0 bytes=0 padded_bytes=0\n"
      ".hbm name=\"h\" offset=0 bytes=2097152\n.vmem op=0 offset=0 slot_bytes=2097152 slots=1\n"
      "kernel op=0\ndma.in dst=v0[0] hbm=h0 bytes=1048576 op=0\ndma.in dst=v0[0] hbm=h0 bytes=1048576 op=0\n"
      "vpu src=v0[0] vregs=8 ops=1 op=0\n");
  CHECK(p != NULL);
  if (!p) return;
  tpu_timeline tl;
  tpu_diag d;
  CHECK(tpu_timing_run(p, &c, 0, &tl, &d) == TPU_OK);
  const double bpc = tpu_chip_hbm_stream_bw(&c) / c.clock_hz;
  int64_t one = (int64_t)ceil(1048576 / bpc), kov = (int64_t)llround(c.kernel_overhead_s * c.clock_hz);
  int64_t vpu = (int64_t)ceil(8 / (c.vector_ops_per_cycle > 0 ? c.vector_ops_per_cycle : 1));
  CHECK_EQ_INT(tl.total_cycles, kov + 2 * one + hbm_lat(&c) + vpu);
  tpu_timeline_free(&tl);
  tpu_program_free(p);
}

/* A matmul streaming a weight that no prefetch holds (decode: 16 rows, a 128 MiB weight)
 * is bound by its reads, which stream at the chip's matmul_stream_efficiency of a vector
 * kernel's rate (v5e: 0.907, probed); without it, at the vector rate. */
static void matmul_stream_rate(void) {
  const char *src = "HloModule m\nENTRY e {\n x = bf16[16,8192] parameter(0)\n w = bf16[8192,8192] parameter(1)\n"
                    " ROOT y = bf16[16,8192] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  tpu_chip plain = g_v5e;
  plain.matmul_stream_efficiency = 0;
  int nk = 0;
  double t = stream_time(src, &g_v5e, &nk), t0 = stream_time(src, &plain, &nk);
  const double bpc = tpu_chip_hbm_stream_bw(&g_v5e) / g_v5e.clock_hz, w = 8192.0 * 8192 * 2;
  printf("decode [16,8192] x [8192,8192] on v5e: %.0f cycles (weight at the vector rate: %.0f), %.0f without "
         "matmul_stream_efficiency %.3f\n", t, w / bpc, t0, g_v5e.matmul_stream_efficiency);
  CHECK(g_v5e.matmul_stream_efficiency > 0 && g_v5e.matmul_stream_efficiency < 1);
  CHECK(t0 >= w / bpc && t0 < 1.05 * w / bpc);
  CHECK(fabs(t / t0 - 1 / g_v5e.matmul_stream_efficiency) < 0.02);
}

int main(void) {
  tpu_diag d;
  if (tpu_chip_load("v5e", &g_v5e, &d) != TPU_OK) {
    fprintf(stderr, "cannot load v5e\n");
    return 1;
  }
  calibration_fields(); /* on the preset as it is */
  stream_costs();
  matmul_stream_rate();
  matmul_result_pass();
  slot_filled_in_parts();
  /* The closed forms below are checked on the published figures alone: DMAs at hbm_bw,
   * kernels starting at their barrier (the preset's calibration to the XLA cost model,
   * hbm_efficiency and kernel_overhead_s, is checked above). */
  g_v5e.hbm_efficiency = 0;
  g_v5e.kernel_overhead_s = 0;
  g_v5e.matmul_overhead_s = g_v5e.matmul_base_s = g_v5e.matmul_write_s = 0;
  g_v5e.vector_ops_per_cycle = g_v5e.eup_pushes_per_cycle = 0;
  g_v5e.stream_pass_bytes = g_v5e.lone_op_bytes = g_v5e.transpose_bytes = 0;
  /* and on the systolic array's own weight loading (a row per cycle), every operand from HBM */
  g_v5e.mxu_weight_load_cycles = 0;
  g_v5e.prov[TPU_CHIP_XPREFETCH_MAX_BYTES].status = TPU_PROV_ABSENT;
  dot_matches_tile_model();
  precision_passes();
  copy_closed_form();
  elementwise_at_hbm_bandwidth();
  matmul_near_peak();
  pipeline_and_cond();
  megacore_and_int8();
  batch_spread();
  cross_kernel_prefetch();
  in_step_copies();
  CHECK_DONE();
}
