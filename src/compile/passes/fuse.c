/* The fuse pass: groups ops into `fusion` instructions as XLA does for a TPU.
 *
 *   kLoop    a chain of elementwise ops and cheap data movement (broadcast, reshape,
 *            transpose, slice, convert, ...): one loop over the output.
 *   kOutput  a dot or convolution with its operand producers (convert, broadcast,
 *            transpose, reshape) and its elementwise epilogue (bias add, activation,
 *            convert, scaling): the matmul unit's output is consumed in place.
 *   kInput   a reduce with the elementwise ops that produce its input.
 *
 * Groups grow from a root (visited consumers-first) towards its operands. A producer
 * joins a group only when every user of it is already in the group, so no work is done
 * twice and no cycle can form; cheap producers (scalar constants, iota, broadcasts of a
 * scalar, and an elementwise op, convert, broadcast or reshape of a few vector operations
 * whose every user can take it, as XLA's instruction fusion duplicates) are instead copied
 * into each group that uses them. An expensive producer (a dot, convolution, transcendental
 * function or division) never joins a group that reads its elements more than once through a
 * broadcast (XLA's instruction fusion: the consumer reuses the producer's elements), so a
 * small product or row statistic is its own kernel's result. Only computations that run
 * as a sequence (the entry, while conditions and bodies, conditional branches) are
 * fused; ops that call computations (while, conditional, reduce's reducer, ...) are
 * never fused across, and a group holds at most one dot, convolution or reduce.
 *
 * Then the pass's own fusions merge further (fuse_merge.c): multi-output fusion, and
 * fusion around the matrix unit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/env.h"
#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"
#include "ir/build.h"
#include "ir/custom_call.h"

typedef enum { K_LOOP, K_OUTPUT, K_INPUT } fusion_kind;
static const char *const k_kind_names[] = {"kLoop", "kOutput", "kInput"};

typedef enum { SIDE_EPI, SIDE_HEAVY, SIDE_UP } member_side; /* after, at, or feeding the heavy op */

typedef struct {
  int root;          /* instruction id */
  fusion_kind kind;
  int has_heavy;
  int *ids;          /* members (owned or copied), in the order they joined */
  unsigned char *dup;
  int n, cap;
} group;

typedef struct {
  tpu_builder *b;
  tpu_comp *c;
  tpu_uses uses;
  int n;             /* instructions in c before the pass */
  int *owner;        /* group owning each instruction, -1 for none */
  int *mark;         /* group that holds the instruction (owned or copied), -1 for none */
  unsigned char *side;
  unsigned char *need; /* an instruction's value is read outside the groups that hold it */
  unsigned char *gone; /* copied into every group that uses it: no kernel of its own */
  unsigned char *reuse; /* a member whose elements its group reads more than once (broadcast) */
  int *tried;          /* g + 1: decided while growing group g */
  struct cand { int id, mem; } *heap; /* grow's candidates (heap_push) */
  int nheap, capheap;
  group *groups;
  int ngroups, capgroups;
  tpu__made_set *made;
  const tpu_chip *chip;
} fuser;

