/* Typed attribute parsing: turns the attribute text kept on each instruction into the
 * typed fields the verifier and executors read. Unknown attributes stay as text. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hlo/hlo.h"

typedef struct {
  tpu_module *m;
  tpu_instr *in;
  const tpu_attr *a;
  tpu_diag *d;
  /* the instruction's own copies of the views its attributes write (see own_views) */
  tpu_gather_dims *g;
  tpu_scatter_dims *sc;
  tpu_conv_dims *cd;
} actx;

static tpu_status bad(actx *c, const char *what) {
  return TPU_FAIL(c->d, TPU_ERR_PARSE, c->a->loc, "bad value '%s' for attribute '%s': expected %s", c->a->value,
                  c->a->name, what);
}

static tpu_status nomem(actx *c) { return TPU_FAIL(c->d, TPU_ERR_NOMEM, c->a->loc, "out of memory"); }

static int read_i64(const char **s, int64_t *v) {
  const char *p = *s;
  if (!(isdigit((unsigned char)*p) || ((*p == '-' || *p == '+') && isdigit((unsigned char)p[1])))) return 0;
  char *end;
  errno = 0;
  long long x = strtoll(p, &end, 10);
  if (errno) return 0;
  *v = x;
  *s = end;
  return 1;
}

static void skip_sp(const char **s) {
  while (isspace((unsigned char)**s)) (*s)++;
}

static tpu_status parse_int_attr(actx *c, int64_t *out) {
  const char *s = c->a->value;
  if (!read_i64(&s, out) || *s) return bad(c, "an integer");
  return TPU_OK;
}

/* "{1,2,3}" (braces optional for a bare "3"), into an arena array. */
static tpu_status parse_list(actx *c, tpu_i64s *out) {
  const char *s = c->a->value;
  int64_t tmp[TPU_MAX_RANK * 4];
  int n = 0;
  int braced = *s == '{';
  if (braced) s++;
  skip_sp(&s);
  while (*s && *s != '}') {
    int64_t v;
    if (!read_i64(&s, &v)) return bad(c, "a list of integers like {0,1}");
    if (n == (int)(sizeof tmp / sizeof tmp[0])) return TPU_FAIL(c->d, TPU_ERR_LIMIT, c->a->loc, "list too long");
    tmp[n++] = v;
    skip_sp(&s);
    if (*s == ',') s++;
    skip_sp(&s);
  }
  if (braced ? (*s != '}' || s[1]) : *s) return bad(c, "a list of integers like {0,1}");
  out->n = n;
  out->v = tpu_arena_alloc(&c->m->arena, sizeof(int64_t) * (size_t)(n ? n : 1));
  if (!out->v) return nomem(c);
  memcpy(out->v, tmp, sizeof(int64_t) * (size_t)n);
  return TPU_OK;
}

static tpu_status parse_bool(actx *c, int *out) {
  if (!strcmp(c->a->value, "true")) *out = 1;
  else if (!strcmp(c->a->value, "false")) *out = 0;
  else return bad(c, "true or false");
  return TPU_OK;
}

static tpu_status comp_ref(actx *c, const char *name, size_t n, tpu_comp **out) {
  if (n && name[0] == '%') name++, n--;
  *out = tpu_module_find_comp_n(c->m, name, n);
  if (*out) return TPU_OK;
  return TPU_FAIL(c->d, TPU_ERR_INVALID, c->a->loc, "unknown computation '%.*s' in attribute '%s'", (int)n, name,
                  c->a->name);
}

/* One computation reference; rewrites the kept text to the canonical name. */
static tpu_status parse_comp(actx *c, tpu_comp **out) {
  TPU_TRY(comp_ref(c, c->a->value, strlen(c->a->value), out));
  ((tpu_attr *)c->a)->value = (*out)->name;
  return TPU_OK;
}

