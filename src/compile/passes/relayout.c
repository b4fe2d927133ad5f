/* Convolution layouts at the program's edge (the last step of the fuse pass).
 *
 * The XLA TPU compiler lays a convolution's activations out with the batch in the
 * sublanes and the features in the lanes, the spatial dimensions major ({3,0,2,1} for
 * NHWC), and gives a program's results the layout that pads least to the (sublanes x
 * lanes) tile, the row-major one when it pads no more. Where the two differ, the
 * convolution kernel writes its own layout and a `copy` relays it out (read from its
 * compiled programs, docs/fidelity.md: bf16[32,56,56,64] pads alike both ways and leaves
 * through a copy; bf16[32,14,14,256] pads 14 rows to 16 row-major, so the program returns
 * the convolution's layout and there is no copy).
 *
 * tpusim's arrays are row-major, so the copy is made explicit: the kernel's fused
 * computation returns its result transposed to the convolution's layout (spatial
 * dimensions, batch, feature) and a transpose back is a kernel of its own. Values are
 * unchanged. Only fusions this pass made are touched (a compiled program keeps its own).
 * The parameters' layouts, the pass's first step, are param_layout.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"

/* Does the fused computation's root come from a matmul (opcode `op`: a convolution or a
 * dot) through elementwise ops of the root's shape? Returns the matmul or NULL. */
const tpu_instr *tpu__root_matmul(const tpu_instr *root, tpu_opcode op) {
  const tpu_instr *x = root;
  for (int depth = 0; depth < 64; depth++) {
    if (x->op == op) return op != TPU_OP_CONVOLUTION || x->has_conv_dims ? x : NULL;
    tpu_op_class k = tpu_op_class_of(x->op);
    if (k != TPU_CLS_UNARY && k != TPU_CLS_BINARY && k != TPU_CLS_TERNARY && x->op != TPU_OP_CONVERT) return NULL;
    /* follow the operand of the result's shape that is not a parameter or broadcast */
    const tpu_instr *next = NULL;
    for (int i = 0; i < x->noperands && !next; i++) {
      const tpu_instr *o = x->operands[i];
      if (o->op == TPU_OP_PARAMETER || o->op == TPU_OP_BROADCAST || o->op == TPU_OP_CONSTANT) continue;
      if (o->shape.rank == root->shape.rank && !memcmp(o->shape.dims, root->shape.dims, sizeof o->shape.dims[0] * (size_t)o->shape.rank))
        next = o;
    }
    if (!next) return NULL;
    x = next;
  }
  return NULL;
}

static const tpu_instr *conv_of(const tpu_instr *root) { return tpu__root_matmul(root, TPU_OP_CONVOLUTION); }

/* The dot of the root's shape that the root computes from through elementwise ops of that
 * shape (any branch: a residual add's other operand may be a reshape), or NULL. */
static const tpu_instr *epilogue_dot(const tpu_instr *x, const tpu_shape *s, int depth) {
  if (x->shape.rank != s->rank || memcmp(x->shape.dims, s->dims, sizeof s->dims[0] * (size_t)s->rank)) return NULL;
  if (x->op == TPU_OP_DOT) return x;
  tpu_op_class k = tpu_op_class_of(x->op);
  if (depth > 16 || (k != TPU_CLS_UNARY && k != TPU_CLS_BINARY && k != TPU_CLS_TERNARY && x->op != TPU_OP_CONVERT))
    return NULL;
  for (int i = 0; i < x->noperands; i++) {
    const tpu_instr *d = epilogue_dot(x->operands[i], s, depth + 1);
    if (d) return d;
  }
  return NULL;
}

/* Must a result of shape s that the convolution writes with dimension `second` in the
 * sublanes and `minor` in the lanes be relaid out to leave the program? It keeps the
 * convolution's layout only when that pads strictly less than row-major and no layout pads
 * less. */
int tpu__needs_relayout(const tpu_chip *chip, const tpu_shape *s, int second, int minor) {
  int r = s->rank;
  if (second == r - 2 && minor == r - 1) return 0; /* the convolution's layout is row-major */
  int64_t conv = tpu__tiled_as(chip, s, second, minor), least = tpu__least_tiled_bytes(chip, s);
  return !(conv == least && conv < tpu__tiled_as(chip, s, r - 2, r - 1));
}

int tpu__conv_batch_in_lanes(int64_t groups, int64_t taps, int64_t features, int64_t batch, int64_t lanes) {
  return groups == 1 && taps > 1 && features < lanes && batch > features && batch > 0;
}

/* The tiling (second, minor) of a program result of shape s: the one that pads least where
 * that is strictly less than row-major (layout.c), else row-major. */
void tpu__result_tiling_shape(const tpu_chip *chip, const tpu_shape *s, int *second, int *minor) {
  int r = s->rank, ls, lm;
  *second = r - 2, *minor = r - 1;
  if (tpu__least_tiling(chip, s, &ls, &lm) < tpu__tiled_as(chip, s, r - 2, r - 1)) *second = ls, *minor = lm;
}

