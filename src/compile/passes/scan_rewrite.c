/* Scans in blocks (part of the simplify pass), as the XLA TPU compiler rewrites them.
 *
 * JAX lowers cumsum / cumprod / cummax for a TPU to a reduce-window whose window is the whole
 * scanned dimension, padded by its length less one below: output i reduces x[0..i]. The XLA
 * TPU compiler does not run that as a window per element. Its reduce-window rewriter (base
 * length 128) makes the scanned dimension last (a transpose), pads it with the init value
 * to a multiple of 128, views it as [..., K/128, 128], scans each block of 128 (a
 * reduce-window of 128), takes each block's last value, scans those the same way (again in
 * blocks when there are more than 128) and shifts them by one (an exclusive scan: pad one
 * init value in front, drop the last), broadcasts them back over their blocks and combines
 * them with the blocks' scans, then undoes the view, the padding and the transpose. Its
 * compiled programs show exactly those kernels (bench/fidelity/families cumsum_*, cumprod_*:
 * pads, slices, copies and a broadcast-add fusion of about 2,000 cycles each on v5e).
 *
 * tpusim makes the same rewrite, so the kernels, their bytes and their start costs follow,
 * and values follow the TPU's blocked order (ref/window.c runs each 128-wide scan in window
 * order; the reference interpreter on the unrewritten module keeps the plain window order).
 * A reverse scan (jnp.cumsum(x, reverse=True): the window padded by its length less one
 * above, output i reduces x[i..n-1]) is rewritten the same way mirrored, as the compiler
 * does (cumsum_1024_ax0_rev_bf16, all four generations: blocks of 128 scanned with pad
 * 0_127, each block's FIRST value scanned in reverse with pad 0_8, the carry the slice
 * [1:9] of that scan, so block b adds the blocks after it).
 * Only scans with an elementwise reducer (add, multiply, maximum, minimum...) of one input
 * are rewritten; others keep their reduce-window. */
#include <stdio.h>
#include <string.h>

#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

#define SCAN_BASE 128

/* The scanned dimension of a forward or (*rev = 1) reverse scan (see the header), or -1. */
static int scan_dim(const tpu_instr *in, int *rev) {
  if (in->op != TPU_OP_REDUCE_WINDOW || in->noperands != 2 || in->shape.dtype == TPU_TUPLE) return -1;
  const tpu_shape *s = &in->operands[0]->shape;
  if (in->nwindow != s->rank) return -1;
  int found = -1;
  for (int i = 0; i < in->nwindow; i++) {
    const tpu_window_dim *w = &in->window[i];
    if (w->stride != 1 || w->base_dilation > 1 || w->window_dilation > 1 || w->reversal) return -1;
    if (w->size == 1 && w->pad_lo == 0 && w->pad_hi == 0) continue;
    if (found >= 0 || s->dims[i] < 2 || w->size != s->dims[i]) return -1;
    if (w->pad_lo == s->dims[i] - 1 && w->pad_hi == 0)
      *rev = 0;
    else if (w->pad_lo == 0 && w->pad_hi == s->dims[i] - 1)
      *rev = 1;
    else
      return -1;
    found = i;
  }
  return found;
}

/* Is the reduce-window a compiled program's (its operand carries a tiled layout, T(...)):
 * already the compiler's own kernel, not rewritten again. */
static int placed(const tpu_instr *in) {
  const char *t = in->operands[0]->shape.layout_tail;
  return t && strstr(t, "T(") != NULL;
}

/* The reducer's elementwise op (its root, a binary op of its two parameters), or TPU_OP_COUNT. */
static tpu_opcode reducer_op(const tpu_comp *c) {
  if (!c || !c->root || c->nparams != 2) return TPU_OP_COUNT;
  const tpu_instr *r = c->root;
  if (tpu_op_class_of(r->op) != TPU_CLS_BINARY || r->noperands != 2) return TPU_OP_COUNT;
  if (r->operands[0]->op != TPU_OP_PARAMETER || r->operands[1]->op != TPU_OP_PARAMETER ||
      r->operands[0] == r->operands[1])
    return TPU_OP_COUNT;
  return r->op;
}

typedef struct {
  tpu_builder *b;
  tpu_comp *c;
  const tpu_instr *like; /* location and metadata for every new instruction */
} scan_ctx;

static tpu_status mk(scan_ctx *x, tpu_opcode op, const char *hint, const tpu_shape *s, tpu_instr *const *ops, int n,
                     tpu_instr **out) {
  return tpu_build_instr_like(x->b, x->c, x->like, op, hint, s, ops, n, out);
}

