/* Back-end pass `layout`: tiled layouts — every array's minor two dimensions padded to the
 * vector-register tile — and each kernel's padded bytes in and out of HBM (the per-element
 * stream costs beyond them: stream_cost.c). */
#include <string.h>

#include "compile/backend/backend.h"
#include "ir/collective.h"
#include "ir/custom_call.h"
#include "compile/passes/hlo_passes.h"

static int64_t round_up(int64_t a, int64_t m) { return m > 0 ? (a + m - 1) / m * m : a; }

int64_t tpu__plain_bytes(const tpu_shape *s) {
  if (s->dtype == TPU_TUPLE) {
    int64_t n = 0;
    for (int i = 0; i < s->ntuple; i++) n += tpu__plain_bytes(&s->elems[i]);
    return n;
  }
  if (!tpu_dtype_is_array(s->dtype)) return 0;
  return (tpu_shape_numel(s) * tpu_dtype_bits(s->dtype) + 7) / 8; /* s4/u4: two per byte */
}

/* Rows of the memory tile: the XLA TPU compiler tiles every type (8 x 128), narrower
 * types packing 4/size rows into each 32-bit word within it (bf16 T(8,128)(2,1)), and
 * an array of fewer rows takes the smallest power-of-two tile that holds them, at least
 * one 32-bit word of rows (f32[2,2048] T(2,128), f32[1,8192] T(1,128), bf16[1,4096]
 * T(2,128), bf16[7,7,3,64] T(4,128) in its compiled programs). */
static int64_t tile_rows(const tpu_chip *chip, int64_t bits, int64_t rows) {
  int64_t sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8;
  int64_t t = bits < 32 ? 32 / bits : 1;
  while (t < sub && t < rows) t *= 2;
  return t;
}

/* `bits` per element: s4/u4 pack two per byte (libtpu lays out s4[4096,4096] as
 * T(64,128)(8,1)E(4), 8 MiB of argument bytes in its memory_analysis on v5e). */
static int64_t tiled_bytes(const tpu_chip *chip, int64_t bits, int64_t major, int64_t second, int64_t minor) {
  int64_t lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128;
  return major * round_up(second, tile_rows(chip, bits, second)) * round_up(minor, lanes) * bits / 8;
}

int64_t tpu__padded_bytes(const tpu__be *be, const tpu_shape *s) {
  if (s->dtype == TPU_TUPLE) {
    int64_t n = 0;
    for (int i = 0; i < s->ntuple; i++) n += tpu__padded_bytes(be, &s->elems[i]);
    return n;
  }
  if (!tpu_dtype_is_array(s->dtype)) return 0;
  int64_t bits = tpu_dtype_bits(s->dtype); /* s4/u4: two per byte */
  int64_t lanes = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
  if (s->rank <= 1) {
    /* A vector is laid out as consecutive elements in whole lanes: XLA's TPU layout for
     * rank 1 is T(1024) (T(n) for n < 1024 rounded to the lanes), e.g. f32[4096]{0:T(1024)}
     * and bf16[512]{0:T(512)(128)(2,1)} in its compiled programs — not one row padded to
     * a full (sublanes x lanes) tile, which would move 8x the bytes. */
    int64_t n = tpu_shape_numel(s);
    int64_t sub = be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8;
    return round_up(n, n <= sub * lanes ? lanes : sub * lanes) * bits / 8;
  }
  /* tiled along the two minor-most dimensions of its layout (the given one: a compiled
   * program's bf16[4,1024,2048,1,1]{2,1,0,4,3} tiles 1024 x 2048, not 1 x 1) */
  if (s->has_layout) return tpu__tiled_as(be->chip, s, s->minor_to_major[1], s->minor_to_major[0]);
  return tpu__tiled_as(be->chip, s, s->rank - 2, s->rank - 1);
}

int64_t tpu__tile_rows(const tpu_chip *chip, tpu_dtype dt, int64_t rows) {
  return tile_rows(chip, tpu_dtype_bits(dt), rows);
}

int64_t tpu__tiles_as(const tpu_chip *chip, const tpu_shape *s, int second, int minor) {
  int64_t major = 1, lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128;
  for (int d = 0; d < s->rank; d++)
    if (d != second && d != minor) major *= s->dims[d];
  int64_t rows = tile_rows(chip, tpu_dtype_bits(s->dtype), s->dims[second]);
  return major * ((s->dims[second] + rows - 1) / rows) * ((s->dims[minor] + lanes - 1) / lanes);
}

int64_t tpu__tiled_as(const tpu_chip *chip, const tpu_shape *s, int second, int minor) {
  int64_t major = 1;
  for (int d = 0; d < s->rank; d++)
    if (d != second && d != minor) major *= s->dims[d];
  return tiled_bytes(chip, tpu_dtype_bits(s->dtype), major, s->dims[second], s->dims[minor]);
}

/* Are the bytes of `s`, tiled, its elements in row-major order, rows of one lane register
 * each? A vector is (the TPU's rank-1 tiling T(1024)(128): blocks of 8 rows of 128 lanes,
 * in order), and so is a row-major [R, 128] (8 x 128 tiles down one column of tiles) or
 * [A, R, 128] with R whole tiles of rows. A reshape between two such shapes is a bitcast:
 * the compiler's scan of bf16[1024] reads it as [8,128] through a `bitcast`, no kernel
 * (cumsum_1024_ax0_bf16, cummax_1024_ax0_rev_bf16 on v4/v5e/v5p/v6e). */
static int lane_rows(const tpu_chip *chip, const tpu_shape *s) {
  if (s->rank <= 1) return 1;
  if (s->has_layout && (s->minor_to_major[0] != s->rank - 1 || s->minor_to_major[1] != s->rank - 2)) return 0;
  if (s->dims[s->rank - 1] != chip->vector_lanes) return 0;
  for (int d = 0; d < s->rank - 2; d++)
    if (s->dims[d] != 1 && s->dims[s->rank - 2] % chip->vector_sublanes != 0) return 0;
  return 1;
}

