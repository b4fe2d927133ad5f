/* Which copies are kernels, and their relayout tiles (back-end pass `tile`, tile.c): a
 * copy into, within or out of VMEM, the layout copies of tpusim's own compilation that the
 * XLA TPU compiler runs on the vector unit, parameter copies prefetched into VMEM, windowed
 * copies within VMEM, and the tiles a sublane relayout pays for (docs/timing-mxu.md: the
 * sublane relayouts around a convolution's small-batch layouts, relayout_tile_cycles). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"

#include "compile/backend/backend.h"
#include "compile/passes/hlo_passes.h"

/* A compiled program's copy into or out of VMEM (memory space S(1) on either side): the
 * compiler relays values out into VMEM, within it and back to HBM (bf16[2,2048,2048]
 * {2,1,0} -> {1,2,0}, both in VMEM: 2,400 cycles on v5e and v6e, against 122,352 and 93,120
 * from HBM), so it is a vector kernel that reads an S(1) operand on chip and whose S(1)
 * result stays there, not an HBM-to-HBM DMA. */
int tpu__vmem_copy(const tpu_instr *in) {
  return in->op == TPU_OP_COPY && in->noperands == 1 && (tpu__in_vmem(&in->shape) || tpu__in_vmem(&in->operands[0]->shape));
}

/* A copy of tpusim's own compilation that moves the dimension in the lanes and that only
 * gathers read, as their table (param_layout.c gather_layout): no DMA transposes, so it is a
 * kernel on the vector unit, as the XLA TPU compiler's layout copies are (each a `copy` with
 * estimated_cycles), and its result may stay in VMEM for the gathers (the compiler's read
 * their relaid-out table from memory space S(1) on v5e and v6e: gather_axis1_64x30522_m7_f32,
 * gather_rows_8192x64_m7_bf16). So is a copy laying a parameter out for the reduce-windows
 * that alone read it (a pool in its least padded layout, window_layout.c) that keeps the
 * lanes' dimension: the compiler's `copy` of f32[32,112,112,3]{2,1,3,0} into {2,0,3,1} writes
 * S(1) on v5e and v6e (15,330 cycles on v5e), its window reading it there (v4: CMEM, v5p:
 * HBM, where vmem_assign.c keeps nothing between kernels); one moving the lanes stays a
 * transfer (maxpool3x3s2_32x112x112x64_bf16's {2,3,1,0} -> {3,2,1,0}, 826,560 cycles into HBM
 * on v6e, test_rules). Other relayout copies stay transfers: taking
 * every lane-moving copy so moved the families corpus's pools and cumulative sums both ways
 * (own compilation, cumsum_126x80x65_ax1_f32 v6e -13 -> -45 %, avgpool2d_8x112x112x3 v6e
 * +170 -> +124 %), unresolved. A compiled program's copies keep their own forms. */
int tpu__relayout_kernel(const tpu__be *be, const tpu_instr *in) {
  if (tpu__patch_relayout_cycles(be->chip, in) > 0) return 1;
  if (in->op != TPU_OP_COPY || in->noperands != 1 || in->shape.layout_tail || in->operands[0]->shape.layout_tail ||
      !in->parent)
    return 0;
  /* A select-and-scatter's copies (sas_layout.c) are the compiler's vector kernels, `copy`,
   * `copy.1` and `copy.2` with estimated_cycles: on v5e and v6e they write and read VMEM, the
   * select-and-scatter between them (S(1) on each side in every probe, probes/sas_layout.py) */
  if (tpu__sas_copy_small_tiles(be->chip, in) >= 0) return 1;
  /* and its copy of the scan's result back (the compiler's copy.1 reads S(1) on v5e/v6e) */
  const tpu_instr *src = in->operands[0];
  if (src->op == TPU_OP_REDUCE_WINDOW && tpu__scan_row_major(src)) return 1;
  int gathers = 0, windows = 0, scans = 0;
  for (int i = 0; i < in->parent->ninstrs; i++) {
    const tpu_instr *u = in->parent->instrs[i];
    for (int o = 0; o < u->noperands; o++)
      if (u->operands[o] == in) {
        if (o != 0 || (u->op != TPU_OP_GATHER && u->op != TPU_OP_REDUCE_WINDOW)) return 0;
        *(u->op == TPU_OP_GATHER ? &gathers : &windows) += 1;
        scans += u->op == TPU_OP_REDUCE_WINDOW && tpu__scan_row_major(u);
      }
  }
  /* a scan kernel's copy of its parameter (scan_layout.c) writes VMEM whatever it moves: the
   * compiler's copy of s32[80,126,80]{1,2,0} into {2,1,0} writes S(1) on v5e and v6e, 12,444
   * cycles on v5e (cummax_80x126x80_ax0_s32; s32[64,100,64] probed alike) */
  if (windows && scans == windows) return !gathers && in->operands[0]->op == TPU_OP_PARAMETER;
  if (windows) return !gathers && in->operands[0]->op == TPU_OP_PARAMETER && !tpu__moves_minor(be->chip, in);
  return gathers > 0 && tpu__moves_minor(be->chip, in);
}

/* Whether two layout tails (":T(8,128)(2,1)S(1)") name the same tiles, memory spaces aside. */
static int same_tiles(const char *a, const char *b) {
  for (;;) {
    if (a[0] == 'S' && a[1] == '(') a = strchr(a, ')') ? strchr(a, ')') + 1 : a + strlen(a);
    if (b[0] == 'S' && b[1] == '(') b = strchr(b, ')') ? strchr(b, ')') + 1 : b + strlen(b);
    if (*a != *b) return 0;
    if (!*a) return 1;
    a++, b++;
  }
}

/* A compiled program's copy kernel whose operand is in VMEM (S(1)) and whose result is in HBM
 * (a relayout of a kernel's result into the entry's layout, a leaf copied out): the XLA TPU
 * compiler charges it its HBM write, the per-element stream pass of a result narrower than 32
 * bits over the result's tiles (stream_cost.c) and its start, and nothing for reading its
 * operand in VMEM, unlike a vector kernel reading a value kept there (chip vmem_read_cost, 1
 * on v5e). libtpu probes off the corpus (bench/fidelity/probes/copy_out.py: 1x1 convolutions
 * with relu, the result relaid out of VMEM {3,1,2,0} or {3,0,2,1} into the entry's {3,2,1,0}):
 * v5e f32[16,56,56,256] 131,908 cycles (its 51 MB written at 438 B a cycle: 117,306),
 * bf16[8,40,40,128] 23,005 (write 5,845 and pass 11,689); compiled families tune split, v5e:
 * bf16[16,1000,768] 173,208 (write and pass 168,329), f32[8,3000,512] 123,990 (write
 * 112,219); tpusim had charged the read too: 226,279 and 226,373 cycles. The timing leaves out
 * its read's vmem_read_cost (tpu_prog_op copy_out); the stream pass it still pays. Known gap:
 * v5p's compiler does the same (opt_lion_3072x768_...'s copy.20, f32[3072,768], 9,430 cycles,
 * its write 8,396; tpusim 18,868). */
int tpu__copy_out_of_vmem(const tpu__be *be, const tpu_instr *in) {
  /* only where tpusim keeps the operand in VMEM (one TensorCore, no CMEM: v5e, v6e); v5p's
   * vmem_assign.c keeps nothing between kernels, so the copy reads HBM there (not taken: the
   * stream pass over the tiles on top of that read moved v5p's copies to 1.3-1.45x) */
  if (be->chip->tensorcores > 1 || be->chip->cmem_bytes > 0 || be->chip->vmem_bytes <= 0) return 0;
  return in->op == TPU_OP_COPY && in->noperands == 1 && in->shape.layout_tail && !tpu__in_vmem(&in->shape) &&
         tpu__in_vmem(&in->operands[0]->shape) && !strstr(in->shape.layout_tail, "S(");
}

/* Is `in` the copy XLA's copy insertion gives an output leaf of the entry whose value another
 * leaf returns too (param_copy.c copy_repeated): a copy of the same layout that the root
 * tuple returns, of a value the root tuple returns itself? On a chip of one TensorCore
 * without CMEM (v5e, v6e) the compiler keeps that value in VMEM and the DMA engines write
 * both outputs from there: its `copy` has no kernel and no estimated_cycles, the other
 * leaf an asynchronous copy-start (libtpu probes, bench/fidelity/probes/dup_output.py,
 * f32[4,128] to bf16[1024,2048]; cumsum_scan_step_b8d256's copy.1 on v5e and v6e). On v4
 * (the value in CMEM) and v5p (in HBM) it is a vector kernel with its estimated_cycles, as
 * long as the producer's (v4 612 against 623 cycles, v5p 2,125 against 2,131 at f32[4,128]). */
