/* combine-collectives, after the reduce-scatters are made: a reduce-scatter along the rows of a
 * 2-D operand that the XLA TPU compiler's all-reduce-scatter fusion pads. Its emitter streams
 * the local operand in spans; over a group of 2 or 4 devices an operand of more than one span
 * (chip field reduce_scatter_span_bytes) is padded with rows of zeros so that each device's
 * block is a few rows longer than its share, and its final program then moves the rows past
 * each block to the next device of the group by one collective-permute and each device keeps
 * its share out of the rows it received and its padded block (bench/spmd/probe_rs_pad.py: the
 * permute comes exactly where the fusion pads, 51 of 77 gradients on v5e, v6e and v5p; never
 * over 8 devices nor within one span; docs/spmd.md). Here the reduce-scatter becomes that:
 * pad, the scatter of the padded rows, a slice of its last rows, the permute, a concatenate
 * and each device's dynamic slice of its share. Values are unchanged (the padding is zeros and
 * no device keeps it).
 *
 * Rule as read (where group x spans < 8 nothing is padded: 2 devices x 2 spans is not, 2 x 4
 * and 4 x 2 are); not matched: the 5 probed operands of 3 x 2^k bytes (12 and 18 MiB over 4
 * devices on v5e), which the compiler streams in spans of 6 MiB unpadded. The pad itself is
 * the emitter's (8 to 80 rows per block in the probe, 16 the most frequent): tpusim pads one
 * (8,128) tile of rows per block (16 rows of a 16-bit type), so the permute's size is the
 * compiler's to within those rows. */
#include <string.h>

#include "base/alloc.h"
#include "base/strbuf.h"
#include "chip/chip.h"
#include "compile/passes/hlo_passes.h"
#include "compile/spmd/spmd.h"
#include "ir/build.h"
#include "ir/collective.h"

/* Rows of padding per block: one (8,128) tile's rows (sublanes times the values a 32-bit
 * word packs). */
static int64_t pad_rows(tpu_dtype t) {
  int64_t bytes = (int64_t)tpu_dtype_size(t);
  return bytes >= 4 || bytes <= 0 ? 8 : 8 * (4 / bytes);
}

/* Whether the compiler pads a scatter of `bytes` (the local operand) along its rows over a
 * group of `group` devices of `chip`. */
int tpu_spmd_pads_reduce_scatter(const tpu_chip *chip, int64_t group, int64_t bytes) {
  if (!chip || chip->reduce_scatter_span_bytes <= 0 || (group != 2 && group != 4)) return 0;
  const int64_t spans = (bytes + chip->reduce_scatter_span_bytes - 1) / chip->reduce_scatter_span_bytes;
  return spans >= 2 && group * spans >= 8;
}

static tpu_status add(tpu_builder *b, tpu_comp *c, tpu_opcode op, const tpu_shape *sh, tpu_instr **ops, int n,
                      tpu_loc loc, tpu_instr **out) {
  tpu_shape r = *sh;
  r.has_layout = 0;
  r.layout_tail = NULL;
  return tpu_build_instr(b, c, op, "rs_pad", &r, ops, n, loc, out);
}

/* The padded scatter that replaces rs (operand x [R, W], group size g, device p at place
 * self[p] of a group whose next member is next[p], -1 for the last). */
