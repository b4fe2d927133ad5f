/* The C library's malloc family replaced, in the musl-linked CLI only (TPU_OWN_MALLOC). */
#if defined(TPU_OWN_MALLOC)
/* Why: musl's allocator (mallocng) maps and unmaps memory for every block of 128 KB or more
 * and for each group of small ones, and returns pages as soon as they are free: a warm
 * `tpusim run` of a small program made 39 mmap and 33 munmap calls, each unmap a TLB flush
 * and each new map fresh page faults, and took more CPU than the glibc build although its
 * process starts in a third of the time (bench/cli_cache_s26.md). A CLI process is short:
 * here blocks come in power-of-two classes (16 B to 1 MiB) carved from 8 MiB regions mapped
 * once and never given back, a freed block goes on its class's list (the most recently freed
 * first: its pages are warm), and a calloc of never-used memory skips clearing it (a fresh
 * mapping is zero). Blocks above 1 MiB are mapped and unmapped whole. One lock: the
 * kernels' worker threads allocate little. */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define MIN_SHIFT 4
#define MAX_SHIFT 20 /* the largest class: 1 MiB */
#define NCLASS (MAX_SHIFT - MIN_SHIFT + 1)
#define REGION ((size_t)8 << 20)
#define HDR 16 /* keeps every block 16-byte aligned */
#define BIG 0xffffu
#define ALIGNED 0xfffeu

typedef struct hdr {
  size_t size;      /* BIG: the mapping's length; ALIGNED: the offset back to the raw block */
  unsigned cls;     /* class index, BIG or ALIGNED */
  unsigned fresh;   /* 1 while the block has never been handed out (zero bytes) */
} hdr;

typedef struct node {
  struct node *next;
} node;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static node *freelist[NCLASS];
static char *bump, *bump_end;

static hdr *hdr_of(void *p) { return (hdr *)((char *)p - HDR); }

static unsigned class_of(size_t n) {
  unsigned c = 0;
  size_t s = (size_t)1 << MIN_SHIFT;
  while (s < n) s <<= 1, c++;
  return c;
}

static void *take(size_t n, int *fresh) {
  if (n > ((size_t)1 << MAX_SHIFT)) {
    size_t len = (n + HDR + 4095) & ~(size_t)4095;
    if (len < n) return NULL;
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    hdr *h = m;
    h->size = len;
    h->cls = BIG;
    *fresh = 1;
    return (char *)m + HDR;
  }
  unsigned c = class_of(n ? n : 1);
  size_t bsz = ((size_t)1 << (c + MIN_SHIFT)) + HDR;
  pthread_mutex_lock(&lock);
  node *f = freelist[c];
  if (f) {
    freelist[c] = f->next;
    pthread_mutex_unlock(&lock);
    hdr_of(f)->fresh = 0;
    *fresh = 0;
    return f;
  }
  if (!bump || (size_t)(bump_end - bump) < bsz) {
    /* the rest of the old region is left unused (never touched: costs no page) */
    void *m = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      pthread_mutex_unlock(&lock);
      return NULL;
    }
    bump = m;
    bump_end = bump + REGION;
  }
  hdr *h = (hdr *)bump;
  bump += bsz;
  pthread_mutex_unlock(&lock);
  h->size = (size_t)1 << (c + MIN_SHIFT);
  h->cls = c;
  h->fresh = 1;
  *fresh = 1;
  return (char *)h + HDR;
}

void *malloc(size_t n) {
  int fresh;
  void *p = take(n, &fresh);
  if (!p) errno = ENOMEM;
  return p;
}

void free(void *p) {
  if (!p) return;
  hdr *h = hdr_of(p);
  if (h->cls == ALIGNED) {
    free((char *)p - h->size);
    return;
  }
  if (h->cls == BIG) {
    munmap(h, h->size);
    return;
  }
  node *f = p;
  pthread_mutex_lock(&lock);
  f->next = freelist[h->cls];
  freelist[h->cls] = f;
  pthread_mutex_unlock(&lock);
}

void *calloc(size_t k, size_t n) {
  if (n && k > SIZE_MAX / n) {
    errno = ENOMEM;
    return NULL;
  }
  int fresh;
  void *p = take(k * n, &fresh);
  if (!p) {
    errno = ENOMEM;
    return NULL;
  }
  if (!fresh) memset(p, 0, k * n);
  return p;
}

static size_t usable(void *p) {
  hdr *h = hdr_of(p);
  if (h->cls == ALIGNED) {
    char *raw = (char *)p - h->size;
    return usable(raw) - h->size;
  }
  return h->cls == BIG ? h->size - HDR : h->size;
}

size_t malloc_usable_size(void *p) { return p ? usable(p) : 0; }

void *realloc(void *p, size_t n) {
  if (!p) return malloc(n);
  size_t have = usable(p);
  if (n <= have && hdr_of(p)->cls != BIG) return p;
  void *q = malloc(n);
  if (!q) return NULL;
  memcpy(q, p, have < n ? have : n);
  free(p);
  return q;
}

void *aligned_alloc(size_t align, size_t n) {
  if (align <= HDR) return malloc(n);
  if (align & (align - 1)) {
    errno = EINVAL;
    return NULL;
  }
  if (n > SIZE_MAX - align - HDR) {
    errno = ENOMEM;
    return NULL;
  }
  char *raw = malloc(n + align + HDR);
  if (!raw) return NULL;
  char *p = (char *)(((uintptr_t)raw + HDR + align - 1) & ~(uintptr_t)(align - 1));
  hdr *h = hdr_of(p);
  h->size = (size_t)(p - raw);
  h->cls = ALIGNED;
  h->fresh = 0;
  return p;
}

int posix_memalign(void **out, size_t align, size_t n) {
  if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
  void *p = aligned_alloc(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

void *memalign(size_t align, size_t n) { return aligned_alloc(align, n); }
#else
typedef int tpu__malloc_own_unused; /* ISO C: a translation unit is not empty */
#endif
