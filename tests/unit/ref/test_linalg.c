/* cholesky and triangular-solve on the reference interpreter (src/ref/linalg.c,
 * docs/numerics.md): exact factors of integer matrices, only the named triangle read (the
 * other holds NaN), zeros in the result's other triangle, NaN for a matrix that is not
 * positive definite (that matrix only), every solve variant (side, triangle, transpose,
 * adjoint, unit diagonal, batch) by its residual against a double-precision product, exact
 * integer solves in f32, f64 and bf16, and the chip executor giving the same bits. */
#include <math.h>

#include "check.h"
#include "chip/chip.h"
#include "chip/exec.h"
#include "ref_util.h"

static tpu_chip g_chip;

/* Runs `src` on the chip executor too and checks it gives the reference's bits. */
static void same_on_tpu(const char *src, const tpu_tensor *args, int nargs, const tpu_tensor *want) {
  tpu_module *m = NULL;
  tpu_diag d;
  tpu_tensor got;
  memset(&got, 0, sizeof got);
  CHECK(tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) == TPU_OK && tpu_ir_verify(m, &d) == TPU_OK);
  CHECK(m && tpu_chip_run_values(m, &g_chip, -1, args, nargs, &got, &d) == TPU_OK);
  CHECK(got.data && tpu_tensor_numel(&got) == tpu_tensor_numel(want));
  for (int64_t i = 0; got.data && i < tpu_tensor_numel(want); i++) {
    double a = tpu_tensor_get_f64(&got, i), b = tpu_tensor_get_f64(want, i);
    CHECK((isnan(a) && isnan(b)) || a == b);
  }
  tpu_tensor_free(&got);
  tpu_module_free(m);
}

/* L = [[2,0,0],[1,3,0],[4,-1,5]], A = L L^T = [[4,2,8],[2,10,1],[8,1,42]]. */
static const double L3[9] = {2, 0, 0, 1, 3, 0, 4, -1, 5};
static const double A3[9] = {4, 2, 8, 2, 10, 1, 8, 1, 42};

static void cholesky(void) {
  for (int lower = 0; lower < 2; lower++) {
    /* Batch of 2: the SPD matrix, and one that is not positive definite (pivot 2 < 0). */
    double a[18];
    for (int i = 0; i < 9; i++) a[i] = A3[i];
    const double bad[9] = {1, 2, 0, 2, 1, 0, 0, 0, 1};
    for (int i = 0; i < 9; i++) a[9 + i] = bad[i];
    /* The triangle not named holds NaN (its transpose for the bad matrix: still symmetric
     * where read). */
    for (int mtx = 0; mtx < 2; mtx++)
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
          if (lower ? j > i : j < i) a[mtx * 9 + i * 3 + j] = NAN;
    int64_t dims[3] = {2, 3, 3};
    tpu_tensor x = mk(TPU_F32, 3, dims, a), out;
    char src[256];
    snprintf(src, sizeof src,
             "HloModule m\nENTRY e {\n a = f32[2,3,3] parameter(0)\n ROOT c = f32[2,3,3] cholesky(a), lower=%s\n}\n",
             lower ? "true" : "false");
    CHECK(run(src, &x, 1, &out));
    for (int i = 0; out.data && i < 3; i++)
      for (int j = 0; j < 3; j++) {
        double want = lower ? L3[i * 3 + j] : L3[j * 3 + i]; /* upper: U = L^T */
        CHECK_NEAR(tpu_tensor_get_f64(&out, i * 3 + j), want, 0);
        CHECK(isnan(tpu_tensor_get_f64(&out, 9 + i * 3 + j)));
      }
    if (out.data) same_on_tpu(src, &x, 1, &out);
    tpu_tensor_free(&out);
    tpu_tensor_free(&x);
  }
  /* f64 and bf16: the same exact factor. */
  const char *types[2] = {"f64", "bf16"};
  const tpu_dtype dts[2] = {TPU_F64, TPU_BF16};
  for (int t = 0; t < 2; t++) {
    int64_t dims[2] = {3, 3};
    tpu_tensor x = mk(dts[t], 2, dims, A3), out;
    char src[256];
    snprintf(src, sizeof src, "HloModule m\nENTRY e {\n a = %s[3,3] parameter(0)\n ROOT c = %s[3,3] cholesky(a), lower=true\n}\n",
             types[t], types[t]);
    CHECK(run(src, &x, 1, &out));
    for (int i = 0; out.data && i < 9; i++) CHECK_NEAR(tpu_tensor_get_f64(&out, i), L3[i], 0);
    tpu_tensor_free(&out);
    tpu_tensor_free(&x);
  }
}

