/* The chip loader's memo (src/chip/chip.c): a second load of the file the memo holds is
 * answered from it (tpu_chip_load_again: *same = 1); after tpu_chip_memo_off (`tpusim run`,
 * which loads one chip once) loads still give the same chip but fill no memo. */
#include <string.h>

#include "check.h"
#include "chip/chip.h"

static tpu_chip a, b;

int main(void) {
  tpu_diag d;
  uint64_t gen = 0;
  int same = 0;
  CHECK_EQ_INT(tpu_chip_load_again("v5e", &gen, &same, &a, &d), TPU_OK);
  CHECK_EQ_INT(same, 0);
  CHECK_EQ_INT(tpu_chip_load_again("v5e", &gen, &same, &a, &d), TPU_OK);
  CHECK_EQ_INT(same, 1); /* the memo's */

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
