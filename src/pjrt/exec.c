/* The tpusim PJRT plugin's compile and execute. JAX hands PJRT_Client_Compile StableHLO
 * (format "mlir"); a converter registered from Python (jax_plugins/tpusim, through
 * tpusim_pjrt_set_compiler) turns it into HLO text with JAX's own MLIR bindings and
 * describes the signature: each parameter's and result's global shape and the block of it
 * each device holds. Execute assembles global arrays from the devices' buffers, runs the
 * module with tpu_sim_run (every chip of the pod for a multi-device program), cuts the
 * results back into per-device buffers and keeps the run's result for the report
 * (tpusim_pjrt_last_*). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "pjrt/pjrt_hooks.h"
#include "pjrt/pjrt_int.h"
#include "ref/ref.h"

/* ---- the converter (Python) ---- */

static tpu_pjrt_compiler_fn compiler;

typedef struct compile_job {
  char *hlo, *info, *proto, *error;
  size_t proto_size;
} compile_job;

TPU_PJRT_EXPORT void tpusim_pjrt_set_compiler(tpu_pjrt_compiler_fn fn) { compiler = fn; }

TPU_PJRT_EXPORT void tpusim_pjrt_set_host_callback(tpu_pjrt_host_callback_fn fn) { tpu_ref_set_host_callback(fn); }

TPU_PJRT_EXPORT int tpusim_pjrt_compile_result(void *job, const char *hlo, const char *info, const void *proto,
                                               size_t proto_size) {
  compile_job *j = job;
  j->hlo = tpu_strdup(hlo);
  j->info = tpu_strdup(info);
  j->proto = tpu_malloc(proto_size ? proto_size : 1);
  if (!j->hlo || !j->info || !j->proto) return -1;
  if (proto_size) memcpy(j->proto, proto, proto_size);
  j->proto_size = proto_size;
  return 0;
}

TPU_PJRT_EXPORT int tpusim_pjrt_compile_error(void *job, const char *msg) {
  compile_job *j = job;
  tpu_free(j->error);
  j->error = tpu_strdup(msg);
  return j->error ? 0 : -1;
}

/* ---- programs ---- */

static void program_free(tpu_pjrt_program *p) {
  if (!p) return;
  tpu_sim_module_free(p->module);
  tpu_free(p->assign);
  for (int i = 0; p->params && i < p->nparams; i++) tpu_free(p->params[i].starts);
  for (int i = 0; p->outputs && i < p->noutputs; i++) tpu_free(p->outputs[i].starts);
  tpu_free(p->params);
  tpu_free(p->outputs);
  tpu_free(p->out_types);
  tpu_free(p->out_dims);
  tpu_free(p->out_ranks);
  tpu_free(p->out_kinds);
  tpu_free(p->out_kind_sizes);
  tpu_free(p->alias_out);
  tpu_free(p->alias_param);
  tpu_free(p->proto);
  tpu_free(p->options);
  tpu_free(p);
}

void tpu__pjrt_program_unref(tpu_pjrt_program *p) {
  if (p && --p->refs == 0) program_free(p);
}

typedef struct reader {
  const char *s;
  int bad;
} reader;

static int64_t next_int(reader *r) {
  char *end;
  while (*r->s == ' ' || *r->s == '\n') r->s++;
  long long v = strtoll(r->s, &end, 10);
  if (end == r->s) r->bad = 1;
  r->s = end;
  return v;
}

static void next_word(reader *r, char *out, size_t n) {
  while (*r->s == ' ' || *r->s == '\n') r->s++;
  size_t k = 0;
  while (*r->s && *r->s != ' ' && *r->s != '\n') {
    if (k + 1 < n) out[k++] = *r->s;
    r->s++;
  }
  out[k] = 0;
  if (!k) r->bad = 1;
}

static int read_arrays(reader *r, int n, int ndev, tpu_pjrt_array **out) {
  tpu_pjrt_array *a = tpu_calloc(n ? (size_t)n : 1, sizeof *a);
  if (!a) return -1;
  *out = a;
  for (int i = 0; i < n && !r->bad; i++) {
    a[i].dtype = (int)next_int(r);
    if (*r->s == '/') { /* DTYPE/HOST: the devices' buffers are of PJRT type HOST (float8) */
      r->s++;
      a[i].host_type = (int)next_int(r);
      if (!tpu__pjrt_is_f8(a[i].host_type) || a[i].dtype != TPU_SIM_F32) return r->bad = 1, -1;
    }
    a[i].rank = (int)next_int(r);
    if (a[i].rank < 0 || a[i].rank > TPU_SIM_MAX_RANK || !tpu_sim_dtype_size(a[i].dtype)) return r->bad = 1, -1;
    for (int k = 0; k < a[i].rank; k++) a[i].global[k] = next_int(r);
    for (int k = 0; k < a[i].rank; k++) a[i].local[k] = next_int(r);
    a[i].starts = tpu_calloc((size_t)ndev * (size_t)(a[i].rank ? a[i].rank : 1), sizeof(int64_t));
    if (!a[i].starts) return -1;
    for (int d = 0; d < ndev; d++)
      for (int k = 0; k < a[i].rank; k++) {
        int64_t s = next_int(r);
        if (s < 0 || s + a[i].local[k] > a[i].global[k]) r->bad = 1;
        a[i].starts[d * a[i].rank + k] = s;
      }
  }
  return r->bad ? -1 : 0;
}

