/* HLO text parser: module header, computations, instructions, shapes; name resolution. */
#include <errno.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "hlo/hlo.h"
#include "ir/custom_call.h"
#include "hlo/lex.h"

#define MAX_INPUT_BYTES ((size_t)1 << 31)

typedef struct {
  tpu_module *m;
  tpu_lex lx;
  tpu_diag *d;
} parser;

/* A growable array of pointers, copied into the arena when complete. */
typedef struct {
  void **v;
  int n, cap;
} ptrvec;

static int ptrvec_push(ptrvec *pv, void *p) {
  if (pv->n == pv->cap) {
    int cap = pv->cap ? pv->cap * 2 : 16;
    void **nv = tpu_realloc(pv->v, sizeof(void *) * (size_t)cap);
    if (!nv) return 0;
    pv->v = nv;
    pv->cap = cap;
  }
  pv->v[pv->n++] = p;
  return 1;
}

static void **ptrvec_finish(parser *p, ptrvec *pv) {
  void **r = tpu_arena_alloc(&p->m->arena, sizeof(void *) * (size_t)(pv->n ? pv->n : 1));
  if (r && pv->n) memcpy(r, pv->v, sizeof(void *) * (size_t)pv->n);
  tpu_free(pv->v);
  pv->v = NULL;
  pv->n = pv->cap = 0;
  return r;
}

static tpu_status nomem(parser *p) {
  return TPU_FAIL(p->d, TPU_ERR_NOMEM, tpu_lex_loc(&p->lx), "out of memory while parsing");
}

static tpu_status expect(parser *p, int c, const char *what) {
  if (tpu_lex_accept(&p->lx, c)) return TPU_OK;
  int got = tpu_lex_peek(&p->lx);
  if (got == -1)
    return TPU_FAIL(p->d, TPU_ERR_PARSE, tpu_lex_loc(&p->lx), "expected '%c' %s, found end of input", c, what);
  return TPU_FAIL(p->d, TPU_ERR_PARSE, tpu_lex_loc(&p->lx), "expected '%c' %s, found '%c'", c, what, got);
}

static int ident_is(const char *s, size_t n, const char *w) { return strlen(w) == n && !memcmp(s, w, n); }

/* ---- Shapes ---- */

static tpu_status parse_shape(parser *p, tpu_shape *sh, int depth);

/* A layout tail's tiles, "T(8,128)(2,1)": each size a positive whole number or '*' (XLA's
 * combined dimension), refused where it stands (the tail is otherwise kept as text). */
static tpu_status check_tiles(parser *p, const char *t, size_t n, tpu_loc at) {
  int in_tile = 0; /* 1 after 'T' and inside/between its tuples */
  for (size_t i = 0; i < n; i++) {
    char c = t[i];
    if (c == 'T') {
      in_tile = 1;
      continue;
    }
    if (c != '(') {
      if (c != ' ') in_tile = 0;
      continue;
    }
    if (!in_tile) continue;
    for (i++; i < n && t[i] != ')'; i++) {
      while (i < n && t[i] == ' ') i++;
      size_t b = i;
      if (i < n && t[i] == '*') {
        i++;
      } else {
        long long v = 0;
        while (i < n && t[i] >= '0' && t[i] <= '9' && v <= (1ll << 40)) v = v * 10 + (t[i++] - '0');
        if (i == b || v < 1 || v > (1ll << 40)) {
          tpu_loc l = at;
          l.col += (int)b;
          return TPU_FAIL(p->d, TPU_ERR_INVALID, l, "a layout tile's sizes must be positive whole numbers (or '*')");
        }
      }
      while (i < n && t[i] == ' ') i++;
      if (i < n && t[i] != ',' && t[i] != ')') {
        tpu_loc l = at;
        l.col += (int)i;
        return TPU_FAIL(p->d, TPU_ERR_INVALID, l, "expected ',' or ')' in a layout tile");
      }
      if (i < n && t[i] == ')') break;
    }
  }
  return TPU_OK;
}

static tpu_status parse_layout(parser *p, tpu_shape *sh) {
  /* '{' already consumed. minor_to_major ints, then an optional ':' tail kept as text. */
  tpu_lex *lx = &p->lx;
  int n = 0;
  tpu_lex_skip(lx);
  while (tpu_lex_peek(lx) != '}' && tpu_lex_peek(lx) != ':') {
    long long v;
    tpu_loc at = tpu_lex_loc(lx);
    if (!tpu_lex_int(lx, &v)) return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "expected a dimension number in the layout");
    if (n >= TPU_MAX_RANK || v < 0 || v >= sh->rank)
      return TPU_FAIL(p->d, TPU_ERR_INVALID, at, "layout dimension %lld is out of range for rank %d", v, sh->rank);
    sh->minor_to_major[n++] = (int8_t)v;
    tpu_lex_skip(lx);
    if (tpu_lex_peek(lx) == ',') tpu_lex_advance(lx);
    tpu_lex_skip(lx);
  }
  if (n != sh->rank)
    return TPU_FAIL(p->d, TPU_ERR_INVALID, tpu_lex_loc(lx), "layout lists %d dimensions for a rank-%d shape", n, sh->rank);
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (sh->minor_to_major[i] == sh->minor_to_major[j])
        return TPU_FAIL(p->d, TPU_ERR_INVALID, tpu_lex_loc(lx), "layout repeats dimension %d", sh->minor_to_major[i]);
  sh->has_layout = 1;
  if (tpu_lex_peek(lx) == ':') {
    const char *s;
    size_t len;
    size_t start = lx->pos;
    tpu_loc tail_at = tpu_lex_loc(lx);
    TPU_TRY(tpu_lex_balanced(lx, '{', '}', &s, &len, p->d));
    TPU_TRY(check_tiles(p, p->lx.src + start, lx->pos - 1 - start, tail_at));
    sh->layout_tail = tpu_arena_strndup(&p->m->arena, p->lx.src + start, lx->pos - 1 - start);
    if (!sh->layout_tail) return nomem(p);
    return TPU_OK;
  }
  return expect(p, '}', "to close the layout");
}

