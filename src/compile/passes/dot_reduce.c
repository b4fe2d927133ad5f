/* Dot strength reduction (part of the simplify pass): a dot one of whose operands is a
 * vector — all its dimensions batch or contracting, or of size 1 — becomes a multiply and
 * a reduce on the vector unit, as the XLA TPU compiler does (its compiled decode step with
 * one token, f32[1,4096] x f32[4096,4096], is one kLoop fusion `multiply_reduce_fusion`;
 * attention over a KV cache for one query is two). A matrix unit would stream the matrix
 * through its weights for a single row of output; the vector unit reads it once.
 *
 * Values are unchanged: both operands are widened to f32 (bf16 and f16 products are exact
 * there, as in the reference dot), multiplied, summed from 0 in the order the dot sums
 * (row-major over the contracting dimensions, which must be listed in ascending order in
 * the matrix operand), and the sum is rounded once to the dot's type. An integer dot (integer
 * operands and result) multiplies and sums in its result's type instead, as the compiler's
 * int8 matrix-vector products do (s8[4096,3000] x s8[3000,1] -> s32: a convert to s32, an s32
 * multiply and an s32 add reduce in one multiply_reduce kLoop fusion on v4, v5e, v5p and
 * v6e); products and sums wrapped at the result's width are the reference's 64-bit sum
 * wrapped once, where f32 loses digits past 2^24. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "chip/chip.h"
#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

typedef struct {
  tpu_builder *b;
  const tpu_chip *chip; /* NULL: no chip's rules */
  tpu_comp *add[TPU_DTYPE_COUNT]; /* (a, b) -> a + b per type, made on first use */
} dr;

static tpu_status adder(dr *r, tpu_dtype t, tpu_comp **out) {
  if (!r->add[t]) TPU_TRY(tpu_build_scalar_comp(r->b, "dot.add", TPU_OP_ADD, t, r->b->m->entry, &r->add[t]));
  *out = r->add[t];
  return TPU_OK;
}

/* A new instruction of `dot`'s computation carrying its location and metadata (so the
 * profile names the kernel after the dot). */
static tpu_status emit(dr *r, tpu_instr *dot, tpu_opcode op, const char *hint, const tpu_shape *s, tpu_instr *const *ops,
                       int n, const char *dims, tpu_instr **out) {
  TPU_TRY(tpu_build_instr_like(r->b, dot->parent, dot, op, hint, s, ops, n, out));
  return dims ? tpu_build_set_attr(r->b, *out, "dimensions", dims) : TPU_OK;
}

/* The type the products are formed and summed in: an integer dot's result type, else f32. */
static tpu_dtype acc_type(const tpu_instr *dot) {
  int ints = tpu_dtype_is_int(dot->shape.dtype);
  for (int k = 0; k < dot->noperands; k++) ints &= tpu_dtype_is_int(dot->operands[k]->shape.dtype);
  return ints ? dot->shape.dtype : TPU_F32;
}

static tpu_status widen(dr *r, tpu_instr *dot, tpu_instr *x, tpu_instr **out) {
  tpu_dtype t = acc_type(dot);
  if (x->shape.dtype == t) {
    *out = x;
    return TPU_OK;
  }
  tpu_shape s = tpu_build_shape(t, x->shape.rank, x->shape.dims);
  return emit(r, dot, TPU_OP_CONVERT, "dot.widen", &s, &x, 1, NULL, out);
}

/* Whether x's value reaches a reduce through converts and elementwise ops of its computation
 * (attention's scores, q . k per head, on their way to the softmax's maximum). */
static int feeds_reduce(const tpu_instr *x, int depth) {
  const tpu_comp *c = x->parent;
  for (int i = 0; c && depth > 0 && i < c->ninstrs; i++) {
    const tpu_instr *u = c->instrs[i];
    int reads = 0;
    for (int j = 0; j < u->noperands; j++) reads |= u->operands[j] == x;
    if (!reads) continue;
    if (u->op == TPU_OP_REDUCE) return 1;
    tpu_op_class k = tpu_op_class_of(u->op);
    if ((u->op == TPU_OP_CONVERT || k == TPU_CLS_UNARY || k == TPU_CLS_BINARY || u->op == TPU_OP_RESHAPE) &&
        feeds_reduce(u, depth - 1))
      return 1;
  }
  return 0;
}

