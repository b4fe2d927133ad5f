/* The fuse pass, second half: multi-output fusion of the fusions the first half
 * (fuse.c) made, and fusion around the matrix unit (docs/compiler-fusion.md). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/env.h"
#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"

/* The fusions the fuse pass made (fuse.c fills it; the merges here and relayout.c read it):
 * a hash set of pointers (asked once per candidate fusion in every merge round). */
static size_t made_slot(const tpu__made_set *s, const tpu_comp *c) {
  size_t h = (size_t)(uintptr_t)c;
  h ^= h >> 17;
  h *= 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  size_t mask = (size_t)s->cap - 1, i = h & mask;
  while (s->v[i] && s->v[i] != c) i = (i + 1) & mask;
  return i;
}

int tpu__made_add(tpu__made_set *s, const tpu_comp *c) {
  if (2 * (s->n + 1) > s->cap) {
    tpu__made_set t = {NULL, 0, s->cap ? s->cap * 2 : 64};
    t.v = tpu_calloc((size_t)t.cap, sizeof *t.v);
    if (!t.v) return 0;
    for (int i = 0; i < s->cap; i++)
      if (s->v[i]) {
        t.v[made_slot(&t, s->v[i])] = s->v[i];
        t.n++;
      }
    tpu_free(s->v);
    *s = t;
  }
  size_t i = made_slot(s, c);
  if (!s->v[i]) {
    s->v[i] = c;
    s->n++;
  }
  return 1;
}

int tpu__made_has(const tpu__made_set *s, const tpu_comp *c) { return s->cap && s->v[made_slot(s, c)] == c; }

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

/* A bare slice (one the fuse pass left alone: a piece of a split returned as it is), which
 * merges with a sibling fusion reading the same array as a fusion would (XLA's multi-output
 * fusion takes any loop-fusible instruction: the compiler's split4_256x1024_ax1_bf16,
 * split3_195x65x7x99_ax0_f32, split4_64x256x16x64_ax1_bf16 return the bare first piece from
 * the slice_multiply_fusion that scales the others, one kernel on v4, v5e and v5p; libtpu
 * probes outside the corpora, bench/fidelity/probes/data/split_slice.json: 2-4 pieces of
 * bf16/f32 arrays along the lanes, sublanes or a major dimension, one slice_multiply_fusion on
 * every generation). */
static int bare_slice(const tpu_instr *in) {
  return in->op == TPU_OP_SLICE && in->shape.rank > 0 && in->shape.dtype != TPU_TUPLE && in != in->parent->root;
}

/* The shape a fusion iterates over (its reduce's input, else its first result), or NULL
 * when it may not merge. */
