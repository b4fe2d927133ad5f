/* Space-to-batch for small-batch convolutions (part of the simplify pass), as the XLA TPU
 * compiler rewrites them (XLA's SpaceToBatchConverter, ConvolutionVisitor).
 *
 * A convolution whose batch is smaller than the 8 sublanes leaves most of the MXU's rows
 * idle. The compiler splits the last spatial dimension of the input (W for NHWC and NCHW,
 * L for a 1-D convolution) into 8 pieces, each with the halo the window needs from the next
 * piece, and folds the pieces into the batch: the convolution then runs with batch 8B on
 * pieces of ceil(W_out / 8) outputs, and its result is unfolded and sliced back. Its
 * compiled programs show the kernels this costs: a pad, the split with its halo (copies and
 * slices in VMEM), the convolution with batch 8B, and copies back (bench/fidelity/families,
 * e.g. conv_nhwc_oihw_nhwc_b2_14_c128to64_k3: a bf16[14,16,2,64] convolution and six
 * kernels around it on every generation).
 *
 * The rule, read from XLA's converter and checked against the compiler's programs (49 of 49
 * convolutions in bench/fidelity/families, and libtpu probes of batch 4..16): a
 * convolution is split when
 *   - its batch is at most 7 (libtpu probes: batch 4, 5, 6, 7 are split on v5e, 7 on v4, v5p
 *     and v6e too, 8 and 16 are not) and batch_group_count is 1;
 *   - it has no feature groups, or one group per input feature (depthwise); a grouped
 *     convolution keeps its batch (8 of 8 in the corpus; the compiler rewrites groups first);
 *   - along the split dimension: a base (lhs) dilation only as s2b_dilated says (a
 *     transposed convolution), no negative padding, window dilation only where the
 *     kernel is smaller than the output, and the padded input size
 *     in + lo + hi >= 16 (2 x 8 pieces: "a very primitive cost model to thwart
 *     propagations on tiny shapes"), with the halo, the dilated kernel less one, at most
 *     ceil((in + lo + hi) / 8).
 * Each piece spans S = ceil(W_out / 8) x stride input positions, grown by the stride until
 * 8 S covers the padded input (XLA's rule; a probe of W = 64 padded to 66 gives pieces of 9).
 *
 * Values are unchanged: every output sums the same products in the same order (the padding
 * the convolution had is now explicit zeros at the same taps; a reduce carried into the split
 * form sums its elements in another order). The split form is carried on through elementwise
 * ops, 1x1 convolutions and reduces over the batch and spatial dimensions before it is
 * unfolded (carry, below), as the compiler's converter does; the compiler also carries it
 * into the next split convolution, where tpusim unfolds and splits again
 * (bench/fidelity/probes/data/s2b_carry.jsonl cc_*: +38..+46 % on v5e). */
#include <stdio.h>
#include <string.h>

#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

#define S2B_SPLITS 8    /* pieces; the compiler's number_of_splits, the sublanes */
#define S2B_MAX_BATCH 7 /* the largest batch split (probed: 7 is, 8 is not) */

typedef struct {
  tpu_builder *b;
  tpu_comp *c;
  const tpu_instr *like;
} s2b_ctx;

static tpu_status mk(s2b_ctx *x, tpu_opcode op, const char *hint, tpu_dtype t, int rank, const int64_t *dims,
                     tpu_instr *const *ops, int n, tpu_instr **out) {
  tpu_shape s = tpu_build_shape(t, rank, dims);
  return tpu_build_instr_like(x->b, x->c, x->like, op, hint, &s, ops, n, out);
}

/* Slice of v along dimension d, [lo:hi), whole elsewhere. */
static tpu_status slice_dim(s2b_ctx *x, tpu_instr *v, int d, int64_t lo, int64_t hi, tpu_instr **out) {
  const tpu_shape *s = &v->shape;
  int64_t dims[TPU_MAX_RANK];
  char buf[TPU_MAX_RANK * 48];
  size_t a = (size_t)snprintf(buf, sizeof buf, "{");
  for (int i = 0; i < s->rank; i++) {
    dims[i] = i == d ? hi - lo : s->dims[i];
    if (a < sizeof buf)
      a += (size_t)snprintf(buf + a, sizeof buf - a, "%s[%lld:%lld]", i ? ", " : "", (long long)(i == d ? lo : 0),
                            (long long)(i == d ? hi : s->dims[i]));
  }
  if (a < sizeof buf) snprintf(buf + a, sizeof buf - a, "}");
  TPU_TRY(mk(x, TPU_OP_SLICE, "s2b.slice", s->dtype, s->rank, dims, &v, 1, out));
  return tpu_build_set_attr(x->b, *out, "slice", buf);
}

