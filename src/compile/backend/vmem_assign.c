/* Memory-space assignment (part of buffer-assign): intermediate values that fit in the VMEM
 * the kernels' own tile buffers leave free stay there between kernels (docs/timing.md). */
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "compile/backend/backend.h"
#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"
#include "ir/collective.h"
#include "ir/custom_call.h"

enum { MAX_MEM = 8 };

typedef struct {
  int idx;          /* global instruction index */
  const tpu_instr *in;
  int64_t size;     /* bytes (tiled layout, 512-aligned) */
  double benefit;   /* HBM bytes it would save: written once, read once per use */
  int64_t lo, hi;   /* live positions, inclusive */
  int reader;       /* an entry parameter copied in within the step: its first reader; else -1 */
  int beside;       /* reader >= 0: the copy runs beside its first reader (tpu__kinfo.spf_beside) */
  int mem[MAX_MEM]; /* a loop state: the instructions writing it (idx the first), each at
                     * slot smem[i] of `size / nslot` bytes */
  int smem[MAX_MEM];
  int nmem, nslot;
} cand;

typedef struct {
  int64_t lo, hi, addr, size; /* addr: bytes below the top of VMEM */
} placed;

static int cmp_benefit(const void *a, const void *b) {
  const cand *x = a, *y = b;
  if (x->benefit != y->benefit) return x->benefit > y->benefit ? -1 : 1;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return x->idx - y->idx;
}

static int is_kernel(const tpu__kinfo *k) { return k->kind == TPU__K_STREAM || k->kind == TPU__K_MATMUL; }

/* A synchronous collective with its own result buffer: its links read its operand and
 * write its result wherever they lie, VMEM as well as HBM (the XLA TPU compiler's programs
 * on one-core chips: sp_mlp_fwd's all-gathered weights, bf16[8192,2048], in S(1) and read
 * there by the matmul; tp_mlp_fwd's last matmul writes its result to S(1) for the
 * all-reduce that writes the step's output; bench/spmd/cases). */
static int is_collective(const tpu__be *be, const tpu_instr *in, const tpu__kinfo *k) {
  (void)be;
  return k->kind == TPU__K_ICI && k->own && in->op != TPU_OP_FUSION && tpu_collective_base(in->op) == in->op;
}

/* A bitcast: a view of the same bytes (the compiler's programs pass VMEM values to their
 * kernels so). */
static int is_view(const tpu_instr *u) {
  return u->op == TPU_OP_BITCAST && u->noperands == 1 && u->operands[0]->parent == u->parent;
}

/* A synchronous collective of several operands (all-gather, all-reduce, reduce-scatter,
 * all-to-all as XLA's combiners make them): a tuple of results, one per operand. */
static int combined_collective(const tpu_instr *x) {
  return x->shape.dtype == TPU_TUPLE &&
         (x->op == TPU_OP_ALL_GATHER || x->op == TPU_OP_ALL_REDUCE || x->op == TPU_OP_REDUCE_SCATTER ||
          x->op == TPU_OP_ALL_TO_ALL);
}

/* A top-k or sort returning a tuple (values and indices): its results are a multi-output
 * kernel's, kept in VMEM together. The XLA TPU compiler writes them to S(1) on v5e and v6e
 * (moe_top2_fwd_*'s routing top-k, approx_max_k's sort; libtpu probes off the corpus,
 * bench/fidelity/probes/topk_vmem.py), so the MoE mask kernel reading the indices is resident
 * (docs/timing-memory.md). TPUSIM_NO_TOPK_VMEM=1: through HBM, as before session 32. Own
 * compilation only (untiled results): a compiled program's sort keeps its results where they
 * were, a known gap (docs/timing-memory.md). */
static int multi_sort(const tpu_instr *x) {
  if (x->shape.dtype != TPU_TUPLE || (x->op != TPU_OP_TOPK && x->op != TPU_OP_SORT)) return 0;
  const tpu_shape *l = tpu__leaf(&x->shape, 0);
  return l && !l->layout_tail;
}

/* The instruction whose result v reads: a multi-output kernel's for its get-tuple-element;
 * through views, the value they view. */
static const tpu_instr *result_of(const tpu_instr *v) {
  for (int hops = 0; hops < 8 && is_view(v); hops++) v = v->operands[0];
  /* (a combined collective's results, one per operand, are read so too) */
  return v->op == TPU_OP_GET_TUPLE_ELEMENT &&
                 (v->operands[0]->op == TPU_OP_FUSION || combined_collective(v->operands[0]) ||
                  (multi_sort(v->operands[0]) && !tpu_env_flag("TPUSIM_NO_TOPK_VMEM")))
             ? v->operands[0]
             : v;
}

/* The value a while loop's state element stands for: an element read in the loop's body
 * or condition (get-tuple-element of their parameter) is the loop's input element, and one
 * read after the loop (of its result) what the body returns there, back to the instruction
 * that wrote it (loop_state_cands keeps the whole set in VMEM or none of it). Else v. */
static const tpu_instr *state_source(const tpu__be *be, const tpu_instr *v) {
  for (int hops = 0; hops < 64; hops++) {
    while (is_view(v)) v = v->operands[0];
    if (v->op != TPU_OP_GET_TUPLE_ELEMENT || !v->noperands) break;
    const tpu_instr *t = v->operands[0];
    const tpu_instr *next = NULL;
    if (t->op == TPU_OP_PARAMETER) {
      int ci = tpu__be_comp_index(be, t->parent);
      const tpu_instr *w = ci >= 0 ? be->caller[ci] : NULL;
      if (w && w->op == TPU_OP_WHILE && w->noperands && w->operands[0]->op == TPU_OP_TUPLE &&
          (w->body == t->parent || w->condition == t->parent) && v->index < w->operands[0]->noperands)
        next = w->operands[0]->operands[v->index];
    } else if (t->op == TPU_OP_WHILE && t->body->root->op == TPU_OP_TUPLE && v->index < t->body->root->noperands) {
      next = t->body->root->operands[v->index];
    }
    if (!next) break;
    v = next;
  }
  return v;
}

static const tpu__kinfo *resident_info(const tpu__be *be, const tpu_instr *v) {
  /* a compiled program reads a prefetched parameter through its copy-start / copy-done */
  for (int hops = 0; hops < 4 && (v->op == TPU_OP_COPY_DONE || v->op == TPU_OP_COPY_START || is_view(v)) && v->noperands; hops++)
    v = v->operands[0];
  const tpu__kinfo *k = tpu__be_info(be, result_of(state_source(be, v)));
  return k && (k->vres || k->xpf || k->spf) ? k : NULL;
}

