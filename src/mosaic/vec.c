/* Mosaic arith/math/vector ops and tpu.matmul on interpreter values (TPU numerics). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "mosaic/mosaic_int.h"

int64_t tpu__mo_numel(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  return n;
}

static int width(tpu_dtype dt) { return dt == TPU_PRED ? 1 : (int)tpu_dtype_size(dt) * 8; }

double tpu__mo_round(tpu_dtype dt, double x) {
  switch (dt) {
    case TPU_F32: return (double)(float)x;
    case TPU_BF16: return (double)tpu_bf16_to_f32(tpu_bf16_from_f64(x));
    case TPU_F16: return (double)tpu_f16_to_f32(tpu_f16_from_f64(x));
    case TPU_F64: return x;
    case TPU_F8E4M3FN: case TPU_F8E5M2: return (double)tpu_f8_to_f32(tpu_f8_from_f64(x, dt == TPU_F8E4M3FN), dt == TPU_F8E4M3FN);
    case TPU_PRED: return x != 0;
    default: break;
  }
  if (!tpu_dtype_is_int(dt)) return x;
  int w = width(dt);
  if (w >= 64) return (double)(int64_t)x;
  if (isnan(x)) return 0;
  uint64_t m = ((uint64_t)1 << w) - 1;
  uint64_t u = (uint64_t)(int64_t)x & m;
  if (tpu_dtype_is_signed(dt) && (u >> (w - 1))) return (double)(int64_t)(u | ~m);
  return (double)u;
}

double tpu__mo_round_ty(const tpu_mo_type *t, double x) {
  if (t->bits <= 0 || !tpu_dtype_is_int(t->dt) || isnan(x)) return tpu__mo_round(t->dt, x);
  uint64_t m = ((uint64_t)1 << t->bits) - 1, u = (uint64_t)(int64_t)x & m;
  return (u >> (t->bits - 1)) ? (double)(int64_t)(u | ~m) : (double)u;
}

/* Signless MLIR integers are held signed; the unsigned view of a value of dt. */
static uint64_t as_u(tpu_dtype dt, double x) {
  int w = width(dt);
  uint64_t u = (uint64_t)(int64_t)x;
  return w >= 64 ? u : u & (((uint64_t)1 << w) - 1);
}

int64_t tpu__mo_vregs(const mo_ctx *c, int rank, const int64_t *dims, tpu_dtype dt) {
  if (rank == 0) return 1;
  int64_t lanes = dims[rank - 1], sub = rank >= 2 ? dims[rank - 2] : 1, outer = 1;
  for (int i = 0; i < rank - 2; i++) outer *= dims[i];
  int packing = tpu_dtype_size(dt) == 2 ? 2 : tpu_dtype_size(dt) == 1 ? 4 : 1; /* rows per sublane */
  int64_t rows = (int64_t)c->sublanes * packing;
  return outer * ((sub + rows - 1) / rows) * ((lanes + c->lanes - 1) / c->lanes);
}

static const mo_val *in(mo_ctx *c, const tpu_mo_op *op, int i) { return &c->vals[op->opd[i]]; }

/* The result value of op (index r) with op's result type: its data (zeros). */
static double *res(mo_ctx *c, const tpu_mo_op *op, int r, tpu_status *st) {
  return tpu__mo_def(c, op->res[r], &op->rest[r], st);
}

static const char *kind_of(const tpu_mo_op *op, const char *key) {
  const char *a = tpu_mo_attr(op, key);
  if (!a) return "";
  const char *lt = strchr(a, '<');
  return lt ? lt + 1 : a;
}

static double fmax_nan(double a, double b) { return isnan(a) || isnan(b) ? NAN : a > b ? a : b == a && signbit(a) ? b : b > a ? b : a; }
static double fmin_nan(double a, double b) { return isnan(a) || isnan(b) ? NAN : a < b ? a : b == a && !signbit(a) ? b : b < a ? b : a; }

/* arith.cmpf by predicate as the TPU runs it. "one" (ordered not-equal, Pallas's float `!=`,
 * so jnp.isnan's `x != x`) lowers to the TPU's vcmp.ne.f32, the instruction XLA's compare NE
 * also lowers to (libtpu's LLO dumps of both), and XLA's NE is true on NaN: on a TPU it is the
 * unordered not-equal. */
static int cmpf(int64_t p, double a, double b) {
  int uno = isnan(a) || isnan(b);
  switch (p) {
    case 0: return 0;
    case 1: return !uno && a == b;
    case 2: return !uno && a > b;
    case 3: return !uno && a >= b;
    case 4: return !uno && a < b;
    case 5: return !uno && a <= b;
    case 6: return uno || a != b;
    case 7: return !uno;
    case 8: return uno || a == b;
    case 9: return uno || a > b;
    case 10: return uno || a >= b;
    case 11: return uno || a < b;
    case 12: return uno || a <= b;
    case 13: return uno || a != b;
    case 14: return uno;
    default: return 1;
  }
}

static int cmpi(int64_t p, tpu_dtype dt, double a, double b) {
  uint64_t ua = as_u(dt, a), ub = as_u(dt, b);
  switch (p) {
    case 0: return a == b;
    case 1: return a != b;
    case 2: return a < b;
    case 3: return a <= b;
    case 4: return a > b;
    case 5: return a >= b;
    case 6: return ua < ub;
    case 7: return ua <= ub;
    case 8: return ua > ub;
    default: return ua >= ub;
  }
}

static double fdiv_i(int64_t a, int64_t b, int floor_, int ceil_) {
  if (b == 0) return 0;
  int64_t q = a / b, r = a % b;
  if (r && floor_ && ((r < 0) != (b < 0))) q--;
  if (r && ceil_ && ((r < 0) == (b < 0))) q++;
  return (double)q;
}

/* The integer u (two's complement, any width) as a value of dt: wrapped to dt's width
 * before it becomes a double (a product or shift past 2^53 keeps its low bits). */
static double wrap_u(tpu_dtype dt, uint64_t u) {
  int w = width(dt);
  if (w >= 64 || !tpu_dtype_is_int(dt)) return (double)(int64_t)u;
  uint64_t m = ((uint64_t)1 << w) - 1;
  u &= m;
  if (tpu_dtype_is_signed(dt) && (u >> (w - 1))) return (double)(int64_t)(u | ~m);
  return (double)u;
}

