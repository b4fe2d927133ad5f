/* The HLO passes' gather decisions (through tpu_compile_hlo), as the XLA TPU compiler
 * normalizes gathers (gather_index.c): the index clamp in a kernel of its own, point indices
 * packed, a gather of one index vector as a dynamic-slice, take_along_axis with its row
 * numbers in kernels of their own and its batch-minor indices relaid out. Moved from
 * test_passes_fusion.c, unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "util.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "ref/ref.h"
#include "compile/passes/hlo_passes.h"
#include "passes_util.h"

/* Do m0 (as parsed) and m1 (compiled) give the same bits on a table f32[dt] holding
 * i * step + base and indices s32[di] holding (i * k) % mod - off (negative ones wrap, large
 * ones clamp)? 0 when either fails to run. */
static int same_on(const tpu_module *m0, const tpu_module *m1, const int64_t dt[2], const int64_t di[2], double step,
                   double base, int k, int mod, int off) {
  tpu_diag d;
  tpu_tensor x[2], r0, r1;
  memset(x, 0, sizeof x);
  memset(&r0, 0, sizeof r0);
  memset(&r1, 0, sizeof r1);
  int ok = tpu_tensor_alloc(&x[0], TPU_F32, 2, dt, &d) == TPU_OK && tpu_tensor_alloc(&x[1], TPU_S32, 2, di, &d) == TPU_OK;
  if (ok) {
    for (int64_t i = 0; i < dt[0] * dt[1]; i++) tpu_tensor_set_f64(&x[0], i, (double)i * step + base);
    for (int64_t i = 0; i < di[0] * di[1]; i++) tpu_tensor_set_i64(&x[1], i, (i * k) % mod - off);
    ok = tpu_ref_run(m0, x, 2, &r0, &d) == TPU_OK && tpu_ref_run(m1, x, 2, &r1, &d) == TPU_OK && same_bits(&r0, &r1);
  }
  for (int j = 0; j < 2; j++) tpu_tensor_free(&x[j]);
  tpu_tensor_free(&r0);
  tpu_tensor_free(&r1);
  return ok;
}

/* A row gather's indices are clamped in a kernel of their own that takes none of the ops
 * computing them (gather_index.c; the compiler's pad_clamp_fusion): JAX's negative-index
 * wrap, the clamp, the gather. A gather of one index, and one of points (two start index
 * dimensions), have no such kernel. */
static int clamp_kernels(const char *src, int *kernels) {
  tpu_module *m = compile_src(src);
  *kernels = -1;
  if (!m) return -1;
  int n = 0, k = 0;
  for (int i = 0; i < m->entry->ninstrs; i++) {
    const tpu_instr *in = m->entry->instrs[i];
    if (in->op == TPU_OP_PARAMETER || in->op == TPU_OP_CONSTANT) continue;
    k++;
    n += in->op == TPU_OP_CLAMP && tpu__gather_index_kernel(in); /* a kernel alone, not fused */
  }
  tpu_module_free(m);
  *kernels = k;
  return n;
}

