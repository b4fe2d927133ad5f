/* The op and dtype tables' names read back: every opcode's and element type's name parses
 * to itself, a prefix or an extension of a name to nothing (both parsers compare each
 * table entry's length first, kept beside its name). */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "ir/ir.h"

int main(void) {
  long bad = 0;
  for (int i = 0; i < TPU_OP_COUNT; i++) {
    const char *n = tpu_op_name((tpu_opcode)i);
    tpu_opcode op;
    size_t len = strlen(n);
    bad += !tpu_op_parse(n, len, &op) || (int)op != i;
    bad += tpu_op_parse(n, len - 1, &op) && !strncmp(tpu_op_name(op), n, len) && strlen(tpu_op_name(op)) == len;
    char longer[96];
    snprintf(longer, sizeof longer, "%sx", n);
    bad += tpu_op_parse(longer, len + 1, &op);
  }
  CHECK_EQ_INT(bad, 0);
  for (int i = 0; i < TPU_DTYPE_COUNT; i++) {
    if (i == TPU_TUPLE) continue;
    const char *n = tpu_dtype_name((tpu_dtype)i);
    tpu_dtype t;
    bad += !tpu_dtype_parse(n, strlen(n), &t) || (int)t != i;
    char longer[64];
    snprintf(longer, sizeof longer, "%s9", n);
    bad += tpu_dtype_parse(longer, strlen(longer), &t);
  }
  CHECK_EQ_INT(bad, 0);
  tpu_opcode op;
  CHECK(tpu_op_parse("optimization-barrier", 20, &op) && op == TPU_OP_OPT_BARRIER);
  CHECK(!tpu_op_parse("ad", 2, &op));
  CHECK_DONE();
}
