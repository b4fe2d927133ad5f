/* Reference kernels: reduce-window and select-and-scatter (windows with stride, padding, dilation). */
#include <string.h>

#include "base/alloc.h"
#include "ref/elementwise_int.h"
#include "ref/reduce_int.h"

/* Window geometry of one dimension, with the output size XLA's shape rule gives: the base
 * (operand) is dilated to (n-1)*base_dilation+1 elements, padded by pad_lo/pad_hi (either
 * may be negative), and a window of (size-1)*window_dilation+1 elements slides by stride. */
typedef struct {
  int64_t n;        /* operand size */
  int64_t out;      /* number of window positions */
  tpu_window_dim w;
} wdim;

static int window_dims(const tpu_instr *in, const tpu_tensor *a, wdim *wd) {
  if (in->nwindow != a->rank) return 0;
  for (int k = 0; k < a->rank; k++) {
    const tpu_window_dim *w = &in->window[k];
    if (w->size <= 0 || w->stride <= 0 || w->base_dilation <= 0 || w->window_dilation <= 0) return 0;
    int64_t n = a->dims[k];
    int64_t dil = n ? (n - 1) * w->base_dilation + 1 : 0;
    int64_t padded = dil + w->pad_lo + w->pad_hi;
    int64_t eff = (w->size - 1) * w->window_dilation + 1;
    wd[k].n = n;
    wd[k].out = padded >= eff ? (padded - eff) / w->stride + 1 : 0;
    wd[k].w = *w;
  }
  return 1;
}

/* Operand index of window element `wi` at window position `oi` in one dimension, or -1 when
 * it falls on padding or on a hole between dilated base elements. */
static inline int64_t window_source(const wdim *wd, int64_t oi, int64_t wi) {
  int64_t p = oi * wd->w.stride - wd->w.pad_lo + wi * wd->w.window_dilation;
  if (p < 0) return -1;
  if (wd->w.base_dilation > 1) {
    if (p % wd->w.base_dilation) return -1;
    p /= wd->w.base_dilation;
  }
  return p < wd->n ? p : -1;
}

/* Operand offset of one window element, or -1 for padding. */
static int64_t window_offset(const wdim *wd, int rank, const int64_t *strides, const int64_t *oidx, const int64_t *widx) {
  int64_t off = 0;
  for (int k = 0; k < rank; k++) {
    int64_t p = window_source(&wd[k], oidx[k], widx[k]);
    if (p < 0) return -1;
    off += p * strides[k];
  }
  return off;
}

/* Is this reduce-window a forward scan (jnp.cumsum / cummax as JAX lowers them for a TPU):
 * one dimension whose window is the whole dimension, padded N-1 below and not above, unit
 * stride and no dilation, every other dimension a window of one? *dim gets that dimension.
 * Then output i's window is N-1-i init values followed by x[0..i]: applied in window order
 * that is a running f(out[i-1], x[i]) once f(init, init) is init, in linear time and with
 * the same bits. A reverse scan (padded N-1 above and not below: *rev = 1) is one too; its
 * window order is not a running one, so only its blocked form (scan_line) takes it. */
static int forward_scan(const wdim *wd, int rank, int *dim, int *rev) {
  int found = -1;
  for (int k = 0; k < rank; k++) {
    const tpu_window_dim *w = &wd[k].w;
    if (w->stride != 1 || w->base_dilation != 1 || w->window_dilation != 1) return 0;
    if (w->size == 1 && w->pad_lo == 0 && w->pad_hi == 0) continue;
    if (found >= 0 || wd[k].n < 2 || w->size != wd[k].n) return 0;
    if (w->pad_lo == wd[k].n - 1 && w->pad_hi == 0)
      *rev = 0;
    else if (w->pad_lo == 0 && w->pad_hi == wd[k].n - 1)
      *rev = 1;
    else
      return 0;
    found = k;
  }
  *dim = found;
  return found >= 0;
}

/* One line of a reverse scan of at most a block, in window order: y[i*st] reduces x[i..n-1]
 * from init, x[i] first (the padding after it, init values, left out as f(acc, init) is
 * acc); quadratic in n, for n up to a block. */
