/* spmd-partition's convolutions: split along the batch (data parallelism), along the input
 * feature (a kernel gradient's partial sums), along the filters' output features (tensor
 * parallelism, with the batch split kept), or along one spatial dimension with halo
 * exchange between neighbours (the forward pass, and the kernel's gradient). */
#include <stdio.h>
#include <string.h>

#include "base/strbuf.h"
#include "compile/spmd/spmd_int.h"

/* Rows [lo, hi) of dimension d of x (a static slice). */
static tpu_status rows(sp *s, tpu_instr *x, int d, int64_t lo, int64_t hi, tpu_loc loc, tpu_instr **out) {
  tpu_shape r = x->shape;
  r.has_layout = 0;
  r.dims[d] = hi - lo;
  TPU_TRY(tpu__spmd_instr(s, TPU_OP_SLICE, "spmd.halo", &r, &x, 1, loc, out));
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  tpu_strbuf_printf(&b, "{");
  for (int k = 0; k < r.rank; k++)
    tpu_strbuf_printf(&b, "%s[%lld:%lld]", k ? ", " : "", (long long)(k == d ? lo : 0),
                      (long long)(k == d ? hi : x->shape.dims[k]));
  tpu_strbuf_printf(&b, "}");
  return tpu__spmd_set_attr_text(s, *out, "slice", &b, loc);
}

/* A halo's rows sent to the neighbour `dir` blocks on (chips at the edge receive zeros: the
 * convolution's zero padding), as bf16 when the convolution reads them as bf16 anyway
 * (bf16_gathers): converted before, back to f32 after. */
static tpu_status halo_send(sp *s, const tpu_instr *in, tpu_instr *edge, const dsh *L, int d, int dir,
                            tpu_instr **out) {
  if (!tpu__spmd_bf16_gathers(s, in) || edge->shape.dtype != TPU_F32)
    return tpu__spmd_shift(s, edge, L, d, -dir, 0, "spmd.halo-exchange", in->loc, out);
  tpu_instr *eb, *y;
  TPU_TRY(tpu__spmd_convert(s, edge, TPU_BF16, in->loc, &eb));
  TPU_TRY(tpu__spmd_shift(s, eb, L, d, -dir, 0, "spmd.halo-exchange", in->loc, &y));
  return tpu__spmd_convert(s, y, TPU_F32, in->loc, out);
}

/* The window of `in` on its partitioned clone x: no padding along spatial dimension sd, and
 * there a window of `size` rows when size > 0. */
static tpu_status set_window(sp *s, const tpu_instr *in, tpu_instr *x, int sd, int64_t size) {
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  int any_stride = 0, any_ld = 0, any_rd = 0, any_rev = 0;
  for (int i = 0; i < in->nwindow; i++) {
    any_stride |= in->window[i].stride != 1;
    any_ld |= in->window[i].base_dilation != 1;
    any_rd |= in->window[i].window_dilation != 1;
    any_rev |= in->window[i].reversal;
  }
  tpu_strbuf_printf(&b, "{size=");
  for (int i = 0; i < in->nwindow; i++)
    tpu_strbuf_printf(&b, "%s%lld", i ? "x" : "", (long long)(i == sd && size > 0 ? size : in->window[i].size));
  if (any_stride) {
    tpu_strbuf_printf(&b, " stride=");
    for (int i = 0; i < in->nwindow; i++) tpu_strbuf_printf(&b, "%s%lld", i ? "x" : "", (long long)in->window[i].stride);
  }
  tpu_strbuf_printf(&b, " pad=");
  for (int i = 0; i < in->nwindow; i++)
    tpu_strbuf_printf(&b, "%s%lld_%lld", i ? "x" : "", (long long)(i == sd ? 0 : in->window[i].pad_lo),
                      (long long)(i == sd ? 0 : in->window[i].pad_hi));
  if (any_ld) {
    tpu_strbuf_printf(&b, " lhs_dilate=");
    for (int i = 0; i < in->nwindow; i++)
      tpu_strbuf_printf(&b, "%s%lld", i ? "x" : "", (long long)in->window[i].base_dilation);
  }
  if (any_rd) {
    tpu_strbuf_printf(&b, " rhs_dilate=");
    for (int i = 0; i < in->nwindow; i++)
      tpu_strbuf_printf(&b, "%s%lld", i ? "x" : "", (long long)in->window[i].window_dilation);
  }
  if (any_rev) {
    tpu_strbuf_printf(&b, " rhs_reversal=");
    for (int i = 0; i < in->nwindow; i++) tpu_strbuf_printf(&b, "%s%d", i ? "x" : "", in->window[i].reversal ? 1 : 0);
  }
  tpu_strbuf_printf(&b, "}");
  return tpu__spmd_set_attr_text(s, x, "window", &b, in->loc);
}

