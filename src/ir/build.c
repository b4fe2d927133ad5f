/* IR mutation for compiler passes: creation, cloning, use replacement, dead code, finish. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "hlo/hlo.h"
#include "ir/build.h"
#include "ir/custom_call.h"

static tpu_status nomem(tpu_builder *b) {
  return TPU_FAIL(b->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory while rewriting the module");
}

/* ---- The name set ---- */

static size_t hash_str(const char *s) {
  size_t h = 1469598103934665603u;
  while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211u;
  return h;
}

static int name_taken(const tpu_builder *b, const char *s) {
  size_t mask = b->capnames - 1;
  for (size_t h = hash_str(s) & mask; b->names[h]; h = (h + 1) & mask)
    if (!strcmp(b->names[h], s)) return 1;
  return 0;
}

static void name_put_raw(const char **slots, size_t cap, const char *s) {
  size_t mask = cap - 1, h = hash_str(s) & mask;
  while (slots[h]) {
    if (!strcmp(slots[h], s)) return;
    h = (h + 1) & mask;
  }
  slots[h] = s;
}

static tpu_status name_add(tpu_builder *b, const char *s) {
  if ((b->nnames + 1) * 2 > b->capnames) {
    size_t cap = b->capnames ? b->capnames * 2 : 256;
    const char **slots = tpu_calloc(cap, sizeof *slots);
    if (!slots) return nomem(b);
    for (size_t i = 0; i < b->capnames; i++)
      if (b->names[i]) name_put_raw(slots, cap, b->names[i]);
    tpu_free((void *)b->names);
    b->names = slots;
    b->capnames = cap;
  }
  name_put_raw(b->names, b->capnames, s);
  b->nnames++;
  return TPU_OK;
}

/* Length of s without a trailing ".digits" (XLA's unique-id suffix). */
static size_t base_len(const char *s) {
  size_t n = strlen(s), k = n;
  while (k > 0 && s[k - 1] >= '0' && s[k - 1] <= '9') k--;
  if (k < n && k > 1 && s[k - 1] == '.') return k - 1;
  return n;
}

/* The largest ".N" suffix in use, so fresh suffixes rarely collide. */
static void note_suffix(tpu_builder *b, const char *s) {
  size_t bl = base_len(s);
  if (bl < strlen(s)) {
    long v = strtol(s + bl + 1, NULL, 10);
    if (v > b->next_suffix) b->next_suffix = v;
  }
}

tpu_status tpu_builder_init(tpu_builder *b, tpu_module *m, tpu_diag *d) {
  memset(b, 0, sizeof *b);
  b->m = m;
  b->d = d;
  for (int i = 0; i < m->ncomps; i++) {
    tpu_comp *c = m->comps[i];
    tpu_status st = name_add(b, c->name);
    for (int k = 0; st == TPU_OK && k < c->ninstrs; k++) {
      st = name_add(b, c->instrs[k]->name);
      note_suffix(b, c->instrs[k]->name);
    }
    if (st != TPU_OK) {
      tpu_builder_deinit(b);
      return st;
    }
    note_suffix(b, c->name);
  }
  return TPU_OK;
}

void tpu_builder_deinit(tpu_builder *b) {
  tpu_free((void *)b->names);
  tpu_free(b->capcomps);
  tpu_free(b->caps);
  b->names = NULL;
  b->capcomps = NULL;
  b->caps = NULL;
  b->nnames = b->capnames = 0;
  b->ncaps = b->capcaps = 0;
}

tpu_status tpu_build_name(tpu_builder *b, const char *hint, const char **out) {
  char buf[512];
  const char *pick = hint;
  if (b->capnames && name_taken(b, hint)) {
    size_t bl = base_len(hint);
    if (bl > 400) bl = 400;
    do {
      snprintf(buf, sizeof buf, "%.*s.%ld", (int)bl, hint, ++b->next_suffix);
    } while (name_taken(b, buf));
    pick = buf;
  }
  char *s = tpu_arena_strdup(&b->m->arena, pick);
  if (!s) return nomem(b);
  TPU_TRY(name_add(b, s));
  *out = s;
  return TPU_OK;
}

