/* tpusim public C API (libtpusim): status codes, diagnostics, version, and the simulator:
 * load an HLO module, run it with values or timing only, read results, metrics and the
 * per-op profile, write the JSON report and the Chrome trace. */
#ifndef TPUSIM_TPUSIM_H
#define TPUSIM_TPUSIM_H

#include <stddef.h>
#include <stdint.h>

#define TPUSIM_VERSION "0.1.0"

/* Status codes: 0 is success, errors are negative. ORDER: names and messages come from
 * this one list. */
#define TPU_STATUS_LIST(X)                                   \
  X(TPU_OK, 0, "ok")                                         \
  X(TPU_ERR_PARSE, -1, "syntax error")                       \
  X(TPU_ERR_INVALID, -2, "ill-formed program")               \
  X(TPU_ERR_UNSUPPORTED, -3, "unsupported")                  \
  X(TPU_ERR_IO, -4, "input/output error")                    \
  X(TPU_ERR_NOMEM, -5, "out of memory")                      \
  X(TPU_ERR_LIMIT, -6, "limit exceeded")                     \
  X(TPU_ERR_ARG, -7, "bad argument")                         \
  X(TPU_ERR_RUNTIME, -8, "runtime error")

typedef enum {
#define X(name, code, msg) name = code,
  TPU_STATUS_LIST(X)
#undef X
} tpu_status;

const char *tpu_status_name(tpu_status s);
const char *tpu_status_message(tpu_status s);

/* A diagnostic filled by a failing call. `file`/`line`/`col` locate the input (line 0 when
 * there is no input location); `src_file`/`src_line` locate the C code that failed. The
 * caller owns it; calls that succeed leave it untouched. */
typedef struct tpu_diag {
  tpu_status status;
  char file[256];
  int line, col;
  const char *src_file;
  int src_line;
  char msg[768];
} tpu_diag;

/* Writes one line "FILE:LINE:COL: error: MSG" into buf: LINE and COL 1-based in a text
 * file; LINE 0 for a binary file, COL then the byte offset (0:0 also stands for the file as
 * a whole); "error: MSG" when the diagnostic names no file. Control bytes and invalid UTF-8
 * are written as \xHH, so the line never breaks and echoed input never reaches a terminal
 * raw. docs/errors.md. */
void tpu_diag_format(const tpu_diag *d, char *buf, size_t n);

const char *tpu_version(void);

/* ---- The simulator (src/api) ----
 *
 * Every call returns a tpu_status and, on failure, fills the caller's tpu_diag (which may
 * be NULL). Handles are opaque; each _free accepts NULL. A call that fails leaves its
 * out-parameters NULL/empty and allocates nothing. Calls are not thread-safe (the
 * allocator's fault-injection counter is global): make one call at a time. */

/* Element types of arrays crossing the API. Values are stable. */
typedef enum {
  TPU_SIM_PRED = 0, /* one byte, 0 or 1 */
  TPU_SIM_S8 = 1,
  TPU_SIM_S16 = 2,
  TPU_SIM_S32 = 3,
  TPU_SIM_S64 = 4,
  TPU_SIM_U8 = 5,
  TPU_SIM_U16 = 6,
  TPU_SIM_U32 = 7,
  TPU_SIM_U64 = 8,
  TPU_SIM_BF16 = 9, /* raw bfloat16 bits (the upper half of an IEEE f32) */
  TPU_SIM_F16 = 10,
  TPU_SIM_F32 = 11,
  TPU_SIM_F64 = 12,
  TPU_SIM_C64 = 13, /* two f32: real, then imaginary part */
  TPU_SIM_C128 = 14, /* two f64 */
  TPU_SIM_F8E5M2 = 15, /* one byte: sign, 5 exponent bits (bias 15), 2 mantissa bits; infinities */
  TPU_SIM_F8E4M3FN = 16 /* one byte: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinity */
} tpu_sim_dtype;

#define TPU_SIM_MAX_RANK 16

/* A dense array: row-major (C order), native byte order, no padding. Inputs: the caller
 * owns `data`; the library copies it during the call (the caller may free it as soon as
 * the call returns). Outputs: `data` belongs to the result handle and stays valid until
 * tpu_sim_result_free. */
