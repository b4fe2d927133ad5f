/* custom-call targets tpusim runs: the bookkeeping ones JAX and XLA emit (sharding
 * annotations, shard_map markers, memory-space moves, the TPU compiler's assumptions) are
 * the identity on the values; XLA CPU's "TopK" is top-k. Every other target is refused by
 * name (CPU library calls such as LAPACK's, Pallas/Mosaic kernels). */
#ifndef TPU_IR_CUSTOM_CALL_H
#define TPU_IR_CUSTOM_CALL_H

#include <stddef.h>

#include "ir/ir.h"

typedef enum {
  TPU_CC_OTHER = 0, /* not run */
  TPU_CC_IDENTITY,  /* the operand (several operands: the tuple of them) */
  TPU_CC_TOPK,      /* (values, s32 indices) of the k largest along the last dimension */
  /* The TPU compiler's async collective fusions: "AsyncCollectiveStart" takes a collective
   * and gives (its operand, its result, synchronisation state...); "AsyncCollectiveDone"
   * takes the buffers and the collective again and gives the collective's result. */
  TPU_CC_ASYNC_START,
  TPU_CC_ASYNC_DONE,
  /* "ConcatBitcast": its operands (slices a slice-start put side by side in VMEM) joined
   * along one dimension (the one where they differ from the result: the physically major
   * one), as one buffer: no work */
  TPU_CC_CONCAT_BITCAST,
  /* "AllocateBuffer": a buffer the TPU compiler reserves (no operands), whose contents
   * later ops write (async slices, a windowed collective matmul's loop): no work; its
   * value before that is undefined, and the reference gives zeros */
  TPU_CC_ALLOCATE,
  /* "xla_ffi_python_cpu_callback": a host callback the PJRT plugin lowered (jax.debug.print,
   * pure_callback, io_callback); backend_config={index = N : ui64} numbers it in the process that lowered
   * it, whose hook (ref.h) runs it. Operands: (token,) arrays...; result: its arrays (and a
   * token), a tuple of several. */
  TPU_CC_HOST_CALLBACK,
  /* "tpu_custom_call": a Pallas/Mosaic kernel (src/mosaic/), run from the kernel text
   * python/tpusim/pallas_decode.py adds to its backend_config */
  TPU_CC_MOSAIC,
  /* "ZeroCrop" (the XLA TPU compiler, before a buffer leaves the chip): its operand's tiled
   * buffer, padding zeroed, viewed as the result's shape of the same bytes: a bitcast */
  TPU_CC_ZERO_CROP,
  /* "PartialReduce": the TPU's approximate top-k (jax.lax.approx_max_k/approx_min_k).
   * Operands: n arrays of one shape (values, their indices), then n scalars (their initial
   * values); called_computations={comparator} on (lhs0, rhs0, lhs1, rhs1, ...);
   * backend_config {"reduction_dim": D, ...}. Result: the n arrays with dimension D cut
   * to M bins; bin b holds the element the comparator puts first among those at
   * positions i = b (mod M) along D (the bins stride the vector lanes), the initial
   * values when it has none. A sort + slice after it picks the top k of the bins. */
  TPU_CC_PARTIAL_REDUCE
} tpu_cc_kind;

/* The first of a custom call's called_computations (NULL when none is found). */
const tpu_comp *tpu_custom_call_comp(const tpu_instr *in);
/* An integer field "KEY": N of a custom call's JSON backend_config (-1 when absent). */
int64_t tpu_custom_call_config_int(const tpu_instr *in, const char *key);

/* The dimension a ConcatBitcast custom call joins its operands along. */
int tpu_concat_bitcast_dim(const tpu_instr *in);
/* Is ConcatBitcast `in` one of byte pieces (1-D, 1-byte types) whose bytes are the result's
 * bytes in memory (the XLA TPU compiler's v6e programs)? Its values are not modelled. */
int tpu_concat_bitcast_bytes(const tpu_instr *in);

tpu_cc_kind tpu_custom_call_kind(const tpu_instr *in);

/* A host callback's number (its backend_config), -1 when it has none. */
int64_t tpu_host_callback_id(const tpu_instr *in);

/* The target without quotes ("?" when missing) into buf. */
const char *tpu_custom_call_target(const tpu_instr *in, char *buf, size_t n);

/* Verifier rule: known targets get their shape checked; others pass (refused when run). */
tpu_status tpu_custom_call_verify(const tpu_instr *in, tpu_diag *d);

/* The error for a target tpusim does not run ("where": "the reference interpreter" or
 * "the TPU back end"). */
tpu_status tpu_custom_call_refuse(const tpu_instr *in, const char *where, tpu_diag *d);

#endif
