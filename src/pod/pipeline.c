/* Pipeline loops in the compiled program and their bubble (pod/pipeline.h). */
#include "pod/pipeline.h"

#include <string.h>

#include "base/alloc.h"
#include "ir/collective.h"

/* P when the permute's pairs cut the devices into rings or lines all of length P (each
 * device sends to at most one and receives from at most one), else 0. With `src_out`
 * (room for the module's devices), each device's source there (-1: none). */
static int64_t permute_stages(const tpu_instr *in, int64_t *src_out) {
  int64_t replicas, partitions;
  tpu_module_device_grid(in->parent->module, &replicas, &partitions);
  int64_t n = replicas * partitions, P = 0;
  if (n < 2) return 0;
  int64_t *src = tpu_malloc(sizeof *src * (size_t)n), *dst = tpu_malloc(sizeof *dst * (size_t)n);
  unsigned char *seen = tpu_calloc((size_t)n, 1);
  int ok = src && dst && seen;
  for (int64_t i = 0; ok && i < n; i++) dst[i] = -1;
  tpu_diag d;
  if (ok && tpu_collective_permute_sources(in, replicas, partitions, src, &d) != TPU_OK) ok = 0;
  for (int64_t dev = 0; ok && dev < n; dev++) {
    if (src[dev] == dev) src[dev] = -1;
    else if (src[dev] >= 0 && src[dev] < n) {
      if (dst[src[dev]] >= 0) ok = 0; /* one source feeding two targets: not a stage chain */
      dst[src[dev]] = dev;
    }
  }
  /* Walk each chain from its head (no source), then each ring left. */
  for (int pass = 0; ok && pass < 2; pass++)
    for (int64_t s = 0; ok && s < n; s++) {
      if (seen[s] || (pass == 0 && src[s] >= 0) || (dst[s] < 0 && src[s] < 0)) continue;
      int64_t len = 0, v = s;
      while (v >= 0 && !seen[v]) {
        seen[v] = 1;
        len++;
        v = dst[v];
      }
      if (P && len != P) ok = 0;
      P = len;
    }
  if (ok && src_out) memcpy(src_out, src, sizeof *src * (size_t)n);
  tpu_free(src);
  tpu_free(dst);
  tpu_free(seen);
  return ok && P >= 2 ? P : 0;
}

/* The permute after `at` in the same loop body (insns (at, end of the innermost loop around
 * it)) that sends along `fwd`'s pairs reversed (each target back to its source), as the
 * input gradients of a 1F1B schedule go; its op index, or -1. */
static int reverse_permute(const tpu_program *p, int at, const tpu_instr *fwd, int64_t P) {
  int64_t replicas, partitions;
  tpu_module_device_grid(fwd->parent->module, &replicas, &partitions);
  int64_t n = replicas * partitions;
  int64_t *a = tpu_malloc(sizeof *a * (size_t)n), *b = tpu_malloc(sizeof *b * (size_t)n);
  int found = -1;
  if (a && b && permute_stages(fwd, a) == P)
    for (int i = at + 1, depth = 0; i < p->ninsns && depth >= 0 && found < 0; i++) {
      const tpu_insn *x = &p->insns[i];
      if (x->opc == TPU_ISA_LOOP) depth++;
      else if (x->opc == TPU_ISA_END) depth--;
      if (depth != 0 || x->opc != TPU_ISA_ICI || x->op < 0) continue;
      const tpu_instr *in = p->ops[x->op].instr;
      if (!in || in == fwd || tpu_collective_base(in->op) != TPU_OP_COLLECTIVE_PERMUTE) continue;
      if (permute_stages(in, b) != P) continue;
      int rev = 1; /* fwd sends a[dev] -> dev, so the reverse sends dev -> a[dev] */
      for (int64_t dev = 0; rev && dev < n; dev++)
        if (a[dev] >= 0) rev = b[a[dev]] == dev;
      if (rev) found = x->op;
    }
  tpu_free(a);
  tpu_free(b);
  return found;
}

