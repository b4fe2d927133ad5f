/* Back-end pass `schedule`: each kernel's tile loop (how many iterations, matmul blocks
 * that fit VMEM double-buffered), its VMEM buffers, and static while-loop trip counts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chip/timing.h"
#include "compile/backend/backend.h"

/* The VMEM one kernel's tile buffers may take: one TensorCore's, the chip's scoped limit
 * where the XLA TPU compiler shows one (chip field scoped_vmem_bytes), else three quarters
 * of VMEM. A megacore chip (v4, v5p) splits a kernel's tiles between its TensorCores, each
 * tile in its own core's VMEM, so its tiles are one core's size: the XLA TPU compiler times a
 * v4 megacore dot at half its one-core cycles (bf16 [26624,6144]x[6144,24576]: 34,598,776
 * against 69,183,976; [26624,24576]x[24576,6144]: 32,229,796 against 64,446,016; libtpu
 * compile-only, chip_config_name "megacore" against the default, bench/plan_xla.py
 * --megacore; docs/plan.md). Was both cores' VMEM, tiles twice a core's size. */
int64_t tpu__vmem_budget(const tpu_chip *chip) {
  int64_t per_core = chip->vmem_bytes / 4 * 3;
  if (chip->scoped_vmem_bytes > 0 && chip->scoped_vmem_bytes <= chip->vmem_bytes) per_core = chip->scoped_vmem_bytes;
  return per_core;
}

static int64_t cdiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : a; }

/* ---- while trip counts: `i CMP c` with i += s in the body and i's start a constant ---- */

static int const_int(const tpu_instr *in, int64_t *v) {
  if (!in || in->op != TPU_OP_CONSTANT || !in->literal || in->shape.rank != 0 ||
      !tpu_dtype_is_int(in->shape.dtype))
    return 0;
  *v = tpu_tensor_get_i64(in->literal, 0);
  return 1;
}

/* If `in` is get-tuple-element(parameter 0, k), returns k; else -1. */
static int64_t param_elem(const tpu_instr *in) {
  if (in->op == TPU_OP_GET_TUPLE_ELEMENT && in->operands[0]->op == TPU_OP_PARAMETER) return in->index;
  return -1;
}

/* The trip count XLA's own loop analysis wrote into an optimized module's backend_config
 * ("known_trip_count":{"n":"10"}); -1 if none. */
static int64_t xla_known_trip_count(const tpu_instr *w) {
  for (int i = 0; i < w->nattrs; i++) {
    if (strcmp(w->attrs[i].name, "backend_config")) continue;
    const char *k = strstr(w->attrs[i].value, "\"known_trip_count\"");
    const char *n = k ? strstr(k, "\"n\"") : NULL;
    if (!n) return -1;
    n += 3;
    while (*n == ':' || *n == ' ' || *n == '"') n++;
    char *end;
    long long v = strtoll(n, &end, 10);
    return end != n && v >= 0 ? v : -1;
  }
  return -1;
}

/* Whether x is element k of the loop state plus constants (i + 1, or XLA's unrolled
 * windowed-einsum loops' (i + 1) + 1, also inside the fusion the counter's update became):
 * *s the sum of them. fused: the fusion whose computation x is in (NULL: the body). */
static int induction_step(const tpu_instr *x, int64_t k, const tpu_instr *fused, int depth, int64_t *s) {
  int64_t c;
  if (fused ? x->op == TPU_OP_PARAMETER && x->index < fused->noperands && param_elem(fused->operands[x->index]) == k
            : param_elem(x) == k) {
    *s = 0;
    return 1;
  }
  if (depth > 8) return 0;
  if (!fused && x->op == TPU_OP_FUSION && x->calls) return induction_step(x->calls->root, k, x, depth + 1, s);
  if (x->op != TPU_OP_ADD && x->op != TPU_OP_SUBTRACT) return 0;
  if (const_int(x->operands[1], &c) && induction_step(x->operands[0], k, fused, depth + 1, s)) {
    *s += x->op == TPU_OP_ADD ? c : -c;
    return 1;
  }
  if (x->op == TPU_OP_ADD && const_int(x->operands[0], &c) && induction_step(x->operands[1], k, fused, depth + 1, s)) {
    *s += c;
    return 1;
  }
  return 0;
}

