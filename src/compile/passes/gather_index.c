/* The gather index kernel: a row gather's start indices clamped in a kernel of their own.
 *
 * The XLA TPU compiler runs a gather that takes whole rows by one index each (one start
 * index dimension, no batching dimensions, more than one index) as a kCustom gather fusion
 * that reads its indices already in bounds (custom call AssumeGatherIndicesInBound), and
 * clamps them before it in a kLoop kernel of their own: the indices padded to a multiple of
 * 1,024 and clamped to [0, dim - slice size] ("pad_clamp_fusion", or "broadcast_clamp_fusion"
 * when there are exactly 1,024 of them). That kernel never takes the ops that compute the
 * indices (JAX's negative-index wrap is a "compare_select_fusion" before it): in the
 * families corpus gather_rows_8192x64_m7_bf16, gather_axis1_64x30522_m7_f32,
 * gather_axis1_384x1000_m128_bf16, every embedding_bag_* and the gathers of every
 * embedding_grad_* with more than one index, on v4, v5e, v5p and v6e alike. A gather of one
 * index is a dynamic-slice there (gather_rows_197x64_m1_bf16), and one that indexes several
 * dimensions (a gather of points) or batches (take_along_axis) turns its index vectors into
 * one flat index inside the fusion that computes them: neither has this kernel.
 *
 * tpusim inserts the clamp as `clamp(0, indices, dim - slice size)` over the indices as one
 * vector, marked gather_index, which the fuse pass keeps a kernel of its own that takes no
 * producer but its bounds (fuse.c). Values are unchanged: a gather clamps its start indices
 * to the same range. The padding to 1,024 indices is not modelled (the kernel is a few KiB:
 * its time is the kernel's start either way).
 *
 * Not yet: indices of more than one batch dimension ([B,S] token ids, t5's [q,k] bucket
 * ids). The compiler flattens those too (its gather_fusion writes bf16[4096,2048] for
 * [4,1024] ids, a bitcast gives it back its shape), but tpusim then keeps that result in
 * VMEM and times the select after it (bench/spmd embed_vocab's masked lookup, 8.4 M bf16 in
 * VMEM) at 14,600 cycles on v5e where the compiler's broadcast_select_fusion costs 118,920:
 * a gap in the cost of vector kernels over VMEM that the flattening would expose. */
#include <string.h>

#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

/* Is `in` the clamp this pass inserted? */
int tpu__gather_index_kernel(const tpu_instr *in) {
  if (in->op != TPU_OP_CLAMP) return 0;
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, "gather_index")) return 1;
  return 0;
}

/* The one operand dimension a row gather indexes, or -1 when g is not one that the compiler
 * gives an index kernel. */
static int row_gather_dim(const tpu_instr *g) {
  const tpu_gather_dims *gd = &g->gather;
  if (g->noperands != 2 || gd->start_index_map.n != 1 || gd->operand_batching_dims.n != 0) return -1;
  const tpu_shape *x = &g->operands[0]->shape, *ix = &g->operands[1]->shape;
  /* 32- and 64-bit indices: the bound fits their type */
  if (ix->dtype != TPU_S32 && ix->dtype != TPU_S64 && ix->dtype != TPU_U32 && ix->dtype != TPU_U64) return -1;
  if (ix->rank < 1) return -1;
  int64_t per = gd->index_vector_dim < ix->rank ? ix->dims[gd->index_vector_dim] : 1;
  if (per != 1 || tpu_shape_numel(ix) < 2) return -1;
  int64_t d = gd->start_index_map.v[0];
  if (d < 0 || d >= x->rank || gd->slice_sizes.n != x->rank) return -1;
  /* one batch dimension, before the offset dimensions (see the header: indices of more
   * dimensions are left as they are) */
  if (g->shape.rank - gd->offset_dims.n != 1) return -1;
  for (int k = 0; k < gd->offset_dims.n; k++)
    if (gd->offset_dims.v[k] != 1 + k) return -1;
  return (int)d;
}

static tpu_status scalar(tpu_builder *b, tpu_comp *c, tpu_dtype t, int64_t v, tpu_instr **out) {
  tpu_tensor k;
  TPU_TRY(tpu_tensor_alloc(&k, t, 0, NULL, b->d));
  tpu_tensor_set_i64(&k, 0, v);
  return tpu_build_constant(b, c, "gather_index.bound", &k, NULL, out);
}

tpu_status tpu__gather_index_kernels(tpu_builder *b, tpu_comp *c) {
  int n = c->ninstrs, any = 0;
  for (int i = 0; i < n; i++) {
    tpu_instr *g = c->instrs[i];
    if (g->op != TPU_OP_GATHER) continue;
    if (tpu__gather_index_kernel(g->operands[1])) continue;
    int d = row_gather_dim(g);
    if (d < 0) continue;
    tpu_instr *ix = g->operands[1], *lo, *hi, *cl;
    int64_t top = g->operands[0]->shape.dims[d] - g->gather.slice_sizes.v[d];
    if (top < 0) continue; /* an ill-formed slice size: verify reports it */
    TPU_TRY(scalar(b, c, ix->shape.dtype, 0, &lo));
    TPU_TRY(scalar(b, c, ix->shape.dtype, top, &hi));
    /* on the indices as one vector, as the compiler clamps them (s32[m]) and its gather
     * reads them */
    int64_t m = tpu_shape_numel(&ix->shape);
    tpu_shape flat = tpu_build_shape(ix->shape.dtype, 1, &m);
    tpu_instr *v = ix; /* the indices before the reshapes that give them their index vector */
    while ((v->op == TPU_OP_RESHAPE || v->op == TPU_OP_BITCAST) && v->noperands == 1 && v->operands[0]->shape.dtype == v->shape.dtype)
      v = v->operands[0];
    if (v->shape.rank != 1) TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_RESHAPE, "gather_index.flat", &flat, &v, 1, &v));
    tpu_instr *ops[3] = {lo, v, hi};
    TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_CLAMP, "gather_index.clamp", &flat, ops, 3, &cl));
    TPU_TRY(tpu_build_set_attr(b, cl, "gather_index", "clamp"));
    g->operands[1] = cl; /* one batch dimension: the result keeps its shape */
    TPU_TRY(tpu_build_set_attr(b, g, "index_vector_dim", "1"));
    any = 1;
  }
  return any ? tpu_build_finish(b, c) : TPU_OK;
}
