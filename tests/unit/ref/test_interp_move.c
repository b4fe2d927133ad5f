/* The reference interpreter's reshapes that keep the element type (reshape, copy, a bitcast
 * between row-major layouts): when the operand's value is read there for the last time, the
 * result takes its buffer (no allocation, no copy); when the operand is read again, the
 * result is a copy and the operand keeps its values. Checked by counting a run's allocations
 * (the allocation hook's counter) against the same program without the reshapes. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "hlo/hlo.h"
#include "ref/ref.h"

/* x -> -(x + x) through three reshapes of a value read once each. */
static const char *CHAIN =
    "HloModule chain\n"
    "ENTRY e {\n"
    "  p = s32[4] parameter(0)\n"
    "  a = s32[4] add(p, p)\n"
    "  r1 = s32[2,2] reshape(a)\n"
    "  r2 = s32[1,4] copy(r1)\n"
    "  r3 = s32[4] bitcast(r2)\n"
    "  ROOT n = s32[4] negate(r3)\n"
    "}\n";

/* The same values without the reshapes. */
static const char *PLAIN =
    "HloModule plain\n"
    "ENTRY e {\n"
    "  p = s32[4] parameter(0)\n"
    "  a = s32[4] add(p, p)\n"
    "  ROOT n = s32[4] negate(a)\n"
    "}\n";

/* a is read by the reshape and again by the root: the reshape copies. */
static const char *SHARED =
    "HloModule shared\n"
    "ENTRY e {\n"
    "  p = s32[4] parameter(0)\n"
    "  a = s32[4] add(p, p)\n"
    "  r = s32[2,2] reshape(a)\n"
    "  n = s32[2,2] negate(r)\n"
    "  ROOT t = (s32[2,2], s32[4]) tuple(n, a)\n"
    "}\n";

/* Runs src on {1, 2, 3, 4}; returns the run's allocations; *out gets the result. */
static long run(const char *src, tpu_tensor *out) {
  tpu_module *m = NULL;
  tpu_diag d;
  CHECK_EQ_INT(tpu_hlo_parse("move.hlo", src, strlen(src), &m, &d), TPU_OK);
  if (!m) return -1;
  int64_t four = 4;
  tpu_tensor arg;
  CHECK_EQ_INT(tpu_tensor_alloc(&arg, TPU_S32, 1, &four, &d), TPU_OK);
  for (int e = 0; e < 4; e++) tpu_tensor_set_i64(&arg, e, e + 1);
  tpu_alloc_fail_after(0); /* resets the counter */
  tpu_status st = tpu_ref_run(m, &arg, 1, out, &d);
  long allocs = tpu_alloc_fail_after(0);
  CHECK_EQ_INT(st, TPU_OK);
  tpu_tensor_free(&arg);
  tpu_module_free(m);
  return allocs;
}

int main(void) {
  tpu_tensor chain, plain, shared;
  long ac = run(CHAIN, &chain), ap = run(PLAIN, &plain);
  printf("three reshapes of values read once: %ld allocations; without them: %ld\n", ac, ap);
  CHECK(ac > 0 && ap > 0);
  /* The chain's computation has three instructions more (its plan's arrays are larger, not
   * more of them); its reshapes allocate nothing. */
  CHECK_EQ_INT(ac, ap);
  CHECK_EQ_INT(chain.rank, 1);
  CHECK_EQ_INT(chain.dims[0], 4);
  for (int e = 0; e < 4; e++) {
    CHECK_EQ_INT(tpu_tensor_get_i64(&chain, e), -2 * (e + 1));
    CHECK_EQ_INT(tpu_tensor_get_i64(&plain, e), -2 * (e + 1));
  }
  long as = run(SHARED, &shared);
  CHECK(as > 0);
  CHECK_EQ_INT(shared.dtype, TPU_TUPLE);
  if (shared.dtype == TPU_TUPLE) {
    CHECK_EQ_INT(shared.elems[0].rank, 2);
    for (int e = 0; e < 4; e++) {
      CHECK_EQ_INT(tpu_tensor_get_i64(&shared.elems[0], e), -2 * (e + 1));
      CHECK_EQ_INT(tpu_tensor_get_i64(&shared.elems[1], e), 2 * (e + 1));
    }
  }
  tpu_tensor_free(&chain);
  tpu_tensor_free(&plain);
  tpu_tensor_free(&shared);
  CHECK_DONE();
}