int64_t tpu__while_trip_count(const tpu_instr *w) {
  int64_t known = xla_known_trip_count(w);
  if (known >= 0) return known;
  const tpu_instr *cmp = w->condition->root;
  if (cmp->op != TPU_OP_COMPARE) return -1;
  int64_t k = param_elem(cmp->operands[0]), c;
  tpu_cmp_dir dir = cmp->direction;
  if (k >= 0 && const_int(cmp->operands[1], &c)) {
  } else if ((k = param_elem(cmp->operands[1])) >= 0 && const_int(cmp->operands[0], &c)) {
    dir = dir == TPU_CMP_LT ? TPU_CMP_GT : dir == TPU_CMP_GT ? TPU_CMP_LT
          : dir == TPU_CMP_LE ? TPU_CMP_GE : dir == TPU_CMP_GE ? TPU_CMP_LE : dir;
  } else {
    return -1;
  }
  const tpu_instr *root = w->body->root;
  if (root->op != TPU_OP_TUPLE || k >= root->noperands) return -1;
  int64_t s;
  if (!induction_step(root->operands[k], k, NULL, 0, &s)) return -1;
  const tpu_instr *init = w->operands[0];
  int64_t i0;
  if (init->op != TPU_OP_TUPLE || k >= init->noperands || !const_int(init->operands[k], &i0)) return -1;
  if (s == 0) return -1;
  int64_t n;
  switch (dir) {
    case TPU_CMP_LT: n = s > 0 ? cdiv(c - i0, s) : -1; break;
    case TPU_CMP_LE: n = s > 0 ? cdiv(c - i0 + 1, s) : -1; break;
    case TPU_CMP_GT: n = s < 0 ? cdiv(i0 - c, -s) : -1; break;
    case TPU_CMP_GE: n = s < 0 ? cdiv(i0 - c + 1, -s) : -1; break;
    case TPU_CMP_NE: n = (c - i0) % s == 0 && (c - i0) / s >= 0 ? (c - i0) / s : -1; break;
    default: n = -1;
  }
  if (dir != TPU_CMP_NE && n < 0) n = 0;
  return n;
}

/* ---- tile loops ---- */

static tpu_status add_vmem(tpu__be *be, tpu__kinfo *k, int64_t *off, int64_t slot_bytes, int slots) {
  if (be->dry) {
    *off += (slot_bytes * slots + 511) / 512 * 512;
    return TPU_OK;
  }
  int v = tpu_program_add_vmem(be->p, k->op, *off, slot_bytes, slots);
  if (v < 0) return TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  if (!k->nvmem) k->vmem0 = v;
  k->nvmem++;
  *off += (slot_bytes * slots + 511) / 512 * 512;
  return TPU_OK;
}

static tpu_status plan_stream(tpu__be *be, const tpu_instr *in, tpu__kinfo *k) {
  int64_t budget = tpu__vmem_budget(be->chip);
  int64_t total = k->in_bytes + k->out_bytes;
  int64_t t = cdiv(total, TPU__TILE_TARGET), t2 = cdiv(2 * total, budget);
  /* the compiler's blocks on a chip with stream_block_elems (v4): round(sqrt(E / that)) for a
   * loop kernel of E result elements that does not reduce (stream_cost.c tpu__loop_block_elems) */
  int64_t e = tpu__loop_block_elems(be, in);
  if (e > 0) t = (int64_t)floor(sqrt((double)e / be->chip->stream_block_elems) + 0.5);
  if (t2 > t) t = t2;
  if (t < 1) t = 1;
  int slots;
  int64_t off = 0, b[3];
  int nb;
  for (;;) { /* (the compiler's blocks: more where its buffers, rounded up, outgrow VMEM) */
    slots = t > 1 ? 2 : 1;
    b[0] = b[1] = b[2] = 0;
    nb = 0;
    for (int j = 0; j < in->noperands; j++) {
      int64_t r = tpu__read_bytes(be, in, j);
      if (!r) continue;
      b[nb < 2 ? nb : 2] += cdiv(r, t);
      if (nb < 3) nb++;
    }
    int64_t need = (cdiv(k->out_bytes, t) * slots + 511) / 512 * 512;
    for (int j = 0; j < nb; j++) need += (b[j] * slots + 511) / 512 * 512;
    if (e <= 0 || need <= budget || t >= total) break;
    t++;
  }
  if (e > 0 && t > 1 && !be->dry && k->op >= 0) be->p->ops[k->op].blocks = t > 1 << 20 ? 1 << 20 : (int)t;
  k->tiles = t;
  for (int j = 0; j < nb; j++) TPU_TRY(add_vmem(be, k, &off, b[j], slots));
  TPU_TRY(add_vmem(be, k, &off, cdiv(k->out_bytes, t), slots));
  k->ws = off;
  if (!be->dry && off > be->p->vmem_peak) be->p->vmem_peak = off;
  return TPU_OK;
}

/* Bytes the matmul kernel reads of its lhs and rhs (whole operands), and of the other
 * operands of a fusion around it: the epilogue operands (a residual add, a bias), which
 * are read like the output, one output block's slice per block. */
static void matmul_operand_bytes(const tpu__be *be, const tpu_instr *in, tpu__kinfo *k, int64_t *lhs,
                                 int64_t *rhs, int64_t *epi) {
  *lhs = k->mm_lhs >= 0 ? tpu__read_bytes(be, in, k->mm_lhs) : tpu__padded_bytes(be, &k->mm->operands[0]->shape);
  *rhs = k->mm_rhs >= 0 && k->mm_rhs != k->mm_lhs ? tpu__read_bytes(be, in, k->mm_rhs)
                                                  : tpu__padded_bytes(be, &k->mm->operands[1]->shape);
  *epi = 0;
  for (int j = 0; j < in->noperands; j++)
    if (j != k->mm_lhs && j != k->mm_rhs) *epi += tpu__read_bytes(be, in, j);
  if (k->mm_lhs < 0 || k->mm_rhs < 0) { /* sources not found: whatever is left over */
    *epi = k->in_bytes - *lhs - *rhs;
    if (*epi < 0) *epi = 0;
  }
}

