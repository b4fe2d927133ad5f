/* The gather index kernel: a row gather's start indices clamped in a kernel of their own; a
 * gather of points' index vectors laid out as the compiler packs them; take_along_axis with
 * one index per row given its row numbers in kernels of their own (explicit_rows).
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
 * A gather of points (several start index dimensions, no batching dimensions, more than one
 * index vector) reads its indices packed: the compiler clamps each component to [0, dim -
 * slice size] and packs the vector into one 32-bit word, component k shifted by the bit
 * widths of those before it, in the kLoop fusion that computes the indices (its `fusion.2`
 * of `or(shift-left(clamp(i)), shift-left(clamp(j), 15))` for f32[32000,768]: 15 bits for
 * 31,999, then 10 for 767), and its kCustom gather_fusion unpacks them (and, shift-right,
 * custom call GatherScatterIndicesBitpacked): s32[m], the m indices along the lanes
 * (gather_points_* in the families corpus on v4, v5e, v5p and v6e, wherever the widths fit
 * in 32 bits). tpusim keeps the vectors, laid out as the words lie (pack_points): [n, m]
 * rows, not [m, n] with n of 128 lanes used per index (gather_points_1000x1024_m8192_bf16's
 * s32[8192,2]: 4 MiB padded, where the compiler's words take 32 KiB).
 *
 * Not yet: indices of more than one batch dimension ([B,S] token ids, t5's [q,k] bucket
 * ids). The compiler flattens those too (its gather_fusion writes bf16[4096,2048] for
 * [4,1024] ids, a bitcast gives it back its shape), but tpusim then keeps that result in
 * VMEM and times the select after it (bench/spmd embed_vocab's masked lookup, 8.4 M bf16 in
 * VMEM) at 14,600 cycles on v5e where the compiler's broadcast_select_fusion costs 118,920:
 * a gap in the cost of vector kernels over VMEM that the flattening would expose. */
#include <stdio.h>
#include <string.h>

#include "chip/chip.h"
#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

/* Is `in` an index kernel this pass inserted (a clamp, a concatenation, an iota)? */
int tpu__gather_index_kernel(const tpu_instr *in) {
  if (in->nattrs == 0) return 0;
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, "gather_index")) return 1;
  return 0;
}

/* The one operand dimension a row gather indexes, or -1 when g is not one that the compiler
 * gives an index kernel. */
