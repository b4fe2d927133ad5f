/* One slice's program from the XLA TPU compiler widened to every slice: its collectives
 * repeated in each slice, its send/recv pairs to the megascale runtime turned into the
 * collectives over the slices they stand for (docs/pod.md, "Many slices").
 *
 * What the compiler writes (libtpu compile-only, topologies.get_topology_desc(...,
 * num_slices=K); examples/pod/dp2s_tpu.hlo, tests/pod/megascale/): a module of
 * num_partitions = the chips of one slice whose in-slice collectives name ids within the
 * slice, and for every exchange between slices a `send` of the chip's buffer and a `recv`
 * of the result, both host transfers (is_host_transfer=true) to the handler
 * "xla_megascale_runtime", paired by _xla_host_transfer_rendezvous, with the exchange in
 * _xla_megascale_transfer_type: ALL_REDUCE (the same shape back, reduced with
 * _xla_megascale_reduce_operation over the chip of the same position in every slice;
 * target "{1,...,K}x{0:N-1}": slices from 1 times the chips of a slice), ALL_GATHER (the
 * slices' buffers one after another along the leading dimension), ONE_TO_ONE (target
 * "{{a->b},...}" with ids slice x 100000 + chip). The entry parameters' shardings already
 * name the K x N devices. */
#include "pod/megascale.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strbuf.h"
#include "ir/build.h"
#include "ir/collective.h"

#define ID_SLICE 100000 /* megascale ids: slice (from 1) x ID_SLICE + chip */

static const char *attr_of(const tpu_instr *in, const char *name) {
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, name)) return in->attrs[i].value;
  return NULL;
}

/* The value of frontend attribute `key` (without quotes; a {...} value whole) into buf;
 * 0 when absent. */
static int fattr(const tpu_instr *in, const char *key, char *buf, size_t n) {
  const char *v = attr_of(in, "frontend_attributes");
  size_t kl = strlen(key);
  for (const char *p = v; p && (p = strstr(p, key)) != NULL; p += kl) {
    if ((p != v && p[-1] != '{' && p[-1] != ',' && p[-1] != ' ') || p[kl] != '=') continue;
    const char *s = p + kl + 1, *e = s;
    if (*s == '"') {
      e = strchr(++s, '"');
      if (!e) return 0;
    } else {
      int depth = 0;
      for (; *e && (depth > 0 || (*e != ',' && *e != '}')); e++) depth += *e == '{' ? 1 : *e == '}' ? -1 : 0;
    }
    size_t len = (size_t)(e - s) < n - 1 ? (size_t)(e - s) : n - 1;
    memcpy(buf, s, len);
    buf[len] = 0;
    return 1;
  }
  return 0;
}

static int is_megascale(const tpu_instr *in) {
  char h[64];
  return (in->op == TPU_OP_SEND || in->op == TPU_OP_RECV || in->op == TPU_OP_SEND_DONE || in->op == TPU_OP_RECV_DONE) &&
         fattr(in, "_xla_host_transfer_handler_name", h, sizeof h) && !strcmp(h, "xla_megascale_runtime");
}

int tpu_megascale_present(const tpu_module *m, const tpu_instr **at) {
  for (int c = 0; c < m->ncomps; c++)
    for (int i = 0; i < m->comps[c]->ninstrs; i++)
      if (is_megascale(m->comps[c]->instrs[i])) {
        if (at) *at = m->comps[c]->instrs[i];
        return 1;
      }
  return 0;
}

typedef struct {
  tpu_builder b;
  tpu_diag *d;
  int64_t n, slices; /* chips per slice, slices */
  int64_t *members;  /* room for n */
  char *seen;        /* n flags */
} widen;

/* Groups of `in` (not a permute) within one slice, repeated in every slice, as explicit
 * global ids; use_global_device_ids=true makes them device ids whatever the mode was. */