/* ---- Appending to a computation ---- */

static int *cap_slot(tpu_builder *b, const tpu_comp *c) {
  for (int i = b->ncaps - 1; i >= 0; i--)
    if (b->capcomps[i] == c) return &b->caps[i];
  return NULL;
}

static tpu_status comp_append(tpu_builder *b, tpu_comp *c, tpu_instr *in) {
  int *cap = cap_slot(b, c);
  if (!cap) {
    if (b->ncaps == b->capcaps) {
      int nc = b->capcaps ? b->capcaps * 2 : 16;
      tpu_comp **ncomps = tpu_realloc(b->capcomps, sizeof *ncomps * (size_t)nc);
      if (!ncomps) return nomem(b);
      b->capcomps = ncomps;
      int *ncap = tpu_realloc(b->caps, sizeof *ncap * (size_t)nc);
      if (!ncap) return nomem(b);
      b->caps = ncap;
      b->capcaps = nc;
    }
    b->capcomps[b->ncaps] = c;
    b->caps[b->ncaps] = c->ninstrs; /* the parser's arrays are exactly full */
    cap = &b->caps[b->ncaps++];
  }
  if (c->ninstrs == *cap) {
    int nc = *cap < 8 ? 16 : *cap * 2;
    tpu_instr **v = tpu_arena_alloc(&b->m->arena, sizeof *v * (size_t)nc);
    if (!v) return nomem(b);
    if (c->ninstrs) memcpy(v, c->instrs, sizeof *v * (size_t)c->ninstrs);
    c->instrs = v;
    *cap = nc;
  }
  in->id = c->ninstrs;
  c->instrs[c->ninstrs++] = in;
  in->parent = c;
  return TPU_OK;
}

static tpu_instr *new_instr(tpu_builder *b) {
  tpu_instr *in = tpu_arena_alloc(&b->m->arena, sizeof *in);
  if (!in) return NULL;
  tpu_instr_init(in);
  return in;
}

tpu_status tpu_build_instr(tpu_builder *b, tpu_comp *c, tpu_opcode op, const char *name_hint, const tpu_shape *shape,
                           tpu_instr *const *operands, int noperands, tpu_loc loc, tpu_instr **out) {
  tpu_instr *in = new_instr(b);
  if (!in) return nomem(b);
  in->op = op;
  in->shape = *shape;
  in->loc = loc;
  in->noperands = noperands;
  in->operands = tpu_arena_alloc(&b->m->arena, sizeof(tpu_instr *) * (size_t)(noperands ? noperands : 1));
  if (!in->operands) return nomem(b);
  if (noperands) memcpy(in->operands, operands, sizeof(tpu_instr *) * (size_t)noperands);
  TPU_TRY(tpu_build_name(b, name_hint, &in->name));
  TPU_TRY(comp_append(b, c, in));
  *out = in;
  return TPU_OK;
}

tpu_status tpu_build_param(tpu_builder *b, tpu_comp *c, int64_t index, const char *name_hint, const tpu_shape *shape,
                           tpu_instr **out) {
  TPU_TRY(tpu_build_instr(b, c, TPU_OP_PARAMETER, name_hint, shape, NULL, 0, tpu_noloc(), out));
  (*out)->index = index;
  return TPU_OK;
}

