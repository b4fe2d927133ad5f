/* Collective groups read from their attributes (replica_groups in the explicit and iota
 * forms; source_target_pairs), the module's device grid, and which devices each device's
 * group holds under XLA's group modes. */
#ifndef TPU_IR_COLLECTIVE_H
#define TPU_IR_COLLECTIVE_H

#include "ir/ir.h"

/* replica_count x num_partitions from the module header (1 when absent; a program JAX
 * lowered over a mesh, which names neither, has the mesh's devices as partitions). */
int64_t tpu_module_device_count(const tpu_module *m);
void tpu_module_device_grid(const tpu_module *m, int64_t *replicas, int64_t *partitions);

/* How the ids in replica_groups name devices (XLA's CollectiveOpGroupMode): device id =
 * replica * partitions + partition throughout tpusim. */
typedef enum {
  TPU_CG_CROSS_REPLICA,               /* no channel_id: replica ids, within each partition */
  TPU_CG_CROSS_PARTITION,             /* channel_id: partition ids, within each replica */
  TPU_CG_CROSS_REPLICA_AND_PARTITION, /* channel_id, use_global_device_ids=false: replicas x all partitions */
  TPU_CG_FLATTENED                    /* channel_id, use_global_device_ids=true: device ids */
} tpu_coll_mode;
tpu_coll_mode tpu_collective_mode(const tpu_instr *in);

/* Groups as read: ids[start[g] .. start[g+1]) is group g; ngroups 0 means `{}` (everyone). */
typedef struct {
  int64_t ngroups;
  int64_t *start;
  int64_t *ids;
} tpu_groups;
/* Reads an iota device list "<=[d0,d1,...]T(perm)" at *p (T optional): the ids 0..n-1
 * reshaped to the dims, transposed by perm, flattened. Returns 1 (ids in a new array,
 * *p past it), 0 malformed, -1 out of memory. */
int tpu_iota_read(const char **p, int64_t **ids, int64_t *count);

tpu_status tpu_groups_read(const tpu_instr *in, const char *attr, tpu_groups *g, tpu_diag *d);
void tpu_groups_free(tpu_groups *g);
/* How many long explicit group lists ("{{...},...}" of 512 characters or more) this process
 * has parsed: tpu_groups_read keeps the last few it read by their text and copies them out
 * when asked again (the verifier, passes, back end and pod timing each ask). */
int64_t tpu_groups_texts_parsed(void);
/* How many times a collective's groups were read and checked (the verifier's check,
 * tpu_collective_check_groups / tpu_collective_group_size), not answered from those kept by
 * their text: the count a test reads. */
int64_t tpu_collective_groups_checked(void);

/* The devices in device `dev`'s group for collective `in` (not collective-permute), as
 * device ids in group order (the order reductions and concatenations follow); *self is
 * dev's position. `members` has room for replicas * partitions ids. Errors (at in) when the
 * groups name a device outside the grid or leave `dev` out. */
tpu_status tpu_collective_members(const tpu_instr *in, int64_t replicas, int64_t partitions, int64_t dev,
                                  int64_t *members, int64_t *n, int64_t *self, tpu_diag *d);

/* The same with the groups read once, for a caller that asks for many devices:
 * tpu_coll_groups_read (the replica_groups, the mode, and each id's group), then
 * tpu_coll_groups_members for each device, then tpu_coll_groups_free. */
typedef struct {
  tpu_groups g;
  tpu_coll_mode mode;
  int64_t space;  /* the mode's id space */
  int64_t *where; /* per id of it: the first group naming it, -1: none (NULL when ngroups 0) */
} tpu_coll_groups;
tpu_status tpu_coll_groups_read(const tpu_instr *in, int64_t replicas, int64_t partitions, tpu_coll_groups *cg,
                                tpu_diag *d);
tpu_status tpu_coll_groups_members(const tpu_instr *in, const tpu_coll_groups *cg, int64_t partitions, int64_t dev,
                                   int64_t *members, int64_t *n, int64_t *self, tpu_diag *d);
void tpu_coll_groups_free(tpu_coll_groups *cg);

/* collective-permute: the device that sends to `dev` (-1: none, so its result is zeros). */
tpu_status tpu_collective_permute_source(const tpu_instr *in, int64_t replicas, int64_t partitions, int64_t dev,
                                         int64_t *src, tpu_diag *d);
/* The same for every device 0 .. replicas * partitions - 1 at once (src: that many entries),
 * reading the pairs once (per device, a 4,096-device permute's pairs were parsed 4,096 times). */
tpu_status tpu_collective_permute_sources(const tpu_instr *in, int64_t replicas, int64_t partitions, int64_t *src,
                                          tpu_diag *d);

/* The synchronous op an asynchronous -start stands for (all-reduce-start -> all-reduce);
 * any other op maps to itself. */
tpu_opcode tpu_collective_base(tpu_opcode op);
/* all-reduce-done, all-gather-done, collective-permute-done: they hand over the result of
 * their -start and communicate nothing themselves. */
int tpu_collective_is_done(tpu_opcode op);

/* The size of every group of `in` (an error at in when they differ, as all-gather,
 * reduce-scatter and all-to-all need one size). */
tpu_status tpu_collective_group_size(const tpu_instr *in, int64_t replicas, int64_t partitions, int64_t *size,
                                     tpu_diag *d);

/* Checks that the groups of `in` partition the devices of the grid (each id once, in range,
 * all covered, groups of one size where the op needs it) and permute pairs name each
 * source and target at most once. */
tpu_status tpu_collective_check_groups(const tpu_instr *in, int64_t replicas, int64_t partitions, tpu_diag *d);

/* How many devices the collective `in` joins in its largest group: 1 when every device
 * works alone (an identity), the module's device count for `{}`; for collective-permute, 2
 * when any pair sends to another device, else 1. Malformed attributes are an error at in. */
tpu_status tpu_collective_devices(const tpu_instr *in, int64_t *devices, tpu_diag *d);

/* TPU_OK when `in` joins no other device; otherwise an error naming the op and its group
 * size, since one chip cannot compute it. */
tpu_status tpu_collective_check_one_device(const tpu_instr *in, tpu_diag *d);

#endif
