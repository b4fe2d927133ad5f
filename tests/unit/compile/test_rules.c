/* Every timing rule pinned against a figure tpusim does not make itself (docs/testing.md,
 * "Timing rules"):
 *
 *  - per-op unit costs (the transcendental unit, the vector unit, HBM streaming, a kernel's
 *    start, the MXU, convolutions, a matmul streaming its weight): small programs whose time
 *    one rule dominates, run as `tpusim run --mode timing` runs them (the public API), against
 *    the XLA TPU compiler's own estimated_cycles committed in bench/fidelity/corpus (the probe
 *    families of bench/fidelity/gen.py: eup.json, vector_ops.json, probes.json, and single-op
 *    corpus programs),
 *    on v4 (one TensorCore, as the compiler's v4 device), v5e, v5p and v6e. The ratio
 *    tpusim / compiler of each is asserted within RATIO_TOL of the ratio measured when the
 *    case was added: a 10 % change of the rule moves the ratio by about 10 % and fails. Where
 *    the ratio is far from 1 the gap is known and documented (docs/testing.md);
 *  - the cross-lane unit: a reduction over the lanes and a transpose moving the minor
 *    dimension cost one 8x128 register per cycle per TensorCore (closed form);
 *  - each collective on the ICI model, end to end from HLO: a line of 4 (or 8) chips without
 *    wrap-around, where a ring's closed forms hold exactly: all-reduce 2(n-1)/n V/W +
 *    2(n-1) hops, all-gather and reduce-scatter (n-1) v/W + (n-1) hops, all-to-all V/W +
 *    (n-1) hops (the middle link carries n/2 * n/2 blocks of V/n), a permute to the
 *    neighbour V/W + 1 hop; W the preset's ici_bw_per_link, a hop its ici_latency_s. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/strbuf.h"
#include "chip/timeline.h"
#include "check.h"
#include "tpusim/tpusim.h"
#include "unit/compile/backend_util.h"
#include "util.h"

#define CORPUS "bench/fidelity/corpus/"
#define NCHIPS 4
/* A ratio may drift this far (relative) from the one measured before it fails. */
#define RATIO_TOL 0.05

static const char *const k_gen[NCHIPS] = {"v4", "v5e", "v5p", "v6e"};
/* the tpusim preset of the compiler's device (compare.py PRESET) and the clock its cycles are
 * read at (compare.py COMPILER_CLOCK; docs/fidelity.md "Clocks") */
static const char *const k_preset[NCHIPS] = {"v4:core", "v5e", "v5p", "v6e"};
static const double k_clock[NCHIPS] = {1.05e9, 1.5e9, 1.75e9, 1.75e9};

/* ---- programs ---- */

/* k chained FN over DT[n,n], as gen.py eup() (n = 4096) and vector_ops() write them: bare
 * y = f(y), "mul" y = f(y) * 0.5, "add_mul" y = f(y + 2) * 0.5. */
static char *chain(const char *fn, int k, const char *dt, const char *form, int n) {
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  char t[64];
  snprintf(t, sizeof t, "%s[%d,%d]", dt, n, n);
  tpu_strbuf_printf(&b, "HloModule chain\nENTRY e {\n  y0 = %s parameter(0)\n", t);
  if (strcmp(form, "bare"))
    tpu_strbuf_printf(&b, "  h = %s[] constant(0.5)\n  hb = %s broadcast(h), dimensions={}\n", dt, t);
  if (!strcmp(form, "add_mul"))
    tpu_strbuf_printf(&b, "  two = %s[] constant(2)\n  tb = %s broadcast(two), dimensions={}\n", dt, t);
  for (int i = 0; i < k; i++) {
    const char *root = i == k - 1 ? "ROOT " : "";
    char a[32];
    snprintf(a, sizeof a, "y%d", i);
    if (!strcmp(form, "add_mul")) {
      tpu_strbuf_printf(&b, "  s%d = %s add(y%d, tb)\n", i + 1, t, i);
      snprintf(a, sizeof a, "s%d", i + 1);
    }
    if (!strcmp(form, "bare"))
      tpu_strbuf_printf(&b, "  %sy%d = %s %s(%s)\n", root, i + 1, t, fn, a);
    else
      tpu_strbuf_printf(&b, "  t%d = %s %s(%s)\n  %sy%d = %s multiply(t%d, hb)\n", i + 1, t, fn, a, root, i + 1, t,
                        i + 1);
  }
  tpu_strbuf_printf(&b, "}\n");
  return tpu_strbuf_take(&b);
}

/* 100 multiply-adds per element of f32[4096,4096] (gen.py fma100: y = y * x + i). */
static char *fma100(void) {
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  tpu_strbuf_printf(&b, "HloModule fma\nENTRY e {\n  x = f32[4096,4096] parameter(0)\n");
  const char *y = "x";
  char prev[32];
  for (int i = 0; i < 100; i++) {
    tpu_strbuf_printf(&b,
                      "  c%d = f32[] constant(%d)\n  cb%d = f32[4096,4096] broadcast(c%d), dimensions={}\n"
                      "  m%d = f32[4096,4096] multiply(%s, x)\n  %sy%d = f32[4096,4096] add(m%d, cb%d)\n",
                      i, i, i, i, i, y, i == 99 ? "ROOT " : "", i, i, i);
    snprintf(prev, sizeof prev, "y%d", i);
    y = prev;
  }
  tpu_strbuf_printf(&b, "}\n");
  return tpu_strbuf_take(&b);
}

