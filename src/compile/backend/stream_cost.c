/* The per-element stream costs of a vector kernel (moved out of layout.c): what the XLA TPU
 * compiler's cost model charges a kernel on the HBM port beyond its transfers, in bytes at the
 * streaming rate — stream passes over the elements it iterates over (reduces, narrow
 * results), lone unfused ops, transposes moving the minor dimension, broadcasts along the
 * lanes, concatenation shifts. tpu__pass_layout (layout.c) sets each kernel's xbytes from it. */
#include <string.h>

#include "compile/backend/backend.h"
#include "compile/passes/hlo_passes.h"

static int64_t round_up(int64_t a, int64_t m) { return m > 0 ? (a + m - 1) / m * m : a; }

/* The rows of a broadcast along the lanes: a value over the rows (rank >= 1) spread along the
 * result's minor dimension (a norm's or softmax's per-row statistic); 0 for other ops. */
/* The minor dimension of a fused value laid out by no layout of its own: that of an array of
 * its dimensions it is combined with elementwise, as read from a parameter of the fusion through
 * converts and elementwise ops (the broadcast vector of a strength-reduced dot runs along
 * the matrix's layout: einsum('ba,abcd->adc') over bf16[12,128,33,8]{1,3,2,0} spreads
 * [12,128] along 33 x 8 rows, b in the lanes, which the compiler's multiply_reduce fusion
 * times at 7,171 cycles on v5e, not the 50,688 lane broadcasts of a row-major [..,33,8]).
 * Where that layout is row-major, or there is none, the minor dimension of the layout that
 * pads x least, as the compiler lays out its arrays (mamba_train_assoc_b8l64d256's
 * f32[8,64,512,16] products {2,3,1,0}, 512 in the lanes, the [8,64,512] values spread along
 * the sublanes of its multiply_reduce fusions; tpusim's own values between kernels are
 * row-major). */
static int fused_order(const tpu_chip *chip, const tpu_instr *x, int8_t order[TPU_MAX_RANK]) {
  const tpu_comp *c = x->parent;
  int rank = x->shape.rank;
  for (int i = 0; c && i < c->ninstrs; i++) {
    const tpu_instr *u = c->instrs[i];
    tpu_op_class k = tpu_op_class_of(u->op);
    if (k != TPU_CLS_BINARY && k != TPU_CLS_TERNARY) continue;
    int reads = 0;
    for (int j = 0; j < u->noperands; j++) reads |= u->operands[j] == x;
    for (int j = 0; reads && j < u->noperands; j++) {
      const tpu_instr *o = u->operands[j];
      while (o != x && (o->op == TPU_OP_CONVERT || tpu_op_class_of(o->op) == TPU_CLS_UNARY) && o->noperands == 1 &&
             !o->shape.has_layout)
        o = o->operands[0];
      if (o == x || !o->shape.has_layout || o->shape.layout_tail || o->shape.rank != rank ||
          memcmp(o->shape.dims, x->shape.dims, sizeof o->shape.dims[0] * (size_t)rank))
        continue;
      int row_major = 1;
      for (int d = 0; d < rank; d++) row_major &= o->shape.minor_to_major[d] == rank - 1 - d;
      if (!row_major) {
        memcpy(order, o->shape.minor_to_major, sizeof o->shape.minor_to_major[0] * (size_t)rank);
        return (int)o->shape.minor_to_major[0];
      }
    }
  }
  int second, minor;
  tpu__least_tiling(chip, &x->shape, &second, &minor);
  /* the others major to minor in their order */
  int n = 0;
  order[n++] = (int8_t)minor;
  if (rank > 1 && second != minor) order[n++] = (int8_t)second;
  for (int d = rank - 1; d >= 0; d--)
    if (d != minor && d != second) order[n++] = (int8_t)d;
  return minor;
}

static int fused_minor(const tpu_chip *chip, const tpu_instr *x) {
  int8_t order[TPU_MAX_RANK];
  return fused_order(chip, x, order);
}

static int64_t lane_broadcast_rows(const tpu_chip *chip, const tpu_instr *x) {
  if (x->op != TPU_OP_BROADCAST || x->noperands != 1 || x->operands[0]->shape.rank < 1 || x->shape.rank < 2)
    return 0;
  int minor = x->shape.has_layout ? x->shape.minor_to_major[0] : fused_minor(chip, x);
  if (x->shape.dims[minor] <= 1 || tpu_i64s_find(&x->dimensions, minor) >= 0) return 0;
  return tpu_shape_numel(&x->shape) / x->shape.dims[minor];
}

/* The one user of x in its computation, seen through converts (NULL where it has none or
 * several). */
static const tpu_instr *sole_user(const tpu_instr *x) {
  for (int hops = 0; hops < 4; hops++) {
    const tpu_instr *u = tpu_instr_sole_user(x);
    if (!u || u->op != TPU_OP_CONVERT) return u;
    x = u;
  }
  return NULL;
}

/* The first dimension of more than one element in minor-to-major order `order` of shape s
 * (-1 where there is none). */
static int first_wide(const tpu_shape *s, const int8_t *order) {
  for (int k = 0; k < s->rank; k++)
    if (s->dims[order[k]] > 1) return order[k];
  return -1;
}

