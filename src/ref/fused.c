/* Fused evaluation of f32 elementwise trees: each tree runs block by block in cache, threaded, with the unfused kernels' arithmetic. */
#include "ref/fused.h"

#include <string.h>

#include "base/alloc.h"
#include "base/par.h"
#include "ref/elementwise_int.h"

enum { MAX_NODES = 32, MIN_PAR_WORK = 1 << 22 }; /* work per thread: elements x nodes */

static int is_f32_array(const tpu_shape *s) { return s->dtype == TPU_F32; }

static int same_dims(const tpu_shape *a, const tpu_shape *b) {
  if (a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

/* A compare of two f32 arrays of its dimensions: a node that can only be inlined, into the
 * predicate of a select (trees produce f32). */
static int is_pred_node(const tpu_instr *in) {
  return in->op == TPU_OP_COMPARE && in->shape.dtype == TPU_PRED && in->shape.rank > 0 && in->noperands == 2 &&
         is_f32_array(&in->operands[0]->shape) && is_f32_array(&in->operands[1]->shape) &&
         same_dims(&in->operands[0]->shape, &in->shape) && same_dims(&in->operands[1]->shape, &in->shape);
}

static int is_i32(tpu_dtype t) { return t == TPU_S32 || t == TPU_U32; }

/* An s32/u32 node: a binary op run on the 32-bit values (tpu__ew_i32_binary) whose operands
 * have its type and dimensions, or a broadcast of a scalar of its type. */
static int i32_fusible(const tpu_instr *in) {
  const tpu_dtype t = in->shape.dtype;
  if (!is_i32(t) || in->shape.rank == 0) return 0;
  if (in->op == TPU_OP_BROADCAST)
    return in->noperands == 1 && in->operands[0]->shape.dtype == t && in->operands[0]->shape.rank == 0;
  if (tpu_op_class_of(in->op) != TPU_CLS_BINARY || in->noperands != 2 ||
      !tpu__ew_i32_binary(in->op, 0, NULL, NULL, 0, NULL, 0, 0))
    return 0;
  for (int k = 0; k < 2; k++)
    if (in->operands[k]->shape.dtype != t || !same_dims(&in->operands[k]->shape, &in->shape)) return 0;
  return 1;
}

int tpu__ref_fusible(const tpu_instr *in) {
  if (is_i32(in->shape.dtype)) return i32_fusible(in);
  if (!is_f32_array(&in->shape) || in->shape.rank == 0) return 0;
  if (in->op == TPU_OP_BROADCAST)
    return in->noperands == 1 && is_f32_array(&in->operands[0]->shape) && in->operands[0]->shape.rank == 0;
  if (in->op == TPU_OP_SELECT) { /* a pred of the result's dims or a scalar; two f32 arrays */
    if (in->noperands != 3) return 0;
    const tpu_shape *p = &in->operands[0]->shape;
    if (p->dtype != TPU_PRED || (p->rank != 0 && !same_dims(p, &in->shape))) return 0;
    return is_f32_array(&in->operands[1]->shape) && same_dims(&in->operands[1]->shape, &in->shape) &&
           is_f32_array(&in->operands[2]->shape) && same_dims(&in->operands[2]->shape, &in->shape);
  }
  tpu_op_class c = tpu_op_class_of(in->op);
  if (c == TPU_CLS_BINARY) {
    if (in->noperands != 2 || !tpu__ew_f32_binary(in->op, NULL, NULL, 0)) return 0;
  } else if (c == TPU_CLS_UNARY) {
    if (in->noperands != 1 || !tpu__ew_f32_unary(in->op, NULL, 0)) return 0;
  } else {
    return 0;
  }
  for (int k = 0; k < in->noperands; k++)
    if (!is_f32_array(&in->operands[k]->shape) || !same_dims(&in->operands[k]->shape, &in->shape)) return 0;
  return 1;
}

void tpu__ref_fuse_plan(const tpu_comp *c, const int *uses, uint8_t *inl, int *size) {
  memset(inl, 0, (size_t)c->ninstrs);
  /* size[id]: nodes in the tree rooted at id (itself and the operands inlined into it). */
  for (int i = 0; i < c->norder; i++) {
    const tpu_instr *in = c->order[i];
    size[in->id] = 1;
    if (!tpu__ref_fusible(in) || in->op == TPU_OP_BROADCAST) continue;
    for (int k = 0; k < in->noperands; k++) {
      const tpu_instr *o = in->operands[k];
      int pred = in->op == TPU_OP_SELECT && k == 0;
      if (o == c->root || uses[o->id] != 1 ||
          !(pred ? is_pred_node(o) : o->shape.dtype == in->shape.dtype && tpu__ref_fusible(o)))
        continue; /* (a tree's nodes are all f32, or all one 32-bit integer type) */
      if (size[in->id] + size[o->id] > MAX_NODES) continue;
      inl[o->id] = 1;
      size[in->id] += size[o->id];
    }
  }
}

int tpu__ref_fused_leaves(const tpu_instr *root, const uint8_t *inl, const tpu_instr **leaves) {
  int n = 0; /* at most 2 per node but select's 3: under 3 * MAX_NODES */
  const tpu_instr *stack[MAX_NODES];
  int sp = 0;
  stack[sp++] = root;
  while (sp) {
    const tpu_instr *x = stack[--sp];
    for (int k = 0; k < x->noperands; k++) {
      const tpu_instr *o = x->operands[k];
      if (inl[o->id]) stack[sp++] = o;
      else leaves[n++] = o;
    }
  }
  return n;
}

/* A tree in post order: node i's operands are earlier nodes (child >= 0) or leaf values. */
typedef struct {
  const tpu_instr *in;
  tpu_opcode op;
  int bcast; /* a broadcast scalar: operand 0 is the scalar leaf */
  int nops;
  int child[3];
  const float *leaf[3];
  int step[3];          /* a binary node's leaf: 1 dense, 0 a scalar (an inlined broadcast) */
  int flushed;          /* every value it produces has denormals flushed already */
  const uint8_t *pleaf; /* a select's predicate leaf */
  int pscalar;          /* ... a scalar */
} fnode;

typedef struct {
  fnode node[MAX_NODES];
  int n;
  float *out;
  int64_t numel;
} ftree;

static int build(ftree *t, const tpu_instr *x, const uint8_t *inl, const tpu_tensor *const *val, int64_t numel) {
  fnode nd;
  memset(&nd, 0, sizeof nd);
  nd.in = x;
  nd.op = x->op;
  nd.bcast = x->op == TPU_OP_BROADCAST;
  nd.nops = x->noperands;
  if (nd.nops > 3) return -1;
  for (int k = 0; k < x->noperands; k++) {
    const tpu_instr *o = x->operands[k];
    nd.child[k] = -1;
    nd.step[k] = 1;
    if (inl[o->id] && o->op == TPU_OP_BROADCAST && nd.nops == 2 && !nd.bcast && x->op != TPU_OP_COMPARE) {
      /* a broadcast scalar read in place (stride 0) instead of filled into a block */
      const tpu_tensor *v = val[o->operands[0]->id];
      if (!v || v->dtype != TPU_F32 || tpu_tensor_numel(v) != 1) return -1;
      nd.leaf[k] = v->data;
      nd.step[k] = 0;
    } else if (inl[o->id]) {
      int c = build(t, o, inl, val, numel);
      if (c < 0) return -1;
      nd.child[k] = c;
    } else if (x->op == TPU_OP_SELECT && k == 0) {
      const tpu_tensor *v = val[o->id];
      int64_t vn = v ? tpu_tensor_numel(v) : -1;
      if (!v || v->dtype != TPU_PRED || (v->rank != 0 && vn != numel) || (v->rank == 0 && vn != 1)) return -1;
      nd.pleaf = v->data;
      nd.pscalar = v->rank == 0;
    } else {
      const tpu_tensor *v = val[o->id];
      if (!v || v->dtype != TPU_F32 || tpu_tensor_numel(v) != (nd.bcast ? 1 : numel)) return -1;
      nd.leaf[k] = v->data;
    }
  }
  /* Binary ops and unary ops but negate/abs end with a flush; negate/abs keep their
   * operand's; a select, both of its values'; broadcasts and compares: no. */
  if (nd.op == TPU_OP_NEGATE || nd.op == TPU_OP_ABS)
    nd.flushed = nd.child[0] >= 0 && t->node[nd.child[0]].flushed;
  else if (nd.op == TPU_OP_SELECT)
    nd.flushed = nd.child[1] >= 0 && t->node[nd.child[1]].flushed && nd.child[2] >= 0 && t->node[nd.child[2]].flushed;
  else
    nd.flushed = !nd.bcast && nd.op != TPU_OP_COMPARE;
  if (t->n >= MAX_NODES) return -1;
  t->node[t->n] = nd;
  return t->n++;
}

/* Blocks [lo, hi) of TPU_EW_BLOCK elements. */
static void run_blocks(void *ctx, int task, int64_t lo, int64_t hi) {
  const ftree *t = ctx;
  float buf[MAX_NODES][TPU_EW_BLOCK];
  uint8_t pbuf[MAX_NODES][TPU_EW_BLOCK];
  float *res[MAX_NODES];
  uint8_t *pres[MAX_NODES];
  (void)task;
  for (int64_t blk = lo; blk < hi; blk++) {
    int64_t s = blk * TPU_EW_BLOCK;
    int m = (int)(t->numel - s < TPU_EW_BLOCK ? t->numel - s : TPU_EW_BLOCK);
    for (int i = 0; i < t->n; i++) {
      const fnode *nd = &t->node[i];
      float *a;
      if (nd->bcast) {
        a = buf[i];
        for (int e = 0; e < m; e++) a[e] = nd->leaf[0][0];
      } else if (nd->op == TPU_OP_COMPARE) {
        const float *x = nd->child[0] >= 0 ? res[nd->child[0]] : nd->leaf[0] + s;
        const float *y = nd->child[1] >= 0 ? res[nd->child[1]] : nd->leaf[1] + s;
        tpu__ew_f32_compare(nd->in, pbuf[i], x, y, m);
        pres[i] = pbuf[i];
        res[i] = NULL;
        continue;
      } else if (nd->op == TPU_OP_SELECT) { /* element bits copied, as the select kernel does */
        const uint8_t *p = nd->child[0] >= 0 ? pres[nd->child[0]] : nd->pscalar ? NULL : nd->pleaf + s;
        const float *x = nd->child[1] >= 0 ? res[nd->child[1]] : nd->leaf[1] + s;
        const float *y = nd->child[2] >= 0 ? res[nd->child[2]] : nd->leaf[2] + s;
        a = i == t->n - 1 ? t->out + s : buf[i];
        if (p)
          for (int e = 0; e < m; e++) a[e] = p[e] ? x[e] : y[e];
        else
          memcpy(a, nd->pleaf[0] ? x : y, sizeof(float) * (size_t)m);
      } else if (nd->nops == 2) {
        const float *x = nd->child[0] >= 0 ? res[nd->child[0]] : nd->leaf[0] + s * nd->step[0];
        const float *y = nd->child[1] >= 0 ? res[nd->child[1]] : nd->leaf[1] + s * nd->step[1];
        int sx = nd->child[0] >= 0 || nd->step[0], sy = nd->child[1] >= 0 || nd->step[1];
        int fx = !(nd->child[0] >= 0 && t->node[nd->child[0]].flushed);
        int fy = !(nd->child[1] >= 0 && t->node[nd->child[1]].flushed);
        a = i == t->n - 1 ? t->out + s : buf[i]; /* the root writes the result in place */
        tpu__ew_f32_binary_to(nd->op, a, x, sx, fx, y, sy, fy, m);
      } else {
        if (nd->child[0] >= 0) {
          a = res[nd->child[0]];
        } else {
          a = buf[i];
          memcpy(a, nd->leaf[0] + s, sizeof(float) * (size_t)m);
        }
        tpu__ew_f32_unary(nd->op, a, m);
      }
      res[i] = a;
    }
    if (res[t->n - 1] != t->out + s) memcpy(t->out + s, res[t->n - 1], sizeof(float) * (size_t)m);
  }
}

/* ---- s32/u32 trees: each node tpu__ew_i32_binary on a block, or a broadcast scalar ----
 * Decoded once per plan (tpu__ref_i32_tree): a call only looks its leaves' values up. */

typedef struct {
  tpu_opcode op;
  int sg, bcast;
  int child[2]; /* an earlier node, or -1: a leaf */
  int leaf[2];  /* the leaf's instruction id (its value in val[]) */
  int step[2];  /* a leaf: 1 dense, 0 a scalar (an inlined broadcast's operand, or a broadcast's) */
} inode;

struct tpu__ref_itree {
  inode node[MAX_NODES];
  int n;
  tpu_dtype ty;
};

static int idecode(tpu__ref_itree *t, const tpu_instr *x, const uint8_t *inl) {
  inode nd;
  memset(&nd, 0, sizeof nd);
  nd.op = x->op;
  nd.sg = t->ty == TPU_S32;
  nd.bcast = x->op == TPU_OP_BROADCAST;
  if (x->shape.dtype != t->ty || x->noperands != (nd.bcast ? 1 : 2)) return -1;
  for (int k = 0; k < x->noperands; k++) {
    const tpu_instr *o = x->operands[k];
    nd.child[k] = -1;
    nd.step[k] = !nd.bcast;
    if (inl[o->id] && o->op == TPU_OP_BROADCAST) { /* its scalar read in place (stride 0) */
      nd.leaf[k] = o->operands[0]->id;
      nd.step[k] = 0;
    } else if (inl[o->id]) {
      if ((nd.child[k] = idecode(t, o, inl)) < 0) return -1;
    } else {
      nd.leaf[k] = o->id;
    }
  }
  if (t->n >= MAX_NODES) return -1;
  t->node[t->n] = nd;
  return t->n++;
}

tpu__ref_itree *tpu__ref_i32_tree(const tpu_instr *root, const uint8_t *inl) {
  if (!is_i32(root->shape.dtype) || !tpu__ref_fusible(root) || inl[root->id]) return NULL;
  tpu__ref_itree *t = tpu_malloc(sizeof *t);
  if (!t) return NULL;
  t->n = 0;
  t->ty = root->shape.dtype;
  if (idecode(t, root, inl) < 0) {
    tpu_free(t);
    return NULL;
  }
  return t;
}

void tpu__ref_itree_free(tpu__ref_itree *t) { tpu_free(t); }

typedef struct {
  const tpu__ref_itree *t;
  const uint32_t *leaf[MAX_NODES][2];
  uint32_t *out;
  int64_t numel;
} icall;

static void run_iblocks(void *ctx, int task, int64_t lo, int64_t hi) {
  const icall *c = ctx;
  const tpu__ref_itree *t = c->t;
  uint32_t buf[MAX_NODES][TPU_EW_BLOCK];
  const uint32_t *res[MAX_NODES];
  (void)task;
  for (int64_t blk = lo; blk < hi; blk++) {
    int64_t s = blk * TPU_EW_BLOCK;
    int m = (int)(c->numel - s < TPU_EW_BLOCK ? c->numel - s : TPU_EW_BLOCK);
    for (int i = 0; i < t->n; i++) {
      const inode *nd = &t->node[i];
      uint32_t *a = i == t->n - 1 ? c->out + s : buf[i]; /* the root writes the result in place */
      if (nd->bcast) {
        for (int e = 0; e < m; e++) a[e] = c->leaf[i][0][0];
      } else {
        const uint32_t *x = nd->child[0] >= 0 ? res[nd->child[0]] : c->leaf[i][0] + s * nd->step[0];
        const uint32_t *y = nd->child[1] >= 0 ? res[nd->child[1]] : c->leaf[i][1] + s * nd->step[1];
        tpu__ew_i32_binary(nd->op, nd->sg, a, x, nd->child[0] >= 0 || nd->step[0], y, nd->child[1] >= 0 || nd->step[1],
                           m);
      }
      res[i] = a;
    }
  }
}

tpu_status tpu__ref_i32_tree_eval(const tpu__ref_itree *t, const tpu_instr *root, const tpu_tensor *const *val,
                                  tpu_tensor *out, tpu_diag *d) {
  icall c;
  c.t = t;
  c.numel = tpu_shape_numel(&root->shape);
  tpu_tensor_zero(out);
  for (int i = 0; i < t->n; i++) {
    const inode *nd = &t->node[i];
    for (int k = 0; k < (nd->bcast ? 1 : 2); k++) {
      if (nd->child[k] >= 0) continue;
      const tpu_tensor *v = val[nd->leaf[k]];
      if (!v || v->dtype != t->ty || tpu_tensor_numel(v) != (nd->step[k] ? c.numel : 1))
        return TPU_FAIL(d, TPU_ERR_INVALID, root->loc, "%s '%s': an operand does not have the result's type",
                        tpu_op_name(root->op), root->name);
      c.leaf[i][k] = v->data;
    }
  }
  TPU_TRY(tpu__ew_alloc_out_uninit(root, out, d));
  c.out = out->data;
  int64_t nblocks = (c.numel + TPU_EW_BLOCK - 1) / TPU_EW_BLOCK;
  tpu_par_run(run_iblocks, &c, nblocks, tpu_par_threads(nblocks, (double)c.numel * t->n, MIN_PAR_WORK));
  return TPU_OK;
}

tpu_status tpu__ref_fused_eval(const tpu_instr *root, const uint8_t *inl, const tpu_tensor *const *val,
                               tpu_tensor *out, tpu_diag *d) {
  if (is_i32(root->shape.dtype)) { /* (the interpreter keeps the decoded tree in its plan) */
    tpu__ref_itree *t = tpu__ref_i32_tree(root, inl);
    tpu_status st = t ? tpu__ref_i32_tree_eval(t, root, val, out, d)
                      : TPU_FAIL(d, TPU_ERR_NOMEM, root->loc, "out of memory decoding '%s'", root->name);
    tpu__ref_itree_free(t);
    return st;
  }
  ftree t; /* build writes each node whole: no copy of an empty 3 KB tree per call */
  t.n = 0;
  tpu_tensor_zero(out);
  int64_t numel = tpu_shape_numel(&root->shape);
  if (build(&t, root, inl, val, numel) < 0)
    return TPU_FAIL(d, TPU_ERR_INVALID, root->loc, "%s '%s': an operand does not have the result's type",
                    tpu_op_name(root->op), root->name);
  TPU_TRY(tpu__ew_alloc_out_uninit(root, out, d));
  t.out = out->data;
  t.numel = numel;
  int64_t nblocks = (numel + TPU_EW_BLOCK - 1) / TPU_EW_BLOCK;
  tpu_par_run(run_blocks, &t, nblocks, tpu_par_threads(nblocks, (double)numel * t.n, MIN_PAR_WORK));
  return TPU_OK;
}
