/* The reference interpreter core: evaluates computations in dependency order, runs the
 * control-flow ops itself and dispatches every other op to its kernel. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "ir/collective.h"
#include "ir/custom_call.h"
#include "ir/layout.h"
#include "ref/fused.h"
#include "ref/ref_int.h"
#include "ref/sloop.h"

#define MAX_CALL_DEPTH 200

/* What a call of a computation needs that does not depend on the values (computed at its
 * first call in a run, then reused by every call: a loop body's iterations). */
/* How the call loop runs an instruction (decided once per plan from the instruction alone). */
enum {
  ST_PARAM,  /* borrows argument `index` */
  ST_CONST,  /* borrows the literal */
  ST_INL,    /* evaluated inside its user's fused tree */
  ST_GTE,    /* get-tuple-element (not the root): borrows or takes the element */
  ST_TUPLE,  /* moves or copies its operands */
  ST_FUSED,  /* the root of a fused elementwise tree (ref/fused.h) */
  ST_KERNEL, /* calls `k` on its operands: what eval would call, with nothing to decide first */
  ST_EVAL,   /* eval (control flow, custom calls, mixed float types, hooks) */
  ST_ASYNC,  /* an async collective start */
  ST_MOVE    /* a reshape (or copy, row-major bitcast) that keeps the element type: takes its operand's
              * buffer when the operand is read here for the last time, else runs `k` */
};

/* One instruction of a plan's order: what the call loop reads instead of the instruction
 * (1,240 bytes, its fields on several cache lines), with the ids of its operands and of the
 * values released after it (its operands; a fused tree's leaves) in the plan's ids[]. */
typedef struct plan_step {
  const tpu_instr *in;
  tpu_ref_kernel k; /* ST_KERNEL */
  int id, kind;
  int index;        /* ST_PARAM: the argument; ST_GTE: the element */
  int nops, ops;    /* operand ids: ids[ops .. ops + nops) */
  int nrel, rel;    /* released after it runs: ids[rel .. rel + nrel) */
  size_t nbytes;    /* ST_MOVE: the result's bytes */
  tpu__ref_itree *tree; /* ST_FUSED of s32/u32: the tree decoded (NULL: decoded at each call) */
  int take;             /* ST_GTE: the only reader of its element of a tuple that only get-tuple-elements
                         * read (not the root): it takes the element of an owned tuple (take_plan) */
  tpu__sloop *loop;     /* a while loop compiled to integer slots (ref/sloop.h), or NULL */
} plan_step;

typedef struct comp_plan {
  const tpu_comp *c;
  plan_step *steps; /* one per c->order entry */
  int *ids;
  int ndead, dead;  /* ids[dead .. dead + ndead): values no instruction reads (not the root): freed after
                     * a call, where every other owned value has been freed at its last read */
  int *uses;    /* each instruction's reads in this computation */
  uint8_t *inl; /* inlined into a fused elementwise tree (ref/fused.h) */
  int maxops;   /* the most operands of an instruction */
  /* A call's frame, kept for the next call (a loop body's next iteration) while no call of
   * this computation is running: its owned values are all empty between calls. */
  char *frame;
  int busy;
  /* fold[id]: 1 when the instruction's value depends on constants only (fold_op, operands
   * constants or such instructions; not in the entry): computed at its first call, then
   * 2 and kept in fval[id] for the run (a loop body's broadcasts of constants, iotas). */
  uint8_t *fold;
  tpu_tensor *fval;
} comp_plan;

#define MAX_LOOPS 32
struct tpu_interp {
  int64_t while_limit;
  int depth;
  const tpu_ref_opts *opts; /* never NULL */
  int64_t step, nsteps;     /* the entry instruction running, for progress */
  comp_plan **plans;        /* open addressing on the computation's address; cap a power of 2 */
  int nplans, capplans;
  const tpu_comp *entry;
  size_t folded_bytes;      /* kept in the plans' fval (at most MAX_FOLDED_BYTES) */
  /* The iteration running, counted over every loop around it (tpu__ref_flat): each while
   * loop's body runs counted over all the loop's runs, so nested loops count outer pass by
   * outer pass; -1 outside loops or past MAX_LOOPS loops. */
  int64_t flat;
  struct {
    const tpu_instr *w;
    int64_t runs;
  } loops[MAX_LOOPS];
  int nloops;
};

/* What folded values may hold in one run, and one of them. */
#define MAX_FOLDED_BYTES ((size_t)64 << 20)
#define MAX_FOLD_BYTES ((size_t)1 << 20)

static int64_t g_while_limit = 100000000;

const tpu_ref_opts *tpu__ref_opts(const tpu_interp *ip) { return ip->opts; }

int64_t tpu__ref_flat(const tpu_interp *ip) { return ip->flat; }

const char *tpu__ref_who(const tpu_interp *ip) {
  return ip && ip->opts->who ? ip->opts->who : "the reference interpreter";
}

void tpu_ref_set_while_limit(int64_t limit) { g_while_limit = limit; }

static tpu_ref_progress_fn g_progress;
static void *g_progress_user;

void tpu_ref_set_progress(tpu_ref_progress_fn fn, void *user) {
  g_progress = fn;
  g_progress_user = user;
}

/* Whether this run reports progress: the entry level, on device 0 of a pod. */
static int reports(const tpu_interp *ip) {
  return g_progress && ip->depth == 1 && (!ip->opts->comm || ip->opts->comm->device == 0);
}

void tpu__ref_strides(int rank, const int64_t *dims, int64_t *strides) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i];
  }
}

tpu_status tpu__ref_alloc_shape(tpu_tensor *out, const tpu_shape *s, tpu_diag *d) {
  if (s->dtype == TPU_TUPLE) {
    TPU_TRY(tpu_tensor_alloc_tuple(out, s->ntuple, d));
    for (int i = 0; i < s->ntuple; i++) {
      tpu_status st = tpu__ref_alloc_shape(&out->elems[i], &s->elems[i], d);
      if (st != TPU_OK) {
        tpu_tensor_free(out);
        return st;
      }
    }
    return TPU_OK;
  }
  if (s->dtype == TPU_TOKEN) {
    tpu_tensor_zero(out);
    out->dtype = TPU_TOKEN;
    return TPU_OK;
  }
  return tpu_tensor_alloc(out, s->dtype, s->rank, s->dims, d);
}

