/* Collective groups read from their attributes: which devices a collective joins under
 * XLA's group modes, so executors can exchange with exactly those devices (or, on one chip,
 * tell an identity from communication it cannot model). */
#include "ir/collective.h"

#include <ctype.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/par.h"

static const char *attr_text(const tpu_attr *a, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(a[i].name, name)) return a[i].value;
  return NULL;
}

/* The devices of the first mesh in JAX's header annotation
 * frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["x"=2, "y"=4]>}} (0: none). */
static long long sdy_mesh_devices(const tpu_module *m) {
  const char *fa = attr_text(m->attrs, m->nattrs, "frontend_attributes");
  const char *p = fa ? strstr(fa, "#sdy.mesh<[") : NULL;
  if (!p) return 0;
  long long n = 1;
  for (p += 11; *p && *p != ']'; p++)
    if (*p == '=') {
      long long v = strtoll(p + 1, NULL, 10);
      if (v < 1 || v > (1 << 20) || n > (1 << 20) / v) return 0;
      n *= v;
    }
  return n;
}

/* The most devices a GSPMD sharding in the module names, as in sharding={devices=[2,4]<=[8]}
 * (tile counts multiplied; 0: none). JAX's GSPMD-form programs carry no device count of
 * their own in the header: the compile options give it, and the shardings imply it. */
static long long hlo_sharding_devices(const tpu_module *m) {
  long long best = 0;
  for (int c = 0; c < m->ncomps; c++)
    for (int i = 0; i < m->comps[c]->ninstrs; i++) {
      const tpu_instr *in = m->comps[c]->instrs[i];
      const char *v = attr_text(in->attrs, in->nattrs, "sharding");
      for (const char *p = v; p && (p = strstr(p, "devices=[")) != NULL;) {
        long long n = 1;
        for (p += 9; *p && *p != ']'; p++) {
          if (!isdigit((unsigned char)*p)) continue;
          char *e;
          long long t = strtoll(p, &e, 10);
          if (t < 1 || t > (1 << 20) || n > (1 << 20) / t) return 0;
          n *= t;
          p = e - 1;
        }
        if (n > best) best = n;
      }
    }
  return best;
}

void tpu_module_device_grid(const tpu_module *m, int64_t *replicas, int64_t *partitions) {
  const char *r = attr_text(m->attrs, m->nattrs, "replica_count");
  const char *p = attr_text(m->attrs, m->nattrs, "num_partitions");
  long long rv = r ? strtoll(r, NULL, 10) : 1, pv = p ? strtoll(p, NULL, 10) : 1;
  /* JAX's lowered (not yet partitioned) programs name their devices by the mesh only. */
  if (!r && !p) pv = sdy_mesh_devices(m);
  if (!r && !p && pv < 1) pv = hlo_sharding_devices(m);
  *replicas = rv > 1 ? rv : 1;
  *partitions = pv > 1 ? pv : 1;
}

int64_t tpu_module_device_count(const tpu_module *m) {
  int64_t r, p;
  tpu_module_device_grid(m, &r, &p);
  return r * p;
}

tpu_coll_mode tpu_collective_mode(const tpu_instr *in) {
  int channel = attr_text(in->attrs, in->nattrs, "channel_id") != NULL;
  const char *g = attr_text(in->attrs, in->nattrs, "use_global_device_ids");
  if (!channel) return TPU_CG_CROSS_REPLICA;
  if (!g) return TPU_CG_CROSS_PARTITION;
  return !strcmp(g, "true") ? TPU_CG_FLATTENED : TPU_CG_CROSS_REPLICA_AND_PARTITION;
}

static const char *skip(const char *p) {
  while (*p == ' ' || *p == '\n' || *p == '\t') p++;
  return p;
}

/* Appends v to g (growing ids); returns 0 on allocation failure. */
static int push_id(tpu_groups *g, int64_t *cap, int64_t n, int64_t v) {
  if (n == *cap) {
    int64_t nc = *cap ? *cap * 2 : 16;
    int64_t *ni = tpu_realloc(g->ids, sizeof *ni * (size_t)nc);
    if (!ni) return 0;
    g->ids = ni;
    *cap = nc;
  }
  g->ids[n] = v;
  return 1;
}

static int push_start(tpu_groups *g, int64_t *cap, int64_t v) {
  if (g->ngroups + 1 >= *cap) {
    int64_t nc = *cap ? *cap * 2 : 16;
    int64_t *ns = tpu_realloc(g->start, sizeof *ns * (size_t)nc);
    if (!ns) return 0;
    g->start = ns;
    *cap = nc;
  }
  g->start[g->ngroups + 1] = v;
  return 1;
}

/* "{{0,1},{2,3}}" -> 1, 0 malformed, -1 out of memory. */
static int read_explicit(const char *p, tpu_groups *g) {
  int64_t idcap = 0, stcap = 0, n = 0;
  if (!push_start(g, &stcap, 0)) return -1;
  g->start[0] = 0;
  p = skip(p);
  if (*p++ != '{') return 0;
  for (;;) {
    p = skip(p);
    if (*p == '}') return *skip(p + 1) == 0;
    if (*p == ',') {
      p++;
      continue;
    }
    if (*p++ != '{') return 0;
    for (;;) {
      p = skip(p);
      if (*p == '}') {
        p++;
        break;
      }
      if (*p == ',') {
        p++;
        continue;
      }
      if (!isdigit((unsigned char)*p)) return 0;
      int64_t v = 0; /* decimal digits (as strtoll, saturating) */
      for (; isdigit((unsigned char)*p); p++) v = v > (INT64_MAX - 9) / 10 ? INT64_MAX : v * 10 + (*p - '0');
      if (!push_id(g, &idcap, n++, v)) return -1;
    }
    if (!push_start(g, &stcap, n)) return -1;
    g->ngroups++;
  }
}