static tpu_status parse_shape(parser *p, tpu_shape *sh, int depth) {
  tpu_lex *lx = &p->lx;
  memset(sh, 0, sizeof *sh);
  tpu_lex_skip(lx);
  tpu_loc at = tpu_lex_loc(lx);
  if (depth > 64) return TPU_FAIL(p->d, TPU_ERR_LIMIT, at, "tuple shapes nested too deeply");
  if (tpu_lex_peek(lx) == '(') {
    tpu_lex_advance(lx);
    sh->dtype = TPU_TUPLE;
    tpu_shape tmp[64];
    tpu_shape *elems = tmp;
    int cap = 64, n = 0;
    tpu_status st = TPU_OK;
    if (!tpu_lex_accept(lx, ')')) {
      for (;;) {
        if (n == cap) {
          tpu_shape *ne = tpu_arena_alloc(&p->m->arena, sizeof(tpu_shape) * (size_t)cap * 2);
          if (!ne) return nomem(p);
          memcpy(ne, elems, sizeof(tpu_shape) * (size_t)n);
          elems = ne;
          cap *= 2;
        }
        st = parse_shape(p, &elems[n++], depth + 1);
        if (st != TPU_OK) return st;
        if (tpu_lex_accept(lx, ',')) continue;
        TPU_TRY(expect(p, ')', "to close the tuple shape"));
        break;
      }
    }
    sh->ntuple = n;
    sh->elems = tpu_arena_alloc(&p->m->arena, sizeof(tpu_shape) * (size_t)(n ? n : 1));
    if (!sh->elems) return nomem(p);
    memcpy(sh->elems, elems, sizeof(tpu_shape) * (size_t)n);
    return TPU_OK;
  }
  const char *s;
  size_t n;
  if (!tpu_lex_ident(lx, &s, &n)) return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "expected a shape");
  if (!tpu_dtype_parse(s, n, &sh->dtype))
    return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "unknown element type '%.*s'", (int)n, s);
  if (tpu_lex_peek(lx) != '[')
    return TPU_FAIL(p->d, TPU_ERR_PARSE, tpu_lex_loc(lx), "expected '[' after element type '%.*s'", (int)n, s);
  tpu_lex_advance(lx);
  tpu_lex_skip(lx);
  while (tpu_lex_peek(lx) != ']') {
    tpu_loc dl = tpu_lex_loc(lx);
    if (tpu_lex_peek(lx) == '<' || tpu_lex_peek(lx) == '?')
      return TPU_FAIL(p->d, TPU_ERR_UNSUPPORTED, dl, "dynamic dimensions are not supported");
    long long v;
    if (!tpu_lex_int(lx, &v) || v < 0) return TPU_FAIL(p->d, TPU_ERR_PARSE, dl, "expected a dimension size");
    if (sh->rank == TPU_MAX_RANK) return TPU_FAIL(p->d, TPU_ERR_LIMIT, dl, "rank exceeds the limit of %d", TPU_MAX_RANK);
    sh->dims[sh->rank++] = v;
    tpu_lex_skip(lx);
    if (tpu_lex_peek(lx) == ',') {
      tpu_lex_advance(lx);
      tpu_lex_skip(lx);
    } else if (tpu_lex_peek(lx) != ']') {
      return TPU_FAIL(p->d, TPU_ERR_PARSE, tpu_lex_loc(lx), "expected ',' or ']' in the shape");
    }
  }
  tpu_lex_advance(lx);
  if (sh->dtype == TPU_TOKEN && sh->rank) return TPU_FAIL(p->d, TPU_ERR_INVALID, at, "a token has no dimensions");
  int ok;
  int64_t numel = tpu_dims_numel(sh->rank, sh->dims, &ok);
  size_t bytes;
  if (!ok || !tpu_mul_ok((size_t)numel, tpu_dtype_size(sh->dtype), &bytes) || bytes > ((size_t)1 << 48))
    return TPU_FAIL(p->d, TPU_ERR_LIMIT, at, "shape size overflows");
  /* A layout follows directly (no space) in XLA's printing: f32[4]{0}. */
  if (tpu_lex_peek(lx) == '{') {
    tpu_lex_advance(lx);
    TPU_TRY(parse_layout(p, sh));
  }
  return TPU_OK;
}

/* ---- Instructions ---- */