/* A window attribute: size 1 everywhere but dimension `at` of `rank` (size, pad_lo, pad_hi). */
static const char *window_at(char *buf, size_t n, int rank, int at, int64_t size, int64_t lo, int64_t hi) {
  char sz[TPU_MAX_RANK * 24], pd[TPU_MAX_RANK * 48];
  size_t a = 0, p = 0;
  for (int i = 0; i < rank; i++) {
    a += (size_t)snprintf(sz + a, sizeof sz - a, "%s%lld", i ? "x" : "", (long long)(i == at ? size : 1));
    p += (size_t)snprintf(pd + p, sizeof pd - p, "%s%lld_%lld", i ? "x" : "", (long long)(i == at ? lo : 0),
                          (long long)(i == at ? hi : 0));
  }
  size_t a0 = (size_t)snprintf(buf, n, "{size=");
  if (a0 < n) a0 += (size_t)snprintf(buf + a0, n - a0, "%.*s pad=", (int)sizeof sz, sz);
  if (a0 < n) snprintf(buf + a0, n - a0, "%.*s}", (int)sizeof pd, pd);
  return buf;
}

/* A slice attribute: whole dimensions but the last, [lo:hi] there. */
/* A slice attribute: whole dimensions but `at`, [lo:hi] there. */
static const char *slice_at(char *buf, size_t n, const tpu_shape *s, int at, int64_t lo, int64_t hi) {
  size_t a = (size_t)snprintf(buf, n, "{");
  for (int i = 0; i < s->rank && a < n; i++)
    a += (size_t)snprintf(buf + a, n - a, "%s[%lld:%lld]", i ? ", " : "", (long long)(i == at ? lo : 0),
                          (long long)(i == at ? hi : s->dims[i]));
  if (a < n) snprintf(buf + a, n - a, "}");
  return buf;
}

static const char *slice_text(char *buf, size_t n, const tpu_shape *s, int64_t lo, int64_t hi) {
  return slice_at(buf, n, s, s->rank - 1, lo, hi);
}

/* A padding attribute: none but lo_hi on dimension `at`. */
static const char *pad_at(char *buf, size_t n, int rank, int at, int64_t lo, int64_t hi) {
  size_t a = 0;
  buf[0] = 0;
  for (int i = 0; i < rank && a < n; i++)
    a += (size_t)snprintf(buf + a, n - a, "%s%lld_%lld", i ? "x" : "", (long long)(i == at ? lo : 0),
                          (long long)(i == at ? hi : 0));
  return buf;
}

static const char *pad_text(char *buf, size_t n, int rank, int64_t lo, int64_t hi) {
  return pad_at(buf, n, rank, rank - 1, lo, hi);
}

/* The inclusive forward (rev: reverse) scan of x along its last dimension: one reduce-window
 * when it is at most SCAN_BASE long, else blocks as in the header. */
/* rows_to > 0 (the outermost view of a scan along the lanes whose rows pad their tiles,
 * see padded_rows): the view and its inverse run on the padded rows, a slice kernel drops them
 * after the view, a pad kernel restores them before the inverse, and the padding to whole
 * blocks is a kernel of its own. */
