/* The Mosaic kernel's line form (docs/pallas.md) -> tpu_mosaic: ops, blocks, types, the grid. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "ir/custom_call.h"
#include "mosaic/mosaic.h"

static const char *const k_names[] = {
#define X(e, name) name,
#include "mosaic/mosaic_ops.def"
#undef X
};
_Static_assert(sizeof k_names / sizeof k_names[0] == TPU_MO_COUNT, "mosaic_ops.def and tpu_mo_code disagree");

typedef struct {
  tpu_mosaic *k;
  const char *p, *end;
  int line;
  tpu_diag *d;
} rd;

#define MAX_TOK 64

static tpu_status fail(rd *r, const char *msg, const char *tok) {
  return TPU_FAIL(r->d, TPU_ERR_PARSE, r->k->loc, "Pallas kernel line %d: %s%s%s%s", r->line, msg, tok ? " '" : "",
                  tok ? tok : "", tok ? "'" : "");
}

/* The next line's tokens (in the arena); 0 at the end of the text. */
static int next_line(rd *r, char ***tok, int *ntok) {
  while (r->p < r->end) {
    const char *e = memchr(r->p, '\n', (size_t)(r->end - r->p));
    if (!e) e = r->end;
    r->line++;
    const char *s = r->p;
    r->p = e < r->end ? e + 1 : e;
    while (s < e && *s == ' ') s++;
    if (s == e) continue;
    int cap = 16, n = 0;
    char **v = tpu_arena_alloc(&r->k->arena, sizeof *v * (size_t)cap);
    if (!v) return -1;
    while (s < e) {
      const char *t = s;
      while (s < e && *s != ' ') s++;
      if (n == cap) {
        char **w = tpu_arena_alloc(&r->k->arena, sizeof *w * (size_t)cap * 2);
        if (!w) return -1;
        memcpy(w, v, sizeof *v * (size_t)cap);
        v = w;
        cap *= 2;
      }
      if (!(v[n++] = tpu_arena_strndup(&r->k->arena, t, (size_t)(s - t)))) return -1;
      while (s < e && *s == ' ') s++;
    }
    *tok = v;
    *ntok = n;
    return 1;
  }
  return 0;
}

static int num(const char *s, int64_t *v) {
  char *e;
  errno = 0;
  long long x = strtoll(s, &e, 10);
  if (e == s || *e || errno) return 0;
  *v = x;
  return 1;
}

