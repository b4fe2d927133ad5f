/* The resident matmul kernel's start (timing.c kernel_start; chip field
 * matmul_resident_no_start, v5e): a matmul kernel with no transfer at all (its operands and
 * 32-bit result all stay in VMEM) pays no kernel start on a chip with the field, only its MXU
 * and vector work; one with a transfer (a 16-bit result's on-chip pass, an operand from HBM)
 * still pays kernel_overhead_s and matmul_base_s; TPUSIM_NO_MATMUL_RESIDENT_START=1 turns the
 * rule off (bench/fidelity/probes/chain_dot.py, docs/timing.md MXU kernel start). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "chip/chip.h"
#include "timing_util.h"

/* A bf16 [32,256] x [256,1024] matmul kernel plus an addend, as an LSTM step's second dot.
 * pass: its result leaves through an on-chip transfer (a bf16 result's stream pass); in: its
 * LHS is loaded from HBM. */
static tpu_program *kernel(int pass, int in) {
  char text[2048];
  snprintf(text, sizeof text,
           ".program chip=\"v5e\"\n"
           ".op name=\"mm\" kind=\"fusion:kOutput\" flops=1 padded_flops=1 bytes=0 padded_bytes=0 m=32 k=256 n=1024 b=1\n"
           ".hbm name=\"h\" offset=0 bytes=16384\n"
           ".vmem op=0 offset=0 slot_bytes=16384 slots=1\n"
           ".vmem op=0 offset=16384 slot_bytes=524288 slots=1\n"
           ".vmem op=0 offset=540672 slot_bytes=131072 slots=1\n"
           ".vmem op=0 offset=671744 slot_bytes=131072 slots=1\n"
           ".vmem op=0 offset=802816 slot_bytes=65536 slots=1\n"
           "kernel op=0\n"
           "%s"
           "matmul src=v0[0],v1[0] dst=v2[0] m=32 k=256 n=1024 b=1 mxus=4 passes=1 dtype=bf16 op=0\n"
           "vpu src=v2[0],v3[0] dst=v2[0] vregs=32 ops=2 op=0\n"
           "%s",
           in ? "dma.in dst=v0[0] hbm=h0 bytes=16384 op=0\n" : "",
           pass ? "dma.out src=v2[0] dst=v4[0] bytes=65536 op=0 onchip=1\n" : "");
  return assemble(text);
}

static int64_t cycles(int pass, int in, const tpu_chip *c) {
  tpu_program *p = kernel(pass, in);
  CHECK(p != NULL);
  int64_t r = p ? (int64_t)op_cycles(p, c, "mm") : -1;
  tpu_program_free(p);
  return r;
}

static void resident(void) {
  tpu_chip c, bare;
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &c, &d) == TPU_OK);
  CHECK(c.matmul_resident_no_start == 1);
  bare = c;
  bare.kernel_overhead_s = bare.matmul_base_s = bare.matmul_overhead_s = 0;
  const int64_t start = llround(c.kernel_overhead_s * c.clock_hz) + llround(c.matmul_base_s * c.clock_hz);
  CHECK(start > 1500);
  /* nothing moves: no start at all, the MXU and vector work alone */
  CHECK_EQ_INT(cycles(0, 0, &c), cycles(0, 0, &bare));
  /* the rule off (the field absent): the start */
  tpu_chip off = c;
  off.matmul_resident_no_start = 0;
  CHECK_EQ_INT(cycles(0, 0, &off) - cycles(0, 0, &bare), start);
  /* the A/B switch: the start again */
  setenv("TPUSIM_NO_MATMUL_RESIDENT_START", "1", 1);
  CHECK_EQ_INT(cycles(0, 0, &c) - cycles(0, 0, &bare), start);
  unsetenv("TPUSIM_NO_MATMUL_RESIDENT_START");
  /* a 16-bit result's on-chip pass is a transfer: the start is paid */
  CHECK(cycles(1, 0, &c) - cycles(1, 0, &bare) >= start);
  /* an operand from HBM: the start is paid */
  CHECK(cycles(0, 1, &c) - cycles(0, 1, &bare) >= start);
}

/* Only v5e's compiler was seen to start such kernels free (chips/v5e.json's note). */
static void presets(void) {
  const char *other[] = {"v4", "v5p", "v6e"};
  tpu_chip c;
  tpu_diag d;
  for (int i = 0; i < 3; i++) {
    CHECK(tpu_chip_load(other[i], &c, &d) == TPU_OK);
    CHECK(c.matmul_resident_no_start == 0);
  }
}

int main(void) {
  resident();
  presets();
  CHECK_DONE();
}
