/* SCALE-Sim interop: .cfg (configparser rules), topology CSV, and COMPUTE_REPORT.csv. */
#include "chip/scalesim.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/file.h"

/* ---------------------------------------------------------------- shared helpers */

/* Whitespace as Python's str.strip() removes it (ASCII part). */
static int is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Narrows [*b, *e) to its stripped part. */
static void strip(const char **b, const char **e) {
  while (*b < *e && is_ws(**b)) (*b)++;
  while (*e > *b && is_ws((*e)[-1])) (*e)--;
}

static char *dup_range(const char *b, const char *e) {
  size_t n = (size_t)(e - b);
  char *s = tpu_malloc(n + 1);
  if (!s) return NULL;
  memcpy(s, b, n);
  s[n] = 0;
  return s;
}

/* Reads a whole file (at most 64 MiB) into a NUL-terminated buffer the caller frees. */
static tpu_status read_file(const char *path, char **out, size_t *len, tpu_diag *d) {
  tpu_loc loc = {path, 0, 0};
  FILE *f = fopen(path, "rb");
  if (!f) return TPU_FAIL(d, TPU_ERR_IO, loc, "cannot open: %s", strerror(errno));
  size_t cap = 4096, n = 0;
  char *buf = tpu_malloc(cap);
  if (!buf) {
    fclose(f);
    return TPU_FAIL(d, TPU_ERR_NOMEM, loc, "out of memory reading the file");
  }
  for (;;) {
    if (n + 1 >= cap) {
      if (cap >= ((size_t)64 << 20)) {
        tpu_free(buf);
        fclose(f);
        return TPU_FAIL(d, TPU_ERR_LIMIT, loc, "file larger than 64 MiB");
      }
      char *nb = tpu_realloc(buf, cap * 2);
      if (!nb) {
        tpu_free(buf);
        fclose(f);
        return TPU_FAIL(d, TPU_ERR_NOMEM, loc, "out of memory reading the file");
      }
      buf = nb;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - 1 - n, f);
    n += got;
    if (got == 0) break;
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    tpu_free(buf);
    return TPU_FAIL(d, TPU_ERR_IO, loc, "read error");
  }
  buf[n] = 0;
  *out = buf;
  *len = n;
  return TPU_OK;
}

/* Python's int() on a string: surrounding whitespace, an optional sign, digits with single
 * underscores between them. Returns 0 on success, 1 if not an integer, 2 if out of int64. */
static int parse_int(const char *b, const char *e, int64_t *out) {
  strip(&b, &e);
  int neg = 0;
  if (b < e && (*b == '+' || *b == '-')) neg = *b++ == '-';
  if (b == e || *b < '0' || *b > '9') return 1;
  uint64_t v = 0;
  int over = 0;
  for (; b < e; b++) {
    if (*b == '_') {
      if (b + 1 == e || b[1] < '0' || b[1] > '9') return 1;
      continue;
    }
    if (*b < '0' || *b > '9') return 1;
    if (v > (UINT64_MAX - 9) / 10) over = 1;
    else v = v * 10 + (uint64_t)(*b - '0');
  }
  if (over || v > (uint64_t)INT64_MAX) return 2;
  *out = neg ? -(int64_t)v : (int64_t)v;
  return 0;
}

/* Calls `fn(line_begin, line_end, line_no)` per line; '\n', '\r\n' and '\r' all end a line
 * (Python's universal newlines). Stops at the first non-OK status. */
typedef tpu_status (*line_fn)(void *ctx, const char *b, const char *e, int line_no);
static tpu_status for_each_line(const char *text, size_t len, void *ctx, line_fn fn) {
  const char *p = text, *end = text + len;
  int line_no = 0;
  while (p < end) {
    const char *q = p;
    while (q < end && *q != '\n' && *q != '\r') q++;
    line_no++;
    TPU_TRY(fn(ctx, p, q, line_no));
    if (q < end && *q == '\r' && q + 1 < end && q[1] == '\n') q++;
    p = q < end ? q + 1 : q;
  }
  return TPU_OK;
}

/* ---------------------------------------------------------------- .cfg */

typedef struct {
  char *name;
  int line, col;
} cfg_section;

typedef struct {
  int sec;         /* index into secs */
  char *key;       /* lower-cased */
  char *val;       /* stripped; continuation lines joined with '\n' */
  int line, col;   /* where the value starts (or the key, for an empty value) */
  int indent;      /* indentation of the key's line */
} cfg_option;

typedef struct {
  const char *path;
  cfg_section *secs;
  int nsec, capsec;
  cfg_option *opts;
  int nopt, capopt;
  int cur_opt; /* option that continuation lines extend, or -1 */
  int cur_sec; /* -1 before the first section header */
} cfg_doc;

