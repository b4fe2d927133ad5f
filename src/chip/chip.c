/* Chip presets: finding, loading and validating chips/NAME.json. */
#include "chip/chip.h"

#include <dirent.h>
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"
#include "base/par.h"

#define CHIP_SCHEMA "tpusim-chip/1"

static const struct {
  const char *key;
  size_t off;
  char kind;
  int req;
  const char *unit, *meaning;
} k_fields[] = {
#define X(id, member, kind, req, unit, meaning) \
  {#member, offsetof(tpu_chip, member), kind, req, unit, meaning},
    TPU_CHIP_FIELDS(X)
#undef X
};
_Static_assert(sizeof k_fields / sizeof k_fields[0] == TPU_CHIP_NFIELDS, "chip field table");

/* Physical ranges, checked on every value before anything computes with it, so that no
 * product or conversion in the compiler or the timing model can overflow (chips/README.md
 * "Ranges"). Generous: an order of magnitude or more around every chip built. A field not
 * listed takes its kind's bound (TPU_CHIP_MAX_INT, TPU_CHIP_MAX_REAL). */
#define KIB 1024.0
#define MIB (1024.0 * KIB)
#define GIB (1024.0 * MIB)
#define TIB (1024.0 * GIB)
#define TPU_CHIP_MAX_INT ((double)((int64_t)1 << 50))
#define TPU_CHIP_MAX_REAL 1e18
static const struct {
  double lo, hi;
} k_range[TPU_CHIP_NFIELDS] = {
    [TPU_CHIP_CLOCK_HZ] = {1e6, 1e11},
    [TPU_CHIP_TENSORCORES] = {1, 64},
    [TPU_CHIP_MXUS_PER_CORE] = {1, 64},
    [TPU_CHIP_MXU_ROWS] = {1, 4096},
    [TPU_CHIP_MXU_COLS] = {1, 4096},
    [TPU_CHIP_MXU_WEIGHT_LOAD_CYCLES] = {1, 1 << 20},
    [TPU_CHIP_INT8_WEIGHT_LOAD_CYCLES] = {1, 1 << 20},
    [TPU_CHIP_INT8_RATE] = {1e-3, 64},
    [TPU_CHIP_VECTOR_LANES] = {1, 4096},
    [TPU_CHIP_VECTOR_SUBLANES] = {1, 4096},
    [TPU_CHIP_VECTOR_OPS_PER_CYCLE] = {1e-3, 1024},
    [TPU_CHIP_VECTOR_LOAD_OPS] = {1e-6, 1024},
    [TPU_CHIP_EUP_PUSHES_PER_CYCLE] = {1e-3, 1024},
    [TPU_CHIP_VMEM_BYTES] = {KIB, TIB},
    [TPU_CHIP_CMEM_BYTES] = {KIB, TIB},
    [TPU_CHIP_ACC_BYTES] = {KIB, TIB},
    [TPU_CHIP_HBM_BYTES] = {MIB, 1024 * TIB},
    [TPU_CHIP_HBM_BW] = {1e6, 1e15},
    [TPU_CHIP_HBM_LATENCY_S] = {1e-12, 1e-2},
    [TPU_CHIP_HBM_EFFICIENCY] = {1e-3, 1},
    [TPU_CHIP_KERNEL_OVERHEAD_S] = {1e-12, 1e-2},
    [TPU_CHIP_MATMUL_OVERHEAD_S] = {1e-12, 1e-2},
    [TPU_CHIP_MATMUL_BASE_S] = {1e-12, 1e-2},
    [TPU_CHIP_MATMUL_WRITE_S] = {1e-12, 1e-2},
    [TPU_CHIP_INT8_MXU_RATE] = {1e-3, 1024},
    [TPU_CHIP_INT8_MATMUL_S] = {1e-12, 1e-2},
    [TPU_CHIP_STREAM_PASS_BYTES] = {1e-6, 1024},
    [TPU_CHIP_RESULT_PASS_BYTES] = {1e-6, 1024},
    [TPU_CHIP_VMEM_READ_COST] = {1e-6, 1024},
    [TPU_CHIP_VMEM_WRITE_COST] = {1e-6, 1024},
    [TPU_CHIP_MATMUL_STREAM_EFFICIENCY] = {1e-3, 1024},
    [TPU_CHIP_LONE_OP_BYTES] = {1e-6, 1024},
    [TPU_CHIP_LONE_OP_MIN_BYTES] = {1, 1024 * TIB},
    [TPU_CHIP_LONE_REDUCE_MIN_BYTES] = {1, 1024 * TIB},
    [TPU_CHIP_TRANSPOSE_BYTES] = {1e-6, 1024},
    [TPU_CHIP_ROW_BROADCAST_CYCLES] = {1e-6, 1e6},
    [TPU_CHIP_DOT_VECTOR_GROUP_CYCLES] = {1e-6, 1e6},
    [TPU_CHIP_VPU_BATCHED_VECTOR_DOTS] = {1, 1},
    [TPU_CHIP_MXU_BATCH_SPREAD] = {1, 1},
    [TPU_CHIP_MXU_FILL_HIDDEN] = {1, 1},
    [TPU_CHIP_CMEM_WRITE_PASS] = {1, 1},
    [TPU_CHIP_STREAM_BLOCK_ELEMS] = {1, 1e12},
    [TPU_CHIP_STREAM_BLOCK_FILL_CYCLES] = {1e-3, 1e7},
    [TPU_CHIP_MATMUL_RESIDENT_NO_START] = {1, 1},
    [TPU_CHIP_EPILOGUE_REDUCE_SERIAL] = {1, 1},
    [TPU_CHIP_CONV_GROUP_STEP_CYCLES] = {1e-3, 1e6},
    [TPU_CHIP_WINDOW_START_CYCLES] = {1e-3, 1e7},
    [TPU_CHIP_SCAN_START_CYCLES] = {1e-3, 1e7},
    [TPU_CHIP_SCOPED_VMEM_BYTES] = {KIB, TIB},
    [TPU_CHIP_SCAN_WINDOW_BYTES] = {KIB, TIB},
    [TPU_CHIP_XPREFETCH_MAX_BYTES] = {1, TIB},
    [TPU_CHIP_ICI_LINKS] = {1, 64},
    [TPU_CHIP_ICI_BW_PER_LINK] = {1e6, 1e15},
    [TPU_CHIP_ICI_LATENCY_S] = {1e-12, 1e-2},
    [TPU_CHIP_WINDOWED_EINSUM_MIN_CHIPS] = {1, 1 << 20},
    [TPU_CHIP_WINDOWED_EINSUM_MAX_CHIPS] = {1, 1 << 20},
    [TPU_CHIP_REDUCE_SCATTER_SPAN_BYTES] = {1, TIB},
    [TPU_CHIP_WINDOWED_EINSUM_RING4_MULTIPLIER] = {0.01, 100},
    [TPU_CHIP_MAX_CHIPS] = {1, 1 << 20},
    [TPU_CHIP_POD_CHIPS] = {1, 1 << 24},
    [TPU_CHIP_WRAP_MULTIPLE] = {1, 1 << 20},
    [TPU_CHIP_CHIPS_PER_HOST] = {1, 1024},
    [TPU_CHIP_PCIE_BW] = {1e6, 1e15},
    [TPU_CHIP_DCN_BW] = {1e6, 1e15},
    [TPU_CHIP_DCN_HOST_BW] = {1e6, 1e16},
    [TPU_CHIP_DCN_LATENCY_S] = {1e-9, 1},
    [TPU_CHIP_PEAK_BF16_FLOPS] = {1e6, 1e18},
    [TPU_CHIP_PEAK_INT8_OPS] = {1e6, 1e18},
    [TPU_CHIP_PEAK_FP8_OPS] = {1e6, 1e18},
};

/* The range of a numeric field ('f' or 'i'). */
static void field_range(int f, double *lo, double *hi) {
  *lo = k_range[f].lo;
  *hi = k_range[f].hi;
  if (*hi == 0) { /* not listed: the kind's bound */
    *lo = k_fields[f].kind == 'i' ? 1 : 1e-12;
    *hi = k_fields[f].kind == 'i' ? TPU_CHIP_MAX_INT : TPU_CHIP_MAX_REAL;
  }
}

void tpu_chip_field_range(tpu_chip_field f, double *lo, double *hi) { field_range((int)f, lo, hi); }

void tpu_chip_set_value(tpu_chip *c, tpu_chip_field f, double v) {
  char *p = (char *)c + k_fields[f].off;
  if (k_fields[f].kind == 'f') *(double *)p = v;
  else if (k_fields[f].kind == 'i') *(int64_t *)p = (int64_t)v;
  else return;
  c->prov[f].status = TPU_PROV_PUBLISHED;
}

static const char *const k_prov[] = {"published", "derived", "uncertain", "unknown", "absent"};
static const char *const k_topo[] = {"none", "2d-torus", "3d-torus"};
static const char *const k_wrap[] = {"none", "full-axis", "multiple"};

const char *tpu_chip_field_key(tpu_chip_field f) { return k_fields[f].key; }
const char *tpu_chip_field_unit(tpu_chip_field f) { return k_fields[f].unit; }
const char *tpu_chip_field_meaning(tpu_chip_field f) { return k_fields[f].meaning; }
char tpu_chip_field_kind(tpu_chip_field f) { return k_fields[f].kind; }
const char *tpu_chip_prov_name(tpu_chip_prov_status s) { return k_prov[s]; }
const char *tpu_chip_topology_name(tpu_topology_kind k) { return k_topo[k]; }
const char *tpu_chip_wrap_name(tpu_wrap_rule w) { return k_wrap[w]; }

int tpu_chip_known(const tpu_chip *c, tpu_chip_field f) {
  return c->prov[f].status != TPU_PROV_UNKNOWN && c->prov[f].status != TPU_PROV_ABSENT;
}

double tpu_chip_value(const tpu_chip *c, tpu_chip_field f) {
  const char *p = (const char *)c + k_fields[f].off;
  switch (k_fields[f].kind) {
    case 'f': return *(const double *)p;
    case 'i': return (double)*(const int64_t *)p;
    case 't': return (double)*(const tpu_dtype *)p;
    case 'o': return (double)*(const tpu_topology_kind *)p;
    case 'w': return (double)*(const tpu_wrap_rule *)p;
    case 'm': {
      const int64_t *m = (const int64_t *)p;
      return (double)m[0] * (double)m[1] * (double)m[2];
    }
  }
  return 0;
}

double tpu_chip_macs_per_cycle(const tpu_chip *c) {
  return (double)c->tensorcores * (double)c->mxus_per_core * (double)c->mxu_rows *
         (double)c->mxu_cols;
}

double tpu_chip_hbm_stream_bw(const tpu_chip *c) {
  return c->hbm_efficiency > 0 ? c->hbm_bw * c->hbm_efficiency : c->hbm_bw;
}

double tpu_chip_window_start(const tpu_chip *c, int scan) {
  return scan && c->scan_start_cycles > 0 ? c->scan_start_cycles : c->window_start_cycles;
}

double tpu_chip_result_pass(const tpu_chip *c) {
  return c->result_pass_bytes > 0 ? c->result_pass_bytes : c->stream_pass_bytes;
}

double tpu_chip_derived_peak(const tpu_chip *c) { return 2.0 * tpu_chip_macs_per_cycle(c) * c->clock_hz; }

double tpu_chip_peak_bf16(const tpu_chip *c) {
  if (tpu_chip_known(c, TPU_CHIP_PEAK_BF16_FLOPS)) return c->peak_bf16_flops;
  return c->mac_input == TPU_BF16 ? tpu_chip_derived_peak(c) : 0.0;
}

double tpu_chip_peak_int8(const tpu_chip *c) {
  if (tpu_chip_known(c, TPU_CHIP_PEAK_INT8_OPS)) return c->peak_int8_ops;
  if (c->mac_input == TPU_S8) return tpu_chip_derived_peak(c);
  if (tpu_chip_known(c, TPU_CHIP_INT8_RATE)) return tpu_chip_derived_peak(c) * c->int8_rate;
  return 0.0;
}

int tpu_chip_axis_wraps(const tpu_chip *c, int axis, int64_t len) {
  if (axis < 0 || axis > 2 || len < 2) return 0;
  switch (c->wraparound) {
    case TPU_WRAP_NONE: return 0;
    case TPU_WRAP_FULL_AXIS: return len == c->max_dims[axis];
    case TPU_WRAP_MULTIPLE: return c->wrap_multiple > 0 && len % c->wrap_multiple == 0;
  }
  return 0;
}

/* ---------------------------------------------------------------- finding files */

/* Candidate chips folders in search order; returns how many were written. */
static int chip_dirs(char dirs[][512], int max) {
  int n = 0;
  const char *env = getenv("TPUSIM_CHIPS");
  if (env && *env && n < max) snprintf(dirs[n++], 512, "%s", env);
  char exe[400];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    const char *ups[] = {"", "/..", "/../..", "/../../.."};
    for (int i = 0; i < 4 && n < max; i++) snprintf(dirs[n++], 512, "%s%s/chips", exe, ups[i]);
    if (n < max) snprintf(dirs[n++], 512, "%s/../share/tpusim/chips", exe); /* an installed tree, moved */
  }
  if (n < max) snprintf(dirs[n++], 512, "chips");
#ifdef TPU_CHIPS_INSTALL_DIR
  if (n < max) snprintf(dirs[n++], 512, "%s", TPU_CHIPS_INSTALL_DIR); /* cmake --install */
#endif
#ifdef TPU_CHIPS_SOURCE_DIR
  if (n < max) snprintf(dirs[n++], 512, "%s", TPU_CHIPS_SOURCE_DIR); /* the tree it was built from */
#endif
  return n;
}

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int cmp_names(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

/* Lists NAME.json files of one folder; returns the count (0 if none or not a folder). */
static int list_dir(const char *dir, tpu_chip_presets *out) {
  DIR *dp = opendir(dir);
  if (!dp) return 0;
  out->count = 0;
  struct dirent *e;
  while ((e = readdir(dp)) && out->count < TPU_CHIP_MAX_PRESETS) {
    size_t len = strlen(e->d_name);
    if (len <= 5 || len - 5 >= sizeof out->names[0] || strcmp(e->d_name + len - 5, ".json")) continue;
    if (!strcmp(e->d_name, "prices.json")) continue; /* the planner's price table, not a chip */
    char full[1024];
    snprintf(full, sizeof full, "%.700s/%.255s", dir, e->d_name);
    if (!is_file(full)) continue;
    memcpy(out->names[out->count], e->d_name, len - 5);
    out->names[out->count][len - 5] = 0;
    out->count++;
  }
  closedir(dp);
  qsort(out->names, (size_t)out->count, sizeof out->names[0], cmp_names);
  snprintf(out->dir, sizeof out->dir, "%.*s", (int)sizeof out->dir - 1, dir);
  return out->count;
}

tpu_status tpu_chip_list_presets(tpu_chip_presets *out, tpu_diag *d) {
  char dirs[10][512];
  int n = chip_dirs(dirs, 10);
  memset(out, 0, sizeof *out);
  for (int i = 0; i < n; i++)
    if (list_dir(dirs[i], out) > 0) return TPU_OK;
  memset(out, 0, sizeof *out);
  return TPU_FAIL(d, TPU_ERR_IO, tpu_noloc(),
                  "no chips folder found (set TPUSIM_CHIPS to the folder holding NAME.json files)");
}

static int is_preset_name(const char *s) {
  if (!*s || strlen(s) >= 32) return 0;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '_' || *p == '-' || *p == '.'))
      return 0;
  return 1;
}

