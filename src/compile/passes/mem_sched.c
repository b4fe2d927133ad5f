/* HLO pass `memory-schedule`: the order each computation's instructions run in, chosen as
 * the XLA compiler's default memory scheduler chooses it (docs/compiler.md, "The instruction
 * order"). Three candidate orders are built for every computation that runs as a sequence
 * (the entry, while bodies and conditions, called computations and conditional branches;
 * not fused ones):
 *   - post-order: the operands-first walk from the root that the module was finished with;
 *   - list: a greedy list schedule that runs next, of the instructions whose operands have
 *     run, the one freeing the most bytes less the bytes it defines (ties: more users, then
 *     the one that became ready last); scalars first;
 *   - DFS: a post-order walk from the root that visits first the operand with the most
 *     fan-out behind it (users beyond the first, summed over everything it depends on),
 *     then the one with the most bytes behind it, then by name;
 * and the one whose peak of live bytes is lowest (no fragmentation: the heap simulator's
 * minimum) is kept; on a tie the post-order stays. The peak counts each buffer from the
 * instruction that defines it to its last use (the root's to the end); a while, call or
 * conditional adds its computations' own peak while it runs. Tuples, get-tuple-element,
 * bitcasts and a while's result define nothing: they name their operands' buffers (a
 * while's state shares its input's buffers). Parameters and constants are not counted.
 * Asynchronous collectives and copies keep the latency-hiding order the XLA TPU compiler
 * gives them: a start runs as soon as its operands allow, a done as late as its users allow
 * (the list schedule's priorities; the other two orders keep them where they fall). On a
 * one-core chip, in every candidate, what feeds a reduce-scatter or all-reduce and does not
 * depend on a while loop runs before that loop, as in the XLA TPU compiler's order
 * (hoist_collective_feeds). */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "chip/chip.h"
#include "compile/compile.h"
#include "compile/passes/hlo_passes.h"
#include "ir/layout.h"

typedef struct {
  const tpu_comp *c;
  int n;
  int64_t *def;       /* bytes instruction i defines */
  int *own0, *nown;   /* its own buffers: own0[i] .. own0[i] + nown[i] - 1 (nown 0: none) */
  int64_t *bsize;     /* bytes of buffer b */
  int nbuf;
  int *use0, *nuse;   /* the buffers instruction i reads: uses[use0[i] .. use0[i] + nuse[i]) */
  int *uses;
  int *live_out;      /* buffer b is part of the root's value */
  int64_t *extra;     /* peak of the computations i runs, while it runs */
  int *nusers;        /* distinct users of i in c */
} msc;

static int64_t elem_bytes(const tpu_shape *s) {
  if (s->dtype == TPU_TOKEN) return 0;
  if (s->dtype != TPU_TUPLE) return tpu_shape_physical_bytes(s);
  int64_t t = 0;
  for (int k = 0; k < s->ntuple; k++) t += elem_bytes(&s->elems[k]);
  return t;
}

/* Whether `in` names its operands' buffers instead of defining its own. */
static int aliases(const tpu_instr *in) {
  switch (in->op) {
    case TPU_OP_PARAMETER:
    case TPU_OP_CONSTANT:
    case TPU_OP_TUPLE:
    case TPU_OP_GET_TUPLE_ELEMENT:
    case TPU_OP_BITCAST:
    case TPU_OP_WHILE:
    case TPU_OP_DYNAMIC_UPDATE_SLICE:
    case TPU_OP_ALL_GATHER_DONE:
    case TPU_OP_COLLECTIVE_PERMUTE_DONE:
    case TPU_OP_ALL_REDUCE_DONE:
    case TPU_OP_COPY_DONE: return 1;
    default: return 0;
  }
}

static int is_start(const tpu_instr *in) {
  return in->op == TPU_OP_ALL_GATHER_START || in->op == TPU_OP_COLLECTIVE_PERMUTE_START ||
         in->op == TPU_OP_ALL_REDUCE_START || in->op == TPU_OP_COPY_START;
}

static int is_done(const tpu_instr *in) {
  return in->op == TPU_OP_ALL_GATHER_DONE || in->op == TPU_OP_COLLECTIVE_PERMUTE_DONE ||
         in->op == TPU_OP_ALL_REDUCE_DONE || in->op == TPU_OP_COPY_DONE;
}

