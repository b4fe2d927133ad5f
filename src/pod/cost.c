/* Collective costs from the ICI link model: the collective's groups (or permute pairs) over
 * every device of the module, routed on the slice's torus (docs/pod.md). */
#include "pod/cost.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "chip/program.h"
#include "ir/collective.h"
#include "pod/dcn.h"

/* ---- The memo of link-model answers (cost.h). ---- */

/* The key's fixed part: the slice, the op and its device grid, every field written one by
 * one into a zeroed struct (no padding left undefined); the text of each attribute that
 * names its devices follows it. */
typedef struct key_head {
  char chip[32];
  int64_t ndims, dims[3], wrap[3], twisted, chips_per_slice, slices, nchips, devices_per_chip, chips_per_host,
      links_per_chip;
  double link_bw, hop_s, dcn_bw, dcn_host_bw, dcn_latency_s, pcie_bw;
  int64_t base, mode, replicas, partitions;
  double operand_bytes;
} key_head;

/* The attributes the groups and pairs are read from (ir/collective.h), in the key in this
 * order, each as a presence byte and its text with its NUL. */
static const char *const k_group_attrs[] = {"replica_groups", "device_ids", "source_target_pairs"};
enum { NGROUP_ATTRS = sizeof k_group_attrs / sizeof *k_group_attrs };

static const char *attr_of(const tpu_instr *in, const char *name) {
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, name)) return in->attrs[i].value ? in->attrs[i].value : "";
  return NULL;
}

typedef struct memo_key {
  unsigned char *bytes; /* key_head, then the attributes */
  size_t len;
  uint64_t hash;
} memo_key;

typedef struct memo_entry {
  memo_key key;
  tpu_coll_cost c;
  tpu_pod_coll_info info; /* r and the DCN part (in and link_bytes unset) */
  double *link_bytes;     /* per link slot, run-length coded: (value, count) pairs */
  int64_t nruns;
  struct memo_entry *next;
} memo_entry;

/* Bytes the memo may hold (keys and link bytes); past it, it starts again. */
#define MEMO_BUDGET ((size_t)128 << 20)

struct tpu_pod_coll_memo {
  memo_entry **slot;
  int64_t nslots, n, hits, misses;
  size_t bytes;
};

