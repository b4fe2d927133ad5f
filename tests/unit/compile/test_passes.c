/* The HLO passes (inline, simplify, fuse) through tpu_compile_hlo:
 *   1. every conformance program gives bit-identical results on the reference interpreter
 *      before and after the passes;
 *   2. golden dumps after each pass (tests/hlo/compile/NAME.hlo -> NAME.PASS.expected;
 *      TPU_UPDATE_GOLDEN=1 rewrites them, to be reviewed by hand);
 *   3. fusion counts on the transformer training step;
 *   4. bad --dump-after names; out-of-memory at every allocation of a pass run;
 *   5. the `tpusim compile` verb (TPU_BIN): --emit hlo, --dump-after, errors with exit 2.
 * The fusion decisions' tests are in test_passes_fusion.c, the layout decisions' in
 * test_passes_layout.c. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/alloc.h"
#include "check.h"
#include "util.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "ref/ref.h"
#include "passes_util.h"




/* ---- 1. Bit-identical results on the conformance corpus ---- */


static int run_case(const char *dir, const char *name) {
  char path[2048];
  tpu_diag d;
  tpu_module *m0 = NULL, *m1 = NULL;
  tpu_tensor *args = NULL, r0, r1;
  memset(&r0, 0, sizeof r0);
  memset(&r1, 0, sizeof r1);
  int nargs = 0, ok = 0;
  snprintf(path, sizeof path, "%s/prog.hlo", dir);
  if (tpu_hlo_parse_file(path, &m0, &d) != TPU_OK || tpu_hlo_parse_file(path, &m1, &d) != TPU_OK) {
    print_diag("parse", &d);
    goto out;
  }
  tpu_compile_opts o = opts(NULL, NULL);
  if (tpu_compile_hlo(m1, &o, &d) != TPU_OK) {
    print_diag("compile", &d);
    goto out;
  }
  args = calloc((size_t)m0->entry->nparams + 1, sizeof *args);
  for (nargs = 0; nargs < m0->entry->nparams; nargs++) {
    snprintf(path, sizeof path, "%s/in%d.npy", dir, nargs);
    if (tpu_ref_load_input(path, nargs, &m0->entry->params[nargs]->shape, &args[nargs], &d) != TPU_OK) {
      print_diag("input", &d);
      goto out;
    }
  }
  if (tpu_ref_run(m0, args, nargs, &r0, &d) != TPU_OK) {
    print_diag("run before", &d);
    goto out;
  }
  if (tpu_ref_run(m1, args, nargs, &r1, &d) != TPU_OK) {
    print_diag("run after", &d);
    goto out;
  }
  ok = same_bits(&r0, &r1);
  if (!ok) fprintf(stderr, "  %s: results differ after the passes\n", name);
out:
  tpu_tensor_free(&r0);
  tpu_tensor_free(&r1);
  for (int i = 0; i < nargs; i++) tpu_tensor_free(&args[i]);
  free(args);
  tpu_module_free(m0);
  tpu_module_free(m1);
  return ok;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void test_conformance(void) {
  const char *only = getenv("TPU_CONF_ONLY");
  DIR *dir = opendir("tests/conformance/cases");
  CHECK(dir != NULL);
  if (!dir) return;
  char *names[1024];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dir)) && n < 1024)
    if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
  closedir(dir);
  qsort(names, (size_t)n, sizeof names[0], cmp_str);
  int ran = 0, passed = 0;
  for (int i = 0; i < n; i++) {
    if (!only || !strcmp(only, names[i])) {
      char path[1100];
      snprintf(path, sizeof path, "tests/conformance/cases/%.1000s", names[i]);
      int ok = run_case(path, names[i]);
      if (!ok) fprintf(stderr, "FAIL: %s\n", names[i]);
      CHECK(ok);
      passed += ok;
      ran++;
    }
    free(names[i]);
  }
  printf("%d/%d conformance programs bit-identical after inline, simplify, fuse\n", passed, ran);
  if (!only) CHECK(ran >= 60);
}

/* ---- 2. Golden dumps ---- */



static void test_golden(void) {
  static const char *progs[] = {"inline", "simplify", "mlp", "combine"};
  static const char *passes[] = {"inline", "simplify", "fuse", "combine-collectives"};
  int update = getenv("TPU_UPDATE_GOLDEN") != NULL;
  for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++)
    for (size_t p = 0; p < 4; p++) {
      if ((i == 3) != (p == 3)) continue; /* combine.hlo: after combine-collectives only */
      char prog[256], exp[256];
      snprintf(prog, sizeof prog, "tests/hlo/compile/%s.hlo", progs[i]);
      snprintf(exp, sizeof exp, "tests/hlo/compile/%s.%s.expected", progs[i], passes[p]);
      char *got = dump_after(prog, passes[p]);
      CHECK(got != NULL);
      if (!got) continue;
      if (update) {
        FILE *f = fopen(exp, "wb");
        if (f) {
          fputs(got, f);
          fclose(f);
        }
      }
      char *want = test_read_file(exp);
      CHECK(want != NULL);
      if (want && strcmp(got, want)) {
        fprintf(stderr, "golden mismatch: %s after %s\n--- got ---\n%s", progs[i], passes[p], got);
        CHECK_EQ_STR(exp, "(matches)");
      }
      free(want);
      free(got);
    }
}

/* ---- 3. Fusion on the transformer block training step ---- */

typedef struct {
  int ops, fusions, kinds[3], dots_in_fusions;
} stats;

static void count(const tpu_comp *c, stats *s) {
  for (int i = 0; i < c->ninstrs; i++) {
    const tpu_instr *in = c->instrs[i];
    if (in->op == TPU_OP_PARAMETER || in->op == TPU_OP_CONSTANT) continue;
    s->ops++;
    if (in->op != TPU_OP_FUSION) continue;
    s->fusions++;
    for (int k = 0; k < in->nattrs; k++)
      if (!strcmp(in->attrs[k].name, "kind")) {
        const char *v = in->attrs[k].value;
        s->kinds[!strcmp(v, "kLoop") ? 0 : !strcmp(v, "kOutput") ? 1 : 2]++;
      }
    for (int k = 0; k < in->calls->ninstrs; k++) s->dots_in_fusions += in->calls->instrs[k]->op == TPU_OP_DOT;
  }
}