/* Appends to out[*no] (capacity cap) the buffers behind element `elem` of x (-1: all of it). */
static void sources(const msc *s, const tpu_instr *x, int elem, int *out, int *no, int cap, int depth) {
  if (depth > 64 || x->parent != s->c) return;
  int i = x->id;
  if (!aliases(x)) {
    int k0 = 0, k1 = s->nown[i];
    if (elem >= 0 && s->nown[i] > 1 && elem < s->nown[i]) k0 = elem, k1 = elem + 1;
    for (int k = k0; k < k1; k++) {
      int b = s->own0[i] + k, dup = 0;
      for (int j = 0; j < *no && !dup; j++) dup = out[j] == b;
      if (!dup && *no < cap) out[(*no)++] = b;
    }
    return;
  }
  switch (x->op) {
    case TPU_OP_TUPLE:
      if (elem >= 0 && elem < x->noperands) sources(s, x->operands[elem], -1, out, no, cap, depth + 1);
      else
        for (int k = 0; k < x->noperands; k++) sources(s, x->operands[k], -1, out, no, cap, depth + 1);
      return;
    case TPU_OP_GET_TUPLE_ELEMENT: sources(s, x->operands[0], (int)x->index, out, no, cap, depth + 1); return;
    case TPU_OP_BITCAST:
    case TPU_OP_DYNAMIC_UPDATE_SLICE:
    case TPU_OP_WHILE: sources(s, x->operands[0], elem, out, no, cap, depth + 1); return;
    case TPU_OP_ALL_GATHER_DONE:
    case TPU_OP_COLLECTIVE_PERMUTE_DONE: {
      const tpu_instr *st = x->operands[0];
      sources(s, st, st->shape.dtype == TPU_TUPLE && st->shape.ntuple >= 2 ? 1 : -1, out, no, cap, depth + 1);
      return;
    }
    case TPU_OP_COPY_DONE: sources(s, x->operands[0], 0, out, no, cap, depth + 1); return;
    case TPU_OP_ALL_REDUCE_DONE: sources(s, x->operands[0], -1, out, no, cap, depth + 1); return;
    default: return; /* parameters, constants */
  }
}

/* Peak live bytes of order[0..n). */
static int64_t peak_of(const msc *s, tpu_instr *const *order, int *left) {
  for (int b = 0; b < s->nbuf; b++) left[b] = s->live_out[b];
  for (int i = 0; i < s->n; i++)
    for (int k = 0; k < s->nuse[i]; k++) left[s->uses[s->use0[i] + k]]++;
  int64_t live = 0, peak = 0;
  for (int p = 0; p < s->n; p++) {
    int i = order[p]->id;
    live += s->def[i];
    if (live + s->extra[i] > peak) peak = live + s->extra[i];
    for (int k = 0; k < s->nuse[i]; k++) {
      int b = s->uses[s->use0[i] + k];
      if (--left[b] == 0) live -= s->bsize[b];
    }
    for (int k = 0; k < s->nown[i]; k++)
      if (left[s->own0[i] + k] == 0) live -= s->bsize[s->own0[i] + k]; /* never read */
  }
  return peak;
}

typedef struct {
  int64_t freed, users;
} prio;

static int prio_less(prio a, prio b) { return a.freed != b.freed ? a.freed < b.freed : a.users < b.users; }

static prio priority(const msc *s, const tpu_instr *in, const int *left) {
  prio p;
  int i = in->id;
  if (is_start(in) || (in->shape.dtype != TPU_TUPLE && in->shape.dtype != TPU_TOKEN && tpu_shape_numel(&in->shape) == 1)) {
    p.freed = p.users = INT64_MAX;
    return p;
  }
  if (is_done(in)) {
    p.freed = p.users = INT64_MIN;
    return p;
  }
  int64_t freed = 0;
  for (int k = 0; k < s->nuse[i]; k++) {
    int b = s->uses[s->use0[i] + k];
    if (left[b] == 1) freed += s->bsize[b];
  }
  p.freed = freed - s->def[i];
  p.users = s->nusers[i];
  return p;
}

