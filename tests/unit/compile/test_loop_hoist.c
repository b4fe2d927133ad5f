/* A loop-invariant narrowing convert leaves the loop (compile/passes/convert_hoist.c), as
 * the XLA TPU compiler hoists a layer loop's f32 -> bf16 weight converts: one convert of the
 * whole stacked weights before the loop, which then slices the bf16 stack. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "passes_util.h"

/* A scan over 3 layers: layer i's f32[8,8] weights sliced from the stack W (passed on
 * unchanged), converted to bf16 and multiplied in. `extra` also reads the f32 stack in the
 * body for something else (a sum), which keeps the convert where it is. */
static char *scan(int extra) {
  static char buf[4096];
  snprintf(buf, sizeof buf,
           "HloModule scan\n"
           "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
           "cond {\n s = (s32[], bf16[8,8], f32[3,8,8]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
           " n = s32[] constant(3)\n ROOT c = pred[] compare(i, n), direction=LT\n}\n"
           "body {\n s = (s32[], bf16[8,8], f32[3,8,8]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
           " x = bf16[8,8] get-tuple-element(s), index=1\n W = f32[3,8,8] get-tuple-element(s), index=2\n"
           " z = s32[] constant(0)\n ws = f32[1,8,8] dynamic-slice(W, i, z, z), dynamic_slice_sizes={1,8,8}\n"
           " w = f32[8,8] reshape(ws)\n wb = bf16[8,8] convert(w)\n"
           " y0 = bf16[8,8] dot(x, wb), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
           "%s"
           " one = s32[] constant(1)\n i1 = s32[] add(i, one)\n"
           " ROOT r = (s32[], bf16[8,8], f32[3,8,8]) tuple(i1, y, W)\n}\n"
           "ENTRY e {\n x0 = bf16[8,8] parameter(0)\n W0 = f32[3,8,8] parameter(1)\n i0 = s32[] constant(0)\n"
           " init = (s32[], bf16[8,8], f32[3,8,8]) tuple(i0, x0, W0)\n"
           " l = (s32[], bf16[8,8], f32[3,8,8]) while(init), condition=cond, body=body\n"
           " h = bf16[8,8] get-tuple-element(l), index=1\n Wl = f32[3,8,8] get-tuple-element(l), index=2\n"
           " hf = f32[8,8] convert(h)\n w1 = f32[1,8,8] slice(Wl), slice={[0:1], [0:8], [0:8]}\n w0 = f32[8,8] reshape(w1)\n"
           " ROOT o = f32[8,8] add(hf, w0)\n}\n",
           extra ? " zf = f32[] constant(0)\n t = f32[] reduce(W, zf), dimensions={0,1,2}, to_apply=add\n"
                   " tb = bf16[] convert(t)\n tbb = bf16[8,8] broadcast(tb), dimensions={}\n y = bf16[8,8] add(y0, tbb)\n"
                 : " y = bf16[8,8] tanh(y0)\n");
  return buf;
}

static void test_hoist(void) {
  char *txt = dump_src_after(scan(0), "/tmp/tpusim_test_hoist.hlo", "simplify");
  if (!txt) return;
  /* the whole stack converted once (before the loop), the loop carrying and slicing bf16 */
  int whole = count_in(txt, "bf16[3,8,8] convert("), layer = count_in(txt, "bf16[8,8] convert(");
  int sliced = count_in(txt, "bf16[1,8,8] dynamic-slice(");
  printf("hoisted convert: whole-stack converts %d, per-layer converts %d, bf16 slices %d\n", whole, layer, sliced);
  CHECK_EQ_INT(whole, 1);
  CHECK_EQ_INT(layer, 0);
  CHECK_EQ_INT(sliced, 1);
  /* the loop's f32 result element (read after the loop) is the unconverted input */
  CHECK(count_in(txt, "f32[1,8,8] slice(") + count_in(txt, "f32[8,8] slice(") >= 1);
  free(txt);
  /* the f32 stack read in the body for anything but the convert: left alone */
  txt = dump_src_after(scan(1), "/tmp/tpusim_test_hoist2.hlo", "simplify");
  if (!txt) return;
  CHECK_EQ_INT(count_in(txt, "bf16[3,8,8] convert("), 0);
  CHECK_EQ_INT(count_in(txt, "bf16[8,8] convert("), 1);
  free(txt);
}

