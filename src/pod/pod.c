/* The pod executor's values: one thread per device and a barrier per collective.
 *
 * Every device posts its operands for a collective and waits until all devices have posted
 * (the exchange); each then reads its group's operands and computes its own result; a
 * second barrier (the release) keeps every operand alive until all devices have read. Both
 * barriers check that every device reached the same instruction, so a program whose devices
 * diverge (a collective under a device-dependent branch or trip count) fails with both
 * places named instead of hanging; a failing device stops the others the same way. */
#include "pod/pod.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "ir/collective.h"

typedef struct pod pod;

typedef struct {
  pod *p;
  int64_t dev;
  tpu_ref_comm comm;
  const tpu_tensor *args;
  tpu_tensor *out;
  tpu_diag d;
  tpu_status st;
} device;

struct pod {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t n;
  int64_t arrived, exited;   /* at the current barrier; devices that have returned */
  uint64_t generation;       /* bumps when a barrier opens */
  const tpu_instr **at;      /* at[dev]: the instruction each waiting device posted */
  const tpu_tensor *const **ops; /* ops[dev]: its operands */
  int aborted;
  int64_t origin;            /* the device whose failure stopped the pod (-1: none yet) */
  tpu_diag why;              /* its diagnostic */
  tpu_pod_device_fn fn;
  void *user;
  int nargs;
};

/* Stops the pod (mu held): the first failure wins and wakes every waiting device. */
static void abort_locked(pod *p, int64_t dev, const tpu_diag *d) {
  if (!p->aborted) {
    p->aborted = 1;
    p->origin = dev;
    p->why = *d;
  }
  pthread_cond_broadcast(&p->cv);
}

static tpu_status stopped(const tpu_instr *in, tpu_diag *d) {
  return TPU_FAIL(d, TPU_ERR_RUNTIME, in->loc, "stopped: another device failed");
}

/* The barrier's check once everyone is in (mu held): the same instruction everywhere. */
static void check_same_locked(pod *p, int64_t me, const char *phase) {
  const tpu_instr *first = p->at[0];
  for (int64_t k = 1; k < p->n; k++)
    if (p->at[k] != first) {
      tpu_diag d;
      memset(&d, 0, sizeof d);
      TPU_FAIL(&d, TPU_ERR_RUNTIME, p->at[k]->loc,
               "devices reached different collectives (%s): device 0 is at %s '%s' (line %d), device %lld at %s '%s'",
               phase, tpu_op_name(first->op), tpu_instr_user_name(first), first->loc.line, (long long)k,
               tpu_op_name(p->at[k]->op), tpu_instr_user_name(p->at[k]));
      abort_locked(p, me, &d);
      return;
    }
}

/* A barrier of all devices at instruction `in`; `ops` are posted for the exchange. */
static tpu_status barrier(device *dv, const tpu_instr *in, const tpu_tensor *const *ops, const char *phase,
                          tpu_diag *d) {
  pod *p = dv->p;
  pthread_mutex_lock(&p->mu);
  if (p->aborted) {
    pthread_mutex_unlock(&p->mu);
    return stopped(in, d);
  }
  p->at[dv->dev] = in;
  if (ops) p->ops[dv->dev] = ops;
  uint64_t gen = p->generation;
  if (++p->arrived + p->exited == p->n) {
    if (p->exited) {
      tpu_diag e;
      memset(&e, 0, sizeof e);
      TPU_FAIL(&e, TPU_ERR_RUNTIME, in->loc,
               "waits at %s '%s' but %lld device(s) finished the program: the devices diverged (a "
               "collective under a branch or loop that depends on the device)",
               tpu_op_name(in->op), tpu_instr_user_name(in), (long long)p->exited);
      abort_locked(p, dv->dev, &e);
    } else {
      check_same_locked(p, dv->dev, phase);
    }
    p->arrived = 0;
    p->generation++;
    pthread_cond_broadcast(&p->cv);
  } else {
    while (p->generation == gen && !p->aborted) pthread_cond_wait(&p->cv, &p->mu);
  }
  int bad = p->aborted;
  pthread_mutex_unlock(&p->mu);
  return bad ? stopped(in, d) : TPU_OK;
}

static tpu_status exchange(void *user, const tpu_instr *in, const tpu_tensor *const *mine,
                           const tpu_tensor *const *const **all, tpu_diag *d) {
  device *dv = user;
  TPU_TRY(barrier(dv, in, mine, "exchange", d));
  *all = dv->p->ops;
  return TPU_OK;
}