static int row_gather_dim(const tpu_instr *g) {
  const tpu_gather_dims *gd = g->gather;
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

/* Bits that hold v >= 0 (0 for 0). */
static int bit_width(int64_t v) {
  int n = 0;
  while (v > 0) n++, v >>= 1;
  return n;
}

/* Whether g is a gather of points whose index vectors the compiler packs into one 32-bit
 * word each: several start index dimensions, no batching dimensions, integer indices
 * [m, n] with the vector last and more than one of them (one is a dynamic-slice there),
 * and each component's range [0, dim - slice size] in bit_width bits, all n in 32. */
static int packed_points(const tpu_instr *g) {
  const tpu_gather_dims *gd = g->gather;
  if (g->noperands != 2 || gd->start_index_map.n < 2 || gd->operand_batching_dims.n != 0) return 0;
  const tpu_shape *x = &g->operands[0]->shape, *ix = &g->operands[1]->shape;
  if (ix->dtype != TPU_S32 && ix->dtype != TPU_U32) return 0;
  if (ix->rank != 2 || gd->index_vector_dim != 1 || ix->dims[1] != gd->start_index_map.n || ix->dims[0] < 2) return 0;
  if (gd->slice_sizes.n != x->rank) return 0;
  int bits = 0;
  for (int k = 0; k < gd->start_index_map.n; k++) {
    int64_t d = gd->start_index_map.v[k];
    if (d < 0 || d >= x->rank || x->dims[d] - gd->slice_sizes.v[d] < 0) return 0;
    bits += bit_width(x->dims[d] - gd->slice_sizes.v[d]);
  }
  return bits <= 32;
}

/* A gather of points reads its index vectors packed (see the header): tpusim keeps them as
 * vectors but lays them out as the packed words lie, the m indices along the lanes, one row
 * per component ([n, m], index_vector_dim 0), not one padded row of n per index. Indices
 * built by concatenating [m, 1] columns (JAX's jnp.stack of index arrays) are concatenated
 * as [1, m] rows instead; any others are transposed. The gather's result is unchanged: its
 * batch dimensions are the indices' other dimensions, in order. */
static tpu_status pack_points(tpu_builder *b, tpu_comp *c, tpu_instr *g) {
  tpu_instr *ix = g->operands[1], *t = NULL;
  int64_t m = ix->shape.dims[0], n = ix->shape.dims[1], tdims[2] = {n, m};
  tpu_shape ts = tpu_build_shape(ix->shape.dtype, 2, tdims);
  int cols = ix->op == TPU_OP_CONCATENATE && ix->dimensions.n == 1 && ix->dimensions.v[0] == 1 && ix->noperands <= 64;
  for (int k = 0; cols && k < ix->noperands; k++) cols = ix->operands[k]->shape.rank == 2 && ix->operands[k]->shape.dims[1] == 1;
  char buf[64];
  if (cols) {
    tpu_instr *rows[64];
    int64_t one[2] = {1, m};
    tpu_shape rs = tpu_build_shape(ix->shape.dtype, 2, one);
    for (int k = 0; k < ix->noperands; k++)
      TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_RESHAPE, "gather_index.row", &rs, &ix->operands[k], 1, &rows[k]));
    TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_CONCATENATE, "gather_index.rows", &ts, rows, ix->noperands, &t));
    int64_t zero = 0;
    TPU_TRY(tpu_build_set_attr(b, t, "dimensions", tpu_dims_text(buf, sizeof buf, &zero, 1)));
  } else {
    int64_t perm[2] = {1, 0};
    TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_TRANSPOSE, "gather_index.rows", &ts, &ix, 1, &t));
    TPU_TRY(tpu_build_set_attr(b, t, "dimensions", tpu_dims_text(buf, sizeof buf, perm, 2)));
  }
  g->operands[1] = t;
  return tpu_build_set_attr(b, g, "index_vector_dim", "0");
}

static int elementwise(tpu_opcode op) {
  tpu_op_class k = tpu_op_class_of(op);
  return k == TPU_CLS_UNARY || k == TPU_CLS_BINARY || k == TPU_CLS_TERNARY || op == TPU_OP_COMPARE ||
         op == TPU_OP_SELECT || op == TPU_OP_CLAMP || op == TPU_OP_CONVERT;
}

/* ---- a gather of one index: a dynamic-slice, its index on the scalar unit ---- */

enum { SCALAR_MAX = 64 };
typedef struct {
  tpu_instr *from[SCALAR_MAX], *to[SCALAR_MAX];
  int n;
} scalar_map;

static int one_element(const tpu_instr *v) {
  return tpu_dtype_is_array(v->shape.dtype) && tpu_shape_numel(&v->shape) == 1;
}

/* The rank-0 form of one-element value v (an index computed on s32[1] values): its
 * elementwise ops, reshapes and broadcasts rebuilt on scalars, constants as scalar
 * constants, anything else (a parameter) reshaped to a scalar. *out is NULL past
 * SCALAR_MAX values. */
