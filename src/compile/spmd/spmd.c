/* Pass `spmd-partition`: sharding propagation and partitioning of the entry computation.
 *
 * Shardings are kept in mesh-axes form (spmd_int.h; read and written in spmd_mesh.c): for
 * every dimension of an array, the mesh axes it is split over (major first); axes not named
 * anywhere replicate it. The pass walks the entry computation once, operands before users,
 * and for each op picks its result sharding from its operands' (elementwise ops keep the
 * most split operand's; broadcast, transpose and reshape carry the split dimensions along;
 * dot keeps batch and free dimensions and turns split contracting dimensions into partial
 * sums, spmd_dot.c; reduce turns split reduced dimensions into partial results; slicing,
 * sort, gather/scatter (spmd_index.c), convolution (spmd_conv.c) and loops and conditionals
 * (spmd_control.c) keep the splits they can), reshards the operands that do not match
 * (spmd_reshard.c), and emits the op on per-chip shapes followed by the collective it needs:
 *   - a split contracting or reduced dimension: a local dot / reduce, then an all-reduce
 *     over the axes that split it (a reduce-scatter when the use wants it split);
 *   - a dimension split in the value but not in the use: an all-gather over those axes;
 *   - a dimension split in the use but not in the value: each chip slices its own block
 *     (dynamic-slice at an offset computed from partition-id; no communication).
 * Every other op runs replicated: its operands are gathered whole first. So values are
 * always those of the unpartitioned program; only what is split differs from XLA's choices.
 * shard_map regions (SPMDFullToShardShape ... SPMDShardToFullShape, `manual` shardings)
 * are kept as written: their ops already work on one chip's block. This file: the per-op
 * rules and the pass itself; the first pass's hints are spmd_hint.c's. */
#include "compile/spmd/spmd.h"
#include "compile/spmd/spmd_int.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strbuf.h"
#include "chip/chip.h"
#include "compile/passes/hlo_passes.h"
#include "ir/build.h"
#include "ir/collective.h"
#include "ir/verify.h"
#include "pod/sharding.h"

/* ---- The pass ---- */

static int target_is(const tpu_instr *in, const char *t) {
  if (in->op != TPU_OP_CUSTOM_CALL) return 0;
  const char *v = tpu__spmd_attr(in, "custom_call_target");
  if (!v) return 0;
  size_t n = strlen(t);
  if (*v == '"') v++;
  return !strncmp(v, t, n) && (v[n] == '"' || v[n] == 0);
}

/* h with only the splits over the mesh axes in `mask` (bit a: axis a). */
static void keep_axes(dsh *h, int rank, unsigned mask) {
  for (int k = 0; k < rank; k++) {
    int n = 0;
    for (int i = 0; i < h->n[k]; i++)
      if (mask >> h->ax[k][i] & 1) h->ax[k][n++] = h->ax[k][i];
    h->n[k] = (int8_t)n;
  }
}

/* The sharding an instruction is annotated with (sdy form first, then HLO form). */
static int annotation_k(const sp *s, const tpu_instr *in, int k, int rank, dsh *out) {
  const char *fa = tpu__spmd_attr(in, "frontend_attributes");
  if (fa) {
    const char *p = k == 0 ? strstr(fa, "#sdy.sharding<") : NULL;
    if (!p) { /* per value: the k-th "<@mesh, [...]>" */
      p = strstr(fa, "#sdy.sharding_per_value<");
      for (int i = 0; p && i <= k; i++) {
        p = strstr(p + 1, "<@");
      }
      if (p) p--;
    }
    if (p) {
      const char *q = strchr(p, ',');
      if (q && tpu__spmd_parse_sdy(q + 1, s->mesh, rank, out)) return 1;
    }
  }
  const char *h = k == 0 ? tpu__spmd_attr(in, "sharding") : NULL;
  if (h && tpu__spmd_from_hlo(s->mesh, h, rank, out)) return 1;
  return 0;
}

static int annotation(const sp *s, const tpu_instr *in, int rank, dsh *out) { return annotation_k(s, in, 0, rank, out); }

int tpu__spmd_is_elementwise(const tpu_instr *in) {
  switch (tpu_op_class_of(in->op)) {
    case TPU_CLS_UNARY:
    case TPU_CLS_BINARY:
    case TPU_CLS_TERNARY: return 1;
    default: break;
  }
  switch (in->op) {
    case TPU_OP_COMPARE:
    case TPU_OP_SELECT:
    case TPU_OP_CLAMP:
    case TPU_OP_CONVERT:
    case TPU_OP_BITCAST_CONVERT:
    case TPU_OP_IS_FINITE: return 1;
    default: return 0;
  }
}

static int nsplit(const dsh *h, int rank) {
  int n = 0;
  for (int k = 0; k < rank; k++) n += h->n[k];
  return n;
}

static tpu_status elementwise(sp *s, const tpu_instr *in) {
  dsh best = k_repl;
  int bn = -1, manual = 0;
  for (int i = 0; i < in->noperands; i++) {
    const tpu_instr *o = in->operands[i];
    manual |= s->sh[o->id].manual;
    if (o->shape.rank != in->shape.rank) continue;
    int n = nsplit(&s->sh[o->id], o->shape.rank);
    if (n > bn && tpu__spmd_fits(s, &in->shape, &s->sh[o->id])) bn = n, best = s->sh[o->id];
  }
  if (manual) return tpu__spmd_replicated_op(s, in);
  tpu_instr *ops[3];
  for (int i = 0; i < in->noperands; i++)
    TPU_TRY(tpu__spmd_operand_as(s, in, i, in->operands[i]->shape.rank == in->shape.rank ? &best : &k_repl, &ops[i]));
  return tpu__spmd_emit_clone(s, in, ops, &best);
}

static tpu_status broadcast(sp *s, const tpu_instr *in) {
  const tpu_instr *o = in->operands[0];
  const dsh *oh = &s->sh[o->id];
  if (oh->manual) return tpu__spmd_replicated_op(s, in);
  dsh h = k_repl;
  for (int i = 0; i < o->shape.rank; i++) {
    int r = (int)in->dimensions.v[i];
    h.n[r] = oh->n[i];
    memcpy(h.ax[r], oh->ax[i], MAXA);
  }
  tpu_instr *x = s->val[o->id];
  return tpu__spmd_emit_clone(s, in, &x, &h);
}

static tpu_status transpose(sp *s, const tpu_instr *in) {
  const tpu_instr *o = in->operands[0];
  const dsh *oh = &s->sh[o->id];
  if (oh->manual) return tpu__spmd_replicated_op(s, in);
  dsh h = k_repl;
  for (int i = 0; i < in->shape.rank; i++) {
    int src = (int)in->dimensions.v[i];
    h.n[i] = oh->n[src];
    memcpy(h.ax[i], oh->ax[src], MAXA);
  }
  tpu_instr *x = s->val[o->id];
  return tpu__spmd_emit_clone(s, in, &x, &h);
}

