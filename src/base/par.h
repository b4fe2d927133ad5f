/* Threads for the compute kernels: how many, and a parallel loop over independent ranges. */
#ifndef TPU_BASE_PAR_H
#define TPU_BASE_PAR_H

#include <pthread.h>
#include <stdint.h>

enum { TPU_MAX_THREADS = 64 };

/* The default thread count: $TPUSIM_THREADS when it is a number >= 1, else the machine's
 * online CPUs; at most TPU_MAX_THREADS. Read once. Kernels split work so that every output
 * element is computed the same way whatever the count: results never depend on it. */
int tpu_threads(void);

/* fn(ctx, task, lo, hi) for task i of t over [0, units) cut into t contiguous ranges
 * (lo = units*i/t); the caller runs task 0 and any task whose thread cannot start. fn must
 * not allocate through the tpu allocation hook (which is not thread-safe): allocate per
 * task beforehand. */
typedef void (*tpu_range_fn)(void *ctx, int task, int64_t lo, int64_t hi);
void tpu_par_run(tpu_range_fn fn, void *ctx, int64_t units, int t);

/* Task i's range of t over [0, units). */
static inline void tpu_task_range(int64_t units, int t, int i, int64_t *lo, int64_t *hi) {
  *lo = units * i / t;
  *hi = units * (i + 1) / t;
}

/* Threads for `units` independent pieces of `work` (any unit, e.g. multiply-adds or
 * elements) when `min_work` is the least worth a thread: 1..tpu_threads(). */
int tpu_par_threads(int64_t units, double work, double min_work);

/* *v read under lock m: the counters tests read (searches, parses, checks) while other
 * threads may count under the same lock. */
int64_t tpu_locked_read(pthread_mutex_t *m, const int64_t *v);

#endif
