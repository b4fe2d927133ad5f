/* Allocation hook with fault injection, and the bump arena. */
#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

static long g_fail_at;  /* 0 = off; else the count at which allocations start failing */
static long g_count;

static int should_fail(void) {
  g_count++;
  return g_fail_at > 0 && g_count >= g_fail_at;
}

int tpu_alloc_inject(void) { return should_fail(); }

long tpu_alloc_fail_after(long n) {
  long c = g_count;
  g_count = 0;
  g_fail_at = n > 0 ? n : 0;
  return c;
}

void *tpu_malloc(size_t n) {
  if (should_fail()) return NULL;
  return malloc(n ? n : 1);
}

void *tpu_calloc(size_t count, size_t size) {
  if (should_fail()) return NULL;
  if (!count || !size) return calloc(1, 1);
  return calloc(count, size);
}

void *tpu_realloc(void *p, size_t n) {
  if (should_fail()) return NULL;
  return realloc(p, n ? n : 1);
}

void tpu_free(void *p) { free(p); }

char *tpu_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *r = tpu_malloc(n);
  if (r) memcpy(r, s, n);
  return r;
}

int tpu_mul_ok(size_t a, size_t b, size_t *out) {
  if (a && b > SIZE_MAX / a) return 0;
  *out = a * b;
  return 1;
}

struct tpu_arena_block {
  tpu_arena_block *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
};

void tpu_arena_init(tpu_arena *a) { a->head = NULL; }

void tpu_arena_deinit(tpu_arena *a) {
  tpu_arena_block *b = a->head;
  while (b) {
    tpu_arena_block *n = b->next;
    tpu_free(b);
    b = n;
  }
  a->head = NULL;
}

void *tpu_arena_alloc(tpu_arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n == 0) n = 16;
  tpu_arena_block *b = a->head;
  if (!b || b->cap - b->used < n) {
    size_t cap = n > 60000 ? n : 65536 - sizeof(tpu_arena_block);
    if (cap > SIZE_MAX - sizeof(tpu_arena_block)) return NULL;
    b = tpu_malloc(sizeof(tpu_arena_block) + cap);
    if (!b) return NULL;
    b->used = 0;
    b->cap = cap;
    /* A big one-off block goes behind the head so the head keeps its free space. */
    if (a->head && n > 60000) {
      b->next = a->head->next;
      a->head->next = b;
    } else {
      b->next = a->head;
      a->head = b;
    }
  }
  void *p = b->data + b->used;
  b->used += n;
  memset(p, 0, n);
  return p;
}

char *tpu_arena_strndup(tpu_arena *a, const char *s, size_t n) {
  char *r = tpu_arena_alloc(a, n + 1);
  if (!r) return NULL;
  memcpy(r, s, n);
  r[n] = 0;
  return r;
}

char *tpu_arena_strdup(tpu_arena *a, const char *s) { return tpu_arena_strndup(a, s, strlen(s)); }