static tpu_status scan_last(scan_ctx *x, tpu_instr *v, tpu_instr *init, const tpu_comp *red, tpu_opcode f, int rev,
                            int64_t rows_to, int top, tpu_instr **out) {
  char buf[TPU_MAX_RANK * 160];
  const tpu_shape *s = &v->shape;
  int r = s->rank;
  int64_t n = s->dims[r - 1];
  if (r < 2) rows_to = 0;
  const int64_t rows = r >= 2 ? s->dims[r - 2] : 1;
  if (n <= SCAN_BASE) {
    tpu_instr *ops[2] = {v, init};
    TPU_TRY(mk(x, TPU_OP_REDUCE_WINDOW, "scan.block", s, ops, 2, out));
    TPU_TRY(tpu_build_set_attr(x->b, *out, "window", window_at(buf, sizeof buf, r, r - 1, n, rev ? 0 : n - 1, rev ? n - 1 : 0)));
    return tpu_build_set_attr(x->b, *out, "to_apply", red->name);
  }
  int64_t k = (n + SCAN_BASE - 1) / SCAN_BASE * SCAN_BASE, nb = k / SCAN_BASE;
  int64_t d[TPU_MAX_RANK + 1];
  for (int i = 0; i < r; i++) d[i] = s->dims[i];
  tpu_instr *p = v;
  if (k != n) { /* pad with the init value to whole blocks (after the last: a reverse scan's
                 * earlier outputs combine it with init, which leaves them unchanged) */
    d[r - 1] = k;
    tpu_shape ps = tpu_build_shape(s->dtype, r, d);
    tpu_instr *ops[2] = {v, init};
    TPU_TRY(mk(x, TPU_OP_PAD, "scan.pad", &ps, ops, 2, &p));
    TPU_TRY(tpu_build_set_attr(x->b, p, "padding", pad_text(buf, sizeof buf, r, 0, k - n)));
    if (rows_to > 0) TPU_TRY(tpu_build_set_attr(x->b, p, "scan_kernel", "pad"));
  }
  if (rows_to > 0) { /* the padded rows, which the view's copy moves with the others */
    d[r - 2] = rows_to;
    tpu_shape ps = tpu_build_shape(s->dtype, r, d);
    tpu_instr *ops[2] = {p, init};
    TPU_TRY(mk(x, TPU_OP_PAD, "scan.rows", &ps, ops, 2, &p));
    TPU_TRY(tpu_build_set_attr(x->b, p, "padding", pad_at(buf, sizeof buf, r, r - 2, 0, rows_to - rows)));
  }
  /* [..., K] -> [..., K/128, 128] */
  d[r - 1] = nb;
  d[r] = SCAN_BASE;
  tpu_shape bs = tpu_build_shape(s->dtype, r + 1, d);
  tpu_instr *blocks, *inner;
  TPU_TRY(mk(x, TPU_OP_RESHAPE, "scan.blocks", &bs, &p, 1, &blocks));
  if (rows_to > 0) { /* the padded rows dropped by a kernel of their own */
    d[r - 2] = rows;
    bs = tpu_build_shape(s->dtype, r + 1, d);
    tpu_instr *vb = blocks;
    TPU_TRY(mk(x, TPU_OP_SLICE, "scan.rows", &bs, &vb, 1, &blocks));
    TPU_TRY(tpu_build_set_attr(x->b, blocks, "slice", slice_at(buf, sizeof buf, &vb->shape, r - 2, 0, rows)));
    TPU_TRY(tpu_build_set_attr(x->b, blocks, "scan_kernel", "slice"));
  }
  TPU_TRY(scan_last(x, blocks, init, red, f, rev, 0, 0, &inner));
  /* each block's total: its last value, a reverse scan's first, [..., K/128] */
  d[r] = 1;
  tpu_shape ls1 = tpu_build_shape(s->dtype, r + 1, d);
  tpu_instr *last1, *last;
  TPU_TRY(mk(x, TPU_OP_SLICE, "scan.last", &ls1, &inner, 1, &last1));
  TPU_TRY(tpu_build_set_attr(x->b, last1, "slice", slice_text(buf, sizeof buf, &bs, rev ? 0 : SCAN_BASE - 1, rev ? 1 : SCAN_BASE)));
  tpu_shape ls = tpu_build_shape(s->dtype, r, d);
  TPU_TRY(mk(x, TPU_OP_RESHAPE, "scan.last", &ls, &last1, 1, &last));
  /* their scan, shifted by one: block b adds the blocks before it (reverse: after it) */
  tpu_instr *tot, *shifted, *carry;
  TPU_TRY(scan_last(x, last, init, red, f, rev, 0, 0, &tot));
  d[r - 1] = nb + 1;
  tpu_shape ss = tpu_build_shape(s->dtype, r, d);
  tpu_instr *pops[2] = {tot, init};
  TPU_TRY(mk(x, TPU_OP_PAD, "scan.carry", &ss, pops, 2, &shifted));
  TPU_TRY(tpu_build_set_attr(x->b, shifted, "padding", pad_text(buf, sizeof buf, r, rev ? 0 : 1, rev ? 1 : 0)));
  TPU_TRY(mk(x, TPU_OP_SLICE, "scan.carry", &ls, &shifted, 1, &carry));
  TPU_TRY(tpu_build_set_attr(x->b, carry, "slice", slice_text(buf, sizeof buf, &ss, rev ? 1 : 0, rev ? nb + 1 : nb)));
  int64_t bd[TPU_MAX_RANK];
  for (int i = 0; i < r; i++) bd[i] = i;
  tpu_instr *bc, *sum, *flat;
  TPU_TRY(mk(x, TPU_OP_BROADCAST, "scan.carry", &bs, &carry, 1, &bc));
  TPU_TRY(tpu_build_set_attr(x->b, bc, "dimensions", tpu_dims_text(buf, sizeof buf, bd, r)));
  tpu_instr *aops[2] = {inner, bc};
  TPU_TRY(mk(x, f, "scan.sum", &bs, aops, 2, &sum));
  if (rows_to > 0) { /* the padded rows restored by a kernel of their own */
    int64_t pd[TPU_MAX_RANK + 1];
    for (int i = 0; i <= r; i++) pd[i] = bs.dims[i];
    pd[r - 2] = rows_to;
    tpu_shape ps = tpu_build_shape(s->dtype, r + 1, pd);
    tpu_instr *ops[2] = {sum, init};
    TPU_TRY(mk(x, TPU_OP_PAD, "scan.rows", &ps, ops, 2, &sum));
    TPU_TRY(tpu_build_set_attr(x->b, sum, "padding", pad_at(buf, sizeof buf, r + 1, r - 2, 0, rows_to - rows)));
    TPU_TRY(tpu_build_set_attr(x->b, sum, "scan_kernel", "pad"));
  }
  d[r - 1] = k;
  if (rows_to > 0) d[r - 2] = rows_to;
  tpu_shape fs = tpu_build_shape(s->dtype, r, d);
  TPU_TRY(mk(x, TPU_OP_RESHAPE, "scan.sum", &fs, &sum, 1, &flat));
  if (top && r >= 2 && rows_to <= 0) TPU_TRY(tpu_build_set_attr(x->b, flat, "scan_kernel", "copy"));
  if (k == n && rows_to <= 0) {
    *out = flat;
    return TPU_OK;
  }
  TPU_TRY(mk(x, TPU_OP_SLICE, "scan.sum", s, &flat, 1, out));
  size_t a = (size_t)snprintf(buf, sizeof buf, "{");
  for (int i = 0; i < r && a < sizeof buf; i++)
    a += (size_t)snprintf(buf + a, sizeof buf - a, "%s[0:%lld]", i ? ", " : "", (long long)s->dims[i]);
  if (a < sizeof buf) snprintf(buf + a, sizeof buf - a, "}");
  return tpu_build_set_attr(x->b, *out, "slice", buf);
}