/* The convolution of the kernel that produced entry value v (a fusion, or one result of a
 * fusion's tuple through get-tuple-element): its result's root reached from the convolution
 * through elementwise ops (tpu__root_matmul), or NULL. */
static const tpu_instr *producer_conv(const tpu_instr *v) {
  int li = -1;
  if (v->op == TPU_OP_GET_TUPLE_ELEMENT && v->noperands == 1) li = (int)v->index, v = v->operands[0];
  if (v->op != TPU_OP_FUSION || !v->calls || !v->calls->root) return NULL;
  const tpu_instr *r = v->calls->root;
  if (li >= 0) {
    if (r->op != TPU_OP_TUPLE || li >= r->noperands) return NULL;
    r = r->operands[li];
  } else if (r->op == TPU_OP_TUPLE) {
    return NULL;
  }
  const tpu_instr *cv = conv_of(r);
  return cv && cv->shape.rank == r->shape.rank ? cv : NULL;
}

/* A kernel of elementwise ops over a convolution's result that another kernel wrote (a batch
 * norm's normalisation, scale and shift, a residual add, the activation after the
 * convolution's statistics were taken): the convolution of the fusion parameter reached
 * from the root x through elementwise ops of the result's shape s (any branch), or NULL.
 * Layout assignment gives an elementwise op its operand's layout, so such a kernel writes
 * the convolution's layout as the convolution's own kernel would. */
static const tpu_instr *read_conv(const tpu_instr *f, const tpu_instr *x, const tpu_shape *s, int depth) {
  if (x->shape.rank != s->rank || memcmp(x->shape.dims, s->dims, sizeof s->dims[0] * (size_t)s->rank)) return NULL;
  if (x->op == TPU_OP_PARAMETER)
    return x->index >= 0 && x->index < f->noperands ? producer_conv(f->operands[x->index]) : NULL;
  tpu_op_class k = tpu_op_class_of(x->op);
  if (depth > 16 || (k != TPU_CLS_UNARY && k != TPU_CLS_BINARY && k != TPU_CLS_TERNARY && x->op != TPU_OP_CONVERT))
    return NULL;
  for (int i = 0; i < x->noperands; i++) {
    const tpu_instr *c = read_conv(f, x->operands[i], s, depth + 1);
    if (c) return c;
  }
  return NULL;
}

/* The tiling convolution cv lays its result of shape s out in (relayout_one): *second in the
 * sublanes, *minor in the lanes, the other dimensions major in order. 0 where the compiler
 * would not lay it so (a batch that neither fills the sublanes nor is a plain convolution's
 * batch of fewer rows). */
static int conv_tiling(const tpu_chip *chip, const tpu_instr *cv, const tpu_shape *s, int *second, int *minor) {
  const tpu_conv_dims *cd = cv->conv;
  int batch = (int)cd->out_batch, feature = (int)cd->out_feature;
  /* batch in the sublanes, features in the lanes; with fewer features than the lanes and a
   * larger batch (tile.c: the batch on the MXU's columns) the batch in the lanes */
  int64_t taps = 1, lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128;
  for (int i = 0; i < cd->nspatial; i++) taps *= cv->operands[1]->shape.dims[cd->k_spatial[i]];
  int64_t nb = s->dims[batch], nf = s->dims[feature];
  int few = tpu__conv_batch_in_lanes(cv->feature_group_count, taps, nf, nb, lanes);
  *second = few ? feature : batch, *minor = few ? batch : feature;
  /* a batch in the sublanes must fill them for the compiler to lay it there, or, for a plain
   * convolution, be fewer: a batch of 1, 2 or 4 goes in a tile of its rows (T(2,128),
   * T(4,128)), and the result leaves through a copy where row-major pads less (libtpu probes,
   * bench/fidelity/probes/small_batch_conv.py: bf16[1,31,31,64] leaves through a copy,
   * bf16[2,31,31,256] in its T(2,128) tiles; tpusim decides as the compiler in 92 of 96
   * probe-generation pairs on v4 and v5e, the 4 others folded into the batch by the compiler
   * at 15 wide). A batch in the lanes is there whatever its size
   * (tconv_b8_7x7_c128to3_k3s2_same: 8 of the 128 lanes, a relayout copy after the kernel on
   * every generation). */
  int64_t sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8;
  int tiled_batch = nb < sub && cv->feature_group_count <= 1 && cv->batch_group_count <= 1;
  return few || nb % sub == 0 || tiled_batch;
}