static char *text(const char *s) {
  size_t n = strlen(s) + 1;
  char *r = malloc(n);
  if (r) memcpy(r, s, n);
  return r;
}

#define F8 "f32[8192,8192]"
static const char *const k_add_reducer = "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n";

/* The probes of gen.py probes() by tag (the JAX functions there, written as JAX lowers them). */
static char *probe(const char *tag) {
  char buf[2048];
  if (!strcmp(tag, "fma100_f32_4096x4096")) return fma100();
  if (!strcmp(tag, "add_f32_8192x8192"))
    return text("HloModule p\nENTRY e {\n  a = " F8 " parameter(0)\n  b = " F8 " parameter(1)\n  ROOT c = " F8
                " add(a, b)\n}\n");
  if (!strcmp(tag, "add5_f32_8192x8192"))
    return text("HloModule p\nENTRY e {\n  a = " F8 " parameter(0)\n  b = " F8 " parameter(1)\n  c = " F8
                " parameter(2)\n  d = " F8 " parameter(3)\n  e = " F8 " parameter(4)\n  ab = " F8
                " multiply(a, b)\n  cd = " F8 " multiply(c, d)\n  s = " F8 " add(ab, cd)\n  ROOT r = " F8
                " add(s, e)\n}\n");
  if (!strcmp(tag, "scale_f32_8192x8192"))
    return text("HloModule p\nENTRY e {\n  a = " F8 " parameter(0)\n  two = f32[] constant(2)\n  tb = " F8
                " broadcast(two), dimensions={}\n  m = " F8 " multiply(a, tb)\n  one = f32[] constant(1)\n  ob = " F8
                " broadcast(one), dimensions={}\n  ROOT r = " F8 " add(m, ob)\n}\n");
  if (!strcmp(tag, "scale_bf16_8192x8192"))
    return text("HloModule p\nENTRY e {\n  a = bf16[8192,8192] parameter(0)\n  two = bf16[] constant(2)\n"
                "  tb = bf16[8192,8192] broadcast(two), dimensions={}\n  m = bf16[8192,8192] multiply(a, tb)\n"
                "  one = bf16[] constant(1)\n  ob = bf16[8192,8192] broadcast(one), dimensions={}\n"
                "  ROOT r = bf16[8192,8192] add(m, ob)\n}\n");
  if (!strcmp(tag, "sumsq0_f32_8192x8192")) {
    snprintf(buf, sizeof buf,
             "HloModule p\n%sENTRY e {\n  a = " F8 " parameter(0)\n  sq = " F8 " multiply(a, a)\n"
             "  z = f32[] constant(0)\n  ROOT s = f32[8192] reduce(sq, z), dimensions={0}, to_apply=add\n}\n",
             k_add_reducer);
    return text(buf);
  }
  int tr, tc;
  char tdt[8];
  if (sscanf(tag, "vmem_read_T_%4[bf1632]_%dx%d", tdt, &tr, &tc) == 3) { /* x.T * 2 */
    const char *t = !strcmp(tdt, "f32") ? "f32" : "bf16";
    snprintf(buf, sizeof buf,
             "HloModule p\nENTRY e {\n  a = %s[%d,%d] parameter(0)\n  t = %s[%d,%d] transpose(a), dimensions={1,0}\n"
             "  two = %s[] constant(2)\n  tb = %s[%d,%d] broadcast(two), dimensions={}\n"
             "  ROOT r = %s[%d,%d] multiply(t, tb)\n}\n",
             t, tr, tc, t, tc, tr, t, t, tc, tr, t, tc, tr);
    return text(buf);
  }
  if (!strcmp(tag, "convert_f32_bf16_8192x8192"))
    return text("HloModule p\nENTRY e {\n  a = " F8 " parameter(0)\n  ROOT c = bf16[8192,8192] convert(a)\n}\n");
  if (!strcmp(tag, "transpose_f32_8192x8192"))
    return text("HloModule p\nENTRY e {\n  a = " F8 " parameter(0)\n  ROOT t = " F8
                " transpose(a), dimensions={1,0}\n}\n");
  if (!strcmp(tag, "sum1_f32_8192x8192")) {
    snprintf(buf, sizeof buf,
             "HloModule p\n%sENTRY e {\n  a = " F8 " parameter(0)\n  z = f32[] constant(0)\n"
             "  ROOT s = f32[8192] reduce(a, z), dimensions={1}, to_apply=add\n}\n",
             k_add_reducer);
    return text(buf);
  }
  int r, c;
  if (sscanf(tag, "neg_f32_%dx%d", &r, &c) == 2) {
    snprintf(buf, sizeof buf, "HloModule p\nENTRY e {\n  a = f32[%d,%d] parameter(0)\n  ROOT n = f32[%d,%d] negate(a)\n}\n",
             r, c, r, c);
    return text(buf);
  }
  int m = 0, k = 0, n = 0;
  const char *out = "bf16";
  if (!strcmp(tag, "gemm_bf16_8192")) m = k = n = 8192;
  else if (!strcmp(tag, "gemm_bf16_128")) m = k = n = 128;
  else if (sscanf(tag, "mm_stream_%dx%dx%d", &m, &k, &n) == 3) {
  } else if (sscanf(tag, "gemm_bf16out_%dx%dx%d", &m, &k, &n) == 3) {
  } else if (sscanf(tag, "gemm_f32out_%dx%dx%d", &m, &k, &n) == 3) out = "f32";
  if (m > 0) {
    snprintf(buf, sizeof buf,
             "HloModule p\nENTRY e {\n  a = bf16[%d,%d] parameter(0)\n  b = bf16[%d,%d] parameter(1)\n"
             "  ROOT d = %s[%d,%d] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
             m, k, k, n, out, m, n);
    return text(buf);
  }
  return NULL;
}

