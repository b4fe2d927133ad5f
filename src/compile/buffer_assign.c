/* Back-end pass `buffer-assign`: liveness over the flattened schedule, memory-space
 * assignment (which intermediate values stay in VMEM, vmem_assign.c) and HBM offsets with
 * reuse (first fit) for the rest; fails when the program cannot fit the chip's HBM. */
#include <stdlib.h>
#include <string.h>

#include "compile/backend.h"

static int buffer_of(const tpu__be *be, const tpu_instr *in, int leaf, int depth) {
  if (!in || depth > 256) return -1;
  const tpu__kinfo *k = tpu__be_info(be, in);
  if (!k) return -1;
  if (k->own) return k->hbm0 >= 0 && leaf < k->nleaves ? k->hbm0 + leaf : -1;
  switch (in->op) {
    case TPU_OP_TUPLE:
      for (int e = 0; e < in->noperands; e++) {
        int lo = tpu__leaf_offset(&in->shape, e), n = tpu__leaves(&in->operands[e]->shape);
        if (leaf >= lo && leaf < lo + n) return buffer_of(be, in->operands[e], leaf - lo, depth + 1);
      }
      return -1;
    case TPU_OP_GET_TUPLE_ELEMENT:
      return buffer_of(be, in->operands[0],
                       tpu__leaf_offset(&in->operands[0]->shape, (int)in->index) + leaf, depth + 1);
    case TPU_OP_COPY_START: /* (copy, operand, context): both arrays are the operand's buffer */
      return leaf <= 1 ? buffer_of(be, in->operands[0], 0, depth + 1) : -1;
    case TPU_OP_COPY_DONE: return buffer_of(be, in->operands[0], 0, depth + 1);
    case TPU_OP_SLICE_START: /* ((operand), slice, context): the slice lies in the operand's buffer */
      return leaf <= 1 ? buffer_of(be, in->operands[0], 0, depth + 1) : -1;
    case TPU_OP_SLICE_DONE: return buffer_of(be, in->operands[0], 1, depth + 1);
    case TPU_OP_ALL_REDUCE_DONE:
    case TPU_OP_ALL_GATHER_DONE:
    case TPU_OP_COLLECTIVE_PERMUTE_DONE: /* the result part of its -start: (operands, results, ...) */
      return buffer_of(be, in->operands[0],
                       in->operands[0]->shape.dtype == TPU_TUPLE ? tpu__leaf_offset(&in->operands[0]->shape, 1) + leaf
                                                                 : leaf,
                       depth + 1);
    case TPU_OP_WHILE:
      return buffer_of(be, in->body->root, leaf, depth + 1);
    case TPU_OP_CALL:
      return buffer_of(be, in->to_apply->root, leaf, depth + 1);
    case TPU_OP_CONDITIONAL:
      return in->nbranches ? buffer_of(be, in->branches[0]->root, leaf, depth + 1) : -1;
    case TPU_OP_PARAMETER: {
      int ci = tpu__be_comp_index(be, in->parent);
      const tpu_instr *c = ci >= 0 ? be->caller[ci] : NULL;
      if (!c) return -1;
      if (c->op == TPU_OP_WHILE) return buffer_of(be, c->operands[0], leaf, depth + 1);
      if (c->op == TPU_OP_CALL)
        return in->index < c->noperands ? buffer_of(be, c->operands[in->index], leaf, depth + 1) : -1;
      for (int b = 0; b < c->nbranches; b++)
        if (c->branches[b] == in->parent && b + 1 < c->noperands)
          return buffer_of(be, c->operands[b + 1], leaf, depth + 1);
      return -1;
    }
    default:
      return in->noperands ? buffer_of(be, in->operands[0], leaf, depth + 1) : -1;
  }
}

int tpu__be_buffer_of(const tpu__be *be, const tpu_instr *in, int leaf) {
  return buffer_of(be, in, leaf, 0);
}

/* Positions: each instruction gets one when it runs; a while/call/conditional gets one
 * after its computations, so whatever it passes in lives through them. */