/* The signature, as whitespace-separated tokens:
 *   name NAME  replicas R  partitions P  assign A_0 .. A_{R*P-1}
 *   params K  then per parameter: DTYPE RANK GLOBAL_DIMS LOCAL_DIMS STARTS (R*P x RANK)
 *   outputs M  then per result the same.
 *   [aliases N  then N pairs RESULT PARAMETER: the HLO's input_output_alias (donation)]
 * DTYPE is a tpu_sim_dtype, or F32/HOST for a float8 array (HOST its PJRT_Buffer_Type: tpusim
 * computes it as f32, the buffers hold float8); device d (logical, replica-major) holds the LOCAL_DIMS block
 * at STARTS[d] of the global array. */
static PJRT_Error *parse_info(const char *info, tpu_pjrt_program *p) {
  reader r = {info, 0};
  char word[128];
  next_word(&r, word, sizeof word);
  if (strcmp(word, "name")) r.bad = 1;
  next_word(&r, p->name, sizeof p->name);
  next_word(&r, word, sizeof word);
  p->nreplicas = (int)next_int(&r);
  next_word(&r, word, sizeof word);
  p->npartitions = (int)next_int(&r);
  if (r.bad || p->nreplicas < 1 || p->npartitions < 1 || (int64_t)p->nreplicas * p->npartitions > 65536)
    return tpu__pjrt_error(PJRT_Error_Code_INTERNAL, "bad signature from the converter: %.200s", info);
  p->ndevices = p->nreplicas * p->npartitions;
  if (!(p->assign = tpu_calloc((size_t)p->ndevices, sizeof *p->assign))) return tpu__pjrt_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "out of memory");
  next_word(&r, word, sizeof word);
  for (int d = 0; d < p->ndevices; d++) p->assign[d] = (int)next_int(&r);
  next_word(&r, word, sizeof word);
  p->nparams = (int)next_int(&r);
  if (r.bad || p->nparams < 0 || p->nparams > 100000 || read_arrays(&r, p->nparams, p->ndevices, &p->params))
    return tpu__pjrt_error(PJRT_Error_Code_INTERNAL, "bad parameters in the converter's signature");
  next_word(&r, word, sizeof word);
  p->noutputs = (int)next_int(&r);
  if (r.bad || p->noutputs < 0 || p->noutputs > 100000 || read_arrays(&r, p->noutputs, p->ndevices, &p->outputs))
    return tpu__pjrt_error(PJRT_Error_Code_INTERNAL, "bad results in the converter's signature");
  next_word(&r, word, sizeof word);
  if (!r.bad && !strcmp(word, "aliases")) {
    p->naliases = (int)next_int(&r);
    if (r.bad || p->naliases < 0 || p->naliases > p->noutputs)
      return tpu__pjrt_error(PJRT_Error_Code_INTERNAL, "bad aliases in the converter's signature");
    p->alias_out = tpu_calloc(p->naliases ? (size_t)p->naliases : 1, sizeof *p->alias_out);
    p->alias_param = tpu_calloc(p->naliases ? (size_t)p->naliases : 1, sizeof *p->alias_param);
    if (!p->alias_out || !p->alias_param) return tpu__pjrt_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "out of memory");
    for (int k = 0; k < p->naliases; k++) {
      p->alias_out[k] = (int)next_int(&r);
      p->alias_param[k] = (int)next_int(&r);
      if (r.bad || p->alias_out[k] < 0 || p->alias_out[k] >= p->noutputs || p->alias_param[k] < 0 ||
          p->alias_param[k] >= p->nparams)
        return tpu__pjrt_error(PJRT_Error_Code_INTERNAL, "bad aliases in the converter's signature");
    }
  }
  size_t n = p->noutputs ? (size_t)p->noutputs : 1, ndims = 1;
  for (int i = 0; i < p->noutputs; i++) ndims += (size_t)p->outputs[i].rank;
  p->out_types = tpu_calloc(n, sizeof *p->out_types);
  p->out_ranks = tpu_calloc(n, sizeof *p->out_ranks);
  p->out_dims = tpu_calloc(ndims, sizeof *p->out_dims);
  p->out_kinds = tpu_calloc(n, sizeof *p->out_kinds);
  p->out_kind_sizes = tpu_calloc(n, sizeof *p->out_kind_sizes);
  if (!p->out_types || !p->out_ranks || !p->out_dims || !p->out_kinds || !p->out_kind_sizes)
    return tpu__pjrt_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "out of memory");
  size_t k = 0;
  for (int i = 0; i < p->noutputs; i++) {
    p->out_types[i] = p->outputs[i].host_type ? p->outputs[i].host_type : tpu__pjrt_from_dtype(p->outputs[i].dtype);
    p->out_ranks[i] = (size_t)p->outputs[i].rank;
    for (int j = 0; j < p->outputs[i].rank; j++) p->out_dims[k++] = p->outputs[i].local[j];
    p->out_kinds[i] = "device";
    p->out_kind_sizes[i] = 6;
  }
  return NULL;
}