/* reshape: a split dimension carries over when it starts where a result dimension starts
 * and its block stays whole in it (kept, merged with minor dimensions, or split with the
 * split part major). */
static tpu_status reshape(sp *s, const tpu_instr *in) {
  const tpu_instr *o = in->operands[0];
  const dsh *oh = &s->sh[o->id];
  if (oh->manual) return tpu__spmd_replicated_op(s, in);
  const tpu_shape *a = &o->shape, *r = &in->shape;
  dsh keep = *oh, h = k_repl;
  for (int k = 0; k < a->rank; k++) {
    if (!oh->n[k]) continue;
    int64_t pre = 1, f = factor(s->mesh, oh, k);
    for (int i = 0; i < k; i++) pre *= a->dims[i];
    int64_t rp = 1;
    int j = 0;
    while (j < r->rank && rp < pre) rp *= r->dims[j++];
    while (j + 1 < r->rank && r->dims[j] == 1 && a->dims[k] != 1) j++; /* new unit dimensions */
    int ok = rp == pre && j < r->rank && r->dims[j] % f == 0 &&
             (r->dims[j] % a->dims[k] == 0 || a->dims[k] % r->dims[j] == 0);
    if (ok) {
      h.n[j] = oh->n[k];
      memcpy(h.ax[j], oh->ax[k], MAXA);
      continue;
    }
    keep.n[k] = 0;
    /* The dimension cut into a major part of fewer blocks than its split and the rest
     * (microbatches cut from a batch split over more chips): the axes whose sizes multiply
     * to the major part split it and the other axes split the next dimension, as XLA's
     * partitioner splits it over sub-axes of the mesh. When the cut falls inside an axis,
     * the next walk has that axis cut into two sub-axes (fact_axis). */
    if (rp != pre || j + 1 >= r->rank || r->dims[j] >= a->dims[k] || a->dims[k] % r->dims[j]) continue;
    int64_t c = 1;
    int i = 0;
    while (i < oh->n[k] && c < r->dims[j] && r->dims[j] % (c * s->mesh->sizes[oh->ax[k][i]]) == 0)
      c *= s->mesh->sizes[oh->ax[k][i++]];
    if (c == r->dims[j] && i < oh->n[k] && r->dims[j + 1] % (f / c) == 0) {
      keep.n[k] = oh->n[k];
      h.n[j] = (int8_t)i;
      memcpy(h.ax[j], oh->ax[k], (size_t)i);
      h.n[j + 1] = (int8_t)(oh->n[k] - i);
      memcpy(h.ax[j + 1], oh->ax[k] + i, (size_t)(oh->n[k] - i));
    } else if (i < oh->n[k] && s->fact_axis < 0) {
      int64_t m = r->dims[j] / c, sz = s->mesh->sizes[oh->ax[k][i]];
      if (m > 1 && m < sz && sz % m == 0) {
        s->fact_axis = oh->ax[k][i];
        s->fact_m = m;
      }
    }
  }
  tpu_instr *x;
  TPU_TRY(tpu__spmd_operand_as(s, in, 0, &keep, &x));
  if (!tpu__spmd_fits(s, r, &h)) return tpu__spmd_replicated_op(s, in);
  return tpu__spmd_emit_clone(s, in, &x, &h);
}

int tpu__spmd_has_axis(const dsh *h, int rank, int a) {
  for (int k = 0; k < rank; k++)
    for (int i = 0; i < h->n[k]; i++)
      if (h->ax[k][i] == a) return 1;
  return 0;
}

/* The add computation for partial sums of dtype t. */
tpu_status tpu__spmd_adder(sp *s, tpu_dtype t, tpu_comp **out) {
  if ((unsigned)t < 16 && s->adders[t]) {
    *out = s->adders[t];
    return TPU_OK;
  }
  tpu_comp *c;
  TPU_TRY(tpu_build_scalar_comp(&s->b, "spmd.add", TPU_OP_ADD, t, s->m->entry, &c));
  if ((unsigned)t < 16) s->adders[t] = c;
  *out = c;
  return TPU_OK;
}

/* all-reduce of x over the given axes with computation `red`. */
tpu_status tpu__spmd_reduce_axes(sp *s, tpu_instr *x, const int8_t *axes, int n, tpu_comp *red, tpu_loc loc,
                                 tpu_instr **out) {
  tpu_shape r = x->shape;
  TPU_TRY(tpu__spmd_instr(s, TPU_OP_ALL_REDUCE, "spmd.all-reduce", &r, &x, 1, loc, out));
  TPU_TRY(tpu_build_set_attr(&s->b, *out, "to_apply", red->name));
  if (s->nsums < 256) { /* remembered: a use that wants a block of it takes a reduce-scatter */
    s->sums[s->nsums].ar = *out;
    memcpy(s->sums[s->nsums].axes, axes, (size_t)n);
    s->sums[s->nsums++].n = n;
  }
  return tpu__spmd_set_groups(s, *out, axes, n);
}

/* Whether init is the identity of the simple reducer op (so each chip may start from it). */
static int identity_init(const tpu_instr *init, tpu_opcode op) {
  if (init->op != TPU_OP_CONSTANT || !init->literal) return 0;
  double v = tpu_tensor_get_f64(init->literal, 0);
  switch (op) {
    case TPU_OP_ADD:
    case TPU_OP_OR:
    case TPU_OP_XOR: return v == 0;
    case TPU_OP_MULTIPLY:
    case TPU_OP_AND: return v == 1 || (init->shape.dtype == TPU_PRED && v != 0);
    case TPU_OP_MAXIMUM: return v == -__builtin_inf() || (tpu_dtype_is_int(init->shape.dtype) && v <= -2147483648.0);
    case TPU_OP_MINIMUM: return v == __builtin_inf() || (tpu_dtype_is_int(init->shape.dtype) && v >= 2147483647.0);
    default: return 0;
  }
}

/* The reducer opcode of a computation `ROOT r = op(p0, p1)` (add, multiply, max, min, and,
 * or, xor), else TPU_OP_COUNT. */
static tpu_opcode simple_reducer(const tpu_comp *c) {
  const tpu_instr *r = c->root;
  if (c->nparams != 2 || r->noperands != 2 || r->operands[0]->op != TPU_OP_PARAMETER ||
      r->operands[1]->op != TPU_OP_PARAMETER || r->operands[0] == r->operands[1])
    return TPU_OP_COUNT;
  switch (r->op) {
    case TPU_OP_ADD:
    case TPU_OP_MULTIPLY:
    case TPU_OP_MAXIMUM:
    case TPU_OP_MINIMUM:
    case TPU_OP_AND:
    case TPU_OP_OR:
    case TPU_OP_XOR: return r->op;
    default: return TPU_OP_COUNT;
  }
}

