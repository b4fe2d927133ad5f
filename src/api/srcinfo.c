/* Where each profiled op came from (report/source.h), for the API's profile rows. */
#include <string.h>

#include "api/api_int.h"
#include "base/alloc.h"
#include "chip/program.h"

tpu_status tpu__api_source_rows(const tpu_program *prog, const tpu_profile *prof, const char *text, size_t len,
                                tpu_op_source **out, tpu_diag *d) {
  tpu_op_source *src = *out = tpu_calloc((size_t)prof->nrows + 1, sizeof *src);
  if (!src) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  tpu_sources *t = NULL;
  TPU_TRY(tpu_sources_read(text, len, &t, d));
  int ok = 1;
  for (int i = 0; ok && i < prof->nrows; i++) {
    int op = prof->rows[i].op;
    if (op >= 0 && op < prog->nops) ok = tpu_sources_fill(t, prog->ops[op].instr, &src[i]);
  }
  tpu_sources_free(t);
  return ok ? TPU_OK : TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
}

void tpu__api_source_free_rows(tpu_op_source *src, int nrows) {
  for (int i = 0; src && i < nrows; i++) tpu_op_source_free(&src[i]);
  tpu_free(src);
}
