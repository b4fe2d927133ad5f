/* spmd-partition's meshes and shardings: meshes from --mesh, from the module's Shardy
 * header or inferred from GSPMD shardings; sdy and HLO sharding text read into mesh-axes
 * form and written back. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "chip/chip.h"
#include "compile/spmd/spmd_int.h"
#include "pod/sharding.h"

const char *tpu__spmd_attr(const tpu_instr *in, const char *name) {
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, name)) return in->attrs[i].value;
  return NULL;
}

/* ---- Meshes ---- */

void tpu_mesh_price_for(tpu_mesh *mesh, const tpu_chip *chip) {
  mesh->step_bytes = chip ? chip->ici_bw_per_link * chip->ici_latency_s : 45e9 * 1e-6;
  mesh->windowed_min_devices = chip ? chip->windowed_einsum_min_chips : 0;
  mesh->windowed_max_devices = chip ? chip->windowed_einsum_max_chips : 0;
  mesh->windowed_ring4_multiplier = chip ? chip->windowed_einsum_ring4_multiplier : 0;
  /* XLA's floor under which a windowed einsum's communication is not weighed (1e-5 ms), in
   * the bytes a link moves meanwhile (spmd_window.c) */
  mesh->windowed_floor_bytes = (chip ? chip->ici_bw_per_link : 45e9) * 1e-8;
  mesh->flop_bytes = chip && chip->peak_bf16_flops > 0 ? 2 * chip->ici_bw_per_link / chip->peak_bf16_flops
                                                       : 2 * 45e9 / 197e12; /* v5e's */
}

void tpu_mesh_configure(tpu_mesh *mesh, const tpu_chip *chip, int precision, int no_windowed_einsum) {
  tpu_mesh_price_for(mesh, chip);
  mesh->bf16_dot_gathers = chip && precision <= 0;
  if (no_windowed_einsum) mesh->windowed_min_devices = 0;
  mesh->keep_full_all_reduce = tpu_spmd_keeps_full_all_reduce(chip, mesh->ndev);
}

void tpu_mesh_free(tpu_mesh *mesh) {
  tpu_free(mesh->ids);
  memset(mesh, 0, sizeof *mesh);
}

static tpu_status mesh_add(tpu_mesh *mesh, const char *name, size_t n, int64_t size, tpu_diag *d) {
  if (mesh->naxes == MAXA) return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(), "a mesh has at most %d axes", MAXA);
  if (n == 0 || n >= sizeof mesh->names[0] || size < 1)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "bad mesh axis '%.*s'=%lld", (int)n, name, (long long)size);
  for (int i = 0; i < mesh->naxes; i++)
    if (strlen(mesh->names[i]) == n && !strncmp(mesh->names[i], name, n))
      return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "mesh axis '%.*s' given twice", (int)n, name);
  if (!mesh->naxes) tpu_mesh_price_for(mesh, NULL); /* callers that know the chip reprice */
  memcpy(mesh->names[mesh->naxes], name, n);
  mesh->names[mesh->naxes][n] = 0;
  mesh->sizes[mesh->naxes++] = size;
  mesh->ndev = mesh->ndev ? mesh->ndev * size : size;
  if (mesh->ndev > ((int64_t)1 << 20)) return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(), "a mesh of over 2^20 devices");
  return TPU_OK;
}

tpu_status tpu_mesh_parse(const char *spec, tpu_mesh *mesh, tpu_diag *d) {
  memset(mesh, 0, sizeof *mesh);
  const char *p = spec;
  while (*p) {
    const char *eq = strchr(p, '=');
    if (!eq) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "--mesh '%s': expected NAME=SIZE,...", spec);
    char *end;
    long long v = strtoll(eq + 1, &end, 10);
    if (end == eq + 1 || (*end && *end != ','))
      return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "--mesh '%s': expected NAME=SIZE,...", spec);
    TPU_TRY(mesh_add(mesh, p, (size_t)(eq - p), v, d));
    p = *end ? end + 1 : end;
  }
  if (!mesh->naxes) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "--mesh '%s' names no axis", spec);
  return TPU_OK;
}

