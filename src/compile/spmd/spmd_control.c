/* spmd-partition's control flow: loop and branch computations partitioned with their
 * state's splits (while loops keep them through every iteration; conditional branches
 * return the splits they agree on). */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strbuf.h"
#include "compile/spmd/spmd_int.h"

/* Partitions computation `old` (a loop's condition or body) whose one parameter is the
 * loop state with elements split as `el` (NULL: whole) into a new computation; for a body
 * (`el_out` = el) the result's elements are resharded back to el, so every iteration sees
 * the same splits; a body's `want_el` (NULL: not wanted) gets the splits its dots want for
 * state elements they read whole along a contraction (tpu__spmd_dot_wants). */
static tpu_status partition_comp(sp *s, const tpu_comp *old, const dsh *el, int is_body, dsh *root_el,
                                 dsh *want_el, tpu_comp **out) {
  sp saved = *s; /* the caller's frame */
  tpu_status st = tpu_build_comp(&s->b, old->name, saved.c, out);
  if (st != TPU_OK) return st;
  int n = old->ninstrs;
  s->old = (tpu_comp *)old;
  s->c = *out;
  s->pos = NULL;
  s->val = tpu_calloc((size_t)(n + 1), sizeof *s->val);
  s->sh = tpu_calloc((size_t)(n + 1), sizeof *s->sh);
  s->tsh = tpu_calloc((size_t)(n + 1), sizeof *s->tsh);
  if (!s->val || !s->sh || !s->tsh) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, old->loc, "out of memory");
  const tpu_instr *p0 = old->nparams == 1 ? old->params[0] : NULL;
  if (st == TPU_OK && !p0) st = tpu__spmd_fail_at(s, old->root, "a loop or branch computation without exactly one parameter");
  if (st == TPU_OK) { /* the state parameter, its elements per chip */
    tpu_shape ps = p0->shape;
    int nt = ps.dtype == TPU_TUPLE ? ps.ntuple : 0;
    if (!nt && el && tpu_dtype_is_array(ps.dtype)) ps = tpu__spmd_local_shape(s, &p0->shape, el); /* a branch's array */
    if (nt && el) {
      ps.elems = tpu_arena_alloc(&s->m->arena, sizeof *ps.elems * (size_t)(nt + 1));
      if (!ps.elems) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, old->loc, "out of memory");
      for (int i = 0; st == TPU_OK && i < nt; i++)
        ps.elems[i] = tpu_dtype_is_array(p0->shape.elems[i].dtype) ? tpu__spmd_local_shape(s, &p0->shape.elems[i], &el[i])
                                                                  : p0->shape.elems[i];
    }
    tpu_instr *p;
    if (st == TPU_OK) st = tpu_build_param(&s->b, s->c, 0, p0->name, &ps, &p);
    if (st == TPU_OK) {
      s->val[p0->id] = p;
      s->sh[p0->id] = !nt && el ? el[0] : k_repl;
      s->tsh[p0->id] = nt && el ? (dsh *)el : NULL;
    }
  }
  for (int i = 0; st == TPU_OK && i < old->norder; i++)
    if (old->order[i] != p0) st = tpu__spmd_partition_instr(s, old->order[i]);
  /* The state elements a dot of the body wants split further (tpu__spmd_dot_wants: the
   * layer input of a scan over layers, against a weight split along its rows). */
  for (int i = 0; st == TPU_OK && want_el && p0 && i < old->norder; i++)
    for (int side = 0; side < 2; side++) {
      dsh h;
      if (!tpu__spmd_dot_wants(s, old->order[i], side, &h)) continue;
      const tpu_instr *g = tpu__spmd_through_unary(s, old->order[i]->operands[side]);
      if (g->op == TPU_OP_GET_TUPLE_ELEMENT && g->operands[0] == p0 && g->index >= 0 && g->index < p0->shape.ntuple)
        want_el[g->index] = h;
    }
  if (st == TPU_OK) {
    const tpu_instr *r = old->root;
    tpu_instr *root = s->val[r->id];
    if (is_body == 1 && r->shape.dtype == TPU_TUPLE) {
      for (int i = 0; root_el && i < r->shape.ntuple; i++) root_el[i] = s->tsh[r->id] ? s->tsh[r->id][i] : k_repl;
      if (s->tsh[r->id]) {
        st = tpu__spmd_reshard_tuple(s, root, s->tsh[r->id], el, r->loc, &root);
      } else if (el) { /* a whole tuple: each chip takes its blocks */
        dsh *whole = tpu_arena_alloc(&s->m->arena, sizeof *whole * (size_t)(r->shape.ntuple + 1));
        if (!whole) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, r->loc, "out of memory");
        for (int i = 0; st == TPU_OK && i < r->shape.ntuple; i++) whole[i] = k_repl;
        if (st == TPU_OK) st = tpu__spmd_reshard_tuple(s, root, whole, el, r->loc, &root);
      }
    } else if ((!is_body || is_body == 2) && tpu_dtype_is_array(r->shape.dtype)) {
      st = tpu__spmd_reshard(s, root, &s->sh[r->id], &k_repl, r->loc, &root);
    } else if (is_body == 3) { /* a branch as it comes: its result's splits */
      if (tpu_dtype_is_array(r->shape.dtype)) root_el[0] = s->sh[r->id];
      for (int i = 0; r->shape.dtype == TPU_TUPLE && i < r->shape.ntuple; i++)
        root_el[i] = s->tsh[r->id] ? s->tsh[r->id][i] : k_repl;
    } else if (is_body == 2 && r->shape.dtype == TPU_TUPLE && s->tsh[r->id]) { /* a branch: whole results */
      dsh *whole = tpu_arena_alloc(&s->m->arena, sizeof *whole * (size_t)(r->shape.ntuple + 1));
      if (!whole) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, r->loc, "out of memory");
      for (int i = 0; st == TPU_OK && i < r->shape.ntuple; i++) whole[i] = k_repl;
      if (st == TPU_OK) st = tpu__spmd_reshard_tuple(s, root, s->tsh[r->id], whole, r->loc, &root);
    }
    if (st == TPU_OK) {
      tpu_build_set_root(s->c, root);
      st = tpu_build_finish(&s->b, s->c);
    }
  }
  tpu_free(s->val);
  tpu_free(s->sh);
  tpu_free(s->tsh);
  s->old = saved.old;
  s->c = saved.c;
  s->val = saved.val;
  s->sh = saved.sh;
  s->tsh = saved.tsh;
  s->pos = saved.pos;
  return st;
}

