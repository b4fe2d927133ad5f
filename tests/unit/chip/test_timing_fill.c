/* The hidden-fill rule of the timing executor (timing.c durations, chip mxu_fill_hidden): on a
 * chip with the field (v6e), a matmul kernel that moves nothing to or from HBM streams its
 * instructions back to back, each paying its rows and weight loads but not the systolic fill
 * and drain (mxu_rows + mxu_cols - 2 cycles); one that moves HBM data exposes them, as every
 * kernel does on a chip without the field. Checked against the closed form. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "chip/chip.h"
#include "chip/program.h"
#include "chip/timing.h"

/* Two matmul instructions of bf16 [1024,512] x [512,256] on 4 MXUs, operands and result in
 * VMEM; with `out`, the result is written to HBM too. */
static tpu_program *two_matmuls(int out) {
  char text[1024];
  snprintf(text, sizeof text,
           ".program chip=\"v6e\"\n"
           ".op name=\"mm\" kind=\"fusion:kOutput\" flops=1 padded_flops=1 bytes=0 padded_bytes=0 m=2048 k=512 n=256 b=1\n"
           ".vmem op=0 offset=0 slot_bytes=1048576 slots=2\n"
           ".vmem op=0 offset=2097152 slot_bytes=262144 slots=1\n"
           ".vmem op=0 offset=2359296 slot_bytes=524288 slots=2\n"
           "%s"
           "kernel op=0\n"
           "matmul src=v0[0],v1[0] dst=v2[0] m=1024 k=512 n=256 b=1 mxus=4 passes=1 dtype=bf16 op=0\n"
           "matmul src=v0[1],v1[0] dst=v2[1] m=1024 k=512 n=256 b=1 mxus=4 passes=1 dtype=bf16 op=0\n"
           "%s",
           out ? ".hbm name=\"r\" offset=0 bytes=1048576\n" : "",
           out ? "dma.out src=v2[1] hbm=h0 bytes=524288 op=0\n" : "");
  tpu_program *p = NULL;
  tpu_diag d;
  if (tpu_program_parse("fill.s", text, strlen(text), &p, &d) != TPU_OK) {
    char buf[1200];
    tpu_diag_format(&d, buf, sizeof buf);
    fprintf(stderr, "assemble: %s\n", buf);
  }
  return p;
}

/* The op's cycles and its MXU cycles on chip. */
static void run(const tpu_program *p, const tpu_chip *chip, int64_t *op, int64_t *mxu) {
  tpu_timeline tl;
  tpu_diag d;
  *op = *mxu = -1;
  CHECK(tpu_timing_run(p, chip, 0, &tl, &d) == TPU_OK);
  *op = tl.ops[0].cycles;
  *mxu = tl.ops[0].unit_cycles[TPU_UNIT_MXU];
  tpu_timeline_free(&tl);
}

static void fill_hidden_in_vmem(void) {
  tpu_chip v6e;
  tpu_diag d;
  CHECK(tpu_chip_load("v6e", &v6e, &d) == TPU_OK);
  CHECK(v6e.mxu_fill_hidden == 1 && v6e.mxu_rows == 256 && v6e.mxu_cols == 256 && v6e.mxus_per_core == 4);
  const int64_t W = v6e.mxu_weight_load_cycles, R = v6e.mxu_rows, C = v6e.mxu_cols;
  CHECK(W == 128);
  /* per instruction: N's one column tile on one MXU group, M split 4 ways: 256 rows per MXU,
   * K in 2 folds; the first weight load exposed (W), the second hidden under 256 rows */
  const int64_t T = 1024 / 4, F = 512 / R;
  const int64_t rows = W + F * T; /* 640 */
  const int64_t fill = R + C - 2; /* 510 */
  const int64_t kov = (int64_t)(v6e.kernel_overhead_s * v6e.clock_hz + 0.5);
  CHECK(kov > 1000);

  tpu_program *p = two_matmuls(0);
  CHECK(p != NULL);
  if (!p) return;
  int64_t op, mxu;
  run(p, &v6e, &op, &mxu);
  CHECK_EQ_INT(mxu, 2 * rows);
  CHECK_EQ_INT(op, kov + 2 * rows);
  /* a chip without the field exposes both fills */
  v6e.mxu_fill_hidden = 0;
  run(p, &v6e, &op, &mxu);
  CHECK_EQ_INT(mxu, 2 * (rows + fill));
  CHECK_EQ_INT(op, kov + 2 * (rows + fill));
  v6e.mxu_fill_hidden = 1;
  tpu_program_free(p);

  /* the same kernel writing its result to HBM exposes them, with the field */
  p = two_matmuls(1);
  CHECK(p != NULL);
  if (!p) return;
  run(p, &v6e, &op, &mxu);
  CHECK_EQ_INT(mxu, 2 * (rows + fill));
  tpu_program_free(p);

  /* the compile-time cost (schedule.c) keeps the systolic closed form */
  tpu_insn in;
  memset(&in, 0, sizeof in);
  in.opc = TPU_ISA_MATMUL;
  in.m = 1024, in.k = 512, in.n = 256, in.b = 1, in.mxus = 4, in.passes = 1, in.dtype = TPU_BF16;
  int64_t c = 0;
  CHECK(tpu_timing_matmul_cycles(&in, &v6e, &c, &d) == TPU_OK);
  CHECK_EQ_INT(c, rows + fill);
}

int main(void) {
  fill_hidden_in_vmem();
  CHECK_DONE();
}