/* Reads "[a,b,...]" at *p into v (at most max); returns the count, 0 if malformed. */
static int read_dims(const char **p, int64_t *v, int max) {
  const char *q = skip(*p);
  if (*q++ != '[') return 0;
  int n = 0;
  for (;;) {
    q = skip(q);
    if (*q == ']') break;
    if (*q == ',') {
      q++;
      continue;
    }
    if (!isdigit((unsigned char)*q) || n == max) return 0;
    char *end;
    v[n++] = strtoll(q, &end, 10);
    q = end;
  }
  *p = q + 1;
  return n;
}

int tpu_iota_read(const char **pp, int64_t **ids, int64_t *count) {
  const char *p = skip(*pp);
  int64_t rd[TPU_MAX_RANK], perm[TPU_MAX_RANK];
  *ids = NULL;
  *count = 0;
  if (p[0] != '<' || p[1] != '=') return 0;
  p += 2;
  int nr = read_dims(&p, rd, TPU_MAX_RANK);
  if (nr < 1) return 0;
  p = skip(p);
  int np = nr;
  for (int i = 0; i < nr; i++) perm[i] = i;
  if (*p == 'T') {
    const char *q = skip(p + 1);
    if (*q++ != '(') return 0;
    np = 0;
    for (;;) {
      q = skip(q);
      if (*q == ')') break;
      if (*q == ',') {
        q++;
        continue;
      }
      if (!isdigit((unsigned char)*q) || np == TPU_MAX_RANK) return 0;
      char *end;
      perm[np++] = strtoll(q, &end, 10);
      q = end;
    }
    p = q + 1;
  }
  if (np != nr) return 0;
  int64_t total = 1;
  for (int i = 0; i < nr; i++) {
    if (rd[i] < 1 || perm[i] < 0 || perm[i] >= nr) return 0;
    total *= rd[i];
    if (total > ((int64_t)1 << 24)) return 0;
    for (int j = 0; j < i; j++)
      if (perm[j] == perm[i]) return 0;
  }
  int64_t *v = tpu_malloc(sizeof *v * (size_t)total);
  if (!v) return -1;
  int64_t td[TPU_MAX_RANK], c[TPU_MAX_RANK] = {0}, str[TPU_MAX_RANK];
  int64_t s = 1;
  for (int i = nr - 1; i >= 0; i--) str[i] = s, s *= rd[i];
  for (int i = 0; i < nr; i++) td[i] = rd[perm[i]];
  /* A run along the last transposed dim at a time; an odometer over the others keeps
   * x = sum c[i] * str[perm[i]], the run's first id. */
  const int64_t run = td[nr - 1], step = str[perm[nr - 1]];
  int64_t x = 0;
  for (int64_t f = 0; f < total; f += run) {
    for (int64_t j = 0; j < run; j++) v[f + j] = x + j * step;
    for (int i = nr - 2; i >= 0; i--) {
      x += str[perm[i]];
      if (++c[i] < td[i]) break;
      x -= td[i] * str[perm[i]];
      c[i] = 0;
    }
  }
  *ids = v;
  *count = total;
  *pp = p;
  return 1;
}

/* Iota form "[G,S]<=[d0,d1]T(1,0)": iota over the reshape dims, transposed, cut into G
 * groups of S. Returns 1, 0 malformed, -1 out of memory. */
static int read_iota(const char *p, tpu_groups *g) {
  int64_t gs[2], total;
  if (read_dims(&p, gs, 2) != 2) return 0;
  int r = tpu_iota_read(&p, &g->ids, &total);
  if (r != 1) return r;
  if (*skip(p) || gs[0] < 1 || gs[1] < 1 || gs[0] * gs[1] != total) return 0;
  g->start = tpu_malloc(sizeof *g->start * (size_t)(gs[0] + 1));
  if (!g->start) return -1;
  g->ngroups = gs[0];
  for (int64_t k = 0; k <= gs[0]; k++) g->start[k] = k * gs[1];
  return 1;
}

/* Reads a quoted or bare axis name at *p into buf; returns 0 if none. */
static int read_axis_name(const char **pp, char *buf, size_t n) {
  const char *p = skip(*pp);
  int quoted = *p == '\'';
  if (quoted) p++;
  size_t k = 0;
  while (*p && (quoted ? *p != '\'' : (isalnum((unsigned char)*p) || *p == '_'))) {
    if (k + 1 < n) buf[k++] = *p;
    p++;
  }
  buf[k] = 0;
  if (quoted) {
    if (*p != '\'') return 0;
    p++;
  }
  *pp = p;
  return k > 0;
}

#define MESH_MAX_AXES 16

