/* The HLO passes (inline, simplify, fuse) through tpu_compile_hlo:
 *   1. every conformance program gives bit-identical results on the reference interpreter
 *      before and after the passes;
 *   2. golden dumps after each pass (tests/hlo/compile/NAME.hlo -> NAME.PASS.expected;
 *      TPU_UPDATE_GOLDEN=1 rewrites them, to be reviewed by hand);
 *   3. fusion counts on the transformer training step;
 *   4. bad --dump-after names; out-of-memory at every allocation of a pass run;
 *   5. the `tpusim compile` verb (TPU_BIN): --emit hlo, --dump-after, errors with exit 2. */
#include <dirent.h>
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

/* A cheap producer read by several fusions is recomputed in each (as XLA's instruction
 * fusion duplicates it): RMSNorm's convert of x feeds both the sum of squares and the
 * scaling, and no kernel writes the f32 copy of x. So is the transcendental unit's work
 * (exp, power, ...); a division keeps its own kernel and is read by both. */
static int shared_producer_kernels(const char *src, int *converts_in_fusions) {
  tpu_module *m = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) == TPU_OK);
  if (!m) return -1;
  tpu_compile_opts o = opts(NULL, NULL);
  CHECK(tpu_compile_hlo(m, &o, &d) == TPU_OK);
  int kernels = 0;
  *converts_in_fusions = 0;
  for (int i = 0; i < m->entry->ninstrs; i++) {
    const tpu_instr *in = m->entry->instrs[i];
    if (in->op == TPU_OP_PARAMETER || in->op == TPU_OP_CONSTANT) continue;
    kernels++;
    if (in->op == TPU_OP_FUSION)
      for (int k = 0; k < in->calls->ninstrs; k++) *converts_in_fusions += in->calls->instrs[k]->op == TPU_OP_CONVERT;
  }
  tpu_module_free(m);
  return kernels;
}

static void test_shared_producer(void) {
  const char *fmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = bf16[64,128] parameter(0)\n c = f32[64,128] %s(x)\n"
      " sq = f32[64,128] multiply(c, c)\n z = f32[] constant(0)\n"
      " r = f32[64] reduce(sq, z), dimensions={1}, to_apply=add\n"
      " rb = f32[64,128] broadcast(r), dimensions={0}\n y = f32[64,128] multiply(c, rb)\n"
      " ROOT o = bf16[64,128] convert(y)\n}\n";
  char src[1024];
  int conv = 0;
  snprintf(src, sizeof src, fmt, "convert");
  int k = shared_producer_kernels(src, &conv);
  printf("shared convert: %d kernels, converts in fusions %d\n", k, conv);
  CHECK(k == 2);      /* the reduce fusion and the scaling fusion, no convert of its own */
  CHECK(conv >= 3);   /* x's convert in both, and the output's */
  /* exp (the transcendental unit's work) is recomputed too: the sum's kernel and the
   * division's each compute it, as the XLA TPU compiler's exponential_reduce_fusion and
   * exponential_divide_fusion do; a division is not recomputed (tpusim: its own kernel,
   * read by both; the compiler makes it one multi-output kernel with the sum, 2 in all) */
  const char *fmt2 =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = f32[64,128] parameter(0)\n c = f32[64,128] %s(x, x)\n"
      " z = f32[] constant(0)\n r = f32[64] reduce(c, z), dimensions={1}, to_apply=add\n"
      " rb = f32[64,128] broadcast(r), dimensions={0}\n ROOT y = f32[64,128] divide(c, rb)\n}\n";
  snprintf(src, sizeof src, fmt2, "power");
  k = shared_producer_kernels(src, &conv);
  printf("shared power: %d kernels\n", k);
  CHECK(k == 2);
  snprintf(src, sizeof src, fmt2, "divide");
  k = shared_producer_kernels(src, &conv);
  printf("shared divide: %d kernels\n", k);
  CHECK(k == 3);
}

/* src parsed and compiled for g_chip (checked); NULL when it does not parse. */

/* Fusion around the matrix unit (docs/compiler.md): the kernels of a compiled entry, and per
 * kernel the dots, reduces and divides it holds. */
typedef struct {
  int kernels, dots[8], reduces[8], divides[8], multiplies[8];
} kernel_census;

