/* The in-process cache of compiled programs: a run of a module text already run with the same
 * settings reuses its parse, partition, compiled program and timing instead of redoing them. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_int.h"
#include "base/alloc.h"
#include "chip/program.h"

/* Entries kept (least recently used first out); tpu_sim_cache_configure changes it. */
#define DEFAULT_ENTRIES 16

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static tpu__compiled *g_head; /* most recently used first */
static int g_count, g_max = -1;
static int64_t g_hits, g_misses;

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
  tpu__api_source_free_rows(c->src, c->prof.nrows);
  tpu_profile_free(&c->prof);
  tpu_timeline_free(&c->tl);
  tpu_program_free(c->prog);
  tpu_module_free(c->cm);
  tpu_module_free(c->vm);
  tpu_pod_cost_free(&c->costs);
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
}

void tpu_sim_cache_stats(int64_t *hits, int64_t *misses, int *entries) {
  pthread_mutex_lock(&g_lock);
  if (hits) *hits = g_hits;
  if (misses) *misses = g_misses;
  if (entries) *entries = g_count;
  pthread_mutex_unlock(&g_lock);
}

/* FNV-1a, 64 bits. */
static uint64_t hash_bytes(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
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
