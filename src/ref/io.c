/* Program inputs and results: .npy files checked against parameter shapes. */
#include <string.h>

#include "base/bf16.h"
#include "base/npy.h"
#include "ref/ref.h"

void tpu_ref_describe(const tpu_tensor *t, char *buf, size_t n) {
  tpu_shape s;
  memset(&s, 0, sizeof s);
  s.dtype = t->dtype;
  s.rank = t->rank;
  memcpy(s.dims, t->dims, sizeof s.dims);
  tpu_shape_print(&s, buf, n);
}

/* Loads one input and checks it against the parameter; widens/rounds f32 -> bf16/f16. */
tpu_status tpu_ref_load_input(const char *path, int idx, const tpu_shape *s, tpu_tensor *t, tpu_diag *d) {
  if (s->dtype == TPU_TUPLE || s->dtype == TPU_TOKEN) {
    char want[256];
    tpu_shape_print(s, want, sizeof want);
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_loc_at(path, 0, 0), "parameter %d has type %s, which cannot come from a .npy file",
                    idx, want);
  }
  TPU_TRY(tpu_npy_read(path, t, d));
  return tpu_ref_accept_input(t, idx, s, tpu_loc_at(path, 0, 0), d);
}

tpu_status tpu_ref_accept_input(tpu_tensor *t, int idx, const tpu_shape *s, tpu_loc loc, tpu_diag *d) {
  char want[256];
  tpu_shape_print(s, want, sizeof want);
  if (s->dtype == TPU_TUPLE || s->dtype == TPU_TOKEN) {
    tpu_tensor_free(t);
    return TPU_FAIL(d, TPU_ERR_ARG, loc, "parameter %d has type %s, which cannot come from an array", idx, want);
  }
  int dims_ok = t->rank == s->rank;
  for (int i = 0; dims_ok && i < s->rank; i++) dims_ok = t->dims[i] == s->dims[i];
  const char *why = NULL;
  if (!dims_ok) {
    why = "dimensions";
  } else if (t->dtype != s->dtype) {
    if (t->dtype == TPU_F32 && (s->dtype == TPU_BF16 || s->dtype == TPU_F16 || tpu_dtype_is_f8(s->dtype))) {
      tpu_tensor r;
      tpu_status st = tpu_tensor_alloc(&r, s->dtype, s->rank, s->dims, d);
      if (st != TPU_OK) {
        tpu_tensor_free(t);
        return st;
      }
      int64_t n = tpu_tensor_numel(t);
      const float *src = t->data;
      if (s->dtype == TPU_BF16) tpu_bf16_from_f32_n(src, r.data, (size_t)n);
      for (int64_t i = 0; i < n && s->dtype != TPU_BF16; i++) {
        if (s->dtype == TPU_F16) ((tpu_f16 *)r.data)[i] = tpu_f16_from_f32(src[i]);
        else ((tpu_f8 *)r.data)[i] = tpu_f8_from_f64(src[i], s->dtype == TPU_F8E4M3FN);
      }
      tpu_tensor_free(t);
      *t = r;
    } else if ((s->dtype == TPU_S4 && t->dtype == TPU_S8) || (s->dtype == TPU_U4 && t->dtype == TPU_U8)) {
      /* NumPy has no 4-bit integer: an int8/uint8 array stands for it, each value in range */
      const int64_t n = tpu_tensor_numel(t), lo = s->dtype == TPU_S4 ? -8 : 0, hi = lo + 15;
      for (int64_t i = 0; i < n; i++) {
        int64_t v = tpu_tensor_get_i64(t, i);
        if (v < lo || v > hi) {
          tpu_tensor_free(t);
          return TPU_FAIL(d, TPU_ERR_ARG, loc, "input %d: element %lld is %lld, out of range for parameter %d's %s",
                          idx, (long long)i, (long long)v, idx, tpu_dtype_name(s->dtype));
        }
      }
      t->dtype = s->dtype;
    } else {
      why = "element type";
    }
  }
  if (why) {
    char got[256];
    tpu_ref_describe(t, got, sizeof got);
    tpu_tensor_free(t);
    return TPU_FAIL(d, TPU_ERR_ARG, loc, "input %d is %s but parameter %d is %s (the %s differ)", idx,
                    got, idx, want, why);
  }
  return TPU_OK;
}

