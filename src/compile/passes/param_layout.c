/* Parameters in the TPU's layout (the fuse pass's first step, tpu__fuse_param_layouts).
 *
 * An array the caller passes lives in the device layout that pads least, as JAX's arrays on
 * a TPU do, so an entry parameter of rank >= 2 takes that layout where it pads less than
 * row-major (the compiler's bf16[32,112,112,64] is {2,3,1,0}: 112 in the lanes, 1.14x,
 * where row-major pads 64 to 128; f32[4096,1000] is {0,1}). Of the parameters of the
 * compiled families corpus that some layout pads less than row-major, all 1,508 are laid
 * out so (1,076 of rank >= 3, 432 of rank 2), none row-major. A pooling reduce-window
 * runs in a layout of its own, reading a parameter tiled otherwise through a `copy` where
 * it slides along that layout's tile (window_layout.c). A parameter a
 * convolution reads takes the convolution's layout (tile.c, vmem_assign.c), or, with fewer
 * features than the lanes where another layout pads less, that layout and a copy into the
 * convolution's; one a bitcast, tuple, call or custom call reads the layout given. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"

static int row_major(const tpu_shape *s) {
  if (!s->has_layout) return 1;
  for (int i = 0; i < s->rank; i++)
    if (s->minor_to_major[i] != s->rank - 1 - i) return 0;
  return 1;
}

/* s laid out with dimension `minor` in the lanes, `second` in the sublanes, the rest major in
 * order (the compiler's {2,0,3,1} for lanes 2, sublanes 0); window_layout.c shares it. */
void tpu__tile_layout(tpu_shape *s, int minor, int second) {
  int j = 0;
  s->has_layout = 1;
  s->minor_to_major[j++] = (int8_t)minor;
  s->minor_to_major[j++] = (int8_t)second;
  for (int d = s->rank - 1; d >= 0; d--)
    if (d != minor && d != second) s->minor_to_major[j++] = (int8_t)d;
}

/* The position of dimension d in s's layout, 0 the most minor (row-major where none is given). */
static int layout_pos(const tpu_shape *s, int d) {
  if (!s->has_layout) return s->rank - 1 - d;
  for (int i = 0; i < s->rank; i++)
    if (s->minor_to_major[i] == d) return i;
  return s->rank - 1 - d;
}

static int in_dims(const tpu_i64s *v, int d) {
  for (int i = 0; i < v->n; i++)
    if (v->v[i] == d) return 1;
  return 0;
}

/* The layout a gather reads its operand in, as the XLA TPU compiler lays it out: the rows it
 * gathers whole. Every dimension the gather indexes one element of at a time (collapsed) is
 * major to every dimension it takes a slice of more than one element along, so each gathered
 * slice is a run of whole tiles. A gather of one slice is a dynamic-slice there and takes
 * the operand as it is; so does one that indexes every dimension (a gather of points). The
 * compiled families corpus: x[:, i] of f32[64,30522] row-major reads a copy laid out {0,1}
 * (31,184 cycles on v5e), x[i] of bf16[8192,64] (a parameter laid out {0,1}, 8192 in the
 * lanes) a copy laid out {1,0}; bf16[384,1000] laid out {0,1} is read as it is; x[i] of one
 * index is a dynamic-slice of the array as it is. Returns 1 and fills *want when the
 * operand's layout differs. */
static int gather_layout(const tpu_instr *g, tpu_shape *want) {
  const tpu_shape *s = &g->operands[0]->shape;
  const tpu_gather_dims *gd = g->gather;
  if (g->noperands != 2 || s->layout_tail || s->rank < 2 || gd->slice_sizes.n != s->rank) return 0;
  int64_t slices = 1; /* the output's elements outside its offset dimensions */
  for (int d = 0; d < g->shape.rank; d++)
    if (!in_dims(&gd->offset_dims, d)) slices *= g->shape.dims[d];
  if (slices <= 1) return 0;
  int bad = 0;
  for (int c = 0; c < s->rank; c++) {
    if (!in_dims(&gd->collapsed_slice_dims, c)) continue;
    for (int o = 0; o < s->rank; o++)
      if (!in_dims(&gd->collapsed_slice_dims, o) && gd->slice_sizes.v[o] > 1 && layout_pos(s, c) < layout_pos(s, o)) bad = 1;
  }
  if (!bad) return 0;
  /* the sliced dimensions minor in their present order, the collapsed ones major in theirs */
  *want = *s;
  want->has_layout = 1;
  int j = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < s->rank; i++) {
      int d = s->has_layout ? s->minor_to_major[i] : s->rank - 1 - i;
      if (in_dims(&gd->collapsed_slice_dims, d) == pass) want->minor_to_major[j++] = (int8_t)d;
    }
  return 1;
}