static tpu_status nomem(fuser *f) {
  return TPU_FAIL(f->b->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory while fusing '%s'", f->c->name);
}

int tpu__fuse_heavy(const tpu_instr *in) { return in->op == TPU_OP_DOT || in->op == TPU_OP_CONVOLUTION; }

/* The op a kOutput kernel is built around: a dot, a convolution, or a pooling window that
 * slides along major dimensions only (window_layout.c: the compiler's reduce-window
 * fusions, `fusion.2` of avgpool2d_8x56x56x256 with its input's relayout and the scaling). */
static int kernel_op(const tpu_instr *in) { return tpu__fuse_heavy(in) || tpu__window_kernel(in); }

/* Produced by an op a fusion could end with (rather than a parameter or constant). */
static int computed(const tpu_instr *in) {
  return kernel_op(in) || in->op == TPU_OP_REDUCE || (tpu__fuse_loop_fusible(in) && in->op != TPU_OP_CONSTANT);
}

/* Cheap enough to copy into every group that uses it. */
static int duplicable(const tpu_instr *in) {
  if (in->op == TPU_OP_CONSTANT) return tpu_shape_numel(&in->shape) <= 1;
  if (in->op == TPU_OP_IOTA) return 1;
  if (in->op == TPU_OP_BROADCAST) return in->operands[0]->shape.rank == 0;
  return 0;
}

static int cheap(const tpu_instr *in) {
  if (tpu__divides_by_constant(in)) return 1; /* a multiply by the reciprocal, as XLA writes it */
  switch (in->op) {
    case TPU_OP_DIVIDE: case TPU_OP_REMAINDER: case TPU_OP_ATAN2: case TPU_OP_CBRT: case TPU_OP_SINE:
    case TPU_OP_COSINE: case TPU_OP_TAN: case TPU_OP_ERF:
    case TPU_OP_TRANSPOSE: case TPU_OP_CONCATENATE: case TPU_OP_PAD: case TPU_OP_REVERSE:
      return 0;
    default:
      return tpu__fuse_loop_fusible(in) && !tpu_dtype_is_complex(in->shape.dtype);
  }
}

/* A slice starting past the origin along some dimension (a shifted window of its operand). */
static int offset_slice(const tpu_instr *p) {
  if (p->op != TPU_OP_SLICE || !p->slice) return 0;
  for (int d = 0; d < p->operands[0]->shape.rank; d++)
    if (p->slice[d].start > 0) return 1;
  return 0;
}

/* A static slice of unit strides (a window of its operand; a strided slice, an associative
 * scan's x[0::2], is not probed). */
static int window_slice(const tpu_instr *u) {
  if (u->op != TPU_OP_SLICE || !u->slice) return 0;
  for (int d = 0; d < u->operands[0]->shape.rank; d++)
    if (u->slice[d].stride > 1) return 0;
  return 1;
}

/* Could user u take producer p into its fusion? */
static int takes(const tpu_instr *u, const tpu_instr *p) {
  if (kernel_op(u)) return tpu__fuse_operand_producer(p) && !(tpu__fuse_narrowing(p) && computed(p->operands[0]));
  return u->op == TPU_OP_REDUCE || tpu__fuse_loop_fusible(u);
}

/* Does x compute, through elementwise steps of at least `width` bytes an element, on a dot's
 * or convolution's result (a convert straight off the matmul, or off its transpose, counts:
 * XLA gives the dot that result type and layout)? Then the matmul's kernel stores values
 * that wide anyway, and x is its epilogue work, done once there (attention's exponent on f32 scores: QK^T's kernel computes
 * exp and its row sum, corpus attn_fwd_*). Steps in a narrower type (bf16 scores scaled and
 * masked in bf16, families attn_*, bert_*, t5_*, whisper_*, swin_*) mean the kernel stores
 * the narrow scores, and each reader recomputes x from them: the row-sum kernel and PV's
 * operand. */
static int wide_from_matmul(const tpu_instr *x, size_t width, int depth) {
  for (int k = 0; k < x->noperands; k++) {
    const tpu_instr *o = x->operands[k];
    /* the matmul's result in another layout is still its result (the kernel writes it so) */
    while ((o->op == TPU_OP_TRANSPOSE || o->op == TPU_OP_RESHAPE || o->op == TPU_OP_BITCAST || o->op == TPU_OP_COPY) &&
           o->noperands == 1 && tpu__fuse_heavy(o->operands[0]))
      o = o->operands[0];
    if (tpu__fuse_heavy(o)) {
      if (x->op == TPU_OP_CONVERT || tpu_dtype_size(o->shape.dtype) >= width) return 1;
      continue;
    }
    if (depth > 0 && tpu__fuse_loop_fusible(o) && tpu_dtype_size(o->shape.dtype) >= width &&
        wide_from_matmul(o, width, depth - 1))
      return 1;
  }
  return 0;
}

/* Is p the end of a matmul's epilogue: computed from a dot's or convolution's result (in any
 * layout) through elementwise steps of its size, each read by the next only? XLA's output
 * fusion takes a matmul's sole consumer, then that one's, into the matmul's kernel, up to the
 * first value several ops read: the kernel stores that value and its readers take it from
 * memory. The compiler's QK^T kernels store the scaled and masked scores (mistral_fwd_*'s
 * `fusion.58` returns select(mask, scores x 0.125, -big) beside its row maximum; the row-sum
 * kernel and PV's operand read them and compute no mask). */
static int elementwise_op(const tpu_instr *in) {
  tpu_op_class k = tpu_op_class_of(in->op);
  return k == TPU_CLS_UNARY || k == TPU_CLS_BINARY || k == TPU_CLS_TERNARY || in->op == TPU_OP_CONVERT ||
         in->op == TPU_OP_SELECT || in->op == TPU_OP_CLAMP;
}

static int matmul_epilogue(const fuser *f, const tpu_instr *p, int depth) {
  int64_t n = tpu_shape_numel(&p->shape);
  for (int k = 0; k < p->noperands; k++) {
    const tpu_instr *o = p->operands[k];
    if (o->op == TPU_OP_BROADCAST || o->op == TPU_OP_CONSTANT || o->op == TPU_OP_IOTA || o->op == TPU_OP_PARAMETER ||
        o->shape.dtype == TPU_TUPLE || tpu_shape_numel(&o->shape) != n)
      continue;
    if (tpu__fuse_heavy(o)) return o->op == TPU_OP_DOT;
    int step = o->op == TPU_OP_TRANSPOSE || o->op == TPU_OP_RESHAPE || o->op == TPU_OP_BITCAST ||
               o->op == TPU_OP_COPY || (cheap(o) && elementwise_op(o));
    if (step && depth > 0 && f->uses.nusers[o->id] == 1 && matmul_epilogue(f, o, depth - 1)) return 1;
  }
  return 0;
}

/* Does a reduction read p itself (a softmax's row maximum of the scores)? */
static int reduced(const fuser *f, const tpu_instr *p) {
  for (int k = 0; k < f->uses.nusers[p->id]; k++)
    if (f->uses.users[p->id][k]->op == TPU_OP_REDUCE && f->uses.users[p->id][k]->operands[0] == p) return 1;
  return 0;
}

/* A cheap producer with several users (or one user that is itself copied) is recomputed
 * in each user's fusion, as XLA's instruction fusion duplicates it, when every user can
 * take it: its result then never goes to memory. The end of a matmul's epilogue is not: the
 * matmul's kernel stores it (matmul_epilogue). */
/* Is p a convolution's first epilogue step (its result's sole reader, with broadcasts: a bias
 * add) read only by a widening convert that several kernels read (a norm's f32 view)? XLA's
 * output fusion stops at that fan-out: the convolution's kernel stores p, each reader widens
 * it. libtpu probes off the corpus (bench/fidelity/probes/ln_layout.py cnb_*, a 7x7 depthwise
 * convolution plus a bias, then a layer norm, B 2/4/8, v5e/v6e): convert_reduce_fusion returns
 * bf16(conv + bias) beside the mean's sums, and the variance and normalization kernels read it,
 * never the bias (families tune convnext_fwd_b4_28x28x192 alike). Recomputed in each reader
 * instead, tpusim's variance kernel read the bias from HBM and the raw result in VMEM, and
 * lost its stream costs (2,387 cycles on v5e against the compiler's 24,072). */
static int stored_epilogue(const fuser *f, const tpu_instr *p) {
  if (!elementwise_op(p) || f->uses.nusers[p->id] != 1) return 0;
  const tpu_instr *u = f->uses.users[p->id][0];
  if (u->op != TPU_OP_CONVERT || tpu_dtype_size(u->shape.dtype) <= tpu_dtype_size(p->shape.dtype) || f->uses.nusers[u->id] < 2)
    return 0;
  int conv = 0;
  for (int k = 0; k < p->noperands; k++) {
    const tpu_instr *o = p->operands[k];
    if (o->op == TPU_OP_BROADCAST && tpu_shape_numel(&o->shape) == tpu_shape_numel(&p->shape)) continue;
    if (o->op != TPU_OP_CONVOLUTION || f->uses.nusers[o->id] != 1 || conv++) return 0;
  }
  return conv;
}

static int shared_cheap(const fuser *f, const tpu_instr *p) {
  if (!cheap(p) || p == f->c->root || f->uses.nusers[p->id] < 1 || stored_epilogue(f, p)) return 0;
  /* (narrow values: f32 scores scaled for a row too long for the matmul's epilogue are
   * rescaled by their exponent kernel, never stored; docs/spmd.md ring attention) */
  if (f->uses.nusers[p->id] > 1 && elementwise_op(p) && matmul_epilogue(f, p, 8) &&
      ((tpu_dtype_size(p->shape.dtype) < 4 && reduced(f, p)) || tpu__fuse_residual_sum(&f->uses, p)))
    return 0; /* (and a residual add the next norm's row sums read: fuse_resid.c) */
  /* the transcendental unit's work is recomputed for vector kernels only: a matmul's
   * operand that needs it is computed in the matmul as it streams in (fusion around the
   * matrix unit, fuse_merge.c), or is its own kernel's result */
  int eup = tpu__fuse_transcendental(p);
  if (eup && wide_from_matmul(p, tpu_dtype_size(p->shape.dtype), 8)) return 0;
  for (int k = 0; k < f->uses.nusers[p->id]; k++) {
    const tpu_instr *u = f->uses.users[p->id][k];
    /* A value static slices (unit strides) read beside other users is stored once and each
     * slice copies its window out of memory, a bare `slice` kernel (a roll's two slices and its
     * concatenation): the XLA TPU compiler computes x*x+x rolled along a major dimension of
     * bf16[4,28,28,192] in one multiply_add_fusion, then slice.4 and slice.5, then the
     * concatenation (libtpu v5e, outside the corpus; bf16[197,128] rolled along its lanes
     * alike; a layer norm rolled, swin_fwd_b4_28x28x192h6_shift's fusion.24 then slice.18 and
     * slice.19), where one slice alone takes x*x+x into its kernel. */
    if (window_slice(u) || !takes(u, p) || (eup && tpu__fuse_heavy(u))) return 0;
  }
  return 1;
}

static int expensive(const tpu_instr *p);

/* A dynamic-slice reads only its window of its operand: a loop-fusible value computed for
 * it (a pad, an elementwise op) is computed in the slice's own kernel over the window, and
 * recomputed in each slice that reads it (XLA's instruction fusion takes a dynamic-slice's
 * producer into its loop fusion; the XLA TPU compiler's windowed-einsum loops select each
 * step's block by dynamic slices of a padded operand, fused that way in its final programs,
 * never stored whole). */
static int window_root(const tpu_instr *u) {
  if (u->op != TPU_OP_DYNAMIC_SLICE || u->shape.dtype == TPU_TUPLE) return 0;
  const tpu_instr *p = u->operands[0];
  return tpu__fuse_loop_fusible(p) && p->op != TPU_OP_CONSTANT && p->op != TPU_OP_IOTA &&
         tpu_shape_numel(&u->shape) < tpu_shape_numel(&p->shape);
}

/* Is every user of p a dynamic-slice reading its window of p (p its operand 0)? */
static int windows_only(const fuser *f, const tpu_instr *p) {
  if (p == f->c->root || f->uses.nusers[p->id] < 1 || expensive(p)) return 0;
  for (int k = 0; k < f->uses.nusers[p->id]; k++) {
    const tpu_instr *u = f->uses.users[p->id][k];
    if (!window_root(u) || u->operands[0] != p) return 0;
    for (int j = 1; j < u->noperands; j++)
      if (u->operands[j] == p) return 0;
  }
  return 1;
}

/* Does u read each element of its operand p more than once (a broadcast to more elements)? */
static int reuses_operand(const tpu_instr *u, const tpu_instr *p) {
  return u->op == TPU_OP_BROADCAST && u->operands[0] == p && tpu_shape_numel(&u->shape) > tpu_shape_numel(&p->shape);
}

/* Would group g read p's elements more than once: a member reading p reuses them, or reads
 * them into a value the group reuses? (Every member reading p has joined when p is decided.) */
static int reused_in_group(const fuser *f, int g, const tpu_instr *p) {
  for (int k = 0; k < f->uses.nusers[p->id]; k++) {
    const tpu_instr *u = f->uses.users[p->id][k];
    if (f->mark[u->id] == g && (f->reuse[u->id] || reuses_operand(u, p))) return 1;
  }
  return 0;
}

/* A scalar constant, or a broadcast of one. */
static int scalar_constant(const tpu_instr *x) {
  if (x->op == TPU_OP_BROADCAST) x = x->operands[0];
  return x->op == TPU_OP_CONSTANT && tpu_shape_numel(&x->shape) <= 1;
}

/* Work XLA's instruction fusion will not repeat for each reuse of its result (its
 * IsExpensive): the matrix unit's dot and convolution; the transcendental functions (exp,
 * expm1, log, log1p, logistic, power, sqrt, rsqrt, cbrt, tanh, erf, atan2); a division or
 * remainder, unless integer by a constant; sine, cosine, tangent, abs and sign of complex
 * values. (Reductions, gathers and the like never join a loop fusion here.) */
static int expensive(const tpu_instr *p) {
  if (kernel_op(p)) return 1;
  switch (p->op) {
    case TPU_OP_EXP: case TPU_OP_EXPM1: case TPU_OP_LOG: case TPU_OP_LOG1P: case TPU_OP_LOGISTIC:
    case TPU_OP_POWER: case TPU_OP_SQRT: case TPU_OP_RSQRT: case TPU_OP_CBRT: case TPU_OP_TANH:
    case TPU_OP_ERF: case TPU_OP_ATAN2: return 1;
    case TPU_OP_DIVIDE: case TPU_OP_REMAINDER:
      if (tpu__divides_by_constant(p)) return 0; /* XLA's simplifier made it a multiply */
      return !tpu_dtype_is_int(p->shape.dtype) || !scalar_constant(p->operands[1]);
    case TPU_OP_SINE: case TPU_OP_COSINE: case TPU_OP_TAN: case TPU_OP_ABS: case TPU_OP_SIGN:
      return tpu_dtype_is_complex(p->shape.dtype);
    default: return 0;
  }
}

static tpu_status push_member(fuser *f, int g, int id, int dup, member_side side) {
  group *G = &f->groups[g];
  if (G->n == G->cap) {
    int cap = G->cap ? G->cap * 2 : 8;
    int *ids = tpu_realloc(G->ids, sizeof *ids * (size_t)cap);
    if (!ids) return nomem(f);
    G->ids = ids;
    unsigned char *dd = tpu_realloc(G->dup, (size_t)cap);
    if (!dd) return nomem(f);
    G->dup = dd;
    G->cap = cap;
  }
  G->ids[G->n] = id;
  G->dup[G->n] = (unsigned char)dup;
  G->n++;
  f->reuse[id] = (unsigned char)reused_in_group(f, g, f->c->instrs[id]);
  f->mark[id] = g;
  f->side[id] = (unsigned char)side;
  if (!dup) f->owner[id] = g;
  return TPU_OK;
}

static int all_users_owned(const fuser *f, int id, int g) {
  if (f->c->instrs[id] == f->c->root) return 0;
  for (int k = 0; k < f->uses.nusers[id]; k++)
    if (f->owner[f->uses.users[id][k]->id] != g) return 0;
  return f->uses.nusers[id] > 0;
}

/* Does reshape r carry dimension d of its result (d of its operand when `of_operand`) over
 * unchanged: the first dimension on the other side that the same number of elements
 * precede has its size? (Size-1 dimensions count: [1, 8, ..] -> [8, ..] makes a new 8.) */
static int reshape_keeps(const tpu_instr *r, int d, int of_operand) {
  const tpu_shape *a = of_operand ? &r->operands[0]->shape : &r->shape, *o = of_operand ? &r->shape : &r->operands[0]->shape;
  int64_t before = 1, acc = 1;
  for (int i = 0; i < d; i++) before *= a->dims[i];
  for (int j = 0; j < o->rank; j++) {
    if (acc == before) return o->dims[j] == a->dims[d];
    acc *= o->dims[j];
  }
  return 0;
}

int tpu__fuse_batch_relayout(const tpu_instr *conv, const tpu_instr *r, int result_side) {
  if (conv->op != TPU_OP_CONVOLUTION || !conv->has_conv_dims || r->op != TPU_OP_RESHAPE) return 0;
  if (result_side) return r->operands[0]->shape.rank == conv->shape.rank && !reshape_keeps(r, (int)conv->conv->out_batch, 1);
  return r->shape.rank == conv->operands[0]->shape.rank && !reshape_keeps(r, (int)conv->conv->in_batch, 0);
}

int tpu__fuse_own_kernel(const tpu_instr *in) {
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, "s2b_kernel") || !strcmp(in->attrs[i].name, "s2b_carried") ||
        !strcmp(in->attrs[i].name, "scan_kernel") || !strcmp(in->attrs[i].name, "sas_copy"))
      return 1;
  return tpu__gather_index_kernel(in) || tpu__reshape_relayouts(in);
}

