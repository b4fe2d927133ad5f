#!/bin/sh
# Session 13's compilation rules, each pinned by a families-corpus program it decides (the XLA
# TPU compiler's figures are committed; no libtpu needed): each program's time over the
# compiler's is held within 5 % of the ratio measured at 31fa29b1 (bench/fidelity/compare.py,
# own compilation), so a 10 % move in the cost of what the rule decides fails. These are
# regression pins of tpusim's own figures, not targets: where a ratio is far from 1 the
# compiler's figure leaves work out or tpusim is off (docs/fidelity.md, Known gaps).
. tests/cli/lib/preamble.sh
command -v python3 >/dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
python3 bench/fidelity/compare.py --tpusim "$BIN" --corpus bench/fidelity/families --no-mem \
  --only gemm_int8_257x3000x257,gather_points_1000x1024_m8192_bf16,gather_rows_197x64_m1_bf16,gather_along_b128n50257_k1_bf16,gather_points_32000x64_m1_f32,scatter_set_50257x128_m1_bf16,segment_sum_m16x64_n197_bf16,gconv_b4_28x28_c512to512_g16_k1_f32,einsum_ba_acb_ca_a8_b64_c1_bf16,einsum_ba_abcd_adc_a12_b128_c33_d8_bf16,gemm_int8_4096x3000x1,cummin_158x129x33_ax2_s32,cumsum_126x80x65_ax1_f32,cummax_80x126x80_ax0_s32,cummax_1024x1024_ax0_f32,approx_max_k_b1n8k8_f32,swin_fwd_b4_28x28x192h6,dwconv_b1_7x7x32_k5s1_bf16,split4_16x33x16x64_ax3_s8,resnet_basic_fwd_b8_56x56x64,tconv_b1_28x28_c128to32_k4s2_same,reduce_sum_33x50x65x65_ax01_bf16,reduce_var_33x33x65x65_ax2_bf16,gconv_b4_7x7_c2048to4096_g32_k1_bf16,swin_fwd_b4_28x28x192h6_shift,conv_grad_nchw_hwio_nchw_b8_28_c3to32_k3,concat_ax1_16x7_16x100_16x7_bf16,ew_33x33x33x65_by33x1x1x65_ops0-6_sel_tobf16_f32,random_bernoulli_8x1024,conv3d_b2_8x28x28_c16to16_k3s2,dilconv_b2_28x28_c64to256_k3d2,resnext_fwd_b8_28x28x512_g32,transpose_33x33x64x33_p1230_s8,sconv_b4_99x99_c128to128_k2s3_valid,lstm_step_b16i512h512,mbv2_fwd_b8_28x28_32to64_s2,concat_ax1_16x128x256_16x64x256_16x128x256_f32,gru_step_b8i256h256,pad_256x64_1-1_0-0_s8,attn_b8q1k2048h16kv1d128_bf16,avgpool1d_32x3000x96_w3s1_valid_bf16,gconv_b2_28x28_c128to128_g2_k3_f32,gconv_b8_7x7_c128to256_g8_k1_f32,einsum_bca_dabc_abd_a8_b16_c1000_d3_bf16,einsum_acb_bca_a_a32_b128_c1000_bf16,embedding_bag_30522x1024_b256k50_f32,layernorm_32x197_f32,resnet_bottleneck_fwd_b8_56x56x256_g1,maxpool2d_32x14x14x256_w5s2_valid_bf16,tconv_b2_16x16_c128to64_k4s2_valid,log_softmax_grad_4096x1000_f32,split4_256x1024_ax1_bf16,cumsum_scan_step_b8d256,cumsum_1024x513_ax0_bf16,cumsum_1000x1024_ax1_f32,cummin_128x8x128_ax2_rev_s32,mistral_fwd_b2s2048d512h8kv2w512,gconv_b8_28x28_c16to16_g4_k3_f32,gconv_b4_14x14_c16to32_g2_k5_bf16,conv1d_b4l4096_c128to128_k4s2,gemm_f32_1024x1x33,attn_bwd_b1q1k77h12kv12d128_f32,llama_fwd_b2s512d1024h16kv4 \
  --json "$T/r.json" > "$T/out" 2> "$T/err" || fail "compare.py exited $?: $(cat "$T/err") $(tail -5 "$T/out")"
