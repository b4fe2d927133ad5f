/* Back-end pass `schedule`: each kernel's tile loop (how many iterations, matmul blocks
 * that fit VMEM double-buffered), its VMEM buffers, and static while-loop trip counts. */
#include <string.h>

#include "compile/backend.h"

int64_t tpu__vmem_budget(const tpu_chip *chip) {
  int64_t cores = chip->tensorcores > 0 ? chip->tensorcores : 1;
  return chip->vmem_bytes * cores / 4 * 3;
}

static int64_t cdiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : a; }

/* ---- while trip counts: `i CMP c` with i += s in the body and i's start a constant ---- */

static int const_int(const tpu_instr *in, int64_t *v) {
  if (!in || in->op != TPU_OP_CONSTANT || !in->literal || in->shape.rank != 0 ||
      !tpu_dtype_is_int(in->shape.dtype))
    return 0;
  *v = tpu_tensor_get_i64(in->literal, 0);
  return 1;
}

/* If `in` is get-tuple-element(parameter 0, k), returns k; else -1. */
static int64_t param_elem(const tpu_instr *in) {
  if (in->op == TPU_OP_GET_TUPLE_ELEMENT && in->operands[0]->op == TPU_OP_PARAMETER) return in->index;
  return -1;
}

static int64_t trip_count(const tpu_instr *w) {
  const tpu_instr *cmp = w->condition->root;
  if (cmp->op != TPU_OP_COMPARE) return -1;
  int64_t k = param_elem(cmp->operands[0]), c;
  tpu_cmp_dir dir = cmp->direction;
  if (k >= 0 && const_int(cmp->operands[1], &c)) {
  } else if ((k = param_elem(cmp->operands[1])) >= 0 && const_int(cmp->operands[0], &c)) {
    dir = dir == TPU_CMP_LT ? TPU_CMP_GT : dir == TPU_CMP_GT ? TPU_CMP_LT
          : dir == TPU_CMP_LE ? TPU_CMP_GE : dir == TPU_CMP_GE ? TPU_CMP_LE : dir;
  } else {
    return -1;
  }
  const tpu_instr *root = w->body->root;
  if (root->op != TPU_OP_TUPLE || k >= root->noperands) return -1;
  const tpu_instr *upd = root->operands[k];
  int64_t s;
  if (upd->op == TPU_OP_ADD && param_elem(upd->operands[0]) == k && const_int(upd->operands[1], &s)) {
  } else if (upd->op == TPU_OP_ADD && param_elem(upd->operands[1]) == k && const_int(upd->operands[0], &s)) {
  } else if (upd->op == TPU_OP_SUBTRACT && param_elem(upd->operands[0]) == k &&
             const_int(upd->operands[1], &s)) {
    s = -s;
  } else {
    return -1;
  }
  const tpu_instr *init = w->operands[0];
  int64_t i0;
  if (init->op != TPU_OP_TUPLE || k >= init->noperands || !const_int(init->operands[k], &i0)) return -1;
  if (s == 0) return -1;
  int64_t n;
  switch (dir) {
    case TPU_CMP_LT: n = s > 0 ? cdiv(c - i0, s) : -1; break;
    case TPU_CMP_LE: n = s > 0 ? cdiv(c - i0 + 1, s) : -1; break;
    case TPU_CMP_GT: n = s < 0 ? cdiv(i0 - c, -s) : -1; break;
    case TPU_CMP_GE: n = s < 0 ? cdiv(i0 - c + 1, -s) : -1; break;
    case TPU_CMP_NE: n = (c - i0) % s == 0 && (c - i0) / s >= 0 ? (c - i0) / s : -1; break;
    default: n = -1;
  }
  if (dir != TPU_CMP_NE && n < 0) n = 0;
  return n;
}

/* ---- tile loops ---- */

