/* Host callbacks: custom-call "xla_ffi_python_cpu_callback" hands its operands to the process's
 * hook (the PJRT plugin's Python side: jax.debug.print, pure_callback, io_callback) and
 * takes the result's arrays back from it. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "ir/custom_call.h"
#include "ref/ref_int.h"

static _Atomic(tpu_host_callback_fn) g_hook;

void tpu_ref_set_host_callback(tpu_host_callback_fn fn) { atomic_store(&g_hook, fn); }

/* The device a maximal sharding puts the call on ("{maximal device=N}"), -1 when none. */
static int64_t maximal_device(const tpu_instr *in) {
  for (int i = 0; i < in->nattrs; i++) {
    if (strcmp(in->attrs[i].name, "sharding")) continue;
    const char *p = strstr(in->attrs[i].value, "maximal device=");
    if (p) return strtoll(p + 15, NULL, 10);
  }
  return -1;
}

tpu_status tpu__ref_host_callback(tpu_interp *ip, const tpu_instr *in, const tpu_tensor *const *args,
                                  tpu_tensor *out, tpu_diag *d) {
  tpu_host_callback_fn fn = atomic_load(&g_hook);
  int64_t id = tpu_host_callback_id(in);
  if (id < 0)
    return TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "host callback '%s' has no callback number in its backend_config",
                    tpu_instr_user_name(in));
  if (!fn)
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc,
                    "host callback '%s' (jax.debug.print, pure_callback or io_callback) runs only in the process "
                    "that lowered it: run the program through JAX's tpusim platform (JAX_PLATFORMS=tpusim)",
                    tpu_instr_user_name(in));
  TPU_TRY(tpu__ref_alloc_shape(out, &in->shape, d));
  const tpu_ref_comm *comm = tpu__ref_comm(ip);
  int64_t device = comm ? comm->device : 0, on = maximal_device(in);
  int nleaves = tpu_tensor_count_leaves(out);
  /* A call placed on one device runs there only; the others keep zeros for a result (a
   * token or nothing: what XLA's programs give them). */
  if (on >= 0 && on != device) {
    const tpu_tensor **ol = tpu_calloc((size_t)(nleaves ? nleaves : 1), sizeof *ol);
    if (!ol) {
      tpu_tensor_free(out);
      return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
    }
    tpu_tensor_collect_leaves(out, ol);
    int arrays = 0;
    for (int k = 0; k < nleaves; k++) arrays += tpu_dtype_is_array(ol[k]->dtype);
    tpu_free(ol);
    if (!arrays) return TPU_OK;
  }
  int nin = 0;
  for (int k = 0; k < in->noperands; k++) nin += tpu_tensor_count_leaves(args[k]);
  const tpu_tensor **il = tpu_calloc((size_t)(nin ? nin : 1), sizeof *il);
  const tpu_tensor **ol = tpu_calloc((size_t)(nleaves ? nleaves : 1), sizeof *ol);
  void **iptr = tpu_calloc((size_t)(nin ? nin : 1), sizeof *iptr);
  void **optr = tpu_calloc((size_t)(nleaves ? nleaves : 1), sizeof *optr);
  int64_t *ib = tpu_calloc((size_t)(nin ? nin : 1), sizeof *ib);
  int64_t *ob = tpu_calloc((size_t)(nleaves ? nleaves : 1), sizeof *ob);
  tpu_status st = TPU_OK;
  if (!il || !ol || !iptr || !optr || !ib || !ob) {
    st = TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  } else {
    int n = 0;
    for (int k = 0; k < in->noperands; k++) {
      tpu_tensor_collect_leaves(args[k], il + n);
      n += tpu_tensor_count_leaves(args[k]);
    }
    int ai = 0, ao = 0;
    for (int k = 0; k < n; k++)
      if (tpu_dtype_is_array(il[k]->dtype)) {
        iptr[ai] = il[k]->data;
        ib[ai++] = (int64_t)il[k]->nbytes;
      }
    tpu_tensor_collect_leaves(out, ol);
    for (int k = 0; k < nleaves; k++)
      if (tpu_dtype_is_array(ol[k]->dtype)) {
        optr[ao] = ol[k]->data;
        ob[ao++] = (int64_t)ol[k]->nbytes;
      }
    char err[512] = "";
    if (fn((uint64_t)id, device, ai, iptr, ib, ao, optr, ob, err, (int)sizeof err)) {
      err[sizeof err - 1] = 0;
      st = TPU_FAIL(d, TPU_ERR_INVALID, in->loc, "host callback '%s' failed: %s", tpu_instr_user_name(in),
                    err[0] ? err : "(no message)");
    }
  }
  tpu_free(il);
  tpu_free(ol);
  tpu_free(iptr);
  tpu_free(optr);
  tpu_free(ib);
  tpu_free(ob);
  if (st != TPU_OK) tpu_tensor_free(out);
  return st;
}
