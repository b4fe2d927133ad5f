/* Private interface of the HLO passes (compile/{inline,simplify,fuse}.c), run in this
 * order by compile/pipeline.c. Each rewrites the module in place and leaves every
 * computation finished (tpu_build_finish); on failure the module may be half-rewritten
 * and is only fit to be freed. */
#ifndef TPU_COMPILE_HLO_PASSES_H
#define TPU_COMPILE_HLO_PASSES_H

#include "compile/compile.h"

/* Replaces every `call` by a copy of its callee's body; drops the callees no one else uses. */
tpu_status tpu__pass_inline(tpu_module *m, const tpu_compile_opts *o, tpu_diag *d);
/* Constant folding, exact algebraic identities, dead instructions and computations. */
tpu_status tpu__pass_simplify(tpu_module *m, const tpu_compile_opts *o, tpu_diag *d);
/* Part of simplify: dots with a vector operand become multiply + reduce (compile/passes/dot_reduce.c),
 * by the rules of `chip` (NULL: the rules every chip shares); *changed = 1 when one did. */
struct tpu_builder;
struct tpu_chip;
tpu_status tpu__dot_strength_reduce(struct tpu_builder *b, tpu_module *m, const struct tpu_chip *chip, int *changed);
/* Part of simplify: a scatter-add of one element per operand row into a broadcast scalar
 * becomes compare-select (compile/passes/scatter_select.c); *repl the replacement, else NULL. */
tpu_status tpu__scatter_to_select(struct tpu_builder *b, tpu_comp *c, tpu_instr *in, tpu_instr **repl);
/* Whether c is (a, b) -> add(a, b) (compile/passes/scatter_select.c). */
int tpu__is_adder(const tpu_comp *c);
/* Is v one of the entry's results (its root or an element of its root tuple)? (param_layout.c) */
int tpu__entry_result(const tpu_comp *entry, const tpu_instr *v);
/* Whether every element of `in` (a constant, maybe broadcast) equals v (floats: same value
 * and sign, so -0 and +0 differ; compile/passes/simplify.c). */
int tpu__is_splat(const tpu_instr *in, double v);
/* A floating-point division by a constant (or a broadcast of one): XLA multiplies by the
 * reciprocal instead, so fusion and costs take it as a multiply (simplify.c). */
int tpu__divides_by_constant(const tpu_instr *in);
tpu_status tpu__reduce_of_broadcast(struct tpu_builder *b, tpu_comp *c, tpu_instr *in, tpu_instr **repl);
/* Part of simplify: a reduce over dimensions of one element as op(broadcast(init), reshape(x))
 * (compile/passes/reduce_bcast.c); *repl the replacement, else NULL. */
tpu_status tpu__reduce_of_one(struct tpu_builder *b, tpu_comp *c, tpu_instr *in, tpu_instr **repl);
/* Part of simplify: an elementwise op on broadcasts of one shape (and of scalars) as a
 * broadcast of the op (compile/passes/bcast_sink.c); *repl the replacement, else NULL. */
tpu_status tpu__sink_broadcast(struct tpu_builder *b, tpu_comp *c, tpu_instr *in, tpu_instr **repl);
/* Part of simplify: common subexpressions (compile/passes/cse.c). A table for a computation of n
 * instructions, visited operands first: find_or_add returns an earlier instruction equal to
 * `in` (whose operands are already the replacements), or NULL after remembering `in`. */
typedef struct tpu__cse tpu__cse;
tpu__cse *tpu__cse_new(int n);
void tpu__cse_free(tpu__cse *t);
tpu_instr *tpu__cse_find_or_add(tpu__cse *t, tpu_instr *in);
/* Independent all-reduces / all-gathers / reduce-scatters over the same groups become one. */
tpu_status tpu__pass_combine(tpu_module *m, const tpu_compile_opts *o, tpu_diag *d);
/* Forward scans (cumsum, cumprod, cummax) longer than 128 in the XLA TPU compiler's blocks of
 * 128 (compile/passes/scan_rewrite.c); *changed = 1 when any was rewritten. */
