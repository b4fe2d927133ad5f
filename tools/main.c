/* tpusim CLI entry: dispatches to one verb. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct {
  const char *name;
  int (*fn)(int, char **);
  const char *help;
} verb;

static const verb k_verbs[] = {
    {"run", tpu_cli_run, "run an HLO program: values and a summary"},
    {"compile", tpu_cli_compile, "compile an HLO program for a TPU chip: HLO after the passes, or the program"},
    {"fmt", tpu_cli_fmt, "parse, verify and print an HLO module in canonical form"},
    {"chips", tpu_cli_chips, "list the chip presets with their peak figures"},
    {"systolic", tpu_cli_systolic, "simulate a systolic array (SCALE-Sim compatible inputs)"},
    {"plan", tpu_cli_plan, "rank chips, slices and shardings for training a model by time and cost"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: tpusim <verb> [options]\n\nverbs:\n");
  for (size_t i = 0; i < sizeof k_verbs / sizeof k_verbs[0]; i++)
    fprintf(f, "  %-10s %s\n", k_verbs[i].name, k_verbs[i].help);
  fprintf(f, "\n'tpusim <verb> --help' describes a verb. tpusim %s\n", tpu_version());
}

int tpu_cli_report(const tpu_diag *d) {
  char buf[1200];
  tpu_diag_format(d, buf, sizeof buf);
  fprintf(stderr, "%s\n", buf);
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("tpusim %s\n", tpu_version());
    return 0;
  }
  for (size_t i = 0; i < sizeof k_verbs / sizeof k_verbs[0]; i++)
    if (!strcmp(argv[1], k_verbs[i].name)) return k_verbs[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "error: unknown verb '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