/* One blocking of a matmul kernel: (bb products) x (bm x bk) by (bk x bn) blocks, the
 * block loop order, and what the cost model says of it. */
typedef struct {
  int64_t mb, nb, kb, bb, bm, bn, bk, tiles;
  int64_t es;              /* pieces each output block's epilogue and store stream in */
  int n_outer;
  int64_t qa, qb;          /* iterations between A / B loads */
  int64_t sa, sb, so, se;  /* slot bytes: A, B, output, epilogue operands */
  int one_out;             /* one output buffer (slot_count): its store exposed */
  double pass;             /* a K-split store's 16-bit pass the next block waits for (1: none) */
  int64_t need;            /* VMEM bytes, double-buffered (f32 accumulators) */
  int64_t alloc;           /* VMEM bytes of the slots plan_matmul makes */
  double bytes;            /* HBM bytes the kernel moves */
  double cycles;           /* estimated kernel cycles */
} blocking;

/* Load periods of the A and B blocks. Iterations run over (batch block, outer, inner, k)
 * with k innermost. With one K step an operand whose block index depends only on the
 * batch block and the outer loop keeps its block for `inner` iterations; with several K
 * steps both blocks change every iteration. */
static void load_periods(blocking *c) {
  c->qa = c->qb = 1;
  if (c->kb > 1) return;
  if (!c->n_outer) {
    c->qa = c->nb;
    if (c->nb == 1) c->qb = c->mb;
  } else {
    c->qb = c->mb;
    if (c->mb == 1) c->qa = c->nb;
  }
  /* an output block's epilogue pieces (es, one K step) all use the block's A and B */
  c->qa *= c->es;
  c->qb *= c->es;
}

/* HBM bytes of blocking c; an operand kept in VMEM between kernels costs none. */
static double blocking_bytes(const blocking *c, int a_hbm, int b_hbm, int64_t out, int64_t epi) {
  return (a_hbm ? (double)(c->tiles / c->qa) * (double)c->sa : 0) +
         (b_hbm ? (double)(c->tiles / c->qb) * (double)c->sb : 0) + (double)out + (double)epi;
}

/* How many buffers matmul slot i (A, B, output, epilogue) takes: two when the kernel loops
 * (double-buffered), but one output accumulator when K is split (its store holds the next
 * block's first K step: pipeline_cycles). */
static int slot_count(int64_t tiles, int one_out, int i) { return tiles > 1 && !(i == 2 && one_out) ? 2 : 1; }

/* The most bytes of one matmul operand the XLA TPU compiler holds on chip instead of
 * streaming it through the kernel's tiles: VMEM beside the kernels' scoped VMEM, as far as
 * it prefetches (xprefetch_max_bytes), or CMEM where the chip has more of it (v4). */
static int64_t onchip_operand_max(const tpu_chip *ch) {
  int64_t scoped = ch->scoped_vmem_bytes > 0 && ch->scoped_vmem_bytes <= ch->vmem_bytes ? ch->scoped_vmem_bytes
                                                                                       : ch->vmem_bytes / 4 * 3;
  int64_t v = ch->vmem_bytes - scoped;
  if (ch->xprefetch_max_bytes > 0 && ch->xprefetch_max_bytes < v) v = ch->xprefetch_max_bytes;
  if (ch->cmem_bytes > v) v = ch->cmem_bytes;
  return v;
}

/* Do a matmul's operands both stream from HBM because neither fits on chip
 * (onchip_operand_max)? Then it keeps one output buffer with one K step too (a K split has
 * one accumulator: above), so that the next block's first step waits for the block's store:
 * the XLA TPU compiler's estimate then charges each output block's store beside its MXU
 * work, not under the next block's (libtpu compile-only, v5e bf16: about 4-5 cycles per f32
 * register of the block over the MXU work, 368 x 2048 x 768 blocks 1,374 cycles a step,
 * 592 x 1024 x 1152 3,790; the bf16 store at HBM bandwidth is 3.75; docs/timing-mxu.md). An operand that
 * fits it copies into VMEM (cross-program or in-step prefetch, or VMEM placement of an
 * intermediate), and its kernels then overlap the store (bench/fidelity/compiled: of v5e's
 * 2-D GEMM kernels in the corpus all but 8192^3 read one operand through a copy-done). */
static int too_large_for_chip(const tpu__be *be, int a_hbm, int b_hbm, int64_t lhs, int64_t rhs) {
  int64_t max = onchip_operand_max(be->chip);
  return a_hbm && b_hbm && lhs > max && rhs > max;
}