/* Mesh-axes form "mesh['x'=2,'y'=4] {'x'}" (optionally ", device_ids=(...)" after the mesh,
 * and sub-axes 'x':(pre)size in the list): the devices of the mesh (iota unless listed),
 * reshaped to the axes (sub-axes split an axis major-first), with the listed axes moved
 * last in the order listed; each run of their combined size is a group. Returns 1, 0
 * malformed, -1 out of memory. */
static int read_mesh(const char *p, tpu_groups *g) {
  char names[MESH_MAX_AXES][64], nm[64];
  int64_t size[MESH_MAX_AXES];
  int na = 0;
  p = skip(p + 4);
  if (*p++ != '[') return 0;
  for (;;) {
    p = skip(p);
    if (*p == ']') {
      p++;
      break;
    }
    if (*p == ',') {
      p++;
      continue;
    }
    if (na == MESH_MAX_AXES || !read_axis_name(&p, names[na], sizeof names[na])) return 0;
    p = skip(p);
    if (*p++ != '=' || !isdigit((unsigned char)*skip(p))) return 0;
    char *end;
    size[na] = strtoll(skip(p), &end, 10);
    if (size[na] < 1) return 0;
    p = end;
    na++;
  }
  if (na == 0) return 0;
  int64_t total = 1;
  for (int i = 0; i < na; i++) {
    if (total > ((int64_t)1 << 24) / size[i]) return 0;
    total *= size[i];
  }
  int64_t *dev = NULL;
  p = skip(p);
  if (*p == ',') { /* device_ids=(...) */
    p = skip(p + 1);
    if (strncmp(p, "device_ids=", 11)) return 0;
    p = skip(p + 11);
    int paren = *p == '(';
    if (paren) p = skip(p + 1);
    int64_t cnt = 0;
    if (*p == '[') { /* an iota list "[dims]<=[...]T(...)", or "[dims]T(...)" over those dims */
      const char *q = p;
      int64_t dims[TPU_MAX_RANK];
      int nd = read_dims(&p, dims, TPU_MAX_RANK);
      if (nd < 1) return 0;
      p = skip(p);
      if (*p == 'T') { /* read it as "<=[dims]T(...)" */
        char buf[256];
        int len = snprintf(buf, sizeof buf, "<=%.*s", (int)(p - q), q);
        const char *t = p;
        while (*p && *p != ')') p++;
        if (*p != ')' || len < 0 || len + (p - t) + 2 >= (int)sizeof buf) return 0;
        snprintf(buf + len, sizeof buf - (size_t)len, "%.*s", (int)(p + 1 - t), t);
        p++;
        const char *b = buf;
        int r = tpu_iota_read(&b, &dev, &cnt);
        if (r != 1) return r;
      } else {
        int r = tpu_iota_read(&p, &dev, &cnt);
        if (r != 1) return r;
      }
    } else {
      dev = tpu_malloc(sizeof *dev * (size_t)total);
      if (!dev) return -1;
      for (;;) {
        p = skip(p);
        if (*p == '{' || *p == '}' || *p == ',') {
          p++;
          continue;
        }
        if (!isdigit((unsigned char)*p) || cnt == total) break;
        char *end;
        dev[cnt++] = strtoll(p, &end, 10);
        p = end;
      }
    }
    p = skip(p);
    if (paren && *p++ != ')') cnt = -1;
    if (cnt != total) {
      tpu_free(dev);
      return 0;
    }
  }
  /* The listed axes: mesh axis, sub-axis pre-size and size (pre 0: the whole axis). */
  int64_t ax[MESH_MAX_AXES * 2], pre[MESH_MAX_AXES * 2], sz[MESH_MAX_AXES * 2];
  int nref = 0, ok = 1;
  p = skip(p);
  if (*p++ != '{') ok = 0;
  while (ok) {
    p = skip(p);
    if (*p == '}') {
      p++;
      break;
    }
    if (*p == ',') {
      p++;
      continue;
    }
    if (nref == MESH_MAX_AXES * 2 || !read_axis_name(&p, nm, sizeof nm)) {
      ok = 0;
      break;
    }
    int a = -1;
    for (int i = 0; i < na; i++)
      if (!strcmp(names[i], nm)) a = i;
    if (a < 0) {
      ok = 0;
      break;
    }
    ax[nref] = a;
    pre[nref] = 0;
    sz[nref] = size[a];
    p = skip(p);
    if (*p == ':') { /* :(pre)size */
      p = skip(p + 1);
      char *end;
      if (*p++ != '(') {
        ok = 0;
        break;
      }
      pre[nref] = strtoll(skip(p), &end, 10);
      p = skip(end);
      if (*p++ != ')') {
        ok = 0;
        break;
      }
      sz[nref] = strtoll(skip(p), &end, 10);
      p = end;
      if (pre[nref] < 1 || sz[nref] < 2 || size[a] % (pre[nref] * sz[nref])) {
        ok = 0;
        break;
      }
    }
    nref++;
  }
  if (!ok || *skip(p)) {
    tpu_free(dev);
    return 0;
  }
  /* Split each axis into its parts, major first: [pre, size, rest] around each sub-axis. */
  int64_t rd[TPU_MAX_RANK * 2], refdim[MESH_MAX_AXES * 2];
  int nr = 0;
  for (int a = 0; a < na && ok; a++) {
    int refs[MESH_MAX_AXES * 2], nrf = 0;
    for (int k = 0; k < nref; k++)
      if (ax[k] == a) refs[nrf++] = k;
    if (nrf == 1 && pre[refs[0]] == 0) {
      refdim[refs[0]] = nr;
      rd[nr++] = size[a];
      continue;
    }
    if (nrf == 0) {
      rd[nr++] = size[a];
      continue;
    }
    for (int i = 1; i < nrf; i++) /* sort this axis's refs by pre-size */
      for (int j = i; j > 0 && pre[refs[j]] < pre[refs[j - 1]]; j--) {
        int t = refs[j];
        refs[j] = refs[j - 1];
        refs[j - 1] = t;
      }
    int64_t prod = 1;
    for (int i = 0; i < nrf && ok; i++) {
      int k = refs[i];
      if (pre[k] == 0 || pre[k] % prod) {
        ok = 0;
        break;
      }
      if (pre[k] != prod) rd[nr++] = pre[k] / prod;
      prod = pre[k];
      refdim[k] = nr;
      rd[nr++] = sz[k];
      prod *= sz[k];
    }
    if (ok && prod != size[a]) {
      if (size[a] % prod) ok = 0;
      else rd[nr++] = size[a] / prod;
    }
  }
  if (!ok || nr > TPU_MAX_RANK * 2) {
    tpu_free(dev);
    return 0;
  }
  /* Transpose: the other parts in order, then the listed ones in the order listed. */
  int perm[TPU_MAX_RANK * 2], np = 0;
  unsigned char listed[TPU_MAX_RANK * 2] = {0};
  int64_t gsize = 1;
  for (int k = 0; k < nref; k++) {
    if (listed[refdim[k]]++) ok = 0;
    gsize *= rd[refdim[k]];
  }
  for (int i = 0; i < nr; i++)
    if (!listed[i]) perm[np++] = i;
  for (int k = 0; k < nref; k++) perm[np++] = (int)refdim[k];
  g->ids = tpu_malloc(sizeof *g->ids * (size_t)total);
  g->start = tpu_malloc(sizeof *g->start * (size_t)(total / gsize + 1));
  if (!ok || !g->ids || !g->start) {
    tpu_free(dev);
    return ok ? -1 : 0;
  }
  int64_t str[TPU_MAX_RANK * 2], c[TPU_MAX_RANK * 2] = {0}, s = 1;
  for (int i = nr - 1; i >= 0; i--) str[i] = s, s *= rd[i];
  for (int64_t f = 0; f < total; f++) {
    int64_t x = 0;
    for (int i = 0; i < nr; i++) x += c[i] * str[perm[i]];
    g->ids[f] = dev ? dev[x] : x;
    for (int i = nr - 1; i >= 0; i--) {
      if (++c[i] < rd[perm[i]]) break;
      c[i] = 0;
    }
  }
  tpu_free(dev);
  g->ngroups = total / gsize;
  for (int64_t k = 0; k <= g->ngroups; k++) g->start[k] = k * gsize;
  return 1;
}

