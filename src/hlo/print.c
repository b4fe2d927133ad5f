/* HLO printer: canonical text that parses back to the same module. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/bf16.h"
#include "base/strbuf.h"
#include "hlo/hlo.h"

/* NaN payload bits beyond the quiet bit, or 0 for the canonical quiet NaN. */
static uint64_t nan_payload(const tpu_tensor *t, int64_t i) {
  switch (t->dtype) {
    case TPU_F32: {
      uint32_t u = tpu_f32_bits(((const float *)t->data)[i]) & 0x7fffffu;
      return u == 0x400000u ? 0 : u;
    }
    case TPU_F64: {
      uint64_t u;
      memcpy(&u, &((const double *)t->data)[i], 8);
      u &= 0xfffffffffffffull;
      return u == 0x8000000000000ull ? 0 : u;
    }
    case TPU_BF16: {
      unsigned u = ((const tpu_bf16 *)t->data)[i].bits & 0x7fu;
      return u == 0x40u ? 0 : u;
    }
    case TPU_F8E4M3FN: return 0;
    case TPU_F8E5M2: {
      unsigned u = ((const tpu_f8 *)t->data)[i].bits & 0x3u;
      return u == 0x2u ? 0 : u;
    }
    default: {
      unsigned u = ((const tpu_f16 *)t->data)[i].bits & 0x3ffu;
      return u == 0x200u ? 0 : u;
    }
  }
}

/* Shortest decimal that reads back to the same value of the element type; NaNs keep
 * their sign and payload. */
static void put_float(tpu_strbuf *b, const tpu_tensor *t, int64_t i) {
  double v = tpu_tensor_get_f64(t, i);
  tpu_dtype dt = t->dtype;
  if (isnan(v)) {
    uint64_t pl = nan_payload(t, i);
    tpu_strbuf_printf(b, "%snan", signbit(v) ? "-" : "");
    if (pl) tpu_strbuf_printf(b, "(0x%llx)", (unsigned long long)pl);
    return;
  }
  if (isinf(v)) {
    tpu_strbuf_printf(b, v < 0 ? "-inf" : "inf");
    return;
  }
  char buf[64];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    double r = strtod(buf, NULL);
    int same;
    if (dt == TPU_F32) same = (float)r == (float)v && signbit(r) == signbit(v);
    else if (dt == TPU_BF16) same = tpu_bf16_from_f64(r).bits == tpu_bf16_from_f64(v).bits;
    else if (dt == TPU_F16) same = tpu_f16_from_f64(r).bits == tpu_f16_from_f64(v).bits;
    else if (tpu_dtype_is_f8(dt)) same = tpu_f8_from_f64(r, dt == TPU_F8E4M3FN).bits == tpu_f8_from_f64(v, dt == TPU_F8E4M3FN).bits;
    else same = r == v && signbit(r) == signbit(v);
    if (same) break;
  }
  tpu_strbuf_printf(b, "%s", buf);
}

static void put_elem(tpu_strbuf *b, const tpu_tensor *t, int64_t i) {
  if (tpu_dtype_is_complex(t->dtype)) { /* "(re, im)" as XLA prints it */
    tpu_tensor parts = *t;
    parts.dtype = tpu_dtype_complex_part(t->dtype);
    tpu_strbuf_printf(b, "(");
    put_float(b, &parts, 2 * i);
    tpu_strbuf_printf(b, ", ");
    put_float(b, &parts, 2 * i + 1);
    tpu_strbuf_printf(b, ")");
  } else if (t->dtype == TPU_PRED) tpu_strbuf_printf(b, tpu_tensor_get_i64(t, i) ? "true" : "false");
  else if (tpu_dtype_is_float(t->dtype)) put_float(b, t, i);
  else if (t->dtype == TPU_U64) tpu_strbuf_printf(b, "%llu", (unsigned long long)((const uint64_t *)t->data)[i]);
  else tpu_strbuf_printf(b, "%lld", (long long)tpu_tensor_get_i64(t, i));
}

static void put_level(tpu_strbuf *b, const tpu_tensor *t, int dim, int64_t *idx) {
  if (dim == t->rank) {
    put_elem(b, t, (*idx)++);
    return;
  }
  tpu_strbuf_printf(b, "{");
  for (int64_t i = 0; i < t->dims[dim]; i++) {
    if (i) tpu_strbuf_printf(b, ", ");
    put_level(b, t, dim + 1, idx);
  }
  tpu_strbuf_printf(b, "}");
}

void tpu__literal_put(tpu_strbuf *b, const tpu_tensor *t) {
  int64_t idx = 0;
  put_level(b, t, 0, &idx);
}

static void put_attrs(tpu_strbuf *b, const tpu_attr *a, int n) {
  for (int i = 0; i < n; i++) tpu_strbuf_printf(b, ", %s=%s", a[i].name, a[i].value);
}

static void put_instr(tpu_strbuf *b, const tpu_instr *in) {
  tpu_strbuf_printf(b, "  %s%s = ", in->is_root ? "ROOT " : "", in->name);
  tpu__shape_put(b, &in->shape);
  tpu_strbuf_printf(b, " %s(", tpu_op_name(in->op));
  if (in->op == TPU_OP_CONSTANT) {
    tpu__literal_put(b, in->literal);
  } else if (in->op == TPU_OP_PARAMETER) {
    tpu_strbuf_printf(b, "%lld", (long long)in->index);
  } else {
    for (int i = 0; i < in->noperands; i++) tpu_strbuf_printf(b, i ? ", %s" : "%s", in->operands[i]->name);
  }
  tpu_strbuf_printf(b, ")");
  put_attrs(b, in->attrs, in->nattrs);
  tpu_strbuf_printf(b, "\n");
}

char *tpu_hlo_print(const tpu_module *m) {
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  tpu_strbuf_printf(&b, "HloModule %s", m->name);
  put_attrs(&b, m->attrs, m->nattrs);
  tpu_strbuf_printf(&b, "\n");
  for (int i = 0; i < m->ncomps; i++) {
    const tpu_comp *c = m->comps[i];
    tpu_strbuf_printf(&b, "\n%s%s {\n", c->is_entry ? "ENTRY " : "", c->name);
    for (int k = 0; k < c->ninstrs; k++) put_instr(&b, c->instrs[k]);
    tpu_strbuf_printf(&b, "}");
    if (c->execution_thread) tpu_strbuf_printf(&b, ", execution_thread=\"%s\"", c->execution_thread);
    tpu_strbuf_printf(&b, "\n");
  }
  return tpu_strbuf_take(&b);
}