/* Cycles of blocking c's tile loop as lowered (lower.c) and timed (docs/timing.md): one
 * HBM port taken by the DMAs in program order (tile i+1's loads, then tile i's store), a
 * load's data usable `lat` cycles after its transfer, a load into a slot only after the
 * matmul two tiles back has read it, `mxu` cycles per tile. The loop is simulated for up
 * to SIM_TILES iterations and extended linearly from the second half of those (its
 * steady state); vector epilogue work is left out (the same for every blocking). */
#define SIM_TILES 512
/* The search only needs to know that a blocking is slower than `limit` (better() then
 * rejects it): the simulation stops, returning INFINITY, once the cycles it will return are
 * sure to exceed limit. port and mxu_end never decrease, and the extension below grows with
 * the end it extends (each floating-point step is monotone), so the bound is exact. */
#define SIM_CHECK 16 /* tiles between checks */
static double pipeline_cycles(const blocking *c, double bpc, double lat, double mxu, double limit) {
  int64_t T = c->tiles, n = T < SIM_TILES ? T : SIM_TILES;
  double port = 0, ready = 0, mxu_end = 0, half = 0;
  /* tile 0's loads */
  port = (double)(c->sa + c->sb + c->se) / bpc;
  ready = port + lat;
  /* j % qa, j % qb, j % kb for j = i + 1, kept as counters, and each set of loads' port
   * time computed once, as the loop would (no division per tile) */
  int64_t ra = 1 % c->qa, rb = 1 % c->qb, rk = 1 % c->kb;
  double load[8], store = (double)c->so / bpc;
  int some[8];
  for (int w = 0; w < 8; w++) {
    double bytes = (w & 1 ? (double)c->sa : 0) + (w & 2 ? (double)c->sb : 0) + (w & 4 ? (double)c->se : 0);
    some[w] = bytes > 0;
    load[w] = bytes / bpc;
  }
  for (int64_t i = 0; i < n; i++) {
    double next_ready = ready;
    if (i + 1 < T) {
      int w = (ra == 0) | (rb == 0) << 1 | (rk == 0) << 2;
      if (some[w]) {
        double st = port > mxu_end ? port : mxu_end; /* tile i-1's slot: read by then */
        port = st + load[w];
        next_ready = port + lat;
      }
    }
    double st = mxu_end > ready ? mxu_end : ready;
    mxu_end = st + mxu;
    if (rk == 0) {
      double from = port > mxu_end ? port : mxu_end;
      port = from + store;
      /* one output buffer: the next block's first step waits for its store */
      if (c->one_out) mxu_end = from + store * c->pass;
    }
    ready = next_ready;
    if (++ra == c->qa) ra = 0;
    if (++rb == c->qb) rb = 0;
    if (++rk == c->kb) rk = 0;
    if (i + 1 == n / 2) half = port > mxu_end ? port : mxu_end;
    if ((i + 1) % SIM_CHECK == 0 && i + 1 >= n / 2) {
      double now = port > mxu_end ? port : mxu_end;
      if (n < T) now += (now - half) / (double)(n - n / 2) * (double)(T - n);
      if (now > limit) return INFINITY;
    }
  }
  double end = port > mxu_end ? port : mxu_end;
  if (n < T) end += (end - half) / (double)(n - n / 2) * (double)(T - n);
  return end;
}

/* Fills the sizes of blocking c (mb, nb, kb, n_outer set) and its estimated cycles: the
 * first tile's loads and the HBM latency, then the larger of the MXU time of all tiles
 * and the DMA time of all other transfers (double buffering overlaps them), then the
 * last output block's store. */