static uint64_t hash_words(const unsigned char *p, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  for (; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  h ^= h >> 29;
  return h * 0xc4ceb9fe1a85ec53ull;
}

static double operands_bytes(const tpu_instr *in);

/* The memo's key of collective `in` on slice t: everything its fresh costing reads. */
static tpu_status key_make(const tpu_topology *t, const tpu_instr *in, int64_t replicas, int64_t partitions,
                           memo_key *k, tpu_diag *d) {
  key_head h;
  memset(&h, 0, sizeof h);
  memset(k, 0, sizeof *k);
  memcpy(h.chip, t->chip, sizeof h.chip < sizeof t->chip ? sizeof h.chip : sizeof t->chip);
  h.ndims = t->ndims;
  for (int a = 0; a < 3; a++) h.dims[a] = t->dims[a], h.wrap[a] = t->wrap[a];
  h.twisted = t->twisted;
  h.chips_per_slice = t->chips_per_slice;
  h.slices = t->slices;
  h.nchips = t->nchips;
  h.devices_per_chip = t->devices_per_chip;
  h.chips_per_host = t->chips_per_host;
  h.links_per_chip = t->links_per_chip;
  h.link_bw = t->link_bw;
  h.hop_s = t->hop_s;
  h.dcn_bw = t->dcn_bw;
  h.dcn_host_bw = t->dcn_host_bw;
  h.dcn_latency_s = t->dcn_latency_s;
  h.pcie_bw = t->pcie_bw;
  h.base = tpu_collective_base(in->op);
  h.mode = tpu_collective_mode(in);
  h.replicas = replicas;
  h.partitions = partitions;
  h.operand_bytes = operands_bytes(in);
  const char *v[NGROUP_ATTRS];
  size_t n = sizeof h;
  for (int i = 0; i < NGROUP_ATTRS; i++) {
    v[i] = attr_of(in, k_group_attrs[i]);
    n += 1 + (v[i] ? strlen(v[i]) + 1 : 0);
  }
  k->bytes = tpu_malloc(n);
  if (!k->bytes) return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  memcpy(k->bytes, &h, sizeof h);
  size_t at = sizeof h;
  for (int i = 0; i < NGROUP_ATTRS; i++) {
    k->bytes[at++] = v[i] != NULL;
    if (!v[i]) continue;
    size_t len = strlen(v[i]) + 1;
    memcpy(k->bytes + at, v[i], len);
    at += len;
  }
  k->len = n;
  k->hash = hash_words(k->bytes, k->len);
  return TPU_OK;
}

tpu_pod_coll_memo *tpu_pod_coll_memo_new(void) { return tpu_calloc(1, sizeof(tpu_pod_coll_memo)); }

static void memo_clear(tpu_pod_coll_memo *m) {
  for (int64_t i = 0; i < m->nslots; i++)
    while (m->slot[i]) {
      memo_entry *e = m->slot[i];
      m->slot[i] = e->next;
      tpu_free(e->key.bytes);
      tpu_free(e->link_bytes);
      tpu_free(e);
    }
  m->n = 0;
  m->bytes = 0;
}

void tpu_pod_coll_memo_free(tpu_pod_coll_memo *m) {
  if (!m) return;
  memo_clear(m);
  tpu_free(m->slot);
  tpu_free(m);
}

void tpu_pod_coll_memo_stats(const tpu_pod_coll_memo *m, int64_t *entries, int64_t *hits, int64_t *misses) {
  if (entries) *entries = m ? m->n : 0;
  if (hits) *hits = m ? m->hits : 0;
  if (misses) *misses = m ? m->misses : 0;
}

static memo_entry *memo_find(tpu_pod_coll_memo *m, const memo_key *k) {
  memo_entry *e = m->nslots ? m->slot[k->hash & (uint64_t)(m->nslots - 1)] : NULL;
  while (e && !(e->key.hash == k->hash && e->key.len == k->len && !memcmp(e->key.bytes, k->bytes, k->len)))
    e = e->next;
  if (e) m->hits++;
  else m->misses++;
  return e;
}

/* The link bytes of entry e, decoded into lb (nl slots). */
static void runs_decode(const memo_entry *e, double *lb) {
  int64_t l = 0;
  for (int64_t i = 0; i < e->nruns; i++) {
    double v = e->link_bytes[2 * i];
    int64_t cnt = (int64_t)e->link_bytes[2 * i + 1];
    for (int64_t j = 0; j < cnt; j++) lb[l++] = v;
  }
}

/* Keeps an answer (c, info and the link bytes per slot); the key moves into the memo. On
 * failure (out of memory) nothing is kept and the key stays the caller's. */
static void memo_add(tpu_pod_coll_memo *m, memo_key *k, const tpu_coll_cost *c, const tpu_pod_coll_info *info,
                     const double *lb, int64_t nl) {
  int64_t nruns = 0;
  for (int64_t l = 0; l < nl; l++)
    if (l == 0 || memcmp(&lb[l], &lb[l - 1], sizeof *lb)) nruns++;
  size_t need = k->len + sizeof(double) * 2 * (size_t)nruns + sizeof(memo_entry);
  if (need > MEMO_BUDGET / 4) return;
  if (m->bytes + need > MEMO_BUDGET) memo_clear(m);
  if (m->n + 1 > m->nslots) { /* grow to keep chains short */
    int64_t ns = m->nslots ? 2 * m->nslots : 256;
    memo_entry **slot = tpu_calloc((size_t)ns, sizeof *slot);
    if (!slot) return;
    for (int64_t i = 0; i < m->nslots; i++)
      while (m->slot[i]) {
        memo_entry *e = m->slot[i];
        m->slot[i] = e->next;
        e->next = slot[e->key.hash & (uint64_t)(ns - 1)];
        slot[e->key.hash & (uint64_t)(ns - 1)] = e;
      }
    tpu_free(m->slot);
    m->slot = slot;
    m->nslots = ns;
  }
  memo_entry *e = tpu_calloc(1, sizeof *e);
  double *runs = tpu_malloc(sizeof *runs * (size_t)(2 * nruns + 2));
  if (!e || !runs) {
    tpu_free(e);
    tpu_free(runs);
    return;
  }
  int64_t r = -1;
  for (int64_t l = 0; l < nl; l++) {
    if (l == 0 || memcmp(&lb[l], &lb[l - 1], sizeof *lb)) {
      r++;
      runs[2 * r] = lb[l];
      runs[2 * r + 1] = 0;
    }
    runs[2 * r + 1] += 1;
  }
  e->key = *k;
  k->bytes = NULL;
  e->c = *c;
  e->info = *info;
  e->info.in = NULL;
  e->info.link_bytes = NULL;
  e->link_bytes = runs;
  e->nruns = nruns;
  int64_t i = (int64_t)(e->key.hash & (uint64_t)(m->nslots - 1));
  e->next = m->slot[i];
  m->slot[i] = e;
  m->n++;
  m->bytes += need;
}

static double leaves_bytes(const tpu_shape *s) {
  if (s->dtype == TPU_TUPLE) {
    double b = 0;
    for (int i = 0; i < s->ntuple; i++) b += leaves_bytes(&s->elems[i]);
    return b;
  }
  if (!tpu_dtype_is_array(s->dtype)) return 0;
  return (double)tpu_shape_numel(s) * tpu_dtype_bits(s->dtype) / 8; /* s4/u4: two per byte */
}

static double operands_bytes(const tpu_instr *in) {
  double b = 0;
  for (int i = 0; i < in->noperands; i++) b += leaves_bytes(&in->operands[i]->shape);
  return b;
}

const tpu_topology *tpu_pod_cost_topology(const tpu_pod_cost_ctx *x) {
  return x->topo ? x->topo : x->have_own ? &x->own : NULL;
}

void tpu_pod_cost_free(tpu_pod_cost_ctx *x) {
  for (int i = 0; i < x->ninfo; i++) tpu_free(x->info[i].link_bytes);
  tpu_free(x->info);
  x->info = NULL;
  x->ninfo = x->capinfo = 0;
}

static int64_t slice_of(const tpu_topology *t, int64_t dev) {
  int64_t chip = tpu_topology_chip(t, dev);
  return chip < 0 ? -1 : chip / t->chips_per_slice;
}

/* Multi-slice collectives, as XLA runs them hierarchically (the TPU compiler's own
 * multi-slice programs: an in-slice reduce-scatter, an all-reduce between slices by the
 * megascale runtime over DCN, an in-slice all-gather; an all-gather exchanges between
 * slices first, then gathers in the slice): each group is cut into its per-slice subgroups
 * (op->groups is replaced by them, in *sub) for the ICI part, and the exchange between the
 * K slices a group spans is timed on the DCN model (pod/dcn.h) with every member sending
 * its share (tpu_dcn_share). A permute pair across slices sends its operand over DCN.
 * *dcn receives the DCN phase's time. */
static tpu_status split_slices(const tpu_topology *t, const tpu_instr *in, tpu_ici_op *op, tpu_pod_coll_info *dcn,
                               int64_t **sub, tpu_diag *d) {
  *sub = NULL;
  int64_t *senders = NULL, ns = 0;
  double bytes = 0;
  int64_t steps = 0;
  tpu_status st = TPU_OK;
  if (op->kind == TPU_ICI_PERMUTE) {
    int64_t w = 0, cross = 0;
    senders = tpu_malloc(sizeof *senders * (size_t)(op->npairs + 1));
    if (!senders) return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
    for (int64_t i = 0; i < op->npairs; i++) {
      int64_t a = op->pairs[2 * i], b = op->pairs[2 * i + 1];
      if (slice_of(t, a) != slice_of(t, b)) {
        senders[ns++] = tpu_topology_chip(t, a);
        cross++;
        continue;
      }
      ((int64_t *)op->pairs)[2 * w] = a; /* intra-slice pairs stay on ICI */
      ((int64_t *)op->pairs)[2 * w + 1] = b;
      w++;
    }
    op->npairs = w;
    if (cross) {
      tpu_dcn_share(op->kind, 2, 1, op->operand_bytes, &bytes, &steps);
      dcn->dcn_slices = 2;
    }
  } else {
    int64_t S = op->group_size, G = op->ngroups;
    if (S <= 1 || G <= 0) return TPU_OK;
    /* How many slices each group spans (all alike, evenly). */
    int64_t *cnt = tpu_calloc((size_t)t->slices + 1, sizeof *cnt);
    int64_t *buf = tpu_malloc(sizeof *buf * (size_t)(S * G + 1));
    if (!cnt || !buf) {
      tpu_free(cnt);
      tpu_free(buf);
      return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
    }
    int64_t K = 0, m = 0, w = 0;
    for (int64_t g = 0; g < G && st == TPU_OK; g++) {
      memset(cnt, 0, sizeof *cnt * (size_t)t->slices);
      for (int64_t i = 0; i < S; i++) cnt[slice_of(t, op->groups[g * S + i])]++;
      int64_t k = 0, mm = 0;
      for (int64_t q = 0; q < t->slices; q++)
        if (cnt[q]) {
          k++;
          if (mm && cnt[q] != mm)
            st = TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "'%s': a group splits unevenly over slices",
                          tpu_instr_user_name(in));
          mm = cnt[q];
        }
      if (g == 0) K = k, m = mm;
      else if (k != K || mm != m)
        st = TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "'%s': groups span slices differently", tpu_instr_user_name(in));
      /* Its per-slice subgroups, in group order. */
      for (int64_t q = 0; st == TPU_OK && q < t->slices; q++)
        for (int64_t i = 0; i < S; i++)
          if (slice_of(t, op->groups[g * S + i]) == q) buf[w++] = op->groups[g * S + i];
    }
    tpu_free(cnt);
    if (st != TPU_OK || K <= 1) {
      tpu_free(buf);
      return st;
    }
    /* Every member sends over DCN: the chips of the groups (a device per chip here). */
    senders = tpu_malloc(sizeof *senders * (size_t)(S * G + 1));
    if (!senders) {
      tpu_free(buf);
      return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
    }
    for (int64_t i = 0; i < S * G; i++) senders[ns++] = tpu_topology_chip(t, op->groups[i]);
    tpu_dcn_share(op->kind, K, m, op->operand_bytes, &bytes, &steps);
    dcn->dcn_slices = K;
    /* The in-slice part: an all-gather gathers the K shards each member got over DCN; an
     * all-to-all moves only the blocks that stay in the slice. */
    if (op->kind == TPU_ICI_ALL_GATHER) op->operand_bytes *= (double)K;
    if (op->kind == TPU_ICI_ALL_TO_ALL) op->operand_bytes /= (double)K;
    op->groups = buf;
    op->group_size = m;
    op->ngroups = G * K;
    *sub = buf;
  }
  if (ns) {
    tpu_dcn_phase ph = {senders, ns, bytes, steps};
    tpu_dcn_result r;
    st = tpu_dcn_time(t, &ph, &r, d);
    if (st != TPU_OK) {
      char why[sizeof d->msg];
      snprintf(why, sizeof why, "%s", d->msg);
      st = TPU_FAIL(d, st, in->loc, "'%s' spans slices but %s", tpu_instr_user_name(in), why);
    }
    dcn->dcn_seconds = r.seconds;
    dcn->dcn_bytes = bytes;
    dcn->dcn_rate = r.rate;
    dcn->dcn_per_host = r.max_per_host;
  }
  tpu_free(senders);
  if (st != TPU_OK) {
    tpu_free(*sub);
    *sub = NULL;
  }
  return st;
}