/* Elementwise binary op on (a, b) of element type dt (an operand's). */
static double bin(const tpu_mo_op *op, tpu_dtype dt, double a, double b) {
  int64_t ia = (int64_t)a, ib = (int64_t)b;
  int w = width(dt);
  switch (op->code) {
    case TPU_MO_ADDF: return a + b;
    case TPU_MO_SUBF: return a - b;
    case TPU_MO_ADDI: return wrap_u(dt, (uint64_t)ia + (uint64_t)ib);
    case TPU_MO_SUBI: return wrap_u(dt, (uint64_t)ia - (uint64_t)ib);
    case TPU_MO_MULF: return a * b;
    case TPU_MO_MULI: return wrap_u(dt, (uint64_t)ia * (uint64_t)ib);
    case TPU_MO_DIVF: return a / b;
    case TPU_MO_REMF: return fmod(a, b);
    case TPU_MO_MAXF: return fmax_nan(a, b);
    case TPU_MO_MINF: return fmin_nan(a, b);
    case TPU_MO_MAXNUMF: return fmax(a, b);
    case TPU_MO_MINNUMF: return fmin(a, b);
    case TPU_MO_POWF: return pow(a, b);
    case TPU_MO_ATAN2: return atan2(a, b);
    case TPU_MO_COPYSIGN: return copysign(a, b);
    case TPU_MO_DIVSI: return ib ? (double)(ia / ib) : 0;
    case TPU_MO_REMSI: return ib ? (double)(ia % ib) : 0;
    case TPU_MO_FLOORDIVSI: return fdiv_i(ia, ib, 1, 0);
    case TPU_MO_CEILDIVSI: return fdiv_i(ia, ib, 0, 1);
    case TPU_MO_DIVUI: { uint64_t x = as_u(dt, a), y = as_u(dt, b); return y ? (double)(x / y) : 0; }
    case TPU_MO_REMUI: { uint64_t x = as_u(dt, a), y = as_u(dt, b); return y ? (double)(x % y) : 0; }
    case TPU_MO_MAXSI: return a > b ? a : b;
    case TPU_MO_MINSI: return a < b ? a : b;
    case TPU_MO_MAXUI: return as_u(dt, a) > as_u(dt, b) ? a : b;
    case TPU_MO_MINUI: return as_u(dt, a) < as_u(dt, b) ? a : b;
    case TPU_MO_ANDI: return (double)(int64_t)(as_u(dt, a) & as_u(dt, b));
    case TPU_MO_ORI: return (double)(int64_t)(as_u(dt, a) | as_u(dt, b));
    case TPU_MO_XORI: return (double)(int64_t)(as_u(dt, a) ^ as_u(dt, b));
    case TPU_MO_SHLI: return ib < 0 || ib >= w ? 0 : wrap_u(dt, as_u(dt, a) << ib);
    case TPU_MO_SHRUI: return ib < 0 || ib >= w ? 0 : (double)(int64_t)(as_u(dt, a) >> ib);
    case TPU_MO_SHRSI: return ib < 0 || ib >= w ? (ia < 0 ? -1 : 0) : (double)(ia >> ib);
    case TPU_MO_IPOWI: { uint64_t r = 1; for (int64_t i = 0; i < ib && i < 64; i++) r *= (uint64_t)ia; return wrap_u(dt, r); }
    default: return 0;
  }
}

static double un(const tpu_mo_op *op, tpu_dtype src, tpu_dtype dst, double x) {
  float f = (float)x;
  switch (op->code) {
    case TPU_MO_NEGF: return -x;
    case TPU_MO_EXP: return expf(f);
    case TPU_MO_EXP2: return exp2f(f);
    case TPU_MO_LOG: return logf(f);
    case TPU_MO_LOG1P: return log1pf(f);
    case TPU_MO_SQRT: return sqrtf(f);
    case TPU_MO_RSQRT: return 1.0f / sqrtf(f);
    case TPU_MO_RECIP: return 1.0f / f;
    case TPU_MO_TANH: return tanhf(f);
    case TPU_MO_ABSF: return fabs(x);
    case TPU_MO_ABSI: return x < 0 ? -x : x;
    case TPU_MO_SIN: return sinf(f);
    case TPU_MO_COS: return cosf(f);
    case TPU_MO_TAN: return tanf(f);
    case TPU_MO_WEIRD: return isnan(x) || isinf(x) ? 1 : 0;
    case TPU_MO_FLOOR: return floor(x);
    case TPU_MO_CEIL: return ceil(x);
    case TPU_MO_ROUNDEVEN: return nearbyint(x);
    case TPU_MO_ROUND: return round(x);
    case TPU_MO_ERF: return erff(f);
    case TPU_MO_EXPM1: return expm1f(f);
    case TPU_MO_LOGISTIC: return 1.0f / (1.0f + expf(-f));
    case TPU_MO_CTPOP: return (double)__builtin_popcountll(as_u(src, x));
    case TPU_MO_CTLZ: { uint64_t u = as_u(src, x); int w = width(src); return u ? (double)(__builtin_clzll(u) - (64 - w)) : w; }
    case TPU_MO_EXTF: case TPU_MO_TRUNCF: case TPU_MO_TEXTF: case TPU_MO_TTRUNCF: case TPU_MO_SITOFP:
    case TPU_MO_EXTSI: case TPU_MO_TRUNCI: case TPU_MO_INDEX_CAST:
      return x;
    case TPU_MO_UITOFP: case TPU_MO_EXTUI: case TPU_MO_INDEX_CASTUI: return (double)as_u(src, x);
    case TPU_MO_FPTOSI: case TPU_MO_TFPTOSI: case TPU_MO_FPTOUI: { /* toward zero, saturating (the TPU's) */
      if (isnan(x)) return 0;
      double t = trunc(x);
      int w = width(dst);
      double hi = op->code == TPU_MO_FPTOUI ? ldexp(1, w) - 1 : ldexp(1, w - 1) - 1;
      double lo = op->code == TPU_MO_FPTOUI ? 0 : -ldexp(1, w - 1);
      return t > hi ? hi : t < lo ? lo : t;
    }
    default: return x;
  }
}

static int is_unary(tpu_mo_code c) {
  switch (c) {
    case TPU_MO_NEGF: case TPU_MO_EXP: case TPU_MO_EXP2: case TPU_MO_LOG: case TPU_MO_LOG1P: case TPU_MO_SQRT:
    case TPU_MO_RSQRT: case TPU_MO_TANH: case TPU_MO_ABSF: case TPU_MO_ABSI: case TPU_MO_SIN: case TPU_MO_COS:
    case TPU_MO_FLOOR: case TPU_MO_CEIL: case TPU_MO_ROUNDEVEN: case TPU_MO_ROUND: case TPU_MO_ERF:
    case TPU_MO_EXPM1: case TPU_MO_LOGISTIC: case TPU_MO_CTPOP: case TPU_MO_CTLZ: case TPU_MO_EXTF:
    case TPU_MO_TRUNCF: case TPU_MO_TEXTF: case TPU_MO_TTRUNCF: case TPU_MO_SITOFP: case TPU_MO_EXTSI:
    case TPU_MO_TRUNCI: case TPU_MO_INDEX_CAST: case TPU_MO_UITOFP: case TPU_MO_EXTUI: case TPU_MO_INDEX_CASTUI:
    case TPU_MO_FPTOSI: case TPU_MO_TFPTOSI: case TPU_MO_FPTOUI: case TPU_MO_RECIP: case TPU_MO_TAN:
    case TPU_MO_WEIRD:
      return 1;
    default: return 0;
  }
}

static int is_eup(tpu_mo_code c) {
  switch (c) {
    case TPU_MO_EXP: case TPU_MO_EXP2: case TPU_MO_LOG: case TPU_MO_LOG1P: case TPU_MO_SQRT: case TPU_MO_RSQRT:
    case TPU_MO_TANH: case TPU_MO_SIN: case TPU_MO_COS: case TPU_MO_ERF: case TPU_MO_EXPM1: case TPU_MO_LOGISTIC:
    case TPU_MO_POWF: case TPU_MO_ATAN2: case TPU_MO_DIVF: case TPU_MO_RECIP: case TPU_MO_TAN:
      return 1;
    default: return 0;
  }
}

