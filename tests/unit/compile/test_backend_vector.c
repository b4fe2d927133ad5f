/* The back end's vector kernels (compile/backend/tile.c): dynamic slices, VMEM copies, partial reduce,
 * fused custom calls, EUP width, row broadcasts, least-padded value tilings, kernels without
 * operands, a loop fusion's parameter reads and broadcast scalars. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util.h"
#include "unit/compile/backend_util.h"

static tpu_chip g_chip;

static tpu_program *compile_src(const char *src, tpu_module **m) { return compile_src_on(src, &g_chip, m); }

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

/* A vector-unit dot's vector spread along the matrix's lanes costs the chip's
 * dot_vector_group_cycles per group of 8 rows of the vector (stream_cost.c
 * dot_vector_groups), in place of row_broadcast_cycles per row: JAX's 'cab,badc->dab' over
 * a, b, c, d = 6, 8, 33, 128 (off the families corpus) costs the compiler 8.00 cycles more
 * on v5e per row group, 198 of them (probes/mr_lane_bcast.py). A vector that a major
 * dimension of the product lacks (e = 4 below) counts its own groups, not the product's. */
static void dot_vector_groups_cost(void) {
  tpu_chip v5e;
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &v5e, &d) == TPU_OK);
  CHECK_NEAR(v5e.dot_vector_group_cycles, 8.0, 1e-12);
  const char *src[2] = {
      "HloModule v\nENTRY e {\n  q = bf16[8,6,128,33]{3,2,1,0} parameter(1)\n  p = bf16[33,6,8]{2,1,0} parameter(0)\n"
      "  t = bf16[6,8,128]{2,1,0} dot(q, p), lhs_batch_dims={1,0}, lhs_contracting_dims={3}, rhs_batch_dims={1,2}, "
      "rhs_contracting_dims={0}\n  ROOT r = bf16[128,6,8]{0,2,1} transpose(t), dimensions={2,0,1}\n}\n",
      "HloModule v\nENTRY e {\n  q = bf16[4,8,6,128,33]{4,3,2,1,0} parameter(1)\n  p = bf16[33,6,8]{2,1,0} parameter(0)\n"
      "  ROOT t = bf16[6,8,4,128]{3,2,1,0} dot(q, p), lhs_batch_dims={2,1}, lhs_contracting_dims={4}, "
      "rhs_batch_dims={1,2}, rhs_contracting_dims={0}\n}\n"};
  const int64_t rows[2] = {6 * 8 * 33, 4 * 6 * 8 * 33}; /* the rows row_broadcast_cycles charged */
  for (int k = 0; k < 2; k++) {
    tpu_chip c = v5e;
    int64_t with = step_cycles_of(src[k], &c, 1);
    c.dot_vector_group_cycles = 0;
    int64_t without = step_cycles_of(src[k], &c, 1);
    double want = 8.0 * 6 * 33 - v5e.row_broadcast_cycles * (double)rows[k];
    printf("v5e vector-unit dot %d: %lld cycles, %lld without dot_vector_group_cycles (+%lld, want +%.0f)\n", k,
           (long long)with, (long long)without, (long long)(with - without), want);
    CHECK(fabs((double)(with - without) - want) <= 0.1 * want);
  }
}

/* A broadcast in a kernel runs along the layout of the array it is combined with: x * s[:, None]
 * over f32 [65536,128] laid out {0,1} (its rows in the lanes) spreads s along the lanes of
 * no row, so it costs no row_broadcast_cycles (layout.c fused_minor: the strength-reduced
 * einsum('ba,abcd->adc') over bf16[12,128,33,8]{1,3,2,0}, the compiler's 7,171 cycles on v5e). */
