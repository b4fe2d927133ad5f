/* custom-call targets: which ones run, and how they are checked and refused. */
#include "ir/custom_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/collective.h"
#include "ir/layout.h"
#include "ir/verify.h"

static const char *const k_identity[] = {
    "Sharding",                   /* with_sharding_constraint (GSPMD) */
    "SPMDFullToShardShape",       /* shard_map entry/exit (GSPMD) */
    "SPMDShardToFullShape",
    "xla.sdy.GlobalToLocalShape", /* shard_map entry/exit (Shardy) */
    "xla.sdy.LocalToGlobalShape",
    "xla.sdy.FuncResultSharding", /* out_shardings (Shardy) */
    "xla.sdy.ShardingGroup",
    "annotate_device_placement",  /* memory kinds */
    "MoveToHost",                 /* host offloading */
    "MoveToDevice",
    "AssumeGatherIndicesInBound", /* the TPU compiler's own assumption */
    "LayoutConstraint",
    NULL};

const char *tpu_custom_call_target(const tpu_instr *in, char *buf, size_t n) {
  const char *v = NULL;
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, "custom_call_target")) v = in->attrs[i].value;
  if (!v) {
    snprintf(buf, n, "?");
    return buf;
  }
  if (*v == '"') v++;
  size_t len = strlen(v);
  if (len && v[len - 1] == '"') len--;
  snprintf(buf, n, "%.*s", (int)len, v);
  return buf;
}

int tpu_concat_bitcast_bytes(const tpu_instr *in) {
  if (in->noperands < 1 || !tpu_dtype_is_array(in->shape.dtype)) return 0;
  int64_t n = 0;
  for (int k = 0; k < in->noperands; k++) {
    const tpu_shape *s = &in->operands[k]->shape;
    if (s->rank != 1 || tpu_dtype_size(s->dtype) != 1 || !tpu_dtype_is_array(s->dtype)) return 0;
    n += tpu_shape_physical_bytes(s);
  }
  return n == tpu_shape_physical_bytes(&in->shape);
}

int tpu_concat_bitcast_dim(const tpu_instr *in) {
  const tpu_shape *r = &in->shape;
  for (int k = 0; k < in->noperands; k++) {
    const tpu_shape *s = &in->operands[k]->shape;
    for (int i = 0; i < r->rank && i < s->rank; i++)
      if (s->dims[i] != r->dims[i]) return i;
  }
  /* every operand the result's shape (one operand): its physically major dimension */
  return r->has_layout && r->rank > 0 ? r->minor_to_major[r->rank - 1] : 0;
}

tpu_cc_kind tpu_custom_call_kind(const tpu_instr *in) {
  if (in->op != TPU_OP_CUSTOM_CALL) return TPU_CC_OTHER;
  char t[128];
  tpu_custom_call_target(in, t, sizeof t);
  for (int i = 0; k_identity[i]; i++)
    if (!strcmp(t, k_identity[i])) return TPU_CC_IDENTITY;
  if (!strcmp(t, "TopK")) return TPU_CC_TOPK;
  if (!strcmp(t, "AsyncCollectiveStart")) return TPU_CC_ASYNC_START;
  if (!strcmp(t, "AsyncCollectiveDone")) return TPU_CC_ASYNC_DONE;
  if (!strcmp(t, "ConcatBitcast")) return TPU_CC_CONCAT_BITCAST;
  /* the flag an asynchronous call (a SparseCore offload) signals, reserved before it */
  if (!strcmp(t, "AllocateBuffer") || !strcmp(t, "PrepareAsyncCallStart")) return TPU_CC_ALLOCATE;
  if (!strcmp(t, "xla_ffi_python_cpu_callback")) return TPU_CC_HOST_CALLBACK;
  if (!strcmp(t, "tpu_custom_call")) return TPU_CC_MOSAIC;
  if (!strcmp(t, "ZeroCrop")) return TPU_CC_ZERO_CROP;
  if (!strcmp(t, "PartialReduce")) return TPU_CC_PARTIAL_REDUCE;
  return TPU_CC_OTHER;
}

const tpu_comp *tpu_custom_call_comp(const tpu_instr *in) {
  const tpu_module *m = in->parent ? in->parent->module : NULL;
  for (int i = 0; m && i < in->nattrs; i++) {
    if (strcmp(in->attrs[i].name, "called_computations")) continue;
    const char *p = in->attrs[i].value;
    while (*p == '{' || *p == ' ' || *p == '%') p++;
    const char *q = p;
    while (*q && *q != ',' && *q != '}' && *q != ' ') q++;
    return q > p ? tpu_module_find_comp_n(m, p, (size_t)(q - p)) : NULL;
  }
  return NULL;
}

