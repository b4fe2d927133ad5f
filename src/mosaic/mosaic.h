/* Pallas/Mosaic TPU kernels (tpu_custom_call): the kernel IR, its parser, values and timing.
 *
 * JAX lowers a pallas_call for a TPU to a custom call whose backend_config carries the kernel
 * as Mosaic MLIR bytecode. python/tpusim/pallas_decode.py (jaxlib) adds the kernel in a line
 * form under the key "tpusim_mosaic" (docs/pallas.md); this module reads that form, runs the
 * kernel's grid with the values a TPU computes (interp.c) and prices each grid step (cost.c). */
#ifndef TPU_MOSAIC_MOSAIC_H
#define TPU_MOSAIC_MOSAIC_H

#include <stdint.h>

#include "base/alloc.h"
#include "base/dtype.h"
#include "base/status.h"
#include "base/tensor.h"
#include "ir/ir.h"

#define TPU_MO_MAX_RANK 8
#define TPU_MO_ICI_TARGETS 4

/* A value's type: a scalar (rank 0, not a vector), a vector, a memref or a semaphore. */
typedef enum { TPU_MO_SCALAR, TPU_MO_VECTOR, TPU_MO_MEMREF, TPU_MO_SEM } tpu_mo_kind;
/* Memory spaces of a memref. ANY: wherever the operand lives (HBM), moved by manual DMAs. */
typedef enum { TPU_MO_ANY, TPU_MO_VMEM, TPU_MO_SMEM, TPU_MO_SEMMEM, TPU_MO_HBM } tpu_mo_space;

typedef struct tpu_mo_type {
  tpu_mo_kind kind;
  tpu_dtype dt;     /* element type (index: s64; i1: pred); semaphores and their memrefs: s32 */
  int bits;         /* a narrower integer held in dt (i4 in s8): its width; 0: dt's own */
  int is_index;     /* the MLIR index type */
  int sem;          /* a semaphore or a memref of them */
  int rank;
  int64_t dims[TPU_MO_MAX_RANK]; /* -1: dynamic */
  tpu_mo_space space;
} tpu_mo_type;

typedef struct tpu_mo_op tpu_mo_op;

typedef struct tpu_mo_block {
  int nargs;
  int *args;          /* value ids */
  tpu_mo_type *argt;
  int nops;
  tpu_mo_op **ops;
} tpu_mo_block;

/* Operation codes the interpreter runs (ORDER MO: mosaic_ops.def). */
typedef enum {
#define X(e, name) TPU_MO_##e,
#include "mosaic/mosaic_ops.def"
#undef X
  TPU_MO_COUNT
} tpu_mo_code;

struct tpu_mo_op {
  const char *name;   /* "arith.addf" */
  tpu_mo_code code;   /* TPU_MO_COUNT: not modelled */
  int nres;
  int *res;           /* value ids */
  tpu_mo_type *rest;
  int nopd;
  int *opd;
  int nattr;
  const char **akey, **aval; /* attribute names and values as the line form writes them */
  int nreg;
  tpu_mo_block *reg;
  int line;           /* line in the kernel text */
  const char *src;    /* "file.py:12" of the user's source, or NULL */
};

/* A window (BlockSpec) of one operand of the kernel: the block the kernel sees at each step. */
typedef struct tpu_mo_window {
  int has_map;        /* 0: the whole operand, not pipelined (memory_space=ANY / SMEM) */
  const tpu_mo_op *map; /* transform_indices: grid indices (+ prefetch refs) -> block indices */
  int rank;
  int64_t bounds[TPU_MO_MAX_RANK]; /* window_bounds (1 for a squeezed dimension) */
  int squeezed[TPU_MO_MAX_RANK];   /* the kernel's memref drops this dimension */
  int element;        /* window_kind element_window (pl.Element): the map gives element offsets */
} tpu_mo_window;

/* The element where window w's block bi starts in dimension i (block index x bound, or the
 * offset itself for an element window). */
static inline int64_t tpu_mo_window_start(const tpu_mo_window *w, int i, int64_t bi) {
  return w->element ? bi : bi * w->bounds[i];
}

typedef struct tpu_mosaic {
  tpu_arena arena;
  const char *file;   /* names errors: the HLO file */
  tpu_loc loc;        /* the custom call's place in the HLO */
  int nvalues;        /* value ids run 0 .. nvalues-1 */
  tpu_mo_op **funcs;
  int nfuncs;
  const tpu_mo_op *main; /* the kernel (the func with window_params / iteration_bounds) */
  const char *name;
  int ngrid;
  int64_t grid[TPU_MO_MAX_RANK]; /* -1: dynamic (its bound a leading s32[] operand of the call) */
  int ndyn;                      /* dynamic grid dimensions */
  int parallel[TPU_MO_MAX_RANK]; /* dimension_semantics: parallel (may split over cores) */
  int nprefetch, nscratch;
  int nwindows;
  tpu_mo_window *win;  /* one per operand after the prefetch ones (inputs, then outputs) */
} tpu_mosaic;

