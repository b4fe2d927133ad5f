/* The HLO text scanner: a cursor over the source with line/column tracking, skipping
 * whitespace and comments, reading identifiers, numbers, strings and balanced spans. */
#ifndef TPU_HLO_LEX_H
#define TPU_HLO_LEX_H

#include <stddef.h>

#include "base/status.h"

typedef struct tpu_lex {
  const char *src;
  size_t len, pos;
  int line, col;
  const char *file;
} tpu_lex;

void tpu_lex_init(tpu_lex *lx, const char *file, const char *src, size_t len);
/* Where the cursor is (inline: every token's location is taken). */
static inline tpu_loc tpu_lex_loc(const tpu_lex *lx) {
  tpu_loc l = {lx->file, lx->line, lx->col};
  return l;
}
/* Skips spaces, tabs, newlines, "//" line comments and block comments. A block comment
 * that never closes is skipped to the end (the next read then fails at EOF). */
void tpu_lex_skip(tpu_lex *lx);
/* Like tpu_lex_skip, but stops at a newline; returns 1 if it stopped at one. */
int tpu_lex_skip_inline(tpu_lex *lx);
/* The scanner's three innermost steps, inline: every character of a module passes through
 * them (as calls, loading the planner's 540B candidates took 8-18 % longer). */
/* The current char, or -1 at the end. */
static inline int tpu_lex_peek(const tpu_lex *lx) {
  return lx->pos < lx->len ? (unsigned char)lx->src[lx->pos] : -1;
}
static inline int tpu_lex_peek_at(const tpu_lex *lx, size_t k) {
  return lx->pos + k < lx->len ? (unsigned char)lx->src[lx->pos + k] : -1;
}
/* One char. */
static inline void tpu_lex_advance(tpu_lex *lx) {
  if (lx->pos >= lx->len) return;
  if (lx->src[lx->pos] == '\n') {
    lx->line++;
    lx->col = 1;
  } else {
    lx->col++;
  }
  lx->pos++;
}
/* Consumes `c` after skipping whitespace/comments; returns 1 if it was there. */
int tpu_lex_accept(tpu_lex *lx, int c);
/* Reads an identifier: [%$]?[A-Za-z_][A-Za-z0-9_.$-]* (a '-' before '>' ends it). The
 * leading % is dropped from the returned span. Returns 0 (consuming nothing) if none. */
int tpu_lex_ident(tpu_lex *lx, const char **s, size_t *n);
/* Reads a decimal integer with optional sign. */
int tpu_lex_int(tpu_lex *lx, long long *v);
/* Scans a value span: up to (not including) a ',' at bracket depth 0, or a newline or
 * unmatched closer at depth 0, honouring () {} [] nesting and "strings". Returns the span
 * trimmed of trailing blanks; fails on an unterminated string or unbalanced brackets. */
tpu_status tpu_lex_value_span(tpu_lex *lx, const char **s, size_t *n, tpu_diag *d);
/* Scans from just after an opener to its matching closer (consumed); the span excludes both. */
tpu_status tpu_lex_balanced(tpu_lex *lx, int open, int close, const char **s, size_t *n,
                            tpu_diag *d);

#endif
