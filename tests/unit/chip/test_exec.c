/* Chip executor values: MXU numerics for dot/convolution, the reference for everything else.
 *
 * Over the JAX conformance corpus: programs without dot/convolution are bit-identical to
 * the reference backend; with them, --precision highest is within the case's tolerance of
 * JAX and the default precision within a bf16-level tolerance (DEFAULT_RTOL/ATOL below);
 * every conformance convolution (and a few hand-written ones) with small-integer inputs
 * agrees bit for bit with the reference. Direct checks: dots against tpu_mxu_matmul_bf16,
 * tpu_mxu_matmul_f32 and tpu_mxu_matmul_s8 bit for bit. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "base/json.h"
#include "base/npy.h"
#include "check.h"
#include "chip/exec.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "ref/ref.h"

/* bf16-level tolerance for f32 programs at DEFAULT precision (one bf16 pass): each operand
 * is rounded to 8 significant bits (relative error <= 2^-9 each), so a product is off by
 * about 2^-8 relative; sums of n such terms with cancellation need an absolute term too.
 * 2^-5 relative / absolute leaves room for the softmax/normalisation steps that follow a
 * matmul in the attention and training-step programs. */
#define DEFAULT_RTOL 0.03125
#define DEFAULT_ATOL 0.03125

static tpu_chip g_chip;

static void print_diag(const char *what, const tpu_diag *d) {
  char buf[1200];
  tpu_diag_format(d, buf, sizeof buf);
  fprintf(stderr, "  %s: %s\n", what, buf);
}

static int has_op(const tpu_module *m, tpu_opcode op) {
  for (int c = 0; c < m->ncomps; c++)
    for (int i = 0; i < m->comps[c]->ninstrs; i++)
      if (m->comps[c]->instrs[i]->op == op) return 1;
  return 0;
}

/* Bit-identical values (any NaN equals any NaN: the MXU writes the canonical quiet NaN). */
static long same_bits(const char *what, const tpu_tensor *a, const tpu_tensor *b) {
  if (a->dtype != b->dtype || a->ntuple != b->ntuple) {
    fprintf(stderr, "  %s: dtype or tuple structure differs\n", what);
    return 1;
  }
  if (a->dtype == TPU_TUPLE) {
    long bad = 0;
    for (int i = 0; i < a->ntuple; i++) bad += same_bits(what, &a->elems[i], &b->elems[i]);
    return bad;
  }
  if (a->dtype == TPU_TOKEN) return 0;
  if (a->rank != b->rank || a->nbytes != b->nbytes || memcmp(a->dims, b->dims, sizeof a->dims[0] * (size_t)a->rank)) {
    fprintf(stderr, "  %s: shapes differ\n", what);
    return 1;
  }
  size_t es = tpu_dtype_size(a->dtype);
  int64_t n = tpu_tensor_numel(a);
  long bad = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!memcmp((const char *)a->data + i * es, (const char *)b->data + i * es, es)) continue;
    if (tpu_dtype_is_float(a->dtype) && isnan(tpu_tensor_get_f64(a, i)) && isnan(tpu_tensor_get_f64(b, i))) continue;
    if (bad < 3)
      fprintf(stderr, "  %s[%lld]: %.9g vs %.9g\n", what, (long long)i, tpu_tensor_get_f64(a, i), tpu_tensor_get_f64(b, i));
    bad++;
  }
  return bad;
}

/* Mismatches of got against JAX's `want` within |g - w| <= atol + rtol |w|; *worst gets the
 * largest error as a fraction of its limit. */
static long compare_tol(const char *what, const tpu_tensor *got, const tpu_tensor *want, double rtol, double atol,
                        double *worst) {
  if (got->rank != want->rank || tpu_tensor_numel(got) != tpu_tensor_numel(want)) {
    fprintf(stderr, "  %s: shape differs from JAX\n", what);
    return 1;
  }
  int64_t n = tpu_tensor_numel(got);
  long bad = 0;
  int is_float = tpu_dtype_is_float(got->dtype);
  for (int64_t i = 0; i < n; i++) {
    int ok;
    if (is_float) {
      double g = tpu_tensor_get_f64(got, i), w = tpu_tensor_get_f64(want, i);
      if (isnan(w) || isnan(g)) ok = isnan(w) && isnan(g);
      else if (isinf(w) || isinf(g)) ok = g == w;
      else {
        double lim = atol + rtol * fabs(w), r = fabs(g - w) / lim;
        ok = r <= 1;
        if (r > *worst) *worst = r;
      }
      if (!ok && bad < 3) fprintf(stderr, "  %s[%lld]: got %.9g, JAX %.9g\n", what, (long long)i, g, w);
    } else {
      ok = tpu_tensor_get_i64(got, i) == tpu_tensor_get_i64(want, i);
    }
    if (!ok) bad++;
  }
  return bad;
}

