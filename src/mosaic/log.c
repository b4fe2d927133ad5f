/* pl.debug_print in a kernel: tpu.log (scalars, "$0".."$9" placeholders when formatted) and
 * tpu.log_buffer (a vector stored to a VMEM buffer, printed after its text). A TPU writes them
 * to the runtime's log; tpusim writes each to stderr, one message a call, when it computes
 * values (the timing count runs the kernel without printing). */
#include <stdio.h>
#include "base/alloc.h"
#include <string.h>

#include "base/strbuf.h"
#include "mosaic/mosaic_int.h"

static void putnum(tpu_strbuf *b, tpu_dtype dt, double x) {
  if (tpu_dtype_is_float(dt)) tpu_strbuf_printf(b, "%.8g", x);
  else tpu_strbuf_printf(b, "%lld", (long long)x);
}

static int hexval(char ch) {
  return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

/* The tag attribute's text ("s:" then the line form's %XX escapes), placeholders $k replaced by
 * operand k when formatted. */
static void text(mo_ctx *c, const tpu_mo_op *op, int formatted, tpu_strbuf *b) {
  const char *a = tpu_mo_attr(op, "tag");
  if (!a || strncmp(a, "s:", 2)) return;
  for (const char *p = a + 2; *p; p++) {
    if (p[0] == '%' && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
      char ch = (char)(hexval(p[1]) * 16 + hexval(p[2]));
      tpu_strbuf_append(b, &ch, 1);
      p += 2;
    } else if (formatted && p[0] == '$' && p[1] >= '0' && p[1] <= '9' && p[1] - '0' < op->nopd) {
      const mo_val *v = &c->vals[op->opd[p[1] - '0']];
      putnum(b, v->dt, v->kind == TPU_MO_MEMREF ? 0 : v->v[0]);
      p++;
    } else {
      tpu_strbuf_append(b, p, 1);
    }
  }
}

/* A memref's elements as nested brackets, one row a line (NumPy's layout). */
static void elems(tpu_strbuf *b, const mo_val *m, int d, int64_t off) {
  tpu_strbuf_append(b, "[", 1);
  for (int64_t i = 0; i < m->dims[d]; i++) {
    if (i) tpu_strbuf_append(b, d == m->rank - 1 ? " " : "\n ", d == m->rank - 1 ? 1 : 2);
    int64_t o = off + i * m->str[d];
    if (d == m->rank - 1) putnum(b, m->dt, m->base[o]);
    else elems(b, m, d + 1, o);
  }
  tpu_strbuf_append(b, "]", 1);
}

tpu_status tpu__mo_log(mo_ctx *c, const tpu_mo_op *op) {
  if (c->count) return TPU_OK;
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  int64_t formatted = 0;
  tpu_mo_attr_int(op, "formatted", &formatted);
  text(c, op, op->code == TPU_MO_TLOG && formatted, &b);
  if (op->code == TPU_MO_TLOG_BUFFER && op->nopd >= 1) {
    const mo_val *m = &c->vals[op->opd[0]];
    if (m->kind == TPU_MO_MEMREF && m->base && m->rank > 0) elems(&b, m, 0, m->off);
  }
  tpu_strbuf_append(&b, "\n", 1);
  char *msg = tpu_strbuf_take(&b);
  if (msg) fputs(msg, stderr); /* one write a message: devices of a pod print from their threads */
  tpu_free(msg);
  return TPU_OK;
}
