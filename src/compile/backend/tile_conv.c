/* Back-end pass `tile`, convolutions: the MXU problem (M, K, N, batch) a convolution becomes,
 * as the XLA TPU compiler's convolution emitters map its window, groups, dilations and batch
 * onto the MXUs (tile.c calls it for every convolution it puts on the MXUs). */
#include "compile/backend/backend.h"
#include "compile/passes/hlo_passes.h"

static int64_t round_up(int64_t a, int64_t m) { return m > 0 ? (a + m - 1) / m * m : a; }

/* Does every output position of window dimension w, over an input of n elements (dilated by
 * w->base_dilation, padded), meet at most one input element? Then *taps and *inputs get how
 * many distinct taps and input elements the outputs meet (a dot's batch dimension written as
 * this window meets a new one of each at every output). */
static int single_tap(const tpu_window_dim *w, int64_t n, int64_t out, int64_t *taps, int64_t *inputs) {
  int64_t d = w->base_dilation > 0 ? w->base_dilation : 1, wd = w->window_dilation > 0 ? w->window_dilation : 1;
  if (w->size <= 1 || n < 1 || out < 1 || w->stride < 1 || out * w->size > 1000000) return 0;
  int64_t last = (n - 1) * d; /* the dilated input's last element */
  int64_t nt = 0, ni = 0, prev_t = -1, prev_x = -1;
  for (int64_t o = 0; o < out; o++) {
    int hits = 0;
    for (int64_t t = 0; t < w->size && hits < 2; t++) {
      int64_t x = o * w->stride + t * wd - w->pad_lo;
      if (x >= 0 && x <= last && x % d == 0) {
        hits++;
        /* outputs meet taps and inputs in order: count the changes */
        if (t != prev_t) nt++, prev_t = t;
        if (x != prev_x) ni++, prev_x = x;
      }
    }
    if (hits > 1) return 0;
  }
  *taps = nt;
  *inputs = ni;
  return 1;
}

/* Would the XLA TPU compiler fold this convolution's last spatial dimension into its batch
 * (space to batch, XLA's SpaceToBatchConverter: the dimension cut into 8 pieces, each a new
 * batch entry with a halo of its window's overlap, the result cut back)? Its legality rules:
 * no batch groups; a window dilation only where the dilated window is narrower than the
 * output; an input dilation only at stride 1 with a low padding of the dilation or one less
 * (a 1-wide window at padding 0), and then, at a padding of the dilation, 24 or more
 * elements; a halo no wider than a piece. Grouped convolutions are never folded in the
 * compiled programs, nor any dimension under 16 (tune split: 14 and 15 wide stay whole, 28
 * and wider are folded, batch 1 to 8, 2 to 16, 4 to 32). */
static int space_to_batch(const tpu_instr *cv, const tpu_shape *ls, const tpu_shape *rs) {
  const tpu_conv_dims *cd = cv->conv;
  const int64_t splits = 8;
  int i = cd->nspatial - 1;
  if (i < 0 || i >= cv->nwindow || cv->batch_group_count > 1 || cv->feature_group_count > 1) return 0;
  const tpu_window_dim *w = &cv->window[i];
  int64_t n = ls->dims[cd->in_spatial[i]], k = rs->dims[cd->k_spatial[i]], out = cv->shape.dims[cd->out_spatial[i]];
  int64_t wd = w->window_dilation > 1 ? w->window_dilation : 1, st = w->stride > 0 ? w->stride : 1;
  if (wd > 1 && k >= out) return 0;
  if (w->base_dilation > 1) {
    if (st != 1) return 0;
    if (w->pad_lo == 0 ? k != 1 : (w->pad_lo != w->base_dilation - 1 && w->pad_lo != w->base_dilation)) return 0;
    if (w->pad_lo == w->base_dilation && n < 3 * splits) return 0;
  }
  int64_t halo = (k - 1) * wd + 1 - st;
  return n >= 2 * splits && halo <= (n + splits - 1) / splits;
}

/* Does a chip whose compiler times matmul kernels at the rows they stream (mxu_fill_hidden:
 * v6e) run this plain convolution of a batch of 1 at one row per output position, with no
 * step floor? Libtpu probes outside the corpora (bench/fidelity/probes/small_batch_conv.py,
 * bf16 [1,H,H,Ci] x [k,k,Ci,Co], 64 to 256 output features): v6e [1,31,31,256] x
 * [3,3,256,64], rhs_dilate 4, 5,567 cycles against 13,834 at a batch of 2 and 26,774 at 8
 * (961 positions: 5.8 a position, the step floor alone 5.1); [1,31,31,64] x [3,3,64,128]
 * 3,302. Not below 64 output features (the packed-output emitter: tune
 * dilconv_b1_33x33_c64to21_k5d12, 21 features, keeps its floor) nor an input-dilated
 * (transposed) convolution. */
