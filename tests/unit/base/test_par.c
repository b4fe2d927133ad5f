/* tpu_par_run: every task runs once on its own range, whoever runs it; workers are kept
 * between calls; concurrent and nested calls and a forked child still run every task. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/par.h"
#include "check.h"

enum { UNITS_MAX = 1000 };

typedef struct {
  int hits[UNITS_MAX];         /* times each unit was covered */
  int task_of[UNITS_MAX];      /* the task whose range covered it */
  long tid[TPU_MAX_THREADS];   /* the kernel thread that ran each task */
  int nested;                  /* run a nested call inside each task */
} ctx_t;

static void nested_fn(void *c, int task, int64_t lo, int64_t hi) {
  (void)task;
  int *sum = c;
  for (int64_t u = lo; u < hi; u++) __atomic_add_fetch(sum, 1, __ATOMIC_RELAXED);
}

static void cover(void *c, int task, int64_t lo, int64_t hi) {
  ctx_t *x = c;
  x->tid[task] = syscall(SYS_gettid);
  for (int64_t u = lo; u < hi; u++) x->hits[u]++, x->task_of[u] = task;
  if (x->nested) {
    int sum = 0;
    tpu_par_run(nested_fn, &sum, 10, 2);
    if (sum != 10) x->hits[lo] += 1000; /* reported as a unit covered twice */
  }
}

/* Runs units over t tasks and checks the cover: each unit once, by the task whose range
 * (units*i/t .. units*(i+1)/t) holds it. Returns the number of wrong units. */
static int run_cover(ctx_t *x, int64_t units, int t) {
  memset(x->hits, 0, sizeof x->hits);
  memset(x->tid, 0, sizeof x->tid);
  tpu_par_run(cover, x, units, t);
  int bad = 0;
  for (int i = 0; i < t && i < units; i++) {
    int64_t lo, hi;
    tpu_task_range(units, t, i, &lo, &hi);
    for (int64_t u = lo; u < hi; u++) bad += x->hits[u] != 1 || x->task_of[u] != i;
  }
  return bad;
}

static void test_cover(void) {
  static ctx_t x;
  int bad = 0;
  for (int t = 1; t <= 9; t++)
    for (int64_t units = 1; units <= UNITS_MAX; units = units * 3 + 1) bad += run_cover(&x, units, t);
  CHECK_EQ_INT(bad, 0);
}

/* The kernel threads that ran tasks 1.. over many calls are the kept workers: no more than
 * the pool holds, which is the largest t asked for so far less one (test_cover asked for 9;
 * any kept worker may take a task), where a thread started per call would be a new one every
 * call (600 here). */
static void test_workers_kept(void) {
  enum { CALLS = 200, T = 4 };
  static ctx_t x;
  long seen[CALLS * T];
  int nseen = 0, bad = 0;
  long self = syscall(SYS_gettid);
  for (int c = 0; c < CALLS; c++) {
    bad += run_cover(&x, 64, T);
    for (int i = 1; i < T; i++) {
      int known = x.tid[i] == self;
      for (int k = 0; k < nseen && !known; k++) known = seen[k] == x.tid[i];
      if (!known) seen[nseen++] = x.tid[i];
    }
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(nseen <= 8);
}

/* Two threads calling at once (one of them cannot have the workers) and tasks that make a
 * nested call of their own. */
static void *caller(void *arg) {
  ctx_t *x = arg;
  long bad = 0;
  for (int c = 0; c < 100; c++) bad += run_cover(x, 97, 3);
  return (void *)bad;
}

static void test_concurrent_and_nested(void) {
  static ctx_t a, b, n;
  pthread_t th;
  CHECK_EQ_INT(pthread_create(&th, NULL, caller, &a), 0);
  long bad_b = (long)caller(&b);
  void *ret;
  pthread_join(th, &ret);
  CHECK_EQ_INT((long)ret, 0);
  CHECK_EQ_INT(bad_b, 0);
  n.nested = 1;
  CHECK_EQ_INT(run_cover(&n, 50, 4), 0);
}

/* A forked child has none of its parent's workers: its calls still run every task. */
static void test_fork(void) {
  static ctx_t x;
  CHECK_EQ_INT(run_cover(&x, 100, 4), 0); /* workers exist in the parent */
  pid_t pid = fork();
  if (pid == 0) _exit(run_cover(&x, 100, 4) == 0 && run_cover(&x, 33, 3) == 0 ? 0 : 1);
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void) {
  test_cover();
  test_workers_kept();
  test_concurrent_and_nested();
  test_fork();
  CHECK_DONE();
}
