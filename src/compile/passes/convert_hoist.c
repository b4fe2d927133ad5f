/* simplify, step zero: a loop-invariant narrowing convert leaves the loop, as the XLA TPU
 * compiler's optimized programs show (its convert mover takes a narrowing convert above the
 * dynamic-slice that reads it, then WhileLoopInvariantCodeMotion hoists the convert, which
 * makes nothing larger). A layer loop that slices its layer's f32 weights out of the stacked
 * weights and converts them to bf16,
 *     while: w = convert(reshape(dynamic-slice(W, i)))      W passed on unchanged
 * becomes one convert of the whole stack before the loop, the loop carrying the bf16 stack
 * and slicing it:
 *     Wb = convert(W); while: w = reshape(dynamic-slice(Wb, i))
 * so the bf16 copy of the stack is live through the loop (libtpu 0.0.42.1, memory_analysis
 * and buffer-assignment dumps: the planner's LLaMA-7B SGD step on v5e holds convert(W) of
 * wqkv, wo, w1 and w2 as bf16[2,...] stacks, 428 MiB of its temp beside the f32 stacks;
 * a JAX scan over f32[L,4096,4096] weights cast to bf16 per layer compiles to one
 * bf16[L,4096,4096] convert before the loop for every L from 4 to 24, docs/plan.md). A
 * convert of the whole element (the outer microbatch loop passing the stack to the layer
 * loops once they carry it in bf16) leaves the same way. Values are unchanged: converting
 * then slicing is slicing then converting.
 *
 * Element k of loop w qualifies when the body passes it on unchanged, the condition does
 * not read it, and every other read of it in the body is a chain
 *     [dynamic-slice] (reshape | bitcast | copy)* convert
 * each step read only by the next, every convert to the same narrower float type. */
#include <string.h>

#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

static int reads_element(const tpu_comp *c, int64_t k) {
  if (c->nparams < 1) return 1;
  const tpu_instr *p = c->params[0];
  for (int i = 0; i < c->ninstrs; i++) {
    const tpu_instr *in = c->instrs[i];
    for (int j = 0; j < in->noperands; j++)
      if (in->operands[j] == p && (in->op != TPU_OP_GET_TUPLE_ELEMENT || in->index == k)) return 1;
  }
  return c->root == p;
}

static int view_op(tpu_opcode op) { return op == TPU_OP_RESHAPE || op == TPU_OP_BITCAST || op == TPU_OP_COPY; }

/* The convert the chain from g (a read of the element) ends at, or NULL. */
static tpu_instr *chain_convert(const tpu_uses *u, tpu_instr *g) {
  tpu_instr *x = g;
  int first = 1;
  for (;;) {
    if (u->nusers[x->id] != 1 || x->is_root) return NULL;
    tpu_instr *y = u->users[x->id][0];
    if (y->noperands < 1 || y->operands[0] != x) return NULL;
    if (y->op == TPU_OP_CONVERT) return y;
    if (!(view_op(y->op) || (first && y->op == TPU_OP_DYNAMIC_SLICE))) return NULL;
    for (int j = 1; j < y->noperands; j++)
      if (y->operands[j] == x) return NULL;
    first = 0;
    x = y;
  }
}

static size_t elem_bytes(tpu_dtype t) { return tpu_dtype_size(t); }

static void narrow(tpu_shape *s, tpu_dtype t) {
  s->dtype = t;
  s->has_layout = 0;
  s->layout_tail = NULL;
}

/* Element i of tuple shape *s gets type t, in an array of its own (tuple elements may be
 * shared between instructions). 0 when out of memory. */
static int set_elem_type(tpu_builder *b, tpu_shape *s, int64_t i, tpu_dtype t) {
  tpu_shape *e = tpu_arena_alloc(&b->m->arena, sizeof *e * (size_t)(s->ntuple + 1));
  if (!e) return 0;
  for (int k = 0; k < s->ntuple; k++) e[k] = s->elems[k];
  narrow(&e[i], t);
  s->elems = e;
  return 1;
}

