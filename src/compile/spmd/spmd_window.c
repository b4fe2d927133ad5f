/* spmd-partition's windowed einsums: a dot whose operand must be gathered round a ring of
 * devices (the mesh axes that split it: every device for FSDP, one axis of a 2-D mesh for
 * SUMMA or sequence-parallel Megatron) runs, as the XLA TPU compiler runs it where each ring
 * step hides more than it costs, as a loop over the operand's blocks passed around the ring
 * by collective-permutes: each iteration multiplies the two blocks a chip holds (one arriving
 * each way round) while the next two travel, so no chip ever holds the whole operand
 * (docs/spmd.md, "Windowed einsum"). The loop's values equal the gathered dot's up to the
 * order of the partial sums (a split contraction adds one block's product at a time). */
#include <stdio.h>
#include <string.h>

#include "base/strbuf.h"
#include "compile/spmd/spmd_int.h"

static tpu_status s32op(sp *s, tpu_opcode op, tpu_instr *a, tpu_instr *b, tpu_loc loc, tpu_instr **out) {
  tpu_shape i32 = tpu__spmd_scalar(TPU_S32);
  tpu_instr *ops[2] = {a, b};
  return tpu__spmd_instr(s, op, "spmd.window.i", &i32, ops, 2, loc, out);
}

/* A loop over the ring being built: its state is a 5-tuple whose last element counts the
 * steps (two per iteration, n/2 in all); the pass builds into its body between open_loop
 * and close_loop. */
typedef struct {
  tpu_comp *entry, *cond, *body;
  tpu_instr *entry_pos, *state, *i;
  int64_t n; /* the ring's chips */
} ring_loop;

static tpu_status open_loop(sp *s, const char *base, int64_t n, tpu_instr *init, tpu_loc loc, ring_loop *l) {
  memset(l, 0, sizeof *l);
  l->n = n;
  l->entry = s->c;
  l->entry_pos = s->pos;
  char name[160];
  snprintf(name, sizeof name, "%s.window_body", base);
  TPU_TRY(tpu_build_comp(&s->b, name, l->entry, &l->body));
  snprintf(name, sizeof name, "%s.window_cond", base);
  TPU_TRY(tpu_build_comp(&s->b, name, l->entry, &l->cond));
  /* the condition: i < n/2 */
  s->c = l->cond;
  s->pos = NULL;
  tpu_instr *p, *i, *lim, *lt, *ops[2];
  tpu_shape pr = tpu__spmd_scalar(TPU_PRED);
  tpu_status st = tpu_build_param(&s->b, l->cond, 0, "state", &init->shape, &p);
  if (st == TPU_OK) st = tpu__spmd_gte(s, p, 4, loc, &i);
  if (st == TPU_OK) st = tpu__spmd_const(s, TPU_S32, n / 2, NULL, loc, &lim);
  if (st == TPU_OK) {
    ops[0] = i;
    ops[1] = lim;
    st = tpu__spmd_instr(s, TPU_OP_COMPARE, "spmd.window.more", &pr, ops, 2, loc, &lt);
  }
  if (st == TPU_OK) st = tpu_build_set_attr(&s->b, lt, "direction", "LT");
  if (st == TPU_OK) {
    tpu_build_set_root(l->cond, lt);
    st = tpu_build_finish(&s->b, l->cond);
  }
  /* the body's parameter and step count */
  s->c = l->body;
  s->pos = NULL;
  if (st == TPU_OK) st = tpu_build_param(&s->b, l->body, 0, "state", &init->shape, &l->state);
  if (st == TPU_OK) st = tpu__spmd_gte(s, l->state, 4, loc, &l->i);
  if (st != TPU_OK) {
    s->c = l->entry;
    s->pos = l->entry_pos;
  }
  return st;
}

/* Ends the body with the state's next four elements (the count advances by two), returns to
 * the entry and makes the while loop there from `init` (st: how the body went). */
