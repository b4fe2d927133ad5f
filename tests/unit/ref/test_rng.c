/* rng-bit-generator on the reference interpreter: ThreeFry and Philox bits and state
 * updates, bit for bit against JAX on CPU (rng_cases.h, from gen_rng_cases.py). */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "hlo/hlo.h"
#include "ref/ref.h"
#include "rng_cases.h"

/* Parses and runs `src` on one u64[ns] state; returns 1 on success. */
static int run_state(const char *src, const unsigned long long *state, int ns, tpu_tensor *out) {
  tpu_module *m = NULL;
  tpu_diag d;
  char buf[1200];
  if (tpu_hlo_parse("rng.hlo", src, strlen(src), &m, &d) != TPU_OK) {
    tpu_diag_format(&d, buf, sizeof buf);
    fprintf(stderr, "parse: %s\n%s\n", buf, src);
    return 0;
  }
  tpu_tensor in;
  int64_t dims[1] = {ns};
  int ok = tpu_tensor_alloc(&in, TPU_U64, 1, dims, &d) == TPU_OK;
  if (ok) {
    memcpy(in.data, state, sizeof(unsigned long long) * (size_t)ns);
    ok = tpu_ref_run(m, &in, 1, out, &d) == TPU_OK;
    if (!ok) {
      tpu_diag_format(&d, buf, sizeof buf);
      fprintf(stderr, "run: %s\n%s\n", buf, src);
    }
  }
  tpu_tensor_free(&in);
  tpu_module_free(m);
  return ok;
}

static unsigned long long raw_bits(const tpu_tensor *t, int64_t i) {
  size_t es = tpu_dtype_size(t->dtype);
  unsigned long long v = 0;
  memcpy(&v, (const char *)t->data + (size_t)i * es, es); /* little-endian host */
  return v;
}

static void check_case(const rng_case *c) {
  char src[512];
  snprintf(src, sizeof src,
           "HloModule m\nENTRY e {\n  s = u64[2] parameter(0)\n"
           "  ROOT r = (u64[2], %s[%s]) rng-bit-generator(s), algorithm=%s\n}\n",
           c->dtype, c->dims, c->alg);
  tpu_tensor out;
  int ok = run_state(src, c->state, 2, &out);
  CHECK(ok);
  if (!ok) return;
  const tpu_tensor *st = &out.elems[0], *bits = &out.elems[1];
  int64_t n = tpu_tensor_numel(bits);
  CHECK_EQ_INT(n, c->n);
  int bad = 0;
  for (int i = 0; i < 2; i++)
    if (raw_bits(st, i) != c->new_state[i]) bad++;
  for (int64_t i = 0; i < n && i < c->n; i++)
    if (raw_bits(bits, i) != c->bits[i]) {
      if (bad < 4)
        fprintf(stderr, "%s %s[%s] element %lld: got 0x%llx want 0x%llx\n", c->alg, c->dtype, c->dims, (long long)i,
                raw_bits(bits, i), c->bits[i]);
      bad++;
    }
  if (bad) fprintf(stderr, "case %s %s[%s]: %d mismatches\n", c->alg, c->dtype, c->dims, bad);
  CHECK_EQ_INT(bad, 0);
  tpu_tensor_free(&out);
}

/* s32 bits are the u32 bits reinterpreted (JAX only asks for unsigned types). */
static void check_signed_same_bits(void) {
  const char *u = "HloModule m\nENTRY e {\n  s = u64[2] parameter(0)\n"
                  "  ROOT r = (u64[2], u32[3,4]) rng-bit-generator(s), algorithm=rng_philox\n}\n";
  const char *s = "HloModule m\nENTRY e {\n  s = u64[2] parameter(0)\n"
                  "  ROOT r = (u64[2], s32[3,4]) rng-bit-generator(s), algorithm=rng_philox\n}\n";
  unsigned long long st[2] = {7, 9};
  tpu_tensor a, b;
  CHECK(run_state(u, st, 2, &a));
  CHECK(run_state(s, st, 2, &b));
  CHECK_EQ_INT(memcmp(a.elems[1].data, b.elems[1].data, 48), 0);
  CHECK_EQ_INT(b.elems[1].dtype, TPU_S32);
  tpu_tensor_free(&a);
  tpu_tensor_free(&b);
}

/* A u64[3] Philox state carries the whole 128-bit counter (low = state[1], high =
 * state[2]); with high == key it must give the u64[2] state's bits, and the high word
 * is written back with the carry. */
static void check_philox_u64x3(void) {
  const char *two = "HloModule m\nENTRY e {\n  s = u64[2] parameter(0)\n"
                    "  ROOT r = (u64[2], u32[9]) rng-bit-generator(s), algorithm=rng_philox\n}\n";
  const char *three = "HloModule m\nENTRY e {\n  s = u64[3] parameter(0)\n"
                      "  ROOT r = (u64[3], u32[9]) rng-bit-generator(s), algorithm=rng_philox\n}\n";
  unsigned long long s2[2] = {42, 0xFFFFFFFFFFFFFFFEull};
  unsigned long long s3[3] = {42, 0xFFFFFFFFFFFFFFFEull, 42};
  tpu_tensor a, b;
  CHECK(run_state(two, s2, 2, &a));
  CHECK(run_state(three, s3, 3, &b));
  CHECK_EQ_INT(memcmp(a.elems[1].data, b.elems[1].data, 36), 0);
  /* 9 words use 3 blocks: low 0xFF..FE + 3 wraps to 1 and carries into the high word. */
  CHECK(raw_bits(&b.elems[0], 0) == 42);
  CHECK(raw_bits(&b.elems[0], 1) == 1);
  CHECK(raw_bits(&b.elems[0], 2) == 43);
  CHECK(raw_bits(&a.elems[0], 1) == 1);
  tpu_tensor_free(&a);
  tpu_tensor_free(&b);
}

/* Threefry needs u64[2]: a u64[3] state is refused with the instruction's location. */
static void check_bad_state(void) {
  const char *src = "HloModule m\nENTRY e {\n  s = u64[3] parameter(0)\n"
                    "  ROOT r = (u64[3], u32[4]) rng-bit-generator(s), algorithm=rng_three_fry\n}\n";
  tpu_module *m = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse("bad.hlo", src, strlen(src), &m, &d) == TPU_OK);
  if (!m) return;
  tpu_tensor in, out;
  int64_t dims[1] = {3};
  CHECK(tpu_tensor_alloc(&in, TPU_U64, 1, dims, &d) == TPU_OK);
  memset(&d, 0, sizeof d);
  CHECK(tpu_ref_run(m, &in, 1, &out, &d) != TPU_OK);
  CHECK_EQ_INT(d.line, 4);
  CHECK(strstr(d.msg, "u64[2]") != NULL);
  tpu_tensor_free(&in);
  tpu_module_free(m);
}

int main(void) {
  for (size_t i = 0; i < sizeof rng_cases / sizeof rng_cases[0]; i++) check_case(&rng_cases[i]);
  check_signed_same_bits();
  check_philox_u64x3();
  check_bad_state();
  CHECK_DONE();
}
