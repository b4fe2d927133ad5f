/* Building, freeing and checking a TPU program (the ISA text form lives in isa.c). */
#include "chip/program.h"

#include <string.h>

#include "chip/timeline.h"
#include "ir/ir.h"
#include "ir/layout.h"

static const char *const k_isa_names[] = {
#define X(e, mn, unit, meaning) mn,
    TPU_ISA_LIST(X)
#undef X
};
static const int k_isa_units[] = {
#define X(e, mn, unit, meaning) unit,
    TPU_ISA_LIST(X)
#undef X
};
_Static_assert(sizeof k_isa_names / sizeof k_isa_names[0] == TPU_ISA_COUNT, "ISA table");
_Static_assert(TPU_UNIT_MXU == 0 && TPU_UNIT_VPU == 1 && TPU_UNIT_EUP == 2 && TPU_UNIT_XLU == 3 &&
                   TPU_UNIT_DMA_IN == 4 && TPU_UNIT_DMA_OUT == 5 && TPU_UNIT_ICI == 6,
               "ISA unit numbers follow ORDER UNIT");

const char *tpu_isa_name(tpu_isa_op op) {
  return (unsigned)op < TPU_ISA_COUNT ? k_isa_names[op] : "?";
}

int tpu_isa_unit(tpu_isa_op op) { return (unsigned)op < TPU_ISA_COUNT ? k_isa_units[op] : -1; }

tpu_program *tpu_program_new(const char *chip) {
  tpu_program *p = tpu_calloc(1, sizeof *p);
  if (!p) return NULL;
  tpu_arena_init(&p->arena);
  if (chip) {
    strncpy(p->chip, chip, sizeof p->chip - 1);
  }
  return p;
}

void tpu_program_free(tpu_program *p) {
  if (!p) return;
  tpu_free(p->insns);
  tpu_free(p->ops);
  tpu_free(p->hbm);
  tpu_free(p->vmem);
  tpu_arena_deinit(&p->arena);
  tpu_free(p);
}

/* Grows a vector of `size`-byte elements to hold one more; 0 on out-of-memory. */
static int grow(void **v, int n, int *cap, size_t size) {
  if (n < *cap) return 1;
  int nc = *cap ? *cap * 2 : 16;
  if (nc < 0 || (size_t)nc > ((size_t)-1) / size) return 0;
  void *nv = tpu_realloc(*v, (size_t)nc * size);
  if (!nv) return 0;
  *v = nv;
  *cap = nc;
  return 1;
}

const char *tpu_program_str(tpu_program *p, const char *s) {
  if (!s) return NULL;
  return tpu_arena_strdup(&p->arena, s);
}

tpu_insn tpu_insn_make(tpu_isa_op opc, int op) {
  tpu_insn in;
  memset(&in, 0, sizeof in);
  in.opc = opc;
  in.op = op;
  for (int i = 0; i < TPU_INSN_MAX_SRC; i++) in.src[i].buf = -1;
  in.dst.buf = -1;
  in.hbm = in.hbm2 = -1;
  in.dtype = TPU_F32;
  in.at = -1;
  return in;
}

tpu_vref tpu_vref_make(int buf, int div, int off) {
  tpu_vref r = {buf, div, off};
  return r;
}

int tpu_program_add_insn(tpu_program *p, const tpu_insn *in) {
  if (!grow((void **)&p->insns, p->ninsns, &p->capinsns, sizeof *p->insns)) return -1;
  tpu_insn c = *in;
  if (c.what && !(c.what = tpu_program_str(p, c.what))) return -1;
  p->insns[p->ninsns] = c;
  return p->ninsns++;
}

int tpu_program_add_op(tpu_program *p, const tpu_prog_op *op) {
  if (!grow((void **)&p->ops, p->nops, &p->capops, sizeof *p->ops)) return -1;
  tpu_prog_op c = *op;
  if (c.instr && c.out_bytes <= 0) c.out_bytes = (double)tpu_shape_physical_bytes(&c.instr->shape);
  if (c.name && !(c.name = tpu_program_str(p, c.name))) return -1;
  if (c.kind && !(c.kind = tpu_program_str(p, c.kind))) return -1;
  p->ops[p->nops] = c;
  return p->nops++;
}