static tpu_status close_loop(sp *s, ring_loop *l, tpu_status st, tpu_instr *const *next, tpu_instr *init, tpu_loc loc,
                             tpu_instr **out) {
  tpu_instr *c2, *i2 = NULL, *root;
  if (st == TPU_OK) st = tpu__spmd_const(s, TPU_S32, 2, NULL, loc, &c2);
  if (st == TPU_OK) st = s32op(s, TPU_OP_ADD, l->i, c2, loc, &i2);
  if (st == TPU_OK) {
    tpu_instr *nx[5] = {next[0], next[1], next[2], next[3], i2};
    st = tpu__spmd_tuple(s, nx, 5, loc, &root);
  }
  if (st == TPU_OK) {
    tpu_build_set_root(l->body, root);
    st = tpu_build_finish(&s->b, l->body);
  }
  s->c = l->entry;
  s->pos = l->entry_pos;
  TPU_TRY(st);
  TPU_TRY(tpu__spmd_instr(s, TPU_OP_WHILE, "spmd.window.loop", &init->shape, &init, 1, loc, out));
  TPU_TRY(tpu_build_set_attr(&s->b, *out, "condition", l->cond->name));
  TPU_TRY(tpu_build_set_attr(&s->b, *out, "body", l->body->name));
  char trip[96];
  snprintf(trip, sizeof trip, "{\"known_trip_count\":{\"n\":\"%lld\"}}", (long long)(l->n / 4));
  return tpu_build_set_attr(&s->b, *out, "backend_config", trip);
}


/* acc with `blk` written at s32 offset `off` of dimension k (dynamic-update-slice). */
static tpu_status update_at(sp *s, tpu_instr *acc, tpu_instr *blk, int k, tpu_instr *off, tpu_loc loc, tpu_instr **out) {
  tpu_instr *zero, *ops[TPU_MAX_RANK + 2];
  TPU_TRY(tpu__spmd_const(s, TPU_S32, 0, NULL, loc, &zero));
  ops[0] = acc;
  ops[1] = blk;
  for (int i = 0; i < acc->shape.rank; i++) ops[2 + i] = i == k ? off : zero;
  return tpu__spmd_instr(s, TPU_OP_DYNAMIC_UPDATE_SLICE, "spmd.window.update", &acc->shape, ops, 2 + acc->shape.rank,
                         loc, out);
}

/* The block a ring step works on: (b + c + sign * (i + u)) mod n, and where it starts
 * (x len), as s32 scalars. */
static tpu_status ring_block(sp *s, int64_t n, tpu_instr *b, int64_t c, int sign, tpu_instr *i, int u, int64_t len,
                             tpu_loc loc, tpu_instr **j, tpu_instr **off) {
  tpu_instr *cc, *t, *cn, *cl;
  TPU_TRY(tpu__spmd_const(s, TPU_S32, c + sign * u, NULL, loc, &cc));
  TPU_TRY(s32op(s, TPU_OP_ADD, b, cc, loc, &t));
  TPU_TRY(s32op(s, sign > 0 ? TPU_OP_ADD : TPU_OP_SUBTRACT, t, i, loc, &t));
  TPU_TRY(tpu__spmd_const(s, TPU_S32, n, NULL, loc, &cn));
  TPU_TRY(s32op(s, TPU_OP_REMAINDER, t, cn, loc, j));
  TPU_TRY(tpu__spmd_const(s, TPU_S32, len, NULL, loc, &cl));
  return s32op(s, TPU_OP_MULTIPLY, *j, cl, loc, off);
}

/* Rows [lo, lo + len) of dimension k of x (a static slice). */
static tpu_status part_of(sp *s, tpu_instr *x, int k, int64_t lo, int64_t len, tpu_loc loc, tpu_instr **out) {
  tpu_shape r = x->shape;
  r.has_layout = 0;
  r.layout_tail = NULL;
  r.dims[k] = len;
  TPU_TRY(tpu__spmd_instr(s, TPU_OP_SLICE, "spmd.window.half", &r, &x, 1, loc, out));
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  tpu_strbuf_printf(&b, "{");
  for (int d = 0; d < r.rank; d++)
    tpu_strbuf_printf(&b, "%s[%lld:%lld]", d ? ", " : "", (long long)(d == k ? lo : 0),
                      (long long)(d == k ? lo + len : x->shape.dims[d]));
  tpu_strbuf_printf(&b, "}");
  return tpu__spmd_set_attr_text(s, *out, "slice", &b, loc);
}

