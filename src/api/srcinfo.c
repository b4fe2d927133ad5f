/* Where each profiled op came from (report/source.h), for the API's profile rows. */
#include <string.h>

#include "api/api_int.h"
#include "base/alloc.h"
#include "chip/program.h"

tpu_status tpu__api_source_rows(tpu_sim_result *r, const char *text, size_t len, tpu_diag *d) {
  r->src = tpu_calloc((size_t)r->prof.nrows + 1, sizeof *r->src);
  if (!r->src) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  tpu_sources *t = NULL;
  TPU_TRY(tpu_sources_read(text, len, &t, d));
  int ok = 1;
  for (int i = 0; ok && i < r->prof.nrows; i++) {
    int op = r->prof.rows[i].op;
    if (op >= 0 && op < r->prog->nops) ok = tpu_sources_fill(t, r->prog->ops[op].instr, &r->src[i]);
  }
  tpu_sources_free(t);
  return ok ? TPU_OK : TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
}

void tpu__api_source_free(tpu_sim_result *r) {
  for (int i = 0; r->src && i < r->prof.nrows; i++) tpu_op_source_free(&r->src[i]);
  tpu_free(r->src);
  r->src = NULL;
}