/* Does a value match a shape (dtype, dims, tuple structure)? */
static int value_matches(const tpu_tensor *v, const tpu_shape *s) {
  if (v->dtype != s->dtype) return 0;
  if (s->dtype == TPU_TUPLE) {
    if (v->ntuple != s->ntuple) return 0;
    for (int i = 0; i < s->ntuple; i++)
      if (!value_matches(&v->elems[i], &s->elems[i])) return 0;
    return 1;
  }
  if (s->dtype == TPU_TOKEN) return 1;
  if (v->rank != s->rank) return 0;
  for (int i = 0; i < s->rank; i++)
    if (v->dims[i] != s->dims[i]) return 0;
  return 1;
}

static tpu_status call_given(tpu_interp *ip, const tpu_comp *c, const tpu_tensor *const *args, tpu_tensor *const *give,
                             int nargs, tpu_tensor *out, tpu_diag *d);

/* A compiled loop's iteration done (tpu__sloop_run), for progress. */
static void tick(tpu_interp *ip, int64_t iters) { g_progress(g_progress_user, ip->step, ip->nsteps, iters); }

/* A while loop on init; give: init itself when the caller gives it up (read there for the
 * last time: the loop takes it instead of a copy), else NULL. The state is given to each
 * iteration's body, which takes what it reads (call_given). */
static tpu_status run_while(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *init, tpu_tensor *give,
                            const tpu__sloop *vm, tpu_tensor *out, tpu_diag *d) {
  int64_t iters = 0, flat0 = ip->flat, *runs = NULL;
  for (int i = 0; i < ip->nloops && !runs; i++)
    if (ip->loops[i].w == in) runs = &ip->loops[i].runs;
  if (!runs && ip->nloops < MAX_LOOPS) {
    ip->loops[ip->nloops].w = in;
    ip->loops[ip->nloops].runs = 0;
    runs = &ip->loops[ip->nloops++].runs;
  }
  tpu_tensor state;
  if (vm) { /* on its slots: the state read from init (the caller frees what it gave) */
    TPU_TRY(tpu__sloop_run(vm, ip, init, ip->while_limit, reports(ip) ? tick : NULL, &iters, &state, d));
    if (runs) *runs += iters;
  } else if (give) {
    state = *give;
    tpu_tensor_zero(give);
  } else {
    TPU_TRY(tpu_tensor_clone(&state, init, d));
  }
  while (!vm) {
    tpu_tensor cond;
    const tpu_tensor *arg = &state;
    tpu_status st = tpu__ref_call(ip, in->condition, &arg, 1, &cond, d);
    if (st != TPU_OK) {
      tpu_tensor_free(&state);
      return st;
    }
    int go = ((const uint8_t *)cond.data)[0] != 0;
    tpu_tensor_free(&cond);
    if (!go) break;
    if (ip->while_limit > 0 && iters >= ip->while_limit) {
      tpu_tensor_free(&state);
      return TPU_FAIL(d, TPU_ERR_LIMIT, in->loc, "while loop '%s' ran past %lld iterations", in->name,
                      (long long)ip->while_limit);
    }
    tpu_tensor next, *gv = &state;
    ip->flat = runs ? (*runs)++ : -1;
    st = call_given(ip, in->body, &arg, &gv, 1, &next, d);
    ip->flat = flat0;
    tpu_tensor_free(&state);
    if (st != TPU_OK) return st;
    state = next;
    iters++;
    if (reports(ip)) g_progress(g_progress_user, ip->step, ip->nsteps, iters);
  }
  if (ip->opts->on_while) {
    tpu_status st = ip->opts->on_while(ip->opts->user, in, iters, d);
    if (st != TPU_OK) {
      tpu_tensor_free(&state);
      return st;
    }
  }
  *out = state;
  return TPU_OK;
}

static tpu_status run_conditional(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                                  tpu_diag *d) {
  int64_t b;
  if (in->pred_branches) {
    b = ((const uint8_t *)args[0]->data)[0] ? 0 : 1;
  } else {
    b = tpu_tensor_get_i64(args[0], 0);
    if (b < 0 || b >= in->nbranches) b = in->nbranches - 1; /* XLA: out of range runs the last branch */
  }
  return tpu__ref_call(ip, in->branches[b], &args[1 + b], 1, out, d);
}

static tpu_status make_tuple(const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out, tpu_diag *d) {
  TPU_TRY(tpu_tensor_alloc_tuple(out, in->noperands, d));
  for (int i = 0; i < in->noperands; i++) {
    tpu_status st = tpu_tensor_clone(&out->elems[i], args[i], d);
    if (st != TPU_OK) {
      tpu_tensor_free(out);
      return st;
    }
  }
  return TPU_OK;
}

const tpu_ref_comm *tpu__ref_comm(const tpu_interp *ip) { return ip->opts->comm; }
int64_t tpu__ref_scan_block(const tpu_interp *ip) { return ip->opts->scan_block; }

static tpu_status eval(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out, tpu_diag *d);

/* An elementwise op with mixed float operands (tpu_instr_mixed_float) runs on copies of its
 * operands converted to its working type, rounded to nearest even as a convert would. */
static tpu_status eval_mixed(tpu_interp *ip, const tpu_instr *in, tpu_dtype w, const tpu_tensor *const *args,
                             tpu_tensor *out, tpu_diag *d) {
  const tpu_tensor *argv[3];
  tpu_tensor conv[3];
  memset(conv, 0, sizeof conv);
  tpu_status st = TPU_OK;
  int n = in->noperands;
  for (int k = 0; st == TPU_OK && k < n; k++) {
    argv[k] = args[k];
    if (!tpu_dtype_is_float(args[k]->dtype) || args[k]->dtype == w) continue;
    tpu_shape s = in->operands[k]->shape;
    s.dtype = w;
    st = tpu__ref_alloc_shape(&conv[k], &s, d);
    for (int64_t i = 0, e = tpu_tensor_numel(args[k]); st == TPU_OK && i < e; i++)
      tpu_tensor_set_f64(&conv[k], i, tpu_tensor_get_f64(args[k], i));
    argv[k] = &conv[k];
  }
  if (st == TPU_OK) st = eval(ip, in, argv, out, d); /* the kernels now see one float type */
  for (int k = 0; k < n; k++) tpu_tensor_free(&conv[k]);
  return st;
}