static void cfg_doc_free(cfg_doc *doc) {
  for (int i = 0; i < doc->nsec; i++) tpu_free(doc->secs[i].name);
  for (int i = 0; i < doc->nopt; i++) {
    tpu_free(doc->opts[i].key);
    tpu_free(doc->opts[i].val);
  }
  tpu_free(doc->secs);
  tpu_free(doc->opts);
}

static tpu_status cfg_nomem(tpu_diag *d) {
  return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory reading the configuration");
}

/* Appends "\n" + (b..e) to an option's value. */
static int cfg_append(cfg_option *o, const char *b, const char *e) {
  size_t old = strlen(o->val), add = (size_t)(e - b);
  char *nv = tpu_realloc(o->val, old + add + 2);
  if (!nv) return 0;
  nv[old] = '\n';
  memcpy(nv + old + 1, b, add);
  nv[old + 1 + add] = 0;
  o->val = nv;
  return 1;
}

typedef struct {
  cfg_doc *doc;
  tpu_diag *d;
} cfg_ctx;

static tpu_status cfg_line(void *vctx, const char *lb, const char *le, int line_no) {
  cfg_ctx *ctx = vctx;
  cfg_doc *doc = ctx->doc;
  tpu_diag *d = ctx->d;
  for (const char *c = lb; c < le; c++)
    if (*c == 0) {
      tpu_loc loc = {doc->path, line_no, (int)(c - lb) + 1};
      return TPU_FAIL(d, TPU_ERR_PARSE, loc, "NUL byte in a configuration file");
    }
  const char *b = lb, *e = le;
  strip(&b, &e);
  int indent = (int)(b - lb);
  if (b == e) { /* blank: kept inside a multi-line value, trimmed at the end */
    if (doc->cur_opt >= 0 && !cfg_append(&doc->opts[doc->cur_opt], b, b)) return cfg_nomem(d);
    return TPU_OK;
  }
  if (*b == '#' || *b == ';') return TPU_OK; /* full-line comment */
  if (doc->cur_opt >= 0 && indent > doc->opts[doc->cur_opt].indent) {
    if (!cfg_append(&doc->opts[doc->cur_opt], b, e)) return cfg_nomem(d);
    return TPU_OK;
  }
  tpu_loc loc = {doc->path, line_no, indent + 1};
  /* Section header: '[' ... last ']' on the line (configparser's \[(.+)\]). */
  if (*b == '[') {
    const char *rb = NULL;
    for (const char *c = b + 2; c < e; c++)
      if (*c == ']') rb = c;
    if (rb) {
      for (int i = 0; i < doc->nsec; i++)
        if ((size_t)(rb - b - 1) == strlen(doc->secs[i].name) &&
            !memcmp(doc->secs[i].name, b + 1, (size_t)(rb - b - 1)))
          return TPU_FAIL(d, TPU_ERR_PARSE, loc, "section [%s] already appears on line %d",
                          doc->secs[i].name, doc->secs[i].line);
      if (doc->nsec == doc->capsec) {
        int nc = doc->capsec ? doc->capsec * 2 : 8;
        cfg_section *ns = tpu_realloc(doc->secs, (size_t)nc * sizeof *ns);
        if (!ns) return cfg_nomem(d);
        doc->secs = ns;
        doc->capsec = nc;
      }
      cfg_section *s = &doc->secs[doc->nsec];
      s->name = dup_range(b + 1, rb);
      if (!s->name) return cfg_nomem(d);
      s->line = line_no;
      s->col = indent + 1;
      doc->cur_sec = doc->nsec++;
      doc->cur_opt = -1;
      return TPU_OK;
    }
  }
  if (doc->cur_sec < 0)
    return TPU_FAIL(d, TPU_ERR_PARSE, loc,
                    "expected a section header such as [general] before any setting");
  const char *delim = b;
  while (delim < e && *delim != '=' && *delim != ':') delim++;
  if (delim == e)
    return TPU_FAIL(d, TPU_ERR_PARSE, loc, "expected 'key = value' or 'key: value'");
  const char *kb = b, *ke = delim;
  strip(&kb, &ke);
  if (kb == ke) return TPU_FAIL(d, TPU_ERR_PARSE, loc, "missing key before '%c'", *delim);
  const char *vb = delim + 1, *ve = e;
  strip(&vb, &ve);
  char *key = dup_range(kb, ke);
  if (!key) return cfg_nomem(d);
  for (char *c = key; *c; c++)
    if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
  for (int i = 0; i < doc->nopt; i++)
    if (doc->opts[i].sec == doc->cur_sec && !strcmp(doc->opts[i].key, key)) {
      tpu_status st = TPU_FAIL(d, TPU_ERR_PARSE, loc,
                               "'%s' is already set in section [%s] on line %d", key,
                               doc->secs[doc->cur_sec].name, doc->opts[i].line);
      tpu_free(key);
      return st;
    }
  if (doc->nopt == doc->capopt) {
    int nc = doc->capopt ? doc->capopt * 2 : 32;
    cfg_option *no = tpu_realloc(doc->opts, (size_t)nc * sizeof *no);
    if (!no) {
      tpu_free(key);
      return cfg_nomem(d);
    }
    doc->opts = no;
    doc->capopt = nc;
  }
  cfg_option *o = &doc->opts[doc->nopt];
  o->val = dup_range(vb, ve);
  if (!o->val) {
    tpu_free(key);
    return cfg_nomem(d);
  }
  o->key = key;
  o->sec = doc->cur_sec;
  o->line = line_no;
  o->col = (int)((vb < ve ? vb : kb) - lb) + 1;
  o->indent = indent;
  doc->cur_opt = doc->nopt++;
  return TPU_OK;
}