static void size_blocking(const tpu__be *be, const tpu__kinfo *k, int64_t ea, int64_t eb, int64_t lhs,
                          int64_t rhs, int64_t epi, int a_hbm, int b_hbm, int64_t budget, int64_t trial, double limit,
                          blocking *c) {
  const int64_t eo = 4; /* f32 / s32 accumulators */
  c->bm = cdiv(k->m, c->mb);
  c->bn = cdiv(k->n, c->nb);
  c->bk = cdiv(k->k, c->kb);
  c->mb = cdiv(k->m, c->bm);
  c->nb = cdiv(k->n, c->bn);
  c->kb = cdiv(k->k, c->bk);
  if (c->es < 1) c->es = 1;
  /* Group small products so one iteration moves about a tile's worth of bytes. */
  int64_t blk = c->bm * c->bk * ea + c->bk * c->bn * eb + c->bm * c->bn * eo + cdiv(epi, k->b * c->mb * c->nb * c->es);
  int64_t bb = blk > 0 ? TPU__TILE_TARGET * 4 / blk : 1;
  if (bb < 1) bb = 1;
  if (bb > k->b) bb = k->b;
  while (bb > 1 && 2 * bb * blk > budget) bb /= 2;
  c->bb = bb;
  int64_t nbb = cdiv(k->b, bb);
  c->tiles = nbb * c->mb * c->nb * c->kb * c->es;
  int64_t oblocks = nbb * c->mb * c->nb * c->es; /* output pieces */
  /* an operand kept in VMEM (between kernels, or prefetched across steps) is read where it
   * lives: no slot, no transfer (the compiler's f32 2048^3 GEMM on v5e reads its prefetched
   * lhs whole beside 4 MiB of rhs and output panels: used_scoped_memory_configs) */
  c->sa = a_hbm ? cdiv(lhs, nbb * c->mb * c->kb) : 0;
  c->sb = b_hbm ? cdiv(rhs, nbb * c->nb * c->kb) : 0;
  c->so = cdiv(k->out_bytes, oblocks);
  c->se = cdiv(epi, oblocks);
  /* a streamed epilogue's output slot holds the block's product too (f32 accumulators) */
  if (c->es > 1 && c->so < bb * c->bm * c->bn * eo) c->so = bb * c->bm * c->bn * eo;
  /* VMEM: the slots add_vmem will make (padded bytes, 512-aligned), and at least the
   * double-buffered blocks with f32 accumulators. `need` counts every slot twice, a K-split
   * output's too (one buffer in `alloc`): counting it once lets larger blocks in and moved
   * the documented plans by up to 1 % (v5p gemm_f32_4096^3, MaxText v4 22B), for no
   * fidelity gain; kept as the budget test. */
  int64_t need = 0, sl[4] = {c->sa, c->sb, c->so, c->se};
  for (int i = 0; i < 4; i++) need += (2 * sl[i] + 511) / 512 * 512;
  c->alloc = 0;
  /* Operands too large for the chip: one output buffer with one K step too, and the block
   * search times a K-split block's store with its 16-bit pass, as chip/timing.c does (its
   * bytes alone made K-split blocks look as cheap as one K step's and v5e [65536,1024] x
   * [1024,65536] 1.40x the compiler's; elsewhere the search keeps the bytes alone, the
   * plans of every corpus program unchanged). */
  int big = too_large_for_chip(be, a_hbm, b_hbm, lhs, rhs);
  c->one_out = c->kb > 1 || big;
  c->pass = big && c->kb > 1 && k->op >= 0 && be->p->ops[k->op].out_scale > 1 ? be->p->ops[k->op].out_scale : 1;
  for (int i = 0; i < 4; i++) c->alloc += (sl[i] * slot_count(c->tiles, c->one_out, i) + 511) / 512 * 512;
  int64_t held = 2 * bb * ((a_hbm ? c->bm * c->bk * ea : 0) + (b_hbm ? c->bk * c->bn * eb : 0)) +
                 (c->kb > 1 ? 1 : 2) * bb * c->bm * c->bn * eo;
  c->need = need > held ? need : held;
  load_periods(c);
  c->bytes = blocking_bytes(c, 1, 1, k->out_bytes, epi);
  if (c->need > budget || (trial > 0 && c->alloc > trial)) return; /* will not be taken: no estimate */
  tpu_insn mm = tpu_insn_make(TPU_ISA_MATMUL, -1);
  mm.m = c->bm;
  mm.k = c->bk;
  mm.n = c->bn;
  mm.b = bb;
  mm.mxus = (int)(be->chip->mxus_per_core * be->chip->tensorcores);
  mm.passes = k->passes;
  mm.dtype = k->mm_dtype;
  mm.i8_wide = k->mm_i8_wide;
  int64_t cm = 0;
  if (tpu_timing_matmul_cycles(&mm, be->chip, &cm, NULL) != TPU_OK) cm = 0;
  double bpc = be->chip->hbm_bw > 0 && be->chip->clock_hz > 0 ? tpu_chip_hbm_stream_bw(be->chip) / be->chip->clock_hz : 1;
  double lat_s = tpu_timing_hbm_latency_s(be->chip);
  /* a streamed epilogue: the block's product, computed with its first piece, spread over
   * its es pieces */
  c->cycles = pipeline_cycles(c, bpc, lat_s * be->chip->clock_hz, (double)cm / (double)c->es, limit);
}

/* Whether candidate c beats the best so far: clearly faster (by more than 1 %), or about
 * as fast (within 1 %) and moving fewer HBM bytes, then fewer tiles. */
static int better(const blocking *c, const blocking *best) {
  if (c->cycles < best->cycles * 0.99) return 1;
  if (c->cycles > best->cycles * 1.01) return 0;
  if (c->bytes != best->bytes) return c->bytes < best->bytes;
  return c->tiles < best->tiles;
}

