/* The per-element stream costs of a vector kernel (compile/backend/layout.c stream_costs):
 * a reduce's counted over the tiles of the array it reads, padding included, and the
 * unfused-op cost only for a widened sum narrowed back to its 16-bit type
 * (bench/fidelity/probes/reduce_tiles.py); a 16-bit result's stream pass over its tiles, a
 * transpose's too (bench/fidelity/probes/transpose_tiles.py). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util.h"
#include "unit/compile/backend_util.h"

/* JAX's sum of bf16 x over axes 0 and 1: converted to f32, summed, the result f32 or, with
 * `narrow`, converted back to bf16. */
static void sum_src(char *buf, size_t n, int r, int c, int narrow) {
  char tail[160];
  if (narrow) snprintf(tail, sizeof tail, "  r = f32[%d,%d] reduce(c, z), dimensions={0,1}, to_apply=add\n"
                       "  ROOT o = bf16[%d,%d] convert(r)\n", r, c, r, c);
  else snprintf(tail, sizeof tail, "  ROOT r = f32[%d,%d] reduce(c, z), dimensions={0,1}, to_apply=add\n", r, c);
  snprintf(buf, n,
           "HloModule s\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
           "ENTRY e {\n  a = bf16[33,50,%d,%d] parameter(0)\n  c = f32[33,50,%d,%d] convert(a)\n  z = f32[] constant(0)\n%s}\n",
           r, c, r, c, tail);
}

/* The xbytes of the one kernel `src` compiles to on v5e (through the HLO passes: the
 * converts fuse with the reduce), -1 when it is not one kernel. */
static double kernel_xbytes(const char *src, tpu_chip *c) {
  tpu_module *m = NULL;
  tpu_program *p = compile_for_with("v5e", src, 1, c, &m);
  double x = -1;
  if (p && p->nops == 1) x = p->ops[0].xbytes;
  tpu_program_free(p);
  tpu_module_free(m);
  return x;
}

/* The XLA TPU compiler charges the sum of [33,50,64,65] as that of [33,50,64,128] and
 * [33,50,65,65] as [33,50,72,128] (f32 [33,50,64,65] 413,709 cycles on v5e, the same as
 * [33,50,64,128]); an f32 result no unfused-op cost, a bf16 one lone_op_bytes besides. */
static void sum_over_tiles(void) {
  char src[1024];
  tpu_chip c;
  const double tiled64 = 33.0 * 50 * 64 * 128, tiled65 = 33.0 * 50 * 72 * 128;
  sum_src(src, sizeof src, 64, 65, 0);
  double x64 = kernel_xbytes(src, &c);
  sum_src(src, sizeof src, 65, 65, 0);
  double x65 = kernel_xbytes(src, &c);
  sum_src(src, sizeof src, 64, 128, 0);
  double x128 = kernel_xbytes(src, &c);
  sum_src(src, sizeof src, 64, 65, 1);
  double xn = kernel_xbytes(src, &c);
  printf("sum of bf16[33,50,R,C] on v5e, xbytes: 64x65 %.0f, 65x65 %.0f, 64x128 %.0f (stream pass over the tiles: "
         "%.0f, %.0f); narrowed to bf16 64x65 %.0f (and the unfused-op cost: %.0f)\n",
         x64, x65, x128, c.stream_pass_bytes * tiled64, c.stream_pass_bytes * tiled65, xn,
         (c.stream_pass_bytes + c.lone_op_bytes) * tiled64);
  CHECK(c.stream_pass_bytes > 0 && c.lone_op_bytes > 0);
  CHECK_NEAR(x64, c.stream_pass_bytes * tiled64, 1);
  CHECK_NEAR(x65, c.stream_pass_bytes * tiled65, 1);
  CHECK_NEAR(x128, x64, 1);
  CHECK_NEAR(xn, (c.stream_pass_bytes + c.lone_op_bytes) * tiled64, 1);
}

/* A reduce of a value laid out afresh inside its kernel (a reshape between the array in
 * memory and the reduce) keeps the count of its own elements, its reduced rows padded to 8. */
static void reshaped_source(void) {
  const char *src =
      "HloModule s\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
      "ENTRY e {\n  a = f32[64,64,130] parameter(0)\n  b = f32[64,64,2,65] reshape(a)\n  z = f32[] constant(0)\n"
      "  ROOT r = f32[64,64,2] reduce(b, z), dimensions={3}, to_apply=add\n}\n";
  tpu_chip c;
  double x = kernel_xbytes(src, &c);
  printf("sum over the 65 of a reshaped f32[64,64,130]: xbytes %.0f (its elements: %.0f)\n", x,
         c.stream_pass_bytes * 64 * 64 * 130);
  CHECK(x < 1.01 * (c.stream_pass_bytes + c.lone_op_bytes) * 64 * 64 * 130);
}

