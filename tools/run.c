/* tpusim run (being built). */
#include <stdio.h>

#include "cli.h"

int tpu_cli_run(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "error: 'run' is being built\n");
  return 2;
}