/* Largest number of link-byte doubles kept over all collectives (for the link report). */
#define KEEP_LINK_BYTES ((int64_t)1 << 22)

/* The slice's topology for the module of `in` (the given one, or the chip's default for its
 * devices, made once). */
static tpu_status topology_of(tpu_pod_cost_ctx *x, const tpu_instr *in, const tpu_topology **out, int64_t *ndevp,
                              tpu_diag *d) {
  int64_t replicas, partitions;
  tpu_module_device_grid(in->parent->module, &replicas, &partitions);
  int64_t ndev = replicas * partitions;
  const tpu_topology *t = x->topo;
  if (!t) {
    if (!x->have_own) {
      TPU_TRY(tpu_topology_default(x->chip, ndev, &x->own, d));
      x->have_own = 1;
    }
    t = &x->own;
  }
  if (t->nchips * t->devices_per_chip != ndev)
    return TPU_FAIL(d, TPU_ERR_ARG, in->loc, "the module has %lld devices but the topology has %lld",
                    (long long)ndev, (long long)(t->nchips * t->devices_per_chip));
  *out = t;
  *ndevp = ndev;
  return TPU_OK;
}

tpu_status tpu_pod_hops(void *user, const tpu_instr *in, int64_t from, int64_t to, int64_t *hops, tpu_diag *d) {
  tpu_pod_cost_ctx *x = user;
  const tpu_topology *t = NULL;
  int64_t ndev = 0;
  *hops = -1;
  TPU_TRY(topology_of(x, in, &t, &ndev, d));
  if (from < 0 || to < 0 || from >= ndev || to >= ndev)
    return TPU_FAIL(d, TPU_ERR_ARG, in->loc, "device %lld or %lld is not one of the module's %lld",
                    (long long)from, (long long)to, (long long)ndev);
  if (t->devices_per_chip != 1 || slice_of(t, from) != slice_of(t, to)) return TPU_OK;
  if (tpu_topology_chip(t, from) == tpu_topology_chip(t, to)) {
    *hops = 0;
    return TPU_OK;
  }
  int64_t pair[2] = {from, to};
  tpu_ici_op op;
  memset(&op, 0, sizeof op);
  op.kind = TPU_ICI_PERMUTE;
  op.pairs = pair;
  op.npairs = 1;
  op.operand_bytes = 1;
  tpu_ici_result r;
  TPU_TRY(tpu_ici_time(t, &op, NULL, &r, d));
  *hops = r.hops;
  return TPU_OK;
}

