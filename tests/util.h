/* Helpers shared by the unit tests. */
#ifndef TPU_TESTS_UTIL_H
#define TPU_TESTS_UTIL_H

#include <stdio.h>
#include <stdlib.h>

/* The whole file as a NUL-terminated string (free() it), or NULL if it cannot be read. */
static inline char *test_read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *s = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
  if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s) s[n] = 0;
  fclose(f);
  return s;
}

#endif
