/* Window kernels in VMEM (split from test_vmem.c): a pool's window kernel with its input
 * prefetched, in place, relaid in VMEM, and a scan's window kernel (its window start). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "chip/timing.h"
#include "unit/compile/backend_util.h"

static const char *pool_bf16 =
    "HloModule m\nmx { a = bf16[] parameter(0)\n b = bf16[] parameter(1)\n ROOT c = bf16[] maximum(a, b) }\n"
    "ENTRY e {\n x = bf16[64,20,20,128] parameter(0)\n i = bf16[] constant(-inf)\n"
    " ROOT y = bf16[64,9,9,128] reduce-window(x, i), window={size=1x3x3x1 stride=1x2x2x1}, to_apply=mx\n}\n";

/* cycles of the pool in src (its input prefetched: xbytes of it), reading nothing from HBM
 * in its kernel */
static double pool_cycles_of(const tpu_chip *c, const char *src, int64_t xbytes) {
  tpu_module *m = parse(src);
  CHECK(m != NULL);
  if (!m) return 0;
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = c;
  o.precision_override = -1;
  tpu_program *p = NULL;
  tpu_diag d;
  double cyc = 0;
  tpu_timeline tl;
  CHECK(tpu_compile(m, &o, &p, &d) == TPU_OK);
  if (p) {
    CHECK_EQ_INT(p->xprefetch_bytes, xbytes);
    CHECK(p->nops == 1 && p->ops[0].window);
    for (int i = 0; i < p->ninsns; i++) /* the init value is no transfer (layout.c read_bytes) */
      CHECK(p->insns[i].opc != TPU_ISA_DMA_IN || p->insns[i].onchip);
    if (time_program(p, c, &tl)) {
      cyc = (double)tl.total_cycles;
      tpu_timeline_free(&tl);
    }
    tpu_program_free(p);
  }
  tpu_module_free(m);
  return cyc;
}

static double pool_cycles(const tpu_chip *c) { return pool_cycles_of(c, pool_bf16, 64LL * 20 * 20 * 128 * 2); }

/* A window kernel reading its input in place in VMEM moves only its result: its start and
 * stream passes ride on the result's transfers, its reads take no port time and its start
 * no HBM latency beyond window_start_cycles (chip/timing.c OP_IN_PLACE). libtpu max pools
 * of f32[16,20,20,256] 3x3, the input prefetched into VMEM, on v5e: 14,792 cycles at stride
 * 1 and 6,453 at stride 2 (bench/fidelity/probes/pool_inplace.py); tpusim charged 16,608 and
 * 7,893 before (+12 %, +22 %), the reads' share of the start and the latency on top. */
static void pool_window_in_place(void) {
  tpu_chip c;
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &c, &d) == TPU_OK);
  const char *fmt = "HloModule m\nmx { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = f32[] maximum(a, b) }\n"
                    "ENTRY e {\n x = f32[16,20,20,256] parameter(0)\n i = f32[] constant(-inf)\n"
                    " ROOT y = f32[16,%d,%d,256] reduce-window(x, i), window={size=1x3x3x1 stride=1x%dx%dx1}, to_apply=mx\n}\n";
  const int stride[2] = {1, 2}, out[2] = {18, 9};
  const double compiler[2] = {14792, 6453};
  for (int k = 0; k < 2; k++) {
    char src[512];
    snprintf(src, sizeof src, fmt, out[k], out[k], stride[k], stride[k]);
    double t = pool_cycles_of(&c, src, 16LL * 20 * 20 * 256 * 4);
    printf("v5e f32[16,20,20,256] 3x3/%d max pool from VMEM: %.0f cycles (compiler %.0f)\n", stride[k], t, compiler[k]);
    CHECK(fabs(t / compiler[k] - 1) < 0.09);
  }
}

/* A parameter laid out for the pool that alone reads it (relayout.c, window_layout.c) is
 * copied by a vector kernel whose result stays in VMEM on a one-core chip, as the compiler's
 * `copy` of f32[8,112,112,3]{2,1,3,0} into {2,0,3,1} writes memory space S(1) on v5e and
 * v6e for its window to read (avgpool2d_8x112x112x3_w3s3_same_f32); v5p's is in HBM. */
static void pool_relayout_in_vmem(void) {
  const char *src = "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = f32[] add(a, b) }\n"
                    "ENTRY e {\n x = f32[8,112,112,3]{2,1,3,0} parameter(0)\n z = f32[] constant(0)\n"
                    " ROOT y = f32[8,38,38,3] reduce-window(x, z), window={size=1x3x3x1 stride=1x3x3x1 "
                    "pad=0_0x1_1x1_1x0_0}, to_apply=add\n}\n";
  const char *chips[] = {"v5e", "v5p"};
  for (int k = 0; k < 2; k++) {
    tpu_chip c;
    tpu_module *m = NULL;
    tpu_program *p = compile_for_with(chips[k], src, 1, &c, &m);
    CHECK(p != NULL);
    if (p) {
      int op = op_named(p, "copy.relayout"), h = hbm_named(p, "copy.relayout");
      printf("pool's parameter relayout on %s: op %d, %s\n", chips[k], op, h < 0 ? "VMEM" : "HBM");
      CHECK(op >= 0);
      CHECK(k == 0 ? h < 0 : h >= 0);
    }
    tpu_program_free(p);
    tpu_module_free(m);
  }
}

