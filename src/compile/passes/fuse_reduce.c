/* The fuse pass's rule for a reduce's narrowed result (fuse.c may_join): the reduce writes
 * the narrow value in the result's layout itself when only a convert, transposes and
 * reshapes that move no bytes lie between them. */
#include <string.h>

#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"

/* The order, minor first, in which reduce r lays out the dimensions it keeps: their order in
 * its input's layout, which it reads from the parameter of its input's dimensions that its
 * input is computed from through elementwise ops and converts (the XLA TPU compiler's reduce
 * keeps its input's physical order: einsum('dcba,bac->bad') reduces a bf16[8,16,12,12]
 * {1,0,3,2} to [12,12,8]{2,1,0}, then copies it to the result's layout); row-major when it
 * has none. */
static void reduce_out_order(const tpu_instr *r, int64_t *mm) {
  const tpu_instr *in = r->operands[0], *src = NULL;
  const tpu_instr *stack[16];
  int ns = 0;
  stack[ns++] = in;
  while (ns > 0 && !src) {
    const tpu_instr *x = stack[--ns];
    if (x->shape.rank != in->shape.rank || memcmp(x->shape.dims, in->shape.dims, sizeof x->shape.dims[0] * (size_t)in->shape.rank))
      continue;
    if (x->shape.has_layout && !x->shape.layout_tail) {
      src = x;
      break;
    }
    tpu_op_class k = tpu_op_class_of(x->op);
    if (x->op != TPU_OP_CONVERT && k != TPU_CLS_UNARY && k != TPU_CLS_BINARY) continue;
    for (int j = 0; j < x->noperands && ns < 16; j++) stack[ns++] = x->operands[j];
  }
  int rank = in->shape.rank, n = 0;
  for (int k = 0; k < rank; k++) {
    int64_t d = src ? src->shape.minor_to_major[k] : rank - 1 - k;
    if (tpu_i64s_find(&r->dimensions, d) >= 0) continue;
    int64_t at = 0; /* d's place among the kept dimensions */
    for (int64_t e = 0; e < d; e++) at += tpu_i64s_find(&r->dimensions, e) < 0;
    mm[n++] = at;
  }
}

/* Whether reshape x only inserts or removes dimensions of size 1 (its operand's other
 * dimensions, in order, are its own): it moves no bytes. */
int tpu__unit_reshape(const tpu_instr *x) {
  const tpu_shape *a = &x->operands[0]->shape, *r = &x->shape;
  int i = 0, j = 0;
  for (;;) {
    while (i < a->rank && a->dims[i] == 1) i++;
    while (j < r->rank && r->dims[j] == 1) j++;
    if (i == a->rank || j == r->rank) return i == a->rank && j == r->rank;
    if (a->dims[i++] != r->dims[j++]) return 0;
  }
}

/* Whether x's layout (row-major without one) stores its dimensions of more than one element,
 * minor first, as the reduce's dimensions want[0..nw): lbl names the reduce's dimension each
 * of x's holds. */
static int stores_as(const tpu_shape *x, const int64_t *lbl, const int64_t *want, int nw) {
  int n = 0, rank = x->rank;
  for (int k = 0; k < rank; k++) {
    int64_t d = x->has_layout ? x->minor_to_major[k] : rank - 1 - k;
    if (x->dims[d] == 1) continue;
    if (n == nw || lbl[d] != want[n]) return 0;
    n++;
  }
  return n == nw;
}

/* Whether x is the program's result (the entry computation's root), which the back end lays
 * out as it pads least (layout.c), as the XLA TPU compiler chooses a result's layout: a
 * reshape there that only inserts or removes dimensions of one element is a bitcast (the
 * compiler's einsum('abcd,cbx->adx') with x = 1 writes bf16[4,256] and bitcasts it to the
 * result's [4,256,1]{1,0,2}; libtpu probe, v4 v5e v5p). Not to or from one dimension, tiled
 * otherwise (gemm_w8a16_1024x1000x1's bf16[1024] reshaped to [1024,1]{0,1:T(2,128)}: a
 * `reshape` of 2,167 cycles on v6e). */
static int program_result(const tpu_instr *x) {
  return x->parent && x->parent->is_entry && x->parent->root == x && x->noperands == 1 && x->shape.rank >= 2 &&
         x->operands[0]->shape.rank >= 2;
}

/* Whether x is the program's result, or its only reader is: a reshape of dimensions of one
 * element that is the result (a bitcast in the result's layout, program_result). */
