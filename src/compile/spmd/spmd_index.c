/* spmd-partition's gathers and scatters: batching dimensions keep their splits, a gather
 * keeps its whole-slice dimensions' and its indices' splits and looks single rows up where
 * they live (a vocabulary-split embedding), and a scatter into zeros that its use wants
 * split along the dimension it indexes scatters into each chip's block. */
#include <string.h>

#include "base/alloc.h"
#include "base/strbuf.h"
#include "compile/spmd/spmd_int.h"
#include "ir/build.h"

/* The result dimension of a gather that indices dimension `d` becomes (-1: none). */
static int gather_out_dim(const tpu_instr *in, int d) {
  const tpu_gather_dims *g = in->gather;
  if (d == g->index_vector_dim) return -1;
  int want = d - (g->index_vector_dim < d), seen = 0; /* the want-th batch dimension of the result */
  for (int k = 0; k < in->shape.rank; k++) {
    int off = 0;
    for (int i = 0; i < g->offset_dims.n; i++) off |= g->offset_dims.v[i] == k;
    if (off) continue;
    if (seen++ == want) return k;
  }
  return -1;
}

/* The updates dimension of a scatter that indices dimension `d` feeds (-1: none). */
static int scatter_upd_dim(const tpu_instr *in, int d) {
  const tpu_scatter_dims *g = in->scatter;
  if (d == g->index_vector_dim) return -1;
  const tpu_shape *u = &in->operands[2]->shape;
  int want = d - (g->index_vector_dim < d), seen = 0;
  for (int k = 0; k < u->rank; k++) {
    int win = 0;
    for (int i = 0; i < g->update_window_dims.n; i++) win |= g->update_window_dims.v[i] == k;
    if (win) continue;
    if (seen++ == want) return k;
  }
  return -1;
}

/* x broadcast to `shape` (dims: where x's dimensions go, "{...}" text). */
static tpu_status bcast_to(sp *s, tpu_instr *x, const tpu_shape *shape, const char *dims, tpu_loc loc, tpu_instr **out) {
  tpu_shape r = *shape;
  r.dtype = x->shape.dtype;
  r.has_layout = 0;
  r.layout_tail = NULL;
  TPU_TRY(tpu__spmd_instr(s, TPU_OP_BROADCAST, "spmd.bcast", &r, &x, 1, loc, out));
  return tpu_build_set_attr(&s->b, *out, "dimensions", dims);
}

/* Elementwise op on a and b with a's shape (result dtype t). */
static tpu_status ew(sp *s, tpu_opcode op, tpu_dtype t, tpu_instr *a, tpu_instr *b, tpu_loc loc, tpu_instr **out) {
  tpu_shape r = a->shape;
  r.dtype = t;
  r.has_layout = 0;
  r.layout_tail = NULL;
  tpu_instr *ops[2] = {a, b};
  return tpu__spmd_instr(s, op, "spmd.lookup", &r, ops, 2, loc, out);
}

/* Rows of a gather split along the one dimension it indexes (an embedding table split
 * along its vocabulary) are looked up where they live: each chip shifts the indices to its
 * block of `len` rows (shift_indices: *local, and *inr, which of them it holds), gathers
 * from its block, zeroes the rows another chip holds, and the pieces are summed over the
 * axes (sum_lookup: one all-reduce of the result, as XLA partitions such a lookup). */
/* indices ix less the start of this chip's block of len rows along `axes` (*local) */
static tpu_status local_indices(sp *s, tpu_instr *ix, const int8_t *axes, int n, int64_t len, tpu_loc loc,
                                tpu_instr **local) {
  tpu_instr *off, *offb;
  tpu_dtype it = ix->shape.dtype;
  TPU_TRY(tpu__spmd_block_offset(s, axes, n, len, loc, &off));
  if (it != TPU_S32) {
    tpu_shape c = tpu__spmd_scalar(it);
    TPU_TRY(tpu__spmd_instr(s, TPU_OP_CONVERT, "spmd.offset", &c, &off, 1, loc, &off));
  }
  TPU_TRY(bcast_to(s, off, &ix->shape, "{}", loc, &offb));
  return ew(s, TPU_OP_SUBTRACT, it, ix, offb, loc, local);
}

/* rows: the indexed dimension's whole size (the indices are clamped into it first, as
 * gather clamps them); len: the rows of one chip's block. */
