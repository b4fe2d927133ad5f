/* SCALE-Sim interop: its .cfg and topology CSV readers and its COMPUTE_REPORT.csv writer. */
#ifndef TPU_CHIP_SCALESIM_H
#define TPU_CHIP_SCALESIM_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "chip/mxu.h"

/* ---- Configuration (.cfg, read as Python's configparser reads it) ----
 * Section names are case-sensitive, keys are not; `key = value` or `key: value`; lines
 * starting with '#' or ';' are comments; indented lines continue the previous value.
 * Required, as SCALE-Sim v2 and v3 both require them: [general] run_name;
 * [run_presets] InterfaceBandwidth (CALC or USER); [architecture_presets] ArrayHeight,
 * ArrayWidth, IfmapSramSzkB, FilterSramSzkB, OfmapSramSzkB, IfmapOffset, FilterOffset,
 * OfmapOffset, Dataflow, and Bandwidth when InterfaceBandwidth is USER. The v3-only keys
 * (ReadRequestBuffer, [layout], [sparsity], UseRamulatorTrace) are accepted and ignored,
 * except SparsitySupport = true, which is rejected. */

typedef enum {
  TPU_SCALESIM_OS = 0, /* output stationary */
  TPU_SCALESIM_WS = 1, /* weight stationary: the TPU's dataflow, the only one simulated */
  TPU_SCALESIM_IS = 2  /* input stationary */
} tpu_scalesim_dataflow;

#define TPU_SCALESIM_MAX_BANDWIDTHS 16
/* Array sides above this are refused at parse time (the tile model's own limit). */
#define TPU_SCALESIM_MAX_ARRAY_DIM ((int64_t)1 << 20)

typedef struct tpu_scalesim_config {
  char *run_name;                 /* owned; names the report folder OUTDIR/<run_name> */
  int64_t array_rows, array_cols; /* ArrayHeight x ArrayWidth: R x C PEs */
  int64_t ifmap_sram_kb, filter_sram_kb, ofmap_sram_kb; /* kB (parsed, not simulated) */
  int64_t ifmap_offset, filter_offset, ofmap_offset;    /* address offsets (not simulated) */
  tpu_scalesim_dataflow dataflow;
  tpu_loc dataflow_loc;           /* where Dataflow's value is (file borrowed from `path`) */
  int user_bandwidth;             /* InterfaceBandwidth = USER (else CALC) */
  int n_bandwidths;               /* Bandwidth list, words/cycle (USER mode only) */
  int64_t bandwidths[TPU_SCALESIM_MAX_BANDWIDTHS];
  char *topology_path;            /* [network_presets] TopologyCsvLoc, unquoted; or NULL */
  char *path;                     /* owned copy of the file name, for messages */
} tpu_scalesim_config;

/* Parses `len` bytes of .cfg text; `path` names it in messages. On failure `out` holds
 * nothing to free. */
tpu_status tpu_scalesim_config_parse(const char *path, const char *text, size_t len,
                                     tpu_scalesim_config *out, tpu_diag *d);
/* Reads and parses the file at `path`. */
tpu_status tpu_scalesim_config_load(const char *path, tpu_scalesim_config *out, tpu_diag *d);
void tpu_scalesim_config_deinit(tpu_scalesim_config *c);

/* Fails (TPU_ERR_UNSUPPORTED, at the Dataflow value) unless the dataflow is ws. */
tpu_status tpu_scalesim_config_require_ws(const tpu_scalesim_config *c, tpu_diag *d);

/* ---- Topology CSV ----
 * The first line is a header and is skipped whatever it holds; blank lines are skipped.
 * Each row's last comma-separated field is dropped, as SCALE-Sim drops it, so rows end in
 * a comma. conv rows: name, IFMAP Height, IFMAP Width, Filter Height, Filter Width,
 * Channels, Num Filter, Strides (both directions) [, N:M sparsity ratio, dense only].
 * gemm rows: name, M, N, K [, N:M]. A conv layer whose name contains "DP" is depthwise:
 * SCALE-Sim expands it into one single-channel layer per channel, named
 * "<name>Channel_<i>", and so do we. */

typedef enum { TPU_SCALESIM_CONV = 0, TPU_SCALESIM_GEMM = 1 } tpu_scalesim_input;

/* Largest value accepted in a topology field, and the most layers after expansion. */
#define TPU_SCALESIM_MAX_FIELD ((int64_t)2147483647)
#define TPU_SCALESIM_MAX_LAYERS 1000000

typedef struct tpu_scalesim_layer {
  char *name; /* owned */
  int line;   /* 1-based line in the topology file */
  /* As SCALE-Sim holds it (a gemm row M, N, K becomes ifmap M x K, filter 1 x K, one
   * channel, N filters, stride 1). */
  int64_t ifmap_h, ifmap_w, filter_h, filter_w, channels, num_filters, stride_h, stride_w;
  /* The GEMM its ws dataflow runs: out[M,N] = A[M,K] x W[K,N] with T = M output pixels
   * per filter, Sr = K = filter_h*filter_w*channels (the window), Sc = N filters. */
  int64_t M, K, N;
} tpu_scalesim_layer;

typedef struct tpu_scalesim_topology {
  tpu_scalesim_layer *layers; /* owned */
  int64_t n;
  char *path; /* owned copy of the file name */
} tpu_scalesim_topology;

tpu_status tpu_scalesim_topology_parse(const char *path, const char *text, size_t len,
                                       tpu_scalesim_input kind, tpu_scalesim_topology *out,
                                       tpu_diag *d);
tpu_status tpu_scalesim_topology_load(const char *path, tpu_scalesim_input kind,
                                      tpu_scalesim_topology *out, tpu_diag *d);
void tpu_scalesim_topology_deinit(tpu_scalesim_topology *t);

/* ---- COMPUTE_REPORT.csv ---- */

/* One row. In SCALE-Sim mode the header is SCALE-Sim v2's:
 *   LayerID, Total Cycles, Stall Cycles, Overall Util %, Mapping Efficiency %, Compute Util %,
 * and in TPU mode one more column follows: Cycles Saved (serial total minus
 * double-buffered total). Utilisations are percentages with SCALE-Sim's definitions. */
typedef struct tpu_scalesim_row {
  int64_t total_cycles;
  int64_t stall_cycles; /* always 0: SRAM and DRAM are not simulated */
  double overall_util_pct, mapping_eff_pct, compute_util_pct;
  int64_t cycles_saved;
} tpu_scalesim_row;

/* Fills a row from one layer's model cycles: Overall Util % = M*K*N*100 / (R*C*total) as
 * SCALE-Sim computes it (so the digits match), the other two from `c` times 100. */
void tpu_scalesim_row_from_cycles(const tpu_mxu_cycles *c, int64_t R, int64_t C,
                                  tpu_scalesim_row *out);

/* Writes the report to `path` through a temporary file renamed into place, so a failure
 * leaves no partial file. `with_saved` adds the TPU-mode column. */
tpu_status tpu_scalesim_report_write(const char *path, const tpu_scalesim_row *rows, int64_t n,
                                     int with_saved, tpu_diag *d);

/* Formats a double as Python's repr() does (shortest round-trip digits, "100.0",
 * "1e-05", "inf", "nan"), which is how SCALE-Sim prints its float columns. Returns the
 * length written (buf must hold at least 32 bytes). */
int tpu_scalesim_format_float(double v, char *buf, size_t n);

#endif
