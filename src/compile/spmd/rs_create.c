/* combine-collectives, first step: an all-reduce whose only use is each device taking its
 * own block of the sum (a dynamic-slice along one dimension at the device's position in
 * its group, directly or after unary elementwise ops, which then run on the block) becomes
 * a reduce-scatter, as XLA's reduce-scatter creator does in the TPU
 * pipeline (the partitioner writes all-reduce + dynamic-slice; the TPU compiler's final
 * programs reduce-scatter). The slice's offset is an expression of partition-id; it is
 * evaluated for every device and the rewrite happens only when it names exactly that
 * device's block, so values are unchanged. */
#include <string.h>

#include "base/alloc.h"
#include "chip/chip.h"
#include "compile/passes/hlo_passes.h"
#include "compile/spmd/spmd.h"
#include "ir/build.h"
#include "ir/collective.h"
#include "pod/topology.h"

/* The XLA TPU compiler's all-reduce-scatter fusion is not made for every group. Where the
 * group is every device of the slice, libtpu's programs (bench/spmd/probe_rs_slice.py: a
 * gradient x.T @ dy taken split over a 1-D mesh of the whole slice, windowed einsums off)
 * keep the all-reduce and slice on v5e and v6e 4x4, 8x8 and 16x16, on v5p 2x2x2, 2x2x4,
 * 2x2x8, 2x4x4, 4x4x4, 4x4x8, 4x8x8 and 4x8x16 and on v4 2x2x1 to 2x4x4 (as TensorCores: the
 * default slice of that many devices, 2x2x2 to 4x4x4), and reduce-scatter on 2x2, 2x4, 4x8,
 * 8x16 (v5e, v6e), v5p 2x2x1, 2x4x8, 2x8x8 and 2x4x16; groups over part of the slice always
 * reduce-scatter there. Its all-reduce over a square slice runs on 4 rings at once (the
 * algorithm config's colors; 2 on the oblong ones), which is where it keeps it; the 3-D
 * slices do not follow the colors, hence the rule by shape. Not read: v4 2x4x8 as
 * TensorCores (the default slice of 128 devices is 4x4x8: kept, where libtpu scatters). */
int tpu_spmd_keeps_full_all_reduce(const tpu_chip *chip, int64_t ndev) {
  if (!chip || ndev < 2) return 0;
  tpu_topology t;
  tpu_diag quiet; /* a chip without a slice of that many: no rule */
  memset(&quiet, 0, sizeof quiet);
  if (tpu_topology_default(chip, ndev, &t, &quiet) != TPU_OK || t.nchips != ndev) return 0;
  int64_t s[3];
  int n = 0;
  for (int i = 0; i < 3; i++)
    if (t.dims[i] > 1) s[n++] = t.dims[i];
  for (int i = 1; i < n; i++) /* ascending */
    for (int j = i; j > 0 && s[j] < s[j - 1]; j--) {
      int64_t x = s[j];
      s[j] = s[j - 1];
      s[j - 1] = x;
    }
  if (n == 2) return s[0] == s[1] && s[0] >= 4;
  if (n == 3) return !(s[0] == 2 && s[1] * s[2] >= 32);
  return 0;
}

/* The integer value of scalar expression x on device dev (1), or 0 when x is not one of
 * the ops an offset is computed with. */
