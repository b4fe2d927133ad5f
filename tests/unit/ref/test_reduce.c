/* Reference kernels reduce, reduce-window, select-and-scatter, sort, topk and map on small
 * hand-written HLO programs, checking exact values and the orders XLA defines. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "ref_util.h"
#include "hlo/hlo.h"
#include "base/alloc.h"
#include "ir/verify.h"
#include "ref/ref.h"

/* Checks every element of an array against want[] exactly (NaN matches NaN). */
static void expect(const char *what, const tpu_tensor *t, tpu_dtype dt, int64_t n, const double *want) {
  if (t->dtype != dt || tpu_tensor_numel(t) != n) {
    fprintf(stderr, "%s: got %s with %lld elements, want %s with %lld\n", what, tpu_dtype_name(t->dtype),
            (long long)tpu_tensor_numel(t), tpu_dtype_name(dt), (long long)n);
    CHECK(0);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    double g = tpu_tensor_get_f64(t, i);
    int ok = isnan(want[i]) ? isnan(g) : g == want[i] && !signbit(g) == !signbit(want[i]);
    if (!ok) {
      fprintf(stderr, "%s[%lld]: got %.9g, want %.9g\n", what, (long long)i, g, want[i]);
      CHECK(0);
    }
  }
}

#define ADD_F32 "add_f32 {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] add(a, b)\n}\n"
#define MAX_F32 "max_f32 {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] maximum(a, b)\n}\n"
#define ADD_S32 "add_s32 {\n a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT r = s32[] add(a, b)\n}\n"
/* f(acc, x) = acc*10 + x: not commutative, so the result spells out the order. */
#define DIGITS_S32                                                                           \
  "digits {\n a = s32[] parameter(0)\n b = s32[] parameter(1)\n ten = s32[] constant(10)\n" \
  " m = s32[] multiply(a, ten)\n ROOT r = s32[] add(m, b)\n}\n"

static void test_reduce_sum(void) {
  tpu_tensor x = mk(TPU_F32, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6}), out;
  const char *dims[] = {"{1}", "{0}", "{0,1}"};
  const char *shapes[] = {"f32[2]", "f32[3]", "f32[]"};
  const double w0[] = {6, 15}, w1[] = {5, 7, 9}, w2[] = {21};
  const double *want[] = {w0, w1, w2};
  int64_t n[] = {2, 3, 1};
  for (int i = 0; i < 3; i++) {
    char src[600];
    snprintf(src, sizeof src,
             "HloModule m\n" ADD_F32 "ENTRY e {\n x = f32[2,3] parameter(0)\n z = f32[] constant(0)\n"
             " ROOT r = %s reduce(x, z), dimensions=%s, to_apply=add_f32\n}\n",
             shapes[i], dims[i]);
    if (run(src, &x, 1, &out)) expect("reduce sum", &out, TPU_F32, n[i], want[i]);
    tpu_tensor_free(&out);
  }
  tpu_tensor_free(&x);
}

/* A generic (non-simple) reducer runs in row-major order of the reduced elements. */
static void test_reduce_order(void) {
  tpu_tensor x = mk(TPU_S32, 2, (int64_t[]){2, 3}, (double[]){1, 2, 3, 4, 5, 6}), out;
  const char *dims[] = {"{1}", "{0}", "{0,1}"};
  const char *shapes[] = {"s32[2]", "s32[3]", "s32[]"};
  const double w0[] = {123, 456}, w1[] = {14, 25, 36}, w2[] = {123456};
  const double *want[] = {w0, w1, w2};
  int64_t n[] = {2, 3, 1};
  for (int i = 0; i < 3; i++) {
    char src[700];
    snprintf(src, sizeof src,
             "HloModule m\n" DIGITS_S32 "ENTRY e {\n x = s32[2,3] parameter(0)\n z = s32[] constant(0)\n"
             " ROOT r = %s reduce(x, z), dimensions=%s, to_apply=digits\n}\n",
             shapes[i], dims[i]);
    if (run(src, &x, 1, &out)) expect("reduce order", &out, TPU_S32, n[i], want[i]);
    tpu_tensor_free(&out);
  }
  tpu_tensor_free(&x);
}

/* The TPU back end's order for an f32 add-reduce (tpu_ref_opts.vector_reduce): one partial
 * sum per 8x128 register position, then a log-step tree. Each case puts 1 and -1 on the same
 * position and 2^-24 on the next one twice: sequentially 1 + 2^-24 rounds to 1 (ties to
 * even), so the row-major fold gives (((1 + e) + ...) - 1) + e = 2^-24, while the partials
 * are 0 and e + e = 2^-23 and the tree gives 2^-23. The reference backend keeps the fold. */