static tpu_status release(void *user, const tpu_instr *in, tpu_diag *d) {
  return barrier(user, in, NULL, "release", d);
}

static void *device_main(void *arg) {
  device *dv = arg;
  pod *p = dv->p;
  memset(&dv->d, 0, sizeof dv->d);
  dv->st = p->fn(p->user, dv->dev, &dv->comm, dv->args, p->nargs, dv->out, &dv->d);
  pthread_mutex_lock(&p->mu);
  if (dv->st != TPU_OK) {
    abort_locked(p, dv->dev, &dv->d);
  } else {
    p->exited++;
    if (p->arrived > 0 && p->arrived + p->exited == p->n) {
      /* Everyone else waits at a collective this device will never reach. */
      const tpu_instr *w = NULL;
      for (int64_t k = 0; k < p->n && !w; k++) w = p->at[k];
      tpu_diag e;
      memset(&e, 0, sizeof e);
      TPU_FAIL(&e, TPU_ERR_RUNTIME, w ? w->loc : tpu_noloc(),
               "finished the program while %lld other device(s) wait at %s '%s': the devices diverged (a "
               "collective under a branch or loop that depends on the device)",
               (long long)p->arrived, w ? tpu_op_name(w->op) : "a collective", w ? tpu_instr_user_name(w) : "?");
      abort_locked(p, dv->dev, &e);
    }
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

tpu_status tpu_pod_run(const tpu_module *m, tpu_pod_device_fn fn, void *user, tpu_tensor *const *args, int nargs,
                       tpu_tensor *outs, tpu_diag *d) {
  int64_t replicas, partitions;
  tpu_module_device_grid(m, &replicas, &partitions);
  int64_t n = replicas * partitions;
  pod p;
  memset(&p, 0, sizeof p);
  p.n = n;
  p.origin = -1;
  p.fn = fn;
  p.user = user;
  p.nargs = nargs;
  p.at = tpu_calloc((size_t)n, sizeof *p.at);
  p.ops = tpu_calloc((size_t)n, sizeof *p.ops);
  device *devs = tpu_calloc((size_t)n, sizeof *devs);
  pthread_t *th = tpu_calloc((size_t)n, sizeof *th);
  if (!p.at || !p.ops || !devs || !th) {
    tpu_free(p.at);
    tpu_free(p.ops);
    tpu_free(devs);
    tpu_free(th);
    return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory starting %lld devices", (long long)n);
  }
  pthread_mutex_init(&p.mu, NULL);
  pthread_cond_init(&p.cv, NULL);
  int64_t started = 0;
  tpu_status st = TPU_OK;
  for (int64_t k = 0; k < n; k++) {
    device *dv = &devs[k];
    dv->p = &p;
    dv->dev = k;
    dv->comm = (tpu_ref_comm){replicas, partitions, k, exchange, release, dv};
    dv->args = args[k];
    dv->out = &outs[k];
    memset(&outs[k], 0, sizeof outs[k]);
  }
  for (; started < n; started++) {
    if (pthread_create(&th[started], NULL, device_main, &devs[started]) != 0) {
      tpu_diag e;
      memset(&e, 0, sizeof e);
      TPU_FAIL(&e, TPU_ERR_NOMEM, tpu_noloc(), "cannot start a thread for device %lld of %lld", (long long)started,
               (long long)n);
      pthread_mutex_lock(&p.mu);
      abort_locked(&p, started, &e);
      pthread_mutex_unlock(&p.mu);
      break;
    }
  }
  for (int64_t k = 0; k < started; k++) pthread_join(th[k], NULL);
  if (p.aborted) {
    *d = p.why;
    char pre[32];
    int np = snprintf(pre, sizeof pre, "device %lld: ", (long long)p.origin);
    size_t keep = sizeof d->msg - (size_t)np - 1;
    memmove(d->msg + np, p.why.msg, keep);
    memcpy(d->msg, pre, (size_t)np);
    d->msg[sizeof d->msg - 1] = 0;
    st = p.why.status != TPU_OK ? p.why.status : TPU_ERR_RUNTIME;
    for (int64_t k = 0; k < n; k++) tpu_tensor_free(&outs[k]);
  }
  pthread_cond_destroy(&p.cv);
  pthread_mutex_destroy(&p.mu);
  tpu_free(p.at);
  tpu_free(p.ops);
  tpu_free(devs);
  tpu_free(th);
  return st;
}