tpu_status tpu_build_constant(tpu_builder *b, tpu_comp *c, const char *name_hint, tpu_tensor *value,
                              const tpu_shape *like, tpu_instr **out) {
  tpu_module *m = b->m;
  tpu_tensor *lit = tpu_malloc(sizeof *lit);
  if (!lit) {
    tpu_tensor_free(value);
    return nomem(b);
  }
  *lit = *value;
  memset(value, 0, sizeof *value);
  if (m->nliterals == m->capliterals) {
    int cap = m->capliterals ? m->capliterals * 2 : 16;
    tpu_tensor **nl = tpu_realloc(m->literals, sizeof *nl * (size_t)cap);
    if (!nl) {
      tpu_tensor_free(lit);
      tpu_free(lit);
      return nomem(b);
    }
    m->literals = nl;
    m->capliterals = cap;
  }
  m->literals[m->nliterals++] = lit;
  tpu_shape sh;
  memset(&sh, 0, sizeof sh);
  sh.dtype = lit->dtype;
  sh.rank = lit->rank;
  memcpy(sh.dims, lit->dims, sizeof(int64_t) * (size_t)lit->rank);
  if (like && like->has_layout && like->rank == sh.rank) {
    sh.has_layout = 1;
    memcpy(sh.minor_to_major, like->minor_to_major, sizeof sh.minor_to_major);
    sh.layout_tail = like->layout_tail;
  }
  TPU_TRY(tpu_build_instr(b, c, TPU_OP_CONSTANT, name_hint, &sh, NULL, 0, tpu_noloc(), out));
  (*out)->literal = lit;
  return TPU_OK;
}

tpu_status tpu_build_set_attr(tpu_builder *b, tpu_instr *in, const char *name, const char *value) {
  char *v = tpu_arena_strdup(&b->m->arena, value);
  if (!v) return nomem(b);
  int k = 0;
  while (k < in->nattrs && strcmp(in->attrs[k].name, name)) k++;
  if (k == in->nattrs) {
    tpu_attr *na = tpu_arena_alloc(&b->m->arena, sizeof *na * (size_t)(in->nattrs + 1));
    char *nm = tpu_arena_strdup(&b->m->arena, name);
    if (!na || !nm) return nomem(b);
    if (in->nattrs) memcpy(na, in->attrs, sizeof *na * (size_t)in->nattrs);
    na[k].name = nm;
    na[k].loc = in->loc;
    in->attrs = na;
    in->nattrs++;
  }
  in->attrs[k].value = v;
  return tpu__hlo_parse_attrs(b->m, in, b->d);
}

tpu_status tpu_build_clone_instr(tpu_builder *b, tpu_comp *c, const tpu_instr *src, tpu_instr *const *operands,
                                 tpu_instr **out) {
  tpu_instr *in = new_instr(b);
  if (!in) return nomem(b);
  *in = *src;
  in->is_root = 0;
  in->operands = tpu_arena_alloc(&b->m->arena, sizeof(tpu_instr *) * (size_t)(src->noperands ? src->noperands : 1));
  in->attrs = tpu_arena_alloc(&b->m->arena, sizeof(tpu_attr) * (size_t)(src->nattrs ? src->nattrs : 1));
  if (!in->operands || !in->attrs) return nomem(b);
  if (src->noperands) memcpy(in->operands, operands, sizeof(tpu_instr *) * (size_t)src->noperands);
  if (src->nattrs) memcpy(in->attrs, src->attrs, sizeof(tpu_attr) * (size_t)src->nattrs);
  if (src->nbranches) {
    /* Own copy: re-deriving attributes writes into this array. */
    in->branches = tpu_arena_alloc(&b->m->arena, sizeof(tpu_comp *) * (size_t)src->nbranches);
    if (!in->branches) return nomem(b);
    memcpy(in->branches, src->branches, sizeof(tpu_comp *) * (size_t)src->nbranches);
  }
  if (!in->src_name) in->src_name = src->name;
  TPU_TRY(tpu_build_name(b, src->name, &in->name));
  TPU_TRY(comp_append(b, c, in));
  *out = in;
  return TPU_OK;
}

/* ---- Computations ---- */