static tpu_status shift_indices(sp *s, const tpu_instr *in, tpu_instr *ix, const int8_t *axes, int n, int64_t rows,
                                int64_t len, tpu_instr **local, tpu_instr **inr) {
  const tpu_gather_dims *g = in->gather;
  tpu_instr *zero, *lim, *last, *ge, *lt, *cl;
  tpu_loc loc = in->loc;
  tpu_dtype it = ix->shape.dtype;
  TPU_TRY(tpu__spmd_const(s, it, 0, &ix->shape, loc, &zero));
  TPU_TRY(tpu__spmd_const(s, it, rows - 1, &ix->shape, loc, &last));
  TPU_TRY(ew(s, TPU_OP_MAXIMUM, it, ix, zero, loc, &cl));
  TPU_TRY(ew(s, TPU_OP_MINIMUM, it, cl, last, loc, &cl));
  TPU_TRY(local_indices(s, cl, axes, n, len, loc, local));
  TPU_TRY(tpu__spmd_const(s, it, len, &ix->shape, loc, &lim));
  TPU_TRY(ew(s, TPU_OP_COMPARE, TPU_PRED, *local, zero, loc, &ge));
  TPU_TRY(tpu_build_set_attr(&s->b, ge, "direction", "GE"));
  TPU_TRY(ew(s, TPU_OP_COMPARE, TPU_PRED, *local, lim, loc, &lt));
  TPU_TRY(tpu_build_set_attr(&s->b, lt, "direction", "LT"));
  TPU_TRY(ew(s, TPU_OP_AND, TPU_PRED, ge, lt, loc, inr));
  /* the mask over the result: the indices' dimensions but the index vector's are its batch
   * dimensions (the vector has one element: one indexed dimension) */
  if (g->index_vector_dim < ix->shape.rank) {
    tpu_shape r = (*inr)->shape;
    for (int k = g->index_vector_dim; k + 1 < r.rank; k++) r.dims[k] = r.dims[k + 1];
    r.rank--;
    TPU_TRY(tpu__spmd_instr(s, TPU_OP_RESHAPE, "spmd.lookup", &r, inr, 1, loc, inr));
  }
  return TPU_OK;
}

static tpu_status sum_lookup(sp *s, const tpu_instr *in, tpu_instr *gather, tpu_instr *inr, const int8_t *axes, int n) {
  const tpu_gather_dims *g = in->gather;
  const tpu_instr *ix = in->operands[1];
  tpu_loc loc = in->loc;
  tpu_instr *mask, *zr, *x;
  int64_t dims[TPU_MAX_RANK];
  int nd = 0;
  for (int k = 0; k < ix->shape.rank; k++)
    if (k != g->index_vector_dim) dims[nd++] = gather_out_dim(in, k);
  char txt[128];
  TPU_TRY(bcast_to(s, inr, &gather->shape, tpu_dims_text(txt, sizeof txt, dims, nd), loc, &mask));
  TPU_TRY(tpu__spmd_const(s, gather->shape.dtype, 0, &gather->shape, loc, &zr));
  tpu_shape r = gather->shape;
  r.has_layout = 0;
  r.layout_tail = NULL;
  tpu_instr *ops[3] = {mask, gather, zr};
  TPU_TRY(tpu__spmd_instr(s, TPU_OP_SELECT, "spmd.lookup", &r, ops, 3, loc, &x));
  tpu_comp *add;
  TPU_TRY(tpu__spmd_adder(s, r.dtype, &add));
  TPU_TRY(tpu__spmd_reduce_axes(s, x, axes, n, add, loc, &x));
  s->val[in->id] = x;
  return TPU_OK;
}

/* A gather that keeps its operand's and indices' splits: operand dimensions taken whole
 * (slice size = the dimension, no index into it) keep theirs as the matching offset
 * dimensions of the result; the indices' dimensions keep theirs as the result's batch
 * dimensions; and one indexed dimension split over some axes (single-row slices along it)
 * is looked up where it lives (lookup_in_block). */
