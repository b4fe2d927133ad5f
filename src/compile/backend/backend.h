/* Internal: the state the back-end passes (tile, layout, buffer-assign, schedule, lower)
 * share while building a TPU program from a module. */
#ifndef TPU_COMPILE_BACKEND_H
#define TPU_COMPILE_BACKEND_H

#include "chip/program.h"
#include "compile/compile.h"

/* What a scheduled instruction becomes. */
typedef enum {
  TPU__K_NONE = 0, /* no kernel: aliases (tuple, gte, bitcast...), constants, parameters */
  TPU__K_STREAM,   /* a tile loop streaming operands through the vector units */
  TPU__K_MATMUL,   /* a tile loop on the MXUs (dot, convolution, fusion around one) */
  TPU__K_COPY,     /* one HBM-to-HBM DMA */
  TPU__K_WHILE,    /* control: loop over condition and body */
  TPU__K_COND,     /* control: conditional */
  TPU__K_CALL,     /* control: the callee's kernels inline */
  TPU__K_ICI,      /* a collective with other chips: the links for the link model's time */
  TPU__K_LINALG,   /* cholesky / triangular-solve: blocked panels, vector unit and MXU (linalg.c) */
  TPU__K_MOSAIC    /* a Pallas kernel (tpu_custom_call): its grid as Pallas pipelines it (src/mosaic/backend.c) */
} tpu__kkind;

