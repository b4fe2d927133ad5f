/* Multi-slice collectives: a group spanning slices pays its share over DCN at the chip's
 * DCN bandwidth plus a fixed step per ring step over the slices (docs/pod.md), on top of
 * its per-slice part on ICI; groups inside one slice pay nothing over DCN. Checked
 * against the closed forms. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "chip/chip.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "pod/cost.h"
#include "pod/topology.h"

static double cost_of(const char *src, const tpu_topology *t, const tpu_chip *chip) {
  tpu_module *m = NULL;
  tpu_diag d;
  if (tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK) {
    fprintf(stderr, "%s\n", d.msg);
    tpu_module_free(m);
    return -1;
  }
  tpu_pod_cost_ctx x;
  memset(&x, 0, sizeof x);
  x.chip = chip;
  x.topo = t;
  tpu_coll_cost c;
  tpu_status st = tpu_pod_coll_cost(&x, m->entry->root, &c, &d);
  if (st != TPU_OK) fprintf(stderr, "%s\n", d.msg);
  tpu_pod_cost_free(&x);
  tpu_module_free(m);
  return st == TPU_OK ? c.seconds : -1;
}

int main(void) {
  tpu_diag d;
  tpu_chip chip;
  if (tpu_chip_load("v5e", &chip, &d) != TPU_OK) return 1;
  char src[1024];
  const double step = 10e-6, bw = chip.dcn_bw;
  CHECK(bw > 0);
  /* Two slices of 2x2; an all-reduce of 4 KiB between the same chip of each slice. */
  tpu_topology t;
  CHECK(tpu_topology_parse("2x2", &chip, &t, &d) == TPU_OK);
  t.slices = 2;
  t.nchips = t.chips_per_slice * 2;
  snprintf(src, sizeof src,
           "HloModule m, num_partitions=8\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
           "ENTRY e {\n p = f32[1024] parameter(0)\n ROOT r = f32[1024] all-reduce(p), channel_id=1, "
           "replica_groups={{0,4},{1,5},{2,6},{3,7}}, use_global_device_ids=true, to_apply=add\n}\n");
  double s = cost_of(src, &t, &chip), want = 2 * 0.5 * 4096 / bw + 2 * step;
  CHECK(fabs(s - want) < 1e-12);
  /* All-gather of 4 KiB shards over all 8 chips: each slice's 4 chips on ICI, then (K-1)
   * shards per chip over DCN. */
  snprintf(src, sizeof src,
           "HloModule m, num_partitions=8\nENTRY e {\n p = f32[1024] parameter(0)\n ROOT r = f32[8192] all-gather(p), "
           "channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, use_global_device_ids=true, dimensions={0}\n}\n");
  double ag = cost_of(src, &t, &chip);
  snprintf(src, sizeof src,
           "HloModule m, num_partitions=8\nENTRY e {\n p = f32[1024] parameter(0)\n ROOT r = f32[4096] all-gather(p), "
           "channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, dimensions={0}\n}\n");
  double intra = cost_of(src, &t, &chip);
  CHECK(intra > 0 && fabs(ag - (intra + 4096 / bw + step)) < 1e-12);
  printf("v5e, 2 slices of 2x2: all-reduce across slices %.3f us (closed form %.3f); all-gather over both %.3f us = "
         "%.3f on ICI + %.3f over DCN\n", s * 1e6, want * 1e6, ag * 1e6, intra * 1e6, (ag - intra) * 1e6);
  /* A permute between slices pays one DCN transfer. */
  snprintf(src, sizeof src,
           "HloModule m, num_partitions=8\nENTRY e {\n p = f32[1024] parameter(0)\n ROOT r = f32[1024] collective-permute(p), "
           "channel_id=1, source_target_pairs={{0,4},{4,0}}\n}\n");
  CHECK(fabs(cost_of(src, &t, &chip) - (4096 / bw + step)) < 1e-12);
  CHECK_DONE();
}