static void broadcast_along_layout(void) {
  tpu_chip v6e;
  tpu_diag d;
  CHECK(tpu_chip_load("v6e", &v6e, &d) == TPU_OK);
  const char *fmt = "HloModule r\nENTRY e {\n  x = f32[65536,128]{%s} parameter(0)\n  s = f32[65536] parameter(1)\n"
                    "  b = f32[65536,128] broadcast(s), dimensions={0}\n  ROOT y = f32[65536,128]{%s} multiply(x, b)\n}\n";
  const char *lay[2] = {"1,0", "0,1"};
  int64_t cyc[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    char src[512];
    snprintf(src, sizeof src, fmt, lay[k], lay[k]);
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
      cyc[k] = tl.total_cycles;
      tpu_timeline_free(&tl);
    }
    tpu_program_free(p);
    tpu_module_free(m);
  }
  printf("v6e x * s[:, None] over f32[65536,128]: {1,0} %lld, {0,1} %lld cycles\n", (long long)cyc[0], (long long)cyc[1]);
  /* row-major pays 65,536 / 8 row broadcasts; laid out {0,1} none */
  CHECK(cyc[0] - cyc[1] >= 65536 / 8 - 64);
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

/* A scan's reduce-window (tile.c scan_dim) costs its output registers twice (each block's
 * running op, then its carry), not a window's worth of ops per element, forward or reverse
 * (jnp.cumsum(reverse=True): the window padded by its length less one above, as the XLA TPU
 * compiler's reverse cumsum_1024 blocks, pad 0_127): f32[64,64,1024] scanned along its major
 * dimension is 64 x 8 x 8 = 4,096 registers, one add each, twice: 8,192 vector cycles both
 * ways (a window per element would be 64 times that), no cross-lane work. */
static void reverse_scan_cost(void) {
  const char *fmt = "HloModule s\nadd {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
                    "ENTRY e {\n x = f32[64,64,1024]{2,1,0} parameter(0)\n z = f32[] constant(0)\n"
                    " ROOT r = f32[64,64,1024]{2,1,0} reduce-window(x, z), window={size=64x1x1 pad=%s}, to_apply=add\n}\n";
  const char *pads[2] = {"63_0x0_0x0_0", "0_63x0_0x0_0"};
  int64_t vpu[2], xlu[2];
  for (int k = 0; k < 2; k++) {
    char src[600];
    snprintf(src, sizeof src, fmt, pads[k]);
    vpu[k] = r_unit_cycles(src, TPU_UNIT_VPU);
    xlu[k] = r_unit_cycles(src, TPU_UNIT_XLU);
  }
  printf("scan of f32[64,64,1024] along its major dimension: forward %lld, reverse %lld vector cycles (closed form 8192)\n",
         (long long)vpu[0], (long long)vpu[1]);
  for (int k = 0; k < 2; k++) {
    CHECK(llabs(vpu[k] - 8192) <= 8192 / 100); /* a 10 % change of the rule fails */
    CHECK_EQ_INT((int)xlu[k], 0);
  }
}

/* The cycles of the op named r, and in *start whether it pays a kernel start (not scalar),
 * for a compiled program on the v5e preset (its kernel_overhead_s); -1 on failure. */
static int64_t source_kernel_cycles(const char *src, int *start) {
  tpu_chip c;
  tpu_module *m = NULL;
  tpu_timeline tl;
  tpu_program *p = compile_for("v5e", src, &c, &m);
  int r = p ? op_named(p, "r") : -1;
  int64_t cyc = -1;
  *start = r >= 0 ? !p->ops[r].scalar : -1;
  if (r >= 0 && time_program(p, &c, &tl)) {
    cyc = tl.ops[r].cycles;
    tpu_timeline_free(&tl);
  }
  tpu_program_free(p);
  tpu_module_free(m);
  return cyc;
}

/* A compiled program's kernel without operands (an iota, a fusion of iotas and constants)
 * whose result stays in VMEM in whole 32-bit registers pays no kernel start: the XLA TPU
 * compiler's v5e iota s32[16,300] into VMEM 17 cycles (bench/fidelity/probes cases_7); in
 * HBM, in 2-row tiles, as a packed predicate or a 128-element vector it pays the start
 * (1,824-2,134 cycles there). */