/* A compiled program's own copy on chip within the step: a copy-done whose result lies in
 * memory space S(1) (VMEM) or S(3) (v4's CMEM), seen through views. The compiler runs the
 * copy beside earlier kernels and leaves it out of its per-op figures (copy-start and
 * copy-done carry no estimated_cycles); its readers read on chip (bert_fwd_b8s128d768h12
 * on v6e: the same [1024,768] x [768,768] projection 3,328 cycles with both operands so
 * copied in, 8,668 reading them from HBM; over the compiled families corpus the per-kernel
 * median |error| falls from 21-31 % to 10-18 %, docs/fidelity.md). */
static int copied_in(const tpu_instr *v) {
  for (int hops = 0; hops < 8 && is_view(v); hops++) v = v->operands[0];
  if (!tpu__in_vmem(&v->shape) && !(v->shape.layout_tail && strstr(v->shape.layout_tail, "S(3)"))) return 0;
  if (v->op == TPU_OP_COPY_DONE) return 1;
  if (v->op != TPU_OP_CUSTOM_CALL || tpu_custom_call_kind(v) != TPU_CC_CONCAT_BITCAST || v->noperands < 1) return 0;
  for (int i = 0; i < v->noperands; i++)
    if (v->operands[i]->op != TPU_OP_SLICE_DONE) return 0;
  return 1;
}

int tpu__be_copied_in(const tpu_instr *v) { return copied_in(v); }

/* tpusim's own compilation's widening convert of a vector parameter (a norm's bf16[C] scale
 * or offset to f32), a kernel of its own (fuse.c param_widening), kept in VMEM: its readers
 * read it as they read a parameter tpusim prefetched (2: not resident on its account, a share
 * of their stream costs spread over it, lower.c lower_stream), as when they read the
 * parameter itself, so the rule adds the convert's kernel and leaves its readers' charges as
 * they were. Counting them resident (their whole stream costs) moved the families own test
 * p90 v6e 36.5 -> 37.1 % and tune m_unet v6e 16.5 -> 65.1 % (the group norms' lane-split
 * broadcast, mbv2/mbconv training's standalone normalize: docs/compiler-fusion.md, Known
 * gaps). (A compiled program's convert names its memory space, S(1): unchanged.) */
static int own_param_convert(const tpu_instr *v) {
  return v->op == TPU_OP_CONVERT && v->noperands == 1 && v->operands[0]->op == TPU_OP_PARAMETER &&
         !v->shape.layout_tail && v->shape.rank == 1;
}

int tpu__be_reads_vmem(const tpu__be *be, const tpu_instr *v, const tpu_instr *reader) {
  if (copied_in(v)) return 2;
  const tpu__kinfo *k = resident_info(be, v);
  if (!k || (k->spf && k->spf_beside && k->spf_reader == tpu__be_index(be, reader))) return 0;
  return k->vres && !own_param_convert(v) ? 1 : 2;
}

/* The most VMEM the kernels at positions lo..hi take for their tile buffers. */
static int64_t tiles_top(const int64_t *ws, int64_t lo, int64_t hi) {
  int64_t top = 0;
  for (int64_t q = lo; q <= hi; q++)
    if (ws[q] > top) top = ws[q];
  return top;
}

/* How entry parameter p (of computation ci) is read: the first and last positions of its
 * readers, the first reader (global index), how many reads, whether a matmul kernel reads
 * it as lhs or rhs, and whether anything reads it otherwise: not a kernel, or, with
 * `relayout`, a convolution that must relay it out on its way in (that relayout reads it,
 * not the matrix unit: the compiler prefetches such a convolution's filter across steps
 * instead, its ResNet convolutions over 64 features, the input where it needs no relayout;
 * copies within the step take such inputs too: v5e p90 16.4 -> 20.6 % without them). */
typedef struct {
  int64_t lo, hi;
  int reader, nuse, matmul, other;
  int lone_reduce; /* reads by unfused reduces */
  int window;      /* reads by pooling window kernels in the parameter's own layout (window_read) */
  int64_t mm_hi; /* the last position of a matmul kernel reading it as lhs or rhs; -1: none */
  int64_t use_elems; /* elements its readers' results hold, once per operand it is (leaves of a tuple) */
} param_use;

/* Elements of a shape, summed over a tuple's leaves. */
static int64_t leaf_elems(const tpu_shape *s) {
  if (s->dtype != TPU_TUPLE) return tpu_shape_numel(s);
  int64_t n = 0;
  for (int i = 0; i < s->ntuple; i++) n += leaf_elems(&s->elems[i]);
  return n;
}

static int same_layout(const tpu_shape *a, const tpu_shape *b) {
  return a->has_layout && b->has_layout && a->rank == b->rank &&
         !memcmp(a->minor_to_major, b->minor_to_major, sizeof a->minor_to_major[0] * (size_t)a->rank);
}

/* Does kernel u read x (its operand o) only as the operand of pooling windows that run as
 * window kernels (window_layout.c tpu__window_kernel) in x's own layout, unfused or as the
 * fused parameter's only uses? The XLA TPU compiler then reads x in place (no relayout, no
 * element-wise op before the window) and prefetches it across steps: its window kernel
 * reads a fused parameter through a layout-preserving bitcast, which the activation test of
 * XLA's memory-space assignment (LooksLikeAnActivation, memory_space_assignment/algorithm.cc)
 * does not follow to the window. Probed with libtpu on v4, v5e and v6e: max and sum
 * pools over bf16 [16..300,20,20,128] and f32 [16,20,20,128] (3 MB to 31 MB, batch in the
 * sublanes, strides 1 and 2, windows 2 and 3) are prefetched; f32 [32,40,40,128] and
 * [8,56,56,256], row-major in and batch-in-sublanes out (a relayout inside the kernel),
 * and bf16 [8,28,28,256] averaged in f32 (a convert first) are not (families
 * maxpool2d_32x14x14x256_w5s2_valid_bf16, avgpool2d_32x14x14x64_w5s2_valid_f32 are, on
 * all four generations). */