static int one_row(const tpu__be *be, const tpu_instr *mm, int64_t g, int64_t bat) {
  const tpu_conv_dims *cd = mm->conv;
  if (!be->chip->mxu_fill_hidden || g != 1 || bat != 1 || mm->batch_group_count > 1) return 0;
  if (mm->shape.dims[cd->out_batch] != 1 || mm->operands[1]->shape.dims[cd->k_out] < 64) return 0;
  for (int i = 0; i < cd->nspatial && i < mm->nwindow; i++)
    if (mm->window[i].base_dilation > 1) return 0;
  return 1;
}

/* The steps of a convolution kernel with the batch in the sublanes: groups x output
 * positions x blocks of the batch, 0 for any other convolution. The XLA TPU compiler writes a
 * convolution of G groups (more than one input feature each) as one whose groups are a
 * spatial dimension (window G, stride G - 1, lhs_dilate G: `bat`, the products of the dot
 * that dimension makes) and runs it with the batch in the sublanes, one step per output
 * position and group; its cost model charges each step alike whatever the group's
 * features and window (bench/fidelity probes, v5e, [8,28,28,*] bf16, 16 groups: 131,716
 * cycles for 8 or 64 features per group, 135,300 for a 3x3 window; 120,664 at batch 4,
 * 250,544 at batch 16; chips' conv_group_step_cycles). A batch of 32 or more goes to the
 * lanes (a different emitter): no steps, nor where the layout puts the batch minor. The floor
 * is the emitter's, not the groups': a plain convolution with the batch in the sublanes
 * takes it too, one step per output position (compiled families, 1x1x1 kernels of
 * conv3d_b2_8x14x14_c16to16_k1s1: 1,568 steps, 13.0 cycles a step on v5e, 14.7 on v4; of
 * the compiled corpus's 110 plain kernels with that emitter per generation, the floor moves
 * 7 / 6 / 8 / 2 of v4 / v5e / v5p / v6e closer to the compiler's figure and 0 / 0 / 0 / 3
 * away). `g` is the feature groups, `bat` the products written as a spatial dimension, `m`
 * the rows (batch x the other output positions). */
static int packed_conv(const tpu__be *be, const tpu_instr *mm, int64_t g, int64_t bat);
static int64_t group_steps(const tpu__be *be, const tpu_instr *mm, int64_t g, int64_t bat, int64_t m) {
  const tpu_conv_dims *cd = mm->conv;
  const tpu_shape *rs = &mm->operands[1]->shape;
  if (be->chip->conv_group_step_cycles <= 0 || mm->batch_group_count > 1) return 0;
  if (g > 1 && rs->dims[cd->k_in] <= 1) return 0; /* depthwise: its own emitter */
  int64_t groups = g * bat;
  int64_t batch = mm->shape.dims[cd->out_batch], sub = be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8;
  if (batch < 1 || batch > 2 * sub) return 0;
  if (mm->shape.has_layout && mm->shape.rank > 0 && mm->shape.minor_to_major[0] == cd->out_batch) return 0;
  if (groups == 1 && one_row(be, mm, g, bat)) return 0;
  if (groups == 1) {
    /* a plain convolution: fewer than 8 output features go to an emitter with the batch in
     * the lanes (tconv_b2_28x28_c256to3_k4s4_valid, conv_grad_nchw_hwio_nchw_b8_28_c3to32_k3's
     * 3-feature kernel); where the compiler folds its last spatial dimension into the batch
     * (space to batch), the folded batch fills the sublanes */
    if (rs->dims[cd->k_out] < sub) return 0;
  }
  /* A step is one output position's batch for one 128-lane tile of the output features: a
   * plain convolution of 256 or 384 output features takes the floor two or three times per
   * position (libtpu probes outside the corpora, bench/fidelity/probes/dilconv_sweep.py, bf16
   * [2,21,21,32] x [3,3,32,Co], rhs_dilate 6-14, one window of the features' tiles: each
   * tile adds 4,786 cycles on v5e and 4,780 on v4 at 441 positions, 10.9 a position; v6e
   * 2,250-2,502, 5.1-5.7). A chip of two TensorCores (v5p) shares the tiles between them
   * (its compiler iterates them: 1,816-2,078 a tile, half the floor's 441 x 8.6). */
  int64_t lanes = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
  int64_t tiles = (rs->dims[cd->k_out] / (g > 0 ? g : 1) + lanes - 1) / lanes;
  int64_t tc = be->chip->tensorcores > 1 ? be->chip->tensorcores : 1;
  tiles = (tiles + tc - 1) / tc;
  /* what the probes cover: a window of several taps (a 1x1 one keeps one step a position:
   * tune mbv2_fwd_b8_28x28_32to64_s2's and resnet_bottleneck_fwd_b8_28x28x512_g1's 1x1
   * kernels go 5-10 points over the compiler with the tiles) */
  int64_t taps = 1;
  for (int i = 0; i < cd->nspatial; i++) taps *= rs->dims[cd->k_spatial[i]];
  for (int i = 0; i < cd->nspatial && i < mm->nwindow; i++)
    if (mm->window[i].base_dilation > 1) taps = 1; /* a transposed convolution: its own floors */
  if (tiles < 1 || taps <= 1 || packed_conv(be, mm, g, bat)) tiles = 1; /* packed: its own floor */
  if (groups == 1 && space_to_batch(mm, &mm->operands[0]->shape, rs)) return (m + sub - 1) / sub * tiles;
  return groups * (m / batch) * ((batch + sub - 1) / sub) * tiles;
}