static void test_reduce_vector_order(void) {
  const double e = ldexp(1.0, -24);
  struct {
    const char *shape, *dims;
    int rank;
    int64_t d[3];
    int at[4]; /* flat indices of 1, -1, e, e */
  } cs[] = {
      {"f32[4]", "{0}", 1, {4, 0, 0}, {0, 2, 1, 3}},             /* lanes of one register row */
      {"f32[2000]", "{0}", 1, {2000, 0, 0}, {5, 1029, 6, 1030}},   /* rank 1: 1024-element tiles */
      {"f32[1,256]", "{0,1}", 2, {1, 256, 0}, {0, 128, 1, 129}},   /* lane dimension, two tiles */
      {"f32[16,1]", "{0,1}", 2, {16, 1, 0}, {0, 8, 1, 9}},         /* sublane dimension */
      {"f32[3,16,130]", "{0,1,2}", 3, {3, 16, 130}, {0, 2080, 1, 2081}}, /* a major dimension */
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    tpu_tensor x = mk(TPU_F32, cs[i].rank, cs[i].d, NULL), out;
    memset(x.data, 0, x.nbytes);
    const double v[4] = {1, -1, e, e};
    for (int k = 0; k < 4; k++) tpu_tensor_set_f64(&x, cs[i].at[k], v[k]);
    char src[600];
    snprintf(src, sizeof src,
             "HloModule m\n" ADD_F32 "ENTRY e {\n x = %s parameter(0)\n z = f32[] constant(0)\n"
             " ROOT r = f32[] reduce(x, z), dimensions=%s, to_apply=add_f32\n}\n",
             cs[i].shape, cs[i].dims);
    const double tree = ldexp(1.0, -23), seq = e;
    if (run(src, &x, 1, &out)) expect("reduce sequential (ref)", &out, TPU_F32, 1, &seq);
    tpu_tensor_free(&out);
    tpu_module *m = NULL;
    tpu_diag d;
    tpu_status st = tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d);
    if (st == TPU_OK) st = tpu_ir_verify(m, &d);
    tpu_ref_opts o = {NULL, NULL, NULL, NULL, NULL, 0, NULL, 1};
    if (st == TPU_OK) st = tpu_ref_run_opts(m, &x, 1, &o, &out, &d);
    CHECK(st == TPU_OK);
    if (st == TPU_OK) expect(cs[i].shape, &out, TPU_F32, 1, &tree);
    tpu_tensor_free(&out);
    tpu_module_free(m);
    tpu_tensor_free(&x);
  }
}

/* Sums over one minor dimension: each output keeps its own partials (lanes: per row; sublanes:
 * per column); whole-register sums along a major dimension stay sequential. */
static void test_reduce_vector_axes(void) {
  const double e = ldexp(1.0, -24), tree = ldexp(1.0, -23);
  tpu_tensor x = mk(TPU_F32, 2, (int64_t[]){16, 256}, NULL), out;
  memset(x.data, 0, x.nbytes);
  /* row 3: lanes 0/128 hold 1/-1, lanes 1/129 hold e; column 7: rows 0/8 hold 1/-1, rows 1/9 e */
  tpu_tensor_set_f64(&x, 3 * 256 + 0, 1), tpu_tensor_set_f64(&x, 3 * 256 + 128, -1);
  tpu_tensor_set_f64(&x, 3 * 256 + 1, e), tpu_tensor_set_f64(&x, 3 * 256 + 129, e);
  tpu_tensor_set_f64(&x, 0 * 256 + 7, 1), tpu_tensor_set_f64(&x, 8 * 256 + 7, -1);
  tpu_tensor_set_f64(&x, 1 * 256 + 7, e), tpu_tensor_set_f64(&x, 9 * 256 + 7, e);
  const char *dims[] = {"{1}", "{0}"}, *shapes[] = {"f32[16]", "f32[256]"};
  const int64_t at[] = {3, 7};
  for (int i = 0; i < 2; i++) {
    char src[600];
    snprintf(src, sizeof src,
             "HloModule m\n" ADD_F32 "ENTRY e {\n x = f32[16,256] parameter(0)\n z = f32[] constant(0)\n"
             " ROOT r = %s reduce(x, z), dimensions=%s, to_apply=add_f32\n}\n",
             shapes[i], dims[i]);
    tpu_module *m = NULL;
    tpu_diag d;
    tpu_status st = tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d);
    if (st == TPU_OK) st = tpu_ir_verify(m, &d);
    tpu_ref_opts o = {NULL, NULL, NULL, NULL, NULL, 0, NULL, 1};
    if (st == TPU_OK) st = tpu_ref_run_opts(m, &x, 1, &o, &out, &d);
    CHECK(st == TPU_OK);
    if (st == TPU_OK) {
      CHECK(tpu_tensor_get_f64(&out, at[i]) == tree);
      if (tpu_tensor_get_f64(&out, at[i]) != tree)
        fprintf(stderr, "reduce %s: got %.9g want %.9g\n", dims[i], tpu_tensor_get_f64(&out, at[i]), tree);
    }
    tpu_tensor_free(&out);
    tpu_module_free(m);
  }
  tpu_tensor_free(&x);
}

