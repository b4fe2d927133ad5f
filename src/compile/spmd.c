/* Pass `spmd-partition`: sharding propagation and partitioning of the entry computation.
 *
 * Shardings are kept in mesh-axes form: for every dimension of an array, the mesh axes it
 * is split over (major first); axes not named anywhere replicate it. The pass walks the
 * entry computation once, operands before users, and for each op picks its result
 * sharding from its operands' (elementwise ops keep the most split operand's; broadcast,
 * transpose and reshape carry the split dimensions along; dot keeps batch and free
 * dimensions and turns split contracting dimensions into partial sums; reduce turns split
 * reduced dimensions into partial results), reshards the operands that do not match, and
 * emits the op on per-chip shapes followed by the collective it needs:
 *   - a split contracting or reduced dimension: a local dot / reduce, then an all-reduce
 *     over the axes that split it;
 *   - a dimension split in the value but not in the use: an all-gather over those axes;
 *   - a dimension split in the use but not in the value: each chip slices its own block
 *     (dynamic-slice at an offset computed from partition-id; no communication).
 * Every other op (control flow, gather/scatter, sort, convolution, slicing, padding ...)
 * runs replicated: its operands are gathered whole first. So values are always those of
 * the unpartitioned program; only what is split differs from XLA's choices.
 * shard_map regions (SPMDFullToShardShape ... SPMDShardToFullShape, `manual` shardings)
 * are kept as written: their ops already work on one chip's block. */
#include "compile/spmd.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strbuf.h"
#include "chip/chip.h"
#include "compile/hlo_passes.h"
#include "ir/build.h"
#include "ir/collective.h"
#include "ir/verify.h"
#include "pod/sharding.h"

#define MAXA TPU_MESH_MAX_AXES

/* ---- Meshes ---- */

void tpu_mesh_price_for(tpu_mesh *mesh, const tpu_chip *chip) {
  mesh->step_bytes = chip ? chip->ici_bw_per_link * chip->ici_latency_s : 45e9 * 1e-6;
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

typedef struct {
  int8_t n[TPU_MAX_RANK];
  int8_t ax[TPU_MAX_RANK][MAXA];
  int manual; /* a shard_map value: already one chip's block */
} dsh;

static int64_t factor(const tpu_mesh *mesh, const dsh *s, int k) {
  int64_t f = 1;
  for (int i = 0; i < s->n[k]; i++) f *= mesh->sizes[s->ax[k][i]];
  return f;
}

static int is_split(const dsh *s, int rank) {
  for (int k = 0; k < rank; k++)
    if (s->n[k]) return 1;
  return 0;
}

static int same_dim(const dsh *a, int ka, const dsh *b, int kb) {
  return a->n[ka] == b->n[kb] && !memcmp(a->ax[ka], b->ax[kb], (size_t)a->n[ka]);
}

/* "[{"x"}, {}, {"y","z"}]" (sdy dimension shardings) into s for rank dims. */
static int parse_sdy_dims(const char *p, const tpu_mesh *mesh, int rank, dsh *s) {
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
      int a = -1;
      for (int i = 0; i < mesh->naxes; i++)
        if (!strcmp(mesh->names[i], name)) a = i;
      if (a < 0 || s->n[k] == MAXA) return 0;
      s->ax[k][s->n[k]++] = (int8_t)a;
    }
    k++;
  }
  return k == rank;
}

/* The tile assignment of s (tile dims, device list, replication) as HLO sharding text. */
static void hlo_text(const tpu_mesh *mesh, const dsh *s, int rank, tpu_strbuf *b) {
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
static int from_hlo(const tpu_mesh *mesh, const char *text, int rank, dsh *out) {
  tpu_sharding hs;
  tpu_diag d;
  if (tpu_sharding_parse(text, tpu_noloc(), &hs, &d) != TPU_OK) return 0;
  int ok = 0;
  memset(out, 0, sizeof *out);
  if (hs.kind == TPU_SHARD_REPLICATED) ok = 1;
  else if (hs.kind == TPU_SHARD_MANUAL) ok = out->manual = 1;
  else if (hs.kind == TPU_SHARD_TILED && hs.ntile - hs.nrep == rank) {
    tpu_strbuf want;
    tpu_strbuf_init(&want);
    tpu_sharding canon; /* the parsed form printed back as an explicit list, to compare */
    (void)canon;
    int64_t combos = 1;
    for (int a = 0; a < mesh->naxes; a++) combos *= rank + 1;
    for (int64_t c = 0; c < combos && !ok; c++) {
      dsh t;
      memset(&t, 0, sizeof t);
      int64_t r = c;
      for (int a = 0; a < mesh->naxes; a++) {
        int where = (int)(r % (rank + 1));
        r /= rank + 1;
        if (where < rank) t.ax[where][t.n[where]++] = (int8_t)a;
      }
      tpu_strbuf b;
      tpu_strbuf_init(&b);
      hlo_text(mesh, &t, rank, &b);
      tpu_sharding ts;
      if (!b.oom && b.s && tpu_sharding_parse(b.s, tpu_noloc(), &ts, &d) == TPU_OK) {
        int same = ts.kind == TPU_SHARD_TILED && ts.ndevices == hs.ndevices && ts.ntile - ts.nrep == rank;
        for (int k = 0; same && k < rank; k++) same = ts.tile[k] == hs.tile[k];
        same = same && !memcmp(ts.devices, hs.devices, sizeof *ts.devices * (size_t)ts.ndevices);
        if (same) {
          *out = t;
          ok = 1;
        }
        tpu_sharding_free(&ts);
      } else if (!b.oom && b.s && !strcmp(b.s, "{replicated}")) {
        /* cannot equal a tiled sharding */
      }
      tpu_strbuf_deinit(&b);
    }
    tpu_strbuf_deinit(&want);
  }
  tpu_sharding_free(&hs);
  return ok;
}

/* ---- The pass ---- */

typedef struct {
  tpu_builder b;
  tpu_diag *d;
  tpu_module *m;
  const tpu_mesh *mesh;
  tpu_comp *old, *c;       /* the entry, and the partitioned one being built */
  tpu_instr **val;         /* old id -> its per-chip value */
  dsh *sh;                 /* old id -> its sharding */
  dsh **tsh;               /* old id -> its elements' shardings when it is a tuple of arrays (NULL: whole) */
  dsh **hint;              /* entry's old id of a while -> the splits its results are used with (NULL: none) */
  tpu_instr *pos;          /* this chip's mesh position (s32[]), built on first use */
  int channel;
  tpu_comp *adders[16];    /* add computations by dtype, for partial sums */
  struct {                 /* the all-reduces of partial sums this pass made, and their axes */
    const tpu_instr *ar;
    int8_t axes[MAXA];
    int n;
  } sums[256];
  int nsums;
  /* The entry's collectives emitted so far (the first 64), by kind and mesh axes (a bit per
   * axis); dep[old id]: which of them an entry value depends on (a bit per collective);
   * cur_bits: those emitted while partitioning the current entry instruction. */
  struct {
    tpu_opcode op;
    unsigned axes;
  } emitted[64];
  int nemitted;
  uint64_t *dep, cur_bits;
  struct { /* dot operands gathered as bf16 (dot_operand_bf16), reused by later dots */
    const tpu_comp *c;
    const tpu_instr *v; /* the operand's per-chip value */
    dsh to;
    tpu_instr *out;
  } bf16s[32];
  int nbf16s;
} sp;

static const char *attr(const tpu_instr *in, const char *name) {
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, name)) return in->attrs[i].value;
  return NULL;
}

static int target_is(const tpu_instr *in, const char *t) {
  if (in->op != TPU_OP_CUSTOM_CALL) return 0;
  const char *v = attr(in, "custom_call_target");
  if (!v) return 0;
  size_t n = strlen(t);
  if (*v == '"') v++;
  return !strncmp(v, t, n) && (v[n] == '"' || v[n] == 0);
}

/* The sharding an instruction is annotated with (sdy form first, then HLO form). */
static int annotation_k(const sp *s, const tpu_instr *in, int k, int rank, dsh *out) {
  const char *fa = attr(in, "frontend_attributes");
  if (fa) {
    const char *p = k == 0 ? strstr(fa, "#sdy.sharding<") : NULL;
    if (!p) { /* per value: the k-th "<@mesh, [...]>" */
      p = strstr(fa, "#sdy.sharding_per_value<");
      for (int i = 0; p && i <= k; i++) {
        p = strstr(p + 1, "<@");
      }
      if (p) p--;
    }
    if (p) {
      const char *q = strchr(p, ',');
      if (q && parse_sdy_dims(q + 1, s->mesh, rank, out)) return 1;
    }
  }
  const char *h = k == 0 ? attr(in, "sharding") : NULL;
  if (h && from_hlo(s->mesh, h, rank, out)) return 1;
  return 0;
}

static int annotation(const sp *s, const tpu_instr *in, int rank, dsh *out) { return annotation_k(s, in, 0, rank, out); }

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
      const char *v = attr(in, "sharding");
      if (!v || !strstr(v, "devices=[") || !tpu_dtype_is_array(in->shape.dtype)) continue;
      dsh h;
      if (!from_hlo(mesh, v, in->shape.rank, &h)) return 0;
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
      const char *v = attr(m->comps[c]->instrs[i], "sharding");
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
      const char *v = attr(m->comps[c]->instrs[i], "sharding");
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

static tpu_status fail_at(sp *s, const tpu_instr *in, const char *what) {
  return TPU_FAIL(s->d, TPU_ERR_UNSUPPORTED, in->loc, "spmd-partition: '%s' (%s): %s", tpu_instr_user_name(in),
                  tpu_op_name(in->op), what);
}

static tpu_status instr(sp *s, tpu_opcode op, const char *hint, const tpu_shape *shape, tpu_instr *const *ops, int n,
                        tpu_loc loc, tpu_instr **out) {
  return tpu_build_instr(&s->b, s->c, op, hint, shape, ops, n, loc, out);
}

static tpu_shape scalar(tpu_dtype t) {
  tpu_shape sc;
  memset(&sc, 0, sizeof sc);
  sc.dtype = t;
  return sc;
}

static tpu_status const_s32(sp *s, int64_t v, tpu_instr **out) {
  tpu_tensor t;
  TPU_TRY(tpu_tensor_alloc(&t, TPU_S32, 0, NULL, s->d));
  tpu_tensor_set_i64(&t, 0, v);
  return tpu_build_constant(&s->b, s->c, "spmd.c", &t, NULL, out);
}

/* This chip's position in the mesh (s32[]): partition-id, through the mesh's device list. */
static tpu_status position(sp *s, tpu_loc loc, tpu_instr **out) {
  if (s->pos) {
    *out = s->pos;
    return TPU_OK;
  }
  tpu_shape u = scalar(TPU_U32), i32 = scalar(TPU_S32);
  tpu_instr *pid, *cv;
  TPU_TRY(instr(s, TPU_OP_PARTITION_ID, "spmd.pid", &u, NULL, 0, loc, &pid));
  TPU_TRY(instr(s, TPU_OP_CONVERT, "spmd.pid", &i32, &pid, 1, loc, &cv));
  if (s->mesh->ids) { /* position = inverse[device] */
    tpu_tensor t;
    int64_t n = s->mesh->ndev;
    TPU_TRY(tpu_tensor_alloc(&t, TPU_S32, 1, &n, s->d));
    for (int64_t p = 0; p < n; p++) tpu_tensor_set_i64(&t, s->mesh->ids[p], p);
    tpu_instr *tab, *ds, *args[2];
    TPU_TRY(tpu_build_constant(&s->b, s->c, "spmd.positions", &t, NULL, &tab));
    tpu_shape one = i32;
    one.rank = 1;
    one.dims[0] = 1;
    args[0] = tab;
    args[1] = cv;
    TPU_TRY(instr(s, TPU_OP_DYNAMIC_SLICE, "spmd.pos", &one, args, 2, loc, &ds));
    TPU_TRY(tpu_build_set_attr(&s->b, ds, "dynamic_slice_sizes", "{1}"));
    TPU_TRY(instr(s, TPU_OP_RESHAPE, "spmd.pos", &i32, &ds, 1, loc, &cv));
  }
  s->pos = cv;
  *out = cv;
  return TPU_OK;
}

/* This chip's block index along the axes of one dimension (s32[]). */
static tpu_status block_index(sp *s, const int8_t *axes, int n, tpu_loc loc, tpu_instr **out) {
  tpu_instr *pos, *acc = NULL;
  TPU_TRY(position(s, loc, &pos));
  tpu_shape i32 = scalar(TPU_S32);
  for (int i = 0; i < n; i++) {
    int a = axes[i];
    int64_t stride = 1;
    for (int b = a + 1; b < s->mesh->naxes; b++) stride *= s->mesh->sizes[b];
    tpu_instr *cs, *cz, *q, *r, *ops[2];
    TPU_TRY(const_s32(s, stride, &cs));
    TPU_TRY(const_s32(s, s->mesh->sizes[a], &cz));
    ops[0] = pos;
    ops[1] = cs;
    TPU_TRY(instr(s, TPU_OP_DIVIDE, "spmd.coord", &i32, ops, 2, loc, &q));
    ops[0] = q;
    ops[1] = cz;
    TPU_TRY(instr(s, TPU_OP_REMAINDER, "spmd.coord", &i32, ops, 2, loc, &r));
    if (!acc) {
      acc = r;
    } else {
      tpu_instr *m, *sum;
      ops[0] = acc;
      ops[1] = cz;
      TPU_TRY(instr(s, TPU_OP_MULTIPLY, "spmd.block", &i32, ops, 2, loc, &m));
      ops[0] = m;
      ops[1] = r;
      TPU_TRY(instr(s, TPU_OP_ADD, "spmd.block", &i32, ops, 2, loc, &sum));
      acc = sum;
    }
  }
  if (!acc) TPU_TRY(const_s32(s, 0, &acc));
  *out = acc;
  return TPU_OK;
}

/* replica_groups text: the devices that differ only in the given axes, ordered by their
 * block index along them (major first). */
static void groups_text(const tpu_mesh *mesh, const int8_t *axes, int n, tpu_strbuf *b) {
  int in[MAXA] = {0};
  int64_t gsize = 1;
  for (int i = 0; i < n; i++) in[axes[i]] = 1, gsize *= mesh->sizes[axes[i]];
  tpu_strbuf_printf(b, "{");
  int64_t ngroups = mesh->ndev / gsize;
  for (int64_t g = 0; g < ngroups; g++) {
    /* g enumerates the other axes' coordinates (mesh order). */
    int64_t c[MAXA] = {0}, r = g;
    for (int a = mesh->naxes - 1; a >= 0; a--)
      if (!in[a]) c[a] = r % mesh->sizes[a], r /= mesh->sizes[a];
    tpu_strbuf_printf(b, "%s{", g ? "," : "");
    for (int64_t j = 0; j < gsize; j++) {
      int64_t rj = j;
      for (int i = n - 1; i >= 0; i--) c[axes[i]] = rj % mesh->sizes[axes[i]], rj /= mesh->sizes[axes[i]];
      int64_t pos = 0;
      for (int a = 0; a < mesh->naxes; a++) pos = pos * mesh->sizes[a] + c[a];
      tpu_strbuf_printf(b, "%s%lld", j ? "," : "", (long long)(mesh->ids ? mesh->ids[pos] : pos));
    }
    tpu_strbuf_printf(b, "}");
  }
  tpu_strbuf_printf(b, "}");
}

static unsigned axes_mask(const int8_t *axes, int n) {
  unsigned m = 0;
  for (int i = 0; i < n; i++) m |= 1u << axes[i];
  return m;
}

static int in_entry(const sp *s) { return s->dep && s->old == s->m->entry; }