/* The least time, in cycles, of an input-dilated (transposed) convolution kernel with the
 * batch in the sublanes; 0 for any other convolution. The XLA TPU compiler's emitters for it
 * (EmitInputBatchInSublanesOutputBatchInSublanesPacked, EmitOutputBatchInSublanes) walk the
 * input, not the dilated image: each input position's batch meets every filter tap, and its
 * cost model charges that in proportion to the input times the output features, whatever
 * the batch up to 16 and the dilation, with a floor per input position and tap and one per
 * output position (libtpu probes, bf16 [4,16,16,Ci] x [k,k,Ci,Co], chips'
 * conv_scatter_*_cycles: at k = 4, lhs_dilate 2x2, v4 270,416 cycles with Ci = 128, Co =
 * 256, the same at batch 1, 2 and 8, 274,969 at 16, 268,894 at lhs_dilate 4x4 (3.75 times
 * the output positions); Ci 32 / 64 / 128 / 256 / 512 and Co 128 / 256 / 512 in proportion;
 * Ci = Co = 32 at the tap floor; k = 3, lhs_dilate 4x4, Ci = 32 at the output floor).
 * Input features beyond a register's 128 lanes go in blocks of the MXU's rows (v6e: 128
 * and 256 cost alike). Not where the compiler folds the batch (space to batch, in tpusim's
 * rule or, in a compiled program, its result: a batch dimension not outermost), grouped
 * convolutions, nor dots written as convolutions (`bat`). Fewer output features than the
 * sublanes cost what the sublanes' do (below); on v6e up to 8 of them set *kernel_least, the
 * kernel's time start to end, instead (and return 0). */
static double scatter_cycles(const tpu__be *be, const tpu_instr *mm, int64_t g, int64_t bat, double *kernel_least) {
  const tpu_chip *ch = be->chip;
  *kernel_least = 0;
  const tpu_conv_dims *cd = mm->conv;
  const tpu_shape *ls = &mm->operands[0]->shape, *rs = &mm->operands[1]->shape;
  if (ch->conv_scatter_cycles <= 0 || g > 1 || bat > 1 || mm->batch_group_count > 1) return 0;
  int dilated = 0;
  for (int i = 0; i < cd->nspatial && i < mm->nwindow; i++) dilated |= mm->window[i].base_dilation > 1;
  int64_t batch = mm->shape.dims[cd->out_batch], sub = ch->vector_sublanes > 0 ? ch->vector_sublanes : 8;
  int64_t cout = rs->dims[cd->k_out], cin = rs->dims[cd->k_in];
  if (!dilated || batch < 1 || batch > 2 * sub || cd->in_batch != 0 || space_to_batch(mm, ls, rs)) return 0;
  /* fewer output features than the sublanes (the batch-in-lanes layout where the batch
   * exceeds them) cost what the sublanes' do: see below */
  int few = cout < sub;
  if (!few && mm->shape.has_layout && mm->shape.rank > 0 && mm->shape.minor_to_major[0] == cd->out_batch) return 0;
  int64_t lanes = ch->vector_lanes > 0 ? ch->vector_lanes : 128, rows = ch->mxu_rows > lanes ? ch->mxu_rows : lanes;
  double ci = cin <= lanes ? (double)cin : (double)round_up(cin, rows) * (double)lanes / (double)rows;
  double taps = 1, in = 1, out = 1;
  for (int i = 0; i < cd->nspatial; i++) {
    taps *= (double)rs->dims[cd->k_spatial[i]];
    in *= (double)ls->dims[cd->in_spatial[i]];
    out *= (double)mm->shape.dims[cd->out_spatial[i]];
  }
  /* Up to the sublanes' output features (session 30, tconv): the compiler's figure is the
   * same for 3, 4 and 8 of them (libtpu probes outside the corpora,
   * bench/fidelity/probes/tconv_sweep.py, bf16 [B,H,H,Ci] x [k,k,Ci,Co], lhs_dilate 2-4: v5e
   * [1,9,9,160] x [3,3,160,Co], lhs_dilate 4, 19,815 cycles at Co = 3 and 8; [8,13,13,48] x
   * [4,4,48,Co], lhs_dilate 4, 31,809 / 31,818 / 32,888 at Co = 3 / 4 / 8; v4 and v5p alike),
   * whatever the layout (batch in the lanes at a batch of 8 and 3 or 4 features). Where the
   * compiler times kernels at the rows they stream (mxu_fill_hidden: v6e) that figure is the
   * batch-in-lanes emitter's over the input positions: its start and each input position's
   * taps times the input's 128-feature blocks (conv_lanes_*_cycles), whatever the batch up to
   * 8 and the features up to 8 (v6e [8,13,13,48] x [4,4,48,Co]: 4,941 / 4,945 / 4,963 cycles
   * at Co = 3 / 4 / 8, the rule 4,927; [4,12,12,64] x [3,3,64,Co], lhs_dilate 2: 3,641 / 3,651,
   * the rule 3,519; [8,9,9,96] x [3,3,96,Co], lhs_dilate 2: 2,963 / 2,973, the rule 2,952),
   * where the sublanes' floors give 1.8-4.8 times that. */
  if (cout <= sub && ch->mxu_fill_hidden && ch->conv_lanes_tap_cycles > 0) { /* the kernel's, start to end */
    *kernel_least = ch->conv_lanes_start_cycles +
                    in * (ch->conv_lanes_position_cycles + taps * (double)((cin + lanes - 1) / lanes) * ch->conv_lanes_tap_cycles);
    return 0;
  }
  if (few) cout = sub;
  double feat = ch->conv_scatter_cycles * ci / (double)lanes * (double)cout / (double)lanes;
  double c = in * taps * (feat > ch->conv_scatter_tap_cycles ? feat : ch->conv_scatter_tap_cycles);
  double o = out * (double)((cout + lanes - 1) / lanes) * ch->conv_scatter_out_cycles;
  return c > o ? c : o;
}

