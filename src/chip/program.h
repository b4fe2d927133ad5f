/* The tpusim ISA and a compiled TPU program: tile-level macro-instructions, buffers, ops.
 *
 * A program is a flat list of instructions with structured control flow (loop/end,
 * cond/case/endcond). Instructions work on whole tiles or tile loops, never on elements,
 * so a program's size grows with the HLO, not with the tensor sizes. docs/isa.md is the
 * user-facing description; tpu_program_print (disassembler) and tpu_program_parse
 * (assembler, src/chip/isa.c) round-trip: print(parse(print(p))) == print(p). */
#ifndef TPU_CHIP_PROGRAM_H
#define TPU_CHIP_PROGRAM_H

#include <stdint.h>
#include <stdio.h>

#include "base/alloc.h"
#include "base/dtype.h"
#include "base/status.h"

struct tpu_instr; /* ir/ir.h */
struct tpu_module;

/* X(ENUM, mnemonic, unit, meaning). unit: the tpu_unit that runs it (timeline.h), or -1
 * for control. ORDER ISA. */
#define TPU_ISA_LIST(X)                                                                     \
  X(KERNEL, "kernel", -1, "start of one HLO op's kernel: waits for all earlier work")      \
  X(SYNC, "sync", -1, "barrier: waits for every earlier instruction to finish")            \
  X(WAIT, "wait", -1, "later instructions wait for instruction `at` (its last run)")       \
  X(DMA_IN, "dma.in", 4, "copy `bytes` from HBM buffer `hbm` to VMEM `dst`")               \
  X(DMA_OUT, "dma.out", 5, "copy `bytes` from VMEM `src` to HBM buffer `hbm`")             \
  X(DMA_HBM, "dma.hbm", 5, "copy `bytes` HBM to HBM (reads and writes them)")              \
  X(MATMUL, "matmul", 0, "MXU: b products of m x k by k x n over the tile loop")           \
  X(VPU, "vpu", 1, "vector unit: `vregs` vector registers, `ops` vreg-ops each")           \
  X(EUP, "eup", 2, "transcendental unit: `vregs` registers, `ops` pushes each")            \
  X(XLU, "xlu", 3, "transpose/cross-lane unit: `vregs` registers, `ops` passes each")      \
  X(ICI, "ici", 6, "inter-chip links: a collective of `cycles` sending `bytes`; only a wait at it blocks") \
  X(LOOP, "loop", -1, "repeat the body up to the matching end `trips` times")              \
  X(END, "end", -1, "end of a loop body")                                                  \
  X(COND, "cond", -1, "conditional with `trips` branches (case ... endcond)")             \
  X(CASE, "case", -1, "start of branch number `trips` of the enclosing cond")              \
  X(ENDCOND, "endcond", -1, "end of a conditional")

typedef enum {
#define X(e, mn, unit, meaning) TPU_ISA_##e,
  TPU_ISA_LIST(X)
#undef X
  TPU_ISA_COUNT
} tpu_isa_op;

const char *tpu_isa_name(tpu_isa_op op);
/* The tpu_unit an opcode runs on, or -1 for control instructions. */
int tpu_isa_unit(tpu_isa_op op);

/* A reference to a VMEM buffer slot. The slot is (i/div + off) mod nslots, where i is the
 * iteration number of the innermost enclosing loop (0 outside loops); div == 0 drops the
 * i term (a fixed slot). buf < 0: no reference. */
typedef struct tpu_vref {
  int buf;
  int div, off;
} tpu_vref;

#define TPU_INSN_MAX_SRC 3

/* Kinds of link an ici instruction can load (tpu_insn lane bits): +x -x +y -y +z -z, DCN. */
#define TPU_INSN_LANES 7

