/* Builders shared by the collective rewrites that run after partitioning (ag_as_ar.c,
 * rs_pad.c): each device's own entry of a per-device table, computed as the XLA TPU
 * compiler's programs compute it — partition-id, converted to s32, indexes a constant
 * table by a one-element dynamic-slice, reshaped to a scalar. */
#include <stdio.h>

#include "compile/spmd/spmd.h"
#include "ir/build.h"

static tpu_status add(tpu_builder *b, tpu_comp *c, const char *pass, tpu_opcode op, const tpu_shape *sh,
                      tpu_instr **ops, int n, tpu_loc loc, tpu_instr **out) {
  tpu_shape r = *sh;
  r.has_layout = 0;
  r.layout_tail = NULL;
  return tpu_build_instr(b, c, op, pass, &r, ops, n, loc, out);
}

tpu_status tpu__spmd_device_entry(tpu_builder *b, tpu_comp *c, const char *pass, const int64_t *self, int64_t ndev,
                                  int64_t scale, int64_t base, tpu_loc loc, tpu_instr **out, tpu_instr **zero) {
  tpu_diag *d = b->d;
  char name[64];
  tpu_tensor t, z;
  tpu_instr *tab, *pid, *cv, *ds, *ops[2];
  TPU_TRY(tpu_tensor_alloc(&t, TPU_S32, 1, &ndev, d));
  for (int64_t p = 0; p < ndev; p++) tpu_tensor_set_i64(&t, p, scale * self[p] + base);
  snprintf(name, sizeof name, "%s.offsets", pass);
  TPU_TRY(tpu_build_constant(b, c, name, &t, NULL, &tab));
  tpu_shape u32 = {0}, s32 = {0}, one = {0};
  u32.dtype = TPU_U32;
  s32.dtype = TPU_S32;
  one.dtype = TPU_S32;
  one.rank = 1;
  one.dims[0] = 1;
  TPU_TRY(add(b, c, pass, TPU_OP_PARTITION_ID, &u32, NULL, 0, loc, &pid));
  TPU_TRY(add(b, c, pass, TPU_OP_CONVERT, &s32, &pid, 1, loc, &cv));
  ops[0] = tab;
  ops[1] = cv;
  TPU_TRY(add(b, c, pass, TPU_OP_DYNAMIC_SLICE, &one, ops, 2, loc, &ds));
  TPU_TRY(tpu_build_set_attr(b, ds, "dynamic_slice_sizes", "{1}"));
  TPU_TRY(add(b, c, pass, TPU_OP_RESHAPE, &s32, &ds, 1, loc, out));
  TPU_TRY(tpu_tensor_alloc(&z, TPU_S32, 0, NULL, d));
  snprintf(name, sizeof name, "%s.zero", pass);
  return tpu_build_constant(b, c, name, &z, NULL, zero);
}