/* ---- the compiler's figures ---- */

static tpu_json_doc g_eup, g_probes, g_vops;

static int load_doc(const char *file, tpu_json_doc *doc) {
  tpu_diag d;
  char path[512];
  snprintf(path, sizeof path, CORPUS "%s", file);
  if (tpu_json_parse_file(path, doc, &d) != TPU_OK) {
    fprintf(stderr, "cannot read %s: %s\n", path, d.msg);
    return 0;
  }
  return 1;
}

static double num(const tpu_json *v) { return v && v->kind == TPU_JSON_NUMBER ? v->num : -1; }

/* The compiler's estimated cycles of a case on generation g, or -1. */
typedef enum { FIG_EUP, FIG_VOPS, FIG_PROBE, FIG_CORPUS } fig_kind;

static double figure(fig_kind kind, const char *key, int g) {
  if (kind == FIG_EUP) return num(tpu_json_get(tpu_json_get(tpu_json_get(g_eup.root, k_gen[g]), "cycles"), key));
  if (kind == FIG_VOPS) return num(tpu_json_get(tpu_json_get(tpu_json_get(g_vops.root, k_gen[g]), "cycles"), key));
  if (kind == FIG_PROBE)
    return num(tpu_json_get(tpu_json_get(tpu_json_get(g_probes.root, k_gen[g]), key), "estimated_cycles"));
  char file[256];
  snprintf(file, sizeof file, "%s.json", key);
  tpu_json_doc doc;
  if (!load_doc(file, &doc)) return -1;
  double v = num(tpu_json_get(tpu_json_get(tpu_json_get(doc.root, "chips"), k_gen[g]), "estimated_cycles"));
  tpu_json_doc_free(&doc);
  return v;
}

/* ---- running ---- */

/* Seconds of one step of `src` on `preset` (`topology` NULL: the default), as `tpusim run
 * --mode timing` reports it; -1 on failure (printed). */
static double step_seconds(const char *name, const char *src, const char *preset, const char *topology) {
  tpu_diag d;
  tpu_sim_module *m = NULL;
  tpu_sim_result *r = NULL;
  double s = -1;
  tpu_sim_options o;
  tpu_sim_options_init(&o);
  o.chip = preset;
  o.mode = "timing";
  o.topology = topology;
  tpu_sim_metrics mt;
  if (tpu_sim_load_text(name, src, strlen(src), &m, &d) == TPU_OK && tpu_sim_run(m, &o, NULL, 0, &r, &d) == TPU_OK &&
      tpu_sim_result_metrics(r, &mt, &d) == TPU_OK)
    s = mt.step_s;
  else {
    char buf[1200];
    tpu_diag_format(&d, buf, sizeof buf);
    fprintf(stderr, "  %s on %s: %s\n", name, preset, buf);
  }
  tpu_sim_result_free(r);
  tpu_sim_module_free(m);
  return s;
}

typedef struct {
  const char *rule;    /* the rule the case pins */
  fig_kind kind;       /* where the compiler's figure is */
  const char *key;     /* eup.json or vector_ops.json key, probes.json tag or corpus program */
  const char *fn, *dt, *form; /* FIG_EUP, FIG_VOPS: the chain (FIG_VOPS: k and n from the key) */
  double want[NCHIPS]; /* tpusim / compiler measured when the case was added (0: none) */
} rule_case;

/* The rule each case pins is what takes most of its time in tpusim's timeline (the unit
 * shares are in docs/testing.md). Ratios far from 1 are known gaps, documented there. */