/* The two blocks a ring step holds, one after the other along dimension k: XLA's
 * bidirectional loop multiplies them in one dot (its partitioner's concatenate of the block
 * arrived each way), so the matrix unit sees the two blocks' length, not one's. */
static tpu_status both(sp *s, tpu_instr *const *two, int k, tpu_loc loc, tpu_instr **out) {
  tpu_shape cs = two[0]->shape;
  cs.has_layout = 0;
  cs.layout_tail = NULL;
  cs.dims[k] *= 2;
  TPU_TRY(tpu__spmd_instr(s, TPU_OP_CONCATENATE, "spmd.window.both", &cs, two, 2, loc, out));
  char dims[32];
  snprintf(dims, sizeof dims, "{%d}", k);
  return tpu_build_set_attr(&s->b, *out, "dimensions", dims);
}

static int uses_axis(const dsh *h, int rank, const int8_t *axes, int n) {
  for (int i = 0; i < n; i++)
    if (tpu__spmd_has_axis(h, rank, axes[i])) return 1;
  return 0;
}

/* Dots of the computation being partitioned that read x (directly or through converts). */
static int dot_readers(const sp *s, const tpu_instr *x) {
  int n = 0;
  for (int i = 0; i < s->old->ninstrs; i++) {
    const tpu_instr *u = s->old->instrs[i];
    if (u->op != TPU_OP_DOT) continue;
    for (int j = 0; j < u->noperands; j++) {
      const tpu_instr *o = u->operands[j];
      while (o->op == TPU_OP_CONVERT && o->noperands == 1) o = o->operands[0];
      n += o == x;
    }
  }
  return n;
}

/* XLA's partitioner makes no windowed einsum round more devices than this
 * (SpmdPartitionerOptions::max_windowed_einsum_iteration, 32 by default: a dot handler whose
 * group has more partitions gathers or reduce-scatters). */
#define XLA_MAX_WINDOWED_DEVICES 32

/* Whether the XLA TPU compiler runs a gather or reduce-scatter round a ring of n
 * devices beside a dot of `flops` per chip as a windowed einsum (block: the bytes of one
 * chip's block): a ring of at least the chip's smallest and at most XLA's largest, and XLA's
 * own test (its dot handler's disable_windowed_einsum) passes. With C the dot's time, M the
 * time of the collective the loop replaces and k XLA's communication multiplier for the
 * group, the loop takes max(C, kM) and, for its extra permutes, 2kM/n more; it is made when
 * that is less than C + M (the collective and the dot one after the other). XLA prices a
 * collective by its bytes and replica groups alone, so the all-reduce of a reduce-scatter's
 * partial sums (n blocks) costs what the all-gather of n blocks does. A communication below
 * XLA's floor (1e-5 ms: the unit tests' tiny dots) always loops. Times are in the bytes a
 * link moves meanwhile: C at the chip's peak, M round a ring of links each way ((n - 1)
 * blocks, half each way). k is 1 (the permutes move the same blocks over the same links) but
 * for a reduce-scatter round 4 devices that are all its dot's partitions (ring4: 1) in a
 * program of at least the chip's smallest ring:
 * the chip's windowed_einsum_ring4_multiplier, read from where libtpu starts to loop
 * (bench/spmd/probe_ring4.py; absent on v5p, which never loops there, and v4). Gathers round
 * 4 devices gather (the compiler loops in some and not others: docs/spmd.md). */