/* The list schedule into out[0..n). */
static tpu_status list_order(const msc *s, tpu_instr **out) {
  int n = s->n;
  const tpu_comp *c = s->c;
  int *left = tpu_malloc(sizeof *left * (size_t)(s->nbuf + 1));
  int *preds = tpu_calloc((size_t)n + 1, sizeof *preds);
  int *ready = tpu_malloc(sizeof *ready * (size_t)(n + 1));
  long *seq = tpu_malloc(sizeof *seq * (size_t)(n + 1));
  prio *pr = tpu_malloc(sizeof *pr * (size_t)(n + 1));
  /* users[user0[i] ..) : the distinct users of i */
  int *user0 = tpu_malloc(sizeof *user0 * (size_t)(n + 1));
  int total = 0;
  for (int i = 0; i < n; i++) total += c->instrs[i]->noperands;
  int *users = tpu_malloc(sizeof *users * (size_t)(total + 1));
  int *fill = tpu_calloc((size_t)n + 1, sizeof *fill);
  if (!left || !preds || !ready || !seq || !pr || !user0 || !users || !fill) {
    tpu_free(left), tpu_free(preds), tpu_free(ready), tpu_free(seq), tpu_free(pr), tpu_free(user0), tpu_free(users),
        tpu_free(fill);
    return TPU_ERR_NOMEM;
  }
  for (int b = 0; b < s->nbuf; b++) left[b] = s->live_out[b];
  for (int i = 0; i < n; i++)
    for (int k = 0; k < s->nuse[i]; k++) left[s->uses[s->use0[i] + k]]++;
  int acc = 0;
  for (int i = 0; i < n; i++) user0[i] = acc, acc += s->nusers[i];
  for (int i = 0; i < n; i++) {
    const tpu_instr *in = c->instrs[i];
    for (int k = 0; k < in->noperands; k++) {
      const tpu_instr *o = in->operands[k];
      int dup = 0;
      for (int j = 0; j < k && !dup; j++) dup = in->operands[j] == o;
      if (dup || o->parent != c) continue;
      preds[i]++;
      users[user0[o->id] + fill[o->id]++] = i;
    }
  }
  int nready = 0, m = 0;
  long clock = 0;
  for (int p = 0; p < n; p++) { /* the module's order, so ties among the first keep it */
    int i = c->order[p]->id;
    if (preds[i] == 0) {
      ready[nready++] = i;
      seq[i] = clock++;
      pr[i] = priority(s, c->instrs[i], left);
    }
  }
  while (nready) {
    int best = 0;
    for (int r = 1; r < nready; r++) {
      int a = ready[r], b = ready[best];
      if (prio_less(pr[b], pr[a]) || (!prio_less(pr[a], pr[b]) && seq[a] > seq[b])) best = r;
    }
    int i = ready[best];
    ready[best] = ready[--nready];
    out[m++] = c->instrs[i];
    int touched = 0;
    for (int k = 0; k < s->nuse[i]; k++)
      if (--left[s->uses[s->use0[i] + k]] == 1) touched = 1;
    for (int k = 0; k < fill[i]; k++) {
      int u = users[user0[i] + k];
      if (--preds[u] == 0) {
        ready[nready++] = u;
        seq[u] = clock++;
        pr[u] = priority(s, c->instrs[u], left);
      }
    }
    if (touched)
      for (int r = 0; r < nready; r++) pr[ready[r]] = priority(s, c->instrs[ready[r]], left);
  }
  tpu_free(left), tpu_free(preds), tpu_free(ready), tpu_free(seq), tpu_free(pr), tpu_free(user0), tpu_free(users),
      tpu_free(fill);
  return m == n ? TPU_OK : TPU_ERR_INVALID;
}

/* The DFS schedule into out[0..n). */
typedef struct {
  int64_t extra_users, total;
} dstat;

typedef struct {
  dstat st;
  const tpu_instr *in;
} kid;

static int cmp_visit(const void *pa, const void *pb) {
  const kid *a = pa, *b = pb;
  if (a->st.extra_users != b->st.extra_users) return a->st.extra_users > b->st.extra_users ? -1 : 1;
  if (a->st.total != b->st.total) return a->st.total > b->st.total ? -1 : 1;
  return strcmp(a->in->name, b->in->name);
}