/* Rewrites one dot when it qualifies; *done = 1 then. A batch of vector products runs on the
 * MXU (tpu_dot_on_vector_unit) unless a reduction reads its result: the XLA TPU compiler then
 * computes it in the reduction's vector loop (decode attention's q . k, one multiply_reduce
 * kLoop fusion with the softmax's maximum, where p . v beside it is a kOutput fusion). */
/* Whether dot's vector operand (the one other than matrix operand mi) keeps a free
 * dimension of size 1 (one-query attention's p in einsum('bhqk,bhkd->bhqd'), q = 1). */
static int vector_keeps_unit_dim(const tpu_instr *dot, int mi) {
  const tpu_instr *v = dot->operands[1 - mi];
  const tpu_i64s *b = mi ? &dot->dot.lhs_batch : &dot->dot.rhs_batch, *c = mi ? &dot->dot.lhs_contract : &dot->dot.rhs_contract;
  for (int d = 0; d < v->shape.rank; d++)
    if (tpu_i64s_find(b, d) < 0 && tpu_i64s_find(c, d) < 0 && v->shape.dims[d] == 1) return 1;
  return 0;
}

/* Whether x is a constant, or a broadcast or reshape of one. */
static int is_constant(const tpu_instr *x) {
  while ((x->op == TPU_OP_BROADCAST || x->op == TPU_OP_RESHAPE) && x->noperands == 1) x = x->operands[0];
  return x->op == TPU_OP_CONSTANT;
}

/* Whether x's value comes, within `depth` producers, from a dot's result (converted or not)
 * multiplied or divided by a constant in f32: attention's scores scaled in f32 on their way
 * to the softmax (JAX's einsum(...).astype(f32) / sqrt(d), or an f32 dot times d**-0.5). */
static int f32_scaled_dot(const tpu_instr *x, int depth) {
  if (depth <= 0 || x->op == TPU_OP_DOT || x->op == TPU_OP_PARAMETER) return 0;
  if ((x->op == TPU_OP_MULTIPLY || x->op == TPU_OP_DIVIDE) && x->shape.dtype == TPU_F32)
    for (int i = 0; i < 2; i++) {
      const tpu_instr *s = x->operands[i];
      if (!is_constant(x->operands[1 - i])) continue;
      while ((s->op == TPU_OP_CONVERT || s->op == TPU_OP_RESHAPE) && s->noperands == 1) s = s->operands[0];
      if (s->op == TPU_OP_DOT) return 1;
      /* a dot this pass already made a multiply and a reduce (q . k) */
      if (s->op == TPU_OP_REDUCE && s->noperands == 2) {
        const tpu_instr *m = s->operands[0];
        while (m->op == TPU_OP_CONVERT && m->noperands == 1) m = m->operands[0];
        if (m->op == TPU_OP_MULTIPLY) return 1;
      }
    }
  for (int i = 0; i < x->noperands; i++)
    if (f32_scaled_dot(x->operands[i], depth - 1)) return 1;
  return 0;
}

/* Whether a batched vector product whose vector keeps a size-1 free dimension (one-query
 * attention's p . v) stays on the MXU of a chip without vpu_batched_vector_dots: the XLA TPU
 * compiler on v4, v5e and v5p runs it as a kOutput (MXU) fusion only when it has two or more
 * batch dimensions of more than one element and its vector is a softmax of scores scaled in
 * f32; otherwise a multiply-reduce kLoop fusion. libtpu probes through jax.jit
 * (bench/fidelity/probes/pv_unit.py, v5e, k = 77..2048): [8,32] batches with the scale in f32
 * (divide or multiply) kOutput; the scale in bf16, no scale, p a parameter's softmax, or
 * batches [1,32] / [8,1] kLoop (v4 and v5p: [8,32] f32-scaled kOutput too). */
