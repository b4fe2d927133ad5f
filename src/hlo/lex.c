/* The HLO text scanner. */
#include "hlo/lex.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

void tpu_lex_init(tpu_lex *lx, const char *file, const char *src, size_t len) {
  lx->src = src;
  lx->len = len;
  lx->pos = 0;
  lx->line = 1;
  lx->col = 1;
  lx->file = file;
}

static int skip_comment(tpu_lex *lx) {
  if (tpu_lex_peek(lx) != '/') return 0;
  int c2 = tpu_lex_peek_at(lx, 1);
  if (c2 == '/') {
    while (tpu_lex_peek(lx) != -1 && tpu_lex_peek(lx) != '\n') tpu_lex_advance(lx);
    return 1;
  }
  if (c2 == '*') {
    tpu_lex_advance(lx);
    tpu_lex_advance(lx);
    while (tpu_lex_peek(lx) != -1 && !(tpu_lex_peek(lx) == '*' && tpu_lex_peek_at(lx, 1) == '/'))
      tpu_lex_advance(lx);
    tpu_lex_advance(lx);
    tpu_lex_advance(lx);
    return 1;
  }
  return 0;
}

void tpu_lex_skip(tpu_lex *lx) {
  for (;;) {
    int c = tpu_lex_peek(lx);
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      tpu_lex_advance(lx);
    } else if (!skip_comment(lx)) {
      return;
    }
  }
}

int tpu_lex_skip_inline(tpu_lex *lx) {
  for (;;) {
    int c = tpu_lex_peek(lx);
    if (c == ' ' || c == '\t' || c == '\r') {
      tpu_lex_advance(lx);
    } else if (c == '\n') {
      return 1;
    } else if (c == '/' && tpu_lex_peek_at(lx, 1) == '/') {
      skip_comment(lx);
    } else if (c == '/' && tpu_lex_peek_at(lx, 1) == '*') {
      skip_comment(lx);
    } else {
      return 0;
    }
  }
}

int tpu_lex_accept(tpu_lex *lx, int c) {
  tpu_lex_skip(lx);
  if (tpu_lex_peek(lx) == c) {
    tpu_lex_advance(lx);
    return 1;
  }
  return 0;
}

/* Identifier characters, ASCII alone whatever the locale: 1 may start one, 2 may follow. */
#define LETTERS(f) \
  f('a') f('b') f('c') f('d') f('e') f('f') f('g') f('h') f('i') f('j') f('k') f('l') f('m') f('n') f('o') f('p') \
  f('q') f('r') f('s') f('t') f('u') f('v') f('w') f('x') f('y') f('z') f('A') f('B') f('C') f('D') f('E') f('F') \
  f('G') f('H') f('I') f('J') f('K') f('L') f('M') f('N') f('O') f('P') f('Q') f('R') f('S') f('T') f('U') f('V') \
  f('W') f('X') f('Y') f('Z') f('_')
#define START(c) [c] = 3,
static const unsigned char k_ident[256] = {LETTERS(START)['0'] = 2, ['1'] = 2, ['2'] = 2, ['3'] = 2, ['4'] = 2,
                                           ['5'] = 2, ['6'] = 2, ['7'] = 2, ['8'] = 2, ['9'] = 2, ['.'] = 2,
                                           ['-'] = 2, ['$'] = 2};
#undef START
#undef LETTERS
static int ident_start(int c) { return c >= 0 && (k_ident[c] & 1); }
static int ident_char(int c) { return c >= 0 && (k_ident[c] & 2); }

int tpu_lex_ident(tpu_lex *lx, const char **s, size_t *n) {
  tpu_lex_skip(lx);
  size_t k = 0;
  int c = tpu_lex_peek(lx);
  if (c == '%' || c == '$') k = 1;
  if (!ident_start(tpu_lex_peek_at(lx, k))) return 0;
  if (k) tpu_lex_advance(lx);
  /* no newline inside: the cursor moves one column a byte */
  const unsigned char *src = (const unsigned char *)lx->src;
  size_t start = lx->pos, pos = start, len = lx->len;
  while (pos < len && ident_char(src[pos]) && !(src[pos] == '-' && pos + 1 < len && src[pos + 1] == '>')) pos++;
  lx->col += (int)(pos - start);
  lx->pos = pos;
  *s = lx->src + start;
  *n = pos - start;
  return 1;
}

int tpu_lex_int(tpu_lex *lx, long long *v) {
  tpu_lex_skip(lx);
  size_t k = 0;
  int c = tpu_lex_peek(lx);
  if (c == '-' || c == '+') k = 1;
  if (!isdigit(tpu_lex_peek_at(lx, k))) return 0;
  int neg = c == '-';
  if (k) tpu_lex_advance(lx);
  unsigned long long acc = 0;
  int over = 0;
  const unsigned char *src = (const unsigned char *)lx->src;
  size_t pos = lx->pos, len = lx->len;
  for (; pos < len && src[pos] >= '0' && src[pos] <= '9'; pos++) {
    unsigned dgt = (unsigned)(src[pos] - '0');
    if (acc > (9223372036854775807ull - dgt) / 10) over = 1;
    acc = acc * 10 + dgt;
  }
  lx->col += (int)(pos - lx->pos);
  lx->pos = pos;
  if (over) return 0;
  *v = neg ? -(long long)acc : (long long)acc;
  return 1;
}