/* The stream pass of a 16-bit result is paid per element of its tiles: the XLA TPU compiler
 * charges bf16(a * b + a) over f32 [33,33,64,65] as over [33,33,64,128] (287,497 cycles on
 * v5e, both) and [33,33,65,65] as [33,33,72,128] (326,281), bf16 operands alike, on v4, v5e,
 * v5p and v6e; f32 results, without the pass, move only their padded bytes. */
static void narrow_result_over_tiles(void) {
  char src[600];
  const char *fmt = "HloModule n\nENTRY e {\n  a = f32[33,33,%d,%d] parameter(0)\n  b = f32[33,33,%d,%d] parameter(1)\n"
                    "  c = f32[33,33,%d,%d] multiply(a, b)\n  d = f32[33,33,%d,%d] add(c, a)\n"
                    "  ROOT r = bf16[33,33,%d,%d] convert(d)\n}\n";
  tpu_chip c;
  snprintf(src, sizeof src, fmt, 64, 65, 64, 65, 64, 65, 64, 65, 64, 65);
  double x65 = kernel_xbytes(src, &c);
  snprintf(src, sizeof src, fmt, 64, 128, 64, 128, 64, 128, 64, 128, 64, 128);
  double x128 = kernel_xbytes(src, &c);
  snprintf(src, sizeof src, fmt, 65, 65, 65, 65, 65, 65, 65, 65, 65, 65);
  double x6565 = kernel_xbytes(src, &c);
  printf("bf16(a * b + a) over f32[33,33,R,C] on v5e, xbytes: 64x65 %.0f, 64x128 %.0f, 65x65 %.0f (over the tiles: "
         "%.0f, %.0f)\n", x65, x128, x6565, c.stream_pass_bytes * 33 * 33 * 64 * 128,
         c.stream_pass_bytes * 33 * 33 * 72 * 128);
  CHECK_NEAR(x65, c.stream_pass_bytes * 33 * 33 * 64 * 128, 1);
  CHECK_NEAR(x128, x65, 1);
  CHECK_NEAR(x6565, c.stream_pass_bytes * 33 * 33 * 72 * 128, 1);
}

/* A transpose kernel streams whole tiles too: its narrow result's stream pass is paid per element
 * of the tiles it writes, padding included (the XLA TPU compiler's s8[33,33,64,33] transposed
 * (1,2,3,0), 64 in the lanes and 33 in the rows of its 8-row tiles: 84,540 cycles on v5e, its
 * 5.6 MB both ways plus 4 B per element of [33,33,40,128]; families transpose_33x33x64x33_p1230_s8;
 * fused with an add, bf16[16,33,65,64] transposed (0,1,3,2): 80,495, transpose_16x33x65x64_p0132_fused_bf16). */
static void transpose_over_tiles(void) {
  tpu_chip c;
  double xs8 = kernel_xbytes("HloModule t\nENTRY e {\n  a = s8[33,33,64,33] parameter(0)\n"
                             "  ROOT t = s8[33,64,33,33] transpose(a), dimensions={1,2,3,0}\n}\n", &c);
  double xbf = kernel_xbytes("HloModule t\nENTRY e {\n  a = bf16[16,33,65,64] parameter(0)\n"
                             "  t = bf16[16,33,64,65] transpose(a), dimensions={0,1,3,2}\n  one = bf16[] constant(1)\n"
                             "  b = bf16[16,33,64,65] broadcast(one), dimensions={}\n  ROOT r = bf16[16,33,64,65] add(t, b)\n}\n",
                             &c);
  const double s8tiles = 33.0 * 33 * 40 * 128, bftiles = 16.0 * 33 * 64 * 128;
  printf("transpose on v5e, xbytes: s8[33,33,64,33] (1,2,3,0) %.0f (over the tiles: %.0f; over its elements %.0f), "
         "bf16[16,33,65,64] (0,1,3,2) + 1 %.0f (over the tiles: %.0f)\n", xs8, c.stream_pass_bytes * s8tiles,
         c.stream_pass_bytes * 33 * 33 * 64 * 33, xbf, c.stream_pass_bytes * bftiles);
  CHECK_NEAR(xs8, c.stream_pass_bytes * s8tiles, 1);
  CHECK_NEAR(xbf, c.stream_pass_bytes * bftiles, 1);
}

/* A compiled program's copy inside a fusion is the fusion loop's transpose: the fusion streams
 * the tiles it writes, as tpusim's own transpose kernel does (the XLA TPU compiler's
 * copy_bitcast_fusion of families tune transpose_33x33x64x33_p1230_s8, s8 {2,3,1,0} ->
 * {2,0,3,1}: 84,540 cycles on v5e, as the transpose above; stream_cost.c streams_tiles).
 * The same copy as a kernel of its own keeps the count of its elements. */