static int pv_on_mxu(const tpu_instr *dot) {
  int big = 0;
  for (int i = 0; i < dot->dot.lhs_batch.n; i++) big += dot->operands[0]->shape.dims[dot->dot.lhs_batch.v[i]] > 1;
  return big >= 2 && f32_scaled_dot(dot->operands[0], 8) + f32_scaled_dot(dot->operands[1], 8) > 0;
}

/* Whether dot is reduced, as the dot's dimension numbers list it; *mi the matrix operand.
 * Every batched one whose vector keeps a size-1 free dimension is, on a chip with
 * vpu_batched_vector_dots (v6e) always, on the others unless pv_on_mxu. */
static int qualifies(const dr *r, const tpu_instr *dot, int *mi) {
  return tpu_dot_on_vector_unit(dot, mi) || (tpu_dot_vector_shaped(dot, mi) && feeds_reduce(dot, 4)) ||
         (r->chip && tpu_dot_vector_shaped(dot, mi) && vector_keeps_unit_dim(dot, *mi) &&
          (r->chip->vpu_batched_vector_dots || !pv_on_mxu(dot)));
}

/* Whether dot qualifies once its contracting pairs are listed in operand `side`'s ascending
 * order (the listing only orders the sum; which dots are vector products does not depend on
 * it) with `side` the matrix operand. The dimension numbers are sorted in place, tested and
 * put back. */
static int qualifies_sorted(const dr *r, tpu_instr *dot, int side) {
  tpu_i64s *a = side ? &dot->dot.rhs_contract : &dot->dot.lhs_contract, *o = side ? &dot->dot.lhs_contract : &dot->dot.rhs_contract;
  if (a->n != o->n || a->n > TPU_MAX_RANK) return 0;
  int64_t sa[TPU_MAX_RANK], so[TPU_MAX_RANK];
  memcpy(sa, a->v, (size_t)a->n * sizeof *sa);
  memcpy(so, o->v, (size_t)o->n * sizeof *so);
  for (int i = 1; i < a->n; i++)
    for (int j = i; j > 0 && a->v[j] < a->v[j - 1]; j--) {
      int64_t t = a->v[j];
      a->v[j] = a->v[j - 1];
      a->v[j - 1] = t;
      t = o->v[j];
      o->v[j] = o->v[j - 1];
      o->v[j - 1] = t;
    }
  int mi = -1, q = qualifies(r, dot, &mi) && mi == side;
  memcpy(a->v, sa, (size_t)a->n * sizeof *sa);
  memcpy(o->v, so, (size_t)o->n * sizeof *so);
  return q;
}

/* One operand x of an outer-product dot broadcast to the dot's shape in type acc: its
 * contracting (size-1) dimensions dropped, its batch dimensions going to the result's
 * leading places in the listed order, its free ones, in order, from `base` on. */
