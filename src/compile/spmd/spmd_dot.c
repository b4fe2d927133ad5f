/* spmd-partition's dots: each dot's plan (which operand splits to keep, which to gather,
 * which contractions to sum) priced by bytes per chip plus collective latency, and its
 * operands gathered as bf16 where the MXU reads them so. */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "compile/spmd/spmd_int.h"

/* A way to run a dot: the operands' shardings, the result's, and the partial-sum axes. */
typedef struct {
  dsh L, R, out;
  int8_t partial[MAXA];
  int np, valid;
  double cost; /* bytes gathered plus bytes all-reduced, per chip */
} dot_plan;

static double bytes_of(const tpu_shape *g) { return (double)tpu_shape_numel(g) * (double)tpu_dtype_size(g->dtype); }

/* The entry collectives an old value depends on (none inside loops). */
static uint64_t deps_of(const sp *s, const tpu_instr *x) { return tpu__spmd_in_entry(s) ? s->dep[x->id] : 0; }

/* The latency of a collective over n chips, as bytes (tpu_mesh step_bytes): a ring over n
 * chips takes about n/2 hops each way (docs/pod.md); an all-reduce twice that. Nothing when
 * it could join a collective of its kind over the same axes emitted before, independent of
 * it: combine-collectives merges those (a training step's gradient all-reduces become one,
 * as XLA's combiners make them), so only the first pays the latency. */
static double steps_cost(const sp *s, double n, unsigned axes, uint64_t deps, int all_reduce) {
  if (n <= 1 || tpu__spmd_joins_emitted(s, all_reduce ? TPU_OP_ALL_REDUCE : TPU_OP_ALL_GATHER, axes, deps)) return 0;
  return s->mesh->step_bytes * ceil(n / 2) * (all_reduce ? 2 : 1);
}

/* Bytes a chip receives to reshard an operand of global shape g from `from` to `to` (the
 * block it ends with, when any split must be undone), plus the collective's latency over
 * the chips of the undone splits. */
/* Whether dot or convolution `in`'s f32 operands travel as bf16 (tpu_mesh bf16_dot_gathers). */
int tpu__spmd_bf16_gathers(const sp *s, const tpu_instr *in) {
  return s->mesh->bf16_dot_gathers && (in->op == TPU_OP_DOT || in->op == TPU_OP_CONVOLUTION) &&
         in->precision[0] == TPU_PREC_CFG_DEFAULT && in->precision[1] == TPU_PREC_CFG_DEFAULT;
}

static double gather_cost(const sp *s, const tpu_instr *x, const dsh *from, const dsh *to) {
  const tpu_shape *g = &x->shape;
  double f = 1, group = 1;
  unsigned axes = 0;
  for (int k = 0; k < g->rank; k++) {
    if (from->n[k] && !same_dim(from, k, to, k)) {
      group *= (double)factor(s->mesh, from, k);
      axes |= tpu__spmd_axes_mask(from->ax[k], from->n[k]);
    }
    f *= (double)factor(s->mesh, to, k);
  }
  return group > 1 ? bytes_of(g) / f + steps_cost(s, group, axes, deps_of(s, x), 0) : 0;
}

/* Whether the first pass saw dot `in`'s result used split as plan p's output plus exactly
 * its partial-sum axes (each added after p's own axes of some dimension). */
static int sum_wanted_split(const sp *s, const tpu_instr *in, const dot_plan *p) {
  const dsh *h = tpu__spmd_hint_of(s, in);
  if (!h || h->manual) return 0;
  int8_t extra[MAXA * 8];
  int ne = 0;
  for (int k = 0; k < in->shape.rank; k++) {
    if (p->out.n[k] > h->n[k] || memcmp(p->out.ax[k], h->ax[k], (size_t)p->out.n[k])) return 0;
    for (int j = p->out.n[k]; j < h->n[k] && ne < (int)sizeof extra; j++) extra[ne++] = h->ax[k][j];
  }
  if (ne != p->np) return 0;
  for (int i = 0; i < p->np; i++)
    if (!memchr(extra, p->partial[i], (size_t)ne)) return 0;
  return 1;
}

