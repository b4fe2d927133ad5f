/* All-or-nothing output files. */
#include "base/file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"

tpu_status tpu_file_begin(const char *path, char **tmp, FILE **f, tpu_diag *d) {
  *tmp = NULL;
  *f = NULL;
  size_t n = strlen(path) + 16;
  char *name = tpu_malloc(n);
  if (!name) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  snprintf(name, n, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(name);
  if (fd < 0) {
    tpu_status st = TPU_FAIL(d, TPU_ERR_IO, tpu_loc_at(path, 0, 0), "cannot create: %s", strerror(errno));
    tpu_free(name);
    return st;
  }
  mode_t mask = umask(0); /* mkstemp makes 0600; give the file the usual 0666 & ~umask */
  umask(mask);
  if (fchmod(fd, 0666 & ~mask) != 0) { /* best effort: the content is what matters */
  }
  *f = fdopen(fd, "w");
  if (!*f) {
    tpu_status st = TPU_FAIL(d, TPU_ERR_IO, tpu_loc_at(path, 0, 0), "cannot write: %s", strerror(errno));
    close(fd);
    unlink(name);
    tpu_free(name);
    return st;
  }
  *tmp = name;
  return TPU_OK;
}

tpu_status tpu_file_commit(const char *path, char *tmp, FILE *f, int ok, tpu_diag *d) {
  tpu_status st = TPU_OK;
  int werr = ferror(f);
  if (fclose(f) != 0 || werr) {
    if (ok) st = TPU_FAIL(d, TPU_ERR_IO, tpu_loc_at(path, 0, 0), "cannot write: %s", strerror(errno ? errno : EIO));
    ok = 0;
  }
  if (ok && rename(tmp, path) != 0) {
    st = TPU_FAIL(d, TPU_ERR_IO, tpu_loc_at(path, 0, 0), "cannot write: %s", strerror(errno));
    ok = 0;
  }
  if (!ok) unlink(tmp);
  tpu_free(tmp);
  return st;
}