/* At most this many input features: the XLA TPU compiler packs them, with the filter's taps,
 * into the sublanes (EmitAllInputFeaturePackedInSublanesOutputBatchInSublanes; libtpu probes,
 * bf16 [8,56,56,Ci] x [7,7,Ci,512], stride 3, on v5e: Ci = 1, 3, 4 packed, 5 to 8 not). */
#define PACKED_MAX_FEATURES 4

/* Is mm a convolution the compiler runs with its few input features packed into the
 * sublanes, the batch in the sublanes too: no groups, no dot written as a convolution (`bat`),
 * at most PACKED_MAX_FEATURES input features, 8 or more output features (fewer: the
 * batch-in-lanes emitter), a batch not laid out minor. */
static int packed_conv(const tpu__be *be, const tpu_instr *mm, int64_t g, int64_t bat) {
  const tpu_conv_dims *cd = mm->conv;
  const tpu_shape *rs = &mm->operands[1]->shape;
  int64_t sub = be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8;
  if (g > 1 || bat > 1 || mm->batch_group_count > 1 || cd->nspatial < 1) return 0;
  if (rs->dims[cd->k_in] > PACKED_MAX_FEATURES || rs->dims[cd->k_out] < sub) return 0;
  if (mm->shape.has_layout && mm->shape.rank > 0 && mm->shape.minor_to_major[0] == cd->out_batch) return 0;
  return 1;
}

/* The least time, in cycles, of a packed convolution's kernel (packed_conv) of two or more
 * spatial dimensions; 0 for any other. The compiler's emitter walks the output positions,
 * each position's batch (up to 16 rows) meeting every MXU weight tile of the packed
 * contraction (input features x taps) by the output features, and its cost model charges
 * each position alike: (weight tiles + 1) x chip conv_packed_cycles where a window stride
 * exceeds 1, (weight tiles + 1/2) at unit stride, per 16 rows of batch (libtpu probes, bf16
 * [8,56,56,3] x [k,k,3,Co], stride 3, on v5e: k = 3, 5 (one K tile), Co = 512, 88.8 cycles a
 * position; k = 7 (two) 150.3; k = 11 (three) 211; Co = 128 / 256 / 384 at k = 7: 47.2 / 83.7
 * / 117.4; a batch of 16 1.11 times 8, 32 1.81 times, f32 what bf16 costs; at stride 1,
 * [8,28,28,3] x [7,7,3,512] 142.1 and [8,30,30,3] x [3,3,3,128] 25.4). A 1x1 window at
 * stride 1 (a pointwise product: the compiled families' kernels of 3 input features, 21-23
 * cycles a position on v5e) is left to its MXU work, as are 1-D convolutions (the compiled
 * families' on v6e cost 18 cycles a position and 256-wide tile, half what this gives; on
 * v5e 0.7-1.0 of it). Where the compiler folds the last spatial dimension into a batch under
 * 8 (space to batch: 8 pieces), the positions are the pieces' (bf16 [1,56,56,3] x
 * [7,7,3,512] at stride 3: 17 x 3 positions of batch 8). */
