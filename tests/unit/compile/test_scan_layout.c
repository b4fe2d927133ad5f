/* A short scan of rank 3 runs on its value row-major (compile/passes/scan_layout.c): an entry
 * parameter laid out otherwise is copied into that layout first and the result copied back
 * into the least padded one, as the XLA TPU compiler's cummax_80x126x80_ax0_s32 does; a scan
 * of rank 2 reads its parameter as it is. On v5e the copy in writes VMEM and the scan reads it
 * there (copy_kind.c tpu__relayout_kernel), as the compiler's copy writes S(1). */
#include <stdio.h>
#include <string.h>

#include "passes_util.h"
#include "unit/compile/backend_util.h"

static const char *fmt = "HloModule s\nmx {\n a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT s = s32[] maximum(a, b)\n}\n"
                         "ENTRY e {\n x = s32[%s] parameter(0)\n z = s32[] constant(-2147483648)\n"
                         " ROOT r = s32[%s] reduce-window(x, z), window={size=%s pad=%s}, to_apply=mx\n}\n";

/* The copies of the compiled entry: into row-major before the scan (*in), out of it (*out). */
static void copies_of(const char *src, int *in, int *out, int *rank_ok) {
  *in = *out = 0;
  *rank_ok = 0;
  tpu_module *m = compile_src(src);
  if (!m) return;
  for (int i = 0; i < m->entry->ninstrs; i++) {
    const tpu_instr *c = m->entry->instrs[i];
    if (c->op != TPU_OP_COPY) continue;
    if (c->operands[0]->op == TPU_OP_PARAMETER) {
      (*in)++;
      *rank_ok = c->shape.has_layout && c->shape.minor_to_major[0] == c->shape.rank - 1 &&
                 c->shape.minor_to_major[c->shape.rank - 1] == 0; /* row-major */
    } else if (c == m->entry->root) {
      (*out)++;
    }
  }
  tpu_module_free(m);
}

static void scan_param_copies(void) {
  char src[800];
  int in, out, row;
  snprintf(src, sizeof src, fmt, "80,126,80", "80,126,80", "80x1x1", "79_0x0_0x0_0");
  copies_of(src, &in, &out, &row);
  printf("cummax of s32[80,126,80] along axis 0: %d copy in (row-major: %d), %d copy out\n", in, row, out);
  CHECK(in == 1 && row && out == 1);
  snprintf(src, sizeof src, fmt, "1000,33", "1000,33", "1x33", "0_0x32_0");
  copies_of(src, &in, &out, &row);
  printf("cummax of s32[1000,33] along axis 1: %d copies in, %d out\n", in, out);
  CHECK(in == 0 && out == 0);
}

/* The cummax of s32[80,126,80] along axis 0 compiled for v5e through the HLO passes and
 * timed: the cycles (with `cycles`) or HBM bytes of its op named `name` (-1 if none). */
static double v5e_scan_op(const char *name, int cycles) {
  char src[800];
  snprintf(src, sizeof src, fmt, "80,126,80", "80,126,80", "80x1x1", "79_0x0_0x0_0");
  tpu_chip c;
  tpu_module *m = NULL;
  tpu_program *p = compile_for_with("v5e", src, 1, &c, &m);
  double v = named_op_value(p, &c, name, cycles);
  tpu_program_free(p);
  tpu_module_free(m);
  return v;
}

/* On v5e the scan of s32[80,126,80] reads its copied operand from VMEM and writes its result
 * there for the copy back: the kernel moves next to no HBM bytes (the compiler's fusion
 * reads and writes S(1)); without the rule it streams 5.2 MB each way. */
static void scan_in_vmem(void) {
  double b = v5e_scan_op("r", 0);
  printf("v5e scan kernel of s32[80,126,80]: %.0f HBM bytes\n", b);
  CHECK(b >= 0 && b < 65536);
}

/* The copy back out of VMEM costs what the copy in does, as the compiler charges them (12,444
 * cycles each on v5e for s32[80,126,80]; scan_window.c tpu__scan_result_copy): no stream
 * cost on its read from VMEM. Without the rule the copy out took 2.4 times the copy in. */
static void scan_copies_alike(void) {
  double in = v5e_scan_op("copy.scan_layout", 1), out = v5e_scan_op("copy.scan_result", 1);
  printf("v5e copies around the scan of s32[80,126,80]: in %.0f, out %.0f cycles\n", in, out);
  CHECK(in > 0 && out > 0 && out / in < 1.3 && in / out < 1.3);
}

int main(void) {
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &g_chip, &d) == TPU_OK);
  scan_param_copies();
  scan_in_vmem();
  scan_copies_alike();
  CHECK_DONE();
}
