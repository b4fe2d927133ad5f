/* The chip loader's memo (src/chip/chip.c): a second load of the file the memo holds is
 * answered from it (tpu_chip_load_again: *same = 1); a file settled and unchanged since is
 * not even read again, a rewritten one is; after tpu_chip_memo_off (`tpusim run`, which
 * loads one chip once) loads still give the same chip but fill no memo. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "chip/chip.h"

static tpu_chip a, b;

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = malloc(1 << 16);
  *len = buf ? fread(buf, 1, 1 << 16, f) : 0;
  fclose(f);
  return buf;
}

static void put(const char *path, const char *text, size_t len) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  fwrite(text, 1, len, f);
  fclose(f);
}

/* A copy of v5e.json, left to settle (its last change over SETTLED_S = 2 s old): the memo's
 * status of it answers later loads with no read; a rewrite of the same size is read and
 * seen, and read again on every load while it is fresh. */
static void settled_file(void) {
  size_t len = 0;
  char *text = slurp("chips/v5e.json", &len);
  CHECK(text != NULL && len > 0);
  if (!text) return;
  char path[64];
  snprintf(path, sizeof path, "/tmp/tpusim_chip_memo_%d.json", (int)getpid());
  put(path, text, len);
  sleep(3);
  tpu_diag d;
  uint64_t gen = 0;
  int same = 0;
  CHECK_EQ_INT(tpu_chip_load_again(path, &gen, &same, &a, &d), TPU_OK);
  CHECK_EQ_INT(same, 0);
  uint64_t r0 = tpu_chip_memo_reads();
  CHECK_EQ_INT(tpu_chip_load_again(path, &gen, &same, &a, &d), TPU_OK);
  CHECK_EQ_INT(same, 1);
  CHECK(tpu_chip_load(path, &b, &d) == TPU_OK && !memcmp(&a, &b, sizeof a));
  CHECK(tpu_chip_memo_reads() == r0); /* neither load read the file */
  char *at = strstr(text, "819e9"); /* v5e's HBM bandwidth: the same size, one byte changed */
  CHECK(at != NULL);
  if (at) at[0] = '4';
  put(path, text, len);
  CHECK_EQ_INT(tpu_chip_load_again(path, &gen, &same, &b, &d), TPU_OK);
  CHECK_EQ_INT(same, 0);
  CHECK(memcmp(&a, &b, sizeof a) != 0);
  CHECK(tpu_chip_memo_reads() == r0 + 1);
  CHECK_EQ_INT(tpu_chip_load_again(path, &gen, &same, &b, &d), TPU_OK);
  CHECK_EQ_INT(same, 1);
  CHECK(tpu_chip_memo_reads() == r0 + 2); /* fresh: its status is not trusted yet */
  unlink(path);
  free(text);
}

int main(void) {
  tpu_diag d;
  uint64_t gen = 0;
  int same = 0;
  CHECK_EQ_INT(tpu_chip_load_again("v5e", &gen, &same, &a, &d), TPU_OK);
  CHECK_EQ_INT(same, 0);
  CHECK_EQ_INT(tpu_chip_load_again("v5e", &gen, &same, &a, &d), TPU_OK);
  CHECK_EQ_INT(same, 1); /* the memo's */
  settled_file();

  tpu_chip_memo_off();
  uint64_t g4 = 0;
  CHECK_EQ_INT(tpu_chip_load_again("v4", &g4, &same, &a, &d), TPU_OK);
  CHECK_EQ_INT(same, 0);
  CHECK_EQ_INT(tpu_chip_load_again("v4", &g4, &same, &b, &d), TPU_OK);
  CHECK_EQ_INT(same, 0); /* loaded again: the memo was not filled with v4 */
  CHECK(!memcmp(&a, &b, sizeof a));
  CHECK_EQ_INT(tpu_chip_load("v4", &b, &d), TPU_OK);
  CHECK(!memcmp(&a, &b, sizeof a));
  CHECK_DONE();
}