int64_t tpu_custom_call_config_int(const tpu_instr *in, const char *key) {
  size_t kl = strlen(key);
  for (int i = 0; i < in->nattrs; i++) {
    if (strcmp(in->attrs[i].name, "backend_config")) continue;
    for (const char *p = strchr(in->attrs[i].value, '"'); p; p = strchr(p + 1, '"')) {
      if (strncmp(p + 1, key, kl) || p[kl + 1] != '"') continue;
      const char *e = p + kl + 2;
      while (*e == ' ' || *e == ':') e++;
      if (*e < '0' || *e > '9') return -1;
      return strtoll(e, NULL, 10);
    }
  }
  return -1;
}

tpu_status tpu_custom_call_verify(const tpu_instr *in, tpu_diag *d) {
  tpu__vbuf a, b;
  char t[128];
  tpu_custom_call_target(in, t, sizeof t);
  int named = 0;
  for (int i = 0; i < in->nattrs; i++) named |= !strcmp(in->attrs[i].name, "custom_call_target");
  if (!named) return TPU_VFAIL(d, in, "custom-call without a custom_call_target");
  switch (tpu_custom_call_kind(in)) {
    case TPU_CC_IDENTITY:
      if (in->noperands == 1 && tpu_shape_equal(&in->shape, &in->operands[0]->shape)) return TPU_OK;
      if (in->noperands > 1 && in->shape.dtype == TPU_TUPLE && in->shape.ntuple == in->noperands) {
        for (int k = 0; k < in->noperands; k++)
          if (!tpu_shape_equal(&in->shape.elems[k], &in->operands[k]->shape)) break;
          else if (k == in->noperands - 1) return TPU_OK;
      }
      /* A shape change (a shard's shape) only makes sense across several devices. */
      if (in->parent && in->parent->module && tpu_module_device_count(in->parent->module) > 1)
        return TPU_OK; /* spmd-partition resolves it (a mesh, or shardings naming several devices) */
      return TPU_VFAIL(d, in, "custom-call target \"%s\" changes %s into %s on one device", t,
                       tpu__vshape(&in->operands[0]->shape, &a), tpu__vshape(&in->shape, &b));
    case TPU_CC_ASYNC_START: {
      const tpu_instr *c = in->noperands == 1 ? in->operands[0] : NULL;
      int ok = c && tpu_op_class_of(c->op) == TPU_CLS_COLLECTIVE && c->noperands >= 1 && in->shape.dtype == TPU_TUPLE &&
               in->shape.ntuple >= 2 && tpu_shape_equal(&in->shape.elems[0], &c->operands[0]->shape) &&
               tpu_shape_equal(&in->shape.elems[1], &c->shape);
      if (!ok)
        return TPU_VFAIL(d, in, "custom-call target \"AsyncCollectiveStart\" takes one collective and gives (its "
                                "operand, its result, ...)");
      return TPU_OK;
    }
    case TPU_CC_ASYNC_DONE:
      for (int k = 0; k < in->noperands; k++)
        if (tpu_op_class_of(in->operands[k]->op) == TPU_CLS_COLLECTIVE &&
            tpu_shape_equal(&in->operands[k]->shape, &in->shape))
          return TPU_OK;
      return TPU_VFAIL(d, in, "custom-call target \"AsyncCollectiveDone\" needs a collective operand of its result's "
                              "shape");
    case TPU_CC_TOPK: {
      if (in->noperands != 1) return TPU_VFAIL(d, in, "custom-call target \"TopK\" takes one operand");
      const tpu_shape *s = &in->operands[0]->shape, *r = &in->shape;
      int ok = s->rank >= 1 && r->dtype == TPU_TUPLE && r->ntuple == 2 && r->elems[0].dtype == s->dtype &&
               r->elems[1].dtype == TPU_S32 && r->elems[0].rank == s->rank && r->elems[1].rank == s->rank;
      for (int i = 0; ok && i < s->rank; i++) {
        int64_t k = r->elems[0].dims[s->rank - 1];
        ok = r->elems[1].dims[i] == r->elems[0].dims[i] && (i == s->rank - 1 ? k <= s->dims[i] : r->elems[0].dims[i] == s->dims[i]);
      }
      if (!ok)
        return TPU_VFAIL(d, in, "custom-call target \"TopK\" must give (values, s32 indices) of the operand %s with the "
                         "last dimension cut to k", tpu__vshape(s, &a));
      return TPU_OK;
    }
    case TPU_CC_CONCAT_BITCAST: {
      const tpu_shape *r = &in->shape;
      if (tpu_concat_bitcast_bytes(in)) return TPU_OK;
      int cd = tpu_concat_bitcast_dim(in);
      int ok = in->noperands >= 1 && tpu_dtype_is_array(r->dtype) && r->rank >= 1;
      int64_t rows = 0;
      for (int k = 0; ok && k < in->noperands; k++) {
        const tpu_shape *s = &in->operands[k]->shape;
        ok = s->dtype == r->dtype && s->rank == r->rank;
        for (int i = 0; ok && i < r->rank; i++) ok = i == cd || s->dims[i] == r->dims[i];
        rows += ok ? s->dims[cd] : 0;
      }
      if (!ok || rows != r->dims[cd])
        return TPU_VFAIL(d, in, "custom-call target \"ConcatBitcast\" must join its operands along one dimension "
                                "into %s", tpu__vshape(r, &a));
      return TPU_OK;
    }
    case TPU_CC_ALLOCATE:
      if (in->noperands || !tpu_dtype_is_array(in->shape.dtype))
        return TPU_VFAIL(d, in, "custom-call target \"AllocateBuffer\" takes no operands and gives one array");
      return TPU_OK;
    case TPU_CC_HOST_CALLBACK:
      if (tpu_host_callback_id(in) < 0)
        return TPU_VFAIL(d, in, "custom-call target \"xla_ffi_python_cpu_callback\" needs its callback's number "
                                "as backend_config={index = N : ui64}");
      return TPU_OK;
    case TPU_CC_ZERO_CROP:
      if (in->noperands != 1 || !tpu_dtype_is_array(in->shape.dtype) ||
          in->shape.dtype != in->operands[0]->shape.dtype)
        return TPU_VFAIL(d, in, "custom-call target \"ZeroCrop\" takes one array and gives one of its type");
      return TPU_OK; /* the buffers' sizes are the bitcast's to check, when it runs */
    case TPU_CC_PARTIAL_REDUCE: {
      int n = in->noperands / 2;
      int64_t dim = tpu_custom_call_config_int(in, "reduction_dim");
      const tpu_comp *cmp = tpu_custom_call_comp(in);
      const tpu_shape *s0 = n ? &in->operands[0]->shape : NULL, *r = &in->shape;
      int ok = n >= 1 && in->noperands == 2 * n && dim >= 0 && dim < s0->rank && cmp && cmp->nparams == 2 * n &&
               (n == 1 ? r->dtype != TPU_TUPLE : r->dtype == TPU_TUPLE && r->ntuple == n);
      for (int k = 0; ok && k < n; k++) {
        const tpu_shape *s = &in->operands[k]->shape, *v = &in->operands[n + k]->shape;
        const tpu_shape *o = n == 1 ? r : &r->elems[k];
        ok = s->rank == s0->rank && v->rank == 0 && v->dtype == s->dtype && o->dtype == s->dtype &&
             o->rank == s->rank && o->dims[dim] >= 1;
        for (int i = 0; ok && i < s->rank; i++)
          ok = s->dims[i] == s0->dims[i] && (i == dim || o->dims[i] == s->dims[i]);
      }
      if (!ok)
        return TPU_VFAIL(d, in, "custom-call target \"PartialReduce\" takes n arrays of one shape and their n "
                                "initial scalars, a comparator of 2n parameters and a backend_config "
                                "\"reduction_dim\", and gives the n arrays with that dimension cut to the bins");
      return TPU_OK;
    }
    case TPU_CC_MOSAIC: /* the kernel checks its operands against its windows when it runs */
    case TPU_CC_OTHER: return TPU_OK;
  }
  return TPU_OK;
}

