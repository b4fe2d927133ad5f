/* Grouped convolutions in the group-split layout (part of the fuse pass, before the
 * program-edge relayouts of relayout.c).
 *
 * The XLA TPU compiler runs a convolution of G feature groups, each of more than one input
 * feature, as a convolution over [B, spatial..., G, Cg]: the features split into the groups
 * and the group made the innermost spatial dimension (its window G wide over the group
 * dimension dilated G times, so each group meets only its own filter). That convolution
 * writes its result in its own layout, the batch in the sublanes and the group's Cog =
 * C_out / G output features in the lanes, spatial dimensions and then G major
 * ({4,0,3,2,1} for [B,H,W,G,Cog]); with fewer features than the lanes and a larger batch
 * (tile.c), the batch in the lanes and the features in the sublanes ({0,4,3,2,1}). Unless
 * Cog fills whole lanes and the batch one sublane tile — then those tiles are the merged
 * [B,H,W,G*Cog] tiles in order — a `copy` merges the groups back into the features, a kernel
 * of its own, wherever the result goes (bench/fidelity/families/compiled, every generation:
 * gconv_b8_56x56_c256to512_g32_k1_f32's f32[8,56,56,32,16]{4,0,3,2,1} copied into
 * {2,4,3,1,0}, 1,412,992 cycles on v4 beside the convolution's 1,451,084; inside
 * resnext_fwd_b4_7x7x2048_g32, f32[4,7,7,32,32] {4,0,3,2,1} -> {4,3,0,2,1}, 23,542 cycles
 * on v4, between the grouped convolution and the next; gconv_b8_28x28_c16to16_g4_k3_f32's
 * [8,28,28,4,4]{0,4,3,2,1}; no copy for gconv_b4_7x7_c2048to4096_g32_k1_bf16, Cog = 128,
 * batch 4, whose kernel writes bf16[4,7,7,4096]{3,0,2,1} itself).
 *
 * tpusim's arrays are row-major, so the layouts are made explicit: the convolution's kernel
 * returns its result split and transposed to [spatial..., G, B, Cog] (or [..., G, Cog, B]),
 * and a kLoop kernel `copy.group` transposes it back and merges the groups. Values are
 * unchanged. Depthwise convolutions (one input feature per group) are not split so (their
 * own emitter, tile_conv.c). */
#include <string.h>

#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"

/* The convolution the fused computation's root computes through elementwise ops of its
 * shape (relayout.c's rule), or NULL. */
static const tpu_instr *root_conv(const tpu_instr *root) {
  const tpu_instr *x = root;
  for (int depth = 0; depth < 64; depth++) {
    if (x->op == TPU_OP_CONVOLUTION) return x->has_conv_dims ? x : NULL;
    tpu_op_class k = tpu_op_class_of(x->op);
    if (k != TPU_CLS_UNARY && k != TPU_CLS_BINARY && k != TPU_CLS_TERNARY && x->op != TPU_OP_CONVERT) return NULL;
    const tpu_instr *next = NULL;
    for (int i = 0; i < x->noperands && !next; i++) {
      const tpu_instr *o = x->operands[i];
      if (o->op == TPU_OP_PARAMETER || o->op == TPU_OP_BROADCAST || o->op == TPU_OP_CONSTANT) continue;
      if (o->shape.rank == root->shape.rank &&
          !memcmp(o->shape.dims, root->shape.dims, sizeof o->shape.dims[0] * (size_t)o->shape.rank))
        next = o;
    }
    if (!next) return NULL;
    x = next;
  }
  return NULL;
}

int tpu__group_split(const tpu_chip *chip, const tpu_instr *cv, int *few) {
  *few = 0;
  if (cv->op != TPU_OP_CONVOLUTION || !cv->has_conv_dims || cv->noperands != 2 || cv->batch_group_count > 1 ||
      cv->feature_group_count <= 1 || cv->shape.rank + 1 > TPU_MAX_RANK)
    return 0;
  const tpu_conv_dims *cd = &cv->conv;
  int64_t g = cv->feature_group_count, cin = cv->operands[0]->shape.dims[cd->in_feature];
  int64_t cout = cv->shape.dims[cd->out_feature], nb = cv->shape.dims[cd->out_batch];
  if (cin % g || cout % g || cin / g <= 1) return 0; /* depthwise: one input feature a group */
  /* a batch of one: the compiler's kernel writes [spatial..., G, Cog] row-major, which is
   * the merged [1, spatial..., G * Cog] byte for byte (libtpu probe, bf16[1,10,10,128] in 16
   * groups on v5e and v6e: one convolution_reduce_fusion, no copy; batch 2, 4, 8: a copy) */
  if (nb <= 1) return 0;
  int64_t lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128;
  int64_t sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8;
  int64_t taps = 1, cog = cout / g;
  for (int i = 0; i < cd->nspatial; i++) taps *= cv->operands[1]->shape.dims[cd->k_spatial[i]];
  *few = tpu__conv_batch_in_lanes(1, taps, cog, nb, lanes);
  return *few || cog % lanes || nb > sub;
}