static tpu_status dfs_order(const msc *s, tpu_instr **out) {
  int n = s->n;
  const tpu_comp *c = s->c;
  dstat *st = tpu_calloc((size_t)n + 1, sizeof *st);
  unsigned char *state = tpu_calloc((size_t)n + 1, 1);
  int total = 0;
  for (int i = 0; i < n; i++) total += c->instrs[i]->noperands;
  kid *kids = tpu_malloc(sizeof *kids * (size_t)(total + 1));
  int *kid0 = tpu_malloc(sizeof *kid0 * (size_t)(n + 1)), *nkid = tpu_calloc((size_t)n + 1, sizeof *nkid);
  int *stack = tpu_malloc(sizeof *stack * (size_t)(2 * n + 2));
  if (!st || !state || !kids || !kid0 || !nkid || !stack) {
    tpu_free(st), tpu_free(state), tpu_free(kids), tpu_free(kid0), tpu_free(nkid), tpu_free(stack);
    return TPU_ERR_NOMEM;
  }
  int64_t cum = 0;
  for (int p = 0; p < n; p++) { /* c->order is operands first */
    const tpu_instr *in = c->order[p];
    int i = in->id;
    if (in->op == TPU_OP_PARAMETER || in->op == TPU_OP_CONSTANT) continue;
    st[i].extra_users = s->nusers[i] > 0 ? s->nusers[i] - 1 : 0;
    st[i].total = s->def[i];
    cum += s->def[i];
    for (int k = 0; k < in->noperands; k++) {
      const tpu_instr *o = in->operands[k];
      int dup = 0;
      for (int j = 0; j < k && !dup; j++) dup = in->operands[j] == o;
      if (dup || o->parent != c) continue;
      st[i].extra_users += st[o->id].extra_users;
      st[i].total += st[o->id].total;
    }
    if (st[i].total > cum) st[i].total = cum;
    if (st[i].extra_users > n) st[i].extra_users = n;
  }
  int acc = 0;
  for (int i = 0; i < n; i++) {
    const tpu_instr *in = c->instrs[i];
    kid0[i] = acc;
    for (int k = 0; k < in->noperands; k++) {
      const tpu_instr *o = in->operands[k];
      int dup = 0;
      for (int j = 0; j < k && !dup; j++) dup = in->operands[j] == o;
      if (!dup && o->parent == c) {
        kids[acc + nkid[i]].in = o;
        kids[acc + nkid[i]++].st = st[o->id];
      }
    }
    acc += nkid[i];
    qsort(kids + kid0[i], (size_t)nkid[i], sizeof *kids, cmp_visit);
  }
  int m = 0;
  for (int p = -1; p < n; p++) {
    int start = p < 0 ? c->root->id : c->order[p]->id;
    if (state[start]) continue;
    int sp = 0;
    stack[sp++] = start, stack[sp++] = 0;
    state[start] = 1;
    while (sp) {
      int i = stack[sp - 2], k = stack[sp - 1];
      if (k < nkid[i]) {
        stack[sp - 1] = k + 1;
        int o = kids[kid0[i] + k].in->id;
        if (!state[o]) {
          state[o] = 1;
          stack[sp++] = o, stack[sp++] = 0;
        }
      } else {
        out[m++] = c->instrs[i];
        sp -= 2;
      }
    }
  }
  tpu_free(st), tpu_free(state), tpu_free(kids), tpu_free(kid0), tpu_free(nkid), tpu_free(stack);
  return m == n ? TPU_OK : TPU_ERR_INVALID;
}


