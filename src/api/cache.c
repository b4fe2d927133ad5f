/* The in-process cache of compiled programs: a run of a module text already run with the same
 * settings reuses its parse, partition, compiled program and timing instead of redoing them. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "base/alloc.h"
#include "chip/program.h"
#include "compile/compile.h"

/* Entries kept (least recently used first out); tpu_sim_cache_configure changes it. */
#define DEFAULT_ENTRIES 16

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu__compiled *g_head; /* most recently used first */
static int g_count, g_max = -1;
static int64_t g_hits, g_misses;
static void memos_free(void);

static int max_entries(void) {
  if (g_max < 0) { /* TPUSIM_CACHE_ENTRIES sets the starting size (0: no cache) */
    const char *e = getenv("TPUSIM_CACHE_ENTRIES");
    char *end;
    long v = e ? strtol(e, &end, 10) : -1;
    g_max = e && *e && !*end && v >= 0 && v < 1000000 ? (int)v : DEFAULT_ENTRIES;
  }
  return g_max;
}

static void entry_free(tpu__compiled *c) {
  tpu__trip_timings_free(c);
  tpu__api_source_free_rows(c->src, c->prof.nrows);
  tpu_profile_free(&c->prof);
  tpu_timeline_free(&c->tl);
  tpu_program_free(c->prog);
  tpu_module_free(c->cm);
  tpu__module_release(c->vm, c->vm_refs);
  tpu_pod_cost_free(&c->costs);
  tpu_mosaic_seen_free(&c->seen);
  tpu_free(c->key);
  tpu_free(c);
}

void tpu__cache_release(tpu__compiled *c) {
  if (!c) return;
  pthread_mutex_lock(&g_lock);
  int last = --c->refs == 0;
  pthread_mutex_unlock(&g_lock);
  if (last) entry_free(c);
}

/* Drops the least recently used entries past `keep` (under the lock); they are freed once
 * no result holds them. Returns the list of entries to free now. */
static tpu__compiled *trim_locked(int keep) {
  tpu__compiled *dead = NULL, **pp = &g_head;
  int n = 0;
  while (*pp) {
    tpu__compiled *c = *pp;
    if (n < keep) {
      n++;
      pp = &c->next;
      continue;
    }
    *pp = c->next;
    g_count--;
    c->in_cache = 0;
    if (--c->refs == 0) {
      c->next = dead;
      dead = c;
    }
  }
  return dead;
}

static void free_list(tpu__compiled *dead) {
  while (dead) {
    tpu__compiled *n = dead->next;
    entry_free(dead);
    dead = n;
  }
}

void tpu_sim_cache_configure(int max_entries_) {
  pthread_mutex_lock(&g_lock);
  g_max = max_entries_ < 0 ? 0 : max_entries_;
  tpu__compiled *dead = trim_locked(g_max);
  pthread_mutex_unlock(&g_lock);
  free_list(dead);
}

void tpu_sim_cache_clear(void) {
  pthread_mutex_lock(&g_lock);
  tpu__compiled *dead = trim_locked(0);
  g_hits = g_misses = 0;
  pthread_mutex_unlock(&g_lock);
  free_list(dead);
  memos_free();
}

void tpu_sim_cache_stats(int64_t *hits, int64_t *misses, int *entries) {
  pthread_mutex_lock(&g_lock);
  if (hits) *hits = g_hits;
  if (misses) *misses = g_misses;
  if (entries) *entries = g_count;
  pthread_mutex_unlock(&g_lock);
}

/* A 64-bit hash of the key (its text and the 49 KB chip struct): four independent lanes of
 * 8-byte words, each multiplied and rotated, then folded; the tail byte by byte (FNV-1a).
 * Only equal keys must hash equal: a hit is confirmed by comparing the whole key. */
static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t hash_bytes(const unsigned char *p, size_t n) {
  const uint64_t k1 = 0x9e3779b97f4a7c15ull, k2 = 0xc2b2ae3d27d4eb4full;
  uint64_t h[4] = {k1, k2, k1 ^ n, k2 ^ n};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int l = 0; l < 4; l++) {
      uint64_t w;
      memcpy(&w, p + i + 8 * l, 8);
      h[l] = rotl64(h[l] ^ (w * k2), 29) * k1;
    }
  uint64_t x = rotl64(h[0], 1) + rotl64(h[1], 7) + rotl64(h[2], 12) + rotl64(h[3], 18);
  for (; i < n; i++) {
    x ^= p[i];
    x *= 1099511628211ull;
  }
  x ^= x >> 33;
  x *= k2;
  x ^= x >> 29;
  return x;
}