static void fingerprint(tpu_pjrt_program *p, const char *hlo, const char *info) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char *s = hlo; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  for (const char *s = info; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  snprintf(p->fingerprint, sizeof p->fingerprint, "%016llx", (unsigned long long)h);
}

static PJRT_Error *client_compile(PJRT_Client_Compile_Args *a) {
  const PJRT_Program *prog = a->program;
  char format[32] = {0};
  memcpy(format, prog->format, prog->format_size < sizeof format - 1 ? prog->format_size : sizeof format - 1);
  if (!compiler)
    return tpu__pjrt_error(PJRT_Error_Code_FAILED_PRECONDITION,
                           "no program converter registered: load the plugin through JAX "
                           "(JAX_PLATFORMS=tpusim, package jax_plugins.tpusim)");
  compile_job job = {0};
  compiler(&job, prog->code, prog->code_size, format, a->compile_options, a->compile_options_size);
  PJRT_Error *err = NULL;
  tpu_pjrt_program *p = NULL;
  PJRT_LoadedExecutable *le = NULL;
  if (job.error || !job.hlo) {
    err = tpu__pjrt_error(PJRT_Error_Code_INVALID_ARGUMENT, "compile: %s",
                          job.error ? job.error : "the converter gave no program (out of memory?)");
    goto done;
  }
  p = tpu_calloc(1, sizeof *p);
  if (!p) goto oom;
  p->refs = 1;
  if ((err = parse_info(job.info, p))) goto done;
  if (p->ndevices > a->client->ndevices) {
    err = tpu__pjrt_error(PJRT_Error_Code_INVALID_ARGUMENT,
                          "%s needs %d devices; the simulated slice has %d (TPUSIM_TOPOLOGY / TPUSIM_DEVICES)",
                          p->name, p->ndevices, a->client->ndevices);
    goto done;
  }
  for (int d = 0; d < p->ndevices; d++)
    if (p->assign[d] < 0 || p->assign[d] >= a->client->ndevices) {
      err = tpu__pjrt_error(PJRT_Error_Code_INVALID_ARGUMENT, "device assignment names device %d", p->assign[d]);
      goto done;
    }
  char where[160];
  snprintf(where, sizeof where, "%s.hlo", p->name);
  tpu_diag d;
  pthread_mutex_lock(&tpu__pjrt_lock);
  tpu_status st = tpu_sim_load_text(where, job.hlo, strlen(job.hlo), &p->module, &d);
  pthread_mutex_unlock(&tpu__pjrt_lock);
  if (st != TPU_OK) {
    err = tpu__pjrt_error_diag(&d);
    goto done;
  }
  if (tpu_sim_module_devices(p->module) != p->ndevices) {
    err = tpu__pjrt_error(PJRT_Error_Code_INTERNAL, "%s: the HLO is for %lld devices, the compile options for %d",
                          p->name, (long long)tpu_sim_module_devices(p->module), p->ndevices);
    goto done;
  }
  if (tpu_sim_module_nparams(p->module) != p->nparams) {
    err = tpu__pjrt_error(PJRT_Error_Code_INTERNAL, "%s: the HLO has %d parameters, the signature %d", p->name,
                          tpu_sim_module_nparams(p->module), p->nparams);
    goto done;
  }
  fingerprint(p, job.hlo, job.info);
  p->proto = job.proto;
  p->proto_size = job.proto_size;
  job.proto = NULL;
  p->options = tpu_malloc(a->compile_options_size ? a->compile_options_size : 1);
  if (!p->options) goto oom;
  if (a->compile_options_size) memcpy(p->options, a->compile_options, a->compile_options_size);
  p->options_size = a->compile_options_size;
  le = tpu_calloc(1, sizeof *le);
  if (!le || !(le->devices = tpu_calloc((size_t)p->ndevices, sizeof *le->devices))) goto oom;
  for (int i = 0; i < p->ndevices; i++) le->devices[i] = a->client->device_ptrs[p->assign[i]];
  le->client = a->client;
  le->prog = p;
  p = NULL;
  a->executable = le;
  le = NULL;
  goto done;
oom:
  err = tpu__pjrt_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "compile: out of memory");