typedef struct tpu_insn {
  tpu_isa_op opc;
  int op;                          /* index into tpu_program.ops (the HLO op it came from); -1 */
  tpu_vref src[TPU_INSN_MAX_SRC];  /* VMEM slots read (unused entries have buf < 0) */
  tpu_vref dst;                    /* VMEM slot written */
  int hbm;                         /* dma.*: HBM buffer (index into tpu_program.hbm); -1 */
  int hbm2;                        /* dma.hbm: destination HBM buffer; -1 */
  int64_t bytes;                   /* dma.*: bytes per execution */
  int64_t m, k, n, b;              /* matmul: b products of m x k by k x n per execution */
  int mxus;                        /* matmul: MXUs the product is split across */
  int passes;                      /* matmul: bf16 passes (f32 precision: 1, 3 or 6) */
  int64_t steps;                   /* matmul: steps of a grouped convolution it runs (one
                                    * output position's batch for one group each), each at
                                    * least chip conv_group_step_cycles; 0: none */
  int64_t min_cycles;              /* matmul: the least cycles it takes (an input-dilated
                                    * convolution's emitter, tile_conv.c); 0: none */
  tpu_dtype dtype;                 /* matmul: operand type (bf16, f32, s8 ...) */
  int i8_wide;                     /* matmul: 1 = an 8-bit weight that arrives in 32-row tiles
                                    * (T(32,128)(4,1)), which v4 re-tiles for the MXU
                                    * (chip int8_weight_load_cycles); 0 otherwise */
  int64_t vregs;                   /* vpu/eup/xlu: vector registers per execution */
  int64_t ops;                     /* vpu/eup/xlu: operations per register */
  int64_t trips;                   /* loop: iterations (-1: unknown); cond: branches; case: index */
  int64_t cycles;                  /* ici: cycles the collective takes (the link model's time) */
  int lane;                        /* ici: the kinds of link it loads, bit axis * 2 + dir
                                    * (+x -x +y -y +z -z), bit 6 the data-center network
                                    * between slices; collectives on disjoint kinds run side
                                    * by side; 0: all of them */
  int pmod, prem;                  /* predicate: runs only when i % pmod == prem (pmod 0: always) */
  int pflat;                       /* the predicate's i: 0 the innermost enclosing loop's
                                    * iteration; 1 the iteration counted over every enclosing
                                    * loop (outer iteration x inner trips + inner iteration, the
                                    * order the body ran in), conditionals looked through */
  int at;                          /* wait: instruction index */
  int prefetch;                    /* dma.in: 1 = may start before the preceding `kernel`
                                    * barrier, while the previous kernel runs (docs/isa.md) */
  int onchip;                      /* dma.in/dma.out: 1 = the data stays in VMEM (a resident
                                    * operand, a result kept there): no HBM bytes, no `hbm`;
                                    * it costs only its op's per-element stream costs;
                                    * dma.hbm: 1 = its source is in VMEM (a value a kernel
                                    * kept there): one HBM write, no read latency */
  const char *what;                /* vpu/eup/xlu: op kind; loop/cond: HLO name as the input wrote it (program-owned) */
  tpu_loc loc;                     /* loop/cond: the HLO instruction's place in the input (line 0: none) */
} tpu_insn;

/* One HLO op as the program executes it (a kernel). Figures are per execution. */
typedef struct tpu_prog_op {
  const char *name;             /* HLO instruction name (program-owned) */
  const char *kind;             /* "dot", "convolution", "fusion:kLoop", "add", ... */
  const struct tpu_instr *instr; /* the HLO instruction when compiled from a module; NULL when assembled */
  double flops;                 /* useful FLOPs: 2*M*N*K for matmuls, 1 per element op */
  double padded_flops;          /* FLOPs including padding to MXU tiles / vector registers */
  double bytes;                 /* useful HBM bytes (unpadded operands + results) */
  double padded_bytes;          /* HBM bytes in the tiled layout */
  int64_t m, k, n, b;           /* matmul/conv problem (implicit GEMM), 0 otherwise */
  int64_t tiles;                /* tile-loop iterations of its kernel */
  int scalar;                   /* scalars in and out: the scalar unit's work, no kernel start cost */
  int starts;                   /* > 1: the compiler runs the op as that many kernels, each paying the
                                 * kernel start (vmem_source.c tpu__wide_int_source_kernels) */
  int dma;                      /* a copy the DMA engines run, no kernel: no kernel start cost and
                                 * none of a vector kernel's stream costs (scatter_form.c
                                 * tpu__copy_via_vmem) */
  int relayout;                 /* a copy or transpose that moves the dimension in the lanes: read
                                 * from HBM and written to HBM it pays a second kernel start
                                 * (docs/timing.md, "Kernel start") */
  double xbytes;                /* bytes-equivalent the kernel's transfers pay on the HBM port
                                 * beyond padded_bytes (the chip's per-element stream costs) */
  double out_scale;             /* > 1: a matmul kernel's result transfers pay this multiple of
                                 * their bytes (the per-element pass of a 16-bit result) */
  int reduce_epilogue;          /* a matmul kernel whose fused epilogue reduces its product (a
                                 * row max or sum taken from the result tiles; layout.c): on a
                                 * chip with epilogue_reduce_serial it lasts its transfers plus
                                 * its vector work */
  int window;                   /* a pooling window kernel: its reads of values in VMEM pay no
                                 * vmem_read_cost (its compiler reads them in place) */
  int scan;                     /* a window kernel that is a scan along a major dimension (the
                                 * compiler's depthwise window emitter): no window_hbm_factor,
                                 * and no window start where it moves nothing to or from HBM
                                 * (timing.c resident_pass_cycles) */
  int vmem_write;               /* a vector kernel writing its results into VMEM (S(1)) for the
                                 * compiled program's own copy-starts to take to HBM: its
                                 * on-chip writes pay vmem_read_cost of an HBM write, as its
                                 * reads of VMEM do (vmem_assign.c mark_evictions) */
  int blocks;                   /* > 1: a loop kernel the compiler runs in that many blocks (chip
                                 * stream_block_elems, schedule.c plan_stream): it lasts at least
                                 * its start, the HBM latency, its transfers at the streaming rate,
                                 * one block's vector work and stream_block_fill_cycles (timing.c) */
  int copy_out;                 /* a copy kernel out of VMEM into HBM: its read of its operand in
                                 * VMEM pays no vmem_read_cost (copy_kind.c tpu__copy_out_of_vmem) */
  double out_bytes;             /* its result's bytes in their layout (set from `instr` by
                                 * tpu_program_add_op; 0: unknown): what it writes, not reads */
  double min_cycles;            /* the least cycles its kernel lasts, start to end, whatever its
                                 * instructions take (a packed convolution's emitter: the
                                 * compiler's cost is all per output position; 0: none) */
  double min_body_cycles;       /* the least cycles its kernel lasts after its start (a sublane
                                 * relayout's tiles; 0: none) */
} tpu_prog_op;

