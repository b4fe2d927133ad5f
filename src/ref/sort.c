/* Reference kernels: sort (comparator computation, always stable) and topk. */
#include <string.h>

#include "ir/custom_call.h"
#include "ref/reduce_int.h"

/* "a sorts before b": returns 1/0; on failure stores the status in the context and
 * returns 0 (the merge then finishes harmlessly and the caller reports the error). */
typedef int (*less_fn)(void *ctx, int64_t a, int64_t b);

/* Stable bottom-up merge sort of perm[0..n) using tmp[0..n) as scratch: an element of
 * the right run goes first only when it is strictly less than the left one, so equal
 * elements keep their order. The result ends in perm. */
static void merge_sort(int64_t *perm, int64_t *tmp, int64_t n, less_fn less, void *ctx) {
  int64_t *src = perm, *dst = tmp;
  for (int64_t width = 1; width < n; width *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * width) {
      int64_t mid = lo + width < n ? lo + width : n;
      int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
      int64_t i = lo, j = mid, o = lo;
      while (i < mid && j < hi) dst[o++] = less(ctx, src[j], src[i]) ? src[j++] : src[i++];
      while (i < mid) dst[o++] = src[i++];
      while (j < hi) dst[o++] = src[j++];
    }
    int64_t *t = src;
    src = dst;
    dst = t;
  }
  if (src != perm) memcpy(perm, src, sizeof(int64_t) * (size_t)n);
}

/* ---- sort ---- */

typedef struct {
  tpu__scall sc;
  const tpu_tensor *const *ops;
  int nops;
  int64_t base, stride; /* the line being sorted: element j is at base + j*stride */
  tpu_status st;
  tpu_diag *d;
} sort_ctx;

static int sort_less(void *p, int64_t a, int64_t b) {
  sort_ctx *c = p;
  if (c->st != TPU_OK) return 0;
  for (int i = 0; i < c->nops; i++) {
    size_t es = tpu_dtype_size(c->ops[i]->dtype);
    const char *data = c->ops[i]->data;
    memcpy(tpu__scall_arg(&c->sc, 2 * i), data + (size_t)(c->base + a * c->stride) * es, es);
    memcpy(tpu__scall_arg(&c->sc, 2 * i + 1), data + (size_t)(c->base + b * c->stride) * es, es);
  }
  int r = 0;
  c->st = tpu__scall_pred(&c->sc, &r, c->d);
  return c->st == TPU_OK && r;
}

/* Sorts every line along dimensions[0] of all operands by the same permutation, which
 * the comparator (parameters lhs0, rhs0, lhs1, rhs1, ...; true when lhs goes first)
 * defines. The sort is always stable: a stable sort is also a valid unstable one. */
tpu_status tpu__ref_sort(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                         tpu_diag *d) {
  int nops = in->noperands;
  if (nops < 1) return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "sort needs an operand");
  const tpu_tensor *a0 = args[0];
  int rank = a0->rank;
  int64_t dim = in->dimensions.n ? in->dimensions.v[0] : rank - 1;
  if (rank < 1 || dim < 0 || dim >= rank)
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "sort dimension %lld is out of range", (long long)dim);
  TPU_TRY(tpu__ref_alloc_shape(out, &in->shape, d));
  int ok = (out->dtype == TPU_TUPLE ? out->ntuple : 1) == nops;
  for (int i = 0; ok && i < nops; i++) {
    const tpu_tensor *o = out->dtype == TPU_TUPLE ? &out->elems[i] : out;
    ok = args[i]->rank == rank && o->rank == rank && o->dtype == args[i]->dtype;
    for (int k = 0; ok && k < rank; k++) ok = args[i]->dims[k] == a0->dims[k] && o->dims[k] == a0->dims[k];
  }
  if (!ok) {
    tpu_tensor_free(out);
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "sort operands and result do not have one shape");
  }
  int64_t n = tpu_tensor_numel(a0), len = a0->dims[dim];
  if (n == 0) return TPU_OK;
  int64_t str[TPU_MAX_RANK];
  tpu__ref_strides(rank, a0->dims, str);
  int64_t inner = str[dim], outer = n / (len * inner);

  sort_ctx c;
  memset(&c, 0, sizeof c);
  c.ops = args;
  c.nops = nops;
  c.stride = inner;
  c.d = d;
  c.st = tpu__scall_init(&c.sc, ip, in->to_apply, 2 * nops, in->loc, d);
  for (int i = 0; c.st == TPU_OK && i < nops; i++)
    if (c.sc.args[2 * i].dtype != args[i]->dtype || c.sc.args[2 * i + 1].dtype != args[i]->dtype)
      c.st = TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "sort comparator parameters do not match operand %d", i);
  int64_t *perm = tpu_malloc(sizeof(int64_t) * (size_t)len), *tmp = tpu_malloc(sizeof(int64_t) * (size_t)len);
  if (c.st == TPU_OK && (!perm || !tmp)) c.st = TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  for (int64_t o = 0; c.st == TPU_OK && o < outer; o++) {
    for (int64_t i = 0; c.st == TPU_OK && i < inner; i++) {
      c.base = o * len * inner + i;
      for (int64_t j = 0; j < len; j++) perm[j] = j;
      merge_sort(perm, tmp, len, sort_less, &c);
      for (int k = 0; c.st == TPU_OK && k < nops; k++) {
        size_t es = tpu_dtype_size(args[k]->dtype);
        char *dst = (out->dtype == TPU_TUPLE ? out->elems[k].data : out->data);
        const char *src = args[k]->data;
        for (int64_t j = 0; j < len; j++)
          memcpy(dst + (size_t)(c.base + j * inner) * es, src + (size_t)(c.base + perm[j] * inner) * es, es);
      }
    }
  }
  tpu__scall_deinit(&c.sc);
  tpu_free(perm);
  tpu_free(tmp);
  if (c.st != TPU_OK) tpu_tensor_free(out);
  return c.st;
}