static long compare_outputs(const char *dir, const char *what, const tpu_tensor *res, double rtol, double atol,
                            double *worst) {
  int n = tpu_tensor_count_leaves(res), k = 0;
  const tpu_tensor **leaves = calloc((size_t)n, sizeof *leaves);
  tpu_tensor_collect_leaves(res, leaves);
  long bad = 0;
  for (k = 0; k < n; k++) {
    char path[2048], name[300];
    snprintf(path, sizeof path, "%s/out%d.npy", dir, k);
    snprintf(name, sizeof name, "%s out%d", what, k);
    tpu_tensor want;
    tpu_diag d;
    if (tpu_npy_read(path, &want, &d) != TPU_OK) {
      print_diag(path, &d);
      bad++;
      continue;
    }
    bad += compare_tol(name, leaves[k], &want, rtol, atol, worst);
    tpu_tensor_free(&want);
  }
  free(leaves);
  return bad;
}

/* Replaces every float input by small integers in [-3, 3] (exact in bf16, and every sum
 * of their products is exact in f32), reproducibly. */
static void small_int_inputs(tpu_tensor *args, int n) {
  uint64_t s = 12345;
  for (int a = 0; a < n; a++) {
    if (!tpu_dtype_is_float(args[a].dtype)) continue;
    int64_t cnt = tpu_tensor_numel(&args[a]);
    for (int64_t i = 0; i < cnt; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      tpu_tensor_set_f64(&args[a], i, (double)((int)((s >> 33) % 7) - 3));
    }
  }
}