static tpu_status eval(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out, tpu_diag *d) {
  tpu_dtype w;
  if (in->noperands <= 3 && tpu_instr_mixed_float(in, &w)) {
    int all = 1;
    for (int k = 0; k < in->noperands; k++) all &= !tpu_dtype_is_float(args[k]->dtype) || args[k]->dtype == w;
    if (!all) return eval_mixed(ip, in, w, args, out, d);
  }
  switch (in->op) {
    case TPU_OP_TUPLE: return make_tuple(in, args, out, d);
    case TPU_OP_GET_TUPLE_ELEMENT: return tpu_tensor_clone(out, &args[0]->elems[in->index], d);
    case TPU_OP_CALL: return tpu__ref_call(ip, in->to_apply, args, in->noperands, out, d);
    case TPU_OP_FUSION: return tpu__ref_call(ip, in->calls, args, in->noperands, out, d);
    case TPU_OP_WHILE: return run_while(ip, in, args[0], NULL, NULL, out, d);
    case TPU_OP_CONDITIONAL: return run_conditional(ip, in, args, out, d);
    case TPU_OP_OPT_BARRIER:
    case TPU_OP_ADD_DEPENDENCY: return tpu_tensor_clone(out, args[0], d);
    case TPU_OP_COPY_START: { /* (copy, operand, context 0) */
      TPU_TRY(tpu__ref_alloc_shape(out, &in->shape, d));
      tpu_status st = TPU_OK;
      for (int e = 0; st == TPU_OK && e < 2; e++) {
        tpu_tensor_free(&out->elems[e]);
        st = tpu_tensor_clone(&out->elems[e], args[0], d);
      }
      if (st != TPU_OK) tpu_tensor_free(out);
      return st;
    }
    case TPU_OP_COPY_DONE: return tpu_tensor_clone(out, &args[0]->elems[0], d);
    case TPU_OP_SLICE_START: { /* ((operand), slice, context 0) */
      TPU_TRY(tpu__ref_alloc_shape(out, &in->shape, d));
      tpu_instr sl = *in;
      sl.op = TPU_OP_SLICE;
      sl.shape = in->shape.elems[1];
      tpu_tensor_free(&out->elems[0].elems[0]);
      tpu_tensor_free(&out->elems[1]);
      tpu_status st = tpu_tensor_clone(&out->elems[0].elems[0], args[0], d);
      if (st == TPU_OK) st = tpu__ref_movement(ip, &sl, args, &out->elems[1], d);
      if (st != TPU_OK) tpu_tensor_free(out);
      return st;
    }
    case TPU_OP_SLICE_DONE: return tpu_tensor_clone(out, &args[0]->elems[1], d);
    case TPU_OP_CUSTOM_CALL:
      switch (tpu_custom_call_kind(in)) {
        case TPU_CC_IDENTITY:
          if (in->noperands == 1 && value_matches(args[0], &in->shape)) return tpu_tensor_clone(out, args[0], d);
          if (in->noperands > 1 && in->shape.dtype == TPU_TUPLE) return make_tuple(in, args, out, d);
          return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc,
                          "custom-call '%s' changes a shape: it needs the module partitioned over its mesh",
                          tpu_instr_user_name(in));
        case TPU_CC_CONCAT_BITCAST: {
          if (tpu_concat_bitcast_bytes(in))
            return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc,
                            "custom-call '%s' joins byte pieces of a tiled layout into %s; its values are not "
                            "modelled (time the program with --mode timing)",
                            tpu_instr_user_name(in), "an array");
          tpu_instr cat = *in;
          int64_t dim = tpu_concat_bitcast_dim(in);
          cat.op = TPU_OP_CONCATENATE;
          cat.dimensions.v = &dim;
          cat.dimensions.n = 1;
          return tpu__ref_movement(ip, &cat, args, out, d);
        }
        case TPU_CC_TOPK: {
          tpu_instr k = *in; /* top-k with k from the result */
          k.op = TPU_OP_TOPK;
          k.k = in->shape.elems[0].dims[in->shape.elems[0].rank - 1];
          k.largest = 1;
          return tpu__ref_reduce(ip, &k, args, out, d);
        }
        case TPU_CC_PARTIAL_REDUCE: return tpu__ref_partial_reduce(ip, in, args, out, d);
        case TPU_CC_ALLOCATE: return tpu__ref_alloc_shape(out, &in->shape, d); /* zeros */
        case TPU_CC_ZERO_CROP: { /* the same bytes, padding zeroed: a bitcast */
          tpu_instr b = *in;
          b.op = TPU_OP_BITCAST;
          return tpu__ref_movement(ip, &b, args, out, d);
        }
        case TPU_CC_HOST_CALLBACK: return tpu__ref_host_callback(ip, in, args, out, d);
        case TPU_CC_MOSAIC: return tpu__ref_mosaic(ip, in, args, out, d); /* src/mosaic/call.c */
        case TPU_CC_ASYNC_DONE: /* the collective's result */
          for (int k = 0; k < in->noperands; k++)
            if (tpu_op_class_of(in->operands[k]->op) == TPU_CLS_COLLECTIVE && value_matches(args[k], &in->shape))
              return tpu_tensor_clone(out, args[k], d);
          return tpu_custom_call_refuse(in, tpu__ref_who(ip), d);
        default: return tpu_custom_call_refuse(in, tpu__ref_who(ip), d);
      }
    case TPU_OP_AFTER_ALL: return tpu__ref_alloc_shape(out, &in->shape, d);
    case TPU_OP_PARTITION_ID:
    case TPU_OP_REPLICA_ID: return tpu__ref_collective(ip, in, args, out, d);
    case TPU_OP_DOT:
    case TPU_OP_CONVOLUTION:
      if (ip->opts->dot_conv && in->noperands == 2) {
        int handled = 0;
        tpu_tensor_zero(out);
        TPU_TRY(ip->opts->dot_conv(ip->opts->user, in, args[0], args[1], out, &handled, d));
        if (handled) return TPU_OK;
      }
      return tpu__ref_dot_conv(ip, in, args, out, d);
    default: break;
  }
  if (tpu_op_class_of(in->op) == TPU_CLS_COLLECTIVE) return tpu__ref_collective(ip, in, args, out, d);
  tpu_ref_kernel k = tpu__ref_kernel_of(in->op);
  if (k) return k(ip, in, args, out, d);
  return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "%s cannot run '%s'", tpu__ref_who(ip), tpu_op_name(in->op));
}

