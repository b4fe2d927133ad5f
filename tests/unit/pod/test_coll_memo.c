/* The memo of collective costs (pod/cost.h): a collective costed with a memo gives the same
 * bytes as one costed afresh (its time, link bytes, lanes, DCN part), the second asking is a
 * hit, and a change of slice, bytes or groups is a miss. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "chip/chip.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "pod/cost.h"
#include "pod/topology.h"

typedef struct answer {
  tpu_coll_cost c;
  tpu_pod_coll_info info;
  double lb[4096];
  int64_t nl;
} answer;

/* Costs the root of `src` on t (with memo m, or none) into *a; 0 on success. */
static int cost(const char *src, const tpu_topology *t, const tpu_chip *chip, tpu_pod_coll_memo *m, answer *a) {
  tpu_module *mod = NULL;
  tpu_diag d;
  memset(a, 0, sizeof *a);
  if (tpu_hlo_parse("t.hlo", src, strlen(src), &mod, &d) != TPU_OK || tpu_ir_verify(mod, &d) != TPU_OK) {
    fprintf(stderr, "%s\n", d.msg);
    tpu_module_free(mod);
    return -1;
  }
  tpu_pod_cost_ctx x;
  memset(&x, 0, sizeof x);
  x.chip = chip;
  x.topo = t;
  x.memo = m;
  tpu_status st = tpu_pod_coll_cost(&x, mod->entry->root, &a->c, &d);
  if (st != TPU_OK) fprintf(stderr, "%s\n", d.msg);
  if (st == TPU_OK) {
    a->info = x.info[0];
    a->nl = tpu_topology_nlinks(t);
    if (a->nl <= 4096 && x.info[0].link_bytes) memcpy(a->lb, x.info[0].link_bytes, sizeof(double) * (size_t)a->nl);
    a->info.in = NULL;
    a->info.link_bytes = NULL;
  }
  tpu_pod_cost_free(&x);
  tpu_module_free(mod);
  return st == TPU_OK ? 0 : -1;
}

static int same(const answer *a, const answer *b) {
  return !memcmp(&a->c, &b->c, sizeof a->c) && !memcmp(&a->info.r, &b->info.r, sizeof a->info.r) &&
         !memcmp(&a->info.dcn_seconds, &b->info.dcn_seconds, sizeof(double)) &&
         !memcmp(&a->info.dcn_bytes, &b->info.dcn_bytes, sizeof(double)) &&
         !memcmp(&a->info.dcn_rate, &b->info.dcn_rate, sizeof(double)) &&
         a->info.dcn_per_host == b->info.dcn_per_host && a->info.dcn_slices == b->info.dcn_slices &&
         a->nl == b->nl && !memcmp(a->lb, b->lb, sizeof(double) * (size_t)a->nl);
}

static const char *const k_srcs[] = {
    /* all-reduce over an iota of groups */
    "HloModule m, num_partitions=16\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
    "ENTRY e {\n p = f32[4096] parameter(0)\n ROOT r = f32[4096] all-reduce(p), channel_id=1, "
    "replica_groups=[4,4]<=[2,4,2]T(1,0,2), use_global_device_ids=true, to_apply=add\n}\n",
    /* the same with other bytes */
    "HloModule m, num_partitions=16\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
    "ENTRY e {\n p = f32[2048] parameter(0)\n ROOT r = f32[2048] all-reduce(p), channel_id=1, "
    "replica_groups=[4,4]<=[2,4,2]T(1,0,2), use_global_device_ids=true, to_apply=add\n}\n",
    /* the same bytes, other groups */
    "HloModule m, num_partitions=16\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
    "ENTRY e {\n p = f32[4096] parameter(0)\n ROOT r = f32[4096] all-reduce(p), channel_id=1, "
    "replica_groups=[4,4]<=[16], use_global_device_ids=true, to_apply=add\n}\n",
    /* all-gather over everyone */
    "HloModule m, num_partitions=16\nENTRY e {\n p = f32[1024] parameter(0)\n ROOT r = f32[16384] all-gather(p), "
    "channel_id=1, replica_groups=[1,16]<=[16], use_global_device_ids=true, dimensions={0}\n}\n",
    /* a permute, one pair across the slices */
    "HloModule m, num_partitions=16\nENTRY e {\n p = f32[1024] parameter(0)\n ROOT r = f32[1024] collective-permute(p), "
    "channel_id=1, source_target_pairs={{0,1},{1,9},{9,0}}\n}\n",
    /* groups of one: nothing moves */
    "HloModule m, num_partitions=16\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
    "ENTRY e {\n p = f32[64] parameter(0)\n ROOT r = f32[64] all-reduce(p), channel_id=1, "
    "replica_groups=[16,1]<=[16], use_global_device_ids=true, to_apply=add\n}\n",
};
enum { NSRC = sizeof k_srcs / sizeof *k_srcs };

int main(void) {
  tpu_diag d;
  tpu_chip chip;
  if (tpu_chip_load("v5p", &chip, &d) != TPU_OK) return 1;
  tpu_topology t;
  CHECK(tpu_topology_parse("2x2x2", &chip, &t, &d) == TPU_OK);
  t.slices = 2; /* two slices joined by DCN: 16 devices */
  t.nchips = t.chips_per_slice * 2;
  tpu_topology slow = t; /* the same slice with slower links */
  slow.link_bw /= 2;
  static answer fresh[NSRC], first, again, other;
  tpu_pod_coll_memo *m = tpu_pod_coll_memo_new();
  CHECK(m != NULL);
  if (!m) return 1;
  for (int i = 0; i < NSRC; i++) {
    CHECK(cost(k_srcs[i], &t, &chip, NULL, &fresh[i]) == 0);
    CHECK(cost(k_srcs[i], &t, &chip, m, &first) == 0);
    CHECK(same(&fresh[i], &first));
    CHECK(cost(k_srcs[i], &t, &chip, m, &again) == 0);
    CHECK(same(&fresh[i], &again));
  }
  int64_t n, hits, misses;
  tpu_pod_coll_memo_stats(m, &n, &hits, &misses);
  CHECK_EQ_INT(n, NSRC); /* each distinct: the bytes and the groups are in the key */
  CHECK_EQ_INT(hits, NSRC);
  CHECK_EQ_INT(misses, NSRC);
  for (int i = 0; i + 1 < NSRC; i++) CHECK(!same(&fresh[i], &fresh[i + 1]));
  CHECK(fresh[0].info.dcn_slices == 2 && fresh[0].c.seconds > 0); /* the DCN part came back */
  CHECK(fresh[NSRC - 1].c.bytes == 0 && fresh[NSRC - 1].c.seconds == 0);
  /* Another slice: a miss, and its own answer. */
  CHECK(cost(k_srcs[0], &slow, &chip, m, &other) == 0);
  tpu_pod_coll_memo_stats(m, &n, &hits, &misses);
  CHECK_EQ_INT(misses, NSRC + 1);
  CHECK(other.c.seconds > fresh[0].c.seconds);
  tpu_pod_coll_memo_free(m);
  printf("memo: %d collectives, each costed afresh, then a miss and a hit with identical answers\n", NSRC);
  CHECK_DONE();
}