/* The file a preset name was last found in, by the name, $TPUSIM_CHIPS and the working
 * folder (the search's inputs: chip_dirs): every run of a module resolves its chip, and the
 * search (readlink of /proc/self/exe, then a stat per folder) was most of a small program's
 * warm run through the library. The file found must still be there (else searched again). */
static struct {
  int valid;
  char name[64], env[512], cwd[512], path[600];
} g_where;
static pthread_mutex_t g_where_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t g_searches;

int64_t tpu_chip_searches(void) { return tpu_locked_read(&g_where_lock, &g_searches); }

static int where_get(const char *name, const char *env, const char *cwd, char *path, size_t n) {
  pthread_mutex_lock(&g_where_lock);
  int hit = g_where.valid && !strcmp(g_where.name, name) && !strcmp(g_where.env, env ? env : "") &&
            !strcmp(g_where.cwd, cwd) && strlen(g_where.path) < n;
  if (hit) snprintf(path, n, "%s", g_where.path);
  pthread_mutex_unlock(&g_where_lock);
  return hit && is_file(path);
}

static void where_put(const char *name, const char *env, const char *cwd, const char *path) {
  if (strlen(path) >= sizeof g_where.path || strlen(cwd) >= sizeof g_where.cwd) return;
  pthread_mutex_lock(&g_where_lock);
  g_where.valid = 1;
  snprintf(g_where.name, sizeof g_where.name, "%s", name);
  snprintf(g_where.env, sizeof g_where.env, "%s", env ? env : "");
  snprintf(g_where.cwd, sizeof g_where.cwd, "%s", cwd);
  snprintf(g_where.path, sizeof g_where.path, "%s", path);
  pthread_mutex_unlock(&g_where_lock);
}