static tpu_status with_halo(sp *s, const tpu_instr *in, tpu_instr *x, const dsh *L, int d, int64_t blk, int64_t lo,
                            int64_t hi, tpu_instr **out);

/* A convolution whose input is split along one spatial dimension (a large image or a long
 * sequence over chips): each chip receives the rows its window reaches beyond its block from
 * its neighbours (collective-permutes of the edge rows: the halo), convolves its block with
 * them unpadded in that dimension, and keeps its block of the output. Chips at the edges
 * receive zeros, which are the zero padding. Needs stride 1, no dilation there, and padding
 * that keeps the size (pad_lo + pad_hi = size - 1) no wider than a block. */
static tpu_status spatial_conv(sp *s, const tpu_instr *in, int sd) {
  const tpu_instr *lo = in->operands[0];
  const dsh *lh = &s->sh[lo->id];
  const tpu_conv_dims *cd = in->conv;
  int d = (int)cd->in_spatial[sd], od = (int)cd->out_spatial[sd];
  const tpu_window_dim *w = sd < in->nwindow ? &in->window[sd] : NULL;
  dsh L = k_repl, out = k_repl;
  L.n[d] = out.n[od] = lh->n[d];
  memcpy(L.ax[d], lh->ax[d], MAXA);
  memcpy(out.ax[od], lh->ax[d], MAXA);
  if (lh->n[cd->in_batch]) { /* a batch split stays */
    L.n[cd->in_batch] = out.n[cd->out_batch] = lh->n[cd->in_batch];
    memcpy(L.ax[cd->in_batch], lh->ax[cd->in_batch], MAXA);
    memcpy(out.ax[cd->out_batch], lh->ax[cd->in_batch], MAXA);
  }
  if (!w || w->stride != 1 || w->base_dilation != 1 || w->window_dilation != 1 || w->pad_lo < 0 || w->pad_hi < 0 ||
      w->pad_lo + w->pad_hi != w->size - 1 || !tpu__spmd_fits(s, &lo->shape, &L) || !tpu__spmd_fits(s, &in->shape, &out))
    return tpu__spmd_replicated_op(s, in);
  int64_t blk = lo->shape.dims[d] / factor(s->mesh, &L, d);
  if (w->pad_lo > blk || w->pad_hi > blk) return tpu__spmd_replicated_op(s, in);
  tpu_instr *x, *k, *cat;
  TPU_TRY(tpu__spmd_operand_as(s, in, 0, &L, &x));
  TPU_TRY(tpu__spmd_operand_as(s, in, 1, &k_repl, &k));
  TPU_TRY(with_halo(s, in, x, &L, d, blk, w->pad_lo, w->pad_hi, &cat));
  tpu_instr *ops[2] = {cat, k};
  TPU_TRY(tpu__spmd_emit_clone(s, in, ops, &out));
  return set_window(s, in, s->val[in->id], sd, 0);
}

/* Block x (rows of dimension d split as in L, blk rows each) with the previous block's last
 * lo rows before it and the next block's first hi rows after it (zeros at the edges). */
