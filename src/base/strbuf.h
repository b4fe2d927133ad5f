/* A growable string: printf-style appends; an allocation failure is sticky (oom flag). */
#ifndef TPU_BASE_STRBUF_H
#define TPU_BASE_STRBUF_H

#include <stddef.h>

#include "base/status.h"

typedef struct tpu_strbuf {
  char *s;   /* NUL-terminated when non-NULL; owned */
  size_t len, cap;
  int oom;
} tpu_strbuf;

void tpu_strbuf_init(tpu_strbuf *b);
void tpu_strbuf_deinit(tpu_strbuf *b);
void tpu_strbuf_printf(tpu_strbuf *b, const char *fmt, ...) TPU_PRINTF(2, 3);
void tpu_strbuf_append(tpu_strbuf *b, const char *s, size_t n);
/* Hands the string to the caller (NULL if any append ran out of memory) and resets b. */
char *tpu_strbuf_take(tpu_strbuf *b);

#endif