/* The collective's cost afresh (its groups read and routed on the link model); its answer is
 * appended to x->info. */
static tpu_status cost_fresh(tpu_pod_cost_ctx *x, const tpu_instr *in, const tpu_topology *t, int64_t ndev,
                             int64_t replicas, int64_t partitions, tpu_coll_cost *c, tpu_diag *d) {
  tpu_opcode base = tpu_collective_base(in->op);
  tpu_ici_op op;
  memset(&op, 0, sizeof op);
  int64_t *ids = tpu_malloc(sizeof *ids * (size_t)(2 * ndev + 2));
  int64_t *members = tpu_malloc(sizeof *members * (size_t)(ndev + 1));
  unsigned char *seen = tpu_calloc((size_t)ndev + 1, 1);
  tpu_status st = ids && members && seen ? TPU_OK : TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  double vin = operands_bytes(in);
  if (st == TPU_OK && base == TPU_OP_COLLECTIVE_PERMUTE) {
    op.kind = TPU_ICI_PERMUTE;
    int64_t *srcs = ndev == replicas * partitions ? tpu_malloc(sizeof *srcs * (size_t)(ndev + 1)) : NULL;
    if (srcs) st = tpu_collective_permute_sources(in, replicas, partitions, srcs, d); /* the pairs read once */
    for (int64_t dev = 0; st == TPU_OK && dev < ndev; dev++) {
      int64_t src;
      if (srcs)
        src = srcs[dev];
      else
        st = tpu_collective_permute_source(in, replicas, partitions, dev, &src, d);
      if (st == TPU_OK && src >= 0 && src != dev) {
        ids[2 * op.npairs] = src;
        ids[2 * op.npairs + 1] = dev;
        op.npairs++;
      }
    }
    tpu_free(srcs);
    op.pairs = ids;
    op.operand_bytes = vin;
    c->bytes = op.npairs ? vin : 0;
  } else if (st == TPU_OK) {
    switch (base) {
      case TPU_OP_ALL_REDUCE: op.kind = TPU_ICI_ALL_REDUCE; break;
      case TPU_OP_ALL_GATHER: op.kind = TPU_ICI_ALL_GATHER; break;
      case TPU_OP_REDUCE_SCATTER: op.kind = TPU_ICI_REDUCE_SCATTER; break;
      case TPU_OP_ALL_TO_ALL: op.kind = TPU_ICI_ALL_TO_ALL; break;
      case TPU_OP_COLLECTIVE_BROADCAST: op.kind = TPU_ICI_BROADCAST; break;
      default: st = TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "no ICI cost for '%s'", tpu_op_name(in->op));
    }
    /* Every group once, in group order (groups partition the devices). */
    int64_t n = 0, self;
    tpu_coll_groups cg;
    memset(&cg, 0, sizeof cg);
    if (st == TPU_OK) st = tpu_coll_groups_read(in, replicas, partitions, &cg, d);
    for (int64_t dev = 0; st == TPU_OK && dev < ndev; dev++) {
      if (seen[dev]) continue;
      st = tpu_coll_groups_members(in, &cg, partitions, dev, members, &n, &self, d);
      if (st != TPU_OK) break;
      if (op.ngroups == 0) op.group_size = n;
      if (n != op.group_size) {
        st = TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "'%s': groups of different sizes are not timed",
                      tpu_instr_user_name(in));
        break;
      }
      for (int64_t i = 0; i < n; i++) {
        seen[members[i]] = 1;
        ids[op.ngroups * n + i] = members[i];
      }
      op.ngroups++;
    }
    tpu_coll_groups_free(&cg);
    op.groups = ids;
    op.operand_bytes = vin; /* all-gather: the shard; the others: the whole operand */
    double f = op.group_size > 0 ? (double)(op.group_size - 1) / (double)op.group_size : 0;
    c->bytes = base == TPU_OP_ALL_GATHER ? f * vin * (double)op.group_size
               : base == TPU_OP_ALL_REDUCE ? 2 * f * vin
               : base == TPU_OP_COLLECTIVE_BROADCAST ? vin : f * vin;
  }
  /* Several slices: groups (or pairs) that span them go through the data-center network. */
  tpu_pod_coll_info dcn;
  memset(&dcn, 0, sizeof dcn);
  int64_t *sub = NULL;
  if (st == TPU_OK && t->slices > 1) st = split_slices(t, in, &op, &dcn, &sub, d);
  double dcn_s = dcn.dcn_seconds;
  tpu_ici_result r;
  memset(&r, 0, sizeof r);
  int64_t nl = tpu_topology_nlinks(t);
  int keep = st == TPU_OK && (int64_t)(x->ninfo + 1) * nl <= KEEP_LINK_BYTES;
  double *lb = st == TPU_OK ? tpu_calloc((size_t)nl, sizeof *lb) : NULL;
  if (st == TPU_OK && !lb) st = TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  int trivial = op.kind == TPU_ICI_PERMUTE ? op.npairs == 0 : op.group_size <= 1;
  if (st == TPU_OK && !trivial) st = tpu_ici_time(t, &op, lb, &r, d);
  for (int64_t l = 0; st == TPU_OK && !trivial && l < nl; l++) /* the kinds of link it loads */
    if (lb[l] > 0) c->lanes |= 1u << (l % TPU_TOPO_LINK_SLOTS);
  if (st == TPU_OK && dcn.dcn_seconds > 0) c->lanes |= 1u << (TPU_INSN_LANES - 1); /* and the DCN */
  if (!keep) {
    tpu_free(lb);
    lb = NULL;
  }
  if (st == TPU_OK && trivial && dcn_s == 0) c->bytes = 0;
  if (st == TPU_OK) {
    c->seconds = r.seconds + dcn_s;
    if (x->ninfo == x->capinfo) {
      int nc = x->capinfo ? 2 * x->capinfo : 16;
      tpu_pod_coll_info *ni = tpu_realloc(x->info, sizeof *ni * (size_t)nc);
      if (!ni) st = TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
      else x->info = ni, x->capinfo = nc;
    }
    if (st == TPU_OK) {
      dcn.in = in;
      dcn.r = r;
      dcn.link_bytes = lb;
      x->info[x->ninfo++] = dcn;
      lb = NULL;
    }
  }
  tpu_free(lb);
  tpu_free(sub);
  tpu_free(ids);
  tpu_free(members);
  tpu_free(seen);
  return st;
}