done:
  if (le) tpu_free(le->devices);
  tpu_free(le);
  if (p) program_free(p);
  tpu_free(job.hlo);
  tpu_free(job.info);
  tpu_free(job.proto);
  tpu_free(job.error);
  return err;
}

/* ---- executables ---- */

static PJRT_Error *loaded_destroy(PJRT_LoadedExecutable_Args *a) {
  if (a->executable) {
    tpu__pjrt_program_unref(a->executable->prog);
    tpu_free(a->executable->devices);
    tpu_free(a->executable);
  }
  return NULL;
}

static PJRT_Error *loaded_delete(PJRT_LoadedExecutable_Args *a) {
  a->executable->deleted = 1;
  return NULL;
}

static PJRT_Error *loaded_is_deleted(PJRT_LoadedExecutable_IsDeleted_Args *a) {
  a->is_deleted = a->executable->deleted;
  return NULL;
}

static PJRT_Error *loaded_get_executable(PJRT_LoadedExecutable_GetExecutable_Args *a) {
  PJRT_Executable *e = tpu_malloc(sizeof *e);
  if (!e) return tpu__pjrt_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "out of memory");
  e->prog = a->loaded_executable->prog;
  e->prog->refs++;
  a->executable = e;
  return NULL;
}

static PJRT_Error *loaded_devices(PJRT_LoadedExecutable_AddressableDevices_Args *a) {
  a->devices = a->executable->devices;
  a->num_devices = (size_t)a->executable->prog->ndevices;
  return NULL;
}

/* Protobuf encoding, as much as a DeviceAssignmentProto needs. */
static size_t put_varint(unsigned char *out, uint64_t v) {
  size_t n = 0;
  do {
    out[n++] = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return n;
}

static void free_bytes(void *p) { tpu_free(p); }

/* DeviceAssignmentProto: replica_count = 1, computation_count = 2, computation_devices = 3
 * (one per partition: replica_device_ids = 1, packed). */
static PJRT_Error *loaded_assignment(PJRT_LoadedExecutable_GetDeviceAssignment_Args *a) {
  tpu_pjrt_program *p = a->executable->prog;
  size_t cap = 32 + (size_t)p->npartitions * (16 + (size_t)p->nreplicas * 10);
  unsigned char *b = tpu_malloc(cap), tmp[16];
  if (!b) return tpu__pjrt_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "out of memory");
  size_t n = 0;
  b[n++] = 0x08;
  n += put_varint(b + n, (uint64_t)p->nreplicas);
  b[n++] = 0x10;
  n += put_varint(b + n, (uint64_t)p->npartitions);
  for (int c = 0; c < p->npartitions; c++) {
    size_t ids = 0;
    for (int r = 0; r < p->nreplicas; r++) ids += put_varint(tmp, (uint64_t)p->assign[r * p->npartitions + c]);
    b[n++] = 0x1A;
    n += put_varint(b + n, ids + 1 + put_varint(tmp, ids));
    b[n++] = 0x0A;
    n += put_varint(b + n, ids);
    for (int r = 0; r < p->nreplicas; r++) n += put_varint(b + n, (uint64_t)p->assign[r * p->npartitions + c]);
  }
  a->serialized_bytes = (const char *)b;
  a->serialized_bytes_size = n;
  a->serialized_device_assignment = b;
  a->serialized_device_assignment_deleter = free_bytes;
  return NULL;
}

static PJRT_Error *loaded_fingerprint(PJRT_LoadedExecutable_Fingerprint_Args *a) {
  a->str = a->executable->prog->fingerprint;
  a->str_size = strlen(a->str);
  return NULL;
}

static PJRT_Error *exe_destroy(PJRT_Executable_Destroy_Args *a) {
  if (a->executable) {
    tpu__pjrt_program_unref(a->executable->prog);
    tpu_free(a->executable);
  }
  return NULL;
}

static PJRT_Error *exe_name(PJRT_Executable_String_Args *a) {
  a->str = a->executable->prog->name;
  a->str_size = strlen(a->str);
  return NULL;
}

static PJRT_Error *exe_fingerprint(PJRT_Executable_String_Args *a) {
  a->str = a->executable->prog->fingerprint;
  a->str_size = strlen(a->str);
  return NULL;
}

static PJRT_Error *exe_replicas(PJRT_Executable_Size_Args *a) {
  a->value = (size_t)a->executable->prog->nreplicas;
  return NULL;
}

static PJRT_Error *exe_partitions(PJRT_Executable_Size_Args *a) {
  a->value = (size_t)a->executable->prog->npartitions;
  return NULL;
}

static PJRT_Error *exe_noutputs(PJRT_Executable_Size_Args *a) {
  a->value = (size_t)a->executable->prog->noutputs;
  return NULL;
}

