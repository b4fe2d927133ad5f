/* Data-movement kernels of the reference interpreter: broadcast, reshape, bitcast,
 * transpose, slice, dynamic-slice, dynamic-update-slice, concatenate, pad, reverse, iota,
 * copy — exact values from small HLO programs, checked against direct index formulas. */
#include <stdio.h>
#include <string.h>

#include "base/bf16.h"
#include "check.h"
#include "ref_util.h"
#include "hlo/hlo.h"
#include "ref/ref.h"

/* An array whose element i holds i + base. */
static tpu_tensor counting(tpu_dtype t, int rank, const int64_t *dims, int64_t base) {
  tpu_tensor x;
  tpu_diag d;
  if (tpu_tensor_alloc(&x, t, rank, dims, &d) != TPU_OK) {
    fprintf(stderr, "alloc failed\n");
    exit(1);
  }
  int64_t n = tpu_tensor_numel(&x);
  for (int64_t i = 0; i < n; i++) tpu_tensor_set_i64(&x, i, i + base);
  return x;
}

static tpu_tensor scalar(tpu_dtype t, int64_t v) {
  tpu_tensor x = counting(t, 0, NULL, 0);
  tpu_tensor_set_i64(&x, 0, v);
  return x;
}

static int64_t at(const tpu_tensor *t, int64_t i) { return tpu_tensor_get_i64(t, i); }

static void free_all(tpu_tensor *ts, int n) {
  for (int i = 0; i < n; i++) tpu_tensor_free(&ts[i]);
}

static void test_broadcast(void) {
  int64_t d3[1] = {3};
  tpu_tensor in[2] = {counting(TPU_S32, 1, d3, 1), scalar(TPU_F32, 7)};
  tpu_tensor out;
  CHECK(run("HloModule m\nENTRY e {\n p = s32[3] parameter(0)\n ROOT b = s32[2,3,4] broadcast(p), dimensions={1}\n}\n",
            in, 1, &out));
  int bad = 0;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++) bad += at(&out, (i * 3 + j) * 4 + k) != j + 1;
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(out.rank, 3);
  tpu_tensor_free(&out);
  CHECK(run("HloModule m\nENTRY e {\n p = f32[] parameter(0)\n ROOT b = f32[2,5] broadcast(p), dimensions={}\n}\n", &in[1],
            1, &out));
  bad = 0;
  for (int i = 0; i < 10; i++) bad += tpu_tensor_get_f64(&out, i) != 7.0;
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  /* Operand dims may land in any increasing set of result dims: [2,3] -> [2,4,3]. */
  int64_t d23[2] = {2, 3};
  tpu_tensor x = counting(TPU_S16, 2, d23, 0);
  CHECK(run("HloModule m\nENTRY e {\n p = s16[2,3] parameter(0)\n ROOT b = s16[2,4,3] broadcast(p), dimensions={0,2}\n}\n",
            &x, 1, &out));
  bad = 0;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++)
      for (int k = 0; k < 3; k++) bad += at(&out, (i * 4 + j) * 3 + k) != i * 3 + k;
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  tpu_tensor_free(&x);
  free_all(in, 2);
}