int tpu_program_add_hbm(tpu_program *p, const char *name, int64_t offset, int64_t bytes) {
  if (!grow((void **)&p->hbm, p->nhbm, &p->caphbm, sizeof *p->hbm)) return -1;
  tpu_hbm_buf b = {tpu_program_str(p, name ? name : "?"), offset, bytes};
  if (!b.name) return -1;
  p->hbm[p->nhbm] = b;
  return p->nhbm++;
}

int tpu_program_add_vmem(tpu_program *p, int op, int64_t offset, int64_t slot_bytes, int nslots) {
  if (!grow((void **)&p->vmem, p->nvmem, &p->capvmem, sizeof *p->vmem)) return -1;
  tpu_vmem_buf b = {op, offset, slot_bytes, nslots, 0};
  p->vmem[p->nvmem] = b;
  return p->nvmem++;
}

int tpu_program_set_loop_trips(tpu_program *p, const char *name, int64_t trips) {
  int n = 0;
  for (int i = 0; i < p->ninsns; i++) {
    tpu_insn *in = &p->insns[i];
    if (in->opc == TPU_ISA_LOOP && in->what && !strcmp(in->what, name)) {
      in->trips = trips;
      n++;
    }
  }
  return n;
}

int tpu_program_set_loop_trips_at(tpu_program *p, tpu_loc loc, int64_t trips) {
  int n = 0;
  for (int i = 0; i < p->ninsns; i++) {
    tpu_insn *in = &p->insns[i];
    if (in->opc == TPU_ISA_LOOP && tpu_loc_same(in->loc, loc)) {
      in->trips = trips;
      n++;
    }
  }
  return n;
}

static tpu_status bad(tpu_diag *d, int i, const char *what) {
  return TPU_FAIL(d, TPU_ERR_INVALID, tpu_noloc(), "program instruction %d: %s", i, what);
}

static int vref_ok(const tpu_program *p, tpu_vref r) {
  return r.buf < 0 || (r.buf < p->nvmem && r.div >= 0 && r.off >= 0);
}

