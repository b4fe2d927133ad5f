/* JSON reader into an arena-owned tree with locations, and the report writer. */
#include "base/json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- reader */

typedef struct {
  const unsigned char *p, *end;
  int line, col;
  tpu_json_doc *doc;
  tpu_diag *d;
} reader;

static tpu_loc here(const reader *r) {
  tpu_loc l = {r->doc->file, r->line, r->col};
  return l;
}

static tpu_status nomem(reader *r) {
  return TPU_FAIL(r->d, TPU_ERR_NOMEM, here(r), "out of memory while reading JSON");
}

/* Advances one byte; a UTF-8 continuation byte does not start a new column. */
static void adv(reader *r) {
  if (*r->p == '\n') {
    r->line++;
    r->col = 1;
  } else if ((*r->p & 0xC0) != 0x80) {
    r->col++;
  }
  r->p++;
}

static void skip_ws(reader *r) {
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
    adv(r);
}

/* Describes the byte at the cursor for messages. */
static void describe(const reader *r, char *buf, size_t n) {
  if (r->p >= r->end)
    snprintf(buf, n, "end of input");
  else if (*r->p >= 0x20 && *r->p < 0x7f)
    snprintf(buf, n, "'%c'", *r->p);
  else
    snprintf(buf, n, "byte 0x%02x", *r->p);
}

/* Length of the valid UTF-8 sequence at s (at most `avail` bytes), or 0 if invalid
 * (overlong forms, surrogates and code points above U+10FFFF are invalid). */