/* Does entry value v hold a convolution's activations in the convolution's own layout: the
 * result of the convolution's kernel, or of a kernel of elementwise ops over it (read_conv),
 * which layout assignment gives its operand's layout? The XLA TPU compiler lays a
 * convolution's result out with its spatial dimensions major and the batch or a spatial
 * dimension in the sublanes, never row-major: libtpu probes off the corpus
 * (bench/fidelity/probes/conv_norm_dot.py, v5e/v6e) find a 7x7 depthwise convolution's
 * bf16[B,H,W,C] in {3,0,2,1} with T(B,128) tiles for B = 2, 4, 8 and H = 20, 24 (T(2,128) at
 * B = 1), {3,1,2,0} for bf16[4,36,36,256] and bf16[2,40,40,256]. (fuse_merge.c: a dot reads
 * such a value relaid in its own kernel, and the elementwise kernel stays a kernel of its own.) */
int tpu__conv_layout_value(const tpu_instr *v) {
  const tpu_instr *cv = producer_conv(v);
  if (!cv && v->op == TPU_OP_FUSION && v->calls && v->calls->root && v->calls->root->op != TPU_OP_TUPLE &&
      v->calls->root->op != TPU_OP_PARAMETER)
    cv = read_conv(v, v->calls->root, &v->calls->root->shape, 0);
  /* space-to-batch's unfold of a split convolution's result (space_to_batch.c) */
  if (!cv && v->op == TPU_OP_FUSION && v->noperands == 1 && v->calls && v->calls->root &&
      tpu__fuse_own_kernel(v->calls->root))
    cv = producer_conv(v->operands[0]);
  if (!cv || v->shape.dtype == TPU_TUPLE || v->shape.rank < 3 || cv->shape.rank < 3) return 0;
  int spatial = 0;
  for (int i = 0; i < cv->conv->nspatial; i++) spatial += cv->shape.dims[cv->conv->out_spatial[i]] > 1;
  return spatial > 0;
}

/* A program result the convolution writes with (second, minor) in its tile, where that pads as
 * little as the least padded layout but is not the one the XLA TPU compiler gives the result:
 * of the layouts that pad alike it takes the nearest row-major (tpu__least_tiling: the most
 * minor dimensions first), so a small batch in the sublanes in a tile of its rows loses to a
 * spatial dimension of as many rows, and the result leaves through a copy
 * (conv3d_b2_8x14x14_c16to16_k1s1: bf16[2,8,14,14,16] written {4,0,3,2,1:T(2,128)}, copied into
 * {4,1,3,2,0}, D's 8 in the sublanes: 8,648 cycles on v4; libtpu probes off the corpus,
 * bench/fidelity/probes/conv_result_tie.py). TPUSIM_NO_CONV_RESULT_TIE=1 leaves such a result
 * in the convolution's layout (the rule's check). */
static int result_tie_relaid(const tpu_chip *chip, const tpu_shape *s, int second, int minor) {
  int off = tpu_env_flag("TPUSIM_NO_CONV_RESULT_TIE");
  if (off) return 0;
  int ls, lm;
  int64_t least = tpu__least_tiling(chip, s, &ls, &lm);
  return (ls != second || lm != minor) && tpu__tiled_as(chip, s, second, minor) == least;
}

static tpu_status relayout_one(tpu_builder *b, tpu_comp *entry, tpu_instr *f, const tpu_chip *chip, int *done) {
  *done = 0;
  tpu_comp *fc = f->calls;
  const tpu_instr *cv = conv_of(fc->root);
  if (!cv && fc->root->op != TPU_OP_PARAMETER) cv = read_conv(f, fc->root, &fc->root->shape, 0);
  if (!cv || f->shape.rank < 3 || f->shape.rank != cv->shape.rank) return TPU_OK;
  int rank = f->shape.rank, batch = (int)cv->conv->out_batch, feature = (int)cv->conv->out_feature, second, minor;
  if (!conv_tiling(chip, cv, &f->shape, &second, &minor) ||
      !(tpu__needs_relayout(chip, &f->shape, second, minor) || result_tie_relaid(chip, &f->shape, second, minor)))
    return TPU_OK;
  /* perm: the convolution's layout (spatial dimensions in order, then second, minor) */
  int64_t perm[TPU_MAX_RANK], inv[TPU_MAX_RANK];
  int n = 0;
  for (int d = 0; d < rank; d++)
    if (d != batch && d != feature) perm[n++] = d;
  perm[n++] = second;
  perm[n++] = minor;
  for (int i = 0; i < rank; i++) inv[perm[i]] = i;
  tpu_shape conv_shape = f->shape;
  conv_shape.layout_tail = NULL;
  for (int i = 0; i < rank; i++) conv_shape.dims[i] = f->shape.dims[perm[i]];
  char buf[TPU_MAX_RANK * 24 + 4];
  /* inside the kernel: the result in the convolution's layout */
  tpu_instr *old_root = fc->root, *t_in, *t_out;
  TPU_TRY(tpu_build_instr(b, fc, TPU_OP_TRANSPOSE, "relayout", &conv_shape, &old_root, 1, old_root->loc, &t_in));
  TPU_TRY(tpu_build_set_attr(b, t_in, "dimensions", tpu_dims_text(buf, sizeof buf, perm, rank)));
  tpu_build_set_root(fc, t_in);
  TPU_TRY(tpu_build_finish(b, fc));
  tpu_shape out_shape = f->shape;
  f->shape = conv_shape;
  /* the relayout copy: a transpose back, named and located after the kernel */
  TPU_TRY(tpu_build_instr_like(b, entry, f, TPU_OP_TRANSPOSE, "copy.relayout", &out_shape, &f, 1, &t_out));
  TPU_TRY(tpu_build_set_attr(b, t_out, "dimensions", tpu_dims_text(buf, sizeof buf, inv, rank)));
  tpu_build_replace_uses(entry, f, t_out);
  t_out->operands[0] = f; /* replace_uses rewired the new transpose's own operand too */
  *done = 1;
  return TPU_OK;
}

