/* spmd-partition's partial sums taken split: a sum (all-reduce of partial sums) that a use
 * wants split, directly or through data movement and scalings, becomes a reduce-scatter (or
 * the XLA TPU compiler's windowed-einsum loop, spmd_window.c) with the movement applied to
 * the block; resharding (spmd_reshard.c) asks it first. */
#include <stdio.h>
#include <string.h>

#include "compile/passes/hlo_passes.h"
#include "compile/spmd/spmd_int.h"
#include "ir/build.h"

/* The dimension of a movement op's operand that result dimension k comes from (-1: none
 * that keeps it whole): transposes permute, reshapes that only add or drop size-1
 * dimensions keep the order of the others, copies and converts keep every dimension. */
static int movement_dim(const tpu_instr *y, int k) {
  const tpu_shape *r = &y->shape, *o = &y->operands[0]->shape;
  switch (y->op) {
    case TPU_OP_TRANSPOSE: return k < y->dimensions.n ? (int)y->dimensions.v[k] : -1;
    case TPU_OP_COPY:
    case TPU_OP_CONVERT: return k;
    case TPU_OP_RESHAPE:
    case TPU_OP_BITCAST: {
      if (r->dims[k] == 1) return -1;
      int want = 0, j = 0, i = 0; /* k is the want-th dimension larger than 1 */
      for (int t = 0; t < k; t++) want += r->dims[t] != 1;
      for (int t = 0; t < r->rank; t++) i += r->dims[t] != 1;
      for (int t = 0; t < o->rank; t++) j += o->dims[t] != 1;
      if (i != j) return -1;
      for (int t = 0, seen = 0; t < o->rank; t++) {
        if (o->dims[t] == 1) continue;
        if (seen++ == want) return o->dims[t] == r->dims[k] ? t : -1;
      }
      return -1;
    }
    default: return -1;
  }
}

/* For an elementwise op whose other operands are all broadcast scalars (a gradient scaled by
 * the learning rate), the operand that carries the array; else -1. */
static int scaled_operand(const tpu_instr *y) {
  tpu_op_class c = tpu_op_class_of(y->op);
  if ((c != TPU_CLS_UNARY && c != TPU_CLS_BINARY && c != TPU_CLS_TERNARY) || y->noperands > 3 ||
      y->op == TPU_OP_CONVERT || y->noperands < 2)
    return -1;
  int v = -1;
  for (int j = 0; j < y->noperands; j++) {
    const tpu_instr *o = y->operands[j];
    if (o->op == TPU_OP_BROADCAST && o->noperands == 1 && o->operands[0]->shape.rank == 0) continue;
    if (v >= 0 || o->shape.dtype != y->shape.dtype) return -1;
    v = j;
  }
  return v;
}

/* shape `sh` with dimension k cut f ways, without a layout */
static tpu_shape block_of(const tpu_shape *sh, int k, int64_t f) {
  tpu_shape r = *sh;
  r.has_layout = 0;
  r.layout_tail = NULL;
  r.dims[k] /= f;
  return r;
}

/* A sum wanted split after data movement (the transposes and reshapes between a weight
 * gradient's dot and the update that takes its block, a gradient passed through a call's
 * tuple): the partial sums are reduce-scattered along the dimension the split comes from,
 * and the movement is applied to the block. *done 0 when x is not such a value. */
