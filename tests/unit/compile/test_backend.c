/* The back end: every conformance program (unfused, and after the HLO passes) lowers,
 * its asm round-trips, and it times without error; HBM overflow fails with the message;
 * tile/layout/buffer-assign facts on small programs (memory spaces: test_vmem.c). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "unit/compile/backend_util.h"

static tpu_chip g_chip;

static int roundtrip(const tpu_program *p, const char *name) { return program_roundtrip(p, name, &g_chip); }
static tpu_program *compile_src(const char *src, tpu_module **m) { return compile_src_on(src, &g_chip, m); }

/* Programs whose while loops have data-dependent trip counts: timing must refuse them,
 * naming the loop (docs/timing.md); everything else must time. */
static int has_dynamic_loop(const tpu_program *p, const char **name) {
  for (int i = 0; i < p->ninsns; i++)
    if (p->insns[i].opc == TPU_ISA_LOOP && p->insns[i].trips < 0) {
      *name = p->insns[i].what;
      return 1;
    }
  return 0;
}

static void conformance(int run_hlo_passes) {
  const char *dir = "tests/conformance/cases";
  DIR *dd = opendir(dir);
  CHECK(dd != NULL);
  if (!dd) return;
  struct dirent *e;
  int n = 0, dyn = 0;
  while ((e = readdir(dd))) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/prog.hlo", dir, e->d_name);
    char *src = test_read_file(path);
    if (!src) continue;
    tpu_module *m = NULL;
    tpu_diag d;
    CHECK(tpu_hlo_parse(path, src, strlen(src), &m, &d) == TPU_OK && tpu_ir_verify(m, &d) == TPU_OK);
    free(src);
    if (!m) continue;
    tpu_compile_opts o;
    memset(&o, 0, sizeof o);
    o.chip = &g_chip;
    o.precision_override = -1;
    tpu_program *p = NULL;
    tpu_status st = run_hlo_passes ? tpu_compile(m, &o, &p, &d) : tpu_compile_backend(m, &o, &p, &d);
    if (st != TPU_OK) {
      char buf[1200];
      tpu_diag_format(&d, buf, sizeof buf);
      fprintf(stderr, "  %s: compile failed: %s\n", e->d_name, buf);
      CHECK(st == TPU_OK);
      tpu_module_free(m);
      continue;
    }
    CHECK(roundtrip(p, e->d_name));
    tpu_timeline tl;
    const char *loop = NULL;
    st = tpu_timing_run(p, &g_chip, 1, &tl, &d);
    if (has_dynamic_loop(p, &loop)) {
      dyn++;
      CHECK(st == TPU_ERR_UNSUPPORTED);
      CHECK(strstr(d.msg, loop) != NULL);
      /* With the count supplied, it times. */
      CHECK(tpu_program_set_loop_trips(p, loop, 3) >= 1);
      st = tpu_timing_run(p, &g_chip, 1, &tl, &d);
    }
    if (st != TPU_OK) {
      char buf[1200];
      tpu_diag_format(&d, buf, sizeof buf);
      fprintf(stderr, "  %s: timing failed: %s\n", e->d_name, buf);
    }
    CHECK(st == TPU_OK);
    if (st == TPU_OK) {
      CHECK(tl.total_cycles > 0);
      tpu_timeline_free(&tl);
    }
    tpu_program_free(p);
    tpu_module_free(m);
    n++;
  }
  closedir(dd);
  printf("conformance (%s): %d programs lowered and timed, %d with data-dependent loops\n",
         run_hlo_passes ? "after HLO passes" : "unfused", n, dyn);
  CHECK(n >= 60);
}

static void hbm_overflow(void) {
  /* 3 x 8 GiB of f32 on a 16 GiB chip. */
  tpu_module *m = parse(
      "HloModule big\n"
      "ENTRY e {\n"
      "  a = f32[65536,32768] parameter(0)\n"
      "  b = f32[65536,32768] parameter(1)\n"
      "  ROOT c = f32[65536,32768] add(a, b)\n"
      "}\n");
  CHECK(m != NULL);
  if (!m) return;
  tpu_diag d;
  tpu_program *p = compile(m, &g_chip, &d);
  CHECK(p == NULL);
  CHECK_EQ_INT(d.status, TPU_ERR_LIMIT);
  char want[200];
  snprintf(want, sizeof want, "program needs %lld bytes of HBM; v5e has %lld",
           (long long)3 * 65536 * 32768 * 4, (long long)g_chip.hbm_bytes);
  CHECK(strstr(d.msg, want) != NULL);
  CHECK(strstr(d.msg, "'c'") != NULL);
  if (!strstr(d.msg, want)) fprintf(stderr, "  got: %s\n", d.msg);
  tpu_program_free(p);
  tpu_module_free(m);
}