/* A logical HBM buffer: one array value (an HLO instruction's result leaf). */
typedef struct tpu_hbm_buf {
  const char *name;  /* "dot.3" or "while.5#1" for leaf 1 of a tuple (program-owned) */
  int64_t offset;    /* bytes from the start of HBM */
  int64_t bytes;     /* padded (tiled layout) size */
} tpu_hbm_buf;

/* A VMEM buffer of one kernel: `nslots` slots of `slot_bytes` (2 = double buffered). */
typedef struct tpu_vmem_buf {
  int op;            /* owning op, -1 */
  int64_t offset;    /* bytes from the start of VMEM */
  int64_t slot_bytes;
  int nslots;
  int store_frees;   /* 1: a one-buffer matmul output each step writes whole, free again once
                      * its store's bytes have moved (schedule.c too_large_for_chip, chip/timing.c) */
} tpu_vmem_buf;

typedef struct tpu_program {
  tpu_arena arena;              /* names and strings */
  char chip[32];                /* target chip name */
  tpu_insn *insns;
  int ninsns, capinsns;
  tpu_prog_op *ops;
  int nops, capops;
  tpu_hbm_buf *hbm;
  int nhbm, caphbm;
  tpu_vmem_buf *vmem;
  int nvmem, capvmem;
  int64_t hbm_footprint;        /* bytes of HBM the buffer assignment uses (max offset+size) */
  int64_t hbm_peak;             /* most bytes live at once */
  int64_t hbm_arg, hbm_out, hbm_alias, hbm_temp; /* as XLA's memory_analysis(): argument, output,
                                 * output-aliasing-argument (donated) and temporary bytes */
  int64_t host_temp;            /* bytes of host memory (S(5)) the program's buffers take */
  int64_t vmem_peak;            /* most VMEM one kernel uses */
  int64_t xprefetch_bytes;      /* > 0: hbm[xprefetch_hbm], an entry parameter, was prefetched
                                 * on chip by the previous step (into CMEM when xprefetch_cmem) */
  int xprefetch_hbm, xprefetch_cmem;
  const struct tpu_module *module; /* borrowed; NULL when assembled */
} tpu_program;

/* Sets the trip count of every loop compiled from the while loop at `loc` (all the copies
 * inlining made of it); returns how many it set. */
int tpu_program_set_loop_trips_at(tpu_program *p, tpu_loc loc, int64_t trips);

/* Allocation: NULL on out-of-memory. */
tpu_program *tpu_program_new(const char *chip);
void tpu_program_free(tpu_program *p);

/* Appending; each returns the new index or -1 on out-of-memory. Strings are copied. */
int tpu_program_add_insn(tpu_program *p, const tpu_insn *in);
int tpu_program_add_op(tpu_program *p, const tpu_prog_op *op);
int tpu_program_add_hbm(tpu_program *p, const char *name, int64_t offset, int64_t bytes);
int tpu_program_add_vmem(tpu_program *p, int op, int64_t offset, int64_t slot_bytes, int nslots);
/* Copies a string into the program's arena (NULL stays NULL; NULL on out-of-memory). */
const char *tpu_program_str(tpu_program *p, const char *s);
/* An instruction with every reference unset (buf/hbm/op = -1) of opcode `opc`. */
tpu_insn tpu_insn_make(tpu_isa_op opc, int op);
tpu_vref tpu_vref_make(int buf, int div, int off);

/* Sets the trip count of every loop whose `what` names HLO instruction `name` (a while
 * loop whose trip count the compiler could not find); returns how many it set. */
int tpu_program_set_loop_trips(tpu_program *p, const char *name, int64_t trips);

/* Checks structure: loops/conds nested and closed, references in range, sizes sane. */
tpu_status tpu_program_check(const tpu_program *p, tpu_diag *d);

/* Disassembler: the canonical text form (docs/isa.md). Returns a malloc'ed string
 * (tpu_free) or NULL on out-of-memory. */
char *tpu_program_text(const tpu_program *p);
/* Writes tpu_program_text to f. Returns TPU_ERR_NOMEM / TPU_ERR_IO on failure. */
tpu_status tpu_program_print(const tpu_program *p, FILE *f, tpu_diag *d);

/* Assembler: parses the text form; errors read FILE:LINE:COL. *out owns the program. */
tpu_status tpu_program_parse(const char *file, const char *src, size_t len, tpu_program **out,
                             tpu_diag *d);

#endif
