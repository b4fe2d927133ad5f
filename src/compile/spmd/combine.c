/* combine-collectives: independent all-reduces (and all-gathers, reduce-scatters) over the
 * same device groups become one collective of several operands, as XLA's all-reduce /
 * all-gather / reduce-scatter combiners do before a TPU program runs. Each collective pays
 * the ring's per-step latency once instead of once per tensor — the gradients of a
 * data-parallel step leave in one all-reduce.
 *
 * Two collectives combine when they have the same opcode, the same group attributes
 * (replica_groups, channel_id present or not, use_global_device_ids, dimensions), the same
 * reduction (the to_apply computation's root op and element type) and neither reaches the
 * other through operands. The combined op stands where the last of its members stood
 * (every member's operand is ready there), and the members' users read its tuple
 * elements. Values are unchanged: each element is reduced exactly as before. A combined
 * collective holds at most TPU_COMBINE_MAX_BYTES: the XLA TPU compiler's programs in
 * bench/spmd/cases combine up to 96 MiB of gradients in one all-reduce (dp_block_step's
 * four bf16 weight gradients) and leave two of 64 MiB apart (dp_mlp_step_f32), so its
 * threshold lies in [96, 128) MiB; tpusim takes 96 MiB (XLA's generic combiners default to
 * 30 MiB). Before combining, repeated all-gathers and permutes go (coll_cse.c),
 * converts move across the collectives that only move data (coll_quant.c), and
 * all-reduces are sunk out of loops (ar_motion.c) and become reduce-scatters
 * (rs_create.c), padded where the TPU compiler pads them (rs_pad.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "compile/passes/hlo_passes.h"
#include "ir/build.h"
#include "ir/collective.h"

#define TPU_COMBINE_MAX_BYTES ((int64_t)96 * 1024 * 1024)

static const char *attr_of(const tpu_instr *in, const char *name) {
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, name)) return in->attrs[i].value;
  return NULL;
}

static int same_text(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

/* A collective that stands for a send/recv pair to the megascale runtime (a multi-slice
 * program from the TPU compiler, widened by src/pod/megascale.c, which keeps the transfer's
 * frontend attributes on it) is a host transfer to XLA: its combiners take only all-reduce,
 * all-gather and reduce-scatter instructions (all_reduce_key.cc), so the compiler's DCN
 * transfers leave one by one, as it wrote them. */
static int megascale_transfer(const tpu_instr *in) {
  const char *fa = attr_of(in, "frontend_attributes");
  return fa && strstr(fa, "_xla_megascale_transfer_type") != NULL;
}

static int combinable_op(const tpu_instr *in) {
  if (in->op != TPU_OP_ALL_REDUCE && in->op != TPU_OP_ALL_GATHER && in->op != TPU_OP_REDUCE_SCATTER) return 0;
  if (megascale_transfer(in)) return 0;
  if (in->noperands != 1 || !tpu_dtype_is_array(in->shape.dtype)) return 0;
  if (in->op != TPU_OP_ALL_GATHER) { /* a plain reducer: parameters in, one op out */
    const tpu_comp *r = in->to_apply;
    if (!r || !r->root || r->nparams != 2 || r->root->noperands != 2) return 0;
  }
  return 1;
}

/* Whether a and b name the same device groups, however written (XLA writes one mesh axis
 * as mesh['axis_0'=8] {'axis_0'} or with the other axes of size 1 listed too). */
static int same_groups(const tpu_instr *a, const tpu_instr *b) {
  const char *ta = attr_of(a, "replica_groups"), *tb = attr_of(b, "replica_groups");
  if (same_text(ta, tb)) return 1;
  if (!ta || !tb) return 0;
  tpu_groups ga, gb;
  tpu_diag d;
  memset(&ga, 0, sizeof ga);
  memset(&gb, 0, sizeof gb);
  int same = tpu_groups_read(a, "replica_groups", &ga, &d) == TPU_OK &&
             tpu_groups_read(b, "replica_groups", &gb, &d) == TPU_OK && ga.ngroups == gb.ngroups;
  int64_t n = same && ga.ngroups ? ga.start[ga.ngroups] : 0;
  if (same && ga.ngroups) same = gb.start[gb.ngroups] == n &&
                                 !memcmp(ga.start, gb.start, sizeof *ga.start * (size_t)(ga.ngroups + 1)) &&
                                 !memcmp(ga.ids, gb.ids, sizeof *ga.ids * (size_t)n);
  tpu_groups_free(&ga);
  tpu_groups_free(&gb);
  return same;
}