static tpu_status with_halo(sp *s, const tpu_instr *in, tpu_instr *x, const dsh *L, int d, int64_t blk, int64_t lo,
                            int64_t hi, tpu_instr **out) {
  tpu_instr *parts[3];
  int np = 0;
  if (lo) { /* the previous block's last rows */
    tpu_instr *edge;
    TPU_TRY(rows(s, x, d, blk - lo, blk, in->loc, &edge));
    TPU_TRY(halo_send(s, in, edge, L, d, +1, &parts[np++]));
  }
  parts[np++] = x;
  if (hi) { /* the next block's first rows */
    tpu_instr *edge;
    TPU_TRY(rows(s, x, d, 0, hi, in->loc, &edge));
    TPU_TRY(halo_send(s, in, edge, L, d, -1, &parts[np++]));
  }
  *out = x;
  if (np > 1) {
    tpu_shape cs = x->shape;
    cs.has_layout = 0;
    cs.dims[d] = blk + lo + hi;
    TPU_TRY(tpu__spmd_instr(s, TPU_OP_CONCATENATE, "spmd.with-halo", &cs, parts, np, in->loc, out));
    char dims[32];
    snprintf(dims, sizeof dims, "{%d}", d);
    TPU_TRY(tpu_build_set_attr(&s->b, *out, "dimensions", dims));
  }
  return TPU_OK;
}

/* A kernel's gradient with the image split along spatial dimension sd (a spatially split
 * convolution's backward pass: the window spans the whole image, dy, and the result is the
 * kernel's few taps): each chip correlates its block of the input, with the rows its
 * neighbours hold that the taps reach (the halo, as the forward pass), against its block of
 * dy, and the partial kernels are summed over the spatial axes (and first over the input
 * feature's, the examples, where those split too), as XLA's partitioner does: all-reduces of
 * the kernel instead of gathering the image. Returns with *done 0 when the convolution is not of this
 * form. */
static tpu_status kernel_grad_spatial(sp *s, const tpu_instr *in, int sd, int *done) {
  const tpu_instr *lo = in->operands[0], *ro = in->operands[1];
  const dsh *lh = &s->sh[lo->id];
  const tpu_conv_dims *cd = in->conv;
  int d = (int)cd->in_spatial[sd], kd = (int)cd->k_spatial[sd], od = (int)cd->out_spatial[sd];
  const tpu_window_dim *w = sd < in->nwindow ? &in->window[sd] : NULL;
  *done = 0;
  if (!w || w->stride != 1 || w->base_dilation != 1 || w->window_dilation != 1 || w->reversal || w->pad_lo < 0 ||
      w->pad_hi < 0 || lo->shape.dims[d] != ro->shape.dims[kd] || in->shape.dims[od] != w->pad_lo + w->pad_hi + 1)
    return TPU_OK;
  dsh L = k_repl, R = k_repl, out = k_repl;
  L.n[d] = R.n[kd] = lh->n[d];
  memcpy(L.ax[d], lh->ax[d], MAXA);
  memcpy(R.ax[kd], lh->ax[d], MAXA);
  int8_t axes[2 * MAXA];
  int na = 0;
  for (int i = 0; i < lh->n[d]; i++) axes[na++] = lh->ax[d][i];
  if (lh->n[cd->in_feature]) { /* the examples split too: their partial sums as well */
    int clash = 0;
    for (int i = 0; i < lh->n[cd->in_feature]; i++) clash |= tpu__spmd_has_axis(&L, lo->shape.rank, lh->ax[cd->in_feature][i]);
    if (clash) return TPU_OK;
    L.n[cd->in_feature] = R.n[cd->k_in] = lh->n[cd->in_feature];
    memcpy(L.ax[cd->in_feature], lh->ax[cd->in_feature], MAXA);
    memcpy(R.ax[cd->k_in], lh->ax[cd->in_feature], MAXA);
    for (int i = 0; i < lh->n[cd->in_feature]; i++) axes[na++] = lh->ax[cd->in_feature][i];
  }
  if (!tpu__spmd_fits(s, &lo->shape, &L) || !tpu__spmd_fits(s, &ro->shape, &R)) return TPU_OK;
  int64_t blk = lo->shape.dims[d] / factor(s->mesh, &L, d);
  if (w->pad_lo > blk || w->pad_hi > blk) return TPU_OK;
  tpu_instr *x, *dy, *cat, *y;
  TPU_TRY(tpu__spmd_operand_as(s, in, 0, &L, &x));
  TPU_TRY(tpu__spmd_operand_as(s, in, 1, &R, &dy));
  TPU_TRY(with_halo(s, in, x, &L, d, blk, w->pad_lo, w->pad_hi, &cat));
  tpu_instr *ops[2] = {cat, dy};
  TPU_TRY(tpu_build_clone_instr(&s->b, s->c, in, ops, &y));
  y->shape = tpu__spmd_local_shape(s, &in->shape, &out);
  TPU_TRY(set_window(s, in, y, sd, blk));
  tpu_comp *add;
  TPU_TRY(tpu__spmd_adder(s, in->shape.dtype, &add));
  /* summed as XLA's convolution handler sums them, one all-reduce per level of its
   * partitioning: over the examples' axes (its batch-split level) first, then over the
   * spatial axes (the halo level), not one all-reduce over both */
  const int ns = lh->n[d];
  if (na > ns) TPU_TRY(tpu__spmd_reduce_axes(s, y, axes + ns, na - ns, add, in->loc, &y));
  TPU_TRY(tpu__spmd_reduce_axes(s, y, axes, ns, add, in->loc, &y));
  s->val[in->id] = y;
  s->sh[in->id] = out;
  *done = 1;
  return TPU_OK;
}

