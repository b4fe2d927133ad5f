/* A compiled program's loop fusion relaying out small tiles between HBM arrays (copy_kind.c
 * tpu__hbm_relayout_tiles, the chips' hbm_relayout_tile_cycles): the fusion holds a copy that
 * keeps the lanes' dimension and reorders the others into T(2,128) tiles, its operand and
 * result in HBM. The XLA TPU compiler charges it its start, its transfers at the streaming rate
 * and hbm_relayout_tile_cycles per tile of the copy's result (libtpu probe off the families
 * corpus, bench/fidelity/probes/hbm_relayout.py: bf16[1000,33,2,2,33] transposed (0,4,1,3,2)
 * plus 1, 17,424 tiles, 215,544 cycles on v5e, 134,850 on v6e, 205,812 on v4; tpusim took its
 * transfers and stream pass alone, 82,467 / 48,334 / 79,536). Pinned at 10 %. A result in whole
 * registers (f32 T(8,128)) stays its transfers: no per-tile price. */
#include "timing_util.h"

/* tpusim's own compilation of a program with no layouts (JAX's out_layout_modes "default": the
 * compiler picks the result's layout, relayout.c): the transpose keeps the lanes' dimension and
 * its result, laid out as it pads least, is in T(2,128) / T(4,128) tiles, so its kernel is the
 * compiler's loop fusion above (copy_kind.c own_small_relayout_tiles; libtpu probes off the
 * corpus, bench/fidelity/probes/outlayout.py, data/outlayout.jsonl) */
#define OWN_T5                                                                                                 \
  "HloModule m\n"                                                                                               \
  "ENTRY e {\n"                                                                                                 \
  "  a = bf16[600,20,2,2,40] parameter(0)\n"                                                                    \
  "  t = bf16[600,40,20,2,2] transpose(a), dimensions={0,4,1,3,2}\n"                                           \
  "  one = bf16[] constant(1)\n"                                                                                \
  "  b = bf16[600,40,20,2,2] broadcast(one), dimensions={}\n"                                                   \
  "  ROOT r = bf16[600,40,20,2,2] add(t, b)\n"                                                                  \
  "}\n"
/* a transpose alone, the program's result */
#define OWN_ALONE                                                                                              \
  "HloModule m\n"                                                                                               \
  "ENTRY e {\n"                                                                                                 \
  "  a = f32[700,5,2,36] parameter(0)\n"                                                                        \
  "  ROOT t = f32[700,36,5,2] transpose(a), dimensions={0,3,1,2}\n"                                            \
  "}\n"
/* a row-major parameter whose small second dimension the transpose moves into the sublanes */
#define OWN_RM                                                                                                 \
  "HloModule m\n"                                                                                               \
  "ENTRY e {\n"                                                                                                 \
  "  a = f32[4,640,384] parameter(0)\n"                                                                         \
  "  t = f32[640,4,384] transpose(a), dimensions={1,0,2}\n"                                                    \
  "  one = f32[] constant(1)\n"                                                                                 \
  "  b = f32[640,4,384] broadcast(one), dimensions={}\n"                                                        \
  "  ROOT r = f32[640,4,384] add(t, b)\n"                                                                       \
  "}\n"

#define FUSED_SMALL                                                                                            \
  "HloModule m, is_scheduled=true\n"                                                                           \
  "fc {\n"                                                                                                     \
  "  p = bf16[1000,33,2,2,33]{0,3,4,2,1:T(2,128)(2,1)} parameter(0)\n"                                         \
  "  c = bf16[1000,33,2,2,33]{0,2,3,1,4:T(2,128)(2,1)} copy(p)\n"                                              \
  "  x = f32[1000,33,2,2,33]{0,2,3,1,4:T(2,128)} convert(c)\n"                                                 \
  "  one = f32[] constant(1)\n"                                                                                \
  "  b = f32[1000,33,2,2,33]{0,2,3,1,4:T(2,128)} broadcast(one), dimensions={}\n"                              \
  "  s = f32[1000,33,2,2,33]{0,2,3,1,4:T(2,128)} add(x, b)\n"                                                  \
  "  y = bf16[1000,33,2,2,33]{0,2,3,1,4:T(2,128)(2,1)} convert(s)\n"                                           \
  "  ROOT r = bf16[1000,33,33,2,2]{0,4,3,2,1:T(2,128)(2,1)} bitcast(y)\n"                                      \
  "}\n"                                                                                                        \
  "ENTRY e {\n"                                                                                                \
  "  a = bf16[1000,33,2,2,33]{0,3,4,2,1:T(2,128)(2,1)} parameter(0)\n"                                         \
  "  ROOT f = bf16[1000,33,33,2,2]{0,4,3,2,1:T(2,128)(2,1)} fusion(a), kind=kLoop, calls=fc\n"                 \
  "}\n"