static void vmem_source_kernels(void) {
  static const struct { const char *ty, *lay, *root; int start; } k[] = {
      {"s32[16,300]", "{1,0:T(8,128)S(1)}", "iota(), iota_dimension=1", 0},
      {"u32[4096]", "{0:T(1024)S(1)}", "fusion(), kind=kLoop, calls=%f", 0},
      {"s32[16,300]", "{1,0:T(8,128)}", "iota(), iota_dimension=1", 1},        /* in HBM */
      {"s32[3,500]", "{1,0:T(2,128)S(1)}", "iota(), iota_dimension=1", 1},     /* 2-row tiles */
      {"u32[128]", "{0:T(128)S(1)}", "fusion(), kind=kLoop, calls=%f", 1},     /* a vector */
      {"pred[64,64]", "{0,1:T(8,128)(4,1)S(1)}", "fusion(), kind=kLoop, calls=%f", 1}, /* packed */
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    char src[900];
    int pred = !strncmp(k[i].ty, "pred", 4);
    char ity[80]; /* the fused iota's type */
    snprintf(ity, sizeof ity, "%s%s", pred ? "s32" : "", pred ? k[i].ty + 4 : k[i].ty);
    char fused[300] = "";
    if (strstr(k[i].root, "fusion"))
      snprintf(fused, sizeof fused, "%%f {\n  %%i = %s iota(), iota_dimension=0\n  ROOT %%o = %s %s(%%i, %%i)%s\n}\n",
               ity, k[i].ty, pred ? "compare" : "add", pred ? ", direction=EQ" : "");
    snprintf(src, sizeof src, "HloModule src, is_scheduled=true\n%sENTRY e {\n  r = %s%s %s\n  ROOT n = %s copy(r)\n}\n",
             fused, k[i].ty, k[i].lay, k[i].root, k[i].ty);
    int start = -1;
    int64_t cyc = source_kernel_cycles(src, &start);
    printf("kernel without operands %s%s: %lld cycles, kernel start %d\n", k[i].ty, k[i].lay, (long long)cyc, start);
    CHECK_EQ_INT(start, k[i].start);
    if (!k[i].start) CHECK(cyc >= 0 && cyc < 200);
    else CHECK(cyc > 1000);
  }
}

/* tpusim's own compilation's iota that a sort reads (through a reshape, which the compiler
 * folds into it), on a chip that keeps such values in VMEM (v5e: one TensorCore, no CMEM),
 * generated in the sort's layout: in whole registers (f32[1,8] sorted with the batch in the
 * lanes, {0,1}: 8 rows, the compiled approx_max_k_b1n8k8_f32's s32[1,8]{0,1:T(8,128)S(1)}
 * iota, 16 cycles) no kernel start; in a 1-row tile (f32[1,3000] sorted as it is, {1,0}: the
 * probe p_iota_sort_1x3000 pays it) or on v5p (two TensorCores) the start. */
static void own_vmem_source_kernels(void) {
  static const struct { const char *chip; int n; int start; } k[] = {
      {"v5e", 8, 0}, {"v6e", 8, 0}, {"v5e", 3000, 1}, {"v5p", 8, 1}, {"v4:core", 8, 1},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    char src[900];
    snprintf(src, sizeof src,
             "HloModule o\ncmp {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  c = s32[] parameter(2)\n"
             "  d = s32[] parameter(3)\n  ROOT g = pred[] compare(a, b), direction=GT\n}\n"
             "ENTRY e {\n  x = f32[1,%d]{1,0} parameter(0)\n  r = s32[%d]{0} iota(), iota_dimension=0\n"
             "  q = s32[1,%d]{1,0} reshape(r)\n"
             "  ROOT s = (f32[1,%d]{1,0}, s32[1,%d]{1,0}) sort(x, q), dimensions={1}, to_apply=cmp\n}\n",
             k[i].n, k[i].n, k[i].n, k[i].n, k[i].n);
    tpu_chip c;
    tpu_module *m = NULL;
    tpu_program *p = compile_for_with(k[i].chip, src, 1, &c, &m);
    int r = p ? op_named(p, "r") : -1;
    CHECK(r >= 0);
    int start = r >= 0 ? !p->ops[r].scalar : -1;
    printf("own iota s32[%d] read by a sort on %s: kernel start %d\n", k[i].n, k[i].chip, start);
    CHECK_EQ_INT(start, k[i].start);
    tpu_program_free(p);
    tpu_module_free(m);
  }
}

