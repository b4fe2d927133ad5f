/* The op table's accessors, shapes, and module lifetime. */
#include <stdio.h>
#include <string.h>

#include "base/strbuf.h"
#include "ir/ir.h"

static const struct {
  const char *name;
  size_t len; /* strlen(name): tpu_op_parse compares lengths first (once per instruction read) */
  int arity;
  tpu_op_class cls;
  tpu_op_types ty;
} k_ops[] = {
#define X(e, name, arity, cls, ty) {name, sizeof(name) - 1, arity, TPU_CLS_##cls, TPU_TY_##ty},
#include "ir/ops.def"
#undef X
};
_Static_assert(sizeof k_ops / sizeof k_ops[0] == TPU_OP_COUNT, "op table");

const char *tpu_op_name(tpu_opcode op) { return (unsigned)op < TPU_OP_COUNT ? k_ops[op].name : "?"; }
int tpu_op_arity(tpu_opcode op) { return k_ops[op].arity; }
tpu_op_class tpu_op_class_of(tpu_opcode op) { return k_ops[op].cls; }
tpu_op_types tpu_op_types_of(tpu_opcode op) { return k_ops[op].ty; }

int tpu_instr_mixed_float(const tpu_instr *in, tpu_dtype *work) {
  tpu_op_class c = tpu_op_class_of(in->op);
  if (c != TPU_CLS_BINARY && c != TPU_CLS_TERNARY && in->op != TPU_OP_SELECT && in->op != TPU_OP_CLAMP &&
      in->op != TPU_OP_COMPARE)
    return 0;
  int mixed = 0, first = in->op == TPU_OP_SELECT; /* select's predicate is not a value */
  tpu_dtype w = TPU_PRED, seen = TPU_PRED;
  for (int k = first; k < in->noperands; k++) {
    tpu_dtype t = in->operands[k]->shape.dtype;
    if (!tpu_dtype_is_float(t)) return 0;
    if (k > first && t != seen) mixed = 1;
    seen = t;
    if (k == first || tpu_dtype_size(t) > tpu_dtype_size(w)) w = t;
  }
  if (!mixed) return 0;
  if (in->op != TPU_OP_COMPARE) {
    if (!tpu_dtype_is_float(in->shape.dtype)) return 0;
    w = in->shape.dtype;
  }
  *work = w;
  return 1;
}

int tpu_instr_moves_and_converts(const tpu_instr *in) {
  switch (in->op) {
    case TPU_OP_BROADCAST: case TPU_OP_RESHAPE: case TPU_OP_TRANSPOSE: case TPU_OP_SLICE:
    case TPU_OP_DYNAMIC_SLICE: case TPU_OP_REVERSE: case TPU_OP_PAD: break;
    default: return 0;
  }
  if (in->noperands < 1) return 0;
  tpu_dtype a = in->operands[0]->shape.dtype, r = in->shape.dtype;
  return a != r && tpu_dtype_is_float(a) && tpu_dtype_is_float(r);
}

static int dot_float(tpu_dtype t) { return t == TPU_F32 || t == TPU_BF16 || t == TPU_F16; }

int tpu_instr_moves_minor(const tpu_instr *in) {
  return in->op == TPU_OP_TRANSPOSE && in->shape.rank >= 2 && in->dimensions.n == in->shape.rank &&
         in->dimensions.v[in->shape.rank - 1] != in->shape.rank - 1;
}

int tpu_i64s_find(const tpu_i64s *v, int64_t x) {
  for (int i = 0; i < v->n; i++)
    if (v->v[i] == x) return i;
  return -1;
}

/* Elements of x's free dimensions (neither batch nor contracting). */
static int64_t dot_free_elems(const tpu_instr *x, const tpu_i64s *batch, const tpu_i64s *con) {
  int64_t n = 1;
  for (int d = 0; d < x->shape.rank; d++)
    if (tpu_i64s_find(batch, d) < 0 && tpu_i64s_find(con, d) < 0) n *= x->shape.dims[d];
  return n;
}