/* Which dimension of value v (inside kernel `in`, NULL outside one) holds its lanes, as the
 * XLA TPU compiler lays out the vector of a strength-reduced dot: a value of a compiled
 * program's layout (its tiles) lies as it says; one that comes, through converts, copies,
 * transposes and reshapes that add or drop size-1 dimensions, from a parameter of the entry
 * computation is relaid out into the matrix's layout (the compiler's copy of 'cab,badc->dab''s
 * vector [a,b,c] into {1,2,0}, b in the lanes as in the matrix's rows): -2; any other
 * value keeps its own producer's lanes (decode attention's probabilities from the softmax, the
 * keys in the lanes), its layout's or the row-major minor. -1 where not known. */
static int vector_lanes(const tpu_instr *in, const tpu_instr *v, int depth) {
  const tpu_shape *s = &v->shape;
  if (depth > 24 || s->rank < 1) return -1;
  if (s->has_layout && s->layout_tail) return first_wide(s, s->minor_to_major);
  const tpu_instr *o = v->noperands > 0 ? v->operands[0] : NULL;
  switch (v->op) {
    case TPU_OP_PARAMETER:
      if (in && in->op == TPU_OP_FUSION && v->parent == in->calls && v->index >= 0 && v->index < in->noperands)
        return vector_lanes(NULL, in->operands[v->index], depth + 1);
      if (v->parent && v->parent->is_entry) return -2;
      break;
    case TPU_OP_CONVERT: case TPU_OP_COPY:
      if (o && o->shape.rank == s->rank) return vector_lanes(in, o, depth + 1);
      break;
    case TPU_OP_TRANSPOSE: {
      int j = o ? vector_lanes(in, o, depth + 1) : -1;
      if (j < 0) return j;
      for (int i = 0; i < v->dimensions.n && i < s->rank; i++)
        if (v->dimensions.v[i] == j) return i;
      return -1;
    }
    case TPU_OP_RESHAPE: case TPU_OP_BITCAST: {
      int j = o ? vector_lanes(in, o, depth + 1) : -1;
      if (j < 0 || !o) return j;
      /* the same dimensions but for size-1 ones: the j-th wide one keeps its place among them */
      int nth = 0, wo = 0, wv = 0;
      for (int d = 0; d < o->shape.rank; d++)
        if (o->shape.dims[d] > 1) {
          if (d == j) nth = wo;
          wo++;
        }
      for (int d = 0; d < s->rank; d++) wv += s->dims[d] > 1;
      if (wo != wv) return -1;
      for (int d = 0, w = 0; d < s->rank; d++)
        if (s->dims[d] > 1) {
          if (w == nth) return s->dims[d] == o->shape.dims[j] ? d : -1;
          w++;
        }
      return -1;
    }
    default:
      break;
  }
  if (s->has_layout) return first_wide(s, s->minor_to_major);
  for (int d = s->rank - 1; d >= 0; d--)
    if (s->dims[d] > 1) return d;
  return -1;
}

/* The row groups of a strength-reduced dot's vector spread along the lanes: a broadcast
 * along the lanes (lane_broadcast_rows) that one multiply takes (through converts) whose
 * product one reduce sums (through converts) over dimensions other than the lanes, the
 * vector of a dot the compiler runs on the vector unit as a multiply_reduce fusion. The XLA
 * TPU compiler charges such a broadcast per group of 8 rows of the product's registers (its
 * second-minor dimension padded to 8 rows), whatever the lanes and the dtype: JAX's
 * 'cab,badc->dab' over a, b, c, d about 6, 8, 33, 128 costs F + 8.00 cycles per row group +
 * 13.49 per register of the product on v5e, bf16 and f32 alike (17.66 f32); v4 3.81, v5p
 * 3.96 per device of two TensorCores, v6e 8.00; a = 12 or b = 16 the same 10,327 cycles on
 * v5e, d = 200 as d = 256 (libtpu probes off the corpus, bench/fidelity/probes/
 * mr_lane_bcast.py, data/mr_lane_bcast.jsonl). The groups are the vector's, not the
 * product's: a register spread along the lanes serves every product register that differs
 * only in a dimension the vector lacks (families tune einsum_adceb_cab_baed's fusion,
 * [32,2,8] spread over [32,2,16,197,8]{3,0,4,2,1}: 18,119 cycles on v6e, the fit's fixed
 * part and product registers plus 8 x 64 groups, not 8 x 1,024). Only a vector whose lanes
 * are the product's rows and whose rows fit one register's lanes (vector_lanes, below). 0
 * for other ops. */
