/* Internals shared by the tpusim PJRT plugin's files: the objects behind PJRT's opaque
 * handles, errors and events, and the one lock every entry point that touches libtpusim
 * holds (the library is not thread-safe). */
#ifndef TPUSIM_PJRT_INT_H
#define TPUSIM_PJRT_INT_H
#include <pthread.h>

#include "pjrt/pjrt_abi.h"
#include "tpusim/tpusim.h"

#define TPU_PJRT_EXPORT __attribute__((visibility("default")))

struct PJRT_Error {
  PJRT_Error_Code code;
  char *msg; /* owned; NULL only for the static out-of-memory error */
};

/* Every event tpusim returns is already complete (work runs inside the call that
 * enqueues it); `code`/`msg` are its outcome. */
struct PJRT_Event {
  PJRT_Error_Code code;
  char *msg;
};

struct PJRT_Memory {
  int id;
  PJRT_Device *device;
  char str[64];
};

struct PJRT_DeviceDescription {
  int id;
  char kind[64];
  char str[64];
  char debug[128];
};

struct PJRT_Device {
  PJRT_DeviceDescription desc; /* first: a device's description is the device itself */
  PJRT_Memory memory;
  PJRT_Memory *memory_ptr;
  PJRT_Client *client;
};

struct PJRT_Client {
  int ndevices;
  PJRT_Device *devices;
  PJRT_Device **device_ptrs;
  PJRT_Memory **memory_ptrs;
  char chip[1024];     /* preset name or JSON path */
  char topology[64];   /* "2x2", "v5e-8" or "" */
  char backend[8];     /* "tpu" or "ref" */
  char precision[16];  /* "" (per op), "default", "high", "highest" */
  char version[64];
};

/* A host-resident array standing for one device's buffer. */
struct PJRT_Buffer {
  PJRT_Device *device;
  int type; /* PJRT_T_* */
  int rank;
  int64_t dims[TPU_SIM_MAX_RANK];
  int64_t minor_to_major[TPU_SIM_MAX_RANK]; /* rank-1 .. 0: dense row-major */
  void *data; /* NULL once deleted (or for an empty array) */
  size_t nbytes;
  int deleted;
};

/* One array of a program's signature: its global shape and, per device of the program, the
 * block of it that device holds (every device's block has the same local shape). */
typedef struct tpu_pjrt_array {
  int dtype;     /* tpu_sim_dtype, as tpusim computes it */
  int host_type; /* PJRT_T_* of the devices' buffers when it differs (float8, held as f32), or 0 */
  int rank;
  int64_t global[TPU_SIM_MAX_RANK];
  int64_t local[TPU_SIM_MAX_RANK];
  int64_t *starts; /* [ndevices][rank] */
} tpu_pjrt_array;

/* A compiled program, shared by its PJRT_LoadedExecutable and any PJRT_Executable views. */
typedef struct tpu_pjrt_program {
  int refs;
  char name[128];
  char fingerprint[24];
  tpu_sim_module *module;
  int nreplicas, npartitions, ndevices;
  int *assign; /* [ndevices]: logical device -> device id */
  int nparams, noutputs;
  tpu_pjrt_array *params, *outputs;
  int *out_types;       /* [noutputs] PJRT_T_* */
  int64_t *out_dims;    /* concatenated local dims */
  size_t *out_ranks;
  const char **out_kinds;
  size_t *out_kind_sizes;
  int naliases; /* donation: result alias_out[k] may reuse parameter alias_param[k]'s buffers */
  int *alias_out, *alias_param;
  char *proto; /* StableHLO with mhlo.spmd_* shardings (format "mlir") */
  size_t proto_size;
  char *options; /* serialized CompileOptionsProto as given */
  size_t options_size;
} tpu_pjrt_program;

struct PJRT_Executable {
  tpu_pjrt_program *prog;
};

struct PJRT_LoadedExecutable {
  tpu_pjrt_program *prog;
  PJRT_Client *client;
  PJRT_Device **devices; /* [ndevices], logical order */
  int deleted;
};

extern pthread_mutex_t tpu__pjrt_lock;

/* Errors: "tpusim PJRT: ..." messages. Never NULL (falls back to a static error). */
PJRT_Error *tpu__pjrt_error(PJRT_Error_Code code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
PJRT_Error *tpu__pjrt_error_diag(const tpu_diag *d);
/* A completed event; code OK for success. NULL when out of memory. */
PJRT_Event *tpu__pjrt_event(PJRT_Error_Code code, const char *msg);

/* PJRT_Buffer_Type <-> tpu_sim_dtype; -1 when tpusim has no such type. The float8 types
 * (F8E5M2, F8E4M3FN) map to f32: tpusim runs them as f32 with every f8 result rounded to
 * the f8 grid (the converter writes the rounding into the program), and the plugin widens
 * and narrows at the buffers. */
int tpu__pjrt_to_dtype(int pjrt_type);
int tpu__pjrt_from_dtype(int dtype);
/* Bytes per element of a PJRT type's buffers (1 for float8); 0 when unknown. */
size_t tpu__pjrt_type_size(int pjrt_type);
int tpu__pjrt_is_f8(int pjrt_type);
/* float8 <-> f32 (values as ml_dtypes: round to nearest even; F8E4M3FN has no infinity, its
 * overflow and infinities become NaN; F8E5M2 overflows to infinity). */
float tpu__pjrt_f8_to_f32(int pjrt_type, unsigned char v);
unsigned char tpu__pjrt_f8_from_f32(int pjrt_type, float x);
PJRT_Buffer *tpu__pjrt_buffer_new(PJRT_Device *dev, int type, int rank, const int64_t *dims);
void tpu__pjrt_program_unref(tpu_pjrt_program *p);

/* Slot implementations in buffer.c and exec.c (installed by plugin.c). */
void tpu__pjrt_install_buffer(PJRT_Api *api);
void tpu__pjrt_install_exec(PJRT_Api *api);

#endif