/* The output feature split (filters split along their output features: a tensor-parallel
 * convolution, as XLA partitions one): each chip convolves its input — whole, or its batch
 * block where the batch is split over other axes — with its own filters, and its result is
 * its block of the output features. No collective for the convolution itself. */
static tpu_status out_feature_conv(sp *s, const tpu_instr *in) {
  const tpu_conv_dims *cd = in->conv;
  const dsh *lh = &s->sh[in->operands[0]->id], *rh = &s->sh[in->operands[1]->id];
  dsh L = k_repl, R = k_repl, out = k_repl;
  R.n[cd->k_out] = out.n[cd->out_feature] = rh->n[cd->k_out];
  memcpy(R.ax[cd->k_out], rh->ax[cd->k_out], MAXA);
  memcpy(out.ax[cd->out_feature], rh->ax[cd->k_out], MAXA);
  int clash = 0; /* the batch keeps its split unless it uses the features' axes */
  for (int i = 0; i < lh->n[cd->in_batch]; i++) clash |= tpu__spmd_has_axis(&R, in->operands[1]->shape.rank, lh->ax[cd->in_batch][i]);
  if (!clash) {
    L.n[cd->in_batch] = out.n[cd->out_batch] = lh->n[cd->in_batch];
    memcpy(L.ax[cd->in_batch], lh->ax[cd->in_batch], MAXA);
    memcpy(out.ax[cd->out_batch], lh->ax[cd->in_batch], MAXA);
  }
  if (!tpu__spmd_fits(s, &in->operands[0]->shape, &L) || !tpu__spmd_fits(s, &in->operands[1]->shape, &R) ||
      !tpu__spmd_fits(s, &in->shape, &out))
    return tpu__spmd_replicated_op(s, in);
  tpu_instr *ops[2];
  TPU_TRY(tpu__spmd_operand_as(s, in, 0, &L, &ops[0]));
  TPU_TRY(tpu__spmd_operand_as(s, in, 1, &R, &ops[1]));
  return tpu__spmd_emit_clone(s, in, ops, &out);
}

/* A convolution by the splits above, else split along its batch only (data parallelism):
 * each chip convolves its block with the whole kernel. */