typedef struct {
  const char *name;
  tpu_loc loc;
  tpu_shape *shape; /* long-form operand's shape, checked after resolution; NULL: none written (the
                     * short form, most operands: a reference stays 32 bytes, not 216) */
} operand_ref;

static tpu_status parse_attrs(parser *p, tpu_attr **out, int *nout, int stop_at_newline) {
  tpu_lex *lx = &p->lx;
  tpu_attr tmp[32];
  tpu_attr *attrs = tmp;
  int n = 0, cap = 32;
  for (;;) {
    if (stop_at_newline) {
      if (tpu_lex_skip_inline(lx)) break;
    } else {
      tpu_lex_skip(lx);
    }
    if (tpu_lex_peek(lx) != ',') break;
    tpu_lex_advance(lx);
    const char *s;
    size_t len;
    tpu_loc at = tpu_lex_loc(lx);
    if (!tpu_lex_ident(lx, &s, &len)) return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "expected an attribute name");
    if (!tpu_lex_accept(lx, '='))
      return TPU_FAIL(p->d, TPU_ERR_PARSE, tpu_lex_loc(lx), "expected '=' after attribute '%.*s'", (int)len, s);
    const char *v;
    size_t vn;
    tpu_loc vat = tpu_lex_loc(lx);
    TPU_TRY(tpu_lex_value_span(lx, &v, &vn, p->d));
    if (vn == 0) return TPU_FAIL(p->d, TPU_ERR_PARSE, vat, "attribute '%.*s' has no value", (int)len, s);
    if (n == cap) {
      tpu_attr *na = tpu_arena_alloc(&p->m->arena, sizeof(tpu_attr) * (size_t)cap * 2);
      if (!na) return nomem(p);
      memcpy(na, attrs, sizeof(tpu_attr) * (size_t)n);
      attrs = na;
      cap *= 2;
    }
    for (int i = 0; i < n; i++)
      if (ident_is(s, len, attrs[i].name))
        return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "attribute '%.*s' is given twice", (int)len, s);
    attrs[n].name = tpu_arena_strndup(&p->m->arena, s, len);
    attrs[n].value = tpu_arena_strndup(&p->m->arena, v, vn);
    attrs[n].loc = vat;
    if (!attrs[n].name || !attrs[n].value) return nomem(p);
    n++;
  }
  *out = tpu_arena_alloc(&p->m->arena, sizeof(tpu_attr) * (size_t)(n ? n : 1));
  if (!*out) return nomem(p);
  memcpy(*out, attrs, sizeof(tpu_attr) * (size_t)n);
  *nout = n;
  return TPU_OK;
}

/* Parses "a, f32[2]{0} b)" into operand references, parked in in->operands until
 * resolve_comp binds them to instructions. */
static tpu_status parse_operands(parser *p, tpu_instr *in) {
  tpu_lex *lx = &p->lx;
  ptrvec pv = {0};
  tpu_status st = TPU_OK;
  if (!tpu_lex_accept(lx, ')')) {
    for (;;) {
      tpu_lex_skip(lx);
      operand_ref *r = tpu_arena_alloc(&p->m->arena, sizeof *r);
      if (!r || !ptrvec_push(&pv, r)) {
        st = nomem(p);
        break;
      }
      r->loc = tpu_lex_loc(lx);
      /* Long form "f32[4]{0} %x": a dtype name directly followed by '[', or a tuple shape. */
      int c = tpu_lex_peek(lx);
      int long_form = c == '(';
      if (!long_form) {
        size_t k = lx->pos;
        while (k < lx->len && isalnum((unsigned char)lx->src[k])) k++;
        tpu_dtype dt;
        long_form = k < lx->len && lx->src[k] == '[' && tpu_dtype_parse(lx->src + lx->pos, k - lx->pos, &dt);
      }
      if (long_form) {
        r->shape = tpu_arena_alloc(&p->m->arena, sizeof *r->shape);
        if (!r->shape) {
          st = nomem(p);
          break;
        }
        st = parse_shape(p, r->shape, 0);
        if (st != TPU_OK) break;
      }
      const char *s;
      size_t n;
      tpu_loc at = tpu_lex_loc(lx);
      if (!tpu_lex_ident(lx, &s, &n)) {
        st = TPU_FAIL(p->d, TPU_ERR_PARSE, at, "expected an operand name");
        break;
      }
      r->loc = at;
      r->name = tpu_arena_strndup(&p->m->arena, s, n);
      if (!r->name) {
        st = nomem(p);
        break;
      }
      if (tpu_lex_accept(lx, ',')) continue;
      st = expect(p, ')', "after the operands");
      break;
    }
  }
  if (st != TPU_OK) {
    tpu_free(pv.v);
    return st;
  }
  in->noperands = pv.n;
  in->operands = (tpu_instr **)ptrvec_finish(p, &pv);
  if (!in->operands) return nomem(p);
  return TPU_OK;
}

