/* Reference kernels: reduce and map, the scalar-call helper, and dispatch of the reduction family. */
#include <string.h>

#include "base/bf16.h"
#include "ref/elementwise_int.h"
#include "ref/reduce_int.h"

/* ---- Calling a computation on scalars ---- */

/* ---- Scalar fast path ---- */

static int is_scalar(const tpu_shape *s) { return tpu_dtype_is_array(s->dtype) && s->rank == 0; }

/* Whether the fast path evaluates `in` (see tpu__scall). */
static int fast_supported(const tpu_instr *in) {
  const tpu_dtype t = in->shape.dtype;
  if (in->op == TPU_OP_TUPLE) {
    if (!in->is_root) return 0;
    for (int i = 0; i < in->noperands; i++)
      if (!is_scalar(&in->operands[i]->shape)) return 0;
    return 1;
  }
  if (!is_scalar(&in->shape) || tpu_dtype_size(t) > 8 || tpu_dtype_is_complex(t)) return 0;
  for (int i = 0; i < in->noperands; i++)
    if (!is_scalar(&in->operands[i]->shape) || tpu_dtype_is_complex(in->operands[i]->shape.dtype)) return 0;
  switch (in->op) {
    case TPU_OP_PARAMETER: return 1;
    case TPU_OP_CONSTANT: return in->literal && in->literal->dtype == t && in->literal->nbytes == tpu_dtype_size(t);
    case TPU_OP_COMPARE: return in->noperands == 2 && t == TPU_PRED;
    case TPU_OP_SELECT:
      return in->noperands == 3 && in->operands[0]->shape.dtype == TPU_PRED && in->operands[1]->shape.dtype == t &&
             in->operands[2]->shape.dtype == t;
    case TPU_OP_NOT: return in->noperands == 1 && t == TPU_PRED;
    case TPU_OP_ADD:
    case TPU_OP_MULTIPLY:
    case TPU_OP_MAXIMUM:
    case TPU_OP_MINIMUM:
      return in->noperands == 2 && t != TPU_PRED && in->operands[0]->shape.dtype == t && in->operands[1]->shape.dtype == t;
    case TPU_OP_AND:
    case TPU_OP_OR:
    case TPU_OP_XOR:
      return in->noperands == 2 && !tpu_dtype_is_float(t) && in->operands[0]->shape.dtype == t &&
             in->operands[1]->shape.dtype == t;
    default: return 0;
  }
}

/* compare with the elementwise kernel's semantics: FLOAT (default for floats) compares
 * values with denormals read as zero and NaN unordered; TOTALORDER compares bit-pattern
 * keys of the values in the canonical type; integers compare SIGNED or UNSIGNED at the
 * dtype's width (its own signedness by default; pred unsigned). */
