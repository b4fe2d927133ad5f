/* Private state behind the public simulator handles of include/tpusim/tpusim.h. */
#ifndef TPU_API_API_INT_H
#define TPU_API_API_INT_H

#include <pthread.h>

#include "base/tensor.h"
#include "chip/chip.h"
#include "chip/timeline.h"
#include "ir/ir.h"
#include "mosaic/mosaic.h"
#include "pod/cost.h"
#include "pod/podio.h"
#include "report/report.h"
#include "report/source.h"
#include "tpusim/tpusim.h"

struct tpu_program;

/* A loaded module keeps its text: the compiler rewrites a module in place and results borrow
 * names from the compiled one, so a compile parses its own copy (without verifying it again:
 * the text was verified at load). The values run on the loaded module itself where nothing
 * rewrites it (no mesh to partition over, no slices to widen to), shared by reference. */
struct tpu_sim_module {
  char *name;     /* for diagnostics and reports */
  char *text;     /* the HLO text, NUL-terminated */
  size_t len;
  tpu_module *m;  /* parsed and verified (parameter shapes, device count) */
  int *mrefs;     /* holders of m (this module and cache entries sharing it as their vm:
                   * run.c module_share); atomic */
  struct tpu__module_memo *memo; /* its last run's cache entry (run.c memo_take) */
};

/* The cache entry of a module's last run and that run's settings (run.c make_opts), under
 * `lock`: a run with the same settings and chip takes it back from the cache without
 * building and hashing the whole key (the text and the 49 KB chip). Holds a reference. */
typedef struct tpu__module_memo {
  pthread_mutex_t lock;
  struct tpu__compiled *c;
  unsigned char *opts;
  size_t optlen;
  uint64_t chip_gen; /* the chip load that gave c's chip (tpu_chip_load_again; 0: none) */
  char *chip_name;   /* and the name it was loaded by ("v4" and "v4:core" read one file) */
} tpu__module_memo;

/* Where one profile row's op came from (owned strings; NULL / 0 when unknown). */
typedef tpu_op_source tpu__api_src;

/* A module text compiled with one set of settings (api/cache.c): shared by the runs that
 * find it in the cache and by their results, which hold a reference. Nothing in it changes
 * once built, except `prog` and what goes with it, filled once under the build lock. */
typedef struct tpu__compiled {
  int refs;                  /* under the cache lock */
  int in_cache;              /* in the cache's list (under the cache lock) */
  uint64_t hash;
  unsigned char *key;        /* the text and every setting that changes the result (run.c make_key) */
  size_t keylen;
  struct tpu__compiled *next;
  tpu_chip chip;             /* (tpu backend) */
  tpu_module *vm;            /* parsed, verified and partitioned: the values run on it */
  int *vm_refs;              /* vm's holders when it is a loaded module's own (NULL: the
                              * entry's alone): tpu__module_release */
  int64_t devices;
  /* Compiled on first use (tpu backend): */
  tpu_module *cm;            /* the module the compiler rewrote (the program's op names point in it) */
  struct tpu_program *prog;
  tpu_peak_kind pk;
  tpu_pod_cost_ctx costs;    /* the link model's answers for its collectives */
  tpu_topology topo;         /* the slice of the options (costs.topo points here when set) */
  int dyn_trips;             /* a loop's trip count comes from each run's values */
  tpu_mosaic_seen_set seen;  /* the Pallas calls' scalars prog was compiled with (a run that
                              * gives others compiles its own program: run.c) */
  /* The timing, when it is the same for every run (!dyn_trips): */
  int timed;
  tpu_timeline tl;
  tpu_report_metrics metrics;
  tpu_profile prof;
  tpu_op_source *src;        /* per profile row */
  /* With dyn_trips: the timings of the last distinct trip counts (every LOOP instruction's,
   * in program order), under the build lock; results point into them. */
  struct tpu__trip_timing *trip_timings;
  int ntrip_timings;
} tpu__compiled;

/* Drops one holder of module m whose holders `refs` counts (NULL: the caller is its only
 * one), freeing it with the last. */