static tpu_status add_vmem(tpu__be *be, tpu__kinfo *k, int64_t *off, int64_t slot_bytes, int slots) {
  if (be->dry) {
    *off += (slot_bytes * slots + 511) / 512 * 512;
    return TPU_OK;
  }
  int v = tpu_program_add_vmem(be->p, k->op, *off, slot_bytes, slots);
  if (v < 0) return TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  if (!k->nvmem) k->vmem0 = v;
  k->nvmem++;
  *off += (slot_bytes * slots + 511) / 512 * 512;
  return TPU_OK;
}

static tpu_status plan_stream(tpu__be *be, const tpu_instr *in, tpu__kinfo *k) {
  int64_t budget = tpu__vmem_budget(be->chip);
  int64_t total = k->in_bytes + k->out_bytes;
  int64_t t = cdiv(total, TPU__TILE_TARGET), t2 = cdiv(2 * total, budget);
  if (t2 > t) t = t2;
  if (t < 1) t = 1;
  k->tiles = t;
  int slots = t > 1 ? 2 : 1;
  int64_t off = 0, b[3] = {0, 0, 0};
  int nb = 0;
  for (int j = 0; j < in->noperands; j++) {
    int64_t r = tpu__read_bytes(be, in, j);
    if (!r) continue;
    b[nb < 2 ? nb : 2] += cdiv(r, t);
    if (nb < 3) nb++;
  }
  for (int j = 0; j < nb; j++) TPU_TRY(add_vmem(be, k, &off, b[j], slots));
  TPU_TRY(add_vmem(be, k, &off, cdiv(k->out_bytes, t), slots));
  k->ws = off;
  if (!be->dry && off > be->p->vmem_peak) be->p->vmem_peak = off;
  return TPU_OK;
}

/* Bytes the matmul kernel reads of its lhs and rhs (whole operands), and of the other
 * operands of a fusion around it: the epilogue operands (a residual add, a bias), which
 * are read like the output, one output block's slice per block. */
static void matmul_operand_bytes(const tpu__be *be, const tpu_instr *in, tpu__kinfo *k, int64_t *lhs,
                                 int64_t *rhs, int64_t *epi) {
  *lhs = k->mm_lhs >= 0 ? tpu__read_bytes(be, in, k->mm_lhs) : tpu__padded_bytes(be, &k->mm->operands[0]->shape);
  *rhs = k->mm_rhs >= 0 && k->mm_rhs != k->mm_lhs ? tpu__read_bytes(be, in, k->mm_rhs)
                                                  : tpu__padded_bytes(be, &k->mm->operands[1]->shape);
  *epi = 0;
  for (int j = 0; j < in->noperands; j++)
    if (j != k->mm_lhs && j != k->mm_rhs) *epi += tpu__read_bytes(be, in, j);
  if (k->mm_lhs < 0 || k->mm_rhs < 0) { /* sources not found: whatever is left over */
    *epi = k->in_bytes - *lhs - *rhs;
    if (*epi < 0) *epi = 0;
  }
}

/* Matmul blocks: (bb products) x (bm x bk) by (bk x bn), chosen so that the A, B, output
 * and epilogue blocks, double-buffered, fit the VMEM budget. */