/* Parses the line form (docs/pallas.md). Errors name `loc` (the custom call) and the line of
 * the kernel text. *out is owned by the caller (tpu_mosaic_free). */
tpu_status tpu_mosaic_parse(const char *text, size_t n, tpu_loc loc, tpu_mosaic **out, tpu_diag *d);
void tpu_mosaic_free(tpu_mosaic *k);

/* The kernel of a tpu_custom_call instruction: parses backend_config's "tpusim_mosaic". A
 * kernel not decoded yet (only the bytecode body) fails with what to run. */
tpu_status tpu_mosaic_of_instr(const tpu_instr *in, tpu_mosaic **out, tpu_diag *d);
/* Does this custom call carry a decoded kernel? */
int tpu_mosaic_is_decoded(const tpu_instr *in);
/* A decoded Pallas call's kernel and its source line, "kernel @ file.py:12" (the kernel's
 * first operation that carries a line, the file without its folder) into buf; 0: not one. */
int tpu_mosaic_source(const tpu_instr *in, char *buf, size_t n);
/* The first Pallas call of m whose scalar operands (dynamic grid bounds, scalar prefetch) are
 * not all HLO constants (its kernel's name into name[n]), or NULL: a timing run without
 * values counts such a kernel on zeros. */
const tpu_instr *tpu_mosaic_unknown_scalars(const tpu_module *m, char *name, size_t n);

/* The grid a run of custom call `in` walks: dynamic dimensions (megablox's number of active
 * tiles) take their bound from the call's leading scalar operands `args` (NULL, timing
 * without values: the largest element count of the kernel's scalar-prefetch operands, the
 * per-step tables Pallas kernels size for their longest grid; 1 without any). Returns the
 * number of steps. */
int64_t tpu_mosaic_grid(const tpu_mosaic *k, const tpu_instr *in, const tpu_tensor *const *args, int64_t *grid);

/* An attribute of an op by name, or NULL. */
const char *tpu_mo_attr(const tpu_mo_op *op, const char *key);
/* "i:5" -> 5; returns 0 when absent or not an integer (then *v unchanged). */
int tpu_mo_attr_int(const tpu_mo_op *op, const char *key, int64_t *v);
/* "a:1,2,3" / "D:1,2" -> up to max integers; returns the count, -1 if absent. */
int tpu_mo_attr_ints(const tpu_mo_op *op, const char *key, int64_t *v, int max);

/* Matmul hook: out[nb][M][N] = A[nb][M][K] x W[nb][K][N] with TPU numerics (operands hold
 * values of `dt`; f32 operands at `passes` bf16 passes). NULL: plain f64 sums. */
typedef tpu_status (*tpu_mo_matmul_fn)(void *user, tpu_dtype dt, int passes, const float *A, const float *W,
                                       float *out, int64_t nb, int64_t M, int64_t K, int64_t N, tpu_diag *d);

/* Work one grid step does (the timing prices it: cost.c). */
typedef struct tpu_mosaic_work {
  double mxu_flops;     /* 2*M*N*K*passes summed over tpu.matmul */
  double mxu_pad_flops; /* the same on the MXU's tiles (rows to 8, K and N to 128) */
  int64_t mm_m, mm_k, mm_n, mm_b; /* the step's largest matmul */
  tpu_dtype mm_dt;
  int mm_passes;
  int64_t vpu_vregs;    /* vector-register operations on the VPU (loads/stores included) */
  int64_t eup_vregs;    /* pushes to the transcendental unit */
  int64_t xlu_vregs;    /* cross-lane work: reductions, transposes */
  int64_t scalar_ops;   /* scalar-unit operations */
  double dma_bytes;     /* manual DMAs started (bytes) */
  int64_t ndma;
  /* DMAs and signals to other devices of the pod (timing: tpu_mosaic_count runs one device,
   * the others' waits taken as met): bytes and DMAs to each target device (the first
   * TPU_MO_ICI_TARGETS targets; later ones add to the last), signals sent. */
  int nici;
  int64_t ici_dev[TPU_MO_ICI_TARGETS];
  double ici_bytes[TPU_MO_ICI_TARGETS];
  int64_t ici_dmas[TPU_MO_ICI_TARGETS];
  int64_t ici_signals;
  /* The pipeline at this step (bit w: window w): input blocks fetched for it (their index
   * changed), and output blocks of the previous step written back before it. */
  uint64_t fetched, flushed;
} tpu_mosaic_work;

/* The devices of a pod running one collective kernel together (remote DMAs, signals to
 * other devices, the barrier semaphore): one per pod and call, shared by the devices' runs,
 * each on its own thread (pod.c). */
typedef struct tpu_mo_pod tpu_mo_pod;
tpu_mo_pod *tpu_mo_pod_new(int64_t ndevices);
void tpu_mo_pod_free(tpu_mo_pod *p);
/* Stops every run of the pod with `why` (a device that will never join it). */
void tpu_mo_pod_abort(tpu_mo_pod *p, const tpu_diag *why);

