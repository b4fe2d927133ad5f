/* HLO shardings: parse the attribute, cut global arrays into shards, assemble them back. */
#include "pod/sharding.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "ir/collective.h"

static const char *skip(const char *p) {
  while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
  return p;
}

/* The position just past the '}' that closes the '{' at p (NULL if unbalanced). */
static const char *close_brace(const char *p) {
  int depth = 0;
  for (; *p; p++) {
    if (*p == '"') { /* metadata strings may hold braces */
      for (p++; *p && *p != '"'; p++)
        if (*p == '\\' && p[1]) p++;
      if (!*p) return NULL;
    } else if (*p == '{') {
      depth++;
    } else if (*p == '}' && --depth == 0) {
      return p + 1;
    }
  }
  return NULL;
}

static int word(const char *p, const char *w) {
  size_t n = strlen(w);
  return !strncmp(p, w, n) && !(isalnum((unsigned char)p[n]) || p[n] == '_');
}

void tpu_sharding_free(tpu_sharding *s) {
  for (int i = 0; i < s->nelems; i++) tpu_sharding_free(&s->elems[i]);
  tpu_free(s->elems);
  tpu_free(s->devices);
  memset(s, 0, sizeof *s);
}

/* Reads "[a,b,...]" into v (at most max); returns the count, or -1. */
static int read_list(const char **pp, int64_t *v, int max) {
  const char *p = skip(*pp);
  if (*p++ != '[') return -1;
  int n = 0;
  for (;;) {
    p = skip(p);
    if (*p == ']') break;
    if (*p == ',') {
      p++;
      continue;
    }
    if (!isdigit((unsigned char)*p) || n == max) return -1;
    char *end;
    v[n++] = strtoll(p, &end, 10);
    p = end;
  }
  *pp = p + 1;
  return n;
}

/* One "{...}" element at *pp (not a tuple). Returns 1, 0 malformed, -1 out of memory. */
static int parse_one(const char **pp, tpu_sharding *s) {
  const char *p = skip(*pp), *end = close_brace(p);
  if (*p != '{' || !end) return 0;
  p++;
  s->kind = TPU_SHARD_REPLICATED;
  while (p < end - 1) {
    p = skip(p);
    if (p >= end - 1) break;
    if (*p == ',') {
      p++;
    } else if (word(p, "replicated")) {
      s->kind = TPU_SHARD_REPLICATED;
      p += 10;
    } else if (word(p, "manual")) {
      s->kind = TPU_SHARD_MANUAL;
      p += 6;
    } else if (word(p, "maximal")) {
      p = skip(p + 7);
      if (strncmp(p, "device=", 7)) return 0;
      char *e;
      s->kind = TPU_SHARD_MAXIMAL;
      s->maximal = strtoll(p + 7, &e, 10);
      if (e == p + 7) return 0;
      p = e;
    } else if (!strncmp(p, "devices=", 8)) {
      p += 8;
      s->kind = TPU_SHARD_TILED;
      s->ntile = read_list(&p, s->tile, TPU_MAX_RANK + 4);
      if (s->ntile < 1) return 0;
      int64_t total = 1;
      for (int i = 0; i < s->ntile; i++) {
        if (s->tile[i] < 1 || total > ((int64_t)1 << 24) / s->tile[i]) return 0;
        total *= s->tile[i];
      }
      p = skip(p);
      if (p[0] == '<' && p[1] == '=') {
        int r = tpu_iota_read(&p, &s->devices, &s->ndevices);
        if (r != 1) return r;
      } else {
        s->devices = tpu_malloc(sizeof *s->devices * (size_t)total);
        if (!s->devices) return -1;
        for (;;) {
          p = skip(p);
          if (!isdigit((unsigned char)*p)) break;
          if (s->ndevices == total) return 0;
          char *e;
          s->devices[s->ndevices++] = strtoll(p, &e, 10);
          p = skip(e);
          if (*p != ',' || !isdigit((unsigned char)*skip(p + 1))) break;
          p++;
        }
      }
      if (s->ndevices != total) return 0;
    } else if (word(p, "last_tile_dim_replicate")) {
      s->nrep = 1;
      p += 23;
    } else if (!strncmp(p, "last_tile_dims=", 15)) {
      p = skip(p + 15);
      const char *e = close_brace(p);
      if (*p != '{' || !e) return 0;
      for (const char *q = p + 1; q < e - 1;) {
        q = skip(q);
        if (*q == ',' || *q == '}') {
          q++;
          continue;
        }
        if (word(q, "manual")) { /* a manual subgroup (a partly manual shard_map) */
          s->nrep++;
          s->nmanual++;
          q += 6;
          continue;
        }
        if (!word(q, "replicated")) return 0;
        s->nrep++;
        q += 10;
      }
      p = e;
    } else if (!strncmp(p, "metadata=", 9)) {
      p = skip(p + 9);
      const char *e = *p == '{' ? close_brace(p) : NULL;
      if (!e) return 0;
      p = e;
    } else {
      return 0;
    }
  }
  if (s->kind == TPU_SHARD_TILED && s->nrep > s->ntile) return 0; /* (all subgroups: a scalar's) */
  *pp = end;
  return 1;
}