static kernel_census census(const char *src) {
  kernel_census kc;
  memset(&kc, 0, sizeof kc);
  tpu_module *m = compile_src(src);
  if (!m) return kc;
  for (int i = 0; i < m->entry->ninstrs; i++) {
    const tpu_instr *in = m->entry->instrs[i];
    if (in->op == TPU_OP_PARAMETER || in->op == TPU_OP_CONSTANT || in->op == TPU_OP_GET_TUPLE_ELEMENT ||
        in->op == TPU_OP_TUPLE)
      continue;
    int k = kc.kernels++;
    if (k >= 8) continue;
    const tpu_comp *c = in->op == TPU_OP_FUSION ? in->calls : NULL;
    int n = c ? c->ninstrs : 1;
    for (int j = 0; j < n; j++) {
      tpu_opcode op = c ? c->instrs[j]->op : in->op;
      kc.dots[k] += op == TPU_OP_DOT;
      kc.reduces[k] += op == TPU_OP_REDUCE;
      kc.divides[k] += op == TPU_OP_DIVIDE;
      kc.multiplies[k] += op == TPU_OP_MULTIPLY;
    }
  }
  tpu_module_free(m);
  return kc;
}

/* A dot's epilogue whose first step several later steps read (GELU over a bias add: the
 * sum is read five times): fusion decides producers consumers-first, so the bias add is
 * owned by the group and the dot joins it: one kOutput kernel, as the XLA TPU compiler
 * compiles gemm + bias + GELU (bench/fidelity gemm_bias_gelu). */
static void test_dot_gelu_one_kernel(void) {
  const char *src =
      "HloModule m\nENTRY e {\n x = bf16[256,512] parameter(0)\n w = bf16[512,256] parameter(1)\n"
      " b = bf16[256] parameter(2)\n d = bf16[256,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      " bb = bf16[256,256] broadcast(b), dimensions={1}\n h = bf16[256,256] add(d, bb)\n"
      " h2 = bf16[256,256] multiply(h, h)\n h3 = bf16[256,256] multiply(h2, h)\n"
      " c1 = bf16[] constant(0.0447)\n c1b = bf16[256,256] broadcast(c1), dimensions={}\n"
      " t1 = bf16[256,256] multiply(h3, c1b)\n t2 = bf16[256,256] add(h, t1)\n"
      " c2 = bf16[] constant(0.797)\n c2b = bf16[256,256] broadcast(c2), dimensions={}\n"
      " t3 = bf16[256,256] multiply(t2, c2b)\n th = bf16[256,256] tanh(t3)\n"
      " one = bf16[] constant(1)\n oneb = bf16[256,256] broadcast(one), dimensions={}\n"
      " t4 = bf16[256,256] add(th, oneb)\n half = bf16[] constant(0.5)\n halfb = bf16[256,256] broadcast(half), dimensions={}\n"
      " t5 = bf16[256,256] multiply(t4, halfb)\n ROOT y = bf16[256,256] multiply(h, t5)\n}\n";
  kernel_census kc = census(src);
  printf("dot + bias + GELU: %d kernels\n", kc.kernels);
  CHECK_EQ_INT(kc.kernels, 1);
  CHECK_EQ_INT(kc.dots[0], 1);
}

/* The kernels of a compiled entry (parameters, constants and tuples left out), and for each
 * of the first 8 how many of its ops have opcode `op`. */
static int kernels_with(const char *src, tpu_opcode op, int per[8]) {
  memset(per, 0, sizeof(int) * 8);
  tpu_module *m = compile_src(src);
  if (!m) return -1;
  int k = 0;
  for (int i = 0; i < m->entry->ninstrs; i++) {
    const tpu_instr *in = m->entry->instrs[i];
    if (in->op == TPU_OP_PARAMETER || in->op == TPU_OP_CONSTANT || in->op == TPU_OP_GET_TUPLE_ELEMENT ||
        in->op == TPU_OP_TUPLE)
      continue;
    if (k < 8) {
      const tpu_comp *c = in->op == TPU_OP_FUSION ? in->calls : NULL;
      for (int j = 0, n = c ? c->ninstrs : 1; j < n; j++) per[k] += (c ? c->instrs[j]->op : in->op) == op;
    }
    k++;
  }
  tpu_module_free(m);
  return k;
}

/* XLA's instruction fusion keeps an expensive producer (a dot, the transcendental unit's
 * work, a division) out of a consumer that reuses its elements (a broadcast): a
 * squeeze-and-excitation gate, sigmoid(dot) broadcast over the activations it scales, is the
 * dot's kernel with its epilogue (the compiler's kOutput fusion of f32[8,96]), then a scaling
 * kernel that only broadcasts (families mbconv_fwd_*); a norm's rsqrt of the row sums is a
 * kernel of its own, not computed in the kernel that scales every element by it (the
 * compiler's add_rsqrt_fusion). A cheap producer still joins through a broadcast. */
