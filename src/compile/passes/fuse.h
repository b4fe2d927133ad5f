/* Internal: what the fuse pass's two halves share — fuse.c (instruction fusion into kLoop,
 * kOutput and kInput groups) and fuse_merge.c (multi-output fusion and fusion around the
 * matrix unit, run after it on the fusions it made). */
#ifndef TPU_COMPILE_FUSE_H
#define TPU_COMPILE_FUSE_H

#include "chip/chip.h"
#include "ir/build.h"

/* The fused computations the pass made (only those merge further; an input's own fusions
 * are left as they are). */
typedef struct {
  const tpu_comp **v; /* open addressing, cap a power of two (0: empty); n members */
  int n, cap;
} tpu__made_set;

int tpu__made_add(tpu__made_set *s, const tpu_comp *c); /* 0: out of memory */
int tpu__made_has(const tpu__made_set *s, const tpu_comp *c);

/* A dot or convolution. */
/* exp, log, tanh, sqrt, rsqrt, expm1, log1p, logistic, power: the transcendental unit's
 * work that the compiler recomputes in each vector kernel that reads it (fuse.c cheap). */
int tpu__fuse_transcendental(const tpu_instr *in);
int tpu__fuse_heavy(const tpu_instr *in);
/* The matmul (opcode op: a convolution with its dimensions, or a dot) a fused computation's
 * root computes from through elementwise ops of the root's shape, or NULL (relayout.c). */
const tpu_instr *tpu__root_matmul(const tpu_instr *root, tpu_opcode op);
/* A dynamic-slice at scalar offsets along major dimensions: computed in the kernel that reads it (fuse_ops.c). */
int tpu__fuse_slice_producer(const tpu_instr *p);
/* A dynamic-slice's start index computed from one-element values: joins the slice's kernel (fuse_ops.c). */
int tpu__fuse_slice_index(const tpu_instr *in);
/* fuse_ops.c: may a fusion hold several in-place updates (0 with TPUSIM_NO_DUS_SIBLINGS=1)? */
int tpu__fuse_dus_siblings(void);
/* Ops a loop fusion can hold: elementwise and cheap data movement. */
int tpu__fuse_loop_fusible(const tpu_instr *in);
/* Producers a dot or convolution takes into its fusion (layout and type changes). */
int tpu__fuse_operand_producer(const tpu_instr *in);
/* A convert to a narrower type. */
int tpu__fuse_narrowing(const tpu_instr *in);
/* Is r a reshape that changes convolution conv's batch dimension: folding other dimensions
 * into the batch of its input (result_side 0: r makes conv's activation) or splitting the
 * batch of its result (result_side 1: r reads conv's result)? Space-to-batch does both; in the
 * convolution's layout the batch is in the sublanes, so the compiler moves those rows in
 * copies of their own, never in the convolution's kernel. */
int tpu__fuse_batch_relayout(const tpu_instr *conv, const tpu_instr *r, int result_side);

/* Is `in` one of space-to-batch's own kernels (space_to_batch.c marks them with the
 * attribute s2b_kernel): its result goes to memory, read by its users there, and it joins no
 * consumer's fusion nor merges with another kernel? */
int tpu__fuse_own_kernel(const tpu_instr *in);

/* Whether the members of a group of n, from its root down to member m, only narrow and
 * relabel what reduce p writes (a narrowing convert, transposes and reshapes that move no
 * bytes), so that the reduce writes the result itself (fuse_reduce.c). */
int tpu__reduce_written_as(const tpu_chip *chip, const tpu_instr *root, const tpu_instr *m, const tpu_instr *p, int n);

/* Is p a residual add on a dot's result that the next norm's row sums read beside other
 * readers, so that the dot's kernel stores it (fuse_resid.c)? */
int tpu__fuse_residual_sum(const tpu_uses *u, const tpu_instr *p);