static const rule_case k_cases[] = {
    /* transcendental unit: one push per 32-bit register at eup_pushes_per_cycle (a 16-bit
     * value widened); exp, tanh, rsqrt without a vector op */
    {"EUP tanh", FIG_EUP, "tanh bare k=64 float32", "tanh", "f32", "bare", {0.968, 0.981, 0.979, 0.981}},
    {"EUP tanh bf16", FIG_EUP, "tanh bare k=64 bfloat16", "tanh", "bf16", "bare", {0.956, 0.978, 0.975, 0.976}},
    {"EUP exp", FIG_EUP, "exp bare k=64 float32", "exponential", "f32", "bare", {0.968, 0.981, 0.979, 0.981}},
    {"EUP rsqrt", FIG_EUP, "rsqrt bare k=64 float32", "rsqrt", "f32", "bare", {0.967, 0.981, 0.979, 0.981}},
    {"EUP sqrt", FIG_EUP, "sqrt bare k=64 float32", "sqrt", "f32", "bare", {2.523, 0.905, 0.938, 1.616}},
    {"EUP+VPU log", FIG_EUP, "log bare k=64 float32", "log", "f32", "bare", {1.003, 0.987, 0.986, 0.987}},
    {"EUP+VPU logistic", FIG_EUP, "logistic bare k=64 float32", "logistic", "f32", "bare", {1.008, 0.994, 0.993, 0.994}},
    {"EUP+VPU exp*0.5", FIG_EUP, "exp mul k=64 float32", "exponential", "f32", "mul", {1.003, 0.993, 0.991, 0.992}},
    {"VPU+EUP rsqrt(y+2)*0.5", FIG_EUP, "rsqrt add_mul k=64 float32", "rsqrt", "f32", "add_mul", {1.012, 0.998, 0.997, 0.998}},
    {"VPU+EUP log(y+2)*0.5", FIG_EUP, "log add_mul k=64 float32", "log", "f32", "add_mul", {1.018, 0.999, 0.997, 0.998}},
    /* vector unit: sine and cosine, a polynomial of 150 vector ops per 32-bit register
     * (a 16-bit value widened) */
    {"VPU sine", FIG_VOPS, "sin mul k=6 float32 2048", "sine", "f32", "mul", {0.790, 0.974, 0.973, 1.054}},
    {"VPU cosine", FIG_VOPS, "cos mul k=6 float32 2048", "cosine", "f32", "mul", {0.790, 0.974, 0.973, 1.054}},
    {"VPU sine bf16 (widened)", FIG_VOPS, "sin mul k=6 bfloat16 2048", "sine", "bf16", "mul", {0.786, 0.971, 0.970, 1.050}},
    /* vector unit: vector_ops_per_cycle register-wide operations */
    {"VPU fma x100", FIG_PROBE, "fma100_f32_4096x4096", NULL, NULL, NULL, {1.010, 1.012, 1.012, 1.012}},
    /* HBM streaming (DMA in and out at hbm_bw x hbm_efficiency, stream costs) */
    {"HBM add", FIG_PROBE, "add_f32_8192x8192", NULL, NULL, NULL, {1.017, 1.033, 1.049, 1.018}},
    {"HBM add5", FIG_PROBE, "add5_f32_8192x8192", NULL, NULL, NULL, {1.007, 1.013, 1.019, 1.006}},
    {"HBM scale", FIG_PROBE, "scale_f32_8192x8192", NULL, NULL, NULL, {1.000, 1.002, 1.008, 0.913}},
    {"HBM lone negate", FIG_PROBE, "neg_f32_8192x8192", NULL, NULL, NULL, {1.007, 1.009, 1.017, 0.999}},
    {"HBM convert", FIG_PROBE, "convert_f32_bf16_8192x8192", NULL, NULL, NULL, {1.013, 1.023, 1.034, 1.045}},
    {"HBM transpose", FIG_PROBE, "transpose_f32_8192x8192", NULL, NULL, NULL, {1.006, 1.011, 1.017, 1.001}},
    {"HBM lone reduce", FIG_PROBE, "sum1_f32_8192x8192", NULL, NULL, NULL, {1.008, 1.010, 1.018, 1.038}},
    {"HBM stream pass bf16", FIG_PROBE, "scale_bf16_8192x8192", NULL, NULL, NULL, {1.005, 1.015, 1.023, 1.001}},
    {"HBM stream pass reduce", FIG_PROBE, "sumsq0_f32_8192x8192", NULL, NULL, NULL, {1.007, 1.016, 1.026, 1.003}},
    {"VMEM read f32", FIG_PROBE, "vmem_read_T_f32_4096x4096", NULL, NULL, NULL, {1.142, 1.007, 1.019, 0.946}},
    {"VMEM read bf16", FIG_PROBE, "vmem_read_T_bf16_8192x2048", NULL, NULL, NULL, {1.142, 1.014, 1.022, 1.035}},
    {"lone op 512 rows", FIG_PROBE, "neg_f32_512x1024", NULL, NULL, NULL, {1.089, 0.995, 1.074, 0.983}},
    {"lone op 2048 rows", FIG_PROBE, "neg_f32_2048x1024", NULL, NULL, NULL, {1.003, 1.023, 1.054, 1.019}},
    /* a kernel's start (kernel_overhead_s, the HBM latency) */
    {"kernel start 128x128", FIG_PROBE, "neg_f32_128x128", NULL, NULL, NULL, {1.075, 0.965, 0.982, 0.961}},
    {"kernel start 256x256", FIG_PROBE, "neg_f32_256x256", NULL, NULL, NULL, {1.128, 1.004, 1.004, 0.983}},
    /* MXU: GEMMs of several shapes and dtypes */
    {"MXU bf16 8192^3", FIG_PROBE, "gemm_bf16_8192", NULL, NULL, NULL, {1.011, 0.998, 0.993, 0.893}},
    {"MXU bf16 128^3 (matmul start)", FIG_PROBE, "gemm_bf16_128", NULL, NULL, NULL, {1.060, 1.000, 0.995, 0.923}},
    {"MXU bf16 4096^3", FIG_CORPUS, "gemm_bf16_4096x4096x4096", NULL, NULL, NULL, {0.912, 0.994, 1.002, 0.964}},
    {"MXU bf16 2048x8192x2048", FIG_CORPUS, "gemm_bf16_2048x8192x2048", NULL, NULL, NULL, {0.928, 0.995, 0.991, 0.937}},
    {"MXU bf16 777x1234x555", FIG_CORPUS, "gemm_bf16_777x1234x555", NULL, NULL, NULL, {0.888, 0.980, 0.903, 0.941}},
    {"MXU f32 2048^3", FIG_CORPUS, "gemm_f32_2048x2048x2048", NULL, NULL, NULL, {0.891, 1.008, 1.014, 0.872}},
    {"MXU f32 4096^3", FIG_CORPUS, "gemm_f32_4096x4096x4096", NULL, NULL, NULL, {0.902, 0.969, 0.797, 0.903}},
    {"MXU batched bf16 8x1024^3", FIG_CORPUS, "bmm_bf16_8x1024x1024x1024", NULL, NULL, NULL, {0.852, 0.841, 0.883, 0.832}},
    {"MXU result pass bf16", FIG_PROBE, "gemm_bf16out_8192x128x8192", NULL, NULL, NULL, {1.004, 1.020, 1.038, 0.991}},
    {"MXU result pass f32", FIG_PROBE, "gemm_f32out_8192x128x8192", NULL, NULL, NULL, {0.995, 0.984, 0.984, 0.990}},
    {"MXU weight stream", FIG_PROBE, "mm_stream_16x8192x8192", NULL, NULL, NULL, {1.016, 1.027, 1.045, 1.032}},
    /* convolutions on the MXU */
    {"conv 3x3 7x7x512 bf16", FIG_CORPUS, "conv_fwd_c3x3_7_512_bf16", NULL, NULL, NULL, {0.991, 1.013, 1.029, 0.999}},
    {"conv 3x3 28x28x128 f32", FIG_CORPUS, "conv_fwd_c3x3_28_128_f32", NULL, NULL, NULL, {0.998, 1.029, 1.009, 0.990}},
    {"conv 1x1 14x14 1024->256", FIG_CORPUS, "conv_fwd_c1x1_14_1024_256_bf16", NULL, NULL, NULL, {0.946, 1.027, 1.027, 0.935}},
    {"conv 3x3 14x14x256 bf16", FIG_CORPUS, "conv_fwd_c3x3_14_256_bf16", NULL, NULL, NULL, {1.005, 1.041, 1.055, 0.977}},
    {"conv backward 3x3", FIG_CORPUS, "conv_bwd_c3x3_14_256_bf16", NULL, NULL, NULL, {0.997, 1.041, 1.055, 1.056}},
    /* whole ops of the corpus, each the mix of rules its kind needs */
    {"MXU few rows (weight load)", FIG_CORPUS, "decode_bf16_8x4096x4096", NULL, NULL, NULL, {0.949, 0.964, 0.970, 0.918}},
    {"vector dots (decode attention)", FIG_CORPUS, "attn_decode_b8h32kv2048d128", NULL, NULL, NULL, {0.993, 0.979, 0.974, 0.989}},
    {"argmax", FIG_CORPUS, "argmax_8192x32000_bf16", NULL, NULL, NULL, {0.985, 0.970, 0.963, 0.956}},
    /* the compiler's figure is its copy of the parameter into {3,2,1,0} alone (the reduce-window
     * unestimated); session 26's v5p per-row copy rule: tpusim's copy.relayout 322,249 -> 461,104
     * against the compiler's 481,208, its window's 100,068 counting against nothing: 0.878 -> 1.166 */
    {"reduce-window (max pool)", FIG_CORPUS, "maxpool3x3s2_32x112x112x64_bf16", NULL, NULL, NULL, {0.985, 2.159, 1.166, 0.848}},
    {"softmax", FIG_CORPUS, "softmax_8192x32000_bfloat16", NULL, NULL, NULL, {1.001, 0.995, 0.998, 1.009}},
    {"layer norm", FIG_CORPUS, "layernorm_fwd_8192x4096_bfloat16", NULL, NULL, NULL, {0.991, 0.989, 1.015, 0.980}},
    {"cross entropy", FIG_CORPUS, "cross_entropy_8192x32000_bf16", NULL, NULL, NULL, {0.998, 0.986, 1.000, 0.979}},
    {"transpose 0213", FIG_CORPUS, "transpose_32x1024x16x128_p0213_bfloat16", NULL, NULL, NULL, {1.003, 1.015, 1.022, 1.001}},
    {"reduce over two axes", FIG_CORPUS, "reduce_sum_64x1024x1024_ax12_bfloat16", NULL, NULL, NULL, {0.997, 0.985, 0.980, 0.973}},
    {"silu * x", FIG_CORPUS, "silu_mul_16x1024x11008_bf16", NULL, NULL, NULL, {1.001, 1.015, 1.028, 1.022}},
    {"Adam", FIG_CORPUS, "adam_f32_16777216", NULL, NULL, NULL, {1.003, 1.012, 1.068, 1.006}},
    {"GEMM + bias + gelu", FIG_CORPUS, "gemm_bias_gelu_bf16_2048x4096x4096", NULL, NULL, NULL, {0.960, 1.007, 1.029, 0.979}},
    /* the causal mask (iota compare, broadcast over batch and heads) a kernel of its own, as the
     * compiler's iota_compare_fusion (fuse.c chained): v5p 0.777 -> 0.728, v6e 1.001 -> 0.939;
     * v5p's reducing epilogues (chip epilogue_reduce_serial): attention 0.728 -> 0.917, the
     * layer 0.863 -> 0.954 */
    {"attention forward", FIG_CORPUS, "attn_fwd_b4h16s1024d128_causal", NULL, NULL, NULL, {0.962, 0.881, 0.917, 0.939}},
    /* session 25 (fuse_resid.c): the residual add stored by its output projection's kernel, the
     * next norm's row sums a second result, as the compiler's fusion (probes/resid_norm.py):
     * v4 1.067 -> 1.004, v5e 0.979 -> 0.939, v5p 0.954 -> 0.905, v6e 1.038 -> 0.970 */
    {"transformer layer forward", FIG_CORPUS, "layer_fwd_b4s1024d1024", NULL, NULL, NULL, {1.004, 0.939, 0.905, 0.970}},
};