static void run_case(const char *dir, const char *cname, int *nmxu, int *nplain) {
  char path[2048];
  tpu_diag d;
  tpu_module *m = NULL;
  tpu_tensor *args = NULL, ref, def, hi;
  memset(&ref, 0, sizeof ref);
  memset(&def, 0, sizeof def);
  memset(&hi, 0, sizeof hi);
  int nargs = 0;
  double rtol = 1e-5, atol = 1e-5;
  tpu_json_doc meta;
  snprintf(path, sizeof path, "%s/meta.json", dir);
  if (tpu_json_parse_file(path, &meta, &d) == TPU_OK) {
    const tpu_json *tol = tpu_json_get(meta.root, "tol");
    const tpu_json *r = tol ? tpu_json_get(tol, "rtol") : NULL, *a = tol ? tpu_json_get(tol, "atol") : NULL;
    if (r && r->kind == TPU_JSON_NUMBER) rtol = r->num;
    if (a && a->kind == TPU_JSON_NUMBER) atol = a->num;
    tpu_json_doc_free(&meta);
  }
  snprintf(path, sizeof path, "%s/prog.hlo", dir);
  int ok = tpu_hlo_parse_file(path, &m, &d) == TPU_OK && tpu_ir_verify(m, &d) == TPU_OK;
  CHECK(ok);
  if (!ok) {
    print_diag(cname, &d);
    tpu_module_free(m);
    return;
  }
  args = calloc((size_t)m->entry->nparams + 1, sizeof *args);
  for (nargs = 0; nargs < m->entry->nparams; nargs++) {
    snprintf(path, sizeof path, "%s/in%d.npy", dir, nargs);
    if (tpu_ref_load_input(path, nargs, &m->entry->params[nargs]->shape, &args[nargs], &d) != TPU_OK) break;
  }
  CHECK_EQ_INT(nargs, m->entry->nparams);
  int mxu = has_op(m, TPU_OP_DOT) || has_op(m, TPU_OP_CONVOLUTION);
  int conv = has_op(m, TPU_OP_CONVOLUTION);
  if (nargs == m->entry->nparams) {
    int r1 = tpu_ref_run(m, args, nargs, &ref, &d) == TPU_OK;
    CHECK(r1);
    int r2 = tpu_chip_run_values(m, &g_chip, -1, args, nargs, &def, &d) == TPU_OK;
    CHECK(r2);
    if (!r2) print_diag(cname, &d);
    if (r1 && r2 && !mxu) {
      /* the TPU back end sums f32 reduces in the vector unit's order (docs/numerics.md,
       * reduce): with a reduce, within the case's tolerance of XLA's values; else bit for bit */
      double w = 0;
      long bad = has_op(m, TPU_OP_REDUCE) ? compare_outputs(dir, cname, &def, rtol, atol, &w) : same_bits(cname, &def, &ref);
      CHECK_EQ_INT(bad, 0);
      (*nplain)++;
    }
    if (r2 && mxu) {
      int r3 = tpu_chip_run_values(m, &g_chip, TPU_PREC_HIGHEST, args, nargs, &hi, &d) == TPU_OK;
      CHECK(r3);
      double w_hi = 0, w_def = 0;
      char what[300];
      snprintf(what, sizeof what, "%s (highest)", cname);
      long bad_hi = r3 ? compare_outputs(dir, what, &hi, rtol, atol, &w_hi) : 1;
      snprintf(what, sizeof what, "%s (default)", cname);
      long bad_def = compare_outputs(dir, what, &def, DEFAULT_RTOL > rtol ? DEFAULT_RTOL : rtol,
                                     DEFAULT_ATOL > atol ? DEFAULT_ATOL : atol, &w_def);
      CHECK_EQ_INT(bad_hi, 0);
      CHECK_EQ_INT(bad_def, 0);
      if (getenv("TPU_EXEC_VERBOSE"))
        printf("  %-32s worst error / limit: highest %.3g, default %.3g\n", cname, w_hi, w_def);
      (*nmxu)++;
    }
    if (conv) { /* bit for bit with the reference on exact small integers */
      tpu_tensor a, b;
      small_int_inputs(args, nargs);
      int s1 = tpu_ref_run(m, args, nargs, &a, &d) == TPU_OK;
      int s2 = tpu_chip_run_values(m, &g_chip, -1, args, nargs, &b, &d) == TPU_OK;
      CHECK(s1 && s2);
      if (s1 && s2) CHECK_EQ_INT(same_bits(cname, &a, &b), 0);
      if (s1) tpu_tensor_free(&a);
      if (s2) tpu_tensor_free(&b);
    }
  }
  tpu_tensor_free(&ref);
  tpu_tensor_free(&def);
  tpu_tensor_free(&hi);
  for (int i = 0; i < nargs; i++) tpu_tensor_free(&args[i]);
  free(args);
  tpu_module_free(m);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void test_conformance(void) {
  const char *root = "tests/conformance/cases";
  DIR *dp = opendir(root);
  CHECK(dp != NULL);
  if (!dp) return;
  char *names[512];
  int n = 0;
  struct dirent *de;
  while ((de = readdir(dp)) && n < 512)
    if (de->d_name[0] != '.') names[n++] = strdup(de->d_name);
  closedir(dp);
  qsort(names, (size_t)n, sizeof names[0], cmp_str);
  const char *only = getenv("TPU_CONF_ONLY");
  int nmxu = 0, nplain = 0;
  for (int i = 0; i < n; i++) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
    if (!only || !strcmp(only, names[i])) run_case(dir, names[i], &nmxu, &nplain);
    free(names[i]);
  }
  if (!only) {
    CHECK(n >= 62);
    CHECK(nmxu >= 16);   /* the corpus has 16 programs with a dot or convolution */
    CHECK_EQ_INT(nmxu + nplain, n);
  }
  printf("conformance on the chip executor: %d with dot/conv, %d bit-identical to ref\n", nmxu, nplain);
}

/* ---- direct checks ---- */

static tpu_module *parse(const char *src) {
  tpu_module *m = NULL;
  tpu_diag d;
  if (tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK) {
    print_diag("parse", &d);
    tpu_module_free(m);
    return NULL;
  }
  return m;
}

static uint64_t g_rng = 99;
static double urand(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(g_rng >> 11) * 0x1p-53 * 2.0 - 1.0;
}

static void fill_random(tpu_tensor *t) {
  for (int64_t i = 0; i < tpu_tensor_numel(t); i++) {
    if (t->dtype == TPU_S8) tpu_tensor_set_i64(t, i, (int64_t)(urand() * 128.0));
    else tpu_tensor_set_f64(t, i, urand() * 4.0);
  }
}

