/* The HLO passes' fusion decisions (through tpu_compile_hlo): cheap producers recomputed in
 * each reader, a dot with its GELU in one kernel, expensive producers reused, a reduce that
 * writes its narrowed result, window fusion, a matmul's prologue and epilogue fused, sibling
 * fusion, and dots reduced on the vector unit (dot_reduce). Moved from test_passes.c,
 * unchanged. */
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
#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"
#include "passes_util.h"

/* A cheap producer read by several fusions is recomputed in each (as XLA's instruction
 * fusion duplicates it): RMSNorm's convert of x feeds both the sum of squares and the
 * scaling, and no kernel writes the f32 copy of x. So is the transcendental unit's work
 * (exp, power, ...); a division keeps its own kernel and is read by both. */
static int shared_producer_kernels(const char *src, int *converts_in_fusions) {
  tpu_module *m = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) == TPU_OK);
  if (!m) return -1;
  tpu_compile_opts o = opts(NULL, NULL);
  CHECK(tpu_compile_hlo(m, &o, &d) == TPU_OK);
  int kernels = 0;
  *converts_in_fusions = 0;
  for (int i = 0; i < m->entry->ninstrs; i++) {
    const tpu_instr *in = m->entry->instrs[i];
    if (in->op == TPU_OP_PARAMETER || in->op == TPU_OP_CONSTANT) continue;
    kernels++;
    if (in->op == TPU_OP_FUSION)
      for (int k = 0; k < in->calls->ninstrs; k++) *converts_in_fusions += in->calls->instrs[k]->op == TPU_OP_CONVERT;
  }
  tpu_module_free(m);
  return kernels;
}

static void test_shared_producer(void) {
  const char *fmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = bf16[64,128] parameter(0)\n c = f32[64,128] %s(x)\n"
      " sq = f32[64,128] multiply(c, c)\n z = f32[] constant(0)\n"
      " r = f32[64] reduce(sq, z), dimensions={1}, to_apply=add\n"
      " rb = f32[64,128] broadcast(r), dimensions={0}\n y = f32[64,128] multiply(c, rb)\n"
      " ROOT o = bf16[64,128] convert(y)\n}\n";
  char src[1024];
  int conv = 0;
  snprintf(src, sizeof src, fmt, "convert");
  int k = shared_producer_kernels(src, &conv);
  printf("shared convert: %d kernels, converts in fusions %d\n", k, conv);
  CHECK(k == 2);      /* the reduce fusion and the scaling fusion, no convert of its own */
  CHECK(conv >= 3);   /* x's convert in both, and the output's */
  /* exp (the transcendental unit's work) is recomputed too: the sum's kernel and the
   * division's each compute it, as the XLA TPU compiler's exponential_reduce_fusion and
   * exponential_divide_fusion do; a division is not recomputed (tpusim: its own kernel,
   * read by both; the compiler makes it one multi-output kernel with the sum, 2 in all) */
  const char *fmt2 =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = f32[64,128] parameter(0)\n c = f32[64,128] %s(x, x)\n"
      " z = f32[] constant(0)\n r = f32[64] reduce(c, z), dimensions={1}, to_apply=add\n"
      " rb = f32[64,128] broadcast(r), dimensions={0}\n ROOT y = f32[64,128] divide(c, rb)\n}\n";
  snprintf(src, sizeof src, fmt2, "power");
  k = shared_producer_kernels(src, &conv);
  printf("shared power: %d kernels\n", k);
  CHECK(k == 2);
  snprintf(src, sizeof src, fmt2, "divide");
  k = shared_producer_kernels(src, &conv);
  printf("shared divide: %d kernels\n", k);
  CHECK(k == 3);
  /* a division by a constant is XLA's multiply by the reciprocal (its simplifier rewrites it
   * before fusion): recomputed in both kernels like any multiply, 2 in all */
  const char *div_const =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = f32[64,128] parameter(0)\n k = f32[] constant(11.3)\n kb = f32[64,128] broadcast(k), dimensions={}\n"
      " c = f32[64,128] divide(x, kb)\n z = f32[] constant(0)\n r = f32[64] reduce(c, z), dimensions={1}, to_apply=add\n"
      " rb = f32[64,128] broadcast(r), dimensions={0}\n ROOT y = f32[64,128] multiply(c, rb)\n}\n";
  k = shared_producer_kernels(div_const, &conv);
  printf("shared divide by a constant: %d kernels\n", k);
  CHECK(k == 2);
}

/* A dot's epilogue whose first step several later steps read (GELU over a bias add: the
 * sum is read five times): fusion decides producers consumers-first, so the bias add is
 * owned by the group and the dot joins it: one kOutput kernel, as the XLA TPU compiler
 * compiles gemm + bias + GELU (bench/fidelity gemm_bias_gelu). */
static void test_dot_gelu_one_kernel(void) {
  const char *src =
      "HloModule m\nENTRY e {\n x = bf16[256,512] parameter(0)\n w = bf16[512,256] parameter(1)\n"
      " b = bf16[256] parameter(2)\n d = bf16[256,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      " bb = bf16[256,256] broadcast(b), dimensions={1}\n h = bf16[256,256] add(d, bb)\n"
      " h2 = bf16[256,256] multiply(h, h)\n h3 = bf16[256,256] multiply(h2, h)\n"
      " c1 = bf16[] constant(0.0447)\n c1b = bf16[256,256] broadcast(c1), dimensions={}\n"
      " t1 = bf16[256,256] multiply(h3, c1b)\n t2 = bf16[256,256] add(h, t1)\n"
      " c2 = bf16[] constant(0.797)\n c2b = bf16[256,256] broadcast(c2), dimensions={}\n"
      " t3 = bf16[256,256] multiply(t2, c2b)\n th = bf16[256,256] tanh(t3)\n"
      " one = bf16[] constant(1)\n oneb = bf16[256,256] broadcast(one), dimensions={}\n"
      " t4 = bf16[256,256] add(th, oneb)\n half = bf16[] constant(0.5)\n halfb = bf16[256,256] broadcast(half), dimensions={}\n"
      " t5 = bf16[256,256] multiply(t4, halfb)\n ROOT y = bf16[256,256] multiply(h, t5)\n}\n";
  kernel_census kc = kernel_census_of(src);
  printf("dot + bias + GELU: %d kernels\n", kc.kernels);
  CHECK_EQ_INT(kc.kernels, 1);
  CHECK_EQ_INT(kc.dots[0], 1);
}

/* The kernels of a compiled entry (parameters, constants and tuples left out), and for each
 * of the first 8 how many of its ops have opcode `op`. */
static int kernels_with(const char *src, tpu_opcode op, int per[8]) {
  memset(per, 0, sizeof(int) * 8);
  tpu_module *m = compile_src(src);
  if (!m) return -1;
  int k = 0;
  for (int i = 0; i < m->entry->ninstrs; i++) {
    const tpu_instr *in = m->entry->instrs[i];
    if (in->op == TPU_OP_PARAMETER || in->op == TPU_OP_CONSTANT || in->op == TPU_OP_GET_TUPLE_ELEMENT ||
        in->op == TPU_OP_TUPLE)
      continue;
    if (k < 8) {
      const tpu_comp *c = in->op == TPU_OP_FUSION ? in->calls : NULL;
      for (int j = 0, n = c ? c->ninstrs : 1; j < n; j++) per[k] += (c ? c->instrs[j]->op : in->op) == op;
    }
    k++;
  }
  tpu_module_free(m);
  return k;
}

/* XLA's instruction fusion keeps an expensive producer (a dot, the transcendental unit's
 * work, a division) out of a consumer that reuses its elements (a broadcast): a
 * squeeze-and-excitation gate, sigmoid(dot) broadcast over the activations it scales, is the
 * dot's kernel with its epilogue (the compiler's kOutput fusion of f32[8,96]), then a scaling
 * kernel that only broadcasts (families mbconv_fwd_*); a norm's rsqrt of the row sums is a
 * kernel of its own, not computed in the kernel that scales every element by it (the
 * compiler's add_rsqrt_fusion). */