static void against_compiler(void) {
  if (!load_doc("eup.json", &g_eup)) {
    CHECK(0);
    return;
  }
  if (!load_doc("probes.json", &g_probes)) {
    CHECK(0);
    tpu_json_doc_free(&g_eup);
    return;
  }
  if (!load_doc("vector_ops.json", &g_vops)) {
    CHECK(0);
    tpu_json_doc_free(&g_eup);
    tpu_json_doc_free(&g_probes);
    return;
  }
  int n = 0;
  printf("%-32s %-28s", "rule", "probe");
  for (int g = 0; g < NCHIPS; g++) printf("  %-13s", k_gen[g]);
  printf("   (tpusim / compiler, [measured])\n");
  for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
    const rule_case *c = &k_cases[i];
    char *src = NULL;
    int vk = 0, vn = 0;
    if (c->kind == FIG_EUP) src = chain(c->fn, 64, c->dt, c->form, 4096);
    else if (c->kind == FIG_VOPS && sscanf(strstr(c->key, "k=") ? strstr(c->key, "k=") : "", "k=%d %*s %d", &vk, &vn) == 2)
      src = chain(c->fn, vk, c->dt, c->form, vn);
    else if (c->kind == FIG_PROBE) src = probe(c->key);
    else {
      char path[256];
      snprintf(path, sizeof path, CORPUS "%s.hlo", c->key);
      src = test_read_file(path);
    }
    CHECK(src != NULL);
    if (!src) {
      fprintf(stderr, "  no program for %s\n", c->key);
      continue;
    }
    printf("%-32s %-28.28s", c->rule, c->key);
    for (int g = 0; g < NCHIPS; g++) {
      if (c->want[g] <= 0) {
        printf("  %-13s", "-");
        continue;
      }
      double cyc = figure(c->kind, c->key, g);
      CHECK(cyc > 0);
      double s = step_seconds(c->key, src, k_preset[g], NULL);
      CHECK(s > 0);
      double r = cyc > 0 && s > 0 ? s / (cyc / k_clock[g]) : NAN;
      int ok = fabs(r / c->want[g] - 1) <= RATIO_TOL;
      printf("  %.3f [%.3f]%s", r, c->want[g], ok ? "" : "!");
      if (!ok)
        fprintf(stderr, "\n%s:%d: %s (%s) on %s: tpusim / compiler = %.3f, measured %.3f (tolerance %.0f %%)\n",
                __FILE__, __LINE__, c->rule, c->key, k_gen[g], r, c->want[g], 100 * RATIO_TOL);
      CHECK(ok);
      n++;
    }
    printf("\n");
    free(src);
  }
  printf("%d rule checks against the XLA TPU compiler's estimates\n", n);
  CHECK(n >= 100);
  tpu_json_doc_free(&g_eup);
  tpu_json_doc_free(&g_probes);
  tpu_json_doc_free(&g_vops);
}

