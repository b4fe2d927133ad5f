/* While loops on slots (ref/sloop.h): a loop of small s32/u32/pred arrays, with a call,
 * slices, reshapes, converts, broadcasts, compares, selects and its state permuted, is
 * compiled once and its iterations allocate nothing; a loop of f32 values with ops run by
 * their kernels (u64 among them), a loop with a loop nested in its body and a loop with a dot
 * (on the TPU backend too: its MXU numerics hook) compile too; the values of all of them are
 * bit-identical to the loop stepped op by op (compiling off); a loop with a conditional is
 * stepped as before; the while limit still stops a compiled loop; steps on constants are
 * hoisted out of the iterations and a state is copied once where no element reads another's
 * slot. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "chip/chip.h"
#include "chip/exec.h"
#include "hlo/hlo.h"
#include "ref/ref.h"
#include "ref/sloop.h"

#define STATE "(s32[], u32[8], u32[8], u32[4], pred[], s32[2,3], s32[])"

static const char *SRC =
    "HloModule sl\n"
    "rot {\n" /* threefry's rotate left */
    "  x = u32[8] parameter(0)\n"
    "  r = u32[] parameter(1)\n"
    "  rb = u32[8] broadcast(r), dimensions={}\n"
    "  l = u32[8] shift-left(x, rb)\n"
    "  c32 = u32[] constant(32)\n"
    "  s = u32[] subtract(c32, r)\n"
    "  sb = u32[8] broadcast(s), dimensions={}\n"
    "  h = u32[8] shift-right-logical(x, sb)\n"
    "  ROOT o = u32[8] or(l, h)\n"
    "}\n"
    "body {\n"
    "  s = " STATE " parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  a = u32[8] get-tuple-element(s), index=1\n"
    "  b = u32[8] get-tuple-element(s), index=2\n"
    "  rs = u32[4] get-tuple-element(s), index=3\n"
    "  p = pred[] get-tuple-element(s), index=4\n"
    "  m = s32[2,3] get-tuple-element(s), index=5\n"
    "  n = s32[] get-tuple-element(s), index=6\n"
    "  one = s32[] constant(1)\n"
    "  j = s32[] add(i, one)\n"
    "  ju = u32[] convert(i)\n"
    "  r1 = u32[1] slice(rs), slice={[1:2]}\n"
    "  r = u32[] reshape(r1)\n"
    "  ab = u32[8] add(a, b)\n"
    "  bt = u32[8] call(b, r), to_apply=rot\n"
    "  x = u32[8] xor(ab, bt)\n"
    "  jb = u32[8] broadcast(ju), dimensions={}\n"
    "  x2 = u32[8] multiply(x, jb)\n"
    "  lt = pred[8] compare(x2, ab), direction=LT\n"
    "  sel = u32[8] select(lt, x2, ab)\n"
    "  ps = u32[8] select(p, sel, b)\n"
    "  q = pred[] compare(j, one), direction=GT\n"
    "  c = s32[2,1] slice(m), slice={[0:2], [1:2]}\n"
    "  c2 = s32[2] reshape(c)\n"
    "  cb = s32[2,3] broadcast(c2), dimensions={0}\n"
    "  jm = s32[2,3] broadcast(j), dimensions={}\n"
    "  d = s32[2,3] subtract(cb, jm)\n"
    "  seven = s32[] constant(7)\n"
    "  sv = s32[2,3] broadcast(seven), dimensions={}\n"
    "  e = s32[2,3] shift-right-arithmetic(d, sv)\n"
    "  neg = pred[2,3] compare(d, e), direction=LT, type=UNSIGNED\n"
    "  ni = s32[2,3] convert(neg)\n"
    "  m2 = s32[2,3] add(e, ni)\n"
    "  ROOT t = " STATE " tuple(j, ps, a, rs, q, m2, n)\n" /* a and b swap */
    "}\n"
    "cond {\n"
    "  s = " STATE " parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  n = s32[] get-tuple-element(s), index=6\n"
    "  ROOT lt = pred[] compare(i, n), direction=LT\n"
    "}\n"
    "ENTRY e {\n"
    "  n = s32[] parameter(0)\n"
    "  z = s32[] constant(0)\n"
    "  a0 = u32[8] constant({1, 2, 3, 4, 5, 6, 7, 4294967295})\n"
    "  b0 = u32[8] constant({9, 8, 7, 6, 5, 4, 3, 2147483648})\n"
    "  r0 = u32[4] constant({13, 15, 26, 6})\n"
    "  p0 = pred[] constant(true)\n"
    "  m0 = s32[2,3] constant({{5, -6, 7}, {-100000, 2, 3}})\n"
    "  s0 = " STATE " tuple(z, a0, b0, r0, p0, m0, n)\n"
    "  w = " STATE " while(s0), condition=cond, body=body\n"
    "  ra = u32[8] get-tuple-element(w), index=1\n"
    "  rb = u32[8] get-tuple-element(w), index=2\n"
    "  rq = pred[] get-tuple-element(w), index=4\n"
    "  rm = s32[2,3] get-tuple-element(w), index=5\n"
    "  ROOT r = (u32[8], u32[8], pred[], s32[2,3]) tuple(ra, rb, rq, rm)\n"
    "}\n";