/* x, or the value a chain of reshapes and bitcasts of x starts from (a dot's result given
 * back its size-1 batch dimension by the compiler's simplifier). */
static const tpu_instr *under_reshapes(const tpu_instr *x) {
  while ((x->op == TPU_OP_RESHAPE || x->op == TPU_OP_BITCAST) && x->noperands == 1) x = x->operands[0];
  return x;
}

/* A dynamic-slice at scalar offsets (tpu__fuse_slice_producer) that several kernels read: each
 * computes it over its window (XLA's instruction fusion duplicates a producer that is not
 * expensive into each consumer that fuses it). */
static int shared_slice(const fuser *f, const tpu_instr *p) {
  if (!tpu__fuse_slice_producer(p) || p == f->c->root || f->uses.nusers[p->id] < 1 || tpu_env_flag("TPUSIM_NO_SHARED_DSLICE"))
    return 0;
  for (int k = 0; k < f->uses.nusers[p->id]; k++)
    if (!takes(f->uses.users[p->id][k], p)) return 0;
  return 1;
}

/* ApproxTopK's PartialReduce custom call (ir/custom_call.h). */
static int partial_reduce(const tpu_instr *in) {
  return in->op == TPU_OP_CUSTOM_CALL && tpu_custom_call_kind(in) == TPU_CC_PARTIAL_REDUCE;
}

