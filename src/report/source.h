/* Where an op came from, as the user wrote it: the JAX op name ("jit(step)/dot_general")
 * and the source file, line and function, from the HLO `metadata` attribute and the
 * FileNames / FunctionNames / FileLocations / StackFrames tables XLA prints before the
 * computations. A fusion takes its first dot or convolution's, else its root's. */
#ifndef TPU_REPORT_SOURCE_H
#define TPU_REPORT_SOURCE_H

#include <stddef.h>

#include "ir/ir.h"

typedef struct tpu_op_source {
  char *op_name, *source_file, *function; /* owned; NULL when unknown */
  int source_line;
  char *fused; /* a fusion: the user's ops inside it, "dot_general, tanh, add" (owned; NULL: none) */
} tpu_op_source;

typedef struct tpu_sources tpu_sources;

/* Reads the debug tables of a module's text (none is fine). */
tpu_status tpu_sources_read(const char *text, size_t len, tpu_sources **out, tpu_diag *d);
void tpu_sources_free(tpu_sources *s);

/* Fills row from in's metadata (s may be NULL: no tables). Returns 0 on out-of-memory. */
int tpu_sources_fill(const tpu_sources *s, const tpu_instr *in, tpu_op_source *row);
void tpu_op_source_free(tpu_op_source *row);

/* "dot_general @ model.py:12 [dot_general, tanh]" (without the jit(f)/ prefix, the file's
 * base name, a fusion's ops), or whatever is known. */
void tpu_op_source_format(const tpu_op_source *row, char *buf, size_t n);

#endif