/* Gathers read their operand through a copy into the layout gather_layout gives (one copy per
 * operand and layout). Own compilation only: a compiled program's layouts are its own. */
static tpu_status gather_layouts(tpu_builder *b, tpu_comp *entry, int *changed) {
  int n = entry->ninstrs;
  for (int i = 0; i < n; i++) {
    tpu_instr *g = entry->instrs[i];
    tpu_shape want;
    if (g->op != TPU_OP_GATHER || !gather_layout(g, &want)) continue;
    tpu_instr *x = g->operands[0], *c = NULL;
    for (int k = n; k < entry->ninstrs && !c; k++) { /* the copies made here */
      tpu_instr *y = entry->instrs[k];
      if (y->op == TPU_OP_COPY && y->noperands == 1 && y->operands[0] == x &&
          !memcmp(y->shape.minor_to_major, want.minor_to_major, sizeof want.minor_to_major[0] * (size_t)want.rank))
        c = y;
    }
    if (!c) TPU_TRY(tpu_build_instr_like(b, entry, x, TPU_OP_COPY, "copy.gather_layout", &want, &x, 1, &c));
    g->operands[0] = c;
    *changed = 1;
  }
  return TPU_OK;
}

/* Is v one of the entry's results? */
int tpu__entry_result(const tpu_comp *entry, const tpu_instr *v) {
  const tpu_instr *root = entry->root;
  if (v == root) return 1;
  for (int i = 0; root->op == TPU_OP_TUPLE && i < root->noperands; i++)
    if (root->operands[i] == v) return 1;
  return 0;
}

/* Does v leave the program, itself or through elementwise ops of its shape (a slice
 * scaled and returned)? Its layout is then the program result's. */
static int reaches_result(const tpu_comp *entry, const tpu_uses *u, const tpu_instr *v, int depth) {
  if (tpu__entry_result(entry, v)) return 1;
  if (depth > 8 || u->nusers[v->id] == 0) return 0;
  for (int k = 0; k < u->nusers[v->id]; k++) {
    const tpu_instr *w = u->users[v->id][k];
    tpu_op_class c = tpu_op_class_of(w->op);
    if (w->shape.rank != v->shape.rank || memcmp(w->shape.dims, v->shape.dims, sizeof v->shape.dims[0] * (size_t)v->shape.rank))
      return 0;
    if ((c != TPU_CLS_UNARY && c != TPU_CLS_BINARY && c != TPU_CLS_TERNARY && w->op != TPU_OP_CONVERT) ||
        !reaches_result(entry, u, w, depth + 1))
      return 0;
  }
  return 1;
}



/* A slice, concatenate or pad reads its operand in its own result's layout (XLA's layout
 * assignment gives these ops' operands the layout of their result, dimension for
 * dimension). Where an entry parameter's tiling differs, the compiler copies it into that
 * layout first, a kernel of its own: bf16[33,33,7]{1,2,0} concatenated into
 * bf16[33,33,135]{2,1,0}, f32[195,65,7,99]{3,0,2,1} split into f32[65,65,7,99]{3,1,2,0},
 * bf16[16,7]{0,1} concatenated into bf16[16,114]{1,0} (bench/fidelity/families/compiled). */
static int reads_in_own_layout(const tpu_comp *entry, const tpu_instr *r, const tpu_instr *p) {
  if (r->op == TPU_OP_CONCATENATE) return 1;
  /* a slice that is the whole kernel (a program's result) slices in its operand's layout
   * and relays the result out (f32[64,7,16]{0,2,1} sliced by a stride of 3: a slice, then a
   * copy into f32[64,7,6]{0,1,2}); one computed on in a loop fusion reads the copy */
  if (r->op == TPU_OP_SLICE) return !tpu__entry_result(entry, r);
  return r->op == TPU_OP_PAD && r->noperands == 2 && r->operands[0] == p && r->operands[1] != p;
}

/* Does v feed an op that takes its own layout for it: a dot or convolution (the operand is
 * laid out for the matrix unit: a causal convolution's pad of bf16[16,100,768]{2,0,1} is
 * folded into the convolution, no copy), or a reshape, bitcast or transpose (the compiler
 * lays v out so the view is free: space-to-batch pads the parameter in its own layout)? */
