/* An elementwise op on broadcasts as a broadcast of the op (part of the simplify pass).
 *
 * op(broadcast(x, D), broadcast(y, D), broadcast(s, {}), ...) with x and y of one shape and
 * every other operand a broadcast of a scalar is broadcast(op(x, y, broadcast(s)), D): XLA's
 * algebraic simplifier sinks the broadcast so (its "sink broadcast after an op with a unique
 * non-scalar operand"), and the op then runs over x's elements only. The XLA TPU compiler's
 * programs show it: JAX's random bits count through a u64 iota broadcast along the columns
 * and multiplied by the row length (iota_2x32_shape), and the compiler computes that product
 * over the rows alone, u32[128] kernels of their own (dropout_128x197's broadcast_add_fusion,
 * shift-right-logical_add_fusion, fusion.18), broadcast into the kernel that draws the bits.
 * Exact: each element is the same op on the same values. */
#include <string.h>

#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

static int sinkable_op(const tpu_instr *in) {
  tpu_op_class k = tpu_op_class_of(in->op);
  if (k == TPU_CLS_UNARY || k == TPU_CLS_BINARY || k == TPU_CLS_TERNARY) return 1;
  return in->op == TPU_OP_CONVERT || in->op == TPU_OP_COMPARE || in->op == TPU_OP_SELECT || in->op == TPU_OP_CLAMP;
}

static int scalar_broadcast(const tpu_instr *o) {
  return o->op == TPU_OP_BROADCAST && o->noperands == 1 && o->operands[0]->shape.rank == 0;
}

static int same_dims(const tpu_i64s *a, const tpu_i64s *b) {
  if (a->n != b->n) return 0;
  for (int i = 0; i < a->n; i++)
    if (a->v[i] != b->v[i]) return 0;
  return 1;
}

tpu_status tpu__sink_broadcast(tpu_builder *b, tpu_comp *c, tpu_instr *in, tpu_instr **repl) {
  *repl = NULL;
  if (!sinkable_op(in) || in->noperands < 1 || in->noperands > 3 || in->shape.dtype == TPU_TUPLE) return TPU_OK;
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, "sharding")) return TPU_OK; /* the partitioner's, for the full shape */
  const tpu_instr *first = NULL; /* the first broadcast of a non-scalar */
  for (int k = 0; k < in->noperands; k++) {
    const tpu_instr *o = in->operands[k];
    if (scalar_broadcast(o)) continue;
    if (o->op != TPU_OP_BROADCAST || o->noperands != 1) return TPU_OK;
    if (!first) {
      first = o;
    } else if (!tpu_shape_equal(&o->operands[0]->shape, &first->operands[0]->shape) ||
               !same_dims(&o->dimensions, &first->dimensions)) {
      return TPU_OK;
    }
  }
  if (!first) return TPU_OK; /* all scalars: constant folding's or the scalar unit's */
  const tpu_shape *xs = &first->operands[0]->shape;
  if (tpu_shape_numel(xs) >= tpu_shape_numel(&in->shape)) return TPU_OK; /* no smaller op */
  tpu_instr *ops[3];
  for (int k = 0; k < in->noperands; k++) {
    tpu_instr *o = in->operands[k];
    if (!scalar_broadcast(o)) {
      ops[k] = o->operands[0];
      continue;
    }
    tpu_shape s = *xs;
    s.dtype = o->shape.dtype;
    s.layout_tail = NULL;
    s.has_layout = 0;
    TPU_TRY(tpu_build_instr_like(b, c, o, TPU_OP_BROADCAST, o->name, &s, &o->operands[0], 1, &ops[k]));
    TPU_TRY(tpu_build_set_attr(b, ops[k], "dimensions", "{}"));
  }
  tpu_shape ns = *xs;
  ns.dtype = in->shape.dtype;
  ns.layout_tail = NULL;
  ns.has_layout = 0;
  tpu_instr *op;
  TPU_TRY(tpu_build_instr_like(b, c, in, in->op, in->name, &ns, ops, in->noperands, &op));
  for (int i = 0; i < in->nattrs; i++)
    if (strcmp(in->attrs[i].name, "metadata")) TPU_TRY(tpu_build_set_attr(b, op, in->attrs[i].name, in->attrs[i].value));
  char dims[TPU_MAX_RANK * 24 + 4];
  TPU_TRY(tpu_build_instr_like(b, c, in, TPU_OP_BROADCAST, in->name, &in->shape, &op, 1, repl));
  return tpu_build_set_attr(b, *repl, "dimensions",
                            tpu_dims_text(dims, sizeof dims, first->dimensions.v, (int)first->dimensions.n));
}
