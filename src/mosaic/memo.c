/* Counting a Pallas grid without running every step's body: when nothing a step does can
 * change what a later step sees (no scalar stores, DMAs, semaphores, PRNG state or logging
 * anywhere in the kernel: in count mode vectors carry no data, so every buffer keeps its
 * contents for the whole grid), a step's work is a function of the grid indices its body
 * reads. The first step at each distinct value of those indices runs the body; the others
 * take its work (a causal flash-attention kernel over (batch, heads, q, kv) reads only q and
 * kv: 16 bodies run for a 4 x 6 x 4 x 4 grid). */
#include <stdint.h>
#include <string.h>

#include "mosaic/mosaic_int.h"

/* Entries a memo holds at most (each a step's work); later keys run their body. */
#define MEMO_MAX (1 << 16)

/* What an index map's result component depends on: grid argument g directly (the block
 * index is the grid index), or a function of the grid arguments in mask (prefetch refs are
 * constant over the grid). */
typedef struct {
  int direct;    /* >= 0: the grid argument it is */
  uint32_t mask; /* else the grid arguments it reads */
} map_dep;

struct mo_memo {
  int ngrid;
  int nwin;
  map_dep *dep;              /* nwin x TPU_MO_MAX_RANK: each window's components (NULL: none memoized) */
  int64_t mcap, mn;          /* the index maps' table: key (window, component, masked grid indices) */
  int64_t *mkeys, *mval;
  unsigned char *mfull;
  int nused;
  int used[TPU_MO_MAX_RANK]; /* grid dimensions the body reads */
  int64_t cap, n;            /* slots (a power of two), entries */
  int64_t *keys;             /* cap x nused; */
  unsigned char *full;       /* slot in use */
  mo_work *work;             /* cap */
};

/* Ops after which a later step may see something else: stores to memory that vectors do not
 * reach in count mode, DMAs and semaphores, PRNG state, logs, calls (their callee is another
 * function), ops the interpreter does not model. */
static int impure(tpu_mo_code c) {
  switch (c) {
    case TPU_MO_MSTORE: case TPU_MO_SEM_ALLOC: case TPU_MO_SEM_SIGNAL: case TPU_MO_SEM_WAIT: case TPU_MO_SEM_READ:
    case TPU_MO_ENQUEUE_DMA: case TPU_MO_WAIT_DMA: case TPU_MO_SEM_BARRIER: case TPU_MO_ALLOCA:
    case TPU_MO_PRNG_SEED: case TPU_MO_PRNG_RANDOM: case TPU_MO_TLOG: case TPU_MO_TLOG_BUFFER: case TPU_MO_CALL:
    case TPU_MO_COUNT: return 1;
    default: return 0;
  }
}

/* 0 when some op of block b (nested regions included) is impure; marks in used[] the grid
 * arguments (ids args[0..ngrid)) the ops read. */
static int scan(const tpu_mo_block *b, const int *args, int ngrid, int *used) {
  for (int i = 0; i < b->nops; i++) {
    const tpu_mo_op *op = b->ops[i];
    if (impure(op->code)) return 0;
    for (int j = 0; j < op->nopd; j++)
      for (int g = 0; g < ngrid; g++)
        if (op->opd[j] == args[g]) used[g] = 1;
    for (int r = 0; r < op->nreg; r++)
      if (!scan(&op->reg[r], args, ngrid, used)) return 0;
  }
  return 1;
}

/* Window w's index map: each result component's dependence on the grid arguments (mask: per
 * value id, scratch of k->nvalues). A map with nested regions, or whose result is not its
 * block's return, leaves every component at mask ~0 (all grid arguments). */
static void map_deps(const tpu_mosaic *k, const tpu_mo_window *wi, uint32_t *mask, map_dep *dep) {
  for (int i = 0; i < TPU_MO_MAX_RANK; i++) dep[i] = (map_dep){.direct = -1, .mask = ~0u};
  if (!wi->has_map || !wi->map || wi->map->nreg != 1) return;
  const tpu_mo_block *b = &wi->map->reg[0];
  if (b->nargs < k->ngrid || b->nops < 1) return;
  const tpu_mo_op *ret = b->ops[b->nops - 1];
  if (ret->code != TPU_MO_RETURN || ret->nopd != wi->rank) return;
  for (int i = 0; i < b->nargs; i++) mask[b->args[i]] = i < k->ngrid ? 1u << i : 0;
  for (int i = 0; i < b->nops; i++) {
    const tpu_mo_op *op = b->ops[i];
    if (op->nreg) return;
    uint32_t m = 0;
    for (int j = 0; j < op->nopd; j++) m |= op->opd[j] >= 0 && op->opd[j] < k->nvalues ? mask[op->opd[j]] : ~0u;
    for (int j = 0; j < op->nres; j++)
      if (op->res[j] >= 0 && op->res[j] < k->nvalues) mask[op->res[j]] = m;
  }
  for (int i = 0; i < wi->rank; i++) {
    int id = ret->opd[i];
    dep[i].mask = id >= 0 && id < k->nvalues ? mask[id] : ~0u;
    for (int g = 0; g < k->ngrid; g++)
      if (id == b->args[g]) dep[i].direct = g;
  }
}