static void place(tpu__be *be, const tpu_comp *c, int depth) {
  if (depth > 64) return;
  for (int i = 0; i < c->norder; i++) {
    const tpu_instr *in = c->order[i];
    if (in->op == TPU_OP_WHILE) {
      int64_t start = be->npos + 1;
      place(be, in->condition, depth + 1);
      place(be, in->body, depth + 1);
      /* What the body returns is the next iteration's input: its buffers must not take
       * the place of anything the body writes before it, so they live from the start of
       * the loop's region. */
      const tpu_instr *r = in->body->root;
      for (int o = 0; r->op == TPU_OP_TUPLE && o < r->noperands; o++) {
        tpu__kinfo *ko = tpu__be_info(be, r->operands[o]);
        if (ko && ko->own && r->operands[o]->parent == in->body) ko->pos = start;
      }
      if (r->op != TPU_OP_TUPLE) {
        tpu__kinfo *kr = tpu__be_info(be, r);
        if (kr && kr->own) kr->pos = start;
      }
    } else if (in->op == TPU_OP_CONDITIONAL) {
      for (int b = 0; b < in->nbranches; b++) place(be, in->branches[b], depth + 1);
    } else if (in->op == TPU_OP_CALL) {
      place(be, in->to_apply, depth + 1);
    }
    tpu__kinfo *k = tpu__be_info(be, in);
    k->pos = ++be->npos;
    if ((in->op == TPU_OP_PARAMETER && c->is_entry) || in->op == TPU_OP_CONSTANT) k->pos = 0;
  }
}

typedef struct {
  int64_t pos;
  int idx;
  const tpu_instr *in;
} byp;

static int cmp_pos(const void *a, const void *b) {
  const byp *x = a, *y = b;
  if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
  return x->idx - y->idx;
}

typedef struct {
  int64_t off, size, end;
} live;

static void bump(int64_t *x, int64_t v) {
  if (v > *x) *x = v;
}

