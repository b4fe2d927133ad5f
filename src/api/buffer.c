/* The public simulator API: buffers, arrays kept in the library between runs (made from a
 * caller's array or moved out of a run's result). */
#include <string.h>

#include "api/api_int.h"
#include "base/alloc.h"

tpu_status tpu_sim_buffer_new(const tpu_sim_array *a, tpu_sim_buffer **out, tpu_diag *d) {
  if (!out) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_buffer_new: no out-parameter");
  *out = NULL;
  if (!a) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_buffer_new: no array");
  tpu_dtype dt;
  if (!tpu__api_internal_dtype(a->dtype, &dt))
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "the array has an unknown dtype code %d", a->dtype);
  if (a->rank < 0 || a->rank > TPU_MAX_RANK)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "the array has rank %d (0 to %d)", a->rank, TPU_MAX_RANK);
  for (int k = 0; k < a->rank; k++)
    if (a->dims[k] < 0) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "the array has a negative dimension");
  tpu_sim_buffer *b = tpu_calloc(1, sizeof *b);
  if (!b) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  tpu_status st = tpu_tensor_alloc(&b->t, dt, a->rank, a->dims, d);
  if (st == TPU_OK && (a->nbytes != b->t.nbytes || (b->t.nbytes && !a->data)))
    st = TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "the array: %zu bytes given, its dtype and dims need %zu", a->nbytes,
                  b->t.nbytes);
  if (st != TPU_OK) {
    tpu_sim_buffer_free(b);
    return st;
  }
  if (b->t.nbytes) memcpy(b->t.data, a->data, b->t.nbytes);
  if (dt == TPU_PRED) /* as a run's inputs: any non-zero byte is true */
    for (size_t k = 0; k < b->t.nbytes; k++) ((unsigned char *)b->t.data)[k] = ((unsigned char *)b->t.data)[k] != 0;
  *out = b;
  return TPU_OK;
}

void tpu_sim_buffer_free(tpu_sim_buffer *b) {
  if (!b) return;
  tpu_tensor_free(&b->t);
  tpu_free(b);
}

int tpu_sim_buffer_donated(const tpu_sim_buffer *b) { return b ? b->donated : 0; }

tpu_status tpu_sim_buffer_array(const tpu_sim_buffer *b, tpu_sim_array *out, tpu_diag *d) {
  if (!b || !out) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_buffer_array: no buffer or out-parameter");
  memset(out, 0, sizeof *out);
  if (b->donated) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "the buffer was donated to a run: its array is gone");
  out->dtype = tpu__api_public_dtype(b->t.dtype);
  out->rank = b->t.rank;
  memcpy(out->dims, b->t.dims, sizeof out->dims[0] * (size_t)b->t.rank);
  out->data = b->t.data;
  out->nbytes = b->t.nbytes;
  return TPU_OK;
}

tpu_status tpu_sim_result_take_output(tpu_sim_result *r, int i, tpu_sim_buffer **out, tpu_diag *d) {
  if (!r || !out) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_result_take_output: no result or out-parameter");
  *out = NULL;
  if (i < 0 || i >= r->nleaves)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "output %d does not exist: the run has %d", i, r->nleaves);
  if (r->taken[i]) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "output %d was already moved into a buffer", i);
  tpu_tensor *t = (tpu_tensor *)r->leaves[i]; /* the result owns its value; leaves point into it */
  if (t->dtype == TPU_TOKEN || t->dtype == TPU_TUPLE)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "output %d is a %s, not an array", i, tpu_dtype_name(t->dtype));
  tpu_sim_buffer *b = tpu_calloc(1, sizeof *b);
  if (!b) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  b->t = *t; /* the data moves; the leaf keeps its type and dims but no data */
  t->data = NULL;
  t->nbytes = 0;
  r->taken[i] = 1;
  *out = b;
  return TPU_OK;
}