/* A loop of f32 scalars and vectors: binary and unary ops, an f32 compare and select, and
 * ops run by their kernels on views of their slots (a convert, an iota, a reduce whose
 * reducer the interpreter calls). */
#define FSTATE "(s32[], f32[4], f32[], s32[])"
static const char *FLOAT_SRC =
    "HloModule fl\n"
    "sum {\n"
    "  a = f32[] parameter(0)\n"
    "  b = f32[] parameter(1)\n"
    "  ROOT c = f32[] add(a, b)\n"
    "}\n"
    "body {\n"
    "  s = " FSTATE " parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  x = f32[4] get-tuple-element(s), index=1\n"
    "  acc = f32[] get-tuple-element(s), index=2\n"
    "  n = s32[] get-tuple-element(s), index=3\n"
    "  one = s32[] constant(1)\n"
    "  j = s32[] add(i, one)\n"
    "  fi = f32[] convert(i)\n"
    "  fb = f32[4] broadcast(fi), dimensions={}\n"
    "  u = u64[] convert(i)\n" /* a broadcast of 8-byte elements */
    "  big = u64[] constant(4294967297)\n"
    "  ub = u64[] multiply(u, big)\n"
    "  ubb = u64[4] broadcast(ub), dimensions={}\n"
    "  uf = f32[4] convert(ubb)\n"
    "  io = f32[4] iota(), iota_dimension=0\n"
    "  t = f32[4] tanh(x)\n"
    "  e = f32[4] exponential(t)\n"
    "  m = f32[4] multiply(e, fb)\n"
    "  q = f32[4] divide(m, io)\n"
    "  lt = pred[4] compare(q, x), direction=LT\n"
    "  y = f32[4] select(lt, q, t)\n"
    "  z = f32[] constant(0)\n"
    "  r = f32[] reduce(y, z), dimensions={0}, to_apply=sum\n"
    "  ru = f32[] reduce(uf, z), dimensions={0}, to_apply=sum\n"
    "  acc1 = f32[] add(acc, r)\n"
    "  acc2 = f32[] add(acc1, ru)\n"
    "  ROOT o = " FSTATE " tuple(j, y, acc2, n)\n"
    "}\n"
    "cond {\n"
    "  s = " FSTATE " parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  n = s32[] get-tuple-element(s), index=3\n"
    "  ROOT lt = pred[] compare(i, n), direction=LT\n"
    "}\n"
    "ENTRY e {\n"
    "  n = s32[] parameter(0)\n"
    "  z = s32[] constant(0)\n"
    "  x0 = f32[4] constant({0.5, -1.25, 3, 1e-30})\n"
    "  a0 = f32[] constant(0)\n"
    "  s0 = " FSTATE " tuple(z, x0, a0, n)\n"
    "  w = " FSTATE " while(s0), condition=cond, body=body\n"
    "  x = f32[4] get-tuple-element(w), index=1\n"
    "  a = f32[] get-tuple-element(w), index=2\n"
    "  ROOT r = (f32[4], f32[]) tuple(x, a)\n"
    "}\n";

