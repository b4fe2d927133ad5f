/* IR mutation for compiler passes: new instructions and computations, use replacement,
 * dead-code removal, cloning, and re-deriving each computation's derived fields.
 *
 * Contract. A pass opens a tpu_builder on a module, mutates through it, and calls
 * tpu_build_finish on every computation it changed (or tpu_build_finish_all) before the
 * module is printed, verified or run: finish re-sorts `instrs` operands-first (keeping the
 * existing order where it already is one), renumbers `id`, rebuilds `params`, `order` and
 * the `is_root` flags from `root`. Everything new lives in the module's arena (constants'
 * tensors in m->literals), so nothing is freed on failure: after an error the module stays
 * printable and freeable but may be half-rewritten, and the caller should drop it.
 *
 * Names. Every new instruction or computation gets a name unique in the whole module:
 * the hint itself when it is free, else the hint without a trailing ".N" plus the first
 * free ".N". Attributes: the text (what the printer prints) is the source of truth;
 * tpu_build_set_attr writes the text and re-derives the typed fields from it, so the two
 * cannot disagree. */
#ifndef TPU_IR_BUILD_H
#define TPU_IR_BUILD_H

#include "ir/ir.h"

typedef struct tpu_builder {
  tpu_module *m;
  tpu_diag *d;
  /* Names in use (instructions and computations): open addressing, borrowed strings. */
  const char **names;
  size_t nnames, capnames;
  long next_suffix; /* fresh ".N" suffixes count up from the largest in the module */
  /* Spare capacity of grown instruction arrays: comps[i] may hold caps[i] entries. */
  tpu_comp **capcomps;
  int *caps;
  int ncaps, capcaps;
  int capmcomps; /* capacity of m->comps once grown by the builder (0: exactly ncomps) */
} tpu_builder;

/* Indexes the module's names. Errors (memory) go to d, which later calls also use. */
tpu_status tpu_builder_init(tpu_builder *b, tpu_module *m, tpu_diag *d);
void tpu_builder_deinit(tpu_builder *b);

/* A fresh module-unique name from `hint` (arena string). */
tpu_status tpu_build_name(tpu_builder *b, const char *hint, const char **out);

/* Appends a new instruction to computation c: opcode, result shape (copied; tuple
 * elements shared), operands (copied), no attributes, location `loc`. Typed fields are at
 * their parser defaults (feature/batch group count 1, index -1, largest 1). */
tpu_status tpu_build_instr(tpu_builder *b, tpu_comp *c, tpu_opcode op, const char *name_hint, const tpu_shape *shape,
                           tpu_instr *const *operands, int noperands, tpu_loc loc, tpu_instr **out);

/* tpu_build_instr at `like`'s location, with `like`'s metadata (a rewrite's new
 * instructions keep the JAX op name and source line the profile reports). */
tpu_status tpu_build_instr_like(tpu_builder *b, tpu_comp *c, const tpu_instr *like, tpu_opcode op, const char *name_hint,
                                const tpu_shape *shape, tpu_instr *const *operands, int noperands, tpu_instr **out);

/* Appends parameter `index` of `shape` to c (c->params is rebuilt by finish). */
tpu_status tpu_build_param(tpu_builder *b, tpu_comp *c, int64_t index, const char *name_hint, const tpu_shape *shape,
                           tpu_instr **out);

/* Appends a constant; takes ownership of *value (moved into m->literals, *value zeroed)
 * even on failure. The shape is value's dims and dtype (layout from `like` when given). */
tpu_status tpu_build_constant(tpu_builder *b, tpu_comp *c, const char *name_hint, tpu_tensor *value,
                              const tpu_shape *like, tpu_instr **out);

/* Sets attribute `name` to `value` (adds it, or replaces its text in place) and re-derives
 * the typed fields from all of the instruction's attribute text, e.g.
 * tpu_build_set_attr(b, f, "calls", comp->name) also sets f->calls. */
tpu_status tpu_build_set_attr(tpu_builder *b, tpu_instr *in, const char *name, const char *value);