/* A value computed from nothing: an iota or constant, or a broadcast, reshape or bitcast of
 * one. */
static int generated(const tpu_instr *x) {
  for (int depth = 0; depth < 8; depth++) {
    if (x->op == TPU_OP_IOTA || x->op == TPU_OP_CONSTANT) return 1;
    if ((x->op != TPU_OP_BROADCAST && x->op != TPU_OP_RESHAPE && x->op != TPU_OP_BITCAST) || x->noperands != 1) return 0;
    x = x->operands[0];
  }
  return 0;
}

/* The copy out of a long scan's blocks' view (scan_rewrite.c, scan_kernel=copy): it takes
 * nothing in, but the slices and transposes after it join it, as the XLA TPU compiler's
 * copy_bitcast_fusion does. */
static int scan_copy(const tpu_instr *p) {
  for (int i = 0; i < p->nattrs; i++)
    if (!strcmp(p->attrs[i].name, "scan_kernel")) return p->attrs[i].value && !strcmp(p->attrs[i].value, "copy");
  return 0;
}

/* Whether producer p may join group g through member m, and on which side. */
static int may_join(const fuser *f, int g, const tpu_instr *m, const tpu_instr *p, member_side *side) {
  const group *G = &f->groups[g];
  member_side ms = (member_side)f->side[m->id];
  if (tpu__fuse_own_kernel(p) && !scan_copy(p)) return 0;
  /* a scan's pad or slice of rows (scan_rewrite.c scan_rows), or the copy out of its blocks'
   * view, takes nothing in */
  for (int i = 0; i < m->nattrs; i++)
    if (!strcmp(m->attrs[i].name, "scan_kernel")) return 0;
  for (int i = 0; i < f->c->instrs[G->root]->nattrs; i++)
    if (!strcmp(f->c->instrs[G->root]->attrs[i].name, "scan_kernel")) return 0;
  /* ApproxTopK's partial reduction takes the iota of its indices into its kernel, which
   * generates them as it reads the values (the XLA TPU compiler's kCustom `fusion` around the
   * PartialReduce holds the iota: approx_max_k_b32n50257k4_f32, its fused_computation.1, no
   * s32[32,50257] written), and nothing else */
  if (partial_reduce(f->c->instrs[G->root])) {
    if (!generated(p)) return 0;
    *side = SIDE_UP;
    return 1;
  }
  /* a gather's index kernel takes only its bounds, and its concatenation the reshapes of
   * its pieces (gather_index.c) */
  const tpu_instr *gr = f->c->instrs[G->root];
  if (tpu__gather_index_kernel(gr) && !scalar_constant(p) &&
      !((gr->op == TPU_OP_CONCATENATE && (p->op == TPU_OP_RESHAPE || p->op == TPU_OP_BITCAST)) ||
        ((p->op == TPU_OP_RESHAPE || p->op == TPU_OP_BITCAST) && tpu_shape_numel(&p->shape) == 1)))
    return 0;
  if (tpu__relayout_copy(p) || tpu__relayout_copy(gr)) return 0; /* a relayout is a kernel of its own (relayout.c) */
  for (int i = 0; i < gr->nattrs; i++) /* a select-and-scatter's copy too (sas_layout.c) */
    if (!strcmp(gr->attrs[i].name, "sas_copy")) return 0;
  /* a reshape no layouts make a bitcast (a kernel of its own, above) roots a copy kernel of
   * the transpose under it and the reshapes around it, nothing else (reshape_relayout.c) */
  if (tpu__reshape_relayouts(gr) && p->op != TPU_OP_TRANSPOSE && p->op != TPU_OP_RESHAPE && p->op != TPU_OP_BITCAST)
    return 0;
  if (ms == SIDE_HEAVY || ms == SIDE_UP) {
    *side = SIDE_UP;
    if (m->op == TPU_OP_REDUCE || G->kind == K_INPUT) return tpu__fuse_loop_fusible(p) || tpu__fuse_slice_producer(p);
    /* A narrowing convert of a computed value belongs to its producer's epilogue, so the
     * narrow value is what goes to memory; taken into this consumer instead, the wide
     * value would be stored and read. */
    if (tpu__fuse_narrowing(p) && computed(p->operands[0])) return 0;
    if (m->operands[0] == p && tpu__fuse_batch_relayout(m, p, 0)) return 0;
    return tpu__fuse_operand_producer(p);
  }
  *side = SIDE_EPI;
  /* A concatenate does not take a slice that starts past the origin: the XLA TPU compiler
   * writes a concatenate as a sum (or maximum) of its operands padded into place, and such a
   * slice is a kernel of its own before it (roll_197x128_ax1_116_s8: x[:, 12:] a `slice` of
   * 2,106 cycles on v5e, then the concatenation; pad_edge and pad_reflect: every shifted
   * slice; no compiled program of the families corpus fuses one into a concatenation). */
  if (m->op == TPU_OP_CONCATENATE && offset_slice(p)) return 0;
  /* nor the negation of one: rotate_half's concatenate(-x2, x1) runs the slice and its
   * negation as a kernel of their own (the compiler's slice_negate_fusion, then the
   * concatenation as pad_maximum; libtpu probes outside the corpora, x bf16[4,1024,8,128]
   * and [4,1024,8,256], f32[4,1024,8,64], bf16[6,2048,32,256] on v5e, bf16[4,1024,8,128] on
   * v4, v5p and v6e, with or without the multiply-add after the concatenation) */
  if (m->op == TPU_OP_CONCATENATE && p->op == TPU_OP_NEGATE && p->noperands == 1 && offset_slice(p->operands[0]))
    return 0;
  /* A reverse is a kernel of its own, read in place by its users: the compiler's pad_reflect
   * runs each of its five reverses as a `reverse` op between its slice and concatenation
   * kernels (rev.9 ... rev.13 on v5e), resnext_train's filter reverse so too (rev.1). */
  if (p->op == TPU_OP_REVERSE) return 0;
  if (m->op == TPU_OP_DYNAMIC_SLICE) /* its window's producer, or its start's scalar chain (fuse_ops.c) */
    return (window_root(m) && m->operands[0] == p && tpu__fuse_loop_fusible(p)) || (m->operands[0] != p && tpu__fuse_slice_index(p));
  /* A transpose that moves the minor dimension is a copy into the new layout of its own,
   * read by its users in place, as the compiler runs it (transpose then scale: a `copy` and
   * a `multiply_bitcast_fusion`); not in a vector kernel's loop. (A matmul's result
   * transposed is written in the new layout by the matmul itself.) */
  if (!G->has_heavy && tpu__moves_minor(f->chip, p) && !tpu__fuse_heavy(under_reshapes(p->operands[0]))) return 0;
  if (tpu__fuse_loop_fusible(p) || tpu__fuse_slice_producer(p)) return 1;
  if (kernel_op(p) && !G->has_heavy && G->kind == K_LOOP && !(m->operands[0] == p && tpu__fuse_batch_relayout(p, m, 1))) {
    *side = SIDE_HEAVY;
    return 1;
  }
  /* A reduce whose result is narrowed (a bf16 sum accumulated in f32, then converted) writes
   * the narrow type itself: the XLA TPU compiler's bf16 propagation makes the reduce's result
   * bf16 (its compiled reduce_sum_*_bf16 programs are one `reduce` to bf16, no convert after
   * it), so the convert, the group's root, takes the reduce as its kernel's reduction. */
  if (p->op == TPU_OP_REDUCE && p->noperands == 2 && !G->has_heavy && G->kind == K_LOOP && m->operands[0] == p &&
      tpu__reduce_written_as(f->chip, f->c->instrs[G->root], m, p, G->n)) {
    *side = SIDE_HEAVY;
    return 1;
  }
  return 0;
}