static void rev_window(tpu_opcode f, tpu_dtype t, size_t es, const char *init, const char *x, char *y, int64_t n,
                       int64_t st) {
  char acc[16];
  for (int64_t i = 0; i < n; i++) {
    memcpy(acc, init, es);
    for (int64_t q = i; q < n; q++) tpu__ref_apply_binary(f, t, acc, x + (size_t)(q * st) * es);
    memcpy(y + (size_t)(i * st) * es, acc, es);
  }
}

/* One line of a forward scan: y[i*st] = f(y[(i-1)*st], x[i*st]) from init, in window order;
 * with block > 0 and n > block, in the XLA TPU compiler's order instead (its reduce-window
 * rewriter, base length 128): the line padded with init to whole blocks, each block scanned
 * on its own, the blocks' last values scanned the same way (recursively), and each block
 * then offset by the scan of the blocks before it: y = inner + carry, block 0's carry init. */
static void scan_line(tpu_opcode f, tpu_dtype t, size_t es, const char *init, const char *x, char *y, int64_t n,
                      int64_t st, int64_t block, int rev, char *tmp) {
  char acc[16];
  if (rev && (block <= 0 || n <= block)) {
    rev_window(f, t, es, init, x, y, n, st);
    return;
  }
  if (block <= 0 || n <= block) {
    memcpy(acc, init, es);
    for (int64_t i = 0; i < n; i++) {
      tpu__ref_apply_binary(f, t, acc, x + (size_t)(i * st) * es);
      memcpy(y + (size_t)(i * st) * es, acc, es);
    }
    return;
  }
  int64_t nb = (n + block - 1) / block;
  char *tot = tmp, *carry = tmp + (size_t)nb * es, *rest = tmp + 2 * (size_t)nb * es;
  for (int64_t b = 0; b < nb && rev; b++) { /* each block's reverse scan; its total is its first value */
    int64_t lo = b * block, len = n - lo < block ? n - lo : block;
    rev_window(f, t, es, init, x + (size_t)(lo * st) * es, y + (size_t)(lo * st) * es, len, st);
    memcpy(tot + (size_t)b * es, y + (size_t)(lo * st) * es, es);
  }
  for (int64_t b = 0; b < nb && !rev; b++) {
    memcpy(acc, init, es);
    for (int64_t j = 0; j < block; j++) {
      int64_t i = b * block + j;
      tpu__ref_apply_binary(f, t, acc, i < n ? x + (size_t)(i * st) * es : init);
      if (i < n) memcpy(y + (size_t)(i * st) * es, acc, es);
    }
    memcpy(tot + (size_t)b * es, acc, es);
  }
  scan_line(f, t, es, init, tot, carry, nb, 1, block, rev, rest);
  for (int64_t b = 0; b < nb; b++) {
    /* the blocks before b (reverse: after it) */
    const char *c = rev ? (b + 1 < nb ? carry + (size_t)(b + 1) * es : init) : b ? carry + (size_t)(b - 1) * es : init;
    for (int64_t j = 0; j < block && b * block + j < n; j++) {
      char *yi = y + (size_t)((b * block + j) * st) * es;
      memcpy(acc, yi, es);
      tpu__ref_apply_binary(f, t, acc, c);
      memcpy(yi, acc, es);
    }
  }
}

/* The scan of forward_scan() along `dim` (rev: a reverse one), every line of it; tmp holds
 * 3n elements. */
static void run_forward_scan(tpu_opcode f, const tpu_tensor *a, const tpu_tensor *init, tpu_tensor *o, int dim,
                             int64_t block, int rev, char *tmp) {
  size_t es = tpu_dtype_size(a->dtype);
  int64_t inner = 1, outer = 1, n = a->dims[dim];
  for (int k = dim + 1; k < a->rank; k++) inner *= a->dims[k];
  for (int k = 0; k < dim; k++) outer *= a->dims[k];
  for (int64_t q = 0; q < outer; q++)
    for (int64_t r = 0; r < inner; r++) {
      size_t off = ((size_t)(q * n) * (size_t)inner + (size_t)r) * es;
      scan_line(f, a->dtype, es, init->data, (const char *)a->data + off, (char *)o->data + off, n, inner, block, rev,
                tmp);
    }
}