static tpu_status widen_groups(widen *w, tpu_instr *in) {
  if (tpu_collective_mode(in) == TPU_CG_CROSS_REPLICA) return TPU_OK; /* one replica: each chip alone, still */
  tpu_strbuf s;
  tpu_strbuf_init(&s);
  tpu_strbuf_printf(&s, "{");
  int first = 1;
  for (int64_t sl = 0; sl < w->slices; sl++) {
    memset(w->seen, 0, (size_t)w->n);
    for (int64_t dev = 0; dev < w->n; dev++) {
      if (w->seen[dev]) continue;
      int64_t cnt, self;
      tpu_status st = tpu_collective_members(in, 1, w->n, dev, w->members, &cnt, &self, w->d);
      if (st != TPU_OK) {
        tpu_strbuf_deinit(&s);
        return st;
      }
      tpu_strbuf_printf(&s, "%s{", first ? "" : ",");
      first = 0;
      for (int64_t k = 0; k < cnt; k++) {
        w->seen[w->members[k]] = 1;
        tpu_strbuf_printf(&s, "%s%lld", k ? "," : "", (long long)(sl * w->n + w->members[k]));
      }
      tpu_strbuf_printf(&s, "}");
    }
  }
  tpu_strbuf_printf(&s, "}");
  char *text = tpu_strbuf_take(&s);
  if (!text) return TPU_FAIL(w->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  tpu_status st = tpu_build_set_attr(&w->b, in, "replica_groups", text);
  tpu_free(text);
  if (st == TPU_OK) st = tpu_build_set_attr(&w->b, in, "use_global_device_ids", "true");
  return st;
}

/* A permute's pairs within one slice, repeated in every slice. */
static tpu_status widen_pairs(widen *w, tpu_instr *in) {
  tpu_strbuf s;
  tpu_strbuf_init(&s);
  tpu_strbuf_printf(&s, "{");
  int first = 1;
  for (int64_t sl = 0; sl < w->slices; sl++)
    for (int64_t t = 0; t < w->n; t++) {
      int64_t src;
      tpu_status st = tpu_collective_permute_source(in, 1, w->n, t, &src, w->d);
      if (st != TPU_OK) {
        tpu_strbuf_deinit(&s);
        return st;
      }
      if (src < 0) continue;
      tpu_strbuf_printf(&s, "%s{%lld,%lld}", first ? "" : ",", (long long)(sl * w->n + src), (long long)(sl * w->n + t));
      first = 0;
    }
  tpu_strbuf_printf(&s, "}");
  char *text = tpu_strbuf_take(&s);
  if (!text) return TPU_FAIL(w->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  tpu_status st = tpu_build_set_attr(&w->b, in, "source_target_pairs", text);
  tpu_free(text);
  return st;
}

/* partition-id -> partition-id % n (the chip's id within its slice). */
static tpu_status widen_partition_id(widen *w, tpu_comp *c, tpu_instr *in) {
  tpu_tensor v;
  TPU_TRY(tpu_tensor_alloc(&v, in->shape.dtype, 0, NULL, w->d));
  tpu_tensor_set_i64(&v, 0, w->n);
  tpu_instr *k, *r;
  TPU_TRY(tpu_build_constant(&w->b, c, "chips-per-slice", &v, &in->shape, &k));
  tpu_instr *ops[2] = {in, k};
  TPU_TRY(tpu_build_instr_like(&w->b, c, in, TPU_OP_REMAINDER, "partition-id-in-slice", &in->shape, ops, 2, &r));
  tpu_build_replace_uses(c, in, r);
  r->operands[0] = in; /* replace_uses rewrote this slot too */
  return TPU_OK;
}

/* The slices a "{1,2,...}x{a:b}" target names and its chip range; 0 when malformed. */
static int read_target(const char *t, int64_t *nslices, int64_t *lo, int64_t *hi) {
  const char *x = strstr(t, "}x{");
  if (t[0] != '{' || !x) return 0;
  *nslices = 0;
  for (const char *p = t + 1; p < x;) {
    char *e;
    long long v = strtoll(p, &e, 10);
    if (e == p || v < 1) return 0;
    (*nslices)++;
    p = *e == ',' ? e + 1 : e;
    if (p != x && *e != ',') return 0;
  }
  char *e;
  *lo = strtoll(x + 3, &e, 10);
  if (*e != ':') return 0;
  *hi = strtoll(e + 1, &e, 10);
  return *e == '}';
}

/* ONE_TO_ONE's "{{a->b},...}" as "{{src,dst},...}" in global ids into out. */
static tpu_status read_pairs(widen *w, const tpu_instr *in, const char *t, tpu_strbuf *out) {
  tpu_strbuf_printf(out, "{");
  int first = 1;
  for (const char *p = t; (p = strchr(p, '{')) != NULL;) {
    p++;
    if (*p == '{') continue;
    char *e;
    long long a = strtoll(p, &e, 10), b;
    if (e == p || strncmp(e, "->", 2)) goto bad;
    p = e + 2;
    b = strtoll(p, &e, 10);
    if (e == p || *e != '}') goto bad;
    p = e;
    long long ids[2] = {a, b};
    for (int k = 0; k < 2; k++) {
      long long sl = ids[k] / ID_SLICE, chip = ids[k] % ID_SLICE;
      if (sl < 1 || sl > w->slices || chip >= w->n)
        return TPU_FAIL(w->d, TPU_ERR_INVALID, in->loc,
                        "megascale target names chip %lld of slice %lld; the run has %lld slices of %lld chips",
                        chip, sl, (long long)w->slices, (long long)w->n);
      ids[k] = (sl - 1) * w->n + chip;
    }
    tpu_strbuf_printf(out, "%s{%lld,%lld}", first ? "" : ",", ids[0], ids[1]);
    first = 0;
  }
  tpu_strbuf_printf(out, "}");
  if (first) goto bad;
  return TPU_OK;
bad:
  return TPU_FAIL(w->d, TPU_ERR_INVALID, in->loc, "megascale target '%s' is not a list of {a->b} pairs", t);
}

static tpu_instr *find_send(tpu_comp *c, const char *key) {
  char k[256];
  for (int i = 0; i < c->ninstrs; i++) {
    tpu_instr *s = c->instrs[i];
    if (s->op == TPU_OP_SEND && is_megascale(s) && fattr(s, "_xla_host_transfer_rendezvous", k, sizeof k) &&
        !strcmp(k, key))
      return s;
  }
  return NULL;
}

/* The collective a recv (and its send) stand for, replacing its recv-done; the four host
 * transfers are left unused. */
static tpu_status widen_pair(widen *w, tpu_comp *c, tpu_instr *recv, tpu_instr *done, tpu_instr **coll) {
  char key[256], type[64], target[4096], red[32];
  if (!fattr(recv, "_xla_host_transfer_rendezvous", key, sizeof key))
    return TPU_FAIL(w->d, TPU_ERR_INVALID, recv->loc, "megascale recv '%s' has no _xla_host_transfer_rendezvous",
                    tpu_instr_user_name(recv));
  tpu_instr *send = find_send(c, key);
  if (!send)
    return TPU_FAIL(w->d, TPU_ERR_INVALID, recv->loc, "megascale recv '%s' has no send of rendezvous \"%s\" beside it",
                    tpu_instr_user_name(recv), key);
  if (!fattr(recv, "_xla_megascale_transfer_type", type, sizeof type)) type[0] = 0;
  if (!fattr(recv, "_xla_megascale_target", target, sizeof target)) target[0] = 0;
  const tpu_shape *rs = &recv->shape.elems[0], *ss = &send->operands[0]->shape;
  tpu_instr *x = NULL, *data = send->operands[0];
  char hint[300];
  snprintf(hint, sizeof hint, "%s.dcn", key);
  tpu_strbuf g;
  tpu_strbuf_init(&g);
  tpu_status st = TPU_OK;
  if (!strcmp(type, "ALL_REDUCE") || !strcmp(type, "ALL_GATHER")) {
    int64_t ns, lo, hi;
    if (!read_target(target, &ns, &lo, &hi))
      st = TPU_FAIL(w->d, TPU_ERR_INVALID, recv->loc, "megascale target '%s' is not {slices}x{first:last}", target);
    else if (ns != w->slices)
      st = TPU_FAIL(w->d, TPU_ERR_ARG, recv->loc,
                    "'%s' exchanges between %lld slices (_xla_megascale_target=%s); the run has %lld (--slices)",
                    tpu_instr_user_name(recv), (long long)ns, target, (long long)w->slices);
    else if (lo != 0 || hi != w->n - 1)
      st = TPU_FAIL(w->d, TPU_ERR_UNSUPPORTED, recv->loc,
                    "'%s' exchanges chips %lld..%lld of each slice; only all %lld of them are modelled",
                    tpu_instr_user_name(recv), (long long)lo, (long long)hi, (long long)w->n);
    tpu_strbuf_printf(&g, "{");
    for (int64_t chip = 0; chip < w->n; chip++) {
      tpu_strbuf_printf(&g, "%s{", chip ? "," : "");
      for (int64_t sl = 0; sl < w->slices; sl++) tpu_strbuf_printf(&g, "%s%lld", sl ? "," : "", (long long)(sl * w->n + chip));
      tpu_strbuf_printf(&g, "}");
    }
    tpu_strbuf_printf(&g, "}");
  }
  if (st == TPU_OK && !strcmp(type, "ALL_REDUCE")) {
    static const struct { const char *name; tpu_opcode op; } k_red[] = {
        {"SUM", TPU_OP_ADD}, {"MAX", TPU_OP_MAXIMUM}, {"MIN", TPU_OP_MINIMUM}, {"PRODUCT", TPU_OP_MULTIPLY}};
    tpu_opcode op = TPU_OP_COUNT;
    if (!fattr(recv, "_xla_megascale_reduce_operation", red, sizeof red)) strcpy(red, "?");
    for (size_t k = 0; k < sizeof k_red / sizeof k_red[0]; k++)
      if (!strcmp(red, k_red[k].name)) op = k_red[k].op;
    tpu_comp *sum = NULL;
    if (op == TPU_OP_COUNT)
      st = TPU_FAIL(w->d, TPU_ERR_UNSUPPORTED, recv->loc, "megascale reduction '%s' of '%s' is not modelled", red,
                    tpu_instr_user_name(recv));
    else if (!tpu_shape_equal(rs, ss))
      st = TPU_FAIL(w->d, TPU_ERR_INVALID, recv->loc, "megascale ALL_REDUCE '%s' receives another shape than it sends",
                    tpu_instr_user_name(recv));
    if (st == TPU_OK) st = tpu_build_scalar_comp(&w->b, "megascale.reduce", op, rs->dtype, NULL, &sum);
    if (st == TPU_OK) st = tpu_build_instr_like(&w->b, c, recv, TPU_OP_ALL_REDUCE, hint, rs, &data, 1, &x);
    if (st == TPU_OK) st = tpu_build_set_attr(&w->b, x, "to_apply", sum->name);
  } else if (st == TPU_OK && !strcmp(type, "ALL_GATHER")) {
    int ok = rs->rank == ss->rank && rs->rank >= 1 && rs->dims[0] == w->slices * ss->dims[0] && rs->dtype == ss->dtype;
    for (int i = 1; ok && i < rs->rank; i++) ok = rs->dims[i] == ss->dims[i];
    /* the slices' buffers follow one another: the leading dimension must be the major one */
    ok = ok && (!rs->has_layout || rs->minor_to_major[rs->rank - 1] == 0);
    if (!ok)
      st = TPU_FAIL(w->d, TPU_ERR_UNSUPPORTED, recv->loc,
                    "megascale ALL_GATHER '%s' does not gather the leading dimension over the %lld slices",
                    tpu_instr_user_name(recv), (long long)w->slices);
    if (st == TPU_OK) st = tpu_build_instr_like(&w->b, c, recv, TPU_OP_ALL_GATHER, hint, rs, &data, 1, &x);
    if (st == TPU_OK) st = tpu_build_set_attr(&w->b, x, "dimensions", "{0}");
  } else if (st == TPU_OK && !strcmp(type, "ONE_TO_ONE")) {
    if (!tpu_shape_equal(rs, ss))
      st = TPU_FAIL(w->d, TPU_ERR_INVALID, recv->loc, "megascale ONE_TO_ONE '%s' receives another shape than it sends",
                    tpu_instr_user_name(recv));
    tpu_strbuf p;
    tpu_strbuf_init(&p);
    if (st == TPU_OK) st = read_pairs(w, recv, target, &p);
    char *pairs = st == TPU_OK ? tpu_strbuf_take(&p) : NULL;
    if (st == TPU_OK && !pairs) st = TPU_FAIL(w->d, TPU_ERR_NOMEM, recv->loc, "out of memory");
    if (st == TPU_OK) st = tpu_build_instr_like(&w->b, c, recv, TPU_OP_COLLECTIVE_PERMUTE, hint, rs, &data, 1, &x);
    if (st == TPU_OK) st = tpu_build_set_attr(&w->b, x, "source_target_pairs", pairs);
    tpu_free(pairs);
    tpu_strbuf_deinit(&p);
  } else if (st == TPU_OK) {
    st = TPU_FAIL(w->d, TPU_ERR_UNSUPPORTED, recv->loc,
                  "megascale transfer type '%s' of '%s' is not modelled (ALL_REDUCE, ALL_GATHER and ONE_TO_ONE are)",
                  type[0] ? type : "(none)", tpu_instr_user_name(recv));
  }
  char *groups = st == TPU_OK && g.len ? tpu_strbuf_take(&g) : NULL;
  if (st == TPU_OK && groups) st = tpu_build_set_attr(&w->b, x, "replica_groups", groups);
  if (st == TPU_OK && groups) st = tpu_build_set_attr(&w->b, x, "use_global_device_ids", "true");
  tpu_free(groups);
  tpu_strbuf_deinit(&g);
  if (st == TPU_OK) st = tpu_build_set_attr(&w->b, x, "channel_id", attr_of(recv, "channel_id") ? attr_of(recv, "channel_id") : "1");
  /* The recv's attributes stay on the collective: it is still a host transfer to the compiler,
   * which XLA's collective combiners never take (combine-collectives leaves it alone). */
  if (st == TPU_OK) st = tpu_build_set_attr(&w->b, x, "frontend_attributes", attr_of(recv, "frontend_attributes"));
  if (st == TPU_OK && done) { /* recv-done -> (the collective's result, the recv's token) */
    tpu_instr *ops[2] = {x, recv->operands[0]}, *t;
    st = tpu_build_instr_like(&w->b, c, done, TPU_OP_TUPLE, "megascale.recv", &done->shape, ops, 2, &t);
    if (st == TPU_OK) tpu_build_replace_uses(c, done, t);
  }
  *coll = x;
  return st;
}

static tpu_status widen_comp(widen *w, tpu_comp *c) {
  int n0 = c->ninstrs;
  for (int i = 0; i < n0; i++) {
    tpu_instr *in = c->instrs[i];
    tpu_opcode base = tpu_collective_base(in->op);
    if (in->op == TPU_OP_PARTITION_ID) {
      TPU_TRY(widen_partition_id(w, c, in));
    } else if (tpu_op_class_of(in->op) == TPU_CLS_COLLECTIVE && !tpu_collective_is_done(in->op)) {
      if (base == TPU_OP_COLLECTIVE_PERMUTE) TPU_TRY(widen_pairs(w, in));
      else TPU_TRY(widen_groups(w, in));
    }
  }
  /* The megascale pairs: recv-done -> (collective, token); send-done -> its send's token. */
  char *drop = tpu_calloc((size_t)c->ninstrs + 1, 1);
  if (!drop) return TPU_FAIL(w->d, TPU_ERR_NOMEM, c->loc, "out of memory");
  tpu_status st = TPU_OK;
  for (int i = 0; st == TPU_OK && i < n0; i++) {
    tpu_instr *in = c->instrs[i];
    if (!is_megascale(in)) continue;
    drop[i] = 1;
    if (in->op == TPU_OP_SEND_DONE) {
      if (in->operands[0]->op != TPU_OP_SEND)
        st = TPU_FAIL(w->d, TPU_ERR_INVALID, in->loc, "send-done '%s' does not take a send", tpu_instr_user_name(in));
      else
        tpu_build_replace_uses(c, in, in->operands[0]->operands[1]);
    } else if (in->op == TPU_OP_RECV) {
      tpu_instr *done = NULL, *x;
      for (int j = 0; j < n0; j++)
        if (c->instrs[j]->op == TPU_OP_RECV_DONE && c->instrs[j]->operands[0] == in) done = c->instrs[j];
      st = widen_pair(w, c, in, done, &x);
    } else if (in->op == TPU_OP_RECV_DONE && in->operands[0]->op != TPU_OP_RECV) {
      st = TPU_FAIL(w->d, TPU_ERR_INVALID, in->loc, "recv-done '%s' does not take a recv", tpu_instr_user_name(in));
    }
  }
  if (st == TPU_OK) { /* the host transfers are unused now: drop them (and nothing else) */
    for (int i = 0; st == TPU_OK && i < c->ninstrs; i++)
      for (int k = 0; !(i < n0 && drop[i]) && k < c->instrs[i]->noperands; k++)
        if (c->instrs[i]->operands[k]->id < n0 && drop[c->instrs[i]->operands[k]->id])
          st = TPU_FAIL(w->d, TPU_ERR_UNSUPPORTED, c->instrs[i]->loc,
                        "'%s' reads the megascale transfer '%s' itself (only its received value is modelled)",
                        tpu_instr_user_name(c->instrs[i]), tpu_instr_user_name(c->instrs[i]->operands[k]));
    int keep = 0;
    for (int i = 0; i < c->ninstrs; i++)
      if (i >= n0 || !drop[i]) c->instrs[keep++] = c->instrs[i];
    c->ninstrs = keep;
  }
  tpu_free(drop);
  return st;
}

tpu_status tpu_megascale_widen(tpu_module *m, int64_t slices, tpu_diag *d) {
  int64_t r, n;
  tpu_module_device_grid(m, &r, &n);
  const tpu_instr *at = NULL;
  tpu_megascale_present(m, &at);
  if (r != 1)
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, at ? at->loc : tpu_noloc(),
                    "a multi-slice program of %lld replicas: only one replica of num_partitions chips per slice is "
                    "modelled", (long long)r);
  int named = 0;
  for (int i = 0; i < m->nattrs; i++) named |= !strcmp(m->attrs[i].name, "num_partitions");
  if (!named)
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, at ? at->loc : tpu_noloc(),
                    "a multi-slice program without num_partitions (the chips of one slice) in its header");
  if (slices < 2)
    return TPU_FAIL(d, TPU_ERR_ARG, at ? at->loc : tpu_noloc(),
                    "'%s' exchanges data between slices over the megascale runtime (DCN): run it with --slices K, K "
                    "the slices it was compiled for", at ? tpu_instr_user_name(at) : "?");
  widen w;
  memset(&w, 0, sizeof w);
  w.d = d;
  w.n = n;
  w.slices = slices;
  w.members = tpu_malloc(sizeof *w.members * (size_t)n);
  w.seen = tpu_malloc((size_t)n);
  tpu_status st = w.members && w.seen ? tpu_builder_init(&w.b, m, d) : TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  int inited = st == TPU_OK;
  int ncomps = m->ncomps;
  for (int c = 0; st == TPU_OK && c < ncomps; c++) st = widen_comp(&w, m->comps[c]);
  if (st == TPU_OK) st = tpu_build_finish_all(&w.b);
  if (st == TPU_OK) {
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)(n * slices));
    for (int i = 0; i < m->nattrs; i++)
      if (!strcmp(m->attrs[i].name, "num_partitions")) {
        m->attrs[i].value = tpu_arena_strdup(&m->arena, v);
        if (!m->attrs[i].value) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
      }
  }
  if (inited) tpu_builder_deinit(&w.b);
  tpu_free(w.members);
  tpu_free(w.seen);
  return st;
}