int tpu__dup_output_copy(const tpu__be *be, const tpu_instr *in) {
  const tpu_chip *ch = be->chip;
  if (in->op != TPU_OP_COPY || in->noperands != 1 || !in->parent || !in->parent->is_entry || ch->tensorcores > 1 ||
      ch->cmem_bytes > 0 || ch->vmem_bytes <= 0)
    return 0;
  const tpu_instr *root = in->parent->root, *v = in->operands[0];
  if (!root || root->op != TPU_OP_TUPLE) return 0;
  /* tpusim's own compilation gives no memory spaces; a compiled program names them: a leaf
   * of the root tuple copied out of VMEM (S(1)) into HBM in the same layout and tiles is
   * the DMA engines' transfer whether or not another leaf returns the value too (the
   * compiled families corpus on v5e and v6e: 14 such copies, none with a window_config or
   * estimated_cycles — gru_step_b8i256h256's copy.1, opt_lion_3072x768_...'s copy.20 and
   * copy.34, f32[3072,768]; the one with its estimated_cycles, pad_256x64_1-1_0-0_s8's,
   * changes the tiles) */
  if (in->shape.layout_tail || v->shape.layout_tail) {
    if (!tpu__in_vmem(&v->shape) || tpu__in_vmem(&in->shape) || !in->shape.layout_tail || !v->shape.layout_tail ||
        !same_tiles(in->shape.layout_tail, v->shape.layout_tail) || in->shape.rank != v->shape.rank)
      return 0;
    int leaf = 0;
    for (int k = 0; k < root->noperands; k++) leaf |= root->operands[k] == in;
    for (int d = 0; leaf && d < in->shape.rank; d++)
      if (in->shape.minor_to_major[d] != v->shape.minor_to_major[d]) return 0;
    return leaf;
  }
  if (tpu__padded_bytes(be, &in->shape) > tpu__vmem_budget(ch)) return 0;
  int leaf = 0, twin = 0;
  for (int k = 0; k < root->noperands; k++) {
    const tpu_instr *x = root->operands[k];
    leaf |= x == in;
    while (x->op == TPU_OP_BITCAST && x->noperands == 1) x = x->operands[0];
    twin |= x == v;
  }
  if (!leaf || !twin || in->shape.rank != v->shape.rank || in->shape.has_layout != v->shape.has_layout) return 0;
  for (int d = 0; in->shape.has_layout && d < in->shape.rank; d++)
    if (in->shape.minor_to_major[d] != v->shape.minor_to_major[d]) return 0;
  return 1;
}

/* A transpose or layout copy that moves the lanes' dimension between arrays off the core
 * (HBM, or v4's CMEM): its kernel lasts at least two kernel starts (timing.c port_floor_op).
 * Not one whose operand or result is in VMEM (S(1)) in a compiled program, nor, in tpusim's
 * own compilation, a copy of a parameter that other kernels read on a chip that keeps such
 * values in VMEM (one TensorCore, no CMEM: v5e, v6e): the compiler's copy writes VMEM there
 * (concat_ax1_16x7_16x100_16x7_bf16: bf16[16,7] into S(1), 1,908 cycles on v5e). */
int tpu__relayout_off_core(const tpu__be *be, const tpu_instr *in) {
  if ((in->op != TPU_OP_COPY && in->op != TPU_OP_TRANSPOSE) || in->noperands != 1 || tpu__in_vmem(&in->shape) ||
      tpu__in_vmem(&in->operands[0]->shape) || !tpu__moves_minor(be->chip, in))
    return 0;
  if (in->op == TPU_OP_COPY && !in->shape.layout_tail && be->chip->tensorcores <= 1 && be->chip->cmem_bytes <= 0 &&
      in->parent && in->parent->root != in)
    return 0;
  /* own compilation's copies around a select-and-scatter (sas_layout.c) on a chip without
   * CMEM: the compiler reads the operand and the source of its copies in (copy, copy.1) from
   * VMEM (S(1)) on v5e, v5p and v6e, and on a chip of one TensorCore (v5e, v6e) keeps the
   * select-and-scatter's result in VMEM for the copy back (copy.2): one kernel start each
   * (libtpu probes/sas_layout.py, every case; v5p's copy.2 reads HBM: two) */
  if (in->op == TPU_OP_COPY && !in->shape.layout_tail && be->chip->cmem_bytes <= 0 &&
      tpu__sas_copy_small_tiles(be->chip, in) >= 0 && (tpu__sas_copy_in(in) || be->chip->tensorcores <= 1))
    return 0;
  /* A parameter's dynamic-slice returned in another tile (relayout.c tpu__result_slice_copy):
   * the compiler's slice kernel writes VMEM (S(1)) on a chip without CMEM and the copy reads
   * it there, one kernel start (libtpu probe f32[500,16]{0,1} sliced into f32[4,16]: copy.1
   * 1,908 / 2,206 / 2,204 cycles on v5e / v5p / v6e); v4's writes CMEM (S(3)), its copy
   * 1,281 cycles, two starts. */
  const tpu_instr *src = in->operands[0];
  if (in->op == TPU_OP_COPY && !in->shape.layout_tail && be->chip->cmem_bytes <= 0 &&
      src->op == TPU_OP_DYNAMIC_SLICE && src->noperands >= 1 && src->operands[0]->op == TPU_OP_PARAMETER)
    return 0;
  return 1;
}

/* In tpusim's own compilation, is `in` a copy of an entry parameter that runs after another
 * such copy? The XLA TPU compiler runs a program's parameter copies first, and its
 * memory-space assignment prefetches the later ones' parameters into VMEM with async copies
 * (copy-start/copy-done) under the earlier copies; only the first reads HBM, nothing running
 * before it to hide the transfer (concat_ax0_7x16_1x16_7x16_128x16_s8: of the relayout copies
 * of s8[7,16], s8[1,16] and s8[7,16] the first reads HBM, the others VMEM on v5e, v5p and v6e,
 * CMEM, S(3), on v4; concat_ax1_16x7_16x100_16x7_bf16 alike; bench/fidelity/families/compiled).
 * Not a parameter that an earlier kernel reads itself (it is read from HBM there), nor one
 * larger than a kernel's share of VMEM (tpu__vmem_budget, 16 MiB on v5e; an assumption
 * bounded by concat_ax0_64x197x197x3_..._f32, whose second and third copies read their
 * 38 MiB and 60 MiB parameters from HBM on every generation). */
int tpu__prefetched_param_copy(const tpu__be *be, const tpu_instr *in) {
  if (in->op != TPU_OP_COPY || in->noperands != 1 || in->shape.layout_tail) return 0;
  const tpu_instr *p = in->operands[0];
  const tpu_comp *c = in->parent;
  if (p->op != TPU_OP_PARAMETER || p->shape.layout_tail || !c || !c->is_entry) return 0;
  if (be->chip->vmem_bytes <= 0 || tpu__padded_bytes(be, &p->shape) > tpu__vmem_budget(be->chip)) return 0;
  int after_copy = 0;
  for (int i = 0; i < c->ninstrs && c->instrs[i] != in; i++) {
    const tpu_instr *x = c->instrs[i];
    for (int j = 0; j < x->noperands; j++)
      if (x->operands[j] == p) return 0;
    after_copy |= x->op == TPU_OP_COPY && x->noperands == 1 && x->operands[0]->op == TPU_OP_PARAMETER;
  }
  return after_copy;
}

/* The dimensions of s in minor-to-major order, leaving out those of size 1 (they move no
 * bytes); returns how many. */
static int moving_order(const tpu_shape *s, int *out) {
  int n = 0;
  for (int i = 0; i < s->rank; i++) {
    int d = s->has_layout ? s->minor_to_major[i] : s->rank - 1 - i;
    if (s->dims[d] > 1) out[n++] = d;
  }
  return n;
}

/* A compiled program's copy within VMEM (S(1) on both sides) that moves the dimension in
 * the lanes (a transpose) or moves no bytes at all (only dimensions of size 1 change
 * places): the XLA TPU compiler runs it as a windowed copy, 100 cycles per window of at
 * most 1 MiB, with no kernel start (every such copy of the compiled families corpus on v5e
 * and v6e, 59 and 60: estimated_cycles = 100 x the product of its iteration_bounds, e.g.
 * bf16[2,2048,512] {2,1,0} -> {1,2,0} 600 cycles in 6 windows). One that keeps the lanes'
 * dimension and reorders the others relays the sublanes out on the vector unit (50 on
 * v5e, 1,961-201,868 cycles). Returns the windows, or 0 when `in` is not such a copy. */
int64_t tpu__windowed_vmem_copy(const tpu__be *be, const tpu_instr *in) {
  if (in->op != TPU_OP_COPY || in->noperands != 1) return 0;
  const tpu_shape *r = &in->shape, *o = &in->operands[0]->shape;
  if (!tpu__in_vmem(r) || !tpu__in_vmem(o) || r->rank != o->rank) return 0;
  int a[TPU_MAX_RANK], b[TPU_MAX_RANK];
  int na = moving_order(r, a), nb = moving_order(o, b), same = na == nb;
  for (int i = 0; same && i < na; i++) same = a[i] == b[i];
  if (!same && na > 0 && nb > 0 && a[0] == b[0]) return 0; /* a sublane relayout */
  int64_t bytes = tpu__padded_bytes(be, r), ob = tpu__padded_bytes(be, o), win = (int64_t)1 << 20;
  if (ob > bytes) bytes = ob;
  return bytes > win ? (bytes + win - 1) / win : 1;
}