tpu_status tpu_build_comp(tpu_builder *b, const char *hint, const tpu_comp *before, tpu_comp **out) {
  tpu_module *m = b->m;
  tpu_comp *c = tpu_arena_alloc(&m->arena, sizeof *c);
  if (!c) return nomem(b);
  TPU_TRY(tpu_build_name(b, hint, &c->name));
  c->module = m;
  c->loc = tpu_loc_at(m->file, 0, 0);
  int cap = b->capmcomps ? b->capmcomps : m->ncomps;
  if (m->ncomps == cap) {
    int nc = cap < 8 ? 16 : cap * 2;
    tpu_comp **v = tpu_arena_alloc(&m->arena, sizeof *v * (size_t)nc);
    if (!v) return nomem(b);
    if (m->ncomps) memcpy(v, m->comps, sizeof *v * (size_t)m->ncomps);
    m->comps = v;
    b->capmcomps = nc;
  }
  int pos = m->ncomps;
  for (int i = 0; i < m->ncomps; i++)
    if (m->comps[i] == before) pos = i;
  memmove(&m->comps[pos + 1], &m->comps[pos], sizeof(tpu_comp *) * (size_t)(m->ncomps - pos));
  m->comps[pos] = c;
  m->ncomps++;
  TPU_TRY(tpu_module_index_comps(m, b->d));
  *out = c;
  return TPU_OK;
}

tpu_status tpu_build_scalar_comp(tpu_builder *b, const char *hint, tpu_opcode op, tpu_dtype t, const tpu_comp *before,
                                 tpu_comp **out) {
  tpu_comp *c;
  TPU_TRY(tpu_build_comp(b, hint, before, &c));
  tpu_shape sc;
  memset(&sc, 0, sizeof sc);
  sc.dtype = t;
  tpu_instr *p[2], *r;
  TPU_TRY(tpu_build_param(b, c, 0, "a", &sc, &p[0]));
  TPU_TRY(tpu_build_param(b, c, 1, "b", &sc, &p[1]));
  TPU_TRY(tpu_build_instr(b, c, op, "r", &sc, p, 2, tpu_noloc(), &r));
  tpu_build_set_root(c, r);
  TPU_TRY(tpu_build_finish(b, c));
  *out = c;
  return TPU_OK;
}

tpu_status tpu_build_clone_comp(tpu_builder *b, const tpu_comp *src, const char *hint, const tpu_comp *before,
                                tpu_comp **out) {
  tpu_comp *c;
  TPU_TRY(tpu_build_comp(b, hint, before, &c));
  tpu_instr **map = tpu_calloc((size_t)src->ninstrs, sizeof *map);
  tpu_instr **ops = tpu_calloc((size_t)src->ninstrs + 1, sizeof *ops);
  tpu_status st = map && ops ? TPU_OK : nomem(b);
  int opcap = src->ninstrs + 1;
  /* src->instrs is operands-first (parser input or a finished computation) except in
   * hand-written text; walk in `order`, which always is. */
  for (int i = 0; st == TPU_OK && i < src->norder; i++) {
    const tpu_instr *s = src->order[i];
    if (s->noperands > opcap) {
      tpu_instr **nv = tpu_realloc(ops, sizeof *ops * (size_t)s->noperands);
      if (!nv) {
        st = nomem(b);
        break;
      }
      ops = nv;
      opcap = s->noperands;
    }
    for (int k = 0; k < s->noperands; k++) ops[k] = map[s->operands[k]->id];
    st = tpu_build_clone_instr(b, c, s, ops, &map[s->id]);
  }
  if (st == TPU_OK) {
    c->root = map[src->root->id];
    st = tpu_build_finish(b, c);
  }
  tpu_free(map);
  tpu_free(ops);
  if (st == TPU_OK) *out = c;
  return st;
}

