/* Every numeric chip field at both ends of its documented range (chips/README.md "Ranges"):
 * the loader accepts the ends and refuses just beyond them, at the field; a chip with any
 * one field at an end compiles, times and runs a small program and a 4-device pod program
 * without a failure of the simulator (on the sanitizer build: without a UBSan report, which
 * aborts). Values outside the ranges never reach the compiler or the timing model. */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/json.h"
#include "check.h"
#include "chip/chip.h"
#include "chip/exec.h"
#include "chip/program.h"
#include "chip/timing.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "pod/cost.h"

static const char k_prog[] =
    "HloModule ranges\n"
    "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
    "ENTRY e {\n"
    "  x = bf16[64,256]{1,0} parameter(0)\n"
    "  w = bf16[256,128]{1,0} parameter(1)\n"
    "  y = f32[64,128]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  t = f32[64,128]{1,0} tanh(y)\n"
    "  tt = f32[128,64]{1,0} transpose(t), dimensions={1,0}\n"
    "  z = f32[] constant(0)\n"
    "  ROOT r = f32[128]{0} reduce(tt, z), dimensions={1}, to_apply=add\n"
    "}\n";

static const char k_pod[] =
    "HloModule ranges_pod, num_partitions=4\n"
    "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
    "ENTRY e {\n"
    "  x = f32[256,128]{1,0} parameter(0)\n"
    "  ar = f32[256,128]{1,0} all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, "
    "to_apply=add\n"
    "  ROOT g = f32[1024,128]{1,0} all-gather(ar), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, "
    "use_global_device_ids=true\n"
    "}\n";

/* Compiles and times `src` on `c`; with values, runs it too (one device). Returns 0 if a
 * step failed for a reason other than a clean refusal of the program on that chip. */
static int exercise(const tpu_chip *c, const char *src, int values, const char *what) {
  tpu_diag d;
  memset(&d, 0, sizeof d);
  tpu_module *m = NULL;
  if (tpu_hlo_parse("ranges.hlo", src, strlen(src), &m, &d) != TPU_OK) {
    fprintf(stderr, "%s: parse: %s\n", what, d.msg);
    return 0;
  }
  int ok = 1;
  if (values) {
    tpu_tensor args[2], out;
    memset(args, 0, sizeof args);
    memset(&out, 0, sizeof out);
    const tpu_comp *e = m->entry;
    for (int i = 0; i < e->nparams; i++) {
      const tpu_shape *s = &e->params[i]->shape;
      if (tpu_tensor_alloc(&args[i], s->dtype, s->rank, s->dims, &d) != TPU_OK) ok = 0;
      for (int64_t k = 0; ok && k < tpu_tensor_numel(&args[i]); k++) tpu_tensor_set_f64(&args[i], k, (double)(k % 7) - 3);
    }
    tpu_status st = ok ? tpu_chip_run_values(m, c, -1, args, e->nparams, &out, &d) : TPU_ERR_NOMEM;
    if (st != TPU_OK && st != TPU_ERR_UNSUPPORTED && st != TPU_ERR_LIMIT) {
      fprintf(stderr, "%s: values: %s\n", what, d.msg);
      ok = 0;
    }
    tpu_tensor_free(&out);
    for (int i = 0; i < e->nparams; i++) tpu_tensor_free(&args[i]);
  }
  tpu_pod_cost_ctx pc;
  memset(&pc, 0, sizeof pc);
  pc.chip = c;
  tpu_compile_opts o = {c, NULL, NULL, -1, tpu_pod_coll_cost, &pc, 0, 0, NULL, NULL, tpu_pod_hops, NULL};
  tpu_program *p = NULL;
  tpu_status st = tpu_compile(m, &o, &p, &d);
  if (st == TPU_OK) {
    tpu_timeline tl;
    memset(&tl, 0, sizeof tl);
    st = tpu_timing_run(p, c, 1, &tl, &d);
    if (st == TPU_OK && !(tl.total_cycles >= 0)) {
      fprintf(stderr, "%s: negative cycles\n", what);
      ok = 0;
    }
    tpu_timeline_free(&tl);
  }
  /* a chip too small for the program (VMEM, HBM, a slice of fewer chips than the pod) is
   * refused cleanly; anything else is a bug */
  if (st != TPU_OK && st != TPU_ERR_LIMIT && st != TPU_ERR_UNSUPPORTED && st != TPU_ERR_INVALID && st != TPU_ERR_ARG) {
    fprintf(stderr, "%s: compile/timing: %s\n", what, d.msg);
    ok = 0;
  }
  tpu_program_free(p);
  tpu_pod_cost_free(&pc);
  tpu_module_free(m);
  return ok;
}