static int elem_type(const char *s, size_t n, tpu_mo_type *t) {
  static const struct { const char *m; tpu_dtype dt; } k[] = {
      {"i1", TPU_PRED}, {"i8", TPU_S8}, {"i16", TPU_S16}, {"i32", TPU_S32}, {"i64", TPU_S64},
      {"ui8", TPU_U8}, {"ui32", TPU_U32}, {"si32", TPU_S32}, {"index", TPU_S64}, {"f32", TPU_F32},
      {"bf16", TPU_BF16}, {"f16", TPU_F16}, {"f64", TPU_F64}, {"sem", TPU_S32}, {"dsem", TPU_S32},
      {"i4", TPU_S8}, {"f8E4M3FN", TPU_F8E4M3FN}, {"f8E5M2", TPU_F8E5M2}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (strlen(k[i].m) == n && !strncmp(s, k[i].m, n)) {
      t->dt = k[i].dt;
      t->bits = n == 2 && !strncmp(s, "i4", 2) ? 4 : 0; /* i4 held in s8, wrapped at 4 bits */
      t->is_index = !strncmp(s, "index", n);
      t->sem = s[0] == 's' || s[0] == 'd' ? (s[0] == 'd' ? 2 : 1) : 0;
      if (s[0] == 's' && s[1] == 'i') t->sem = 0;
      return 1;
    }
  return 0;
}

static int dims(const char *s, size_t n, tpu_mo_type *t) {
  t->rank = 0;
  const char *p = s, *e = s + n;
  while (p < e) {
    if (t->rank == TPU_MO_MAX_RANK) return 0;
    if (*p == '?') {
      t->dims[t->rank++] = -1;
      p++;
    } else {
      char *q;
      long long v = strtoll(p, &q, 10);
      if (q == p || v < 0) return 0;
      t->dims[t->rank++] = v;
      p = q;
    }
    if (p < e && *p != 'x') return 0;
    if (p < e) p++;
  }
  return 1;
}

/* i32 | v:DIMS:ELEM | m:DIMS:ELEM:SPACE | sem | dsem */
static int parse_type(const char *s, tpu_mo_type *t) {
  memset(t, 0, sizeof *t);
  if ((s[0] == 'v' || s[0] == 'm') && s[1] == ':') {
    const char *a = s + 2, *b = strchr(a, ':');
    if (!b || !dims(a, (size_t)(b - a), t)) return 0;
    const char *c = strchr(b + 1, ':');
    size_t en = c ? (size_t)(c - b - 1) : strlen(b + 1);
    if (!elem_type(b + 1, en, t)) return 0;
    if (s[0] == 'v') {
      t->kind = TPU_MO_VECTOR;
      return !c;
    }
    if (!c) return 0;
    t->kind = TPU_MO_MEMREF;
    const char *sp = c + 1;
    t->space = !strcmp(sp, "vmem") ? TPU_MO_VMEM : !strcmp(sp, "smem") ? TPU_MO_SMEM
               : !strcmp(sp, "semaphore_mem") ? TPU_MO_SEMMEM : !strcmp(sp, "hbm") ? TPU_MO_HBM : TPU_MO_ANY;
    return 1;
  }
  if (!elem_type(s, strlen(s), t)) return 0;
  t->kind = t->sem ? TPU_MO_SEM : TPU_MO_SCALAR;
  return 1;
}

static tpu_status read_block(rd *r, char **tok, int ntok, tpu_mo_block *b, int depth);

static tpu_status value_id(rd *r, const char *s, int *id) {
  int64_t v;
  if (!num(s, &v) || v < 0 || v > 100000000) return fail(r, "bad value number", s);
  *id = (int)v;
  if (*id >= r->k->nvalues) r->k->nvalues = *id + 1;
  return TPU_OK;
}

/* op NAME NRES (ID TYPE)* NOPD ID* NATTR KEY=VAL* NREG, then NREG blocks. */
static tpu_status read_op(rd *r, char **tok, int ntok, tpu_mo_op **out, int depth) {
  if (depth > 64) return fail(r, "regions nested too deeply", NULL);
  tpu_mo_op *op = tpu_arena_alloc(&r->k->arena, sizeof *op);
  if (!op) return TPU_FAIL(r->d, TPU_ERR_NOMEM, r->k->loc, "out of memory");
  memset(op, 0, sizeof *op);
  op->line = r->line;
  int i = 1;
  int64_t v;
  if (ntok < 3) return fail(r, "short operation line", NULL);
  op->name = tok[i++];
  op->code = TPU_MO_COUNT;
  for (int c = 0; c < TPU_MO_COUNT; c++)
    if (!strcmp(op->name, k_names[c])) op->code = (tpu_mo_code)c;
  if (i >= ntok || !num(tok[i++], &v) || v < 0 || v > 64 || i + 2 * v > ntok) return fail(r, "bad result count", NULL);
  op->nres = (int)v;
  op->res = tpu_arena_alloc(&r->k->arena, sizeof(int) * (size_t)(op->nres + 1));
  op->rest = tpu_arena_alloc(&r->k->arena, sizeof(tpu_mo_type) * (size_t)(op->nres + 1));
  if (!op->res || !op->rest) return TPU_FAIL(r->d, TPU_ERR_NOMEM, r->k->loc, "out of memory");
  for (int j = 0; j < op->nres; j++) {
    TPU_TRY(value_id(r, tok[i++], &op->res[j]));
    if (!parse_type(tok[i], &op->rest[j])) return fail(r, "unknown type", tok[i]);
    i++;
  }
  if (i >= ntok || !num(tok[i++], &v) || v < 0 || v > 4096 || i + v > ntok) return fail(r, "bad operand count", NULL);
  op->nopd = (int)v;
  op->opd = tpu_arena_alloc(&r->k->arena, sizeof(int) * (size_t)(op->nopd + 1));
  if (!op->opd) return TPU_FAIL(r->d, TPU_ERR_NOMEM, r->k->loc, "out of memory");
  for (int j = 0; j < op->nopd; j++) TPU_TRY(value_id(r, tok[i++], &op->opd[j]));
  if (i >= ntok || !num(tok[i++], &v) || v < 0 || v > 256 || i + v > ntok) return fail(r, "bad attribute count", NULL);
  op->nattr = (int)v;
  op->akey = tpu_arena_alloc(&r->k->arena, sizeof(char *) * (size_t)(op->nattr + 1));
  op->aval = tpu_arena_alloc(&r->k->arena, sizeof(char *) * (size_t)(op->nattr + 1));
  if (!op->akey || !op->aval) return TPU_FAIL(r->d, TPU_ERR_NOMEM, r->k->loc, "out of memory");
  for (int j = 0; j < op->nattr; j++) {
    char *eq = strchr(tok[i], '=');
    if (!eq) return fail(r, "attribute without '='", tok[i]);
    *eq = 0;
    op->akey[j] = tok[i];
    op->aval[j] = eq + 1;
    if (!strcmp(tok[i], "_loc") && eq[1] == 's' && eq[2] == ':') op->src = eq + 3;
    i++;
  }
  if (i + 1 != ntok || !num(tok[i], &v) || v < 0 || v > 16) return fail(r, "bad region count", NULL);
  op->nreg = (int)v;
  op->reg = tpu_arena_alloc(&r->k->arena, sizeof(tpu_mo_block) * (size_t)(op->nreg + 1));
  if (!op->reg) return TPU_FAIL(r->d, TPU_ERR_NOMEM, r->k->loc, "out of memory");
  memset(op->reg, 0, sizeof(tpu_mo_block) * (size_t)(op->nreg + 1));
  for (int g = 0; g < op->nreg; g++) {
    char **bt;
    int nb;
    int got = next_line(r, &bt, &nb);
    if (got < 0) return TPU_FAIL(r->d, TPU_ERR_NOMEM, r->k->loc, "out of memory");
    if (!got || strcmp(bt[0], "block")) return fail(r, "expected a block of", op->name);
    TPU_TRY(read_block(r, bt, nb, &op->reg[g], depth + 1));
  }
  *out = op;
  return TPU_OK;
}

/* block NARGS (ID TYPE)*, operations, end. */
static tpu_status read_block(rd *r, char **tok, int ntok, tpu_mo_block *b, int depth) {
  int64_t v;
  if (ntok < 2 || !num(tok[1], &v) || v < 0 || v > 4096 || 2 + 2 * v != ntok) return fail(r, "bad block line", NULL);
  b->nargs = (int)v;
  b->args = tpu_arena_alloc(&r->k->arena, sizeof(int) * (size_t)(b->nargs + 1));
  b->argt = tpu_arena_alloc(&r->k->arena, sizeof(tpu_mo_type) * (size_t)(b->nargs + 1));
  if (!b->args || !b->argt) return TPU_FAIL(r->d, TPU_ERR_NOMEM, r->k->loc, "out of memory");
  for (int j = 0; j < b->nargs; j++) {
    TPU_TRY(value_id(r, tok[2 + 2 * j], &b->args[j]));
    if (!parse_type(tok[3 + 2 * j], &b->argt[j])) return fail(r, "unknown type", tok[3 + 2 * j]);
  }
  int cap = 0;
  for (;;) {
    char **t;
    int nt;
    int got = next_line(r, &t, &nt);
    if (got < 0) return TPU_FAIL(r->d, TPU_ERR_NOMEM, r->k->loc, "out of memory");
    if (!got) return fail(r, "block without 'end'", NULL);
    if (!strcmp(t[0], "end")) return TPU_OK;
    if (strcmp(t[0], "op")) return fail(r, "expected 'op' or 'end', found", t[0]);
    if (b->nops == cap) {
      int nc = cap ? cap * 2 : 16;
      tpu_mo_op **w = tpu_arena_alloc(&r->k->arena, sizeof *w * (size_t)nc);
      if (!w) return TPU_FAIL(r->d, TPU_ERR_NOMEM, r->k->loc, "out of memory");
      if (cap) memcpy(w, b->ops, sizeof *w * (size_t)cap);
      b->ops = w;
      cap = nc;
    }
    TPU_TRY(read_op(r, t, nt, &b->ops[b->nops], depth + 1));
    b->nops++;
  }
}

const char *tpu_mo_attr(const tpu_mo_op *op, const char *key) {
  for (int i = 0; i < op->nattr; i++)
    if (!strcmp(op->akey[i], key)) return op->aval[i];
  return NULL;
}

int tpu_mo_attr_int(const tpu_mo_op *op, const char *key, int64_t *v) {
  const char *a = tpu_mo_attr(op, key);
  if (!a || a[0] != 'i' || a[1] != ':') return 0;
  return num(a + 2, v);
}

static int ints(const char *s, int64_t *v, int max) {
  int n = 0;
  while (*s) {
    char *e;
    long long x = strtoll(s, &e, 10);
    if (e == s) return n;
    if (n < max) v[n] = x;
    n++;
    s = *e == ',' ? e + 1 : e;
    if (*e != ',') break;
  }
  return n;
}

int tpu_mo_attr_ints(const tpu_mo_op *op, const char *key, int64_t *v, int max) {
  const char *a = tpu_mo_attr(op, key);
  if (a && a[0] == '[') { /* an array of integer attributes, "[i:1;i:0]" (vector.extract_strided_slice's offsets) */
    int n = 0;
    const char *p = a + 1;
    while (*p && *p != ']') {
      char *e;
      if (p[0] != 'i' || p[1] != ':') return -1;
      long long x = strtoll(p + 2, &e, 10);
      if (e == p + 2) return -1;
      if (n < max) v[n] = x;
      n++;
      p = *e == ';' ? e + 1 : e;
    }
    return n;
  }
  if (!a || (a[0] != 'a' && a[0] != 'D') || a[1] != ':') return -1;
  return ints(a + 2, v, max);
}

static const tpu_mo_op *func_named(const tpu_mosaic *k, const char *name) {
  for (int i = 0; i < k->nfuncs; i++) {
    const char *s = tpu_mo_attr(k->funcs[i], "sym_name");
    if (s && !strncmp(s, "s:", 2) && !strcmp(s + 2, name)) return k->funcs[i];
  }
  return NULL;
}

/* The grid, the dimension semantics and the windows of the kernel func. */
static tpu_status read_kernel(rd *r) {
  tpu_mosaic *k = r->k;
  for (int i = 0; i < k->nfuncs && !k->main; i++)
    if (tpu_mo_attr(k->funcs[i], "window_params") || tpu_mo_attr(k->funcs[i], "iteration_bounds")) k->main = k->funcs[i];
  if (!k->main && k->nfuncs) k->main = k->funcs[0];
  if (!k->main) return fail(r, "no kernel function", NULL);
  const tpu_mo_op *f = k->main;
  if (f->nreg != 1) return fail(r, "the kernel function has no body", NULL);
  const char *nm = tpu_mo_attr(f, "sym_name");
  k->name = nm && !strncmp(nm, "s:", 2) ? nm + 2 : "kernel";
  int ng = tpu_mo_attr_ints(f, "iteration_bounds", k->grid, TPU_MO_MAX_RANK);
  if (ng > TPU_MO_MAX_RANK) return fail(r, "a grid of more than 8 dimensions", NULL);
  k->ngrid = ng < 0 ? 0 : ng;
  for (int i = 0; i < k->ngrid; i++) {
    if (k->grid[i] < 0) { /* MLIR's dynamic size: the bound comes with the call */
      k->grid[i] = -1;
      k->ndyn++;
    } else if (k->grid[i] > ((int64_t)1 << 31)) {
      return fail(r, "a huge grid dimension", NULL);
    }
  }
  const char *sem = tpu_mo_attr(f, "dimension_semantics");
  for (int i = 0; sem && i < k->ngrid; i++) {
    const char *p = sem;
    for (int j = 0; j < i && p; j++) p = strchr(p + 1, ';');
    k->parallel[i] = p && !strncmp(p + (i ? 1 : 0) + (p[i ? 1 : 0] == '[' ? 1 : 0), "#tpu.dimension_semantics<parallel>", 34);
  }
  int64_t v = 0;
  k->nprefetch = tpu_mo_attr_int(f, "scalar_prefetch", &v) ? (int)v : 0;
  v = 0;
  k->nscratch = tpu_mo_attr_int(f, "scratch_operands", &v) ? (int)v : 0;
  int nargs = f->reg[0].nargs;
  k->nwindows = nargs - k->ngrid - k->nprefetch - k->nscratch;
  if (k->nprefetch < 0 || k->nscratch < 0 || k->nwindows < 0)
    return fail(r, "the kernel's arguments do not cover its grid, prefetch and scratch operands", NULL);
  k->win = tpu_arena_alloc(&k->arena, sizeof *k->win * (size_t)(k->nwindows + 1));
  if (!k->win) return TPU_FAIL(r->d, TPU_ERR_NOMEM, k->loc, "out of memory");
  memset(k->win, 0, sizeof *k->win * (size_t)(k->nwindows + 1));
  const char *wp = tpu_mo_attr(f, "window_params");
  const char *p = wp && wp[0] == '[' ? wp + 1 : NULL;
  for (int w = 0; w < k->nwindows; w++) {
    tpu_mo_window *win = &k->win[w];
    const tpu_mo_type *at = &f->reg[0].argt[k->ngrid + k->nprefetch + w];
    if (at->kind != TPU_MO_MEMREF) return fail(r, "a kernel operand that is not a memref", NULL);
    /* {transform_indices=@NAME;window_bounds=a:...} or {} (the whole operand) */
    const char *e = p ? strchr(p, '}') : NULL;
    if (p && e) {
      char buf[512];
      size_t n = (size_t)(e - p) < sizeof buf - 1 ? (size_t)(e - p) : sizeof buf - 1;
      memcpy(buf, p, n);
      buf[n] = 0;
      char *ti = strstr(buf, "transform_indices=@"), *wb = strstr(buf, "window_bounds=a:");
      if (ti && wb) {
        char *ne = ti + 19;
        while (*ne && *ne != ';' && *ne != '}') ne++;
        char save = *ne;
        *ne = 0;
        win->map = func_named(k, ti + 19);
        *ne = save;
        if (!win->map) return fail(r, "a window's index map names no function", ti + 19);
        win->has_map = 1;
        win->rank = ints(wb + 16, win->bounds, TPU_MO_MAX_RANK);
        if (win->rank > TPU_MO_MAX_RANK) return fail(r, "a window of more than 8 dimensions", NULL);
        int kept = 0;
        for (int i = 0; i < win->rank; i++) kept += win->bounds[i] != 1;
        /* A squeezed dimension (BlockSpec None): window bound 1 missing from the memref. */
        if (at->rank < win->rank) {
          int need = win->rank - at->rank;
          for (int i = 0; i < win->rank && need; i++)
            if (win->bounds[i] == 1) {
              win->squeezed[i] = 1;
              need--;
            }
          if (need) return fail(r, "a window whose bounds do not match its memref", NULL);
        }
        (void)kept;
        /* pl.Element dimensions (every one of the window's, as Pallas requires): the index map
         * gives element offsets; window_kind=#tpu.element_window<[low pads],[high pads]> */
        const char *ew = strstr(buf, "window_kind=#tpu.element_window<");
        if (ew) {
          int64_t lo[TPU_MO_MAX_RANK], hi[TPU_MO_MAX_RANK];
          const char *q = strchr(ew, '[');
          int nl = q ? ints(q + 1, lo, TPU_MO_MAX_RANK) : 0;
          q = q ? strchr(q + 1, '[') : NULL;
          int nh = q ? ints(q + 1, hi, TPU_MO_MAX_RANK) : 0;
          for (int i = 0; i < nl && i < TPU_MO_MAX_RANK; i++)
            if (lo[i]) return fail(r, "an element window (pl.Element) with padding: not modelled yet", NULL);
          for (int i = 0; i < nh && i < TPU_MO_MAX_RANK; i++)
            if (hi[i]) return fail(r, "an element window (pl.Element) with padding: not modelled yet", NULL);
          win->element = 1;
        }
      }
      p = e + 1;
      if (*p == ';') p++;
    }
  }
  return TPU_OK;
}

tpu_status tpu_mosaic_parse(const char *text, size_t n, tpu_loc loc, tpu_mosaic **out, tpu_diag *d) {
  *out = NULL;
  tpu_mosaic *k = tpu_malloc(sizeof *k);
  if (!k) return TPU_FAIL(d, TPU_ERR_NOMEM, loc, "out of memory");
  memset(k, 0, sizeof *k);
  tpu_arena_init(&k->arena);
  k->loc = loc;
  rd r = {k, text, text + n, 0, d};
  char **t;
  int nt;
  tpu_status st = TPU_OK;
  int got = next_line(&r, &t, &nt);
  if (got <= 0 || nt != 2 || strcmp(t[0], "tpusim-mosaic") || strcmp(t[1], "1")) {
    st = got < 0 ? TPU_FAIL(d, TPU_ERR_NOMEM, loc, "out of memory")
                 : fail(&r, "not a decoded kernel (expected 'tpusim-mosaic 1': re-run python/tpusim/pallas_decode.py)", NULL);
    goto done;
  }
  int cap = 0;
  while (st == TPU_OK && (got = next_line(&r, &t, &nt)) > 0) {
    if (strcmp(t[0], "op")) {
      st = fail(&r, "expected 'op', found", t[0]);
      break;
    }
    if (k->nfuncs == cap) {
      int nc = cap ? 2 * cap : 8;
      tpu_mo_op **w = tpu_arena_alloc(&k->arena, sizeof *w * (size_t)nc);
      if (!w) {
        st = TPU_FAIL(d, TPU_ERR_NOMEM, loc, "out of memory");
        break;
      }
      if (cap) memcpy(w, k->funcs, sizeof *w * (size_t)cap);
      k->funcs = w;
      cap = nc;
    }
    st = read_op(&r, t, nt, &k->funcs[k->nfuncs], 0);
    if (st == TPU_OK && k->funcs[k->nfuncs]->code != TPU_MO_FUNC) st = fail(&r, "a top-level operation that is not a func", NULL);
    k->nfuncs++;
  }
  if (got < 0) st = TPU_FAIL(d, TPU_ERR_NOMEM, loc, "out of memory");
  if (st == TPU_OK) st = read_kernel(&r);
done:
  if (st != TPU_OK) {
    tpu_mosaic_free(k);
    return st;
  }
  *out = k;
  return TPU_OK;
}

void tpu_mosaic_free(tpu_mosaic *k) {
  if (!k) return;
  tpu_arena_deinit(&k->arena);
  tpu_free(k);
}

static const char *backend_config(const tpu_instr *in) {
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, "backend_config")) return in->attrs[i].value;
  return NULL;
}