static int windowed(const sp *s, int64_t n, double flops, double block, int ring4) {
  const tpu_mesh *mesh = s->mesh;
  double k = 1;
  if (mesh->windowed_min_devices <= 0 || n % 4 || n > XLA_MAX_WINDOWED_DEVICES ||
      (mesh->windowed_max_devices > 0 && n > mesh->windowed_max_devices))
    return 0;
  if (n < mesh->windowed_min_devices) {
    if (!(ring4 && n == 4 && mesh->windowed_ring4_multiplier > 0 && mesh->ndev >= mesh->windowed_min_devices)) return 0;
    k = mesh->windowed_ring4_multiplier;
  }
  double comp = flops * mesh->flop_bytes / 2, comm = (double)(n - 1) * block / 2;
  if (comm <= mesh->windowed_floor_bytes) return 1;
  return (comp > k * comm ? comp : k * comm) + 2 * k * comm / (double)n < comp + comm;
}

/* The mesh axes (of more than one device) that split any dimension of h. */
static unsigned split_axes(const tpu_mesh *mesh, const dsh *h, int rank) {
  unsigned m = 0;
  for (int k = 0; k < rank; k++)
    for (int i = 0; i < h->n[k]; i++)
      if (mesh->sizes[h->ax[k][i]] > 1) m |= 1u << h->ax[k][i];
  return m;
}

int tpu__spmd_window_gather(const sp *s, const tpu_instr *in, int side, const dsh *from, const dsh *to,
                            const dsh *other, double flops, int *dim) {
  const tpu_mesh *mesh = s->mesh;
  const tpu_instr *x = in->operands[side];
  int rank = x->shape.rank, rd = -1;
  if (from->manual || !tpu_dtype_is_array(x->shape.dtype)) return 0;
  for (int k = 0; k < rank; k++) {
    if (same_dim(from, k, to, k)) continue;
    if (rd >= 0 || to->n[k] || !from->n[k]) return 0; /* one dimension, gathered whole */
    rd = k;
  }
  if (rd < 0) return 0;
  /* XLA loops only when the ring is every device of the dot's group: the other operand split
   * over no axis the operand does not split (x split over data and fsdp against a weight split
   * over fsdp: its all-gather over fsdp stays, as the compiler's programs do) */
  if (split_axes(mesh, other, in->operands[1 - side]->shape.rank) & ~split_axes(mesh, from, rank)) return 0;
  int64_t n = factor(mesh, from, rd);
  if (n < 4 || n % 4 || x->shape.dims[rd] % n) return 0;
  if (uses_axis(to, rank, from->ax[rd], from->n[rd])) return 0;
  /* an operand another dot reads too is gathered once for both (XLA's partitioner reuses the
   * gathered weight of a forward dot in the backward one) */
  const tpu_instr *src = x;
  while (src->op == TPU_OP_CONVERT && src->noperands == 1) src = src->operands[0];
  if (dot_readers(s, src) > 1) return 0;
  /* batch dimensions stay whole along the ring */
  const tpu_i64s *b = side ? &in->dot.rhs_batch : &in->dot.lhs_batch;
  for (int i = 0; i < b->n; i++)
    if (b->v[i] == rd) return 0;
  tpu_shape blk = tpu__spmd_local_shape(s, &x->shape, from);
  if (!windowed(s, n, flops, (double)tpu_shape_numel(&blk) * (double)tpu_dtype_size(x->shape.dtype), 0)) return 0;
  *dim = rd;
  return 1;
}

/* Where dimension rd of operand `side` lands in the dot's result (a free dimension), or -1
 * for a contracting one; *other_dim: the paired dimension of the other operand (contracting). */
static int result_dim(const tpu_instr *in, int side, int rd, int *other_dim) {
  const tpu_dot_dims *dd = &in->dot;
  const tpu_i64s *c = side ? &dd->rhs_contract : &dd->lhs_contract, *oc = side ? &dd->lhs_contract : &dd->rhs_contract;
  *other_dim = -1;
  for (int i = 0; i < c->n; i++)
    if (c->v[i] == rd) {
      *other_dim = (int)oc->v[i];
      return -1;
    }
  int od = dd->lhs_batch.n;
  if (side) { /* after the lhs's free dimensions */
    const tpu_instr *l = in->operands[0];
    for (int k = 0; k < l->shape.rank; k++)
      if (tpu_i64s_find(&dd->lhs_batch, k) < 0 && tpu_i64s_find(&dd->lhs_contract, k) < 0) od++;
  }
  const tpu_i64s *bb = side ? &dd->rhs_batch : &dd->lhs_batch;
  for (int k = 0; k < rd; k++)
    if (tpu_i64s_find(bb, k) < 0 && tpu_i64s_find(c, k) < 0) od++;
  return od;
}