/* Variadic reduce: argmax with the first index winning ties, as JAX lowers it. */
static void test_reduce_argmax(void) {
  const char *src =
      "HloModule m\n"
      "amax {\n v0 = f32[] parameter(0)\n i0 = s32[] parameter(1)\n v1 = f32[] parameter(2)\n i1 = s32[] parameter(3)\n"
      " gt = pred[] compare(v0, v1), direction=GT\n eq = pred[] compare(v0, v1), direction=EQ\n"
      " lt = pred[] compare(i0, i1), direction=LT\n tie = pred[] and(eq, lt)\n keep = pred[] or(gt, tie)\n"
      " v = f32[] select(keep, v0, v1)\n i = s32[] select(keep, i0, i1)\n ROOT t = (f32[], s32[]) tuple(v, i)\n}\n"
      "ENTRY e {\n x = f32[2,4] parameter(0)\n io = s32[2,4] iota(), iota_dimension=1\n"
      " ninf = f32[] constant(-inf)\n z = s32[] constant(0)\n"
      " ROOT r = (f32[2], s32[2]) reduce(x, io, ninf, z), dimensions={1}, to_apply=amax\n}\n";
  tpu_tensor x = mk(TPU_F32, 2, (int64_t[]){2, 4}, (double[]){1, 7, 3, 7, -2, -1, -1, -5}), out;
  if (run(src, &x, 1, &out)) {
    CHECK_EQ_INT(out.ntuple, 2);
    expect("argmax values", &out.elems[0], TPU_F32, 2, (double[]){7, -1});
    expect("argmax index", &out.elems[1], TPU_S32, 2, (double[]){1, 1});
  }
  tpu_tensor_free(&out);
  tpu_tensor_free(&x);
}

/* Reducing an empty dimension gives the init value; bf16 adds round at every step. */
static void test_reduce_edges(void) {
  tpu_tensor x = mk(TPU_F32, 2, (int64_t[]){0, 3}, NULL), out;
  const char *src = "HloModule m\n" ADD_F32 "ENTRY e {\n x = f32[0,3] parameter(0)\n z = f32[] constant(2.5)\n"
                    " ROOT r = f32[3] reduce(x, z), dimensions={0}, to_apply=add_f32\n}\n";
  if (run(src, &x, 1, &out)) expect("empty reduce", &out, TPU_F32, 3, (double[]){2.5, 2.5, 2.5});
  tpu_tensor_free(&out);
  tpu_tensor_free(&x);

  /* 256 + 1 = 257 is a tie between bf16 neighbours 256 and 258: it rounds to even, 256. */
  x = mk(TPU_BF16, 1, (int64_t[]){5}, (double[]){256, 1, 1, 1, 1});
  src = "HloModule m\nadd_bf16 {\n a = bf16[] parameter(0)\n b = bf16[] parameter(1)\n ROOT r = bf16[] add(a, b)\n}\n"
        "ENTRY e {\n x = bf16[5] parameter(0)\n z = bf16[] constant(0)\n"
        " ROOT r = bf16[] reduce(x, z), dimensions={0}, to_apply=add_bf16\n}\n";
  if (run(src, &x, 1, &out)) expect("bf16 reduce", &out, TPU_BF16, 1, (double[]){256});
  tpu_tensor_free(&out);
  tpu_tensor_free(&x);
}

static void test_reduce_window(void) {
  tpu_tensor x = mk(TPU_F32, 1, (int64_t[]){5}, (double[]){3, 1, 4, 1, 5}), out;
  /* Max pool, size 3 stride 2, padded by one on each side: [P 3 1 4 1 5 P]. */
  const char *src = "HloModule m\n" MAX_F32 "ENTRY e {\n x = f32[5] parameter(0)\n i = f32[] constant(-inf)\n"
                    " ROOT r = f32[3] reduce-window(x, i), window={size=3 stride=2 pad=1_1}, to_apply=max_f32\n}\n";
  if (run(src, &x, 1, &out)) expect("maxpool", &out, TPU_F32, 3, (double[]){3, 4, 5});
  tpu_tensor_free(&out);
  /* Negative low padding crops: [1 4 1 5], windows of 2 stride 2. */
  src = "HloModule m\n" ADD_F32 "ENTRY e {\n x = f32[5] parameter(0)\n i = f32[] constant(0)\n"
        " ROOT r = f32[2] reduce-window(x, i), window={size=2 stride=2 pad=-1_0}, to_apply=add_f32\n}\n";
  if (run(src, &x, 1, &out)) expect("negative pad", &out, TPU_F32, 2, (double[]){5, 6});
  tpu_tensor_free(&out);
  /* Window dilation 2: (x0,x2), (x1,x3), (x2,x4). */
  src = "HloModule m\n" ADD_F32 "ENTRY e {\n x = f32[5] parameter(0)\n i = f32[] constant(0)\n"
        " ROOT r = f32[3] reduce-window(x, i), window={size=2 rhs_dilate=2}, to_apply=add_f32\n}\n";
  if (run(src, &x, 1, &out)) expect("window dilation", &out, TPU_F32, 3, (double[]){7, 2, 9});
  tpu_tensor_free(&out);
  tpu_tensor_free(&x);

  /* Base dilation 2 and padding 1: [P 1 H 2 H 3 P]. Padding and holes are the init value
   * (10 here, deliberately not the identity), so each of them adds 10. */
  x = mk(TPU_S32, 1, (int64_t[]){3}, (double[]){1, 2, 3});
  src = "HloModule m\n" ADD_S32 "ENTRY e {\n x = s32[3] parameter(0)\n i = s32[] constant(10)\n"
        " ROOT r = s32[6] reduce-window(x, i), window={size=2 pad=1_1 lhs_dilate=2}, to_apply=add_s32\n}\n";
  if (run(src, &x, 1, &out)) expect("base dilation", &out, TPU_S32, 6, (double[]){21, 21, 22, 22, 23, 23});
  tpu_tensor_free(&out);
  /* A generic reducer sees the window in row-major order, starting from init. */
  src = "HloModule m\n" DIGITS_S32 "ENTRY e {\n x = s32[3] parameter(0)\n i = s32[] constant(0)\n"
        " ROOT r = s32[2] reduce-window(x, i), window={size=2}, to_apply=digits\n}\n";
  if (run(src, &x, 1, &out)) expect("window order", &out, TPU_S32, 2, (double[]){12, 23});
  tpu_tensor_free(&out);
  tpu_tensor_free(&x);

  /* 2-D, and two operands reduced together (sum and max in one computation). */
  x = mk(TPU_F32, 2, (int64_t[]){3, 3}, (double[]){1, 2, 3, 4, 5, 6, 7, 8, 9});
  tpu_tensor args[2] = {x, mk(TPU_F32, 2, (int64_t[]){3, 3}, (double[]){9, 1, 8, 2, 7, 3, 6, 4, 5})};
  src = "HloModule m\nsm {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n c = f32[] parameter(2)\n"
        " d = f32[] parameter(3)\n s = f32[] add(a, c)\n m = f32[] maximum(b, d)\n ROOT t = (f32[], f32[]) tuple(s, m)\n}\n"
        "ENTRY e {\n x = f32[3,3] parameter(0)\n y = f32[3,3] parameter(1)\n z = f32[] constant(0)\n"
        " ninf = f32[] constant(-inf)\n"
        " ROOT r = (f32[2,2], f32[2,2]) reduce-window(x, y, z, ninf), window={size=2x2}, to_apply=sm\n}\n";
  if (run(src, args, 2, &out)) {
    CHECK_EQ_INT(out.ntuple, 2);
    expect("variadic window sum", &out.elems[0], TPU_F32, 4, (double[]){12, 16, 24, 28});
    expect("variadic window max", &out.elems[1], TPU_F32, 4, (double[]){9, 8, 7, 7});
  }
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);
}

