/* Literal parsing: the text inside constant(...) for a given shape, into a host tensor. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "hlo/hlo.h"

typedef struct {
  const char *s;
  size_t n, pos;
  tpu_loc base;
  const tpu_shape *shape;
  tpu_tensor *out;
  int64_t next; /* next element index, row-major */
  tpu_diag *d;
  size_t mark;   /* a position whose location is known: here() counts on from it, */
  tpu_loc at;    /* so locating each element costs its own bytes, not the prefix's */
} lit_parser;

static tpu_loc here(lit_parser *p) {
  if (p->mark > p->pos) {
    p->mark = 0;
    p->at = p->base;
  }
  for (; p->mark < p->pos; p->mark++) {
    if (p->s[p->mark] == '\n') {
      p->at.line++;
      p->at.col = 1;
    } else {
      p->at.col++;
    }
  }
  return p->at;
}

/* Skips white space and the index comments XLA's printer writes inside constants of rank
 * >= 4 (an `i0=0` between slash-star and star-slash before each block). An unclosed comment
 * runs to the end of the text (then the parse fails there). */
static void skip_ws(lit_parser *p) {
  for (;;) {
    while (p->pos < p->n && isspace((unsigned char)p->s[p->pos])) p->pos++;
    if (!(p->pos + 1 < p->n && p->s[p->pos] == '/' && p->s[p->pos + 1] == '*')) return;
    size_t k = p->pos + 2;
    while (k + 1 < p->n && !(p->s[k] == '*' && p->s[k + 1] == '/')) k++;
    p->pos = k + 1 < p->n ? k + 2 : p->n;
  }
}

static int peek(lit_parser *p) {
  skip_ws(p);
  return p->pos < p->n ? (unsigned char)p->s[p->pos] : -1;
}

/* Reads one scalar token: [+-]?[A-Za-z0-9_.]+ with an optional "(0x...)" NaN payload. */
static size_t scalar_token(lit_parser *p, const char **tok) {
  skip_ws(p);
  size_t start = p->pos;
  if (p->pos < p->n && (p->s[p->pos] == '-' || p->s[p->pos] == '+')) p->pos++;
  while (p->pos < p->n) {
    char c = p->s[p->pos];
    if (isalnum((unsigned char)c) || c == '.' || c == '_') {
      p->pos++;
    } else if ((c == '-' || c == '+') && p->pos > start && (p->s[p->pos - 1] == 'e' || p->s[p->pos - 1] == 'E') &&
               isdigit((unsigned char)p->s[start + (p->s[start] == '-' || p->s[start] == '+')])) {
      p->pos++;
    } else if (c == '(' ) {
      while (p->pos < p->n && p->s[p->pos] != ')') p->pos++;
      if (p->pos < p->n) p->pos++;
      break;
    } else {
      break;
    }
  }
  *tok = p->s + start;
  return p->pos - start;
}

static tpu_status set_float(lit_parser *p, const char *t, size_t len, tpu_loc at) {
  char buf[128];
  if (len >= sizeof buf) return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "number too long");
  memcpy(buf, t, len);
  buf[len] = 0;
  int neg = buf[0] == '-';
  const char *u = buf + (buf[0] == '-' || buf[0] == '+');
  tpu_dtype dt = p->shape->dtype;
  if (!strncmp(u, "nan", 3)) {
    unsigned long long payload = 0;
    if (u[3] == '(') {
      char *end;
      errno = 0;
      payload = strtoull(u + 4, &end, 0);
      if (errno || *end != ')' || end[1]) return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "bad NaN payload '%s'", buf);
    } else if (u[3]) {
      return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "bad number '%s'", buf);
    }
    void *data = p->out->data;
    int64_t i = p->next;
    switch (dt) {
      case TPU_F32: {
        uint32_t pl = payload ? (uint32_t)(payload & 0x7fffffu) : 0x400000u;
        if (!pl) pl = 0x400000u;
        ((float *)data)[i] = tpu_f32_from_bits((neg ? 0x80000000u : 0) | 0x7f800000u | pl);
        break;
      }
      case TPU_F64: {
        uint64_t pl = payload ? (payload & 0xfffffffffffffull) : 0x8000000000000ull;
        if (!pl) pl = 0x8000000000000ull;
        uint64_t bits = (neg ? 0x8000000000000000ull : 0) | 0x7ff0000000000000ull | pl;
        memcpy(&((double *)data)[i], &bits, 8);
        break;
      }
      case TPU_BF16: {
        uint16_t pl = payload ? (uint16_t)(payload & 0x7fu) : 0x40u;
        if (!pl) pl = 0x40u;
        ((tpu_bf16 *)data)[i].bits = (uint16_t)((neg ? 0x8000u : 0) | 0x7f80u | pl);
        break;
      }
      case TPU_F8E5M2: case TPU_F8E4M3FN: /* e4m3fn has one NaN; e5m2's payload is 2 bits */
        ((tpu_f8 *)data)[i] = tpu_f8_from_f64(neg ? -NAN : NAN, dt == TPU_F8E4M3FN);
        if (dt == TPU_F8E5M2 && (payload & 3u)) ((tpu_f8 *)data)[i].bits = (uint8_t)((neg ? 0x80u : 0) | 0x7cu | (payload & 3u));
        break;
      default: {
        uint16_t pl = payload ? (uint16_t)(payload & 0x3ffu) : 0x200u;
        if (!pl) pl = 0x200u;
        ((tpu_f16 *)data)[i].bits = (uint16_t)((neg ? 0x8000u : 0) | 0x7c00u | pl);
        break;
      }
    }
    return TPU_OK;
  }
  double v;
  if (!strcmp(u, "inf")) {
    v = neg ? -INFINITY : INFINITY;
  } else {
    char *end;
    if (!isdigit((unsigned char)*u) && *u != '.') return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "bad number '%s'", buf);
    if (dt == TPU_F32) {
      float f = strtof(buf, &end);
      if (*end) return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "bad number '%s'", buf);
      ((float *)p->out->data)[p->next] = f;
      return TPU_OK;
    }
    v = strtod(buf, &end);
    if (*end) return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "bad number '%s'", buf);
  }
  tpu_tensor_set_f64(p->out, p->next, v);
  return TPU_OK;
}