static tpu_status parse_comp_list(actx *c) {
  const char *s = c->a->value;
  if (*s != '{') return bad(c, "a list of computations like {%a, %b}");
  s++;
  tpu_comp *tmp[64];
  tpu_comp **comps = tmp;
  int n = 0, cap = 64;
  for (;;) {
    skip_sp(&s);
    if (*s == '}') break;
    const char *st = s;
    while (*s && *s != ',' && *s != '}' && !isspace((unsigned char)*s)) s++;
    if (s == st) return bad(c, "a list of computations like {%a, %b}");
    if (n == cap) {
      tpu_comp **nc = tpu_arena_alloc(&c->m->arena, sizeof(tpu_comp *) * (size_t)cap * 2);
      if (!nc) return nomem(c);
      memcpy(nc, comps, sizeof(tpu_comp *) * (size_t)n);
      comps = nc;
      cap *= 2;
    }
    TPU_TRY(comp_ref(c, st, (size_t)(s - st), &comps[n]));
    n++;
    skip_sp(&s);
    if (*s == ',') s++;
  }
  if (s[1]) return bad(c, "a list of computations like {%a, %b}");
  c->in->nbranches = n;
  c->in->branches = tpu_arena_alloc(&c->m->arena, sizeof(tpu_comp *) * (size_t)(n ? n : 1));
  if (!c->in->branches) return nomem(c);
  memcpy(c->in->branches, comps, sizeof(tpu_comp *) * (size_t)n);
  /* Canonical text. */
  size_t len = 3;
  for (int i = 0; i < n; i++) len += strlen(comps[i]->name) + 2;
  char *txt = tpu_arena_alloc(&c->m->arena, len);
  if (!txt) return nomem(c);
  strcpy(txt, "{");
  for (int i = 0; i < n; i++) {
    if (i) strcat(txt, ", ");
    strcat(txt, comps[i]->name);
  }
  strcat(txt, "}");
  ((tpu_attr *)c->a)->value = txt;
  return TPU_OK;
}

/* "{[0:2], [1:5:2]}" */
static tpu_status parse_slice(actx *c) {
  const char *s = c->a->value;
  tpu_slice_dim tmp[TPU_MAX_RANK];
  int n = 0;
  if (*s++ != '{') return bad(c, "slice ranges like {[0:2], [1:5:2]}");
  for (;;) {
    skip_sp(&s);
    if (*s == '}') break;
    if (n == TPU_MAX_RANK) return TPU_FAIL(c->d, TPU_ERR_LIMIT, c->a->loc, "too many slice dimensions");
    tpu_slice_dim sd = {0, 0, 1};
    if (*s++ != '[' || !read_i64(&s, &sd.start) || *s++ != ':' || !read_i64(&s, &sd.limit))
      return bad(c, "slice ranges like {[0:2], [1:5:2]}");
    if (*s == ':') {
      s++;
      if (!read_i64(&s, &sd.stride)) return bad(c, "slice ranges like {[0:2], [1:5:2]}");
    }
    if (*s++ != ']') return bad(c, "slice ranges like {[0:2], [1:5:2]}");
    tmp[n++] = sd;
    skip_sp(&s);
    if (*s == ',') s++;
  }
  if (s[1]) return bad(c, "slice ranges like {[0:2], [1:5:2]}");
  c->in->slice = tpu_arena_alloc(&c->m->arena, sizeof(tpu_slice_dim) * TPU_MAX_RANK);
  if (!c->in->slice) return nomem(c);
  memcpy(c->in->slice, tmp, sizeof(tpu_slice_dim) * (size_t)n);
  c->in->nslice = n;
  return TPU_OK;
}

/* "0_0x1_2_1": per dim lo_hi[_interior], dims separated by 'x'. */
static tpu_status parse_padding(actx *c, const char *s, size_t len, tpu_pad_dim *out, int *n) {
  const char *end = s + len;
  *n = 0;
  while (s < end) {
    if (*n == TPU_MAX_RANK) return TPU_FAIL(c->d, TPU_ERR_LIMIT, c->a->loc, "too many padding dimensions");
    tpu_pad_dim pd = {0, 0, 0};
    if (!read_i64(&s, &pd.lo) || *s++ != '_' || !read_i64(&s, &pd.hi))
      return bad(c, "padding like 0_0x1_1 (low_high[_interior] per dimension)");
    if (s < end && *s == '_') {
      s++;
      if (!read_i64(&s, &pd.interior)) return bad(c, "padding like 0_0x1_1_0");
    }
    out[(*n)++] = pd;
    if (s < end) {
      if (*s != 'x') return bad(c, "padding like 0_0x1_1 (low_high[_interior] per dimension)");
      s++;
    }
  }
  return TPU_OK;
}