static tpu_status parse_instr(parser *p, tpu_comp *c, tpu_instr **out) {
  tpu_lex *lx = &p->lx;
  tpu_instr *in = tpu_arena_alloc(&p->m->arena, sizeof *in);
  if (!in) return nomem(p);
  in->parent = c;
  tpu_instr_init(in);
  const char *s;
  size_t n;
  tpu_lex_skip(lx);
  in->loc = tpu_lex_loc(lx);
  if (!tpu_lex_ident(lx, &s, &n)) return TPU_FAIL(p->d, TPU_ERR_PARSE, in->loc, "expected an instruction");
  if (ident_is(s, n, "ROOT")) {
    in->is_root = 1;
    in->loc = tpu_lex_loc(lx);
    tpu_lex_skip(lx);
    in->loc = tpu_lex_loc(lx);
    if (!tpu_lex_ident(lx, &s, &n)) return TPU_FAIL(p->d, TPU_ERR_PARSE, in->loc, "expected an instruction name after ROOT");
  }
  in->name = tpu_arena_strndup(&p->m->arena, s, n);
  if (!in->name) return nomem(p);
  TPU_TRY(expect(p, '=', "after the instruction name"));
  TPU_TRY(parse_shape(p, &in->shape, 0));
  tpu_loc opl = (tpu_lex_skip(lx), tpu_lex_loc(lx));
  if (!tpu_lex_ident(lx, &s, &n)) return TPU_FAIL(p->d, TPU_ERR_PARSE, opl, "expected an opcode");
  if (ident_is(s, n, "call-start")) {
    /* The XLA TPU compiler's asynchronous call (work it offloads to a SparseCore): its
     * ((operands), result, context...) is read here as the call it makes, and its call-done,
     * which hands that result over, as an identity (opt-barrier). docs/timing.md. */
    if (in->shape.dtype != TPU_TUPLE || in->shape.ntuple < 2)
      return TPU_FAIL(p->d, TPU_ERR_INVALID, opl, "call-start must give a tuple ((operands), result, ...)");
    in->shape = in->shape.elems[1];
    in->op = TPU_OP_CALL;
  } else if (ident_is(s, n, "call-done")) {
    in->op = TPU_OP_OPT_BARRIER;
  } else if (!tpu_op_parse(s, n, &in->op)) {
    return TPU_FAIL(p->d, TPU_ERR_PARSE, opl, "unknown opcode '%.*s'", (int)n, s);
  }
  in->loc = opl;
  TPU_TRY(expect(p, '(', "after the opcode"));
  if (in->op == TPU_OP_CONSTANT) {
    const char *t;
    size_t tn;
    tpu_loc tl = tpu_lex_loc(lx);
    TPU_TRY(tpu_lex_balanced(lx, '(', ')', &t, &tn, p->d));
    while (tn && isspace((unsigned char)*t)) t++, tn--, tl.col++;
    while (tn && isspace((unsigned char)t[tn - 1])) tn--;
    tpu_tensor *lit = tpu_calloc(1, sizeof *lit);
    if (!lit) return nomem(p);
    if (p->m->nliterals == p->m->capliterals) {
      int cap = p->m->capliterals ? p->m->capliterals * 2 : 16;
      tpu_tensor **nl = tpu_realloc(p->m->literals, sizeof(tpu_tensor *) * (size_t)cap);
      if (!nl) {
        tpu_free(lit);
        return nomem(p);
      }
      p->m->literals = nl;
      p->m->capliterals = cap;
    }
    p->m->literals[p->m->nliterals++] = lit;
    in->literal = lit;
    TPU_TRY(tpu__hlo_parse_literal(t, tn, tl, &in->shape, lit, p->d));
  } else if (in->op == TPU_OP_PARAMETER) {
    long long v;
    tpu_loc at = tpu_lex_loc(lx);
    if (!tpu_lex_int(lx, &v) || v < 0 || v > 1000000)
      return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "expected a parameter number");
    in->index = v;
    TPU_TRY(expect(p, ')', "after the parameter number"));
  } else {
    TPU_TRY(parse_operands(p, in));
  }
  TPU_TRY(parse_attrs(p, &in->attrs, &in->nattrs, 1));
  *out = in;
  return TPU_OK;
}

/* ---- Computations ---- */

static tpu_status parse_signature(parser *p) {
  /* "(a: f32[], b: (s32[], f32[2]))" — parameter shapes come from the body; checked there. */
  tpu_lex *lx = &p->lx;
  if (tpu_lex_accept(lx, ')')) return TPU_OK;
  for (;;) {
    const char *s;
    size_t n;
    tpu_loc at = tpu_lex_loc(lx);
    if (!tpu_lex_ident(lx, &s, &n)) return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "expected a parameter name in the signature");
    TPU_TRY(expect(p, ':', "after the parameter name"));
    tpu_shape sh;
    TPU_TRY(parse_shape(p, &sh, 0));
    if (tpu_lex_accept(lx, ',')) continue;
    return expect(p, ')', "to close the signature");
  }
}