static void reuse_and_layout(void) {
  /* A chain x -> a -> b -> c: a dies once b exists, so c reuses a's bytes. */
  tpu_module *m = parse(
      "HloModule chain\n"
      "ENTRY e {\n"
      "  x = f32[3,100] parameter(0)\n"
      "  a = f32[3,100] negate(x)\n"
      "  b = f32[3,100] exponential(a)\n"
      "  ROOT c = f32[3,100] negate(b)\n"
      "}\n");
  CHECK(m != NULL);
  if (!m) return;
  tpu_diag d;
  tpu_program *p = compile(m, &g_chip, &d);
  CHECK(p != NULL);
  if (p) {
    /* f32[3,100] pads to a (4,128) tile, the compiler's T(4,128) for 3 rows: 2048 bytes.
     * a and b stay in VMEM (vmem_residency). */
    CHECK_EQ_INT(p->nhbm, 2);
    for (int i = 0; i < p->nhbm; i++) CHECK_EQ_INT(p->hbm[i].bytes, 2048);
    CHECK_EQ_INT(p->hbm_footprint, 2 * 2048);
    CHECK_EQ_INT(p->nops, 3);
    CHECK_NEAR(p->ops[0].flops, 300, 0);
    CHECK_NEAR(p->ops[0].padded_flops, 1024, 0);
    CHECK_NEAR(p->ops[0].bytes, 2400, 0);
    CHECK_NEAR(p->ops[0].padded_bytes, 4096, 0);
    /* exponential: one EUP push per register. */
    int eup = 0;
    for (int i = 0; i < p->ninsns; i++)
      if (p->insns[i].opc == TPU_ISA_EUP && p->insns[i].op == 1) eup++;
    CHECK_EQ_INT(eup, 1);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* The same chain with values larger than VMEM: they go through HBM. Each elementwise op
 * writes over the operand that dies at it, and the result's buffer holds them all (XLA's
 * buffer assignment: a temporary may live in an output allocation before the output is
 * written): the argument and the output, no temporary heap. */
static void hbm_reuse(void) {
  tpu_module *m = parse(
      "HloModule chain\n"
      "ENTRY e {\n"
      "  x = f32[40960,1024] parameter(0)\n"
      "  a = f32[40960,1024] negate(x)\n"
      "  b = f32[40960,1024] exponential(a)\n"
      "  ROOT c = f32[40960,1024] negate(b)\n"
      "}\n");
  CHECK(m != NULL);
  if (!m) return;
  tpu_diag d;
  tpu_program *p = compile(m, &g_chip, &d);
  CHECK(p != NULL);
  if (p) {
    const int64_t sz = (int64_t)40960 * 1024 * 4; /* 160 MiB each, VMEM is 128 MiB */
    CHECK_EQ_INT(p->nhbm, 4);
    for (int i = 0; i < p->nhbm; i++) CHECK_EQ_INT(p->hbm[i].bytes, sz);
    CHECK_EQ_INT(p->hbm[3].offset, p->hbm[1].offset); /* c takes a's place */
    CHECK_EQ_INT(p->hbm[2].offset, p->hbm[1].offset); /* and b's */
    CHECK_EQ_INT(p->hbm_footprint, 2 * sz);
    CHECK_EQ_INT(p->hbm_arg, sz);
    CHECK_EQ_INT(p->hbm_out, sz);
    CHECK_EQ_INT(p->hbm_temp, 0);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

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

/* Buffer `name` shares no byte with any other buffer of the program. */
static int exclusive(const tpu_program *p, const char *name) {
  int b = -1;
  for (int i = 0; i < p->nhbm; i++)
    if (!strcmp(p->hbm[i].name, name)) b = i;
  if (b < 0) return 0;
  for (int i = 0; i < p->nhbm; i++)
    if (i != b && p->hbm[i].offset < p->hbm[b].offset + p->hbm[b].bytes &&
        p->hbm[b].offset < p->hbm[i].offset + p->hbm[i].bytes)
      return 0;
  return 1;
}

static void trip_counts(void) {
  tpu_module *m = parse(
      "HloModule w\n"
      "body {\n"
      "  p = (s32[], f32[8]) parameter(0)\n"
      "  i = s32[] get-tuple-element(p), index=0\n"
      "  one = s32[] constant(3)\n"
      "  i2 = s32[] add(i, one)\n"
      "  x = f32[8] get-tuple-element(p), index=1\n"
      "  y = f32[8] exponential(x)\n"
      "  ROOT t = (s32[], f32[8]) tuple(i2, y)\n"
      "}\n"
      "cond {\n"
      "  p = (s32[], f32[8]) parameter(0)\n"
      "  i = s32[] get-tuple-element(p), index=0\n"
      "  n = s32[] constant(20)\n"
      "  ROOT lt = pred[] compare(i, n), direction=LT\n"
      "}\n"
      "ENTRY e {\n"
      "  x = f32[8] parameter(0)\n"
      "  z = s32[] constant(2)\n"
      "  t = (s32[], f32[8]) tuple(z, x)\n"
      "  ROOT w = (s32[], f32[8]) while(t), condition=cond, body=body\n"
      "}\n");
  CHECK(m != NULL);
  if (!m) return;
  tpu_diag d;
  tpu_program *p = compile(m, &g_chip, &d);
  CHECK(p != NULL);
  if (p) {
    int found = 0;
    for (int i = 0; i < p->ninsns; i++)
      if (p->insns[i].opc == TPU_ISA_LOOP && p->insns[i].what && !strcmp(p->insns[i].what, "w")) {
        CHECK_EQ_INT(p->insns[i].trips, 6); /* i = 2, 5, 8, 11, 14, 17 */
        found = 1;
      }
    CHECK(found);
    /* Constants (used on every iteration) and the input keep their bytes to the end. */
    CHECK(exclusive(p, "one"));
    CHECK(exclusive(p, "n"));
    CHECK(exclusive(p, "z"));
    CHECK(exclusive(p, "x"));
    tpu_timeline tl;
    CHECK(tpu_timing_run(p, &g_chip, 0, &tl, &d) == TPU_OK);
    int y = -1;
    for (int i = 0; i < p->nops; i++)
      if (!strcmp(p->ops[i].name, "y")) y = i;
    CHECK(y >= 0);
    if (y >= 0) CHECK_EQ_INT(tl.ops[y].count, 6);
    tpu_timeline_free(&tl);
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

/* dynamic-slice costs the slice's registers; dynamic-update-slice writes its update in
 * place into the operand's buffer when that dies with it. */
static void dynamic_slices(void) {
  tpu_module *m = parse(
      "HloModule ds\n"
      "ENTRY e {\n"
      "  a = f32[80,1024,1024] parameter(0)\n"
      "  u = f32[1,1024,1024] parameter(1)\n"
      "  i = s32[] parameter(2)\n"
      "  z = s32[] constant(0)\n"
      "  s = f32[1,1024,1024] dynamic-slice(a, i, z, z), dynamic_slice_sizes={1,1024,1024}\n"
      "  n = f32[80,1024,1024] negate(a)\n"
      "  d = f32[80,1024,1024] dynamic-update-slice(n, u, i, z, z)\n"
      "  ROOT t = (f32[1,1024,1024], f32[80,1024,1024]) tuple(s, d)\n"
      "}\n");
  CHECK(m != NULL);
  if (!m) return;
  tpu_diag d;
  tpu_program *p = compile(m, &g_chip, &d);
  CHECK(p != NULL);
  if (p) {
    tpu_timeline tl;
    CHECK(tpu_timing_run(p, &g_chip, 0, &tl, &d) == TPU_OK);
    int s = -1, du = -1;
    for (int i = 0; i < p->nops; i++) {
      if (!strcmp(p->ops[i].name, "s")) s = i;
      if (!strcmp(p->ops[i].name, "d")) du = i;
    }
    CHECK(s >= 0 && du >= 0);
    /* f32[1,1024,1024]: 1024 registers of 8 x 128 words, one copy each. */
    if (s >= 0) { /* rounded up per tile of the loop */
      CHECK(tl.ops[s].unit_cycles[TPU_UNIT_VPU] >= 1024);
      CHECK(tl.ops[s].unit_cycles[TPU_UNIT_VPU] <= 1024 + p->ops[s].tiles);
    }
    if (du >= 0) {
      /* the update's 1024 registers, split over the tile loop (rounded up per tile) */
      CHECK(tl.ops[du].unit_cycles[TPU_UNIT_VPU] >= 1024);
      CHECK(tl.ops[du].unit_cycles[TPU_UNIT_VPU] <= 1024 + p->ops[du].tiles);
      /* update in, slice out, plus the three scalar indices, each padded to one row of
       * 128 lanes (512 bytes; rank <= 1 arrays are not padded to a full 8 x 128 tile) */
      CHECK_NEAR(tl.ops[du].hbm_bytes, 2.0 * 1024 * 1024 * 4 + 3 * 512, 64);
    }
    int hn = -1, hd = -1;
    for (int i = 0; i < p->nhbm; i++) {
      if (!strcmp(p->hbm[i].name, "n")) hn = i;
      if (!strcmp(p->hbm[i].name, "d")) hd = i;
    }
    CHECK(hn >= 0);
    CHECK_EQ_INT(hd, -1); /* no buffer of its own */
    for (int i = 0; hn >= 0 && i < p->ninsns; i++)
      if (p->insns[i].opc == TPU_ISA_DMA_OUT && p->insns[i].op == du) CHECK_EQ_INT(p->insns[i].hbm, hn);
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

/* Scalar-only ops (offsets, loop counters) are the scalar unit's work: no kernel start cost.
 * A program of scalars times the same with and without kernel_overhead_s; one with an array
 * op pays it. */
static int64_t cycles_with_overhead(const char *src, double kov) {
  tpu_chip chip = g_chip;
  chip.kernel_overhead_s = kov;
  tpu_timeline tl;
  if (!time_src(src, &chip, &tl)) return -1;
  int64_t c = tl.total_cycles;
  tpu_timeline_free(&tl);
  return c;
}

static void scalar_ops(void) {
  const char *sc = "HloModule s\nENTRY e {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n"
                   "  c = s32[] add(a, b)\n  ROOT d = s32[] multiply(c, a)\n}\n";
  const char *ar = "HloModule s\nENTRY e {\n  a = f32[8] parameter(0)\n  b = f32[8] parameter(1)\n"
                   "  c = f32[8] add(a, b)\n  ROOT d = f32[8] multiply(c, a)\n}\n";
  int64_t s0 = cycles_with_overhead(sc, 0), s1 = cycles_with_overhead(sc, 1e-6);
  int64_t a0 = cycles_with_overhead(ar, 0), a1 = cycles_with_overhead(ar, 1e-6);
  CHECK(s0 > 0 && s1 == s0);
  CHECK(a0 > 0 && a1 >= a0 + (int64_t)(1e-6 * g_chip.clock_hz) - 1);
}

/* Layout assignment: a value computed inside the program whose given layout would pad the
 * lanes takes the tiling that pads least, as XLA's TPU compiler lays an attention head's
 * bf16[8,12,512,64] out {2,3,1,0}, and so do the program's results (entry_computation_layout);
 * parameters keep the layout given (the fuse pass gives them theirs, test_passes). */
static void free_intermediate_layout(void) {
  tpu_module *m;
  tpu_program *p = compile_src(
      "HloModule heads\n"
      "ENTRY e {\n"
      "  p = bf16[8,12,512,512]{3,2,1,0} parameter(0)\n"
      "  v = bf16[8,12,512,64]{3,2,1,0} parameter(1)\n"
      "  w = bf16[64,64]{1,0} parameter(2)\n"
      "  o = bf16[8,12,512,64]{3,2,1,0} dot(p, v), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, "
      "rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n"
      "  ROOT r = bf16[8,12,512,64]{3,2,1,0} dot(o, w), lhs_contracting_dims={3}, rhs_contracting_dims={0}\n"
      "}\n",
      &m);
  if (p) {
    int o = op_named(p, "o"), r = op_named(p, "r");
    CHECK(o >= 0 && r >= 0);
    const double heads = 8.0 * 12 * 512 * 64 * 2;  /* o unpadded: 512 in the lanes */
    const double v_pad = 8.0 * 12 * 512 * 128 * 2; /* the parameter: 64 padded to 128 lanes */
    if (o >= 0) CHECK_NEAR(p->ops[o].padded_bytes, 8.0 * 12 * 512 * 512 * 2 + v_pad + heads, 0);
    if (r >= 0) CHECK_NEAR(p->ops[r].padded_bytes, heads + 64.0 * 128 * 2 + heads, 0); /* r leaves unpadded */
  }
  tpu_program_free(p);
  tpu_module_free(m);
  /* a value computed inside the program whose minor dimension is 1 (a norm's rsqrt of its
   * f32[4096,1] row statistics, a kernel of its own): the rows in the lanes, as the compiler's
   * f32[4096,1]{0,1:T(1,128)}, 16 kB, not 4096 rows padded to 128 lanes (2 MB) */
  p = compile_src("HloModule st\nENTRY e {\n  x = f32[4096,1] parameter(0)\n  y = f32[4096,1024] parameter(1)\n"
                  "  s = f32[4096,1] rsqrt(x)\n  r = f32[4096] reshape(s)\n"
                  "  b = f32[4096,1024] broadcast(r), dimensions={0}\n  ROOT o = f32[4096,1024] multiply(y, b)\n}\n",
                  &m);
  if (p) {
    int st = op_named(p, "s");
    CHECK(st >= 0);
    if (st >= 0) {
      printf("rsqrt of f32[4096,1] inside the program: %.0f padded bytes\n", p->ops[st].padded_bytes);
      /* x, a parameter given without a layout, is read row-major (2 MB); s is written in 16 kB */
      CHECK_NEAR(p->ops[st].padded_bytes, 4096.0 * 128 * 4 + 4096.0 * 4, 0);
    }
  }
  tpu_program_free(p);
  tpu_module_free(m);
  /* a rank-2 result: f32[2048,7] leaves as {0,1} (7 rows padded to 8, 2048 in the lanes),
   * not with 7 elements padded to 128 lanes */
  p = compile_src("HloModule r2\nENTRY e {\n  x = f32[2048,7]{0,1} parameter(0)\n  ROOT a = f32[2048,7] abs(x)\n}\n", &m);
  if (p) {
    int a = op_named(p, "a");
    CHECK(a >= 0);
    if (a >= 0) CHECK_NEAR(p->ops[a].padded_bytes, 2 * 8.0 * 2048 * 4, 0);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* The per-element stream costs (xbytes) of the op named r in program src. */
static double r_xbytes(const char *src) {
  tpu_module *m;
  tpu_program *p = compile_src(src, &m);
  double x = -1;
  int r = p ? op_named(p, "r") : -1;
  CHECK(r >= 0);
  if (r >= 0) x = p->ops[r].xbytes;
  tpu_program_free(p);
  tpu_module_free(m);
  return x;
}

/* An op reading a parameter through the copy-start / copy-done of a compiled program's
 * prefetch has nothing to fuse with either: it pays the chip's lone-op stream cost as it
 * does reading the parameter itself (the XLA TPU compiler's prefetched f32[4096,4096]
 * reduce: 350,752 cycles on v6e, its cost reading HBM). */
static void lone_through_prefetch(void) {
  double plain = r_xbytes(
      "HloModule plain\n"
      "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n"
      "  x = f32[4096,4096]{1,0} parameter(0)\n"
      "  z = f32[] constant(0)\n"
      "  ROOT r = f32[] reduce(x, z), dimensions={0,1}, to_apply=add\n"
      "}\n");
  double pref = r_xbytes(
      "HloModule pref\n"
      "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n"
      "  x = f32[4096,4096]{1,0} parameter(0)\n"
      "  cs = (f32[4096,4096]{1,0}, f32[4096,4096]{1,0}, u32[]) copy-start(x), cross_program_prefetch_index=0\n"
      "  z = f32[] constant(0)\n"
      "  cd = f32[4096,4096]{1,0} copy-done(cs)\n"
      "  ROOT r = f32[] reduce(cd, z), dimensions={0,1}, to_apply=add\n"
      "}\n");
  const double n = 4096.0 * 4096;
  CHECK_NEAR(plain, (g_chip.stream_pass_bytes + g_chip.lone_op_bytes) * n, 1);
  CHECK_NEAR(pref, plain, 1);
}

/* A compiled program's copy that changes the minor dimension is a transpose: it pays the
 * chip's transpose stream cost per element (XLA's f32[8192,8192] {1,0} -> {0,1} copy costs
 * on v6e what its transpose does), from HBM into VMEM (S(1)) too (bf16[2,2048,2048] into VMEM
 * and back out: 93,120 cycles each on v6e); one within VMEM (S(1) on both sides: 2,400
 * cycles) or keeping the minor dimension does not. */
static double copy_xbytes(const char *source_layout, const char *result_layout) {
  char src[700];
  snprintf(src, sizeof src,
           "HloModule cp, is_scheduled=true\n"
           "ENTRY e {\n"
           "  x = f32[1024,1024]{1,0:T(8,128)} parameter(0)\n"
           "  y = f32[1024,1024]{%s} negate(x)\n"
           "  r = f32[1024,1024]{%s} copy(y)\n"
           "  ROOT n = f32[1024,1024]{1,0:T(8,128)} negate(r)\n"
           "}\n", source_layout, result_layout);
  return r_xbytes(src);
}

static void layout_copy_transposes(void) {
  const double n = 1024.0 * 1024;
  CHECK_NEAR(copy_xbytes("1,0:T(8,128)", "0,1:T(8,128)"), g_chip.transpose_bytes * n, 1);
  CHECK_NEAR(copy_xbytes("1,0:T(8,128)", "0,1:T(8,128)S(1)"), g_chip.transpose_bytes * n, 1);
  CHECK_NEAR(copy_xbytes("1,0:T(8,128)S(1)", "0,1:T(8,128)S(1)"), 0, 0);
  CHECK_NEAR(copy_xbytes("1,0:T(8,128)", "1,0:T(8,128)"), 0, 0);
}

/* The busy cycles of unit u for the op named r in program src; -1 when it does not time. */
static int64_t r_unit_cycles(const char *src, tpu_unit u) {
  tpu_module *m = NULL;
  tpu_diag d;
  tpu_timeline tl;
  memset(&tl, 0, sizeof tl);
  tpu_program *p = compile_src(src, &m);
  int r = p ? op_named(p, "r") : -1;
  int64_t c = -1;
  if (r >= 0 && tpu_timing_run(p, &g_chip, 0, &tl, &d) == TPU_OK && r < tl.nops) c = tl.ops[r].unit_cycles[u];
  tpu_timeline_free(&tl);
  tpu_program_free(p);
  tpu_module_free(m);
  return c;
}

/* A compiled program's copy within VMEM that moves the lanes' dimension (a transpose) or
 * only dimensions of size 1 is the compiler's windowed copy: 100 cycles per window of up to
 * 1 MiB and no kernel start (bf16[2,2048,512] {2,1,0} -> {1,2,0} in VMEM: 600 cycles on v5e
 * and v6e); one that keeps the lanes' dimension relays the sublanes out on the vector unit
 * (bf16[8,14,64] {2,0,1} -> {2,1,0}: 1,961 cycles on v5e). Returns the copy's XLU cycles
 * (the windows' time) and in *vpu its vector-unit cycles. */
static int64_t vmem_copy_cycles(const char *shape, const char *from, const char *to, int64_t *vpu) {
  char src[800];
  snprintf(src, sizeof src,
           "HloModule cp, is_scheduled=true\n"
           "ENTRY e {\n"
           "  x = %s{%s:T(8,128)(2,1)} parameter(0)\n"
           "  y = %s{%s:T(8,128)(2,1)S(1)} negate(x)\n"
           "  r = %s{%s:T(8,128)(2,1)S(1)} copy(y)\n"
           "  ROOT n = %s{%s:T(8,128)(2,1)} negate(r)\n"
           "}\n", shape, from, shape, from, shape, to, shape, to);
  *vpu = r_unit_cycles(src, TPU_UNIT_VPU);
  return r_unit_cycles(src, TPU_UNIT_XLU);
}

static void windowed_vmem_copies(void) {
  int64_t tv, ov, sv;
  int64_t t = vmem_copy_cycles("bf16[2,2048,512]", "2,1,0", "1,2,0", &tv);      /* 4 MiB: 4 windows */
  int64_t one = vmem_copy_cycles("bf16[1,1,16,64]", "1,3,2,0", "3,2,1,0", &ov); /* size-1 dims move */
  int64_t sub = vmem_copy_cycles("bf16[8,14,64]", "2,0,1", "2,1,0", &sv);       /* sublanes relaid */
  printf("copies within VMEM: transpose %lld, size-1 move %lld, sublane relayout %lld cycles of XLU windows\n",
         (long long)t, (long long)one, (long long)sub);
  CHECK_EQ_INT((int)t, 400);
  CHECK_EQ_INT((int)tv, 0);
  CHECK_EQ_INT((int)one, 100);
  CHECK_EQ_INT((int)ov, 0);
  CHECK(sub != 100 && sv > 0);
}

/* PartialReduce (jax.lax.approx_max_k on TPU) is an elementwise vector reduction (tile.c):
 * each input value register meets its bin's register once, paying the comparator's ops and
 * one select per array (values, indices), no cross-lane work: f32[64,8192] is 512 registers
 * of 8 x 128, a one-compare comparator and two arrays, 3 ops each: 1,536 vector cycles
 * (within 1 %: the rounding of the kernel's tiles). */
static void partial_reduce_cost(void) {
  const char *src =
      "HloModule pr\n"
      "gt {\n"
      "  a = f32[] parameter(0)\n"
      "  b = f32[] parameter(1)\n"
      "  i = s32[] parameter(2)\n"
      "  j = s32[] parameter(3)\n"
      "  ROOT c = pred[] compare(a, b), direction=GT\n"
      "}\n"
      "ENTRY e {\n"
      "  x = f32[64,8192]{1,0} parameter(0)\n"
      "  ix = s32[64,8192]{1,0} parameter(1)\n"
      "  ninf = f32[] constant(-inf)\n"
      "  m1 = s32[] constant(-1)\n"
      "  ROOT r = (f32[64,256]{1,0}, s32[64,256]{1,0}) custom-call(x, ix, ninf, m1), custom_call_target=\"PartialReduce\", "
      "called_computations={gt}, backend_config={\"log2_reduction\": 5, \"reduction_dim\": 1, \"to_apply_type\": "
      "\"comparator\", \"top_k\": 4, \"recall_target\": 0.950000}\n"
      "}\n";
  tpu_module *m = NULL;
  tpu_program *p = compile_src(src, &m);
  int r = p ? op_named(p, "r") : -1;
  int64_t tiles = r >= 0 ? p->ops[r].tiles : 0;
  tpu_program_free(p);
  tpu_module_free(m);
  int64_t vpu = r_unit_cycles(src, TPU_UNIT_VPU), xlu = r_unit_cycles(src, TPU_UNIT_XLU);
  printf("PartialReduce f32[64,8192] -> 256 bins: %lld vector cycles (closed form 1536; %lld tiles), %lld XLU\n",
         (long long)vpu, (long long)tiles, (long long)xlu);
  CHECK(r >= 0 && tiles >= 1 && tiles < 16);
  CHECK(llabs(vpu - 1536) <= 1536 / 100); /* a 10 % change of the rule fails */
  CHECK_EQ_INT((int)xlu, 0);
}

/* The custom calls the XLA TPU compiler leaves inside its fusions other than top-k
 * (AllocateBuffer: a fusion's output buffer; AssumeGatherIndicesInBound: its operand passed
 * on) cost no vector work: the fusion costs what it costs without them. */
static void fused_custom_calls_cost(void) {
  const char *with =
      "HloModule cc\n"
      "fi {\n"
      "  q0 = s32[64,4096]{1,0} parameter(0)\n"
      "  a = s32[64,4096]{1,0} custom-call(q0), custom_call_target=\"AssumeGatherIndicesInBound\"\n"
      "  ROOT n = s32[64,4096]{1,0} negate(a)\n"
      "}\n"
      "ENTRY e {\n"
      "  i = s32[64,4096]{1,0} parameter(0)\n"
      "  ROOT r = s32[64,4096]{1,0} fusion(i), kind=kLoop, calls=fi\n"
      "}\n";
  const char *without =
      "HloModule cc\n"
      "fi {\n"
      "  q0 = s32[64,4096]{1,0} parameter(0)\n"
      "  ROOT n = s32[64,4096]{1,0} negate(q0)\n"
      "}\n"
      "ENTRY e {\n"
      "  i = s32[64,4096]{1,0} parameter(0)\n"
      "  ROOT r = s32[64,4096]{1,0} fusion(i), kind=kLoop, calls=fi\n"
      "}\n";
  /* the same dynamic-update-slice into a buffer AllocateBuffer makes, or into one passed in */
  const char *alloc_fmt =
      "HloModule ab\n"
      "fa {\n"
      "  %s\n"
      "  p0 = bf16[4,3,28,256]{3,2,1,0} parameter(0)\n"
      "  z = s32[] constant(0)\n"
      "  ROOT d = bf16[4,28,28,256]{3,2,1,0} dynamic-update-slice(buf, p0, z, z, z, z)\n"
      "}\n"
      "ENTRY e {\n"
      "  x = bf16[4,3,28,256]{3,2,1,0} parameter(0)\n"
      "  y = bf16[4,28,28,256]{3,2,1,0} parameter(1)\n"
      "  ROOT r = bf16[4,28,28,256]{3,2,1,0} fusion(x%s), kind=kLoop, calls=fa\n"
      "}\n";
  char alloc[1024], passed[1024];
  snprintf(alloc, sizeof alloc, alloc_fmt,
           "buf = bf16[4,28,28,256]{3,2,1,0} custom-call(), custom_call_target=\"AllocateBuffer\"", "");
  snprintf(passed, sizeof passed, alloc_fmt, "buf = bf16[4,28,28,256]{3,2,1,0} parameter(1)", ", y");
  int64_t w = r_unit_cycles(with, TPU_UNIT_VPU), wo = r_unit_cycles(without, TPU_UNIT_VPU);
  int64_t wx = r_unit_cycles(with, TPU_UNIT_XLU), a = r_unit_cycles(alloc, TPU_UNIT_VPU);
  int64_t ax = r_unit_cycles(alloc, TPU_UNIT_XLU), pa = r_unit_cycles(passed, TPU_UNIT_VPU);
  printf("fused AssumeGatherIndicesInBound: %lld vector cycles (%lld without it), XLU %lld; AllocateBuffer + "
         "dynamic-update-slice: %lld vector cycles (%lld into a buffer passed in), XLU %lld\n", (long long)w,
         (long long)wo, (long long)wx, (long long)a, (long long)pa, (long long)ax);
  CHECK(wo >= 256 && w == wo); /* s32[64,4096]: 256 registers, one negate each */
  CHECK_EQ_INT((int)wx, 0);
  /* into a buffer passed in, the update's 48 registers only (in place); into AllocateBuffer's,
   * the kernel writes its whole result once: one op per register of bf16[4,28,28,256] (1.6 MB,
   * 392 of 4 KiB), and nothing for the custom call (its buffer's 392 registers costed on top
   * would take two ops per register) */
  CHECK_EQ_INT((int)pa, 48);
  CHECK_EQ_INT((int)a, 392);
  CHECK_EQ_INT((int)ax, 0);
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

/* A transcendental's EUP pushes are counted on 32-bit registers: exp of bf16[256,1024]
 * pushes as many as exp of f32[256,1024] (256), and exp itself adds no VPU operation. */
static void eup_width(void) {
  int64_t busy[2][2];
  for (int bf = 0; bf < 2; bf++) {
    char src[300];
    snprintf(src, sizeof src,
             "HloModule e\nENTRY e {\n  x = %s[256,1024] parameter(0)\n  ROOT y = %s[256,1024] exponential(x)\n}\n",
             bf ? "bf16" : "f32", bf ? "bf16" : "f32");
    tpu_module *m = NULL;
    tpu_program *p = compile_src(src, &m);
    CHECK(p != NULL);
    busy[bf][0] = busy[bf][1] = -1;
    tpu_timeline tl;
    if (p && time_program(p, &g_chip, &tl)) {
      busy[bf][0] = tl.busy[TPU_UNIT_EUP];
      busy[bf][1] = tl.busy[TPU_UNIT_VPU];
      tpu_timeline_free(&tl);
    }
    tpu_program_free(p);
    tpu_module_free(m);
  }
  CHECK_EQ_INT(busy[0][0], 256); /* closed form: one push per cycle */
  CHECK_EQ_INT(busy[1][0], 256);
  CHECK_EQ_INT(busy[0][1], 0);
  CHECK_EQ_INT(busy[1][1], 0);
}

/* A vector kernel's broadcast along the lanes (a per-row statistic spread over its row)
 * costs the chip's row_broadcast_cycles per row on the HBM port, split over its
 * TensorCores: v6e times x * s[:, None] over f32 [65536,128] 8,192 cycles (1/8 per row)
 * above x * 2 and over [8192,1024] 1,024 (gen.py row_broadcast); a column statistic
 * (x * t[None, :]) adds nothing of the kind, nor does a chip without the field. */
static void row_broadcasts(void) {
  tpu_chip v6e;
  tpu_diag d;
  CHECK(tpu_chip_load("v6e", &v6e, &d) == TPU_OK);
  CHECK_NEAR(v6e.row_broadcast_cycles, 0.125, 1e-12);
  const char *fmt =
      "HloModule r\nENTRY e {\n  x = f32[%d,%d] parameter(0)\n  s = f32[%d] parameter(1)\n"
      "  b = f32[%d,%d] broadcast(s), dimensions={%d}\n  ROOT y = f32[%d,%d] multiply(x, b)\n}\n";
  int widths[2] = {128, 1024};
  for (int with = 1; with >= 0; with--) {
    if (!with) v6e.row_broadcast_cycles = 0;
    for (int w = 0; w < 2; w++) {
      int c = widths[w], r = (1 << 23) / c;
      int64_t cyc[3] = {0, 0, 0}; /* x * s[None, :] with s of one element (the floor), rows, columns */
      for (int k = 0; k < 3; k++) {
        char src[512];
        int n = k == 0 ? 1 : k == 1 ? r : c;
        snprintf(src, sizeof src, fmt, r, c, n, r, c, k == 1 ? 0 : 1, r, c);
        if (k == 0) /* a one-element statistic: x times a constant-like column */
          snprintf(src, sizeof src,
                   "HloModule r\nENTRY e {\n  x = f32[%d,%d] parameter(0)\n  s = f32[] parameter(1)\n"
                   "  b = f32[%d,%d] broadcast(s), dimensions={}\n  ROOT y = f32[%d,%d] multiply(x, b)\n}\n",
                   r, c, r, c, r, c);
        /* through the HLO passes, as `tpusim run`: the broadcast fuses into the multiply */
        tpu_module *m = parse(src);
        CHECK(m != NULL);
        tpu_compile_opts o;
        memset(&o, 0, sizeof o);
        o.chip = &v6e;
        o.precision_override = -1;
        tpu_program *p = NULL;
        CHECK(m && tpu_compile(m, &o, &p, &d) == TPU_OK);
        tpu_timeline tl;
        if (p && time_program(p, &v6e, &tl)) {
          CHECK_EQ_INT(p->nops, 1);
          cyc[k] = tl.total_cycles;
          tpu_timeline_free(&tl);
        }
        tpu_program_free(p);
        tpu_module_free(m);
      }
      /* the statistic's own read: its bytes at the streaming rate, and a little slack */
      double bpc = tpu_chip_hbm_stream_bw(&v6e) / v6e.clock_hz;
      int64_t rd_rows = (int64_t)ceil(4.0 * r / bpc) + 64, rd_cols = (int64_t)ceil(4.0 * c / bpc) + 64;
      int64_t want = with ? r / 8 : 0;
      printf("v6e f32[%d,%d]%s: x * 2 %lld, x * s[:, None] %lld (+%lld), x * t[None, :] %lld\n", r, c,
             with ? "" : " (no row_broadcast_cycles)", (long long)cyc[0], (long long)cyc[1],
             (long long)(cyc[1] - cyc[0]), (long long)cyc[2]);
      CHECK(cyc[1] - cyc[0] >= want && cyc[1] - cyc[0] <= want + rd_rows);
      CHECK(cyc[2] - cyc[0] >= 0 && cyc[2] - cyc[0] <= rd_cols);
    }
  }
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

/* A value computed inside a kernel lives in the tiling that pads least (tile.c value_vregs,
 * lower.c): grouped-query attention's scores [b, kv, keys, queries, group] with a group of 2
 * are not charged as 64 times their registers with the 2 in the lanes. exp over the f32
 * scores f32[4,8,512,512,2]: 16,384 registers, 8,192 EUP cycles on v5e (2 pushes a cycle);
 * in the padded layout it would be 1,048,576 registers. */
static void least_padded_values(void) {
  static const char *src =
      "HloModule g\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
      "ENTRY e {\n  k = bf16[4,512,8,64] parameter(0)\n  q = bf16[4,512,8,2,64] parameter(1)\n"
      "  d = bf16[4,8,512,512,2] dot(k, q), lhs_batch_dims={0,2}, lhs_contracting_dims={3}, rhs_batch_dims={0,2}, "
      "rhs_contracting_dims={4}\n  c = f32[4,8,512,512,2] convert(d)\n  x = f32[4,8,512,512,2] exponential(c)\n"
      "  z = f32[] constant(0)\n  ROOT r = f32[4,8,512,2] reduce(x, z), dimensions={3}, to_apply=add\n}\n";
  tpu_chip c;
  tpu_module *m = NULL;
  tpu_program *p = compile_for_with("v5e", src, 1, &c, &m);
  tpu_timeline tl;
  if (p && time_program(p, &c, &tl)) {
    printf("exp over f32[4,8,512,512,2] in a kernel: EUP busy %lld cycles (least padded 8192), total %lld\n",
           (long long)tl.busy[TPU_UNIT_EUP], (long long)tl.total_cycles);
    CHECK(tl.busy[TPU_UNIT_EUP] >= 8192 && tl.busy[TPU_UNIT_EUP] <= 8192 * 11 / 10);
    tpu_timeline_free(&tl);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* A memo of matmul plans shared by several compiles (tpu_compile_opts.mm_memo, what the
 * library keeps per chip): a second module with the same dots adds no plan and compiles to
 * the program it compiles to alone, word for word. */
static void shared_matmul_memo(void) {
  const char *a = "HloModule a\nENTRY e {\n x = f32[512,1024] parameter(0)\n w = f32[1024,2048] parameter(1)\n"
                  " ROOT d = f32[512,2048] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  const char *b = "HloModule b\nENTRY e {\n x = f32[512,1024] parameter(0)\n w = f32[1024,2048] parameter(1)\n"
                  " d = f32[512,2048] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                  " ROOT t = f32[512,2048] tanh(d)\n}\n";
  struct tpu_mm_memo *memo = tpu_mm_memo_new();
  CHECK(memo != NULL);
  tpu_module *ma = parse(a), *mb = parse(b), *mb2 = parse(b);
  CHECK(ma && mb && mb2);
  if (!memo || !ma || !mb || !mb2) goto out;
  tpu_diag d;
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = &g_chip;
  o.precision_override = -1;
  o.mm_memo = memo;
  tpu_program *pa = NULL, *pb = NULL, *alone = NULL;
  CHECK(tpu_compile_backend(ma, &o, &pa, &d) == TPU_OK);
  int64_t after_a = tpu_mm_memo_size(memo);
  CHECK(after_a >= 1);
  CHECK(tpu_compile_backend(mb, &o, &pb, &d) == TPU_OK);
  CHECK_EQ_INT(tpu_mm_memo_size(memo), after_a);
  alone = compile(mb2, &g_chip, &d);
  CHECK(pb && alone);
  if (pb && alone) {
    char *t1 = tpu_program_text(pb), *t2 = tpu_program_text(alone);
    CHECK(t1 && t2 && !strcmp(t1, t2));
    tpu_free(t1);
    tpu_free(t2);
  }
  tpu_program_free(pa);
  tpu_program_free(pb);
  tpu_program_free(alone);
out:
  tpu_module_free(ma);
  tpu_module_free(mb);
  tpu_module_free(mb2);
  tpu_mm_memo_free(memo);
}

int main(void) {
  if (!closed_form_v5e(&g_chip)) return 1;
  reuse_and_layout();
  free_intermediate_layout();
  lone_through_prefetch();
  layout_copy_transposes();
  windowed_vmem_copies();
  partial_reduce_cost();
  fused_custom_calls_cost();
  hbm_reuse();
  eup_width();
  row_broadcasts();
  depthwise_convs();
  least_padded_values();
  dot_tiles();
  two_dot_fusion();
  k_split_accumulator();
  trip_counts();
  epilogue_slices();
  operand_reuse();
  dynamic_slices();
  hbm_overflow();
  scalar_ops();
  shared_matmul_memo();
  conformance(0);
  conformance(1);
  CHECK_DONE();
}
