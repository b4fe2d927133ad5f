/* Collective Pallas kernels: the devices of a pod each run the kernel on their own thread,
 * sharing semaphores and writing each other's buffers through remote DMAs.
 *
 * Every device runs the same kernel on operands of the same shapes, so its buffers are
 * allocated in the same order: a remote DMA or signal finds the target's buffer by its
 * place in that order (and checks its size). DMAs copy at their start, under the pod's
 * lock, so a wait that the kernel's semaphores order after a DMA sees its data, as on a TPU;
 * a kernel whose waits do not order its accesses races on a TPU too. A wait with every other
 * device waiting or done can never be met: the kernel would hang, and the run fails. */
#include <pthread.h>
#include <string.h>

#include "mosaic/mosaic_int.h"

struct tpu_mo_pod {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t n;             /* devices */
  int64_t joined, done;  /* runs that reached the first step / finished the last */
  int64_t blocked;       /* runs waiting on a semaphore since the last change */
  uint64_t epoch;        /* bumps at each semaphore change and each run done */
  mo_ctx **run;          /* run[dev] once joined */
  int failed;
  tpu_diag why;          /* the first failure */
};

tpu_mo_pod *tpu_mo_pod_new(int64_t ndevices) {
  if (ndevices < 1) return NULL;
  tpu_mo_pod *p = tpu_calloc(1, sizeof *p);
  if (!p) return NULL;
  p->run = tpu_calloc((size_t)ndevices, sizeof *p->run);
  if (!p->run) {
    tpu_free(p);
    return NULL;
  }
  p->n = ndevices;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  return p;
}

void tpu_mo_pod_free(tpu_mo_pod *p) {
  if (!p) return;
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  tpu_free(p->run);
  tpu_free(p);
}

static int op_collective(const tpu_mo_op *op) {
  if (op->code == TPU_MO_SEM_BARRIER) return 1;
  int64_t seg[8];
  int n = tpu_mo_attr_ints(op, "operandSegmentSizes", seg, 8);
  if (op->code == TPU_MO_ENQUEUE_DMA && n > 4 && seg[4] > 0) return 1;
  if (op->code == TPU_MO_SEM_SIGNAL && n > 2 && seg[2] > 0) return 1;
  for (int r = 0; r < op->nreg; r++)
    for (int i = 0; i < op->reg[r].nops; i++)
      if (op_collective(op->reg[r].ops[i])) return 1;
  return 0;
}

int tpu_mosaic_is_collective(const tpu_mosaic *k) {
  for (int i = 0; i < k->nfuncs; i++)
    if (op_collective(k->funcs[i])) return 1;
  return 0;
}

void tpu_mo_pod_abort(tpu_mo_pod *p, const tpu_diag *why) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  if (!p->failed) {
    p->failed = 1;
    p->why = *why;
  }
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

void tpu__mo_lock(mo_ctx *c) {
  if (c->pod) pthread_mutex_lock(&c->pod->mu);
}

void tpu__mo_unlock(mo_ctx *c) {
  if (c->pod) pthread_mutex_unlock(&c->pod->mu);
}

/* (lock held) The pod's first failure, as this run's. */
static tpu_status stopped(mo_ctx *c) {
  *c->d = c->pod->why;
  return c->pod->why.status != TPU_OK ? c->pod->why.status : TPU_ERR_RUNTIME;
}

/* (lock held) This run fails with c->d; the others stop. */
static void fail_locked(mo_ctx *c) {
  tpu_mo_pod *p = c->pod;
  if (!p->failed) {
    p->failed = 1;
    p->why = *c->d;
  }
  pthread_cond_broadcast(&p->cv);
}

void tpu__mo_pod_fail(mo_ctx *c) {
  if (!c->pod) return;
  tpu__mo_lock(c);
  fail_locked(c);
  tpu__mo_unlock(c);
}

tpu_status tpu__mo_pod_join(mo_ctx *c) {
  tpu_mo_pod *p = c->pod;
  int64_t dev = c->o->device_id;
  if (!p) return TPU_OK;
  if (dev < 0 || dev >= p->n) return tpu__mo_fail(c, NULL, TPU_ERR_INVALID, "device %lld of a pod of %lld", (long long)dev, (long long)p->n);
  tpu_status st = TPU_OK;
  tpu__mo_lock(c);
  if (p->run[dev]) {
    st = tpu__mo_fail(c, NULL, TPU_ERR_INVALID, "device %lld runs the kernel twice", (long long)dev);
  } else {
    p->run[dev] = c;
    p->joined++;
    pthread_cond_broadcast(&p->cv);
    while (p->joined < p->n && !p->failed) pthread_cond_wait(&p->cv, &p->mu);
    if (p->failed) st = stopped(c);
  }
  tpu__mo_unlock(c);
  return st;
}

/* (lock held) Every run waits or is done: nothing can signal any more. */
static int hung(const tpu_mo_pod *p) { return p->done < p->n && p->blocked + p->done >= p->n; }