/* Trims trailing blank lines of multi-line values, as configparser does when joining. */
static void cfg_finish(cfg_doc *doc) {
  for (int i = 0; i < doc->nopt; i++) {
    char *v = doc->opts[i].val;
    size_t n = strlen(v);
    while (n > 0 && is_ws(v[n - 1])) v[--n] = 0;
  }
}

static int cfg_find_sec(const cfg_doc *doc, const char *sec) {
  for (int i = 0; i < doc->nsec; i++)
    if (!strcmp(doc->secs[i].name, sec)) return i;
  return -1;
}

/* Finds `key` (any case) in `sec`, falling back to [DEFAULT] as configparser does. */
static const cfg_option *cfg_find(const cfg_doc *doc, const char *sec, const char *key) {
  char lk[64];
  size_t i = 0;
  for (; key[i] && i + 1 < sizeof lk; i++)
    lk[i] = (key[i] >= 'A' && key[i] <= 'Z') ? (char)(key[i] - 'A' + 'a') : key[i];
  lk[i] = 0;
  int s = cfg_find_sec(doc, sec), def = cfg_find_sec(doc, "DEFAULT");
  for (int pass = 0; pass < 2; pass++) {
    int want = pass == 0 ? s : def;
    if (want < 0) continue;
    for (int j = 0; j < doc->nopt; j++)
      if (doc->opts[j].sec == want && !strcmp(doc->opts[j].key, lk)) return &doc->opts[j];
  }
  return NULL;
}

static tpu_loc opt_loc(const cfg_doc *doc, const cfg_option *o) {
  tpu_loc l = {doc->path, o->line, o->col};
  return l;
}

/* A required key: fails at the section header (or the file) when it is missing. Values
 * with '%' are refused: configparser would treat them as interpolation. */
static tpu_status cfg_need(const cfg_doc *doc, const char *sec, const char *key,
                           const cfg_option **out, tpu_diag *d) {
  const cfg_option *o = cfg_find(doc, sec, key);
  if (!o) {
    int s = cfg_find_sec(doc, sec);
    if (s < 0) {
      tpu_loc loc = {doc->path, 0, 0};
      return TPU_FAIL(d, TPU_ERR_INVALID, loc, "missing section [%s] (SCALE-Sim needs '%s' there)",
                      sec, key);
    }
    tpu_loc loc = {doc->path, doc->secs[s].line, doc->secs[s].col};
    return TPU_FAIL(d, TPU_ERR_INVALID, loc, "section [%s] has no '%s'", sec, key);
  }
  if (strchr(o->val, '%'))
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, opt_loc(doc, o),
                    "'%%' in the value of '%s': configparser interpolation is not supported",
                    key);
  *out = o;
  return TPU_OK;
}

/* A required integer key within [lo, hi]. */
static tpu_status cfg_int(const cfg_doc *doc, const char *sec, const char *key, int64_t lo,
                          int64_t hi, int64_t *out, tpu_diag *d) {
  const cfg_option *o;
  TPU_TRY(cfg_need(doc, sec, key, &o, d));
  int64_t v = 0;
  const char *b = o->val, *e = o->val + strlen(o->val);
  int r = parse_int(b, e, &v);
  if (r == 1)
    return TPU_FAIL(d, TPU_ERR_INVALID, opt_loc(doc, o), "%s must be an integer, got '%s'", key,
                    o->val);
  if (r == 2 || v < lo || v > hi)
    return TPU_FAIL(d, TPU_ERR_INVALID, opt_loc(doc, o),
                    "%s must be between %lld and %lld, got %s", key, (long long)lo, (long long)hi,
                    o->val);
  *out = v;
  return TPU_OK;
}