void tpu_groups_free(tpu_groups *g) {
  tpu_free(g->ids);
  tpu_free(g->start);
  memset(g, 0, sizeof *g);
}

/* Groups read from a long text, kept by the text: a collective's groups are asked for by the
 * verifier, the SPMD passes, the back end and the pod timing, each reading the attribute
 * again (a 4,096-chip program's explicit pairs are tens of kB of digits). */
#define GCACHE 8
#define GCACHE_MIN 512 /* shorter texts are read each time */
static struct {
  size_t len;
  char *text;
  tpu_groups g;
} gcache[GCACHE];
static int gcache_next;
static pthread_mutex_t gcache_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t gcache_parsed;

int64_t tpu_groups_texts_parsed(void) { return tpu_locked_read(&gcache_lock, &gcache_parsed); }

static int groups_copy(const tpu_groups *from, tpu_groups *to) {
  int64_t n = from->start[from->ngroups];
  to->ngroups = from->ngroups;
  to->start = tpu_malloc(sizeof *to->start * (size_t)(from->ngroups + 1));
  to->ids = tpu_malloc(sizeof *to->ids * (size_t)(n > 0 ? n : 1));
  if (!to->start || !to->ids) {
    tpu_groups_free(to);
    return 0;
  }
  memcpy(to->start, from->start, sizeof *to->start * (size_t)(from->ngroups + 1));
  memcpy(to->ids, from->ids, sizeof *to->ids * (size_t)n);
  return 1;
}

/* 1: g holds a copy of what text v read to before. */
static int gcache_get(const char *v, size_t len, tpu_groups *g) {
  int hit = 0;
  pthread_mutex_lock(&gcache_lock);
  for (int i = 0; i < GCACHE && !hit; i++)
    if (gcache[i].text && gcache[i].len == len && !memcmp(gcache[i].text, v, len)) hit = groups_copy(&gcache[i].g, g);
  pthread_mutex_unlock(&gcache_lock);
  return hit;
}

static void gcache_put(const char *v, size_t len, const tpu_groups *g) {
  if (!g->start) return;
  char *t = tpu_malloc(len + 1);
  tpu_groups c;
  memset(&c, 0, sizeof c);
  if (!t || !groups_copy(g, &c)) {
    tpu_free(t);
    return;
  }
  memcpy(t, v, len + 1);
  pthread_mutex_lock(&gcache_lock);
  gcache_parsed++;
  int i = gcache_next;
  gcache_next = (gcache_next + 1) % GCACHE;
  tpu_free(gcache[i].text);
  tpu_groups_free(&gcache[i].g);
  gcache[i].text = t;
  gcache[i].len = len;
  gcache[i].g = c;
  pthread_mutex_unlock(&gcache_lock);
}