static int64_t dot_vector_groups(const tpu_chip *chip, const tpu_instr *in, const tpu_instr *x) {
  if (x->op != TPU_OP_BROADCAST || x->noperands != 1 || x->operands[0]->shape.rank < 1 || x->shape.rank < 2)
    return 0;
  int8_t order[TPU_MAX_RANK];
  const int r = x->shape.rank;
  if (x->shape.has_layout) memcpy(order, x->shape.minor_to_major, sizeof order[0] * (size_t)r);
  else fused_order(chip, x, order);
  const int m = order[0];
  if (m < 0 || m >= r || x->shape.dims[m] <= 1 || tpu_i64s_find(&x->dimensions, m) >= 0) return 0;
  /* the rows: the first dimension after the lanes of more than one element (a size-1
   * dimension is a bitcast away: the compiler's attention kernels drop it) */
  int k = 1;
  while (k < r && x->shape.dims[order[k]] == 1) k++;
  if (k >= r) return 0;
  const int q = order[k];
  const tpu_instr *mul = sole_user(x);
  if (!mul || mul->op != TPU_OP_MULTIPLY || mul->shape.rank != x->shape.rank) return 0;
  const tpu_instr *red = sole_user(mul);
  if (!red || red->op != TPU_OP_REDUCE || red->noperands < 1 || tpu_i64s_find(&red->dimensions, m) >= 0) return 0;
  /* the vector's own groups: one register spread along the lanes serves every register of
   * the product that differs only in a dimension the vector lacks */
  int64_t d = x->shape.dims[q], sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8;
  const int qv = (int)tpu_i64s_find(&x->dimensions, q); /* the rows' dimension in the vector */
  if (d <= 0 || qv < 0) return 0;
  /* only a vector whose lanes are the product's rows: each group a transposition; one whose
   * rows are already the product's is spread along the lanes as a statistic is */
  const int lanes = vector_lanes(in == x ? NULL : in, x->operands[0], 0);
  if (lanes != -2 && lanes != qv) return 0;
  /* and rows that fit one register's lanes (at most 128): a wider vector is transposed by
   * whole tiles, as a statistic is (decode attention's p . v over 2,048 keys, the
   * probabilities' keys in the lanes and the product's rows: the compiler's v6e
   * multiply_reduce_fusion 599,669 cycles, its product registers alone, not 65,536 groups
   * more; bench/fidelity/corpus attn_decode_b8h32kv2048d128, test_rules) */
  if (d > (chip->vector_lanes > 0 ? chip->vector_lanes : 128)) return 0;
  return tpu_shape_numel(&x->operands[0]->shape) / d * ((d + sub - 1) / sub);
}

/* The elements a reduce iterates over: a reduce over its operand's second-minor dimension
 * (the sublanes) iterates over that dimension padded to the sublanes of a 32-bit register,
 * its values widened to 32 bits: the XLA TPU compiler's cost model charges a sum over 4 rows
 * as over 8 (bf16 [256,4,4096] over axis 1 201,504 cycles on v5e, [256,16,4096] 437,152,
 * 2.2x for 4x the rows; f32 [256,4,4096] 218,592; bench/fidelity/probes cases_12,
 * data/p_red_*). */
static int64_t reduce_tiled_elems(const tpu_chip *chip, const tpu_instr *x) {
  const tpu_shape *s = &x->operands[0]->shape;
  int64_t n = tpu_shape_numel(s);
  if (s->rank < 2 || n <= 0 || !tpu_dtype_is_array(s->dtype)) return n;
  int q = s->has_layout ? s->minor_to_major[1] : s->rank - 2;
  int64_t sub = chip->vector_sublanes > 0 ? chip->vector_sublanes : 8, d = s->dims[q];
  if (tpu__kept_layout(x->operands[0])) {
    /* a layout tpusim's passes chose for it (a grouped convolution's statistics on its split
     * registers: group_conv.c): its 32-bit tiles, the lanes' padding too (the compiler's
     * multiply_reduce_fusion over f32[8,28,28,32,8]{4,0,3,2,1}, 8 of 128 lanes: 365,408
     * cycles on v5e, 14.6 per register, as 14.9 for the same sums over [8,28,28,256]) */
    int64_t lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128, w = s->dims[s->minor_to_major[0]];
    if (d <= 0 || w <= 0) return n;
    return n / d / w * ((d + sub - 1) / sub * sub) * ((w + lanes - 1) / lanes * lanes);
  }
  if (tpu_i64s_find(&x->dimensions, q) < 0 || d <= 0 || d % sub == 0) return n;
  return n / d * ((d + sub - 1) / sub * sub);
}

/* Whether kernel `in` streams whole tiles of its result: an elementwise op, broadcast,
 * reduce, transpose, or a fusion of nothing else (parameters, constants, bitcasts, reshapes,
 * iotas) — not a gather, scatter, slice or copy, whose rows the compiler charges as it moves
 * them (the compiler's bf16[262144,8] gather_fusion of t5_fwd_b4s512d512h8 is not 16 times its
 * rows' cost for its 8 lanes tiled to 128). A transpose, alone or fused, is charged over the
 * tiles it writes: s8[33,33,64,33] transposed (1,2,3,0) costs the compiler 84,540 cycles on
 * v5e, 5.6 MB each way plus the stream pass on [33,33,40,128], and bf16[16,33,65,64]
 * transposed (0,1,3,2) and incremented 80,495, the pass on [16,33,64,128]: families tune
 * transpose_*, bench/fidelity/probes/transpose_tiles.py. A compiled program's copy inside a
 * fusion is such a transpose: the fusion's loop relays its registers, and the compiler
 * charges the fusion over the tiles it writes as for tpusim's own transpose (families tune
 * transpose_33x33x64x33_p1230_s8's copy_bitcast_fusion, s8 {2,3,1,0} -> {2,0,3,1}: the same
 * 84,540 cycles on v5e; transpose_64x64x33x16_p3012_fused_s8's fusion, a copy and an add,
 * 64,080; bench/fidelity/probes/fused_copy.py). A copy that is its own kernel is not:
 * counting its tiles moves the --compiled test p90 on v4 61.9 -> 65.5 %. */
static int streams_tiles(const tpu_instr *x) {
  switch (x->op) {
    case TPU_OP_PARAMETER: case TPU_OP_CONSTANT: case TPU_OP_BITCAST: case TPU_OP_RESHAPE: case TPU_OP_IOTA:
    case TPU_OP_BROADCAST: case TPU_OP_REDUCE: case TPU_OP_TUPLE: case TPU_OP_GET_TUPLE_ELEMENT:
    case TPU_OP_TRANSPOSE:
      return 1;
    case TPU_OP_FUSION:
      if (!x->calls) return 0;
      for (int i = 0; i < x->calls->ninstrs; i++) {
        const tpu_instr *y = x->calls->instrs[i];
        if (y->op == TPU_OP_COPY && y->noperands == 1 && y->shape.layout_tail) continue;
        if (!streams_tiles(y)) return 0;
      }
      return 1;
    default:
      return tpu__is_elementwise(x->op);
  }
}