tpu_status tpu__pass_buffer_assign(tpu__be *be) {
  const tpu_module *m = be->m;
  place(be, m->entry, 0);
  int n = 0;
  for (int ci = 0; ci < m->ncomps; ci++)
    if (be->scheduled[ci]) n += m->comps[ci]->ninstrs;
  int64_t nl = 0; /* leaves of every scheduled instruction: a bound on live buffers */
  for (int ci = 0; ci < m->ncomps; ci++)
    if (be->scheduled[ci])
      for (int i = 0; i < m->comps[ci]->ninstrs; i++) nl += tpu__leaves(&m->comps[ci]->instrs[i]->shape);
  byp *v = tpu_calloc((size_t)(n ? n : 1), sizeof *v);
  live *act = tpu_calloc((size_t)(nl ? nl : 1), sizeof *act);
  if (!v || !act) {
    tpu_free(v);
    tpu_free(act);
    return TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  }
  n = 0;
  for (int ci = 0; ci < m->ncomps; ci++) {
    if (!be->scheduled[ci]) continue;
    const tpu_comp *c = m->comps[ci];
    for (int i = 0; i < c->ninstrs; i++) {
      const tpu_instr *in = c->instrs[i];
      tpu__kinfo *k = &be->k[be->comp_base[ci] + in->id];
      k->last_use = k->pos;
      k->hbm0 = -1;
      v[n].pos = k->pos;
      v[n].idx = be->comp_base[ci] + in->id;
      v[n++].in = in;
    }
  }
  qsort(v, (size_t)n, sizeof *v, cmp_pos);
  /* Direct uses, then aliases and control ops hand their last use to what they pass on. */
  for (int i = 0; i < n; i++)
    for (int o = 0; o < v[i].in->noperands; o++) {
      tpu__kinfo *ko = tpu__be_info(be, v[i].in->operands[o]);
      if (ko) bump(&ko->last_use, v[i].pos);
    }
  /* The result and the inputs (owned by the caller, not donated) live to the end. */
  bump(&tpu__be_info(be, m->entry->root)->last_use, be->npos + 1);
  for (int i = 0; i < m->entry->nparams; i++)
    bump(&tpu__be_info(be, m->entry->params[i])->last_use, be->npos + 1);
  for (int i = 0; i < n; i++) /* constants are part of the program image */
    if (v[i].in->op == TPU_OP_CONSTANT) bump(&be->k[v[i].idx].last_use, be->npos + 1);
  for (int i = n - 1; i >= 0; i--) {
    const tpu_instr *in = v[i].in;
    tpu__kinfo *k = &be->k[v[i].idx];
    if (k->own && k->kind != TPU__K_WHILE) continue;
    for (int o = 0; o < in->noperands; o++) bump(&tpu__be_info(be, in->operands[o])->last_use, k->last_use);
    const tpu_comp *sub[2] = {NULL, NULL};
    if (in->op == TPU_OP_WHILE) sub[0] = in->body;
    if (in->op == TPU_OP_CALL) sub[0] = in->to_apply;
    if (in->op == TPU_OP_CONDITIONAL)
      for (int b = 0; b < in->nbranches; b++) bump(&tpu__be_info(be, in->branches[b]->root)->last_use, k->last_use);
    if (sub[0]) bump(&tpu__be_info(be, sub[0]->root)->last_use, k->last_use);
  }
  /* A dynamic-update-slice whose operand dies with it updates that buffer in place (as
   * XLA does when the operand's buffer can be reused): it owns none, and the operand's
   * buffer lives as long as the result. */
  for (int i = 0; i < n; i++) {
    const tpu_instr *in = v[i].in;
    tpu__kinfo *k = &be->k[v[i].idx];
    if (in->op != TPU_OP_DYNAMIC_UPDATE_SLICE || !k->own) continue;
    const tpu_instr *x = in->operands[0];
    tpu__kinfo *ko = tpu__be_info(be, x);
    for (int guard = 0; ko && !ko->own && x->op == TPU_OP_DYNAMIC_UPDATE_SLICE && guard < 1 << 20; guard++) {
      x = x->operands[0]; /* an earlier in-place update: its owner */
      ko = tpu__be_info(be, x);
    }
    if (!ko || !ko->own || ko->kind == TPU__K_WHILE || ko->nleaves != 1 || ko->pos <= 0 ||
        ko->last_use != k->pos || x->parent != in->parent)
      continue;
    k->own = 0;
    ko->last_use = k->last_use;
  }
  /* Memory-space assignment: the values that stay in VMEM get no HBM buffer. */
  tpu_status vst = tpu__assign_vmem(be);
  if (vst != TPU_OK) {
    tpu_free(v);
    tpu_free(act);
    return vst;
  }
  /* First fit over offsets, buffers in order of definition. */
  int nact = 0;
  int64_t live_bytes = 0, peak = 0, foot = 0;
  const tpu_instr *foot_at = NULL;
  tpu_status st = TPU_OK;
  for (int i = 0; i < n && st == TPU_OK; i++) {
    const tpu_instr *in = v[i].in;
    tpu__kinfo *k = &be->k[v[i].idx];
    if (!k->own || k->vres) continue;
    for (int a = 0; a < nact;) { /* expire */
      if (act[a].end < v[i].pos) {
        live_bytes -= act[a].size;
        memmove(&act[a], &act[a + 1], (size_t)(nact - a - 1) * sizeof *act);
        nact--;
      } else {
        a++;
      }
    }
    for (int leaf = 0; leaf < k->nleaves; leaf++) {
      const tpu_shape *ls = tpu__leaf(&in->shape, leaf);
      int64_t size = ls ? tpu__padded_bytes(be, ls) : 0;
      size = (size + 511) / 512 * 512; /* 512-byte aligned buffers (an assumption) */
      int64_t off = 0;
      int at = 0;
      for (; at < nact; at++) {
        if (act[at].off - off >= size) break;
        if (act[at].off + act[at].size > off) off = act[at].off + act[at].size;
      }
      memmove(&act[at + 1], &act[at], (size_t)(nact - at) * sizeof *act);
      act[at].off = off;
      act[at].size = size;
      act[at].end = k->last_use;
      nact++;
      live_bytes += size;
      bump(&peak, live_bytes);
      if (off + size > foot) {
        foot = off + size;
        foot_at = in;
      }
      char name[600];
      if (k->nleaves > 1)
        snprintf(name, sizeof name, "%s#%d", in->name, leaf);
      else
        snprintf(name, sizeof name, "%s", in->name);
      int h = tpu_program_add_hbm(be->p, name, off, size);
      if (h < 0) {
        st = TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
        break;
      }
      if (leaf == 0) k->hbm0 = h;
    }
  }
  tpu_free(v);
  tpu_free(act);
  if (st != TPU_OK) return st;
  be->p->hbm_footprint = foot;
  be->p->hbm_peak = peak;
  for (int i = 0; i < m->entry->nparams; i++) {
    const tpu__kinfo *kp = tpu__be_info(be, m->entry->params[i]);
    if (!kp || !kp->xpf || kp->hbm0 < 0) continue;
    be->p->xprefetch_bytes = tpu__padded_bytes(be, &m->entry->params[i]->shape);
    be->p->xprefetch_hbm = kp->hbm0;
    be->p->xprefetch_cmem = kp->xpf == 2;
  }
  if (foot > be->chip->hbm_bytes)
    return TPU_FAIL(be->d, TPU_ERR_LIMIT, foot_at ? foot_at->loc : tpu_noloc(),
                    "program needs %lld bytes of HBM; %s has %lld (peak at '%s')", (long long)foot,
                    be->chip->name, (long long)be->chip->hbm_bytes, foot_at ? foot_at->name : "?");
  return TPU_OK;
}
