/* HLO shardings (the `sharding=` attribute XLA's SPMD partitioner leaves on entry
 * parameters and results): which part of a global array each device holds, so the pod
 * executor can cut global inputs into shards and assemble global results. */
#ifndef TPU_POD_SHARDING_H
#define TPU_POD_SHARDING_H

#include "base/tensor.h"
#include "ir/ir.h"

typedef enum {
  TPU_SHARD_REPLICATED, /* every device holds the whole array */
  TPU_SHARD_MAXIMAL,    /* one device holds it ({maximal device=N}) */
  TPU_SHARD_TILED,      /* devices=[...]: tiles of the array */
  TPU_SHARD_MANUAL,     /* {manual}: shard_map's per-device values, no global view */
  TPU_SHARD_TUPLE       /* one sharding per tuple element */
} tpu_shard_kind;

typedef struct tpu_sharding {
  tpu_shard_kind kind;
  int ntile;                        /* tile-assignment rank: data dims + replication dims */
  int64_t tile[TPU_MAX_RANK + 4];   /* tile-assignment dims */
  int nrep;                         /* trailing tile dims that replicate (last_tile_dim_replicate, last_tile_dims) */
  int64_t *devices;                 /* the tile assignment, row-major over tile[] */
  int64_t ndevices;
  int64_t maximal;                  /* MAXIMAL: the device */
  int nmanual;                      /* of the nrep trailing dims, those that are manual subgroups */
  int nelems;                       /* TUPLE */
  struct tpu_sharding *elems;
} tpu_sharding;

/* Parses the text of a sharding attribute ("{devices=[2,1,4]<=[8] last_tile_dim_replicate}",
 * "{replicated}", "{{...}, {...}}", explicit device lists, iota lists with T(perm)); errors
 * at `loc`. */
tpu_status tpu_sharding_parse(const char *text, tpu_loc loc, tpu_sharding *s, tpu_diag *d);
/* The same, also accepting manual subgroups (`last_tile_dims={manual, ...}`: inside a shard_map
 * manual over only some mesh axes), which tpu_sharding_parse refuses. */
tpu_status tpu_sharding_parse_partial(const char *text, tpu_loc loc, tpu_sharding *s, tpu_diag *d);
void tpu_sharding_free(tpu_sharding *s);

/* The sharding written on `in` (*found = 0 and s untouched when it has none). */
tpu_status tpu_sharding_of(const tpu_instr *in, tpu_sharding *s, int *found, tpu_diag *d);

/* Checks an array sharding against the per-device shape `local` and a pod of ndev devices:
 * the tile rank matches, every device id is in range. Errors at loc. */
tpu_status tpu_sharding_check(const tpu_sharding *s, const tpu_shape *local, int64_t ndev, tpu_loc loc,
                              const char *what, tpu_diag *d);

/* The global dims of an array with per-device shape `local`: local x tiles per dim (a
 * dimension XLA padded to divide evenly keeps the padding). */
void tpu_sharding_global_dims(const tpu_sharding *s, const tpu_shape *local, int64_t *dims);

/* Device dev's shard of `global` (of per-device shape `local`: ceil(global / tiles) per dim;
 * where that overruns the global array, as XLA pads, the shard is zero-filled). */
tpu_status tpu_sharding_shard(const tpu_sharding *s, int64_t dev, const tpu_tensor *global, const tpu_shape *local,
                              tpu_tensor *out, tpu_diag *d);

/* The global array from every device's shard (shards[dev], each of shape `local`); replicas
 * are taken from the first device in tile-assignment order that holds each tile. */
tpu_status tpu_sharding_assemble(const tpu_sharding *s, const tpu_tensor *const *shards, int64_t ndev,
                                 const tpu_shape *local, tpu_tensor *global, tpu_diag *d);

#endif
