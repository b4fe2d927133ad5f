/* Reference kernels (elementwise): placeholder until the kernels land. */
#include "ref/ref_int.h"

tpu_status tpu__ref_elementwise(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out, tpu_diag *d) {
  (void)ip;
  (void)args;
  (void)out;
  return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "op '%s' is not in the reference interpreter yet", tpu_op_name(in->op));
}