/* A microbatch loop around the layer loop, passing the stack on: the convert leaves the inner
 * loop, then the outer one (converted once for every microbatch). */
static void test_nested(void) {
  const char *src =
      "HloModule nest\n"
      "icond {\n s = (s32[], bf16[8,8], f32[3,8,8]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
      " n = s32[] constant(3)\n ROOT c = pred[] compare(i, n), direction=LT\n}\n"
      "ibody {\n s = (s32[], bf16[8,8], f32[3,8,8]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
      " x = bf16[8,8] get-tuple-element(s), index=1\n W = f32[3,8,8] get-tuple-element(s), index=2\n"
      " z = s32[] constant(0)\n ws = f32[1,8,8] dynamic-slice(W, i, z, z), dynamic_slice_sizes={1,8,8}\n"
      " w = f32[8,8] reshape(ws)\n wb = bf16[8,8] convert(w)\n"
      " y = bf16[8,8] dot(x, wb), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      " one = s32[] constant(1)\n i1 = s32[] add(i, one)\n"
      " ROOT r = (s32[], bf16[8,8], f32[3,8,8]) tuple(i1, y, W)\n}\n"
      "ocond {\n s = (s32[], bf16[8,8], f32[3,8,8]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
      " n = s32[] constant(2)\n ROOT c = pred[] compare(i, n), direction=LT\n}\n"
      "obody {\n s = (s32[], bf16[8,8], f32[3,8,8]) parameter(0)\n i = s32[] get-tuple-element(s), index=0\n"
      " x = bf16[8,8] get-tuple-element(s), index=1\n W = f32[3,8,8] get-tuple-element(s), index=2\n"
      " z = s32[] constant(0)\n ii = (s32[], bf16[8,8], f32[3,8,8]) tuple(z, x, W)\n"
      " l = (s32[], bf16[8,8], f32[3,8,8]) while(ii), condition=icond, body=ibody\n"
      " h = bf16[8,8] get-tuple-element(l), index=1\n"
      " one = s32[] constant(1)\n i1 = s32[] add(i, one)\n"
      " ROOT r = (s32[], bf16[8,8], f32[3,8,8]) tuple(i1, h, W)\n}\n"
      "ENTRY e {\n x0 = bf16[8,8] parameter(0)\n W0 = f32[3,8,8] parameter(1)\n i0 = s32[] constant(0)\n"
      " init = (s32[], bf16[8,8], f32[3,8,8]) tuple(i0, x0, W0)\n"
      " m = (s32[], bf16[8,8], f32[3,8,8]) while(init), condition=ocond, body=obody\n"
      " ROOT o = bf16[8,8] get-tuple-element(m), index=1\n}\n";
  char *txt = dump_src_after(src, "/tmp/tpusim_test_hoist3.hlo", "simplify");
  if (!txt) return;
  int whole = count_in(txt, "bf16[3,8,8] convert("), layer = count_in(txt, "bf16[8,8] convert(");
  printf("nested loops: whole-stack converts %d, per-layer converts %d\n", whole, layer);
  CHECK_EQ_INT(whole, 1);
  CHECK_EQ_INT(layer, 0);
  const char *e = strstr(txt, "ENTRY");
  CHECK(e && strstr(e, "bf16[3,8,8] convert(")); /* before the outer loop */
  free(txt);
}

int main(void) {
  test_hoist();
  test_nested();
  CHECK_DONE();
}
