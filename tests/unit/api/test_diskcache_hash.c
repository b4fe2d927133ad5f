/* The disk cache's hash (src/api/diskcache.c): every bit of the input, its length and the
 * seed change it, in the four-lane blocks and in the serial tail alike. */
#include <stdint.h>
#include <string.h>

#include "api/diskcache.h"
#include "check.h"

int main(void) {
  unsigned char buf[203];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 37 + 11);
  const uint64_t h0 = tpu_dcache_hash(buf, sizeof buf, 1);
  CHECK(h0 == tpu_dcache_hash(buf, sizeof buf, 1)); /* a function of its input alone */
  CHECK(h0 != tpu_dcache_hash(buf, sizeof buf, 2));
  long same = 0;
  for (size_t bit = 0; bit < 8 * sizeof buf; bit++) { /* 192 bytes of blocks, an 11-byte tail */
    buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    same += tpu_dcache_hash(buf, sizeof buf, 1) == h0;
    buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
  }
  CHECK_EQ_INT(same, 0);
  /* every prefix a different value (lengths across the block size and the tail) */
  uint64_t seen[sizeof buf + 1];
  for (size_t n = 0; n <= sizeof buf; n++) {
    seen[n] = tpu_dcache_hash(buf, n, 1);
    for (size_t k = 0; k < n; k++) same += seen[k] == seen[n];
  }
  CHECK_EQ_INT(same, 0);
  /* words swapped between two lanes of one block: a different value */
  unsigned char sw[64];
  memcpy(sw, buf, 64);
  memcpy(sw, buf + 8, 8);
  memcpy(sw + 8, buf, 8);
  CHECK(tpu_dcache_hash(sw, 64, 1) != tpu_dcache_hash(buf, 64, 1));
  CHECK_DONE();
}