static tpu_status padded(tpu_builder *b, tpu_comp *c, tpu_instr *rs, const int64_t *self, const int64_t *next,
                         int64_t ndev, int64_t g, tpu_instr **out) {
  tpu_diag *d = b->d;
  tpu_instr *x = rs->operands[0];
  const tpu_loc loc = rs->loc;
  const int64_t rows = x->shape.dims[0], share = rows / g, delta = pad_rows(x->shape.dtype);
  const int64_t block = share + delta, moved = (g - 1) * delta;
  char buf[160];
  tpu_tensor z;
  tpu_instr *zv, *pd, *scat, *sl, *perm, *cat, *off, *zi, *keep, *ops[3];
  TPU_TRY(tpu_tensor_alloc(&z, x->shape.dtype, 0, NULL, d));
  TPU_TRY(tpu_build_constant(b, c, "rs_pad.zero", &z, NULL, &zv));
  tpu_shape ps = x->shape;
  ps.dims[0] = g * block;
  ops[0] = x;
  ops[1] = zv;
  TPU_TRY(add(b, c, TPU_OP_PAD, &ps, ops, 2, loc, &pd));
  snprintf(buf, sizeof buf, "0_%lldx0_0", (long long)(g * delta));
  TPU_TRY(tpu_build_set_attr(b, pd, "padding", buf));
  tpu_shape bs = rs->shape;
  bs.dims[0] = block;
  TPU_TRY(add(b, c, TPU_OP_REDUCE_SCATTER, &bs, &pd, 1, loc, &scat));
  for (int a = 0; a < rs->nattrs; a++) TPU_TRY(tpu_build_set_attr(b, scat, rs->attrs[a].name, rs->attrs[a].value));
  scat->src_name = rs->src_name;
  tpu_shape ms = bs;
  ms.dims[0] = moved;
  TPU_TRY(add(b, c, TPU_OP_SLICE, &ms, &scat, 1, loc, &sl));
  snprintf(buf, sizeof buf, "{[%lld:%lld], [0:%lld]}", (long long)(block - moved), (long long)block,
           (long long)bs.dims[1]);
  TPU_TRY(tpu_build_set_attr(b, sl, "slice", buf));
  TPU_TRY(add(b, c, TPU_OP_COLLECTIVE_PERMUTE, &ms, &sl, 1, loc, &perm));
  tpu_strbuf pairs;
  tpu_strbuf_init(&pairs);
  tpu_strbuf_printf(&pairs, "{");
  for (int64_t p = 0, first = 1; p < ndev; p++)
    if (next[p] >= 0) {
      tpu_strbuf_printf(&pairs, "%s{%lld,%lld}", first ? "" : ",", (long long)p, (long long)next[p]);
      first = 0;
    }
  tpu_strbuf_printf(&pairs, "}");
  tpu_status st = pairs.oom ? TPU_FAIL(d, TPU_ERR_NOMEM, loc, "out of memory")
                            : tpu_build_set_attr(b, perm, "source_target_pairs", pairs.s);
  tpu_strbuf_deinit(&pairs);
  TPU_TRY(st);
  const char *ch = NULL;
  for (int a = 0; a < rs->nattrs; a++)
    if (!strcmp(rs->attrs[a].name, "channel_id")) ch = rs->attrs[a].value;
  if (ch) TPU_TRY(tpu_build_set_attr(b, perm, "channel_id", ch));
  tpu_shape cs = bs;
  cs.dims[0] = moved + block;
  ops[0] = perm;
  ops[1] = scat;
  TPU_TRY(add(b, c, TPU_OP_CONCATENATE, &cs, ops, 2, loc, &cat));
  TPU_TRY(tpu_build_set_attr(b, cat, "dimensions", "{0}"));
  /* on the device at place s the concatenation starts at padded row s * block - moved and
   * its share at s * share = s * block - s * delta: (g - 1 - s) * delta rows in */
  TPU_TRY(tpu__spmd_device_entry(b, c, "rs_pad", self, ndev, -delta, (g - 1) * delta, loc, &off, &zi));
  ops[0] = cat;
  ops[1] = off;
  ops[2] = zi;
  TPU_TRY(add(b, c, TPU_OP_DYNAMIC_SLICE, &rs->shape, ops, 3, loc, &keep));
  snprintf(buf, sizeof buf, "{%lld,%lld}", (long long)share, (long long)bs.dims[1]);
  TPU_TRY(tpu_build_set_attr(b, keep, "dynamic_slice_sizes", buf));
  *out = keep;
  return TPU_OK;
}

