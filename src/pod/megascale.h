/* The XLA TPU compiler's multi-slice programs as inputs: one slice's module whose transfers
 * between slices are send/recv pairs to the megascale runtime (DCN), widened into the
 * program of every slice, where those pairs are collectives over the slices (docs/pod.md,
 * "Many slices"). */
#ifndef TPU_POD_MEGASCALE_H
#define TPU_POD_MEGASCALE_H

#include <stdint.h>

#include "base/status.h"
#include "ir/ir.h"

/* Does the module send to or receive from the megascale runtime (a host transfer whose
 * frontend attribute _xla_host_transfer_handler_name is "xla_megascale_runtime")? The first
 * such instruction into *at when not NULL. */
int tpu_megascale_present(const tpu_module *m, const tpu_instr **at);

/* Rewrites one slice's module (num_partitions = N chips of a slice, replica_count 1) into
 * the module of `slices` slices (num_partitions = slices x N; device d of slice s is global
 * device s x N + d, as JAX's hybrid mesh numbers them):
 *  - every collective's groups (and permute pairs) are repeated in each slice, as explicit
 *    global device ids;
 *  - partition-id becomes the id within the slice (remainder by N);
 *  - each megascale send/recv pair (matched by _xla_host_transfer_rendezvous) becomes the
 *    collective it stands for over the chips of the same position in every slice:
 *    ALL_REDUCE (with _xla_megascale_reduce_operation SUM, MAX, MIN or PRODUCT) an
 *    all-reduce, ALL_GATHER an all-gather of the leading dimension, ONE_TO_ONE a
 *    collective-permute over the _xla_megascale_target pairs (ids slice x 100000 + device,
 *    slices from 1); recv-done gives (its result, token), send-done its token.
 * Errors (at the instruction): a transfer type or reduction it does not know, a target
 * naming another number of slices than `slices` or a device outside the slice, a send or
 * recv without its partner, a module of several replicas. */
tpu_status tpu_megascale_widen(tpu_module *m, int64_t slices, tpu_diag *d);

#endif
