/* Back-end kernels for cholesky and triangular-solve: XLA's blocked algorithms (panels as
 * wide as the MXU) as a TPU runs them — each panel's small triangle on the vector units,
 * the updates and panel solves as matmuls on the MXU — their flops, VMEM plan and code.
 *
 * The algorithms (docs/timing.md, "Cholesky and triangular solves"):
 *   cholesky, n x n, panels of nb = MXU rows: for panel j at column i = j nb, width w:
 *     update   a[i:, i:i+w] -= l[i:, :i] l[i:i+w, :i]^T   MXU  M = n-i, K = i, N = w
 *     factor   the w x w diagonal block, column by column  vector unit
 *     solve    l[i+w:, i:i+w] = a[..] inv(l_jj)^T           vector unit (the inverse of the
 *              triangle), MXU M = n-i-w, K = w, N = w
 *   (XLA's CholeskyExpander: left-looking, block 128, HIGHEST precision.)
 *   triangular-solve, k x k triangle, m right-hand sides: every w x w diagonal block
 *   inverted on the vector unit, then for block j at i = j nb (in solve order)
 *     update   b_j -= a_j,<j x_<j     MXU  left: M = w, K = i, N = m; right: M = m, K = i, N = w
 *     multiply x_j = inv(a_jj) b_j    MXU  left: M = w, K = w, N = m; right: M = m, K = w, N = w
 *   (XLA's TriangularSolveExpander: diagonal blocks inverted, then blocked matmuls.)
 * A w x w triangle step s (of w) touches rows s.. of the block: ceil((w-s)/sublanes) x
 * ceil(w/lanes) vector registers, each with 3 vector ops (scale, multiply, subtract), 1
 * transpose-unit op (broadcasting the pivot column across lanes), and one transcendental
 * push per step (the pivot's rsqrt or reciprocal). */
#include <string.h>

#include "compile/backend/backend.h"

#define MAX_GROUPS 16 /* panels are timed in at most this many groups of consecutive panels */

static int64_t cdiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : a; }
static int64_t round_up(int64_t a, int64_t m) { return m > 0 ? cdiv(a, m) * m : a; }

typedef struct {
  int chol, left;
  int64_t n;    /* order of the triangle */
  int64_t rhs;  /* triangular-solve: right-hand sides */
  int64_t mats; /* matrices (batch) */
  int64_t nb;   /* panel width */
  int64_t panels;
  int64_t es;   /* element bytes */
} lprob;

/* One panel step of one matrix. */
typedef struct {
  int64_t mm[2][3];      /* update, then solve/multiply: {M, K, N}; zeros when absent */
  int64_t vpu, xlu, eup; /* vector-register operations on each unit */
  int64_t rd, wr;        /* HBM bytes read and written when the matrix streams */
} lstep;

/* The kernel's plan: batch groups of bb matrices (G of them), resident or streaming. */
typedef struct {
  int64_t bb, groups;
  int stream;               /* one matrix does not fit VMEM: each step reads/writes HBM */
  int64_t slot_in, slot_out;
} lplan;

static int flag(const tpu_instr *in, const char *name) {
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, name)) return !strcmp(in->attrs[i].value, "true");
  return 0;
}

static void problem(const tpu__be *be, const tpu_instr *in, lprob *p) {
  const tpu_shape *a = &in->operands[0]->shape;
  memset(p, 0, sizeof *p);
  p->chol = in->op == TPU_OP_CHOLESKY;
  p->left = !p->chol && flag(in, "left_side");
  p->n = a->rank >= 2 ? a->dims[a->rank - 1] : 0;
  p->mats = p->n > 0 ? tpu_shape_numel(a) / (p->n * p->n) : 0;
  if (!p->chol) {
    const tpu_shape *b = &in->operands[1]->shape;
    p->rhs = b->rank >= 2 ? b->dims[b->rank - (p->left ? 1 : 2)] : 0;
  }
  p->nb = be->chip->mxu_rows > 0 ? be->chip->mxu_rows : 128;
  p->panels = cdiv(p->n, p->nb);
  p->es = (int64_t)tpu_dtype_size(a->dtype);
}

/* bf16 passes of the MXU work: XLA's expanders ask for HIGHEST; --precision overrides as
 * it does for dots. */
static int passes(const tpu__be *be, tpu_dtype t) {
  if (t == TPU_BF16 || t == TPU_F16) return 1;
  int p = be->o->precision_override;
  if (p < 0) p = TPU_PREC_HIGHEST;
  return p == TPU_PREC_HIGHEST ? 6 : p == TPU_PREC_HIGH ? 3 : 1;
}

/* Vector registers summed over the steps of a w x w triangle. */
static int64_t tri_vregs(const tpu__be *be, int64_t w) {
  int64_t S = be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8;
  int64_t L = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
  int64_t v = 0;
  for (int64_t s = 0; s < w; s++) v += cdiv(w - s, S) * cdiv(w, L);
  return v;
}

static void set_mm(int64_t *mm, int64_t m, int64_t k, int64_t n) {
  if (m > 0 && k > 0 && n > 0) {
    mm[0] = m;
    mm[1] = k;
    mm[2] = n;
  }
}

