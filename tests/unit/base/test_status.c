/* Diagnostics print as one line (docs/errors.md): FILE:LINE:COL in a text file, FILE:0:BYTE
 * in a binary one, "error: MSG" without a file; control bytes, C1 controls and invalid
 * UTF-8 from the input are written \xHH, valid UTF-8 stays as it is. */
#include <string.h>

#include "base/status.h"
#include "check.h"

static void fmt(const char *file, int line, int col, const char *msg, char *buf, size_t n) {
  tpu_diag d;
  memset(&d, 0, sizeof d);
  TPU_FAIL(&d, TPU_ERR_PARSE, tpu_loc_at(file, line, col), "%s", msg);
  tpu_diag_format(&d, buf, n);
}

int main(void) {
  char buf[512];
  fmt("a.hlo", 3, 7, "bad", buf, sizeof buf);
  CHECK_EQ_STR(buf, "a.hlo:3:7: error: bad");
  fmt("x.npy", 0, 65, "bad header", buf, sizeof buf);
  CHECK_EQ_STR(buf, "x.npy:0:65: error: bad header");
  fmt("x.npy", 0, 0, "cannot open", buf, sizeof buf);
  CHECK_EQ_STR(buf, "x.npy:0:0: error: cannot open");
  fmt(NULL, 0, 0, "no file", buf, sizeof buf);
  CHECK_EQ_STR(buf, "error: no file");
  /* the terminal-clearing target of issue 35, a newline, DEL, a C1 CSI, a stray byte */
  fmt("a.hlo", 4, 22, "target \"\x1b[2J\" a\nb\x7f \xc2\x9b \xff", buf, sizeof buf);
  CHECK_EQ_STR(buf, "a.hlo:4:22: error: target \"\\x1b[2J\" a\\x0ab\\x7f \\xc2\\x9b \\xff");
  /* valid UTF-8 (2, 3 and 4 bytes) is kept; overlong and surrogate forms are not */
  fmt("é.hlo", 1, 1, "名前 \xf0\x9f\x98\x80 \xc0\xaf \xed\xa0\x80", buf, sizeof buf);
  CHECK_EQ_STR(buf, "é.hlo:1:1: error: 名前 \xf0\x9f\x98\x80 \\xc0\\xaf \\xed\\xa0\\x80");
  /* a file name with control bytes is escaped too */
  fmt("\x1b]0;x\x07.hlo", 1, 2, "m", buf, sizeof buf);
  CHECK_EQ_STR(buf, "\\x1b]0;x\\x07.hlo:1:2: error: m");
  /* truncation never splits an escape or a character, and always ends the string */
  char small[24];
  fmt("a.hlo", 1, 1, "\x1b\x1b\x1b\x1b\x1b", small, sizeof small);
  CHECK(strlen(small) < sizeof small);
  CHECK(!strchr(small, '\x1b'));
  CHECK_EQ_STR(small, "a.hlo:1:1: error: \\x1b");
  CHECK_DONE();
}