tpu_status tpu_build_instr_like(tpu_builder *b, tpu_comp *c, const tpu_instr *like, tpu_opcode op, const char *name_hint,
                                const tpu_shape *shape, tpu_instr *const *operands, int noperands, tpu_instr **out) {
  TPU_TRY(tpu_build_instr(b, c, op, name_hint, shape, operands, noperands, like->loc, out));
  for (int i = 0; i < like->nattrs; i++)
    if (!strcmp(like->attrs[i].name, "metadata")) TPU_TRY(tpu_build_set_attr(b, *out, "metadata", like->attrs[i].value));
  return TPU_OK;
}

tpu_shape tpu_build_shape(tpu_dtype t, int rank, const int64_t *dims) {
  tpu_shape s;
  memset(&s, 0, sizeof s);
  s.dtype = t;
  s.rank = rank;
  for (int i = 0; i < rank; i++) s.dims[i] = dims[i];
  return s;
}

const char *tpu_dims_text(char *buf, size_t n, const int64_t *v, int k) {
  size_t at = (size_t)snprintf(buf, n, "{");
  for (int i = 0; i < k && at < n; i++) at += (size_t)snprintf(buf + at, n - at, i ? ",%lld" : "%lld", (long long)v[i]);
  if (at < n) snprintf(buf + at, n - at, "}");
  return buf;
}

int tpu_build_replace_uses(tpu_comp *c, tpu_instr *old, tpu_instr *repl) {
  int n = 0;
  for (int i = 0; i < c->ninstrs; i++) {
    tpu_instr *in = c->instrs[i];
    for (int k = 0; k < in->noperands; k++)
      if (in->operands[k] == old) {
        in->operands[k] = repl;
        n++;
      }
  }
  if (c->root == old) {
    c->root = repl;
    n++;
  }
  return n;
}

static tpu_instr *forwarded(const tpu_comp *c, tpu_instr *const *fwd, int n, tpu_instr *x) {
  for (int hops = 0; hops <= n; hops++) {
    if (x->id < 0 || x->id >= n || c->instrs[x->id] != x || !fwd[x->id]) return x;
    x = fwd[x->id];
  }
  return x; /* a cycle of replacements is a pass bug; finish reports what it leaves */
}

void tpu_build_forward(tpu_comp *c, tpu_instr *const *fwd, int n) {
  for (int i = 0; i < c->ninstrs; i++) {
    tpu_instr *in = c->instrs[i];
    for (int k = 0; k < in->noperands; k++) in->operands[k] = forwarded(c, fwd, n, in->operands[k]);
  }
  c->root = forwarded(c, fwd, n, c->root);
}

void tpu_build_set_root(tpu_comp *c, tpu_instr *root) { c->root = root; }

int tpu_build_callees(const tpu_instr *in, tpu_comp **out) {
  int n = 0;
  tpu_comp *one[6] = {in->to_apply, in->condition, in->body, in->select, in->scatter_comp, in->calls};
  for (int i = 0; i < 6; i++)
    if (one[i]) out[n++] = one[i];
  for (int i = 0; i < in->nbranches; i++)
    if (in->branches[i]) out[n++] = in->branches[i];
  return n;
}

int tpu_build_callers(const tpu_module *m, const tpu_comp *b) {
  int n = 0;
  for (int c = 0; c < m->ncomps; c++)
    for (int i = 0; i < m->comps[c]->ninstrs; i++) {
      const tpu_instr *in = m->comps[c]->instrs[i];
      const tpu_comp *one[6] = {in->to_apply, in->condition, in->body, in->select, in->scatter_comp, in->calls};
      for (int k = 0; k < 6; k++) n += one[k] == b;
      for (int k = 0; k < in->nbranches; k++) n += in->branches[k] == b;
    }
  return n;
}

/* ---- Finishing: order, ids, params, root flags ---- */

/* Iterative post-order DFS from `start` over operands (in operand order), appending to
 * out[*nout]. state: 0 new, 1 on the stack, 2 done. Returns 0 on a cycle. */
