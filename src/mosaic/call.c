/* A tpu_custom_call in a running program: the kernel's values, its tpu.matmul through the
 * backend's own dot kernels (the TPU back end: the MXU's numerics; the reference: its dot). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
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

/* A device of the pod that another process (MPI rank) owns, run here on the operands the
 * exchange brought: its remote DMAs and signals meet this process's devices' runs. */
typedef struct {
  const tpu_mosaic *k;
  const tpu_instr *in;
  const tpu_tensor *const *args;
  tpu_mosaic_opts o;
  tpu_tensor out; /* its result: that device's owner keeps its own */
  tpu_diag d;
  tpu_status st;
  int started;
} stand_in;

static void *stand_in_main(void *arg) {
  stand_in *s = arg;
  memset(&s->d, 0, sizeof s->d);
  s->st = tpu_mosaic_run(s->k, s->in, s->args, s->in->noperands, &s->o, &s->out, &s->d);
  tpu_tensor_free(&s->out);
  return NULL;
}

/* A collective kernel on a pod: every device's run in this process shares one tpu_mo_pod,
 * that of this process's first device, whose address the devices trade at the call (a
 * collective of the pod: every device reaches it) and keep until all have left it. A pod
 * split over MPI ranks runs every device's kernel in every process: the exchange gives each
 * process every other device's operands, and this process's first device runs the others'
 * kernels beside its own (each on its own thread), so every remote DMA and signal has its
 * target here; each process keeps only its own devices' results, the same values a run in
 * one process gives. */
static tpu_status run_pod(const tpu_ref_comm *comm, const tpu_mosaic *k, const tpu_instr *in,
                          const tpu_tensor *const *args, tpu_mosaic_opts *o, tpu_tensor *out, tpu_diag *d) {
  int64_t n = comm->replicas * comm->partitions, lo = comm->local_first, hi = comm->local_first + comm->local_count;
  int leader = comm->device == lo, split = lo != 0 || hi != n;
  tpu_mo_pod *mine = tpu_mo_pod_new(n);
  const tpu_tensor **ops = tpu_calloc((size_t)in->noperands + 1, sizeof *ops);
  stand_in *others = leader && split ? tpu_calloc((size_t)n, sizeof *others) : NULL;
  pthread_t *th = others ? tpu_calloc((size_t)n, sizeof *th) : NULL;
  tpu_tensor h;
  memset(&h, 0, sizeof h);
  tpu_status st = mine && ops && (!leader || !split || (others && th)) ? tpu_tensor_alloc(&h, TPU_S64, 0, NULL, d)
                                                                       : TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  const tpu_tensor *const *const *all = NULL;
  int exchanged = 0;
  if (st == TPU_OK) {
    tpu_tensor_set_i64(&h, 0, (int64_t)(intptr_t)mine);
    for (int i = 0; i < in->noperands; i++) ops[i] = args[i];
    ops[in->noperands] = &h;
    st = comm->exchange(comm->user, in, ops, &all, d);
    exchanged = st == TPU_OK;
  }
  if (st == TPU_OK) {
    o->pod = (tpu_mo_pod *)(intptr_t)tpu_tensor_get_i64(all[lo][in->noperands], 0);
    for (int64_t dev = 0; others && dev < n; dev++) {
      if (dev >= lo && dev < hi) continue;
      stand_in *s = &others[dev];
      memset(s, 0, sizeof *s);
      s->k = k;
      s->in = in;
      s->args = all[dev];
      s->o = *o;
      s->o.device_id = dev;
      s->started = pthread_create(&th[dev], NULL, stand_in_main, s) == 0;
      if (!s->started) { /* the pod would wait for it: stop every run instead */
        TPU_FAIL(&s->d, TPU_ERR_RUNTIME, in->loc, "cannot start a thread for device %lld", (long long)dev);
        s->st = s->d.status;
        tpu_mo_pod_abort(o->pod, &s->d);
      }
    }
    st = tpu_mosaic_run(k, in, args, in->noperands, o, out, d);
    for (int64_t dev = 0; others && dev < n; dev++) {
      if (dev >= lo && dev < hi) continue;
      if (others[dev].started) pthread_join(th[dev], NULL);
      if (st == TPU_OK && others[dev].st != TPU_OK) {
        tpu_tensor_free(out);
        *d = others[dev].d;
        st = others[dev].st;
      }
    }
  }
  if (exchanged) { /* every device is out of the kernel: the pod can go */
    tpu_diag e;
    memset(&e, 0, sizeof e);
    tpu_status rs = comm->release(comm->user, in, st == TPU_OK ? d : &e);
    if (st == TPU_OK && rs != TPU_OK) {
      tpu_tensor_free(out);
      st = rs;
    }
  }
  tpu_tensor_free(&h);
  tpu_free(ops);
  tpu_free(others);
  tpu_free(th);
  tpu_mo_pod_free(mine);
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
  const tpu_ref_comm *comm = tpu__ref_comm(ip);
  o.device_id = comm ? comm->device : 0;
  const tpu_ref_opts *ro = tpu__ref_opts(ip);
  int nsc = k->ndyn + k->nprefetch;
  tpu_status st = TPU_OK;
  if (ro->on_mosaic && nsc > 0 && nsc <= in->noperands) st = ro->on_mosaic(ro->user, in, args, nsc, tpu__ref_flat(ip), d);
  if (st != TPU_OK) {
    tpu_mosaic_free(k);
    return st;
  }
  if (comm && comm->replicas * comm->partitions > 1 && tpu_mosaic_is_collective(k))
    st = run_pod(comm, k, in, args, &o, out, d);
  else
    st = tpu_mosaic_run(k, in, args, in->noperands, &o, out, d);
  tpu_mosaic_free(k);
  return st;
}

const tpu_instr *tpu_mosaic_unknown_scalars(const tpu_module *m, char *name, size_t n) {
  for (int ci = 0; m && ci < m->ncomps; ci++) {
    const tpu_comp *c = m->comps[ci];
    for (int i = 0; i < c->norder; i++) {
      const tpu_instr *in = c->order[i];
      if (in->op != TPU_OP_CUSTOM_CALL || !tpu_mosaic_is_decoded(in)) continue;
      tpu_mosaic *k = NULL;
      tpu_diag d;
      if (tpu_mosaic_of_instr(in, &k, &d) != TPU_OK) continue;
      int nsc = k->ndyn + k->nprefetch, unknown = 0;
      for (int j = 0; j < nsc && j < in->noperands; j++) unknown |= in->operands[j]->op != TPU_OP_CONSTANT;
      if (unknown && name && n) snprintf(name, n, "%s", k->name ? k->name : "?");
      tpu_mosaic_free(k);
      if (unknown) return in;
    }
  }
  return NULL;
}
