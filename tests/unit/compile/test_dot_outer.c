/* Dots contracting only size-1 dimensions (compile/passes/dot_reduce.c outer_dot): a product of
 * broadcasts on the vector unit, as XLA's algebraic simplifier and the XLA TPU compiler make
 * them; the sum over a batch dimension that keeps such a dot on the MXU; the relayout copy of
 * a program result (relayout.c dot_dims); the chip executor's values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "chip/exec.h"
#include "passes_util.h"

static int dots_in(const kernel_census *kc) {
  int n = 0;
  for (int k = 0; k < kc->kernels && k < 8; k++) n += kc->dots[k];
  return n;
}

/* Values of src's compiled module against its parsed one (reference interpreter), the
 * inputs filled with signed zeros among small multiples; and, on_vpu, the chip executor's
 * against the reference's (else they differ: an MXU pass). */
static void check_values(const char *src, tpu_dtype t0, int r0, const int64_t *d0, tpu_dtype t1, int r1,
                         const int64_t *d1, int on_vpu) {
  tpu_module *m0, *m1;
  if (!parse_and_compile("outer.hlo", src, &m0, &m1)) return;
  tpu_diag d;
  tpu_tensor x[2], a, b, c;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  memset(&c, 0, sizeof c);
  CHECK(tpu_tensor_alloc(&x[0], t0, r0, d0, &d) == TPU_OK);
  CHECK(tpu_tensor_alloc(&x[1], t1, r1, d1, &d) == TPU_OK);
  int64_t n0 = tpu_tensor_numel(&x[0]), n1 = tpu_tensor_numel(&x[1]);
  for (int64_t i = 0; i < n0; i++)
    tpu_tensor_set_f64(&x[0], i, i % 5 == 0 ? -0.0 : ((i * 7) % 11 - 5) * 1.0009765625 + (double)(i % 3) / 3.0);
  for (int64_t i = 0; i < n1; i++) tpu_tensor_set_f64(&x[1], i, i % 7 == 0 ? 0.0 : ((i * 5) % 13 - 6) * 0.7071);
  CHECK(tpu_ref_run(m0, x, 2, &a, &d) == TPU_OK);
  CHECK(tpu_ref_run(m1, x, 2, &b, &d) == TPU_OK);
  CHECK(same_bits(&a, &b));
  /* the chip runs it on the vector unit: the reference's values, not an MXU pass (an f32
   * product at DEFAULT precision would round its operands to bf16) */
  CHECK(tpu_chip_run_values(m0, &g_chip, -1, x, 2, &c, &d) == TPU_OK);
  CHECK(same_bits(&a, &c) == on_vpu);
  tpu_tensor_free(&x[0]);
  tpu_tensor_free(&x[1]);
  tpu_tensor_free(&a);
  tpu_tensor_free(&b);
  tpu_tensor_free(&c);
  tpu_module_free(m0);
  tpu_module_free(m1);
}

static void test_outer_product(void) {
  /* K = 1, f32 (gemm_f32_1024x1x33's form): one loop kernel, no dot, no reduce */
  const char *f32 = "HloModule m\nENTRY e {\n a = f32[512,1] parameter(0)\n b = f32[1,64] parameter(1)\n"
                    " ROOT d = f32[512,64] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  kernel_census kc = kernel_census_of(f32);
  printf("f32[512,1] x [1,64]: %d kernels, %d dots, %d multiplies, %d reduces\n", kc.kernels, dots_in(&kc),
         kc.multiplies[0], kc.reduces[0]);
  CHECK_EQ_INT(kc.kernels, 1);
  CHECK_EQ_INT(dots_in(&kc), 0);
  CHECK_EQ_INT(kc.multiplies[0], 1);
  CHECK_EQ_INT(kc.reduces[0], 0);
  int64_t da[2] = {512, 1}, db[2] = {1, 64};
  check_values(f32, TPU_F32, 2, da, TPU_F32, 2, db, 1);

  /* batched, bf16 (the probe's bf16[8,300,1] x [8,1,40]): one kernel */
  kc = kernel_census_of("HloModule m\nENTRY e {\n a = bf16[8,300,1] parameter(0)\n b = bf16[8,1,40] parameter(1)\n"
                        " ROOT d = bf16[8,300,40] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
                        "rhs_batch_dims={0}, rhs_contracting_dims={1}\n}\n");
  CHECK_EQ_INT(kc.kernels, 1);
  CHECK_EQ_INT(dots_in(&kc), 0);
  /* the batch listed out of order on the right and its contracting dimension first: its
   * broadcast transposed into the dot's order, the values the dot's */
  const char *bat = "HloModule m\nENTRY e {\n a = bf16[8,300,1] parameter(0)\n b = bf16[1,40,8] parameter(1)\n"
                    " ROOT d = bf16[8,300,40] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
                    "rhs_batch_dims={2}, rhs_contracting_dims={0}\n}\n";
  kc = kernel_census_of(bat);
  CHECK_EQ_INT(dots_in(&kc), 0);
  int64_t ba[3] = {8, 300, 1}, bb[3] = {1, 40, 8};
  check_values(bat, TPU_BF16, 3, ba, TPU_BF16, 3, bb, 1);

  /* s8 x s8 -> s32: products in s32 */
  const char *i8 = "HloModule m\nENTRY e {\n a = s8[64,1] parameter(0)\n b = s8[1,96] parameter(1)\n"
                   " ROOT d = s32[64,96] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  kc = kernel_census_of(i8);
  CHECK_EQ_INT(dots_in(&kc), 0);
  int64_t ia[2] = {64, 1}, ib[2] = {1, 96};
  check_values(i8, TPU_S8, 2, ia, TPU_S8, 2, ib, 1);

  /* a contraction of 2 stays a dot */
  kc = kernel_census_of("HloModule m\nENTRY e {\n a = f32[512,2] parameter(0)\n b = f32[2,64] parameter(1)\n"
                        " ROOT d = f32[512,64] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n");
  CHECK_EQ_INT(dots_in(&kc), 1);
}

