/* SPMD partitioning (pass `spmd-partition`): turns a program annotated with shardings over
 * a device mesh — JAX's lowered HLO with `sharding=` on its parameters, `Sharding` custom
 * calls (with_sharding_constraint) and shard_map's SPMDFullToShardShape /
 * SPMDShardToFullShape — into the one program every chip runs: per-chip shapes and the
 * collectives between chips (docs/spmd.md). */
#ifndef TPU_COMPILE_SPMD_H
#define TPU_COMPILE_SPMD_H

#include "ir/ir.h"

struct tpu_strbuf;

#define TPU_MESH_MAX_AXES 8

/* A logical device mesh: named axes, major first; device at mesh position p (row-major
 * over the axes) is ids[p], or p when ids is NULL. */
typedef struct tpu_mesh {
  int naxes;
  char names[TPU_MESH_MAX_AXES][32];
  int64_t sizes[TPU_MESH_MAX_AXES];
  int64_t ndev;
  int64_t *ids; /* owned (tpu_mesh_free) */
  /* What one more collective step costs, in bytes: what a link carries during one hop's
   * latency (the chip's ici_bw_per_link x ici_latency_s; tpu_mesh_price_for sets it). The
   * partitioner picks each dot's plan by bytes per chip plus this for every step of every
   * collective, so tiny programs prefer fewer collectives and large ones fewer bytes.
   * 0: by bytes alone. */
  double step_bytes;
  /* What one FLOP of a chip's matmul work costs, in the same bytes: the bytes a chip's ring
   * collectives move (two links, one each way: 2 x ici_bw_per_link) in the time its MXUs
   * do one FLOP (1 / peak_bf16_flops). A plan that computes a dot whole on every chip pays
   * for the work it repeats, so a sum over a split contraction (one all-reduce) beats
   * gathering its operands when the saved compute outweighs the extra bytes, as in XLA.
   * 0: by bytes alone. */
  double flop_bytes;
  /* Gather the f32 operands of default-precision dots as bf16 (converted before the
   * collective, back to f32 after it): the tpu backend computes such a dot as one bf16 pass,
   * so its values are the same and the collective moves half the bytes, as the XLA TPU
   * compiler does. Only for programs run on the tpu backend at per-op precision (the
   * reference backend computes the f32 dot exactly). */
  int bf16_dot_gathers;
  /* Run a dot whose operand is gathered round a ring of devices (the axes that split it) as
   * the XLA TPU compiler's windowed-einsum loop (spmd_window.c) round a ring of at least
   * windowed_min_devices (the chip's windowed_einsum_min_chips; 0: never) and at most
   * windowed_max_devices (0: XLA's bound alone), when XLA's test says the loop
   * is faster than the collective and the dot one after the other; a communication of at most
   * windowed_floor_bytes (the bytes a link moves in XLA's 1e-5 ms) always loops. */
  int64_t windowed_min_devices, windowed_max_devices;
  double windowed_ring4_multiplier; /* the chip's windowed_einsum_ring4_multiplier; 0: rings of 4 never loop */
  double windowed_floor_bytes;
  /* tpusim's own plan where XLA's rule and tpusim's prices part (a dot whose operands split
   * alike along its contraction: XLA keeps the splits and all-reduces the partial sums even
   * where gathering the operands moves fewer bytes): the cheaper plan by tpusim's prices,
   * for the better-plan hint (docs/spmd.md). Off: XLA's rule (the prediction). */
  int own_plans;
  /* The devices are every chip of a slice on which the XLA TPU compiler keeps an all-reduce
   * over all of them where each then takes its own block, rather than reduce-scattering
   * (tpu_spmd_keeps_full_all_reduce; tpu_mesh_configure sets it). */
  int keep_full_all_reduce;
  /* When set (own_plans), the sharding constraints that would get that plan from XLA, one
   * line each (`with_sharding_constraint(NAME, P(...))  # ...`), from the last walk. */
  struct tpu_strbuf *own_notes;
} tpu_mesh;

