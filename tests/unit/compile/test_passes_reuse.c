/* Work a kernel would repeat for each reuse of it: the simplifier's broadcast sinking (an
 * elementwise op on broadcasts runs over the broadcast operand's elements,
 * compile/passes/bcast_sink.c), max(x, -inf) / min(x, +inf) dropped (simplify.c), and fusion
 * keeping a chain of elementwise ops or a static slice that a consumer broadcasts out of that
 * consumer (fuse.c chained). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ref/ref.h"
#include "passes_util.h"

/* The entry's kernels (fusions and lone ops; parameters, constants, tuples left out). */
static int entry_kernels(const tpu_module *m) {
  int k = 0;
  for (int i = 0; i < m->entry->ninstrs; i++) {
    tpu_opcode op = m->entry->instrs[i]->op;
    k += op != TPU_OP_PARAMETER && op != TPU_OP_CONSTANT && op != TPU_OP_GET_TUPLE_ELEMENT && op != TPU_OP_TUPLE &&
         op != TPU_OP_BITCAST && op != TPU_OP_RESHAPE;
  }
  return k;
}

static int kernels_of(const char *src) {
  tpu_module *m = compile_src(src);
  if (!m) return -1;
  int k = entry_kernels(m);
  tpu_module_free(m);
  return k;
}

/* JAX's random-bit counter (iota_2x32_shape): a u64 row iota broadcast over the columns and
 * multiplied by the row length. XLA's simplifier multiplies before broadcasting, so the
 * product is u32[128]/u64[128] work (dropout_128x197's compiled u32[128] fusions); values
 * are unchanged. */
static void test_sink_broadcast(void) {
  const char *src =
      "HloModule m\nENTRY e {\n i = u64[128] iota(), iota_dimension=0\n"
      " ib = u64[128,197] broadcast(i), dimensions={0}\n c = u64[] constant(197)\n"
      " cb = u64[128,197] broadcast(c), dimensions={}\n r = u64[128,197] multiply(ib, cb)\n"
      " j = u64[197] iota(), iota_dimension=0\n jb = u64[128,197] broadcast(j), dimensions={1}\n"
      " s = u64[128,197] add(r, jb)\n ROOT o = u32[128,197] convert(s)\n}\n";
  char *txt = dump_src_after(src, "/tmp/tpusim_test_sink.hlo", "simplify");
  if (!txt) return;
  int narrow = count_in(txt, "u64[128] multiply("), wide = count_in(txt, "u64[128,197] multiply(");
  printf("sink broadcast: multiply over u64[128] %d, over u64[128,197] %d\n", narrow, wide);
  CHECK_EQ_INT(narrow, 1);
  CHECK_EQ_INT(wide, 0);
  free(txt);
  /* values: the compiled module computes what the program does */
  tpu_module *m0 = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse("t.hlo", src, strlen(src), &m0, &d) == TPU_OK);
  tpu_module *m1 = compile_src(src);
  if (!m0 || !m1) {
    tpu_module_free(m0);
    tpu_module_free(m1);
    return;
  }
  tpu_tensor r0, r1;
  memset(&r0, 0, sizeof r0);
  memset(&r1, 0, sizeof r1);
  CHECK(tpu_ref_run(m0, NULL, 0, &r0, &d) == TPU_OK);
  CHECK(tpu_ref_run(m1, NULL, 0, &r1, &d) == TPU_OK);
  CHECK(same_bits(&r0, &r1));
  tpu_tensor_free(&r0);
  tpu_tensor_free(&r1);
  tpu_module_free(m0);
  tpu_module_free(m1);
  /* two non-scalar broadcasts of different dimensions: no single smaller op, left alone */
  const char *two =
      "HloModule m\nENTRY e {\n a = f32[128] parameter(0)\n b = f32[197] parameter(1)\n"
      " ab = f32[128,197] broadcast(a), dimensions={0}\n bb = f32[128,197] broadcast(b), dimensions={1}\n"
      " ROOT s = f32[128,197] add(ab, bb)\n}\n";
  txt = dump_src_after(two, "/tmp/tpusim_test_sink2.hlo", "simplify");
  if (!txt) return;
  CHECK_EQ_INT(count_in(txt, "f32[128,197] add("), 1);
  free(txt);
}

/* max(x, -inf) and min(x, +inf) are x for floats (NaN included): gone after simplify, as XLA's
 * simplifier drops them (JAX's log_softmax takes max(row max, -inf)). An integer max with its
 * type's least value is not touched, nor a max with a finite constant. */
