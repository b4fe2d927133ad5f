/* Collective groups read from their attributes (replica_groups in the explicit, iota and
 * mesh forms; source_target_pairs), and the module's device count. */
#ifndef TPU_IR_COLLECTIVE_H
#define TPU_IR_COLLECTIVE_H

#include "ir/ir.h"

/* replica_count x num_partitions from the module header (1 when absent). */
int64_t tpu_module_device_count(const tpu_module *m);

/* How many devices the collective `in` joins in its largest group: 1 when every device
 * works alone (an identity), the module's device count for `{}`; for collective-permute, 2
 * when any pair sends to another device, else 1. Malformed attributes are an error at in. */
tpu_status tpu_collective_devices(const tpu_instr *in, int64_t *devices, tpu_diag *d);

/* TPU_OK when `in` joins no other device; otherwise an error naming the op and its group
 * size, since one chip cannot compute it. */
tpu_status tpu_collective_check_one_device(const tpu_instr *in, tpu_diag *d);

#endif