/* The heap of producers a growing group's members read: (id, the member's index in the
 * group), the largest id first and, among equal ids, the member that joined first. */
static int heap_before(const fuser *f, int a, int b) {
  const struct cand *x = &f->heap[a], *y = &f->heap[b];
  return x->id != y->id ? x->id > y->id : x->mem < y->mem;
}

static void heap_swap(fuser *f, int a, int b) {
  struct cand t = f->heap[a];
  f->heap[a] = f->heap[b];
  f->heap[b] = t;
}

static tpu_status heap_push(fuser *f, int id, int mem) {
  if (f->nheap == f->capheap) {
    int cap = f->capheap ? f->capheap * 2 : 64;
    struct cand *nh = tpu_realloc(f->heap, sizeof *nh * (size_t)cap);
    if (!nh) return nomem(f);
    f->heap = nh;
    f->capheap = cap;
  }
  int k = f->nheap++;
  f->heap[k].id = id;
  f->heap[k].mem = mem;
  for (; k > 0 && heap_before(f, k, (k - 1) / 2); k = (k - 1) / 2) heap_swap(f, k, (k - 1) / 2);
  return TPU_OK;
}

static void heap_pop(fuser *f, int *id, int *mem) {
  *id = f->heap[0].id;
  *mem = f->heap[0].mem;
  f->heap[0] = f->heap[--f->nheap];
  for (int k = 0;;) {
    int l = 2 * k + 1, r = l + 1, top = k;
    if (l < f->nheap && heap_before(f, l, top)) top = l;
    if (r < f->nheap && heap_before(f, r, top)) top = r;
    if (top == k) break;
    heap_swap(f, k, top);
    k = top;
  }
}

/* The operands of member j of group g, onto the heap. */
static tpu_status push_operands(fuser *f, int g, int j) {
  const tpu_instr *x = f->c->instrs[f->groups[g].ids[j]];
  for (int k = 0; k < x->noperands; k++)
    if (f->mark[x->operands[k]->id] != g) TPU_TRY(heap_push(f, x->operands[k]->id, j));
  return TPU_OK;
}

/* Is slice p the first elements of its operand in memory (no offset; every dimension after
 * the first it cuts taken whole)? Then it is the operand's buffer read in place (a bitcast). */
static int prefix_slice(const tpu_instr *p) {
  const tpu_shape *o = &p->operands[0]->shape;
  if (!p->slice || o->rank != p->shape.rank) return 0;
  int cut = 0;
  for (int d = 0; d < o->rank; d++) {
    if (p->slice[d].start != 0 || (p->slice[d].stride != 1 && p->shape.dims[d] > 1)) return 0;
    if (cut && p->shape.dims[d] != o->dims[d]) return 0;
    if (p->shape.dims[d] != o->dims[d] && o->dims[d] > 1) cut = 1;
  }
  return 1;
}

/* Is p an elementwise op on a vector computed from another fusible op (an iota, a broadcast,
 * an elementwise step), not from kernel results or parameters alone? XLA's TPU fusion lets a
 * consumer that reads a producer's elements more than once (through a broadcast) take one
 * such op, never a chain: probed with libtpu (tools/tpu_compile.py, v5e) on programs outside
 * the corpus, f32[128] broadcast along 197 columns into an add: negate(p), abs(p), floor(p),
 * convert(p), p*p, p+q join the consumer; abs(negate(p)), p+1, max(p,0), p+s (s a scalar
 * parameter), convert(iota), p*3+p, compare+select are a kernel of their own (f32[128]), as are
 * f32[128,256] chains broadcast to [8,128,256] and u32[128] chains broadcast to [128,2]. JAX's
 * random bits (iota_2x32_shape's per-row counters, dropout_*, random_*) are such chains.
 * (Scalar chains are left to join: the compiler runs them on the scalar unit, no kernel.)
 * Applied to chains computed from parameters, constants and iotas only: a vector computed
 * from a reduction's result (a batch norm's mean, sum x 1/n) is a kernel of its own even as
 * one op (broadcast_source).
 * A static slice the consumer broadcasts is a kernel of its own too (probed: row 2 of
 * f32[8,256] broadcast over 128 rows, column 1 of f32[128,4] over 197 columns: `s.1`,
 * slice_bitcast_fusion), unless it is its operand's leading elements, a bitcast (element 0 of
 * u32[2], JAX's random key). */
/* Does x's value come, through fusible ops alone, from parameters, constants and iotas (no
 * kernel's result: a reduction, a matmul)? Looks at most *budget instructions (a DAG's shared
 * operands are revisited); past that, no. */
static int from_inputs(const tpu_instr *x, int *budget) {
  if (x->op == TPU_OP_PARAMETER || x->op == TPU_OP_CONSTANT || x->op == TPU_OP_IOTA) return 1;
  if (--*budget < 0 || !tpu__fuse_loop_fusible(x)) return 0;
  for (int k = 0; k < x->noperands; k++)
    if (!from_inputs(x->operands[k], budget)) return 0;
  return 1;
}

static int chained(const tpu_instr *p) {
  int budget = 256;
  if (!from_inputs(p, &budget)) return 0;
  if (p->op == TPU_OP_SLICE) /* of a stored value (a slice of fused work is not probed) */
    return !prefix_slice(p) && !tpu__fuse_loop_fusible(p->operands[0]);
  if (tpu_shape_numel(&p->shape) <= 1 || !(elementwise_op(p) || p->op == TPU_OP_COMPARE)) return 0;
  for (int k = 0; k < p->noperands; k++) {
    const tpu_instr *o = p->operands[k];
    /* values computed for p (data movement alone, a transpose or reshape of an input, is
     * not a step of work) */
    if (elementwise_op(o) || o->op == TPU_OP_COMPARE || o->op == TPU_OP_IOTA || o->op == TPU_OP_BROADCAST) return 1;
  }
  return 0;
}