/* The row-at-a-time path of a simple reducer (src/ref/window.c: window_rows) against the
 * same reducer written so that it is not simple (its result copied: the generic call, one
 * window element at a time): the same bytes for windows of every kind (padding, negative
 * padding, strides, base and window dilation, plain trailing dimensions), for f32, bf16 and
 * s32 and the four reducers, on values with signed zeros, NaN, infinities and subnormals. */
static uint32_t g_lcg = 12345;
static int rnd(int n) {
  g_lcg = g_lcg * 1664525u + 1013904223u;
  return (int)((g_lcg >> 8) % (uint32_t)n);
}

static void test_reduce_window_rows(void) {
  static const char *const ops[] = {"add", "maximum", "minimum", "multiply"};
  static const char *const types[] = {"f32", "bf16", "s32"};
  static const tpu_dtype dts[] = {TPU_F32, TPU_BF16, TPU_S32};
  static const double specials[] = {-0.0, NAN, INFINITY, -INFINITY, 1e-40, -3e-39, 0.0, 1.5};
  int compared = 0;
  for (int iter = 0; iter < 300; iter++) {
    int rank = 1 + rnd(4), ti = rnd(3), oi = rnd(4);
    int64_t dims[4], odims[4];
    char win[512] = "", size[64] = "", stride[64] = "", pad[128] = "", ld[64] = "", rd[64] = "";
    int ok = 1;
    for (int k = 0; k < rank; k++) {
      dims[k] = 1 + rnd(6);
      int plain = rnd(3) == 0;
      int sz = plain ? 1 : 1 + rnd(3), st = plain ? 1 : 1 + rnd(3), lo = plain ? 0 : rnd(4) - 1,
          hi = plain ? 0 : rnd(4) - 1, bd = plain ? 1 : 1 + rnd(2), wdl = plain ? 1 : 1 + rnd(2);
      int64_t padded = (dims[k] - 1) * bd + 1 + lo + hi, eff = (int64_t)(sz - 1) * wdl + 1;
      odims[k] = padded >= eff ? (padded - eff) / st + 1 : 0;
      if (odims[k] <= 0) ok = 0;
      const char *x = k ? "x" : "";
      snprintf(size + strlen(size), sizeof size - strlen(size), "%s%d", x, sz);
      snprintf(stride + strlen(stride), sizeof stride - strlen(stride), "%s%d", x, st);
      snprintf(pad + strlen(pad), sizeof pad - strlen(pad), "%s%d_%d", x, lo, hi);
      snprintf(ld + strlen(ld), sizeof ld - strlen(ld), "%s%d", x, bd);
      snprintf(rd + strlen(rd), sizeof rd - strlen(rd), "%s%d", x, wdl);
    }
    if (!ok) continue;
    snprintf(win, sizeof win, "size=%s stride=%s pad=%s lhs_dilate=%s rhs_dilate=%s", size, stride, pad, ld, rd);
    char ds[64] = "", os[64] = "";
    for (int k = 0; k < rank; k++) {
      snprintf(ds + strlen(ds), sizeof ds - strlen(ds), "%s%lld", k ? "," : "", (long long)dims[k]);
      snprintf(os + strlen(os), sizeof os - strlen(os), "%s%lld", k ? "," : "", (long long)odims[k]);
    }
    const char *t = types[ti], *op = ops[oi];
    /* the reducer's identity, or (so that padding shows) a value that is not */
    const char *init = rnd(2)     ? (ti == 2 ? "3" : "-1.25")
                       : ti == 2 ? (oi == 1 ? "-2147483648" : oi == 2 ? "2147483647" : oi == 3 ? "1" : "0")
                                 : (oi == 1 ? "-inf" : oi == 2 ? "inf" : oi == 3 ? "1" : "-0");
    char src[2][2048];
    for (int slow = 0; slow < 2; slow++)
      snprintf(src[slow], sizeof src[slow],
               "HloModule m\nf {\n a = %s[] parameter(0)\n b = %s[] parameter(1)\n %sr = %s[] %s(a, b)\n%s}\n"
               "ENTRY e {\n x = %s[%s] parameter(0)\n i = %s[] constant(%s)\n"
               " ROOT w = %s[%s] reduce-window(x, i), window={%s}, to_apply=f\n}\n",
               t, t, slow ? "" : "ROOT ", t, op, slow ? " ROOT c = " : "", t, ds, t, init, t, os, win);
    char *c = strstr(src[1], " ROOT c = ");
    if (c) {
      char tail[1600];
      snprintf(tail, sizeof tail, " ROOT c = %s[] copy(r)\n%s", t, strstr(c, "}\n"));
      strcpy(c, tail);
    }
    int64_t n = 1;
    for (int k = 0; k < rank; k++) n *= dims[k];
    double v[1296];
    for (int64_t e = 0; e < n; e++)
      v[e] = ti == 2 ? (double)(rnd(7) - 3) : rnd(4) == 0 ? specials[rnd(8)] : (rnd(2000) - 1000) / 64.0;
    tpu_tensor x = mk(dts[ti], rank, dims, v), got[2];
    int ran = run(src[0], &x, 1, &got[0]);
    if (ran && run(src[1], &x, 1, &got[1])) {
      compared++;
      CHECK(got[0].nbytes == got[1].nbytes && !memcmp(got[0].data, got[1].data, got[0].nbytes));
      if (got[0].nbytes != got[1].nbytes || memcmp(got[0].data, got[1].data, got[0].nbytes))
        fprintf(stderr, "window rows differ from the generic call:\n%s", src[0]);
      tpu_tensor_free(&got[1]);
    }
    CHECK(ran);
    tpu_tensor_free(&got[0]);
    tpu_tensor_free(&x);
  }
  CHECK(compared > 100);
}

