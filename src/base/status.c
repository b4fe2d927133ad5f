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

/* Length of the valid UTF-8 sequence at s (n bytes left) for a printable character, or 0:
 * C1 controls (U+0080-U+009F), overlong forms, surrogates and stray bytes are not. */
static size_t utf8_printable(const unsigned char *s, size_t n) {
  size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
  if (!len || s[0] > 0xf4 || len > n) return 0;
  for (size_t i = 1; i < len; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if (len == 2 && s[0] == 0xc2 && s[1] < 0xa0) return 0;        /* C1 controls */
  if (len == 3 && s[0] == 0xe0 && s[1] < 0xa0) return 0;        /* overlong */
  if (len == 3 && s[0] == 0xed && s[1] >= 0xa0) return 0;       /* surrogates */
  if (len == 4 && s[0] == 0xf0 && s[1] < 0x90) return 0;        /* overlong */
  if (len == 4 && s[0] == 0xf4 && s[1] >= 0x90) return 0;       /* beyond U+10FFFF */
  return len;
}

/* Appends `s` to buf[*k..n) with control bytes and invalid UTF-8 written as \xHH, so that
 * echoed input can neither break the line nor reach the terminal as a command. */
static void put_escaped(char *buf, size_t n, size_t *k, const char *s) {
  const unsigned char *u = (const unsigned char *)s;
  size_t len = strlen(s);
  for (size_t i = 0; i < len && *k + 1 < n;) {
    size_t w = u[i] >= 0x80 ? utf8_printable(u + i, len - i) : (u[i] >= 0x20 && u[i] != 0x7f);
    if (w) {
      if (*k + w >= n) break;
      memcpy(buf + *k, u + i, w);
      *k += w;
      i += w;
    } else {
      if (*k + 4 >= n) break;
      snprintf(buf + *k, 5, "\\x%02x", u[i]);
      *k += 4;
      i++;
    }
  }
  buf[*k] = 0;
}

void tpu_diag_format(const tpu_diag *d, char *buf, size_t n) {
  if (!n) return;
  size_t k = 0;
  buf[0] = 0;
  if (d->file[0]) {
    put_escaped(buf, n, &k, d->file);
    char pos[48];
    snprintf(pos, sizeof pos, ":%d:%d: ", d->line > 0 ? d->line : 0, d->col > 0 ? d->col : 0);
    put_escaped(buf, n, &k, pos);
  }
  put_escaped(buf, n, &k, "error: ");
  put_escaped(buf, n, &k, d->msg);
}

int tpu_loc_same(tpu_loc a, tpu_loc b) {
  if (a.line <= 0 || a.line != b.line || a.col != b.col) return 0;
  return a.file == b.file || (a.file && b.file && !strcmp(a.file, b.file));
}
