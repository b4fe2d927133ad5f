/* tpusim run: host values (random inputs, result summaries, results written as .npy). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/npy.h"
#include "cli.h"
#include "run.h"

/* splitmix64: a small, reproducible generator for random inputs. */
static uint64_t next_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Random values: floats uniform in [-1, 1); integers in [0, 16); pred fair coin. Small
 * integers keep random indices (gather, dynamic-slice) meaningful. */
tpu_status tpu__run_random_value(tpu_tensor *t, const tpu_shape *s, uint64_t *rng, tpu_diag *d) {
  if (s->dtype == TPU_TUPLE) {
    TPU_TRY(tpu_tensor_alloc_tuple(t, s->ntuple, d));
    for (int i = 0; i < s->ntuple; i++) {
      tpu_status st = tpu__run_random_value(&t->elems[i], &s->elems[i], rng, d);
      if (st != TPU_OK) {
        tpu_tensor_free(t);
        return st;
      }
    }
    return TPU_OK;
  }
  if (s->dtype == TPU_TOKEN) {
    memset(t, 0, sizeof *t);
    t->dtype = TPU_TOKEN;
    return TPU_OK;
  }
  TPU_TRY(tpu_tensor_alloc(t, s->dtype, s->rank, s->dims, d));
  int64_t n = tpu_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = next_rand(rng);
    if (tpu_dtype_is_float(s->dtype)) tpu_tensor_set_f64(t, i, (double)(r >> 11) * 0x1p-52 - 1.0);
    else if (tpu_dtype_is_complex(s->dtype)) { /* both parts uniform in [-1, 1) */
      tpu_tensor parts = *t;
      parts.dtype = tpu_dtype_complex_part(s->dtype);
      tpu_tensor_set_f64(&parts, 2 * i, (double)(r >> 11) * 0x1p-52 - 1.0);
      tpu_tensor_set_f64(&parts, 2 * i + 1, (double)(next_rand(rng) >> 11) * 0x1p-52 - 1.0);
    }
    else if (s->dtype == TPU_PRED) tpu_tensor_set_i64(t, i, (int64_t)(r & 1));
    else tpu_tensor_set_i64(t, i, (int64_t)(r % 16));
  }
  return TPU_OK;
}

void tpu__run_summary_stats(const tpu_tensor *t, FILE *f) {
  int64_t n = tpu_tensor_numel(t);
  if (t->dtype == TPU_TOKEN || n == 0) return;
  if (tpu_dtype_is_complex(t->dtype)) { /* moduli */
    tpu_tensor parts = *t;
    parts.dtype = tpu_dtype_complex_part(t->dtype);
    double mx = 0, sum = 0;
    int64_t nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
      double v = hypot(tpu_tensor_get_f64(&parts, 2 * i), tpu_tensor_get_f64(&parts, 2 * i + 1));
      if (!isfinite(v)) {
        nonfinite++;
        continue;
      }
      mx = v > mx ? v : mx;
      sum += v;
    }
    if (n > nonfinite) fprintf(f, "  |z| max %.6g  mean %.6g", mx, sum / (double)(n - nonfinite));
    if (nonfinite) fprintf(f, "  non-finite %lld", (long long)nonfinite);
    return;
  }
  if (tpu_dtype_is_float(t->dtype)) {
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    int64_t nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
      double v = tpu_tensor_get_f64(t, i);
      if (!isfinite(v)) {
        nonfinite++;
        continue;
      }
      mn = v < mn ? v : mn;
      mx = v > mx ? v : mx;
      sum += v;
    }
    if (n > nonfinite) fprintf(f, "  min %.6g  max %.6g  mean %.6g", mn, mx, sum / (double)(n - nonfinite));
    if (nonfinite) fprintf(f, "  non-finite %lld", (long long)nonfinite);
  } else {
    int64_t mn = INT64_MAX, mx = INT64_MIN;
    for (int64_t i = 0; i < n; i++) {
      int64_t v = tpu_tensor_get_i64(t, i);
      mn = v < mn ? v : mn;
      mx = v > mx ? v : mx;
    }
    fprintf(f, "  min %lld  max %lld", (long long)mn, (long long)mx);
  }
}

/* mkdir -p: creates dir and any missing parents; 0 on success, else errno is set. */
static int mkdir_p(const char *dir) {
  char buf[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof buf) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(buf, dir, n + 1);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
  struct stat st;
  if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

/* Writes the leaves as dir/K.npy (dir is the result set's temporary folder, or a devD/ in
 * it; created here); tokens write nothing. */
int tpu__run_write_outputs(const char *dir, const tpu_tensor **leaves, int n, tpu_diag *d) {
  if (mkdir_p(dir) != 0) {
    TPU_FAIL(d, TPU_ERR_IO, tpu_loc_at(dir, 0, 0), "cannot create the output directory: %s", strerror(errno));
    return 0;
  }
  size_t plen = strlen(dir) + 32;
  char *path = tpu_malloc(plen);
  if (!path) {
    TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
    return 0;
  }
  int k;
  for (k = 0; k < n; k++) {
    snprintf(path, plen, "%s/%d.npy", dir, k);
    if (leaves[k]->dtype == TPU_TOKEN) continue;
    if (tpu_npy_write(path, leaves[k], d) != TPU_OK) break;
  }
  tpu_free(path);
  return k == n;
}

/* Every device's result leaves into DIR/devD/ (DIR created when missing). */
int tpu__run_write_per_device(const char *dir, const tpu_tensor *per_dev, int64_t ndev, tpu_diag *d) {
  if (mkdir_p(dir) != 0) {
    TPU_FAIL(d, TPU_ERR_IO, tpu_loc_at(dir, 0, 0), "cannot create the output directory: %s", strerror(errno));
    return 0;
  }
  size_t plen = strlen(dir) + 32;
  char *path = tpu_malloc(plen);
  int ok = path != NULL;
  if (!ok) TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  for (int64_t k = 0; ok && k < ndev; k++) {
    int n = tpu_tensor_count_leaves(&per_dev[k]);
    const tpu_tensor **leaves = tpu_calloc((size_t)n + 1, sizeof *leaves);
    if (!leaves) {
      TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
      ok = 0;
      break;
    }
    tpu_tensor_collect_leaves(&per_dev[k], leaves);
    snprintf(path, plen, "%s/dev%lld", dir, (long long)k);
    ok = tpu__run_write_outputs(path, leaves, n, d);
    tpu_free(leaves);
  }
  tpu_free(path);
  return ok;
}