/* Multi-query attention's dK for one query: per-head outer products summed over the heads
 * (through the transpose to [b,k,h,d]): XLA folds the sum into the contraction, the dot
 * stays on the MXU. Without the sum, a product of broadcasts. */
static void test_batch_summed(void) {
  const char *fmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n s = f32[8,12,77,1] parameter(0)\n q = f32[8,1,12,80] parameter(1)\n"
      " d = f32[8,12,77,80] dot(s, q), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,2}, "
      "rhs_contracting_dims={1}\n t = f32[8,77,12,80] transpose(d), dimensions={0,2,1,3}\n z = f32[] constant(0)\n"
      " ROOT r = %s\n}\n";
  char src[1024];
  snprintf(src, sizeof src, fmt, "f32[8,77,80] reduce(t, z), dimensions={2}, to_apply=add");
  kernel_census kc = kernel_census_of(src);
  printf("dK summed over the heads: %d dots\n", dots_in(&kc));
  CHECK_EQ_INT(dots_in(&kc), 1);
  /* a sum over k (not a batch dimension of the dot) leaves the product to the vector unit */
  snprintf(src, sizeof src, fmt, "f32[8,12,80] reduce(t, z), dimensions={1}, to_apply=add");
  kc = kernel_census_of(src);
  CHECK_EQ_INT(dots_in(&kc), 0);
  int64_t ds[4] = {8, 12, 77, 1}, dq[4] = {8, 1, 12, 80};
  snprintf(src, sizeof src, fmt, "f32[8,77,80] reduce(t, z), dimensions={2}, to_apply=add");
  check_values(src, TPU_F32, 4, ds, TPU_F32, 4, dq, 0);
}

/* A program result transposed out of the product's order with a batch dimension in its
 * least padded tile (attention's dK for one query, f32[1,77,12,128]): the product kernel
 * writes the dot's order and a relayout copy follows, as the compiler's
 * multiply_bitcast_fusion then copy; a result in the dot's free dimensions ([1024,33]
 * written {0,1}) leaves as written. */
static void test_result_relayout(void) {
  const char *t = "HloModule m\nENTRY e {\n s = f32[1,12,77,1] parameter(0)\n q = f32[1,1,12,128] parameter(1)\n"
                  " d = f32[1,12,77,128] dot(s, q), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,2}, "
                  "rhs_contracting_dims={1}\n ROOT t = f32[1,77,12,128] transpose(d), dimensions={0,2,1,3}\n}\n";
  kernel_census kc = kernel_census_of(t);
  printf("dK for one query as a program result: %d kernels, %d dots\n", kc.kernels, dots_in(&kc));
  CHECK_EQ_INT(dots_in(&kc), 0);
  CHECK_EQ_INT(kc.kernels, 2);
  kc = kernel_census_of("HloModule m\nENTRY e {\n a = f32[1024,1] parameter(0)\n b = f32[1,33] parameter(1)\n"
                        " ROOT d = f32[1024,33] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n");
  CHECK_EQ_INT(kc.kernels, 1);
}

int main(void) {
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &g_chip, &d) == TPU_OK);
  test_outer_product();
  test_batch_summed();
  test_result_relayout();
  CHECK_DONE();
}