/* Charges op's vector work: one VPU op per register of its result (EUP pushes for
 * transcendentals; scalars on the scalar unit). */
static void charge(mo_ctx *c, const tpu_mo_op *op, int64_t n_ops) {
  if (op->nres < 1) return;
  const tpu_mo_type *t = &op->rest[0];
  if (t->kind != TPU_MO_VECTOR) {
    c->work.scalar_ops += n_ops;
    return;
  }
  int64_t vr = tpu__mo_vregs(c, t->rank, t->dims, t->dt);
  if (is_eup(op->code)) c->work.eup_vregs += vr * n_ops;
  else c->work.vpu_vregs += vr * n_ops;
}

/* Strides of a row-major array. */
static void rstrides(int rank, const int64_t *dims, int64_t *s) {
  int64_t a = 1;
  for (int i = rank - 1; i >= 0; i--) {
    s[i] = a;
    a *= dims[i];
  }
}

/* The MXU work of one product: 2*M*N*K*passes flops, on the array's tiles (rows in
 * sublanes of 8, K and N in 128s). */
static void price_mm(mo_ctx *c, int64_t B, int64_t M, int64_t K, int64_t N, tpu_dtype dt, int passes) {
  double fl = 2.0 * (double)B * (double)M * (double)N * (double)K;
  c->work.mxu_flops += fl * passes;
  double pm = (double)((M + 7) / 8 * 8), pk = (double)((K + 127) / 128 * 128), pn = (double)((N + 127) / 128 * 128);
  c->work.mxu_pad_flops += 2.0 * (double)B * pm * pk * pn * passes;
  if ((double)M * (double)N * (double)K * (double)B >
      (double)c->work.mm_m * (double)c->work.mm_n * (double)c->work.mm_k * (double)(c->work.mm_b ? c->work.mm_b : 1)) {
    c->work.mm_m = M;
    c->work.mm_n = N;
    c->work.mm_k = K;
    c->work.mm_b = B;
    c->work.mm_dt = dt;
    c->work.mm_passes = passes;
  }
}

static tpu_status matmul(mo_ctx *c, const tpu_mo_op *op) {
  const mo_val *L = in(c, op, 0), *R = in(c, op, 1), *A = op->nopd > 2 ? in(c, op, 2) : NULL;
  /* #tpu.dot_dimension_numbers<lhs_contract, rhs_contract, lhs_noncontract, rhs_noncontract,
   * output (operand, dim) pairs, lhs_batch, rhs_batch> */
  int64_t g[7][TPU_MO_MAX_RANK * 2];
  int ng[7] = {0};
  const char *dn = tpu_mo_attr(op, "dimension_numbers");
  if (dn && (dn = strchr(dn, '<'))) {
    dn++;
    for (int k = 0; k < 7 && dn; k++) {
      const char *lb = strchr(dn, '['), *rb = lb ? strchr(lb, ']') : NULL;
      if (!lb || !rb) break;
      const char *p = lb + 1;
      while (p < rb && ng[k] < TPU_MO_MAX_RANK * 2) {
        char *e;
        long long v = strtoll(p, &e, 10);
        if (e == p) break;
        g[k][ng[k]++] = v;
        p = *e == ',' ? e + 1 : e;
      }
      dn = rb + 1;
    }
  } else { /* no dimension numbers: 2-D, with the transpose flags */
    int64_t tl = 0, tr = 0;
    tpu_mo_attr_int(op, "transpose_lhs", &tl);
    tpu_mo_attr_int(op, "transpose_rhs", &tr);
    g[0][0] = tl ? 0 : 1; g[1][0] = tr ? 1 : 0; g[2][0] = tl ? 1 : 0; g[3][0] = tr ? 0 : 1;
    ng[0] = ng[1] = ng[2] = ng[3] = 1;
    g[4][0] = 0; g[4][1] = 0; g[4][2] = 1; g[4][3] = 1;
    ng[4] = 4;
  }
  if (ng[0] != 1 || ng[1] != 1 || ng[5] != ng[6] || ng[5] > 1 || ng[2] > 1 || ng[3] > 1)
    return tpu__mo_fail(c, op, TPU_ERR_UNSUPPORTED, "tpu.matmul with these dimension numbers is not modelled");
  int64_t lk = g[0][0], rk = g[1][0];
  int64_t lm = ng[2] ? g[2][0] : -1, rn = ng[3] ? g[3][0] : -1;
  int64_t lb = ng[5] ? g[5][0] : -1, rbd = ng[6] ? g[6][0] : -1;
  int64_t M = lm >= 0 ? L->dims[lm] : 1, K = L->dims[lk], N = rn >= 0 ? R->dims[rn] : 1, B = lb >= 0 ? L->dims[lb] : 1;
  if (R->dims[rk] != K) return tpu__mo_fail(c, op, TPU_ERR_INVALID, "tpu.matmul contracts %lld with %lld", (long long)K, (long long)R->dims[rk]);
  tpu_dtype dt = L->dt;
  int passes = 1;
  const char *pr = tpu_mo_attr(op, "precision");
  if (dt == TPU_F32) passes = pr && strstr(pr, "bf16") ? 1 : 6; /* Mosaic's f32 default: full f32 */
  if (c->count) {
    price_mm(c, B, M, K, N, dt, passes);
    tpu__mo_def_nodata(c, op->res[0], &op->rest[0]);
    return TPU_OK;
  }
  int64_t ls[TPU_MO_MAX_RANK], rs[TPU_MO_MAX_RANK];
  rstrides(L->rank, L->dims, ls);
  rstrides(R->rank, R->dims, rs);
  size_t na = (size_t)(B * M * K), nw = (size_t)(B * K * N), no = (size_t)(B * M * N);
  float *a = tpu_malloc(sizeof *a * (na + 1)), *w = tpu_malloc(sizeof *w * (nw + 1)), *o = tpu_malloc(sizeof *o * (no + 1));
  tpu_status st = TPU_OK;
  if (!a || !w || !o) {
    st = tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
    goto out;
  }
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t k = 0; k < K; k++)
        a[(b * M + i) * K + k] = (float)L->v[(lb >= 0 ? b * ls[lb] : 0) + (lm >= 0 ? i * ls[lm] : 0) + k * ls[lk]];
  for (int64_t b = 0; b < B; b++)
    for (int64_t k = 0; k < K; k++)
      for (int64_t j = 0; j < N; j++)
        w[(b * K + k) * N + j] = (float)R->v[(rbd >= 0 ? b * rs[rbd] : 0) + k * rs[rk] + (rn >= 0 ? j * rs[rn] : 0)];
  int64_t acc_int = tpu_dtype_is_int(dt);
  if (acc_int) { /* s8/s32 products are exact integers: sums in f64 exact to 2^53 */
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
          double s = 0;
          for (int64_t k = 0; k < K; k++) s += (double)a[(b * M + i) * K + k] * (double)w[(b * K + k) * N + j];
          o[(b * M + i) * N + j] = (float)s; /* exact below 2^24; larger sums rounded (noted in docs) */
        }
  } else if (c->o && c->o->matmul) {
    st = c->o->matmul(c->o->user, dt, passes, a, w, o, B, M, K, N, c->d);
  } else {
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
          double s = 0;
          for (int64_t k = 0; k < K; k++) s += (double)a[(b * M + i) * K + k] * (double)w[(b * K + k) * N + j];
          o[(b * M + i) * N + j] = (float)s;
        }
  }
  if (st != TPU_OK) goto out;
  {
    const tpu_mo_type *t = &op->rest[0];
    double *r = res(c, op, 0, &st);
    if (!r) goto out;
    /* The result's dims: (lhs batch) then lhs non-contracting then rhs non-contracting (the
     * output pairs Mosaic writes are in that order for the forms it emits). */
    int64_t n = tpu__mo_numel(t->rank, t->dims);
    if (n != (int64_t)no) {
      st = tpu__mo_fail(c, op, TPU_ERR_INVALID, "tpu.matmul result has %lld elements, not %lld", (long long)n, (long long)no);
      goto out;
    }
    for (int64_t e = 0; e < n; e++) {
      double acc = A && A->set && A->v ? A->v[e] : 0;
      double x = acc_int ? (double)o[e] + acc : (double)o[e] + acc;
      r[e] = tpu__mo_round_ty(t, x);
    }
    price_mm(c, B, M, K, N, dt, passes);
  }