static int dfs_post(tpu_instr *const *instrs, int start, unsigned char *state, int *stack, tpu_instr **out, int *nout) {
  if (state[start]) return 1;
  int sp = 0;
  stack[sp++] = start;
  stack[sp++] = 0;
  state[start] = 1;
  while (sp) {
    int id = stack[sp - 2], k = stack[sp - 1];
    tpu_instr *in = instrs[id];
    if (k < in->noperands) {
      stack[sp - 1] = k + 1;
      int o = in->operands[k]->id;
      if (state[o] == 1) return 0;
      if (state[o] == 0) {
        state[o] = 1;
        stack[sp++] = o;
        stack[sp++] = 0;
      }
    } else {
      state[id] = 2;
      out[(*nout)++] = in;
      sp -= 2;
    }
  }
  return 1;
}

tpu_status tpu_build_finish(tpu_builder *b, tpu_comp *c) {
  int n = c->ninstrs;
  if (!c->root) return TPU_FAIL(b->d, TPU_ERR_INVALID, c->loc, "computation '%s' has no root after a rewrite", c->name);
  for (int i = 0; i < n; i++) c->instrs[i]->id = i;
  for (int i = 0; i < n; i++) {
    tpu_instr *in = c->instrs[i];
    for (int k = 0; k < in->noperands; k++) {
      tpu_instr *o = in->operands[k];
      if (o->parent != c || o->id < 0 || o->id >= n || c->instrs[o->id] != o)
        return TPU_FAIL(b->d, TPU_ERR_INVALID, in->loc, "'%s' in '%s' uses '%s', which is not in the computation",
                        in->name, c->name, o->name);
    }
  }
  if (c->root->parent != c || c->root->id >= n || c->instrs[c->root->id] != c->root)
    return TPU_FAIL(b->d, TPU_ERR_INVALID, c->loc, "the root of '%s' is not in the computation", c->name);
  unsigned char *state = tpu_calloc((size_t)n + 1, 1);
  int *stack = tpu_malloc(sizeof(int) * ((size_t)n * 2 + 2));
  tpu_instr **sorted = tpu_malloc(sizeof *sorted * ((size_t)n + 1));
  tpu_instr **order = tpu_arena_alloc(&b->m->arena, sizeof *order * ((size_t)n + 1));
  int nparams = 0;
  for (int i = 0; i < n; i++)
    if (c->instrs[i]->op == TPU_OP_PARAMETER && c->instrs[i]->index + 1 > nparams) nparams = (int)c->instrs[i]->index + 1;
  tpu_instr **params = tpu_arena_alloc(&b->m->arena, sizeof *params * (size_t)(nparams ? nparams : 1));
  tpu_status st = TPU_OK;
  if (!state || !stack || !sorted || !order || !params) st = nomem(b);
  /* Operands-first, keeping the current order wherever it already is one. */
  int ns = 0;
  for (int i = 0; st == TPU_OK && i < n; i++)
    if (!dfs_post(c->instrs, i, state, stack, sorted, &ns))
      st = TPU_FAIL(b->d, TPU_ERR_INVALID, c->instrs[i]->loc, "a rewrite made '%s' in '%s' depend on itself",
                    c->instrs[i]->name, c->name);
  if (st == TPU_OK) {
    memcpy(c->instrs, sorted, sizeof *sorted * (size_t)n);
    for (int i = 0; i < n; i++) c->instrs[i]->id = i;
    /* `order`: post-order from the root, then the unreached instructions (as the parser). */
    memset(state, 0, (size_t)n);
    int no = 0;
    dfs_post(c->instrs, c->root->id, state, stack, order, &no);
    for (int i = 0; i < n; i++)
      if (!state[i]) dfs_post(c->instrs, i, state, stack, order, &no);
    c->order = order;
    c->norder = no;
    c->mem_order = NULL;
    for (int i = 0; i < n; i++) {
      tpu_instr *in = c->instrs[i];
      in->is_root = in == c->root;
      in->parent = c;
      if (in->op != TPU_OP_PARAMETER) continue;
      if (in->index < 0 || params[in->index]) {
        st = TPU_FAIL(b->d, TPU_ERR_INVALID, in->loc, "parameter %lld of '%s' is defined twice after a rewrite",
                      (long long)in->index, c->name);
        break;
      }
      params[in->index] = in;
    }
    for (int i = 0; st == TPU_OK && i < nparams; i++)
      if (!params[i])
        st = TPU_FAIL(b->d, TPU_ERR_INVALID, c->loc, "computation '%s' lost parameter %d in a rewrite", c->name, i);
    if (st == TPU_OK) {
      c->params = params;
      c->nparams = nparams;
    }
  }
  tpu_free(state);
  tpu_free(stack);
  tpu_free(sorted);
  return st;
}