/* On a one-core chip the XLA TPU compiler computes the operand of a gradient collective
 * before a while loop the operand does not depend on, though the collective's result is
 * first read after the loop: the LM head's weight gradient, a [d_model, vocab] matmul the
 * backward layer loop does not read, is computed with the rest of the LM head before that
 * loop and held across it (libtpu's buffer assignment and live ranges of the planner's v5e
 * LLaMA-7B steps, bench/plan_memory: plan/llama7b_L2_1x8x1_noremat, _remat and
 * llama7b_L2_2x2x2_noremat, the `gwout` fusion before the backward `while`). On v5p (two
 * TensorCores) it runs after the loop (plan/mt32b_L2_1x2x4_noremat, and the held-out
 * llama70b_L2_1x4x2_noremat): the rule is not applied on a megacore chip. So in every
 * candidate order of a one-core chip, what feeds a reduce-scatter or all-reduce of the
 * computation (transitively; the collective itself stays put) and does not depend on a
 * while loop runs before that loop, in the order it had.
 * feeds[i]: instruction i feeds such a collective. Rewrites ord[0..n) in place. */
static int is_grad_collective(const tpu_instr *in) {
  return in->op == TPU_OP_REDUCE_SCATTER || in->op == TPU_OP_ALL_REDUCE || in->op == TPU_OP_ALL_REDUCE_START;
}

static void hoist_collective_feeds(const tpu_comp *c, tpu_instr **ord, const unsigned char *feeds, unsigned char *after,
                                   tpu_instr **tmp) {
  int n = c->ninstrs;
  for (int p = 0; p < n; p++) {
    if (ord[p]->op != TPU_OP_WHILE) continue;
    /* after[i]: i depends on the loop at p (the loop itself included) */
    memset(after, 0, (size_t)n);
    after[ord[p]->id] = 1;
    int moved = 0;
    for (int q = p + 1; q < n; q++) {
      const tpu_instr *in = ord[q];
      for (int k = 0; k < in->noperands && !after[in->id]; k++)
        if (in->operands[k]->parent == c && after[in->operands[k]->id]) after[in->id] = 1;
      if (!after[in->id] && feeds[in->id]) tmp[moved++] = ord[q];
    }
    if (!moved) continue;
    /* ord[p..n) becomes: the moved ones, the loop, the rest in their order */
    tpu_instr *loop = ord[p];
    for (int q = n - 1, d = n - 1; q > p; q--) /* the rest, packed at the end */
      if (after[ord[q]->id] || !feeds[ord[q]->id]) ord[d--] = ord[q];
    ord[p + moved] = loop;
    memcpy(ord + p, tmp, sizeof *tmp * (size_t)moved);
    p += moved; /* the loop now stands at p */
  }
}

static tpu_status schedule_comp(tpu_module *m, tpu_comp *c, int64_t *peaks, int depth, int hoist, tpu_diag *d);

static int64_t callee_peak(tpu_module *m, tpu_comp *k, int64_t *peaks, int depth, int hoist, tpu_diag *d,
                           tpu_status *st) {
  if (!k) return 0;
  if (peaks[k->index] < 0 && *st == TPU_OK) *st = schedule_comp(m, k, peaks, depth + 1, hoist, d);
  return peaks[k->index] > 0 ? peaks[k->index] : 0;
}

