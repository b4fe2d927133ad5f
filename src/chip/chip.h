/* Chip configuration: one TPU generation's numbers, loaded from chips/NAME.json with sources. */
#ifndef TPU_CHIP_CHIP_H
#define TPU_CHIP_CHIP_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"

/* Relative tolerance between a listed peak and 2 * MACs * clock; beyond it the file must
 * explain the difference with a "mismatch" text on the peak field. */
#define TPU_CHIP_PEAK_TOL 0.02

typedef enum {
  TPU_TOPO_NONE = 0, /* no inter-chip links (v1: a PCIe card) */
  TPU_TOPO_TORUS_2D, /* "2d-torus": 4 ICI links per chip */
  TPU_TOPO_TORUS_3D  /* "3d-torus": 6 ICI links per chip */
} tpu_topology_kind;

/* Which axes of a slice have wrap-around links (without them a ring collective over that
 * axis takes about twice as long [SB]). */
typedef enum {
  TPU_WRAP_NONE = 0,  /* "none": never */
  TPU_WRAP_FULL_AXIS, /* "full-axis": only an axis as long as the topology's maximum */
  TPU_WRAP_MULTIPLE   /* "multiple": only an axis whose length is a multiple of wrap_multiple */
} tpu_wrap_rule;

/* How much a number can be trusted. */
typedef enum {
  TPU_PROV_PUBLISHED = 0, /* stated by the cited source */
  TPU_PROV_DERIVED,       /* computed from other published numbers (the note says how) */
  TPU_PROV_UNCERTAIN,     /* sources disagree, are secondary or it is an assumption */
  TPU_PROV_UNKNOWN,       /* not published; the value is null and the field reads 0 */
  TPU_PROV_ABSENT         /* the chip has no such thing; the value is null and reads 0 */
} tpu_chip_prov_status;

/* The fields, in file and display order. X(ID, member, kind, required, unit, meaning);
 * kind: 'f' positive double, 'i' positive integer, 't' dtype name, 'o' topology,
 * 'w' wrap rule, 'm' array of 1-3 positive integers. ORDER CHIP FIELD. */