static int has_manual_subgroups(const tpu_sharding *s) {
  int n = s->nmanual;
  for (int i = 0; i < s->nelems; i++) n += has_manual_subgroups(&s->elems[i]);
  return n;
}

tpu_status tpu_sharding_parse(const char *text, tpu_loc loc, tpu_sharding *s, tpu_diag *d) {
  TPU_TRY(tpu_sharding_parse_partial(text, loc, s, d));
  if (!has_manual_subgroups(s)) return TPU_OK;
  tpu_sharding_free(s); /* manual subgroups: no global view */
  return TPU_FAIL(d, TPU_ERR_INVALID, loc, "cannot read the sharding '%s': it has manual subgroups (a partly manual shard_map)", text);
}

tpu_status tpu_sharding_parse_partial(const char *text, tpu_loc loc, tpu_sharding *s, tpu_diag *d) {
  memset(s, 0, sizeof *s);
  const char *p = skip(text);
  int r = 0;
  if (*p == '{' && *skip(p + 1) == '{') { /* a tuple */
    s->kind = TPU_SHARD_TUPLE;
    const char *end = close_brace(p);
    p = skip(p + 1);
    r = end != NULL;
    int cap = 0;
    while (r == 1 && p < end - 1) {
      if (*p == ',') {
        p = skip(p + 1);
        continue;
      }
      if (s->nelems == cap) {
        int nc = cap ? cap * 2 : 4;
        tpu_sharding *ne = tpu_realloc(s->elems, sizeof *ne * (size_t)nc);
        if (!ne) {
          r = -1;
          break;
        }
        s->elems = ne;
        cap = nc;
      }
      memset(&s->elems[s->nelems], 0, sizeof s->elems[0]);
      r = parse_one(&p, &s->elems[s->nelems++]);
      p = skip(p);
    }
    if (r == 1) p = end;
  } else {
    r = parse_one(&p, s);
  }
  if (r == 1 && *skip(p) == 0) return TPU_OK;
  tpu_sharding_free(s);
  if (r < 0) return TPU_FAIL(d, TPU_ERR_NOMEM, loc, "out of memory reading a sharding");
  return TPU_FAIL(d, TPU_ERR_INVALID, loc, "cannot read the sharding '%s'", text);
}

tpu_status tpu_sharding_of(const tpu_instr *in, tpu_sharding *s, int *found, tpu_diag *d) {
  *found = 0;
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, "sharding")) {
      *found = 1;
      return tpu_sharding_parse(in->attrs[i].value, in->attrs[i].loc, s, d);
    }
  return TPU_OK;
}

tpu_status tpu_sharding_check(const tpu_sharding *s, const tpu_shape *local, int64_t ndev, tpu_loc loc,
                              const char *what, tpu_diag *d) {
  switch (s->kind) {
    case TPU_SHARD_MANUAL:
      return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, loc,
                      "%s has a manual sharding (no global view); give each device's value with --per-device", what);
    case TPU_SHARD_TUPLE: return TPU_FAIL(d, TPU_ERR_INVALID, loc, "%s is an array but its sharding is a tuple", what);
    case TPU_SHARD_MAXIMAL:
      if (s->maximal < 0 || s->maximal >= ndev)
        return TPU_FAIL(d, TPU_ERR_INVALID, loc, "%s is placed on device %lld of %lld", what, (long long)s->maximal,
                        (long long)ndev);
      return TPU_OK;
    case TPU_SHARD_REPLICATED: return TPU_OK;
    case TPU_SHARD_TILED: break;
  }
  if (s->ntile - s->nrep != local->rank)
    return TPU_FAIL(d, TPU_ERR_INVALID, loc, "%s has rank %d but its sharding tiles %d dimensions", what, local->rank,
                    s->ntile - s->nrep);
  if (s->ndevices != ndev)
    return TPU_FAIL(d, TPU_ERR_INVALID, loc, "the sharding of %s names %lld devices; the module has %lld", what,
                    (long long)s->ndevices, (long long)ndev);
  unsigned char *seen = tpu_calloc((size_t)ndev, 1);
  if (!seen) return TPU_FAIL(d, TPU_ERR_NOMEM, loc, "out of memory");
  tpu_status st = TPU_OK;
  for (int64_t i = 0; i < s->ndevices && st == TPU_OK; i++) {
    int64_t v = s->devices[i];
    if (v < 0 || v >= ndev || seen[v]++)
      st = TPU_FAIL(d, TPU_ERR_INVALID, loc, "the sharding of %s names device %lld %s", what, (long long)v,
                    v < 0 || v >= ndev ? "outside the module's devices" : "twice");
  }
  tpu_free(seen);
  return st;
}

