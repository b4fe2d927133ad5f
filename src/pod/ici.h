/* Link-level ICI timing of one collective on a slice: every group's traffic routed over
 * the directed links of the torus, links shared between groups sharing their bandwidth
 * (docs/pod.md, "The link model"). */
#ifndef TPU_POD_ICI_H
#define TPU_POD_ICI_H

#include <stdint.h>

#include "base/status.h"
#include "pod/topology.h"

typedef enum {
  TPU_ICI_ALL_REDUCE = 0,
  TPU_ICI_ALL_GATHER,
  TPU_ICI_REDUCE_SCATTER,
  TPU_ICI_ALL_TO_ALL,
  TPU_ICI_PERMUTE,  /* collective-permute: source -> target pairs */
  TPU_ICI_BROADCAST /* collective-broadcast: each group's first member to the others */
} tpu_ici_kind;

/* One collective. Device ids are JAX's (tpu_topology_coords); groups are in group order.
 * Sizes are bytes per device: operand_bytes what each device contributes (all-gather: its
 * shard; all-reduce, reduce-scatter, all-to-all, broadcast: the whole operand; permute: what
 * a source sends), result_bytes what each ends with (all-gather: S * shard; reduce-scatter:
 * operand / S). result_bytes may be 0: it is then derived from operand_bytes. */
typedef struct tpu_ici_op {
  tpu_ici_kind kind;
  const int64_t *groups;   /* ngroups * group_size device ids, row-major (not permute) */
  int64_t ngroups, group_size;
  const int64_t *pairs;    /* npairs * 2: source, target (permute only) */
  int64_t npairs;
  double operand_bytes, result_bytes;
} tpu_ici_op;

/* Where the time goes. Time = busiest link's bytes / link_bw + hops * hop_s. */
typedef struct tpu_ici_result {
  double seconds;          /* link_seconds + latency_seconds */
  double link_seconds;     /* busiest directed link's bytes / its bandwidth */
  double latency_seconds;  /* hops * the per-hop latency */
  int64_t hops;            /* hops on the longest chain of dependent transfers */
  double total_link_bytes; /* bytes summed over every directed link */
  double max_chip_bytes;   /* most bytes leaving one chip over its links (forwarding too) */
  double mean_chip_bytes;  /* total_link_bytes / chips taking part */
  int64_t chips;           /* chips taking part (in a group with others, or in a pair) */
  int64_t links_used;      /* directed links that carry bytes */
  int64_t busiest_link;    /* link slot (tpu_topology link numbering); -1 when none */
  int64_t busiest_from, busiest_to; /* its chips */
  int busiest_axis, busiest_dir;    /* 0-2; 0: +1, 1: -1 */
  double busiest_bytes;
  double busiest_util;     /* busiest link's busy time / seconds, 0-1 */
  double alg_bw;           /* NCCL's algorithm bandwidth: size / seconds */
  double bus_bw;           /* NCCL's bus bandwidth: alg_bw * 2(n-1)/n (all-reduce),
                              * (n-1)/n (all-gather, reduce-scatter, all-to-all), 1 else */
} tpu_ici_result;

/* Times `op` on `t`. link_bytes, when not NULL, receives the bytes on every link slot
 * (tpu_topology_nlinks(t) doubles; slots without a link read 0). Errors (TPU_ERR_ARG): a
 * device id out of range or repeated in a group, a group or pair across slices, groups of
 * unequal sizes, a topology with devices_per_chip != 1. Cost: O(links + devices *
 * axis length) for groups that are whole sub-grids of the torus; O(S^2 * path) per group
 * for an all-to-all over an irregular group. */
tpu_status tpu_ici_time(const tpu_topology *t, const tpu_ici_op *op, double *link_bytes,
                        tpu_ici_result *r, tpu_diag *d);

const char *tpu_ici_kind_name(tpu_ici_kind k);

#endif