static void test_transformer(void) {
  const char *path = "tests/conformance/cases/transformer_block_train_step/prog.hlo";
  tpu_module *m = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse_file(path, &m, &d) == TPU_OK);
  if (!m) return;
  stats before = {0}, after = {0};
  int total_before = 0, total_after = 0, dots = 0;
  for (int i = 0; i < m->ncomps; i++) total_before += m->comps[i]->ninstrs;
  for (int i = 0; i < m->ncomps; i++)
    for (int k = 0; k < m->comps[i]->ninstrs; k++) dots += m->comps[i]->instrs[k]->op == TPU_OP_DOT;
  count(m->entry, &before);
  tpu_compile_opts o = opts(NULL, NULL);
  CHECK(tpu_compile_hlo(m, &o, &d) == TPU_OK);
  count(m->entry, &after);
  for (int i = 0; i < m->ncomps; i++) total_after += m->comps[i]->ninstrs;
  printf("transformer_block_train_step: entry ops %d -> %d (fusions %d: kLoop %d, kOutput %d, kInput %d; "
         "dots in fusions %d of %d); instructions in all computations %d -> %d, computations %d\n",
         before.ops, after.ops, after.fusions, after.kinds[0], after.kinds[1], after.kinds[2], after.dots_in_fusions, dots,
         total_before, total_after, m->ncomps);
  CHECK(after.ops < before.ops / 2);
  CHECK(after.kinds[0] > 0);
  CHECK(after.kinds[1] > 0);
  CHECK(after.kinds[2] > 0);
  CHECK(after.dots_in_fusions > 0 && after.dots_in_fusions <= dots);
  /* No fusion calls another fusion, and each fused computation holds at most one dot. */
  for (int i = 0; i < m->entry->ninstrs; i++) {
    const tpu_instr *in = m->entry->instrs[i];
    if (in->op != TPU_OP_FUSION) continue;
    int nd = 0;
    for (int k = 0; k < in->calls->ninstrs; k++) {
      nd += in->calls->instrs[k]->op == TPU_OP_DOT || in->calls->instrs[k]->op == TPU_OP_CONVOLUTION;
      CHECK(in->calls->instrs[k]->op != TPU_OP_FUSION);
    }
    CHECK(nd <= 1);
  }
  tpu_module_free(m);
}


/* Common subexpressions (compile/passes/cse.c): equal instructions merge, even when JAX gave each
 * its own copy of the reducer and other metadata; different attributes, operands and
 * ops with effects do not. Counted after simplify in the dump. */

/* One-hot scatter as a select (compile/passes/scatter_select.c): one update per row into a
 * broadcast zero becomes compare-select; two updates per row (they might collide) and a
 * scatter that overwrites stay scatters. Values: conformance case cross_entropy_grad. */
static void test_scatter_select(void) {
  const char *fmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] %s }\n"
      "ENTRY e {\n z = f32[] constant(0)\n o = f32[16,40] broadcast(z), dimensions={}\n"
      " i = s32[16,%d,1] parameter(0)\n u = f32[16,%d] parameter(1)\n"
      " ROOT s = f32[16,40] scatter(o, i, u), update_window_dims={}, inserted_window_dims={1},"
      " scatter_dims_to_operand_dims={1}, input_batching_dims={0}, scatter_indices_batching_dims={0},"
      " index_vector_dim=2, to_apply=add\n}\n";
  struct {
    const char *root;
    int per_row, want_scatters;
  } cases[] = {{"add(a, b)", 1, 0}, {"add(a, b)", 2, 1}, {"add(b, b)", 1, 1}};
  for (int i = 0; i < 3; i++) {
    char src[1024];
    snprintf(src, sizeof src, fmt, cases[i].root, cases[i].per_row, cases[i].per_row);
    char *out = dump_src_after(src, "scatter_select_test.hlo", "simplify");
    if (!out) return;
    printf("scatter, %d per row, combiner %s: %d scatters, %d selects after simplify\n", cases[i].per_row,
           cases[i].root, count_in(out, " scatter("), count_in(out, " select("));
    CHECK_EQ_INT(count_in(out, " scatter("), cases[i].want_scatters);
    CHECK_EQ_INT(count_in(out, " select("), 1 - cases[i].want_scatters);
    free(out);
  }
}

/* A sum over a broadcast's new dimensions as a multiply (compile/passes/reduce_bcast.c): over the
 * added rows through two converts it becomes x * 8 (no reduce left, the value exact: 8 is a
 * power of two); over x's own dimension it stays a reduce. */
static void test_reduce_of_broadcast(void) {
  const char *fmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = f32[40] parameter(0)\n z = f32[] constant(0)\n"
      " b = f32[8,40] broadcast(x), dimensions={1}\n h = bf16[8,40] convert(b)\n w = f32[8,40] convert(h)\n"
      " ROOT r = f32[%s] reduce(w, z), dimensions={%d}, to_apply=add\n}\n";
  struct {
    const char *shape;
    int dim, want_reduces;
  } cases[] = {{"40", 0, 0}, {"8", 1, 1}};
  for (int i = 0; i < 2; i++) {
    char src[1024];
    snprintf(src, sizeof src, fmt, cases[i].shape, cases[i].dim);
    char *out = dump_src_after(src, "reduce_bcast_test.hlo", "simplify");
    if (!out) return;
    printf("sum of a broadcast over dimension %d: %d reduces, %d multiplies after simplify\n", cases[i].dim,
           count_in(out, " reduce("), count_in(out, " multiply("));
    CHECK_EQ_INT(count_in(out, " reduce("), cases[i].want_reduces);
    CHECK_EQ_INT(count_in(out, " multiply("), 1 - cases[i].want_reduces);
    free(out);
  }
  /* values: the rewritten program computes 8 * bf16(x) */
  char src[1024];
  snprintf(src, sizeof src, fmt, "40", 0);
  tpu_module *m0 = NULL, *m1 = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse("reduce_bcast_test.hlo", src, strlen(src), &m0, &d) == TPU_OK);
  CHECK(tpu_hlo_parse("reduce_bcast_test.hlo", src, strlen(src), &m1, &d) == TPU_OK);
  if (!m0 || !m1) return;
  tpu_compile_opts o = opts(NULL, NULL);
  CHECK(tpu_compile_hlo(m1, &o, &d) == TPU_OK);
  tpu_tensor x, r0, r1;
  memset(&r0, 0, sizeof r0);
  memset(&r1, 0, sizeof r1);
  int64_t n = 40;
  CHECK(tpu_tensor_alloc(&x, TPU_F32, 1, &n, &d) == TPU_OK);
  for (int i = 0; i < 40; i++) tpu_tensor_set_f64(&x, i, 0.1 * (i - 20));
  CHECK(tpu_ref_run(m0, &x, 1, &r0, &d) == TPU_OK);
  CHECK(tpu_ref_run(m1, &x, 1, &r1, &d) == TPU_OK);
  int same = 1;
  for (int i = 0; i < 40; i++) {
    float hx = (float)tpu_tensor_get_f64(&x, i); /* through bf16: round to 8 bits of mantissa */
    tpu_tensor t;
    CHECK(tpu_tensor_alloc(&t, TPU_BF16, 0, NULL, &d) == TPU_OK);
    tpu_tensor_set_f64(&t, 0, hx);
    double want = 8.0 * tpu_tensor_get_f64(&t, 0);
    tpu_tensor_free(&t);
    same &= tpu_tensor_get_f64(&r1, i) == want && tpu_tensor_get_f64(&r0, i) == want;
  }
  CHECK(same);
  tpu_tensor_free(&x);
  tpu_tensor_free(&r0);
  tpu_tensor_free(&r1);
  tpu_module_free(m0);
  tpu_module_free(m1);
}