static tpu_status scan_string(tpu_lex *lx, tpu_diag *d) {
  tpu_loc at = tpu_lex_loc(lx);
  tpu_lex_advance(lx); /* opening quote */
  for (;;) {
    int c = tpu_lex_peek(lx);
    if (c == -1 || c == '\n') return TPU_FAIL(d, TPU_ERR_PARSE, at, "unterminated string");
    tpu_lex_advance(lx);
    if (c == '\\') {
      if (tpu_lex_peek(lx) == -1) return TPU_FAIL(d, TPU_ERR_PARSE, at, "unterminated string");
      tpu_lex_advance(lx);
    } else if (c == '"') {
      return TPU_OK;
    }
  }
}

#define MAX_NEST 256

/* What scan_nested does at a character: most of a long attribute (the digits of a
 * 4,096-chip program's group lists) is plain and only moves the cursor. */
enum { SC_PLAIN, SC_OPEN, SC_CLOSE, SC_QUOTE, SC_SLASH, SC_END_TOP, SC_NEWLINE };
static const unsigned char k_scan_class[256] = {
    ['('] = SC_OPEN,  ['{'] = SC_OPEN,  ['['] = SC_OPEN,     [')'] = SC_CLOSE,  ['}'] = SC_CLOSE,
    [']'] = SC_CLOSE, ['"'] = SC_QUOTE, ['/'] = SC_SLASH, [','] = SC_END_TOP, ['\n'] = SC_NEWLINE};

/* Scans a value with balanced brackets and strings. The cursor is kept in locals and written
 * back to lx before anything that reads it (a string, an error, the return). */
static tpu_status scan_nested(tpu_lex *lx, int stop_at_top, tpu_diag *d) {
  char stack[MAX_NEST];
  int wline[MAX_NEST], wcol[MAX_NEST]; /* where each open bracket is */
  int depth = 0;
  const unsigned char *src = (const unsigned char *)lx->src;
  const size_t len = lx->len;
  size_t pos = lx->pos;
  int line = lx->line, col = lx->col;
#define SYNC() (lx->pos = pos, lx->line = line, lx->col = col)
  for (;;) {
    if (pos >= len) {
      SYNC();
      if (depth) {
        tpu_loc at = {lx->file, wline[depth - 1], wcol[depth - 1]};
        return TPU_FAIL(d, TPU_ERR_PARSE, at, "'%c' is never closed", stack[depth - 1]);
      }
      return TPU_OK;
    }
    const int c = src[pos];
    switch (k_scan_class[c]) {
      case SC_PLAIN:
        pos++;
        col++;
        continue;
      case SC_NEWLINE:
        if (depth == 0 && stop_at_top) {
          SYNC();
          return TPU_OK;
        }
        pos++;
        line++;
        col = 1;
        continue;
      case SC_END_TOP:
        if (depth == 0 && stop_at_top) {
          SYNC();
          return TPU_OK;
        }
        pos++;
        col++;
        continue;
      case SC_QUOTE:
        SYNC();
        TPU_TRY(scan_string(lx, d));
        pos = lx->pos;
        line = lx->line;
        col = lx->col;
        continue;
      case SC_SLASH:
        if (depth == 0 && stop_at_top && pos + 1 < len && (src[pos + 1] == '*' || src[pos + 1] == '/')) {
          SYNC();
          return TPU_OK;
        }
        pos++;
        col++;
        continue;
      case SC_OPEN:
        if (depth == MAX_NEST) {
          SYNC();
          return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_lex_loc(lx), "brackets nested too deeply");
        }
        stack[depth] = (char)c;
        wline[depth] = line;
        wcol[depth] = col;
        depth++;
        pos++;
        col++;
        continue;
      default: { /* SC_CLOSE */
        if (depth == 0) { /* an unmatched closer ends the span */
          SYNC();
          return TPU_OK;
        }
        char open = stack[depth - 1];
        char want = open == '(' ? ')' : open == '{' ? '}' : ']';
        if (c != want) {
          SYNC();
          return TPU_FAIL(d, TPU_ERR_PARSE, tpu_lex_loc(lx), "expected '%c' to close '%c' at line %d, found '%c'",
                          want, open, wline[depth - 1], c);
        }
        depth--;
        pos++;
        col++;
        if (depth == 0 && !stop_at_top) {
          SYNC();
          return TPU_OK;
        }
        continue;
      }
    }
  }
#undef SYNC
}

tpu_status tpu_lex_value_span(tpu_lex *lx, const char **s, size_t *n, tpu_diag *d) {
  tpu_lex_skip_inline(lx);
  size_t start = lx->pos;
  TPU_TRY(scan_nested(lx, 1, d));
  size_t end = lx->pos;
  while (end > start && isspace((unsigned char)lx->src[end - 1])) end--;
  *s = lx->src + start;
  *n = end - start;
  return TPU_OK;
}

tpu_status tpu_lex_balanced(tpu_lex *lx, int open, int close, const char **s, size_t *n,
                            tpu_diag *d) {
  /* Caller has consumed `open`; scan the inside as a nested span and expect `close`. */
  size_t start = lx->pos;
  tpu_loc at = tpu_lex_loc(lx);
  for (;;) {
    TPU_TRY(scan_nested(lx, 0, d));
    int c = tpu_lex_peek(lx);
    if (c == close) break;
    if (c == -1) return TPU_FAIL(d, TPU_ERR_PARSE, at, "'%c' is never closed", open);
    if (c == ')' || c == '}' || c == ']')
      return TPU_FAIL(d, TPU_ERR_PARSE, tpu_lex_loc(lx), "expected '%c', found '%c'", close, c);
  }
  *s = lx->src + start;
  *n = lx->pos - start;
  tpu_lex_advance(lx);
  return TPU_OK;
}