python3 - "$T/r.json" <<'PY' || fail "a rule's cost moved"
import sys
sys.path.insert(0, "tests/cli/lib")
from ratio_pins import report_failures
# tpusim / compiler as measured (v4, v5e, v5p, v6e)
want = {
    # a concatenate's shift cost beyond its transfers (layout.c shift_regs, concat_shift_cycles)
    "concat_ax1_16x128x256_16x64x256_16x128x256_f32": (1.058, 1.033, 1.048, 1.024),
    # a standalone pad timed as the lone elementwise kernel over its result (layout.c
    # whole_window_pad; v4, whose lone_op_min_bytes is 1 B: 0.292 without it), and since
    # session 19 (padtile2, s8_pad_tiles.c) copied into 8-row tiles and back around the pad
    # as the compiler's copy, pad.0, copy.1 (0.327, 0.317, 0.323, 0.321 with the pad alone)
    "pad_256x64_1-1_0-0_s8": (0.875, 0.770, 0.967, 0.777),
    # point indices packed as the compiler packs them (gather_index.c pack_points)
    "gather_points_1000x1024_m8192_bf16": (3.248, 1.826, 2.110, 1.735),
    # take_along_axis row numbers in kernels of their own (explicit_rows); session 31
    # (trainown): its mask's reduce_and over the index's size-1 dimension a reshape, as XLA's
    # simplifier makes it (reduce_bcast.c tpu__reduce_of_one; 1.246/1.071/1.276/1.167 before)
    "gather_along_b128n50257_k1_bf16": (1.211, 0.883, 1.164, 0.976),
    # a gather of one index vector is a dynamic-slice (slice_one_index)
    "gather_points_32000x64_m1_f32": (1.531, 1.215, 1.107, 1.227),
    # a parameter's copy through VMEM on v5e/v6e (scatter_form.c)
    "scatter_set_50257x128_m1_bf16": (0.981, 16.809, 0.990, 8.035),
    # a scatter's fill and index reshape inside its kernel
    "segment_sum_m16x64_n197_bf16": (0.539, 0.942, 0.481, 0.940),
    # grouped convolution in the compiler's 5-D form with its merge copy (group_conv.c)
    # (and its merge copy of whole f32 registers, copy_kind.c tpu__group_merge_whole_tiles:
    # 2 x relayout_tile_cycles a result tile off the core, a windowed copy within VMEM;
    # 0.686 / 1.563 / 0.995 / 1.243 without it)
    "gconv_b4_28x28_c512to512_g16_k1_f32": (1.030, 1.024, 1.129, 1.034),
    # a grouped convolution's merge copy, a sublane relayout per result tile (copy_kind.c
    # group_merge_tiles; 0.642 / 0.752 / 0.886 / 1.181 without it); v6e's one-window kernel at
    # the rows it streams, no step floor (lower.c group_rows_on_chip; 1.598 before)
    # session 19 (padtile): a tile-timed kernel starts its tiles after kov + the HBM latency
    # (tile.c, the compiler's relayout intercept): v6e 1.092 before
    "gconv_b2_28x28_c128to128_g2_k3_f32": (1.056, 0.966, 0.999, 1.154),
    # no step floor for an f32 grouped convolution of whole registers kept in VMEM (lower.c
    # group_rows_on_chip; v5e 10.46 without it); its whole-register merge copy as above
    # (0.630 / 8.629 / 0.854 / 3.551 without that)
    "gconv_b8_7x7_c128to256_g8_k1_f32": (0.983, 4.111, 0.892, 2.223),
    # a narrowed reduce through byte-free reshapes (fuse_reduce.c)
    "einsum_ba_acb_ca_a8_b64_c1_bf16": (1.045, 0.951, 0.972, 0.960),
    # batched vector dots on the vector unit (tpu_dot_on_vector_unit)
    "einsum_ba_abcd_adc_a12_b128_c33_d8_bf16": (0.971, 1.038, 1.049, 1.060),
    # integer dots with a vector operand reduced in s32 (dot_reduce.c)
    "gemm_int8_4096x3000x1": (0.984, 0.958, 0.949, 0.953),
    # a short scan's HBM blocks with halo on v5p (scan_window.c); session 16: moved by its
    # kernel's value laid out row-major, [33,158,129] with 129 of 256 lanes (the compiler's
    # {1,0,2}), not least padded (0.937/1.259/0.728/1.051 before)
    # (then 1.040/1.315/0.801/1.070; the copy back out of VMEM no dearer than the copy in on
    # v5e/v6e, scan_window.c tpu__scan_result_copy)
    # (session 20, ein3: its lane-moving copy out of VMEM at vmem_transpose_tile_cycles a result
    # tile, copy_kind.c tpu__vmem_transpose_op; 0.911/0.905 on v5e/v6e before)
    "cummin_158x129x33_ax2_s32": (1.040, 0.938, 0.801, 0.960),
    # session 16: a short scan's kernel in the compiler's order, row-major, the scanned
    # dimension major (scan_rewrite.c major_order, scan_window.c tpu__scan_row_major; v5e/v6e
    # 1.058/0.704 before tpu__scan_result_copy)
    "cumsum_126x80x65_ax1_f32": (0.954, 0.673, 0.698, 0.659),
    # session 16: a scan reading a parameter laid out otherwise copies it into row-major and
    # its result back (scan_layout.c; the copy in writes VMEM on v5e/v6e, copy_kind.c)
    # session 23: its window kernel pays the window's start (layout.c pool_window, scan=1;
    # 1.122/1.041/0.812/1.076 before)
    "cummax_80x126x80_ax0_s32": (1.152, 1.199, 0.962, 0.969),
    # session 16: a long scan along the rows in blocks of rows, the lanes kept (scan_rewrite.c
    # scan_rows; 0.967/1.189/1.493/1.579 transposed)
    "cummax_1024x1024_ax0_f32": (0.855, 0.886, 1.198, 0.938),
    # operand-less VMEM kernels without a start on v5e/v6e (vmem_source.c)
    "approx_max_k_b1n8k8_f32": (1.105, 1.199, 1.271, 1.219),
    # session 14, measured at 814cb26e + the rule: a window partition and reverse are copy
    # kernels of their own (reshape_relayout.c)
    # (moved by session 14's reduce over tiles, its sums over 192 channels counted as 256:
    # 0.688/0.643/0.721/0.680 before)
    "swin_fwd_b4_28x28x192h6": (0.755, 0.714, 0.769, 0.759),
    # a value static slices read beside other users is stored once, its slices bare (fuse.c
    # shared_cheap; the roll's slices of the layer norm; measured at e7445645 + the rule)
    # session 20 (convnet): the layer norms' means f32[4,28,28] are kernels of their own, as the
    # compiler's broadcast_multiply_fusion (fuse.c scaled_reduce; 0.674/0.633/0.755/0.669 before)
    "swin_fwd_b4_28x28x192h6_shift": (0.731, 0.681, 0.810, 0.719),
    # session 14: a depthwise kernel of few rows deals its taps to the MXUs on v6e (tile_conv.c)
    "dwconv_b1_7x7x32_k5s1_bf16": (0.781, 0.642, 0.710, 1.022),
    # a row-major parameter copied into its slices' result layout (relayout.c reader_copies;
    # session 14); v5p 0.587 -> 0.885 in session 26 (that copy, HBM to HBM, paying v5p's
    # hbm_relayout_row_cycles per 128-lane row: copy_kind.c tpu__relayout_rows)
    # session 28 (v4): v4's loop kernels in the compiler's blocks (stream_block_elems,
    # stream_block_fill_cycles) 0.624 -> 0.669
    "split4_16x33x16x64_ax3_s8": (0.669, 0.888, 0.885, 0.649),
    # session 14: a transposed convolution split by space to batch (space_to_batch.c
    # s2b_dilated), measured at its commit; session 15 moved it on purpose: its result leaves
    # through the compiler's copy into {2,3,1,0} (relayout.c s2b_result_relaid; 1.104/1.303/
    # 0.981/1.222 before); session 17 (conv): its kernel's MXU rows over the input positions
    # (tile_conv.c, v5e 1.479 before)
    "tconv_b1_28x28_c128to32_k4s2_same": (1.193, 1.442, 1.091, 1.382),
    # session 14: a reduce's stream costs over the tiles of the array it reads (layout.c
    # reduce_source_elems; 65 lanes cost as 128), and a widened sum kept in f32 no unfused
    # reduce (widened_reduce: jnp.var's sums)
    "reduce_sum_33x50x65x65_ax01_bf16": (0.966, 0.972, 0.988, 1.125),
    "reduce_var_33x33x65x65_ax2_bf16": (0.980, 0.914, 0.895, 0.910),
    # session 14: a grouped convolution without a merge copy in the 5-D form (group_conv.c);
    # v6e 1.032 -> 0.839 in session 16: a one-window kernel there, its rows the batch
    # unpadded, no step floor (tile_conv.c tpu__conv_group_window, lower.c group_rows_on_chip)
    "gconv_b4_7x7_c2048to4096_g32_k1_bf16": (1.277, 1.195, 1.521, 0.839),
    # session 14: a batch-in-lanes convolution of 3 features lasts the compiler's floor
    # (tile_conv.c lanes_cycles), measured at its commit
    "conv_grad_nchw_hwio_nchw_b8_28_c3to32_k3": (0.890, 1.058, 0.847, 1.209),
    # session 18 (grp): a grouped convolution of 2-4 features a group with the batch in the
    # lanes lasts the same floor, its groups' window one tap of G output positions (tile_conv.c
    # lanes_cycles, group_window_dim; 0.405/0.458/0.324/0.389 without it); session 19 (gconv):
    # its parameter's copy into the split layout, a lane transpose, costs both sides' tiles
    # (group_conv.c mark_transposes, chips' group_transpose_*; 0.827/1.038/0.625/0.764 before)
    "gconv_b8_28x28_c16to16_g4_k3_f32": (0.980, 1.114, 0.883, 0.940),
    # session 18 (grp): the merge copy of fewer merged features than the lanes, Cog in the lanes
    # and G in the sublanes where that pads no more than W in the lanes, a sublane relayout per
    # result tile (group_conv.c marks it group_merge; 0.389/0.570/0.450/0.520 without it)
    # session 19 (padtile): tiles after kov + the HBM latency (tile.c): v5p/v6e 0.502/0.704 before
    "gconv_b4_14x14_c16to32_g2_k5_bf16": (0.747, 0.762, 0.537, 0.777),
    # a parameter's copy after another's reads VMEM (tile.c prefetched_param_copy; session 14)
    "concat_ax1_16x7_16x100_16x7_bf16": (0.953, 0.726, 0.952, 0.738),
    # session 14: a 16-bit result's stream pass over the tiles it writes (layout.c
    # streams_tiles; 65 lanes cost as 128)
    "ew_33x33x33x65_by33x1x1x65_ops0-6_sel_tobf16_f32": (0.962, 0.974, 0.961, 0.944),
    # session 14: the u64 Threefry counter kernel is the compiler's 3 u32 kernels (2 on v6e),
    # each paying the start (vmem_source.c tpu__wide_int_source_kernels; 0.640/0.421/0.505/0.622
    # without the rule), measured at its commit
    "random_bernoulli_8x1024": (0.967, 0.781, 0.885, 0.850),
    # session 14: a batch norm's per-channel sum in its convolution's kernel (fuse_merge.c
    # conv_column_sums; 1.064/1.170/1.101/1.390 before); session 17 (mdl): its result, the
    # normalisation, residual add and ReLU over the convolution's result, written in the
    # convolution's layout and relaid out by a copy (relayout.c read_conv; 0.832/0.918/0.882/1.085
    # before)
    "resnet_basic_fwd_b8_56x56x64": (0.993, 0.967, 1.038, 1.198),
    # session 17 (mdl): a kernel of elementwise ops over a convolution's result writes the
    # convolution's layout; the program's row-major result through a relayout copy after it
    # (relayout.c read_conv; the compiler's fusion.19 and copy.2; 0.850/0.896/0.852/0.898 without it)
    "resnet_bottleneck_fwd_b8_56x56x256_g1": (1.017, 0.935, 1.003, 0.924),
    # space-to-batch's unfold as a sublane relayout into T(2,128) tiles (tile.c s2b_unfold_tiles;
    # session 14, c3d; session 15 added the result's copy into {4,1,3,2,0:T(4,128)},
    # 0.410/0.389/0.500/0.457 before; v4's relayout_tile_cycles, session 15 v4cp: v4 0.429 before)
    # session 28 (v4): v4's loop kernels in the compiler's blocks, v4 0.533 -> 0.569
    "conv3d_b2_8x28x28_c16to16_k3s2": (0.569, 0.438, 0.537, 0.516),
    # session 15: space to batch's result copied into the program's least padded layout where
    # the batch does not sit next to W (relayout.c s2b_result_relaid; 0.511/0.646/0.702/0.627
    # without the rule; 0.606/0.881/0.874/0.869 before its pad into T(2,128) tiles, below);
    # v4's relayout_tile_cycles (chips/v4.json, session 15 v4cp) pinned here: v4 0.606 without it
    # session 19 (padtile): tiles after kov + the HBM latency (tile.c): v5p/v6e 0.915/0.958 before
    # session 28 (v4): v4's loop kernels in the compiler's blocks, v4 1.045 -> 1.100
    "dilconv_b2_28x28_c64to256_k3d2": (1.100, 0.985, 0.977, 1.018),
    # session 15: space to batch's pad before a halo, the parameter's batch of 4 in the
    # sublanes, into T(4,128) tiles at relayout_tile_cycles (tile.c relayout_tiles, s2b_halo;
    # 0.785/0.463/0.604/0.263 without the rule; v4 0.785 before v4's relayout_tile_cycles)
    # session 18 (s2b): its 12 MiB pad in windows of 128 tiles at pad_window_tile_cycles
    # (copy_kind.c tpu__pad_window_tiles, counted over the compiler's 8 S span; v4 has none:
    # 0.609/0.630/0.354 before)
    "sconv_b4_99x99_c128to128_k2s3_valid": (1.041, 1.010, 1.119, 0.782),
    # session 18 (s2b): a 4 MiB pad windowed on v5e (over a sixth of its 16 MiB scoped VMEM), in
    # one window on v6e (a sixth of 32 MiB) and v5p (a third of 16 MiB, writing HBM): v5e 0.805
    # without the rule, v5p/v6e unmoved
    "conv1d_b4l4096_c128to128_k4s2": (0.901, 1.042, 1.123, 0.805),
    # a grouped convolution's batch-norm statistics: the mean's sum in the convolution's
    # kernel, the variance on the split registers, every padded tile paid (group_conv.c
    # set_split_layout, layout.c reduce_tiled_elems; session 15, 0.559/0.635/0.483/0.521 before);
    # session 27 (conv): on v4/v5p the g32 convolution's input and result go through W in the
    # lanes, four copies (group_conv.c wide_route; 0.753/0.559 before)
    "resnext_fwd_b8_28x28x512_g32": (0.816, 1.100, 0.938, 0.934),
    # session 15: a transpose kernel's stream pass over the tiles it writes (layout.c
    # streams_tiles; 0.560/0.561/0.566/0.536 before)
    "transpose_33x33x64x33_p1230_s8": (0.920, 0.915, 0.902, 0.900),
    # session 15 (rnn): between weights of one size the cross-program prefetch takes XLA's
    # order, the first matmul's W over U, parameter(0) (vmem_assign.c; 1.311/1.839/1.012/1.513
    # prefetching U); session 17 (cum): its (h, h) outputs' copy (param_copy.c; 1.071/1.235/
    # 0.851/1.153 before)
    "lstm_step_b16i512h512": (1.166, 1.240, 1.026, 1.156),
    # a batch norm's mean (sum x 1/n) a kernel of its own, as every vector a compiled fusion
    # broadcasts is its parameter (fuse.c broadcast_source; session 15, 1.004/0.823/0.792/0.879
    # before); session 21-22 (convmodels): the batch norms' bf16 scale/offset widened to f32
    # in kernels of their own (fuse.c param_widening), 19 kernels as the compiler's 19
    # (1.021/0.875/0.827/0.926 before)
    "mbv2_fwd_b8_28x28_32to64_s2": (1.041, 0.909, 0.922, 1.032),
    # session 15 (gru): a matmul whose result slices cut along the lanes is its own kernel,
    # the GRU gate math its own kLoop (fuse.c lane_sliced_matmul; v5e 0.759 before); session
    # 17 (cum): its (h, h) outputs' copy (param_copy.c; 0.849/0.985/0.801/1.074 before)
    "gru_step_b8i256h256": (0.995, 0.987, 0.985, 1.074),
    # session 15 (attn): one-query p . v on the vector unit on every chip unless its scores are
    # scaled in f32 over two batch dimensions (dot_reduce.c pv_on_mxu; 0.698/0.515/0.671 on
    # v4/v5e/v5p before, on the MXU)
    "attn_b8q1k2048h16kv1d128_bf16": (1.014, 0.924, 0.941, 0.791),
    # session 16 (rw): a pooling window reads the bf16 value its widening convert fed it, one
    # kernel (window_widen.c; 2.565/1.547/3.274/2.309 with the f32 copy written first); the
    # rest is the compiler's unestimated reduce_window_sum.7
    "avgpool1d_32x3000x96_w3s1_valid_bf16": (1.591, 1.243, 1.667, 1.534),
    # a reduce of a gather's result is the lone (unfused) reduce (layout.c gathered_operand;
    # its reduce_sum.7 now within 2 % of the compiler's on v4/v5e/v5p, the program over it by
    # the gather fusion the compiler leaves unestimated; without the rule 1.64/0.92/1.02/0.52)
    "embedding_bag_30522x1024_b256k50_f32": (1.822, 1.315, 1.508, 1.124),
    # session 16 (ein): a vector product's vector laid out otherwise than its matrix is
    # relaid by a copy kernel of its own, not in the multiply-reduce kernel (fuse_relaid.c;
    # 0.678/0.826/0.718/0.866 before)
    "einsum_bca_dabc_abd_a8_b16_c1000_d3_bf16": (0.916, 0.847, 1.088, 0.934),
    # session 16 (ein): a reducing kernel's product laid out as its transposed operand lies,
    # that transpose no move (layout.c product_layout_transpose; 1.132/1.475/1.667/1.960 before)
    "einsum_acb_bca_a_a32_b128_c1000_bf16": (0.960, 1.016, 1.023, 1.010),
    # session 17: a layer norm's row mean f32[32,1] read through a reshape and a broadcast is a
    # kernel of its own, as a rank-1 mean is (fuse.c broadcast_source; 0.779/0.589/0.772/0.684
    # before)
    "layernorm_32x197_f32": (0.949, 0.764, 0.962, 0.869),
    # session 17 (gth): a gather of one row of bf16[197,64]{0,1} returned as bf16[1,64]{1,0}
    # is sliced in the table's layout and a copy kernel relays it, reading the slice on chip
    # (relayout.c tpu__result_slice_copy, copy_kind.c; 0.514/0.450/0.473/0.463 before)
    "gather_rows_197x64_m1_bf16": (1.121, 0.898, 0.945, 0.925),
    # session 17 (rwin): a pooling window reading its input in place in VMEM (its cross-program
    # prefetch) moves only its result: its start rides on the result's transfers, no HBM
    # latency, no transfer of its init constant (chip/timing.c OP_IN_PLACE, layout.c
    # read_bytes; 1.086/1.105/1.188/1.181 before)
    "maxpool2d_32x14x14x256_w5s2_valid_bf16": (1.052, 1.043, 1.030, 1.037),
    # session 17 (conv): a transposed convolution the input-walking emitter runs has its MXU
    # rows over the input positions, not the dilated image's outputs (tile_conv.c;
    # 0.820/1.432/1.304/0.789 before)
    "tconv_b2_16x16_c128to64_k4s2_valid": (0.831, 0.883, 0.946, 0.811),
    # session 17: an unfused reduce pays the lone-op cost from lone_reduce_min_bytes (v5p/v6e
    # 10 MiB; its f32[4096,1000] row max, 15.6 MiB, paid none: 0.863/0.714 on v5p/v6e before)
    "log_softmax_grad_4096x1000_f32": (0.999, 0.999, 1.039, 1.028),
    # session 17 (v4): v6e's int8 matmuls at the compiler's int8_mxu_rate, each kernel's start
    # int8_matmul_s later (timing.c op_i8; v6e 0.763 before); session 25: v4's too, its
    # int8_mxu_rate 0.919 below bf16's (v4 0.943 before)
    "gemm_int8_257x3000x257": (1.049, 0.941, 0.912, 1.023),
    # session 17: a split's bare first piece in the multi-output fusion of its scaled siblings
    # (fuse_merge.c bare_slice; 1.231/1.248/1.393/1.601 before)
    "split4_256x1024_ax1_bf16": (0.810, 0.985, 0.994, 0.957),
    # session 17 (cum): one value in two output leaves gets a copy of its own, a kernel on v4
    # and v5p, a DMA out of VMEM on v5e and v6e (param_copy.c copy_repeated, copy_kind.c
    # tpu__dup_output_copy; 0.522/0.958/0.488/0.958 before)
    "cumsum_scan_step_b8d256": (1.022, 0.968, 0.974, 0.963),
    # session 18 (rwin): a long scan along the lanes whose rows pad their tiles views the
    # padded rows, a slice kernel dropping them and a pad kernel restoring them
    # (scan_rewrite.c padded_rows; 0.390/0.475/0.402/0.674 before)
    # session 28 (v4): v4's loop kernels in the compiler's blocks, v4 0.710 -> 0.808
    "cumsum_1024x513_ax0_bf16": (0.808, 0.678, 0.689, 0.935),
    # session 18 (rwin): the copy out of a long lane scan's blocks' view is a kernel apart
    # from the blocks' combine (scan_rewrite.c scan_kernel=copy, fuse.c scan_copy;
    # 0.483/0.848/0.509/0.884 before)
    "cumsum_1000x1024_ax1_f32": (0.733, 1.071, 0.633, 1.015),
    # session 18 (rwin): v5p's short-scan window kernel of one lane tile runs in at least two
    # blocks of output rows, one per TensorCore (scan_window.c; v5p 0.573 before)
    # (session 20, ein3: its lane-moving copy out of VMEM at vmem_transpose_tile_cycles a result
    # tile, copy_kind.c tpu__vmem_transpose_op; 1.001/1.080 on v5e/v6e before)
    "cummin_128x8x128_ax2_rev_s32": (0.857, 0.938, 0.596, 0.996),
    # session 18 (mdl): grouped-query attention's normalisation exp(s - max) / sum a kernel of
    # its own before PV at a batch > 1 on v4/v5e/v5p (fuse_merge.c relaid_operand; the
    # compiler's divide_convert_fusion; 0.724/0.673/0.720/0.878 before)
    "mistral_fwd_b2s2048d512h8kv2w512": (1.025, 1.003, 1.027, 0.878),
    # session 18 (gqa): a vector kernel kept in VMEM lasts its start plus the larger of its
    # stream costs and its vector work, not their sum (timing.c port_floor_op; the softmax
    # kernels over scores in VMEM; v5e 1.088 before). The v6e figures of
    # resnet_bottleneck_fwd_b8_56x56x256_g1, resnext_fwd_b8_28x28x512_g32,
    # mbv2_fwd_b8_28x28_32to64_s2 (0.984/1.015/0.975 before) and the compiled
    # gpt2_train_b8s128d512h8 (1.109) moved with it: their resident v6e kernels
    "llama_fwd_b2s512d1024h16kv4": (1.120, 1.022, 1.156, 0.743),
    # session 18 (ein): a dot contracting only size-1 dimensions is a product of broadcasts,
    # one loop kernel on the vector unit (dot_reduce.c outer_dot; 2.027/2.005/2.054/1.873 on
    # the MXU before); since session 29 (outlayout) its f32[1024,33] values counted in the
    # result's least padded {0,1} registers (tile.c value_vregs: 1.194/1.007/0.993/0.997 before)
    "gemm_f32_1024x1x33": (1.037, 0.971, 0.976, 0.963),
    # session 18 (ein): such a product leaving the program transposed, a batch dimension in
    # the result's least padded tile, is written in the dot's order and relaid by a copy
    # (relayout.c dot_dims; 0.519/0.709/0.869/0.808 without the copy, 0.670/0.835/1.126/0.866
    # on the MXU before); its sum over the heads in the multi-query backward keeps the MXU
    # (module.c batch_summed)
    # (session 20, ein3: that copy reads the product from VMEM and pays
    # vmem_transpose_tile_cycles a result tile, copy_kind.c tpu__vmem_transpose_op; 0.804/0.888
    # on v5e/v6e before); session 20 (convnet): its layer norm's mean f32[1,77] is a kernel of
    # its own, as the compiler's broadcast_multiply_fusion (fuse.c scaled_reduce;
    # 0.613/0.947/0.993/1.013 before)
    "attn_bwd_b1q1k77h12kv12d128_f32": (0.704, 1.011, 1.039, 1.052),
}
sys.exit(1 if report_failures(sys.argv[1], want) else 0)
PY
# Rules of the compiler's compiled programs (compare.py --compiled: tpusim times the XLA TPU
# compiler's own fusions, layouts and memory spaces), pinned alike.
python3 bench/fidelity/compare.py --tpusim "$BIN" --corpus bench/fidelity/families --no-mem --compiled \
  --only gpt2_train_b8s128d512h8,transpose_64x64x33x16_p3012_fused_s8,gru_step_b32i256h256 \
  --json "$T/c.json" > "$T/cout" 2> "$T/cerr" || fail "compare.py --compiled exited $?: $(cat "$T/cerr") $(tail -5 "$T/cout")"