/* The array a fused reduce reads as the kernel holds it in memory: its operand traced back
 * through elementwise ops and converts of the same dimensions to a fused parameter, whose
 * fusion operand it is (`in` the fusion; `x` itself where it is the unfused reduce); NULL
 * where a reshape, broadcast or other op in between lays the values out afresh. */
static const tpu_instr *reduce_source(const tpu_instr *in, const tpu_instr *x) {
  if (x == in) return x->operands[0];
  const tpu_instr *v = x->operands[0];
  for (;;) {
    if (v->op == TPU_OP_PARAMETER) break;
    if (!tpu__is_elementwise(v->op) || v->noperands < 1) return NULL;
    const tpu_instr *next = NULL;
    for (int j = 0; j < v->noperands && !next; j++) {
      const tpu_shape *o = &v->operands[j]->shape;
      if (o->rank == v->shape.rank && !memcmp(o->dims, v->shape.dims, sizeof o->dims[0] * (size_t)o->rank))
        next = v->operands[j];
    }
    if (!next) return NULL;
    v = next;
  }
  if (v->index < 0 || v->index >= in->noperands) return NULL;
  const tpu_instr *a = in->operands[v->index];
  const tpu_shape *s = &x->operands[0]->shape;
  if (a->shape.rank != s->rank || memcmp(a->shape.dims, s->dims, sizeof s->dims[0] * (size_t)s->rank)) return NULL;
  return a;
}

/* The elements a reduce iterates over where its operand is an array in memory: that
 * array's tiles, padding included — the minor dimension to whole lanes, the second-minor
 * to the 8 rows of a 32-bit register. The XLA TPU compiler's cost model charges a sum of
 * [33,50,R,C] over axes 0 and 1 the same for C = 65 as for C = 128 and for R = 65 as for
 * R = 72 (bf16 and f32, a bf16 or f32 result, v4 v5e v5p v6e; f32 [33,50,64,65] 413,709
 * cycles on v5e, [33,50,64,128] the same), and so a sum over the rows (axis 2) and over
 * [8,56,56,C] for C = 64, 96, 128 (libtpu probes, bench/fidelity/probes/reduce_tiles.py).
 * -1 where the operand is a value laid out inside the kernel (reduce_tiled_elems). */
static int64_t reduce_source_elems(const tpu__be *be, const tpu_instr *in, const tpu_instr *x) {
  const tpu_instr *a = reduce_source(in, x);
  if (!a || a->shape.rank < 2 || !tpu_dtype_is_array(a->shape.dtype)) return -1;
  int64_t padded = tpu__value_bytes(be, a, &a->shape);
  int q, m;
  if (a->shape.has_layout) q = a->shape.minor_to_major[1], m = a->shape.minor_to_major[0];
  else q = a->shape.rank - 2, m = a->shape.rank - 1;
  if (padded != tpu__tiled_as(be->chip, &a->shape, q, m)) return -1; /* laid out otherwise: as before */
  int64_t sub = be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8;
  int64_t lanes = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
  /* 16- and 8-bit values widened to 32 bits: the 8 rows of a 32-bit register, not the packed tile's */
  int64_t d = a->shape.dims[q], w = a->shape.dims[m], n = tpu_shape_numel(&a->shape);
  if (d <= 0 || w <= 0) return -1;
  return n / d / w * round_up(d, sub) * round_up(w, lanes);
}

/* What one instruction adds to stream_costs' scan: whether it reduces, moves the minor
 * dimension (a transpose), the elements it iterates over and the rows it broadcasts along
 * the lanes. */
static void scan_one(const tpu__be *be, const tpu_instr *in, const tpu_instr *x, int *reduces, int64_t *moved,
                     int64_t *n, int64_t *rows, int64_t *groups) {
  const tpu_chip *chip = be->chip;
  const int64_t g = chip->dot_vector_group_cycles > 0 ? dot_vector_groups(chip, in, x) : 0;
  if (g > 0) *groups += g;
  else *rows += lane_broadcast_rows(chip, x);
  if (x->op == TPU_OP_REDUCE && x->noperands > 0) {
    *reduces = 1;
    int64_t e = reduce_source_elems(be, in, x);
    if (e < 0) e = reduce_tiled_elems(chip, x);
    if (e > *n) *n = e;
  }
  if (tpu__moves_minor(chip, x)) *moved += tpu_shape_numel(&x->shape);
}

/* A fusion that is one reduce of its widened operand (parameters, converts and bitcasts
 * feeding a single reduce: JAX's sum over bf16 converts to f32 first) over rows, not the
 * lanes, its result narrowed back to 16 bits: the compiler folds the converts away and times
 * it as the unfused reduce, lone_op_bytes included (bf16 [256,16,4096] summed over axis 1
 * costs v5e 437,152 cycles, twice f32 [256,4,4096]'s lone reduce of as many 32-bit tiled
 * elements, 218,592; bench/fidelity/probes cases_12). One over the lanes it does not (bf16
 * [64,1024,1024] summed over axes 1,2, layer norms over bf16 rows: within 3 % without it,
 * calibration corpus), nor one whose result stays f32 (jnp.var's sums: a kLoop
 * convert_reduce_fusion; bf16 [33,33,64,65] summed over axis 2 to f32 costs v5e 125,907
 * cycles, to bf16 233,314: probes/reduce_tiles.py). */