static tpu_status outer_operand(dr *r, tpu_instr *dot, tpu_instr *x, const tpu_i64s *xb, const tpu_i64s *xc, int base,
                                tpu_dtype acc, tpu_instr **out) {
  char buf[4 * TPU_MAX_RANK * 24];
  int64_t kdims[TPU_MAX_RANK], at[TPU_MAX_RANK];
  int nk = 0, nf = 0;
  for (int d = 0; d < x->shape.rank; d++) {
    if (tpu_i64s_find(xc, d) >= 0) continue;
    int i = tpu_i64s_find(xb, d);
    kdims[nk] = x->shape.dims[d];
    at[nk++] = i >= 0 ? i : base + nf++;
  }
  tpu_instr *v = x;
  if (nk != x->shape.rank) {
    tpu_shape s = tpu_build_shape(x->shape.dtype, nk, kdims);
    TPU_TRY(emit(r, dot, TPU_OP_RESHAPE, "dot.outer", &s, &v, 1, NULL, &v));
  }
  /* broadcast dimensions must rise: order the kept dimensions by their place in the result */
  int64_t perm[TPU_MAX_RANK], pdims[TPU_MAX_RANK], bdims[TPU_MAX_RANK];
  int moved = 0;
  for (int i = 0; i < nk; i++) perm[i] = i;
  for (int i = 1; i < nk; i++)
    for (int j = i; j > 0 && at[perm[j]] < at[perm[j - 1]]; j--) {
      int64_t t = perm[j];
      perm[j] = perm[j - 1];
      perm[j - 1] = t;
    }
  for (int i = 0; i < nk; i++) {
    moved |= perm[i] != i;
    pdims[i] = kdims[perm[i]];
    bdims[i] = at[perm[i]];
  }
  if (moved) {
    tpu_shape s = tpu_build_shape(x->shape.dtype, nk, pdims);
    TPU_TRY(emit(r, dot, TPU_OP_TRANSPOSE, "dot.outer", &s, &v, 1, tpu_dims_text(buf, sizeof buf, perm, nk), &v));
  }
  if (v->shape.dtype != acc) {
    tpu_shape s = tpu_build_shape(acc, nk, pdims);
    TPU_TRY(emit(r, dot, TPU_OP_CONVERT, "dot.widen", &s, &v, 1, NULL, &v));
  }
  tpu_shape bs = tpu_build_shape(acc, dot->shape.rank, dot->shape.dims);
  return emit(r, dot, TPU_OP_BROADCAST, "dot.outer", &bs, &v, 1, tpu_dims_text(buf, sizeof buf, bdims, nk), out);
}

/* A dot contracting only dimensions of size 1 is a product of broadcasts on the vector
 * unit: XLA's algebraic simplifier drops a dot's size-1 dimensions and writes one with no
 * contracting dimension as a multiply of broadcasts, which the XLA TPU compiler makes one
 * broadcast_multiply kLoop fusion (libtpu probes outside the corpora, v4 and v5e: f32
 * [512,1] x [1,64], [1,100] x [700,1] contracting dimension 0 and 1, bf16 [8,300,1] x
 * [8,1,40] batched, f32 [4,16,1,1] x [4,16,1,128], s8 [640,1] x [1,96] -> s32; families
 * gemm_f32_1024x1x33 on all four chips). Values as the dot's: each product formed in the
 * accumulation type (f32, or an integer dot's result type), exact for bf16 and f16, added
 * to 0 (so -0 sums to +0, as the dot's sum from 0 does) and rounded once to the result's
 * type. */
static tpu_status outer_dot(dr *r, tpu_instr *dot, int *done) {
  const tpu_dot_dims *dn = &dot->dot;
  tpu_dtype acc = acc_type(dot);
  int nb = dn->lhs_batch.n, lfree = dot->operands[0]->shape.rank - nb - dn->lhs_contract.n;
  tpu_instr *a, *b, *prod, *zero, *zb, *sum;
  TPU_TRY(outer_operand(r, dot, dot->operands[0], &dn->lhs_batch, &dn->lhs_contract, nb, acc, &a));
  TPU_TRY(outer_operand(r, dot, dot->operands[1], &dn->rhs_batch, &dn->rhs_contract, nb + lfree, acc, &b));
  tpu_shape ms = tpu_build_shape(acc, dot->shape.rank, dot->shape.dims);
  tpu_instr *pair[2] = {a, b};
  TPU_TRY(emit(r, dot, TPU_OP_MULTIPLY, "dot.product", &ms, pair, 2, NULL, &prod));
  tpu_tensor z;
  TPU_TRY(tpu_tensor_alloc(&z, acc, 0, NULL, r->b->d)); /* 0 */
  TPU_TRY(tpu_build_constant(r->b, dot->parent, "dot.zero", &z, NULL, &zero));
  TPU_TRY(emit(r, dot, TPU_OP_BROADCAST, "dot.zero", &ms, &zero, 1, "{}", &zb));
  tpu_instr *two[2] = {zb, prod};
  tpu_shape ss = dot->shape; /* the dot's layout, where it has one */
  ss.dtype = acc;
  ss.layout_tail = NULL;
  TPU_TRY(emit(r, dot, TPU_OP_ADD, "dot.sum", &ss, two, 2, NULL, &sum));
  if (dot->shape.dtype != acc) TPU_TRY(emit(r, dot, TPU_OP_CONVERT, "dot.result", &dot->shape, &sum, 1, NULL, &sum));
  /* the dot's dimension counts, for a program result's relayout (relayout.c dot_dims) */
  char dims[64];
  snprintf(dims, sizeof dims, "%d,%d,%d", nb, lfree, dot->shape.rank - nb - lfree);
  TPU_TRY(tpu_build_set_attr(r->b, sum, "outer_dot", dims));
  tpu_build_replace_uses(dot->parent, dot, sum);
  *done = 1;
  return TPU_OK;
}