static uint8_t fast_compare(const tpu_instr *in, tpu_dtype t, const void *a, const void *b) {
  const int total = in->cmp_type == TPU_CMPT_TOTALORDER;
  switch (tpu__ew_class(t)) {
    case TPU_EW_F32: {
      float x, y;
      tpu__ew_load_f32(a, t, 0, 1, 1, &x);
      tpu__ew_load_f32(b, t, 0, 1, 1, &y);
      if (total) {
        uint32_t kx = tpu_f32_bits(x), ky = tpu_f32_bits(y);
        kx = (kx & 0x80000000u) ? ~kx : (kx | 0x80000000u);
        ky = (ky & 0x80000000u) ? ~ky : (ky | 0x80000000u);
        return tpu__ref_cmp_result(in->direction, kx < ky, kx == ky, kx > ky);
      }
      x = tpu__ew_flush32(x), y = tpu__ew_flush32(y);
      return tpu__ref_cmp_result(in->direction, x < y, x == y, x > y);
    }
    case TPU_EW_F64: {
      double x, y;
      tpu__ew_load_f64(a, 0, 1, 1, &x);
      tpu__ew_load_f64(b, 0, 1, 1, &y);
      if (total) {
        uint64_t kx, ky;
        memcpy(&kx, &x, 8);
        memcpy(&ky, &y, 8);
        kx = (kx & UINT64_C(0x8000000000000000)) ? ~kx : (kx | UINT64_C(0x8000000000000000));
        ky = (ky & UINT64_C(0x8000000000000000)) ? ~ky : (ky | UINT64_C(0x8000000000000000));
        return tpu__ref_cmp_result(in->direction, kx < ky, kx == ky, kx > ky);
      }
      x = tpu__ew_flush64(x), y = tpu__ew_flush64(y);
      return tpu__ref_cmp_result(in->direction, x < y, x == y, x > y);
    }
    default: {
      int64_t x, y;
      tpu__ew_load_int(a, t, 0, 1, 1, &x);
      tpu__ew_load_int(b, t, 0, 1, 1, &y);
      int w = (int)(8 * tpu_dtype_size(t));
      int sg = tpu_dtype_is_signed(t);
      if (in->cmp_type == TPU_CMPT_SIGNED) sg = 1;
      if (in->cmp_type == TPU_CMPT_UNSIGNED || t == TPU_PRED) sg = 0;
      uint64_t mask = w >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << w) - 1;
      uint64_t ux = tpu__ew_u64(x) & mask, uy = tpu__ew_u64(y) & mask;
      if (sg) {
        uint64_t sb = UINT64_C(1) << (w - 1);
        int64_t p = tpu__ew_s64((ux & sb) ? (ux | ~mask) : ux), q = tpu__ew_s64((uy & sb) ? (uy | ~mask) : uy);
        return tpu__ref_cmp_result(in->direction, p < q, p == q, p > q);
      }
      return tpu__ref_cmp_result(in->direction, ux < uy, ux == uy, ux > uy);
    }
  }
}

/* Prepares the fast path if every instruction qualifies; constants are stored once. */
static void fast_compile(tpu__scall *c) {
  const tpu_comp *comp = c->comp;
  if (comp->norder != comp->ninstrs || !comp->root) return;
  for (int i = 0; i < comp->norder; i++)
    if (!fast_supported(comp->order[i]) || comp->order[i]->id < 0 || comp->order[i]->id >= comp->ninstrs) return;
  if (comp->root->op != TPU_OP_TUPLE && !is_scalar(&comp->root->shape)) return;
  c->slots = tpu_calloc((size_t)(comp->ninstrs ? comp->ninstrs : 1), sizeof(uint64_t));
  if (!c->slots) return; /* the generic path still works */
  for (int i = 0; i < comp->norder; i++) {
    const tpu_instr *in = comp->order[i];
    if (in->op == TPU_OP_CONSTANT) memcpy(&c->slots[in->id], in->literal->data, in->literal->nbytes);
  }
  c->fast = 1;
}

static void fast_run(tpu__scall *c) {
  const tpu_comp *comp = c->comp;
  uint64_t *s = c->slots;
  for (int i = 0; i < comp->norder; i++) {
    const tpu_instr *in = comp->order[i];
    const tpu_dtype t = in->shape.dtype;
    void *o = &s[in->id];
    switch (in->op) {
      case TPU_OP_PARAMETER: memcpy(o, c->args[in->index].data, tpu_dtype_size(t)); break;
      case TPU_OP_COMPARE: {
        uint8_t r = fast_compare(in, in->operands[0]->shape.dtype, &s[in->operands[0]->id], &s[in->operands[1]->id]);
        memcpy(o, &r, 1);
        break;
      }
      case TPU_OP_SELECT: {
        uint8_t p;
        memcpy(&p, &s[in->operands[0]->id], 1);
        memcpy(o, &s[in->operands[p ? 1 : 2]->id], tpu_dtype_size(t));
        break;
      }
      case TPU_OP_NOT: {
        uint8_t p;
        memcpy(&p, &s[in->operands[0]->id], 1);
        p = !p;
        memcpy(o, &p, 1);
        break;
      }
      case TPU_OP_ADD:
      case TPU_OP_MULTIPLY:
      case TPU_OP_MAXIMUM:
      case TPU_OP_MINIMUM:
      case TPU_OP_AND:
      case TPU_OP_OR:
      case TPU_OP_XOR: {
        uint64_t x = s[in->operands[0]->id];
        tpu__ref_apply_binary(in->op, t, &x, &s[in->operands[1]->id]);
        *(uint64_t *)o = x;
        break;
      }
      default: break; /* constants are preset; the root tuple is read by the caller */
    }
  }
}

