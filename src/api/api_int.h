/* Private state behind the public simulator handles of include/tpusim/tpusim.h. */
#ifndef TPU_API_API_INT_H
#define TPU_API_API_INT_H

#include "base/tensor.h"
#include "chip/chip.h"
#include "chip/timeline.h"
#include "ir/ir.h"
#include "pod/cost.h"
#include "pod/podio.h"
#include "report/report.h"
#include "report/source.h"
#include "tpusim/tpusim.h"

struct tpu_program;

/* A loaded module keeps its text: every run parses its own copy, because the compiler
 * rewrites a module in place and results borrow names from the compiled one. */
struct tpu_sim_module {
  char *name;     /* for diagnostics and reports */
  char *text;     /* the HLO text, NUL-terminated */
  size_t len;
  tpu_module *m;  /* parsed and verified (parameter shapes, device count) */
};

/* Where one profile row's op came from (owned strings; NULL / 0 when unknown). */
typedef tpu_op_source tpu__api_src;

/* One run's outcome. Owns everything it points to. */
struct tpu_sim_result {
  char *program;  /* the module's name, for the report header */
  const char *mode, *precision; /* static strings */
  int64_t devices;
  tpu_tensor value;          /* the entry's result (full mode) */
  const tpu_tensor **leaves; /* into value */
  unsigned char *taken;      /* per leaf: moved into a buffer (tpu_sim_result_take_output) */
  int nleaves;
  int timed;
  tpu_chip chip;
  tpu_module *compiled;      /* the module the program came from (names are borrowed) */
  struct tpu_program *prog;
  tpu_timeline tl;
  tpu_report_metrics metrics;
  tpu_profile prof;
  tpu__api_src *src;         /* per profile row */
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

/* Fills r->src for r->prof's rows from the ops' HLO metadata and the debug tables in the
 * module text (api/srcinfo.c); frees it. */
tpu_status tpu__api_source_rows(tpu_sim_result *r, const char *text, size_t len, tpu_diag *d);
void tpu__api_source_free(tpu_sim_result *r);

#endif
