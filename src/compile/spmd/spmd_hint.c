/* spmd-partition's first pass: after a discarded walk over the entry, the splits values are
 * wanted with (hints) — a loop's results used split, a scatter into zeros or a dot's sum an
 * elementwise use wants split further, a dot's operand whole along a contraction its other
 * operand splits — for the real walk to give them (spmd.c, spmd_dot.c, spmd_control.c). */
#include <string.h>

#include "base/alloc.h"
#include "compile/spmd/spmd_int.h"

/* Whether h splits every dimension at least as g does (g's axes a prefix of h's) and some
 * dimension more. */
static int refines(const dsh *h, const dsh *g, int rank) {
  int more = 0;
  for (int k = 0; k < rank; k++) {
    if (g->n[k] > h->n[k] || memcmp(g->ax[k], h->ax[k], (size_t)g->n[k])) return 0;
    more |= h->n[k] > g->n[k];
  }
  return more && !h->manual && !g->manual;
}

int tpu__spmd_dot_wants(const sp *s, const tpu_instr *u, int side, dsh *h) {
  if (u->op != TPU_OP_DOT || u->noperands != 2) return 0;
  const tpu_instr *o = u->operands[side], *q = u->operands[1 - side];
  const tpu_i64s *oc = side ? &u->dot.rhs_contract : &u->dot.lhs_contract;
  const tpu_i64s *qc = side ? &u->dot.lhs_contract : &u->dot.rhs_contract;
  const dsh *qh = &s->sh[q->id];
  *h = s->sh[o->id];
  if (h->manual || qh->manual || !tpu_dtype_is_array(o->shape.dtype)) return 0;
  int more = 0;
  for (int j = 0; j < oc->n; j++) {
    int ko = (int)oc->v[j], kq = (int)qc->v[j];
    if (h->n[ko] || !qh->n[kq]) continue;
    int clash = 0;
    for (int a = 0; a < qh->n[kq]; a++) clash |= tpu__spmd_has_axis(h, o->shape.rank, qh->ax[kq][a]);
    if (clash || o->shape.dims[ko] % factor(s->mesh, qh, kq)) continue;
    h->n[ko] = qh->n[kq];
    memcpy(h->ax[ko], qh->ax[kq], MAXA);
    more = 1;
  }
  return more;
}

const tpu_instr *tpu__spmd_through_unary(const sp *s, const tpu_instr *o) {
  while (o->op != TPU_OP_DOT && tpu__spmd_is_elementwise(o) && o->noperands == 1 && o->operands[0]->shape.rank == o->shape.rank &&
         same_sharding(&s->sh[o->operands[0]->id], &s->sh[o->id], o->shape.rank))
    o = o->operands[0];
  return o;
}

/* The dot whose value x is, through elementwise ops of its shape whose other operands are
 * broadcasts or constants (NULL: none). */
static const tpu_instr *producer_dot(const tpu_instr *x) {
  for (int depth = 0; depth < 8 && x; depth++) {
    if (x->op == TPU_OP_DOT) return x;
    if (!tpu__spmd_is_elementwise(x)) return NULL;
    const tpu_instr *next = NULL;
    for (int k = 0; k < x->noperands; k++) {
      const tpu_instr *o = x->operands[k];
      if (o->op == TPU_OP_BROADCAST || o->op == TPU_OP_CONSTANT) continue;
      if (next || o->shape.rank != x->shape.rank) return NULL;
      next = o;
    }
    x = next;
  }
  return NULL;
}

/* s->hint[x] = h (one sharding: x is not a tuple). */
static tpu_status set_hint(sp *s, const tpu_instr *x, const dsh *h) {
  if (!s->hint) s->hint = tpu_calloc((size_t)(s->old->ninstrs + 1), sizeof *s->hint);
  if (s->hint && !s->hint[x->id]) s->hint[x->id] = tpu_arena_alloc(&s->m->arena, sizeof(dsh));
  if (!s->hint || !s->hint[x->id]) return TPU_FAIL(s->d, TPU_ERR_NOMEM, x->loc, "out of memory");
  *s->hint[x->id] = *h;
  return TPU_OK;
}

/* After a pass over the entry: for every whole value used only... by elementwise ops of its
 * shape, the split those uses got (followed back through chains of elementwise ops);
 * a while loop's result elements read through get-tuple-element then give the loop its
 * hints, and so do a scatter into a broadcast and a dot whose uses want them split
 * further. Returns with s->hint NULL when no hint was made (no second pass). */
