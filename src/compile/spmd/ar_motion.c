/* combine-collectives, step zero: while-loop all-reduce code motion, as XLA's
 * WhileLoopAllReduceCodeMotion in the TPU compiler's pipeline. A gradient-accumulation loop
 * sums each microbatch's gradient into a loop-carried buffer; partitioned over data, each
 * iteration all-reduces its gradient before adding it:
 *     while: g = all-reduce(b); acc = acc + convert(g)
 * An all-reduce whose only use is that add (directly or through one float convert), into a
 * state element the loop reads nowhere else (the body's root passes the sum on at the same
 * index, the condition does not read it), is sunk: the body adds the un-reduced b, and the
 * loop's result for that element is all-reduced once after the loop, in the buffer's type.
 * The buffer starts at zero (its initial value, when not zero already, is added after the
 * all-reduce), so the sum is the same: the all-reduce is linear in add. One all-reduce
 * instead of one per iteration; in the buffer's type (f32 gradients: twice the bytes of a
 * bf16 one, once).
 *
 * A reduce-scatter is sunk the same way (the pass with enable_reduce_scatter, as the TPU
 * compiler runs it: libtpu's optimized module of the planner's two-microbatch LLaMA step sums
 * the embedding's and the LM head's gradients un-scattered in the microbatch loop and
 * reduce-scatters them once after it, docs/plan.md), under XLA's narrower pattern: between
 * the reduce-scatter and the add only a convert, the buffer read straight from the loop
 * state. The state element then holds the reduce-scatter's operand shape (the whole
 * gradient, in the buffer's type): the loop carries n times the shard's bytes and runs one
 * collective after it instead of one per iteration. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

/* Whether x is the scalar 0, or a broadcast of it. */
static int is_zero(const tpu_instr *x) {
  if (x->op == TPU_OP_BROADCAST && x->noperands == 1) x = x->operands[0];
  return x->op == TPU_OP_CONSTANT && x->literal && tpu_shape_numel(&x->shape) == 1 &&
         tpu_tensor_get_f64(x->literal, 0) == 0.0;
}

/* Whether computation c reads element i of its parameter 0 (a get-tuple-element of it, or
 * the parameter itself used whole by anything but get-tuple-elements). */
static int reads_element(const tpu_comp *c, int64_t i) {
  if (c->nparams < 1) return 1;
  const tpu_instr *p = c->params[0];
  for (int k = 0; k < c->ninstrs; k++) {
    const tpu_instr *in = c->instrs[k];
    for (int j = 0; j < in->noperands; j++)
      if (in->operands[j] == p && (in->op != TPU_OP_GET_TUPLE_ELEMENT || in->index == i)) return 1;
  }
  return c->root == p;
}

/* Element i of tuple shape *s becomes *el, in an array of its own (tuple elements may be
 * shared between instructions). 0 when out of memory. */
static int set_elem(tpu_builder *b, tpu_shape *s, int64_t i, const tpu_shape *el) {
  tpu_shape *e = tpu_arena_alloc(&b->m->arena, sizeof *e * (size_t)(s->ntuple + 1));
  if (!e) return 0;
  for (int k = 0; k < s->ntuple; k++) e[k] = s->elems[k];
  e[i] = *el;
  s->elems = e;
  return 1;
}

/* The accumulation the all-reduce ar of body feeds: *add (acc + x), *cv (the convert between,
 * or NULL) and the state index *idx; 0 when ar is not sinkable. */
