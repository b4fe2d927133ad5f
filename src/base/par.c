/* Threads for the compute kernels: the thread count ($TPUSIM_THREADS or the CPUs) and a parallel range loop. */
#include "base/par.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_threads = 1;

static void init_threads(void) {
  const char *e = getenv("TPUSIM_THREADS");
  long n = 0;
  if (e && *e) {
    char *end;
    n = strtol(e, &end, 10);
    if (*end) n = 0;
  }
  if (n < 1) n = sysconf(_SC_NPROCESSORS_ONLN);
  g_threads = n < 1 ? 1 : n > TPU_MAX_THREADS ? TPU_MAX_THREADS : (int)n;
}

int tpu_threads(void) {
  pthread_once(&g_once, init_threads);
  return g_threads;
}

int tpu_par_threads(int64_t units, double work, double min_work) {
  int n = tpu_threads();
  if (n > units) n = (int)units;
  if (work < min_work * 2 || n < 1) return 1;
  if (work / n < min_work) n = (int)(work / min_work);
  return n < 1 ? 1 : n;
}

typedef struct range_task {
  tpu_range_fn fn;
  void *ctx;
  int task;
  int64_t lo, hi;
} range_task;

static void *range_entry(void *p) {
  range_task *t = p;
  t->fn(t->ctx, t->task, t->lo, t->hi);
  return NULL;
}

/* ---- Workers kept between calls ----
 * A product of a few hundred microseconds used to pay for starting and joining its threads
 * every call. Workers now wait for the next call instead: a call posts its tasks, the
 * workers and the caller take them one at a time (the caller takes what the workers have not
 * reached, so a busy machine does not make it wait for a worker to be scheduled), and the
 * caller returns when every task is done. Task i is always task i (its own range and its
 * own slot in the caller's context), whoever runs it, so results never depend on it. One
 * call at a time uses the workers; a call made meanwhile (another thread, or a task's own
 * nested call) starts and joins its own threads as before. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  int nworkers;
  range_task *tasks; /* the current call's (on its stack) */
  int ntasks, next;  /* tasks [next, ntasks) are not taken yet */
  int pending;       /* tasks taken by workers and not finished */
  int atfork;
} g_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, NULL, 0, 0, 0, 0};
static pthread_mutex_t g_pool_busy = PTHREAD_MUTEX_INITIALIZER;

static void *pool_worker(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_pool.mu);
  for (;;) {
    while (g_pool.next >= g_pool.ntasks) pthread_cond_wait(&g_pool.work, &g_pool.mu);
    range_task *t = &g_pool.tasks[g_pool.next++];
    g_pool.pending++;
    pthread_mutex_unlock(&g_pool.mu);
    t->fn(t->ctx, t->task, t->lo, t->hi);
    pthread_mutex_lock(&g_pool.mu);
    if (--g_pool.pending == 0 && g_pool.next >= g_pool.ntasks) pthread_cond_signal(&g_pool.done);
  }
  return NULL;
}

/* In a child of fork() only the forking thread exists: start with no workers. */
static void pool_after_fork(void) {
  pthread_mutex_init(&g_pool.mu, NULL);
  pthread_cond_init(&g_pool.work, NULL);
  pthread_cond_init(&g_pool.done, NULL);
  pthread_mutex_init(&g_pool_busy, NULL);
  g_pool.nworkers = g_pool.ntasks = g_pool.next = g_pool.pending = 0;
  g_pool.tasks = NULL;
}

/* Starts workers up to n (fewer if threads cannot start); called with g_pool_busy held. */
static void pool_grow(int n) {
  if (!g_pool.atfork) g_pool.atfork = pthread_atfork(NULL, NULL, pool_after_fork) == 0 ? 1 : -1;
  if (g_pool.atfork < 0) return;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old); /* workers take no signals */
  while (g_pool.nworkers < n) {
    pthread_t tid;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) break;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&tid, &attr, pool_worker, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) break;
    g_pool.nworkers++;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void run_on_pool(range_task *tasks, int t) {
  pool_grow(t - 1);
  pthread_mutex_lock(&g_pool.mu);
  g_pool.tasks = tasks;
  g_pool.ntasks = t;
  g_pool.next = 1; /* task 0 is the caller's */
  pthread_cond_broadcast(&g_pool.work);
  pthread_mutex_unlock(&g_pool.mu);
  tasks[0].fn(tasks[0].ctx, 0, tasks[0].lo, tasks[0].hi);
  pthread_mutex_lock(&g_pool.mu);
  while (g_pool.next < g_pool.ntasks) { /* tasks no worker has taken yet */
    range_task *r = &tasks[g_pool.next++];
    pthread_mutex_unlock(&g_pool.mu);
    r->fn(r->ctx, r->task, r->lo, r->hi);
    pthread_mutex_lock(&g_pool.mu);
  }
  while (g_pool.pending > 0) pthread_cond_wait(&g_pool.done, &g_pool.mu);
  g_pool.tasks = NULL;
  g_pool.ntasks = g_pool.next = 0;
  pthread_mutex_unlock(&g_pool.mu);
}

void tpu_par_run(tpu_range_fn fn, void *ctx, int64_t units, int t) {
  if (units <= 0) return;
  if (t > TPU_MAX_THREADS) t = TPU_MAX_THREADS;
  if (t < 1) t = 1;
  range_task tasks[TPU_MAX_THREADS];
  pthread_t tids[TPU_MAX_THREADS];
  int started[TPU_MAX_THREADS];
  for (int i = 0; i < t; i++) {
    tasks[i] = (range_task){fn, ctx, i, 0, 0};
    tpu_task_range(units, t, i, &tasks[i].lo, &tasks[i].hi);
    started[i] = 0;
  }
  if (t == 1) {
    fn(ctx, 0, tasks[0].lo, tasks[0].hi);
    return;
  }
  if (pthread_mutex_trylock(&g_pool_busy) == 0) {
    run_on_pool(tasks, t);
    pthread_mutex_unlock(&g_pool_busy);
    return;
  }
  for (int i = 1; i < t; i++) started[i] = pthread_create(&tids[i], NULL, range_entry, &tasks[i]) == 0;
  fn(ctx, 0, tasks[0].lo, tasks[0].hi);
  for (int i = 1; i < t; i++) {
    if (started[i])
      pthread_join(tids[i], NULL);
    else
      fn(ctx, i, tasks[i].lo, tasks[i].hi);
  }
}

int64_t tpu_locked_read(pthread_mutex_t *m, const int64_t *v) {
  pthread_mutex_lock(m);
  int64_t n = *v;
  pthread_mutex_unlock(m);
  return n;
}