mo_memo *tpu__mo_memo_new(const tpu_mosaic *k) {
  const tpu_mo_block *body = &k->main->reg[0];
  int used[TPU_MO_MAX_RANK] = {0}, none[TPU_MO_MAX_RANK] = {0};
  if (k->ngrid > TPU_MO_MAX_RANK || body->nargs < k->ngrid) return NULL;
  for (int f = 0; f < k->nfuncs; f++) /* the kernel, its index maps and any other function */
    for (int r = 0; r < k->funcs[f]->nreg; r++)
      if (!scan(&k->funcs[f]->reg[r], body->args, k->funcs[f] == k->main ? k->ngrid : 0, k->funcs[f] == k->main ? used : none))
        return NULL;
  mo_memo *m = tpu_calloc(1, sizeof *m);
  if (!m) return NULL;
  for (int g = 0; g < k->ngrid; g++)
    if (used[g]) m->used[m->nused++] = g;
  m->ngrid = k->ngrid;
  m->nwin = k->nwindows;
  m->dep = tpu_malloc(sizeof *m->dep * (size_t)(k->nwindows + 1) * TPU_MO_MAX_RANK);
  uint32_t *mask = tpu_calloc((size_t)k->nvalues + 1, sizeof *mask);
  if (m->dep && mask)
    for (int w = 0; w < k->nwindows; w++) map_deps(k, &k->win[w], mask, m->dep + (size_t)w * TPU_MO_MAX_RANK);
  else {
    tpu_free(m->dep);
    m->dep = NULL;
  }
  tpu_free(mask);
  return m;
}

/* The index maps' table: key (w, i, grid indices in dep's mask, others 0) -> component. */
static uint64_t mhash(const int64_t *key, int kw) {
  uint64_t h = 0x9e3779b97f4a7c15u;
  for (int i = 0; i < kw; i++) {
    h ^= (uint64_t)key[i];
    h *= 0xff51afd7ed558ccdu;
    h ^= h >> 33;
  }
  return h;
}

static int64_t mfind(const mo_memo *m, const int64_t *key) {
  int kw = m->ngrid + 2;
  if (!m->mcap) return -1;
  for (int64_t s = (int64_t)(mhash(key, kw) & (uint64_t)(m->mcap - 1));; s = (s + 1) & (m->mcap - 1)) {
    if (!m->mfull[s]) return -1 - s;
    if (!memcmp(m->mkeys + s * kw, key, sizeof *key * (size_t)kw)) return s;
  }
}

static void mkey(const mo_memo *m, int w, int i, uint32_t mask, const int64_t *gi, int64_t *key) {
  key[0] = w;
  key[1] = i;
  for (int g = 0; g < m->ngrid; g++) key[2 + g] = mask >> g & 1 ? gi[g] : 0;
}

int tpu__mo_memo_map_get(const mo_memo *m, int w, int rank, const int64_t *gi, int64_t *bi) {
  if (!m->dep || w >= m->nwin) return 0;
  const map_dep *dep = m->dep + (size_t)w * TPU_MO_MAX_RANK;
  int64_t key[TPU_MO_MAX_RANK + 2];
  for (int i = 0; i < rank; i++) {
    if (dep[i].direct >= 0) {
      bi[i] = gi[dep[i].direct];
      continue;
    }
    if (dep[i].mask == ~0u) return 0;
    mkey(m, w, i, dep[i].mask, gi, key);
    int64_t s = mfind(m, key);
    if (s < 0) return 0;
    bi[i] = m->mval[s];
  }
  return 1;
}

static int mgrow(mo_memo *m) {
  int kw = m->ngrid + 2;
  int64_t cap = m->mcap ? 2 * m->mcap : 64;
  int64_t *keys = tpu_malloc(sizeof *keys * (size_t)(cap * kw)), *val = tpu_malloc(sizeof *val * (size_t)cap);
  unsigned char *full = tpu_calloc((size_t)cap, 1);
  if (!keys || !val || !full) {
    tpu_free(keys);
    tpu_free(val);
    tpu_free(full);
    return 0;
  }
  int64_t ocap = m->mcap, *okeys = m->mkeys, *oval = m->mval;
  unsigned char *ofull = m->mfull;
  m->mkeys = keys;
  m->mval = val;
  m->mfull = full;
  m->mcap = cap;
  for (int64_t s = 0; s < ocap; s++) {
    if (!ofull[s]) continue;
    int64_t t = -1 - mfind(m, okeys + s * kw);
    memcpy(m->mkeys + t * kw, okeys + s * kw, sizeof *keys * (size_t)kw);
    m->mval[t] = oval[s];
    m->mfull[t] = 1;
  }
  tpu_free(okeys);
  tpu_free(oval);
  tpu_free(ofull);
  return 1;
}

