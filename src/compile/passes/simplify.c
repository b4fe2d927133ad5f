/* The simplify pass: dots with a vector operand as multiply + reduce (dot_reduce.c), then
 * constant folding with the reference kernels, algebraic identities that are exact for
 * every value (NaN and -0 included), a widening convert out of a max/min reduction, common
 * subexpressions (cse.c), dead instructions and computations; repeated until nothing
 * changes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"
#include "ir/build.h"
#include "ir/layout.h"
#include "ref/ref_int.h"

#define MAX_ROUNDS 32

/* ---- Constant folding ---- */

/* The kernel that evaluates `op` without a call context (the kernels that call
 * computations — reduce, sort, scatter, map, ... — need the interpreter and are not folded). */
static tpu_ref_kernel fold_kernel(const tpu_instr *in) {
  switch (in->op) {
    case TPU_OP_BROADCAST:
      /* A broadcast that only adds size-1 dims; real broadcasts stay cheap and fusible
       * instead of becoming big literals (XLA's constant folding skips them too). */
      return tpu_shape_numel(&in->shape) == tpu_shape_numel(&in->operands[0]->shape) ? tpu__ref_movement : NULL;
    case TPU_OP_IOTA:
    case TPU_OP_SCATTER:
    case TPU_OP_RNG_BIT_GENERATOR:
    case TPU_OP_REDUCE:
    case TPU_OP_REDUCE_WINDOW:
    case TPU_OP_SELECT_AND_SCATTER:
    case TPU_OP_SORT:
    case TPU_OP_TOPK:
    case TPU_OP_MAP: return NULL;
    default: return tpu__ref_kernel_of(in->op);
  }
}

/* Folds `in` into a constant when all its operands are constants and the result is a
 * small array (*repl = the constant). Returns 1 when folded, 0 when not, -1 on
 * out-of-memory. */
static int try_fold(tpu_builder *b, tpu_comp *c, tpu_instr *in, tpu_instr **repl) {
  if (in->op == TPU_OP_CONSTANT || in->op == TPU_OP_PARAMETER || in->noperands == 0) return 0;
  const tpu_shape *s = &in->shape;
  if (s->dtype == TPU_TUPLE || s->dtype == TPU_TOKEN) return 0;
  size_t bytes;
  if (!tpu_mul_ok((size_t)tpu_shape_numel(s), tpu_dtype_size(s->dtype), &bytes) || bytes > TPU_FOLD_MAX_BYTES) return 0;
  for (int k = 0; k < in->noperands; k++)
    if (in->operands[k]->op != TPU_OP_CONSTANT) return 0;
  tpu_ref_kernel kern = fold_kernel(in);
  if (!kern) return 0;
  const tpu_tensor *argv[8];
  const tpu_tensor **args = in->noperands <= 8 ? argv : tpu_malloc(sizeof *args * (size_t)in->noperands);
  if (!args) {
    TPU_FAIL(b->d, TPU_ERR_NOMEM, in->loc, "out of memory folding '%s'", in->name);
    return -1;
  }
  for (int k = 0; k < in->noperands; k++) args[k] = in->operands[k]->literal;
  tpu_tensor out;
  memset(&out, 0, sizeof out);
  tpu_diag kd;
  tpu_status st = kern(NULL, in, args, &out, &kd);
  if (args != argv) tpu_free((void *)args);
  if (st == TPU_ERR_NOMEM) {
    *b->d = kd;
    return -1;
  }
  if (st != TPU_OK) return 0; /* left for the run to report */
  tpu_instr *k;
  if (tpu_build_constant(b, c, "constant", &out, s, &k) != TPU_OK) return -1;
  k->loc = in->loc;
  *repl = k;
  return 1;
}

/* ---- Algebraic identities ---- */

/* The literal behind `in` when it is a constant or a broadcast of one. */
static const tpu_tensor *const_behind(const tpu_instr *in) {
  if (in->op == TPU_OP_BROADCAST) in = in->operands[0];
  return in->op == TPU_OP_CONSTANT ? in->literal : NULL;
}