static tpu_status split_one(tpu_builder *b, tpu_comp *entry, tpu_instr *f, tpu__made_set *made, const tpu_chip *chip,
                            int *done) {
  *done = 0;
  tpu_comp *fc = f->calls;
  const tpu_instr *cv = root_conv(fc->root);
  int few;
  if (!cv || f->shape.rank != cv->shape.rank || !tpu__group_split(chip, cv, &few)) return TPU_OK;
  const tpu_conv_dims *cd = &cv->conv;
  int rank = f->shape.rank, r5 = rank + 1, fd = (int)cd->out_feature, bd = (int)cd->out_batch;
  int64_t g = cv->feature_group_count;
  /* the split shape [.., G, Cog, ..] (the features' dimension fd becomes G at fd, Cog at fd + 1) */
  tpu_shape split = f->shape;
  split.layout_tail = NULL;
  split.has_layout = 0;
  split.rank = r5;
  for (int d = 0, k = 0; d < rank; d++) {
    if (d == fd) {
      split.dims[k++] = g;
      split.dims[k++] = f->shape.dims[d] / g;
    } else {
      split.dims[k++] = f->shape.dims[d];
    }
  }
  int b5 = bd < fd ? bd : bd + 1;
  /* the convolution's layout: spatial dimensions in order, G, then batch and Cog */
  int64_t perm[TPU_MAX_RANK], inv[TPU_MAX_RANK];
  int n = 0;
  for (int d = 0; d < r5; d++)
    if (d != b5 && d != fd && d != fd + 1) perm[n++] = d;
  perm[n++] = fd;
  perm[n++] = few ? fd + 1 : b5;
  perm[n++] = few ? b5 : fd + 1;
  for (int i = 0; i < r5; i++) inv[perm[i]] = i;
  tpu_shape conv_shape = split;
  for (int i = 0; i < r5; i++) conv_shape.dims[i] = split.dims[perm[i]];
  char buf[TPU_MAX_RANK * 24 + 4];
  /* inside the convolution's kernel: split, then into the convolution's layout */
  tpu_instr *old_root = fc->root, *rs, *t_in;
  TPU_TRY(tpu_build_instr(b, fc, TPU_OP_RESHAPE, "group_split", &split, &old_root, 1, old_root->loc, &rs));
  TPU_TRY(tpu_build_instr(b, fc, TPU_OP_TRANSPOSE, "group_layout", &conv_shape, &rs, 1, old_root->loc, &t_in));
  TPU_TRY(tpu_build_set_attr(b, t_in, "dimensions", tpu_dims_text(buf, sizeof buf, perm, r5)));
  tpu_build_set_root(fc, t_in);
  TPU_TRY(tpu_build_finish(b, fc));
  tpu_shape out_shape = f->shape;
  f->shape = conv_shape;
  /* the copy merging the groups back into the features: a kLoop kernel of its own */
  tpu_comp *cc;
  tpu_instr *p, *t_out, *merged, *cf;
  TPU_TRY(tpu_build_comp(b, "fused_group_merge", fc, &cc));
  TPU_TRY(tpu_build_param(b, cc, 0, "param_0", &conv_shape, &p));
  TPU_TRY(tpu_build_instr(b, cc, TPU_OP_TRANSPOSE, "group_unlayout", &split, &p, 1, f->loc, &t_out));
  TPU_TRY(tpu_build_set_attr(b, t_out, "dimensions", tpu_dims_text(buf, sizeof buf, inv, r5)));
  out_shape.layout_tail = NULL;
  TPU_TRY(tpu_build_instr(b, cc, TPU_OP_RESHAPE, "group_merge", &out_shape, &t_out, 1, f->loc, &merged));
  tpu_build_set_root(cc, merged);
  TPU_TRY(tpu_build_finish(b, cc));
  TPU_TRY(tpu_build_instr_like(b, entry, f, TPU_OP_FUSION, "copy.group", &out_shape, &f, 1, &cf));
  TPU_TRY(tpu_build_set_attr(b, cf, "kind", "kLoop"));
  TPU_TRY(tpu_build_set_attr(b, cf, "calls", cc->name));
  if (!tpu__made_add(made, cc)) return TPU_FAIL(b->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory splitting '%s'", f->name);
  tpu_build_replace_uses(entry, f, cf);
  cf->operands[0] = f; /* replace_uses rewired the copy's own operand too */
  *done = 1;
  return TPU_OK;
}

tpu_status tpu__fuse_group_layout(tpu_builder *b, tpu_comp *entry, tpu__made_set *made, const tpu_chip *chip) {
  int changed = 0, n = entry->ninstrs;
  for (int i = 0; i < n; i++) {
    tpu_instr *v = entry->instrs[i];
    if (v->op != TPU_OP_FUSION || !v->calls || !tpu__made_has(made, v->calls) || v->shape.dtype == TPU_TUPLE) continue;
    int done;
    TPU_TRY(split_one(b, entry, v, made, chip, &done));
    changed |= done;
  }
  return changed ? tpu_build_finish(b, entry) : TPU_OK;
}