#define TPU_CHIP_FIELDS(X)                                                                   \
  X(CLOCK_HZ, clock_hz, 'f', 1, "Hz", "core clock")                                          \
  X(TENSORCORES, tensorcores, 'i', 1, "", "TensorCores per chip")                            \
  X(MXUS_PER_CORE, mxus_per_core, 'i', 1, "", "matrix units per TensorCore")                 \
  X(MXU_ROWS, mxu_rows, 'i', 1, "PEs", "systolic array rows (K-tile depth)")                 \
  X(MXU_COLS, mxu_cols, 'i', 1, "PEs", "systolic array columns (N-tile width)")              \
  X(MXU_WEIGHT_LOAD_CYCLES, mxu_weight_load_cycles, 'i', 0, "cycles", "time to load one weight tile (default: mxu_rows, a row per cycle)") \
  X(INT8_WEIGHT_LOAD_CYCLES, int8_weight_load_cycles, 'i', 0, "cycles", "time an 8-bit integer weight tile's load adds to every fold, not overlapped with the rows (default: none, as bf16)") \
  X(MAC_INPUT, mac_input, 't', 1, "", "MXU multiplier input type")                           \
  X(MAC_ACCUM, mac_accum, 't', 1, "", "MXU accumulator type")                                \
  X(INT8_RATE, int8_rate, 'f', 0, "x", "int8 MACs per PE per cycle (vs one native MAC)")     \
  X(VECTOR_LANES, vector_lanes, 'i', 0, "", "vector unit lanes")                             \
  X(VECTOR_SUBLANES, vector_sublanes, 'i', 0, "", "vector unit sublanes")                    \
  X(VECTOR_OPS_PER_CYCLE, vector_ops_per_cycle, 'f', 0, "", "register-wide VPU ops per cycle per core") \
  X(VECTOR_LOAD_OPS, vector_load_ops, 'f', 0, "ops", "VPU op-equivalents per register each read of a parameter inside a loop fusion costs; with it a broadcast scalar costs none (absent: neither)") \
  X(EUP_PUSHES_PER_CYCLE, eup_pushes_per_cycle, 'f', 0, "", "transcendental-unit pushes per cycle per core, each on one 32-bit vector register (default 1)") \
  X(VMEM_BYTES, vmem_bytes, 'i', 1, "B", "on-chip vector memory per TensorCore")             \
  X(CMEM_BYTES, cmem_bytes, 'i', 0, "B", "on-chip common memory per chip")                   \
  X(ACC_BYTES, acc_bytes, 'i', 0, "B", "separate MXU accumulator memory per chip")           \
  X(HBM_BYTES, hbm_bytes, 'i', 1, "B", "off-chip memory capacity per chip")                  \
  X(HBM_BW, hbm_bw, 'f', 1, "B/s", "off-chip memory bandwidth per chip")                     \
  X(HBM_LATENCY_S, hbm_latency_s, 'f', 0, "s", "off-chip memory access latency")             \
  X(HBM_EFFICIENCY, hbm_efficiency, 'f', 0, "", "fraction of hbm_bw a streaming DMA sustains")  \
  X(KERNEL_OVERHEAD_S, kernel_overhead_s, 'f', 0, "s", "fixed cost of starting each kernel")   \
  X(MATMUL_OVERHEAD_S, matmul_overhead_s, 'f', 0, "s", "extra start cost of a matmul kernel whose MXU operand comes from HBM")  \
  X(MATMUL_BASE_S, matmul_base_s, 'f', 0, "s", "extra start cost of every matmul kernel")  \
  X(MATMUL_WRITE_S, matmul_write_s, 'f', 0, "s", "extra start cost of a matmul kernel that writes its result to HBM")  \
  X(INT8_MXU_RATE, int8_mxu_rate, 'f', 0, "", "rate a matmul of 8-bit integers runs at on the MXU, relative to bf16 (default int8_rate)")  \
  X(INT8_MATMUL_S, int8_matmul_s, 'f', 0, "s", "extra start cost of a matmul kernel of 8-bit integers")  \
  X(STREAM_PASS_BYTES, stream_pass_bytes, 'f', 0, "B/elem", "HBM-port cost of a vector kernel that reduces or writes values narrower than 32 bits") \
  X(RESULT_PASS_BYTES, result_pass_bytes, 'f', 0, "B/elem", "HBM-port cost of a matmul kernel's 16-bit result (default: stream_pass_bytes)") \
  X(VMEM_READ_COST, vmem_read_cost, 'f', 0, "", "fraction of an HBM read's cost a vector kernel pays to read an operand kept in VMEM (default 0)") \
  X(VMEM_WRITE_COST, vmem_write_cost, 'f', 0, "", "fraction of an HBM write's cost a vector kernel pays to write a result into VMEM that the program's own copy takes to HBM (default 0)") \
  X(MATMUL_STREAM_EFFICIENCY, matmul_stream_efficiency, 'f', 0, "", "rate a matmul kernel's reads stream at, as a fraction of a vector kernel's (default 1)") \
  X(LONE_OP_BYTES, lone_op_bytes, 'f', 0, "B/elem", "HBM-port cost of an unfused elementwise op or reduce") \
  X(LONE_OP_MIN_BYTES, lone_op_min_bytes, 'i', 0, "B", "smallest unfused op (bytes in and out) that pays lone_op_bytes") \
  X(LONE_REDUCE_MIN_BYTES, lone_reduce_min_bytes, 'i', 0, "B", "smallest unfused reduce (bytes in and out) that pays lone_op_bytes (absent: lone_op_min_bytes)") \
  X(TRANSPOSE_BYTES, transpose_bytes, 'f', 0, "B/elem", "HBM-port cost of a transpose that moves the minor dimension") \
  X(ROW_BROADCAST_CYCLES, row_broadcast_cycles, 'f', 0, "cycles", "cost per row and TensorCore of a vector kernel's broadcast along the lanes (a per-row statistic over a row)") \
  X(DOT_VECTOR_GROUP_CYCLES, dot_vector_group_cycles, 'f', 0, "cycles", "cost per row group (8 rows of the product's registers) and TensorCore of a vector-unit dot's vector broadcast along the matrix's lanes (absent: row_broadcast_cycles per row)") \
  X(VPU_BATCHED_VECTOR_DOTS, vpu_batched_vector_dots, 'i', 0, "", "1: a batched dot whose vector operand has a size-1 free dimension always runs on the vector unit (absent: the matrix unit when its scores are scaled in f32 over two batch dimensions, dot_reduce.c pv_on_mxu)") \
  X(MXU_BATCH_SPREAD, mxu_batch_spread, 'i', 0, "", "1: a batched matmul may give each MXU whole products (absent: its MXUs split every product)") \
  X(MXU_FILL_HIDDEN, mxu_fill_hidden, 'i', 0, "", "1: in a matmul kernel that moves nothing to or from HBM, each instruction's systolic fill and drain (mxu_rows + mxu_cols - 2 cycles) overlap the next one's work (absent: exposed)") \
  X(MATMUL_RESIDENT_NO_START, matmul_resident_no_start, 'i', 0, "", "1: a matmul kernel with no transfer (its operands and 32-bit result all stay in VMEM) pays no kernel start, only its MXU work (absent: kernel_overhead_s and matmul_base_s)") \
  X(EPILOGUE_REDUCE_SERIAL, epilogue_reduce_serial, 'i', 0, "", "1: a matmul kernel whose epilogue reduces its product (a row max, a row sum) lasts at least its transfers and its vector work end to end (absent: they overlap)") \
  X(CONV_GROUP_STEP_CYCLES, conv_group_step_cycles, 'f', 0, "cycles", "time of one step of a convolution kernel with the batch in the sublanes: one output position's batch (8 sublanes) for one group, whatever the features and window (absent: its MXU work alone)") \
  X(CMEM_WRITE_PASS, cmem_write_pass, 'i', 0, "", "1: a loop kernel writing a value to CMEM (memory space S(3), where the compiler keeps values between kernels) pays the stream pass (stream_pass_bytes per element), as one that reduces or writes a result narrower than 32 bits, once (absent: a write to CMEM costs what one to HBM does)") \
  X(STREAM_BLOCK_ELEMS, stream_block_elems, 'f', 0, "elements", "a loop kernel that does not reduce runs in blocks the compiler sizes by its result's elements E: round(sqrt(E / stream_block_elems)) blocks, whose last one's vector work is exposed (absent: tiles of about 1 MiB moved)") \
  X(STREAM_BLOCK_FILL_CYCLES, stream_block_fill_cycles, 'f', 0, "cycles", "a loop kernel of several blocks (stream_block_elems) lasts at least its start, the HBM latency, its transfers at the streaming rate, one block's vector work and this many cycles (absent: its transfers overlap its vector work from the first tile to the last)") \
  X(CONCAT_SHIFT_CYCLES, concat_shift_cycles, 'f', 0, "cycles", "a concatenate along a dimension other than the lanes (the compiler's pad-and-combine fusion): cost per vector register of its result that lies before an operand along that dimension, summed over its operands, beyond its transfers (absent: none)") \
  X(WINDOW_START_CYCLES, window_start_cycles, 'f', 0, "cycles", "start of a pooling window kernel (a reduce-window sliding along major dimensions only) beyond kernel_overhead_s, serial with its transfers (absent: none)") \
  X(SCAN_START_CYCLES, scan_start_cycles, 'f', 0, "cycles", "start of a scan's window kernel (a reduce-window over the whole of a major dimension) beyond kernel_overhead_s, where it is not the pooling window's (absent: window_start_cycles)") \
  X(WINDOW_HBM_FACTOR, window_hbm_factor, 'f', 0, "", "a pooling window kernel that reads its input from HBM (not in place in VMEM): its transfers to and from HBM take this factor of their stream time (absent: 1)") \
  X(CONV_SCATTER_CYCLES, conv_scatter_cycles, 'f', 0, "cycles", "an input-dilated (transposed) convolution with the batch in the sublanes: time per input position's batch, filter tap, 128 input and 128 output features (absent: its MXU work alone)") \
  X(CONV_SCATTER_TAP_CYCLES, conv_scatter_tap_cycles, 'f', 0, "cycles", "the same convolution: least time per input position's batch and filter tap, whatever the features") \
  X(CONV_SCATTER_OUT_CYCLES, conv_scatter_out_cycles, 'f', 0, "cycles", "the same convolution: least time per output position's batch and 128 output features") \
  X(RELAYOUT_TILE_CYCLES, relayout_tile_cycles, 'f', 0, "cycles", "a compiled program's copy that keeps the lanes' dimension and reorders the others (a sublane relayout, VMEM on a side): least time per tile of its result after its kernel start, whatever the tile's rows (absent: its register work alone)") \
  X(CMEM_RELAYOUT_TILE_CYCLES, cmem_relayout_tile_cycles, 'f', 0, "cycles", "a compiled program's sublane relayout copy (the lanes' dimension kept, the others reordered) whose result is written to CMEM (S(3)): least time per result tile after its kernel start, beside cmem_relayout_sublane_cycles for each 32-bit sublane the tile fills, whole 32-bit registers included (absent: relayout_tile_cycles a tile, whole registers not priced)") \
  X(CMEM_RELAYOUT_SUBLANE_CYCLES, cmem_relayout_sublane_cycles, 'f', 0, "cycles", "the same copy: further time per result tile and 32-bit sublane of the tile (bf16 T(8,128)(2,1): 4, f32 T(8,128): 8)") \
  X(GROUP_TRANSPOSE_TILE_CYCLES, group_transpose_tile_cycles, 'f', 0, "cycles", "a grouped convolution's layout copy into or out of its group-split layout that moves the lanes' dimension (W in the lanes on the other side): its least time's part per tile of the split side (absent: its transfers alone)") \
  X(GROUP_TRANSPOSE_WIDE_TILE_CYCLES, group_transpose_wide_tile_cycles, 'f', 0, "cycles", "the same copy: its least time's part per tile of the side with W in the lanes") \
  X(GROUP_TRANSPOSE_START_CYCLES, group_transpose_start_cycles, 'f', 0, "cycles", "the same copy: its least time's fixed part") \
  X(VMEM_TRANSPOSE_TILE_CYCLES, vmem_transpose_tile_cycles, 'f', 0, "cycles", "a copy or transpose that moves the lanes' dimension, reading its operand in VMEM and writing HBM: time per tile of its result after its kernel start, whatever its dtype, in place of its transfers' stream costs (absent: a read from VMEM, the transpose's and the stream pass's per-element costs)") \
  X(COPY_IN_TRANSPOSE_TILE_CYCLES, copy_in_transpose_tile_cycles, 'f', 0, "cycles", "a compiled program's copy from HBM into VMEM (S(1)) that moves the lanes' dimension: least time per tile (8 rows of 128 lanes) of its HBM operand's layout (absent: as any copy)") \
  X(SMALL_TILE_TRANSPOSE_CYCLES, small_tile_transpose_cycles, 'f', 0, "cycles", "a compiled program's copy that moves the lanes' dimension with one side in tiles of fewer than 8 rows (T(1,128), T(2,128), T(4,128)), not within VMEM: least time per tile of that side after its kernel start (absent: its transfers and register work alone)") \
  X(HBM_RELAYOUT_TILE_CYCLES, hbm_relayout_tile_cycles, 'f', 0, "cycles", "a compiled program's loop fusion holding a copy that keeps the lanes' dimension and reorders the others into tiles of fewer than 8 rows (a sublane relayout), HBM on every side: time per tile of the copy's result beyond its transfers at the streaming rate, after its kernel start (absent: its transfers and register work alone)") \
  X(HBM_RELAYOUT_ROW_CYCLES, hbm_relayout_row_cycles, 'f', 0, "cycles", "a copy or transpose that moves the lanes' dimension between HBM arrays: least time per row of 128 lanes of its two sides (each side's elements over its minor dimension, that dimension in blocks of 128) and TensorCore, start to end, the cores sharing the rows (absent: its transfers and register work alone)") \
  X(WHOLE_RELAYOUT_TILE_CYCLES, whole_relayout_tile_cycles, 'f', 0, "cycles", "a copy of 32-bit values within VMEM that keeps the lanes' dimension and gathers tiles of fewer than 8 rows into whole registers (T(8,128)): time per tile of its result, no kernel start (absent: the windowed copy of tile.c)") \
  X(WHOLE_RELAYOUT_WINDOW_CYCLES, whole_relayout_window_cycles, 'f', 0, "cycles", "the same copy: time per window of it (one; 128 result tiles each where its two sides outgrow scoped_vmem_bytes)") \
  X(WHOLE_RELAYOUT_OPERAND_ROWS, whole_relayout_operand_rows, 'i', 0, "", "the same copy: the most rows of its operand's tiles (8: from whole registers too; absent: fewer than 8)") \
  X(PAD_WINDOW_TILE_CYCLES, pad_window_tile_cycles, 'f', 0, "cycles", "a pad into VMEM whose result is more than a sixth of scoped_vmem_bytes, which the compiler runs in windows of 128 tiles: time per tile of its result (absent: as any pad)") \
  X(PATCH_RELAYOUT_BLOCK_CYCLES, patch_relayout_block_cycles, 'f', 0, "cycles", "a patch embedding's image copied from its least padded layout (W in the lanes, H in the sublanes) into the batch in the lanes and its features in the sublanes: time per block of 8 rows and up to 128 lanes of the source, beyond the per-row and per-lane parts (absent: a transfer)") \
  X(PATCH_RELAYOUT_ROW_CYCLES, patch_relayout_row_cycles, 'f', 0, "cycles", "the same copy: time per block and source row of it (batch times features)") \
  X(PATCH_RELAYOUT_LANE_CYCLES, patch_relayout_lane_cycles, 'f', 0, "cycles", "the same copy: time per block and lane of it the source fills (W's, up to 128)") \
  X(WIDE_INT_SOURCE_KERNELS, wide_int_source_kernels, 'i', 0, "", "kernels the compiler runs for an operandless kernel of tpusim's own compilation with a 64-bit integer result (JAX's u64 Threefry counters), its 32-bit words computed apart; each pays the kernel start unless they fill whole registers in VMEM (absent: one kernel)") \
  X(SORT_NETWORK, sort_network, 'i', 0, "", "1: a sort is timed as the compiler's bitonic network counted from libtpu's code (sort_cost.c; absent: 3 vector ops and one permute pass per register and stage)") \
  X(SORT_LANE_STAGE_CYCLES, sort_lane_stage_cycles, 'f', 0, "cycles", "a sort along the lanes: the wait on the permute unit of each stage of its network that exchanges within registers (absent: none)") \
  X(CONV_LANES_START_CYCLES, conv_lanes_start_cycles, 'f', 0, "cycles", "a convolution of 3 or 4 output features with the batch in the lanes (features in the sublanes, a window of several taps): fixed part of its least time (absent: its MXU work alone)") \
  X(CONV_LANES_POSITION_CYCLES, conv_lanes_position_cycles, 'f', 0, "cycles", "the same convolution: least time per output position") \
  X(CONV_LANES_TAP_CYCLES, conv_lanes_tap_cycles, 'f', 0, "cycles", "the same convolution: least time per output position, filter tap and 128 input features") \
  X(CONV_PACKED_CYCLES, conv_packed_cycles, 'f', 0, "cycles", "a convolution of at most 4 input features with the batch in the sublanes (its features packed in the sublanes): least time per output position's batch (16 rows) and MXU weight tile, plus one tile (absent: its MXU work alone)") \
  X(SCOPED_VMEM_BYTES, scoped_vmem_bytes, 'i', 0, "B", "VMEM per TensorCore one kernel's tile buffers may take (default: 3/4 of vmem_bytes)") \
  X(SCAN_WINDOW_BYTES, scan_window_bytes, 'i', 0, "B", "most bytes of input and output rows one step of a short scan's window kernel streaming from HBM holds: the scan runs in blocks whose input rows carry the window's halo (absent: one pass)") \
  X(XPREFETCH_MAX_BYTES, xprefetch_max_bytes, 'i', 0, "B", "largest parameter prefetched into VMEM across steps (default: what fits)") \
  X(ICI_LINKS, ici_links, 'i', 0, "", "inter-chip links per chip")                           \
  X(ICI_BW_PER_LINK, ici_bw_per_link, 'f', 0, "B/s", "bandwidth per ICI link, one way")      \
  X(ICI_LATENCY_S, ici_latency_s, 'f', 0, "s", "ICI latency per hop")                        \
  X(WINDOWED_EINSUM_MIN_CHIPS, windowed_einsum_min_chips, 'i', 0, "chips", "smallest ring of chips round which the XLA TPU compiler runs a dot's all-gather or reduce-scatter as a windowed-einsum loop (absent: never)") \
  X(WINDOWED_EINSUM_MAX_CHIPS, windowed_einsum_max_chips, 'i', 0, "chips", "largest such program (absent: no bound)") \
  X(WINDOWED_EINSUM_RING4_MULTIPLIER, windowed_einsum_ring4_multiplier, 'f', 0, "", "XLA's communication multiplier for a windowed einsum's reduce-scatter round a ring of 4 devices, as the XLA TPU compiler's decisions give it (absent: such rings never loop)") \
  X(REDUCE_SCATTER_SPAN_BYTES, reduce_scatter_span_bytes, 'i', 0, "B", "largest local operand the XLA TPU compiler's all-reduce-scatter fusion scatters along its rows in one span; more is padded over a group of 2 or 4 (rs_pad.c; absent: never)") \
  X(TOPOLOGY, topology, 'o', 1, "", "interconnect topology")                                 \
  X(MAX_DIMS, max_dims, 'm', 0, "chips", "largest ICI slice shape")                          \
  X(MAX_CHIPS, max_chips, 'i', 1, "chips", "largest ICI-connected slice")                    \
  X(POD_CHIPS, pod_chips, 'i', 0, "chips", "chips per pod")                                  \
  X(WRAPAROUND, wraparound, 'w', 0, "", "which slice axes have wrap-around links")           \
  X(WRAP_MULTIPLE, wrap_multiple, 'i', 0, "chips", "axis length multiple that wraps")        \
  X(CHIPS_PER_HOST, chips_per_host, 'i', 1, "", "chips attached to one host")                \
  X(PCIE_BW, pcie_bw, 'f', 0, "B/s", "host link bandwidth per chip, one way")                \
  X(DCN_BW, dcn_bw, 'f', 0, "B/s", "data-center network bandwidth per chip")                 \
  X(DCN_HOST_BW, dcn_host_bw, 'f', 0, "B/s", "data-center network bandwidth out of one host (its NICs), shared by its chips") \
  X(DCN_LATENCY_S, dcn_latency_s, 'f', 0, "s", "latency of one dependent transfer between slices over DCN") \
  X(PEAK_BF16_FLOPS, peak_bf16_flops, 'f', 0, "FLOP/s", "listed peak bf16 per chip")         \
  X(PEAK_INT8_OPS, peak_int8_ops, 'f', 0, "OP/s", "listed peak int8 per chip")               \
  X(PEAK_FP8_OPS, peak_fp8_ops, 'f', 0, "FLOP/s", "listed peak fp8 per chip")