typedef struct tpu_sim_array {
  int dtype; /* tpu_sim_dtype */
  int rank;  /* 0 (a scalar) .. TPU_SIM_MAX_RANK */
  int64_t dims[TPU_SIM_MAX_RANK];
  const void *data;
  size_t nbytes; /* bytes at data: product(dims) * element size, checked on input */
} tpu_sim_array;

/* Bytes of one element (0 for an unknown dtype) and its HLO name ("f32"; NULL if unknown). */
size_t tpu_sim_dtype_size(int dtype);
const char *tpu_sim_dtype_name(int dtype);

/* A parsed and verified HLO module. */
typedef struct tpu_sim_module tpu_sim_module;

/* Parses and verifies HLO text (as JAX's as_text(dialect="hlo") prints it or as XLA dumps
 * it); `name` names it in diagnostics ("model.hlo:3:7: error: ..."); the text is copied. */
tpu_status tpu_sim_load_text(const char *name, const char *text, size_t len, tpu_sim_module **out, tpu_diag *d);
/* The same from a file. */
tpu_status tpu_sim_load_file(const char *path, tpu_sim_module **out, tpu_diag *d);
void tpu_sim_module_free(tpu_sim_module *m);

/* The module's devices (replica_count x num_partitions; for a module still to be
 * partitioned, its header's mesh) and entry parameters. */
int64_t tpu_sim_module_devices(const tpu_sim_module *m);
int tpu_sim_module_nparams(const tpu_sim_module *m);
/* Parameter i's dtype, rank and dims in *out (data NULL, nbytes the size): the global
 * shape for a module of several devices (the parameter's sharding applied). Fails with
 * TPU_ERR_UNSUPPORTED for a tuple or token parameter. */
tpu_status tpu_sim_module_param(const tpu_sim_module *m, int i, tpu_sim_array *out, tpu_diag *d);

/* How to run. Initialise with tpu_sim_options_init; NULL strings take the defaults. */
typedef struct tpu_sim_options {
  const char *backend;   /* "tpu" (default): values with TPU numerics, and timing; "ref":
                          * the reference interpreter, values only */
  const char *chip;      /* a preset name ("v5e", the default) or a chip JSON path */
  const char *precision; /* NULL or "per-op": each dot's operand_precision; or "default",
                          * "high", "highest" for every f32 dot/convolution (tpu only) */
  const char *mode;      /* "full" (default): values and timing; "timing": timing only, no
                          * inputs, no outputs (tpu only) */
  /* Modules of several devices: the sharding of the result leaves, in HLO syntax ("{devices=
   * [2,4]<=[8]}"), one per leaf or one for all (XLA's compiled text omits it); 0: the
   * ROOT's sharding= if any, else results are stacked one row per device. */
  const char *const *out_shardings;
  int n_out_shardings;
  /* A program with sharding annotations (JAX's lowered HLO of a sharded jit) is first
   * partitioned over a device mesh, as `tpusim run --mesh` does (docs/spmd.md): this mesh
   * ("data=16,model=4"), or NULL for the one the module's header names. */
  const char *mesh;
  /* Modules of several devices: the slice their collectives are timed on, as `tpusim run
   * --topology` takes it ("v5p-256", "4x4x8", "2x4"; NULL: the chip's default slice for the
   * devices), and how many such slices DCN joins (`--slices`; 0 or 1: one). */
  const char *topology;
  int slices;
  /* 1: partition with all-gathers and reduce-scatters where the chip's XLA compiler would pass
   * a dot's operand or partial sums round a ring (its windowed einsum; `--no-windowed-einsum`) */
  int no_windowed_einsum;
  /* 1: time without recording the step's events: no trace (tpu_sim_result_write_trace
   * fails), and the step's parts estimated from the unit totals (as when the events pass
   * their cap); the cycles, counters and ops are the same. Faster on programs of many
   * instructions, such as the planner's candidates (their events are 1,000,000 each). */
  int no_events;
} tpu_sim_options;

void tpu_sim_options_init(tpu_sim_options *o);

/* The outcome of a run. */
typedef struct tpu_sim_result tpu_sim_result;

/* Runs the module's entry computation. `inputs` holds one array per entry parameter, in
 * order (none in timing mode). The dtype must match the parameter, except that f32 is
 * accepted for a bf16 or f16 parameter (rounded to nearest even); dims must match (for a
 * module of several devices: the global array, cut into shards by each parameter's
 * sharding=; a parameter without one takes the same array on every device, or one row per
 * device on an extra leading axis). The module handle is not changed: it may be run again. */