tpu_status tpu__scall_init(tpu__scall *c, tpu_interp *ip, const tpu_comp *comp, int nargs, tpu_loc loc,
                           tpu_diag *d) {
  memset(c, 0, sizeof *c);
  c->ip = ip;
  c->comp = comp;
  c->loc = loc;
  if (!comp) return TPU_FAIL(d, TPU_ERR_INVALID, loc, "missing computation");
  if (comp->nparams != nargs)
    return TPU_FAIL(d, TPU_ERR_INVALID, loc, "computation '%s' takes %d parameters, expected %d", comp->name,
                    comp->nparams, nargs);
  size_t n = (size_t)(nargs ? nargs : 1);
  c->args = tpu_calloc(n, sizeof(tpu_tensor));
  c->argp = tpu_calloc(n, sizeof(tpu_tensor *));
  if (!c->args || !c->argp) {
    tpu__scall_deinit(c);
    return TPU_FAIL(d, TPU_ERR_NOMEM, loc, "out of memory");
  }
  c->nargs = nargs;
  for (int i = 0; i < nargs; i++) {
    const tpu_shape *s = &comp->params[i]->shape;
    if (!tpu_dtype_is_array(s->dtype) || s->rank != 0) {
      tpu__scall_deinit(c);
      return TPU_FAIL(d, TPU_ERR_INVALID, loc, "parameter %d of computation '%s' is not a scalar", i, comp->name);
    }
    tpu_status st = tpu_tensor_alloc(&c->args[i], s->dtype, 0, NULL, d);
    if (st != TPU_OK) {
      tpu__scall_deinit(c);
      return st;
    }
    c->argp[i] = &c->args[i];
  }
  fast_compile(c);
  return TPU_OK;
}

void tpu__scall_deinit(tpu__scall *c) {
  if (c->args)
    for (int i = 0; i < c->nargs; i++) tpu_tensor_free(&c->args[i]);
  tpu_free(c->args);
  tpu_free((void *)c->argp);
  tpu_free(c->slots);
  memset(c, 0, sizeof *c);
}

static tpu_status take_scalar(const tpu__scall *c, const tpu_tensor *r, void *dst, tpu_dtype want, tpu_diag *d) {
  if (r->dtype != want || r->rank != 0 || r->nbytes != tpu_dtype_size(want))
    return TPU_FAIL(d, TPU_ERR_INVALID, c->loc, "computation '%s' returned %s, expected a %s scalar", c->comp->name,
                    tpu_dtype_name(r->dtype), tpu_dtype_name(want));
  memcpy(dst, r->data, r->nbytes);
  return TPU_OK;
}

tpu_status tpu__scall_run(tpu__scall *c, void *const *dst, const tpu_dtype *want, int nres, tpu_diag *d) {
  if (c->fast) {
    const tpu_instr *root = c->comp->root;
    int tuple = root->op == TPU_OP_TUPLE;
    if ((tuple ? root->noperands : 1) != nres)
      return TPU_FAIL(d, TPU_ERR_INVALID, c->loc, "computation '%s' returns %d values, expected %d", c->comp->name,
                      tuple ? root->noperands : 1, nres);
    for (int i = 0; i < nres; i++) {
      const tpu_instr *v = tuple ? root->operands[i] : root;
      if (v->shape.dtype != want[i])
        return TPU_FAIL(d, TPU_ERR_INVALID, c->loc, "computation '%s' returns %s, expected a %s scalar", c->comp->name,
                        tpu_dtype_name(v->shape.dtype), tpu_dtype_name(want[i]));
    }
    fast_run(c);
    for (int i = 0; i < nres; i++) {
      const tpu_instr *v = tuple ? root->operands[i] : root;
      memcpy(dst[i], &c->slots[v->id], tpu_dtype_size(want[i]));
    }
    return TPU_OK;
  }
  tpu_tensor r;
  memset(&r, 0, sizeof r);
  TPU_TRY(tpu__ref_call(c->ip, c->comp, c->argp, c->nargs, &r, d));
  tpu_status st = TPU_OK;
  if (r.dtype == TPU_TUPLE) {
    if (r.ntuple != nres)
      st = TPU_FAIL(d, TPU_ERR_INVALID, c->loc, "computation '%s' returned %d values, expected %d", c->comp->name,
                    r.ntuple, nres);
    for (int i = 0; st == TPU_OK && i < nres; i++) st = take_scalar(c, &r.elems[i], dst[i], want[i], d);
  } else if (nres != 1) {
    st = TPU_FAIL(d, TPU_ERR_INVALID, c->loc, "computation '%s' returned one value, expected %d", c->comp->name, nres);
  } else {
    st = take_scalar(c, &r, dst[0], want[0], d);
  }
  tpu_tensor_free(&r);
  return st;
}