/* the same relayout with 8 rows of f32 in the sublanes (whole registers) */
#define FUSED_WHOLE                                                                                            \
  "HloModule m, is_scheduled=true\n"                                                                           \
  "fc {\n"                                                                                                     \
  "  p = f32[501,33,8,8,17]{0,3,4,2,1:T(8,128)} parameter(0)\n"                                                \
  "  c = f32[501,33,8,8,17]{0,2,3,1,4:T(8,128)} copy(p)\n"                                                     \
  "  ROOT r = f32[501,17,33,8,8]{0,4,3,2,1:T(8,128)} bitcast(c)\n"                                             \
  "}\n"                                                                                                        \
  "ENTRY e {\n"                                                                                                \
  "  a = f32[501,33,8,8,17]{0,3,4,2,1:T(8,128)} parameter(0)\n"                                                \
  "  ROOT f = f32[501,17,33,8,8]{0,4,3,2,1:T(8,128)} fusion(a), kind=kLoop, calls=fc\n"                        \
  "}\n"


static void one(const char *name, double compiler) {
  tpu_chip c, off;
  tpu_diag d;
  if (tpu_chip_load(name, &c, &d) != TPU_OK) {
    fprintf(stderr, "cannot load %s\n", name);
    CHECK(0);
    return;
  }
  CHECK(c.hbm_relayout_tile_cycles > 0);
  off = c;
  off.hbm_relayout_tile_cycles = 0;
  double t = compiled_cycles(FUSED_SMALL, &c), t_off = compiled_cycles(FUSED_SMALL, &off);
  printf("%s bf16[1000,33,2,2,33] relaid into T(2,128) tiles HBM to HBM: %.0f cycles (the compiler: %.0f);"
         " without hbm_relayout_tile_cycles %.0f\n", name, t, compiler, t_off);
  CHECK(fabs(t / compiler - 1) < 0.10);
  CHECK(t_off > 0 && t_off < 0.6 * compiler);
}

/* own compilation of src on chip `name` within 10 % of the compiler's figure, and below 0.6 of
 * it without hbm_relayout_tile_cycles (tpusim before the rule: 0.30-0.49 of it) */
static void own(const char *what, const char *src, const char *name, double compiler) {
  tpu_chip c, off;
  tpu_diag d;
  if (tpu_chip_load(name, &c, &d) != TPU_OK) {
    CHECK(0);
    return;
  }
  off = c;
  off.hbm_relayout_tile_cycles = 0;
  double t = compiled_cycles(src, &c), t_off = compiled_cycles(src, &off);
  printf("%s own compilation of %s: %.0f cycles (the compiler: %.0f); without hbm_relayout_tile_cycles %.0f\n", name,
         what, t, compiler, t_off);
  CHECK(fabs(t / compiler - 1) < 0.10);
  CHECK(t_off > 0 && t_off < 0.6 * compiler);
}

int main(void) {
  own("bf16[600,20,2,2,40] (0,4,1,3,2) + 1", OWN_T5, "v4:core", 96836);
  own("f32[700,5,2,36] (0,3,1,2)", OWN_ALONE, "v5e", 16389);
  own("f32[4,640,384] (1,0,2) + 1", OWN_RM, "v5e", 38734);
  one("v5e", 215544);
  one("v6e", 134850);
  one("v4:core", 205812);
  /* whole registers: no per-tile price (the compiler: 340,608 cycles on v5e, its transfers) */
  tpu_chip c, off;
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &c, &d) == TPU_OK);
  off = c;
  off.hbm_relayout_tile_cycles = 0;
  double w = compiled_cycles(FUSED_WHOLE, &c), w_off = compiled_cycles(FUSED_WHOLE, &off);
  printf("v5e f32[501,33,8,8,17] in T(8,128) tiles: %.0f cycles, without the field %.0f (the compiler: 340,608)\n", w,
         w_off);
  CHECK(w > 0 && w == w_off);
  CHECK(fabs(w / 340608 - 1) < 0.10);
  CHECK_DONE();
}