static int window_read(const tpu_instr *u, int o, const tpu_instr *x) {
  if (u->op == TPU_OP_REDUCE_WINDOW)
    return o == 0 && tpu__window_kernel(u) && same_layout(&x->shape, &u->shape);
  if (u->op != TPU_OP_FUSION || !u->calls) return 0;
  const tpu_comp *f = u->calls;
  const tpu_instr *fp = o < f->nparams ? f->params[o] : NULL;
  int n = 0;
  for (int i = 0; fp && i < f->ninstrs; i++) {
    const tpu_instr *v = f->instrs[i];
    for (int q = 0; q < v->noperands; q++) {
      if (v->operands[q] != fp) continue;
      if (v->op != TPU_OP_REDUCE_WINDOW || q != 0 || !tpu__window_kernel(v) ||
          !same_layout(&fp->shape, &v->shape))
        return 0;
      n++;
    }
  }
  return n > 0;
}

static void param_uses(const tpu__be *be, int ci, const tpu_instr *p, int64_t np, int relayout, param_use *r) {
  const tpu_comp *e = be->m->entry;
  memset(r, 0, sizeof *r);
  r->lo = r->hi = r->mm_hi = -1;
  r->reader = -1;
  for (int i = 0; i < e->ninstrs && !r->other; i++) {
    const tpu_instr *u = e->instrs[i];
    const tpu__kinfo *ku = &be->k[be->comp_base[ci] + u->id];
    for (int o = 0; o < u->noperands; o++) {
      if (u->operands[o] != p) continue;
      if (!is_kernel(ku) || ku->pos <= 0 || ku->pos >= np) r->other = 1;
      if (r->lo < 0 || ku->pos < r->lo) r->lo = ku->pos, r->reader = be->comp_base[ci] + u->id;
      if (ku->pos > r->hi) r->hi = ku->pos;
      if (ku->kind == TPU__K_MATMUL && (o == ku->mm_lhs || o == ku->mm_rhs)) {
        r->matmul = 1;
        if (ku->pos > r->mm_hi) r->mm_hi = ku->pos;
      }
      if (u->op == TPU_OP_REDUCE) r->lone_reduce++;
      if (window_read(u, o, p)) r->window++;
      r->nuse++;
      r->use_elems += leaf_elems(&u->shape);
      if (relayout && ku->kind == TPU__K_MATMUL && o == ku->mm_lhs && ku->mm && ku->mm->op == TPU_OP_CONVOLUTION &&
          ku->mm->has_conv_dims && p->shape.rank == ku->mm->operands[0]->shape.rank &&
          tpu__needs_relayout(be->chip, &p->shape, (int)ku->mm->conv->in_batch, (int)ku->mm->conv->in_feature))
        r->other = 1;
    }
  }
}

/* The parameter an input program (compiled by XLA) prefetches across steps: the operand of
 * its copy-start marked cross_program_prefetch_index; NULL when none. */
static const tpu_instr *compiled_prefetch(const tpu_comp *e) {
  for (int i = 0; i < e->ninstrs; i++) {
    const tpu_instr *in = e->instrs[i];
    if (in->op != TPU_OP_COPY_START || in->noperands < 1 || in->operands[0]->op != TPU_OP_PARAMETER) continue;
    for (int a = 0; a < in->nattrs; a++)
      if (!strcmp(in->attrs[a].name, "cross_program_prefetch_index")) return in->operands[0];
  }
  return NULL;
}

/* Cross-program prefetch (XLA's memory-space assignment on TPU): of the entry parameters a
 * matmul kernel reads, the largest that fits is copied on chip while the previous step
 * runs, so a step in a loop of steps reads it there: into the VMEM its readers leave free
 * (of one TensorCore: each core of a megacore chip reads all of it), or else into the CMEM
 * of a chip that has one (v4: its share per TensorCore). A parameter only pooling window
 * kernels read in its own layout (window_read) is prefetched so too, and one only unfused reduces
 * read, not a fused one's nor an elementwise op's (the compiler's sums and
 * maxima over any axes of f32[1024..4096, 1024..8192] and bf16[4096,4096] on all four
 * generations: v5p only up to its 32 MiB, v4 into CMEM; (x * x).sum() and x * 2 of the
 * same arrays none; nor softmax's x, which its normalize reads too:
 * bench/fidelity/corpus/xprefetch.json). Read from the compiler's programs:
 * nearly all with a dot or convolution carry one such copy-start
 * (cross_program_prefetch_index=0), e.g. the 32 MiB weight of a bf16 [8,4096] x
 * [4096,4096] decode step on every generation, and their estimated_cycles leave the copy
 * out; on v4 it took 64 MiB but not 86 MiB (CMEM 128 MiB per two cores). Returns how many
 * VMEM placements it made in pl (0 or 1), -1 when out of memory. */