static tpu_status reduce(sp *s, const tpu_instr *in) {
  const tpu_instr *o = in->operands[0];
  const dsh *oh = &s->sh[o->id];
  tpu_opcode red = in->to_apply ? simple_reducer(in->to_apply) : TPU_OP_COUNT;
  if (in->noperands != 2 || oh->manual || red == TPU_OP_COUNT || !identity_init(in->operands[1], red) ||
      !is_split(oh, o->shape.rank))
    return tpu__spmd_replicated_op(s, in);
  dsh h = k_repl;
  int8_t partial[MAXA];
  int np = 0, rd = 0;
  for (int k = 0; k < o->shape.rank; k++) {
    int reduced = 0;
    for (int i = 0; i < in->dimensions.n; i++) reduced |= in->dimensions.v[i] == k;
    if (reduced) {
      for (int i = 0; i < oh->n[k]; i++) partial[np++] = oh->ax[k][i];
    } else {
      h.n[rd] = oh->n[k];
      memcpy(h.ax[rd], oh->ax[k], MAXA);
      rd++;
    }
  }
  tpu_instr *ops[2] = {s->val[o->id], s->val[in->operands[1]->id]}, *x;
  TPU_TRY(tpu_build_clone_instr(&s->b, s->c, in, ops, &x));
  x->shape = tpu__spmd_local_shape(s, &in->shape, &h);
  if (np && (red == TPU_OP_MAXIMUM || red == TPU_OP_MINIMUM) && in->shape.dtype == TPU_F32 &&
      o->op == TPU_OP_CONVERT && o->operands[0]->shape.dtype == TPU_BF16) {
    /* The largest (smallest) of bf16 values widened to f32 is one of them: the partial
     * results travel as bf16, exactly, as the TPU compiler sends a softmax's row maxima */
    tpu_comp *r;
    TPU_TRY(tpu_build_scalar_comp(&s->b, red == TPU_OP_MAXIMUM ? "spmd.max" : "spmd.min", red, TPU_BF16, s->m->entry, &r));
    TPU_TRY(tpu__spmd_convert(s, x, TPU_BF16, in->loc, &x));
    TPU_TRY(tpu__spmd_reduce_axes(s, x, partial, np, r, in->loc, &x));
    TPU_TRY(tpu__spmd_convert(s, x, TPU_F32, in->loc, &x));
  } else if (np) {
    TPU_TRY(tpu__spmd_reduce_axes(s, x, partial, np, in->to_apply, in->loc, &x));
  }
  s->val[in->id] = x;
  s->sh[in->id] = h;
  return TPU_OK;
}

/* Ops that work along some dimensions independently (slice and pad where a dimension is
 * whole, concatenate off its dimension, dynamic slices where the slice is whole, reverse
 * off its dimensions): those dimensions keep the first operand's split, the others are
 * gathered. Operands of the result's rank follow the same sharding; the rest (indices,
 * padding values) are replicated. */
static tpu_status dimwise(sp *s, const tpu_instr *in, const int *keep) {
  const tpu_instr *o = in->operands[0];
  if (s->sh[o->id].manual || o->shape.rank != in->shape.rank) return tpu__spmd_replicated_op(s, in);
  /* The most split operand of the result's rank decides (a dynamic-update-slice into a
   * whole buffer takes its update's split). */
  dsh h = k_repl;
  int bn = -1;
  for (int i = 0; i < in->noperands; i++) {
    const tpu_instr *x = in->operands[i];
    if (!tpu_dtype_is_array(x->shape.dtype) || x->shape.rank != in->shape.rank || s->sh[x->id].manual) continue;
    dsh c = s->sh[x->id];
    for (int k = 0; k < in->shape.rank; k++)
      if (!keep[k]) c.n[k] = 0;
    int n = nsplit(&c, in->shape.rank);
    if (n > bn && tpu__spmd_fits(s, &in->shape, &c) && tpu__spmd_fits(s, &x->shape, &c)) bn = n, h = c;
  }
  if (!tpu__spmd_fits(s, &in->shape, &h) || !tpu__spmd_fits(s, &o->shape, &h)) return tpu__spmd_replicated_op(s, in);
  tpu_instr **ops = tpu_calloc((size_t)(in->noperands + 1), sizeof *ops);
  if (!ops) return TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  tpu_status st = TPU_OK;
  for (int i = 0; st == TPU_OK && i < in->noperands; i++) {
    const tpu_instr *x = in->operands[i];
    int same = tpu_dtype_is_array(x->shape.dtype) && x->shape.rank == in->shape.rank;
    if (same && !tpu__spmd_fits(s, &x->shape, &h)) st = TPU_ERR_INVALID;
    else st = tpu__spmd_operand_as(s, in, i, same ? &h : &k_repl, &ops[i]);
  }
  if (st == TPU_ERR_INVALID) {
    tpu_free(ops);
    return tpu__spmd_replicated_op(s, in);
  }
  if (st == TPU_OK) st = tpu__spmd_emit_clone(s, in, ops, &h);
  if (st == TPU_OK && in->op == TPU_OP_DYNAMIC_SLICE) { /* its sizes are per chip now */
    tpu_strbuf b;
    tpu_strbuf_init(&b);
    tpu_strbuf_printf(&b, "{");
    const tpu_shape *l = &s->val[in->id]->shape;
    for (int k = 0; k < l->rank; k++) tpu_strbuf_printf(&b, "%s%lld", k ? "," : "", (long long)l->dims[k]);
    tpu_strbuf_printf(&b, "}");
    st = tpu__spmd_set_attr_text(s, s->val[in->id], "dynamic_slice_sizes", &b, in->loc);
  }
  if (st == TPU_OK && in->op == TPU_OP_SLICE) { /* kept dimensions are whole: the block's bounds */
    const tpu_shape *l = &s->val[in->id]->shape;
    tpu_strbuf b;
    tpu_strbuf_init(&b);
    tpu_strbuf_printf(&b, "{");
    for (int k = 0; k < l->rank; k++) {
      int64_t lim = h.n[k] ? l->dims[k] : in->slice[k].limit;
      tpu_strbuf_printf(&b, "%s[%lld:%lld", k ? ", " : "", (long long)in->slice[k].start, (long long)lim);
      if (in->slice[k].stride != 1) tpu_strbuf_printf(&b, ":%lld", (long long)in->slice[k].stride);
      tpu_strbuf_printf(&b, "]");
    }
    tpu_strbuf_printf(&b, "}");
    st = tpu__spmd_set_attr_text(s, s->val[in->id], "slice", &b, in->loc);
  }
  tpu_free(ops);
  return st;
}

