/* Memory-space assignment (part of buffer-assign): intermediate values that fit in the VMEM
 * the kernels' own tile buffers leave free stay there between kernels (docs/timing.md). */
#include <stdlib.h>
#include <string.h>

#include "compile/backend.h"

typedef struct {
  int idx;          /* global instruction index */
  const tpu_instr *in;
  int64_t size;     /* bytes (tiled layout, 512-aligned) */
  double benefit;   /* HBM bytes it would save: written once, read once per use */
  int64_t lo, hi;   /* live positions, inclusive */
} cand;

typedef struct {
  int64_t lo, hi, addr, size; /* addr: bytes below the top of VMEM */
} placed;

static int cmp_benefit(const void *a, const void *b) {
  const cand *x = a, *y = b;
  if (x->benefit != y->benefit) return x->benefit > y->benefit ? -1 : 1;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return x->idx - y->idx;
}

static int is_kernel(const tpu__kinfo *k) { return k->kind == TPU__K_STREAM || k->kind == TPU__K_MATMUL; }

/* The instruction whose result v reads: a multi-output kernel's for its get-tuple-element. */
static const tpu_instr *result_of(const tpu_instr *v) {
  return v->op == TPU_OP_GET_TUPLE_ELEMENT && v->operands[0]->op == TPU_OP_FUSION ? v->operands[0] : v;
}

int tpu__be_resident(const tpu__be *be, const tpu_instr *v) {
  const tpu__kinfo *k = tpu__be_info(be, result_of(v));
  return k && k->vres;
}

tpu_status tpu__assign_vmem(tpu__be *be) {
  const tpu_module *m = be->m;
  int64_t cores = be->chip->tensorcores > 0 ? be->chip->tensorcores : 1;
  int64_t cap = be->chip->vmem_bytes * cores;
  if (cap <= 0 || be->ninstrs == 0) return TPU_OK;
  int64_t np = be->npos + 2;
  int64_t *ws = tpu_calloc((size_t)np, sizeof *ws);
  int *nuse = tpu_calloc((size_t)be->ninstrs, sizeof *nuse);
  unsigned char *bad = tpu_calloc((size_t)be->ninstrs, 1);
  cand *c = tpu_calloc((size_t)be->ninstrs, sizeof *c);
  placed *pl = tpu_calloc((size_t)be->ninstrs, sizeof *pl);
  tpu_status st = TPU_OK;
  if (!ws || !nuse || !bad || !c || !pl) {
    st = TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
    goto done;
  }
  /* Each kernel's working set at its position, and who uses what. A value qualifies only
   * when every use is a kernel of the same computation with its own result buffer (no
   * aliases, control ops or computation results pass it on). */
  for (int ci = 0; ci < m->ncomps; ci++) {
    if (!be->scheduled[ci]) continue;
    const tpu_comp *cc = m->comps[ci];
    bad[be->comp_base[ci] + result_of(cc->root)->id] = 1; /* results leave through HBM or the caller */
    for (int i = 0; i < cc->ninstrs; i++) {
      const tpu_instr *u = cc->instrs[i];
      tpu__kinfo *ku = &be->k[be->comp_base[ci] + u->id];
      if ((is_kernel(ku) || ku->kind == TPU__K_LINALG) && ku->pos > 0 && ku->pos < np) {
        int64_t w = tpu__kernel_vmem(be, u, ku);
        if (w > ws[ku->pos]) ws[ku->pos] = w;
      }
      if (result_of(u) != u) continue; /* a result of a multi-output kernel: its readers count */
      for (int o = 0; o < u->noperands; o++) {
        int oi = tpu__be_index(be, result_of(u->operands[o]));
        if (oi < 0) continue;
        nuse[oi]++;
        if (!is_kernel(ku) || !ku->own || u->operands[o]->parent != u->parent) bad[oi] = 1;
      }
    }
  }
  int nc = 0;
  for (int ci = 0; ci < m->ncomps; ci++) {
    if (!be->scheduled[ci]) continue;
    const tpu_comp *cc = m->comps[ci];
    for (int i = 0; i < cc->ninstrs; i++) {
      const tpu_instr *in = cc->instrs[i];
      int gi = be->comp_base[ci] + in->id;
      tpu__kinfo *k = &be->k[gi];
      if (!is_kernel(k) || !k->own || k->nleaves < 1 || bad[gi] || !nuse[gi] || k->pos <= 0 ||
          k->last_use < k->pos || k->last_use >= np)
        continue;
      int64_t size = (tpu__padded_bytes(be, &in->shape) + 511) / 512 * 512;
      if (size <= 0 || size > cap) continue;
      c[nc].idx = gi;
      c[nc].in = in;
      c[nc].size = size;
      c[nc].benefit = (double)size * (1.0 + nuse[gi]);
      /* a matmul's 16-bit result kept on chip also saves its stream pass (layout.c) */
      if (k->kind == TPU__K_MATMUL && tpu_dtype_is_array(in->shape.dtype) && tpu_dtype_size(in->shape.dtype) == 2)
        c[nc].benefit += be->chip->stream_pass_bytes * (double)tpu_shape_numel(&in->shape);
      c[nc].lo = k->pos;
      c[nc].hi = k->last_use;
      nc++;
    }
  }
  qsort(c, (size_t)nc, sizeof *c, cmp_benefit);
  /* Largest benefit first; each takes the lowest free address counted down from the top
   * of VMEM among the values live at the same time, and must stay clear of the tile
   * buffers (which start at offset 0) of every kernel that runs while it lives. */
  int npl = 0;
  for (int i = 0; i < nc; i++) {
    int64_t top = 0;
    for (int64_t p = c[i].lo; p <= c[i].hi; p++)
      if (ws[p] > top) top = ws[p];
    int64_t room = cap - top;
    if (c[i].size > room) continue;
    int64_t addr = 0;
    for (int moved = 1; moved;) { /* first fit: bump past every overlapping placement */
      moved = 0;
      for (int j = 0; j < npl; j++)
        if (pl[j].lo <= c[i].hi && c[i].lo <= pl[j].hi && pl[j].addr < addr + c[i].size &&
            addr < pl[j].addr + pl[j].size) {
          addr = pl[j].addr + pl[j].size;
          moved = 1;
        }
    }
    if (addr + c[i].size > room) continue;
    pl[npl].lo = c[i].lo;
    pl[npl].hi = c[i].hi;
    pl[npl].addr = addr;
    pl[npl].size = c[i].size;
    npl++;
    tpu__kinfo *k = &be->k[c[i].idx];
    k->vres = 1;
    k->vres_off = cap - addr - c[i].size;
    if (tpu_program_add_vmem(be->p, -1, k->vres_off, c[i].size, 1) < 0) {
      st = TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
      break;
    }
  }
done:
  tpu_free(ws);
  tpu_free(nuse);
  tpu_free(bad);
  tpu_free(c);
  tpu_free(pl);
  return st;
}