tpu_status tpu__spmd_window_dot(sp *s, const tpu_instr *in, int side, int rd, const dsh *from, tpu_instr *other,
                                tpu_instr *shard, const tpu_shape *out_shape, tpu_instr **out) {
  const tpu_loc loc = in->loc;
  const int64_t n = factor(s->mesh, from, rd);
  int oc, od = result_dim(in, side, rd, &oc);
  const int64_t len = shard->shape.dims[rd]; /* one block of the gathered dimension */
  /* the loop state: (other operand, block arriving forward, result, block arriving back, i) */
  tpu_instr *acc0, *back0, *i0, *init;
  tpu_shape os = *out_shape;
  os.has_layout = 0;
  TPU_TRY(tpu__spmd_const(s, os.dtype, 0, &os, loc, &acc0));
  TPU_TRY(tpu__spmd_shift(s, shard, from, rd, -1, 1, "spmd.window.permute", loc, &back0));
  TPU_TRY(tpu__spmd_const(s, TPU_S32, 0, NULL, loc, &i0));
  tpu_instr *parts[5] = {other, shard, acc0, back0, i0};
  TPU_TRY(tpu__spmd_tuple(s, parts, 5, loc, &init));
  ring_loop l;
  TPU_TRY(open_loop(s, tpu_instr_user_name(in), n, init, loc, &l));
  /* Two steps per iteration, as XLA's loop takes them: the second step's products wait for
   * the first step's transfers. At step i the blocks held are (b + i) mod n (arrived
   * forward) and (b - 1 - i) mod n (arrived back). */
  tpu_instr *o = NULL, *blocks[2] = {NULL, NULL}, *res = NULL, *b = NULL;
  tpu_status st = tpu__spmd_gte(s, l.state, 0, loc, &o);
  if (st == TPU_OK) st = tpu__spmd_gte(s, l.state, 1, loc, &blocks[0]);
  if (st == TPU_OK) st = tpu__spmd_gte(s, l.state, 2, loc, &res);
  if (st == TPU_OK) st = tpu__spmd_gte(s, l.state, 3, loc, &blocks[1]);
  if (st == TPU_OK) st = tpu__spmd_block_offset(s, from->ax[rd], from->n[rd], 1, loc, &b);
  for (int u = 0; st == TPU_OK && u < 2; u++) {
    /* both blocks in one dot, as XLA's partitioner multiplies them: for a split contraction
     * with the other operand's two slices side by side (one sum), for a split output
     * feature writing the result's two blocks */
    tpu_instr *off[2] = {NULL, NULL}, *lhs[2] = {o, o}, *d = NULL, *ops[2];
    for (int h = 0; st == TPU_OK && h < 2; h++) {
      tpu_instr *j;
      st = ring_block(s, n, b, h ? n - 1 : 0, h ? -1 : 1, l.i, u, len, loc, &j, &off[h]);
      if (st == TPU_OK && od < 0) st = tpu__spmd_slice_at(s, o, oc, off[h], len, "spmd.window.slice", loc, &lhs[h]); /* its part of the contraction */
    }
    if (st == TPU_OK) st = both(s, blocks, rd, loc, &ops[side]);
    if (st == TPU_OK && od < 0) st = both(s, lhs, oc, loc, &ops[1 - side]);
    else ops[1 - side] = o;
    if (st == TPU_OK) st = tpu_build_clone_instr(&s->b, l.body, in, ops, &d);
    if (st != TPU_OK) break;
    d->shape = os;
    if (od >= 0) { /* its blocks of the result */
      d->shape.dims[od] = 2 * len;
      for (int h = 0; st == TPU_OK && h < 2; h++) {
        tpu_instr *half;
        st = part_of(s, d, od, h * len, len, loc, &half);
        if (st == TPU_OK) st = update_at(s, res, half, od, off[h], loc, &res);
      }
    } else { /* its share of the sum */
      ops[0] = res;
      ops[1] = d;
      st = tpu__spmd_instr(s, TPU_OP_ADD, "spmd.window.sum", &os, ops, 2, loc, &res);
    }
    /* the next blocks: from the chip one on (forward) and one back */
    if (st == TPU_OK) st = tpu__spmd_shift(s, blocks[0], from, rd, +1, 1, "spmd.window.permute", loc, &blocks[0]);
    if (st == TPU_OK) st = tpu__spmd_shift(s, blocks[1], from, rd, -1, 1, "spmd.window.permute", loc, &blocks[1]);
  }
  tpu_instr *next[4] = {o, blocks[0], res, blocks[1]}, *w;
  TPU_TRY(close_loop(s, &l, st, next, init, loc, &w));
  return tpu__spmd_gte(s, w, 2, loc, out);
}

