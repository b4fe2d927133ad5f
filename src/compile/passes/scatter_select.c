/* One-hot scatter as a select (part of the simplify pass).
 *
 * JAX differentiates `take_along_axis` (a cross-entropy loss picking each row's label) into
 * a scatter-add of one value per row into a broadcast zero: f32[4096,32000] with one update
 * per row at the label's column. The XLA TPU compiler computes it elementwise instead —
 * out[b, j] = (j == label[b]) ? 0 + g[b] : 0 — fused into the kernel that reads it, rather
 * than writing the zeros and scattering (its cross-entropy gradient has no scatter kernel).
 * tpusim does the same for a scatter that
 *   - combines by addition into a broadcast scalar,
 *   - writes one element per update (no window dimensions), along one operand dimension d,
 *   - has every other operand dimension a batching dimension, in order, so each row of the
 *     operand gets exactly one update (the indices' other dimensions all of size 1).
 * Values are unchanged: the selected element is the combiner applied to the broadcast value
 * and the update, as the scatter computes it; an index out of range matches no column and
 * leaves the row as it was, as the scatter skips it. */
#include <string.h>

#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

/* Is `c` (a, b) -> add(a, b)? (hlo_passes.h) */
int tpu__is_adder(const tpu_comp *c) {
  if (!c || c->nparams != 2 || !c->root) return 0;
  const tpu_instr *r = c->root;
  return r->op == TPU_OP_ADD && r->noperands == 2 && r->operands[0]->op == TPU_OP_PARAMETER &&
         r->operands[1]->op == TPU_OP_PARAMETER && r->operands[0] != r->operands[1];
}

static int ascending(const tpu_i64s *v) {
  for (int i = 1; i < v->n; i++)
    if (v->v[i] <= v->v[i - 1]) return 0;
  return 1;
}

/* One new instruction carrying `at`'s location and metadata. */
static tpu_status emit(tpu_builder *b, tpu_comp *c, const tpu_instr *at, tpu_opcode op, const tpu_shape *s,
                       tpu_instr *const *ops, int n, const char *attr, const char *value, tpu_instr **out) {
  TPU_TRY(tpu_build_instr_like(b, c, at, op, "onehot", s, ops, n, out));
  return attr ? tpu_build_set_attr(b, *out, attr, value) : TPU_OK;
}

tpu_status tpu__scatter_to_select(tpu_builder *b, tpu_comp *c, tpu_instr *in, tpu_instr **repl) {
  *repl = NULL;
  if (in->op != TPU_OP_SCATTER || in->noperands != 3 || !tpu__is_adder(in->to_apply)) return TPU_OK;
  tpu_instr *o = in->operands[0], *ix = in->operands[1], *u = in->operands[2];
  const tpu_scatter_dims *sd = in->scatter;
  int r = o->shape.rank, ri = ix->shape.rank;
  if (o->op != TPU_OP_BROADCAST || o->noperands != 1 || o->operands[0]->shape.rank != 0 || r < 1 ||
      !tpu_dtype_is_int(ix->shape.dtype) || sd->update_window_dims.n != 0 || sd->inserted_window_dims.n != 1 ||
      sd->scatter_dims_to_operand_dims.n != 1 || sd->inserted_window_dims.v[0] != sd->scatter_dims_to_operand_dims.v[0] ||
      sd->input_batching_dims.n != r - 1 || sd->scatter_indices_batching_dims.n != r - 1 ||
      !ascending(&sd->input_batching_dims) || !ascending(&sd->scatter_indices_batching_dims))
    return TPU_OK;
  int d = (int)sd->scatter_dims_to_operand_dims.v[0];
  int64_t ivd = sd->index_vector_dim;
  if (d < 0 || d >= r || tpu_i64s_find(&sd->input_batching_dims, d) >= 0) return TPU_OK;
  if (ivd < ri && ix->shape.dims[ivd] != 1) return TPU_OK;
  /* batching dimensions pair up by size; every other index dimension holds one index */
  for (int k = 0; k < r - 1; k++) {
    int64_t ib = sd->scatter_indices_batching_dims.v[k], ob = sd->input_batching_dims.v[k];
    if (ib < 0 || ib >= ri || ib == ivd || ix->shape.dims[ib] != o->shape.dims[ob]) return TPU_OK;
  }
  for (int i = 0; i < ri; i++)
    if (i != ivd && tpu_i64s_find(&sd->scatter_indices_batching_dims, i) < 0 && ix->shape.dims[i] != 1) return TPU_OK;
  if (u->shape.dtype != o->shape.dtype || tpu_shape_numel(&u->shape) != tpu_shape_numel(&o->shape) / o->shape.dims[d])
    return TPU_OK;

  /* per row of the operand: its index and its update, broadcast along d */
  tpu_shape rows, full = o->shape, mask = o->shape;
  memset(&rows, 0, sizeof rows);
  rows.dtype = ix->shape.dtype;
  for (int i = 0; i < r; i++)
    if (i != d) rows.dims[rows.rank++] = o->shape.dims[i];
  full.layout_tail = NULL;
  mask.layout_tail = NULL;
  mask.dtype = TPU_PRED;
  tpu_shape iota_s = full, urows = rows;
  iota_s.dtype = ix->shape.dtype;
  urows.dtype = u->shape.dtype;
  char dims[TPU_MAX_RANK * 24 + 4], d_text[24];
  tpu_dims_text(dims, sizeof dims, sd->input_batching_dims.v, sd->input_batching_dims.n);
  snprintf(d_text, sizeof d_text, "%d", d);
  tpu_instr *idx, *idxb, *iot, *eq, *ur, *ub, *sum, *pair[2], *three[3];
  TPU_TRY(emit(b, c, in, TPU_OP_RESHAPE, &rows, &ix, 1, NULL, NULL, &idx));
  TPU_TRY(emit(b, c, in, TPU_OP_BROADCAST, &iota_s, &idx, 1, "dimensions", dims, &idxb));
  TPU_TRY(emit(b, c, in, TPU_OP_IOTA, &iota_s, NULL, 0, "iota_dimension", d_text, &iot));
  pair[0] = iot;
  pair[1] = idxb;
  TPU_TRY(emit(b, c, in, TPU_OP_COMPARE, &mask, pair, 2, "direction", "EQ", &eq));
  TPU_TRY(emit(b, c, in, TPU_OP_RESHAPE, &urows, &u, 1, NULL, NULL, &ur));
  TPU_TRY(emit(b, c, in, TPU_OP_BROADCAST, &full, &ur, 1, "dimensions", dims, &ub));
  pair[0] = o;
  pair[1] = ub;
  TPU_TRY(emit(b, c, in, TPU_OP_ADD, &full, pair, 2, NULL, NULL, &sum));
  three[0] = eq;
  three[1] = sum;
  three[2] = o;
  return emit(b, c, in, TPU_OP_SELECT, &full, three, 3, NULL, NULL, repl);
}