tpu__compiled *tpu__cache_find(const unsigned char *key, size_t keylen) {
  if (max_entries() == 0) return NULL;
  uint64_t h = hash_bytes(key, keylen);
  pthread_mutex_lock(&g_lock);
  tpu__compiled **pp = &g_head, *c = NULL;
  for (; *pp; pp = &(*pp)->next)
    if ((*pp)->hash == h && (*pp)->keylen == keylen && !memcmp((*pp)->key, key, keylen)) {
      c = *pp;
      *pp = c->next; /* to the front */
      c->next = g_head;
      g_head = c;
      c->refs++;
      break;
    }
  if (c) g_hits++;
  else g_misses++;
  pthread_mutex_unlock(&g_lock);
  return c;
}

tpu__compiled *tpu__cache_reuse(tpu__compiled *c, int hit) {
  if (!c || max_entries() == 0) return NULL;
  pthread_mutex_lock(&g_lock);
  if (c->in_cache) {
    tpu__compiled **pp = &g_head;
    while (*pp != c) pp = &(*pp)->next;
    *pp = c->next; /* to the front */
    c->next = g_head;
    g_head = c;
    c->refs++;
    g_hits += hit != 0;
  } else {
    c = NULL;
  }
  pthread_mutex_unlock(&g_lock);
  return c;
}

tpu_status tpu__cache_new(const unsigned char *key, size_t keylen, tpu__compiled **out, tpu_diag *d) {
  *out = NULL;
  tpu__compiled *c = tpu_calloc(1, sizeof *c);
  if (c) c->key = tpu_malloc(keylen ? keylen : 1);
  if (!c || !c->key) {
    tpu_free(c);
    return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  }
  if (keylen) memcpy(c->key, key, keylen);
  c->keylen = keylen;
  c->hash = hash_bytes(key, keylen);
  c->refs = 1;
  *out = c;
  return TPU_OK;
}

void tpu__cache_insert(tpu__compiled *c) {
  if (max_entries() == 0) return;
  pthread_mutex_lock(&g_lock);
  c->refs++; /* the cache's own reference */
  c->in_cache = 1;
  c->next = g_head;
  g_head = c;
  g_count++;
  tpu__compiled *dead = trim_locked(g_max);
  pthread_mutex_unlock(&g_lock);
  free_list(dead);
}

/* Held while an entry's program is compiled, so that two threads running one entry compile
 * it once. */
static pthread_mutex_t g_build = PTHREAD_MUTEX_INITIALIZER;

void tpu__cache_build_lock(void) { pthread_mutex_lock(&g_build); }
void tpu__cache_build_unlock(void) { pthread_mutex_unlock(&g_build); }

/* Matmul plans searched so far, per chip (the whole struct compared), shared by the compiles
 * of every entry for it (tpu_compile_opts.mm_memo); under the build lock. A memo past
 * MEMO_MAX plans starts again; tpu_sim_cache_clear drops them all. */
#define MEMO_MAX 65536
typedef struct memo_entry {
  tpu_chip chip;
  struct tpu_mm_memo *m;
  struct memo_entry *next;
} memo_entry;
static memo_entry *g_memos;

struct tpu_mm_memo *tpu__cache_mm_memo(const tpu_chip *chip) {
  if (max_entries() == 0) return NULL; /* no cache: nothing kept between runs */
  memo_entry *e = g_memos;
  while (e && memcmp(&e->chip, chip, sizeof *chip)) e = e->next;
  if (!e) {
    if (!(e = tpu_calloc(1, sizeof *e))) return NULL;
    e->chip = *chip;
    e->next = g_memos;
    g_memos = e;
  }
  if (e->m && tpu_mm_memo_size(e->m) > MEMO_MAX) {
    tpu_mm_memo_free(e->m);
    e->m = NULL;
  }
  if (!e->m) e->m = tpu_mm_memo_new();
  return e->m;
}

/* The link model's answers (pod/cost.h), for every chip and slice alike (the key holds the
 * slice); under the build lock. */
static tpu_pod_coll_memo *g_coll_memo;

tpu_pod_coll_memo *tpu__cache_coll_memo(void) {
  if (max_entries() == 0) return NULL;
  if (!g_coll_memo) g_coll_memo = tpu_pod_coll_memo_new();
  return g_coll_memo;
}

static void memos_free(void) {
  pthread_mutex_lock(&g_build);
  tpu_pod_coll_memo_free(g_coll_memo);
  g_coll_memo = NULL;
  while (g_memos) {
    memo_entry *e = g_memos;
    g_memos = e->next;
    tpu_mm_memo_free(e->m);
    tpu_free(e);
  }
  pthread_mutex_unlock(&g_build);
}
