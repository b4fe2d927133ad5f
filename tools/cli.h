/* The tpusim CLI: one function per verb, each in its own file. */
#ifndef TPU_TOOLS_CLI_H
#define TPU_TOOLS_CLI_H

#include "base/status.h"
#include "tpusim/tpusim.h"

/* Each verb returns the process exit status: 0 success, 1 failure, 2 bad input/usage. */
int tpu_cli_run(int argc, char **argv);
int tpu_cli_fmt(int argc, char **argv);
int tpu_cli_chips(int argc, char **argv);
int tpu_cli_systolic(int argc, char **argv);
int tpu_cli_compile(int argc, char **argv);
int tpu_cli_plan(int argc, char **argv);

/* Error lines (docs/errors.md). Every refusal is one line on stderr, control bytes escaped,
 * located as FILE:LINE:COL (a text file), FILE:0:BYTE (a binary file; FILE:0:0 the file as a
 * whole) or <command line>:N:COL (argument N of the whole command: `tpusim` is 0, the verb 1,
 * COL 1-based within it; <command line>:0:0 the command as a whole). */

/* Prints a diagnostic; one naming no file is placed at the command line as a whole. Returns 2. */
int tpu_cli_report(const tpu_diag *d);
/* Prints a diagnostic; one naming no file is placed at argument `argi` of the verb's argv
 * (argv[0] the verb itself), column 1 + its own column. Returns 2. */
int tpu_cli_report_arg(const tpu_diag *d, int argi);
/* Prints a diagnostic; one naming no file is placed at FILE:0:0 (FILE the program or input
 * the failing step works on). Returns 2. */
int tpu_cli_report_file(const tpu_diag *d, const char *file);
/* Prints "<command line>:N:COL: error: ..." for argument `argi` of the verb's argv (COL
 * 1-based; 0: the argument as a whole reads as column 1; argi -1: the command as a whole,
 * <command line>:0:0). Returns 2. */
int tpu_cli_arg_error(int argi, int col, const char *fmt, ...) TPU_PRINTF(3, 4);
/* Prints "FILE:LINE:COL: error: ..." (LINE 0: COL a byte offset). Returns 2. */
int tpu_cli_file_error(const char *file, int line, int col, const char *fmt, ...) TPU_PRINTF(4, 5);
/* The location of the verb's argv[argi] as a diagnostic location: "<command line>", argi + 1, col. */
tpu_loc tpu_cli_arg_loc(int argi, int col);

/* Results as a set (tools/outset.c): `tpusim run -o DIR` writes into a temporary folder
 * beside DIR (.NAME.tpusim-PID-XXXXXX) and swaps it into place at the end; DIR holds the
 * complete earlier set or the complete new one, never a mix. Folders left by a killed run
 * are swept by the next run to the same DIR. */
typedef struct tpu_outset {
  const char *dir; /* borrowed */
  char *tmp;       /* owned: the folder being written */
} tpu_outset;
/* Before the run: DIR must be absent, or a folder holding only results (N.npy, devD/);
 * otherwise prints an error at argument argi and returns 2. Returns 0 if fine. */
int tpu_outset_check(const char *dir, int argi);
/* Creates DIR's missing parents and the temporary folder (o->tmp). */
tpu_status tpu_outset_begin(tpu_outset *o, const char *dir, tpu_diag *d);
/* Swaps the finished set into place and removes the earlier one. */
tpu_status tpu_outset_commit(tpu_outset *o, tpu_diag *d);
/* Removes the temporary folder (a failed write). */
void tpu_outset_abort(tpu_outset *o);
/* A failed run: removes an earlier result set at DIR, so that nothing there looks like the
 * results of this run (an empty folder, or one holding anything else, is left alone). */
void tpu_outset_discard(const char *dir);

#endif