tpu_status tpu_pod_coll_cost(void *user, const tpu_instr *in, tpu_coll_cost *c, tpu_diag *d) {
  tpu_pod_cost_ctx *x = user;
  memset(c, 0, sizeof *c);
  int64_t replicas, partitions;
  tpu_module_device_grid(in->parent->module, &replicas, &partitions);
  const tpu_topology *t = NULL;
  int64_t ndev = 0;
  TPU_TRY(topology_of(x, in, &t, &ndev, d));
  if (!x->memo) return cost_fresh(x, in, t, ndev, replicas, partitions, c, d);
  memo_key mk;
  TPU_TRY(key_make(t, in, replicas, partitions, &mk, d));
  const memo_entry *hit = memo_find(x->memo, &mk);
  tpu_status st = TPU_OK;
  if (hit) { /* the answer the fresh costing gave, appended to x->info as it would be */
    int64_t nl = tpu_topology_nlinks(t);
    int keep = (int64_t)(x->ninfo + 1) * nl <= KEEP_LINK_BYTES;
    double *lb = keep ? tpu_malloc(sizeof *lb * (size_t)(nl ? nl : 1)) : NULL;
    if (keep && !lb) st = TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
    if (st == TPU_OK && x->ninfo == x->capinfo) {
      int nc = x->capinfo ? 2 * x->capinfo : 16;
      tpu_pod_coll_info *ni = tpu_realloc(x->info, sizeof *ni * (size_t)nc);
      if (!ni) st = TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
      else x->info = ni, x->capinfo = nc;
    }
    if (st == TPU_OK) {
      if (lb) runs_decode(hit, lb);
      *c = hit->c;
      x->info[x->ninfo] = hit->info;
      x->info[x->ninfo].in = in;
      x->info[x->ninfo].link_bytes = lb;
      x->ninfo++;
    } else {
      tpu_free(lb);
    }
    tpu_free(mk.bytes);
    return st;
  }
  int n0 = x->ninfo;
  st = cost_fresh(x, in, t, ndev, replicas, partitions, c, d);
  if (st == TPU_OK && x->ninfo == n0 + 1) { /* kept for the next compile that asks (best effort) */
    const tpu_pod_coll_info *info = &x->info[n0];
    int64_t nl = tpu_topology_nlinks(t);
    if (info->link_bytes) memo_add(x->memo, &mk, c, info, info->link_bytes, nl); /* (not kept: not memoized) */
  }
  tpu_free(mk.bytes);
  return st;
}
