/* The ISA text form: disassembler (tpu_program_text) and assembler (tpu_program_parse). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "chip/program.h"

/* ---- Disassembler ---- */

static void put_str(tpu_strbuf *b, const char *s) {
  tpu_strbuf_append(b, "\"", 1);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') tpu_strbuf_append(b, "\\", 1);
    if ((unsigned char)*s < 0x20)
      tpu_strbuf_append(b, "?", 1); /* control characters never occur in HLO names */
    else
      tpu_strbuf_append(b, s, 1);
  }
  tpu_strbuf_append(b, "\"", 1);
}

static void put_vref(tpu_strbuf *b, tpu_vref r) {
  if (r.div == 0)
    tpu_strbuf_printf(b, "v%d[%d]", r.buf, r.off);
  else if (r.div == 1)
    tpu_strbuf_printf(b, r.off ? "v%d[i+%d]" : "v%d[i]", r.buf, r.off);
  else if (r.off)
    tpu_strbuf_printf(b, "v%d[i/%d+%d]", r.buf, r.div, r.off);
  else
    tpu_strbuf_printf(b, "v%d[i/%d]", r.buf, r.div);
}

static void put_insn(tpu_strbuf *b, const tpu_insn *in, int index, int depth) {
  tpu_strbuf_printf(b, "%6d  %*s%s", index, 2 * depth, "", tpu_isa_name(in->opc));
  int nsrc = 0;
  for (int s = 0; s < TPU_INSN_MAX_SRC; s++)
    if (in->src[s].buf >= 0) {
      if (nsrc++)
        tpu_strbuf_append(b, ",", 1);
      else
        tpu_strbuf_append(b, " src=", 5);
      put_vref(b, in->src[s]);
    }
  if (in->dst.buf >= 0) {
    tpu_strbuf_append(b, " dst=", 5);
    put_vref(b, in->dst);
  }
  if (in->hbm >= 0) tpu_strbuf_printf(b, " hbm=h%d", in->hbm);
  if (in->hbm2 >= 0) tpu_strbuf_printf(b, " hbm2=h%d", in->hbm2);
  if (in->bytes) tpu_strbuf_printf(b, " bytes=%lld", (long long)in->bytes);
  if (in->opc == TPU_ISA_MATMUL) {
    tpu_strbuf_printf(b, " m=%lld k=%lld n=%lld b=%lld mxus=%d passes=%d dtype=%s",
                      (long long)in->m, (long long)in->k, (long long)in->n, (long long)in->b,
                      in->mxus, in->passes, tpu_dtype_name(in->dtype));
    if (in->steps) tpu_strbuf_printf(b, " steps=%lld", (long long)in->steps);
    if (in->min_cycles) tpu_strbuf_printf(b, " min_cycles=%lld", (long long)in->min_cycles);
    if (in->i8_wide) tpu_strbuf_append(b, " i8_wide=1", 10);
  }
  if (in->vregs) tpu_strbuf_printf(b, " vregs=%lld", (long long)in->vregs);
  if (in->opc == TPU_ISA_ICI) tpu_strbuf_printf(b, " cycles=%lld", (long long)in->cycles);
  if (in->opc == TPU_ISA_ICI && in->lane) tpu_strbuf_printf(b, " links=%d", in->lane);
  if (in->ops) tpu_strbuf_printf(b, " ops=%lld", (long long)in->ops);
  if (in->opc == TPU_ISA_LOOP || in->opc == TPU_ISA_COND || in->opc == TPU_ISA_CASE)
    tpu_strbuf_printf(b, " trips=%lld", (long long)in->trips);
  if (in->at >= 0) tpu_strbuf_printf(b, " at=%d", in->at);
  if (in->what) {
    tpu_strbuf_append(b, " what=", 6);
    put_str(b, in->what);
  }
  if (in->op >= 0) tpu_strbuf_printf(b, " op=%d", in->op);
  if (in->pmod) tpu_strbuf_printf(b, " when=%d:%d", in->pmod, in->prem);
  if (in->pflat) tpu_strbuf_append(b, " flat=1", 7);
  if (in->prefetch) tpu_strbuf_printf(b, " prefetch=%d", in->prefetch);
  if (in->onchip) tpu_strbuf_append(b, " onchip=1", 9);
  tpu_strbuf_append(b, "\n", 1);
}

