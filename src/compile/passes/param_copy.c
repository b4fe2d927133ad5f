/* Copies of parameters the program updates in place or returns (the last step of the fuse pass).
 *
 * A dynamic-update-slice or scatter writes into its operand's buffer. When that operand is
 * an entry parameter the caller did not donate (no input_output_alias entry for it: JAX's
 * donate_argnums), the caller still owns that buffer, so the XLA TPU compiler copies the
 * whole parameter first and updates the copy: a KV-cache update of bf16[16,512,16,64] that
 * is not donated is a 151,752-cycle `copy` plus the update on v5e; donated, the update
 * alone (2,365 cycles; bench/fidelity/families dus_cache_*). tpusim makes that copy explicit:
 * a `copy` kernel of the parameter, which the update then reads. Values are unchanged.
 *
 * Likewise a result of the entry that is a non-donated parameter, or a bitcast of one (a
 * view sharing its buffer), would hand the caller's own buffer back as the result; XLA's copy
 * insertion gives every such output leaf a copy of its own (its special-case copies of
 * parameters and constants in the entry's output), so `ROOT copy(p)` with the same layout,
 * which simplify reduces to `p`, is a real copy kernel on the TPU (about 1,850 cycles for a
 * small f32 array on v5e; bench/fidelity/families transpose_*).
 *
 * So does an output leaf whose buffer an earlier leaf of the entry's root tuple already is
 * (the same instruction twice, after CSE: a scan step's `(c + x, c + x)`): the outputs must
 * be distinct buffers, so XLA's copy insertion copies the repeated leaf (libtpu compile-only
 * probes outside the corpus, bench/fidelity/probes/dup_output.py: f32/bf16 [4,128] to
 * [1024,2048] returned twice, a `copy` of the result for the second leaf on v4, v5e, v5p
 * and v6e; cumsum_scan_step_b8d256's copy.1). Its cost by chip: backend copy_kind.c
 * tpu__dup_output_copy. */
#include <stdlib.h>
#include <string.h>

#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"

/* Whether the module's input_output_alias names entry parameter `param` (text such as
 * "{ {}: (0, {}, may-alias), {1}: (2, {}, must-alias) }"). */
static int donated(const tpu_module *m, int64_t param) {
  for (int i = 0; i < m->nattrs; i++) {
    if (strcmp(m->attrs[i].name, "input_output_alias") != 0 || !m->attrs[i].value) continue;
    for (const char *p = m->attrs[i].value; (p = strstr(p, ": (")) != NULL;) {
      p += 3;
      char *end;
      long long v = strtoll(p, &end, 10);
      if (end != p && v == param) return 1;
    }
  }
  return 0;
}

/* The operand of `in` (a top-level instruction of the entry) that it updates in place, or
 * -1: a dynamic-update-slice's operand 0, a scatter's operand 0, or the fusion parameter a
 * fused one's in-place operand streams from. */
static int updated_operand(const tpu_instr *in) {
  if (in->op == TPU_OP_DYNAMIC_UPDATE_SLICE || in->op == TPU_OP_SCATTER) return in->noperands > 0 ? 0 : -1;
  if (in->op != TPU_OP_FUSION || !in->calls || !in->calls->root) return -1;
  const tpu_instr *r = in->calls->root;
  if (r->op == TPU_OP_TUPLE) /* a multi-output fusion: its one in-place result (fuse_merge.c) */
    for (int i = 0; i < r->noperands; i++)
      if (r->operands[i]->op == TPU_OP_DYNAMIC_UPDATE_SLICE) r = r->operands[i];
  if ((r->op != TPU_OP_DYNAMIC_UPDATE_SLICE && r->op != TPU_OP_SCATTER) || r->noperands < 1) return -1;
  const tpu_instr *x = r->operands[0];
  if (x->op != TPU_OP_PARAMETER) return -1; /* the update writes a value computed in the kernel */
  int k = (int)x->index;
  return k >= 0 && k < in->noperands ? k : -1;
}