/* Whether an entry collective of kind op over `axes` whose input depends on the collectives
 * in `deps` could join one emitted before (combine-collectives merges independent ones). */
static int joins_emitted(const sp *s, tpu_opcode op, unsigned axes, uint64_t deps) {
  if (!in_entry(s)) return 0;
  for (int i = 0; i < s->nemitted; i++)
    if (s->emitted[i].op == op && s->emitted[i].axes == axes && !(deps >> i & 1)) return 1;
  return 0;
}

/* Sets attribute `name` of x to the text built in b (then freed). */
static tpu_status set_attr_text(sp *s, tpu_instr *x, const char *name, tpu_strbuf *b, tpu_loc loc) {
  tpu_status st = b->oom ? TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory") : tpu_build_set_attr(&s->b, x, name, b->s);
  tpu_strbuf_deinit(b);
  return st;
}

static tpu_status set_groups(sp *s, tpu_instr *x, const int8_t *axes, int n) {
  if (in_entry(s) && s->nemitted < 64) {
    s->emitted[s->nemitted].op = x->op;
    s->emitted[s->nemitted].axes = axes_mask(axes, n);
    s->cur_bits |= (uint64_t)1 << s->nemitted++;
  }
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  groups_text(s->mesh, axes, n, &b);
  char ch[32];
  snprintf(ch, sizeof ch, "%d", ++s->channel);
  tpu_status st = b.oom ? TPU_FAIL(s->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory") : TPU_OK;
  if (st == TPU_OK) st = tpu_build_set_attr(&s->b, x, "channel_id", ch);
  if (st == TPU_OK) st = tpu_build_set_attr(&s->b, x, "replica_groups", b.s);
  if (st == TPU_OK) st = tpu_build_set_attr(&s->b, x, "use_global_device_ids", "true");
  tpu_strbuf_deinit(&b);
  return st;
}

/* The local shape of a global shape under a sharding. */
static tpu_shape local_shape(const sp *s, const tpu_shape *g, const dsh *h) {
  tpu_shape l = *g;
  l.has_layout = 0;
  l.layout_tail = NULL;
  if (h->manual) return l;
  for (int k = 0; k < g->rank; k++) l.dims[k] = g->dims[k] / factor(s->mesh, h, k);
  return l;
}

/* all-gather of dimension k (split over the given axes) of x. */
static tpu_status gather_dim(sp *s, tpu_instr *x, int k, const int8_t *axes, int n, tpu_loc loc, tpu_instr **out) {
  tpu_shape r = x->shape;
  int64_t f = 1;
  for (int i = 0; i < n; i++) f *= s->mesh->sizes[axes[i]];
  r.dims[k] *= f;
  r.has_layout = 0;
  TPU_TRY(instr(s, TPU_OP_ALL_GATHER, "spmd.all-gather", &r, &x, 1, loc, out));
  char dims[32];
  snprintf(dims, sizeof dims, "{%d}", k);
  TPU_TRY(tpu_build_set_attr(&s->b, *out, "dimensions", dims));
  return set_groups(s, *out, axes, n);
}

/* This chip's block of dimension k of x, split over the given axes (no communication). */
static tpu_status slice_dim(sp *s, tpu_instr *x, int k, const int8_t *axes, int n, tpu_loc loc, tpu_instr **out) {
  int64_t f = 1;
  for (int i = 0; i < n; i++) f *= s->mesh->sizes[axes[i]];
  int64_t len = x->shape.dims[k] / f;
  tpu_instr *idx, *clen, *off, *zero, *ops[TPU_MAX_RANK + 1];
  TPU_TRY(block_index(s, axes, n, loc, &idx));
  TPU_TRY(const_s32(s, len, &clen));
  tpu_shape i32 = scalar(TPU_S32);
  ops[0] = idx;
  ops[1] = clen;
  TPU_TRY(instr(s, TPU_OP_MULTIPLY, "spmd.offset", &i32, ops, 2, loc, &off));
  TPU_TRY(const_s32(s, 0, &zero));
  ops[0] = x;
  for (int i = 0; i < x->shape.rank; i++) ops[1 + i] = i == k ? off : zero;
  tpu_shape r = x->shape;
  r.dims[k] = len;
  r.has_layout = 0;
  TPU_TRY(instr(s, TPU_OP_DYNAMIC_SLICE, "spmd.slice", &r, ops, 1 + x->shape.rank, loc, out));
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  tpu_strbuf_printf(&b, "{");
  for (int i = 0; i < r.rank; i++) tpu_strbuf_printf(&b, "%s%lld", i ? "," : "", (long long)r.dims[i]);
  tpu_strbuf_printf(&b, "}");
  tpu_status st = set_attr_text(s, *out, "dynamic_slice_sizes", &b, loc);
  return st;
}

/* x (sharded `from`) as sharded `to`. */
/* Moves x's split from dimension i to dimension j over the same axes with one all-to-all
 * (each chip sends every other chip the part of its block that chip keeps): dimension j is
 * cut into (f, n_j/f), the all-to-all exchanges along the f pieces, and the pieces, which
 * arrive in block order of dimension i, are moved in front of it and merged. */
static tpu_status all_to_all_move(sp *s, tpu_instr *x, int i, int j, const int8_t *axes, int n, tpu_loc loc,
                                  tpu_instr **out) {
  int64_t f = 1;
  for (int a = 0; a < n; a++) f *= s->mesh->sizes[axes[a]];
  int rank = x->shape.rank;
  tpu_shape r = x->shape; /* [.., f, n_j/f, ..] */
  r.has_layout = 0;
  r.rank = rank + 1;
  for (int k = 0, d = 0; k < rank; k++) {
    if (k == j) {
      r.dims[d++] = f;
      r.dims[d++] = x->shape.dims[j] / f;
    } else {
      r.dims[d++] = x->shape.dims[k];
    }
  }
  tpu_instr *y, *z, *t;
  TPU_TRY(instr(s, TPU_OP_RESHAPE, "spmd.reshape", &r, &x, 1, loc, &y));
  TPU_TRY(instr(s, TPU_OP_ALL_TO_ALL, "spmd.all-to-all", &r, &y, 1, loc, &z));
  char dims[32];
  snprintf(dims, sizeof dims, "{%d}", j);
  TPU_TRY(tpu_build_set_attr(&s->b, z, "dimensions", dims));
  TPU_TRY(set_groups(s, z, axes, n));
  /* Transpose the piece index (at j) to just before dimension i (at i' in r). */
  int ip = i < j ? i : i + 1, perm[TPU_MAX_RANK], np = 0;
  for (int k = 0; k < r.rank; k++) {
    if (k == j) continue;
    if (k == ip) perm[np++] = j;
    perm[np++] = k;
  }
  tpu_shape ts = r;
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  tpu_strbuf_printf(&b, "{");
  for (int k = 0; k < r.rank; k++) {
    ts.dims[k] = r.dims[perm[k]];
    tpu_strbuf_printf(&b, "%s%d", k ? "," : "", perm[k]);
  }
  tpu_strbuf_printf(&b, "}");
  tpu_status st = b.oom ? TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory")
                        : instr(s, TPU_OP_TRANSPOSE, "spmd.transpose", &ts, &z, 1, loc, &t);
  if (st == TPU_OK) st = tpu_build_set_attr(&s->b, t, "dimensions", b.s);
  tpu_strbuf_deinit(&b);
  TPU_TRY(st);
  tpu_shape m = x->shape; /* dimension i whole, j split */
  m.has_layout = 0;
  m.dims[i] *= f;
  m.dims[j] /= f;
  return instr(s, TPU_OP_RESHAPE, "spmd.reshape", &m, &t, 1, loc, out);
}

/* Block index along dimension k of mesh position p under sharding h (its axes, major first). */
static int64_t block_at(const tpu_mesh *mesh, const dsh *h, int k, int64_t p) {
  int64_t b = 0;
  for (int i = 0; i < h->n[k]; i++) {
    int a = h->ax[k][i];
    int64_t stride = 1;
    for (int j = a + 1; j < mesh->naxes; j++) stride *= mesh->sizes[j];
    b = b * mesh->sizes[a] + (p / stride) % mesh->sizes[a];
  }
  return b;
}

/* Blocks of the same sizes held by other chips (P(x,y) -> P(y,x)): one collective-permute,
 * each chip receiving the block it needs from a chip that holds it. Returns 1 in *done when
 * it applies (every chip finds a distinct source). */
static tpu_status permute_blocks(sp *s, tpu_instr *x, const dsh *from, const dsh *to, tpu_loc loc, tpu_instr **out,
                                 int *done) {
  *done = 0;
  int rank = x->shape.rank;
  for (int k = 0; k < rank; k++)
    if (factor(s->mesh, from, k) != factor(s->mesh, to, k)) return TPU_OK;
  int64_t n = s->mesh->ndev;
  if (n > 4096) return TPU_OK;
  int64_t *src = tpu_calloc((size_t)n, sizeof *src);
  char *used = tpu_calloc((size_t)n, 1);
  if (!src || !used) {
    tpu_free(src);
    tpu_free(used);
    return TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory");
  }
  int ok = 1;
  for (int64_t q = 0; q < n && ok; q++) {
    src[q] = -1;
    for (int64_t t = 0; t < n && src[q] < 0; t++) {
      int64_t p = (q + t) % n; /* itself first */
      if (used[p]) continue;
      int same = 1;
      for (int k = 0; k < rank && same; k++) same = block_at(s->mesh, from, k, p) == block_at(s->mesh, to, k, q);
      if (same) src[q] = p, used[p] = 1;
    }
    ok = src[q] >= 0;
  }
  int moves = 0;
  for (int64_t q = 0; ok && q < n; q++) moves |= src[q] != q;
  ok = ok && moves;
  tpu_status st = TPU_OK;
  if (ok) {
    tpu_strbuf b;
    tpu_strbuf_init(&b);
    tpu_strbuf_printf(&b, "{");
    for (int64_t q = 0; q < n; q++) {
      int64_t a = s->mesh->ids ? s->mesh->ids[src[q]] : src[q], c = s->mesh->ids ? s->mesh->ids[q] : q;
      tpu_strbuf_printf(&b, "%s{%lld,%lld}", q ? "," : "", (long long)a, (long long)c);
    }
    tpu_strbuf_printf(&b, "}");
    tpu_shape l = x->shape;
    l.has_layout = 0;
    char ch[32];
    snprintf(ch, sizeof ch, "%d", ++s->channel);
    st = b.oom ? TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory")
               : instr(s, TPU_OP_COLLECTIVE_PERMUTE, "spmd.collective-permute", &l, &x, 1, loc, out);
    if (st == TPU_OK) st = tpu_build_set_attr(&s->b, *out, "channel_id", ch);
    if (st == TPU_OK) st = tpu_build_set_attr(&s->b, *out, "source_target_pairs", b.s);
    tpu_strbuf_deinit(&b);
    *done = st == TPU_OK;
  }
  tpu_free(src);
  tpu_free(used);
  return st;
}

/* The dimension of a movement op's operand that result dimension k comes from (-1: none
 * that keeps it whole): transposes permute, reshapes that only add or drop size-1
 * dimensions keep the order of the others, copies and converts keep every dimension. */
static int movement_dim(const tpu_instr *y, int k) {
  const tpu_shape *r = &y->shape, *o = &y->operands[0]->shape;
  switch (y->op) {
    case TPU_OP_TRANSPOSE: return k < y->dimensions.n ? (int)y->dimensions.v[k] : -1;
    case TPU_OP_COPY:
    case TPU_OP_CONVERT: return k;
    case TPU_OP_RESHAPE:
    case TPU_OP_BITCAST: {
      if (r->dims[k] == 1) return -1;
      int want = 0, j = 0, i = 0; /* k is the want-th dimension larger than 1 */
      for (int t = 0; t < k; t++) want += r->dims[t] != 1;
      for (int t = 0; t < r->rank; t++) i += r->dims[t] != 1;
      for (int t = 0; t < o->rank; t++) j += o->dims[t] != 1;
      if (i != j) return -1;
      for (int t = 0, seen = 0; t < o->rank; t++) {
        if (o->dims[t] == 1) continue;
        if (seen++ == want) return o->dims[t] == r->dims[k] ? t : -1;
      }
      return -1;
    }
    default: return -1;
  }
}

/* A sum wanted split after data movement (the transposes and reshapes between a weight
 * gradient's dot and the update that takes its block, a gradient passed through a call's
 * tuple): the partial sums are reduce-scattered along the dimension the split comes from,
 * and the movement is applied to the block. *done 0 when x is not such a value. */
static tpu_status moved_sum_scatter(sp *s, tpu_instr *x, const dsh *from, const dsh *to, tpu_loc loc,
                                    tpu_instr **out, int *done) {
  *done = 0;
  int rank = x->shape.rank, k = -1;
  for (int j = 0; j < rank; j++) {
    if (same_dim(from, j, to, j)) continue;
    if (from->n[j] || k >= 0) return TPU_OK;
    k = j;
  }
  if (k < 0) return TPU_OK;
  tpu_instr *chain[8], *y = x;
  int kk[8], nc = 0, kd = k;
  while (y->op != TPU_OP_ALL_REDUCE) {
    if (nc == 8) return TPU_OK;
    if (y->op == TPU_OP_GET_TUPLE_ELEMENT && y->operands[0]->op == TPU_OP_TUPLE) {
      y = y->operands[0]->operands[y->index];
      continue;
    }
    if (y->noperands != 1 || !tpu_dtype_is_array(y->shape.dtype)) return TPU_OK;
    int prev = movement_dim(y, kd);
    if (prev < 0) return TPU_OK;
    chain[nc] = y;
    kk[nc++] = kd;
    kd = prev;
    y = y->operands[0];
  }
  if (!nc) return TPU_OK; /* the all-reduce itself: reshard's own case */
  int i = 0;
  while (i < s->nsums && s->sums[i].ar != y) i++;
  if (i == s->nsums || to->n[k] != s->sums[i].n || memcmp(to->ax[k], s->sums[i].axes, (size_t)to->n[k]))
    return TPU_OK;
  int64_t f = factor(s->mesh, to, k);
  if (y->shape.dims[kd] % f) return TPU_OK;
  tpu_shape r = y->shape;
  r.dims[kd] /= f;
  r.has_layout = 0;
  r.layout_tail = NULL;
  tpu_instr *part = y->operands[0], *z;
  TPU_TRY(instr(s, TPU_OP_REDUCE_SCATTER, "spmd.reduce-scatter", &r, &part, 1, loc, &z));
  char dims[32];
  snprintf(dims, sizeof dims, "{%d}", kd);
  TPU_TRY(tpu_build_set_attr(&s->b, z, "dimensions", dims));
  TPU_TRY(tpu_build_set_attr(&s->b, z, "to_apply", y->to_apply->name));
  TPU_TRY(set_groups(s, z, s->sums[i].axes, s->sums[i].n));
  for (int c = nc - 1; c >= 0; c--) { /* the movement, on the block */
    tpu_instr *m;
    TPU_TRY(tpu_build_clone_instr(&s->b, s->c, chain[c], &z, &m));
    m->shape.has_layout = 0;
    m->shape.layout_tail = NULL;
    m->shape.dims[kk[c]] /= f;
    z = m;
  }
  *out = z;
  *done = 1;
  return TPU_OK;
}

static tpu_status reshard(sp *s, tpu_instr *x, const dsh *from, const dsh *to, tpu_loc loc, tpu_instr **out) {
  *out = x;
  if (!tpu_dtype_is_array(x->shape.dtype) || from->manual || to->manual) return TPU_OK;
  int rank = x->shape.rank;
  /* A sum of partial results that is wanted split along one more dimension over the same
   * axes it was summed over: a reduce-scatter of the partial sums (half an all-reduce's
   * bytes) instead of the all-reduce and a slice (FSDP's gradients). */
  for (int i = 0; i < s->nsums && x->op == TPU_OP_ALL_REDUCE; i++) {
    if (s->sums[i].ar != x) continue;
    int k = -1, ok = 1;
    for (int j = 0; j < rank && ok; j++) {
      if (same_dim(from, j, to, j)) continue;
      if (from->n[j] || k >= 0) ok = 0;
      k = j;
    }
    if (!ok || k < 0 || to->n[k] != s->sums[i].n || memcmp(to->ax[k], s->sums[i].axes, (size_t)to->n[k])) break;
    int64_t f = factor(s->mesh, to, k);
    if (x->shape.dims[k] % f) break;
    tpu_shape r = x->shape;
    r.dims[k] /= f;
    r.has_layout = 0;
    tpu_instr *part = x->operands[0];
    TPU_TRY(instr(s, TPU_OP_REDUCE_SCATTER, "spmd.reduce-scatter", &r, &part, 1, loc, out));
    char dims[32];
    snprintf(dims, sizeof dims, "{%d}", k);
    TPU_TRY(tpu_build_set_attr(&s->b, *out, "dimensions", dims));
    TPU_TRY(tpu_build_set_attr(&s->b, *out, "to_apply", x->to_apply->name));
    return set_groups(s, *out, s->sums[i].axes, s->sums[i].n);
  }
  int moved;
  TPU_TRY(moved_sum_scatter(s, x, from, to, loc, out, &moved));
  if (moved) return TPU_OK;
  int bcast_only = x->op == TPU_OP_BROADCAST && x->noperands == 1;
  for (int k = 0; bcast_only && k < rank; k++) {
    int mapped = 0;
    for (int j = 0; j < x->dimensions.n; j++) mapped |= x->dimensions.v[j] == k;
    bcast_only = mapped ? same_dim(from, k, to, k) : !from->n[k];
  }
  if (bcast_only) {
    /* A broadcast split only along the dimensions it adds (a scalar's, a row's copies): each
     * chip broadcasts to its block, no need to build the whole array first. */
    tpu_shape l = x->shape; /* x's block under `from`, split further along added dimensions */
    l.has_layout = 0;
    l.layout_tail = NULL;
    for (int k = 0; k < rank; k++) l.dims[k] /= factor(s->mesh, to, k) / factor(s->mesh, from, k);
    TPU_TRY(tpu_build_clone_instr(&s->b, s->c, x, x->operands, out));
    (*out)->shape = l;
    return TPU_OK;
  }
  int ai = -1, aj = -1, other = 0; /* a split moving from dimension ai to aj on the same axes */
  for (int k = 0; k < rank; k++) {
    if (same_dim(from, k, to, k)) continue;
    if (from->n[k] && !to->n[k] && ai < 0) ai = k;
    else if (!from->n[k] && to->n[k] && aj < 0) aj = k;
    else other = 1;
  }
  if (!other && ai >= 0 && aj >= 0 && from->n[ai] == to->n[aj] && !memcmp(from->ax[ai], to->ax[aj], (size_t)to->n[aj]) &&
      rank < TPU_MAX_RANK && x->shape.dims[aj] % factor(s->mesh, to, aj) == 0)
    return all_to_all_move(s, x, ai, aj, to->ax[aj], to->n[aj], loc, out);
  int same = 1;
  for (int k = 0; k < rank; k++) same &= same_dim(from, k, to, k);
  if (same) return TPU_OK;
  if (is_split(from, rank) && is_split(to, rank)) {
    int done;
    TPU_TRY(permute_blocks(s, x, from, to, loc, out, &done));
    if (done) return TPU_OK;
  }
  dsh cur = *from;
  /* Slices first where the axes are free (less to gather), then gathers, then the rest. */
  int busy[MAXA] = {0};
  for (int k = 0; k < rank; k++)
    for (int i = 0; i < cur.n[k]; i++) busy[cur.ax[k][i]] = 1;
  for (int k = 0; k < rank; k++) {
    if (!to->n[k] || cur.n[k]) continue;
    int free_axes = 1;
    for (int i = 0; i < to->n[k]; i++) free_axes &= !busy[to->ax[k][i]];
    if (!free_axes) continue;
    TPU_TRY(slice_dim(s, *out, k, to->ax[k], to->n[k], loc, out));
    cur.n[k] = to->n[k];
    memcpy(cur.ax[k], to->ax[k], MAXA);
    for (int i = 0; i < to->n[k]; i++) busy[to->ax[k][i]] = 1;
  }
  for (int k = 0; k < rank; k++)
    if (cur.n[k] && !same_dim(&cur, k, to, k)) {
      TPU_TRY(gather_dim(s, *out, k, cur.ax[k], cur.n[k], loc, out));
      cur.n[k] = 0;
    }
  for (int k = 0; k < rank; k++)
    if (to->n[k] && !cur.n[k]) TPU_TRY(slice_dim(s, *out, k, to->ax[k], to->n[k], loc, out));
  return TPU_OK;
}

static const dsh k_repl = {{0}, {{0}}, 0};

/* A tuple value whose elements are split (el), rebuilt with elements as `to` (NULL: whole). */
static tpu_status reshard_tuple(sp *s, tpu_instr *x, const dsh *el, const dsh *to, tpu_loc loc, tpu_instr **out) {
  int n = x->shape.ntuple;
  tpu_instr **parts = tpu_calloc((size_t)(n + 1), sizeof *parts);
  if (!parts) return TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory");
  tpu_status st = TPU_OK;
  int changed = 0;
  for (int i = 0; st == TPU_OK && i < n; i++) {
    const dsh *want = to ? &to[i] : &k_repl;
    if (!tpu_dtype_is_array(x->shape.elems[i].dtype) || !memcmp(&el[i], want, sizeof *want)) continue;
    changed = 1;
  }
  if (!changed) {
    tpu_free(parts);
    *out = x;
    return TPU_OK;
  }
  for (int i = 0; st == TPU_OK && i < n; i++) {
    if (x->op == TPU_OP_TUPLE && x->noperands == n) { /* its elements directly */
      parts[i] = x->operands[i];
      if (tpu_dtype_is_array(x->shape.elems[i].dtype))
        st = reshard(s, parts[i], &el[i], to ? &to[i] : &k_repl, loc, &parts[i]);
      continue;
    }
    st = instr(s, TPU_OP_GET_TUPLE_ELEMENT, "spmd.gte", &x->shape.elems[i], &x, 1, loc, &parts[i]);
    if (st == TPU_OK) {
      char ix[24];
      snprintf(ix, sizeof ix, "%d", i);
      st = tpu_build_set_attr(&s->b, parts[i], "index", ix);
    }
    if (st == TPU_OK && tpu_dtype_is_array(x->shape.elems[i].dtype))
      st = reshard(s, parts[i], &el[i], to ? &to[i] : &k_repl, loc, &parts[i]);
  }
  tpu_shape ts = x->shape;
  if (st == TPU_OK) {
    ts.elems = tpu_arena_alloc(&s->m->arena, sizeof *ts.elems * (size_t)(n + 1));
    if (!ts.elems) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory");
    for (int i = 0; st == TPU_OK && i < n; i++) ts.elems[i] = parts[i]->shape;
  }
  if (st == TPU_OK) st = instr(s, TPU_OP_TUPLE, "spmd.tuple", &ts, parts, n, loc, out);
  tpu_free(parts);
  return st;
}

/* Operand i of old instruction `in` as sharded `to` (a tuple operand: its elements whole). */
static tpu_status operand_as(sp *s, const tpu_instr *in, int i, const dsh *to, tpu_instr **out) {
  const tpu_instr *o = in->operands[i];
  if (s->tsh[o->id]) return reshard_tuple(s, s->val[o->id], s->tsh[o->id], NULL, in->loc, out);
  return reshard(s, s->val[o->id], &s->sh[o->id], to, in->loc, out);
}

/* Whether sharding h fits shape g: every split dimension divides evenly, no axis twice. */
static int fits(const sp *s, const tpu_shape *g, const dsh *h) {
  int seen[MAXA] = {0};
  for (int k = 0; k < g->rank; k++) {
    if (h->n[k] && g->dims[k] % factor(s->mesh, h, k)) return 0;
    for (int i = 0; i < h->n[k]; i++)
      if (seen[h->ax[k][i]]++) return 0;
  }
  return 1;
}

/* Emits a clone of `in` on the given per-chip operands with result sharding h. */
static tpu_status emit_clone(sp *s, const tpu_instr *in, tpu_instr **ops, const dsh *h) {
  tpu_instr *x;
  TPU_TRY(tpu_build_clone_instr(&s->b, s->c, in, ops, &x));
  if (tpu_dtype_is_array(in->shape.dtype)) x->shape = local_shape(s, &in->shape, h);
  s->val[in->id] = x;
  s->sh[in->id] = *h;
  return TPU_OK;
}

/* An op run replicated: every operand gathered whole. */
static tpu_status replicated_op(sp *s, const tpu_instr *in) {
  tpu_instr **ops = tpu_calloc((size_t)(in->noperands + 1), sizeof *ops);
  if (!ops) return TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  int manual = 0;
  for (int i = 0; i < in->noperands; i++) manual |= s->sh[in->operands[i]->id].manual;
  tpu_status st = TPU_OK;
  for (int i = 0; st == TPU_OK && i < in->noperands; i++) st = operand_as(s, in, i, &k_repl, &ops[i]);
  dsh h = k_repl;
  h.manual = manual;
  if (st == TPU_OK) st = emit_clone(s, in, ops, &h);
  tpu_free(ops);
  return st;
}

static int is_elementwise(const tpu_instr *in) {
  switch (tpu_op_class_of(in->op)) {
    case TPU_CLS_UNARY:
    case TPU_CLS_BINARY:
    case TPU_CLS_TERNARY: return 1;
    default: break;
  }
  switch (in->op) {
    case TPU_OP_COMPARE:
    case TPU_OP_SELECT:
    case TPU_OP_CLAMP:
    case TPU_OP_CONVERT:
    case TPU_OP_BITCAST_CONVERT:
    case TPU_OP_IS_FINITE: return 1;
    default: return 0;
  }
}

static int nsplit(const dsh *h, int rank) {
  int n = 0;
  for (int k = 0; k < rank; k++) n += h->n[k];
  return n;
}

static tpu_status elementwise(sp *s, const tpu_instr *in) {
  dsh best = k_repl;
  int bn = -1, manual = 0;
  for (int i = 0; i < in->noperands; i++) {
    const tpu_instr *o = in->operands[i];
    manual |= s->sh[o->id].manual;
    if (o->shape.rank != in->shape.rank) continue;
    int n = nsplit(&s->sh[o->id], o->shape.rank);
    if (n > bn && fits(s, &in->shape, &s->sh[o->id])) bn = n, best = s->sh[o->id];
  }
  if (manual) return replicated_op(s, in);
  tpu_instr *ops[3];
  for (int i = 0; i < in->noperands; i++)
    TPU_TRY(operand_as(s, in, i, in->operands[i]->shape.rank == in->shape.rank ? &best : &k_repl, &ops[i]));
  return emit_clone(s, in, ops, &best);
}

static tpu_status broadcast(sp *s, const tpu_instr *in) {
  const tpu_instr *o = in->operands[0];
  const dsh *oh = &s->sh[o->id];
  if (oh->manual) return replicated_op(s, in);
  dsh h = k_repl;
  for (int i = 0; i < o->shape.rank; i++) {
    int r = (int)in->dimensions.v[i];
    h.n[r] = oh->n[i];
    memcpy(h.ax[r], oh->ax[i], MAXA);
  }
  tpu_instr *x = s->val[o->id];
  return emit_clone(s, in, &x, &h);
}

static tpu_status transpose(sp *s, const tpu_instr *in) {
  const tpu_instr *o = in->operands[0];
  const dsh *oh = &s->sh[o->id];
  if (oh->manual) return replicated_op(s, in);
  dsh h = k_repl;
  for (int i = 0; i < in->shape.rank; i++) {
    int src = (int)in->dimensions.v[i];
    h.n[i] = oh->n[src];
    memcpy(h.ax[i], oh->ax[src], MAXA);
  }
  tpu_instr *x = s->val[o->id];
  return emit_clone(s, in, &x, &h);
}

/* reshape: a split dimension carries over when it starts where a result dimension starts
 * and its block stays whole in it (kept, merged with minor dimensions, or split with the
 * split part major). */
static tpu_status reshape(sp *s, const tpu_instr *in) {
  const tpu_instr *o = in->operands[0];
  const dsh *oh = &s->sh[o->id];
  if (oh->manual) return replicated_op(s, in);
  const tpu_shape *a = &o->shape, *r = &in->shape;
  dsh keep = *oh, h = k_repl;
  for (int k = 0; k < a->rank; k++) {
    if (!oh->n[k]) continue;
    int64_t pre = 1, f = factor(s->mesh, oh, k);
    for (int i = 0; i < k; i++) pre *= a->dims[i];
    int64_t rp = 1;
    int j = 0;
    while (j < r->rank && rp < pre) rp *= r->dims[j++];
    while (j + 1 < r->rank && r->dims[j] == 1 && a->dims[k] != 1) j++; /* new unit dimensions */
    int ok = rp == pre && j < r->rank && r->dims[j] % f == 0 &&
             (r->dims[j] % a->dims[k] == 0 || a->dims[k] % r->dims[j] == 0);
    if (ok) {
      h.n[j] = oh->n[k];
      memcpy(h.ax[j], oh->ax[k], MAXA);
    } else {
      keep.n[k] = 0;
    }
  }
  tpu_instr *x;
  TPU_TRY(operand_as(s, in, 0, &keep, &x));
  if (!fits(s, r, &h)) return replicated_op(s, in);
  return emit_clone(s, in, &x, &h);
}

static int has_axis(const dsh *h, int rank, int a) {
  for (int k = 0; k < rank; k++)
    for (int i = 0; i < h->n[k]; i++)
      if (h->ax[k][i] == a) return 1;
  return 0;
}

/* The add computation for partial sums of dtype t. */
static tpu_status adder(sp *s, tpu_dtype t, tpu_comp **out) {
  if ((unsigned)t < 16 && s->adders[t]) {
    *out = s->adders[t];
    return TPU_OK;
  }
  tpu_comp *c;
  TPU_TRY(tpu_build_comp(&s->b, "spmd.add", s->m->entry, &c));
  tpu_shape sc = scalar(t);
  tpu_instr *p0, *p1, *r, *ops[2];
  TPU_TRY(tpu_build_param(&s->b, c, 0, "a", &sc, &p0));
  TPU_TRY(tpu_build_param(&s->b, c, 1, "b", &sc, &p1));
  ops[0] = p0;
  ops[1] = p1;
  TPU_TRY(tpu_build_instr(&s->b, c, TPU_OP_ADD, "sum", &sc, ops, 2, tpu_noloc(), &r));
  tpu_build_set_root(c, r);
  TPU_TRY(tpu_build_finish(&s->b, c));
  if ((unsigned)t < 16) s->adders[t] = c;
  *out = c;
  return TPU_OK;
}

/* all-reduce of x over the given axes with computation `red`. */
static tpu_status reduce_axes(sp *s, tpu_instr *x, const int8_t *axes, int n, tpu_comp *red, tpu_loc loc,
                              tpu_instr **out) {
  tpu_shape r = x->shape;
  TPU_TRY(instr(s, TPU_OP_ALL_REDUCE, "spmd.all-reduce", &r, &x, 1, loc, out));
  TPU_TRY(tpu_build_set_attr(&s->b, *out, "to_apply", red->name));
  if (s->nsums < 256) { /* remembered: a use that wants a block of it takes a reduce-scatter */
    s->sums[s->nsums].ar = *out;
    memcpy(s->sums[s->nsums].axes, axes, (size_t)n);
    s->sums[s->nsums++].n = n;
  }
  return set_groups(s, *out, axes, n);
}

/* A way to run a dot: the operands' shardings, the result's, and the partial-sum axes. */
typedef struct {
  dsh L, R, out;
  int8_t partial[MAXA];
  int np, valid;
  double cost; /* bytes gathered plus bytes all-reduced, per chip */
} dot_plan;

static double bytes_of(const tpu_shape *g) { return (double)tpu_shape_numel(g) * (double)tpu_dtype_size(g->dtype); }

/* The entry collectives an old value depends on (none inside loops). */
static uint64_t deps_of(const sp *s, const tpu_instr *x) { return in_entry(s) ? s->dep[x->id] : 0; }

/* The latency of a collective over n chips, as bytes (tpu_mesh step_bytes): a ring over n
 * chips takes about n/2 hops each way (docs/pod.md); an all-reduce twice that. Nothing when
 * it could join a collective of its kind over the same axes emitted before, independent of
 * it: combine-collectives merges those (a training step's gradient all-reduces become one,
 * as XLA's combiners make them), so only the first pays the latency. */
static double steps_cost(const sp *s, double n, unsigned axes, uint64_t deps, int all_reduce) {
  if (n <= 1 || joins_emitted(s, all_reduce ? TPU_OP_ALL_REDUCE : TPU_OP_ALL_GATHER, axes, deps)) return 0;
  return s->mesh->step_bytes * ceil(n / 2) * (all_reduce ? 2 : 1);
}

/* Bytes a chip receives to reshard an operand of global shape g from `from` to `to` (the
 * block it ends with, when any split must be undone), plus the collective's latency over
 * the chips of the undone splits. */
/* Whether dot or convolution `in`'s f32 operands travel as bf16 (tpu_mesh bf16_dot_gathers). */
static int bf16_gathers(const sp *s, const tpu_instr *in) {
  return s->mesh->bf16_dot_gathers && (in->op == TPU_OP_DOT || in->op == TPU_OP_CONVOLUTION) &&
         in->precision[0] == TPU_PREC_CFG_DEFAULT && in->precision[1] == TPU_PREC_CFG_DEFAULT;
}

static double gather_cost(const sp *s, const tpu_instr *x, const dsh *from, const dsh *to) {
  const tpu_shape *g = &x->shape;
  double f = 1, group = 1;
  unsigned axes = 0;
  for (int k = 0; k < g->rank; k++) {
    if (from->n[k] && !same_dim(from, k, to, k)) {
      group *= (double)factor(s->mesh, from, k);
      axes |= axes_mask(from->ax[k], from->n[k]);
    }
    f *= (double)factor(s->mesh, to, k);
  }
  return group > 1 ? bytes_of(g) / f + steps_cost(s, group, axes, deps_of(s, x), 0) : 0;
}

static void plan_dot(const sp *s, const tpu_instr *in, const dsh *L0, const dsh *R0, dot_plan *p) {
  const tpu_instr *lo = in->operands[0], *ro = in->operands[1];
  const tpu_dot_dims *dd = &in->dot;
  int lr = lo->shape.rank, rr = ro->shape.rank;
  memset(p, 0, sizeof *p);
  p->L = *L0;
  p->R = *R0;
  /* Batch and contracting pairs: the lhs decides (the rhs follows); else the rhs. */
  for (int pass = 0; pass < 2; pass++) {
    const tpu_i64s *la = pass ? &dd->lhs_contract : &dd->lhs_batch;
    const tpu_i64s *ra = pass ? &dd->rhs_contract : &dd->rhs_batch;
    for (int i = 0; i < la->n; i++) {
      int kl = (int)la->v[i], kr = (int)ra->v[i];
      if (p->L.n[kl]) {
        p->R.n[kr] = p->L.n[kl];
        memcpy(p->R.ax[kr], p->L.ax[kl], MAXA);
      } else if (p->R.n[kr]) {
        p->L.n[kl] = p->R.n[kr];
        memcpy(p->L.ax[kl], p->R.ax[kr], MAXA);
      }
      if (pass)
        for (int j = 0; j < p->L.n[kl] && p->np < MAXA; j++) p->partial[p->np++] = p->L.ax[kl][j];
    }
  }
  /* Result dimensions: batch, lhs free, rhs free. */
  int rd = 0;
  for (int i = 0; i < dd->lhs_batch.n; i++, rd++) {
    int kl = (int)dd->lhs_batch.v[i];
    p->out.n[rd] = p->L.n[kl];
    memcpy(p->out.ax[rd], p->L.ax[kl], MAXA);
  }
  for (int pass = 0; pass < 2; pass++) {
    int rank = pass ? rr : lr;
    dsh *X = pass ? &p->R : &p->L;
    const tpu_i64s *b = pass ? &dd->rhs_batch : &dd->lhs_batch, *c = pass ? &dd->rhs_contract : &dd->lhs_contract;
    for (int k = 0; k < rank; k++) {
      int used = 0;
      for (int i = 0; i < b->n; i++) used |= b->v[i] == k;
      for (int i = 0; i < c->n; i++) used |= c->v[i] == k;
      if (used) continue;
      /* A free dimension's axes must not split the other operand too. When both operands'
       * free dimensions use an axis, the lhs keeps it and the rhs's is gathered (attention
       * split along the query sequence gathers K and V). */
      dsh Y = pass ? p->L : p->R;
      if (!pass) { /* the rhs's free dimensions give way */
        const tpu_i64s *yb = &dd->rhs_batch, *yc = &dd->rhs_contract;
        for (int j = 0; j < rr; j++) {
          int yused = 0;
          for (int i = 0; i < yb->n; i++) yused |= yb->v[i] == j;
          for (int i = 0; i < yc->n; i++) yused |= yc->v[i] == j;
          if (!yused) Y.n[j] = 0;
        }
      }
      int clash = 0;
      for (int i = 0; i < X->n[k]; i++) clash |= has_axis(&Y, pass ? lr : rr, X->ax[k][i]);
      if (clash) X->n[k] = 0;
      p->out.n[rd] = X->n[k];
      memcpy(p->out.ax[rd], X->ax[k], MAXA);
      rd++;
    }
  }
  p->valid = fits(s, &lo->shape, &p->L) && fits(s, &ro->shape, &p->R) && fits(s, &in->shape, &p->out);
  for (int i = 0; p->valid && i < p->np; i++) p->valid = !has_axis(&p->out, in->shape.rank, p->partial[i]);
  if (!p->valid) return;
  tpu_shape lout = local_shape(s, &in->shape, &p->out);
  double group = 1;
  for (int i = 0; i < p->np; i++) group *= (double)s->mesh->sizes[p->partial[i]];
  p->cost = gather_cost(s, lo, L0, &p->L) + gather_cost(s, ro, R0, &p->R) +
            (p->np ? 2 * bytes_of(&lout) +
                         steps_cost(s, group, axes_mask(p->partial, p->np), deps_of(s, lo) | deps_of(s, ro), 1)
                   : 0);
}

/* Operand i of a default-precision dot as `to` wants it (operand_as), an f32 operand that
 * must be gathered moving as bf16: converted before the collectives, back to f32 after
 * (exact: the MXU's one bf16 pass rounds it the same way). */
static tpu_status dot_operand_bf16(sp *s, const tpu_instr *in, int i, const dsh *to, tpu_instr **out) {
  const tpu_instr *o = in->operands[i];
  tpu_instr *x = s->val[o->id];
  const dsh *from = &s->sh[o->id];
  if (s->tsh[o->id] || x->shape.dtype != TPU_F32 || from->manual || gather_cost(s, o, from, to) == 0)
    return operand_as(s, in, i, to, out);
  for (int k = 0; k < s->nbf16s; k++)
    if (s->bf16s[k].c == s->c && s->bf16s[k].v == x && !memcmp(&s->bf16s[k].to, to, sizeof *to)) {
      *out = s->bf16s[k].out;
      return TPU_OK;
    }
  tpu_shape b = x->shape, f;
  b.dtype = TPU_BF16;
  b.has_layout = 0;
  b.layout_tail = NULL;
  tpu_instr *xb, *y;
  TPU_TRY(instr(s, TPU_OP_CONVERT, "spmd.to_bf16", &b, &x, 1, in->loc, &xb));
  TPU_TRY(reshard(s, xb, from, to, in->loc, &y));
  f = y->shape;
  f.dtype = TPU_F32;
  TPU_TRY(instr(s, TPU_OP_CONVERT, "spmd.from_bf16", &f, &y, 1, in->loc, out));
  if (s->nbf16s < (int)(sizeof s->bf16s / sizeof s->bf16s[0])) {
    s->bf16s[s->nbf16s].c = s->c;
    s->bf16s[s->nbf16s].v = x;
    s->bf16s[s->nbf16s].to = *to;
    s->bf16s[s->nbf16s++].out = *out;
  }
  return TPU_OK;
}

/* dot: of the ways to run it — keep both operands' splits (split contractions become
 * partial sums), gather the rhs whole, gather the lhs whole, or both — the one that moves
 * the fewest bytes per chip (FSDP: the weights are gathered, the batch stays split). */
static tpu_status dot(sp *s, const tpu_instr *in) {
  const tpu_instr *lo = in->operands[0], *ro = in->operands[1];
  const dsh *lh = &s->sh[lo->id], *rh = &s->sh[ro->id];
  if (lh->manual || rh->manual) return replicated_op(s, in);
  const tpu_dot_dims *dd = &in->dot;
  dot_plan best, p;
  dsh lnc = *lh, rnc = *rh; /* without their contracting splits */
  for (int i = 0; i < dd->lhs_contract.n; i++) lnc.n[dd->lhs_contract.v[i]] = 0;
  for (int i = 0; i < dd->rhs_contract.n; i++) rnc.n[dd->rhs_contract.v[i]] = 0;
  dsh lb = k_repl, rb = k_repl; /* only their batch splits (attention's K and V gathered along
                                 * the sequence but kept split along the batch) */
  for (int i = 0; i < dd->lhs_batch.n; i++) {
    int kl = (int)dd->lhs_batch.v[i], kr = (int)dd->rhs_batch.v[i];
    lb.n[kl] = lh->n[kl];
    memcpy(lb.ax[kl], lh->ax[kl], MAXA);
    rb.n[kr] = rh->n[kr];
    memcpy(rb.ax[kr], rh->ax[kr], MAXA);
  }
  plan_dot(s, in, lh, rh, &best);
  const dsh *cands[6][2] = {{&lnc, &k_repl}, {&k_repl, &rnc}, {&k_repl, &k_repl},
                            {&lnc, &rb},     {&lb, &rnc},     {&lb, &rb}};
  for (int c = 0; c < 6; c++) {
    plan_dot(s, in, cands[c][0], cands[c][1], &p);
    /* The cost of a candidate counts gathering from the operands' real splits. */
    if (p.valid)
      p.cost += gather_cost(s, lo, lh, cands[c][0]) + gather_cost(s, ro, rh, cands[c][1]);
    if (p.valid && (!best.valid || p.cost < best.cost)) best = p;
  }
  /* Plans are chosen on f32 bytes (bf16 transport halves every gather alike; choosing on
   * it would trade a tensor-parallel block's one all-reduce for gathers). */
  int halve = bf16_gathers(s, in);
  if (!best.valid) return replicated_op(s, in);
  tpu_instr *ops[2], *x;
  TPU_TRY(halve ? dot_operand_bf16(s, in, 0, &best.L, &ops[0]) : operand_as(s, in, 0, &best.L, &ops[0]));
  TPU_TRY(halve ? dot_operand_bf16(s, in, 1, &best.R, &ops[1]) : operand_as(s, in, 1, &best.R, &ops[1]));
  TPU_TRY(tpu_build_clone_instr(&s->b, s->c, in, ops, &x));
  x->shape = local_shape(s, &in->shape, &best.out);
  if (best.np) {
    tpu_comp *add;
    TPU_TRY(adder(s, in->shape.dtype, &add));
    TPU_TRY(reduce_axes(s, x, best.partial, best.np, add, in->loc, &x));
  }
  s->val[in->id] = x;
  s->sh[in->id] = best.out;
  return TPU_OK;
}

/* Whether init is the identity of the simple reducer op (so each chip may start from it). */
static int identity_init(const tpu_instr *init, tpu_opcode op) {
  if (init->op != TPU_OP_CONSTANT || !init->literal) return 0;
  double v = tpu_tensor_get_f64(init->literal, 0);
  switch (op) {
    case TPU_OP_ADD:
    case TPU_OP_OR:
    case TPU_OP_XOR: return v == 0;
    case TPU_OP_MULTIPLY:
    case TPU_OP_AND: return v == 1 || (init->shape.dtype == TPU_PRED && v != 0);
    case TPU_OP_MAXIMUM: return v == -__builtin_inf() || (tpu_dtype_is_int(init->shape.dtype) && v <= -2147483648.0);
    case TPU_OP_MINIMUM: return v == __builtin_inf() || (tpu_dtype_is_int(init->shape.dtype) && v >= 2147483647.0);
    default: return 0;
  }
}

/* The reducer opcode of a computation `ROOT r = op(p0, p1)` (add, multiply, max, min, and,
 * or, xor), else TPU_OP_COUNT. */
static tpu_opcode simple_reducer(const tpu_comp *c) {
  const tpu_instr *r = c->root;
  if (c->nparams != 2 || r->noperands != 2 || r->operands[0]->op != TPU_OP_PARAMETER ||
      r->operands[1]->op != TPU_OP_PARAMETER || r->operands[0] == r->operands[1])
    return TPU_OP_COUNT;
  switch (r->op) {
    case TPU_OP_ADD:
    case TPU_OP_MULTIPLY:
    case TPU_OP_MAXIMUM:
    case TPU_OP_MINIMUM:
    case TPU_OP_AND:
    case TPU_OP_OR:
    case TPU_OP_XOR: return r->op;
    default: return TPU_OP_COUNT;
  }
}

static tpu_status reduce(sp *s, const tpu_instr *in) {
  const tpu_instr *o = in->operands[0];
  const dsh *oh = &s->sh[o->id];
  tpu_opcode red = in->to_apply ? simple_reducer(in->to_apply) : TPU_OP_COUNT;
  if (in->noperands != 2 || oh->manual || red == TPU_OP_COUNT || !identity_init(in->operands[1], red) ||
      !is_split(oh, o->shape.rank))
    return replicated_op(s, in);
  dsh h = k_repl;
  int8_t partial[MAXA];
  int np = 0, rd = 0;
  for (int k = 0; k < o->shape.rank; k++) {
    int reduced = 0;
    for (int i = 0; i < in->dimensions.n; i++) reduced |= in->dimensions.v[i] == k;
    if (reduced) {
      for (int i = 0; i < oh->n[k]; i++) partial[np++] = oh->ax[k][i];
    } else {
      h.n[rd] = oh->n[k];
      memcpy(h.ax[rd], oh->ax[k], MAXA);
      rd++;
    }
  }
  tpu_instr *ops[2] = {s->val[o->id], s->val[in->operands[1]->id]}, *x;
  TPU_TRY(tpu_build_clone_instr(&s->b, s->c, in, ops, &x));
  x->shape = local_shape(s, &in->shape, &h);
  if (np) TPU_TRY(reduce_axes(s, x, partial, np, in->to_apply, in->loc, &x));
  s->val[in->id] = x;
  s->sh[in->id] = h;
  return TPU_OK;
}

/* Ops that work along some dimensions independently (slice and pad where a dimension is
 * whole, concatenate off its dimension, dynamic slices where the slice is whole, reverse
 * off its dimensions): those dimensions keep the first operand's split, the others are
 * gathered. Operands of the result's rank follow the same sharding; the rest (indices,
 * padding values) are replicated. */
static tpu_status dimwise(sp *s, const tpu_instr *in, const int *keep) {
  const tpu_instr *o = in->operands[0];
  if (s->sh[o->id].manual || o->shape.rank != in->shape.rank) return replicated_op(s, in);
  /* The most split operand of the result's rank decides (a dynamic-update-slice into a
   * whole buffer takes its update's split). */
  dsh h = k_repl;
  int bn = -1;
  for (int i = 0; i < in->noperands; i++) {
    const tpu_instr *x = in->operands[i];
    if (!tpu_dtype_is_array(x->shape.dtype) || x->shape.rank != in->shape.rank || s->sh[x->id].manual) continue;
    dsh c = s->sh[x->id];
    for (int k = 0; k < in->shape.rank; k++)
      if (!keep[k]) c.n[k] = 0;
    int n = nsplit(&c, in->shape.rank);
    if (n > bn && fits(s, &in->shape, &c) && fits(s, &x->shape, &c)) bn = n, h = c;
  }
  if (!fits(s, &in->shape, &h) || !fits(s, &o->shape, &h)) return replicated_op(s, in);
  tpu_instr **ops = tpu_calloc((size_t)(in->noperands + 1), sizeof *ops);
  if (!ops) return TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  tpu_status st = TPU_OK;
  for (int i = 0; st == TPU_OK && i < in->noperands; i++) {
    const tpu_instr *x = in->operands[i];
    int same = tpu_dtype_is_array(x->shape.dtype) && x->shape.rank == in->shape.rank;
    if (same && !fits(s, &x->shape, &h)) st = TPU_ERR_INVALID;
    else st = operand_as(s, in, i, same ? &h : &k_repl, &ops[i]);
  }
  if (st == TPU_ERR_INVALID) {
    tpu_free(ops);
    return replicated_op(s, in);
  }
  if (st == TPU_OK) st = emit_clone(s, in, ops, &h);
  if (st == TPU_OK && in->op == TPU_OP_DYNAMIC_SLICE) { /* its sizes are per chip now */
    tpu_strbuf b;
    tpu_strbuf_init(&b);
    tpu_strbuf_printf(&b, "{");
    const tpu_shape *l = &s->val[in->id]->shape;
    for (int k = 0; k < l->rank; k++) tpu_strbuf_printf(&b, "%s%lld", k ? "," : "", (long long)l->dims[k]);
    tpu_strbuf_printf(&b, "}");
    st = set_attr_text(s, s->val[in->id], "dynamic_slice_sizes", &b, in->loc);
  }
  if (st == TPU_OK && in->op == TPU_OP_SLICE) { /* kept dimensions are whole: the block's bounds */
    const tpu_shape *l = &s->val[in->id]->shape;
    tpu_strbuf b;
    tpu_strbuf_init(&b);
    tpu_strbuf_printf(&b, "{");
    for (int k = 0; k < l->rank; k++) {
      int64_t lim = h.n[k] ? l->dims[k] : in->slice[k].limit;
      tpu_strbuf_printf(&b, "%s[%lld:%lld", k ? ", " : "", (long long)in->slice[k].start, (long long)lim);
      if (in->slice[k].stride != 1) tpu_strbuf_printf(&b, ":%lld", (long long)in->slice[k].stride);
      tpu_strbuf_printf(&b, "]");
    }
    tpu_strbuf_printf(&b, "}");
    st = set_attr_text(s, s->val[in->id], "slice", &b, in->loc);
  }
  tpu_free(ops);
  return st;
}

static tpu_status dimwise_op(sp *s, const tpu_instr *in) {
  int keep[TPU_MAX_RANK] = {0};
  const tpu_shape *a = &in->operands[0]->shape;
  for (int k = 0; k < in->shape.rank && k < a->rank; k++) {
    switch (in->op) {
      case TPU_OP_SLICE:
        keep[k] = in->slice && in->slice[k].start == 0 && in->slice[k].limit == a->dims[k] && in->slice[k].stride == 1;
        break;
      case TPU_OP_PAD:
        keep[k] = in->padding && !in->padding[k].lo && !in->padding[k].hi && !in->padding[k].interior;
        break;
      case TPU_OP_CONCATENATE: keep[k] = in->dimensions.n == 1 && in->dimensions.v[0] != k; break;
      case TPU_OP_REVERSE: {
        keep[k] = 1;
        for (int i = 0; i < in->dimensions.n; i++) keep[k] &= in->dimensions.v[i] != k;
        break;
      }
      case TPU_OP_DYNAMIC_SLICE:
        keep[k] = k < in->dynamic_slice_sizes.n && in->dynamic_slice_sizes.v[k] == a->dims[k];
        break;
      case TPU_OP_DYNAMIC_UPDATE_SLICE: keep[k] = in->operands[1]->shape.dims[k] == a->dims[k]; break;
      case TPU_OP_REDUCE_WINDOW: { /* a dimension the window does not cross (pooling's batch, features) */
        const tpu_window_dim *w = k < in->nwindow ? &in->window[k] : NULL;
        keep[k] = w && w->size == 1 && w->stride == 1 && !w->pad_lo && !w->pad_hi && w->base_dilation == 1 &&
                  w->window_dilation == 1;
        break;
      }
      default: break;
    }
  }
  return dimwise(s, in, keep);
}

/* sort along one dimension (values, or keys with payloads: argsort): every other dimension
 * keeps its split, the operands all take the most split one's; the sorted dimension is
 * gathered. */
static tpu_status sort_op(sp *s, const tpu_instr *in) {
  const tpu_instr *o = in->operands[0];
  int rank = o->shape.rank, n = in->noperands;
  if (in->dimensions.n != 1 || !tpu_dtype_is_array(o->shape.dtype)) return replicated_op(s, in);
  int sd = (int)in->dimensions.v[0];
  dsh h = k_repl;
  int bn = -1;
  for (int i = 0; i < n; i++) {
    const tpu_instr *x = in->operands[i];
    if (s->sh[x->id].manual || x->shape.rank != rank) return replicated_op(s, in);
    dsh c = s->sh[x->id];
    c.n[sd] = 0;
    if (nsplit(&c, rank) > bn && fits(s, &o->shape, &c)) bn = nsplit(&c, rank), h = c;
  }
  tpu_instr **ops = tpu_calloc((size_t)(n + 1), sizeof *ops);
  dsh *el = n > 1 || in->shape.dtype == TPU_TUPLE ? tpu_arena_alloc(&s->m->arena, sizeof *el * (size_t)(n + 1)) : NULL;
  tpu_status st = ops && (el || (n == 1 && in->shape.dtype != TPU_TUPLE)) ? TPU_OK
                                                                           : TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  for (int i = 0; st == TPU_OK && i < n; i++) st = operand_as(s, in, i, &h, &ops[i]);
  if (st == TPU_OK && !el) {
    st = emit_clone(s, in, ops, &h);
  } else if (st == TPU_OK) {
    st = tpu_build_clone_instr(&s->b, s->c, in, ops, &s->val[in->id]);
    tpu_instr *x = st == TPU_OK ? s->val[in->id] : NULL;
    if (x) {
      x->shape.elems = tpu_arena_alloc(&s->m->arena, sizeof *x->shape.elems * (size_t)(n + 1));
      if (!x->shape.elems) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
      for (int i = 0; st == TPU_OK && i < n; i++) {
        x->shape.elems[i] = local_shape(s, &in->shape.elems[i], &h);
        el[i] = h;
      }
    }
    s->sh[in->id] = k_repl;
    s->tsh[in->id] = el;
  }
  tpu_free(ops);
  return st;
}

/* The result dimension of a gather that indices dimension `d` becomes (-1: none). */
static int gather_out_dim(const tpu_instr *in, int d) {
  const tpu_gather_dims *g = &in->gather;
  if (d == g->index_vector_dim) return -1;
  int want = d - (g->index_vector_dim < d), seen = 0; /* the want-th batch dimension of the result */
  for (int k = 0; k < in->shape.rank; k++) {
    int off = 0;
    for (int i = 0; i < g->offset_dims.n; i++) off |= g->offset_dims.v[i] == k;
    if (off) continue;
    if (seen++ == want) return k;
  }
  return -1;
}

/* The updates dimension of a scatter that indices dimension `d` feeds (-1: none). */
static int scatter_upd_dim(const tpu_instr *in, int d) {
  const tpu_scatter_dims *g = &in->scatter;
  if (d == g->index_vector_dim) return -1;
  const tpu_shape *u = &in->operands[2]->shape;
  int want = d - (g->index_vector_dim < d), seen = 0;
  for (int k = 0; k < u->rank; k++) {
    int win = 0;
    for (int i = 0; i < g->update_window_dims.n; i++) win |= g->update_window_dims.v[i] == k;
    if (win) continue;
    if (seen++ == want) return k;
  }
  return -1;
}

/* A gather that takes whole operand dimensions (slice size = the dimension, no index into
 * it): those keep their split, as the matching offset dimensions of the result; each chip
 * gathers from its block with the indices whole. */
static tpu_status passthrough_gather(sp *s, const tpu_instr *in) {
  const tpu_gather_dims *g = &in->gather;
  const tpu_instr *o = in->operands[0];
  const dsh *oh = &s->sh[o->id];
  dsh O = k_repl, out = k_repl;
  int any = 0, off = 0;
  for (int d = 0; d < o->shape.rank; d++) {
    int collapsed = 0, indexed = 0;
    for (int i = 0; i < g->collapsed_slice_dims.n; i++) collapsed |= g->collapsed_slice_dims.v[i] == d;
    for (int i = 0; i < g->start_index_map.n; i++) indexed |= g->start_index_map.v[i] == d;
    if (collapsed) continue;
    int rd = off < g->offset_dims.n ? (int)g->offset_dims.v[off] : -1; /* offset dims follow the operand's order */
    off++;
    if (!oh->n[d] || indexed || d >= g->slice_sizes.n || g->slice_sizes.v[d] != o->shape.dims[d] || rd < 0) continue;
    O.n[d] = out.n[rd] = oh->n[d];
    memcpy(O.ax[d], oh->ax[d], MAXA);
    memcpy(out.ax[rd], oh->ax[d], MAXA);
    any = 1;
  }
  if (!any || !fits(s, &o->shape, &O) || !fits(s, &in->shape, &out)) return replicated_op(s, in);
  tpu_instr *ops[2];
  TPU_TRY(operand_as(s, in, 0, &O, &ops[0]));
  TPU_TRY(operand_as(s, in, 1, &k_repl, &ops[1]));
  TPU_TRY(emit_clone(s, in, ops, &out));
  tpu_shape l = local_shape(s, &o->shape, &O); /* slice sizes per chip */
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  tpu_strbuf_printf(&b, "{");
  for (int d = 0; d < g->slice_sizes.n; d++)
    tpu_strbuf_printf(&b, "%s%lld", d ? "," : "", (long long)(O.n[d] ? l.dims[d] : g->slice_sizes.v[d]));
  tpu_strbuf_printf(&b, "}");
  tpu_status st = set_attr_text(s, s->val[in->id], "slice_sizes", &b, in->loc);
  return st;
}

/* gather and scatter split along their batching dimensions (a per-example lookup with a
 * split batch: operand_batching_dims / input_batching_dims): each chip gathers from, or
 * scatters into, its own examples; no communication. Anything else runs replicated. */
static tpu_status batched_index_op(sp *s, const tpu_instr *in) {
  int scatter = in->op == TPU_OP_SCATTER;
  if (scatter && in->noperands != 3) return replicated_op(s, in);
  const tpu_i64s *ob = scatter ? &in->scatter.input_batching_dims : &in->gather.operand_batching_dims;
  const tpu_i64s *ib = scatter ? &in->scatter.scatter_indices_batching_dims : &in->gather.start_indices_batching_dims;
  const tpu_instr *o = in->operands[0], *ix = in->operands[1];
  const dsh *oh = &s->sh[o->id], *ih = &s->sh[ix->id];
  if (oh->manual || ih->manual || (scatter && s->sh[in->operands[2]->id].manual)) return replicated_op(s, in);
  if (!scatter && !ob->n) return passthrough_gather(s, in);
  if (!ob->n) return replicated_op(s, in);
  dsh O = k_repl, I = k_repl, U = k_repl, out = k_repl;
  int any = 0;
  for (int i = 0; i < ob->n; i++) {
    int od = (int)ob->v[i], id = (int)ib->v[i];
    const dsh *from = oh->n[od] ? oh : ih;
    int fd = oh->n[od] ? od : id;
    if (!from->n[fd]) continue;
    int rd = scatter ? scatter_upd_dim(in, id) : gather_out_dim(in, id);
    if (rd < 0) return replicated_op(s, in);
    O.n[od] = I.n[id] = from->n[fd];
    memcpy(O.ax[od], from->ax[fd], MAXA);
    memcpy(I.ax[id], from->ax[fd], MAXA);
    if (scatter) {
      U.n[rd] = from->n[fd];
      memcpy(U.ax[rd], from->ax[fd], MAXA);
      out = O;
    } else {
      out.n[rd] = from->n[fd];
      memcpy(out.ax[rd], from->ax[fd], MAXA);
    }
    any = 1;
  }
  if (!any || !fits(s, &o->shape, &O) || !fits(s, &ix->shape, &I) || !fits(s, &in->shape, &out) ||
      (scatter && !fits(s, &in->operands[2]->shape, &U)))
    return replicated_op(s, in);
  tpu_instr *ops[3];
  TPU_TRY(operand_as(s, in, 0, &O, &ops[0]));
  TPU_TRY(operand_as(s, in, 1, &I, &ops[1]));
  if (scatter) TPU_TRY(operand_as(s, in, 2, &U, &ops[2]));
  return emit_clone(s, in, ops, &out);
}

/* Positions (mesh order) of each chip's neighbour one block along axes `ax` (dir +1 or -1;
 * -1 where there is none) into nb. */
static void neighbours(const tpu_mesh *mesh, const dsh *h, int k, int dir, int64_t *nb) {
  int in_ax[MAXA] = {0};
  for (int i = 0; i < h->n[k]; i++) in_ax[h->ax[k][i]] = 1;
  for (int64_t p = 0; p < mesh->ndev; p++) {
    nb[p] = -1;
    int64_t want = block_at(mesh, h, k, p) + dir;
    for (int64_t q = 0; q < mesh->ndev && nb[p] < 0; q++) {
      if (block_at(mesh, h, k, q) != want) continue;
      int same = 1; /* the other axes' coordinates agree */
      for (int a = 0; a < mesh->naxes && same; a++) {
        if (in_ax[a]) continue;
        int64_t stride = 1;
        for (int b = a + 1; b < mesh->naxes; b++) stride *= mesh->sizes[b];
        same = (p / stride) % mesh->sizes[a] == (q / stride) % mesh->sizes[a];
      }
      if (same) nb[p] = q;
    }
  }
}

/* Rows [lo, hi) of dimension d of x (a static slice). */
static tpu_status rows(sp *s, tpu_instr *x, int d, int64_t lo, int64_t hi, tpu_loc loc, tpu_instr **out) {
  tpu_shape r = x->shape;
  r.has_layout = 0;
  r.dims[d] = hi - lo;
  TPU_TRY(instr(s, TPU_OP_SLICE, "spmd.halo", &r, &x, 1, loc, out));
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  tpu_strbuf_printf(&b, "{");
  for (int k = 0; k < r.rank; k++)
    tpu_strbuf_printf(&b, "%s[%lld:%lld]", k ? ", " : "", (long long)(k == d ? lo : 0),
                      (long long)(k == d ? hi : x->shape.dims[k]));
  tpu_strbuf_printf(&b, "}");
  return set_attr_text(s, *out, "slice", &b, loc);
}

/* x sent to each chip's neighbour in direction dir along the split (chips at the edge get
 * zeros: the convolution's zero padding). */
static tpu_status to_neighbour(sp *s, tpu_instr *x, const dsh *h, int k, int dir, tpu_loc loc, tpu_instr **out) {
  int64_t n = s->mesh->ndev, *nb = tpu_calloc((size_t)n, sizeof *nb);
  if (!nb) return TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory");
  neighbours(s->mesh, h, k, dir, nb);
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  tpu_strbuf_printf(&b, "{");
  int first = 1;
  for (int64_t p = 0; p < n; p++) {
    if (nb[p] < 0) continue;
    int64_t a = s->mesh->ids ? s->mesh->ids[p] : p, c = s->mesh->ids ? s->mesh->ids[nb[p]] : nb[p];
    tpu_strbuf_printf(&b, "%s{%lld,%lld}", first ? "" : ",", (long long)a, (long long)c);
    first = 0;
  }
  tpu_strbuf_printf(&b, "}");
  tpu_free(nb);
  tpu_shape l = x->shape;
  l.has_layout = 0;
  char ch[32];
  snprintf(ch, sizeof ch, "%d", ++s->channel);
  tpu_status st = b.oom ? TPU_FAIL(s->d, TPU_ERR_NOMEM, loc, "out of memory")
                        : instr(s, TPU_OP_COLLECTIVE_PERMUTE, "spmd.halo-exchange", &l, &x, 1, loc, out);
  if (st == TPU_OK) st = tpu_build_set_attr(&s->b, *out, "channel_id", ch);
  if (st == TPU_OK) st = tpu_build_set_attr(&s->b, *out, "source_target_pairs", b.s);
  tpu_strbuf_deinit(&b);
  return st;
}

/* A convolution whose input is split along one spatial dimension (a large image or a long
 * sequence over chips): each chip receives the rows its window reaches beyond its block from
 * its neighbours (collective-permutes of the edge rows: the halo), convolves its block with
 * them unpadded in that dimension, and keeps its block of the output. Chips at the edges
 * receive zeros, which are the zero padding. Needs stride 1, no dilation there, and padding
 * that keeps the size (pad_lo + pad_hi = size - 1) no wider than a block. */
/* A halo's rows sent to the neighbour `dir` (to_neighbour), as bf16 when the convolution
 * reads them as bf16 anyway (bf16_gathers): converted before, back to f32 after. */
static tpu_status halo_send(sp *s, const tpu_instr *in, tpu_instr *edge, const dsh *L, int d, int dir,
                            tpu_instr **out) {
  if (!bf16_gathers(s, in) || edge->shape.dtype != TPU_F32) return to_neighbour(s, edge, L, d, dir, in->loc, out);
  tpu_shape b = edge->shape, f;
  b.dtype = TPU_BF16;
  b.has_layout = 0;
  b.layout_tail = NULL;
  tpu_instr *eb, *y;
  TPU_TRY(instr(s, TPU_OP_CONVERT, "spmd.to_bf16", &b, &edge, 1, in->loc, &eb));
  TPU_TRY(to_neighbour(s, eb, L, d, dir, in->loc, &y));
  f = y->shape;
  f.dtype = TPU_F32;
  return instr(s, TPU_OP_CONVERT, "spmd.from_bf16", &f, &y, 1, in->loc, out);
}

static tpu_status spatial_conv(sp *s, const tpu_instr *in, int sd) {
  const tpu_instr *lo = in->operands[0];
  const dsh *lh = &s->sh[lo->id];
  const tpu_conv_dims *cd = &in->conv;
  int d = (int)cd->in_spatial[sd], od = (int)cd->out_spatial[sd];
  const tpu_window_dim *w = sd < in->nwindow ? &in->window[sd] : NULL;
  dsh L = k_repl, out = k_repl;
  L.n[d] = out.n[od] = lh->n[d];
  memcpy(L.ax[d], lh->ax[d], MAXA);
  memcpy(out.ax[od], lh->ax[d], MAXA);
  if (lh->n[cd->in_batch]) { /* a batch split stays */
    L.n[cd->in_batch] = out.n[cd->out_batch] = lh->n[cd->in_batch];
    memcpy(L.ax[cd->in_batch], lh->ax[cd->in_batch], MAXA);
    memcpy(out.ax[cd->out_batch], lh->ax[cd->in_batch], MAXA);
  }
  if (!w || w->stride != 1 || w->base_dilation != 1 || w->window_dilation != 1 || w->pad_lo < 0 || w->pad_hi < 0 ||
      w->pad_lo + w->pad_hi != w->size - 1 || !fits(s, &lo->shape, &L) || !fits(s, &in->shape, &out))
    return replicated_op(s, in);
  int64_t blk = lo->shape.dims[d] / factor(s->mesh, &L, d);
  if (w->pad_lo > blk || w->pad_hi > blk) return replicated_op(s, in);
  tpu_instr *x, *parts[3], *k;
  int np = 0;
  TPU_TRY(operand_as(s, in, 0, &L, &x));
  TPU_TRY(operand_as(s, in, 1, &k_repl, &k));
  if (w->pad_lo) { /* the previous block's last rows */
    tpu_instr *edge;
    TPU_TRY(rows(s, x, d, blk - w->pad_lo, blk, in->loc, &edge));
    TPU_TRY(halo_send(s, in, edge, &L, d, +1, &parts[np++]));
  }
  parts[np++] = x;
  if (w->pad_hi) { /* the next block's first rows */
    tpu_instr *edge;
    TPU_TRY(rows(s, x, d, 0, w->pad_hi, in->loc, &edge));
    TPU_TRY(halo_send(s, in, edge, &L, d, -1, &parts[np++]));
  }
  tpu_instr *cat = x;
  if (np > 1) {
    tpu_shape cs = x->shape;
    cs.has_layout = 0;
    cs.dims[d] = blk + w->pad_lo + w->pad_hi;
    TPU_TRY(instr(s, TPU_OP_CONCATENATE, "spmd.with-halo", &cs, parts, np, in->loc, &cat));
    char dims[32];
    snprintf(dims, sizeof dims, "{%d}", d);
    TPU_TRY(tpu_build_set_attr(&s->b, cat, "dimensions", dims));
  }
  tpu_instr *ops[2] = {cat, k};
  TPU_TRY(emit_clone(s, in, ops, &out));
  /* The window no longer pads the split dimension. */
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  int any_stride = 0, any_ld = 0, any_rd = 0, any_rev = 0;
  for (int i = 0; i < in->nwindow; i++) {
    any_stride |= in->window[i].stride != 1;
    any_ld |= in->window[i].base_dilation != 1;
    any_rd |= in->window[i].window_dilation != 1;
    any_rev |= in->window[i].reversal;
  }
  tpu_strbuf_printf(&b, "{size=");
  for (int i = 0; i < in->nwindow; i++) tpu_strbuf_printf(&b, "%s%lld", i ? "x" : "", (long long)in->window[i].size);
  if (any_stride) {
    tpu_strbuf_printf(&b, " stride=");
    for (int i = 0; i < in->nwindow; i++) tpu_strbuf_printf(&b, "%s%lld", i ? "x" : "", (long long)in->window[i].stride);
  }
  tpu_strbuf_printf(&b, " pad=");
  for (int i = 0; i < in->nwindow; i++)
    tpu_strbuf_printf(&b, "%s%lld_%lld", i ? "x" : "", (long long)(i == sd ? 0 : in->window[i].pad_lo),
                      (long long)(i == sd ? 0 : in->window[i].pad_hi));
  if (any_ld) {
    tpu_strbuf_printf(&b, " lhs_dilate=");
    for (int i = 0; i < in->nwindow; i++)
      tpu_strbuf_printf(&b, "%s%lld", i ? "x" : "", (long long)in->window[i].base_dilation);
  }
  if (any_rd) {
    tpu_strbuf_printf(&b, " rhs_dilate=");
    for (int i = 0; i < in->nwindow; i++)
      tpu_strbuf_printf(&b, "%s%lld", i ? "x" : "", (long long)in->window[i].window_dilation);
  }
  if (any_rev) {
    tpu_strbuf_printf(&b, " rhs_reversal=");
    for (int i = 0; i < in->nwindow; i++) tpu_strbuf_printf(&b, "%s%d", i ? "x" : "", in->window[i].reversal ? 1 : 0);
  }
  tpu_strbuf_printf(&b, "}");
  tpu_status st = set_attr_text(s, s->val[in->id], "window", &b, in->loc);
  return st;
}

/* A convolution split along its batch only (data parallelism): each chip convolves its
 * block with the whole kernel. */
static tpu_status convolution(sp *s, const tpu_instr *in) {
  const tpu_instr *lo = in->operands[0];
  const dsh *lh = &s->sh[lo->id];
  const tpu_conv_dims *cd = &in->conv;
  if (lh->manual || !in->has_conv_dims || in->feature_group_count != 1 || in->batch_group_count != 1)
    return replicated_op(s, in);
  const dsh *rh = &s->sh[in->operands[1]->id];
  if (!lh->n[cd->in_batch] && lh->n[cd->in_feature] && !rh->manual) {
    /* The input feature split (a kernel's gradient: the batch is the contracted feature):
     * each chip convolves its part of the contraction and the partial sums are added. */
    dsh L = k_repl, R = k_repl;
    L.n[cd->in_feature] = R.n[cd->k_in] = lh->n[cd->in_feature];
    memcpy(L.ax[cd->in_feature], lh->ax[cd->in_feature], MAXA);
    memcpy(R.ax[cd->k_in], lh->ax[cd->in_feature], MAXA);
    if (!fits(s, &lo->shape, &L) || !fits(s, &in->operands[1]->shape, &R)) return replicated_op(s, in);
    tpu_instr *ops[2], *x;
    TPU_TRY(operand_as(s, in, 0, &L, &ops[0]));
    TPU_TRY(operand_as(s, in, 1, &R, &ops[1]));
    TPU_TRY(tpu_build_clone_instr(&s->b, s->c, in, ops, &x));
    tpu_comp *add;
    TPU_TRY(adder(s, in->shape.dtype, &add));
    TPU_TRY(reduce_axes(s, x, L.ax[cd->in_feature], L.n[cd->in_feature], add, in->loc, &x));
    s->val[in->id] = x;
    s->sh[in->id] = k_repl;
    return TPU_OK;
  }
  int sd = -1, nsplit_sp = 0; /* a spatial dimension split: halo exchange */
  for (int i = 0; i < cd->nspatial; i++)
    if (lh->n[cd->in_spatial[i]]) sd = i, nsplit_sp++;
  if (nsplit_sp == 1 && !lh->n[cd->in_feature] && !rh->manual) return spatial_conv(s, in, sd);
  if (!lh->n[cd->in_batch]) return replicated_op(s, in);
  dsh L = k_repl, out = k_repl;
  L.n[cd->in_batch] = lh->n[cd->in_batch];
  memcpy(L.ax[cd->in_batch], lh->ax[cd->in_batch], MAXA);
  out.n[cd->out_batch] = L.n[cd->in_batch];
  memcpy(out.ax[cd->out_batch], L.ax[cd->in_batch], MAXA);
  if (!fits(s, &lo->shape, &L) || !fits(s, &in->shape, &out)) return replicated_op(s, in);
  tpu_instr *ops[2];
  TPU_TRY(operand_as(s, in, 0, &L, &ops[0]));
  TPU_TRY(operand_as(s, in, 1, &k_repl, &ops[1]));
  return emit_clone(s, in, ops, &out);
}

/* A tuple of arrays keeps its elements' splits (a while loop's state, the entry's result). */
static tpu_status split_tuple(sp *s, const tpu_instr *in) {
  int n = in->noperands;
  for (int i = 0; i < n; i++)
    if (!tpu_dtype_is_array(in->operands[i]->shape.dtype) || s->sh[in->operands[i]->id].manual)
      return replicated_op(s, in);
  dsh *el = tpu_arena_alloc(&s->m->arena, sizeof *el * (size_t)(n + 1));
  tpu_instr **ops = tpu_calloc((size_t)(n + 1), sizeof *ops);
  tpu_status st = el && ops ? TPU_OK : TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  for (int i = 0; st == TPU_OK && i < n; i++) {
    ops[i] = s->val[in->operands[i]->id];
    el[i] = s->sh[in->operands[i]->id];
  }
  if (st == TPU_OK) st = tpu_build_clone_instr(&s->b, s->c, in, ops, &s->val[in->id]);
  if (st == TPU_OK) {
    tpu_instr *x = s->val[in->id];
    x->shape.elems = tpu_arena_alloc(&s->m->arena, sizeof *x->shape.elems * (size_t)(n + 1));
    if (!x->shape.elems) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
    for (int i = 0; st == TPU_OK && i < n; i++) x->shape.elems[i] = ops[i]->shape;
  }
  s->sh[in->id] = k_repl;
  s->tsh[in->id] = el;
  tpu_free(ops);
  return st;
}

static tpu_status partition_instr(sp *s, const tpu_instr *in);

/* Partitions computation `old` (a loop's condition or body) whose one parameter is the
 * loop state with elements split as `el` (NULL: whole) into a new computation; for a body
 * (`el_out` = el) the result's elements are resharded back to el, so every iteration sees
 * the same splits. */
static tpu_status partition_comp(sp *s, const tpu_comp *old, const dsh *el, int is_body, dsh *root_el,
                                 tpu_comp **out) {
  sp saved = *s; /* the caller's frame */
  tpu_status st = tpu_build_comp(&s->b, old->name, saved.c, out);
  if (st != TPU_OK) return st;
  int n = old->ninstrs;
  s->old = (tpu_comp *)old;
  s->c = *out;
  s->pos = NULL;
  s->val = tpu_calloc((size_t)(n + 1), sizeof *s->val);
  s->sh = tpu_calloc((size_t)(n + 1), sizeof *s->sh);
  s->tsh = tpu_calloc((size_t)(n + 1), sizeof *s->tsh);
  if (!s->val || !s->sh || !s->tsh) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, old->loc, "out of memory");
  const tpu_instr *p0 = old->nparams == 1 ? old->params[0] : NULL;
  if (st == TPU_OK && !p0) st = fail_at(s, old->root, "a loop or branch computation without exactly one parameter");
  if (st == TPU_OK) { /* the state parameter, its elements per chip */
    tpu_shape ps = p0->shape;
    int nt = ps.dtype == TPU_TUPLE ? ps.ntuple : 0;
    if (!nt && el && tpu_dtype_is_array(ps.dtype)) ps = local_shape(s, &p0->shape, el); /* a branch's array */
    if (nt && el) {
      ps.elems = tpu_arena_alloc(&s->m->arena, sizeof *ps.elems * (size_t)(nt + 1));
      if (!ps.elems) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, old->loc, "out of memory");
      for (int i = 0; st == TPU_OK && i < nt; i++)
        ps.elems[i] = tpu_dtype_is_array(p0->shape.elems[i].dtype) ? local_shape(s, &p0->shape.elems[i], &el[i])
                                                                  : p0->shape.elems[i];
    }
    tpu_instr *p;
    if (st == TPU_OK) st = tpu_build_param(&s->b, s->c, 0, p0->name, &ps, &p);
    if (st == TPU_OK) {
      s->val[p0->id] = p;
      s->sh[p0->id] = !nt && el ? el[0] : k_repl;
      s->tsh[p0->id] = nt && el ? (dsh *)el : NULL;
    }
  }
  for (int i = 0; st == TPU_OK && i < old->norder; i++)
    if (old->order[i] != p0) st = partition_instr(s, old->order[i]);
  if (st == TPU_OK) {
    const tpu_instr *r = old->root;
    tpu_instr *root = s->val[r->id];
    if (is_body == 1 && r->shape.dtype == TPU_TUPLE) {
      for (int i = 0; root_el && i < r->shape.ntuple; i++) root_el[i] = s->tsh[r->id] ? s->tsh[r->id][i] : k_repl;
      if (s->tsh[r->id]) {
        st = reshard_tuple(s, root, s->tsh[r->id], el, r->loc, &root);
      } else if (el) { /* a whole tuple: each chip takes its blocks */
        dsh *whole = tpu_arena_alloc(&s->m->arena, sizeof *whole * (size_t)(r->shape.ntuple + 1));
        if (!whole) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, r->loc, "out of memory");
        for (int i = 0; st == TPU_OK && i < r->shape.ntuple; i++) whole[i] = k_repl;
        if (st == TPU_OK) st = reshard_tuple(s, root, whole, el, r->loc, &root);
      }
    } else if ((!is_body || is_body == 2) && tpu_dtype_is_array(r->shape.dtype)) {
      st = reshard(s, root, &s->sh[r->id], &k_repl, r->loc, &root);
    } else if (is_body == 3) { /* a branch as it comes: its result's splits */
      if (tpu_dtype_is_array(r->shape.dtype)) root_el[0] = s->sh[r->id];
      for (int i = 0; r->shape.dtype == TPU_TUPLE && i < r->shape.ntuple; i++)
        root_el[i] = s->tsh[r->id] ? s->tsh[r->id][i] : k_repl;
    } else if (is_body == 2 && r->shape.dtype == TPU_TUPLE && s->tsh[r->id]) { /* a branch: whole results */
      dsh *whole = tpu_arena_alloc(&s->m->arena, sizeof *whole * (size_t)(r->shape.ntuple + 1));
      if (!whole) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, r->loc, "out of memory");
      for (int i = 0; st == TPU_OK && i < r->shape.ntuple; i++) whole[i] = k_repl;
      if (st == TPU_OK) st = reshard_tuple(s, root, s->tsh[r->id], whole, r->loc, &root);
    }
    if (st == TPU_OK) {
      tpu_build_set_root(s->c, root);
      st = tpu_build_finish(&s->b, s->c);
    }
  }
  tpu_free(s->val);
  tpu_free(s->sh);
  tpu_free(s->tsh);
  s->old = saved.old;
  s->c = saved.c;
  s->val = saved.val;
  s->sh = saved.sh;
  s->tsh = saved.tsh;
  s->pos = saved.pos;
  return st;
}

