/* combine-collectives, first step: a collective that repeats an earlier one — an all-gather
 * or collective-permute of the same value (or of a reshape of it that only adds size-1
 * dimensions) with the same result shape and the same attributes but for its channel id —
 * is dropped and its users read the earlier one, as XLA's ScheduleAwareCollectiveOpsCSE
 * does in the SPMD pipeline. The partitioner gathers a weight once for each dot that reads
 * it (the forward dot and the backward one of an FSDP step): the XLA TPU compiler's final
 * programs gather it once (bench/spmd/corpus: fsdp_mlp, flax_logical; the spatial
 * convolutions' halos are exchanged once for the forward and the backward pass).
 *
 * XLA keeps an all-gather apart when the earlier one's users all lie more than a threshold
 * further from the program's end than the later one (xla_tpu_spmd_threshold_for_allgather_cse
 * on TPU; its value is not published): every repeated gather of the corpus was merged, so
 * tpusim merges them all. Values are unchanged: the two compute the same thing. */
#include <string.h>

#include "base/alloc.h"
#include "compile/passes/hlo_passes.h"
#include "ir/collective.h"
#include "ir/build.h"

static int candidate(const tpu_instr *in) {
  if (in->noperands != 1 || !tpu_dtype_is_array(in->shape.dtype)) return 0;
  if (in->op == TPU_OP_COLLECTIVE_PERMUTE) return 1;
  if (in->op != TPU_OP_ALL_GATHER) return 0;
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, "constrain_layout") && !strcmp(in->attrs[i].value, "true")) return 0;
  return 1;
}

/* x without reshapes and bitcasts that only add or drop size-1 dimensions. */
static const tpu_instr *through_degenerate(const tpu_instr *x) {
  while ((x->op == TPU_OP_RESHAPE || x->op == TPU_OP_BITCAST) && x->noperands == 1 &&
         x->shape.dtype == x->operands[0]->shape.dtype) {
    const tpu_shape *a = &x->shape, *b = &x->operands[0]->shape;
    int i = 0, j = 0;
    while (i < a->rank || j < b->rank) {
      if (i < a->rank && a->dims[i] == 1 && (j >= b->rank || b->dims[j] != 1)) i++;
      else if (j < b->rank && b->dims[j] == 1 && (i >= a->rank || a->dims[i] != 1)) j++;
      else if (i < a->rank && j < b->rank && a->dims[i] == b->dims[j]) i++, j++;
      else return x;
    }
    x = x->operands[0];
  }
  return x;
}

static int ignored_attr(const char *name) {
  /* (frontend attributes count: a megascale transfer's mark its DCN send/recv) */
  return !strcmp(name, "channel_id") || !strcmp(name, "metadata") || !strcmp(name, "backend_config") ||
         !strcmp(name, "sharding");
}

/* The devices' groups, written in either form: an explicit list, an iota list
 * (`[16,4]<=[16,4]T(1,0)`) or a mesh's axes (the partitioner writes one gather of a weight
 * in one form and the other in another). */
static int group_attr(const char *name) {
  return !strcmp(name, "replica_groups") || !strcmp(name, "device_ids") || !strcmp(name, "source_target_pairs");
}

/* Do a and b name the same groups, each with its devices in the same order (the order of
 * the groups themselves does not matter)? Groups that cannot be read differ. */
static int same_groups(const tpu_instr *a, const tpu_instr *b, const char *attr) {
  tpu_groups ga, gb;
  tpu_diag quiet;
  memset(&quiet, 0, sizeof quiet);
  if (tpu_groups_read(a, attr, &ga, &quiet) != TPU_OK) return 0;
  memset(&quiet, 0, sizeof quiet);
  if (tpu_groups_read(b, attr, &gb, &quiet) != TPU_OK) {
    tpu_groups_free(&ga);
    return 0;
  }
  int same = ga.ngroups == gb.ngroups && (ga.ngroups == 0 || ga.start[ga.ngroups] == gb.start[gb.ngroups]);
  for (int64_t g = 0; same && g < ga.ngroups; g++) {
    int64_t n = ga.start[g + 1] - ga.start[g], h = 0;
    /* the group of b that starts with this group's first device */
    while (h < gb.ngroups && !(gb.start[h + 1] > gb.start[h] && n > 0 && gb.ids[gb.start[h]] == ga.ids[ga.start[g]])) h++;
    same = h < gb.ngroups && gb.start[h + 1] - gb.start[h] == n &&
           !memcmp(ga.ids + ga.start[g], gb.ids + gb.start[h], sizeof *ga.ids * (size_t)n);
  }
  tpu_groups_free(&ga);
  tpu_groups_free(&gb);
  return same;
}

/* Attributes of a that b has with the same text or, for the device groups, the same groups
 * (channel ids: both present or both not). */
static int attrs_within(const tpu_instr *a, const tpu_instr *b) {
  for (int i = 0; i < a->nattrs; i++) {
    const char *n = a->attrs[i].name;
    int found = 0;
    for (int j = 0; j < b->nattrs && !found; j++)
      if (!strcmp(b->attrs[j].name, n))
        found = ignored_attr(n) || !strcmp(a->attrs[i].value, b->attrs[j].value) ||
                (group_attr(n) && same_groups(a, b, !strcmp(n, "device_ids") ? "replica_groups" : n));
    if (!found) return 0;
  }
  return 1;
}

static int same_collective(const tpu_instr *a, const tpu_instr *b) {
  if (a->op != b->op || a->shape.dtype != b->shape.dtype || a->shape.rank != b->shape.rank ||
      memcmp(a->shape.dims, b->shape.dims, sizeof a->shape.dims[0] * (size_t)a->shape.rank))
    return 0;
  const tpu_shape *oa = &a->operands[0]->shape, *ob = &b->operands[0]->shape;
  if (oa->rank != ob->rank || memcmp(oa->dims, ob->dims, sizeof oa->dims[0] * (size_t)oa->rank)) return 0;
  if (a->operands[0] != b->operands[0] && through_degenerate(a->operands[0]) != through_degenerate(b->operands[0]))
    return 0;
  return attrs_within(a, b) && attrs_within(b, a);
}

tpu_status tpu__cse_collectives(tpu_builder *b, tpu_comp *c, int *changed, tpu_diag *d) {
  int n = c->norder, nk = 0, made = 0;
  tpu_instr **kept = tpu_calloc((size_t)n + 1, sizeof *kept);
  if (!kept) return TPU_FAIL(d, TPU_ERR_NOMEM, c->loc, "out of memory");
  /* in program order: each collective is compared with the earlier ones kept */
  for (int i = 0; i < n; i++) {
    tpu_instr *x = c->order[i];
    if (!candidate(x)) continue;
    int k = 0;
    while (k < nk && !same_collective(kept[k], x)) k++;
    if (k < nk && !x->is_root) {
      tpu_build_replace_uses(c, x, kept[k]);
      made = 1;
    } else {
      kept[nk++] = x;
    }
  }
  tpu_free(kept);
  if (made) {
    *changed = 1;
    if (tpu_build_remove_dead(b, c) < 0) return TPU_ERR_NOMEM;
  }
  return TPU_OK;
}