static tpu_status set_int(lit_parser *p, const char *t, size_t len, tpu_loc at) {
  char buf[64];
  if (len >= sizeof buf || len == 0) return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "bad integer");
  memcpy(buf, t, len);
  buf[len] = 0;
  tpu_dtype dt = p->shape->dtype;
  if (dt == TPU_PRED) {
    if (!strcmp(buf, "true") || !strcmp(buf, "1")) {
      tpu_tensor_set_i64(p->out, p->next, 1);
    } else if (!strcmp(buf, "false") || !strcmp(buf, "0")) {
      tpu_tensor_set_i64(p->out, p->next, 0);
    } else {
      return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "expected true or false, found '%s'", buf);
    }
    return TPU_OK;
  }
  char *end;
  errno = 0;
  int bits = tpu_dtype_bits(dt); /* s4 -8..7, u4 0..15 */
  if (tpu_dtype_is_signed(dt)) {
    long long v = strtoll(buf, &end, 10);
    if (*end || end == buf) return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "bad integer '%s'", buf);
    long long lo = bits == 64 ? INT64_MIN : -(1ll << (bits - 1));
    long long hi = bits == 64 ? INT64_MAX : (1ll << (bits - 1)) - 1;
    if (errno == ERANGE || v < lo || v > hi)
      return TPU_FAIL(p->d, TPU_ERR_INVALID, at, "constant %s is out of range for %s", buf, tpu_dtype_name(dt));
    tpu_tensor_set_i64(p->out, p->next, v);
  } else {
    if (buf[0] == '-') return TPU_FAIL(p->d, TPU_ERR_INVALID, at, "constant %s is out of range for %s", buf, tpu_dtype_name(dt));
    unsigned long long v = strtoull(buf, &end, 10);
    if (*end || end == buf) return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "bad integer '%s'", buf);
    unsigned long long hi = bits == 64 ? UINT64_MAX : (1ull << bits) - 1;
    if (errno == ERANGE || v > hi)
      return TPU_FAIL(p->d, TPU_ERR_INVALID, at, "constant %s is out of range for %s", buf, tpu_dtype_name(dt));
    tpu_tensor_set_i64(p->out, p->next, (int64_t)v);
  }
  return TPU_OK;
}

/* A complex element as XLA prints it: "(re, im)", each part a float of the part type. */
static tpu_status complex_scalar(lit_parser *p, tpu_loc at) {
  if (peek(p) != '(') return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "expected '(' starting a complex value (re, im)");
  p->pos++;
  tpu_shape part = *p->shape;
  part.dtype = tpu_dtype_complex_part(p->shape->dtype);
  tpu_tensor view = *p->out; /* the parts as a flat array of the part type */
  view.dtype = part.dtype;
  lit_parser q = *p;
  q.shape = &part;
  q.out = &view;
  for (int k = 0; k < 2; k++) {
    tpu_loc pat = here(&q);
    const char *t;
    size_t len = scalar_token(&q, &t);
    if (len == 0) return TPU_FAIL(p->d, TPU_ERR_PARSE, pat, "expected the %s part of a complex value", k ? "imaginary" : "real");
    q.next = 2 * p->next + k;
    TPU_TRY(set_float(&q, t, len, pat));
    if (peek(&q) != (k ? ')' : ','))
      return TPU_FAIL(p->d, TPU_ERR_PARSE, here(&q), "expected '%c' in a complex value (re, im)", k ? ')' : ',');
    q.pos++;
  }
  p->pos = q.pos;
  p->mark = q.mark;
  p->at = q.at;
  p->next++;
  return TPU_OK;
}