static tpu_status reduce_dot(dr *r, tpu_instr *dot, int *done) {
  *done = 0;
  int mi;
  /* A matrix operand listing its contracting dimensions out of order (JAX's 'badc,adbc->ba'
   * lists lhs_contracting_dims={3,2}) is the same vector product: the XLA TPU compiler makes
   * it the same multiply_reduce kLoop fusion, transposing the matrix inside it. The sum must
   * run in the dot's order, so the matrix is transposed first: its contracting dimensions,
   * in the places they hold, take the listed order. */
  if (!qualifies(r, dot, &mi)) {
    if (qualifies_sorted(r, dot, 0))
      mi = 0;
    else if (qualifies_sorted(r, dot, 1))
      mi = 1;
    else if (tpu_dot_unit_contraction(dot))
      return outer_dot(r, dot, done);
    else
      return TPU_OK;
  }
  const tpu_dot_dims *dn = &dot->dot;
  int m_is_lhs = mi == 0;
  tpu_instr *M = dot->operands[mi], *V = dot->operands[1 - mi];
  const tpu_i64s *mb = m_is_lhs ? &dn->lhs_batch : &dn->rhs_batch, *mc = m_is_lhs ? &dn->lhs_contract : &dn->rhs_contract;
  const tpu_i64s *vb = m_is_lhs ? &dn->rhs_batch : &dn->lhs_batch, *vc = m_is_lhs ? &dn->rhs_contract : &dn->lhs_contract;
  char buf[4 * TPU_MAX_RANK * 24];
  int64_t slotv[TPU_MAX_RANK];
  tpu_i64s slots = {slotv, mc->n};
  int ordered = 1;
  for (int i = 1; i < mc->n; i++) ordered &= mc->v[i] > mc->v[i - 1];
  if (!ordered) {
    /* slots: the contracting dimensions' places, ascending; listed dimension j goes to slot j */
    memcpy(slotv, mc->v, (size_t)mc->n * sizeof *slotv);
    for (int i = 1; i < mc->n; i++)
      for (int j = i; j > 0 && slotv[j] < slotv[j - 1]; j--) {
        int64_t t = slotv[j];
        slotv[j] = slotv[j - 1];
        slotv[j - 1] = t;
      }
    int64_t tp[TPU_MAX_RANK], tdims[TPU_MAX_RANK];
    for (int d = 0; d < M->shape.rank; d++) tp[d] = d;
    for (int j = 0; j < mc->n; j++) tp[slotv[j]] = mc->v[j];
    for (int d = 0; d < M->shape.rank; d++) tdims[d] = M->shape.dims[tp[d]];
    tpu_shape s = tpu_build_shape(M->shape.dtype, M->shape.rank, tdims);
    TPU_TRY(emit(r, dot, TPU_OP_TRANSPOSE, "dot.matrix", &s, &M, 1, tpu_dims_text(buf, sizeof buf, tp, M->shape.rank), &M));
    mc = &slots;
  }

  /* V without its free (size-1) dimensions, each kept dimension's place in M */
  int64_t vdims[TPU_MAX_RANK], to_m[TPU_MAX_RANK];
  int vk = 0;
  for (int d = 0; d < V->shape.rank; d++) {
    int i = tpu_i64s_find(vb, d), j = tpu_i64s_find(vc, d);
    if (i < 0 && j < 0) continue;
    vdims[vk] = V->shape.dims[d];
    to_m[vk++] = i >= 0 ? mb->v[i] : mc->v[j];
  }
  /* broadcast dimensions must rise: put V's kept dimensions in M's order first */
  int perm[TPU_MAX_RANK];
  for (int i = 0; i < vk; i++) perm[i] = i;
  for (int i = 1; i < vk; i++)
    for (int j = i; j > 0 && to_m[perm[j]] < to_m[perm[j - 1]]; j--) {
      int t = perm[j];
      perm[j] = perm[j - 1];
      perm[j - 1] = t;
    }
  tpu_instr *v = V;
  if (vk != V->shape.rank) {
    tpu_shape s = tpu_build_shape(V->shape.dtype, vk, vdims);
    TPU_TRY(emit(r, dot, TPU_OP_RESHAPE, "dot.vector", &s, &v, 1, NULL, &v));
  }
  int moved = 0;
  int64_t pd[TPU_MAX_RANK], pdims[TPU_MAX_RANK], bdims[TPU_MAX_RANK];
  for (int i = 0; i < vk; i++) {
    moved |= perm[i] != i;
    pd[i] = perm[i];
    pdims[i] = vdims[perm[i]];
    bdims[i] = to_m[perm[i]];
  }
  if (moved) {
    tpu_shape s = tpu_build_shape(V->shape.dtype, vk, pdims);
    TPU_TRY(emit(r, dot, TPU_OP_TRANSPOSE, "dot.vector", &s, &v, 1, tpu_dims_text(buf, sizeof buf, pd, vk), &v));
  }
  TPU_TRY(widen(r, dot, v, &v));
  tpu_dtype acc = acc_type(dot);
  tpu_shape ms = tpu_build_shape(acc, M->shape.rank, M->shape.dims);
  tpu_instr *mf, *vbc, *prod, *zero, *sum;
  TPU_TRY(emit(r, dot, TPU_OP_BROADCAST, "dot.vector", &ms, &v, 1, tpu_dims_text(buf, sizeof buf, bdims, vk), &vbc));
  TPU_TRY(widen(r, dot, M, &mf));
  tpu_instr *pair[2] = {m_is_lhs ? mf : vbc, m_is_lhs ? vbc : mf};
  TPU_TRY(emit(r, dot, TPU_OP_MULTIPLY, "dot.product", &ms, pair, 2, NULL, &prod));
  tpu_tensor z;
  TPU_TRY(tpu_tensor_alloc(&z, acc, 0, NULL, r->b->d)); /* 0 */
  TPU_TRY(tpu_build_constant(r->b, dot->parent, "dot.zero", &z, NULL, &zero));
  /* the sum keeps M's batch and free dimensions in M's order */
  int64_t kept[TPU_MAX_RANK], kdims[TPU_MAX_RANK];
  int nk = 0;
  for (int d = 0; d < M->shape.rank; d++)
    if (tpu_i64s_find(mc, d) < 0) {
      kept[nk] = d;
      kdims[nk++] = M->shape.dims[d];
    }
  tpu_shape ss = tpu_build_shape(acc, nk, kdims);
  if (tpu_shape_numel(&ss) == tpu_shape_numel(&ms)) {
    /* Every contracting dimension of size 1: one product per result, no sum (XLA's algebraic
     * simplifier makes a reduce that keeps every element a reshape; the compiler's
     * 'abcd,bca->adb' with c = 1 is one kLoop multiply fusion, the result's transpose in its
     * layout). The dot's 0 + p stays an add, exact for p = -0 too. */
    tpu_instr *zb, *flat;
    TPU_TRY(emit(r, dot, TPU_OP_RESHAPE, "dot.sum", &ss, &prod, 1, NULL, &flat));
    TPU_TRY(emit(r, dot, TPU_OP_BROADCAST, "dot.zero", &ss, &zero, 1, "{}", &zb));
    tpu_instr *two[2] = {zb, flat};
    TPU_TRY(emit(r, dot, TPU_OP_ADD, "dot.sum", &ss, two, 2, NULL, &sum));
  } else {
    tpu_comp *add;
    TPU_TRY(adder(r, acc, &add));
    tpu_instr *red_ops[2] = {prod, zero};
    TPU_TRY(emit(r, dot, TPU_OP_REDUCE, "dot.sum", &ss, red_ops, 2, tpu_dims_text(buf, sizeof buf, mc->v, mc->n), &sum));
    TPU_TRY(tpu_build_set_attr(r->b, sum, "to_apply", add->name));
  }
  /* the dot's order: batch dimensions as listed, then M's free dimensions (V's are 1) */
  int64_t order[TPU_MAX_RANK], odims[TPU_MAX_RANK];
  int no = 0;
  moved = 0;
  for (int i = 0; i < mb->n; i++) order[no++] = mb->v[i];
  for (int d = 0; d < M->shape.rank; d++)
    if (tpu_i64s_find(mb, d) < 0 && tpu_i64s_find(mc, d) < 0) order[no++] = d;
  for (int i = 0; i < no; i++) { /* as positions in the sum's dimensions */
    int at = 0;
    while (kept[at] != order[i]) at++;
    order[i] = at;
    odims[i] = kdims[at];
    moved |= at != i;
  }
  tpu_instr *x = sum;
  if (dot->shape.dtype != acc && (moved || no != dot->shape.rank)) {
    tpu_shape s = tpu_build_shape(dot->shape.dtype, nk, kdims);
    TPU_TRY(emit(r, dot, TPU_OP_CONVERT, "dot.result", &s, &x, 1, NULL, &x));
  }
  tpu_dtype xt = x->shape.dtype;
  if (moved) {
    tpu_shape s = tpu_build_shape(xt, no, odims);
    TPU_TRY(emit(r, dot, TPU_OP_TRANSPOSE, "dot.order", &s, &x, 1, tpu_dims_text(buf, sizeof buf, order, no), &x));
  }
  tpu_shape out = dot->shape;
  out.dtype = xt;
  out.layout_tail = NULL;
  if (no != dot->shape.rank) TPU_TRY(emit(r, dot, TPU_OP_RESHAPE, "dot.result", &out, &x, 1, NULL, &x));
  if (dot->shape.dtype != xt) TPU_TRY(emit(r, dot, TPU_OP_CONVERT, "dot.result", &dot->shape, &x, 1, NULL, &x));
  tpu_build_replace_uses(dot->parent, dot, x);
  *done = 1;
  return TPU_OK;
}