/* A bf16 dot with K over two K-tiles, transposed operands and a batch dimension, against
 * tpu_mxu_matmul_bf16 on the same numbers, bit for bit. */
static void test_dot_bf16_bits(void) {
  /* lhs [K=300, B=2, M=5] contracting 0, batch 1; rhs [B=2, N=7, K=300] contracting 2. */
  tpu_module *m = parse("HloModule t\nENTRY e {\n"
                        "  a = bf16[300,2,5]{2,1,0} parameter(0)\n"
                        "  b = bf16[2,7,300]{2,1,0} parameter(1)\n"
                        "  ROOT d = f32[2,5,7]{2,1,0} dot(a, b), lhs_batch_dims={1}, lhs_contracting_dims={0}, "
                        "rhs_batch_dims={0}, rhs_contracting_dims={2}\n}\n");
  CHECK(m != NULL);
  if (!m) return;
  tpu_tensor args[2], out;
  tpu_diag d;
  int64_t da[3] = {300, 2, 5}, db[3] = {2, 7, 300};
  tpu_tensor_alloc(&args[0], TPU_BF16, 3, da, &d);
  tpu_tensor_alloc(&args[1], TPU_BF16, 3, db, &d);
  fill_random(&args[0]);
  fill_random(&args[1]);
  CHECK(tpu_chip_run_values(m, &g_chip, -1, args, 2, &out, &d) == TPU_OK);
  const tpu_bf16 *A = args[0].data, *B = args[1].data;
  long bad = 0;
  for (int b = 0; b < 2; b++) {
    tpu_bf16 a[5 * 300], w[300 * 7];
    float want[5 * 7];
    for (int i = 0; i < 5; i++)
      for (int k = 0; k < 300; k++) a[i * 300 + k] = A[(k * 2 + b) * 5 + i];
    for (int k = 0; k < 300; k++)
      for (int j = 0; j < 7; j++) w[k * 7 + j] = B[(b * 7 + j) * 300 + k];
    tpu_mxu_matmul_bf16(a, w, want, 5, 300, 7, g_chip.mxu_rows, 1);
    for (int e = 0; e < 35; e++) bad += memcmp(&want[e], (const float *)out.data + b * 35 + e, 4) != 0;
  }
  CHECK_EQ_INT(bad, 0);
  /* The MXU order differs from the reference's sequential sum: some element differs. */
  tpu_tensor r;
  CHECK(tpu_ref_run(m, args, 2, &r, &d) == TPU_OK);
  CHECK(memcmp(r.data, out.data, out.nbytes) != 0);
  tpu_tensor_free(&r);
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);
  tpu_module_free(m);
}

/* A bf16 dot whose operands are both read transposed in tiles (exec.c pack_f32: the
 * contracting dimension strided, the free one contiguous, sizes not multiples of the tile),
 * as an attention's K is: bit for bit tpu_mxu_matmul_bf16 on the same numbers. */
static void test_dot_bf16_tiles(void) {
  /* lhs [B=2, K=40, M=20] contracting 1; rhs [B=2, N=37, K=40] contracting 2. */
  tpu_module *m = parse("HloModule t\nENTRY e {\n"
                        "  a = bf16[2,40,20]{2,1,0} parameter(0)\n"
                        "  b = bf16[2,37,40]{2,1,0} parameter(1)\n"
                        "  ROOT d = f32[2,20,37]{2,1,0} dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={1}, "
                        "rhs_batch_dims={0}, rhs_contracting_dims={2}\n}\n");
  CHECK(m != NULL);
  if (!m) return;
  enum { B = 2, K = 40, M = 20, N = 37 };
  tpu_tensor args[2], out;
  tpu_diag d;
  int64_t da[3] = {B, K, M}, db[3] = {B, N, K};
  tpu_tensor_alloc(&args[0], TPU_BF16, 3, da, &d);
  tpu_tensor_alloc(&args[1], TPU_BF16, 3, db, &d);
  fill_random(&args[0]);
  fill_random(&args[1]);
  CHECK(tpu_chip_run_values(m, &g_chip, -1, args, 2, &out, &d) == TPU_OK);
  const tpu_bf16 *A = args[0].data, *W = args[1].data;
  long bad = 0;
  for (int b = 0; b < B; b++) {
    tpu_bf16 a[M * K], w[K * N];
    float want[M * N];
    for (int i = 0; i < M; i++)
      for (int k = 0; k < K; k++) a[i * K + k] = A[(b * K + k) * M + i];
    for (int k = 0; k < K; k++)
      for (int j = 0; j < N; j++) w[k * N + j] = W[(b * N + j) * K + k];
    tpu_mxu_matmul_bf16(a, w, want, M, K, N, g_chip.mxu_rows, 1);
    for (int e = 0; e < M * N; e++) bad += memcmp(&want[e], (const float *)out.data + b * M * N + e, 4) != 0;
  }
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);
  tpu_module_free(m);
}

