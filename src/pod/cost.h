/* What a collective costs one chip of the pod: the compiler's hook (tpu_compile_opts
 * coll_cost) into the pod's interconnect model. */
#ifndef TPU_POD_COST_H
#define TPU_POD_COST_H

#include "chip/chip.h"
#include "compile/compile.h"
#include "ir/ir.h"

typedef struct tpu_pod_cost_ctx {
  const tpu_chip *chip;
} tpu_pod_cost_ctx;

/* A tpu_coll_cost_fn (user = tpu_pod_cost_ctx): the collective's time on the chip's ICI
 * links and the bytes this chip sends. */
tpu_status tpu_pod_coll_cost(void *user, const tpu_instr *in, tpu_coll_cost *c, tpu_diag *d);

#endif