out:
  tpu_free(a);
  tpu_free(w);
  tpu_free(o);
  return st;
}

/* Index helpers over row-major dims. */
static void unflat(int64_t e, int rank, const int64_t *dims, int64_t *idx) {
  for (int i = rank - 1; i >= 0; i--) {
    idx[i] = dims[i] ? e % dims[i] : 0;
    e = dims[i] ? e / dims[i] : 0;
  }
}

static int64_t flat(int rank, const int64_t *dims, const int64_t *idx) {
  int64_t e = 0;
  for (int i = 0; i < rank; i++) e = e * dims[i] + idx[i];
  return e;
}

static tpu_status reduction(mo_ctx *c, const tpu_mo_op *op) {
  const mo_val *s = in(c, op, 0), *acc = in(c, op, 1);
  int64_t rd[TPU_MO_MAX_RANK];
  int nr = tpu_mo_attr_ints(op, "reduction_dims", rd, TPU_MO_MAX_RANK);
  int red[TPU_MO_MAX_RANK] = {0};
  for (int i = 0; i < nr && i < TPU_MO_MAX_RANK; i++)
    if (rd[i] >= 0 && rd[i] < s->rank) red[rd[i]] = 1;
  const char *kind = kind_of(op, "kind");
  tpu_status st = TPU_OK;
  const tpu_mo_type *t = &op->rest[0];
  double *r = res(c, op, 0, &st);
  if (!r) return st;
  int64_t n = tpu__mo_numel(t->rank, t->dims);
  int add = !strncmp(kind, "add", 3), mul = !strncmp(kind, "mul", 3);
  int mx = !strncmp(kind, "max", 3), mn = !strncmp(kind, "min", 3);
  int isnum = strstr(kind, "numf") != NULL, bits = !strncmp(kind, "and", 3) || !strncmp(kind, "or", 2) || !strncmp(kind, "xor", 3);
  double *tmp = tpu_malloc(sizeof *tmp * (size_t)(n + 1));
  char *seen = tpu_calloc((size_t)(n + 1), 1);
  if (!tmp || !seen) {
    tpu_free(tmp);
    tpu_free(seen);
    return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
  }
  int64_t sn = tpu__mo_numel(s->rank, s->dims), idx[TPU_MO_MAX_RANK], oi[TPU_MO_MAX_RANK];
  for (int64_t e = 0; e < sn; e++) {
    unflat(e, s->rank, s->dims, idx);
    int k = 0;
    for (int i = 0; i < s->rank; i++)
      if (!red[i]) oi[k++] = idx[i];
    int64_t o = flat(t->rank, t->dims, oi);
    double x = s->v[e];
    if (!seen[o]) {
      tmp[o] = x;
      seen[o] = 1;
    } else if (add) tmp[o] += x;
    else if (mul) tmp[o] *= x;
    else if (mx) tmp[o] = isnum ? fmax(tmp[o], x) : fmax_nan(tmp[o], x);
    else if (mn) tmp[o] = isnum ? fmin(tmp[o], x) : fmin_nan(tmp[o], x);
    else if (bits) tmp[o] = bin(&(tpu_mo_op){.code = kind[0] == 'a' ? TPU_MO_ANDI : kind[0] == 'o' ? TPU_MO_ORI : TPU_MO_XORI}, s->dt, tmp[o], x);
  }
  for (int64_t o = 0; o < n; o++) {
    double a = acc->v[o], x = seen[o] ? tmp[o] : a;
    if (seen[o]) {
      if (add) x = tmp[o] + a;
      else if (mul) x = tmp[o] * a;
      else if (mx) x = isnum ? fmax(tmp[o], a) : fmax_nan(tmp[o], a);
      else if (mn) x = isnum ? fmin(tmp[o], a) : fmin_nan(tmp[o], a);
    }
    r[o] = tpu__mo_round_ty(t, x);
  }
  tpu_free(tmp);
  tpu_free(seen);
  int64_t vr = tpu__mo_vregs(c, s->rank, s->dims, s->dt);
  c->work.vpu_vregs += vr;
  if (red[s->rank - 1] || (s->rank >= 2 && red[s->rank - 2])) c->work.xlu_vregs += tpu__mo_vregs(c, t->rank, t->dims, t->dt) + vr / 8;
  return TPU_OK;
}

/* Broadcast src (scalar or vector, trailing-aligned, 1s stretched) into the result. */
static tpu_status broadcast(mo_ctx *c, const tpu_mo_op *op) {
  const mo_val *s = in(c, op, 0);
  const tpu_mo_type *t = &op->rest[0];
  tpu_status st = TPU_OK;
  double *r = res(c, op, 0, &st);
  if (!r) return st;
  int64_t n = tpu__mo_numel(t->rank, t->dims), idx[TPU_MO_MAX_RANK], si[TPU_MO_MAX_RANK];
  if (s->kind != TPU_MO_VECTOR) {
    for (int64_t e = 0; e < n; e++) r[e] = tpu__mo_round_ty(t, s->v[0]);
  } else {
    int off = t->rank - s->rank;
    if (off < 0) return tpu__mo_fail(c, op, TPU_ERR_INVALID, "broadcast to a lower rank");
    for (int64_t e = 0; e < n; e++) {
      unflat(e, t->rank, t->dims, idx);
      for (int i = 0; i < s->rank; i++) si[i] = s->dims[i] == 1 ? 0 : idx[off + i];
      r[e] = s->v[flat(s->rank, s->dims, si)];
    }
  }
  c->work.vpu_vregs += tpu__mo_vregs(c, t->rank, t->dims, t->dt);
  return TPU_OK;
}

static tpu_status copy_like(mo_ctx *c, const tpu_mo_op *op, const mo_val *s) {
  tpu_status st = TPU_OK;
  double *r = res(c, op, 0, &st);
  if (!r) return st;
  int64_t n = tpu__mo_numel(op->rest[0].rank, op->rest[0].dims);
  if (n != tpu__mo_numel(s->rank, s->dims)) return tpu__mo_fail(c, op, TPU_ERR_INVALID, "element counts differ");
  memcpy(r, s->v, sizeof *r * (size_t)n);
  return TPU_OK;
}