static void step(const tpu__be *be, const lprob *p, int64_t j, lstep *s) {
  int64_t i = j * p->nb, w = p->n - i < p->nb ? p->n - i : p->nb, r = p->n - i - w, m = p->rhs, e = p->es;
  int64_t v = tri_vregs(be, w);
  memset(s, 0, sizeof *s);
  s->vpu = 3 * v;
  s->xlu = v;
  s->eup = w;
  if (p->chol) {
    set_mm(s->mm[0], p->n - i, i, w);
    if (r > 0) { /* the panel below: invert the factored triangle, then one matmul */
      s->vpu += 3 * v;
      s->xlu += v;
      s->eup += w;
      set_mm(s->mm[1], r, w, w);
    }
    s->rd = ((p->n - i) * i + (p->n - i) * w) * e;
    s->wr = (p->n - i) * w * e;
  } else if (p->left) {
    set_mm(s->mm[0], w, i, m);
    set_mm(s->mm[1], w, w, m);
    s->rd = (w * (i + w) + w * m + i * m) * e;
    s->wr = w * m * e;
  } else {
    set_mm(s->mm[0], m, i, w);
    set_mm(s->mm[1], m, w, w);
    s->rd = ((i + w) * w + m * w + m * i) * e;
    s->wr = m * w * e;
  }
}

void tpu__linalg_flops(const tpu__be *be, const tpu_instr *in, double *flops, double *padded) {
  lprob p;
  problem(be, in, &p);
  double n = (double)p.n, mats = (double)p.mats;
  *flops = mats * (p.chol ? n * n * n / 3.0 : n * n * (double)p.rhs);
  const int64_t S = be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8;
  const int64_t L = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
  double pf = 0;
  for (int64_t j = 0; j < p.panels; j++) {
    lstep s;
    step(be, &p, j, &s);
    for (int t = 0; t < 2; t++)
      if (s.mm[t][0])
        pf += 2.0 * (double)round_up(s.mm[t][0], S) * (double)round_up(s.mm[t][1], be->chip->mxu_rows) *
              (double)round_up(s.mm[t][2], be->chip->mxu_cols);
    pf += (double)s.vpu * (double)(S * L);
  }
  *padded = pf * mats;
}

static void plan_of(const tpu__be *be, const tpu_instr *in, const tpu__kinfo *k, lplan *pl) {
  lprob p;
  problem(be, in, &p);
  memset(pl, 0, sizeof *pl);
  int64_t budget = tpu__vmem_budget(be->chip);
  int64_t mats = p.mats > 0 ? p.mats : 1;
  int64_t per = cdiv(k->in_bytes + k->out_bytes, mats);
  if (2 * per <= budget) { /* resident: groups of matrices, double-buffered */
    int64_t most = per > 0 ? budget / (2 * per) : mats;
    if (most > mats) most = mats;
    if (most < 1) most = 1;
    /* Equal groups: the fewest that divide the batch (so every matrix is timed once). */
    int64_t g = cdiv(mats, most);
    for (int64_t tries = 0; mats % g && tries < 4096; tries++) g++;
    if (mats % g) g = cdiv(mats, most); /* no divisor near: the last group is timed full */
    pl->groups = g;
    pl->bb = cdiv(mats, g);
    pl->slot_in = cdiv(k->in_bytes, pl->groups);
    pl->slot_out = cdiv(k->out_bytes, pl->groups);
    return;
  }
  /* One matrix at a time, each step's operands streamed through VMEM from HBM. */
  pl->stream = 1;
  pl->bb = 1;
  pl->groups = mats;
  int64_t rd = 0, wr = 0;
  for (int64_t j = 0; j < p.panels; j++) {
    lstep s;
    step(be, &p, j, &s);
    if (s.rd > rd) rd = s.rd;
    if (s.wr > wr) wr = s.wr;
  }
  pl->slot_in = rd < budget / 4 ? rd : budget / 4;
  pl->slot_out = wr < budget / 4 ? wr : budget / 4;
}

tpu_status tpu__linalg_plan(tpu__be *be, const tpu_instr *in, tpu__kinfo *k) {
  lplan pl;
  plan_of(be, in, k, &pl);
  k->tiles = pl.groups;
  int slots = pl.groups > 1 ? 2 : 1;
  int64_t sizes[2] = {pl.slot_in, pl.slot_out}, off = 0;
  for (int b = 0; b < 2; b++) {
    if (!be->dry) {
      int v = tpu_program_add_vmem(be->p, k->op, off, sizes[b], slots);
      if (v < 0) return TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
      if (!k->nvmem) k->vmem0 = v;
      k->nvmem++;
    }
    off += (sizes[b] * slots + 511) / 512 * 512;
  }
  k->ws = off;
  if (!be->dry && off > be->p->vmem_peak) be->p->vmem_peak = off;
  return TPU_OK;
}

static int put(tpu__be *be, const tpu_insn *in) {
  if (tpu_program_add_insn(be->p, in) >= 0) return 1;
  TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  return 0;
}

