/* Gather and scatter on the reference interpreter: XLA's dimension numbers (offset,
 * collapsed/inserted, batching, index_vector_dim anywhere or implicit), start clamping for
 * gather, out-of-bounds windows skipped for scatter, update order, variadic scatter. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "ref_util.h"
#include "hlo/hlo.h"
#include "ref/ref.h"

/* An array of the given values (or i + base when vals is NULL). */
static tpu_tensor arr(tpu_dtype t, int rank, const int64_t *dims, const int64_t *vals, int64_t base) {
  tpu_tensor x;
  tpu_diag d;
  if (tpu_tensor_alloc(&x, t, rank, dims, &d) != TPU_OK) exit(1);
  int64_t n = tpu_tensor_numel(&x);
  for (int64_t i = 0; i < n; i++) tpu_tensor_set_i64(&x, i, vals ? vals[i] : i + base);
  return x;
}

static int64_t at(const tpu_tensor *t, int64_t i) { return tpu_tensor_get_i64(t, i); }

static void free_all(tpu_tensor *ts, int n) {
  for (int i = 0; i < n; i++) tpu_tensor_free(&ts[i]);
}

/* Row lookup with clamped indices, with an explicit and an implicit index vector dim. */
static void test_gather_rows(void) {
  int64_t td[2] = {5, 3}, id[2] = {4, 1}, id1[1] = {4};
  int64_t ids[4] = {2, 7, -1, 4}, rows[4] = {2, 4, 0, 4}; /* 7 clamps to 4, -1 to 0 */
  tpu_tensor in[2] = {arr(TPU_F32, 2, td, NULL, 0), arr(TPU_S32, 2, id, ids, 0)};
  tpu_tensor out;
  CHECK(run("HloModule m\nENTRY e {\n t = f32[5,3] parameter(0)\n i = s32[4,1] parameter(1)\n"
            " ROOT g = f32[4,3] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0},"
            " index_vector_dim=1, slice_sizes={1,3}\n}\n",
            in, 2, &out));
  int bad = 0;
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 3; c++) bad += tpu_tensor_get_f64(&out, r * 3 + c) != rows[r] * 3 + c;
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  tpu_tensor_free(&in[1]);
  in[1] = arr(TPU_S64, 1, id1, ids, 0);
  CHECK(run("HloModule m\nENTRY e {\n t = f32[5,3] parameter(0)\n i = s64[4] parameter(1)\n"
            " ROOT g = f32[4,3] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0},"
            " index_vector_dim=1, slice_sizes={1,3}\n}\n",
            in, 2, &out));
  bad = 0;
  for (int r = 0; r < 4; r++)
    for (int c = 0; c < 3; c++) bad += tpu_tensor_get_f64(&out, r * 3 + c) != rows[r] * 3 + c;
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  free_all(in, 2);
}

/* 2-d windows with 2-d starts; the second start clamps so the window stays inside. */
static void test_gather_windows(void) {
  int64_t xd[2] = {4, 5}, id[2] = {2, 2}, iv[4] = {1, 2, 3, 4};
  tpu_tensor in[2] = {arr(TPU_S32, 2, xd, NULL, 0), arr(TPU_S32, 2, id, iv, 0)};
  tpu_tensor out;
  CHECK(run("HloModule m\nENTRY e {\n x = s32[4,5] parameter(0)\n i = s32[2,2] parameter(1)\n"
            " ROOT g = s32[2,2,2] gather(x, i), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0,1},"
            " index_vector_dim=1, slice_sizes={2,2}\n}\n",
            in, 2, &out));
  int64_t s[2][2] = {{1, 2}, {2, 3}}; /* (3,4) clamps to (4-2, 5-2) */
  int bad = 0;
  for (int b = 0; b < 2; b++)
    for (int u = 0; u < 2; u++)
      for (int v = 0; v < 2; v++) bad += at(&out, (b * 2 + u) * 2 + v) != (s[b][0] + u) * 5 + s[b][1] + v;
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  free_all(in, 2);
}

/* index_vector_dim = 0 and a start_index_map that swaps the components. */
static void test_gather_index_dim0(void) {
  int64_t xd[2] = {4, 5}, id[2] = {2, 3};
  int64_t iv[6] = {0, 4, 2, /* -> operand dim 1 */ 3, 1, 0 /* -> operand dim 0 */};
  tpu_tensor in[2] = {arr(TPU_S32, 2, xd, NULL, 0), arr(TPU_U8, 2, id, iv, 0)};
  tpu_tensor out;
  CHECK(run("HloModule m\nENTRY e {\n x = s32[4,5] parameter(0)\n i = u8[2,3] parameter(1)\n"
            " ROOT g = s32[3] gather(x, i), offset_dims={}, collapsed_slice_dims={0,1}, start_index_map={1,0},"
            " index_vector_dim=0, slice_sizes={1,1}\n}\n",
            in, 2, &out));
  int bad = 0;
  for (int b = 0; b < 3; b++) bad += at(&out, b) != iv[3 + b] * 5 + iv[b];
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  free_all(in, 2);
}