typedef enum {
#define X(id, member, kind, req, unit, meaning) TPU_CHIP_##id,
  TPU_CHIP_FIELDS(X)
#undef X
      TPU_CHIP_NFIELDS
} tpu_chip_field;

/* Where a number came from. The texts are the loader's (tpu_chip_text): never NULL once
 * loaded ("" when empty), the same pointer for the same text, alive until the process ends;
 * so a tpu_chip stays plain data of 4.7 KB (its texts in arrays made it 86 KB, cleared
 * and hashed on every load: a sixth of a small warm `tpusim run`'s page faults). */
typedef struct tpu_chip_prov {
  tpu_chip_prov_status status;
  const char *source;   /* source keys, e.g. "ISCA23" or "CL, SB"; "derived" or "none" */
  const char *note;     /* how it was derived / why uncertain; may be empty */
  const char *mismatch; /* peaks only: why the listed peak differs from 2*MACs*clock */
} tpu_chip_prov;

/* The longest texts a chip file may give (bytes, less the NUL): as when they were arrays. */
#define TPU_CHIP_SOURCE_MAX 63
#define TPU_CHIP_NOTE_MAX 399
#define TPU_CHIP_KEY_MAX 23
#define TPU_CHIP_CITE_MAX 239

/* The loader's copy of text s[0..n) (see tpu_chip_prov): "" when n is 0, NULL when out of
 * memory. */