/* tpusim's own operandless kernel with a 64-bit integer result (JAX's u64 Threefry counter
 * product over the rows) is the compiler's wide_int_source_kernels u32 kernels, each paying
 * the kernel start (3 on v4/v5e/v5p, 2 on v6e: random_bernoulli_8x1024), or none where its
 * words fill whole registers in VMEM (2,000 rows: T(1024) on v5e and v5p; not v4's CMEM). */
static void wide_int_source_kernels(void) {
  static const struct { const char *chip; int n; int scalar, starts; } k[] = {
      {"v5e", 8, 0, 3}, {"v6e", 8, 0, 2}, {"v5p", 8, 0, 3}, {"v4:core", 8, 0, 3},
      {"v5e", 2000, 1, 0}, {"v5p", 2000, 1, 0}, {"v4:core", 2000, 0, 3},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    char src[1400];
    snprintf(src, sizeof src,
             "HloModule w\nENTRY e {\n  k = u32[%d,1024]{1,0} parameter(0)\n  r = u64[%d]{0} iota(), iota_dimension=0\n"
             "  c = u64[] constant(1024)\n  cb = u64[%d]{0} broadcast(c), dimensions={}\n  m = u64[%d]{0} multiply(r, cb)\n"
             "  b = u64[%d,1024]{1,0} broadcast(m), dimensions={0}\n  j = u64[%d,1024]{1,0} iota(), iota_dimension=1\n"
             "  a = u64[%d,1024]{1,0} add(b, j)\n  s = u64[] constant(32)\n  sb = u64[%d,1024]{1,0} broadcast(s), dimensions={}\n"
             "  h = u64[%d,1024]{1,0} shift-right-logical(a, sb)\n  hi = u32[%d,1024]{1,0} convert(h)\n"
             "  lo = u32[%d,1024]{1,0} convert(a)\n  x = u32[%d,1024]{1,0} xor(hi, lo)\n  ROOT y = u32[%d,1024]{1,0} add(x, k)\n}\n",
             k[i].n, k[i].n, k[i].n, k[i].n, k[i].n, k[i].n, k[i].n, k[i].n, k[i].n, k[i].n, k[i].n, k[i].n, k[i].n);
    tpu_chip c;
    tpu_module *m = NULL;
    tpu_program *p = compile_for_with(k[i].chip, src, 1, &c, &m);
    int r = -1;
    for (int o = 0; p && o < p->nops; o++)
      if (strcmp(p->ops[o].name, "fusion")) r = o; /* the operandless u64 kernel, the root aside */
    CHECK(r >= 0);
    int scalar = r >= 0 ? p->ops[r].scalar : -1, starts = r >= 0 ? p->ops[r].starts : -1;
    printf("own u64[%d] counter kernel on %s: scalar %d, starts %d\n", k[i].n, k[i].chip, scalar, starts);
    CHECK_EQ_INT(scalar, k[i].scalar);
    CHECK_EQ_INT(starts, k[i].starts);
    tpu_program_free(p);
    tpu_module_free(m);
  }
}