char *tpu_program_text(const tpu_program *p) {
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  tpu_strbuf_printf(&b, "; tpusim program (text form: docs/isa.md)\n.program chip=");
  put_str(&b, p->chip);
  tpu_strbuf_printf(&b, " hbm_footprint=%lld hbm_peak=%lld vmem_peak=%lld", (long long)p->hbm_footprint,
                    (long long)p->hbm_peak, (long long)p->vmem_peak);
  if (p->hbm_arg || p->hbm_out || p->hbm_temp)
    tpu_strbuf_printf(&b, " hbm_arg=%lld hbm_out=%lld hbm_alias=%lld hbm_temp=%lld", (long long)p->hbm_arg,
                      (long long)p->hbm_out, (long long)p->hbm_alias, (long long)p->hbm_temp);
  if (p->host_temp) tpu_strbuf_printf(&b, " host_temp=%lld", (long long)p->host_temp);
  if (p->xprefetch_bytes > 0)
    tpu_strbuf_printf(&b, " xprefetch_hbm=%d xprefetch_bytes=%lld xprefetch_cmem=%d", p->xprefetch_hbm,
                      (long long)p->xprefetch_bytes, p->xprefetch_cmem);
  tpu_strbuf_printf(&b, "\n");
  for (int i = 0; i < p->nops; i++) {
    const tpu_prog_op *o = &p->ops[i];
    tpu_strbuf_printf(&b, ".op name=");
    put_str(&b, o->name ? o->name : "?");
    tpu_strbuf_printf(&b, " kind=");
    put_str(&b, o->kind ? o->kind : "?");
    tpu_strbuf_printf(&b, " flops=%.17g padded_flops=%.17g bytes=%.17g padded_bytes=%.17g",
                      o->flops, o->padded_flops, o->bytes, o->padded_bytes);
    if (o->m || o->k || o->n || o->b)
      tpu_strbuf_printf(&b, " m=%lld k=%lld n=%lld b=%lld", (long long)o->m, (long long)o->k,
                        (long long)o->n, (long long)o->b);
    if (o->tiles) tpu_strbuf_printf(&b, " tiles=%lld", (long long)o->tiles);
    if (o->xbytes > 0) tpu_strbuf_printf(&b, " xbytes=%.17g", o->xbytes);
    if (o->out_scale > 1) tpu_strbuf_printf(&b, " out_scale=%.17g", o->out_scale);
    if (o->out_bytes > 0) tpu_strbuf_printf(&b, " out_bytes=%.17g", o->out_bytes);
    if (o->scalar) tpu_strbuf_printf(&b, " scalar=1");
    if (o->starts > 1) tpu_strbuf_printf(&b, " starts=%d", o->starts);
    if (o->relayout) tpu_strbuf_printf(&b, " relayout=1");
    if (o->reduce_epilogue) tpu_strbuf_printf(&b, " reduce_epilogue=1");
    if (o->min_cycles > 0) tpu_strbuf_printf(&b, " min_cycles=%.17g", o->min_cycles);
    if (o->min_body_cycles > 0) tpu_strbuf_printf(&b, " min_body_cycles=%.17g", o->min_body_cycles);
    if (o->window) tpu_strbuf_printf(&b, " window=1");
    if (o->scan) tpu_strbuf_printf(&b, " scan=1");
    if (o->copy_out) tpu_strbuf_printf(&b, " copy_out=1");
    if (o->blocks > 1) tpu_strbuf_printf(&b, " blocks=%d", o->blocks);
    if (o->vmem_write) tpu_strbuf_printf(&b, " vmem_write=1");
    if (o->dma) tpu_strbuf_printf(&b, " dma=1");
    tpu_strbuf_printf(&b, "   ; op %d\n", i);
  }
  for (int i = 0; i < p->nhbm; i++) {
    tpu_strbuf_printf(&b, ".hbm name=");
    put_str(&b, p->hbm[i].name);
    tpu_strbuf_printf(&b, " offset=%lld bytes=%lld   ; h%d\n", (long long)p->hbm[i].offset,
                      (long long)p->hbm[i].bytes, i);
  }
  for (int i = 0; i < p->nvmem; i++)
    tpu_strbuf_printf(&b, ".vmem op=%d offset=%lld slot_bytes=%lld slots=%d%s   ; v%d\n",
                      p->vmem[i].op, (long long)p->vmem[i].offset, (long long)p->vmem[i].slot_bytes,
                      p->vmem[i].nslots, p->vmem[i].store_frees ? " store_frees=1" : "", i);
  int depth = 0;
  for (int i = 0; i < p->ninsns; i++) {
    const tpu_insn *in = &p->insns[i];
    int d = depth;
    if (in->opc == TPU_ISA_END || in->opc == TPU_ISA_ENDCOND || in->opc == TPU_ISA_CASE) d--;
    put_insn(&b, in, i, d < 0 ? 0 : d);
    if (in->opc == TPU_ISA_LOOP || in->opc == TPU_ISA_COND) depth++;
    if (in->opc == TPU_ISA_END || in->opc == TPU_ISA_ENDCOND) depth--;
    if (depth < 0) depth = 0;
  }
  return tpu_strbuf_take(&b);
}