static tpu_status dimwise_op(sp *s, const tpu_instr *in) {
  int keep[TPU_MAX_RANK] = {0};
  const tpu_shape *a = &in->operands[0]->shape;
  for (int k = 0; k < in->shape.rank && k < a->rank; k++) {
    switch (in->op) {
      case TPU_OP_SLICE:
        keep[k] = in->slice && in->slice[k].start == 0 && in->slice[k].limit == a->dims[k] && in->slice[k].stride == 1;
        break;
      case TPU_OP_PAD:
        keep[k] = in->padding && !in->padding[k].lo && !in->padding[k].hi && !in->padding[k].interior;
        break;
      case TPU_OP_CONCATENATE: keep[k] = in->dimensions.n == 1 && in->dimensions.v[0] != k; break;
      case TPU_OP_REVERSE: {
        keep[k] = 1;
        for (int i = 0; i < in->dimensions.n; i++) keep[k] &= in->dimensions.v[i] != k;
        break;
      }
      case TPU_OP_DYNAMIC_SLICE:
        keep[k] = k < in->dynamic_slice_sizes.n && in->dynamic_slice_sizes.v[k] == a->dims[k];
        break;
      case TPU_OP_DYNAMIC_UPDATE_SLICE: keep[k] = in->operands[1]->shape.dims[k] == a->dims[k]; break;
      case TPU_OP_REDUCE_WINDOW: { /* a dimension the window does not cross (pooling's batch, features) */
        const tpu_window_dim *w = k < in->nwindow ? &in->window[k] : NULL;
        keep[k] = w && w->size == 1 && w->stride == 1 && !w->pad_lo && !w->pad_hi && w->base_dilation == 1 &&
                  w->window_dilation == 1;
        break;
      }
      default: break;
    }
  }
  return dimwise(s, in, keep);
}

/* sort along one dimension (values, or keys with payloads: argsort): every other dimension
 * keeps its split, the operands all take the most split one's; the sorted dimension is
 * gathered. */
static tpu_status sort_op(sp *s, const tpu_instr *in) {
  const tpu_instr *o = in->operands[0];
  int rank = o->shape.rank, n = in->noperands;
  if (in->dimensions.n != 1 || !tpu_dtype_is_array(o->shape.dtype)) return tpu__spmd_replicated_op(s, in);
  int sd = (int)in->dimensions.v[0];
  dsh h = k_repl;
  int bn = -1;
  for (int i = 0; i < n; i++) {
    const tpu_instr *x = in->operands[i];
    if (s->sh[x->id].manual || x->shape.rank != rank) return tpu__spmd_replicated_op(s, in);
    dsh c = s->sh[x->id];
    c.n[sd] = 0;
    if (nsplit(&c, rank) > bn && tpu__spmd_fits(s, &o->shape, &c)) bn = nsplit(&c, rank), h = c;
  }
  tpu_instr **ops = tpu_calloc((size_t)(n + 1), sizeof *ops);
  dsh *el = n > 1 || in->shape.dtype == TPU_TUPLE ? tpu_arena_alloc(&s->m->arena, sizeof *el * (size_t)(n + 1)) : NULL;
  tpu_status st = ops && (el || (n == 1 && in->shape.dtype != TPU_TUPLE)) ? TPU_OK
                                                                           : TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  for (int i = 0; st == TPU_OK && i < n; i++) st = tpu__spmd_operand_as(s, in, i, &h, &ops[i]);
  if (st == TPU_OK && !el) {
    st = tpu__spmd_emit_clone(s, in, ops, &h);
  } else if (st == TPU_OK) {
    st = tpu_build_clone_instr(&s->b, s->c, in, ops, &s->val[in->id]);
    tpu_instr *x = st == TPU_OK ? s->val[in->id] : NULL;
    if (x) {
      x->shape.elems = tpu_arena_alloc(&s->m->arena, sizeof *x->shape.elems * (size_t)(n + 1));
      if (!x->shape.elems) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
      for (int i = 0; st == TPU_OK && i < n; i++) {
        x->shape.elems[i] = tpu__spmd_local_shape(s, &in->shape.elems[i], &h);
        el[i] = h;
      }
    }
    s->sh[in->id] = k_repl;
    s->tsh[in->id] = el;
  }
  tpu_free(ops);
  return st;
}

/* A tuple of arrays keeps its elements' splits (a while loop's state, the entry's result). */
static tpu_status split_tuple(sp *s, const tpu_instr *in) {
  int n = in->noperands;
  for (int i = 0; i < n; i++)
    if (!tpu_dtype_is_array(in->operands[i]->shape.dtype) || s->sh[in->operands[i]->id].manual)
      return tpu__spmd_replicated_op(s, in);
  dsh *el = tpu_arena_alloc(&s->m->arena, sizeof *el * (size_t)(n + 1));
  tpu_instr **ops = tpu_calloc((size_t)(n + 1), sizeof *ops);
  tpu_status st = el && ops ? TPU_OK : TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  for (int i = 0; st == TPU_OK && i < n; i++) {
    ops[i] = s->val[in->operands[i]->id];
    el[i] = s->sh[in->operands[i]->id];
  }
  if (st == TPU_OK) st = tpu_build_clone_instr(&s->b, s->c, in, ops, &s->val[in->id]);
  if (st == TPU_OK) {
    tpu_instr *x = s->val[in->id];
    x->shape.elems = tpu_arena_alloc(&s->m->arena, sizeof *x->shape.elems * (size_t)(n + 1));
    if (!x->shape.elems) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
    for (int i = 0; st == TPU_OK && i < n; i++) x->shape.elems[i] = ops[i]->shape;
  }
  s->sh[in->id] = k_repl;
  s->tsh[in->id] = el;
  tpu_free(ops);
  return st;
}

/* An entry instruction, and which collectives its value depends on. */
static tpu_status partition_entry_instr(sp *s, const tpu_instr *in) {
  s->cur_bits = 0;
  tpu_status st = tpu__spmd_partition_instr(s, in);
  uint64_t m = s->cur_bits;
  for (int i = 0; i < in->noperands; i++) m |= s->dep[in->operands[i]->id];
  s->dep[in->id] = m;
  return st;
}

static tpu_status partition_instr(sp *s, const tpu_instr *in);

tpu_status tpu__spmd_partition_instr(sp *s, const tpu_instr *in) {
  const tpu_instr *outer = s->cur; /* (a loop body's instructions nest inside the loop's) */
  s->cur = in;
  tpu_status st = partition_instr(s, in);
  s->cur = outer;
  return st;
}

