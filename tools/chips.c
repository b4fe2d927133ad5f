/* tpusim chips (being built). */
#include <stdio.h>

#include "cli.h"

int tpu_cli_chips(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "error: 'chips' is being built\n");
  return 2;
}
