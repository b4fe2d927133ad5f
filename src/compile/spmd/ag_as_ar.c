/* combine-collectives: an all-gather over every device of a slice of at least 64 chips on
 * which the XLA TPU compiler runs it as an all-reduce — each device writes its block into
 * zeros at its place (a dynamic-update-slice) and the result is summed — becomes that
 * all-reduce (twice the bytes, the all-reduce's ring algorithm). Values are unchanged: every
 * element is one device's value plus zeros. The slices and sizes are the compiler's, read
 * from libtpu's programs (bench/spmd/probe_ag_as_ar.py; docs/spmd.md, "All-gathers run as
 * all-reduces"). A gather of a value just narrowed from a wider float type (a convert only
 * the gather reads: ZeRO-1's bf16 copy of its f32 master weights) all-reduces the wider value
 * and narrows the sum: the compiler's partitioner gathers before the convert (its sharding
 * propagation carries the constraint back through it) and runs the gather as an all-reduce
 * before its collective quantizer could narrow a gather (its final programs' all-reduce of
 * f32 operands with a bf16 result, ZeRO-1 on v5e and v6e 8x8 and v5p 4x4x4). */
#include <string.h>

#include "base/alloc.h"
#include "chip/chip.h"
#include "compile/passes/hlo_passes.h"
#include "compile/spmd/spmd.h"
#include "ir/build.h"
#include "ir/collective.h"
#include "pod/topology.h"

/* libtpu's programs (a weight split over a 1-D mesh of the whole slice gathered for a dot,
 * windowed einsums off; gathered sizes 2 to 64 MiB): 2-D slices of 64 chips and more (v5e
 * and v6e 8x8, v5e 8x16) run gathers of up to 16 MiB as all-reduces and gather 32 MiB and
 * more; 16 and 32 chips (v5e 4x4, 4x8) always gather; v5p 4x4x4 runs every size probed as an
 * all-reduce (and 128 MiB weights in the corpus). */
int tpu_spmd_gathers_as_all_reduce(const tpu_chip *chip, int64_t ndev, int64_t bytes) {
  if (!chip || ndev < 64) return 0;
  tpu_topology t;
  tpu_diag quiet; /* a chip without a slice of that many: no rule */
  memset(&quiet, 0, sizeof quiet);
  if (tpu_topology_default(chip, ndev, &t, &quiet) != TPU_OK || t.nchips != ndev) return 0;
  int axes = 0;
  for (int i = 0; i < 3; i++) axes += t.dims[i] > 1;
  if (axes == 3) return 1;
  return axes == 2 && bytes <= ((int64_t)16 << 20);
}

static tpu_status add(tpu_builder *b, tpu_comp *c, tpu_opcode op, const tpu_shape *sh, tpu_instr **ops, int n,
                      tpu_loc loc, tpu_instr **out) {
  tpu_shape r = *sh;
  r.has_layout = 0;
  r.layout_tail = NULL;
  return tpu_build_instr(b, c, op, "ag_as_ar", &r, ops, n, loc, out);
}

/* The all-reduce that gathers ag (whose one group is every device, device p at place
 * self[p]); *out NULL when it cannot be built. */
static tpu_status as_all_reduce(tpu_builder *b, tpu_comp *c, tpu_instr *ag, tpu_instr *x, const int64_t *self,
                                int64_t ndev, tpu_instr **out) {
  tpu_diag *d = b->d;
  tpu_shape whole = ag->shape; /* the gathered shape in x's type (wider than ag's when narrowed after) */
  whole.dtype = x->shape.dtype;
  const int k = (int)ag->dimensions.v[0];
  const tpu_loc loc = ag->loc;
  tpu_instr *off, *zi, *zv, *zb, *dus, *ar, *ops[TPU_MAX_RANK + 1];
  TPU_TRY(tpu__spmd_device_entry(b, c, "ag_as_ar", self, ndev, x->shape.dims[k], 0, loc, &off, &zi));
  tpu_tensor z;
  TPU_TRY(tpu_tensor_alloc(&z, whole.dtype, 0, NULL, d));
  TPU_TRY(tpu_build_constant(b, c, "ag_as_ar.zero", &z, NULL, &zv));
  TPU_TRY(add(b, c, TPU_OP_BROADCAST, &whole, &zv, 1, loc, &zb));
  TPU_TRY(tpu_build_set_attr(b, zb, "dimensions", "{}"));
  ops[0] = zb;
  ops[1] = x;
  for (int j = 0; j < ag->shape.rank; j++) ops[2 + j] = j == k ? off : zi;
  TPU_TRY(add(b, c, TPU_OP_DYNAMIC_UPDATE_SLICE, &whole, ops, 2 + ag->shape.rank, loc, &dus));
  tpu_comp *sum;
  TPU_TRY(tpu_build_scalar_comp(b, "ag_as_ar.add", TPU_OP_ADD, whole.dtype, c, &sum));
  TPU_TRY(add(b, c, TPU_OP_ALL_REDUCE, &whole, &dus, 1, loc, &ar));
  for (int a = 0; a < ag->nattrs; a++)
    if (strcmp(ag->attrs[a].name, "dimensions")) TPU_TRY(tpu_build_set_attr(b, ar, ag->attrs[a].name, ag->attrs[a].value));
  TPU_TRY(tpu_build_set_attr(b, ar, "to_apply", sum->name));
  ar->src_name = ag->src_name;
  *out = ar;
  if (whole.dtype != ag->shape.dtype) TPU_TRY(add(b, c, TPU_OP_CONVERT, &ag->shape, &ar, 1, loc, out));
  return TPU_OK;
}