tpu_status tpu_program_print(const tpu_program *p, FILE *f, tpu_diag *d) {
  char *s = tpu_program_text(p);
  if (!s) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory printing the program");
  size_t n = strlen(s);
  size_t w = fwrite(s, 1, n, f);
  tpu_free(s);
  if (w != n) return TPU_FAIL(d, TPU_ERR_IO, tpu_noloc(), "cannot write the program text");
  return TPU_OK;
}

/* ---- Assembler ---- */

typedef struct {
  const char *file;
  const char *s, *end; /* current line [s, end) */
  const char *line0;
  int line;
  tpu_diag *d;
  tpu_program *p;
  char sbuf[1024]; /* last string value */
} lx;

static tpu_status perr(lx *x, const char *at, const char *fmt, const char *arg) {
  int col = (int)(at - x->line0) + 1;
  return TPU_FAIL(x->d, TPU_ERR_PARSE, tpu_loc_at(x->file, x->line, col), fmt, arg);
}

static void skip_ws(lx *x) {
  while (x->s < x->end && (*x->s == ' ' || *x->s == '\t' || *x->s == '\r')) x->s++;
  if (x->s < x->end && *x->s == ';') x->s = x->end;
}

/* Reads a word of [A-Za-z0-9_.] into buf; returns its length (0 if none). */
static size_t word(lx *x, char *buf, size_t cap) {
  size_t n = 0;
  while (x->s < x->end && n + 1 < cap &&
         ((*x->s >= 'a' && *x->s <= 'z') || (*x->s >= 'A' && *x->s <= 'Z') ||
          (*x->s >= '0' && *x->s <= '9') || *x->s == '_' || *x->s == '.'))
    buf[n++] = *x->s++;
  buf[n] = 0;
  return n;
}

static tpu_status parse_i64(lx *x, int64_t lo, int64_t *out) {
  const char *at = x->s;
  char buf[32];
  size_t n = 0;
  if (x->s < x->end && *x->s == '-') buf[n++] = *x->s++;
  while (x->s < x->end && *x->s >= '0' && *x->s <= '9' && n + 1 < sizeof buf) buf[n++] = *x->s++;
  buf[n] = 0;
  if (!n || (n == 1 && buf[0] == '-')) return perr(x, at, "expected an integer%s", "");
  errno = 0;
  long long v = strtoll(buf, NULL, 10);
  if (errno || v < lo) return perr(x, at, "integer out of range: %s", buf);
  *out = v;
  return TPU_OK;
}