tpu_status tpu__scall_pred(tpu__scall *c, int *result, tpu_diag *d) {
  uint8_t p = 0;
  void *dst[1] = {&p};
  tpu_dtype want = TPU_PRED;
  TPU_TRY(tpu__scall_run(c, dst, &want, 1, d));
  *result = p != 0;
  return TPU_OK;
}

/* ---- reduce ---- */

/* The i-th result array of a kernel whose result is one array or a tuple of them. */
static tpu_tensor *result_elem(tpu_tensor *out, int i) { return out->dtype == TPU_TUPLE ? &out->elems[i] : out; }

/* Reduction order (the spec): every output element starts at its init value and takes the
 * operand elements that reduce into it one at a time, acc = f(acc, x), in row-major order
 * of the operand. Walking the operand once in row-major order gives exactly that order for
 * every output element at the same time. */
/* A simple f32 reduce, the input visited in row-major order as the generic loop visits it:
 * runs along the last dimension either fold into one output element (the dimension is
 * reduced) or update a run of outputs elementwise; each output element sees its inputs in
 * the same order, with the same arithmetic. */
static void reduce_f32(tpu_opcode op, const tpu_tensor *a, const int64_t *ostr, float *out) {
  int rank = a->rank;
  int64_t len = a->dims[rank - 1], n = tpu_tensor_numel(a), idx[TPU_MAX_RANK] = {0}, o = 0;
  const float *x = a->data;
  float bo[TPU_EW_BLOCK], bx[TPU_EW_BLOCK];
  for (int64_t e = 0; e < n; e += len) {
    if (ostr[rank - 1] == 0) {
      tpu__ew_f32_fold(op, out + o, x + e, len);
    } else {
      for (int64_t s = 0; s < len; s += TPU_EW_BLOCK) {
        int m = (int)(len - s < TPU_EW_BLOCK ? len - s : TPU_EW_BLOCK);
        memcpy(bo, out + o + s, sizeof(float) * (size_t)m);
        memcpy(bx, x + e + s, sizeof(float) * (size_t)m);
        tpu__ew_f32_binary(op, bo, bx, m);
        memcpy(out + o + s, bo, sizeof(float) * (size_t)m);
      }
    }
    for (int k = rank - 2; k >= 0; k--) {
      o += ostr[k];
      if (++idx[k] < a->dims[k]) break;
      o -= ostr[k] * a->dims[k];
      idx[k] = 0;
    }
  }
}

/* An f32 add-reduce in the TPU vector unit's order (tpu_ref_opts.vector_reduce). The
 * operand's minor two dimensions are read as (sublane, lane) tiles of 8x128 in row-major
 * order (a rank-1 operand: 1024 consecutive elements per tile, its T(1024) layout). Each
 * output element keeps one running sum per register position that its reduced elements
 * fall on (a reduced lane dimension gives 128 lane positions, a reduced sublane dimension 8
 * sublane positions), each taking its elements in row-major order of the operand, starting
 * from -0 (the identity of add). The register is then reduced by a log-step tree, sublanes
 * first (rows s += s + 4, 2, 1), then lanes (columns l += l + 64, ..., 1), and the result is
 * added to the init value. Every add is the elementwise kernel's f32 add (denormals flush).
 * Called only when the lane or the sublane dimension is reduced (otherwise whole registers
 * add elementwise and the sequential order is the TPU's). Returns 0 when out of memory. */