/* ---- topk ---- */

/* A key whose unsigned order is the total order XLA's TopK uses (its decomposition sorts
 * with a total-order comparator): for floats -NaN < -inf < ... < -0 < +0 < ... < inf <
 * NaN, by bit pattern (flip all bits of negatives, set the sign bit of positives). */
static uint64_t order_key(tpu_dtype t, const void *p) {
  switch (t) {
    case TPU_PRED: return *(const uint8_t *)p != 0;
    case TPU_S8: case TPU_S4: return (uint64_t)(int64_t)*(const int8_t *)p ^ UINT64_C(0x8000000000000000);
    case TPU_S16: return (uint64_t)(int64_t)*(const int16_t *)p ^ UINT64_C(0x8000000000000000);
    case TPU_S32: return (uint64_t)(int64_t)*(const int32_t *)p ^ UINT64_C(0x8000000000000000);
    case TPU_S64: return (uint64_t)*(const int64_t *)p ^ UINT64_C(0x8000000000000000);
    case TPU_U8: case TPU_U4: return *(const uint8_t *)p;
    case TPU_U16: return *(const uint16_t *)p;
    case TPU_U32: return *(const uint32_t *)p;
    case TPU_U64: return *(const uint64_t *)p;
    case TPU_F8E5M2:
    case TPU_F8E4M3FN: {
      uint8_t u = *(const uint8_t *)p;
      return (u & 0x80u) ? (uint8_t)~u : (uint64_t)(u | 0x80u);
    }
    case TPU_BF16:
    case TPU_F16: {
      uint16_t u;
      memcpy(&u, p, 2);
      return (u & 0x8000u) ? (uint16_t)~u : (uint64_t)(u | 0x8000u);
    }
    case TPU_F32: {
      uint32_t u;
      memcpy(&u, p, 4);
      return (u & 0x80000000u) ? (uint32_t)~u : (uint64_t)(u | 0x80000000u);
    }
    case TPU_F64: {
      uint64_t u;
      memcpy(&u, p, 8);
      return (u & UINT64_C(0x8000000000000000)) ? ~u : (u | UINT64_C(0x8000000000000000));
    }
    default: return 0;
  }
}

typedef struct {
  const uint64_t *key;
  int largest;
} topk_ctx;

static int topk_less(void *p, int64_t a, int64_t b) {
  const topk_ctx *c = p;
  return c->largest ? c->key[a] > c->key[b] : c->key[a] < c->key[b];
}

/* The k largest (or smallest) elements of each row along the last dimension, in order,
 * with their s32 indices; equal elements keep index order (lower index first). */
tpu_status tpu__ref_topk(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args, tpu_tensor *out,
                         tpu_diag *d) {
  (void)ip;
  const tpu_tensor *a = args[0];
  int rank = a->rank;
  if (in->noperands != 1 || rank < 1)
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "topk takes one operand of rank >= 1");
  int64_t n = a->dims[rank - 1], k = in->k;
  if (k < 0 || k > n)
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "topk k=%lld is out of range for a dimension of %lld", (long long)k,
                    (long long)n);
  TPU_TRY(tpu__ref_alloc_shape(out, &in->shape, d));
  int ok = out->dtype == TPU_TUPLE && out->ntuple == 2 && out->elems[0].dtype == a->dtype &&
           out->elems[1].dtype == TPU_S32 && out->elems[0].rank == rank && out->elems[1].rank == rank;
  for (int i = 0; ok && i < rank; i++) {
    int64_t want = i == rank - 1 ? k : a->dims[i];
    ok = out->elems[0].dims[i] == want && out->elems[1].dims[i] == want;
  }
  if (!ok) {
    tpu_tensor_free(out);
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "topk result is not (values, s32 indices) of the operand's shape with k");
  }
  int64_t rows = n ? tpu_tensor_numel(a) / n : 0;
  if (rows == 0 || k == 0) return TPU_OK;
  size_t es = tpu_dtype_size(a->dtype);
  uint64_t *key = tpu_malloc(sizeof(uint64_t) * (size_t)n);
  int64_t *perm = tpu_malloc(sizeof(int64_t) * (size_t)n), *tmp = tpu_malloc(sizeof(int64_t) * (size_t)n);
  if (!key || !perm || !tmp) {
    tpu_free(key);
    tpu_free(perm);
    tpu_free(tmp);
    tpu_tensor_free(out);
    return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  }
  topk_ctx c = {key, in->largest};
  char *vals = out->elems[0].data;
  int32_t *idx = out->elems[1].data;
  for (int64_t r = 0; r < rows; r++) {
    const char *row = (const char *)a->data + (size_t)(r * n) * es;
    for (int64_t j = 0; j < n; j++) {
      key[j] = order_key(a->dtype, row + (size_t)j * es);
      perm[j] = j;
    }
    merge_sort(perm, tmp, n, topk_less, &c);
    for (int64_t j = 0; j < k; j++) {
      memcpy(vals + (size_t)(r * k + j) * es, row + (size_t)perm[j] * es, es);
      idx[r * k + j] = (int32_t)perm[j];
    }
  }
  tpu_free(key);
  tpu_free(perm);
  tpu_free(tmp);
  return TPU_OK;
}