/* Each numeric field at its ends on the v5e preset: the run succeeds or refuses cleanly. */
static void test_ends(void) {
  tpu_diag d;
  tpu_chip base;
  if (tpu_chip_load("chips/v5e.json", &base, &d) != TPU_OK) {
    fprintf(stderr, "v5e: %s\n", d.msg);
    CHECK(0);
    return;
  }
  int n = 0;
  for (int f = 0; f < TPU_CHIP_NFIELDS; f++) {
    char k = tpu_chip_field_kind((tpu_chip_field)f);
    if (k != 'f' && k != 'i') continue;
    double lo, hi;
    tpu_chip_field_range((tpu_chip_field)f, &lo, &hi);
    CHECK(lo > 0 && hi >= lo);
    for (int end = 0; end < 2; end++) {
      tpu_chip c = base;
      tpu_chip_set_value(&c, (tpu_chip_field)f, end ? hi : lo);
      char what[96];
      snprintf(what, sizeof what, "%s = %g", tpu_chip_field_key((tpu_chip_field)f), end ? hi : lo);
      CHECK(exercise(&c, k_prog, 1, what));
      CHECK(exercise(&c, k_pod, 0, what));
      n++;
    }
  }
  printf("chip ranges: %d field ends exercised\n", n);
  CHECK(n > 60);
}

/* The loader: a value just beyond either end is refused at the field's value. */
static void test_loader(void) {
  FILE *f = fopen("chips/v5e.json", "rb");
  CHECK(f != NULL);
  if (!f) return;
  static char text[1 << 17];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = 0;
  /* vector_lanes: "value": 128 -> 4096 (accepted), 4097 and 2^62 (refused at the value) */
  const char *key = strstr(text, "\"vector_lanes\"");
  CHECK(key != NULL);
  if (!key) return;
  const char *val = strstr(key, "\"value\"");
  const char *num = val ? strchr(val, ':') + 1 : NULL;
  while (num && *num == ' ') num++;
  CHECK(num && !strncmp(num, "128", 3));
  if (!num || strncmp(num, "128", 3)) return;
  static const struct {
    const char *v;
    int ok;
  } cases[] = {{"4096", 1}, {"4097", 0}, {"4611686018427387904", 0}, {"0", 0}, {"1", 1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    static char mod[1 << 17];
    size_t pre = (size_t)(num - text);
    snprintf(mod, sizeof mod, "%.*s%s%s", (int)pre, text, cases[i].v, num + 3);
    tpu_chip c;
    tpu_diag d;
    memset(&d, 0, sizeof d);
    tpu_status st = tpu_chip_load_text("lanes.json", mod, strlen(mod), &c, &d);
    if (cases[i].ok) {
      CHECK_EQ_INT(st, TPU_OK);
      CHECK_EQ_INT(c.vector_lanes, atoll(cases[i].v));
    } else {
      int line = 1, col = 1;
      for (size_t k = 0; k < pre; k++) {
        if (text[k] == '\n') line++, col = 1;
        else col++;
      }
      CHECK_EQ_INT(st, TPU_ERR_INVALID);
      CHECK_EQ_STR(d.file, "lanes.json");
      CHECK_EQ_INT(d.line, line);
      CHECK_EQ_INT(d.col, col);
      CHECK(strstr(d.msg, "vector_lanes") != NULL);
      CHECK(!strcmp(cases[i].v, "0") || strstr(d.msg, "1 to 4096") != NULL);
    }
  }
}

int main(void) {
  test_ends();
  test_loader();
  CHECK_DONE();
}