static tpu_status cfg_fill(const cfg_doc *doc, tpu_scalesim_config *c, tpu_diag *d) {
  const cfg_option *o;
  TPU_TRY(cfg_need(doc, "general", "run_name", &o, d));
  if (!o->val[0] || !strcmp(o->val, ".") || !strcmp(o->val, "..") || strchr(o->val, '/') ||
      strchr(o->val, '\n') || strlen(o->val) > 200)
    return TPU_FAIL(d, TPU_ERR_INVALID, opt_loc(doc, o),
                    "run_name must be a folder name (1 to 200 characters, no '/'), got '%s'",
                    o->val);
  c->run_name = tpu_strdup(o->val);
  if (!c->run_name) return cfg_nomem(d);

  TPU_TRY(cfg_need(doc, "run_presets", "InterfaceBandwidth", &o, d));
  if (!strcmp(o->val, "USER")) c->user_bandwidth = 1;
  else if (!strcmp(o->val, "CALC")) c->user_bandwidth = 0;
  else
    return TPU_FAIL(d, TPU_ERR_INVALID, opt_loc(doc, o),
                    "InterfaceBandwidth must be CALC or USER, got '%s'", o->val);

  const char *ap = "architecture_presets";
  const int64_t big = INT64_MAX / 4;
  TPU_TRY(cfg_int(doc, ap, "ArrayHeight", 1, TPU_SCALESIM_MAX_ARRAY_DIM, &c->array_rows, d));
  TPU_TRY(cfg_int(doc, ap, "ArrayWidth", 1, TPU_SCALESIM_MAX_ARRAY_DIM, &c->array_cols, d));
  TPU_TRY(cfg_int(doc, ap, "IfmapSramSzkB", 0, big, &c->ifmap_sram_kb, d));
  TPU_TRY(cfg_int(doc, ap, "FilterSramSzkB", 0, big, &c->filter_sram_kb, d));
  TPU_TRY(cfg_int(doc, ap, "OfmapSramSzkB", 0, big, &c->ofmap_sram_kb, d));
  TPU_TRY(cfg_int(doc, ap, "IfmapOffset", -big, big, &c->ifmap_offset, d));
  TPU_TRY(cfg_int(doc, ap, "FilterOffset", -big, big, &c->filter_offset, d));
  TPU_TRY(cfg_int(doc, ap, "OfmapOffset", -big, big, &c->ofmap_offset, d));

  TPU_TRY(cfg_need(doc, ap, "Dataflow", &o, d));
  c->dataflow_loc = opt_loc(doc, o);
  if (!strcmp(o->val, "ws")) c->dataflow = TPU_SCALESIM_WS;
  else if (!strcmp(o->val, "os")) c->dataflow = TPU_SCALESIM_OS;
  else if (!strcmp(o->val, "is")) c->dataflow = TPU_SCALESIM_IS;
  else
    return TPU_FAIL(d, TPU_ERR_INVALID, opt_loc(doc, o),
                    "Dataflow must be os, ws or is (lower case, as SCALE-Sim compares it), "
                    "got '%s'",
                    o->val);

  if (c->user_bandwidth) {
    TPU_TRY(cfg_need(doc, ap, "Bandwidth", &o, d));
    const char *p = o->val, *end = o->val + strlen(o->val);
    c->n_bandwidths = 0;
    for (;;) {
      const char *q = p;
      while (q < end && *q != ',') q++;
      int64_t v = 0;
      if (parse_int(p, q, &v) != 0 || v <= 0)
        return TPU_FAIL(d, TPU_ERR_INVALID, opt_loc(doc, o),
                        "Bandwidth must be a comma-separated list of positive integers "
                        "(words per cycle), got '%s'",
                        o->val);
      if (c->n_bandwidths == TPU_SCALESIM_MAX_BANDWIDTHS)
        return TPU_FAIL(d, TPU_ERR_LIMIT, opt_loc(doc, o), "more than %d Bandwidth values",
                        TPU_SCALESIM_MAX_BANDWIDTHS);
      c->bandwidths[c->n_bandwidths++] = v;
      if (q == end) break;
      p = q + 1;
    }
  }

  /* v3's sparsity support changes the mapping (compressed filters): not modelled. */
  const cfg_option *sp = cfg_find(doc, "sparsity", "SparsitySupport");
  if (sp) {
    char low[8] = {0};
    for (size_t i = 0; i < sizeof low - 1 && sp->val[i]; i++)
      low[i] = (sp->val[i] >= 'A' && sp->val[i] <= 'Z') ? (char)(sp->val[i] - 'A' + 'a')
                                                          : sp->val[i];
    if (!strcmp(low, "true") && strlen(sp->val) == 4)
      return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, opt_loc(doc, sp),
                      "SparsitySupport = true is not supported (dense layers only)");
  }

  const cfg_option *tl = cfg_find(doc, "network_presets", "TopologyCsvLoc");
  if (tl) {
    const char *b = tl->val, *e = tl->val + strlen(tl->val);
    const char *q1 = memchr(b, '"', (size_t)(e - b));
    if (q1) { /* SCALE-Sim takes the text between the first two quotes */
      const char *q2 = memchr(q1 + 1, '"', (size_t)(e - q1 - 1));
      if (!q2)
        return TPU_FAIL(d, TPU_ERR_INVALID, opt_loc(doc, tl),
                        "TopologyCsvLoc has an opening quote but no closing one");
      b = q1 + 1;
      e = q2;
    }
    if (b < e) {
      c->topology_path = dup_range(b, e);
      if (!c->topology_path) return cfg_nomem(d);
    }
  }
  return TPU_OK;
}

