/* Collective groups read from their attributes: which devices a collective joins under
 * XLA's group modes, so executors can exchange with exactly those devices (or, on one chip,
 * tell an identity from communication it cannot model). */
#include "ir/collective.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

static const char *attr_text(const tpu_attr *a, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(a[i].name, name)) return a[i].value;
  return NULL;
}

void tpu_module_device_grid(const tpu_module *m, int64_t *replicas, int64_t *partitions) {
  const char *r = attr_text(m->attrs, m->nattrs, "replica_count");
  const char *p = attr_text(m->attrs, m->nattrs, "num_partitions");
  long long rv = r ? strtoll(r, NULL, 10) : 1, pv = p ? strtoll(p, NULL, 10) : 1;
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
      char *end;
      long long v = strtoll(p, &end, 10);
      p = end;
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

/* Iota form "[G,S]<=[d0,d1]T(1,0)": iota over the reshape dims, transposed, cut into G
 * groups of S. Returns 1, 0 malformed, -1 out of memory. */
static int read_iota(const char *p, tpu_groups *g) {
  int64_t gs[2], rd[TPU_MAX_RANK], perm[TPU_MAX_RANK];
  if (read_dims(&p, gs, 2) != 2) return 0;
  p = skip(p);
  if (p[0] != '<' || p[1] != '=') return 0;
  p += 2;
  int nr = read_dims(&p, rd, TPU_MAX_RANK);
  if (nr < 1) return 0;
  p = skip(p);
  int np = nr;
  for (int i = 0; i < nr; i++) perm[i] = i;
  if (*p == 'T') {
    p++;
    const char *q = skip(p);
    if (*q != '(') return 0;
    /* Reuse read_dims on "(...)" by reading the numbers directly. */
    q++;
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
  if (*skip(p) || np != nr) return 0;
  int64_t total = 1;
  for (int i = 0; i < nr; i++) {
    if (rd[i] < 1 || perm[i] < 0 || perm[i] >= nr) return 0;
    total *= rd[i];
    for (int j = 0; j < i; j++)
      if (perm[j] == perm[i]) return 0;
  }
  if (gs[0] < 1 || gs[1] < 1 || gs[0] * gs[1] != total || total > ((int64_t)1 << 24)) return 0;
  g->ids = tpu_malloc(sizeof *g->ids * (size_t)total);
  g->start = tpu_malloc(sizeof *g->start * (size_t)(gs[0] + 1));
  if (!g->ids || !g->start) return -1;
  int64_t td[TPU_MAX_RANK], c[TPU_MAX_RANK] = {0}, str[TPU_MAX_RANK];
  int64_t s = 1;
  for (int i = nr - 1; i >= 0; i--) str[i] = s, s *= rd[i];
  for (int i = 0; i < nr; i++) td[i] = rd[perm[i]];
  for (int64_t f = 0; f < total; f++) {
    int64_t v = 0;
    for (int i = 0; i < nr; i++) v += c[i] * str[perm[i]];
    g->ids[f] = v;
    for (int i = nr - 1; i >= 0; i--) {
      if (++c[i] < td[i]) break;
      c[i] = 0;
    }
  }
  g->ngroups = gs[0];
  for (int64_t k = 0; k <= gs[0]; k++) g->start[k] = k * gs[1];
  return 1;
}

void tpu_groups_free(tpu_groups *g) {
  tpu_free(g->ids);
  tpu_free(g->start);
  memset(g, 0, sizeof *g);
}

tpu_status tpu_groups_read(const tpu_instr *in, const char *attr, tpu_groups *g, tpu_diag *d) {
  memset(g, 0, sizeof *g);
  const char *v = attr_text(in->attrs, in->nattrs, attr);
  if (!v) return TPU_OK;
  v = skip(v);
  int r;
  if (*v == '[') {
    r = read_iota(v, g);
  } else if (!strncmp(v, "mesh", 4)) {
    tpu_groups_free(g);
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "%s of '%s': the mesh-axes form is not read yet", attr,
                    tpu_instr_user_name(in));
  } else {
    r = read_explicit(v, g);
  }
  if (r == 1) return TPU_OK;
  tpu_groups_free(g);
  if (r < 0) return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory reading %s", attr);
  return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "cannot read %s of '%s'", attr, tpu_instr_user_name(in));
}