const char *tpu_chip_text(const char *s, size_t n);

#define TPU_CHIP_MAX_SOURCES 12

/* One chip. Unknown or absent numbers read 0 (check prov[].status). All sizes in bytes,
 * bandwidths in bytes/s, times in seconds, rates per second. Plain data: copy freely. */
typedef struct tpu_chip {
  char name[32];   /* "v5e" */
  char title[64];  /* "TPU v5e" */
  char path[600];  /* the file it was loaded from */
  double clock_hz;
  int64_t tensorcores, mxus_per_core, mxu_rows, mxu_cols;
  int64_t mxu_weight_load_cycles; /* 0: mxu_rows (one row per cycle) */
  int64_t int8_weight_load_cycles; /* 0: an s8/u8 weight loads as a bf16 one (mxu_weight_load_cycles) */
  tpu_dtype mac_input, mac_accum; /* TPU_BF16 + TPU_F32, or TPU_S8 + TPU_S32 (v1) */
  double int8_rate;
  int64_t vector_lanes, vector_sublanes;
  double vector_ops_per_cycle; /* 0 when unknown: one register-wide VPU op per cycle */
  double vector_load_ops;      /* 0 when unknown: parameter reads free, broadcast scalars one op a register */
  double eup_pushes_per_cycle; /* 0 when unknown: one push per cycle */
  int64_t vmem_bytes, cmem_bytes, acc_bytes, hbm_bytes;
  double hbm_bw, hbm_latency_s;
  double hbm_efficiency; /* 0 when unknown: DMAs stream at hbm_bw */
  double kernel_overhead_s; /* 0 when unknown: kernels start at the barrier */
  double matmul_overhead_s; /* 0 when unknown: added to kernel_overhead_s for MXU kernels whose
                             * matmul operand comes from HBM */
  double matmul_base_s;     /* 0 when unknown: added for every MXU kernel */
  double matmul_write_s;    /* 0 when unknown: added for MXU kernels writing their result to HBM */
  double int8_mxu_rate;     /* 0 when absent: int8_rate (the timing of 8-bit integer matmuls) */
  double int8_matmul_s;     /* 0 when absent: added for MXU kernels of 8-bit integers */
  /* Per-element costs on the HBM port, in bytes at the streaming rate, that the XLA TPU
   * compiler's cost model charges vector kernels beyond their transfers (0 when unknown:
   * none; docs/timing.md, docs/fidelity.md). */
  double stream_pass_bytes, lone_op_bytes;
  double result_pass_bytes; /* 0: stream_pass_bytes (use tpu_chip_result_pass) */
  double vmem_read_cost;    /* 0 when absent: reading VMEM costs a vector kernel no transfer */
  double vmem_write_cost;   /* 0 when absent: writing VMEM for a copy out costs no transfer */
  double matmul_stream_efficiency; /* 0 when absent: matmul reads stream as vector kernels' do */
  int64_t lone_op_min_bytes;
  int64_t lone_reduce_min_bytes; /* 0 when absent: lone_op_min_bytes */
  double transpose_bytes;
  double row_broadcast_cycles; /* 0 when absent: broadcasts along the lanes cost nothing extra */
  double dot_vector_group_cycles; /* 0 when absent: a vector-unit dot's vector broadcast along the lanes costs row_broadcast_cycles per row */
  int64_t vpu_batched_vector_dots; /* 0 when absent (dot_reduce.c) */
  int64_t mxu_batch_spread;        /* 0 when absent: every MXU works on each product (timing.c) */
  int64_t matmul_resident_no_start; /* 0 when absent: a matmul kernel kept in VMEM pays kernel_overhead_s and matmul_base_s (timing.c kernel_start) */
  int64_t epilogue_reduce_serial;  /* 0 when absent: a reducing epilogue's vector work overlaps its kernel's transfers (timing.c port_floor_op) */
  int64_t mxu_fill_hidden;         /* 0 when absent: each matmul instruction exposes its fill and drain (timing.c) */
  double conv_scatter_cycles, conv_scatter_tap_cycles, conv_scatter_out_cycles; /* 0: absent (tile_conv.c) */
  double conv_packed_cycles;       /* 0: absent (tile_conv.c packed_cycles) */
  double conv_lanes_start_cycles, conv_lanes_position_cycles, conv_lanes_tap_cycles; /* 0: absent (tile_conv.c lanes_cycles) */
  double relayout_tile_cycles;     /* 0: absent (tile.c relayout_tiles) */
  double cmem_relayout_tile_cycles, cmem_relayout_sublane_cycles; /* 0: absent (copy_kind.c tpu__relayout_tile_cost) */
  double group_transpose_tile_cycles, group_transpose_wide_tile_cycles, group_transpose_start_cycles; /* 0: absent (tile.c) */
  double pad_window_tile_cycles;   /* 0: absent (copy_kind.c tpu__pad_window_tiles) */
  double whole_relayout_tile_cycles, whole_relayout_window_cycles; /* 0: absent (tile.c) */
  int64_t whole_relayout_operand_rows; /* 0: absent, operand tiles of fewer than 8 rows (copy_kind.c) */
  double patch_relayout_block_cycles, patch_relayout_row_cycles, patch_relayout_lane_cycles; /* 0: absent (copy_kind.c tpu__patch_relayout_cycles) */
  double copy_in_transpose_tile_cycles; /* 0: absent (copy_kind.c tpu__copy_in_transpose_tiles) */
  double small_tile_transpose_cycles; /* 0: absent (copy_kind.c tpu__small_tile_transpose_tiles) */
  double hbm_relayout_tile_cycles; /* 0: absent (copy_kind.c tpu__hbm_relayout_tiles) */
  double hbm_relayout_row_cycles;  /* 0: absent (copy_kind.c tpu__relayout_rows) */
  double vmem_transpose_tile_cycles; /* 0: absent (copy_kind.c tpu__vmem_transpose_op) */
  int64_t wide_int_source_kernels; /* 0 when absent: one kernel (vmem_source.c) */
  int64_t sort_network;            /* 0 when absent: the earlier count (sort_cost.c) */
  double sort_lane_stage_cycles;   /* 0: absent (sort_cost.c) */
  int64_t cmem_write_pass;         /* 0 when absent: a write to CMEM costs what one to HBM does (stream_cost.c) */
  double stream_block_elems;       /* 0 when absent: a loop kernel's tiles move about 1 MiB (schedule.c plan_stream) */
  double stream_block_fill_cycles; /* 0 when absent: no floor for a loop kernel of several blocks (timing.c) */
  double concat_shift_cycles;      /* 0 when absent: a concatenate costs its transfers (layout.c) */
  double window_start_cycles;      /* 0 when absent: a pooling window kernel starts as others do (layout.c) */
  double scan_start_cycles;        /* 0 when absent: a scan's window kernel starts as a pooling one (layout.c) */
  double window_hbm_factor;        /* 0 when absent: a pooling window kernel reading HBM streams as others do (timing.c) */
  double conv_group_step_cycles;   /* 0 when absent: a grouped convolution's steps cost only their MXU work (timing.c) */
  int64_t scoped_vmem_bytes;   /* 0: 3/4 of vmem_bytes (schedule.c tpu__vmem_budget) */
  int64_t scan_window_bytes;   /* 0: a short scan streams its input once (scan_window.c) */
  int64_t xprefetch_max_bytes; /* 0: the largest parameter that fits VMEM (vmem_assign.c) */
  int64_t ici_links;
  double ici_bw_per_link, ici_latency_s;
  int64_t windowed_einsum_min_chips; /* 0 when absent: no windowed einsum (spmd_window.c) */
  int64_t windowed_einsum_max_chips; /* 0 when absent: no upper bound */
  double windowed_einsum_ring4_multiplier; /* 0 when absent: no windowed einsum round 4 devices (spmd_window.c) */
  int64_t reduce_scatter_span_bytes; /* 0 when absent: scatters never padded (rs_pad.c) */
  tpu_topology_kind topology;
  int64_t max_dims[3]; /* unused axes are 1 */
  int64_t max_chips, pod_chips;
  tpu_wrap_rule wraparound;
  int64_t wrap_multiple, chips_per_host;
  double pcie_bw, dcn_bw, dcn_host_bw, dcn_latency_s;
  double peak_bf16_flops, peak_int8_ops, peak_fp8_ops;
  tpu_chip_prov prov[TPU_CHIP_NFIELDS];
  int nsources;
  struct {
    const char *key;  /* as prov's texts */
    const char *cite;
  } sources[TPU_CHIP_MAX_SOURCES];
} tpu_chip;

