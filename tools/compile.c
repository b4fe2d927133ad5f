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
#include "compile/spmd/spmd.h"

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
  int precision = -1, no_window = 0, chip_i = -1, mesh_i = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int has_next = i + 1 < argc;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--chip") && has_next) {
      chip_name = argv[++i];
      chip_i = i;
    } else if (!strcmp(a, "--emit") && has_next) {
      emit = argv[++i];
      if (strcmp(emit, "hlo") && strcmp(emit, "asm"))
        return tpu_cli_arg_error(i, 1, "unknown --emit '%s' (hlo or asm)", emit);
    } else if (!strcmp(a, "--dump-after") && has_next) {
      dump_after = argv[++i];
      int known = 0;
      for (int k = 0; tpu_compile_pass_names[k]; k++) known |= !strcmp(dump_after, tpu_compile_pass_names[k]);
      if (!known) {
        char list[400] = "";
        size_t n = 0;
        for (int k = 0; tpu_compile_pass_names[k] && n < sizeof list; k++)
          n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", k ? ", " : "", tpu_compile_pass_names[k]);
        return tpu_cli_arg_error(i, 1, "unknown pass '%s' for --dump-after (passes: %s)", dump_after, list);
      }
    } else if (!strcmp(a, "--no-windowed-einsum")) {
      no_window = 1;
    } else if (!strcmp(a, "--mesh") && has_next) {
      mesh = argv[++i];
      mesh_i = i;
    } else if (!strcmp(a, "--precision") && has_next) {
      const char *p = argv[++i];
      precision = -2;
      for (int k = 0; k < 3; k++)
        if (!strcmp(p, precisions[k])) precision = k;
      if (precision == -2) return tpu_cli_arg_error(i, 1, "unknown precision '%s' (default, high or highest)", p);
    } else if (a[0] == '-' && a[1]) {
      static const char *const valued[] = {"--chip", "--emit", "--dump-after", "--mesh", "--precision"};
      for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
        if (!strcmp(a, valued[k])) return tpu_cli_arg_error(i, 1, "%s needs a value (see tpusim compile --help)", a);
      return tpu_cli_arg_error(i, 1, "unknown option '%s' (see tpusim compile --help)", a);
    } else if (!prog) {
      prog = a;
    } else {
      return tpu_cli_arg_error(i, 1, "more than one program given ('%s' and '%s')", prog, a);
    }
  }
  if (!prog) return tpu_cli_arg_error(-1, 0, "no program given (usage: tpusim compile PROG.hlo [options])");
  tpu_diag d;
  tpu_chip chip;
  if (tpu_chip_load(chip_name, &chip, &d) != TPU_OK) return chip_i < 0 ? tpu_cli_report(&d) : tpu_cli_report_arg(&d, chip_i);
  if (mesh) { /* checked here, so that its errors name the argument */
    tpu_mesh ms;
    memset(&ms, 0, sizeof ms);
    tpu_status mst = tpu_mesh_parse(mesh, &ms, &d);
    tpu_mesh_free(&ms);
    if (mst != TPU_OK) return tpu_cli_report_arg(&d, mesh_i);
  }
  tpu_module *m = NULL;
  if (tpu_hlo_parse_file(prog, &m, &d) != TPU_OK) return tpu_cli_report_file(&d, prog);
  if (tpu_ir_verify(m, &d) != TPU_OK) {
    tpu_module_free(m);
    return tpu_cli_report_file(&d, prog);
  }
  /* Everything goes to a buffer first, so a failure prints nothing on stdout. */
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  if (!out) {
    tpu_module_free(m);
    return tpu_cli_file_error(prog, 0, 0, "out of memory");
  }
  tpu_pod_cost_ctx pc;
  memset(&pc, 0, sizeof pc);
  pc.chip = &chip;
  tpu_compile_opts o = {&chip, dump_after, out, precision, tpu_pod_coll_cost, &pc, 0, no_window, mesh, NULL, tpu_pod_hops, NULL};
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
    return tpu_cli_report_file(&d, prog);
  }
  fwrite(buf, 1, len, stdout);
  free(buf);
  return 0;
}