static int leaves_program(const tpu_instr *x) {
  const tpu_comp *c = x->parent;
  if (!c || !c->is_entry || !c->root) return 0;
  if (c->root == x) return 1;
  const tpu_instr *r = c->root;
  if (r->op != TPU_OP_RESHAPE || r->noperands != 1 || r->operands[0] != x || !program_result(r) || !tpu__unit_reshape(r))
    return 0;
  for (int i = 0; i < c->ninstrs; i++)
    for (int j = 0; j < c->instrs[i]->noperands; j++)
      if (c->instrs[i]->operands[j] == x && c->instrs[i] != r) return 0;
  return 1;
}

/* Whether a group of n members, grown from its root down to member m, only narrows and relabels what
 * reduce p writes: a chain of single-operand members each reading the next, one a narrowing
 * convert, the others transposes and reshapes that move no bytes (the result's layout holds
 * the reduce's output in the order the reduce writes it, reduce_out_order; a reshape only
 * inserts or removes dimensions of size 1, a bitcast in the tiled layouts). The reduce then writes the narrow value in the
 * final layout itself, as the XLA TPU compiler's reduce does (its reduce to bf16[16,3]{0,1}
 * for einsum('bca,ba->ac') is one kernel, the transpose a layout; its strength-reduced
 * einsum('ba,acb->ca') is one kLoop fusion whose bf16[8] reduce is bitcast to the result's
 * bf16[1,8]). */
int tpu__reduce_written_as(const tpu_chip *chip, const tpu_instr *root, const tpu_instr *m, const tpu_instr *p, int n) {
  const tpu_instr *chain[16];
  int nc = 0, narrowed = 0;
  for (const tpu_instr *x = root;; x = x->operands[0]) {
    if (x->noperands != 1 || nc == 16) return 0;
    if (tpu__fuse_narrowing(x))
      narrowed++;
    else if (x->op != TPU_OP_TRANSPOSE &&
             !(x->op == TPU_OP_RESHAPE && tpu__unit_reshape(x) && (tpu__reshape_moves_no_bytes(chip, x) || program_result(x))))
      return 0;
    chain[nc++] = x;
    if (x == m) break;
  }
  if (narrowed != 1 || nc != n) return 0;
  int64_t order[TPU_MAX_RANK], want[TPU_MAX_RANK], lbl[TPU_MAX_RANK];
  int rank = p->shape.rank, nw = 0;
  if (rank > TPU_MAX_RANK) return 0;
  reduce_out_order(p, order);
  for (int k = 0; k < rank; k++) {
    lbl[k] = k;
    if (p->shape.dims[order[k]] > 1) want[nw++] = order[k];
  }
  /* the chain's root as stored: the program's result (or the value the result reshapes) in
   * the layout that pads least, as the back end lays it out (layout.c) and the compiler
   * chooses it, whatever layout the program's text gives it (JAX's einsum('dacb,cbae->ead')
   * with e = 1: the sum's bf16[8,12] transposed to [12,8], reshaped to the result [1,12,8];
   * [12,8] pads least with 12 in the lanes, the sum's own order: the compiler's program is one
   * multiply_reduce fusion whose result is bitcast to {1,2,0}, libtpu probe, v4 v5e v5p v6e) */
  tpu_shape out = root->shape;
  if (chip && leaves_program(root) && !out.layout_tail && out.rank >= 2 && out.rank <= TPU_MAX_RANK) {
    int second, minor, k = 0;
    tpu__least_tiling(chip, &out, &second, &minor);
    out.has_layout = 1;
    out.minor_to_major[k++] = minor;
    out.minor_to_major[k++] = second;
    for (int d = out.rank - 1; d >= 0; d--)
      if (d != minor && d != second) out.minor_to_major[k++] = d;
  }
  for (int i = nc - 1; i >= 0; i--) { /* from the reduce up */
    const tpu_instr *t = chain[i];
    if (t->shape.rank > TPU_MAX_RANK) return 0;
    int64_t next[TPU_MAX_RANK];
    if (t->op == TPU_OP_TRANSPOSE) {
      for (int j = 0; j < t->shape.rank; j++) next[j] = lbl[t->dimensions.v[j]];
    } else if (t->op == TPU_OP_RESHAPE) { /* the dimensions of more than one element keep their labels */
      const tpu_shape *a = &t->operands[0]->shape;
      int i2 = 0;
      for (int j = 0; j < t->shape.rank; j++) {
        next[j] = -1;
        if (t->shape.dims[j] == 1) continue;
        while (a->dims[i2] == 1) i2++;
        next[j] = lbl[i2++];
      }
    } else {
      continue; /* the convert */
    }
    memcpy(lbl, next, sizeof next[0] * (size_t)t->shape.rank);
    if (!stores_as(i == 0 ? &out : &t->shape, lbl, want, nw)) return 0;
  }
  return 1;
}