static double packed_cycles(const tpu__be *be, const tpu_instr *mm, int64_t g, int64_t bat) {
  const tpu_chip *ch = be->chip;
  const tpu_conv_dims *cd = mm->conv;
  const tpu_shape *ls = &mm->operands[0]->shape, *rs = &mm->operands[1]->shape;
  if (ch->conv_packed_cycles <= 0 || cd->nspatial < 2 || !packed_conv(be, mm, g, bat)) return 0;
  int window = 0, strided = 0;
  for (int i = 0; i < cd->nspatial; i++) {
    int s = i < mm->nwindow && mm->window[i].stride > 1;
    strided |= s;
    window |= s || rs->dims[cd->k_spatial[i]] > 1;
  }
  if (!window) return 0;
  const int64_t rows = 16, splits = 8;
  int64_t sub = ch->vector_sublanes > 0 ? ch->vector_sublanes : 8;
  int64_t batch = mm->shape.dims[cd->out_batch], taps = 1, pos = 1;
  for (int i = 0; i < cd->nspatial; i++) taps *= rs->dims[cd->k_spatial[i]];
  for (int i = 0; i < cd->nspatial - 1; i++) pos *= mm->shape.dims[cd->out_spatial[i]];
  int64_t last = mm->shape.dims[cd->out_spatial[cd->nspatial - 1]];
  if (batch % sub && space_to_batch(mm, ls, rs)) {
    last = (last + splits - 1) / splits;
    batch *= splits;
  }
  int64_t R = ch->mxu_rows > 0 ? ch->mxu_rows : 128, C = ch->mxu_cols > 0 ? ch->mxu_cols : 128;
  int64_t tiles = (rs->dims[cd->k_in] * taps + R - 1) / R * ((rs->dims[cd->k_out] + C - 1) / C);
  return (double)(pos * last) * (double)((batch + rows - 1) / rows) * ((double)tiles + (strided ? 1.0 : 0.5)) *
         ch->conv_packed_cycles;
}

/* Is w the groups' window dimension of a grouped convolution in the XLA TPU compiler's 5-D
 * form (group_conv.c group_form): G wide, stride G - 1, the input dilated G times, unpadded,
 * so each output position of it meets its own group at one tap? */
static int group_window_dim(const tpu_window_dim *w) {
  return w->size > 1 && w->base_dilation == w->size && w->stride == w->size - 1 && !w->pad_lo && !w->pad_hi;
}

/* The least time, in cycles, start to end, of a convolution kernel with the batch in the lanes and 3 or 4
 * output features in the sublanes (the XLA TPU compiler's T(4,128) result tile, {0,1,3,2}
 * for NCHW: a stem's input gradient): 0 for any other. Its cost model charges a fixed part,
 * each output position, and each position's filter taps times the 128-feature blocks of
 * the input, whatever the batch up to the lanes and the output features (libtpu probes,
 * bf16 [B,Ci,H,H] x [k,k,Co,Ci], pad k/2, chips' conv_lanes_*_cycles: on v5e 20,386 cycles
 * at B = 8, Ci = 32, H = 28, k = 3, Co = 3; the same at B = 16 and 32, Co = 4, Ci = 64 and
 * 128; 9,034 at H = 14; 45,508 at k = 5; 34,517 at Ci = 256). Not a one-tap window (11,955
 * at k = 1, below the taps' rate: another emitter), nor 1, 2 or more than 4 features (1 and
 * 7 go to the lanes), nor, unprobed, a stride or a dilation (transposed convolutions to 3
 * features). A grouped convolution in the 5-D form whose batch exceeds its 2-4 features a
 * group (group_conv.c: the compiler's {0,4,3,2,1}) costs the same: its groups' window is one
 * tap of G output positions, so the positions are [H, W, G]'s and the taps the filter's
 * (libtpu probes outside the corpora, bench/fidelity/probes/group_lanes.py, bf16 and f32
 * [B,H,H,Cg G] x [k,k,Cg,Cog G], B 4-128, H 7-28, G 2-8, Cg 4-128, Cog 2-4, k 3-7; 392 or
 * more positions: v4 -12..+9 %, v5e -0..+17 %, v5p -16..+5 %, v6e -3..+26 % of the
 * compiler's kernel, whatever the batch, Cg and Cog; left: 98 positions on v5e/v6e +35..+63 %
 * (a smaller fixed part), and v4/v6e at a batch of 16-32 over 16 features a group 0.45-0.6
 * of the compiler's figure). */
static double lanes_cycles(const tpu__be *be, const tpu_instr *mm, int64_t taps) {
  const tpu_chip *ch = be->chip;
  const tpu_conv_dims *cd = mm->conv;
  const tpu_shape *rs = &mm->operands[1]->shape;
  int64_t co = rs->dims[cd->k_out], lanes = ch->vector_lanes > 0 ? ch->vector_lanes : 128, pos = 1;
  int grouped = 0;
  for (int i = 0; i < cd->nspatial && i < mm->nwindow; i++) grouped |= group_window_dim(&mm->window[i]);
  if (ch->conv_lanes_tap_cycles <= 0 || co < (grouped ? 2 : 3) || co > 4 || taps < 2) return 0;
  for (int i = 0; i < cd->nspatial; i++) {
    int gw = i < mm->nwindow && group_window_dim(&mm->window[i]);
    if (i < mm->nwindow && !gw &&
        (mm->window[i].stride > 1 || mm->window[i].base_dilation > 1 || mm->window[i].window_dilation > 1))
      return 0;
    pos *= mm->shape.dims[cd->out_spatial[i]];
  }
  double blocks = (double)((rs->dims[cd->k_in] + lanes - 1) / lanes);
  return ch->conv_lanes_start_cycles +
         (double)pos * (ch->conv_lanes_position_cycles + (double)taps * blocks * ch->conv_lanes_tap_cycles);
}