static int cross_program_prefetch(tpu__be *be, const int64_t *ws, int64_t np, placed *pl) {
  const tpu_comp *e = be->m->entry;
  const tpu_chip *ch = be->chip;
  int ci = -1;
  for (int i = 0; i < be->m->ncomps; i++)
    if (be->m->comps[i] == e) ci = i;
  /* a chip whose weights never sit on chip between steps (v1: from DDR3 through its weight
   * FIFO) marks the field absent */
  if (ci < 0 || !be->scheduled[ci] || ch->prov[TPU_CHIP_XPREFETCH_MAX_BYTES].status == TPU_PROV_ABSENT) return 0;
  int best = -1, in_vmem = 0;
  int64_t best_size = 0, best_lo = 0, best_hi = 0, best_elems = 0;
  const tpu_instr *given = compiled_prefetch(e);
  if (given) { /* the compiler chose it: on chip for the whole step (in VMEM if it fits
                  * beside every kernel's tile buffers, else read as if from CMEM) */
    for (int pi = 0; pi < e->nparams; pi++)
      if (e->params[pi] == given) best = pi;
    best_size = (tpu__padded_bytes(be, &given->shape) + 511) / 512 * 512;
    best_lo = 1;
    best_hi = np - 1;
    in_vmem = best_size <= ch->vmem_bytes - tiles_top(ws, best_lo, best_hi);
    if (best < 0) return 0;
  }
  for (int pi = 0; pi < e->nparams && !given; pi++) {
    const tpu_instr *p = e->params[pi];
    if (!tpu_dtype_is_array(p->shape.dtype)) continue;
    param_use pu;
    param_uses(be, ci, p, np, 1, &pu);
    int64_t lo = pu.lo, hi = pu.hi;
    if (!(pu.matmul || (pu.lone_reduce && pu.lone_reduce == pu.nuse) || (pu.window && pu.window == pu.nuse)) ||
        pu.other || lo < 0)
      continue;
    int64_t size = (tpu__padded_bytes(be, &p->shape) + 511) / 512 * 512;
    if (size <= 0 || size < best_size || (ch->xprefetch_max_bytes > 0 && size > ch->xprefetch_max_bytes)) continue;
    /* between buffers of one size, XLA's order for cross-program prefetch candidates
     * (DefaultCrossProgramPrefetchBufferIntervalComparator, memory_space_assignment): more
     * elements in its readers' results first, then the earlier last reader (the parameter
     * order last). An LSTM or GRU step's two weights of one size: the compiler prefetches
     * the one the first matmul reads and copies the other in beside it (libtpu, every
     * generation: lstm_step_b32i256h256 W, parameter(1), over U, parameter(0)). */
    if (best >= 0 && size == best_size &&
        (pu.use_elems < best_elems || (pu.use_elems == best_elems && hi >= best_hi)))
      continue;
    /* beside the kernels' whole scoped VMEM (scoped_vmem_bytes), not only the tiles they
     * take: the compiler's largest VMEM prefetches are 112 MiB on v5e (128 - 16), 86 MiB on
     * v6e (128 - 32; not 112 MiB), 32 MiB on v5p (64 - 16; not its 50 MiB decode weight, nor
     * 86 or 112 MiB ones), and on v4 (16 - 16) every one goes to CMEM (S(3)), 69 programs */
    int64_t tiles = tiles_top(ws, lo, hi);
    if (ch->scoped_vmem_bytes > tiles) tiles = ch->scoped_vmem_bytes;
    int fits_vmem = size <= ch->vmem_bytes - tiles;
    if (!fits_vmem && size > ch->cmem_bytes) continue;
    best = pi;
    in_vmem = fits_vmem;
    best_size = size;
    best_elems = pu.use_elems;
    best_lo = lo;
    best_hi = hi;
  }
  if (best < 0) return 0;
  tpu__kinfo *k = &be->k[be->comp_base[ci] + e->params[best]->id];
  /* in CMEM, outside the kernels' VMEM, when it does not fit there (a compiled program's
   * own choice on a chip without CMEM: VMEM as the compiler says, not placed) */
  k->xpf = in_vmem || ch->cmem_bytes <= 0 ? 1 : 2;
  if (!in_vmem) return 0;
  int64_t cap = ch->vmem_bytes * (ch->tensorcores > 0 ? ch->tensorcores : 1);
  k->vres_off = cap - best_size;
  pl[0].lo = best_lo;
  pl[0].hi = best_hi;
  pl[0].addr = 0;
  pl[0].size = best_size;
  return tpu_program_add_vmem(be->p, -1, k->vres_off, best_size, 1) < 0 ? -1 : 1;
}

/* In-step prefetch (XLA's memory-space assignment on TPU): an entry parameter that a matmul
 * kernel reads, and only kernels read, is copied into VMEM while the kernels before its
 * first reader run, and read there (the compiler's programs: 41-44 per generation copy
 * weights in with copy-start / copy-done; layer_bwd_b1s512d512 on v6e copies six of its nine
 * weights so and runs every projection from VMEM). A parameter the first kernel reads has
 * nothing before it to hide the copy; when a later kernel reads it again (a matmul, or a
 * vector kernel on a chip whose VMEM reads cost less than HBM's: v6e), it is copied beside
 * its first reader instead, which reads HBM (the compiler's norm and softmax programs, every
 * generation: the reduction reads x, the normalize its copy-done). Each is a candidate
 * beside the values (benefit: the reads it saves), live from the step's first kernel to its
 * last reader; each TensorCore of a megacore chip holds a copy (v5p: layer and convolution
 * backward passes 1-11 points nearer the compiler, docs/fidelity.md).
 * Returns the new count of candidates. */
static int step_prefetch_cands(tpu__be *be, int64_t np, cand *c, int nc, int64_t cores) {
  const tpu_comp *e = be->m->entry;
  int ci = tpu__be_comp_index(be, e);
  if (ci < 0 || !be->scheduled[ci]) return nc;
  int64_t first = -1; /* the step's first kernel */
  for (int i = 0; i < e->ninstrs; i++) {
    const tpu__kinfo *ku = &be->k[be->comp_base[ci] + e->instrs[i]->id];
    if (is_kernel(ku) && ku->pos > 0 && ku->pos < np && (first < 0 || ku->pos < first)) first = ku->pos;
  }
  for (int pi = 0; first > 0 && pi < e->nparams; pi++) {
    const tpu_instr *p = e->params[pi];
    tpu__kinfo *kp = &be->k[be->comp_base[ci] + p->id];
    /* a compiled program (tiled layouts) copies in what its compiler chose, itself */
    if (kp->xpf || !tpu_dtype_is_array(p->shape.dtype) || p->shape.layout_tail) continue;
    param_use pu;
    param_uses(be, ci, p, np, 0, &pu);
    if (pu.other || pu.lo < first) continue;
    /* before its first reader (a matmul reads it, and some kernel runs before), or beside
     * it: read again later by a matmul, or by vector kernels on a chip whose compiler
     * charges VMEM reads less than HBM's (vmem_read_cost) */
    int before = pu.matmul && pu.lo > first;
    int beside = !before && pu.hi > pu.lo && (pu.mm_hi > pu.lo || be->chip->vmem_read_cost < 1);
    if (!before && !beside) continue;
    int64_t size = (tpu__padded_bytes(be, &p->shape) + 511) / 512 * 512;
    if (size <= 0) continue;
    c[nc].idx = be->comp_base[ci] + p->id;
    c[nc].in = p;
    c[nc].size = size * cores; /* each core of a megacore chip copies all of it */
    c[nc].benefit = (double)size * (pu.nuse - beside);
    c[nc].beside = beside;
    c[nc].lo = first;
    c[nc].hi = pu.hi;
    c[nc].reader = pu.reader;
    nc++;
  }
  return nc;
}

