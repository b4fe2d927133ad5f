/* The compiler: a pipeline of named passes from a verified HLO module to a TPU program.
 *
 *   HLO passes (mutate the module; verified after each; `--dump-after` prints HLO):
 *     inline → spmd-partition → simplify → fuse (spmd-partition: compile/spmd/spmd.h)
 *   Back-end passes (build the program; `--dump-after` prints the program so far):
 *     tile → layout → buffer-assign → schedule → lower
 *
 * tpu_compile runs them all in this order (compile/pipeline.c). */
#ifndef TPU_COMPILE_COMPILE_H
#define TPU_COMPILE_COMPILE_H

#include <stdio.h>

#include "chip/chip.h"
#include "chip/mxu.h"
#include "ir/ir.h"

typedef struct tpu_program tpu_program; /* chip/program.h */
struct tpu_mosaic_seen_set;             /* mosaic/mosaic.h */
struct tpu_mm_memo;                     /* below */

/* A collective's cost on the inter-chip links, from the pod's link model: seconds from
 * its start until every chip has its result, and the bytes this chip sends. */
typedef struct tpu_coll_cost {
  double seconds;
  double bytes;
  unsigned lanes; /* the kinds of link it loads: bit axis * 2 + dir (+x, -x, +y, -y, +z,
                   * -z), bit 6 the data-center network between slices; 0 when none is
                   * known (it then takes them all) */
} tpu_coll_cost;
typedef tpu_status (*tpu_coll_cost_fn)(void *user, const tpu_instr *in, tpu_coll_cost *c, tpu_diag *d);
/* The ICI hops on the route from device `from` to device `to` of the module of `in` on the
 * slice its collectives are timed on (the link model's route), or -1 when none is known (the
 * devices sit in different slices). */
typedef tpu_status (*tpu_hops_fn)(void *user, const tpu_instr *in, int64_t from, int64_t to, int64_t *hops,
                                  tpu_diag *d);

typedef struct tpu_compile_opts {
  const tpu_chip *chip;       /* target; required */
  const char *dump_after;     /* pass name, or NULL */
  FILE *dump;                 /* where dumps go (stdout when NULL) */
  int precision_override;     /* -1: honour each dot's operand_precision; else a tpu_precision */
  tpu_coll_cost_fn coll_cost; /* NULL: one chip (collectives joining other chips are refused) */
  void *coll_user;
  int sync_collectives;       /* 1: the chip waits at each synchronous collective where it
                               * stands (0: it starts after its operands and is waited for
                               * where first used, as XLA's latency-hiding scheduler does) */
  int no_windowed_einsum;     /* 1: spmd-partition gathers and reduce-scatters where the chip's
                               * compiler would run a windowed einsum (docs/spmd.md) */
  const char *mesh;           /* "NAME=SIZE,...": spmd-partition's mesh (NULL: the module's own) */
  const struct tpu_mosaic_seen_set *mosaic_seen; /* NULL, or the scalar operands a values run gave
                                                  * each Pallas call (mosaic/mosaic.h): its
                                                  * timing counts the kernel on them */
  tpu_hops_fn hops;           /* NULL: a Pallas kernel's remote DMAs go one hop; its user is coll_user */
  struct tpu_mm_memo *mm_memo; /* NULL, or matmul plans searched by earlier compiles for this
                                * same chip, looked up and added to (a caller that compiles
                                * many programs: the planner's candidates repeat their matmuls) */
} tpu_compile_opts;

/* A memo of matmul plans for tpu_compile_opts.mm_memo: the blocking search's result for each
 * kernel shape, as the search would give it again. NULL on out-of-memory. */
struct tpu_mm_memo *tpu_mm_memo_new(void);
int64_t tpu_mm_memo_size(const struct tpu_mm_memo *m); /* plans held */
void tpu_mm_memo_free(struct tpu_mm_memo *m);

/* The pass names in pipeline order, NULL-terminated (for --dump-after checks and help). */
extern const char *const tpu_compile_pass_names[];

/* Runs the HLO passes on `m` (in place). */
tpu_status tpu_compile_hlo(tpu_module *m, const tpu_compile_opts *o, tpu_diag *d);

/* Runs the back-end passes on a module that went through tpu_compile_hlo; *out owns the
 * program (tpu_program_free). Fails with TPU_ERR_LIMIT naming the bytes needed and
 * available when the program cannot fit the chip's HBM. */
tpu_status tpu_compile_backend(const tpu_module *m, const tpu_compile_opts *o, tpu_program **out,
                               tpu_diag *d);

/* Both. */
tpu_status tpu_compile(tpu_module *m, const tpu_compile_opts *o, tpu_program **out, tpu_diag *d);

#endif