static int widened_reduce(const tpu_instr *in) {
  if (in->op != TPU_OP_FUSION || !in->calls) return 0;
  size_t rb = tpu_dtype_size(in->shape.dtype);
  if (rb == 0 || rb >= 4) return 0;
  int reduces = 0;
  for (int i = 0; i < in->calls->ninstrs; i++) {
    const tpu_instr *x = in->calls->instrs[i];
    if (x->op == TPU_OP_REDUCE) {
      const tpu_shape *os = &x->operands[0]->shape;
      int m = os->has_layout && os->rank > 0 ? os->minor_to_major[0] : os->rank - 1;
      if (tpu_i64s_find(&x->dimensions, m) >= 0) return 0; /* over the lanes: as fused (norms) */
      reduces++;
    } else if (x->op != TPU_OP_PARAMETER && x->op != TPU_OP_CONSTANT && x->op != TPU_OP_CONVERT && x->op != TPU_OP_BITCAST)
      return 0;
  }
  return reduces == 1;
}

/* Whether kernel operand `o` is a gather's result (through reshapes). The XLA TPU compiler
 * runs a gather as a kCustom gather_fusion that takes in no consumer, so a reduce of its
 * rows (an embedding bag's sum) is an unfused reduce there, timed as the lone reduce of a
 * parameter of its tiled shape: f32 [256,50,1024] summed over axis 1 after a gather
 * (embedding_bag_30522x1024_b256k50_f32's reduce_sum.7) costs the compiler 318,208 cycles on
 * v4 and 442,208 on v5e, exactly the unfused reduce of a parameter f32[256,56,1024] (libtpu
 * probe outside the corpus, tpu_compile.py: 318,208 / 442,208; [256,50,1024] 284,128 /
 * 394,832), where tpusim, charging it as a fused reduce, gave 264,558 / 272,378. An
 * elementwise op after a gather is not lone there (f32[4096,1024] gathered times 2: 77,160
 * cycles on v4, the fused rate), so only a reduce takes this. */
static int gathered_operand(const tpu_instr *o) {
  while ((o->op == TPU_OP_RESHAPE || o->op == TPU_OP_BITCAST) && o->noperands == 1) o = o->operands[0];
  return o->op == TPU_OP_GATHER;
}

/* Whether `in` is one of the kernels space_to_batch.c builds (its root marked s2b_kernel). */
static int s2b_kernel(const tpu_instr *in) {
  const tpu_instr *r = in->op == TPU_OP_FUSION && in->calls && in->calls->root ? in->calls->root : in;
  for (int i = 0; i < r->nattrs; i++)
    if (!strcmp(r->attrs[i].name, "s2b_kernel")) return 1;
  return 0;
}

/* Where transpose x puts its operand's lane dimension (the minor one of its layout, else the
 * last): the place in x's result, or -1. */
static int operand_lane_at(const tpu_instr *x) {
  const tpu_shape *o = &x->operands[0]->shape;
  if (o->rank < 1 || x->dimensions.n != x->shape.rank) return -1;
  int lane = o->has_layout ? o->minor_to_major[0] : o->rank - 1;
  for (int p = 0; p < x->dimensions.n; p++)
    if (x->dimensions.v[p] == lane) return p;
  return -1;
}

/* The elements of the transpose a reducing kernel's product is laid out as: the XLA TPU
 * compiler computes a strength-reduced dot's product in the layout one operand lies in, so
 * that operand's transpose into the dot's order is a layout, not a move; the largest moving
 * transpose of the product's size is that one (JAX's 'badc,adbc->ba': both operands
 * transposed into the product, the compiler's fused_computation.1 copies one, copy.3, and
 * bitcasts the other: 4,804 cycles on v6e, the stream pass alone; families tune
 * einsum_badc_adbc_ba_a8_b4_c16_d512_bf16). With the others that keep their lanes (below):
 * the elements not charged as moves. 0 without a reduce. */
static int64_t product_layout_transpose(const tpu__be *be, const tpu_comp *c) {
  int64_t prod = 0, best = 0;
  for (int i = 0; i < c->ninstrs; i++) {
    const tpu_instr *x = c->instrs[i];
    if (x->op == TPU_OP_REDUCE && x->noperands > 0 && tpu_shape_numel(&x->operands[0]->shape) > prod)
      prod = tpu_shape_numel(&x->operands[0]->shape);
  }
  const tpu_instr *lay = NULL;
  for (int i = 0; prod > 0 && i < c->ninstrs; i++) {
    const tpu_instr *x = c->instrs[i];
    int64_t e = tpu_shape_numel(&x->shape);
    if (x->op == TPU_OP_TRANSPOSE && e == prod && e > best && tpu__moves_minor(be->chip, x)) {
      best = e;
      lay = x;
    }
  }
  if (!lay) return 0;
  /* The product's lanes are that operand's lane dimension; another operand transposed into
   * the product whose lane dimension lands there too keeps its lanes: the compiler's copy
   * of it (copy.3 above, {2,3,1,0} into {2,3,0,1}: two major dimensions swapped) shuffles
   * whole tiles in the kernel's loop, no transpose (--compiled, where that copy is not
   * charged, times the kernel within 1 % on v5e, v5p and v6e). */
  int p = operand_lane_at(lay);
  int64_t free_ = best;
  for (int i = 0; p >= 0 && i < c->ninstrs; i++) {
    const tpu_instr *x = c->instrs[i];
    if (x == lay || x->op != TPU_OP_TRANSPOSE || tpu_shape_numel(&x->shape) != prod || x->shape.rank != lay->shape.rank)
      continue;
    if (operand_lane_at(x) == p && tpu__moves_minor(be->chip, x)) free_ += prod;
  }
  return free_;
}

