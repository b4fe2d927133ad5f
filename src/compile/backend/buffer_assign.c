/* Back-end pass `buffer-assign`: liveness over the flattened schedule, memory-space
 * assignment (which intermediate values stay in VMEM, vmem_assign.c) and HBM buffers as the
 * XLA TPU compiler allocates them for the rest; fails when the program cannot fit the chip's HBM. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "compile/backend/backend.h"
#include "ir/collective.h"


/* Buffer assignment as the XLA TPU compiler allocates (its BufferAssignment and heap
 * simulator; docs/compiler.md, "Buffer assignment"):
 *  - entry parameters are the argument allocations, live through the step; the values the
 *    step returns are output allocations; constants are part of the program image;
 *  - every other value is a temporary, and temporaries share one heap, packed by live range
 *    as XLA's heap simulator packs it: GlobalDecreasingSizeBestFitHeap, the buffers taken
 *    largest first (then longest lived) or longest lived first (then largest), each at the
 *    smallest free gap among the buffers placed that overlap it in time, the smaller of the
 *    two heaps kept (ChooseBestHeapAlgorithm over kSpatial and kTemporal);
 *  - a while loop's state is one set of buffers: the loop's input, its body's parameter, what
 *    its body returns and the loop's result share them where XLA's copy insertion needs no
 *    copy: an element the body passes through unchanged always, an element the body replaces
 *    when the input dies into the loop and the body writes the new value once nothing reads
 *    the old one (a dynamic-update-slice into a loop-carried stack: in place);
 *  - an output the module's input_output_alias gives to a parameter (donation) is written
 *    into that parameter's buffer when the parameter is no longer read;
 *  - a buffer whose layout names memory space S(5) (host memory: XLA's host offload of
 *    saved activations) takes no HBM.
 * The program records the argument, output, temp and alias bytes as the compiler's
 * memory_analysis() does; the HBM a chip needs is argument + output − alias + temp (+ the
 * constants). */

/* The instruction owning leaf `leaf` of `in`'s value (following aliases), or NULL. */
static const tpu_instr *owner_of(const tpu__be *be, const tpu_instr *in, int leaf, int depth, int *oleaf) {
  if (!in || depth > 256) return NULL;
  const tpu__kinfo *k = tpu__be_info(be, in);
  if (!k) return NULL;
  if (k->own) {
    *oleaf = leaf;
    return leaf < k->nleaves ? in : NULL;
  }
  switch (in->op) {
    case TPU_OP_TUPLE:
      for (int e = 0; e < in->noperands; e++) {
        int lo = tpu__leaf_offset(&in->shape, e), n = tpu__leaves(&in->operands[e]->shape);
        if (leaf >= lo && leaf < lo + n) return owner_of(be, in->operands[e], leaf - lo, depth + 1, oleaf);
      }
      return NULL;
    case TPU_OP_GET_TUPLE_ELEMENT:
      return owner_of(be, in->operands[0], tpu__leaf_offset(&in->operands[0]->shape, (int)in->index) + leaf,
                      depth + 1, oleaf);
    case TPU_OP_COPY_START: /* (copy, operand, context): both arrays are the operand's buffer */
      return leaf <= 1 ? owner_of(be, in->operands[0], 0, depth + 1, oleaf) : NULL;
    case TPU_OP_COPY_DONE: return owner_of(be, in->operands[0], 0, depth + 1, oleaf);
    case TPU_OP_SLICE_START: /* ((operand), slice, context): the slice lies in the operand's buffer */
      return leaf <= 1 ? owner_of(be, in->operands[0], 0, depth + 1, oleaf) : NULL;
    case TPU_OP_SLICE_DONE: return owner_of(be, in->operands[0], 1, depth + 1, oleaf);
    case TPU_OP_ALL_REDUCE_DONE:
    case TPU_OP_ALL_GATHER_DONE:
    case TPU_OP_COLLECTIVE_PERMUTE_DONE: /* the result part of its -start: (operands, results, ...) */
      return owner_of(be, in->operands[0],
                      in->operands[0]->shape.dtype == TPU_TUPLE ? tpu__leaf_offset(&in->operands[0]->shape, 1) + leaf
                                                                : leaf,
                      depth + 1, oleaf);
    case TPU_OP_WHILE:
      return owner_of(be, in->body->root, leaf, depth + 1, oleaf);
    case TPU_OP_CALL:
      return owner_of(be, in->to_apply->root, leaf, depth + 1, oleaf);
    case TPU_OP_CONDITIONAL:
      return in->nbranches ? owner_of(be, in->branches[0]->root, leaf, depth + 1, oleaf) : NULL;
    case TPU_OP_PARAMETER: {
      int ci = tpu__be_comp_index(be, in->parent);
      const tpu_instr *c = ci >= 0 ? be->caller[ci] : NULL;
      if (!c) return NULL;
      if (c->op == TPU_OP_WHILE) return owner_of(be, c->operands[0], leaf, depth + 1, oleaf);
      if (c->op == TPU_OP_CALL)
        return in->index < c->noperands ? owner_of(be, c->operands[in->index], leaf, depth + 1, oleaf) : NULL;
      for (int b = 0; b < c->nbranches; b++)
        if (c->branches[b] == in->parent && b + 1 < c->noperands)
          return owner_of(be, c->operands[b + 1], leaf, depth + 1, oleaf);
      return NULL;
    }
    default:
      return in->noperands ? owner_of(be, in->operands[0], leaf, depth + 1, oleaf) : NULL;
  }
}

int tpu__be_buffer_of(const tpu__be *be, const tpu_instr *in, int leaf) {
  int ol = 0;
  const tpu_instr *o = owner_of(be, in, leaf, 0, &ol);
  const tpu__kinfo *k = o ? tpu__be_info(be, o) : NULL;
  return k && k->hbm0 >= 0 ? k->hbm0 + ol : -1;
}

/* Positions: each instruction gets one when it runs; a while/call/conditional gets one
 * after its computations, so whatever it passes in lives through them. def[] keeps each
 * instruction's own position, wstart[] a while's first one (before its condition). */
