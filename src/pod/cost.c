/* Collective costs from the closed forms of a bidirectional ring over each group
 * (docs/pod.md): all-gather of V bytes per chip over n chips moves (n-1)/n of the result
 * into every chip over two directions of W bytes/s each, with n/2 hops of latency:
 *   T_ag = (n-1)/n * V_out / (2 W) + (n/2) * T_hop;
 * reduce-scatter is the same on the operand; all-reduce = reduce-scatter + all-gather;
 * all-to-all sends (n-1)/n of the operand an average n/4 hops each way; a permute sends the
 * operand one hop; a broadcast is an all-gather of one chip's share. */
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

tpu_status tpu_pod_coll_cost(void *user, const tpu_instr *in, tpu_coll_cost *c, tpu_diag *d) {
  const tpu_pod_cost_ctx *x = user;
  memset(c, 0, sizeof *c);
  double w = x->chip->ici_bw_per_link, hop = x->chip->ici_latency_s;
  if (!(w > 0))
    return TPU_FAIL(d, TPU_ERR_ARG, in->loc, "chip '%s' has no ICI bandwidth (ici_bw_per_link) to time '%s'",
                    x->chip->name, tpu_instr_user_name(in));
  tpu_opcode op = tpu_collective_base(in->op);
  double vin = operands_bytes(in);
  if (op == TPU_OP_COLLECTIVE_PERMUTE) {
    /* Every chip that sends sends its operand one hop (pairs are neighbours or routed). */
    c->bytes = vin;
    c->seconds = vin / w + hop;
    return TPU_OK;
  }
  int64_t n = 1, self, replicas, partitions;
  tpu_module_device_grid(in->parent->module, &replicas, &partitions);
  int64_t *members = tpu_malloc(sizeof *members * (size_t)(replicas * partitions));
  if (!members) return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  tpu_status st = tpu_collective_members(in, replicas, partitions, 0, members, &n, &self, d);
  tpu_free(members);
  TPU_TRY(st);
  if (n <= 1) return TPU_OK;
  double f = (double)(n - 1) / (double)n, lat = (double)n / 2 * hop;
  switch (op) {
    case TPU_OP_ALL_GATHER:
      c->bytes = f * vin * (double)n;
      c->seconds = c->bytes / (2 * w) + lat;
      break;
    case TPU_OP_REDUCE_SCATTER:
      c->bytes = f * vin;
      c->seconds = c->bytes / (2 * w) + lat;
      break;
    case TPU_OP_ALL_REDUCE:
      c->bytes = 2 * f * vin;
      c->seconds = c->bytes / (2 * w) + 2 * lat;
      break;
    case TPU_OP_ALL_TO_ALL:
      c->bytes = f * vin;
      c->seconds = c->bytes * ((double)n / 4) / (2 * w) + lat;
      break;
    case TPU_OP_COLLECTIVE_BROADCAST:
      c->bytes = vin;
      c->seconds = vin / (2 * w) + lat;
      break;
    default:
      return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "no ICI cost for '%s'", tpu_op_name(in->op));
  }
  return TPU_OK;
}