/* Is p a vector (one dimension of more than one element: f32[128], or a layer norm's row
 * mean f32[32,1], which XLA's simplifier makes f32[32] before fusion) of work computed from a
 * kernel's result (an elementwise op or convert of a reduction's or matmul's result: a batch
 * norm's mean, sum x 1/n) that a member of group g reads through a broadcast to more
 * elements, directly or through the reshapes and broadcasts of one element per row between
 * them (reused_in_group)? The XLA TPU compiler keeps such a
 * vector out of the consumer: in its programs a broadcast inside a fusion reads a parameter or
 * a constant, never an op of the fusion (every non-scalar broadcast of
 * bench/fidelity/families/compiled on v5e, 1,947, reads a parameter), so a batch norm's mean
 * is a kernel of its own (resnext_fwd_b8_28x28x512_g32: broadcast_multiply_fusion, 1,826
 * cycles on v5e, read by the variance's kernel and the normalization's; libtpu probe outside
 * the corpus, v5e: the sum of bf16[8,16,16,128] over batch and space, x 1/n, subtracted from
 * x: convert_reduce_fusion, broadcast_multiply_fusion 1,825, the subtraction's kernel). Now
 * that the sums are fused into the convolutions before them (fuse_merge.c
 * conv_column_sums), this no longer adds a kernel beside reductions charged apart (see
 * chained). Vectors computed from parameters alone still join (separating them all moved
 * m_unet's group norms out of their convolutions' kernels, tune v6e 15 -> 74 %), except a
 * parameter's widening convert (param_widening), the compiler's kernel of its own. */
/* p = r * c or r / c: a reduce's result scaled by a constant (a mean, sum x 1/n). */
static int scaled_reduce(const tpu_instr *p) {
  if ((p->op != TPU_OP_MULTIPLY && p->op != TPU_OP_DIVIDE) || p->noperands != 2) return 0;
  const tpu_instr *r = under_reshapes(p->operands[0]), *c = p->operands[1];
  if (r->op != TPU_OP_REDUCE) {
    if (p->op == TPU_OP_DIVIDE) return 0;
    r = under_reshapes(p->operands[1]);
    c = p->operands[0];
  }
  return r->op == TPU_OP_REDUCE && scalar_constant(c);
}

static int broadcast_source(const fuser *f, int g, const tpu_instr *p) {
  int wide = 0;
  for (int d = 0; d < p->shape.rank; d++) wide += p->shape.dims[d] > 1;
  if (wide < 1 || !(elementwise_op(p) || p->op == TPU_OP_COMPARE)) return 0;
  if (wide > 1 && !scaled_reduce(p)) return 0;
  int budget = 256;
  if (from_inputs(p, &budget)) return 0;
  return reused_in_group(f, g, p);
}

/* Is p a widening convert of a vector parameter (a norm's bf16[C] scale or offset to f32) that
 * a member of group g reads through a broadcast? The XLA TPU compiler runs it as a top-level
 * kernel of its own, whatever reads it: every convert of a rank-1 parameter in
 * bench/fidelity/families/compiled, 249 on each generation, none fused; libtpu probes off the
 * corpus (bench/fidelity/probes/cases_param_convert.py, v5e/v6e): batch norms of
 * bf16[B,H,W,C] alone and after a convolution, an f32 activation's scale, a scale and shift,
 * a matmul's bias under GELU, 9 of 9 with `convert` f32[C] kernels, 1,820-1,826 cycles on
 * v5e, 2,118-2,121 on v6e. Its readers read its result where it stays, in VMEM, as they read
 * the parameter before (vmem_assign.c own_param_convert). The widening tpusim's dot rewrite
 * makes (dot_reduce.c `dot.widen`) still joins: the compiler broadcasts such a vector first
 * and widens in its reader (einsum_a_ba_b_a1024_b1024_bf16: one multiply_reduce_fusion). */
static int param_widening(const fuser *f, int g, const tpu_instr *p) {
  if (p->op != TPU_OP_CONVERT || p->shape.rank != 1 || p->shape.dims[0] <= 1) return 0;
  const tpu_instr *o = p->operands[0];
  if (o->op != TPU_OP_PARAMETER || tpu_dtype_size(p->shape.dtype) <= tpu_dtype_size(o->shape.dtype)) return 0;
  if (p->name && !strncmp(p->name, "dot.", 4)) return 0;
  return reused_in_group(f, g, p);
}

/* A matmul whose result (or its elementwise epilogue's) a slice cuts along its last dimension
 * (the lanes) is its own kernel's result: the XLA TPU compiler keeps a GRU step's c @ U apart from the gate math
 * that reads its three column blocks, and a dot's [24,1152] result read by three slices of
 * 384 columns under tanh/multiply/add is `fusion` then `slice_add_fusion` (libtpu v5e,
 * 4,333 + 2,072 cycles; bench/fidelity/probes/data/gru_order sl.hlo), where the same
 * epilogue over the whole result is one kOutput kernel (ns.hlo, 4,558). */
static int lane_sliced_matmul(const fuser *f, const tpu_instr *p) {
  if (p->op != TPU_OP_DOT && p->op != TPU_OP_CONVOLUTION && !(elementwise_op(p) && matmul_epilogue(f, p, 4))) return 0;
  int r = p->shape.rank;
  if (r < 1) return 0;
  for (int k = 0; k < f->uses.nusers[p->id]; k++) {
    const tpu_instr *u = f->uses.users[p->id][k];
    if (u->op == TPU_OP_SLICE && u->slice && u->shape.rank == r && u->shape.dims[r - 1] < p->shape.dims[r - 1]) return 1;
  }
  return 0;
}

/* Grows group g towards its operands, consumers first as XLA's instruction fusion visits
 * them: of the producers its members read, the latest in the computation is decided next,
 * so a producer several members read is decided once all of them have joined (a bias add
 * that a GELU reads five times is owned by the group, and the dot under it joins as the
 * group's matmul). */