static void test_transpose_reshape(void) {
  int64_t dims[3] = {2, 3, 4};
  tpu_tensor x = counting(TPU_S32, 3, dims, 0);
  tpu_tensor out;
  /* out dim i = operand dim dimensions[i]: out[a,b,c] = x[b,c,a]. */
  CHECK(run("HloModule m\nENTRY e {\n p = s32[2,3,4] parameter(0)\n ROOT t = s32[4,2,3] transpose(p), dimensions={2,0,1}\n}\n",
            &x, 1, &out));
  int bad = 0;
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 2; b++)
      for (int c = 0; c < 3; c++) bad += at(&out, (a * 2 + b) * 3 + c) != (b * 3 + c) * 4 + a;
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(out.dims[0], 4);
  tpu_tensor_free(&out);
  /* Reshape, bitcast and copy keep the row-major sequence. */
  const char *progs[3] = {
      "HloModule m\nENTRY e {\n p = s32[2,3,4] parameter(0)\n ROOT r = s32[6,4] reshape(p)\n}\n",
      "HloModule m\nENTRY e {\n p = s32[2,3,4] parameter(0)\n ROOT r = s32[24] bitcast(p)\n}\n",
      "HloModule m\nENTRY e {\n p = s32[2,3,4] parameter(0)\n ROOT r = s32[2,3,4] copy(p)\n}\n",
  };
  for (int k = 0; k < 3; k++) {
    CHECK(run(progs[k], &x, 1, &out));
    bad = 0;
    for (int i = 0; i < 24; i++) bad += at(&out, i) != i;
    CHECK_EQ_INT(bad, 0);
    tpu_tensor_free(&out);
  }
  tpu_tensor_free(&x);
  /* A larger f32 transpose against the index formula (exercises the strided path). */
  int64_t big[2] = {37, 53};
  tpu_tensor y = counting(TPU_F32, 2, big, 0);
  CHECK(run("HloModule m\nENTRY e {\n p = f32[37,53] parameter(0)\n ROOT t = f32[53,37] transpose(p), dimensions={1,0}\n}\n",
            &y, 1, &out));
  bad = 0;
  for (int i = 0; i < 53; i++)
    for (int j = 0; j < 37; j++) bad += tpu_tensor_get_f64(&out, i * 37 + j) != (double)(j * 53 + i);
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  tpu_tensor_free(&y);
  /* Rank 4, one element size after another (the tiled transpose path with batch dims around
   * the two it tiles): out[a,d,c,b] = x[a,b,c,d]. */
  int64_t d4[4] = {3, 20, 5, 19};
  const char *ts[4] = {"u8", "s16", "s32", "s64"};
  tpu_dtype tt[4] = {TPU_U8, TPU_S16, TPU_S32, TPU_S64};
  for (int k = 0; k < 4; k++) {
    tpu_tensor z = counting(tt[k], 4, d4, 0);
    char prog[256];
    snprintf(prog, sizeof prog,
             "HloModule m\nENTRY e {\n p = %s[3,20,5,19] parameter(0)\n ROOT t = %s[3,19,5,20] transpose(p), "
             "dimensions={0,3,2,1}\n}\n",
             ts[k], ts[k]);
    CHECK(run(prog, &z, 1, &out));
    bad = 0;
    for (int a = 0; a < 3; a++)
      for (int dd = 0; dd < 19; dd++)
        for (int c = 0; c < 5; c++)
          for (int b = 0; b < 20; b++) {
            int64_t want = ((a * 20 + b) * 5 + c) * 19 + dd;
            if (tt[k] == TPU_U8) want &= 255;
            bad += at(&out, ((a * 19 + dd) * 5 + c) * 20 + b) != want;
          }
    CHECK_EQ_INT(bad, 0);
    tpu_tensor_free(&out);
    tpu_tensor_free(&z);
  }
}

static void test_slice(void) {
  int64_t dims[2] = {6, 5};
  tpu_tensor x = counting(TPU_S64, 2, dims, 100);
  tpu_tensor out;
  CHECK(run("HloModule m\nENTRY e {\n p = s64[6,5] parameter(0)\n ROOT s = s64[3,2] slice(p), slice={[1:6:2], [0:5:3]}\n}\n",
            &x, 1, &out));
  int64_t want[6] = {105, 108, 115, 118, 125, 128};
  int bad = 0;
  for (int i = 0; i < 6; i++) bad += at(&out, i) != want[i];
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  /* An empty slice is fine. */
  CHECK(run("HloModule m\nENTRY e {\n p = s64[6,5] parameter(0)\n ROOT s = s64[0,5] slice(p), slice={[2:2], [0:5]}\n}\n", &x,
            1, &out));
  CHECK_EQ_INT(tpu_tensor_numel(&out), 0);
  tpu_tensor_free(&out);
  tpu_tensor_free(&x);
}

