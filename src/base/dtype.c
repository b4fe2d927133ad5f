/* The dtype table's accessors. */
#include "base/dtype.h"

#include <string.h>

static const struct {
  const char *name;
  size_t len; /* strlen(name): tpu_dtype_parse compares lengths first */
  size_t size;
  const char *npy;
  char kind;
} k_dtypes[] = {
#define X(e, name, size, descr, kind) {name, sizeof(name) - 1, size, descr, kind},
    TPU_DTYPE_LIST(X)
#undef X
};
_Static_assert(sizeof k_dtypes / sizeof k_dtypes[0] == TPU_DTYPE_COUNT, "dtype table");

const char *tpu_dtype_name(tpu_dtype t) { return (unsigned)t < TPU_DTYPE_COUNT ? k_dtypes[t].name : "?"; }
size_t tpu_dtype_size(tpu_dtype t) { return (unsigned)t < TPU_DTYPE_COUNT ? k_dtypes[t].size : 0; }
const char *tpu_dtype_npy(tpu_dtype t) { return (unsigned)t < TPU_DTYPE_COUNT ? k_dtypes[t].npy : ""; }
char tpu_dtype_kind(tpu_dtype t) { return (unsigned)t < TPU_DTYPE_COUNT ? k_dtypes[t].kind : '?'; }

int tpu_dtype_parse(const char *s, size_t n, tpu_dtype *out) {
  for (int i = 0; i < TPU_DTYPE_COUNT; i++) {
    if (i == TPU_TUPLE) continue;
    if (k_dtypes[i].len == n && memcmp(k_dtypes[i].name, s, n) == 0) {
      *out = (tpu_dtype)i;
      return 1;
    }
  }
  return 0;
}