static tpu_status grow(fuser *f, int g) {
  f->nheap = 0;
  for (int j = 0; j < f->groups[g].n; j++) TPU_TRY(push_operands(f, g, j));
  while (f->nheap > 0) {
    int best, mj;
    heap_pop(f, &best, &mj);
    if (f->mark[best] == g || f->tried[best] == g + 1) continue;
    const tpu_instr *p = f->c->instrs[best], *m = f->c->instrs[f->groups[g].ids[mj]];
    f->tried[best] = g + 1;
    member_side side;
    /* XLA's instruction fusion: an expensive producer stays out of a consumer that reuses
     * its elements (a small product a consumer broadcasts is its own kernel's result) */
    if (f->owner[p->id] >= 0 || !may_join(f, g, m, p, &side) ||
        (reused_in_group(f, g, p) && (expensive(p) || tpu__fuse_slice_producer(p) || chained(p) || tpu__fuse_relaid_transpose(&f->uses, p))) ||
        broadcast_source(f, g, p) || param_widening(f, g, p) ||
        lane_sliced_matmul(f, p)) {
      f->need[p->id] = 1;
      continue;
    }
    if (all_users_owned(f, p->id, g)) {
      if (side == SIDE_HEAVY) {
        f->groups[g].has_heavy = 1;
        f->groups[g].kind = p->op == TPU_OP_REDUCE ? K_INPUT : K_OUTPUT;
      }
      TPU_TRY(push_member(f, g, p->id, 0, side));
    } else if (duplicable(p) || shared_cheap(f, p) || (side == SIDE_EPI && windows_only(f, p)) || shared_slice(f, p)) {
      TPU_TRY(push_member(f, g, p->id, 1, side));
    } else {
      f->need[p->id] = 1;
      continue;
    }
    TPU_TRY(push_operands(f, g, f->groups[g].n - 1));
  }
  return TPU_OK;
}

/* Members that do real work (constants and iota are only copied along). */
static int real_members(const fuser *f, const group *G) {
  int n = 0;
  for (int j = 0; j < G->n; j++) {
    tpu_opcode op = f->c->instrs[G->ids[j]]->op;
    n += op != TPU_OP_CONSTANT && op != TPU_OP_IOTA;
  }
  return n;
}