/* dimensions of x->shape in [from, from + n) larger than 1 */
static int free_dims(const tpu_instr *x, int from, int n) {
  int c = 0;
  for (int d = from; d < from + n; d++) c += x->shape.dims[d] > 1;
  return c;
}

/* the last free dimensions of size above 1 of x's lhs and rhs (x's result order) */
static void last_free(const tpu_instr *x, int nb, int nl, int nr, int *last_l, int *last_r) {
  *last_l = nb + nl - 1, *last_r = nb + nl + nr - 1; /* dimensions of size 1 are no dimension */
  while (*last_l > nb && x->shape.dims[*last_l] == 1) (*last_l)--;
  while (*last_r > nb + nl && x->shape.dims[*last_r] == 1) (*last_r)--;
}

/* The matrix unit writes a dot's result tile by tile, a free dimension of one operand in the
 * sublanes and one of the other's in the lanes, batch dimensions major (XLA TPU compiler's
 * programs: a batched matrix-vector product bf16[16,64] x bf16[16,64,128] is written as
 * bf16[16,1,128], one padded tile per batch element). A program result whose least padded
 * tiling puts a batch dimension, or no free dimension of one operand, in its tile is not
 * that layout: the kernel writes the dot's own and a copy relays it out (bf16[3,256,128,4]
 * from a dot over batch 4 leaves as {2,3,1,0}, the batch in the sublanes: a 10,196-cycle
 * `copy` after the dot's kernel on v5e). Of the result-rooted dots the compiler runs on its
 * matrix unit in the tune split of bench/fidelity/families, the copy is made where this
 * says in 34 of 35. `x` is the dot, `perm` the transpose after it (NULL for none). */
static int dot_result_relaid(const tpu_chip *chip, const tpu_shape *out, const tpu_instr *x, int nb, int nl, int nr,
                             const int64_t *perm) {
  if (out->rank < 2 || nb + nl + nr != x->shape.rank) return 0;
  int q, m;
  tpu__result_tiling_shape(chip, out, &q, &m);
  /* A dot one operand of which has no free dimension is a batched matrix-vector product: the
   * compiler's convolution emitter writes each batch element's row in a tile of its own, the
   * dtype's smallest (one sublane, (1,128), for a 32-bit type). A 32-bit result, the dot's
   * own dimension order, tiled row-major with its one free dimension in the lanes and no wider
   * than them, holds row i at i x 128 elements in either tiling, so it is that layout byte for
   * byte and leaves as it is written (f32[32,96] from a dot over batch 32 with no free
   * dimension on the right: the compiler's kernel result is bitcast to the program's, no
   * copy). A 16-bit one packs two rows to a sublane (bf16[4,96]: copied), and a free
   * dimension wider than the lanes is tiled otherwise (f32[2,512]: copied). */
  if (!perm && (nl == 0 || nr == 0) && nl + nr == 1 && tpu_dtype_size(out->dtype) == 4 && q == out->rank - 2 &&
      m == out->rank - 1 && out->dims[m] <= chip->vector_lanes)
    return 0;
  int dq = perm ? (int)perm[q] : q, dm = perm ? (int)perm[m] : m;
  int cq = dq < nb ? 0 : dq < nb + nl ? 1 : 2, cm = dm < nb ? 0 : dm < nb + nl ? 1 : 2;
  if (!((cq == 1 && cm == 2) || (cq == 2 && cm == 1))) return 1;
  /* The compiler runs a dot whose operand has several free dimensions as a 1x1 convolution,
   * the operand's last free dimension its batch (in the sublanes), the others spatial (major):
   * a tile holding another free dimension of that operand is not what the kernel writes.
   * swin_fwd_b4_28x28x192h6's MLP, bf16[4,28,28,768] x bf16[768,192], is the compiler's
   * `convolution.22` with dim_labels=01bf_io01->01bf, written {3,2,1,0} (28 in the sublanes)
   * and copied into the least padded {3,0,2,1} (the 4 images in the sublanes, tile (4,128));
   * whisper_enc_fwd_b4t1000d384h6's bf16[4,500,384] alike into {2,0,1}. */
  int last_l, last_r;
  last_free(x, nb, nl, nr, &last_l, &last_r);
  /* Such a convolution writes the rhs's free dimension in the lanes and the lhs's in the
   * sublanes, whichever operand has several: a tile with the lhs's in the lanes is copied
   * (einsum_acb_ad_bcd_a512_b256_c3_d512_bf16, dot(bf16[512,512], bf16[512,3,256]) into
   * [256,3,512]{2,0,1}: the compiler's fb0_i0o->b0f convolution writes the 256 in the lanes,
   * then a 5,098-cycle `copy` on v5e; libtpu probes off the corpus, dot_result_orient.py:
   * 10 of 10 such dots copied, none of 3 with the rhs's in the lanes), where the rhs's fills
   * its lanes: vit_fwd_b16d192h3's MLP, [16,197,768] x [768,192], is written {1,2,0} as the
   * program asks, the 197 in the lanes (its `convolution.19`, 0bf_io0->0bf), 192 padding
   * them more. A dot with one free dimension on either side is a matrix product either way
   * round and is written as tiled. 2 there: the kernel writes the convolution's layout and
   * the copy reads that, not the dot's order (the compiler's bf16[512,3,256]{2,0,1}, not the
   * 3 in the sublanes). */
  int64_t lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128;
  if (cq == 2 && cm == 1 && (free_dims(x, nb, nl) > 1 || free_dims(x, nb + nl, nr) > 1) &&
      x->shape.dims[last_r] % lanes == 0)
    return 2;
  return (cq == 1 ? dq : dm) != last_l || (cq == 2 ? dq : dm) != last_r;
}