static void test_expensive_reuse(void) {
  const char *se =
      "HloModule m\nENTRY e {\n x = bf16[8,56,56,96] parameter(0)\n g = f32[8,4] parameter(1)\n"
      " w = f32[4,96] parameter(2)\n d = f32[8,96] dot(g, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      " n = f32[8,96] negate(d)\n e = f32[8,96] exponential(n)\n c = bf16[8,96] convert(e)\n"
      " b = bf16[8,56,56,96] broadcast(c), dimensions={0,3}\n ROOT y = bf16[8,56,56,96] multiply(x, b)\n}\n";
  int dots[8], exps[8], muls[8];
  int k = kernels_with(se, TPU_OP_DOT, dots);
  kernels_with(se, TPU_OP_EXP, exps);
  kernels_with(se, TPU_OP_MULTIPLY, muls);
  printf("SE gate: %d kernels, dots %d/%d, exps %d/%d, multiplies %d/%d\n", k, dots[0], dots[1], exps[0], exps[1],
         muls[0], muls[1]);
  CHECK_EQ_INT(k, 2);
  CHECK_EQ_INT(dots[0] + dots[1], 1);
  CHECK(dots[0] ? exps[0] == 1 && muls[1] == 1 : exps[1] == 1 && muls[0] == 1); /* exp with the dot */
  const char *norm =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = f32[256,384] parameter(0)\n sq = f32[256,384] multiply(x, x)\n z = f32[] constant(0)\n"
      " r = f32[256] reduce(sq, z), dimensions={1}, to_apply=add\n q = f32[256] %s(r)\n"
      " qb = f32[256,384] broadcast(q), dimensions={0}\n ROOT y = f32[256,384] multiply(x, qb)\n}\n";
  char src[1024];
  int rs[8];
  snprintf(src, sizeof src, norm, "rsqrt");
  k = kernels_with(src, TPU_OP_RSQRT, rs);
  kernels_with(src, TPU_OP_MULTIPLY, muls);
  printf("norm rsqrt: %d kernels\n", k);
  CHECK_EQ_INT(k, 3); /* sum of squares, rsqrt, scaling */
  CHECK_EQ_INT(rs[2], 0); /* not in the scaling kernel (the root, last) */
  CHECK_EQ_INT(rs[0] + rs[1], 1);
  /* cheap, but a vector computed from the sums the scaling broadcasts: a kernel of its own
   * too (fuse.c broadcast_source; the compiler's broadcasts in a fusion read parameters) */
  snprintf(src, sizeof src, norm, "negate");
  k = kernels_with(src, TPU_OP_NEGATE, rs);
  printf("norm negate: %d kernels\n", k);
  CHECK_EQ_INT(k, 3);
  CHECK_EQ_INT(rs[2], 0);
}

/* A dynamic-slice reads only its window: a pad it slices is computed in the slice's kernel
 * over the window and recomputed in each slice that reads it, never stored whole (XLA's
 * windowed-einsum loops select a step's block as the maximum of two slices of an operand
 * padded with -inf; the compiler's final programs fuse both into the matmul's operand). A
 * dynamic-slice along major dimensions is computed in the kernel that reads it (fuse.c
 * slice_producer), unless across the tile or read through a broadcast. */
static void test_window_fusion(void) {
  const char *src =
      "HloModule m\nENTRY e {\n x = bf16[64,1,1024] parameter(0)\n i = s32[] parameter(1)\n"
      " j = s32[] parameter(2)\n z = s32[] constant(0)\n n = bf16[] constant(-inf)\n"
      " p = bf16[64,2,1024] pad(x, n), padding=0_0x0_1x0_0\n q = bf16[64,2,1024] pad(x, n), padding=0_0x1_0x0_0\n"
      " a = bf16[64,2,128] dynamic-slice(p, z, z, i), dynamic_slice_sizes={64,2,128}\n"
      " b = bf16[64,2,128] dynamic-slice(q, z, z, j), dynamic_slice_sizes={64,2,128}\n"
      " c = bf16[64,2,128] dynamic-slice(p, z, z, j), dynamic_slice_sizes={64,2,128}\n"
      " m = bf16[64,2,128] maximum(a, b)\n ROOT y = bf16[64,2,128] add(m, c)\n}\n";
  int pads[8], ds[8];
  int k = kernels_with(src, TPU_OP_PAD, pads);
  kernels_with(src, TPU_OP_DYNAMIC_SLICE, ds);
  int npad = 0, nds = 0;
  for (int i = 0; i < 8 && i < k; i++) {
    printf("window kernel %d: %d pads, %d dynamic-slices\n", i, pads[i], ds[i]);
    CHECK_EQ_INT(pads[i], ds[i]); /* each slice computes its own window of its pad */
    npad += pads[i];
    nds += ds[i];
  }
  CHECK_EQ_INT(nds, 3);
  CHECK_EQ_INT(npad, 3);
  const char *param =
      "HloModule m\nENTRY e {\n x = bf16[8,64,128] parameter(0)\n i = s32[] parameter(1)\n z = s32[] constant(0)\n"
      " a = bf16[1,64,128] dynamic-slice(x, i, z, z), dynamic_slice_sizes={1,64,128}\n"
      " ROOT y = bf16[1,64,128] negate(a)\n}\n";
  k = kernels_with(param, TPU_OP_DYNAMIC_SLICE, ds);
  printf("slice of a parameter along a major dimension: %d kernels\n", k);
  CHECK_EQ_INT(k, 1); /* computed in its reader's kernel (dslice_cache_b1s1024h8d128_n1_bf16) */
  /* across the tile (the lanes' dimension of bf16[8,64,128]): a kernel of its own */
  const char *lanes =
      "HloModule m\nENTRY e {\n x = bf16[8,64,128] parameter(0)\n i = s32[] parameter(1)\n z = s32[] constant(0)\n"
      " a = bf16[8,64,1] dynamic-slice(x, z, z, i), dynamic_slice_sizes={8,64,1}\n"
      " ROOT y = bf16[8,64,1] negate(a)\n}\n";
  k = kernels_with(lanes, TPU_OP_DYNAMIC_SLICE, ds);
  printf("slice of a parameter across its lanes: %d kernels\n", k);
  CHECK_EQ_INT(k, 2);
  /* a scan step's slice of its stacked input, read through a broadcast: its own kernel (the
   * compiled selective scan's C slice); added to the state: in the step's kernel */
  const char *bc =
      "HloModule m\nENTRY e {\n s = f32[64,8,16] parameter(0)\n h = f32[8,512,16] parameter(1)\n i = s32[] parameter(2)\n"
      " z = s32[] constant(0)\n c = f32[1,8,16] dynamic-slice(s, i, z, z), dynamic_slice_sizes={1,8,16}\n"
      " r = f32[8,16] reshape(c)\n b = f32[8,512,16] broadcast(r), dimensions={0,2}\n ROOT y = f32[8,512,16] multiply(h, b)\n}\n";
  k = kernels_with(bc, TPU_OP_DYNAMIC_SLICE, ds);
  printf("slice read through a broadcast: %d kernels\n", k);
  CHECK_EQ_INT(k, 2);
}

/* A reduce whose result is narrowed (a bf16 sum accumulated in f32) writes the narrow type
 * itself, one kernel, as the XLA TPU compiler's reduce to bf16 (families reduce_sum_*_bf16);
 * a widening convert of the sum stays a kernel of its own. */
static void test_narrowed_reduce(void) {
  const char *fmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = bf16[64,128] parameter(0)\n c = f32[64,128] convert(x)\n z = f32[] constant(0)\n"
      " r = f32[64] reduce(c, z), dimensions={1}, to_apply=add\n ROOT y = %s[64] convert(r)\n}\n";
  char src[1024];
  int conv[8];
  snprintf(src, sizeof src, fmt, "bf16");
  int k = kernels_with(src, TPU_OP_CONVERT, conv);
  printf("bf16 sum: %d kernels\n", k);
  CHECK_EQ_INT(k, 1);
  CHECK_EQ_INT(conv[0], 2);
  snprintf(src, sizeof src, fmt, "f64");
  k = kernels_with(src, TPU_OP_CONVERT, conv);
  printf("f64 of an f32 sum: %d kernels\n", k);
  CHECK_EQ_INT(k, 2);
  /* narrowed, then transposed, on its way out of the program: where the result's layout (the
   * least padded one) holds the sum in the order the reduce writes it, the reduce writes it
   * so, one kernel (the compiler's reduce to bf16[16,3]{0,1} for einsum('bca,ba->ac')); where
   * it does not (bf16[4,8]{1,0} from a sum laid out [8,4]), the transpose is a kernel of its
   * own, as the compiler's `copy` */
  const char *tfmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = bf16[%d,%d,512] parameter(0)\n c = f32[%d,%d,512] convert(x)\n z = f32[] constant(0)\n"
      " r = f32[%d,%d] reduce(c, z), dimensions={2}, to_apply=add\n n = bf16[%d,%d] convert(r)\n"
      " ROOT t = bf16[%d,%d] transpose(n), dimensions={1,0}\n}\n";
  int shapes[2][2] = {{3, 16}, {8, 4}};
  for (int i = 0; i < 2; i++) {
    int a = shapes[i][0], b = shapes[i][1];
    snprintf(src, sizeof src, tfmt, a, b, a, b, a, b, a, b, b, a);
    k = kernels_with(src, TPU_OP_CONVERT, conv);
    printf("f32[%d,%d] sum narrowed and transposed to bf16[%d,%d]: %d kernels\n", a, b, b, a, k);
    CHECK_EQ_INT(k, i == 0 ? 1 : 2);
  }
  /* narrowed, then reshaped only by dimensions of size 1 ([64] -> [64,1] -> [1,64], which
   * move no bytes): one kernel, as the compiler's strength-reduced einsum('ba,acb->ca'), whose
   * bf16[8] reduce is bitcast to the result */
  const char *rfmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = bf16[64,128] parameter(0)\n c = f32[64,128] convert(x)\n z = f32[] constant(0)\n"
      " r = f32[64] reduce(c, z), dimensions={1}, to_apply=add\n n = bf16[64] convert(r)\n"
      " u = bf16[64,1] reshape(n)\n ROOT t = bf16[1,64] reshape(u)\n}\n";
  k = kernels_with(rfmt, TPU_OP_CONVERT, conv);
  printf("f32[64] sum narrowed and reshaped to bf16[1,64]: %d kernels\n", k);
  CHECK_EQ_INT(k, 1);
  /* ... but not to a column, [64] -> [64,1], whose tiled layout pads each element to a row
   * of its own: a copy, as the compiler's `reshape` kernel after gemm_w8a16_1024x1000x1's
   * bf16[1024] sum */
  const char *cfmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = bf16[64,128] parameter(0)\n c = f32[64,128] convert(x)\n z = f32[] constant(0)\n"
      " r = f32[64] reduce(c, z), dimensions={1}, to_apply=add\n n = bf16[64] convert(r)\n"
      " ROOT u = bf16[64,1] reshape(n)\n}\n";
  k = kernels_with(cfmt, TPU_OP_CONVERT, conv);
  printf("f32[64] sum narrowed and reshaped to bf16[64,1]: %d kernels\n", k);
  CHECK_EQ_INT(k, 2);
}

