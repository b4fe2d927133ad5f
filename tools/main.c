/* tpusim CLI entry: dispatches to one verb. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "pod/mpi.h"

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

#define CMDLINE "<command line>"

static int print_diag(const tpu_diag *d) {
  char buf[4096];
  tpu_diag_format(d, buf, sizeof buf);
  fflush(stdout); /* what the verb printed before stays before the error */
  fprintf(stderr, "%s\n", buf);
  return 2;
}

int tpu_cli_report(const tpu_diag *d) {
  if (d->file[0]) return print_diag(d);
  tpu_diag c = *d;
  snprintf(c.file, sizeof c.file, "%s", CMDLINE);
  c.line = c.col = 0;
  return print_diag(&c);
}

int tpu_cli_report_arg(const tpu_diag *d, int argi) {
  if (d->file[0]) return print_diag(d);
  tpu_diag c = *d;
  snprintf(c.file, sizeof c.file, "%s", CMDLINE);
  c.line = argi + 1;
  c.col = d->col > 0 ? d->col : 1;
  return print_diag(&c);
}

int tpu_cli_report_file(const tpu_diag *d, const char *file) {
  if (d->file[0] || !file) return tpu_cli_report(d);
  tpu_diag c = *d;
  snprintf(c.file, sizeof c.file, "%s", file);
  c.line = c.col = 0;
  return print_diag(&c);
}

static int vfail(const char *file, int line, int col, const char *fmt, va_list ap) {
  tpu_diag d;
  memset(&d, 0, sizeof d);
  snprintf(d.file, sizeof d.file, "%s", file);
  d.line = line;
  d.col = col;
  vsnprintf(d.msg, sizeof d.msg, fmt, ap);
  return print_diag(&d);
}

int tpu_cli_arg_error(int argi, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (argi < 0) vfail(CMDLINE, 0, 0, fmt, ap); /* the command as a whole */
  else vfail(CMDLINE, argi + 1, col > 0 ? col : 1, fmt, ap);
  va_end(ap);
  return 2;
}

int tpu_cli_file_error(const char *file, int line, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(file, line, col, fmt, ap);
  va_end(ap);
  return 2;
}

tpu_loc tpu_cli_arg_loc(int argi, int col) { return tpu_loc_at(CMDLINE, argi + 1, col > 0 ? col : 1); }

/* Under mpirun, `tpusim run` needs the MPI transport. libmpi is linked into tpusim-mpi only
 * (the same CLI; loading libmpi and its dependencies would cost every other process its
 * start-up), so a tpusim without MPI runs tpusim-mpi from its own folder with the same
 * arguments. Returns only when there is none: the run then reports that MPI is missing. */
static void run_under_mpi(char **argv) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 16);
  if (n <= 0 || n >= (ssize_t)sizeof self - 16) return;
  self[n] = 0;
  char *slash = strrchr(self, '/');
  if (!slash) return;
  strcpy(slash + 1, "tpusim-mpi");
  execv(self, argv);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    return tpu_cli_arg_error(-1, 0, "no verb given (run, compile, fmt, chips, systolic, plan)");
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("tpusim %s\n", tpu_version());
    return 0;
  }
  if (!strcmp(argv[1], "run") && tpu_mpi_launched() && !tpu_mpi_built()) run_under_mpi(argv);
  for (size_t i = 0; i < sizeof k_verbs / sizeof k_verbs[0]; i++)
    if (!strcmp(argv[1], k_verbs[i].name)) {
      int rc = k_verbs[i].fn(argc - 1, argv + 1);
      /* what the verb printed must have reached its destination (a full disk, a closed pipe) */
      if (fflush(stdout) != 0 || ferror(stdout)) {
        int e = errno;
        rc = rc ? rc : 1;
        tpu_cli_file_error("<standard output>", 0, 0, "cannot write: %s", strerror(e));
      }
      return rc;
    }
  return tpu_cli_arg_error(0, 1, "unknown verb '%s' (run, compile, fmt, chips, systolic, plan; tpusim --help)",
                           argv[1]);
}