/* The non-donated entry parameter whose buffer `v` is (itself or through bitcasts), or NULL. */
static const tpu_instr *returned_param(const tpu_module *m, const tpu_instr *v) {
  while (v->op == TPU_OP_BITCAST && v->noperands == 1) v = v->operands[0];
  if (v->op != TPU_OP_PARAMETER || v->shape.dtype == TPU_TUPLE || donated(m, v->index)) return NULL;
  return v;
}

/* Gives output leaf `*slot` of the entry a copy of its own when it is a parameter's buffer. */
static tpu_status copy_returned(tpu_builder *b, tpu_module *m, tpu_instr **slot, int *changed) {
  tpu_instr *v = *slot;
  if (!returned_param(m, v)) return TPU_OK;
  tpu_instr *c = NULL;
  TPU_TRY(tpu_build_instr_like(b, m->entry, v, TPU_OP_COPY, "copy.result", &v->shape, &v, 1, &c));
  *slot = c;
  *changed = 1;
  return TPU_OK;
}

/* The buffer a value is (through bitcasts, views that share it). */
static const tpu_instr *buffer_of(const tpu_instr *v) {
  while (v->op == TPU_OP_BITCAST && v->noperands == 1) v = v->operands[0];
  return v;
}

/* Gives leaf k of the entry's root tuple a copy of its own when an earlier leaf is its
 * buffer already (a tuple or token leaf is left alone). */
static tpu_status copy_repeated(tpu_builder *b, tpu_instr *root, int k, int *changed) {
  tpu_instr *v = root->operands[k];
  const tpu_instr *buf = buffer_of(v);
  if (v->shape.dtype == TPU_TUPLE || v->shape.dtype == TPU_TOKEN || buf->op == TPU_OP_PARAMETER) return TPU_OK;
  int seen = 0;
  for (int j = 0; j < k && !seen; j++) seen = buffer_of(root->operands[j]) == buf;
  if (!seen) return TPU_OK;
  tpu_instr *c = NULL;
  TPU_TRY(tpu_build_instr_like(b, root->parent, v, TPU_OP_COPY, "copy.output", &v->shape, &v, 1, &c));
  root->operands[k] = c;
  *changed = 1;
  return TPU_OK;
}

tpu_status tpu__fuse_param_copies(tpu_builder *b, tpu_module *m) {
  tpu_comp *entry = m->entry;
  if (!entry) return TPU_OK;
  int changed = 0, n = entry->ninstrs;
  tpu_instr *root = entry->root;
  if (root && root->op == TPU_OP_TUPLE) {
    for (int k = 0; k < root->noperands; k++) TPU_TRY(copy_returned(b, m, &root->operands[k], &changed));
    for (int k = root->noperands - 1; k > 0; k--) TPU_TRY(copy_repeated(b, root, k, &changed));
  } else if (root) {
    tpu_instr *r = root;
    TPU_TRY(copy_returned(b, m, &r, &changed));
    if (r != root) tpu_build_set_root(entry, r);
  }
  for (int i = 0; i < n; i++) {
    tpu_instr *in = entry->instrs[i];
    int k = updated_operand(in);
    if (k < 0) continue;
    tpu_instr *p = in->operands[k];
    /* a compiled program's round trip of the parameter through VMEM or CMEM (its copy into
     * S(1) / S(3), which simplify drops, then copy-start / copy-done back): the update
     * still writes the parameter's bytes into a buffer of its own, the compiler's copy
     * (scatter_set_50257x128_m1_bf16 on v4: copy.3 into CMEM, 116,948 cycles) */
    for (int hops = 0; hops < 4 && (p->op == TPU_OP_COPY_DONE || p->op == TPU_OP_COPY_START) && p->noperands; hops++)
      p = p->operands[0];
    if (p->op != TPU_OP_PARAMETER || donated(m, p->index)) continue;
    tpu_instr *c = NULL;
    TPU_TRY(tpu_build_instr_like(b, entry, in, TPU_OP_COPY, "copy.param", &p->shape, &p, 1, &c));
    in->operands[k] = c;
    changed = 1;
  }
  return changed ? tpu_build_finish(b, entry) : TPU_OK;
}
