/* The pod executor's values: N devices run one SPMD module, each on its own thread with its
 * own buffers, and meet at every collective (src/ref/collective.c computes what each gets,
 * in a fixed order, so results never depend on thread timing). */
#ifndef TPU_POD_POD_H
#define TPU_POD_POD_H

#include "base/tensor.h"
#include "ir/ir.h"
#include "ref/ref.h"

/* Runs one device: the reference interpreter or the chip executor with `comm` in its
 * options. `dev` is comm->device. */
typedef tpu_status (*tpu_pod_device_fn)(void *user, int64_t dev, const tpu_ref_comm *comm, const tpu_tensor *args,
                                        int nargs, tpu_tensor *out, tpu_diag *d);

/* Runs every device of the module (replica_count x num_partitions of them): args[dev] holds
 * device dev's nargs inputs, outs[dev] receives its result (freed and zeroed on failure).
 * Devices run concurrently, one thread each. The first error (the device that failed, not
 * the others it stopped) is returned, prefixed by the device it happened on. */
tpu_status tpu_pod_run(const tpu_module *m, tpu_pod_device_fn fn, void *user, tpu_tensor *const *args, int nargs,
                       tpu_tensor *outs, tpu_diag *d);

#endif