/* A compiled layout's tiling T(r,c) (its first tile): 1 with *r and *c set, 0 without one. */
static int layout_tile(const tpu_shape *s, long long *r, long long *c) {
  const char *t = s->layout_tail ? strstr(s->layout_tail, "T(") : NULL;
  if (!t) return 0;
  char *e = NULL;
  *r = strtoll(t + 2, &e, 10);
  if (!e || *e != ',' || *r <= 0) return 0;
  *c = strtoll(e + 1, &e, 10);
  return e && *e == ')' && *c > 0;
}

/* The 32-bit words of one tile of a shape's layout (T(8,128)(2,1) bf16: 512, a packed tile
 * of 8 rows of 2-byte elements; T(8,128) f32: 1,024), 0 without a tile. */
static int64_t tile_words(const tpu_shape *s) {
  long long r = 0, c = 0;
  if (!layout_tile(s, &r, &c)) return 0;
  int64_t bits = tpu_dtype_bits(s->dtype);
  return bits > 0 ? (r * c * bits + 31) / 32 : 0;
}

/* The 32-bit words of one vector register (8 sublanes x 128 lanes: 1,024). */
static int64_t register_words(const tpu_chip *chip) {
  return (chip->vector_sublanes > 0 ? chip->vector_sublanes : 8) * (chip->vector_lanes > 0 ? chip->vector_lanes : 128);
}

/* The tiles of a compiled program's array in its given tiling T(r,c): its second-minor
 * dimension in blocks of r, its minor one in blocks of c; 0 without one. */
static int64_t layout_tiles(const tpu_shape *s) {
  long long r = 0, c = 0;
  if (s->dtype == TPU_TUPLE || !s->layout_tail || !s->has_layout || s->rank < 2 || !layout_tile(s, &r, &c)) return 0;
  int64_t minor = s->dims[s->minor_to_major[0]], second = s->dims[s->minor_to_major[1]], major = 1;
  for (int i = 2; i < s->rank; i++) major *= s->dims[s->minor_to_major[i]];
  return major * ((second + r - 1) / r) * ((minor + c - 1) / c);
}

/* Space-to-batch's unfold kernel in tpusim's own compilation (space_to_batch.c marks its root
 * s2b_kernel=unfold): the convolution's result, its 8 pieces in the batch in the sublanes, written
 * back with the pieces along W. Where each piece is S' < 8 outputs wide along W, the second-minor
 * dimension, and the features are in the lanes, the XLA TPU compiler writes it in tiles of S'
 * rows (T(S',128)), one per piece: a sublane relayout (below) of numel / (S' x features) x
 * ceil(features / 128) tiles (compiled families, tune split, on v5e: dilconv_b1_28x28_c256to64_k3d2
 * [28,8,4,64] into T(4,128), 224 tiles, 3,849 cycles; dilconv_b2_28x28_c64to256_k3d2 896 tiles,
 * 10,174; conv3d_b2_8x28x28_c16to16_k3s2 [4,14,16,2,16] into T(2,128), 896 tiles, 9,950). Returns
 * those tiles, 0 for any other op. */
static int64_t s2b_unfold_tiles(const tpu_instr *in) {
  if (in->op != TPU_OP_FUSION || !in->calls || !in->calls->root || in->noperands != 1 || in->shape.layout_tail) return 0;
  const tpu_instr *root = in->calls->root;
  int unfold = 0;
  for (int i = 0; i < root->nattrs; i++)
    unfold |= !strcmp(root->attrs[i].name, "s2b_kernel") && root->attrs[i].value && !strcmp(root->attrs[i].value, "unfold");
  const tpu_shape *r = &in->shape, *o = &in->operands[0]->shape;
  if (!unfold || r->rank < 2 || r->rank != o->rank || r->dtype == TPU_TUPLE) return 0;
  int w = r->rank - 2;
  int64_t rows = o->dims[w], feat = r->dims[r->rank - 1];
  if (r->dims[w] != 8 * rows || rows <= 0 || rows >= 8 || feat <= 0) return 0;
  return tpu_shape_numel(r) / (rows * feat) * ((feat + 127) / 128);
}

/* The copy merging a grouped convolution's groups back into the features in tpusim's own
 * compilation (group_conv.c marks it group_merge=FD, the group's dimension of its split
 * [.., G, Cog, ..] shape): the XLA TPU compiler's `copy` of the split result from
 * {.., G, B, Cog} into {.., B, G, Cog}, the lanes (Cog) kept, a sublane relayout (below)
 * into tiles of G rows, whose kernel pays relayout_tile_cycles per result tile counted in
 * unpacked rows (a bf16 tile of 16 groups as two; compiled families, tune split, v5e:
 * gconv_b2_28x28_c128to128_g2_k3_f32's 1,568 T(2,128) tiles 15,659 cycles,
 * gconv_b2_14x14_c64to64_g4_k3_f32's 392 T(4,128) 5,276, gconv_b4_7x7_c32to32_g2_k1_bf16's
 * 196 3,595, gconv_b4_7x7_c64to128_g16_k3_bf16's 392 5,374; v4 24,326 / 8,246 / 3,331 /
 * 8,638). Not a result in whole 32-bit registers (f32, 8 or more groups), as below. -1: not
 * such a copy. */
static const tpu_shape *group_merge_split(const tpu_instr *in, int *g) {
  if (in->op != TPU_OP_FUSION || !in->calls || !in->calls->root) return NULL;
  const char *fd = NULL;
  for (int i = 0; i < in->nattrs && !fd; i++)
    if (!strcmp(in->attrs[i].name, "group_merge")) fd = in->attrs[i].value;
  const tpu_instr *m = in->calls->root;
  if (!fd || m->op != TPU_OP_RESHAPE || m->noperands != 1) return NULL;
  const tpu_shape *s = &m->operands[0]->shape; /* the split shape, the transpose's result */
  *g = atoi(fd);
  if (*g < 0 || *g + 1 >= s->rank || s->dtype == TPU_TUPLE) return NULL;
  return s;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t group_merge_tiles(const tpu_chip *chip, const tpu_instr *in) {
  int g;
  const tpu_shape *s = group_merge_split(in, &g);
  if (!s) return -1;
  int64_t sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8;
  if (tpu_dtype_size(s->dtype) == 4 && s->dims[g] >= sub) return 0;
  return tpu__tiles_as(chip, s, g, g + 1);
}

/* The same merge copy of a result in whole 32-bit registers (f32, 8 or more groups: T(8,128)
 * tiles of groups by Cog): its result's tiles, 0 for any other op. Where the compiler keeps
 * the split result on the core (v5e, v6e: S(1) on both sides) the copy moves whole registers
 * within VMEM, no start: whole_relayout_window_cycles a window and whole_relayout_tile_cycles a
 * result tile (tile.c; probes/gconv_merge.py: 16 + 0.5 a tile on v5e and v6e, 200 tiles 116
 * cycles, 288 160, 1,152 592; 49 windows of 128 tiles where its two sides outgrow the scoped
 * VMEM, f32[4,28,28,16,32] 3,920); where it writes it off the core
 * (v4's CMEM, S(3) on both sides; v5p's HBM) the copy is a relayout of two half-register
 * units a tile (tile.c; libtpu probes outside the corpus, f32 [B,H,H,C] in 8-32 groups, 1x1
 * and 3x3, 400-4,096 result tiles: v4 29.8-34.2 cycles a tile, 2 x relayout_tile_cycles 31.8;
 * v5p 4,655-33,828 cycles, start + 7.7-9.1 a tile; v5e/v6e 216-3,584 cycles). A compiled
 * program's copy of this kind (whole_register_gather_tiles) likewise. */
static int64_t whole_register_gather_tiles(const tpu_chip *chip, const tpu_instr *in);

int64_t tpu__group_merge_whole_tiles(const tpu_chip *chip, const tpu_instr *in) {
  int g;
  const tpu_shape *s = group_merge_split(in, &g);
  int64_t sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8;
  if (!s) return whole_register_gather_tiles(chip, in);
  if (tpu_dtype_size(s->dtype) != 4 || s->dims[g] < sub || g < 1 || g + 2 != s->rank) return 0;
  /* the compiler's merged form with Cog in the lanes and G in the sublanes, where it pads no
   * more than W in the lanes and Cog in the sublanes; else it merges through that W-minor form
   * (other copies, not modelled: gconv_b4_28x28_c128to256_g16_k1_f32) */
  int64_t lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128, w = s->dims[g - 1], cog = s->dims[g + 1];
  int64_t cog_minor = cdiv(cog, lanes) * lanes * cdiv(s->dims[g], sub) * sub * w;
  int64_t w_minor = cdiv(w, lanes) * lanes * cdiv(cog, sub) * sub * s->dims[g];
  if (cog_minor > w_minor) return 0;
  return tpu__tiles_as(chip, s, g, g + 1);
}

/* A compiled program's copy of the same kind: 32-bit values on the chip on both sides (VMEM,
 * S(1), or v4's CMEM, S(3)), the lanes' dimension kept, from tiles of fewer than 8 rows
 * (T(2,128), T(4,128): the batch in the sublanes) into whole registers (T(8,128)) — the XLA
 * TPU compiler's merge copy of a grouped convolution's split result (gconv_b2_14x14_c512to512_g8_k3_f32's
 * copy.4, f32[2,14,14,8,64] {4,0,3,2,1:T(2,128)} -> {4,3,0,2,1:T(8,128)}, 212 cycles on v5e
 * and v6e, 11,678 on v4) and any other (swin_train_b4_28x28x192h6's f32[4,28,28]
 * {2,0,1:T(4,128)} -> {2,1,0:T(8,128)}, 24 cycles on v5e and v6e); on v6e from whole registers
 * too (chip whole_relayout_operand_rows 8: compiled families tune, all 5 such copies of 40-1,024
 * tiles at 16 + 0.5 a tile, e.g. unet_fwd_b4_32x32x128's f32[32,32,5,128] {3,1,2,0} ->
 * {3,0,2,1}, 336 cycles; v5e 1.2-2.3 a tile there, not modelled). Its result's tiles, 0 for any
 * other op. */
static int on_chip(const tpu_shape *s);

static int64_t whole_register_gather_tiles(const tpu_chip *chip, const tpu_instr *in) {
  if (in->op != TPU_OP_COPY || in->noperands != 1) return 0;
  const tpu_shape *r = &in->shape, *o = &in->operands[0]->shape;
  long long rr = 0, rc = 0, orows = 0, oc = 0, most = chip->whole_relayout_operand_rows > 0 ? chip->whole_relayout_operand_rows : 7;
  if (!r->layout_tail || !o->layout_tail || r->rank != o->rank || r->rank < 2 || tpu_dtype_size(r->dtype) != 4 ||
      tpu_dtype_size(o->dtype) != 4 || !on_chip(r) || !on_chip(o) || !layout_tile(r, &rr, &rc) ||
      !layout_tile(o, &orows, &oc) || rr != 8 || rc != 128 || oc != 128 || orows > most)
    return 0;
  const char *t = strstr(r->layout_tail, "T(8,128)"), *u = strstr(o->layout_tail, "T(");
  if (!t || t[8] == '(' || !u || strchr(u, ')')[1] == '(') return 0; /* packed */
  int a[TPU_MAX_RANK], b[TPU_MAX_RANK];
  int na = moving_order(r, a), nb = moving_order(o, b), same = na == nb;
  for (int i = 0; same && i < na; i++) same = a[i] == b[i];
  if (same || na == 0 || nb == 0 || a[0] != b[0]) return 0;
  return layout_tiles(r);
}

/* The pair "S,W" of attribute `name` of in (0, 0: none). */
static void attr_pair(const tpu_instr *in, const char *name, int64_t *s, int64_t *w) {
  *s = *w = 0;
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, name) && in->attrs[i].value) {
      long long a = 0, b = 0;
      if (sscanf(in->attrs[i].value, "%lld,%lld", &a, &b) == 2 && a > 0 && b > 0) *s = a, *w = b;
    }
}