/* Per instruction of a scheduled computation (indexed by tpu__be_index). */
typedef struct tpu__kinfo {
  tpu__kkind kind;
  int op;                  /* program op index, -1 */
  int own;                 /* has its own HBM buffers (one per result leaf) */
  int hbm0;                /* first of its HBM buffers (leaves are consecutive), -1 */
  int nleaves;
  int64_t pos, last_use;   /* liveness positions in the flattened schedule */
  /* tile */
  int64_t m, k, n, b;      /* matmul problem (k as the MXU runs it: see k_flops) */
  double mm_flops;         /* the matmul's true flops where b*m*k_flops*n overstates them (a
                            * depthwise convolution's lane blocks); 0: that product */
  int64_t k_flops;         /* the contraction's true length; k is longer for a convolution
                            * whose input features fill part of the MXU rows at each tap */
  int64_t steps;           /* a grouped convolution's steps: groups x output positions x
                            * batch blocks of the sublanes (tile_conv.c), else 0 */
  double min_cycles;       /* an input-dilated convolution's least time, cycles (tile_conv.c);
                            * 0: none */
  double kernel_min_cycles; /* the least cycles the whole kernel lasts, start to end (a packed
                            * convolution, tile_conv.c); 0: none */
  tpu_dtype mm_dtype;
  int mm_i8_wide;          /* the matmul's 8-bit weight is tiled in 32 rows (tile.c i8_wide) */
  int passes;
  const struct tpu_instr *mm; /* the dot/convolution (itself or inside the fusion) */
  int mm_lhs, mm_rhs;      /* operand indices of `in` feeding the matmul's lhs / rhs, -1 */
  int64_t vpu, eup, xlu;   /* vreg-operations of the whole op per unit */
  int64_t space_vregs;     /* vector registers of its largest array */
  int64_t vcopy_windows;   /* a compiled program's windowed copy within VMEM: its windows
                            * (tile.c windowed_vmem_copy), else 0 */
  int64_t vcopy_ops;       /* cycles of each of those windows (0: 100) */
  const char *what;        /* op kind label for vpu/eup/xlu instructions */
  /* layout */
  double bytes, padded_bytes;       /* operands + results, unpadded / tiled */
  int64_t in_bytes, out_bytes;      /* padded bytes the kernel reads / writes */
  /* schedule */
  int64_t tiles;           /* tile-loop iterations */
  int64_t bm, bn, bk, bb, mb, nb, kb; /* matmul blocks */
  int64_t es;              /* matmul: pieces each output block's epilogue streams in (1: one;
                            * more only where no blocking fits otherwise: schedule.c) */
  int n_outer;             /* matmul block order: 0 = m outer, n inner (the A row block stays
                            * while B blocks stream past it); 1 = n outer (weight-stationary) */
  int64_t qa, qb;          /* matmul: iterations between A / B block loads (1: every one) */
  int mm_one_out;          /* matmul: one output buffer (schedule.c too_large_for_chip) */
  int64_t mm_slot[4];      /* matmul: slot bytes of its A, B, output and epilogue blocks */
  int mm_planned;          /* matmul: planned with every operand in HBM (the trial plan) */
  int64_t trips;           /* while: static trip count, -1 unknown */
  int64_t ici_cycles;      /* ici: the collective's time on the links */
  double ici_bytes;        /* ici: bytes this chip sends */
  unsigned ici_lanes;      /* ici: the kinds of link it loads (tpu_coll_cost lanes) */
  int ici_insn;            /* ici: the program index of its `ici` instruction once lowered */
  int vmem0, nvmem;        /* its VMEM buffers (consecutive) */
  int64_t ws;              /* bytes of VMEM its tile buffers take (its working set) */
  int64_t epi_bytes;       /* matmul: padded bytes of the epilogue operands (not lhs/rhs) */
  /* memory-space assignment (vmem_assign.c) */
  int vres;                /* its value stays in VMEM between kernels: no HBM buffer, no DMA */
  int64_t vres_off;        /* its VMEM offset when vres */
  int xpf;                 /* an entry parameter the previous step prefetched on chip: 1 into
                            * VMEM (at vres_off), 2 into CMEM; kernels read it there, its HBM
                            * buffer stays */
  uint64_t evict_leaves;   /* a multi-output vector kernel's result leaves (bit per leaf) that it
                            * writes into VMEM for the program's own copy-starts, as evict
                            * for the kernel's whole result (vmem_assign.c mark_evictions) */
  int evict;               /* a compiled program's matmul kernel that writes its result into
                            * VMEM (S(1)) for the program's own copy-start to take it to HBM
                            * (vmem_assign.c mark_evictions): it writes on chip, the copy runs
                            * beside later kernels, untimed */
  int spf;                 /* an entry parameter copied into VMEM (at vres_off) within the step,
                            * in the HBM port's gaps while the kernels before its first reader
                            * run: kernels read it there, its HBM buffer stays */
  int spf_reader;          /* spf: global index of its first reader */
  int spf_buf;             /* spf: its VMEM buffer (the copy's destination) */
  int spf_beside;          /* spf: its first reader reads HBM while the copy runs beside it;
                            * only the readers after it read VMEM (they wait for the copy) */
  int spf_last;            /* spf_beside: program index of the copy's last piece once lowered,
                            * else -1 */
  const struct mplan *mosaic; /* TPU__K_MOSAIC: the kernel's counted grid (program arena) */
} tpu__kinfo;

typedef struct tpu__be {
  const tpu_module *m;
  const tpu_compile_opts *o;
  const tpu_chip *chip;
  tpu_program *p;
  tpu_diag *d;
  int ninstrs;             /* over all computations */
  int *comp_base;          /* per module computation: first global index */
  const tpu_comp **sorted; /* computations by address, for lookups */
  int *sorted_idx;
  tpu__kinfo *k;           /* per global instruction */
  const tpu_instr **caller; /* per computation: the while/call/conditional that runs it */
  unsigned char *scheduled; /* per computation: runs as kernels (not a fusion body etc.) */
  int64_t npos;
  int dry;                 /* schedule's planners: only size the tile buffers, add none */
  struct tpu_mm_memo *mm_memo; /* schedule.c: matmul plans searched so far (tpu__mm_memo_free) */
  int mm_memo_shared;           /* it is the caller's (tpu_compile_opts.mm_memo): kept */
} tpu__be;

/* Profiling (pipeline.c): with TPUSIM_PASS_TIMES=1, tpu__pass_clock is the host time in ms
 * (else -1) and tpu__pass_report prints a pass's time since t0 on stderr. */
double tpu__pass_clock(void);
void tpu__pass_report(const char *name, double t0);