/* ---- per-op vector costs with no compiler figure (the model's own table, pinned) ----
 *
 * The ops the probes above do not reach, each alone over f32[4096,4096] (16,384 registers)
 * on v5e (4 vector ops and 2 EUP pushes per cycle): its VPU and EUP busy cycles are its
 * registers times its ops per register (op_cost.c tpu__elem_cost, docs/timing.md) over the rates, and
 * under 4 % more (each tile's instruction rounds up its cycles). These are regression pins, not independent figures: a change to the table must
 * change the expected ops here, in the same commit, with its reason. */
static void op_costs(void) {
  static const struct {
    const char *op;
    int arity, vpu, eup;
  } k[] = {{"divide", 2, 2, 1},   {"remainder", 2, 5, 1}, {"power", 2, 3, 2},       {"atan2", 2, 20, 1},
           {"sign", 1, 2, 0},     {"log", 1, 1, 1},       {"logistic", 1, 2, 2},    {"exponential-minus-one", 1, 3, 1},
           {"log-plus-one", 1, 3, 1}, {"cbrt", 1, 3, 2},  {"sine", 1, 150, 0},      {"cosine", 1, 150, 0},
           {"tan", 1, 34, 1},     {"erf", 1, 12, 1},      {"add", 2, 1, 0},         {"multiply", 2, 1, 0},
           {"exponential", 1, 0, 1}, {"tanh", 1, 0, 1},   {"rsqrt", 1, 0, 1},       {"sqrt", 1, 0, 1}};
  const int64_t regs = 4096 * 4096 / 1024;
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    char src[512];
    snprintf(src, sizeof src,
             "HloModule o\nENTRY e {\n  a = f32[4096,4096] parameter(0)\n%s  ROOT r = f32[4096,4096] %s(a%s)\n}\n",
             k[i].arity == 2 ? "  b = f32[4096,4096] parameter(1)\n" : "", k[i].op, k[i].arity == 2 ? ", b" : "");
    tpu_chip c;
    tpu_module *m = NULL;
    tpu_program *p = compile_for("v5e", src, &c, &m);
    tpu_timeline tl;
    if (p && time_program(p, &c, &tl)) {
      int64_t vpu = regs * k[i].vpu / (int64_t)c.vector_ops_per_cycle, eup = regs * k[i].eup / (int64_t)c.eup_pushes_per_cycle;
      int ok = tl.busy[TPU_UNIT_VPU] >= vpu && tl.busy[TPU_UNIT_VPU] <= vpu + vpu / 25 &&
               tl.busy[TPU_UNIT_EUP] >= eup && tl.busy[TPU_UNIT_EUP] <= eup + eup / 25;
      if (!ok)
        fprintf(stderr, "%s: VPU %lld EUP %lld cycles, want %lld %lld (%d vector ops, %d pushes per register)\n",
                k[i].op, (long long)tl.busy[TPU_UNIT_VPU], (long long)tl.busy[TPU_UNIT_EUP], (long long)vpu,
                (long long)eup, k[i].vpu, k[i].eup);
      CHECK(ok);
      tpu_timeline_free(&tl);
    }
    tpu_program_free(p);
    tpu_module_free(m);
  }
  /* a sum over rows: one vector op per input register; the random bit generator: 40 per
   * output register; a scatter-add: two per update register (the update and the add; its
   * f32[4096,1024] updates are 4,096 registers) */
  const char *more[3] = {
      "HloModule r\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
      "ENTRY e {\n  a = f32[4096,4096] parameter(0)\n  z = f32[] constant(0)\n"
      "  ROOT s = f32[4096] reduce(a, z), dimensions={0}, to_apply=add\n}\n",
      "HloModule g\nENTRY e {\n  s = u64[2] parameter(0)\n"
      "  ROOT r = (u64[2], u32[4096,4096]) rng-bit-generator(s), algorithm=rng_default\n}\n",
      "HloModule s\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
      "ENTRY e {\n  o = f32[8192,1024] parameter(0)\n  i = s32[4096,1] parameter(1)\n  u = f32[4096,1024] parameter(2)\n"
      "  ROOT s = f32[8192,1024] scatter(o, i, u), update_window_dims={1}, inserted_window_dims={0},"
      " scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n}\n"};
  const int64_t want_ops[3] = {1, 40, 2}, nregs[3] = {regs, regs, regs / 4};
  const char *what[3] = {"sum over rows", "rng-bit-generator", "scatter-add"};
  for (int i = 0; i < 3; i++) {
    tpu_chip c;
    tpu_module *m = NULL;
    tpu_program *p = compile_for("v5e", more[i], &c, &m);
    tpu_timeline tl;
    if (p && time_program(p, &c, &tl)) {
      int64_t vpu = nregs[i] * want_ops[i] / (int64_t)c.vector_ops_per_cycle;
      printf("%s: VPU busy %lld cycles (%lld ops per register: %lld)\n", what[i], (long long)tl.busy[TPU_UNIT_VPU],
             (long long)want_ops[i], (long long)vpu);
      CHECK(tl.busy[TPU_UNIT_VPU] >= vpu && tl.busy[TPU_UNIT_VPU] <= vpu + vpu / 25);
      tpu_timeline_free(&tl);
    }
    tpu_program_free(p);
    tpu_module_free(m);
  }
}