static void test_matmul_fusion(void) {
  /* attention: softmax(q k^T / 8) v over rows of S */
  const char *attn =
      "HloModule m\nmx { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] maximum(a, b) }\n"
      "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n q = bf16[2,4,%d,64] parameter(0)\n k = bf16[2,4,%d,64] parameter(1)\n"
      " v = bf16[2,4,%d,64] parameter(2)\n"
      " s = bf16[2,4,%d,%d] dot(q, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}\n"
      " sf = f32[2,4,%d,%d] convert(s)\n c8 = f32[] constant(8)\n b8 = f32[2,4,%d,%d] broadcast(c8), dimensions={}\n"
      " sc = f32[2,4,%d,%d] divide(sf, b8)\n ninf = f32[] constant(-inf)\n"
      " m = f32[2,4,%d] reduce(sc, ninf), dimensions={3}, to_apply=mx\n"
      " mb = f32[2,4,%d,%d] broadcast(m), dimensions={0,1,2}\n d = f32[2,4,%d,%d] subtract(sc, mb)\n"
      " ex = f32[2,4,%d,%d] exponential(d)\n z = f32[] constant(0)\n"
      " sm = f32[2,4,%d] reduce(ex, z), dimensions={3}, to_apply=add\n"
      " smb = f32[2,4,%d,%d] broadcast(sm), dimensions={0,1,2}\n p = f32[2,4,%d,%d] divide(ex, smb)\n"
      " pb = bf16[2,4,%d,%d] convert(p)\n"
      " ROOT o = bf16[2,4,%d,64] dot(pb, v), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n}\n";
  char src[4096];
  int rows[2] = {256, 4096};
  for (int t = 0; t < 2; t++) {
    int r = rows[t];
    snprintf(src, sizeof src, attn, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r);
    kernel_census kc = kernel_census_of(src);
    printf("attention, rows of %d: %d kernels\n", r, kc.kernels);
    if (t == 0) {
      /* q k^T with the max, exp and sum in its epilogue; the division fed into p v (the
       * scaling by 1/8, XLA's multiply, is computed for the max and again for the exponent) */
      CHECK_EQ_INT(kc.kernels, 2);
      CHECK(kc.dots[0] == 1 && kc.reduces[0] == 2 && kc.divides[0] >= 1);
      CHECK(kc.dots[1] == 1 && kc.reduces[1] == 0 && kc.divides[1] == 1);
    } else {
      /* rows over MATMUL_ROW_MAX: the exponent step is its own kernel (with the sum) */
      CHECK_EQ_INT(kc.kernels, 3);
      CHECK(kc.dots[0] == 1 && kc.reduces[0] == 1);
      CHECK(kc.dots[1] == 0 && kc.reduces[1] == 1);
      /* the exponent step scales q k^T itself (a multiply by a constant in XLA's program):
       * the scaled scores are never stored (ring attention's partitioning, docs/spmd.md) */
      CHECK_EQ_INT(kc.divides[1], 1);
      CHECK(kc.dots[2] == 1 && kc.divides[2] == 1);
    }
  }
  /* the same on bf16 scores, scaled in bf16 and widened for the softmax (JAX's attention in
   * bf16, families bert_*, t5_*, whisper_*, swin_*, attn_*_bf16): the compiler's QK^T kernel
   * stores the bf16 scores with their row max, a vector kernel computes exp(s - max) and its
   * row sum, and PV computes exp(s - max) / sum again as its operand streams in */
  const char *attn16 =
      "HloModule m\nmx { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] maximum(a, b) }\n"
      "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n q = bf16[2,4,256,64] parameter(0)\n k = bf16[2,4,256,64] parameter(1)\n"
      " v = bf16[2,4,256,64] parameter(2)\n"
      " s = bf16[2,4,256,256] dot(q, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}\n"
      " c8 = bf16[] constant(0.125)\n b8 = bf16[2,4,256,256] broadcast(c8), dimensions={}\n"
      " sc = bf16[2,4,256,256] multiply(s, b8)\n sf = f32[2,4,256,256] convert(sc)\n ninf = f32[] constant(-inf)\n"
      " m = f32[2,4,256] reduce(sf, ninf), dimensions={3}, to_apply=mx\n"
      " mb = f32[2,4,256,256] broadcast(m), dimensions={0,1,2}\n d = f32[2,4,256,256] subtract(sf, mb)\n"
      " ex = f32[2,4,256,256] exponential(d)\n z = f32[] constant(0)\n"
      " sm = f32[2,4,256] reduce(ex, z), dimensions={3}, to_apply=add\n"
      " smb = f32[2,4,256,256] broadcast(sm), dimensions={0,1,2}\n p = f32[2,4,256,256] divide(ex, smb)\n"
      " pb = bf16[2,4,256,256] convert(p)\n"
      " ROOT o = bf16[2,4,256,64] dot(pb, v), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n}\n";
  kernel_census k16 = kernel_census_of(attn16);
  printf("attention on bf16 scores: %d kernels\n", k16.kernels);
  CHECK_EQ_INT(k16.kernels, 3);
  CHECK(k16.dots[0] == 1 && k16.reduces[0] == 1 && k16.exps[0] == 0);
  CHECK(k16.dots[1] == 0 && k16.reduces[1] == 1 && k16.exps[1] == 1);
  CHECK(k16.dots[2] == 1 && k16.reduces[2] == 0 && k16.exps[2] == 1 && k16.divides[2] == 1);
  /* masked bf16 scores: QK^T's kernel stores select(mask, s x 0.125, -big), the end of its
   * epilogue, beside its row max; the exponent kernel and PV read it and neither scales nor
   * masks (the compiler's mistral_fwd_* and llama_fwd_* QK^T kernels) */
  const char *masked =
      "HloModule m\nmx { a = bf16[] parameter(0)\n b = bf16[] parameter(1)\n ROOT s = bf16[] maximum(a, b) }\n"
      "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n q = bf16[2,4,256,64] parameter(0)\n k = bf16[2,4,256,64] parameter(1)\n"
      " v = bf16[2,4,256,64] parameter(2)\n mask = pred[256,256] parameter(3)\n"
      " s = bf16[2,4,256,256] dot(q, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}\n"
      " c8 = bf16[] constant(0.125)\n b8 = bf16[2,4,256,256] broadcast(c8), dimensions={}\n"
      " sc = bf16[2,4,256,256] multiply(s, b8)\n mb4 = pred[2,4,256,256] broadcast(mask), dimensions={2,3}\n"
      " big = bf16[] constant(-3.39e+38)\n bigb = bf16[2,4,256,256] broadcast(big), dimensions={}\n"
      " sm0 = bf16[2,4,256,256] select(mb4, sc, bigb)\n ninf = bf16[] constant(-inf)\n"
      " m16 = bf16[2,4,256] reduce(sm0, ninf), dimensions={3}, to_apply=mx\n m = f32[2,4,256] convert(m16)\n"
      " sf = f32[2,4,256,256] convert(sm0)\n"
      " mb = f32[2,4,256,256] broadcast(m), dimensions={0,1,2}\n d = f32[2,4,256,256] subtract(sf, mb)\n"
      " ex = f32[2,4,256,256] exponential(d)\n z = f32[] constant(0)\n"
      " sm = f32[2,4,256] reduce(ex, z), dimensions={3}, to_apply=add\n"
      " smb = f32[2,4,256,256] broadcast(sm), dimensions={0,1,2}\n p = f32[2,4,256,256] divide(ex, smb)\n"
      " pb = bf16[2,4,256,256] convert(p)\n"
      " ROOT o = bf16[2,4,256,64] dot(pb, v), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n}\n";
  kernel_census km = kernel_census_of(masked);
  printf("attention on masked bf16 scores: %d kernels, selects %d/%d/%d\n", km.kernels, km.selects[0], km.selects[1],
         km.selects[2]);
  CHECK_EQ_INT(km.kernels, 3);
  CHECK(km.dots[0] == 1 && km.reduces[0] == 1 && km.selects[0] == 1);
  CHECK(km.dots[1] == 0 && km.reduces[1] == 1 && km.exps[1] == 1 && km.selects[1] == 0 && km.multiplies[1] == 0);
  CHECK(km.dots[2] == 1 && km.exps[2] == 1 && km.selects[2] == 0 && km.multiplies[2] == 0);
  /* f32 scores widened off a transpose of QK^T's result (the dot's result in another layout,
   * as a grouped-query attention's einsum gives it): still the corpus form, two kernels */
  const char *attnt =
      "HloModule m\nmx { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] maximum(a, b) }\n"
      "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n q = bf16[2,4,256,64] parameter(0)\n k = bf16[2,4,256,64] parameter(1)\n"
      " v = bf16[2,4,256,64] parameter(2)\n"
      " s = bf16[2,4,256,256] dot(q, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}\n"
      " st = bf16[2,4,256,256] transpose(s), dimensions={0,1,3,2}\n"
      " sf = f32[2,4,256,256] convert(st)\n c8 = f32[] constant(8)\n b8 = f32[2,4,256,256] broadcast(c8), dimensions={}\n"
      " sc = f32[2,4,256,256] divide(sf, b8)\n ninf = f32[] constant(-inf)\n"
      " m = f32[2,4,256] reduce(sc, ninf), dimensions={3}, to_apply=mx\n"
      " mb = f32[2,4,256,256] broadcast(m), dimensions={0,1,2}\n d = f32[2,4,256,256] subtract(sc, mb)\n"
      " ex = f32[2,4,256,256] exponential(d)\n z = f32[] constant(0)\n"
      " sm = f32[2,4,256] reduce(ex, z), dimensions={3}, to_apply=add\n"
      " smb = f32[2,4,256,256] broadcast(sm), dimensions={0,1,2}\n p = f32[2,4,256,256] divide(ex, smb)\n"
      " pb = bf16[2,4,256,256] convert(p)\n"
      " ROOT o = bf16[2,4,256,64] dot(pb, v), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n}\n";
  kernel_census kt = kernel_census_of(attnt);
  printf("attention on f32 scores off a transpose: %d kernels\n", kt.kernels);
  CHECK_EQ_INT(kt.kernels, 2);
  CHECK(kt.dots[0] == 1 && kt.reduces[0] == 2 && kt.exps[0] == 1);
  /* RMSNorm feeding three projections: its scaling is computed in each matmul's operand */
  const char *norm =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = bf16[64,256] parameter(0)\n g = f32[256] parameter(1)\n"
      " wq = bf16[256,256] parameter(2)\n wk = bf16[256,256] parameter(3)\n wv = bf16[256,256] parameter(4)\n"
      " xf = f32[64,256] convert(x)\n sq = f32[64,256] multiply(xf, xf)\n z = f32[] constant(0)\n"
      " ss = f32[64] reduce(sq, z), dimensions={1}, to_apply=add\n"
      " rs = f32[64] rsqrt(ss)\n rb = f32[64,256] broadcast(rs), dimensions={0}\n"
      " gb = f32[64,256] broadcast(g), dimensions={1}\n n0 = f32[64,256] multiply(xf, rb)\n"
      " n1 = f32[64,256] multiply(n0, gb)\n nb = bf16[64,256] convert(n1)\n"
      " yq = bf16[64,256] dot(nb, wq), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      " yk = bf16[64,256] dot(nb, wk), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      " yv = bf16[64,256] dot(nb, wv), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      " ROOT t = (bf16[64,256], bf16[64,256], bf16[64,256]) tuple(yq, yk, yv)\n}\n";
  kernel_census kc = kernel_census_of(norm);
  printf("RMSNorm into three projections: %d kernels\n", kc.kernels);
  /* the sum of squares, its rsqrt (a kernel of its own, as the compiler's add_rsqrt_fusion in
   * families llama_fwd_*: an expensive producer stays out of the kernels that broadcast it),
   * then three matmuls */
  CHECK_EQ_INT(kc.kernels, 5);
  int scaled = 0;
  for (int k = 0; k < 5 && k < kc.kernels; k++) scaled += kc.dots[k] == 1 && kc.multiplies[k] >= 2;
  CHECK_EQ_INT(scaled, 3);
}