static void place(tpu__be *be, const tpu_comp *c, int depth, int64_t *def, int64_t *wstart) {
  if (depth > 64) return;
  for (int i = 0; i < c->norder; i++) {
    const tpu_instr *in = c->mem_order ? c->mem_order[i] : c->order[i];
    if (in->op == TPU_OP_WHILE) {
      int64_t start = be->npos + 1;
      wstart[tpu__be_index(be, in)] = start;
      place(be, in->condition, depth + 1, def, wstart);
      place(be, in->body, depth + 1, def, wstart);
      /* What the body returns is the next iteration's input: its buffers must not take
       * the place of anything the body writes before it, so they live from the start of
       * the loop's region (unless they share the loop's buffers: loop_state). */
      const tpu_instr *r = in->body->root;
      for (int o = 0; r->op == TPU_OP_TUPLE && o < r->noperands; o++) {
        tpu__kinfo *ko = tpu__be_info(be, r->operands[o]);
        if (ko && ko->own && r->operands[o]->parent == in->body) ko->pos = start;
      }
      if (r->op != TPU_OP_TUPLE) {
        tpu__kinfo *kr = tpu__be_info(be, r);
        if (kr && kr->own) kr->pos = start;
      }
    } else if (in->op == TPU_OP_CONDITIONAL) {
      for (int b = 0; b < in->nbranches; b++) place(be, in->branches[b], depth + 1, def, wstart);
    } else if (in->op == TPU_OP_CALL) {
      place(be, in->to_apply, depth + 1, def, wstart);
    }
    tpu__kinfo *k = tpu__be_info(be, in);
    k->pos = ++be->npos;
    def[tpu__be_index(be, in)] = k->pos;
    if ((in->op == TPU_OP_PARAMETER && c->is_entry) || in->op == TPU_OP_CONSTANT) k->pos = 0;
  }
}

typedef struct {
  int64_t pos;
  int idx;
  const tpu_instr *in;
} byp;

static int cmp_pos(const void *a, const void *b) {
  const byp *x = a, *y = b;
  if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
  return x->idx - y->idx;
}

static void bump(int64_t *x, int64_t v) {
  if (v > *x) *x = v;
}

/* The entry parameter an input_output_alias entry gives output leaf `leaf` to (text such
 * as "{ {0}: (1, {}, may-alias), {1}: (2, {}, must-alias) }"; "{}" names a lone output), or -1. */
static int donated_to(const tpu_module *m, int leaf) {
  for (int i = 0; i < m->nattrs; i++) {
    if (strcmp(m->attrs[i].name, "input_output_alias") != 0 || !m->attrs[i].value) continue;
    const char *p = m->attrs[i].value;
    while ((p = strchr(p, '{')) != NULL) {
      p++;
      while (*p == ' ') p++;
      if (*p == '{') continue; /* the list's own brace */
      long out = 0;
      if (*p != '}') out = strtol(p, NULL, 10);
      const char *c = strstr(p, ": (");
      if (!c) return -1;
      long par = strtol(c + 3, NULL, 10);
      if (out == leaf) return (int)par;
      p = strchr(c, ')');
      if (!p) return -1;
    }
  }
  return -1;
}

/* A value: one leaf of an instruction with an HBM buffer. Values joined into one buffer
 * (loop state, donation) share a root (union-find) and one offset. */
enum { CLS_TEMP, CLS_CONST, CLS_OUT, CLS_ARG, CLS_HOST };
typedef struct {
  const tpu_instr *in;
  int leaf, root, cls;
  int nlo; /* the buffer holds a value that must not live out (must_not_live_out) */
  int64_t size, start, end, off;
  int nval; /* a root: the values its buffer holds (loop state, donation: several); pack_temps */
} val;

static int find(val *v, int i) {
  while (v[i].root != i) i = v[i].root = v[v[i].root].root;
  return i;
}

static int find_c(const val *v, int i) {
  while (v[i].root != i) i = v[i].root;
  return i;
}

static void join(val *v, int a, int b) {
  a = find(v, a), b = find(v, b);
  if (a != b) v[b].root = a;
}

typedef struct { /* two values to join once values exist, by (owner, leaf) */
  const tpu_instr *ia, *ib;
  int la, lb;
  int64_t wend; /* the loop's end: ia lives to it if the two cannot share (one in VMEM) */
} pair;

typedef struct {
  pair *p;
  int n, cap;
} pairs;

static int add_pair(pairs *ps, const tpu_instr *ia, int la, const tpu_instr *ib, int lb, int64_t wend) {
  if (ps->n == ps->cap) {
    int cap = ps->cap ? 2 * ps->cap : 64;
    pair *np = tpu_realloc(ps->p, (size_t)cap * sizeof *np);
    if (!np) return 0;
    ps->p = np, ps->cap = cap;
  }
  pair x = {ia, ib, la, lb, wend};
  ps->p[ps->n++] = x;
  return 1;
}

/* Whether computation a is b or one that calls b, directly or through calls, loops and
 * conditionals (b runs inside a). */
static int encloses(const tpu__be *be, const tpu_comp *a, const tpu_comp *b) {
  for (int depth = 0; b && depth < 256; depth++) {
    if (b == a) return 1;
    int ci = tpu__be_comp_index(be, b);
    const tpu_instr *c = ci >= 0 ? be->caller[ci] : NULL;
    b = c ? c->parent : NULL;
  }
  return 0;
}

/* Whether while w's result is a tuple of single arrays, one per element of its body's root
 * tuple: each element then lives by its own readers (elem_end). */
static int per_element(const tpu_instr *w) {
  const tpu_instr *r = w->body ? w->body->root : NULL;
  if (!r || r->op != TPU_OP_TUPLE || w->shape.dtype != TPU_TUPLE || w->shape.ntuple != r->noperands) return 0;
  for (int e = 0; e < r->noperands; e++)
    if (tpu__leaves(&r->operands[e]->shape) != 1) return 0;
  return 1;
}

/* How long element e of while w's result lives: to the loop's end and to its own last
 * reader after the loop, as XLA's values are per element of a tuple (a forward scan's stack
 * of saved activations dies with the backward loop that reads it, though the scan's last
 * carry is read later); the whole result's last use when anything reads it whole. */
static int64_t elem_end(const tpu__be *be, const tpu_instr *w, int e) {
  const tpu__kinfo *kw = tpu__be_info(be, w);
  const tpu_comp *c = w->parent;
  if (w == c->root || !per_element(w)) return kw->last_use;
  int64_t end = kw->pos;
  for (int i = 0; i < c->ninstrs; i++) {
    const tpu_instr *u = c->instrs[i];
    for (int o = 0; o < u->noperands; o++) {
      if (u->operands[o] != w) continue;
      if (u->op != TPU_OP_GET_TUPLE_ELEMENT) return kw->last_use;
      if (u->index == e) bump(&end, tpu__be_info(be, u)->last_use);
    }
  }
  return end;
}

/* The loop state rule (copy insertion's, above) for while `w`: per element of the state,
 * how long the input lives, and which body result shares the input's buffer. */
