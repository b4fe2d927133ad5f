/* The IR verifier: every good program verifies clean; every program in tests/hlo/bad fails
 * with the message fragment and line:col its first line names; a wrong result shape on any
 * instruction whose shape the operands determine is caught at that instruction; running
 * out of memory at any allocation fails cleanly. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "ref/ref.h"

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

static void report(const char *what, const char *path, const tpu_diag *d) {
  char buf[1200];
  tpu_diag_format(d, buf, sizeof buf);
  fprintf(stderr, "%s %s: %s\n", what, path, buf);
}

/* ---- Good programs ---- */

static int good_checked;

/* Mutates the result dims of every instruction whose shape its operands determine and
 * checks the verifier reports exactly that instruction. */
static int mutations_checked;

static int shape_determined(const tpu_instr *in) {
  switch (tpu_op_class_of(in->op)) {
    case TPU_CLS_COLLECTIVE:
    case TPU_CLS_PARSE_ONLY: return 0;
    default: break;
  }
  switch (in->op) {
    case TPU_OP_PARAMETER:
    case TPU_OP_CONSTANT:
    case TPU_OP_IOTA:
    case TPU_OP_RNG_BIT_GENERATOR:
    case TPU_OP_PARTITION_ID:
    case TPU_OP_REPLICA_ID: return 0;
    case TPU_OP_BROADCAST: /* dims not mapped from the operand are free */
      return in->dimensions.n == in->shape.rank;
    case TPU_OP_RESHAPE:
    case TPU_OP_BITCAST: return tpu_shape_numel(&in->shape) > 0;
    default: return 1;
  }
}

static void mutate_all(tpu_module *m, const char *path) {
  for (int ci = 0; ci < m->ncomps; ci++) {
    tpu_comp *c = m->comps[ci];
    for (int k = 0; k < c->ninstrs; k++) {
      tpu_instr *in = c->instrs[k];
      if (!shape_determined(in)) continue;
      tpu_shape *s = &in->shape;
      if (s->dtype == TPU_TUPLE) s = s->ntuple ? &s->elems[0] : NULL;
      if (!s || !tpu_dtype_is_array(s->dtype) || s->rank == 0) continue;
      s->dims[0] += 1;
      tpu_diag d;
      memset(&d, 0, sizeof d);
      tpu_status st = tpu_ir_verify(m, &d);
      s->dims[0] -= 1;
      CHECK_EQ_INT(st, TPU_ERR_INVALID);
      if (st != TPU_ERR_INVALID || d.line != in->loc.line || d.col != in->loc.col) {
        fprintf(stderr, "%s: mutating '%s' (%d:%d) was reported as:\n", path, in->name, in->loc.line, in->loc.col);
        report("  ", path, &d);
        CHECK_EQ_INT(d.line, in->loc.line);
        CHECK_EQ_INT(d.col, in->loc.col);
      }
      mutations_checked++;
    }
  }
  tpu_diag d;
  CHECK_EQ_INT(tpu_ir_verify(m, &d), TPU_OK);
}

static void check_good(const char *path, int mutate) {
  tpu_diag d;
  tpu_module *m;
  if (tpu_hlo_parse_file(path, &m, &d) != TPU_OK) {
    report("parse failed:", path, &d);
    CHECK(0);
    return;
  }
  tpu_status st = tpu_ir_verify(m, &d);
  if (st != TPU_OK) report("verify failed:", path, &d);
  CHECK_EQ_INT(st, TPU_OK);
  if (st == TPU_OK && mutate) mutate_all(m, path);
  tpu_module_free(m);
  good_checked++;
}

/* ---- Bad programs ---- */

static int bad_checked;

/* First line: "// ERROR: LINE:COL: FRAGMENT". */
static void check_bad(const char *path) {
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  if (!f) return;
  char first[1024] = {0};
  if (!fgets(first, sizeof first, f)) first[0] = 0;
  fclose(f);
  first[strcspn(first, "\r\n")] = 0;
  int line = 0, col = 0, used = 0;
  if (sscanf(first, "// ERROR: %d:%d: %n", &line, &col, &used) != 2 || !used || !first[used]) {
    fprintf(stderr, "%s: first line must read '// ERROR: LINE:COL: FRAGMENT'\n", path);
    CHECK(0);
    return;
  }
  const char *frag = first + used;
  tpu_diag d;
  tpu_module *m;
  if (tpu_hlo_parse_file(path, &m, &d) != TPU_OK) {
    report("bad program does not parse (it must parse and fail verification):", path, &d);
    CHECK(0);
    return;
  }
  memset(&d, 0, sizeof d);
  tpu_status st = tpu_ir_verify(m, &d);
  tpu_module_free(m);
  int ok = st == TPU_ERR_INVALID && d.line == line && d.col == col && strstr(d.msg, frag) && !strcmp(d.file, path);
  if (!ok) {
    fprintf(stderr, "%s: expected %d:%d: ...%s...\n", path, line, col, frag);
    if (st == TPU_OK) fprintf(stderr, "  but it verified clean\n");
    else report("  got", path, &d);
  }
  CHECK(ok);
  bad_checked++;
}