/* Whether every reader of value v (in its computation, through views) is a kernel or a
 * synchronous collective with its own result buffer, or: the root tuple `root` at slot
 * `slot` (a loop body passing its state on unchanged), or the input tuple of a later or
 * inner while loop whose body passes that element through unchanged and whose every reader
 * of it qualifies so too, or the root of an enclosing loop's body (v, an inner loop's
 * state, becomes that loop's next state: an element whose readers qualify too, as
 * loop_elem_ok checks; the compiler's fsdp_scan_step keeps the windowed einsum's
 * accumulator, which the backward scan body returns as its carry, in S(1) through both
 * loops). *hi: the last position of those readers. */
static int state_readers_ok(const tpu__be *be, const tpu_instr *v, const tpu_instr *root, int slot, int64_t *hi,
                            int depth);

static int loop_elem_ok(const tpu__be *be, const tpu_instr *w, int e, int pass, int64_t *hi, int depth) {
  const tpu_comp *cs[2] = {w->body, w->condition};
  for (int c = 0; c < 2; c++) {
    const tpu_comp *cc = cs[c];
    if (!cc || cc->nparams != 1) return 0;
    const tpu_instr *bp = cc->params[0];
    for (int i = 0; i < cc->ninstrs; i++) {
      const tpu_instr *g = cc->instrs[i];
      for (int o = 0; o < g->noperands; o++)
        if (g->operands[o] == bp && g->op != TPU_OP_GET_TUPLE_ELEMENT) return 0;
      if (g->op != TPU_OP_GET_TUPLE_ELEMENT || g->operands[0] != bp || g->index != e) continue;
      if (!state_readers_ok(be, g, c == 0 && pass ? cc->root : NULL, e, hi, depth + 1)) return 0;
    }
  }
  const tpu__kinfo *kw = tpu__be_info(be, w);
  if (kw && kw->pos > *hi) *hi = kw->pos;
  const tpu_comp *pc = w->parent;
  for (int i = 0; i < pc->ninstrs; i++) { /* the loop's result: read by element */
    const tpu_instr *g = pc->instrs[i];
    for (int o = 0; o < g->noperands; o++)
      if (g->operands[o] == w && g->op != TPU_OP_GET_TUPLE_ELEMENT) return 0;
    if (g->op == TPU_OP_GET_TUPLE_ELEMENT && g->operands[0] == w && g->index == e &&
        !state_readers_ok(be, g, NULL, -1, hi, depth + 1))
      return 0;
  }
  return 1;
}

static int state_readers_ok(const tpu__be *be, const tpu_instr *v, const tpu_instr *root, int slot, int64_t *hi,
                            int depth) {
  const tpu_comp *c = v->parent;
  if (depth > 16) return 0;
  for (int i = 0; i < c->ninstrs; i++) {
    const tpu_instr *u = c->instrs[i];
    for (int o = 0; o < u->noperands; o++) {
      if (u->operands[o] != v) continue;
      if (u == root && (slot < 0 || o == slot)) continue;
      if (is_view(u)) {
        if (!state_readers_ok(be, u, NULL, -1, hi, depth + 1)) return 0;
        continue;
      }
      const tpu__kinfo *ku = tpu__be_info(be, u);
      if (ku && (is_kernel(ku) || is_collective(be, u, ku)) && ku->own) {
        if (ku->pos > *hi) *hi = ku->pos;
        continue;
      }
      if (u == c->root && u->op == TPU_OP_TUPLE) { /* the enclosing loop's next state there */
        int ci = tpu__be_comp_index(be, c);
        const tpu_instr *wo = ci >= 0 ? be->caller[ci] : NULL;
        if (wo && wo->op == TPU_OP_WHILE && wo->body == c && loop_elem_ok(be, wo, o, 0, hi, depth + 1)) continue;
      }
      const tpu_instr *w = NULL; /* an inner or later loop's input */
      for (int j = 0; u->op == TPU_OP_TUPLE && j < c->ninstrs && !w; j++)
        if (c->instrs[j]->op == TPU_OP_WHILE && c->instrs[j]->operands[0] == u) w = c->instrs[j];
      const tpu_instr *r = w ? w->body->root : NULL;
      if (!r || r->op != TPU_OP_TUPLE || o >= r->noperands || r->operands[o]->op != TPU_OP_GET_TUPLE_ELEMENT ||
          r->operands[o]->operands[0] != w->body->params[0] || r->operands[o]->index != o ||
          !loop_elem_ok(be, w, o, 1, hi, depth + 1))
        return 0;
    }
  }
  return 1;
}

/* A value qualifies for VMEM as a kernel's result (the candidates of tpu__assign_vmem): a
 * single array written by a kernel or synchronous collective with its own buffer; in a
 * compiled program (tiled layout) only where its compiler put it (S(1)). Its bytes, or 0. */
static int64_t state_member_bytes(const tpu__be *be, const tpu_instr *x) {
  const tpu__kinfo *k = tpu__be_info(be, x);
  if (!k || !(is_kernel(k) || is_collective(be, x, k)) || !k->own || k->nleaves != 1 || k->vres || k->pos <= 0 ||
      !tpu_dtype_is_array(x->shape.dtype) || x->shape.rank == 0)
    return 0;
  if (x->shape.layout_tail && !tpu__in_vmem(&x->shape)) return 0;
  return (tpu__value_bytes(be, x, &x->shape) + 511) / 512 * 512;
}

/* A loop state element the body writes as one result of a multi-output kernel (a scan's
 * stack updated in place by a dynamic-update-slice fused with the step's other outputs,
 * since 878dbf51): the kernel's results stay together (tpu__assign_vmem), so the state's
 * slot holds all of them. g: the get-tuple-element of the kernel f in the body. *all: the
 * kernel's bytes (every result). Returns the element's bytes, or 0 when the kernel does not
 * qualify: every result array, each in VMEM where a compiled program put it, each read only
 * as state_readers_ok allows (*hi: their last reader). */