static tpu_status partition_instr(sp *s, const tpu_instr *in) {
  int rank = tpu_dtype_is_array(in->shape.dtype) ? in->shape.rank : 0;
  switch (in->op) {
    case TPU_OP_PARAMETER: {
      dsh h = k_repl;
      if (tpu_dtype_is_array(in->shape.dtype) && annotation(s, in, rank, &h) && !tpu__spmd_fits(s, &in->shape, &h))
        return tpu__spmd_fail_at(s, in, "its sharding does not divide its dimensions evenly");
      if (h.manual) return tpu__spmd_fail_at(s, in, "a manual (shard_map) parameter");
      tpu_shape l = tpu_dtype_is_array(in->shape.dtype) ? tpu__spmd_local_shape(s, &in->shape, &h) : in->shape;
      tpu_instr *p;
      TPU_TRY(tpu_build_param(&s->b, s->c, in->index, in->name, &l, &p));
      tpu_strbuf b;
      tpu_strbuf_init(&b);
      if (tpu_dtype_is_array(in->shape.dtype)) tpu__spmd_hlo_text(s->mesh, &h, rank, &b);
      tpu_status st = b.oom ? TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory") : TPU_OK;
      if (st == TPU_OK && b.s) st = tpu_build_set_attr(&s->b, p, "sharding", b.s);
      tpu_strbuf_deinit(&b);
      p->src_name = in->src_name;
      s->val[in->id] = p;
      s->sh[in->id] = h;
      return st;
    }
    case TPU_OP_CUSTOM_CALL:
      if (target_is(in, "Sharding") || target_is(in, "xla.sdy.FuncResultSharding")) {
        dsh h;
        if (!annotation(s, in, rank, &h)) return tpu__spmd_fail_at(s, in, "cannot read its sharding");
        if (h.manual || s->sh[in->operands[0]->id].manual) {
          /* entering or leaving a shard_map body: the value is already local (a constraint
           * over the automatic axes inside a partly manual body leaves it whole there) */
          s->val[in->id] = s->val[in->operands[0]->id];
          s->sh[in->id] = h.manual ? h : s->sh[in->operands[0]->id];
          return TPU_OK;
        }
        if (!tpu__spmd_fits(s, &in->shape, &h)) h = k_repl;
        tpu_instr *x;
        TPU_TRY(tpu__spmd_operand_as(s, in, 0, &h, &x));
        s->val[in->id] = x;
        s->sh[in->id] = h;
        return TPU_OK;
      }
      if (target_is(in, "xla.sdy.GlobalToLocalShape") || target_is(in, "xla.sdy.LocalToGlobalShape")) {
        /* shard_map as JAX lowers it with Shardy: the body between works on blocks. */
        /* A shard_map manual over only some mesh axes: the body works on blocks split over
         * those; along the automatic ones every chip holds the whole block (the body runs
         * replicated over them, correct though XLA may split it further). Only the
         * manual axes of in_shardings / out_shardings are kept. */
        const char *fa = tpu__spmd_attr(in, "frontend_attributes");
        const char *ma = fa ? strstr(fa, "manual_axes") : NULL;
        unsigned manual = 0, all = 0;
        for (int a = 0; a < s->mesh->naxes; a++) {
          char q[40];
          all |= 1u << a;
          snprintf(q, sizeof q, "\\\"%s\\\"", s->mesh->names[a]);
          int in_m = ma && strstr(ma, q);
          snprintf(q, sizeof q, "\"%s\"", s->mesh->names[a]);
          in_m = in_m || (ma && strstr(ma, q));
          if (in_m || !ma) manual |= 1u << a;
        }
        const tpu_instr *o = in->operands[0];
        int global = target_is(in, "xla.sdy.LocalToGlobalShape");
        if (!global && in->noperands > 1) { /* several operands: a tuple of their blocks */
          tpu_instr **parts = tpu_calloc((size_t)in->noperands + 1, sizeof *parts);
          if (!parts) return TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
          tpu_status st = in->shape.dtype == TPU_TUPLE && in->shape.ntuple == in->noperands
                              ? TPU_OK
                              : tpu__spmd_fail_at(s, in, "its result is not a tuple of one block per operand");
          for (int k = 0; st == TPU_OK && k < in->noperands; k++) {
            const tpu_instr *ok = in->operands[k];
            dsh hk;
            if (!annotation_k(s, in, k, ok->shape.rank, &hk) || hk.manual) {
              st = tpu__spmd_fail_at(s, in, "cannot read its sharding");
              break;
            }
            if (manual != all) keep_axes(&hk, ok->shape.rank, manual);
            st = tpu__spmd_operand_as(s, in, k, &hk, &parts[k]);
            tpu_shape l = tpu__spmd_local_shape(s, &ok->shape, &hk);
            if (st == TPU_OK && !tpu_shape_equal(&l, &in->shape.elems[k]))
              st = tpu__spmd_fail_at(s, in, "its result is not one block of each operand");
          }
          tpu_instr *t = NULL;
          if (st == TPU_OK) st = tpu__spmd_tuple(s, parts, in->noperands, in->loc, &t);
          tpu_free(parts);
          TPU_TRY(st);
          s->val[in->id] = t;
          s->sh[in->id] = k_repl;
          s->sh[in->id].manual = 1;
          return TPU_OK;
        }
        if (global && in->noperands > 1) { /* several results: a tuple of values, each split its own way */
          if (in->shape.dtype != TPU_TUPLE || in->shape.ntuple != in->noperands)
            return tpu__spmd_fail_at(s, in, "its result is not a tuple of one value per operand");
          int n = in->noperands;
          dsh *el = tpu_arena_alloc(&s->m->arena, sizeof *el * (size_t)(n + 1));
          tpu_instr **parts = tpu_calloc((size_t)n + 1, sizeof *parts);
          tpu_status st = el && parts ? TPU_OK : TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
          for (int k = 0; st == TPU_OK && k < n; k++) {
            const tpu_shape *g = &in->shape.elems[k];
            if (!tpu_dtype_is_array(g->dtype) || !annotation_k(s, in, k, g->rank, &el[k]) || el[k].manual) {
              st = tpu__spmd_fail_at(s, in, "cannot read its sharding");
              break;
            }
            if (manual != all) keep_axes(&el[k], g->rank, manual);
            tpu_shape l = tpu__spmd_local_shape(s, g, &el[k]);
            if (!tpu_shape_equal(&l, &in->operands[k]->shape)) {
              st = tpu__spmd_fail_at(s, in, "an operand is not one block of its result");
              break;
            }
            parts[k] = s->val[in->operands[k]->id];
          }
          tpu_instr *t = NULL;
          if (st == TPU_OK) st = tpu__spmd_tuple(s, parts, n, in->loc, &t);
          tpu_free(parts);
          TPU_TRY(st);
          s->val[in->id] = t;
          s->sh[in->id] = k_repl;
          s->tsh[in->id] = el;
          return TPU_OK;
        }
        dsh h;
        if (!annotation(s, in, global ? rank : o->shape.rank, &h) || h.manual)
          return tpu__spmd_fail_at(s, in, "cannot read its sharding");
        if (manual != all) keep_axes(&h, global ? rank : o->shape.rank, manual);
        if (!global) { /* the operand as split by in_shardings; the result is one block */
          tpu_instr *x;
          TPU_TRY(tpu__spmd_operand_as(s, in, 0, &h, &x));
          tpu_shape l = tpu__spmd_local_shape(s, &o->shape, &h);
          if (!tpu_shape_equal(&l, &in->shape)) return tpu__spmd_fail_at(s, in, "its result is not one block of its operand");
          s->val[in->id] = x;
          s->sh[in->id] = k_repl;
          s->sh[in->id].manual = 1;
        } else {
          tpu_shape l = tpu__spmd_local_shape(s, &in->shape, &h);
          if (!tpu_shape_equal(&l, &o->shape)) return tpu__spmd_fail_at(s, in, "its operand is not one block of it");
          s->val[in->id] = s->val[o->id];
          s->sh[in->id] = h;
        }
        return TPU_OK;
      }
      if (target_is(in, "SPMDFullToShardShape")) {
        const tpu_instr *o = in->operands[0];
        tpu_shape l = tpu__spmd_local_shape(s, &o->shape, &s->sh[o->id]);
        if (!tpu_shape_equal(&l, &in->shape)) return tpu__spmd_fail_at(s, in, "its operand's block does not have its shape");
        s->val[in->id] = s->val[o->id];
        s->sh[in->id] = k_repl;
        s->sh[in->id].manual = 1;
        return TPU_OK;
      }
      if (target_is(in, "SPMDShardToFullShape")) {
        dsh h;
        if (!annotation(s, in, rank, &h) || h.manual) return tpu__spmd_fail_at(s, in, "cannot read its sharding");
        tpu_shape l = tpu__spmd_local_shape(s, &in->shape, &h);
        if (!tpu_shape_equal(&l, &in->operands[0]->shape)) return tpu__spmd_fail_at(s, in, "its operand is not one block of it");
        s->val[in->id] = s->val[in->operands[0]->id];
        s->sh[in->id] = h;
        return TPU_OK;
      }
      return tpu__spmd_replicated_op(s, in);
    case TPU_OP_BROADCAST: return broadcast(s, in);
    case TPU_OP_TRANSPOSE: return transpose(s, in);
    case TPU_OP_RESHAPE: return reshape(s, in);
    case TPU_OP_DOT: return tpu__spmd_dot(s, in);
    case TPU_OP_REDUCE: return reduce(s, in);
    case TPU_OP_CONVOLUTION: return tpu__spmd_convolution(s, in);
    case TPU_OP_SLICE:
    case TPU_OP_PAD:
    case TPU_OP_CONCATENATE:
    case TPU_OP_REVERSE:
    case TPU_OP_DYNAMIC_SLICE:
    case TPU_OP_DYNAMIC_UPDATE_SLICE: return dimwise_op(s, in);
    case TPU_OP_SORT: return sort_op(s, in);
    case TPU_OP_REDUCE_WINDOW:
      if (in->noperands == 2 && tpu_dtype_is_array(in->shape.dtype)) return dimwise_op(s, in);
      return tpu__spmd_replicated_op(s, in);
    case TPU_OP_GATHER:
    case TPU_OP_SCATTER: return tpu__spmd_index_op(s, in);
    case TPU_OP_TUPLE:
      if (in == s->old->root && s->old == s->m->entry) { /* results keep their shardings (written on the root) */
        tpu_instr **ops = tpu_calloc((size_t)(in->noperands + 1), sizeof *ops);
        if (!ops) return TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
        for (int i = 0; i < in->noperands; i++) ops[i] = s->val[in->operands[i]->id];
        tpu_status st = tpu_build_clone_instr(&s->b, s->c, in, ops, &s->val[in->id]);
        if (st == TPU_OK) {
          tpu_instr *x = s->val[in->id];
          x->shape.elems = tpu_arena_alloc(&s->m->arena, sizeof *x->shape.elems * (size_t)(in->noperands + 1));
          if (!x->shape.elems) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
          for (int i = 0; st == TPU_OK && i < in->noperands; i++) x->shape.elems[i] = ops[i]->shape;
        }
        s->sh[in->id] = k_repl;
        tpu_free(ops);
        return st;
      }
      return split_tuple(s, in);
    case TPU_OP_GET_TUPLE_ELEMENT: {
      const tpu_instr *o = in->operands[0];
      if (!s->tsh[o->id]) return tpu__spmd_replicated_op(s, in);
      tpu_instr *x = s->val[o->id];
      TPU_TRY(tpu_build_clone_instr(&s->b, s->c, in, &x, &s->val[in->id]));
      s->val[in->id]->shape = x->shape.elems[in->index];
      s->sh[in->id] = s->tsh[o->id][in->index];
      return TPU_OK;
    }
    case TPU_OP_WHILE: return tpu__spmd_while_loop(s, in);
    case TPU_OP_CONDITIONAL: return tpu__spmd_conditional_op(s, in);
    default: break;
  }
  if (tpu__spmd_is_elementwise(in) && tpu_dtype_is_array(in->shape.dtype)) return elementwise(s, in);
  return tpu__spmd_replicated_op(s, in);
}

