/* Growable strings. */
#include "base/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

void tpu_strbuf_init(tpu_strbuf *b) { memset(b, 0, sizeof *b); }

void tpu_strbuf_deinit(tpu_strbuf *b) {
  tpu_free(b->s);
  memset(b, 0, sizeof *b);
}

static int reserve(tpu_strbuf *b, size_t extra) {
  if (b->oom) return 0;
  if (b->len + extra + 1 <= b->cap) return 1;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) {
    if (cap > ((size_t)-1) / 2) {
      b->oom = 1;
      return 0;
    }
    cap *= 2;
  }
  char *ns = tpu_realloc(b->s, cap);
  if (!ns) {
    b->oom = 1;
    return 0;
  }
  b->s = ns;
  b->cap = cap;
  return 1;
}

void tpu_strbuf_append(tpu_strbuf *b, const char *s, size_t n) {
  if (!reserve(b, n)) return;
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = 0;
}

void tpu_strbuf_printf(tpu_strbuf *b, const char *fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (w < 0) return;
  if ((size_t)w < sizeof small) {
    tpu_strbuf_append(b, small, (size_t)w);
    return;
  }
  if (!reserve(b, (size_t)w)) return;
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, (size_t)w + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)w;
}

char *tpu_strbuf_take(tpu_strbuf *b) {
  char *r = b->oom ? NULL : b->s;
  if (b->oom) tpu_free(b->s);
  if (r == NULL && !b->oom) {
    r = tpu_malloc(1);
    if (r) r[0] = 0;
  }
  memset(b, 0, sizeof *b);
  return r;
}