static tpu_status scalarize(tpu_builder *b, tpu_comp *c, const tpu_instr *like, scalar_map *mp, tpu_instr *v,
                            tpu_instr **out) {
  *out = NULL;
  if (v->shape.rank == 0) {
    *out = v;
    return TPU_OK;
  }
  for (int i = 0; i < mp->n; i++)
    if (mp->from[i] == v) {
      *out = mp->to[i];
      return TPU_OK;
    }
  if (mp->n >= SCALAR_MAX) return TPU_OK;
  tpu_shape s0 = tpu_build_shape(v->shape.dtype, 0, NULL);
  tpu_instr *r = NULL;
  if ((v->op == TPU_OP_RESHAPE || v->op == TPU_OP_BITCAST || v->op == TPU_OP_BROADCAST) && v->noperands == 1 &&
      one_element(v->operands[0]) && v->operands[0]->shape.dtype == v->shape.dtype) {
    TPU_TRY(scalarize(b, c, like, mp, v->operands[0], &r));
  } else if (v->op == TPU_OP_CONSTANT && v->literal && !tpu_dtype_is_float(v->shape.dtype) &&
             !tpu_dtype_is_complex(v->shape.dtype)) {
    tpu_tensor k;
    TPU_TRY(tpu_tensor_alloc(&k, v->shape.dtype, 0, NULL, b->d));
    tpu_tensor_set_i64(&k, 0, tpu_tensor_get_i64(v->literal, 0));
    TPU_TRY(tpu_build_constant(b, c, "gather_index.k", &k, NULL, &r));
  } else if (elementwise(v->op) && v->noperands <= 3) {
    tpu_instr *ops[3];
    for (int j = 0; j < v->noperands; j++) {
      if (!one_element(v->operands[j])) return TPU_OK;
      TPU_TRY(scalarize(b, c, like, mp, v->operands[j], &ops[j]));
      if (!ops[j]) return TPU_OK;
    }
    TPU_TRY(tpu_build_clone_instr(b, c, v, ops, &r));
    r->shape = s0;
  } else {
    TPU_TRY(tpu_build_instr_like(b, c, like, TPU_OP_RESHAPE, "gather_index.scalar", &s0, &v, 1, &r));
  }
  if (!r || mp->n >= SCALAR_MAX) return TPU_OK;
  if (r != v && r->op != TPU_OP_CONSTANT) TPU_TRY(tpu_build_set_attr(b, r, "gather_index", "scalar"));
  mp->from[mp->n] = v;
  mp->to[mp->n++] = r;
  *out = r;
  return TPU_OK;
}

/* The start index components of a gather of one index vector with no batching dimensions
 * (n of them), or 0 when g is not one: the compiler's is a dynamic-slice. */
static int one_index(const tpu_instr *g) {
  const tpu_gather_dims *gd = g->gather;
  if (g->noperands != 2 || gd->operand_batching_dims.n != 0 || gd->start_index_map.n < 1) return 0;
  const tpu_shape *x = &g->operands[0]->shape, *ix = &g->operands[1]->shape;
  if (!tpu_dtype_is_int(ix->dtype) || tpu_shape_numel(ix) != gd->start_index_map.n || gd->slice_sizes.n != x->rank)
    return 0;
  int64_t e = 1;
  for (int d = 0; d < x->rank; d++) e *= gd->slice_sizes.v[d];
  if (e != tpu_shape_numel(&g->shape)) return 0;
  for (int k = 0; k < gd->start_index_map.n; k++)
    if (gd->start_index_map.v[k] < 0 || gd->start_index_map.v[k] >= x->rank) return 0;
  return gd->start_index_map.n;
}

/* A gather of one index vector as the XLA TPU compiler runs it (its gather simplification
 * into a dynamic-slice; libtpu probes outside the corpus, v5e): the index's one-element
 * computations (JAX's negative-index wrap) on the scalar unit, in scalar memory (S(6)), no
 * kernel; the dynamic-slice a kernel. With n >= 2 components (a point) the vector is also
 * concatenated in a kernel of its own (`add_bitcast_fusion`, s32[n] in VMEM) and components
 * 1..n-1 sliced back out of it in another (`slice.9`, or a multi-output fusion), which the
 * dynamic-slice reads; component 0 comes from its scalar chain: 3 kernels of ~1,826 cycles
 * for f32[5000,300], f32[64,80,300] and bf16[777,1024] points, 1 (1,833) for one row index
 * of f32[9000]. Only indices concatenated from one-element pieces (jnp.stack) are rebuilt;
 * values are the gather's: a dynamic-slice clamps its starts alike. */