struct tpu_builder;
tpu_status tpu__scan_rewrite(struct tpu_builder *b, tpu_module *m, const struct tpu_chip *chip, int *changed);
/* Convolutions with a batch under 8 split along their last spatial dimension into 8 pieces
 * folded into the batch (compile/passes/space_to_batch.c); *changed = 1 when any was. */
tpu_status tpu__space_to_batch(struct tpu_builder *b, tpu_module *m, int *changed);
/* Groups ops into `fusion` instructions of kind kLoop, kOutput and kInput. */
tpu_status tpu__pass_fuse(tpu_module *m, const tpu_compile_opts *o, tpu_diag *d);
/* Part of fuse: a row gather's indices clamped in a kernel of their own, as the XLA TPU
 * compiler does (compile/passes/gather_index.c); the clamp is marked, and
 * tpu__gather_index_kernel tells it. */
tpu_status tpu__gather_index_kernels(struct tpu_builder *b, tpu_comp *c, const struct tpu_chip *chip);
int tpu__gather_index_kernel(const tpu_instr *in);
/* The order each computation runs in: of the post-order, a list schedule and a DFS
 * schedule, the one with the lowest peak of live bytes (compile/passes/mem_sched.c). */
tpu_status tpu__pass_mem_schedule(tpu_module *m, const tpu_compile_opts *o, tpu_diag *d);

/* The parameter of a fused computation that value v streams from: up single-operand ops
 * and dynamic-slices, and up the operand of an elementwise op that has v's size (not a
 * broadcast row statistic); -1 when none. */
int tpu__fused_source(const tpu_instr *v);

/* Bytes of s in the chip's tiled layout with dimension `minor` in the lanes and `second`
 * in the sublanes, padded to the (sublanes x lanes) tile (compile/backend/layout.c). */
int64_t tpu__tiled_as(const tpu_chip *chip, const tpu_shape *s, int second, int minor);
/* The same layout's (sublanes x lanes) tiles, each of the rows layout.c gives the dtype. */
int64_t tpu__tiles_as(const tpu_chip *chip, const tpu_shape *s, int second, int minor);
/* Rows of the memory tile of `rows` rows of dtype dt (8, or the smallest power of two that
 * holds fewer; compile/backend/layout.c). */
int64_t tpu__tile_rows(const tpu_chip *chip, tpu_dtype dt, int64_t rows);
int tpu__moves_minor(const tpu_chip *chip, const tpu_instr *in);
/* Whether reshape `in` is a bitcast in the chip's tiled layouts (compile/backend/layout.c). */
int tpu__reshape_moves_no_bytes(const tpu_chip *chip, const tpu_instr *in);
/* Whether a compiled program laid shape s out in VMEM (memory space S(1) in its layout). */
int tpu__in_vmem(const tpu_shape *s);
/* Does x keep the layout its shape gives (attribute tile_layout=kept: a grouped
 * convolution's split registers, group_conv.c), which the back end counts its registers and
 * tiles in, where it lays other fused values out as they pad least? */
int tpu__kept_layout(const tpu_instr *x);
/* Is v a result of the program whose entry computation is e: e's root, or an operand of e's
 * root tuple (compile/backend/layout.c)? */
int tpu__program_result(const tpu_comp *e, const tpu_instr *v);
/* Bytes of s (rank >= 2) in the layout that pads least to the tile — the layout the XLA TPU
 * compiler gives a program's parameters and results. */
int64_t tpu__least_tiled_bytes(const tpu_chip *chip, const tpu_shape *s);
/* The same, with that layout's tile dimensions (second in the sublanes, minor in the
 * lanes): row-major's when no layout pads strictly less. */
int64_t tpu__least_tiling(const tpu_chip *chip, const tpu_shape *s, int *second, int *minor);
/* Does an array of shape s that a convolution lays out with dimension `second` in the
 * sublanes and `minor` in the lanes need relaying out to or from the program's own layout
 * (the one that pads least, row-major on a tie; compile/passes/relayout.c)? */
