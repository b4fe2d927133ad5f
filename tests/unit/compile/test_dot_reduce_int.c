/* Integer dots with a vector operand (dot_reduce.c): the XLA TPU compiler makes its s8 x s8
 * -> s32 matrix-vector products multiply_reduce kLoop fusions that multiply and sum in s32
 * (gemm_int8_4096x3000x1, _1000x1000x1, _1x7x33 in bench/fidelity/families/compiled, on v4,
 * v5e, v5p and v6e). tpusim reduces them too, in the dot's result type: no dot is left, the
 * reduce sums s32, and the values are the reference dot's bit for bit where an f32 sum
 * would lose digits past 2^24. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "passes_util.h"
#include "ref/ref.h"

/* Counts over the compiled entry's kernels (fusion bodies included). */
static void census(const tpu_module *m, int *dots, int *reduces, int *s32_reduces) {
  *dots = *reduces = *s32_reduces = 0;
  for (int i = 0; i < m->entry->ninstrs; i++) {
    const tpu_instr *in = m->entry->instrs[i];
    const tpu_comp *c = in->op == TPU_OP_FUSION ? in->calls : NULL;
    int n = c ? c->ninstrs : 1;
    for (int j = 0; j < n; j++) {
      const tpu_instr *x = c ? c->instrs[j] : in;
      *dots += x->op == TPU_OP_DOT;
      *reduces += x->op == TPU_OP_REDUCE;
      *s32_reduces += x->op == TPU_OP_REDUCE && x->shape.dtype == TPU_S32;
    }
  }
}

static void check_int_matvec(const char *src, int64_t rows, int64_t k, int matrix_lhs) {
  tpu_module *m0 = NULL, *m1 = NULL;
  if (!parse_and_compile("mv.hlo", src, &m0, &m1)) return;
  tpu_diag d;
  int dots, reduces, s32r;
  census(m1, &dots, &reduces, &s32r);
  printf("s8 matrix-vector (%lld x %lld): %d dots, %d reduces (%d in s32)\n", (long long)rows, (long long)k, dots, reduces,
         s32r);
  CHECK_EQ_INT(dots, 0);
  CHECK_EQ_INT(reduces, 1);
  CHECK_EQ_INT(s32r, 1);
  /* 127 * 127 = 16129 (odd) summed k times passes 2^24 after 1,041 terms: an f32 sum rounds */
  tpu_tensor x[2], r0, r1;
  memset(&r0, 0, sizeof r0);
  memset(&r1, 0, sizeof r1);
  int64_t dm[2] = {matrix_lhs ? rows : k, matrix_lhs ? k : rows}, dv[2] = {matrix_lhs ? k : 1, matrix_lhs ? 1 : k};
  CHECK(tpu_tensor_alloc(&x[matrix_lhs ? 0 : 1], TPU_S8, 2, dm, &d) == TPU_OK);
  CHECK(tpu_tensor_alloc(&x[matrix_lhs ? 1 : 0], TPU_S8, 2, dv, &d) == TPU_OK);
  tpu_tensor *M = &x[matrix_lhs ? 0 : 1], *V = &x[matrix_lhs ? 1 : 0];
  for (int64_t i = 0; i < rows * k; i++) tpu_tensor_set_f64(M, i, i % 97 == 3 ? -128 + (double)(i % 5) : 127);
  for (int64_t i = 0; i < k; i++) tpu_tensor_set_f64(V, i, i % 7 == 0 ? -127 : 127);
  CHECK(tpu_ref_run(m0, x, 2, &r0, &d) == TPU_OK);
  CHECK(tpu_ref_run(m1, x, 2, &r1, &d) == TPU_OK);
  CHECK(same_bits(&r0, &r1));
  tpu_tensor_free(&x[0]);
  tpu_tensor_free(&x[1]);
  tpu_tensor_free(&r0);
  tpu_tensor_free(&r1);
  tpu_module_free(m0);
  tpu_module_free(m1);
}

static void test_int8_matvec(void) {
  /* sizes the families corpus does not hold */
  check_int_matvec("HloModule m\nENTRY e {\n a = s8[40,2500] parameter(0)\n b = s8[2500,1] parameter(1)\n"
                   " ROOT y = s32[40,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
                   40, 2500, 1);
  /* the vector on the left, the matrix contracting its major dimension */
  check_int_matvec("HloModule m\nENTRY e {\n a = s8[1,1800] parameter(0)\n b = s8[1800,24] parameter(1)\n"
                   " ROOT y = s32[1,24] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
                   24, 1800, 0);
}

int main(void) {
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &g_chip, &d) == TPU_OK);
  test_int8_matvec();
  CHECK_DONE();
}