/* Frees the schedule pass's memo of matmul plans unless it is the caller's (schedule.c). */
void tpu__mm_memo_free(tpu__be *be);

int tpu__be_comp_index(const tpu__be *be, const tpu_comp *c);
int tpu__be_index(const tpu__be *be, const tpu_instr *in);
tpu__kinfo *tpu__be_info(const tpu__be *be, const tpu_instr *in);
/* Where kernel `reader` reads value v (a kernel's result, one result of a multi-output
 * kernel, or an entry parameter): 0 from HBM, 1 a value kept in VMEM, 2 an entry parameter
 * on chip (xpf, spf; an in-step copy's first reader may read HBM beside it: spf_beside). */
int tpu__be_reads_vmem(const tpu__be *be, const tpu_instr *v, const tpu_instr *reader);
/* Whether v is (through views) the program's own in-step copy into VMEM (a compiled
 * program's copy-done into S(1) or S(3)). */
int tpu__be_copied_in(const tpu_instr *v);

/* Leaves of a shape (arrays; tokens count as none), and the first leaf of element e. */
int tpu__leaves(const tpu_shape *s);
int tpu__leaf_offset(const tpu_shape *s, int e);
/* The leaf-th array leaf of s (NULL if out of range). */
const tpu_shape *tpu__leaf(const tpu_shape *s, int leaf);

/* Per-element vector-unit (*vpu) and EUP (*eup) operations of elementwise op `op` on type t,
 * and of the same op on complex elements (op_cost.c; docs/timing.md's table). */
void tpu__elem_cost(tpu_opcode op, tpu_dtype t, int64_t *vpu, int64_t *eup);
void tpu__complex_elem_cost(tpu_opcode op, int64_t *vpu, int64_t *eup);
/* Whether op's vector operations run on 32-bit registers whatever its element type. */
int tpu__elem_widened(tpu_opcode op);
int tpu__is_elementwise(tpu_opcode op);
/* Elementwise operations of a scalar computation (at least 1). */
int64_t tpu__comp_ops(const tpu_comp *c);

/* A sort kernel's work (sort_cost.c): vector ALU operations, permutes within registers, and
 * the least cycles its body lasts after the kernel start (0 without the chip's fields). */
typedef struct {
  int64_t valu, perms;
  double body_cycles;
} tpu__sort_work;
void tpu__sort_cost(const tpu__be *be, const tpu_instr *in, tpu__sort_work *w);

/* Tiled layout (layout.c): bytes of an array with its minor two dims padded to the
 * vector-register tile ((8,128) for 32-bit, (16,128) 16-bit, (32,128) 8-bit), and the
 * vector registers it fills. Tuples sum their leaves. */
int64_t tpu__padded_bytes(const tpu__be *be, const tpu_shape *s);
/* The shape value v's buffer holds (layout.c: a reduce-scatter's padding is not held). */
const tpu_shape *tpu__held_shape(const tpu_instr *v, const tpu_shape *s);
/* The padded bytes of value v's shape s (s: v's, or a leaf of it) in the layout the compiler gives it. */
int64_t tpu__value_bytes(const tpu__be *be, const tpu_instr *v, const tpu_shape *s);
int64_t tpu__plain_bytes(const tpu_shape *s);
int64_t tpu__vregs(const tpu__be *be, const tpu_shape *s);
/* The bytes value v's shape s takes as laid out and the dimension in its lanes (layout.c;
 * v NULL: s's own layout). */
int64_t tpu__value_tiling(const tpu__be *be, const tpu_instr *v, const tpu_shape *s, int *lane);
/* The registers of kernel in's result before its operands along a concatenated dimension
 * other than the lanes (concat_shift.c: its concatenates, or a pad-and-combine fusion's pads). */
double tpu__kernel_shift_regs(const tpu__be *be, const tpu_instr *in);
/* The least l with 2^l >= n (0 for n <= 1): the steps of a halving tree (tile.c). */
int64_t tpu__ilog2_ceil(int64_t n);
/* Whether scatter sc runs staged: its whole operand in VMEM, read and written back once,
 * rather than row by row in HBM (scatter_form.c, the XLA TPU compiler's two forms). */