/* op(a)[i][j] for the named triangle of a (k x k), unit diagonal, transpose. */
static double op_a(const double *a, int k, int i, int j, int lower, int unit, int trans) {
  int ai = trans ? j : i, aj = trans ? i : j;
  if (ai == aj && unit) return 1.0;
  int in = lower ? aj <= ai : aj >= ai;
  return in ? a[ai * k + aj] : 0.0;
}

static void solves(void) {
  enum { B = 2, K = 5, M = 3 };
  double a[B * K * K], bl[B * K * M], br[B * M * K];
  uint64_t s = 7;
  for (int i = 0; i < B * K * K; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    a[i] = (double)(int)((s >> 33) % 7) / 4.0 - 0.75;
  }
  for (int b = 0; b < B; b++)
    for (int i = 0; i < K; i++) a[b * K * K + i * K + i] = 2.0 + i; /* well conditioned */
  for (int i = 0; i < B * K * M; i++) bl[i] = br[i] = (double)((i * 7) % 11) - 5.0;
  static const char *tr[3] = {"NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"};
  int64_t da[3] = {B, K, K}, dl[3] = {B, K, M}, dr[3] = {B, M, K};
  int n = 0;
  for (int left = 0; left < 2; left++)
    for (int lower = 0; lower < 2; lower++)
      for (int t = 0; t < 3; t++)
        for (int unit = 0; unit < 2; unit++) {
          /* The other triangle (and the diagonal, with unit_diagonal) holds NaN: never read. */
          double an[B * K * K];
          for (int b = 0; b < B; b++)
            for (int i = 0; i < K; i++)
              for (int j = 0; j < K; j++) {
                int in = lower ? j <= i : j >= i;
                an[b * K * K + i * K + j] = in && !(unit && i == j) ? a[b * K * K + i * K + j] : NAN;
              }
          tpu_tensor args[2] = {mk(TPU_F32, 3, da, an), mk(TPU_F32, 3, left ? dl : dr, left ? bl : br)}, out;
          const char *bs = left ? "f32[2,5,3]" : "f32[2,3,5]";
          char src[512];
          snprintf(src, sizeof src,
                   "HloModule m\nENTRY e {\n a = f32[2,5,5] parameter(0)\n b = %s parameter(1)\n"
                   " ROOT x = %s triangular-solve(a, b), left_side=%s, lower=%s, unit_diagonal=%s, transpose_a=%s\n}\n",
                   bs, bs, left ? "true" : "false", lower ? "true" : "false", unit ? "true" : "false", tr[t]);
          CHECK(run(src, args, 2, &out));
          double worst = 0;
          for (int b = 0; out.data && b < B; b++) {
            /* The arguments as f32 (a's entries and b's are exact in f32). */
            const double *ab = a + b * K * K;
            const double *want = (left ? bl : br) + b * K * M;
            int rows = left ? K : M, cols = left ? M : K;
            for (int i = 0; i < rows; i++)
              for (int j = 0; j < cols; j++) {
                double acc = 0;
                for (int q = 0; q < K; q++) {
                  double x = left ? tpu_tensor_get_f64(&out, b * K * M + q * cols + j)
                                  : tpu_tensor_get_f64(&out, b * K * M + i * cols + q);
                  acc += left ? op_a(ab, K, i, q, lower, unit, t > 0) * x : x * op_a(ab, K, q, j, lower, unit, t > 0);
                }
                double e = fabs(acc - want[i * cols + j]);
                if (!(e <= worst)) worst = e; /* NaN propagates */
              }
          }
          CHECK(worst < 1e-4);
          if (!(worst < 1e-4)) fprintf(stderr, "  left=%d lower=%d %s unit=%d: residual %g\n", left, lower, tr[t], unit, worst);
          if (out.data) same_on_tpu(src, args, 2, &out);
          tpu_tensor_free(&out);
          tpu_tensor_free(&args[0]);
          tpu_tensor_free(&args[1]);
          n++;
        }
  CHECK_EQ_INT(n, 24);
  /* Exact: L3 x = L3 (1, 2, 3)^T = (2, 7, 17)^T gives (1, 2, 3) in f32, f64 and bf16. */
  const char *types[3] = {"f32", "f64", "bf16"};
  const tpu_dtype dts[3] = {TPU_F32, TPU_F64, TPU_BF16};
  for (int t = 0; t < 3; t++) {
    int64_t d2[2] = {3, 3}, d1[2] = {3, 1};
    const double rhs[3] = {2, 7, 17};
    tpu_tensor args[2] = {mk(dts[t], 2, d2, L3), mk(dts[t], 2, d1, rhs)}, out;
    char src[320];
    snprintf(src, sizeof src,
             "HloModule m\nENTRY e {\n a = %s[3,3] parameter(0)\n b = %s[3,1] parameter(1)\n"
             " ROOT x = %s[3,1] triangular-solve(a, b), left_side=true, lower=true, transpose_a=NO_TRANSPOSE\n}\n",
             types[t], types[t], types[t]);
    CHECK(run(src, args, 2, &out));
    for (int i = 0; out.data && i < 3; i++) CHECK_NEAR(tpu_tensor_get_f64(&out, i), i + 1.0, 0);
    tpu_tensor_free(&out);
    tpu_tensor_free(&args[0]);
    tpu_tensor_free(&args[1]);
  }
}