static void test_gather_index_kernel(void) {
  const char *rows =
      "HloModule rows\n\nENTRY %main (t: bf16[8192,128], i: s32[7]) -> bf16[7,128] {\n"
      "  %t = bf16[8192,128] parameter(0)\n  %i = s32[7] parameter(1)\n"
      "  %z = s32[] constant(0)\n  %zb = s32[7] broadcast(%z), dimensions={}\n"
      "  %lt = pred[7] compare(%i, %zb), direction=LT\n"
      "  %n = s32[] constant(8192)\n  %nb = s32[7] broadcast(%n), dimensions={}\n"
      "  %w = s32[7] add(%i, %nb)\n  %s = s32[7] select(%lt, %w, %i)\n"
      "  %ix = s32[7,1] reshape(%s)\n"
      "  ROOT %g = bf16[7,128] gather(%t, %ix), offset_dims={1}, collapsed_slice_dims={0}, "
      "start_index_map={0}, index_vector_dim=1, slice_sizes={1,128}\n}\n";
  const char *one =
      "HloModule one\n\nENTRY %main (t: bf16[8192,128], i: s32[1,1]) -> bf16[1,128] {\n"
      "  %t = bf16[8192,128] parameter(0)\n  %i = s32[1,1] parameter(1)\n"
      "  ROOT %g = bf16[1,128] gather(%t, %i), offset_dims={1}, collapsed_slice_dims={0}, "
      "start_index_map={0}, index_vector_dim=1, slice_sizes={1,128}\n}\n";
  const char *points =
      "HloModule points\n\nENTRY %main (t: f32[1000,128], i: s32[64,2]) -> f32[64] {\n"
      "  %t = f32[1000,128] parameter(0)\n  %i = s32[64,2] parameter(1)\n"
      "  ROOT %g = f32[64] gather(%t, %i), offset_dims={}, collapsed_slice_dims={0,1}, "
      "start_index_map={0,1}, index_vector_dim=1, slice_sizes={1,1}\n}\n";
  int kr, ko, kp;
  int cr = clamp_kernels(rows, &kr), co = clamp_kernels(one, &ko), cp = clamp_kernels(points, &kp);
  printf("gather index kernel: rows %d clamp of %d kernels, one index %d of %d, points %d of %d\n", cr, kr, co, ko, cp,
         kp);
  CHECK_EQ_INT(cr, 1);
  CHECK_EQ_INT(kr, 3); /* the index wrap, the clamp, the gather */
  CHECK_EQ_INT(co, 0);
  CHECK_EQ_INT(cp, 0);
  /* indices of rank 2 are left as they are for now (gather_index.c); the values of a
   * compiled program are the gather's, indices out of range included */
  const char *grid =
      "HloModule grid\n\nENTRY %main (t: f32[30,8], i: s32[4,5]) -> f32[4,5,8] {\n"
      "  %t = f32[30,8] parameter(0)\n  %i = s32[4,5] parameter(1)\n"
      "  ROOT %g = f32[4,5,8] gather(%t, %i), offset_dims={2}, collapsed_slice_dims={0}, "
      "start_index_map={0}, index_vector_dim=2, slice_sizes={1,8}\n}\n";
  int kg, cg = clamp_kernels(grid, &kg);
  CHECK_EQ_INT(cg, 0);
  tpu_module *m0 = NULL, *m1 = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse("grid.hlo", grid, strlen(grid), &m0, &d) == TPU_OK);
  CHECK(tpu_hlo_parse("grid.hlo", grid, strlen(grid), &m1, &d) == TPU_OK);
  tpu_compile_opts o = opts(NULL, NULL);
  if (m0 && m1 && tpu_compile_hlo(m1, &o, &d) == TPU_OK) {
    int gathers = 0, flat = 0;
    for (int i = 0; i < m1->entry->ninstrs; i++)
      if (m1->entry->instrs[i]->op == TPU_OP_GATHER) {
        gathers++;
        flat += m1->entry->instrs[i]->operands[1]->shape.rank == 1;
      }
    CHECK_EQ_INT(gathers, 1);
    CHECK_EQ_INT(flat, 0);
    int64_t dt[2] = {30, 8}, di[2] = {4, 5};
    CHECK(same_on(m0, m1, dt, di, 0.5, -7, 11, 47, 9)); /* indices -9 .. 37 */
  } else {
    CHECK(0);
  }
  tpu_module_free(m0);
  tpu_module_free(m1);
}

/* A gather of points reads its index vectors laid out as the compiler's packed words lie
 * (gather_index.c pack_points): the indices JAX stacks as [m, 2] columns become [2, m] rows
 * (index_vector_dim 0), the m indices in the lanes, not 2 of 128 lanes per index; values as
 * the reference gives them, negative and out-of-range indices included. One index (a
 * dynamic-slice in the compiler's programs) is left as it is. */