static tpu_status slice_one_index(tpu_builder *b, tpu_comp *c, tpu_instr *g, int n, int *done) {
  *done = 0;
  tpu_instr *ix = g->operands[1], *comp[TPU_MAX_RANK];
  if (n > TPU_MAX_RANK || (n > 1 && (ix->op != TPU_OP_CONCATENATE || ix->noperands != n))) return TPU_OK;
  scalar_map mp;
  mp.n = 0;
  for (int k = 0; k < n; k++) {
    tpu_instr *v = n == 1 ? ix : ix->operands[k];
    if (!one_element(v)) return TPU_OK;
    TPU_TRY(scalarize(b, c, g, &mp, v, &comp[k]));
    if (!comp[k]) return TPU_OK;
  }
  const tpu_gather_dims *gd = g->gather;
  const tpu_shape *x = &g->operands[0]->shape;
  tpu_dtype it = ix->shape.dtype;
  tpu_shape s0 = tpu_build_shape(it, 0, NULL);
  tpu_instr *start[TPU_MAX_RANK], *zero = NULL;
  for (int d = 0; d < x->rank; d++) {
    if (!zero) TPU_TRY(scalar(b, c, it, 0, &zero));
    start[d] = zero;
  }
  start[gd->start_index_map.v[0]] = comp[0];
  if (n > 1) {
    int64_t one = 1, nn = n;
    tpu_shape s1 = tpu_build_shape(it, 1, &one), sn = tpu_build_shape(it, 1, &nn);
    tpu_instr *piece[TPU_MAX_RANK], *cat;
    for (int k = 0; k < n; k++)
      TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_RESHAPE, "gather_index.piece", &s1, &comp[k], 1, &piece[k]));
    TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_CONCATENATE, "gather_index.vector", &sn, piece, n, &cat));
    TPU_TRY(tpu_build_set_attr(b, cat, "dimensions", "{0}"));
    TPU_TRY(tpu_build_set_attr(b, cat, "gather_index", "vector"));
    for (int k = 1; k < n; k++) {
      char buf[64];
      tpu_instr *sl, *sc;
      TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_SLICE, "gather_index.component", &s1, &cat, 1, &sl));
      snprintf(buf, sizeof buf, "{[%d:%d]}", k, k + 1);
      TPU_TRY(tpu_build_set_attr(b, sl, "slice", buf));
      TPU_TRY(tpu_build_set_attr(b, sl, "gather_index", "component"));
      TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_RESHAPE, "gather_index.start", &s0, &sl, 1, &sc));
      start[gd->start_index_map.v[k]] = sc;
    }
  }
  tpu_instr *ops[1 + TPU_MAX_RANK], *ds, *out;
  ops[0] = g->operands[0];
  for (int d = 0; d < x->rank; d++) ops[1 + d] = start[d];
  int64_t dims[TPU_MAX_RANK];
  for (int d = 0; d < x->rank; d++) dims[d] = gd->slice_sizes.v[d];
  tpu_shape ss = tpu_build_shape(g->shape.dtype, x->rank, dims);
  TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_DYNAMIC_SLICE, "gather_index.slice", &ss, ops, 1 + x->rank, &ds));
  char buf[256];
  TPU_TRY(tpu_build_set_attr(b, ds, "dynamic_slice_sizes", tpu_dims_text(buf, sizeof buf, dims, x->rank)));
  tpu_shape gs = g->shape;
  TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_RESHAPE, "gather_index.result", &gs, &ds, 1, &out));
  tpu_build_replace_uses(c, g, out);
  if (c->root == g) tpu_build_set_root(c, out);
  *done = 1;
  return TPU_OK;
}

/* ---- take_along_axis with one index per row: the batch index in kernels of its own ---- */

/* Whether g takes one element per row of a 2-D operand by one index per row (operand
 * batching dimension bd, start index dimension sd; take_along_axis with k = 1): *B rows. */
