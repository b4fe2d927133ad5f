/* Fused evaluation of f32 elementwise trees in the reference interpreter (ref/fused.c).
 *
 * A node is an f32 binary or unary op (one the elementwise kernels define on f32) whose
 * operands have its dimensions, a broadcast of an f32 scalar, or a select of f32 arrays
 * (its predicate of the same dimensions or a scalar); a compare of f32 arrays is a node
 * inlined only into a select's predicate. A node used once, by
 * another node of the same computation, and not the root, is inlined into that user: the
 * tree runs block by block (TPU_EW_BLOCK elements, threads over blocks), each node with
 * the same block kernel the unfused op runs, so every element has the same bits as when
 * each op is evaluated on its own. */
#ifndef TPU_REF_FUSED_H
#define TPU_REF_FUSED_H

#include "ref/ref_int.h"

/* Whether `in` is a node. */
int tpu__ref_fusible(const tpu_instr *in);

/* inl[id] = 1 for every instruction of c inlined into its user (c->ninstrs entries);
 * uses[id] counts the operand slots that read instruction id; size is scratch (c->ninstrs
 * entries). A tree has at most 32 nodes. */
void tpu__ref_fuse_plan(const tpu_comp *c, const int *uses, uint8_t *inl, int *size);

/* The operand slots of the tree rooted at `root` that read values (not inlined nodes), into
 * leaves (at most 96); returns how many. */
int tpu__ref_fused_leaves(const tpu_instr *root, const uint8_t *inl, const tpu_instr **leaves);

/* Evaluates the tree rooted at `root` (a node, not inlined) into *out; val[id] holds the
 * value of every leaf instruction. */
tpu_status tpu__ref_fused_eval(const tpu_instr *root, const uint8_t *inl, const tpu_tensor *const *val,
                               tpu_tensor *out, tpu_diag *d);

/* An s32/u32 tree (root a node, not inlined) decoded once: its nodes and which instruction
 * ids give its leaves; NULL when root is not such a tree or memory runs out. Free it with
 * tpu__ref_itree_free. tpu__ref_i32_tree_eval evaluates it (the result tpu__ref_fused_eval
 * gives) reading only the leaves' values from val[id]. */
typedef struct tpu__ref_itree tpu__ref_itree;
tpu__ref_itree *tpu__ref_i32_tree(const tpu_instr *root, const uint8_t *inl);
void tpu__ref_itree_free(tpu__ref_itree *t);
tpu_status tpu__ref_i32_tree_eval(const tpu__ref_itree *t, const tpu_instr *root, const tpu_tensor *const *val,
                                  tpu_tensor *out, tpu_diag *d);

#endif