/* A reduce over dimensions of one element (compile/passes/reduce_bcast.c tpu__reduce_of_one):
 * no reduce left; a sum with init +0 is an add of the broadcast init (exact: -0 + +0 is +0 as
 * the reduce gives), a max with init -inf is the reshape alone; over [16,2] it stays a reduce,
 * and so does a bf16 sum over [1,1,1,768] (the compiler's `reduce` kernel).
 * Values bit-identical to the reduce's, -0, NaN and a denormal included, but for the denormal
 * through the max, which the identity max(x, -inf) -> x keeps unflushed (as XLA's reshape). */
static void test_reduce_of_one(void) {
  const char *fmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "max { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] maximum(a, b) }\n"
      "ENTRY e {\n x = f32[16,%d] parameter(0)\n z = f32[] constant(0)\n m = f32[] constant(-inf)\n"
      " s = f32[16] reduce(x, z), dimensions={1}, to_apply=add\n"
      " t = f32[16] reduce(x, m), dimensions={1}, to_apply=max\n"
      " ROOT r = (f32[16], f32[16]) tuple(s, t)\n}\n";
  for (int w = 1; w <= 2; w++) {
    char src[1024];
    snprintf(src, sizeof src, fmt, w);
    char *out = dump_src_after(src, "reduce_one_test.hlo", "simplify");
    if (!out) return;
    printf("reduces over [16,%d] dimension 1: %d reduces, %d maximums after simplify\n", w, count_in(out, " reduce("),
           count_in(out, " maximum("));
    CHECK_EQ_INT(count_in(out, " reduce("), w == 1 ? 0 : 2);
    if (w == 1) CHECK_EQ_INT(count_in(out, " maximum("), 0); /* the max of -inf is x: the reducer gone too */
    if (w == 1) CHECK_EQ_INT(count_in(out, " add("), 1);     /* the +0 init's add */
    free(out);
  }
  { /* a bf16 sum stays a reduce, as the compiler keeps it */
    const char *bf =
        "HloModule m\nadd { a = bf16[] parameter(0)\n b = bf16[] parameter(1)\n ROOT s = bf16[] add(a, b) }\n"
        "ENTRY e {\n x = bf16[1,1,1,768] parameter(0)\n z = bf16[] constant(0)\n"
        " ROOT s = bf16[768] reduce(x, z), dimensions={0,1,2}, to_apply=add\n}\n";
    char *out = dump_src_after(bf, "reduce_one_test.hlo", "simplify");
    if (out) CHECK_EQ_INT(count_in(out, " reduce("), 1);
    free(out);
  }
  { /* the switch set between two compiles in one process takes effect (base/env.h: read at
     * every call, as the caches key on it), and unset again the rule is back */
    char src1[1024];
    snprintf(src1, sizeof src1, fmt, 1);
    setenv("TPUSIM_NO_UNIT_REDUCE", "1", 1);
    char *out = dump_src_after(src1, "reduce_one_test.hlo", "simplify");
    if (out) CHECK_EQ_INT(count_in(out, " reduce("), 2);
    free(out);
    unsetenv("TPUSIM_NO_UNIT_REDUCE");
    out = dump_src_after(src1, "reduce_one_test.hlo", "simplify");
    if (out) CHECK_EQ_INT(count_in(out, " reduce("), 0);
    free(out);
  }
  char src[1024];
  snprintf(src, sizeof src, fmt, 1);
  tpu_module *m0 = NULL, *m1 = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse("reduce_one_test.hlo", src, strlen(src), &m0, &d) == TPU_OK);
  CHECK(tpu_hlo_parse("reduce_one_test.hlo", src, strlen(src), &m1, &d) == TPU_OK);
  if (!m0 || !m1) return;
  tpu_compile_opts o = opts(NULL, NULL);
  CHECK(tpu_compile_hlo(m1, &o, &d) == TPU_OK);
  tpu_tensor x, r0, r1;
  memset(&r0, 0, sizeof r0);
  memset(&r1, 0, sizeof r1);
  int64_t dims[2] = {16, 1};
  CHECK(tpu_tensor_alloc(&x, TPU_F32, 2, dims, &d) == TPU_OK);
  for (int i = 0; i < 16; i++) tpu_tensor_set_f64(&x, i, 0.37 * (i - 8));
  tpu_tensor_set_f64(&x, 0, -0.0);
  tpu_tensor_set_f64(&x, 1, NAN);
  tpu_tensor_set_f64(&x, 2, 1e-40);
  CHECK(tpu_ref_run(m0, &x, 1, &r0, &d) == TPU_OK);
  CHECK(tpu_ref_run(m1, &x, 1, &r1, &d) == TPU_OK);
  CHECK(r0.dtype == TPU_TUPLE && r1.dtype == TPU_TUPLE && r0.ntuple == 2 && r1.ntuple == 2);
  if (r0.dtype == TPU_TUPLE && r1.dtype == TPU_TUPLE)
    for (int k = 0; k < 2; k++)
      for (int i = 0; i < 16; i++)
        if ((k == 0 || i != 2) && memcmp((float *)r0.elems[k].data + i, (float *)r1.elems[k].data + i, sizeof(float))) {
          printf("result %d element %d: %g before, %g after\n", k, i, ((float *)r0.elems[k].data)[i], ((float *)r1.elems[k].data)[i]);
          CHECK(0);
        }
  /* the denormal through max(-inf, x): the reduce's max flushes it to 0; max(x, -inf) -> x (the
   * identities, as XLA's reshape) keeps it, as the compiler's program does */
  if (r1.dtype == TPU_TUPLE) CHECK(((float *)r1.elems[1].data)[2] == (float)1e-40);
  tpu_tensor_free(&x);
  tpu_tensor_free(&r0);
  tpu_tensor_free(&r1);
  tpu_module_free(m0);
  tpu_module_free(m1);
}