static void test_max_identity(void) {
  const char *fmt =
      "HloModule m\nENTRY e {\n x = %s[8] parameter(0)\n k = %s[] constant(%s)\n"
      " kb = %s[8] broadcast(k), dimensions={}\n ROOT y = %s[8] %s(x, kb)\n}\n";
  static const struct { const char *t, *k, *op; int left; } cases[] = {
      {"f32", "-inf", "maximum", 0}, {"f32", "inf", "minimum", 0}, {"bf16", "-inf", "maximum", 0},
      {"f32", "inf", "maximum", 1},  {"f32", "-3", "maximum", 1},  {"s32", "-2147483648", "maximum", 1},
  };
  char src[512];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *t = cases[i].t;
    snprintf(src, sizeof src, fmt, t, t, cases[i].k, t, t, cases[i].op);
    char *txt = dump_src_after(src, "/tmp/tpusim_test_maxid.hlo", "simplify");
    if (!txt) return;
    int n = count_in(txt, cases[i].op);
    printf("%s(x, %s) %s: %d left\n", cases[i].op, cases[i].k, t, n);
    CHECK_EQ_INT(n, cases[i].left);
    free(txt);
  }
}

/* A producer the consumer broadcasts joins the consumer's kernel when it is one elementwise
 * op on kernel inputs (negate, abs, convert, p * p, p + q), and is a kernel of its own when it
 * is a chain (p + 1 reads a broadcast constant, abs(negate(p)), compare + select), as the XLA
 * TPU compiler fuses them (libtpu probes, fuse.c chained). */
static void test_reused_chain(void) {
  const char *fmt =
      "HloModule m\nENTRY e {\n p = f32[128] parameter(0)\n q = f32[128] parameter(1)\n"
      " x = f32[128,197] parameter(2)\n z = f32[] constant(1)\n zb = f32[128] broadcast(z), dimensions={}\n"
      " %s\n b = f32[128,197] broadcast(a), dimensions={0}\n ROOT y = f32[128,197] add(b, x)\n}\n";
  static const struct { const char *body; int kernels; } cases[] = {
      {"a = f32[128] negate(p)", 1},
      {"a = f32[128] add(p, q)", 1},
      {"a = f32[128] multiply(p, p)", 1},
      {"a = f32[128] add(p, zb)", 2},
      {"n = f32[128] negate(p)\n a = f32[128] abs(n)", 2},
      {"c = pred[128] compare(p, zb), direction=LT\n a = f32[128] select(c, p, q)", 2},
  };
  char src[1024];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(src, sizeof src, fmt, cases[i].body);
    int k = kernels_of(src);
    printf("reused producer '%s': %d kernel(s)\n", cases[i].body, k);
    CHECK_EQ_INT(k, cases[i].kernels);
  }
}

/* A static slice the consumer broadcasts is a kernel of its own (a row of a table broadcast
 * over the rows: the compiler's `s.1` slice), unless it is its operand's leading elements. */
static void test_reused_slice(void) {
  const char *fmt =
      "HloModule m\nENTRY e {\n k = f32[8,256] parameter(0)\n x = f32[128,256] parameter(1)\n"
      " s = f32[1,256] slice(k), slice={[%d:%d],[0:256]}\n r = f32[256] reshape(s)\n"
      " b = f32[128,256] broadcast(r), dimensions={1}\n ROOT y = f32[128,256] add(b, x)\n}\n";
  char src[1024];
  snprintf(src, sizeof src, fmt, 2, 3);
  int k = kernels_of(src);
  printf("row 2 broadcast: %d kernel(s)\n", k);
  CHECK_EQ_INT(k, 2);
  snprintf(src, sizeof src, fmt, 0, 1);
  k = kernels_of(src);
  printf("row 0 broadcast: %d kernel(s)\n", k);
  CHECK_EQ_INT(k, 1);
}

/* A vector computed from a reduction's result (a mean: the sum x 1/n) is a kernel of its
 * own, not computed in the consumer that broadcasts it (fuse.c broadcast_source; libtpu, v5e:
 * bf16[8,16,16,128]'s per-channel sum x 1/n subtracted from it, convert_reduce_fusion,
 * broadcast_multiply_fusion, then the subtraction's kernel). */
static void test_reduced_chain_apart(void) {
  const char *src =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = f32[128,197] parameter(0)\n z = f32[] constant(0)\n"
      " r = f32[128] reduce(x, z), dimensions={1}, to_apply=add\n c = f32[] constant(0.005)\n"
      " cb = f32[128] broadcast(c), dimensions={}\n m = f32[128] multiply(r, cb)\n"
      " b = f32[128,197] broadcast(m), dimensions={0}\n ROOT y = f32[128,197] subtract(x, b)\n}\n";
  int k = kernels_of(src);
  printf("mean of a row sum, broadcast: %d kernel(s)\n", k);
  CHECK_EQ_INT(k, 3);
}

