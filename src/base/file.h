/* All-or-nothing output files: write to a fresh temporary beside the target, then rename. */
#ifndef TPU_BASE_FILE_H
#define TPU_BASE_FILE_H

#include <stdio.h>

#include "base/status.h"

/* Creates a uniquely named temporary next to `path` ("PATH.tmp.XXXXXX", mode 0666 less
 * the umask) and opens it for writing. On success the caller owns *tmp and *f and must
 * pass both to tpu_file_commit. */
tpu_status tpu_file_begin(const char *path, char **tmp, FILE **f, tpu_diag *d);

/* Closes `f`; when `ok` and every write succeeded, renames `tmp` over `path`; otherwise
 * removes `tmp`, so `path` is either the complete new file or untouched. Frees `tmp`.
 * Returns TPU_ERR_IO naming `path` if a write, the close or the rename failed. */
tpu_status tpu_file_commit(const char *path, char *tmp, FILE *f, int ok, tpu_diag *d);

#endif