tpu_status tpu_program_check(const tpu_program *p, tpu_diag *d) {
  if (p->xprefetch_bytes < 0 || (p->xprefetch_bytes > 0 && (p->xprefetch_hbm < 0 || p->xprefetch_hbm >= p->nhbm)))
    return TPU_FAIL(d, TPU_ERR_INVALID, tpu_noloc(), "program: cross-program prefetch of an HBM buffer out of range");
  /* Control stack: 'l' loop, 'c' cond before its first case, 'k' inside a case. */
  char stack[256];
  int depth = 0;
  for (int i = 0; i < p->ninsns; i++) {
    const tpu_insn *in = &p->insns[i];
    if ((unsigned)in->opc >= TPU_ISA_COUNT) return bad(d, i, "unknown opcode");
    if (in->op < -1 || in->op >= p->nops) return bad(d, i, "op index out of range");
    for (int s = 0; s < TPU_INSN_MAX_SRC; s++)
      if (!vref_ok(p, in->src[s])) return bad(d, i, "source VMEM reference out of range");
    if (!vref_ok(p, in->dst)) return bad(d, i, "destination VMEM reference out of range");
    if (in->hbm < -1 || in->hbm >= p->nhbm || in->hbm2 < -1 || in->hbm2 >= p->nhbm)
      return bad(d, i, "HBM buffer out of range");
    if (in->pmod < 0 || (in->pmod > 0 && (in->prem < 0 || in->prem >= in->pmod)) || in->pflat < 0 || in->pflat > 1)
      return bad(d, i, "bad predicate");
    if (in->prefetch && (in->opc != TPU_ISA_DMA_IN || in->prefetch > 2 || in->prefetch < 0))
      return bad(d, i, "only dma.in may carry prefetch=1 or 2");
    if (in->prefetch == 2 && (in->hbm < 0 || in->dst.buf < 0 || in->pmod))
      return bad(d, i, "prefetch=2 needs an HBM source and a VMEM destination, unpredicated");
    if (in->onchip && in->opc != TPU_ISA_DMA_HBM &&
        ((in->opc != TPU_ISA_DMA_IN && in->opc != TPU_ISA_DMA_OUT) || in->onchip != 1 || in->hbm >= 0 || in->prefetch))
      return bad(d, i, "onchip=1: only on dma.in or dma.out, without hbm or prefetch, or on dma.hbm");
    if (in->onchip && in->opc == TPU_ISA_DMA_HBM && in->onchip != 1)
      return bad(d, i, "onchip must be 0 or 1");
    if (in->lane && (in->opc != TPU_ISA_ICI || in->lane < 0 || in->lane >= 1 << TPU_INSN_LANES))
      return bad(d, i, "only ici may carry links, a mask of 7 link kinds (+x -x +y -y +z -z DCN: 1-127)");
    if (in->bytes < 0 || in->vregs < 0 || in->ops < 0 || in->m < 0 || in->k < 0 || in->n < 0 ||
        in->b < 0)
      return bad(d, i, "negative size");
    /* Sizes past 2^40 (a terabyte, a trillion registers) are input errors, and keeping
     * products of two below 2^62 keeps the timing arithmetic exact. */
    const int64_t lim = (int64_t)1 << 40;
    if (in->bytes > lim || in->vregs > lim || in->ops > ((int64_t)1 << 20) || in->m > lim ||
        in->k > lim || in->n > lim || in->b > lim || in->passes > 64 || in->trips > lim ||
        in->steps < 0 || in->steps > lim || in->min_cycles < 0 || in->min_cycles > lim)
      return bad(d, i, "size out of range");
    switch (in->opc) {
      case TPU_ISA_MATMUL:
        if (in->m <= 0 || in->k <= 0 || in->n <= 0 || in->b <= 0 || in->mxus <= 0 ||
            in->passes <= 0)
          return bad(d, i, "matmul needs positive m, k, n, b, mxus and passes");
        break;
      case TPU_ISA_WAIT:
        if (in->at < 0 || in->at >= i) return bad(d, i, "wait must name an earlier instruction");
        break;
      case TPU_ISA_LOOP:
        if (depth >= (int)sizeof stack - 2) return bad(d, i, "control flow nested too deeply");
        if (in->trips < -1) return bad(d, i, "bad trip count");
        stack[depth++] = 'l';
        break;
      case TPU_ISA_END:
        if (!depth || stack[depth - 1] != 'l') return bad(d, i, "end without loop");
        depth--;
        break;
      case TPU_ISA_COND:
        if (depth >= (int)sizeof stack - 2) return bad(d, i, "control flow nested too deeply");
        if (in->trips < 1) return bad(d, i, "cond needs at least one branch");
        stack[depth++] = 'c';
        break;
      case TPU_ISA_CASE:
        if (depth && stack[depth - 1] == 'k') depth--;
        if (!depth || stack[depth - 1] != 'c') return bad(d, i, "case outside cond");
        stack[depth++] = 'k';
        break;
      case TPU_ISA_ENDCOND:
        if (depth && stack[depth - 1] == 'k') depth--;
        if (!depth || stack[depth - 1] != 'c') return bad(d, i, "endcond without cond");
        depth--;
        break;
      default:
        break;
    }
  }
  if (depth) return bad(d, p->ninsns, "unclosed loop or cond at the end of the program");
  for (int v = 0; v < p->nvmem; v++)
    if (p->vmem[v].nslots <= 0 || p->vmem[v].slot_bytes < 0 || p->vmem[v].offset < 0)
      return TPU_FAIL(d, TPU_ERR_INVALID, tpu_noloc(), "program VMEM buffer %d: bad size", v);
  return TPU_OK;
}