static int eval(const tpu_instr *x, int64_t dev, int64_t partitions, int depth, int64_t *v) {
  if (depth > 32 || tpu_shape_numel(&x->shape) != 1 || !tpu_dtype_is_int(x->shape.dtype)) return 0;
  int64_t a, b, c;
  switch (x->op) {
    case TPU_OP_CONSTANT:
      if (!x->literal) return 0;
      *v = tpu_tensor_get_i64(x->literal, 0);
      return 1;
    case TPU_OP_PARTITION_ID: *v = dev % partitions; return 1;
    case TPU_OP_REPLICA_ID: *v = dev / partitions; return 1;
    case TPU_OP_CONVERT: case TPU_OP_RESHAPE: case TPU_OP_BITCAST: case TPU_OP_COPY:
      return tpu_dtype_is_int(x->operands[0]->shape.dtype) && eval(x->operands[0], dev, partitions, depth + 1, v);
    case TPU_OP_DYNAMIC_SLICE: { /* one element of a constant table */
      const tpu_instr *t = x->operands[0];
      if (t->op != TPU_OP_CONSTANT || !t->literal || t->shape.rank != 1 || x->noperands != 2 ||
          !eval(x->operands[1], dev, partitions, depth + 1, &a))
        return 0;
      if (a < 0) a = 0;
      if (a > t->shape.dims[0] - 1) a = t->shape.dims[0] - 1;
      *v = tpu_tensor_get_i64(t->literal, a);
      return 1;
    }
    case TPU_OP_ADD: case TPU_OP_SUBTRACT: case TPU_OP_MULTIPLY: case TPU_OP_DIVIDE: case TPU_OP_REMAINDER:
    case TPU_OP_MAXIMUM: case TPU_OP_MINIMUM:
      if (!eval(x->operands[0], dev, partitions, depth + 1, &a) || !eval(x->operands[1], dev, partitions, depth + 1, &b))
        return 0;
      if ((x->op == TPU_OP_DIVIDE || x->op == TPU_OP_REMAINDER) && b == 0) return 0;
      *v = x->op == TPU_OP_ADD ? a + b : x->op == TPU_OP_SUBTRACT ? a - b : x->op == TPU_OP_MULTIPLY ? a * b
           : x->op == TPU_OP_DIVIDE ? a / b : x->op == TPU_OP_REMAINDER ? a % b : x->op == TPU_OP_MAXIMUM ? (a > b ? a : b)
                                                                              : (a < b ? a : b);
      return 1;
    case TPU_OP_CLAMP:
      if (!eval(x->operands[0], dev, partitions, depth + 1, &a) || !eval(x->operands[1], dev, partitions, depth + 1, &b) ||
          !eval(x->operands[2], dev, partitions, depth + 1, &c))
        return 0;
      *v = b < a ? a : b > c ? c : b;
      return 1;
    default: return 0;
  }
}

/* Whether dynamic-slice u of all-reduce ar takes, on every device, that device's block k of
 * the sum (*k the dimension). */
static int own_block(const tpu_module *m, const tpu_instr *ar, const tpu_instr *u, const tpu_chip *chip, int *k) {
  const tpu_shape *s = &ar->shape;
  int cut = -1;
  for (int j = 0; j < s->rank; j++)
    if (u->shape.dims[j] != s->dims[j]) {
      if (cut >= 0) return 0;
      cut = j;
    }
  if (cut < 0 || u->noperands != 1 + s->rank) return 0;
  int64_t replicas, partitions;
  tpu_module_device_grid(m, &replicas, &partitions);
  int64_t ndev = replicas * partitions, n, self, v;
  const int keep = tpu_spmd_keeps_full_all_reduce(chip, ndev);
  int64_t *members = tpu_calloc((size_t)ndev, sizeof *members);
  if (!members) return 0;
  tpu_diag quiet; /* a malformed group is the verifier's to report: here it only says no */
  memset(&quiet, 0, sizeof quiet);
  tpu_coll_groups cg;
  int ok = tpu_coll_groups_read(ar, replicas, partitions, &cg, &quiet) == TPU_OK;
  for (int64_t dev = 0; ok && dev < ndev; dev++) {
    ok = tpu_coll_groups_members(ar, &cg, partitions, dev, members, &n, &self, &quiet) == TPU_OK &&
         n * u->shape.dims[cut] == s->dims[cut] && !(keep && n == ndev);
    for (int j = 0; ok && j < s->rank; j++)
      ok = eval(u->operands[1 + j], dev, partitions, 0, &v) && v == (j == cut ? self * u->shape.dims[cut] : 0);
  }
  tpu_coll_groups_free(&cg);
  tpu_free(members);
  *k = cut;
  return ok;
}