int tpu_pod_find_pipelines(const tpu_program *p, const tpu_timeline *tl, tpu_pod_pipeline *out, int max) {
  int n = 0;
  int64_t *stack = tpu_malloc(sizeof *stack * (size_t)(p->ninsns + 1));
  if (!stack) return 0;
  int depth = 0;
  for (int i = 0; i < p->ninsns && n < max; i++) {
    const tpu_insn *x = &p->insns[i];
    if (x->opc == TPU_ISA_LOOP) stack[depth++] = i;
    else if (x->opc == TPU_ISA_END && depth > 0) depth--;
    if (x->opc != TPU_ISA_ICI || depth == 0 || x->op < 0) continue;
    const tpu_instr *in = p->ops[x->op].instr;
    if (!in || tpu_collective_base(in->op) != TPU_OP_COLLECTIVE_PERMUTE) continue;
    int dup = 0;
    for (int k = 0; k < n; k++) dup |= out[k].permute_op == x->op || out[k].reverse_op == x->op;
    if (dup) continue;
    int64_t P = permute_stages(in, NULL);
    const tpu_insn *lp = &p->insns[stack[depth - 1]];
    int64_t count = x->op < tl->nops ? tl->ops[x->op].count : 0;
    int64_t T = lp->trips > 0 ? lp->trips : count;
    if (P < 2 || T <= P) continue; /* T = P: a ring algorithm (each block round once) */
    int rev = reverse_permute(p, i, in, P);
    int64_t padding = rev >= 0 ? 2 * (P - 1) : P - 1;
    if (T <= padding) continue; /* no microbatch: all of it padding */
    tpu_pod_pipeline *pl = &out[n++];
    memset(pl, 0, sizeof *pl);
    pl->loop = lp->what ? lp->what : "loop";
    pl->permute = p->ops[x->op].name;
    pl->permute_op = x->op;
    pl->reverse = rev >= 0 ? p->ops[rev].name : NULL;
    pl->reverse_op = rev;
    pl->padding = padding;
    pl->stages = P;
    pl->trips = T;
    pl->runs = T > 0 && count >= T ? count / T : 1;
    /* The loop's wall time: the span of its body's events (each run). */
    int lo = stack[depth - 1], hi = lo, dd = 0;
    for (hi = lo; hi < p->ninsns; hi++) {
      if (p->insns[hi].opc == TPU_ISA_LOOP) dd++;
      else if (p->insns[hi].opc == TPU_ISA_END && --dd == 0) break;
    }
    unsigned char *in_body = tpu_calloc((size_t)(p->nops + 1), 1);
    if (!in_body) continue;
    for (int k = lo; k <= hi && k < p->ninsns; k++)
      if (p->insns[k].op >= 0) in_body[p->insns[k].op] = 1;
    int64_t first = -1, last = -1;
    for (int64_t e = 0; e < tl->nevents; e++) {
      const tpu_event *ev = &tl->events[e];
      if (ev->op < 0 || ev->op >= p->nops || !in_body[ev->op]) continue;
      if (first < 0 || ev->start < first) first = ev->start;
      if (ev->end > last) last = ev->end;
    }
    tpu_free(in_body);
    pl->loop_cycles = first >= 0 ? (double)(last - first) : 0;
    pl->bubble_cycles = pl->loop_cycles * (double)padding / (double)T;
  }
  tpu_free(stack);
  return n;
}

int64_t tpu_pod_pipeline_marks(const tpu_timeline *tl, const tpu_pod_pipeline *pl, int64_t *ends, int64_t max) {
  int64_t n = 0;
  for (int64_t e = 0; e < tl->nevents && n < max; e++)
    if (tl->events[e].op == pl->permute_op && tl->events[e].unit == TPU_UNIT_ICI) ends[n++] = tl->events[e].end;
  return n;
}
