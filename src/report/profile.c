/* Per-op profile: the program's operations by time, with FLOPs, bytes, bound and padding waste. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "report/report.h"
#include "report/source.h"

static int cmp_row(const void *a, const void *b) {
  const tpu_profile_row *x = a, *y = b;
  if (x->cycles != y->cycles) return x->cycles > y->cycles ? -1 : 1;
  int c = strcmp(x->name ? x->name : "", y->name ? y->name : "");
  return c ? c : x->op - y->op;
}

tpu_status tpu_report_profile(const tpu_timeline *t, double clock_hz, tpu_profile *out, tpu_diag *d) {
  memset(out, 0, sizeof *out);
  if (!(clock_hz > 0)) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "profile: no clock frequency");
  if (t->nops <= 0) return TPU_OK;
  out->rows = tpu_calloc((size_t)t->nops, sizeof *out->rows);
  if (!out->rows) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory for the op profile");
  out->nrows = t->nops;
  for (int i = 0; i < t->nops; i++) {
    const tpu_op_stat *s = &t->ops[i];
    tpu_profile_row *r = &out->rows[i];
    r->op = i;
    r->name = s->name ? s->name : "?";
    r->src = s->src;
    r->kind = s->kind ? s->kind : "?";
    r->count = s->count;
    r->cycles = s->cycles;
    r->time_s = (double)s->cycles / clock_hz;
    r->frac = t->total_cycles > 0 ? (double)s->cycles / (double)t->total_cycles : 0;
    r->flops = s->flops;
    r->padded_flops = s->padded_flops;
    r->hbm_bytes = s->hbm_bytes;
    r->ai = s->hbm_bytes > 0 ? s->flops / s->hbm_bytes : INFINITY;
    r->flops_per_s = r->time_s > 0 ? s->flops / r->time_s : 0;
    r->padding_waste = s->padded_flops > s->flops && s->padded_flops > 0 ? (s->padded_flops - s->flops) / s->padded_flops : 0;
    r->memory_bound = s->memory_bound;
  }
  qsort(out->rows, (size_t)out->nrows, sizeof *out->rows, cmp_row);
  return TPU_OK;
}

void tpu_profile_free(tpu_profile *p) {
  if (!p) return;
  tpu_free(p->rows);
  memset(p, 0, sizeof *p);
}

/* Compact number: 3 significant digits with an SI prefix. */
static void num(char *buf, size_t n, double v) {
  static const char *const pre[] = {"", "k", "M", "G", "T", "P", "E"};
  int k = 0;
  while (fabs(v) >= 1000 && k < 6) v /= 1000, k++;
  snprintf(buf, n, "%.3g%s", v, pre[k]);
}

void tpu_report_print_profile(FILE *f, const tpu_profile *p, int top) {
  int n = top > 0 && top < p->nrows ? top : p->nrows;
  if (n == 0) return;
  int any_src = 0;
  for (int i = 0; i < n; i++) any_src |= p->rows[i].src != NULL;
  fprintf(f, "top ops by time:\n");
  fprintf(f, "  %-28s %-16s %6s %10s %6s %9s %9s %9s %-7s %6s%s\n", "op", "kind", "count", "time(us)", "%step", "FLOPs",
          "HBM B", "FLOP/B", "bound", "pad%", any_src ? "  from (JAX op @ source)" : "");
  for (int i = 0; i < n; i++) {
    const tpu_profile_row *r = &p->rows[i];
    char fl[16], by[16], ai[16];
    num(fl, sizeof fl, r->flops);
    num(by, sizeof by, r->hbm_bytes);
    if (isinf(r->ai)) snprintf(ai, sizeof ai, "-");
    else num(ai, sizeof ai, r->ai);
    char from[160] = "";
    if (r->src) tpu_op_source_format(r->src, from, sizeof from);
    fprintf(f, "  %-28.28s %-16.16s %6lld %10.3f %6.1f %9s %9s %9s %-7s %6.1f%s%.100s\n", r->name, r->kind,
            (long long)r->count, r->time_s * 1e6, 100 * r->frac, fl, by, ai, r->memory_bound ? "memory" : "compute",
            100 * r->padding_waste, from[0] ? "  " : "", from);
  }
  if (n < p->nrows) fprintf(f, "  ... %d more op(s) in the report\n", p->nrows - n);
}