/* Loads a chip. A bare name ("v5e") finds NAME.json in, in order: $TPUSIM_CHIPS, the
 * `chips` folder beside the executable or up to three folders above it, ./chips. Anything
 * with a '/' or ending in ".json" is a path. The file is validated: unknown or missing
 * fields, wrong types, non-positive sizes, sources not listed, and a listed peak that
 * disagrees with 2 * MACs * clock beyond TPU_CHIP_PEAK_TOL without a "mismatch" text all
 * fail with TPU_ERR_INVALID (TPU_ERR_PARSE for bad JSON) naming the field at FILE:LINE:COL.
 * A name or path followed by ":core" ("v4:core") gives one TensorCore of that chip (the
 * compile-only device XLA targets on chips without megacore): tensorcores 1, HBM capacity,
 * bandwidth and listed peaks divided by the chip's TensorCores, marked derived. */
tpu_status tpu_chip_load(const char *path_or_name, tpu_chip *out, tpu_diag *d);
/* How many times a preset name was searched for along the chips folders, not answered from
 * the file it was last found in (kept by the name, $TPUSIM_CHIPS and the working folder while
 * the file is there): the count a test reads. */
int64_t tpu_chip_searches(void);
/* tpu_chip_load for a caller that keeps what it loaded (a run's chip, loaded on every run so
 * that an edited file is seen): *gen names a load (0: none). When path_or_name still holds
 * the bytes of the load *gen names (the loader keeps the last file it parsed), *same = 1 and
 * out is not touched; else out is loaded as tpu_chip_load does, *same = 0, *gen names it. */