tpu_status tpu__spmd_moved_sum_scatter(sp *s, tpu_instr *x, const dsh *from, const dsh *to, tpu_loc loc,
                                       tpu_instr **out, int *done) {
  *done = 0;
  int rank = x->shape.rank, k = -1;
  for (int j = 0; j < rank; j++) {
    if (same_dim(from, j, to, j)) continue;
    if (from->n[j] || k >= 0) return TPU_OK;
    k = j;
  }
  if (k < 0) return TPU_OK;
  tpu_instr *chain[8], *y = x;
  int kk[8], via[8], nc = 0, kd = k;
  while (y->op != TPU_OP_ALL_REDUCE) {
    if (nc == 8) return TPU_OK;
    if (y->op == TPU_OP_GET_TUPLE_ELEMENT && y->operands[0]->op == TPU_OP_TUPLE) {
      y = y->operands[0]->operands[y->index];
      continue;
    }
    if (!tpu_dtype_is_array(y->shape.dtype)) return TPU_OK;
    int v = scaled_operand(y), prev = v >= 0 ? kd : y->noperands == 1 ? movement_dim(y, kd) : -1;
    if (prev < 0) return TPU_OK;
    chain[nc] = y;
    via[nc] = v < 0 ? 0 : v;
    kk[nc++] = kd;
    kd = prev;
    y = y->operands[via[nc - 1]];
  }
  int i = 0;
  while (i < s->nsums && s->sums[i].ar != y) i++;
  if (i == s->nsums) return TPU_OK;
  /* The block's axes must be summed ones; the others summed over stay an all-reduce, of the
   * block (FSDP within data parallelism: reduce-scatter over fsdp, all-reduce over data). */
  int8_t rest[MAXA];
  int nrest = 0;
  for (int j = 0; j < to->n[k]; j++)
    if (!memchr(s->sums[i].axes, to->ax[k][j], (size_t)s->sums[i].n)) return TPU_OK;
  for (int j = 0; j < s->sums[i].n; j++)
    if (!memchr(to->ax[k], s->sums[i].axes[j], (size_t)to->n[k])) rest[nrest++] = s->sums[i].axes[j];
  int64_t f = factor(s->mesh, to, k);
  if (y->shape.dims[kd] % f) return TPU_OK;
  tpu_shape r = y->shape;
  r.dims[kd] /= f;
  r.has_layout = 0;
  r.layout_tail = NULL;
  tpu_instr *part = y->operands[0], *z;
  int win = 0; /* a dot's partial sums over every device: the XLA TPU compiler's windowed einsum */
  if (!nrest && tpu__is_adder(y->to_apply)) TPU_TRY(tpu__spmd_window_sum(s, part, kd, to, k, loc, &z, &win));
  if (!win && !nrest && f == s->mesh->ndev && s->mesh->keep_full_all_reduce) {
    /* the whole slice's sum, kept as the XLA TPU compiler keeps it: every chip then takes
     * its own block (rs_create.c does not make it a reduce-scatter either) */
    tpu_instr *off;
    TPU_TRY(tpu__spmd_reduce_axes(s, part, to->ax[k], to->n[k], y->to_apply, loc, &z));
    TPU_TRY(tpu__spmd_block_offset(s, to->ax[k], to->n[k], r.dims[kd], loc, &off));
    TPU_TRY(tpu__spmd_slice_at(s, z, kd, off, r.dims[kd], "spmd.slice", loc, &z));
  } else if (!win) {
    TPU_TRY(tpu__spmd_instr(s, TPU_OP_REDUCE_SCATTER, "spmd.reduce-scatter", &r, &part, 1, loc, &z));
    char dims[32];
    snprintf(dims, sizeof dims, "{%d}", kd);
    TPU_TRY(tpu_build_set_attr(&s->b, z, "dimensions", dims));
    TPU_TRY(tpu_build_set_attr(&s->b, z, "to_apply", y->to_apply->name));
    TPU_TRY(tpu__spmd_set_groups(s, z, to->ax[k], to->n[k]));
    if (nrest) TPU_TRY(tpu__spmd_reduce_axes(s, z, rest, nrest, y->to_apply, loc, &z));
  }
  for (int c = nc - 1; c >= 0; c--) { /* the movement and scaling, on the block */
    tpu_instr *m, *ops[3];
    for (int j = 0; j < chain[c]->noperands; j++) {
      ops[j] = z;
      if (j == via[c]) continue;
      /* a broadcast scalar: broadcast to the block */
      TPU_TRY(tpu_build_clone_instr(&s->b, s->c, chain[c]->operands[j], chain[c]->operands[j]->operands, &ops[j]));
      ops[j]->shape = block_of(&ops[j]->shape, kk[c], f);
    }
    TPU_TRY(tpu_build_clone_instr(&s->b, s->c, chain[c], ops, &m));
    m->shape = block_of(&m->shape, kk[c], f);
    z = m;
  }
  *out = z;
  *done = 1;
  return TPU_OK;
}