int tpu__scatter_staged(const tpu__be *be, const tpu_instr *sc);
/* Whether staged scatter sc fills its operand j in VMEM itself (a broadcast scalar: the
 * compiler fuses it into the kernel), reading nothing of it from HBM. */
int tpu__scatter_fills(const tpu__be *be, const tpu_instr *sc, int j);
/* Whether copy `in` of an entry parameter goes through VMEM as the DMA engines' transfers,
 * in and back out, rather than as a vector kernel (scatter_form.c). */
int tpu__copy_via_vmem(const tpu__be *be, const tpu_instr *in);
/* Whether `in` (a broadcast scalar, a reshape of indices) runs inside the scatter kernel that
 * alone reads it, no kernel of its own (scatter_form.c). */
int tpu__scatter_fused_operand(const tpu__be *be, const tpu_instr *in);
/* Whether operand-less kernel `in` (an iota, a fusion of iotas and constants) keeps its result
 * in VMEM in whole registers and so pays no kernel start (vmem_source.c). */
int tpu__vmem_source_kernel(const tpu__be *be, const tpu_instr *in);
/* tpusim's own operandless kernel with a 64-bit integer result: 0 not one; -1 its 32-bit words
 * fill whole registers in VMEM (no kernel start); else the compiler's kernel count for it
 * (chip wide_int_source_kernels), each paying the start (vmem_source.c). */
int tpu__wide_int_source_kernels(const tpu__be *be, const tpu_instr *in);
/* Padded bytes a kernel reads of operand j / writes of result leaf `leaf` (layout.c). */
int64_t tpu__read_bytes(const tpu__be *be, const tpu_instr *in, int j);
/* scan_window.c: the factors on a short scan kernel's HBM reads and writes (1 otherwise) */
void tpu__scan_window_factors(const tpu__be *be, const tpu_instr *in, double *fin, double *fout);
/* scan_window.c: whether v is a major scan kernel's result or operand (laid out row-major) */
int tpu__scan_row_major(const tpu_instr *v);
/* scan_window.c: whether `in` relays a scan kernel's result out (a copy or transpose of it) */
int tpu__scan_result_copy(const tpu_instr *in);
int64_t tpu__write_bytes(const tpu__be *be, const tpu_instr *in, int leaf);
/* The bytes, unpadded, a kernel writes of result leaf `leaf` (layout.c). */
int64_t tpu__plain_write_bytes(const tpu__be *be, const tpu_instr *in, int leaf);
/* Whether pad `in` is timed as a window over its whole result, as an unfused elementwise
 * kernel over it (layout.c). */
int tpu__whole_window_pad(const tpu__be *be, const tpu_instr *in);
/* The per-element stream costs of vector kernel `in`, in bytes at the streaming rate
 * (stream_cost.c). */
double tpu__stream_costs(const tpu__be *be, const tpu_instr *in, const tpu__kinfo *k);

/* The HBM buffer holding leaf `leaf` of `in`'s value, following aliases; -1 if none. */
int tpu__be_buffer_of(const tpu__be *be, const tpu_instr *in, int leaf);

/* The VMEM working set of kernel `in` (its tile buffers, double-buffered), as the
 * schedule pass will plan it (schedule.c). */
int64_t tpu__kernel_vmem(tpu__be *be, const tpu_instr *in, tpu__kinfo *k);

/* Memory-space assignment (vmem_assign.c, run by buffer-assign after liveness): marks the
 * intermediate values that stay in VMEM between kernels (tpu__kinfo.vres) and adds a
 * .vmem buffer (op -1) for each. */
tpu_status tpu__assign_vmem(tpu__be *be);

/* cholesky and triangular-solve kernels (linalg.c): useful and padded flops (tile), VMEM
 * buffers and groups (schedule; be->dry: only k->ws), instructions (lower). */