/* The vector-unit cycles of the op named r compiled and timed on chip c. */
static int64_t vpu_cycles_on(const char *src, const tpu_chip *c) {
  tpu_module *m = NULL;
  tpu_timeline tl;
  tpu_program *p = compile_src_on(src, c, &m);
  int r = p ? op_named(p, "r") : -1;
  int64_t cyc = -1;
  if (r >= 0 && time_program(p, c, &tl)) {
    cyc = tl.ops[r].unit_cycles[TPU_UNIT_VPU];
    tpu_timeline_free(&tl);
  }
  tpu_program_free(p);
  tpu_module_free(m);
  return cyc;
}

/* A loop fusion pays vector_load_ops for each read of a parameter by an elementwise op and
 * nothing for a broadcast scalar (the XLA TPU compiler: y + x with x a parameter read at every
 * step, 100 distinct constants as cheap as one; bench/fidelity/probes cases_9, cases_10):
 * f32[1024,2048] is 2,048 registers; x + x, + x, + x reads x 4 times, y + c1 + c2 + c3 once
 * and broadcasts 3 scalars. Against the v5e preset without vector_load_ops (neither rule):
 * 4 reads more, and 1 read more but 3 broadcasts less. */
static void fusion_parameter_reads(void) {
  static const char *reads =
      "HloModule rd\n%f {\n  %x = f32[1024,2048] parameter(0)\n  %a = f32[1024,2048] add(%x, %x)\n"
      "  %b = f32[1024,2048] add(%a, %x)\n  ROOT %d = f32[1024,2048] add(%b, %x)\n}\n"
      "ENTRY e {\n  p = f32[1024,2048] parameter(0)\n  ROOT r = f32[1024,2048] fusion(p), kind=kLoop, calls=%f\n}\n";
  static const char *consts =
      "HloModule cs\n%f {\n  %x = f32[1024,2048] parameter(0)\n"
      "  %c1 = f32[] constant(1)\n  %k1 = f32[1024,2048] broadcast(%c1), dimensions={}\n  %a = f32[1024,2048] add(%x, %k1)\n"
      "  %c2 = f32[] constant(2)\n  %k2 = f32[1024,2048] broadcast(%c2), dimensions={}\n  %b = f32[1024,2048] add(%a, %k2)\n"
      "  %c3 = f32[] constant(3)\n  %k3 = f32[1024,2048] broadcast(%c3), dimensions={}\n  ROOT %d = f32[1024,2048] add(%b, %k3)\n}\n"
      "ENTRY e {\n  p = f32[1024,2048] parameter(0)\n  ROOT r = f32[1024,2048] fusion(p), kind=kLoop, calls=%f\n}\n";
  tpu_chip c, c0;
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &c, &d) == TPU_OK);
  c0 = c;
  c0.vector_load_ops = 0;
  double L = c.vector_load_ops, per = 2048 / c.vector_ops_per_cycle;
  int64_t rd = vpu_cycles_on(reads, &c), rd0 = vpu_cycles_on(reads, &c0);
  int64_t cs = vpu_cycles_on(consts, &c), cs0 = vpu_cycles_on(consts, &c0);
  printf("fusion on v5e: x + x + x + x %lld vector cycles (%lld without parameter reads; closed form +%.0f), "
         "x + 3 constants %lld (%lld; %+.0f)\n", (long long)rd, (long long)rd0, 4 * L * per, (long long)cs,
         (long long)cs0, (L - 3) * per);
  CHECK(L > 0);
  CHECK(fabs((double)(rd - rd0) - 4 * L * per) <= 0.03 * 4 * L * per);
  CHECK(fabs((double)(cs - cs0) - (L - 3) * per) <= 0.03 * (3 - L) * per);
}

int main(void) {
  if (!closed_form_v5e(&g_chip)) return 1;
  reverse_scan_cost();
  windowed_vmem_copies();
  vmem_source_kernels();
  own_vmem_source_kernels();
  wide_int_source_kernels();
  fusion_parameter_reads();
  partial_reduce_cost();
  fused_custom_calls_cost();
  eup_width();
  row_broadcasts();
  dot_vector_groups_cost();
  broadcast_along_layout();
  least_padded_values();
  dynamic_slices();
  CHECK_DONE();
}