/* A loop with a loop nested in its body: one compiled loop, the inner one a step of it. */
static const char *NEST_SRC =
    "HloModule nest\n"
    "ib {\n"
    "  s = (s32[], u32[4]) parameter(0)\n"
    "  j = s32[] get-tuple-element(s), index=0\n"
    "  v = u32[4] get-tuple-element(s), index=1\n"
    "  one = s32[] constant(1)\n"
    "  j2 = s32[] add(j, one)\n"
    "  c = u32[] constant(3)\n"
    "  cb = u32[4] broadcast(c), dimensions={}\n"
    "  cc = u32[4] add(cb, cb)\n" /* on constants only: cb and cc hoisted out of both loops */
    "  v2 = u32[4] multiply(v, cc)\n"
    "  ROOT t = (s32[], u32[4]) tuple(j2, v2)\n"
    "}\n"
    "ic {\n"
    "  s = (s32[], u32[4]) parameter(0)\n"
    "  j = s32[] get-tuple-element(s), index=0\n"
    "  k = s32[] constant(2)\n"
    "  ROOT lt = pred[] compare(j, k), direction=LT\n"
    "}\n"
    "ob {\n"
    "  s = (s32[], u32[4], s32[]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  v = u32[4] get-tuple-element(s), index=1\n"
    "  one = s32[] constant(1)\n"
    "  i2 = s32[] add(i, one)\n"
    "  z = s32[] constant(0)\n"
    "  iu = u32[] convert(i)\n"
    "  ib = u32[4] broadcast(iu), dimensions={}\n"
    "  va = u32[4] add(v, ib)\n"
    "  it = (s32[], u32[4]) tuple(z, va)\n"
    "  w = (s32[], u32[4]) while(it), condition=ic, body=ib\n"
    "  wv = u32[4] get-tuple-element(w), index=1\n"
    "  n = s32[] get-tuple-element(s), index=2\n"
    "  ROOT t = (s32[], u32[4], s32[]) tuple(i2, wv, n)\n"
    "}\n"
    "oc {\n"
    "  s = (s32[], u32[4], s32[]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  n = s32[] get-tuple-element(s), index=2\n"
    "  ROOT lt = pred[] compare(i, n), direction=LT\n"
    "}\n"
    "ENTRY e {\n"
    "  n = s32[] parameter(0)\n"
    "  z = s32[] constant(0)\n"
    "  v0 = u32[4] constant({1, 2, 3, 4})\n"
    "  s0 = (s32[], u32[4], s32[]) tuple(z, v0, n)\n"
    "  w = (s32[], u32[4], s32[]) while(s0), condition=oc, body=ob\n"
    "  r = u32[4] get-tuple-element(w), index=1\n"
    "  ri = s32[] get-tuple-element(w), index=0\n"
    "  ROOT o = (u32[4], s32[]) tuple(r, ri)\n"
    "}\n";

/* A loop with a dot: compiled; on the TPU backend its run's TPU numerics hook computes it. */
static const char *DOT_SRC =
    "HloModule dl\n"
    "body {\n"
    "  s = (s32[], f32[2,2]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  x = f32[2,2] get-tuple-element(s), index=1\n"
    "  one = s32[] constant(1)\n"
    "  j = s32[] add(i, one)\n"
    "  y = f32[2,2] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  ROOT t = (s32[], f32[2,2]) tuple(j, y)\n"
    "}\n"
    "cond {\n"
    "  s = (s32[], f32[2,2]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  k = s32[] constant(3)\n"
    "  ROOT lt = pred[] compare(i, k), direction=LT\n"
    "}\n"
    "ENTRY e {\n"
    "  z = s32[] constant(0)\n"
    "  x0 = f32[2,2] constant({{1.1, 2.3}, {-3.7, 0.45}})\n"
    "  s0 = (s32[], f32[2,2]) tuple(z, x0)\n"
    "  w = (s32[], f32[2,2]) while(s0), condition=cond, body=body\n"
    "  ROOT x = f32[2,2] get-tuple-element(w), index=1\n"
    "}\n";