/* The root's sharding= text: one per result (a tuple sharding for a tuple root). */
/* The entry root's own `sharding=` (GSPMD form: the program's output shardings, a tuple's
 * per element): each result is resharded to it, as XLA's partitioner makes the outputs
 * what the program asks for. Results whose sharding cannot be read stay as computed. */
static tpu_status root_annotation(sp *s, tpu_instr **root) {
  const tpu_instr *old = s->old->root;
  const char *text = tpu__spmd_attr(old, "sharding");
  if (!text) return TPU_OK;
  tpu_sharding hs;
  tpu_diag quiet;
  if (tpu_sharding_parse(text, old->loc, &hs, &quiet) != TPU_OK) return TPU_OK;
  tpu_status st = TPU_OK;
  if (old->op == TPU_OP_TUPLE && (*root)->op == TPU_OP_TUPLE && hs.kind == TPU_SHARD_TUPLE &&
      hs.nelems == old->noperands) {
    int n = old->noperands, moved = 0;
    tpu_instr **parts = tpu_calloc((size_t)n + 1, sizeof *parts);
    if (!parts) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, old->loc, "out of memory");
    for (int i = 0; st == TPU_OK && i < n; i++) {
      const tpu_instr *o = old->operands[i];
      dsh h;
      parts[i] = (*root)->operands[i];
      if (!tpu_dtype_is_array(o->shape.dtype) || s->tsh[o->id] || !tpu__spmd_from_parsed(s->mesh, &hs.elems[i], o->shape.rank, &h) ||
          h.manual || s->sh[o->id].manual || !tpu__spmd_fits(s, &o->shape, &h) || same_sharding(&h, &s->sh[o->id], o->shape.rank))
        continue;
      st = tpu__spmd_reshard(s, parts[i], &s->sh[o->id], &h, old->loc, &parts[i]);
      s->sh[o->id] = h; /* (root_sharding writes each element's from here) */
      moved = 1;
    }
    if (st == TPU_OK && moved) st = tpu__spmd_tuple(s, parts, n, old->loc, root);
    tpu_free(parts);
  } else if (tpu_dtype_is_array(old->shape.dtype) && hs.kind != TPU_SHARD_TUPLE) {
    dsh h;
    if (tpu__spmd_from_parsed(s->mesh, &hs, old->shape.rank, &h) && !h.manual && !s->sh[old->id].manual &&
        tpu__spmd_fits(s, &old->shape, &h) && !same_sharding(&h, &s->sh[old->id], old->shape.rank)) {
      st = tpu__spmd_reshard(s, *root, &s->sh[old->id], &h, old->loc, root);
      s->sh[old->id] = h;
    }
  }
  tpu_sharding_free(&hs);
  return st;
}