int tpu__is_splat(const tpu_instr *in, double v) {
  const tpu_tensor *t = const_behind(in);
  if (!t || t->dtype == TPU_TUPLE || t->dtype == TPU_TOKEN) return 0;
  if (tpu_dtype_is_complex(t->dtype)) return 0; /* no identities on complex: x*(1+0i) can make NaN */
  int64_t n = tpu_tensor_numel(t);
  if (n == 0) return 0;
  int fl = tpu_dtype_is_float(t->dtype);
  for (int64_t i = 0; i < n; i++) {
    if (fl) {
      double x = tpu_tensor_get_f64(t, i);
      if (x != v || signbit(x) != signbit(v)) return 0;
    } else if (tpu_tensor_get_i64(t, i) != (int64_t)v) {
      return 0;
    }
  }
  return 1;
}

/* Do a and b (same dims) store their elements in the same physical order? A missing layout
 * is the default one; a layout the physical model cannot read is never the same. */
static int same_layout(const tpu_shape *a, const tpu_shape *b) {
  if (a->rank != b->rank) return 0;
  tpu_layout la, lb;
  tpu_diag ignored;
  if (tpu_layout_read(a, tpu_noloc(), &la, &ignored) != TPU_OK || tpu_layout_read(b, tpu_noloc(), &lb, &ignored) != TPU_OK)
    return 0;
  if (tpu_layout_is_row_major(a, &la) && tpu_layout_is_row_major(b, &lb)) return 1;
  if (memcmp(la.minor_to_major, lb.minor_to_major, sizeof la.minor_to_major) || la.ntiles != lb.ntiles) return 0;
  for (int t = 0; t < la.ntiles; t++)
    if (la.tile_rank[t] != lb.tile_rank[t] || memcmp(la.tile[t], lb.tile[t], sizeof la.tile[t][0] * (size_t)la.tile_rank[t]))
      return 0;
  return 1;
}

/* An operand that `in` can be replaced by (same shape, same value for every input), or NULL. */
/* The memory space a compiled program's layout names (S(n) in its tail); 0: HBM. */
static int memory_space(const tpu_shape *s) {
  const char *p = s->layout_tail ? strstr(s->layout_tail, "S(") : NULL;
  return p ? atoi(p + 2) : 0;
}

