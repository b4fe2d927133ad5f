/* Host tensor allocation and element access. */
#include "base/tensor.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/bf16.h"

/* ---- A pool of freed array buffers ----
 * An interpreter run frees and allocates arrays of the same few sizes over and over, and
 * runs of one program repeat them; fresh large blocks come from the kernel page by page
 * (faults, zeroing). Freed buffers of POOL_MIN_BYTES or more are kept (up to POOL_SLOTS,
 * POOL_MAX_BYTES in all while a run is active, POOL_IDLE_BYTES between runs: the last
 * tpu_tensor_pool_end trims to that) and handed out again for the same byte count. Off
 * under AddressSanitizer, so that it still sees every free. */
#if defined(__SANITIZE_ADDRESS__)
#define POOL_ON 0
#else
#define POOL_ON 1
#endif
enum { POOL_SLOTS = 32 };
#define POOL_MIN_BYTES ((size_t)64 << 10)
#define POOL_MAX_BYTES ((size_t)256 << 20)
#define POOL_IDLE_BYTES ((size_t)64 << 20)

static pthread_mutex_t g_pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  void *p;
  size_t n;
} g_pool[POOL_SLOTS];
static size_t g_pool_bytes;
static int g_pool_depth;

void tpu_tensor_pool_begin(void) {
  pthread_mutex_lock(&g_pool_mu);
  g_pool_depth++;
  pthread_mutex_unlock(&g_pool_mu);
}

void tpu_tensor_pool_end(void) {
  pthread_mutex_lock(&g_pool_mu);
  if (--g_pool_depth == 0)
    for (int i = 0; i < POOL_SLOTS && g_pool_bytes > POOL_IDLE_BYTES; i++)
      if (g_pool[i].p) {
        tpu_free(g_pool[i].p);
        g_pool_bytes -= g_pool[i].n;
        g_pool[i].p = NULL;
        g_pool[i].n = 0;
      }
  pthread_mutex_unlock(&g_pool_mu);
}

static void *pool_get(size_t n) {
  void *p = NULL;
  if (!POOL_ON || n < POOL_MIN_BYTES) return NULL;
  pthread_mutex_lock(&g_pool_mu);
  for (int i = 0; i < POOL_SLOTS && !p; i++)
    if (g_pool[i].p && g_pool[i].n == n) {
      p = g_pool[i].p;
      g_pool[i].p = NULL;
      g_pool_bytes -= n;
    }
  pthread_mutex_unlock(&g_pool_mu);
  return p;
}

/* Keeps p (n bytes) for reuse, or frees it. */
static void pool_put(void *p, size_t n) {
  int kept = 0;
  if (POOL_ON && p && n >= POOL_MIN_BYTES) {
    pthread_mutex_lock(&g_pool_mu);
    if (g_pool_bytes + n <= (g_pool_depth > 0 ? POOL_MAX_BYTES : POOL_IDLE_BYTES))
      for (int i = 0; i < POOL_SLOTS && !kept; i++)
        if (!g_pool[i].p) {
          g_pool[i].p = p;
          g_pool[i].n = n;
          g_pool_bytes += n;
          kept = 1;
        }
    pthread_mutex_unlock(&g_pool_mu);
  }
  if (!kept) tpu_free(p);
}

void *tpu_pool_alloc(size_t n) {
  void *p = pool_get(n);
  return p ? p : tpu_malloc(n ? n : 1);
}

void tpu_pool_free(void *p, size_t n) { pool_put(p, n); }

/* ---- Small arrays, per thread ----
 * A loop body's scalars and short vectors are allocated and freed once per iteration. Each
 * thread keeps up to SMALL_KEEP freed blocks of each byte count up to SMALL_MAX and hands
 * them out again for that same byte count (so a block given back with n bytes, which holds
 * at least n, is only reused for n). A block handed out again counts as an allocation for
 * fault injection (tpu_alloc_inject). A thread's blocks are freed when it ends (a key's
 * destructor); off under AddressSanitizer, as the pool above. */