/* Whether reshape `in` is a bitcast in the TPU's tiled layouts: its minor dimension
 * unchanged (the tiled layout keeps its bytes: the compiler's strength-reduced
 * einsum('ba,acb->ca') bitcasts its bf16[8] sum to [1,8]), or between a vector and rows of
 * whole lanes (lane_rows); not a vector's [1024] to [1024,1], whose one column pads each
 * element to a row (the compiler's gemm_w8a16_1024x1000x1 runs that `reshape` as a kernel).
 * Without a chip, only the first. */
int tpu__reshape_moves_no_bytes(const tpu_chip *chip, const tpu_instr *in) {
  if (in->op != TPU_OP_RESHAPE || in->noperands != 1) return 0;
  const tpu_shape *a = &in->operands[0]->shape;
  int64_t ma = a->rank ? a->dims[a->rank - 1] : 1, mb = in->shape.rank ? in->shape.dims[in->shape.rank - 1] : 1;
  if (ma == mb || tpu_shape_numel(a) <= 1) return 1;
  return chip && lane_rows(chip, a) && lane_rows(chip, &in->shape);
}

/* Does transpose `in` move the minor dimension in memory? A transpose whose given result
 * layout lists its operand's dimensions in the operand's own physical order is a bitcast:
 * the XLA TPU compiler keeps such a layout (no data moves) where it pads less than the
 * row-major one would (bf16[16,64,64,256] to [16,256,64,64]{1,3,2,0}: no copy, the scale
 * reading it one kernel, 300,048 cycles on v5e as an elementwise op of that size), and
 * otherwise lays the result out row-major and copies (bf16[4096,4096] transposed with
 * {0,1}: a `copy` of 224,312 cycles); so is one whose operand's layout lists the
 * dimensions in the order the row-major result has them. Without layouts: whether the last
 * dimension moves.
 * A `copy` (in a compiled program) moves it where its layout changes the minor dimension. */
int tpu__in_vmem(const tpu_shape *s) { return s->layout_tail && strstr(s->layout_tail, "S(1)") != NULL; }

int tpu__kept_layout(const tpu_instr *x) {
  const tpu_shape *s = &x->shape;
  if (!s->has_layout || s->layout_tail || s->rank < 2 || s->dtype == TPU_TUPLE) return 0;
  for (int i = 0; i < x->nattrs; i++)
    if (!strcmp(x->attrs[i].name, "tile_layout") && x->attrs[i].value && !strcmp(x->attrs[i].value, "kept")) return 1;
  return 0;
}

int tpu__program_result(const tpu_comp *e, const tpu_instr *v) {
  if (!e || !e->root || !v) return 0;
  if (v == e->root) return 1;
  for (int i = 0; e->root->op == TPU_OP_TUPLE && i < e->root->noperands; i++)
    if (e->root->operands[i] == v) return 1;
  return 0;
}

int tpu__moves_minor(const tpu_chip *chip, const tpu_instr *in) {
  if (in->op == TPU_OP_COPY && in->noperands == 1) {
    /* a compiled program's layout-changing copy: a transpose when the minor dimension
     * changes (f32[8192,8192] {1,0} -> {0,1}: 1,348,160 cycles on v6e, what the compiler
     * charges transposing it), into HBM or VMEM alike (bf16[2,2048,2048] from HBM into
     * VMEM and back: 93,120 cycles each on v6e); not one within VMEM (memory space S(1) on
     * both sides: 2,400 cycles). */
    const tpu_shape *r = &in->shape, *o = &in->operands[0]->shape;
    return r->has_layout && o->has_layout && r->rank >= 2 && r->rank == o->rank &&
           r->minor_to_major[0] != o->minor_to_major[0] && !(tpu__in_vmem(r) && tpu__in_vmem(o));
  }
  if (!tpu_instr_moves_minor(in)) return 0;
  const tpu_shape *r = &in->shape, *o = &in->operands[0]->shape;
  /* an operand laid out other than row-major (an entry parameter in its least padded layout)
   * whose bytes, in order, are the result's row-major ones: a bitcast (the compiler's
   * bf16[256,3]{0,1} transposed to [3,256] and incremented is one add_bitcast_fusion, no copy) */
  if (chip && o->has_layout && !o->layout_tail && !r->layout_tail && r->rank == o->rank) {
    /* (dimensions of size 1 hold no order: bf16[16,1,8]{0,2,1} transposed to [8,16,1] is
     * the compiler's bitcast to [8,16]) */
    int same = 1, k = 0, j = 0;
    for (;;) {
      while (k < r->rank && o->dims[in->dimensions.v[r->rank - 1 - k]] == 1) k++;
      while (j < o->rank && o->dims[o->minor_to_major[j]] == 1) j++;
      if (k >= r->rank || j >= o->rank) break;
      if (in->dimensions.v[r->rank - 1 - k] != o->minor_to_major[j]) {
        same = 0;
        break;
      }
      k++, j++;
    }
    if (same) return 0;
  }
  if (!chip || !r->has_layout || !o->has_layout || r->rank != o->rank) return 1;
  /* the operand's lane dimension stays in the lanes: a shuffle of sublanes or of whole tiles,
   * which the compiler does in the loop of the kernel that reads the result (s8[64,64,33,16]
   * {1,3,2,0} to [16,64,64,33]{2,1,3,0} and incremented: one kLoop fusion, its `copy` inside) */
  if (!o->layout_tail && !r->layout_tail && in->dimensions.v[r->minor_to_major[0]] == o->minor_to_major[0]) return 0;
  for (int k = 0; k < r->rank; k++)
    if (in->dimensions.v[r->minor_to_major[k]] != o->minor_to_major[k]) return 1;
  return tpu__tiled_as(chip, r, r->minor_to_major[1], r->minor_to_major[0]) >=
         tpu__tiled_as(chip, r, r->rank - 2, r->rank - 1);
}

int64_t tpu__least_tiling(const tpu_chip *chip, const tpu_shape *s, int *second, int *minor) {
  int r = s->rank;
  int64_t least = tpu__tiled_as(chip, s, r - 2, r - 1);
  *second = r - 2, *minor = r - 1;
  /* the most minor dimensions first: of layouts that pad alike, the one nearest row-major */
  for (int m = r - 1; m >= 0; m--)
    for (int q = r - 1; q >= 0; q--) {
      if (q == m) continue;
      int64_t b = tpu__tiled_as(chip, s, q, m);
      if (b < least) least = b, *second = q, *minor = m;
    }
  return least;
}