/* A dot's batch, lhs free and rhs free dimension counts (its result's order), or those of
 * the product of broadcasts dot_reduce.c makes of a dot contracting only size-1 dimensions
 * (its "outer_dot" attribute): the XLA TPU compiler's broadcast_multiply kernel writes the
 * dot's order as its matrix unit would, batch dimensions major, and a copy relays a program
 * result out where dot_result_relaid says (attn_bwd_b1q1k77h12kv12d128_f32's dK and dV,
 * f32[1,77,12,128] from products over 12 heads, are multiply_bitcast_fusion kernels written
 * [12,77,128] and copied into {3,0,2,1}: 1,048 and 10,936 cycles on v5e; gemm_f32_1024x1x33's
 * f32[1024,33] is written {0,1} directly, as are bf16[8,300,40] over batch 8 and
 * f32[4,16,1,128] over [4,16]: libtpu probes outside the corpora, v4 and v5e). 0 for
 * other instructions. */
static int dot_dims(const tpu_instr *x, int *nb, int *nl, int *nr) {
  if (x->op == TPU_OP_DOT && x->noperands == 2) {
    *nb = x->dot.lhs_batch.n;
    *nl = x->operands[0]->shape.rank - *nb - x->dot.lhs_contract.n;
    *nr = x->operands[1]->shape.rank - x->dot.rhs_batch.n - x->dot.rhs_contract.n;
    return 1;
  }
  for (int i = 0; i < x->nattrs; i++)
    if (!strcmp(x->attrs[i].name, "outer_dot")) return sscanf(x->attrs[i].value, "%d,%d,%d", nb, nl, nr) == 3;
  return 0;
}

static tpu_status dot_relayout_one(tpu_builder *b, tpu_comp *entry, tpu_instr *f, const tpu_chip *chip, int *done) {
  *done = 0;
  tpu_comp *fc = f->calls;
  tpu_instr *x = fc ? fc->root : f;
  const int64_t *perm = NULL;
  if (fc && x->op == TPU_OP_TRANSPOSE && x->noperands == 1 && x->dimensions.n == x->shape.rank) {
    perm = x->dimensions.v;
    x = x->operands[0];
  } else if (fc && x->op != TPU_OP_DOT) {
    /* an elementwise epilogue (a residual add, a bias, a convert) is computed on the dot's
     * result tiles and written in the dot's layout: the relayout copies the kernel's result */
    const tpu_instr *d = epilogue_dot(x, &x->shape, 0);
    if (d) x = (tpu_instr *)d;
  }
  int nb, nl, nr, how;
  if (!dot_dims(x, &nb, &nl, &nr) || !(how = dot_result_relaid(chip, &f->shape, x, nb, nl, nr, perm))) return TPU_OK;
  tpu_instr *t_out;
  if (perm) {
    /* the kernel writes the dot's result; the transpose is the relayout kernel */
    char buf[TPU_MAX_RANK * 24 + 4];
    tpu_shape out_shape = f->shape;
    tpu_build_set_root(fc, x);
    if (tpu_build_remove_dead(b, fc) < 0) return b->d->status;
    TPU_TRY(tpu_build_finish(b, fc));
    f->shape = x->shape;
    f->shape.layout_tail = NULL;
    TPU_TRY(tpu_build_instr_like(b, entry, f, TPU_OP_TRANSPOSE, "copy.relayout", &out_shape, &f, 1, &t_out));
    TPU_TRY(tpu_build_set_attr(b, t_out, "dimensions", tpu_dims_text(buf, sizeof buf, perm, f->shape.rank)));
  } else {
    TPU_TRY(tpu_build_instr_like(b, entry, f, TPU_OP_COPY, "copy.relayout", &f->shape, &f, 1, &t_out));
  }
  if (how == 2) {
    int last_l, last_r;
    last_free(x, nb, nl, nr, &last_l, &last_r);
    tpu__tile_layout(&f->shape, last_r, last_l);
  }
  tpu_build_replace_uses(entry, f, t_out);
  t_out->operands[0] = f;
  *done = 1;
  return TPU_OK;
}