/* The group (ids in the mode's id space) containing id `x`; ngroups 0 = all of `count`. */
static int64_t find_group(const tpu_groups *g, int64_t x) {
  for (int64_t k = 0; k < g->ngroups; k++)
    for (int64_t i = g->start[k]; i < g->start[k + 1]; i++)
      if (g->ids[i] == x) return k;
  return -1;
}

tpu_status tpu_collective_members(const tpu_instr *in, int64_t replicas, int64_t partitions, int64_t dev,
                                  int64_t *members, int64_t *n, int64_t *self, tpu_diag *d) {
  tpu_groups g;
  TPU_TRY(tpu_groups_read(in, "replica_groups", &g, d));
  tpu_coll_mode mode = tpu_collective_mode(in);
  int64_t r = dev / partitions, p = dev % partitions;
  int64_t space = mode == TPU_CG_FLATTENED ? replicas * partitions
                  : mode == TPU_CG_CROSS_PARTITION ? partitions : replicas;
  int64_t x = mode == TPU_CG_FLATTENED ? dev : mode == TPU_CG_CROSS_PARTITION ? p : r;
  int64_t k = -1, lo = 0, hi = space;
  if (g.ngroups > 0) {
    k = find_group(&g, x);
    if (k < 0) {
      tpu_groups_free(&g);
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "replica_groups of '%s' leave device %lld out",
                      tpu_instr_user_name(in), (long long)dev);
    }
    lo = g.start[k];
    hi = g.start[k + 1];
  }
  *n = 0;
  *self = -1;
  tpu_status st = TPU_OK;
  for (int64_t i = lo; i < hi && st == TPU_OK; i++) {
    int64_t id = g.ngroups > 0 ? g.ids[i] : i;
    if (id < 0 || id >= space) {
      st = TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "replica_groups of '%s' name %lld, but there are %lld",
                    tpu_instr_user_name(in), (long long)id, (long long)space);
      break;
    }
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
  tpu_groups_free(&g);
  return st;
}

tpu_status tpu_collective_permute_source(const tpu_instr *in, int64_t replicas, int64_t partitions, int64_t dev,
                                         int64_t *src, tpu_diag *d) {
  tpu_groups g;
  TPU_TRY(tpu_groups_read(in, "source_target_pairs", &g, d));
  int cross_partition = attr_text(in->attrs, in->nattrs, "channel_id") != NULL;
  int64_t r = dev / partitions, p = dev % partitions;
  int64_t x = cross_partition ? p : r;
  *src = -1;
  for (int64_t k = 0; k < g.ngroups; k++) {
    if (g.start[k + 1] - g.start[k] != 2) {
      tpu_groups_free(&g);
      return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "source_target_pairs of '%s' must be pairs", tpu_instr_user_name(in));
    }
    if (g.ids[g.start[k] + 1] == x) {
      int64_t s = g.ids[g.start[k]];
      *src = cross_partition ? r * partitions + s : s * partitions + p;
    }
  }
  tpu_groups_free(&g);
  (void)replicas;
  return TPU_OK;
}

tpu_status tpu_collective_check_groups(const tpu_instr *in, int64_t replicas, int64_t partitions, tpu_diag *d) {
  int permute = in->op == TPU_OP_COLLECTIVE_PERMUTE;
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
    if (!permute && size != g.start[1] - g.start[0] && in->op != TPU_OP_ALL_REDUCE) {
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
  tpu_groups_free(&g);
  return st;
}

tpu_status tpu_collective_devices(const tpu_instr *in, int64_t *devices, tpu_diag *d) {
  *devices = 1;
  int64_t replicas = 1, partitions = 1;
  if (in->parent && in->parent->module) tpu_module_device_grid(in->parent->module, &replicas, &partitions);
  if (in->op == TPU_OP_COLLECTIVE_PERMUTE) {
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
                  "%s '%s' communicates across %lld devices; tpusim runs one chip and does not model "
                  "collectives yet (only groups of one device run, as the identity)",
                  tpu_op_name(in->op), tpu_instr_user_name(in), (long long)n);
}
