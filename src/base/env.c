/* The rules' A/B switches from the environment (env.h). */
#include "base/env.h"

#include <stdlib.h>
#include <string.h>

int tpu_env_flag(const char *name) {
  const char *e = getenv(name);
  return e && *e && strcmp(e, "0") != 0;
}