tpu_status tpu__dot_strength_reduce(tpu_builder *b, tpu_module *m, const tpu_chip *chip, int *changed) {
  dr r = {b, chip, {NULL}};
  /* The computations as they stand (the adder is inserted among them); fused computations
   * keep what they hold: a fusion made by the TPU compiler is its choice. */
  int nc = m->ncomps;
  tpu_comp **comps = tpu_calloc((size_t)nc + 1, sizeof *comps);
  char *fused = tpu_calloc((size_t)nc + 1, 1);
  if (!comps || !fused) {
    tpu_free(comps);
    tpu_free(fused);
    return TPU_FAIL(b->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory reducing dots");
  }
  for (int ci = 0; ci < nc; ci++) {
    comps[ci] = m->comps[ci];
    for (int i = 0; i < m->comps[ci]->ninstrs; i++) {
      const tpu_instr *in = m->comps[ci]->instrs[i];
      if (in->op == TPU_OP_FUSION && in->calls && in->calls->index >= 0 && in->calls->index < nc) fused[in->calls->index] = 1;
    }
  }
  tpu_status st = TPU_OK;
  for (int ci = 0; st == TPU_OK && ci < nc; ci++) {
    tpu_comp *c = comps[ci];
    if (fused[ci]) continue;
    int any = 0, n = c->ninstrs; /* new instructions are appended; they need no visit */
    for (int i = 0; st == TPU_OK && i < n; i++) {
      int done = 0;
      if (c->instrs[i]->op == TPU_OP_DOT) st = reduce_dot(&r, c->instrs[i], &done);
      any |= done;
    }
    if (st == TPU_OK && any) {
      st = tpu_build_finish(b, c);
      *changed = 1;
    }
  }
  tpu_free(comps);
  tpu_free(fused);
  return st;
}