/* "2x3" into vals; returns count. */
static int parse_xlist(const char **s, const char *end, int64_t *vals) {
  int n = 0;
  while (*s < end) {
    if (n == TPU_MAX_RANK || !read_i64(s, &vals[n])) return -1;
    n++;
    if (*s < end && **s == 'x') (*s)++;
    else break;
  }
  return n;
}

/* "{size=3x3 stride=2x2 pad=0_1x0_1 lhs_dilate=1x1 rhs_dilate=1x1 rhs_reversal=0x0}" */
static tpu_status parse_window(actx *c) {
  const char *s = c->a->value;
  const char *what = "a window like {size=3x3 stride=2x2 pad=0_1x0_1}";
  if (*s++ != '{') return bad(c, what);
  tpu_window_dim w[TPU_MAX_RANK];
  for (int i = 0; i < TPU_MAX_RANK; i++) {
    w[i] = (tpu_window_dim){0, 1, 0, 0, 1, 1, 0};
  }
  int n = -1;
  for (;;) {
    skip_sp(&s);
    if (*s == '}') break;
    const char *key = s;
    while (*s && *s != '=') s++;
    if (!*s) return bad(c, what);
    size_t klen = (size_t)(s - key);
    s++;
    const char *val = s;
    while (*s && !isspace((unsigned char)*s) && *s != '}') s++;
    const char *vend = s;
    int64_t vals[TPU_MAX_RANK];
    int k;
    if (klen == 3 && !memcmp(key, "pad", 3)) {
      tpu_pad_dim pd[TPU_MAX_RANK];
      TPU_TRY(parse_padding(c, val, (size_t)(vend - val), pd, &k));
      for (int i = 0; i < k; i++) w[i].pad_lo = pd[i].lo, w[i].pad_hi = pd[i].hi;
    } else {
      const char *q = val;
      k = parse_xlist(&q, vend, vals);
      if (k < 0 || q != vend) return bad(c, what);
      for (int i = 0; i < k; i++) {
        if (klen == 4 && !memcmp(key, "size", 4)) w[i].size = vals[i];
        else if (klen == 6 && !memcmp(key, "stride", 6)) w[i].stride = vals[i];
        else if (klen == 10 && !memcmp(key, "lhs_dilate", 10)) w[i].base_dilation = vals[i];
        else if (klen == 10 && !memcmp(key, "rhs_dilate", 10)) w[i].window_dilation = vals[i];
        else if (klen == 12 && !memcmp(key, "rhs_reversal", 12)) w[i].reversal = vals[i] != 0;
        else return TPU_FAIL(c->d, TPU_ERR_PARSE, c->a->loc, "unknown window field '%.*s'", (int)klen, key);
      }
    }
    if (n >= 0 && k != n)
      return TPU_FAIL(c->d, TPU_ERR_INVALID, c->a->loc, "window field '%.*s' has %d dimensions, expected %d", (int)klen, key,
                      k, n);
    n = k;
  }
  if (s[1]) return bad(c, what);
  if (n < 0) n = 0;
  c->in->nwindow = n;
  c->in->window = tpu_arena_alloc(&c->m->arena, sizeof(tpu_window_dim) * (size_t)(n ? n : 1));
  if (!c->in->window) return nomem(c);
  memcpy(c->in->window, w, sizeof(tpu_window_dim) * (size_t)n);
  for (int i = 0; i < n; i++)
    if (w[i].size <= 0 || w[i].stride <= 0 || w[i].base_dilation <= 0 || w[i].window_dilation <= 0)
      return TPU_FAIL(c->d, TPU_ERR_INVALID, c->a->loc, "window dimension %d has a non-positive size, stride or dilation", i);
  return TPU_OK;
}