/* Is mm a grouped convolution in the XLA TPU compiler's 5-D form (group_conv.c group_form):
 * a window dimension over the groups, G wide, stride G - 1, the input dilated G times? On a
 * chip whose compiler times matmul kernels at the rows they stream (mxu_fill_hidden: v6e) its
 * rows are the batch as it is, not padded to the sublanes: libtpu probes outside the
 * corpora, v6e bf16 [B,14,14,256] x [3,3,32,256] in 8 groups, one window: B = 1, 2, 4, 8
 * 2,280 / 3,948 / 4,460 / 7,296 cycles, its MXU passes over B x 196 rows (784 / 1,568 / 3,136 /
 * 6,272) plus a start, where rows of 8 would cost batch 2 what batch 8 does (v5e, whose
 * kernels keep the step floor, 18,672 and 21,618). */
int tpu__conv_group_window(const tpu_instr *mm) {
  for (int i = 0; i < mm->conv->nspatial && i < mm->nwindow; i++) {
    const tpu_window_dim *w = &mm->window[i];
    if (w->size > 1 && w->base_dilation == w->size && w->stride == w->size - 1) return 1;
  }
  return 0;
}

/* The rows of the result tile the XLA TPU compiler gives a plain convolution's batch of fewer
 * than the sublanes when it keeps the batch in them (EmitAllBatchInSublanes and the
 * input-walking emitters): T(2,128) for a batch of 1 or 2, T(4,128) for 3 or 4, whole
 * registers (T(8,128)) above; its cost model charges each output position's MXU passes at
 * those rows, not at the sublanes' 8 (libtpu probes outside the corpora,
 * bench/fidelity/probes/small_batch_conv.py: bf16 [B,31,31,Ci] x [3,3,Ci,Co], rhs_dilate 4,
 * v5e Ci = 512, Co = 64: B = 1 / 2 / 4 / 8 23,845 / 26,002 / 43,850 / 79,820 cycles, a
 * position's MXU work at 2 / 2 / 4 / 8 rows plus the same ~10 cycles of its step). */
static int64_t batch_tile_rows(int64_t batch, int64_t sub) {
  int64_t r = 2;
  while (r < batch && r < sub) r *= 2;
  return r < sub ? r : sub;
}

/* Does a plain convolution's batch under the sublanes cost its result tile's rows
 * (batch_tile_rows) rather than the sublanes'? Where it has a window of several taps at unit
 * stride, its input features fill a register's lanes (128 or more: each tap its own
 * contraction of whole lane tiles) and its input is not dilated: what the probes cover (rhs
 * dilation 1-6, 3x3 and 5x5). Fewer features, which the compiler's emitter packs with the
 * taps into one contraction, keep the 8 rows (probes: [B,31,31,32] x [5,5,32,256],
 * rhs_dilate 6, v5e B = 2 28,987 cycles, 4 34,833, 8 46,200; tune
 * dilconv_b2_28x28_c32to256_k5d3, sconv_b4_32x32_c64to64_k7s2), as do transposed
 * convolutions (tune tconv_b1_16x16_c128to3_k3s2), 1x1 windows (tune
 * resnet_bottleneck_fwd_b4_14x14x1024_g1's, fused with the statistics' reduce) and strided
 * ones (tune sconv_b1_15x15_c256to96_k2s2_valid, v4 3,574 cycles against 2,718 at 8 rows). */
static int tile_batch(const tpu_instr *mm, int64_t g, int64_t bat, int64_t lanes) {
  const tpu_conv_dims *cd = mm->conv;
  const tpu_shape *rs = &mm->operands[1]->shape;
  if (g != 1 || bat != 1 || rs->dims[cd->k_in] < lanes) return 0;
  int64_t taps = 1;
  for (int i = 0; i < cd->nspatial && i < mm->nwindow; i++) {
    if (mm->window[i].base_dilation > 1 || mm->window[i].stride > 1) return 0;
    taps *= rs->dims[cd->k_spatial[i]];
  }
  return taps > 1;
}

/* The MXU problem of convolution mm: k's m, k, n, b, k_flops and mm_flops (tile.c sets the
 * rest). */