static int accumulation(const tpu_comp *body, const tpu_uses *u, tpu_instr *ar, tpu_instr **add, tpu_instr **cv,
                        int64_t *idx) {
  if ((ar->op != TPU_OP_ALL_REDUCE && ar->op != TPU_OP_REDUCE_SCATTER) || ar->noperands != 1 || !tpu_dtype_is_array(ar->shape.dtype) || ar->is_root ||
      !ar->to_apply || !ar->to_apply->root || ar->to_apply->root->op != TPU_OP_ADD || u->nusers[ar->id] != 1)
    return 0;
  tpu_instr *x = ar, *a = u->users[ar->id][0];
  *cv = NULL;
  if (a->op == TPU_OP_CONVERT && tpu_dtype_is_float(a->shape.dtype) && tpu_dtype_is_float(ar->shape.dtype) &&
      u->nusers[a->id] == 1 && !a->is_root) {
    *cv = a;
    x = a;
    a = u->users[a->id][0];
  }
  /* the add's only use is the root tuple, which passes the sum on */
  if (a->op != TPU_OP_ADD || a->noperands != 2 || u->nusers[a->id] != 1 || u->users[a->id][0] != body->root) return 0;
  const tpu_instr *root = body->root, *p = body->nparams ? body->params[0] : NULL;
  tpu_instr *acc = a->operands[0] == x ? a->operands[1] : a->operands[1] == x ? a->operands[0] : NULL;
  if (!acc || !p || acc->op != TPU_OP_GET_TUPLE_ELEMENT || acc->operands[0] != p || u->nusers[acc->id] != 1 ||
      root->op != TPU_OP_TUPLE || acc->index < 0 || acc->index >= root->noperands || root->operands[acc->index] != a)
    return 0;
  for (int j = 0; j < root->noperands; j++)
    if (j != acc->index && root->operands[j] == a) return 0;
  /* no other reader of the element in the body */
  for (int k = 0; k < body->ninstrs; k++) {
    const tpu_instr *in = body->instrs[k];
    if (in != acc && in->op == TPU_OP_GET_TUPLE_ELEMENT && in->operands[0] == p && in->index == acc->index) return 0;
    for (int j = 0; j < in->noperands; j++)
      if (in->operands[j] == p && in->op != TPU_OP_GET_TUPLE_ELEMENT) return 0;
  }
  *add = a;
  *idx = acc->index;
  return 1;
}

/* A sunk reduce-scatter's state element i of loop w becomes the whole value x (the
 * reduce-scatter's operand) in the buffer's type: the loop, its input tuple, the body's and
 * the condition's parameter, the body's root, the buffer's read, the convert and the add. */
static tpu_status whole_state(tpu_builder *b, tpu_instr *w, int64_t i, const tpu_instr *x, tpu_instr *cv, tpu_instr *add,
                              tpu_diag *d) {
  tpu_shape whole = w->shape.elems[i];
  whole.rank = x->shape.rank;
  for (int k = 0; k < x->shape.rank; k++) whole.dims[k] = x->shape.dims[k];
  whole.has_layout = 0;
  whole.layout_tail = NULL;
  tpu_comp *body = w->body;
  const tpu_instr *v = cv ? cv : x;
  tpu_instr *acc = add->operands[0] == v ? add->operands[1] : add->operands[0];
  if (!set_elem(b, &w->shape, i, &whole) || !set_elem(b, &w->operands[0]->shape, i, &whole) ||
      !set_elem(b, &body->params[0]->shape, i, &whole) || !set_elem(b, &body->root->shape, i, &whole) ||
      (w->condition->nparams && !set_elem(b, &w->condition->params[0]->shape, i, &whole)))
    return TPU_FAIL(d, TPU_ERR_NOMEM, w->loc, "out of memory");
  acc->shape = whole;
  add->shape = whole;
  if (cv) {
    tpu_dtype t = cv->shape.dtype;
    cv->shape = x->shape;
    cv->shape.dtype = t;
    cv->shape.has_layout = 0;
    cv->shape.layout_tail = NULL;
  }
  return TPU_OK;
}

