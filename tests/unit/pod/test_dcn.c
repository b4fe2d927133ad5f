/* Multi-slice collectives: a group spanning slices pays its share over DCN at the chip's
 * DCN model (its host's NICs shared by the chips of the host that send, PCIe, a latency
 * per ring step over the slices; docs/pod.md), on top of its per-slice part on ICI; groups
 * inside one slice pay nothing over DCN. Checked against the closed forms. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "chip/chip.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "pod/cost.h"
#include "pod/dcn.h"
#include "chip/program.h"
#include "pod/topology.h"

static unsigned g_lanes; /* the last collective's kinds of link */

static double cost_v(const char *src, const tpu_topology *t, const tpu_chip *chip, tpu_pod_coll_info *info) {
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
  g_lanes = c.lanes;
  if (st == TPU_OK && info) {
    *info = x.info[0];
    info->link_bytes = NULL;
  }
  tpu_pod_cost_free(&x);
  tpu_module_free(m);
  return st == TPU_OK ? c.seconds : -1;
}

int main(void) {
  tpu_diag d;
  tpu_chip chip;
  if (tpu_chip_load("v5e", &chip, &d) != TPU_OK) return 1;
  char src[1024];
  const double step = chip.dcn_latency_s, bw = chip.dcn_bw;
  CHECK(bw > 0 && step > 0 && chip.dcn_host_bw == 8 * bw); /* CL: 2 x 100 Gb/s per 8-chip host */
  /* Two slices of 2x2 (one host block each, half a host: half its NICs); an all-reduce
   * of 4 KiB between the same chip of each slice: every chip sends, 4 per host. */
  tpu_topology t;
  CHECK(tpu_topology_parse("2x2", &chip, &t, &d) == TPU_OK);
  t.slices = 2;
  t.nchips = t.chips_per_slice * 2;
  CHECK(tpu_dcn_host(&t, 0) == tpu_dcn_host(&t, 3) && tpu_dcn_host(&t, 4) != tpu_dcn_host(&t, 3));
  snprintf(src, sizeof src,
           "HloModule m, num_partitions=8\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
           "ENTRY e {\n p = f32[1024] parameter(0)\n ROOT r = f32[1024] all-reduce(p), channel_id=1, "
           "replica_groups={{0,4},{1,5},{2,6},{3,7}}, use_global_device_ids=true, to_apply=add\n}\n");
  tpu_pod_coll_info info;
  double s = cost_v(src, &t, &chip, &info), want = 2 * 0.5 * 4096 / bw + 2 * step;
  CHECK(fabs(s - want) < 1e-12);
  CHECK(info.dcn_slices == 2 && info.dcn_per_host == 4 && fabs(info.dcn_seconds - s) < 1e-15);
  CHECK(g_lanes == 1u << (TPU_INSN_LANES - 1)); /* DCN only: it leaves the ICI links to others */
  /* All-gather of 4 KiB shards over all 8 chips: the shards cross DCN first ((K-1) each
   * per chip), then each slice's 4 chips gather the K = 2 shards each holds on ICI. */
  snprintf(src, sizeof src,
           "HloModule m, num_partitions=8\nENTRY e {\n p = f32[1024] parameter(0)\n ROOT r = f32[8192] all-gather(p), "
           "channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, use_global_device_ids=true, dimensions={0}\n}\n");
  double ag = cost_v(src, &t, &chip, NULL);
  snprintf(src, sizeof src,
           "HloModule m, num_partitions=8\nENTRY e {\n p = f32[2048] parameter(0)\n ROOT r = f32[8192] all-gather(p), "
           "channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, dimensions={0}\n}\n");
  CHECK(g_lanes == (1u << (TPU_INSN_LANES - 1) | 15u)); /* DCN, then x and y in each 2x2 slice */
  double intra = cost_v(src, &t, &chip, NULL);
  CHECK(intra > 0 && fabs(ag - (intra + 4096 / bw + step)) < 1e-12);
  printf("v5e, 2 slices of 2x2: all-reduce across slices %.3f us (closed form %.3f); all-gather over both %.3f us = "
         "%.3f on ICI + %.3f over DCN\n", s * 1e6, want * 1e6, ag * 1e6, intra * 1e6, (ag - intra) * 1e6);
  /* A permute between slices: one chip of each host sends, so it has the host's NICs (half
   * a host's for a 4-chip slice: 12.5 GB/s, under PCIe's 16 GB/s) to itself. */
  snprintf(src, sizeof src,
           "HloModule m, num_partitions=8\nENTRY e {\n p = f32[1024] parameter(0)\n ROOT r = f32[1024] collective-permute(p), "
           "channel_id=1, source_target_pairs={{0,4},{4,0}}\n}\n");
  double pm = cost_v(src, &t, &chip, &info);
  CHECK(fabs(pm - (4096 / (chip.dcn_host_bw / 2) + step)) < 1e-12 && info.dcn_per_host == 1);
  printf("permute across slices, one sender per host: %.3f us (all chips of a host sending: %.3f us)\n", pm * 1e6,
         (4096 / bw + step) * 1e6);
  /* v5p: hosts are 2x2x1 blocks of 4 chips; a hierarchical all-reduce over 2 slices of
   * 2x2x2 with 2 members per slice: in-slice reduce-scatter + all-gather on ICI, and
   * 2(K-1)/K of the V/2 share over DCN, all 4 chips of each host sending (CL: 50 Gb/s each). */
  tpu_chip p5;
  if (tpu_chip_load("v5p", &p5, &d) != TPU_OK) return 1;
  tpu_topology t5;
  CHECK(tpu_topology_parse("2x2x2", &p5, &t5, &d) == TPU_OK);
  t5.slices = 2;
  t5.nchips = t5.chips_per_slice * 2;
  CHECK(tpu_dcn_host(&t5, 0) == tpu_dcn_host(&t5, 3) && tpu_dcn_host(&t5, 3) != tpu_dcn_host(&t5, 4));
  snprintf(src, sizeof src,
           "HloModule m, num_partitions=16\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
           "ENTRY e {\n p = f32[4096] parameter(0)\n ROOT r = f32[4096] all-reduce(p), channel_id=1, "
           "replica_groups=[4,4]<=[2,4,2]T(1,0,2), use_global_device_ids=true, to_apply=add\n}\n");
  double h = cost_v(src, &t5, &p5, &info);
  CHECK(h > 0 && info.dcn_slices == 2 && info.dcn_per_host == 4);
  CHECK(fabs(info.dcn_bytes - 2 * 0.5 * 16384 / 2) < 1e-9);
  CHECK(fabs(info.dcn_seconds - (info.dcn_bytes / p5.dcn_bw + 2 * p5.dcn_latency_s)) < 1e-12);
  CHECK(fabs(p5.dcn_host_bw - 4 * p5.dcn_bw) < 1);
  CHECK_DONE();
}