enum { SMALL_MAX = 512, SMALL_KEEP = 8 };
typedef struct {
  void *p[SMALL_MAX + 1][SMALL_KEEP];
  uint8_t n[SMALL_MAX + 1];
} small_bins;
static _Thread_local small_bins *t_small;
static _Thread_local int t_small_off; /* the bins could not be made: no cache here */
static pthread_key_t g_small_key;
static pthread_once_t g_small_once = PTHREAD_ONCE_INIT;
static int g_small_key_ok;

static void small_release(void *v) {
  small_bins *b = v;
  for (int n = 0; n <= SMALL_MAX; n++)
    for (int i = 0; i < b->n[n]; i++) tpu_free(b->p[n][i]);
  free(b);
  t_small = NULL;
}

static void small_key_init(void) { g_small_key_ok = pthread_key_create(&g_small_key, small_release) == 0; }

static small_bins *small_bins_of_thread(void) {
  if (t_small || t_small_off) return t_small;
  pthread_once(&g_small_once, small_key_init);
  small_bins *b = g_small_key_ok ? calloc(1, sizeof *b) : NULL; /* not counted: not a run's allocation */
  if (!b || pthread_setspecific(g_small_key, b) != 0) {
    free(b);
    t_small_off = 1;
    return NULL;
  }
  return t_small = b;
}

/* A cached block of exactly n bytes' class, or NULL (also when injection fails it: *failed). */
static void *small_get(size_t n, int *failed) {
  *failed = 0;
  if (!POOL_ON || n > SMALL_MAX) return NULL;
  small_bins *b = t_small;
  if (!b || !b->n[n]) return NULL;
  if (tpu_alloc_inject()) {
    *failed = 1;
    return NULL;
  }
  return b->p[n][--b->n[n]];
}

static int small_put(void *p, size_t n) {
  if (!POOL_ON || n > SMALL_MAX || !p) return 0;
  small_bins *b = small_bins_of_thread();
  if (!b || b->n[n] >= SMALL_KEEP) return 0;
  b->p[n][b->n[n]++] = p;
  return 1;
}

int64_t tpu_dims_numel(int rank, const int64_t *dims, int *ok) {
  int64_t n = 1;
  *ok = 1;
  for (int i = 0; i < rank; i++) /* the overflow test as a flag, not a division per dimension */
    if (dims[i] < 0 || __builtin_mul_overflow(n, dims[i], &n)) {
      *ok = 0;
      return 0;
    }
  return n;
}

int64_t tpu_tensor_numel(const tpu_tensor *t) {
  int ok;
  return tpu_dims_numel(t->rank, t->dims, &ok);
}

static tpu_status alloc_array(tpu_tensor *t, tpu_dtype dtype, int rank, const int64_t *dims, int zero,
                              tpu_diag *d) {
  tpu_tensor_zero(t);
  if (rank < 0 || rank > TPU_MAX_RANK)
    return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(), "rank %d exceeds the limit of %d", rank,
                    TPU_MAX_RANK);
  int ok;
  int64_t n = tpu_dims_numel(rank, dims, &ok);
  size_t bytes;
  if (!ok || !tpu_mul_ok((size_t)n, tpu_dtype_size(dtype), &bytes) || bytes > ((size_t)1 << 40))
    return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(), "array of %s is too large", tpu_dtype_name(dtype));
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->dims[i] = dims[i]; /* (a memcpy of a variable length here became
                                                         * `rep movsq`, whose start-up cost was a third
                                                         * of a small allocation: perf, rng loops) */
  t->nbytes = bytes;
  int failed = 0;
  t->data = bytes <= SMALL_MAX ? small_get(bytes, &failed) : pool_get(bytes);
  if (t->data && zero) memset(t->data, 0, bytes);
  if (!t->data && !failed) t->data = zero ? tpu_calloc(1, bytes ? bytes : 1) : tpu_malloc(bytes ? bytes : 1);
  if (!t->data) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory allocating %zu bytes", bytes);
  return TPU_OK;
}