static PJRT_Error *exe_code_size(PJRT_Executable_SizeOfGeneratedCodeInBytes_Args *a) {
  a->size_in_bytes = 0;
  return NULL;
}

static PJRT_Error *exe_cost(PJRT_Executable_GetCostAnalysis_Args *a) {
  a->num_properties = 0;
  a->properties = NULL;
  return NULL;
}

static PJRT_Error *exe_memory_kinds(PJRT_Executable_OutputMemoryKinds_Args *a) {
  a->num_outputs = (size_t)a->executable->prog->noutputs;
  a->memory_kinds = a->executable->prog->out_kinds;
  a->memory_kind_sizes = a->executable->prog->out_kind_sizes;
  return NULL;
}

static PJRT_Error *exe_types(PJRT_Executable_OutputElementTypes_Args *a) {
  a->output_types = a->executable->prog->out_types;
  a->num_output_types = (size_t)a->executable->prog->noutputs;
  return NULL;
}

static PJRT_Error *exe_dims(PJRT_Executable_OutputDimensions_Args *a) {
  a->num_outputs = (size_t)a->executable->prog->noutputs;
  a->dims = a->executable->prog->out_dims;
  a->dim_sizes = a->executable->prog->out_ranks;
  return NULL;
}

static PJRT_Error *exe_program(PJRT_Executable_OptimizedProgram_Args *a) {
  tpu_pjrt_program *p = a->executable->prog;
  PJRT_Program *out = a->program;
  out->format = "mlir";
  out->format_size = strlen(out->format);
  if (!out->code) {
    out->code_size = p->proto_size;
    return NULL;
  }
  if (out->code_size < p->proto_size)
    return tpu__pjrt_error(PJRT_Error_Code_INVALID_ARGUMENT, "OptimizedProgram: buffer too small");
  memcpy(out->code, p->proto, p->proto_size);
  out->code_size = p->proto_size;
  return NULL;
}

static PJRT_Error *exe_compile_options(PJRT_Executable_GetCompileOptions_Args *a) {
  tpu_pjrt_program *p = a->executable->prog;
  char *copy = tpu_malloc(p->options_size ? p->options_size : 1);
  if (!copy) return tpu__pjrt_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "out of memory");
  memcpy(copy, p->options, p->options_size);
  a->serialized_bytes = copy;
  a->serialized_bytes_size = p->options_size;
  a->serialized_compile_options = copy;
  a->serialized_compile_options_deleter = free_bytes;
  return NULL;
}

/* Bytes per element of an array's device buffers. */
static size_t host_size(const tpu_pjrt_array *a) {
  return a->host_type ? tpu__pjrt_type_size(a->host_type) : tpu_sim_dtype_size(a->dtype);
}

static PJRT_Error *exe_memory_stats(PJRT_Executable_GetCompiledMemoryStats_Args *a) {
  tpu_pjrt_program *p = a->executable->prog;
  int64_t in = 0, out = 0;
  for (int i = 0; i < p->nparams; i++) {
    int64_t n = (int64_t)host_size(&p->params[i]);
    for (int k = 0; k < p->params[i].rank; k++) n *= p->params[i].local[k];
    in += n;
  }
  for (int i = 0; i < p->noutputs; i++) {
    int64_t n = (int64_t)host_size(&p->outputs[i]);
    for (int k = 0; k < p->outputs[i].rank; k++) n *= p->outputs[i].local[k];
    out += n;
  }
  a->generated_code_size_in_bytes = 0;
  a->argument_size_in_bytes = in;
  a->output_size_in_bytes = out;
  int64_t alias = 0;
  for (int k = 0; k < p->naliases; k++) {
    const tpu_pjrt_array *o = &p->outputs[p->alias_out[k]];
    int64_t n = (int64_t)host_size(o);
    for (int j = 0; j < o->rank; j++) n *= o->local[j];
    alias += n;
  }
  a->alias_size_in_bytes = alias;
  a->temp_size_in_bytes = 0;
  a->host_generated_code_size_in_bytes = a->host_argument_size_in_bytes = 0;
  a->host_output_size_in_bytes = a->host_alias_size_in_bytes = a->host_temp_size_in_bytes = 0;
  a->peak_memory_in_bytes = in + out - alias;
  a->total_size_in_bytes = in + out - alias;
  return NULL;
}

/* ---- execute ---- */

static tpu_sim_result *last_result;
static char last_name[128];
static int64_t executions;

/* Copies the block `ldims` at `start` between a global array (gdims) and a dense local
 * one: to_global 1 writes the global array, 0 reads it. */