/* A grouped convolution's layout copy that moves the lanes' dimension into or out of its
 * group-split layout in tpusim's own compilation (group_conv.c mark_transposes): the merge copy
 * marked group_transpose, or a copy of the entry's that moves the lanes and that only kernels
 * marked group_in_tiles read (param_layout.c's copy of the parameter into the convolution's
 * layout: the compiler's copy of it, W in the lanes, into the split layout). The XLA TPU
 * compiler charges it per tile of each side (chips' group_transpose_*). Sets the split side's
 * tiles *split and the W-in-the-lanes side's *wide; returns 0 (both 0) for any other op. */
int tpu__group_transpose_tiles(const tpu__be *be, const tpu_instr *in, int64_t *split, int64_t *wide) {
  *split = *wide = 0;
  if (in->op == TPU_OP_FUSION) {
    attr_pair(in, "group_transpose", split, wide);
    return *split > 0;
  }
  if (in->op != TPU_OP_COPY || in->noperands != 1 || in->shape.layout_tail || !in->parent ||
      !tpu__moves_minor(be->chip, in))
    return 0;
  int users = 0;
  for (int i = 0; i < in->parent->ninstrs; i++) {
    const tpu_instr *u = in->parent->instrs[i];
    for (int o = 0; o < u->noperands; o++)
      if (u->operands[o] == in) {
        int64_t s = 0, w = 0;
        if (u->op == TPU_OP_FUSION) attr_pair(u, "group_in_tiles", &s, &w);
        if (s <= 0) {
          *split = *wide = 0;
          return 0;
        }
        if (s > *split) *split = s, *wide = w;
        users++;
      }
  }
  return users > 0;
}

/* In VMEM (S(1)) or in v4's CMEM (S(3)): the on-chip side of a relayout copy. */
static int on_chip(const tpu_shape *s) { return tpu__in_vmem(s) || (s->layout_tail && strstr(s->layout_tail, "S(3)")); }

/* Own compilation's copy into or out of a select-and-scatter's layout (sas_layout.c) that keeps
 * the lanes' dimension and writes tiles of fewer than 8 rows: the compiler's sublane relayout
 * (below), its result's tiles (libtpu probes/sas_layout.py: f32[4,600,256] {2,1,0} into
 * {2,0,1:T(4,128)}, 1,200 tiles, 12,710 cycles on v5e, 7,967 on v6e, where start + latency +
 * relayout_tile_cycles a tile gives 12,711 and 8,266). 0 for another such copy, -1 for any
 * other op. */
static int64_t sas_relayout_tiles(const tpu_chip *chip, const tpu_instr *in) {
  if (tpu__sas_copy_small_tiles(chip, in) < 0) return -1;
  const tpu_shape *r = &in->shape, *o = &in->operands[0]->shape;
  if (!r->has_layout || !o->has_layout || r->rank < 2 || r->minor_to_major[0] != o->minor_to_major[0]) return 0;
  int64_t sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8;
  int q = r->minor_to_major[1];
  if (q == o->minor_to_major[1] || tpu__tile_rows(chip, r->dtype, r->dims[q]) >= sub) return 0;
  return tpu__tiles_as(chip, r, q, r->minor_to_major[0]);
}

/* A compiled program's copy that keeps the dimension in the lanes and reorders the others
 * (a sublane relayout), VMEM (S(1)) or v4's CMEM (S(3)) on at least one side: the XLA TPU
 * compiler's vector
 * kernel for it costs its start plus the chip's relayout_tile_cycles per tile of the result,
 * whatever the tile's rows (compiled families, tune split, on v5e: 224 tiles 3,849 cycles,
 * 448 5,883, 896 9,950, 1,568 16,051 — T(2,128), T(4,128) results of bf16 or f32 and packed
 * bf16 T(8,128)(2,1) ones alike; v6e 3,264 / 4,412 / 6,708 / 10,153), where its registers
 * alone cost a tile of 2 rows an eighth of one of 8. Not a result in whole registers (below).
 * v4 keeps such a copy's on-chip side in CMEM: libtpu v4 compilations of families tune
 * programs, 196 tiles 4,618 cycles, 896 16,721, 1,568 21,368 (dilconv_b2_28x28_c64to256_k3d2's
 * result copy from S(3); chips/v4.json). A pad into small tiles likewise (below). Returns the
 * result's tiles, 0 for any other op. */