/* Does the kernel talk to other devices (DMAs or signals with a device id, the barrier
 * semaphore)? */
int tpu_mosaic_is_collective(const tpu_mosaic *k);

typedef struct tpu_mosaic_opts {
  tpu_mo_matmul_fn matmul;
  void *user;
  int64_t device_id;  /* for tpu.device_id: the logical device (replica * partitions + partition) */
  /* NULL: one device (a DMA or signal to another is refused). Else every device of the pod
   * calls tpu_mosaic_run with the same pod, each on its own thread: the runs meet before the
   * first step and after the last, a wait blocks until another device signals, and a DMA to
   * another device writes into that device's buffers. */
  tpu_mo_pod *pod;
  /* NULL, or called after each grid step (row-major order) with the work it did */
  void (*on_step)(void *user, int64_t step, const tpu_mosaic_work *w);
  /* Count mode: no_memo runs every step's body (else a step whose body reads the same grid
   * indices as an earlier one takes its work when no step can change what later ones see:
   * memo.c; an index map's component likewise, by the grid indices it reads). */
  int no_memo;
  int64_t *bodies, *maps; /* not NULL: how many bodies and index maps ran */
} tpu_mosaic_opts;

/* Plans the TPU back end took from its process-wide store of counted calls (backend.c:
 * a call counted without scalars is counted once per kernel, shapes and chip; tests). */
int64_t tpu__mosaic_count_hits(void);

/* Counts the kernel's work without values (timing): the grid, index maps and scalar code run
 * (scalar prefetch operands read as zeros); vectors and DMAs are only priced. o->on_step gets
 * each step's work. */
tpu_status tpu_mosaic_count(const tpu_mosaic *k, const tpu_instr *in, const tpu_mosaic_opts *o, tpu_diag *d);
/* The same on known scalar operands: `scalars` holds the call's leading ndyn + nprefetch
 * operands (dynamic grid bounds, then the scalar-prefetch arrays), so the grid is the real
 * one and index maps, DMAs and control flow read the real scalars. */
tpu_status tpu_mosaic_count_scalars(const tpu_mosaic *k, const tpu_instr *in, const tpu_tensor *const *scalars,
                                    const tpu_mosaic_opts *o, tpu_diag *d);

/* The scalar operands (dynamic grid bounds, then scalar prefetch) a values run gave each
 * Pallas call, by the call's place in the HLO (each run at a place, in order, up to
 * TPU_MOSAIC_SEEN_MAX): the timing counts the kernel on them (tpu_compile_opts.mosaic_seen)
 * instead of zeros, a call in a loop on each iteration's own (src/mosaic/backend.c). */
#define TPU_MOSAIC_SEEN_MAX 256
typedef struct tpu_mosaic_seen {
  tpu_loc loc;
  char *name;       /* the call's name (owned): its key when it has no place */
  int n;
  tpu_tensor *args; /* owned copies */
  int64_t flat;     /* the loop iteration it ran in, counted over every loop around it (-1: none) */
} tpu_mosaic_seen;
typedef struct tpu_mosaic_seen_set {
  tpu_mosaic_seen *v;
  int n, cap;
} tpu_mosaic_seen_set;
/* Records call `in`'s first n operands and its loop iteration `flat` (a record more at its
 * place, up to TPU_MOSAIC_SEEN_MAX). */
tpu_status tpu_mosaic_seen_add(tpu_mosaic_seen_set *s, const tpu_instr *in, const tpu_tensor *const *args, int n,
                               int64_t flat, tpu_diag *d);
/* The first record of call `in` (of any module parsed from the same text), or NULL. */
const tpu_mosaic_seen *tpu_mosaic_seen_find(const tpu_mosaic_seen_set *s, const tpu_instr *in);
/* The records of call `in` in the order the calls ran: their count, the first `max` in out. */
int tpu_mosaic_seen_calls(const tpu_mosaic_seen_set *s, const tpu_instr *in, const tpu_mosaic_seen **out, int max);
/* 1 when two records hold the same scalars. */
int tpu_mosaic_seen_args_same(const tpu_mosaic_seen *a, const tpu_mosaic_seen *b);
void tpu_mosaic_seen_free(tpu_mosaic_seen_set *s);
/* 1 when a and b hold the same calls with the same scalars (NULL reads as empty). */
int tpu_mosaic_seen_same(const tpu_mosaic_seen_set *a, const tpu_mosaic_seen_set *b);
/* dst: an owned copy of src (NULL: empty). */
tpu_status tpu_mosaic_seen_copy(tpu_mosaic_seen_set *dst, const tpu_mosaic_seen_set *src, tpu_diag *d);

/* Runs the kernel of custom call `in` on its operands (args, in operand order) and fills
 * `out` with the call's result (an array, or a tuple for several outputs). */
tpu_status tpu_mosaic_run(const tpu_mosaic *k, const tpu_instr *in, const tpu_tensor *const *args, int nargs,
                          const tpu_mosaic_opts *o, tpu_tensor *out, tpu_diag *d);

#endif
