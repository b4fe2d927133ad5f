/* Dot strength reduction (compile/passes/dot_reduce.c), moved out of test_passes_fusion.c:
 * which dots run as a multiply + reduce kernel on the vector unit and which stay on the MXU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "util.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ref/ref.h"
#include "passes_util.h"

/* Dot strength reduction (compile/passes/dot_reduce.c): a dot with a vector operand runs as one
 * multiply + reduce kernel; a dot with rows on both sides, or whose matrix operand lists its
 * contracting dimensions out of order, stays a dot. */
static void test_dot_strength_reduction(void) {
  const char *fmt =
      "HloModule m\nENTRY e {\n x = bf16[%d,512] parameter(0)\n w = bf16[512,256] parameter(1)\n"
      " ROOT y = bf16[%d,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  char src[512];
  snprintf(src, sizeof src, fmt, 1, 1);
  kernel_census kc = kernel_census_of(src);
  int dots = 0, reduces = 0, mults = 0;
  for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k], reduces += kc.reduces[k], mults += kc.multiplies[k];
  printf("decode step with one token: %d kernels, %d dots, %d reduces\n", kc.kernels, dots, reduces);
  CHECK(dots == 0 && reduces == 1 && mults == 1);
  CHECK(kc.reduces[0] == 1 && kc.multiplies[0] == 1); /* one kernel reads w and sums */
  snprintf(src, sizeof src, fmt, 8, 8);
  kc = kernel_census_of(src);
  dots = 0;
  for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
  CHECK_EQ_INT(dots, 1);
  /* the matrix lists its contracting dimensions descending (JAX's 'badc,adbc->ba'): still a
   * vector product, reduced, the matrix transposed first so that the sum runs in the dot's
   * order; the values bit for bit the dot's */
  const char *desc = "HloModule m\nENTRY e {\n a = f32[6,5] parameter(0)\n b = f32[7,5,6] parameter(1)\n"
                     " ROOT y = f32[7] dot(a, b), lhs_contracting_dims={0,1}, rhs_contracting_dims={2,1}\n}\n";
  kc = kernel_census_of(desc);
  dots = 0;
  for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
  CHECK_EQ_INT(dots, 0);
  {
    tpu_module *m0 = NULL, *m1 = NULL;
    tpu_diag d;
    CHECK(tpu_hlo_parse("desc.hlo", desc, strlen(desc), &m0, &d) == TPU_OK);
    CHECK(tpu_hlo_parse("desc.hlo", desc, strlen(desc), &m1, &d) == TPU_OK);
    tpu_compile_opts o = opts(NULL, NULL);
    if (m0 && m1 && tpu_compile_hlo(m1, &o, &d) == TPU_OK) {
      tpu_tensor x[2], r0, r1;
      memset(&r0, 0, sizeof r0);
      memset(&r1, 0, sizeof r1);
      int64_t da[2] = {6, 5}, db[3] = {7, 5, 6};
      CHECK(tpu_tensor_alloc(&x[0], TPU_F32, 2, da, &d) == TPU_OK);
      CHECK(tpu_tensor_alloc(&x[1], TPU_F32, 3, db, &d) == TPU_OK);
      /* magnitudes spread over 2^-10 .. 2^10: a sum in another order rounds otherwise */
      for (int i = 0; i < 30; i++) tpu_tensor_set_f64(&x[0], i, ((i * 7) % 11 - 5) * (double)(1 << (i % 21)) / 1024.0 + 0.3);
      for (int i = 0; i < 210; i++) tpu_tensor_set_f64(&x[1], i, ((i * 5) % 13 - 6) * 1.0009765625 + i * 0.001);
      CHECK(tpu_ref_run(m0, x, 2, &r0, &d) == TPU_OK);
      CHECK(tpu_ref_run(m1, x, 2, &r1, &d) == TPU_OK);
      CHECK(same_bits(&r0, &r1));
      tpu_tensor_free(&x[0]);
      tpu_tensor_free(&x[1]);
      tpu_tensor_free(&r0);
      tpu_tensor_free(&r1);
    } else {
      CHECK(0);
    }
    tpu_module_free(m0);
    tpu_module_free(m1);
  }
  /* every contracting dimension of size 1 ('abcd,bca->adb' with c = 1): products, no
   * reduce, in one loop kernel with the result's transpose; 0 + p as the dot computes it
   * (bit for bit, -0 products included) */
  {
    const char *one = "HloModule m\nENTRY e {\n b = bf16[16,1,8] parameter(0)\n a = bf16[8,16,1,64] parameter(1)\n"
                      " d = bf16[8,16,64] dot(b, a), lhs_batch_dims={2,0}, lhs_contracting_dims={1}, rhs_batch_dims={0,1}, "
                      "rhs_contracting_dims={2}\n ROOT t = bf16[8,64,16] transpose(d), dimensions={0,2,1}\n}\n";
    kc = kernel_census_of(one);
    int red = 0;
    dots = 0;
    for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k], red += kc.reduces[k];
    printf("'abcd,bca->adb' with c = 1: %d kernels, %d dots, %d reduces\n", kc.kernels, dots, red);
    CHECK_EQ_INT(dots, 0);
    CHECK_EQ_INT(red, 0);
    CHECK_EQ_INT(kc.kernels, 1);
    tpu_module *m0 = NULL, *m1 = NULL;
    tpu_diag d;
    CHECK(tpu_hlo_parse("one.hlo", one, strlen(one), &m0, &d) == TPU_OK);
    CHECK(tpu_hlo_parse("one.hlo", one, strlen(one), &m1, &d) == TPU_OK);
    tpu_compile_opts o = opts(NULL, NULL);
    if (m0 && m1 && tpu_compile_hlo(m1, &o, &d) == TPU_OK) {
      tpu_tensor x[2], r0, r1;
      memset(&r0, 0, sizeof r0);
      memset(&r1, 0, sizeof r1);
      int64_t db[3] = {16, 1, 8}, da[4] = {8, 16, 1, 64};
      CHECK(tpu_tensor_alloc(&x[0], TPU_BF16, 3, db, &d) == TPU_OK);
      CHECK(tpu_tensor_alloc(&x[1], TPU_BF16, 4, da, &d) == TPU_OK);
      for (int i = 0; i < 128; i++) tpu_tensor_set_f64(&x[0], i, i % 5 == 0 ? 0.0 : (i % 3 - 1) * 1.5);
      for (int i = 0; i < 8192; i++) tpu_tensor_set_f64(&x[1], i, i % 7 == 0 ? -0.0 : (i % 9 - 4) * 0.25);
      CHECK(tpu_ref_run(m0, x, 2, &r0, &d) == TPU_OK);
      CHECK(tpu_ref_run(m1, x, 2, &r1, &d) == TPU_OK);
      CHECK(same_bits(&r0, &r1));
      tpu_tensor_free(&x[0]);
      tpu_tensor_free(&x[1]);
      tpu_tensor_free(&r0);
      tpu_tensor_free(&r1);
    } else {
      CHECK(0);
    }
    tpu_module_free(m0);
    tpu_module_free(m1);
  }
  /* a bf16 result in another order than the sum's ('bca,ba->ac', b = 1024, c = 3): narrowed
   * first, so the reduce writes bf16 and, the result's layout holding the sum's order, in
   * that layout: one kernel, as the compiler's multiply_reduce fusion to bf16[16,3]{0,1} */
  kc = kernel_census_of("HloModule m\nENTRY e {\n a = bf16[1024,3,16] parameter(0)\n b = bf16[1024,16] parameter(1)\n"
              " ROOT d = bf16[16,3] dot(a, b), lhs_batch_dims={2}, lhs_contracting_dims={0}, rhs_batch_dims={1}, "
              "rhs_contracting_dims={0}\n}\n");
  printf("'bca,ba->ac': %d kernels\n", kc.kernels);
  CHECK_EQ_INT(kc.kernels, 1);
  /* a batch of vector products whose result is reshaped twice ('ba,acb->ca' with c = 1: the
   * dot's [8,1] to the result's [1,8]): the reshapes merge (XLA's simplifier) and move no
   * bytes, so one fusion in f32 (the reshape left moves no bytes) and in bf16 (narrowed in the reduce), as the compiler's one
   * kLoop fusion on v4, v5e, v5p and v6e */
  const char *ra = "HloModule m\nENTRY e {\n b = %s[8,1,64] parameter(0)\n a = %s[64,8] parameter(1)\n"
                   " d = %s[8,1] dot(b, a), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={1}, "
                   "rhs_contracting_dims={0}\n ROOT t = %s[1,8] reshape(d)\n}\n";
  const char *rt[2] = {"f32", "bf16"};
  for (int i = 0; i < 2; i++) {
    snprintf(src, sizeof src, ra, rt[i], rt[i], rt[i], rt[i]);
    tpu_module *m = compile_src(src);
    int fusions = 0;
    for (int j = 0; m && j < m->entry->ninstrs; j++) fusions += m->entry->instrs[j]->op == TPU_OP_FUSION;
    printf("'ba,acb->ca' in %s: %d fusions\n", rt[i], fusions);
    CHECK(m != NULL);
    CHECK_EQ_INT(fusions, 1);
    tpu_module_free(m);
  }
  /* A batch of vector products whose matrix's first free dimension is shorter than 64:
   * multiply + reduce however many elements its free dimensions hold, as the compiler's
   * 'bkfg,bk->bfg' with [f, g] = [33, 8] (a kLoop multiply_reduce on v4, v5e, v6e); [64, 8]
   * stays on the MXU */
  const char *ff = "HloModule m\nENTRY e {\n b = bf16[12,128,%d,8] parameter(0)\n a = bf16[12,128] parameter(1)\n"
                   " ROOT y = bf16[12,%d,8] dot(b, a), lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, "
                   "rhs_contracting_dims={1}\n}\n";
  int fs[2] = {33, 64};
  for (int i = 0; i < 2; i++) {
    snprintf(src, sizeof src, ff, fs[i], fs[i]);
    kc = kernel_census_of(src);
    dots = 0;
    for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
    printf("'bkfg,bk->bfg' with [f, g] = [%d, 8]: %d dots\n", fs[i], dots);
    CHECK_EQ_INT(dots, fs[i] < 64 ? 0 : 1);
  }
  /* A batch of vector products with a contraction shorter than 64 (a Mamba step's state . C,
   * 'bdn,bn->bd'): multiply + reduce whatever the batch, as the XLA TPU compiler's kLoop
   * multiply_reduce fusions for n = 16, 32, 48; n = 64 stays on the MXU. */
  const char *mb = "HloModule m\nENTRY e {\n h = f32[4,2048,%d] parameter(0)\n c = f32[4,%d] parameter(1)\n"
                   " ROOT y = f32[4,2048] dot(h, c), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                   "rhs_contracting_dims={1}\n}\n";
  int ns[4] = {16, 32, 48, 64};
  for (int i = 0; i < 4; i++) {
    snprintf(src, sizeof src, mb, ns[i], ns[i]);
    kc = kernel_census_of(src);
    dots = 0;
    for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
    printf("'bdn,bn->bd' with n = %d: %d dots\n", ns[i], dots);
    CHECK_EQ_INT(dots, ns[i] < 64 ? 0 : 1);
  }
  /* A batch of vector products whose matrix keeps a size-1 dimension, free or contracting:
   * multiply + reduce however long its other free dimension, as the compiler's kLoop
   * multiply_reduce fusions for 'xk,xfgk->xfg' with [f, g] = [100, 1] and [1, 100],
   * 'xkr,xfkr->xf' with r = 1 and f = 200, on v4, v5e, v5p, v6e (probes/vector_dot_unit.py);
   * [f, g] = [100, 2] and r absent stay on the MXU. */
  struct {
    const char *m, *v, *out, *dims;
    int want;
  } us[5] = {
      {"f32[6,100,1,96]", "f32[6,96]", "f32[6,100,1]", "rhs_contracting_dims={3}, lhs_contracting_dims={1}", 0},
      {"f32[6,1,100,96]", "f32[6,96]", "f32[6,1,100]", "rhs_contracting_dims={3}, lhs_contracting_dims={1}", 0},
      {"f32[6,100,2,96]", "f32[6,96]", "f32[6,100,2]", "rhs_contracting_dims={3}, lhs_contracting_dims={1}", 1},
      {"f32[6,200,96,1]", "f32[6,96,1]", "f32[6,200]", "rhs_contracting_dims={2,3}, lhs_contracting_dims={1,2}", 0},
      {"f32[6,200,96]", "f32[6,96]", "f32[6,200]", "rhs_contracting_dims={2}, lhs_contracting_dims={1}", 1},
  };
  for (int i = 0; i < 5; i++) {
    snprintf(src, sizeof src,
             "HloModule m\nENTRY e {\n v = %s parameter(0)\n w = %s parameter(1)\n"
             " ROOT y = %s dot(v, w), lhs_batch_dims={0}, rhs_batch_dims={0}, %s\n}\n",
             us[i].v, us[i].m, us[i].out, us[i].dims);
    kc = kernel_census_of(src);
    dots = 0;
    for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
    printf("batched vector dot, matrix %s: %d dots\n", us[i].m, dots);
    CHECK_EQ_INT(dots, us[i].want);
  }
  /* A batch of vector products (decode attention's p . v over b x h heads): the MXU when no
   * batch dimension is 1, multiply + reduce when one is, or when a reduction reads the result
   * (q . k feeding the softmax's maximum). */
  const char *pv =
      "HloModule m\nmx { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT m = f32[] maximum(a, b) }\n"
      "ENTRY e {\n p = bf16[%d,4,256] parameter(0)\n v = bf16[%d,4,256,128] parameter(1)\n"
      " y = bf16[%d,4,128] dot(p, v), lhs_batch_dims={0,1}, lhs_contracting_dims={2}, rhs_batch_dims={0,1}, "
      "rhs_contracting_dims={2}\n c = f32[%d,4,128] convert(y)\n z = f32[] constant(-inf)\n"
      " ROOT r = %s\n}\n";
  struct {
    int b;
    const char *root;
    int want_dots;
  } bc[] = {{8, "f32[8,4,128] negate(c)", 1}, {1, "f32[1,4,128] negate(c)", 0}, {8, "f32[8,4] reduce(c, z), dimensions={2}, to_apply=mx", 0}};
  for (int i = 0; i < 3; i++) {
    snprintf(src, sizeof src, pv, bc[i].b, bc[i].b, bc[i].b, bc[i].b, bc[i].root);
    kc = kernel_census_of(src);
    dots = 0;
    for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
    CHECK_EQ_INT(dots, bc[i].want_dots);
  }
  /* A batch of vector products the vector unit computes whatever the contraction: both
   * operands vectors ('ab,ab->a', a dot product per batch element), or the matrix's free
   * elements within one register's 8 sublanes ('abk,ak->ab' with b = 3), as the compiler's
   * multiply_reduce fusions for the families programs einsum_acb_bca_a_* and
   * einsum_bca_ba_ac_*; with 96 free elements the MXU (einsum_abcd_cba_ad_*). */
  struct {
    const char *src;
    int want_dots;
  } vb[] = {
      {"HloModule m\nENTRY e {\n x = bf16[32,1024] parameter(0)\n y = bf16[32,1024] parameter(1)\n"
       " ROOT d = bf16[32] dot(x, y), lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, rhs_contracting_dims={1}\n}\n",
       0},
      {"HloModule m\nENTRY e {\n x = bf16[16,3,1024] parameter(0)\n y = bf16[16,1024] parameter(1)\n"
       " ROOT d = bf16[16,3] dot(x, y), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}\n}\n",
       0},
      {"HloModule m\nENTRY e {\n x = bf16[32,96,384] parameter(0)\n y = bf16[32,384] parameter(1)\n"
       " ROOT d = bf16[32,96] dot(x, y), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}\n}\n",
       1},
  };
  for (int i = 0; i < 3; i++) {
    kc = kernel_census_of(vb[i].src);
    dots = 0;
    for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
    printf("batched vector product %d: %d dots\n", i, dots);
    CHECK_EQ_INT(dots, vb[i].want_dots);
  }
  /* A batched p . v whose p keeps its size-1 query dimension runs on the vector unit (the
   * XLA TPU compiler's multiply-reduce kLoop fusion), on every chip, unless (chips without
   * vpu_batched_vector_dots: v4, v5e, v5p) it has two batch dimensions of more than one
   * element and p is a softmax of q . k scaled in f32 (pv_on_mxu: then a kOutput fusion).
   * Without that dimension (as above) it stays on the MXU. */
  const char *pvq =
      "HloModule m\nENTRY e {\n p = bf16[8,4,1,256] parameter(0)\n v = bf16[8,4,256,128] parameter(1)\n"
      " y = bf16[8,4,1,128] dot(p, v), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, "
      "rhs_contracting_dims={2}\n ROOT r = bf16[8,4,1,128] negate(y)\n}\n";
  const char *pvs_fmt =
      "HloModule m\nENTRY e {\n q = bf16[%d,4,1,128] parameter(0)\n k = bf16[%d,4,256,128] parameter(1)\n"
      " v = bf16[%d,4,256,128] parameter(2)\n"
      " s = bf16[%d,4,1,256] dot(q, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, "
      "rhs_contracting_dims={3}\n s32 = %s[%d,4,1,256] convert(s)\n c = %s[] constant(11.3)\n"
      " cb = %s[%d,4,1,256] broadcast(c), dimensions={}\n sc = %s[%d,4,1,256] divide(s32, cb)\n"
      " p = bf16[%d,4,1,256] convert(sc)\n"
      " y = bf16[%d,4,1,128] dot(p, v), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, "
      "rhs_contracting_dims={2}\n ROOT r = bf16[%d,4,1,128] negate(y)\n}\n";
  char pvs[2048];
  snprintf(src, sizeof src, pv, 8, 8, 8, 8, bc[0].root);
  for (int flag = 0; flag < 2; flag++) {
    g_chip.vpu_batched_vector_dots = flag;
    kc = kernel_census_of(pvq);
    dots = 0;
    for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
    CHECK_EQ_INT(dots, 0);
    kc = kernel_census_of(src);
    dots = 0;
    for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
    CHECK_EQ_INT(dots, 1);
    /* {batch, scale type, want dots without the flag}: f32 scale over [8,4] on the MXU;
     * a bf16 scale, or a batch of [1,4], on the vector unit */
    struct { int b; const char *t; int want; } sc[] = {{8, "f32", 1}, {8, "bf16", 0}, {1, "f32", 0}};
    for (int i = 0; i < 3; i++) {
      int b = sc[i].b;
      const char *t = sc[i].t;
      snprintf(pvs, sizeof pvs, pvs_fmt, b, b, b, b, t, b, t, t, b, t, b, b, b, b);
      kc = kernel_census_of(pvs);
      dots = 0;
      for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
      printf("scaled p . v, batch %d, %s scale, flag %d: %d dots\n", b, t, flag, dots);
      CHECK_EQ_INT(dots, flag ? 0 : sc[i].want);
    }
  }
  g_chip.vpu_batched_vector_dots = 0;
}

int main(void) {
  /* g_chip stays unloaded, as test_passes_fusion.c runs it (the chip test_passes.c had
   * before loading one) */
  test_dot_strength_reduction();
  CHECK_DONE();
}