static int reduce_f32_vector(const tpu_tensor *a, const int *reduced, const int64_t *ostr, int64_t on, float init,
                             float *out) {
  const int rank = a->rank;
  const int64_t len = a->dims[rank - 1], rows = rank >= 2 ? a->dims[rank - 2] : 1;
  const int lane_red = reduced[rank - 1], sub_red = rank >= 2 && reduced[rank - 2];
  const int64_t ltile = rank == 1 ? 1024 : 128; /* lane positions per register row */
  const int64_t lw = lane_red ? (len < ltile ? len : ltile) : 1, sw = sub_red ? (rows < 8 ? rows : 8) : 1;
  const int64_t npos = lw * sw;
  /* Partial sums: [on][npos] when the lane dimension is reduced (a row's lane chunks add
   * onto one output's positions), else [npos][on] (a row adds onto a run of outputs). */
  const int64_t so = lane_red ? npos : 1, sp = lane_red ? 1 : on;
  float *part = tpu_malloc(sizeof(float) * (size_t)(on * npos));
  if (!part) return 0;
  for (int64_t i = 0; i < on * npos; i++) part[i] = -0.0f;
  const float *x = a->data;
  int64_t n = tpu_tensor_numel(a), idx[TPU_MAX_RANK] = {0}, o = 0;
  for (int64_t e = 0; e < n; e += len) {
    int64_t sub = sub_red ? idx[rank - 2] % 8 : 0; /* idx[rank-1] is always 0 here */
    if (rank == 1) sub = 0;
    float *p = part + o * so + sub * lw * sp;
    if (lane_red) {
      for (int64_t c = 0; c < len; c += lw) /* one register row's lanes onto the lw positions */
        for (int64_t k = 0; k < lw && c + k < len; k += TPU_EW_BLOCK) {
          int64_t m = lw - k < len - c - k ? lw - k : len - c - k;
          if (m > TPU_EW_BLOCK) m = TPU_EW_BLOCK;
          tpu__ew_f32_binary_to(TPU_OP_ADD, p + k, p + k, 1, 1, x + e + c + k, 1, 1, (int)m);
        }
    } else {
      for (int64_t c = 0; c < len; c += TPU_EW_BLOCK) {
        int m = (int)(len - c < TPU_EW_BLOCK ? len - c : TPU_EW_BLOCK);
        tpu__ew_f32_binary_to(TPU_OP_ADD, p + c, p + c, 1, 1, x + e + c, 1, 1, m);
      }
    }
    for (int k = rank - 2; k >= 0; k--) {
      o += ostr[k];
      if (++idx[k] < a->dims[k]) break;
      o -= ostr[k] * a->dims[k];
      idx[k] = 0;
    }
  }
  /* The tree runs over the smallest power-of-two block of rows and lanes holding the used
   * positions: the steps it leaves out would only add -0 (the unused positions) to each
   * value, which changes nothing the next add would not (every add flushes its inputs), so
   * the bits are those of the whole register's 3 + 7 steps. */
  int ps = 1, pl = 1;
  while (ps < sw) ps *= 2;
  while (pl < lw) pl *= 2;
  float reg[1024];
  for (int64_t j = 0; j < on; j++) {
    for (int s = 0; s < ps; s++)
      for (int l = 0; l < pl; l++) reg[s * pl + l] = s < sw && l < lw ? part[j * so + (s * lw + l) * sp] : -0.0f;
    for (int h = ps / 2; h >= 1; h /= 2) /* sublanes: row s += row s + h */
      tpu__ew_f32_binary_to(TPU_OP_ADD, reg, reg, 1, 1, reg + h * pl, 1, 1, h * pl);
    for (int h = pl / 2; h >= 1; h /= 2) /* lanes of row 0 */
      tpu__ew_f32_binary_to(TPU_OP_ADD, reg, reg, 1, 1, reg + h, 1, 1, h);
    float r = init;
    tpu__ew_f32_binary_to(TPU_OP_ADD, &r, &r, 1, 1, reg, 1, 1, 1);
    out[j] = r;
  }
  tpu_free(part);
  return 1;
}