static int cmem_sublane_copy(const tpu_chip *chip, const tpu_instr *in);
int64_t tpu__relayout_tiles(const tpu_chip *chip, const tpu_instr *in) {
  int64_t sas = sas_relayout_tiles(chip, in);
  if (sas >= 0) return sas;
  int64_t unfold = s2b_unfold_tiles(in);
  if (unfold > 0) return unfold;
  int64_t merge = group_merge_tiles(chip, in);
  if (merge >= 0) return merge;
  if (in->op == TPU_OP_COPY && !in->shape.layout_tail && in->shape.rank >= 2 && in->shape.dtype != TPU_TUPLE) {
    /* space to batch's result copied into the program's layout (relayout.c marks the copy
     * s2b_kernel=result): a sublane relayout into the least padded tiling, that tiling's
     * tiles (dilconv_b2_28x28_c64to256_k3d2 into {3,0,2,1:T(2,128)}: 1,568 tiles, 18,076
     * cycles on v5e) */
    for (int i = 0; i < in->nattrs; i++)
      if (!strcmp(in->attrs[i].name, "s2b_kernel") && in->attrs[i].value && !strcmp(in->attrs[i].value, "result")) {
        int q, m;
        tpu__least_tiling(chip, &in->shape, &q, &m);
        return tpu__tiles_as(chip, &in->shape, q, m);
      }
  }
  if (in->op == TPU_OP_PAD && in->noperands >= 1 && !in->shape.layout_tail && in->shape.rank >= 2) {
    /* space to batch's pad before the pieces' halo in tpusim's own compilation
     * (space_to_batch.c marks it s2b_halo): the compiler pads the parameter in its own
     * layout, the one that pads least; where that puts fewer rows than half the sublanes in
     * the tile (a batch of 2 or 4 in the sublanes, T(2,128) or T(4,128)) it is the pad into
     * small tiles below (dilconv_b2_28x28_c64to256_k3d2: bf16[28,2,32,64]{3,1,2,0:T(2,128)},
     * 896 tiles, 10,811 cycles on v5e). Without a halo it copies the parameter row-major and
     * pads in whole tiles (tconv_b2_28x28_c256to3_k4s4_valid: T(8,128), 7,749 cycles). */
    int pad = 0;
    for (int i = 0; i < in->nattrs; i++) pad |= !strcmp(in->attrs[i].name, "s2b_halo");
    int q, m;
    int64_t sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8;
    tpu__least_tiling(chip, &in->operands[0]->shape, &q, &m);
    if (pad && in->operands[0]->shape.rank == in->shape.rank && 2 * in->shape.dims[q] <= sub)
      return tpu__tiles_as(chip, &in->shape, q, m);
  }
  if (in->op == TPU_OP_PAD && in->noperands >= 1) {
    /* A pad into VMEM in tiles of fewer than 8 rows (a convolution's input padded with the
     * batch in the sublanes) is such a kernel too: compiled families, tune split, v5e 10.0-11.1
     * cycles per result tile after the start (bf16[28,2,32,64] T(2,128): 10,811 cycles for
     * 896 tiles; [28,4,32,144] T(4,128): 21,294 for 1,792), v6e 5.2-6.1. */
    const tpu_shape *r = &in->shape;
    const char *t = r->layout_tail && tpu__in_vmem(r) ? strstr(r->layout_tail, "T(") : NULL;
    long long rows = t ? strtoll(t + 2, NULL, 10) : 0;
    if (rows > 0 && rows < 8) return layout_tiles(r);
    /* So is one into packed tiles of less than a register (bf16 T(8,128)(2,1), s8
     * T(8,128)(4,1): half and a quarter of the 32-bit words a register holds), which the
     * compiler's pad writes a tile at a time as it does the few-row ones: libtpu probes off
     * the corpus (probes/small_tiles.py, blocked cumulative sums' pads within VMEM, bf16
     * [304,6,128] and [B,8,128]) v5e 13.2 cycles a tile after the start, v6e 5.24; compiled
     * families, tune, v5e 11.8-13.2 (unet_fwd_b4_32x32x128's bf16[32,4,40,256]
     * {3,0,2,1:T(8,128)(2,1)}: 1,280 tiles, 17,778 cycles), v6e 5.1-5.3. Whole-register
     * tiles (f32 T(8,128), bf16 T(16,128)(2,1)) are not: the same pads of f32 cost v6e about
     * one cycle a tile. */
    return rows == 8 && tile_words(r) * 2 <= register_words(chip) ? layout_tiles(r) : 0;
  }
  if (in->op != TPU_OP_COPY || in->noperands != 1) return 0;
  const tpu_shape *r = &in->shape, *o = &in->operands[0]->shape;
  if (!r->layout_tail || !o->layout_tail || r->rank != o->rank || !(on_chip(r) || on_chip(o))) return 0;
  int a[TPU_MAX_RANK], b[TPU_MAX_RANK];
  int na = moving_order(r, a), nb = moving_order(o, b), same = na == nb;
  for (int i = 0; same && i < na; i++) same = a[i] == b[i];
  if (same || na == 0 || nb == 0 || a[0] != b[0]) return 0;
  /* a result in whole 32-bit registers (T(8,128), unpacked) moves whole tiles: the compiler's
   * figure is far less (f32[32,32,5,128] into {3,0,2,1:T(8,128)}: 1,456 cycles on v5e for 640
   * tiles, where the same copy of bf16 costs 8,106) */
  const char *t = strstr(r->layout_tail, "T(8,128)");
  if (tpu_dtype_size(r->dtype) == 4 && t && t[8] != '(' && !cmem_sublane_copy(chip, in)) return 0;
  return layout_tiles(r);
}

/* TPUSIM_NO_CMEM_RELAYOUT_SUBLANES=1: a sublane relayout within CMEM pays relayout_tile_cycles
 * a tile whatever its sublanes, and none for whole 32-bit registers (A/B of the rule below). */
static int no_cmem_sublanes(void) { return tpu_env_flag("TPUSIM_NO_CMEM_RELAYOUT_SUBLANES"); }

/* Is `in` a compiled program's copy within CMEM (S(3) on both sides) on a chip that prices such
 * a relayout by its tiles' sublanes? */
static int cmem_sublane_copy(const tpu_chip *chip, const tpu_instr *in) {
  if (chip->cmem_relayout_sublane_cycles <= 0 || no_cmem_sublanes()) return 0;
  if (in->op != TPU_OP_COPY || in->noperands != 1) return 0;
  const char *r = in->shape.layout_tail, *o = in->operands[0]->shape.layout_tail;
  return r && o && strstr(r, "S(3)") && strstr(o, "S(3)");
}

/* The least cycles per result tile of the sublane relayout `in` (tpu__relayout_tiles) after its
 * start: relayout_tile_cycles, except within v4's CMEM (S(3) on both sides): there the XLA TPU
 * compiler's copy costs a part per tile and a part per 32-bit sublane the tile fills. Its
 * figures for the compiled families' tune copies of that kind (v4, 81 of 100 result tiles or
 * more, per tile after tpusim's start and latency, about 610 cycles): bf16 T(2,128)(2,1) (1
 * sublane) 14.4, T(4,128)(2,1) (2) 18.0, T(8,128)(2,1) (4) 22.5 (37 copies, 20.4-24.8), f32
 * T(2,128) (2) 15.6, T(4,128) (4) 21.1, T(8,128) (8) 31.0 (whole registers, which a copy within
 * VMEM moves at far less: v5e, above); least squares 13.70 + 2.11 a sublane (chips/v4.json;
 * probes/cmem_relayout.py). Not with HBM on a side: read from HBM, bf16[4,224,224,128]'s 25,088
 * T(8,128)(2,1) tiles cost 18.3 a tile; written to HBM, f32 T(8,128) 18.6-21.9. */
double tpu__relayout_tile_cost(const tpu_chip *chip, const tpu_instr *in) {
  if (!cmem_sublane_copy(chip, in)) return chip->relayout_tile_cycles;
  int64_t lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128;
  int64_t w = tile_words(&in->shape);
  double sub = w > 0 ? (double)((w + lanes - 1) / lanes) : 0;
  return chip->cmem_relayout_tile_cycles + sub * chip->cmem_relayout_sublane_cycles;
}

/* A pad the XLA TPU compiler runs in windows: where its result is more than a sixth of the
 * kernel's scoped VMEM (scoped_vmem_bytes) written to VMEM, or a third written to HBM (v5p,
 * whose pads write HBM), the compiler's pad kernel walks it in windows of 128 result tiles
 * (its iteration_bounds), each tile at pad_window_tile_cycles, 2-4 times what a pad costs it
 * in one window. libtpu probes off the families corpus (bench/fidelity/probes/pad_windows.py:
 * small-batch strided convolutions whose space to batch pads bf16 [B,H,W,C] along W): v5e
 * results of 3-15 MiB all windowed, 26.4-27.4 cycles a tile; v6e (32 MiB scoped) windows 6-15
 * MiB at 21.0-23.0 and keeps 3.75-5 MiB whole (6.0-6.3); v5p windows 6-6.6 MiB at 14.4-14.8 and
 * keeps 3.75-5 MiB whole (7.0-7.3). Compiled families, tune split, v5e: pads of 3-16 MiB in
 * 12-90 windows 24.9-26.9 a tile (sconv_b4_99x99_c128to128_k2s3_valid's [99,4,120,128]
 * T(4,128), 11,880 tiles, 296,010 cycles), of at most 2.6 MiB whole 11.9-16.7. Not found: a
 * probe's pad of 2.1 MiB in T(2,128) tiles (bf16[2,44,44,256], its batch in the sublanes) is
 * windowed on v5e too (23.6 a tile), under the sixth. Counted in the result's layout (a
 * compiled program's, in VMEM, or in HBM on a chip whose pads write HBM; not a standalone pad
 * of v5e's or v6e's, layout.c) or, in tpusim's own compilation, space to batch's pad in its
 * operand's least padded layout, which the compiler's pad keeps (that sconv's parameter,
 * {3,1,2,0:T(4,128)}). Not a pad with interior padding (the compiler's scans of
 * selective_scan_assoc_b8l64d512n16: f32[8,64,512,16] in VMEM, its own kernels). Returns the
 * result's tiles, 0 for any other op. */