static int one_per_row(const tpu_instr *g, int64_t *B) {
  const tpu_gather_dims *gd = g->gather;
  const tpu_shape *x = &g->operands[0]->shape, *ix = &g->operands[1]->shape;
  if (g->noperands != 2 || x->rank != 2 || gd->operand_batching_dims.n != 1 || gd->start_index_map.n != 1 ||
      gd->start_indices_batching_dims.n != 1 || gd->offset_dims.n != 0 || gd->slice_sizes.n != 2 ||
      gd->slice_sizes.v[0] != 1 || gd->slice_sizes.v[1] != 1 || !tpu_dtype_is_int(ix->dtype))
    return 0;
  int64_t bd = gd->operand_batching_dims.v[0], sd = gd->start_index_map.v[0], ibd = gd->start_indices_batching_dims.v[0];
  if (bd == sd || bd < 0 || bd > 1 || sd < 0 || sd > 1 || ibd < 0 || ibd >= ix->rank) return 0;
  *B = x->dims[bd];
  return ix->dims[ibd] == *B && tpu_shape_numel(ix) == *B && tpu_shape_numel(&g->shape) == *B && *B > 1;
}

/* take_along_axis with one index per row as the XLA TPU compiler runs it (its batched-gather
 * normalization, the batch made an explicit index): the normalized indices (a kLoop
 * `fusion`), an `iota` kernel of the row numbers, a kernel concatenating the two
 * (`add_bitcast_fusion`), a kernel clamping and packing them (`or_bitcast_fusion`), the
 * kCustom gather, then the mask's select (`and_select_fusion`): libtpu probes outside the
 * corpus, [8..256, 300..5000] f32 and bf16 on v5e and v4, five kernels of ~1,826 cycles
 * (v5e) besides the gather. With k >= 2 the compiler fuses the iota, clamp and packing into
 * one kernel after the normalization (bitcast_or_fusion), as tpusim's fusion does unchanged.
 * tpusim builds the iota, the concatenation as [2, B] rows and their clamp, each marked a
 * kernel of its own, and gathers points (row, index) without batching dimensions; values
 * are the gather's (the row clamp is a no-op, the index clamp the gather's own). */
static tpu_status explicit_rows(tpu_builder *b, tpu_comp *c, tpu_instr *g, int64_t B) {
  const tpu_gather_dims *gd = g->gather;
  int64_t bd = gd->operand_batching_dims.v[0], sd = gd->start_index_map.v[0];
  const tpu_shape *x = &g->operands[0]->shape;
  tpu_dtype it = g->operands[1]->shape.dtype;
  int64_t one_b[2] = {1, B}, two_b[2] = {2, B};
  tpu_shape sb = tpu_build_shape(it, 1, &B), s1 = tpu_build_shape(it, 2, one_b), s2 = tpu_build_shape(it, 2, two_b);
  tpu_instr *v = g->operands[1], *io, *r[2], *cat, *lo, *hi, *cl, *ng, *out;
  if (v->shape.rank != 1) TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_RESHAPE, "gather_index.flat", &sb, &v, 1, &v));
  TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_IOTA, "gather_index.rows", &s1, NULL, 0, &io));
  TPU_TRY(tpu_build_set_attr(b, io, "iota_dimension", "1"));
  TPU_TRY(tpu_build_set_attr(b, io, "gather_index", "iota"));
  r[0] = io;
  TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_RESHAPE, "gather_index.row", &s1, &v, 1, &r[1]));
  TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_CONCATENATE, "gather_index.vector", &s2, r, 2, &cat));
  TPU_TRY(tpu_build_set_attr(b, cat, "dimensions", "{0}"));
  TPU_TRY(tpu_build_set_attr(b, cat, "gather_index", "vector"));
  tpu_tensor kb;
  TPU_TRY(tpu_tensor_alloc(&kb, it, 2, two_b, b->d));
  for (int64_t i = 0; i < B; i++) {
    tpu_tensor_set_i64(&kb, i, x->dims[bd] - 1);
    tpu_tensor_set_i64(&kb, B + i, x->dims[sd] - 1);
  }
  TPU_TRY(tpu_build_constant(b, c, "gather_index.bound", &kb, NULL, &hi));
  TPU_TRY(scalar(b, c, it, 0, &lo));
  tpu_instr *ops[3] = {lo, cat, hi};
  TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_CLAMP, "gather_index.clamp", &s2, ops, 3, &cl));
  TPU_TRY(tpu_build_set_attr(b, cl, "gather_index", "clamp"));
  tpu_shape gs = tpu_build_shape(g->shape.dtype, 1, &B);
  tpu_instr *gops[2] = {g->operands[0], cl};
  TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_GATHER, "gather_index.gather", &gs, gops, 2, &ng));
  char buf[64];
  snprintf(buf, sizeof buf, "{%lld,%lld}", (long long)bd, (long long)sd);
  TPU_TRY(tpu_build_set_attr(b, ng, "offset_dims", "{}"));
  TPU_TRY(tpu_build_set_attr(b, ng, "collapsed_slice_dims", "{0,1}"));
  TPU_TRY(tpu_build_set_attr(b, ng, "start_index_map", buf));
  TPU_TRY(tpu_build_set_attr(b, ng, "index_vector_dim", "0"));
  TPU_TRY(tpu_build_set_attr(b, ng, "slice_sizes", "{1,1}"));
  tpu_shape os = g->shape;
  TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_RESHAPE, "gather_index.result", &os, &ng, 1, &out));
  tpu_build_replace_uses(c, g, out);
  if (c->root == g) tpu_build_set_root(c, out);
  return TPU_OK;
}