static tpu_instr *identity_of(const tpu_instr *in) {
  tpu_instr *const *op = in->operands;
  int fl = tpu_dtype_is_float(in->shape.dtype);
  /* The value-preserving operand for x OP k: which operand is x. */
  switch (in->op) {
    case TPU_OP_ADD:
      /* x + 0 is exact for integers; for floats only x + (-0): (-0) + (+0) is +0. */
      if (tpu__is_splat(op[1], fl ? -0.0 : 0)) return op[0];
      if (tpu__is_splat(op[0], fl ? -0.0 : 0)) return op[1];
      return NULL;
    case TPU_OP_SUBTRACT: return tpu__is_splat(op[1], 0) ? op[0] : NULL; /* x - (+0) == x, also for x = -0 */
    case TPU_OP_MULTIPLY:
      if (tpu__is_splat(op[1], 1)) return op[0];
      if (tpu__is_splat(op[0], 1)) return op[1];
      return NULL;
    case TPU_OP_DIVIDE: return tpu__is_splat(op[1], 1) ? op[0] : NULL;
    case TPU_OP_MAXIMUM:
    case TPU_OP_MINIMUM: {
      /* max(x, -inf) and min(x, +inf) are x for floats, NaN included (both propagate it):
       * XLA's simplifier drops them (JAX's log_softmax takes max(row max, -inf), and the
       * compiler's log_softmax_8x768_f32 broadcasts the bare reduce_max.0) */
      double k = in->op == TPU_OP_MAXIMUM ? -INFINITY : INFINITY;
      if (!fl) return NULL;
      if (tpu__is_splat(op[1], k)) return op[0];
      if (tpu__is_splat(op[0], k)) return op[1];
      return NULL;
    }
    case TPU_OP_AND:
      if (in->shape.dtype != TPU_PRED) return NULL;
      if (tpu__is_splat(op[1], 1)) return op[0];
      if (tpu__is_splat(op[0], 1)) return op[1];
      return NULL;
    case TPU_OP_OR:
      if (in->shape.dtype != TPU_PRED) return NULL;
      if (tpu__is_splat(op[1], 0)) return op[0];
      if (tpu__is_splat(op[0], 0)) return op[1];
      return NULL;
    case TPU_OP_RESHAPE:
      /* reshape(reshape(x)) back to x's dims is x. */
      if (op[0]->op == TPU_OP_RESHAPE && tpu_shape_equal(&op[0]->operands[0]->shape, &in->shape)) return op[0]->operands[0];
      return op[0];
    case TPU_OP_BITCAST: return same_layout(&in->shape, &op[0]->shape) ? op[0] : NULL;
    case TPU_OP_COPY: return same_layout(&in->shape, &op[0]->shape) ? op[0] : NULL;
    case TPU_OP_CONVERT: return op[0]; /* same type in and out (checked by the caller) */
    case TPU_OP_TRANSPOSE:
    case TPU_OP_BROADCAST:
      for (int i = 0; i < in->dimensions.n; i++)
        if (in->dimensions.v[i] != i) return NULL;
      return op[0];
    case TPU_OP_SLICE:
      for (int i = 0; i < in->nslice; i++)
        if (in->slice[i].start != 0 || in->slice[i].stride != 1 || in->slice[i].limit != op[0]->shape.dims[i]) return NULL;
      return op[0];
    case TPU_OP_DYNAMIC_SLICE: return op[0]; /* a full-size slice is clamped to start 0 */
    case TPU_OP_CONCATENATE: return in->noperands == 1 ? op[0] : NULL;
    case TPU_OP_PAD:
      for (int i = 0; i < in->npadding; i++)
        if (in->padding[i].lo || in->padding[i].hi || in->padding[i].interior) return NULL;
      return op[0];
    case TPU_OP_REVERSE:
      for (int i = 0; i < in->dimensions.n; i++)
        if (op[0]->shape.dims[in->dimensions.v[i]] > 1) return NULL;
      return op[0];
    case TPU_OP_SELECT:
      if (op[1] == op[2]) return op[1];
      if (tpu__is_splat(op[0], 1)) return op[1];
      if (tpu__is_splat(op[0], 0)) return op[2];
      return NULL;
    case TPU_OP_GET_TUPLE_ELEMENT:
      return op[0]->op == TPU_OP_TUPLE ? op[0]->operands[in->index] : NULL;
    default: return NULL;
  }
}

/* Whether `in` is the entry's result or a leaf of its root tuple. */
static int entry_output(const tpu_comp *c, const tpu_instr *in) {
  if (!c->is_entry || !c->root) return 0;
  if (in == c->root) return 1;
  if (c->root->op != TPU_OP_TUPLE) return 0;
  for (int k = 0; k < c->root->noperands; k++)
    if (c->root->operands[k] == in) return 1;
  return 0;
}

/* An operand that can replace `in` by an identity, or NULL. The entry's results are written
 * to HBM: a copy there out of another memory space (a compiled program's VMEM value, S(1), or
 * v4's CMEM value, S(3)) moves the bytes, and the XLA TPU compiler runs it as a kernel with
 * its estimated_cycles — the whole result (bf16[3,2] out of S(1): 2,122 cycles on v5p,
 * bench/fidelity/families transpose_2x3_p10_bf16) or one leaf of a root tuple (the second of
 * two leaves returning one value, the first an asynchronous copy-start: the LSTM/GRU steps'
 * copy.1 out of CMEM on v4, 629-1,567 cycles, out of VMEM on v5p, 2,125-2,424; on v5e/v6e the
 * DMA engines' transfer, copy_kind.c tpu__dup_output_copy). */
static tpu_instr *try_identity(const tpu_comp *c, tpu_instr *in) {
  if (in->noperands == 0) return NULL;
  if (in->op == TPU_OP_COPY && entry_output(c, in) && memory_space(&in->shape) != memory_space(&in->operands[0]->shape))
    return NULL;
  tpu_instr *r = identity_of(in);
  if (!r || r == in || !tpu_shape_equal(&r->shape, &in->shape)) return NULL;
  return r;
}

