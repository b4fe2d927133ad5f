/* Threads for the compute kernels: the thread count ($TPUSIM_THREADS or the CPUs) and a parallel range loop. */
#include "base/par.h"

#include <pthread.h>
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
  for (int i = 1; i < t; i++) started[i] = pthread_create(&tids[i], NULL, range_entry, &tasks[i]) == 0;
  fn(ctx, 0, tasks[0].lo, tasks[0].hi);
  for (int i = 1; i < t; i++) {
    if (started[i])
      pthread_join(tids[i], NULL);
    else
      fn(ctx, i, tasks[i].lo, tasks[i].hi);
  }
}