static int feeds_relayout(const tpu_uses *u, const tpu_instr *v) {
  for (int k = 0; k < u->nusers[v->id]; k++) {
    tpu_opcode op = u->users[v->id][k]->op;
    if (op == TPU_OP_DOT || op == TPU_OP_CONVOLUTION || op == TPU_OP_RESHAPE || op == TPU_OP_BITCAST ||
        op == TPU_OP_TRANSPOSE)
      return 1;
  }
  return 0;
}

int tpu__relayout_copy(const tpu_instr *in) {
  if (in->op != TPU_OP_COPY || in->noperands != 1) return 0;
  const tpu_instr *src = in->operands[0];
  /* (or result_slice_copy's of a parameter's dynamic-slice) */
  if (src->op == TPU_OP_DYNAMIC_SLICE && src->noperands >= 1 && src->operands[0]->op == TPU_OP_PARAMETER)
    src = src->operands[0];
  if (src->op != TPU_OP_PARAMETER) return 0;
  const tpu_shape *r = &in->shape, *o = &in->operands[0]->shape;
  if (r->rank < 2 || r->rank != o->rank || r->layout_tail || o->layout_tail) return 0;
  int rs = r->has_layout ? r->minor_to_major[1] : r->rank - 2, rm = r->has_layout ? r->minor_to_major[0] : r->rank - 1;
  int os = o->has_layout ? o->minor_to_major[1] : o->rank - 2, om = o->has_layout ? o->minor_to_major[0] : o->rank - 1;
  return rs != os || rm != om;
}

/* Copies of parameter p (laid out with tile (second, minor)) into the layout of each slice,
 * concatenate or pad reading it whose result is tiled otherwise; one copy per layout. */
static tpu_status reader_copies(tpu_builder *b, tpu_comp *entry, const tpu_chip *chip, tpu_instr *p, const tpu_uses *u,
                                int second, int minor, int *changed) {
  tpu_instr *made[4] = {NULL, NULL, NULL, NULL};
  int ms[4], mm[4], nmade = 0;
  for (int k = 0; k < u->nusers[p->id]; k++) {
    tpu_instr *r = u->users[p->id][k];
    if (!reads_in_own_layout(entry, r, p) || r->shape.rank != p->shape.rank || feeds_relayout(u, r)) continue;
    int rs, rm;
    if (!reaches_result(entry, u, r, 0)) continue;
    tpu__result_tiling_shape(chip, &r->shape, &rs, &rm);
    if (rs == second && rm == minor) continue;
    tpu_instr *c = NULL;
    for (int j = 0; j < nmade && !c; j++)
      if (ms[j] == rs && mm[j] == rm) c = made[j];
    if (!c) {
      if (nmade == 4) continue;
      tpu_shape to = p->shape;
      tpu__tile_layout(&to, rm, rs);
      TPU_TRY(tpu_build_instr_like(b, entry, p, TPU_OP_COPY, "copy.relayout", &to, &p, 1, &c));
      made[nmade] = c, ms[nmade] = rs, mm[nmade] = rm, nmade++;
    }
    for (int j = 0; j < r->noperands; j++)
      if (r->operands[j] == p) r->operands[j] = c;
    *changed = 1;
  }
  return TPU_OK;
}

/* A transpose whose result leaves the program, itself or through elementwise ops of its
 * shape, is laid out as the program's result: the XLA TPU compiler chooses a result layout
 * JAX leaves to it (out_layout_modes "default") as it does a parameter's, the tiling that
 * pads least, the other dimensions major in order (transpose_128x3x3x197x8_p01432_fused_f32:
 * JAX's f32[128,3,8,197,3]{2,3,4,1,0}, 8 elements in the lanes, is {0,2,4,3,1} in the
 * compiled program), and layout assignment gives the elementwise ops between the transpose
 * and the result that layout. Whether the transpose moves the lanes (layout.c
 * tpu__moves_minor) is then decided against that layout, not JAX's. */
static void result_transpose_layouts(tpu_comp *entry, const tpu_chip *chip, const tpu_uses *u, int *changed) {
  for (int i = 0; i < entry->ninstrs; i++) {
    tpu_instr *t = entry->instrs[i];
    tpu_shape *s = &t->shape;
    if (t->op != TPU_OP_TRANSPOSE || !tpu_dtype_is_array(s->dtype) || s->rank < 2 || s->layout_tail ||
        !reaches_result(entry, u, t, 0))
      continue;
    int second, minor;
    tpu__result_tiling_shape(chip, s, &second, &minor);
    tpu_shape want = *s;
    tpu__tile_layout(&want, minor, second);
    if (s->has_layout && !memcmp(s->minor_to_major, want.minor_to_major, sizeof s->minor_to_major[0] * (size_t)s->rank))
      continue;
    *s = want;
    *changed = 1;
  }
}