static void test_gather_points_packed(void) {
  const char *src =
      "HloModule points\n\nENTRY %main (t: f32[40,24], i: s32[300], j: s32[300]) -> f32[300] {\n"
      "  %t = f32[40,24] parameter(0)\n  %i = s32[300] parameter(1)\n  %j = s32[300] parameter(2)\n"
      "  %z = s32[] constant(0)\n  %zb = s32[300] broadcast(%z), dimensions={}\n"
      "  %lt = pred[300] compare(%i, %zb), direction=LT\n"
      "  %n = s32[] constant(40)\n  %nb = s32[300] broadcast(%n), dimensions={}\n"
      "  %w = s32[300] add(%i, %nb)\n  %s = s32[300] select(%lt, %w, %i)\n"
      "  %a = s32[300,1] reshape(%s)\n  %b = s32[300,1] reshape(%j)\n"
      "  %ix = s32[300,2] concatenate(%a, %b), dimensions={1}\n"
      "  ROOT %g = f32[300] gather(%t, %ix), offset_dims={}, collapsed_slice_dims={0,1}, "
      "start_index_map={0,1}, index_vector_dim=1, slice_sizes={1,1}\n}\n";
  tpu_module *m0 = NULL, *m1 = NULL;
  if (!parse_and_compile("points.hlo", src, &m0, &m1)) return;
  tpu_diag d;
  int rows = 0, gathers = 0;
  for (int i = 0; i < m1->entry->ninstrs; i++) {
    const tpu_instr *g = m1->entry->instrs[i];
    if (g->op != TPU_OP_GATHER) continue;
    gathers++;
    const tpu_shape *ix = &g->operands[1]->shape;
    rows += g->gather->index_vector_dim == 0 && ix->rank == 2 && ix->dims[0] == 2 && ix->dims[1] == 300;
  }
  printf("gather of 300 points: %d of %d gathers read [2, 300] index rows\n", rows, gathers);
  CHECK_EQ_INT(gathers, 1);
  CHECK_EQ_INT(rows, 1);
  tpu_tensor x[3], r0, r1;
  memset(&r0, 0, sizeof r0);
  memset(&r1, 0, sizeof r1);
  int64_t dt[2] = {40, 24}, di = 300;
  CHECK(tpu_tensor_alloc(&x[0], TPU_F32, 2, dt, &d) == TPU_OK);
  CHECK(tpu_tensor_alloc(&x[1], TPU_S32, 1, &di, &d) == TPU_OK);
  CHECK(tpu_tensor_alloc(&x[2], TPU_S32, 1, &di, &d) == TPU_OK);
  for (int i = 0; i < 960; i++) tpu_tensor_set_f64(&x[0], i, i * 0.25 - 11);
  for (int i = 0; i < 300; i++) {
    tpu_tensor_set_i64(&x[1], i, (i * 7) % 97 - 50); /* -50 .. 46: wrapped, then clamped */
    tpu_tensor_set_i64(&x[2], i, (i * 13) % 41 - 8); /* -8 .. 32: clamped to [0, 23] */
  }
  CHECK(tpu_ref_run(m0, x, 3, &r0, &d) == TPU_OK);
  CHECK(tpu_ref_run(m1, x, 3, &r1, &d) == TPU_OK);
  CHECK(same_bits(&r0, &r1));
  for (int k = 0; k < 3; k++) tpu_tensor_free(&x[k]);
  tpu_tensor_free(&r0);
  tpu_tensor_free(&r1);
  tpu_module_free(m0);
  tpu_module_free(m1);
}

/* A gather of one index vector is a dynamic-slice with its index on the scalar unit
 * (gather_index.c slice_one_index): JAX's index wrap rebuilt on rank-0 values (the scalar
 * unit's ops), and for a point of two components the vector concatenated in a kernel of
 * its own and component 1 sliced back out of it; values as the reference gives them. */
