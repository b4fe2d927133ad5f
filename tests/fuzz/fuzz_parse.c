/* libFuzzer target for the HLO front end: parse, verify, print, reparse. Any input must
 * end in a clean error or a module whose printed text reparses to the same text and the
 * same verdict; crashes, leaks, sanitizer reports and hangs are bugs. Each input then runs
 * once more with an allocation failure injected at a point chosen from its hash, so the
 * out-of-memory paths are fuzzed too. Built and run by scripts/fuzz. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "hlo/hlo.h"
#include "ir/verify.h"

static void die(const char *what, const char *a, const char *b) {
  fprintf(stderr, "fuzz_parse: %s\n--- first ---\n%s\n--- second ---\n%s\n", what, a ? a : "", b ? b : "");
  abort();
}

/* Parse, verify and print with the n-th allocation failing: only clean failures. */
static void run_oom(const uint8_t *data, size_t size, long n) {
  tpu_diag d;
  tpu_module *m = NULL;
  tpu_alloc_fail_after(n);
  tpu_status st = tpu_hlo_parse("fuzz.hlo", (const char *)data, size, &m, &d);
  if (st != TPU_OK && m) die("a failed parse returned a module", NULL, NULL);
  if (st == TPU_OK) {
    (void)tpu_ir_verify(m, &d);
    tpu_free(tpu_hlo_print(m));
    tpu_module_free(m);
  }
  tpu_alloc_fail_after(0);
}

static long pick(const uint8_t *data, size_t size, long n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 1099511628211ull;
  return 1 + (long)(h % (uint64_t)n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tpu_diag d;
  tpu_module *m = NULL;
  memset(&d, 0, sizeof d);
  tpu_alloc_fail_after(0);
  if (tpu_hlo_parse("fuzz.hlo", (const char *)data, size, &m, &d) != TPU_OK) {
    long n = tpu_alloc_fail_after(0);
    if (m) die("a failed parse returned a module", NULL, NULL);
    if (!d.msg[0]) die("a failed parse left no message", NULL, NULL);
    if (n > 0) run_oom(data, size, pick(data, size, n));
    return 0;
  }
  tpu_status v1 = tpu_ir_verify(m, &d);
  char *p1 = tpu_hlo_print(m);
  tpu_module_free(m);
  long n = tpu_alloc_fail_after(0); /* allocations of parse, verify and print */
  if (!p1) die("print ran out of memory", NULL, NULL);
  tpu_module *m2 = NULL;
  if (tpu_hlo_parse("printed.hlo", p1, strlen(p1), &m2, &d) != TPU_OK) {
    char buf[1200];
    tpu_diag_format(&d, buf, sizeof buf);
    die("the printed module does not parse", p1, buf);
  }
  tpu_status v2 = tpu_ir_verify(m2, &d);
  char *p2 = tpu_hlo_print(m2);
  tpu_module_free(m2);
  if (!p2) die("print ran out of memory", NULL, NULL);
  if (strcmp(p1, p2)) die("print(parse(print(parse(x)))) differs from print(parse(x))", p1, p2);
  if ((v1 == TPU_OK) != (v2 == TPU_OK)) die("the verifier's verdict changed after printing", p1, p2);
  tpu_free(p1);
  tpu_free(p2);
  if (n > 0) run_oom(data, size, pick(data, size, n));
  return 0;
}