/* A patch embedding's convolution: every spatial window its own stride (size = stride, no
 * dilation nor padding) and at least 8 wide, so the windows tile the image without overlap —
 * a forward convolution, not a weight gradient, however large the window against the output
 * (libtpu probes, probes/patch_relayout.py: 8 x 8 over 160 and 64, 16 x 16 over 112-256,
 * 20 x 20 over 200 alike). */
static int patch_window(const tpu_instr *r) {
  if (r->conv->nspatial <= 0 || r->nwindow < r->conv->nspatial) return 0;
  for (int w = 0; w < r->conv->nspatial; w++) {
    const tpu_window_dim *wd = &r->window[w];
    if (wd->size < 8 || wd->stride != wd->size || wd->pad_lo || wd->pad_hi || wd->window_dilation > 1 ||
        wd->base_dilation > 1)
      return 0;
  }
  return 1;
}

/* Parameter p takes the tiling (second, minor) and one copy relays it into the tiling
 * (to_second, to_minor) for every reader, which reads the copy instead; `mark`, when given,
 * an attribute the copy carries with value 1 (the back end's cue for its kernel). */
static tpu_status relayout_copy_marked(tpu_builder *b, tpu_comp *entry, tpu_instr *p, const tpu_uses *u, int minor,
                                       int second, int to_minor, int to_second, const char *mark) {
  tpu__tile_layout(&p->shape, minor, second);
  tpu_shape to = p->shape;
  tpu__tile_layout(&to, to_minor, to_second);
  tpu_instr *c = NULL;
  TPU_TRY(tpu_build_instr_like(b, entry, p, TPU_OP_COPY, "copy.relayout", &to, &p, 1, &c));
  if (mark) TPU_TRY(tpu_build_set_attr(b, c, mark, "1"));
  for (int k = 0; k < u->nusers[p->id]; k++) {
    tpu_instr *r = u->users[p->id][k];
    for (int j = 0; j < r->noperands; j++)
      if (r->operands[j] == p) r->operands[j] = c;
  }
  return TPU_OK;
}

static tpu_status relayout_copy(tpu_builder *b, tpu_comp *entry, tpu_instr *p, const tpu_uses *u, int minor, int second,
                                int to_minor, int to_second) {
  return relayout_copy_marked(b, entry, p, u, minor, second, to_minor, to_second, NULL);
}

/* TPUSIM_NO_SWAPPED_LEAST=1 leaves a parameter that a convolution and its weight gradient read
 * as given where neither reading fills the lanes (the rule's check). */
static int swapped_least_off(void) {
  return tpu_env_flag("TPUSIM_NO_SWAPPED_LEAST");
}