/* The kernel eval calls for `in` when it has nothing else to decide (no mixed float types,
 * not one of the ops eval's switch runs itself, not a collective); NULL otherwise. Keep in
 * step with eval. */
static tpu_ref_kernel direct_kernel(const tpu_instr *in) {
  tpu_dtype w;
  if (in->noperands <= 3 && tpu_instr_mixed_float(in, &w)) return NULL;
  switch (in->op) {
    case TPU_OP_TUPLE:
    case TPU_OP_GET_TUPLE_ELEMENT:
    case TPU_OP_CALL:
    case TPU_OP_FUSION:
    case TPU_OP_WHILE:
    case TPU_OP_CONDITIONAL:
    case TPU_OP_OPT_BARRIER:
    case TPU_OP_ADD_DEPENDENCY:
    case TPU_OP_COPY_START:
    case TPU_OP_COPY_DONE:
    case TPU_OP_SLICE_START:
    case TPU_OP_SLICE_DONE:
    case TPU_OP_CUSTOM_CALL:
    case TPU_OP_AFTER_ALL:
    case TPU_OP_PARTITION_ID:
    case TPU_OP_REPLICA_ID:
    case TPU_OP_DOT:
    case TPU_OP_CONVOLUTION: return NULL;
    default: break;
  }
  if (tpu_op_class_of(in->op) == TPU_CLS_COLLECTIVE) return NULL;
  return tpu__ref_kernel_of(in->op);
}

/* AsyncCollectiveStart: the tuple (the collective's operand, its result, zeroed state). */
static tpu_status async_start(const tpu_instr *in, const tpu_tensor *operand, const tpu_tensor *result, tpu_tensor *out,
                              tpu_diag *d) {
  TPU_TRY(tpu__ref_alloc_shape(out, &in->shape, d));
  tpu_status st = TPU_OK;
  for (int e = 0; st == TPU_OK && e < 2; e++) {
    tpu_tensor_free(&out->elems[e]);
    st = tpu_tensor_clone(&out->elems[e], e ? result : operand, d);
  }
  if (st != TPU_OK) tpu_tensor_free(out);
  return st;
}

/* Per-call evaluation state: each instruction's value is either borrowed (a parameter's
 * argument, a constant's literal, an element of a borrowed tuple) or owned; owned values are
 * freed after their last use. */
typedef struct {
  const tpu_tensor **val;
  tpu_tensor *own;
  int *uses;
} frame;

/* One use of operand o is done: its value is freed after its last. */
static inline void release_id(frame *f, int o, int root) {
  if (--f->uses[o] == 0 && o != root) tpu_tensor_free(&f->own[o]);
}

static size_t plan_slot(const tpu_comp *c, int cap) {
  uintptr_t h = (uintptr_t)c;
  h ^= h >> 17;
  h *= (uintptr_t)0x9e3779b97f4a7c15ull;
  return (size_t)(h >> 7) & (size_t)(cap - 1);
}

/* The plan of computation c in this run: from the run's table, or made now. NULL when out of
 * memory. */
static void plan_free(comp_plan *pl) {
  if (!pl) return;
  if (pl->fval)
    for (int i = 0; i <= pl->c->ninstrs; i++) tpu_tensor_free(&pl->fval[i]);
  tpu_free(pl->fval);
  if (pl->steps)
    for (int i = 0; i < pl->c->norder; i++) {
      tpu__ref_itree_free(pl->steps[i].tree);
      tpu__sloop_free(pl->steps[i].loop);
    }
  tpu_free(pl->steps); /* and ids, in the same block */
  tpu_free(pl->fold);
  tpu_free(pl->frame);
  tpu_free(pl); /* and uses, inl */
}

/* Ops whose value is a function of their operands' values and the instruction alone, with
 * no effect and no hook of the run (data movement and elementwise ops). */
static int fold_op(const tpu_instr *in) {
  tpu_ref_kernel k = tpu__ref_kernel_of(in->op);
  return k == tpu__ref_movement || k == tpu__ref_elementwise;
}

/* Marks pl->fold (see comp_plan); 0 when there is nothing to fold or memory runs out. */
static void fold_plan(tpu_interp *ip, comp_plan *pl) {
  const tpu_comp *c = pl->c;
  if (c == ip->entry) return; /* run once: nothing to save */
  uint8_t *fold = tpu_calloc((size_t)c->ninstrs + 1, 1);
  if (!fold) return;
  int any = 0;
  for (int i = 0; i < c->norder; i++) {
    const tpu_instr *in = c->order[i];
    if (in->shape.dtype == TPU_TUPLE || in->shape.dtype == TPU_TOKEN || !fold_op(in)) continue;
    int64_t numel = tpu_shape_numel(&in->shape);
    if (numel < 0 || (size_t)numel * tpu_dtype_size(in->shape.dtype) > MAX_FOLD_BYTES) continue;
    int ok = 1;
    for (int k = 0; ok && k < in->noperands; k++) {
      const tpu_instr *o = in->operands[k];
      ok = o->op == TPU_OP_CONSTANT || fold[o->id];
    }
    if (ok) fold[in->id] = 1, any = 1;
  }
  if (any) pl->fval = tpu_calloc((size_t)c->ninstrs + 1, sizeof *pl->fval);
  if (!any || !pl->fval) {
    tpu_free(fold);
    return;
  }
  pl->fold = fold;
}

/* An op whose result is its operand's elements in the same order and type (the movement
 * kernel copies them: ref/movement.c same_elements): a reshape, a copy, a bitcast between
 * row-major layouts, none of them changing the element type. */