/* "b01f_01io->b01f" */
static tpu_status parse_dim_labels(actx *c) {
  const char *s = c->a->value;
  const char *what = "convolution labels like b01f_01io->b01f";
  const char *us = strchr(s, '_'), *ar = strstr(s, "->");
  if (!us || !ar || ar < us) return bad(c, what);
  const char *parts[3] = {s, us + 1, ar + 2};
  size_t lens[3] = {(size_t)(us - s), (size_t)(ar - us - 1), strlen(ar + 2)};
  const char *roles[3] = {"bf", "io", "bf"};
  tpu_conv_dims *cd = c->cd;
  int nsp = -1;
  for (int p = 0; p < 3; p++) {
    int64_t r0 = -1, r1 = -1, sp[TPU_MAX_RANK];
    int nspatial = 0;
    for (int i = 0; i < TPU_MAX_RANK; i++) sp[i] = -1;
    if (lens[p] > TPU_MAX_RANK) return bad(c, what);
    for (size_t i = 0; i < lens[p]; i++) {
      char ch = parts[p][i];
      if (ch == roles[p][0] && r0 < 0) r0 = (int64_t)i;
      else if (ch == roles[p][1] && r1 < 0) r1 = (int64_t)i;
      else if (isdigit((unsigned char)ch) && ch - '0' < TPU_MAX_RANK && sp[ch - '0'] < 0) sp[ch - '0'] = (int64_t)i, nspatial++;
      else return bad(c, what);
    }
    if (r0 < 0 || r1 < 0) return bad(c, what);
    for (int i = 0; i < nspatial; i++)
      if (sp[i] < 0) return bad(c, what);
    if (nsp >= 0 && nspatial != nsp) return bad(c, what);
    nsp = nspatial;
    int64_t *dst = p == 0 ? cd->in_spatial : p == 1 ? cd->k_spatial : cd->out_spatial;
    memcpy(dst, sp, sizeof(int64_t) * (size_t)nspatial);
    if (p == 0) cd->in_batch = r0, cd->in_feature = r1;
    else if (p == 1) cd->k_in = r0, cd->k_out = r1;
    else cd->out_batch = r0, cd->out_feature = r1;
  }
  cd->nspatial = nsp;
  c->in->has_conv_dims = 1;
  return TPU_OK;
}