int64_t tpu__least_tiled_bytes(const tpu_chip *chip, const tpu_shape *s) {
  int second, minor;
  return tpu__least_tiling(chip, s, &second, &minor);
}

int64_t tpu__vregs(const tpu__be *be, const tpu_shape *s) {
  if (s->dtype == TPU_TUPLE) {
    int64_t n = 0;
    for (int i = 0; i < s->ntuple; i++) n += tpu__vregs(be, &s->elems[i]);
    return n;
  }
  int64_t sub = be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8;
  int64_t lanes = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
  int64_t reg = sub * lanes * 4; /* bytes in one vector register */
  int64_t b = tpu__padded_bytes(be, s);
  return (b + reg - 1) / reg;
}

/* Bytes a kernel reads of operand j (padded or not): all of it, except where it touches
 * only part (gather, dynamic-slice) or updates in place (dynamic-update-slice, scatter,
 * which read and write back only the updated rows). */
/* A fusion operand its fused computation only slices (dynamic-slice, slice, gather as their
 * operand 0: a layer's weights taken from a stacked [L, ...] buffer): the bytes of the slices,
 * or -1 when it is used whole. */
static int free_layout(const tpu__be *be, const tpu_instr *v, const tpu_shape *s);
static int loop_state(const tpu__be *be, const tpu_instr *p);

/* Is a slice of shape s of value v (a dynamic-slice's or gather's rows) read from a loop's
 * state, laid out as it pads least (free_layout)? The step of a scan reads its time step
 * of a stacked f32[64,8,512,16] so (the compiler's {2,3,1,0}: 512 in the lanes), not in
 * 16-element rows padded to 128 lanes. */
static int state_slice(const tpu__be *be, const tpu_instr *v, const tpu_shape *s) {
  if (s->rank < 2 || s->layout_tail || !free_layout(be, v, &v->shape)) return 0;
  while (v->op == TPU_OP_GET_TUPLE_ELEMENT && v->noperands) v = v->operands[0];
  return v->op == TPU_OP_PARAMETER && loop_state(be, v);
}

/* The bytes parameter p of fused computation c reads (rows of value v, the fusion's operand)
 * when every use of it is a slice's, dynamic-slice's or gather's operand 0, or such a use
 * inside a nested fusion it is passed to (the compiler's scan steps read their time step so:
 * fusion(stack, i) calling a dynamic-slice, in the matmul fusion of the compiled GRU); -1
 * when it is used whole. */
static int64_t sliced_param_bytes(const tpu__be *be, const tpu_comp *c, const tpu_instr *p, const tpu_instr *v,
                                  int padded, int depth) {
  int64_t b = 0;
  int users = 0;
  for (int i = 0; i < c->ninstrs; i++) {
    const tpu_instr *u = c->instrs[i];
    for (int k = 0; k < u->noperands; k++) {
      if (u->operands[k] != p) continue;
      if (u->op == TPU_OP_FUSION && u->calls && k < u->calls->nparams && depth < 4) {
        int64_t nb = sliced_param_bytes(be, u->calls, u->calls->params[k], v, padded, depth + 1);
        if (nb < 0) return -1;
        b += nb;
        users++;
        continue;
      }
      if (k != 0 || (u->op != TPU_OP_DYNAMIC_SLICE && u->op != TPU_OP_SLICE && u->op != TPU_OP_GATHER)) return -1;
      b += !padded ? tpu__plain_bytes(&u->shape)
           : state_slice(be, v, &u->shape) ? tpu__least_tiled_bytes(be->chip, &u->shape)
                                           : tpu__padded_bytes(be, &u->shape);
      users++;
    }
  }
  return users && c->root != p ? b : -1;
}

static int64_t fused_slice_bytes(const tpu__be *be, const tpu_instr *in, int j, int padded) {
  const tpu_comp *c = in->calls;
  if (!c || j >= c->nparams) return -1;
  return sliced_param_bytes(be, c, c->params[j], in->operands[j], padded, 0);
}

/* Whether fused computation c carries a collective (the TPU compiler's async collective
 * fusions: a matmul with the next all-gather in flight beside it). */
static int carries_collective(const tpu_comp *c) {
  for (int i = 0; c && i < c->ninstrs; i++) {
    tpu_opcode op = c->instrs[i]->op;
    if (tpu_op_class_of(op) == TPU_CLS_COLLECTIVE && op != TPU_OP_PARTITION_ID && op != TPU_OP_REPLICA_ID) return 1;
  }
  return 0;
}

/* An op of a fusion carrying a collective that hands buffers on: the collective, the async
 * start/done marker at its root, or its root tuple. */
static int carrier(const tpu_comp *c, const tpu_instr *u) {
  tpu_cc_kind k = tpu_custom_call_kind(u);
  return tpu_op_class_of(u->op) == TPU_CLS_COLLECTIVE ||
         (u == c->root && (u->op == TPU_OP_TUPLE || k == TPU_CC_ASYNC_START || k == TPU_CC_ASYNC_DONE));
}

/* In a fusion carrying a collective, an operand used only by that collective or handed to
 * the result tuple as it is (carried_operand), and a result element that is a parameter or
 * the collective's result (carried_leaf): buffers the links fill or that pass through
 * (output_to_operand_aliasing), which the kernel neither reads nor writes through HBM. */
static int carried_operand(const tpu_instr *in, int j) {
  const tpu_comp *c = in->calls;
  if (!c || j >= c->nparams || !carries_collective(c)) return 0;
  const tpu_instr *p = c->params[j];
  int users = 0;
  for (int i = 0; i < c->ninstrs; i++) {
    const tpu_instr *u = c->instrs[i];
    for (int k = 0; k < u->noperands; k++) {
      if (u->operands[k] != p) continue;
      if (!carrier(c, u)) return 0;
      users++;
    }
  }
  return users > 0;
}