tpu_status tpu_groups_read(const tpu_instr *in, const char *attr, tpu_groups *g, tpu_diag *d) {
  memset(g, 0, sizeof *g);
  const char *v = attr_text(in->attrs, in->nattrs, attr);
  if (!v) return TPU_OK;
  v = skip(v);
  size_t len = *v == '{' ? strlen(v) : 0;
  if (len >= GCACHE_MIN && gcache_get(v, len, g)) return TPU_OK;
  int r;
  if (*v == '{') {
    r = read_explicit(v, g);
    if (r == 1 && len >= GCACHE_MIN) gcache_put(v, len, g);
  } else if (*v == '[') {
    r = read_iota(v, g);
  } else if (!strncmp(v, "mesh", 4) && (v[4] == '[' || v[4] == ' ')) {
    /* "mesh[...], device_ids=(...) {axes}" reaches us as two attributes (the comma
     * separates them): put them back together. */
    const char *ids = attr_text(in->attrs, in->nattrs, "device_ids");
    if (ids) {
      size_t n = strlen(v) + strlen(ids) + 16;
      char *both = tpu_malloc(n);
      if (!both) return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory reading %s", attr);
      snprintf(both, n, "%s, device_ids=%s", v, ids);
      r = read_mesh(both, g);
      tpu_free(both);
    } else {
      r = read_mesh(v, g);
    }
  } else {
    r = read_explicit(v, g);
  }
  if (r == 1) return TPU_OK;
  tpu_groups_free(g);
  if (r < 0) return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory reading %s", attr);
  return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "cannot read %s of '%s'", attr, tpu_instr_user_name(in));
}

tpu_status tpu_coll_groups_read(const tpu_instr *in, int64_t replicas, int64_t partitions, tpu_coll_groups *cg,
                                tpu_diag *d) {
  memset(cg, 0, sizeof *cg);
  TPU_TRY(tpu_groups_read(in, "replica_groups", &cg->g, d));
  cg->mode = tpu_collective_mode(in);
  cg->space = cg->mode == TPU_CG_FLATTENED ? replicas * partitions
              : cg->mode == TPU_CG_CROSS_PARTITION ? partitions : replicas;
  if (cg->g.ngroups == 0) return TPU_OK;
  /* each id's group: the first that names it */
  cg->where = tpu_malloc(sizeof *cg->where * (size_t)(cg->space > 0 ? cg->space : 1));
  if (!cg->where) {
    tpu_groups_free(&cg->g);
    return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory reading replica_groups");
  }
  for (int64_t x = 0; x < cg->space; x++) cg->where[x] = -1;
  for (int64_t k = cg->g.ngroups - 1; k >= 0; k--)
    for (int64_t i = cg->g.start[k + 1] - 1; i >= cg->g.start[k]; i--)
      if (cg->g.ids[i] >= 0 && cg->g.ids[i] < cg->space) cg->where[cg->g.ids[i]] = k;
  return TPU_OK;
}

void tpu_coll_groups_free(tpu_coll_groups *cg) {
  tpu_groups_free(&cg->g);
  tpu_free(cg->where);
  memset(cg, 0, sizeof *cg);
}

tpu_status tpu_coll_groups_members(const tpu_instr *in, const tpu_coll_groups *cg, int64_t partitions, int64_t dev,
                                   int64_t *members, int64_t *n, int64_t *self, tpu_diag *d) {
  const tpu_groups *g = &cg->g;
  const tpu_coll_mode mode = cg->mode;
  const int64_t space = cg->space;
  int64_t r = dev / partitions, p = dev % partitions;
  int64_t x = mode == TPU_CG_FLATTENED ? dev : mode == TPU_CG_CROSS_PARTITION ? p : r;
  int64_t k = -1, lo = 0, hi = space;
  if (g->ngroups > 0) {
    k = x >= 0 && x < space ? cg->where[x] : -1;
    if (k < 0)
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "replica_groups of '%s' leave device %lld out",
                      tpu_instr_user_name(in), (long long)dev);
    lo = g->start[k];
    hi = g->start[k + 1];
  }
  *n = 0;
  *self = -1;
  for (int64_t i = lo; i < hi; i++) {
    int64_t id = g->ngroups > 0 ? g->ids[i] : i;
    if (id < 0 || id >= space)
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "replica_groups of '%s' name %lld, but there are %lld",
                      tpu_instr_user_name(in), (long long)id, (long long)space);
    if (mode == TPU_CG_CROSS_REPLICA_AND_PARTITION) {
      for (int64_t q = 0; q < partitions; q++) {
        if (id == r && q == p) *self = *n;
        members[(*n)++] = id * partitions + q;
      }
      continue;
    }
    int64_t m = mode == TPU_CG_FLATTENED ? id : mode == TPU_CG_CROSS_PARTITION ? r * partitions + id : id * partitions + p;
    if (m == dev) *self = *n;
    members[(*n)++] = m;
  }
  return TPU_OK;
}