/* Is c the body of a fusion (a compiled program's all-reduce-scatter fusion, padded there
 * already)? */
static int fused(const tpu_module *m, const tpu_comp *c) {
  for (int k = 0; k < m->ncomps; k++)
    for (int i = 0; i < m->comps[k]->ninstrs; i++)
      if (m->comps[k]->instrs[i]->calls == c) return 1;
  return 0;
}

tpu_status tpu__pad_reduce_scatters(tpu_builder *b, tpu_comp *c, const tpu_chip *chip, int *changed, tpu_diag *d) {
  int64_t replicas, partitions;
  tpu_module_device_grid(b->m, &replicas, &partitions);
  const int64_t ndev = replicas * partitions;
  if (replicas != 1 || ndev < 2 || !chip || chip->reduce_scatter_span_bytes <= 0) return TPU_OK;
  int any = 0;
  for (int i = 0; i < c->ninstrs && !any; i++) any = c->instrs[i]->op == TPU_OP_REDUCE_SCATTER;
  if (!any || fused(b->m, c)) return TPU_OK;
  int64_t *members = tpu_calloc((size_t)ndev, sizeof *members), *self = tpu_calloc((size_t)ndev, sizeof *self),
          *next = tpu_calloc((size_t)ndev, sizeof *next);
  if (!members || !self || !next) {
    tpu_free(members);
    tpu_free(self);
    tpu_free(next);
    return TPU_FAIL(d, TPU_ERR_NOMEM, c->loc, "out of memory");
  }
  tpu_status st = TPU_OK;
  const int n = c->ninstrs;
  for (int i = 0; st == TPU_OK && i < n; i++) {
    tpu_instr *rs = c->instrs[i];
    if (rs->op != TPU_OP_REDUCE_SCATTER || rs->noperands != 1 || rs->dimensions.n != 1 ||
        rs->dimensions.v[0] != 0 || rs->shape.rank != 2 || rs->operands[0]->op == TPU_OP_PAD ||
        !tpu_dtype_is_array(rs->shape.dtype))
      continue;
    const tpu_instr *x = rs->operands[0];
    const int64_t bytes = tpu_shape_numel(&x->shape) * (int64_t)tpu_dtype_size(x->shape.dtype);
    int64_t g = x->shape.dims[0] / (rs->shape.dims[0] > 0 ? rs->shape.dims[0] : 1);
    if (g * rs->shape.dims[0] != x->shape.dims[0] || !tpu_spmd_pads_reduce_scatter(chip, g, bytes)) continue;
    tpu_diag quiet; /* a malformed group is the verifier's to report: here it only says no */
    memset(&quiet, 0, sizeof quiet);
    tpu_coll_groups cg;
    int ok = tpu_coll_groups_read(rs, replicas, partitions, &cg, &quiet) == TPU_OK;
    for (int64_t dev = 0; ok && dev < ndev; dev++) {
      int64_t m;
      ok = tpu_coll_groups_members(rs, &cg, partitions, dev, members, &m, &self[dev], &quiet) == TPU_OK && m == g;
      if (ok) next[dev] = self[dev] + 1 < g ? members[self[dev] + 1] : -1;
    }
    tpu_coll_groups_free(&cg); /* safe after a failed read too: it starts zeroed */
    if (!ok) continue;
    tpu_instr *keep;
    st = padded(b, c, rs, self, next, ndev, g, &keep);
    if (st == TPU_OK) {
      const int root = rs->is_root;
      tpu_build_replace_uses(c, rs, keep);
      if (root) tpu_build_set_root(c, keep);
      *changed = 1;
    }
  }
  tpu_free(members);
  tpu_free(self);
  tpu_free(next);
  if (st == TPU_OK && *changed && tpu_build_remove_dead(b, c) < 0) st = TPU_ERR_NOMEM;
  return st;
}