/* The rows a scan along the last dimension of v is viewed on: where v (rank 2 or more) is
 * scanned in blocks and its rows (the second-minor dimension) do not fill whole memory
 * tiles, the XLA TPU compiler's copy into the blocks' view moves the padded tiles whole
 * (f32[4096,33]{0,1} bitcast to [5,8,32,128] and copied, 40 rows; bf16[1024,513]{0,1} to
 * [65,8,8,128], 520 rows; f32[33,1000] padded to [33,1024], then [5,8,8,128]), a `slice`
 * kernel drops the padded rows before the block scan and a `pad` kernel restores them before
 * the copy back (cummin_4096x33_ax0_f32's slice.4 and pad, cumsum_1024x513_ax0_bf16's
 * slice.4 and pad, cumprod_33x1000_ax1_f32's slice.6 and pad.1; its padding of the scan to
 * 1,024 is a `pad` kernel too: bench/fidelity/families/compiled, all four generations).
 * Returns the padded rows, or 0 where they fill their tiles. */
static int64_t padded_rows(const tpu_chip *chip, const tpu_shape *s) {
  if (!chip || s->rank < 2 || s->dims[s->rank - 1] <= SCAN_BASE) return 0;
  int64_t rows = s->dims[s->rank - 2];
  if (rows < 2) return 0;
  int64_t t = tpu__tile_rows(chip, s->dtype, rows);
  int64_t to = (rows + t - 1) / t * t;
  return to > rows ? to : 0;
}

static tpu_status rewrite_one(tpu_builder *b, tpu_comp *c, const tpu_chip *chip, tpu_instr *rw, int dim, int rev,
                              tpu_opcode f, int *done) {
  scan_ctx x = {b, c, rw};
  char buf[TPU_MAX_RANK * 24];
  tpu_instr *v = rw->operands[0], *init = rw->operands[1];
  int r = v->shape.rank;
  int64_t perm[TPU_MAX_RANK];
  for (int i = 0; i < r; i++) perm[i] = i;
  perm[dim] = r - 1;
  perm[r - 1] = dim;
  if (dim != r - 1) { /* the scanned dimension last */
    int64_t d[TPU_MAX_RANK];
    for (int i = 0; i < r; i++) d[i] = v->shape.dims[perm[i]];
    tpu_shape ts = tpu_build_shape(v->shape.dtype, r, d);
    TPU_TRY(mk(&x, TPU_OP_TRANSPOSE, "scan.transpose", &ts, &v, 1, &v));
    TPU_TRY(tpu_build_set_attr(b, v, "dimensions", tpu_dims_text(buf, sizeof buf, perm, r)));
  }
  tpu_instr *res;
  TPU_TRY(scan_last(&x, v, init, rw->to_apply, f, rev, padded_rows(chip, &v->shape), 1, &res));
  if (dim != r - 1) {
    tpu_shape os = tpu_build_shape(rw->shape.dtype, r, rw->shape.dims);
    TPU_TRY(mk(&x, TPU_OP_TRANSPOSE, "scan.transpose", &os, &res, 1, &res));
    TPU_TRY(tpu_build_set_attr(b, res, "dimensions", tpu_dims_text(buf, sizeof buf, perm, r)));
  }
  tpu_build_replace_uses(c, rw, res);
  *done = 1;
  return TPU_OK;
}

