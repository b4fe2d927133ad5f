/* What a collective costs one chip of the pod: the compiler's hook (tpu_compile_opts
 * coll_cost) into the ICI link model (pod/ici.h) on the slice's topology (pod/topology.h). */
#ifndef TPU_POD_COST_H
#define TPU_POD_COST_H

#include "chip/chip.h"
#include "compile/compile.h"
#include "ir/ir.h"
#include "pod/ici.h"
#include "pod/topology.h"

/* The link model's answer for one collective, kept for the reports. */
typedef struct tpu_pod_coll_info {
  const tpu_instr *in;
  tpu_ici_result r;
  double *link_bytes; /* bytes per link slot (NULL when the slice is too large to keep them) */
  /* Its exchange between slices over DCN (all 0 inside one slice; pod/dcn.h): */
  double dcn_seconds; /* included in the collective's time, after/between its ICI parts */
  double dcn_bytes;   /* sent over DCN by each chip that sends */
  double dcn_rate;    /* bytes/s each sender got (its host's NICs shared) */
  int64_t dcn_per_host; /* most chips of one host sending at once */
  int64_t dcn_slices;   /* slices each group spans */
} tpu_pod_coll_info;

/* Link-model answers kept between compiles (api/cache.c keeps one for the library's runs: the
 * planner's candidates share most of their collectives). An answer depends only on the slice
 * (every field of the topology), the op (its kind, group mode and operand bytes), the module's
 * device grid and the text of the attributes its groups or pairs are read from, so those,
 * compared whole, are the key: a hit skips reading the groups and routing them, and gives the
 * very numbers (and report entry) a fresh costing would. Not thread-safe: the caller
 * serialises compiles that share one. */
typedef struct tpu_pod_coll_memo tpu_pod_coll_memo;
tpu_pod_coll_memo *tpu_pod_coll_memo_new(void); /* NULL: out of memory */
void tpu_pod_coll_memo_free(tpu_pod_coll_memo *m);
/* Answers kept and asked for so far (hits + misses = lookups). */
void tpu_pod_coll_memo_stats(const tpu_pod_coll_memo *m, int64_t *entries, int64_t *hits, int64_t *misses);

typedef struct tpu_pod_cost_ctx {
  const tpu_chip *chip;
  tpu_pod_coll_memo *memo;  /* NULL: every collective is costed afresh */
  const tpu_topology *topo; /* NULL: the chip's default slice for the module's devices */
  tpu_topology own;         /* that default, made on first use */
  int have_own;
  tpu_pod_coll_info *info;  /* every collective costed, in order */
  int ninfo, capinfo;
} tpu_pod_cost_ctx;

/* A tpu_coll_cost_fn (user = tpu_pod_cost_ctx, zero-initialised apart from chip/topo):
 * the collective's time on the slice's links and the bytes each chip sends. */
tpu_status tpu_pod_coll_cost(void *user, const tpu_instr *in, tpu_coll_cost *c, tpu_diag *d);

/* A tpu_hops_fn (user = tpu_pod_cost_ctx): the hops of the route between two devices on the
 * slice (-1 across slices). */
tpu_status tpu_pod_hops(void *user, const tpu_instr *in, int64_t from, int64_t to, int64_t *hops, tpu_diag *d);

/* The topology the costs used (NULL before the first collective). */
const tpu_topology *tpu_pod_cost_topology(const tpu_pod_cost_ctx *x);
void tpu_pod_cost_free(tpu_pod_cost_ctx *x);

#endif