static void test_dynamic_slice(void) {
  int64_t dims[2] = {5, 4};
  const char *ds = "HloModule m\nENTRY e {\n p = s32[5,4] parameter(0)\n i = %s[] parameter(1)\n j = %s[] parameter(2)\n"
                   " ROOT s = s32[3,2] dynamic-slice(p, i, j), dynamic_slice_sizes={3,2}\n}\n";
  struct {
    tpu_dtype t;
    const char *name;
    int64_t i, j, wi, wj; /* starts and the clamped starts XLA uses */
  } cases[] = {
      {TPU_S32, "s32", 1, 1, 1, 1},   {TPU_S32, "s32", 3, -2, 2, 0}, {TPU_S64, "s64", 100, 2, 2, 2},
      {TPU_U8, "u8", 255, 0, 2, 0},   {TPU_S8, "s8", -128, 3, 0, 2}, {TPU_U64, "u64", -1, 1, 2, 1},
      {TPU_U32, "u32", 0, 9, 0, 2},   {TPU_S16, "s16", 2, 2, 2, 2},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char src[400];
    snprintf(src, sizeof src, ds, cases[c].name, cases[c].name);
    tpu_tensor in[3] = {counting(TPU_S32, 2, dims, 0), scalar(cases[c].t, cases[c].i), scalar(cases[c].t, cases[c].j)};
    tpu_tensor out;
    CHECK(run(src, in, 3, &out));
    int bad = 0;
    for (int a = 0; a < 3; a++)
      for (int b = 0; b < 2; b++) bad += at(&out, a * 2 + b) != (cases[c].wi + a) * 4 + cases[c].wj + b;
    if (bad) fprintf(stderr, "dynamic-slice case %zu wrong\n", c);
    CHECK_EQ_INT(bad, 0);
    tpu_tensor_free(&out);
    free_all(in, 3);
  }
}

static void test_dynamic_update_slice(void) {
  int64_t dims[2] = {4, 5}, ud[2] = {2, 3};
  tpu_tensor in[4] = {counting(TPU_F32, 2, dims, 0), counting(TPU_F32, 2, ud, 100), scalar(TPU_S32, 3),
                      scalar(TPU_S32, -7)};
  tpu_tensor out;
  /* Start (3, -7) clamps to (2, 0). */
  CHECK(run("HloModule m\nENTRY e {\n p = f32[4,5] parameter(0)\n u = f32[2,3] parameter(1)\n i = s32[] parameter(2)\n"
            " j = s32[] parameter(3)\n ROOT s = f32[4,5] dynamic-update-slice(p, u, i, j)\n}\n",
            in, 4, &out));
  int bad = 0;
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 5; b++) {
      double want = (a >= 2 && b < 3) ? 100 + (a - 2) * 3 + b : a * 5 + b;
      bad += tpu_tensor_get_f64(&out, a * 5 + b) != want;
    }
  CHECK_EQ_INT(bad, 0);
  /* The operand is not modified. */
  CHECK_EQ_INT((int)tpu_tensor_get_f64(&in[0], 10), 10);
  tpu_tensor_free(&out);
  free_all(in, 4);
}

static void test_concatenate(void) {
  int64_t a[2] = {2, 1}, b[2] = {2, 0}, c[2] = {2, 3};
  tpu_tensor in[3] = {counting(TPU_U16, 2, a, 10), counting(TPU_U16, 2, b, 0), counting(TPU_U16, 2, c, 20)};
  tpu_tensor out;
  CHECK(run("HloModule m\nENTRY e {\n a = u16[2,1] parameter(0)\n b = u16[2,0] parameter(1)\n c = u16[2,3] parameter(2)\n"
            " ROOT r = u16[2,4] concatenate(a, b, c), dimensions={1}\n}\n",
            in, 3, &out));
  int64_t want[8] = {10, 20, 21, 22, 11, 23, 24, 25};
  int bad = 0;
  for (int i = 0; i < 8; i++) bad += at(&out, i) != want[i];
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  free_all(in, 3);
}

