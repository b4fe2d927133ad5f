/* combine-collectives, first step: type conversions move across the collectives that only
 * move data (all-gather, all-to-all, collective-permute, collective-broadcast), so the
 * narrower type travels, as XLA's CollectiveQuantizer does in the TPU pipeline after
 * partitioning:
 *
 *   collective -> unary ops -> convert to a narrower type
 *     becomes  convert -> collective -> unary ops
 *   convert to a wider type -> unary ops -> collective
 *     becomes  unary ops -> collective -> convert
 *
 * where the unary ops are bitcasts, copies, reshapes and slices (each with one user on the
 * first form, as the collective itself). The partitioner gathers a value where a
 * sharding constraint stands, which may be before its convert (a sequence-parallel norm's
 * f32 result gathered, then cast to bf16 for the next matmul; ZeRO-1's f32 master weights
 * gathered, then cast): the XLA TPU compiler's final programs gather the bf16 value
 * (bench/spmd/corpus: megatron_sp, zero1). Values are unchanged: these collectives copy
 * elements, which convert one by one. (XLA's pass also moves a scale-and-clamp
 * quantization; that form is left as it is.) */
#include <string.h>

#include "base/alloc.h"
#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

#define TPU_QUANT_MAX_CHAIN 8

/* (not a megascale transfer, a DCN send/recv the compiler wrote as it wants it sent) */
static int moves_data(const tpu_instr *in) {
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, "frontend_attributes") && strstr(in->attrs[i].value, "_xla_megascale_transfer_type"))
      return 0;
  return in->noperands == 1 && tpu_dtype_is_array(in->shape.dtype) &&
         (in->op == TPU_OP_ALL_GATHER || in->op == TPU_OP_ALL_TO_ALL || in->op == TPU_OP_COLLECTIVE_PERMUTE ||
          in->op == TPU_OP_COLLECTIVE_BROADCAST);
}

static int unary_move(const tpu_instr *in) {
  return in->noperands == 1 && tpu_dtype_is_array(in->shape.dtype) &&
         in->shape.dtype == in->operands[0]->shape.dtype &&
         (in->op == TPU_OP_BITCAST || in->op == TPU_OP_COPY || in->op == TPU_OP_RESHAPE || in->op == TPU_OP_SLICE);
}

static int convert_by(const tpu_instr *in, int narrower) {
  if (in->op != TPU_OP_CONVERT || in->noperands != 1 || !tpu_dtype_is_array(in->shape.dtype) ||
      !tpu_dtype_is_array(in->operands[0]->shape.dtype))
    return 0;
  size_t to = tpu_dtype_size(in->shape.dtype), from = tpu_dtype_size(in->operands[0]->shape.dtype);
  return narrower ? to < from : to > from;
}

/* A clone of src reading x, of src's dims in element type t (no layout). */
static tpu_status retyped(tpu_builder *b, tpu_comp *c, const tpu_instr *src, tpu_instr *x, tpu_dtype t,
                          tpu_instr **out) {
  TPU_TRY(tpu_build_clone_instr(b, c, src, &x, out));
  (*out)->shape.dtype = t;
  (*out)->shape.has_layout = 0;
  (*out)->shape.layout_tail = NULL;
  return TPU_OK;
}

/* The narrow convert after collective k (through single-use unary ops): moved before it. */
static tpu_status quantize(tpu_builder *b, tpu_comp *c, const tpu_uses *u, tpu_instr *k, int *changed) {
  tpu_instr *chain[TPU_QUANT_MAX_CHAIN];
  int n = 0;
  tpu_instr *x = k;
  while (!x->is_root && u->nusers[x->id] == 1) {
    tpu_instr *y = u->users[x->id][0];
    if (convert_by(y, 1)) {
      tpu_dtype t = y->shape.dtype;
      tpu_instr *cv, *coll;
      TPU_TRY(retyped(b, c, y, k->operands[0], t, &cv));
      cv->shape.rank = k->operands[0]->shape.rank;
      memcpy(cv->shape.dims, k->operands[0]->shape.dims, sizeof cv->shape.dims);
      TPU_TRY(retyped(b, c, k, cv, t, &coll));
      coll->src_name = k->src_name ? k->src_name : k->name;
      tpu_instr *z = coll;
      for (int j = 0; j < n; j++) TPU_TRY(retyped(b, c, chain[j], z, t, &z));
      tpu_build_replace_uses(c, y, z);
      *changed = 1;
      return TPU_OK;
    }
    if (!unary_move(y) || n == TPU_QUANT_MAX_CHAIN) return TPU_OK;
    chain[n++] = y;
    x = y;
  }
  return TPU_OK;
}

/* The wide convert before collective k (through unary ops): moved after it. */
static tpu_status dequantize(tpu_builder *b, tpu_comp *c, tpu_instr *k, int *changed) {
  tpu_instr *chain[TPU_QUANT_MAX_CHAIN];
  int n = 0;
  tpu_instr *x = k->operands[0];
  while (!convert_by(x, 0)) {
    if (!unary_move(x) || n == TPU_QUANT_MAX_CHAIN) return TPU_OK;
    chain[n++] = x;
    x = x->operands[0];
  }
  tpu_dtype narrow = x->operands[0]->shape.dtype;
  tpu_instr *z = x->operands[0], *coll, *cv;
  for (int j = n - 1; j >= 0; j--) TPU_TRY(retyped(b, c, chain[j], z, narrow, &z));
  TPU_TRY(retyped(b, c, k, z, narrow, &coll));
  coll->src_name = k->src_name ? k->src_name : k->name;
  TPU_TRY(retyped(b, c, x, coll, k->shape.dtype, &cv));
  cv->shape.rank = k->shape.rank;
  memcpy(cv->shape.dims, k->shape.dims, sizeof cv->shape.dims);
  tpu_build_replace_uses(c, k, cv);
  *changed = 1;
  return TPU_OK;
}

tpu_status tpu__quantize_collectives(tpu_builder *b, tpu_comp *c, int *changed, tpu_diag *d) {
  (void)d;
  int any = 0;
  for (int i = 0; i < c->ninstrs && !any; i++) any = moves_data(c->instrs[i]);
  if (!any) return TPU_OK;
  tpu_uses u;
  TPU_TRY(tpu_build_uses(b, c, &u));
  int n = c->ninstrs, made = 0;
  tpu_status st = TPU_OK;
  /* the instructions added here are past n and are not visited again */
  for (int i = 0; st == TPU_OK && i < n; i++) {
    tpu_instr *k = c->instrs[i];
    if (!moves_data(k)) continue;
    int done = 0;
    st = quantize(b, c, &u, k, &done);
    if (st == TPU_OK && !done) st = dequantize(b, c, k, &done);
    made |= done;
  }
  tpu_build_uses_free(&u);
  if (st == TPU_OK && made) {
    *changed = 1;
    if (tpu_build_remove_dead(b, c) < 0) st = TPU_ERR_NOMEM;
  }
  return st;
}