void tpu__linalg_flops(const tpu__be *be, const tpu_instr *in, double *flops, double *padded);
tpu_status tpu__linalg_plan(tpu__be *be, const tpu_instr *in, tpu__kinfo *k);
tpu_status tpu__linalg_lower(tpu__be *be, const tpu_instr *in, const tpu__kinfo *k);

/* Pallas kernels (src/mosaic/backend.c): counted and costed (tile), VMEM slots (schedule;
 * be->dry: only k->ws), instructions (lower). */
tpu_status tpu__mosaic_tile(tpu__be *be, const tpu_instr *in, tpu__kinfo *k);
tpu_status tpu__mosaic_plan(tpu__be *be, const tpu_instr *in, tpu__kinfo *k);
tpu_status tpu__mosaic_lower(tpu__be *be, const tpu_instr *in, const tpu__kinfo *k);

/* The dots and convolutions a fusion runs besides its planned one (tile.c): a kernel
 * written as one fusion holding several (a Pallas attention kernel's score and value dots)
 * runs each on the MXUs. Grouped by contraction length k, width n, passes and type: rows
 * sums batch x rows over the group's products, prods their batch counts; flops and
 * padded_flops as a lone dot of each counts them. */
typedef struct tpu__xdot {
  int64_t rows, prods, k, n;
  int passes;
  tpu_dtype dtype;
  double flops, padded_flops;
} tpu__xdot;
#define TPU__XDOT_MAX 8
/* Fills out[0..return) with the groups of fusion `in`'s MXU ops other than `main` (also
 * inside the fusions it nests); past TPU__XDOT_MAX groups a dot joins the last group as
 * rows of equal MXU work. */
int tpu__fusion_xdots(const tpu__be *be, const tpu_instr *in, const tpu_instr *main, tpu__xdot *out);

/* The passes, in order. */
/* The MXU problem of a convolution on the MXUs: k's m, k, n, b, k_flops, mm_flops (tile_conv.c). */
void tpu__conv_matmul_dims(const tpu__be *be, const tpu_instr *mm, tpu__kinfo *k);

tpu_status tpu__pass_tile(tpu__be *be);
tpu_status tpu__pass_layout(tpu__be *be);
tpu_status tpu__pass_buffer_assign(tpu__be *be);
tpu_status tpu__pass_schedule(tpu__be *be);
tpu_status tpu__pass_lower(tpu__be *be);

/* VMEM the kernels may use for double-buffered tiles: 3/4 of the chip's (docs/isa.md). */
int64_t tpu__vmem_budget(const tpu_chip *chip);
/* Is convolution mm a grouped one in the XLA TPU compiler's 5-D form, its groups a window
 * dimension (tile_conv.c)? */
int tpu__conv_group_window(const tpu_instr *mm);

/* Which copies are kernels (copy_kind.c, for the tile pass): a compiled program's copy with
 * an operand or result in VMEM; a layout copy of tpusim's own compilation that only gathers
 * or a pool's reduce-windows read (a vector kernel); a transpose or lane-moving copy between
 * arrays off the core (at least two kernel starts); an entry parameter's copy after another
 * such copy (its parameter prefetched into VMEM); a compiled copy within VMEM that moves the
 * lanes or no bytes, returning its windows of at most 1 MiB (else 0); and the result tiles a
 * sublane relayout pays relayout_tile_cycles for (0: not one). */
int tpu__vmem_copy(const tpu_instr *in);
int tpu__relayout_kernel(const tpu__be *be, const tpu_instr *in);
/* A patch embedding's image relayout's least time (copy_kind.c), 0 for any other op. */
double tpu__patch_relayout_cycles(const tpu_chip *chip, const tpu_instr *in);
/* XLA's copy of an output leaf another leaf returns too, a DMA out of VMEM on v5e and v6e
 * (copy_kind.c). */