tpu_status tpu_tensor_alloc(tpu_tensor *t, tpu_dtype dtype, int rank, const int64_t *dims,
                            tpu_diag *d) {
  return alloc_array(t, dtype, rank, dims, 1, d);
}

tpu_status tpu_tensor_alloc_uninit(tpu_tensor *t, tpu_dtype dtype, int rank, const int64_t *dims, tpu_diag *d) {
  return alloc_array(t, dtype, rank, dims, 0, d);
}

tpu_status tpu_tensor_alloc_tuple(tpu_tensor *t, int n, tpu_diag *d) {
  tpu_tensor_zero(t);
  t->dtype = TPU_TUPLE;
  t->ntuple = n;
  t->elems = tpu_calloc((size_t)(n ? n : 1), sizeof(tpu_tensor));
  if (!t->elems) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory allocating a tuple");
  return TPU_OK;
}

tpu_status tpu_tensor_clone(tpu_tensor *dst, const tpu_tensor *src, tpu_diag *d) {
  if (src->dtype == TPU_TUPLE) {
    TPU_TRY(tpu_tensor_alloc_tuple(dst, src->ntuple, d));
    for (int i = 0; i < src->ntuple; i++) {
      tpu_status s = tpu_tensor_clone(&dst->elems[i], &src->elems[i], d);
      if (s != TPU_OK) {
        tpu_tensor_free(dst);
        return s;
      }
    }
    return TPU_OK;
  }
  TPU_TRY(tpu_tensor_alloc_uninit(dst, src->dtype, src->rank, src->dims, d));
  if (src->nbytes) memcpy(dst->data, src->data, src->nbytes);
  return TPU_OK;
}

void tpu_tensor_free(tpu_tensor *t) {
  if (!t) return;
  if (t->elems) {
    for (int i = 0; i < t->ntuple; i++) tpu_tensor_free(&t->elems[i]);
    tpu_free(t->elems);
  }
  if (t->nbytes > SMALL_MAX || !small_put(t->data, t->nbytes)) pool_put(t->data, t->nbytes);
  tpu_tensor_zero(t);
}

double tpu_tensor_get_f64(const tpu_tensor *t, int64_t i) { return tpu_load_f64(t->dtype, t->data, i); }

double tpu_load_f64(tpu_dtype dtype, const void *p, int64_t i) {
  switch (dtype) {
    case TPU_PRED: return ((const uint8_t *)p)[i] ? 1.0 : 0.0;
    case TPU_S8: case TPU_S4: return ((const int8_t *)p)[i];
    case TPU_S16: return ((const int16_t *)p)[i];
    case TPU_S32: return ((const int32_t *)p)[i];
    case TPU_S64: return (double)((const int64_t *)p)[i];
    case TPU_U8: case TPU_U4: return ((const uint8_t *)p)[i];
    case TPU_U16: return ((const uint16_t *)p)[i];
    case TPU_U32: return ((const uint32_t *)p)[i];
    case TPU_U64: return (double)((const uint64_t *)p)[i];
    case TPU_BF16: return tpu_bf16_to_f32(((const tpu_bf16 *)p)[i]);
    case TPU_F16: return tpu_f16_to_f32(((const tpu_f16 *)p)[i]);
    case TPU_F32: return ((const float *)p)[i];
    case TPU_F64: return ((const double *)p)[i];
    case TPU_C64: return ((const float *)p)[2 * i];
    case TPU_C128: return ((const double *)p)[2 * i];
    case TPU_F8E5M2: return tpu_f8_to_f32(((const tpu_f8 *)p)[i], 0);
    case TPU_F8E4M3FN: return tpu_f8_to_f32(((const tpu_f8 *)p)[i], 1);
    default: return 0;
  }
}