static void fused_copy_over_tiles(void) {
  tpu_chip c;
  double xf = kernel_xbytes(
      "HloModule t\n\n%fc (p: s8[33,33,64,33]) -> s8[33,64,33,33] {\n"
      "  %p = s8[33,33,64,33]{2,3,1,0:T(8,128)(4,1)} parameter(0)\n"
      "  %c = s8[33,33,64,33]{2,0,3,1:T(8,128)(4,1)} copy(%p)\n"
      "  ROOT %b = s8[33,64,33,33]{1,3,2,0:T(8,128)(4,1)} bitcast(%c)\n}\n\n"
      "ENTRY %e (x: s8[33,33,64,33]) -> s8[33,64,33,33] {\n"
      "  %x = s8[33,33,64,33]{2,3,1,0:T(8,128)(4,1)} parameter(0)\n"
      "  ROOT %f = s8[33,64,33,33]{1,3,2,0:T(8,128)(4,1)} fusion(%x), kind=kLoop, calls=%fc\n}\n",
      &c);
  double xc = kernel_xbytes("HloModule t\n\nENTRY %e (x: s8[33,33,64,33]) -> s8[33,33,64,33] {\n"
                            "  %x = s8[33,33,64,33]{2,3,1,0:T(8,128)(4,1)} parameter(0)\n"
                            "  ROOT %c = s8[33,33,64,33]{2,0,3,1:T(8,128)(4,1)} copy(%x)\n}\n",
                            &c);
  const double tiles = 33.0 * 33 * 40 * 128, elems = 33.0 * 33 * 64 * 33;
  printf("compiled s8[33,33,64,33] {2,3,1,0} -> {2,0,3,1} on v5e, xbytes: in a fusion %.0f (over the tiles: %.0f), "
         "a copy kernel %.0f (over its elements: %.0f)\n", xf, c.stream_pass_bytes * tiles, xc, c.stream_pass_bytes * elems);
  CHECK_NEAR(xf, c.stream_pass_bytes * tiles, 1);
  CHECK(xc < 0.5 * c.stream_pass_bytes * tiles);
}

/* The reduce kernel's xbytes of `src` on v5e (the program's only reduce kernel), -1 if none. */
static double reduce_xbytes(const char *src, tpu_chip *c) {
  tpu_module *m = NULL;
  tpu_program *p = compile_for_with("v5e", src, 1, c, &m);
  double x = -1;
  for (int i = 0; p && i < p->nops; i++)
    if (p->ops[i].kind && !strcmp(p->ops[i].kind, "reduce")) x = p->ops[i].xbytes;
  tpu_program_free(p);
  tpu_module_free(m);
  return x;
}

/* A sum over the rows a gather read (an embedding bag) is an unfused reduce in the XLA TPU
 * compiler (its gather_fusion takes in no consumer) and pays the unfused-op cost over its
 * tiles: f32 [256,50,1024] summed over axis 1 after a gather costs 442,208 cycles on v5e, as
 * the lone reduce of a parameter f32[256,56,1024] (libtpu probes; layout.c gathered_operand).
 * An elementwise op after a gather is not (f32[4096,1024] x 2: 77,160 cycles on v4, the fused rate). */
static void sum_of_gathered_rows(void) {
  const char *src =
      "HloModule g\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
      "ENTRY e {\n  t = f32[1000,1024] parameter(0)\n  i = s32[256,50,1] parameter(1)\n"
      "  g = f32[256,50,1024] gather(t, i), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, "
      "index_vector_dim=2, slice_sizes={1,1024}\n  z = f32[] constant(0)\n"
      "  ROOT r = f32[256,1024] reduce(g, z), dimensions={1}, to_apply=add\n}\n";
  tpu_chip c;
  double x = reduce_xbytes(src, &c);
  const double tiled = 256.0 * 56 * 1024;
  printf("sum over axis 1 of gathered f32[256,50,1024] on v5e: xbytes %.0f (fused: %.0f; unfused: %.0f)\n", x,
         c.stream_pass_bytes * tiled, (c.stream_pass_bytes + c.lone_op_bytes) * tiled);
  CHECK(c.lone_op_bytes > 0);
  CHECK_NEAR(x, (c.stream_pass_bytes + c.lone_op_bytes) * tiled, 1);
}

int main(void) {
  transpose_over_tiles();
  fused_copy_over_tiles();
  sum_over_tiles();
  narrow_result_over_tiles();
  reshaped_source();
  sum_of_gathered_rows();
  CHECK_DONE();
}