static int loop_state(tpu__be *be, const tpu_instr *w, const int64_t *def, const int64_t *wstart, pairs *ps) {
  tpu__kinfo *kw = tpu__be_info(be, w);
  const tpu_comp *b = w->body;
  const tpu_instr *r = b->root, *x = w->operands[0], *bp = b->nparams ? b->params[0] : NULL;
  int nl = tpu__leaves(&x->shape);
  int simple = r->op == TPU_OP_TUPLE && bp && r->noperands == (x->shape.dtype == TPU_TUPLE ? x->shape.ntuple : 1);
  for (int i = 0; simple && i < b->ninstrs; i++) { /* the body reads its state by element */
    const tpu_instr *u = b->instrs[i];
    for (int o = 0; o < u->noperands; o++)
      if (u->operands[o] == bp && u->op != TPU_OP_GET_TUPLE_ELEMENT) simple = 0;
  }
  for (int e = 0; e < (simple ? r->noperands : 0); e++)
    if (tpu__leaves(&r->operands[e]->shape) != 1) simple = 0;
  for (int leaf = 0; leaf < nl; leaf++) {
    int xl = 0;
    const tpu_instr *xo = owner_of(be, x, leaf, 0, &xl);
    tpu__kinfo *kx = xo ? tpu__be_info(be, xo) : NULL;
    /* An input reached through an enclosing loop's parameter is that loop's state: its
     * rule, which covers this loop's whole region, decides how long it lives. One that an
     * earlier loop's body wrote (a scan's stack of saved activations, read by the backward
     * loop after it) is this loop's input like any other: the rules below keep it live
     * through this loop. */
    if (!kx || (xo->parent != w->parent && encloses(be, xo->parent, w->parent))) continue;
    if (!simple) { /* the input lives as long as the loop's result */
      bump(&kx->last_use, kw->last_use);
      continue;
    }
    int vl = 0;
    const tpu_instr *re = r->operands[leaf];
    const tpu_instr *vo = owner_of(be, re, 0, 0, &vl);
    if (vo == xo && vl == xl) { /* passed through unchanged: one buffer throughout */
      bump(&kx->last_use, elem_end(be, w, leaf));
      continue;
    }
    int64_t old = 0; /* the last read of the element's old value in the body */
    for (int i = 0; i < b->ninstrs; i++) {
      const tpu_instr *g = b->instrs[i];
      if (g->op == TPU_OP_GET_TUPLE_ELEMENT && g->operands[0] == bp && g->index == leaf)
        bump(&old, tpu__be_info(be, g)->last_use);
    }
    tpu__kinfo *kv = vo ? tpu__be_info(be, vo) : NULL;
    int in_place = kv && vo->parent == b && def[tpu__be_index(be, vo)] >= old;
    int dies = kx->last_use <= wstart[tpu__be_index(be, w)] && kx->pos > 0 && xo->op != TPU_OP_CONSTANT;
    if (in_place && dies) {
      if (!add_pair(ps, xo, xl, vo, vl, kw->pos)) return 0;
    } else if (!in_place) {
      bump(&kx->last_use, kw->pos); /* the state stays in the input's buffer; the new value is copied in */
    }
    /* else the input is read after the loop (or is the caller's): the state is a copy, the
     * body result's buffer, and the input lives by its own uses */
  }
  return 1;
}

typedef struct {
  int64_t off, size, end;
} live;

/* Whether in is an all-reduce that writes its sum over its operand: a synchronous
 * all-reduce of one operand, whose result has the operand's shape (the shape test is
 * can_share_dying's). Probe outside the corpus (bench/plan_memory/probes/mbacc, libtpu
 * 0.0.42.1 compile-only, v5e 2x4): a two-microbatch loop accumulating an f32[4096,16000]
 * gradient (250 MiB), all-reduced after the loop into the step's output
 * (acc_loop_ar.hlo): the compiler's buffer assignment holds the loop's accumulator, its
 * state and the all-reduce's result in the output's one allocation, temp 0; tpusim held the
 * accumulator in a heap buffer of its own (temp 250 MiB). A reduce-scatter's result is
 * smaller than its operand and does not share (acc_loop_rs.hlo: temp 250 MiB in both). In
 * the heap the sum shares a single value's buffer (acc_noloop_ar_heap.hlo: the accumulated
 * dot's result, one microbatch, no loop, summed and read by a reduction: heap 250 MiB) but
 * not the loop's state (acc_loop_ar_heap.hlo: heap 500 MiB): XLA's heap simulator shares no
 * buffer holding several values with its user (heap_simulator.cc, "We don't support sharing
 * an aliased buffer"), can_share_dying's `nval`. */
static int in_place_all_reduce(const tpu_instr *in) {
  return in->op == TPU_OP_ALL_REDUCE && in->noperands == 1;
}

/* Whether value g may take the buffer of value d that dies where g is defined: g's kernel
 * streams its operands element by element, so it can write over what it reads, and g has
 * d's shape: element type, dimensions and laid-out size (XLA's CanShareOperandBufferWithUser,
 * xla/service/hlo_dataflow_analysis.cc: "operand and user emit the same shape and layout",
 * ShapeUtil::Equal, before its elementwise test; a bf16 result does not overwrite the f32
 * it is converted from, nor a reduced row the matrix it reduces). In the heap (`heap`), d
 * must also be its instruction's own value, not an element of a tuple that g reads through
 * get-tuple-element (a multi-output fusion's or a loop's result): XLA's heap simulator shares
 * only a value whose defining instruction g uses; an output allocation's reuse test
 * (LiveRangeInterferes) looks at the get-tuple-element and allows it. An all-reduce writes
 * over its operand too (in_place_all_reduce), in the heap only over a buffer of one value. */
static int can_share_dying(const tpu__be *be, const val *d, const val *g, int heap) {
  const tpu__kinfo *k = tpu__be_info(be, g->in);
  if (!k || d->size != g->size) return 0;
  if (k->kind != TPU__K_STREAM && (!in_place_all_reduce(g->in) || (heap && d->nval > 1))) return 0;
  if (heap && d->in->shape.dtype == TPU_TUPLE) return 0;
  const tpu_shape *sd = tpu__leaf(&d->in->shape, d->leaf), *sg = tpu__leaf(&g->in->shape, g->leaf);
  return sd && sg && tpu_shape_equal(sd, sg);
}

/* Whether a and b cannot share a buffer: their live ranges meet, unless one is defined
 * where the other dies by a kernel that may write over what it reads (can_share_dying of
 * the later value: the one that overwrites is the one defined there). */