static tpu_status parse_comp(parser *p, int is_entry, const char *name, size_t nlen, tpu_loc loc, tpu_comp **out) {
  tpu_lex *lx = &p->lx;
  tpu_comp *c = tpu_arena_alloc(&p->m->arena, sizeof *c);
  if (!c) return nomem(p);
  c->name = tpu_arena_strndup(&p->m->arena, name, nlen);
  if (!c->name) return nomem(p);
  c->is_entry = is_entry;
  c->loc = loc;
  c->module = p->m;
  if (tpu_lex_accept(lx, '(')) TPU_TRY(parse_signature(p));
  tpu_lex_skip(lx);
  if (tpu_lex_peek(lx) == '-' && tpu_lex_peek_at(lx, 1) == '>') {
    tpu_lex_advance(lx);
    tpu_lex_advance(lx);
    tpu_shape sh;
    TPU_TRY(parse_shape(p, &sh, 0));
  }
  TPU_TRY(expect(p, '{', "to open the computation body"));
  ptrvec pv = {0};
  tpu_status st = TPU_OK;
  while (!tpu_lex_accept(lx, '}')) {
    if (tpu_lex_peek(lx) == -1) {
      st = TPU_FAIL(p->d, TPU_ERR_PARSE, loc, "computation '%s' is never closed", c->name);
      break;
    }
    tpu_instr *in = NULL;
    st = parse_instr(p, c, &in);
    if (st != TPU_OK) break;
    in->id = pv.n;
    if (!ptrvec_push(&pv, in)) {
      st = nomem(p);
      break;
    }
  }
  if (st != TPU_OK) {
    tpu_free(pv.v);
    return st;
  }
  c->ninstrs = pv.n;
  c->instrs = (tpu_instr **)ptrvec_finish(p, &pv);
  if (!c->instrs) return nomem(p);
  /* "}, execution_thread=\"sparsecore\"": the thread the compiler placed the computation on */
  tpu_attr *ca;
  int nca;
  TPU_TRY(parse_attrs(p, &ca, &nca, 1));
  for (int i = 0; i < nca; i++) {
    if (strcmp(ca[i].name, "execution_thread")) continue;
    const char *v = ca[i].value;
    size_t vn = strlen(v);
    if (vn >= 2 && v[0] == '"' && v[vn - 1] == '"') v++, vn -= 2;
    c->execution_thread = tpu_arena_strndup(&p->m->arena, v, vn);
    if (!c->execution_thread) return nomem(p);
  }
  if (c->ninstrs == 0) return TPU_FAIL(p->d, TPU_ERR_INVALID, loc, "computation '%s' has no instructions", c->name);
  *out = c;
  return TPU_OK;
}

/* XLA dumps may carry FileNames / FunctionNames / FileLocations / StackFrames tables:
 * a heading line, then lines starting with a number. They are skipped. */
static int skip_table_section(parser *p) {
  tpu_lex *lx = &p->lx;
  tpu_lex save = *lx;
  const char *s;
  size_t n;
  if (!tpu_lex_ident(lx, &s, &n) || !tpu_lex_skip_inline(lx)) {
    *lx = save;
    return 0;
  }
  tpu_lex_skip(lx);
  if (!isdigit(tpu_lex_peek(lx))) {
    *lx = save;
    return 0;
  }
  while (isdigit(tpu_lex_peek(lx))) {
    while (tpu_lex_peek(lx) != -1 && tpu_lex_peek(lx) != '\n') tpu_lex_advance(lx);
    tpu_lex_skip(lx);
  }
  return 1;
}

/* ---- Resolution ---- */

static unsigned long hash_str(const char *s) {
  unsigned long h = 1469598103934665603ul;
  while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ul;
  return h;
}

typedef struct {
  tpu_instr **slots;
  size_t mask;
} name_table;

static tpu_status table_build(parser *p, tpu_comp *c, name_table *t) {
  size_t cap = 16;
  while (cap < (size_t)c->ninstrs * 2) cap *= 2;
  t->slots = tpu_calloc(cap, sizeof(tpu_instr *));
  if (!t->slots) return nomem(p);
  t->mask = cap - 1;
  for (int i = 0; i < c->ninstrs; i++) {
    tpu_instr *in = c->instrs[i];
    size_t h = hash_str(in->name) & t->mask;
    while (t->slots[h]) {
      if (!strcmp(t->slots[h]->name, in->name)) {
        tpu_free(t->slots);
        return TPU_FAIL(p->d, TPU_ERR_INVALID, in->loc, "instruction name '%s' is defined twice in '%s'", in->name, c->name);
      }
      h = (h + 1) & t->mask;
    }
    t->slots[h] = in;
  }
  return TPU_OK;
}

static tpu_instr *table_find(const name_table *t, const char *name) {
  size_t h = hash_str(name) & t->mask;
  while (t->slots[h]) {
    if (!strcmp(t->slots[h]->name, name)) return t->slots[h];
    h = (h + 1) & t->mask;
  }
  return NULL;
}