/* ---- A widening convert sinks out of a max or min reduction ----
 * reduce(convert(x: bf16 -> f32), init) with maximum or minimum as the reducer is
 * convert(reduce(x, init)) in x's type: widening keeps order, signed zeros and NaN, so the
 * largest widened element is the widened largest — exact. The XLA TPU compiler's log-softmax
 * over bf16 logits takes its row maximum on the bf16 array this way, a reduction of a
 * parameter (its own kernel, timed as one), rather than inside the exponent step's kernel. */

/* The reducer's op when `c` is (a, b) -> maximum(a, b) or minimum(a, b); else 0. */
static tpu_opcode max_min_of(const tpu_comp *c) {
  if (!c || c->ninstrs != 3 || c->nparams != 2 || !c->root) return (tpu_opcode)0;
  const tpu_instr *r = c->root;
  if ((r->op != TPU_OP_MAXIMUM && r->op != TPU_OP_MINIMUM) || r->noperands != 2) return (tpu_opcode)0;
  if (r->operands[0]->op != TPU_OP_PARAMETER || r->operands[1]->op != TPU_OP_PARAMETER ||
      r->operands[0] == r->operands[1])
    return (tpu_opcode)0;
  return r->op;
}

static tpu_status sink_convert(tpu_builder *b, tpu_comp *c, tpu_instr *in, tpu_instr **repl) {
  *repl = NULL;
  if (in->op != TPU_OP_REDUCE || in->noperands != 2 || in->shape.dtype != TPU_F32) return TPU_OK;
  tpu_instr *cv = in->operands[0], *init = in->operands[1];
  if (cv->op != TPU_OP_CONVERT || cv->shape.dtype != TPU_F32 || init->op != TPU_OP_CONSTANT || !init->literal) return TPU_OK;
  tpu_instr *x = cv->operands[0];
  tpu_dtype nt = x->shape.dtype;
  tpu_opcode op = max_min_of(in->to_apply);
  if ((nt != TPU_BF16 && nt != TPU_F16) || !op) return TPU_OK;
  double v = tpu_load_f64(TPU_F32, init->literal->data, 0);
  tpu_tensor t;
  TPU_TRY(tpu_tensor_alloc(&t, nt, 0, NULL, b->d));
  tpu_tensor_set_f64(&t, 0, v);
  double back = tpu_load_f64(nt, t.data, 0);
  if (!(back == v || (v != v && back != back))) { /* the init is not a value of x's type */
    tpu_tensor_free(&t);
    return TPU_OK;
  }
  tpu_instr *ninit, *red, *ops[2];
  TPU_TRY(tpu_build_constant(b, c, init->name, &t, NULL, &ninit));
  tpu_comp *rc;
  TPU_TRY(tpu_build_scalar_comp(b, in->to_apply->name, op, nt, in->to_apply, &rc));
  tpu_shape rs = in->shape;
  rs.dtype = nt;
  rs.layout_tail = NULL;
  ops[0] = x;
  ops[1] = ninit;
  TPU_TRY(tpu_build_instr(b, c, TPU_OP_REDUCE, in->name, &rs, ops, 2, in->loc, &red));
  for (int i = 0; i < in->nattrs; i++)
    if (strcmp(in->attrs[i].name, "to_apply")) TPU_TRY(tpu_build_set_attr(b, red, in->attrs[i].name, in->attrs[i].value));
  TPU_TRY(tpu_build_set_attr(b, red, "to_apply", rc->name));
  return tpu_build_instr_like(b, c, in, TPU_OP_CONVERT, in->name, &in->shape, &red, 1, repl);
}

/* ---- Transposes that undo each other ----
 * XLA's algebraic simplifier merges a transpose of a transpose into one and drops a transpose
 * or reshape that only moves dimensions of one element (its HandleTranspose and
 * HandleReshape), so a dot's result transposed into the dot's order, given a unit dimension
 * and transposed back (JAX's einsum('acbd,cbde->ead') with e = 1: [8,512] to [512,8], to
 * [512,1,8], to [1,8,512]) is the reduce's own result bitcast: the compiler's program is one
 * multiply_reduce fusion and a bitcast (libtpu probe, v4 v5e v5p v6e), not two relayouts.
 * `in`, a transpose, is replaced by a reshape of the value under a chain of transposes and
 * reshapes of dimensions of one element that leaves its other dimensions in their order.
 * The layouts a JAX program's text gives values inside it bind nothing (the compiler's layout
 * assignment chooses them); a compiled program's (tiled: T(8,128)...) are left alone. */
