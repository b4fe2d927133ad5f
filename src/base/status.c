/* Status names, messages and diagnostic formatting. */
#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *tpu_status_name(tpu_status s) {
  switch (s) {
#define X(name, code, msg) \
  case name:               \
    return #name;
    TPU_STATUS_LIST(X)
#undef X
  }
  return "TPU_UNKNOWN_STATUS";
}

const char *tpu_status_message(tpu_status s) {
  switch (s) {
#define X(name, code, msg) \
  case name:               \
    return msg;
    TPU_STATUS_LIST(X)
#undef X
  }
  return "unknown status";
}

const char *tpu_version(void) { return TPUSIM_VERSION; }

tpu_status tpu__fail(tpu_diag *d, tpu_status st, tpu_loc loc, const char *cfile, int cline,
                     const char *fmt, ...) {
  if (!d) return st;
  d->status = st;
  d->file[0] = 0;
  if (loc.file) snprintf(d->file, sizeof d->file, "%s", loc.file);
  d->line = loc.line;
  d->col = loc.col;
  d->src_file = cfile;
  d->src_line = cline;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->msg, sizeof d->msg, fmt, ap);
  va_end(ap);
  return st;
}

void tpu_diag_format(const tpu_diag *d, char *buf, size_t n) {
  if (d->file[0] && d->line > 0)
    snprintf(buf, n, "%s:%d:%d: error: %s", d->file, d->line, d->col, d->msg);
  else if (d->file[0])
    snprintf(buf, n, "%s: error: %s", d->file, d->msg);
  else
    snprintf(buf, n, "error: %s", d->msg);
}

int tpu_loc_same(tpu_loc a, tpu_loc b) {
  if (a.line <= 0 || a.line != b.line || a.col != b.col) return 0;
  return a.file == b.file || (a.file && b.file && !strcmp(a.file, b.file));
}