static int interferes(const tpu__be *be, const val *a, const val *b, int heap) {
  if (a->end < b->start || b->end < a->start) return 0;
  if (a->end == b->start && can_share_dying(be, a, b, heap)) return 0;
  if (b->end == a->start && can_share_dying(be, b, a, heap)) return 0;
  return 1;
}

static int cmp_off(const void *a, const void *b) {
  const live *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

typedef struct {
  int64_t k1, k2; /* ascending: the negated keys, so the larger comes first */
  int idx;
} hkey;

static int cmp_hkey(const void *a, const void *b) {
  const hkey *x = a, *y = b;
  if (x->k1 != y->k1) return x->k1 < y->k1 ? -1 : 1;
  if (x->k2 != y->k2) return x->k2 < y->k2 ? -1 : 1;
  return x->idx - y->idx;
}

/* One GlobalDecreasingSizeBestFitHeap over the n temporaries o[0..n) (in the algorithm's
 * order): each takes the smallest gap between the placed buffers it interferes with that
 * holds it (the lowest such gap on a tie), or the top of them. off[q] receives o[q]'s
 * offset; used holds n entries. Returns the heap's size. */
static int64_t best_fit(const tpu__be *be, val *v, const hkey *o, int n, int64_t *off, live *used) {
  int64_t heap = 0;
  for (int q = 0; q < n; q++) {
    val *g = &v[o[q].idx];
    int nu = 0;
    for (int r = 0; r < q; r++)
      if (interferes(be, g, &v[o[r].idx], 1)) used[nu].off = off[r], used[nu++].size = v[o[r].idx].size;
    qsort(used, (size_t)nu, sizeof *used, cmp_off);
    int64_t at = -1, best = 0, lo = 0;
    for (int u = 0; u < nu; u++) {
      int64_t gap = used[u].off - lo;
      if (gap >= g->size && (at < 0 || gap < best)) at = lo, best = gap;
      if (used[u].off + used[u].size > lo) lo = used[u].off + used[u].size;
    }
    off[q] = at >= 0 ? at : lo;
    if (off[q] + g->size > heap) heap = off[q] + g->size;
  }
  return heap;
}

/* Whether in's result may not share an output allocation: the result of an all-gather, an
 * all-to-all or a collective-permute, which other chips write into (XLA's BufferAssigner refuses such a
 * value a maybe-live-out allocation through the backend's must_not_live_out). Probes with
 * libtpu 0.0.42.1, v5e, 8 devices, compile-only (bench/plan_memory/probes ag_out.hlo,
 * a2a_out.hlo, cp_out.hlo, ar_out.hlo, dot_out.hlo): bf16[8192,8192] g, d = g·w, e = d·w,
 * outputs (d, e); g dies where d is written, before e: g made by an all-gather, an all-to-all
 * or a collective-permute takes
 * 128 MiB of temp (its own heap buffer in the dump), made by an all-reduce or a dot it lives
 * in e's output allocation (temp 0); the compiler's reduce-scatter results share output
 * allocations too (plan/llama7b_L4_1x4x2_mb2, tune). */
static int must_not_live_out(const tpu_instr *in) {
  tpu_opcode op = tpu_collective_base(in->op);
  if (in->op == TPU_OP_ALL_GATHER_DONE) op = TPU_OP_ALL_GATHER;
  if (in->op == TPU_OP_COLLECTIVE_PERMUTE_DONE) op = TPU_OP_COLLECTIVE_PERMUTE;
  return op == TPU_OP_ALL_GATHER || op == TPU_OP_ALL_TO_ALL || op == TPU_OP_COLLECTIVE_PERMUTE;
}

/* Temporary t goes into output allocation o if it fits, may live out, and its live range
 * meets nothing o holds (XLA's MaybeAssignBuffer). */
static void try_out(const tpu__be *be, val *v, int t, int o, int *in_out, int *chain) {
  int ok = !v[t].nlo && v[t].size <= v[o].size && !interferes(be, &v[t], &v[o], 0);
  for (int c = chain[o]; ok && c >= 0; c = chain[c]) ok = !interferes(be, &v[t], &v[c], 0);
  if (ok) {
    in_out[t] = o;
    chain[t] = chain[o];
    chain[o] = t;
  }
}

/* Temporaries, largest first, take the output allocations where they fit and their live
 * ranges do not meet what the allocation holds (XLA's buffer assignment reuses a
 * maybe-live-out allocation for buffers that die before the output is written), trying the
 * allocations in the reverse of the order XLA makes them (largest first, then in order of
 * definition): the smallest first; the rest
 * share one heap, packed as the XLA TPU compiler packs it (best_fit in order of live-range
 * start, below). Returns the heap's size, -1 when out of memory.
 * ord and act hold 2 nv entries; in_out[i] is the output buffer temporary i lives in, or -1. */
static int64_t pack_temps(const tpu__be *be, val *v, int nv, byp *ord, live *act, int *in_out, int *chain,
                          const tpu_instr **at) {
  int nout = 0, ntemp = 0;
  for (int i = 0; i < nv; i++) v[i].nval = 0;
  for (int i = 0; i < nv; i++) v[find(v, i)].nval++;
  for (int i = 0; i < nv; i++) {
    in_out[i] = -1, chain[i] = -1;
    if (v[i].root != i) continue;
    if (v[i].cls == CLS_OUT) ord[nout].pos = -v[i].size, ord[nout].idx = i, ord[nout++].in = NULL;
  }
  qsort(ord, (size_t)nout, sizeof *ord, cmp_pos);
  byp *tord = ord + nout;
  for (int i = 0; i < nv; i++)
    if (v[i].root == i && v[i].cls == CLS_TEMP) tord[ntemp].pos = -v[i].size, tord[ntemp].idx = i, tord[ntemp++].in = NULL;
  qsort(tord, (size_t)ntemp, sizeof *tord, cmp_pos);
  for (int q = 0; q < ntemp; q++) {
    int t = tord[q].idx;
    /* the output allocations newest (smallest) first, as XLA's AssignSingleHloBuffer walks
     * its allocations from the last made: of equal sizes, the later defined first */
    for (int a = nout - 1; a >= 0 && in_out[t] < 0; a--) try_out(be, v, t, ord[a].idx, in_out, chain);
  }
  /* The heap's buffers in the order the XLA TPU compiler packs them: by the start of their
   * live ranges, the larger first among equal starts, each into the smallest gap that holds
   * it (best_fit). Replaying the heap values and live ranges of libtpu's own buffer
   * assignment dumps (bench/plan_memory/probes/heap_order.py, README "Session 31"), this
   * order gives its `preallocated-temp` heap to 0.6 % on 6 of 7 programs and 1.8 % on the 7th (v5e and v5p:
   * llama7b_L4_1x4x2_mb2 1,610.5 MiB against 1,612.8), where XLA's spatial and temporal
   * GlobalDecreasingSizeBestFitHeap orders give 6 to 14 % less (1,395.2 and 1,429.0).
   * TPUSIM_NO_START_HEAP=1: the smaller of those two orders, as before (spatial, size then
   * live range, descending, in key[0..n); temporal, live range then size, in key[n..2n)). */
  int n = 0;
  for (int i = 0; i < nv; i++) n += v[i].root == i && v[i].cls == CLS_TEMP && in_out[i] < 0;
  if (!n) return 0;
  hkey *key = tpu_calloc((size_t)(2 * n), sizeof *key);
  int64_t *off = tpu_calloc((size_t)(2 * n), sizeof *off);
  if (!key || !off) {
    tpu_free(key);
    tpu_free(off);
    return -1;
  }
  n = 0;
  for (int i = 0; i < nv; i++)
    if (v[i].root == i && v[i].cls == CLS_TEMP && in_out[i] < 0) {
      key[n].k1 = -v[i].size, key[n].k2 = -(v[i].end - v[i].start), key[n].idx = i;
      n++;
    }
  for (int q = 0; q < n; q++) key[n + q].k1 = key[q].k2, key[n + q].k2 = key[q].k1, key[n + q].idx = key[q].idx;
  int start_order = !tpu_env_flag("TPUSIM_NO_START_HEAP");
  if (start_order)
    for (int q = 0; q < n; q++) key[q].k1 = v[key[q].idx].start, key[q].k2 = -v[key[q].idx].size;
  qsort(key, (size_t)n, sizeof *key, cmp_hkey);
  qsort(key + n, (size_t)n, sizeof *key, cmp_hkey);
  int64_t h0 = best_fit(be, v, key, n, off, act);
  int64_t h1 = start_order ? h0 : best_fit(be, v, key + n, n, off + n, act);
  int k = h1 < h0; /* XLA keeps the first of equal heaps: the spatial one */
  int64_t foot = k ? h1 : h0;
  for (int q = 0; q < n; q++) {
    val *g = &v[key[k * n + q].idx];
    g->off = off[k * n + q];
    if (g->off + g->size == foot && !*at) *at = g->in;
  }
  tpu_free(key);
  tpu_free(off);
  return foot;
}

/* Most bytes live at once over the buffers (roots), each counted once: a sweep over their
 * starts (+size) and ends (−size after the end). ev holds 2 nv entries. */
/* Temp the XLA TPU compiler's memory_analysis() counts beyond its heap for while loop `w`.
 * A body that rewrites a state element with a matmul kernel reading that element's old value
 * (the kernel cannot write over what it reads: copy insertion copies the old value first)
 * beside other state elements it rewrites in heap buffers (a stack updated in place, an
 * elementwise update) has temp − heap = min(the copied elements' bytes, those other
 * elements' bytes); an element in an output allocation or in VMEM does not count, nor a loop
 * with no such copy. Probes outside the corpus (bench/plan_memory/probes loopx_*, libtpu
 * compile-only, v5e, one device; the dump's `preallocated-temp` against memory_analysis()):
 * a bf16[4096,8192] carry replaced by tanh(x·W) beside an f32 state updated by exp of 16, 64
 * and 256 MiB: 16, 64 and 64 MiB more; two of 16: 32; 16 and 256: 64; an 8 MiB carry
 * beside 16 or 256: 8; the 16 MiB state returned as an output: 0.2; no dot: 0. The
 * compiler's own HBM figure (its log's "program HBM usage") is the heap without it. */
/* Whether value x of fusion computation fc reaches a matmul's operand (a dot's or a
 * convolution's input, through any ops): the kernel reads it whole before it writes, where
 * an elementwise use (an accumulation into it) streams it beside the result. */
static int feeds_matmul(const tpu_comp *fc, const tpu_instr *x, int depth) {
  if (depth > 32) return 0;
  for (int i = 0; i < fc->ninstrs; i++) {
    const tpu_instr *y = fc->instrs[i];
    for (int o = 0; o < y->noperands; o++) {
      if (y->operands[o] != x) continue;
      if (y->op == TPU_OP_DOT || y->op == TPU_OP_CONVOLUTION || feeds_matmul(fc, y, depth + 1)) return 1;
      break;
    }
  }
  return 0;
}

/* Whether kernel u reads operand o as a matmul's input. */
static int matmul_reads(const tpu_instr *u, int o) {
  if (u->op == TPU_OP_DOT || u->op == TPU_OP_CONVOLUTION) return 1;
  if (u->op != TPU_OP_FUSION || !u->calls) return 0;
  for (int i = 0; i < u->calls->ninstrs; i++) {
    const tpu_instr *p = u->calls->instrs[i];
    if (p->op == TPU_OP_PARAMETER && (int)p->index == o) return feeds_matmul(u->calls, p, 0);
  }
  return 0;
}

static int64_t copied_carry_extra(const tpu__be *be, const tpu_instr *w, val *vals, const int *vbase,
                                  const int *in_out) {
  const tpu_comp *b = w->body;
  const tpu_instr *r = b ? b->root : NULL, *bp = b && b->nparams ? b->params[0] : NULL;
  if (!r || !bp || r->op != TPU_OP_TUPLE) return 0;
  int64_t copied = 0, other = 0;
  for (int e = 0; e < r->noperands; e++) {
    const tpu_instr *u = r->operands[e];
    if (tpu__leaves(&u->shape) != 1) return 0;
    if (u->op == TPU_OP_GET_TUPLE_ELEMENT && u->operands[0] == bp && u->index == e) continue; /* passed through */
    const tpu__kinfo *ku = tpu__be_info(be, u);
    int reads_old = 0; /* as a matmul's input, not as an accumulator it adds to */
    for (int o = 0; o < u->noperands; o++) {
      const tpu_instr *g = u->operands[o];
      if (g->op == TPU_OP_GET_TUPLE_ELEMENT && g->operands[0] == bp && g->index == e) reads_old |= matmul_reads(u, o);
    }
    if (ku && ku->kind == TPU__K_MATMUL && reads_old) {
      copied += (tpu__padded_bytes(be, &u->shape) + 511) / 512 * 512;
      continue;
    }
    int ol = 0;
    const tpu_instr *o = owner_of(be, u, 0, 0, &ol);
    int id = o ? vbase[tpu__be_index(be, o)] : -1;
    if (id < 0) continue; /* in VMEM, or no buffer of its own */
    int rt = find(vals, id + ol);
    if (vals[rt].cls == CLS_TEMP && in_out[rt] < 0) other += vals[rt].size;
  }
  return copied < other ? copied : other;
}

/* The most bytes live at once over n start (idx 1) and end (idx 0) events of values (in). */
static int64_t sweep_peak(byp *ev, int n) {
  qsort(ev, (size_t)n, sizeof *ev, cmp_pos); /* at one position, ends (idx 0) first */
  int64_t live_b = 0, peak = 0;
  for (int i = 0; i < n; i++) {
    const val *x = (const val *)(const void *)ev[i].in;
    live_b += ev[i].idx ? x->size : -x->size;
    bump(&peak, live_b);
  }
  return peak;
}

static int64_t live_peak(const val *v, int nv, byp *ev) {
  int n = 0;
  for (int i = 0; i < nv; i++) {
    if (v[i].root != i || v[i].cls == CLS_HOST) continue;
    ev[n].pos = v[i].start, ev[n].idx = 1, ev[n++].in = (const tpu_instr *)&v[i];
    ev[n].pos = v[i].end + 1, ev[n].idx = 0, ev[n++].in = (const tpu_instr *)&v[i];
  }
  return sweep_peak(ev, n);
}

/* The XLA heap simulator's no-fragmentation count (heap_simulator.cc NoFragmentationStatsHeap):
 * the most bytes its heap values take at once, each value over its own live range, a while
 * loop's phi values (its body's parameter, its result) not counted. A loop's state is one
 * buffer in the heap, reserved over the whole loop, but its values there are the loop's
 * input up to the loop, the body's new value from where the body writes it to the body's
 * end, and phis, so the count leaves out the state wherever only its phi holds it: what
 * the body reads before it writes the new value, an element passed through unchanged, the
 * result after the loop. memory_analysis() temp = heap + (heap - this count) (probes:
 * bench/plan_memory/probes/arx, mbacc, README "Session 27"). ev holds 2 nv entries; lu0[]
 * is each instruction's last use by its own readers (before loop state), bend[] the
 * position of the loop whose body returns the instruction's value, or -1. */
static int64_t nofrag_peak(const tpu__be *be, const val *v, int nv, const int *in_out, const int64_t *def,
                           const int64_t *lu0, const int64_t *bend, byp *ev) {
  int n = 0;
  for (int i = 0; i < nv; i++) {
    int r = find_c(v, i);
    if (v[r].cls != CLS_TEMP || in_out[r] >= 0) continue;
    int ix = tpu__be_index(be, v[i].in);
    int64_t s = def[ix], e = bend[ix] >= 0 ? bend[ix] : lu0[ix];
    if (e < s) e = s;
    ev[n].pos = s, ev[n].idx = 1, ev[n++].in = (const tpu_instr *)&v[i];
    ev[n].pos = e + 1, ev[n].idx = 0, ev[n++].in = (const tpu_instr *)&v[i];
  }
  /* A value whose buffer the kernel that reads it last writes its result into (the same
   * offset, defined where it dies) is freed before that result is allocated: counted once
   * (heap_simulator.cc frees an operand before sharing its buffer). */
  qsort(ev, (size_t)n, sizeof *ev, cmp_pos);
  for (int i = 0; i < n; i++) {
    if (ev[i].idx) continue;
    const val *x = (const val *)(const void *)ev[i].in;
    int64_t xo = v[find_c(v, (int)(x - v))].off;
    for (int j = i - 1; j >= 0 && ev[j].pos >= ev[i].pos - 1; j--) {
      const val *y = (const val *)(const void *)ev[j].in;
      if (ev[j].idx && ev[j].pos == ev[i].pos - 1 && y != x && v[find_c(v, (int)(y - v))].off == xo) {
        ev[i].pos--;
        break;
      }
    }
  }
  return sweep_peak(ev, n);
}

tpu_status tpu__pass_buffer_assign(tpu__be *be) {
  const tpu_module *m = be->m;
  int nk = be->ninstrs > 0 ? be->ninstrs : 1;
  int64_t *def = tpu_calloc((size_t)nk, sizeof *def), *wstart = tpu_calloc((size_t)nk, sizeof *wstart);
  int *vbase = tpu_calloc((size_t)nk, sizeof *vbase);
  int64_t *lu0 = tpu_calloc((size_t)nk, sizeof *lu0), *bend = tpu_calloc((size_t)nk, sizeof *bend);
  int *in_out = NULL, *chain = NULL;
  int n = 0;
  for (int ci = 0; ci < m->ncomps; ci++)
    if (be->scheduled[ci]) n += m->comps[ci]->ninstrs;
  int64_t nl = 0; /* leaves of every scheduled instruction: a bound on values */
  for (int ci = 0; ci < m->ncomps; ci++)
    if (be->scheduled[ci])
      for (int i = 0; i < m->comps[ci]->ninstrs; i++) nl += tpu__leaves(&m->comps[ci]->instrs[i]->shape);
  byp *v = tpu_calloc((size_t)(n ? n : 1), sizeof *v);
  val *vals = tpu_calloc((size_t)(nl ? nl : 1), sizeof *vals);
  live *act = tpu_calloc((size_t)(nl ? nl : 1), sizeof *act);
  byp *ord = tpu_calloc((size_t)(2 * nl + 1), sizeof *ord);
  in_out = tpu_calloc((size_t)(nl ? nl : 1), sizeof *in_out);
  chain = tpu_calloc((size_t)(nl ? nl : 1), sizeof *chain);
  pairs ps = {NULL, 0, 0};
  tpu_status st = TPU_OK;
  if (!def || !wstart || !vbase || !lu0 || !bend || !v || !vals || !act || !ord || !in_out || !chain) {
    st = TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
    goto done;
  }
  for (int i = 0; i < nk; i++) vbase[i] = -1;
  place(be, m->entry, 0, def, wstart);
  n = 0;
  for (int ci = 0; ci < m->ncomps; ci++) {
    if (!be->scheduled[ci]) continue;
    const tpu_comp *c = m->comps[ci];
    for (int i = 0; i < c->ninstrs; i++) {
      const tpu_instr *in = c->instrs[i];
      tpu__kinfo *k = &be->k[be->comp_base[ci] + in->id];
      k->last_use = k->pos;
      k->hbm0 = -1;
      v[n].pos = k->pos;
      v[n].idx = be->comp_base[ci] + in->id;
      v[n++].in = in;
    }
  }
  qsort(v, (size_t)n, sizeof *v, cmp_pos);
  /* Direct uses (a while reads its input where the loop starts), then aliases and control
   * ops hand their last use to what they pass on; a while's input is handled by loop_state. */
  for (int i = 0; i < n; i++)
    for (int o = 0; o < v[i].in->noperands; o++) {
      tpu__kinfo *ko = tpu__be_info(be, v[i].in->operands[o]);
      if (ko) bump(&ko->last_use, v[i].in->op == TPU_OP_WHILE ? wstart[v[i].idx] : v[i].pos);
    }
  /* The result and the inputs (owned by the caller, unless donated) live to the end. */
  bump(&tpu__be_info(be, m->entry->root)->last_use, be->npos + 1);
  for (int i = 0; i < m->entry->nparams; i++) {
    int donated = 0;
    for (int leaf = 0; leaf < tpu__leaves(&m->entry->root->shape) && !donated; leaf++)
      donated = donated_to(m, leaf) == (int)m->entry->params[i]->index;
    if (!donated) bump(&tpu__be_info(be, m->entry->params[i])->last_use, be->npos + 1);
  }
  for (int i = 0; i < n; i++) /* constants are part of the program image */
    if (v[i].in->op == TPU_OP_CONSTANT) bump(&be->k[v[i].idx].last_use, be->npos + 1);
  for (int i = n - 1; i >= 0; i--) {
    const tpu_instr *in = v[i].in;
    tpu__kinfo *k = &be->k[v[i].idx];
    if (k->own && k->kind != TPU__K_WHILE) continue;
    if (in->op != TPU_OP_WHILE)
      for (int o = 0; o < in->noperands; o++) bump(&tpu__be_info(be, in->operands[o])->last_use, k->last_use);
    const tpu_comp *sub[2] = {NULL, NULL};
    if (in->op == TPU_OP_WHILE) sub[0] = in->body;
    if (in->op == TPU_OP_CALL) sub[0] = in->to_apply;
    if (in->op == TPU_OP_CONDITIONAL)
      for (int b = 0; b < in->nbranches; b++) bump(&tpu__be_info(be, in->branches[b]->root)->last_use, k->last_use);
    if (in->op == TPU_OP_WHILE && per_element(in)) { /* each element by its own readers */
      const tpu_instr *r = in->body->root;
      for (int e = 0; e < r->noperands; e++) bump(&tpu__be_info(be, r->operands[e])->last_use, elem_end(be, in, e));
    } else if (sub[0]) {
      bump(&tpu__be_info(be, sub[0]->root)->last_use, k->last_use);
    }
  }
  /* A dynamic-update-slice whose operand dies with it updates that buffer in place (as
   * XLA does when the operand's buffer can be reused): it owns none, and the operand's
   * buffer lives as long as the result. */
  for (int i = 0; i < n; i++) {
    const tpu_instr *in = v[i].in;
    tpu__kinfo *k = &be->k[v[i].idx];
    if (in->op != TPU_OP_DYNAMIC_UPDATE_SLICE || !k->own) continue;
    const tpu_instr *x = in->operands[0];
    tpu__kinfo *ko = tpu__be_info(be, x);
    for (int guard = 0; ko && !ko->own && x->op == TPU_OP_DYNAMIC_UPDATE_SLICE && guard < 1 << 20; guard++) {
      x = x->operands[0]; /* an earlier in-place update: its owner */
      ko = tpu__be_info(be, x);
    }
    if (!ko || !ko->own || ko->kind == TPU__K_WHILE || ko->nleaves != 1 || ko->pos <= 0 ||
        ko->last_use != k->pos || x->parent != in->parent)
      continue;
    k->own = 0;
    ko->last_use = k->last_use;
  }
  /* Each value's last use by its own readers, and the loop whose body returns it, for the
   * no-fragmentation count (nofrag_peak). */
  for (int i = 0; i < nk; i++) bend[i] = -1;
  for (int i = 0; i < n; i++) bump(&lu0[v[i].idx], be->k[v[i].idx].last_use);
  for (int i = 0; i < n; i++) /* a reader's own position: one a loop returns ran at its def[] */
    for (int o = 0; o < v[i].in->noperands; o++) {
      int ix = tpu__be_index(be, v[i].in->operands[o]);
      if (ix >= 0) bump(&lu0[ix], v[i].in->op == TPU_OP_WHILE ? wstart[v[i].idx] : def[v[i].idx]);
    }
  for (int i = 0; i < n; i++) {
    const tpu_instr *w = v[i].in;
    if (w->op != TPU_OP_WHILE || !w->body) continue;
    const tpu_instr *r = w->body->root;
    for (int o = 0; o < (r->op == TPU_OP_TUPLE ? r->noperands : 1); o++) {
      const tpu_instr *x = r->op == TPU_OP_TUPLE ? r->operands[o] : r;
      if (x->parent == w->body && tpu__be_index(be, x) >= 0) bend[tpu__be_index(be, x)] = be->k[v[i].idx].pos;
    }
  }
  /* Loop state, innermost loops last so an outer loop's input sees its body's uses. */
  for (int i = n - 1; i >= 0; i--)
    if (v[i].in->op == TPU_OP_WHILE && !loop_state(be, v[i].in, def, wstart, &ps)) {
      st = TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
      goto done;
    }
  /* Memory-space assignment: the values that stay in VMEM get no HBM buffer. */
  st = tpu__assign_vmem(be);
  if (st != TPU_OK) goto done;
  /* The values, their classes, and the buffers they share. */
  int nv = 0;
  for (int i = 0; i < n; i++) {
    const tpu_instr *in = v[i].in;
    tpu__kinfo *k = &be->k[v[i].idx];
    vbase[v[i].idx] = -1;
    if (!k->own || k->vres) continue;
    vbase[v[i].idx] = nv;
    int cls0 = in->op == TPU_OP_CONSTANT ? CLS_CONST
               : in->op == TPU_OP_PARAMETER && in->parent->is_entry ? CLS_ARG : CLS_TEMP;
    for (int leaf = 0; leaf < k->nleaves; leaf++) {
      const tpu_shape *ls = tpu__leaf(&in->shape, leaf);
      int cls = ls && ls->layout_tail && strstr(ls->layout_tail, "S(5)") ? CLS_HOST : cls0;
      int64_t size = ls ? tpu__padded_bytes(be, tpu__held_shape(in, ls)) : 0;
      val x = {in, leaf, nv, cls, must_not_live_out(in), (size + 511) / 512 * 512 /* 512-byte aligned buffers (an assumption) */,
               k->pos, k->last_use, 0, 0};
      vals[nv++] = x;
    }
  }
#define VID(ins, lf) (vbase[tpu__be_index(be, (ins))] >= 0 ? vbase[tpu__be_index(be, (ins))] + (lf) : -1)
  for (int i = 0; i < ps.n; i++) {
    int a = VID(ps.p[i].ia, ps.p[i].la), b = VID(ps.p[i].ib, ps.p[i].lb);
    if (a >= 0 && b >= 0 && vals[a].size == vals[b].size)
      join(vals, a, b);
    else if (a >= 0)
      bump(&vals[a].end, ps.p[i].wend);
  }
  int64_t arg = 0, out = 0, alias = 0, cst = 0;
  const tpu_instr *root = m->entry->root;
  int nout = tpu__leaves(&root->shape);
  for (int leaf = 0; leaf < nout; leaf++) {
    int ol = 0;
    const tpu_instr *o = owner_of(be, root, leaf, 0, &ol);
    const tpu_shape *ls = tpu__leaf(&root->shape, leaf);
    int64_t size = ls ? (tpu__padded_bytes(be, ls) + 511) / 512 * 512 : 0;
    out += size;
    int vo = o ? VID(o, ol) : -1, p = donated_to(m, leaf);
    if (p >= 0 && p < m->entry->nparams) {
      alias += size;
      int vp = VID(m->entry->params[p], 0);
      /* written into the parameter's buffer once nothing reads the parameter */
      if (vo >= 0 && vp >= 0 && vals[vo].cls == CLS_TEMP && vals[vp].size == vals[vo].size &&
          vals[vp].end <= def[tpu__be_index(be, o)])
        join(vals, vp, vo);
      continue;
    }
    if (vo >= 0 && vals[vo].cls == CLS_TEMP) vals[vo].cls = CLS_OUT;
  }
#undef VID
  for (int i = 0; i < nv; i++) { /* each buffer: its values' union */
    int r = find(vals, i);
    if (r == i) continue;
    if (vals[i].start < vals[r].start) vals[r].start = vals[i].start;
    bump(&vals[r].end, vals[i].end);
    bump(&vals[r].size, vals[i].size);
    if (vals[i].cls > vals[r].cls) vals[r].cls = vals[i].cls;
    vals[r].nlo |= vals[i].nlo;
  }
  int64_t host = 0;
  for (int i = 0; i < nv; i++) {
    if (vals[i].root != i) continue;
    if (vals[i].cls == CLS_ARG) arg += vals[i].size;
    if (vals[i].cls == CLS_CONST) cst += vals[i].size;
    if (vals[i].cls == CLS_HOST) host += vals[i].size;
  }
  const tpu_instr *foot_at = NULL;
  int64_t temp = pack_temps(be, vals, nv, ord, act, in_out, chain, &foot_at);
  if (temp < 0) {
    st = TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
    goto done;
  }
  /* Layout: arguments, outputs, constants, then the temporaries' heap. */
  int64_t off = 0;
  for (int c = CLS_ARG; c >= CLS_CONST; c--)
    for (int i = 0; i < nv; i++)
      if (vals[i].root == i && vals[i].cls == c) {
        vals[i].off = off;
        off += vals[i].size;
      }
  int64_t heap = off;
  for (int i = 0; i < nv; i++)
    if (vals[i].root == i && vals[i].cls == CLS_TEMP) vals[i].off = in_out[i] >= 0 ? vals[in_out[i]].off : vals[i].off + heap;
  off = heap + temp; /* host buffers: an address range of their own above HBM's */
  int64_t beyond = 0; /* counted by memory_analysis(), outside the heap (copied_carry_extra) */
  for (int i = 0; i < n; i++)
    if (v[i].in->op == TPU_OP_WHILE) beyond += copied_carry_extra(be, v[i].in, vals, vbase, in_out);
  for (int i = 0; i < nv; i++)
    if (vals[i].root == i && vals[i].cls == CLS_HOST) {
      vals[i].off = off;
      off += vals[i].size;
    }
  for (int i = 0; i < nv; i++) {
    const val *x = &vals[i];
    const val *r = &vals[find(vals, i)];
    char name[600];
    if (tpu__be_info(be, x->in)->nleaves > 1)
      snprintf(name, sizeof name, "%s#%d", x->in->name, x->leaf);
    else
      snprintf(name, sizeof name, "%s", x->in->name);
    int h = tpu_program_add_hbm(be->p, name, r->off, x->size);
    if (h < 0) {
      st = TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
      goto done;
    }
    if (x->leaf == 0) tpu__be_info(be, x->in)->hbm0 = h;
  }
  if (!foot_at) { /* no temporaries: the step's result is what fills HBM */
    int ol = 0;
    foot_at = owner_of(be, m->entry->root, 0, 0, &ol);
  }
  int64_t nofrag = nofrag_peak(be, vals, nv, in_out, def, lu0, bend, ord);
  /* memory_analysis()'s temp adds the heap simulator's fragmentation, heap - nofrag (the
   * compiler's peak_memory_in_bytes and the HBM the step needs do not); a copied carry
   * (copied_carry_extra, counted in the footprint as before) is that term where tpusim's
   * values lack copy insertion's copy, so the larger of the two counts. */
  int64_t frag = nofrag < temp ? temp - nofrag : 0;
  frag = frag > beyond ? frag - beyond : 0;
  int64_t foot = arg + out - alias + cst + temp + beyond;
  be->p->hbm_footprint = foot;
  be->p->hbm_peak = live_peak(vals, nv, ord);
  be->p->hbm_arg = arg;
  be->p->hbm_out = out;
  be->p->hbm_alias = alias;
  be->p->hbm_temp = temp + beyond + frag;
  be->p->host_temp = host;
  for (int i = 0; i < m->entry->nparams; i++) {
    const tpu__kinfo *kp = tpu__be_info(be, m->entry->params[i]);
    if (!kp || !kp->xpf || kp->hbm0 < 0) continue;
    be->p->xprefetch_bytes = tpu__padded_bytes(be, &m->entry->params[i]->shape);
    be->p->xprefetch_hbm = kp->hbm0;
    be->p->xprefetch_cmem = kp->xpf == 2;
  }
  if (foot > be->chip->hbm_bytes)
    st = TPU_FAIL(be->d, TPU_ERR_LIMIT, foot_at ? foot_at->loc : tpu_noloc(),
                  "program needs %lld bytes of HBM; %s has %lld (peak at '%s')", (long long)foot, be->chip->name,
                  (long long)be->chip->hbm_bytes, foot_at ? foot_at->name : "?");
done:
  tpu_free(def);
  tpu_free(wstart);
  tpu_free(vbase);
  tpu_free(lu0);
  tpu_free(bend);
  tpu_free(v);
  tpu_free(vals);
  tpu_free(act);
  tpu_free(ord);
  tpu_free(ps.p);
  tpu_free(in_out);
  tpu_free(chain);
  return st;
}
