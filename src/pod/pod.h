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

/* How processes that each run some of the devices meet (MPI: src/pod/mpi.c). Keys name
 * what a process reached: a collective (TPU_POD_KEY of its instruction), or the end. */
#define TPU_POD_KEY(in) (((int64_t)(in)->parent->index << 32) | (int64_t)(uint32_t)(in)->id)
#define TPU_POD_KEY_END ((int64_t)-1)
typedef struct tpu_pod_transport {
  int rank, nranks;
  int64_t first, count; /* the devices this process runs: [first, first + count) */
  /* Every process calls it with the same sequence of keys. It returns an error (the same
   * in every process) when any process posted another key or a failure (`failed` with its
   * diagnostic in *why); otherwise ops[dev] of every other process's device that one of
   * this process's devices reads at collective `in` (NULL at the end) points to that
   * device's nops operands, held until `release`. */
  tpu_status (*exchange)(void *user, int64_t key, const tpu_instr *in, int failed, const tpu_diag *why,
                         const tpu_tensor *const **ops, int nops, tpu_diag *d);
  void (*release)(void *user);
  /* After the run: the other processes' results into outs[] of the process of rank 0. */
  tpu_status (*gather)(void *user, tpu_tensor *outs, tpu_diag *d);
  void *user;
} tpu_pod_transport;

/* The most devices one process runs the values of (one thread each); more are refused
 * before any work, at the module's device-count attribute: spread them over MPI ranks. */
#define TPU_POD_MAX_LOCAL_DEVICES 4096
tpu_status tpu_pod_check_local(const tpu_module *m, int64_t count, tpu_diag *d);

/* tpu_pod_run over several processes: this one runs tr->count devices from tr->first
 * (args and outs are indexed by global device id; only those entries are used, and rank 0
 * receives every device's result). tr NULL is tpu_pod_run. */
tpu_status tpu_pod_run_dist(const tpu_module *m, const tpu_pod_transport *tr, tpu_pod_device_fn fn, void *user,
                            tpu_tensor *const *args, int nargs, tpu_tensor *outs, tpu_diag *d);

#endif