static int same_elements_op(const tpu_instr *in) {
  if (in->noperands != 1 || !tpu_dtype_is_array(in->shape.dtype)) return 0;
  const tpu_shape *xs = &in->operands[0]->shape;
  if (xs->dtype != in->shape.dtype || tpu_instr_moves_and_converts(in)) return 0;
  if (tpu_shape_numel(xs) != tpu_shape_numel(&in->shape) || tpu_shape_numel(xs) < 0) return 0;
  if (in->op == TPU_OP_RESHAPE || in->op == TPU_OP_COPY) return 1;
  if (in->op != TPU_OP_BITCAST) return 0;
  tpu_layout rl, xl;
  tpu_diag d;
  return tpu_layout_read(&in->shape, in->loc, &rl, &d) == TPU_OK && tpu_layout_read(xs, in->loc, &xl, &d) == TPU_OK &&
         tpu_layout_is_row_major(&in->shape, &rl) && tpu_layout_is_row_major(xs, &xl);
}

/* Fills pl->steps and pl->ids from c->order, pl->inl and pl->fold (final by now). */
static tpu_status plan_steps(comp_plan *pl) {
  const tpu_comp *c = pl->c;
  size_t nids = 0;
  const tpu_instr *leaves[96];
  for (int i = 0; i < c->norder; i++) {
    const tpu_instr *in = c->order[i];
    nids += 2 * (size_t)in->noperands + 2;
    if (!pl->inl[in->id] && tpu__ref_fusible(in)) nids += (size_t)tpu__ref_fused_leaves(in, pl->inl, leaves);
  }
  size_t nsteps = (size_t)(c->norder ? c->norder : 1);
  pl->steps = tpu_calloc(1, nsteps * sizeof *pl->steps + (nids ? nids : 1) * sizeof *pl->ids); /* one block */
  if (!pl->steps) return TPU_ERR_NOMEM;
  pl->ids = (int *)(void *)(pl->steps + nsteps);
  int *ids = pl->ids, at = 0;
  for (int i = 0; i < c->norder; i++) {
    const tpu_instr *in = c->order[i];
    plan_step *s = &pl->steps[i];
    s->in = in;
    s->id = in->id;
    s->index = (int)in->index;
    s->nops = in->noperands;
    s->ops = at;
    for (int k = 0; k < in->noperands; k++) ids[at++] = in->operands[k]->id;
    s->rel = s->ops; /* by default the operands */
    s->nrel = s->nops;
    if (in->op == TPU_OP_PARAMETER) {
      s->kind = ST_PARAM;
    } else if (in->op == TPU_OP_CONSTANT) {
      s->kind = ST_CONST;
    } else if (pl->inl[in->id]) {
      s->kind = ST_INL;
    } else if (in->op == TPU_OP_GET_TUPLE_ELEMENT && in != c->root) {
      s->kind = ST_GTE;
    } else if (in->op == TPU_OP_TUPLE) {
      s->kind = ST_TUPLE;
    } else if (tpu__ref_fusible(in)) {
      s->kind = ST_FUSED;
      s->tree = tpu__ref_i32_tree(in, pl->inl);
      int nl = tpu__ref_fused_leaves(in, pl->inl, leaves);
      s->rel = at;
      s->nrel = nl;
      for (int k = 0; k < nl; k++) ids[at++] = leaves[k]->id;
    } else if (tpu_custom_call_kind(in) == TPU_CC_ASYNC_START) {
      s->kind = ST_ASYNC;
      s->rel = at;
      s->nrel = in->noperands + 1;
      for (int k = 0; k < in->noperands; k++) ids[at++] = in->operands[k]->id;
      ids[at++] = in->operands[0]->operands[0]->id;
    } else {
      s->k = direct_kernel(in);
      s->kind = s->k ? ST_KERNEL : ST_EVAL;
      if (in->op == TPU_OP_WHILE) s->loop = tpu__sloop_compile(in);
      if (s->k && same_elements_op(in)) {
        s->kind = ST_MOVE;
        s->nbytes = (size_t)tpu_shape_numel(&in->shape) * tpu_dtype_size(in->shape.dtype);
      }
    }
  }
  pl->dead = at;
  for (int i = 0; i < c->norder; i++) {
    const plan_step *s = &pl->steps[i];
    if (s->kind != ST_PARAM && s->kind != ST_CONST && s->kind != ST_INL && !pl->uses[s->id] && s->in != c->root)
      ids[at++] = s->id;
  }
  pl->ndead = at - pl->dead;
  return TPU_OK;
}

/* Marks the ST_GTE steps that may take their element (plan_step.take): the tuple they read
 * is read by get-tuple-elements alone, is not the root, and no other of them reads that
 * element. */
typedef struct {
  int tuple, step;
  int64_t index;
} gte_key;

