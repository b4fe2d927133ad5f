/* The back end's layouts (compile/backend/layout.c): intermediate values' layouts, prefetched parameters'
 * streams, copies that move the minor dimension costed as transposes. */

#include <stdio.h>

#include "util.h"
#include "unit/compile/backend_util.h"

static tpu_chip g_chip;

static tpu_program *compile_src(const char *src, tpu_module **m) { return compile_src_on(src, &g_chip, m); }

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

/* A loop's state is a value computed inside the program: a scan's f32[8,512,16] state and
 * the f32[64,8,512,16] stack it reads a step of are laid out as they pad least (the
 * compiler's {1,2,0} and {2,3,1,0} in selective_scan_seq_b8l64d512n16: 512 in the lanes),
 * so the step's dynamic-slice reads and writes 8 x 16 x 512 f32 (256 kB each way), not its
 * 16-element rows padded to 128 lanes (2 MB). */
static void loop_state_layout(void) {
  tpu_module *m;
  tpu_program *p = compile_src(
      "HloModule scan\n"
      "body {\n  t = (s32[], f32[8,512,16], f32[64,8,512,16]) parameter(0)\n"
      "  i = s32[] get-tuple-element(t), index=0\n  h = f32[8,512,16] get-tuple-element(t), index=1\n"
      "  st = f32[64,8,512,16] get-tuple-element(t), index=2\n  z = s32[] constant(0)\n"
      "  ds = f32[1,8,512,16] dynamic-slice(st, i, z, z, z), dynamic_slice_sizes={1,8,512,16}\n"
      "  x = f32[8,512,16] reshape(ds)\n  k = f32[] constant(0.5)\n  kb = f32[8,512,16] broadcast(k), dimensions={}\n"
      "  hk = f32[8,512,16] multiply(h, kb)\n  h2 = f32[8,512,16] add(hk, x)\n  one = s32[] constant(1)\n"
      "  i2 = s32[] add(i, one)\n  ROOT r = (s32[], f32[8,512,16], f32[64,8,512,16]) tuple(i2, h2, st)\n}\n"
      "cond {\n  t = (s32[], f32[8,512,16], f32[64,8,512,16]) parameter(0)\n  i = s32[] get-tuple-element(t), index=0\n"
      "  n = s32[] constant(64)\n  ROOT lt = pred[] compare(i, n), direction=LT\n}\n"
      "ENTRY e {\n  h0 = f32[8,512,16] parameter(0)\n  s = f32[64,8,512,16] parameter(1)\n  z = s32[] constant(0)\n"
      "  t0 = (s32[], f32[8,512,16], f32[64,8,512,16]) tuple(z, h0, s)\n"
      "  w = (s32[], f32[8,512,16], f32[64,8,512,16]) while(t0), condition=cond, body=body\n"
      "  ROOT o = f32[8,512,16] get-tuple-element(w), index=1\n}\n",
      &m);
  if (p) {
    int ds = op_named(p, "ds");
    CHECK(ds >= 0);
    if (ds >= 0) {
      printf("a scan step's dynamic-slice of its f32[64,8,512,16] state: %.0f padded bytes\n", p->ops[ds].padded_bytes);
      CHECK_NEAR(p->ops[ds].padded_bytes, 2 * 8.0 * 16 * 512 * 4, 4096); /* and its four scalar indices */
    }
    /* the counter, its increment and the condition's compare stay in scalar memory (the
     * compiler's S(6)): no transfer to or from HBM each step */
    int lt = op_named(p, "lt"), i2 = op_named(p, "i2");
    CHECK(lt >= 0 && i2 >= 0);
    if (lt >= 0) CHECK_NEAR(p->ops[lt].padded_bytes, 0, 0);
    if (i2 >= 0) CHECK_NEAR(p->ops[i2].padded_bytes, 0, 0);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* A one-element value the scalar unit reads is transferred into scalar memory once: the
 * compiler copies the index parameter of a gather of one row into S(6) and its add, compare
 * and select read it there (layout.c read_by_scalar_before), so of three scalar ops reading
 * s32[] reshaped from an s32[1] parameter only the first moves it. */
static void scalar_reads_once(void) {
  tpu_module *m;
  tpu_program *p = compile_src(
      "HloModule idx\n"
      "ENTRY e {\n  i = s32[1] parameter(0)\n  s = s32[] reshape(i)\n  z = s32[] constant(0)\n"
      "  n = s32[] constant(100)\n  lt = pred[] compare(s, z), direction=LT\n  w = s32[] add(s, n)\n"
      "  ROOT r = s32[] select(lt, w, s)\n}\n",
      &m);
  if (p) {
    int lt = op_named(p, "lt"), w = op_named(p, "w"), r = op_named(p, "r");
    CHECK(lt >= 0 && w >= 0 && r >= 0);
    if (lt >= 0 && w >= 0 && r >= 0) {
      printf("scalar ops reading one s32[1] parameter: %.0f, %.0f, %.0f padded bytes\n", p->ops[lt].padded_bytes,
             p->ops[w].padded_bytes, p->ops[r].padded_bytes);
      CHECK(p->ops[lt].padded_bytes > 0);
      CHECK_NEAR(p->ops[w].padded_bytes, 0, 0);
    }
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

/* A reduce over a short second-minor dimension iterates over it padded to the sublanes (the
 * XLA TPU compiler: f32 [256,4,4096] summed over axis 1, 218,592 cycles on v5e, as over 8
 * rows), and a fusion of converts feeding one reduce, narrowed back to bf16 (JAX's bf16 sum),
 * pays the lone-op cost as the unfused reduce does (bf16 [256,16,4096]: 437,152 cycles, twice
 * the f32 [256,4,4096] one; bench/fidelity/probes cases_12; one kept in f32 does not:
 * test_reduce_tiles.c). */
static void reduce_rows_padded_widened(void) {
  double f32k4 = r_xbytes(
      "HloModule k4\n"
      "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n"
      "  x = f32[256,4,4096]{2,1,0} parameter(0)\n"
      "  z = f32[] constant(0)\n"
      "  ROOT r = f32[256,4096]{1,0} reduce(x, z), dimensions={1}, to_apply=add\n"
      "}\n");
  CHECK_NEAR(f32k4, (g_chip.stream_pass_bytes + g_chip.lone_op_bytes) * 256.0 * 8 * 4096, 1);
  double bf16k16 = r_xbytes(
      "HloModule k16\n"
      "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "fc { p = bf16[256,16,4096]{2,1,0} parameter(0)\n c = f32[256,16,4096]{2,1,0} convert(p)\n"
      "  z = f32[] constant(0)\n"
      "  s = f32[256,4096]{1,0} reduce(c, z), dimensions={1}, to_apply=add\n"
      "  ROOT o = bf16[256,4096]{1,0} convert(s) }\n"
      "ENTRY e {\n"
      "  x = bf16[256,16,4096]{2,1,0} parameter(0)\n"
      "  ROOT r = bf16[256,4096]{1,0} fusion(x), kind=kInput, calls=fc\n"
      "}\n");
  CHECK_NEAR(bf16k16, (g_chip.stream_pass_bytes + g_chip.lone_op_bytes) * 256.0 * 16 * 4096, 1);
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

/* A compiled scan step's kernel (the compiler's GRU: fusion(stack, counter, counter == 0) with
 * the time step dynamic-sliced inside a nested fusion and the first state selected by the
 * predicate in scalar memory, S(6)): it reads only its time step of the stack, and it is a
 * vector kernel that pays a kernel start, not the scalar unit's work, although it reads a
 * value in SMEM (the compiler times all 299 such fusions of its compiled corpora). A
 * one-element result of SMEM values stays scalar work. */
static void scan_step_kernel(void) {
  tpu_module *m;
  tpu_program *p = compile_src(
      "HloModule step\n"
      "fds {\n  s = bf16[16,8,256]{2,1,0:T(8,128)(2,1)} parameter(0)\n  i = s32[]{:T(128)} parameter(1)\n"
      "  z = s32[]{:T(128)} constant(0)\n"
      "  ROOT d = bf16[1,8,256]{2,1,0:T(8,128)(2,1)} dynamic-slice(s, i, z, z), dynamic_slice_sizes={1,8,256}\n}\n"
      "fstep {\n  s = bf16[16,8,256]{2,1,0:T(8,128)(2,1)} parameter(0)\n  i = s32[]{:T(128)} parameter(1)\n"
      "  c = pred[]{:T(512)S(6)} parameter(2)\n"
      "  x = bf16[1,8,256]{2,1,0:T(8,128)(2,1)} fusion(s, i), kind=kLoop, calls=fds\n"
      "  b = bf16[8,256]{1,0:T(8,128)(2,1)} bitcast(x)\n"
      "  cb = pred[8,256]{1,0:T(8,128)(4,1)} broadcast(c), dimensions={}\n"
      "  k = bf16[]{:T(256)} constant(0)\n  kb = bf16[8,256]{1,0:T(8,128)(2,1)} broadcast(k), dimensions={}\n"
      "  ROOT r = bf16[8,256]{1,0:T(8,128)(2,1)} select(cb, kb, b)\n}\n"
      "ENTRY e {\n  s = bf16[16,8,256]{2,1,0:T(8,128)(2,1)} parameter(0)\n  i = s32[]{:T(128)} parameter(1)\n"
      "  z = s32[]{:T(128)} constant(0)\n"
      "  c = pred[]{:T(512)S(6)} compare(i, z), direction=EQ\n"
      "  f = bf16[8,256]{1,0:T(8,128)(2,1)} fusion(s, i, c), kind=kLoop, calls=fstep\n"
      "  ROOT t = (bf16[8,256]{1,0:T(8,128)(2,1)}, pred[]{:T(512)S(6)}) tuple(f, c)\n}\n",
      &m);
  CHECK(p != NULL);
  if (p) {
    int f = op_named(p, "f"), c = op_named(p, "c");
    CHECK(f >= 0 && c >= 0);
    if (f >= 0) {
      printf("compiled scan step kernel: scalar=%d, %.0f padded bytes\n", p->ops[f].scalar, p->ops[f].padded_bytes);
      CHECK_EQ_INT(p->ops[f].scalar, 0);
      /* the 4 KiB time step read and the 4 KiB result written (and the counter), not the
       * 64 KiB stack */
      CHECK(p->ops[f].padded_bytes < 16384);
      CHECK(p->ops[f].padded_bytes >= 8192);
    }
    if (c >= 0) CHECK_EQ_INT(p->ops[c].scalar, 1);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* A compiled program's loop counter (s32[]{:T(128)}: no memory space named), its increment
 * and the condition's compare are the scalar unit's work in scalar memory, as in tpusim's
 * own compilation: no transfer to or from HBM each step (the compiler gives its 52 such
 * compares and 52 adds in the compiled families' loop bodies no estimated_cycles). */
static void compiled_loop_counter(void) {
  tpu_module *m;
  tpu_program *p = compile_src(
      "HloModule w\n"
      "body {\n  p = (s32[]{:T(128)}, f32[8,128]{1,0:T(8,128)}) parameter(0)\n"
      "  i = s32[]{:T(128)} get-tuple-element(p), index=0\n  x = f32[8,128]{1,0:T(8,128)} get-tuple-element(p), index=1\n"
      "  one = s32[]{:T(128)} constant(1)\n  i2 = s32[]{:T(128)} add(i, one)\n"
      "  y = f32[8,128]{1,0:T(8,128)} exponential(x)\n"
      "  ROOT t = (s32[]{:T(128)}, f32[8,128]{1,0:T(8,128)}) tuple(i2, y)\n}\n"
      "cond {\n  p = (s32[]{:T(128)}, f32[8,128]{1,0:T(8,128)}) parameter(0)\n"
      "  i = s32[]{:T(128)} get-tuple-element(p), index=0\n  n = s32[]{:T(128)} constant(16)\n"
      "  ROOT lt = pred[]{:T(512)} compare(i, n), direction=LT\n}\n"
      "ENTRY e {\n  x = f32[8,128]{1,0:T(8,128)} parameter(0)\n  z = s32[]{:T(128)} constant(0)\n"
      "  t = (s32[]{:T(128)}, f32[8,128]{1,0:T(8,128)}) tuple(z, x)\n"
      "  w = (s32[]{:T(128)}, f32[8,128]{1,0:T(8,128)}) while(t), condition=cond, body=body\n"
      "  ROOT r = f32[8,128]{1,0:T(8,128)} get-tuple-element(w), index=1\n}\n",
      &m);
  CHECK(p != NULL);
  if (p) {
    int lt = op_named(p, "lt"), i2 = op_named(p, "i2");
    CHECK(lt >= 0 && i2 >= 0);
    if (lt >= 0) printf("compiled loop's compare: %.0f padded bytes\n", p->ops[lt].padded_bytes);
    if (lt >= 0) CHECK_NEAR(p->ops[lt].padded_bytes, 0, 0);
    if (i2 >= 0) CHECK_NEAR(p->ops[i2].padded_bytes, 0, 0);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* A reshape between a vector and rows of whole lanes is a bitcast (tile.c lane_rows): the
 * TPU tiles a vector as 8 rows of 128 lanes in order, so f32[1024] and f32[8,128] (or
 * [1,8,128], or [3,128] and [384]) hold the same bytes; the compiler's scan of bf16[1024]
 * reads it as [8,128] through a `bitcast`. One that splits the lanes otherwise ([4,256]) or
 * whose rows are not whole tiles under a major dimension ([2,4,128]) is a kernel. */
static void vector_row_reshape(void) {
  static const struct { const char *from, *to; int kernels; } k[] = {
      {"f32[1024]", "f32[8,128]", 0}, {"f32[8,128]", "f32[1024]", 0}, {"f32[1024]", "f32[2,4,128]", 1},
      {"f32[384]", "f32[3,128]", 0},  {"f32[2,8,128]", "f32[2048]", 0}, {"f32[1024]", "f32[4,256]", 1},
      {"f32[768]", "f32[2,3,128]", 1}, {"f32[1024]", "f32[1,8,128]", 0},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    char src[300];
    snprintf(src, sizeof src, "HloModule v\nENTRY e {\n  x = %s parameter(0)\n  ROOT r = %s reshape(x)\n}\n",
             k[i].from, k[i].to);
    tpu_module *m;
    tpu_program *p = compile_src(src, &m);
    CHECK(p != NULL);
    if (p) {
      printf("reshape %s -> %s: %d kernel(s)\n", k[i].from, k[i].to, p->nops);
      CHECK_EQ_INT(p->nops, k[i].kernels);
    }
    tpu_program_free(p);
    tpu_module_free(m);
  }
}

/* A convolution's result computed and used inside the program is laid out as the
 * convolution writes it, the batch in the sublanes and the features in the lanes, whatever
 * dimension order the HLO gives it: an NCHW bf16[8,128,14,14] passed from one convolution to
 * the next is 8 x 128 tiles (the compiler's {1,0,3,2}, conv_grad_nchw_hwio_nchw_b8_14_c128to128_k1),
 * not 14 x 14 images padded to 16 x 128 (4 MB for 0.4 MB). */
static void conv_result_layout(void) {
  tpu_module *m;
  tpu_program *p = compile_src(
      "HloModule nchw\n"
      "ENTRY e {\n"
      "  x = bf16[8,128,14,14]{3,2,1,0} parameter(0)\n"
      "  w = bf16[1,1,128,128]{3,2,1,0} parameter(1)\n"
      "  c1 = bf16[8,128,14,14]{3,2,1,0} convolution(x, w), window={size=1x1}, dim_labels=bf01_01io->bf01\n"
      "  ROOT c2 = bf16[8,128,14,14]{3,2,1,0} convolution(c1, w), window={size=1x1}, dim_labels=bf01_01io->bf01\n"
      "}\n",
      &m);
  if (p) {
    int c1 = op_named(p, "c1"), c2 = op_named(p, "c2");
    CHECK(c1 >= 0 && c2 >= 0);
    const double nchw = 8.0 * 128 * 16 * 128 * 2; /* 14 x 14 padded to 16 x 128 */
    const double conv = 8.0 * 128 * 14 * 14 * 2, wb = 128.0 * 128 * 2;
    if (c1 >= 0) CHECK_NEAR(p->ops[c1].padded_bytes, nchw + wb + conv, 0); /* x as given, c1 as written */
    if (c2 >= 0) CHECK_NEAR(p->ops[c2].padded_bytes, conv + wb + conv, 0); /* a result: the least padded */
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* A reducing kernel computes its product in the layout one transposed operand lies in: of its
 * moving transposes of the product's size, the largest is a layout, not a move, and so is
 * another whose operand's lane dimension lands on the same dimension of the product (a
 * shuffle of tiles: stream_cost.c product_layout_transpose; the compiler's 'badc,adbc->ba'
 * copies one operand in its kernel, keeping its lanes, and bitcasts the other).
 * f32[8,16,4,512] summed over 1 and 3: one operand transposed (the layout: the stream pass
 * alone); both, their 16s landing on dimension 1 (the stream pass alone); both, the second's
 * lanes (its 4) landing on dimension 2 (one transpose's transpose_bytes more). */
static void product_layout_transpose_free(void) {
  const char *fmt =
      "HloModule m\n"
      "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "f { p0 = f32[%s] parameter(0)\n p1 = f32[%s] parameter(1)\n%s%s"
      "  m = f32[8,16,4,512] multiply(%s, %s)\n z = f32[] constant(0)\n"
      "  ROOT s = f32[8,4] reduce(m, z), dimensions={1,3}, to_apply=add }\n"
      "ENTRY e {\n x = f32[%s] parameter(0)\n y = f32[%s] parameter(1)\n"
      "  ROOT r = f32[8,4] fusion(x, y), kind=kInput, calls=f\n}\n";
  const char *in_order = "8,16,4,512", *t0 = "8,512,4,16", *t1 = "4,8,512,16";
  const char *tr0 = "  a = f32[8,16,4,512] transpose(p0), dimensions={0,3,2,1}\n";
  const char *tr1 = "  b = f32[8,16,4,512] transpose(p1), dimensions={1,3,0,2}\n";
  char src[2048];
  snprintf(src, sizeof src, fmt, t0, in_order, tr0, "", "a", "p1", t0, in_order);
  double one = r_xbytes(src);
  snprintf(src, sizeof src, fmt, t0, t1, tr0, tr1, "a", "b", t0, t1);
  double two = r_xbytes(src);
  const char *t2 = "512,8,16,4", *tr2 = "  b = f32[8,16,4,512] transpose(p1), dimensions={1,2,3,0}\n";
  snprintf(src, sizeof src, fmt, t0, t2, tr0, tr2, "a", "b", t0, t2);
  double cross = r_xbytes(src);
  const double n = 8.0 * 16 * 4 * 512;
  printf("product layout: xbytes one transposed %.0f, both (lanes agree) %.0f, both (lanes differ) %.0f\n", one, two,
         cross);
  CHECK_NEAR(one, g_chip.stream_pass_bytes * n, 1);
  CHECK_NEAR(two, one, 1);
  CHECK_NEAR(cross - one, g_chip.transpose_bytes * n, 1);
}

int main(void) {
  if (!closed_form_v5e(&g_chip)) return 1;
  free_intermediate_layout();
  conv_result_layout();
  loop_state_layout();
  scalar_reads_once();
  lone_through_prefetch();
  layout_copy_transposes();
  reduce_rows_padded_widened();
  scan_step_kernel();
  compiled_loop_counter();
  vector_row_reshape();
  product_layout_transpose_free();
  CHECK_DONE();
}
