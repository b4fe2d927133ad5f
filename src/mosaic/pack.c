/* Elementwise packing: pltpu.pack_elementwise / unpack_elementwise, several narrow fields of
 * one word, as jax 0.10.2 defines them (jax/_src/pallas/mosaic/primitives.py, whose CPU
 * interpret mode has no rule for them; bench/pallas/gen.py pack_reference checks these
 * definitions in NumPy). */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "mosaic/mosaic_int.h"

/* The packed element type of attribute `key` ("t:bf16", "t:i8", "t:i4", "t:ui8"): its width
 * in bits, and whether it is bf16 (a float) or unsigned. 0 when not one of those. */
static int packed_type(const tpu_mo_op *op, const char *key, int *bits, int *flt, int *uns) {
  const char *a = tpu_mo_attr(op, key);
  if (!a || strncmp(a, "t:", 2)) return 0;
  a += 2;
  *flt = !strcmp(a, "bf16");
  *uns = !strncmp(a, "ui", 2);
  if (*flt) {
    *bits = 16;
    return 1;
  }
  const char *d = *uns ? a + 2 : a[0] == 'i' ? a + 1 : NULL;
  if (!d || !*d) return 0;
  char *e;
  long w = strtol(d, &e, 10);
  if (*e || w < 1 || w > 32) return 0;
  *bits = (int)w;
  return 1;
}

/* pack_elementwise(xs, packed_dtype): each source's bits as the packed type (f32 rounded to
 * bf16, to nearest even; integers truncated to the width), source i in bits i*w up of the
 * result's word. unpack_elementwise(x, index, packed_dtype): bits index*w up of x's word,
 * sign-extended (unsigned types zero-extended, bf16 widened) to the result type. One VPU
 * operation per source and result register. */
tpu_status tpu__mo_pack(mo_ctx *c, const tpu_mo_op *op) {
  const int pack = op->code == TPU_MO_PACK_EW;
  int bits = 0, flt = 0, uns = 0;
  if (op->nres != 1 || op->nopd < 1 || !packed_type(op, pack ? "target_type" : "source_type", &bits, &flt, &uns))
    return tpu__mo_fail(c, op, TPU_ERR_UNSUPPORTED, "a %s of a packed type tpusim does not know",
                        pack ? "pack_elementwise" : "unpack_elementwise");
  const tpu_mo_type *t = &op->rest[0];
  const mo_val *x0 = &c->vals[op->opd[0]];
  int word = (int)tpu_dtype_size(pack ? t->dt : x0->dt) * 8;
  int64_t index = 0;
  if (!pack && (!tpu_mo_attr_int(op, "index", &index) || index < 0 || (index + 1) * bits > word))
    return tpu__mo_fail(c, op, TPU_ERR_INVALID, "an unpack_elementwise of field %lld of %d-bit fields in a %d-bit word",
                        (long long)index, bits, word);
  if (pack && op->nopd * bits != word)
    return tpu__mo_fail(c, op, TPU_ERR_INVALID, "a pack_elementwise of %d sources of %d bits into a %d-bit word",
                        op->nopd, bits, word);
  int64_t n = tpu__mo_numel(t->rank, t->dims);
  for (int i = 0; i < op->nopd; i++)
    if (tpu__mo_numel(c->vals[op->opd[i]].rank, c->vals[op->opd[i]].dims) != n)
      return tpu__mo_fail(c, op, TPU_ERR_INVALID, "a %s whose sources and result differ in shape",
                          pack ? "pack_elementwise" : "unpack_elementwise");
  c->work.vpu_vregs += (pack ? op->nopd : 1) * tpu__mo_vregs(c, t->rank, t->dims, t->dt);
  if (c->count) {
    tpu__mo_def_nodata(c, op->res[0], t);
    return TPU_OK;
  }
  const uint64_t mask = bits >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1;
  double *tmp = tpu_malloc(sizeof *tmp * (size_t)(n + 1));
  if (!tmp) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
  for (int64_t e = 0; e < n; e++) {
    if (pack) {
      uint64_t w = 0;
      for (int i = 0; i < op->nopd; i++) {
        const mo_val *s = &c->vals[op->opd[i]];
        uint64_t f = flt ? tpu__mo_bits(TPU_BF16, s->v[e]) : tpu__mo_bits(s->dt, s->v[e]) & mask;
        w |= f << (i * bits);
      }
      tmp[e] = tpu__mo_from_bits(t->dt, w);
    } else {
      uint64_t f = (tpu__mo_bits(x0->dt, x0->v[e]) >> (index * bits)) & mask;
      double v = flt ? tpu__mo_from_bits(TPU_BF16, f)
                     : (!uns && (f >> (bits - 1)) ? (double)(int64_t)(f | ~mask) : (double)f);
      tmp[e] = tpu__mo_round_ty(t, v);
    }
  }
  tpu_status st = TPU_OK;
  double *r = tpu__mo_def(c, op->res[0], t, &st);
  if (r) memcpy(r, tmp, sizeof *r * (size_t)n);
  tpu_free(tmp);
  return r ? TPU_OK : st;
}