/* Whether a and b may be one collective (the dependence test is separate). */
static int same_kind(const tpu_instr *a, const tpu_instr *b) {
  if (a->op != b->op || a->shape.dtype != b->shape.dtype || !same_groups(a, b)) return 0;
  static const char *const keys[] = {"use_global_device_ids", "dimensions", "constrain_layout"};
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
    if (!same_text(attr_of(a, keys[k]), attr_of(b, keys[k]))) return 0;
  if ((attr_of(a, "channel_id") == NULL) != (attr_of(b, "channel_id") == NULL)) return 0;
  if (a->op != TPU_OP_ALL_GATHER && a->to_apply->root->op != b->to_apply->root->op) return 0;
  return 1;
}

static int64_t bytes_of(const tpu_instr *in) {
  return tpu_shape_numel(&in->shape) * (int64_t)tpu_dtype_size(in->shape.dtype);
}

/* Marks in `seen` (stamp) everything `x` reaches through operands; returns 1 as soon as it
 * reaches an instruction whose mark[id] is set. */
static int reaches_marked(const tpu_instr *x, const char *mark, int *seen, int stamp, const tpu_instr **stack) {
  int top = 0;
  for (int k = 0; k < x->noperands; k++) stack[top++] = x->operands[k];
  while (top) {
    const tpu_instr *y = stack[--top];
    if (seen[y->id] == stamp) continue;
    seen[y->id] = stamp;
    if (mark[y->id]) return 1;
    for (int k = 0; k < y->noperands; k++)
      if (seen[y->operands[k]->id] != stamp) stack[top++] = y->operands[k];
  }
  return 0;
}

/* Replaces members[0..n) by one collective placed with the last of them. */
static tpu_status combine(tpu_builder *b, tpu_comp *c, tpu_instr **members, int n) {
  tpu_instr *first = members[0];
  tpu_instr **ops = tpu_calloc((size_t)n, sizeof *ops);
  tpu_shape ts;
  memset(&ts, 0, sizeof ts);
  ts.dtype = TPU_TUPLE;
  ts.ntuple = n;
  ts.elems = tpu_arena_alloc(&b->m->arena, sizeof *ts.elems * (size_t)n);
  if (!ops || !ts.elems) {
    tpu_free(ops);
    return TPU_FAIL(b->d, TPU_ERR_NOMEM, first->loc, "out of memory");
  }
  for (int i = 0; i < n; i++) {
    ops[i] = members[i]->operands[0];
    ts.elems[i] = members[i]->shape;
  }
  tpu_instr *all;
  tpu_status st = tpu_build_instr(b, c, first->op, first->name, &ts, ops, n, members[n - 1]->loc, &all);
  tpu_free(ops);
  TPU_TRY(st);
  for (int i = 0; i < first->nattrs; i++)
    TPU_TRY(tpu_build_set_attr(b, all, first->attrs[i].name, first->attrs[i].value));
  all->src_name = first->src_name;
  for (int i = 0; i < n; i++) {
    tpu_instr *g;
    TPU_TRY(tpu_build_instr(b, c, TPU_OP_GET_TUPLE_ELEMENT, members[i]->name, &members[i]->shape, &all, 1,
                            members[i]->loc, &g));
    g->index = i;
    char idx[24];
    snprintf(idx, sizeof idx, "%d", i);
    TPU_TRY(tpu_build_set_attr(b, g, "index", idx));
    g->src_name = members[i]->src_name ? members[i]->src_name : members[i]->name;
    tpu_build_replace_uses(c, members[i], g);
  }
  return TPU_OK;
}

/* Finds the first group of two or more collectives that may be one and combines it; *found
 * says whether it did. Reachability is that of the computation as it is now, so each group
 * is formed after the previous one changed the graph. */
