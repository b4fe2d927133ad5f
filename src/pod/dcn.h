/* The data-center network between slices: the cross-slice phase of a collective whose
 * groups span several ICI slices, timed on the hosts' NICs (docs/pod.md, "Many slices"). */
#ifndef TPU_POD_DCN_H
#define TPU_POD_DCN_H

#include <stdint.h>

#include "base/status.h"
#include "pod/ici.h"
#include "pod/topology.h"

/* One cross-slice phase. Chips in different slices reach each other only through their
 * hosts: a chip's bytes cross PCIe to its host and leave by the host's NICs, which the
 * chips of that host sending at the same time share [CL multislice]. `chips` lists the
 * global chip indices that send over DCN in this phase (each once); `bytes` is what each
 * of them sends; `steps` the dependent transfers in a row (a ring over K slices: K-1, an
 * all-reduce 2(K-1)). */
typedef struct tpu_dcn_phase {
  const int64_t *chips;
  int64_t nchips;
  double bytes;
  int64_t steps;
} tpu_dcn_phase;

typedef struct tpu_dcn_result {
  double seconds;         /* bytes / rate + steps * latency */
  double rate;            /* bytes/s one chip gets: min(PCIe, host NICs / its host's senders) */
  double latency_seconds; /* steps * dcn_latency_s */
  int64_t max_per_host;   /* most senders on one host */
  int64_t hosts;          /* hosts that send */
} tpu_dcn_result;

/* The host a chip sits on: hosts are blocks of chips_per_host chips, 2 along x, then as
 * many along y, then z (v4/v5p: 2x2x1; v5e/v6e: 2x4), within each slice. */
int64_t tpu_dcn_host(const tpu_topology *t, int64_t chip);

/* The bytes each chip sends over DCN and the steps of a collective whose groups span K
 * slices with m members in each, as XLA runs it hierarchically (in-slice reduce-scatter,
 * the exchange between slices, in-slice all-gather; an all-gather exchanges first). v is
 * tpu_ici_op's operand_bytes (all-gather: the shard). */
void tpu_dcn_share(tpu_ici_kind kind, int64_t K, int64_t m, double v, double *bytes, int64_t *steps);

/* Times one phase on t (dcn_host_bw, pcie_bw, dcn_latency_s). Errors (TPU_ERR_ARG): no
 * DCN bandwidth known for the chip, a chip index out of range. */
tpu_status tpu_dcn_time(const tpu_topology *t, const tpu_dcn_phase *ph, tpu_dcn_result *r, tpu_diag *d);

#endif