static tpu_status split_gather(sp *s, const tpu_instr *in) {
  const tpu_gather_dims *g = in->gather;
  const tpu_instr *o = in->operands[0], *ix = in->operands[1];
  const dsh *oh = &s->sh[o->id], *ih = &s->sh[ix->id];
  dsh O = k_repl, I = k_repl, out = k_repl;
  int any = 0, off = 0, sd = -1;
  for (int d = 0; d < o->shape.rank; d++) {
    int collapsed = 0, indexed = 0;
    for (int i = 0; i < g->collapsed_slice_dims.n; i++) collapsed |= g->collapsed_slice_dims.v[i] == d;
    for (int i = 0; i < g->start_index_map.n; i++) indexed |= g->start_index_map.v[i] == d;
    if (indexed && oh->n[d] && g->start_index_map.n == 1 && d < g->slice_sizes.n && g->slice_sizes.v[d] == 1 &&
        tpu_dtype_is_int(ix->shape.dtype)) {
      sd = d;
      O.n[d] = oh->n[d];
      memcpy(O.ax[d], oh->ax[d], MAXA);
      any = 1;
    }
    if (collapsed) continue;
    int rd = off < g->offset_dims.n ? (int)g->offset_dims.v[off] : -1; /* offset dims follow the operand's order */
    off++;
    if (!oh->n[d] || indexed || d >= g->slice_sizes.n || g->slice_sizes.v[d] != o->shape.dims[d] || rd < 0) continue;
    O.n[d] = out.n[rd] = oh->n[d];
    memcpy(O.ax[d], oh->ax[d], MAXA);
    memcpy(out.ax[rd], oh->ax[d], MAXA);
    any = 1;
  }
  for (int k = 0; k < ix->shape.rank && !ih->manual; k++) {
    int rd = k == g->index_vector_dim ? -1 : gather_out_dim(in, k), clash = 0;
    if (!ih->n[k] || rd < 0) continue;
    for (int i = 0; i < ih->n[k]; i++) clash |= tpu__spmd_has_axis(&O, o->shape.rank, ih->ax[k][i]);
    if (clash) continue;
    I.n[k] = out.n[rd] = ih->n[k];
    memcpy(I.ax[k], ih->ax[k], MAXA);
    memcpy(out.ax[rd], ih->ax[k], MAXA);
    any = 1;
  }
  if (!any || !tpu__spmd_fits(s, &o->shape, &O) || !tpu__spmd_fits(s, &ix->shape, &I) || !tpu__spmd_fits(s, &in->shape, &out))
    return tpu__spmd_replicated_op(s, in);
  tpu_instr *ops[2];
  TPU_TRY(tpu__spmd_operand_as(s, in, 0, &O, &ops[0]));
  TPU_TRY(tpu__spmd_operand_as(s, in, 1, &I, &ops[1]));
  tpu_instr *inr = NULL;
  tpu_shape l = tpu__spmd_local_shape(s, &o->shape, &O); /* slice sizes per chip */
  if (sd >= 0) TPU_TRY(shift_indices(s, in, ops[1], O.ax[sd], O.n[sd], o->shape.dims[sd], l.dims[sd], &ops[1], &inr));
  TPU_TRY(tpu__spmd_emit_clone(s, in, ops, &out));
  tpu_instr *gx = s->val[in->id];
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  tpu_strbuf_printf(&b, "{");
  for (int d = 0; d < g->slice_sizes.n; d++)
    tpu_strbuf_printf(&b, "%s%lld", d ? "," : "", (long long)(O.n[d] && d != sd ? l.dims[d] : g->slice_sizes.v[d]));
  tpu_strbuf_printf(&b, "}");
  TPU_TRY(tpu__spmd_set_attr_text(s, gx, "slice_sizes", &b, in->loc));
  return sd < 0 ? TPU_OK : sum_lookup(s, in, gx, inr, O.ax[sd], O.n[sd]);
}

/* A scatter into a broadcast that its uses want split along the dimension it indexes too
 * (hint from the first pass: the gradient of take_along_axis beside vocabulary-split
 * logits): each chip scatters into its block with the indices shifted to it; updates that
 * land on another chip's rows fall outside the block and are skipped, as XLA's scatter
 * skips out-of-bounds windows. *done 0 when the scatter is not of that form. */