static void test_pad(void) {
  int64_t d3[1] = {3};
  tpu_tensor in[2] = {counting(TPU_S32, 1, d3, 1), scalar(TPU_S32, -9)};
  tpu_tensor out;
  /* Interior 1 gives [1,p,2,p,3]; low -1 crops the 1; high 2 appends two p. */
  CHECK(run("HloModule m\nENTRY e {\n x = s32[3] parameter(0)\n v = s32[] parameter(1)\n"
            " ROOT r = s32[6] pad(x, v), padding=-1_2_1\n}\n",
            in, 2, &out));
  int64_t w1[6] = {-9, 2, -9, 3, -9, -9};
  int bad = 0;
  for (int i = 0; i < 6; i++) bad += at(&out, i) != w1[i];
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  /* Negative high crops from the end, interior included: [1,p,p,2,p,p,3] minus 2 -> 5. */
  CHECK(run("HloModule m\nENTRY e {\n x = s32[3] parameter(0)\n v = s32[] parameter(1)\n"
            " ROOT r = s32[5] pad(x, v), padding=0_-2_2\n}\n",
            in, 2, &out));
  int64_t w2[5] = {1, -9, -9, 2, -9};
  bad = 0;
  for (int i = 0; i < 5; i++) bad += at(&out, i) != w2[i];
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  free_all(in, 2);
  /* 2-d: dim 0 low 1, high -1; dim 1 low 0, high 1, interior 2. */
  int64_t d22[2] = {2, 2};
  tpu_tensor in2[2] = {counting(TPU_F32, 2, d22, 1), scalar(TPU_F32, 0)};
  CHECK(run("HloModule m\nENTRY e {\n x = f32[2,2] parameter(0)\n v = f32[] parameter(1)\n"
            " ROOT r = f32[2,5] pad(x, v), padding=1_-1x0_1_2\n}\n",
            in2, 2, &out));
  double w3[10] = {0, 0, 0, 0, 0, 1, 0, 0, 2, 0};
  bad = 0;
  for (int i = 0; i < 10; i++) bad += tpu_tensor_get_f64(&out, i) != w3[i];
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  /* Cropping everything leaves only padding. */
  CHECK(run("HloModule m\nENTRY e {\n x = f32[2,2] parameter(0)\n v = f32[] parameter(1)\n"
            " ROOT r = f32[1,2] pad(x, v), padding=-3_2x0_0\n}\n",
            in2, 2, &out));
  CHECK(tpu_tensor_get_f64(&out, 0) == 0 && tpu_tensor_get_f64(&out, 1) == 0);
  tpu_tensor_free(&out);
  free_all(in2, 2);
}

static void test_reverse(void) {
  int64_t dims[3] = {2, 3, 4};
  tpu_tensor x = counting(TPU_S8, 3, dims, 0);
  tpu_tensor out;
  CHECK(run("HloModule m\nENTRY e {\n p = s8[2,3,4] parameter(0)\n ROOT r = s8[2,3,4] reverse(p), dimensions={0,2}\n}\n", &x,
            1, &out));
  int bad = 0;
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 4; c++) bad += at(&out, (a * 3 + b) * 4 + c) != ((1 - a) * 3 + b) * 4 + (3 - c);
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  tpu_tensor_free(&x);
}