static const tpu_shape *sibling_space(const tpu__made_set *made, const tpu_comp *c, const tpu_instr *in) {
  if (bare_slice(in)) return &in->shape;
  if (in->op != TPU_OP_FUSION || !in->calls || !tpu__made_has(made, in->calls)) return NULL;
  if (in->calls->root && tpu__fuse_own_kernel(in->calls->root)) return NULL;
  const char *k = attr_value(in, "kind");
  if (!k || (strcmp(k, "kLoop") && strcmp(k, "kInput"))) return NULL;
  const tpu_shape *sp = NULL;
  for (int i = 0; i < in->calls->ninstrs; i++) {
    const tpu_instr *x = in->calls->instrs[i];
    if (tpu__fuse_heavy(x) || tpu_op_class_of(x->op) == TPU_CLS_COLLECTIVE || x->op == TPU_OP_CUSTOM_CALL) return NULL;
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

/* Does a fusion reduce? */
static int reduces(const tpu_instr *in) {
  if (!in->calls) return 0;
  for (int i = 0; i < in->calls->ninstrs; i++)
    if (in->calls->instrs[i]->op == TPU_OP_REDUCE) return 1;
  return 0;
}

/* sibling_space and reduces of each instruction of a computation, found once a merge round
 * (the pair loops ask them of every user pair of an array). */
typedef struct {
  const tpu__made_set *made;
  const tpu_comp *c;
  const tpu_shape **sp;
  unsigned char *done; /* bit 0: sp found; bit 1: reduces found; bit 2: it reduces */
} space_memo;

static const tpu_shape *space_of(space_memo *M, const tpu_instr *in) {
  int i = in->id;
  if (i < 0 || i >= M->c->ninstrs || M->c->instrs[i] != in) return sibling_space(M->made, M->c, in);
  if (!(M->done[i] & 1)) {
    M->sp[i] = sibling_space(M->made, M->c, in);
    M->done[i] |= 1;
  }
  return M->sp[i];
}

static int reduces_of(space_memo *M, const tpu_instr *in) {
  int i = in->id;
  if (i < 0 || i >= M->c->ninstrs || M->c->instrs[i] != in) return reduces(in);
  if (!(M->done[i] & 2)) M->done[i] |= (unsigned char)(2 | (reduces(in) ? 4 : 0));
  return M->done[i] >> 2 & 1;
}


static int users_all_gte(const tpu_uses *u, const tpu_instr *in) {
  for (int k = 0; k < u->nusers[in->id]; k++)
    if (u->users[in->id][k]->op != TPU_OP_GET_TUPLE_ELEMENT) return 0;
  return 1;
}

/* Reachability through operands within one computation, asked for every candidate pair of
 * every merge round (a 12-layer GPT-2 step: about 10^4 questions a round, each a walk of
 * most of the step before; its first compile took minutes). When the computation's
 * instructions are in dependence order (each id its index, every operand before its user),
 * each instruction's ancestors are a bitset built once a round in that order, and a
 * question is one bit; a larger computation walks, skipping what lies before the target
 * (nothing there reaches it); any other order walks everything. Same answers each way. */
int tpu__fuse_reach_bitset_max = 8192; /* instructions: n^2 / 8 bytes, 8 MiB at most */
typedef struct {
  int *seen, stamp, topo;
  const tpu_instr **stack;
  uint64_t *anc; /* ancestors of id i at anc + i * words, or NULL */
  size_t words;
} reach_ctx;

static int in_order(const tpu_comp *c) {
  for (int i = 0; i < c->ninstrs; i++) {
    const tpu_instr *in = c->instrs[i];
    if (in->id != i) return 0;
    for (int k = 0; k < in->noperands; k++)
      if (in->operands[k]->id >= i || c->instrs[in->operands[k]->id] != in->operands[k]) return 0;
  }
  return 1;
}

/* 0 when out of memory. */
static int reach_init(reach_ctx *R, const tpu_comp *c) {
  int n = c->ninstrs;
  memset(R, 0, sizeof *R);
  int64_t nedges = 1;
  for (int i = 0; i < n; i++) nedges += c->instrs[i]->noperands;
  R->seen = tpu_calloc((size_t)n + 1, sizeof *R->seen);
  R->stack = tpu_calloc((size_t)nedges + 1, sizeof *R->stack);
  if (!R->seen || !R->stack) return 0;
  R->topo = in_order(c);
  if (R->topo && n <= tpu__fuse_reach_bitset_max) {
    R->words = ((size_t)n + 63) / 64;
    R->anc = tpu_calloc((size_t)n * R->words + 1, sizeof *R->anc);
    if (!R->anc) return 0;
    for (int i = 0; i < n; i++) {
      uint64_t *d = R->anc + (size_t)i * R->words;
      const tpu_instr *in = c->instrs[i];
      for (int k = 0; k < in->noperands; k++) {
        int o = in->operands[k]->id;
        const uint64_t *s = R->anc + (size_t)o * R->words;
        for (size_t w = 0; w <= (size_t)o / 64; w++) d[w] |= s[w]; /* o's ancestors lie below o */
        d[o / 64] |= 1ull << (o % 64);
      }
    }
  }
  return 1;
}

static void reach_free(reach_ctx *R) {
  tpu_free(R->seen);
  tpu_free(R->stack);
  tpu_free(R->anc);
}

/* Does `from` reach `to` through operands? */
static int reaches(reach_ctx *R, const tpu_instr *from, const tpu_instr *to) {
  if (from == to) return 1;
  if (R->anc) return (int)(R->anc[(size_t)from->id * R->words + (size_t)to->id / 64] >> (to->id % 64) & 1);
  int floor = R->topo ? to->id : 0, stamp = ++R->stamp, top = 0;
  if (from->id < floor) return 0;
  const tpu_instr **stack = R->stack;
  int *seen = R->seen;
  stack[top++] = from;
  while (top) {
    const tpu_instr *y = stack[--top];
    if (y == to) return 1;
    for (int k = 0; k < y->noperands; k++)
      if (y->operands[k]->id >= floor && seen[y->operands[k]->id] != stamp) {
        seen[y->operands[k]->id] = stamp;
        stack[top++] = y->operands[k];
      }
  }
  return 0;
}

/* How many results an instruction has (a tuple's elements, else one). */
static int results(const tpu_instr *in) { return in->shape.dtype == TPU_TUPLE ? in->shape.ntuple : 1; }

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
                             tpu__made_set *made, merge_mode mode) {
  tpu_instr *pair[2] = {x, y};
  int nops = 0, nout = 0, cap = x->noperands + y->noperands + 1;
  int ocap = results(x) + results(y);
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
    heavy |= tpu__fuse_heavy(fc->instrs[i]);
  }
  if (st == TPU_OK) st = tpu_build_set_attr(b, fu, "kind", heavy ? "kOutput" : red ? "kInput" : "kLoop");
  if (st == TPU_OK) st = tpu_build_set_attr(b, fu, "calls", fc->name);
  if (st == TPU_OK && !tpu__made_add(made, fc)) st = TPU_FAIL(b->d, TPU_ERR_NOMEM, x->loc, "out of memory fusing");
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
static int reaches_around(reach_ctx *R, const tpu_instr *y, const tpu_instr *x) {
  for (int k = 0; k < y->noperands; k++) {
    const tpu_instr *o = y->operands[k];
    if (o == x || (o->op == TPU_OP_GET_TUPLE_ELEMENT && o->operands[0] == x)) continue;
    if (reaches(R, o, x)) return 1;
  }
  return 0;
}

/* ---- Fusion around the matrix unit ----
 * The TPU compiler also fuses around a dot or convolution what tpusim's groups leave
 * outside it (seen in its compiled programs, docs/fidelity.md): an elementwise producer of
 * a matmul operand is computed as the operand streams in (an RMSNorm's scaling in each of
 * the Q, K and V projections, the softmax's division — and its exponent, when QK^T's kernel
 * stores bf16 scores — in attention's second matmul); a reduction of the matmul's result
 * over its minor dimension is taken from the result tiles (the sum of squares of the next
 * norm, a softmax's max and sum); and an elementwise consumer of the result and of its row
 * maximum joins when a row is at most MATMUL_ROW_MAX elements (attention's exponent on f32
 * scores, corpus attn_fwd_*; longer rows go to their own kernel). A reduction that reads a
 * row statistic of the result broadcast back over the rows (the sum of exp(s - max) on bf16
 * scores, a softmax gradient's sum) needs the whole row's statistic first and stays its own
 * kernel, as in the compiler's programs (families attn_*, bert_*, llama_*, mistral_*, t5_*,
 * whisper_*, swin_*: QK^T with the max, then exp and sum, then PV). */
#define MATMUL_ROW_MAX 2048

/* The dot or convolution a kernel runs: a bare one, or the one in a fusion this pass made. */
static const tpu_instr *matmul_of(const tpu__made_set *made, const tpu_instr *in) {
  if (tpu__fuse_heavy(in)) return in;
  if (in->op != TPU_OP_FUSION || !in->calls || !tpu__made_has(made, in->calls)) return NULL;
  for (int i = 0; i < in->calls->ninstrs; i++)
    if (tpu__fuse_heavy(in->calls->instrs[i])) return in->calls->instrs[i];
  return NULL;
}

int tpu__fused_source(const tpu_instr *v) {
  for (int guard = 0; v && guard < 64; guard++) {
    if (v->op == TPU_OP_PARAMETER) return (int)v->index;
    const tpu_instr *next = NULL;
    if (v->noperands == 1 || v->op == TPU_OP_DYNAMIC_SLICE) {
      next = v->operands[0];
    } else if (tpu__fuse_loop_fusible(v)) {
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
static int feeds_matmul(const tpu__made_set *made, const tpu_instr *y, int k) {
  const tpu_instr *mm = matmul_of(made, y);
  if (!mm) return 0;
  if (mm == y) return k < 2;
  for (int s = 0; s < 2; s++) {
    const tpu_instr *v = mm->operands[s];
    while (v->op != TPU_OP_PARAMETER && v->noperands == 1 && tpu__fuse_operand_producer(v)) v = v->operands[0];
    if (v->op == TPU_OP_PARAMETER && v->index == k) return 1;
  }
  return 0;
}

/* The reduce a reduction kernel runs (a bare reduce, or the only one of a reduction
 * fusion this pass made, at its root), reading its data through operand *k of y; *minor
 * says whether it reduces over the minor dimension (a row reduction) or keeps it (a
 * column reduction, as a batch norm's sums over batch and space per channel). */
static const tpu_instr *reduction_of(const tpu__made_set *made, const tpu_instr *y, int *k, int *minor_out) {
  const tpu_instr *r = NULL;
  if (y->op == TPU_OP_REDUCE) {
    r = y;
  } else if (y->op == TPU_OP_FUSION && y->calls && tpu__made_has(made, y->calls) && y->calls->root->op == TPU_OP_REDUCE) {
    r = y->calls->root;
    for (int i = 0; i < y->calls->ninstrs; i++)
      if (y->calls->instrs[i] != r && (y->calls->instrs[i]->op == TPU_OP_REDUCE || tpu__fuse_heavy(y->calls->instrs[i])))
        return NULL;
  }
  if (!r || r->noperands != 2 || r->shape.dtype == TPU_TUPLE || r->operands[0]->shape.rank < 1) return NULL;
  int minor = 0;
  for (int i = 0; i < r->dimensions.n; i++) minor |= r->dimensions.v[i] == r->operands[0]->shape.rank - 1;
  *minor_out = minor;
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

/* The side (0 lhs, 1 rhs) of matmul kernel y's dot that operand k of y feeds, or -1. */
static int fed_side(const tpu__made_set *made, const tpu_instr *y, int k) {
  const tpu_instr *mm = matmul_of(made, y);
  if (!mm) return -1;
  if (mm == y) return k < 2 ? k : -1;
  for (int s = 0; s < 2; s++) {
    const tpu_instr *v = mm->operands[s];
    while (v->op != TPU_OP_PARAMETER && v->noperands == 1 && tpu__fuse_operand_producer(v)) v = v->operands[0];
    if (v->op == TPU_OP_PARAMETER && v->index == k) return s;
  }
  return -1;
}

/* Does the dot mm read its operand `side` in another order of its major dimensions than
 * the operand is stored in, so that the compiler fuses a transposition into the matmul's
 * operand and takes no elementwise producer with it? On a 128-wide matrix unit (v4, v5e,
 * v5p) the XLA TPU compiler writes a dot whose operand has two or more batch dimensions and
 * two or more free ones (batch, KV heads; query group, rows: grouped-query attention's
 * bkgst,btkh->bskgh at a batch > 1, its result contracted over k, g, h next) as a convolution
 * whose kernel reads that operand with two major dimensions swapped ({3,4,2,1,0} ->
 * {3,4,1,2,0}), and stores its producer whole: the softmax's exp(s - max) / sum, and alike a
 * bare scaling, offset or exponent of the scores, is a kLoop kernel of its own before PV
 * (divide_convert_fusion of the compiled llama_fwd_b2s512d1024h16kv4 and
 * mistral_fwd_b2s2048d512h8kv2w512; libtpu v5e probes outside the corpus, P =
 * bf16[B,KV,G,S,S] with B, KV, G = 2..8, S = 128..512: a kernel of its own whenever B, KV and
 * G are all above 1; in PV's kernel at B = 1, KV = 1 or G = 1). v6e lays the scores out with
 * the group beside the rows and keeps the producer in a matmul's kernel (its compiled llama_fwd_*). */
static int relaid_operand(const tpu_chip *chip, const tpu_instr *mm, int side) {
  if (!chip || chip->mxu_cols != 128 || mm->op != TPU_OP_DOT || side < 0 || side > 1) return 0;
  const tpu_shape *s = &mm->operands[side]->shape;
  const tpu_i64s *bd = side ? &mm->dot.rhs_batch : &mm->dot.lhs_batch;
  const tpu_i64s *cd = side ? &mm->dot.rhs_contract : &mm->dot.lhs_contract;
  int nb = 0, nf = 0;
  for (int d = 0; d < s->rank; d++) {
    if (s->dims[d] <= 1 || tpu_i64s_find(cd, d) >= 0) continue;
    if (tpu_i64s_find(bd, d) >= 0) nb++;
    else nf++;
  }
  return nb >= 2 && nf >= 2;
}

/* Counts the readers other than x of x's full-size inputs: those that are reductions
 * (*reductions) and the others (*others). */
static void full_input_readers(const tpu__made_set *made, const tpu_uses *u, const tpu_instr *x, int *reductions,
                               int *others) {
  int64_t n = tpu_shape_numel(&x->shape);
  *reductions = *others = 0;
  for (int k = 0; k < x->noperands; k++) {
    const tpu_instr *o = x->operands[k];
    if (o->shape.dtype == TPU_TUPLE || tpu_shape_numel(&o->shape) != n) continue;
    for (int j = 0; j < u->nusers[o->id]; j++) {
      const tpu_instr *r = u->users[o->id][j];
      int rk, minor;
      if (r == x) continue;
      if (reduction_of(made, r, &rk, &minor)) ++*reductions;
      else ++*others;
    }
  }
}

/* Are x's full-size inputs read by nothing but x and reduction kernels (the scores a
 * softmax's row maximum, row sum and normalisation read, and no backward pass)? In a
 * training step the compiler lays attention's scores out for their backward readers too
 * (llama_train_b4s256d512h8kv2's QK^T writes bf16[4,2,256,256,4], the group beside the rows)
 * and PV reads its operand without the transposition: the normalisation stays in PV's kernel. */
static int inputs_read_by_reductions(const tpu__made_set *made, const tpu_uses *u, const tpu_instr *x) {
  int reductions, others;
  full_input_readers(made, u, x, &reductions, &others);
  return others == 0;
}

/* A transposition, copy or conversion: a step that keeps every dimension of its operand. */
static int keeps_dims(const tpu_instr *v) {
  return v->noperands == 1 && (v->op == TPU_OP_TRANSPOSE || v->op == TPU_OP_COPY || v->op == TPU_OP_CONVERT);
}

/* keeps_dims, or a fusion of one operand whose every step from its root to its parameter does. */
static int keeps_dims_kernel(const tpu_instr *v) {
  if (v->op != TPU_OP_FUSION) return keeps_dims(v);
  if (v->noperands != 1 || !v->calls || !v->calls->root) return 0;
  const tpu_instr *r = v->calls->root;
  while (keeps_dims(r)) r = r->operands[0];
  return r->op == TPU_OP_PARAMETER;
}

/* Is the result of dot mm, which kernel m runs, an operand of another matmul with no step
 * between them but transpositions, copies and conversions (attention's PV contracted by the
 * output projection over its KV heads, group and head dimensions: llama's
 * bskgh,kghd->bsd)? Only then does the XLA TPU compiler choose a layout for PV's result that
 * makes PV read its probabilities relaid and store their producer whole (relaid_operand).
 * libtpu probes off the corpus (bench/fidelity/probes/gqa_mask.py, v5e/v4/v5p, B, KV, G > 1):
 * PV followed by the projection, or by a dot contracting h alone: a normalisation kernel of
 * its own, with a causal, a padding or no mask alike; PV's result returned, read elementwise,
 * or reshaped to [B, S, KV*G*H] before the projection: the normalisation in PV's kernel. */
static int result_contracted(const tpu__made_set *made, const tpu_uses *u, const tpu_instr *m, const tpu_instr *mm, int depth) {
  if (depth > 4 || m->shape.dtype == TPU_TUPLE) return 0;
  if (mm && mm != m) { /* inside PV's kernel: from the dot to its root */
    const tpu_instr *v = m->calls->root;
    while (v != mm && keeps_dims(v)) v = v->operands[0];
    if (v != mm) return 0;
  }
  for (int j = 0; j < u->nusers[m->id]; j++) {
    const tpu_instr *r = u->users[m->id][j], *rm = matmul_of(made, r);
    if (keeps_dims_kernel(r) && result_contracted(made, u, r, NULL, depth + 1)) return 1;
    if (!rm) continue;
    for (int k = 0; k < r->noperands; k++) {
      if (r->operands[k] != m) continue;
      if (rm == r) return k < 2;
      for (int s = 0; s < 2; s++) { /* inside the reader's kernel: from its parameter k to the dot */
        const tpu_instr *v = rm->operands[s];
        while (v->op != TPU_OP_PARAMETER && keeps_dims(v)) v = v->operands[0];
        if (v->op == TPU_OP_PARAMETER && v->index == k) return 1;
      }
    }
  }
  return 0;
}

/* Does a reduction read one of x's full-size inputs (x a softmax's normalisation: the row
 * maximum and row sum read its scores)? */
static int inputs_have_reduction(const tpu__made_set *made, const tpu_uses *u, const tpu_instr *x) {
  int reductions, others;
  full_input_readers(made, u, x, &reductions, &others);
  return reductions > 0;
}

/* Does x read, as an operand of at least its own size, a convolution's activations in the
 * convolution's layout (relayout.c tpu__conv_layout_value)? */
static int conv_layout_input(const tpu_instr *x) {
  int64_t n = tpu_shape_numel(&x->shape);
  for (int k = 0; k < x->noperands; k++) {
    const tpu_instr *o = x->operands[k];
    if (o->shape.dtype != TPU_TUPLE && tpu_shape_numel(&o->shape) >= n && tpu__conv_layout_value(o)) return 1;
  }
  return 0;
}

/* Logical bytes of an array (sub-byte types rounded up). */
static int64_t array_bytes(const tpu_shape *s) {
  if (s->dtype == TPU_TUPLE) return 0;
  return (tpu_shape_numel(s) * tpu_dtype_bits(s->dtype) + 7) / 8;
}

/* Does the XLA TPU compiler recompute elementwise kernel x in each of the k matmuls that read
 * it rather than store it once? Only when that moves fewer bytes: k kernels each reading x's
 * operands (k x In) against one kernel reading them and writing x, then k reads of x
 * (In + Out + k x Out), ties stored: (k - 1) In < (k + 1) Out. libtpu probes off the corpus
 * (bench/fidelity/probes/sgrad_dup.py, data/sgrad_dup.jsonl; v4/v5e/v5p/v6e alike, 3 shapes): a
 * softmax gradient dS = P (dP - rowsum) read by dQ and dK is recomputed in both with P, dP
 * bf16 (In 4 bytes an element, Out 2), all f32 (8, 4), bf16 to f32 (4, 4; also with 3 and 4
 * matmul readers) and bf16 P, dP with an int8 mask (5, 2); stored with P f32 and dP bf16 rounded
 * to bf16 (6, 2: the calibration corpus's attn_bwd_*_causal), both f32 rounded to bf16 (8, 2),
 * a third bf16 array (6, 2), and with 3 readers of bf16 (4, 2) or f32 (8, 4). A single array
 * streamed (a norm's scaling into Q, K, V) is recomputed in each. */
static int recompute_pays(const tpu_instr *x, int k) {
  int64_t in = 0, out = array_bytes(&x->shape);
  for (int j = 0; j < x->noperands; j++) in += array_bytes(&x->operands[j]->shape);
  return (int64_t)(k - 1) * in < (int64_t)(k + 1) * out;
}

/* Does another kernel read two of x's operands of x's size (a residual sum a + b that x
 * normalises and a kernel of its own sums the squares of)? The compiler stores that sum once
 * (its own byte rule: read by three kernels or more), so its matmuls stream one array, where
 * this pass has the add in each reader; x is then stored as before (its bytes stand in for
 * the sum's). A softmax gradient's P and dP are read together nowhere else (dP's own kernel
 * writes it; the matmuls that took a copy of x read them, and do not count). */
static int combined_elsewhere(const tpu__made_set *made, const tpu_uses *u, const tpu_instr *x) {
  int64_t n = tpu_shape_numel(&x->shape);
  for (int a = 0; a < x->noperands; a++) {
    const tpu_instr *oa = x->operands[a];
    if (oa->shape.dtype == TPU_TUPLE || tpu_shape_numel(&oa->shape) < n) continue;
    for (int j = 0; j < u->nusers[oa->id]; j++) {
      const tpu_instr *r = u->users[oa->id][j];
      if (r == x || matmul_of(made, r)) continue; /* a matmul that took a copy of x already */
      for (int b = 0; b < x->noperands; b++) {
        const tpu_instr *ob = x->operands[b];
        if (b == a || ob == oa || ob->shape.dtype == TPU_TUPLE || tpu_shape_numel(&ob->shape) < n) continue;
        for (int k = 0; k < r->noperands; k++)
          if (r->operands[k] == ob) return 1;
      }
    }
  }
  return 0;
}

/* An elementwise kernel this pass made (or one bare elementwise op) that only matmuls read,
 * each as an operand of its matmul: the first one takes a copy (the rest follow). With
 * several readers only when recomputing it moves fewer bytes (recompute_pays). */
static int prologue_pair(const tpu__made_set *made, const tpu_chip *chip, const tpu_comp *c, const tpu_uses *u, tpu_instr *x,
                         tpu_instr **y) {
  if (x == c->root || x->shape.dtype == TPU_TUPLE || u->nusers[x->id] < 1) return 0;
  if (tpu__fuse_own_kernel(x->op == TPU_OP_FUSION && x->calls && x->calls->root ? x->calls->root : x)) return 0;
  if (x->op == TPU_OP_FUSION) {
    if (!x->calls || !tpu__made_has(made, x->calls)) return 0;
    const char *kd = attr_value(x, "kind");
    if (!kd || strcmp(kd, "kLoop")) return 0;
  } else if (tpu__fuse_transcendental(x)) {
    return 0;
  } else if (!tpu__fuse_loop_fusible(x) || x->op == TPU_OP_CONSTANT || x->op == TPU_OP_IOTA || x->op == TPU_OP_BROADCAST ||
             x->op == TPU_OP_RESHAPE || x->op == TPU_OP_BITCAST || x->op == TPU_OP_COPY) {
    return 0; /* data movement alone stays with its own rules */
  }
  if (u->nusers[x->id] > 1 && (!recompute_pays(x, u->nusers[x->id]) || combined_elsewhere(made, u, x))) return 0;
  /* the batch of a convolution's input folded together (space-to-batch) is a copy of its own */
  const tpu_instr *xr = x->op == TPU_OP_FUSION ? x->calls->root : x;
  for (int j = 0; j < u->nusers[x->id]; j++) {
    const tpu_instr *m = u->users[x->id][j], *mm = matmul_of(made, m);
    if (!mm || (m->shape.dtype == TPU_TUPLE && !users_all_gte(u, m))) return 0;
    if (tpu__fuse_batch_relayout(mm, xr, 0)) return 0;
    /* a dot over a convolution's activations, which are in the convolution's layout (never
     * row-major), reads them relaid into its rows inside its kernel, and the compiler keeps
     * their elementwise producer (convnext's layer norm) a kernel of its own: 18 of 18 libtpu
     * probes off the corpus (bench/fidelity/probes/conv_norm_dot.py: a 7x7 depthwise or 3x3
     * convolution, its layer norm, the projection; v5e/v6e, B = 1 ... 8, 20 ... 40 wide), and
     * every such norm of the compiled families (convnext_fwd_b2/b4, whisper_enc_fwd_b8t500).
     * A convolution reading them (mobilenet's batch norm into the 1x1 convolution) keeps the
     * norm in its kernel. */
    if (mm->op == TPU_OP_DOT && conv_layout_input(x)) return 0;
    for (int k = 0; k < m->noperands; k++) {
      if (m->operands[k] == x && !feeds_matmul(made, m, k)) return 0;
      if (m->operands[k] == x && relaid_operand(chip, mm, fed_side(made, m, k)) && inputs_read_by_reductions(made, u, x) &&
          (!inputs_have_reduction(made, u, x) || result_contracted(made, u, m, mm, 0)))
        return 0;
    }
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
static tpu_status merge_prologue_one(tpu_builder *b, tpu_comp *c, tpu__made_set *made, const tpu_chip *chip, const tpu_uses *u,
                                     int *found) {
  for (int i = 0; !*found && i < c->ninstrs; i++) {
    tpu_instr *x = c->instrs[i], *y;
    if (!prologue_pair(made, chip, c, u, x, &y) || results(y) > 16) continue;
    *found = 1;
    return merge_pair(b, c, x, y, u, made, MERGE_COPY);
  }
  return TPU_OK;
}

/* A dot the XLA TPU compiler writes as a convolution of window 1 (dim_labels 0bf_io0->0bf):
 * no batch dimensions, its left operand's free dimensions two or more ([B,S,K] x [K,N], a
 * dense layer over a sequence). Its result's column sums join its kernel as a convolution's
 * do: bert_train_b16s128d256h4's FFN bias gradient (the sum of dY, bf16[16,128,1024], over
 * batch and sequence) is the second result of the compiled `fusion.122` (kOutput, 47,496
 * cycles on v4) with the convolution.16 that computes dY's matmul, and the bf16[256] one of
 * `fusion.120` the same, on v4 and v5e. A plain [M,K] x [K,N] dot stays a dot, with no sum
 * in its fusion in any compiled program. TPUSIM_NO_DOT_COLUMN_SUMS=1 leaves dots out. */
static int conv_dot(const tpu_instr *mm) {
  int off = tpu_env_flag("TPUSIM_NO_DOT_COLUMN_SUMS");
  if (off || mm->op != TPU_OP_DOT || mm->dot.lhs_batch.n != 0 || mm->noperands != 2) return 0;
  return mm->operands[0]->shape.rank - mm->dot.lhs_contract.n >= 2;
}

/* Is r, a reduction that keeps the minor dimension, one a convolution's kernel x takes
 * from its result tiles? The TPU compiler fuses a batch norm's per-channel sum of the
 * convolution's output (over batch and space, the channels minor) into the convolution
 * (its convert_reduce_fusion, a kOutput multi-output fusion, in every compiled families
 * m_resnet_basic / m_resnet_bottleneck / m_resnext / m_mobilenet_* / m_efficientnet
 * program); the variance's sum, which reads the mean back, stays its own kernel
 * (reads_row_stat). Grouped convolutions too, depthwise (m_mobilenet_*) or of several
 * input features a group: resnext_fwd_b8_28x28x512_g32's g32 convert_reduce_fusion returns
 * (f32[32,8], bf16[8,28,28,32,8]), the sum beside the split result (group_conv.c splits such
 * a kernel's convolution leaf; the variance's multiply_reduce_fusion reads it). And a dot the
 * compiler writes as a convolution (conv_dot). */
static int conv_column_sums(const tpu__made_set *made, const tpu_instr *x, const tpu_instr *r) {
  const tpu_instr *mm = matmul_of(made, x);
  if (!mm || (mm->op != TPU_OP_CONVOLUTION && !conv_dot(mm)) || r->operands[0]->shape.rank < 2) return 0;
  return r->shape.rank == 1 && r->shape.dims[0] == r->operands[0]->shape.dims[r->operands[0]->shape.rank - 1];
}

/* Does kernel y read a result of x smaller than the n elements it reduces (a row statistic
 * of x's result, broadcast back over the rows)? */
static int reads_row_stat(const tpu_instr *y, const tpu_instr *x, int64_t n) {
  for (int k = 0; k < y->noperands; k++) {
    int i;
    if (producer_of(y, k, &i) == x && tpu_shape_numel(&y->operands[k]->shape) < n) return 1;
  }
  return 0;
}

/* Finds one reduction or softmax step to fuse into a matmul's kernel and fuses it. */
static tpu_status merge_matmul_one(tpu_builder *b, tpu_comp *c, tpu__made_set *made, const tpu_chip *chip,
                                   const tpu_uses *u, reach_ctx *R, int *found) {
  for (int i = 0; !*found && i < c->ninstrs; i++) {
    tpu_instr *y = c->instrs[i], *x;
    if (y->shape.dtype == TPU_TUPLE && !users_all_gte(u, y)) continue;
    int k, idx, minor = 0;
    const tpu_instr *r = reduction_of(made, y, &k, &minor);
    int64_t row = 0;
    if (r) {
      /* a reduction of the matmul's result over its rows, and of nothing else of x's; one
       * that keeps the minor dimension only from a convolution (conv_column_sums) */
      x = producer_of(y, k, &idx);
      int64_t n = tpu_shape_numel(&r->operands[0]->shape);
      const char *xk = x->op == TPU_OP_FUSION && x->calls && tpu__made_has(made, x->calls) ? attr_value(x, "kind") : NULL;
      if (!minor && !conv_column_sums(made, x, r)) continue;
      if (!(matmul_of(made, x) || (xk && !strcmp(xk, "kLoop"))) || tpu_shape_numel(&y->operands[k]->shape) != n ||
          reads_row_stat(y, x, n))
        continue;
    } else {
      /* an elementwise step on the matmul's result and its row maximum */
      if (y->op != TPU_OP_FUSION || !y->calls || !tpu__made_has(made, y->calls)) continue;
      const char *kd = attr_value(y, "kind");
      if (!kd || strcmp(kd, "kLoop")) continue;
      tpu_instr *dummy;
      if (prologue_pair(made, chip, c, u, y, &dummy)) continue; /* it goes into the next matmul */
      x = NULL;
      for (int q = 0; q < y->noperands && !x; q++) {
        tpu_instr *p = producer_of(y, q, &idx);
        if (matmul_of(made, p) && p->shape.dtype == TPU_TUPLE && reads_row_max(y, p, &row)) x = p;
      }
      if (!x || row > MATMUL_ROW_MAX) continue;
    }
    if (x == y || (x->shape.dtype == TPU_TUPLE && !users_all_gte(u, x)) || results(x) + results(y) > 16) continue;
    if (reaches_around(R, y, x)) continue;
    *found = 1;
    return merge_pair(b, c, x, y, u, made, MERGE_ABSORB);
  }
  return TPU_OK;
}

/* Finds one pair of sibling fusions to merge and merges it; *found says whether. */
tpu_status tpu__fuse_merge_one(tpu_builder *b, tpu_comp *c, tpu__made_set *made, const tpu_chip *chip, int *found) {
  *found = 0;
  tpu_uses u;
  TPU_TRY(tpu_build_uses(b, c, &u));
  int n = c->ninstrs;
  reach_ctx R;
  space_memo M = {made, c, tpu_calloc((size_t)n + 1, sizeof *M.sp), tpu_calloc((size_t)n + 1, 1)};
  tpu_status st = reach_init(&R, c) && M.sp && M.done ? TPU_OK : TPU_FAIL(b->d, TPU_ERR_NOMEM, c->loc, "out of memory fusing");
  if (st == TPU_OK) st = merge_prologue_one(b, c, made, chip, &u, found);
  for (int i = 0; st == TPU_OK && !*found && i < n; i++) {
    const tpu_instr *a = c->instrs[i]; /* a large array two fusions read */
    if (a->shape.dtype == TPU_TUPLE || u.nusers[i] < 2) continue;
    for (int p = 0; p < u.nusers[i] && !*found; p++) {
      tpu_instr *x = u.users[i][p];
      const tpu_shape *sx = space_of(&M, x);
      if (!sx || tpu_shape_numel(&a->shape) < tpu_shape_numel(sx) || (x->shape.dtype == TPU_TUPLE && !users_all_gte(&u, x)))
        continue;
      for (int q = p + 1; q < u.nusers[i] && !*found; q++) {
        tpu_instr *y = u.users[i][q];
        const tpu_shape *sy = space_of(&M, y);
        if (y == x || !sy || !same_dims(sx, sy) || (y->shape.dtype == TPU_TUPLE && !users_all_gte(&u, y)))
          continue;
        /* a reduction and a fusion that only maps elements stay apart (probed: the
         * compiler merges two reductions over one array, or two elementwise fusions, but
         * not a column sum with an independent scaling of the same array) */
        if (results(x) + results(y) > 16 || reduces_of(&M, x) != reduces_of(&M, y))
          continue;
        if (reaches(&R, x, y) || reaches(&R, y, x)) continue;
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
    const tpu_shape *sy = space_of(&M, y);
    if (!sy || (y->shape.dtype == TPU_TUPLE && !users_all_gte(&u, y))) continue;
    for (int k = 0; k < y->noperands && !*found; k++) {
      int xi;
      tpu_instr *x = producer_of(y, k, &xi);
      if (x->op != TPU_OP_FUSION) continue;
      const tpu_shape *sx = space_of(&M, x);
      if (!sx || x == y || !same_dims(sx, sy) || (x->shape.dtype == TPU_TUPLE && !users_all_gte(&u, x))) continue;
      if (results(x) + results(y) > 16)
        continue;
      if (x->shape.dtype != TPU_TUPLE && u.nusers[x->id] < 2) continue;
      /* y must read a result of x element for element: a reduction's result read back
       * across its rows alone (a softmax's max in its exponent step) needs the whole
       * reduction first, and the compiler keeps the two kernels apart */
      int in_place = 0;
      for (int j = 0; j < y->noperands && !in_place; j++) {
        int xj;
        in_place = producer_of(y, j, &xj) == x && same_dims(&y->operands[j]->shape, sy);
      }
      if (!in_place) continue;
      if (reaches_around(&R, y, x)) continue;
      st = merge_pair(b, c, x, y, &u, made, MERGE_KEEP);
      *found = 1;
    }
  }
  /* A dynamic-update-slice and the computation of its update (XLA's in-place
   * dynamic-update-slice fusion, CanEmitFusedDynamicUpdateSliceInPlace: a loop fusion whose
   * root is the update of a parameter's buffer): a bare one whose update is a loop fusion's
   * result, or a reshape or bitcast of it read by the update alone, takes that fusion in; a
   * result something else reads too leaves it as well (multi-output). The compiled cumsum
   * scan runs each step's add and its update of the stacked outputs as one fusion. */
  for (int i = 0; st == TPU_OK && !*found && i < n; i++) {
    tpu_instr *y = c->instrs[i];
    if (y->op != TPU_OP_DYNAMIC_UPDATE_SLICE || y->noperands < 2) continue;
    tpu_instr *w = y->operands[1], *r = NULL, *x = w;
    if ((w->op == TPU_OP_RESHAPE || w->op == TPU_OP_BITCAST) && u.nusers[w->id] == 1) {
      r = w; /* merged first; the update then reads the merged fusion */
      x = w->operands[0];
    }
    if (x->op == TPU_OP_GET_TUPLE_ELEMENT) x = x->operands[0];
    int bare = x->op != TPU_OP_FUSION && x->op != TPU_OP_PARAMETER && x->op != TPU_OP_CONSTANT &&
               x->op != TPU_OP_GET_TUPLE_ELEMENT && tpu__fuse_loop_fusible(x); /* one elementwise op */
    if ((!bare && (!space_of(&M, x) || reduces_of(&M, x))) || x == y->operands[0] || results(x) + 1 > 16 ||
        (x->shape.dtype == TPU_TUPLE && !users_all_gte(&u, x)))
      continue;
    int more = !bare && tpu__fuse_dus_siblings(); /* a step's updates together */
    if (!bare && !more && x->calls->root->op == TPU_OP_DYNAMIC_UPDATE_SLICE) continue;
    if (!bare && !more && x->calls->root->op == TPU_OP_TUPLE) { /* else one in-place update a fusion */
      int has = 0;
      for (int k = 0; k < x->calls->root->noperands; k++) has |= x->calls->root->operands[k]->op == TPU_OP_DYNAMIC_UPDATE_SLICE;
      if (has) continue;
    }
    tpu_instr *z = r ? r : y;
    if (!z || reaches_around(&R, z, x)) continue;
    st = merge_pair(b, c, x, z, &u, made, MERGE_ABSORB);
    *found = 1;
  }
  if (st == TPU_OK && !*found) st = merge_matmul_one(b, c, made, chip, &u, &R, found);
  reach_free(&R);
  tpu_free(M.sp);
  tpu_free(M.done);
  tpu_build_uses_free(&u);
  if (st == TPU_OK && *found && tpu_build_remove_dead(b, c) < 0) st = b->d->status;
  return st;
}