tpu_status tpu_build_finish_all(tpu_builder *b) {
  for (int i = 0; i < b->m->ncomps; i++) TPU_TRY(tpu_build_finish(b, b->m->comps[i]));
  return TPU_OK;
}

/* ---- Dead code ---- */

int tpu_build_has_effects(const tpu_instr *in) {
  /* a custom call may have effects, except the ones whose values are all they give
   * (ApproxTopK's PartialReduce: a reduction, fused into the kernel that takes it) */
  if (in->op == TPU_OP_CUSTOM_CALL) return tpu_custom_call_kind(in) != TPU_CC_PARTIAL_REDUCE;
  switch (in->op) {
    case TPU_OP_PARAMETER:
    case TPU_OP_CUSTOM_CALL:
    case TPU_OP_INFEED:
    case TPU_OP_OUTFEED:
    case TPU_OP_COPY_START:
    case TPU_OP_COPY_DONE:
    case TPU_OP_SLICE_START:
    case TPU_OP_SLICE_DONE: return 1;
    default: return 0; /* collectives too: every chip runs the same program, so an unused
                        * collective is dropped on every chip alike */
  }
}

int tpu_build_remove_dead(tpu_builder *b, tpu_comp *c) {
  if (tpu_build_finish(b, c) != TPU_OK) return -1;
  int n = c->ninstrs;
  unsigned char *live = tpu_calloc((size_t)n + 1, 1);
  if (!live) {
    nomem(b);
    return -1;
  }
  /* instrs is operands-first, so one backward sweep marks everything live. */
  live[c->root->id] = 1;
  for (int i = n - 1; i >= 0; i--) {
    tpu_instr *in = c->instrs[i];
    if (tpu_build_has_effects(in)) live[i] = 1;
    if (!live[i]) continue;
    for (int k = 0; k < in->noperands; k++) live[in->operands[k]->id] = 1;
  }
  int w = 0;
  for (int i = 0; i < n; i++)
    if (live[i]) c->instrs[w++] = c->instrs[i];
  tpu_free(live);
  c->ninstrs = w;
  if (tpu_build_finish(b, c) != TPU_OK) return -1;
  return n - w;
}