tpu_status tpu_collective_members(const tpu_instr *in, int64_t replicas, int64_t partitions, int64_t dev,
                                  int64_t *members, int64_t *n, int64_t *self, tpu_diag *d) {
  tpu_coll_groups cg;
  TPU_TRY(tpu_coll_groups_read(in, replicas, partitions, &cg, d));
  tpu_status st = tpu_coll_groups_members(in, &cg, partitions, dev, members, n, self, d);
  tpu_coll_groups_free(&cg);
  return st;
}

tpu_status tpu_collective_permute_source(const tpu_instr *in, int64_t replicas, int64_t partitions, int64_t dev,
                                         int64_t *src, tpu_diag *d) {
  /* one device's source: the whole table's entry (tpu_collective_permute_sources) */
  int64_t n = replicas * partitions;
  if (dev < 0 || dev >= n) return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "device %lld outside %lld devices", (long long)dev, (long long)n);
  int64_t *all = tpu_malloc(sizeof *all * (size_t)n);
  if (!all) return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  tpu_status st = tpu_collective_permute_sources(in, replicas, partitions, all, d);
  if (st == TPU_OK) *src = all[dev];
  tpu_free(all);
  return st;
}

tpu_status tpu_collective_permute_sources(const tpu_instr *in, int64_t replicas, int64_t partitions, int64_t *src,
                                          tpu_diag *d) {
  tpu_groups g;
  TPU_TRY(tpu_groups_read(in, "source_target_pairs", &g, d));
  int cross_partition = attr_text(in->attrs, in->nattrs, "channel_id") != NULL;
  if (g.ngroups == 0 && !attr_text(in->attrs, in->nattrs, "source_target_pairs")) {
    tpu_groups_free(&g);
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "'%s' has no source_target_pairs", tpu_instr_user_name(in));
  }
  int64_t nx = cross_partition ? partitions : replicas; /* x: a device's partition, or its replica */
  int64_t *from = tpu_malloc(sizeof *from * (size_t)(nx > 0 ? nx : 1));
  if (!from) {
    tpu_groups_free(&g);
    return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  }
  for (int64_t x = 0; x < nx; x++) from[x] = INT64_MIN; /* no pair sends to x */
  for (int64_t k = 0; k < g.ngroups; k++) { /* the last pair naming x as its target wins, as per device */
    if (g.start[k + 1] - g.start[k] != 2) {
      tpu_free(from);
      tpu_groups_free(&g);
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "source_target_pairs of '%s' must be pairs", tpu_instr_user_name(in));
    }
    int64_t t = g.ids[g.start[k] + 1];
    if (t >= 0 && t < nx) from[t] = g.ids[g.start[k]];
  }
  for (int64_t dev = 0; dev < replicas * partitions; dev++) {
    int64_t r = dev / partitions, p = dev % partitions, s = from[cross_partition ? p : r];
    src[dev] = s == INT64_MIN ? -1 : cross_partition ? r * partitions + s : s * partitions + p;
  }
  tpu_free(from);
  tpu_groups_free(&g);
  return TPU_OK;
}

tpu_opcode tpu_collective_base(tpu_opcode op) {
  switch (op) {
    case TPU_OP_ALL_REDUCE_START: return TPU_OP_ALL_REDUCE;
    case TPU_OP_ALL_GATHER_START: return TPU_OP_ALL_GATHER;
    case TPU_OP_COLLECTIVE_PERMUTE_START: return TPU_OP_COLLECTIVE_PERMUTE;
    default: return op;
  }
}

int tpu_collective_is_done(tpu_opcode op) {
  return op == TPU_OP_ALL_REDUCE_DONE || op == TPU_OP_ALL_GATHER_DONE || op == TPU_OP_COLLECTIVE_PERMUTE_DONE;
}

/* tpu_collective_check_groups, handing the groups it read and checked to the caller (*g, to
 * free with tpu_groups_free; empty for a -done op) with the mode's id space. */
