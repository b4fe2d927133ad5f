/* The one allocation hook (with fault injection for tests) and a bump arena. */
#ifndef TPU_BASE_ALLOC_H
#define TPU_BASE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

/* All heap allocation in tpusim goes through these. They return NULL on failure (real or
 * injected); tpu_free(NULL) is a no-op. */
void *tpu_malloc(size_t n);
void *tpu_calloc(size_t count, size_t size);
void *tpu_realloc(void *p, size_t n);
void tpu_free(void *p);
char *tpu_strdup(const char *s);

/* Fault injection: the n-th allocation from now (1-based) and every later one fail;
 * n <= 0 turns injection off. Returns how many allocations have been made since the last
 * call, so a test can count a run's allocations and then fail each in turn. */
long tpu_alloc_fail_after(long n);
/* Counts one allocation that does not reach the hooks above (a block handed out again by a
 * cache of freed blocks) as they count theirs; nonzero when injection says it must fail. */
int tpu_alloc_inject(void);

/* Multiplies with overflow check; returns 0 on overflow. */
int tpu_mul_ok(size_t a, size_t b, size_t *out);

/* A bump arena: everything allocated from it is freed at once by tpu_arena_free. */
typedef struct tpu_arena_block tpu_arena_block;
typedef struct tpu_arena {
  tpu_arena_block *head;
} tpu_arena;

void tpu_arena_init(tpu_arena *a);
void tpu_arena_deinit(tpu_arena *a);
/* Zeroed, 16-byte aligned memory; NULL on failure. */
void *tpu_arena_alloc(tpu_arena *a, size_t n);
char *tpu_arena_strndup(tpu_arena *a, const char *s, size_t n);
char *tpu_arena_strdup(tpu_arena *a, const char *s);

#endif