static void block_copy(char *global, const int64_t *gdims, char *local, const int64_t *ldims,
                       const int64_t *start, int rank, size_t esize, int to_global) {
  if (rank == 0) {
    if (to_global) memcpy(global, local, esize);
    else memcpy(local, global, esize);
    return;
  }
  for (int i = 0; i < rank; i++)
    if (ldims[i] == 0) return;
  int64_t gstride[TPU_SIM_MAX_RANK], idx[TPU_SIM_MAX_RANK] = {0};
  gstride[rank - 1] = (int64_t)esize;
  for (int i = rank - 2; i >= 0; i--) gstride[i] = gstride[i + 1] * gdims[i + 1];
  size_t row = (size_t)ldims[rank - 1] * esize;
  for (;;) {
    int64_t off = start[rank - 1] * (int64_t)esize;
    for (int i = 0; i < rank - 1; i++) off += (start[i] + idx[i]) * gstride[i];
    if (to_global) memcpy(global + off, local, row);
    else memcpy(local, global + off, row);
    local += row;
    int k = rank - 2;
    while (k >= 0 && ++idx[k] == ldims[k]) idx[k--] = 0;
    if (k < 0) break;
  }
}

static size_t array_bytes(const tpu_pjrt_array *a, const int64_t *dims) {
  size_t n = tpu_sim_dtype_size(a->dtype);
  for (int k = 0; k < a->rank; k++) n *= (size_t)dims[k];
  return n;
}

static int same_dims(const int64_t *a, const int64_t *b, int rank) {
  for (int k = 0; k < rank; k++)
    if (a[k] != b[k]) return 0;
  return 1;
}

/* Donation, as XLA honours it: each parameter the program aliases to a result (JAX's
 * donate_argnums, input_output_alias in the HLO) gives up its buffers once the run has
 * succeeded, unless the caller listed it as not donatable (an array passed twice); JAX then
 * sees the donated arrays deleted. */
static void donate(const tpu_pjrt_program *p, PJRT_LoadedExecutable_Execute_Args *a, int nd) {
  const PJRT_ExecuteOptions *o = a->options;
  int have_list = o && o->struct_size >= offsetof(PJRT_ExecuteOptions, num_non_donatable_input_indices) + sizeof(size_t);
  for (int k = 0; k < p->naliases; k++) {
    int param = p->alias_param[k], keep = 0;
    for (size_t j = 0; have_list && j < o->num_non_donatable_input_indices; j++)
      if (o->non_donatable_input_indices[j] == param) keep = 1;
    if (keep) continue;
    for (int d = 0; d < nd; d++) {
      PJRT_Buffer *b = a->argument_lists[d][param];
      tpu_free(b->data);
      b->data = NULL;
      b->deleted = 1;
    }
  }
}

