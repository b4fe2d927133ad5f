/* Reference kernels dot and convolution: dimension numbers, mixed types, accumulation type
 * and order, and every convolution feature against a materializing oracle. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "ref_util.h"
#include "hlo/hlo.h"
#include "base/alloc.h"
#include "ir/verify.h"
#include "ref/ref.h"

/* Small integer values (exact in every float type, so sums are exact in any order). */
static tpu_tensor mk_seq(tpu_dtype t, int rank, const int64_t *dims, int seed) {
  tpu_tensor x = mk(t, rank, dims, NULL);
  uint32_t s = (uint32_t)seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < tpu_tensor_numel(&x); i++) {
    s = s * 1103515245u + 12345u;
    tpu_tensor_set_f64(&x, i, (double)((int)((s >> 16) % 7u) - 3));
  }
  return x;
}

static void expect(const char *what, const tpu_tensor *t, tpu_dtype dt, int64_t n, const double *want) {
  if (t->dtype != dt || tpu_tensor_numel(t) != n) {
    fprintf(stderr, "%s: got %s with %lld elements, want %s with %lld\n", what, tpu_dtype_name(t->dtype),
            (long long)tpu_tensor_numel(t), tpu_dtype_name(dt), (long long)n);
    CHECK(0);
    return;
  }
  int shown = 0;
  for (int64_t i = 0; i < n; i++) {
    double g = tpu_tensor_get_f64(t, i);
    if (!(g == want[i]) && shown++ < 5) {
      fprintf(stderr, "%s[%lld]: got %.17g, want %.17g\n", what, (long long)i, g, want[i]);
      CHECK(0);
    }
  }
}

/* ---- dot ---- */

static void test_dot_basic(void) {
  tpu_tensor args[2] = {mk(TPU_F32, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6}),
                        mk(TPU_F32, 2, (int64_t[]){3, 2}, (double[]){7, 8, 9, 10, 11, 12})},
             out;
  const char *src = "HloModule m\nENTRY e {\n a = f32[2,3] parameter(0)\n b = f32[3,2] parameter(1)\n"
                    " ROOT r = f32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  if (run(src, args, 2, &out)) expect("matmul", &out, TPU_F32, 4, (double[]){58, 64, 139, 154});
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);
}

/* dot_general with batch dims not leading, two contracting dims listed out of order, and
 * free dims on both sides, against a direct sum over named indices. lhs[c1, b, m, c0],
 * rhs[n, c0, b, c1]; result [b, m, n]. */
static void test_dot_general(void) {
  enum { B = 2, M = 3, N = 4, C0 = 3, C1 = 2 };
  tpu_tensor args[2] = {mk_seq(TPU_F32, 4, (int64_t[]){C1, B, M, C0}, 1), mk_seq(TPU_F32, 4, (int64_t[]){N, C0, B, C1}, 2)},
             out;
  const char *src = "HloModule m\nENTRY e {\n a = f32[2,2,3,3] parameter(0)\n b = f32[4,3,2,2] parameter(1)\n"
                    " ROOT r = f32[2,3,4] dot(a, b), lhs_batch_dims={1}, rhs_batch_dims={2},"
                    " lhs_contracting_dims={3,0}, rhs_contracting_dims={1,3}\n}\n";
  double want[B * M * N];
  const float *a = args[0].data, *bb = args[1].data;
  for (int b = 0; b < B; b++)
    for (int m = 0; m < M; m++)
      for (int n = 0; n < N; n++) {
        double s = 0;
        for (int c0 = 0; c0 < C0; c0++)
          for (int c1 = 0; c1 < C1; c1++)
            s += (double)a[((c1 * B + b) * M + m) * C0 + c0] * bb[((n * C0 + c0) * B + b) * C1 + c1];
        want[(b * M + m) * N + n] = s;
      }
  if (run(src, args, 2, &out)) {
    CHECK_EQ_INT(out.rank, 3);
    expect("dot_general", &out, TPU_F32, B * M * N, want);
  }
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);
}

