/* A loaded chip's image (tpu_chip_image / tpu_chip_from_image: `tpusim run` keeps it in its
 * disk cache instead of parsing the chip's JSON on every warm run): read back, it is the
 * loaded chip, its numbers byte for byte (the timing cache's key hashes them so) and its
 * texts equal; a truncated, extended or altered image is refused. tpu_chip_read_file finds
 * the file a load reads. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "chip/chip.h"

static tpu_chip a, b;

static int same_text(const char *x, const char *y) { return x == y || (x && y && !strcmp(x, y)); }

/* b is a: the struct's bytes before the texts, then every text by its content */
static int same_chip(void) {
  if (memcmp(&a, &b, offsetof(tpu_chip, prov)) || a.nsources != b.nsources) return 0;
  for (int f = 0; f < TPU_CHIP_NFIELDS; f++)
    if (a.prov[f].status != b.prov[f].status || !same_text(a.prov[f].source, b.prov[f].source) ||
        !same_text(a.prov[f].note, b.prov[f].note) || !same_text(a.prov[f].mismatch, b.prov[f].mismatch))
      return 0;
  for (int i = 0; i < a.nsources; i++)
    if (!same_text(a.sources[i].key, b.sources[i].key) || !same_text(a.sources[i].cite, b.sources[i].cite)) return 0;
  return 1;
}

static void round_trip(const char *name) {
  tpu_diag d;
  CHECK_EQ_INT(tpu_chip_load(name, &a, &d), TPU_OK);
  size_t n = 0;
  unsigned char *img = tpu_chip_image(&a, &n);
  CHECK(img != NULL && n > sizeof a);
  if (!img) return;
  memset(&b, 0x5a, sizeof b);
  CHECK(tpu_chip_from_image(img, n, &b));
  CHECK(same_chip());
  CHECK(a.nsources > 0 && b.prov[0].source && *b.prov[0].source);
  CHECK(!tpu_chip_from_image(img, n - 1, &b)); /* truncated */
  CHECK(!tpu_chip_from_image(img, sizeof a - 1, &b));
  unsigned char *big = malloc(n + 1);
  CHECK(big != NULL);
  if (big) {
    memcpy(big, img, n);
    big[n] = 'x';
    CHECK(!tpu_chip_from_image(big, n + 1, &b)); /* a byte past its texts */
    free(big);
  }
  /* a NUL inside a text: the first text's first byte (after the struct and its length) */
  unsigned char *t = img + sizeof a + 4;
  unsigned char keep = *t;
  *t = 0;
  CHECK(!tpu_chip_from_image(img, n, &b));
  *t = keep;
  CHECK(tpu_chip_from_image(img, n, &b) && same_chip());
  tpu_free(img);
}

int main(void) {
  const char *names[] = {"v4", "v5e", "v5p", "v6e", "v4:core"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) round_trip(names[i]);

  static char buf[65536];
  char path[600];
  size_t n = 0;
  CHECK(tpu_chip_read_file("v5e:core", path, sizeof path, buf, sizeof buf, &n));
  CHECK(strstr(path, "chips/v5e.json") != NULL);
  FILE *f = fopen("chips/v5e.json", "rb");
  CHECK(f != NULL);
  if (f) {
    static char want[65536];
    size_t m = fread(want, 1, sizeof want, f);
    fclose(f);
    CHECK(m == n && !memcmp(want, buf, n));
  }
  CHECK(!tpu_chip_read_file("v5e", path, sizeof path, buf, 100, &n)); /* larger than the buffer */
  CHECK(!tpu_chip_read_file("/nonexistent/chip.json", path, sizeof path, buf, sizeof buf, &n));
  CHECK_DONE();
}