static tpu_status strided(mo_ctx *c, const tpu_mo_op *op, int insert) {
  const mo_val *s = in(c, op, 0);
  int64_t offs[TPU_MO_MAX_RANK] = {0}, strd[TPU_MO_MAX_RANK];
  for (int i = 0; i < TPU_MO_MAX_RANK; i++) strd[i] = 1;
  tpu_mo_attr_ints(op, "offsets", offs, TPU_MO_MAX_RANK);
  int ns = tpu_mo_attr_ints(op, "strides", strd, TPU_MO_MAX_RANK);
  (void)ns;
  const tpu_mo_type *t = &op->rest[0];
  tpu_status st = TPU_OK;
  if (!insert) {
    double *r = res(c, op, 0, &st);
    if (!r) return st;
    int64_t n = tpu__mo_numel(t->rank, t->dims), idx[TPU_MO_MAX_RANK];
    for (int64_t e = 0; e < n; e++) {
      unflat(e, t->rank, t->dims, idx);
      for (int i = 0; i < t->rank; i++) idx[i] = offs[i] + idx[i] * strd[i];
      r[e] = s->v[flat(s->rank, s->dims, idx)];
    }
    c->work.vpu_vregs += tpu__mo_vregs(c, t->rank, t->dims, t->dt);
    return TPU_OK;
  }
  const mo_val *dst = in(c, op, 1);
  int64_t dn = tpu__mo_numel(dst->rank, dst->dims);
  double *keep = tpu_malloc(sizeof *keep * (size_t)(dn + 1));
  if (!keep) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
  memcpy(keep, dst->v, sizeof *keep * (size_t)dn);
  double *r = res(c, op, 0, &st);
  if (!r) {
    tpu_free(keep);
    return st;
  }
  memcpy(r, keep, sizeof *r * (size_t)dn);
  tpu_free(keep);
  int64_t n = tpu__mo_numel(s->rank, s->dims), idx[TPU_MO_MAX_RANK];
  int lead = dst->rank - s->rank;
  for (int64_t e = 0; e < n; e++) {
    int64_t di[TPU_MO_MAX_RANK];
    unflat(e, s->rank, s->dims, idx);
    for (int i = 0; i < dst->rank; i++) di[i] = offs[i] + (i >= lead ? idx[i - lead] * strd[i - lead] : 0);
    r[flat(dst->rank, dst->dims, di)] = s->v[e];
  }
  c->work.vpu_vregs += tpu__mo_vregs(c, t->rank, t->dims, t->dt);
  return TPU_OK;
}

static tpu_status transpose(mo_ctx *c, const tpu_mo_op *op) {
  const mo_val *s = in(c, op, 0);
  int64_t perm[TPU_MO_MAX_RANK];
  int np = tpu_mo_attr_ints(op, "permutation", perm, TPU_MO_MAX_RANK);
  if (np != s->rank) return tpu__mo_fail(c, op, TPU_ERR_INVALID, "transpose without a permutation of its rank");
  const tpu_mo_type *t = &op->rest[0];
  tpu_status st = TPU_OK;
  double *r = res(c, op, 0, &st);
  if (!r) return st;
  int64_t n = tpu__mo_numel(t->rank, t->dims), idx[TPU_MO_MAX_RANK], si[TPU_MO_MAX_RANK];
  for (int64_t e = 0; e < n; e++) {
    unflat(e, t->rank, t->dims, idx);
    for (int i = 0; i < t->rank; i++) si[perm[i]] = idx[i];
    r[e] = s->v[flat(s->rank, s->dims, si)];
  }
  c->work.xlu_vregs += tpu__mo_vregs(c, t->rank, t->dims, t->dt);
  return TPU_OK;
}

static tpu_status iota(mo_ctx *c, const tpu_mo_op *op) {
  int64_t dim[TPU_MO_MAX_RANK];
  int nd = tpu_mo_attr_ints(op, "dimensions", dim, TPU_MO_MAX_RANK);
  if (nd < 1) {
    nd = 1;
    if (!tpu_mo_attr_int(op, "dimension", &dim[0])) return tpu__mo_fail(c, op, TPU_ERR_UNSUPPORTED, "tpu.iota without a dimension");
  }
  const tpu_mo_type *t = &op->rest[0];
  tpu_status st = TPU_OK;
  double *r = res(c, op, 0, &st);
  if (!r) return st;
  int64_t n = tpu__mo_numel(t->rank, t->dims), idx[TPU_MO_MAX_RANK];
  for (int64_t e = 0; e < n; e++) {
    unflat(e, t->rank, t->dims, idx);
    int64_t v = 0; /* several dimensions: the flat index over them */
    for (int i = 0; i < nd; i++) v = v * t->dims[dim[i]] + idx[dim[i]];
    r[e] = (double)v;
  }
  c->work.vpu_vregs += tpu__mo_vregs(c, t->rank, t->dims, t->dt);
  return TPU_OK;
}

/* tpu.concatenate / tpu.repeat: operands joined along `dimension`. */
static tpu_status concat(mo_ctx *c, const tpu_mo_op *op, int times) {
  int64_t dim = 0;
  tpu_mo_attr_int(op, "dimension", &dim);
  const tpu_mo_type *t = &op->rest[0];
  tpu_status st = TPU_OK;
  int nparts = times > 0 ? times : op->nopd;
  int64_t n = tpu__mo_numel(t->rank, t->dims), idx[TPU_MO_MAX_RANK];
  const mo_val **parts = tpu_malloc(sizeof *parts * (size_t)(nparts + 1));
  if (!parts) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
  for (int p = 0; p < nparts; p++) parts[p] = in(c, op, times > 0 ? 0 : p);
  /* copy sources first: the result may reuse an operand's value id in a loop */
  double **src = tpu_calloc((size_t)nparts + 1, sizeof *src);
  int64_t pd[64];
  int ok = src && nparts <= 64;
  for (int p = 0; ok && p < nparts; p++) {
    int64_t pn = tpu__mo_numel(parts[p]->rank, parts[p]->dims);
    src[p] = tpu_malloc(sizeof(double) * (size_t)(pn + 1));
    ok = src[p] != NULL;
    if (ok) memcpy(src[p], parts[p]->v, sizeof(double) * (size_t)pn);
    pd[p] = parts[p]->dims[dim];
  }
  int64_t pdims[64][TPU_MO_MAX_RANK];
  for (int p = 0; ok && p < nparts; p++) memcpy(pdims[p], parts[p]->dims, sizeof pdims[p]);
  double *r = ok ? res(c, op, 0, &st) : NULL;
  if (r) {
    for (int64_t e = 0; e < n; e++) {
      unflat(e, t->rank, t->dims, idx);
      int64_t x = idx[dim];
      int p = 0;
      while (p < nparts - 1 && x >= pd[p]) x -= pd[p++];
      idx[dim] = x;
      r[e] = src[p][flat(t->rank, pdims[p], idx)];
    }
    c->work.vpu_vregs += tpu__mo_vregs(c, t->rank, t->dims, t->dt);
  }
  for (int p = 0; src && p < nparts; p++) tpu_free(src[p]);
  tpu_free(src);
  tpu_free(parts);
  if (!ok) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
  return r ? TPU_OK : st;
}