static int utf8_seq(const unsigned char *s, size_t avail) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  int n;
  unsigned min;
  if (c >= 0xC2 && c <= 0xDF) n = 2, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, min = 0x10000;
  else return 0;
  if ((size_t)n > avail) return 0;
  unsigned cp = c & (0x3Fu >> (n - 1));
  for (int i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

static int put_utf8(unsigned cp, unsigned char *o) {
  if (cp < 0x80) {
    o[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (unsigned char)(0xC0 | (cp >> 6));
    o[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | (cp >> 12));
    o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | (cp >> 18));
  o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Reads 4 hex digits after "\u" at the cursor (the cursor is on the first digit). */
static tpu_status read_hex4(reader *r, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    if (r->p >= r->end) return TPU_FAIL(r->d, TPU_ERR_PARSE, here(r), "unterminated string");
    unsigned c = *r->p, h;
    if (c >= '0' && c <= '9') h = c - '0';
    else if (c >= 'a' && c <= 'f') h = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') h = c - 'A' + 10;
    else return TPU_FAIL(r->d, TPU_ERR_PARSE, here(r), "expected 4 hex digits after \\u");
    v = v * 16 + h;
    adv(r);
  }
  *out = v;
  return TPU_OK;
}

/* Parses a string at the cursor (on the opening quote) into arena memory. */
static tpu_status parse_string(reader *r, const char **out, size_t *out_len) {
  adv(r); /* opening quote */
  /* Decoded text is never longer than the raw text, so size the buffer from a scan. */
  const unsigned char *q = r->p;
  while (q < r->end && *q != '"') q += (*q == '\\' && q + 1 < r->end) ? 2 : 1;
  unsigned char *buf = tpu_arena_alloc(&r->doc->arena, (size_t)(q - r->p) + 1);
  if (!buf) return nomem(r);
  size_t n = 0;
  for (;;) {
    /* a run of printable ASCII other than '"' and '\\' (most of a chip file's citations and
     * notes): copied whole, one column a byte, as adv() counts them */
    const unsigned char *run = r->p;
    while (run < r->end && *run >= 0x20 && *run < 0x7f && *run != '"' && *run != '\\') run++;
    if (run > r->p) {
      memcpy(buf + n, r->p, (size_t)(run - r->p));
      n += (size_t)(run - r->p);
      r->col += (int)(run - r->p);
      r->p = run;
    }
    if (r->p >= r->end) return TPU_FAIL(r->d, TPU_ERR_PARSE, here(r), "unterminated string");
    unsigned c = *r->p;
    if (c == '"') {
      adv(r);
      break;
    }
    if (c < 0x20)
      return TPU_FAIL(r->d, TPU_ERR_PARSE, here(r),
                      "control character 0x%02x in a string (write it as an escape)", c);
    if (c != '\\') {
      int k = utf8_seq(r->p, (size_t)(r->end - r->p));
      if (!k) return TPU_FAIL(r->d, TPU_ERR_PARSE, here(r), "invalid UTF-8 in a string");
      for (int i = 0; i < k; i++) {
        buf[n++] = *r->p;
        adv(r);
      }
      continue;
    }
    tpu_loc esc = here(r);
    adv(r);
    if (r->p >= r->end) return TPU_FAIL(r->d, TPU_ERR_PARSE, here(r), "unterminated string");
    c = *r->p;
    adv(r);
    switch (c) {
      case '"': buf[n++] = '"'; break;
      case '\\': buf[n++] = '\\'; break;
      case '/': buf[n++] = '/'; break;
      case 'b': buf[n++] = '\b'; break;
      case 'f': buf[n++] = '\f'; break;
      case 'n': buf[n++] = '\n'; break;
      case 'r': buf[n++] = '\r'; break;
      case 't': buf[n++] = '\t'; break;
      case 'u': {
        unsigned cp;
        TPU_TRY(read_hex4(r, &cp));
        if (cp >= 0xDC00 && cp <= 0xDFFF)
          return TPU_FAIL(r->d, TPU_ERR_PARSE, esc, "unpaired low surrogate \\u%04X", cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u')
            return TPU_FAIL(r->d, TPU_ERR_PARSE, esc, "unpaired high surrogate \\u%04X", cp);
          adv(r);
          adv(r);
          unsigned lo;
          TPU_TRY(read_hex4(r, &lo));
          if (lo < 0xDC00 || lo > 0xDFFF)
            return TPU_FAIL(r->d, TPU_ERR_PARSE, esc, "unpaired high surrogate \\u%04X", cp);
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        n += (size_t)put_utf8(cp, buf + n);
        break;
      }
      default:
        if (c >= 0x20 && c < 0x7f)
          return TPU_FAIL(r->d, TPU_ERR_PARSE, esc, "invalid escape '\\%c' in a string", (int)c);
        return TPU_FAIL(r->d, TPU_ERR_PARSE, esc, "invalid escape in a string");
    }
  }
  buf[n] = 0;
  *out = (const char *)buf;
  *out_len = n;
  return TPU_OK;
}

static int is_digit(const reader *r) { return r->p < r->end && *r->p >= '0' && *r->p <= '9'; }

static tpu_status parse_number(reader *r, tpu_json *v) {
  const unsigned char *start = r->p;
  tpu_loc at = here(r);
  int integral = 1;
  if (*r->p == '-') adv(r);
  if (!is_digit(r)) return TPU_FAIL(r->d, TPU_ERR_PARSE, at, "invalid number: expected a digit");
  if (*r->p == '0') {
    adv(r);
    if (is_digit(r))
      return TPU_FAIL(r->d, TPU_ERR_PARSE, at, "invalid number: leading zeros are not allowed");
  } else {
    while (is_digit(r)) adv(r);
  }
  if (r->p < r->end && *r->p == '.') {
    integral = 0;
    adv(r);
    if (!is_digit(r))
      return TPU_FAIL(r->d, TPU_ERR_PARSE, here(r), "invalid number: expected a digit after '.'");
    while (is_digit(r)) adv(r);
  }
  if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
    integral = 0;
    adv(r);
    if (r->p < r->end && (*r->p == '+' || *r->p == '-')) adv(r);
    if (!is_digit(r))
      return TPU_FAIL(r->d, TPU_ERR_PARSE, here(r),
                      "invalid number: expected a digit in the exponent");
    while (is_digit(r)) adv(r);
  }
  size_t len = (size_t)(r->p - start);
  char tmp[512];
  if (len >= sizeof tmp)
    return TPU_FAIL(r->d, TPU_ERR_PARSE, at, "number longer than %zu characters", sizeof tmp - 1);
  memcpy(tmp, start, len);
  tmp[len] = 0;
  v->kind = TPU_JSON_NUMBER;
  v->num = strtod(tmp, NULL);
  if (isinf(v->num)) return TPU_FAIL(r->d, TPU_ERR_PARSE, at, "number %s is out of range", tmp);
  if (integral) {
    errno = 0;
    long long ll = strtoll(tmp, NULL, 10);
    if (errno == 0) {
      v->is_int = 1;
      v->ival = (int64_t)ll;
    }
  }
  return TPU_OK;
}

static int cmp_members(const void *a, const void *b) {
  const tpu_json *x = *(const tpu_json *const *)a, *y = *(const tpu_json *const *)b;
  size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
  int c = memcmp(x->key, y->key, n);
  if (c) return c;
  if (x->key_len != y->key_len) return x->key_len < y->key_len ? -1 : 1;
  /* Equal keys: document order, so the later one is reported. */
  if (x->key_line != y->key_line) return x->key_line < y->key_line ? -1 : 1;
  return (x->key_col > y->key_col) - (x->key_col < y->key_col);
}

/* Builds `items` from the sibling list and, for objects, rejects duplicate keys. */
static tpu_status finish_container(reader *r, tpu_json *v, tpu_json *first) {
  v->items = tpu_arena_alloc(&r->doc->arena, sizeof(tpu_json *) * (v->count ? v->count : 1));
  if (!v->items) return nomem(r);
  size_t i = 0;
  for (tpu_json *c = first; c; c = c->next) v->items[i++] = c;
  if (v->kind != TPU_JSON_OBJECT || v->count < 2) return TPU_OK;
  tpu_json **sorted = tpu_arena_alloc(&r->doc->arena, sizeof(tpu_json *) * v->count);
  if (!sorted) return nomem(r);
  memcpy(sorted, v->items, sizeof(tpu_json *) * v->count);
  qsort(sorted, v->count, sizeof *sorted, cmp_members);
  for (i = 1; i < v->count; i++) {
    const tpu_json *a = sorted[i - 1], *b = sorted[i];
    if (a->key_len == b->key_len && memcmp(a->key, b->key, a->key_len) == 0) {
      tpu_loc l = {r->doc->file, b->key_line, b->key_col};
      return TPU_FAIL(r->d, TPU_ERR_PARSE, l, "duplicate key \"%s\" (first at line %d)", b->key,
                      a->key_line);
    }
  }
  return TPU_OK;
}

static tpu_status parse_value(reader *r, tpu_json **out, int depth);

static tpu_status parse_container(reader *r, tpu_json *v, int depth) {
  int is_obj = *r->p == '{';
  char close = is_obj ? '}' : ']';
  if (depth >= TPU_JSON_MAX_DEPTH)
    return TPU_FAIL(r->d, TPU_ERR_PARSE, here(r), "nesting deeper than %d levels",
                    TPU_JSON_MAX_DEPTH);
  v->kind = is_obj ? TPU_JSON_OBJECT : TPU_JSON_ARRAY;
  adv(r);
  skip_ws(r);
  tpu_json *first = NULL, *last = NULL;
  if (r->p < r->end && *r->p == close) {
    adv(r);
    return finish_container(r, v, first);
  }
  for (;;) {
    const char *key = NULL;
    size_t key_len = 0;
    int kl = 0, kc = 0;
    if (is_obj) {
      if (r->p >= r->end || *r->p != '"') {
        char what[32];
        describe(r, what, sizeof what);
        return TPU_FAIL(r->d, TPU_ERR_PARSE, here(r), "expected a string key, found %s", what);
      }
      kl = r->line;
      kc = r->col;
      TPU_TRY(parse_string(r, &key, &key_len));
      skip_ws(r);
      if (r->p >= r->end || *r->p != ':') {
        char what[32];
        describe(r, what, sizeof what);
        return TPU_FAIL(r->d, TPU_ERR_PARSE, here(r), "expected ':' after key \"%s\", found %s",
                        key, what);
      }
      adv(r);
      skip_ws(r);
    }
    tpu_json *item;
    TPU_TRY(parse_value(r, &item, depth + 1));
    item->key = key;
    item->key_len = key_len;
    item->key_line = kl;
    item->key_col = kc;
    if (last) last->next = item;
    else first = item;
    last = item;
    v->count++;
    skip_ws(r);
    if (r->p < r->end && *r->p == ',') {
      adv(r);
      skip_ws(r);
      continue;
    }
    if (r->p < r->end && *r->p == (unsigned char)close) {
      adv(r);
      return finish_container(r, v, first);
    }
    char what[32];
    describe(r, what, sizeof what);
    return TPU_FAIL(r->d, TPU_ERR_PARSE, here(r), "expected ',' or '%c' in %s, found %s", close,
                    is_obj ? "an object" : "an array", what);
  }
}

static int match_word(const reader *r, const char *w) {
  size_t n = strlen(w);
  return (size_t)(r->end - r->p) >= n && memcmp(r->p, w, n) == 0;
}

static tpu_status parse_value(reader *r, tpu_json **out, int depth) {
  tpu_json *v = tpu_arena_alloc(&r->doc->arena, sizeof *v);
  if (!v) return nomem(r);
  v->line = r->line;
  v->col = r->col;
  *out = v;
  if (r->p >= r->end)
    return TPU_FAIL(r->d, TPU_ERR_PARSE, here(r), "expected a value, found end of input");
  unsigned c = *r->p;
  if (c == '{' || c == '[') return parse_container(r, v, depth);
  if (c == '"') {
    v->kind = TPU_JSON_STRING;
    return parse_string(r, &v->str, &v->len);
  }
  if (c == '-' || (c >= '0' && c <= '9')) return parse_number(r, v);
  static const struct {
    const char *word;
    tpu_json_kind kind;
    int b;
  } words[] = {{"true", TPU_JSON_BOOL, 1}, {"false", TPU_JSON_BOOL, 0}, {"null", TPU_JSON_NULL, 0}};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
    if (match_word(r, words[i].word)) {
      v->kind = words[i].kind;
      v->boolean = words[i].b;
      for (size_t k = strlen(words[i].word); k; k--) adv(r);
      return TPU_OK;
    }
  }
  char what[32];
  describe(r, what, sizeof what);
  return TPU_FAIL(r->d, TPU_ERR_PARSE, here(r), "expected a value, found %s", what);
}

tpu_status tpu_json_parse(const char *text, size_t n, const char *file, tpu_json_doc *doc,
                          tpu_diag *d) {
  tpu_arena_init(&doc->arena);
  doc->root = NULL;
  doc->file = tpu_arena_strdup(&doc->arena, file ? file : "<input>");
  if (!doc->file)
    return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory while reading JSON");
  reader r = {(const unsigned char *)text, (const unsigned char *)text + n, 1, 1, doc, d};
  if (n >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) r.p += 3;
  skip_ws(&r);
  tpu_json *root;
  tpu_status s = parse_value(&r, &root, 0);
  if (s == TPU_OK) {
    skip_ws(&r);
    if (r.p < r.end) {
      char what[32];
      describe(&r, what, sizeof what);
      s = TPU_FAIL(d, TPU_ERR_PARSE, here(&r), "unexpected %s after the JSON value", what);
    }
  }
  if (s != TPU_OK) {
    /* The message may point at doc->file: the diag holds its own copy already. */
    tpu_arena_deinit(&doc->arena);
    doc->file = NULL;
    return s;
  }
  doc->root = root;
  return TPU_OK;
}

tpu_status tpu_json_parse_file(const char *path, tpu_json_doc *doc, tpu_diag *d) {
  tpu_arena_init(&doc->arena);
  doc->root = NULL;
  doc->file = NULL;
  tpu_loc at = {path, 0, 0};
  FILE *f = fopen(path, "rb");
  if (!f) return TPU_FAIL(d, TPU_ERR_IO, at, "cannot open: %s", strerror(errno));
  size_t cap = 4096, n = 0;
  char *buf = tpu_malloc(cap);
  if (!buf) {
    fclose(f);
    return TPU_FAIL(d, TPU_ERR_NOMEM, at, "out of memory reading the file");
  }
  for (;;) {
    if (n == cap) {
      if (cap > ((size_t)1 << 30)) {
        tpu_free(buf);
        fclose(f);
        return TPU_FAIL(d, TPU_ERR_LIMIT, at, "JSON file larger than 1 GiB");
      }
      char *nb = tpu_realloc(buf, cap * 2);
      if (!nb) {
        tpu_free(buf);
        fclose(f);
        return TPU_FAIL(d, TPU_ERR_NOMEM, at, "out of memory reading the file");
      }
      buf = nb;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    tpu_free(buf);
    return TPU_FAIL(d, TPU_ERR_IO, at, "read error");
  }
  tpu_status s = tpu_json_parse(buf, n, path, doc, d);
  tpu_free(buf);
  return s;
}

void tpu_json_doc_free(tpu_json_doc *doc) {
  if (!doc) return;
  tpu_arena_deinit(&doc->arena);
  doc->root = NULL;
  doc->file = NULL;
}

const tpu_json *tpu_json_get(const tpu_json *obj, const char *key) {
  if (!obj || obj->kind != TPU_JSON_OBJECT) return NULL;
  size_t n = strlen(key);
  for (size_t i = 0; i < obj->count; i++)
    if (obj->items[i]->key_len == n && memcmp(obj->items[i]->key, key, n) == 0)
      return obj->items[i];
  return NULL;
}

const char *tpu_json_kind_name(tpu_json_kind k) {
  switch (k) {
    case TPU_JSON_NULL: return "null";
    case TPU_JSON_BOOL: return "boolean";
    case TPU_JSON_NUMBER: return "number";
    case TPU_JSON_STRING: return "string";
    case TPU_JSON_ARRAY: return "array";
    case TPU_JSON_OBJECT: return "object";
  }
  return "?";
}

tpu_loc tpu_json_loc(const tpu_json_doc *doc, const tpu_json *v, int at_key) {
  tpu_loc l = {doc ? doc->file : NULL, 0, 0};
  if (!v) return l;
  if (at_key && v->key) {
    l.line = v->key_line;
    l.col = v->key_col;
  } else {
    l.line = v->line;
    l.col = v->col;
  }
  return l;
}

/* ---------------------------------------------------------------- writer */

void tpu_json_write_escaped(FILE *f, const char *s, size_t n) {
  fputc('"', f);
  size_t run = 0; /* s[run .. i) needs no escape: written at once */
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    if (i > run) fwrite(s + run, 1, i - run, f);
    run = i + 1;
    switch (c) {
      case '"': fputs("\\\"", f); break;
      case '\\': fputs("\\\\", f); break;
      case '\n': fputs("\\n", f); break;
      case '\r': fputs("\\r", f); break;
      case '\t': fputs("\\t", f); break;
      case '\b': fputs("\\b", f); break;
      case '\f': fputs("\\f", f); break;
      default: fprintf(f, "\\u%04x", c);
    }
  }
  if (n > run) fwrite(s + run, 1, n - run, f);
  fputc('"', f);
}

int tpu_json_format_double(double v, char *buf, size_t n) {
  if (isnan(v) || isinf(v)) return snprintf(buf, n, "null");
  int len = 0;
  char tmp[40];
  for (int prec = 15; prec <= 17; prec++) {
    len = snprintf(tmp, sizeof tmp, "%.*g", prec, v);
    if (strtod(tmp, NULL) == v) break;
  }
  snprintf(buf, n, "%s", tmp);
  return len;
}

void tpu_json_writer_init(tpu_json_writer *w, FILE *f, int indent) {
  memset(w, 0, sizeof *w);
  w->f = f;
  w->indent = indent < 0 ? 0 : indent;
}

static void newline(tpu_json_writer *w) {
  if (!w->indent) return;
  static const char spaces[] = "\n                                                                ";
  fwrite(spaces, 1, 1, w->f);
  for (int left = w->depth * w->indent; left > 0; left -= (int)sizeof spaces - 2)
    fwrite(spaces + 1, 1, (size_t)(left < (int)sizeof spaces - 2 ? left : (int)sizeof spaces - 2), w->f);
}

/* Called before any value or key: writes the separator and checks the nesting rules. */
static int before(tpu_json_writer *w, int is_key) {
  if (w->err) return 0;
  if (w->depth == 0) {
    if (w->done || is_key) w->err = 1;
    return !w->err;
  }
  int in_obj = w->kind[w->depth - 1] == 'o';
  if (is_key ? (!in_obj || w->after_key) : (in_obj && !w->after_key)) {
    w->err = 1;
    return 0;
  }
  if (w->after_key) {
    w->after_key = 0;
    return 1;
  }
  if (!w->empty[w->depth - 1]) fputc(',', w->f);
  w->empty[w->depth - 1] = 0;
  newline(w);
  return 1;
}

static void after_value(tpu_json_writer *w) {
  if (w->depth == 0) w->done = 1;
}

static void begin(tpu_json_writer *w, unsigned char kind) {
  if (!before(w, 0)) return;
  if (w->depth >= TPU_JSON_MAX_DEPTH) {
    w->err = 1;
    return;
  }
  fputc(kind == 'o' ? '{' : '[', w->f);
  w->kind[w->depth] = kind;
  w->empty[w->depth] = 1;
  w->depth++;
}

static void end(tpu_json_writer *w, unsigned char kind) {
  if (w->err) return;
  if (w->depth == 0 || w->kind[w->depth - 1] != kind || w->after_key) {
    w->err = 1;
    return;
  }
  int was_empty = w->empty[w->depth - 1];
  w->depth--;
  if (!was_empty) newline(w);
  fputc(kind == 'o' ? '}' : ']', w->f);
  after_value(w);
}

void tpu_json_begin_object(tpu_json_writer *w) { begin(w, 'o'); }
void tpu_json_end_object(tpu_json_writer *w) { end(w, 'o'); }
void tpu_json_begin_array(tpu_json_writer *w) { begin(w, 'a'); }
void tpu_json_end_array(tpu_json_writer *w) { end(w, 'a'); }

void tpu_json_key(tpu_json_writer *w, const char *key) {
  if (!before(w, 1)) return;
  tpu_json_write_escaped(w->f, key, strlen(key));
  fputs(w->indent ? ": " : ":", w->f);
  w->after_key = 1;
}

void tpu_json_string(tpu_json_writer *w, const char *s) {
  if (!before(w, 0)) return;
  tpu_json_write_escaped(w->f, s, strlen(s));
  after_value(w);
}

void tpu_json_number(tpu_json_writer *w, double v) {
  if (!before(w, 0)) return;
  char buf[40];
  tpu_json_format_double(v, buf, sizeof buf);
  fputs(buf, w->f);
  after_value(w);
}

void tpu_json_int(tpu_json_writer *w, int64_t v) {
  if (!before(w, 0)) return;
  fprintf(w->f, "%lld", (long long)v);
  after_value(w);
}

void tpu_json_bool(tpu_json_writer *w, int b) {
  if (!before(w, 0)) return;
  fputs(b ? "true" : "false", w->f);
  after_value(w);
}

void tpu_json_null(tpu_json_writer *w) {
  if (!before(w, 0)) return;
  fputs("null", w->f);
  after_value(w);
}

tpu_status tpu_json_writer_finish(tpu_json_writer *w, tpu_diag *d) {
  if (w->err || w->depth || !w->done)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(),
                    "JSON writer misused: unbalanced containers or a value without a key");
  fputc('\n', w->f);
  if (ferror(w->f)) return TPU_FAIL(d, TPU_ERR_IO, tpu_noloc(), "writing JSON failed");
  return TPU_OK;
}
