/* Timeline helpers: unit names and freeing. */
#include "chip/timeline.h"

#include <string.h>

#include "base/alloc.h"

static const char *const k_unit_names[] = {
#define X(e, name, desc) name,
    TPU_UNIT_LIST(X)
#undef X
};
_Static_assert(sizeof k_unit_names / sizeof k_unit_names[0] == TPU_UNIT_COUNT, "unit table");

const char *tpu_unit_name(tpu_unit u) { return (unsigned)u < TPU_UNIT_COUNT ? k_unit_names[u] : "?"; }

void tpu_timeline_free(tpu_timeline *t) {
  if (!t) return;
  tpu_free(t->ops);
  tpu_free(t->events);
  memset(t, 0, sizeof *t);
}