/* Skips spaces and the backslashes of escaped quotes in attribute text. */
static const char *sk(const char *p) {
  while (*p == ' ' || *p == '\\' || *p == '\n') p++;
  return p;
}

/* A quoted axis name at *p (escaped or not) into buf; 0 if none. */
static int quoted(const char **pp, char *buf, size_t n) {
  const char *p = sk(*pp);
  if (*p != '"') return 0;
  p++;
  size_t k = 0;
  while (*p && *p != '"' && *p != '\\') {
    if (k + 1 < n) buf[k++] = *p;
    p++;
  }
  buf[k] = 0;
  p = sk(p);
  if (*p != '"') return 0;
  *pp = p + 1;
  return k > 0;
}

static tpu_status mesh_from_shardings(const tpu_module *m, tpu_mesh *mesh, int *found, tpu_diag *d);

tpu_status tpu_mesh_from_module(const tpu_module *m, tpu_mesh *mesh, int *found, tpu_diag *d) {
  memset(mesh, 0, sizeof *mesh);
  *found = 0;
  const char *v = NULL;
  tpu_loc loc = tpu_noloc();
  for (int i = 0; i < m->nattrs; i++)
    if (!strcmp(m->attrs[i].name, "frontend_attributes")) {
      v = strstr(m->attrs[i].value, "#sdy.mesh<");
      loc = m->attrs[i].loc;
    }
  if (!v) return mesh_from_shardings(m, mesh, found, d);
  const char *p = sk(v + 10);
  if (*p++ != '[') return TPU_FAIL(d, TPU_ERR_INVALID, loc, "cannot read the sdy mesh");
  for (;;) {
    p = sk(p);
    if (*p == ']') {
      p++;
      break;
    }
    if (*p == ',') {
      p++;
      continue;
    }
    char name[32];
    if (!quoted(&p, name, sizeof name)) return TPU_FAIL(d, TPU_ERR_INVALID, loc, "cannot read the sdy mesh");
    p = sk(p);
    if (*p++ != '=') return TPU_FAIL(d, TPU_ERR_INVALID, loc, "cannot read the sdy mesh");
    char *end;
    long long size = strtoll(sk(p), &end, 10);
    p = end;
    TPU_TRY(mesh_add(mesh, name, strlen(name), size, d));
  }
  p = sk(p);
  if (*p == ',') { /* device_ids=[...] */
    p = sk(p + 1);
    if (!strncmp(p, "device_ids=[", 12)) {
      p += 12;
      mesh->ids = tpu_calloc((size_t)mesh->ndev, sizeof *mesh->ids);
      if (!mesh->ids) return TPU_FAIL(d, TPU_ERR_NOMEM, loc, "out of memory");
      for (int64_t k = 0; k < mesh->ndev; k++) {
        char *end;
        mesh->ids[k] = strtoll(sk(p), &end, 10);
        p = sk(end);
        if (*p == ',') p++;
      }
    }
  }
  *found = mesh->naxes > 0;
  return TPU_OK;
}

/* ---- Shardings in mesh-axes form ---- */

/* "[{"x"}, {}, {"y","z"}]" (sdy dimension shardings) into s for rank dims. */
int tpu__spmd_parse_sdy(const char *p, const tpu_mesh *mesh, int rank, dsh *s) {
  memset(s, 0, sizeof *s);
  p = sk(p);
  if (*p++ != '[') return 0;
  int k = 0;
  for (;;) {
    p = sk(p);
    if (*p == ']') break;
    if (*p == ',') {
      p++;
      continue;
    }
    if (*p++ != '{' || k >= rank) return 0;
    for (;;) {
      p = sk(p);
      if (*p == '}') {
        p++;
        break;
      }
      if (*p == ',' || *p == '?') {
        p++;
        continue;
      }
      char name[32];
      if (!quoted(&p, name, sizeof name)) return 0;
      p = sk(p);
      if (*p == ':') return 0; /* sub-axes: not handled */
      /* every axis of that name: an axis spmd-partition cut into sub-axes is split over
       * all its parts, major first */
      int found = 0;
      for (int i = 0; i < mesh->naxes; i++) {
        if (strcmp(mesh->names[i], name)) continue;
        if (s->n[k] == MAXA) return 0;
        s->ax[k][s->n[k]++] = (int8_t)i;
        found = 1;
      }
      if (!found) return 0;
    }
    k++;
  }
  return k == rank;
}