static int carried_leaf(const tpu_instr *in, int leaf) {
  const tpu_comp *c = in->calls;
  if (in->op != TPU_OP_FUSION || !c || !c->root || !carries_collective(c)) return 0;
  if (c->root->op != TPU_OP_TUPLE) return carrier(c, c->root) && leaf == 0; /* the done's result */
  if (leaf >= c->root->noperands) return 0;
  const tpu_instr *e = c->root->operands[leaf];
  return e->op == TPU_OP_PARAMETER || tpu_op_class_of(e->op) == TPU_CLS_COLLECTIVE;
}

/* The XLA TPU compiler's layout assignment gives a value computed inside the program the
 * tiling that pads least when its given layout would pad the lanes: an attention head's
 * bf16[8,12,512,64] is {2,3,1,0} in its compiled programs (512 in the lanes, no padding;
 * row-major would pad 64 to 128, 2.7x with the 12 heads padded to 16 sublanes). Of the
 * rank >= 3 results in bench/fidelity/compiled that some layout pads less than row-major,
 * 157 take the least padded one. Entry parameters carry theirs in their shape (param_layout.c
 * gives them the least padded one), convolution results the convolution's (batch in the
 * sublanes, features in the lanes: relayout.c), and a compiled program's tiled layouts
 * their own. The program's results (entry_computation_layout) of rank 2 and more take the
 * least padded tiling too, as its parameters do (param_layout.c): of the results of the compiled families
 * corpus that some layout pads less than row-major, all 660 are laid out so (all 60 in
 * bench/fidelity/compiled), none row-major (bf16[3,197,256,3] leaves as {2,1,3,0}, 197 x 256
 * tiles rather than 3 elements padded to 128 lanes; f32[2048,7] as {0,1}).
 * A rank-2 value whose minor dimension is 1 (a norm's f32[8192,1] statistics, its rsqrt a
 * kernel of its own: fuse.c) is laid out {0,1} too, the rows in the lanes (the compiler's
 * f32[N,1]{0,1:T(1,128)}: of the float [N,1] values with N >= 16 in the compiled families
 * programs for v5e, 109 are laid out {0,1}, 12 {1,0}), not one element per row padded to
 * 128 lanes. A loop's state (the parameter of a while body or condition) is such a value
 * too: a scan's f32[8,512,16] state and f32[64,8,512,16] stacks are {1,2,0} and {2,3,1,0}
 * in the compiler's selective_scan_seq_b8l64d512n16, 512 in the lanes, and the step's
 * dynamic-slices of a stack read its rows so (state_slice). (Other rank-2 values, such as
 * f32[2048,7], keep row-major inside the program: laid out {0,1}, their kernels'
 * per-element stream costs move onto the on-chip reads they share a kernel with, which the
 * compiler does not charge; docs/fidelity.md.) */
/* Is p the parameter of a while loop's body or condition (the loop's state)? */
static int loop_state(const tpu__be *be, const tpu_instr *p) {
  const tpu_module *m = be->m;
  for (int ci = 0; ci < m->ncomps; ci++) {
    const tpu_comp *c = m->comps[ci];
    for (int i = 0; i < c->ninstrs; i++) {
      const tpu_instr *w = c->instrs[i];
      if (w->op == TPU_OP_WHILE && (w->body == p->parent || w->condition == p->parent)) return 1;
    }
  }
  return 0;
}

static int free_layout(const tpu__be *be, const tpu_instr *v, const tpu_shape *s) {
  int64_t lanes = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
  if (s->rank < 2 || s->layout_tail || !tpu_dtype_is_array(s->dtype)) return 0;
  while (v->op == TPU_OP_GET_TUPLE_ELEMENT && v->noperands) v = v->operands[0];
  const tpu_comp *e = be->m->entry;
  /* a loop's state (its body's parameter) is computed inside the program too */
  if ((v->op == TPU_OP_PARAMETER && (v->parent == e || !loop_state(be, v))) || v->op == TPU_OP_CONSTANT) return 0;
  if (tpu__program_result(e, v)) return 1;
  if (s == &v->shape && tpu__scan_row_major(v)) return 0; /* a major scan's (scan_window.c) */
  int64_t minor = s->dims[s->has_layout ? s->minor_to_major[0] : s->rank - 1];
  if (s->rank < 3 && minor != 1) return 0;
  if (minor % lanes == 0) return 0;
  const tpu__kinfo *k = tpu__be_info(be, v);
  return !(k && k->mm && k->mm->op == TPU_OP_CONVOLUTION);
}

/* The shape v's buffer holds (s: v's shape or a leaf of it). A fusion whose root pads its
 * one result with rows of a constant, read by reduce-scatters alone (rs_pad.c: the padding
 * the XLA TPU compiler's all-reduce-scatter fusion adds), holds the unpadded rows: that
 * fusion takes the pad in and supplies the padding as it streams its operand, so no buffer
 * of the padded shape exists (libtpu memory_analysis(), bench/plan_memory.py: fsdp_dp_mlp_step
 * on v5e has 16.5 MiB of temporaries, less than one of its bf16[8192,2048] gradients). */
const tpu_shape *tpu__held_shape(const tpu_instr *v, const tpu_shape *s) {
  if (!v || v->op != TPU_OP_FUSION || !v->calls || !v->calls->root || s != &v->shape || !v->parent) return s;
  const tpu_instr *r = v->calls->root;
  if (r->op != TPU_OP_PAD || r->noperands != 2 || r->operands[1]->op != TPU_OP_CONSTANT) return s;
  const tpu_comp *c = v->parent;
  int nuse = 0;
  for (int i = 0; i < c->ninstrs; i++) {
    const tpu_instr *u = c->instrs[i];
    for (int o = 0; o < u->noperands; o++) {
      if (u->operands[o] != v) continue;
      if (tpu_collective_base(u->op) != TPU_OP_REDUCE_SCATTER) return s;
      nuse++;
    }
  }
  return nuse && v != c->root ? &r->operands[0]->shape : s;
}