int64_t tpu__pad_window_tiles(const tpu_chip *chip, const tpu_instr *in) {
  if (chip->pad_window_tile_cycles <= 0 || chip->scoped_vmem_bytes <= 0 || in->op != TPU_OP_PAD) return 0;
  const tpu_shape *r = &in->shape;
  if (r->dtype == TPU_TUPLE || !tpu_dtype_is_array(r->dtype) || r->rank < 2) return 0;
  for (int d = 0; in->padding && d < r->rank; d++) /* an edge pad (not a scan's interior one) */
    if (in->padding[d].interior) return 0;
  int off_core = chip->cmem_bytes > 0 || chip->tensorcores > 1, to_hbm = off_core;
  int64_t tiles, bytes;
  if (r->layout_tail) {
    to_hbm = !tpu__in_vmem(r);
    if (to_hbm && !off_core) return 0;
    const char *t = strstr(r->layout_tail, "T(");
    long long rows = t ? strtoll(t + 2, NULL, 10) : 0;
    tiles = layout_tiles(r);
    bytes = tiles * rows * 128 * tpu_dtype_bits(r->dtype) / 8;
  } else { /* space to batch's pad (for the pieces' kernels; not a standalone pad, layout.c), in
            * the operand's least padded layout, which the compiler's pad keeps */
    int q, m, s2b = 0;
    for (int i = 0; i < in->nattrs; i++)
      s2b |= !strcmp(in->attrs[i].name, "s2b_kernel") && in->attrs[i].value && !strcmp(in->attrs[i].value, "pad");
    if (!s2b) return 0;
    const tpu_shape *o = &in->operands[0]->shape;
    if (in->noperands < 1 || o->rank != r->rank) return 0;
    /* the compiler's pad spans the 8 pieces (space_to_batch.c s2b_span="W,8S"), tpusim's a
     * ninth too, for the last piece's halo */
    tpu_shape span = *r;
    for (int i = 0; i < in->nattrs; i++)
      if (!strcmp(in->attrs[i].name, "s2b_span") && in->attrs[i].value) {
        int wd = -1;
        long long w = 0;
        if (sscanf(in->attrs[i].value, "%d,%lld", &wd, &w) == 2 && wd >= 0 && wd < span.rank && w > 0 &&
            w < span.dims[wd])
          span.dims[wd] = w;
      }
    tpu__least_tiling(chip, o, &q, &m);
    tiles = tpu__tiles_as(chip, &span, q, m);
    bytes = tpu__tiled_as(chip, &span, q, m);
  }
  return tiles > 0 && (to_hbm ? 3 : 6) * bytes > chip->scoped_vmem_bytes ? tiles : 0;
}


/* A patch embedding's image relaid out for its convolution (param_layout.c marks the copy
 * patch_relayout): from its least padded layout, W in the lanes and H in the sublanes, into
 * the batch in the lanes and the features in the sublanes. The XLA TPU compiler runs it as a
 * kernel over blocks of the source of 8 rows of H and up to 128 lanes of W (its
 * iteration_bounds; a megacore chip's two cores share them: [8,200,200,3] 25 blocks a core
 * of its 50 on v5p), each block charged a fixed part,
 * a part per source row (batch x features) and one per lane W fills, whatever the result's
 * padding (libtpu probes off the corpus, bench/fidelity/probes/patch_relayout.py,
 * data/patch_relayout.jsonl: bf16[8,224,224,3] 117,544 cycles on v5e, 56 blocks of 2,099;
 * [8,112,112,3] 29,386, 14 blocks of 2,099). The least time of that kernel, 0 for any other
 * op or a chip without the fields. */
double tpu__patch_relayout_cycles(const tpu_chip *chip, const tpu_instr *in) {
  if (!chip || chip->patch_relayout_block_cycles <= 0 || in->op != TPU_OP_COPY || in->noperands != 1) return 0;
  int marked = 0;
  for (int i = 0; i < in->nattrs; i++)
    marked |= !strcmp(in->attrs[i].name, "patch_relayout") && in->attrs[i].value && !strcmp(in->attrs[i].value, "1");
  const tpu_shape *s = &in->operands[0]->shape;
  if (!marked || !s->has_layout || s->rank < 2) return 0;
  int64_t lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128, sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8;
  int64_t w = s->dims[s->minor_to_major[0]], h = s->dims[s->minor_to_major[1]], rows = 1;
  for (int d = 2; d < s->rank; d++) rows *= s->dims[s->minor_to_major[d]];
  int64_t cores = chip->tensorcores > 1 ? chip->tensorcores : 1;
  int64_t blocks = ((h + sub - 1) / sub * ((w + lanes - 1) / lanes) + cores - 1) / cores;
  double fill = (double)(w < lanes ? w : lanes);
  return (double)blocks * (chip->patch_relayout_block_cycles + chip->patch_relayout_row_cycles * (double)rows +
                           chip->patch_relayout_lane_cycles * fill);
}

/* Own compilation's copy into or out of a select-and-scatter's layout (sas_layout.c marks it
 * sas_copy): where it moves the lanes' dimension, the tiles of its side laid out in tiles of
 * fewer than 8 rows (the rows its sublane dimension has, layout.c tpu__tile_rows: f32[1,3000,64]
 * {2,0,1} in T(1,128), 3,000 tiles), the larger when both are; 0 where neither side is; -1 for
 * any other op. */
int64_t tpu__sas_copy_small_tiles(const tpu_chip *chip, const tpu_instr *in) {
  if (in->op != TPU_OP_COPY || in->noperands != 1 || in->shape.layout_tail || in->operands[0]->shape.layout_tail)
    return -1;
  int mark = 0;
  for (int i = 0; i < in->nattrs; i++) mark |= !strcmp(in->attrs[i].name, "sas_copy");
  if (!mark) return -1;
  if (!tpu__moves_minor(chip, in)) return 0;
  int64_t sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8, n = 0;
  const tpu_shape *sides[2] = {&in->shape, &in->operands[0]->shape};
  for (int i = 0; i < 2; i++) {
    const tpu_shape *s = sides[i];
    if (!s->has_layout || s->rank < 2 || s->dtype == TPU_TUPLE) continue;
    int q = s->minor_to_major[1], m = s->minor_to_major[0];
    if (tpu__tile_rows(chip, s->dtype, s->dims[q]) >= sub) continue;
    int64_t t = tpu__tiles_as(chip, s, q, m);
    if (t > n) n = t;
  }
  return n;
}

/* Is `in` own compilation's copy into a select-and-scatter's layout (sas_copy=in)? */
int tpu__sas_copy_in(const tpu_instr *in) {
  for (int i = 0; in->op == TPU_OP_COPY && i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, "sas_copy") && in->attrs[i].value && !strcmp(in->attrs[i].value, "in")) return 1;
  return 0;
}

/* The rows of a compiled layout's tiles ("T(2,128)": 2), 0 without tiles. */
static int64_t tile_rows(const tpu_shape *s) {
  long long r = 0, c = 0;
  return layout_tile(s, &r, &c) ? r : 0;
}

/* A compiled program's copy that moves the dimension in the lanes (a transpose, not within
 * VMEM: tpu__moves_minor) into or out of tiles of fewer than 8 rows (T(1,128), T(2,128),
 * T(4,128): a max-pool gradient's operand and source laid out with the window's dimensions
 * major and its result laid back, a small-batch convolution's input with the batch in the
 * sublanes). The XLA TPU compiler's kernel walks the small tiles one at a time: it costs
 * at least its start plus small_tile_transpose_cycles per tile of that side, whatever the
 * other side's tiles and wherever the small tiles lie (HBM, v4's CMEM, VMEM beside an HBM
 * side). libtpu probes off the families corpus (bench/fidelity/probes/pool_grad_copies.py,
 * max-pool gradients of bf16/f32 [1,96,96,64], [2,56,56,32], [1,2000,64], [1,1024,96],
 * [2,64,64,16]), per small tile after the compiler's start, 512 to 9,216 tiles: v4 5.6-7.6
 * (CMEM), v5p 3.1-4.7 into HBM and 5.5-7.2 out of it, v5e 2.7-3.7 and v6e 2.6-3.6 out of VMEM
 * into HBM, the bf16 T(2,128) and f32 T(1,128) tiles alike. The chips' figures (v4 5.3, v5e
 * 2.3, v5p 4.0, v6e 2.5) are the most that leaves every probe copy and each of the compiled
 * families tune programs' 203 such copies at or above tpusim's start plus that a tile (ViT's
 * patch embedding bounds v5e/v6e, tconv_b2_28x28_c256to3_k4s4_valid v4): a floor, where
 * tpusim charged the 72 of 500 tiles or more 0.10-0.89 of the compiler's time. Returns that
 * side's tiles (the larger when both are small), 0 for any other op. */
int64_t tpu__small_tile_transpose_tiles(const tpu_chip *chip, const tpu_instr *in) {
  int64_t own = tpu__sas_copy_small_tiles(chip, in);
  if (own >= 0) return own;
  if (in->op != TPU_OP_COPY || in->noperands != 1 || !in->shape.layout_tail || !in->operands[0]->shape.layout_tail ||
      !tpu__moves_minor(chip, in))
    return 0;
  int64_t sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8, n = 0;
  const tpu_shape *sides[2] = {&in->shape, &in->operands[0]->shape};
  for (int i = 0; i < 2; i++) {
    int64_t r = tile_rows(sides[i]), t = r > 0 && r < sub ? layout_tiles(sides[i]) : 0;
    if (t > n) n = t;
  }
  return n;
}