int64_t tpu_host_callback_id(const tpu_instr *in) {
  for (int i = 0; i < in->nattrs; i++) {
    if (strcmp(in->attrs[i].name, "backend_config")) continue;
    /* {index = 7 : ui64} */
    const char *p = in->attrs[i].value;
    if (*p != '{') return -1;
    p++;
    while (*p == ' ') p++;
    if (strncmp(p, "index", 5)) return -1;
    p += 5;
    while (*p == ' ') p++;
    if (*p++ != '=') return -1;
    while (*p == ' ') p++;
    if (*p < '0' || *p > '9') return -1;
    char *e;
    long long v = strtoll(p, &e, 10);
    while (*e == ' ') e++;
    if (!strncmp(e, ": ui64", 6)) e += 6;
    while (*e == ' ') e++;
    return *e != '}' || e[1] || v < 0 ? -1 : v;
  }
  return -1;
}

tpu_status tpu_custom_call_refuse(const tpu_instr *in, const char *where, tpu_diag *d) {
  char t[128];
  tpu_custom_call_target(in, t, sizeof t);
  const char *why = strstr(t, "lapack") || strstr(t, "LAPACK")
                        ? " (a CPU LAPACK call: lower for a TPU, where XLA emits cholesky/triangular-solve ops)"
                    : !strncmp(t, "__cpu", 5) ? " (an XLA CPU runtime call, not HLO: lower the program for a TPU)"
                    : !strcmp(t, "tpu_custom_call") ? " (a Pallas/Mosaic kernel still in Mosaic bytecode: decode it "
                                                      "with python/tpusim/pallas_decode.py, as tpusim run does with "
                                                      "python3 and jax)"
                                                      : "";
  return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, in->loc, "custom-call '%s' with target \"%s\": %s cannot run it%s",
                  tpu_instr_user_name(in), t, where, why);
}