static void test_cse(void) {
  const char *src =
      "HloModule m\nadd0 { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "add1 { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "mul { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] multiply(a, b) }\n"
      "ENTRY e {\n x = f32[64,32] parameter(0)\n z = f32[] constant(0)\n z1 = f32[] constant(0)\n"
      " r0 = f32[32] reduce(x, z), dimensions={0}, to_apply=add0, metadata={op_name=\"mean\"}\n"
      " r1 = f32[32] reduce(x, z1), dimensions={0}, to_apply=add1, metadata={op_name=\"var/mean\"}\n"
      " r2 = f32[32] reduce(x, z), dimensions={0}, to_apply=mul\n"
      " r3 = f32[64] reduce(x, z), dimensions={1}, to_apply=add0\n"
      " e0 = f32[64,32] exponential(x)\n e1 = f32[64,32] exponential(x)\n"
      " k = u64[2] parameter(1)\n"
      " g0 = (u64[2], u32[8]) rng-bit-generator(k), algorithm=rng_default\n"
      " g1 = (u64[2], u32[8]) rng-bit-generator(k), algorithm=rng_default\n"
      " ROOT t = (f32[32], f32[32], f32[32], f32[64], f32[64,32], f32[64,32], (u64[2], u32[8]), (u64[2], u32[8])) "
      "tuple(r0, r1, r2, r3, e0, e1, g0, g1)\n}\n";
  char *out = dump_src_after(src, "cse_test.hlo", "simplify");
  if (!out) return;
  /* r0 and r1 one reduce; the product and the other axis stay: 3. One exponential; both
   * generators (their state is consumed twice). */
  printf("cse: %d reduces, %d exponentials, %d rng-bit-generators after simplify\n", count_in(out, " reduce("),
         count_in(out, " exponential("), count_in(out, " rng-bit-generator("));
  CHECK_EQ_INT(count_in(out, " reduce("), 3);
  CHECK_EQ_INT(count_in(out, " exponential("), 1);
  CHECK_EQ_INT(count_in(out, " rng-bit-generator("), 2);
  free(out);
  /* a widening convert sinks out of a max reduction (exact), not out of a sum */
  const char *sink =
      "HloModule m\nmx { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] maximum(a, b) }\n"
      "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = bf16[64,32] parameter(0)\n xf = f32[64,32] convert(x)\n ninf = f32[] constant(-inf)\n"
      " z = f32[] constant(0)\n m = f32[64] reduce(xf, ninf), dimensions={1}, to_apply=mx\n"
      " s = f32[64] reduce(xf, z), dimensions={1}, to_apply=add\n ROOT t = (f32[64], f32[64]) tuple(m, s)\n}\n";
  out = dump_src_after(sink, "sink_test.hlo", "simplify");
  if (!out) return;
  CHECK(strstr(out, "bf16[64]{0} reduce(x, ") != NULL || strstr(out, "bf16[64] reduce(x, ") != NULL);
  CHECK_EQ_INT(count_in(out, "f32[64]{0} reduce(") + count_in(out, "f32[64] reduce("), 1);
  if (!strstr(out, "bf16[64]")) fputs(out, stderr);
  free(out);
}

/* ---- 4. Errors ---- */

static void test_bad_dump_name(void) {
  tpu_module *m = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse_file("tests/hlo/compile/mlp.hlo", &m, &d) == TPU_OK);
  if (!m) return;
  tpu_compile_opts o = opts("fusion", NULL);
  CHECK_EQ_INT(tpu_compile_hlo(m, &o, &d), TPU_ERR_ARG);
  CHECK(strstr(d.msg, "unknown pass 'fusion'") != NULL);
  CHECK(strstr(d.msg, "inline, spmd-partition, simplify, combine-collectives, fuse, memory-schedule, tile, layout, buffer-assign, schedule, lower") != NULL);
  tpu_module_free(m);
}

static void test_oom(const char *path) {
  tpu_module *m = NULL;
  tpu_diag d;
  FILE *sink = fopen("/dev/null", "w");
  tpu_compile_opts o = opts("fuse", sink);
  CHECK(tpu_hlo_parse_file(path, &m, &d) == TPU_OK);
  tpu_alloc_fail_after(0);
  CHECK(m && tpu_compile_hlo(m, &o, &d) == TPU_OK);
  long total = tpu_alloc_fail_after(0);
  tpu_module_free(m);
  CHECK(total > 20);
  int failed = 0;
  for (long i = 1; i <= total; i++) {
    m = NULL;
    if (tpu_hlo_parse_file(path, &m, &d) != TPU_OK) continue;
    tpu_alloc_fail_after(i);
    tpu_status st = tpu_compile_hlo(m, &o, &d);
    tpu_alloc_fail_after(0);
    if (st != TPU_OK) {
      failed++;
      if (st != TPU_ERR_NOMEM) print_diag("oom", &d);
      CHECK_EQ_INT(st, TPU_ERR_NOMEM);
    }
    tpu_module_free(m);
  }
  CHECK_EQ_INT(failed, total);
  if (sink) fclose(sink);
}

/* ---- 5. The CLI ---- */