/* ---- the cross-lane unit (closed form) ---- */

/* One 8x128 register per cycle per TensorCore through the cross-lane unit: a sum over the
 * lanes (the minor dimension) of f32[4096,4096] (16,384 registers) and a transpose of it
 * (moves the minor dimension) each keep it busy 16,384 cycles on a one-core chip, 8,192 on
 * v5p's two (within 1 %); a sum over the rows (axis 0) does not use it. The lanes are the
 * minor dimension of the layout, not the last one: in a compiled program's f32[4096,4096]{0,1}
 * the sum over axis 0 crosses lanes and the one over axis 1 does not. */
static void cross_lane(void) {
  const char *red = "HloModule r\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
                    "ENTRY e {\n  a = f32[4096,4096] parameter(0)\n  z = f32[] constant(0)\n"
                    "  ROOT s = f32[4096] reduce(a, z), dimensions={%d}, to_apply=add\n}\n";
  const char *red_t = "HloModule r\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
                      "ENTRY e {\n  a = f32[4096,4096]{0,1} parameter(0)\n  z = f32[] constant(0)\n"
                      "  ROOT s = f32[4096]{0} reduce(a, z), dimensions={%d}, to_apply=add\n}\n";
  const char *tr = "HloModule t\nENTRY e {\n  a = f32[4096,4096] parameter(0)\n  ROOT t = f32[4096,4096] transpose(a), dimensions={1,0}\n}\n";
  const char *chips[] = {"v5e", "v5p", "v6e"};
  for (int ci = 0; ci < 3; ci++) {
    for (int k = 0; k < 5; k++) {
      char src[1024];
      if (k < 2) snprintf(src, sizeof src, red, k == 0 ? 1 : 0);
      else if (k == 2) snprintf(src, sizeof src, "%s", tr);
      else snprintf(src, sizeof src, red_t, k == 3 ? 0 : 1);
      tpu_chip c;
      tpu_module *m = NULL;
      tpu_program *p = compile_for(chips[ci], src, &c, &m);
      tpu_timeline tl;
      if (p && time_program(p, &c, &tl)) {
        int64_t want = k == 1 || k == 4 ? 0 : 4096 * 4096 / 1024 / c.tensorcores;
        printf("%s %s: cross-lane busy %lld cycles (closed form %lld)\n", chips[ci],
               k == 0 ? "sum over lanes" : k == 1 ? "sum over rows" : k == 2 ? "transpose"
               : k == 3 ? "{0,1}: sum over axis 0 (lanes)" : "{0,1}: sum over axis 1 (rows)", (long long)tl.busy[TPU_UNIT_XLU],
               (long long)want);
        /* the reduction's last partial sums add under 1 % (61 cycles of 16,384) */
        CHECK(tl.busy[TPU_UNIT_XLU] >= want && tl.busy[TPU_UNIT_XLU] <= want + want / 100);
        tpu_timeline_free(&tl);
      }
      tpu_program_free(p);
      tpu_module_free(m);
    }
  }
}