static tpu_status resolve_comp(parser *p, tpu_comp *c) {
  name_table t = {0};
  TPU_TRY(table_build(p, c, &t));
  tpu_status st = TPU_OK;
  int nparams = 0;
  for (int i = 0; i < c->ninstrs && st == TPU_OK; i++) {
    tpu_instr *in = c->instrs[i];
    operand_ref **refs = (operand_ref **)in->operands;
    for (int k = 0; k < in->noperands; k++) {
      operand_ref *r = refs[k];
      tpu_instr *def = table_find(&t, r->name);
      if (!def) {
        st = TPU_FAIL(p->d, TPU_ERR_INVALID, r->loc, "unknown operand '%s'", r->name);
        break;
      }
      if (r->shape && !tpu_shape_equal(r->shape, &def->shape)) {
        char a[256], b[256];
        tpu_shape_print(r->shape, a, sizeof a);
        tpu_shape_print(&def->shape, b, sizeof b);
        st = TPU_FAIL(p->d, TPU_ERR_INVALID, r->loc, "operand '%s' is written as %s but defined as %s", r->name, a, b);
        break;
      }
      in->operands[k] = def;
    }
    if (in->op == TPU_OP_PARAMETER) nparams = in->index + 1 > nparams ? (int)in->index + 1 : nparams;
    if (in->is_root) {
      if (c->root) {
        st = TPU_FAIL(p->d, TPU_ERR_INVALID, in->loc, "computation '%s' has a second ROOT", c->name);
        break;
      }
      c->root = in;
    }
  }
  tpu_free(t.slots);
  TPU_TRY(st);
  if (!c->root) {
    c->root = c->instrs[c->ninstrs - 1];
    c->root->is_root = 1;
  }
  c->nparams = nparams;
  c->params = tpu_arena_alloc(&p->m->arena, sizeof(tpu_instr *) * (size_t)(nparams ? nparams : 1));
  if (!c->params) return nomem(p);
  for (int i = 0; i < c->ninstrs; i++) {
    tpu_instr *in = c->instrs[i];
    if (in->op != TPU_OP_PARAMETER) continue;
    if (c->params[in->index])
      return TPU_FAIL(p->d, TPU_ERR_INVALID, in->loc, "parameter %lld of '%s' is defined twice", (long long)in->index, c->name);
    c->params[in->index] = in;
  }
  for (int i = 0; i < nparams; i++)
    if (!c->params[i]) return TPU_FAIL(p->d, TPU_ERR_INVALID, c->loc, "computation '%s' has no parameter %d", c->name, i);
  return TPU_OK;
}

/* Post-order from the root (operands first), then the unreached instructions; fails on a
 * cycle. Iterative, so deep graphs cannot overflow the C stack. */
static tpu_status order_comp(parser *p, tpu_comp *c) {
  int n = c->ninstrs;
  c->order = tpu_arena_alloc(&p->m->arena, sizeof(tpu_instr *) * (size_t)n);
  unsigned char *state = tpu_calloc((size_t)n, 1); /* 0 new, 1 on stack, 2 done */
  int *stack = tpu_malloc(sizeof(int) * (size_t)n * 2);
  if (!c->order || !state || !stack) {
    tpu_free(state);
    tpu_free(stack);
    return nomem(p);
  }
  tpu_status st = TPU_OK;
  int norder = 0;
  for (int pass = 0; pass <= n && st == TPU_OK; pass++) {
    int start = pass == 0 ? c->root->id : pass - 1;
    if (state[start]) continue;
    int sp = 0;
    stack[sp++] = start;
    stack[sp++] = 0;
    state[start] = 1;
    while (sp) {
      int id = stack[sp - 2], k = stack[sp - 1];
      tpu_instr *in = c->instrs[id];
      if (k < in->noperands) {
        stack[sp - 1] = k + 1;
        int o = in->operands[k]->id;
        if (state[o] == 1) {
          st = TPU_FAIL(p->d, TPU_ERR_INVALID, in->loc, "instruction '%s' depends on itself", in->name);
          break;
        }
        if (state[o] == 0) {
          state[o] = 1;
          stack[sp++] = o;
          stack[sp++] = 0;
        }
      } else {
        state[id] = 2;
        c->order[norder++] = in;
        sp -= 2;
      }
    }
  }
  c->norder = norder;
  tpu_free(state);
  tpu_free(stack);
  return st;
}

/* The computations an instruction calls, into out[] (at most 6 + nbranches). */
static int callees(const tpu_instr *in, tpu_comp **out) {
  int n = 0;
  tpu_comp *one[6] = {in->to_apply, in->condition, in->body, in->select, in->scatter_comp, in->calls};
  for (int j = 0; j < 6; j++)
    if (one[j]) out[n++] = one[j];
  return n;
}

/* A computation may not call itself directly or indirectly: an iterative depth-first walk
 * over the call graph (linear in calls), reporting the first back edge. */
