/* tpusim systolic (being built). */
#include <stdio.h>

#include "cli.h"

int tpu_cli_systolic(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "error: 'systolic' is being built\n");
  return 2;
}
