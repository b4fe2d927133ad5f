/* The start cost of a matmul kernel (timing.c kernel_start; chip fields matmul_base_s,
 * matmul_overhead_s, matmul_write_s): every matmul kernel pays kernel_overhead_s plus
 * matmul_base_s; one whose matmul instruction reads a buffer its own transfer filled from HBM
 * adds matmul_overhead_s (one whose vector work alone reads HBM does not); one writing its
 * result to HBM adds matmul_write_s. Each term is pinned exactly on made-up values, then the
 * presets are checked to carry the probe-derived values (docs/timing.md, MXU kernel start). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "chip/chip.h"
#include "chip/program.h"
#include "chip/timing.h"

/* A bf16 [8,128] x [128,128] matmul kernel on v5e. in_mxu: its LHS is loaded from HBM;
 * in_vec: a vector operand is loaded from HBM and only the VPU reads it; out: the result is
 * written to HBM. */
static tpu_program *kernel(int in_mxu, int in_vec, int out) {
  char text[2048];
  snprintf(text, sizeof text,
           ".program chip=\"v5e\"\n"
           ".op name=\"mm\" kind=\"fusion:kOutput\" flops=1 padded_flops=1 bytes=0 padded_bytes=0 m=8 k=128 n=128 b=1\n"
           ".hbm name=\"x\" offset=0 bytes=2048\n"
           ".hbm name=\"a\" offset=4096 bytes=2048\n"
           ".hbm name=\"r\" offset=8192 bytes=2048\n"
           ".vmem op=0 offset=0 slot_bytes=2048 slots=1\n"
           ".vmem op=0 offset=4096 slot_bytes=32768 slots=1\n"
           ".vmem op=0 offset=40960 slot_bytes=2048 slots=1\n"
           ".vmem op=0 offset=45056 slot_bytes=2048 slots=1\n"
           "kernel op=0\n"
           "%s%s"
           "matmul src=v0[0],v1[0] dst=v2[0] m=8 k=128 n=128 b=1 mxus=4 passes=1 dtype=bf16 op=0\n"
           "vpu src=v2[0],v3[0] dst=v2[0] vregs=1 ops=1 op=0\n"
           "%s",
           in_mxu ? "dma.in dst=v0[0] hbm=h0 bytes=2048 op=0\n" : "",
           in_vec ? "dma.in dst=v3[0] hbm=h1 bytes=2048 op=0\n" : "",
           out ? "dma.out src=v2[0] hbm=h2 bytes=2048 op=0\n" : "");
  tpu_program *p = NULL;
  tpu_diag d;
  if (tpu_program_parse("mxu_start.s", text, strlen(text), &p, &d) != TPU_OK) {
    char buf[1200];
    tpu_diag_format(&d, buf, sizeof buf);
    fprintf(stderr, "assemble: %s\n", buf);
  }
  return p;
}

static int64_t cycles(int in_mxu, int in_vec, int out, const tpu_chip *c) {
  tpu_program *p = kernel(in_mxu, in_vec, out);
  CHECK(p != NULL);
  if (!p) return -1;
  tpu_timeline tl;
  tpu_diag d;
  int64_t r = -1;
  CHECK(tpu_timing_run(p, c, 0, &tl, &d) == TPU_OK);
  r = tl.ops[0].cycles;
  tpu_timeline_free(&tl);
  tpu_program_free(p);
  return r;
}

static void start_terms(void) {
  tpu_chip c;
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &c, &d) == TPU_OK);
  c.matmul_resident_no_start = 0; /* the kernel with nothing in HBM pays the base here (test_timing_mxu_resident) */
  /* made-up values, far apart, so that each term is seen alone */
  c.kernel_overhead_s = 1000 / c.clock_hz;
  c.matmul_base_s = 100 / c.clock_hz;
  c.matmul_overhead_s = 10000 / c.clock_hz;
  c.matmul_write_s = 3000 / c.clock_hz;
  int64_t on_chip = cycles(0, 0, 0, &c);
  c.matmul_base_s = c.matmul_overhead_s = c.matmul_write_s = 0;
  int64_t plain = cycles(0, 0, 0, &c), plain_in = cycles(1, 0, 0, &c), plain_vec = cycles(0, 1, 0, &c),
          plain_out = cycles(0, 0, 1, &c), plain_both = cycles(1, 0, 1, &c);
  c.matmul_base_s = 100 / c.clock_hz;
  c.matmul_overhead_s = 10000 / c.clock_hz;
  c.matmul_write_s = 3000 / c.clock_hz;
  /* every matmul kernel: the base */
  CHECK_EQ_INT(on_chip - plain, 100);
  /* its MXU operand from HBM: the base and the read start */
  CHECK_EQ_INT(cycles(1, 0, 0, &c) - plain_in, 100 + 10000);
  /* only its vector operand from HBM: the base alone */
  CHECK_EQ_INT(cycles(0, 1, 0, &c) - plain_vec, 100);
  /* its result to HBM: the base and the write start */
  CHECK_EQ_INT(cycles(0, 0, 1, &c) - plain_out, 100 + 3000);
  /* both ends in HBM: both, added */
  CHECK_EQ_INT(cycles(1, 0, 1, &c) - plain_both, 100 + 10000 + 3000);
}

/* The presets carry the values derived from the libtpu probes (the notes in chips/NAME.json):
 * v6e pays for writing its result to HBM and nothing for reading beyond the latency; v5e a
 * base and for reading, nothing for writing; v5p for reading and writing; v4 a base and a
 * little for reading. */
static void presets(void) {
  tpu_chip c;
  tpu_diag d;
  CHECK(tpu_chip_load("v6e", &c, &d) == TPU_OK);
  CHECK_NEAR(c.matmul_write_s, 7.50e-7, 1e-9);
  CHECK(c.matmul_overhead_s == 0 && c.matmul_base_s == 0);
  CHECK(tpu_chip_load("v5e", &c, &d) == TPU_OK);
  CHECK_NEAR(c.matmul_base_s, 5.16e-7, 1e-9);
  CHECK_NEAR(c.matmul_overhead_s, 6.93e-7, 1e-9);
  CHECK(c.matmul_write_s == 0);
  CHECK(tpu_chip_load("v5p", &c, &d) == TPU_OK);
  CHECK_NEAR(c.matmul_overhead_s, 7.03e-7, 1e-9);
  CHECK_NEAR(c.matmul_write_s, 4.91e-7, 1e-9);
  CHECK(c.matmul_base_s == 0);
  CHECK(tpu_chip_load("v4", &c, &d) == TPU_OK);
  CHECK_NEAR(c.matmul_base_s, 5.10e-7, 1e-9);
  CHECK_NEAR(c.matmul_overhead_s, 5.1e-8, 1e-9);
  CHECK(c.matmul_write_s == 0);
}

int main(void) {
  start_terms();
  presets();
  CHECK_DONE();
}