/* Shape and attribute errors carry the instruction's line. */
static void errors(void) {
  static const struct {
    const char *body, *msg;
  } cases[] = {
      {" a = f32[3,4] parameter(0)\n ROOT c = f32[3,4] cholesky(a), lower=true", "square minor dimensions"},
      {" a = s32[3,3] parameter(0)\n ROOT c = s32[3,3] cholesky(a), lower=true", "floating point"},
      {" a = c64[3,3] parameter(0)\n ROOT c = c64[3,3] cholesky(a), lower=true", "floating point"},
      {" a = f32[3,3] parameter(0)\n ROOT c = f32[3,3] cholesky(a), lower=1", "lower=1: expected true or false"},
      {" a = f32[3,3] parameter(0)\n b = f32[3,2] parameter(1)\n ROOT c = f32[3,2] triangular-solve(a, b), "
       "left_side=true, transpose_a=CONJUGATE",
       "transpose_a=CONJUGATE"},
      {" a = f32[3,3] parameter(0)\n b = f32[3,2] parameter(1)\n ROOT c = f32[3,2] triangular-solve(a, b), "
       "transpose_a=NO_TRANSPOSE",
       "b's column dimension is 2 (left_side=false)"},
      {" a = f32[2,3,3] parameter(0)\n b = f32[4,3,2] parameter(1)\n ROOT c = f32[4,3,2] triangular-solve(a, b), "
       "left_side=true, transpose_a=NO_TRANSPOSE",
       "differ in batch dimension 0"},
      {" a = f32[3,3] parameter(0)\n b = f64[3,2] parameter(1)\n ROOT c = f64[3,2] triangular-solve(a, b), "
       "left_side=true, transpose_a=NO_TRANSPOSE",
       "of the same type and rank"},
      {" a = f32[3,3] parameter(0)\n b = f32[3,2] parameter(1)\n ROOT c = f32[3,3] triangular-solve(a, b), "
       "left_side=true, transpose_a=NO_TRANSPOSE",
       "result shape"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char src[512];
    snprintf(src, sizeof src, "HloModule m\nENTRY e {\n%s\n}\n", cases[i].body);
    tpu_module *m = NULL;
    tpu_diag d;
    tpu_status st = tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d);
    if (st == TPU_OK) st = tpu_ir_verify(m, &d);
    CHECK(st != TPU_OK);
    CHECK(strstr(d.msg, cases[i].msg) != NULL);
    CHECK(d.line >= 4);
    if (!strstr(d.msg, cases[i].msg)) fprintf(stderr, "  got: %s\n", d.msg);
    tpu_module_free(m);
  }
}

int main(void) {
  tpu_diag d;
  if (tpu_chip_load("v5e", &g_chip, &d) != TPU_OK) return 1;
  cholesky();
  solves();
  errors();
  CHECK_DONE();
}