tpu_status tpu_scalesim_config_parse(const char *path, const char *text, size_t len,
                                     tpu_scalesim_config *out, tpu_diag *d) {
  tpu_scalesim_config c;
  memset(&c, 0, sizeof c);
  memset(out, 0, sizeof *out);
  c.path = tpu_strdup(path ? path : "<config>");
  if (!c.path) return cfg_nomem(d);
  cfg_doc doc;
  memset(&doc, 0, sizeof doc);
  doc.path = c.path;
  doc.cur_opt = -1;
  doc.cur_sec = -1;
  cfg_ctx ctx = {&doc, d};
  tpu_status st = for_each_line(text, len, &ctx, cfg_line);
  if (st == TPU_OK) {
    cfg_finish(&doc);
    st = cfg_fill(&doc, &c, d);
  }
  cfg_doc_free(&doc);
  if (st != TPU_OK) {
    tpu_scalesim_config_deinit(&c);
    return st;
  }
  c.dataflow_loc.file = c.path;
  *out = c;
  return TPU_OK;
}

tpu_status tpu_scalesim_config_load(const char *path, tpu_scalesim_config *out, tpu_diag *d) {
  char *text;
  size_t len;
  memset(out, 0, sizeof *out);
  TPU_TRY(read_file(path, &text, &len, d));
  tpu_status st = tpu_scalesim_config_parse(path, text, len, out, d);
  tpu_free(text);
  return st;
}

void tpu_scalesim_config_deinit(tpu_scalesim_config *c) {
  if (!c) return;
  tpu_free(c->run_name);
  tpu_free(c->topology_path);
  tpu_free(c->path);
  memset(c, 0, sizeof *c);
}

tpu_status tpu_scalesim_config_require_ws(const tpu_scalesim_config *c, tpu_diag *d) {
  if (c->dataflow == TPU_SCALESIM_WS) return TPU_OK;
  return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, c->dataflow_loc,
                  "dataflow '%s' is not supported: only ws (weight stationary, the TPU's "
                  "dataflow) is supported",
                  c->dataflow == TPU_SCALESIM_OS ? "os" : "is");
}

/* ---------------------------------------------------------------- topology CSV */

#define MAX_FIELDS 16

typedef struct {
  const char *b, *e; /* stripped field text */
  int col;           /* 1-based column of the field's first character */
} csv_field;

typedef struct {
  tpu_scalesim_topology *t;
  tpu_scalesim_input kind;
  int64_t cap;
  tpu_diag *d;
} topo_ctx;

static tpu_status topo_nomem(tpu_diag *d) {
  return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory reading the topology");
}

static tpu_status field_int(const topo_ctx *ctx, int line, const csv_field *f, const char *what,
                            int64_t *out) {
  tpu_loc loc = {ctx->t->path, line, f->col};
  int64_t v = 0;
  int r = parse_int(f->b, f->e, &v);
  if (r == 1)
    return TPU_FAIL(ctx->d, TPU_ERR_PARSE, loc, "%s must be an integer, got '%.*s'", what,
                    (int)(f->e - f->b), f->b);
  if (r == 2 || v < 1 || v > TPU_SCALESIM_MAX_FIELD)
    return TPU_FAIL(ctx->d, TPU_ERR_INVALID, loc, "%s must be between 1 and %lld, got '%.*s'",
                    what, (long long)TPU_SCALESIM_MAX_FIELD, (int)(f->e - f->b), f->b);
  *out = v;
  return TPU_OK;
}

/* The optional "N:M" sparsity column: SCALE-Sim ignores it unless sparsity is enabled in
 * the configuration (which we refuse), but it must be two integers. */
static tpu_status field_ratio(const topo_ctx *ctx, int line, const csv_field *f) {
  tpu_loc loc = {ctx->t->path, line, f->col};
  const char *colon = memchr(f->b, ':', (size_t)(f->e - f->b));
  int64_t n = 0, m = 0;
  if (!colon || parse_int(f->b, colon, &n) != 0 || parse_int(colon + 1, f->e, &m) != 0)
    return TPU_FAIL(ctx->d, TPU_ERR_PARSE, loc,
                    "expected a sparsity ratio N:M (or nothing) here, got '%.*s'",
                    (int)(f->e - f->b), f->b);
  return TPU_OK;
}