/* The sum runs in increasing contraction index from zero, in the accumulator type. */
static void test_dot_accumulation(void) {
  tpu_tensor args[2], out;
  /* f32: (1e8 + 1) rounds back to 1e8, then - 1e8 = 0 (another order would give 1). */
  args[0] = mk(TPU_F32, 2, (int64_t[]){1, 3}, (double[]){1e8, 1, -1e8});
  args[1] = mk(TPU_F32, 1, (int64_t[]){3}, (double[]){1, 1, 1});
  const char *src = "HloModule m\nENTRY e {\n a = f32[1,3] parameter(0)\n b = f32[3] parameter(1)\n"
                    " ROOT r = f32[1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  if (run(src, args, 2, &out)) expect("f32 order", &out, TPU_F32, 1, (double[]){0});
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);

  /* bf16 x bf16 -> f32 accumulates in f32: 256 + 1 + 1 = 258 (bf16 steps would stay 256). */
  args[0] = mk(TPU_BF16, 1, (int64_t[]){3}, (double[]){256, 1, 1});
  args[1] = mk(TPU_BF16, 1, (int64_t[]){3}, (double[]){1, 1, 1});
  src = "HloModule m\nENTRY e {\n a = bf16[3] parameter(0)\n b = bf16[3] parameter(1)\n"
        " ROOT r = f32[] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n}\n";
  if (run(src, args, 2, &out)) expect("bf16->f32", &out, TPU_F32, 1, (double[]){258});
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);

  /* bf16 -> bf16 still accumulates in f32 and rounds once: 1 + 2^-8 + 2^-8 = 1 + 2^-7 is a
   * bf16; adding in bf16 would round 1 + 2^-8 (a tie) back to 1 twice. */
  args[0] = mk(TPU_BF16, 1, (int64_t[]){3}, (double[]){1, 1.0 / 256, 1.0 / 256});
  args[1] = mk(TPU_BF16, 1, (int64_t[]){3}, (double[]){1, 1, 1});
  src = "HloModule m\nENTRY e {\n a = bf16[3] parameter(0)\n b = bf16[3] parameter(1)\n"
        " ROOT r = bf16[] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n}\n";
  if (run(src, args, 2, &out)) expect("bf16->bf16", &out, TPU_BF16, 1, (double[]){1.0078125});
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);

  /* f64 accumulates in f64. */
  args[0] = mk(TPU_F64, 1, (int64_t[]){2}, (double[]){0.1, 0.2});
  args[1] = mk(TPU_F64, 1, (int64_t[]){2}, (double[]){1, 1});
  src = "HloModule m\nENTRY e {\n a = f64[2] parameter(0)\n b = f64[2] parameter(1)\n"
        " ROOT r = f64[] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n}\n";
  volatile double x1 = 0.1, x2 = 0.2;
  if (run(src, args, 2, &out)) expect("f64", &out, TPU_F64, 1, (double[]){x1 + x2});
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);
}

static void test_dot_integers(void) {
  tpu_tensor args[2], out;
  args[0] = mk(TPU_S8, 1, (int64_t[]){3}, (double[]){127, -128, 127});
  args[1] = mk(TPU_S8, 1, (int64_t[]){3}, (double[]){127, -128, -128});
  const char *src = "HloModule m\nENTRY e {\n a = s8[3] parameter(0)\n b = s8[3] parameter(1)\n"
                    " ROOT r = s32[] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n}\n";
  if (run(src, args, 2, &out)) expect("s8->s32", &out, TPU_S32, 1, (double[]){16129 + 16384 - 16256});
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);

  /* s32 wraps: 65536 * 65536 = 2^32 -> 0, plus 1. */
  args[0] = mk(TPU_S32, 1, (int64_t[]){2}, (double[]){65536, 1});
  args[1] = mk(TPU_S32, 1, (int64_t[]){2}, (double[]){65536, 1});
  src = "HloModule m\nENTRY e {\n a = s32[2] parameter(0)\n b = s32[2] parameter(1)\n"
        " ROOT r = s32[] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n}\n";
  if (run(src, args, 2, &out)) expect("s32 wrap", &out, TPU_S32, 1, (double[]){1});
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);

  /* u8 wraps at 256: 200*2 + 100*1 = 500 -> 244. */
  args[0] = mk(TPU_U8, 1, (int64_t[]){2}, (double[]){200, 100});
  args[1] = mk(TPU_U8, 1, (int64_t[]){2}, (double[]){2, 1});
  src = "HloModule m\nENTRY e {\n a = u8[2] parameter(0)\n b = u8[2] parameter(1)\n"
        " ROOT r = u8[] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n}\n";
  if (run(src, args, 2, &out)) expect("u8 wrap", &out, TPU_U8, 1, (double[]){244});
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);

  /* An empty contraction gives zeros. */
  args[0] = mk(TPU_F32, 2, (int64_t[]){2, 0}, NULL);
  args[1] = mk(TPU_F32, 2, (int64_t[]){0, 3}, NULL);
  src = "HloModule m\nENTRY e {\n a = f32[2,0] parameter(0)\n b = f32[0,3] parameter(1)\n"
        " ROOT r = f32[2,3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  if (run(src, args, 2, &out)) expect("empty K", &out, TPU_F32, 6, (double[]){0, 0, 0, 0, 0, 0});
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);
}