/* Runs a shell command; returns its exit status and its stdout (caller frees). */
static int run_cmd(const char *cmd, char **out) {
  FILE *p = popen(cmd, "r");
  *out = NULL;
  if (!p) return -1;
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  size_t r;
  while (buf && (r = fread(buf + len, 1, cap - len - 1, p)) > 0) {
    len += r;
    if (cap - len < 2) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) break;
      buf = nb;
      cap *= 2;
    }
  }
  if (buf) buf[len] = 0;
  *out = buf;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_cli(void) {
  const char *bin = getenv("TPU_BIN");
  if (!bin) {
    printf("TPU_BIN not set: CLI checks skipped\n");
    return;
  }
  char cmd[2048], *out;
  /* --emit hlo prints the module after the three HLO passes: the fuse golden. */
  snprintf(cmd, sizeof cmd, "%s compile tests/hlo/compile/mlp.hlo --emit hlo", bin);
  CHECK_EQ_INT(run_cmd(cmd, &out), 0);
  char *want = test_read_file("tests/hlo/compile/mlp.fuse.expected");
  CHECK(out && want && !strcmp(out, want));
  free(out);
  free(want);
  snprintf(cmd, sizeof cmd, "%s compile tests/hlo/compile/inline.hlo --emit hlo --dump-after inline --chip v4", bin);
  CHECK_EQ_INT(run_cmd(cmd, &out), 0);
  want = test_read_file("tests/hlo/compile/inline.inline.expected");
  CHECK(out && want && !strcmp(out, want));
  free(out);
  free(want);
  /* Errors: one line on stderr, nothing on stdout, exit 2. */
  snprintf(cmd, sizeof cmd, "%s compile tests/hlo/compile/mlp.hlo --dump-after fusion 2>&1", bin);
  CHECK_EQ_INT(run_cmd(cmd, &out), 2);
  CHECK(out && strstr(out, "error: unknown pass 'fusion' for --dump-after (passes: inline, spmd-partition, simplify, combine-collectives, fuse, memory-schedule, tile"));
  free(out);
  snprintf(cmd, sizeof cmd, "%s compile tests/hlo/bad/add_dependency_token.hlo --emit hlo 2>/dev/null", bin);
  CHECK_EQ_INT(run_cmd(cmd, &out), 2);
  CHECK(out && out[0] == 0);
  free(out);
  snprintf(cmd, sizeof cmd, "%s compile tests/hlo/bad/add_dependency_token.hlo --emit hlo 2>&1", bin);
  CHECK_EQ_INT(run_cmd(cmd, &out), 2);
  CHECK(out && strstr(out, "tests/hlo/bad/add_dependency_token.hlo:6:19: error: ") == out);
  free(out);
  snprintf(cmd, sizeof cmd, "%s compile tests/hlo/compile/mlp.hlo --precision exact 2>&1", bin);
  CHECK_EQ_INT(run_cmd(cmd, &out), 2);
  free(out);
}

/* A scan longer than 128 (jnp.cumsum as JAX lowers it for a TPU) is rewritten into the XLA
 * TPU compiler's blocks (compile/passes/scan_rewrite.c): no reduce-window wider than 128 is left,
 * and each of the 157 blocks of 128 of a 20,000-element scan is a window of 128. */
static void test_scan_rewrite(void) {
  static const char *src =
      "HloModule m\nadd {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
      "ENTRY e {\n x = f32[20000] parameter(0)\n z = f32[] constant(0)\n"
      " ROOT c = f32[20000] reduce-window(x, z), window={size=20000 pad=19999_0}, to_apply=add\n}\n";
  tpu_module *m = compile_src(src);
  if (!m) return;
  int wide = 0, blocks = 0, found157 = 0;
  for (int ci = 0; ci < m->ncomps; ci++) {
    const tpu_comp *c = m->comps[ci];
    for (int i = 0; i < c->ninstrs; i++) {
      const tpu_instr *in = c->instrs[i];
      if (in->op != TPU_OP_REDUCE_WINDOW) continue;
      for (int k = 0; k < in->nwindow; k++) wide |= in->window[k].size > 128;
      blocks++;
      found157 |= in->shape.rank == 2 && in->shape.dims[0] == 157 && in->shape.dims[1] == 128;
    }
  }
  printf("cumsum of 20,000: %d reduce-windows after the passes, none wider than 128: %s\n", blocks, wide ? "no" : "yes");
  CHECK(!wide && blocks == 3 && found157);
  tpu_module_free(m);
}

/* What the scan rewrite leaves: the reduce-windows (count, the widest window, its padding
 * below and above, the dimension it slides along, that dimension's length) and transposes. */
typedef struct {
  int windows, transposes;
  int64_t widest, lo, hi, along, len;
} scan_shape;

static scan_shape scan_after(const char *src) {
  scan_shape r = {0, 0, 0, 0, 0, -1, 0};
  tpu_module *m = compile_src(src);
  if (!m) return r;
  for (int ci = 0; ci < m->ncomps; ci++) {
    const tpu_comp *c = m->comps[ci];
    for (int i = 0; i < c->ninstrs; i++) {
      const tpu_instr *in = c->instrs[i];
      r.transposes += in->op == TPU_OP_TRANSPOSE;
      if (in->op != TPU_OP_REDUCE_WINDOW) continue;
      r.windows++;
      for (int k = 0; k < in->nwindow; k++)
        if (in->window[k].size > r.widest) {
          r.widest = in->window[k].size, r.lo = in->window[k].pad_lo, r.hi = in->window[k].pad_hi;
          r.along = k, r.len = in->shape.dims[k];
        }
    }
  }
  tpu_module_free(m);
  return r;
}

/* A reverse scan (jnp.cumsum(x, reverse=True): the window padded by its length less one
 * above) longer than 128 is rewritten into the same blocks mirrored, as the XLA TPU compiler
 * does (cumsum_1024_ax0_rev_bf16: blocks scanned with pad 0_127): three reduce-windows, the
 * widest 128 padded 127 above. A scan of at most 128 along one of the two minor dimensions of
 * an array of rank 3 runs along its major dimension between two transposes, as the
 * compiler's copies around its scan kernel (cummin_158x129x33_ax2_s32); one along the major
 * dimension, or of rank 2, keeps its reduce-window. */
