/* Collective costs from the ICI link model: the collective's groups (or permute pairs) over
 * every device of the module, routed on the slice's torus (docs/pod.md). */
#include "pod/cost.h"

#include <string.h>

#include "base/alloc.h"
#include "ir/collective.h"

static double leaves_bytes(const tpu_shape *s) {
  if (s->dtype == TPU_TUPLE) {
    double b = 0;
    for (int i = 0; i < s->ntuple; i++) b += leaves_bytes(&s->elems[i]);
    return b;
  }
  if (!tpu_dtype_is_array(s->dtype)) return 0;
  return (double)tpu_shape_numel(s) * (double)tpu_dtype_size(s->dtype);
}

static double operands_bytes(const tpu_instr *in) {
  double b = 0;
  for (int i = 0; i < in->noperands; i++) b += leaves_bytes(&in->operands[i]->shape);
  return b;
}

const tpu_topology *tpu_pod_cost_topology(const tpu_pod_cost_ctx *x) {
  return x->topo ? x->topo : x->have_own ? &x->own : NULL;
}

void tpu_pod_cost_free(tpu_pod_cost_ctx *x) {
  for (int i = 0; i < x->ninfo; i++) tpu_free(x->info[i].link_bytes);
  tpu_free(x->info);
  x->info = NULL;
  x->ninfo = x->capinfo = 0;
}

/* Largest number of link-byte doubles kept over all collectives (for the link report). */
#define KEEP_LINK_BYTES ((int64_t)1 << 22)

tpu_status tpu_pod_coll_cost(void *user, const tpu_instr *in, tpu_coll_cost *c, tpu_diag *d) {
  tpu_pod_cost_ctx *x = user;
  memset(c, 0, sizeof *c);
  int64_t replicas, partitions;
  tpu_module_device_grid(in->parent->module, &replicas, &partitions);
  int64_t ndev = replicas * partitions;
  const tpu_topology *t = x->topo;
  if (!t) {
    if (!x->have_own) {
      TPU_TRY(tpu_topology_default(x->chip, ndev, &x->own, d));
      x->have_own = 1;
    }
    t = &x->own;
  }
  if (t->nchips * t->devices_per_chip != ndev)
    return TPU_FAIL(d, TPU_ERR_ARG, in->loc, "the module has %lld devices but the topology has %lld",
                    (long long)ndev, (long long)(t->nchips * t->devices_per_chip));
  tpu_opcode base = tpu_collective_base(in->op);
  tpu_ici_op op;
  memset(&op, 0, sizeof op);
  int64_t *ids = tpu_malloc(sizeof *ids * (size_t)(2 * ndev + 2));
  int64_t *members = tpu_malloc(sizeof *members * (size_t)(ndev + 1));
  unsigned char *seen = tpu_calloc((size_t)ndev + 1, 1);
  tpu_status st = ids && members && seen ? TPU_OK : TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  double vin = operands_bytes(in);
  if (st == TPU_OK && base == TPU_OP_COLLECTIVE_PERMUTE) {
    op.kind = TPU_ICI_PERMUTE;
    for (int64_t dev = 0; st == TPU_OK && dev < ndev; dev++) {
      int64_t src;
      st = tpu_collective_permute_source(in, replicas, partitions, dev, &src, d);
      if (st == TPU_OK && src >= 0 && src != dev) {
        ids[2 * op.npairs] = src;
        ids[2 * op.npairs + 1] = dev;
        op.npairs++;
      }
    }
    op.pairs = ids;
    op.operand_bytes = vin;
    c->bytes = op.npairs ? vin : 0;
  } else if (st == TPU_OK) {
    switch (base) {
      case TPU_OP_ALL_REDUCE: op.kind = TPU_ICI_ALL_REDUCE; break;
      case TPU_OP_ALL_GATHER: op.kind = TPU_ICI_ALL_GATHER; break;
      case TPU_OP_REDUCE_SCATTER: op.kind = TPU_ICI_REDUCE_SCATTER; break;
      case TPU_OP_ALL_TO_ALL: op.kind = TPU_ICI_ALL_TO_ALL; break;
      case TPU_OP_COLLECTIVE_BROADCAST: op.kind = TPU_ICI_BROADCAST; break;
      default: st = TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "no ICI cost for '%s'", tpu_op_name(in->op));
    }
    /* Every group once, in group order (groups partition the devices). */
    int64_t n = 0, self;
    for (int64_t dev = 0; st == TPU_OK && dev < ndev; dev++) {
      if (seen[dev]) continue;
      st = tpu_collective_members(in, replicas, partitions, dev, members, &n, &self, d);
      if (st != TPU_OK) break;
      if (op.ngroups == 0) op.group_size = n;
      if (n != op.group_size) {
        st = TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "'%s': groups of different sizes are not timed",
                      tpu_instr_user_name(in));
        break;
      }
      for (int64_t i = 0; i < n; i++) {
        seen[members[i]] = 1;
        ids[op.ngroups * n + i] = members[i];
      }
      op.ngroups++;
    }
    op.groups = ids;
    op.operand_bytes = vin; /* all-gather: the shard; the others: the whole operand */
    double f = op.group_size > 0 ? (double)(op.group_size - 1) / (double)op.group_size : 0;
    c->bytes = base == TPU_OP_ALL_GATHER ? f * vin * (double)op.group_size
               : base == TPU_OP_ALL_REDUCE ? 2 * f * vin
               : base == TPU_OP_COLLECTIVE_BROADCAST ? vin : f * vin;
  }
  tpu_ici_result r;
  memset(&r, 0, sizeof r);
  int64_t nl = tpu_topology_nlinks(t);
  int keep = st == TPU_OK && (int64_t)(x->ninfo + 1) * nl <= KEEP_LINK_BYTES;
  double *lb = keep ? tpu_calloc((size_t)nl, sizeof *lb) : NULL;
  int trivial = op.kind == TPU_ICI_PERMUTE ? op.npairs == 0 : op.group_size <= 1;
  if (st == TPU_OK && !trivial) st = tpu_ici_time(t, &op, lb, &r, d);
  if (st == TPU_OK && trivial) c->bytes = 0;
  if (st == TPU_OK) {
    c->seconds = r.seconds;
    if (x->ninfo == x->capinfo) {
      int nc = x->capinfo ? 2 * x->capinfo : 16;
      tpu_pod_coll_info *ni = tpu_realloc(x->info, sizeof *ni * (size_t)nc);
      if (!ni) st = TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
      else x->info = ni, x->capinfo = nc;
    }
    if (st == TPU_OK) {
      x->info[x->ninfo++] = (tpu_pod_coll_info){in, r, lb};
      lb = NULL;
    }
  }
  tpu_free(lb);
  tpu_free(ids);
  tpu_free(members);
  tpu_free(seen);
  return st;
}