/* ---- convolution ---- */

static void conv1d(const char *window, int64_t nout, const double *want) {
  tpu_tensor args[2] = {mk(TPU_F32, 3, (int64_t[]){1, 5, 1}, (double[]){1, 2, 3, 4, 5}),
                        mk(TPU_F32, 3, (int64_t[]){3, 1, 1}, (double[]){1, 2, 3})},
             out;
  char src[600];
  snprintf(src, sizeof src,
           "HloModule m\nENTRY e {\n x = f32[1,5,1] parameter(0)\n k = f32[3,1,1] parameter(1)\n"
           " ROOT r = f32[1,%lld,1] convolution(x, k), window={%s}, dim_labels=b0f_0io->b0f\n}\n",
           (long long)nout, window);
  if (run(src, args, 2, &out)) expect(window, &out, TPU_F32, nout, want);
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);
}

/* Hand-computed 1-D cases, x = 1..5, kernel (1, 2, 3) (a correlation: no flip). */
static void test_conv_1d(void) {
  conv1d("size=3", 3, (double[]){14, 20, 26});
  conv1d("size=3 stride=2 pad=1_1", 3, (double[]){8, 20, 14});  /* [0 1 2 3 4 5 0] */
  conv1d("size=3 rhs_reversal=1", 3, (double[]){10, 16, 22});   /* kernel (3, 2, 1) */
  conv1d("size=3 lhs_dilate=2", 7, (double[]){7, 4, 11, 6, 15, 8, 19}); /* [1 0 2 0 3 0 4 0 5] */
  conv1d("size=3 rhs_dilate=2", 1, (double[]){22});              /* x0 + 2 x2 + 3 x4 */
  conv1d("size=3 pad=-1_-1", 1, (double[]){20});                 /* [2 3 4] */
  conv1d("size=3 pad=2_0 lhs_dilate=2 rhs_dilate=2 stride=3", 3, (double[]){8, 0, 26});
}

/* Logical view of an operand through its dim_labels part, e.g. "b01f" or "o01i". */
typedef struct {
  const tpu_tensor *t;
  int pos[4]; /* dims of: batch/out-feature, feature/in-feature, spatial 0, spatial 1 */
  int64_t str[4];
} view;

static view mkview(const tpu_tensor *t, const char *labels, char c0, char c1) {
  view v;
  v.t = t;
  for (int i = 0; i < 4; i++) {
    char c = labels[i];
    int role = c == c0 ? 0 : c == c1 ? 1 : c == '0' ? 2 : 3;
    v.pos[role] = i;
  }
  int64_t s = 1;
  int64_t str[4];
  for (int i = 3; i >= 0; i--) str[i] = s, s *= t->dims[i];
  for (int r = 0; r < 4; r++) v.str[r] = str[v.pos[r]];
  return v;
}

static double vget(const view *v, int64_t a, int64_t b, int64_t y, int64_t x) {
  return tpu_tensor_get_f64(v->t, a * v->str[0] + b * v->str[1] + y * v->str[2] + x * v->str[3]);
}

typedef struct {
  int64_t size, stride, lo, hi, ld, rd;
  int rev;
} cwin;

/* The oracle: materializes the dilated, padded input and the reversed, dilated kernel,
 * then correlates, with feature and batch groups. Returns the logical [n][o][y][x] result. */