/* Progress of value runs, for long ones: fn(user, step, nsteps, iteration) is called on the
 * running thread after each instruction of the entry computation (step of nsteps) and after
 * each iteration of a while loop the entry runs (iteration >= 1; 0 otherwise); in a pod only
 * device 0 reports. One hook for the process; NULL removes it. */
typedef void (*tpu_sim_progress_fn)(void *user, int64_t step, int64_t nsteps, int64_t iteration);
void tpu_sim_set_progress(tpu_sim_progress_fn fn, void *user);

tpu_status tpu_sim_run(const tpu_sim_module *m, const tpu_sim_options *o, const tpu_sim_array *inputs, int ninputs,
                       tpu_sim_result **out, tpu_diag *d);
void tpu_sim_result_free(tpu_sim_result *r);

/* The result leaves (tuples flattened depth-first; a token leaf is an array of rank 0 and
 * 0 bytes with dtype -1); 0 in timing mode. bf16 leaves come back as TPU_SIM_BF16. */
int tpu_sim_result_noutputs(const tpu_sim_result *r);
tpu_status tpu_sim_result_output(const tpu_sim_result *r, int i, tpu_sim_array *out, tpu_diag *d);

/* Whether the run was timed (the tpu backend). The calls below fail with TPU_ERR_ARG when not. */
int tpu_sim_result_timed(const tpu_sim_result *r);
/* Bytes of HBM the compiled program holds at its peak, on one chip (0 when not timed). */
int64_t tpu_sim_result_hbm_peak(const tpu_sim_result *r);

#define TPU_SIM_MAX_PARTS 8

/* The step's metrics (one chip of the pod for a module of several devices). */
typedef struct tpu_sim_metrics {
  char chip[32];            /* the chip's name, "v5e" */
  int64_t devices;          /* devices of the module */
  int64_t cycles;           /* step time in core cycles */
  double clock_hz, step_s;  /* step_s = cycles / clock_hz */
  double flops;             /* useful FLOPs */
  double padded_flops;      /* including padding to tiles */
  double padding_waste;     /* (padded - useful) / padded, 0..1 */
  double flops_per_s;       /* achieved */
  double peak_flops_per_s;  /* the chip's peak the MFU is measured against */
  const char *peak_kind;    /* "bf16" or "int8" */
  double mfu;               /* flops_per_s / peak, 0..1 */
  double hbm_bytes;         /* bytes between HBM and VMEM */
  double hbm_bw, hbm_bw_used; /* B/s: the chip's, and hbm_bytes / step_s */
  double ai, ridge_ai;      /* FLOP/B: arithmetic intensity (inf without bytes), and the ridge */
  double attainable;        /* FLOP/s: min(peak, ai * hbm_bw) */
  double roofline_frac;     /* flops_per_s / attainable */
  int memory_bound;         /* ai < ridge_ai */
  double ici_bytes;         /* bytes this chip sent over ICI */
  /* The step split into exclusive parts summing to `cycles` (docs/reports.md). */
  int nparts;
  const char *part_name[TPU_SIM_MAX_PARTS]; /* "mxu_busy", "vector_busy", "hbm_wait", ... */
  int64_t part_cycles[TPU_SIM_MAX_PARTS];
  double part_frac[TPU_SIM_MAX_PARTS];
  int parts_from_events;    /* 0: estimated from per-unit totals */
  /* Busy fraction of each unit (units overlap: not a split). */
  int nunits;
  const char *unit_name[TPU_SIM_MAX_PARTS]; /* "mxu", "vpu", "eup", "xlu", "dma-in", ... */
  double unit_util[TPU_SIM_MAX_PARTS];
} tpu_sim_metrics;

tpu_status tpu_sim_result_metrics(const tpu_sim_result *r, tpu_sim_metrics *out, tpu_diag *d);

/* One row of the per-op profile; rows are by cycles, largest first. Strings belong to the
 * result. */