static tpu_status root_sharding(sp *s, tpu_instr *root) {
  const tpu_instr *old = s->old->root;
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  if (old->op == TPU_OP_TUPLE && root->op == TPU_OP_TUPLE) {
    tpu_strbuf_printf(&b, "{");
    for (int i = 0; i < old->noperands; i++) {
      const tpu_instr *o = old->operands[i];
      if (i) tpu_strbuf_printf(&b, ", ");
      if (tpu_dtype_is_array(o->shape.dtype)) tpu__spmd_hlo_text(s->mesh, &s->sh[o->id], o->shape.rank, &b);
      else tpu_strbuf_printf(&b, "{replicated}");
    }
    tpu_strbuf_printf(&b, "}");
  } else if (tpu_dtype_is_array(old->shape.dtype)) {
    tpu__spmd_hlo_text(s->mesh, &s->sh[old->id], old->shape.rank, &b);
  }
  tpu_status st = b.oom ? TPU_FAIL(s->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory") : TPU_OK;
  if (st == TPU_OK && b.s) st = tpu_build_set_attr(&s->b, root, "sharding", b.s);
  tpu_strbuf_deinit(&b);
  return st;
}

int tpu_spmd_needed(const tpu_module *m) {
  for (int i = 0; i < m->nattrs; i++)
    if (!strcmp(m->attrs[i].name, "num_partitions") || !strcmp(m->attrs[i].name, "replica_count")) return 0;
  for (int i = 0; i < m->nattrs; i++) /* a mesh of JAX's: partition even without annotations */
    if (!strcmp(m->attrs[i].name, "frontend_attributes") && strstr(m->attrs[i].value, "#sdy.mesh<")) return 1;
  for (int c = 0; c < m->ncomps; c++)
    for (int i = 0; i < m->comps[c]->ninstrs; i++) {
      const tpu_instr *in = m->comps[c]->instrs[i];
      if (target_is(in, "Sharding") || target_is(in, "SPMDFullToShardShape")) return 1;
      if (in->op == TPU_OP_PARAMETER && m->comps[c] == m->entry && tpu__spmd_attr(in, "sharding")) {
        const char *v = tpu__spmd_attr(in, "sharding");
        if (!strstr(v, "replicated") && !strstr(v, "maximal")) return 1;
      }
    }
  return 0;
}

/* Sets (or adds) a module header attribute. */
static tpu_status set_header(tpu_module *m, const char *name, const char *value, tpu_diag *d) {
  for (int i = 0; i < m->nattrs; i++)
    if (!strcmp(m->attrs[i].name, name)) {
      m->attrs[i].value = tpu_arena_strdup(&m->arena, value);
      return m->attrs[i].value ? TPU_OK : TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
    }
  tpu_attr *na = tpu_arena_alloc(&m->arena, sizeof *na * (size_t)(m->nattrs + 1));
  if (!na) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  if (m->nattrs) memcpy(na, m->attrs, sizeof *na * (size_t)m->nattrs);
  na[m->nattrs].name = tpu_arena_strdup(&m->arena, name);
  na[m->nattrs].value = tpu_arena_strdup(&m->arena, value);
  na[m->nattrs].loc = tpu_noloc();
  if (!na[m->nattrs].name || !na[m->nattrs].value) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  m->attrs = na;
  m->nattrs++;
  return TPU_OK;
}

static void drop_header(tpu_module *m, const char *name) {
  for (int i = 0; i < m->nattrs; i++)
    if (!strcmp(m->attrs[i].name, name)) {
      memmove(&m->attrs[i], &m->attrs[i + 1], sizeof *m->attrs * (size_t)(m->nattrs - i - 1));
      m->nattrs--;
      return;
    }
}

/* dims as HLO attribute text "{a,b}" into buf */
static void dims_text(const tpu_i64s *v, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "{");
  for (int i = 0; i < v->n && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)v->v[i]);
  if (k < n) snprintf(buf + k, n - k, "}");
}

/* transpose(dot(a, b)) that only swaps the dot's two groups of free dimensions is
 * dot(b, a) (the same products, summed in the same order: values unchanged), as XLA's
 * simplifier folds it before its partitioner runs: the partitioned program then has no
 * transpose to copy after the dot's collective (a data-parallel step's weight gradient,
 * transposed by JAX and summed over the batch: XLA's partitioning computes it transposed
 * and all-reduces that). Only where the dot has no other user and no sharding of its own. */
static tpu_status fold_transposed_dots(tpu_builder *b, tpu_comp *c) {
  tpu_uses u;
  TPU_TRY(tpu_build_uses(b, c, &u));
  int n = c->ninstrs, folded = 0;
  tpu_status st = TPU_OK;
  for (int i = 0; st == TPU_OK && i < n; i++) {
    tpu_instr *t = c->instrs[i];
    if (t->op != TPU_OP_TRANSPOSE || t->noperands != 1) continue;
    tpu_instr *dt = t->operands[0];
    if (dt->op != TPU_OP_DOT || dt->noperands != 2 || u.nusers[dt->id] != 1 || tpu__spmd_attr(dt, "sharding") ||
        tpu__spmd_attr(dt, "frontend_attributes"))
      continue;
    const tpu_dot_dims *dd = &dt->dot;
    int nb = dd->lhs_batch.n, lf = dt->operands[0]->shape.rank - nb - dd->lhs_contract.n;
    int rf = dt->operands[1]->shape.rank - nb - dd->rhs_contract.n;
    if (lf < 1 || rf < 1 || t->dimensions.n != nb + lf + rf) continue;
    int ok = 1;
    for (int k = 0; k < nb; k++) ok &= t->dimensions.v[k] == k;
    for (int j = 0; j < rf; j++) ok &= t->dimensions.v[nb + j] == nb + lf + j;
    for (int j = 0; j < lf; j++) ok &= t->dimensions.v[nb + rf + j] == nb + j;
    if (!ok) continue;
    tpu_instr *ops[2] = {dt->operands[1], dt->operands[0]}, *nd;
    char lb[128], rb[128], lc[128], rc[128];
    dims_text(&dd->rhs_batch, lb, sizeof lb);
    dims_text(&dd->lhs_batch, rb, sizeof rb);
    dims_text(&dd->rhs_contract, lc, sizeof lc);
    dims_text(&dd->lhs_contract, rc, sizeof rc);
    st = tpu_build_clone_instr(b, c, dt, ops, &nd);
    if (st == TPU_OK) st = tpu_build_set_attr(b, nd, "lhs_batch_dims", lb);
    if (st == TPU_OK) st = tpu_build_set_attr(b, nd, "rhs_batch_dims", rb);
    if (st == TPU_OK) st = tpu_build_set_attr(b, nd, "lhs_contracting_dims", lc);
    if (st == TPU_OK) st = tpu_build_set_attr(b, nd, "rhs_contracting_dims", rc);
    for (int a = 0; st == TPU_OK && a < t->nattrs; a++) /* the transpose's sharding is the new dot's */
      if (!strcmp(t->attrs[a].name, "sharding") || !strcmp(t->attrs[a].name, "frontend_attributes"))
        st = tpu_build_set_attr(b, nd, t->attrs[a].name, t->attrs[a].value);
    if (st != TPU_OK) break;
    nd->shape = t->shape;
    nd->shape.has_layout = 0;
    nd->shape.layout_tail = NULL;
    tpu_build_replace_uses(c, t, nd);
    if (c->root == t) tpu_build_set_root(c, nd);
    folded++;
  }
  tpu_build_uses_free(&u);
  if (st != TPU_OK || !folded) return st;
  if (tpu_build_remove_dead(b, c) < 0) return b->d->status;
  return tpu_build_finish(b, c);
}