/* ---- collectives on the ICI model (closed forms) ---- */

static void collectives(void) {
  const char *reducer = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n";
  const char *chips[NCHIPS] = {"v4", "v5e", "v5p", "v6e"};
  int checked = 0;
  for (int ci = 0; ci < NCHIPS; ci++) {
    tpu_chip chip;
    tpu_diag d;
    CHECK(tpu_chip_load(chips[ci], &chip, &d) == TPU_OK);
    const double W = chip.ici_bw_per_link, a = chip.ici_latency_s;
    const int three_d = chip.topology == TPU_TOPO_TORUS_3D;
    for (int kind = 0; kind < 6; kind++) {
      /* n chips in a line; V the operand's bytes (f32[e]) */
      int n = kind == 5 ? 8 : 4;
      int64_t e = kind == 5 ? 256 : 4194304;
      double V = 4.0 * (double)e, want = 0;
      char op[512], src[2048], topo[32];
      const char *res = "f32[4194304]";
      char resbuf[64];
      switch (kind) {
        case 0: /* all-reduce */
        case 5: /* the same, latency-bound, over 8 */
          snprintf(resbuf, sizeof resbuf, "f32[%lld]", (long long)e);
          res = resbuf;
          snprintf(op, sizeof op, "all-reduce(p), channel_id=1, replica_groups=[1,%d]<=[%d], use_global_device_ids=true, to_apply=add", n, n);
          want = 2.0 * (n - 1) / n * V / W + 2 * (n - 1) * a;
          break;
        case 1: /* all-gather of V-byte shards */
          res = "f32[16777216]";
          snprintf(op, sizeof op, "all-gather(p), channel_id=1, replica_groups=[1,4]<=[4], dimensions={0}, use_global_device_ids=true");
          want = (n - 1) * V / W + (n - 1) * a;
          break;
        case 2: /* reduce-scatter to V/n-byte results */
          res = "f32[1048576]";
          snprintf(op, sizeof op, "reduce-scatter(p), channel_id=1, replica_groups=[1,4]<=[4], dimensions={0}, use_global_device_ids=true, to_apply=add");
          want = (n - 1) * (V / n) / W + (n - 1) * a;
          break;
        case 3: /* all-to-all: the middle link carries (n/2)^2 blocks of V/n */
          snprintf(op, sizeof op, "all-to-all(p), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}");
          want = (n / 2) * (n / 2) * (V / n) / W + (n - 1) * a;
          break;
        case 4: /* each chip to its neighbour */
          snprintf(op, sizeof op, "collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3}}");
          want = V / W + a;
          break;
      }
      snprintf(src, sizeof src, "HloModule c, num_partitions=%d\n%sENTRY e {\n  p = f32[%lld] parameter(0)\n  ROOT r = %s %s\n}\n",
               n, strstr(op, "to_apply") ? reducer : "", (long long)e, res, op);
      snprintf(topo, sizeof topo, three_d ? "%dx1x1" : "%dx1", n);
      double s = step_seconds("collective", src, chips[ci], topo);
      const char *names[] = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
                             "all-reduce 1 KiB"};
      /* the step adds the kernel's start and the like: under a microsecond */
      int ok = s >= want - 1e-9 && s <= want * 1.01 + 1e-6;
      printf("%s %-18s over a line of %d: %9.3f us, closed form %9.3f us%s\n", chips[ci], names[kind], n, s * 1e6,
             want * 1e6, ok ? "" : "  <- outside [closed form, +1 % + 1 us]");
      CHECK(ok);
      checked++;
    }
  }
  CHECK_EQ_INT(checked, 24);
}

int main(void) {
  against_compiler();
  op_costs();
  cross_lane();
  collectives();
  CHECK_DONE();
}