/* v with dimension d (of size n x m) viewed as two dimensions [n, m]. */
static tpu_status split_dim(s2b_ctx *x, tpu_instr *v, int d, int64_t n, int64_t m, tpu_instr **out) {
  int64_t dims[TPU_MAX_RANK];
  int r = v->shape.rank, k = 0;
  for (int i = 0; i < r; i++) {
    if (i == d) {
      dims[k++] = n;
      dims[k++] = m;
    } else
      dims[k++] = v->shape.dims[i];
  }
  return mk(x, TPU_OP_RESHAPE, "s2b.split", v->shape.dtype, r + 1, dims, &v, 1, out);
}

/* v with dimensions d and d+1 merged into one. */
static tpu_status merge_dims(s2b_ctx *x, tpu_instr *v, int d, tpu_instr **out) {
  int64_t dims[TPU_MAX_RANK];
  int r = v->shape.rank, k = 0;
  for (int i = 0; i < r; i++) {
    if (i == d + 1) continue;
    dims[k++] = i == d ? v->shape.dims[d] * v->shape.dims[d + 1] : v->shape.dims[i];
  }
  return mk(x, TPU_OP_RESHAPE, "s2b.merge", v->shape.dtype, r - 1, dims, &v, 1, out);
}

/* v with dimension `from` moved to position `to` (positions of the result). */
static tpu_status move_dim(s2b_ctx *x, tpu_instr *v, int from, int to, tpu_instr **out) {
  int r = v->shape.rank;
  if (from == to) {
    *out = v;
    return TPU_OK;
  }
  int64_t perm[TPU_MAX_RANK], dims[TPU_MAX_RANK];
  int k = 0;
  for (int i = 0; i < r; i++)
    if (i != from) perm[k++] = i;
  for (int i = r - 1; i > to; i--) perm[i] = perm[i - 1];
  perm[to] = from;
  for (int i = 0; i < r; i++) dims[i] = v->shape.dims[perm[i]];
  char buf[TPU_MAX_RANK * 24];
  TPU_TRY(mk(x, TPU_OP_TRANSPOSE, "s2b.transpose", v->shape.dtype, r, dims, &v, 1, out));
  return tpu_build_set_attr(x->b, *out, "dimensions", tpu_dims_text(buf, sizeof buf, perm, r));
}

static const char *window_text(char *buf, size_t n, const tpu_window_dim *w, int k) {
  static const char *const keys[] = {"size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal"};
  size_t a = (size_t)snprintf(buf, n, "{");
  for (int f = 0; f < 6 && a < n; f++) {
    a += (size_t)snprintf(buf + a, n - a, "%s%s=", f ? " " : "", keys[f]);
    for (int i = 0; i < k && a < n; i++) {
      const tpu_window_dim *d = &w[i];
      const char *sep = i ? "x" : "";
      if (f == 0) a += (size_t)snprintf(buf + a, n - a, "%s%lld", sep, (long long)d->size);
      if (f == 1) a += (size_t)snprintf(buf + a, n - a, "%s%lld", sep, (long long)d->stride);
      if (f == 2) a += (size_t)snprintf(buf + a, n - a, "%s%lld_%lld", sep, (long long)d->pad_lo, (long long)d->pad_hi);
      if (f == 3) a += (size_t)snprintf(buf + a, n - a, "%s%lld", sep, (long long)d->base_dilation);
      if (f == 4) a += (size_t)snprintf(buf + a, n - a, "%s%lld", sep, (long long)d->window_dilation);
      if (f == 5) a += (size_t)snprintf(buf + a, n - a, "%s%d", sep, d->reversal ? 1 : 0);
    }
  }
  if (a < n) snprintf(buf + a, n - a, "}");
  return buf;
}