/* A while loop keeps its state's splits through every iteration. An element that enters
 * whole but that the body computes split (a scan's stacked outputs, written one slice at
 * a time) is split from the start instead: the body is partitioned again with it split,
 * and the initial value sliced (no communication). */
tpu_status tpu__spmd_while_loop(sp *s, const tpu_instr *in) {
  const tpu_instr *o = in->operands[0];
  if (s->sh[o->id].manual || o->shape.dtype != TPU_TUPLE) return tpu__spmd_replicated_op(s, in);
  int nt = o->shape.ntuple;
  dsh *el = tpu_arena_alloc(&s->m->arena, sizeof *el * (size_t)(nt + 1));
  dsh *got = tpu_calloc((size_t)(nt + 1), sizeof *got), *wants = tpu_calloc((size_t)(nt + 1), sizeof *wants);
  if (!el || !got || !wants) {
    tpu_free(got);
    tpu_free(wants);
    return TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  }
  for (int i = 0; i < nt; i++) {
    el[i] = s->tsh[o->id] ? s->tsh[o->id][i] : k_repl;
    /* A whole element that the entry uses split after the loop (gradients accumulated
     * in a scan, then applied to split parameters) starts split. */
    const dsh *hi = tpu__spmd_hint_of(s, in);
    if (hi && !is_split(&el[i], o->shape.elems[i].rank) && tpu_dtype_is_array(o->shape.elems[i].dtype) &&
        tpu__spmd_fits(s, &o->shape.elems[i], &hi[i]))
      el[i] = hi[i];
  }
  tpu_comp *cond, *body;
  tpu_status st = TPU_OK;
  for (int round = 0; st == TPU_OK && round < 3; round++) {
    memset(wants, 0, sizeof *wants * (size_t)(nt + 1));
    st = partition_comp(s, in->body, el, 1, got, wants, &body);
    int changed = 0;
    for (int i = 0; st == TPU_OK && i < nt; i++) {
      int rank = o->shape.elems[i].rank;
      if (!tpu_dtype_is_array(o->shape.elems[i].dtype)) continue;
      if (!is_split(&el[i], rank) && is_split(&got[i], rank) && !got[i].manual &&
          tpu__spmd_fits(s, &o->shape.elems[i], &got[i])) {
        el[i] = got[i];
        changed = 1;
      } else if (is_split(&wants[i], rank) && !wants[i].manual && !same_sharding(&wants[i], &el[i], rank) &&
                 tpu__spmd_fits(s, &o->shape.elems[i], &wants[i])) {
        /* a state element a dot of the body wants split along its contraction as the
         * weight is (XLA's propagation carries the split into the loop's state) */
        el[i] = wants[i];
        changed = 1;
      }
    }
    if (!changed) break;
  }
  tpu_free(got);
  tpu_free(wants);
  TPU_TRY(st);
  TPU_TRY(partition_comp(s, in->condition, el, 0, NULL, NULL, &cond));
  tpu_instr *x = s->val[o->id], *w;
  {
    const dsh *from = s->tsh[o->id];
    dsh *whole = NULL;
    if (!from) {
      whole = tpu_calloc((size_t)(nt + 1), sizeof *whole);
      if (!whole) return TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
      from = whole;
    }
    st = tpu__spmd_reshard_tuple(s, x, from, el, in->loc, &x);
    tpu_free(whole);
    TPU_TRY(st);
  }
  TPU_TRY(tpu_build_clone_instr(&s->b, s->c, in, &x, &w));
  w->shape = x->shape;
  TPU_TRY(tpu_build_set_attr(&s->b, w, "condition", cond->name));
  TPU_TRY(tpu_build_set_attr(&s->b, w, "body", body->name));
  s->val[in->id] = w;
  s->sh[in->id] = k_repl;
  s->tsh[in->id] = (dsh *)el;
  return TPU_OK;
}