/* Which operand's free dimension dimension od of dot d's result is (*side, *dim); 0 for a
 * batch dimension. */
static int operand_dim(const tpu_instr *d, int od, int *side, int *dim) {
  const tpu_dot_dims *dd = &d->dot;
  if (od < dd->lhs_batch.n) return 0;
  int r = (int)dd->lhs_batch.n;
  for (int t = 0; t < 2; t++) {
    const tpu_instr *x = d->operands[t];
    const tpu_i64s *b = t ? &dd->rhs_batch : &dd->lhs_batch, *c = t ? &dd->rhs_contract : &dd->lhs_contract;
    for (int k = 0; k < x->shape.rank; k++) {
      if (tpu_i64s_find(b, k) >= 0 || tpu_i64s_find(c, k) >= 0) continue;
      if (r++ == od) {
        *side = t;
        *dim = k;
        return 1;
      }
    }
  }
  return 0;
}

tpu_status tpu__spmd_window_sum(sp *s, tpu_instr *part, int kd, const dsh *to, int k, tpu_loc loc, tpu_instr **out,
                                int *done) {
  *done = 0;
  const tpu_mesh *mesh = s->mesh;
  const int64_t n = factor(mesh, to, k);
  int side, fd;
  if (n < 4 || n % 4 || part->op != TPU_OP_DOT || part->noperands != 2 || !operand_dim(part, kd, &side, &fd) ||
      part->shape.dims[kd] % n || part->operands[side]->shape.dims[fd] != part->shape.dims[kd])
    return TPU_OK;
  /* round 4 devices, XLA loops only when the ring is all the partitions its dot handler has
   * left: the result split over every device (the other axes split its batch). A dot repeated
   * over an axis that splits nothing (bench/spmd/cases gemm_contract_split: its sum round 4 of
   * 8 v5e devices, the other 2 holding copies) reduce-scatters. */
  const unsigned ax = split_axes(mesh, to, part->shape.rank);
  int64_t over = 1;
  for (int a = 0; a < mesh->naxes; a++)
    if (ax & (1u << a)) over *= mesh->sizes[a];
  double flops = 2.0 * (double)tpu_shape_numel(&part->shape);
  const tpu_instr *l0 = part->operands[0];
  for (int i = 0; i < part->dot.lhs_contract.n; i++) flops *= (double)l0->shape.dims[part->dot.lhs_contract.v[i]];
  if (!windowed(s, n, flops, (double)tpu_shape_numel(&part->shape) / (double)n * (double)tpu_dtype_size(part->shape.dtype),
                over == mesh->ndev))
    return TPU_OK;
  const int64_t len = part->shape.dims[kd] / n;
  tpu_shape bs = part->shape; /* one block of the result */
  bs.dims[kd] = len;
  bs.has_layout = 0;
  bs.layout_tail = NULL;
  /* state: (the operand sliced, the other, sum travelling forward, sum travelling back, i) */
  tpu_instr *acc0, *i0, *init;
  TPU_TRY(tpu__spmd_const(s, bs.dtype, 0, &bs, loc, &acc0));
  TPU_TRY(tpu__spmd_const(s, TPU_S32, 0, NULL, loc, &i0));
  tpu_instr *parts[5] = {part->operands[side], part->operands[1 - side], acc0, acc0, i0};
  TPU_TRY(tpu__spmd_tuple(s, parts, 5, loc, &init));
  ring_loop l;
  TPU_TRY(open_loop(s, s->cur ? tpu_instr_user_name(s->cur) : "dot", n, init, loc, &l));
  /* Two steps per iteration, as XLA's loop takes them. At step i the sum travelling forward
   * is added to n/2 - 1 - i more times before it stops at the chip whose block it is: this
   * chip adds its product for block (b + n/2 - 1 - i) mod n; the one travelling back moves
   * once more after the loop: block (b + n/2 + i) mod n. */
  tpu_instr *a = NULL, *o = NULL, *sums[2] = {NULL, NULL}, *b = NULL;
  tpu_status st = tpu__spmd_gte(s, l.state, 0, loc, &a);
  if (st == TPU_OK) st = tpu__spmd_gte(s, l.state, 1, loc, &o);
  if (st == TPU_OK) st = tpu__spmd_gte(s, l.state, 2, loc, &sums[0]);
  if (st == TPU_OK) st = tpu__spmd_gte(s, l.state, 3, loc, &sums[1]);
  if (st == TPU_OK) st = tpu__spmd_block_offset(s, to->ax[k], to->n[k], 1, loc, &b);
  for (int u = 0; st == TPU_OK && u < 2; u++) {
    /* the products for both sums in one dot (the operand's two slices side by side), as
     * XLA's partitioner computes them; each sum takes its half */
    tpu_instr *sl[2] = {NULL, NULL}, *d = NULL, *ops[2];
    for (int h = 0; st == TPU_OK && h < 2; h++) {
      tpu_instr *j, *off;
      st = ring_block(s, n, b, h ? n / 2 : n / 2 - 1, h ? 1 : -1, l.i, u, len, loc, &j, &off);
      if (st == TPU_OK) st = tpu__spmd_slice_at(s, a, fd, off, len, "spmd.window.slice", loc, &sl[h]);
    }
    if (st == TPU_OK) st = both(s, sl, fd, loc, &ops[side]);
    ops[1 - side] = o;
    if (st == TPU_OK) st = tpu_build_clone_instr(&s->b, l.body, part, ops, &d);
    if (st != TPU_OK) break;
    d->shape = bs;
    d->shape.dims[kd] = 2 * len;
    for (int h = 0; st == TPU_OK && h < 2; h++) {
      tpu_instr *moved, *half;
      st = tpu__spmd_shift(s, sums[h], to, k, h ? +1 : -1, 1, "spmd.window.permute", loc, &moved);
      if (st == TPU_OK) st = part_of(s, d, kd, h * len, len, loc, &half);
      if (st != TPU_OK) break;
      ops[0] = moved;
      ops[1] = half;
      st = tpu__spmd_instr(s, TPU_OP_ADD, "spmd.window.sum", &bs, ops, 2, loc, &sums[h]);
    }
  }
  tpu_instr *next[4] = {a, o, sums[0], sums[1]}, *w, *fw, *bw, *last, *ops[2];
  TPU_TRY(close_loop(s, &l, st, next, init, loc, &w));
  TPU_TRY(tpu__spmd_gte(s, w, 2, loc, &fw));
  TPU_TRY(tpu__spmd_gte(s, w, 3, loc, &bw));
  TPU_TRY(tpu__spmd_shift(s, bw, to, k, +1, 1, "spmd.window.permute", loc, &last));
  ops[0] = fw;
  ops[1] = last;
  TPU_TRY(tpu__spmd_instr(s, TPU_OP_ADD, "spmd.window.sum", &bs, ops, 2, loc, out));
  *done = 1;
  return TPU_OK;
}