void tpu__mo_memo_map_put(mo_memo *m, int w, int rank, const int64_t *gi, const int64_t *bi) {
  if (!m->dep || w >= m->nwin) return;
  const map_dep *dep = m->dep + (size_t)w * TPU_MO_MAX_RANK;
  int64_t key[TPU_MO_MAX_RANK + 2];
  int kw = m->ngrid + 2;
  for (int i = 0; i < rank; i++) {
    if (dep[i].direct >= 0 || dep[i].mask == ~0u) continue;
    if (m->mn >= MEMO_MAX || (2 * (m->mn + 1) > m->mcap && !mgrow(m))) return;
    mkey(m, w, i, dep[i].mask, gi, key);
    int64_t s = mfind(m, key);
    if (s >= 0) continue;
    s = -1 - s;
    memcpy(m->mkeys + s * kw, key, sizeof *key * (size_t)kw);
    m->mval[s] = bi[i];
    m->mfull[s] = 1;
    m->mn++;
  }
}

void tpu__mo_memo_free(mo_memo *m) {
  if (!m) return;
  tpu_free(m->dep);
  tpu_free(m->mkeys);
  tpu_free(m->mval);
  tpu_free(m->mfull);
  tpu_free(m->keys);
  tpu_free(m->full);
  tpu_free(m->work);
  tpu_free(m);
}

static uint64_t hash(const mo_memo *m, const int64_t *gi) {
  uint64_t h = 0x9e3779b97f4a7c15u;
  for (int i = 0; i < m->nused; i++) {
    h ^= (uint64_t)gi[m->used[i]];
    h *= 0xff51afd7ed558ccdu;
    h ^= h >> 33;
  }
  return h;
}

static int same(const mo_memo *m, int64_t slot, const int64_t *gi) {
  const int64_t *k = m->keys + slot * (m->nused ? m->nused : 1);
  for (int i = 0; i < m->nused; i++)
    if (k[i] != gi[m->used[i]]) return 0;
  return 1;
}

static int64_t find(const mo_memo *m, const int64_t *gi) {
  if (!m->cap) return -1;
  for (int64_t s = (int64_t)(hash(m, gi) & (uint64_t)(m->cap - 1));; s = (s + 1) & (m->cap - 1)) {
    if (!m->full[s]) return -1 - s;
    if (same(m, s, gi)) return s;
  }
}

int tpu__mo_memo_get(const mo_memo *m, const int64_t *gi, mo_work *w) {
  int64_t s = find(m, gi);
  if (s < 0) return 0;
  memcpy(w, &m->work[s], sizeof *w);
  return 1;
}

static int grow(mo_memo *m) {
  int64_t cap = m->cap ? 2 * m->cap : 64, kw = m->nused ? m->nused : 1;
  int64_t *keys = tpu_malloc(sizeof *keys * (size_t)(cap * kw));
  unsigned char *full = tpu_calloc((size_t)cap, 1);
  mo_work *work = tpu_malloc(sizeof *work * (size_t)cap);
  if (!keys || !full || !work) {
    tpu_free(keys);
    tpu_free(full);
    tpu_free(work);
    return 0;
  }
  mo_memo old = *m;
  m->keys = keys;
  m->full = full;
  m->work = work;
  m->cap = cap;
  m->n = 0;
  int64_t gi[TPU_MO_MAX_RANK] = {0};
  for (int64_t s = 0; s < old.cap; s++) {
    if (!old.full[s]) continue;
    for (int i = 0; i < m->nused; i++) gi[m->used[i]] = old.keys[s * kw + i];
    tpu__mo_memo_put(m, gi, &old.work[s]);
  }
  tpu_free(old.keys);
  tpu_free(old.full);
  tpu_free(old.work);
  return 1;
}

void tpu__mo_memo_put(mo_memo *m, const int64_t *gi, const mo_work *w) {
  if (m->n >= MEMO_MAX) return;
  if (2 * (m->n + 1) > m->cap && !grow(m)) return; /* out of memory: the steps run their bodies */
  int64_t s = find(m, gi);
  if (s >= 0) return;
  s = -1 - s;
  int64_t kw = m->nused ? m->nused : 1;
  for (int i = 0; i < m->nused; i++) m->keys[s * kw + i] = gi[m->used[i]];
  memcpy(&m->work[s], w, sizeof *w);
  m->full[s] = 1;
  m->n++;
}