/* A while loop keeps its state's splits through every iteration. An element that enters
 * whole but that the body computes split (a scan's stacked outputs, written one slice at
 * a time) is split from the start instead: the body is partitioned again with it split,
 * and the initial value sliced (no communication). */
static tpu_status while_loop(sp *s, const tpu_instr *in) {
  const tpu_instr *o = in->operands[0];
  if (s->sh[o->id].manual || o->shape.dtype != TPU_TUPLE) return replicated_op(s, in);
  int nt = o->shape.ntuple;
  dsh *el = tpu_arena_alloc(&s->m->arena, sizeof *el * (size_t)(nt + 1));
  dsh *got = tpu_calloc((size_t)(nt + 1), sizeof *got);
  if (!el || !got) {
    tpu_free(got);
    return TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  }
  for (int i = 0; i < nt; i++) {
    el[i] = s->tsh[o->id] ? s->tsh[o->id][i] : k_repl;
    /* A whole element that the entry uses split after the loop (gradients accumulated
     * in a scan, then applied to split parameters) starts split. */
    const dsh *hi = s->hint && s->old == s->m->entry ? s->hint[in->id] : NULL;
    if (hi && !is_split(&el[i], o->shape.elems[i].rank) && tpu_dtype_is_array(o->shape.elems[i].dtype) &&
        fits(s, &o->shape.elems[i], &hi[i]))
      el[i] = hi[i];
  }
  tpu_comp *cond, *body;
  tpu_status st = TPU_OK;
  for (int round = 0; st == TPU_OK && round < 3; round++) {
    st = partition_comp(s, in->body, el, 1, got, &body);
    int changed = 0;
    for (int i = 0; st == TPU_OK && i < nt; i++)
      if (tpu_dtype_is_array(o->shape.elems[i].dtype) && !is_split(&el[i], o->shape.elems[i].rank) &&
          is_split(&got[i], o->shape.elems[i].rank) && !got[i].manual && fits(s, &o->shape.elems[i], &got[i])) {
        el[i] = got[i];
        changed = 1;
      }
    if (!changed) break;
  }
  tpu_free(got);
  TPU_TRY(st);
  TPU_TRY(partition_comp(s, in->condition, el, 0, NULL, &cond));
  tpu_instr *x = s->val[o->id], *w;
  {
    const dsh *from = s->tsh[o->id];
    dsh *whole = NULL;
    if (!from) {
      whole = tpu_calloc((size_t)(nt + 1), sizeof *whole);
      if (!whole) return TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
      from = whole;
    }
    st = reshard_tuple(s, x, from, el, in->loc, &x);
    tpu_free(whole);
    TPU_TRY(st);
  }
  TPU_TRY(tpu_build_clone_instr(&s->b, s->c, in, &x, &w));
  w->shape = x->shape;
  TPU_TRY(tpu_build_set_attr(&s->b, w, "condition", cond->name));
  TPU_TRY(tpu_build_set_attr(&s->b, w, "body", body->name));
  s->val[in->id] = w;
  s->sh[in->id] = k_repl;
  s->tsh[in->id] = (dsh *)el;
  return TPU_OK;
}

