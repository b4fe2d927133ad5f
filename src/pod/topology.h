/* The physical shape of a TPU slice: chips on a 1-3 D torus or mesh, device ids to chip
 * coordinates, and the directed ICI links between neighbours (docs/pod.md). */
#ifndef TPU_POD_TOPOLOGY_H
#define TPU_POD_TOPOLOGY_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "chip/chip.h"

/* One slice (or several identical slices joined by the data-center network). Plain data.
 * Chips are numbered x-fastest: chip = x + X*y + X*Y*z (+ slice * chips_per_slice); JAX
 * numbers device ids the same way (tests/pod/coords, from libtpu). */
typedef struct tpu_topology {
  char chip[32];          /* chip preset name, "v5p" */
  int ndims;              /* 1-3 axes as given ("4x4x8" is 3, "2x4" is 2) */
  int64_t dims[3];        /* chips along each axis; unused axes are 1 */
  int wrap[3];            /* 1: the axis has wrap-around links (a ring), 0: a line */
  int twisted;            /* "_twisted" (v4/v5p twisted torus); routed as a plain torus */
  int64_t chips_per_slice;
  int64_t slices;         /* ICI slices joined by DCN; 1 unless set by the caller */
  int64_t nchips;         /* chips_per_slice * slices */
  int64_t devices_per_chip; /* JAX devices per chip: 1 (a megacore chip is one device);
                               libtpu's compile-only v4 lists one per TensorCore (2) */
  int64_t chips_per_host;
  int64_t links_per_chip; /* the chip's ICI ports (4 on a 2-D torus, 6 on a 3-D one) */
  double link_bw;         /* bytes/s per link, one direction */
  double hop_s;           /* seconds per hop */
  double dcn_bw;          /* bytes/s per chip between slices (all chips of a host sending) */
  double dcn_host_bw;     /* bytes/s out of one host's NICs, shared by its chips (pod/dcn.h) */
  double dcn_latency_s;   /* seconds per dependent step between slices */
  double pcie_bw;         /* bytes/s between a chip and its host, one way (0: unknown) */
} tpu_topology;

/* Parses a --topology string for `chip`: "4x4x8", "2x4", "16" (axes in chips, x first),
 * "4x4x8_twisted", or a slice name "v5p-128", "v4-4096", "v5e-256", "v5litepod-16",
 * "v6e-64": the number counts TensorCores, so chips = N / the chip's TensorCores (v4 and
 * v5p have 2: v5p-128 is 64 chips, 4x4x4; v5e and v6e have 1), and the shape is
 * tpu_topology_default's. Wrap-around per axis follows the chip's rule
 * (tpu_chip_axis_wraps). Errors (TPU_ERR_ARG, "error: ..."): bad syntax, more axes than
 * the chip's torus has, an axis or a chip count beyond the chip's largest slice, a slice
 * name of another chip, a TensorCore count that is not whole chips, a twisted shape that
 * is not AxBxC with 2A=B=C or 2A=2B=C in multiples of 4, a chip without ICI. */
tpu_status tpu_topology_parse(const char *text, const tpu_chip *chip, tpu_topology *out,
                              tpu_diag *d);

/* The slice of `nchips` chips one gets by default (the Cloud TPU shape for that many
 * chips): 2-D chips 1x1, 1x2, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16; 3-D chips 1x1x1,
 * 1x2x1, 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, 4x4x8, 4x8x8, 8x8x8, ... (each doubling
 * doubles the last of the shortest axes); other counts take 4x4xN/16 on a 3-D torus when
 * that fits, else the most nearly square/cubic shape that fits the chip. */
tpu_status tpu_topology_default(const tpu_chip *chip, int64_t nchips, tpu_topology *out,
                                tpu_diag *d);

/* Fails (TPU_ERR_ARG) unless the topology holds exactly `ndevices` devices: "error:
 * topology 4x4 has 16 chips but the program runs on 8 devices". */
tpu_status tpu_topology_check_devices(const tpu_topology *t, int64_t ndevices, tpu_diag *d);

/* The slice(s) a run of `ndevices` devices uses, as `tpusim run --topology T --slices K`
 * gives them: K slices (K <= 1: one) of topology `text` (NULL: the chip's default slice for
 * ndevices / K chips), checked to hold the devices. *set is 0 (nothing to do: no text and
 * one slice) or 1 (*out filled). */
tpu_status tpu_topology_for_run(const char *text, int64_t slices, const tpu_chip *chip, int64_t ndevices,
                                tpu_topology *out, int *set, tpu_diag *d);

/* Device id -> chip coordinates (x, y, z; unused axes 0) as JAX assigns them; returns the
 * TensorCore on the chip (core_on_chip, 0 unless devices_per_chip > 1), -1 for an id out
 * of range. The slice index (multi-slice) is id / (chips_per_slice * devices_per_chip). */
int tpu_topology_coords(const tpu_topology *t, int64_t device_id, int64_t coords[3]);
/* Device id -> global chip index (-1 out of range); coordinates -> chip index in slice 0. */
int64_t tpu_topology_chip(const tpu_topology *t, int64_t device_id);
int64_t tpu_topology_chip_at(const tpu_topology *t, const int64_t coords[3]);

/* Directed links. Link l leaves chip l / 6 along axis (l % 6) / 2 in direction l % 2
 * (0: +1, 1: -1); the slot exists when the axis is longer than 1 and the step stays in
 * the slice or wraps. nlinks counts slots (6 per chip), not existing links. */
#define TPU_TOPO_LINK_SLOTS 6
int64_t tpu_topology_nlinks(const tpu_topology *t);
int tpu_topology_link_exists(const tpu_topology *t, int64_t link);
/* The chip a link arrives at (-1 when the slot has no link). */
int64_t tpu_topology_link_dest(const tpu_topology *t, int64_t link);
/* Existing links (both directions counted). */
int64_t tpu_topology_count_links(const tpu_topology *t);

/* A link for a report: "(0,1,0)->(1,1,0) +x" ("(1,0)->(0,0) -x" on a 2-D slice; a slice
 * prefix "s1:" after the first slice); "-" for a slot without a link. */
void tpu_topology_link_name(const tpu_topology *t, int64_t link, char *buf, size_t n);

/* "4x4x8 (wrap x y z)" / "2x4 (no wrap)" into buf. */
void tpu_topology_format(const tpu_topology *t, char *buf, size_t n);

#endif