tpu_status tpu_chip_load_again(const char *path_or_name, uint64_t *gen, int *same, tpu_chip *out, tpu_diag *d);
/* Keeps no memo of loaded chips from now on: a process that loads one chip once (`tpusim
 * run`) does not copy the 68 KB struct and the file's bytes into it (pages it would fault
 * in only to throw them away at exit). */
void tpu_chip_memo_off(void);
/* How many times a chip file's bytes have been read by tpu_chip_load / _again in this
 * process (a file settled and unchanged since the memo read it is not read again). */
uint64_t tpu_chip_memo_reads(void);
/* The range a numeric field's value must lie in (chips/README.md "Ranges"). */
void tpu_chip_field_range(tpu_chip_field f, double *lo, double *hi);
/* Sets a numeric field ('f' or 'i') and marks it published, without the loader's checks
 * (tests: every field at the ends of its range). */
void tpu_chip_set_value(tpu_chip *c, tpu_chip_field f, double v);
/* A loaded chip as bytes and back, for a cache of loaded chips kept by one build (`tpusim
 * run`'s disk cache, tools/run_timing.c: a warm run reads the image instead of parsing and
 * checking the file's JSON, a tenth of a small program's warm run). tpu_chip_image: the
 * struct (its text pointers cleared), then each text (length, bytes) in field order; NULL on
 * out of memory, else a buffer the caller frees (tpu_free), *n its length.
 * tpu_chip_from_image: 1 with *out the chip whose image p holds (its numbers byte for byte,
 * its texts equal, kept by tpu_chip_text); 0 when the bytes are not an image of this build's
 * struct or memory runs out (out then undefined). */