int tpu_dot_vector_shaped(const tpu_instr *dot, int *matrix) {
  if (dot->op != TPU_OP_DOT || dot->noperands != 2) return 0;
  const tpu_instr *lhs = dot->operands[0], *rhs = dot->operands[1];
  const tpu_dot_dims *dn = &dot->dot;
  /* float operands and result, or all integer: the compiler's s8 x s8 -> s32 matrix-vector
   * products are multiply_reduce kLoop fusions in s32 (gemm_int8_4096x3000x1, _1000x1000x1,
   * _1x7x33 on v4, v5e, v5p and v6e) */
  int fl = dot_float(lhs->shape.dtype) && dot_float(rhs->shape.dtype) && dot_float(dot->shape.dtype);
  int in = tpu_dtype_is_int(lhs->shape.dtype) && tpu_dtype_is_int(rhs->shape.dtype) && tpu_dtype_is_int(dot->shape.dtype);
  if (!fl && !in) return 0;
  int64_t lf = dot_free_elems(lhs, &dn->lhs_batch, &dn->lhs_contract);
  int64_t rf = dot_free_elems(rhs, &dn->rhs_batch, &dn->rhs_contract);
  if (lf != 1 && rf != 1) return 0;
  int m = rf == 1 && (lf != 1 || tpu_shape_numel(&lhs->shape) > tpu_shape_numel(&rhs->shape)) ? 0 : 1;
  const tpu_i64s *mc = m == 0 ? &dn->lhs_contract : &dn->rhs_contract;
  if (mc->n == 0 || tpu_shape_numel(&(m == 0 ? lhs : rhs)->shape) == 0) return 0;
  for (int i = 1; i < mc->n; i++)
    if (mc->v[i] <= mc->v[i - 1]) return 0;
  if (matrix) *matrix = m;
  return 1;
}

const tpu_instr *tpu_instr_sole_user(const tpu_instr *x) {
  const tpu_comp *c = x->parent;
  const tpu_instr *u = NULL;
  if (!c || c->root == x) return NULL;
  for (int i = 0; i < c->ninstrs; i++)
    for (int j = 0; j < c->instrs[i]->noperands; j++)
      if (c->instrs[i]->operands[j] == x) {
        if (u && u != c->instrs[i]) return NULL;
        u = c->instrs[i];
      }
  return u;
}

/* Whether a reduce that alone reads dot's result (through transposes) sums over one of its
 * batch dimensions: XLA's algebraic simplifier moves a reduce through the transpose it reads
 * and folds a sum over a dot's batch dimensions into the dot's contraction, so the product
 * is no longer over size-1 dimensions only (the backward pass of multi-query attention for
 * one query: dK = sum over the heads of dS^T x Q, the compiler's convolution_bitcast_fusion
 * on the matrix unit contracting the 12 heads, not a broadcast_multiply kernel;
 * attn_bwd_b8q1k77h12kv1d80_f32 on v4, v5e, v5p and v6e). */
static int batch_summed(const tpu_instr *dot) {
  int64_t at[TPU_MAX_RANK]; /* at[d]: the dot's dimension that dimension d of x is */
  for (int d = 0; d < dot->shape.rank; d++) at[d] = d;
  const tpu_instr *x = dot, *u;
  while ((u = tpu_instr_sole_user(x)) && u->op == TPU_OP_TRANSPOSE && u->dimensions.n == u->shape.rank) {
    int64_t nat[TPU_MAX_RANK];
    for (int d = 0; d < u->shape.rank; d++) nat[d] = at[u->dimensions.v[d]];
    memcpy(at, nat, sizeof at);
    x = u;
  }
  if (!u || u->op != TPU_OP_REDUCE || u->noperands != 2 || u->operands[0] != x) return 0;
  for (int i = 0; i < u->dimensions.n; i++)
    if (u->dimensions.v[i] >= 0 && u->dimensions.v[i] < x->shape.rank && at[u->dimensions.v[i]] < dot->dot.lhs_batch.n)
      return 1;
  return 0;
}

int tpu_dot_unit_contraction(const tpu_instr *dot) {
  if (dot->op != TPU_OP_DOT || dot->noperands != 2) return 0;
  const tpu_instr *l = dot->operands[0], *rh = dot->operands[1];
  int fl = 1, in = 1;
  const tpu_dtype ts[3] = {l->shape.dtype, rh->shape.dtype, dot->shape.dtype};
  for (int i = 0; i < 3; i++) {
    fl &= dot_float(ts[i]);
    in &= tpu_dtype_is_int(ts[i]);
  }
  if ((!fl && !in) || tpu_shape_numel(&dot->shape) == 0) return 0;
  const tpu_i64s *lc = &dot->dot.lhs_contract, *rc = &dot->dot.rhs_contract;
  if (lc->n != rc->n || dot->dot.lhs_batch.n != dot->dot.rhs_batch.n) return 0;
  for (int i = 0; i < lc->n; i++)
    if (l->shape.dims[lc->v[i]] != 1 || rh->shape.dims[rc->v[i]] != 1) return 0;
  return !batch_summed(dot);
}