/* ---- A simple reducer's reduce-window, a row at a time ----
 * With one operand and a reducer that is one binary op (tpu__ref_simple_reducer), each
 * output element is acc = f(acc, x) over its window in row-major window order. The output
 * is taken a row at a time: the last dimension q with a window other than one plain element
 * (size 1, stride 1, no padding, no dilation), times the dimensions after it (whose windows
 * are all plain, so a row of them is L contiguous elements). For every window position in
 * row-major order, the row's window elements are gathered (or read in place when they are
 * contiguous) and applied to the whole row in one vector op; each output element still
 * sees its window elements in row-major order, one f at a time, with the elementwise
 * kernels' arithmetic: the same bits as the element-at-a-time loop, without its per-element
 * index arithmetic and dispatch. */

static int plain_window(const wdim *wd) {
  const tpu_window_dim *w = &wd->w;
  return w->size == 1 && w->stride == 1 && w->pad_lo == 0 && w->pad_hi == 0 && w->base_dilation == 1 &&
         w->window_dilation == 1;
}

/* acc[i] = f(acc[i], b[i * sb]) for i < n (sb: 1, or 0 for one value): f32 in place by the
 * block kernel when it defines f, other types through the elementwise kernels' blocks. */
static void apply_row(tpu_opcode f, tpu_dtype t, int vec, char *acc, const char *b, int sb, int64_t n) {
  if (vec) {
    float *a = (float *)(void *)acc;
    const float *x = (const float *)(const void *)b;
    for (int64_t i = 0; i < n; i += TPU_EW_BLOCK) {
      int m = (int)(n - i < TPU_EW_BLOCK ? n - i : TPU_EW_BLOCK);
      tpu__ew_f32_binary_to(f, a + i, a + i, 1, 1, sb ? x + i : x, sb, 1, m);
    }
    return;
  }
  tpu__ref_apply_binary_n(f, t, acc, b, sb, n);
}

/* dst[0 .. n) = the es-byte value v: the first copy, then doubling copies (a per-element
 * memcpy of a runtime size is a call each: 28 % of an average pool's run). */
static void fill_value(char *dst, const char *v, size_t es, int64_t n) {
  if (n <= 0) return;
  memcpy(dst, v, es);
  size_t have = es, total = (size_t)n * es;
  while (have < total) {
    size_t k = have < total - have ? have : total - have;
    memcpy(dst + have, dst, k);
    have += k;
  }
}

static tpu_status window_rows(tpu_opcode f, const tpu_tensor *a, const tpu_tensor *init, tpu_tensor *o, const wdim *wd,
                              tpu_loc loc, tpu_diag *d) {
  int rank = a->rank, t = rank;
  size_t es = tpu_dtype_size(a->dtype);
  int vec = a->dtype == TPU_F32 && tpu__ew_f32_binary(f, NULL, NULL, 0);
  const char *iv = init->data, *x = a->data;
  char *out = o->data;
  while (t > 0 && plain_window(&wd[t - 1])) t--;
  if (t == 0) { /* one window position: f(init, x) */
    int64_t n = tpu_tensor_numel(a);
    fill_value(out, iv, es, n);
    apply_row(f, a->dtype, vec, out, x, 1, n);
    return TPU_OK;
  }
  int q = t - 1;
  int64_t L = 1, astr[TPU_MAX_RANK], odims[TPU_MAX_RANK], wsize[TPU_MAX_RANK], tabat[TPU_MAX_RANK + 1];
  for (int k = t; k < rank; k++) L *= a->dims[k];
  tpu__ref_strides(rank, a->dims, astr);
  tabat[0] = 0;
  for (int k = 0; k <= q; k++) {
    odims[k] = wd[k].out;
    wsize[k] = wd[k].w.size;
    tabat[k + 1] = tabat[k] + wd[k].out * wd[k].w.size;
  }
  int64_t R = wd[q].out * L, nq = wd[q].out, sq = wd[q].w.size;
  /* tab[tabat[k] + oi * size + wi]: operand index of window element wi at position oi of
   * dimension k, or -1 (padding, hole); run[wi]: the row's first operand index of dimension
   * q when its elements are consecutive and in range, else -1. */
  int64_t *tab = tpu_malloc(sizeof *tab * (size_t)(tabat[q + 1] + sq));
  char *buf = tpu_malloc((size_t)R * es + 1);
  if (!tab || !buf) {
    tpu_free(tab);
    tpu_free(buf);
    return TPU_FAIL(d, TPU_ERR_NOMEM, loc, "out of memory");
  }
  int64_t *run = tab + tabat[q + 1];
  for (int k = 0; k <= q; k++)
    for (int64_t oi = 0; oi < wd[k].out; oi++)
      for (int64_t wi = 0; wi < wd[k].w.size; wi++) tab[tabat[k] + oi * wd[k].w.size + wi] = window_source(&wd[k], oi, wi);
  for (int64_t wi = 0; wi < sq; wi++) {
    int64_t p0 = tab[tabat[q] + wi];
    run[wi] = p0;
    for (int64_t oi = 0; oi < nq && run[wi] >= 0; oi++)
      if (tab[tabat[q] + oi * sq + wi] != p0 + oi) run[wi] = -1;
  }
  int64_t oidx[TPU_MAX_RANK] = {0};
  char *orow = out;
  for (int64_t r = 0, nrows = tpu_tensor_numel(o) / (R ? R : 1); r < nrows; r++) {
    fill_value(orow, iv, es, R);
    int64_t widx[TPU_MAX_RANK] = {0};
    do {
      int64_t base = 0;
      int pad = 0;
      for (int k = 0; k < q && !pad; k++) {
        int64_t p = tab[tabat[k] + oidx[k] * wsize[k] + widx[k]];
        if (p < 0) pad = 1;
        base += p * astr[k];
      }
      if (pad) {
        apply_row(f, a->dtype, vec, orow, iv, 0, R);
        continue;
      }
      const char *src;
      if (run[widx[q]] >= 0) {
        src = x + (size_t)(base + run[widx[q]] * astr[q]) * es;
      } else {
        for (int64_t oi = 0; oi < nq; oi++) {
          int64_t p = tab[tabat[q] + oi * sq + widx[q]];
          char *dst = buf + (size_t)(oi * L) * es;
          if (p >= 0)
            memcpy(dst, x + (size_t)(base + p * astr[q]) * es, (size_t)L * es);
          else
            fill_value(dst, iv, es, L);
        }
        src = buf;
      }
      apply_row(f, a->dtype, vec, orow, src, 1, R);
    } while (tpu__next_index(q + 1, wsize, widx));
    orow += (size_t)R * es;
    tpu__next_index(q, odims, oidx);
  }
  tpu_free(tab);
  tpu_free(buf);
  return TPU_OK;
}