/* Sibling multi-output fusion (compile/passes/fuse_merge.c): two reductions over one array become
 * one kernel (a column sum and a row sum), two scalings of it one kernel, but a reduction
 * and an independent scaling stay two (the XLA TPU compiler's choice, probed on v5e). */
static void test_sibling_fusion(void) {
  const char *fmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n xb = bf16[256,512] parameter(0)\n x = f32[256,512] convert(xb)\n z = f32[] constant(0)\n"
      " two = f32[] constant(2)\n tb = f32[256,512] broadcast(two), dimensions={}\n"
      " col = f32[512] reduce(x, z), dimensions={0}, to_apply=add\n"
      " sq = f32[256,512] multiply(x, x)\n row = f32[256] reduce(sq, z), dimensions={1}, to_apply=add\n"
      " s2 = f32[256,512] multiply(x, tb)\n s3 = f32[256,512] add(x, tb)\n"
      " ROOT t = %s tuple(%s)\n}\n";
  char src[1024];
  snprintf(src, sizeof src, fmt, "(f32[512], f32[256])", "col, row");
  kernel_census kc = kernel_census_of(src);
  printf("column sum + row sum: %d kernels\n", kc.kernels);
  CHECK_EQ_INT(kc.kernels, 1);
  snprintf(src, sizeof src, fmt, "(f32[256,512], f32[256,512])", "s2, s3");
  kc = kernel_census_of(src);
  printf("two scalings: %d kernels\n", kc.kernels);
  CHECK_EQ_INT(kc.kernels, 1);
  snprintf(src, sizeof src, fmt, "(f32[512], f32[256,512])", "col, s2");
  kc = kernel_census_of(src);
  printf("column sum + scaling: %d kernels\n", kc.kernels);
  CHECK_EQ_INT(kc.kernels, 2);
}

/* The sibling merges ask whether one fusion reaches another through operands (merging two
 * that do would make a cycle). fuse_merge.c answers from an ancestor bitset, or by walking
 * for a computation over tpu__fuse_reach_bitset_max instructions; both must give the same
 * kernels. Each block reads x: its column sum c, a row sum of x*x (w) and a row sum of
 * x * c (v, which depends on c); w and v merge, c stays apart (it would make a cycle); the
 * next block's x adds v + w back, a kernel of its own (fuse.c broadcast_source): 10 kernels
 * for 3 blocks, 37 for 12 (with every question answered "no", the 3 blocks' reductions
 * merge). */
static int reach_blocks(char *src, size_t cap, int n) {
  int len = snprintf(src, cap,
                     "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
                     "ENTRY e {\n x0 = f32[256,512] parameter(0)\n z = f32[] constant(0)\n");
  for (int k = 0; k < n; k++)
    len += snprintf(src + len, cap - (size_t)len,
                    " c%d = f32[512] reduce(x%d, z), dimensions={0}, to_apply=add\n"
                    " s%d = f32[256,512] multiply(x%d, x%d)\n w%d = f32[256] reduce(s%d, z), dimensions={1}, to_apply=add\n"
                    " cb%d = f32[256,512] broadcast(c%d), dimensions={1}\n m%d = f32[256,512] multiply(x%d, cb%d)\n"
                    " v%d = f32[256] reduce(m%d, z), dimensions={1}, to_apply=add\n u%d = f32[256] add(v%d, w%d)\n"
                    " ub%d = f32[256,512] broadcast(u%d), dimensions={0}\n x%d = f32[256,512] add(x%d, ub%d)\n",
                    k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k + 1, k, k);
  return len + snprintf(src + len, cap - (size_t)len, " ROOT o = f32[256,512] copy(x%d)\n}\n", n);
}

