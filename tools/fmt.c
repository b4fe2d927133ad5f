/* tpusim fmt: parse and verify an HLO module, print it in canonical form. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "cli.h"
#include "hlo/hlo.h"
#include "ir/verify.h"

int tpu_cli_fmt(int argc, char **argv) {
  const char *prog = NULL;
  int verify = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: tpusim fmt PROG.hlo [--no-verify]\n\n"
             "Parses (and verifies) an HLO module and prints it in canonical form: names without '%%',\n"
             "operands in short form, computations without signatures, attributes as written.\n"
             "print(parse(x)) is a fixed point.\n");
      return 0;
    } else if (!strcmp(argv[i], "--no-verify")) {
      verify = 0;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "error: unknown option '%s' (see tpusim fmt --help)\n", argv[i]);
      return 2;
    } else if (!prog) {
      prog = argv[i];
    } else {
      fprintf(stderr, "error: more than one program given\n");
      return 2;
    }
  }
  if (!prog) {
    fprintf(stderr, "usage: tpusim fmt PROG.hlo [--no-verify]\n");
    return 2;
  }
  tpu_diag d;
  tpu_module *m;
  if (tpu_hlo_parse_file(prog, &m, &d) != TPU_OK) return tpu_cli_report(&d);
  if (verify && tpu_ir_verify(m, &d) != TPU_OK) {
    tpu_module_free(m);
    return tpu_cli_report(&d);
  }
  char *text = tpu_hlo_print(m);
  tpu_module_free(m);
  if (!text) {
    fprintf(stderr, "error: out of memory\n");
    return 2;
  }
  fputs(text, stdout);
  tpu_free(text);
  return 0;
}