/* The bits of x held as a value of dt, and back. */
uint64_t tpu__mo_bits(tpu_dtype dt, double x) {
  if (dt == TPU_F32) return tpu_f32_bits((float)x);
  if (dt == TPU_BF16) return tpu_bf16_from_f32((float)x).bits;
  if (dt == TPU_F16) return tpu_f16_from_f64(x).bits;
  if (tpu_dtype_is_f8(dt)) return tpu_f8_from_f64(x, dt == TPU_F8E4M3FN).bits;
  return as_u(dt, x);
}

double tpu__mo_from_bits(tpu_dtype dt, uint64_t bits) {
  if (dt == TPU_F32) return tpu_f32_from_bits((uint32_t)bits);
  if (dt == TPU_BF16) return tpu_bf16_to_f32((tpu_bf16){(uint16_t)bits});
  if (dt == TPU_F16) return tpu_f16_to_f32((tpu_f16){(uint16_t)bits});
  if (tpu_dtype_is_f8(dt)) return tpu_f8_to_f32((tpu_f8){(uint8_t)bits}, dt == TPU_F8E4M3FN);
  return tpu__mo_round(dt, (double)(int64_t)bits);
}

/* arith.bitcast / tpu.bitcast (pltpu.bitcast, lax.bitcast_convert_type): the same bits in
 * another type. Between widths (tpu.bitcast only) the second-minor dimension scales by the
 * width ratio, as Pallas defines it (its bitcast_p: rows packed, the TPU's sublane packing):
 * narrow to wide, p = wide/narrow consecutive rows r*p .. r*p+p-1 of a column form row r's
 * word, row r*p+k in bits k*narrow up (little-endian, lax.bitcast_convert_type's order); wide
 * to narrow the reverse. */
static tpu_status bitcast(mo_ctx *c, const tpu_mo_op *op) {
  const mo_val *s = in(c, op, 0);
  const tpu_mo_type *t = &op->rest[0];
  int sw = width(s->dt), tw = width(t->dt);
  int64_t n = tpu__mo_numel(t->rank, t->dims), ns = tpu__mo_numel(s->rank, s->dims);
  int same = sw == tw && n == ns;
  int ok = same;
  if (!same && s->rank >= 2 && s->rank == t->rank && sw % 8 == 0 && tw % 8 == 0) {
    ok = s->dims[s->rank - 2] * sw == t->dims[t->rank - 2] * tw;
    for (int i = 0; i < s->rank; i++) ok &= i == s->rank - 2 || s->dims[i] == t->dims[i];
  }
  if (!ok)
    return tpu__mo_fail(c, op, TPU_ERR_UNSUPPORTED, "a bitcast from %s to %s of other than the second-minor dimension",
                        tpu_dtype_name(s->dt), tpu_dtype_name(t->dt));
  double *tmp = tpu_malloc(sizeof *tmp * (size_t)(n + 1));
  if (!tmp) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
  if (same) {
    for (int64_t e = 0; e < n; e++) tmp[e] = tpu__mo_from_bits(t->dt, tpu__mo_bits(s->dt, s->v[e]));
  } else {
    int64_t cols = t->dims[t->rank - 1], trows = t->dims[t->rank - 2], srows = s->dims[s->rank - 2];
    int64_t lead = n / (trows * cols);
    int p = sw < tw ? tw / sw : sw / tw;
    uint64_t tmask = tw >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << tw) - 1;
    for (int64_t l = 0; l < lead; l++)
      for (int64_t r = 0; r < trows; r++)
        for (int64_t col = 0; col < cols; col++) {
          uint64_t b = 0;
          if (sw < tw) { /* p source rows into one word */
            for (int k = 0; k < p; k++)
              b |= tpu__mo_bits(s->dt, s->v[(l * srows + r * p + k) * cols + col]) << (k * sw);
          } else { /* part r % p of source row r / p */
            b = (tpu__mo_bits(s->dt, s->v[(l * srows + r / p) * cols + col]) >> ((r % p) * tw)) & tmask;
          }
          tmp[(l * trows + r) * cols + col] = tpu__mo_from_bits(t->dt, b);
        }
  }
  tpu_status st = TPU_OK;
  double *r = res(c, op, 0, &st);
  if (r) memcpy(r, tmp, sizeof *r * (size_t)n);
  tpu_free(tmp);
  charge(c, op, 1);
  return r ? TPU_OK : st;
}

/* tpu.rotate / tpu.dynamic_rotate (pltpu.roll): jnp.roll along `dimension` by the amount
 * (an attribute, or operand 1); with `stride` and `stride_dimension`, slice i along
 * stride_dimension rolls by amount + i*stride. Lane and sublane rotations run on the XLU. */
static tpu_status rotate(mo_ctx *c, const tpu_mo_op *op) {
  const mo_val *s = in(c, op, 0);
  const tpu_mo_type *t = &op->rest[0];
  int64_t amount = 0, dim = -1, stride = 0, sdim = -1;
  if (op->code == TPU_MO_DYNAMIC_ROTATE) {
    if (op->nopd < 2) return tpu__mo_fail(c, op, TPU_ERR_INVALID, "a dynamic rotate without its amount");
    amount = (int64_t)in(c, op, 1)->v[0];
  } else if (!tpu_mo_attr_int(op, "amount", &amount)) {
    return tpu__mo_fail(c, op, TPU_ERR_INVALID, "a rotate without an amount");
  }
  tpu_mo_attr_int(op, "dimension", &dim);
  tpu_mo_attr_int(op, "stride", &stride);
  tpu_mo_attr_int(op, "stride_dimension", &sdim);
  if (dim < 0 || dim >= s->rank || sdim >= s->rank || s->kind != TPU_MO_VECTOR)
    return tpu__mo_fail(c, op, TPU_ERR_INVALID, "a rotate along dimension %lld of a rank-%d value", (long long)dim, s->rank);
  c->work.xlu_vregs += tpu__mo_vregs(c, t->rank, t->dims, t->dt);
  tpu_status st = TPU_OK;
  if (c->count) {
    tpu__mo_def_nodata(c, op->res[0], t);
    return TPU_OK;
  }
  int64_t n = tpu__mo_numel(s->rank, s->dims), idx[TPU_MO_MAX_RANK], len = s->dims[dim];
  double *tmp = tpu_malloc(sizeof *tmp * (size_t)(n + 1));
  if (!tmp) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
  for (int64_t e = 0; e < n; e++) {
    unflat(e, s->rank, s->dims, idx);
    int64_t sh = amount + (sdim >= 0 ? idx[sdim] * stride : 0);
    idx[dim] = len ? (((idx[dim] - sh) % len) + len) % len : 0;
    tmp[e] = s->v[flat(s->rank, s->dims, idx)];
  }
  double *r = res(c, op, 0, &st);
  if (r) memcpy(r, tmp, sizeof *r * (size_t)n);
  tpu_free(tmp);
  return r ? TPU_OK : st;
}

/* tpu.dynamic_gather (jnp.take_along_axis inside a kernel): the `dimensions` of the source
 * collapse into one trailing dimension of size M (row-major, in the listed order); result
 * element i is that dimension's element indices[i] mod M at i's other coordinates. Priced as a
 * permute on the XLU, one pass over the result's registers. */