static tpu_status check_groups_read(const tpu_instr *in, int64_t replicas, int64_t partitions, tpu_groups *gout,
                                    int64_t *spacep, tpu_diag *d) {
  memset(gout, 0, sizeof *gout);
  *spacep = 0;
  if (tpu_collective_is_done(in->op)) return TPU_OK;
  int permute = tpu_collective_base(in->op) == TPU_OP_COLLECTIVE_PERMUTE;
  tpu_groups g;
  TPU_TRY(tpu_groups_read(in, permute ? "source_target_pairs" : "replica_groups", &g, d));
  tpu_coll_mode mode = tpu_collective_mode(in);
  int64_t space = permute ? (attr_text(in->attrs, in->nattrs, "channel_id") ? partitions : replicas)
                  : mode == TPU_CG_FLATTENED ? replicas * partitions
                  : mode == TPU_CG_CROSS_PARTITION ? partitions : replicas;
  tpu_status st = TPU_OK;
  unsigned char *seen = tpu_calloc((size_t)(space * 2 + 1), 1);
  if (!seen) st = TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory checking groups");
  const char *nm = tpu_instr_user_name(in);
  for (int64_t k = 0; st == TPU_OK && k < g.ngroups; k++) {
    int64_t size = g.start[k + 1] - g.start[k];
    if (permute && size != 2) {
      st = TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "source_target_pairs of '%s' must be pairs", nm);
      break;
    }
    if (!permute && size != g.start[1] - g.start[0] && tpu_collective_base(in->op) != TPU_OP_ALL_REDUCE) {
      st = TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "replica_groups of '%s' differ in size (%lld and %lld)", nm,
                    (long long)(g.start[1] - g.start[0]), (long long)size);
      break;
    }
    for (int64_t i = g.start[k]; i < g.start[k + 1]; i++) {
      int64_t id = g.ids[i];
      int slot = permute ? (int)(i - g.start[k]) : 0; /* permute: sources and targets apart */
      if (id < 0 || id >= space) {
        st = TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "%s of '%s' name %lld, but there are %lld",
                      permute ? "source_target_pairs" : "replica_groups", nm, (long long)id, (long long)space);
        break;
      }
      if (seen[id * 2 + slot]++) {
        st = TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "%s of '%s' name %lld %s", permute ? "source_target_pairs" : "replica_groups",
                      nm, (long long)id, permute ? (slot ? "as a target twice" : "as a source twice") : "twice");
        break;
      }
    }
  }
  if (st == TPU_OK && !permute && g.ngroups > 0)
    for (int64_t id = 0; id < space; id++)
      if (!seen[id * 2]) {
        st = TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "replica_groups of '%s' leave %lld out; groups must partition the %lld %s",
                      nm, (long long)id, (long long)space,
                      mode == TPU_CG_FLATTENED ? "devices" : mode == TPU_CG_CROSS_PARTITION ? "partitions" : "replicas");
        break;
      }
  tpu_free(seen);
  if (st == TPU_OK) {
    *gout = g;
    *spacep = space;
  } else {
    tpu_groups_free(&g);
  }
  return st;
}

/* Groups found good, kept by their text and everything else check_groups_read reads (the
 * device grid, the op's kind, its mode): the verifier checks every collective after each HLO
 * pass, and a 4,096-chip program's groups are tens of kB of ids to read and check again each
 * time; the planner's candidates repeat short lists by the thousand (a 540B search checked
 * 93,000 under 256 characters when only longer ones were kept, 16 of them). A table of
 * VCACHE slots indexed by a hash of the key, any length; only successes (a failure is
 * reported once and stops the run). */
#define VCACHE 1024
static struct {
  size_t len;
  uint64_t hash;
  char *text;
  int64_t replicas, partitions, size;
  int kind;
} vcache[VCACHE];
static pthread_mutex_t vcache_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t vcache_checked;

int64_t tpu_collective_groups_checked(void) { return tpu_locked_read(&vcache_lock, &vcache_checked); }

/* The attribute text checked groups are kept by (NULL: not kept), the kind that goes with
 * it (permute, all-reduce: groups may differ in size, the mode, a channel) and the hash of
 * the text, kind and grid. */
static const char *vcache_key(const tpu_instr *in, int64_t replicas, int64_t partitions, size_t *len, int *kind,
                              uint64_t *hash) {
  if (tpu_collective_is_done(in->op)) return NULL;
  int permute = tpu_collective_base(in->op) == TPU_OP_COLLECTIVE_PERMUTE;
  const char *v = attr_text(in->attrs, in->nattrs, permute ? "source_target_pairs" : "replica_groups");
  if (!v) return NULL;
  v = skip(v);
  if (*v != '{' && *v != '[') return NULL; /* a mesh form reads device_ids too */
  int channel = attr_text(in->attrs, in->nattrs, "channel_id") != NULL;
  *kind = permute | (tpu_collective_base(in->op) == TPU_OP_ALL_REDUCE) << 1 | channel << 2 |
          (int)tpu_collective_mode(in) << 3;
  uint64_t h = 1469598103934665603ull ^ (uint64_t)*kind;
  h = (h ^ (uint64_t)replicas) * 1099511628211ull;
  h = (h ^ (uint64_t)partitions) * 1099511628211ull;
  size_t n = strlen(v); /* hashed: its length, first and last 64 characters (memcmp decides) */
  h = (h ^ (uint64_t)n) * 1099511628211ull;
  for (size_t i = 0; i < n && i < 64; i++) h = (h ^ (unsigned char)v[i]) * 1099511628211ull;
  for (size_t i = n > 128 ? n - 64 : n < 64 ? n : 64; i < n; i++) h = (h ^ (unsigned char)v[i]) * 1099511628211ull;
  *len = n;
  *hash = h;
  return v;
}

/* 1: groups of this text and kind were checked good on this grid; *size is their size (-1:
 * none kept). */
static int vcache_get(const tpu_instr *in, int64_t replicas, int64_t partitions, int64_t *size) {
  size_t len;
  int kind, hit = 0;
  uint64_t h;
  const char *v = vcache_key(in, replicas, partitions, &len, &kind, &h);
  if (!v) return 0;
  int i = (int)(h % VCACHE);
  pthread_mutex_lock(&vcache_lock);
  if (vcache[i].text && vcache[i].hash == h && vcache[i].len == len && vcache[i].kind == kind &&
      vcache[i].replicas == replicas && vcache[i].partitions == partitions && !memcmp(vcache[i].text, v, len)) {
    hit = 1;
    *size = vcache[i].size;
  }
  pthread_mutex_unlock(&vcache_lock);
  return hit;
}

