/* The interpreter's large zeroed buffers (VMEM blocks, scratch, HBM operands) straight from
 * the kernel's zero pages: a timing count never touches most of a block (vectors carry no
 * data), so a page is only cleared when something reads or writes it, where calloc from a
 * reused heap clears every byte of every block on every count (several MB per flash-attention
 * kernel, a quarter of a 540B plan candidate's kernel count). */
#include <stdint.h>
#include <sys/mman.h>

#include "mosaic/mosaic_int.h"

/* Buffers from this many bytes up are mapped; smaller ones come from the heap. */
#define MAP_MIN ((size_t)256 << 10)

double *tpu__mo_zeroed(int64_t n) {
  size_t bytes = sizeof(double) * (size_t)(n + 1);
  if (bytes < MAP_MIN) return tpu_calloc((size_t)n + 1, sizeof(double));
  if (tpu_alloc_inject()) return NULL; /* counted as an allocation (fault injection) */
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

void tpu__mo_release(double *p, int64_t n) {
  if (!p) return;
  size_t bytes = sizeof(double) * (size_t)(n + 1);
  if (bytes < MAP_MIN) tpu_free(p);
  else munmap(p, bytes);
}