static tpu_status resolve(const char *arg, char *path, size_t n, tpu_diag *d) {
  size_t len = strlen(arg);
  if (strchr(arg, '/') || (len >= 5 && !strcmp(arg + len - 5, ".json"))) {
    snprintf(path, n, "%s", arg);
    return TPU_OK;
  }
  if (!is_preset_name(arg))
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "bad chip name '%s'", arg);
  char cwd[512];
  const char *env = getenv("TPUSIM_CHIPS");
  int keyed = getcwd(cwd, sizeof cwd) != NULL && strlen(arg) < sizeof g_where.name &&
              (!env || strlen(env) < sizeof g_where.env);
  if (keyed && where_get(arg, env, cwd, path, n)) return TPU_OK;
  pthread_mutex_lock(&g_where_lock);
  g_searches++;
  pthread_mutex_unlock(&g_where_lock);
  char dirs[10][512];
  int nd = chip_dirs(dirs, 10);
  for (int i = 0; i < nd; i++) {
    snprintf(path, n, "%.400s/%.100s.json", dirs[i], arg);
    if (is_file(path)) {
      if (keyed) where_put(arg, env, cwd, path);
      return TPU_OK;
    }
  }
  tpu_chip_presets ps;
  if (tpu_chip_list_presets(&ps, NULL) != TPU_OK)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(),
                    "unknown chip '%s': no chips folder found (set TPUSIM_CHIPS)", arg);
  char list[400] = "";
  size_t k = 0;
  for (int i = 0; i < ps.count && k < sizeof list - 40; i++)
    k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "", ps.names[i]);
  return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "unknown chip '%s' (presets: %s)", arg, list);
}

/* ---------------------------------------------------------------- loading */

typedef struct {
  tpu_json_doc doc;
  tpu_chip *c;
  tpu_diag *d;
  const tpu_json *node[TPU_CHIP_NFIELDS]; /* each field's object, NULL if omitted */
  int ndims;
} loader;

static tpu_loc at(const loader *L, const tpu_json *v) { return tpu_json_loc(&L->doc, v, 0); }

#define BAD(L, v, ...) TPU_FAIL((L)->d, TPU_ERR_INVALID, at((L), (v)), __VA_ARGS__)

/* The chips' texts (tpu_chip_text): each distinct one kept once, for the life of the process.
 * Open addressing over g_texts (g_ntexts of g_cap slots, a power of two), under g_text_lock. */
static pthread_mutex_t g_text_lock = PTHREAD_MUTEX_INITIALIZER;
static char **g_texts;
static size_t g_ntexts, g_cap;

static size_t text_slot(char **t, size_t cap, const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  size_t i = (size_t)h & (cap - 1);
  while (t[i] && (strncmp(t[i], s, n) || t[i][n])) i = (i + 1) & (cap - 1);
  return i;
}

const char *tpu_chip_text(const char *s, size_t n) {
  if (!n) return "";
  const char *r = NULL;
  pthread_mutex_lock(&g_text_lock);
  if (2 * (g_ntexts + 1) > g_cap) {
    size_t cap = g_cap ? 2 * g_cap : 256;
    char **t = tpu_calloc(cap, sizeof *t);
    if (!t) goto out;
    for (size_t i = 0; i < g_cap; i++)
      if (g_texts[i]) t[text_slot(t, cap, g_texts[i], strlen(g_texts[i]))] = g_texts[i];
    tpu_free(g_texts);
    g_texts = t;
    g_cap = cap;
  }
  size_t i = text_slot(g_texts, g_cap, s, n);
  if (!g_texts[i]) {
    char *c = tpu_malloc(n + 1);
    if (!c) goto out;
    memcpy(c, s, n);
    c[n] = 0;
    g_texts[i] = c;
    g_ntexts++;
  }
  r = g_texts[i];
out:
  pthread_mutex_unlock(&g_text_lock);
  return r;
}