static int gte_cmp(const void *a, const void *b) {
  const gte_key *x = a, *y = b;
  if (x->tuple != y->tuple) return x->tuple < y->tuple ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

static void take_plan(comp_plan *pl) {
  const tpu_comp *c = pl->c;
  int ng = 0;
  for (int i = 0; i < c->norder; i++) ng += c->order[i]->op == TPU_OP_GET_TUPLE_ELEMENT && c->order[i]->noperands == 1;
  if (!ng) return;
  int *n = tpu_calloc((size_t)c->ninstrs + 1, sizeof *n); /* the get-tuple-elements reading each id */
  gte_key *k = tpu_malloc((size_t)ng * sizeof *k);
  if (!n || !k) { /* nothing taken: copies, as before */
    tpu_free(n);
    tpu_free(k);
    return;
  }
  ng = 0;
  for (int i = 0; i < c->norder; i++) {
    const tpu_instr *in = c->order[i];
    if (in->op != TPU_OP_GET_TUPLE_ELEMENT || in->noperands != 1) continue;
    n[in->operands[0]->id]++;
    k[ng++] = (gte_key){in->operands[0]->id, i, in->index};
  }
  qsort(k, (size_t)ng, sizeof *k, gte_cmp);
  for (int j = 0; j < ng; j++) {
    int dup = (j > 0 && !gte_cmp(&k[j - 1], &k[j])) || (j + 1 < ng && !gte_cmp(&k[j], &k[j + 1]));
    plan_step *s = &pl->steps[k[j].step];
    s->take = !dup && s->kind == ST_GTE && k[j].tuple != c->root->id && n[k[j].tuple] == pl->uses[k[j].tuple];
  }
  tpu_free(n);
  tpu_free(k);
}

/* The plan of computation c in this run: from the run's table, or made now. NULL when out of
 * memory. A plan stays where it is for the whole run (the table holds pointers). */
static comp_plan *plan_of(tpu_interp *ip, const tpu_comp *c) {
  if (ip->capplans) {
    for (size_t i = plan_slot(c, ip->capplans);; i = (i + 1) & (size_t)(ip->capplans - 1)) {
      if (!ip->plans[i]) break;
      if (ip->plans[i]->c == c) return ip->plans[i];
    }
  }
  if (2 * (ip->nplans + 1) > ip->capplans) { /* grow: at most half full */
    int cap = ip->capplans ? 2 * ip->capplans : 16;
    comp_plan **np = tpu_calloc((size_t)cap, sizeof *np);
    if (!np) return NULL;
    for (int i = 0; i < ip->capplans; i++)
      if (ip->plans[i]) {
        size_t j = plan_slot(ip->plans[i]->c, cap);
        while (np[j]) j = (j + 1) & (size_t)(cap - 1);
        np[j] = ip->plans[i];
      }
    tpu_free(ip->plans);
    ip->plans = np;
    ip->capplans = cap;
  }
  int n = c->ninstrs;
  comp_plan *pl = tpu_calloc(1, sizeof *pl + ((size_t)n + 1) * (sizeof(int) + 1));
  int size_small[256], *size = (size_t)n + 1 <= 256 ? size_small : tpu_malloc(((size_t)n + 1) * sizeof(int));
  if (pl) {
    pl->c = c;
    pl->uses = (int *)(void *)(pl + 1); /* the plan's block: the struct, uses[n + 1], inl[n + 1] */
    pl->inl = (uint8_t *)(pl->uses + n + 1);
    pl->maxops = 1;
  }
  if (!pl || !size) {
    plan_free(pl);
    if (size != size_small) tpu_free(size);
    return NULL;
  }
  for (int i = 0; i < c->norder; i++) {
    const tpu_instr *in = c->order[i];
    for (int k = 0; k < in->noperands; k++) pl->uses[in->operands[k]->id]++;
    if (tpu_custom_call_kind(in) == TPU_CC_ASYNC_START) pl->uses[in->operands[0]->operands[0]->id]++; /* read too */
    if (in->noperands > pl->maxops) pl->maxops = in->noperands;
  }
  tpu__ref_fuse_plan(c, pl->uses, pl->inl, size);
  if (size != size_small) tpu_free(size);
  fold_plan(ip, pl);
  if (pl->fold) /* a folded value is read, not recomputed inside a tree */
    for (int i = 0; i < n; i++)
      if (pl->fold[i]) pl->inl[i] = 0;
  if (plan_steps(pl) != TPU_OK) {
    plan_free(pl);
    return NULL;
  }
  take_plan(pl);
  size_t j = plan_slot(c, ip->capplans);
  while (ip->plans[j]) j = (j + 1) & (size_t)(ip->capplans - 1);
  ip->plans[j] = pl;
  ip->nplans++;
  return pl;
}

static void plans_free(tpu_interp *ip) {
  for (int i = 0; i < ip->capplans; i++) plan_free(ip->plans[i]);
  tpu_free(ip->plans);
  ip->plans = NULL;
  ip->nplans = ip->capplans = 0;
}

/* A run's plans, kept with its module for the next run (tpu_module.keep_plans): a plan is a
 * function of its computation alone, and a folded value of constants alone (fold_op's ops
 * read no option of the run), so the next run takes them as they are. */
typedef struct kept_plans {
  comp_plan **plans;
  int nplans, capplans;
  size_t folded_bytes;
} kept_plans;

/* What folded values a module keeps between runs (a run may hold MAX_FOLDED_BYTES). */
#define MAX_KEPT_FOLDED_BYTES ((size_t)8 << 20)

static void kept_free(void *p) {
  kept_plans *k = p;
  if (!k) return;
  tpu_interp ip;
  memset(&ip, 0, sizeof ip);
  ip.plans = k->plans;
  ip.capplans = k->capplans;
  plans_free(&ip);
  tpu_free(k);
}

/* The module's kept plans into ip (none kept, or another run holds them: ip starts empty). */
static void plans_take(tpu_interp *ip, const tpu_module *m) {
  if (!m->keep_plans) return;
  tpu_module *mm = (tpu_module *)m; /* the slot only: the module is not changed */
  kept_plans *k = __atomic_exchange_n(&mm->plans, NULL, __ATOMIC_ACQ_REL);
  if (!k) return;
  ip->plans = k->plans;
  ip->nplans = k->nplans;
  ip->capplans = k->capplans;
  ip->folded_bytes = k->folded_bytes;
  tpu_free(k);
}

/* The run's plans back to the module (after a good run of a module that keeps them, unless
 * another run put its own back first), else freed. */
static void plans_put(tpu_interp *ip, const tpu_module *m, tpu_status st) {
  kept_plans *k = NULL;
  if (m->keep_plans && st == TPU_OK && ip->folded_bytes <= MAX_KEPT_FOLDED_BYTES && (k = tpu_malloc(sizeof *k))) {
    tpu_module *mm = (tpu_module *)m;
    *k = (kept_plans){ip->plans, ip->nplans, ip->capplans, ip->folded_bytes};
    void *none = NULL;
    mm->plans_free = kept_free;
    if (__atomic_compare_exchange_n(&mm->plans, &none, k, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      ip->plans = NULL;
      ip->nplans = ip->capplans = 0;
      return;
    }
    tpu_free(k);
  }
  plans_free(ip);
}

/* A folded instruction's value, just computed into f->own[id]: moved into the plan for the
 * rest of the run (while the run's folded values stay under MAX_FOLDED_BYTES), and where
 * it is read from now. */
static const tpu_tensor *keep_folded(tpu_interp *ip, comp_plan *pl, frame *f, int id) {
  size_t nb = f->own[id].nbytes;
  if (ip->folded_bytes + nb > MAX_FOLDED_BYTES) {
    pl->fold[id] = 0; /* computed on every call, as an unfolded op */
    return &f->own[id];
  }
  ip->folded_bytes += nb;
  pl->fval[id] = f->own[id];
  tpu_tensor_zero(&f->own[id]);
  pl->fold[id] = 2;
  return &pl->fval[id];
}

/* Whether an owned slot holds anything (a freed or moved-out slot is all zero). */
static inline int slot_used(const tpu_tensor *t) { return t->data || t->elems || t->dtype || t->rank; }

tpu_status tpu__ref_call(tpu_interp *ip, const tpu_comp *c, const tpu_tensor *const *args, int nargs, tpu_tensor *out,
                         tpu_diag *d) {
  return call_given(ip, c, args, NULL, nargs, out, d);
}

/* Most operands a call, fusion or while gives its computation (call_given). */
#define MAX_GIVE 16

/* A call of c on args. give (NULL: none) holds, per argument, NULL or args[k] itself as a
 * value the caller gives up (it frees what is left of it after the call): a parameter read
 * in c takes it, so that c's values may take its elements and buffers instead of copying
 * them (a loop's state passed on to the next iteration). */
static tpu_status call_given(tpu_interp *ip, const tpu_comp *c, const tpu_tensor *const *args, tpu_tensor *const *give,
                             int nargs, tpu_tensor *out, tpu_diag *d) {
  tpu_tensor_zero(out);
  if (nargs != c->nparams)
    return TPU_FAIL(d, TPU_ERR_INVALID, c->loc, "computation '%s' called with %d arguments, expects %d", c->name, nargs,
                    c->nparams);
  if (ip->depth >= MAX_CALL_DEPTH)
    return TPU_FAIL(d, TPU_ERR_LIMIT, c->loc, "calls nested deeper than %d", MAX_CALL_DEPTH);
  int n = c->ninstrs;
  comp_plan *pl = plan_of(ip, c);
  if (!pl) return TPU_FAIL(d, TPU_ERR_NOMEM, c->loc, "out of memory");
  /* One block: own[n], val[n], opv[maxops], uses[n]; the plan's own block when no other
   * call of c is running (its owned values are all empty), else a new one. */
  size_t nn = (size_t)n + 1;
  char *block = NULL;
  int mine = !pl->busy;
  if (mine && pl->frame) {
    block = pl->frame;
  } else {
    block = tpu_malloc(nn * (sizeof(tpu_tensor *) + sizeof(tpu_tensor) + sizeof(int)) +
                       (size_t)pl->maxops * sizeof(tpu_tensor *) + 16);
    if (!block) return TPU_FAIL(d, TPU_ERR_NOMEM, c->loc, "out of memory");
    memset(block, 0, nn * sizeof(tpu_tensor));
    if (mine) pl->frame = block;
  }
  if (mine) pl->busy = 1;
  frame f;
  f.own = (tpu_tensor *)(void *)block;
  f.val = (const tpu_tensor **)(void *)(f.own + nn);
  const tpu_tensor **opv = f.val + nn;
  f.uses = (int *)(void *)(opv + pl->maxops);
  memcpy(f.uses, pl->uses, nn * sizeof *f.uses); /* (f.val[id] is written before it is read) */
  const uint8_t *inl = pl->inl;
  uint8_t *fold = pl->fold;
  tpu_status st = TPU_OK;
  ip->depth++;
  const plan_step *steps = pl->steps;
  const int *ids = pl->ids, rootid = c->root->id;
  for (int i = 0; st == TPU_OK && i < c->norder; i++) {
    const plan_step *sp = &steps[i];
    const int id = sp->id;
    const int *rel = ids + sp->rel;
    switch (sp->kind) {
      case ST_PARAM:
        if (!value_matches(args[sp->index], &sp->in->shape)) {
          st = TPU_FAIL(d, TPU_ERR_INVALID, sp->in->loc, "argument %d of '%s' does not match the parameter's shape",
                        sp->index, c->name);
          break;
        }
        if (give && give[sp->index] && f.uses[id] > 0 && id != rootid) { /* taken: an owned value */
          f.own[id] = *give[sp->index];
          tpu_tensor_zero(give[sp->index]);
          f.val[id] = &f.own[id];
        } else {
          f.val[id] = args[sp->index];
        }
        continue;
      case ST_CONST: f.val[id] = sp->in->literal; continue;
      case ST_INL: continue; /* evaluated inside its user's tree */
      default: break;
    }
    if (st != TPU_OK) break;
    if (fold && fold[id] == 2) { /* computed at an earlier call */
      f.val[id] = &pl->fval[id];
      for (int k = 0; k < sp->nrel; k++) release_id(&f, rel[k], rootid);
      continue;
    }
    const tpu_instr *in = sp->in;
    if (sp->kind == ST_GTE) {
      /* An element of a borrowed tuple is borrowed too (it lives as long as the call's
       * arguments); an owned tuple read here for the last time gives its element up. */
      const int o = ids[sp->ops];
      const tpu_tensor *tv = f.val[o];
      int borrow = tv != &f.own[o], take = !borrow && ((f.uses[o] == 1 && o != rootid) || sp->take);
      if (borrow || take) {
        if (ip->depth == 1) ip->step = i + 1, ip->nsteps = c->norder;
        if (borrow) {
          f.val[id] = &tv->elems[sp->index];
        } else {
          f.own[id] = f.own[o].elems[sp->index];
          tpu_tensor_zero(&f.own[o].elems[sp->index]);
          f.val[id] = &f.own[id];
        }
        release_id(&f, o, rootid);
        if (reports(ip)) g_progress(g_progress_user, ip->step, ip->nsteps, 0);
        continue;
      }
    } else if (sp->kind == ST_TUPLE) {
      /* Operands read here for the last time move into the tuple instead of being copied. */
      if (ip->depth == 1) ip->step = i + 1, ip->nsteps = c->norder;
      st = tpu_tensor_alloc_tuple(&f.own[id], sp->nops, d);
      for (int k = 0; st == TPU_OK && k < sp->nops; k++) {
        const int o = ids[sp->ops + k];
        if (f.val[o] == &f.own[o] && f.uses[o] == 1 && o != rootid) {
          f.own[id].elems[k] = f.own[o];
          tpu_tensor_zero(&f.own[o]);
        } else {
          st = tpu_tensor_clone(&f.own[id].elems[k], f.val[o], d);
        }
        release_id(&f, o, rootid);
      }
      if (st != TPU_OK) {
        tpu_tensor_free(&f.own[id]);
        break;
      }
      if (reports(ip)) g_progress(g_progress_user, ip->step, ip->nsteps, 0);
      f.val[id] = &f.own[id];
      continue;
    } else if (sp->kind == ST_FUSED) {
      if (ip->depth == 1) ip->step = i + 1, ip->nsteps = c->norder;
      st = sp->tree ? tpu__ref_i32_tree_eval(sp->tree, in, f.val, &f.own[id], d)
                    : tpu__ref_fused_eval(in, inl, f.val, &f.own[id], d);
      if (st != TPU_OK) break;
      if (reports(ip)) g_progress(g_progress_user, ip->step, ip->nsteps, 0);
      f.val[id] = fold && fold[id] ? keep_folded(ip, pl, &f, id) : &f.own[id];
      for (int k = 0; k < sp->nrel; k++) release_id(&f, rel[k], rootid);
      continue;
    }
    const int *ops = ids + sp->ops;
    if (sp->kind == ST_MOVE) {
      const int o = ops[0];
      tpu_tensor *x = &f.own[o];
      if (f.val[o] == x && f.uses[o] == 1 && o != rootid && x->dtype == in->shape.dtype && x->nbytes == sp->nbytes &&
          !(fold && fold[id])) { /* the operand's buffer, with the result's dims */
        if (ip->depth == 1) ip->step = i + 1, ip->nsteps = c->norder;
        f.own[id] = *x;
        tpu_tensor_zero(x);
        f.own[id].rank = in->shape.rank;
        for (int k = 0; k < in->shape.rank; k++) f.own[id].dims[k] = in->shape.dims[k];
        f.val[id] = &f.own[id];
        release_id(&f, o, rootid);
        if (reports(ip)) g_progress(g_progress_user, ip->step, ip->nsteps, 0);
        continue;
      }
    }
    for (int k = 0; k < sp->nops; k++) opv[k] = f.val[ops[k]];
    if (ip->depth == 1) ip->step = i + 1, ip->nsteps = c->norder;
    tpu_tensor *give_ops[MAX_GIVE];
    int gives = 0;
    if (sp->kind == ST_EVAL && (in->op == TPU_OP_CALL || in->op == TPU_OP_FUSION || in->op == TPU_OP_WHILE) &&
        sp->nops <= MAX_GIVE)
      for (int k = 0; k < sp->nops; k++) { /* owned operands read here for the last time */
        const int o = ops[k];
        give_ops[k] = f.val[o] == &f.own[o] && f.uses[o] == 1 && o != rootid ? &f.own[o] : NULL;
        gives += give_ops[k] != NULL;
      }
    if (in->op == TPU_OP_WHILE && sp->kind == ST_EVAL)
      st = run_while(ip, in, opv[0], gives ? give_ops[0] : NULL, sp->loop, &f.own[id], d);
    else if (gives)
      st = call_given(ip, in->op == TPU_OP_CALL ? in->to_apply : in->calls, opv, give_ops, sp->nops, &f.own[id], d);
    else if (sp->kind == ST_KERNEL || sp->kind == ST_MOVE)
      st = sp->k(ip, in, opv, &f.own[id], d);
    else if (sp->kind == ST_ASYNC) /* (the collective's operand, its result, state 0) */
      st = async_start(in, f.val[rel[sp->nrel - 1]], opv[0], &f.own[id], d);
    else
      st = eval(ip, in, opv, &f.own[id], d);
    if (st != TPU_OK) break;
    if (reports(ip)) g_progress(g_progress_user, ip->step, ip->nsteps, 0);
    f.val[id] = fold && fold[id] ? keep_folded(ip, pl, &f, id) : &f.own[id];
    for (int k = 0; k < sp->nrel; k++) release_id(&f, rel[k], rootid);
  }
  ip->depth--;
  if (st == TPU_OK) {
    int r = c->root->id;
    if (f.val[r] == &f.own[r]) {
      *out = f.own[r];
      tpu_tensor_zero(&f.own[r]);
    } else {
      st = tpu_tensor_clone(out, f.val[r], d);
    }
  }
  if (st == TPU_OK) { /* only values nothing read are left */
    for (int k = 0; k < pl->ndead; k++) tpu_tensor_free(&f.own[ids[pl->dead + k]]);
  } else {
    for (int i = 0; i < n; i++)
      if (slot_used(&f.own[i])) tpu_tensor_free(&f.own[i]);
  }
  if (mine)
    pl->busy = 0; /* the block stays with the plan, every slot empty */
  else
    tpu_free(block);
  return st;
}

tpu_status tpu_ref_run(const tpu_module *m, const tpu_tensor *args, int nargs, tpu_tensor *out, tpu_diag *d) {
  return tpu_ref_run_opts(m, args, nargs, NULL, out, d);
}

tpu_status tpu_ref_run_opts(const tpu_module *m, const tpu_tensor *args, int nargs, const tpu_ref_opts *o,
                            tpu_tensor *out, tpu_diag *d) {
  static const tpu_ref_opts no_opts = {NULL, NULL, NULL, NULL, NULL, 0, NULL, 0};
  tpu_tensor_zero(out);
  const tpu_comp *e = m->entry;
  if (nargs != e->nparams)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "the program takes %d inputs; %d were given", e->nparams, nargs);
  for (int i = 0; i < nargs; i++)
    if (!value_matches(&args[i], &e->params[i]->shape)) {
      char want[256];
      tpu_shape_print(&e->params[i]->shape, want, sizeof want);
      return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "input %d does not match parameter %d of type %s", i, i, want);
    }
  const tpu_tensor **argv = tpu_calloc((size_t)(nargs ? nargs : 1), sizeof *argv);
  if (!argv) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  for (int i = 0; i < nargs; i++) argv[i] = &args[i];
  tpu_interp ip = {g_while_limit, 0, o ? o : &no_opts, 0, 0, NULL, 0, 0, e, 0, -1, {{0}}, 0};
  plans_take(&ip, m);
  tpu_tensor_pool_begin();
  tpu_status st = tpu__ref_call(&ip, e, argv, nargs, out, d);
  tpu_tensor_pool_end();
  plans_put(&ip, m, st);
  tpu_free(argv);
  return st;
}