static tpu_status reduce_kernel(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                                tpu_diag *d) {
  int nops = in->noperands / 2;
  if (nops < 1 || in->noperands != 2 * nops)
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "reduce needs N operands and N init values");
  const tpu_tensor *a0 = args[0];
  int rank = a0->rank;
  int reduced[TPU_MAX_RANK] = {0};
  for (int i = 0; i < in->dimensions.n; i++) {
    int64_t k = in->dimensions.v[i];
    if (k < 0 || k >= rank || reduced[k])
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "reduce dimension %lld is out of range or repeated", (long long)k);
    reduced[k] = 1;
  }
  int64_t odims[TPU_MAX_RANK];
  int orank = 0;
  for (int k = 0; k < rank; k++)
    if (!reduced[k]) odims[orank++] = a0->dims[k];

  TPU_TRY(tpu__ref_alloc_shape(out, &in->shape, d));
  if ((out->dtype == TPU_TUPLE ? out->ntuple : 1) != nops) {
    tpu_tensor_free(out);
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "reduce result does not have %d arrays", nops);
  }
  for (int i = 0; i < nops; i++) {
    const tpu_tensor *a = args[i], *init = args[nops + i];
    tpu_tensor *o = result_elem(out, i);
    int same = a->rank == rank && o->rank == orank && o->dtype == a->dtype && init->dtype == a->dtype &&
               tpu_tensor_numel(init) == 1;
    for (int k = 0; same && k < rank; k++) same = a->dims[k] == a0->dims[k];
    for (int k = 0; same && k < orank; k++) same = o->dims[k] == odims[k];
    if (!same) {
      tpu_tensor_free(out);
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "reduce operand %d does not match the result shape", i);
    }
    size_t es = tpu_dtype_size(o->dtype);
    int64_t on = tpu_tensor_numel(o);
    for (int64_t j = 0; j < on; j++) memcpy((char *)o->data + (size_t)j * es, init->data, es);
  }

  /* Output stride of each operand dimension (0 for reduced ones). */
  int64_t ostr_dense[TPU_MAX_RANK], ostr[TPU_MAX_RANK];
  tpu__ref_strides(orank, odims, ostr_dense);
  for (int k = 0, j = 0; k < rank; k++) ostr[k] = reduced[k] ? 0 : ostr_dense[j++];
  int64_t n = tpu_tensor_numel(a0);
  if (n == 0) return TPU_OK;

  tpu_opcode simple = nops == 1 ? tpu__ref_simple_reducer(in->to_apply) : TPU_OP_COUNT;
  if (simple == TPU_OP_ADD && a0->dtype == TPU_F32 && rank > 0 && tpu__ref_opts(ip)->vector_reduce &&
      (reduced[rank - 1] || (rank >= 2 && reduced[rank - 2]))) {
    float init;
    memcpy(&init, args[1]->data, sizeof init);
    if (!reduce_f32_vector(a0, reduced, ostr, tpu_tensor_numel(out), init, out->data)) {
      tpu_tensor_free(out);
      return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
    }
    return TPU_OK;
  }
  if (simple != TPU_OP_COUNT && a0->dtype == TPU_F32 && rank > 0) {
    reduce_f32(simple, a0, ostr, out->data);
    return TPU_OK;
  }
  tpu__scall sc;
  memset(&sc, 0, sizeof sc);
  void **dst = NULL;
  tpu_dtype *want = NULL;
  tpu_status st = TPU_OK;
  if (simple == TPU_OP_COUNT) {
    st = tpu__scall_init(&sc, ip, in->to_apply, 2 * nops, in->loc, d);
    dst = tpu_calloc((size_t)nops, sizeof(void *));
    want = tpu_calloc((size_t)nops, sizeof(tpu_dtype));
    if (st == TPU_OK && (!dst || !want)) st = TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
    for (int i = 0; st == TPU_OK && i < nops; i++) {
      want[i] = args[i]->dtype;
      if (sc.args[i].dtype != want[i] || sc.args[nops + i].dtype != want[i])
        st = TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "reduce computation parameters do not match operand %d (%s)", i,
                      tpu_dtype_name(want[i]));
    }
  }
  int64_t idx[TPU_MAX_RANK] = {0};
  int64_t o = 0;
  for (int64_t e = 0; st == TPU_OK && e < n; e++) {
    if (simple != TPU_OP_COUNT) {
      size_t es = tpu_dtype_size(a0->dtype);
      tpu__ref_apply_binary(simple, a0->dtype, (char *)out->data + (size_t)o * es, (const char *)a0->data + (size_t)e * es);
    } else {
      for (int i = 0; i < nops; i++) {
        size_t es = tpu_dtype_size(args[i]->dtype);
        char *acc = (char *)result_elem(out, i)->data + (size_t)o * es;
        memcpy(tpu__scall_arg(&sc, i), acc, es);
        memcpy(tpu__scall_arg(&sc, nops + i), (const char *)args[i]->data + (size_t)e * es, es);
        dst[i] = acc;
      }
      st = tpu__scall_run(&sc, dst, want, nops, d);
    }
    for (int k = rank - 1; k >= 0; k--) {
      o += ostr[k];
      if (++idx[k] < a0->dims[k]) break;
      o -= ostr[k] * a0->dims[k];
      idx[k] = 0;
    }
  }
  tpu__scall_deinit(&sc);
  tpu_free(dst);
  tpu_free(want);
  if (st != TPU_OK) tpu_tensor_free(out);
  return st;
}