tpu_status tpu__spmd_hints(sp *s) {
  const tpu_comp *c = s->old;
  int n = c->ninstrs, any = 0;
  dsh *want = tpu_calloc((size_t)(n + 1), sizeof *want);
  if (!want) return TPU_FAIL(s->d, TPU_ERR_NOMEM, c->loc, "out of memory");
  for (int i = c->norder - 1; i >= 0; i--) {
    const tpu_instr *u = c->order[i];
    if (!tpu__spmd_is_elementwise(u) || !tpu_dtype_is_array(u->shape.dtype)) continue;
    const dsh *h = is_split(&s->sh[u->id], u->shape.rank) ? &s->sh[u->id] : &want[u->id];
    if (!is_split(h, u->shape.rank) || h->manual) continue;
    for (int k = 0; k < u->noperands; k++) {
      const tpu_instr *o = u->operands[k];
      /* a scatter into a broadcast that an elementwise use wants split further (the
       * gradient of take_along_axis beside vocabulary-split logits): its hint */
      if (o->op == TPU_OP_SCATTER && o->shape.rank == u->shape.rank && refines(h, &s->sh[o->id], o->shape.rank) &&
          o->operands[0]->op == TPU_OP_BROADCAST && o->operands[0]->operands[0]->shape.rank == 0) {
        tpu_status st = set_hint(s, o, h);
        if (st != TPU_OK) {
          tpu_free(want);
          return st;
        }
        any = 1;
      }
      /* a dot whose sum an elementwise use wants split along more axes (a block's output
       * projection added to a residual split over tensor): its plan prices the partial
       * sums as the reduce-scatter they become (spmd_dot.c) */
      if (o->op == TPU_OP_DOT && o->shape.rank == u->shape.rank && refines(h, &s->sh[o->id], o->shape.rank) &&
          !(s->hint && s->hint[o->id])) {
        tpu_status st = set_hint(s, o, h);
        if (st != TPU_OK) {
          tpu_free(want);
          return st;
        }
        any = 1;
      }
      /* a dot reached through elementwise ops whose other operands are broadcasts, which
       * this use wants split otherwise (a weight gradient scaled by the learning rate
       * and subtracted from a weight split along its other dimension) */
      if (o->op != TPU_OP_DOT && o->shape.rank == u->shape.rank) {
        const tpu_instr *p = producer_dot(o);
        if (p && p->shape.rank == u->shape.rank && !same_sharding(h, &s->sh[p->id], p->shape.rank) &&
            !s->sh[p->id].manual && !(s->hint && s->hint[p->id]) && tpu__spmd_fits(s, &p->shape, h)) {
          tpu_status st = set_hint(s, p, h);
          if (st != TPU_OK) {
            tpu_free(want);
            return st;
          }
          any = 1;
        }
      }
      if (o->shape.rank != u->shape.rank || is_split(&s->sh[o->id], o->shape.rank) || is_split(&want[o->id], o->shape.rank))
        continue;
      want[o->id] = *h;
    }
  }
  /* A dot one of whose operands is whole along a contracted dimension that the other splits
   * (an MLP's hidden activation against a weight split along its rows): the activation's
   * producer, a dot reached through unary elementwise ops, is hinted to make it split so
   * (tpu__spmd_dot_wants: XLA's propagation carries the weight's split onto the
   * activation; the first matmul's weight moves to its columns, the second's partial sums
   * are all-reduced). */
  for (int i = 0; i < c->norder; i++) {
    const tpu_instr *u = c->order[i];
    for (int side = 0; side < 2; side++) {
      dsh h;
      if (!tpu__spmd_dot_wants(s, u, side, &h)) continue;
      const tpu_instr *o = tpu__spmd_through_unary(s, u->operands[side]);
      if (o->op != TPU_OP_DOT || !refines(&h, &s->sh[o->id], o->shape.rank) || (s->hint && s->hint[o->id])) continue;
      tpu_status st = set_hint(s, o, &h);
      if (st != TPU_OK) {
        tpu_free(want);
        return st;
      }
      any = 1;
    }
  }
  for (int i = 0; i < c->norder; i++) {
    const tpu_instr *g = c->order[i];
    if (g->op != TPU_OP_GET_TUPLE_ELEMENT || g->operands[0]->op != TPU_OP_WHILE || !is_split(&want[g->id], g->shape.rank))
      continue;
    const tpu_instr *w = g->operands[0];
    if (!s->hint) {
      s->hint = tpu_calloc((size_t)(n + 1), sizeof *s->hint);
      if (!s->hint) break;
    }
    if (!s->hint[w->id]) {
      s->hint[w->id] = tpu_arena_alloc(&s->m->arena, sizeof(dsh) * (size_t)(w->shape.ntuple + 1));
      if (!s->hint[w->id]) break;
      memset(s->hint[w->id], 0, sizeof(dsh) * (size_t)(w->shape.ntuple + 1));
    }
    s->hint[w->id][g->index] = want[g->id];
    any = 1;
  }
  tpu_free(want);
  if (!any) {
    tpu_free(s->hint);
    s->hint = NULL;
  }
  return TPU_OK;
}