int tpu_mosaic_is_decoded(const tpu_instr *in) {
  const char *b = backend_config(in);
  return b && strstr(b, "\"tpusim_mosaic\"");
}

/* Copies the token at p (up to a space, a newline, its escape "\\n" or a quote) into buf. */
static void token_at(const char *p, char *buf, size_t n) {
  size_t k = 0;
  while (p[k] && p[k] != ' ' && p[k] != '"' && p[k] != '\n' && !(p[k] == '\\' && p[k + 1] == 'n') && k + 1 < n) {
    buf[k] = p[k];
    k++;
  }
  buf[k] = 0;
}

int tpu_mosaic_source(const tpu_instr *in, char *buf, size_t n) {
  const char *b = backend_config(in), *m = b ? strstr(b, "\"tpusim_mosaic\"") : NULL;
  const char *f = m ? strstr(m, "op func.func ") : NULL;
  const char *nm = f ? strstr(f, "sym_name=s:") : NULL, *loc = f ? strstr(f, "_loc=s:") : NULL;
  if (!nm || n == 0) return 0;
  char name[128], src[512];
  token_at(nm + 11, name, sizeof name);
  src[0] = 0;
  if (loc) token_at(loc + 7, src, sizeof src);
  const char *base = strrchr(src, '/');
  if (src[0]) snprintf(buf, n, "%s @ %s", name, base ? base + 1 : src);
  else snprintf(buf, n, "%s", name);
  return 1;
}

tpu_status tpu_mosaic_of_instr(const tpu_instr *in, tpu_mosaic **out, tpu_diag *d) {
  *out = NULL;
  const char *b = backend_config(in);
  if (!b || !strstr(b, "\"tpusim_mosaic\""))
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc,
                    "custom-call '%s' (target \"tpu_custom_call\") is a Pallas kernel still in Mosaic bytecode: decode it "
                    "first (tpusim run does "
                    "this with python3 and jax: pip install jax; or python3 python/tpusim/pallas_decode.py IN.hlo OUT.hlo)",
                    tpu_instr_user_name(in));
  tpu_json_doc doc;
  TPU_TRY(tpu_json_parse(b, strlen(b), in->loc.file, &doc, d));
  const tpu_json *m = tpu_json_get(doc.root, "tpusim_mosaic");
  tpu_status st;
  if (!m || m->kind != TPU_JSON_STRING)
    st = TPU_FAIL(d, TPU_ERR_PARSE, in->loc, "custom-call '%s': backend_config's \"tpusim_mosaic\" is not a string",
                  tpu_instr_user_name(in));
  else
    st = tpu_mosaic_parse(m->str, m->len, in->loc, out, d);
  tpu_json_doc_free(&doc);
  return st;
}