/* The padded bytes of a convolution kernel's result v (of its own shape s) computed and used
 * inside the program, -1 for any other value. The XLA TPU compiler's layout assignment gives
 * it the convolution's layout, the batch in the sublanes and the features in the lanes (or,
 * with fewer features than the lanes and a larger batch, the batch in the lanes: relayout.c),
 * whatever dimension order the HLO text gives it: an NCHW program's bf16[8,128,14,14] passed
 * from its forward convolution to the two of its gradient is tiled 8 x 128 in the compiler's
 * programs (conv_grad_nchw_hwio_nchw_b8_14_c128to128_k1: {1,0,3,2}), not 14 x 14 padded to
 * 16 x 128 (9.1x the bytes). Only the program's results are relaid out for the caller
 * (relayout.c), and a result the fused computation transposes (relayout.c's own) is already
 * that order. */
static int64_t conv_result_bytes(const tpu__be *be, const tpu_instr *v, const tpu_shape *s) {
  if (s != &v->shape || s->rank < 3 || s->layout_tail || !tpu_dtype_is_array(s->dtype)) return -1;
  const tpu_comp *e = be->m->entry;
  if (v->parent != e || tpu__program_result(e, v)) return -1;
  const tpu__kinfo *k = tpu__be_info(be, v);
  const tpu_instr *cv = k ? k->mm : NULL;
  if (!cv || cv->op != TPU_OP_CONVOLUTION || !cv->has_conv_dims || cv->shape.rank != s->rank ||
      memcmp(cv->shape.dims, s->dims, sizeof s->dims[0] * (size_t)s->rank))
    return -1;
  const tpu_conv_dims *cd = cv->conv;
  int64_t taps = 1, lanes = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
  for (int i = 0; i < cd->nspatial; i++) taps *= cv->operands[1]->shape.dims[cd->k_spatial[i]];
  int batch = (int)cd->out_batch, feature = (int)cd->out_feature;
  int few = tpu__conv_batch_in_lanes(cv->feature_group_count, taps, s->dims[feature], s->dims[batch], lanes);
  return tpu__tiled_as(be->chip, s, few ? feature : batch, few ? batch : feature);
}

/* The padded bytes of value v (of shape s, or a leaf of it) as laid out in HBM or VMEM. */
int64_t tpu__value_bytes(const tpu__be *be, const tpu_instr *v, const tpu_shape *s) {
  int64_t c = conv_result_bytes(be, v, s);
  if (c >= 0) return c;
  return free_layout(be, v, s) ? tpu__least_tiled_bytes(be->chip, s) : tpu__padded_bytes(be, s);
}

/* The fusion operand a fusion whose root is a dynamic-update-slice or a scatter updates in
 * place (the root's operand 0 is that fused parameter): the XLA TPU compiler's
 * constant_dynamic-update-slice fusions write only the update into the operand's buffer,
 * as a lone dynamic-update-slice does; its kCustom scatter_fusion likewise reads and writes
 * only the rows its updates touch, its result aliasing operand 0 (the compiler copies a
 * parameter it may not overwrite into the result's buffer first: copy.2 of
 * scatter_add_50257x1024_m16_bf16, 206 MB, estimated 361,056 cycles on v5p, then the
 * scatter of 16 rows into it). The root (whose update_shape is what it writes), or NULL. */
static const tpu_instr *fused_update(const tpu__be *be, const tpu_instr *in, int leaf) {
  if (in->op != TPU_OP_FUSION || !in->calls || !in->calls->root) return NULL;
  const tpu_instr *r = in->calls->root;
  if (r->op == TPU_OP_TUPLE && in->shape.dtype == TPU_TUPLE) /* a multi-output fusion's result (fuse_merge.c) */
    r = leaf >= 0 && leaf < r->noperands ? r->operands[leaf] : NULL;
  else if (leaf != 0)
    return NULL;
  if (!r || (r->op != TPU_OP_DYNAMIC_UPDATE_SLICE && !(r->op == TPU_OP_SCATTER && r->noperands == 3)) ||
      r->noperands < 2 || r->operands[0]->op != TPU_OP_PARAMETER)
    return NULL;
  if (r->op == TPU_OP_SCATTER && tpu__scatter_staged(be, r)) return NULL; /* whole operand: scatter_form.c */
  int k = (int)r->operands[0]->index;
  return k >= 0 && k < in->noperands ? r : NULL;
}

/* The shape an in-place update r (fused_update's root) writes: a dynamic-update-slice's
 * update, a scatter's updates. */
static const tpu_shape *update_shape(const tpu_instr *r) {
  return &r->operands[r->op == TPU_OP_SCATTER ? r->noperands - 1 : 1]->shape;
}

/* The in-place update (fused_update's root) of the buffer that fusion operand j is, or
 * NULL. */
static const tpu_instr *fused_update_target(const tpu__be *be, const tpu_instr *in, int j) {
  int nl = in->shape.dtype == TPU_TUPLE ? in->shape.ntuple : 1;
  for (int l = 0; l < nl; l++) {
    const tpu_instr *r = fused_update(be, in, l);
    if (r && (int)r->operands[0]->index == j) return r;
  }
  return NULL;
}

/* A compiled program's value in scalar memory (memory space S(6), SMEM: indices, loop
 * counters): the scalar unit reads and writes it there, no transfer to or from HBM. */
static int in_smem(const tpu_shape *s) { return s->layout_tail && strstr(s->layout_tail, "S(6)") != NULL; }

/* A rank-0 value's layout leaves it to the scalar unit: none given (tpusim's own
 * compilation), or a compiled program's tile alone (s32[]{:T(128)}: a loop counter the
 * compiler names no memory space for) or scalar memory (S(6)); not one it places in VMEM,
 * HBM's alternate spaces or CMEM (S(1), S(2), S(3)). */
static int scalar_layout(const tpu_shape *s) {
  return !s->layout_tail || !strstr(s->layout_tail, "S(") || strstr(s->layout_tail, "S(6)");
}

/* An op of scalars (a rank-0 result from rank-0 operands: a loop counter's increment, the
 * loop condition's compare): the scalar unit's work, in tpusim's own compilation and in
 * the compiler's programs alike (whose 52 compares and 52 adds of loop counters in while
 * bodies, families corpus, have no estimated_cycles, their counters in HBM's layout or in
 * S(6)). */