int tpu_build_remove_unused_comps(tpu_builder *b) {
  tpu_module *m = b->m;
  int n = m->ncomps;
  /* Mark from the entry; a computation's callees are found through its instructions.
   * Marks are kept in a side array indexed like m->comps (found by a linear scan: the
   * number of computations is small next to the work of a pass). */
  unsigned char *mark = tpu_calloc((size_t)n + 1, 1);
  int *work = tpu_malloc(sizeof(int) * ((size_t)n + 1));
  if (!mark || !work) {
    tpu_free(mark);
    tpu_free(work);
    nomem(b);
    return -1;
  }
  int sp = 0;
  for (int i = 0; i < n; i++)
    if (m->comps[i] == m->entry) {
      mark[i] = 1;
      work[sp++] = i;
    }
  while (sp) {
    tpu_comp *c = m->comps[work[--sp]];
    for (int k = 0; k < c->ninstrs; k++) {
      tpu_instr *in = c->instrs[k];
      tpu_comp *few[16], **cs = in->nbranches + 6 <= 16 ? few : tpu_malloc(sizeof *cs * (size_t)(in->nbranches + 6));
      if (!cs) {
        tpu_free(mark);
        tpu_free(work);
        nomem(b);
        return -1;
      }
      int nc = tpu_build_callees(in, cs);
      for (int j = 0; j < nc; j++)
        for (int q = 0; q < n; q++)
          if (m->comps[q] == cs[j] && !mark[q]) {
            mark[q] = 1;
            work[sp++] = q;
          }
      if (cs != few) tpu_free(cs);
      /* called_computations={%a, %b} (custom calls such as TopK): kept by name. */
      for (int a = 0; a < in->nattrs; a++) {
        if (strcmp(in->attrs[a].name, "called_computations")) continue;
        for (const char *p = in->attrs[a].value; *p;) {
          if (*p == '%') p++;
          const char *q = p;
          while (*q && *q != ',' && *q != '}' && *q != ' ' && *q != '{') q++;
          if (q > p) {
            tpu_comp *cc = tpu_module_find_comp_n(m, p, (size_t)(q - p));
            for (int r = 0; cc && r < n; r++)
              if (m->comps[r] == cc && !mark[r]) {
                mark[r] = 1;
                work[sp++] = r;
              }
          }
          p = *q ? q + 1 : q;
        }
      }
    }
  }
  int w = 0;
  for (int i = 0; i < n; i++)
    if (mark[i]) m->comps[w++] = m->comps[i];
  m->ncomps = w;
  tpu_free(mark);
  tpu_free(work);
  if (w < n && tpu_module_index_comps(m, b->d) != TPU_OK) return -1;
  return n - w;
}

/* ---- Uses ---- */

tpu_status tpu_build_uses(tpu_builder *b, const tpu_comp *c, tpu_uses *u) {
  int n = c->ninstrs;
  memset(u, 0, sizeof *u);
  size_t total = 0;
  for (int i = 0; i < n; i++) total += (size_t)c->instrs[i]->noperands;
  u->users = tpu_calloc((size_t)n + 1, sizeof *u->users);
  u->nusers = tpu_calloc((size_t)n + 1, sizeof *u->nusers);
  tpu_instr **flat = tpu_malloc(sizeof *flat * (total + 1));
  if (!u->users || !u->nusers || !flat) {
    tpu_free(u->users);
    tpu_free(u->nusers);
    tpu_free(flat);
    memset(u, 0, sizeof *u);
    return nomem(b);
  }
  u->n = n;
  /* Count distinct users (an instruction using x twice counts once). */
  for (int i = 0; i < n; i++) {
    tpu_instr *in = c->instrs[i];
    for (int k = 0; k < in->noperands; k++) {
      int dup = 0;
      for (int j = 0; j < k; j++) dup |= in->operands[j] == in->operands[k];
      if (!dup) u->nusers[in->operands[k]->id]++;
    }
  }
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    u->users[i] = flat + off;
    off += (size_t)u->nusers[i];
    u->nusers[i] = 0;
  }
  for (int i = 0; i < n; i++) {
    tpu_instr *in = c->instrs[i];
    for (int k = 0; k < in->noperands; k++) {
      int dup = 0;
      for (int j = 0; j < k; j++) dup |= in->operands[j] == in->operands[k];
      if (dup) continue;
      int o = in->operands[k]->id;
      u->users[o][u->nusers[o]++] = in;
    }
  }
  if (n == 0) tpu_free(flat);
  return TPU_OK;
}

void tpu_build_uses_free(tpu_uses *u) {
  if (u->users && u->n > 0) tpu_free(u->users[0]);
  tpu_free(u->users);
  tpu_free(u->nusers);
  memset(u, 0, sizeof *u);
}
