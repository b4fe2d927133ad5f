/* Copies of parameters the program updates in place (the last step of the fuse pass).
 *
 * A dynamic-update-slice or scatter writes into its operand's buffer. When that operand is
 * an entry parameter the caller did not donate (no input_output_alias entry for it: JAX's
 * donate_argnums), the caller still owns that buffer, so the XLA TPU compiler copies the
 * whole parameter first and updates the copy: a KV-cache update of bf16[16,512,16,64] that
 * is not donated is a 151,752-cycle `copy` plus the update on v5e; donated, the update
 * alone (2,365 cycles; bench/fidelity/families dus_cache_*). tpusim makes that copy explicit:
 * a `copy` kernel of the parameter, which the update then reads. Values are unchanged. */
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
  if ((r->op != TPU_OP_DYNAMIC_UPDATE_SLICE && r->op != TPU_OP_SCATTER) || r->noperands < 1) return -1;
  const tpu_instr *x = r->operands[0];
  if (x->op != TPU_OP_PARAMETER) return -1; /* the update writes a value computed in the kernel */
  int k = (int)x->index;
  return k >= 0 && k < in->noperands ? k : -1;
}

tpu_status tpu__fuse_param_copies(tpu_builder *b, tpu_module *m) {
  tpu_comp *entry = m->entry;
  if (!entry) return TPU_OK;
  int changed = 0, n = entry->ninstrs;
  for (int i = 0; i < n; i++) {
    tpu_instr *in = entry->instrs[i];
    int k = updated_operand(in);
    if (k < 0) continue;
    tpu_instr *p = in->operands[k];
    if (p->op != TPU_OP_PARAMETER || donated(m, p->index)) continue;
    tpu_instr *c = NULL;
    TPU_TRY(tpu_build_instr_like(b, entry, in, TPU_OP_COPY, "copy.param", &p->shape, &p, 1, &c));
    in->operands[k] = c;
    changed = 1;
  }
  return changed ? tpu_build_finish(b, entry) : TPU_OK;
}
