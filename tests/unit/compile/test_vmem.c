/* Memory spaces in the back end: values kept in VMEM between kernels, what reading and
 * writing them there costs, the cross-program prefetch, a kernel's scoped VMEM, and a
 * compiled program's own memory spaces (S(1) values, views of them, copies into VMEM). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chip/timing.h"
#include "unit/compile/backend_util.h"

static tpu_chip g_chip;

static int roundtrip(const tpu_program *p, const char *name) { return program_roundtrip(p, name, &g_chip); }
static tpu_program *compile_src(const char *src, tpu_module **m) { return compile_src_on(src, &g_chip, m); }

/* Memory-space assignment: x -> a -> b with a small intermediate keeps `a` in VMEM (no HBM
 * buffer, no DMA); with an intermediate larger than VMEM it goes through HBM. */
static void vmem_residency(int rows) {
  char src[400];
  snprintf(src, sizeof src,
           "HloModule chain\n"
           "ENTRY e {\n"
           "  x = f32[%d,1024] parameter(0)\n"
           "  a = f32[%d,1024] exponential(x)\n"
           "  ROOT b = f32[%d,1024] negate(a)\n"
           "}\n",
           rows, rows, rows);
  tpu_module *m = NULL;
  tpu_diag d;
  tpu_program *p = compile_src(src, &m);
  if (p) {
    const double bytes = (double)rows * 1024 * 4;
    const int fits = bytes < (double)g_chip.vmem_bytes / 2;
    tpu_timeline tl;
    CHECK(tpu_timing_run(p, &g_chip, 0, &tl, &d) == TPU_OK);
    int ha = hbm_named(p, "a");
    int resident = 0;
    for (int i = 0; i < p->nvmem; i++)
      if (p->vmem[i].op == -1 && p->vmem[i].slot_bytes == (int64_t)bytes && p->vmem[i].nslots == 1) resident++;
    if (fits) {
      CHECK_EQ_INT(ha, -1);
      CHECK_EQ_INT(resident, 1);
      CHECK(p->vmem[p->nvmem - 1].offset >= 0);
      CHECK_NEAR(tl.hbm_bytes, 2 * bytes, 0); /* x in, b out; nothing for a */
      CHECK_EQ_INT(p->hbm_footprint, 2 * (int64_t)bytes);
    } else {
      CHECK(ha >= 0);
      CHECK_EQ_INT(resident, 0);
      CHECK_NEAR(tl.hbm_bytes, 4 * bytes, 0); /* x in, a out and back in, b out */
    }
    /* The same either way: every DMA but an on-chip one names an HBM buffer. */
    for (int i = 0; i < p->ninsns; i++)
      if (p->insns[i].opc == TPU_ISA_DMA_IN || p->insns[i].opc == TPU_ISA_DMA_OUT)
        CHECK(p->insns[i].hbm >= 0 || p->insns[i].onchip);
    CHECK(roundtrip(p, "vmem_residency"));
    tpu_timeline_free(&tl);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* On one v4 TensorCore the kernels' scoped VMEM takes all 16 MiB, and its compiler keeps
 * values between kernels in CMEM, not VMEM: the 1 MiB intermediate goes through HBM. */
static void no_residency_v4(void) {
  tpu_chip c;
  tpu_module *m = NULL;
  tpu_program *p = compile_for("v4:core",
                               "HloModule chain\nENTRY e {\n  x = f32[256,1024] parameter(0)\n"
                               "  a = f32[256,1024] exponential(x)\n  ROOT b = f32[256,1024] negate(a)\n}\n",
                               &c, &m);
  if (p) {
    CHECK(c.scoped_vmem_bytes >= c.vmem_bytes);
    CHECK(hbm_named(p, "a") >= 0);
    for (int i = 0; i < p->nvmem; i++) CHECK(p->vmem[i].op != -1);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* Compiles src on chip c, checks that value `resident` has no HBM buffer (kept in VMEM),
 * and times it: op `name`'s cycles and HBM bytes, and its `onchip` dma.out count; with
 * `rt`, also that the program prints and parses back. */
static void time_resident_op(const char *src, const tpu_chip *c, const char *resident, const char *name, int rt,
                             double *cycles, double *hbm, int *onchip) {
  *cycles = *hbm = -1;
  *onchip = 0;
  tpu_module *m = NULL;
  tpu_diag d;
  tpu_program *p = compile_src_on(src, c, &m);
  if (p) {
    int op = op_named(p, name);
    CHECK(op >= 0 && hbm_named(p, resident) < 0); /* kept in VMEM */
    for (int i = 0; i < p->ninsns; i++)
      if (p->insns[i].onchip && p->insns[i].op == op && p->insns[i].opc == TPU_ISA_DMA_OUT) ++*onchip;
    tpu_timeline tl;
    CHECK(tpu_timing_run(p, c, 0, &tl, &d) == TPU_OK);
    if (op >= 0) {
      *cycles = (double)tl.ops[op].cycles;
      *hbm = tl.ops[op].hbm_bytes;
    }
    if (rt) CHECK(roundtrip(p, name));
    tpu_timeline_free(&tl);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* A matmul's bf16 result kept in VMEM (two consumers, neither fused with it) moves no HBM
 * bytes but still pays the 16-bit pass, as the XLA TPU compiler charges it (its
 * bf16[8192,512] x [512,2048] with relu: 245,115 cycles on v5e writing the result to HBM,
 * 176,448 keeping it in VMEM): an `onchip` dma.out carries the pass; the program prints
 * and parses back with it (K = 128 here: the pass, not the MXU, bounds the kernel). */
static void matmul_result_on_chip(void) {
  const char *src = "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = f32[] add(a, b) }\n"
                    "ENTRY e {\n x = bf16[8192,128] parameter(0)\n w = bf16[128,2048] parameter(1)\n"
                    " d = bf16[8192,2048] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                    " t = bf16[2048,8192] transpose(d), dimensions={1,0}\n c = f32[8192,2048] convert(d)\n"
                    " z = f32[] constant(0)\n s = f32[2048] reduce(c, z), dimensions={0}, to_apply=add\n"
                    " ROOT r = (bf16[2048,8192], f32[2048]) tuple(t, s)\n}\n";
  tpu_chip nopass = g_chip;
  nopass.stream_pass_bytes = 0;
  double cyc[2], hbm[2];
  int onchip[2];
  time_resident_op(src, &g_chip, "d", "d", 1, &cyc[0], &hbm[0], &onchip[0]);
  time_resident_op(src, &nopass, "d", "d", 0, &cyc[1], &hbm[1], &onchip[1]);
  CHECK(onchip[0] > 0 && onchip[1] == 0);
  const double bpc = tpu_chip_hbm_stream_bw(&g_chip) / g_chip.clock_hz;
  const double pass = 8192.0 * 2048 * g_chip.stream_pass_bytes / bpc, in = (8192.0 * 128 + 128.0 * 2048) * 2;
  printf("bf16 result in VMEM: %.0f cycles (pass %.0f), without the pass %.0f; %.0f HBM bytes\n", cyc[0], pass, cyc[1],
         hbm[0]);
  /* at least its reads and the pass end to end (timing.c port_floor_op), not much more */
  CHECK(cyc[0] >= pass + in / bpc && cyc[0] < 1.2 * (pass + in / bpc) && cyc[0] - cyc[1] > 0.5 * pass);
  CHECK(hbm[0] >= in && hbm[0] < in + 1e6); /* its inputs, not its 33.5 MB result */
}

/* A vector kernel reading an operand kept in VMEM (a transpose's result, copied there) pays
 * the chip's vmem_read_cost of an HBM read for it (v5e: all of it, as the XLA TPU compiler
 * times x.T * 2 and x * 2 alike), and moves no HBM bytes for it (-x.T here). */
static void vmem_read_cost(void) {
  const char *src = "HloModule m\nENTRY e {\n x = f32[2048,2048] parameter(0)\n"
                    " t = f32[2048,2048] transpose(x), dimensions={1,0}\n ROOT y = f32[2048,2048] negate(t)\n}\n";
  tpu_chip free_read = g_chip;
  free_read.vmem_read_cost = 0;
  double cyc[2], hbm[2];
  int onchip;
  time_resident_op(src, &g_chip, "t", "y", 0, &cyc[0], &hbm[0], &onchip);
  time_resident_op(src, &free_read, "t", "y", 0, &cyc[1], &hbm[1], &onchip);
  const double bpc = tpu_chip_hbm_stream_bw(&g_chip) / g_chip.clock_hz, read = 2048.0 * 2048 * 4 / bpc;
  printf("-x.T reading VMEM: %.0f cycles with vmem_read_cost %.2f, %.0f without (a read: %.0f)\n", cyc[0],
         g_chip.vmem_read_cost, cyc[1], read);
  CHECK(g_chip.vmem_read_cost > 0);
  CHECK(fabs((cyc[0] - cyc[1]) - g_chip.vmem_read_cost * read) < 0.05 * read);
  CHECK(hbm[0] == hbm[1] && hbm[0] == 2048.0 * 2048 * 4); /* the write only */
}

/* Cross-program prefetch (compile/backend/vmem_assign.c): a decode step's weight, the largest
 * parameter a matmul reads, is on chip when the step starts — VMEM on v5e (the compiler's
 * copy-start with cross_program_prefetch_index), CMEM on one v4 TensorCore when VMEM is too
 * small, none past v6e's xprefetch_max_bytes — and only the rest moves over HBM. */
static void cross_program_prefetch(void) {
  const char *fmt = "HloModule m\nENTRY e {\n x = bf16[8,%d] parameter(0)\n w = bf16[%d,4096] parameter(1)\n"
                    " ROOT y = bf16[8,4096] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  struct {
    const char *chip;
    int k;
    int64_t want; /* prefetched bytes */
    int cmem;
  } cases[] = {{"v5e", 4096, 4096LL * 4096 * 2, 0},
               {"v4:core", 8192, 8192LL * 4096 * 2, 1},    /* 64 MiB: over its 16 MiB VMEM, in its CMEM share */
               {"v6e", 14336, 8LL * 14336 * 2, 0},        /* the 112 MiB weight: only x */
               {"v5p", 4096, 4096LL * 4096 * 2, 0},       /* 32 MiB beside its 16 MiB scoped limit */
               {"v5p", 6400, 8LL * 6400 * 2, 0},          /* 50 MiB over 64 - 16 MiB: only x */
               /* exactly the VMEM beside the scoped limit is not room enough (libtpu
                * compile-only, these programs: v5p prefetches w at K = 6016, 47 MiB, not at
                * 6144, 48 MiB; v6e at K = 12160, 95 MiB, not at 12288, 96 MiB) */
               {"v5p", 6144, 8LL * 6144 * 2, 0},
               {"v6e", 12288, 8LL * 12288 * 2, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tpu_chip c;
    tpu_diag d;
    char src[512];
    snprintf(src, sizeof src, fmt, cases[i].k, cases[i].k);
    tpu_module *m = NULL;
    tpu_program *p = compile_for(cases[i].chip, src, &c, &m);
    if (p) {
      printf("%s: k=%d prefetched %lld bytes (%s)\n", cases[i].chip, cases[i].k, (long long)p->xprefetch_bytes,
             p->xprefetch_bytes ? p->hbm[p->xprefetch_hbm].name : "-");
      CHECK_EQ_INT(p->xprefetch_bytes, cases[i].want);
      CHECK_EQ_INT(p->xprefetch_cmem, cases[i].cmem);
      tpu_timeline tl;
      if (tpu_timing_run(p, &c, 0, &tl, &d) == TPU_OK) {
        /* the step moves x (or w) and y, not the prefetched operand */
        double all = 2.0 * (8.0 * cases[i].k + (double)cases[i].k * 4096 + 8.0 * 4096);
        CHECK(tl.hbm_bytes <= all - (double)cases[i].want + 1);
        tpu_timeline_free(&tl);
      } else {
        CHECK(0);
      }
      CHECK(roundtrip(p, "xprefetch"));
      tpu_program_free(p);
    }
    tpu_module_free(m);
  }
  /* A convolution's input that needs relaying out into the convolution's layout is not a
   * candidate (the compiler prefetches the filter of a 64-feature ResNet convolution, the
   * input of a 128-feature one) */
  const char *convf = "HloModule m\nENTRY e {\n x = bf16[32,%d,%d,%d] parameter(0)\n w = bf16[3,3,%d,%d] parameter(1)\n"
                      " ROOT y = bf16[32,%d,%d,%d] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n}\n";
  int hw[2] = {56, 28}, fe[2] = {64, 128};
  for (int i = 0; i < 2; i++) {
    tpu_chip c;
    char src[512];
    snprintf(src, sizeof src, convf, hw[i], hw[i], fe[i], fe[i], fe[i], hw[i], hw[i], fe[i]);
    tpu_module *m = NULL;
    tpu_program *p = compile_for("v5e", src, &c, &m);
    if (p) {
      const char *who = p->xprefetch_bytes ? p->hbm[p->xprefetch_hbm].name : "-";
      printf("conv over %d features: prefetched %s\n", fe[i], who);
      CHECK_EQ_STR(who, i == 0 ? "w" : "x");
      tpu_program_free(p);
    }
    tpu_module_free(m);
  }
  /* A parameter only an unfused reduce reads is prefetched too (the compiler's x.sum() of
   * f32[2048,2048], every generation); not when an elementwise kernel reads it as well
   * (softmax: x - max), nor 64 MiB on v5p (over its 32 MiB) */
  const char *redf = "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
                     "ENTRY e {\n x = f32[%d,2048] parameter(0)\n z = f32[] constant(0)\n"
                     " r = f32[%d] reduce(x, z), dimensions={1}, to_apply=add\n%s}\n";
  struct {
    const char *chip;
    int rows, other;
    int64_t want;
  } rc[] = {{"v6e", 2048, 0, 2048LL * 2048 * 4}, {"v5e", 2048, 0, 2048LL * 2048 * 4}, {"v6e", 2048, 1, 0},
            {"v5p", 8192, 0, 0}, {"v5p", 2048, 0, 2048LL * 2048 * 4}};
  for (size_t i = 0; i < sizeof rc / sizeof rc[0]; i++) {
    tpu_chip c;
    char tail[200], src[800];
    if (rc[i].other)
      snprintf(tail, sizeof tail, " b = f32[%d,2048] broadcast(r), dimensions={0}\n ROOT y = f32[%d,2048] subtract(x, b)\n",
               rc[i].rows, rc[i].rows);
    else
      snprintf(tail, sizeof tail, " ROOT y = f32[%d] negate(r)\n", rc[i].rows);
    snprintf(src, sizeof src, redf, rc[i].rows, rc[i].rows, tail);
    tpu_module *m = NULL;
    tpu_program *p = compile_for(rc[i].chip, src, &c, &m);
    CHECK(p != NULL);
    if (p) {
      printf("%s: reduce of f32[%d,2048]%s: prefetched %lld bytes\n", rc[i].chip, rc[i].rows,
             rc[i].other ? " read again" : "", (long long)p->xprefetch_bytes);
      CHECK_EQ_INT(p->xprefetch_bytes, rc[i].want);
      tpu_program_free(p);
    }
    tpu_module_free(m);
  }
  /* A parameter only pooling window kernels read in its own layout is prefetched (the
   * compiler's max and sum pools of bf16[64,20,20,128] and f32[16,20,20,128], batch in the
   * sublanes, v4 to v6e; vmem_assign.c window_read); not when an element-wise op reads it
   * first (bf16 averaged in f32: a convert), nor when the window kernel relays it out
   * (f32[8,56,56,256] arrives row-major, 56 rows tile as well as the batch of 8, and the
   * pooled [8,18,18,256] is laid out batch in the sublanes: 18 rows pad to 24). */
  const char *poolf = "HloModule m\nmx { a = %s[] parameter(0)\n b = %s[] parameter(1)\n ROOT c = %s[] maximum(a, b) }\n"
                      "ENTRY e {\n x = %s[%d,%d,%d,%d] parameter(0)\n i = %s[] constant(-inf)\n%s"
                      " ROOT y = %s[%d,%d,%d,%d] reduce-window(%s, i), window={size=1x3x3x1 stride=1x%dx%dx1}, to_apply=mx\n}\n";
  struct {
    const char *dt;
    int n, h, c, st, convert;
    int64_t want;
  } pc[] = {{"bf16", 64, 20, 128, 2, 0, 64LL * 20 * 20 * 128 * 2},
            {"f32", 16, 20, 128, 2, 0, 16LL * 20 * 20 * 128 * 4},
            {"f32", 16, 20, 128, 2, 1, 0},
            {"f32", 8, 56, 256, 3, 0, 0}};
  for (size_t i = 0; i < sizeof pc / sizeof pc[0]; i++) {
    tpu_chip c;
    char src[1200], cv[160];
    int ho = (pc[i].h - 3) / pc[i].st + 1;
    const char *dt = pc[i].dt, *wdt = pc[i].convert ? "f32" : dt;
    cv[0] = 0;
    if (pc[i].convert)
      snprintf(cv, sizeof cv, " xf = f32[%d,%d,%d,%d] negate(x)\n", pc[i].n, pc[i].h, pc[i].h, pc[i].c);
    snprintf(src, sizeof src, poolf, wdt, wdt, wdt, dt, pc[i].n, pc[i].h, pc[i].h, pc[i].c, wdt, cv, wdt, pc[i].n, ho, ho,
             pc[i].c, pc[i].convert ? "xf" : "x", pc[i].st, pc[i].st);
    tpu_module *m = NULL;
    tpu_program *p = compile_for_with("v5e", src, 1, &c, &m); /* the fuse pass lays the windows out */
    CHECK(p != NULL);
    if (p) {
      printf("v5e: 3x3 max pool of %s[%d,%d,%d,%d]%s: prefetched %lld bytes\n", dt, pc[i].n, pc[i].h, pc[i].h, pc[i].c,
             pc[i].convert ? " negated first" : "", (long long)p->xprefetch_bytes);
      CHECK_EQ_INT(p->xprefetch_bytes, pc[i].want);
      tpu_program_free(p);
    }
    tpu_module_free(m);
  }
  /* A program the XLA TPU compiler compiled names its choice (copy-start with
   * cross_program_prefetch_index): tpusim keeps it, here x rather than the larger w, and the
   * kernel reads it through copy-done from VMEM. */
  tpu_chip c;
  tpu_diag d;
  tpu_module *m = NULL;
  tpu_program *p = compile_for("v5e",
                               "HloModule m\nENTRY e {\n x = bf16[8,4096] parameter(0)\n w = bf16[4096,4096] parameter(1)\n"
                               " cs = (bf16[8,4096], bf16[8,4096], u32[]) copy-start(x), cross_program_prefetch_index=0\n"
                               " cd = bf16[8,4096] copy-done(cs)\n"
                               " ROOT y = bf16[8,4096] dot(cd, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
                               &c, &m);
  if (p) {
    CHECK_EQ_INT(p->xprefetch_bytes, 8 * 4096 * 2);
    tpu_timeline tl;
    if (tpu_timing_run(p, &c, 0, &tl, &d) == TPU_OK) {
      CHECK_NEAR(tl.hbm_bytes, 4096.0 * 4096 * 2 + 8.0 * 4096 * 2, 0); /* w and y, not x */
      tpu_timeline_free(&tl);
    }
    tpu_program_free(p);
  }
  tpu_module_free(m);
}

/* VMEM one kernel's tiles take: within the chip's scoped limit (the XLA TPU compiler's
 * kernels on v5e use at most 16 MiB, on v6e 32 MiB: used_scoped_memory_configs), and an
 * operand on chip (here the lhs, prefetched across steps) takes no slot and is read where it
 * lives, so the rhs streams past it once: the compiler's f32 2048^3 GEMM on v5e reads its
 * prefetched lhs whole beside 4 MiB of rhs and output panels. */
static void scoped_vmem(void) {
  const char *src = "HloModule m\nENTRY e {\n a = f32[2048,2048] parameter(0)\n b = f32[2048,2048] parameter(1)\n"
                    " ROOT y = f32[2048,2048] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  const char *chips[2] = {"v5e", "v6e"};
  for (int i = 0; i < 2; i++) {
    tpu_chip c;
    tpu_diag d;
    tpu_module *m = NULL;
    tpu_program *p = compile_for(chips[i], src, &c, &m);
    CHECK(p != NULL);
    if (!p) continue;
    CHECK(c.scoped_vmem_bytes == (i ? 32 : 16) * ((int64_t)1 << 20));
    int64_t tiles = 0, lhs_slot = -1;
    for (int v = 0; v < p->nvmem; v++)
      if (p->vmem[v].op >= 0) {
        tiles += p->vmem[v].slot_bytes * p->vmem[v].nslots;
        if (lhs_slot < 0) lhs_slot = p->vmem[v].slot_bytes; /* the first: the lhs blocks */
      }
    printf("%s: f32 2048^3 with a prefetched: tile buffers %lld bytes, lhs slot %lld, %lld prefetched\n",
           chips[i], (long long)tiles, (long long)lhs_slot, (long long)p->xprefetch_bytes);
    CHECK_EQ_INT(p->xprefetch_bytes, 2048LL * 2048 * 4);
    CHECK(tiles > 0 && tiles <= c.scoped_vmem_bytes);
    CHECK_EQ_INT(lhs_slot, 0);
    tpu_timeline tl;
    if (tpu_timing_run(p, &c, 0, &tl, &d) == TPU_OK) {
      CHECK_NEAR(tl.hbm_bytes, 2.0 * 2048 * 2048 * 4, 0); /* b once, y once */
      tpu_timeline_free(&tl);
    } else {
      CHECK(0);
    }
    CHECK(roundtrip(p, "scoped"));
    tpu_program_free(p);
    tpu_module_free(m);
  }
}

/* The HBM bytes program src moves on v5e, -1 when it does not compile or time. */
static double hbm_bytes_v5e(const char *src) {
  tpu_chip c;
  tpu_diag d;
  tpu_timeline tl;
  if (tpu_chip_load("v5e", &c, &d) != TPU_OK || !time_src(src, &c, &tl)) return -1;
  double b = tl.hbm_bytes;
  tpu_timeline_free(&tl);
  return b;
}

/* A compiled program's value in VMEM (S(1)) read through a bitcast, a view of the same
 * bytes, is read there: the XLA TPU compiler passes its VMEM values to kernels so (a in,
 * g out; f stays in VMEM). */
static void vmem_through_bitcast(void) {
  double b = hbm_bytes_v5e("HloModule m\nENTRY e {\n a = f32[1024,1024]{1,0:T(8,128)} parameter(0)\n"
                           " f = f32[1024,1024]{1,0:T(8,128)S(1)} negate(a)\n"
                           " b = f32[1024,1024]{1,0:T(8,128)S(1)} bitcast(f)\n"
                           " ROOT g = f32[1024,1024]{1,0:T(8,128)} exponential(b)\n}\n");
  printf("S(1) value through a bitcast: %.0f HBM bytes\n", b);
  CHECK_NEAR(b, 2.0 * 1024 * 1024 * 4, 0);
}

/* A compiled program's copy into VMEM (S(1)) is a vector kernel whose result stays there:
 * its reader reads it on chip (HBM: a in, y out and back in, n out). */
static void copy_into_vmem(void) {
  double b = hbm_bytes_v5e("HloModule m, is_scheduled=true\nENTRY e {\n a = f32[1024,1024]{1,0:T(8,128)} parameter(0)\n"
                           " y = f32[1024,1024]{1,0:T(8,128)} negate(a)\n"
                           " r = f32[1024,1024]{0,1:T(8,128)S(1)} copy(y)\n"
                           " ROOT n = f32[1024,1024]{1,0:T(8,128)} exponential(r)\n}\n");
  printf("copy into S(1): %.0f HBM bytes\n", b);
  CHECK_NEAR(b, 4.0 * 1024 * 1024 * 4, 0);
}

/* A compiled program's own copy on chip within the step (copy-start / copy-done into S(1),
 * VMEM, or S(3), v4's CMEM; no cross_program_prefetch_index): its reader reads it there, and
 * the copy runs beside earlier kernels, outside the compiler's per-op figures
 * (bert_fwd_b8s128d768h12 on v6e: the same projection 3,328 cycles with both operands so
 * copied in, 8,668 from HBM). HBM bytes: w read by the dot (on chip: none), x read, the
 * result written. */
static void copy_done_on_chip(void) {
  static const char *space[3] = {"", "S(1)", "S(3)"};
  double b[3];
  for (int s = 0; s < 3; s++) {
    char src[900];
    snprintf(src, sizeof src,
             "HloModule m, is_scheduled=true\nENTRY e {\n"
             " x = bf16[1024,1024]{1,0:T(8,128)(2,1)} parameter(0)\n"
             " w = bf16[1024,1024]{1,0:T(8,128)(2,1)} parameter(1)\n"
             " cs = (bf16[1024,1024]{1,0:T(8,128)(2,1)%s}, bf16[1024,1024]{1,0:T(8,128)(2,1)}, u32[]) copy-start(w)\n"
             " cd = bf16[1024,1024]{1,0:T(8,128)(2,1)%s} copy-done(cs)\n"
             " ROOT d = bf16[1024,1024]{1,0:T(8,128)(2,1)} dot(x, cd), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
             space[s], space[s]);
    b[s] = hbm_bytes_v5e(src);
  }
  printf("dot reading a copy-done: %.0f HBM bytes from HBM, %.0f from S(1), %.0f from S(3)\n", b[0], b[1], b[2]);
  CHECK_NEAR(b[0] - b[1], 1024.0 * 1024 * 2, 8); /* (an on-chip read rounds up a byte) */
  CHECK_NEAR(b[0] - b[2], 1024.0 * 1024 * 2, 8);
}

/* A compiled program (tiled layouts) keeps in VMEM only what its compiler put in memory space
 * S(1): the same chain of two kernels keeps `a` on chip with S(1) and in HBM without it. */
static void compiled_memory_space(void) {
  for (int s1 = 0; s1 < 2; s1++) {
    char src[600];
    snprintf(src, sizeof src,
             "HloModule chain, is_scheduled=true\n"
             "ENTRY e {\n"
             "  x = f32[256,1024]{1,0:T(8,128)} parameter(0)\n"
             "  a = f32[256,1024]{1,0:T(8,128)%s} exponential(x)\n"
             "  ROOT b = f32[256,1024]{1,0:T(8,128)} negate(a)\n"
             "}\n",
             s1 ? "S(1)" : "");
    tpu_module *m;
    tpu_program *p = compile_src(src, &m);
    if (p) CHECK_EQ_INT(hbm_named(p, "a") < 0, s1);
    tpu_program_free(p);
    tpu_module_free(m);
  }
}

/* A compiled multi-output kernel's results stay together: in VMEM when most of their bytes
 * are in S(1) there, in HBM when the large one is not (the compiler's attention writes its
 * row sums to S(1) beside the score matrix in HBM; tpusim had kept both on chip). */
static void compiled_tuple_memory_space(void) {
  for (int big_s1 = 0; big_s1 < 2; big_s1++) {
    const char *sm = big_s1 ? "" : "S(1)", *bg = big_s1 ? "S(1)" : "";
    char src[1200];
    snprintf(src, sizeof src,
             "HloModule m, is_scheduled=true\n"
             "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
             "fc { p = f32[1024,1024] parameter(0)\n n = f32[1024,1024] negate(p)\n z = f32[] constant(0)\n"
             " r = f32[1024] reduce(n, z), dimensions={1}, to_apply=add\n"
             " ROOT t = (f32[1024]{0:T(1024)%s}, f32[1024,1024]{1,0:T(8,128)%s}) tuple(r, n) }\n"
             "ENTRY e {\n x = f32[1024,1024]{1,0:T(8,128)} parameter(0)\n"
             " f = (f32[1024]{0:T(1024)%s}, f32[1024,1024]{1,0:T(8,128)%s}) fusion(x), kind=kLoop, calls=fc\n"
             " g0 = f32[1024]{0:T(1024)%s} get-tuple-element(f), index=0\n"
             " g1 = f32[1024,1024]{1,0:T(8,128)%s} get-tuple-element(f), index=1\n"
             " b = f32[1024,1024]{1,0:T(8,128)} broadcast(g0), dimensions={0}\n"
             " ROOT y = f32[1024,1024]{1,0:T(8,128)} add(g1, b)\n}\n",
             sm, bg, sm, bg, sm, bg);
    tpu_module *m;
    tpu_program *p = compile_src(src, &m);
    CHECK(p != NULL);
    if (p) {
      printf("multi-output kernel, %s result in S(1): its results %s\n", big_s1 ? "large" : "small",
             hbm_named(p, "f#1") < 0 ? "in VMEM" : "in HBM");
      CHECK_EQ_INT(hbm_named(p, "f#1") < 0, big_s1);
    }
    tpu_program_free(p);
    tpu_module_free(m);
  }
}

/* In-step prefetch: a parameter a matmul reads after the step's first kernel is copied into
 * VMEM whole (prefetch=2 transfers, then a wait) while the kernels before run, and read
 * there: the reader (here reading and writing VMEM only) loads no tiles of it and pays no
 * matmul start cost (v6e). A parameter the first kernel reads, or one the step also
 * returns, is read from HBM as before. */
static int64_t step_prefetch_case(int returned, int *copied, int *tiles_w2) {
  char src[700];
  snprintf(src, sizeof src,
           "HloModule m\nENTRY e {\n x = bf16[2048,512] parameter(0)\n w1 = bf16[512,512] parameter(1)\n"
           " w2 = bf16[512,512] parameter(2)\n"
           " h = bf16[2048,512] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
           " y = bf16[2048,512] dot(h, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
           " z = bf16[2048,512] tanh(y)\n"
           " ROOT t = %s tuple(z%s)\n}\n",
           returned ? "(bf16[2048,512], bf16[512,512])" : "(bf16[2048,512])", returned ? ", w2" : "");
  tpu_chip c;
  tpu_module *m = NULL;
  int64_t cyc = -1;
  *copied = *tiles_w2 = 0;
  tpu_program *p = compile_for("v6e", src, &c, &m);
  if (p) {
    CHECK_EQ_STR(p->xprefetch_bytes ? p->hbm[p->xprefetch_hbm].name : "-", "x");
    int hw1 = hbm_named(p, "w1"), hw2 = hbm_named(p, "w2"), oy = op_named(p, "y"), last = -1;
    for (int i = 0; i < p->ninsns; i++) {
      const tpu_insn *in = &p->insns[i];
      if (in->opc == TPU_ISA_DMA_IN && in->hbm == hw2 && in->prefetch == 2) *copied += (int)in->bytes, last = i;
      else if (in->opc == TPU_ISA_DMA_IN && in->hbm == hw2) (*tiles_w2)++;
      CHECK(!(in->opc == TPU_ISA_DMA_IN && in->hbm == hw1 && in->prefetch == 2));
    }
    if (last >= 0) { /* the reader waits for the last piece */
      CHECK(p->insns[last + 1].opc == TPU_ISA_WAIT && p->insns[last + 1].at == last);
      CHECK_EQ_INT(p->insns[last].op, oy);
    }
    tpu_timeline tl;
    if (time_program(p, &c, &tl)) {
      cyc = oy >= 0 ? tl.ops[oy].cycles : -1;
      tpu_timeline_free(&tl);
    }
    CHECK(roundtrip(p, "step_prefetch"));
    tpu_program_free(p);
  }
  tpu_module_free(m);
  return cyc;
}

static void step_prefetch(void) {
  int copied, tiles;
  int64_t on_chip = step_prefetch_case(0, &copied, &tiles);
  CHECK_EQ_INT(copied, 512 * 512 * 2);
  CHECK_EQ_INT(tiles, 0);
  int64_t from_hbm = step_prefetch_case(1, &copied, &tiles);
  CHECK_EQ_INT(copied, 0);
  CHECK(tiles >= 1);
  tpu_chip c;
  tpu_diag d;
  CHECK(tpu_chip_load("v6e", &c, &d) == TPU_OK);
  printf("dot(h, w2) on v6e: %lld cycles with w2 copied in during dot(x, w1), %lld reading it from HBM\n",
         (long long)on_chip, (long long)from_hbm);
  /* at least the HBM latency less (v6e's matmul kernels pay no read start beyond it) */
  CHECK(on_chip > 0 && on_chip + llround(0.5e-6 * c.clock_hz) <= from_hbm);
}

/* A parameter two vector kernels read, on a chip whose compiler charges VMEM reads less
 * than HBM's (v6e): the first reads HBM while the copy takes the port's gaps beside it
 * (its transfers' stream costs hold no bytes), the second waits for the copy and reads
 * VMEM (the compiler's norm programs: copy-start of x, copy-done read by the normalize). */
static int64_t copy_beside_case(const char *chip, int returned, int64_t *copied, int64_t *wait) {
  char src[900];
  snprintf(src, sizeof src,
           "HloModule m\nadd {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = f32[] add(a, b)\n}\n"
           "ENTRY e {\n x = bf16[4096,1024] parameter(0)\n xf = f32[4096,1024] convert(x)\n"
           " z = f32[] constant(0)\n s = f32[4096] reduce(xf, z), dimensions={1}, to_apply=add\n"
           " sb = f32[4096,1024] broadcast(s), dimensions={0}\n y = f32[4096,1024] multiply(xf, sb)\n"
           " r = bf16[4096,1024] convert(y)\n ROOT t = %s tuple(r%s)\n}\n",
           returned ? "(bf16[4096,1024], bf16[4096,1024])" : "(bf16[4096,1024])", returned ? ", x" : "");
  tpu_chip c;
  tpu_module *m = NULL;
  int64_t cyc = -1;
  *copied = 0;
  *wait = -1;
  tpu_program *p = compile_for_with(chip, src, 1, &c, &m); /* fused: two kernels read x */
  if (p) {
    int hx = hbm_named(p, "x"), first = -1, last = -1, opa = -1, opb = -1;
    for (int i = 0; i < p->ninsns; i++) {
      const tpu_insn *in = &p->insns[i];
      if (in->opc != TPU_ISA_DMA_IN || in->hbm != hx || in->prefetch != 2) continue;
      *copied += in->bytes;
      if (first < 0) first = i, opa = in->op;
      last = i;
    }
    if (last >= 0) {
      /* after every read of x its first reader makes from HBM */
      for (int i = first; i < p->ninsns; i++)
        CHECK(!(p->insns[i].opc == TPU_ISA_DMA_IN && p->insns[i].hbm == hx && p->insns[i].prefetch != 2));
      int w = -1;
      for (int i = last + 1; i < p->ninsns && w < 0; i++)
        if (p->insns[i].opc == TPU_ISA_WAIT && p->insns[i].at == last) w = i;
      CHECK(w > 0 && p->insns[w - 1].opc == TPU_ISA_KERNEL);
      if (w > 0) opb = p->insns[w - 1].op;
      CHECK(opb >= 0 && opb != opa);
      int onchip = 0;
      for (int i = w + 1; w > 0 && i < p->ninsns && p->insns[i].opc != TPU_ISA_KERNEL; i++)
        onchip += p->insns[i].opc == TPU_ISA_DMA_IN && p->insns[i].onchip && p->insns[i].op == opb;
      CHECK(onchip > 0);
    }
    tpu_timeline tl;
    if (time_program(p, &c, &tl)) {
      cyc = tl.total_cycles;
      *wait = tl.spf_wait_cycles;
      tpu_timeline_free(&tl);
    }
    CHECK(roundtrip(p, "copy_beside"));
    tpu_program_free(p);
  }
  tpu_module_free(m);
  return cyc;
}

static void copy_beside_reader(void) {
  int64_t copied, wait;
  int64_t on_chip = copy_beside_case("v6e", 0, &copied, &wait);
  CHECK_EQ_INT(copied, 4096 * 1024 * 2);
  CHECK_EQ_INT(wait, 0); /* hidden in the reduction's port gaps */
  int64_t from_hbm = copy_beside_case("v6e", 1, &copied, &wait);
  CHECK_EQ_INT(copied, 0);
  printf("x read by a reduction and a normalize on v6e: %lld cycles with x copied in beside the "
         "reduction, %lld with both reading HBM\n", (long long)on_chip, (long long)from_hbm);
  CHECK(on_chip > 0 && on_chip < from_hbm);
  copy_beside_case("v5e", 0, &copied, &wait); /* VMEM reads cost what HBM's do: no copy */
  CHECK_EQ_INT(copied, 0);
}

/* A matmul kernel whose epilogue broadcasts a small product over a much larger output (a
 * squeeze-and-excitation gate, f32[8,4] x [4,96], fused with the bf16[8,112,112,96]
 * activations it scales): no split of the product brings its output and epilogue blocks
 * within VMEM, so the epilogue streams in pieces while the product stays. Every generation
 * compiles it (it was refused: "a kernel needs N bytes of VMEM"), its tile buffers within
 * the budget, the product computed once per output block, not once per piece, and the
 * activations read and the result written once. */
static void streamed_epilogue(void) {
  const char *src =
      "HloModule se\n"
      "gate {\n"
      "  x = bf16[8,112,112,96] parameter(0)\n"
      "  y = bf16[8,112,112,96] parameter(1)\n"
      "  a = f32[8,4] parameter(2)\n"
      "  w = f32[4,96] parameter(3)\n"
      "  d = f32[8,96] dot(a, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  s = f32[8,96] logistic(d)\n"
      "  c = bf16[8,96] convert(s)\n"
      "  b = bf16[8,112,112,96] broadcast(c), dimensions={0,3}\n"
      "  xy = bf16[8,112,112,96] multiply(x, y)\n"
      "  ROOT g = bf16[8,112,112,96] multiply(xy, b)\n"
      "}\n"
      "ENTRY e {\n"
      "  x = bf16[8,112,112,96] parameter(0)\n"
      "  y = bf16[8,112,112,96] parameter(1)\n"
      "  a = f32[8,4] parameter(2)\n"
      "  w = f32[4,96] parameter(3)\n"
      "  ROOT f = bf16[8,112,112,96] fusion(x, y, a, w), kind=kOutput, calls=gate\n"
      "}\n";
  const char *chips[4] = {"v4", "v5e", "v5p", "v6e"};
  for (int i = 0; i < 4; i++) {
    tpu_chip c;
    tpu_module *m = NULL;
    tpu_program *p = compile_for(chips[i], src, &c, &m);
    if (!p) {
      tpu_module_free(m);
      continue;
    }
    int op = op_named(p, "f");
    CHECK(op >= 0);
    int64_t tiles = op >= 0 ? p->ops[op].tiles : 0, pmod = -1;
    for (int q = 0; q < p->ninsns; q++)
      if (p->insns[q].opc == TPU_ISA_MATMUL && p->insns[q].op == op && p->insns[q].pmod > 0) pmod = p->insns[q].pmod;
    /* the kernels' VMEM budget (docs/isa.md): the scoped VMEM of each TensorCore */
    const int64_t budget = (c.scoped_vmem_bytes > 0 ? c.scoped_vmem_bytes : c.vmem_bytes / 4 * 3) *
                           (c.tensorcores > 0 ? c.tensorcores : 1);
    printf("%s: gated bf16[8,112,112,96]: %lld tiles, product every %lld, VMEM peak %lld of %lld\n", chips[i],
           (long long)tiles, (long long)pmod, (long long)p->vmem_peak, (long long)budget);
    CHECK(p->vmem_peak <= budget);
    CHECK(tiles > 1);
    CHECK_EQ_INT(pmod, tiles); /* one output block (m = 8 rows): its product once */
    tpu_timeline tl;
    if (time_program(p, &c, &tl)) {
      /* x and y read and g written once each, in whichever layout pads them least (at most
       * 96 features to 128 lanes) */
      const double act = 8.0 * 112 * 112 * 96 * 2;
      printf("  %.0f HBM bytes (activations %.0f each)\n", tl.hbm_bytes, act);
      CHECK(tl.hbm_bytes >= 3 * act && tl.hbm_bytes < 3 * act * 128 / 96 + 65536);
      /* Its cycles: the product once per output block, with the block's first piece, and
       * once more with the last piece outside the loop (docs/isa.md), not with every piece;
       * the pieces' transfers stream back to back on the HBM port with the vector work under
       * them: the op takes its reads and its written pieces (out_scale times their bytes, the
       * result's pass) at the stream rate, plus its start (v5e: 129,382 + 138,304 + 2,763 =
       * 270,449 cycles). */
      const tpu_op_stat *os = &tl.ops[op];
      int64_t one = 0, outb = 0;
      int nmm = 0;
      tpu_diag dd;
      for (int q = 0; q < p->ninsns; q++) {
        const tpu_insn *x = &p->insns[q];
        if (x->op != op) continue;
        if (x->opc == TPU_ISA_MATMUL && ++nmm == 1) CHECK(tpu_timing_matmul_cycles(x, &c, &one, &dd) == TPU_OK);
        if (x->opc == TPU_ISA_DMA_OUT && !x->onchip) outb = x->bytes;
      }
      const double bpc = tpu_chip_hbm_stream_bw(&c) / c.clock_hz;
      const double out_pass = p->ops[op].out_scale * (double)outb * (double)tiles / bpc;
      const int64_t dma = os->unit_cycles[TPU_UNIT_DMA_IN] + os->unit_cycles[TPU_UNIT_DMA_OUT];
      printf("  %lld cycles: MXU %lld (one product %lld), DMA in %lld + out %lld (out pass %.0f), vector %lld\n",
             (long long)os->cycles, (long long)os->unit_cycles[TPU_UNIT_MXU], (long long)one,
             (long long)os->unit_cycles[TPU_UNIT_DMA_IN], (long long)os->unit_cycles[TPU_UNIT_DMA_OUT], out_pass,
             (long long)(os->unit_cycles[TPU_UNIT_VPU] + os->unit_cycles[TPU_UNIT_EUP]));
      CHECK(one > 0 && os->unit_cycles[TPU_UNIT_MXU] == 2 * one);
      CHECK(fabs((double)os->unit_cycles[TPU_UNIT_DMA_OUT] - out_pass) <= 0.01 * out_pass);
      /* a matmul kernel whose MXU streams x from HBM and that writes g to HBM starts after
       * kernel_overhead_s and the three matmul start costs (timing.c kernel_start) */
      const int64_t start = llround(c.kernel_overhead_s * c.clock_hz) + llround(c.matmul_base_s * c.clock_hz) +
                            llround(c.matmul_overhead_s * c.clock_hz) + llround(c.matmul_write_s * c.clock_hz);
      CHECK(llabs(os->cycles - (dma + start)) <= 2);
      tpu_timeline_free(&tl);
    }
    CHECK(roundtrip(p, "streamed_epilogue"));
    tpu_program_free(p);
    tpu_module_free(m);
  }
}

/* A gather's relayout copy of its table (relayout.c gather_layout) is a vector kernel whose
 * result stays in VMEM for the gather on a one-core chip (the XLA TPU compiler's copy of
 * f32[64,30522] for x[:, i] writes memory space S(1) on v5e): the table crosses HBM once,
 * read; on a megacore chip (v5p) the copy goes through HBM (tile.c relayout_kernel). */
static void gather_table_in_vmem(void) {
  const char *src = "HloModule m\nENTRY e {\n t = f32[64,30522]{1,0} parameter(0)\n i = s32[7,1] parameter(1)\n"
                    " ROOT g = f32[64,7] gather(t, i), offset_dims={0}, collapsed_slice_dims={1}, start_index_map={1}, "
                    "index_vector_dim=1, slice_sizes={64,1}\n}\n";
  const char *chips[] = {"v5e", "v5p"};
  for (int k = 0; k < 2; k++) {
    tpu_chip c;
    tpu_module *m = NULL;
    tpu_program *p = compile_for_with(chips[k], src, 1, &c, &m);
    if (p) {
      tpu_timeline tl;
      tpu_diag d;
      CHECK(tpu_timing_run(p, &c, 0, &tl, &d) == TPU_OK);
      const double table = 64.0 * 30592 * 4; /* row-major, 30522 lanes padded to 30592 */
      int h = hbm_named(p, "copy.gather_layout");
      printf("gather's table copy on %s: %s, %.0f HBM bytes (table %.0f)\n", chips[k], h < 0 ? "VMEM" : "HBM",
             tl.hbm_bytes, table);
      CHECK(op_named(p, "copy.gather_layout") >= 0);
      if (k == 0) {
        CHECK_EQ_INT(h, -1);
        CHECK(tl.hbm_bytes >= table && tl.hbm_bytes < 1.01 * table);
      } else {
        CHECK(h >= 0);
        CHECK(tl.hbm_bytes > 2.5 * table);
      }
      tpu_timeline_free(&tl);
    }
    tpu_program_free(p);
    tpu_module_free(m);
  }
}

/* A pooling window kernel (layout.c pool_window; the compiler's depthwise window emitter)
 * starts window_start_cycles later than a stream kernel and reads its prefetched input in
 * VMEM in place, paying no vmem_read_cost: the compiler's bf16[64,20,20,128] 3x3 stride-2
 * max pool from VMEM takes 12,056 cycles on v5e, 34,398 reading HBM (its 6.5 MB at the
 * stream rate would be 14,800). */
/* Parameter copies after the first read their parameter prefetched into VMEM (tile.c
 * prefetched_param_copy): the compiler copies s8[7,16] from HBM, then s8[1,16] and s8[7,16]
 * out of VMEM, on v5e as windowed VMEM copies (100 cycles, no kernel start), on v5p into HBM
 * with one kernel start (not a relayout's two); v4 reads CMEM, timed as HBM (all three alike)
 * (concat_ax0_7x16_1x16_7x16_128x16_s8; libtpu probes of f32 and bf16 concatenations alike). */
static void prefetched_param_copies(void) {
  const char *src = "HloModule m\nENTRY e {\n a = s8[7,16]{1,0} parameter(0)\n b = s8[1,16]{1,0} parameter(1)\n"
                    " c = s8[7,16]{1,0} parameter(2)\n d = s8[128,16] parameter(3)\n"
                    " ROOT r = s8[143,16] concatenate(a, b, c, d), dimensions={0}\n}\n";
  const char *chips[] = {"v5e", "v5p", "v4"};
  const char *names[] = {"copy.relayout", "copy.relayout.1", "copy.relayout.2"};
  for (int k = 0; k < 3; k++) {
    tpu_chip c;
    tpu_module *m = NULL;
    tpu_program *p = compile_for_with(chips[k], src, 1, &c, &m);
    CHECK(p != NULL);
    for (int i = 0; p && i < 3; i++) {
      int op = op_named(p, names[i]);
      CHECK(op >= 0);
      if (op < 0) continue;
      const tpu_prog_op *o = &p->ops[op];
      printf("%s %s: start %s, relayout %d\n", chips[k], names[i], o->scalar ? "none" : "paid", o->relayout);
      int later = i > 0;
      if (k == 0) CHECK_EQ_INT(o->scalar, later);
      if (k == 1) CHECK_EQ_INT(o->relayout, !later);
      if (k == 2) CHECK_EQ_INT(o->relayout, 1);
    }
    tpu_program_free(p);
    tpu_module_free(m);
  }
}

/* Cross-program prefetch between weights of one size (vmem_assign.c, XLA's
 * DefaultCrossProgramPrefetchBufferIntervalComparator): the one whose readers' results hold
 * more elements, then the one whose last reader runs first, whatever the parameter order.
 * libtpu (v4, v5e, v5p, v6e) prefetches w, parameter(1), of an LSTM-like step whose first
 * matmul reads w and second u (both results [48,1536]), and a, parameter(1), where b's
 * reader reduces its product to a scalar before a's reader writes [96,640]; tpusim took
 * parameter(0) in both before (u, b). */
static void cross_program_prefetch_ties(void) {
  const char *srcs[2] = {
      "HloModule m\nENTRY e {\n u = bf16[512,1536] parameter(0)\n w = bf16[512,1536] parameter(1)\n"
      " h = bf16[48,512] parameter(2)\n x = bf16[48,512] parameter(3)\n"
      " dx = bf16[48,1536] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      " s = bf16[48,512] slice(dx), slice={[0:48],[0:512]}\n g = bf16[48,512] tanh(s)\n"
      " hg = bf16[48,512] multiply(h, g)\n"
      " dh = bf16[48,1536] dot(hg, u), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      " ROOT o = bf16[48,1536] add(dx, dh)\n}\n",
      "HloModule m\nadd { p = f32[] parameter(0)\n q = f32[] parameter(1)\n ROOT s = f32[] add(p, q) }\n"
      "ENTRY e {\n b = bf16[256,640] parameter(0)\n a = bf16[256,640] parameter(1)\n"
      " x = bf16[8,256] parameter(2)\n y = bf16[96,256] parameter(3)\n z = f32[] constant(0)\n"
      " d1 = f32[8,640] dot(x, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      " r = f32[] reduce(d1, z), dimensions={0,1}, to_apply=add\n rc = bf16[] convert(r)\n"
      " rb = bf16[96,256] broadcast(rc), dimensions={}\n yb = bf16[96,256] multiply(y, rb)\n"
      " ROOT d2 = bf16[96,640] dot(yb, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n"};
  const char *want[2] = {"w", "a"};
  const char *chips[2] = {"v5e", "v6e"};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      tpu_chip c;
      tpu_module *m = NULL;
      tpu_program *p = compile_for(chips[j], srcs[i], &c, &m);
      CHECK(p != NULL);
      if (p) {
        const char *who = p->xprefetch_bytes ? p->hbm[p->xprefetch_hbm].name : "-";
        printf("tie %d on %s: prefetched %s\n", i, chips[j], who);
        CHECK_EQ_STR(who, want[i]);
        tpu_program_free(p);
      }
      tpu_module_free(m);
    }
}

/* A top-k's results read through get-tuple-element stay in VMEM between kernels on a
 * one-core chip, as a multi-output fusion's do (vmem_assign.c result_of): the XLA TPU
 * compiler writes them to memory space S(1) on v5e and v6e (moe_top2_fwd_*'s `fusion.27`,
 * s32[1024,2]{0,1:T(2,128)S(1)}; libtpu probes off the corpus,
 * bench/fidelity/probes/topk_vmem.py: 6 of 6 routings on both). The MoE mask kernel reading
 * the indices then reads nothing from HBM and pays its whole per-element stream pass, as a
 * resident kernel (the compiler's 57,664 cycles on v5e for moe_top2_fwd_b4s256d512e8f1024's
 * bf16[1024,8,320] mask, tpusim 9,429 with the indices in HBM). Fails with
 * TPUSIM_NO_TOPK_VMEM=1 (the indices and values in HBM, the mask kernel below 20,000). */
static void topk_results_in_vmem(void) {
  const char *src =
      "HloModule m\nadd { p = f32[] parameter(0)\n q = f32[] parameter(1)\n ROOT s = f32[] add(p, q) }\n"
      "ENTRY e {\n x = f32[1024,8] parameter(0)\n y = bf16[1024,256] parameter(1)\n"
      " t = (f32[1024,2], s32[1024,2]) topk(x), k=2, largest=true\n"
      " i = s32[1024,2] get-tuple-element(t), index=1\n"
      " ib = s32[1024,2,8,320] broadcast(i), dimensions={0,1}\n"
      " io = s32[1024,2,8,320] iota(), iota_dimension=3\n"
      " eq = pred[1024,2,8,320] compare(ib, io), direction=EQ\n"
      " c = f32[1024,2,8,320] convert(eq)\n z = f32[] constant(0)\n"
      " r = f32[1024,8,320] reduce(c, z), dimensions={1}, to_apply=add\n"
      " mk = bf16[1024,8,320] convert(r)\n"
      " ROOT o = bf16[8,320,256] dot(mk, y), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n}\n";
  for (int off = 0; off < 2; off++) {
    if (off) setenv("TPUSIM_NO_TOPK_VMEM", "1", 1);
    tpu_chip c;
    tpu_module *m = NULL;
    tpu_program *p = compile_for_with("v5e", src, 1, &c, &m);
    if (p) {
      tpu_timeline tl;
      tpu_diag d;
      CHECK(tpu_timing_run(p, &c, 0, &tl, &d) == TPU_OK);
      int topk = op_named(p, "t"), mask = op_named(p, "fusion"), to_hbm = 0;
      CHECK(topk >= 0 && mask >= 0);
      for (int i = 0; i < p->ninsns; i++)
        if (p->insns[i].op == topk && p->insns[i].opc == TPU_ISA_DMA_OUT && !p->insns[i].onchip) to_hbm = 1;
      int64_t mc = mask >= 0 ? tl.ops[mask].cycles : -1;
      printf("top-k results%s: %s, mask kernel %lld cycles\n", off ? " (rule off)" : "", to_hbm ? "HBM" : "VMEM",
             (long long)mc);
      CHECK_EQ_INT(to_hbm, off);
      if (off) CHECK(mc > 0 && mc < 20000); /* 9,843: the pass spread over the indices' HBM read */
      else CHECK(mc > 40000);               /* 49,624: the whole pass, as the compiler's 57,664 */
      tpu_timeline_free(&tl);
    }
    tpu_program_free(p);
    tpu_module_free(m);
  }
  unsetenv("TPUSIM_NO_TOPK_VMEM");
}

int main(void) {
  if (!closed_form_v5e(&g_chip)) return 1;
  cross_program_prefetch();
  cross_program_prefetch_ties();
  step_prefetch();
  copy_beside_reader();
  scoped_vmem();
  vmem_through_bitcast();
  copy_into_vmem();
  copy_done_on_chip();
  vmem_residency(256);    /* 1 MiB */
  no_residency_v4();
  compiled_memory_space();
  compiled_tuple_memory_space();
  vmem_residency(65536);  /* 256 MiB, more than v5e's VMEM */
  matmul_result_on_chip();
  vmem_read_cost();
  streamed_epilogue();
  gather_table_in_vmem();
  prefetched_param_copies();
  topk_results_in_vmem();
  CHECK_DONE();
}