/* f32 dot: the precision config selects the passes; --precision overrides it. */
static void test_dot_f32_precision(void) {
  tpu_module *m = parse("HloModule t\nENTRY e {\n"
                        "  a = f32[6,200]{1,0} parameter(0)\n"
                        "  b = f32[200,9]{1,0} parameter(1)\n"
                        "  ROOT d = f32[6,9]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
                        "operand_precision={high,highest}\n}\n");
  tpu_module *m0 = parse("HloModule t\nENTRY e {\n"
                         "  a = f32[6,200]{1,0} parameter(0)\n"
                         "  b = f32[200,9]{1,0} parameter(1)\n"
                         "  ROOT d = bf16[6,9]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n");
  CHECK(m && m0);
  if (!m || !m0) {
    tpu_module_free(m);
    tpu_module_free(m0);
    return;
  }
  tpu_tensor args[2], out, out0, outo;
  tpu_diag d;
  int64_t da[2] = {6, 200}, db[2] = {200, 9};
  tpu_tensor_alloc(&args[0], TPU_F32, 2, da, &d);
  tpu_tensor_alloc(&args[1], TPU_F32, 2, db, &d);
  fill_random(&args[0]);
  fill_random(&args[1]);
  float want[3][54];
  for (int p = 0; p < 3; p++)
    CHECK(tpu_mxu_matmul_f32(args[0].data, args[1].data, want[p], 6, 200, 9, g_chip.mxu_rows, (tpu_precision)p, 1, &d) ==
          TPU_OK);
  /* operand_precision={high,highest}: the max, HIGHEST. */
  CHECK(tpu_chip_run_values(m, &g_chip, -1, args, 2, &out, &d) == TPU_OK);
  CHECK(memcmp(out.data, want[2], sizeof want[2]) == 0);
  /* --precision default overrides it. */
  CHECK(tpu_chip_run_values(m, &g_chip, TPU_PREC_DEFAULT, args, 2, &outo, &d) == TPU_OK);
  CHECK(memcmp(outo.data, want[0], sizeof want[0]) == 0);
  CHECK(memcmp(want[0], want[2], sizeof want[0]) != 0);
  /* No precision config: DEFAULT, one pass, rounded once to the bf16 result. */
  CHECK(tpu_chip_run_values(m0, &g_chip, -1, args, 2, &out0, &d) == TPU_OK);
  long bad = 0;
  for (int e = 0; e < 54; e++) bad += ((const tpu_bf16 *)out0.data)[e].bits != tpu_bf16_from_f32(want[0][e]).bits;
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out0);
  /* HIGH through the override. */
  CHECK(tpu_chip_run_values(m0, &g_chip, TPU_PREC_HIGH, args, 2, &out0, &d) == TPU_OK);
  bad = 0;
  for (int e = 0; e < 54; e++) bad += ((const tpu_bf16 *)out0.data)[e].bits != tpu_bf16_from_f32(want[1][e]).bits;
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out0);
  CHECK(tpu_chip_run_values(m0, &g_chip, 3, args, 2, &out0, &d) == TPU_ERR_ARG);
  tpu_tensor_free(&out);
  tpu_tensor_free(&outo);
  tpu_tensor_free(&out0);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);
  tpu_module_free(m);
  tpu_module_free(m0);
}

/* s8 x s8 -> s32 on the int8 path (bit-identical to the reference: s32 wrap-around), and
 * s32 x s32 stays on the reference kernel. */