/* A layer norm's row mean as JAX writes it, f32[32,1] (the sum reshaped to [32,1] x 1/n), read
 * through a reshape to [32] and a broadcast, is a kernel of its own as the rank-1 mean is: XLA's
 * simplifier drops the unit dimension before fusion (the compiler's layernorm_32x197_f32:
 * reduce_sum.14, broadcast_multiply_fusion 1,825 cycles on v5e, then the kernels reading it). */
static void test_row_mean_apart(void) {
  const char *src =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = f32[32,197] parameter(0)\n z = f32[] constant(0)\n"
      " r = f32[32] reduce(x, z), dimensions={1}, to_apply=add\n r1 = f32[32,1] reshape(r)\n"
      " c = f32[] constant(0.005)\n cb = f32[32,1] broadcast(c), dimensions={}\n m = f32[32,1] multiply(r1, cb)\n"
      " m1 = f32[32] reshape(m)\n b = f32[32,197] broadcast(m1), dimensions={0}\n ROOT y = f32[32,197] subtract(x, b)\n}\n";
  int k = kernels_of(src);
  printf("row mean f32[32,1] of a row sum, broadcast: %d kernel(s)\n", k);
  CHECK_EQ_INT(k, 3);
}

/* A layer norm over the features of an NHWC activation: its mean is one per (b, h, w),
 * f32[4,24,24], a reduce's result x 1/n with three dimensions wider than 1, and is a kernel of
 * its own as the rank-1 mean is (fuse.c broadcast_source, scaled_reduce; libtpu probes
 * bench/fidelity/probes/cases_convnet_ln.py, cn_ln_b4_24x24x160: convert_reduce_fusion,
 * broadcast_multiply_fusion f32[4,24,24] 2,131 cycles on v6e, 1,933 on v5e, then the
 * variance's and the normalization's kernels). A product of a reduce with a computed vector
 * (not a constant) still joins its consumer. */
static void test_nhwc_row_mean_apart(void) {
  const char *mean =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = f32[4,24,24,160] parameter(0)\n z = f32[] constant(0)\n"
      " r = f32[4,24,24] reduce(x, z), dimensions={3}, to_apply=add\n"
      " c = f32[] constant(160)\n cb = f32[4,24,24] broadcast(c), dimensions={}\n m = f32[4,24,24] divide(r, cb)\n"
      " b = f32[4,24,24,160] broadcast(m), dimensions={0,1,2}\n ROOT y = f32[4,24,24,160] subtract(x, b)\n}\n";
  int k = kernels_of(mean);
  printf("NHWC row mean f32[4,24,24] of a feature sum, broadcast: %d kernel(s)\n", k);
  CHECK_EQ_INT(k, 3);
  const char *scaled =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = f32[4,24,24,160] parameter(0)\n w = f32[4,24,24] parameter(1)\n z = f32[] constant(0)\n"
      " r = f32[4,24,24] reduce(x, z), dimensions={3}, to_apply=add\n m = f32[4,24,24] multiply(r, w)\n"
      " b = f32[4,24,24,160] broadcast(m), dimensions={0,1,2}\n ROOT y = f32[4,24,24,160] subtract(x, b)\n}\n";
  k = kernels_of(scaled);
  printf("f32[4,24,24] sum x a parameter, broadcast: %d kernel(s)\n", k);
  CHECK_EQ_INT(k, 2);
}

/* A split whose first piece is returned as it is and the others scaled is one kernel: the bare
 * slice joins the fusion of its siblings (fuse_merge.c bare_slice; libtpu, all generations:
 * bf16[512,512] cut along the lanes, one slice_multiply_fusion, v5e 5,366 cycles). */
static void test_split_bare_piece(void) {
  const char *src =
      "HloModule m\nENTRY e {\n x = bf16[512,512] parameter(0)\n"
      " a = bf16[512,256] slice(x), slice={[0:512], [0:256]}\n b = bf16[512,256] slice(x), slice={[0:512], [256:512]}\n"
      " c = bf16[] constant(2)\n cb = bf16[512,256] broadcast(c), dimensions={}\n m = bf16[512,256] multiply(b, cb)\n"
      " ROOT t = (bf16[512,256], bf16[512,256]) tuple(a, m)\n}\n";
  int k = kernels_of(src);
  printf("split, first piece bare: %d kernel(s)\n", k);
  CHECK_EQ_INT(k, 1);
}

/* A widening convert of a vector parameter read through a broadcast (a norm's bf16[C] scale to
 * f32) is a kernel of its own, as the compiler's `convert` f32[C] (fuse.c param_widening;
 * libtpu probes bench/fidelity/probes/cases_param_convert.py, 9 of 9); an f32 parameter, a
 * narrowing convert, and a convert tpusim's dot rewrite makes join their reader. */