static int64_t state_leaf_bytes(const tpu__be *be, const tpu_instr *g, const tpu_instr *root, int slot, int64_t *all,
                                int64_t *hi) {
  const tpu_instr *f = g->operands[0];
  const tpu__kinfo *k = tpu__be_info(be, f);
  if (f->op != TPU_OP_FUSION || !k || !is_kernel(k) || !k->own || k->vres || k->pos <= 0 || k->nleaves < 2 ||
      f->shape.dtype != TPU_TUPLE || g->index < 0 || g->index >= k->nleaves)
    return 0;
  int64_t mine = 0, sum = 0;
  for (int l = 0; l < k->nleaves; l++) {
    const tpu_shape *ls = tpu__leaf(&f->shape, l);
    if (!ls || !tpu_dtype_is_array(ls->dtype) || (ls->layout_tail && !tpu__in_vmem(ls))) return 0;
    int64_t b = (tpu__value_bytes(be, f, ls) + 511) / 512 * 512;
    sum += b;
    if (l == g->index) mine = b;
  }
  const tpu_comp *c = f->parent;
  for (int i = 0; i < c->ninstrs; i++) { /* each result: read by element, as state allows */
    const tpu_instr *u = c->instrs[i];
    for (int o = 0; o < u->noperands; o++)
      if (u->operands[o] == f && u->op != TPU_OP_GET_TUPLE_ELEMENT) return 0;
    if (u->op != TPU_OP_GET_TUPLE_ELEMENT || u->operands[0] != f) continue;
    if (!state_readers_ok(be, u, root, u->index == g->index ? slot : -1, hi, 0))
      return 0;
  }
  *all = sum;
  return mine;
}

/* The loop state (XLA's memory-space assignment places a while loop's state in alternate
 * memory as one: the loop's input, its body's parameter, what the body returns and the
 * loop's result, the buffers buffer-assign's loop_state joins): a state element that a
 * kernel writes before the loop and the body rewrites in place each iteration (a scan's
 * stack of saved activations updated by dynamic-update-slice, a windowed matmul's
 * accumulator), read only by kernels in the body, the condition and after the loop, stays
 * in VMEM for the whole loop when it fits: the XLA TPU compiler's v5e programs keep such
 * state in S(1) (bench/spmd fsdp_scan_step: three bf16[4,1024,2048] stacks and its
 * windowed einsums' state; fsdp_mlp_step: the all-gathered bf16[8192,2048] weight and the
 * accumulators of its windowed loops; memory_analysis() counts none of it as temp). An input
 * several elements start from (one zero broadcast for three stacks) is copied into each
 * (XLA's copy insertion): one slot per element, all or none; so is a new value the body
 * writes while the old one is still to be read (a windowed einsum's collective-permuted
 * shard, sent on before the matmul reads the one it replaces): a slot beside the input's.
 * Returns the new count. */
static int loop_state_cands(tpu__be *be, int64_t np, cand *c, int nc, const int *nuse) {
  const tpu_module *m = be->m;
  for (int ci = 0; ci < m->ncomps; ci++) {
    if (!be->scheduled[ci]) continue;
    const tpu_comp *cc = m->comps[ci];
    for (int i = 0; i < cc->ninstrs; i++) {
      const tpu_instr *w = cc->instrs[i];
      if (w->op != TPU_OP_WHILE || !w->noperands || w->operands[0]->op != TPU_OP_TUPLE) continue;
      const tpu_instr *x = w->operands[0], *r = w->body->root;
      if (r->op != TPU_OP_TUPLE || r->noperands != x->noperands) continue;
      for (int e = 0; e < x->noperands; e++) {
        const tpu_instr *xo = result_of(x->operands[e]), *vo = result_of(r->operands[e]);
        if (xo != x->operands[e] || (vo != r->operands[e] && vo->op != TPU_OP_FUSION) || vo->parent != w->body)
          continue;
        int dup = 0; /* an earlier element of the same input: its candidate covers this one */
        for (int f = 0; f < e; f++) dup |= x->operands[f] == xo;
        if (dup) continue;
        int64_t size = state_member_bytes(be, xo);
        if (!size) continue;
        cand k = {0};
        k.idx = tpu__be_index(be, xo);
        k.in = xo;
        k.reader = -1;
        const tpu__kinfo *kx = tpu__be_info(be, xo);
        k.lo = kx->pos;
        k.hi = kx->pos;
        if (!state_readers_ok(be, xo, x, -1, &k.hi, 0)) continue;
        int ok = 1, pass = 0;
        for (int f = e; f < x->noperands; f++) { /* elements the body passes on unchanged share it */
          const tpu_instr *g = r->operands[f];
          pass |= x->operands[f] == xo && g->op == TPU_OP_GET_TUPLE_ELEMENT &&
                  g->operands[0] == w->body->params[0] && g->index == f;
        }
        k.nslot = 1;
        int64_t slot_bytes = size;
        for (int f = e; f < x->noperands && ok; f++) {
          if (x->operands[f] != xo) continue;
          const tpu_instr *vf = r->operands[f];
          if (vf->op == TPU_OP_GET_TUPLE_ELEMENT && vf->operands[0] == w->body->params[0] && vf->index == f) {
            ok = loop_elem_ok(be, w, f, 1, &k.hi, 0);
            continue;
          }
          const tpu_instr *vk = result_of(vf);
          const tpu__kinfo *kv = tpu__be_info(be, vk);
          /* the body rewrites it (in place: buffer-assign's loop_state joins the two, its
           * input dying into the loop) and every reader reads it as a kernel; written alone
           * or as one result of a multi-output kernel, whose other results then share the
           * slot (state_leaf_bytes) */
          int64_t all = size;
          if (vk == vf)
            ok = vf->parent == w->body && state_member_bytes(be, vf) == size && state_readers_ok(be, vf, r, f, &k.hi, 0);
          else
            ok = vf->op == TPU_OP_GET_TUPLE_ELEMENT && vk->parent == w->body &&
                 state_leaf_bytes(be, vf, r, f, &all, &k.hi) == size;
          /* an input still read when the body writes the new value (its old value read after
           * that write, or after the loop): the new value is copied into the state (XLA's copy
           * insertion), so it takes a slot of its own beside the input's */
          int copied = kv && kx->last_use > kv->pos;
          ok = ok && kv && k.nmem < MAX_MEM && loop_elem_ok(be, w, f, 0, &k.hi, 0);
          if (!ok) break;
          int slot = !pass && !k.nmem && !copied ? 0 : k.nslot++;
          if (all > slot_bytes) slot_bytes = all;
          k.mem[k.nmem] = tpu__be_index(be, vk);
          k.smem[k.nmem++] = slot;
          k.benefit += (double)size * (1.0 + nuse[tpu__be_index(be, vk)]);
        }
        if (!ok || k.hi >= np) continue;
        k.size = slot_bytes * k.nslot;
        k.benefit += (double)size * (1.0 + nuse[k.idx]);
        c[nc++] = k;
      }
    }
  }
  return nc;
}