/* ---- Fuzzer regressions ---- */

static int fuzz_checked;

/* An input under tests/hlo/fuzz once crashed the front end (scripts/fuzz): the same
 * pipeline the fuzz target runs must now end in a clean error. */
static void check_fuzz(const char *path) {
  tpu_diag d;
  tpu_module *m;
  memset(&d, 0, sizeof d);
  tpu_status st = tpu_hlo_parse_file(path, &m, &d);
  if (st == TPU_OK) {
    st = tpu_ir_verify(m, &d);
    char *p1 = tpu_hlo_print(m);
    CHECK(p1 != NULL);
    tpu_module *m2 = NULL;
    if (p1 && tpu_hlo_parse("printed", p1, strlen(p1), &m2, &d) == TPU_OK) {
      char *p2 = tpu_hlo_print(m2);
      CHECK_EQ_STR(p1, p2);
      tpu_free(p2);
      tpu_module_free(m2);
    } else {
      CHECK(0);
    }
    tpu_free(p1);
    tpu_module_free(m);
  }
  if (st == TPU_OK) fprintf(stderr, "%s: fuzz regression input is accepted; expected an error\n", path);
  CHECK(st != TPU_OK && d.msg[0]);
  fuzz_checked++;
}

/* ---- Out of memory ---- */

static void check_oom(const char *path) {
  tpu_diag d;
  tpu_module *m;
  if (tpu_hlo_parse_file(path, &m, &d) != TPU_OK) {
    report("parse failed:", path, &d);
    CHECK(0);
    return;
  }
  tpu_alloc_fail_after(0);
  CHECK_EQ_INT(tpu_ir_verify(m, &d), TPU_OK);
  long n = tpu_alloc_fail_after(0);
  CHECK(n > 0);
  int nomem = 0;
  for (long i = 1; i <= n + 1; i++) {
    tpu_alloc_fail_after(i);
    tpu_status st = tpu_ir_verify(m, &d);
    tpu_alloc_fail_after(0);
    CHECK(st == TPU_OK || st == TPU_ERR_NOMEM);
    nomem += st == TPU_ERR_NOMEM;
  }
  CHECK(nomem >= 1);
  tpu_module_free(m);
}

/* No fixed limit on tuple sizes: an entry with 300 parameters (entry_computation_layout
 * lists all of them, the result is a 300-tuple) and a conditional with 300 branches parse,
 * verify and run; branch 299 returns its own constant. */