/* Sinks the all-reduces of while loop w (in computation c) whose sums only accumulate. */
static tpu_status sink_one(tpu_builder *b, tpu_comp *c, tpu_instr *w, const tpu_uses *cu, int *changed, tpu_diag *d) {
  tpu_comp *body = w->body;
  if (!body || !w->condition || w->noperands != 1 || w->shape.dtype != TPU_TUPLE || tpu_build_callers(b->m, body) != 1) return TPU_OK;
  tpu_instr *init = w->operands[0];
  if (init->op != TPU_OP_TUPLE || cu->nusers[init->id] != 1) return TPU_OK;
  for (int k = 0; k < cu->nusers[w->id]; k++)
    if (cu->users[w->id][k]->op != TPU_OP_GET_TUPLE_ELEMENT) return TPU_OK;
  if (w->is_root) return TPU_OK;
  /* XLA's WhileLoopSimplifier has removed a loop that runs at most once before the code
   * motion runs (a one-microbatch step written as a loop): its collectives stay where they are */
  int64_t trips = tpu__while_trip_count(w);
  if (trips >= 0 && trips <= 1) return TPU_OK;
  tpu_uses u;
  TPU_TRY(tpu_build_uses(b, body, &u));
  int nb = body->ninstrs;
  tpu_status st = TPU_OK;
  for (int k = 0; st == TPU_OK && k < nb; k++) {
    tpu_instr *ar = body->instrs[k], *add, *cv;
    int64_t i;
    if (!accumulation(body, &u, ar, &add, &cv, &i) || reads_element(w->condition, i)) continue;
    const tpu_shape acc_shape0 = w->shape.elems[i], *acc_shape = &acc_shape0;
    /* the body: the un-reduced value is accumulated */
    tpu_instr *x = ar->operands[0];
    if (cv) cv->operands[0] = x;
    else for (int j = 0; j < 2; j++)
        if (add->operands[j] == ar) add->operands[j] = x;
    int rs = ar->op == TPU_OP_REDUCE_SCATTER;
    tpu_instr *start = init->operands[i], *zero = NULL;
    if (rs && (st = whole_state(b, w, i, x, cv, add, d)) != TPU_OK) break;
    /* the loop starts the element at zero; the initial value, when not zero, is added after */
    if (rs || !is_zero(start)) {
      tpu_tensor z;
      st = tpu_tensor_alloc(&z, acc_shape->dtype, 0, NULL, d);
      if (st != TPU_OK) break;
      tpu_instr *s0;
      tpu_shape bs = w->shape.elems[i];
      bs.layout_tail = NULL;
      bs.has_layout = 0;
      st = tpu_build_constant(b, c, "zero", &z, NULL, &s0);
      if (st == TPU_OK) st = tpu_build_instr_like(b, c, w, TPU_OP_BROADCAST, "zero", &bs, &s0, 1, &zero);
      if (st == TPU_OK) st = tpu_build_set_attr(b, zero, "dimensions", "{}");
      if (st != TPU_OK) break;
      init->operands[i] = zero;
      if (is_zero(start)) zero = NULL; /* a reduce-scatter's zero start needs no add after */
    }
    /* after the loop: one all-reduce of the element, in its type */
    tpu_comp *red = ar->to_apply;
    if (red->root->shape.dtype != acc_shape->dtype) {
      st = tpu_build_scalar_comp(b, "add", TPU_OP_ADD, acc_shape->dtype, c, &red);
      if (st != TPU_OK) break;
    }
    for (int g = 0; st == TPU_OK && g < cu->nusers[w->id]; g++) {
      tpu_instr *gte = cu->users[w->id][g], *sum, *res;
      if (gte->index != i) continue;
      gte->shape = w->shape.elems[i];
      st = tpu_build_clone_instr(b, c, ar, &gte, &sum);
      if (st != TPU_OK) break;
      sum->shape = *acc_shape;
      sum->shape.layout_tail = NULL;
      sum->to_apply = red;
      st = tpu_build_set_attr(b, sum, "to_apply", red->name);
      res = sum;
      if (st == TPU_OK && zero) {
        tpu_instr *ops[2] = {start, sum};
        st = tpu_build_instr_like(b, c, w, TPU_OP_ADD, "acc", &sum->shape, ops, 2, &res);
      }
      if (st != TPU_OK) break;
      tpu_build_replace_uses(c, gte, res);
      sum->operands[0] = gte; /* replace_uses rewired the new all-reduce's own operand too */
    }
    *changed = 1;
  }
  tpu_build_uses_free(&u);
  if (st == TPU_OK && *changed && tpu_build_remove_dead(b, body) < 0) st = TPU_ERR_NOMEM;
  return st;
}

tpu_status tpu__sink_loop_all_reduces(tpu_builder *b, tpu_comp *c, int *changed, tpu_diag *d) {
  int any = 0;
  for (int i = 0; i < c->ninstrs && !any; i++) any = c->instrs[i]->op == TPU_OP_WHILE;
  if (!any) return TPU_OK;
  tpu_uses cu;
  TPU_TRY(tpu_build_uses(b, c, &cu));
  int n = c->ninstrs, made = 0;
  tpu_status st = TPU_OK;
  for (int i = 0; st == TPU_OK && i < n; i++)
    if (c->instrs[i]->op == TPU_OP_WHILE) st = sink_one(b, c, c->instrs[i], &cu, &made, d);
  tpu_build_uses_free(&cu);
  if (st == TPU_OK && made) {
    *changed = 1;
    st = tpu_build_finish_all(b);
  }
  return st;
}