/* Is `u` the only instruction of c that reads x? */
static int only_reader(const tpu_comp *c, const tpu_instr *x, const tpu_instr *u) {
  if (x->is_root) return 0;
  for (int i = 0; i < c->ninstrs; i++)
    for (int k = 0; k < c->instrs[i]->noperands; k++)
      if (c->instrs[i]->operands[k] == x && c->instrs[i] != u) return 0;
  return 1;
}

tpu_status tpu__all_gathers_as_all_reduces(tpu_builder *b, tpu_comp *c, const tpu_chip *chip, int *changed,
                                           tpu_diag *d) {
  int64_t replicas, partitions;
  tpu_module_device_grid(b->m, &replicas, &partitions);
  const int64_t ndev = replicas * partitions;
  if (replicas != 1 || ndev < 64 || !chip) return TPU_OK;
  int64_t *members = tpu_calloc((size_t)ndev, sizeof *members), *self = tpu_calloc((size_t)ndev, sizeof *self);
  if (!members || !self) {
    tpu_free(members);
    tpu_free(self);
    return TPU_FAIL(d, TPU_ERR_NOMEM, c->loc, "out of memory");
  }
  tpu_status st = TPU_OK;
  const int n = c->ninstrs;
  for (int i = 0; st == TPU_OK && i < n; i++) {
    tpu_instr *ag = c->instrs[i];
    if (ag->op != TPU_OP_ALL_GATHER || ag->noperands != 1 || ag->dimensions.n != 1 || ag->is_root ||
        !(tpu_dtype_is_float(ag->shape.dtype) || tpu_dtype_is_int(ag->shape.dtype)))
      continue;
    /* the value before a narrowing float convert only this gather reads */
    tpu_instr *x = ag->operands[0];
    if (x->op == TPU_OP_CONVERT && x->noperands == 1 && tpu_dtype_is_float(x->shape.dtype) &&
        tpu_dtype_is_float(x->operands[0]->shape.dtype) && !tpu_dtype_is_complex(x->operands[0]->shape.dtype) &&
        tpu_dtype_size(x->operands[0]->shape.dtype) > tpu_dtype_size(x->shape.dtype) && only_reader(c, x, ag))
      x = x->operands[0];
    const int64_t bytes = tpu_shape_numel(&ag->shape) * (int64_t)tpu_dtype_size(x->shape.dtype);
    if (!tpu_spmd_gathers_as_all_reduce(chip, ndev, bytes)) continue;
    tpu_diag quiet; /* a malformed group is the verifier's to report: here it only says no */
    memset(&quiet, 0, sizeof quiet);
    tpu_coll_groups cg;
    int ok = tpu_coll_groups_read(ag, replicas, partitions, &cg, &quiet) == TPU_OK;
    for (int64_t dev = 0; ok && dev < ndev; dev++) {
      int64_t m;
      ok = tpu_coll_groups_members(ag, &cg, partitions, dev, members, &m, &self[dev], &quiet) == TPU_OK && m == ndev;
    }
    tpu_coll_groups_free(&cg); /* safe after a failed read too: it starts zeroed */
    if (!ok) continue;
    tpu_instr *ar;
    st = as_all_reduce(b, c, ag, x, self, ndev, &ar);
    if (st == TPU_OK) {
      tpu_build_replace_uses(c, ag, ar);
      *changed = 1;
    }
  }
  tpu_free(members);
  tpu_free(self);
  if (st == TPU_OK && *changed && tpu_build_remove_dead(b, c) < 0) st = TPU_ERR_NOMEM;
  return st;
}