static void test_expensive_reuse(void) {
  const char *se =
      "HloModule m\nENTRY e {\n x = bf16[8,56,56,96] parameter(0)\n g = f32[8,4] parameter(1)\n"
      " w = f32[4,96] parameter(2)\n d = f32[8,96] dot(g, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      " n = f32[8,96] negate(d)\n e = f32[8,96] exponential(n)\n c = bf16[8,96] convert(e)\n"
      " b = bf16[8,56,56,96] broadcast(c), dimensions={0,3}\n ROOT y = bf16[8,56,56,96] multiply(x, b)\n}\n";
  int dots[8], exps[8], muls[8];
  int k = kernels_with(se, TPU_OP_DOT, dots);
  kernels_with(se, TPU_OP_EXP, exps);
  kernels_with(se, TPU_OP_MULTIPLY, muls);
  printf("SE gate: %d kernels, dots %d/%d, exps %d/%d, multiplies %d/%d\n", k, dots[0], dots[1], exps[0], exps[1],
         muls[0], muls[1]);
  CHECK_EQ_INT(k, 2);
  CHECK_EQ_INT(dots[0] + dots[1], 1);
  CHECK(dots[0] ? exps[0] == 1 && muls[1] == 1 : exps[1] == 1 && muls[0] == 1); /* exp with the dot */
  const char *norm =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = f32[256,384] parameter(0)\n sq = f32[256,384] multiply(x, x)\n z = f32[] constant(0)\n"
      " r = f32[256] reduce(sq, z), dimensions={1}, to_apply=add\n q = f32[256] %s(r)\n"
      " qb = f32[256,384] broadcast(q), dimensions={0}\n ROOT y = f32[256,384] multiply(x, qb)\n}\n";
  char src[1024];
  int rs[8];
  snprintf(src, sizeof src, norm, "rsqrt");
  k = kernels_with(src, TPU_OP_RSQRT, rs);
  kernels_with(src, TPU_OP_MULTIPLY, muls);
  printf("norm rsqrt: %d kernels\n", k);
  CHECK_EQ_INT(k, 3); /* sum of squares, rsqrt, scaling */
  CHECK_EQ_INT(rs[2], 0); /* not in the scaling kernel (the root, last) */
  CHECK_EQ_INT(rs[0] + rs[1], 1);
  snprintf(src, sizeof src, norm, "negate"); /* cheap: computed in the scaling kernel */
  k = kernels_with(src, TPU_OP_NEGATE, rs);
  printf("norm negate: %d kernels\n", k);
  CHECK_EQ_INT(k, 2);
}

/* A dynamic-slice reads only its window: a pad it slices is computed in the slice's kernel
 * over the window and recomputed in each slice that reads it, never stored whole (XLA's
 * windowed-einsum loops select a step's block as the maximum of two slices of an operand
 * padded with -inf; the compiler's final programs fuse both into the matmul's operand). A
 * slice of a parameter stays as it was. */
static void test_window_fusion(void) {
  const char *src =
      "HloModule m\nENTRY e {\n x = bf16[64,1,1024] parameter(0)\n i = s32[] parameter(1)\n"
      " j = s32[] parameter(2)\n z = s32[] constant(0)\n n = bf16[] constant(-inf)\n"
      " p = bf16[64,2,1024] pad(x, n), padding=0_0x0_1x0_0\n q = bf16[64,2,1024] pad(x, n), padding=0_0x1_0x0_0\n"
      " a = bf16[64,2,128] dynamic-slice(p, z, z, i), dynamic_slice_sizes={64,2,128}\n"
      " b = bf16[64,2,128] dynamic-slice(q, z, z, j), dynamic_slice_sizes={64,2,128}\n"
      " c = bf16[64,2,128] dynamic-slice(p, z, z, j), dynamic_slice_sizes={64,2,128}\n"
      " m = bf16[64,2,128] maximum(a, b)\n ROOT y = bf16[64,2,128] add(m, c)\n}\n";
  int pads[8], ds[8];
  int k = kernels_with(src, TPU_OP_PAD, pads);
  kernels_with(src, TPU_OP_DYNAMIC_SLICE, ds);
  int npad = 0, nds = 0;
  for (int i = 0; i < 8 && i < k; i++) {
    printf("window kernel %d: %d pads, %d dynamic-slices\n", i, pads[i], ds[i]);
    CHECK_EQ_INT(pads[i], ds[i]); /* each slice computes its own window of its pad */
    npad += pads[i];
    nds += ds[i];
  }
  CHECK_EQ_INT(nds, 3);
  CHECK_EQ_INT(npad, 3);
  const char *param =
      "HloModule m\nENTRY e {\n x = bf16[8,64,128] parameter(0)\n i = s32[] parameter(1)\n z = s32[] constant(0)\n"
      " a = bf16[1,64,128] dynamic-slice(x, i, z, z), dynamic_slice_sizes={1,64,128}\n"
      " ROOT y = bf16[1,64,128] negate(a)\n}\n";
  k = kernels_with(param, TPU_OP_DYNAMIC_SLICE, ds);
  printf("slice of a parameter: %d kernels\n", k);
  CHECK_EQ_INT(k, 2);
}