/* Forgets a walk over the entry (its values, shardings and collectives) for the next. */
static void reset_walk(sp *s, int n) {
  if (s->mesh->own_notes && s->mesh->own_notes->s) { /* the last walk's notes only */
    s->mesh->own_notes->len = 0;
    s->mesh->own_notes->s[0] = 0;
  }
  memset(s->val, 0, sizeof *s->val * (size_t)(n + 1));
  memset(s->sh, 0, sizeof *s->sh * (size_t)(n + 1));
  memset(s->tsh, 0, sizeof *s->tsh * (size_t)(n + 1));
  s->pos = NULL;
  s->channel = 0;
  s->nemitted = 0;
  s->nreshards = 0;
  memset(s->dep, 0, sizeof *s->dep * (size_t)(n + 1));
}

tpu_status tpu_spmd_partition(tpu_module *m, const tpu_mesh *mesh_in, tpu_diag *d) {
  tpu_mesh own;
  memset(&own, 0, sizeof own);
  const tpu_mesh *mesh = mesh_in;
  if (!mesh) {
    int found;
    TPU_TRY(tpu_mesh_from_module(m, &own, &found, d));
    if (!found)
      return TPU_FAIL(d, TPU_ERR_ARG, m->entry->loc,
                      "the module has sharding annotations but no mesh: give one with --mesh NAME=SIZE,...");
    mesh = &own;
  }
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.precision_override = -1;
  tpu_status st = tpu__pass_inline(m, &o, d);
  sp s;
  memset(&s, 0, sizeof s);
  s.d = d;
  s.m = m;
  s.mesh = mesh;
  s.old = m->entry;
  if (st == TPU_OK) st = tpu_builder_init(&s.b, m, d);
  /* every computation: a loop body's weight gradient too (a gradient-accumulation loop's,
   * whose all-reduce then feeds the accumulation directly and is sunk after the loop) */
  for (int c = 0, nc = m->ncomps; st == TPU_OK && c < nc; c++) st = fold_transposed_dots(&s.b, m->comps[c]);
  int n = s.old->ninstrs;
  s.val = tpu_calloc((size_t)(n + 1), sizeof *s.val);
  s.sh = tpu_calloc((size_t)(n + 1), sizeof *s.sh);
  s.tsh = tpu_calloc((size_t)(n + 1), sizeof *s.tsh);
  if (st == TPU_OK && (!s.val || !s.sh || !s.tsh)) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  /* A first, discarded pass shows the splits values are used with; loops whose results
   * are used split keep them split inside (hints), then the real pass. */
  s.dep = tpu_calloc((size_t)(n + 1), sizeof *s.dep);
  if (st == TPU_OK && !s.dep) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  /* A reshape that cuts a split dimension inside a mesh axis has the axis cut in two
   * (same devices, same order: a split over the axis is one over both parts) and the first
   * walk run again, up to the mesh's room for axes. */
  tpu_mesh cut;
  s.fact_axis = -1;
  if (st == TPU_OK) st = tpu_build_comp(&s.b, s.old->name, s.old, &s.c);
  for (int i = 0; st == TPU_OK && i < s.old->norder; i++) st = partition_entry_instr(&s, s.old->order[i]);
  while (st == TPU_OK && s.fact_axis >= 0 && s.mesh->naxes < MAXA) {
    cut = *s.mesh;
    int a = s.fact_axis;
    int64_t sz = s.mesh->sizes[a];
    memmove(cut.names[a + 1], cut.names[a], sizeof cut.names[0] * (size_t)(cut.naxes - a));
    memmove(&cut.sizes[a + 1], &cut.sizes[a], sizeof cut.sizes[0] * (size_t)(cut.naxes - a));
    cut.sizes[a] = s.fact_m;
    cut.sizes[a + 1] = sz / s.fact_m;
    cut.naxes++;
    s.mesh = &cut;
    s.fact_axis = -1;
    reset_walk(&s, n);
    st = tpu_build_comp(&s.b, s.old->name, s.old, &s.c);
    for (int i = 0; st == TPU_OK && i < s.old->norder; i++) st = partition_entry_instr(&s, s.old->order[i]);
  }
  if (st == TPU_OK) st = tpu__spmd_hints(&s);
  if (st == TPU_OK && s.hint) {
    reset_walk(&s, n);
    st = tpu_build_comp(&s.b, s.old->name, s.old, &s.c);
    for (int i = 0; st == TPU_OK && i < s.old->norder; i++) st = partition_entry_instr(&s, s.old->order[i]);
  }
  if (st == TPU_OK) {
    tpu_instr *root = s.val[s.old->root->id];
    st = root_annotation(&s, &root);
    if (st == TPU_OK) {
      tpu_build_set_root(s.c, root);
      st = root_sharding(&s, root);
    }
    /* values a later choice replaced (an all-reduce whose block a reduce-scatter gives) */
    if (st == TPU_OK && tpu_build_remove_dead(&s.b, s.c) < 0) st = d->status;
  }
  if (st == TPU_OK) {
    s.c->is_entry = 1;
    s.old->is_entry = 0;
    m->entry = s.c;
    st = tpu_build_finish(&s.b, s.c);
  }
  if (st == TPU_OK && tpu_build_remove_unused_comps(&s.b) < 0) st = d->status;
  if (st == TPU_OK) {
    char nd[32];
    snprintf(nd, sizeof nd, "%lld", (long long)mesh->ndev);
    st = set_header(m, "num_partitions", nd, d);
    drop_header(m, "entry_computation_layout");
  }
  if (st == TPU_OK) st = tpu_build_finish_all(&s.b);
  tpu_builder_deinit(&s.b);
  tpu_free(s.val);
  tpu_free(s.dep);
  tpu_free(s.sh);
  tpu_free(s.tsh);
  tpu_free(s.hint);
  tpu_mesh_free(&own);
  if (st == TPU_OK) st = tpu_ir_verify(m, d);
  return st;
}