static void test_scan_rewrite_reverse_major(void) {
  static const char *hdr = "HloModule m\nmn {\n a = s32[] parameter(0)\n b = s32[] parameter(1)\n"
                           " ROOT s = s32[] minimum(a, b)\n}\n";
  char src[800];
  snprintf(src, sizeof src,
           "%sENTRY e {\n x = s32[20000] parameter(0)\n z = s32[] constant(2147483647)\n"
           " ROOT c = s32[20000] reduce-window(x, z), window={size=20000 pad=0_19999}, to_apply=mn\n}\n",
           hdr);
  scan_shape r = scan_after(src);
  printf("reverse cummin of 20,000: %d reduce-windows, widest %lld padded %lld_%lld\n", r.windows,
         (long long)r.widest, (long long)r.lo, (long long)r.hi);
  CHECK(r.windows == 3 && r.widest == 128 && r.lo == 0 && r.hi == 127);
  snprintf(src, sizeof src,
           "%sENTRY e {\n x = s32[158,129,33] parameter(0)\n z = s32[] constant(2147483647)\n"
           " ROOT c = s32[158,129,33] reduce-window(x, z), window={size=1x1x33 pad=0_0x0_0x32_0}, to_apply=mn\n}\n",
           hdr);
  r = scan_after(src);
  printf("cummin of s32[158,129,33] along its last dimension: %d reduce-window along dimension %lld of %lld, %d "
         "transposes\n", r.windows, (long long)r.along, (long long)r.len, r.transposes);
  CHECK(r.windows == 1 && r.widest == 33 && r.lo == 32 && r.hi == 0 && r.along == 0 && r.len == 33 && r.transposes == 2);
  snprintf(src, sizeof src,
           "%sENTRY e {\n x = s32[80,126,80] parameter(0)\n z = s32[] constant(2147483647)\n"
           " ROOT c = s32[80,126,80] reduce-window(x, z), window={size=80x1x1 pad=0_79x0_0x0_0}, to_apply=mn\n}\n",
           hdr);
  r = scan_after(src);
  CHECK(r.windows == 1 && r.along == 0 && r.len == 80 && r.lo == 0 && r.hi == 79 && r.transposes == 0);
  snprintf(src, sizeof src,
           "%sENTRY e {\n x = s32[128,33] parameter(0)\n z = s32[] constant(2147483647)\n"
           " ROOT c = s32[128,33] reduce-window(x, z), window={size=1x33 pad=0_0x32_0}, to_apply=mn\n}\n",
           hdr);
  r = scan_after(src);
  CHECK(r.windows == 1 && r.along == 1 && r.transposes == 0);
}

/* The order a short scan's kernel lays its operand out in (scan_rewrite.c major_order): in
 * the lanes the last other dimension that fills them, else the last other one; a scan
 * along the lanes stays there where no other dimension fills them. s32[128,8,100] along axis
 * 2 runs on [100,8,128] (the compiler's {0,1,2}: 128 in the lanes), not [100,128,8];
 * s32[65,65,126] along axis 2 keeps its reduce-window, no transposes (libtpu probes on v5e,
 * scan_window.py; cummin_65x65x126_ax2_s32). */
static void test_scan_major_order(void) {
  static const char *hdr = "HloModule m\nmn {\n a = s32[] parameter(0)\n b = s32[] parameter(1)\n"
                           " ROOT s = s32[] minimum(a, b)\n}\n";
  char src[800];
  snprintf(src, sizeof src,
           "%sENTRY e {\n x = s32[128,8,100] parameter(0)\n z = s32[] constant(2147483647)\n"
           " ROOT c = s32[128,8,100] reduce-window(x, z), window={size=1x1x100 pad=0_0x0_0x99_0}, to_apply=mn\n}\n",
           hdr);
  tpu_module *m = compile_src(src);
  int ok = 0, transposes = 0;
  for (int ci = 0; m && ci < m->ncomps; ci++)
    for (int i = 0; i < m->comps[ci]->ninstrs; i++) {
      const tpu_instr *in = m->comps[ci]->instrs[i];
      if (in->op != TPU_OP_REDUCE_WINDOW) continue;
      ok = in->shape.rank == 3 && in->shape.dims[0] == 100 && in->shape.dims[1] == 8 && in->shape.dims[2] == 128;
      printf("cummin of s32[128,8,100] along axis 2: its kernel on [%lld,%lld,%lld]\n", (long long)in->shape.dims[0],
             (long long)in->shape.dims[1], (long long)in->shape.dims[2]);
    }
  tpu_module_free(m);
  CHECK(ok);
  snprintf(src, sizeof src,
           "%sENTRY e {\n x = s32[65,65,126] parameter(0)\n z = s32[] constant(2147483647)\n"
           " ROOT c = s32[65,65,126] reduce-window(x, z), window={size=1x1x126 pad=0_0x0_0x125_0}, to_apply=mn\n}\n",
           hdr);
  scan_shape r = scan_after(src);
  transposes = r.transposes;
  printf("cummin of s32[65,65,126] along axis 2: %d reduce-window along %lld, %d transposes\n", r.windows,
         (long long)r.along, transposes);
  CHECK(r.windows == 1 && r.along == 2 && transposes == 0);
  /* along axis 0 too, where the order is not row-major: s32[96,150,40] runs on [96,40,150]
   * (the compiler's {1,2,0}: 150 in the lanes; libtpu probe on all four generations) */
  snprintf(src, sizeof src,
           "%sENTRY e {\n x = s32[96,150,40] parameter(0)\n z = s32[] constant(2147483647)\n"
           " ROOT c = s32[96,150,40] reduce-window(x, z), window={size=96x1x1 pad=95_0x0_0x0_0}, to_apply=mn\n}\n",
           hdr);
  m = compile_src(src);
  ok = 0;
  for (int i = 0; m && i < m->entry->ninstrs; i++) {
    const tpu_instr *in = m->entry->instrs[i];
    if (in->op == TPU_OP_REDUCE_WINDOW)
      ok = in->shape.dims[0] == 96 && in->shape.dims[1] == 40 && in->shape.dims[2] == 150;
  }
  tpu_module_free(m);
  printf("cummin of s32[96,150,40] along axis 0: its kernel on [96,40,150]: %s\n", ok ? "yes" : "no");
  CHECK(ok);
}

/* A scan longer than 128 along the rows of an array whose lanes stay its last dimension runs
 * in blocks of rows (scan_rewrite.c scan_rows): no transpose moves the lanes, as none of the
 * compiler's kernels does for f32[1025,1000] along axis 0 (cumprod_1025x1000_ax0_f32: blocks
 * of 128 rows scanned with the rows major, [1000,9,128]{0,1,2}); the transposed form moved the
 * lanes twice (values: the same blocks, bit for bit the transposed form's). */