#define SELECT_GE "ge {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = pred[] compare(a, b), direction=GE\n}\n"

static void test_select_and_scatter(void) {
  /* Windows (1,5) (2,2) (7,3): the max is selected; on a tie GE keeps the first. */
  tpu_tensor args[2] = {mk(TPU_F32, 1, (int64_t[]){6}, (double[]){1, 5, 2, 2, 7, 3}),
                        mk(TPU_F32, 1, (int64_t[]){3}, (double[]){10, 20, 30})},
             out;
  const char *src = "HloModule m\n" SELECT_GE ADD_F32
                    "ENTRY e {\n x = f32[6] parameter(0)\n s = f32[3] parameter(1)\n z = f32[] constant(0)\n"
                    " ROOT r = f32[6] select-and-scatter(x, s, z), window={size=2 stride=2}, select=ge, scatter=add_f32\n}\n";
  if (run(src, args, 2, &out)) expect("select-and-scatter", &out, TPU_F32, 6, (double[]){0, 10, 20, 0, 30, 0});
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);

  /* Padding is never selected and the all-padding window (P,P) drops its source value
   * (100); the window is [P P 4 9] after cropping the last element; init 0.5 stays where
   * nothing lands. */
  args[0] = mk(TPU_F32, 1, (int64_t[]){3}, (double[]){4, 9, 1});
  args[1] = mk(TPU_F32, 1, (int64_t[]){3}, (double[]){100, 10, 1});
  src = "HloModule m\n" SELECT_GE ADD_F32
        "ENTRY e {\n x = f32[3] parameter(0)\n s = f32[3] parameter(1)\n z = f32[] constant(0.5)\n"
        " ROOT r = f32[3] select-and-scatter(x, s, z), window={size=2 pad=2_-1}, select=ge, scatter=add_f32\n}\n";
  if (run(src, args, 2, &out)) expect("s&s padding", &out, TPU_F32, 3, (double[]){10.5, 1.5, 0.5});
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);

  /* Overlapping windows [P 1 3] [1 3 2] [3 2 P] all select the 3: the scatter adds up. */
  args[0] = mk(TPU_F32, 1, (int64_t[]){3}, (double[]){1, 3, 2});
  args[1] = mk(TPU_F32, 1, (int64_t[]){3}, (double[]){1, 10, 100});
  src = "HloModule m\n" SELECT_GE ADD_F32
        "ENTRY e {\n x = f32[3] parameter(0)\n s = f32[3] parameter(1)\n z = f32[] constant(0)\n"
        " ROOT r = f32[3] select-and-scatter(x, s, z), window={size=3 pad=1_1}, select=ge, scatter=add_f32\n}\n";
  if (run(src, args, 2, &out)) expect("s&s overlap", &out, TPU_F32, 3, (double[]){0, 111, 0});
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);
}