tpu_status tpu__make_reduce_scatters(tpu_builder *b, tpu_comp *c, const tpu_chip *chip, int *changed, tpu_diag *d) {
  int n = c->ninstrs;
  int *uses = tpu_calloc((size_t)n + 1, sizeof *uses);
  tpu_instr **user = tpu_calloc((size_t)n + 1, sizeof *user);
  if (!uses || !user) {
    tpu_free(uses);
    tpu_free(user);
    return TPU_FAIL(d, TPU_ERR_NOMEM, c->loc, "out of memory");
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < c->instrs[i]->noperands; j++) {
      const tpu_instr *o = c->instrs[i]->operands[j];
      if (o->id < 0 || o->id > n) continue;
      uses[o->id]++;
      user[o->id] = c->instrs[i];
    }
  tpu_status st = TPU_OK;
  for (int i = 0; st == TPU_OK && i < n; i++) {
    tpu_instr *ar = c->instrs[i], *u = ar->id >= 0 && ar->id <= n ? user[ar->id] : NULL;
    if (ar->op != TPU_OP_ALL_REDUCE || ar->noperands != 1 || !tpu_dtype_is_array(ar->shape.dtype) || !u ||
        uses[ar->id] != 1 || ar->is_root)
      continue;
    /* unary elementwise ops between the sum and the slice (a loop body's tanh of the sum
     * whose state keeps a block) run on the block after the reduce-scatter instead */
    tpu_instr *chain[8];
    int nchain = 0;
    const tpu_instr *last = ar;
    while (u && nchain < 8 && u->noperands == 1 && !u->is_root && u->id >= 0 && u->id <= n && uses[u->id] == 1 &&
           (tpu_op_class_of(u->op) == TPU_CLS_UNARY || u->op == TPU_OP_CONVERT) && u->shape.rank == ar->shape.rank &&
           !memcmp(u->shape.dims, ar->shape.dims, sizeof ar->shape.dims[0] * (size_t)ar->shape.rank)) {
      chain[nchain++] = u;
      last = u;
      u = user[u->id];
    }
    if (!u || u->op != TPU_OP_DYNAMIC_SLICE || u->operands[0] != last) continue;
    int k;
    if (!own_block(b->m, ar, u, chip, &k)) continue;
    tpu_shape r = u->shape; /* the block; of the sum's type (a convert in the chain comes after) */
    r.dtype = ar->shape.dtype;
    r.has_layout = 0;
    r.layout_tail = NULL;
    tpu_instr *rs;
    st = tpu_build_instr(b, c, TPU_OP_REDUCE_SCATTER, ar->name, &r, ar->operands, 1, u->loc, &rs);
    for (int a = 0; st == TPU_OK && a < ar->nattrs; a++)
      st = tpu_build_set_attr(b, rs, ar->attrs[a].name, ar->attrs[a].value);
    char dims[32];
    if (st == TPU_OK) st = tpu_build_set_attr(b, rs, "dimensions", tpu_dims_text(dims, sizeof dims, (int64_t[]){k}, 1));
    if (st != TPU_OK) break;
    rs->src_name = ar->src_name;
    tpu_instr *x = rs;
    for (int j = 0; st == TPU_OK && j < nchain; j++) {
      tpu_instr *e;
      st = tpu_build_clone_instr(b, c, chain[j], &x, &e);
      if (st == TPU_OK) {
        e->shape.rank = r.rank;
        memcpy(e->shape.dims, r.dims, sizeof r.dims);
        e->shape.has_layout = 0;
        e->shape.layout_tail = NULL;
        x = e;
      }
    }
    if (st != TPU_OK) break;
    tpu_build_replace_uses(c, u, x);
    *changed = 1;
  }
  tpu_free(uses);
  tpu_free(user);
  if (st == TPU_OK && *changed && tpu_build_remove_dead(b, c) < 0) st = TPU_ERR_NOMEM;
  return st;
}