/* The result tiles of a sublane relayout (a copy that keeps the lanes' dimension and reorders
 * the others) into tiles of fewer than 8 rows within fusion computation c and the fusions it
 * calls (depth: how deep to look). */
static int64_t fused_small_relayout_tiles(const tpu_chip *chip, const tpu_comp *c, int depth) {
  int64_t n = 0, sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8;
  for (int i = 0; c && i < c->ninstrs; i++) {
    const tpu_instr *x = c->instrs[i];
    if (x->op == TPU_OP_FUSION && x->calls && depth > 0) n += fused_small_relayout_tiles(chip, x->calls, depth - 1);
    if (x->op != TPU_OP_COPY || x->noperands != 1) continue;
    const tpu_shape *r = &x->shape, *o = &x->operands[0]->shape;
    if (!r->layout_tail || !o->layout_tail || r->rank != o->rank || r->dtype == TPU_TUPLE) continue;
    int a[TPU_MAX_RANK], b[TPU_MAX_RANK];
    int na = moving_order(r, a), nb = moving_order(o, b), same = na == nb;
    for (int k = 0; same && k < na; k++) same = a[k] == b[k];
    int64_t rows = tile_rows(r);
    if (!same && na > 0 && nb > 0 && a[0] == b[0] && rows > 0 && rows < sub) n += layout_tiles(r);
  }
  return n;
}

/* tpusim's own compilation's loop fusion whose transpose keeps the operand's lane dimension in
 * the lanes and reorders the others (layout.c tpu__moves_minor: it joins the kernel that reads
 * it) into a result tiled in fewer than 8 rows, that result leaving the kernel as its root's
 * shape (itself or through elementwise ops): the compiler's loop fusion holding the `copy`
 * below, as it compiles the same program (the compiler gives the program's result a layout
 * of its own, relayout.c; transpose_501x33x2x2x33_p04132_fused_bf16 writes
 * bf16[501,33,33,2,2]{0,4,3,2,1:T(2,128)(2,1)}, 8,712 tiles, 105,084 cycles on v4, its
 * parameter in {0,3,4,2,1:T(2,128)(2,1)}). The tiles are the transpose's result's in
 * tpusim's tiling (layout.c tile_rows), the dimensions of size 1 holding no order, as in the
 * compiled form. 16- and 32-bit types only (those probed); a loop fusion or a transpose alone
 * that reads only entry parameters and is the program's result (the probes' kernels). Returns
 * 0 for any other op. */
static int64_t own_transpose_small_tiles(const tpu_chip *chip, const tpu_instr *x) {
  if (x->op != TPU_OP_TRANSPOSE || x->noperands != 1) return 0;
  const tpu_shape *r = &x->shape, *o = &x->operands[0]->shape;
  int bits = (int)tpu_dtype_bits(r->dtype);
  int64_t sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8;
  if (r->layout_tail || o->layout_tail || r->rank < 2 || r->rank != o->rank || (bits != 16 && bits != 32) ||
      x->dimensions.n != r->rank)
    return 0;
  /* the result's order of dimensions in the operand's terms, against the operand's (no
   * layout: row-major) */
  int a[TPU_MAX_RANK], b[TPU_MAX_RANK], na = 0, nb = moving_order(o, b);
  for (int k = 0; k < r->rank; k++) {
    int d = r->has_layout ? r->minor_to_major[k] : r->rank - 1 - k;
    if (r->dims[d] > 1) a[na++] = (int)x->dimensions.v[d];
  }
  int same = na == nb;
  for (int k = 0; same && k < na; k++) same = a[k] == b[k];
  if (same || na == 0 || nb == 0 || a[0] != b[0]) return 0;
  int q = r->has_layout ? r->minor_to_major[1] : r->rank - 2, m = r->has_layout ? r->minor_to_major[0] : r->rank - 1;
  if (r->dims[m] <= 1 || tpu__tile_rows(chip, r->dtype, r->dims[q]) >= sub) return 0;
  return tpu__tiles_as(chip, r, q, m);
}

static int64_t own_small_relayout_tiles(const tpu_chip *chip, const tpu_instr *in) {
  /* a kernel reading the program's parameters and writing its result, both in HBM, as probed
   * (not the relayout copies tpusim's own passes make, out of VMEM or a convolution's split
   * layout, which copy_kind.c prices otherwise) */
  const tpu_comp *e = in->parent;
  if (!e || !e->is_entry || !tpu__program_result(e, in)) return 0;
  for (int i = 0; i < in->noperands; i++)
    if (in->operands[i]->op != TPU_OP_PARAMETER || on_chip(&in->operands[i]->shape)) return 0;
  if (in->op == TPU_OP_FUSION) {
    int loop = 0;
    for (int i = 0; i < in->nattrs; i++)
      loop |= !strcmp(in->attrs[i].name, "kind") && in->attrs[i].value && !strcmp(in->attrs[i].value, "kLoop");
    if (!loop) return 0;
  }
  /* a transpose that is a kernel alone (the program's result), where tpusim too has it keep the
   * lanes (one it takes to move them is a relayout kernel of its own: relayout_off_core) */
  if (in->op == TPU_OP_TRANSPOSE) return tpu__moves_minor(chip, in) ? 0 : own_transpose_small_tiles(chip, in);
  const tpu_comp *c = in->op == TPU_OP_FUSION ? in->calls : NULL;
  int64_t n = 0;
  if (!c || !c->root || c->root->shape.dtype == TPU_TUPLE) return 0;
  for (int i = 0; i < c->ninstrs; i++) {
    const tpu_instr *x = c->instrs[i];
    if (x->op != TPU_OP_TRANSPOSE || x->shape.rank != c->root->shape.rank ||
        memcmp(x->shape.dims, c->root->shape.dims, sizeof x->shape.dims[0] * (size_t)x->shape.rank))
      continue;
    n += own_transpose_small_tiles(chip, x);
  }
  return n;
}

/* A compiled program's loop fusion that holds a sublane relayout (a copy that keeps the lanes'
 * dimension and reorders the others) into tiles of fewer than 8 rows (T(1,128), T(2,128),
 * T(4,128)), its operands and result all in HBM: the compiler's relayout of small tiles inside
 * its loop (a transpose that moves only the second-minor dimension, then an add, a convert, or
 * nothing: copy_bitcast_fusion). The XLA TPU compiler charges it its start, its transfers at the
 * streaming rate and a fixed time per tile of the copy's result beyond them,
 * hbm_relayout_tile_cycles, whatever the dtype and the tile's rows: libtpu probes off the corpus
 * (bench/fidelity/probes/hbm_relayout.py, data/hbm_relayout.jsonl: transposes keeping the lanes
 * of bf16 and f32 [N,A,R,R,B] (0,4,1,3,2) and rank-4 ones, 360-17,424 tiles of 2 and 4 rows),
 * per tile beyond kov + the HBM latency + the transfers: v4 9.4-13.1, v5e 8.6-9.9, v5p 3.2-4.3,
 * v6e 5.0-6.4 (bf16[1000,33,2,2,33] + 1: 17,424 tiles, 215,544 cycles on v5e, where tpusim's
 * transfers and stream pass took 82,467). Where its register work alone counts, a tile of 2
 * rows costs an eighth of a whole register's. Results in whole registers (T(8,128), packed
 * bf16 T(8,128)(2,1)) cost their transfers, as tpusim has them (f32 and bf16 [501,33,8,8,17]:
 * 340,608 and 340,404 cycles on v5e, tpusim 336,825 and 336,935). Not a copy kernel of its
 * own (the relayout floor, timing.c) nor one with VMEM on a side (tpu__relayout_tiles).
 * Returns the copy's result tiles, 0 for any other op. */
int64_t tpu__hbm_relayout_tiles(const tpu_chip *chip, const tpu_instr *in) {
  if (in->shape.dtype == TPU_TUPLE || on_chip(&in->shape)) return 0;
  if (!in->shape.layout_tail) return own_small_relayout_tiles(chip, in);
  if (in->op != TPU_OP_FUSION || !in->calls) return 0;
  for (int i = 0; i < in->noperands; i++)
    if (!in->operands[i]->shape.layout_tail || on_chip(&in->operands[i]->shape)) return 0;
  return fused_small_relayout_tiles(chip, in->calls, 2);
}

/* The rows of 128 lanes of s: its elements over its minor dimension, that dimension in blocks
 * of the lanes; 0 where that dimension fills less than an eighth of the lanes. */
static int64_t lane_rows(const tpu_chip *chip, const tpu_shape *s) {
  int64_t lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128, n = 1;
  if (s->dtype == TPU_TUPLE || s->rank < 1) return 0;
  int minor = s->has_layout ? s->minor_to_major[0] : s->rank - 1;
  if (s->dims[minor] * 8 < lanes) return 0;
  for (int d = 0; d < s->rank; d++)
    if (d != minor) n *= s->dims[d];
  return n * cdiv(s->dims[minor], lanes);
}