static void plan_dot(const sp *s, const tpu_instr *in, const dsh *L0, const dsh *R0, dot_plan *p) {
  const tpu_instr *lo = in->operands[0], *ro = in->operands[1];
  const tpu_dot_dims *dd = &in->dot;
  int lr = lo->shape.rank, rr = ro->shape.rank;
  memset(p, 0, sizeof *p);
  p->L = *L0;
  p->R = *R0;
  /* Batch and contracting pairs: the lhs decides (the rhs follows); else the rhs. */
  for (int pass = 0; pass < 2; pass++) {
    const tpu_i64s *la = pass ? &dd->lhs_contract : &dd->lhs_batch;
    const tpu_i64s *ra = pass ? &dd->rhs_contract : &dd->rhs_batch;
    for (int i = 0; i < la->n; i++) {
      int kl = (int)la->v[i], kr = (int)ra->v[i];
      if (p->L.n[kl]) {
        p->R.n[kr] = p->L.n[kl];
        memcpy(p->R.ax[kr], p->L.ax[kl], MAXA);
      } else if (p->R.n[kr]) {
        p->L.n[kl] = p->R.n[kr];
        memcpy(p->L.ax[kl], p->R.ax[kr], MAXA);
      }
      if (pass)
        for (int j = 0; j < p->L.n[kl] && p->np < MAXA; j++) p->partial[p->np++] = p->L.ax[kl][j];
    }
  }
  /* Result dimensions: batch, lhs free, rhs free. */
  int rd = 0;
  for (int i = 0; i < dd->lhs_batch.n; i++, rd++) {
    int kl = (int)dd->lhs_batch.v[i];
    p->out.n[rd] = p->L.n[kl];
    memcpy(p->out.ax[rd], p->L.ax[kl], MAXA);
  }
  for (int pass = 0; pass < 2; pass++) {
    int rank = pass ? rr : lr;
    dsh *X = pass ? &p->R : &p->L;
    const tpu_i64s *b = pass ? &dd->rhs_batch : &dd->lhs_batch, *c = pass ? &dd->rhs_contract : &dd->lhs_contract;
    for (int k = 0; k < rank; k++) {
      int used = 0;
      for (int i = 0; i < b->n; i++) used |= b->v[i] == k;
      for (int i = 0; i < c->n; i++) used |= c->v[i] == k;
      if (used) continue;
      /* A free dimension's axes must not split the other operand too. When both operands'
       * free dimensions use an axis, the lhs keeps it and the rhs's is gathered (attention
       * split along the query sequence gathers K and V). */
      dsh Y = pass ? p->L : p->R;
      if (!pass) { /* the rhs's free dimensions give way */
        const tpu_i64s *yb = &dd->rhs_batch, *yc = &dd->rhs_contract;
        for (int j = 0; j < rr; j++) {
          int yused = 0;
          for (int i = 0; i < yb->n; i++) yused |= yb->v[i] == j;
          for (int i = 0; i < yc->n; i++) yused |= yc->v[i] == j;
          if (!yused) Y.n[j] = 0;
        }
      }
      int clash = 0;
      for (int i = 0; i < X->n[k]; i++) clash |= tpu__spmd_has_axis(&Y, pass ? lr : rr, X->ax[k][i]);
      if (clash) X->n[k] = 0;
      p->out.n[rd] = X->n[k];
      memcpy(p->out.ax[rd], X->ax[k], MAXA);
      rd++;
    }
  }
  p->valid = tpu__spmd_fits(s, &lo->shape, &p->L) && tpu__spmd_fits(s, &ro->shape, &p->R) && tpu__spmd_fits(s, &in->shape, &p->out);
  for (int i = 0; p->valid && i < p->np; i++) p->valid = !tpu__spmd_has_axis(&p->out, in->shape.rank, p->partial[i]);
  if (!p->valid) return;
  tpu_shape lout = tpu__spmd_local_shape(s, &in->shape, &p->out);
  double group = 1;
  for (int i = 0; i < p->np; i++) group *= (double)s->mesh->sizes[p->partial[i]];
  /* the chip's share of the dot's multiply-adds: its output block times its slice of the
   * contraction */
  double contract = 1;
  for (int i = 0; i < in->dot.lhs_contract.n; i++) contract *= (double)lo->shape.dims[in->dot.lhs_contract.v[i]];
  double flops = 2 * (double)tpu_shape_numel(&lout) * contract / group;
  /* partial sums: an all-reduce, or a reduce-scatter where the first pass saw a use want
   * the result split along exactly the summed axes (s->hint) */
  double sum = 0;
  if (p->np) {
    unsigned axes = tpu__spmd_axes_mask(p->partial, p->np);
    uint64_t deps = deps_of(s, lo) | deps_of(s, ro);
    sum = 2 * bytes_of(&lout) + steps_cost(s, group, axes, deps, 1);
    /* (the all-reduce's price stays where it is lower: one that joins an earlier
     * all-reduce pays no latency) */
    if (sum_wanted_split(s, in, p)) sum = fmin(sum, bytes_of(&lout) + steps_cost(s, group, axes, deps, 0));
  }
  p->cost = gather_cost(s, lo, L0, &p->L) + gather_cost(s, ro, R0, &p->R) + flops * s->mesh->flop_bytes + sum;
}