tpu_status tpu__mo_pod_finish(mo_ctx *c) {
  tpu_mo_pod *p = c->pod;
  if (!p) return TPU_OK;
  tpu_status st = TPU_OK;
  tpu__mo_lock(c);
  p->done++;
  if (hung(p)) {
    st = tpu__mo_fail(c, NULL, TPU_ERR_RUNTIME,
                      "device %lld finished while every other device still waits on a semaphore: the kernel would hang",
                      (long long)c->o->device_id);
    fail_locked(c);
  } else { /* the waiters count themselves again: with this run done, the last of them finds a hang */
    p->epoch++;
    p->blocked = 0;
  }
  pthread_cond_broadcast(&p->cv);
  while (st == TPU_OK && p->done < p->n && !p->failed) pthread_cond_wait(&p->cv, &p->mu);
  if (st == TPU_OK && p->failed) st = stopped(c);
  tpu__mo_unlock(c);
  return st;
}

void tpu__mo_sem_changed(mo_ctx *c) {
  tpu_mo_pod *p = c->pod;
  if (!p) return;
  p->epoch++;
  p->blocked = 0; /* every waiter wakes and counts itself again if it still waits */
  pthread_cond_broadcast(&p->cv);
}

tpu_status tpu__mo_sem_take(mo_ctx *c, const tpu_mo_op *op, double *cell, double amt) {
  tpu_mo_pod *p = c->pod;
  if (*cell >= amt) {
    *cell -= amt;
    return TPU_OK;
  }
  if (c->count && c->collective) { /* timing one device: the others signal the rest */
    *cell = 0;
    return TPU_OK;
  }
  if (!p) {
    if (op->code == TPU_MO_WAIT_DMA)
      return tpu__mo_fail(c, op, TPU_ERR_RUNTIME, "waits for a DMA that was never started: the kernel would hang");
    return tpu__mo_fail(c, op, TPU_ERR_RUNTIME, "waits for %g on a semaphore at %g: the kernel would hang", amt, *cell);
  }
  while (*cell < amt) {
    if (p->failed) return stopped(c);
    p->blocked++;
    if (hung(p)) {
      tpu_status st = tpu__mo_fail(c, op, TPU_ERR_RUNTIME,
                                   "device %lld waits for %g on a semaphore at %g while every other device waits or is "
                                   "done: the kernel would hang",
                                   (long long)c->o->device_id, amt, *cell);
      fail_locked(c);
      return st;
    }
    uint64_t e = p->epoch;
    while (p->epoch == e && !p->failed) pthread_cond_wait(&p->cv, &p->mu);
  }
  *cell -= amt;
  return TPU_OK;
}

tpu_status tpu__mo_remote(mo_ctx *c, const tpu_mo_op *op, int64_t dev, const mo_val *v, mo_val *out) {
  tpu_mo_pod *p = c->pod;
  if (!p)
    return tpu__mo_fail(c, op, TPU_ERR_UNSUPPORTED,
                        "a DMA or signal to device %lld: a kernel that talks to other devices runs on a pod (a module "
                        "of several devices: num_partitions / shard_map, docs/pallas.md)",
                        (long long)dev);
  if (p->failed) return stopped(c);
  if (dev < 0 || dev >= p->n)
    return tpu__mo_fail(c, op, TPU_ERR_RUNTIME, "a DMA or signal to device %lld of a pod of %lld", (long long)dev,
                        (long long)p->n);
  const mo_ctx *r = p->run[dev];
  if (!r) return tpu__mo_fail(c, op, TPU_ERR_RUNTIME, "device %lld has not started the kernel", (long long)dev);
  *out = *v;
  out->v = NULL;
  if (v->base == c->barrier) {
    out->base = r->barrier;
    return TPU_OK;
  }
  for (int i = 0; i < c->nowned; i++) {
    if (c->owned[i] != v->base) continue;
    if (i >= r->nowned || r->ownn[i] != c->ownn[i])
      return tpu__mo_fail(c, op, TPU_ERR_RUNTIME,
                          "device %lld has no buffer of this one's (its run allocated other scoped buffers)",
                          (long long)dev);
    out->base = r->owned[i];
    return TPU_OK;
  }
  return tpu__mo_fail(c, op, TPU_ERR_UNSUPPORTED, "a DMA to another device from a buffer this device does not own");
}

void tpu__mo_ici_note(mo_ctx *c, int64_t dev, double bytes, int dmas) {
  mo_work *w = &c->work;
  if (!dmas) {
    w->ici_signals++;
    return;
  }
  int t = 0;
  while (t < w->nici && w->ici_dev[t] != dev) t++;
  if (t == w->nici) {
    if (w->nici < TPU_MO_ICI_TARGETS) w->ici_dev[w->nici++] = dev;
    else t = TPU_MO_ICI_TARGETS - 1;
  }
  w->ici_bytes[t] += bytes;
  w->ici_dmas[t] += dmas;
}