/* The VMEM slots of matmul kernel k's plan (its blocks double-buffered when it loops). */
static tpu_status add_matmul_slots(tpu__be *be, tpu__kinfo *k, int64_t epi) {
  int64_t off = 0;
  for (int i = 0; i < 4; i++)
    if (i < 3 || epi > 0) {
      TPU_TRY(add_vmem(be, k, &off, k->mm_slot[i], slot_count(k->tiles, k->kb > 1 || k->mm_one_out, i)));
      /* one K step: each step writes the one output buffer whole, and its store frees it */
      if (i == 2 && !be->dry && k->mm_one_out && k->kb == 1 && k->tiles > 1)
        be->p->vmem[k->vmem0 + k->nvmem - 1].store_frees = 1;
    }
  k->ws = off;
  if (!be->dry && off > be->p->vmem_peak) be->p->vmem_peak = off;
  return TPU_OK;
}

/* Gives kernel k the blocking `best` and its VMEM slots. */
static tpu_status take_plan(tpu__be *be, tpu__kinfo *k, const blocking *best, int a_hbm, int b_hbm, int64_t epi) {
  k->bm = best->bm;
  k->bn = best->bn;
  k->bk = best->bk;
  k->bb = best->bb;
  k->mb = best->mb;
  k->nb = best->nb;
  k->kb = best->kb;
  k->es = best->es > 1 ? best->es : 1;
  k->n_outer = best->n_outer;
  k->qa = best->qa;
  k->qb = best->qb;
  k->tiles = best->tiles;
  k->mm_slot[0] = best->sa;
  k->mm_slot[1] = best->sb;
  k->mm_slot[2] = best->so;
  k->mm_slot[3] = best->se;
  k->mm_one_out = best->one_out;
  k->mm_planned = be->dry && a_hbm && b_hbm;
  return add_matmul_slots(be, k, epi);
}

/* Plans already searched in this compile, by everything the search reads (a model's layers
 * repeat their matmuls): open addressing on a hash of the key, the key compared whole. */
typedef struct {
  int64_t m, n, k, b, out_bytes, passes, dtype, ea, eb, lhs, rhs, epi, a_hbm, b_hbm, trial, i8_wide;
} mm_key;

typedef struct {
  int used;
  mm_key key;
  blocking best;
} mm_slot;

struct tpu_mm_memo {
  mm_slot *v;
  int64_t cap, n;
};

struct tpu_mm_memo *tpu_mm_memo_new(void) { return tpu_calloc(1, sizeof(struct tpu_mm_memo)); }

int64_t tpu_mm_memo_size(const struct tpu_mm_memo *m) { return m ? m->n : 0; }

void tpu_mm_memo_free(struct tpu_mm_memo *m) {
  if (!m) return;
  tpu_free(m->v);
  tpu_free(m);
}

static uint64_t mm_hash(const mm_key *k) {
  const unsigned char *p = (const unsigned char *)k;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}

static mm_slot *mm_find(struct tpu_mm_memo *t, const mm_key *k) {
  if (!t || !t->cap) return NULL;
  for (uint64_t i = mm_hash(k) & (uint64_t)(t->cap - 1);; i = (i + 1) & (uint64_t)(t->cap - 1))
    if (!t->v[i].used || !memcmp(&t->v[i].key, k, sizeof *k)) return &t->v[i];
}

/* Remembers a search's result; on out of memory it is only not remembered. */
static void mm_remember(tpu__be *be, const mm_key *k, const blocking *best) {
  struct tpu_mm_memo *t = be->mm_memo;
  if (!t) t = be->mm_memo = tpu_calloc(1, sizeof *t);
  if (!t) return;
  if (2 * (t->n + 1) > t->cap) { /* grow: at most half full */
    int64_t nc = t->cap ? 2 * t->cap : 64;
    mm_slot *nv = tpu_calloc((size_t)nc, sizeof *nv), *old = t->v;
    if (!nv) return;
    int64_t oc = t->cap;
    t->v = nv;
    t->cap = nc;
    for (int64_t i = 0; i < oc; i++)
      if (old[i].used) *mm_find(t, &old[i].key) = old[i];
    tpu_free(old);
  }
  mm_slot *sl = mm_find(t, k);
  if (!sl->used) t->n++;
  sl->used = 1;
  sl->key = *k;
  sl->best = *best;
}

void tpu__mm_memo_free(tpu__be *be) {
  if (!be->mm_memo_shared) tpu_mm_memo_free(be->mm_memo);
  be->mm_memo = NULL;
}

/* The fastest blocking of matmul kernel k whose output blocks stream their epilogue in es
 * pieces (es = 1: whole) among every split of M and N into 1-8, 12, 16, 24, ... 256 blocks
 * and of K into 2^i blocks (K only down to the MXU rows, M to the sublanes, N to the MXU
 * columns) in both block orders whose double-buffered A, B, output and epilogue blocks fit
 * the VMEM budget (and the trial plan's VMEM, `trial`): into *best, and whether one fits;
 * *smallest keeps the one needing least VMEM seen so far. */