static tpu_status undo_transposes(tpu_builder *b, tpu_comp *c, tpu_instr *in, tpu_instr **repl) {
  *repl = NULL;
  if (in->op != TPU_OP_TRANSPOSE || in->noperands != 1 || in->shape.rank > TPU_MAX_RANK || tpu__fuse_own_kernel(in))
    return TPU_OK;
  const tpu_instr *x = in;
  int steps = 0;
  /* walk down, composing the chain as a map from in's dimensions to the source's */
  int64_t map[TPU_MAX_RANK]; /* map[d]: x's dimension that in's dimension d is, -1 for one element */
  for (int d = 0; d < in->shape.rank; d++) map[d] = in->shape.dims[d] > 1 ? d : -1;
  const tpu_instr *src = NULL;
  for (; steps < 8; steps++) {
    if (x->noperands != 1 || x->shape.rank > TPU_MAX_RANK || x->shape.layout_tail || tpu__fuse_own_kernel(x))
      break;
    const tpu_instr *y = x->operands[0];
    if (y->shape.rank > TPU_MAX_RANK) break;
    int64_t ym[TPU_MAX_RANK]; /* x's dimension d is y's ym[d] */
    if (x->op == TPU_OP_TRANSPOSE && x->dimensions.n == x->shape.rank) {
      for (int d = 0; d < x->shape.rank; d++) ym[d] = x->dimensions.v[d];
    } else if (x->op == TPU_OP_RESHAPE && x->noperands == 1 && tpu__unit_reshape(x)) {
      int i = 0;
      for (int d = 0; d < x->shape.rank; d++) {
        ym[d] = -1;
        if (x->shape.dims[d] == 1) continue;
        while (y->shape.dims[i] == 1) i++;
        ym[d] = i++;
      }
    } else {
      break;
    }
    for (int d = 0; d < in->shape.rank; d++)
      if (map[d] >= 0) map[d] = ym[map[d]];
    x = src = y;
    if (x->op != TPU_OP_TRANSPOSE && x->op != TPU_OP_RESHAPE) break;
  }
  if (!src || steps == 0) return TPU_OK;
  /* the source's dimensions of more than one element must come out in their order */
  int64_t last = -1;
  for (int d = 0; d < in->shape.rank; d++) {
    if (map[d] < 0) continue;
    if (map[d] <= last) return TPU_OK;
    last = map[d];
  }
  if (tpu_shape_numel(&src->shape) != tpu_shape_numel(&in->shape)) return TPU_OK;
  tpu_instr *y = (tpu_instr *)src;
  return tpu_build_instr_like(b, c, in, TPU_OP_RESHAPE, in->name, &in->shape, &y, 1, repl);
}

/* ---- Division by a constant ----
 * XLA's algebraic simplifier rewrites A / c and A / broadcast(c), A not a constant and c a
 * floating-point constant, as A * (1 / c) before fusion (its HandleDivide): the compiler's
 * programs carry a multiply (attention's 1/sqrt(d) scaling in its partitioning of ring
 * attention). tpusim keeps the divide, whose values the reference interpreter defines, and
 * fuses and prices it as that multiply (fuse.c cheap and expensive, tile.c): no reciprocal
 * on the transcendental unit, recomputed where it is read like any multiply. */
int tpu__divides_by_constant(const tpu_instr *in) {
  if (in->op != TPU_OP_DIVIDE || in->noperands != 2 || !tpu_dtype_is_float(in->shape.dtype) ||
      tpu_dtype_is_complex(in->shape.dtype) || in->operands[0]->op == TPU_OP_CONSTANT)
    return 0;
  const tpu_instr *k = in->operands[1];
  if (k->op == TPU_OP_BROADCAST && k->noperands == 1) k = k->operands[0];
  return k->op == TPU_OP_CONSTANT;
}

/* ---- The pass ---- */

