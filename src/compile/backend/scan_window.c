/* scan_window.c: the blocks a short scan's window kernel streams from HBM (the halo it rereads). */
#include "compile/backend/backend.h"

/* The scan kernel `in` is or holds: a reduce-window of one operand, rank 3 or more, sliding
 * along one dimension only, that dimension the most major of its layout (row-major when it
 * has none: scan_rewrite.c's kernel) and its window the whole dimension padded by its
 * length less one on one side (jnp.cumsum's lowering, forward or reverse); NULL otherwise. */
static const tpu_instr *major_scan(const tpu_instr *in, int *dim) {
  const tpu_instr *w = in;
  if (in->op == TPU_OP_FUSION && in->calls) {
    w = NULL;
    for (int i = 0; i < in->calls->ninstrs; i++)
      if (in->calls->instrs[i]->op == TPU_OP_REDUCE_WINDOW) {
        if (w) return NULL;
        w = in->calls->instrs[i];
      }
  }
  if (!w || w->op != TPU_OP_REDUCE_WINDOW || w->noperands != 2 || w->shape.dtype == TPU_TUPLE ||
      w->shape.rank < 3 || w->nwindow != w->shape.rank)
    return NULL;
  const tpu_shape *s = &w->operands[0]->shape;
  int d = -1;
  for (int i = 0; i < w->nwindow; i++) {
    const tpu_window_dim *x = &w->window[i];
    if (x->size <= 1 && x->stride <= 1 && x->base_dilation <= 1 && x->window_dilation <= 1 && !x->pad_lo && !x->pad_hi)
      continue;
    if (d >= 0) return NULL;
    const int64_t n = s->dims[i];
    if (x->size != n || n < 2 || x->stride != 1 || x->base_dilation > 1 || x->window_dilation > 1 ||
        !((x->pad_lo == n - 1 && x->pad_hi == 0) || (x->pad_hi == n - 1 && x->pad_lo == 0)))
      return NULL;
    d = i;
  }
  const int major = w->shape.has_layout ? (int)w->shape.minor_to_major[w->shape.rank - 1] : 0;
  if (d < 0 || d != major) return NULL;
  *dim = d;
  return w;
}

/* Is `in` a scan kernel of rank 3 or more sliding along its lanes, laid out row-major (a
 * scan the compiler keeps in the lanes: scan_rewrite.c major_order, scan_layout.c)? */
static int lane_scan(const tpu_instr *in) {
  const tpu_instr *w = in->op == TPU_OP_FUSION && in->calls ? in->calls->root : in;
  if (!w || w->op != TPU_OP_REDUCE_WINDOW || w->noperands != 2 || w->shape.dtype == TPU_TUPLE || w->shape.rank < 3 ||
      w->nwindow != w->shape.rank || w->shape.layout_tail)
    return 0;
  const int r = w->shape.rank;
  for (int i = 0; w->shape.has_layout && i < r; i++)
    if (w->shape.minor_to_major[i] != r - 1 - i) return 0;
  const int64_t n = w->operands[0]->shape.dims[r - 1];
  const tpu_window_dim *x = &w->window[r - 1];
  if (n < 2 || x->size != n || x->stride > 1 || x->base_dilation > 1 || x->window_dilation > 1 ||
      !((x->pad_lo == n - 1 && x->pad_hi == 0) || (x->pad_hi == n - 1 && x->pad_lo == 0)))
    return 0;
  for (int i = 0; i < r - 1; i++)
    if (w->window[i].size != 1 || w->window[i].pad_lo || w->window[i].pad_hi) return 0;
  return 1;
}

/* Whether value v is the result or the operand of a major scan's kernel (major_scan), which
 * the XLA TPU compiler lays out row-major, the scanned dimension most major and the others in
 * their order, whatever that pads: s32[80,126,80] scanned along axis 0 is copied from its
 * least padded {1,2,0} into {2,1,0} (126 rows in the sublanes, 80 in the lanes: 1.6x the
 * bytes) and back; f32[126,80,65] along axis 1 into {2,0,1} (65 in the lanes, 1.8x) and
 * s32[158,129,33] along axis 2 into {1,0,2}, where {0,1,2} pads less
 * (bench/fidelity/families/compiled cummax_80x126x80_ax0_s32, cumsum_126x80x65_ax1_f32,
 * cummin_158x129x33_ax2_s32, cummin_65x80x128_ax1_f32, on all four generations); so is a
 * lane scan's (s32[64,100,64] along axis 2 runs in {2,1,0}: libtpu probe on v5e). */
int tpu__scan_row_major(const tpu_instr *v) {
  int d;
  if (major_scan(v, &d) || lane_scan(v)) return 1;
  const tpu_comp *c = v->parent;
  for (int i = 0; c && i < c->ninstrs; i++) {
    const tpu_instr *u = c->instrs[i];
    if (u->noperands >= 1 && u->operands[0] == v && (major_scan(u, &d) || lane_scan(u))) return 1;
  }
  return 0;
}

