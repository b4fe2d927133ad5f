/* Common subexpressions (part of the simplify pass; XLA's HloCSE): an instruction equal to
 * an earlier one of its computation — same opcode, result shape and layout, operands,
 * attributes (metadata aside) and called computations (the same one, or a small one with the
 * same instructions: JAX gives each reduce its own copy of `add`) — is replaced by it.
 * jnp.var's own mean of x is the mean the program already took; the two reductions become
 * one. Ops whose value is not a function of their operands (parameters, rng, custom calls,
 * infeed/outfeed, async copies, collectives, which pair up across chips) are never merged. */
#include <string.h>

#include "base/alloc.h"
#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

/* Callees compared instruction by instruction up to this size; larger ones must be the same. */
#define CSE_COMP_MAX 32

struct tpu__cse {
  const tpu_instr **slot; /* open addressing by hash; NULL = empty */
  size_t cap;
};

static int mergeable(const tpu_instr *in) {
  return !tpu_build_has_effects(in) && in->op != TPU_OP_RNG && in->op != TPU_OP_RNG_BIT_GENERATOR &&
         tpu_op_class_of(in->op) != TPU_CLS_COLLECTIVE && in->shape.dtype != TPU_TOKEN;
}

static int same_shape(const tpu_shape *a, const tpu_shape *b) {
  if (!tpu_shape_equal(a, b) || a->has_layout != b->has_layout) return 0;
  if (a->has_layout && memcmp(a->minor_to_major, b->minor_to_major, (size_t)a->rank)) return 0;
  const char *ta = a->layout_tail ? a->layout_tail : "", *tb = b->layout_tail ? b->layout_tail : "";
  return !strcmp(ta, tb);
}

static int same_literal(const tpu_tensor *a, const tpu_tensor *b) {
  if (!a || !b) return a == b;
  if (a->dtype != b->dtype || a->rank != b->rank || a->nbytes != b->nbytes || a->ntuple || b->ntuple) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return a->nbytes == 0 || !memcmp(a->data, b->data, a->nbytes);
}

static int is_callee_attr(const char *n) {
  static const char *const k[] = {"to_apply", "calls", "condition", "body", "select", "scatter",
                                  "branch_computations", "true_computation", "false_computation", NULL};
  for (int i = 0; k[i]; i++)
    if (!strcmp(n, k[i])) return 1;
  return 0;
}

/* Attributes other than metadata and callee names, in order. */
static int same_attrs(const tpu_instr *a, const tpu_instr *b) {
  int i = 0, j = 0;
  for (;;) {
    while (i < a->nattrs && (!strcmp(a->attrs[i].name, "metadata") || is_callee_attr(a->attrs[i].name))) i++;
    while (j < b->nattrs && (!strcmp(b->attrs[j].name, "metadata") || is_callee_attr(b->attrs[j].name))) j++;
    if (i == a->nattrs || j == b->nattrs) return i == a->nattrs && j == b->nattrs;
    if (strcmp(a->attrs[i].name, b->attrs[j].name) || strcmp(a->attrs[i].value, b->attrs[j].value)) return 0;
    i++, j++;
  }
}

static int same_comp(const tpu_comp *a, const tpu_comp *b, int depth);

/* a and b equal as instructions; operands compared by `ops_equal`: pointer equality at the
 * top level, position inside compared computations. */
static int same_instr(const tpu_instr *a, const tpu_instr *b, int by_position, int depth) {
  if (a->op != b->op || a->noperands != b->noperands || !same_shape(&a->shape, &b->shape)) return 0;
  if (a->op == TPU_OP_PARAMETER && a->index != b->index) return 0;
  for (int k = 0; k < a->noperands; k++)
    if (by_position ? a->operands[k]->id != b->operands[k]->id : a->operands[k] != b->operands[k]) return 0;
  if (!same_attrs(a, b) || !same_literal(a->literal, b->literal)) return 0;
  tpu_comp *ca[6 + 64], *cb[6 + 64];
  if (a->nbranches > 64 || b->nbranches > 64) return 0;
  int na = tpu_build_callees(a, ca), nb = tpu_build_callees(b, cb);
  if (na != nb) return 0;
  for (int k = 0; k < na; k++)
    if (ca[k] != cb[k] && !same_comp(ca[k], cb[k], depth + 1)) return 0;
  return 1;
}

static int same_comp(const tpu_comp *a, const tpu_comp *b, int depth) {
  if (depth > 4 || a->ninstrs != b->ninstrs || a->ninstrs > CSE_COMP_MAX || a->nparams != b->nparams) return 0;
  if (!a->root || !b->root || a->root->id != b->root->id) return 0;
  for (int i = 0; i < a->ninstrs; i++)
    if (!same_instr(a->instrs[i], b->instrs[i], 1, depth)) return 0;
  return 1;
}

static size_t hash_of(const tpu_instr *in) {
  size_t h = (size_t)in->op * 1000003u ^ (size_t)in->shape.rank * 7919u ^ (size_t)in->shape.dtype * 131u;
  for (int i = 0; i < in->shape.rank; i++) h = h * 31u + (size_t)in->shape.dims[i];
  for (int k = 0; k < in->noperands; k++) h = h * 1000003u ^ (size_t)(uintptr_t)in->operands[k];
  if (in->literal && in->literal->nbytes)
    for (size_t i = 0; i < in->literal->nbytes && i < 64; i++) h = h * 31u + ((const unsigned char *)in->literal->data)[i];
  return h;
}

tpu__cse *tpu__cse_new(int n) {
  tpu__cse *t = tpu_calloc(1, sizeof *t);
  if (!t) return NULL;
  t->cap = 16;
  while (t->cap < 2 * (size_t)n) t->cap *= 2;
  t->slot = tpu_calloc(t->cap, sizeof *t->slot);
  if (!t->slot) {
    tpu_free(t);
    return NULL;
  }
  return t;
}

void tpu__cse_free(tpu__cse *t) {
  if (!t) return;
  tpu_free(t->slot);
  tpu_free(t);
}

tpu_instr *tpu__cse_find_or_add(tpu__cse *t, tpu_instr *in) {
  if (!mergeable(in)) return NULL;
  size_t i = hash_of(in) & (t->cap - 1);
  for (; t->slot[i]; i = (i + 1) & (t->cap - 1))
    if (same_instr(t->slot[i], in, 0, 0)) return (tpu_instr *)t->slot[i];
  t->slot[i] = in; /* at most n entries in 2n slots: never full */
  return NULL;
}