/* A loop with a conditional in its body: stepped by the interpreter. */
static const char *COND_SRC =
    "HloModule cl\n"
    "tb {\n"
    "  a = f32[2] parameter(0)\n"
    "  ROOT n = f32[2] negate(a)\n"
    "}\n"
    "fb {\n"
    "  a = f32[2] parameter(0)\n"
    "  ROOT n = f32[2] abs(a)\n"
    "}\n"
    "body {\n"
    "  s = (s32[], f32[2]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  x = f32[2] get-tuple-element(s), index=1\n"
    "  one = s32[] constant(1)\n"
    "  j = s32[] add(i, one)\n"
    "  p = pred[] compare(i, one), direction=LT\n"
    "  c = f32[2] conditional(p, x, x), true_computation=tb, false_computation=fb\n"
    "  ROOT t = (s32[], f32[2]) tuple(j, c)\n"
    "}\n"
    "cond {\n"
    "  s = (s32[], f32[2]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  k = s32[] constant(3)\n"
    "  ROOT lt = pred[] compare(i, k), direction=LT\n"
    "}\n"
    "ENTRY e {\n"
    "  z = s32[] constant(0)\n"
    "  x0 = f32[2] constant({1, -2})\n"
    "  s0 = (s32[], f32[2]) tuple(z, x0)\n"
    "  w = (s32[], f32[2]) while(s0), condition=cond, body=body\n"
    "  ROOT x = f32[2] get-tuple-element(w), index=1\n"
    "}\n";

static const tpu_instr *find_while(const tpu_module *m) {
  const tpu_comp *e = m->entry;
  for (int i = 0; i < e->ninstrs; i++)
    if (e->instrs[i]->op == TPU_OP_WHILE) return e->instrs[i];
  return NULL;
}

/* Runs the loop for n iterations into *out; returns the allocations the run made. */
static long run_n(const tpu_module *m, int n, tpu_tensor *out, tpu_status *st) {
  tpu_diag d;
  tpu_tensor arg;
  tpu_tensor_zero(out);
  if (tpu_tensor_alloc(&arg, TPU_S32, 0, NULL, &d) != TPU_OK) return -1;
  tpu_tensor_set_i64(&arg, 0, n);
  tpu_alloc_fail_after(0); /* resets the counter */
  *st = tpu_ref_run(m, &arg, 1, out, &d);
  long allocs = tpu_alloc_fail_after(0);
  tpu_tensor_free(&arg);
  return allocs;
}

static int same_bits(const tpu_tensor *a, const tpu_tensor *b) {
  if (a->dtype != b->dtype || a->ntuple != b->ntuple) return 0;
  if (a->dtype == TPU_TUPLE) {
    for (int i = 0; i < a->ntuple; i++)
      if (!same_bits(&a->elems[i], &b->elems[i])) return 0;
    return 1;
  }
  return a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes);
}

/* The loop's values compiled against stepped, for several trip counts (0 included). */
static void compare_runs(const tpu_module *m) {
  for (int n = 0; n <= 9; n += 3) {
    tpu_tensor on, off;
    tpu_status s1, s2;
    run_n(m, n, &on, &s1);
    tpu__sloop_enable(0);
    run_n(m, n, &off, &s2);
    tpu__sloop_enable(1);
    CHECK_EQ_INT(s1, TPU_OK);
    CHECK_EQ_INT(s2, TPU_OK);
    if (s1 == TPU_OK && s2 == TPU_OK) CHECK(same_bits(&on, &off));
    if (s1 == TPU_OK && n == 9) { /* the values are not all zero: the test sees bits */
      const uint32_t *a = on.elems[0].data;
      CHECK(a[0] != 0 || a[1] != 0);
    }
    tpu_tensor_free(&on);
    tpu_tensor_free(&off);
  }
}

/* The dot loop on the TPU backend (the chip's MXU numerics through the run's hook) and on
 * the reference interpreter, compiled against stepped. */
static void dot_runs(const tpu_module *m) {
  static tpu_chip chip;
  tpu_diag d;
  CHECK_EQ_INT(tpu_chip_load("v5e", &chip, &d), TPU_OK);
  for (int tpu = 0; tpu < 2; tpu++) {
    tpu_tensor on, off;
    tpu_status s1, s2;
    for (int k = 0; k < 2; k++) {
      tpu__sloop_enable(k == 0);
      tpu_status st = tpu ? tpu_chip_run_values(m, &chip, -1, NULL, 0, k ? &off : &on, &d)
                          : tpu_ref_run(m, NULL, 0, k ? &off : &on, &d);
      if (k) s2 = st; else s1 = st;
    }
    tpu__sloop_enable(1);
    CHECK_EQ_INT(s1, TPU_OK);
    CHECK_EQ_INT(s2, TPU_OK);
    if (s1 == TPU_OK && s2 == TPU_OK) CHECK(same_bits(&on, &off));
    tpu_tensor_free(&on);
    tpu_tensor_free(&off);
  }
}