static void test_sort(void) {
  tpu_tensor x = mk(TPU_F32, 2, (int64_t[]){2, 3}, (double[]){3, -1, 2, 0, 5, -4}), out;
  const char *src = "HloModule m\nlt {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
                    " ROOT r = pred[] compare(a, b), direction=LT\n}\n"
                    "ENTRY e {\n x = f32[2,3] parameter(0)\n ROOT r = f32[2,3] sort(x), dimensions={1}, to_apply=lt\n}\n";
  if (run(src, &x, 1, &out)) expect("sort rows", &out, TPU_F32, 6, (double[]){-1, 2, 3, -4, 0, 5});
  tpu_tensor_free(&out);
  src = "HloModule m\nlt {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
        " ROOT r = pred[] compare(a, b), direction=LT\n}\n"
        "ENTRY e {\n x = f32[2,3] parameter(0)\n ROOT r = f32[2,3] sort(x), dimensions={0}, to_apply=lt\n}\n";
  if (run(src, &x, 1, &out)) expect("sort columns", &out, TPU_F32, 6, (double[]){0, -1, -4, 3, 5, 2});
  tpu_tensor_free(&out);
  tpu_tensor_free(&x);

  /* Two operands sorted by the first only: equal keys keep their order (stable), for an
   * ascending and a descending comparator. */
  tpu_tensor args[2] = {mk(TPU_S32, 1, (int64_t[]){7}, (double[]){3, 1, 3, 1, 2, 3, 1}),
                        mk(TPU_S32, 1, (int64_t[]){7}, (double[]){0, 1, 2, 3, 4, 5, 6})};
  const char *dir[] = {"LT", "GT"};
  const double wk[2][7] = {{1, 1, 1, 2, 3, 3, 3}, {3, 3, 3, 2, 1, 1, 1}};
  const double wv[2][7] = {{1, 3, 6, 4, 0, 2, 5}, {0, 2, 5, 4, 1, 3, 6}};
  for (int i = 0; i < 2; i++) {
    char buf[800];
    snprintf(buf, sizeof buf,
             "HloModule m\ncmp {\n a = s32[] parameter(0)\n b = s32[] parameter(1)\n c = s32[] parameter(2)\n"
             " d = s32[] parameter(3)\n ROOT r = pred[] compare(a, b), direction=%s\n}\n"
             "ENTRY e {\n k = s32[7] parameter(0)\n v = s32[7] parameter(1)\n"
             " ROOT r = (s32[7], s32[7]) sort(k, v), dimensions={0}, is_stable=true, to_apply=cmp\n}\n",
             dir[i]);
    if (run(buf, args, 2, &out)) {
      CHECK_EQ_INT(out.ntuple, 2);
      expect("stable sort keys", &out.elems[0], TPU_S32, 7, wk[i]);
      expect("stable sort values", &out.elems[1], TPU_S32, 7, wv[i]);
    }
    tpu_tensor_free(&out);
  }
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);
}

static void test_topk(void) {
  /* Total order NaN > 3 > 1 > +0 > -0 > -inf > -NaN; ties (the two 3s) lower index first. */
  tpu_tensor x = mk(TPU_F32, 2, (int64_t[]){2, 8}, (double[]){1, NAN, 3, 3, -INFINITY, -0.0, 0.0, -NAN,
                                                              8, 7, 6, 5, 4, 3, 2, 1}),
             out;
  /* tpu_tensor_set_f64 keeps the NaN sign bit through the f32 conversion; check it did. */
  uint32_t bits;
  memcpy(&bits, (char *)x.data + 7 * 4, 4);
  CHECK(bits & 0x80000000u);
  const char *src = "HloModule m\nENTRY e {\n x = f32[2,8] parameter(0)\n"
                    " ROOT r = (f32[2,5], s32[2,5]) topk(x), k=5, largest=true\n}\n";
  if (run(src, &x, 1, &out)) {
    expect("topk values", &out.elems[0], TPU_F32, 10, (double[]){NAN, 3, 3, 1, 0.0, 8, 7, 6, 5, 4});
    expect("topk indices", &out.elems[1], TPU_S32, 10, (double[]){1, 2, 3, 0, 6, 0, 1, 2, 3, 4});
  }
  tpu_tensor_free(&out);
  src = "HloModule m\nENTRY e {\n x = f32[2,8] parameter(0)\n"
        " ROOT r = (f32[2,3], s32[2,3]) topk(x), k=3, largest=false\n}\n";
  if (run(src, &x, 1, &out)) {
    expect("bottomk values", &out.elems[0], TPU_F32, 6, (double[]){-NAN, -INFINITY, -0.0, 1, 2, 3});
    expect("bottomk indices", &out.elems[1], TPU_S32, 6, (double[]){7, 4, 5, 7, 6, 5});
    uint32_t b0;
    memcpy(&b0, out.elems[0].data, 4);
    CHECK(b0 & 0x80000000u); /* the smallest is -NaN, not +NaN */
  }
  tpu_tensor_free(&out);
  tpu_tensor_free(&x);

  /* Integers: s32 with ties and negatives. */
  x = mk(TPU_S32, 1, (int64_t[]){6}, (double[]){-5, 7, 7, -2147483648.0, 2147483647.0, 0});
  src = "HloModule m\nENTRY e {\n x = s32[6] parameter(0)\n ROOT r = (s32[4], s32[4]) topk(x), k=4, largest=true\n}\n";
  if (run(src, &x, 1, &out)) {
    expect("topk s32 values", &out.elems[0], TPU_S32, 4, (double[]){2147483647.0, 7, 7, 0});
    expect("topk s32 indices", &out.elems[1], TPU_S32, 4, (double[]){4, 1, 2, 5});
  }
  tpu_tensor_free(&out);
  tpu_tensor_free(&x);
}

