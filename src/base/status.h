/* Internal status helpers: filling diagnostics with input and C source locations. */
#ifndef TPU_BASE_STATUS_H
#define TPU_BASE_STATUS_H

#include "tpusim/tpusim.h"

/* A location in an input file; line 0 means unknown. `file` is borrowed. */
typedef struct tpu_loc {
  const char *file;
  int line, col;
} tpu_loc;

#if defined(__GNUC__)
#define TPU_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TPU_PRINTF(a, b)
#endif

/* Fills `d` (may be NULL) and returns `st`. */
tpu_status tpu__fail(tpu_diag *d, tpu_status st, tpu_loc loc, const char *cfile, int cline,
                     const char *fmt, ...) TPU_PRINTF(6, 7);

static inline tpu_loc tpu_noloc(void) {
  tpu_loc l = {0, 0, 0};
  return l;
}

/* Same source position (file, line, column)? Positions without a line never match. */
int tpu_loc_same(tpu_loc a, tpu_loc b);

static inline tpu_loc tpu_loc_at(const char *file, int line, int col) {
  tpu_loc l = {file, line, col};
  return l;
}

#define TPU_FAIL(d, st, loc, ...) tpu__fail((d), (st), (loc), __FILE__, __LINE__, __VA_ARGS__)
#define TPU_TRY(expr)                  \
  do {                                 \
    tpu_status tpu_try_s_ = (expr);    \
    if (tpu_try_s_ != TPU_OK) return tpu_try_s_; \
  } while (0)

#endif