/* s as a JAX PartitionSpec over the mesh's axis names: P('data', None, ('x', 'y')). */
void tpu__spmd_pspec_text(const tpu_mesh *mesh, const dsh *s, int rank, tpu_strbuf *b) {
  tpu_strbuf_printf(b, "P(");
  for (int k = 0; k < rank; k++) {
    tpu_strbuf_printf(b, "%s", k ? ", " : "");
    if (!s->n[k]) tpu_strbuf_printf(b, "None");
    for (int i = 0; i < s->n[k]; i++)
      tpu_strbuf_printf(b, "%s'%s'%s", i ? ", " : s->n[k] > 1 ? "(" : "", mesh->names[s->ax[k][i]],
                        s->n[k] > 1 && i == s->n[k] - 1 ? ")" : "");
  }
  tpu_strbuf_printf(b, ")");
}

/* Appends to the mesh's own_notes the constraint that gives value x sharding h before `at`
 * (its JAX op name, from metadata, beside the HLO name when the program has one). */
void tpu__spmd_note_constraint(const sp *s, const tpu_instr *x, const dsh *h, const tpu_instr *at, const char *why) {
  tpu_strbuf *b = s->mesh->own_notes;
  if (!b) return;
  tpu_strbuf_printf(b, "with_sharding_constraint(%s, ", x->name);
  tpu__spmd_pspec_text(s->mesh, h, x->shape.rank, b);
  tpu_strbuf_printf(b, ")  # %s of %s", why, at->name);
  const char *md = tpu__spmd_attr(at, "metadata"), *on = md ? strstr(md, "op_name=\"") : NULL;
  if (on) {
    on += 9;
    const char *e = strchr(on, '"');
    if (e) tpu_strbuf_printf(b, " (%.*s)", (int)(e - on), on);
  }
  tpu_strbuf_printf(b, "\n");
}

/* The tile assignment of s (tile dims, device list, replication) as HLO sharding text. */
void tpu__spmd_hlo_text(const tpu_mesh *mesh, const dsh *s, int rank, tpu_strbuf *b) {
  if (s->manual) {
    tpu_strbuf_printf(b, "{manual}");
    return;
  }
  if (!is_split(s, rank)) {
    tpu_strbuf_printf(b, "{replicated}");
    return;
  }
  int used[MAXA] = {0};
  int64_t tiles[TPU_MAX_RANK + 1];
  for (int k = 0; k < rank; k++) {
    tiles[k] = factor(mesh, s, k);
    for (int i = 0; i < s->n[k]; i++) used[s->ax[k][i]] = 1;
  }
  int64_t rep = 1;
  for (int a = 0; a < mesh->naxes; a++)
    if (!used[a]) rep *= mesh->sizes[a];
  int64_t *list = tpu_calloc((size_t)mesh->ndev, sizeof *list);
  if (!list) {
    b->oom = 1;
    return;
  }
  for (int64_t pos = 0; pos < mesh->ndev; pos++) {
    int64_t c[MAXA], r = pos;
    for (int a = mesh->naxes - 1; a >= 0; a--) c[a] = r % mesh->sizes[a], r /= mesh->sizes[a];
    int64_t t = 0;
    for (int k = 0; k < rank; k++) {
      int64_t idx = 0;
      for (int i = 0; i < s->n[k]; i++) idx = idx * mesh->sizes[s->ax[k][i]] + c[s->ax[k][i]];
      t = t * tiles[k] + idx;
    }
    int64_t ri = 0;
    for (int a = 0; a < mesh->naxes; a++)
      if (!used[a]) ri = ri * mesh->sizes[a] + c[a];
    list[t * rep + ri] = mesh->ids ? mesh->ids[pos] : pos;
  }
  tpu_strbuf_printf(b, "{devices=[");
  for (int k = 0; k < rank; k++) tpu_strbuf_printf(b, "%s%lld", k ? "," : "", (long long)tiles[k]);
  if (rep > 1) tpu_strbuf_printf(b, ",%lld", (long long)rep);
  tpu_strbuf_printf(b, "]");
  for (int64_t i = 0; i < mesh->ndev; i++) tpu_strbuf_printf(b, "%s%lld", i ? "," : "", (long long)list[i]);
  tpu_strbuf_printf(b, "%s}", rep > 1 ? " last_tile_dim_replicate" : "");
  tpu_free(list);
}