/* ---- reduce-window ----
 * Each output element starts at its init value and takes the window's elements in
 * row-major window order, acc = f(acc, x). Elements on padding or on base-dilation holes
 * are the init value (XLA's definition: ReduceWindow pads with the init value), so they
 * are applied too; for an init value that is the identity of f (as XLA requires) that is
 * the same as skipping them. */
tpu_status tpu__ref_reduce_window(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                                  tpu_diag *d) {
  int nops = in->noperands / 2;
  if (nops < 1 || in->noperands != 2 * nops)
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "reduce-window needs N operands and N init values");
  const tpu_tensor *a0 = args[0];
  int rank = a0->rank;
  wdim wd[TPU_MAX_RANK];
  if (!window_dims(in, a0, wd))
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "reduce-window window does not match the operand rank %d", rank);
  int64_t odims[TPU_MAX_RANK], wsize[TPU_MAX_RANK], astr[TPU_MAX_RANK];
  for (int k = 0; k < rank; k++) odims[k] = wd[k].out, wsize[k] = wd[k].w.size;
  tpu__ref_strides(rank, a0->dims, astr);

  TPU_TRY(tpu__ref_alloc_shape(out, &in->shape, d));
  if ((out->dtype == TPU_TUPLE ? out->ntuple : 1) != nops) {
    tpu_tensor_free(out);
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "reduce-window result does not have %d arrays", nops);
  }
  for (int i = 0; i < nops; i++) {
    const tpu_tensor *a = args[i], *init = args[nops + i];
    const tpu_tensor *o = out->dtype == TPU_TUPLE ? &out->elems[i] : out;
    int same = a->rank == rank && o->rank == rank && o->dtype == a->dtype && init->dtype == a->dtype &&
               tpu_tensor_numel(init) == 1;
    for (int k = 0; same && k < rank; k++) same = a->dims[k] == a0->dims[k] && o->dims[k] == odims[k];
    if (!same) {
      tpu_tensor_free(out);
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "reduce-window operand %d does not match the result shape", i);
    }
  }
  int64_t on = tpu_tensor_numel(out->dtype == TPU_TUPLE ? &out->elems[0] : out);
  if (on == 0) return TPU_OK;

  tpu_opcode simple = nops == 1 ? tpu__ref_simple_reducer(in->to_apply) : TPU_OP_COUNT;
  int scan_dim, rev = 0;
  /* a reverse scan takes the blocked order only where the backend has blocks and it is longer
   * than one (the XLA TPU compiler's mirrored blocks, compile/passes/scan_rewrite.c); else
   * the plain window order below */
  if (simple != TPU_OP_COUNT && tpu_dtype_size(a0->dtype) <= 16 && forward_scan(wd, rank, &scan_dim, &rev) &&
      (!rev || (tpu__ref_scan_block(ip) > 0 && a0->dims[scan_dim] > tpu__ref_scan_block(ip)))) {
    char twice[16];
    size_t es = tpu_dtype_size(a0->dtype);
    memcpy(twice, args[1]->data, es);
    tpu__ref_apply_binary(simple, a0->dtype, twice, args[1]->data);
    char *tmp = tpu_malloc(3 * ((size_t)a0->dims[scan_dim] + 1) * es);
    if (!tmp) {
      tpu_tensor_free(out);
      return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
    }
    if (!memcmp(twice, args[1]->data, es)) {
      run_forward_scan(simple, a0, args[1], out, scan_dim, tpu__ref_scan_block(ip), rev, tmp);
      tpu_free(tmp);
      return TPU_OK;
    }
    tpu_free(tmp);
  }
  if (simple != TPU_OP_COUNT) {
    tpu_status st = window_rows(simple, a0, args[1], out, wd, in->loc, d);
    if (st != TPU_OK) tpu_tensor_free(out);
    return st;
  }
  tpu__scall sc;
  memset(&sc, 0, sizeof sc);
  void **dst = tpu_calloc((size_t)nops, sizeof(void *));
  const void **src = tpu_calloc((size_t)nops, sizeof(void *));
  tpu_dtype *want = tpu_calloc((size_t)nops, sizeof(tpu_dtype));
  tpu_status st = TPU_OK;
  if (!dst || !src || !want) st = TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  if (st == TPU_OK && simple == TPU_OP_COUNT) {
    st = tpu__scall_init(&sc, ip, in->to_apply, 2 * nops, in->loc, d);
    for (int i = 0; st == TPU_OK && i < nops; i++)
      if (sc.args[i].dtype != args[i]->dtype || sc.args[nops + i].dtype != args[i]->dtype)
        st = TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "reduce-window computation parameters do not match operand %d", i);
  }
  for (int i = 0; st == TPU_OK && i < nops; i++) want[i] = args[i]->dtype;

  int64_t oidx[TPU_MAX_RANK] = {0};
  for (int64_t e = 0; st == TPU_OK && e < on; e++) {
    for (int i = 0; i < nops; i++) {
      size_t es = tpu_dtype_size(want[i]);
      dst[i] = (char *)(out->dtype == TPU_TUPLE ? out->elems[i].data : out->data) + (size_t)e * es;
      memcpy(dst[i], args[nops + i]->data, es);
    }
    int64_t widx[TPU_MAX_RANK] = {0};
    do {
      int64_t off = window_offset(wd, rank, astr, oidx, widx);
      for (int i = 0; i < nops; i++)
        src[i] = off < 0 ? args[nops + i]->data : (const char *)args[i]->data + (size_t)off * tpu_dtype_size(want[i]);
      if (simple != TPU_OP_COUNT) {
        tpu__ref_apply_binary(simple, want[0], dst[0], src[0]);
      } else {
        for (int i = 0; i < nops; i++) {
          size_t es = tpu_dtype_size(want[i]);
          memcpy(tpu__scall_arg(&sc, i), dst[i], es);
          memcpy(tpu__scall_arg(&sc, nops + i), src[i], es);
        }
        st = tpu__scall_run(&sc, dst, want, nops, d);
      }
    } while (st == TPU_OK && tpu__next_index(rank, wsize, widx));
    tpu__next_index(rank, odims, oidx);
  }
  tpu__scall_deinit(&sc);
  tpu_free(dst);
  tpu_free((void *)src);
  tpu_free(want);
  if (st != TPU_OK) tpu_tensor_free(out);
  return st;
}