/* Batching dims (take_along_axis) and an offset dim ahead of the batch dim. */
static void test_gather_batching(void) {
  int64_t xd[2] = {5, 6}, id[3] = {3, 6, 1};
  int64_t iv[18] = {0, 1, 2, 3, 4, 0, 4, 3, 2, 1, 0, 4, 1, 1, 1, 9, -3, 2};
  tpu_tensor in[2] = {arr(TPU_F32, 2, xd, NULL, 0), arr(TPU_S32, 3, id, iv, 0)};
  tpu_tensor out;
  CHECK(run("HloModule m\nENTRY e {\n x = f32[5,6] parameter(0)\n i = s32[3,6,1] parameter(1)\n"
            " ROOT g = f32[3,6] gather(x, i), offset_dims={}, collapsed_slice_dims={0}, start_index_map={0},"
            " operand_batching_dims={1}, start_indices_batching_dims={1}, index_vector_dim=2, slice_sizes={1,1}\n}\n",
            in, 2, &out));
  int bad = 0;
  for (int r = 0; r < 3; r++)
    for (int j = 0; j < 6; j++) {
      int64_t row = iv[r * 6 + j] < 0 ? 0 : iv[r * 6 + j] > 4 ? 4 : iv[r * 6 + j];
      bad += tpu_tensor_get_f64(&out, r * 6 + j) != row * 6 + j;
    }
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  tpu_tensor_free(&in[1]);
  /* Column take: out[a, b] = x[a, idx[b]] (offset dim 0, batch dim 1). */
  int64_t cd[2] = {5, 1}, cv[5] = {5, 0, 3, 1, 2};
  in[1] = arr(TPU_S32, 2, cd, cv, 0);
  CHECK(run("HloModule m\nENTRY e {\n x = f32[5,6] parameter(0)\n i = s32[5,1] parameter(1)\n"
            " ROOT g = f32[5,5] gather(x, i), offset_dims={0}, collapsed_slice_dims={1}, start_index_map={1},"
            " index_vector_dim=1, slice_sizes={5,1}\n}\n",
            in, 2, &out));
  bad = 0;
  for (int a = 0; a < 5; a++)
    for (int b = 0; b < 5; b++) bad += tpu_tensor_get_f64(&out, a * 5 + b) != a * 6 + cv[b];
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  free_all(in, 2);
}

static const char *scatter_prog(char *buf, size_t n, const char *region_root, const char *idx_type, const char *upd_shape,
                                const char *dims) {
  snprintf(buf, n,
           "HloModule m\nr {\n a = f32[] parameter(0)\n %s\n}\n"
           "ENTRY e {\n x = f32[5,3] parameter(0)\n i = %s parameter(1)\n u = %s parameter(2)\n"
           " ROOT s = f32[5,3] scatter(x, i, u), %s, to_apply=r\n}\n",
           region_root, idx_type, upd_shape, dims);
  return buf;
}

/* Row updates: set, add with duplicates (in index order), non-commutative combiner
 * through the generic call path, and out-of-bounds rows skipped. */
static void test_scatter_rows(void) {
  int64_t xd[2] = {5, 3}, id[2] = {4, 1}, ud[2] = {4, 3};
  int64_t iv[4] = {3, 1, 3, 5}; /* 3 twice; 5 is out of bounds */
  tpu_tensor in[3] = {arr(TPU_F32, 2, xd, NULL, 0), arr(TPU_S32, 2, id, iv, 0), arr(TPU_F32, 2, ud, NULL, 100)};
  const char *dims = "update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1";
  char src[800];
  tpu_tensor out;
  /* set: the later duplicate wins. */
  CHECK(run(scatter_prog(src, sizeof src, "ROOT b = f32[] parameter(1)", "s32[4,1]", "f32[4,3]", dims), in, 3, &out));
  int bad = 0;
  for (int r = 0; r < 5; r++)
    for (int c = 0; c < 3; c++) {
      double want = r == 3 ? 100 + 2 * 3 + c : r == 1 ? 100 + 3 + c : r * 3 + c;
      bad += tpu_tensor_get_f64(&out, r * 3 + c) != want;
    }
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  /* add: both duplicates accumulate. */
  CHECK(run(scatter_prog(src, sizeof src, "b = f32[] parameter(1)\n ROOT c = f32[] add(a, b)", "s32[4,1]", "f32[4,3]", dims), in, 3, &out));
  bad = 0;
  for (int r = 0; r < 5; r++)
    for (int c = 0; c < 3; c++) {
      double want = r * 3 + c;
      if (r == 3) want += (100 + c) + (100 + 6 + c);
      if (r == 1) want += 100 + 3 + c;
      bad += tpu_tensor_get_f64(&out, r * 3 + c) != want;
    }
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  /* subtract(operand, update): parameter 0 is the current value, parameter 1 the update. */
  CHECK(run(scatter_prog(src, sizeof src, "b = f32[] parameter(1)\n ROOT c = f32[] subtract(a, b)", "s32[4,1]", "f32[4,3]", dims), in, 3, &out));
  bad = 0;
  for (int c = 0; c < 3; c++) bad += tpu_tensor_get_f64(&out, 3 * 3 + c) != (9 + c) - (100 + c) - (106 + c);
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  free_all(in, 3);
}