/* Hoists the converts of element k of loop w (in c) when it qualifies; *done when it did. */
static tpu_status hoist_elem(tpu_builder *b, tpu_comp *c, tpu_instr *w, const tpu_uses *cu, const tpu_uses *u,
                             int64_t k, int *done) {
  tpu_comp *body = w->body;
  tpu_instr *p = body->params[0], *root = body->root, *init = w->operands[0];
  const tpu_shape *es = &w->shape.elems[k];
  if (!tpu_dtype_is_float(es->dtype) || es->dtype == TPU_TUPLE) return TPU_OK;
  tpu_instr *pass = root->operands[k];
  if (pass->op != TPU_OP_GET_TUPLE_ELEMENT || pass->operands[0] != p || pass->index != k) return TPU_OK;
  for (int j = 0; j < root->noperands; j++)
    if (j != k && root->operands[j] == pass) return TPU_OK;
  tpu_dtype t = TPU_TUPLE;
  int nconv = 0;
  /* every read of the element: the pass-through, or chains that end in a narrowing convert */
  for (int i = 0; i < body->ninstrs; i++) {
    tpu_instr *g = body->instrs[i];
    if (g->op != TPU_OP_GET_TUPLE_ELEMENT || g->operands[0] != p || g->index != k) continue;
    for (int j = 0; j < u->nusers[g->id]; j++) {
      tpu_instr *y = u->users[g->id][j];
      if (y == root && g == pass) continue;
      if (y == root) return TPU_OK;
      tpu_instr *cv = NULL;
      if (y->op == TPU_OP_CONVERT && y->operands[0] == g) cv = y;
      else if ((view_op(y->op) || y->op == TPU_OP_DYNAMIC_SLICE) && y->operands[0] == g) {
        for (int q = 1; q < y->noperands; q++)
          if (y->operands[q] == g) return TPU_OK;
        cv = y->op == TPU_OP_DYNAMIC_SLICE || view_op(y->op) ? chain_convert(u, y) : NULL;
        /* a dynamic-slice only first: a later one makes the chain fail */
        for (tpu_instr *x = y; cv && x != cv; x = u->users[x->id][0])
          if (x != y && x->op == TPU_OP_DYNAMIC_SLICE) cv = NULL;
      }
      if (!cv || !tpu_dtype_is_float(cv->shape.dtype) || elem_bytes(cv->shape.dtype) >= elem_bytes(es->dtype)) return TPU_OK;
      if (t != TPU_TUPLE && cv->shape.dtype != t) return TPU_OK;
      t = cv->shape.dtype;
      nconv++;
    }
  }
  if (!nconv) return TPU_OK;
  /* before the loop: the whole element, converted */
  tpu_instr *src = init->operands[k], *cw;
  tpu_shape cs = *es;
  narrow(&cs, t);
  TPU_TRY(tpu_build_instr_like(b, c, w, TPU_OP_CONVERT, "hoisted.convert", &cs, &src, 1, &cw));
  init->operands[k] = cw;
  if (!set_elem_type(b, &w->shape, k, t) || !set_elem_type(b, &init->shape, k, t) ||
      !set_elem_type(b, &p->shape, k, t) || !set_elem_type(b, &root->shape, k, t) ||
      (w->condition->nparams && !set_elem_type(b, &w->condition->params[0]->shape, k, t)))
    return TPU_FAIL(b->d, TPU_ERR_NOMEM, w->loc, "out of memory");
  /* the loop's result: the element passed through is the unconverted input */
  for (int j = 0; j < cu->nusers[w->id]; j++) {
    tpu_instr *g = cu->users[w->id][j];
    if (g->index != k) continue;
    tpu_build_replace_uses(c, g, src);
    narrow(&g->shape, t); /* (dead now) */
  }
  /* the body: the reads carry the narrow type; each convert is replaced by what it read */
  for (int i = 0; i < body->ninstrs; i++) {
    tpu_instr *g = body->instrs[i];
    if (g->op != TPU_OP_GET_TUPLE_ELEMENT || g->operands[0] != p || g->index != k) continue;
    narrow(&g->shape, t);
    for (int j = 0; j < u->nusers[g->id]; j++) {
      tpu_instr *x = u->users[g->id][j];
      if (x == root) continue;
      tpu_instr *prev = g;
      while (x->op != TPU_OP_CONVERT) {
        narrow(&x->shape, t);
        prev = x;
        x = u->users[x->id][0];
      }
      tpu_build_replace_uses(body, x, prev);
    }
  }
  *done = 1;
  return TPU_OK;
}

static tpu_status hoist_comp(tpu_builder *b, tpu_comp *c, int *changed) {
  int any = 0;
  for (int i = 0; i < c->ninstrs && !any; i++) any = c->instrs[i]->op == TPU_OP_WHILE;
  if (!any) return TPU_OK;
  tpu_uses cu;
  TPU_TRY(tpu_build_uses(b, c, &cu));
  tpu_status st = TPU_OK;
  int n = c->ninstrs, made = 0;
  for (int i = 0; st == TPU_OK && i < n; i++) {
    tpu_instr *w = c->instrs[i];
    if (w->op != TPU_OP_WHILE || !w->body || !w->condition || w->noperands != 1 || w->shape.dtype != TPU_TUPLE ||
        w->is_root || w->body->nparams != 1 || !w->body->root || w->body->root->op != TPU_OP_TUPLE ||
        w->body->root->noperands != w->shape.ntuple || tpu_build_callers(b->m, w->body) != 1 || tpu_build_callers(b->m, w->condition) != 1)
      continue;
    tpu_instr *init = w->operands[0];
    if (init->op != TPU_OP_TUPLE || cu.nusers[init->id] != 1) continue;
    int whole = 0; /* the loop's result read whole: its elements must stay as they are */
    for (int j = 0; j < cu.nusers[w->id]; j++) whole |= cu.users[w->id][j]->op != TPU_OP_GET_TUPLE_ELEMENT;
    if (whole) continue;
    /* a loop that runs at most once is inlined instead */
    int64_t trips = tpu__while_trip_count(w);
    if (trips >= 0 && trips <= 1) continue;
    tpu_uses u;
    st = tpu_build_uses(b, w->body, &u);
    if (st != TPU_OK) break;
    int did = 0;
    for (int64_t k = 0; st == TPU_OK && k < w->shape.ntuple; k++) {
      if (reads_element(w->condition, k)) continue;
      int one = 0;
      st = hoist_elem(b, c, w, &cu, &u, k, &one);
      did |= one;
    }
    tpu_build_uses_free(&u);
    if (st == TPU_OK && did) {
      if (tpu_build_remove_dead(b, w->body) < 0) st = b->d->status;
      made = 1;
    }
  }
  tpu_build_uses_free(&cu);
  if (st == TPU_OK && made) {
    *changed = 1;
    st = tpu_build_finish_all(b);
  }
  return st;
}

tpu_status tpu__hoist_loop_converts(tpu_builder *b, tpu_module *m, int *changed) {
  /* inner loops first: a nest hoists one level per round */
  for (int round = 0; round < 8; round++) {
    int made = 0;
    for (int c = 0; c < m->ncomps; c++) TPU_TRY(hoist_comp(b, m->comps[c], &made));
    if (!made) break;
    *changed = 1;
  }
  return TPU_OK;
}
