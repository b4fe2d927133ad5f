/* Programs as the real XLA TPU compiler compiled them (tests/tpu/cases, libtpu
 * compile-only): tpusim runs and times the compiled program as it is — tiled layouts, S(n)
 * memory spaces, copy-start/copy-done, its fusions and custom calls — and its values on the
 * TPU backend equal those of the program it came from (prog.hlo, same backend), bit for bit
 * where the compiler kept the arithmetic and within 1e-5 relative where it rewrote it.
 * Pallas kernels (tpu_custom_call: their body is not HLO) are refused by name; the test
 * checks that too. The compiled program's values are also checked against JAX's (outK.npy:
 * XLA CPU on prog.hlo, per output within jax.json's atol), and its cycles against the compiler's
 * estimated_cycles within 5 % of the ratio measured before (measured_ratio). */
#include <math.h>

#include "cases.h"
#include "check.h"
#include "chip/program.h"
#include "chip/timing.h"
#include "compile/compile.h"
#include "pod/cost.h"
#include "util.h"

#define CASES "tests/tpu/cases"

static tpu_status load(const char *name, const char *file, tpu_module **m, tpu_diag *d) {
  char path[512];
  snprintf(path, sizeof path, CASES "/%s/%s", name, file);
  *m = NULL;
  TPU_TRY(tpu_hlo_parse_file(path, m, d));
  return tpu_ir_verify(*m, d);
}

static tpu_status values(const tpu_module *m, const tpu_chip *chip, const char *name, tpu_tensor *out, tpu_diag *d) {
  int n = m->entry->nparams;
  tpu_tensor args[16];
  int got = 0;
  tpu_status st = n <= 16 ? TPU_OK : TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(), "too many inputs");
  for (; st == TPU_OK && got < n; got++) {
    char path[512];
    snprintf(path, sizeof path, CASES "/%s/in%d.npy", name, got);
    st = tpu_ref_load_input(path, got, &m->entry->params[got]->shape, &args[got], d);
    if (st != TPU_OK) break;
  }
  if (st == TPU_OK) st = tpu_chip_run_values(m, chip, -1, args, n, out, d);
  for (int i = 0; i < got; i++) tpu_tensor_free(&args[i]);
  return st;
}

/* tpusim's cycles over the compiler's estimated_cycles for each compiled program (both v5e
 * cycles), as measured when the band was set: a change of 5 % either way fails. The known
 * gaps, not yet explained (docs/testing.md): scan_tanh 6.7x, mlp_sgd_step 1.36x (the compiled
 * programs' own copies into VMEM read there, a generated block not loaded and no fusion of
 * the compiler's kernels took conv 1.29x -> 1.03x, conv_grad 1.30x -> 0.92x, mlp_sgd_step
 * 1.52x -> 1.36x, layernorm 0.77x -> 0.94x, softmax 0.64x -> 0.96x). scan_tanh 6.69x ->
 * 7.66x when its loop state stayed in VMEM as the compiler has it (S(1): the weight stack the
 * body reads each iteration; docs/timing.md, "Memory spaces"): the body's matmul now reads
 * it on chip, a pass tpusim charges in the kernel's own time, where its HBM read was
 * prefetched beside the kernel before. 7.66x -> 6.39x when the compiled loop counter's
 * compare and increment stayed in scalar memory (layout.c scalar_layout: no HBM latency
 * each step) and the body's kernels paid their read latency from their own start (timing.c;
 * the compiler's figure here is its entry's alone, the loop body left out). conv 1.082 ->
 * 1.147 (session 19) when its pad within VMEM into bf16 T(8,128)(2,1) tiles paid its 48 tiles
 * after the start and the HBM latency (copy_kind.c relayout_tiles, tile.c): 969 -> 2,149
 * cycles against the compiler's 2,389; its other kernels are over. */