#define NB_COLS 16
static int search_blockings(const tpu__be *be, const tpu__kinfo *k, int64_t ea, int64_t eb, int64_t lhs,
                            int64_t rhs, int64_t epi, int a_hbm, int b_hbm, int64_t budget, int64_t trial,
                            int64_t es, blocking *best, blocking *smallest) {
  const int64_t R = be->chip->mxu_rows, C = be->chip->mxu_cols, S = 8;
  int have = 0;
  static const int64_t splits[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256};
  const int ns = (int)(sizeof splits / sizeof splits[0]);
  /* N's splits: those above, then, when an operand is read from VMEM (kept there between
   * kernels or prefetched across steps), every split whose blocks are 1 to NB_COLS whole
   * MXU column tiles wide: the XLA TPU compiler sizes its windows in tiles and, with the
   * lhs prefetched, streams the rhs in narrow whole-K blocks (v5e bf16 [12288,4096] x
   * [4096,28672]: 768 x 4096 x 256, 112 x 16 blocks; 4096^3: 1368 x 4096 x 128); with both
   * operands in HBM it keeps wide blocks and splits K instead ([12288,5120] x [5120,28672]:
   * 1024 x 640 x 1024; libtpu compile-only, docs/timing-mxu.md) */
  int64_t nsplit[sizeof splits / sizeof splits[0] + NB_COLS];
  int nn = 0;
  for (int i = 0; i < ns; i++) nsplit[nn++] = splits[i];
  for (int64_t j = 1; j <= NB_COLS && (!a_hbm || !b_hbm); j++) {
    int64_t nb = cdiv(k->n, j * C), dup = 0;
    if (nb > 256) continue;
    for (int i = 0; i < nn; i++) dup |= nsplit[i] == nb;
    if (!dup) nsplit[nn++] = nb;
  }
  for (int64_t kb = 1; kb <= 256 && (kb == 1 || cdiv(k->k, kb) >= R); kb *= 2)
    for (int im = 0; im < ns && (im == 0 || cdiv(k->m, splits[im]) >= S); im++)
      for (int in_ = 0; in_ < nn; in_++)
        for (int o = 0; o < 2; o++) {
          const int64_t mb = splits[im], nb = nsplit[in_];
          if (in_ > 0 && cdiv(k->n, nb) < C) continue;
          if (o && kb > 1) continue; /* the order matters only with one K step */
          if (es > 1 && kb > 1) continue; /* epilogue pieces: with one K step only */
          /* same blocks as a smaller split: size_blocking would round it to that one */
          if (cdiv(k->m, cdiv(k->m, mb)) != mb || cdiv(k->n, cdiv(k->n, nb)) != nb || cdiv(k->k, cdiv(k->k, kb)) != kb)
            continue;
          blocking c;
          memset(&c, 0, sizeof c);
          c.mb = mb;
          c.nb = nb;
          c.kb = kb;
          c.n_outer = o;
          c.es = es;
          /* a blocking slower than this cannot win (better()) */
          double limit = have ? best->cycles * 1.01 : INFINITY;
          size_blocking(be, k, ea, eb, lhs, rhs, epi, a_hbm, b_hbm, budget, trial, limit, &c);
          if (c.mb != mb || c.nb != nb || c.kb != kb) continue; /* same blocks as a smaller split */
          if (!smallest->tiles || c.need < smallest->need) *smallest = c;
          if (c.need > budget || (trial > 0 && c.alloc > trial)) continue;
          if (!have || better(&c, best)) *best = c;
          have = 1;
        }
  return have;
}

/* Matmul blocks and loop order, chosen by the cost model (docs/isa.md): every split of M
 * and N into 1-8, 12, 16, 24, ... 256 blocks and of K into 2^i blocks (K only down to the
 * MXU rows, M to the sublanes, N to the MXU columns) in both block orders whose double-buffered A, B,
 * output and epilogue blocks fit the VMEM budget; the estimated fastest wins. With one K
 * step the block of the outer loop's operand stays in VMEM while the inner loop's blocks
 * stream past it, so that operand is read once; the other once per outer block. */