/* A copy or transpose that moves the lanes' dimension between HBM arrays (relayout_off_core:
 * not within, into or out of VMEM; nor v4's CMEM on a side). The XLA TPU compiler's kernel
 * walks each side a row of 128 lanes at a time: over the compiled families corpus its cycles
 * follow the rows of its two sides, not their tiles or bytes, whatever the dtype, its start
 * hidden under them (v5p, the two TensorCores splitting the rows: 117 tune copies, 1.462-9.6
 * cycles a row of a core, 1.462 for 12,288 rows (embedding_grad_8192x64_m16_bf16's copy.2,
 * test) and for 393,216 (split4_64x256x16x64_ax1_bf16, tune) alike; bf16[16,56,56,32]
 * {3,4,2,1,0} -> {2,4,3,1,0}, f32[32000,64], bf16[4096,4096] {0,1} -> {1,0} at 1.5-1.8;
 * probes/hbm_rows_corpus.py), where tpusim's transfers and register work charged v5p 0.41-0.70
 * of it. libtpu probes off the corpora (probes/hbm_rows.py, data/hbm_rows.jsonl): transposes
 * of bf16[6144,3072] and bf16[64,512,384] 1.462 a core's row on v5p, a max pool's parameter
 * bf16[16,96,96,64] copied {2,3,1,0} -> {3,2,1,0} for its window 1.556 (v4's one-core device
 * 1.300, v6e 1.247, v5e 1.643 a row for the transposes; the pool's copy writes CMEM on v4 and
 * VMEM on v5e and v6e). It lasts at least hbm_relayout_row_cycles per row of a core, start to
 * end. Not where a side's minor dimension fills less than an eighth of the lanes (tpusim's own
 * bf16[4,128,256,3] product, 3 lanes a row: its rows would count each element; the compiler
 * runs such sides in small tiles: small_tile_transpose). In tpusim's own compilation only on a
 * chip that keeps nothing on the chip between kernels (more than one TensorCore, no CMEM: v5p):
 * elsewhere the compiler's lane-moving copies mostly keep a side there, v4's in CMEM (S(3): 332
 * of the 347 in the compiled corpora), v5e's and v6e's in VMEM (S(1): 325 of 335, 334
 * of 349; cummin_158x129x33_ax2_s32's s32[158,129,33] and einsum_bdac_beca_bdea's
 * f32[4,512,256,32] into or out of VMEM at 0.7-1.0 cycles a row), and tpusim's own layouts
 * carry no memory space when its kernels are formed (taking them moved those two programs
 * from -4..-12 % to +55..+76 % on v5e and v6e). Returns the rows of the two sides, 0 for any
 * other op. */
int64_t tpu__relayout_rows(const tpu__be *be, const tpu_instr *in) {
  if (!tpu__relayout_off_core(be, in) || on_chip(&in->shape) || on_chip(&in->operands[0]->shape)) return 0;
  if (!in->shape.layout_tail && (be->chip->cmem_bytes > 0 || be->chip->tensorcores <= 1)) return 0;
  int64_t a = lane_rows(be->chip, &in->shape), b = lane_rows(be->chip, &in->operands[0]->shape);
  return a > 0 && b > 0 ? a + b : 0;
}

/* A copy or transpose that moves the lanes' dimension, reading its operand in VMEM and writing
 * its result to HBM, on a chip that keeps values in VMEM between kernels (one TensorCore, no
 * CMEM: v5e, v6e): a compiled program's copy out of S(1) (tpu__copy_out_of_vmem), or in
 * tpusim's own compilation one whose operand vmem_assign.c keeps there (the relayout copy of a
 * dot's result written in the rhs's orientation, relayout.c dot_result_relaid). The XLA TPU
 * compiler charges such a copy its start and a fixed time per tile of its result, whatever the
 * dtype (chip vmem_transpose_tile_cycles), and nothing for its read, the transpose's
 * per-element cost (transpose_bytes) or the stream pass: libtpu probes off the corpus
 * (bench/fidelity/probes/vmem_transpose.py, data/vmem_transpose.jsonl), einsum('acb,ad->bcd')
 * and others, its copy from bf16[512,12,384]{0,2,1:...S(1)} into {2,0,1}: 30,588 cycles on
 * v5e for 2,304 tiles, f32[512,6,384] 15,294 for 1,152, 13.28 a tile either way; tpusim
 * charged about twice (64,821 and 33,267). Counted in the result's tiles (its layout's in a
 * compiled program, else the least padded tiling, as layout.c lays a program's result out).
 * v4 keeps such an operand in CMEM (S(3)), 16.05 a tile, and v5p in HBM; tpusim reads both
 * from HBM and they are left as they were. Returns the result's tiles, 0 for any other op. */
int64_t tpu__vmem_transpose_tiles(const tpu__be *be, const tpu_instr *in, const tpu__kinfo *k) {
  const tpu_chip *ch = be->chip;
  if (ch->vmem_transpose_tile_cycles <= 0 || ch->tensorcores > 1 || ch->cmem_bytes > 0 || ch->vmem_bytes <= 0) return 0;
  if ((in->op != TPU_OP_COPY && in->op != TPU_OP_TRANSPOSE) || in->noperands != 1 || in->shape.dtype == TPU_TUPLE ||
      in->shape.rank < 2 || !tpu__moves_minor(ch, in) || k->op < 0 || k->vres || k->vcopy_windows)
    return 0;
  const tpu_prog_op *o = &be->p->ops[k->op];
  const tpu_shape *r = &in->shape, *s = &in->operands[0]->shape;
  if (o->scalar || o->dma || o->m > 0) return 0;
  int64_t lanes = ch->vector_lanes > 0 ? ch->vector_lanes : 128;
  if (r->layout_tail) {
    if (!tpu__copy_out_of_vmem(be, in) || r->dims[r->minor_to_major[0]] % lanes || s->dims[s->minor_to_major[0]] % lanes)
      return 0;
    return layout_tiles(r);
  }
  if (s->layout_tail || !tpu__be_reads_vmem(be, in->operands[0], in)) return 0;
  int q, m;
  tpu__least_tiling(ch, r, &q, &m);
  return tpu__tiles_as(ch, r, q, m);
}

/* Times such a copy as the compiler does (above): its read from VMEM and its stream costs
 * dropped, its least body the result's tiles at vmem_transpose_tile_cycles each (its write
 * overlaps them), no relayout floor. For the schedule pass, after vmem_assign.c. */
void tpu__vmem_transpose_op(tpu__be *be, const tpu_instr *in, const tpu__kinfo *k) {
  int64_t tiles = tpu__vmem_transpose_tiles(be, in, k);
  if (tiles <= 0) return;
  tpu_prog_op *o = &be->p->ops[k->op];
  double body = (double)tiles * be->chip->vmem_transpose_tile_cycles;
  o->xbytes = 0;
  o->copy_out = 1;
  o->relayout = 0;
  if (body > o->min_body_cycles) o->min_body_cycles = body;
}

/* A compiled program's copy from HBM into VMEM (S(1)) that moves the dimension in the lanes
 * (a transpose into a kernel's layout: a convolution's input with W in the lanes relaid out
 * with its features there, a table's or a scan's operand). The XLA TPU compiler charges it per
 * tile (8 rows of 128 lanes) of its HBM operand's layout, whatever the element type and the
 * VMEM side's tiles: copy_in_transpose_tile_cycles, v5e 15.75, v6e 12.97, with no start of its
 * own. libtpu probes off the corpus (bench/fidelity/probes/copy_in.py, data/copy_in.jsonl: 1x1
 * convolutions whose [B,H,W,32] input the compiler lays out W-minor, {2,3,1,0}, and copies into
 * VMEM C-minor): bf16[8,64,64,32] 2,048 tiles 32,256 cycles on v5e, 26,560 on v6e;
 * bf16[8,56,56,32] 1,792 tiles 28,224 / 23,240; f32[4,64,64,32] 1,024 tiles 16,128 / 13,280.
 * Compiled families tune split alike (einsum_cdab_bace_aebd_..., scatter_add_197x64_m4096_bf16
 * 256 tiles 4,032 / 3,320; sconv_b8_224x224_c64to128_k2s3_valid 28,672 tiles 451,584 on v5e;
 * split4_64x256x16x64_ax1_bf16 16,384 tiles 258,048), where tpusim had charged the bytes moved.
 * A floor: some cost more a tile (gconv_b8_56x56_c32to32_g2_k3_bf16 21.6, conv1d_b16l1000_c80to80
 * 18.3); a small one lasts at least kov + the HBM latency (tile.c). Returns the operand's tiles, 0
 * for any other op. */
int64_t tpu__copy_in_transpose_tiles(const tpu_chip *chip, const tpu_instr *in) {
  if (chip->copy_in_transpose_tile_cycles <= 0 || in->op != TPU_OP_COPY || in->noperands != 1) return 0;
  const tpu_shape *r = &in->shape, *o = &in->operands[0]->shape;
  if (!r->layout_tail || !o->layout_tail || !tpu__in_vmem(r) || on_chip(o) || !tpu__moves_minor(chip, in)) return 0;
  return layout_tiles(o);
}