/* A reduce whose result is narrowed (a bf16 sum accumulated in f32) writes the narrow type
 * itself, one kernel, as the XLA TPU compiler's reduce to bf16 (families reduce_sum_*_bf16);
 * a widening convert of the sum stays a kernel of its own. */
static void test_narrowed_reduce(void) {
  const char *fmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = bf16[64,128] parameter(0)\n c = f32[64,128] convert(x)\n z = f32[] constant(0)\n"
      " r = f32[64] reduce(c, z), dimensions={1}, to_apply=add\n ROOT y = %s[64] convert(r)\n}\n";
  char src[1024];
  int conv[8];
  snprintf(src, sizeof src, fmt, "bf16");
  int k = kernels_with(src, TPU_OP_CONVERT, conv);
  printf("bf16 sum: %d kernels\n", k);
  CHECK_EQ_INT(k, 1);
  CHECK_EQ_INT(conv[0], 2);
  snprintf(src, sizeof src, fmt, "f64");
  k = kernels_with(src, TPU_OP_CONVERT, conv);
  printf("f64 of an f32 sum: %d kernels\n", k);
  CHECK_EQ_INT(k, 2);
  /* narrowed, then transposed, on its way out of the program: where the result's layout (the
   * least padded one) holds the sum in the order the reduce writes it, the reduce writes it
   * so, one kernel (the compiler's reduce to bf16[16,3]{0,1} for einsum('bca,ba->ac')); where
   * it does not (bf16[4,8]{1,0} from a sum laid out [8,4]), the transpose is a kernel of its
   * own, as the compiler's `copy` */
  const char *tfmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = bf16[%d,%d,512] parameter(0)\n c = f32[%d,%d,512] convert(x)\n z = f32[] constant(0)\n"
      " r = f32[%d,%d] reduce(c, z), dimensions={2}, to_apply=add\n n = bf16[%d,%d] convert(r)\n"
      " ROOT t = bf16[%d,%d] transpose(n), dimensions={1,0}\n}\n";
  int shapes[2][2] = {{3, 16}, {8, 4}};
  for (int i = 0; i < 2; i++) {
    int a = shapes[i][0], b = shapes[i][1];
    snprintf(src, sizeof src, tfmt, a, b, a, b, a, b, a, b, b, a);
    k = kernels_with(src, TPU_OP_CONVERT, conv);
    printf("f32[%d,%d] sum narrowed and transposed to bf16[%d,%d]: %d kernels\n", a, b, b, a, k);
    CHECK_EQ_INT(k, i == 0 ? 1 : 2);
  }
}

