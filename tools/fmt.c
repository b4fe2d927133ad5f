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
      return tpu_cli_arg_error(i, 1, "unknown option '%s' (see tpusim fmt --help)", argv[i]);
    } else if (!prog) {
      prog = argv[i];
    } else {
      return tpu_cli_arg_error(i, 1, "more than one program given ('%s' and '%s')", prog, argv[i]);
    }
  }
  if (!prog) return tpu_cli_arg_error(-1, 0, "no program given (usage: tpusim fmt PROG.hlo [--no-verify])");
  tpu_diag d;
  tpu_module *m;
  if (tpu_hlo_parse_file(prog, &m, &d) != TPU_OK) return tpu_cli_report_file(&d, prog);
  if (verify && tpu_ir_verify(m, &d) != TPU_OK) {
    tpu_module_free(m);
    return tpu_cli_report_file(&d, prog);
  }
  char *text = tpu_hlo_print(m);
  tpu_module_free(m);
  if (!text) return tpu_cli_file_error(prog, 0, 0, "out of memory printing the module");
  fputs(text, stdout);
  tpu_free(text);
  return 0;
}