void tpu__conv_matmul_dims(const tpu__be *be, const tpu_instr *mm, tpu__kinfo *k) {
  const tpu_shape *ls = &mm->operands[0]->shape, *rs = &mm->operands[1]->shape;
  const tpu_conv_dims *cd = mm->conv;
  int64_t g = (mm->feature_group_count > 0 ? mm->feature_group_count : 1) *
              (mm->batch_group_count > 0 ? mm->batch_group_count : 1);
  int64_t m = mm->shape.dims[cd->out_batch], taps = 1, bat = 1;
  int depthwise = 0;
  for (int i = 0; i < cd->nspatial; i++) {
    m *= mm->shape.dims[cd->out_spatial[i]];
    /* Where every output meets at most one input element (the rest of its window is
     * padding or the holes of a dilated input), only that tap is work: the XLA TPU
     * compiler writes a batched dot as such a convolution (its batch dimensions spatial,
     * e.g. size=2x32 lhs_dilate=2x32, size=4 stride=4 pad=3_3 lhs_dilate=3, or size=32
     * pad=31_31 over one element). Windows that meet several (a transposed convolution's
     * gradient) are counted whole, as the compiler counts them. */
    int64_t t = rs->dims[cd->k_spatial[i]], out = mm->shape.dims[cd->out_spatial[i]], nt = 0, ni = 0;
    if (i < mm->nwindow && single_tap(&mm->window[i], ls->dims[cd->in_spatial[i]], out, &nt, &ni)) {
      t = 1;
      /* a new tap and a new input element at every output: a batch dimension of the dot
       * (each position multiplies its own blocks), not rows sharing one weight */
      if (nt == out && ni == out && out > 1) {
        m /= out;
        bat *= out;
      }
    }
    taps *= t;
  }
  k->steps = group_steps(be, mm, g, bat, m);
  double scatter_lanes = 0;
  k->min_cycles = scatter_cycles(be, mm, g, bat, &scatter_lanes);
  k->kernel_min_cycles = scatter_lanes > 0 ? scatter_lanes : packed_cycles(be, mm, g, bat);
  if (scatter_lanes > 0) k->steps = 0; /* that emitter's figure has no step per output position */
  k->b = g * bat;
  k->m = m;
  k->k = rs->dims[cd->k_in] * taps;
  k->n = rs->dims[cd->k_out] / g;
  /* A depthwise convolution (feature_group_count groups of one input feature each, any
   * channel multiplier): the XLA TPU compiler packs the groups along the diagonal of the
   * MXU's weight tile, so each filter tap multiplies [rows, features] by a diagonal block:
   * one K tile per tap, each block of 128 features (a vector register's lanes) its own pass
   * of the array, also on v6e's 256-wide MXUs (bench/fidelity probes dw*: a 3x3
   * over [8,28,28,256] bf16 takes 37,569 cycles on v5e, the 9 x 2 x 6,272 rows' pushes on
   * 4 MXUs plus the transfers, where one 128-wide tile per group would take 128 times that). */
  if (mm->feature_group_count > 1 && rs->dims[cd->k_in] == 1 && mm->batch_group_count <= 1) {
    int64_t lanes = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
    int64_t rows = be->chip->mxu_rows > 0 ? be->chip->mxu_rows : 128;
    k->b = bat * ((rs->dims[cd->k_out] + lanes - 1) / lanes);
    k->n = lanes;
    k->k = taps * rows;
    k->k_flops = taps;
    /* Too few rows to cover the MXUs' weight loads (the rows split over the MXUs at most
     * half a load's cycles): each tap's diagonal block is a product of its own, dealt whole
     * to an MXU that streams all the rows (chip mxu_batch_spread), the taps' partial sums
     * added, rather than the rows split four ways with every fold waiting for its load (v6e,
     * 128-cycle loads: the compiler's b1 7x7x32 k7s2 depthwise kernel takes 2,141 cycles,
     * below its 49 taps' loads end to end, 6,272; test_timing_conv depthwise_few_rows). With
     * more rows the split is as fast and tpusim's plan of many products pays more starts
     * (libtpu probes, v6e, bf16 x 128 features: 196 rows 7x7 s2 6,044 cycles, products 9,066,
     * split 10,364; 392 rows 8,498, products 13,335, split 10,587; tune
     * conv_grad_b8_14x14x64_k7s2_g64's 392-row forward kernel likewise). */
    int64_t mx = be->chip->mxus_per_core > 0 ? be->chip->mxus_per_core : 1;
    if (be->chip->mxu_batch_spread && taps > 1 && be->chip->mxu_weight_load_cycles > 0 &&
        2 * m <= mx * be->chip->mxu_weight_load_cycles) {
      k->b *= taps;
      k->k = rows;
      k->k_flops = 1;
    }
    k->mm_flops = 2.0 * (double)bat * (double)m * (double)taps * (double)rs->dims[cd->k_out];
    depthwise = 1;
  }
  /* Fewer output features than the 128 lanes and a larger batch: the XLA TPU compiler lays
   * the batch across the lanes (its output layout puts the batch minor, {0,3,2,1} for
   * NHWC), so the batch is the MXU's column dimension and the features join the rows
   * (a 7x7 stem's input gradient has 3 features and a batch of 32). Not for a dot written
   * as a convolution (one tap), whose "batch" is a dot dimension. */
  int64_t batch = mm->shape.dims[cd->out_batch], lanes128 = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
  int lanes_batch = tpu__conv_batch_in_lanes(g, taps, k->n, batch, lanes128);
  if (lanes_batch) {
    k->m = m / batch * k->n;
    k->n = batch;
    k->steps = 0;
    /* an input-dilated one of fewer features than the sublanes keeps scatter_cycles' time */
    if (rs->dims[cd->k_out] >= (be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8)) k->min_cycles = 0;
    if (!(scatter_lanes > 0)) k->kernel_min_cycles = lanes_cycles(be, mm, taps);
  }
  /* The XLA TPU compiler runs a filter (a window of at most 7 taps a side, unit stride,
   * no input dilation) tap by tap, each tap's input features as the contraction: features
   * fill the 128 lanes of their tile, so fewer than 128 are padded at every tap (probed on
   * v5e and v5p: a 3x3 convolution over 16, 32 or 64 features costs what one over 128
   * does; docs/fidelity.md). Weight gradients, whose window is the image, are one GEMM. */
  int filter = taps > 1 && !depthwise;
  for (int i = 0; i < cd->nspatial && i < mm->nwindow; i++)
    filter &= mm->window[i].size <= 7 && mm->window[i].stride == 1 && mm->window[i].base_dilation <= 1;
  int64_t lanes = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
  int64_t sub = be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8;
  int padded_batch = !depthwise && k->n != batch && batch > 0 && batch % sub && cd->nspatial >= 2 &&
                     !space_to_batch(mm, ls, rs) && !tpu_dtype_is_complex(ls->dtype) &&
                     !(be->chip->mxu_fill_hidden && tpu__conv_group_window(mm));
  /* Packed input features (packed_conv) are not padded at each tap: one contraction. */
  if (filter && !(padded_batch && g == 1) && !packed_conv(be, mm, g, bat))
    k->k = round_up(rs->dims[cd->k_in], lanes) * taps;
  if (!depthwise) k->k_flops = rs->dims[cd->k_in] * taps;
  /* The XLA TPU compiler's convolution emitters keep the batch in the sublanes of the
   * vector registers (EmitAllBatchInSublanes, EmitInputBatchInSublanes...: batch second
   * minor in its layouts, {3,0,2,1} for NHWC), one output position's batch to a register's
   * 8 sublanes: each position's MXU rows are the batch rounded up to the sublanes, so a
   * batch of 1, 2 or 4 costs what one of 8 does (tune split, compiled kernels of batch
   * under 8: tpusim 0.2-0.7x the compiler's figure without this). Not where the batch is
   * in the lanes (above), nor for the depthwise emitter, which packs features instead,
   * nor for a 1-D convolution, whose positions the compiler folds into the batch until it
   * fills the sublanes (space to batch: its 1-D convolutions of batch 1 and 4 run with
   * batch 8 and 32 in the tune split's compiled programs). With the batch so padded, the
   * taps' features form one contraction rather than each padded to the lanes (tune: a 5x5
   * dilated convolution over 32 features of batch 1 or 2 costs its 25 x 32 deep GEMM; a
   * grouped one keeps each group's taps padded: its figures do not depend on the taps). */
  /* An input-dilated convolution the compiler runs with the emitters that walk the input
   * (scatter_cycles applies): each input position's batch meets every filter tap, so the MXU
   * rows are the input positions', not the dilated image's outputs (most of whose window
   * taps meet holes). Libtpu probes outside the corpora, bf16 [B,H,H,Ci] x [4,4,Ci,Co],
   * lhs_dilate 2x2, pad 3: on v5e [2,32,32,256] -> 64 features 151,711 cycles, [4,32,32,128]
   * -> 64 82,520, [1,32,32,128] -> 64 92,079, where rows over the 66x66 outputs cost 2.00 /
   * 1.83 / 1.63 times that and rows over the inputs 1.00 / 1.11 / 0.97 (v5p alike; v4 and
   * v6e, whose scatter floors bound these, unchanged). The FLOPs stay the outputs'. */
  if ((k->min_cycles > 0 || scatter_lanes > 0) && !tpu_dtype_is_complex(ls->dtype)) {
    k->mm_flops = 2.0 * (double)k->b * (double)k->m * (double)k->k_flops * (double)k->n;
    /* (the batch in the lanes: each input position's output features are the rows) */
    int64_t in = lanes_batch ? rs->dims[cd->k_out] : mm->shape.dims[cd->out_batch];
    for (int i = 0; i < cd->nspatial; i++) in *= ls->dims[cd->in_spatial[i]];
    if (in < k->m) k->m = in;
  }
  if (padded_batch) {
    if (!(k->mm_flops > 0)) k->mm_flops = 2.0 * (double)k->b * (double)k->m * (double)k->k_flops * (double)k->n;
    int64_t r = tile_batch(mm, g, bat, lanes) ? batch_tile_rows(batch, sub) : sub;
    if (one_row(be, mm, g, bat)) r = 1;
    k->m = k->m / batch * round_up(batch, r);
  }
}