/* An HLO sharding as mesh axes: the assignment of axes to dimensions (each axis to one
 * dimension or none, in mesh order within a dimension) whose tile assignment it is. */
int tpu__spmd_from_hlo(const tpu_mesh *mesh, const char *text, int rank, dsh *out) {
  tpu_sharding hs;
  tpu_diag d;
  if (tpu_sharding_parse_partial(text, tpu_noloc(), &hs, &d) != TPU_OK) return 0;
  int ok = tpu__spmd_from_parsed(mesh, &hs, rank, out);
  tpu_sharding_free(&hs);
  return ok;
}

int tpu__spmd_from_parsed(const tpu_mesh *mesh, const tpu_sharding *hs, int rank, dsh *out) {
  tpu_diag d;
  int ok = 0;
  memset(out, 0, sizeof *out);
  if (hs->kind == TPU_SHARD_REPLICATED) ok = 1;
  else if (hs->kind == TPU_SHARD_MANUAL || (hs->kind == TPU_SHARD_TILED && hs->nmanual)) ok = out->manual = 1;
  else if (hs->kind == TPU_SHARD_TILED && hs->ntile - hs->nrep == rank) {
    int64_t combos = 1;
    for (int a = 0; a < mesh->naxes; a++) combos *= rank + 1;
    for (int64_t c = 0; c < combos && !ok; c++) {
      dsh t;
      memset(&t, 0, sizeof t);
      int64_t r = c;
      for (int a = 0; a < mesh->naxes; a++) {
        int where = (int)(r % (rank + 1));
        r /= rank + 1;
        /* an axis of one device splits nothing: never part of a dimension's split (else a
         * result wanted as {devices=[8,1,1]} on a mesh data=1 x model=8 reads as (data,
         * model) and differs from the (model) it is computed with: gathered and sliced) */
        if (where < rank && mesh->sizes[a] > 1) t.ax[where][t.n[where]++] = (int8_t)a;
      }
      tpu_strbuf b;
      tpu_strbuf_init(&b);
      tpu__spmd_hlo_text(mesh, &t, rank, &b);
      tpu_sharding ts;
      if (!b.oom && b.s && tpu_sharding_parse(b.s, tpu_noloc(), &ts, &d) == TPU_OK) {
        int same = ts.kind == TPU_SHARD_TILED && ts.ndevices == hs->ndevices && ts.ntile - ts.nrep == rank;
        for (int k = 0; same && k < rank; k++) same = ts.tile[k] == hs->tile[k];
        same = same && !memcmp(ts.devices, hs->devices, sizeof *ts.devices * (size_t)ts.ndevices);
        if (same) {
          *out = t;
          ok = 1;
        }
        tpu_sharding_free(&ts);
      }
      tpu_strbuf_deinit(&b);
    }
  }
  return ok;
}


/* ---- A mesh for GSPMD-form programs ----
 * JAX's GSPMD-form programs name no mesh: their shardings give tile counts over device
 * lists (sharding={devices=[2,4]<=[8]}). The mesh is inferred: candidates are each
 * sharding's tile counts (ones dropped), then the prime factors of the device count; the
 * first whose axes express every sharding in the module wins. */