static void test_sibling_reach(void) {
  static char src[16384];
  int blocks[] = {3, 12}, want[] = {10, 37};
  for (int bi = 0; bi < 2; bi++) {
    CHECK(reach_blocks(src, sizeof src, blocks[bi]) < (int)sizeof src);
    kernel_census bits = kernel_census_of(src);
    int keep = tpu__fuse_reach_bitset_max;
    tpu__fuse_reach_bitset_max = 0;
    kernel_census walk = kernel_census_of(src);
    tpu__fuse_reach_bitset_max = keep;
    printf("%d blocks: %d kernels (bitset), %d (walk)\n", blocks[bi], bits.kernels, walk.kernels);
    CHECK_EQ_INT(bits.kernels, want[bi]);
    CHECK_EQ_INT(walk.kernels, want[bi]);
    CHECK(!memcmp(&bits, &walk, sizeof bits));
  }
}

/* A concatenate does not take a slice starting past the origin (the XLA TPU compiler's
 * roll: x[:, 12:] a kernel of its own, then the concatenation); one starting at the origin
 * joins it. */
static void test_offset_slice_concat(void) {
  const char *roll =
      "HloModule roll\n\nENTRY %main (x: s8[197,128]) -> s8[197,128] {\n"
      "  %x = s8[197,128] parameter(0)\n"
      "  %a = s8[197,116] slice(%x), slice={[0:197], [12:128]}\n"
      "  %b = s8[197,12] slice(%x), slice={[0:197], [0:12]}\n"
      "  ROOT %r = s8[197,128] concatenate(%a, %b), dimensions={1}\n}\n";
  const char *head =
      "HloModule head\n\nENTRY %main (x: s8[197,128], y: s8[197,116]) -> s8[197,128] {\n"
      "  %x = s8[197,128] parameter(0)\n  %y = s8[197,116] parameter(1)\n"
      "  %b = s8[197,12] slice(%x), slice={[0:197], [0:12]}\n"
      "  ROOT %r = s8[197,128] concatenate(%y, %b), dimensions={1}\n}\n";
  kernel_census r = kernel_census_of(roll), h = kernel_census_of(head);
  printf("concatenate of slices: roll %d kernels, origin slice %d\n", r.kernels, h.kernels);
  CHECK(r.kernels == 2);
  CHECK(h.kernels == 1);
  /* rotate_half, concatenate(-x2, x1): the shifted slice and its negation are a kernel of
   * their own, then the concatenation (libtpu's slice_negate_fusion and pad_maximum_fusion) */
  const char *rot =
      "HloModule rot\n\nENTRY %main (x: bf16[4,64,8,128]) -> bf16[4,64,8,128] {\n"
      "  %x = bf16[4,64,8,128] parameter(0)\n"
      "  %x1 = bf16[4,64,8,64] slice(%x), slice={[0:4], [0:64], [0:8], [0:64]}\n"
      "  %x2 = bf16[4,64,8,64] slice(%x), slice={[0:4], [0:64], [0:8], [64:128]}\n"
      "  %n2 = bf16[4,64,8,64] negate(%x2)\n"
      "  ROOT %r = bf16[4,64,8,128] concatenate(%n2, %x1), dimensions={3}\n}\n";
  kernel_census q = kernel_census_of(rot);
  printf("rotate_half: %d kernels\n", q.kernels);
  CHECK(q.kernels == 2);
  /* a reverse is a kernel of its own: reversed and incremented is two kernels */
  const char *rev =
      "HloModule rev\n\nENTRY %main (x: f32[6,197]) -> f32[6,197] {\n"
      "  %x = f32[6,197] parameter(0)\n  %v = f32[6,197] reverse(%x), dimensions={0}\n"
      "  %one = f32[] constant(1)\n  %b = f32[6,197] broadcast(%one), dimensions={}\n"
      "  ROOT %r = f32[6,197] add(%v, %b)\n}\n";
  kernel_census v = kernel_census_of(rev);
  printf("reverse then add: %d kernels\n", v.kernels);
  CHECK(v.kernels == 2);
}

/* A dynamic-update-slice joins the fusion that computes its update, in place on its
 * operand (XLA's in-place dynamic-update-slice fusion; the compiled cumsum scan's step is
 * one fusion): the update's producer also read elsewhere leaves as a second result. */
static void test_fused_update_slice(void) {
  const char *src =
      "HloModule scan_step\n\nENTRY %main (s: f32[16,8,256], c: f32[8,256], x: f32[8,256], i: s32[]) -> "
      "(f32[8,256], f32[16,8,256]) {\n"
      "  %s = f32[16,8,256] parameter(0)\n  %c = f32[8,256] parameter(1)\n"
      "  %x = f32[8,256] parameter(2)\n  %i = s32[] parameter(3)\n"
      "  %a = f32[8,256] add(%c, %x)\n  %r = f32[1,8,256] reshape(%a)\n"
      "  %z = s32[] constant(0)\n"
      "  %d = f32[16,8,256] dynamic-update-slice(%s, %r, %i, %z, %z)\n"
      "  ROOT %t = (f32[8,256], f32[16,8,256]) tuple(%a, %d)\n}\n";
  kernel_census kc = kernel_census_of(src);
  printf("scan step's add and update of the stacked outputs: %d kernels\n", kc.kernels);
  CHECK_EQ_INT(kc.kernels, 2); /* the non-donated parameter's copy (param_copy.c), the fusion */
}

/* A sort runs with its batch in the lanes unless the sorted dimension fills them and the batch
 * does not (sort_layout.c): bf16[64,100] sorted along 100 is copied into {0,1} first and back
 * into the program's {1,0} after; [96,256] sorts as it is; f32[1024,8] (a parameter laid out
 * {0,1} already, and a result that pads least so) needs no copy. */
static int sort_copies(const char *src) {
  tpu_module *m = compile_src(src);
  if (!m) return -1;
  int n = 0;
  for (int i = 0; i < m->entry->ninstrs; i++) n += m->entry->instrs[i]->op == TPU_OP_COPY;
  tpu_module_free(m);
  return n;
}

static void test_sort_layout(void) {
  char src[512];
  const char *fmt = "HloModule s\n\ncmp {\n  a = %s[] parameter(0)\n  b = %s[] parameter(1)\n"
                    "  ROOT r = pred[] compare(a, b), direction=LT\n}\n\n"
                    "ENTRY main {\n  x = %s[%d,%d] parameter(0)\n"
                    "  ROOT s = %s[%d,%d] sort(x), dimensions={1}, to_apply=cmp\n}\n";
  snprintf(src, sizeof src, fmt, "bf16", "bf16", "bf16", 64, 100, "bf16", 64, 100);
  int narrow = sort_copies(src);
  snprintf(src, sizeof src, fmt, "f32", "f32", "f32", 96, 256, "f32", 96, 256);
  int wide = sort_copies(src);
  snprintf(src, sizeof src, fmt, "f32", "f32", "f32", 128, 256, "f32", 128, 256);
  int batch = sort_copies(src);
  snprintf(src, sizeof src, fmt, "f32", "f32", "f32", 1024, 8, "f32", 1024, 8);
  int laid = sort_copies(src);
  printf("sort layout copies: [64,100] %d, [96,256] %d, [128,256] %d, [1024,8] %d\n", narrow, wide, batch, laid);
  CHECK_EQ_INT(narrow, 2);
  CHECK_EQ_INT(wide, 0);
  CHECK_EQ_INT(batch, 2);
  CHECK_EQ_INT(laid, 0);
}

/* ApproxTopK's PartialReduce takes the iota of its indices into its kernel (fuse.c
 * partial_reduce): one kernel, no iota or broadcast written, the custom call not left behind. */