static void test_dot_s8(void) {
  tpu_module *m = parse("HloModule t\nENTRY e {\n"
                        "  a = s8[4,300]{1,0} parameter(0)\n"
                        "  b = s8[300,3]{1,0} parameter(1)\n"
                        "  ROOT d = s32[4,3]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n");
  CHECK(m != NULL);
  if (!m) return;
  tpu_tensor args[2], out, r;
  tpu_diag d;
  int64_t da[2] = {4, 300}, db[2] = {300, 3};
  tpu_tensor_alloc(&args[0], TPU_S8, 2, da, &d);
  tpu_tensor_alloc(&args[1], TPU_S8, 2, db, &d);
  fill_random(&args[0]);
  fill_random(&args[1]);
  int32_t want[12];
  tpu_mxu_matmul_s8(args[0].data, args[1].data, want, 4, 300, 3, 1);
  CHECK(tpu_chip_run_values(m, &g_chip, -1, args, 2, &out, &d) == TPU_OK);
  CHECK(memcmp(out.data, want, sizeof want) == 0);
  CHECK(tpu_ref_run(m, args, 2, &r, &d) == TPU_OK);
  CHECK(memcmp(out.data, r.data, sizeof want) == 0);
  CHECK_EQ_INT(tpu_chip_exec_path(TPU_S8, TPU_S8, TPU_S32), TPU_EXEC_S8);
  CHECK_EQ_INT(tpu_chip_exec_path(TPU_S8, TPU_S8, TPU_S64), TPU_EXEC_REF);
  CHECK_EQ_INT(tpu_chip_exec_path(TPU_S32, TPU_S32, TPU_S32), TPU_EXEC_REF);
  CHECK_EQ_INT(tpu_chip_exec_path(TPU_F64, TPU_F64, TPU_F64), TPU_EXEC_REF);
  CHECK_EQ_INT(tpu_chip_exec_path(TPU_BF16, TPU_BF16, TPU_BF16), TPU_EXEC_BF16);
  CHECK_EQ_INT(tpu_chip_exec_path(TPU_BF16, TPU_F32, TPU_F32), TPU_EXEC_F32);
  CHECK_EQ_INT(tpu_chip_exec_path(TPU_F16, TPU_F16, TPU_F16), TPU_EXEC_F32);
  tpu_tensor_free(&out);
  tpu_tensor_free(&r);
  tpu_tensor_free(&args[0]);
  tpu_tensor_free(&args[1]);
  tpu_module_free(m);
}

/* Convolutions the corpus lacks (batch groups, reversal, 3-D, negative padding, dot inside
 * a fusion), with small integers: bit for bit with the reference. */
static void test_conv_shapes(void) {
  static const char *const progs[] = {
      "HloModule t\nENTRY e {\n  x = f32[4,5,6]{2,1,0} parameter(0)\n  w = f32[3,6,4]{2,1,0} parameter(1)\n"
      "  ROOT c = f32[2,3,4]{2,1,0} convolution(x, w), window={size=3}, dim_labels=b0f_0io->b0f, batch_group_count=2\n}\n",
      "HloModule t\nENTRY e {\n  x = bf16[1,5,5,2]{3,2,1,0} parameter(0)\n  w = bf16[2,3,2,3]{3,2,1,0} parameter(1)\n"
      "  ROOT c = f32[1,6,2,3]{3,2,1,0} convolution(x, w), window={size=2x3 pad=1_1x-1_0 rhs_reversal=1x1}, "
      "dim_labels=b01f_01io->b01f\n}\n",
      "HloModule t\nENTRY e {\n  x = f32[2,3,4,4,3]{4,3,2,1,0} parameter(0)\n  w = f32[3,2,2,2,2]{4,3,2,1,0} parameter(1)\n"
      "  ROOT c = f32[2,2,3,3,2]{4,3,2,1,0} convolution(x, w), window={size=2x2x2}, dim_labels=bf012_io012->bf012\n}\n",
      "HloModule t\nf {\n  p = bf16[3,130]{1,0} parameter(0)\n  q = bf16[130,2]{1,0} parameter(1)\n"
      "  ROOT d = bf16[3,2]{1,0} dot(p, q), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n"
      "ENTRY e {\n  x = bf16[3,130]{1,0} parameter(0)\n  w = bf16[130,2]{1,0} parameter(1)\n"
      "  ROOT r = bf16[3,2]{1,0} fusion(x, w), kind=kOutput, calls=f\n}\n",
  };
  for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
    tpu_module *m = parse(progs[i]);
    CHECK(m != NULL);
    if (!m) continue;
    tpu_tensor args[2], a, b;
    tpu_diag d;
    for (int k = 0; k < 2; k++) {
      const tpu_shape *s = &m->entry->params[k]->shape;
      tpu_tensor_alloc(&args[k], s->dtype, s->rank, s->dims, &d);
    }
    small_int_inputs(args, 2);
    int s1 = tpu_ref_run(m, args, 2, &a, &d) == TPU_OK;
    if (!s1) print_diag("ref", &d);
    int s2 = tpu_chip_run_values(m, &g_chip, -1, args, 2, &b, &d) == TPU_OK;
    if (!s2) print_diag("chip", &d);
    CHECK(s1 && s2);
    if (s1 && s2) {
      CHECK_EQ_INT(same_bits("conv", &a, &b), 0);
      double sumsq = 0; /* the program computes something non-trivial */
      for (int64_t e = 0; e < tpu_tensor_numel(&a); e++) sumsq += fabs(tpu_tensor_get_f64(&a, e));
      CHECK(sumsq > 0);
    }
    if (s1) tpu_tensor_free(&a);
    if (s2) tpu_tensor_free(&b);
    tpu_tensor_free(&args[0]);
    tpu_tensor_free(&args[1]);
    tpu_module_free(m);
  }
}

