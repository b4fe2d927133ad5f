/* The back end end to end (compile/backend/lower.c, the driver): every conformance program (unfused, and after
 * the HLO passes) lowers, its asm round-trips, and it times without error; scalar work pays no kernel start;
 * a shared matmul-plan memo (memory spaces: test_vmem.c). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "unit/compile/backend_util.h"

static tpu_chip g_chip;

static int roundtrip(const tpu_program *p, const char *name) { return program_roundtrip(p, name, &g_chip); }

/* Programs whose while loops have data-dependent trip counts: timing must refuse them,
 * naming the loop (docs/timing.md); everything else must time. */
static int has_dynamic_loop(const tpu_program *p, const char **name) {
  for (int i = 0; i < p->ninsns; i++)
    if (p->insns[i].opc == TPU_ISA_LOOP && p->insns[i].trips < 0) {
      *name = p->insns[i].what;
      return 1;
    }
  return 0;
}

static void conformance(int run_hlo_passes) {
  const char *dir = "tests/conformance/cases";
  DIR *dd = opendir(dir);
  CHECK(dd != NULL);
  if (!dd) return;
  struct dirent *e;
  int n = 0, dyn = 0;
  while ((e = readdir(dd))) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/prog.hlo", dir, e->d_name);
    char *src = test_read_file(path);
    if (!src) continue;
    tpu_module *m = NULL;
    tpu_diag d;
    CHECK(tpu_hlo_parse(path, src, strlen(src), &m, &d) == TPU_OK && tpu_ir_verify(m, &d) == TPU_OK);
    free(src);
    if (!m) continue;
    tpu_compile_opts o;
    memset(&o, 0, sizeof o);
    o.chip = &g_chip;
    o.precision_override = -1;
    tpu_program *p = NULL;
    tpu_status st = run_hlo_passes ? tpu_compile(m, &o, &p, &d) : tpu_compile_backend(m, &o, &p, &d);
    if (st != TPU_OK) {
      char buf[1200];
      tpu_diag_format(&d, buf, sizeof buf);
      fprintf(stderr, "  %s: compile failed: %s\n", e->d_name, buf);
      CHECK(st == TPU_OK);
      tpu_module_free(m);
      continue;
    }
    CHECK(roundtrip(p, e->d_name));
    tpu_timeline tl;
    const char *loop = NULL;
    st = tpu_timing_run(p, &g_chip, 1, &tl, &d);
    if (has_dynamic_loop(p, &loop)) {
      dyn++;
      CHECK(st == TPU_ERR_UNSUPPORTED);
      CHECK(strstr(d.msg, loop) != NULL);
      /* With the count supplied, it times. */
      CHECK(tpu_program_set_loop_trips(p, loop, 3) >= 1);
      st = tpu_timing_run(p, &g_chip, 1, &tl, &d);
    }
    if (st != TPU_OK) {
      char buf[1200];
      tpu_diag_format(&d, buf, sizeof buf);
      fprintf(stderr, "  %s: timing failed: %s\n", e->d_name, buf);
    }
    CHECK(st == TPU_OK);
    if (st == TPU_OK) {
      CHECK(tl.total_cycles > 0);
      tpu_timeline_free(&tl);
    }
    tpu_program_free(p);
    tpu_module_free(m);
    n++;
  }
  closedir(dd);
  printf("conformance (%s): %d programs lowered and timed, %d with data-dependent loops\n",
         run_hlo_passes ? "after HLO passes" : "unfused", n, dyn);
  CHECK(n >= 60);
}

/* Scalar-only ops (offsets, loop counters) are the scalar unit's work: no kernel start cost.
 * A program of scalars times the same with and without kernel_overhead_s; one with an array
 * op pays it. */
static int64_t cycles_with_overhead(const char *src, double kov) {
  tpu_chip chip = g_chip;
  chip.kernel_overhead_s = kov;
  tpu_timeline tl;
  if (!time_src(src, &chip, &tl)) return -1;
  int64_t c = tl.total_cycles;
  tpu_timeline_free(&tl);
  return c;
}

static void scalar_ops(void) {
  const char *sc = "HloModule s\nENTRY e {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n"
                   "  c = s32[] add(a, b)\n  ROOT d = s32[] multiply(c, a)\n}\n";
  const char *ar = "HloModule s\nENTRY e {\n  a = f32[8] parameter(0)\n  b = f32[8] parameter(1)\n"
                   "  c = f32[8] add(a, b)\n  ROOT d = f32[8] multiply(c, a)\n}\n";
  int64_t s0 = cycles_with_overhead(sc, 0), s1 = cycles_with_overhead(sc, 1e-6);
  int64_t a0 = cycles_with_overhead(ar, 0), a1 = cycles_with_overhead(ar, 1e-6);
  CHECK(s0 > 0 && s1 == s0);
  CHECK(a0 > 0 && a1 >= a0 + (int64_t)(1e-6 * g_chip.clock_hz) - 1);
}

/* A memo of matmul plans shared by several compiles (tpu_compile_opts.mm_memo, what the
 * library keeps per chip): a second module with the same dots adds no plan and compiles to
 * the program it compiles to alone, word for word. */
static void shared_matmul_memo(void) {
  const char *a = "HloModule a\nENTRY e {\n x = f32[512,1024] parameter(0)\n w = f32[1024,2048] parameter(1)\n"
                  " ROOT d = f32[512,2048] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  const char *b = "HloModule b\nENTRY e {\n x = f32[512,1024] parameter(0)\n w = f32[1024,2048] parameter(1)\n"
                  " d = f32[512,2048] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                  " ROOT t = f32[512,2048] tanh(d)\n}\n";
  struct tpu_mm_memo *memo = tpu_mm_memo_new();
  CHECK(memo != NULL);
  tpu_module *ma = parse(a), *mb = parse(b), *mb2 = parse(b);
  CHECK(ma && mb && mb2);
  if (!memo || !ma || !mb || !mb2) goto out;
  tpu_diag d;
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = &g_chip;
  o.precision_override = -1;
  o.mm_memo = memo;
  tpu_program *pa = NULL, *pb = NULL, *alone = NULL;
  CHECK(tpu_compile_backend(ma, &o, &pa, &d) == TPU_OK);
  int64_t after_a = tpu_mm_memo_size(memo);
  CHECK(after_a >= 1);
  CHECK(tpu_compile_backend(mb, &o, &pb, &d) == TPU_OK);
  CHECK_EQ_INT(tpu_mm_memo_size(memo), after_a);
  alone = compile(mb2, &g_chip, &d);
  CHECK(pb && alone);
  if (pb && alone) {
    char *t1 = tpu_program_text(pb), *t2 = tpu_program_text(alone);
    CHECK(t1 && t2 && !strcmp(t1, t2));
    tpu_free(t1);
    tpu_free(t2);
  }
  tpu_program_free(pa);
  tpu_program_free(pb);
  tpu_program_free(alone);
out:
  tpu_module_free(ma);
  tpu_module_free(mb);
  tpu_module_free(mb2);
  tpu_mm_memo_free(memo);
}

int main(void) {
  if (!closed_form_v5e(&g_chip)) return 1;
  scalar_ops();
  shared_matmul_memo();
  conformance(0);
  conformance(1);
  CHECK_DONE();
}
