/* A short scan's window kernel streaming from HBM (compile/backend/scan_window.c): its blocks
 * along the scan reread the window's halo, as the XLA TPU compiler's v5p kernel does. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util.h"
#include "unit/compile/backend_util.h"

/* The HBM bytes of the op named r in `src` compiled for v5p with scan_window_bytes `budget`
 * (the preset's when negative); -1 on failure. */
static double scan_bytes(const char *src, int64_t budget) {
  tpu_chip c;
  tpu_diag d;
  CHECK(tpu_chip_load("v5p", &c, &d) == TPU_OK);
  if (budget >= 0) c.scan_window_bytes = budget;
  c.xprefetch_max_bytes = 1; /* the scan reads its parameter from HBM */
  tpu_module *m = NULL;
  tpu_program *p = compile_src_on(src, &c, &m);
  double b = named_op_value(p, &c, "r", 0);
  tpu_program_free(p);
  tpu_module_free(m);
  return b;
}

/* s32[80,128,128] scanned along axis 0 (as the tune program cummax_80x126x80_ax0_s32's
 * kernel, its tiles whole here so that input and output hold the same bytes): the compiler's
 * v5p kernel takes 4 blocks of 20 rows and the window in halves of 40, each step reading 59
 * input rows of 16 sublane tiles (scan_window.py: output window [20,16,1], input [59,16,1],
 * iterations 4 x 2); s32[33,160,256] (as cummin_158x129x33_ax2_s32's) takes 2 blocks of 17
 * rows reading 49 each ([17,20,1], [49,20,1]); s32[100,8,128], one lane tile, 2 blocks of 50
 * rows reading 149 each ([50,1,1], [149,1,1]: libtpu probe, one per TensorCore). A block
 * choice or halo changed fails. */
static void scan_blocks(void) {
  const char *fmt = "HloModule s\nmx {\n a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT s = s32[] maximum(a, b)\n}\n"
                    "ENTRY e {\n x = s32[%s]{2,1,0} parameter(0)\n z = s32[] constant(-2147483648)\n"
                    " ROOT r = s32[%s]{2,1,0} reduce-window(x, z), window={size=%s pad=%s}, to_apply=mx\n}\n";
  struct { const char *shape, *size, *pad; double in, fin, fout; } cases[] = {
      {"80,128,128", "80x1x1", "79_0x0_0x0_0", 80.0 * 128 * 128 * 4, 4 * 2 * 59 / 80.0, 4 * 2 * 20 / 80.0},
      {"33,160,256", "33x1x1", "32_0x0_0x0_0", 33.0 * 160 * 256 * 4, 2 * 49 / 33.0, 2 * 17 / 33.0},
      /* one lane tile: two blocks of 50 rows, one per TensorCore, though one pass fits */
      {"100,8,128", "100x1x1", "99_0x0_0x0_0", 100.0 * 8 * 128 * 4, 2 * 149 / 100.0, 2 * 50 / 100.0},
  };
  for (int i = 0; i < 3; i++) {
    char src[700];
    snprintf(src, sizeof src, fmt, cases[i].shape, cases[i].shape, cases[i].size, cases[i].pad);
    double with = scan_bytes(src, -1), without = scan_bytes(src, 0);
    double want = cases[i].in * (cases[i].fin + cases[i].fout), once = 2 * cases[i].in;
    printf("v5p scan of s32[%s] along axis 0: %.0f HBM bytes (blocks with halo: %.0f), %.0f without the rule (%.0f)\n",
           cases[i].shape, with, want, without, once);
    CHECK(fabs(with / want - 1) < 0.01);
    CHECK(fabs(without / once - 1) < 0.01);
  }
}

/* The HBM bytes of the first op whose name starts with `name` in `src` compiled for v4 (one
 * TensorCore) through the HLO passes; -1 on failure. */
static double op_bytes_v4(const char *src, const char *name) {
  tpu_chip c;
  tpu_module *m = NULL;
  tpu_program *p = compile_for_with("v4:core", src, 1, &c, &m); /* through the HLO passes */
  tpu_timeline tl;
  double b = -1;
  if (p && time_program(p, &c, &tl)) {
    for (int i = 0; i < tl.nops && b < 0; i++)
      if (!strncmp(tl.ops[i].name, name, strlen(name))) b = tl.ops[i].hbm_bytes;
    tpu_timeline_free(&tl);
  }
  tpu_program_free(p);
  tpu_module_free(m);
  return b;
}

/* A major scan's kernel reads and writes its value row-major, the scanned dimension most
 * major (scan_window.c tpu__scan_row_major): f32[126,80,65] scanned along axis 1 runs on
 * [80,126,65] with 126 rows in the sublanes and 65 of 128 lanes, 80 x 128 x 128 x 4 bytes
 * each way, as the compiler's {2,0,1} kernel (cumsum_126x80x65_ax1_f32), not the least padded
 * tiling (65 rows in the sublanes, 126 in the lanes) that a value of its shape takes
 * otherwise: about half those bytes, 5.3 MB in all. */
static void scan_row_major(void) {
  const char *src = "HloModule s\nadd {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
                    "ENTRY e {\n x = f32[126,80,65] parameter(0)\n z = f32[] constant(0)\n"
                    " ROOT r = f32[126,80,65] reduce-window(x, z), window={size=1x80x1 pad=0_0x79_0x0_0}, to_apply=add\n}\n";
  double got = op_bytes_v4(src, "scan.block"), want = 2.0 * 80 * 128 * 128 * 4;
  printf("v4 scan kernel of f32[126,80,65] along axis 1: %.0f HBM bytes (row-major %.0f)\n", got, want);
  CHECK(fabs(got / want - 1) < 0.01);
}

int main(void) {
  scan_blocks();
  scan_row_major();
  CHECK_DONE();
}