static void oracle(const view *lv, const view *kv, const cwin *w, int64_t G, int64_t BG, int64_t *od, double *res) {
  int64_t N = lv->t->dims[lv->pos[0]], C = lv->t->dims[lv->pos[1]];
  int64_t H[2] = {lv->t->dims[lv->pos[2]], lv->t->dims[lv->pos[3]]};
  int64_t KO = kv->t->dims[kv->pos[0]], KI = kv->t->dims[kv->pos[1]];
  int64_t P[2], E[2], O[2];
  for (int s = 0; s < 2; s++) {
    P[s] = (H[s] - 1) * w[s].ld + 1 + w[s].lo + w[s].hi;
    E[s] = (w[s].size - 1) * w[s].rd + 1;
    O[s] = P[s] >= E[s] ? (P[s] - E[s]) / w[s].stride + 1 : 0;
  }
  static double pin[4096], pk[4096];
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t y = 0; y < P[0]; y++)
        for (int64_t x = 0; x < P[1]; x++) {
          int64_t dy = y - w[0].lo, dx = x - w[1].lo;
          double v = 0;
          if (dy >= 0 && dx >= 0 && dy % w[0].ld == 0 && dx % w[1].ld == 0 && dy / w[0].ld < H[0] && dx / w[1].ld < H[1])
            v = vget(lv, n, c, dy / w[0].ld, dx / w[1].ld);
          pin[((n * C + c) * P[0] + y) * P[1] + x] = v;
        }
  for (int64_t o = 0; o < KO; o++)
    for (int64_t i = 0; i < KI; i++)
      for (int64_t y = 0; y < E[0]; y++)
        for (int64_t x = 0; x < E[1]; x++) {
          double v = 0;
          if (y % w[0].rd == 0 && x % w[1].rd == 0) {
            int64_t ky = y / w[0].rd, kx = x / w[1].rd;
            if (w[0].rev) ky = w[0].size - 1 - ky;
            if (w[1].rev) kx = w[1].size - 1 - kx;
            v = vget(kv, o, i, ky, kx);
          }
          pk[((o * KI + i) * E[0] + y) * E[1] + x] = v;
        }
  od[0] = N / BG, od[1] = KO, od[2] = O[0], od[3] = O[1];
  for (int64_t n = 0; n < N / BG; n++)
    for (int64_t o = 0; o < KO; o++)
      for (int64_t y = 0; y < O[0]; y++)
        for (int64_t x = 0; x < O[1]; x++) {
          int64_t g = o / (KO / G), bg = o / (KO / BG), nin = n + bg * (N / BG);
          double s = 0;
          for (int64_t i = 0; i < KI; i++)
            for (int64_t ky = 0; ky < E[0]; ky++)
              for (int64_t kx = 0; kx < E[1]; kx++)
                s += pin[((nin * C + g * KI + i) * P[0] + y * w[0].stride + ky) * P[1] + x * w[1].stride + kx] *
                     pk[((o * KI + i) * E[0] + ky) * E[1] + kx];
          res[((n * KO + o) * O[0] + y) * O[1] + x] = s;
        }
}

