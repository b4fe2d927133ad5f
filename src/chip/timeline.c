/* Timeline helpers: unit names and freeing. */
#include "chip/timeline.h"

#include <pthread.h>
#include <string.h>

#include "base/alloc.h"
#include "chip/timing.h"

static const char *const k_unit_names[] = {
#define X(e, name, desc) name,
    TPU_UNIT_LIST(X)
#undef X
};
_Static_assert(sizeof k_unit_names / sizeof k_unit_names[0] == TPU_UNIT_COUNT, "unit table");

const char *tpu_unit_name(tpu_unit u) { return (unsigned)u < TPU_UNIT_COUNT ? k_unit_names[u] : "?"; }

/* One full events array (room for TPU_TIMING_MAX_EVENTS) kept from the last timeline freed
 * with one, for the next timing run that fills one: its pages are mapped already, which spares
 * that run 32 MB of page faults (the planner times hundreds of programs that fill it). */
static pthread_mutex_t g_spare_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu_event *g_spare;

tpu_event *tpu__timeline_full_events(void) {
  pthread_mutex_lock(&g_spare_lock);
  tpu_event *e = g_spare;
  g_spare = NULL;
  pthread_mutex_unlock(&g_spare_lock);
  return e;
}

void tpu_timeline_free(tpu_timeline *t) {
  if (!t) return;
  tpu_free(t->ops);
  if (t->events && t->nevents == TPU_TIMING_MAX_EVENTS) { /* full: room for the cap (timing.c) */
    pthread_mutex_lock(&g_spare_lock);
    if (!g_spare) g_spare = t->events, t->events = NULL;
    pthread_mutex_unlock(&g_spare_lock);
  }
  tpu_free(t->events);
  memset(t, 0, sizeof *t);
}
