/* Reference kernels for cholesky and triangular-solve (XLA's semantics), computed in
 * double and rounded once to the element type.
 *
 * cholesky(a), lower=true: L with a = L L^T from a's lower triangle; lower=false: U with
 * a = U^T U from its upper triangle. The other triangle of the result is zero (XLA leaves
 * it implementation-defined). A matrix that is not positive definite (a pivot <= 0 or not
 * finite) gives NaN everywhere, as XLA on TPU and LAPACK through JAX do.
 * triangular-solve(a, b): x with op(a) x = b (left_side) or x op(a) = b, op(a) = a, a^T
 * (TRANSPOSE) or conj(a)^T (ADJOINT, = a^T for real types), reading only a's lower or upper
 * triangle and taking its diagonal as 1 with unit_diagonal. Leading dimensions are batch. */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "ref/ref_int.h"

static const char *attr(const tpu_instr *in, const char *name) {
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, name)) return in->attrs[i].value;
  return NULL;
}

static int flag(const tpu_instr *in, const char *name, int dflt) {
  const char *v = attr(in, name);
  return v ? !strcmp(v, "true") : dflt;
}

static tpu_status cholesky(const tpu_instr *in, const tpu_tensor *a, tpu_tensor *out, tpu_diag *d) {
  int r = a->rank;
  int64_t n = a->dims[r - 1], mats = n ? tpu_tensor_numel(a) / (n * n) : 0;
  int lower = flag(in, "lower", 0);
  TPU_TRY(tpu_tensor_alloc(out, a->dtype, a->rank, a->dims, d));
  double *w = tpu_malloc(sizeof *w * (size_t)(n * n + 1));
  if (!w) {
    tpu_tensor_free(out);
    return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  }
  for (int64_t m = 0; m < mats; m++) {
    int64_t base = m * n * n;
    /* Work on the lower triangle: L[i][j] from a[i][j] (lower) or a[j][i] (upper). */
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j <= i; j++) w[i * n + j] = tpu_tensor_get_f64(a, base + (lower ? i * n + j : j * n + i));
    int bad = 0;
    for (int64_t j = 0; j < n && !bad; j++) {
      double s = w[j * n + j];
      for (int64_t k = 0; k < j; k++) s -= w[j * n + k] * w[j * n + k];
      if (!(s > 0) || !isfinite(s)) {
        bad = 1;
        break;
      }
      double ljj = sqrt(s);
      w[j * n + j] = ljj;
      for (int64_t i = j + 1; i < n; i++) {
        double t = w[i * n + j];
        for (int64_t k = 0; k < j; k++) t -= w[i * n + k] * w[j * n + k];
        w[i * n + j] = t / ljj;
      }
    }
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < n; j++) {
        double v = bad ? NAN : (j <= i ? w[i * n + j] : 0.0);
        tpu_tensor_set_f64(out, base + (lower ? i * n + j : j * n + i), v);
      }
  }
  tpu_free(w);
  return TPU_OK;
}

static tpu_status triangular_solve(const tpu_instr *in, const tpu_tensor *a, const tpu_tensor *b, tpu_tensor *out,
                                   tpu_diag *d) {
  int r = b->rank;
  int left = flag(in, "left_side", 0), lower = flag(in, "lower", 0), unit = flag(in, "unit_diagonal", 0);
  const char *t = attr(in, "transpose_a");
  int trans = t && (!strcmp(t, "TRANSPOSE") || !strcmp(t, "ADJOINT"));
  int64_t rows = b->dims[r - 2], cols = b->dims[r - 1], k = left ? rows : cols;
  int64_t mats = rows && cols ? tpu_tensor_numel(b) / (rows * cols) : 0;
  TPU_TRY(tpu_tensor_alloc(out, b->dtype, b->rank, b->dims, d));
  double *A = tpu_malloc(sizeof *A * (size_t)(k * k + 1)), *X = tpu_malloc(sizeof *X * (size_t)(rows * cols + 1));
  if (!A || !X) {
    tpu_free(A);
    tpu_free(X);
    tpu_tensor_free(out);
    return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  }
  for (int64_t m = 0; m < mats; m++) {
    /* M = op(a) with only the named triangle read (unit diagonal: ones). */
    for (int64_t i = 0; i < k; i++)
      for (int64_t j = 0; j < k; j++) {
        int64_t ai = trans ? j : i, aj = trans ? i : j; /* M[i][j] = a[ai][aj] */
        int in_tri = lower ? aj <= ai : aj >= ai;
        double v = in_tri ? tpu_tensor_get_f64(a, m * k * k + ai * k + aj) : 0.0;
        if (i == j && unit) v = 1.0;
        A[i * k + j] = v;
      }
    /* M is lower triangular when (lower xor trans), else upper. */
    int mlower = lower != trans;
    for (int64_t i = 0; i < rows * cols; i++) X[i] = tpu_tensor_get_f64(b, m * rows * cols + i);
    if (left) { /* M X = B, column by column */
      for (int64_t c = 0; c < cols; c++)
        for (int64_t s = 0; s < k; s++) {
          int64_t i = mlower ? s : k - 1 - s;
          double v = X[i * cols + c];
          if (mlower)
            for (int64_t j = 0; j < i; j++) v -= A[i * k + j] * X[j * cols + c];
          else
            for (int64_t j = i + 1; j < k; j++) v -= A[i * k + j] * X[j * cols + c];
          X[i * cols + c] = v / A[i * k + i];
        }
    } else { /* X M = B: row by row, x_j from the columns of M */
      for (int64_t rr = 0; rr < rows; rr++)
        for (int64_t s = 0; s < k; s++) {
          int64_t j = mlower ? k - 1 - s : s;
          double v = X[rr * cols + j];
          if (mlower)
            for (int64_t i = j + 1; i < k; i++) v -= X[rr * cols + i] * A[i * k + j];
          else
            for (int64_t i = 0; i < j; i++) v -= X[rr * cols + i] * A[i * k + j];
          X[rr * cols + j] = v / A[j * k + j];
        }
    }
    for (int64_t i = 0; i < rows * cols; i++) tpu_tensor_set_f64(out, m * rows * cols + i, X[i]);
  }
  tpu_free(A);
  tpu_free(X);
  return TPU_OK;
}

tpu_status tpu__ref_linalg(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                           tpu_diag *d) {
  (void)ip;
  tpu_tensor_zero(out);
  if (in->op == TPU_OP_CHOLESKY) return cholesky(in, args[0], out, d);
  return triangular_solve(in, args[0], args[1], out, d);
}