/* Runs one 2-D convolution through tpusim and compares every element with the oracle. */
static void conv2d_case(const char *name, const char *in_l, const char *k_l, const char *o_l, int64_t N, int64_t C,
                        int64_t H0, int64_t H1, int64_t KO, int64_t G, int64_t BG, const cwin *w, int seed) {
  int64_t KI = C / G;
  int64_t ldims[4], kdims[4];
  view tmp;
  /* Operand dims in label order. */
  for (int i = 0; i < 4; i++) {
    char c = in_l[i];
    ldims[i] = c == 'b' ? N : c == 'f' ? C : c == '0' ? H0 : H1;
    c = k_l[i];
    kdims[i] = c == 'o' ? KO : c == 'i' ? KI : c == '0' ? w[0].size : w[1].size;
  }
  tpu_tensor args[2] = {mk_seq(TPU_F32, 4, ldims, seed), mk_seq(TPU_F32, 4, kdims, seed + 1)}, out;
  view lv = mkview(&args[0], in_l, 'b', 'f'), kv = mkview(&args[1], k_l, 'o', 'i');
  int64_t od[4];
  static double want_logical[4096], want[4096];
  oracle(&lv, &kv, w, G, BG, od, want_logical);
  int64_t odims[4];
  for (int i = 0; i < 4; i++) {
    char c = o_l[i];
    odims[i] = c == 'b' ? od[0] : c == 'f' ? od[1] : c == '0' ? od[2] : od[3];
  }
  /* Lay the oracle's result out in the output label order. */
  tpu_tensor shape_only = mk(TPU_F32, 4, odims, NULL);
  tmp = mkview(&shape_only, o_l, 'b', 'f');
  for (int64_t n = 0; n < od[0]; n++)
    for (int64_t o = 0; o < od[1]; o++)
      for (int64_t y = 0; y < od[2]; y++)
        for (int64_t x = 0; x < od[3]; x++)
          want[n * tmp.str[0] + o * tmp.str[1] + y * tmp.str[2] + x * tmp.str[3]] =
              want_logical[((n * od[1] + o) * od[2] + y) * od[3] + x];
  char win[300], src[1200];
  snprintf(win, sizeof win,
           "size=%lldx%lld stride=%lldx%lld pad=%lld_%lldx%lld_%lld lhs_dilate=%lldx%lld rhs_dilate=%lldx%lld "
           "rhs_reversal=%dx%d",
           (long long)w[0].size, (long long)w[1].size, (long long)w[0].stride, (long long)w[1].stride, (long long)w[0].lo,
           (long long)w[0].hi, (long long)w[1].lo, (long long)w[1].hi, (long long)w[0].ld, (long long)w[1].ld,
           (long long)w[0].rd, (long long)w[1].rd, w[0].rev, w[1].rev);
  snprintf(src, sizeof src,
           "HloModule m\nENTRY e {\n x = f32[%lld,%lld,%lld,%lld] parameter(0)\n k = f32[%lld,%lld,%lld,%lld] parameter(1)\n"
           " ROOT r = f32[%lld,%lld,%lld,%lld] convolution(x, k), window={%s}, dim_labels=%s_%s->%s,"
           " feature_group_count=%lld, batch_group_count=%lld\n}\n",
           (long long)ldims[0], (long long)ldims[1], (long long)ldims[2], (long long)ldims[3], (long long)kdims[0],
           (long long)kdims[1], (long long)kdims[2], (long long)kdims[3], (long long)odims[0], (long long)odims[1],
           (long long)odims[2], (long long)odims[3], win, in_l, k_l, o_l, (long long)G, (long long)BG);
  if (run(src, args, 2, &out)) expect(name, &out, TPU_F32, od[0] * od[1] * od[2] * od[3], want);
  tpu_tensor_free(&out);
  tpu_tensor_free(&shape_only);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);
}

static void test_conv_2d(void) {
  const cwin plain[2] = {{3, 1, 0, 0, 1, 1, 0}, {2, 1, 0, 0, 1, 1, 0}};
  conv2d_case("nhwc", "b01f", "01io", "b01f", 2, 3, 5, 4, 4, 1, 1, plain, 1);
  conv2d_case("nchw", "bf01", "oi01", "bf01", 2, 3, 5, 4, 4, 1, 1, plain, 1);
  conv2d_case("odd labels", "0bf1", "i1o0", "f10b", 2, 3, 5, 4, 4, 1, 1, plain, 3);
  const cwin strided[2] = {{3, 2, 1, 2, 1, 2, 0}, {2, 1, 0, 1, 1, 1, 0}};
  conv2d_case("stride, pad, rhs dilation", "b01f", "01io", "b01f", 2, 2, 7, 5, 3, 1, 1, strided, 5);
  const cwin neg[2] = {{2, 1, -1, 2, 1, 1, 0}, {3, 2, 1, -2, 1, 1, 0}};
  conv2d_case("negative padding", "b01f", "01io", "b01f", 1, 2, 6, 7, 2, 1, 1, neg, 7);
  const cwin grad[2] = {{3, 1, 2, 2, 2, 1, 1}, {2, 1, 1, 1, 3, 1, 1}};
  conv2d_case("lhs dilation + reversal", "b01f", "01oi", "b01f", 2, 3, 4, 3, 2, 1, 1, grad, 9);
  const cwin all[2] = {{2, 2, 1, 0, 2, 2, 1}, {3, 1, 2, 1, 1, 2, 0}};
  conv2d_case("feature groups", "b01f", "01io", "b01f", 2, 4, 5, 5, 6, 2, 1, plain, 11);
  conv2d_case("depthwise", "b01f", "01io", "b01f", 1, 4, 4, 4, 8, 4, 1, all, 13);
  conv2d_case("batch groups", "f01b", "i01o", "01bf", 6, 2, 4, 4, 6, 1, 3, plain, 15);
  conv2d_case("batch groups, dilated", "b01f", "01io", "b01f", 4, 1, 5, 6, 4, 1, 2, all, 17);
}