/* How a split convolution is cut: pieces of S input positions (of the input padded low by
 * lo_in zeros), each with `halo` more from the next piece, the convolution on a piece padded
 * win_lo / win_hi along W and giving `out` outputs. */
typedef struct {
  int64_t S, halo, lo_in, win_lo, win_hi, out;
} s2b_plan;

/* An input-dilated (transposed) convolution along W, XLA's rule (ConvolutionVisitor's
 * IsConvSuitableForSpaceToBatch and GetConvolutionDetails): unit stride, a low padding of
 * the dilation d or one less (or none for a one-tap window); the padded size counts the
 * input and the high padding (the low one is taps into the dilation), at least 16, and 24
 * where the low padding is d ("a cost model to escape slowing down ssd batch 4"); a halo of
 * K / d inputs (K - 1 where the padding is d - 1) no wider than a piece. A low padding of d
 * is one zero input before the pieces, which then need no padding; d - 1 stays the
 * window's. Each piece gives S d outputs; S is ceil(ceil(W_out / 8) / d), grown until 8 S
 * covers the padded size (tconv_b1_28x28_c128to32_k4s2_same: pieces of 4 inputs and 2
 * of halo, 8 outputs, on every generation). */
static int s2b_dilated(const tpu_window_dim *w, int64_t keff, int64_t win, int64_t out, s2b_plan *p) {
  int64_t d = w->base_dilation, lo = w->pad_lo;
  if (w->stride != 1 || w->pad_hi < 0) return 0;
  if (lo == 0 ? keff != 1 : lo != d - 1 && lo != d) return 0;
  int64_t spatial = win + w->pad_hi, xla_halo = (lo == d ? keff : keff - 1) / d;
  if (spatial < 2 * S2B_SPLITS || xla_halo > (spatial + S2B_SPLITS - 1) / S2B_SPLITS) return 0;
  if (lo == d && spatial < 3 * S2B_SPLITS) return 0;
  p->lo_in = lo == d;
  p->win_lo = lo == d ? 0 : lo;
  /* the inputs a piece's last output reaches past the piece (at least XLA's halo) */
  int64_t need = (keff - 2 - p->win_lo + d) / d;
  p->halo = need > xla_halo ? need : xla_halo;
  int64_t per = (out + S2B_SPLITS - 1) / S2B_SPLITS, s = (per + d - 1) / d;
  while (s * S2B_SPLITS < spatial) s++;
  if (p->halo > s) return 0;
  p->S = s;
  p->out = s * d;
  /* the window's high padding that makes a piece of S + halo inputs give S d outputs */
  p->win_hi = p->out - ((s + p->halo - 1) * d + 1) - p->win_lo + keff - 1;
  return p->win_hi >= 0;
}

/* Is cv split (the header's rule)? Fills *p. */
static int s2b_piece(const tpu_instr *cv, s2b_plan *p) {
  if (cv->op != TPU_OP_CONVOLUTION || !cv->has_conv_dims || cv->noperands != 2 || cv->shape.dtype == TPU_TUPLE)
    return 0;
  const tpu_conv_dims *cd = cv->conv;
  const tpu_shape *in = &cv->operands[0]->shape, *k = &cv->operands[1]->shape;
  int ws = cd->nspatial - 1;
  if (ws < 0 || cv->nwindow != cd->nspatial || cv->batch_group_count != 1) return 0;
  if (cv->feature_group_count != 1 && cv->feature_group_count != in->dims[cd->in_feature]) return 0;
  int64_t batch = in->dims[cd->in_batch];
  if (batch < 1 || batch > S2B_MAX_BATCH) return 0;
  const tpu_window_dim *w = &cv->window[ws];
  int64_t ksz = k->dims[cd->k_spatial[ws]], out = cv->shape.dims[cd->out_spatial[ws]];
  if (w->base_dilation < 1 || w->pad_lo < 0 || w->pad_hi < 0 || w->stride < 1 || out < 1) return 0;
  if (w->window_dilation != 1 && !(ksz < out)) return 0;
  int64_t keff = (ksz - 1) * w->window_dilation + 1, halo = keff - 1;
  if (w->base_dilation != 1) return s2b_dilated(w, keff, in->dims[cd->in_spatial[ws]], out, p);
  int64_t spatial = in->dims[cd->in_spatial[ws]] + w->pad_lo + w->pad_hi;
  if (spatial < 2 * S2B_SPLITS || halo > (spatial + S2B_SPLITS - 1) / S2B_SPLITS) return 0;
  int64_t s = (out + S2B_SPLITS - 1) / S2B_SPLITS * w->stride;
  while (s * S2B_SPLITS < spatial) s += w->stride;
  *p = (s2b_plan){s, halo, w->pad_lo, 0, 0, s / w->stride};
  return 1;
}