static tpu_status topo_push(topo_ctx *ctx, const char *nb, size_t nlen, const char *suffix,
                            const tpu_scalesim_layer *proto, int line) {
  tpu_scalesim_topology *t = ctx->t;
  if (t->n >= TPU_SCALESIM_MAX_LAYERS) {
    tpu_loc loc = {t->path, line, 1};
    return TPU_FAIL(ctx->d, TPU_ERR_LIMIT, loc, "more than %d layers",
                    TPU_SCALESIM_MAX_LAYERS);
  }
  if (t->n == ctx->cap) {
    int64_t nc = ctx->cap ? ctx->cap * 2 : 16;
    tpu_scalesim_layer *nl = tpu_realloc(t->layers, (size_t)nc * sizeof *nl);
    if (!nl) return topo_nomem(ctx->d);
    t->layers = nl;
    ctx->cap = nc;
  }
  size_t slen = suffix ? strlen(suffix) : 0;
  char *name = tpu_malloc(nlen + slen + 1);
  if (!name) return topo_nomem(ctx->d);
  memcpy(name, nb, nlen);
  if (slen) memcpy(name + nlen, suffix, slen);
  name[nlen + slen] = 0;
  tpu_scalesim_layer *l = &t->layers[t->n++];
  *l = *proto;
  l->name = name;
  return TPU_OK;
}

static tpu_status topo_line(void *vctx, const char *lb, const char *le, int line_no) {
  topo_ctx *ctx = vctx;
  tpu_diag *d = ctx->d;
  if (line_no == 1) return TPU_OK; /* the header, whatever it holds */
  const char *b = lb, *e = le;
  strip(&b, &e);
  if (b == e) return TPU_OK;
  for (const char *c = b; c < e; c++)
    if (*c == 0) {
      tpu_loc loc = {ctx->t->path, line_no, (int)(c - lb) + 1};
      return TPU_FAIL(d, TPU_ERR_PARSE, loc, "NUL byte in a topology file");
    }
  csv_field f[MAX_FIELDS + 1];
  int nf = 0;
  const char *p = b;
  for (;;) {
    const char *q = p;
    while (q < e && *q != ',') q++;
    if (nf == MAX_FIELDS + 1) {
      tpu_loc loc = {ctx->t->path, line_no, (int)(p - lb) + 1};
      return TPU_FAIL(d, TPU_ERR_PARSE, loc, "too many fields in this row");
    }
    const char *fb = p, *fe = q;
    strip(&fb, &fe);
    f[nf].b = fb;
    f[nf].e = fe;
    f[nf].col = (int)((fb < fe ? fb : p) - lb) + 1;
    nf++;
    if (q == e) break;
    p = q + 1;
  }
  /* SCALE-Sim drops the last field: rows are written with a trailing comma. */
  const csv_field dropped = f[--nf];
  const int want = ctx->kind == TPU_SCALESIM_GEMM ? 4 : 8;
  const char *layout = ctx->kind == TPU_SCALESIM_GEMM
                           ? "name, M, N, K,"
                           : "name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                             "Channels, Num Filter, Strides,";
  if (nf < want || nf > want + 1) {
    tpu_loc loc = {ctx->t->path, line_no, nf < want && dropped.b < dropped.e ? dropped.col
                                                                              : (int)(b - lb) + 1};
    if (nf < want && dropped.b < dropped.e)
      return TPU_FAIL(d, TPU_ERR_PARSE, loc,
                      "row must end with a comma: SCALE-Sim drops the last field ('%.*s'), "
                      "leaving %d of the %d fields (%s)",
                      (int)(dropped.e - dropped.b), dropped.b, nf, want, layout);
    return TPU_FAIL(d, TPU_ERR_PARSE, loc, "expected %d fields (%s), got %d", want, layout, nf);
  }
  if (nf == want + 1) TPU_TRY(field_ratio(ctx, line_no, &f[want]));

  tpu_scalesim_layer l;
  memset(&l, 0, sizeof l);
  l.line = line_no;
  tpu_loc rowloc = {ctx->t->path, line_no, (int)(b - lb) + 1};
  if (ctx->kind == TPU_SCALESIM_GEMM) {
    int64_t m, n, k;
    TPU_TRY(field_int(ctx, line_no, &f[1], "M", &m));
    TPU_TRY(field_int(ctx, line_no, &f[2], "N", &n));
    TPU_TRY(field_int(ctx, line_no, &f[3], "K", &k));
    /* SCALE-Sim's own mapping: ifmap M x K, filter 1 x K, 1 channel, N filters, stride 1. */
    l.ifmap_h = m;
    l.ifmap_w = k;
    l.filter_h = 1;
    l.filter_w = k;
    l.channels = 1;
    l.num_filters = n;
    l.stride_h = l.stride_w = 1;
    l.M = m;
    l.K = k;
    l.N = n;
    return topo_push(ctx, f[0].b, (size_t)(f[0].e - f[0].b), NULL, &l, line_no);
  }
  static const char *const names[7] = {"IFMAP Height", "IFMAP Width", "Filter Height",
                                       "Filter Width", "Channels",    "Num Filter",
                                       "Strides"};
  int64_t v[7];
  for (int i = 0; i < 7; i++) TPU_TRY(field_int(ctx, line_no, &f[i + 1], names[i], &v[i]));
  l.ifmap_h = v[0];
  l.ifmap_w = v[1];
  l.filter_h = v[2];
  l.filter_w = v[3];
  l.channels = v[4];
  l.num_filters = v[5];
  l.stride_h = l.stride_w = v[6]; /* SCALE-Sim repeats the stride for the columns */
  if (l.filter_h > l.ifmap_h) {
    tpu_loc loc = {ctx->t->path, line_no, f[3].col};
    return TPU_FAIL(d, TPU_ERR_INVALID, loc, "Filter height cannot be larger than IFMAP height");
  }
  if (l.filter_w > l.ifmap_w) {
    tpu_loc loc = {ctx->t->path, line_no, f[4].col};
    return TPU_FAIL(d, TPU_ERR_INVALID, loc, "Filter width cannot be larger than IFMAP width");
  }
  /* ofmap = ceil((ifmap - filter + stride) / stride) per side, as SCALE-Sim computes it. */
  int64_t oh = (l.ifmap_h - l.filter_h + l.stride_h + l.stride_h - 1) / l.stride_h;
  int64_t ow = (l.ifmap_w - l.filter_w + l.stride_w + l.stride_w - 1) / l.stride_w;
  l.M = oh * ow; /* both below 2^31: no overflow */
  l.N = l.num_filters;
  int depthwise = 0;
  for (const char *c = f[0].b; c + 1 < f[0].e; c++)
    if (c[0] == 'D' && c[1] == 'P') depthwise = 1;
  size_t kk;
  if (!tpu_mul_ok((size_t)l.filter_h, (size_t)l.filter_w, &kk) ||
      !tpu_mul_ok(kk, depthwise ? 1 : (size_t)l.channels, &kk) || kk > ((size_t)1 << 40))
    return TPU_FAIL(d, TPU_ERR_LIMIT, rowloc,
                    "the window Filter Height x Filter Width x Channels is too large");
  l.K = (int64_t)kk;
  if (!depthwise) return topo_push(ctx, f[0].b, (size_t)(f[0].e - f[0].b), NULL, &l, line_no);
  /* Depthwise: one single-channel layer per channel, "<name>Channel_<i>". */
  int64_t nch = l.channels;
  if (nch > TPU_SCALESIM_MAX_LAYERS - ctx->t->n) {
    tpu_loc loc = {ctx->t->path, line_no, f[5].col};
    return TPU_FAIL(d, TPU_ERR_LIMIT, loc,
                    "depthwise layer expands to %lld layers (at most %d in all)", (long long)nch,
                    TPU_SCALESIM_MAX_LAYERS);
  }
  l.channels = 1;
  for (int64_t i = 0; i < nch; i++) {
    char suffix[40];
    snprintf(suffix, sizeof suffix, "Channel_%lld", (long long)i);
    TPU_TRY(topo_push(ctx, f[0].b, (size_t)(f[0].e - f[0].b), suffix, &l, line_no));
  }
  return TPU_OK;
}