static void test_partial_reduce_iota(void) {
  const char *src =
      "HloModule a\n\ncmp {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  c = s32[] parameter(2)\n"
      "  d = s32[] parameter(3)\n  ROOT r = pred[] compare(a, b), direction=GT\n}\n\n"
      "ENTRY main {\n  x = f32[32,4096] parameter(0)\n  i = s32[4096] iota(), iota_dimension=0\n"
      "  ib = s32[32,4096] broadcast(i), dimensions={1}\n  lo = f32[] constant(-inf)\n  m = s32[] constant(-1)\n"
      "  ROOT p = (f32[32,256], s32[32,256]) custom-call(x, ib, lo, m), custom_call_target=\"PartialReduce\", "
      "called_computations={cmp}, backend_config={\"log2_reduction\": 4, \"reduction_dim\": 1, "
      "\"to_apply_type\": \"comparator\", \"top_k\": 4, \"recall_target\": 0.95}\n}\n";
  tpu_module *m = compile_src(src);
  int kernels = 0, iotas_fused = 0, loose = 0;
  for (int i = 0; m && i < m->entry->ninstrs; i++) {
    const tpu_instr *in = m->entry->instrs[i];
    if (in->op == TPU_OP_PARAMETER || in->op == TPU_OP_CONSTANT || in->op == TPU_OP_GET_TUPLE_ELEMENT ||
        in->op == TPU_OP_TUPLE)
      continue;
    kernels++;
    loose += in->op == TPU_OP_CUSTOM_CALL || in->op == TPU_OP_IOTA || in->op == TPU_OP_BROADCAST;
    for (int j = 0; in->op == TPU_OP_FUSION && j < in->calls->ninstrs; j++) iotas_fused += in->calls->instrs[j]->op == TPU_OP_IOTA;
  }
  tpu_module_free(m);
  printf("partial reduce with its iota: %d kernels, %d iota fused, %d left outside\n", kernels, iotas_fused, loose);
  CHECK_EQ_INT(kernels, 1);
  CHECK_EQ_INT(iotas_fused, 1);
  CHECK_EQ_INT(loose, 0);
}

/* A batch norm after a convolution (families m_resnet_*, m_resnext, m_mobilenet_*,
 * m_efficientnet): the per-channel sum over batch and space, which keeps the minor
 * (channel) dimension, is taken in the convolution's kernel, as the compiler's
 * convert_reduce_fusion; the variance's sum reads the mean back and is a kernel of its own. */
static void test_conv_column_sums(void) {
  const char *src =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = bf16[8,28,28,64] parameter(0)\n w = bf16[3,3,64,64] parameter(1)\n"
      " c = bf16[8,28,28,64] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n"
      " cf = f32[8,28,28,64] convert(c)\n z = f32[] constant(0)\n"
      " s = f32[64] reduce(cf, z), dimensions={0,1,2}, to_apply=add\n"
      " n = f32[] constant(6272)\n nb = f32[64] broadcast(n), dimensions={}\n mean = f32[64] divide(s, nb)\n"
      " mb = f32[8,28,28,64] broadcast(mean), dimensions={3}\n d = f32[8,28,28,64] subtract(cf, mb)\n"
      " sq = f32[8,28,28,64] multiply(d, d)\n v = f32[64] reduce(sq, z), dimensions={0,1,2}, to_apply=add\n"
      " vb = f32[8,28,28,64] broadcast(v), dimensions={3}\n y = f32[8,28,28,64] divide(d, vb)\n"
      " ROOT o = bf16[8,28,28,64] convert(y)\n}\n";
  kernel_census kc = kernel_census_of(src);
  int conv_k = -1, conv_reduces = -1, other_reduces = 0;
  for (int k = 0; k < kc.kernels && k < 8; k++) {
    if (kc.convs[k]) {
      conv_k = k;
      conv_reduces = kc.reduces[k];
    } else {
      other_reduces += kc.reduces[k];
    }
  }
  printf("conv + batch norm: %d kernels, %d reduces with the convolution, %d elsewhere\n", kc.kernels, conv_reduces,
         other_reduces);
  CHECK(conv_k >= 0);
  CHECK_EQ_INT(conv_reduces, 1);
  CHECK_EQ_INT(other_reduces, 1);
}

/* A batch norm's mean (the sum x 1/n) broadcast into the subtraction is a kernel of its own:
 * the XLA TPU compiler's broadcasts inside a fusion read parameters (libtpu, v5e: the sum of
 * bf16[8,16,16,128] over batch and space, convert_reduce_fusion; x 1/n,
 * broadcast_multiply_fusion; the subtraction's kernel reading it: fuse.c broadcast_source). */
static void test_mean_kernel(void) {
  const char *src =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = bf16[8,16,16,128] parameter(0)\n xf = f32[8,16,16,128] convert(x)\n z = f32[] constant(0)\n"
      " s = f32[128] reduce(xf, z), dimensions={0,1,2}, to_apply=add\n"
      " c = f32[] constant(0.00048828125)\n cb = f32[128] broadcast(c), dimensions={}\n m = f32[128] multiply(s, cb)\n"
      " mb = f32[8,16,16,128] broadcast(m), dimensions={3}\n y = f32[8,16,16,128] subtract(xf, mb)\n"
      " ROOT o = bf16[8,16,16,128] convert(y)\n}\n";
  kernel_census kc = kernel_census_of(src);
  int mean_k = 0;
  for (int k = 0; k < kc.kernels && k < 8; k++) mean_k += kc.multiplies[k] == 1 && kc.reduces[k] == 0;
  printf("sum, mean, subtraction: %d kernels, %d the mean's alone\n", kc.kernels, mean_k);
  CHECK_EQ_INT(kc.kernels, 3);
  CHECK_EQ_INT(mean_k, 1);
}

/* A matmul whose result slices cut along the lanes is its own kernel, the gate math its own
 * (the XLA TPU compiler's GRU step; libtpu v5e, bench/fidelity/probes/data/gru_order sl.hlo:
 * `fusion` then `slice_add_fusion`); over the whole result the epilogue stays in the dot's
 * kernel (ns.hlo), and so does a bias add before the slices. */
static void test_lane_sliced_matmul(void) {
  const char *sl =
      "HloModule m\nENTRY e {\n a = bf16[24,384] parameter(0)\n w = bf16[384,1152] parameter(1)\n"
      " d = bf16[24,1152] dot(a, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n%s"
      " q0 = bf16[24,384] slice(%s), slice={[0:24], [0:384]}\n q1 = bf16[24,384] slice(%s), slice={[0:24], [384:768]}\n"
      " q2 = bf16[24,384] slice(%s), slice={[0:24], [768:1152]}\n t = bf16[24,384] tanh(q0)\n"
      " m = bf16[24,384] multiply(t, q1)\n ROOT r = bf16[24,384] add(m, q2)\n}\n";
  const char *bias = " b = bf16[1152] parameter(2)\n bb = bf16[24,1152] broadcast(b), dimensions={1}\n"
                     " db = bf16[24,1152] add(d, bb)\n";
  const char *ns =
      "HloModule m\nENTRY e {\n a = bf16[24,384] parameter(0)\n w = bf16[384,1152] parameter(1)\n"
      " x = bf16[24,1152] parameter(2)\n"
      " d = bf16[24,1152] dot(a, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      " t = bf16[24,1152] tanh(d)\n m = bf16[24,1152] multiply(t, x)\n ROOT r = bf16[24,1152] add(m, d)\n}\n";
  char src[2048];
  int conv = 0;
  snprintf(src, sizeof src, sl, "", "d", "d", "d");
  int k_sl = shared_producer_kernels(src, &conv);
  snprintf(src, sizeof src, sl, bias, "db", "db", "db");
  int k_bias = shared_producer_kernels(src, &conv);
  int k_ns = shared_producer_kernels(ns, &conv);
  printf("lane-sliced matmul: %d kernels, with a bias add %d, whole result %d\n", k_sl, k_bias, k_ns);
  CHECK(k_sl == 2);
  CHECK(k_bias == 2);
  CHECK(k_ns == 1);
}

/* Grouped-query attention's PV at a batch > 1 (fuse_merge.c relaid_operand,
 * result_contracted): on a 128-wide matrix unit, when the output projection contracts PV's
 * result (through a transposition), the normalisation exp(s - max) / sum is a kernel of its
 * own before PV, as the XLA TPU compiler's divide_convert_fusion (llama_fwd_*,
 * mistral_fwd_b2s2048*; libtpu probes bench/fidelity/probes/gqa_mask.py); at a batch of 1, on
 * v6e, when the scores have other readers than the softmax (a training step's backward; here
 * a negation), when PV's result is returned, and when it is reshaped to [B, S, KV*G*H] before
 * the projection, it is computed in PV's kernel. reader: 0 PV's result returned, 1 the
 * projection, 2 the projection after a reshape, 3 the projection and a negation of the
 * scores. Returns 1 when PV's kernel holds the division, 0 when another kernel does. */