static int tiled_counts(const char *text, int64_t *sizes, int *n) {
  const char *p = strstr(text, "devices=[");
  if (!p) return 0;
  *n = 0;
  for (p += 9; *p && *p != ']';) {
    char *e;
    long long t = strtoll(p, &e, 10);
    if (e == p) return 0;
    if (t > 1) {
      if (*n == MAXA) return 0;
      sizes[(*n)++] = t;
    }
    p = *e == ',' ? e + 1 : e;
  }
  return *n > 0;
}

/* Whether every array sharding in m reads on `mesh`. */
static int mesh_fits(const tpu_module *m, const tpu_mesh *mesh) {
  for (int c = 0; c < m->ncomps; c++)
    for (int i = 0; i < m->comps[c]->ninstrs; i++) {
      const tpu_instr *in = m->comps[c]->instrs[i];
      const char *v = tpu__spmd_attr(in, "sharding");
      if (!v || !strstr(v, "devices=[") || !tpu_dtype_is_array(in->shape.dtype)) continue;
      dsh h;
      if (!tpu__spmd_from_hlo(mesh, v, in->shape.rank, &h)) return 0;
    }
  return 1;
}

static tpu_status mesh_try(const tpu_module *m, const int64_t *sizes, int n, tpu_mesh *mesh, int *found, tpu_diag *d) {
  memset(mesh, 0, sizeof *mesh);
  for (int a = 0; a < n; a++) {
    char name[16];
    snprintf(name, sizeof name, "d%d", a);
    TPU_TRY(mesh_add(mesh, name, strlen(name), sizes[a], d));
  }
  *found = mesh_fits(m, mesh);
  if (!*found) memset(mesh, 0, sizeof *mesh);
  return TPU_OK;
}

static tpu_status mesh_from_shardings(const tpu_module *m, tpu_mesh *mesh, int *found, tpu_diag *d) {
  int64_t ndev = 1, sizes[MAXA];
  int n;
  tpu_loc where = tpu_noloc();
  for (int c = 0; c < m->ncomps; c++) /* the device count: the largest tiling */
    for (int i = 0; i < m->comps[c]->ninstrs; i++) {
      const char *v = tpu__spmd_attr(m->comps[c]->instrs[i], "sharding");
      int64_t t = 1;
      if (!v || !tiled_counts(v, sizes, &n)) continue;
      for (int a = 0; a < n; a++) t *= sizes[a];
      if (t > ndev) {
        ndev = t;
        where = m->comps[c]->instrs[i]->loc;
      }
    }
  if (ndev == 1) return TPU_OK;
  for (int c = 0; c < m->ncomps; c++)
    for (int i = 0; i < m->comps[c]->ninstrs; i++) {
      const char *v = tpu__spmd_attr(m->comps[c]->instrs[i], "sharding");
      int64_t t = 1;
      if (!v || !tiled_counts(v, sizes, &n)) continue;
      for (int a = 0; a < n; a++) t *= sizes[a];
      if (t == ndev) TPU_TRY(mesh_try(m, sizes, n, mesh, found, d));
      if (*found) return TPU_OK;
    }
  n = 0; /* prime factors, largest first */
  int64_t r = ndev;
  for (int64_t f = 2; r > 1 && n < MAXA; f++)
    while (r % f == 0 && n < MAXA) {
      sizes[n++] = f;
      r /= f;
    }
  if (r == 1) {
    for (int a = 0; a < n / 2; a++) {
      int64_t t = sizes[a];
      sizes[a] = sizes[n - 1 - a];
      sizes[n - 1 - a] = t;
    }
    TPU_TRY(mesh_try(m, sizes, n, mesh, found, d));
    if (*found) return TPU_OK;
  }
  return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, where,
                  "the module's shardings name %lld devices but no mesh that expresses them all was found; "
                  "give one with --mesh NAME=SIZE,...",
                  (long long)ndev);
}
