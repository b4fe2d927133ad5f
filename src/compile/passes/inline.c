/* The inline pass: every `call` is replaced by a copy of its callee's body, and every while
 * loop that runs once by a copy of its body (none: by its input), as XLA's CallInliner and
 * WhileLoopSimplifier do. */
#include <string.h>

#include "base/alloc.h"
#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

/* Copies `callee` (the callee of `call`, or the body of a while loop `call`) into c
 * (parameters become the call's operands); *repl is the copy of the callee's root, which
 * replaces the call. */
static tpu_status inline_one(tpu_builder *b, tpu_comp *c, tpu_instr *call, const tpu_comp *callee, tpu_instr **repl) {
  int n = callee->ninstrs;
  tpu_instr **map = tpu_calloc((size_t)n + 1, sizeof *map);
  int opcap = 16;
  tpu_instr **ops = tpu_malloc(sizeof *ops * (size_t)opcap);
  tpu_status st = TPU_OK;
  if (!map || !ops) st = TPU_FAIL(b->d, TPU_ERR_NOMEM, call->loc, "out of memory inlining '%s'", call->name);
  for (int i = 0; st == TPU_OK && i < callee->norder; i++) {
    const tpu_instr *s = callee->order[i];
    if (s->op == TPU_OP_PARAMETER) {
      map[s->id] = call->operands[s->index];
      continue;
    }
    if (s->noperands > opcap) {
      tpu_instr **nv = tpu_realloc(ops, sizeof *ops * (size_t)s->noperands);
      if (!nv) {
        st = TPU_FAIL(b->d, TPU_ERR_NOMEM, call->loc, "out of memory inlining '%s'", call->name);
        break;
      }
      ops = nv;
      opcap = s->noperands;
    }
    for (int k = 0; k < s->noperands; k++) ops[k] = map[s->operands[k]->id];
    st = tpu_build_clone_instr(b, c, s, ops, &map[s->id]);
  }
  if (st == TPU_OK) *repl = map[callee->root->id];
  tpu_free(map);
  tpu_free(ops);
  return st;
}

/* Whether computation c, or one it calls, has an op with a side effect (XLA's
 * HasSideEffect: infeed, outfeed, send, receive, random numbers, asynchronous collectives;
 * custom calls counted so too, whatever their flag). */
static int has_side_effect(const tpu_comp *c, int depth) {
  if (!c || depth > 32) return 1;
  for (int i = 0; i < c->ninstrs; i++) {
    const tpu_instr *in = c->instrs[i];
    switch (in->op) {
      case TPU_OP_INFEED: case TPU_OP_OUTFEED: case TPU_OP_SEND: case TPU_OP_SEND_DONE: case TPU_OP_RECV:
      case TPU_OP_RECV_DONE: case TPU_OP_RNG: case TPU_OP_CUSTOM_CALL: case TPU_OP_ALL_REDUCE_START:
      case TPU_OP_ALL_REDUCE_DONE: case TPU_OP_ALL_GATHER_START: case TPU_OP_ALL_GATHER_DONE:
      case TPU_OP_COLLECTIVE_PERMUTE_START: case TPU_OP_COLLECTIVE_PERMUTE_DONE:
        return 1;
      default: break;
    }
    const tpu_comp *sub[] = {in->to_apply, in->body, in->condition};
    for (int k = 0; k < 3; k++)
      if (sub[k] && has_side_effect(sub[k], depth + 1)) return 1;
    for (int k = 0; k < in->nbranches; k++)
      if (has_side_effect(in->branches[k], depth + 1)) return 1;
  }
  return 0;
}

/* A while loop XLA's WhileLoopSimplifier removes: its static trip count is 0 (the loop is
 * its input) or 1 (its body, run once, inlined) and nothing in it has a side effect. The
 * microbatch loop of a one-microbatch training step (bench/plan_memory) is one: in the XLA
 * TPU compiler's program the loop is gone and its gradient accumulators, zero plus the
 * step's gradient, are the gradient itself. Returns the trip count, or -1 to keep it. */
static int64_t removable_loop(const tpu_instr *w) {
  if (w->op != TPU_OP_WHILE || !w->body || !w->condition || w->noperands != 1 || w->body->nparams != 1) return -1;
  int64_t n = tpu__while_trip_count(w);
  if (n != 0 && n != 1) return -1;
  return has_side_effect(w->body, 0) || has_side_effect(w->condition, 0) ? -1 : n;
}

tpu_status tpu__pass_inline(tpu_module *m, const tpu_compile_opts *o, tpu_diag *d) {
  tpu_builder b;
  TPU_TRY(tpu_builder_init(&b, m, d));
  tpu_status st = TPU_OK;
  int ncomps = m->ncomps;
  for (int ci = 0; st == TPU_OK && ci < ncomps; ci++) {
    tpu_comp *c = m->comps[ci];
    /* Copies land at the end of c->instrs (with id = position), so calls nested in a
     * callee are reached too. Each call's replacement is recorded by the call's id and
     * all uses are rewritten at once afterwards. */
    tpu_instr **fwd = NULL;
    int capfwd = 0, changed = 0;
    for (int i = 0; st == TPU_OK && i < c->ninstrs; i++) {
      tpu_instr *in = c->instrs[i], *repl = NULL;
      int64_t trips = removable_loop(in);
      if (trips == 0)
        repl = in->operands[0];
      else if (trips == 1)
        st = inline_one(&b, c, in, in->body, &repl);
      else if (in->op == TPU_OP_CALL && in->to_apply)
        st = inline_one(&b, c, in, in->to_apply, &repl);
      else
        continue;
      if (st != TPU_OK) break;
      if (c->ninstrs > capfwd) {
        int cap = c->ninstrs * 2;
        tpu_instr **nf = tpu_realloc(fwd, sizeof *nf * (size_t)cap);
        if (!nf) {
          st = TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory inlining '%s'", in->name);
          break;
        }
        memset(nf + capfwd, 0, sizeof *nf * (size_t)(cap - capfwd));
        fwd = nf;
        capfwd = cap;
      }
      fwd[i] = repl;
      changed = 1;
    }
    if (st == TPU_OK && changed) tpu_build_forward(c, fwd, c->ninstrs);
    tpu_free(fwd);
    if (st == TPU_OK && changed && tpu_build_remove_dead(&b, c) < 0) st = d->status;
  }
  if (st == TPU_OK && tpu_build_remove_unused_comps(&b) < 0) st = d->status;
  tpu_builder_deinit(&b);
  return st;
}