/* A conditional (lax.cond, lax.switch): each branch is partitioned with its operand's
 * splits (the branch index is whole) and returns whole results, so every branch gives each
 * chip the same shapes. */
tpu_status tpu__spmd_conditional_op(sp *s, const tpu_instr *in) {
  int nb = in->nbranches;
  if (in->noperands != nb + 1) return tpu__spmd_replicated_op(s, in);
  for (int b = 0; b < nb; b++) {
    const tpu_instr *o = in->operands[1 + b];
    if (s->sh[o->id].manual || in->branches[b]->nparams != 1) return tpu__spmd_replicated_op(s, in);
  }
  tpu_instr **ops = tpu_calloc((size_t)(nb + 2), sizeof *ops);
  tpu_comp **nbr = tpu_calloc((size_t)(nb + 1), sizeof *nbr);
  tpu_status st = ops && nbr ? TPU_OK : TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  if (st == TPU_OK) st = tpu__spmd_operand_as(s, in, 0, &k_repl, &ops[0]);
  /* Branches that all give their results the same splits keep them; else results are whole. */
  int nr = in->shape.dtype == TPU_TUPLE ? in->shape.ntuple : 1, agree = 1;
  dsh *res = tpu_arena_alloc(&s->m->arena, sizeof *res * (size_t)(nr + 1));
  dsh *got = tpu_calloc((size_t)(nr + 1), sizeof *got);
  if (st == TPU_OK && (!res || !got)) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  for (int pass = 0; pass < 2 && st == TPU_OK; pass++) {
    for (int b = 0; st == TPU_OK && b < nb; b++) {
      const tpu_instr *o = in->operands[1 + b];
      const dsh *el = tpu_dtype_is_array(o->shape.dtype) ? &s->sh[o->id] : s->tsh[o->id];
      ops[1 + b] = s->val[o->id];
      st = partition_comp(s, in->branches[b], el, agree ? 3 : 2, got, NULL, &nbr[b]);
      if (st == TPU_OK && agree && !b) memcpy(res, got, sizeof *res * (size_t)nr);
      if (st == TPU_OK && agree && b) agree = !memcmp(res, got, sizeof *res * (size_t)nr);
    }
    if (agree) break;
  }
  tpu_free(got);
  tpu_instr *w = NULL;
  if (st == TPU_OK) st = tpu_build_clone_instr(&s->b, s->c, in, ops, &w);
  if (st == TPU_OK && in->pred_branches) {
    st = tpu_build_set_attr(&s->b, w, "true_computation", nbr[0]->name);
    if (st == TPU_OK) st = tpu_build_set_attr(&s->b, w, "false_computation", nbr[1]->name);
  } else if (st == TPU_OK) {
    tpu_strbuf b;
    tpu_strbuf_init(&b);
    tpu_strbuf_printf(&b, "{");
    for (int i = 0; i < nb; i++) tpu_strbuf_printf(&b, "%s%s", i ? ", " : "", nbr[i]->name);
    tpu_strbuf_printf(&b, "}");
    w->branches = NULL; /* the attribute gives them again */
    w->nbranches = 0;
    st = tpu__spmd_set_attr_text(s, w, "branch_computations", &b, in->loc);
  }
  if (st == TPU_OK && agree) { /* per-chip result shapes */
    if (in->shape.dtype == TPU_TUPLE) {
      w->shape.elems = tpu_arena_alloc(&s->m->arena, sizeof *w->shape.elems * (size_t)(nr + 1));
      if (!w->shape.elems) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
      for (int i = 0; st == TPU_OK && i < nr; i++)
        w->shape.elems[i] = tpu_dtype_is_array(in->shape.elems[i].dtype) ? tpu__spmd_local_shape(s, &in->shape.elems[i], &res[i])
                                                                         : in->shape.elems[i];
    } else if (tpu_dtype_is_array(in->shape.dtype)) {
      w->shape = tpu__spmd_local_shape(s, &in->shape, &res[0]);
    }
  }
  if (st == TPU_OK) {
    s->val[in->id] = w;
    s->sh[in->id] = agree && in->shape.dtype != TPU_TUPLE ? res[0] : k_repl;
    s->tsh[in->id] = agree && in->shape.dtype == TPU_TUPLE ? res : NULL;
  }
  tpu_free(ops);
  tpu_free(nbr);
  return st;
}
