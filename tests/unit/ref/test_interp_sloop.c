/* While loops on integer slots (ref/sloop.h): a loop of small s32/u32/pred arrays, with a
 * call, slices, reshapes, converts, broadcasts, compares, selects and its state permuted, is
 * compiled once and its iterations allocate nothing; its values are bit-identical to the
 * loop stepped op by op (compiling off); loops outside the set are stepped as before; the
 * while limit still stops a compiled loop. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
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

/* The same loop with an f32 element in its state: outside the set. */
static const char *FLOAT_SRC =
    "HloModule fl\n"
    "body {\n"
    "  s = (s32[], f32[2]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  x = f32[2] get-tuple-element(s), index=1\n"
    "  one = s32[] constant(1)\n"
    "  j = s32[] add(i, one)\n"
    "  y = f32[2] add(x, x)\n"
    "  ROOT t = (s32[], f32[2]) tuple(j, y)\n"
    "}\n"
    "cond {\n"
    "  s = (s32[], f32[2]) parameter(0)\n"
    "  i = s32[] get-tuple-element(s), index=0\n"
    "  k = s32[] constant(3)\n"
    "  ROOT lt = pred[] compare(i, k), direction=LT\n"
    "}\n"
    "ENTRY e {\n"
    "  z = s32[] constant(0)\n"
    "  x0 = f32[2] constant({1, 2})\n"
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

int main(void) {
  tpu_module *m = NULL, *fm = NULL;
  tpu_diag d;
  CHECK_EQ_INT(tpu_hlo_parse("sloop.hlo", SRC, strlen(SRC), &m, &d), TPU_OK);
  CHECK_EQ_INT(tpu_hlo_parse("float.hlo", FLOAT_SRC, strlen(FLOAT_SRC), &fm, &d), TPU_OK);
  if (!m || !fm) CHECK_DONE();

  /* which loops compile */
  tpu__sloop *l = tpu__sloop_compile(find_while(m));
  CHECK(l != NULL);
  tpu__sloop_free(l);
  CHECK(tpu__sloop_compile(find_while(fm)) == NULL);

  /* values: compiled against stepped, for several trip counts (0 included) */
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
    if (s1 == TPU_OK && n == 9) { /* the rotation's values are not all zero: the test sees bits */
      const uint32_t *a = on.elems[0].data;
      CHECK(a[0] != 0 || a[7] != 0);
    }
    tpu_tensor_free(&on);
    tpu_tensor_free(&off);
  }

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
  CHECK_DONE();
}