/* o seen through bitcasts and get-tuple-elements (the leaf it names, if any, in *leaf). */
static const tpu_instr *through_views(const tpu_instr *o, int *leaf) {
  for (int hops = 0; hops < 8 && o->noperands >= 1; hops++) {
    if (o->op == TPU_OP_BITCAST && o->noperands == 1) o = o->operands[0];
    else if (o->op == TPU_OP_GET_TUPLE_ELEMENT) *leaf = (int)o->index, o = o->operands[0];
    else break;
  }
  return o;
}

/* An op that updates its operand 0's buffer in place (a dynamic-update-slice or scatter, alone
 * or as a fusion's root): its result is that buffer. */
static int updates_in_place(const tpu_instr *u) {
  if (u->op == TPU_OP_FUSION && u->calls && u->calls->root) u = u->calls->root;
  return u->op == TPU_OP_DYNAMIC_UPDATE_SLICE || u->op == TPU_OP_SCATTER;
}

/* Is leaf l of x (all of x when l < 0) part of its computation's result (its root, or a leaf
 * of a root tuple, seen through views): a step's output or a loop's carried state, which the
 * compiler keeps in HBM? */
static int returned_at(const tpu_instr *x, int l, int depth) {
  const tpu_instr *r = x->parent ? x->parent->root : NULL;
  if (!r) return 0;
  int leaf = -1;
  const tpu_instr *o = through_views(r, &leaf);
  if (o == x && (leaf < 0 || leaf == l)) return 1;
  for (int j = 0; o->op == TPU_OP_TUPLE && j < o->noperands; j++) {
    int lj = -1;
    const tpu_instr *q = through_views(o->operands[j], &lj);
    if (q == x && (lj < 0 || lj == l)) return 1;
  }
  /* a buffer an update writes in place, whose result is returned: the same buffer (the
   * compiler writes a cache's copy into the output it then updates) */
  const tpu_comp *c = x->parent;
  for (int i = 0; depth < 4 && l < 0 && i < c->ninstrs; i++) {
    const tpu_instr *u = c->instrs[i];
    if (u->noperands > 0 && u->operands[0] == x && updates_in_place(u) && returned_at(u, -1, depth + 1)) return 1;
  }
  return 0;
}

static int returned(const tpu_instr *x, int l) { return returned_at(x, l, 0); }

/* A loop kernel: elementwise work over its result's elements (a loop fusion, or one
 * elementwise op, convert, broadcast, pad, iota, reverse or reduce), the kind whose writes to
 * CMEM the compiler charges more; not a kernel that moves data (a copy, transpose, slice,
 * concatenate on its own), updates a buffer in place, gathers, sorts or runs a window (the
 * compiled families tune split's copies and slices into CMEM sit at 0.86-0.96 of the compiler
 * without the charge, its loop fusions at 0.88, broadcasts 0.69, pads 0.81). */
static int loop_kernel_op(const tpu_instr *x, int fused) {
  switch (x->op) {
    case TPU_OP_PARAMETER: case TPU_OP_CONSTANT: case TPU_OP_BITCAST: case TPU_OP_RESHAPE: case TPU_OP_IOTA:
    case TPU_OP_BROADCAST: case TPU_OP_REDUCE: case TPU_OP_TUPLE: case TPU_OP_GET_TUPLE_ELEMENT: case TPU_OP_CONVERT:
    case TPU_OP_PAD: case TPU_OP_REVERSE:
      return 1;
    case TPU_OP_COPY: case TPU_OP_TRANSPOSE: case TPU_OP_SLICE: case TPU_OP_CONCATENATE: case TPU_OP_DYNAMIC_SLICE:
      return fused; /* within a loop fusion, its loop's registers */
    default:
      return tpu__is_elementwise(x->op);
  }
}

static int loop_kernel(const tpu_instr *in) {
  if (in->op != TPU_OP_FUSION) return loop_kernel_op(in, 0);
  if (!in->calls || updates_in_place(in)) return 0;
  for (int i = 0; i < in->calls->ninstrs; i++) {
    const tpu_instr *y = in->calls->instrs[i];
    if (y->op == TPU_OP_FUSION ? !loop_kernel(y) : !loop_kernel_op(y, 1)) return 0;
  }
  return 1;
}

static int has_reduce(const tpu_instr *in) {
  if (in->op == TPU_OP_REDUCE) return 1;
  if (in->op != TPU_OP_FUSION || !in->calls) return 0;
  for (int i = 0; i < in->calls->ninstrs; i++)
    if (has_reduce(in->calls->instrs[i])) return 1;
  return 0;
}

/* The elements a loop kernel that does not reduce writes (its result's tiles, padding
 * included), by which the XLA TPU compiler sizes its blocks on a chip with
 * stream_block_elems (v4); 0 for other kernels. libtpu probes off the corpora
 * (bench/fidelity/probes/loop_blocks.py, data/loop_blocks.jsonl): chains of x * a + b over
 * f32 / bf16 [R, 1152], R 48-12288; the compiler's window_config iteration_bounds grow as
 * the square root of the elements, f32 and bf16 alike (1 block to 0.35 M elements, 2-3 at
 * 0.5-1 M, 5 at 3.5-4 M, 9-10 at 7-9 M, 14 at 14 M), and a kernel of several blocks costs
 * its start, its transfers and one block's vector work (the last block's, exposed). */