static void check_wide(void) {
  enum { N = 300 };
  size_t cap = 64 * N * 4;
  char *src = malloc(cap);
  size_t k = 0;
  k += (size_t)snprintf(src + k, cap - k, "HloModule wide, entry_computation_layout={(");
  for (int i = 0; i < N; i++) k += (size_t)snprintf(src + k, cap - k, "%sf32[2]{0}", i ? ", " : "");
  k += (size_t)snprintf(src + k, cap - k, ", s32[])->(");
  for (int i = 0; i < N; i++) k += (size_t)snprintf(src + k, cap - k, "%sf32[2]{0}", i ? ", " : "");
  k += (size_t)snprintf(src + k, cap - k, ", f32[])}\n");
  for (int i = 0; i < N; i++)
    k += (size_t)snprintf(src + k, cap - k, "b%d {\n x = f32[] parameter(0)\n ROOT c = f32[] constant(%d)\n}\n", i, i);
  k += (size_t)snprintf(src + k, cap - k, "ENTRY e {\n");
  for (int i = 0; i < N; i++) k += (size_t)snprintf(src + k, cap - k, " p%d = f32[2] parameter(%d)\n", i, i);
  k += (size_t)snprintf(src + k, cap - k, " idx = s32[] parameter(%d)\n z = f32[] constant(0)\n", N);
  k += (size_t)snprintf(src + k, cap - k, " c = f32[] conditional(idx");
  for (int i = 0; i < N; i++) k += (size_t)snprintf(src + k, cap - k, ", z");
  k += (size_t)snprintf(src + k, cap - k, "), branch_computations={");
  for (int i = 0; i < N; i++) k += (size_t)snprintf(src + k, cap - k, "%sb%d", i ? ", " : "", i);
  k += (size_t)snprintf(src + k, cap - k, "}\n ROOT t = (");
  for (int i = 0; i < N; i++) k += (size_t)snprintf(src + k, cap - k, "f32[2], ");
  k += (size_t)snprintf(src + k, cap - k, "f32[]) tuple(");
  for (int i = 0; i < N; i++) k += (size_t)snprintf(src + k, cap - k, "p%d, ", i);
  k += (size_t)snprintf(src + k, cap - k, "c)\n}\n");
  CHECK(k < cap);
  tpu_module *m = NULL;
  tpu_diag d;
  tpu_status st = tpu_hlo_parse("wide.hlo", src, k, &m, &d);
  if (st == TPU_OK) st = tpu_ir_verify(m, &d);
  if (st != TPU_OK) report("wide", "wide.hlo", &d);
  CHECK_EQ_INT(st, TPU_OK);
  if (st == TPU_OK) {
    tpu_tensor *args = calloc(N + 1, sizeof *args);
    int64_t two = 2;
    for (int i = 0; i < N; i++) {
      CHECK(tpu_tensor_alloc(&args[i], TPU_F32, 1, &two, &d) == TPU_OK);
      tpu_tensor_set_f64(&args[i], 1, i);
    }
    CHECK(tpu_tensor_alloc(&args[N], TPU_S32, 0, NULL, &d) == TPU_OK);
    tpu_tensor_set_i64(&args[N], 0, N - 1);
    tpu_tensor out;
    CHECK(tpu_ref_run(m, args, N + 1, &out, &d) == TPU_OK);
    CHECK_EQ_INT(out.ntuple, N + 1);
    if (out.ntuple == N + 1) {
      CHECK(tpu_tensor_get_f64(&out.elems[N - 1], 1) == N - 1);
      CHECK(tpu_tensor_get_f64(&out.elems[N], 0) == N - 1);
    }
    tpu_tensor_free(&out);
    for (int i = 0; i <= N; i++) tpu_tensor_free(&args[i]);
    free(args);
  }
  tpu_module_free(m);
  free(src);
}

int main(void) {
  check_wide();
  struct dirent *e;
  DIR *dir = opendir("tests/hlo");
  CHECK(dir != NULL);
  while (dir && (e = readdir(dir))) {
    if (!ends_with(e->d_name, ".hlo")) continue;
    char path[1024];
    snprintf(path, sizeof path, "tests/hlo/%s", e->d_name);
    check_good(path, 1);
  }
  if (dir) closedir(dir);

  dir = opendir("tests/conformance/cases");
  CHECK(dir != NULL);
  while (dir && (e = readdir(dir))) {
    if (e->d_name[0] == '.') continue;
    const char *names[] = {"prog.hlo", "opt.hlo"};
    for (int i = 0; i < 2; i++) {
      char path[1024];
      snprintf(path, sizeof path, "tests/conformance/cases/%s/%s", e->d_name, names[i]);
      FILE *f = fopen(path, "rb");
      if (!f) continue;
      fclose(f);
      check_good(path, 1);
    }
  }
  if (dir) closedir(dir);

  dir = opendir("tests/hlo/bad");
  CHECK(dir != NULL);
  while (dir && (e = readdir(dir))) {
    if (!ends_with(e->d_name, ".hlo")) continue;
    char path[1024];
    snprintf(path, sizeof path, "tests/hlo/bad/%s", e->d_name);
    check_bad(path);
  }
  if (dir) closedir(dir);

  dir = opendir("tests/hlo/fuzz");
  while (dir && (e = readdir(dir))) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "tests/hlo/fuzz/%s", e->d_name);
    check_fuzz(path);
  }
  if (dir) closedir(dir);

  check_oom("tests/conformance/cases/cond/opt.hlo");

  tpu_diag d;
  CHECK_EQ_INT(tpu_ir_verify(NULL, &d), TPU_ERR_INVALID);

  printf("%d good programs, %d mutations, %d bad programs, %d fuzz regressions\n", good_checked, mutations_checked,
         bad_checked, fuzz_checked);
  CHECK(good_checked >= 100);
  CHECK(mutations_checked >= 1000);
  CHECK(bad_checked >= 60);
  CHECK_DONE();
}