struct tpu_chip;
/* Prices collectives for `chip` (NULL: the v5e preset's figures, 45 GB/s x 1 us). */
void tpu_mesh_price_for(tpu_mesh *mesh, const struct tpu_chip *chip);
/* What every caller that partitions a program sets: the prices for `chip` (NULL: the
 * reference backend), f32 operands of default-precision dots gathered as bf16 on the tpu
 * backend at per-op precision (precision <= 0), and no windowed einsums when asked. */
void tpu_mesh_configure(tpu_mesh *mesh, const struct tpu_chip *chip, int precision, int no_windowed_einsum);

/* Whether the XLA TPU compiler, on `chip`'s default slice of ndev chips, keeps an all-reduce
 * whose one group is every device (each device then slicing its own block) instead of
 * making it a reduce-scatter (compile/spmd/rs_create.c: read from libtpu's programs on 29
 * slices, docs/spmd.md): square 2-D slices of 4x4 and larger, and 3-D slices but those
 * with an axis of 2 across 32 chips or more of the other two. NULL chip or one device: 0. */
int tpu_spmd_keeps_full_all_reduce(const struct tpu_chip *chip, int64_t ndev);

/* Whether the XLA TPU compiler, on `chip`'s default slice of ndev chips, runs an all-gather
 * of `bytes` (gathered) whose one group is every device as an all-reduce of each device's
 * block written into zeros (compile/spmd/ag_as_ar.c, read from libtpu's programs): 2-D slices
 * of 64 chips and more up to 16 MiB, 3-D slices of 64 chips and more at any size. */
int tpu_spmd_gathers_as_all_reduce(const struct tpu_chip *chip, int64_t ndev, int64_t bytes);

/* Whether the XLA TPU compiler pads a reduce-scatter along the rows of a local operand of
 * `bytes` over a group of `group` devices of `chip` (compile/spmd/rs_pad.c, read from libtpu's
 * programs, bench/spmd/probe_rs_pad.py): groups of 2 and 4, an operand of more than one of the
 * chip's spans (reduce_scatter_span_bytes), group x spans >= 8. NULL chip or no span: 0. */
int tpu_spmd_pads_reduce_scatter(const struct tpu_chip *chip, int64_t group, int64_t bytes);

/* The scalar s32 scale * self[p] + base on device p (its place self[p] in the group), as the
 * XLA TPU compiler computes a device's offset: partition-id indexing a constant table
 * (compile/spmd/coll_build.c; ops named after `pass`); *zero an s32 scalar 0 for the other
 * indices. */
struct tpu_builder;
tpu_status tpu__spmd_device_entry(struct tpu_builder *b, tpu_comp *c, const char *pass, const int64_t *self,
                                  int64_t ndev, int64_t scale, int64_t base, tpu_loc loc, tpu_instr **out,
                                  tpu_instr **zero);

/* "data=16,model=4" (errors at loc). */
tpu_status tpu_mesh_parse(const char *spec, tpu_mesh *mesh, tpu_diag *d);
/* The mesh JAX wrote in the module header (frontend_attributes xla.sdy.meshes); *found 0
 * when there is none. */
tpu_status tpu_mesh_from_module(const tpu_module *m, tpu_mesh *mesh, int *found, tpu_diag *d);
void tpu_mesh_free(tpu_mesh *mesh);

/* Whether m still needs partitioning: it has sharding annotations (Sharding custom calls
 * or parameter shardings) and is not an SPMD program already (num_partitions <= 1). */
int tpu_spmd_needed(const tpu_module *m);

/* Partitions m in place over `mesh` (NULL: the module's own mesh; an error when it has
 * none). Inlines calls first. Afterwards m has num_partitions = the mesh's devices, its
 * entry parameters and root carry the shardings (so global inputs and results map to
 * chips), and it verifies. */
tpu_status tpu_spmd_partition(tpu_module *m, const tpu_mesh *mesh, tpu_diag *d);

#endif