tpu_status tpu__spmd_convolution(sp *s, const tpu_instr *in) {
  const tpu_instr *lo = in->operands[0];
  const dsh *lh = &s->sh[lo->id];
  const tpu_conv_dims *cd = in->conv;
  if (lh->manual || !in->has_conv_dims || in->feature_group_count != 1 || in->batch_group_count != 1)
    return tpu__spmd_replicated_op(s, in);
  const dsh *rh = &s->sh[in->operands[1]->id];
  int sd = -1, nsplit_sp = 0; /* a spatial dimension split: halo exchange */
  for (int i = 0; i < cd->nspatial; i++)
    if (lh->n[cd->in_spatial[i]]) sd = i, nsplit_sp++;
  if (nsplit_sp == 1 && !rh->manual) {
    int done;
    TPU_TRY(kernel_grad_spatial(s, in, sd, &done));
    if (done) return TPU_OK;
  }
  if (lh->n[cd->in_feature] && !rh->manual) {
    /* The input feature split (a kernel's gradient, where the batch is the contracted
     * feature; the second of two tensor-parallel convolutions): each chip convolves its part
     * of the contraction — its batch block where the batch splits over other axes — and the
     * partial sums are added over the features' axes. */
    dsh L = k_repl, R = k_repl, out = k_repl;
    L.n[cd->in_feature] = R.n[cd->k_in] = lh->n[cd->in_feature];
    memcpy(L.ax[cd->in_feature], lh->ax[cd->in_feature], MAXA);
    memcpy(R.ax[cd->k_in], lh->ax[cd->in_feature], MAXA);
    int clash = 0;
    for (int i = 0; i < lh->n[cd->in_batch]; i++) clash |= tpu__spmd_has_axis(&L, lo->shape.rank, lh->ax[cd->in_batch][i]);
    if (!clash && lh->n[cd->in_batch]) {
      L.n[cd->in_batch] = out.n[cd->out_batch] = lh->n[cd->in_batch];
      memcpy(L.ax[cd->in_batch], lh->ax[cd->in_batch], MAXA);
      memcpy(out.ax[cd->out_batch], lh->ax[cd->in_batch], MAXA);
    }
    if (!tpu__spmd_fits(s, &lo->shape, &L) || !tpu__spmd_fits(s, &in->operands[1]->shape, &R) ||
        !tpu__spmd_fits(s, &in->shape, &out))
      return tpu__spmd_replicated_op(s, in);
    tpu_instr *ops[2], *x;
    TPU_TRY(tpu__spmd_operand_as(s, in, 0, &L, &ops[0]));
    TPU_TRY(tpu__spmd_operand_as(s, in, 1, &R, &ops[1]));
    TPU_TRY(tpu_build_clone_instr(&s->b, s->c, in, ops, &x));
    x->shape = tpu__spmd_local_shape(s, &in->shape, &out);
    tpu_comp *add;
    TPU_TRY(tpu__spmd_adder(s, in->shape.dtype, &add));
    TPU_TRY(tpu__spmd_reduce_axes(s, x, L.ax[cd->in_feature], L.n[cd->in_feature], add, in->loc, &x));
    s->val[in->id] = x;
    s->sh[in->id] = out;
    return TPU_OK;
  }
  if (nsplit_sp == 1 && !lh->n[cd->in_feature] && !rh->manual) return spatial_conv(s, in, sd);
  if (rh->n[cd->k_out] && !rh->manual && !nsplit_sp) return out_feature_conv(s, in);
  if (!lh->n[cd->in_batch]) return tpu__spmd_replicated_op(s, in);
  dsh L = k_repl, out = k_repl;
  L.n[cd->in_batch] = lh->n[cd->in_batch];
  memcpy(L.ax[cd->in_batch], lh->ax[cd->in_batch], MAXA);
  out.n[cd->out_batch] = L.n[cd->in_batch];
  memcpy(out.ax[cd->out_batch], L.ax[cd->in_batch], MAXA);
  if (!tpu__spmd_fits(s, &lo->shape, &L) || !tpu__spmd_fits(s, &in->shape, &out)) return tpu__spmd_replicated_op(s, in);
  tpu_instr *ops[2];
  TPU_TRY(tpu__spmd_operand_as(s, in, 0, &L, &ops[0]));
  TPU_TRY(tpu__spmd_operand_as(s, in, 1, &k_repl, &ops[1]));
  return tpu__spmd_emit_clone(s, in, ops, &out);
}
