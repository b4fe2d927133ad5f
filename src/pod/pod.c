/* The pod executor's values: one thread per device and a barrier per collective.
 *
 * Every device posts its operands for a collective and waits until all devices have posted
 * (the exchange); each then reads its group's operands and computes its own result; a
 * second barrier (the release) keeps every operand alive until all devices have read. Both
 * barriers check that every device reached the same instruction, so a program whose devices
 * diverge (a collective under a device-dependent branch or trip count) fails with both
 * places named instead of hanging; a failing device stops the others the same way.
 *
 * Several processes (MPI ranks) each run a block of the devices: when a process's devices
 * have all posted, the last to arrive trades the operands with the other processes through
 * the transport, which also agrees on what every process reached, so a failure or a
 * divergence in one process stops all of them with the same error. */
#include "pod/pod.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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
  int64_t n;                     /* devices of the module */
  int64_t first, count;          /* the ones this process runs */
  int64_t arrived, exited;       /* of this process's devices: at the current barrier; returned */
  uint64_t generation;           /* bumps when a barrier opens */
  const tpu_instr **at;          /* at[dev]: the instruction each waiting device posted */
  const tpu_tensor *const **ops; /* ops[dev]: its operands */
  int aborted;
  int64_t origin;                /* the device whose failure stopped the pod (-1: none yet) */
  tpu_diag why;                  /* its diagnostic */
  int remote_held;               /* the transport holds other processes' operands */
  int trade_failed;              /* an exchange failed: every process knows, none exchanges again */
  const tpu_pod_transport *tr;
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

/* The barrier's check once this process's devices are in (mu held): the same instruction. */
static void check_same_locked(pod *p, int64_t me, const char *phase) {
  const tpu_instr *first = p->at[p->first];
  for (int64_t k = p->first + 1; k < p->first + p->count; k++)
    if (p->at[k] != first) {
      tpu_diag d;
      memset(&d, 0, sizeof d);
      TPU_FAIL(&d, TPU_ERR_RUNTIME, p->at[k]->loc,
               "devices reached different collectives (%s): device %lld is at %s '%s' (line %d), device %lld at %s '%s'",
               phase, (long long)p->first, tpu_op_name(first->op), tpu_instr_user_name(first), first->loc.line,
               (long long)k, tpu_op_name(p->at[k]->op), tpu_instr_user_name(p->at[k]));
      abort_locked(p, me, &d);
      return;
    }
}

