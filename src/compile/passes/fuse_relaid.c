/* The fuse pass's rule for a transpose whose result a kernel broadcasts (fuse.c grow): where
 * it reorders its operand's bytes in the layout the kernel computes in, it is a copy of its
 * own, not part of the kernel. */
#include <string.h>

#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"

/* The value whose elements x broadcasts, followed up through converts of its dimensions to
 * the broadcast that reads it (NULL where none does). */
static const tpu_instr *broadcast_user(const tpu_uses *us, const tpu_instr *x, int depth) {
  for (int k = 0; depth > 0 && k < us->nusers[x->id]; k++) {
    const tpu_instr *u = us->users[x->id][k];
    if (u->op == TPU_OP_BROADCAST && u->operands[0] == x && tpu_shape_numel(&u->shape) > tpu_shape_numel(&x->shape) &&
        u->dimensions.n == x->shape.rank)
      return u;
    if (u->op == TPU_OP_CONVERT) {
      const tpu_instr *b = broadcast_user(us, u, depth - 1);
      if (b) return b;
    }
  }
  return NULL;
}

/* The order, minor first, in which the elementwise kernel reading broadcast b lays out b's
 * dimensions (*mtm): that of the other operand of the op b feeds, traced down through
 * converts, bitcasts and transposes to a laid-out value (a parameter in the TPU's layout;
 * the compiler's layout assignment makes the transposes between layouts, the matrix
 * transposed to list its contracting dimensions in the dot's order among them). 0 where none
 * is found: b's own order (row-major). */
static int product_order(const tpu_uses *us, const tpu_instr *b, int64_t *mtm) {
  int rank = b->shape.rank;
  for (int k = 0; k < us->nusers[b->id]; k++) {
    const tpu_instr *u = us->users[b->id][k];
    if (tpu_op_class_of(u->op) != TPU_CLS_BINARY || u->noperands != 2) continue;
    const tpu_instr *o = u->operands[u->operands[0] == b ? 1 : 0];
    if (o->shape.rank != rank || memcmp(o->shape.dims, b->shape.dims, sizeof o->shape.dims[0] * (size_t)rank)) continue;
    int64_t map[TPU_MAX_RANK]; /* map[d]: the dimension of b that o's dimension d is */
    for (int d = 0; d < rank; d++) map[d] = d;
    for (int depth = 0; depth < 8; depth++) {
      if (o->shape.has_layout && o->shape.rank == rank) {
        for (int j = 0; j < rank; j++) mtm[j] = map[o->shape.minor_to_major[j]];
        return 1;
      }
      if (o->noperands != 1 || o->operands[0]->shape.rank != rank) break;
      if (o->op == TPU_OP_TRANSPOSE && o->dimensions.n == rank) {
        int64_t next[TPU_MAX_RANK];
        for (int j = 0; j < rank; j++) next[o->dimensions.v[j]] = map[j];
        memcpy(map, next, sizeof next[0] * (size_t)rank);
      } else if ((o->op != TPU_OP_CONVERT && o->op != TPU_OP_BITCAST) ||
                 memcmp(o->operands[0]->shape.dims, o->shape.dims, sizeof o->shape.dims[0] * (size_t)rank)) {
        break;
      }
      o = o->operands[0];
    }
  }
  return 0;
}

/* A transpose whose result a kernel broadcasts — reads each of its elements more than once —
 * and that reorders its operand's bytes in the layout that kernel computes in (the other
 * operand's): the XLA TPU compiler does not take it into the kernel but relays the operand out
 * in a `copy` of its own, which the kernel then reads in place. A vector product whose vector
 * operand is laid out otherwise than the matrix operand (JAX's 'cab,badc->dab':
 * bf16[33,12,8]{0,2,1} against bf16[8,12,128,33]{2,0,3,1}; 'bca,dabc->abd') is a `copy` of
 * the vector and a multiply_reduce kLoop fusion on v4, v5e, v5p and v6e (families tune
 * einsum_cab_badc_dab_a12_b8_c33_d128_bf16, einsum_bca_dabc_abd_a8_b16_c1000_d3_bf16; the copy
 * into VMEM, S(1), on v5e and v6e, CMEM on v4); one whose vector lies in the matrix's order
 * already ('ab,badc->dac': bf16[12,33] against [33,12,197,1]{2,0,3,1}) is broadcast from
 * where it lies, no copy; one read once (both operands of 'badc,adbc->ba', no broadcast) is
 * relaid inside the kernel (fused_computation.1's copy.3 there). */
int tpu__fuse_relaid_transpose(const tpu_uses *us, const tpu_instr *p) {
  if (p->op != TPU_OP_TRANSPOSE || p->noperands != 1 || p->dimensions.n != p->shape.rank) return 0;
  const tpu_instr *b = broadcast_user(us, p, 4);
  if (!b) return 0;
  int64_t mtm[TPU_MAX_RANK];
  if (b->shape.rank > TPU_MAX_RANK) return 0;
  if (!product_order(us, b, mtm))
    for (int j = 0; j < b->shape.rank; j++) mtm[j] = b->shape.rank - 1 - j;
  /* the operand as it lies: through reshapes that only drop or insert dimensions of one
   * element (bitcasts, which keep the other dimensions' order) to a laid-out value */
  const tpu_instr *o = p->operands[0], *src = o;
  while ((src->op == TPU_OP_RESHAPE || src->op == TPU_OP_BITCAST) && src->noperands == 1 && !src->shape.has_layout &&
         tpu__unit_reshape(src))
    src = src->operands[0];
  /* an entry parameter, in HBM: a value computed on chip stays in VMEM on v5e and v6e, where
   * the compiler's relayout copies it within VMEM (t5's relative-position bias,
   * bf16[64,64,8]{2,1,0} into {0,1,2} before it is broadcast over the batch: copy.10, 100
   * cycles on v5e and v6e), which a kernel of tpusim's own does not price; it stays fused */
  if (src->op != TPU_OP_PARAMETER || !src->parent || !src->parent->is_entry) return 0;
  int64_t od[TPU_MAX_RANK]; /* the operand's dimensions of more than one element, in order */
  int no = 0;
  for (int d = 0; d < o->shape.rank && no < TPU_MAX_RANK; d++)
    if (o->shape.dims[d] > 1) od[no++] = d;
  const tpu_shape *ss = &src->shape;
  /* the source's dimensions of more than one element, minor first, as the product's; in the
   * order of the product's layout when the operand lies as the kernel reads it */
  int last = -1;
  for (int k = 0; k < ss->rank; k++) {
    int d = ss->has_layout ? (int)ss->minor_to_major[k] : ss->rank - 1 - k;
    if (ss->dims[d] <= 1) continue;
    int at = 0; /* d's place among the source's dimensions of more than one element */
    for (int e = 0; e < d; e++) at += ss->dims[e] > 1;
    if (at >= no) return 0;
    int j = 0;
    while (j < p->shape.rank && p->dimensions.v[j] != od[at]) j++;
    if (j == p->shape.rank) return 0;
    int pos = 0;
    while (pos < b->shape.rank && mtm[pos] != b->dimensions.v[j]) pos++;
    if (pos < last) return 1;
    last = pos;
  }
  return 0;
}