/* *dst = the string v (at most max bytes, no NUL inside), kept by tpu_chip_text. */
static tpu_status copy_text(loader *L, const tpu_json *v, const char *what, const char **dst, size_t max) {
  if (!v || v->kind != TPU_JSON_STRING)
    return BAD(L, v, "%s must be a string%s%s", what, v ? ", found " : "",
               v ? tpu_json_kind_name(v->kind) : "");
  if (v->len > max || strlen(v->str) != v->len)
    return BAD(L, v, "%s is longer than %zu bytes or holds a NUL", what, max);
  if (!(*dst = tpu_chip_text(v->str, v->len)))
    return TPU_FAIL(L->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory loading a chip");
  return TPU_OK;
}

static tpu_status copy_str(loader *L, const tpu_json *v, const char *what, char *dst, size_t n) {
  if (!v || v->kind != TPU_JSON_STRING)
    return BAD(L, v, "%s must be a string%s%s", what, v ? ", found " : "",
               v ? tpu_json_kind_name(v->kind) : "");
  if (v->len >= n || strlen(v->str) != v->len)
    return BAD(L, v, "%s is longer than %zu bytes or holds a NUL", what, n - 1);
  memcpy(dst, v->str, v->len + 1);
  return TPU_OK;
}

static int has_source(const tpu_chip *c, const char *key, size_t n) {
  for (int i = 0; i < c->nsources; i++)
    if (strlen(c->sources[i].key) == n && !strncmp(c->sources[i].key, key, n)) return 1;
  return 0;
}

/* "source": comma-separated keys of "sources", or "derived" (derived or uncertain values),
 * "assumption" (uncertain values) or "none" (unknown or absent ones). */
static tpu_status check_sources(loader *L, const char *field, const tpu_json *v,
                                const tpu_chip_prov *p) {
  const char *s = p->source;
  if (!*s) return BAD(L, v, "field '%s': 'source' is empty", field);
  while (*s) {
    while (*s == ' ' || *s == ',') s++;
    const char *e = s;
    while (*e && *e != ',') e++;
    size_t n = (size_t)(e - s);
    while (n && s[n - 1] == ' ') n--;
    int guess = p->status == TPU_PROV_DERIVED || p->status == TPU_PROV_UNCERTAIN;
    int ok = has_source(L->c, s, n) || (n == 7 && !strncmp(s, "derived", 7) && guess) ||
             (n == 10 && !strncmp(s, "assumption", 10) && p->status == TPU_PROV_UNCERTAIN) ||
             (n == 4 && !strncmp(s, "none", 4) &&
              (p->status == TPU_PROV_UNKNOWN || p->status == TPU_PROV_ABSENT));
    if (!ok && n)
      return BAD(L, v, "field '%s': source '%.*s' is not listed in \"sources\"", field, (int)n, s);
    s = e;
  }
  return TPU_OK;
}

static tpu_status parse_enum(loader *L, const char *field, const tpu_json *v,
                             const char *const *names, int count, int *out) {
  if (v->kind == TPU_JSON_STRING)
    for (int i = 0; i < count; i++)
      if (!strcmp(v->str, names[i])) {
        *out = i;
        return TPU_OK;
      }
  char list[120] = "";
  size_t k = 0;
  for (int i = 0; i < count; i++)
    k += (size_t)snprintf(list + k, sizeof list - k, "%s\"%s\"", i ? ", " : "", names[i]);
  return BAD(L, v, "field '%s': 'value' must be one of %s", field, list);
}

static tpu_status check_range(loader *L, int f, const tpu_json *v, double x) {
  double lo, hi;
  field_range(f, &lo, &hi);
  if (x >= lo && x <= hi) return TPU_OK;
  const char *u = k_fields[f].unit;
  char val[40];
  if (k_fields[f].kind == 'i') snprintf(val, sizeof val, "%lld", (long long)v->ival);
  else snprintf(val, sizeof val, "%.15g", x);
  return BAD(L, v, "field '%s': %s%s%s is outside the range this simulator takes, %g to %g%s%s (chips/README.md)",
             k_fields[f].key, val, *u ? " " : "", u, lo, hi, *u ? " " : "", u);
}

static tpu_status parse_value(loader *L, int f, const tpu_json *v) {
  const char *field = k_fields[f].key;
  char *p = (char *)L->c + k_fields[f].off;
  switch (k_fields[f].kind) {
    case 'f':
      if (v->kind != TPU_JSON_NUMBER || !(v->num > 0) || !isfinite(v->num))
        return BAD(L, v, "field '%s': 'value' must be a positive number (%s), found %s", field,
                   k_fields[f].unit[0] ? k_fields[f].unit : "no unit",
                   v->kind == TPU_JSON_NUMBER ? "a non-positive one" : tpu_json_kind_name(v->kind));
      TPU_TRY(check_range(L, f, v, v->num));
      *(double *)p = v->num;
      return TPU_OK;
    case 'i':
      if (v->kind != TPU_JSON_NUMBER || !v->is_int || v->ival <= 0)
        return BAD(L, v, "field '%s': 'value' must be a positive integer, found %s", field,
                   v->kind == TPU_JSON_NUMBER ? (v->is_int ? "a non-positive one" : "a fraction")
                                              : tpu_json_kind_name(v->kind));
      TPU_TRY(check_range(L, f, v, (double)v->ival));
      *(int64_t *)p = v->ival;
      return TPU_OK;
    case 't': {
      tpu_dtype dt;
      if (v->kind != TPU_JSON_STRING || !tpu_dtype_parse(v->str, v->len, &dt) ||
          !tpu_dtype_is_array(dt))
        return BAD(L, v, "field '%s': 'value' must be an element type such as \"bf16\"", field);
      *(tpu_dtype *)p = dt;
      return TPU_OK;
    }
    case 'o': {
      int k;
      TPU_TRY(parse_enum(L, field, v, k_topo, 3, &k));
      *(tpu_topology_kind *)p = (tpu_topology_kind)k;
      return TPU_OK;
    }
    case 'w': {
      int k;
      TPU_TRY(parse_enum(L, field, v, k_wrap, 3, &k));
      *(tpu_wrap_rule *)p = (tpu_wrap_rule)k;
      return TPU_OK;
    }
    case 'm': {
      if (v->kind != TPU_JSON_ARRAY || v->count < 1 || v->count > 3)
        return BAD(L, v, "field '%s': 'value' must be an array of 1 to 3 positive integers",
                   field);
      int64_t *m = (int64_t *)p;
      m[0] = m[1] = m[2] = 1;
      for (size_t i = 0; i < v->count; i++) {
        const tpu_json *e = v->items[i];
        if (e->kind != TPU_JSON_NUMBER || !e->is_int || e->ival <= 0 || e->ival > (1 << 20))
          return BAD(L, e, "field '%s': each dimension must be a positive integer", field);
        m[i] = e->ival;
      }
      L->ndims = (int)v->count;
      return TPU_OK;
    }
  }
  return TPU_OK;
}

static tpu_status load_field(loader *L, int f, const tpu_json *obj) {
  const char *field = k_fields[f].key;
  tpu_chip_prov *p = &L->c->prov[f];
  if (obj->kind != TPU_JSON_OBJECT)
    return BAD(L, obj,
               "field '%s' must be an object {\"value\": ..., \"source\": ..., \"status\": ...}, "
               "found %s",
               field, tpu_json_kind_name(obj->kind));
  for (size_t i = 0; i < obj->count; i++) {
    const char *k = obj->items[i]->key;
    if (strcmp(k, "value") && strcmp(k, "source") && strcmp(k, "status") && strcmp(k, "note") &&
        strcmp(k, "mismatch"))
      return TPU_FAIL(L->d, TPU_ERR_INVALID, tpu_json_loc(&L->doc, obj->items[i], 1),
                      "field '%s': unknown key \"%s\" (expected value, source, status, note, "
                      "mismatch)",
                      field, k);
  }
  const tpu_json *value = tpu_json_get(obj, "value"), *st = tpu_json_get(obj, "status");
  if (!value) return BAD(L, obj, "field '%s': missing \"value\"", field);
  if (!st) return BAD(L, obj, "field '%s': missing \"status\"", field);
  int status = 0;
  TPU_TRY(parse_enum(L, field, st, k_prov, 5, &status));
  p->status = (tpu_chip_prov_status)status;
  char what[80];
  snprintf(what, sizeof what, "field '%s': 'source'", field);
  if (!tpu_json_get(obj, "source")) return BAD(L, obj, "field '%s': missing \"source\"", field);
  TPU_TRY(copy_text(L, tpu_json_get(obj, "source"), what, &p->source, TPU_CHIP_SOURCE_MAX));
  if (tpu_json_get(obj, "note")) {
    snprintf(what, sizeof what, "field '%s': 'note'", field);
    TPU_TRY(copy_text(L, tpu_json_get(obj, "note"), what, &p->note, TPU_CHIP_NOTE_MAX));
  }
  const tpu_json *mm = tpu_json_get(obj, "mismatch");
  if (mm) {
    if (f != TPU_CHIP_PEAK_BF16_FLOPS && f != TPU_CHIP_PEAK_INT8_OPS)
      return BAD(L, mm, "field '%s': \"mismatch\" is only for peak_bf16_flops and peak_int8_ops",
                 field);
    snprintf(what, sizeof what, "field '%s': 'mismatch'", field);
    TPU_TRY(copy_text(L, mm, what, &p->mismatch, TPU_CHIP_NOTE_MAX));
  }
  int is_null = value->kind == TPU_JSON_NULL;
  int null_status = p->status == TPU_PROV_UNKNOWN || p->status == TPU_PROV_ABSENT;
  if (is_null && k_fields[f].req)
    return BAD(L, value, "field '%s' is required and cannot be null", field);
  if (is_null != null_status)
    return BAD(L, is_null ? value : st, "field '%s': status \"%s\" %s", field, k_prov[status],
               is_null ? "needs a value (use \"unknown\" or \"absent\" for null)"
                       : "needs \"value\": null");
  if ((p->status == TPU_PROV_DERIVED || p->status == TPU_PROV_UNCERTAIN) && !p->note[0])
    return BAD(L, obj, "field '%s': status \"%s\" needs a \"note\" saying %s", field,
               k_prov[status], p->status == TPU_PROV_DERIVED ? "how it was derived" : "why");
  TPU_TRY(check_sources(L, field, tpu_json_get(obj, "source"), p));
  if (!is_null) TPU_TRY(parse_value(L, f, value));
  return TPU_OK;
}

static const tpu_json *value_node(const loader *L, int f) {
  return L->node[f] ? tpu_json_get(L->node[f], "value") : L->doc.root;
}

/* Listed peak vs expected; fails naming `f` unless within tolerance or explained. */
static tpu_status check_peak(loader *L, int f, double expect, const char *how) {
  const tpu_chip *c = L->c;
  if (!tpu_chip_known(c, (tpu_chip_field)f)) return TPU_OK;
  double listed = tpu_chip_value(c, (tpu_chip_field)f);
  double rel = fabs(listed - expect) / expect;
  if (rel <= TPU_CHIP_PEAK_TOL || c->prov[f].mismatch[0]) return TPU_OK;
  return BAD(L, value_node(L, f),
             "field '%s': %.4g disagrees with %s = %.4g by %.1f%% (tolerance %.0f%%); fix the "
             "numbers or explain the difference in \"mismatch\"",
             k_fields[f].key, listed, how, expect, 100 * rel, 100 * TPU_CHIP_PEAK_TOL);
}

static tpu_status check_consistency(loader *L) {
  const tpu_chip *c = L->c;
  int bf16 = c->mac_input == TPU_BF16;
  if (!((bf16 && c->mac_accum == TPU_F32) || (c->mac_input == TPU_S8 && c->mac_accum == TPU_S32)))
    return BAD(L, value_node(L, TPU_CHIP_MAC_ACCUM),
               "field 'mac_accum': %s inputs with %s accumulation are not modelled (use bf16 "
               "with f32, or s8 with s32)",
               tpu_dtype_name(c->mac_input), tpu_dtype_name(c->mac_accum));
  char how[200];
  snprintf(how, sizeof how, "2 * %lld cores * %lld MXUs * %lldx%lld * %.4g Hz",
           (long long)c->tensorcores, (long long)c->mxus_per_core, (long long)c->mxu_rows,
           (long long)c->mxu_cols, c->clock_hz);
  double derived = tpu_chip_derived_peak(c);
  TPU_TRY(check_peak(L, bf16 ? TPU_CHIP_PEAK_BF16_FLOPS : TPU_CHIP_PEAK_INT8_OPS, derived, how));
  if (bf16 && tpu_chip_known(c, TPU_CHIP_INT8_RATE)) {
    char how8[240];
    snprintf(how8, sizeof how8, "%s * int8_rate %g", how, c->int8_rate);
    TPU_TRY(check_peak(L, TPU_CHIP_PEAK_INT8_OPS, derived * c->int8_rate, how8));
  }
  if (tpu_chip_known(c, TPU_CHIP_HBM_EFFICIENCY) && c->hbm_efficiency > 1)
    return BAD(L, value_node(L, TPU_CHIP_HBM_EFFICIENCY),
               "field 'hbm_efficiency': %g is not a fraction of the bandwidth (0 < x <= 1)",
               c->hbm_efficiency);
  int want_links = c->topology == TPU_TOPO_TORUS_2D ? 4 : c->topology == TPU_TOPO_TORUS_3D ? 6 : 0;
  if (c->topology == TPU_TOPO_NONE) {
    if (tpu_chip_known(c, TPU_CHIP_ICI_LINKS))
      return BAD(L, value_node(L, TPU_CHIP_ICI_LINKS),
                 "field 'ici_links': topology \"none\" has no ICI links (mark them \"absent\")");
    if (c->max_chips != 1)
      return BAD(L, value_node(L, TPU_CHIP_MAX_CHIPS),
                 "field 'max_chips': topology \"none\" allows one chip");
  } else if (tpu_chip_known(c, TPU_CHIP_ICI_LINKS) && c->ici_links != want_links) {
    return BAD(L, value_node(L, TPU_CHIP_ICI_LINKS),
               "field 'ici_links': a %s has %d links per chip, not %lld",
               k_topo[c->topology], want_links, (long long)c->ici_links);
  }
  if (tpu_chip_known(c, TPU_CHIP_MAX_DIMS)) {
    int want_dims = c->topology == TPU_TOPO_TORUS_3D ? 3 : c->topology == TPU_TOPO_TORUS_2D ? 2 : 1;
    if (L->ndims != want_dims)
      return BAD(L, value_node(L, TPU_CHIP_MAX_DIMS),
                 "field 'max_dims': a %s topology needs %d dimensions, found %d",
                 k_topo[c->topology], want_dims, L->ndims);
    double prod = tpu_chip_value(c, TPU_CHIP_MAX_DIMS);
    if (prod != (double)c->max_chips)
      return BAD(L, value_node(L, TPU_CHIP_MAX_DIMS),
                 "field 'max_dims': the dimensions multiply to %.0f chips but max_chips is %lld",
                 prod, (long long)c->max_chips);
  }
  if (tpu_chip_known(c, TPU_CHIP_POD_CHIPS) && c->pod_chips < c->max_chips)
    return BAD(L, value_node(L, TPU_CHIP_POD_CHIPS),
               "field 'pod_chips': a pod (%lld) cannot be smaller than the largest slice (%lld)",
               (long long)c->pod_chips, (long long)c->max_chips);
  if (tpu_chip_known(c, TPU_CHIP_WRAPAROUND)) {
    if (c->wraparound == TPU_WRAP_MULTIPLE && !tpu_chip_known(c, TPU_CHIP_WRAP_MULTIPLE))
      return BAD(L, value_node(L, TPU_CHIP_WRAPAROUND),
                 "field 'wraparound': \"multiple\" needs field 'wrap_multiple'");
    if (c->wraparound == TPU_WRAP_FULL_AXIS && !tpu_chip_known(c, TPU_CHIP_MAX_DIMS))
      return BAD(L, value_node(L, TPU_CHIP_WRAPAROUND),
                 "field 'wraparound': \"full-axis\" needs field 'max_dims'");
  }
  return TPU_OK;
}

static tpu_status load_sources(loader *L, const tpu_json *src) {
  if (!src) return BAD(L, L->doc.root, "missing \"sources\" (an object of key: citation)");
  if (src->kind != TPU_JSON_OBJECT || src->count == 0)
    return BAD(L, src, "\"sources\" must be a non-empty object of key: citation");
  if (src->count > TPU_CHIP_MAX_SOURCES)
    return BAD(L, src, "more than %d sources", TPU_CHIP_MAX_SOURCES);
  for (size_t i = 0; i < src->count; i++) {
    const tpu_json *s = src->items[i];
    tpu_chip *c = L->c;
    if (s->key_len == 0 || s->key_len > TPU_CHIP_KEY_MAX || strchr(s->key, ',') ||
        !strcmp(s->key, "derived") || !strcmp(s->key, "none"))
      return TPU_FAIL(L->d, TPU_ERR_INVALID, tpu_json_loc(&L->doc, s, 1),
                      "bad source key \"%s\" (1-23 bytes, no comma, not derived/none)", s->key);
    if (!(c->sources[c->nsources].key = tpu_chip_text(s->key, s->key_len)))
      return TPU_FAIL(L->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory loading a chip");
    TPU_TRY(copy_text(L, s, "a citation", &c->sources[c->nsources].cite, TPU_CHIP_CITE_MAX));
    c->nsources++;
  }
  return TPU_OK;
}

static tpu_status load_doc(loader *L) {
  const tpu_json *root = L->doc.root;
  tpu_chip *c = L->c;
  for (int f = 0; f < TPU_CHIP_NFIELDS; f++) c->prov[f].source = c->prov[f].note = c->prov[f].mismatch = "";
  if (root->kind != TPU_JSON_OBJECT)
    return BAD(L, root, "a chip file must be a JSON object, found %s",
               tpu_json_kind_name(root->kind));
  const tpu_json *schema = tpu_json_get(root, "schema");
  if (!schema || schema->kind != TPU_JSON_STRING || strcmp(schema->str, CHIP_SCHEMA))
    return BAD(L, schema ? schema : root, "\"schema\" must be \"%s\"", CHIP_SCHEMA);
  if (!tpu_json_get(root, "name")) return BAD(L, root, "missing \"name\"");
  TPU_TRY(copy_str(L, tpu_json_get(root, "name"), "\"name\"", c->name, sizeof c->name));
  if (tpu_json_get(root, "title"))
    TPU_TRY(copy_str(L, tpu_json_get(root, "title"), "\"title\"", c->title, sizeof c->title));
  else
    snprintf(c->title, sizeof c->title, "%s", c->name);
  TPU_TRY(load_sources(L, tpu_json_get(root, "sources")));
  int next = 0; /* the field after the last one found: files list them in the table's order */
  for (size_t i = 0; i < root->count; i++) {
    const tpu_json *m = root->items[i];
    if (!strcmp(m->key, "schema") || !strcmp(m->key, "name") || !strcmp(m->key, "title") ||
        !strcmp(m->key, "sources") || !strcmp(m->key, "comment"))
      continue;
    int f = -1; /* keys are the struct's member names, so distinct: one match, searched from next */
    for (int j = 0; j < TPU_CHIP_NFIELDS && f < 0; j++) {
      int k = (next + j) % TPU_CHIP_NFIELDS;
      if (!strcmp(m->key, k_fields[k].key)) f = k;
    }
    if (f >= 0) next = (f + 1) % TPU_CHIP_NFIELDS;
    if (f < 0)
      return TPU_FAIL(L->d, TPU_ERR_INVALID, tpu_json_loc(&L->doc, m, 1), "unknown field '%s'",
                      m->key);
    L->node[f] = m;
    TPU_TRY(load_field(L, f, m));
  }
  for (int f = 0; f < TPU_CHIP_NFIELDS; f++) {
    if (L->node[f]) continue;
    if (k_fields[f].req) return BAD(L, root, "missing field '%s'", k_fields[f].key);
    c->prov[f].status = TPU_PROV_UNKNOWN;
    c->prov[f].source = "none";
  }
  if (!tpu_chip_known(c, TPU_CHIP_MAX_DIMS)) c->max_dims[0] = c->max_dims[1] = c->max_dims[2] = 1;
  return check_consistency(L);
}

/* "NAME:core": one TensorCore of a megacore chip, the device the XLA TPU compiler targets
 * on v2, v3 and v4 without megacore (docs/fidelity.md). Per-chip throughputs and capacities
 * that the TensorCores share are divided among them; per-core numbers (MXUs, VMEM, clock)
 * stay. ICI and host links stay the chip's: a pod of such devices is not modelled apart. */
/* note kept by tpu_chip_text; without memory, the fallback (a literal) without its numbers. */
static const char *derived_note(const char *note, const char *fallback) {
  const char *t = tpu_chip_text(note, strlen(note));
  return t ? t : fallback;
}

static void derive_core(tpu_chip *c) {
  int64_t n = c->tensorcores > 0 ? c->tensorcores : 1;
  char note[400];
  snprintf(note, sizeof note, "one TensorCore of %lld: the chip's value / %lld (chip preset %s)",
           (long long)n, (long long)n, c->name);
  size_t len = strlen(c->name);
  snprintf(c->name + len, sizeof c->name - len, ":core");
  len = strlen(c->title);
  snprintf(c->title + len, sizeof c->title - len, ", one TensorCore");
  if (n == 1) return;
  static const tpu_chip_field split[] = {TPU_CHIP_HBM_BYTES, TPU_CHIP_HBM_BW, TPU_CHIP_PEAK_BF16_FLOPS,
                                         TPU_CHIP_PEAK_INT8_OPS, TPU_CHIP_PEAK_FP8_OPS, TPU_CHIP_CMEM_BYTES};
  c->tensorcores = 1;
  c->hbm_bytes /= n;
  c->cmem_bytes /= n;
  c->hbm_bw /= (double)n;
  c->peak_bf16_flops /= (double)n;
  c->peak_int8_ops /= (double)n;
  c->peak_fp8_ops /= (double)n;
  for (size_t i = 0; i < sizeof split / sizeof split[0]; i++) {
    if (!tpu_chip_known(c, split[i])) continue;
    c->prov[split[i]].status = TPU_PROV_DERIVED;
    c->prov[split[i]].note = derived_note(note, "one TensorCore: the chip's value / its TensorCores");
  }
  /* the windowed-einsum range is in chips; a program of these devices counts TensorCores */
  static const tpu_chip_field per_chip[] = {TPU_CHIP_WINDOWED_EINSUM_MIN_CHIPS, TPU_CHIP_WINDOWED_EINSUM_MAX_CHIPS};
  c->windowed_einsum_min_chips *= n;
  c->windowed_einsum_max_chips *= n;
  for (size_t i = 0; i < sizeof per_chip / sizeof per_chip[0]; i++) {
    if (!tpu_chip_known(c, per_chip[i])) continue;
    c->prov[per_chip[i]].status = TPU_PROV_DERIVED;
    char t[400];
    snprintf(t, sizeof t,
             "the chip's value x %lld: devices of one TensorCore each (the XLA TPU compiler's v4 "
             "2x2x2 is 16 such devices)",
             (long long)n);
    c->prov[per_chip[i]].note = derived_note(t, "the chip's value x its TensorCores");
  }
  c->prov[TPU_CHIP_TENSORCORES].status = TPU_PROV_DERIVED;
  char t[400];
  snprintf(t, sizeof t, "one TensorCore of %lld, as one compile-only XLA device without megacore", (long long)n);
  c->prov[TPU_CHIP_TENSORCORES].note = derived_note(t, "one TensorCore, as one compile-only XLA device");
}

/* Loads a parsed document into out (the path names it in messages and in out->path). */
static tpu_status load_json(tpu_status parsed, loader *L, const char *path, tpu_chip *out) {
  tpu_status s = parsed;
  if (s == TPU_OK) {
    s = load_doc(L);
    tpu_json_doc_free(&L->doc);
  }
  tpu_free(L);
  if (s != TPU_OK) {
    memset(out, 0, sizeof *out);
    return s;
  }
  snprintf(out->path, sizeof out->path, "%s", path);
  return TPU_OK;
}

tpu_status tpu_chip_load_text(const char *name, const char *text, size_t len, tpu_chip *out, tpu_diag *d) {
  memset(out, 0, sizeof *out);
  loader *L = tpu_calloc(1, sizeof *L);
  if (!L) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_loc_at(name, 0, 0), "out of memory loading a chip");
  L->c = out;
  L->d = d;
  return load_json(tpu_json_parse(text, len, name, &L->doc, d), L, name, out);
}

/* The last chip file loaded, kept so that loading the same file again (every run of a
 * module loads its chip) costs a read and a comparison instead of a parse: a load whose
 * path and bytes equal the memo's copies its chip. Files past MEMO_BYTES are not kept.
 *
 * Once its bytes have been seen, a file whose status (device, inode, size, modification and
 * change times) has not changed since is not read again: one stat() instead of an open, two
 * reads and a 16 KB comparison (a quarter of a warm Module.run of a small program). As git
 * treats a "racily clean" index entry, the status is only trusted when the file's last
 * change is at least SETTLED_S seconds older than the moment it was taken: a write after it
 * then gives a change time (the kernel's coarse clock, a few ms) past the one kept, while a
 * file written within the last seconds (a test rewriting it with the same size) is read
 * and compared every time, as before. */
enum { MEMO_BYTES = 65536, SETTLED_S = 2 };
static pthread_mutex_t g_memo_lock = PTHREAD_MUTEX_INITIALIZER;
typedef struct {
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime, ctime;
} file_status;
static struct {
  int valid;
  uint64_t gen; /* counts the memo's fillings: names its content (tpu_chip_load_again) */
  char path[600];
  size_t n;
  char bytes[MEMO_BYTES];
  int settled;    /* st was taken before bytes were read and the file had settled then */
  file_status st; /* the file's status when settled */
  tpu_chip chip;
} g_memo;

/* The status of path (0 when it cannot be had) and whether it had settled: its last change
 * SETTLED_S seconds or more before now. */
static int status_of(const char *path, file_status *fs, int *settled) {
  struct timespec now;
  struct stat sb;
  *settled = 0;
  if (clock_gettime(CLOCK_REALTIME, &now) != 0 || stat(path, &sb) != 0) return 0;
  memset(fs, 0, sizeof *fs);
  fs->dev = sb.st_dev;
  fs->ino = sb.st_ino;
  fs->size = sb.st_size;
  fs->mtime = sb.st_mtim;
  fs->ctime = sb.st_ctim;
  time_t last = sb.st_ctim.tv_sec > sb.st_mtim.tv_sec ? sb.st_ctim.tv_sec : sb.st_mtim.tv_sec;
  *settled = last + SETTLED_S < now.tv_sec;
  return 1;
}

static int same_status(const file_status *a, const file_status *b) {
  return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
         a->mtime.tv_nsec == b->mtime.tv_nsec && a->ctime.tv_sec == b->ctime.tv_sec &&
         a->ctime.tv_nsec == b->ctime.tv_nsec;
}
static int g_memo_off; /* tpu_chip_memo_off */

void tpu_chip_memo_off(void) { g_memo_off = 1; }

static uint64_t g_reads; /* tpu_chip_memo_reads */

uint64_t tpu_chip_memo_reads(void) { return __atomic_load_n(&g_reads, __ATOMIC_RELAXED); }

/* Reads up to cap bytes of path into buf: 1 with *n set when the whole file fit, 0 when it
 * is larger or cannot be read (the caller then parses it the usual way, which reports why). */
static int read_small(const char *path, char *buf, size_t cap, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  size_t got = fread(buf, 1, cap, f);
  int whole = got < cap && !ferror(f) && feof(f);
  fclose(f);
  *n = got;
  return whole;
}

static tpu_status load_memo(const char *path_or_name, uint64_t *gen, int *same, tpu_chip *out, tpu_diag *d);

int tpu_chip_read_file(const char *path_or_name, char *path, size_t npath, char *buf, size_t cap, size_t *n) {
  char base[600];
  size_t alen = strlen(path_or_name);
  if (alen > 5 && !strcmp(path_or_name + alen - 5, ":core")) {
    snprintf(base, sizeof base, "%.*s", (int)(alen - 5), path_or_name);
    path_or_name = base;
  }
  tpu_diag d;
  memset(&d, 0, sizeof d);
  return resolve(path_or_name, path, npath, &d) == TPU_OK && read_small(path, buf, cap, n);
}

/* The image's texts in field order: each prov's source, note and mismatch, then each
 * source's key and cite. */
#define IMAGE_NTEXTS(c) (3 * TPU_CHIP_NFIELDS + 2 * (c)->nsources)

static const char **image_text(tpu_chip *c, int k) {
  if (k < 3 * TPU_CHIP_NFIELDS) {
    tpu_chip_prov *p = &c->prov[k / 3];
    return k % 3 == 0 ? &p->source : k % 3 == 1 ? &p->note : &p->mismatch;
  }
  k -= 3 * TPU_CHIP_NFIELDS;
  return k % 2 == 0 ? &c->sources[k / 2].key : &c->sources[k / 2].cite;
}

/* A text's length in the image: NULL is UINT32_MAX. */
enum { IMAGE_NULL = 0xffffffffu };

void *tpu_chip_image(const tpu_chip *c, size_t *n) {
  tpu_chip plain;
  memcpy(&plain, c, sizeof plain); /* its padding too: the timing key hashes the struct's bytes */
  size_t len = sizeof plain;
  int nt = IMAGE_NTEXTS(c);
  if (c->nsources < 0 || c->nsources > TPU_CHIP_MAX_SOURCES) return NULL;
  for (int k = 0; k < nt; k++) {
    const char *t = *image_text(&plain, k);
    len += sizeof(uint32_t) + (t ? strlen(t) : 0);
  }
  unsigned char *buf = tpu_malloc(len), *w = buf + sizeof plain;
  if (!buf) return NULL;
  for (int k = 0; k < nt; k++) {
    const char **t = image_text(&plain, k);
    uint32_t tl = *t ? (uint32_t)strlen(*t) : IMAGE_NULL;
    memcpy(w, &tl, sizeof tl);
    w += sizeof tl;
    if (*t) memcpy(w, *t, tl);
    if (*t) w += tl;
    *t = NULL; /* the struct's bytes carry no addresses */
  }
  for (int i = plain.nsources; i < TPU_CHIP_MAX_SOURCES; i++) plain.sources[i].key = plain.sources[i].cite = NULL;
  memcpy(buf, &plain, sizeof plain);
  *n = len;
  return buf;
}

int tpu_chip_from_image(const void *p, size_t n, tpu_chip *out) {
  const unsigned char *r = p, *end = r + n;
  if (n < sizeof *out) return 0;
  memcpy(out, r, sizeof *out);
  r += sizeof *out;
  if (out->nsources < 0 || out->nsources > TPU_CHIP_MAX_SOURCES) return 0;
  for (int i = out->nsources; i < TPU_CHIP_MAX_SOURCES; i++) out->sources[i].key = out->sources[i].cite = NULL;
  int nt = IMAGE_NTEXTS(out);
  for (int k = 0; k < nt; k++) {
    uint32_t tl;
    if ((size_t)(end - r) < sizeof tl) return 0;
    memcpy(&tl, r, sizeof tl);
    r += sizeof tl;
    const char **t = image_text(out, k);
    if (tl == IMAGE_NULL) {
      *t = NULL;
      continue;
    }
    if ((size_t)(end - r) < tl || memchr(r, 0, tl)) return 0;
    if (!(*t = tpu_chip_text((const char *)r, tl))) return 0;
    r += tl;
  }
  return r == end;
}

tpu_status tpu_chip_load(const char *path_or_name, tpu_chip *out, tpu_diag *d) {
  memset(out, 0, sizeof *out);
  return load_memo(path_or_name, NULL, NULL, out, d);
}

tpu_status tpu_chip_load_again(const char *path_or_name, uint64_t *gen, int *same, tpu_chip *out, tpu_diag *d) {
  *same = 0;
  return load_memo(path_or_name, gen, same, out, d);
}

/* With g_memo_lock held, which it releases: when the memo holds the caller's file (hit),
 * answers from it (*same = 1 when the caller's chip is the memo's filling *gen, else the memo's
 * chip copied out) and returns 1; returns 0 when the caller must read and parse the file. */
static int memo_answer(int hit, uint64_t *gen, int *same, tpu_chip *out, int core) {
  if (hit && gen && *gen == g_memo.gen) {
    pthread_mutex_unlock(&g_memo_lock);
    *same = 1; /* the caller's chip is this one */
    return 1;
  }
  if (hit) *out = g_memo.chip;
  if (hit && gen) *gen = g_memo.gen;
  pthread_mutex_unlock(&g_memo_lock);
  if (hit && core) derive_core(out);
  return hit;
}

/* tpu_chip_load, and with gen: *same = 1 (out untouched) when the file's bytes are those of
 * the memo's filling *gen, else the load's filling in *gen (0: the memo does not hold it). */
static tpu_status load_memo(const char *path_or_name, uint64_t *gen, int *same, tpu_chip *out, tpu_diag *d) {
  char path[600], base[600];
  size_t alen = strlen(path_or_name);
  int core = alen > 5 && !strcmp(path_or_name + alen - 5, ":core");
  if (core) {
    snprintf(base, sizeof base, "%.*s", (int)(alen - 5), path_or_name);
    path_or_name = base;
  }
  TPU_TRY(resolve(path_or_name, path, sizeof path, d));
  static _Thread_local char bytes[MEMO_BYTES];
  file_status fs;
  int settled = 0;
  int have_status = status_of(path, &fs, &settled);
  if (have_status && settled) { /* unchanged since the memo's bytes were read: no read */
    pthread_mutex_lock(&g_memo_lock);
    int hit = g_memo.valid && g_memo.settled && same_status(&g_memo.st, &fs) && !strcmp(g_memo.path, path);
    if (memo_answer(hit, gen, same, out, core)) return TPU_OK;
  }
  size_t n = 0;
  __atomic_add_fetch(&g_reads, 1, __ATOMIC_RELAXED);
  int small = read_small(path, bytes, sizeof bytes, &n);
  if (small) {
    pthread_mutex_lock(&g_memo_lock);
    int hit = g_memo.valid && g_memo.n == n && !strcmp(g_memo.path, path) && !memcmp(g_memo.bytes, bytes, n);
    if (hit) { /* the bytes the memo holds: its status from now on is this one (taken before the read) */
      g_memo.settled = have_status && settled;
      if (g_memo.settled) g_memo.st = fs;
    }
    if (memo_answer(hit, gen, same, out, core)) return TPU_OK;
  }
  if (gen) *gen = 0;
  memset(out, 0, sizeof *out);
  loader *L = tpu_calloc(1, sizeof *L);
  if (!L) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory loading a chip");
  L->c = out;
  L->d = d;
  if (small)
    TPU_TRY(load_json(tpu_json_parse(bytes, n, path, &L->doc, d), L, path, out));
  else
    TPU_TRY(load_json(tpu_json_parse_file(path, &L->doc, d), L, path, out));
  if (small && !g_memo_off && strlen(path) < sizeof g_memo.path) {
    pthread_mutex_lock(&g_memo_lock);
    g_memo.valid = 1;
    g_memo.gen++;
    if (gen) *gen = g_memo.gen;
    snprintf(g_memo.path, sizeof g_memo.path, "%s", path);
    g_memo.n = n;
    memcpy(g_memo.bytes, bytes, n);
    g_memo.settled = have_status && settled;
    if (g_memo.settled) g_memo.st = fs;
    g_memo.chip = *out;
    pthread_mutex_unlock(&g_memo_lock);
  }
  if (core) derive_core(out);
  return TPU_OK;
}
