/* HLO text front end: parse into the IR, print back (print(parse(x)) is a fixed point). */
#ifndef TPU_HLO_HLO_H
#define TPU_HLO_HLO_H

#include <stddef.h>

#include "ir/ir.h"

/* Parses HLO text (as JAX's `as_text(dialect="hlo")` prints it or as XLA dumps it). `file`
 * names the input in diagnostics. On success *out owns a module (free with
 * tpu_module_free); on failure *out is NULL and d says where and why. The module is
 * resolved (names bound, typed attributes parsed) but not verified: see tpu_ir_verify. */
tpu_status tpu_hlo_parse(const char *file, const char *src, size_t len, tpu_module **out,
                         tpu_diag *d);
/* The most devices a module's header may name (replica_count, num_partitions and their
 * product; the SPMD partitioner's mesh has the same bound). */
#define TPU_HLO_MAX_DEVICES (1 << 20)

/* Reads and parses a file. */
tpu_status tpu_hlo_parse_file(const char *path, tpu_module **out, tpu_diag *d);

/* Prints the module in canonical HLO text: computations without signatures, names without
 * '%', operands in short form, attributes as written. Returns a tpu_malloc'd string or
 * NULL when memory runs out. */
char *tpu_hlo_print(const tpu_module *m);

/* Internal: typed attribute parsing for one instruction (hlo/attrs.c). */
tpu_status tpu__hlo_parse_attrs(tpu_module *m, tpu_instr *in, tpu_diag *d);
/* Internal: parses a literal's text for a shape into a new tensor (hlo/literal.c). */
tpu_status tpu__hlo_parse_literal(const char *text, size_t n, tpu_loc loc, const tpu_shape *shape,
                                  tpu_tensor *out, tpu_diag *d);

struct tpu_strbuf;
/* Internal: prints a tensor as an HLO literal ("{{1, 2}, {3, 4}}", or "5" for a scalar). */
void tpu__literal_put(struct tpu_strbuf *b, const tpu_tensor *t);

/* Splits an op whose float result type differs from its operands' (the XLA TPU compiler's
 * mixed-precision form) into the op at its operands' type and a convert (hlo/mixed.c). Run
 * by tpu_hlo_parse. */
tpu_status tpu__hlo_split_mixed_precision(tpu_module *m, tpu_diag *d);

#endif