static tpu_status parse_int(lx *x, int lo, int *out) {
  int64_t v;
  const char *at = x->s;
  TPU_TRY(parse_i64(x, lo, &v));
  if (v > 0x7fffffff) return perr(x, at, "integer out of range%s", "");
  *out = (int)v;
  return TPU_OK;
}

static tpu_status parse_f64(lx *x, double *out) {
  const char *at = x->s;
  char buf[64];
  size_t n = 0;
  while (x->s < x->end && n + 1 < sizeof buf && *x->s != ' ' && *x->s != '\t' && *x->s != ';' &&
         *x->s != '\r')
    buf[n++] = *x->s++;
  buf[n] = 0;
  char *e;
  errno = 0;
  double v = n ? strtod(buf, &e) : 0;
  if (!n || *e || errno) return perr(x, at, "expected a number, got '%s'", buf);
  *out = v;
  return TPU_OK;
}

static tpu_status parse_string(lx *x) {
  const char *at = x->s;
  if (x->s >= x->end || *x->s != '"') return perr(x, at, "expected a quoted string%s", "");
  x->s++;
  size_t n = 0;
  while (x->s < x->end && *x->s != '"') {
    if (*x->s == '\\' && x->s + 1 < x->end) x->s++;
    if (n + 1 >= sizeof x->sbuf) return perr(x, at, "string too long%s", "");
    x->sbuf[n++] = *x->s++;
  }
  if (x->s >= x->end) return perr(x, at, "unterminated string%s", "");
  x->s++;
  x->sbuf[n] = 0;
  return TPU_OK;
}

static int eat(lx *x, char c) {
  if (x->s < x->end && *x->s == c) {
    x->s++;
    return 1;
  }
  return 0;
}

static tpu_status parse_vref(lx *x, tpu_vref *r) {
  const char *at = x->s;
  if (!eat(x, 'v')) return perr(x, at, "expected a VMEM reference vN[...]%s", "");
  int64_t v;
  TPU_TRY(parse_i64(x, 0, &v));
  if (v >= x->p->nvmem) return perr(x, at, "no such VMEM buffer (declare it with .vmem first)%s", "");
  r->buf = (int)v;
  r->div = 0;
  r->off = 0;
  if (!eat(x, '[')) return perr(x, x->s, "expected '['%s", "");
  if (eat(x, 'i')) {
    r->div = 1;
    if (eat(x, '/')) TPU_TRY(parse_int(x, 1, &r->div));
    if (eat(x, '+')) TPU_TRY(parse_int(x, 0, &r->off));
  } else {
    TPU_TRY(parse_int(x, 0, &r->off));
  }
  if (!eat(x, ']')) return perr(x, x->s, "expected ']'%s", "");
  return TPU_OK;
}

static tpu_status parse_href(lx *x, int *out) {
  const char *at = x->s;
  if (!eat(x, 'h')) return perr(x, at, "expected an HBM reference hN%s", "");
  int64_t v;
  TPU_TRY(parse_i64(x, 0, &v));
  if (v >= x->p->nhbm) return perr(x, at, "no such HBM buffer (declare it with .hbm first)%s", "");
  *out = (int)v;
  return TPU_OK;
}

/* Parses "key=" and leaves x->s at the value; key in buf. Returns 0 at end of line. */
static tpu_status next_key(lx *x, char *key, size_t cap, int *more) {
  skip_ws(x);
  *more = x->s < x->end;
  if (!*more) return TPU_OK;
  const char *at = x->s;
  if (!word(x, key, cap) || !eat(x, '=')) return perr(x, at, "expected key=value%s", "");
  return TPU_OK;
}