/* A whole window that would stick out is skipped, not clamped; implicit index vector. */
static void test_scatter_window_bounds(void) {
  int64_t xd[2] = {5, 3}, id[1] = {3}, ud[3] = {3, 2, 3};
  int64_t iv[3] = {3, 4, -1}; /* rows 3-4 fit; 4-5 and -1-0 do not */
  tpu_tensor in[3] = {arr(TPU_F32, 2, xd, NULL, 0), arr(TPU_S32, 1, id, iv, 0), arr(TPU_F32, 3, ud, NULL, 100)};
  char src[800];
  tpu_tensor out;
  CHECK(run(scatter_prog(src, sizeof src, "b = f32[] parameter(1)\n ROOT c = f32[] add(a, b)", "s32[3]", "f32[3,2,3]",
                         "update_window_dims={1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={0}, "
                         "index_vector_dim=1"),
            in, 3, &out));
  int bad = 0;
  for (int r = 0; r < 5; r++)
    for (int c = 0; c < 3; c++) {
      double want = r * 3 + c + (r >= 3 ? 100 + (r - 3) * 3 + c : 0);
      bad += tpu_tensor_get_f64(&out, r * 3 + c) != want;
    }
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  free_all(in, 3);
}

/* Batching dims: out[i, idx[i]] = max(out, upd[i]) for each batch row i. */
static void test_scatter_batching(void) {
  int64_t xd[2] = {3, 4}, id[2] = {3, 1}, ud[1] = {3};
  int64_t iv[3] = {2, 0, 3}, uv[3] = {50, -5, 70};
  tpu_tensor in[3] = {arr(TPU_S32, 2, xd, NULL, 0), arr(TPU_S32, 2, id, iv, 0), arr(TPU_S32, 1, ud, uv, 0)};
  tpu_tensor out;
  CHECK(run("HloModule m\nr {\n a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT c = s32[] maximum(a, b)\n}\n"
            "ENTRY e {\n x = s32[3,4] parameter(0)\n i = s32[3,1] parameter(1)\n u = s32[3] parameter(2)\n"
            " ROOT s = s32[3,4] scatter(x, i, u), update_window_dims={}, inserted_window_dims={1},"
            " input_batching_dims={0}, scatter_indices_batching_dims={0}, scatter_dims_to_operand_dims={1},"
            " index_vector_dim=1, to_apply=r\n}\n",
            in, 3, &out));
  int bad = 0;
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 4; c++) {
      int64_t want = r * 4 + c;
      if (c == iv[r] && uv[r] > want) want = uv[r];
      bad += at(&out, r * 4 + c) != want;
    }
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  free_all(in, 3);
}