tpu_status tpu__fuse_param_layouts(tpu_builder *b, tpu_comp *entry, const tpu_chip *chip) {
  tpu_uses u;
  TPU_TRY(tpu_build_uses(b, entry, &u));
  tpu_status st = TPU_OK;
  int changed = 0, n = entry->ninstrs;
  result_transpose_layouts(entry, chip, &u, &changed);
  for (int i = 0; st == TPU_OK && i < n; i++) {
    tpu_instr *p = entry->instrs[i];
    tpu_shape *s = &p->shape;
    int second = -1, minor = -1;
    if (p->op != TPU_OP_PARAMETER || !tpu_dtype_is_array(s->dtype) || s->rank < 2 || s->layout_tail || !row_major(s))
      continue;
    if (tpu__least_tiling(chip, s, &second, &minor) >= tpu__tiled_as(chip, s, s->rank - 2, s->rank - 1)) {
      /* A parameter row-major pads least and stays so; a concatenate, pad or slice whose
       * result pads least in another layout reads it through a copy into that one, as it
       * reads a relaid parameter (the compiler's s8[7,16]{1,0} and s8[1,16]{1,0} are copied
       * to {0,1} to be concatenated into s8[143,16]{0,1}: a kernel each). */
      st = reader_copies(b, entry, chip, p, &u, s->rank - 2, s->rank - 1, &changed);
      continue;
    }
    int keep = 0;
    for (int k = 0; k < u.nusers[p->id]; k++) {
      const tpu_instr *r = u.users[p->id][k];
      if (r->op == TPU_OP_CONVOLUTION || r->op == TPU_OP_BITCAST || r->op == TPU_OP_TUPLE || r->op == TPU_OP_CALL ||
          r->op == TPU_OP_WHILE || r->op == TPU_OP_CONDITIONAL || r->op == TPU_OP_CUSTOM_CALL || r->op == TPU_OP_FUSION)
        keep = 1;
    }
    if (keep) {
      /* Read only as convolutions' input activations: the convolution's layout (batch in the
       * sublanes, features in the lanes) where that pads less than row-major, as the XLA TPU
       * compiler's entry layouts give an NCHW input ({1,0,3,2}: bf16[16,128,28,28] is not
       * padded 28 -> 128 in the lanes). */
      int64_t lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128;
      /* A weight gradient reads the same input with its batch and features swapped
       * (fb01_io01->01bf beside the forward pass's bf01): one layout serves both, the features
       * of whichever reading fills the lanes in the lanes (conv_grad_nchw_hwio_nchw_b8_14_
       * c128to128_k1: {1,0,3,2} in the compiler's programs). */
      int fd = -1, bd = -1, conv_only = u.nusers[p->id] > 0, swapped = 0, wf = -1, wb = -1, patches = 1;
      for (int k = 0; conv_only && k < u.nusers[p->id]; k++) {
        const tpu_instr *r = u.users[p->id][k];
        conv_only = r->op == TPU_OP_CONVOLUTION && r->has_conv_dims && r->noperands == 2 && r->operands[0] == p &&
                    r->operands[1] != p;
        if (!conv_only) break;
        int rf = (int)r->conv->in_feature, rb = (int)r->conv->in_batch;
        swapped |= fd >= 0 && fd != rf;
        /* a weight gradient (its window the image, its outputs the filter's taps) reads its
         * input in a layout of its own emitter's */
        int image = r->conv->nspatial > 0;
        patches &= patch_window(r);
        for (int w = 0; w < r->conv->nspatial && w < r->nwindow; w++) {
          const tpu_window_dim *wd = &r->window[w];
          if (patches || wd->size <= r->shape.dims[r->conv->out_spatial[w]]) {
            image = 0;
            continue;
          }
          swapped = 1;
          /* the window spans at least half the image in every dimension: a weight gradient
           * proper, not a patch embedding's 16 x 16 window over 224 nor a strided 3 x 3 x 3
           * filter over a depth of 4 */
          image &= 2 * wd->size * (wd->window_dilation > 1 ? wd->window_dilation : 1) >= s->dims[r->conv->in_spatial[w]];
        }
        if (image) wf = rf, wb = rb;
        if (fd < 0 || (fd == rb && bd == rf && s->dims[rf] % lanes == 0 && s->dims[fd] % lanes)) fd = rf, bd = rb;
        else conv_only = (fd == rf && bd == rb) || (fd == rb && bd == rf);
      }
      /* (only where the features fill the lanes: a weight gradient's "features" are the batch) */
      if (conv_only && fd != bd && s->dims[fd] % lanes == 0 &&
          tpu__tiled_as(chip, s, bd, fd) < tpu__tiled_as(chip, s, s->rank - 2, s->rank - 1)) {
        tpu__tile_layout(s, fd, bd);
        changed = 1;
      } else if (conv_only && patches && fd != bd && s->dims[fd] <= 4 && s->dims[bd] % lanes && (second != bd || minor != fd) &&
                 tpu__tiled_as(chip, s, second, minor) < tpu__tiled_as(chip, s, fd, bd)) {
        /* A patch embedding (patch_window): of at most 4 features (an image's channels), the
         * batch not filling the lanes, where another layout pads less than row-major: the
         * parameter takes that layout and one copy relays it into the batch in the lanes and
         * the features in the sublanes, as the XLA TPU compiler's programs
         * (vit_patch_embed_b8d768's bf16[8,224,224,3] {2,1,3,0} copied to {0,3,2,1:T(4,128)},
         * 117,544 cycles on v5e; libtpu probes off the corpus, probes/patch_relayout.py). */
        st = relayout_copy_marked(b, entry, p, &u, minor, second, bd, fd, "patch_relayout");
        changed = 1;
      } else if (conv_only && !swapped && fd != bd && (second != bd || minor != fd) &&
                 tpu__tiled_as(chip, s, second, minor) < tpu__tiled_as(chip, s, bd, fd)) {
        /* Fewer features than the lanes, and a layout that pads less than the
         * convolution's: the XLA TPU compiler gives the parameter that layout, as any other,
         * and copies it into the convolution's, a kernel of its own (bf16[8,224,224,64]
         * {2,3,1,0}, 224 in the lanes, copied to {3,0,2,1}: 451,584 cycles on v5e where the
         * strided convolution reading it takes 139,184; the depthwise, 3-D, grouped and 1-D
         * convolutions of the compiled families corpus likewise). Not for a weight gradient,
         * nor an input read by convolutions in two ways. */
        st = relayout_copy(b, entry, p, &u, minor, second, fd, bd);
        changed = 1;
      } else if (conv_only && wf >= 0 && wf != wb && s->dims[wf] % lanes && s->dims[wb] <= 4 && (second != wb || minor != wf) &&
                 tpu__tiled_as(chip, s, second, minor) < tpu__tiled_as(chip, s, wb, wf)) {
        /* Read by a weight gradient (and its forward convolution) of at most 4 input
         * features (the forward convolution's packed features, tile_conv.c), whose features
         * (the batch) do not fill the lanes, where another layout pads less: the
         * parameter takes that layout and one copy relays it into the weight gradient's
         * (its features, the batch, in the lanes; the forward convolution reads the same),
         * as the XLA TPU compiler's programs: conv_grad_nchw_hwio_nchw_b8_28_c3to32_k3's
         * bf16[8,3,28,28] {3,0,2,1} copied to {0,1,3,2:T(4,128)}, 6,400 cycles on v4, 3,159
         * on v5e; the 14 x 14 one's likewise. */
        st = relayout_copy(b, entry, p, &u, minor, second, wf, wb);
        changed = 1;
      } else if (conv_only && swapped && fd != bd && ((second == bd && minor == fd) || (second == fd && minor == bd)) &&
                 !swapped_least_off()) {
        /* Read by a convolution and its weight gradient (batch and features swapped), where
         * the least padded layout is one of the two readings' (the batch in the sublanes and
         * the features in the lanes, or the other way round) though neither fills the lanes:
         * the parameter takes it, as the XLA TPU compiler gives every parameter its least
         * padded layout (conv_grad_nchw_oihw_nchw_b8_28_c64to128_k1's bf16[8,64,28,28] is
         * {1,0,3,2}, 64 features in the lanes and the batch of 8 in the sublanes, on every
         * generation, where row-major pads W's 28 to 128). */
        tpu__tile_layout(s, minor, second);
        changed = 1;
      }
      continue;
    }
    int64_t piece = 0;
    int w = tpu__s2b_even_split_dim(&u, p, &piece), q1, m1;
    if (w >= 0 && w == minor && !tpu__values_stay_in_vmem(chip) && tpu__tiling_off_w(chip, s, w, piece, &q1, &m1) > 0 &&
        !tpu__s2b_lanes_off()) {
      /* Space to batch splits W, which the parameter's least padded layout puts in the lanes:
       * the XLA TPU compiler relays it out in two copies, W out of the tile (through
       * tiling_off_w's layout, where a bitcast splits it), then into the convolution's layout
       * (conv3d_b1_16x56x56_c32to32_k1s1's copy.1 and copy.2, 65,936 + 57,120 cycles on v4,
       * 50,388 + 60,151 on v5p; libtpu probes off the corpus, bench/fidelity/probes/s2b_lanes.py).
       * tpusim's fold kernel (space_to_batch.c) is the second; the first is this copy. Where
       * values stay in VMEM between kernels (v5e, v6e) the compiler's second copy is within
       * VMEM (1,400 cycles for that one), and the fold kernel reading the parameter stands
       * for the pair. */
      st = relayout_copy_marked(b, entry, p, &u, minor, second, m1, q1, "s2b_lanes");
      changed = 1;
      continue;
    }
    tpu__tile_layout(s, minor, second);
    st = reader_copies(b, entry, chip, p, &u, second, minor, &changed);
  }
  tpu_build_uses_free(&u);
  TPU_TRY(st);
  TPU_TRY(tpu__fuse_window_layouts(b, entry, chip, &changed));
  TPU_TRY(tpu__sas_layouts(b, entry, chip, &changed));
  TPU_TRY(gather_layouts(b, entry, &changed));
  TPU_TRY(tpu__sort_layouts(b, entry, chip, &changed));
  TPU_TRY(tpu__scan_layouts(b, entry, chip, &changed));
  return changed ? tpu_build_finish(b, entry) : TPU_OK;
}
