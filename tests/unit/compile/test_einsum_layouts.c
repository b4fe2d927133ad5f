/* The kernels of vector-product einsums of rank 4 and 5 (docs/compiler-fusion.md, "Einsums laid out
 * as the compiler lays them"): the vector relaid out by a copy of its own where it lies
 * otherwise than the matrix (fuse_relaid.c), the reduce writing the result itself through
 * transposes and unit reshapes (fuse_reduce.c, simplify.c undo_transposes). Each case is a
 * libtpu probe's einsum; the want is the compiler's kernel count on v4, v5e, v5p and v6e.
 * Values are checked bit for bit against the program as written (reference interpreter). */
#include "compile/passes/hlo_passes.h"
#include "passes_util.h"

/* einsum(spec) as JAX lowers it: a dot_general, then a transpose (or reshape) into the
 * einsum's order. */
typedef struct {
  const char *spec, *src;
  int kernels;
} ecase;

static const ecase cases[] = {
    /* 'abcd,cb->abd': the vector bf16[32,64] lies [c,b], the matrix [.., b, c, ..]: a copy of the
     * vector (the compiler's `copy`, S(1) on v5e) and one multiply_reduce fusion */
    {"abcd,cb->abd",
     "HloModule m\nENTRY e {\n b = bf16[32,64]{1,0} parameter(1)\n a = bf16[4,64,32,256]{3,2,1,0} parameter(0)\n"
     " d = bf16[64,4,256]{2,1,0} dot(b, a), lhs_batch_dims={1}, lhs_contracting_dims={0}, rhs_batch_dims={1}, "
     "rhs_contracting_dims={2}\n ROOT t = bf16[4,64,256]{2,0,1} transpose(d), dimensions={1,0,2}\n}\n",
     2},
    /* 'abcd,cxb->xad', x = 1: bf16[64,1,32] laid out as it pads least, {0,2,1}, is [b, c] in
     * memory, the matrix's order: read in place, one fusion (no copy) */
    {"abcd,cxb->xad",
     "HloModule m\nENTRY e {\n b = bf16[64,1,32]{2,1,0} parameter(1)\n a = bf16[4,32,64,256]{3,2,1,0} parameter(0)\n"
     " ROOT d = bf16[1,4,256]{2,1,0} dot(b, a), lhs_contracting_dims={2,0}, rhs_contracting_dims={1,2}\n}\n",
     1},
    /* 'abcd,cbx->adx', x = 1: the result bf16[4,256,1] is the reduce's bf16[4,256] bitcast */
    {"abcd,cbx->adx",
     "HloModule m\nENTRY e {\n a = bf16[4,32,64,256]{3,2,1,0} parameter(0)\n b = bf16[64,32,1]{2,1,0} parameter(1)\n"
     " ROOT d = bf16[4,256,1]{2,1,0} dot(a, b), lhs_contracting_dims={1,2}, rhs_contracting_dims={1,0}\n}\n",
     1},
    /* 'acbd,cbde->ead', e = 1: the dot's [512,1,8], its sum's [8,512] transposed into it, and
     * transposed to the result's [1,8,512]: the reduce's own result, one fusion */
    {"acbd,cbde->ead",
     "HloModule m\nENTRY e {\n b = bf16[12,16,512,1]{3,2,1,0} parameter(1)\n a = bf16[8,12,16,512]{3,2,1,0} parameter(0)\n"
     " d = bf16[512,1,8]{2,1,0} dot(b, a), lhs_batch_dims={2}, lhs_contracting_dims={1,0}, rhs_batch_dims={3}, "
     "rhs_contracting_dims={2,1}\n ROOT t = bf16[1,8,512]{1,0,2} transpose(d), dimensions={1,2,0}\n}\n",
     1},
    /* 'dacb,cbae->ead', e = 1: the result bf16[1,12,8] pads alike row-major and with 12 in the
     * lanes as the reduce writes it; the compiler gives it the latter, one fusion */
    {"dacb,cbae->ead",
     "HloModule m\nENTRY e {\n b = bf16[16,256,12,1]{3,2,1,0} parameter(1)\n a = bf16[8,12,16,256]{3,2,1,0} parameter(0)\n"
     " d = bf16[12,1,8]{2,1,0} dot(b, a), lhs_batch_dims={2}, lhs_contracting_dims={1,0}, rhs_batch_dims={1}, "
     "rhs_contracting_dims={3,2}\n ROOT t = bf16[1,12,8]{2,1,0} reshape(d)\n}\n",
     1},
};

/* The program as written and as compiled, run by the reference interpreter on the same small
 * exact inputs: bit-identical results. */
static int run_both(const char *name, const char *src) {
  tpu_module *m0, *m1;
  if (!parse_and_compile(name, src, &m0, &m1)) return 0;
  tpu_diag d;
  tpu_tensor x[2], r0, r1;
  int ok = 1;
  for (int k = 0; k < 2; k++) {
    const tpu_shape *s = &m0->entry->params[k]->shape;
    CHECK(tpu_tensor_alloc(&x[k], s->dtype, s->rank, s->dims, &d) == TPU_OK);
    for (int64_t i = 0; i < tpu_shape_numel(s); i++) tpu_tensor_set_f64(&x[k], i, (double)((i * (k + 3)) % 11 - 5) * 0.25);
  }
  memset(&r0, 0, sizeof r0);
  memset(&r1, 0, sizeof r1);
  CHECK(tpu_ref_run(m0, x, 2, &r0, &d) == TPU_OK);
  CHECK(tpu_ref_run(m1, x, 2, &r1, &d) == TPU_OK);
  ok = same_bits(&r0, &r1);
  CHECK(ok);
  for (int k = 0; k < 2; k++) tpu_tensor_free(&x[k]);
  tpu_tensor_free(&r0);
  tpu_tensor_free(&r1);
  tpu_module_free(m0);
  tpu_module_free(m1);
  return ok;
}

/* The kernels of src's compiled entry: its instructions but parameters, constants, tuples and
 * the reshapes and bitcasts that move no bytes (the result's bitcast). */
static int kernels_of(const char *src) {
  tpu_module *m = compile_src(src);
  int n = 0;
  for (int i = 0; m && i < m->entry->ninstrs; i++) {
    const tpu_instr *in = m->entry->instrs[i];
    n += in->op != TPU_OP_PARAMETER && in->op != TPU_OP_CONSTANT && in->op != TPU_OP_TUPLE &&
         in->op != TPU_OP_GET_TUPLE_ELEMENT && in->op != TPU_OP_BITCAST &&
         !(in->op == TPU_OP_RESHAPE && tpu__reshape_moves_no_bytes(&g_chip, in));
  }
  tpu_module_free(m);
  return n;
}

static void test_einsum_kernels(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int k = kernels_of(cases[i].src);
    printf("%-16s %d kernels (want %d)\n", cases[i].spec, k, cases[i].kernels);
    CHECK_EQ_INT(k, cases[i].kernels);
    run_both(cases[i].spec, cases[i].src);
  }
}

int main(void) {
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &g_chip, &d) == TPU_OK);
  test_einsum_kernels();
  CHECK_DONE();
}