static void test_map(void) {
  tpu_tensor args[2] = {mk(TPU_F32, 2, (int64_t[]){2, 2}, (double[]){1, 2, 3, 4}),
                        mk(TPU_F32, 2, (int64_t[]){2, 2}, (double[]){10, 20, 30, 40})},
             out;
  const char *src = "HloModule m\n" ADD_F32 "ENTRY e {\n x = f32[2,2] parameter(0)\n y = f32[2,2] parameter(1)\n"
                    " ROOT r = f32[2,2] map(x, y), dimensions={0,1}, to_apply=add_f32\n}\n";
  if (run(src, args, 2, &out)) expect("map add", &out, TPU_F32, 4, (double[]){11, 22, 33, 44});
  tpu_tensor_free(&out);
  /* A generic computation with a different result type: x*y > 50. */
  src = "HloModule m\nbig {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n p = f32[] multiply(a, b)\n"
        " c = f32[] constant(50)\n ROOT r = pred[] compare(p, c), direction=GT\n}\n"
        "ENTRY e {\n x = f32[2,2] parameter(0)\n y = f32[2,2] parameter(1)\n"
        " ROOT r = pred[2,2] map(x, y), dimensions={0,1}, to_apply=big\n}\n";
  if (run(src, args, 2, &out)) expect("map pred", &out, TPU_PRED, 4, (double[]){0, 0, 1, 1});
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);
}

/* Comparator computations run on a scalar fast path; its compare must agree exactly with
 * the elementwise compare kernel: map(compare) against compare, over all pairs of special
 * values (NaNs of both signs, infinities, signed zeros, denormals), every direction and
 * comparison type. */
static void test_fast_compare(void) {
  static const double fv[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-45, -1e-45, 1e-310, 1, -1, 1.5, 3e38, -2};
  static const double iv[] = {0, 1, -1, 127, -128, 5, -5, 100};
  const struct {
    tpu_dtype t;
    const char *name;
    const double *v;
    int nv;
    const char *types[3];
  } cases[] = {
      {TPU_F32, "f32", fv, 14, {"", ", type=TOTALORDER", ", type=FLOAT"}},
      {TPU_BF16, "bf16", fv, 14, {"", ", type=TOTALORDER", NULL}},
      {TPU_F16, "f16", fv, 14, {"", ", type=TOTALORDER", NULL}},
      {TPU_F64, "f64", fv, 14, {"", ", type=TOTALORDER", NULL}},
      {TPU_S8, "s8", iv, 8, {"", ", type=SIGNED", NULL}},
      {TPU_U8, "u8", iv, 8, {"", ", type=UNSIGNED", NULL}},
      {TPU_S32, "s32", iv, 8, {"", NULL, NULL}},
      {TPU_PRED, "pred", iv, 2, {"", NULL, NULL}},
  };
  const char *dirs[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int nv = cases[c].nv, n = nv * nv;
    double xs[256], ys[256];
    for (int i = 0; i < n; i++) xs[i] = cases[c].v[i / nv], ys[i] = cases[c].v[i % nv];
    tpu_tensor args[2] = {mk(cases[c].t, 1, (int64_t[]){n}, xs), mk(cases[c].t, 1, (int64_t[]){n}, ys)}, out;
    for (int ty = 0; ty < 3 && cases[c].types[ty]; ty++)
      for (int di = 0; di < 6; di++) {
        char src[1000];
        const char *T = cases[c].name;
        snprintf(src, sizeof src,
                 "HloModule m\ncmp {\n a = %s[] parameter(0)\n b = %s[] parameter(1)\n"
                 " ROOT r = pred[] compare(a, b), direction=%s%s\n}\n"
                 "ENTRY e {\n x = %s[%d] parameter(0)\n y = %s[%d] parameter(1)\n"
                 " m = pred[%d] map(x, y), dimensions={0}, to_apply=cmp\n"
                 " c = pred[%d] compare(x, y), direction=%s%s\n ROOT t = (pred[%d], pred[%d]) tuple(m, c)\n}\n",
                 T, T, dirs[di], cases[c].types[ty], T, n, T, n, n, n, dirs[di], cases[c].types[ty], n, n);
        if (run(src, args, 2, &out)) {
          int bad = 0;
          for (int i = 0; i < n; i++) bad += ((uint8_t *)out.elems[0].data)[i] != ((uint8_t *)out.elems[1].data)[i];
          if (bad) fprintf(stderr, "fast compare %s %s%s: %d mismatches\n", T, dirs[di], cases[c].types[ty], bad);
          CHECK_EQ_INT(bad, 0);
        } else {
          CHECK(0);
        }
        tpu_tensor_free(&out);
      }
    tpu_tensor_free(&args[0]);
    tpu_tensor_free(&args[1]);
  }
}