static tpu_status check_call_graph(parser *p) {
  tpu_module *m = p->m;
  int n = m->ncomps;
  unsigned char *state = tpu_calloc((size_t)n, 1); /* 0 new, 1 on stack, 2 done */
  int *stack = tpu_malloc(sizeof(int) * 3 * (size_t)n); /* (comp, instr, callee) triples */
  if (!state || !stack) {
    tpu_free(state);
    tpu_free(stack);
    return nomem(p);
  }
  tpu_status st = TPU_OK;
  for (int root = 0; root < n && st == TPU_OK; root++) {
    if (state[root]) continue;
    int sp = 0;
    stack[sp++] = root, stack[sp++] = 0, stack[sp++] = 0;
    state[root] = 1;
    while (sp && st == TPU_OK) {
      int ci = stack[sp - 3], ii = stack[sp - 2], ki = stack[sp - 1];
      tpu_comp *c = m->comps[ci];
      if (ii == c->ninstrs) {
        state[ci] = 2;
        sp -= 3;
        continue;
      }
      tpu_instr *in = c->instrs[ii];
      tpu_comp *cs[6];
      int nc = callees(in, cs);
      int total = nc + in->nbranches;
      if (ki >= total) {
        stack[sp - 2] = ii + 1;
        stack[sp - 1] = 0;
        continue;
      }
      stack[sp - 1] = ki + 1;
      tpu_comp *callee = ki < nc ? cs[ki] : in->branches[ki - nc];
      if (!callee) continue;
      int k = callee->index;
      if (state[k] == 1) {
        st = TPU_FAIL(p->d, TPU_ERR_INVALID, in->loc, "computation '%s' calls itself (recursion is not allowed in HLO)",
                      callee->name);
      } else if (state[k] == 0) {
        state[k] = 1;
        stack[sp++] = k, stack[sp++] = 0, stack[sp++] = 0;
      }
    }
  }
  tpu_free(state);
  tpu_free(stack);
  return st;
}

/* replica_count and num_partitions: whole numbers from 1 to TPU_HLO_MAX_DEVICES, their
 * product too, refused at the attribute before anything is built for the devices. */
static tpu_status check_device_counts(parser *p) {
  static const char *const names[] = {"replica_count", "num_partitions"};
  long long product = 1;
  for (int i = 0; i < p->m->nattrs; i++) {
    const tpu_attr *a = &p->m->attrs[i];
    int k = !strcmp(a->name, names[0]) ? 0 : !strcmp(a->name, names[1]) ? 1 : -1;
    if (k < 0) continue;
    const char *v = a->value;
    long long x = 0;
    int digits = 0;
    for (; *v >= '0' && *v <= '9'; v++, digits++)
      if ((x = x * 10 + (*v - '0')) > TPU_HLO_MAX_DEVICES) break;
    if (!digits || (*v && x <= TPU_HLO_MAX_DEVICES))
      return TPU_FAIL(p->d, TPU_ERR_PARSE, a->loc, "%s must be a whole number of devices, not '%s'", names[k], a->value);
    if (x < 1 || x > TPU_HLO_MAX_DEVICES)
      return TPU_FAIL(p->d, TPU_ERR_LIMIT, a->loc, "%s is %s; it must be from 1 to %d", names[k], a->value,
                      TPU_HLO_MAX_DEVICES);
    product *= x;
    if (product > TPU_HLO_MAX_DEVICES)
      return TPU_FAIL(p->d, TPU_ERR_LIMIT, a->loc, "replica_count x num_partitions is %lld; at most %d devices", product,
                      TPU_HLO_MAX_DEVICES);
  }
  return TPU_OK;
}

static tpu_status parse_module(parser *p) {
  tpu_lex *lx = &p->lx;
  const char *s;
  size_t n;
  tpu_lex_skip(lx);
  tpu_loc at = tpu_lex_loc(lx);
  if (!tpu_lex_ident(lx, &s, &n) || !ident_is(s, n, "HloModule"))
    return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "expected 'HloModule' at the start of the module");
  at = tpu_lex_loc(lx);
  if (!tpu_lex_ident(lx, &s, &n)) return TPU_FAIL(p->d, TPU_ERR_PARSE, at, "expected the module name");
  p->m->name = tpu_arena_strndup(&p->m->arena, s, n);
  if (!p->m->name) return nomem(p);
  TPU_TRY(parse_attrs(p, &p->m->attrs, &p->m->nattrs, 1));
  TPU_TRY(check_device_counts(p));
  ptrvec pv = {0};
  tpu_status st = TPU_OK;
  int nentry = 0;
  for (;;) {
    tpu_lex_skip(lx);
    if (tpu_lex_peek(lx) == -1) break;
    if (skip_table_section(p)) continue;
    at = tpu_lex_loc(lx);
    int is_entry = 0;
    if (!tpu_lex_ident(lx, &s, &n)) {
      st = TPU_FAIL(p->d, TPU_ERR_PARSE, at, "expected a computation");
      break;
    }
    if (ident_is(s, n, "ENTRY")) {
      is_entry = 1;
      at = (tpu_lex_skip(lx), tpu_lex_loc(lx));
      if (!tpu_lex_ident(lx, &s, &n)) {
        st = TPU_FAIL(p->d, TPU_ERR_PARSE, at, "expected the entry computation's name");
        break;
      }
    }
    tpu_comp *c = NULL;
    st = parse_comp(p, is_entry, s, n, at, &c);
    if (st != TPU_OK) break;
    if (is_entry && nentry++) {
      st = TPU_FAIL(p->d, TPU_ERR_INVALID, at, "a second ENTRY computation '%s'", c->name);
      break;
    }
    if (!ptrvec_push(&pv, c)) {
      st = nomem(p);
      break;
    }
  }
  if (st != TPU_OK) {
    tpu_free(pv.v);
    return st;
  }
  if (pv.n == 0) {
    tpu_free(pv.v);
    return TPU_FAIL(p->d, TPU_ERR_PARSE, tpu_lex_loc(lx), "the module has no computations");
  }
  p->m->ncomps = pv.n;
  p->m->comps = (tpu_comp **)ptrvec_finish(p, &pv);
  if (!p->m->comps) return nomem(p);
  for (int i = 0; i < p->m->ncomps; i++)
    if (p->m->comps[i]->is_entry) p->m->entry = p->m->comps[i];
  if (!p->m->entry) {
    p->m->entry = p->m->comps[p->m->ncomps - 1];
    p->m->entry->is_entry = 1;
  }
  TPU_TRY(tpu_module_index_comps(p->m, p->d));
  for (int i = 0; i < p->m->ncomps; i++) {
    tpu_comp *c = p->m->comps[i];
    if (tpu_module_find_comp(p->m, c->name) != c)
      return TPU_FAIL(p->d, TPU_ERR_INVALID, c->loc, "computation '%s' is defined twice", c->name);
  }
  for (int i = 0; i < p->m->ncomps; i++) TPU_TRY(resolve_comp(p, p->m->comps[i]));
  for (int i = 0; i < p->m->ncomps; i++) {
    tpu_comp *c = p->m->comps[i];
    for (int k = 0; k < c->ninstrs; k++) {
      tpu_instr *in = c->instrs[k];
      TPU_TRY(tpu__hlo_parse_attrs(p->m, in, p->d));
      /* The token an asynchronous call (call-start) waits on: "PrepareAsyncCallDone" of the
       * flag "PrepareAsyncCallStart" reserves. Only an ordering: a token of nothing. */
      char t[32];
      if (in->op == TPU_OP_CUSTOM_CALL && in->shape.dtype == TPU_TOKEN &&
          !strcmp(tpu_custom_call_target(in, t, sizeof t), "PrepareAsyncCallDone")) {
        in->op = TPU_OP_AFTER_ALL;
        in->noperands = 0;
      }
    }
  }
  TPU_TRY(check_call_graph(p));
  for (int i = 0; i < p->m->ncomps; i++) TPU_TRY(order_comp(p, p->m->comps[i]));
  return TPU_OK;
}