static void test_gather_one_index(void) {
  const char *src =
      "HloModule point\n\nENTRY %main (t: f32[40,24], i: s32[1], j: s32[1]) -> f32[1] {\n"
      "  %t = f32[40,24] parameter(0)\n  %i = s32[1] parameter(1)\n  %j = s32[1] parameter(2)\n"
      "  %z = s32[1] constant({0})\n  %n = s32[1] constant({40})\n  %k = s32[1] constant({24})\n"
      "  %lt = pred[1] compare(%i, %z), direction=LT\n  %w = s32[1] add(%i, %n)\n"
      "  %s = s32[1] select(%lt, %w, %i)\n"
      "  %lt2 = pred[1] compare(%j, %z), direction=LT\n  %w2 = s32[1] add(%j, %k)\n"
      "  %s2 = s32[1] select(%lt2, %w2, %j)\n"
      "  %a = s32[1,1] reshape(%s)\n  %b = s32[1,1] reshape(%s2)\n"
      "  %ix = s32[1,2] concatenate(%a, %b), dimensions={1}\n"
      "  ROOT %g = f32[1] gather(%t, %ix), offset_dims={}, collapsed_slice_dims={0,1}, "
      "start_index_map={0,1}, index_vector_dim=1, slice_sizes={1,1}\n}\n";
  tpu_module *m0 = NULL, *m1 = NULL;
  if (!parse_and_compile("point.hlo", src, &m0, &m1)) return;
  tpu_diag d;
  int gathers = 0, slices = 0, scalar_selects = 0, vectors = 0;
  for (int i = 0; i < m1->entry->ninstrs; i++) {
    const tpu_instr *in = m1->entry->instrs[i];
    gathers += in->op == TPU_OP_GATHER;
    slices += in->op == TPU_OP_DYNAMIC_SLICE;
    scalar_selects += in->op == TPU_OP_SELECT && in->shape.rank == 0;
    vectors += in->op == TPU_OP_FUSION && in->calls && in->calls->root->op == TPU_OP_CONCATENATE;
  }
  printf("gather of one point: %d gathers, %d dynamic-slices, %d scalar selects, %d index vector kernels\n", gathers,
         slices, scalar_selects, vectors);
  CHECK_EQ_INT(gathers, 0);
  CHECK_EQ_INT(slices, 1);
  CHECK_EQ_INT(scalar_selects, 2);
  CHECK_EQ_INT(vectors, 1);
  for (int v = 0; v < 4; v++) {
    tpu_tensor x[3], r0, r1;
    memset(&r0, 0, sizeof r0);
    memset(&r1, 0, sizeof r1);
    int64_t dt[2] = {40, 24}, one = 1;
    CHECK(tpu_tensor_alloc(&x[0], TPU_F32, 2, dt, &d) == TPU_OK);
    CHECK(tpu_tensor_alloc(&x[1], TPU_S32, 1, &one, &d) == TPU_OK);
    CHECK(tpu_tensor_alloc(&x[2], TPU_S32, 1, &one, &d) == TPU_OK);
    for (int i = 0; i < 960; i++) tpu_tensor_set_f64(&x[0], i, i * 0.25 - 11);
    static const int64_t iv[4] = {3, -7, 55, -60}, jv[4] = {5, 30, -2, -30};
    tpu_tensor_set_i64(&x[1], 0, iv[v]);
    tpu_tensor_set_i64(&x[2], 0, jv[v]);
    CHECK(tpu_ref_run(m0, x, 3, &r0, &d) == TPU_OK);
    CHECK(tpu_ref_run(m1, x, 3, &r1, &d) == TPU_OK);
    CHECK(same_bits(&r0, &r1));
    for (int k = 0; k < 3; k++) tpu_tensor_free(&x[k]);
    tpu_tensor_free(&r0);
    tpu_tensor_free(&r1);
  }
  tpu_module_free(m0);
  tpu_module_free(m1);
}

/* take_along_axis with one index per row (gather_index.c explicit_rows): the row numbers an
 * iota kernel of their own, concatenated with the indices as [2, B] rows in another, clamped
 * in a third, and gathered as points with no batching dimensions, as the XLA TPU compiler's
 * five kernels around its gather; values as the reference gives them (negative indices
 * wrapped, out-of-range ones masked to NaN by JAX's select). */
static void test_take_along_rows(void) {
  const char *src =
      "HloModule along\n\nand_r {\n  a = pred[] parameter(0)\n  b = pred[] parameter(1)\n"
      "  ROOT r = pred[] and(a, b)\n}\n\n"
      "ENTRY %main (t: f32[16,30], i: s32[16,1]) -> f32[16,1] {\n"
      "  %t = f32[16,30] parameter(0)\n  %i = s32[16,1] parameter(1)\n"
      "  %z = s32[] constant(0)\n  %zb = s32[16,1] broadcast(%z), dimensions={}\n"
      "  %lt = pred[16,1] compare(%i, %zb), direction=LT\n"
      "  %n = s32[] constant(30)\n  %nb = s32[16,1] broadcast(%n), dimensions={}\n"
      "  %w = s32[16,1] add(%i, %nb)\n  %s = s32[16,1] select(%lt, %w, %i)\n"
      "  %r = s32[16,1,1] reshape(%s)\n"
      "  %z3 = s32[16,1,1] broadcast(%z), dimensions={}\n"
      "  %ge = pred[16,1,1] compare(%r, %z3), direction=GE\n"
      "  %m = s32[] constant(29)\n  %mb = s32[16,1,1] broadcast(%m), dimensions={}\n"
      "  %le = pred[16,1,1] compare(%r, %mb), direction=LE\n"
      "  %an = pred[16,1,1] and(%ge, %le)\n  %tr = pred[] constant(true)\n"
      "  %ok = pred[16,1] reduce(%an, %tr), dimensions={2}, to_apply=and_r\n"
      "  %g = f32[16,1] gather(%t, %r), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, "
      "operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}\n"
      "  %nan = f32[] constant(nan)\n  %nn = f32[16,1] broadcast(%nan), dimensions={}\n"
      "  ROOT %o = f32[16,1] select(%ok, %g, %nn)\n}\n";
  tpu_module *m0 = NULL, *m1 = NULL;
  if (!parse_and_compile("along.hlo", src, &m0, &m1)) return;
  int iotas = 0, clamps = 0, points = 0;
  for (int i = 0; i < m1->entry->ninstrs; i++) {
    const tpu_instr *in = m1->entry->instrs[i];
    iotas += in->op == TPU_OP_IOTA && tpu__gather_index_kernel(in); /* a kernel alone */
    clamps += in->op == TPU_OP_CLAMP && tpu__gather_index_kernel(in);
    points += in->op == TPU_OP_GATHER && in->gather->operand_batching_dims.n == 0 &&
              in->operands[1]->shape.rank == 2 && in->operands[1]->shape.dims[0] == 2;
  }
  printf("take_along_axis, one index per row: %d row iota, %d clamp, %d gather of points\n", iotas, clamps, points);
  CHECK_EQ_INT(iotas, 1);
  CHECK_EQ_INT(clamps, 1);
  CHECK_EQ_INT(points, 1);
  int64_t dt[2] = {16, 30}, di[2] = {16, 1};
  CHECK(same_on(m0, m1, dt, di, 0.5, -40, 9, 71, 35)); /* indices -35 .. 34 */
  tpu_module_free(m0);
  tpu_module_free(m1);
}