/* Whether a reshape only inserts or removes dimensions of one element (fuse_reduce.c). */
int tpu__unit_reshape(const tpu_instr *x);

/* Whether transpose p, whose result a kernel broadcasts, reorders its operand's bytes in the
 * layout that kernel computes in, so that it is a copy of its own (fuse_relaid.c). */
int tpu__fuse_relaid_transpose(const tpu_uses *us, const tpu_instr *p);

/* Finds one pair of fusions to merge in computation c and merges it; *found says whether.
 * Its reachability questions use an ancestor bitset up to tpu__fuse_reach_bitset_max
 * instructions (8,192), a walk above (tests lower it to check both give the same fusions). */
extern int tpu__fuse_reach_bitset_max;
tpu_status tpu__fuse_merge_one(tpu_builder *b, tpu_comp *c, tpu__made_set *made, const tpu_chip *chip, int *found);

/* A convolution kernel's result that leaves the entry computation in another layout than
 * the convolution's own is relaid out by a transpose kernel of its own (relayout.c). */
tpu_status tpu__fuse_relayout(tpu_builder *b, tpu_comp *entry, const tpu__made_set *made, const tpu_chip *chip);
/* Does entry value v hold a convolution's activations in the convolution's own layout (its
 * kernel's result, or an elementwise kernel's over it), which is never row-major? (relayout.c) */
int tpu__conv_layout_value(const tpu_instr *v);
/* A grouped convolution's kernel writes its result in the group-split layout and a kLoop
 * kernel `copy.group` merges the groups back into the features (group_conv.c). */
tpu_status tpu__fuse_group_layout(tpu_builder *b, tpu_comp *entry, tpu__made_set *made, const tpu_chip *chip);
/* Does convolution cv write its result split by group (*few: the batch in the lanes)? */
int tpu__group_split(const tpu_chip *chip, const tpu_instr *cv, int *few);
/* A parameter the program updates in place without its donation is copied first
 * (compile/passes/param_copy.c). */
tpu_status tpu__fuse_param_copies(tpu_builder *b, tpu_module *m);

/* s laid out with dimension minor in the lanes, second in the sublanes, the rest major in order. */
void tpu__tile_layout(tpu_shape *s, int minor, int second);
/* Entry parameters take the least padded layout; pooling reduce-windows their own
 * (param_layout.c, window_layout.c). */
tpu_status tpu__fuse_param_layouts(tpu_builder *b, tpu_comp *entry, const tpu_chip *chip);
/* Sorts run in the layout the XLA TPU compiler gives them (batch in the lanes unless the sorted
 * dimension fills them and the batch does not), their operands and the results leaving the
 * program copied where laid out otherwise (sort_layout.c; part of tpu__fuse_param_layouts). */
tpu_status tpu__sort_layouts(tpu_builder *b, tpu_comp *entry, const tpu_chip *chip, int *changed);
/* A scan of rank 3 or more runs on its value row-major: an entry parameter laid out otherwise is
 * copied into it, and a result that pads least otherwise copied back (scan_layout.c; part of
 * tpu__fuse_param_layouts). */
tpu_status tpu__scan_layouts(tpu_builder *b, tpu_comp *entry, const tpu_chip *chip, int *changed);
/* An 8-bit pad whose operand the XLA TPU compiler tiles in 32 rows runs in 8-row tiles: a copy
 * of the operand before it, and of the result after it where the program's result is tiled in
 * 32 rows (s8_pad_tiles.c; own compilation, after fusion). */
tpu_status tpu__s8_pad_tiles(tpu_builder *b, tpu_comp *entry, const tpu_chip *chip);
/* The tiling (second in the sublanes, minor in the lanes) a pooling reduce-window w runs in:
 * its result's least padded one in whole tiles where that pads strictly less than its
 * operand's, else its operand's; 0 when w is not a pooling window (a scan, a whole row, a compiled program's). */