static tpu_status form_groups(fuser *f) {
  for (int i = f->n - 1; i >= 0; i--) {
    tpu_instr *u = f->c->instrs[i];
    if (f->owner[i] >= 0) continue;
    if (f->mark[i] >= 0 && !f->need[i] && u != f->c->root) {
      /* copied into groups; no kernel unless a user outside them reads it */
      int standalone_user = 0;
      for (int k = 0; k < f->uses.nusers[i] && !standalone_user; k++) {
        int v = f->uses.users[i][k]->id;
        standalone_user = f->owner[v] < 0 && !f->gone[v];
      }
      if (!standalone_user) {
        f->gone[i] = 1;
        continue;
      }
    }
    int heavy = kernel_op(u) || partial_reduce(u), red = u->op == TPU_OP_REDUCE;
    if (!heavy && !red && !tpu__fuse_loop_fusible(u) && !window_root(u)) {
      for (int k = 0; k < u->noperands; k++) f->need[u->operands[k]->id] = 1;
      continue;
    }
    if (f->ngroups == f->capgroups) {
      int cap = f->capgroups ? f->capgroups * 2 : 16;
      group *ng = tpu_realloc(f->groups, sizeof *ng * (size_t)cap);
      if (!ng) return nomem(f);
      f->groups = ng;
      f->capgroups = cap;
    }
    int g = f->ngroups++;
    group *G = &f->groups[g];
    memset(G, 0, sizeof *G);
    G->root = i;
    G->kind = heavy ? K_OUTPUT : red ? K_INPUT : K_LOOP;
    G->has_heavy = heavy || red;
    TPU_TRY(push_member(f, g, i, 0, heavy || red ? SIDE_HEAVY : SIDE_EPI));
    TPU_TRY(grow(f, g));
    /* A convolution keeps its kernel even alone, as the XLA TPU compiler wraps every one in
     * a kOutput fusion: relayout.c then gives it the layouts at the program's edge. */
    if (real_members(f, &f->groups[g]) < 2 && u->op != TPU_OP_CONVOLUTION) {
      /* Nothing to fuse: release the members so they can root their own groups. */
      G = &f->groups[g];
      for (int j = 0; j < G->n; j++) {
        if (!G->dup[j]) f->owner[G->ids[j]] = -1;
        f->mark[G->ids[j]] = -1;
      }
      tpu_free(G->ids);
      tpu_free(G->dup);
      f->ngroups--;
      for (int k = 0; k < u->noperands; k++) f->need[u->operands[k]->id] = 1;
    }
  }
  return TPU_OK;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Builds the fused computation and the fusion instruction for group g, and points the
 * root's uses at the fusion (recorded in fwd[root id], applied once for all groups).
 * Scratch: clone[id] (members by id, then parameters),
 * stamp[id] (group of the members being built, else -1), ext (outside operands). */
static tpu_status materialize(fuser *f, int g, tpu_instr **clone, int *stamp, tpu_instr **ext, tpu_instr **fwd) {
  group *G = &f->groups[g];
  tpu_builder *b = f->b;
  tpu_comp *c = f->c, *fc;
  tpu_instr *root = c->instrs[G->root];
  /* Members in the computation's order (operands first). */
  int *ids = tpu_malloc(sizeof *ids * (size_t)G->n);
  if (!ids) return nomem(f);
  memcpy(ids, G->ids, sizeof *ids * (size_t)G->n);
  qsort(ids, (size_t)G->n, sizeof *ids, cmp_int);
  for (int j = 0; j < G->n; j++) stamp[ids[j]] = g;
  tpu_status st = tpu_build_comp(b, "fused_computation", c, &fc);
  int next = 0, opcap = 16;
  tpu_instr **ops = tpu_malloc(sizeof *ops * (size_t)opcap);
  if (st == TPU_OK && !ops) st = nomem(f);
  for (int j = 0; st == TPU_OK && j < G->n; j++) {
    tpu_instr *m = c->instrs[ids[j]];
    if (m->noperands > opcap) {
      tpu_instr **nv = tpu_realloc(ops, sizeof *ops * (size_t)m->noperands);
      if (!nv) {
        st = nomem(f);
        break;
      }
      ops = nv;
      opcap = m->noperands;
    }
    for (int k = 0; st == TPU_OK && k < m->noperands; k++) {
      tpu_instr *p = m->operands[k];
      int pid = p->id;
      if (pid < f->n && c->instrs[pid] == p && stamp[pid] == g) {
        ops[k] = clone[pid];
        continue;
      }
      /* An outside value: one parameter per distinct value. */
      int q = 0;
      while (q < next && ext[q] != p) q++;
      if (q == next) {
        char hint[32];
        snprintf(hint, sizeof hint, "param_%d", next);
        ext[next] = p;
        st = tpu_build_param(b, fc, next, hint, &p->shape, &clone[f->n + next]);
        next++;
      }
      if (st == TPU_OK) ops[k] = clone[f->n + q];
    }
    if (st == TPU_OK) st = tpu_build_clone_instr(b, fc, m, ops, &clone[m->id]);
  }
  tpu_instr *fu = NULL;
  if (st == TPU_OK) {
    tpu_build_set_root(fc, clone[root->id]);
    st = tpu_build_finish(b, fc);
  }
  if (st == TPU_OK) st = tpu_build_instr(b, c, TPU_OP_FUSION, "fusion", &root->shape, ext, next, root->loc, &fu);
  if (st == TPU_OK) st = tpu_build_set_attr(b, fu, "kind", k_kind_names[G->kind]);
  if (st == TPU_OK) st = tpu_build_set_attr(b, fu, "calls", fc->name);
  if (st == TPU_OK && !tpu__made_add(f->made, fc)) st = nomem(f);
  if (st == TPU_OK) fwd[root->id] = fu;
  for (int j = 0; j < G->n; j++) stamp[ids[j]] = -1;
  tpu_free(ids);
  tpu_free(ops);
  return st;
}

static tpu_status fuse_comp(tpu_builder *b, tpu_comp *c, tpu__made_set *made, const tpu_chip *chip) {
  fuser f;
  memset(&f, 0, sizeof f);
  f.made = made;
  f.chip = chip;
  f.b = b;
  f.c = c;
  f.n = c->ninstrs;
  TPU_TRY(tpu_build_uses(b, c, &f.uses));
  size_t n = (size_t)f.n;
  f.owner = tpu_malloc(sizeof(int) * (n + 1));
  f.mark = tpu_malloc(sizeof(int) * (n + 1));
  f.side = tpu_calloc(n + 1, 1);
  f.need = tpu_calloc(n + 1, 1);
  f.gone = tpu_calloc(n + 1, 1);
  f.reuse = tpu_calloc(n + 1, 1);
  f.tried = tpu_calloc(n + 1, sizeof *f.tried);
  /* Scratch for materializing: clones by id, then one slot per fusion parameter. */
  size_t maxops = 1;
  for (int i = 0; i < f.n; i++) maxops += (size_t)c->instrs[i]->noperands;
  tpu_instr **clone = tpu_calloc(n + maxops, sizeof *clone);
  int *stamp = tpu_malloc(sizeof(int) * (n + 1));
  tpu_instr **ext = tpu_calloc(maxops, sizeof *ext);
  tpu_instr **fwd = tpu_calloc(n + 1, sizeof *fwd);
  tpu_status st = TPU_OK;
  if (!f.owner || !f.mark || !f.side || !f.need || !f.gone || !f.reuse || !f.tried || !clone || !stamp || !ext || !fwd) st = nomem(&f);
  if (st == TPU_OK) {
    for (size_t i = 0; i < n; i++) f.owner[i] = f.mark[i] = stamp[i] = -1;
    st = form_groups(&f);
  }
  for (int g = 0; st == TPU_OK && g < f.ngroups; g++) st = materialize(&f, g, clone, stamp, ext, fwd);
  if (st == TPU_OK) tpu_build_forward(c, fwd, f.n);
  if (st == TPU_OK && f.ngroups && tpu_build_remove_dead(b, c) < 0) st = b->d->status;
  for (int g = 0; g < f.ngroups; g++) {
    tpu_free(f.groups[g].ids);
    tpu_free(f.groups[g].dup);
  }
  tpu_free(f.groups);
  tpu_free(f.owner);
  tpu_free(f.mark);
  tpu_free(f.side);
  tpu_free(f.need);
  tpu_free(f.gone);
  tpu_free(f.reuse);
  tpu_free(f.tried);
  tpu_free(f.heap);
  tpu_free(clone);
  tpu_free(stamp);
  tpu_free(ext);
  tpu_free(fwd);
  tpu_build_uses_free(&f.uses);
  return st;
}

/* The computations that run as a sequence of ops: the entry and, through while and
 * conditional, their bodies, conditions and branches. */
static tpu_status sequential_comps(tpu_builder *b, tpu_comp ***out, int *nout) {
  tpu_module *m = b->m;
  tpu_comp **list = tpu_malloc(sizeof *list * ((size_t)m->ncomps + 1));
  if (!list) return TPU_FAIL(b->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory while fusing");
  int n = 0;
  list[n++] = m->entry;
  for (int i = 0; i < n; i++) {
    tpu_comp *c = list[i];
    for (int k = 0; k < c->ninstrs; k++) {
      tpu_instr *in = c->instrs[k];
      tpu_comp *cand[2 + 256];
      int nc = 0;
      if (in->op == TPU_OP_WHILE) {
        cand[nc++] = in->condition;
        cand[nc++] = in->body;
      } else if (in->op == TPU_OP_CONDITIONAL) {
        for (int j = 0; j < in->nbranches && j < 256; j++) cand[nc++] = in->branches[j];
      } else if (in->op == TPU_OP_CALL) {
        cand[nc++] = in->to_apply;
      }
      for (int j = 0; j < nc; j++) {
        int seen = !cand[j];
        for (int q = 0; q < n && !seen; q++) seen = list[q] == cand[j];
        if (!seen && n < m->ncomps) list[n++] = cand[j];
      }
    }
  }
  *out = list;
  *nout = n;
  return TPU_OK;
}

/* A program the XLA TPU compiler compiled (its values carry tiled layouts, ":T(...)"): its
 * top-level ops are the kernels it chose, each with its own estimated_cycles; tpusim fuses
 * none of them together (sconv_b1_32x32_c128to32_k2s3_valid on v6e: a pad and a copy within
 * VMEM, 3,100 cycles each, were one tpusim kernel of 2,061). */
static int compiled_by_xla(const tpu_comp *c) {
  for (int i = 0; i < c->ninstrs; i++) {
    const tpu_shape *s = &c->instrs[i]->shape;
    if (s->layout_tail && strstr(s->layout_tail, "T(")) return 1;
  }
  return 0;
}

tpu_status tpu__pass_fuse(tpu_module *m, const tpu_compile_opts *o, tpu_diag *d) {
  tpu_builder b;
  TPU_TRY(tpu_builder_init(&b, m, d));
  tpu_comp **list = NULL;
  int n = 0;
  tpu_status st = m->entry && o->chip ? tpu__fuse_param_layouts(&b, m->entry, o->chip) : TPU_OK;
  if (st == TPU_OK) st = sequential_comps(&b, &list, &n);
  tpu__made_set made = {NULL, 0, 0};
  int compiled = m->entry && compiled_by_xla(m->entry);
  for (int i = 0; st == TPU_OK && !compiled && i < n; i++) st = tpu__gather_index_kernels(&b, list[i], o->chip);
  if (st == TPU_OK && !compiled && m->entry && o->chip) st = tpu__result_slice_copy(&b, m->entry, o->chip);
  for (int i = 0; st == TPU_OK && !compiled && i < n; i++) st = fuse_comp(&b, list[i], &made, o->chip);
  int merged = 0;
  for (int i = 0; st == TPU_OK && !compiled && i < n; i++)
    for (int found = 1, k = 0; st == TPU_OK && found && k < 4096; k++) {
      st = tpu__fuse_merge_one(&b, list[i], &made, o->chip, &found);
      merged |= found;
    }
  if (st == TPU_OK && m->entry && !compiled) st = tpu__fuse_group_layout(&b, m->entry, &made, o->chip);
  if (st == TPU_OK && m->entry && !compiled) st = tpu__s8_pad_tiles(&b, m->entry, o->chip);
  if (st == TPU_OK && m->entry) st = tpu__fuse_relayout(&b, m->entry, &made, o->chip);
  if (st == TPU_OK && m->entry) st = tpu__fuse_window_widen(&b, m->entry);
  if (st == TPU_OK && m->entry) st = tpu__fuse_param_copies(&b, m);
  if (st == TPU_OK && merged && tpu_build_remove_unused_comps(&b) < 0) st = d->status;
  tpu_free(made.v);
  tpu_free(list);
  tpu_builder_deinit(&b);
  return st;
}