/* Two operands, two updates, a tuple-valued combiner; and a pure tuple "set". */
static void test_scatter_variadic(void) {
  int64_t xd[1] = {4}, id[2] = {3, 1}, ud[1] = {3};
  int64_t iv[3] = {1, 3, 1};
  tpu_tensor in[5] = {arr(TPU_F32, 1, xd, NULL, 0), arr(TPU_S32, 1, xd, NULL, 10), arr(TPU_S32, 2, id, iv, 0),
                      arr(TPU_F32, 1, ud, NULL, 100), arr(TPU_S32, 1, ud, NULL, 200)};
  tpu_tensor out;
  const char *prog =
      "HloModule m\nr {\n a = f32[] parameter(0)\n b = s32[] parameter(1)\n c = f32[] parameter(2)\n"
      " d = s32[] parameter(3)\n %s\n}\n"
      "ENTRY e {\n x = f32[4] parameter(0)\n y = s32[4] parameter(1)\n i = s32[3,1] parameter(2)\n"
      " u = f32[3] parameter(3)\n v = s32[3] parameter(4)\n"
      " ROOT s = (f32[4], s32[4]) scatter(x, y, i, u, v), update_window_dims={}, inserted_window_dims={0},"
      " scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=r\n}\n";
  char src[1200];
  snprintf(src, sizeof src, prog, "s = f32[] add(a, c)\n t = s32[] multiply(b, d)\n ROOT r = (f32[], s32[]) tuple(s, t)");
  CHECK(run(src, in, 5, &out));
  CHECK_EQ_INT(out.ntuple, 2);
  if (out.ntuple == 2) {
    double wf[4] = {0, 1 + 100 + 102, 2, 3 + 101};
    int64_t wi[4] = {10, 11 * 200 * 202, 12, 13 * 201};
    int bad = 0;
    for (int k = 0; k < 4; k++) bad += tpu_tensor_get_f64(&out.elems[0], k) != wf[k] || at(&out.elems[1], k) != wi[k];
    CHECK_EQ_INT(bad, 0);
  }
  tpu_tensor_free(&out);
  snprintf(src, sizeof src, prog, "ROOT r = (f32[], s32[]) tuple(c, d)");
  CHECK(run(src, in, 5, &out));
  if (out.ntuple == 2) {
    CHECK(tpu_tensor_get_f64(&out.elems[0], 1) == 102 && at(&out.elems[1], 1) == 202);
    CHECK(tpu_tensor_get_f64(&out.elems[0], 3) == 101 && at(&out.elems[1], 3) == 201);
    CHECK(tpu_tensor_get_f64(&out.elems[0], 0) == 0 && at(&out.elems[1], 2) == 12);
  }
  tpu_tensor_free(&out);
  free_all(in, 5);
}

/* Out of memory at every allocation of a run (the generic combiner path included): each
 * failure is reported as NOMEM and leaves the result empty; ASan checks nothing leaks. */
static void test_out_of_memory(void) {
  int64_t xd[1] = {4}, id[2] = {3, 1}, ud[1] = {3}, iv[3] = {1, 3, 1};
  tpu_tensor in[5] = {arr(TPU_F32, 1, xd, NULL, 0), arr(TPU_S32, 1, xd, NULL, 10), arr(TPU_S32, 2, id, iv, 0),
                      arr(TPU_F32, 1, ud, NULL, 100), arr(TPU_S32, 1, ud, NULL, 200)};
  const char *src =
      "HloModule m\nr {\n a = f32[] parameter(0)\n b = s32[] parameter(1)\n c = f32[] parameter(2)\n"
      " d = s32[] parameter(3)\n s = f32[] add(a, c)\n t = s32[] multiply(b, d)\n ROOT r = (f32[], s32[]) tuple(s, t)\n}\n"
      "ENTRY e {\n x = f32[4] parameter(0)\n y = s32[4] parameter(1)\n i = s32[3,1] parameter(2)\n"
      " u = f32[3] parameter(3)\n v = s32[3] parameter(4)\n"
      " s = (f32[4], s32[4]) scatter(x, y, i, u, v), update_window_dims={}, inserted_window_dims={0},"
      " scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=r\n"
      " g = f32[3] gather(x, i), offset_dims={}, collapsed_slice_dims={0}, start_index_map={0},"
      " index_vector_dim=1, slice_sizes={1}\n"
      " ROOT t = ((f32[4], s32[4]), f32[3]) tuple(s, g)\n}\n";
  tpu_module *m = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse("oom.hlo", src, strlen(src), &m, &d) == TPU_OK);
  if (!m) return;
  int failures = 0, done = 0;
  for (long k = 1; k < 10000 && !done; k++) {
    tpu_tensor out;
    tpu_alloc_fail_after(k);
    tpu_status st = tpu_ref_run(m, in, 5, &out, &d);
    tpu_alloc_fail_after(0);
    if (st == TPU_OK) {
      done = 1;
      CHECK(tpu_tensor_get_f64(&out.elems[0].elems[0], 1) == 203.0);
      CHECK(tpu_tensor_get_f64(&out.elems[1], 2) == 1.0);
    } else {
      failures++;
      CHECK_EQ_INT(st, TPU_ERR_NOMEM);
      CHECK(out.data == NULL && out.elems == NULL);
    }
    tpu_tensor_free(&out);
  }
  CHECK(done);
  CHECK(failures > 5); /* the run allocates: each of those allocations was failed once */
  tpu_module_free(m);
  free_all(in, 5);
}

int main(void) {
  test_out_of_memory();
  test_gather_rows();
  test_gather_windows();
  test_gather_index_dim0();
  test_gather_batching();
  test_scatter_rows();
  test_scatter_window_bounds();
  test_scatter_batching();
  test_scatter_variadic();
  CHECK_DONE();
}