tpu_status tpu_hlo_parse(const char *file, const char *src, size_t len, tpu_module **out, tpu_diag *d) {
  *out = NULL;
  tpu_loc whole = tpu_loc_at(file ? file : "<input>", 0, 0);
  if (len > MAX_INPUT_BYTES)
    return TPU_FAIL(d, TPU_ERR_LIMIT, whole, "input of %zu bytes is too large (the limit is %zu)", len,
                    MAX_INPUT_BYTES);
  /* A NUL byte is never HLO: refused where it stands, before anything reads the text. */
  const char *nul = memchr(src, 0, len);
  if (nul) {
    tpu_loc at = tpu_loc_at(whole.file, 1, 1);
    for (const char *c = src; c < nul; c++) {
      if (*c == '\n') {
        at.line++;
        at.col = 1;
      } else {
        at.col++;
      }
    }
    return TPU_FAIL(d, TPU_ERR_PARSE, at, "a NUL byte (byte offset %zu): HLO is text", (size_t)(nul - src));
  }
  tpu_module *m = tpu_calloc(1, sizeof *m);
  if (!m) return TPU_FAIL(d, TPU_ERR_NOMEM, whole, "out of memory");
  tpu_arena_init(&m->arena);
  m->file = tpu_arena_strdup(&m->arena, file ? file : "<input>");
  if (!m->file) {
    tpu_module_free(m);
    return TPU_FAIL(d, TPU_ERR_NOMEM, whole, "out of memory");
  }
  parser p = {m, {0}, d};
  tpu_lex_init(&p.lx, m->file, src, len);
  tpu_status st = parse_module(&p);
  if (st == TPU_OK) st = tpu__hlo_split_mixed_precision(m, d);
  if (st != TPU_OK) {
    if (d && d->file[0] == 0 && file) snprintf(d->file, sizeof d->file, "%s", file);
    tpu_module_free(m);
    return st;
  }
  *out = m;
  return TPU_OK;
}

tpu_status tpu_hlo_parse_file(const char *path, tpu_module **out, tpu_diag *d) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return TPU_FAIL(d, TPU_ERR_IO, tpu_loc_at(path, 0, 0), "cannot open the file: %s", strerror(errno));
  size_t cap = 1 << 16, len = 0;
  char *buf = tpu_malloc(cap);
  tpu_status st = TPU_OK;
  while (buf) {
    if (len == cap) {
      if (cap >= MAX_INPUT_BYTES) {
        st = TPU_FAIL(d, TPU_ERR_LIMIT, tpu_loc_at(path, 0, 0), "file is too large");
        break;
      }
      char *nb = tpu_realloc(buf, cap * 2);
      if (!nb) break;
      buf = nb;
      cap *= 2;
    }
    size_t r = fread(buf + len, 1, cap - len, f);
    len += r;
    if (r == 0) {
      if (ferror(f)) st = TPU_FAIL(d, TPU_ERR_IO, tpu_loc_at(path, 0, 0), "cannot read the file: %s", strerror(errno));
      break;
    }
  }
  fclose(f);
  if (st == TPU_OK && !buf) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_loc_at(path, 0, 0), "out of memory reading the file");
  if (st == TPU_OK) st = tpu_hlo_parse(path, buf, len, out, d);
  tpu_free(buf);
  return st;
}