static tpu_status dyn_gather(mo_ctx *c, const tpu_mo_op *op) {
  const mo_val *s = in(c, op, 0), *ix = op->nopd > 1 ? in(c, op, 1) : NULL;
  const tpu_mo_type *t = &op->rest[0];
  int64_t dims[TPU_MO_MAX_RANK];
  int nd = tpu_mo_attr_ints(op, "dimensions", dims, TPU_MO_MAX_RANK);
  int coll[TPU_MO_MAX_RANK] = {0};
  int ok = ix && s->kind == TPU_MO_VECTOR && nd >= 1 && s->rank == t->rank && ix->rank == t->rank;
  for (int i = 0; ok && i < s->rank; i++) ok = ix->dims[i] == t->dims[i];
  for (int i = 0; ok && i < nd; i++) {
    ok = dims[i] >= 0 && dims[i] < s->rank && !coll[dims[i]] && s->dims[dims[i]] > 0;
    if (ok) coll[dims[i]] = 1;
  }
  for (int i = 0; ok && i < s->rank; i++) ok = coll[i] || s->dims[i] == t->dims[i];
  if (!ok) return tpu__mo_fail(c, op, TPU_ERR_INVALID, "a dynamic_gather whose source, indices and dimensions disagree");
  c->work.xlu_vregs += tpu__mo_vregs(c, t->rank, t->dims, t->dt);
  if (c->count) {
    tpu__mo_def_nodata(c, op->res[0], t);
    return TPU_OK;
  }
  int64_t m = 1;
  for (int i = 0; i < nd; i++) m *= s->dims[dims[i]];
  int64_t n = tpu__mo_numel(t->rank, t->dims), idx[TPU_MO_MAX_RANK];
  double *tmp = tpu_malloc(sizeof *tmp * (size_t)(n + 1));
  if (!tmp) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
  for (int64_t e = 0; e < n; e++) {
    unflat(e, t->rank, t->dims, idx);
    int64_t j = m ? (((int64_t)ix->v[e] % m) + m) % m : 0;
    for (int i = nd - 1; i >= 0; i--) { /* the collapsed index back into the listed dimensions */
      idx[dims[i]] = j % s->dims[dims[i]];
      j /= s->dims[dims[i]];
    }
    tmp[e] = s->v[flat(s->rank, s->dims, idx)];
  }
  tpu_status st = TPU_OK;
  double *r = res(c, op, 0, &st);
  if (r) memcpy(r, tmp, sizeof *r * (size_t)n);
  tpu_free(tmp);
  return r ? TPU_OK : st;
}

/* tpu.reduce_index (jnp.argmax / argmin inside a kernel): the index of the largest (smallest)
 * element along `axis`, the first of equal ones; a NaN counts as the extreme (jnp's rule).
 * Priced as a reduction: the VPU over the source, the XLU across lanes or sublanes. */
static tpu_status reduce_index(mo_ctx *c, const tpu_mo_op *op) {
  const mo_val *s = in(c, op, 0);
  const tpu_mo_type *t = &op->rest[0];
  int64_t axis = -1;
  tpu_mo_attr_int(op, "axis", &axis);
  const char *kind = kind_of(op, "kind");
  int mx = !strncmp(kind, "arg_max", 7);
  if (!mx && strncmp(kind, "arg_min", 7)) return tpu__mo_fail(c, op, TPU_ERR_UNSUPPORTED, "a reduce_index of kind '%s'", kind);
  if (axis < 0 || axis >= s->rank || s->kind != TPU_MO_VECTOR)
    return tpu__mo_fail(c, op, TPU_ERR_INVALID, "a reduce_index along axis %lld of a rank-%d value", (long long)axis, s->rank);
  int64_t vr = tpu__mo_vregs(c, s->rank, s->dims, s->dt);
  c->work.vpu_vregs += vr;
  if (axis >= s->rank - 2) c->work.xlu_vregs += vr;
  if (c->count) {
    tpu__mo_def_nodata(c, op->res[0], t);
    return TPU_OK;
  }
  int64_t n = tpu__mo_numel(t->rank, t->dims), len = s->dims[axis], oi[TPU_MO_MAX_RANK], si[TPU_MO_MAX_RANK];
  double *tmp = tpu_malloc(sizeof *tmp * (size_t)(n + 1));
  if (!tmp) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
  for (int64_t o = 0; o < n; o++) {
    unflat(o, t->rank, t->dims, oi);
    for (int i = 0, k = 0; i < s->rank; i++) si[i] = i == axis ? 0 : oi[k++];
    int64_t best = 0;
    double bv = s->v[flat(s->rank, s->dims, si)];
    for (int64_t j = 1; j < len && !isnan(bv); j++) {
      si[axis] = j;
      double x = s->v[flat(s->rank, s->dims, si)];
      if (isnan(x) || (mx ? x > bv : x < bv)) {
        best = j;
        bv = x;
      }
    }
    tmp[o] = (double)best;
  }
  tpu_status st = TPU_OK;
  double *r = res(c, op, 0, &st);
  if (r) memcpy(r, tmp, sizeof *r * (size_t)n);
  tpu_free(tmp);
  return r ? TPU_OK : st;
}

/* Count mode: an op on vectors is priced, its vector results carry no data and its scalar
 * results read 0 (a kernel whose control flow reads vector data is timed on that). */
static tpu_status count_op(mo_ctx *c, const tpu_mo_op *op) {
  tpu_mo_code k = op->code;
  if (k == TPU_MO_MATMUL) return matmul(c, op);
  const mo_val *s = op->nopd ? in(c, op, 0) : NULL;
  if (k == TPU_MO_MULTI_REDUCTION && s) {
    int64_t rd[TPU_MO_MAX_RANK];
    int nr = tpu_mo_attr_ints(op, "reduction_dims", rd, TPU_MO_MAX_RANK);
    int64_t vr = tpu__mo_vregs(c, s->rank, s->dims, s->dt);
    c->work.vpu_vregs += vr;
    for (int i = 0; i < nr && i < TPU_MO_MAX_RANK; i++)
      if (rd[i] >= s->rank - 2) { /* across lanes or sublanes: the cross-lane unit */
        c->work.xlu_vregs += vr;
        break;
      }
  } else if ((k == TPU_MO_TRANSPOSE || k == TPU_MO_TTRANSPOSE) && op->nres) {
    c->work.xlu_vregs += tpu__mo_vregs(c, op->rest[0].rank, op->rest[0].dims, op->rest[0].dt);
  } else if (k == TPU_MO_VEXTRACT) {
    c->work.scalar_ops++;
  } else if (k == TPU_MO_SHAPE_CAST) {
    /* a reshape within the tiled layout: no work */
  } else {
    charge(c, op, 1);
  }
  tpu_status st = TPU_OK;
  for (int r = 0; r < op->nres; r++) {
    if (op->rest[r].kind == TPU_MO_VECTOR) tpu__mo_def_nodata(c, op->res[r], &op->rest[r]);
    else if (!tpu__mo_def(c, op->res[r], &op->rest[r], &st)) return st;
  }
  return TPU_OK;
}