/* The split form carried forward, as XLA's SpaceToBatchConverter propagates it: a value of
 * the split convolution's result shape is kept split ([.., 8B, .., S', ..]) through
 *   - elementwise ops whose other operands are split values or broadcasts of a scalar or of a
 *     vector along the features (a batch norm's shift and scale, a ReLU's zero),
 *   - 1x1 convolutions of unit stride without padding (a bottleneck's projection), and
 *   - into reduces over every dimension but the features (a batch norm's statistics), which
 *     read it through a mask of the positions past W (the compiler's pred[8B, S'] constant);
 * and relaid back ("unfolded") where another op reads it. libtpu probes off the corpus
 * (bench/fidelity/probes/s2b_carry.py, data/s2b_carry.jsonl): a batch-4 3x3 convolution, batch
 * norm, ReLU and 1x1 convolution to 1024 features run split, and the copy back moves the
 * 1024-feature result (v5e 80,824 + 14,130 + 20,492 cycles), not the 256-feature one. */
typedef struct {
  int ob, od, of;               /* batch, split (W) and feature dims, the same split or not */
  int64_t batch, wout, piece_out;
  const tpu_instr *conv;        /* the split convolution (metadata of the mask) */
  tpu_instr *mask;              /* pred[8B, S']: a position within W */
  tpu_instr *from[256], *to[256]; /* values carried: unsplit -> split */
  int n;
} s2b_carry;

static tpu_instr *carried(const s2b_carry *k, const tpu_instr *v) {
  for (int i = 0; i < k->n; i++)
    if (k->from[i] == v) return k->to[i];
  return NULL;
}

/* The split value v unfolded: [.., 8B, .., S', ..] -> [.., B, 8, .., S', ..] ->
 * [.., B, .., 8, S', ..] -> [.., B, .., W, ..]. */
static tpu_status unfold(s2b_ctx *x, const s2b_carry *k, tpu_instr *v, tpu_instr **out) {
  tpu_instr *osplit, *omoved, *omerged;
  int ob = k->ob, od = k->od;
  char buf[64];
  TPU_TRY(split_dim(x, v, ob, k->batch, S2B_SPLITS, &osplit));
  int wpos = od < ob ? od : od + 1; /* W in the split result */
  int oto = wpos < ob + 1 ? wpos : wpos - 1;
  TPU_TRY(move_dim(x, osplit, ob + 1, oto, &omoved));
  TPU_TRY(merge_dims(x, omoved, oto, &omerged));
  *out = omerged;
  if (S2B_SPLITS * k->piece_out != k->wout) {
    TPU_TRY(tpu_build_set_attr(x->b, omerged, "s2b_kernel", "unfold"));
    TPU_TRY(slice_dim(x, omerged, od, 0, k->wout, out));
    /* the result's batch, split (W) and feature dimensions, for the relayout of a program
     * result (relayout.c s2b_result_relaid) */
    snprintf(buf, sizeof buf, "%d,%d,%d", ob, od, k->of);
    TPU_TRY(tpu_build_set_attr(x->b, *out, "s2b_result", buf));
  }
  return TPU_OK;
}

static int is_elementwise(const tpu_instr *u) {
  tpu_op_class cl = tpu_op_class_of(u->op);
  return cl == TPU_CLS_UNARY || cl == TPU_CLS_BINARY || cl == TPU_CLS_TERNARY || u->op == TPU_OP_CONVERT ||
         u->op == TPU_OP_SELECT;
}