/* The lanes of a vector register: a dimension this long or longer fills them. */
#define SCAN_LANES 128

/* The order of the dimensions the XLA TPU compiler's kernel of a scan of at most SCAN_BASE
 * (rank 3 or more) lays its operand out in, row-major: the scanned dimension most major, in
 * the lanes the last other dimension that fills them (at least SCAN_LANES long), else the
 * last other one, in the sublanes the last of the rest, the others between in their order.
 * A scan along the lanes stays there, no relayout, where no other dimension fills them.
 * Returns 1 and fills perm (kernel dimension i is operand dimension perm[i]) where that
 * order is not the operand's own. Read from the compiler's programs (bench/fidelity/families/
 * compiled, all four generations, and libtpu probes on v5e, bench/fidelity/probes/
 * scan_window.py): s32[128,8,128] along axis 2 runs in {0,1,2} (128 in the lanes), as do
 * [128,16|32|64,128], [128,8,100] and [300,20,64] along axis 2; [158,129,33] along axis 2 in
 * {1,0,2}; f32[126,80,65] along axis 1 in {2,0,1} (65 in the lanes, though 126 would pad
 * less); s32[128,8,64] along axis 1 in {0,2,1}; [100,8,128], [100,24,100], [65,65,126],
 * [64,64,128] and [64,100,64] along axis 2 scan in the lanes with no copy. */
static int major_order(const tpu_shape *s, int dim, int64_t *perm) {
  int r = s->rank, lane = -1, sub = -1;
  for (int i = r - 1; i >= 0 && lane < 0; i--)
    if (i != dim && s->dims[i] >= SCAN_LANES) lane = i;
  if (lane < 0 && dim == r - 1) return 0;
  for (int i = r - 1; i >= 0 && lane < 0; i--)
    if (i != dim) lane = i;
  for (int i = r - 1; i >= 0 && sub < 0; i--)
    if (i != dim && i != lane) sub = i;
  int k = 0;
  perm[k++] = dim;
  for (int i = 0; i < r; i++)
    if (i != dim && i != lane && i != sub) perm[k++] = i;
  perm[k++] = sub;
  perm[k++] = lane;
  for (int i = 0; i < r; i++)
    if (perm[i] != i) return 1;
  return 0;
}

/* A scan of at most SCAN_BASE along one of the two minor dimensions (the tile) of an array
 * of rank 3 or more: the compiler runs its window along a major dimension, in major_order's
 * layout, so its kernel reads a relayout of the operand and a relayout writes its result back
 * (cummin_158x129x33_ax2_s32, cummin_128x8x128_ax2_rev_s32, cumsum_126x80x65_ax1_f32: a
 * copy, the reduce-window's fusion, a copy, on every generation). Here a transpose into that
 * order, the scan along its first dimension, a transpose back. */
/* The scan of v (at most SCAN_BASE along dim, rank 3 or more) in major_order's order: a
 * transpose into it, the window along its first dimension, a transpose back; the window
 * alone where that order is v's own. */
