/* Collectives in the reference interpreter: what each device of a pod computes from its
 * group's operands, exactly as XLA specifies, in a fixed order.
 *
 * Order (docs/pod.md): a group lists its devices in replica_groups order (for `{}`, by id).
 * all-reduce and reduce-scatter fold the operands left to right in that order, starting
 * from the first member's operand: ((x0 + x1) + x2) + ... with to_apply. all-gather
 * concatenates the members' operands in that order; all-to-all sends chunk j of every
 * member's operand to member j, which concatenates what it receives in member order. So a
 * result depends only on the operands and the groups, never on thread or rank timing. */
#include <string.h>

#include "base/alloc.h"
#include "ir/collective.h"
#include "ref/reduce_int.h"

/* Everything one collective needs: this device's group and everyone's operands. */
typedef struct {
  tpu_interp *ip;
  const tpu_instr *in;
  const tpu_tensor *const *const *all; /* all[dev][k]: device dev's operand k */
  int64_t *members, n, self, device, replicas, partitions;
} coll;

/* Copies chunk `sc` (of `len` along `dim`) of src into chunk `dc` of dst. */
static void copy_chunk(tpu_tensor *dst, int64_t dc, const tpu_tensor *src, int64_t sc, int dim, int64_t len) {
  int64_t box[TPU_MAX_RANK], ds[TPU_MAX_RANK], ss[TPU_MAX_RANK];
  tpu__ref_strides(dst->rank, dst->dims, ds);
  tpu__ref_strides(src->rank, src->dims, ss);
  memcpy(box, src->dims, sizeof box[0] * (size_t)src->rank);
  box[dim] = len;
  for (int i = 0; i < src->rank; i++)
    if (box[i] == 0) return;
  size_t es = tpu_dtype_size(src->dtype);
  char *dp = (char *)dst->data + (size_t)(dc * len * ds[dim]) * es;
  const char *sp = (const char *)src->data + (size_t)(sc * len * ss[dim]) * es;
  tpu__ref_copy_box(dp, sp, es, src->rank, box, ds, ss);
}

/* acc = acc OP x elementwise with to_apply (both of acc's shape). */
static tpu_status combine(const coll *c, tpu_tensor *acc, const tpu_tensor *x, tpu_diag *d) {
  const tpu_instr *in = c->in;
  int64_t n = tpu_tensor_numel(acc);
  size_t es = tpu_dtype_size(acc->dtype);
  tpu_opcode simple = tpu__ref_simple_reducer(in->to_apply);
  if (simple != TPU_OP_COUNT) {
    for (int64_t i = 0; i < n; i++)
      tpu__ref_apply_binary(simple, acc->dtype, (char *)acc->data + (size_t)i * es, (const char *)x->data + (size_t)i * es);
    return TPU_OK;
  }
  tpu__scall sc;
  TPU_TRY(tpu__scall_init(&sc, c->ip, in->to_apply, 2, in->loc, d));
  tpu_status st = TPU_OK;
  for (int64_t i = 0; st == TPU_OK && i < n; i++) {
    void *a = (char *)acc->data + (size_t)i * es;
    memcpy(tpu__scall_arg(&sc, 0), a, es);
    memcpy(tpu__scall_arg(&sc, 1), (const char *)x->data + (size_t)i * es, es);
    void *dst[1] = {a};
    st = tpu__scall_run(&sc, dst, &acc->dtype, 1, d);
  }
  tpu__scall_deinit(&sc);
  return st;
}

/* Operand k reduced over the group, in member order. */
static tpu_status reduce_group(const coll *c, int k, tpu_tensor *out, tpu_diag *d) {
  TPU_TRY(tpu_tensor_clone(out, c->all[c->members[0]][k], d));
  for (int64_t j = 1; j < c->n; j++) {
    tpu_status st = combine(c, out, c->all[c->members[j]][k], d);
    if (st != TPU_OK) {
      tpu_tensor_free(out);
      return st;
    }
  }
  return TPU_OK;
}

/* Result leaf k of this device for the synchronous op `op`, into `out` of shape `s`. */
static tpu_status leaf(const coll *c, tpu_opcode op, int k, const tpu_shape *s, tpu_diag *d, tpu_tensor *out) {
  const tpu_instr *in = c->in;
  int dim = in->dimensions.n ? (int)in->dimensions.v[0] : 0;
  switch (op) {
    case TPU_OP_ALL_REDUCE: return reduce_group(c, k, out, d);
    case TPU_OP_COLLECTIVE_BROADCAST: return tpu_tensor_clone(out, c->all[c->members[0]][k], d);
    case TPU_OP_REDUCE_SCATTER: {
      tpu_tensor full;
      TPU_TRY(reduce_group(c, k, &full, d));
      tpu_status st = tpu_tensor_alloc(out, s->dtype, s->rank, s->dims, d);
      if (st == TPU_OK) copy_chunk(out, 0, &full, c->self, dim, s->dims[dim]);
      tpu_tensor_free(&full);
      return st;
    }
    case TPU_OP_ALL_GATHER: {
      TPU_TRY(tpu_tensor_alloc(out, s->dtype, s->rank, s->dims, d));
      for (int64_t j = 0; j < c->n; j++) {
        const tpu_tensor *x = c->all[c->members[j]][k];
        copy_chunk(out, j, x, 0, dim, x->dims[dim]);
      }
      return TPU_OK;
    }
    case TPU_OP_ALL_TO_ALL: {
      if (in->dimensions.n == 0) return tpu_tensor_clone(out, c->all[c->members[k]][c->self], d);
      TPU_TRY(tpu_tensor_alloc(out, s->dtype, s->rank, s->dims, d));
      int64_t len = s->dims[dim] / c->n;
      for (int64_t j = 0; j < c->n; j++) copy_chunk(out, j, c->all[c->members[j]][k], c->self, dim, len);
      return TPU_OK;
    }
    case TPU_OP_COLLECTIVE_PERMUTE: {
      int64_t src;
      TPU_TRY(tpu_collective_permute_source(in, c->replicas, c->partitions, c->device, &src, d));
      if (src < 0) return tpu_tensor_alloc(out, s->dtype, s->rank, s->dims, d); /* no sender: zeros */
      return tpu_tensor_clone(out, c->all[src][k], d);
    }
    default: break;
  }
  return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "the reference interpreter cannot run '%s'", tpu_op_name(in->op));
}