static int same_dims(const tpu_shape *a, const tpu_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

/* A broadcast of a scalar, or of a vector along the features. */
static int feature_broadcast(const s2b_carry *k, const tpu_instr *o) {
  if (o->op != TPU_OP_BROADCAST || o->noperands != 1) return 0;
  int r = o->operands[0]->shape.rank;
  return r == 0 || (r == 1 && o->dimensions.n == 1 && o->dimensions.v[0] == k->of);
}

/* A 1x1 convolution of unit stride and no padding that reads `from` in the split
 * convolution's dimension order. */
static int pointwise_conv(const s2b_carry *k, const tpu_instr *u, const tpu_instr *from) {
  if (u->op != TPU_OP_CONVOLUTION || !u->has_conv_dims || u->noperands != 2 || u->operands[0] != from ||
      u->shape.dtype == TPU_TUPLE || u->feature_group_count != 1 || u->batch_group_count != 1)
    return 0;
  const tpu_conv_dims *cd = u->conv;
  if (cd->in_batch != k->ob || cd->out_batch != k->ob || cd->in_feature != k->of || cd->out_feature != k->of ||
      cd->nspatial != u->nwindow)
    return 0;
  const tpu_shape *ks = &u->operands[1]->shape;
  for (int i = 0; i < cd->nspatial; i++) {
    const tpu_window_dim *w = &u->window[i];
    if (cd->in_spatial[i] != cd->out_spatial[i] || ks->dims[cd->k_spatial[i]] != 1 || w->stride != 1 ||
        w->pad_lo || w->pad_hi || w->base_dilation != 1 || w->window_dilation != 1 || w->reversal)
      return 0;
  }
  return 1;
}

/* A reduce of `from` over every dimension but the features. */
static int spatial_reduce(const s2b_carry *k, const tpu_instr *u, const tpu_instr *from) {
  if (u->op != TPU_OP_REDUCE || u->noperands != 2 || u->operands[0] != from || u->operands[1]->shape.rank != 0 ||
      u->shape.dtype == TPU_TUPLE || u->dimensions.n != from->shape.rank - 1)
    return 0;
  for (int i = 0; i < u->dimensions.n; i++)
    if (u->dimensions.v[i] == k->of) return 0;
  return 1;
}

static tpu_status shaped_like(s2b_ctx *x, const tpu_instr *src, tpu_instr *const *ops, const tpu_shape *dims_of,
                              int64_t feature, int of, tpu_instr **out) {
  int64_t dims[TPU_MAX_RANK];
  for (int i = 0; i < dims_of->rank; i++) dims[i] = dims_of->dims[i];
  if (of >= 0) dims[of] = feature;
  TPU_TRY(tpu_build_clone_instr(x->b, x->c, src, ops, out));
  (*out)->shape = tpu_build_shape(src->shape.dtype, dims_of->rank, dims);
  return TPU_OK;
}

/* The mask of positions within W, broadcast to the split shape of v. */
static tpu_status mask_for(s2b_ctx *x, s2b_carry *k, const tpu_instr *v, tpu_instr **out) {
  char buf[64];
  if (!k->mask) {
    int64_t md[2] = {k->batch * S2B_SPLITS, k->piece_out};
    tpu_tensor t;
    TPU_TRY(tpu_tensor_alloc(&t, TPU_PRED, 2, md, x->b->d));
    uint8_t *m = t.data;
    for (int64_t pb = 0; pb < md[0]; pb++)
      for (int64_t j = 0; j < md[1]; j++) m[pb * md[1] + j] = (pb % S2B_SPLITS) * md[1] + j < k->wout;
    TPU_TRY(tpu_build_constant(x->b, x->c, "s2b.mask", &t, NULL, &k->mask));
  }
  TPU_TRY(mk(x, TPU_OP_BROADCAST, "s2b.mask", TPU_PRED, v->shape.rank, v->shape.dims, &k->mask, 1, out));
  snprintf(buf, sizeof buf, "{%d,%d}", k->ob, k->od);
  return tpu_build_set_attr(x->b, *out, "dimensions", buf);
}

/* Does an elementwise user u of a split value lead, through elementwise ops, to a 1x1
 * convolution or a reduce the split form is carried into? Only then is u carried (a group
 * norm's statistics, per batch, are not: unet_fwd_b2_64x64x128's compiled program unfolds
 * the bf16 result, not its f32 convert). */
static int leads_to_split_use(const s2b_ctx *x, const s2b_carry *k, const tpu_instr *u, int depth) {
  if (depth > 24) return 0;
  for (int i = 0; i < x->c->ninstrs; i++) {
    const tpu_instr *w = x->c->instrs[i];
    for (int j = 0; j < w->noperands; j++) {
      if (w->operands[j] != u) continue;
      if (pointwise_conv(k, w, u) || spatial_reduce(k, w, u)) return 1;
      if (is_elementwise(w) && same_dims(&w->shape, &u->shape) && leads_to_split_use(x, k, w, depth + 1)) return 1;
      break;
    }
  }
  return 0;
}

/* Carries split value v (the split form of `from`) into from's users, then unfolds it for
 * the users that remain. */
static tpu_status carry(s2b_ctx *x, s2b_carry *k, tpu_instr *from, tpu_instr *v) {
  if (k->n < (int)(sizeof k->from / sizeof k->from[0])) {
    k->from[k->n] = from;
    k->to[k->n++] = v;
  }
  tpu_instr *users[64];
  int nu = 0;
  for (int i = 0; i < x->c->ninstrs && nu < 64; i++) {
    tpu_instr *u = x->c->instrs[i];
    for (int j = 0; j < u->noperands; j++)
      if (u->operands[j] == from) {
        users[nu++] = u;
        break;
      }
  }
  int ordered = k->ob < k->od, left = from->is_root || nu == 64;
  for (int ui = 0; ui < nu; ui++) {
    tpu_instr *u = users[ui], *ops[TPU_MAX_RANK + 4], *nu_;
    if (carried(k, u)) continue;
    left++;
    if (!ordered || u->noperands > TPU_MAX_RANK + 4) continue;
    x->like = u;
    if (is_elementwise(u) && same_dims(&u->shape, &from->shape)) {
      int ok = tpu_dtype_size(u->shape.dtype) <= tpu_dtype_size(from->shape.dtype) || leads_to_split_use(x, k, u, 0);
      for (int j = 0; j < u->noperands && ok; j++) {
        tpu_instr *o = u->operands[j], *s = carried(k, o);
        if (s) ops[j] = s;
        else if (feature_broadcast(k, o)) {
          tpu_instr *bo = o->operands[0];
          TPU_TRY(shaped_like(x, o, &bo, &v->shape, v->shape.dims[k->of], -1, &ops[j]));
        } else ok = 0;
      }
      if (!ok) continue;
      TPU_TRY(shaped_like(x, u, ops, &v->shape, v->shape.dims[k->of], -1, &nu_));
      TPU_TRY(carry(x, k, u, nu_));
      left--;
    } else if (pointwise_conv(k, u, from)) {
      ops[0] = v;
      ops[1] = u->operands[1];
      TPU_TRY(shaped_like(x, u, ops, &v->shape, u->shape.dims[k->of], k->of, &nu_));
      TPU_TRY(carry(x, k, u, nu_));
      left--;
    } else if (spatial_reduce(k, u, from)) {
      tpu_instr *m, *init, *sel, *sops[3];
      TPU_TRY(mask_for(x, k, v, &m));
      TPU_TRY(mk(x, TPU_OP_BROADCAST, "s2b.init", v->shape.dtype, v->shape.rank, v->shape.dims, &u->operands[1], 1,
                 &init));
      TPU_TRY(tpu_build_set_attr(x->b, init, "dimensions", "{}"));
      sops[0] = m;
      sops[1] = v;
      sops[2] = init;
      TPU_TRY(mk(x, TPU_OP_SELECT, "s2b.masked", v->shape.dtype, v->shape.rank, v->shape.dims, sops, 3, &sel));
      ops[0] = sel;
      ops[1] = u->operands[1];
      TPU_TRY(tpu_build_clone_instr(x->b, x->c, u, ops, &nu_));
      tpu_build_replace_uses(x->c, u, nu_);
      left--;
    }
  }
  if (!left) return TPU_OK; /* every user reads the split form (`from` is dead) */
  /* a split value written by a kernel of its own, which the unfold reads (the compiler's
   * fusion.4, then copy.6, in resnet_bottleneck_fwd_b4_14x14x1024_g1) */
  if (v->op != TPU_OP_CONVOLUTION) TPU_TRY(tpu_build_set_attr(x->b, v, "s2b_carried", "1"));
  tpu_instr *res;
  x->like = from;
  TPU_TRY(unfold(x, k, v, &res));
  tpu_build_replace_uses(x->c, from, res);
  return TPU_OK;
}

static tpu_status rewrite_one(tpu_builder *b, tpu_comp *c, tpu_instr *cv, const s2b_plan *p) {
  s2b_ctx x = {b, c, cv};
  const tpu_conv_dims *cd = cv->conv;
  tpu_instr *act = cv->operands[0];
  const tpu_shape *in = &act->shape;
  int r = in->rank, ws = cd->nspatial - 1;
  int wd = (int)cd->in_spatial[ws], bd = (int)cd->in_batch, od = (int)cd->out_spatial[ws], ob = (int)cd->out_batch;
  int64_t win = in->dims[wd], S = p->S, halo = p->halo, lo = p->lo_in;
  int64_t wout = cv->shape.dims[od], piece_out = p->out, total = (halo > 0 ? S2B_SPLITS + 1 : S2B_SPLITS) * S;
  char buf[TPU_MAX_RANK * 96];
  /* the input padded along W: the convolution's low padding, zeros up to `total` */
  tpu_tensor z;
  tpu_instr *zero, *pad, *pieces, *ops[2];
  TPU_TRY(tpu_tensor_alloc(&z, in->dtype, 0, NULL, b->d));
  TPU_TRY(tpu_build_constant(b, c, "s2b.zero", &z, NULL, &zero));
  int64_t dims[TPU_MAX_RANK];
  size_t a = 0;
  buf[0] = 0;
  for (int i = 0; i < r; i++) {
    dims[i] = i == wd ? total : in->dims[i];
    a += (size_t)snprintf(buf + a, sizeof buf - a, "%s%lld_%lld", i ? "x" : "", (long long)(i == wd ? lo : 0),
                          (long long)(i == wd ? total - win - lo : 0));
  }
  ops[0] = act;
  ops[1] = zero;
  TPU_TRY(mk(&x, TPU_OP_PAD, "s2b.pad", in->dtype, r, dims, ops, 2, &pad));
  TPU_TRY(tpu_build_set_attr(b, pad, "padding", buf));
  /* The pieces come from a pad kernel of its own where they need zeros (the convolution's
   * low padding, or an input shorter than 8 S); else straight from the input, and the zeros
   * past it, the last piece's halo, are written by the halo's kernel
   * (sconv_b4_32x32_c64to96_k4s4_same: no pad kernel in the compiler's program). */
  int pad_kernel = lo > 0 || win + lo < S2B_SPLITS * S;
  tpu_instr *body = pad_kernel ? pad : act;
  if (pad_kernel) TPU_TRY(tpu_build_set_attr(b, pad, "s2b_kernel", "pad"));
  /* the compiler pads to the 8 pieces, 8 S, the last piece's halo past the padded input
   * written as zeros in the join (sconv_b4_32x32_c256to32_k3s2_same: bf16[32,4,48,256],
   * pieces of 6): its pad's extent, for the pad's windows (copy_kind.c tpu__pad_window_tiles) */
  if (pad_kernel) {
    snprintf(buf, sizeof buf, "%d,%lld", wd, (long long)(S2B_SPLITS * S));
    TPU_TRY(tpu_build_set_attr(b, pad, "s2b_span", buf));
  }
  /* with a halo the compiler pads the input in its own layout and cuts the pieces from it by
   * a copy and a slice; without, it copies the input row-major first (tile.c relayout_tiles) */
  if (pad_kernel && halo > 0) TPU_TRY(tpu_build_set_attr(b, pad, "s2b_halo", "1"));
  if (body->shape.dims[wd] != S2B_SPLITS * S) TPU_TRY(slice_dim(&x, body, wd, 0, S2B_SPLITS * S, &body));
  TPU_TRY(split_dim(&x, body, wd, S2B_SPLITS, S, &pieces));
  if (halo > 0) { /* and the halo: the next piece's first `halo` positions */
    tpu_instr *next, *nsplit, *nhalo;
    TPU_TRY(slice_dim(&x, pad, wd, S, total, &next));
    TPU_TRY(split_dim(&x, next, wd, S2B_SPLITS, S, &nsplit));
    TPU_TRY(slice_dim(&x, nsplit, wd + 1, 0, halo, &nhalo));
    /* (a whole-piece halo's slice goes away: the next pieces' slice is the kernel) */
    TPU_TRY(tpu_build_set_attr(b, halo < S ? nhalo : next, "s2b_kernel", "halo"));
    for (int i = 0; i <= r; i++) dims[i] = pieces->shape.dims[i];
    dims[wd + 1] = S + halo;
    ops[0] = pieces;
    ops[1] = nhalo;
    TPU_TRY(mk(&x, TPU_OP_CONCATENATE, "s2b.halo", in->dtype, r + 1, dims, ops, 2, &pieces));
    int64_t cat = wd + 1;
    TPU_TRY(tpu_build_set_attr(b, pieces, "dimensions", tpu_dims_text(buf, sizeof buf, &cat, 1)));
  }
  /* the pieces into the batch, batch-major: [.., B, 8, ..] -> [.., 8B, ..] */
  int bpos = bd < wd ? bd : bd + 1; /* the batch in the split shape */
  int to = bpos < wd ? bpos + 1 : bpos;
  tpu_instr *moved, *act2;
  TPU_TRY(move_dim(&x, pieces, wd, to, &moved));
  TPU_TRY(merge_dims(&x, moved, to - 1, &act2));
  /* the convolution on pieces: no padding along W, S / stride outputs each */
  tpu_instr *kops[2] = {act2, cv->operands[1]}, *nc;
  TPU_TRY(tpu_build_clone_instr(b, c, cv, kops, &nc));
  for (int i = 0; i < r; i++) dims[i] = cv->shape.dims[i];
  dims[ob] *= S2B_SPLITS;
  dims[od] = piece_out;
  nc->shape = tpu_build_shape(cv->shape.dtype, r, dims);
  tpu_window_dim nw[TPU_MAX_RANK];
  for (int i = 0; i < cv->nwindow; i++) nw[i] = cv->window[i];
  nw[ws].pad_lo = p->win_lo;
  nw[ws].pad_hi = p->win_hi;
  TPU_TRY(tpu_build_set_attr(b, nc, "window", window_text(buf, sizeof buf, nw, cv->nwindow)));
  /* and back, after the ops the split form is carried through */
  s2b_carry k = {ob, od, (int)cd->out_feature, cv->shape.dims[ob], wout, piece_out, cv, NULL, {0}, {0}, 0};
  return carry(&x, &k, cv, nc);
}

tpu_status tpu__space_to_batch(tpu_builder *b, tpu_module *m, int *changed) {
  /* a program that holds fusions was compiled already (the TPU compiler made its choice) */
  for (int ci = 0; ci < m->ncomps; ci++)
    for (int i = 0; i < m->comps[ci]->ninstrs; i++)
      if (m->comps[ci]->instrs[i]->op == TPU_OP_FUSION) return TPU_OK;
  for (int ci = 0; ci < m->ncomps; ci++) {
    tpu_comp *c = m->comps[ci];
    int any = 0, n = c->ninstrs;
    for (int i = 0; i < n; i++) {
      tpu_instr *in = c->instrs[i];
      s2b_plan plan;
      if (!s2b_piece(in, &plan)) continue;
      TPU_TRY(rewrite_one(b, c, in, &plan));
      any = 1;
    }
    if (any) {
      TPU_TRY(tpu_build_finish(b, c));
      if (tpu_build_remove_dead(b, c) < 0) return b->d->status;
      *changed = 1;
    }
  }
  return TPU_OK;
}