/* ---- select-and-scatter ----
 * The result (operand's shape) starts at the init value. For each source element, in
 * row-major order, its window over the operand is scanned in row-major window order,
 * skipping padding (padding is never selected): the first element is selected, and each
 * later element x replaces the selected s when select(s, x) is false. Then
 * result[selected] = scatter(result[selected], source element). A window made only of
 * padding selects nothing and its source element is dropped. */
tpu_status tpu__ref_select_and_scatter(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                                       tpu_tensor *out, tpu_diag *d) {
  if (in->noperands != 3) return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "select-and-scatter takes 3 operands");
  const tpu_tensor *a = args[0], *src = args[1], *init = args[2];
  int rank = a->rank;
  wdim wd[TPU_MAX_RANK];
  if (!window_dims(in, a, wd))
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "select-and-scatter window does not match the operand rank %d", rank);
  int same = src->rank == rank && tpu_tensor_numel(init) == 1 && init->dtype == src->dtype &&
             tpu_dtype_is_array(in->shape.dtype) && in->shape.dtype == src->dtype && in->shape.rank == rank;
  for (int k = 0; same && k < rank; k++) same = src->dims[k] == wd[k].out && in->shape.dims[k] == a->dims[k];
  if (!same)
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "select-and-scatter operand, source and result shapes do not agree");
  int64_t wsize[TPU_MAX_RANK], astr[TPU_MAX_RANK];
  for (int k = 0; k < rank; k++) wsize[k] = wd[k].w.size;
  tpu__ref_strides(rank, a->dims, astr);

  TPU_TRY(tpu_tensor_alloc(out, in->shape.dtype, rank, a->dims, d));
  size_t es = tpu_dtype_size(out->dtype), as = tpu_dtype_size(a->dtype);
  int64_t on = tpu_tensor_numel(out), sn = tpu_tensor_numel(src);
  for (int64_t e = 0; e < on; e++) memcpy((char *)out->data + (size_t)e * es, init->data, es);
  if (sn == 0 || on == 0) return TPU_OK;

  tpu__scall sel, sca;
  memset(&sca, 0, sizeof sca);
  tpu_status st = tpu__scall_init(&sel, ip, in->select, 2, in->loc, d);
  if (st == TPU_OK && (sel.args[0].dtype != a->dtype || sel.args[1].dtype != a->dtype))
    st = TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "select computation does not take two %s scalars", tpu_dtype_name(a->dtype));
  tpu_opcode simple = tpu__ref_simple_reducer(in->scatter_comp);
  if (st == TPU_OK && simple == TPU_OP_COUNT) {
    st = tpu__scall_init(&sca, ip, in->scatter_comp, 2, in->loc, d);
    if (st == TPU_OK && (sca.args[0].dtype != out->dtype || sca.args[1].dtype != out->dtype))
      st = TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "scatter computation does not take two %s scalars",
                    tpu_dtype_name(out->dtype));
  }
  int64_t sidx[TPU_MAX_RANK] = {0};
  for (int64_t s = 0; st == TPU_OK && s < sn; s++) {
    int64_t widx[TPU_MAX_RANK] = {0}, chosen = -1;
    do {
      int64_t off = window_offset(wd, rank, astr, sidx, widx);
      if (off < 0) continue;
      if (chosen < 0) {
        chosen = off;
        continue;
      }
      memcpy(tpu__scall_arg(&sel, 0), (const char *)a->data + (size_t)chosen * as, as);
      memcpy(tpu__scall_arg(&sel, 1), (const char *)a->data + (size_t)off * as, as);
      int keep = 0;
      st = tpu__scall_pred(&sel, &keep, d);
      if (!keep) chosen = off;
    } while (st == TPU_OK && tpu__next_index(rank, wsize, widx));
    if (st == TPU_OK && chosen >= 0) {
      char *acc = (char *)out->data + (size_t)chosen * es;
      const char *x = (const char *)src->data + (size_t)s * es;
      if (simple != TPU_OP_COUNT) {
        tpu__ref_apply_binary(simple, out->dtype, acc, x);
      } else {
        memcpy(tpu__scall_arg(&sca, 0), acc, es);
        memcpy(tpu__scall_arg(&sca, 1), x, es);
        void *dst[1] = {acc};
        st = tpu__scall_run(&sca, dst, &out->dtype, 1, d);
      }
    }
    tpu__next_index(rank, src->dims, sidx);
  }
  tpu__scall_deinit(&sel);
  tpu__scall_deinit(&sca);
  if (st != TPU_OK) tpu_tensor_free(out);
  return st;
}