static void test_matmul_fusion(void) {
  /* attention: softmax(q k^T / 8) v over rows of S */
  const char *attn =
      "HloModule m\nmx { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] maximum(a, b) }\n"
      "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n q = bf16[2,4,%d,64] parameter(0)\n k = bf16[2,4,%d,64] parameter(1)\n"
      " v = bf16[2,4,%d,64] parameter(2)\n"
      " s = bf16[2,4,%d,%d] dot(q, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}\n"
      " sf = f32[2,4,%d,%d] convert(s)\n c8 = f32[] constant(8)\n b8 = f32[2,4,%d,%d] broadcast(c8), dimensions={}\n"
      " sc = f32[2,4,%d,%d] divide(sf, b8)\n ninf = f32[] constant(-inf)\n"
      " m = f32[2,4,%d] reduce(sc, ninf), dimensions={3}, to_apply=mx\n"
      " mb = f32[2,4,%d,%d] broadcast(m), dimensions={0,1,2}\n d = f32[2,4,%d,%d] subtract(sc, mb)\n"
      " ex = f32[2,4,%d,%d] exponential(d)\n z = f32[] constant(0)\n"
      " sm = f32[2,4,%d] reduce(ex, z), dimensions={3}, to_apply=add\n"
      " smb = f32[2,4,%d,%d] broadcast(sm), dimensions={0,1,2}\n p = f32[2,4,%d,%d] divide(ex, smb)\n"
      " pb = bf16[2,4,%d,%d] convert(p)\n"
      " ROOT o = bf16[2,4,%d,64] dot(pb, v), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n}\n";
  char src[4096];
  int rows[2] = {256, 4096};
  for (int t = 0; t < 2; t++) {
    int r = rows[t];
    snprintf(src, sizeof src, attn, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r);
    kernel_census kc = census(src);
    printf("attention, rows of %d: %d kernels\n", r, kc.kernels);
    if (t == 0) {
      /* q k^T with the max, exp and sum in its epilogue; the division fed into p v */
      CHECK_EQ_INT(kc.kernels, 2);
      CHECK(kc.dots[0] == 1 && kc.reduces[0] == 2 && kc.divides[0] == 1);
      CHECK(kc.dots[1] == 1 && kc.reduces[1] == 0 && kc.divides[1] == 1);
    } else {
      /* rows over MATMUL_ROW_MAX: the exponent step is its own kernel (with the sum) */
      CHECK_EQ_INT(kc.kernels, 3);
      CHECK(kc.dots[0] == 1 && kc.reduces[0] == 1);
      CHECK(kc.dots[1] == 0 && kc.reduces[1] == 1);
      CHECK(kc.dots[2] == 1 && kc.divides[2] == 1);
    }
  }
  /* RMSNorm feeding three projections: its scaling is computed in each matmul's operand */
  const char *norm =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n x = bf16[64,256] parameter(0)\n g = f32[256] parameter(1)\n"
      " wq = bf16[256,256] parameter(2)\n wk = bf16[256,256] parameter(3)\n wv = bf16[256,256] parameter(4)\n"
      " xf = f32[64,256] convert(x)\n sq = f32[64,256] multiply(xf, xf)\n z = f32[] constant(0)\n"
      " ss = f32[64] reduce(sq, z), dimensions={1}, to_apply=add\n"
      " rs = f32[64] rsqrt(ss)\n rb = f32[64,256] broadcast(rs), dimensions={0}\n"
      " gb = f32[64,256] broadcast(g), dimensions={1}\n n0 = f32[64,256] multiply(xf, rb)\n"
      " n1 = f32[64,256] multiply(n0, gb)\n nb = bf16[64,256] convert(n1)\n"
      " yq = bf16[64,256] dot(nb, wq), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      " yk = bf16[64,256] dot(nb, wk), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      " yv = bf16[64,256] dot(nb, wv), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      " ROOT t = (bf16[64,256], bf16[64,256], bf16[64,256]) tuple(yq, yk, yv)\n}\n";
  kernel_census kc = census(norm);
  printf("RMSNorm into three projections: %d kernels\n", kc.kernels);
  /* the sum of squares, its rsqrt (a kernel of its own, as the compiler's add_rsqrt_fusion in
   * families llama_fwd_*: an expensive producer stays out of the kernels that broadcast it),
   * then three matmuls */
  CHECK_EQ_INT(kc.kernels, 5);
  int scaled = 0;
  for (int k = 0; k < 5 && k < kc.kernels; k++) scaled += kc.dots[k] == 1 && kc.multiplies[k] >= 2;
  CHECK_EQ_INT(scaled, 3);
}

/* Sibling multi-output fusion (compile/passes/fuse_merge.c): two reductions over one array become
 * one kernel (a column sum and a row sum), two scalings of it one kernel, but a reduction
 * and an independent scaling stay two (the XLA TPU compiler's choice, probed on v5e). */
static void test_sibling_fusion(void) {
  const char *fmt =
      "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n xb = bf16[256,512] parameter(0)\n x = f32[256,512] convert(xb)\n z = f32[] constant(0)\n"
      " two = f32[] constant(2)\n tb = f32[256,512] broadcast(two), dimensions={}\n"
      " col = f32[512] reduce(x, z), dimensions={0}, to_apply=add\n"
      " sq = f32[256,512] multiply(x, x)\n row = f32[256] reduce(sq, z), dimensions={1}, to_apply=add\n"
      " s2 = f32[256,512] multiply(x, tb)\n s3 = f32[256,512] add(x, tb)\n"
      " ROOT t = %s tuple(%s)\n}\n";
  char src[1024];
  snprintf(src, sizeof src, fmt, "(f32[512], f32[256])", "col, row");
  kernel_census kc = census(src);
  printf("column sum + row sum: %d kernels\n", kc.kernels);
  CHECK_EQ_INT(kc.kernels, 1);
  snprintf(src, sizeof src, fmt, "(f32[256,512], f32[256,512])", "s2, s3");
  kc = census(src);
  printf("two scalings: %d kernels\n", kc.kernels);
  CHECK_EQ_INT(kc.kernels, 1);
  snprintf(src, sizeof src, fmt, "(f32[512], f32[256,512])", "col, s2");
  kc = census(src);
  printf("column sum + scaling: %d kernels\n", kc.kernels);
  CHECK_EQ_INT(kc.kernels, 2);
}