/* Out of memory at every allocation of a dot + convolution run fails cleanly. */
/* A convolution runs as patches x kernel only when every kernel value is finite: a padded
 * position skips its product, and +0 x inf would be NaN. Kernel (inf, 1, 1) over
 * [pad 1 2 pad]: position 0 skips the inf (1 + 2 = 3), position 1 takes it (inf). A NaN
 * kernel value on padding likewise leaves position 0 alone. */
static void test_conv_nonfinite_kernel(void) {
  const char *src = "HloModule m\nENTRY e {\n x = f32[1,2,1] parameter(0)\n k = f32[3,1,1] parameter(1)\n"
                    " ROOT c = f32[1,2,1] convolution(x, k), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f\n}\n";
  tpu_tensor args[2] = {mk(TPU_F32, 3, (int64_t[]){1, 2, 1}, (double[]){1, 2}),
                        mk(TPU_F32, 3, (int64_t[]){3, 1, 1}, (double[]){INFINITY, 1, 1})},
             out;
  if (run(src, args, 2, &out)) expect("inf kernel", &out, TPU_F32, 2, (double[]){3, INFINITY});
  tpu_tensor_free(&out);
  ((float *)args[1].data)[0] = NAN;
  if (run(src, args, 2, &out)) {
    CHECK(((const float *)out.data)[0] == 3.0f);
    CHECK(isnan(((const float *)out.data)[1]));
  }
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);
}

static void test_out_of_memory(void) {
  const char *src = "HloModule m\nENTRY e {\n a = f32[2,3] parameter(0)\n b = f32[3,2] parameter(1)\n"
                    " d = f32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                    " x = f32[1,2,3] reshape(a)\n k = f32[2,3,1] reshape(b)\n"
                    " c = f32[1,1,1] convolution(x, k), window={size=2}, dim_labels=b0f_0io->b0f\n"
                    " ROOT t = (f32[2,2], f32[1,1,1]) tuple(d, c)\n}\n";
  tpu_module *m = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse("oom.hlo", src, strlen(src), &m, &d) == TPU_OK);
  if (!m) return;
  CHECK(tpu_ir_verify(m, &d) == TPU_OK);
  tpu_tensor args[2] = {mk(TPU_F32, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6}),
                        mk(TPU_F32, 2, (int64_t[]){3, 2}, (double[]){7, 8, 9, 10, 11, 12})};
  int failures = 0, done = 0;
  for (long k = 1; k < 10000 && !done; k++) {
    tpu_tensor out;
    memset(&out, 0, sizeof out);
    tpu_alloc_fail_after(k);
    tpu_status st = tpu_ref_run(m, args, 2, &out, &d);
    tpu_alloc_fail_after(0);
    if (st == TPU_OK) {
      done = 1;
      CHECK_EQ_INT(out.ntuple, 2);
      if (out.ntuple == 2) {
        expect("oom dot", &out.elems[0], TPU_F32, 4, (double[]){58, 64, 139, 154});
        /* x[s][f] = [[1 2 3] [4 5 6]], k[s][i] = [[7 8 9] [10 11 12]]. */
        expect("oom conv", &out.elems[1], TPU_F32, 1, (double[]){7 + 16 + 27 + 40 + 55 + 72});
      }
    } else {
      failures++;
      CHECK_EQ_INT(st, TPU_ERR_NOMEM);
      CHECK(out.data == NULL && out.elems == NULL);
    }
    tpu_tensor_free(&out);
  }
  CHECK(done);
  CHECK(failures > 5);
  tpu_module_free(m);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);
}

int main(void) {
  test_dot_basic();
  test_dot_general();
  test_dot_accumulation();
  test_dot_integers();
  test_conv_1d();
  test_conv_2d();
  test_conv_nonfinite_kernel();
  test_out_of_memory();
  CHECK_DONE();
}