typedef struct tpu_sim_op {
  const char *name;   /* the HLO instruction ("fusion.3", "dot.1") */
  const char *kind;   /* "dot", "fusion:kLoop", "convolution", ... */
  int64_t count;      /* times executed */
  int64_t cycles;     /* summed over executions */
  double time_s, frac; /* seconds, and share of the step */
  double flops, padded_flops, hbm_bytes;
  double ai;          /* FLOP/B (inf without bytes) */
  double flops_per_s; /* achieved while it ran */
  double padding_waste;
  int memory_bound;   /* DMA time exceeded compute time */
  /* Where it came from, from the HLO metadata (JAX writes it with as_text(debug_info=True);
   * for a fusion: its first dot or convolution, else its root): NULL / 0 when unknown. */
  const char *op_name;     /* "jit(step)/dot_general" */
  const char *source_file; /* "model.py" */
  int source_line;
  const char *function;    /* the Python function, from the stack frame tables */
} tpu_sim_op;

int tpu_sim_result_nops(const tpu_sim_result *r);
tpu_status tpu_sim_result_op(const tpu_sim_result *r, int i, tpu_sim_op *out, tpu_diag *d);

/* ---- Buffers: arrays kept inside the library between runs ----
 *
 * A buffer holds one array in the library's memory, so that one run's outputs feed the next
 * run's inputs without a copy through the caller, as device-resident arrays do in JAX (a
 * training loop keeps its parameters in tpusim from step to step). */
typedef struct tpu_sim_buffer tpu_sim_buffer;

/* A buffer holding a copy of `a` (dtype, rank and nbytes checked as a run's input is). */
tpu_status tpu_sim_buffer_new(const tpu_sim_array *a, tpu_sim_buffer **out, tpu_diag *d);
/* Moves output i of r into a new buffer, without a copy. The result then no longer holds
 * it: tpu_sim_result_output(r, i) and a second take fail with TPU_ERR_ARG. Fails for a
 * token leaf. */
tpu_status tpu_sim_result_take_output(tpu_sim_result *r, int i, tpu_sim_buffer **out, tpu_diag *d);
/* The buffer's array in *out; out->data belongs to the buffer and stays valid until the
 * buffer is freed or donated. Fails with TPU_ERR_ARG once it was donated. */
tpu_status tpu_sim_buffer_array(const tpu_sim_buffer *b, tpu_sim_array *out, tpu_diag *d);
/* 1 once the buffer was donated to a run (its memory is released; only _free is left). */
int tpu_sim_buffer_donated(const tpu_sim_buffer *b);
void tpu_sim_buffer_free(tpu_sim_buffer *b);

/* tpu_sim_run with inputs held in buffers, read in place (no copy; a buffer whose dtype
 * differs from its parameter's is converted as tpu_sim_run converts arrays: f32 for bf16 or
 * f16). The same buffer may be several inputs. `donate` is NULL or holds one flag per
 * input: a nonzero flag donates that buffer, as jax.jit's donate_argnums does: the caller
 * gives it up (the updated value comes back as an output), and when the run succeeds its
 * memory is released and the buffer is marked donated (only tpu_sim_buffer_free is left
 * to call). A donated buffer may not be another input of the same run; a run that fails
 * donates nothing. Timing mode takes no inputs, as in tpu_sim_run. */
tpu_status tpu_sim_run_buffers(const tpu_sim_module *m, const tpu_sim_options *o, tpu_sim_buffer *const *inputs,
                               int ninputs, const int *donate, tpu_sim_result **out, tpu_diag *d);

/* ---- The cache of compiled programs ----
 *
 * A run parses its module's text, partitions it, compiles it for the chip and times it; the
 * library keeps what it built (the last 16 settings by default; TPUSIM_CACHE_ENTRIES sets
 * the starting size, 0 turns it off), keyed by the module's name and text and every option
 * that changes the outcome (backend, the chip as its file reads, precision, mesh, topology,
 * slices, windowed einsum), so the next run of the same text with the same options (a
 * Module run again, a new Module of the same text, each PJRT step) computes only its values.
 * The outputs, cycles and report are those of a fresh run. A result holds what it borrows
 * from the cache until it is freed. */
void tpu_sim_cache_configure(int max_entries); /* entries kept (0: none; frees the rest) */
void tpu_sim_cache_clear(void);                /* frees every entry no result holds; stats to 0 */
void tpu_sim_cache_stats(int64_t *hits, int64_t *misses, int *entries);

/* The JSON report (`tpusim run --report`) and the Chrome trace (`--trace`). Each file is
 * written whole or not at all. */
tpu_status tpu_sim_result_write_json(const tpu_sim_result *r, const char *path, tpu_diag *d);
tpu_status tpu_sim_result_write_trace(const tpu_sim_result *r, const char *path, tpu_diag *d);

#endif