/* ---- map ---- */

static tpu_status map_kernel(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                             tpu_diag *d) {
  int nops = in->noperands;
  if (nops < 1) return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "map without operands");
  if (!tpu_dtype_is_array(in->shape.dtype)) return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "map must return an array");
  TPU_TRY(tpu_tensor_alloc(out, in->shape.dtype, in->shape.rank, in->shape.dims, d));
  int64_t n = tpu_tensor_numel(out);
  for (int i = 0; i < nops; i++)
    if (tpu_tensor_numel(args[i]) != n || args[i]->rank != out->rank) {
      tpu_tensor_free(out);
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "map operand %d does not match the result shape", i);
    }
  size_t es = tpu_dtype_size(out->dtype);
  tpu_opcode simple = nops == 2 ? tpu__ref_simple_reducer(in->to_apply) : TPU_OP_COUNT;
  if (simple != TPU_OP_COUNT && args[0]->dtype == out->dtype && args[1]->dtype == out->dtype) {
    memcpy(out->data, args[0]->data, out->nbytes);
    for (int64_t e = 0; e < n; e++)
      tpu__ref_apply_binary(simple, out->dtype, (char *)out->data + (size_t)e * es, (const char *)args[1]->data + (size_t)e * es);
    return TPU_OK;
  }
  tpu__scall sc;
  tpu_status st = tpu__scall_init(&sc, ip, in->to_apply, nops, in->loc, d);
  for (int i = 0; st == TPU_OK && i < nops; i++)
    if (sc.args[i].dtype != args[i]->dtype)
      st = TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "map operand %d is %s but the computation takes %s", i,
                    tpu_dtype_name(args[i]->dtype), tpu_dtype_name(sc.args[i].dtype));
  for (int64_t e = 0; st == TPU_OK && e < n; e++) {
    for (int i = 0; i < nops; i++) {
      size_t ai = tpu_dtype_size(args[i]->dtype);
      memcpy(tpu__scall_arg(&sc, i), (const char *)args[i]->data + (size_t)e * ai, ai);
    }
    void *dst[1] = {(char *)out->data + (size_t)e * es};
    st = tpu__scall_run(&sc, dst, &out->dtype, 1, d);
  }
  tpu__scall_deinit(&sc);
  if (st != TPU_OK) tpu_tensor_free(out);
  return st;
}

/* ---- dispatch ---- */

tpu_status tpu__ref_reduce(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                           tpu_diag *d) {
  tpu_tensor_zero(out);
  tpu_status st;
  switch (in->op) {
    case TPU_OP_REDUCE: st = reduce_kernel(ip, in, args, out, d); break;
    case TPU_OP_REDUCE_WINDOW: st = tpu__ref_reduce_window(ip, in, args, out, d); break;
    case TPU_OP_SELECT_AND_SCATTER: st = tpu__ref_select_and_scatter(ip, in, args, out, d); break;
    case TPU_OP_SORT: st = tpu__ref_sort(ip, in, args, out, d); break;
    case TPU_OP_TOPK: st = tpu__ref_topk(ip, in, args, out, d); break;
    case TPU_OP_MAP: st = map_kernel(ip, in, args, out, d); break;
    default:
      return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "op '%s' is not a reduction kernel", tpu_op_name(in->op));
  }
  if (st != TPU_OK) tpu_tensor_free(out);
  return st;
}