/* Space-to-batch's result leaving the program (space_to_batch.c marks the slice after the
 * unfold s2b_result="b,w,f": its batch, split and feature dimensions). The XLA TPU compiler
 * unfolds the convolution's result [spatial..., 8B, S', F] into a layout in which the result
 * is a bitcast of it, so the batch sits immediately major to W (the pieces, then S', merged
 * into W), and slices there (its `slice_bitcast_fusion`, {3,2,0,1} for NHWC: features in the
 * lanes, W in the sublanes, the batch, then H). Where the program's result layout (the least
 * padded, tpu__least_tiling) is not that one, a `copy` into it follows: features out of the
 * lanes, or more than one image with the batch anywhere but next to W (of the results
 * bench/fidelity/families' programs take from space to batch's slice, tune and test: 19 of
 * 20, dilconv_b2_28x28_c64to256_k3d2's bf16[2,28,28,256] copied into {3,0,2,1:T(2,128)},
 * 18,076 cycles on v5e; conv1d_b4l4096_c128to128_k4s2's [4,2048,128] row-major, the batch
 * next to L: none; at batch 1 none where the features stay in the lanes,
 * conv3d_b1_8x28x28_c3to32_k1s1 written with D in the sublanes; the miss is
 * conv1d_b4l256_c1to1_k31s1_causal_dw, one feature, no copy). */
static int s2b_result_relaid(const tpu_chip *chip, const tpu_shape *s, int bd, int wd, int fd) {
  int q, m, order[TPU_MAX_RANK], n = 0;
  if (bd < 0 || wd < 0 || fd < 0 || bd >= s->rank || wd >= s->rank || fd >= s->rank || s->rank < 2) return 0;
  tpu__least_tiling(chip, s, &q, &m);
  if (m != fd) return 1;
  if (s->dims[bd] == 1) return 0;
  order[n++] = m, order[n++] = q; /* the layout, minor to major (tpu__tile_layout's) */
  for (int d = s->rank - 1; d >= 0; d--)
    if (d != m && d != q) order[n++] = d;
  for (int i = 0; i < n; i++) {
    if (order[i] != wd) continue;
    for (int j = i + 1; j < n; j++) /* dimensions of size 1 are no dimension */
      if (s->dims[order[j]] != 1) return order[j] != bd;
  }
  return 1;
}

static tpu_status s2b_relayout_one(tpu_builder *b, tpu_comp *entry, tpu_instr *v, const tpu_chip *chip, int *done) {
  *done = 0;
  const char *t = NULL;
  for (int i = 0; i < v->nattrs; i++)
    if (!strcmp(v->attrs[i].name, "s2b_result")) t = v->attrs[i].value;
  int bd, wd, fd;
  if (!t || sscanf(t, "%d,%d,%d", &bd, &wd, &fd) != 3 || !s2b_result_relaid(chip, &v->shape, bd, wd, fd)) return TPU_OK;
  tpu_instr *c;
  TPU_TRY(tpu_build_instr_like(b, entry, v, TPU_OP_COPY, "copy.relayout", &v->shape, &v, 1, &c));
  TPU_TRY(tpu_build_set_attr(b, c, "s2b_kernel", "result"));
  tpu_build_replace_uses(entry, v, c);
  c->operands[0] = v;
  *done = 1;
  return TPU_OK;
}

/* TPUSIM_NO_S2B_LANES=1 leaves space to batch's relayouts through W out of the tile to the one
 * kernel each way (the rule's check). */
int tpu__s2b_lanes_off(void) {
  return tpu_env_flag("TPUSIM_NO_S2B_LANES");
}

/* Do values stay in VMEM between kernels on this chip (vmem_assign.c: one TensorCore whose
 * kernels' scoped VMEM leaves room; v5e, v6e)? On v4 (CMEM) and v5p (two cores) the XLA TPU
 * compiler keeps none there. */
int tpu__values_stay_in_vmem(const tpu_chip *chip) {
  return chip->tensorcores <= 1 && chip->scoped_vmem_bytes < chip->vmem_bytes;
}