/* A conditional (lax.cond, lax.switch): each branch is partitioned with its operand's
 * splits (the branch index is whole) and returns whole results, so every branch gives each
 * chip the same shapes. */
static tpu_status conditional_op(sp *s, const tpu_instr *in) {
  int nb = in->nbranches;
  if (in->noperands != nb + 1) return replicated_op(s, in);
  for (int b = 0; b < nb; b++) {
    const tpu_instr *o = in->operands[1 + b];
    if (s->sh[o->id].manual || in->branches[b]->nparams != 1) return replicated_op(s, in);
  }
  tpu_instr **ops = tpu_calloc((size_t)(nb + 2), sizeof *ops);
  tpu_comp **nbr = tpu_calloc((size_t)(nb + 1), sizeof *nbr);
  tpu_status st = ops && nbr ? TPU_OK : TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  if (st == TPU_OK) st = operand_as(s, in, 0, &k_repl, &ops[0]);
  /* Branches that all give their results the same splits keep them; else results are whole. */
  int nr = in->shape.dtype == TPU_TUPLE ? in->shape.ntuple : 1, agree = 1;
  dsh *res = tpu_arena_alloc(&s->m->arena, sizeof *res * (size_t)(nr + 1));
  dsh *got = tpu_calloc((size_t)(nr + 1), sizeof *got);
  if (st == TPU_OK && (!res || !got)) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  for (int pass = 0; pass < 2 && st == TPU_OK; pass++) {
    for (int b = 0; st == TPU_OK && b < nb; b++) {
      const tpu_instr *o = in->operands[1 + b];
      const dsh *el = tpu_dtype_is_array(o->shape.dtype) ? &s->sh[o->id] : s->tsh[o->id];
      ops[1 + b] = s->val[o->id];
      st = partition_comp(s, in->branches[b], el, agree ? 3 : 2, got, &nbr[b]);
      if (st == TPU_OK && agree && !b) memcpy(res, got, sizeof *res * (size_t)nr);
      if (st == TPU_OK && agree && b) agree = !memcmp(res, got, sizeof *res * (size_t)nr);
    }
    if (agree) break;
  }
  tpu_free(got);
  tpu_instr *w = NULL;
  if (st == TPU_OK) st = tpu_build_clone_instr(&s->b, s->c, in, ops, &w);
  if (st == TPU_OK && in->pred_branches) {
    st = tpu_build_set_attr(&s->b, w, "true_computation", nbr[0]->name);
    if (st == TPU_OK) st = tpu_build_set_attr(&s->b, w, "false_computation", nbr[1]->name);
  } else if (st == TPU_OK) {
    tpu_strbuf b;
    tpu_strbuf_init(&b);
    tpu_strbuf_printf(&b, "{");
    for (int i = 0; i < nb; i++) tpu_strbuf_printf(&b, "%s%s", i ? ", " : "", nbr[i]->name);
    tpu_strbuf_printf(&b, "}");
    w->branches = NULL; /* the attribute gives them again */
    w->nbranches = 0;
    st = set_attr_text(s, w, "branch_computations", &b, in->loc);
  }
  if (st == TPU_OK && agree) { /* per-chip result shapes */
    if (in->shape.dtype == TPU_TUPLE) {
      w->shape.elems = tpu_arena_alloc(&s->m->arena, sizeof *w->shape.elems * (size_t)(nr + 1));
      if (!w->shape.elems) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
      for (int i = 0; st == TPU_OK && i < nr; i++)
        w->shape.elems[i] = tpu_dtype_is_array(in->shape.elems[i].dtype) ? local_shape(s, &in->shape.elems[i], &res[i])
                                                                         : in->shape.elems[i];
    } else if (tpu_dtype_is_array(in->shape.dtype)) {
      w->shape = local_shape(s, &in->shape, &res[0]);
    }
  }
  if (st == TPU_OK) {
    s->val[in->id] = w;
    s->sh[in->id] = agree && in->shape.dtype != TPU_TUPLE ? res[0] : k_repl;
    s->tsh[in->id] = agree && in->shape.dtype == TPU_TUPLE ? res : NULL;
  }
  tpu_free(ops);
  tpu_free(nbr);
  return st;
}