int tpu_dot_on_vector_unit(const tpu_instr *dot, int *matrix) {
  int mi = 0;
  if (!tpu_dot_vector_shaped(dot, &mi)) return 0;
  if (matrix) *matrix = mi;
  /* with batch dimensions, none of size 1, the matrix unit (the XLA TPU compiler's programs on
   * v4, v5e, v5p and v6e: einsum('bhk,bhkd->bhd') and ('bhd,bhkd->bhk') over 8 x 32 heads and
   * ('hk,hkd->hd') are kOutput fusions, where b = 1 or h = 1, or no batch, are kLoop) */
  const tpu_i64s *lb = &dot->dot.lhs_batch;
  int unit = 0;
  for (int i = 0; i < lb->n; i++) unit |= dot->operands[0]->shape.dims[lb->v[i]] == 1;
  /* A contraction shorter than 64 (half a vector register's 128 lanes) runs on the vector
   * unit whatever the batch: the compiler's 'bdn,bn->bd' over b = 4 and 'bhkd,bhd->bhk' over
   * 8 x 32 heads are kLoop multiply_reduce fusions for n = 16, 32, 48 and kOutput (MXU)
   * fusions for n = 64, 128, 256, on v5e and v6e alike (a Mamba step's state . C is one). */
  const tpu_i64s *lc = &dot->dot.lhs_contract;
  int64_t klen = 1;
  for (int i = 0; i < lc->n; i++) klen *= dot->operands[0]->shape.dims[lc->v[i]];
  /* Nor does one whose matrix's first free dimension (the most major, in the order its
   * dimensions are listed, of more than one element) is shorter than 64, however many
   * elements its other free dimensions hold: the compiler's 'bkfg,bk->bfg' over 12 batches
   * with k = 128 is a kLoop multiply_reduce fusion for [f, g] = [33, 8], [63, 8], [48, 128],
   * [33, 128], [3, 128], [16, 16], [32, 32] and a kOutput (MXU) fusion for [64, 8], [64, 2],
   * [128, 3], [264, 8], [128, 128], alike on v4, v5e and v6e, in bf16 and f32, with the free
   * dimensions before or after the contracting one (libtpu probes; families
   * einsum_ba_abcd_adc_a12_b128_c33_d8_bf16 on all four). */
  const tpu_instr *mx = dot->operands[mi];
  const tpu_i64s *mb = mi ? &dot->dot.rhs_batch : &dot->dot.lhs_batch, *mc = mi ? &dot->dot.rhs_contract : &dot->dot.lhs_contract;
  int64_t first = 1;
  for (int d = 0; d < mx->shape.rank && first == 1; d++)
    if (tpu_i64s_find(mb, d) < 0 && tpu_i64s_find(mc, d) < 0) first = mx->shape.dims[d];
  /* Nor does one whose matrix keeps a dimension of size 1, free or contracting (a size-1
   * batch dimension is the unit rule above), whatever its sizes: the compiler's
   * 'xk,xfgk->xfg' over x = 6 and k = 96 is a kLoop multiply_reduce fusion for [f, g] =
   * [100, 1], [1, 100], [64, 1], [200, 1] and a kOutput (MXU) fusion for [100, 2], [100, 4];
   * 'xkr,xfkr->xf' and 'xrk,xrfk->xf' with r = 1 are kLoop for f = 80 and 200, where
   * 'xk,xfk->xf' is kOutput; 'pqr,rsqp->qs' (p = 200, q = 6) is kLoop for r = 1 and
   * kOutput for r = 2 at s = 80, 150, 300 -- alike on v4, v5e, v5p and v6e, in bf16 and f32
   * (libtpu probes through jax.jit, bench/fidelity/probes/vector_dot_unit.py; families
   * einsum_cab_bdac_ad_a4_b1_c256_d96_bf16). The vector's own size-1 free dimensions are
   * compile/passes/dot_reduce.c's (one-query attention's p . v). */
  for (int d = 0; d < mx->shape.rank; d++) unit |= mx->shape.dims[d] == 1;
  return lb->n == 0 || unit || klen < 64 || first < 64;
}

int tpu_op_parse(const char *s, size_t n, tpu_opcode *out) {
  if (n == 20 && !memcmp(s, "optimization-barrier", 20)) {
    *out = TPU_OP_OPT_BARRIER;
    return 1;
  }
  for (int i = 0; i < TPU_OP_COUNT; i++)
    if (k_ops[i].len == n && !memcmp(k_ops[i].name, s, n)) {
      *out = (tpu_opcode)i;
      return 1;
    }
  return 0;
}