static tpu_status scan_major(scan_ctx *x, tpu_instr *v, tpu_instr *init, const tpu_comp *red, int dim, int rev,
                             tpu_instr **out) {
  char buf[TPU_MAX_RANK * 48];
  int r = v->shape.rank;
  int64_t n = v->shape.dims[dim], perm[TPU_MAX_RANK] = {0}, inv[TPU_MAX_RANK] = {0}, d[TPU_MAX_RANK] = {0};
  tpu_instr *t = v, *sc;
  int moved = major_order(&v->shape, dim, perm);
  if (!moved)
    for (int i = 0; i < r; i++) perm[i] = i;
  for (int i = 0; i < r; i++) inv[perm[i]] = i, d[i] = v->shape.dims[perm[i]];
  tpu_shape ts = tpu_build_shape(v->shape.dtype, r, d);
  if (moved) {
    TPU_TRY(mk(x, TPU_OP_TRANSPOSE, "scan.major", &ts, &v, 1, &t));
    TPU_TRY(tpu_build_set_attr(x->b, t, "dimensions", tpu_dims_text(buf, sizeof buf, perm, r)));
  }
  tpu_instr *ops[2] = {t, init};
  const int at = moved ? 0 : dim;
  TPU_TRY(mk(x, TPU_OP_REDUCE_WINDOW, "scan.block", &ts, ops, 2, &sc));
  TPU_TRY(tpu_build_set_attr(x->b, sc, "window", window_at(buf, sizeof buf, r, at, n, rev ? 0 : n - 1, rev ? n - 1 : 0)));
  TPU_TRY(tpu_build_set_attr(x->b, sc, "to_apply", red->name));
  if (!moved) {
    *out = sc;
    return TPU_OK;
  }
  tpu_shape os = tpu_build_shape(v->shape.dtype, r, v->shape.dims);
  TPU_TRY(mk(x, TPU_OP_TRANSPOSE, "scan.major", &os, &sc, 1, out));
  return tpu_build_set_attr(x->b, *out, "dimensions", tpu_dims_text(buf, sizeof buf, inv, r));
}

static tpu_status rewrite_major(tpu_builder *b, tpu_comp *c, tpu_instr *rw, int dim, int rev, int *done) {
  scan_ctx x = {b, c, rw};
  int64_t perm[TPU_MAX_RANK];
  if (!major_order(&rw->operands[0]->shape, dim, perm)) return TPU_OK;
  tpu_instr *res;
  TPU_TRY(scan_major(&x, rw->operands[0], rw->operands[1], rw->to_apply, dim, rev, &res));
  tpu_build_replace_uses(c, rw, res);
  *done = 1;
  return TPU_OK;
}

/* A vector's scan of at most SCAN_BASE (rank 1, one window): the XLA TPU compiler runs it down
 * a column, not along the lanes. It views [N] as [N,1]{0,1} (a bitcast), copies that into
 * [N,1]{1,0} (N rows of one lane), slides the window down the rows and relays the column back
 * into [N] with a `reduce` over its unit dimension: a copy, the unestimated reduce-window and
 * that reduce on every generation, for f32/s32/bf16, add/multiply/minimum/maximum, N from 16
 * to 128, forward or reverse (libtpu probes off the corpus, bench/fidelity/probes/lane_scan.py,
 * data/lane_scan.jsonl; cumprod_128_ax0_rev_f32's copy.1, reduce-window.4 and reduce). A scan
 * along the lanes of a matrix ([8,100], [33,64], [4,128], [200,50] along axis 1) stays one
 * reduce-window. Here a reshape into the column and one back, each a kernel of its own (the
 * lanes move), around the window along the rows; the values are the window's. */
static tpu_status rewrite_column(tpu_builder *b, tpu_comp *c, tpu_instr *rw, int rev, int *done) {
  scan_ctx x = {b, c, rw};
  char buf[TPU_MAX_RANK * 160];
  tpu_instr *v = rw->operands[0], *col, *sc, *res;
  int64_t n = v->shape.dims[0], d[2] = {n, 1};
  tpu_shape cs = tpu_build_shape(v->shape.dtype, 2, d);
  TPU_TRY(mk(&x, TPU_OP_RESHAPE, "scan.column", &cs, &v, 1, &col));
  tpu_instr *ops[2] = {col, rw->operands[1]};
  TPU_TRY(mk(&x, TPU_OP_REDUCE_WINDOW, "scan.block", &cs, ops, 2, &sc));
  TPU_TRY(tpu_build_set_attr(b, sc, "window", window_at(buf, sizeof buf, 2, 0, n, rev ? 0 : n - 1, rev ? n - 1 : 0)));
  TPU_TRY(tpu_build_set_attr(b, sc, "to_apply", rw->to_apply->name));
  tpu_shape os = tpu_build_shape(rw->shape.dtype, 1, rw->shape.dims);
  TPU_TRY(mk(&x, TPU_OP_RESHAPE, "scan.column", &os, &sc, 1, &res));
  tpu_build_replace_uses(c, rw, res);
  *done = 1;
  return TPU_OK;
}