int tpu__needs_relayout(const tpu_chip *chip, const tpu_shape *s, int second, int minor);
/* Does the XLA TPU compiler lay a convolution's batch across the lanes (and the MXU's
 * columns)? A filter (taps > 1, one group) with fewer output features than the lanes and a
 * larger batch: its batch-minor layout ({0,3,2,1} for NHWC; tile.c, relayout.c). */
int tpu__conv_batch_in_lanes(int64_t groups, int64_t taps, int64_t features, int64_t batch, int64_t lanes);
/* combine-collectives' first step (compile/spmd/rs_create.c): each all-reduce of c whose only use
 * is every device's dynamic-slice of its own block becomes a reduce-scatter, unless its one
 * group is every device of a slice of `chip` on which the XLA TPU compiler keeps the
 * all-reduce (tpu_spmd_keeps_full_all_reduce; chip NULL: always); *changed set when any did. */
struct tpu_builder;
tpu_status tpu__make_reduce_scatters(struct tpu_builder *b, tpu_comp *c, const tpu_chip *chip, int *changed,
                                     tpu_diag *d);
/* combine-collectives, after the reduce-scatters are made (compile/spmd/rs_pad.c): each
 * reduce-scatter of c along the rows of a 2-D operand that the XLA TPU compiler pads
 * (tpu_spmd_pads_reduce_scatter) becomes the padded scatter, a collective-permute of the rows
 * past each block to the next device of its group and each device's slice of its share;
 * *changed set when any did. */
tpu_status tpu__pad_reduce_scatters(struct tpu_builder *b, tpu_comp *c, const tpu_chip *chip, int *changed,
                                    tpu_diag *d);
/* combine-collectives, after the reduce-scatters (compile/spmd/ag_as_ar.c): each all-gather of
 * c over every device of a slice of `chip` on which the XLA TPU compiler runs it as an
 * all-reduce of each device's block written into zeros (tpu_spmd_gathers_as_all_reduce)
 * becomes that all-reduce; *changed set when any did. */
tpu_status tpu__all_gathers_as_all_reduces(struct tpu_builder *b, tpu_comp *c, const tpu_chip *chip, int *changed,
                                           tpu_diag *d);
/* combine-collectives, first (compile/spmd/coll_cse.c): an all-gather or collective-permute
 * that repeats an earlier one (same value, shape and attributes but the channel id) is
 * dropped for it, as XLA's ScheduleAwareCollectiveOpsCSE. */
tpu_status tpu__cse_collectives(struct tpu_builder *b, tpu_comp *c, int *changed, tpu_diag *d);
/* combine-collectives, before the rest (compile/spmd/coll_quant.c): converts to a narrower
 * type after (wider before) all-gathers, all-to-alls, collective-permutes and
 * collective-broadcasts move across them, as XLA's CollectiveQuantizer. */
tpu_status tpu__quantize_collectives(struct tpu_builder *b, tpu_comp *c, int *changed, tpu_diag *d);
/* combine-collectives, step zero (ar_motion.c): all-reduces that only accumulate into a while
 * loop's state are sunk after the loop, as XLA's WhileLoopAllReduceCodeMotion. */
tpu_status tpu__sink_loop_all_reduces(struct tpu_builder *b, tpu_comp *c, int *changed, tpu_diag *d);
/* The static trip count of while loop w (compile/backend/schedule.c): XLA's known_trip_count,
 * else `i CMP c` with i stepped by a constant from a constant start; -1 when unknown. */
int64_t tpu__while_trip_count(const tpu_instr *w);
/* Part of simplify: a narrowing convert of a loop-invariant element (through a dynamic-slice)
 * is hoisted before the loop, which then carries the converted element (convert_hoist.c). */
tpu_status tpu__hoist_loop_converts(struct tpu_builder *b, tpu_module *m, int *changed);
/* Largest result a constant fold may produce, in bytes. */
#define TPU_FOLD_MAX_BYTES ((size_t)64 * 1024)

#endif