/* A compiled program's matmul kernel whose one result array lies in VMEM (S(1)) and is read
 * only by the program's own copy-starts, which take it to HBM: the compiler's kernel writes
 * VMEM and its figure leaves the copy out (copy-start / copy-done carry no estimated_cycles,
 * as for the copies in, copied_in), the copy running beside the kernels after it. Such a
 * kernel is marked evict: it writes on chip (lower.c), and its readers, through the copy,
 * read HBM. The compiler's v6e weight-gradient kernels with the SGD update fused, bf16
 * [512,512] into S(1) then copied out: 3,698 cycles (gpt2_train_b8s128d512h8), where
 * tpusim writing HBM took 6,462 (its matmul_write_s and the exposed systolic fill); over
 * the tune split's compiled v6e programs such kernels ran at a median 2.49x the compiler's
 * figure, the matmul kernels writing VMEM for a kernel at 1.19x (docs/timing-mxu.md). */
/* Every array leaf of s lies in VMEM (S(1)). */
static int all_in_vmem(const tpu_shape *s) {
  if (s->dtype != TPU_TUPLE) return tpu_dtype_is_array(s->dtype) && tpu__in_vmem(s);
  for (int i = 0; i < s->ntuple; i++)
    if (!all_in_vmem(&s->elems[i])) return 0;
  return s->ntuple > 0;
}

static void mark_evictions(tpu__be *be, const int *nuse, const int *ncopy) {
  const tpu_module *m = be->m;
  for (int ci = 0; ci < m->ncomps; ci++) {
    if (!be->scheduled[ci]) continue;
    const tpu_comp *cc = m->comps[ci];
    for (int i = 0; i < cc->ninstrs; i++) {
      const tpu_instr *in = cc->instrs[i];
      int gi = be->comp_base[ci] + in->id;
      tpu__kinfo *k = &be->k[gi];
      if (k->kind == TPU__K_STREAM && k->own && !k->vres && nuse[gi] && ncopy[gi] == nuse[gi] && in != result_of(cc->root) &&
          all_in_vmem(&in->shape)) {
        k->evict = 1;
        continue;
      }
      if (k->kind != TPU__K_MATMUL || !k->own || k->nleaves != 1 || k->vres || !nuse[gi] || ncopy[gi] != nuse[gi] ||
          !tpu_dtype_is_array(in->shape.dtype) || !tpu__in_vmem(&in->shape) || in == result_of(cc->root))
        continue;
      k->evict = 1;
    }
    /* A multi-output loop fusion's results one by one: a leaf in VMEM (S(1)) read through its
     * get-tuple-elements only by copy-starts is written on chip, the others to HBM (the
     * compiler's update of a donated parameter tree writes the momentum into S(1) for its
     * copy out and the parameter to HBM: vmem_update.py momentum_b, adam_b, adam_d). */
    for (int i = 0; i < cc->ninstrs; i++) {
      const tpu_instr *g = cc->instrs[i];
      if (g->op != TPU_OP_GET_TUPLE_ELEMENT || g->noperands != 1 || g->operands[0]->op != TPU_OP_FUSION || g->index < 0 ||
          g->index >= 64 || !tpu_dtype_is_array(g->shape.dtype) || !tpu__in_vmem(&g->shape))
        continue;
      const tpu_instr *f = g->operands[0];
      tpu__kinfo *k = &be->k[be->comp_base[ci] + f->id];
      if (k->kind != TPU__K_STREAM || !k->own || k->vres || k->evict) continue;
      int uses = 0, copies = 0;
      for (int j = 0; j < cc->ninstrs; j++) {
        const tpu_instr *u = cc->instrs[j];
        for (int o = 0; o < u->noperands; o++)
          if (u->operands[o] == g) uses++, copies += u->op == TPU_OP_COPY_START;
      }
      if (uses && uses == copies && g != cc->root) k->evict_leaves |= (uint64_t)1 << g->index;
    }
  }
}