tpu_status tpu_scalesim_topology_parse(const char *path, const char *text, size_t len,
                                       tpu_scalesim_input kind, tpu_scalesim_topology *out,
                                       tpu_diag *d) {
  tpu_scalesim_topology t;
  memset(&t, 0, sizeof t);
  memset(out, 0, sizeof *out);
  if (kind != TPU_SCALESIM_CONV && kind != TPU_SCALESIM_GEMM)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "unknown topology kind %d", (int)kind);
  t.path = tpu_strdup(path ? path : "<topology>");
  if (!t.path) return topo_nomem(d);
  topo_ctx ctx = {&t, kind, 0, d};
  tpu_status st = for_each_line(text, len, &ctx, topo_line);
  if (st == TPU_OK && t.n == 0) {
    tpu_loc loc = {t.path, 0, 0};
    st = TPU_FAIL(d, TPU_ERR_INVALID, loc, "no layers (the first line is the header)");
  }
  if (st != TPU_OK) {
    tpu_scalesim_topology_deinit(&t);
    return st;
  }
  *out = t;
  return TPU_OK;
}

tpu_status tpu_scalesim_topology_load(const char *path, tpu_scalesim_input kind,
                                      tpu_scalesim_topology *out, tpu_diag *d) {
  char *text;
  size_t len;
  memset(out, 0, sizeof *out);
  TPU_TRY(read_file(path, &text, &len, d));
  tpu_status st = tpu_scalesim_topology_parse(path, text, len, kind, out, d);
  tpu_free(text);
  return st;
}