/* take_along_axis with two indices per row whose index parameter is laid out batch-minor
 * ({0,1}: s32[32,2] pads least so) reads them through a copy into row-major and copies its
 * result back (gather_index.c relaid_indices), on v5p (and v4) as the compiler's copy.24 and
 * copy.25 are kernels there; not on v5e, where they are 100-cycle copies within VMEM. Values
 * as the reference gives them. */
static int relaid_copies(const char *src, const tpu_chip *chip, int *ok_values) {
  tpu_module *m0 = NULL, *m1 = NULL;
  tpu_diag d;
  *ok_values = 0;
  if (tpu_hlo_parse("along2.hlo", src, strlen(src), &m0, &d) != TPU_OK ||
      tpu_hlo_parse("along2.hlo", src, strlen(src), &m1, &d) != TPU_OK)
    return -1;
  tpu_compile_opts o = opts(NULL, NULL);
  o.chip = chip;
  int n = -1;
  if (tpu_compile_hlo(m1, &o, &d) == TPU_OK) {
    n = 0;
    for (int i = 0; i < m1->entry->ninstrs; i++) {
      const tpu_instr *in = m1->entry->instrs[i];
      n += in->op == TPU_OP_COPY && (tpu__gather_index_kernel(in) || (in->noperands == 1 && in->operands[0]->op == TPU_OP_GATHER));
    }
    int64_t dt[2] = {32, 50}, di[2] = {32, 2};
    *ok_values = same_on(m0, m1, dt, di, 0.5, -300, 7, 111, 55); /* indices -55 .. 55 */
  }
  tpu_module_free(m0);
  tpu_module_free(m1);
  return n;
}

static void test_take_along_relaid(void) {
  const char *src =
      "HloModule along2\n\nand_r {\n  a = pred[] parameter(0)\n  b = pred[] parameter(1)\n"
      "  ROOT r = pred[] and(a, b)\n}\n\n"
      "ENTRY %main (t: f32[32,50], i: s32[32,2]) -> f32[32,2] {\n"
      "  %t = f32[32,50] parameter(0)\n  %i = s32[32,2] parameter(1)\n"
      "  %z = s32[] constant(0)\n  %zb = s32[32,2] broadcast(%z), dimensions={}\n"
      "  %lt = pred[32,2] compare(%i, %zb), direction=LT\n"
      "  %n = s32[] constant(50)\n  %nb = s32[32,2] broadcast(%n), dimensions={}\n"
      "  %w = s32[32,2] add(%i, %nb)\n  %s = s32[32,2] select(%lt, %w, %i)\n"
      "  %r = s32[32,2,1] reshape(%s)\n"
      "  %z3 = s32[32,2,1] broadcast(%z), dimensions={}\n"
      "  %ge = pred[32,2,1] compare(%r, %z3), direction=GE\n"
      "  %m = s32[] constant(49)\n  %mb = s32[32,2,1] broadcast(%m), dimensions={}\n"
      "  %le = pred[32,2,1] compare(%r, %mb), direction=LE\n"
      "  %an = pred[32,2,1] and(%ge, %le)\n  %tr = pred[] constant(true)\n"
      "  %ok = pred[32,2] reduce(%an, %tr), dimensions={2}, to_apply=and_r\n"
      "  %g = f32[32,2] gather(%t, %r), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, "
      "operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}\n"
      "  %nan = f32[] constant(nan)\n  %nn = f32[32,2] broadcast(%nan), dimensions={}\n"
      "  ROOT %o = f32[32,2] select(%ok, %g, %nn)\n}\n";
  tpu_chip v5p;
  tpu_diag d;
  CHECK(tpu_chip_load("v5p", &v5p, &d) == TPU_OK);
  int okp = 0, oke = 0;
  int np = relaid_copies(src, &v5p, &okp), ne = relaid_copies(src, &g_chip, &oke);
  printf("take_along_axis, 2 indices per row from s32[32,2]{0,1}: %d relayout copies on v5p, %d on v5e\n", np, ne);
  CHECK_EQ_INT(np, 2);
  CHECK_EQ_INT(ne, 0);
  CHECK(okp);
  CHECK(oke);
}

