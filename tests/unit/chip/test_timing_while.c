/* Kernels inside a while loop's body (timing.c issue, tpu__timing_run_range): a kernel's own
 * HBM read, fetched ahead while the kernel before it ran, is usable no earlier than the HBM
 * latency after the kernel's barrier, as the XLA TPU compiler costs each kernel of a body
 * from its own start; the same kernels outside a loop keep the overlap. */
#include "timing_util.h" /* assemble */

static const char *k_head =
    ".program chip=\"v5e\"\n"
    ".op name=\"a\" kind=\"fusion:kLoop\" flops=100 padded_flops=100 bytes=8192 padded_bytes=8192\n"
    ".op name=\"b\" kind=\"fusion:kLoop\" flops=100 padded_flops=100 bytes=8192 padded_bytes=8192\n"
    ".hbm name=\"x\" offset=0 bytes=4096\n.hbm name=\"y\" offset=4096 bytes=4096\n"
    ".hbm name=\"u\" offset=8192 bytes=4096\n.hbm name=\"w\" offset=12288 bytes=4096\n"
    ".vmem op=0 offset=0 slot_bytes=4096 slots=1\n.vmem op=0 offset=4096 slot_bytes=4096 slots=1\n"
    ".vmem op=1 offset=8192 slot_bytes=4096 slots=1\n.vmem op=1 offset=12288 slot_bytes=4096 slots=1\n";

/* Two independent kernels, each reading 4 KiB from HBM (the second's read may start while the
 * first runs) and writing 4 KiB; `open`/`close` wrap them in a loop or not. */
static const char *k_body =
    "%skernel op=0\n%sdma.in dst=v0[0] hbm=h0 bytes=4096 op=0 prefetch=1\n"
    "%svpu src=v0[0] dst=v1[0] vregs=1 ops=1 op=0\n%sdma.out src=v1[0] hbm=h1 bytes=4096 op=0\n"
    "%skernel op=1\n%sdma.in dst=v2[0] hbm=h2 bytes=4096 op=1 prefetch=1\n"
    "%svpu src=v2[0] dst=v3[0] vregs=1 ops=1 op=1\n%sdma.out src=v3[0] hbm=h3 bytes=4096 op=1\n%s";

/* The second kernel's cycles per run, in a while loop of `trips` (0: no loop). */
static double second_kernel(const tpu_chip *chip, int trips) {
  char body[2000], text[4000];
  const char *ind = trips ? "  " : "";
  char open[64];
  snprintf(open, sizeof open, trips ? "loop trips=%d what=\"while.1\"\n" : "", trips);
  snprintf(body, sizeof body, k_body, open, ind, ind, ind, ind, ind, ind, ind, trips ? "end\n" : "");
  snprintf(text, sizeof text, "%s%s", k_head, body);
  tpu_program *p = assemble(text);
  CHECK(p != NULL);
  if (!p) return -1;
  tpu_timeline tl;
  tpu_diag d;
  double c = -1;
  if (tpu_timing_run(p, chip, 0, &tl, &d) == TPU_OK) {
    c = (double)tl.ops[1].cycles / (double)(tl.ops[1].count ? tl.ops[1].count : 1);
    tpu_timeline_free(&tl);
  }
  tpu_program_free(p);
  return c;
}

int main(void) {
  tpu_chip chip;
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &chip, &d) == TPU_OK);
  const double kov = chip.kernel_overhead_s * chip.clock_hz;
  const double lat = (chip.hbm_latency_s > 0 ? chip.hbm_latency_s : TPU_TIMING_DEFAULT_HBM_LATENCY_S) * chip.clock_hz;
  CHECK(kov > 0 && lat > 0);
  double in_loop = second_kernel(&chip, 16), straight = second_kernel(&chip, 0);
  printf("second kernel: %.0f cycles a run in a while loop, %.0f outside one (start %.0f, latency %.0f)\n", in_loop,
         straight, kov, lat);
  /* in the loop: its start, then the latency, then its work */
  CHECK(in_loop >= kov + lat);
  /* outside: its read fetched while the first kernel ran, the latency hidden */
  CHECK(straight >= 0 && straight < kov + lat);
  /* pinned: the loop adds exactly the latency (750 of 750 cycles on v5e), so a charge moved
   * by 10 % either way fails */
  CHECK(fabs((in_loop - straight) / lat - 1) < 0.05);
  CHECK_DONE();
}