static tpu_status simplify_comp(tpu_builder *b, tpu_comp *c, int *changed) {
  int n = c->ninstrs; /* folded constants are appended; they need no visit */
  int any = 0;
  /* Replacements are recorded by id and applied to each instruction's operands as the
   * operands-first sweep reaches it, so a rewrite costs O(1), not a scan of c. */
  tpu_instr **fwd = tpu_calloc((size_t)n + 1, sizeof *fwd);
  tpu__cse *cse = tpu__cse_new(n);
  if (!fwd || !cse) {
    tpu_free(fwd);
    tpu__cse_free(cse);
    return TPU_FAIL(b->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory simplifying '%s'", c->name);
  }
  for (int i = 0; i < n; i++) {
    tpu_instr *in = c->instrs[i];
    for (int k = 0; k < in->noperands; k++) {
      tpu_instr *o = in->operands[k];
      if (o->id >= 0 && o->id < n && c->instrs[o->id] == o && fwd[o->id]) in->operands[k] = fwd[o->id];
    }
    /* reshape(reshape(x)) is reshape(x): XLA's algebraic simplifier merges them (its
     * HandleReshape), so a dot's strength-reduced sum reshaped twice on its way to the
     * result (einsum('ba,acb->ca') in f32) is one reshape, not a kernel of two. Not
     * space-to-batch's reshapes, each a copy of its own (space_to_batch.c). */
    if (in->op == TPU_OP_RESHAPE && in->noperands == 1 && in->operands[0]->op == TPU_OP_RESHAPE &&
        in->operands[0]->noperands == 1 && !tpu__fuse_own_kernel(in) && !tpu__fuse_own_kernel(in->operands[0])) {
      in->operands[0] = in->operands[0]->operands[0];
      any = 1;
    }
    tpu_instr *r = NULL;
    int f = try_fold(b, c, in, &r);
    if (f < 0) {
      tpu_free(fwd);
      tpu__cse_free(cse);
      return b->d->status;
    }
    if (f == 0) r = try_identity(c, in);
    if (f == 0 && !r && (sink_convert(b, c, in, &r) != TPU_OK || (!r && tpu__scatter_to_select(b, c, in, &r) != TPU_OK) ||
                        (!r && tpu__reduce_of_broadcast(b, c, in, &r) != TPU_OK) ||
                        (!r && tpu__reduce_of_one(b, c, in, &r) != TPU_OK) ||
                        (!r && tpu__sink_broadcast(b, c, in, &r) != TPU_OK) || (!r && undo_transposes(b, c, in, &r) != TPU_OK))) {
      tpu_free(fwd);
      tpu__cse_free(cse);
      return b->d->status;
    }
    if (f == 0 && !r) r = tpu__cse_find_or_add(cse, in);
    if (r) {
      /* r precedes `in`, so it has been forwarded already. */
      fwd[i] = r;
      any = 1;
    }
  }
  tpu_build_forward(c, fwd, n);
  tpu_free(fwd);
  tpu__cse_free(cse);
  int dead = tpu_build_remove_dead(b, c);
  if (dead < 0) return b->d->status;
  *changed |= any || dead > 0;
  return TPU_OK;
}

tpu_status tpu__pass_simplify(tpu_module *m, const tpu_compile_opts *o, tpu_diag *d) {
  tpu_builder b;
  TPU_TRY(tpu_builder_init(&b, m, d));
  int reduced = 0; /* before the identities, which then clean up around the new ops */
  tpu_status st = tpu__dot_strength_reduce(&b, m, o ? o->chip : NULL, &reduced);
  if (st == TPU_OK) st = tpu__scan_rewrite(&b, m, o ? o->chip : NULL, &reduced);
  if (st == TPU_OK) st = tpu__space_to_batch(&b, m, &reduced);
  if (st == TPU_OK) st = tpu__hoist_loop_converts(&b, m, &reduced);
  for (int round = 0; st == TPU_OK && round < MAX_ROUNDS; round++) {
    int changed = 0;
    for (int i = 0; st == TPU_OK && i < m->ncomps; i++) st = simplify_comp(&b, m->comps[i], &changed);
    if (st == TPU_OK) {
      int gone = tpu_build_remove_unused_comps(&b);
      if (gone < 0) st = d->status;
      changed |= gone > 0;
    }
    if (!changed) break;
  }
  tpu_builder_deinit(&b);
  return st;
}