static tpu_status combine_one(tpu_builder *b, tpu_comp *c, int *found) {
  int n = c->ninstrs;
  char *mark = tpu_calloc((size_t)n + 1, 1);
  int *seen = tpu_calloc((size_t)n + 1, sizeof *seen);
  tpu_instr **members = tpu_calloc((size_t)n + 1, sizeof *members);
  int64_t nedges = 0;
  for (int i = 0; i < n; i++) nedges += c->instrs[i]->noperands;
  const tpu_instr **stack = tpu_calloc((size_t)(nedges + 1), sizeof *stack);
  tpu_status st = mark && seen && members && stack ? TPU_OK : TPU_FAIL(b->d, TPU_ERR_NOMEM, c->loc, "out of memory");
  int stamp = 0;
  *found = 0;
  /* In program order, each collective opens a group, and every later one of its kind that
   * reaches no member joins (up to the byte cap). */
  for (int i = 0; st == TPU_OK && !*found && i < c->norder; i++) {
    tpu_instr *a = c->order[i];
    if (!combinable_op(a)) continue;
    int nm = 0;
    int64_t bytes = bytes_of(a);
    members[nm++] = a;
    mark[a->id] = 1;
    for (int j = i + 1; j < c->norder; j++) {
      tpu_instr *x = c->order[j];
      if (!combinable_op(x) || !same_kind(a, x) || bytes + bytes_of(x) > TPU_COMBINE_MAX_BYTES) continue;
      if (reaches_marked(x, mark, seen, ++stamp, stack)) continue;
      members[nm++] = x;
      mark[x->id] = 1;
      bytes += bytes_of(x);
    }
    for (int k = 0; k < nm; k++) mark[members[k]->id] = 0;
    if (nm > 1) {
      st = combine(b, c, members, nm);
      *found = 1;
    }
  }
  tpu_free(mark);
  tpu_free(seen);
  tpu_free(stack);
  tpu_free(members);
  if (st == TPU_OK && *found && tpu_build_remove_dead(b, c) < 0) st = TPU_ERR_NOMEM;
  return st;
}

tpu_status tpu__pass_combine(tpu_module *m, const tpu_compile_opts *o, tpu_diag *d) {
  int any = 0;
  for (int c = 0; c < m->ncomps && !any; c++)
    for (int i = 0; i < m->comps[c]->ninstrs && !any; i++) {
      const tpu_instr *x = m->comps[c]->instrs[i];
      any = combinable_op(x) || x->op == TPU_OP_ALL_TO_ALL || x->op == TPU_OP_COLLECTIVE_PERMUTE ||
            x->op == TPU_OP_COLLECTIVE_BROADCAST;
    }
  if (!any) return TPU_OK;
  tpu_builder b;
  TPU_TRY(tpu_builder_init(&b, m, d));
  tpu_status st = TPU_OK;
  int ncomps = m->ncomps;
  int changed = 0;
  for (int c = 0; st == TPU_OK && c < ncomps; c++) {
    int made = 0;
    st = tpu__cse_collectives(&b, m->comps[c], &made, d);
    if (st == TPU_OK) st = tpu__quantize_collectives(&b, m->comps[c], &made, d);
    changed |= made;
  }
  for (int c = 0; st == TPU_OK && c < ncomps; c++) {
    int made = 0;
    st = tpu__sink_loop_all_reduces(&b, m->comps[c], &made, d);
    changed |= made;
  }
  ncomps = m->ncomps; /* the sunk all-reduces may have made reducers */
  for (int c = 0; st == TPU_OK && c < ncomps; c++) {
    int made = 0;
    st = tpu__make_reduce_scatters(&b, m->comps[c], o->chip, &made, d);
    if (st == TPU_OK) st = tpu__pad_reduce_scatters(&b, m->comps[c], o->chip, &made, d);
    changed |= made;
  }
  /* last to first: the adders it makes go just before their computation */
  for (int c = m->ncomps - 1; st == TPU_OK && c >= 0; c--) {
    int made = 0;
    st = tpu__all_gathers_as_all_reduces(&b, m->comps[c], o->chip, &made, d);
    changed |= made;
  }
  ncomps = m->ncomps;
  for (int c = 0; st == TPU_OK && c < ncomps; c++)
    for (int found = 1; st == TPU_OK && found;) {
      st = combine_one(&b, m->comps[c], &found);
      changed |= found;
    }
  /* The members' own reducers may be used no more. */
  if (st == TPU_OK && changed && tpu_build_remove_unused_comps(&b) < 0) st = TPU_ERR_NOMEM;
  if (st == TPU_OK) st = tpu_build_finish_all(&b);
  tpu_builder_deinit(&b);
  return st;
}