static void pool_window_kernel(void) {
  tpu_chip c, nostart, noread;
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &c, &d) == TPU_OK);
  nostart = c;
  nostart.window_start_cycles = 0;
  noread = nostart;
  noread.vmem_read_cost = 0;
  double t = pool_cycles(&c), t0 = pool_cycles(&nostart), tr = pool_cycles(&noread);
  const double bpc = tpu_chip_hbm_stream_bw(&c) / c.clock_hz, read = 64.0 * 20 * 20 * 128 * 2 / bpc;
  printf("v5e bf16[64,20,20,128] 3x3/2 max pool from VMEM: %.0f cycles, %.0f without the window start "
         "(%.0f), %.0f without vmem_read_cost (a read: %.0f)\n", t, t0, c.window_start_cycles, tr, read);
  CHECK(c.window_start_cycles > 0 && c.vmem_read_cost > 0);
  CHECK(fabs((t - t0) / c.window_start_cycles - 1) < 0.15); /* spread over its transfers, partly overlapped */
  CHECK(fabs(t0 - tr) < 2); /* the VMEM read is free */
  CHECK(fabs(t / 12056.0 - 1) < 0.15);
  /* pinned: the start adds all of itself here (its share rides on the result's transfers,
   * which nothing overlaps: pool_window_in_place; 0.894 of it before, spread over the reads
   * too), so a charge moved by 10 % either way fails */
  CHECK(fabs((t - t0) / c.window_start_cycles - 1.0) < 0.05);
}

/* A scan along a major dimension is the compiler's depthwise window kernel, as a pool is
 * (layout.c pool_window): where it reads or writes HBM it pays the window's start, and where
 * its input and result both stay in VMEM it pays none (timing.c resident_pass_cycles). libtpu
 * (bench/fidelity/probes/scan_start.py): f32[64,8,128] max scan along axis 0, its input
 * prefetched into VMEM and its result in HBM, 4,682 cycles on v5e (a fixed 3,600, the pooling
 * kernel's start, and 16.9 a row); tpusim 2,943 without the start. The compiler's scans between
 * relayout copies into and out of VMEM (S(1)) cost it 2,660-2,866 cycles whatever their size
 * (families cummin_128x8x128_ax2_rev_s32, cumsum_1000x1024_ax1_f32 on v5e and v6e). */
static const char *scan_fmt =
    "HloModule p\nr { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = f32[] maximum(a, b) }\n"
    "fc { p0 = f32[64,8,128]{2,1,0:T(8,128)S(1)} parameter(0)\n i = f32[] constant(-inf)\n"
    " ROOT w = f32[64,8,128]{2,1,0:T(8,128)%s} reduce-window(p0, i), window={size=64x1x1 pad=63_0x0_0x0_0}, to_apply=r }\n"
    "ENTRY e {\n x = f32[64,8,128]{2,1,0:T(8,128)} parameter(0)\n"
    " c0 = f32[64,8,128]{2,1,0:T(8,128)S(1)} copy(x)\n"
    " f = f32[64,8,128]{2,1,0:T(8,128)%s} fusion(c0), kind=kOutput, calls=fc\n"
    " ROOT c1 = f32[64,8,128]{2,1,0:T(8,128)} copy(f)\n}\n";

static double scan_kernel_cycles(const tpu_chip *c, int resident, int *window, int *scan) {
  char src[1024];
  const char *space = resident ? "S(1)" : "";
  snprintf(src, sizeof src, scan_fmt, space, space);
  tpu_module *m = NULL;
  tpu_program *p = compile_src_on(src, c, &m);
  int op = p ? op_named(p, "f") : -1;
  CHECK(op >= 0);
  *window = op >= 0 && p->ops[op].window;
  *scan = op >= 0 && p->ops[op].scan;
  double t = named_op_value(p, c, "f", 1);
  tpu_program_free(p);
  tpu_module_free(m);
  return t;
}

static void scan_window_kernel(void) {
  tpu_chip c, nostart;
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &c, &d) == TPU_OK);
  nostart = c;
  nostart.window_start_cycles = 0;
  int w = 0, sc = 0, w0 = 0, sc0 = 0;
  double t = scan_kernel_cycles(&c, 0, &w, &sc), t0 = scan_kernel_cycles(&nostart, 0, &w0, &sc0);
  double r = scan_kernel_cycles(&c, 1, &w, &sc), r0 = scan_kernel_cycles(&nostart, 1, &w0, &sc0);
  printf("v5e f32[64,8,128] scan's window kernel from VMEM into HBM: %.0f cycles (compiler 4,682), %.0f "
         "without the window start (%.0f); kept in VMEM: %.0f, %.0f without the start\n",
         t, t0, c.window_start_cycles, r, r0);
  CHECK(w && sc);
  CHECK(fabs(t / 4682.0 - 1) < 0.15);
  CHECK(fabs((t - t0) / c.window_start_cycles - 1) < 0.15);
  /* pins (session 23's figures): the kernel 4,196 cycles, its window start all of the start */
  CHECK(fabs(t / 4196.0 - 1) < 0.10);
  CHECK(fabs((t - t0) / c.window_start_cycles - 1) < 0.10);
  CHECK(fabs(r - r0) < 2);    /* resident: no start */
  CHECK(r < 2866.0 * 1.15);   /* the compiler's resident scans: 2,660-2,866 cycles */
  /* v4's scans start otherwise than its pools (chip scan_start_cycles) */
  tpu_chip v4;
  CHECK(tpu_chip_load("v4", &v4, &d) == TPU_OK);
  CHECK(v4.scan_start_cycles > 0 && tpu_chip_window_start(&v4, 1) == v4.scan_start_cycles &&
        tpu_chip_window_start(&v4, 0) == v4.window_start_cycles);
  CHECK(tpu_chip_window_start(&c, 1) == c.window_start_cycles);
}

int main(void) {
  pool_window_kernel();
  pool_window_in_place();
  scan_window_kernel();
  pool_relayout_in_vmem();
  CHECK_DONE();
}