/* Out of memory at every allocation of a run using each kernel (and both the fast and the
 * generic computation paths): each fails cleanly with TPU_ERR_NOMEM and nothing leaks. */
static void test_out_of_memory(void) {
  const char *src =
      "HloModule m\n" ADD_F32 SELECT_GE
      "amax {\n v0 = f32[] parameter(0)\n i0 = s32[] parameter(1)\n v1 = f32[] parameter(2)\n i1 = s32[] parameter(3)\n"
      " gt = pred[] compare(v0, v1), direction=GT\n v = f32[] select(gt, v0, v1)\n i = s32[] select(gt, i0, i1)\n"
      " ROOT t = (f32[], s32[]) tuple(v, i)\n}\n"
      "lt2 {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n c = s32[] parameter(2)\n d = s32[] parameter(3)\n"
      " ROOT r = pred[] compare(a, b), direction=LT\n}\n"
      "slow {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n s = f32[] subtract(a, b)\n ROOT r = f32[] add(s, a)\n}\n"
      "ENTRY e {\n x = f32[2,4] parameter(0)\n io = s32[2,4] iota(), iota_dimension=1\n ninf = f32[] constant(-inf)\n"
      " z = s32[] constant(0)\n zf = f32[] constant(0)\n"
      " r = (f32[2], s32[2]) reduce(x, io, ninf, z), dimensions={1}, to_apply=amax\n"
      " w = f32[2,3] reduce-window(x, zf), window={size=1x2}, to_apply=add_f32\n"
      " s = (f32[2,4], s32[2,4]) sort(x, io), dimensions={1}, to_apply=lt2\n"
      " k = (f32[2,2], s32[2,2]) topk(x), k=2, largest=true\n"
      " ss = f32[2,4] select-and-scatter(x, w, zf), window={size=1x2}, select=ge, scatter=add_f32\n"
      " mp = f32[2,4] map(x, x), dimensions={0,1}, to_apply=slow\n"
      " ROOT t = ((f32[2], s32[2]), f32[2,3], (f32[2,4], s32[2,4]), (f32[2,2], s32[2,2]), f32[2,4], f32[2,4])"
      " tuple(r, w, s, k, ss, mp)\n}\n";
  tpu_module *m = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse("oom.hlo", src, strlen(src), &m, &d) == TPU_OK);
  if (!m) return;
  CHECK(tpu_ir_verify(m, &d) == TPU_OK);
  tpu_tensor x = mk(TPU_F32, 2, (int64_t[]){2, 4}, (double[]){1, 7, 3, 7, -2, -1, -1, -5});
  int failures = 0, done = 0;
  for (long k = 1; k < 20000 && !done; k++) {
    tpu_tensor out;
    memset(&out, 0, sizeof out);
    tpu_alloc_fail_after(k);
    tpu_status st = tpu_ref_run(m, &x, 1, &out, &d);
    tpu_alloc_fail_after(0);
    if (st == TPU_OK) {
      done = 1;
      CHECK_EQ_INT(out.ntuple, 6);
      if (out.ntuple == 6) {
        expect("oom argmax", &out.elems[0].elems[1], TPU_S32, 2, (double[]){3, 2}); /* ties pick the later */
        expect("oom window", &out.elems[1], TPU_F32, 6, (double[]){8, 10, 10, -3, -2, -6});
        expect("oom sort", &out.elems[2].elems[1], TPU_S32, 8, (double[]){0, 2, 1, 3, 3, 0, 1, 2});
        expect("oom topk", &out.elems[3].elems[1], TPU_S32, 4, (double[]){1, 3, 1, 2});
        expect("oom s&s", &out.elems[4], TPU_F32, 8, (double[]){0, 18, 0, 10, 0, -5, -6, 0});
        expect("oom map", &out.elems[5], TPU_F32, 8, (double[]){1, 7, 3, 7, -2, -1, -1, -5});
      }
    } else {
      failures++;
      CHECK_EQ_INT(st, TPU_ERR_NOMEM);
      CHECK(out.data == NULL && out.elems == NULL);
    }
    tpu_tensor_free(&out);
  }
  CHECK(done);
  CHECK(failures > 20);
  tpu_tensor_free(&x);
  tpu_module_free(m);
}

int main(void) {
  test_reduce_sum();
  test_reduce_order();
  test_reduce_vector_order();
  test_reduce_vector_axes();
  test_reduce_argmax();
  test_reduce_edges();
  test_reduce_window();
  test_reduce_window_rows();
  test_select_and_scatter();
  test_sort();
  test_topk();
  test_map();
  test_fast_compare();
  test_out_of_memory();
  CHECK_DONE();
}