/* A dynamic-slice of a parameter returned in another tile than the parameter's (relayout.c
 * tpu__result_slice_copy): bf16[197,64] lies {0,1} (197 in the lanes pads less than 64), its
 * row bf16[1,64] pads least {1,0}; the slice is taken in {0,1} and a copy kernel relays it
 * into {1,0}, as the XLA TPU compiler's constant_dynamic-slice_fusion and copy.1. A table
 * whose tile the row keeps (bf16[300,256]) returns the slice itself. Values unchanged. */
static void test_slice_result_copy(void) {
  static const char *fmt =
      "HloModule ds\n\nENTRY %%main (t: bf16[%d,%d], i: s32[]) -> bf16[1,%d] {\n"
      "  %%t = bf16[%d,%d] parameter(0)\n  %%i = s32[] parameter(1)\n  %%z = s32[] constant(0)\n"
      "  ROOT %%d = bf16[1,%d] dynamic-slice(%%t, %%i, %%z), dynamic_slice_sizes={1,%d}\n}\n";
  static const int shapes[2][2] = {{197, 64}, {300, 256}};
  for (int k = 0; k < 2; k++) {
    char src[1024];
    int r = shapes[k][0], c = shapes[k][1];
    snprintf(src, sizeof src, fmt, r, c, c, r, c, c, c);
    tpu_module *m0 = NULL, *m1 = NULL;
    if (!parse_and_compile("ds.hlo", src, &m0, &m1)) return;
    const tpu_instr *root = m1->entry->root;
    while (root->op == TPU_OP_FUSION && root->calls && root->calls->root) root = root->calls->root;
    int copied = root->op == TPU_OP_COPY && root->operands[0]->op == TPU_OP_DYNAMIC_SLICE;
    printf("dynamic-slice of bf16[%d,%d] returned: root %s%s\n", r, c, tpu_op_name(root->op),
           copied ? " of the slice" : "");
    CHECK_EQ_INT(copied, k == 0);
    if (copied) {
      const tpu_shape *ds = &root->operands[0]->shape, *out = &root->shape;
      CHECK(ds->has_layout && ds->minor_to_major[0] == 0);
      CHECK(!out->has_layout || out->minor_to_major[0] == 1);
    }
    tpu_diag d;
    tpu_tensor x[2], r0, r1;
    memset(&r0, 0, sizeof r0);
    memset(&r1, 0, sizeof r1);
    int64_t dt[2] = {r, c};
    CHECK(tpu_tensor_alloc(&x[0], TPU_BF16, 2, dt, &d) == TPU_OK);
    CHECK(tpu_tensor_alloc(&x[1], TPU_S32, 0, NULL, &d) == TPU_OK);
    for (int64_t i = 0; i < (int64_t)r * c; i++) tpu_tensor_set_f64(&x[0], i, (double)(i % 509) - 200);
    tpu_tensor_set_i64(&x[1], 0, 123);
    CHECK(tpu_ref_run(m0, x, 2, &r0, &d) == TPU_OK);
    CHECK(tpu_ref_run(m1, x, 2, &r1, &d) == TPU_OK);
    CHECK(same_bits(&r0, &r1));
    for (int j = 0; j < 2; j++) tpu_tensor_free(&x[j]);
    tpu_tensor_free(&r0);
    tpu_tensor_free(&r1);
    tpu_module_free(m0);
    tpu_module_free(m1);
  }
}

int main(void) {
  test_gather_index_kernel();
  test_gather_points_packed();
  test_take_along_rows();
  test_gather_one_index();
  test_take_along_relaid();
  test_slice_result_copy();
  CHECK_DONE();
}