tpu_status tpu__assign_vmem(tpu__be *be) {
  const tpu_module *m = be->m;
  int64_t cores = be->chip->tensorcores > 0 ? be->chip->tensorcores : 1;
  int64_t cap = be->chip->vmem_bytes * cores;
  if (cap <= 0 || be->ninstrs == 0) return TPU_OK;
  int64_t np = be->npos + 2;
  int64_t *ws = tpu_calloc((size_t)np, sizeof *ws);
  int *nuse = tpu_calloc((size_t)be->ninstrs, sizeof *nuse);
  unsigned char *bad = tpu_calloc((size_t)be->ninstrs, 1);
  int *ncopy = tpu_calloc((size_t)be->ninstrs, sizeof *ncopy);
  cand *c = tpu_calloc((size_t)be->ninstrs, sizeof *c);
  placed *pl = tpu_calloc((size_t)be->ninstrs, sizeof *pl);
  tpu_status st = TPU_OK;
  if (!ws || !nuse || !bad || !ncopy || !c || !pl) {
    st = TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
    goto done;
  }
  /* Each kernel's working set at its position, and who uses what. A value qualifies only
   * when every use is a kernel of the same computation with its own result buffer (no
   * aliases, control ops or computation results pass it on). */
  for (int ci = 0; ci < m->ncomps; ci++) {
    if (!be->scheduled[ci]) continue;
    const tpu_comp *cc = m->comps[ci];
    bad[be->comp_base[ci] + result_of(cc->root)->id] = 1; /* results leave through HBM or the caller */
    for (int i = 0; i < cc->ninstrs; i++) {
      const tpu_instr *u = cc->instrs[i];
      tpu__kinfo *ku = &be->k[be->comp_base[ci] + u->id];
      if ((is_kernel(ku) || ku->kind == TPU__K_LINALG) && ku->pos > 0 && ku->pos < np) {
        int64_t w = tpu__kernel_vmem(be, u, ku);
        if (w > ws[ku->pos]) ws[ku->pos] = w;
      }
      if (result_of(u) != u) continue; /* a result of a multi-output kernel, or a view: its readers count */
      for (int o = 0; o < u->noperands; o++) {
        int oi = tpu__be_index(be, result_of(u->operands[o]));
        if (oi < 0) continue;
        nuse[oi]++;
        if (u->op == TPU_OP_COPY_START) ncopy[oi]++;
        if (!(is_kernel(ku) || is_collective(be, u, ku)) || !ku->own || u->operands[o]->parent != u->parent) bad[oi] = 1;
      }
    }
  }
  /* A megacore chip (two TensorCores as one device, v5p, v4) keeps no values between
   * kernels: its cores split a producer and its consumer along different dimensions, so
   * neither core's VMEM holds what the other will read. Measured over the compiled programs
   * of bench/fidelity (results of 1 MiB or more in memory space S(1)): 513 on v5e, 538 on
   * v6e (one TensorCore each), 16 on v5p, the largest 16 MiB, where tpusim kept up to 96 MB
   * (docs/fidelity.md). */
  /* Nor does a chip whose kernels' scoped VMEM takes all of it (v4: 16 of 16 MiB): its
   * compiler keeps values between kernels in CMEM (memory space S(3)), read at a cost of
   * their own, never in VMEM: no value of any v4 program in bench/fidelity/compiled or the
   * compiled families corpus is in S(1), 5,165 are in S(3) (attention's f32[8,512,512] scores
   * there: 43.4 us for the kernel writing them on v4, where tpusim with them in VMEM had
   * 17.1 us and through HBM 27.2 us). Such values go through HBM here. */
  mark_evictions(be, nuse, ncopy);
  int nc = 0;
  int room_between = be->chip->scoped_vmem_bytes < be->chip->vmem_bytes;
  for (int ci = 0; cores == 1 && room_between && ci < m->ncomps; ci++) {
    if (!be->scheduled[ci]) continue;
    const tpu_comp *cc = m->comps[ci];
    for (int i = 0; i < cc->ninstrs; i++) {
      const tpu_instr *in = cc->instrs[i];
      int gi = be->comp_base[ci] + in->id;
      tpu__kinfo *k = &be->k[gi];
      if (!(is_kernel(k) || is_collective(be, in, k)) || !k->own || k->nleaves < 1 || bad[gi] || !nuse[gi] || k->pos <= 0 ||
          k->last_use < k->pos || k->last_use >= np)
        continue;
      int64_t size = 0, s1 = 0;
      int tiled = 0;
      for (int l = 0; l < k->nleaves; l++) {
        const tpu_shape *ls = tpu__leaf(&in->shape, l);
        int64_t b = ls ? tpu__value_bytes(be, in, tpu__held_shape(in, ls)) : 0;
        size += b;
        if (ls && ls->layout_tail) tiled = 1, s1 += tpu__in_vmem(ls) ? b : 0;
      }
      /* a compiled program (tiled layouts) keeps a value in VMEM only where its compiler did
       * (memory space S(1)): its other values stay in HBM (compiled v4 programs: p90 31.7 ->
       * 24.8 % against the compiler's estimates, docs/fidelity.md). A multi-output kernel's
       * results stay together: in VMEM when most of their bytes are there (the compiler's
       * attention writes its row sums to S(1) beside a 100 MB score matrix in HBM) */
      if (tiled && 2 * s1 <= size) continue;
      size = (size + 511) / 512 * 512;
      if (size <= 0 || size > cap) continue;
      c[nc].idx = gi;
      c[nc].in = in;
      c[nc].size = size;
      /* the transfers saved: the write and each read (a 16-bit result's pass is charged
       * on chip too: lower.c add_onchip) */
      c[nc].benefit = (double)size * (1.0 + nuse[gi]);
      c[nc].lo = k->pos;
      c[nc].hi = k->last_use;
      c[nc].reader = -1;
      c[nc].beside = 0;
      nc++;
    }
  }
  if (cores == 1 && room_between) nc = loop_state_cands(be, np, c, nc, nuse);
  /* the parameter the previous step prefetches first (it needs no copy in the step) */
  int npl = cross_program_prefetch(be, ws, np, pl);
  if (npl < 0) {
    st = TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
    goto done;
  }
  /* (a chip whose weights never sit on chip, v1, marks its prefetch field absent) */
  if (be->chip->prov[TPU_CHIP_XPREFETCH_MAX_BYTES].status != TPU_PROV_ABSENT)
    nc = step_prefetch_cands(be, np, c, nc, cores);
  /* Largest benefit first; each takes the lowest free address counted down from the top
   * of VMEM among the values live at the same time, and must stay clear of the tile
   * buffers (which start at offset 0) of every kernel that runs while it lives. */
  qsort(c, (size_t)nc, sizeof *c, cmp_benefit);
  for (int i = 0; i < nc; i++) {
    int64_t room = cap - tiles_top(ws, c[i].lo, c[i].hi);
    if (c[i].size > room) continue;
    int64_t addr = 0;
    for (int moved = 1; moved;) { /* first fit: bump past every overlapping placement */
      moved = 0;
      for (int j = 0; j < npl; j++)
        if (pl[j].lo <= c[i].hi && c[i].lo <= pl[j].hi && pl[j].addr < addr + c[i].size &&
            addr < pl[j].addr + pl[j].size) {
          addr = pl[j].addr + pl[j].size;
          moved = 1;
        }
    }
    if (addr + c[i].size > room) continue;
    pl[npl].lo = c[i].lo;
    pl[npl].hi = c[i].hi;
    pl[npl].addr = addr;
    pl[npl].size = c[i].size;
    npl++;
    tpu__kinfo *k = &be->k[c[i].idx];
    k->vres_off = cap - addr - c[i].size;
    int buf = tpu_program_add_vmem(be->p, -1, k->vres_off, c[i].size, 1);
    if (buf < 0) {
      st = TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
      break;
    }
    if (c[i].reader >= 0) {
      k->spf = 1;
      k->spf_reader = c[i].reader;
      k->spf_buf = buf;
      k->spf_beside = c[i].beside;
      k->spf_last = -1;
    } else {
      k->vres = 1;
    }
    for (int j = 0; j < c[i].nmem; j++) { /* a loop state's other writers: their own slots */
      tpu__kinfo *km = &be->k[c[i].mem[j]];
      km->vres = 1;
      km->vres_off = k->vres_off + c[i].smem[j] * (c[i].size / c[i].nslot);
    }
  }
done:
  tpu_free(ws);
  tpu_free(nuse);
  tpu_free(bad);
  tpu_free(ncopy);
  tpu_free(c);
  tpu_free(pl);
  return st;
}