/* Runs one execution with the lock held. */
static PJRT_Error *execute_locked(PJRT_LoadedExecutable *le, PJRT_LoadedExecutable_Execute_Args *a) {
  tpu_pjrt_program *p = le->prog;
  int nd = p->ndevices;
  PJRT_Device **devs = le->devices;
  if (a->execute_device) {
    if (nd != 1 || a->num_devices != 1)
      return tpu__pjrt_error(PJRT_Error_Code_UNIMPLEMENTED, "%s: execute_device on a program of %d devices", p->name, nd);
    devs = &a->execute_device;
  }
  if (a->num_devices != (size_t)nd || a->num_args != (size_t)p->nparams)
    return tpu__pjrt_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: %zu devices x %zu arguments given, %d x %d expected",
                           p->name, a->num_devices, a->num_args, nd, p->nparams);
  tpu_sim_array *in = tpu_calloc(p->nparams ? (size_t)p->nparams : 1, sizeof *in);
  void **owned = tpu_calloc(p->nparams ? (size_t)p->nparams : 1, sizeof *owned);
  PJRT_Error *err = NULL;
  tpu_sim_result *r = NULL;
  if (!in || !owned) {
    err = tpu__pjrt_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  for (int i = 0; i < p->nparams; i++) {
    const tpu_pjrt_array *pa = &p->params[i];
    for (int d = 0; d < nd; d++) {
      const PJRT_Buffer *b = a->argument_lists[d][i];
      if (b->deleted) {
        err = tpu__pjrt_error(PJRT_Error_Code_INVALID_ARGUMENT, "%s: argument %d on device %d was deleted", p->name, i, d);
        goto done;
      }
      int want = pa->host_type ? pa->host_type : tpu__pjrt_from_dtype(pa->dtype);
      if (b->type != want || b->rank != pa->rank || !same_dims(b->dims, pa->local, pa->rank)) {
        err = tpu__pjrt_error(PJRT_Error_Code_INVALID_ARGUMENT,
                              "%s: argument %d on device %d has the wrong type or shape (%s, rank %d)", p->name, i, d,
                              tpu_sim_dtype_name(tpu__pjrt_to_dtype(b->type)) ? tpu_sim_dtype_name(tpu__pjrt_to_dtype(b->type)) : "?",
                              b->rank);
        goto done;
      }
    }
    in[i].dtype = pa->dtype;
    in[i].rank = pa->rank;
    memcpy(in[i].dims, pa->global, sizeof pa->global);
    in[i].nbytes = array_bytes(pa, pa->global);
    if (nd == 1 && !pa->host_type) {
      in[i].data = a->argument_lists[0][i]->data;
      continue;
    }
    if (!(owned[i] = tpu_calloc(in[i].nbytes ? in[i].nbytes : 1, 1))) {
      err = tpu__pjrt_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "out of memory");
      goto done;
    }
    for (int d = 0; d < nd; d++) {
      void *block = a->argument_lists[d][i]->data;
      float *wide = NULL;
      if (pa->host_type) { /* float8 buffers, widened to the f32 tpusim computes with */
        size_t n = array_bytes(pa, pa->local) / sizeof(float);
        if (!(wide = tpu_malloc(n ? n * sizeof(float) : 1))) {
          err = tpu__pjrt_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "out of memory");
          goto done;
        }
        for (size_t k = 0; k < n; k++) wide[k] = tpu__pjrt_f8_to_f32(pa->host_type, ((const unsigned char *)block)[k]);
        block = wide;
      }
      block_copy(owned[i], pa->global, block, pa->local, pa->starts + d * pa->rank, pa->rank,
                 tpu_sim_dtype_size(pa->dtype), 1);
      tpu_free(wide);
    }
    in[i].data = owned[i];
  }
  tpu_sim_options o;
  tpu_sim_options_init(&o);
  PJRT_Client *c = le->client;
  o.backend = c->backend;
  if (strcmp(c->backend, "ref")) { /* the reference interpreter has no chip, precision or slice */
    o.chip = c->chip;
    if (c->precision[0]) o.precision = c->precision;
    if (c->topology[0] && nd == c->ndevices) o.topology = c->topology;
  }
  tpu_diag diag;
  if (tpu_sim_run(p->module, &o, in, p->nparams, &r, &diag) != TPU_OK) {
    err = tpu__pjrt_error_diag(&diag);
    goto done;
  }
  if (tpu_sim_result_noutputs(r) != p->noutputs) {
    err = tpu__pjrt_error(PJRT_Error_Code_INTERNAL, "%s: %d results, %d expected", p->name, tpu_sim_result_noutputs(r),
                          p->noutputs);
    goto done;
  }
  for (int i = 0; i < p->noutputs; i++) {
    const tpu_pjrt_array *oa = &p->outputs[i];
    tpu_sim_array out;
    if (tpu_sim_result_output(r, i, &out, &diag) != TPU_OK) {
      err = tpu__pjrt_error_diag(&diag);
      goto done;
    }
    /* Global as the signature says, or stacked one row per device. */
    int stacked = !(out.rank == oa->rank && same_dims(out.dims, oa->global, oa->rank));
    if (stacked && !(out.rank == oa->rank + 1 && out.dims[0] == nd && same_dims(out.dims + 1, oa->local, oa->rank))) {
      err = tpu__pjrt_error(PJRT_Error_Code_INTERNAL, "%s: result %d has an unexpected shape (rank %d)", p->name, i, out.rank);
      goto done;
    }
    if (out.dtype != oa->dtype) {
      err = tpu__pjrt_error(PJRT_Error_Code_INTERNAL, "%s: result %d has type %d, %d expected", p->name, i, out.dtype, oa->dtype);
      goto done;
    }
    size_t lbytes = array_bytes(oa, oa->local);
    float *wide = NULL;
    if (oa->host_type && lbytes && !(wide = tpu_malloc(lbytes))) {
      err = tpu__pjrt_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "out of memory");
      goto done;
    }
    for (int d = 0; d < nd; d++) {
      PJRT_Buffer *b = tpu__pjrt_buffer_new(devs[d], p->out_types[i], oa->rank, oa->local);
      if (!b) {
        tpu_free(wide);
        err = tpu__pjrt_error(PJRT_Error_Code_RESOURCE_EXHAUSTED, "out of memory");
        goto done;
      }
      a->output_lists[d][i] = b;
      if (!lbytes) continue;
      char *dst = wide ? (char *)wide : b->data;
      if (stacked) memcpy(dst, (const char *)out.data + (size_t)d * lbytes, lbytes);
      else block_copy((char *)out.data, oa->global, dst, oa->local, oa->starts + d * oa->rank, oa->rank,
                      tpu_sim_dtype_size(oa->dtype), 0);
      if (wide) /* narrowed to the float8 buffers (the program left f8-representable values) */
        for (size_t k = 0; k < lbytes / sizeof(float); k++)
          ((unsigned char *)b->data)[k] = tpu__pjrt_f8_from_f32(oa->host_type, wide[k]);
    }
    tpu_free(wide);
  }
  donate(p, a, nd);
  tpu_sim_result_free(last_result);
  last_result = r;
  r = NULL;
  snprintf(last_name, sizeof last_name, "%s", p->name);
  executions++;