static void test_iota(void) {
  tpu_tensor out;
  CHECK(run("HloModule m\nENTRY e {\n ROOT r = s32[2,3] iota(), iota_dimension=1\n}\n", NULL, 0, &out));
  int64_t w[6] = {0, 1, 2, 0, 1, 2};
  int bad = 0;
  for (int i = 0; i < 6; i++) bad += at(&out, i) != w[i];
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  CHECK(run("HloModule m\nENTRY e {\n ROOT r = f32[3,2] iota(), iota_dimension=0\n}\n", NULL, 0, &out));
  double wf[6] = {0, 0, 1, 1, 2, 2};
  bad = 0;
  for (int i = 0; i < 6; i++) bad += tpu_tensor_get_f64(&out, i) != wf[i];
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  /* bf16 has 8 significant bits: above 256 counts round to nearest even. */
  CHECK(run("HloModule m\nENTRY e {\n ROOT r = bf16[300] iota(), iota_dimension=0\n}\n", NULL, 0, &out));
  CHECK_EQ_INT(out.dtype, TPU_BF16);
  CHECK(tpu_tensor_get_f64(&out, 255) == 255.0);
  CHECK(tpu_tensor_get_f64(&out, 257) == 256.0);
  CHECK(tpu_tensor_get_f64(&out, 258) == 258.0);
  CHECK(tpu_tensor_get_f64(&out, 259) == 260.0);
  CHECK(tpu_tensor_get_f64(&out, 299) == 300.0);
  tpu_tensor_free(&out);
  /* f16 spacing is 2 from 2048: 2049 ties to even (2048), 2051 to 2052. */
  CHECK(run("HloModule m\nENTRY e {\n ROOT r = f16[2100] iota(), iota_dimension=0\n}\n", NULL, 0, &out));
  CHECK(tpu_tensor_get_f64(&out, 2049) == 2048.0);
  CHECK(tpu_tensor_get_f64(&out, 2051) == 2052.0);
  tpu_tensor_free(&out);
  /* Narrow integers wrap. */
  CHECK(run("HloModule m\nENTRY e {\n ROOT r = u8[300] iota(), iota_dimension=0\n}\n", NULL, 0, &out));
  CHECK_EQ_INT(at(&out, 299), 299 - 256);
  tpu_tensor_free(&out);
}

/* Runs `src` expecting an error whose message contains `want`. */
static void check_error(const char *src, const tpu_tensor *args, int nargs, const char *want) {
  tpu_module *m = NULL;
  tpu_diag d;
  tpu_tensor out;
  tpu_status st = tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d);
  if (st == TPU_OK) st = tpu_ir_verify(m, &d);
  if (st == TPU_OK) st = tpu_ref_run(m, args, nargs, &out, &d);
  CHECK(st != TPU_OK);
  if (st == TPU_OK) tpu_tensor_free(&out);
  else if (!strstr(d.msg, want)) {
    fprintf(stderr, "unexpected message: %s\n", d.msg);
    CHECK(0);
  }
  tpu_module_free(m);
}

/* bitcast reads the operand's buffer by both layouts: a layout-changing bitcast is a
 * transpose (XLA's optimized HLO writes transposes this way), tiles reorder elements. */