static void test_scan_rows(void) {
  static const char *src =
      "HloModule m\nmx {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] maximum(a, b)\n}\n"
      "ENTRY e {\n x = f32[1025,256] parameter(0)\n z = f32[] constant(-inf)\n"
      " ROOT c = f32[1025,256] reduce-window(x, z), window={size=1025x1 pad=1024_0x0_0}, to_apply=mx\n}\n";
  tpu_module *m = compile_src(src);
  int lane_moves = 0, windows = 0, widest = 0, ok = m != NULL;
  for (int ci = 0; m && ci < m->ncomps; ci++)
    for (int i = 0; i < m->comps[ci]->ninstrs; i++) {
      const tpu_instr *in = m->comps[ci]->instrs[i];
      if (in->op == TPU_OP_TRANSPOSE && in->dimensions.n == in->shape.rank &&
          in->dimensions.v[in->shape.rank - 1] != in->shape.rank - 1)
        lane_moves++;
      if (in->op == TPU_OP_REDUCE_WINDOW) {
        windows++;
        for (int k = 0; k < in->nwindow; k++)
          if (in->window[k].size > widest) widest = (int)in->window[k].size;
      }
    }
  tpu_module_free(m);
  printf("cummax of f32[1025,256] along axis 0: %d reduce-windows (widest %d), %d transposes moving the lanes\n",
         windows, widest, lane_moves);
  CHECK(ok && windows == 2 && widest == 128 && lane_moves == 0);
}

/* A long scan along the lanes whose rows do not fill their memory tiles (scan_rewrite.c
 * padded_rows): the view into blocks moves the padded rows, a slice kernel drops them and a pad
 * kernel restores them before the view back, and the padding to whole blocks is a kernel of
 * its own, as the XLA TPU compiler's slice.6, pad.1 and pad for s32[50,3000] along axis 1
 * (libtpu probes, bench/fidelity/probes/scan_padded_rows.py; cumprod_33x1000_ax1_f32 alike).
 * Rows that fill their tiles (s32[64,3000]) have none of those, but the copy out of the view
 * is a kernel apart from the blocks' combine (the compiler's broadcast_add_fusion and
 * copy_bitcast_fusion): *combined_copy says whether one kernel holds both. Values: the plain
 * window's, exactly. */
static int scan_row_kernels(int rows, int *pad_to, int *combined_copy) {
  char src[800];
  snprintf(src, sizeof src,
           "HloModule m\nadd {\n a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT s = s32[] add(a, b)\n}\n"
           "ENTRY e {\n x = s32[%d,3000] parameter(0)\n z = s32[] constant(0)\n"
           " ROOT c = s32[%d,3000] reduce-window(x, z), window={size=1x3000 pad=0_0x2999_0}, to_apply=add\n}\n",
           rows, rows);
  tpu_module *m0 = NULL, *m1 = NULL;
  if (!parse_and_compile("scan_rows_pad.hlo", src, &m0, &m1)) return -1;
  int own = 0;
  *pad_to = 0, *combined_copy = 0;
  for (int ci = 0; ci < m1->ncomps; ci++) {
    const tpu_comp *c = m1->comps[ci];
    int copy = 0, adds = 0;
    for (int i = 0; i < c->ninstrs; i++) {
      const tpu_instr *in = c->instrs[i];
      adds += in->op == TPU_OP_ADD && in->shape.rank == 3;
      for (int a = 0; a < in->nattrs; a++)
        if (!strcmp(in->attrs[a].name, "scan_kernel")) {
          own++;
          copy |= in->op == TPU_OP_RESHAPE;
          if (in->op == TPU_OP_PAD && in->shape.rank == 3) *pad_to = (int)in->shape.dims[0];
        }
    }
    *combined_copy |= copy && adds;
  }
  tpu_diag d;
  tpu_tensor x, r0, r1;
  memset(&r0, 0, sizeof r0);
  memset(&r1, 0, sizeof r1);
  int64_t dims[2] = {rows, 3000};
  CHECK(tpu_tensor_alloc(&x, TPU_S32, 2, dims, &d) == TPU_OK);
  for (int64_t i = 0; i < rows * 3000; i++) tpu_tensor_set_f64(&x, i, (double)((i * 7919) % 201 - 100));
  CHECK(tpu_ref_run(m0, &x, 1, &r0, &d) == TPU_OK);
  CHECK(tpu_ref_run(m1, &x, 1, &r1, &d) == TPU_OK);
  int same = 1;
  for (int64_t i = 0; i < rows * 3000; i++) same &= tpu_tensor_get_f64(&r0, i) == tpu_tensor_get_f64(&r1, i);
  CHECK(same);
  tpu_tensor_free(&x);
  tpu_tensor_free(&r0);
  tpu_tensor_free(&r1);
  tpu_module_free(m0);
  tpu_module_free(m1);
  return own;
}

static void test_scan_padded_rows(void) {
  int pad50 = 0, pad64 = 0, both50 = 0, both64 = 0;
  int own50 = scan_row_kernels(50, &pad50, &both50), own64 = scan_row_kernels(64, &pad64, &both64);
  printf("cumsum of s32[50,3000] along axis 1: %d kernels of its own (rows padded to %d); s32[64,3000]: %d, "
         "its combine and copy out %s\n", own50, pad50, own64, both64 ? "one kernel" : "apart");
  CHECK(own50 == 3 && pad50 == 56);
  CHECK(own64 == 1 && pad64 == 0 && !both64);
}

/* A vector's short scan runs down a column (scan_rewrite.c rewrite_column): f32[128] scanned in
 * reverse becomes a reshape into [128,1], a window of 128 down its rows padded 127 above (the
 * reverse scan's), and a reshape back, as the XLA TPU compiler's copy, reduce-window and reduce
 * (libtpu probes off the corpus on every generation, bench/fidelity/probes/lane_scan.py;
 * cumprod_128_ax0_rev_f32); a matrix's scan along its lanes (f32[8,100] along axis 1) stays
 * one window along them. Values: the plain window's, exactly. */
