/* The tpusim CLI: one function per verb, each in its own file. */
#ifndef TPU_TOOLS_CLI_H
#define TPU_TOOLS_CLI_H

#include "tpusim/tpusim.h"

/* Each verb returns the process exit status: 0 success, 1 failure, 2 bad input/usage. */
int tpu_cli_run(int argc, char **argv);
int tpu_cli_fmt(int argc, char **argv);
int tpu_cli_chips(int argc, char **argv);
int tpu_cli_systolic(int argc, char **argv);
int tpu_cli_compile(int argc, char **argv);
int tpu_cli_plan(int argc, char **argv);

/* Prints a diagnostic as one line on stderr; returns 2. */
int tpu_cli_report(const tpu_diag *d);

#endif