tpu_status tpu__mo_vec_op(mo_ctx *c, const tpu_mo_op *op, int *handled) {
  *handled = 1;
  tpu_status st = TPU_OK;
  tpu_mo_code k = op->code;
  if (k == TPU_MO_PACK_EW || k == TPU_MO_UNPACK_EW) return tpu__mo_pack(c, op);
  if (c->count) {
    int vec = 0;
    for (int r = 0; r < op->nres; r++) vec |= op->rest[r].kind == TPU_MO_VECTOR;
    for (int i = 0; i < op->nopd; i++) vec |= c->vals[op->opd[i]].kind == TPU_MO_VECTOR;
    if (vec && (k == TPU_MO_MATMUL || k == TPU_MO_MULTI_REDUCTION || k == TPU_MO_BROADCAST || k == TPU_MO_VSPLAT ||
                k == TPU_MO_SHAPE_CAST || k == TPU_MO_EXTRACT_STRIDED || k == TPU_MO_INSERT_STRIDED ||
                k == TPU_MO_TRANSPOSE || k == TPU_MO_TTRANSPOSE || k == TPU_MO_IOTA || k == TPU_MO_CONCATENATE ||
                k == TPU_MO_REPEAT || k == TPU_MO_BITCAST || k == TPU_MO_TBITCAST || k == TPU_MO_VEXTRACT ||
                k == TPU_MO_SELECT || is_unary(k) || (k >= TPU_MO_ADDF && k <= TPU_MO_CMPI) || k == TPU_MO_POWF ||
                k == TPU_MO_ATAN2 || k == TPU_MO_COPYSIGN || k == TPU_MO_IPOWI))
      return count_op(c, op);
  }
  if (k == TPU_MO_ROTATE || k == TPU_MO_DYNAMIC_ROTATE) return rotate(c, op);
  if (k == TPU_MO_REDUCE_INDEX) return reduce_index(c, op);
  if (k == TPU_MO_DYNAMIC_GATHER) return dyn_gather(c, op);
  if (k == TPU_MO_MATMUL) return matmul(c, op);
  if (k == TPU_MO_MULTI_REDUCTION) return reduction(c, op);
  if (k == TPU_MO_BROADCAST || k == TPU_MO_VSPLAT) return broadcast(c, op);
  if (k == TPU_MO_SHAPE_CAST) return copy_like(c, op, in(c, op, 0));
  if (k == TPU_MO_EXTRACT_STRIDED) return strided(c, op, 0);
  if (k == TPU_MO_INSERT_STRIDED) return strided(c, op, 1);
  if (k == TPU_MO_TRANSPOSE || k == TPU_MO_TTRANSPOSE) return transpose(c, op);
  if (k == TPU_MO_IOTA) return iota(c, op);
  if (k == TPU_MO_CONCATENATE) return concat(c, op, 0);
  if (k == TPU_MO_REPEAT) {
    int64_t times = 1;
    tpu_mo_attr_int(op, "times", &times);
    if (times < 1 || times > 64) return tpu__mo_fail(c, op, TPU_ERR_UNSUPPORTED, "tpu.repeat of %lld times", (long long)times);
    return concat(c, op, (int)times);
  }
  if (k == TPU_MO_BITCAST || k == TPU_MO_TBITCAST) return bitcast(c, op);
  if (k == TPU_MO_VEXTRACT) {
    const mo_val *s = in(c, op, 0);
    int64_t pos[TPU_MO_MAX_RANK];
    int np = tpu_mo_attr_ints(op, "static_position", pos, TPU_MO_MAX_RANK);
    int dyn = 1;
    for (int i = 0; i < np && i < s->rank; i++)
      if (pos[i] < 0 || pos[i] >= s->dims[i]) pos[i] = (int64_t)c->vals[op->opd[dyn++]].v[0];
    const tpu_mo_type *t = &op->rest[0];
    int64_t n = tpu__mo_numel(t->rank, t->dims), base = 0, sub = n;
    for (int i = 0; i < np && i < s->rank; i++) base = base * s->dims[i] + pos[i];
    base *= sub;
    double *tmp = tpu_malloc(sizeof *tmp * (size_t)(n + 1));
    if (!tmp) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
    memcpy(tmp, s->v + base, sizeof *tmp * (size_t)n);
    double *r = res(c, op, 0, &st);
    if (r) memcpy(r, tmp, sizeof *r * (size_t)n);
    tpu_free(tmp);
    c->work.scalar_ops++;
    return r ? TPU_OK : st;
  }
  if (k == TPU_MO_SELECT) {
    const mo_val *cnd = in(c, op, 0), *a = in(c, op, 1), *b = in(c, op, 2);
    const tpu_mo_type *t = &op->rest[0];
    int64_t n = tpu__mo_numel(t->rank, t->dims);
    double *tmp = tpu_malloc(sizeof *tmp * (size_t)(n + 1));
    if (!tmp) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
    int scal = cnd->kind != TPU_MO_VECTOR;
    for (int64_t e = 0; e < n; e++) tmp[e] = (scal ? cnd->v[0] : cnd->v[e]) != 0 ? a->v[e] : b->v[e];
    double *r = res(c, op, 0, &st);
    if (r) memcpy(r, tmp, sizeof *r * (size_t)n);
    tpu_free(tmp);
    charge(c, op, 1);
    return r ? TPU_OK : st;
  }
  int unary = is_unary(k);
  int binary = !unary && k != TPU_MO_COUNT && op->nopd == 2 && op->nres == 1 &&
               ((k >= TPU_MO_ADDF && k <= TPU_MO_CMPI) || k == TPU_MO_POWF || k == TPU_MO_ATAN2 ||
                k == TPU_MO_COPYSIGN || k == TPU_MO_IPOWI);
  if (!unary && !binary) {
    *handled = 0;
    return TPU_ERR_UNSUPPORTED;
  }
  const tpu_mo_type *t = &op->rest[0];
  int64_t n = tpu__mo_numel(t->rank, t->dims);
  double *tmp = tpu_malloc(sizeof *tmp * (size_t)(n + 1));
  if (!tmp) return tpu__mo_fail(c, op, TPU_ERR_NOMEM, "out of memory");
  const mo_val *a = in(c, op, 0);
  if (unary) {
    for (int64_t e = 0; e < n; e++) tmp[e] = un(op, a->dt, t->dt, a->v[e]);
  } else {
    const mo_val *b = in(c, op, 1);
    int64_t pred = 0;
    tpu_mo_attr_int(op, "predicate", &pred);
    for (int64_t e = 0; e < n; e++) {
      if (k == TPU_MO_CMPF) tmp[e] = cmpf(pred, a->v[e], b->v[e]);
      else if (k == TPU_MO_CMPI) tmp[e] = cmpi(pred, a->dt, a->v[e], b->v[e]);
      else tmp[e] = bin(op, a->dt, a->v[e], b->v[e]);
    }
  }
  double *r = res(c, op, 0, &st);
  if (r)
    for (int64_t e = 0; e < n; e++) {
      double x = tmp[e];
      /* a float converted to i4 saturates at its own range, as fptosi does at any width */
      if (t->bits > 0 && (k == TPU_MO_FPTOSI || k == TPU_MO_TFPTOSI))
        x = fmin(fmax(x, -ldexp(1, t->bits - 1)), ldexp(1, t->bits - 1) - 1);
      r[e] = tpu__mo_round_ty(t, x);
    }
  tpu_free(tmp);
  charge(c, op, 1);
  return r ? TPU_OK : st;
}