int64_t tpu_tensor_get_i64(const tpu_tensor *t, int64_t i) {
  const void *p = t->data;
  switch (t->dtype) {
    case TPU_PRED: return ((const uint8_t *)p)[i] ? 1 : 0;
    case TPU_S8: case TPU_S4: return ((const int8_t *)p)[i];
    case TPU_S16: return ((const int16_t *)p)[i];
    case TPU_S32: return ((const int32_t *)p)[i];
    case TPU_S64: return ((const int64_t *)p)[i];
    case TPU_U8: case TPU_U4: return ((const uint8_t *)p)[i];
    case TPU_U16: return ((const uint16_t *)p)[i];
    case TPU_U32: return ((const uint32_t *)p)[i];
    case TPU_U64: return (int64_t)((const uint64_t *)p)[i];
    default: return (int64_t)tpu_tensor_get_f64(t, i);
  }
}

void tpu_tensor_set_f64(tpu_tensor *t, int64_t i, double v) {
  void *p = t->data;
  switch (t->dtype) {
    case TPU_BF16: ((tpu_bf16 *)p)[i] = tpu_bf16_from_f64(v); break;
    case TPU_F16: ((tpu_f16 *)p)[i] = tpu_f16_from_f64(v); break;
    case TPU_F32: ((float *)p)[i] = (float)v; break;
    case TPU_F64: ((double *)p)[i] = v; break;
    case TPU_C64: ((float *)p)[2 * i] = (float)v, ((float *)p)[2 * i + 1] = 0.0f; break;
    case TPU_C128: ((double *)p)[2 * i] = v, ((double *)p)[2 * i + 1] = 0.0; break;
    case TPU_F8E5M2: ((tpu_f8 *)p)[i] = tpu_f8_from_f64(v, 0); break;
    case TPU_F8E4M3FN: ((tpu_f8 *)p)[i] = tpu_f8_from_f64(v, 1); break;
    default: tpu_tensor_set_i64(t, i, (int64_t)v); break;
  }
}

void tpu_tensor_set_i64(tpu_tensor *t, int64_t i, int64_t v) {
  void *p = t->data;
  switch (t->dtype) {
    case TPU_PRED: ((uint8_t *)p)[i] = v != 0; break;
    case TPU_S8: ((int8_t *)p)[i] = (int8_t)v; break;
    case TPU_S4: ((int8_t *)p)[i] = (int8_t)(((v & 15) ^ 8) - 8); break; /* wraps as XLA's s4 */
    case TPU_U4: ((uint8_t *)p)[i] = (uint8_t)(v & 15); break;
    case TPU_S16: ((int16_t *)p)[i] = (int16_t)v; break;
    case TPU_S32: ((int32_t *)p)[i] = (int32_t)v; break;
    case TPU_S64: ((int64_t *)p)[i] = v; break;
    case TPU_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case TPU_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case TPU_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case TPU_U64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case TPU_BF16: case TPU_F16: case TPU_F32: case TPU_F64: case TPU_C64: case TPU_C128:
    case TPU_F8E5M2: case TPU_F8E4M3FN:
      tpu_tensor_set_f64(t, i, (double)v);
      break;
    default: break;
  }
}

int tpu_tensor_count_leaves(const tpu_tensor *t) {
  if (t->dtype != TPU_TUPLE) return 1;
  int n = 0;
  for (int i = 0; i < t->ntuple; i++) n += tpu_tensor_count_leaves(&t->elems[i]);
  return n;
}

static void collect_leaves(const tpu_tensor *t, const tpu_tensor **out, int *k) {
  if (t->dtype != TPU_TUPLE) {
    out[(*k)++] = t;
    return;
  }
  for (int i = 0; i < t->ntuple; i++) collect_leaves(&t->elems[i], out, k);
}

void tpu_tensor_collect_leaves(const tpu_tensor *t, const tpu_tensor **out) {
  int k = 0;
  collect_leaves(t, out, &k);
}