/* ---- take_along_axis with several indices per row: its indices relaid out ---- */

/* The parameter the values of v come from through elementwise ops and reshapes of as many
 * elements (JAX's index wrap), or NULL. */
static const tpu_instr *index_source(const tpu_instr *v) {
  for (int depth = 0; depth < 32; depth++) {
    if (v->op == TPU_OP_PARAMETER) return v;
    if (v->op == TPU_OP_RESHAPE || v->op == TPU_OP_BITCAST) {
      v = v->operands[0];
      continue;
    }
    if (!elementwise(v->op)) return NULL;
    const tpu_instr *next = NULL;
    for (int j = 0; j < v->noperands && !next; j++)
      if (tpu_shape_numel(&v->operands[j]->shape) == tpu_shape_numel(&v->shape) && v->operands[j]->op != TPU_OP_BROADCAST &&
          v->operands[j]->op != TPU_OP_CONSTANT && v->operands[j]->shape.dtype == v->shape.dtype)
        next = v->operands[j];
    if (!next) return NULL;
    v = next;
  }
  return NULL;
}

/* A batched gather (take_along_axis, k >= 2) reads its indices as one flat row-major list
 * and writes its result so. When its index array is an entry parameter laid out with the
 * batch dimension minor ({0,1}: s32[32,2] pads least so, param_layout.c), the XLA TPU compiler's
 * index kernel writes in that layout, a copy relays it out row-major before the gather
 * (`copy.24`), and another relays the gather's result back for the select after it
 * (`copy.25`): gather_along_b32n1000_k2_bf16 and _b128n32000_k2_f32, and libtpu probes
 * outside the corpus (f32[64,5000] k = 2, bf16 k = 4, f32[256,1000] k = 8), on v4, v5e, v5p
 * and v6e. On v4 (values in CMEM) and v5p (in HBM) each copy is a kernel (1,284 cycles on
 * v4; 2,224 and 4,330 on v5p); on v5e and v6e the values stay in VMEM and each is a windowed
 * copy of 100 cycles (tile.c windowed_vmem_copy), which tpusim's own compilation, keeping no
 * value in VMEM between kernels, leaves out: the copies are made only on chips with CMEM or
 * two TensorCores, as relayout_off_core reads them. With k >= 8 rows ([32,64]) the parameter
 * is row-major and there are none. */
