/* tpusim public C API: status codes, diagnostics, version. */
#ifndef TPUSIM_TPUSIM_H
#define TPUSIM_TPUSIM_H

#include <stddef.h>

#define TPUSIM_VERSION "0.1.0"

/* Status codes: 0 is success, errors are negative. ORDER: names and messages come from
 * this one list. */
#define TPU_STATUS_LIST(X)                                   \
  X(TPU_OK, 0, "ok")                                         \
  X(TPU_ERR_PARSE, -1, "syntax error")                       \
  X(TPU_ERR_INVALID, -2, "ill-formed program")               \
  X(TPU_ERR_UNSUPPORTED, -3, "unsupported")                  \
  X(TPU_ERR_IO, -4, "input/output error")                    \
  X(TPU_ERR_NOMEM, -5, "out of memory")                      \
  X(TPU_ERR_LIMIT, -6, "limit exceeded")                     \
  X(TPU_ERR_ARG, -7, "bad argument")                         \
  X(TPU_ERR_RUNTIME, -8, "runtime error")

typedef enum {
#define X(name, code, msg) name = code,
  TPU_STATUS_LIST(X)
#undef X
} tpu_status;

const char *tpu_status_name(tpu_status s);
const char *tpu_status_message(tpu_status s);

/* A diagnostic filled by a failing call. `file`/`line`/`col` locate the input (line 0 when
 * there is no input location); `src_file`/`src_line` locate the C code that failed. The
 * caller owns it; calls that succeed leave it untouched. */
typedef struct tpu_diag {
  tpu_status status;
  char file[256];
  int line, col;
  const char *src_file;
  int src_line;
  char msg[768];
} tpu_diag;

/* Writes "file:line:col: error: msg" (or "error: msg" without a location) into buf. */
void tpu_diag_format(const tpu_diag *d, char *buf, size_t n);

const char *tpu_version(void);

#endif