python3 - "$T/c.json" <<'PY' || fail "a compiled-program rule's cost moved"
import sys
sys.path.insert(0, "tests/cli/lib")
from ratio_pins import report_failures
want = {
    # session 17 (v4): a matmul kernel writing its result into VMEM for the program's own
    # copy-start to take to HBM writes on chip (vmem_assign.c mark_evictions; the SGD
    # update fused into each weight gradient; 1.016/1.023/1.020/1.227 before)
    "gpt2_train_b8s128d512h8": (1.016, 1.011, 1.020, 1.041),
    # session 18 (cat): a copy inside a fusion streams the tiles it writes, as a transpose
    # kernel does (stream_cost.c streams_tiles; 0.600/0.632/0.629/0.605 before)
    "transpose_64x64x33x16_p3012_fused_s8": (0.900, 0.940, 0.915, 0.920),
    # session 18 (unit): an output leaf copied out of CMEM (v4) / VMEM (v5p) is a kernel, not
    # an identity (simplify.c try_identity); on v5e/v6e the DMA engines' transfer (copy_kind.c
    # tpu__dup_output_copy; 0.855/1.004/0.814/1.090 before)
    "gru_step_b32i256h256": (0.994, 1.009, 0.997, 1.093),
}
sys.exit(1 if report_failures(sys.argv[1], want) else 0)
PY
[ $fails -eq 0 ] && echo "fidelity_rules: ok"
exit $fails