int tpu__window_tiling(const tpu_chip *chip, const tpu_instr *w, int *second, int *minor);
/* Does w slide along dimension second or minor (the tile of the layout it runs in)? */
int tpu__window_in_tile(const tpu_instr *w, int second, int minor);
/* Is w a pooling reduce-window laid out (tpu__fuse_window_layouts) so that it slides along
 * major dimensions only? The XLA TPU compiler runs it as a kOutput kernel, as it does a
 * convolution: its operand's converts and its elementwise consumers fuse with it. */
int tpu__window_kernel(const tpu_instr *w);
/* Lays each pooling reduce-window of the entry out in its tiling; one that slides along
 * that tile reads an entry parameter tiled otherwise through a copy (window_layout.c). */
tpu_status tpu__fuse_window_layouts(tpu_builder *b, tpu_comp *entry, const tpu_chip *chip, int *changed);
/* The layout select-and-scatter s runs in (sas_layout.c): the dimensions its window slides
 * along major in order, the two others in the least padded tile of few rows; 0 when it is
 * not such a one (a compiled program's, no window, fewer than two other dimensions). */
int tpu__sas_layout(const tpu_chip *chip, const tpu_instr *s, tpu_shape *out);
/* Lays each select-and-scatter of the entry out so, copying its operand and source in and its
 * result back where laid out otherwise (copies marked sas_copy=in/out; sas_layout.c). */
tpu_status tpu__sas_layouts(tpu_builder *b, tpu_comp *entry, const tpu_chip *chip, int *changed);
/* Does pooling window w (an instruction of c) read a widening float convert (an instruction
 * of c) of a value laid out as w runs? The XLA TPU compiler folds the convert into the
 * window, which reads the narrow value itself (window_widen.c). */
int tpu__window_reads_narrow(const tpu_comp *c, const tpu_instr *w);
/* Each such window of the entry and its convert become one kLoop kernel (window_widen.c). */
tpu_status tpu__fuse_window_widen(tpu_builder *b, tpu_comp *entry);
/* Is `in` a copy of an entry parameter into a layout tiled along other dimensions (a
 * relayout the compiler runs as a kernel of its own, never fused into its reader)? */
int tpu__relayout_copy(const tpu_instr *in);
/* Shared by relayout.c (results) and param_layout.c (parameters): the tiling a program
 * result of shape s leaves in (its least padded where that pads less than row-major); whether
 * values stay in VMEM between kernels on the chip (one TensorCore with room beside the
 * kernels' scoped VMEM: v5e, v6e); the dimension space to batch splits parameter p along
 * evenly where all its readers are such splits (-1 otherwise; *piece its W / 8); the least
 * padded tiling of s with W out of the lanes (and out of the sublanes unless its pieces are
 * whole tiles), returning its bytes or -1; TPUSIM_NO_S2B_LANES=1, the space-to-batch copies off. */
void tpu__result_tiling_shape(const tpu_chip *chip, const tpu_shape *s, int *second, int *minor);
int tpu__values_stay_in_vmem(const tpu_chip *chip);
int tpu__s2b_even_split_dim(const tpu_uses *u, const tpu_instr *p, int64_t *piece);
int64_t tpu__tiling_off_w(const tpu_chip *chip, const tpu_shape *s, int w, int64_t piece, int *second, int *minor);
int tpu__s2b_lanes_off(void);
/* relayout.c: a dynamic-slice of a parameter returned in another tile than the parameter's
 * is sliced in the parameter's and copied into the result's (copy.result, a kernel). */
tpu_status tpu__result_slice_copy(tpu_builder *b, tpu_comp *entry, const tpu_chip *chip);
/* Is r a reshape of a transpose that no layouts on either side make a bitcast (a window
 * partition)? The compiler moves its bytes in a copy kernel holding only the transpose and
 * the reshapes around it (reshape_relayout.c). */
int tpu__reshape_relayouts(const tpu_instr *r);

#endif