tpu_status tpu__linalg_lower(tpu__be *be, const tpu_instr *in, const tpu__kinfo *k) {
  lprob p;
  lplan pl;
  problem(be, in, &p);
  plan_of(be, in, k, &pl);
  int loop = pl.groups > 1, div = loop ? 1 : 0;
  tpu_vref vin = tpu_vref_make(k->vmem0, div, 0), vout = tpu_vref_make(k->vmem0 + 1, div, 0);
  int hin = tpu__be_buffer_of(be, in->operands[0], 0);
  int hout = k->hbm0 >= 0 ? k->hbm0 : tpu__be_buffer_of(be, in, 0);
  tpu_insn x = tpu_insn_make(TPU_ISA_KERNEL, k->op);
  if (!put(be, &x)) return TPU_ERR_NOMEM;
  if (loop) {
    x = tpu_insn_make(TPU_ISA_LOOP, k->op);
    x.trips = pl.groups;
    if (!put(be, &x)) return TPU_ERR_NOMEM;
  }
  for (int j = 0; !pl.stream && j < in->noperands; j++) {
    x = tpu_insn_make(TPU_ISA_DMA_IN, k->op);
    x.hbm = tpu__be_buffer_of(be, in->operands[j], 0);
    x.bytes = cdiv(tpu__read_bytes(be, in, j), pl.groups);
    x.dst = vin;
    if (x.bytes && !put(be, &x)) return TPU_ERR_NOMEM;
  }
  int64_t ng = p.mats == 0 ? 0 : p.panels < MAX_GROUPS ? p.panels : MAX_GROUPS; /* an empty batch: nothing */
  const int mxus = (int)(be->chip->mxus_per_core * be->chip->tensorcores);
  const tpu_dtype dt = in->operands[0]->shape.dtype;
  for (int64_t g = 0; g < ng; g++) {
    int64_t lo = p.panels * g / ng, hi = p.panels * (g + 1) / ng;
    int64_t cnt[2] = {0, 0}, sum[2][3] = {{0, 0, 0}, {0, 0, 0}}, vu[3] = {0, 0, 0}, rd = 0, wr = 0;
    for (int64_t j = lo; j < hi; j++) {
      lstep s;
      step(be, &p, j, &s);
      for (int t = 0; t < 2; t++)
        if (s.mm[t][0]) {
          cnt[t]++;
          for (int d = 0; d < 3; d++) sum[t][d] += s.mm[t][d];
        }
      vu[0] += s.xlu;
      vu[1] += s.eup;
      vu[2] += s.vpu;
      rd += s.rd;
      wr += s.wr;
    }
    if (pl.stream) {
      x = tpu_insn_make(TPU_ISA_DMA_IN, k->op);
      x.hbm = hin;
      x.bytes = rd;
      x.dst = vin;
      if (x.bytes && !put(be, &x)) return TPU_ERR_NOMEM;
    }
    /* update (MXU), the triangles (vector units), the panel solve (MXU), in that order on
     * the result's slot: each waits for the one before (no look-ahead). */
    static const tpu_isa_op units[3] = {TPU_ISA_XLU, TPU_ISA_EUP, TPU_ISA_VPU};
    for (int part = 0; part < 3; part++) {
      if (part == 1) {
        for (int u = 0; u < 3; u++) {
          if (!vu[u]) continue;
          x = tpu_insn_make(units[u], k->op);
          x.src[0] = vin;
          x.src[1] = vout;
          x.dst = vout;
          x.vregs = vu[u] * pl.bb;
          x.ops = 1;
          x.what = k->what;
          if (!put(be, &x)) return TPU_ERR_NOMEM;
        }
        continue;
      }
      int t = part == 0 ? 0 : 1;
      if (!cnt[t]) continue;
      x = tpu_insn_make(TPU_ISA_MATMUL, k->op);
      x.src[0] = vin;
      x.src[1] = vout;
      x.dst = vout;
      x.m = cdiv(sum[t][0], cnt[t]);
      x.k = cdiv(sum[t][1], cnt[t]);
      x.n = cdiv(sum[t][2], cnt[t]);
      x.b = cnt[t] * pl.bb;
      x.mxus = mxus > 0 ? mxus : 1;
      x.passes = passes(be, dt);
      x.dtype = dt;
      x.what = k->what;
      if (!put(be, &x)) return TPU_ERR_NOMEM;
    }
    if (pl.stream && wr) {
      x = tpu_insn_make(TPU_ISA_DMA_OUT, k->op);
      x.src[0] = vout;
      x.hbm = hout;
      x.bytes = wr;
      if (!put(be, &x)) return TPU_ERR_NOMEM;
    }
  }
  if (!pl.stream) {
    x = tpu_insn_make(TPU_ISA_DMA_OUT, k->op);
    x.src[0] = vout;
    x.hbm = hout;
    x.bytes = cdiv(tpu__write_bytes(be, in, 0), pl.groups);
    if (x.bytes && !put(be, &x)) return TPU_ERR_NOMEM;
  }
  if (loop) {
    x = tpu_insn_make(TPU_ISA_END, k->op);
    if (!put(be, &x)) return TPU_ERR_NOMEM;
  }
  return TPU_OK;
}