static int gqa_pv_fused(const char *chip, int batch, int reader) {
  const char *fmt =
      "HloModule m\nmax { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT m = f32[] maximum(a, b) }\n"
      "ENTRY e {\n s = bf16[%d,2,4,256,256] parameter(0)\n"
      " sm = f32[%d,2,4,256] parameter(1)\n v = bf16[%d,256,2,64] parameter(2)\n"
      " w = bf16[2,4,64,512] parameter(3)\n w2 = bf16[512,512] parameter(4)\n"
      " sf = f32[%d,2,4,256,256] convert(s)\n ninf = f32[] constant(-inf)\n"
      " mx = f32[%d,2,4,256] reduce(sf, ninf), dimensions={4}, to_apply=max\n"
      " mb = f32[%d,2,4,256,256] broadcast(mx), dimensions={0,1,2,3}\n"
      " d = f32[%d,2,4,256,256] subtract(sf, mb)\n ex = f32[%d,2,4,256,256] exponential(d)\n"
      " sb = f32[%d,2,4,256,256] broadcast(sm), dimensions={0,1,2,3}\n p = f32[%d,2,4,256,256] divide(ex, sb)\n"
      " pb = bf16[%d,2,4,256,256] convert(p)\n"
      " o = bf16[%d,2,4,256,64] dot(pb, v), lhs_batch_dims={0,1}, lhs_contracting_dims={4}, rhs_batch_dims={0,2}, rhs_contracting_dims={1}\n"
      " ot = bf16[%d,256,2,4,64] transpose(o), dimensions={0,3,1,2,4}\n";
  const char *tail[] = {" ROOT t = (bf16[%d,2,4,256,64]) tuple(o)\n}\n",
                        " y = bf16[%d,256,512] dot(ot, w), lhs_contracting_dims={2,3,4}, rhs_contracting_dims={0,1,2}\n"
                        " ROOT t = (bf16[%d,256,512]) tuple(y)\n}\n",
                        " rs = bf16[%d,256,512] reshape(ot)\n"
                        " y = bf16[%d,256,512] dot(rs, w2), lhs_contracting_dims={2}, rhs_contracting_dims={0}\n"
                        " ROOT t = (bf16[%d,256,512]) tuple(y)\n}\n",
                        " y = bf16[%d,256,512] dot(ot, w), lhs_contracting_dims={2,3,4}, rhs_contracting_dims={0,1,2}\n"
                        " n = bf16[%d,2,4,256,256] negate(s)\n"
                        " ROOT t = (bf16[%d,256,512], bf16[%d,2,4,256,256]) tuple(y, n)\n}\n"};
  char src[4096];
  int b = batch, len = snprintf(src, sizeof src, fmt, b, b, b, b, b, b, b, b, b, b, b, b, b);
  snprintf(src + len, sizeof src - (size_t)len, tail[reader], b, b, b, b);
  tpu_chip saved = g_chip;
  tpu_diag d;
  CHECK(tpu_chip_load(chip, &g_chip, &d) == TPU_OK);
  kernel_census kc = kernel_census_of(src);
  g_chip = saved;
  int fused = 0, elsewhere = 0;
  for (int k = 0; k < kc.kernels && k < 8; k++) {
    fused += kc.dots[k] >= 1 && kc.divides[k] == 1;
    elsewhere += kc.dots[k] == 0 && kc.divides[k] == 1;
  }
  CHECK_EQ_INT(fused + elsewhere, 1);
  return fused;
}

static void test_gqa_pv_operand(void) {
  int v5e2 = gqa_pv_fused("v5e", 2, 1), v4 = gqa_pv_fused("v4", 3, 1), v5e1 = gqa_pv_fused("v5e", 1, 1);
  int v6e2 = gqa_pv_fused("v6e", 2, 1), read = gqa_pv_fused("v5p", 2, 3);
  int returned = gqa_pv_fused("v5e", 3, 0), reshaped = gqa_pv_fused("v4", 2, 2);
  printf("GQA PV holds the normalisation: v5e batch 2 %d, v4 batch 3 %d, v5e batch 1 %d, v6e batch 2 %d, "
         "scores read elsewhere %d, PV returned %d, reshaped before the projection %d\n",
         v5e2, v4, v5e1, v6e2, read, returned, reshaped);
  CHECK_EQ_INT(v5e2, 0);
  CHECK_EQ_INT(v4, 0);
  CHECK_EQ_INT(v5e1, 1);
  CHECK_EQ_INT(v6e2, 1);
  CHECK_EQ_INT(read, 1);
  CHECK_EQ_INT(returned, 1);
  CHECK_EQ_INT(reshaped, 1);
}

/* The multiplies in the kernel that holds the dot of src's program, or -1 with none. */
static int dot_kernel_multiplies(const char *src) {
  tpu_module *m = compile_src(src);
  int found = -1;
  for (int i = 0; m && i < m->entry->ninstrs; i++) {
    const tpu_instr *in = m->entry->instrs[i];
    if (in->op == TPU_OP_DOT) found = 0; /* a bare dot: nothing fused in */
    if (in->op != TPU_OP_FUSION) continue;
    int dots = 0, muls = 0;
    for (int j = 0; j < in->calls->ninstrs; j++) {
      dots += in->calls->instrs[j]->op == TPU_OP_DOT;
      muls += in->calls->instrs[j]->op == TPU_OP_MULTIPLY;
    }
    if (dots) found = muls;
  }
  if (m) tpu_module_free(m);
  return found;
}

/* A dot over a layer norm of a convolution's activations, laid out by the convolution (batch
 * in the sublanes, spatial dimensions major), reads the normalised values relaid in its own
 * kernel, and the normalisation is a kernel of its own (libtpu probes off the corpus,
 * bench/fidelity/probes/conv_norm_dot.py: a 7x7 depthwise convolution of bf16[4,20,20,160],
 * its norm, @ bf16[160,640]); a transformer's norm over [B, S, C] before its projection goes
 * into the projection's kernel (fuse_merge.c prologue_pair). */
static void test_conv_norm_dot(void) {
  const char *fmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = bf16[%s,160] parameter(0)\n k = bf16[7,7,1,160] parameter(1)\n w = bf16[160,640] parameter(2)\n"
      "%s"
      " cf = f32[%s,160] convert(c)\n sq = f32[%s,160] multiply(cf, cf)\n z = f32[] constant(0)\n"
      " s = f32[%s] reduce(sq, z), dimensions={%d}, to_apply=add\n r = f32[%s] rsqrt(s)\n"
      " rb = f32[%s,160] broadcast(r), dimensions={%s}\n y = f32[%s,160] multiply(cf, rb)\n"
      " yb = bf16[%s,160] convert(y)\n"
      " ROOT o = bf16[%s,640] dot(yb, w), lhs_contracting_dims={%d}, rhs_contracting_dims={0}\n}\n";
  const char *convs[2] = {" c = bf16[4,20,20,160] convolution(x, k), window={size=7x7 pad=3_3x3_3}, "
                          "dim_labels=b01f_01io->b01f, feature_group_count=160\n",
                          /* a plain 3x3 one, run split by space-to-batch and unfolded first */
                          " k3 = bf16[3,3,160,160] parameter(3)\n c = bf16[4,20,20,160] convolution(x, k3), "
                          "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n"};
  const char *seq = " c = bf16[4,400,160] add(x, x)\n";
  char src[4096];
  int sep[3];
  for (int v = 0; v < 3; v++) {
    const char *sh = v == 2 ? "4,400" : "4,20,20";
    int r = v == 2 ? 2 : 3;
    snprintf(src, sizeof src, fmt, sh, v == 2 ? seq : convs[v], sh, sh, sh, r, sh, sh, v == 2 ? "0,1" : "0,1,2", sh, sh,
             sh, r);
    sep[v] = dot_kernel_multiplies(src);
    if (sep[v] >= 0) sep[v] = sep[v] == 0;
  }
  printf("norm then dot: after a depthwise convolution the norm %s, after a 3x3 one %s, over [B, S, C] %s\n",
         sep[0] == 1 ? "its own kernel" : "in the dot's kernel", sep[1] == 1 ? "its own kernel" : "in the dot's kernel",
         sep[2] == 1 ? "its own kernel" : "in the dot's kernel");
  CHECK_EQ_INT(sep[0], 1);
  CHECK_EQ_INT(sep[1], 1);
  CHECK_EQ_INT(sep[2], 0);
}

/* A softmax gradient dS = P (dP - rowsum) read by dQ = dS K and dK = dS^T Q (fuse_merge.c
 * recompute_pays): recomputed in each matmul's kernel when that moves fewer bytes,
 * (k - 1) x In < (k + 1) x Out for k matmul readers, else stored once by a kernel of its own
 * (libtpu probes off the corpus, bench/fidelity/probes/sgrad_dup.py: bf16 P and dP
 * recomputed; f32 P rounded to bf16, a third array, or a third matmul reader: stored). */