static int scalar_op(const tpu_instr *in) {
  if (!tpu_dtype_is_array(in->shape.dtype) || in->shape.rank != 0 || !scalar_layout(&in->shape) ||
      in->noperands < 1 || in->op == TPU_OP_FUSION || in->op == TPU_OP_CUSTOM_CALL || in->op == TPU_OP_PARAMETER)
    return 0;
  for (int i = 0; i < in->noperands; i++) {
    const tpu_shape *o = &in->operands[i]->shape;
    if (!tpu_dtype_is_array(o->dtype) || o->rank != 0 || !scalar_layout(o)) return 0;
  }
  return 1;
}

/* Does scalar op `in` keep rank-0 value v in scalar memory (SMEM)? A loop's scalar state
 * (its counter), a constant, or another scalar op's result: the XLA TPU compiler keeps the
 * counter, its increment and the condition's compare in S(6) (the compiled cumsum scan's
 * copy.4, add.10, compare.3) and gives them no estimated_cycles; tpusim read the counter
 * from HBM, a transfer's latency each step (0.5 us on v5e, 17 % of that scan). */
/* Has a scalar op before `in` in its computation read v? The compiler copies a value the
 * scalar unit reads into scalar memory once (the compiled gather_rows_*_m1's `copy` of the
 * index parameter into S(6), which add, compare and select then read there), so only the
 * first reader transfers it. */
static int read_by_scalar_before(const tpu_instr *in, const tpu_instr *v) {
  const tpu_comp *c = in->parent;
  for (int i = 0; c && i < c->ninstrs && c->instrs[i] != in; i++) {
    const tpu_instr *u = c->instrs[i];
    if (!scalar_op(u)) continue;
    for (int j = 0; j < u->noperands; j++)
      if (u->operands[j] == v) return 1;
  }
  return 0;
}

static int scalar_smem(const tpu__be *be, const tpu_instr *in, const tpu_instr *v) {
  if (!scalar_op(in)) return 0;
  if (v != in && tpu_dtype_is_array(v->shape.dtype) && tpu_shape_numel(&v->shape) == 1 && read_by_scalar_before(in, v))
    return 1;
  while (v->op == TPU_OP_GET_TUPLE_ELEMENT && v->noperands) v = v->operands[0];
  if (v->op == TPU_OP_CONSTANT || scalar_op(v)) return 1;
  return v->op == TPU_OP_PARAMETER && v->parent != be->m->entry && loop_state(be, v);
}

/* A pad kernel of its own (not fused, no interior padding) as large as the chip's lone
 * elementwise kernels (lone_op_min_bytes, in and out): the XLA TPU compiler runs it over
 * windows of its result, reading for each an input window of that window's size, and times
 * it as the unfused elementwise kernel over its result (stream_costs: lone). libtpu probes
 * (bench/fidelity/probes/pad_window.py): v5e f32 [16,192,256] padded to [16,384,256] 47,440
 * cycles, negate of f32[16,384,256] 47,440 (tpusim before 22,602, now 48,764); f32
 * [64,192,256] to [64,384,256] v5e/v5p/v6e 178,421 / 84,547 / 151,078 (before 87,261 /
 * 35,733 / 47,180; now 192,112 / 90,900 / 156,223). Not space to batch's own pad (tile.c),
 * nor an interior pad (a strided store the compiler times far below that: 9,940 cycles to
 * [16,383,256]). */
int tpu__whole_window_pad(const tpu__be *be, const tpu_instr *in) {
  if (in->op != TPU_OP_PAD || in->noperands != 2 || in->npadding != in->shape.rank) return 0;
  if (2 * tpu__padded_bytes(be, &in->shape) < be->chip->lone_op_min_bytes) return 0;
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, "s2b_halo")) return 0;
  for (int d = 0; d < in->npadding; d++)
    if (in->padding[d].interior != 0 || in->padding[d].lo < 0 || in->padding[d].hi < 0) return 0;
  return 1;
}

static const tpu_instr *pool_window(const tpu_instr *in, int *scan);

static int64_t read_bytes(const tpu__be *be, const tpu_instr *in, int j, int padded) {
  const tpu_shape *s = &in->operands[j]->shape;
  if (in_smem(s) || scalar_smem(be, in, in->operands[j])) return 0;
  /* A pooling window's constant init value is an immediate of its kernel, not a transfer:
   * the XLA TPU compiler fuses it into the window's kOutput fusion, whose one operand is the
   * pooled array (the families' maxpool2d_*, avgpool2d_* window fusions, every generation). */
  if (in->op == TPU_OP_REDUCE_WINDOW && j >= in->noperands / 2 && in->operands[j]->op == TPU_OP_CONSTANT &&
      s->rank == 0 && pool_window(in, NULL))
    return 0;
  if (in->op == TPU_OP_FUSION) {
    if (carried_operand(in, j)) return 0;
    const tpu_instr *fu = fused_update_target(be, in, j);
    /* a dynamic-update-slice overwrites its rows; a scatter reads the rows it combines into,
     * as a lone scatter does */
    if (fu && fu->op != TPU_OP_SCATTER) return 0;
    if (fu) return padded ? tpu__padded_bytes(be, update_shape(fu)) : tpu__plain_bytes(update_shape(fu));
    int64_t b = fused_slice_bytes(be, in, j, padded);
    if (b >= 0) return b;
  }
  if (j == 0 && (in->op == TPU_OP_GATHER || in->op == TPU_OP_DYNAMIC_SLICE)) {
    s = &in->shape;
    if (padded && state_slice(be, in->operands[0], s)) return tpu__least_tiled_bytes(be->chip, s);
  }
  if (j == 0 && in->op == TPU_OP_DYNAMIC_UPDATE_SLICE) return 0;
  if (j == 0 && tpu__whole_window_pad(be, in)) s = &in->shape;
  if (in->op == TPU_OP_SCATTER && j < (in->noperands - 1) / 2 && tpu__scatter_fills(be, in, j)) return 0;
  if (in->op == TPU_OP_SCATTER && j < (in->noperands - 1) / 2 && !tpu__scatter_staged(be, in)) {
    /* scatter(operands[N], indices, updates[N]) row by row: only the rows the updates
     * touch (staged in VMEM, scatter_form.c: all of it) */
    s = &in->operands[(in->noperands - 1) / 2 + 1 + j]->shape;
  }
  if (padded && s == &in->operands[j]->shape) return tpu__value_bytes(be, in->operands[j], s);
  return padded ? tpu__padded_bytes(be, s) : tpu__plain_bytes(s);
}