static void vcache_put(const tpu_instr *in, int64_t replicas, int64_t partitions, int64_t size) {
  size_t len;
  int kind;
  uint64_t h;
  const char *v = vcache_key(in, replicas, partitions, &len, &kind, &h);
  char *t = v ? tpu_malloc(len + 1) : NULL;
  if (!t) return;
  memcpy(t, v, len);
  t[len] = 0;
  int i = (int)(h % VCACHE);
  pthread_mutex_lock(&vcache_lock);
  tpu_free(vcache[i].text);
  vcache[i].text = t;
  vcache[i].hash = h;
  vcache[i].len = len;
  vcache[i].kind = kind;
  vcache[i].replicas = replicas;
  vcache[i].partitions = partitions;
  vcache[i].size = size;
  pthread_mutex_unlock(&vcache_lock);
}

/* check_groups_read, then the size of the group of device 0 where the groups give it
 * (-1 for a permute or a -done op; tpu_collective_group_size). */
static tpu_status check_groups_size(const tpu_instr *in, int64_t replicas, int64_t partitions, int64_t *size,
                                    tpu_diag *d) {
  if (vcache_get(in, replicas, partitions, size)) return TPU_OK;
  pthread_mutex_lock(&vcache_lock);
  vcache_checked++;
  pthread_mutex_unlock(&vcache_lock);
  tpu_groups g;
  int64_t space;
  TPU_TRY(check_groups_read(in, replicas, partitions, &g, &space, d));
  *size = -1;
  if (!tpu_collective_is_done(in->op) && tpu_collective_base(in->op) != TPU_OP_COLLECTIVE_PERMUTE && space >= 1) {
    /* Checked: the groups partition the id space, so device 0 (id 0 in every mode) is in
     * exactly one; its size is tpu_collective_members' count for device 0. */
    int64_t n = space, at = -1;
    for (int64_t i = 0; g.ngroups > 0 && i < g.start[g.ngroups] && at < 0; i++)
      if (g.ids[i] == 0) at = i;
    for (int64_t k = 0; at >= 0 && k < g.ngroups; k++)
      if (at >= g.start[k] && at < g.start[k + 1]) n = g.start[k + 1] - g.start[k];
    *size = tpu_collective_mode(in) == TPU_CG_CROSS_REPLICA_AND_PARTITION ? n * partitions : n;
  }
  tpu_groups_free(&g);
  vcache_put(in, replicas, partitions, *size);
  return TPU_OK;
}

tpu_status tpu_collective_check_groups(const tpu_instr *in, int64_t replicas, int64_t partitions, tpu_diag *d) {
  int64_t size;
  return check_groups_size(in, replicas, partitions, &size, d);
}

tpu_status tpu_collective_devices(const tpu_instr *in, int64_t *devices, tpu_diag *d) {
  *devices = 1;
  int64_t replicas = 1, partitions = 1;
  if (tpu_collective_is_done(in->op)) return TPU_OK; /* its -start communicates */
  if (in->parent && in->parent->module) tpu_module_device_grid(in->parent->module, &replicas, &partitions);
  if (tpu_collective_base(in->op) == TPU_OP_COLLECTIVE_PERMUTE) {
    tpu_groups g;
    TPU_TRY(tpu_groups_read(in, "source_target_pairs", &g, d));
    for (int64_t k = 0; k < g.ngroups; k++)
      for (int64_t i = g.start[k] + 1; i < g.start[k + 1]; i++)
        if (g.ids[i] != g.ids[g.start[k]]) *devices = 2;
    tpu_groups_free(&g);
    return TPU_OK;
  }
  tpu_coll_mode mode = tpu_collective_mode(in);
  int64_t space = mode == TPU_CG_FLATTENED ? replicas * partitions
                  : mode == TPU_CG_CROSS_PARTITION ? partitions : replicas;
  tpu_groups g;
  TPU_TRY(tpu_groups_read(in, "replica_groups", &g, d));
  int64_t largest = 0;
  for (int64_t k = 0; k < g.ngroups; k++)
    if (g.start[k + 1] - g.start[k] > largest) largest = g.start[k + 1] - g.start[k];
  int everyone = g.ngroups == 0; /* {} (or no attribute) is one group of the whole id space */
  tpu_groups_free(&g);
  *devices = everyone ? space : largest;
  if (mode == TPU_CG_CROSS_REPLICA_AND_PARTITION) *devices *= partitions;
  return TPU_OK;
}

tpu_status tpu_collective_check_one_device(const tpu_instr *in, tpu_diag *d) {
  int64_t n;
  TPU_TRY(tpu_collective_devices(in, &n, d));
  if (n <= 1) return TPU_OK;
  return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc,
                  "%s '%s' communicates across %lld devices, but this run is one device; the module's "
                  "devices run together in the pod executor (tpusim run does so for modules with "
                  "replica_count or num_partitions above 1)",
                  tpu_op_name(in->op), tpu_instr_user_name(in), (long long)n);
}

tpu_status tpu_collective_group_size(const tpu_instr *in, int64_t replicas, int64_t partitions, int64_t *size,
                                     tpu_diag *d) {
  TPU_TRY(check_groups_size(in, replicas, partitions, size, d));
  if (*size >= 0) return TPU_OK;
  int64_t *members = tpu_malloc(sizeof *members * (size_t)(replicas * partitions));
  if (!members) return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  int64_t self;
  tpu_status st = tpu_collective_members(in, replicas, partitions, 0, members, size, &self, d);
  tpu_free(members);
  return st;
}
