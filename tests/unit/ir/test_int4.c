/* The 4-bit integers s4/u4: parsed, held one element per byte in tpusim's memory, two per
 * byte on the TPU (libtpu's s4[4096,4096]{1,0:T(64,128)(8,1)E(4)} is 8 MiB of arguments),
 * values wrapped to 4 bits and floats saturated into their range as XLA converts them. */
#include <stdio.h>
#include <string.h>

#include "base/dtype.h"
#include "check.h"
#include "hlo/hlo.h"
#include "ir/ir.h"
#include "ir/layout.h"
#include "ir/verify.h"
#include "ref/ref.h"

static tpu_module *parse(const char *src) {
  tpu_module *m = NULL;
  tpu_diag d;
  tpu_status st = tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d);
  if (st == TPU_OK) st = tpu_ir_verify(m, &d);
  if (st != TPU_OK) fprintf(stderr, "%s\n", d.msg);
  CHECK_EQ_INT(st, TPU_OK);
  return m;
}

static void test_types(void) {
  tpu_dtype t;
  CHECK(tpu_dtype_parse("s4", 2, &t) && t == TPU_S4);
  CHECK(tpu_dtype_parse("u4", 2, &t) && t == TPU_U4);
  CHECK_EQ_INT(tpu_dtype_bits(TPU_S4), 4);
  CHECK_EQ_INT(tpu_dtype_bits(TPU_U4), 4);
  CHECK_EQ_INT(tpu_dtype_bits(TPU_S8), 8);
  CHECK(tpu_dtype_is_signed(TPU_S4) && !tpu_dtype_is_signed(TPU_U4) && tpu_dtype_is_int(TPU_U4));
}

/* Packed two per byte on the TPU, the E(4) of libtpu's layouts accepted. */
static void test_packed_bytes(void) {
  tpu_module *m = parse("HloModule m\nENTRY e {\n"
                        "  w = s4[4096,4096]{1,0:T(64,128)(8,1)E(4)} parameter(0)\n"
                        "  u = u4[3,5]{1,0} parameter(1)\n"
                        "  ROOT t = (s4[4096,4096]{1,0:T(64,128)(8,1)E(4)}, u4[3,5]{1,0}) tuple(w, u)\n}\n");
  CHECK_EQ_INT(tpu_shape_physical_bytes(&m->entry->params[0]->shape), 8 << 20);
  CHECK_EQ_INT(tpu_shape_physical_bytes(&m->entry->params[1]->shape), 8); /* 15 nibbles */
  tpu_module_free(m);
}

/* Values: s32 -> s4 wraps, an s4 add wraps, f32 -> u4 saturates (NaN -> 0), constants. */
static void test_values(void) {
  tpu_module *m = parse("HloModule m\nENTRY e {\n"
                        "  i = s32[6] constant({-9, -8, 7, 8, 17, -1})\n"
                        "  a = s4[6] convert(i)\n"
                        "  k = s4[6] constant({7, 7, 7, -8, 0, -8})\n"
                        "  s = s4[6] add(a, k)\n"
                        "  f = f32[6] constant({-3, 15.9, 16, 1e9, nan, 2.5})\n"
                        "  u = u4[6] convert(f)\n"
                        "  r1 = s32[6] convert(s)\n"
                        "  r2 = s32[6] convert(u)\n"
                        "  ROOT t = (s32[6], s32[6]) tuple(r1, r2)\n}\n");
  tpu_tensor out;
  tpu_diag d;
  CHECK_EQ_INT(tpu_ref_run(m, NULL, 0, &out, &d), TPU_OK);
  /* XLA CPU (jax 0.10.2): s4(-9,-8,7,8,17,-1) = 7,-8,7,-8,1,-1; + k wraps */
  const int32_t want1[6] = {-2, -1, -2, 0, 1, 7}, want2[6] = {0, 15, 15, 15, 0, 2};
  CHECK_EQ_INT(out.ntuple, 2);
  for (int i = 0; i < 6; i++) {
    CHECK_EQ_INT(((const int32_t *)out.elems[0].data)[i], want1[i]);
    CHECK_EQ_INT(((const int32_t *)out.elems[1].data)[i], want2[i]);
  }
  tpu_tensor_free(&out);
  tpu_module_free(m);
}

int main(void) {
  test_types();
  test_packed_bytes();
  test_values();
  CHECK_DONE();
}