/* Dot strength reduction (compile/passes/dot_reduce.c): a dot with a vector operand runs as one
 * multiply + reduce kernel; a dot with rows on both sides, or whose matrix operand lists its
 * contracting dimensions out of order, stays a dot. */
static void test_dot_strength_reduction(void) {
  const char *fmt =
      "HloModule m\nENTRY e {\n x = bf16[%d,512] parameter(0)\n w = bf16[512,256] parameter(1)\n"
      " ROOT y = bf16[%d,256] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  char src[512];
  snprintf(src, sizeof src, fmt, 1, 1);
  kernel_census kc = census(src);
  int dots = 0, reduces = 0, mults = 0;
  for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k], reduces += kc.reduces[k], mults += kc.multiplies[k];
  printf("decode step with one token: %d kernels, %d dots, %d reduces\n", kc.kernels, dots, reduces);
  CHECK(dots == 0 && reduces == 1 && mults == 1);
  CHECK(kc.reduces[0] == 1 && kc.multiplies[0] == 1); /* one kernel reads w and sums */
  snprintf(src, sizeof src, fmt, 8, 8);
  kc = census(src);
  dots = 0;
  for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
  CHECK_EQ_INT(dots, 1);
  /* the matrix lists its contracting dimensions descending (JAX's 'badc,adbc->ba'): still a
   * vector product, reduced, the matrix transposed first so that the sum runs in the dot's
   * order; the values bit for bit the dot's */
  const char *desc = "HloModule m\nENTRY e {\n a = f32[6,5] parameter(0)\n b = f32[7,5,6] parameter(1)\n"
                     " ROOT y = f32[7] dot(a, b), lhs_contracting_dims={0,1}, rhs_contracting_dims={2,1}\n}\n";
  kc = census(desc);
  dots = 0;
  for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
  CHECK_EQ_INT(dots, 0);
  {
    tpu_module *m0 = NULL, *m1 = NULL;
    tpu_diag d;
    CHECK(tpu_hlo_parse("desc.hlo", desc, strlen(desc), &m0, &d) == TPU_OK);
    CHECK(tpu_hlo_parse("desc.hlo", desc, strlen(desc), &m1, &d) == TPU_OK);
    tpu_compile_opts o = opts(NULL, NULL);
    if (m0 && m1 && tpu_compile_hlo(m1, &o, &d) == TPU_OK) {
      tpu_tensor x[2], r0, r1;
      memset(&r0, 0, sizeof r0);
      memset(&r1, 0, sizeof r1);
      int64_t da[2] = {6, 5}, db[3] = {7, 5, 6};
      CHECK(tpu_tensor_alloc(&x[0], TPU_F32, 2, da, &d) == TPU_OK);
      CHECK(tpu_tensor_alloc(&x[1], TPU_F32, 3, db, &d) == TPU_OK);
      /* magnitudes spread over 2^-10 .. 2^10: a sum in another order rounds otherwise */
      for (int i = 0; i < 30; i++) tpu_tensor_set_f64(&x[0], i, ((i * 7) % 11 - 5) * (double)(1 << (i % 21)) / 1024.0 + 0.3);
      for (int i = 0; i < 210; i++) tpu_tensor_set_f64(&x[1], i, ((i * 5) % 13 - 6) * 1.0009765625 + i * 0.001);
      CHECK(tpu_ref_run(m0, x, 2, &r0, &d) == TPU_OK);
      CHECK(tpu_ref_run(m1, x, 2, &r1, &d) == TPU_OK);
      CHECK(same_bits(&r0, &r1));
      tpu_tensor_free(&x[0]);
      tpu_tensor_free(&x[1]);
      tpu_tensor_free(&r0);
      tpu_tensor_free(&r1);
    } else {
      CHECK(0);
    }
    tpu_module_free(m0);
    tpu_module_free(m1);
  }
  /* every contracting dimension of size 1 ('abcd,bca->adb' with c = 1): products, no
   * reduce, in one loop kernel with the result's transpose; 0 + p as the dot computes it
   * (bit for bit, -0 products included) */
  {
    const char *one = "HloModule m\nENTRY e {\n b = bf16[16,1,8] parameter(0)\n a = bf16[8,16,1,64] parameter(1)\n"
                      " d = bf16[8,16,64] dot(b, a), lhs_batch_dims={2,0}, lhs_contracting_dims={1}, rhs_batch_dims={0,1}, "
                      "rhs_contracting_dims={2}\n ROOT t = bf16[8,64,16] transpose(d), dimensions={0,2,1}\n}\n";
    kc = census(one);
    int red = 0;
    dots = 0;
    for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k], red += kc.reduces[k];
    printf("'abcd,bca->adb' with c = 1: %d kernels, %d dots, %d reduces\n", kc.kernels, dots, red);
    CHECK_EQ_INT(dots, 0);
    CHECK_EQ_INT(red, 0);
    CHECK_EQ_INT(kc.kernels, 1);
    tpu_module *m0 = NULL, *m1 = NULL;
    tpu_diag d;
    CHECK(tpu_hlo_parse("one.hlo", one, strlen(one), &m0, &d) == TPU_OK);
    CHECK(tpu_hlo_parse("one.hlo", one, strlen(one), &m1, &d) == TPU_OK);
    tpu_compile_opts o = opts(NULL, NULL);
    if (m0 && m1 && tpu_compile_hlo(m1, &o, &d) == TPU_OK) {
      tpu_tensor x[2], r0, r1;
      memset(&r0, 0, sizeof r0);
      memset(&r1, 0, sizeof r1);
      int64_t db[3] = {16, 1, 8}, da[4] = {8, 16, 1, 64};
      CHECK(tpu_tensor_alloc(&x[0], TPU_BF16, 3, db, &d) == TPU_OK);
      CHECK(tpu_tensor_alloc(&x[1], TPU_BF16, 4, da, &d) == TPU_OK);
      for (int i = 0; i < 128; i++) tpu_tensor_set_f64(&x[0], i, i % 5 == 0 ? 0.0 : (i % 3 - 1) * 1.5);
      for (int i = 0; i < 8192; i++) tpu_tensor_set_f64(&x[1], i, i % 7 == 0 ? -0.0 : (i % 9 - 4) * 0.25);
      CHECK(tpu_ref_run(m0, x, 2, &r0, &d) == TPU_OK);
      CHECK(tpu_ref_run(m1, x, 2, &r1, &d) == TPU_OK);
      CHECK(same_bits(&r0, &r1));
      tpu_tensor_free(&x[0]);
      tpu_tensor_free(&x[1]);
      tpu_tensor_free(&r0);
      tpu_tensor_free(&r1);
    } else {
      CHECK(0);
    }
    tpu_module_free(m0);
    tpu_module_free(m1);
  }
  /* a bf16 result in another order than the sum's ('bca,ba->ac', b = 1024, c = 3): narrowed
   * first, so the reduce writes bf16 and, the result's layout holding the sum's order, in
   * that layout: one kernel, as the compiler's multiply_reduce fusion to bf16[16,3]{0,1} */
  kc = census("HloModule m\nENTRY e {\n a = bf16[1024,3,16] parameter(0)\n b = bf16[1024,16] parameter(1)\n"
              " ROOT d = bf16[16,3] dot(a, b), lhs_batch_dims={2}, lhs_contracting_dims={0}, rhs_batch_dims={1}, "
              "rhs_contracting_dims={0}\n}\n");
  printf("'bca,ba->ac': %d kernels\n", kc.kernels);
  CHECK_EQ_INT(kc.kernels, 1);
  /* A batch of vector products with a contraction shorter than 64 (a Mamba step's state . C,
   * 'bdn,bn->bd'): multiply + reduce whatever the batch, as the XLA TPU compiler's kLoop
   * multiply_reduce fusions for n = 16, 32, 48; n = 64 stays on the MXU. */
  const char *mb = "HloModule m\nENTRY e {\n h = f32[4,2048,%d] parameter(0)\n c = f32[4,%d] parameter(1)\n"
                   " ROOT y = f32[4,2048] dot(h, c), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                   "rhs_contracting_dims={1}\n}\n";
  int ns[4] = {16, 32, 48, 64};
  for (int i = 0; i < 4; i++) {
    snprintf(src, sizeof src, mb, ns[i], ns[i]);
    kc = census(src);
    dots = 0;
    for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
    printf("'bdn,bn->bd' with n = %d: %d dots\n", ns[i], dots);
    CHECK_EQ_INT(dots, ns[i] < 64 ? 0 : 1);
  }
  /* A batch of vector products (decode attention's p . v over b x h heads): the MXU when no
   * batch dimension is 1, multiply + reduce when one is, or when a reduction reads the result
   * (q . k feeding the softmax's maximum). */
  const char *pv =
      "HloModule m\nmx { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT m = f32[] maximum(a, b) }\n"
      "ENTRY e {\n p = bf16[%d,4,256] parameter(0)\n v = bf16[%d,4,256,128] parameter(1)\n"
      " y = bf16[%d,4,128] dot(p, v), lhs_batch_dims={0,1}, lhs_contracting_dims={2}, rhs_batch_dims={0,1}, "
      "rhs_contracting_dims={2}\n c = f32[%d,4,128] convert(y)\n z = f32[] constant(-inf)\n"
      " ROOT r = %s\n}\n";
  struct {
    int b;
    const char *root;
    int want_dots;
  } bc[] = {{8, "f32[8,4,128] negate(c)", 1}, {1, "f32[1,4,128] negate(c)", 0}, {8, "f32[8,4] reduce(c, z), dimensions={2}, to_apply=mx", 0}};
  for (int i = 0; i < 3; i++) {
    snprintf(src, sizeof src, pv, bc[i].b, bc[i].b, bc[i].b, bc[i].b, bc[i].root);
    kc = census(src);
    dots = 0;
    for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
    CHECK_EQ_INT(dots, bc[i].want_dots);
  }
  /* A batch of vector products the vector unit computes whatever the contraction: both
   * operands vectors ('ab,ab->a', a dot product per batch element), or the matrix's free
   * elements within one register's 8 sublanes ('abk,ak->ab' with b = 3), as the compiler's
   * multiply_reduce fusions for the families programs einsum_acb_bca_a_* and
   * einsum_bca_ba_ac_*; with 96 free elements the MXU (einsum_abcd_cba_ad_*). */
  struct {
    const char *src;
    int want_dots;
  } vb[] = {
      {"HloModule m\nENTRY e {\n x = bf16[32,1024] parameter(0)\n y = bf16[32,1024] parameter(1)\n"
       " ROOT d = bf16[32] dot(x, y), lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, rhs_contracting_dims={1}\n}\n",
       0},
      {"HloModule m\nENTRY e {\n x = bf16[16,3,1024] parameter(0)\n y = bf16[16,1024] parameter(1)\n"
       " ROOT d = bf16[16,3] dot(x, y), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}\n}\n",
       0},
      {"HloModule m\nENTRY e {\n x = bf16[32,96,384] parameter(0)\n y = bf16[32,384] parameter(1)\n"
       " ROOT d = bf16[32,96] dot(x, y), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}\n}\n",
       1},
  };
  for (int i = 0; i < 3; i++) {
    kc = census(vb[i].src);
    dots = 0;
    for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
    printf("batched vector product %d: %d dots\n", i, dots);
    CHECK_EQ_INT(dots, vb[i].want_dots);
  }
  /* A chip with vpu_batched_vector_dots (v6e, as its XLA compiler does): a batched p . v
   * whose p keeps its size-1 query dimension runs on the vector unit; without that
   * dimension (as above) it stays on the MXU; on other chips both stay dots. */
  const char *pvq =
      "HloModule m\nENTRY e {\n p = bf16[8,4,1,256] parameter(0)\n v = bf16[8,4,256,128] parameter(1)\n"
      " y = bf16[8,4,1,128] dot(p, v), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, "
      "rhs_contracting_dims={2}\n ROOT r = bf16[8,4,1,128] negate(y)\n}\n";
  snprintf(src, sizeof src, pv, 8, 8, 8, 8, bc[0].root);
  for (int flag = 0; flag < 2; flag++) {
    g_chip.vpu_batched_vector_dots = flag;
    int want_q = flag ? 0 : 1;
    kc = census(pvq);
    dots = 0;
    for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
    CHECK_EQ_INT(dots, want_q);
    kc = census(src);
    dots = 0;
    for (int k = 0; k < kc.kernels && k < 8; k++) dots += kc.dots[k];
    CHECK_EQ_INT(dots, 1);
  }
  g_chip.vpu_batched_vector_dots = 0;
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

int main(void) {
  test_shared_producer();
  test_matmul_fusion();
  test_dot_gelu_one_kernel();
  test_expensive_reuse();
  test_narrowed_reduce();
  test_window_fusion();
  test_dot_strength_reduction();
  test_sibling_fusion();
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &g_chip, &d) == TPU_OK);
  test_golden();
  test_scan_rewrite();
  test_scan_rewrite_reverse_major();
  test_cse();
  test_scatter_select();
  test_reduce_of_broadcast();
  test_bad_dump_name();
  test_transformer();
  test_oom("tests/hlo/compile/mlp.hlo");
  test_oom("tests/hlo/compile/inline.hlo");
  test_oom("tests/hlo/compile/simplify.hlo");
  test_cli();
  if (getenv("TPU_CONF_ONLY") || !getenv("TPU_SKIP_CONF")) test_conformance();
  CHECK_DONE();
}