static tpu_status parse_direction(actx *c) {
  static const char *names[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  for (int i = 0; i < 6; i++)
    if (!strcmp(c->a->value, names[i])) {
      c->in->direction = (tpu_cmp_dir)i;
      return TPU_OK;
    }
  return bad(c, "one of EQ, NE, LT, LE, GT, GE");
}

static tpu_status parse_cmp_type(actx *c) {
  static const char *names[] = {"", "FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED"};
  for (int i = 1; i < 5; i++)
    if (!strcmp(c->a->value, names[i])) {
      c->in->cmp_type = (tpu_cmp_type)i;
      return TPU_OK;
    }
  return bad(c, "one of FLOAT, TOTALORDER, SIGNED, UNSIGNED");
}

/* "{highest,default}" — case-insensitive; DEFAULT/HIGH/HIGHEST (PACKED_NIBBLE etc. are default). */
static tpu_status parse_precision(actx *c) {
  const char *s = c->a->value;
  if (*s++ != '{') return bad(c, "a precision list like {highest,highest}");
  for (int k = 0; k < 2; k++) {
    skip_sp(&s);
    const char *st = s;
    while (isalpha((unsigned char)*s) || *s == '_') s++;
    size_t n = (size_t)(s - st);
    char w[16] = {0};
    for (size_t i = 0; i < n && i < 15; i++) w[i] = (char)tolower((unsigned char)st[i]);
    c->in->precision[k] = !strcmp(w, "highest") ? TPU_PREC_CFG_HIGHEST : !strcmp(w, "high") ? TPU_PREC_CFG_HIGH
                                                                                            : TPU_PREC_CFG_DEFAULT;
    if (!n) return bad(c, "a precision list like {highest,highest}");
    skip_sp(&s);
    if (*s == ',') s++;
  }
  return TPU_OK;
}

static tpu_status parse_rng_alg(actx *c) {
  const char *v = c->a->value;
  if (!strcmp(v, "rng_default")) c->in->rng_algorithm = TPU_RNG_DEFAULT;
  else if (!strcmp(v, "rng_three_fry")) c->in->rng_algorithm = TPU_RNG_THREEFRY;
  else if (!strcmp(v, "rng_philox")) c->in->rng_algorithm = TPU_RNG_PHILOX;
  else return bad(c, "rng_default, rng_three_fry or rng_philox");
  return TPU_OK;
}

static tpu_status parse_fft_type(actx *c) {
  static const char *names[] = {"FFT", "IFFT", "RFFT", "IRFFT"};
  for (int i = 0; i < 4; i++)
    if (!strcmp(c->a->value, names[i])) {
      c->in->fft_type = (tpu_fft_type)i;
      return TPU_OK;
    }
  return bad(c, "one of FFT, IFFT, RFFT, IRFFT");
}

static const char *const k_gather_attrs[] = {"offset_dims", "collapsed_slice_dims", "start_index_map",
                                             "operand_batching_dims", "start_indices_batching_dims", "slice_sizes",
                                             "index_vector_dim"};
static const char *const k_scatter_attrs[] = {"update_window_dims", "inserted_window_dims",
                                              "scatter_dims_to_operand_dims", "input_batching_dims",
                                              "scatter_indices_batching_dims", "index_vector_dim"};

static int names_one_of(const char *n, const char *const *v, size_t k) {
  for (size_t i = 0; i < k; i++)
    if (!strcmp(n, v[i])) return 1;
  return 0;
}

/* A view (gather, scatter, convolution) is shared by an instruction's clones
 * (tpu_build_clone_instr copies the pointer): before its attributes write one, the
 * instruction gets its own copy, holding what the shared one held (re-deriving overwrites
 * only the fields its attributes name). */
static void *own_copy(tpu_module *m, const void *v, size_t n) {
  void *p = tpu_arena_alloc(&m->arena, n);
  if (p) memcpy(p, v, n);
  return p;
}

static tpu_status own_views(tpu_module *m, tpu_instr *in, actx *c) {
  int g = 0, sc = 0, cd = 0;
  for (int i = 0; i < in->nattrs; i++) {
    const char *n = in->attrs[i].name;
    g |= names_one_of(n, k_gather_attrs, sizeof k_gather_attrs / sizeof *k_gather_attrs);
    sc |= names_one_of(n, k_scatter_attrs, sizeof k_scatter_attrs / sizeof *k_scatter_attrs);
    cd |= !strcmp(n, "dim_labels");
  }
  if (g && !(c->g = own_copy(m, in->gather, sizeof *c->g))) return nomem(c);
  if (sc && !(c->sc = own_copy(m, in->scatter, sizeof *c->sc))) return nomem(c);
  if (cd && !(c->cd = own_copy(m, in->conv, sizeof *c->cd))) return nomem(c);
  if (c->g) in->gather = c->g;
  if (c->sc) in->scatter = c->sc;
  if (c->cd) in->conv = c->cd;
  return TPU_OK;
}

tpu_status tpu__hlo_parse_attrs(tpu_module *m, tpu_instr *in, tpu_diag *d) {
  actx views = {m, in, in->nattrs ? &in->attrs[0] : NULL, d, NULL, NULL, NULL};
  TPU_TRY(own_views(m, in, &views));
  for (int i = 0; i < in->nattrs; i++) {
    actx c = views;
    c.a = &in->attrs[i];
    const char *n = in->attrs[i].name;
    tpu_status st = TPU_OK;
    int64_t v;
#define IS(x) (!strcmp(n, x))
    if (IS("dimensions")) st = parse_list(&c, &in->dimensions);
    else if (IS("index")) st = parse_int_attr(&c, &in->index);
    else if (IS("iota_dimension")) st = parse_int_attr(&c, &in->iota_dimension);
    else if (IS("slice")) st = parse_slice(&c);
    else if (IS("padding") && in->op == TPU_OP_PAD) {
      tpu_pad_dim pd[TPU_MAX_RANK];
      int k;
      st = parse_padding(&c, c.a->value, strlen(c.a->value), pd, &k);
      if (st == TPU_OK) {
        in->padding = tpu_arena_alloc(&m->arena, sizeof(tpu_pad_dim) * (size_t)(k ? k : 1));
        if (!in->padding) return nomem(&c);
        memcpy(in->padding, pd, sizeof(tpu_pad_dim) * (size_t)k);
        in->npadding = k;
      }
    } else if (IS("window")) st = parse_window(&c);
    else if (IS("dynamic_slice_sizes")) st = parse_list(&c, &in->dynamic_slice_sizes);
    else if (IS("lhs_batch_dims")) st = parse_list(&c, &in->dot.lhs_batch);
    else if (IS("rhs_batch_dims")) st = parse_list(&c, &in->dot.rhs_batch);
    else if (IS("lhs_contracting_dims")) st = parse_list(&c, &in->dot.lhs_contract);
    else if (IS("rhs_contracting_dims")) st = parse_list(&c, &in->dot.rhs_contract);
    else if (IS("offset_dims")) st = parse_list(&c, &c.g->offset_dims);
    else if (IS("collapsed_slice_dims")) st = parse_list(&c, &c.g->collapsed_slice_dims);
    else if (IS("start_index_map")) st = parse_list(&c, &c.g->start_index_map);
    else if (IS("operand_batching_dims")) st = parse_list(&c, &c.g->operand_batching_dims);
    else if (IS("start_indices_batching_dims")) st = parse_list(&c, &c.g->start_indices_batching_dims);
    else if (IS("slice_sizes")) st = parse_list(&c, &c.g->slice_sizes);
    else if (IS("index_vector_dim")) {
      st = parse_int_attr(&c, &v);
      c.g->index_vector_dim = c.sc->index_vector_dim = v;
    } else if (IS("update_window_dims")) st = parse_list(&c, &c.sc->update_window_dims);
    else if (IS("inserted_window_dims")) st = parse_list(&c, &c.sc->inserted_window_dims);
    else if (IS("scatter_dims_to_operand_dims")) st = parse_list(&c, &c.sc->scatter_dims_to_operand_dims);
    else if (IS("input_batching_dims")) st = parse_list(&c, &c.sc->input_batching_dims);
    else if (IS("scatter_indices_batching_dims")) st = parse_list(&c, &c.sc->scatter_indices_batching_dims);
    else if (IS("dim_labels")) st = parse_dim_labels(&c);
    else if (IS("feature_group_count")) st = parse_int_attr(&c, &in->feature_group_count);
    else if (IS("batch_group_count")) st = parse_int_attr(&c, &in->batch_group_count);
    else if (IS("direction")) st = parse_direction(&c);
    else if (IS("type") && in->op == TPU_OP_COMPARE) st = parse_cmp_type(&c);
    else if (IS("operand_precision")) st = parse_precision(&c);
    else if (IS("algorithm") && in->op == TPU_OP_RNG_BIT_GENERATOR) st = parse_rng_alg(&c);
    else if (IS("k") && in->op == TPU_OP_TOPK) st = parse_int_attr(&c, &in->k);
    else if (IS("fft_type")) st = parse_fft_type(&c);
    else if (IS("fft_length")) st = parse_list(&c, &in->fft_length);
    else if (IS("largest")) st = parse_bool(&c, &in->largest);
    else if (IS("is_stable")) st = parse_bool(&c, &in->is_stable);
    else if (IS("indices_are_sorted")) st = parse_bool(&c, &in->indices_are_sorted);
    else if (IS("unique_indices")) st = parse_bool(&c, &in->unique_indices);
    else if (IS("exponent_bits")) {
      st = parse_int_attr(&c, &v);
      in->exponent_bits = (int)v;
    } else if (IS("mantissa_bits")) {
      st = parse_int_attr(&c, &v);
      in->mantissa_bits = (int)v;
    } else if (IS("to_apply")) st = parse_comp(&c, &in->to_apply);
    else if (IS("condition")) st = parse_comp(&c, &in->condition);
    else if (IS("body")) st = parse_comp(&c, &in->body);
    else if (IS("select")) st = parse_comp(&c, &in->select);
    else if (IS("scatter") && in->op == TPU_OP_SELECT_AND_SCATTER) st = parse_comp(&c, &in->scatter_comp);
    else if (IS("calls") && in->op == TPU_OP_FUSION) st = parse_comp(&c, &in->calls);
    else if (IS("true_computation") || IS("false_computation")) {
      if (in->branches && !in->pred_branches)
        return TPU_FAIL(d, TPU_ERR_INVALID, c.a->loc,
                        "conditional gives both branch_computations and true_computation/false_computation");
      if (!in->branches) {
        in->branches = tpu_arena_alloc(&m->arena, sizeof(tpu_comp *) * 2);
        if (!in->branches) return nomem(&c);
        in->nbranches = 2;
        in->pred_branches = 1;
      }
      /* Predicated form: branch 0 runs when the predicate is true. */
      st = parse_comp(&c, &in->branches[IS("true_computation") ? 0 : 1]);
    } else if (IS("branch_computations")) {
      if (in->branches)
        return TPU_FAIL(d, TPU_ERR_INVALID, c.a->loc,
                        "conditional gives both branch_computations and true_computation/false_computation");
      st = parse_comp_list(&c);
    }
#undef IS
    if (st != TPU_OK) return st;
  }
  return TPU_OK;
}