static tpu_status hinted_scatter(sp *s, const tpu_instr *in, int *done) {
  *done = 0;
  const tpu_scatter_dims *g = in->scatter;
  const dsh *h = tpu__spmd_hint_of(s, in);
  if (!h || in->noperands != 3 || g->scatter_dims_to_operand_dims.n != 1) return TPU_OK;
  int d = (int)g->scatter_dims_to_operand_dims.v[0], inserted = 0;
  for (int i = 0; i < g->inserted_window_dims.n; i++) inserted |= g->inserted_window_dims.v[i] == d;
  const tpu_instr *ix = in->operands[1];
  if (!inserted || !h->n[d] || !tpu_dtype_is_int(ix->shape.dtype) || s->sh[ix->id].manual ||
      s->sh[in->operands[2]->id].manual)
    return TPU_OK;
  dsh O = *h, I = k_repl, U = k_repl;
  for (int k = 0; k < in->shape.rank; k++) {
    if (!O.n[k] || k == d) continue;
    int b = -1; /* only batching dimensions besides d */
    for (int i = 0; i < g->input_batching_dims.n; i++)
      if (g->input_batching_dims.v[i] == k) b = i;
    if (b < 0) return TPU_OK;
    int id = (int)g->scatter_indices_batching_dims.v[b], ud = scatter_upd_dim(in, id);
    if (ud < 0) return TPU_OK;
    I.n[id] = U.n[ud] = O.n[k];
    memcpy(I.ax[id], O.ax[k], MAXA);
    memcpy(U.ax[ud], O.ax[k], MAXA);
  }
  if (!tpu__spmd_fits(s, &in->shape, &O) || !tpu__spmd_fits(s, &ix->shape, &I) ||
      !tpu__spmd_fits(s, &in->operands[2]->shape, &U))
    return TPU_OK;
  tpu_instr *ops[3];
  TPU_TRY(tpu__spmd_operand_as(s, in, 0, &O, &ops[0]));
  TPU_TRY(tpu__spmd_operand_as(s, in, 1, &I, &ops[1]));
  TPU_TRY(tpu__spmd_operand_as(s, in, 2, &U, &ops[2]));
  TPU_TRY(local_indices(s, ops[1], O.ax[d], O.n[d], in->shape.dims[d] / factor(s->mesh, &O, d), in->loc, &ops[1]));
  *done = 1;
  return tpu__spmd_emit_clone(s, in, ops, &O);
}

/* gather and scatter split along their batching dimensions (a per-example lookup with a
 * split batch: operand_batching_dims / input_batching_dims): each chip gathers from, or
 * scatters into, its own examples; no communication. Anything else runs replicated. */
tpu_status tpu__spmd_index_op(sp *s, const tpu_instr *in) {
  int scatter = in->op == TPU_OP_SCATTER;
  if (scatter && in->noperands != 3) return tpu__spmd_replicated_op(s, in);
  const tpu_i64s *ob = scatter ? &in->scatter->input_batching_dims : &in->gather->operand_batching_dims;
  const tpu_i64s *ib = scatter ? &in->scatter->scatter_indices_batching_dims : &in->gather->start_indices_batching_dims;
  const tpu_instr *o = in->operands[0], *ix = in->operands[1];
  const dsh *oh = &s->sh[o->id], *ih = &s->sh[ix->id];
  if (oh->manual || ih->manual || (scatter && s->sh[in->operands[2]->id].manual)) return tpu__spmd_replicated_op(s, in);
  if (!scatter && !ob->n) return split_gather(s, in);
  if (scatter) {
    int done;
    TPU_TRY(hinted_scatter(s, in, &done));
    if (done) return TPU_OK;
  }
  if (!ob->n) return tpu__spmd_replicated_op(s, in);
  dsh O = k_repl, I = k_repl, U = k_repl, out = k_repl;
  int any = 0;
  for (int i = 0; i < ob->n; i++) {
    int od = (int)ob->v[i], id = (int)ib->v[i];
    const dsh *from = oh->n[od] ? oh : ih;
    int fd = oh->n[od] ? od : id;
    if (!from->n[fd]) continue;
    int rd = scatter ? scatter_upd_dim(in, id) : gather_out_dim(in, id);
    if (rd < 0) return tpu__spmd_replicated_op(s, in);
    O.n[od] = I.n[id] = from->n[fd];
    memcpy(O.ax[od], from->ax[fd], MAXA);
    memcpy(I.ax[id], from->ax[fd], MAXA);
    if (scatter) {
      U.n[rd] = from->n[fd];
      memcpy(U.ax[rd], from->ax[fd], MAXA);
      out = O;
    } else {
      out.n[rd] = from->n[fd];
      memcpy(out.ax[rd], from->ax[fd], MAXA);
    }
    any = 1;
  }
  if (!any || !tpu__spmd_fits(s, &o->shape, &O) || !tpu__spmd_fits(s, &ix->shape, &I) || !tpu__spmd_fits(s, &in->shape, &out) ||
      (scatter && !tpu__spmd_fits(s, &in->operands[2]->shape, &U)))
    return tpu__spmd_replicated_op(s, in);
  tpu_instr *ops[3];
  TPU_TRY(tpu__spmd_operand_as(s, in, 0, &O, &ops[0]));
  TPU_TRY(tpu__spmd_operand_as(s, in, 1, &I, &ops[1]));
  if (scatter) TPU_TRY(tpu__spmd_operand_as(s, in, 2, &U, &ops[2]));
  return tpu__spmd_emit_clone(s, in, ops, &out);
}