static tpu_status parse_program_line(lx *x) {
  char key[32];
  int more;
  for (;;) {
    TPU_TRY(next_key(x, key, sizeof key, &more));
    if (!more) return TPU_OK;
    const char *at = x->s;
    if (!strcmp(key, "chip")) {
      TPU_TRY(parse_string(x));
      if (strlen(x->sbuf) >= sizeof x->p->chip) return perr(x, at, "chip name too long%s", "");
      strcpy(x->p->chip, x->sbuf);
    } else if (!strcmp(key, "hbm_footprint")) {
      TPU_TRY(parse_i64(x, 0, &x->p->hbm_footprint));
    } else if (!strcmp(key, "hbm_peak")) {
      TPU_TRY(parse_i64(x, 0, &x->p->hbm_peak));
    } else if (!strcmp(key, "hbm_arg")) {
      TPU_TRY(parse_i64(x, 0, &x->p->hbm_arg));
    } else if (!strcmp(key, "hbm_out")) {
      TPU_TRY(parse_i64(x, 0, &x->p->hbm_out));
    } else if (!strcmp(key, "hbm_alias")) {
      TPU_TRY(parse_i64(x, 0, &x->p->hbm_alias));
    } else if (!strcmp(key, "hbm_temp")) {
      TPU_TRY(parse_i64(x, 0, &x->p->hbm_temp));
    } else if (!strcmp(key, "host_temp")) {
      TPU_TRY(parse_i64(x, 0, &x->p->host_temp));
    } else if (!strcmp(key, "vmem_peak")) {
      TPU_TRY(parse_i64(x, 0, &x->p->vmem_peak));
    } else if (!strcmp(key, "xprefetch_bytes")) {
      TPU_TRY(parse_i64(x, 0, &x->p->xprefetch_bytes));
    } else if (!strcmp(key, "xprefetch_hbm")) {
      int64_t h;
      TPU_TRY(parse_i64(x, 0, &h));
      if (h > INT32_MAX) return perr(x, at, "xprefetch_hbm out of range%s", "");
      x->p->xprefetch_hbm = (int)h;
    } else if (!strcmp(key, "xprefetch_cmem")) {
      int64_t c;
      TPU_TRY(parse_i64(x, 0, &c));
      x->p->xprefetch_cmem = c != 0;
    } else {
      return perr(x, at - strlen(key) - 1, "unknown key '%s'", key);
    }
  }
}