int64_t tpu__loop_block_elems(const tpu__be *be, const tpu_instr *in) {
  if (be->chip->stream_block_elems <= 0 || !loop_kernel(in) || has_reduce(in)) return 0;
  /* (not an op the compiler too leaves alone, every operand a parameter or a constant: its
   * lone_op_bytes is read from such ops at every size, blocks included; the compiler's
   * f32[512,1024] negation is 1.09 of tpusim without this rule, 1.29 with it) */
  if (in->op != TPU_OP_FUSION) {
    int lone = 1;
    for (int j = 0; lone && j < in->noperands; j++) {
      const tpu_instr *o = in->operands[j];
      while ((o->op == TPU_OP_BITCAST || o->op == TPU_OP_COPY_DONE || o->op == TPU_OP_COPY_START) && o->noperands == 1)
        o = o->operands[0];
      lone = o->op == TPU_OP_PARAMETER || o->op == TPU_OP_CONSTANT || o->shape.rank == 0;
    }
    if (lone) return 0;
  }
  int64_t n = 0;
  int nl = tpu__leaves(&in->shape);
  for (int l = 0; l < nl; l++) {
    const tpu_shape *s = tpu__leaf(&in->shape, l);
    if (!s || !tpu_dtype_is_array(s->dtype)) continue;
    int64_t e = tpu__write_bytes(be, in, l) * 8 / tpu_dtype_bits(s->dtype);
    if (e > n) n = e;
  }
  return n;
}

/* Does a loop kernel write a result to CMEM (v4, chip cmem_write_pass)? The XLA TPU compiler
 * keeps the values between kernels there (memory space S(3)), not in HBM, and charges a loop
 * kernel writing one the stream pass (stream_pass_bytes per element), once, as a kernel that
 * reduces or writes a 16-bit result; reads of CMEM cost what reads of HBM do (libtpu probes
 * off the corpora, bench/fidelity/probes/cmem_rate.py: chains of elementwise kernels, f32
 * 0.98 B more per byte written to CMEM than to HBM, bf16 none). A compiled program says where
 * each result lies (its layout's S(3)); tpusim's own compilation places in CMEM what the
 * compiler does: every result of a kernel that is not its computation's result (a step's
 * outputs, a loop's carried state, a buffer updated in place into them stay in HBM) and
 * fits in the core's CMEM (over the compiled families tune split, 3,289 of 3,572 such values
 * are in S(3), the rest mostly scalars and sorts' operands). */
static int writes_cmem(const tpu__be *be, const tpu_instr *in) {
  const tpu_chip *ch = be->chip;
  if (!ch->cmem_write_pass || ch->cmem_bytes <= 0 || !loop_kernel(in)) return 0;
  int nl = tpu__leaves(&in->shape);
  for (int l = 0; l < nl; l++) {
    const tpu_shape *s = tpu__leaf(&in->shape, l);
    if (!s || !tpu_dtype_is_array(s->dtype)) continue;
    const int own = !s->layout_tail && !in->shape.layout_tail;
    if (own && returned(in, nl > 1 ? l : -1)) continue;
    if (own ? tpu__padded_bytes(be, s) > ch->cmem_bytes : !(s->layout_tail && strstr(s->layout_tail, "S(3)"))) continue;
    if (tpu__write_bytes(be, in, l) > 0) return 1;
  }
  return 0;
}

/* The per-element costs the XLA TPU compiler's cost model charges a vector kernel on the
 * HBM port beyond its transfers, in bytes at the streaming rate (docs/timing.md; each
 * chip field's note gives the compiler probe it comes from):
 * - stream_pass_bytes per element it iterates over when it reduces or writes a result
 *   narrower than 32 bits (16-bit, 8-bit, pred: (x * s).astype(int8 or f8e4m3fn) over bf16
 *   [4096,4096] costs the v5e compiler 269,904 cycles, its 48 MiB plus 4.2 B per element,
 *   as x > 0 does; gen.py narrow_results), once per kernel, however many it has;
 * - lone_op_bytes per element for an unfused elementwise op, convert, reduce or broadcast whose bytes
 *   in and out reach lone_op_min_bytes (the compiler leaves a single op unfused and times
 *   it slower than the same op in a fusion);
 * - transpose_bytes per element of each transpose that moves the minor dimension;
 * - row_broadcast_cycles per row of each broadcast along the lanes, split over the chip's
 *   TensorCores (x * s[:, None] over f32 [65536,128] costs 8,192 cycles more than x * 2 on
 *   v6e, 1/8 cycle per row at every width from 128 to 2,048; gen.py row_broadcast). */