/* While loops: trips recorded per instruction, summed over executions (an inner loop run
 * by each of 3 outer iterations, 4 trips each). */
static void test_loop_trips(void) {
  tpu_module *m = parse("HloModule t\n"
                        "icond {\n  p = s32[] parameter(0)\n  k = s32[] constant(4)\n"
                        "  ROOT lt = pred[] compare(p, k), direction=LT\n}\n"
                        "ibody {\n  p = s32[] parameter(0)\n  one = s32[] constant(1)\n  ROOT a = s32[] add(p, one)\n}\n"
                        "ocond {\n  p = s32[] parameter(0)\n  k = s32[] constant(3)\n"
                        "  ROOT lt = pred[] compare(p, k), direction=LT\n}\n"
                        "obody {\n  p = s32[] parameter(0)\n  z = s32[] constant(0)\n"
                        "  inner = s32[] while(z), condition=icond, body=ibody\n"
                        "  one = s32[] constant(1)\n  ROOT a = s32[] add(p, one)\n}\n"
                        "ENTRY e {\n  x = s32[] parameter(0)\n  ROOT outer = s32[] while(x), condition=ocond, body=obody\n}\n");
  CHECK(m != NULL);
  if (!m) return;
  tpu_tensor arg, out;
  tpu_diag d;
  tpu_tensor_alloc(&arg, TPU_S32, 0, NULL, &d);
  tpu_loop_trips trips = {0};
  CHECK(tpu_chip_run_values_trips(m, &g_chip, -1, &arg, 1, &trips, &out, &d) == TPU_OK);
  CHECK_EQ_INT(trips.n, 2);
  for (int i = 0; i < trips.n; i++) {
    if (!strcmp(trips.v[i].name, "inner")) {
      CHECK_EQ_INT(trips.v[i].iters, 12);
      CHECK_EQ_INT(trips.v[i].runs, 3);
    } else {
      CHECK_EQ_STR(trips.v[i].name, "outer");
      CHECK_EQ_INT(trips.v[i].iters, 3);
      CHECK_EQ_INT(trips.v[i].runs, 1);
    }
  }
  CHECK_EQ_INT(tpu_tensor_get_i64(&out, 0), 3);
  tpu_loop_trips_free(&trips);
  tpu_tensor_free(&out);
  tpu_tensor_free(&arg);
  tpu_module_free(m);
}

int main(void) {
  tpu_diag d;
  int ok = tpu_chip_load("v5e", &g_chip, &d) == TPU_OK;
  CHECK(ok);
  if (!ok) {
    print_diag("chip", &d);
    CHECK_DONE();
  }
  CHECK_EQ_INT(g_chip.mxu_rows, 128);
  test_dot_bf16_bits();
  test_dot_bf16_tiles();
  test_dot_f32_precision();
  test_dot_s8();
  test_conv_shapes();
  test_loop_trips();
  test_conformance();
  CHECK_DONE();
}