/* One instruction of the entry computation. */
static tpu_status partition_instr(sp *s, const tpu_instr *in);

/* An entry instruction, and which collectives its value depends on. */
static tpu_status partition_entry_instr(sp *s, const tpu_instr *in) {
  s->cur_bits = 0;
  tpu_status st = partition_instr(s, in);
  uint64_t m = s->cur_bits;
  for (int i = 0; i < in->noperands; i++) m |= s->dep[in->operands[i]->id];
  s->dep[in->id] = m;
  return st;
}

static tpu_status partition_instr(sp *s, const tpu_instr *in) {
  int rank = tpu_dtype_is_array(in->shape.dtype) ? in->shape.rank : 0;
  switch (in->op) {
    case TPU_OP_PARAMETER: {
      dsh h = k_repl;
      if (tpu_dtype_is_array(in->shape.dtype) && annotation(s, in, rank, &h) && !fits(s, &in->shape, &h))
        return fail_at(s, in, "its sharding does not divide its dimensions evenly");
      if (h.manual) return fail_at(s, in, "a manual (shard_map) parameter");
      tpu_shape l = tpu_dtype_is_array(in->shape.dtype) ? local_shape(s, &in->shape, &h) : in->shape;
      tpu_instr *p;
      TPU_TRY(tpu_build_param(&s->b, s->c, in->index, in->name, &l, &p));
      tpu_strbuf b;
      tpu_strbuf_init(&b);
      if (tpu_dtype_is_array(in->shape.dtype)) hlo_text(s->mesh, &h, rank, &b);
      tpu_status st = b.oom ? TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory") : TPU_OK;
      if (st == TPU_OK && b.s) st = tpu_build_set_attr(&s->b, p, "sharding", b.s);
      tpu_strbuf_deinit(&b);
      p->src_name = in->src_name;
      s->val[in->id] = p;
      s->sh[in->id] = h;
      return st;
    }
    case TPU_OP_CUSTOM_CALL:
      if (target_is(in, "Sharding") || target_is(in, "xla.sdy.FuncResultSharding")) {
        dsh h;
        if (!annotation(s, in, rank, &h)) return fail_at(s, in, "cannot read its sharding");
        if (h.manual) { /* entering or leaving a shard_map body: the value is already local */
          s->val[in->id] = s->val[in->operands[0]->id];
          s->sh[in->id] = h;
          return TPU_OK;
        }
        if (!fits(s, &in->shape, &h)) h = k_repl;
        tpu_instr *x;
        TPU_TRY(operand_as(s, in, 0, &h, &x));
        s->val[in->id] = x;
        s->sh[in->id] = h;
        return TPU_OK;
      }
      if (target_is(in, "xla.sdy.GlobalToLocalShape") || target_is(in, "xla.sdy.LocalToGlobalShape")) {
        /* shard_map as JAX lowers it with Shardy: the body between works on blocks. */
        const char *fa = attr(in, "frontend_attributes");
        const char *ma = fa ? strstr(fa, "manual_axes") : NULL;
        for (int a = 0; ma && a < s->mesh->naxes; a++) {
          char q[40];
          snprintf(q, sizeof q, "\\\"%s\\\"", s->mesh->names[a]);
          if (!strstr(ma, q)) {
            snprintf(q, sizeof q, "\"%s\"", s->mesh->names[a]);
            if (!strstr(ma, q)) return fail_at(s, in, "a shard_map that leaves some mesh axes automatic is not supported");
          }
        }
        const tpu_instr *o = in->operands[0];
        int global = target_is(in, "xla.sdy.LocalToGlobalShape");
        if (!global && in->noperands > 1) { /* several operands: a tuple of their blocks */
          tpu_instr **parts = tpu_calloc((size_t)in->noperands + 1, sizeof *parts);
          if (!parts) return TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
          tpu_status st = in->shape.dtype == TPU_TUPLE && in->shape.ntuple == in->noperands
                              ? TPU_OK
                              : fail_at(s, in, "its result is not a tuple of one block per operand");
          tpu_shape ts = in->shape;
          if (st == TPU_OK) {
            ts.elems = tpu_arena_alloc(&s->m->arena, sizeof *ts.elems * (size_t)(in->noperands + 1));
            if (!ts.elems) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
          }
          for (int k = 0; st == TPU_OK && k < in->noperands; k++) {
            const tpu_instr *ok = in->operands[k];
            dsh hk;
            if (!annotation_k(s, in, k, ok->shape.rank, &hk) || hk.manual) {
              st = fail_at(s, in, "cannot read its sharding");
              break;
            }
            st = operand_as(s, in, k, &hk, &parts[k]);
            tpu_shape l = local_shape(s, &ok->shape, &hk);
            if (st == TPU_OK && !tpu_shape_equal(&l, &in->shape.elems[k]))
              st = fail_at(s, in, "its result is not one block of each operand");
            if (st == TPU_OK) ts.elems[k] = parts[k]->shape;
          }
          tpu_instr *t = NULL;
          if (st == TPU_OK) st = instr(s, TPU_OP_TUPLE, "spmd.blocks", &ts, parts, in->noperands, in->loc, &t);
          tpu_free(parts);
          TPU_TRY(st);
          s->val[in->id] = t;
          s->sh[in->id] = k_repl;
          s->sh[in->id].manual = 1;
          return TPU_OK;
        }
        if (global && in->noperands > 1) { /* several results: a tuple of values, each split its own way */
          if (in->shape.dtype != TPU_TUPLE || in->shape.ntuple != in->noperands)
            return fail_at(s, in, "its result is not a tuple of one value per operand");
          int n = in->noperands;
          dsh *el = tpu_arena_alloc(&s->m->arena, sizeof *el * (size_t)(n + 1));
          tpu_instr **parts = tpu_calloc((size_t)n + 1, sizeof *parts);
          tpu_shape ts = in->shape;
          ts.elems = tpu_arena_alloc(&s->m->arena, sizeof *ts.elems * (size_t)(n + 1));
          tpu_status st = el && parts && ts.elems ? TPU_OK : TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
          for (int k = 0; st == TPU_OK && k < n; k++) {
            const tpu_shape *g = &in->shape.elems[k];
            if (!tpu_dtype_is_array(g->dtype) || !annotation_k(s, in, k, g->rank, &el[k]) || el[k].manual) {
              st = fail_at(s, in, "cannot read its sharding");
              break;
            }
            tpu_shape l = local_shape(s, g, &el[k]);
            if (!tpu_shape_equal(&l, &in->operands[k]->shape)) {
              st = fail_at(s, in, "an operand is not one block of its result");
              break;
            }
            parts[k] = s->val[in->operands[k]->id];
            ts.elems[k] = parts[k]->shape;
          }
          tpu_instr *t = NULL;
          if (st == TPU_OK) st = instr(s, TPU_OP_TUPLE, "spmd.results", &ts, parts, n, in->loc, &t);
          tpu_free(parts);
          TPU_TRY(st);
          s->val[in->id] = t;
          s->sh[in->id] = k_repl;
          s->tsh[in->id] = el;
          return TPU_OK;
        }
        dsh h;
        if (!annotation(s, in, global ? rank : o->shape.rank, &h) || h.manual)
          return fail_at(s, in, "cannot read its sharding");
        if (!global) { /* the operand as split by in_shardings; the result is one block */
          tpu_instr *x;
          TPU_TRY(operand_as(s, in, 0, &h, &x));
          tpu_shape l = local_shape(s, &o->shape, &h);
          if (!tpu_shape_equal(&l, &in->shape)) return fail_at(s, in, "its result is not one block of its operand");
          s->val[in->id] = x;
          s->sh[in->id] = k_repl;
          s->sh[in->id].manual = 1;
        } else {
          tpu_shape l = local_shape(s, &in->shape, &h);
          if (!tpu_shape_equal(&l, &o->shape)) return fail_at(s, in, "its operand is not one block of it");
          s->val[in->id] = s->val[o->id];
          s->sh[in->id] = h;
        }
        return TPU_OK;
      }
      if (target_is(in, "SPMDFullToShardShape")) {
        const tpu_instr *o = in->operands[0];
        tpu_shape l = local_shape(s, &o->shape, &s->sh[o->id]);
        if (!tpu_shape_equal(&l, &in->shape)) return fail_at(s, in, "its operand's block does not have its shape");
        s->val[in->id] = s->val[o->id];
        s->sh[in->id] = k_repl;
        s->sh[in->id].manual = 1;
        return TPU_OK;
      }
      if (target_is(in, "SPMDShardToFullShape")) {
        dsh h;
        if (!annotation(s, in, rank, &h) || h.manual) return fail_at(s, in, "cannot read its sharding");
        tpu_shape l = local_shape(s, &in->shape, &h);
        if (!tpu_shape_equal(&l, &in->operands[0]->shape)) return fail_at(s, in, "its operand is not one block of it");
        s->val[in->id] = s->val[in->operands[0]->id];
        s->sh[in->id] = h;
        return TPU_OK;
      }
      return replicated_op(s, in);
    case TPU_OP_BROADCAST: return broadcast(s, in);
    case TPU_OP_TRANSPOSE: return transpose(s, in);
    case TPU_OP_RESHAPE: return reshape(s, in);
    case TPU_OP_DOT: return dot(s, in);
    case TPU_OP_REDUCE: return reduce(s, in);
    case TPU_OP_CONVOLUTION: return convolution(s, in);
    case TPU_OP_SLICE:
    case TPU_OP_PAD:
    case TPU_OP_CONCATENATE:
    case TPU_OP_REVERSE:
    case TPU_OP_DYNAMIC_SLICE:
    case TPU_OP_DYNAMIC_UPDATE_SLICE: return dimwise_op(s, in);
    case TPU_OP_SORT: return sort_op(s, in);
    case TPU_OP_REDUCE_WINDOW:
      if (in->noperands == 2 && tpu_dtype_is_array(in->shape.dtype)) return dimwise_op(s, in);
      return replicated_op(s, in);
    case TPU_OP_GATHER:
    case TPU_OP_SCATTER: return batched_index_op(s, in);
    case TPU_OP_TUPLE:
      if (in == s->old->root && s->old == s->m->entry) { /* results keep their shardings (written on the root) */
        tpu_instr **ops = tpu_calloc((size_t)(in->noperands + 1), sizeof *ops);
        if (!ops) return TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
        for (int i = 0; i < in->noperands; i++) ops[i] = s->val[in->operands[i]->id];
        tpu_status st = tpu_build_clone_instr(&s->b, s->c, in, ops, &s->val[in->id]);
        if (st == TPU_OK) {
          tpu_instr *x = s->val[in->id];
          x->shape.elems = tpu_arena_alloc(&s->m->arena, sizeof *x->shape.elems * (size_t)(in->noperands + 1));
          if (!x->shape.elems) st = TPU_FAIL(s->d, TPU_ERR_NOMEM, in->loc, "out of memory");
          for (int i = 0; st == TPU_OK && i < in->noperands; i++) x->shape.elems[i] = ops[i]->shape;
        }
        s->sh[in->id] = k_repl;
        tpu_free(ops);
        return st;
      }
      return split_tuple(s, in);
    case TPU_OP_GET_TUPLE_ELEMENT: {
      const tpu_instr *o = in->operands[0];
      if (!s->tsh[o->id]) return replicated_op(s, in);
      tpu_instr *x = s->val[o->id];
      TPU_TRY(tpu_build_clone_instr(&s->b, s->c, in, &x, &s->val[in->id]));
      s->val[in->id]->shape = x->shape.elems[in->index];
      s->sh[in->id] = s->tsh[o->id][in->index];
      return TPU_OK;
    }
    case TPU_OP_WHILE: return while_loop(s, in);
    case TPU_OP_CONDITIONAL: return conditional_op(s, in);
    default: break;
  }
  if (is_elementwise(in) && tpu_dtype_is_array(in->shape.dtype)) return elementwise(s, in);
  return replicated_op(s, in);
}