double tpu__stream_costs(const tpu__be *be, const tpu_instr *in, const tpu__kinfo *k) {
  const tpu_chip *ch = be->chip;
  if (ch->stream_pass_bytes <= 0 && ch->lone_op_bytes <= 0 && ch->transpose_bytes <= 0 && ch->row_broadcast_cycles <= 0 &&
      ch->concat_shift_cycles <= 0 && ch->dot_vector_group_cycles <= 0)
    return 0;
  int reduces = 0, narrow = 0;
  int64_t n = 0, moved = 0, rows = 0, groups = 0;
  /* (a kernel that is a reshape moves rows, as a copy does: the compiler's relayout of
   * bf16[8,7,7,128] to [8,7,7,8,16] is not 8 times its rows' cost for its 16 lanes) */
  /* (nor a kernel of space to batch's form, whose transposes relay a convolution's pieces
   * as the compiler's own relayouts do: space_to_batch.c marks them s2b_kernel; its unfold
   * into tiles of fewer than 8 rows is timed per tile written, tile.c relayout_tiles) */
  /* (a compiled program's copy kernel out of VMEM into HBM streams its result's tiles too: the
   * compiler's pass over bf16[4,56,56,64] relaid out into {3,2,1,0:T(8,128)(2,1)} is over
   * [4,56,56,128], 22,581 cycles on v5e = the 3.2 MB written plus 4 B for each of 1.6 M padded
   * elements, and its start; conv3d_b1_8x32x32_c64to64_k1s1's copy.3 16,145 alike; copy_kind.c
   * tpu__copy_out_of_vmem) */
  const int tiles = (in->op != TPU_OP_RESHAPE && in->op != TPU_OP_BITCAST && streams_tiles(in) && !s2b_kernel(in)) ||
                    tpu__copy_out_of_vmem(be, in);
  int nl = tpu__leaves(&in->shape);
  for (int l = 0; l < nl; l++) {
    const tpu_shape *s = tpu__leaf(&in->shape, l);
    if (!s || !tpu_dtype_is_array(s->dtype)) continue;
    if (tpu_dtype_size(s->dtype) < 4) narrow = 1; /* 16-bit, 8-bit and pred results alike */
    /* the elements of the tiles it writes, padding included, where it streams whole tiles
     * (the XLA TPU compiler charges bf16(a * b + a) over f32 [33,33,64,65] as over
     * [33,33,64,128], 287,497 cycles on v5e: test_reduce_tiles.c); an in-place update (dynamic-update-slice, scatter) writes its
     * update, not the whole buffer */
    int64_t e = tiles ? tpu__write_bytes(be, in, l) * 8 / tpu_dtype_bits(s->dtype)
                      : tpu__plain_write_bytes(be, in, l) / (int64_t)tpu_dtype_size(s->dtype);
    if (e > n) n = e;
  }
  if (in->op == TPU_OP_FUSION && in->calls) {
    for (int i = 0; i < in->calls->ninstrs; i++) scan_one(be, in, in->calls->instrs[i], &reduces, &moved, &n, &rows, &groups);
    moved -= product_layout_transpose(be, in->calls);
  } else {
    scan_one(be, in, in, &reduces, &moved, &n, &rows, &groups);
  }
  double x = 0;
  if (reduces || narrow || writes_cmem(be, in)) x += ch->stream_pass_bytes * (double)n;
  tpu_op_class cls = tpu_op_class_of(in->op);
  int lone = in->op == TPU_OP_CONVERT || in->op == TPU_OP_REDUCE || in->op == TPU_OP_BROADCAST || cls == TPU_CLS_UNARY ||
             cls == TPU_CLS_BINARY || cls == TPU_CLS_TERNARY || widened_reduce(in) || tpu__whole_window_pad(be, in);
  /* Only where the compiler too has nothing to fuse it with: every array operand a
   * parameter or a constant (tpusim leaves ops unfused that the compiler puts in a
   * multi-output fusion; those are not lone there), or, for a reduce, a gather's result
   * (gathered_operand). */
  const int reducing = in->op == TPU_OP_REDUCE || widened_reduce(in);
  for (int j = 0; lone && j < in->noperands; j++) {
    const tpu_instr *o = in->operands[j];
    while ((o->op == TPU_OP_BITCAST || o->op == TPU_OP_COPY_DONE || o->op == TPU_OP_COPY_START) && o->noperands == 1)
      o = o->operands[0];
    lone = o->op == TPU_OP_PARAMETER || o->op == TPU_OP_CONSTANT || o->shape.rank == 0 || (reducing && gathered_operand(o));
  }
  /* a reduce from fewer bytes than an elementwise op (lone_reduce_min_bytes: libtpu probes of
   * f32[R,1024] summed over its rows, bench/fidelity/probes/lone_reduce.py) */
  const int64_t least = reducing && ch->lone_reduce_min_bytes > 0 ? ch->lone_reduce_min_bytes : ch->lone_op_min_bytes;
  if (lone && k->padded_bytes >= (double)least) x += ch->lone_op_bytes * (double)n;
  x += ch->transpose_bytes * (double)moved;
  if (ch->concat_shift_cycles > 0) {
    x += ch->concat_shift_cycles * tpu__kernel_shift_regs(be, in) * tpu_chip_hbm_stream_bw(ch) / ch->clock_hz;
  }
  /* a strength-reduced dot's vector spread along the lanes: per row group of its product
   * (dot_vector_groups), in place of row_broadcast_cycles per row */
  if (ch->dot_vector_group_cycles > 0 && groups > 0)
    x += ch->dot_vector_group_cycles * (double)groups / (double)(ch->tensorcores > 0 ? ch->tensorcores : 1) *
         tpu_chip_hbm_stream_bw(ch) / ch->clock_hz;
  if (ch->row_broadcast_cycles > 0 && rows > 0)
    x += ch->row_broadcast_cycles * (double)rows / (double)(ch->tensorcores > 0 ? ch->tensorcores : 1) *
         tpu_chip_hbm_stream_bw(ch) / ch->clock_hz;
  return x;
}