/* ---- PartialReduce (approximate top-k) ---- */

/* Along dimension D the input's N positions fall into the result's M bins by position
 * modulo M (bin b: b, b + M, b + 2M, ...: the bins are the vector lanes and sublanes the
 * TPU reduces element by element across registers). Each bin starts at the initial values
 * and takes, position by position in increasing order, the element the comparator puts
 * before the one it holds (so among equal ones the first stays). */
tpu_status tpu__ref_partial_reduce(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                                   tpu_tensor *out, tpu_diag *d) {
  int n = in->noperands / 2;
  int64_t dim = tpu_custom_call_config_int(in, "reduction_dim");
  const tpu_comp *cmp = tpu_custom_call_comp(in);
  const tpu_tensor *a0 = args[0];
  if (n < 1 || !cmp || dim < 0 || dim >= a0->rank)
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "PartialReduce needs values, initial values, a comparator and a "
                                                 "reduction_dim");
  TPU_TRY(tpu__ref_alloc_shape(out, &in->shape, d));
  tpu_tensor *res[16];
  if (n > (int)(sizeof res / sizeof res[0])) {
    tpu_tensor_free(out);
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "PartialReduce of %d arrays", n);
  }
  for (int k = 0; k < n; k++) res[k] = out->dtype == TPU_TUPLE ? &out->elems[k] : out;
  int64_t len = a0->dims[dim], bins = res[0]->dims[dim];
  int64_t str[TPU_MAX_RANK];
  tpu__ref_strides(a0->rank, a0->dims, str);
  int64_t inner = str[dim], nin = tpu_tensor_numel(a0), outer = len > 0 && inner > 0 ? nin / (len * inner) : 0;
  tpu__scall sc;
  tpu_status st = tpu__scall_init(&sc, ip, cmp, 2 * n, in->loc, d);
  for (int k = 0; st == TPU_OK && k < n; k++)
    if (sc.args[2 * k].dtype != args[k]->dtype || sc.args[2 * k + 1].dtype != args[k]->dtype ||
        args[n + k]->dtype != args[k]->dtype || res[k]->dtype != args[k]->dtype)
      st = TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "PartialReduce comparator parameters do not match operand %d", k);
  for (int64_t o = 0; st == TPU_OK && o < outer; o++)
    for (int64_t i = 0; st == TPU_OK && i < inner; i++)
      for (int64_t b = 0; st == TPU_OK && b < bins; b++) {
        size_t dst = (size_t)(o * bins * inner + b * inner + i);
        for (int k = 0; k < n; k++) { /* the initial values */
          size_t es = tpu_dtype_size(args[k]->dtype);
          memcpy((char *)res[k]->data + dst * es, args[n + k]->data, es);
        }
        for (int64_t j = b; st == TPU_OK && j < len; j += bins) {
          size_t src = (size_t)(o * len * inner + j * inner + i);
          for (int k = 0; k < n; k++) {
            size_t es = tpu_dtype_size(args[k]->dtype);
            memcpy(tpu__scall_arg(&sc, 2 * k), (const char *)args[k]->data + src * es, es);
            memcpy(tpu__scall_arg(&sc, 2 * k + 1), (const char *)res[k]->data + dst * es, es);
          }
          int first = 0;
          st = tpu__scall_pred(&sc, &first, d);
          for (int k = 0; st == TPU_OK && first && k < n; k++) {
            size_t es = tpu_dtype_size(args[k]->dtype);
            memcpy((char *)res[k]->data + dst * es, (const char *)args[k]->data + src * es, es);
          }
        }
      }
  tpu__scall_deinit(&sc);
  if (st != TPU_OK) tpu_tensor_free(out);
  return st;
}