/* A scan longer than SCAN_BASE along the rows (the second-minor dimension) of an array whose
 * last dimension stays in the lanes: the XLA TPU compiler keeps the lanes and blocks the rows
 * instead of transposing the scanned dimension last. f32[1025,1000] scanned along axis 0 is
 * padded to 1,152 rows, viewed as [9,128,1000], each block of 128 rows scanned by a kernel
 * writing the rows major ([1000,9,128]{0,1,2}), each block's last row scanned along the 9
 * blocks, broadcast back and combined, relaid out row-major and sliced to 1,025 rows
 * (cumprod_1025x1000_ax0_f32, cummax_1024x1024_ax0_f32, cumsum_1000x1024_ax0_bf16,
 * bench/fidelity/families/compiled, all four generations: no kernel moves the lanes). Here
 * the same blocks: the block scan through scan_major (its transposes keep the lanes), the
 * carries as scan_last's, along the blocks' dimension. A reverse scan mirrored likewise. */
static tpu_status scan_rows(scan_ctx *x, tpu_instr *v, tpu_instr *init, const tpu_comp *red, tpu_opcode f, int rev,
                            tpu_instr **out) {
  char buf[TPU_MAX_RANK * 160];
  const tpu_shape *s = &v->shape;
  int r = s->rank, q = r - 2;
  int64_t n = s->dims[q];
  if (n <= SCAN_BASE) {
    if (r >= 3) return scan_major(x, v, init, red, q, rev, out);
    tpu_instr *ops[2] = {v, init};
    TPU_TRY(mk(x, TPU_OP_REDUCE_WINDOW, "scan.block", s, ops, 2, out));
    TPU_TRY(tpu_build_set_attr(x->b, *out, "window", window_at(buf, sizeof buf, r, q, n, rev ? 0 : n - 1, rev ? n - 1 : 0)));
    return tpu_build_set_attr(x->b, *out, "to_apply", red->name);
  }
  int64_t k = (n + SCAN_BASE - 1) / SCAN_BASE * SCAN_BASE, nb = k / SCAN_BASE;
  int64_t d[TPU_MAX_RANK + 1];
  for (int i = 0; i < r; i++) d[i] = s->dims[i];
  tpu_instr *p = v;
  if (k != n) { /* whole blocks of rows, padded with the init value after the last */
    d[q] = k;
    tpu_shape ps = tpu_build_shape(s->dtype, r, d);
    tpu_instr *ops[2] = {v, init};
    TPU_TRY(mk(x, TPU_OP_PAD, "scan.pad", &ps, ops, 2, &p));
    TPU_TRY(tpu_build_set_attr(x->b, p, "padding", pad_at(buf, sizeof buf, r, q, 0, k - n)));
    TPU_TRY(tpu_build_set_attr(x->b, p, "scan_kernel", "pad"));
  }
  /* [..., K, C] -> [..., K/128, 128, C] */
  d[q] = nb;
  d[q + 1] = SCAN_BASE;
  d[q + 2] = s->dims[r - 1];
  tpu_shape bs = tpu_build_shape(s->dtype, r + 1, d);
  tpu_instr *blocks, *inner;
  TPU_TRY(mk(x, TPU_OP_RESHAPE, "scan.blocks", &bs, &p, 1, &blocks));
  TPU_TRY(scan_major(x, blocks, init, red, q + 1, rev, &inner));
  /* each block's total: its last row (a reverse scan's first), [..., K/128, C] */
  d[q + 1] = 1;
  tpu_shape ls1 = tpu_build_shape(s->dtype, r + 1, d);
  tpu_instr *last1, *last;
  TPU_TRY(mk(x, TPU_OP_SLICE, "scan.last", &ls1, &inner, 1, &last1));
  TPU_TRY(tpu_build_set_attr(x->b, last1, "slice", slice_at(buf, sizeof buf, &bs, q + 1, rev ? 0 : SCAN_BASE - 1, rev ? 1 : SCAN_BASE)));
  d[q + 1] = s->dims[r - 1];
  tpu_shape ls = tpu_build_shape(s->dtype, r, d);
  TPU_TRY(mk(x, TPU_OP_RESHAPE, "scan.last", &ls, &last1, 1, &last));
  /* their scan along the blocks, shifted by one */
  tpu_instr *tot, *shifted, *carry;
  TPU_TRY(scan_rows(x, last, init, red, f, rev, &tot));
  d[q] = nb + 1;
  tpu_shape ss = tpu_build_shape(s->dtype, r, d);
  tpu_instr *pops[2] = {tot, init};
  TPU_TRY(mk(x, TPU_OP_PAD, "scan.carry", &ss, pops, 2, &shifted));
  TPU_TRY(tpu_build_set_attr(x->b, shifted, "padding", pad_at(buf, sizeof buf, r, q, rev ? 0 : 1, rev ? 1 : 0)));
  TPU_TRY(mk(x, TPU_OP_SLICE, "scan.carry", &ls, &shifted, 1, &carry));
  TPU_TRY(tpu_build_set_attr(x->b, carry, "slice", slice_at(buf, sizeof buf, &ss, q, rev ? 1 : 0, rev ? nb + 1 : nb)));
  int64_t bd[TPU_MAX_RANK];
  for (int i = 0; i <= q; i++) bd[i] = i;
  bd[q + 1] = q + 2; /* the lanes' dimension; the rows within a block broadcast */
  tpu_instr *bc, *sum, *flat;
  TPU_TRY(mk(x, TPU_OP_BROADCAST, "scan.carry", &bs, &carry, 1, &bc));
  TPU_TRY(tpu_build_set_attr(x->b, bc, "dimensions", tpu_dims_text(buf, sizeof buf, bd, r)));
  tpu_instr *aops[2] = {inner, bc};
  TPU_TRY(mk(x, f, "scan.sum", &bs, aops, 2, &sum));
  for (int i = 0; i < r; i++) d[i] = s->dims[i];
  d[q] = k;
  tpu_shape fs = tpu_build_shape(s->dtype, r, d);
  TPU_TRY(mk(x, TPU_OP_RESHAPE, "scan.sum", &fs, &sum, 1, &flat));
  if (k == n) {
    *out = flat;
    return TPU_OK;
  }
  TPU_TRY(mk(x, TPU_OP_SLICE, "scan.sum", s, &flat, 1, out));
  TPU_TRY(tpu_build_set_attr(x->b, *out, "scan_kernel", "slice"));
  return tpu_build_set_attr(x->b, *out, "slice", slice_at(buf, sizeof buf, &fs, q, 0, n));
}

