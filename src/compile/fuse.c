/* The fuse pass: groups ops into `fusion` instructions as XLA does for a TPU.
 *
 *   kLoop    a chain of elementwise ops and cheap data movement (broadcast, reshape,
 *            transpose, slice, convert, ...): one loop over the output.
 *   kOutput  a dot or convolution with its operand producers (convert, broadcast,
 *            transpose, reshape) and its elementwise epilogue (bias add, activation,
 *            convert, scaling): the matmul unit's output is consumed in place.
 *   kInput   a reduce with the elementwise ops that produce its input.
 *
 * Groups grow from a root (visited consumers-first) towards its operands. A producer
 * joins a group only when every user of it is already in the group, so no work is done
 * twice and no cycle can form; cheap producers (scalar constants, iota, broadcasts of a
 * scalar, and an elementwise op, convert, broadcast or reshape of a few vector operations
 * whose every user can take it, as XLA's instruction fusion duplicates) are instead copied
 * into each group that uses them. Only computations that run
 * as a sequence (the entry, while conditions and bodies, conditional branches) are
 * fused; ops that call computations (while, conditional, reduce's reducer, ...) are
 * never fused across, and a group holds at most one dot, convolution or reduce. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "compile/hlo_passes.h"
#include "ir/build.h"

typedef enum { K_LOOP, K_OUTPUT, K_INPUT } fusion_kind;
static const char *const k_kind_names[] = {"kLoop", "kOutput", "kInput"};

typedef enum { SIDE_EPI, SIDE_HEAVY, SIDE_UP } member_side; /* after, at, or feeding the heavy op */

/* The fused computations this pass made (only those merge into multi-output fusions; an
 * input's own fusions are left as they are). */
typedef struct {
  const tpu_comp **v;
  int n, cap;
} made_set;

static int made_add(made_set *s, const tpu_comp *c) {
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 64;
    const tpu_comp **v = tpu_realloc(s->v, sizeof *v * (size_t)cap);
    if (!v) return 0;
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = c;
  return 1;
}

static int made_has(const made_set *s, const tpu_comp *c) {
  for (int i = 0; i < s->n; i++)
    if (s->v[i] == c) return 1;
  return 0;
}

typedef struct {
  int root;          /* instruction id */
  fusion_kind kind;
  int has_heavy;
  int *ids;          /* members (owned or copied), in the order they joined */
  unsigned char *dup;
  int n, cap;
} group;

typedef struct {
  tpu_builder *b;
  tpu_comp *c;
  tpu_uses uses;
  int n;             /* instructions in c before the pass */
  int *owner;        /* group owning each instruction, -1 for none */
  int *mark;         /* group that holds the instruction (owned or copied), -1 for none */
  unsigned char *side;
  unsigned char *need; /* an instruction's value is read outside the groups that hold it */
  unsigned char *gone; /* copied into every group that uses it: no kernel of its own */
  group *groups;
  int ngroups, capgroups;
  made_set *made;
} fuser;

