/* The fuse pass's rule for a residual add that ends its matmul's kernel (fuse.c
 * shared_cheap): the sum of a dot's result and a residual, read by the next norm's row sums
 * and by other kernels, is stored by the dot's kernel, never recomputed in each reader; the
 * row sums then join that kernel as a second result (fuse_merge.c merge_matmul_one). */
#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"

/* Does a sum over x's last dimension alone read x, directly or through converts, unary ops and
 * x times itself (a layer norm's mean, an RMS norm's sum of squares), depth steps at most? */
static int row_summed(const tpu_uses *u, const tpu_instr *x, int depth) {
  for (int k = 0; k < u->nusers[x->id]; k++) {
    const tpu_instr *y = u->users[x->id][k];
    if (y->op == TPU_OP_REDUCE) {
      if (y->operands[0] == x && x->shape.rank >= 1 && y->dimensions.n == 1 &&
          y->dimensions.v[0] == x->shape.rank - 1 && y->to_apply && y->to_apply->root &&
          y->to_apply->root->op == TPU_OP_ADD)
        return 1;
      continue;
    }
    if (depth <= 0 || y->shape.rank != x->shape.rank || tpu_shape_numel(&y->shape) != tpu_shape_numel(&x->shape))
      continue;
    int step = y->op == TPU_OP_CONVERT || tpu_op_class_of(y->op) == TPU_CLS_UNARY ||
               (y->op == TPU_OP_MULTIPLY && y->noperands == 2 && y->operands[0] == x && y->operands[1] == x);
    if (step && row_summed(u, y, depth - 1)) return 1;
  }
  return 0;
}

/* Is p a residual add on a dot's result (an add of the dot's own result and an array of its
 * shape that is no broadcast) whose sum a row sum over its last dimension reads beside other
 * readers? The XLA TPU compiler's output projection kernels in transformer layers return
 * the sum and the next norm's row sums (the compiled llama_fwd_b4s256d512h8kv2 v5p's
 * `fusion.7`: (f32[4,256], bf16[4,256,512]) from the convolution, the add in f32 and the
 * squares' reduce; bench/fidelity/probes/resid_norm.py). */
int tpu__fuse_residual_sum(const tpu_uses *u, const tpu_instr *p) {
  if (p->op != TPU_OP_ADD || p->noperands != 2 || u->nusers[p->id] < 2 || p->shape.rank < 1) return 0;
  int dots = 0;
  for (int k = 0; k < 2; k++) {
    const tpu_instr *o = p->operands[k];
    while (o->op == TPU_OP_CONVERT && o->noperands == 1 && u->nusers[o->id] == 1) o = o->operands[0];
    if (o->op == TPU_OP_BROADCAST || o->op == TPU_OP_CONSTANT || o->op == TPU_OP_IOTA ||
        tpu_shape_numel(&o->shape) != tpu_shape_numel(&p->shape))
      return 0;
    if (o->op == TPU_OP_DOT && u->nusers[o->id] == 1) dots++;
  }
  return dots >= 1 && row_summed(u, p, 3);
}