static tpu_status plan_matmul(tpu__be *be, const tpu_instr *in, tpu__kinfo *k) {
  int64_t budget = tpu__vmem_budget(be->chip);
  int64_t ea = (int64_t)tpu_dtype_size(k->mm->operands[0]->shape.dtype);
  int64_t eb = (int64_t)tpu_dtype_size(k->mm->operands[1]->shape.dtype);
  const int64_t eo = 4; /* f32 / s32 accumulators */
  int64_t lhs, rhs, epi;
  matmul_operand_bytes(be, in, k, &lhs, &rhs, &epi);
  k->epi_bytes = epi;
  int64_t mb = cdiv(k->m, 1024), nb = cdiv(k->n, 1024), kb = 1;
  int64_t bm, bn, bk;
  for (int guard = 0; guard < 200; guard++) {
    bm = cdiv(k->m, mb);
    bn = cdiv(k->n, nb);
    bk = cdiv(k->k, kb);
    int64_t need = 2 * (bm * bk * ea + bk * bn * eb + bm * bn * eo + cdiv(epi, k->b * mb * nb));
    if (need <= budget) break;
    if (bk > 2048) kb *= 2;
    else if (bm >= bn && bm > 8) mb *= 2;
    else if (bn > be->chip->mxu_cols) nb *= 2;
    else if (bk > be->chip->mxu_rows) kb *= 2;
    else break;
  }
  bm = cdiv(k->m, mb);
  bn = cdiv(k->n, nb);
  bk = cdiv(k->k, kb);
  mb = cdiv(k->m, bm);
  nb = cdiv(k->n, bn);
  kb = cdiv(k->k, bk);
  /* Group small products so one iteration moves about a tile's worth of bytes. */
  int64_t blk = bm * bk * ea + bk * bn * eb + bm * bn * eo + cdiv(epi, k->b * mb * nb);
  int64_t bb = blk > 0 ? TPU__TILE_TARGET * 4 / blk : 1;
  if (bb < 1) bb = 1;
  if (bb > k->b) bb = k->b;
  while (bb > 1 && 2 * bb * blk > budget) bb /= 2;
  k->bm = bm;
  k->bn = bn;
  k->bk = bk;
  k->bb = bb;
  k->mb = mb;
  k->nb = nb;
  k->kb = kb;
  k->tiles = cdiv(k->b, bb) * mb * nb * kb;
  int slots = k->tiles > 1 ? 2 : 1;
  int64_t oblocks = k->tiles / kb; /* output blocks */
  int64_t off = 0;
  /* A is read once per column block, B once per row block, the output and the epilogue
   * operands once. */
  TPU_TRY(add_vmem(be, k, &off, cdiv(lhs * nb, k->tiles), slots));
  TPU_TRY(add_vmem(be, k, &off, cdiv(rhs * mb, k->tiles), slots));
  TPU_TRY(add_vmem(be, k, &off, cdiv(k->out_bytes, oblocks), slots));
  if (epi > 0) TPU_TRY(add_vmem(be, k, &off, cdiv(epi, oblocks), slots));
  k->ws = off;
  if (!be->dry && off > be->p->vmem_peak) be->p->vmem_peak = off;
  return TPU_OK;
}

int64_t tpu__kernel_vmem(tpu__be *be, const tpu_instr *in, tpu__kinfo *k) {
  be->dry = 1;
  k->ws = 0;
  if (k->kind == TPU__K_STREAM) (void)plan_stream(be, in, k);
  else if (k->kind == TPU__K_MATMUL) (void)plan_matmul(be, in, k);
  be->dry = 0;
  return k->ws;
}

tpu_status tpu__pass_schedule(tpu__be *be) {
  for (int ci = 0; ci < be->m->ncomps; ci++) {
    if (!be->scheduled[ci]) continue;
    const tpu_comp *c = be->m->comps[ci];
    for (int i = 0; i < c->norder; i++) {
      const tpu_instr *in = c->order[i];
      tpu__kinfo *k = tpu__be_info(be, in);
      if (k->kind == TPU__K_STREAM) TPU_TRY(plan_stream(be, in, k));
      else if (k->kind == TPU__K_MATMUL) TPU_TRY(plan_matmul(be, in, k));
      else if (k->kind == TPU__K_WHILE) k->trips = trip_count(in);
      else if (k->kind == TPU__K_COPY) k->tiles = 1;
      if (k->op >= 0) be->p->ops[k->op].tiles = k->tiles;
    }
  }
  int64_t budget = tpu__vmem_budget(be->chip);
  if (be->p->vmem_peak > budget)
    return TPU_FAIL(be->d, TPU_ERR_LIMIT, tpu_noloc(),
                    "a kernel needs %lld bytes of VMEM; %s allows %lld for tiles",
                    (long long)be->p->vmem_peak, be->chip->name, (long long)budget);
  return TPU_OK;
}