static tpu_status nomem(fuser *f) {
  return TPU_FAIL(f->b->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory while fusing '%s'", f->c->name);
}

static int is_heavy(const tpu_instr *in) { return in->op == TPU_OP_DOT || in->op == TPU_OP_CONVOLUTION; }

/* Ops a loop fusion can hold: elementwise and cheap data movement. */
static int loop_fusible(const tpu_instr *in) {
  if (in->shape.dtype == TPU_TUPLE || in->shape.dtype == TPU_TOKEN) return 0;
  switch (in->op) {
    case TPU_OP_COMPARE:
    case TPU_OP_SELECT:
    case TPU_OP_CLAMP:
    case TPU_OP_CONVERT:
    case TPU_OP_BITCAST_CONVERT:
    case TPU_OP_IS_FINITE:
    case TPU_OP_BROADCAST:
    case TPU_OP_RESHAPE:
    case TPU_OP_BITCAST:
    case TPU_OP_TRANSPOSE:
    case TPU_OP_SLICE:
    case TPU_OP_CONCATENATE:
    case TPU_OP_PAD:
    case TPU_OP_REVERSE:
    case TPU_OP_IOTA:
    case TPU_OP_CONSTANT:
    case TPU_OP_COPY: return 1;
    default: break;
  }
  tpu_op_class k = tpu_op_class_of(in->op);
  return k == TPU_CLS_UNARY || k == TPU_CLS_BINARY || k == TPU_CLS_TERNARY;
}

/* Producers a dot or convolution takes into its fusion (layout and type changes the MXU
 * feed path absorbs). */
static int operand_producer(const tpu_instr *in) {
  switch (in->op) {
    case TPU_OP_DYNAMIC_SLICE: /* a layer's weights from a stacked buffer: read in place */
    case TPU_OP_SLICE:
    case TPU_OP_CONVERT:
    case TPU_OP_BROADCAST:
    case TPU_OP_TRANSPOSE:
    case TPU_OP_RESHAPE:
    case TPU_OP_BITCAST:
    case TPU_OP_COPY:
    case TPU_OP_CONSTANT:
    case TPU_OP_IOTA: return 1;
    default: return 0;
  }
}

static int narrowing_convert(const tpu_instr *in) {
  return in->op == TPU_OP_CONVERT && tpu_dtype_size(in->shape.dtype) < tpu_dtype_size(in->operands[0]->shape.dtype);
}

/* Produced by an op a fusion could end with (rather than a parameter or constant). */
static int computed(const tpu_instr *in) {
  return is_heavy(in) || in->op == TPU_OP_REDUCE || (loop_fusible(in) && in->op != TPU_OP_CONSTANT);
}

/* Cheap enough to copy into every group that uses it. */
static int duplicable(const tpu_instr *in) {
  if (in->op == TPU_OP_CONSTANT) return tpu_shape_numel(&in->shape) <= 1;
  if (in->op == TPU_OP_IOTA) return 1;
  if (in->op == TPU_OP_BROADCAST) return in->operands[0]->shape.rank == 0;
  return 0;
}

/* Work the vector unit does in a few operations per element (no transcendental unit, no
 * division), on the values in place (no transpose, concatenation or padding). */
static int cheap(const tpu_instr *in) {
  switch (in->op) {
    case TPU_OP_DIVIDE: case TPU_OP_REMAINDER: case TPU_OP_POWER: case TPU_OP_ATAN2:
    case TPU_OP_EXP: case TPU_OP_LOG: case TPU_OP_SQRT: case TPU_OP_RSQRT: case TPU_OP_TANH:
    case TPU_OP_LOGISTIC: case TPU_OP_EXPM1: case TPU_OP_LOG1P: case TPU_OP_CBRT: case TPU_OP_SINE:
    case TPU_OP_COSINE: case TPU_OP_TAN: case TPU_OP_ERF:
    case TPU_OP_TRANSPOSE: case TPU_OP_CONCATENATE: case TPU_OP_PAD: case TPU_OP_REVERSE:
      return 0;
    default:
      return loop_fusible(in) && !tpu_dtype_is_complex(in->shape.dtype);
  }
}

/* Could user u take producer p into its fusion? */
static int takes(const tpu_instr *u, const tpu_instr *p) {
  if (is_heavy(u)) return operand_producer(p) && !(narrowing_convert(p) && computed(p->operands[0]));
  return u->op == TPU_OP_REDUCE || loop_fusible(u);
}

/* A cheap producer with several users (or one user that is itself copied) is recomputed
 * in each user's fusion, as XLA's instruction fusion duplicates it, when every user can
 * take it: its result then never goes to memory. */
static int shared_cheap(const fuser *f, const tpu_instr *p) {
  if (!cheap(p) || p == f->c->root || f->uses.nusers[p->id] < 1) return 0;
  for (int k = 0; k < f->uses.nusers[p->id]; k++)
    if (!takes(f->uses.users[p->id][k], p)) return 0;
  return 1;
}

static tpu_status push_member(fuser *f, int g, int id, int dup, member_side side) {
  group *G = &f->groups[g];
  if (G->n == G->cap) {
    int cap = G->cap ? G->cap * 2 : 8;
    int *ids = tpu_realloc(G->ids, sizeof *ids * (size_t)cap);
    if (!ids) return nomem(f);
    G->ids = ids;
    unsigned char *dd = tpu_realloc(G->dup, (size_t)cap);
    if (!dd) return nomem(f);
    G->dup = dd;
    G->cap = cap;
  }
  G->ids[G->n] = id;
  G->dup[G->n] = (unsigned char)dup;
  G->n++;
  f->mark[id] = g;
  f->side[id] = (unsigned char)side;
  if (!dup) f->owner[id] = g;
  return TPU_OK;
}

static int all_users_owned(const fuser *f, int id, int g) {
  if (f->c->instrs[id] == f->c->root) return 0;
  for (int k = 0; k < f->uses.nusers[id]; k++)
    if (f->owner[f->uses.users[id][k]->id] != g) return 0;
  return f->uses.nusers[id] > 0;
}

/* Whether producer p may join group g through member m, and on which side. */
static int may_join(const fuser *f, int g, const tpu_instr *m, const tpu_instr *p, member_side *side) {
  const group *G = &f->groups[g];
  member_side ms = (member_side)f->side[m->id];
  if (ms == SIDE_HEAVY || ms == SIDE_UP) {
    *side = SIDE_UP;
    if (m->op == TPU_OP_REDUCE || G->kind == K_INPUT) return loop_fusible(p);
    /* A narrowing convert of a computed value belongs to its producer's epilogue, so the
     * narrow value is what goes to memory; taken into this consumer instead, the wide
     * value would be stored and read. */
    if (narrowing_convert(p) && computed(p->operands[0])) return 0;
    return operand_producer(p);
  }
  *side = SIDE_EPI;
  if (loop_fusible(p)) return 1;
  if (is_heavy(p) && !G->has_heavy && G->kind == K_LOOP) {
    *side = SIDE_HEAVY;
    return 1;
  }
  return 0;
}

static tpu_status grow(fuser *f, int g) {
  for (int j = 0; j < f->groups[g].n; j++) {
    const tpu_instr *m = f->c->instrs[f->groups[g].ids[j]];
    for (int k = 0; k < m->noperands; k++) {
      const tpu_instr *p = m->operands[k];
      if (f->mark[p->id] == g) continue;
      member_side side;
      if (f->owner[p->id] >= 0 || !may_join(f, g, m, p, &side)) {
        f->need[p->id] = 1;
        continue;
      }
      if (all_users_owned(f, p->id, g)) {
        if (side == SIDE_HEAVY) {
          f->groups[g].has_heavy = 1;
          f->groups[g].kind = K_OUTPUT;
        }
        TPU_TRY(push_member(f, g, p->id, 0, side));
      } else if (duplicable(p) || shared_cheap(f, p)) {
        TPU_TRY(push_member(f, g, p->id, 1, side));
      } else {
        f->need[p->id] = 1;
      }
    }
  }
  return TPU_OK;
}

/* Members that do real work (constants and iota are only copied along). */
static int real_members(const fuser *f, const group *G) {
  int n = 0;
  for (int j = 0; j < G->n; j++) {
    tpu_opcode op = f->c->instrs[G->ids[j]]->op;
    n += op != TPU_OP_CONSTANT && op != TPU_OP_IOTA;
  }
  return n;
}

static tpu_status form_groups(fuser *f) {
  for (int i = f->n - 1; i >= 0; i--) {
    tpu_instr *u = f->c->instrs[i];
    if (f->owner[i] >= 0) continue;
    if (f->mark[i] >= 0 && !f->need[i] && u != f->c->root) {
      /* copied into groups; no kernel unless a user outside them reads it */
      int standalone_user = 0;
      for (int k = 0; k < f->uses.nusers[i] && !standalone_user; k++) {
        int v = f->uses.users[i][k]->id;
        standalone_user = f->owner[v] < 0 && !f->gone[v];
      }
      if (!standalone_user) {
        f->gone[i] = 1;
        continue;
      }
    }
    int heavy = is_heavy(u), red = u->op == TPU_OP_REDUCE;
    if (!heavy && !red && !loop_fusible(u)) {
      for (int k = 0; k < u->noperands; k++) f->need[u->operands[k]->id] = 1;
      continue;
    }
    if (f->ngroups == f->capgroups) {
      int cap = f->capgroups ? f->capgroups * 2 : 16;
      group *ng = tpu_realloc(f->groups, sizeof *ng * (size_t)cap);
      if (!ng) return nomem(f);
      f->groups = ng;
      f->capgroups = cap;
    }
    int g = f->ngroups++;
    group *G = &f->groups[g];
    memset(G, 0, sizeof *G);
    G->root = i;
    G->kind = heavy ? K_OUTPUT : red ? K_INPUT : K_LOOP;
    G->has_heavy = heavy || red;
    TPU_TRY(push_member(f, g, i, 0, heavy || red ? SIDE_HEAVY : SIDE_EPI));
    TPU_TRY(grow(f, g));
    if (real_members(f, &f->groups[g]) < 2) {
      /* Nothing to fuse: release the members so they can root their own groups. */
      G = &f->groups[g];
      for (int j = 0; j < G->n; j++) {
        if (!G->dup[j]) f->owner[G->ids[j]] = -1;
        f->mark[G->ids[j]] = -1;
      }
      tpu_free(G->ids);
      tpu_free(G->dup);
      f->ngroups--;
      for (int k = 0; k < u->noperands; k++) f->need[u->operands[k]->id] = 1;
    }
  }
  return TPU_OK;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Builds the fused computation and the fusion instruction for group g, and points the
 * root's uses at the fusion (recorded in fwd[root id], applied once for all groups).
 * Scratch: clone[id] (members by id, then parameters),
 * stamp[id] (group of the members being built, else -1), ext (outside operands). */
static tpu_status materialize(fuser *f, int g, tpu_instr **clone, int *stamp, tpu_instr **ext, tpu_instr **fwd) {
  group *G = &f->groups[g];
  tpu_builder *b = f->b;
  tpu_comp *c = f->c, *fc;
  tpu_instr *root = c->instrs[G->root];
  /* Members in the computation's order (operands first). */
  int *ids = tpu_malloc(sizeof *ids * (size_t)G->n);
  if (!ids) return nomem(f);
  memcpy(ids, G->ids, sizeof *ids * (size_t)G->n);
  qsort(ids, (size_t)G->n, sizeof *ids, cmp_int);
  for (int j = 0; j < G->n; j++) stamp[ids[j]] = g;
  tpu_status st = tpu_build_comp(b, "fused_computation", c, &fc);
  int next = 0, opcap = 16;
  tpu_instr **ops = tpu_malloc(sizeof *ops * (size_t)opcap);
  if (st == TPU_OK && !ops) st = nomem(f);
  for (int j = 0; st == TPU_OK && j < G->n; j++) {
    tpu_instr *m = c->instrs[ids[j]];
    if (m->noperands > opcap) {
      tpu_instr **nv = tpu_realloc(ops, sizeof *ops * (size_t)m->noperands);
      if (!nv) {
        st = nomem(f);
        break;
      }
      ops = nv;
      opcap = m->noperands;
    }
    for (int k = 0; st == TPU_OK && k < m->noperands; k++) {
      tpu_instr *p = m->operands[k];
      int pid = p->id;
      if (pid < f->n && c->instrs[pid] == p && stamp[pid] == g) {
        ops[k] = clone[pid];
        continue;
      }
      /* An outside value: one parameter per distinct value. */
      int q = 0;
      while (q < next && ext[q] != p) q++;
      if (q == next) {
        char hint[32];
        snprintf(hint, sizeof hint, "param_%d", next);
        ext[next] = p;
        st = tpu_build_param(b, fc, next, hint, &p->shape, &clone[f->n + next]);
        next++;
      }
      if (st == TPU_OK) ops[k] = clone[f->n + q];
    }
    if (st == TPU_OK) st = tpu_build_clone_instr(b, fc, m, ops, &clone[m->id]);
  }
  tpu_instr *fu = NULL;
  if (st == TPU_OK) {
    tpu_build_set_root(fc, clone[root->id]);
    st = tpu_build_finish(b, fc);
  }
  if (st == TPU_OK) st = tpu_build_instr(b, c, TPU_OP_FUSION, "fusion", &root->shape, ext, next, root->loc, &fu);
  if (st == TPU_OK) st = tpu_build_set_attr(b, fu, "kind", k_kind_names[G->kind]);
  if (st == TPU_OK) st = tpu_build_set_attr(b, fu, "calls", fc->name);
  if (st == TPU_OK && !made_add(f->made, fc)) st = nomem(f);
  if (st == TPU_OK) fwd[root->id] = fu;
  for (int j = 0; j < G->n; j++) stamp[ids[j]] = -1;
  tpu_free(ids);
  tpu_free(ops);
  return st;
}

static tpu_status fuse_comp(tpu_builder *b, tpu_comp *c, made_set *made) {
  fuser f;
  memset(&f, 0, sizeof f);
  f.made = made;
  f.b = b;
  f.c = c;
  f.n = c->ninstrs;
  TPU_TRY(tpu_build_uses(b, c, &f.uses));
  size_t n = (size_t)f.n;
  f.owner = tpu_malloc(sizeof(int) * (n + 1));
  f.mark = tpu_malloc(sizeof(int) * (n + 1));
  f.side = tpu_calloc(n + 1, 1);
  f.need = tpu_calloc(n + 1, 1);
  f.gone = tpu_calloc(n + 1, 1);
  /* Scratch for materializing: clones by id, then one slot per fusion parameter. */
  size_t maxops = 1;
  for (int i = 0; i < f.n; i++) maxops += (size_t)c->instrs[i]->noperands;
  tpu_instr **clone = tpu_calloc(n + maxops, sizeof *clone);
  int *stamp = tpu_malloc(sizeof(int) * (n + 1));
  tpu_instr **ext = tpu_calloc(maxops, sizeof *ext);
  tpu_instr **fwd = tpu_calloc(n + 1, sizeof *fwd);
  tpu_status st = TPU_OK;
  if (!f.owner || !f.mark || !f.side || !f.need || !f.gone || !clone || !stamp || !ext || !fwd) st = nomem(&f);
  if (st == TPU_OK) {
    for (size_t i = 0; i < n; i++) f.owner[i] = f.mark[i] = stamp[i] = -1;
    st = form_groups(&f);
  }
  for (int g = 0; st == TPU_OK && g < f.ngroups; g++) st = materialize(&f, g, clone, stamp, ext, fwd);
  if (st == TPU_OK) tpu_build_forward(c, fwd, f.n);
  if (st == TPU_OK && f.ngroups && tpu_build_remove_dead(b, c) < 0) st = b->d->status;
  for (int g = 0; g < f.ngroups; g++) {
    tpu_free(f.groups[g].ids);
    tpu_free(f.groups[g].dup);
  }
  tpu_free(f.groups);
  tpu_free(f.owner);
  tpu_free(f.mark);
  tpu_free(f.side);
  tpu_free(f.need);
  tpu_free(f.gone);
  tpu_free(clone);
  tpu_free(stamp);
  tpu_free(ext);
  tpu_free(fwd);
  tpu_build_uses_free(&f.uses);
  return st;
}

/* ---- Multi-output (sibling) fusion ----
 * Two fusions of the same iteration space that read one large array and do not depend on
 * each other become one fusion with a tuple of their results (XLA's sibling multi-output
 * fusion): the array is read once, as an optimizer step's parameter, moments and gradient
 * are read once for all three updates. Only elementwise (kLoop) and reduction (kInput)
 * fusions merge; a merged one may merge again. */

static int same_dims(const tpu_shape *a, const tpu_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

static const char *attr_value(const tpu_instr *in, const char *name) {
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, name)) return in->attrs[i].value;
  return NULL;
}

/* The shape a fusion iterates over (its reduce's input, else its first result), or NULL
 * when it may not merge. */
static const tpu_shape *sibling_space(const made_set *made, const tpu_comp *c, const tpu_instr *in) {
  if (in->op != TPU_OP_FUSION || !in->calls || !made_has(made, in->calls)) return NULL;
  const char *k = attr_value(in, "kind");
  if (!k || (strcmp(k, "kLoop") && strcmp(k, "kInput"))) return NULL;
  const tpu_shape *sp = NULL;
  for (int i = 0; i < in->calls->ninstrs; i++) {
    const tpu_instr *x = in->calls->instrs[i];
    if (is_heavy(x) || tpu_op_class_of(x->op) == TPU_CLS_COLLECTIVE || x->op == TPU_OP_CUSTOM_CALL) return NULL;
    if (x->op == TPU_OP_REDUCE && x->noperands == 2) {
      if (sp && !same_dims(sp, &x->operands[0]->shape)) return NULL;
      sp = &x->operands[0]->shape;
    }
  }
  if (in->shape.dtype == TPU_TUPLE) {
    /* one this step made: its users are get-tuple-elements */
    if (in->calls->root->op != TPU_OP_TUPLE || in == c->root) return NULL;
    if (!sp && in->shape.ntuple > 0) sp = &in->shape.elems[0];
  } else if (!sp) {
    sp = &in->shape;
  }
  return sp && sp->dtype != TPU_TUPLE && sp->rank > 0 ? sp : NULL;
}

static int users_all_gte(const tpu_uses *u, const tpu_instr *in) {
  for (int k = 0; k < u->nusers[in->id]; k++)
    if (u->users[in->id][k]->op != TPU_OP_GET_TUPLE_ELEMENT) return 0;
  return 1;
}

/* Does `from` reach `to` through operands? */
static int reaches(const tpu_instr *from, const tpu_instr *to, int *seen, int stamp, const tpu_instr **stack) {
  int top = 0;
  stack[top++] = from;
  while (top) {
    const tpu_instr *y = stack[--top];
    if (y == to) return 1;
    for (int k = 0; k < y->noperands; k++)
      if (seen[y->operands[k]->id] != stamp) {
        seen[y->operands[k]->id] = stamp;
        stack[top++] = y->operands[k];
      }
  }
  return 0;
}

/* The results a fusion's computation returns, in order: its root's operands when the
 * root is a tuple. */
static int fusion_outputs(const tpu_instr *in, tpu_instr **out) {
  tpu_instr *r = in->calls->root;
  if (in->shape.dtype == TPU_TUPLE) {
    for (int i = 0; i < r->noperands; i++) out[i] = r->operands[i];
    return r->noperands;
  }
  out[0] = r;
  return 1;
}

/* How merge_pair treats the producer x. */
typedef enum {
  MERGE_KEEP,   /* both results leave the merged fusion (siblings, a producer read elsewhere) */
  MERGE_ABSORB, /* x's results leave only where something besides y reads them */
  MERGE_COPY    /* y takes a copy of x; x stays for its other users */
} merge_mode;

/* The merged fusion's parameter for outside value o (made on first use). */
static tpu_status merge_param(tpu_builder *b, tpu_comp *fc, tpu_instr **ops, int *nops, tpu_instr *o,
                              tpu_instr **out) {
  for (int q = 0; q < *nops; q++)
    if (ops[q] == o) {
      for (int i = 0; i < fc->ninstrs; i++)
        if (fc->instrs[i]->op == TPU_OP_PARAMETER && fc->instrs[i]->index == q) {
          *out = fc->instrs[i];
          return TPU_OK;
        }
    }
  char hint[32];
  snprintf(hint, sizeof hint, "param_%d", *nops);
  ops[*nops] = o;
  TPU_TRY(tpu_build_param(b, fc, *nops, hint, &o->shape, out));
  (*nops)++;
  return TPU_OK;
}

/* Does something besides y read result i of x (x itself when it has one result)? */
static int read_elsewhere(const tpu_uses *u, const tpu_instr *x, int i, const tpu_instr *y) {
  for (int k = 0; k < u->nusers[x->id]; k++) {
    const tpu_instr *g = u->users[x->id][k];
    if (g == y) continue;
    if (x->shape.dtype != TPU_TUPLE) return 1;
    if (g->op != TPU_OP_GET_TUPLE_ELEMENT || g->index != i) continue;
    for (int j = 0; j < u->nusers[g->id]; j++)
      if (u->users[g->id][j] != y) return 1;
    if (g == x->parent->root) return 1;
  }
  return x == x->parent->root;
}

/* Replaces fusion y (a fusion or one bare op) by one fusion that also computes producer x
 * (likewise), in `mode`; users read the results through get-tuple-elements when there
 * are several. */
static tpu_status merge_pair(tpu_builder *b, tpu_comp *c, tpu_instr *x, tpu_instr *y, const tpu_uses *u,
                             made_set *made, merge_mode mode) {
  tpu_instr *pair[2] = {x, y};
  int nops = 0, nout = 0, cap = x->noperands + y->noperands + 1;
  int ocap = (x->shape.dtype == TPU_TUPLE ? x->shape.ntuple : 1) + (y->shape.dtype == TPU_TUPLE ? y->shape.ntuple : 1);
  tpu_instr **ops = tpu_calloc((size_t)cap, sizeof *ops), **outs = tpu_calloc((size_t)ocap, sizeof *outs);
  int *slot = tpu_calloc((size_t)ocap, sizeof *slot); /* each result's index in the merged tuple, -1 */
  tpu_instr **map = NULL, **cops = NULL;
  tpu_comp *fc = NULL;
  tpu_status st = ops && outs && slot ? TPU_OK : TPU_FAIL(b->d, TPU_ERR_NOMEM, x->loc, "out of memory fusing");
  if (st == TPU_OK) st = tpu_build_comp(b, "fused_computation", y->calls ? y->calls : x->calls, &fc);
  int base[2] = {0, 0};
  for (int w = 0; st == TPU_OK && w < 2; w++) {
    tpu_instr *f = pair[w];
    const tpu_comp *fcomp = f->calls;
    int nmap = fcomp ? fcomp->ninstrs + 1 : 1, ccap = f->noperands > 1 ? f->noperands : 1;
    for (int i = 0; fcomp && i < fcomp->ninstrs; i++)
      if (fcomp->instrs[i]->noperands > ccap) ccap = fcomp->instrs[i]->noperands;
    tpu_free(map);
    tpu_free(cops);
    map = tpu_calloc((size_t)nmap, sizeof *map);
    cops = tpu_calloc((size_t)ccap, sizeof *cops);
    if (!map || !cops) {
      st = TPU_FAIL(b->d, TPU_ERR_NOMEM, x->loc, "out of memory fusing");
      break;
    }
    for (int j = 0; st == TPU_OK && j < f->noperands; j++) {
      tpu_instr *o = f->operands[j], *v;
      if (w == 1 && (o == x || (o->op == TPU_OP_GET_TUPLE_ELEMENT && o->operands[0] == x)))
        v = outs[base[0] + (o == x ? 0 : (int)o->index)]; /* y consumes x: the merged value */
      else
        st = merge_param(b, fc, ops, &nops, o, &v);
      if (fcomp) map[fcomp->params[j]->id] = v;
      else cops[j] = v;
    }
    base[w] = nout;
    if (st != TPU_OK) break;
    if (!fcomp) { /* a bare op: itself, on the merged parameters */
      st = tpu_build_clone_instr(b, fc, f, cops, &outs[nout]);
      nout++;
      continue;
    }
    for (int i = 0; st == TPU_OK && i < fcomp->norder; i++) {
      tpu_instr *m = fcomp->order[i];
      if (m->op == TPU_OP_PARAMETER) continue;
      if (m == fcomp->root && m->op == TPU_OP_TUPLE && f->shape.dtype == TPU_TUPLE) continue;
      for (int k = 0; k < m->noperands; k++) cops[k] = map[m->operands[k]->id];
      st = tpu_build_clone_instr(b, fc, m, cops, &map[m->id]);
    }
    if (st != TPU_OK) break;
    tpu_instr *fo[256];
    int n = fusion_outputs(f, fo);
    for (int i = 0; i < n; i++) outs[nout++] = map[fo[i]->id];
  }
  /* The results that leave: y's, and x's as the mode says. */
  int nexp = 0;
  tpu_instr **exp = tpu_calloc((size_t)ocap, sizeof *exp);
  if (st == TPU_OK && !exp) st = TPU_FAIL(b->d, TPU_ERR_NOMEM, x->loc, "out of memory fusing");
  for (int i = 0; st == TPU_OK && i < nout; i++) {
    int from_x = i < base[1];
    int keep = !from_x || mode == MERGE_KEEP || (mode == MERGE_ABSORB && read_elsewhere(u, x, i, y));
    slot[i] = keep ? nexp : -1;
    if (keep) exp[nexp++] = outs[i];
  }
  int tuple = nexp > 1;
  tpu_instr *fu = NULL;
  tpu_shape ts;
  memset(&ts, 0, sizeof ts);
  if (st == TPU_OK && tuple) {
    ts.dtype = TPU_TUPLE;
    ts.ntuple = nexp;
    ts.elems = tpu_arena_alloc(&b->m->arena, sizeof *ts.elems * (size_t)nexp);
    if (!ts.elems) st = TPU_FAIL(b->d, TPU_ERR_NOMEM, x->loc, "out of memory fusing");
    for (int i = 0; st == TPU_OK && i < nexp; i++) ts.elems[i] = exp[i]->shape;
  } else if (st == TPU_OK) {
    ts = exp[0]->shape;
  }
  tpu_instr *root = NULL;
  if (st == TPU_OK && tuple) {
    st = tpu_build_instr(b, fc, TPU_OP_TUPLE, "tuple", &ts, exp, nexp, x->loc, &root);
    /* the fusion is known by the first result's source (reports name it so) */
    const char *md = attr_value(exp[0], "metadata");
    if (st == TPU_OK && md) st = tpu_build_set_attr(b, root, "metadata", md);
  } else if (st == TPU_OK) {
    root = exp[0];
  }
  if (st == TPU_OK) {
    tpu_build_set_root(fc, root);
    st = tpu_build_finish(b, fc);
  }
  if (st == TPU_OK) st = tpu_build_instr(b, c, TPU_OP_FUSION, "fusion", &ts, ops, nops, x->loc, &fu);
  int red = 0, heavy = 0;
  for (int i = 0; fc && i < fc->ninstrs; i++) {
    red |= fc->instrs[i]->op == TPU_OP_REDUCE;
    heavy |= is_heavy(fc->instrs[i]);
  }
  if (st == TPU_OK) st = tpu_build_set_attr(b, fu, "kind", heavy ? "kOutput" : red ? "kInput" : "kLoop");
  if (st == TPU_OK) st = tpu_build_set_attr(b, fu, "calls", fc->name);
  if (st == TPU_OK && !made_add(made, fc)) st = TPU_FAIL(b->d, TPU_ERR_NOMEM, x->loc, "out of memory fusing");
  for (int w = mode == MERGE_COPY ? 1 : 0; st == TPU_OK && w < 2; w++) {
    tpu_instr *f = pair[w];
    if (f->shape.dtype == TPU_TUPLE) {
      /* its users are get-tuple-elements: they read the merged fusion's result */
      for (int k = 0; k < u->nusers[f->id]; k++) {
        tpu_instr *g = u->users[f->id][k];
        if (g->op != TPU_OP_GET_TUPLE_ELEMENT) continue; /* y itself (x's consumer) */
        int s = slot[base[w] + (int)g->index];
        if (s < 0) continue; /* read by y only: dead once y is replaced */
        if (!tuple) {
          tpu_build_replace_uses(c, g, fu);
          continue;
        }
        g->operands[0] = fu;
        g->index = s;
        char idx[24];
        snprintf(idx, sizeof idx, "%d", s);
        st = tpu_build_set_attr(b, g, "index", idx);
      }
    } else if (slot[base[w]] >= 0) {
      if (!tuple) {
        tpu_build_replace_uses(c, f, fu);
        continue;
      }
      tpu_instr *g;
      st = tpu_build_instr(b, c, TPU_OP_GET_TUPLE_ELEMENT, f->name, &f->shape, &fu, 1, f->loc, &g);
      if (st != TPU_OK) break;
      g->index = slot[base[w]];
      char idx[24];
      snprintf(idx, sizeof idx, "%d", slot[base[w]]);
      st = tpu_build_set_attr(b, g, "index", idx);
      tpu_build_replace_uses(c, f, g);
    }
  }
  tpu_free(ops);
  tpu_free(outs);
  tpu_free(exp);
  tpu_free(slot);
  tpu_free(map);
  tpu_free(cops);
  return st;
}

/* Does consumer y reach producer x other than through its direct uses of x (x itself or
 * a get-tuple-element of it)? Merging them would then make a cycle. */
static int reaches_around(const tpu_instr *y, const tpu_instr *x, int *seen, int stamp, const tpu_instr **stack) {
  for (int k = 0; k < y->noperands; k++) {
    const tpu_instr *o = y->operands[k];
    if (o == x || (o->op == TPU_OP_GET_TUPLE_ELEMENT && o->operands[0] == x)) continue;
    if (reaches(o, x, seen, stamp, stack)) return 1;
  }
  return 0;
}

/* Producer x of consumer y (directly or through a get-tuple-element), if y reads one. */
static tpu_instr *producer_fusion(const tpu_instr *y, int k) {
  tpu_instr *o = y->operands[k];
  if (o->op == TPU_OP_GET_TUPLE_ELEMENT) o = o->operands[0];
  return o->op == TPU_OP_FUSION ? o : NULL;
}

/* ---- Fusion around the matrix unit ----
 * The TPU compiler also fuses around a dot or convolution what tpusim's groups leave
 * outside it (seen in its compiled programs, docs/fidelity.md): an elementwise producer of
 * a matmul operand is computed as the operand streams in (an RMSNorm's scaling in each of
 * the Q, K and V projections, the softmax's division in attention's second matmul); a
 * reduction of the matmul's result over its minor dimension is taken from the result
 * tiles (the sum of squares of the next norm, a softmax's max and sum); and an elementwise
 * consumer of the result and of its row maximum joins when a row is at most
 * MATMUL_ROW_MAX elements (attention's softmax exponent; longer rows go to their own
 * kernel; a softmax gradient, which needs a row sum, is not joined either). */
#define MATMUL_ROW_MAX 2048

/* The dot or convolution a kernel runs: a bare one, or the one in a fusion this pass made. */
static const tpu_instr *matmul_of(const made_set *made, const tpu_instr *in) {
  if (is_heavy(in)) return in;
  if (in->op != TPU_OP_FUSION || !in->calls || !made_has(made, in->calls)) return NULL;
  for (int i = 0; i < in->calls->ninstrs; i++)
    if (is_heavy(in->calls->instrs[i])) return in->calls->instrs[i];
  return NULL;
}

int tpu__fused_source(const tpu_instr *v) {
  for (int guard = 0; v && guard < 64; guard++) {
    if (v->op == TPU_OP_PARAMETER) return (int)v->index;
    const tpu_instr *next = NULL;
    if (v->noperands == 1 || v->op == TPU_OP_DYNAMIC_SLICE) {
      next = v->operands[0];
    } else if (loop_fusible(v)) {
      int64_t n = tpu_shape_numel(&v->shape);
      for (int k = 0; k < v->noperands && !next; k++) {
        const tpu_instr *o = v->operands[k];
        if (tpu_shape_numel(&o->shape) == n && o->op != TPU_OP_BROADCAST && o->op != TPU_OP_CONSTANT &&
            o->op != TPU_OP_IOTA)
          next = o;
      }
    }
    v = next;
  }
  return -1;
}

/* Is operand k of matmul kernel y (bare or fused) one of the matmul's two inputs? */
static int feeds_matmul(const made_set *made, const tpu_instr *y, int k) {
  const tpu_instr *mm = matmul_of(made, y);
  if (!mm) return 0;
  if (mm == y) return k < 2;
  for (int s = 0; s < 2; s++) {
    const tpu_instr *v = mm->operands[s];
    while (v->op != TPU_OP_PARAMETER && v->noperands == 1 && operand_producer(v)) v = v->operands[0];
    if (v->op == TPU_OP_PARAMETER && v->index == k) return 1;
  }
  return 0;
}

/* The reduce a reduction kernel runs (a bare reduce, or the only one of a reduction
 * fusion this pass made, at its root), reading its data through operand *k of y. */
static const tpu_instr *reduction_of(const made_set *made, const tpu_instr *y, int *k) {
  const tpu_instr *r = NULL;
  if (y->op == TPU_OP_REDUCE) {
    r = y;
  } else if (y->op == TPU_OP_FUSION && y->calls && made_has(made, y->calls) && y->calls->root->op == TPU_OP_REDUCE) {
    r = y->calls->root;
    for (int i = 0; i < y->calls->ninstrs; i++)
      if (y->calls->instrs[i] != r && (y->calls->instrs[i]->op == TPU_OP_REDUCE || is_heavy(y->calls->instrs[i])))
        return NULL;
  }
  if (!r || r->noperands != 2 || r->shape.dtype == TPU_TUPLE || r->operands[0]->shape.rank < 1) return NULL;
  int minor = 0;
  for (int i = 0; i < r->dimensions.n; i++) minor |= r->dimensions.v[i] == r->operands[0]->shape.rank - 1;
  if (!minor) return NULL;
  *k = y->calls ? tpu__fused_source(r->operands[0]) : 0;
  return *k >= 0 && *k < y->noperands ? r : NULL;
}

/* The kernel that produces operand k of y (through a get-tuple-element), and its result
 * index there. */
static tpu_instr *producer_of(const tpu_instr *y, int k, int *index) {
  tpu_instr *o = y->operands[k];
  *index = 0;
  if (o->op == TPU_OP_GET_TUPLE_ELEMENT) {
    *index = (int)o->index;
    o = o->operands[0];
  }
  return o;
}

static int results(const tpu_instr *in) { return in->shape.dtype == TPU_TUPLE ? in->shape.ntuple : 1; }

/* An elementwise kernel this pass made (or one bare elementwise op) that only matmuls read,
 * each as an operand of its matmul: the first one takes a copy (the rest follow). With
 * several readers it must stream a single array. */
static int prologue_pair(const made_set *made, const tpu_comp *c, const tpu_uses *u, tpu_instr *x, tpu_instr **y) {
  if (x == c->root || x->shape.dtype == TPU_TUPLE || u->nusers[x->id] < 1) return 0;
  if (x->op == TPU_OP_FUSION) {
    if (!x->calls || !made_has(made, x->calls)) return 0;
    const char *kd = attr_value(x, "kind");
    if (!kd || strcmp(kd, "kLoop")) return 0;
  } else if (!loop_fusible(x) || x->op == TPU_OP_CONSTANT || x->op == TPU_OP_IOTA || x->op == TPU_OP_BROADCAST ||
             x->op == TPU_OP_RESHAPE || x->op == TPU_OP_BITCAST || x->op == TPU_OP_COPY) {
    return 0; /* data movement alone stays with its own rules */
  }
  if (u->nusers[x->id] > 1) {
    /* recomputed in each matmul only when it streams one array (and row statistics):
     * a softmax gradient reading several is stored once, as the compiler does */
    int large = 0;
    for (int k = 0; k < x->noperands; k++) large += tpu_shape_numel(&x->operands[k]->shape) >= tpu_shape_numel(&x->shape);
    if (large > 1) return 0;
  }
  for (int j = 0; j < u->nusers[x->id]; j++) {
    const tpu_instr *m = u->users[x->id][j];
    if (!matmul_of(made, m) || (m->shape.dtype == TPU_TUPLE && !users_all_gte(u, m))) return 0;
    for (int k = 0; k < m->noperands; k++)
      if (m->operands[k] == x && !feeds_matmul(made, m, k)) return 0;
  }
  *y = u->users[x->id][0];
  return 1;
}

/* Is result i of fusion x a maximum reduction (a softmax's row maximum)? */
static int row_max(const tpu_instr *x, int i) {
  tpu_instr *fo[256];
  if (!x->calls || i >= fusion_outputs(x, fo)) return 0;
  const tpu_instr *r = fo[i];
  return r->op == TPU_OP_REDUCE && r->to_apply && r->to_apply->root && r->to_apply->root->op == TPU_OP_MAXIMUM;
}

/* Does kernel y read the matmul result x computes and x's row maximum of it — a
 * softmax's exponent step, which the compiler keeps in the matmul's epilogue (it takes the
 * row's maximum as a reduce-window over the row)? */
static int reads_row_max(const tpu_instr *y, const tpu_instr *x, int64_t *row) {
  int big = 0, stat = 0;
  for (int k = 0; k < y->noperands; k++) {
    int i;
    if (producer_of(y, k, &i) != x) continue;
    const tpu_shape *s = &y->operands[k]->shape;
    if (same_dims(s, y->shape.dtype == TPU_TUPLE ? &y->shape.elems[0] : &y->shape)) {
      big = 1;
      *row = s->rank ? s->dims[s->rank - 1] : 1;
    } else if (s->rank >= 1 && row_max(x, i)) {
      stat = 1;
    }
  }
  return big && stat;
}

/* Copies one matmul operand producer into its matmul; *found says whether. This comes
 * before every other merge: a producer only matmuls read goes into them (a softmax's
 * division into the next matmul rather than the previous one's epilogue, a norm's scaling
 * into each projection rather than into its statistics' kernel). */
static tpu_status merge_prologue_one(tpu_builder *b, tpu_comp *c, made_set *made, const tpu_uses *u, int *found) {
  for (int i = 0; !*found && i < c->ninstrs; i++) {
    tpu_instr *x = c->instrs[i], *y;
    if (!prologue_pair(made, c, u, x, &y) || results(y) > 16) continue;
    *found = 1;
    return merge_pair(b, c, x, y, u, made, MERGE_COPY);
  }
  return TPU_OK;
}

/* Finds one reduction or softmax step to fuse into a matmul's kernel and fuses it. */
static tpu_status merge_matmul_one(tpu_builder *b, tpu_comp *c, made_set *made, const tpu_uses *u, int *seen,
                                   const tpu_instr **stack, int *found) {
  int stamp = 1 << 20;
  for (int i = 0; !*found && i < c->ninstrs; i++) {
    tpu_instr *y = c->instrs[i], *x;
    if (y->shape.dtype == TPU_TUPLE && !users_all_gte(u, y)) continue;
    int k, idx;
    const tpu_instr *r = reduction_of(made, y, &k);
    int64_t row = 0;
    if (r) {
      /* a reduction of the matmul's result over its rows */
      x = producer_of(y, k, &idx);
      const char *xk = x->op == TPU_OP_FUSION && x->calls && made_has(made, x->calls) ? attr_value(x, "kind") : NULL;
      if (!(matmul_of(made, x) || (xk && !strcmp(xk, "kLoop"))) || tpu_shape_numel(&y->operands[k]->shape) != tpu_shape_numel(&r->operands[0]->shape))
        continue;
    } else {
      /* an elementwise step on the matmul's result and its row maximum */
      if (y->op != TPU_OP_FUSION || !y->calls || !made_has(made, y->calls)) continue;
      const char *kd = attr_value(y, "kind");
      if (!kd || strcmp(kd, "kLoop")) continue;
      tpu_instr *dummy;
      if (prologue_pair(made, c, u, y, &dummy)) continue; /* it goes into the next matmul */
      x = NULL;
      for (int q = 0; q < y->noperands && !x; q++) {
        tpu_instr *p = producer_of(y, q, &idx);
        if (matmul_of(made, p) && p->shape.dtype == TPU_TUPLE && reads_row_max(y, p, &row)) x = p;
      }
      if (!x || row > MATMUL_ROW_MAX) continue;
    }
    if (x == y || (x->shape.dtype == TPU_TUPLE && !users_all_gte(u, x)) || results(x) + results(y) > 16) continue;
    if (reaches_around(y, x, seen, ++stamp, stack)) continue;
    *found = 1;
    return merge_pair(b, c, x, y, u, made, MERGE_ABSORB);
  }
  return TPU_OK;
}

/* Finds one pair of sibling fusions to merge and merges it; *found says whether. */
static tpu_status merge_one(tpu_builder *b, tpu_comp *c, made_set *made, int *found) {
  *found = 0;
  tpu_uses u;
  TPU_TRY(tpu_build_uses(b, c, &u));
  int n = c->ninstrs;
  int64_t nedges = 1;
  for (int i = 0; i < n; i++) nedges += c->instrs[i]->noperands;
  int *seen = tpu_calloc((size_t)n + 1, sizeof *seen);
  const tpu_instr **stack = tpu_calloc((size_t)nedges + 1, sizeof *stack);
  tpu_status st = seen && stack ? TPU_OK : TPU_FAIL(b->d, TPU_ERR_NOMEM, c->loc, "out of memory fusing");
  int stamp = 0;
  if (st == TPU_OK) st = merge_prologue_one(b, c, made, &u, found);
  for (int i = 0; st == TPU_OK && !*found && i < n; i++) {
    const tpu_instr *a = c->instrs[i]; /* a large array two fusions read */
    if (a->shape.dtype == TPU_TUPLE || u.nusers[i] < 2) continue;
    for (int p = 0; p < u.nusers[i] && !*found; p++) {
      tpu_instr *x = u.users[i][p];
      const tpu_shape *sx = sibling_space(made, c, x);
      if (!sx || tpu_shape_numel(&a->shape) < tpu_shape_numel(sx) || (x->shape.dtype == TPU_TUPLE && !users_all_gte(&u, x)))
        continue;
      for (int q = p + 1; q < u.nusers[i] && !*found; q++) {
        tpu_instr *y = u.users[i][q];
        const tpu_shape *sy = sibling_space(made, c, y);
        if (y == x || !sy || !same_dims(sx, sy) || (y->shape.dtype == TPU_TUPLE && !users_all_gte(&u, y)))
          continue;
        if ((x->shape.dtype == TPU_TUPLE ? x->shape.ntuple : 1) + (y->shape.dtype == TPU_TUPLE ? y->shape.ntuple : 1) > 16)
          continue;
        if (reaches(x, y, seen, ++stamp, stack) || reaches(y, x, seen, ++stamp, stack)) continue;
        st = merge_pair(b, c, x, y, &u, made, MERGE_KEEP);
        *found = 1;
      }
    }
  }
  /* Producer and consumer (XLA's producer-consumer multi-output fusion): a fusion whose
   * result a same-shaped consumer fusion reads and something else reads too (so it goes
   * to memory anyway) — the consumer then takes it from the producer's registers. */
  for (int i = 0; st == TPU_OK && !*found && i < n; i++) {
    tpu_instr *y = c->instrs[i];
    const tpu_shape *sy = sibling_space(made, c, y);
    if (!sy || (y->shape.dtype == TPU_TUPLE && !users_all_gte(&u, y))) continue;
    for (int k = 0; k < y->noperands && !*found; k++) {
      tpu_instr *x = producer_fusion(y, k);
      const tpu_shape *sx = x ? sibling_space(made, c, x) : NULL;
      if (!sx || x == y || !same_dims(sx, sy) || (x->shape.dtype == TPU_TUPLE && !users_all_gte(&u, x))) continue;
      if ((x->shape.dtype == TPU_TUPLE ? x->shape.ntuple : 1) + (y->shape.dtype == TPU_TUPLE ? y->shape.ntuple : 1) > 16)
        continue;
      if (x->shape.dtype != TPU_TUPLE && u.nusers[x->id] < 2) continue;
      if (reaches_around(y, x, seen, ++stamp, stack)) continue;
      st = merge_pair(b, c, x, y, &u, made, MERGE_KEEP);
      *found = 1;
    }
  }
  if (st == TPU_OK && !*found) st = merge_matmul_one(b, c, made, &u, seen, stack, found);
  tpu_free(seen);
  tpu_free(stack);
  tpu_build_uses_free(&u);
  if (st == TPU_OK && *found && tpu_build_remove_dead(b, c) < 0) st = b->d->status;
  return st;
}

/* The computations that run as a sequence of ops: the entry and, through while and
 * conditional, their bodies, conditions and branches. */
static tpu_status sequential_comps(tpu_builder *b, tpu_comp ***out, int *nout) {
  tpu_module *m = b->m;
  tpu_comp **list = tpu_malloc(sizeof *list * ((size_t)m->ncomps + 1));
  if (!list) return TPU_FAIL(b->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory while fusing");
  int n = 0;
  list[n++] = m->entry;
  for (int i = 0; i < n; i++) {
    tpu_comp *c = list[i];
    for (int k = 0; k < c->ninstrs; k++) {
      tpu_instr *in = c->instrs[k];
      tpu_comp *cand[2 + 256];
      int nc = 0;
      if (in->op == TPU_OP_WHILE) {
        cand[nc++] = in->condition;
        cand[nc++] = in->body;
      } else if (in->op == TPU_OP_CONDITIONAL) {
        for (int j = 0; j < in->nbranches && j < 256; j++) cand[nc++] = in->branches[j];
      } else if (in->op == TPU_OP_CALL) {
        cand[nc++] = in->to_apply;
      }
      for (int j = 0; j < nc; j++) {
        int seen = !cand[j];
        for (int q = 0; q < n && !seen; q++) seen = list[q] == cand[j];
        if (!seen && n < m->ncomps) list[n++] = cand[j];
      }
    }
  }
  *out = list;
  *nout = n;
  return TPU_OK;
}

tpu_status tpu__pass_fuse(tpu_module *m, const tpu_compile_opts *o, tpu_diag *d) {
  tpu_builder b;
  TPU_TRY(tpu_builder_init(&b, m, d));
  tpu_comp **list = NULL;
  int n = 0;
  tpu_status st = sequential_comps(&b, &list, &n);
  made_set made = {NULL, 0, 0};
  for (int i = 0; st == TPU_OK && i < n; i++) st = fuse_comp(&b, list[i], &made);
  int merged = 0;
  for (int i = 0; st == TPU_OK && i < n; i++)
    for (int found = 1, k = 0; st == TPU_OK && found && k < 4096; k++) {
      st = merge_one(&b, list[i], &made, &found);
      merged |= found;
    }
  if (st == TPU_OK && merged && tpu_build_remove_unused_comps(&b) < 0) st = d->status;
  tpu_free(made.v);
  tpu_free(list);
  tpu_builder_deinit(&b);
  return st;
}