/* Whether `in` is a copy or transpose of a scan kernel's result (major_scan, lane_scan): the
 * relayout back after the scan. The XLA TPU compiler charges it what it charges the copy in,
 * though it reads the scan's result from VMEM on v5e and v6e: 12,444 and 12,444 cycles on v5e
 * for s32[80,126,80] (cummax_80x126x80_ax0_s32), 14,096 and 14,096 for f32[126,80,65], 17,792
 * and 17,792 for s32[158,129,33], 8,064 and 8,064 for s32[64,100,64] (libtpu probe), so its
 * read from VMEM adds no stream cost of its own (lower.c). */
int tpu__scan_result_copy(const tpu_instr *in) {
  int d;
  if ((in->op != TPU_OP_COPY && in->op != TPU_OP_TRANSPOSE) || in->noperands != 1) return 0;
  const tpu_instr *s = in->operands[0];
  return major_scan(s, &d) || lane_scan(s);
}

/* The factors on the bytes a short scan's kernel reads (*fin) and writes (*fout) when it
 * streams from HBM, 1 for any other kernel or a chip without scan_window_bytes. The XLA TPU
 * compiler's v5p runs it (its depthwise window emitter) in n blocks of B = ceil(L/n) output
 * rows along the scan of length L, the window cut in k parts of ceil(L/k) taps, each step
 * reading the B + ceil(L/k) - 1 input rows its outputs need (the halo) and writing its B
 * rows, one lane tile wide; of the (n, k) whose step fits the chip's scan_window_bytes it
 * takes the one moving the fewest rows (libtpu probes of nine rank-3 scans,
 * bench/fidelity/probes/scan_window.py: s32[158,129,33] along axis 2, 17-row blocks of
 * 49-row inputs; s32[80,126,80] along axis 0, 20-row blocks and window halves of 40; f32
 * [200,100,60] along axis 2, 20-row blocks; each the fewest rows among the steps that fit). */
void tpu__scan_window_factors(const tpu__be *be, const tpu_instr *in, double *fin, double *fout) {
  *fin = *fout = 1.0;
  const int64_t budget = be->chip->scan_window_bytes;
  int d = -1;
  const tpu_instr *w = budget > 0 ? major_scan(in, &d) : NULL;
  if (!w || in->noperands < 1) return;
  const tpu_shape *s = &w->operands[0]->shape;
  const int64_t len = s->dims[d];
  const int minor = s->has_layout ? (int)s->minor_to_major[0] : s->rank - 1;
  const int64_t lanes = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
  const int64_t tiles = (s->dims[minor] + lanes - 1) / lanes;
  const int64_t bytes = tpu__value_bytes(be, in->operands[0], &in->operands[0]->shape);
  if (bytes <= 0 || tiles <= 0) return;
  const double row = (double)bytes / (double)len / (double)tiles; /* one scan row, one lane tile */
  double best = -1;
  int64_t bn = 0, bk = 0;
  /* On a chip of two TensorCores (v5p) the kernel gives each core its share: of one lane
   * tile, in at least two blocks of the scan's output rows (libtpu probes,
   * bench/fidelity/probes/scan_window.py: s32[100,8,128] along axis 0 in 2 blocks of 50
   * rows, 149-row inputs, though one pass fits; f32[64,16,128] in 2 of 32; s32[128,8,128]
   * along axis 2 in 2 of 64, cummin_128x8x128_ax2_rev_s32); of several, its lane tiles split
   * between the cores (s32[120,4,256] in one pass; the block scans of bf16[513,8,128] and
   * f32[1000,8,128]; but f32[48,8,384], 3 tiles, in 2 blocks of 24 rows, not modelled) */
  const int64_t least = be->chip->tensorcores > 1 && tiles == 1 ? 2 : 1;
  for (int64_t n = least; n <= len; n++) {
    const int64_t b = (len + n - 1) / n;
    if (n > 1 && (len + n - 2) / (n - 1) == b) continue; /* the same blocks as n - 1 */
    for (int64_t k = 1; k <= len; k++) {
      const int64_t part = (len + k - 1) / k;
      if (k > 1 && (len + k - 2) / (k - 1) == part) continue;
      const int64_t rows = b + part - 1 + b;
      if ((double)rows * row > (double)budget) continue;
      const double moved = (double)(n * k * rows);
      if (best < 0 || moved < best) best = moved, bn = n, bk = k;
      break; /* more parts of the window only move more rows for these blocks */
    }
  }
  if (best < 0) return; /* no step fits: left as one pass */
  const int64_t b = (len + bn - 1) / bn, part = (len + bk - 1) / bk;
  *fin = (double)(bn * bk * (b + part - 1)) / (double)len;
  *fout = (double)(bn * bk * b) / (double)len;
}