int64_t tpu__read_bytes(const tpu__be *be, const tpu_instr *in, int j) {
  return read_bytes(be, in, j, 1);
}

static int64_t write_bytes(const tpu__be *be, const tpu_instr *in, int leaf, int padded) {
  const tpu_shape *s = tpu__leaf(&in->shape, leaf);
  if (!s || carried_leaf(in, leaf) || in_smem(s) || scalar_smem(be, in, in)) return 0;
  const tpu_instr *fu = fused_update(be, in, leaf);
  int upd = in->op == TPU_OP_DYNAMIC_UPDATE_SLICE || fu;
  if (in->op == TPU_OP_DYNAMIC_UPDATE_SLICE) s = &in->operands[1]->shape;
  else if (fu) s = update_shape(fu);
  int staged = in->op == TPU_OP_SCATTER && tpu__scatter_staged(be, in);
  if (in->op == TPU_OP_SCATTER && !staged) {
    int nupd = (in->noperands - 1) / 2;
    s = &in->operands[in->noperands - nupd + (leaf < nupd ? leaf : 0)]->shape;
  }
  if (padded && !upd && (in->op != TPU_OP_SCATTER || staged)) return tpu__value_bytes(be, in, s);
  return padded ? tpu__padded_bytes(be, s) : tpu__plain_bytes(s);
}

int64_t tpu__write_bytes(const tpu__be *be, const tpu_instr *in, int leaf) {
  return write_bytes(be, in, leaf, 1);
}

int64_t tpu__plain_write_bytes(const tpu__be *be, const tpu_instr *in, int leaf) {
  return write_bytes(be, in, leaf, 0);
}

static void kernel_bytes(const tpu__be *be, const tpu_instr *in, tpu__kinfo *k) {
  int64_t rin = 0, pin = 0, rout = 0, pout = 0;
  for (int j = 0; j < in->noperands; j++) {
    rin += read_bytes(be, in, j, 0);
    pin += read_bytes(be, in, j, 1);
  }
  int nl = tpu__leaves(&in->shape);
  for (int l = 0; l < nl; l++) {
    rout += write_bytes(be, in, l, 0);
    pout += write_bytes(be, in, l, 1);
  }
  k->bytes = (double)(rin + rout);
  k->padded_bytes = (double)(pin + pout);
  k->in_bytes = pin;
  k->out_bytes = pout;
  /* The registers the kernel streams through: its largest array as read or written, so a
   * dynamic-slice counts its slice, not the array it slices, and a dynamic-update-slice
   * the update it writes in place. */
  int64_t sub = be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8;
  int64_t lanes = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
  int64_t reg = sub * lanes * 4, sv = 0;
  /* (buffers a fusion only carries for its collective span their whole arrays here: the
   * vector work of its fused ops is spread over them) */
  for (int l = 0; l < nl; l++) {
    const tpu_shape *ls = tpu__leaf(&in->shape, l);
    int64_t w = carried_leaf(in, l) && ls ? tpu__padded_bytes(be, ls) : write_bytes(be, in, l, 1);
    int64_t v = (w + reg - 1) / reg;
    if (v > sv) sv = v;
  }
  for (int i = 0; i < in->noperands; i++) {
    int64_t r = in->op == TPU_OP_FUSION && carried_operand(in, i) ? tpu__padded_bytes(be, &in->operands[i]->shape)
                                                                  : read_bytes(be, in, i, 1);
    int64_t v = (r + reg - 1) / reg;
    if (v > sv) sv = v;
  }
  k->space_vregs = sv > 0 ? sv : 1;
}

/* Whether window dimension x over a dimension of n slides over all of it as a scan does
 * (jnp.cumsum's lowering: a window of n, padded by n - 1 on one side, unit stride). */
static int scan_window_dim(const tpu_window_dim *x, int64_t n) {
  return n >= 2 && x->size == n && x->stride == 1 && x->base_dilation <= 1 && x->window_dilation <= 1 &&
         ((x->pad_lo == n - 1 && x->pad_hi == 0) || (x->pad_lo == 0 && x->pad_hi == n - 1));
}

/* The pooling reduce-window kernel `in` is or holds (its fused computation's root, through
 * element-wise epilogue ops): a reduce-window of one operand, laid out, sliding along some
 * dimension and not along the two minor ones of its layout (sublanes and lanes), nor over a
 * whole dimension but as a scan; NULL otherwise. *scan (when not NULL): whether it is a scan
 * along a major dimension, which the XLA TPU compiler runs in the same depthwise window
 * emitter (EmitDepthwiseAllBatchInLanes) as a pool and costs so from HBM: its kernel
 * overhead and window start, then its transfers, whatever the window's length (libtpu probes
 * bench/fidelity/probes/scan_start.py: f32[K,8,128] max scans, K = 16 to 128, v5e 3,870 to
 * 5,764 cycles, 3,565 of start (kernel_overhead_s + window_start_cycles) and 16.9 a row). */
static const tpu_instr *pool_window(const tpu_instr *in, int *scan) {
  if (scan) *scan = 0;
  const tpu_instr *w = in;
  if (in->op == TPU_OP_FUSION && in->calls) {
    w = NULL;
    for (int i = 0; i < in->calls->ninstrs; i++)
      if (in->calls->instrs[i]->op == TPU_OP_REDUCE_WINDOW) {
        if (w) return NULL; /* one window per kernel */
        w = in->calls->instrs[i];
      }
  }
  if (!w || w->op != TPU_OP_REDUCE_WINDOW || w->noperands != 2 || w->shape.dtype == TPU_TUPLE || !w->shape.has_layout ||
      w->shape.rank < 3 || w->nwindow != w->shape.rank)
    return NULL;
  const tpu_shape *s = &w->operands[0]->shape;
  int any = 0;
  for (int d = 0; d < w->nwindow; d++) {
    const tpu_window_dim *x = &w->window[d];
    int slides = x->size > 1 || x->stride > 1 || x->base_dilation > 1 || x->window_dilation > 1;
    if (!slides) continue;
    if (d == w->shape.minor_to_major[0] || d == w->shape.minor_to_major[1]) return NULL;
    if (x->size >= s->dims[d]) {
      if (!scan_window_dim(x, s->dims[d])) return NULL;
      if (scan) *scan = 1;
    }
    any = 1;
  }
  return any ? w : NULL;
}

