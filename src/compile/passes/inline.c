/* The inline pass: every `call` is replaced by a copy of its callee's body. */
#include <string.h>

#include "base/alloc.h"
#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

/* Copies the callee of `call` into c (parameters become the call's operands); *repl is
 * the copy of the callee's root, which replaces the call. */
static tpu_status inline_one(tpu_builder *b, tpu_comp *c, tpu_instr *call, tpu_instr **repl) {
  const tpu_comp *callee = call->to_apply;
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
      if (in->op != TPU_OP_CALL || !in->to_apply) continue;
      st = inline_one(&b, c, in, &repl);
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