void *tpu_chip_image(const tpu_chip *c, size_t *n);
int tpu_chip_from_image(const void *p, size_t n, tpu_chip *out);
/* The file tpu_chip_load reads for path_or_name (a preset found along the chips folders;
 * ":core" dropped) into path, and its bytes into buf when it holds fewer than cap: 1 with
 * *n their count; 0 when it cannot be found or read or is larger (tpu_chip_load then says
 * why or reads it whole). */
int tpu_chip_read_file(const char *path_or_name, char *path, size_t npath, char *buf, size_t cap, size_t *n);
/* The same checks on `len` bytes of a chip file's text; `name` stands for the file. */
tpu_status tpu_chip_load_text(const char *name, const char *text, size_t len, tpu_chip *out, tpu_diag *d);

/* Preset names found in the first chips folder of the search above, sorted. */
#define TPU_CHIP_MAX_PRESETS 64
typedef struct tpu_chip_presets {
  int count;
  char dir[512];
  char names[TPU_CHIP_MAX_PRESETS][32];
} tpu_chip_presets;
tpu_status tpu_chip_list_presets(tpu_chip_presets *out, tpu_diag *d);

/* Metadata of field f: JSON key, unit, one-line meaning, kind, required. */
const char *tpu_chip_field_key(tpu_chip_field f);
const char *tpu_chip_field_unit(tpu_chip_field f);
const char *tpu_chip_field_meaning(tpu_chip_field f);
char tpu_chip_field_kind(tpu_chip_field f);
const char *tpu_chip_prov_name(tpu_chip_prov_status s);
const char *tpu_chip_topology_name(tpu_topology_kind k);
const char *tpu_chip_wrap_name(tpu_wrap_rule w);
/* Whether field f has a value (status neither unknown nor absent). */
int tpu_chip_known(const tpu_chip *c, tpu_chip_field f);
/* Field f as a double (dtype/enum fields give their enum value; max_dims gives the product). */
double tpu_chip_value(const tpu_chip *c, tpu_chip_field f);