static int column_scan(const char *shape, const char *window, int *along, int64_t *lo, int64_t *hi) {
  char src[800];
  snprintf(src, sizeof src,
           "HloModule m\nmul {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] multiply(a, b)\n}\n"
           "ENTRY e {\n x = f32[%s] parameter(0)\n z = f32[] constant(1)\n"
           " ROOT c = f32[%s] reduce-window(x, z), window={%s}, to_apply=mul\n}\n",
           shape, shape, window);
  tpu_module *m0 = NULL, *m1 = NULL;
  if (!parse_and_compile("scan_column.hlo", src, &m0, &m1)) return -1;
  int reshapes = 0;
  *along = -1;
  for (int i = 0; i < m1->entry->ninstrs; i++) {
    const tpu_instr *in = m1->entry->instrs[i];
    reshapes += in->op == TPU_OP_RESHAPE;
    for (int k = 0; in->op == TPU_OP_REDUCE_WINDOW && k < in->nwindow; k++)
      if (in->window[k].size > 1) *along = k + 10 * in->shape.rank, *lo = in->window[k].pad_lo, *hi = in->window[k].pad_hi;
  }
  const tpu_shape *xs = &m0->entry->params[0]->shape;
  tpu_diag d;
  tpu_tensor x, r0, r1;
  memset(&r0, 0, sizeof r0);
  memset(&r1, 0, sizeof r1);
  CHECK(tpu_tensor_alloc(&x, TPU_F32, xs->rank, xs->dims, &d) == TPU_OK);
  int64_t n = 1;
  for (int k = 0; k < xs->rank; k++) n *= xs->dims[k];
  for (int64_t i = 0; i < n; i++) tpu_tensor_set_f64(&x, i, 0.5 + (double)((i * 37) % 11) / 8);
  CHECK(tpu_ref_run(m0, &x, 1, &r0, &d) == TPU_OK);
  CHECK(tpu_ref_run(m1, &x, 1, &r1, &d) == TPU_OK);
  int same = 1;
  for (int64_t i = 0; i < n; i++) same &= tpu_tensor_get_f64(&r0, i) == tpu_tensor_get_f64(&r1, i);
  CHECK(same);
  tpu_tensor_free(&x);
  tpu_tensor_free(&r0);
  tpu_tensor_free(&r1);
  tpu_module_free(m0);
  tpu_module_free(m1);
  return reshapes;
}

static void test_scan_column(void) {
  int along = -1, along2 = -1;
  int64_t lo = -1, hi = -1, lo2 = -1, hi2 = -1;
  int vec = column_scan("128", "size=128 pad=0_127", &along, &lo, &hi);
  int mat = column_scan("8,100", "size=1x100 pad=0_0x99_0", &along2, &lo2, &hi2);
  printf("reverse cumprod of f32[128]: %d reshapes, its window along dimension %d of rank %d padded %lld_%lld; "
         "f32[8,100] along axis 1: %d reshapes, along dimension %d\n", vec, along % 10, along / 10, (long long)lo,
         (long long)hi, mat, along2 % 10);
  CHECK(vec == 2 && along == 20 && lo == 0 && hi == 127);
  CHECK(mat == 0 && along2 == 21 && lo2 == 99 && hi2 == 0);
}

/* A while loop that runs once is its body, inlined; one that runs never is its input (XLA's
 * WhileLoopSimplifier): a one-microbatch step's accumulator is zero plus the gradient, one
 * streamed add over it, with no loop (bench/plan_memory: the compiler's programs for the
 * one-microbatch planner steps have no microbatch loop; simplify keeps x + (+0), which is not
 * x for x = -0, where XLA's AlgebraicSimplifier drops it too). A loop of two trips stays, and
 * so does a one-trip loop that draws random numbers (a side effect). */
static int loops_after(const char *body_op, int trips, int *adds) {
  char src[2048];
  snprintf(src, sizeof src,
           "HloModule m\n"
           "cond {\n s = (s32[], f32[64,64], f32[64,64]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
           " n = s32[] constant(%d)\n ROOT c = pred[] compare(i, n), direction=LT\n}\n"
           "body {\n s = (s32[], f32[64,64], f32[64,64]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
           " x = f32[64,64] get-tuple-element(s), index=1\n a = f32[64,64] get-tuple-element(s), index=2\n"
           " z1 = f32[] constant(0)\n o1 = f32[] constant(1)\n g = f32[64,64] %s\n a1 = f32[64,64] add(a, g)\n one = s32[] constant(1)\n i1 = s32[] add(i, one)\n"
           " ROOT r = (s32[], f32[64,64], f32[64,64]) tuple(i1, x, a1)\n}\n"
           "ENTRY e {\n x = f32[64,64] parameter(0)\n z = f32[] constant(0)\n a0 = f32[64,64] broadcast(z), dimensions={}\n"
           " i0 = s32[] constant(0)\n init = (s32[], f32[64,64], f32[64,64]) tuple(i0, x, a0)\n"
           " w = (s32[], f32[64,64], f32[64,64]) while(init), condition=cond, body=body\n"
           " ROOT o = f32[64,64] get-tuple-element(w), index=2\n}\n",
           trips, body_op);
  char *out = dump_src_after(src, "trip.hlo", "simplify");
  int n = out ? count_in(out, " while(") : -1;
  *adds = out ? count_in(out, " add(") : -1;
  free(out);
  return n;
}

static void test_while_trip_one(void) {
  int adds1 = 0, adds2 = 0, adds0 = 0, addsr = 0;
  int one = loops_after("multiply(x, x)", 1, &adds1), two = loops_after("multiply(x, x)", 2, &adds2);
  int none = loops_after("multiply(x, x)", 0, &adds0);
  int rng = loops_after("rng(z1, o1), distribution=rng_uniform", 1, &addsr);
  printf("while loops after simplify: trip 1 %d (%d adds), trip 2 %d, trip 0 %d, trip 1 with rng %d\n", one, adds1,
         two, none, rng);
  CHECK(one == 0 && adds1 == 1); /* inlined: the accumulator's one add, no induction add */
  CHECK(two == 1);
  CHECK(none == 0);
  CHECK(rng == 1);
}

int main(void) {
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &g_chip, &d) == TPU_OK);
  test_golden();
  test_scan_rewrite();
  test_scan_rewrite_reverse_major();
  test_scan_major_order();
  test_scan_rows();
  test_scan_padded_rows();
  test_scan_column();
  test_while_trip_one();
  test_cse();
  test_scatter_select();
  test_reduce_of_broadcast();
  test_reduce_of_one();
  test_bad_dump_name();
  test_transformer();
  test_oom("tests/hlo/compile/mlp.hlo");
  test_oom("tests/hlo/compile/inline.hlo");
  test_oom("tests/hlo/compile/simplify.hlo");
  test_cli();
  if (getenv("TPU_CONF_ONLY") || !getenv("TPU_SKIP_CONF")) test_conformance();
  CHECK_DONE();
}