void tpu__module_release(tpu_module *m, int *refs);

/* One timing of a program whose loop trips come from the values. */
typedef struct tpu__trip_timing {
  int64_t *trips; /* per LOOP instruction */
  int ntrips;
  tpu_timeline tl;
  tpu_report_metrics metrics;
  tpu_profile prof;
  tpu_op_source *src;
} tpu__trip_timing;

/* Frees the trip timings of an entry (cache.c, when the entry goes). */
void tpu__trip_timings_free(tpu__compiled *c);

/* The cache (api/cache.c). find: the entry for key with a new reference, or NULL. new: an
 * entry with one reference (the caller's), not yet in the cache; insert adds the cache's
 * own. release drops a reference (freed at the last). */
tpu__compiled *tpu__cache_find(const unsigned char *key, size_t keylen);
tpu_status tpu__cache_new(const unsigned char *key, size_t keylen, tpu__compiled **out, tpu_diag *d);
/* c with a new reference when it is still in the cache (moved to the front, counted as a
 * hit when `hit`), else NULL. */
tpu__compiled *tpu__cache_reuse(tpu__compiled *c, int hit);
void tpu__cache_insert(tpu__compiled *c);
void tpu__cache_release(tpu__compiled *c);
void tpu__cache_build_lock(void);
void tpu__cache_build_unlock(void);
/* The memo of matmul plans for compiles for `chip` (cache.c; NULL: none), under the build lock. */
struct tpu_mm_memo *tpu__cache_mm_memo(const tpu_chip *chip);
/* The memo of collective costs shared by every compile (cache.c; NULL: none), under the build lock. */
tpu_pod_coll_memo *tpu__cache_coll_memo(void);

/* One run's outcome. Owns everything it points to, except `cc` (a reference) and what it
 * borrows from cc: compiled, prog, chip, costs, topo, and the timing (tl, metrics, prof,
 * src) unless own_timing. */
struct tpu_sim_result {
  char *program;  /* the module's name, for the report header */
  const char *mode, *precision; /* static strings */
  int64_t devices;
  tpu_tensor value;          /* the entry's result (full mode) */
  const tpu_tensor **leaves; /* into value */
  unsigned char *taken;      /* per leaf: moved into a buffer (tpu_sim_result_take_output) */
  int nleaves;
  int timed;
  tpu__compiled *cc;
  const tpu_chip *chip;      /* cc's (zeros for the reference backend) */
  tpu_module *compiled;      /* the module the program came from (names are borrowed) */
  struct tpu_program *prog;
  tpu_timeline tl;
  tpu_report_metrics metrics;
  tpu_profile prof;
  tpu__api_src *src;         /* per profile row */
  int own_timing;            /* tl, prof and src are this run's (trip counts from its values) */
  int own_prog;              /* compiled, prog and costs are this run's (its Pallas calls' scalars
                              * differ from those the entry's program was compiled with) */
  tpu_podio pod;             /* a module of several devices: its inputs, results, report section */
  tpu_pod_cost_ctx costs;    /* the link model's answers for its collectives (report section) */
  tpu_topology topo;         /* the slice given by the options (costs.topo points here when set) */
  int have_pod;
};

/* An array kept in the library between runs (api/buffer.c). */
struct tpu_sim_buffer {
  tpu_tensor t; /* the array; its data is owned (empty once donated) */
  int donated;
};

/* Public <-> internal element types; -1 / TPU_DTYPE_COUNT when there is none. */
int tpu__api_public_dtype(tpu_dtype t);
int tpu__api_internal_dtype(int public_dtype, tpu_dtype *out);

/* The source rows of a profile's rows (api/srcinfo.c): *out gets one per row, from the ops'
 * HLO metadata and the debug tables in the module text; free with tpu__api_source_free_rows. */
tpu_status tpu__api_source_rows(const struct tpu_program *prog, const tpu_profile *prof, const char *text, size_t len,
                                tpu_op_source **out, tpu_diag *d);
void tpu__api_source_free_rows(tpu_op_source *src, int nrows);

#endif
