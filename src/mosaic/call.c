/* A tpu_custom_call in a running program: the kernel's values, its tpu.matmul through the
 * backend's own dot kernels (the TPU back end: the MXU's numerics; the reference: its dot). */
#include <string.h>

#include "mosaic/mosaic.h"
#include "ref/ref_int.h"

typedef struct {
  tpu_interp *ip;
  const tpu_instr *call;
} glue;

/* out[nb][M][N] = A[nb][M][K] x W[nb][K][N] as an HLO dot with batch dimension 0: the same
 * kernels (and so the same accumulation order) an XLA dot of these operands runs on. */
static tpu_status matmul(void *user, tpu_dtype dt, int passes, const float *A, const float *W, float *out, int64_t nb,
                         int64_t M, int64_t K, int64_t N, tpu_diag *d) {
  const glue *g = user;
  tpu_dtype odt = dt == TPU_BF16 || dt == TPU_F16 ? dt : TPU_F32;
  tpu_tensor l, r, o;
  memset(&o, 0, sizeof o);
  int64_t ld[3] = {nb, M, K}, rd[3] = {nb, K, N};
  TPU_TRY(tpu_tensor_alloc_uninit(&l, odt, 3, ld, d));
  tpu_status st = tpu_tensor_alloc_uninit(&r, odt, 3, rd, d);
  if (st != TPU_OK) {
    tpu_tensor_free(&l);
    return st;
  }
  for (int64_t i = 0; i < nb * M * K; i++) tpu_tensor_set_f64(&l, i, A[i]);
  for (int64_t i = 0; i < nb * K * N; i++) tpu_tensor_set_f64(&r, i, W[i]);
  tpu_instr lhs, rhs, dot;
  memset(&lhs, 0, sizeof lhs);
  memset(&rhs, 0, sizeof rhs);
  memset(&dot, 0, sizeof dot);
  lhs.op = rhs.op = TPU_OP_PARAMETER;
  lhs.shape.dtype = rhs.shape.dtype = odt;
  lhs.shape.rank = rhs.shape.rank = 3;
  memcpy(lhs.shape.dims, ld, sizeof ld);
  memcpy(rhs.shape.dims, rd, sizeof rd);
  lhs.name = "lhs";
  rhs.name = "rhs";
  tpu_instr *ops[2] = {&lhs, &rhs};
  int64_t b0 = 0, lc = 2, rc = 1;
  dot.op = TPU_OP_DOT;
  dot.name = g->call->name;
  dot.loc = g->call->loc;
  dot.parent = g->call->parent;
  dot.operands = ops;
  dot.noperands = 2;
  dot.shape.dtype = TPU_F32;
  dot.shape.rank = 3;
  dot.shape.dims[0] = nb;
  dot.shape.dims[1] = M;
  dot.shape.dims[2] = N;
  dot.dot.lhs_batch = (tpu_i64s){&b0, 1};
  dot.dot.rhs_batch = (tpu_i64s){&b0, 1};
  dot.dot.lhs_contract = (tpu_i64s){&lc, 1};
  dot.dot.rhs_contract = (tpu_i64s){&rc, 1};
  tpu_prec_cfg p = passes >= 6 ? TPU_PREC_CFG_HIGHEST : passes >= 3 ? TPU_PREC_CFG_HIGH : TPU_PREC_CFG_DEFAULT;
  dot.precision[0] = dot.precision[1] = p;
  const tpu_ref_opts *ro = tpu__ref_opts(g->ip);
  int handled = 0;
  if (ro->dot_conv) st = ro->dot_conv(ro->user, &dot, &l, &r, &o, &handled, d);
  if (st == TPU_OK && !handled) {
    const tpu_tensor *args[2] = {&l, &r};
    st = tpu__ref_dot_conv(g->ip, &dot, args, &o, d);
  }
  if (st == TPU_OK)
    for (int64_t i = 0; i < nb * M * N; i++) out[i] = (float)tpu_tensor_get_f64(&o, i);
  tpu_tensor_free(&l);
  tpu_tensor_free(&r);
  tpu_tensor_free(&o);
  return st;
}

tpu_status tpu__ref_mosaic(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                           tpu_diag *d) {
  tpu_mosaic *k;
  TPU_TRY(tpu_mosaic_of_instr(in, &k, d));
  glue g = {ip, in};
  tpu_mosaic_opts o;
  memset(&o, 0, sizeof o);
  o.matmul = matmul;
  o.user = &g;
  tpu_status st = tpu_mosaic_run(k, in, args, in->noperands, &o, out, d);
  tpu_mosaic_free(k);
  return st;
}