/* conv 1.147 -> 1.001, conv_grad 0.922 -> 0.847 (session 32, scanbwd): v5e's matmul kernels with
 * no transfer pay no start (chip matmul_resident_no_start, docs/timing.md). */
static double measured_ratio(const char *name) {
  static const struct {
    const char *name;
    double ratio;
  } k[] = {{"adam", 1.032},          {"conv", 1.001},     {"conv_grad", 0.847},        {"embed", 1.091},
           {"gemm_bf16", 1.000},     {"gemm_f32_default", 1.008}, {"layernorm", 0.942}, {"mlp_sgd_step", 1.239},
           {"reduce_transpose", 1.064}, {"scan_tanh", 6.385}, {"softmax", 0.964}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (!strcmp(k[i].name, name)) return k[i].ratio;
  fprintf(stderr, "  %s: no measured ratio to the compiler's estimate (add its band)\n", name);
  return -1;
}

/* tpusim's values of the compiled program (`b`, the TPU backend at each op's precision) against
 * JAX's on XLA's CPU backend (outK.npy, tests/tpu/jax_outputs.py), output by output within
 * jax.json's atol (3x the error measured when the outputs were stored). 1 when checked. */
static int against_jax(const char *name, const tpu_tensor *const *got, int n) {
  char path[512];
  tpu_diag d;
  tpu_json_doc doc;
  snprintf(path, sizeof path, CASES "/%s/jax.json", name);
  CHECK(tpu_json_parse_file(path, &doc, &d) == TPU_OK);
  if (!doc.root) return 0;
  const tpu_json *outs = tpu_json_get(doc.root, "outputs");
  CHECK(outs && outs->kind == TPU_JSON_ARRAY && (int)outs->count == n);
  int ok = outs && (int)outs->count == n;
  for (int k = 0; ok && k < n; k++) {
    const tpu_json *atol = tpu_json_get(outs->items[k], "atol");
    tpu_tensor want;
    snprintf(path, sizeof path, CASES "/%s/out%d.npy", name, k);
    int read = atol && atol->kind == TPU_JSON_NUMBER && tpu_npy_read(path, &want, &d) == TPU_OK;
    CHECK(read);
    if (!read) {
      ok = 0;
      break;
    }
    char label[300];
    snprintf(label, sizeof label, "%s tpu.hlo vs JAX", name);
    CHECK(test_compare_leaf(label, k, got[k], &want, 0, atol->num) == 0);
    tpu_tensor_free(&want);
  }
  tpu_json_doc_free(&doc);
  return ok;
}

int main(void) {
  tpu_diag d;
  tpu_chip chip;
  if (tpu_chip_load("v5e", &chip, &d) != TPU_OK) return 1;
  int n;
  char **names = case_list(CASES, &n);
  CHECK(names && n >= 10);
  int same = 0, close = 0, refused = 0, timed = 0, jax_checked = 0;
  for (int i = 0; names && i < n; i++) {
    const char *name = names[i];
    if (!strncmp(name, "pod_", 4)) { /* several chips: tests/cli/tpu_pod.sh runs them */
      free(names[i]);
      continue;
    }
    tpu_module *src = NULL, *tpu = NULL;
    CHECK(load(name, "prog.hlo", &src, &d) == TPU_OK);
    tpu_status st = load(name, "tpu.hlo", &tpu, &d);
    CHECK(st == TPU_OK);
    if (st != TPU_OK) fprintf(stderr, "  %s tpu.hlo: %s (line %d)\n", name, d.msg, d.line);
    char path[512];
    snprintf(path, sizeof path, CASES "/%s/meta.json", name);
    char *meta = test_read_file(path);
    int pallas = meta && strstr(meta, "tpu_custom_call");
    tpu_tensor a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    if (src && tpu && st == TPU_OK) {
      st = values(tpu, &chip, name, &b, &d);
      if (pallas) { /* refused by name, never computed wrong */
        CHECK(st != TPU_OK && strstr(d.msg, "tpu_custom_call") && strstr(d.msg, "Pallas"));
        refused++;
      } else {
        CHECK(st == TPU_OK);
        if (st != TPU_OK) fprintf(stderr, "  %s tpu.hlo values: %s\n", name, d.msg);
        CHECK(values(src, &chip, name, &a, &d) == TPU_OK);
        int na = tpu_tensor_count_leaves(&a), nb = tpu_tensor_count_leaves(&b);
        const tpu_tensor *la[16], *lb[16];
        CHECK(na == nb && na <= 16);
        if (na == nb && na <= 16 && st == TPU_OK) {
          tpu_tensor_collect_leaves(&a, la);
          tpu_tensor_collect_leaves(&b, lb);
          int bits = 1;
          for (int k = 0; k < na; k++) {
            bits &= la[k]->nbytes == lb[k]->nbytes && !memcmp(la[k]->data, lb[k]->data, la[k]->nbytes);
            char label[300];
            snprintf(label, sizeof label, "%s tpu.hlo vs prog.hlo", name);
            /* The compiler reorders f32 sums (a conv's gradient split differently): the
             * tolerance is relative to the output's largest magnitude, not each element's. */
            double big = 0;
            for (int64_t e = 0, ne = tpu_tensor_numel(la[k]); e < ne; e++) {
              double v = fabs(tpu_tensor_get_f64(la[k], e));
              if (v > big && v < INFINITY) big = v;
            }
            CHECK(test_compare_leaf(label, k, lb[k], la[k], 1e-5, big > 1 ? 1e-6 * big : 1e-6) == 0);
          }
          same += bits;
          close += !bits;
          jax_checked += against_jax(name, lb, nb);
        }
      }
      /* It also times as compiled (the compiler's own decisions kept). */
      tpu_pod_cost_ctx pc;
      memset(&pc, 0, sizeof pc);
      pc.chip = &chip;
      tpu_compile_opts o = {&chip, NULL, NULL, -1, tpu_pod_coll_cost, &pc, 0, 0, NULL, NULL, tpu_pod_hops, NULL};
      tpu_program *p = NULL;
      tpu_timeline tl;
      memset(&tl, 0, sizeof tl);
      tpu_status cs = tpu_compile(tpu, &o, &p, &d);
      if (pallas) {
        CHECK(cs != TPU_OK && strstr(d.msg, "TPU back end"));
      } else {
        CHECK(cs == TPU_OK && tpu_timing_run(p, &chip, 0, &tl, &d) == TPU_OK);
        if (cs == TPU_OK) {
          const char *e = meta ? strstr(meta, "\"estimated_cycles\":") : NULL;
          long long est = e ? strtoll(e + 19, NULL, 10) : -1LL;
          double want = measured_ratio(name), r = est > 0 ? (double)tl.total_cycles / (double)est : NAN;
          int ok = want > 0 && fabs(r / want - 1) <= 0.05;
          printf("  %-18s tpusim %9lld cycles; the compiler's estimate %9lld: ratio %.3f (measured %.3f)%s\n", name,
                 (long long)tl.total_cycles, est, r, want, ok ? "" : "  <- outside 5 %");
          CHECK(ok);
          timed += ok;
        }
      }
      tpu_timeline_free(&tl);
      tpu_program_free(p);
      tpu_pod_cost_free(&pc);
    }
    free(meta);
    tpu_tensor_free(&a);
    tpu_tensor_free(&b);
    tpu_module_free(src);
    tpu_module_free(tpu);
    free(names[i]);
  }
  free(names);
  printf("TPU-compiled programs: %d bit-identical to their source, %d within 1e-6 of the largest output, %d Pallas kernels "
         "refused; %d within their tolerances of JAX's values; %d timed within 5 %% of the ratio to the compiler's estimate "
         "measured before\n",
         same, close, refused, jax_checked, timed);
  CHECK(jax_checked >= 10 && timed >= 10);
  CHECK_DONE();
}