/* The synchronous op's result (one leaf, or a tuple of one per operand) into *out, of shape r. */
static tpu_status result(const coll *c, tpu_opcode op, const tpu_shape *r, tpu_tensor *out, tpu_diag *d) {
  int nres = op == TPU_OP_ALL_TO_ALL && c->in->dimensions.n == 0 ? (int)c->n : c->in->noperands;
  if (r->dtype != TPU_TUPLE) return leaf(c, op, 0, r, d, out);
  TPU_TRY(tpu_tensor_alloc_tuple(out, nres, d));
  for (int k = 0; k < nres; k++) {
    tpu_status st = leaf(c, op, k, &r->elems[k], d, &out->elems[k]);
    if (st != TPU_OK) {
      tpu_tensor_free(out);
      return st;
    }
  }
  return TPU_OK;
}

/* The whole value of instruction `in` on this device. -start ops of all-gather and
 * collective-permute hold (operands, results, ...) with the operands kept alongside. */
static tpu_status run(const coll *c, const tpu_tensor *const *args, tpu_tensor *out, tpu_diag *d) {
  const tpu_instr *in = c->in;
  tpu_opcode op = tpu_collective_base(in->op);
  if (in->op != TPU_OP_ALL_GATHER_START && in->op != TPU_OP_COLLECTIVE_PERMUTE_START)
    return result(c, op, &in->shape, out, d);
  TPU_TRY(tpu__ref_alloc_shape(out, &in->shape, d));
  tpu_tensor *ops = &out->elems[0];
  tpu_status st = TPU_OK;
  if (in->noperands == 1 && ops->dtype != TPU_TUPLE) {
    tpu_tensor_free(ops);
    st = tpu_tensor_clone(ops, args[0], d);
  } else {
    for (int k = 0; st == TPU_OK && k < in->noperands && k < ops->ntuple; k++) {
      tpu_tensor_free(&ops->elems[k]);
      st = tpu_tensor_clone(&ops->elems[k], args[k], d);
    }
  }
  if (st == TPU_OK) {
    tpu_tensor_free(&out->elems[1]);
    st = result(c, op, &in->shape.elems[1], &out->elems[1], d);
  }
  if (st != TPU_OK) tpu_tensor_free(out);
  return st;
}

tpu_status tpu__ref_collective(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                               tpu_diag *d) {
  tpu_tensor_zero(out);
  const tpu_ref_comm *comm = tpu__ref_comm(ip);
  if (in->op == TPU_OP_PARTITION_ID || in->op == TPU_OP_REPLICA_ID) {
    TPU_TRY(tpu__ref_alloc_shape(out, &in->shape, d));
    int64_t v = !comm ? 0 : in->op == TPU_OP_PARTITION_ID ? comm->device % comm->partitions : comm->device / comm->partitions;
    tpu_tensor_set_i64(out, 0, v);
    return TPU_OK;
  }
  if (tpu_collective_is_done(in->op)) /* the -start computed it */
    return tpu_tensor_clone(out, args[0]->dtype == TPU_TUPLE ? &args[0]->elems[1] : args[0], d);

  coll c;
  memset(&c, 0, sizeof c);
  c.ip = ip;
  c.in = in;
  const tpu_tensor *const *one[1] = {args};
  if (comm) {
    c.replicas = comm->replicas;
    c.partitions = comm->partitions;
    c.device = comm->device;
  } else {
    /* A pod of one: only groups of one device can run. */
    TPU_TRY(tpu_collective_check_one_device(in, d));
    tpu_module_device_grid(in->parent->module, &c.replicas, &c.partitions);
    c.all = one; /* all[0] = this device, the only member its groups have */
  }
  c.members = tpu_malloc(sizeof *c.members * (size_t)(c.replicas * c.partitions));
  if (!c.members) return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  tpu_status st = TPU_OK;
  if (tpu_collective_base(in->op) != TPU_OP_COLLECTIVE_PERMUTE)
    st = tpu_collective_members(in, c.replicas, c.partitions, c.device, c.members, &c.n, &c.self, d);
  int exchanged = 0;
  if (st == TPU_OK && comm) {
    st = comm->exchange(comm->user, in, args, &c.all, d);
    exchanged = st == TPU_OK;
  }
  if (st == TPU_OK) st = run(&c, args, out, d);
  if (exchanged) {
    tpu_status rs = comm->release(comm->user, in, d);
    if (st == TPU_OK && rs != TPU_OK) {
      tpu_tensor_free(out);
      st = rs;
    }
  }
  tpu_free(c.members);
  return st;
}