int tpu_shape_equal(const tpu_shape *a, const tpu_shape *b) {
  if (a->dtype != b->dtype) return 0;
  if (a->dtype == TPU_TUPLE) {
    if (a->ntuple != b->ntuple) return 0;
    for (int i = 0; i < a->ntuple; i++)
      if (!tpu_shape_equal(&a->elems[i], &b->elems[i])) return 0;
    return 1;
  }
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

int64_t tpu_shape_numel(const tpu_shape *s) {
  int ok;
  return tpu_dims_numel(s->rank, s->dims, &ok);
}

void tpu__shape_put(tpu_strbuf *b, const tpu_shape *s) {
  if (s->dtype == TPU_TUPLE) {
    tpu_strbuf_printf(b, "(");
    for (int i = 0; i < s->ntuple; i++) {
      if (i) tpu_strbuf_printf(b, ", ");
      tpu__shape_put(b, &s->elems[i]);
    }
    tpu_strbuf_printf(b, ")");
    return;
  }
  tpu_strbuf_printf(b, "%s[", tpu_dtype_name(s->dtype));
  for (int i = 0; i < s->rank; i++) tpu_strbuf_printf(b, i ? ",%lld" : "%lld", (long long)s->dims[i]);
  tpu_strbuf_printf(b, "]");
  if (s->has_layout) {
    tpu_strbuf_printf(b, "{");
    for (int i = 0; i < s->rank; i++) tpu_strbuf_printf(b, i ? ",%d" : "%d", s->minor_to_major[i]);
    if (s->layout_tail) tpu_strbuf_printf(b, "%s", s->layout_tail);
    tpu_strbuf_printf(b, "}");
  }
}

int tpu_shape_print(const tpu_shape *s, char *buf, size_t n) {
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  tpu__shape_put(&b, s);
  int len = (int)b.len;
  if (n) snprintf(buf, n, "%s", b.s && !b.oom ? b.s : "?");
  tpu_strbuf_deinit(&b);
  return len;
}

static const tpu_gather_dims k_no_gather;
static const tpu_scatter_dims k_no_scatter;
static const tpu_conv_dims k_no_conv;

void tpu_instr_init(tpu_instr *in) {
  in->feature_group_count = in->batch_group_count = 1;
  in->index = -1;
  in->largest = 1;
  in->gather = &k_no_gather;
  in->scatter = &k_no_scatter;
  in->conv = &k_no_conv;
}

void tpu_module_free(tpu_module *m) {
  if (!m) return;
  if (m->plans && m->plans_free) m->plans_free(m->plans);
  for (int i = 0; i < m->nliterals; i++) {
    tpu_tensor_free(m->literals[i]);
    tpu_free(m->literals[i]);
  }
  tpu_free(m->literals);
  tpu_arena_deinit(&m->arena);
  tpu_free(m);
}

static size_t hash_name(const char *s, size_t n) {
  size_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

tpu_status tpu_module_index_comps(tpu_module *m, tpu_diag *d) {
  size_t cap = 16;
  while (cap < (size_t)m->ncomps * 2) cap *= 2;
  tpu_comp **t = tpu_arena_alloc(&m->arena, sizeof(tpu_comp *) * cap);
  if (!t) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  for (int i = 0; i < m->ncomps; i++) {
    tpu_comp *c = m->comps[i];
    c->index = i;
    size_t h = hash_name(c->name, strlen(c->name)) & (cap - 1);
    while (t[h]) h = (h + 1) & (cap - 1);
    t[h] = c;
  }
  m->comp_table = t;
  m->comp_mask = cap - 1;
  return TPU_OK;
}

tpu_comp *tpu_module_find_comp_n(const tpu_module *m, const char *name, size_t n) {
  if (!m->comp_table) {
    for (int i = 0; i < m->ncomps; i++)
      if (strlen(m->comps[i]->name) == n && !memcmp(m->comps[i]->name, name, n)) return m->comps[i];
    return NULL;
  }
  size_t h = hash_name(name, n) & m->comp_mask;
  for (tpu_comp *c; (c = m->comp_table[h]); h = (h + 1) & m->comp_mask)
    if (strlen(c->name) == n && !memcmp(c->name, name, n)) return c;
  return NULL;
}

tpu_comp *tpu_module_find_comp(const tpu_module *m, const char *name) {
  return tpu_module_find_comp_n(m, name, strlen(name));
}