/* Operand i of a default-precision dot as `to` wants it (operand_as), an f32 operand that
 * must be gathered moving as bf16: converted before the collectives, back to f32 after
 * (exact: the MXU's one bf16 pass rounds it the same way). */
static tpu_status dot_operand_bf16(sp *s, const tpu_instr *in, int i, const dsh *to, tpu_instr **out) {
  const tpu_instr *o = in->operands[i];
  tpu_instr *x = s->val[o->id];
  const dsh *from = &s->sh[o->id];
  if (s->tsh[o->id] || x->shape.dtype != TPU_F32 || from->manual || gather_cost(s, o, from, to) == 0)
    return tpu__spmd_operand_as(s, in, i, to, out);
  if ((*out = tpu__spmd_resharded(s, x, from, to, 1))) return TPU_OK;
  tpu_instr *xb, *y;
  TPU_TRY(tpu__spmd_convert(s, x, TPU_BF16, in->loc, &xb));
  TPU_TRY(tpu__spmd_reshard(s, xb, from, to, in->loc, &y));
  TPU_TRY(tpu__spmd_convert(s, y, TPU_F32, in->loc, out));
  tpu__spmd_remember(s, x, from, to, 1, *out);
  return TPU_OK;
}

/* The operands lh, rh split as hint h of dot `in` splits the result dimension each free
 * dimension becomes: a whole free dimension takes the hint's split (moved from a
 * contracted dimension split the same way, or a slice of the chip's block), one split
 * otherwise is gathered. 1 when anything changed. */
static int hinted_operands(const sp *s, const tpu_instr *in, const dsh *h, dsh *lh, dsh *rh) {
  if (!h || h->manual || lh->manual || rh->manual) return 0;
  const tpu_dot_dims *dd = &in->dot;
  int rd = dd->lhs_batch.n, added = 0;
  for (int side = 0; side < 2; side++) {
    const tpu_instr *x = in->operands[side];
    dsh *X = side ? rh : lh;
    const tpu_i64s *b = side ? &dd->rhs_batch : &dd->lhs_batch, *c = side ? &dd->rhs_contract : &dd->lhs_contract;
    for (int k = 0; k < x->shape.rank; k++) {
      if (tpu_i64s_find(b, k) >= 0 || tpu_i64s_find(c, k) >= 0) continue;
      int o = rd++;
      if (X->n[k] && !same_dim(X, k, h, o) && !(X->n[k] < h->n[o] && !memcmp(X->ax[k], h->ax[o], (size_t)X->n[k]))) {
        X->n[k] = 0; /* the use wants this dimension split otherwise: gathered */
        added = 1;
      }
      if (X->n[k] || !h->n[o]) continue;
      /* a contracted dimension split exactly so gives its split up (one all-to-all moves
       * it: the weight of the first of two matmuls, split along its rows, to its columns) */
      dsh Y = *X;
      for (int j = 0; j < c->n; j++) {
        int kc = (int)c->v[j];
        if (Y.n[kc] == h->n[o] && !memcmp(Y.ax[kc], h->ax[o], (size_t)h->n[o])) Y.n[kc] = 0;
      }
      int64_t f = 1, clash = 0;
      for (int j = 0; j < h->n[o]; j++) {
        clash |= tpu__spmd_has_axis(&Y, x->shape.rank, h->ax[o][j]);
        f *= s->mesh->sizes[h->ax[o][j]];
      }
      if (clash || x->shape.dims[k] % f) continue;
      *X = Y;
      X->n[k] = h->n[o];
      memcpy(X->ax[k], h->ax[o], MAXA);
      added = 1;
    }
  }
  return added;
}