done:
  if (err) { /* free the outputs made so far */
    for (int i = 0; i < p->noutputs; i++)
      for (int d = 0; d < nd; d++) {
        PJRT_Buffer *b = a->output_lists[d][i];
        if (b) {
          tpu_free(b->data);
          tpu_free(b);
          a->output_lists[d][i] = NULL;
        }
      }
  }
  tpu_sim_result_free(r);
  for (int i = 0; owned && i < p->nparams; i++) tpu_free(owned[i]);
  tpu_free(owned);
  tpu_free(in);
  return err;
}

static PJRT_Error *loaded_execute(PJRT_LoadedExecutable_Execute_Args *a) {
  PJRT_LoadedExecutable *le = a->executable;
  if (le->deleted) return tpu__pjrt_error(PJRT_Error_Code_FAILED_PRECONDITION, "%s was deleted", le->prog->name);
  for (size_t d = 0; d < a->num_devices; d++)
    for (int i = 0; i < le->prog->noutputs; i++) a->output_lists[d][i] = NULL;
  pthread_mutex_lock(&tpu__pjrt_lock);
  PJRT_Error *err = execute_locked(le, a);
  pthread_mutex_unlock(&tpu__pjrt_lock);
  if (err) return err;
  if (a->device_complete_events)
    for (size_t d = 0; d < a->num_devices; d++) a->device_complete_events[d] = tpu__pjrt_event(PJRT_Error_Code_OK, NULL);
  return NULL;
}

/* ---- the last execution's report, for Python (tpusim.pjrt) ---- */

/* How many executions have completed; the last one's program name in `name` (n bytes). */
TPU_PJRT_EXPORT int64_t tpusim_pjrt_last_run(char *name, size_t n) {
  pthread_mutex_lock(&tpu__pjrt_lock);
  int64_t k = executions;
  if (name && n) snprintf(name, n, "%s", last_name);
  pthread_mutex_unlock(&tpu__pjrt_lock);
  return k;
}

/* Writes the last execution's JSON report (what = 0, as `tpusim run --report`) or Chrome
 * trace (what = 1) to `path`. Returns 0, or -1 with the error in err (n bytes). */
TPU_PJRT_EXPORT int tpusim_pjrt_last_write(int what, const char *path, char *err, size_t n) {
  pthread_mutex_lock(&tpu__pjrt_lock);
  int rc = 0;
  tpu_diag d;
  if (!last_result) {
    snprintf(err, n, "tpusim PJRT: nothing has run yet");
    rc = -1;
  } else if ((what ? tpu_sim_result_write_trace(last_result, path, &d)
                   : tpu_sim_result_write_json(last_result, path, &d)) != TPU_OK) {
    tpu_diag_format(&d, err, n);
    rc = -1;
  }
  pthread_mutex_unlock(&tpu__pjrt_lock);
  return rc;
}

void tpu__pjrt_install_exec(PJRT_Api *api) {
#define SET(slot, fn) api->slot = (pjrt_fn)(void (*)(void))(fn)
  SET(PJRT_Client_Compile, client_compile);
  SET(PJRT_LoadedExecutable_Destroy, loaded_destroy);
  SET(PJRT_LoadedExecutable_Delete, loaded_delete);
  SET(PJRT_LoadedExecutable_IsDeleted, loaded_is_deleted);
  SET(PJRT_LoadedExecutable_GetExecutable, loaded_get_executable);
  SET(PJRT_LoadedExecutable_AddressableDevices, loaded_devices);
  SET(PJRT_LoadedExecutable_Fingerprint, loaded_fingerprint);
  SET(PJRT_LoadedExecutable_GetDeviceAssignment, loaded_assignment);
  SET(PJRT_LoadedExecutable_Execute, loaded_execute);
  SET(PJRT_Executable_Destroy, exe_destroy);
  SET(PJRT_Executable_Name, exe_name);
  SET(PJRT_Executable_Fingerprint, exe_fingerprint);
  SET(PJRT_Executable_NumReplicas, exe_replicas);
  SET(PJRT_Executable_NumPartitions, exe_partitions);
  SET(PJRT_Executable_NumOutputs, exe_noutputs);
  SET(PJRT_Executable_SizeOfGeneratedCodeInBytes, exe_code_size);
  SET(PJRT_Executable_GetCostAnalysis, exe_cost);
  SET(PJRT_Executable_OutputMemoryKinds, exe_memory_kinds);
  SET(PJRT_Executable_OutputElementTypes, exe_types);
  SET(PJRT_Executable_OutputDimensions, exe_dims);
  SET(PJRT_Executable_OptimizedProgram, exe_program);
  SET(PJRT_Executable_GetCompileOptions, exe_compile_options);
  SET(PJRT_Executable_GetCompiledMemoryStats, exe_memory_stats);
#undef SET
}