/* The bytes value v's shape s takes as laid out (v NULL: s's own layout, or row-major) and
 * the dimension in its lanes: the least padded tiling where the compiler chooses v's layout
 * (free_layout), else s's. */
int64_t tpu__value_tiling(const tpu__be *be, const tpu_instr *v, const tpu_shape *s, int *lane) {
  int second = s->rank - 2;
  *lane = s->has_layout ? s->minor_to_major[0] : s->rank - 1;
  if (v && free_layout(be, v, s)) return tpu__least_tiling(be->chip, s, &second, lane);
  return tpu__padded_bytes(be, s);
}

/* A matmul kernel writing 16-bit results pays the chip's per-element stream pass on those
 * transfers, as a stream kernel does (the XLA TPU compiler's cost model: bf16[8192,64] x
 * bf16[64,512] takes 62,609 cycles on v5e, its 8 MiB result at 134 B/cycle, and a batch of
 * 16 [512,64] x [64,512] 64,608, where the MXU needs about 4,000); the factor on their bytes. */
static double result_pass(const tpu__be *be, const tpu_instr *in, const tpu__kinfo *k) {
  const double pass = tpu_chip_result_pass(be->chip);
  if (pass <= 0 || k->out_bytes <= 0) return 0;
  double n = 0;
  int nl = tpu__leaves(&in->shape);
  for (int l = 0; l < nl; l++) {
    const tpu_shape *s = tpu__leaf(&in->shape, l);
    if (s && tpu_dtype_is_array(s->dtype) && tpu_dtype_size(s->dtype) == 2) n += (double)tpu_shape_numel(s);
  }
  return n > 0 ? 1.0 + pass * n / (double)k->out_bytes : 0;
}

/* Whether computation c runs a dot or convolution (in a fusion within it too). */
static int runs_matmul(const tpu_comp *c, int depth) {
  for (int i = 0; c && depth < 4 && i < c->ninstrs; i++) {
    const tpu_instr *x = c->instrs[i];
    if (x->op == TPU_OP_DOT || x->op == TPU_OP_CONVOLUTION) return 1;
    if (x->op == TPU_OP_FUSION && runs_matmul(x->calls, depth + 1)) return 1;
  }
  return 0;
}

/* Whether matmul kernel `in` (a fusion around its dot or convolution) reduces the product in
 * its epilogue: a reduce in its computation reads, through any of the fusion's ops, the
 * matmul's result (a softmax's row sums over attention scores, the next norm's sum of
 * squares after a projection; the compiler's programs nest the matmul in a fusion of its
 * own). A bare matmul reduces nothing. */
static int reduces_product(const tpu_instr *in) {
  const tpu_comp *c = in->op == TPU_OP_FUSION ? in->calls : NULL;
  unsigned char from[1024] = {0}; /* by instruction id (its position): computed from the product */
  if (!c || c->ninstrs > (int)sizeof from) return 0;
  for (int i = 0; i < c->norder; i++) { /* operands first */
    const tpu_instr *x = c->order[i];
    int f = x->op == TPU_OP_DOT || x->op == TPU_OP_CONVOLUTION || (x->op == TPU_OP_FUSION && runs_matmul(x->calls, 0));
    for (int j = 0; !f && j < x->noperands; j++) f = x->operands[j]->parent == c && from[x->operands[j]->id];
    if (f && x->op == TPU_OP_REDUCE) return 1;
    from[x->id] = (unsigned char)f;
  }
  return 0;
}

tpu_status tpu__pass_layout(tpu__be *be) {
  for (int ci = 0; ci < be->m->ncomps; ci++) {
    if (!be->scheduled[ci]) continue;
    const tpu_comp *c = be->m->comps[ci];
    for (int i = 0; i < c->ninstrs; i++) {
      const tpu_instr *in = c->instrs[i];
      tpu__kinfo *k = &be->k[be->comp_base[ci] + in->id];
      if (k->kind == TPU__K_STREAM || k->kind == TPU__K_MATMUL || k->kind == TPU__K_COPY ||
          k->kind == TPU__K_LINALG) {
        kernel_bytes(be, in, k);
        if (k->op >= 0) {
          be->p->ops[k->op].bytes = k->bytes;
          be->p->ops[k->op].padded_bytes = k->padded_bytes;
          if (k->kind != TPU__K_MATMUL && !be->p->ops[k->op].scalar) {
            /* A pooling window kernel (the compiler's depthwise window emitter) costs what a
             * stream kernel does, its transfers and stream passes, plus a start of its own
             * (chip window_start_cycles), and reads a value in VMEM in place: libtpu probes
             * of 22 to 26 pools per generation (bench/fidelity/probes/pool_window.py, the
             * input prefetched into VMEM) fit that start within a median 2.4 % on v5e, 3.9 %
             * on v6e, 10 % on v4, whatever the window; reading HBM instead adds the input's
             * bytes (the compiler's 32x14x14x256 max pool, w5s2: 6,302 cycles on v5e from VMEM,
             * 14,070 from HBM). */
            int scan = 0;
            const int win = pool_window(in, &scan) != NULL;
            be->p->ops[k->op].window = win;
            be->p->ops[k->op].scan = win && scan;
            be->p->ops[k->op].xbytes = be->p->ops[k->op].dma ? 0 : tpu__stream_costs(be, in, k) +
                (win ? tpu_chip_window_start(be->chip, scan) * tpu_chip_hbm_stream_bw(be->chip) / be->chip->clock_hz : 0);
          }
          if (k->kind == TPU__K_MATMUL) {
            be->p->ops[k->op].out_scale = result_pass(be, in, k);
            be->p->ops[k->op].reduce_epilogue = reduces_product(in);
          }
        }
      }
    }
  }
  return TPU_OK;
}