/* Bytes per second one streaming DMA moves: hbm_bw x hbm_efficiency (hbm_bw when the
 * efficiency is unknown). The timing model's HBM rate; reports' peaks keep hbm_bw. */
double tpu_chip_hbm_stream_bw(const tpu_chip *c);
/* Bytes-equivalent per element a matmul kernel's 16-bit result pays beyond its 2 bytes:
 * result_pass_bytes, or stream_pass_bytes where that is not given. */
double tpu_chip_result_pass(const tpu_chip *c);
/* Cycles a window kernel starts beyond kernel_overhead_s: a scan's (scan != 0) scan_start_cycles
 * where given, else window_start_cycles (layout.c pool_window). */
double tpu_chip_window_start(const tpu_chip *c, int scan);

/* MACs per cycle of the whole chip: tensorcores * mxus_per_core * mxu_rows * mxu_cols. */
double tpu_chip_macs_per_cycle(const tpu_chip *c);
/* 2 * MACs per cycle * clock: peak ops/s in the MXU's native input type. */
double tpu_chip_derived_peak(const tpu_chip *c);
/* Peak bf16 FLOP/s and int8 OP/s per chip: the listed figure if known, else the derived
 * one where the MXU supports the type, else 0. */
double tpu_chip_peak_bf16(const tpu_chip *c);
double tpu_chip_peak_int8(const tpu_chip *c);
/* Whether an axis `axis` (0-2) of length `len` in a slice has wrap-around links. */
int tpu_chip_axis_wraps(const tpu_chip *c, int axis, int64_t len);

#endif