void tpu_sharding_global_dims(const tpu_sharding *s, const tpu_shape *local, int64_t *dims) {
  for (int i = 0; i < local->rank; i++)
    dims[i] = local->dims[i] * (s->kind == TPU_SHARD_TILED ? s->tile[i] : 1);
}

/* Copies the box of `box` elements from src at offset so[] to dst at offset do[] (row-major arrays). */
static void copy_region(tpu_tensor *dst, const int64_t *dof, const tpu_tensor *src, const int64_t *sof,
                        const int64_t *box) {
  int rank = src->rank;
  size_t es = tpu_dtype_size(src->dtype);
  if (rank == 0) {
    memcpy(dst->data, src->data, es);
    return;
  }
  for (int i = 0; i < rank; i++)
    if (box[i] <= 0) return;
  int64_t ds[TPU_MAX_RANK], ss[TPU_MAX_RANK], idx[TPU_MAX_RANK] = {0};
  int64_t a = 1, b = 1;
  for (int i = rank - 1; i >= 0; i--) {
    ds[i] = a, a *= dst->dims[i];
    ss[i] = b, b *= src->dims[i];
  }
  for (;;) {
    int64_t po = 0, qo = 0;
    for (int i = 0; i < rank; i++) {
      po += (dof[i] + idx[i]) * ds[i];
      qo += (sof[i] + idx[i]) * ss[i];
    }
    memcpy((char *)dst->data + (size_t)po * es, (const char *)src->data + (size_t)qo * es, (size_t)box[rank - 1] * es);
    int i = rank - 2;
    for (; i >= 0; i--) {
      if (++idx[i] < box[i]) break;
      idx[i] = 0;
    }
    if (i < 0) return;
  }
}

/* The tile (per data dim) that the device at position `pos` of the assignment holds; returns
 * whether it is the first replica (all replication indices 0). */
static int tile_index(const tpu_sharding *s, int64_t pos, int64_t *idx) {
  int64_t rest = pos, rep = 0;
  for (int i = s->ntile - 1; i >= 0; i--) {
    int64_t c = rest % s->tile[i];
    rest /= s->tile[i];
    if (i >= s->ntile - s->nrep) rep |= c;
    else idx[i] = c;
  }
  return rep == 0;
}

static int64_t position_of(const tpu_sharding *s, int64_t dev) {
  for (int64_t i = 0; i < s->ndevices; i++)
    if (s->devices[i] == dev) return i;
  return -1;
}

tpu_status tpu_sharding_shard(const tpu_sharding *s, int64_t dev, const tpu_tensor *global, const tpu_shape *local,
                              tpu_tensor *out, tpu_diag *d) {
  memset(out, 0, sizeof *out);
  int64_t idx[TPU_MAX_RANK + 4] = {0}, zero[TPU_MAX_RANK] = {0}, off[TPU_MAX_RANK], box[TPU_MAX_RANK];
  if (s->kind == TPU_SHARD_TILED) {
    int64_t pos = position_of(s, dev);
    if (pos < 0) return TPU_FAIL(d, TPU_ERR_INVALID, tpu_noloc(), "device %lld holds no tile", (long long)dev);
    tile_index(s, pos, idx);
  }
  TPU_TRY(tpu_tensor_alloc(out, local->dtype, local->rank, local->dims, d));
  for (int i = 0; i < local->rank; i++) {
    off[i] = idx[i] * local->dims[i];
    int64_t left = global->dims[i] - off[i];
    box[i] = left < local->dims[i] ? left : local->dims[i];
  }
  copy_region(out, zero, global, off, box);
  return TPU_OK;
}

tpu_status tpu_sharding_assemble(const tpu_sharding *s, const tpu_tensor *const *shards, int64_t ndev,
                                 const tpu_shape *local, tpu_tensor *global, tpu_diag *d) {
  int64_t dims[TPU_MAX_RANK], zero[TPU_MAX_RANK] = {0};
  tpu_sharding_global_dims(s, local, dims);
  TPU_TRY(tpu_tensor_alloc(global, local->dtype, local->rank, dims, d));
  if (s->kind != TPU_SHARD_TILED) {
    int64_t dev = s->kind == TPU_SHARD_MAXIMAL ? s->maximal : 0;
    copy_region(global, zero, shards[dev], zero, local->dims);
    return TPU_OK;
  }
  for (int64_t pos = 0; pos < s->ndevices && pos < ndev; pos++) {
    int64_t idx[TPU_MAX_RANK + 4] = {0}, off[TPU_MAX_RANK];
    if (!tile_index(s, pos, idx)) continue;
    for (int i = 0; i < local->rank; i++) off[i] = idx[i] * local->dims[i];
    copy_region(global, off, shards[s->devices[pos]], zero, local->dims);
  }
  return TPU_OK;
}