static tpu_status plan_matmul(tpu__be *be, const tpu_instr *in, tpu__kinfo *k) {
  int64_t budget = tpu__vmem_budget(be->chip);
  int64_t ea = (int64_t)tpu_dtype_size(k->mm->operands[0]->shape.dtype);
  int64_t eb = (int64_t)tpu_dtype_size(k->mm->operands[1]->shape.dtype);
  int64_t lhs, rhs, epi;
  matmul_operand_bytes(be, in, k, &lhs, &rhs, &epi);
  k->epi_bytes = epi;
  /* Operands kept in VMEM (known once buffer-assign placed them; its trial plans, made
   * before, count every operand's slots) take no tile buffers; the plan then stays within
   * the VMEM the trial plan took, which buffer-assign kept clear of resident values. */
  int a_hbm = !(k->mm_lhs >= 0 && tpu__be_reads_vmem(be, in->operands[k->mm_lhs], in));
  int b_hbm = !(k->mm_rhs >= 0 && tpu__be_reads_vmem(be, in->operands[k->mm_rhs], in));
  int64_t trial = !a_hbm || !b_hbm ? k->ws : 0;
  if (a_hbm && b_hbm && k->mm_planned) /* the trial plan, made with the same inputs */
    return add_matmul_slots(be, k, epi);
  mm_key key;
  memset(&key, 0, sizeof key); /* padding too: compared and hashed as bytes */
  key.m = k->m;
  key.n = k->n;
  key.k = k->k;
  key.b = k->b;
  key.out_bytes = k->out_bytes;
  key.passes = k->passes;
  key.dtype = k->mm_dtype;
  key.i8_wide = k->mm_i8_wide;
  key.ea = ea;
  key.eb = eb;
  key.lhs = lhs;
  key.rhs = rhs;
  key.epi = epi;
  key.a_hbm = a_hbm;
  key.b_hbm = b_hbm;
  key.trial = trial;
  const mm_slot *seen = mm_find(be->mm_memo, &key);
  if (seen && seen->used) return take_plan(be, k, &seen->best, a_hbm, b_hbm, epi);
  blocking best, smallest;
  memset(&best, 0, sizeof best);
  memset(&smallest, 0, sizeof smallest);
  int have = search_blockings(be, k, ea, eb, lhs, rhs, epi, a_hbm, b_hbm, budget, trial, 1, &best, &smallest);
  /* No blocking fits: the output blocks (and their epilogue operands) are too large for
   * VMEM however the product is split, as when the epilogue broadcasts a small product over
   * a much larger output (a squeeze-and-excitation gate fused into its consumer: f32[8,96]
   * gating bf16[8,56,56,96]). Then the epilogue streams: each output block's epilogue
   * operands and output go through VMEM in es pieces (es = 2, 4, ..., the fewest that
   * fit) while the block's product stays; a kernel never needs more VMEM than the chip
   * gives it. */
  for (int64_t es = 2; !have && es <= 1 << 16 && es <= k->out_bytes / 512; es *= 2)
    have = search_blockings(be, k, ea, eb, lhs, rhs, epi, a_hbm, b_hbm, budget, trial, es, &best, &smallest);
  if (!have) best = smallest; /* nothing fits: the smallest, which schedule reports */
  /* An operand kept in VMEM between kernels costs no HBM bytes: with one K step, take the
   * order that moves fewer bytes given where the operands live (same blocks, same VMEM). */
  if (best.kb == 1 && (!a_hbm || !b_hbm)) {
    blocking alt = best;
    alt.n_outer = !best.n_outer;
    load_periods(&alt);
    if (blocking_bytes(&alt, a_hbm, b_hbm, 0, 0) < blocking_bytes(&best, a_hbm, b_hbm, 0, 0)) best = alt;
  }
  mm_remember(be, &key, &best);
  return take_plan(be, k, &best, a_hbm, b_hbm, epi);
}

int64_t tpu__kernel_vmem(tpu__be *be, const tpu_instr *in, tpu__kinfo *k) {
  be->dry = 1;
  k->ws = 0;
  if (k->kind == TPU__K_STREAM) (void)plan_stream(be, in, k);
  else if (k->kind == TPU__K_MATMUL) (void)plan_matmul(be, in, k);
  else if (k->kind == TPU__K_LINALG) (void)tpu__linalg_plan(be, in, k);
  else if (k->kind == TPU__K_MOSAIC) (void)tpu__mosaic_plan(be, in, k);
  be->dry = 0;
  return k->ws;
}

tpu_status tpu__pass_schedule(tpu__be *be) {
  for (int ci = 0; ci < be->m->ncomps; ci++) {
    if (!be->scheduled[ci]) continue;
    const tpu_comp *c = be->m->comps[ci];
    for (int i = 0; i < c->norder; i++) {
      const tpu_instr *in = c->order[i];
      tpu__kinfo *k = tpu__be_info(be, in);
      if (k->kind == TPU__K_STREAM) {
        TPU_TRY(plan_stream(be, in, k));
        tpu__vmem_transpose_op(be, in, k); /* a lane-moving copy out of VMEM (copy_kind.c) */
      }
      else if (k->kind == TPU__K_MATMUL) TPU_TRY(plan_matmul(be, in, k));
      else if (k->kind == TPU__K_LINALG) TPU_TRY(tpu__linalg_plan(be, in, k));
      else if (k->kind == TPU__K_MOSAIC) TPU_TRY(tpu__mosaic_plan(be, in, k));
      else if (k->kind == TPU__K_WHILE) k->trips = tpu__while_trip_count(in);
      else if (k->kind == TPU__K_COPY) k->tiles = 1;
      if (k->op >= 0) be->p->ops[k->op].tiles = k->tiles;
    }
  }
  int64_t budget = tpu__vmem_budget(be->chip);
  if (be->p->vmem_peak > budget)
    return TPU_FAIL(be->d, TPU_ERR_LIMIT, tpu_noloc(),
                    "a kernel needs %lld bytes of VMEM; %s allows %lld for tiles",
                    (long long)be->p->vmem_peak, be->chip->name, (long long)budget);
  return TPU_OK;
}