void tpu_scalesim_topology_deinit(tpu_scalesim_topology *t) {
  if (!t) return;
  for (int64_t i = 0; i < t->n; i++) tpu_free(t->layers[i].name);
  tpu_free(t->layers);
  tpu_free(t->path);
  memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------------- report */

void tpu_scalesim_row_from_cycles(const tpu_mxu_cycles *c, int64_t R, int64_t C,
                                  tpu_scalesim_row *out) {
  memset(out, 0, sizeof *out);
  out->total_cycles = c->total;
  out->stall_cycles = 0;
  /* SCALE-Sim: (num_compute * 100) / (total_cycles * num_mac_unit) on Python ints, i.e. one
   * correctly rounded division; exact in doubles while both sides stay below 2^53. */
  int64_t tot = c->total > 0 ? c->total : 1;
  const double lim = 9007199254740992.0; /* 2^53 */
  double num = (double)c->mac_ops * 100.0, den = (double)tot * (double)R * (double)C;
  if (num < lim && den < lim)
    out->overall_util_pct = (double)(c->mac_ops * 100) / (double)(tot * R * C);
  else
    out->overall_util_pct = num / den;
  out->mapping_eff_pct = c->mapping_efficiency * 100.0;
  out->compute_util_pct = c->compute_util * 100.0;
}

int tpu_scalesim_format_float(double v, char *buf, size_t n) {
  if (isnan(v)) return snprintf(buf, n, "nan");
  if (isinf(v)) return snprintf(buf, n, v < 0 ? "-inf" : "inf");
  if (v == 0) return snprintf(buf, n, signbit(v) ? "-0.0" : "0.0");
  /* Shortest digits that read back as v. */
  char e[40];
  int prec = 1;
  for (; prec <= 17; prec++) {
    snprintf(e, sizeof e, "%.*e", prec - 1, v);
    if (strtod(e, NULL) == v) break;
  }
  /* e is "[-]d[.ddd]e[+-]XX": pull out the digits and the exponent. */
  char digits[24];
  int nd = 0, neg = 0;
  const char *p = e;
  if (*p == '-') {
    neg = 1;
    p++;
  }
  for (; *p && *p != 'e'; p++)
    if (*p >= '0' && *p <= '9' && nd < (int)sizeof digits - 1) digits[nd++] = *p;
  while (nd > 1 && digits[nd - 1] == '0') nd--; /* %e pads; repr does not */
  digits[nd] = 0;
  int exp10 = *p == 'e' ? atoi(p + 1) : 0;
  int decpt = exp10 + 1; /* value = 0.DIGITS x 10^decpt */
  char out[64];
  int k = 0;
  if (neg) out[k++] = '-';
  if (decpt <= -4 || decpt > 16) { /* Python repr switches to exponent form here */
    out[k++] = digits[0];
    if (nd > 1) {
      out[k++] = '.';
      for (int i = 1; i < nd; i++) out[k++] = digits[i];
    }
    k += snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", exp10 < 0 ? '-' : '+',
                  exp10 < 0 ? -exp10 : exp10);
  } else if (decpt <= 0) {
    out[k++] = '0';
    out[k++] = '.';
    for (int i = 0; i < -decpt; i++) out[k++] = '0';
    for (int i = 0; i < nd; i++) out[k++] = digits[i];
  } else if (decpt >= nd) {
    for (int i = 0; i < nd; i++) out[k++] = digits[i];
    for (int i = nd; i < decpt; i++) out[k++] = '0';
    out[k++] = '.';
    out[k++] = '0';
  } else {
    for (int i = 0; i < decpt; i++) out[k++] = digits[i];
    out[k++] = '.';
    for (int i = decpt; i < nd; i++) out[k++] = digits[i];
  }
  out[k] = 0;
  return snprintf(buf, n, "%s", out);
}

tpu_status tpu_scalesim_report_write(const char *path, const tpu_scalesim_row *rows, int64_t n,
                                     int with_saved, tpu_diag *d) {
  char *tmp;
  FILE *f;
  TPU_TRY(tpu_file_begin(path, &tmp, &f, d));
  /* SCALE-Sim v2's header and row layout: ", " between fields, a trailing comma. */
  fprintf(f, "LayerID, Total Cycles, Stall Cycles, Overall Util %%, Mapping Efficiency %%, "
             "Compute Util %%,%s\n",
          with_saved ? " Cycles Saved," : "");
  for (int64_t i = 0; i < n; i++) {
    char u[3][40];
    tpu_scalesim_format_float(rows[i].overall_util_pct, u[0], sizeof u[0]);
    tpu_scalesim_format_float(rows[i].mapping_eff_pct, u[1], sizeof u[1]);
    tpu_scalesim_format_float(rows[i].compute_util_pct, u[2], sizeof u[2]);
    fprintf(f, "%lld, %lld, %lld, %s, %s, %s,", (long long)i, (long long)rows[i].total_cycles,
            (long long)rows[i].stall_cycles, u[0], u[1], u[2]);
    if (with_saved) fprintf(f, " %lld,", (long long)rows[i].cycles_saved);
    fputc('\n', f);
  }
  return tpu_file_commit(path, tmp, f, 1, d);
}