int tpu__dup_output_copy(const tpu__be *be, const tpu_instr *in);
/* A compiled program's copy kernel from VMEM into HBM: no charge for its read (copy_kind.c). */
int tpu__copy_out_of_vmem(const tpu__be *be, const tpu_instr *in);
int tpu__relayout_off_core(const tpu__be *be, const tpu_instr *in);
int tpu__prefetched_param_copy(const tpu__be *be, const tpu_instr *in);
int64_t tpu__windowed_vmem_copy(const tpu__be *be, const tpu_instr *in);
int64_t tpu__relayout_tiles(const tpu_chip *chip, const tpu_instr *in);
/* The least cycles per result tile of that relayout after its start (the chip's
 * relayout_tile_cycles, or its CMEM result's part per tile and 32-bit sublane; copy_kind.c). */
double tpu__relayout_tile_cost(const tpu_chip *chip, const tpu_instr *in);
/* The result tiles of a pad the compiler windows, which pay pad_window_tile_cycles each (0: not
 * one; copy_kind.c). */
int64_t tpu__pad_window_tiles(const tpu_chip *chip, const tpu_instr *in);
/* A compiled program's transposing copy with a side in tiles of fewer than 8 rows, not within
 * VMEM: that side's tiles, which it pays small_tile_transpose_cycles for (0: not one). */
int64_t tpu__small_tile_transpose_tiles(const tpu_chip *chip, const tpu_instr *in);
/* Own compilation's copy into or out of a select-and-scatter's layout (sas_copy): the tiles of its
 * side in tiles of fewer than 8 rows where it moves the lanes' dimension, else 0; -1 for any other
 * op. Whether it is one into that layout (sas_copy=in). (copy_kind.c) */
int64_t tpu__sas_copy_small_tiles(const tpu_chip *chip, const tpu_instr *in);
int tpu__sas_copy_in(const tpu_instr *in);
/* A compiled program's loop fusion relaying out small tiles between HBM arrays (a fused copy that
 * keeps the lanes' dimension, its result in tiles of fewer than 8 rows): the copy's result tiles,
 * which it pays hbm_relayout_tile_cycles for beyond its transfers (0: not one; copy_kind.c). */
int64_t tpu__hbm_relayout_tiles(const tpu_chip *chip, const tpu_instr *in);
/* A copy or transpose that moves the lanes' dimension between HBM arrays (relayout_off_core,
 * neither side on the chip): the rows of 128 lanes of its two sides, which it pays
 * hbm_relayout_row_cycles for, the TensorCores sharing them (0: not one; copy_kind.c). */
int64_t tpu__relayout_rows(const tpu__be *be, const tpu_instr *in);
/* A lane-moving copy or transpose from VMEM into HBM on a chip that keeps values in VMEM: its
 * result's tiles, which it pays vmem_transpose_tile_cycles for (0: not one), and the op's
 * timing set so (copy_kind.c; for the schedule pass, after vmem_assign.c). */
int64_t tpu__vmem_transpose_tiles(const tpu__be *be, const tpu_instr *in, const tpu__kinfo *k);
void tpu__vmem_transpose_op(tpu__be *be, const tpu_instr *in, const tpu__kinfo *k);
/* A compiled program's copy from HBM into VMEM that moves the lanes' dimension: its HBM
 * operand's tiles, which it pays copy_in_transpose_tile_cycles for (0: not one). */
int64_t tpu__copy_in_transpose_tiles(const tpu_chip *chip, const tpu_instr *in);
int64_t tpu__group_merge_whole_tiles(const tpu_chip *chip, const tpu_instr *in);
/* A grouped convolution's lane-moving copy into or out of its split layout (copy_kind.c):
 * its split side's tiles and its W-in-the-lanes side's (0: not one). */
int tpu__group_transpose_tiles(const tpu__be *be, const tpu_instr *in, int64_t *split, int64_t *wide);
/* The elements of a loop kernel that does not reduce, by which the compiler sizes its blocks
 * on a chip with stream_block_elems (v4); 0 for other kernels or chips (stream_cost.c). */
int64_t tpu__loop_block_elems(const tpu__be *be, const tpu_instr *in);
/* Target bytes one streaming tile-loop iteration moves (docs/isa.md). */
#define TPU__TILE_TARGET ((int64_t)1 << 20)

#endif
