/* ApproxTopK's PartialReduce reads its values row-major (compile/passes/relayout.c
 * partial_reduce_only): an entry parameter that only it reads takes the layout that pads least
 * and a copy relays it into row-major, a kernel of its own, as the XLA TPU compiler's
 * approx_max_k_b128n50257k8_f32 does (f32[128,50257] arrives {0,1}, `copy` into {1,0}); one
 * that pads least row-major (f32[64,3000]) is read as it is. On v5e the copy writes VMEM
 * (copy_kind.c tpu__relayout_kernel), as the compiler's copy writes S(1): it moves the
 * parameter's bytes once over HBM, not twice. */
#include <stdio.h>
#include <string.h>

#include "passes_util.h"
#include "unit/compile/backend_util.h"

static void hlo(char *buf, size_t n, int b, int len) {
  snprintf(buf, n,
           "HloModule a\ngt {\n i = s32[] parameter(2)\n j = s32[] parameter(3)\n x = f32[] parameter(0)\n"
           " y = f32[] parameter(1)\n ROOT c = pred[] compare(x, y), direction=GT\n}\n"
           "ENTRY e {\n x = f32[%d,%d] parameter(0)\n io = s32[%d] iota(), iota_dimension=0\n"
           " ib = s32[%d,%d] broadcast(io), dimensions={1}\n ni = f32[] constant(-inf)\n m1 = s32[] constant(-1)\n"
           " pr = (f32[%d,256], s32[%d,256]) custom-call(x, ib, ni, m1), custom_call_target=\"PartialReduce\", "
           "called_computations={gt}, backend_config={\"log2_reduction\": 8, \"reduction_dim\": 1, "
           "\"to_apply_type\": \"comparator\", \"top_k\": 8, \"recall_target\": 0.950000}\n"
           " ROOT v = f32[%d,256] get-tuple-element(pr), index=0\n}\n",
           b, len, len, b, len, b, b, b);
}

/* The copies of the compiled entry that read the parameter, and whether they write it
 * row-major from a parameter laid out {0,1}. */
static int param_copies(int b, int len, int *relaid) {
  char src[2048];
  hlo(src, sizeof src, b, len);
  tpu_module *m = compile_src(src);
  int n = 0;
  *relaid = 0;
  for (int i = 0; m && i < m->entry->ninstrs; i++) {
    const tpu_instr *c = m->entry->instrs[i];
    if (c->op != TPU_OP_COPY || c->operands[0]->op != TPU_OP_PARAMETER) continue;
    n++;
    const tpu_shape *p = &c->operands[0]->shape;
    *relaid = p->has_layout && p->minor_to_major[0] == 0 && c->shape.has_layout && c->shape.minor_to_major[0] == 1;
  }
  tpu_module_free(m);
  return n;
}

static void copies(void) {
  int relaid = 0, relaid2 = 0;
  int odd = param_copies(128, 10000, &relaid), even = param_copies(64, 3000, &relaid2);
  printf("PartialReduce of f32[128,10000]: %d copies of the parameter ({0,1} -> {1,0}: %d); f32[64,3000]: %d\n", odd,
         relaid, even);
  CHECK(odd == 1 && relaid);
  CHECK(even == 0);
}

static void copy_into_vmem(void) {
  char src[2048];
  hlo(src, sizeof src, 128, 10000);
  tpu_chip c;
  tpu_module *m = NULL;
  tpu_program *p = compile_for_with("v5e", src, 1, &c, &m);
  double bytes = named_op_value(p, &c, "copy.relayout", 0), param = 128.0 * 10000 * 4;
  printf("v5e copy of f32[128,10000] for the PartialReduce: %.0f HBM bytes (the parameter: %.0f)\n", bytes, param);
  CHECK(bytes > 0.9 * param && bytes < 1.2 * param);
  tpu_program_free(p);
  tpu_module_free(m);
}

int main(void) {
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &g_chip, &d) == TPU_OK);
  copies();
  copy_into_vmem();
  CHECK_DONE();
}