static void test_param_convert_apart(void) {
  const char *wide =
      "HloModule m\nENTRY e {\n x = f32[8,16,16,96] parameter(0)\n g = bf16[96] parameter(1)\n"
      " c = f32[96] convert(g)\n b = f32[8,16,16,96] broadcast(c), dimensions={3}\n"
      " ROOT y = f32[8,16,16,96] multiply(x, b)\n}\n";
  int k = kernels_of(wide);
  printf("f32[8,16,16,96] x widened bf16[96] parameter: %d kernel(s)\n", k);
  CHECK_EQ_INT(k, 2);
  const char *plain =
      "HloModule m\nENTRY e {\n x = f32[8,16,16,96] parameter(0)\n g = f32[96] parameter(1)\n"
      " b = f32[8,16,16,96] broadcast(g), dimensions={3}\n ROOT y = f32[8,16,16,96] multiply(x, b)\n}\n";
  k = kernels_of(plain);
  printf("f32[8,16,16,96] x f32[96] parameter: %d kernel(s)\n", k);
  CHECK_EQ_INT(k, 1);
  const char *narrow =
      "HloModule m\nENTRY e {\n x = bf16[8,16,16,96] parameter(0)\n g = f32[96] parameter(1)\n"
      " c = bf16[96] convert(g)\n b = bf16[8,16,16,96] broadcast(c), dimensions={3}\n"
      " ROOT y = bf16[8,16,16,96] multiply(x, b)\n}\n";
  k = kernels_of(narrow);
  printf("bf16[8,16,16,96] x narrowed f32[96] parameter: %d kernel(s)\n", k);
  CHECK_EQ_INT(k, 1);
  const char *dot =
      "HloModule m\nENTRY e {\n a = bf16[16] parameter(0)\n b = bf16[1000,16] parameter(1)\n"
      " ROOT d = bf16[1000] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={1}\n}\n";
  k = kernels_of(dot);
  printf("bf16[16] . bf16[1000,16] (the dot rewrite's widening): %d kernel(s)\n", k);
  CHECK_EQ_INT(k, 1);
}

/* A convolution's bias add that only a widening convert reads, the convert read by several
 * kernels (a layer norm's f32 view), is stored by the convolution's kernel: no other kernel
 * reads the bias (fuse.c stored_epilogue; the compiler's convert_reduce_fusion returns
 * bf16(conv + bias), bench/fidelity/probes/ln_layout.py cnb_*). Without the rule the
 * variance and normalization kernels re-add it (3 readers). */
static int bias_readers(const char *src) {
  tpu_module *m = compile_src(src);
  if (!m) return -1;
  int n = 0;
  for (int i = 0; i < m->entry->ninstrs; i++) {
    const tpu_instr *x = m->entry->instrs[i];
    for (int j = 0; j < x->noperands; j++) n += x->operands[j]->op == TPU_OP_PARAMETER && x->operands[j]->name &&
                                               !strcmp(x->operands[j]->name, "bd");
  }
  tpu_module_free(m);
  return n;
}

static void test_conv_bias_stored(void) {
  const char *src =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = bf16[8,14,14,64] parameter(0)\n w = bf16[3,3,1,64] parameter(1)\n bd = bf16[64] parameter(2)\n"
      " y = bf16[8,14,14,64] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f,"
      " feature_group_count=64\n bb = bf16[8,14,14,64] broadcast(bd), dimensions={3}\n"
      " yb = bf16[8,14,14,64] add(y, bb)\n xf = f32[8,14,14,64] convert(yb)\n z = f32[] constant(0)\n"
      " s = f32[8,14,14] reduce(xf, z), dimensions={3}, to_apply=add\n n = f32[] constant(0.015625)\n"
      " nb = f32[8,14,14] broadcast(n), dimensions={}\n m = f32[8,14,14] multiply(s, nb)\n"
      " mb = f32[8,14,14,64] broadcast(m), dimensions={0,1,2}\n d = f32[8,14,14,64] subtract(xf, mb)\n"
      " q = f32[8,14,14,64] multiply(d, d)\n s2 = f32[8,14,14] reduce(q, z), dimensions={3}, to_apply=add\n"
      " v = f32[8,14,14] multiply(s2, nb)\n vb = f32[8,14,14,64] broadcast(v), dimensions={0,1,2}\n"
      " o = f32[8,14,14,64] multiply(d, vb)\n ROOT ob = bf16[8,14,14,64] convert(o)\n}\n";
  int r = bias_readers(src);
  printf("conv + bias then a layer norm: %d kernel(s) read the bias\n", r);
  CHECK_EQ_INT(r, 1);
}

int main(void) {
  test_sink_broadcast();
  test_max_identity();
  test_reused_chain();
  test_reused_slice();
  test_reduced_chain_apart();
  test_row_mean_apart();
  test_nhwc_row_mean_apart();
  test_split_bare_piece();
  test_param_convert_apart();
  test_conv_bias_stored();
  CHECK_DONE();
}