static tpu_status schedule_comp(tpu_module *m, tpu_comp *c, int64_t *peaks, int depth, int hoist, tpu_diag *d) {
  if (depth > 64) return TPU_OK;
  peaks[c->index] = 0; /* a cycle of calls reads 0 */
  int n = c->ninstrs;
  if (n <= 0 || c->norder != n) return TPU_OK;
  for (int i = 0; i < n; i++)
    if (c->instrs[i]->id != i) return TPU_OK;
  tpu_status st = TPU_OK;
  msc s;
  memset(&s, 0, sizeof s);
  s.c = c;
  s.n = n;
  s.def = tpu_calloc((size_t)n + 1, sizeof *s.def);
  s.own0 = tpu_calloc((size_t)n + 1, sizeof *s.own0);
  s.nown = tpu_calloc((size_t)n + 1, sizeof *s.nown);
  s.use0 = tpu_calloc((size_t)n + 1, sizeof *s.use0);
  s.nuse = tpu_calloc((size_t)n + 1, sizeof *s.nuse);
  s.extra = tpu_calloc((size_t)n + 1, sizeof *s.extra);
  s.nusers = tpu_calloc((size_t)n + 1, sizeof *s.nusers);
  tpu_instr **cand[2] = {tpu_malloc(sizeof(tpu_instr *) * ((size_t)n + 1)), tpu_malloc(sizeof(tpu_instr *) * ((size_t)n + 1))};
  int nbuf = 0;
  for (int i = 0; s.nown && i < n; i++) {
    const tpu_instr *in = c->instrs[i];
    if (aliases(in)) continue;
    s.nown[i] = in->shape.dtype == TPU_TUPLE && in->shape.ntuple > 0 ? in->shape.ntuple : 1;
    s.own0[i] = nbuf;
    nbuf += s.nown[i];
  }
  s.nbuf = nbuf;
  s.bsize = tpu_calloc((size_t)nbuf + 1, sizeof *s.bsize);
  s.live_out = tpu_calloc((size_t)nbuf + 1, sizeof *s.live_out);
  int cap = nbuf + 1;
  int *tmp = tpu_malloc(sizeof *tmp * (size_t)cap);
  int *left = tpu_malloc(sizeof *left * (size_t)cap);
  if (!s.def || !s.own0 || !s.nown || !s.use0 || !s.nuse || !s.extra || !s.nusers || !cand[0] || !cand[1] || !s.bsize ||
      !s.live_out || !tmp || !left)
    st = TPU_ERR_NOMEM;
  for (int i = 0; st == TPU_OK && i < n; i++) {
    const tpu_instr *in = c->instrs[i];
    for (int k = 0; k < s.nown[i]; k++) {
      const tpu_shape *e = in->shape.dtype == TPU_TUPLE && in->shape.ntuple > 0 ? &in->shape.elems[k] : &in->shape;
      s.bsize[s.own0[i] + k] = elem_bytes(e);
      s.def[i] += s.bsize[s.own0[i] + k];
    }
    for (int k = 0; k < in->noperands; k++) {
      const tpu_instr *o = in->operands[k];
      int dup = 0;
      for (int j = 0; j < k && !dup; j++) dup = in->operands[j] == o;
      if (!dup && o->parent == c) s.nusers[o->id]++;
    }
  }
  /* the buffers each instruction reads */
  int nuses = 0, capuses = 0;
  for (int i = 0; st == TPU_OK && i < n; i++) {
    const tpu_instr *in = c->instrs[i];
    int no = 0;
    for (int k = 0; k < in->noperands; k++) sources(&s, in->operands[k], -1, tmp, &no, cap, 0);
    if (nuses + no > capuses) {
      int nc = (capuses ? capuses * 2 : 1024) + no;
      int *g = tpu_realloc(s.uses, sizeof *g * (size_t)nc);
      if (!g) {
        st = TPU_ERR_NOMEM;
        break;
      }
      s.uses = g;
      capuses = nc;
    }
    s.use0[i] = nuses;
    s.nuse[i] = no;
    if (no) memcpy(s.uses + nuses, tmp, sizeof *tmp * (size_t)no);
    nuses += no;
  }
  if (st == TPU_OK) {
    int no = 0;
    sources(&s, c->root, -1, tmp, &no, cap, 0);
    for (int k = 0; k < no; k++) s.live_out[tmp[k]] = 1;
  }
  /* what the computations each instruction runs need while it runs */
  for (int i = 0; st == TPU_OK && i < n; i++) {
    tpu_instr *in = c->instrs[i];
    if (in->op == TPU_OP_WHILE)
      s.extra[i] = callee_peak(m, in->body, peaks, depth, hoist, d, &st) +
                   callee_peak(m, in->condition, peaks, depth, hoist, d, &st);
    else if (in->op == TPU_OP_CALL)
      s.extra[i] = callee_peak(m, in->to_apply, peaks, depth, hoist, d, &st);
    else if (in->op == TPU_OP_CONDITIONAL)
      for (int b = 0; b < in->nbranches; b++) {
        int64_t p = callee_peak(m, in->branches[b], peaks, depth, hoist, d, &st);
        if (p > s.extra[i]) s.extra[i] = p;
      }
  }
  if (st == TPU_OK && !s.uses) s.uses = tpu_malloc(sizeof *s.uses);
  if (st == TPU_OK && !s.uses) st = TPU_ERR_NOMEM;
  /* the collective feeds a while loop may not delay (hoist_collective_feeds) */
  unsigned char *feeds = NULL, *after = NULL;
  tpu_instr **post = NULL, **tmpi = NULL;
  if (st == TPU_OK) {
    int nwhile = 0, ncoll = 0;
    for (int i = 0; i < n; i++) nwhile += c->instrs[i]->op == TPU_OP_WHILE, ncoll += is_grad_collective(c->instrs[i]);
    if (hoist && nwhile && ncoll) {
      feeds = tpu_calloc((size_t)n + 1, 1), after = tpu_calloc((size_t)n + 1, 1);
      post = tpu_malloc(sizeof *post * ((size_t)n + 1)), tmpi = tpu_malloc(sizeof *tmpi * ((size_t)n + 1));
      if (!feeds || !after || !post || !tmpi) st = TPU_ERR_NOMEM;
      for (int p = n - 1; st == TPU_OK && p >= 0; p--) { /* users before operands */
        const tpu_instr *in = c->order[p];
        if (!feeds[in->id] && !is_grad_collective(in)) continue;
        for (int k = 0; k < in->noperands; k++)
          if (in->operands[k]->parent == c) feeds[in->operands[k]->id] = 1;
      }
      if (st == TPU_OK) {
        memcpy(post, c->order, sizeof *post * (size_t)n);
        hoist_collective_feeds(c, post, feeds, after, tmpi);
      }
    }
  }
  if (st == TPU_OK) {
    /* candidates: 0 list, 1 DFS; the post-order stays on a tie */
    tpu_instr **base = post ? post : c->order;
    int64_t best = peak_of(&s, base, left);
    int pick = post && memcmp(post, c->order, sizeof *post * (size_t)n) ? 2 : -1;
    for (int k = 0; st == TPU_OK && k < 2; k++) {
      tpu_status r = k == 0 ? list_order(&s, cand[k]) : dfs_order(&s, cand[k]);
      if (r == TPU_ERR_NOMEM) st = r;
      if (r != TPU_OK) continue;
      if (feeds) hoist_collective_feeds(c, cand[k], feeds, after, tmpi);
      int64_t p = peak_of(&s, cand[k], left);
      if (p < best) best = p, pick = k;
    }
    if (st == TPU_OK && pick == 2) {
      c->mem_order = tpu_arena_alloc(&m->arena, sizeof *c->mem_order * (size_t)n);
      if (c->mem_order) memcpy(c->mem_order, post, sizeof *c->mem_order * (size_t)n);
      else st = TPU_ERR_NOMEM;
    } else if (st == TPU_OK && pick >= 0) {
      c->mem_order = tpu_arena_alloc(&m->arena, sizeof *c->mem_order * (size_t)n);
      if (c->mem_order) memcpy(c->mem_order, cand[pick], sizeof *c->mem_order * (size_t)n);
      else st = TPU_ERR_NOMEM;
    }
    peaks[c->index] = best;
  }
  tpu_free(s.def), tpu_free(s.own0), tpu_free(s.nown), tpu_free(s.use0), tpu_free(s.nuse), tpu_free(s.extra);
  tpu_free(s.nusers), tpu_free(s.bsize), tpu_free(s.live_out), tpu_free(s.uses), tpu_free(tmp), tpu_free(left);
  tpu_free(cand[0]), tpu_free(cand[1]);
  tpu_free(feeds), tpu_free(after), tpu_free(post), tpu_free(tmpi);
  if (st == TPU_ERR_NOMEM) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory scheduling '%s'", c->name);
  return st;
}

tpu_status tpu__pass_mem_schedule(tpu_module *m, const tpu_compile_opts *o, tpu_diag *d) {
  int hoist = !o || !o->chip || o->chip->tensorcores <= 1; /* one-core chips: hoist_collective_feeds */
  if (!m->entry) return TPU_OK;
  int64_t *peaks = tpu_malloc(sizeof *peaks * (size_t)(m->ncomps + 1));
  if (!peaks) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory scheduling the module");
  for (int i = 0; i < m->ncomps; i++) peaks[i] = -1;
  tpu_status st = schedule_comp(m, m->entry, peaks, 0, hoist, d);
  tpu_free(peaks);
  return st;
}