/* A shape of element type t and the given dims, no layout. */
tpu_shape tpu_build_shape(tpu_dtype t, int rank, const int64_t *dims);

/* A dimension list as attribute text, "{a,b,c}", written into buf (n bytes); returns buf. */
const char *tpu_dims_text(char *buf, size_t n, const int64_t *v, int k);

/* Copies `src` (op, shape, attributes, typed fields, literal, called computations) into
 * computation c with the given operands (noperands must equal src's), named from src's
 * name. */
tpu_status tpu_build_clone_instr(tpu_builder *b, tpu_comp *c, const tpu_instr *src, tpu_instr *const *operands,
                                 tpu_instr **out);

/* A new empty computation named from `hint`, inserted into m->comps just before
 * `before` (at the end when NULL). It must get instructions and a root before finish. */
tpu_status tpu_build_comp(tpu_builder *b, const char *hint, const tpu_comp *before, tpu_comp **out);

/* A finished computation (a, b) -> op(a, b) on scalars of type t (a reducer: add, maximum,
 * ...), named from `hint`, inserted before `before`. */
tpu_status tpu_build_scalar_comp(tpu_builder *b, const char *hint, tpu_opcode op, tpu_dtype t, const tpu_comp *before,
                                 tpu_comp **out);

/* A copy of `src` (all instructions, called computations shared) inserted before
 * `before`; finished. */
tpu_status tpu_build_clone_comp(tpu_builder *b, const tpu_comp *src, const char *hint, const tpu_comp *before,
                                tpu_comp **out);

/* Every operand slot in c that names `old` now names `repl`, and so does c->root. Returns
 * how many uses were replaced (root included). The caller guarantees equal shapes. */
int tpu_build_replace_uses(tpu_comp *c, tpu_instr *old, tpu_instr *repl);

/* Batch form for passes that replace many instructions: fwd[id] (for the first n
 * instructions of c, by their current id; NULL = keep) names each one's replacement;
 * every operand slot and the root are rewritten, following chains. O(operands). */
void tpu_build_forward(tpu_comp *c, tpu_instr *const *fwd, int n);

/* Sets c's root (flags are fixed by finish). */
void tpu_build_set_root(tpu_comp *c, tpu_instr *root);

/* Kept even when nothing reads it: parameters and ops with effects beyond their value
 * (custom-call, infeed, outfeed, copy-start/copy-done). */
int tpu_build_has_effects(const tpu_instr *in);

/* Removes instructions the root does not reach, except parameters and ops with effects
 * beyond their value (custom-call, infeed, outfeed, ...). Returns how many were removed;
 * -1 on out-of-memory (reported in b->d). Finishes c. */
int tpu_build_remove_dead(tpu_builder *b, tpu_comp *c);

/* Removes computations the entry does not reach through called-computation references
 * and re-indexes the rest. Returns how many were removed; -1 on out-of-memory. */
int tpu_build_remove_unused_comps(tpu_builder *b);

/* Re-derives c's instrs order, ids, params, order and root flags; fails on a cycle or a
 * missing parameter number (both are pass bugs). */
tpu_status tpu_build_finish(tpu_builder *b, tpu_comp *c);
tpu_status tpu_build_finish_all(tpu_builder *b);

/* The computations an instruction calls (to_apply, condition, body, select, scatter,
 * calls, branches), in that order; returns the count (at most 6 + nbranches). `out`
 * needs room for 6 + in->nbranches entries. */
int tpu_build_callees(const tpu_instr *in, tpu_comp **out);

/* How many instructions of module m call computation b (as a body, condition, branch or any
 * other callee in tpu_build_callees' sense), counting each calling field once. */
int tpu_build_callers(const tpu_module *m, const tpu_comp *b);

/* Users of every instruction of a finished c, by id (valid until c changes): users[id]
 * lists the distinct users, nusers[id] counts them (being the root is not a use here). */
typedef struct tpu_uses {
  tpu_instr ***users;
  int *nusers;
  int n;
} tpu_uses;
tpu_status tpu_build_uses(tpu_builder *b, const tpu_comp *c, tpu_uses *u);
void tpu_build_uses_free(tpu_uses *u);

#endif