/* Does a scan along dimension `dim` of v run as rows (scan_rows): dim the second-minor, and v
 * not a parameter that pads least with another dimension in the lanes (the compiler's
 * f32[4096,33] arrives {0,1}, the scanned dimension in the lanes: cummin_4096x33_ax0_f32)? */
static int rows_scan(const tpu_chip *chip, const tpu_instr *v, int dim) {
  const tpu_shape *s = &v->shape;
  if (!chip || s->rank < 2 || dim != s->rank - 2) return 0;
  if (s->has_layout && (s->minor_to_major[0] != s->rank - 1 || s->minor_to_major[1] != s->rank - 2)) return 0;
  int second, minor;
  if (v->op == TPU_OP_PARAMETER && tpu__least_tiling(chip, s, &second, &minor) < tpu__tiled_as(chip, s, s->rank - 2, s->rank - 1))
    return minor == s->rank - 1;
  return 1;
}

tpu_status tpu__scan_rewrite(tpu_builder *b, tpu_module *m, const tpu_chip *chip, int *changed) {
  for (int ci = 0; ci < m->ncomps; ci++) {
    tpu_comp *c = m->comps[ci];
    int any = 0, n = c->ninstrs;
    for (int i = 0; i < n; i++) {
      tpu_instr *in = c->instrs[i];
      int rev = 0, dim = scan_dim(in, &rev);
      if (dim < 0 || placed(in)) continue;
      tpu_opcode f = reducer_op(in->to_apply);
      if (f == TPU_OP_COUNT || in->shape.dtype != in->operands[0]->shape.dtype) continue;
      int r = in->shape.rank;
      if (in->operands[0]->shape.dims[dim] > SCAN_BASE && rows_scan(chip, in->operands[0], dim)) {
        scan_ctx x = {b, c, in};
        tpu_instr *res;
        TPU_TRY(scan_rows(&x, in->operands[0], in->operands[1], in->to_apply, f, rev, &res));
        tpu_build_replace_uses(c, in, res);
        any = 1;
      } else if (in->operands[0]->shape.dims[dim] > SCAN_BASE)
        TPU_TRY(rewrite_one(b, c, chip, in, dim, rev, f, &any));
      else if (r >= 3)
        TPU_TRY(rewrite_major(b, c, in, dim, rev, &any));
      else if (r == 1 && chip)
        TPU_TRY(rewrite_column(b, c, in, rev, &any));
    }
    if (any) {
      TPU_TRY(tpu_build_finish(b, c));
      if (tpu_build_remove_dead(b, c) < 0) return b->d->status;
      *changed = 1;
    }
  }
  return TPU_OK;
}