static tpu_status relaid_indices(tpu_builder *b, tpu_comp *c, tpu_instr *g, const tpu_chip *chip) {
  if (!chip || (chip->tensorcores <= 1 && chip->cmem_bytes <= 0)) return TPU_OK;
  const tpu_gather_dims *gd = g->gather;
  tpu_instr *ix = g->operands[1];
  if (g->noperands != 2 || gd->operand_batching_dims.n != 1 || gd->start_indices_batching_dims.n != 1 ||
      ix->op == TPU_OP_PARAMETER || ix->shape.rank < 2 || g->shape.rank < 2)
    return TPU_OK;
  const tpu_instr *p = index_source(ix);
  if (!p || p->parent != c || !p->shape.has_layout || p->shape.rank != 2) return TPU_OK;
  int64_t bd = gd->start_indices_batching_dims.v[0];
  if (bd != 0 || p->shape.minor_to_major[0] != 0) return TPU_OK; /* the batch dimension minor */
  /* the index kernel writes in the parameter's order (batch minor), then the copy */
  tpu_shape rm = ix->shape, bm = ix->shape;
  rm.has_layout = bm.has_layout = 1;
  for (int i = 0; i < ix->shape.rank; i++) rm.minor_to_major[i] = (int8_t)(ix->shape.rank - 1 - i);
  bm.minor_to_major[0] = 0;
  for (int i = 1, d = 1; i < ix->shape.rank; i++, d++) bm.minor_to_major[i] = (int8_t)d;
  ix->shape.has_layout = 1;
  memcpy(ix->shape.minor_to_major, bm.minor_to_major, sizeof bm.minor_to_major);
  tpu_instr *ci, *co;
  TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_COPY, "gather_index.rows_in", &rm, &ix, 1, &ci));
  TPU_TRY(tpu_build_set_attr(b, ci, "gather_index", "relayout"));
  g->operands[1] = ci;
  tpu_shape os = g->shape;
  os.has_layout = 1;
  os.minor_to_major[0] = 0;
  for (int i = 1, d = 1; i < os.rank; i++, d++) os.minor_to_major[i] = (int8_t)d;
  TPU_TRY(tpu_build_instr_like(b, c, g, TPU_OP_COPY, "gather_index.rows_out", &os, &g, 1, &co));
  TPU_TRY(tpu_build_set_attr(b, co, "gather_index", "relayout"));
  tpu_build_replace_uses(c, g, co);
  co->operands[0] = g;
  if (c->root == g) tpu_build_set_root(c, co);
  return TPU_OK;
}

tpu_status tpu__gather_index_kernels(tpu_builder *b, tpu_comp *c, const tpu_chip *chip) {
  int n = c->ninstrs, any = 0;
  for (int i = 0; i < n; i++) {
    tpu_instr *g = c->instrs[i];
    if (g->op != TPU_OP_GATHER) continue;
    if (tpu__gather_index_kernel(g->operands[1])) continue;
    int one = one_index(g), done = 0;
    if (one) TPU_TRY(slice_one_index(b, c, g, one, &done));
    if (done) {
      any = 1;
      continue;
    }
    int64_t rows = 0;
    if (one_per_row(g, &rows)) {
      TPU_TRY(explicit_rows(b, c, g, rows));
      any = 1;
      continue;
    }
    if (g->gather->operand_batching_dims.n == 1) {
      int before = c->ninstrs;
      TPU_TRY(relaid_indices(b, c, g, chip));
      any |= c->ninstrs != before;
      continue;
    }
    if (packed_points(g)) {
      TPU_TRY(pack_points(b, c, g));
      any = 1;
      continue;
    }
    int d = row_gather_dim(g);
    if (d < 0) continue;
    tpu_instr *ix = g->operands[1], *lo, *hi, *cl;
    int64_t top = g->operands[0]->shape.dims[d] - g->gather->slice_sizes.v[d];
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
  if (any) tpu_build_remove_dead(b, c); /* a point gather's indices as they were built */
  return any ? tpu_build_finish(b, c) : TPU_OK;
}