/* The exchange with the other processes (mu held, every local device in). */
static void trade_locked(pod *p, int64_t me, const tpu_instr *in) {
  tpu_diag d;
  memset(&d, 0, sizeof d);
  tpu_status st = p->tr->exchange(p->tr->user, TPU_POD_KEY(in), in, 0, NULL, p->ops, in->noperands, &d);
  if (st != TPU_OK) {
    p->trade_failed = 1;
    abort_locked(p, -1, &d);
  } else {
    p->remote_held = 1;
  }
  (void)me;
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
  if (++p->arrived + p->exited == p->count) {
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
      if (p->tr && !p->aborted) {
        if (ops) trade_locked(p, dv->dev, in);
        else if (p->remote_held) { /* everyone has read the other processes' operands */
          p->tr->release(p->tr->user);
          p->remote_held = 0;
        }
      }
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
    if (p->arrived > 0 && p->arrived + p->exited == p->count) {
      /* Everyone else waits at a collective this device will never reach. */
      const tpu_instr *w = NULL;
      for (int64_t k = p->first; k < p->first + p->count && !w; k++) w = p->at[k];
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

/* "device N: msg" into d from the pod's first failure. */
static tpu_status report(const pod *p, tpu_diag *d) {
  *d = p->why;
  if (p->origin >= 0) {
    char pre[32];
    int np = snprintf(pre, sizeof pre, "device %lld: ", (long long)p->origin);
    size_t keep = sizeof d->msg - (size_t)np - 1;
    memmove(d->msg + np, p->why.msg, keep);
    memcpy(d->msg, pre, (size_t)np);
    d->msg[sizeof d->msg - 1] = 0;
  }
  return p->why.status != TPU_OK ? p->why.status : TPU_ERR_RUNTIME;
}

tpu_status tpu_pod_check_local(const tpu_module *m, int64_t count, tpu_diag *d) {
  if (count <= TPU_POD_MAX_LOCAL_DEVICES) return TPU_OK;
  tpu_loc at = m->entry ? m->entry->loc : tpu_noloc();
  int64_t largest = 0;
  for (int i = 0; i < m->nattrs; i++) /* the larger of replica_count and num_partitions */
    if (!strcmp(m->attrs[i].name, "replica_count") || !strcmp(m->attrs[i].name, "num_partitions")) {
      long long v = strtoll(m->attrs[i].value, NULL, 10);
      if (v > largest) {
        largest = v;
        at = m->attrs[i].loc;
      }
    }
  return TPU_FAIL(d, TPU_ERR_LIMIT, at,
                  "the values of %lld devices in one process: at most %d (one thread each); spread them over MPI "
                  "ranks (mpirun -n K, docs/pod.md) or time the program alone (--mode timing)",
                  (long long)count, TPU_POD_MAX_LOCAL_DEVICES);
}

tpu_status tpu_pod_run_dist(const tpu_module *m, const tpu_pod_transport *tr, tpu_pod_device_fn fn, void *user,
                            tpu_tensor *const *args, int nargs, tpu_tensor *outs, tpu_diag *d) {
  int64_t replicas, partitions;
  tpu_module_device_grid(m, &replicas, &partitions);
  int64_t n = replicas * partitions;
  pod p;
  memset(&p, 0, sizeof p);
  p.n = n;
  p.first = tr ? tr->first : 0;
  p.count = tr ? tr->count : n;
  TPU_TRY(tpu_pod_check_local(m, p.count, d));
  p.tr = tr;
  p.origin = -1;
  p.fn = fn;
  p.user = user;
  p.nargs = nargs;
  if (p.first < 0 || p.count < 0 || p.first + p.count > n)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "devices %lld..%lld are not in the module's %lld", (long long)p.first,
                    (long long)(p.first + p.count - 1), (long long)n);
  p.at = tpu_calloc((size_t)n, sizeof *p.at);
  p.ops = tpu_calloc((size_t)n, sizeof *p.ops);
  device *devs = tpu_calloc((size_t)(p.count ? p.count : 1), sizeof *devs);
  pthread_t *th = tpu_calloc((size_t)(p.count ? p.count : 1), sizeof *th);
  if (!p.at || !p.ops || !devs || !th) {
    tpu_free(p.at);
    tpu_free(p.ops);
    tpu_free(devs);
    tpu_free(th);
    return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory starting %lld devices", (long long)n);
  }
  pthread_mutex_init(&p.mu, NULL);
  pthread_cond_init(&p.cv, NULL);
  for (int64_t k = 0; k < n; k++) memset(&outs[k], 0, sizeof outs[k]);
  for (int64_t i = 0; i < p.count; i++) {
    device *dv = &devs[i];
    int64_t k = p.first + i;
    dv->p = &p;
    dv->dev = k;
    dv->comm = (tpu_ref_comm){replicas, partitions, k, exchange, release, dv, p.first, p.count};
    dv->args = args[k];
    dv->out = &outs[k];
  }
  int64_t started = 0;
  for (; started < p.count; started++) {
    if (pthread_create(&th[started], NULL, device_main, &devs[started]) != 0) {
      tpu_diag e;
      memset(&e, 0, sizeof e);
      TPU_FAIL(&e, TPU_ERR_NOMEM, tpu_noloc(), "cannot start a thread for device %lld of %lld",
               (long long)(p.first + started), (long long)n);
      pthread_mutex_lock(&p.mu);
      abort_locked(&p, p.first + started, &e);
      pthread_mutex_unlock(&p.mu);
      break;
    }
  }
  for (int64_t k = 0; k < started; k++) pthread_join(th[k], NULL);
  tpu_status st = TPU_OK;
  if (tr) {
    /* The end, agreed with the other processes (which may have failed or be waiting). */
    if (p.remote_held) tr->release(tr->user);
    tpu_diag e;
    memset(&e, 0, sizeof e);
    tpu_diag mine = p.why;
    if (p.aborted) report(&p, &mine);
    if (p.trade_failed) {
      /* every process saw the failed exchange: nothing more to agree on */
    } else if (tr->exchange(tr->user, TPU_POD_KEY_END, NULL, p.aborted, p.aborted ? &mine : NULL, p.ops, 0, &e) != TPU_OK) {
      if (!p.aborted) {
        p.aborted = 1;
        p.origin = -1;
        p.why = e;
      } else {
        p.origin = -1;
        p.why = mine;
      }
    } else {
      tr->release(tr->user);
    }
    if (!p.aborted && tr->gather(tr->user, outs, &e) != TPU_OK) {
      p.aborted = 1;
      p.origin = -1;
      p.why = e;
    }
  }
  if (p.aborted) {
    st = report(&p, d);
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

tpu_status tpu_pod_run(const tpu_module *m, tpu_pod_device_fn fn, void *user, tpu_tensor *const *args, int nargs,
                       tpu_tensor *outs, tpu_diag *d) {
  return tpu_pod_run_dist(m, NULL, fn, user, args, nargs, outs, d);
}