int main(void) {
  tpu_module *m = NULL, *fm = NULL, *dm = NULL, *nm = NULL, *cm = NULL;
  tpu_diag d;
  CHECK_EQ_INT(tpu_hlo_parse("sloop.hlo", SRC, strlen(SRC), &m, &d), TPU_OK);
  CHECK_EQ_INT(tpu_hlo_parse("float.hlo", FLOAT_SRC, strlen(FLOAT_SRC), &fm, &d), TPU_OK);
  CHECK_EQ_INT(tpu_hlo_parse("dot.hlo", DOT_SRC, strlen(DOT_SRC), &dm, &d), TPU_OK);
  CHECK_EQ_INT(tpu_hlo_parse("nest.hlo", NEST_SRC, strlen(NEST_SRC), &nm, &d), TPU_OK);
  CHECK_EQ_INT(tpu_hlo_parse("cond.hlo", COND_SRC, strlen(COND_SRC), &cm, &d), TPU_OK);
  if (!m || !fm || !dm || !nm || !cm) CHECK_DONE();

  /* which loops compile; the steps on constants hoisted (m: the broadcast of 7; nm: the
   * inner body's broadcast of 3 and its sum), the state copied once unless an element is
   * read from another's slot (m swaps two) */
  int hoisted = -1, direct = -1;
  tpu__sloop *l = tpu__sloop_compile(find_while(m));
  CHECK(l != NULL);
  if (l) tpu__sloop_shape(l, &hoisted, &direct);
  CHECK_EQ_INT(hoisted, 1);
  CHECK_EQ_INT(direct, 0);
  tpu__sloop_free(l);
  l = tpu__sloop_compile(find_while(fm));
  CHECK(l != NULL);
  tpu__sloop_free(l);
  l = tpu__sloop_compile(find_while(nm));
  CHECK(l != NULL);
  if (l) tpu__sloop_shape(l, &hoisted, &direct);
  CHECK_EQ_INT(hoisted, 2);
  CHECK_EQ_INT(direct, 1);
  tpu__sloop_free(l);
  l = tpu__sloop_compile(find_while(dm));
  CHECK(l != NULL);
  tpu__sloop_free(l);
  CHECK(tpu__sloop_compile(find_while(cm)) == NULL);
  dot_runs(dm);

  compare_runs(m);
  compare_runs(fm);
  compare_runs(nm);

  /* an iteration allocates nothing: 3 and 30 iterations make the same allocations (the
   * stepped loop makes its values every iteration) */
  tpu_tensor out;
  tpu_status st;
  long a3 = run_n(m, 3, &out, &st);
  tpu_tensor_free(&out);
  long a30 = run_n(m, 30, &out, &st);
  tpu_tensor_free(&out);
  tpu__sloop_enable(0);
  long b3 = run_n(m, 3, &out, &st);
  tpu_tensor_free(&out);
  long b30 = run_n(m, 30, &out, &st);
  tpu_tensor_free(&out);
  tpu__sloop_enable(1);
  printf("integer loop: %ld / %ld allocations for 3 / 30 iterations compiled, %ld / %ld stepped\n", a3, a30, b3, b30);
  CHECK_EQ_INT((int)a30, (int)a3);
  CHECK(b30 > b3);

  /* the while limit stops a compiled loop with the interpreter's error */
  tpu_ref_set_while_limit(5);
  long lim = run_n(m, 9, &out, &st);
  (void)lim;
  CHECK_EQ_INT(st, TPU_ERR_LIMIT);
  tpu_tensor_free(&out);
  tpu_ref_set_while_limit(100000000);

  tpu_module_free(m);
  tpu_module_free(fm);
  tpu_module_free(dm);
  tpu_module_free(nm);
  tpu_module_free(cm);
  CHECK_DONE();
}