/* dot: of the ways to run it — keep both operands' splits (split contractions become
 * partial sums), gather the rhs whole, gather the lhs whole, or both, or slice the operands
 * to the split a use wants — the one that moves the fewest bytes per chip (FSDP: the
 * weights are gathered, the batch stays split); a contraction split alike in both operands
 * is always kept. */
tpu_status tpu__spmd_dot(sp *s, const tpu_instr *in) {
  const tpu_instr *lo = in->operands[0], *ro = in->operands[1];
  const dsh *lh = &s->sh[lo->id], *rh = &s->sh[ro->id];
  if (lh->manual || rh->manual) return tpu__spmd_replicated_op(s, in);
  const tpu_dot_dims *dd = &in->dot;
  dot_plan best, p;
  dsh lnc = *lh, rnc = *rh; /* without their contracting splits */
  for (int i = 0; i < dd->lhs_contract.n; i++) lnc.n[dd->lhs_contract.v[i]] = 0;
  for (int i = 0; i < dd->rhs_contract.n; i++) rnc.n[dd->rhs_contract.v[i]] = 0;
  dsh lb = k_repl, rb = k_repl; /* only their batch splits (attention's K and V gathered along
                                 * the sequence but kept split along the batch) */
  for (int i = 0; i < dd->lhs_batch.n; i++) {
    int kl = (int)dd->lhs_batch.v[i], kr = (int)dd->rhs_batch.v[i];
    lb.n[kl] = lh->n[kl];
    memcpy(lb.ax[kl], lh->ax[kl], MAXA);
    rb.n[kr] = rh->n[kr];
    memcpy(rb.ax[kr], rh->ax[kr], MAXA);
  }
  plan_dot(s, in, lh, rh, &best);
  /* Each operand as it is, without its contracting splits (its free splits kept: a weight
   * split over fsdp and tensor gathered over fsdp only), with only its batch splits, or
   * whole. */
  const dsh *cands[][2] = {{&lnc, &rnc}, {lh, &rnc},      {&lnc, rh}, {&lnc, &k_repl}, {&k_repl, &rnc},
                           {&k_repl, &k_repl}, {&lnc, &rb}, {&lb, &rnc}, {&lb, &rb}};
  /* Both operands split alike along every contracted dimension, nothing to gather (a
   * data-parallel weight gradient: activations and output gradient split along the batch it
   * sums): the partial sums stay and are all-reduced, as XLA's partitioner does, even where
   * gathering the batch would move fewer bytes (small batches); a use's wanted split
   * (below) may still slice it. */
  int keep = best.valid && best.np && gather_cost(s, lo, lh, &best.L) == 0 && gather_cost(s, ro, rh, &best.R) == 0;
  for (int i = 0; keep && i < dd->lhs_contract.n; i++) {
    int kl = (int)dd->lhs_contract.v[i], kr = (int)dd->rhs_contract.v[i];
    keep = same_dim(lh, kl, rh, kr);
  }
  /* tpusim's own plan (the better-plan hint): XLA's kept plan is one candidate among the
   * others, the cheapest wins, and a different winner is noted with the constraints that
   * would get it (its operands as it takes them) */
  const int xla_keep = keep;
  const dot_plan xla_plan = best;
  if (s->mesh->own_plans) keep = 0;
  /* A use that wants the result split further (s->hint): the operands' free dimensions take
   * those splits where they are whole and the operand does not use the axis, a slice of
   * each chip's own block (XLA's partitioner slices the operands to the output's sharding:
   * a weight gradient summed over the batch only for the chip's block of the weight). */
  const dsh *hint = tpu__spmd_hint_of(s, in);
  if (hint && hint->manual) hint = NULL;
  dsh lh2 = *lh, rh2 = *rh;
  if (best.valid && hint) best.cost += gather_cost(s, in, &best.out, hint);
  int hinted = hinted_operands(s, in, hint, &lh2, &rh2);
  int nc = (int)(sizeof cands / sizeof cands[0]);
  for (int c = keep ? nc : 0; c < nc + hinted; c++) {
    const dsh *const *cand = c < nc ? cands[c] : (const dsh *const[]){&lh2, &rh2};
    plan_dot(s, in, cand[0], cand[1], &p);
    /* The cost of a candidate counts gathering from the operands' real splits. */
    if (p.valid)
      p.cost += gather_cost(s, lo, lh, cand[0]) + gather_cost(s, ro, rh, cand[1]);
    /* and moving its result to the split a use wants */
    if (p.valid && hint) p.cost += gather_cost(s, in, &p.out, hint);
    /* (the hinted plan, last, wins a tie: it gives the use the split it wants) */
    if (p.valid && (!best.valid || p.cost < best.cost || (c >= nc && p.cost <= best.cost))) best = p;
  }
  if (xla_keep && !keep && best.valid && (!same_sharding(&best.L, &xla_plan.L, lo->shape.rank) ||
                                          !same_sharding(&best.R, &xla_plan.R, ro->shape.rank))) {
    if (!same_sharding(&best.L, lh, lo->shape.rank))
      tpu__spmd_note_constraint(s, lo, &best.L, in, "lhs: XLA sums the split contraction");
    if (!same_sharding(&best.R, rh, ro->shape.rank))
      tpu__spmd_note_constraint(s, ro, &best.R, in, "rhs: XLA sums the split contraction");
  }
  /* Plans are chosen on f32 bytes (bf16 transport halves every gather alike; choosing on
   * it would trade a tensor-parallel block's one all-reduce for gathers). */
  int halve = tpu__spmd_bf16_gathers(s, in);
  if (!best.valid) return tpu__spmd_replicated_op(s, in);
  tpu_instr *ops[2], *x;
  /* an operand gathered over a ring: the XLA TPU compiler's windowed einsum */
  tpu_shape os0 = tpu__spmd_local_shape(s, &in->shape, &best.out);
  tpu_shape ls0 = tpu__spmd_local_shape(s, &in->operands[0]->shape, &best.L);
  double flops = 2.0 * (double)tpu_shape_numel(&os0);
  for (int i = 0; i < in->dot.lhs_contract.n; i++) flops *= (double)ls0.dims[in->dot.lhs_contract.v[i]];
  for (int side = 0; side < 2 && !best.np; side++) {
    const dsh *from = side ? rh : lh, *to = side ? &best.R : &best.L, *oto = side ? &best.L : &best.R;
    const tpu_instr *xo = in->operands[side];
    int rd;
    if (s->tsh[xo->id] || (halve && xo->shape.dtype == TPU_F32) ||
        !tpu__spmd_window_gather(s, in, side, from, to, oto, flops, &rd))
      continue;
    TPU_TRY(halve ? dot_operand_bf16(s, in, 1 - side, oto, &ops[1 - side]) : tpu__spmd_operand_as(s, in, 1 - side, oto, &ops[1 - side]));
    tpu_shape os = tpu__spmd_local_shape(s, &in->shape, &best.out);
    TPU_TRY(tpu__spmd_window_dot(s, in, side, rd, from, ops[1 - side], s->val[xo->id], &os, &x));
    s->val[in->id] = x;
    s->sh[in->id] = best.out;
    return TPU_OK;
  }
  TPU_TRY(halve ? dot_operand_bf16(s, in, 0, &best.L, &ops[0]) : tpu__spmd_operand_as(s, in, 0, &best.L, &ops[0]));
  TPU_TRY(halve ? dot_operand_bf16(s, in, 1, &best.R, &ops[1]) : tpu__spmd_operand_as(s, in, 1, &best.R, &ops[1]));
  TPU_TRY(tpu_build_clone_instr(&s->b, s->c, in, ops, &x));
  x->shape = tpu__spmd_local_shape(s, &in->shape, &best.out);
  if (best.np) {
    tpu_comp *add;
    TPU_TRY(tpu__spmd_adder(s, in->shape.dtype, &add));
    TPU_TRY(tpu__spmd_reduce_axes(s, x, best.partial, best.np, add, in->loc, &x));
  }
  s->val[in->id] = x;
  s->sh[in->id] = best.out;
  return TPU_OK;
}