/* The dimension of s that space to batch's split reads it along, where every reader of
 * parameter p is such a split (space_to_batch.c split_dim "s2b.split": [.., W, ..] ->
 * [.., 8, W / 8, ..], no pad or halo: a 1x1x1 or stride-as-window convolution whose W splits
 * evenly); -1 otherwise. *piece: W / 8. */
int tpu__s2b_even_split_dim(const tpu_uses *u, const tpu_instr *p, int64_t *piece) {
  const tpu_shape *s = &p->shape;
  int w = -1;
  if (u->nusers[p->id] < 1) return -1;
  for (int k = 0; k < u->nusers[p->id]; k++) {
    const tpu_instr *r = u->users[p->id][k];
    if (r->op != TPU_OP_RESHAPE || !r->name || strncmp(r->name, "s2b.split", 9) || r->shape.rank != s->rank + 1)
      return -1;
    int d = 0;
    while (d < s->rank && r->shape.dims[d] == s->dims[d]) d++;
    if (d >= s->rank || r->shape.dims[d] != 8 || r->shape.dims[d + 1] * 8 != s->dims[d] || (w >= 0 && w != d)) return -1;
    for (int e = d + 1; e < s->rank; e++)
      if (r->shape.dims[e + 1] != s->dims[e]) return -1;
    w = d;
    *piece = r->shape.dims[d + 1];
  }
  return w;
}

/* The least padded tiling of s with W (dimension w) out of the lanes, and out of the
 * sublanes too unless its pieces of `piece` rows are whole tiles of them: the layout the XLA
 * TPU compiler relays a space-to-batch input or result through so that W splits by a bitcast
 * (conv3d_b1_16x56x56_c32to32_k1s1: {3,4,2,1,0} -> {2,4,3,1,0}, H in the lanes, the features in
 * the sublanes; conv3d_b2_8x56x56_c3to32_k1s1: {3,2,4,1,0} -> {2,1,4,3,0}, D's 8 rows in the
 * sublanes, W's pieces of 7 not whole tiles). */
int64_t tpu__tiling_off_w(const tpu_chip *chip, const tpu_shape *s, int w, int64_t piece, int *second, int *minor) {
  int r = s->rank;
  int64_t least = -1;
  int w_rows = piece % tpu__tile_rows(chip, s->dtype, s->dims[w]) == 0;
  for (int m = r - 1; m >= 0; m--)
    for (int q = r - 1; q >= 0; q--) {
      if (q == m || m == w || (q == w && !w_rows)) continue;
      int64_t b = tpu__tiled_as(chip, s, q, m);
      if (least < 0 || b < least) least = b, *second = q, *minor = m;
    }
  return least;
}

/* Space to batch's unfold (space_to_batch.c: s2b.split, s2b.transpose, s2b.merge, no slice
 * back: W splits evenly) as a kernel that leaves the program, where the result's least padded
 * layout puts W in the lanes: the XLA TPU compiler unfolds through tiling_off_w's layout (a
 * copy from the convolution's, a bitcast merging W) and copies that into the result's
 * (conv3d_b1_16x56x56_c32to32_k1s1's copy.3 and copy.4, 57,120 + 65,936 cycles on v4, 60,151 +
 * 50,388 on v5p). tpusim's unfold kernel writes tiling_off_w's layout and a copy relays it out,
 * where values do not stay in VMEM between kernels (values_stay_in_vmem: on v5e and v6e the
 * compiler's first copy is within VMEM, 1,400 cycles, and the unfold kernel stands for the
 * pair). */
static tpu_status s2b_lanes_result(tpu_builder *b, tpu_comp *entry, tpu_instr *f, const tpu_chip *chip, int *done) {
  *done = 0;
  const tpu_instr *mg = f->calls ? f->calls->root : NULL;
  if (tpu__s2b_lanes_off() || tpu__values_stay_in_vmem(chip) || !mg || mg->op != TPU_OP_RESHAPE || !mg->name ||
      strncmp(mg->name, "s2b.merge", 9) || mg->noperands != 1)
    return TPU_OK;
  const tpu_instr *t = mg->operands[0];
  if (t->op != TPU_OP_TRANSPOSE || !t->name || strncmp(t->name, "s2b.transpose", 13) || t->shape.rank != mg->shape.rank + 1 ||
      t->noperands != 1 || !t->operands[0]->name || strncmp(t->operands[0]->name, "s2b.split", 9))
    return TPU_OK;
  tpu_shape *s = &f->shape;
  if (s->rank != mg->shape.rank || s->layout_tail) return TPU_OK;
  int w = 0;
  while (w < s->rank && t->shape.dims[w] == s->dims[w]) w++;
  if (w >= s->rank || t->shape.dims[w] != 8) return TPU_OK;
  int64_t piece = t->shape.dims[w + 1];
  int q, m, q1, m1;
  if (tpu__least_tiling(chip, s, &q, &m) >= tpu__tiled_as(chip, s, s->rank - 2, s->rank - 1) || m != w ||
      tpu__tiling_off_w(chip, s, w, piece, &q1, &m1) <= 0)
    return TPU_OK;
  tpu_shape to = *s;
  tpu__tile_layout(&to, m, q);
  tpu__tile_layout(s, m1, q1);
  tpu_instr *c;
  TPU_TRY(tpu_build_instr_like(b, entry, f, TPU_OP_COPY, "copy.relayout", &to, &f, 1, &c));
  TPU_TRY(tpu_build_set_attr(b, c, "s2b_lanes", "1"));
  tpu_build_replace_uses(entry, f, c);
  c->operands[0] = f;
  *done = 1;
  return TPU_OK;
}