/* The root's sharding= text: one per result (a tuple sharding for a tuple root). */
static tpu_status root_sharding(sp *s, tpu_instr *root) {
  const tpu_instr *old = s->old->root;
  tpu_strbuf b;
  tpu_strbuf_init(&b);
  if (old->op == TPU_OP_TUPLE && root->op == TPU_OP_TUPLE) {
    tpu_strbuf_printf(&b, "{");
    for (int i = 0; i < old->noperands; i++) {
      const tpu_instr *o = old->operands[i];
      if (i) tpu_strbuf_printf(&b, ", ");
      if (tpu_dtype_is_array(o->shape.dtype)) hlo_text(s->mesh, &s->sh[o->id], o->shape.rank, &b);
      else tpu_strbuf_printf(&b, "{replicated}");
    }
    tpu_strbuf_printf(&b, "}");
  } else if (tpu_dtype_is_array(old->shape.dtype)) {
    hlo_text(s->mesh, &s->sh[old->id], old->shape.rank, &b);
  }
  tpu_status st = b.oom ? TPU_FAIL(s->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory") : TPU_OK;
  if (st == TPU_OK && b.s) st = tpu_build_set_attr(&s->b, root, "sharding", b.s);
  tpu_strbuf_deinit(&b);
  return st;
}

/* After a pass over the entry: for every whole value used only... by elementwise ops of its
 * shape, the split those uses got (followed back through chains of elementwise ops);
 * a while loop's result elements read through get-tuple-element then give the loop its
 * hints. Returns with s->hint NULL when no loop would change. */
static tpu_status loop_hints(sp *s) {
  const tpu_comp *c = s->old;
  int n = c->ninstrs, any = 0;
  dsh *want = tpu_calloc((size_t)(n + 1), sizeof *want);
  if (!want) return TPU_FAIL(s->d, TPU_ERR_NOMEM, c->loc, "out of memory");
  for (int i = c->norder - 1; i >= 0; i--) {
    const tpu_instr *u = c->order[i];
    if (!is_elementwise(u) || !tpu_dtype_is_array(u->shape.dtype)) continue;
    const dsh *h = is_split(&s->sh[u->id], u->shape.rank) ? &s->sh[u->id] : &want[u->id];
    if (!is_split(h, u->shape.rank) || h->manual) continue;
    for (int k = 0; k < u->noperands; k++) {
      const tpu_instr *o = u->operands[k];
      if (o->shape.rank != u->shape.rank || is_split(&s->sh[o->id], o->shape.rank) || is_split(&want[o->id], o->shape.rank))
        continue;
      want[o->id] = *h;
    }
  }
  for (int i = 0; i < c->norder; i++) {
    const tpu_instr *g = c->order[i];
    if (g->op != TPU_OP_GET_TUPLE_ELEMENT || g->operands[0]->op != TPU_OP_WHILE || !is_split(&want[g->id], g->shape.rank))
      continue;
    const tpu_instr *w = g->operands[0];
    if (!s->hint) {
      s->hint = tpu_calloc((size_t)(n + 1), sizeof *s->hint);
      if (!s->hint) break;
    }
    if (!s->hint[w->id]) {
      s->hint[w->id] = tpu_arena_alloc(&s->m->arena, sizeof(dsh) * (size_t)(w->shape.ntuple + 1));
      if (!s->hint[w->id]) break;
      memset(s->hint[w->id], 0, sizeof(dsh) * (size_t)(w->shape.ntuple + 1));
    }
    s->hint[w->id][g->index] = want[g->id];
    any = 1;
  }
  tpu_free(want);
  if (!any) {
    tpu_free(s->hint);
    s->hint = NULL;
  }
  return TPU_OK;
}

int tpu_spmd_needed(const tpu_module *m) {
  for (int i = 0; i < m->nattrs; i++)
    if (!strcmp(m->attrs[i].name, "num_partitions") || !strcmp(m->attrs[i].name, "replica_count")) return 0;
  for (int i = 0; i < m->nattrs; i++) /* a mesh of JAX's: partition even without annotations */
    if (!strcmp(m->attrs[i].name, "frontend_attributes") && strstr(m->attrs[i].value, "#sdy.mesh<")) return 1;
  for (int c = 0; c < m->ncomps; c++)
    for (int i = 0; i < m->comps[c]->ninstrs; i++) {
      const tpu_instr *in = m->comps[c]->instrs[i];
      if (target_is(in, "Sharding") || target_is(in, "SPMDFullToShardShape")) return 1;
      if (in->op == TPU_OP_PARAMETER && m->comps[c] == m->entry && attr(in, "sharding")) {
        const char *v = attr(in, "sharding");
        if (!strstr(v, "replicated") && !strstr(v, "maximal")) return 1;
      }
    }
  return 0;
}

/* Sets (or adds) a module header attribute. */
static tpu_status set_header(tpu_module *m, const char *name, const char *value, tpu_diag *d) {
  for (int i = 0; i < m->nattrs; i++)
    if (!strcmp(m->attrs[i].name, name)) {
      m->attrs[i].value = tpu_arena_strdup(&m->arena, value);
      return m->attrs[i].value ? TPU_OK : TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
    }
  tpu_attr *na = tpu_arena_alloc(&m->arena, sizeof *na * (size_t)(m->nattrs + 1));
  if (!na) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  if (m->nattrs) memcpy(na, m->attrs, sizeof *na * (size_t)m->nattrs);
  na[m->nattrs].name = tpu_arena_strdup(&m->arena, name);
  na[m->nattrs].value = tpu_arena_strdup(&m->arena, value);
  na[m->nattrs].loc = tpu_noloc();
  if (!na[m->nattrs].name || !na[m->nattrs].value) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  m->attrs = na;
  m->nattrs++;
  return TPU_OK;
}

static void drop_header(tpu_module *m, const char *name) {
  for (int i = 0; i < m->nattrs; i++)
    if (!strcmp(m->attrs[i].name, name)) {
      memmove(&m->attrs[i], &m->attrs[i + 1], sizeof *m->attrs * (size_t)(m->nattrs - i - 1));
      m->nattrs--;
      return;
    }
}

tpu_status tpu_spmd_partition(tpu_module *m, const tpu_mesh *mesh_in, tpu_diag *d) {
  tpu_mesh own;
  memset(&own, 0, sizeof own);
  const tpu_mesh *mesh = mesh_in;
  if (!mesh) {
    int found;
    TPU_TRY(tpu_mesh_from_module(m, &own, &found, d));
    if (!found)
      return TPU_FAIL(d, TPU_ERR_ARG, m->entry->loc,
                      "the module has sharding annotations but no mesh: give one with --mesh NAME=SIZE,...");
    mesh = &own;
  }
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.precision_override = -1;
  tpu_status st = tpu__pass_inline(m, &o, d);
  sp s;
  memset(&s, 0, sizeof s);
  s.d = d;
  s.m = m;
  s.mesh = mesh;
  s.old = m->entry;
  if (st == TPU_OK) st = tpu_builder_init(&s.b, m, d);
  int n = s.old->ninstrs;
  s.val = tpu_calloc((size_t)(n + 1), sizeof *s.val);
  s.sh = tpu_calloc((size_t)(n + 1), sizeof *s.sh);
  s.tsh = tpu_calloc((size_t)(n + 1), sizeof *s.tsh);
  if (st == TPU_OK && (!s.val || !s.sh || !s.tsh)) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  /* A first, discarded pass shows the splits values are used with; loops whose results
   * are used split keep them split inside (hints), then the real pass. */
  s.dep = tpu_calloc((size_t)(n + 1), sizeof *s.dep);
  if (st == TPU_OK && !s.dep) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  if (st == TPU_OK) st = tpu_build_comp(&s.b, s.old->name, s.old, &s.c);
  for (int i = 0; st == TPU_OK && i < s.old->norder; i++) st = partition_entry_instr(&s, s.old->order[i]);
  if (st == TPU_OK) st = loop_hints(&s);
  if (st == TPU_OK && s.hint) {
    memset(s.val, 0, sizeof *s.val * (size_t)(n + 1));
    memset(s.sh, 0, sizeof *s.sh * (size_t)(n + 1));
    memset(s.tsh, 0, sizeof *s.tsh * (size_t)(n + 1));
    s.pos = NULL;
    s.channel = 0;
    s.nemitted = 0;
    s.nbf16s = 0;
    memset(s.dep, 0, sizeof *s.dep * (size_t)(n + 1));
    st = tpu_build_comp(&s.b, s.old->name, s.old, &s.c);
    for (int i = 0; st == TPU_OK && i < s.old->norder; i++) st = partition_entry_instr(&s, s.old->order[i]);
  }
  if (st == TPU_OK) {
    tpu_instr *root = s.val[s.old->root->id];
    tpu_build_set_root(s.c, root);
    st = root_sharding(&s, root);
    /* values a later choice replaced (an all-reduce whose block a reduce-scatter gives) */
    if (st == TPU_OK && tpu_build_remove_dead(&s.b, s.c) < 0) st = d->status;
  }
  if (st == TPU_OK) {
    s.c->is_entry = 1;
    s.old->is_entry = 0;
    m->entry = s.c;
    st = tpu_build_finish(&s.b, s.c);
  }
  if (st == TPU_OK && tpu_build_remove_unused_comps(&s.b) < 0) st = d->status;
  if (st == TPU_OK) {
    char nd[32];
    snprintf(nd, sizeof nd, "%lld", (long long)mesh->ndev);
    st = set_header(m, "num_partitions", nd, d);
    drop_header(m, "entry_computation_layout");
  }
  if (st == TPU_OK) st = tpu_build_finish_all(&s.b);
  tpu_builder_deinit(&s.b);
  tpu_free(s.val);
  tpu_free(s.dep);
  tpu_free(s.sh);
  tpu_free(s.tsh);
  tpu_free(s.hint);
  tpu_mesh_free(&own);
  if (st == TPU_OK) st = tpu_ir_verify(m, d);
  return st;
}