static void test_bitcast_layouts(void) {
  tpu_tensor out;
  /* The equinox GRU case: f32[20,4,8]{2,0,1} bitcast(f32[4,20,8]{2,1,0}) is out[i,j,k] = x[j,i,k]. */
  int64_t d3[3] = {4, 20, 8};
  tpu_tensor x = counting(TPU_F32, 3, d3, 0);
  CHECK(run("HloModule m\nENTRY e {\n p = f32[4,20,8]{2,1,0} parameter(0)\n"
            " ROOT b = f32[20,4,8]{2,0,1} bitcast(p)\n}\n", &x, 1, &out));
  int bad = 0;
  for (int i = 0; i < 20; i++)
    for (int j = 0; j < 4; j++)
      for (int k = 0; k < 8; k++) bad += at(&out, (i * 4 + j) * 8 + k) != (j * 20 + i) * 8 + k;
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  /* Default layout on one side, column-major on the other: a 2-d transpose. */
  int64_t d2[2] = {3, 5};
  tpu_tensor y = counting(TPU_S32, 2, d2, 0);
  CHECK(run("HloModule m\nENTRY e {\n p = s32[3,5] parameter(0)\n ROOT b = s32[5,3]{0,1} bitcast(p)\n}\n", &y, 1,
            &out));
  bad = 0;
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 3; j++) bad += at(&out, i * 3 + j) != (int64_t)j * 5 + i;
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  /* Same physical order, other dims: still a row-major reshape ({0,1} both ways). */
  CHECK(run("HloModule m\nENTRY e {\n p = s32[3,5]{0,1} parameter(0)\n ROOT b = s32[15]{0} bitcast(p)\n}\n", &y, 1,
            &out));
  bad = 0; /* physical order of a column-major [3,5]: element (i,j) at j*3+i */
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 5; j++) bad += at(&out, j * 3 + i) != (int64_t)i * 5 + j;
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  /* Tiles: f32[8,256]{1,0:T(8,128)} stores two 8x128 tiles one after the other. */
  int64_t dt[2] = {8, 256};
  tpu_tensor z = counting(TPU_F32, 2, dt, 0);
  CHECK(run("HloModule m\nENTRY e {\n p = f32[8,256]{1,0:T(8,128)} parameter(0)\n"
            " ROOT b = f32[2048]{0} bitcast(p)\n}\n", &z, 1, &out));
  bad = 0;
  for (int t = 0; t < 2; t++)
    for (int r = 0; r < 8; r++)
      for (int c = 0; c < 128; c++) bad += at(&out, t * 1024 + r * 128 + c) != (int64_t)r * 256 + t * 128 + c;
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  /* A tile that spans whole rows keeps the row-major order; so does S(1). */
  CHECK(run("HloModule m\nENTRY e {\n p = f32[8,256]{1,0:T(4,256)S(1)} parameter(0)\n"
            " ROOT b = f32[2048]{0:T(1024)} bitcast(p)\n}\n", &z, 1, &out));
  bad = 0;
  for (int i = 0; i < 2048; i++) bad += at(&out, i) != i;
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  /* Two levels: bf16 (16,128)(2,1) pairs rows 2i and 2i+1 in each 32-bit word. */
  int64_t db[2] = {16, 128};
  tpu_tensor w = counting(TPU_S16, 2, db, 0);
  CHECK(run("HloModule m\nENTRY e {\n p = s16[16,128]{1,0:T(16,128)(2,1)} parameter(0)\n"
            " ROOT b = s16[2048]{0} bitcast(p)\n}\n", &w, 1, &out));
  bad = 0;
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 128; c++) bad += at(&out, ((r / 2) * 128 + c) * 2 + r % 2) != (int64_t)r * 128 + c;
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  /* A bitcast that would read a tile's padding, a size mismatch, an unmodelled tail. */
  int64_t dp[2] = {4, 128};
  tpu_tensor v = counting(TPU_F32, 2, dp, 0);
  int64_t dq[2] = {4, 256};
  tpu_tensor q = counting(TPU_F32, 2, dq, 0);
  check_error("HloModule m\nENTRY e {\n p = f32[4,256]{1,0:T(8,128)} parameter(0)\n"
              " ROOT b = f32[1024]{0:T(2048)} bitcast(p)\n}\n", &q, 1, "reads padding");
  tpu_tensor_free(&q);
  check_error("HloModule m\nENTRY e {\n p = f32[4,128]{1,0:T(8,128)} parameter(0)\n"
              " ROOT b = f32[512]{0:T(256)} bitcast(p)\n}\n", &v, 1, "holds 512 elements in its layout but the operand's 1024");
  /* A result without padding that spans the whole tiled buffer (the TPU compiler's view of a
   * buffer to send it; ZeroCrop's) reads the padding as zeros: f32[4,32] in (8,128) tiles is
   * one 8x128 tile, rows 0-3 columns 0-31 the operand's. */
  int64_t dz[2] = {4, 32};
  tpu_tensor zc = counting(TPU_F32, 2, dz, 0);
  const char *whole[2] = {"bitcast(p)", "custom-call(p), custom_call_target=\"ZeroCrop\""};
  for (int v2 = 0; v2 < 2; v2++) {
    char src[256];
    snprintf(src, sizeof src, "HloModule m\nENTRY e {\n p = f32[4,32]{1,0:T(8,128)} parameter(0)\n"
             " ROOT b = f32[8,128]{1,0:T(8,128)} %s\n}\n", whole[v2]);
    CHECK(run(src, &zc, 1, &out));
    bad = 0;
    for (int r = 0; r < 8; r++)
      for (int c = 0; c < 128; c++) bad += at(&out, r * 128 + c) != (r < 4 && c < 32 ? r * 32 + c : 0);
    CHECK_EQ_INT(bad, 0);
    tpu_tensor_free(&out);
  }
  tpu_tensor_free(&zc);
  check_error("HloModule m\nENTRY e {\n p = f32[4,128]{1,0:T(8,*)} parameter(0)\n"
              " ROOT b = f32[128,4]{0,1} bitcast(p)\n}\n", &v, 1, "'*' tiles are not modelled");
  tpu_tensor_free(&x);
  tpu_tensor_free(&y);
  tpu_tensor_free(&z);
  tpu_tensor_free(&w);
  tpu_tensor_free(&v);
}