tpu_status tpu__fuse_relayout(tpu_builder *b, tpu_comp *entry, const tpu__made_set *made, const tpu_chip *chip) {
  if (!chip) return TPU_OK; /* a chip-independent compile keeps its results' layouts */
  tpu_instr *root = entry->root;
  int n = root->op == TPU_OP_TUPLE ? root->noperands : 1;
  int changed = 0;
  for (int i = 0; i < n; i++) {
    tpu_instr *v = root->op == TPU_OP_TUPLE ? root->operands[i] : root;
    int done;
    if (v->op == TPU_OP_DOT && !v->shape.layout_tail) { /* a dot of its own */
      TPU_TRY(dot_relayout_one(b, entry, v, chip, &done));
      changed |= done;
      root = entry->root;
      continue;
    }
    if (v->op == TPU_OP_SLICE && !v->shape.layout_tail) { /* space to batch's slice */
      TPU_TRY(s2b_relayout_one(b, entry, v, chip, &done));
      changed |= done;
      root = entry->root;
      continue;
    }
    if (v->op != TPU_OP_FUSION || !v->calls || !tpu__made_has(made, v->calls) || v->shape.dtype == TPU_TUPLE) continue;
    TPU_TRY(relayout_one(b, entry, v, chip, &done));
    if (!done) TPU_TRY(dot_relayout_one(b, entry, v, chip, &done));
    if (!done) TPU_TRY(s2b_lanes_result(b, entry, v, chip, &done));
    changed |= done;
    root = entry->root; /* the root itself may have been replaced */
  }
  return changed ? tpu_build_finish(b, entry) : TPU_OK;
}

/* A dynamic-slice of an entry parameter that is the program's result (itself, or through a
 * reshape that keeps its dims: a gather of one index, gather_index.c), where the result pads
 * least with another tile than the parameter's: the XLA TPU compiler slices in the
 * parameter's layout and a copy relays the slice into the result's, a kernel of its own
 * (gather_rows_197x64_m1_bf16: bf16[197,64]{0,1} sliced into bf16[1,64]{0,1} in VMEM, 1,921
 * cycles on v5e, then copy.1 into {1,0}, 1,908; libtpu probes outside the corpus,
 * bench/fidelity/probes/dslice_result.py: f32[500,16]{0,1} sliced into f32[4,16], 1,850 +
 * 1,908 on v5e). One that keeps the parameter's tile writes the result itself
 * (gather_rows_30522x128_m1_f32: one kernel). */
tpu_status tpu__result_slice_copy(tpu_builder *b, tpu_comp *entry, const tpu_chip *chip) {
  tpu_instr *root = entry->root, *ds = root;
  if (!root || !chip) return TPU_OK;
  if (ds->op == TPU_OP_RESHAPE && ds->noperands == 1 && ds->operands[0]->op == TPU_OP_DYNAMIC_SLICE &&
      ds->operands[0]->shape.rank == ds->shape.rank &&
      !memcmp(ds->shape.dims, ds->operands[0]->shape.dims, sizeof ds->shape.dims[0] * (size_t)ds->shape.rank))
    ds = ds->operands[0];
  if (ds->op != TPU_OP_DYNAMIC_SLICE || ds->noperands < 1 || ds->operands[0]->op != TPU_OP_PARAMETER) return TPU_OK;
  const tpu_shape *p = &ds->operands[0]->shape;
  if (p->rank < 2 || p->rank != ds->shape.rank || p->layout_tail || ds->shape.layout_tail) return TPU_OK;
  int second = p->has_layout ? p->minor_to_major[1] : p->rank - 2;
  int minor = p->has_layout ? p->minor_to_major[0] : p->rank - 1;
  int rs, rm;
  tpu__result_tiling_shape(chip, &ds->shape, &rs, &rm);
  if (rs == second && rm == minor) return TPU_OK;
  tpu_shape to = ds->shape;
  tpu__tile_layout(&to, rm, rs);
  tpu__tile_layout(&ds->shape, minor, second);
  tpu_instr *c = NULL;
  TPU_TRY(tpu_build_instr_like(b, entry, ds, TPU_OP_COPY, "copy.result", &to, &ds, 1, &c));
  tpu_build_set_root(entry, c);
  return tpu_build_finish(b, entry);
}