static void test_softmax_grad_recompute(void) {
  const char *fmt =
      "HloModule m\nENTRY e {\n p = %s[2,4,256,256] parameter(0)\n dp = bf16[2,4,256,256] parameter(1)\n"
      " r = %s[2,4,256] parameter(2)\n q = bf16[2,4,256,64] parameter(3)\n k = bf16[2,4,256,64] parameter(4)\n"
      " e = bf16[2,4,256,256] parameter(5)\n w = bf16[2,4,256,64] parameter(6)\n"
      " dpc = %s[2,4,256,256] convert(dp)\n rb = %s[2,4,256,256] broadcast(r), dimensions={0,1,2}\n"
      " sub = %s[2,4,256,256] subtract(dpc, rb)\n mul = %s[2,4,256,256] multiply(p, sub)\n"
      " mc = bf16[2,4,256,256] convert(mul)\n ec = bf16[2,4,256,256] %s\n ds = bf16[2,4,256,256] add(mc, ec)\n"
      " dq = bf16[2,4,256,64] dot(ds, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n"
      " dk = bf16[2,4,256,64] dot(ds, q), lhs_batch_dims={0,1}, lhs_contracting_dims={2}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n"
      " dw = bf16[2,4,256,64] dot(ds, w), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n"
      " ROOT t = %s\n}\n";
  struct {
    const char *what, *pt, *ec, *root;
    int kernels;
  } cases[] = {
      /* P, dP bf16 (the no-remat training steps' attention backward): 4 bytes in, 2 out */
      {"bf16 P, dP", "bf16", "broadcast(z), dimensions={}", "(bf16[2,4,256,64], bf16[2,4,256,64]) tuple(dq, dk)", 2},
      /* P f32, rounded to bf16: 6 bytes in, 2 out (calibration attn_bwd_*_causal) */
      {"f32 P", "f32", "broadcast(z), dimensions={}", "(bf16[2,4,256,64], bf16[2,4,256,64]) tuple(dq, dk)", 3},
      /* a third bf16 array: 6 bytes in, 2 out */
      {"a third array", "bf16", "copy(e)", "(bf16[2,4,256,64], bf16[2,4,256,64]) tuple(dq, dk)", 3},
      /* three matmul readers: 2 x 4 bytes against 4 x 2 */
      {"three readers", "bf16", "broadcast(z), dimensions={}",
       "(bf16[2,4,256,64], bf16[2,4,256,64], bf16[2,4,256,64]) tuple(dq, dk, dw)", 4},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char src[4096], body[4096];
    const char *t = cases[i].pt;
    snprintf(body, sizeof body, fmt, t, t, t, t, t, t, cases[i].ec, cases[i].root);
    /* the zero the broadcast cases add (folded away by the simplifier) */
    const char *at = strstr(body, " ec = ");
    snprintf(src, sizeof src, "%.*s z = bf16[] constant(0)\n%s", (int)(at - body + 1), body, at + 1);
    kernel_census kc = kernel_census_of(src);
    printf("softmax gradient, %s: %d kernels\n", cases[i].what, kc.kernels);
    CHECK_EQ_INT(kc.kernels, cases[i].kernels);
  }
}

/* A module compiled without a chip (the library's chip-independent compile; opts.chip NULL)
 * keeps its values' layouts: the passes that relay a result by the chip's tiles (relayout.c)
 * are skipped, not run against a missing chip. A convolution, a dot and an elementwise fusion
 * at the root each reached them (session 30: the result-tie and space-to-batch copies read the
 * chip for any fused root). */
static void test_no_chip(void) {
  const char *srcs[] = {
      "HloModule m\nENTRY e {\n x = bf16[2,4,12,64] parameter(0)\n w = bf16[3,3,64,64] parameter(1)\n"
      " ROOT y = bf16[2,4,12,64] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n}\n",
      "HloModule m\nENTRY e {\n a = f32[2,48,64] parameter(0)\n b = f32[2,64,40] parameter(1)\n"
      " ROOT d = f32[2,48,40] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
      "rhs_contracting_dims={1}\n}\n",
      "HloModule m\nENTRY e {\n x = f32[2,3,40,16] parameter(0)\n e = f32[2,3,40,16] exponential(x)\n"
      " ROOT y = f32[2,3,40,16] add(e, x)\n}\n"};
  for (int i = 0; i < 3; i++) {
    tpu_module *m = NULL;
    tpu_diag d;
    CHECK(tpu_hlo_parse("t.hlo", srcs[i], strlen(srcs[i]), &m, &d) == TPU_OK);
    if (!m) continue;
    tpu_compile_opts o = opts(NULL, NULL);
    o.chip = NULL;
    CHECK(tpu_compile_hlo(m, &o, &d) == TPU_OK);
    tpu_module_free(m);
  }
}

/* A dynamic-slice's start index wrap (JAX's lt/add/select on the s32[] position) joins the
 * slice's loop kernel (fuse_ops.c tpu__fuse_slice_index), as a reduction's kernel took it:
 * one kernel, as the XLA TPU compiler's add_bitcast_fusion with the wrap on the scalar unit
 * (dslice_cache_b1s1024h8d128_n1_bf16); with TPUSIM_NO_SLICE_INDEX=1 the wrap is a kernel of
 * its own before it. */
static void test_slice_index_chain(void) {
  const char *src =
      "HloModule dslice\n\nENTRY %main (c: bf16[1,64,8,128], u: bf16[1,1,8,128], p: s32[]) -> bf16[1,8,128] {\n"
      "  %c = bf16[1,64,8,128] parameter(0)\n  %u = bf16[1,1,8,128] parameter(1)\n  %p = s32[] parameter(2)\n"
      "  %z = s32[] constant(0)\n  %n = s32[] constant(64)\n"
      "  %lt = pred[] compare(%p, %z), direction=LT\n  %a = s32[] add(%p, %n)\n"
      "  %s = s32[] select(%lt, %a, %p)\n"
      "  %d = bf16[1,1,8,128] dynamic-slice(%c, %z, %s, %z, %z), dynamic_slice_sizes={1,1,8,128}\n"
      "  %e = bf16[1,1,8,128] add(%d, %u)\n"
      "  ROOT %r = bf16[1,8,128] reshape(%e)\n}\n";
  kernel_census kc = kernel_census_of(src);
  printf("dynamic-slice with its index's wrap: %d kernels\n", kc.kernels);
  CHECK_EQ_INT(kc.kernels, 1);
}

/* A dense layer's bias gradient (the sum of dY over batch and sequence) joins the kernel of
 * the dot producing dY when the compiler writes that dot as a convolution of window 1 (a
 * [B,S,K] x [K,N] dot, fuse_merge.c conv_dot: bert_train_b16s128d256h4's compiled fusion.122);
 * a [M,K] x [K,N] dot's column sum stays a kernel of its own. With
 * TPUSIM_NO_DOT_COLUMN_SUMS=1 the first is two kernels. */
static void test_dot_column_sums(void) {
  const char *fmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = bf16[%s,256] parameter(0)\n w = bf16[256,1024] parameter(1)\n"
      " g = bf16[%s,1024] parameter(2)\n"
      " c = bf16[%s,1024] dot(x, w), lhs_contracting_dims={%d}, rhs_contracting_dims={0}\n"
      " dy = bf16[%s,1024] multiply(c, g)\n cf = f32[%s,1024] convert(dy)\n z = f32[] constant(0)\n"
      " s = f32[1024] reduce(cf, z), dimensions={%s}, to_apply=add\n"
      " ROOT t = (bf16[%s,1024], f32[1024]) tuple(dy, s)\n}\n";
  const char *rows[2] = {"16,128", "2048"}, *dims[2] = {"0,1", "0"};
  int want[2] = {1, 2};
  for (int i = 0; i < 2; i++) {
    char src[1024];
    snprintf(src, sizeof src, fmt, rows[i], rows[i], rows[i], i == 0 ? 2 : 1, rows[i], rows[i], dims[i], rows[i]);
    kernel_census kc = kernel_census_of(src);
    printf("dot [%s,256] x [256,1024] and its column sum: %d kernels\n", rows[i], kc.kernels);
    CHECK_EQ_INT(kc.kernels, want[i]);
  }
}

int main(void) {
  /* The order and the chip they ran with in test_passes.c (before its chip was loaded). */
  test_shared_producer();
  test_matmul_fusion();
  test_dot_gelu_one_kernel();
  test_expensive_reuse();
  test_narrowed_reduce();
  test_window_fusion();
  test_sibling_fusion();
  test_sibling_reach();
  test_offset_slice_concat();
  test_fused_update_slice();
  test_sort_layout();
  test_partial_reduce_iota();
  test_conv_column_sums();
  test_mean_kernel();
  test_lane_sliced_matmul();
  test_gqa_pv_operand();
  test_conv_norm_dot();
  test_softmax_grad_recompute();
  test_no_chip();
  test_slice_index_chain();
  test_dot_column_sums();
  CHECK_DONE();
}