static tpu_status scalar(lit_parser *p) {
  tpu_loc at = here(p);
  if (tpu_dtype_is_complex(p->shape->dtype)) {
    if (p->next >= tpu_tensor_numel(p->out)) return TPU_FAIL(p->d, TPU_ERR_INVALID, at, "too many values in the constant");
    return complex_scalar(p, at);
  }
  const char *t;
  size_t len = scalar_token(p, &t);
  if (len == 0) return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "expected a literal value");
  if (p->next >= tpu_tensor_numel(p->out)) return TPU_FAIL(p->d, TPU_ERR_INVALID, at, "too many values in the constant");
  tpu_status st = tpu_dtype_is_float(p->shape->dtype) ? set_float(p, t, len, at) : set_int(p, t, len, at);
  if (st == TPU_OK) p->next++;
  return st;
}

/* XLA's printer writes `{...}` for large constants unless told otherwise. */
static tpu_status elided(lit_parser *p, tpu_loc at) {
  return TPU_FAIL(p->d, TPU_ERR_UNSUPPORTED, at,
                  "the constant's values are elided ('{...}'); print the module with large constants "
                  "(HloPrintOptions print_large_constants=true; XLA dumps: --xla_dump_large_constants)");
}

static tpu_status level(lit_parser *p, int dim) {
  const tpu_shape *sh = p->shape;
  if (dim == sh->rank) return scalar(p);
  tpu_loc at = here(p);
  if (peek(p) != '{') {
    if (p->pos + 3 <= p->n && !strncmp(p->s + p->pos, "...", 3))
      return elided(p, at);
    return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "expected '{' for dimension %d of the constant", dim);
  }
  p->pos++;
  int64_t count = 0;
  if (peek(p) == '}') {
    p->pos++;
  } else {
    for (;;) {
      if (peek(p) == '.') return elided(p, here(p));
      TPU_TRY(level(p, dim + 1));
      count++;
      int c = peek(p);
      if (c == ',') {
        p->pos++;
        continue;
      }
      if (c == '}') {
        p->pos++;
        break;
      }
      return TPU_FAIL(p->d, TPU_ERR_PARSE, here(p), "expected ',' or '}' in the constant");
    }
  }
  if (count != sh->dims[dim])
    return TPU_FAIL(p->d, TPU_ERR_INVALID, at, "dimension %d of the constant has %lld values; the shape says %lld", dim,
                    (long long)count, (long long)sh->dims[dim]);
  return TPU_OK;
}

tpu_status tpu__hlo_parse_literal(const char *text, size_t n, tpu_loc loc, const tpu_shape *shape, tpu_tensor *out,
                                  tpu_diag *d) {
  if (!tpu_dtype_is_array(shape->dtype))
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, loc, "tuple and token constants are not supported");
  /* Every value takes at least one character: a shape needing more values than the text has
   * characters is refused before its tensor is allocated (a fuzzed f32[99999,99999] constant
   * asked for gigabytes). */
  lit_parser p = {text, n, 0, loc, shape, out, 0, d, 0, loc};
  int64_t need = tpu_shape_numel(shape);
  if (need > (int64_t)n) {
    for (size_t i = 0; i + 3 <= n; i++)
      if (!memcmp(text + i, "...", 3)) {
        p.pos = i;
        return elided(&p, here(&p));
      }
    return TPU_FAIL(d, TPU_ERR_INVALID, loc, "the constant has at most %zu values; the shape needs %lld", n,
                    (long long)need);
  }
  TPU_TRY(tpu_tensor_alloc(out, shape->dtype, shape->rank, shape->dims, d));
  tpu_status st = level(&p, 0);
  if (st == TPU_OK && peek(&p) != -1) st = TPU_FAIL(d, TPU_ERR_PARSE, here(&p), "unexpected text after the constant");
  if (st == TPU_OK && p.next != tpu_tensor_numel(out))
    st = TPU_FAIL(d, TPU_ERR_INVALID, loc, "the constant has %lld values; the shape needs %lld", (long long)p.next,
                  (long long)tpu_tensor_numel(out));
  return st;
}
