/* tpusim compile: run the compiler on an HLO program; print the HLO after the HLO passes,
 * the lowered program, or the state after one pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "chip/program.h"
#include "cli.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/collective.h"
#include "pod/cost.h"
#include "ir/verify.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: tpusim compile PROG.hlo [--chip NAME|FILE] [--emit hlo|asm] [--dump-after PASS]\n"
          "                      [--precision default|high|highest] [--no-windowed-einsum] [--mesh N=S,...]\n"
          "\n"
          "Compiles an HLO module for a TPU chip and prints the result on stdout.\n"
          "  --chip C         a preset name (tpusim chips lists them) or a chip JSON file (default v5e)\n"
          "  --emit hlo       the module after the HLO passes (inline, simplify, fuse)\n"
          "  --emit asm       the lowered tpusim program (default)\n"
          "  --dump-after P   print the module (HLO passes) or the program so far (back-end passes)\n"
          "                   after pass P instead; passes, in order:");
  for (int i = 0; tpu_compile_pass_names[i]; i++) fprintf(f, " %s", tpu_compile_pass_names[i]);
  fprintf(f,
          "\n"
          "  --precision P    compile every f32 dot/convolution at P (default: each op's operand_precision)\n"
          "  --no-windowed-einsum  spmd-partition gathers and reduce-scatters where the chip's XLA\n"
          "                   compiler would run a windowed einsum (docs/spmd.md)\n"
          "  --mesh N=S,...   the device mesh spmd-partition partitions over (JAX's lowered HLO\n"
          "                   carries its own; a GSPMD-form program's is inferred when it can be)\n"
          "Exit status: 0 success, 2 bad program or option (one line on stderr, nothing on stdout).\n");
}

static int is_hlo_pass(const char *name) {
  return !strcmp(name, "inline") || !strcmp(name, "spmd-partition") || !strcmp(name, "simplify") ||
         !strcmp(name, "fuse");
}

int tpu_cli_compile(int argc, char **argv) {
  static const char *const precisions[] = {"default", "high", "highest"};
  const char *prog = NULL, *chip_name = "v5e", *emit = "asm", *dump_after = NULL, *mesh = NULL;
  int precision = -1, no_window = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int has_next = i + 1 < argc;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--chip") && has_next) {
      chip_name = argv[++i];
    } else if (!strcmp(a, "--emit") && has_next) {
      emit = argv[++i];
      if (strcmp(emit, "hlo") && strcmp(emit, "asm")) {
        fprintf(stderr, "error: unknown --emit '%s' (hlo or asm)\n", emit);
        return 2;
      }
    } else if (!strcmp(a, "--dump-after") && has_next) {
      dump_after = argv[++i];
    } else if (!strcmp(a, "--no-windowed-einsum")) {
      no_window = 1;
    } else if (!strcmp(a, "--mesh") && has_next) {
      mesh = argv[++i];
    } else if (!strcmp(a, "--precision") && has_next) {
      const char *p = argv[++i];
      precision = -2;
      for (int k = 0; k < 3; k++)
        if (!strcmp(p, precisions[k])) precision = k;
      if (precision == -2) {
        fprintf(stderr, "error: unknown precision '%s' (default, high or highest)\n", p);
        return 2;
      }
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "error: unknown option or missing value '%s' (see tpusim compile --help)\n", a);
      return 2;
    } else if (!prog) {
      prog = a;
    } else {
      fprintf(stderr, "error: more than one program given\n");
      return 2;
    }
  }
  if (!prog) {
    usage(stderr);
    return 2;
  }
  tpu_diag d;
  tpu_chip chip;
  if (tpu_chip_load(chip_name, &chip, &d) != TPU_OK) return tpu_cli_report(&d);
  tpu_module *m = NULL;
  if (tpu_hlo_parse_file(prog, &m, &d) != TPU_OK) return tpu_cli_report(&d);
  if (tpu_ir_verify(m, &d) != TPU_OK) {
    tpu_module_free(m);
    return tpu_cli_report(&d);
  }
  /* Everything goes to a buffer first, so a failure prints nothing on stdout. */
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  if (!out) {
    tpu_module_free(m);
    fprintf(stderr, "error: out of memory\n");
    return 2;
  }
  tpu_pod_cost_ctx pc;
  memset(&pc, 0, sizeof pc);
  pc.chip = &chip;
  tpu_compile_opts o = {&chip, dump_after, out, precision, tpu_pod_coll_cost, &pc, 0, no_window, mesh};
  tpu_status st;
  tpu_program *p = NULL;
  int backend = dump_after ? !is_hlo_pass(dump_after) : !strcmp(emit, "asm");
  if (backend) st = tpu_compile(m, &o, &p, &d);
  else st = tpu_compile_hlo(m, &o, &d);
  if (st == TPU_OK && !dump_after) {
    if (backend) {
      st = tpu_program_print(p, out, &d);
    } else {
      char *text = tpu_hlo_print(m);
      if (!text) st = TPU_FAIL(&d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory printing the module");
      else fputs(text, out);
      tpu_free(text);
    }
  }
  fclose(out);
  tpu_pod_cost_free(&pc);
  tpu_program_free(p);
  tpu_module_free(m);
  if (st != TPU_OK) {
    free(buf);
    return tpu_cli_report(&d);
  }
  fwrite(buf, 1, len, stdout);
  free(buf);
  return 0;
}