static tpu_status parse_op_line(lx *x) {
  tpu_prog_op o;
  memset(&o, 0, sizeof o);
  char name[1024] = "?", kind[256] = "?";
  char key[32];
  int more;
  for (;;) {
    TPU_TRY(next_key(x, key, sizeof key, &more));
    if (!more) break;
    const char *at = x->s;
    if (!strcmp(key, "name") || !strcmp(key, "kind")) {
      TPU_TRY(parse_string(x));
      char *dst = key[0] == 'n' ? name : kind;
      size_t cap = key[0] == 'n' ? sizeof name : sizeof kind;
      if (strlen(x->sbuf) >= cap) return perr(x, at, "string too long%s", "");
      strcpy(dst, x->sbuf);
    } else if (!strcmp(key, "flops")) TPU_TRY(parse_f64(x, &o.flops));
    else if (!strcmp(key, "padded_flops")) TPU_TRY(parse_f64(x, &o.padded_flops));
    else if (!strcmp(key, "bytes")) TPU_TRY(parse_f64(x, &o.bytes));
    else if (!strcmp(key, "padded_bytes")) TPU_TRY(parse_f64(x, &o.padded_bytes));
    else if (!strcmp(key, "m")) TPU_TRY(parse_i64(x, 0, &o.m));
    else if (!strcmp(key, "k")) TPU_TRY(parse_i64(x, 0, &o.k));
    else if (!strcmp(key, "n")) TPU_TRY(parse_i64(x, 0, &o.n));
    else if (!strcmp(key, "b")) TPU_TRY(parse_i64(x, 0, &o.b));
    else if (!strcmp(key, "tiles")) TPU_TRY(parse_i64(x, 0, &o.tiles));
    else if (!strcmp(key, "xbytes")) TPU_TRY(parse_f64(x, &o.xbytes));
    else if (!strcmp(key, "out_scale")) TPU_TRY(parse_f64(x, &o.out_scale));
    else if (!strcmp(key, "out_bytes")) TPU_TRY(parse_f64(x, &o.out_bytes));
    else if (!strcmp(key, "min_cycles")) TPU_TRY(parse_f64(x, &o.min_cycles));
    else if (!strcmp(key, "min_body_cycles")) TPU_TRY(parse_f64(x, &o.min_body_cycles));
    else if (!strcmp(key, "scalar")) {
      int64_t v;
      TPU_TRY(parse_i64(x, 0, &v));
      o.scalar = v != 0;
    } else if (!strcmp(key, "starts")) {
      int64_t v;
      TPU_TRY(parse_i64(x, 1, &v));
      o.starts = v > 64 ? 64 : (int)v;
    } else if (!strcmp(key, "relayout")) {
      int64_t v;
      TPU_TRY(parse_i64(x, 0, &v));
      o.relayout = v != 0;
    } else if (!strcmp(key, "reduce_epilogue")) {
      int64_t v;
      TPU_TRY(parse_i64(x, 0, &v));
      o.reduce_epilogue = v != 0;
    } else if (!strcmp(key, "window")) {
      int64_t v;
      TPU_TRY(parse_i64(x, 0, &v));
      o.window = v != 0;
    } else if (!strcmp(key, "scan")) {
      int64_t v;
      TPU_TRY(parse_i64(x, 0, &v));
      o.scan = v != 0;
    } else if (!strcmp(key, "blocks")) {
      int64_t v;
      TPU_TRY(parse_i64(x, 0, &v));
      o.blocks = v > 1 << 20 ? 1 << 20 : (int)v;
    } else if (!strcmp(key, "copy_out")) {
      int64_t v;
      TPU_TRY(parse_i64(x, 0, &v));
      o.copy_out = v != 0;
    } else if (!strcmp(key, "vmem_write")) {
      int64_t v;
      TPU_TRY(parse_i64(x, 0, &v));
      o.vmem_write = v != 0;
    } else if (!strcmp(key, "dma")) {
      int64_t v;
      TPU_TRY(parse_i64(x, 0, &v));
      o.dma = v != 0;
    }
    else return perr(x, at - strlen(key) - 1, "unknown key '%s'", key);
  }
  o.name = name;
  o.kind = kind;
  if (tpu_program_add_op(x->p, &o) < 0)
    return TPU_FAIL(x->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  return TPU_OK;
}

static tpu_status parse_hbm_line(lx *x) {
  char name[1024] = "?", key[32];
  int64_t off = 0, bytes = 0;
  int more;
  for (;;) {
    TPU_TRY(next_key(x, key, sizeof key, &more));
    if (!more) break;
    const char *at = x->s;
    if (!strcmp(key, "name")) {
      TPU_TRY(parse_string(x));
      if (strlen(x->sbuf) >= sizeof name) return perr(x, at, "string too long%s", "");
      strcpy(name, x->sbuf);
    } else if (!strcmp(key, "offset")) TPU_TRY(parse_i64(x, 0, &off));
    else if (!strcmp(key, "bytes")) TPU_TRY(parse_i64(x, 0, &bytes));
    else return perr(x, at - strlen(key) - 1, "unknown key '%s'", key);
  }
  if (tpu_program_add_hbm(x->p, name, off, bytes) < 0)
    return TPU_FAIL(x->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  return TPU_OK;
}

static tpu_status parse_vmem_line(lx *x) {
  char key[32];
  int64_t off = 0, slot = 0, op = -1;
  int slots = 1, frees = 0, more;
  for (;;) {
    TPU_TRY(next_key(x, key, sizeof key, &more));
    if (!more) break;
    const char *at = x->s;
    if (!strcmp(key, "op")) TPU_TRY(parse_i64(x, -1, &op));
    else if (!strcmp(key, "store_frees")) TPU_TRY(parse_int(x, 0, &frees));
    else if (!strcmp(key, "offset")) TPU_TRY(parse_i64(x, 0, &off));
    else if (!strcmp(key, "slot_bytes")) TPU_TRY(parse_i64(x, 0, &slot));
    else if (!strcmp(key, "slots")) TPU_TRY(parse_int(x, 1, &slots));
    else return perr(x, at - strlen(key) - 1, "unknown key '%s'", key);
  }
  if (op >= x->p->nops) return perr(x, x->line0, "VMEM buffer names an undeclared op%s", "");
  int v = tpu_program_add_vmem(x->p, (int)op, off, slot, slots);
  if (v < 0) return TPU_FAIL(x->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  x->p->vmem[v].store_frees = frees != 0;
  return TPU_OK;
}

static tpu_status parse_insn_line(lx *x) {
  char mn[32];
  const char *at = x->s;
  if (*x->s >= '0' && *x->s <= '9') { /* the printed index; must match */
    int64_t idx;
    TPU_TRY(parse_i64(x, 0, &idx));
    if (idx != x->p->ninsns) return perr(x, at, "instruction index does not match its position%s", "");
    skip_ws(x);
    at = x->s;
  }
  word(x, mn, sizeof mn);
  int opc = -1;
  for (int i = 0; i < TPU_ISA_COUNT; i++)
    if (!strcmp(mn, tpu_isa_name((tpu_isa_op)i))) opc = i;
  if (opc < 0) return perr(x, at, "unknown instruction '%s'", mn);
  tpu_insn in = tpu_insn_make((tpu_isa_op)opc, -1);
  char key[32], what[1024];
  int more, has_what = 0;
  for (;;) {
    TPU_TRY(next_key(x, key, sizeof key, &more));
    if (!more) break;
    const char *vat = x->s;
    if (!strcmp(key, "src")) {
      int ns = 0;
      do {
        if (ns == TPU_INSN_MAX_SRC) return perr(x, x->s, "too many sources%s", "");
        TPU_TRY(parse_vref(x, &in.src[ns++]));
      } while (eat(x, ','));
    } else if (!strcmp(key, "dst")) TPU_TRY(parse_vref(x, &in.dst));
    else if (!strcmp(key, "hbm")) TPU_TRY(parse_href(x, &in.hbm));
    else if (!strcmp(key, "hbm2")) TPU_TRY(parse_href(x, &in.hbm2));
    else if (!strcmp(key, "bytes")) TPU_TRY(parse_i64(x, 0, &in.bytes));
    else if (!strcmp(key, "m")) TPU_TRY(parse_i64(x, 1, &in.m));
    else if (!strcmp(key, "k")) TPU_TRY(parse_i64(x, 1, &in.k));
    else if (!strcmp(key, "n")) TPU_TRY(parse_i64(x, 1, &in.n));
    else if (!strcmp(key, "b")) TPU_TRY(parse_i64(x, 1, &in.b));
    else if (!strcmp(key, "mxus")) TPU_TRY(parse_int(x, 1, &in.mxus));
    else if (!strcmp(key, "passes")) TPU_TRY(parse_int(x, 1, &in.passes));
    else if (!strcmp(key, "steps")) TPU_TRY(parse_i64(x, 1, &in.steps));
    else if (!strcmp(key, "min_cycles")) TPU_TRY(parse_i64(x, 1, &in.min_cycles));
    else if (!strcmp(key, "i8_wide")) TPU_TRY(parse_int(x, 0, &in.i8_wide));
    else if (!strcmp(key, "dtype")) {
      char tn[16];
      size_t n = word(x, tn, sizeof tn);
      tpu_dtype t;
      if (!n || !tpu_dtype_parse(tn, n, &t) || !tpu_dtype_is_array(t))
        return perr(x, vat, "unknown dtype '%s'", tn);
      in.dtype = t;
    } else if (!strcmp(key, "vregs")) TPU_TRY(parse_i64(x, 0, &in.vregs));
    else if (!strcmp(key, "ops")) TPU_TRY(parse_i64(x, 0, &in.ops));
    else if (!strcmp(key, "cycles")) TPU_TRY(parse_i64(x, 0, &in.cycles));
    else if (!strcmp(key, "links")) TPU_TRY(parse_int(x, 0, &in.lane));
    else if (!strcmp(key, "trips")) TPU_TRY(parse_i64(x, -1, &in.trips));
    else if (!strcmp(key, "at")) TPU_TRY(parse_int(x, 0, &in.at));
    else if (!strcmp(key, "op")) TPU_TRY(parse_int(x, 0, &in.op));
    else if (!strcmp(key, "what")) {
      TPU_TRY(parse_string(x));
      strcpy(what, x->sbuf);
      has_what = 1;
    } else if (!strcmp(key, "when")) {
      TPU_TRY(parse_int(x, 1, &in.pmod));
      if (!eat(x, ':')) return perr(x, x->s, "expected ':' in when=MOD:REM%s", "");
      TPU_TRY(parse_int(x, 0, &in.prem));
    } else if (!strcmp(key, "flat")) {
      TPU_TRY(parse_int(x, 0, &in.pflat));
    } else if (!strcmp(key, "prefetch")) {
      const char *pat = x->s;
      TPU_TRY(parse_int(x, 0, &in.prefetch));
      if (in.prefetch > 2) return perr(x, pat, "prefetch must be 0, 1 or 2%s", "");
    } else if (!strcmp(key, "onchip")) {
      const char *pat = x->s;
      TPU_TRY(parse_int(x, 0, &in.onchip));
      if (in.onchip > 1) return perr(x, pat, "onchip must be 0 or 1%s", "");
    } else {
      return perr(x, vat - strlen(key) - 1, "unknown key '%s'", key);
    }
  }
  if (has_what) in.what = what;
  if (in.op >= x->p->nops) return perr(x, at, "instruction names an undeclared op%s", "");
  if (tpu_program_add_insn(x->p, &in) < 0)
    return TPU_FAIL(x->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  return TPU_OK;
}

tpu_status tpu_program_parse(const char *file, const char *src, size_t len, tpu_program **out,
                             tpu_diag *d) {
  *out = NULL;
  tpu_program *p = tpu_program_new("");
  if (!p) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  lx x;
  memset(&x, 0, sizeof x);
  x.file = file ? file : "<asm>";
  x.d = d;
  x.p = p;
  const char *s = src, *end = src + len;
  tpu_status st = TPU_OK;
  int seen_insn = 0;
  while (s < end && st == TPU_OK) {
    const char *e = memchr(s, '\n', (size_t)(end - s));
    if (!e) e = end;
    x.line++;
    x.line0 = x.s = s;
    x.end = e;
    skip_ws(&x);
    if (x.s < x.end) {
      char dir[16];
      const char *at = x.s;
      if (*x.s == '.') {
        word(&x, dir, sizeof dir);
        if (seen_insn && strcmp(dir, ".program"))
          st = perr(&x, at, "declaration '%s' after the first instruction", dir);
        else if (!strcmp(dir, ".program")) st = parse_program_line(&x);
        else if (!strcmp(dir, ".op")) st = parse_op_line(&x);
        else if (!strcmp(dir, ".hbm")) st = parse_hbm_line(&x);
        else if (!strcmp(dir, ".vmem")) st = parse_vmem_line(&x);
        else st = perr(&x, at, "unknown directive '%s'", dir);
      } else {
        seen_insn = 1;
        st = parse_insn_line(&x);
      }
    }
    s = e < end ? e + 1 : end;
  }
  if (st == TPU_OK) {
    st = tpu_program_check(p, d);
    if (st != TPU_OK) { /* a structural error: say where in the file */
      st = TPU_ERR_PARSE;
      if (d) {
        d->status = TPU_ERR_PARSE;
        strncpy(d->file, x.file, sizeof d->file - 1);
        d->file[sizeof d->file - 1] = 0;
      }
    }
  }
  if (st != TPU_OK) {
    tpu_program_free(p);
    return st;
  }
  *out = p;
  return TPU_OK;
}