/* XLA TPU's forms: copy between floating types rounds to nearest even (1 + 2^-8 is a tie:
 * it rounds to 1, 1 + 3*2^-8 up to 1 + 2^-6); copy-start/copy-done hand over a copy. */
static void test_tpu_copies(void) {
  const double v[3] = {1.0 + 1.0 / 256, 1.0 + 3.0 / 256, -2.5};
  int64_t dims[1] = {3};
  tpu_tensor x = mk(TPU_F32, 1, dims, v), out;
  CHECK(run("HloModule m\nENTRY e {\n p = f32[3] parameter(0)\n ROOT c = bf16[3]{0:T(128)(2,1)S(1)} copy(p)\n}\n", &x, 1,
            &out));
  if (out.data) {
    CHECK(out.dtype == TPU_BF16);
    CHECK(tpu_tensor_get_f64(&out, 0) == 1.0 && tpu_tensor_get_f64(&out, 1) == 1.0 + 4.0 / 256 &&
          tpu_tensor_get_f64(&out, 2) == -2.5);
  }
  tpu_tensor_free(&out);
  CHECK(run("HloModule m\nENTRY e {\n p = f32[3] parameter(0)\n"
            " s = (f32[3]{0:S(1)}, f32[3], u32[]{:S(2)}) copy-start(p), cross_program_prefetch_index=0\n"
            " ROOT d = f32[3]{0:S(1)} copy-done(s)\n}\n",
            &x, 1, &out));
  if (out.data) CHECK(memcmp(out.data, x.data, x.nbytes) == 0);
  tpu_tensor_free(&out);
  /* copy does not convert integers (only floating types round). */
  tpu_module *m = NULL;
  tpu_diag d;
  const char *bad = "HloModule m\nENTRY e {\n p = s32[3] parameter(0)\n ROOT c = f32[3] copy(p)\n}\n";
  tpu_status st = tpu_hlo_parse("t.hlo", bad, strlen(bad), &m, &d);
  if (st == TPU_OK) st = tpu_ir_verify(m, &d);
  CHECK(st != TPU_OK);
  tpu_module_free(m);
  tpu_tensor_free(&x);
}

int main(void) {
  test_broadcast();
  test_bitcast_layouts();
  test_tpu_copies();
  test_transpose_reshape();
  test_slice();
  test_dynamic_slice();
  test_dynamic_update_slice();
  test_concatenate();
  test_pad();
  test_reverse();
  test_iota();
  CHECK_DONE();
}
