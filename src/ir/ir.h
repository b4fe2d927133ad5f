/* The IR: modules of computations of instructions, shapes, and typed attributes. */
#ifndef TPU_IR_IR_H
#define TPU_IR_IR_H

#include <stdint.h>

#include "base/alloc.h"
#include "base/dtype.h"
#include "base/status.h"
#include "base/tensor.h"

typedef enum {
#define X(e, name, arity, cls, ty) TPU_OP_##e,
#include "ir/ops.def"
#undef X
  TPU_OP_COUNT
} tpu_opcode;

typedef enum {
  TPU_CLS_UNARY,
  TPU_CLS_BINARY,
  TPU_CLS_TERNARY,
  TPU_CLS_OTHER,
  TPU_CLS_COLLECTIVE,
  TPU_CLS_PARSE_ONLY
} tpu_op_class;

/* Element types an elementwise op accepts. */
typedef enum { TPU_TY_A, TPU_TY_F, TPU_TY_I, TPU_TY_N, TPU_TY_L, TPU_TY_R, TPU_TY_FC, TPU_TY_NC } tpu_op_types;

const char *tpu_op_name(tpu_opcode op);
int tpu_op_arity(tpu_opcode op); /* -1: variadic */
tpu_op_class tpu_op_class_of(tpu_opcode op);
tpu_op_types tpu_op_types_of(tpu_opcode op);
/* Looks up an HLO opcode name; returns 0 if unknown. Accepts "optimization-barrier" too. */
int tpu_op_parse(const char *s, size_t n, tpu_opcode *out);

/* ---- Shapes ---- */
typedef struct tpu_shape {
  tpu_dtype dtype; /* TPU_TUPLE for tuples, TPU_TOKEN for tokens */
  int rank;
  int64_t dims[TPU_MAX_RANK];
  int has_layout;                        /* a {…} layout was given */
  int8_t minor_to_major[TPU_MAX_RANK];   /* valid when has_layout */
  const char *layout_tail;               /* text after the minor_to_major list, e.g. ":T(8,128)"; NULL if none */
  int ntuple;
  struct tpu_shape *elems; /* tuple elements */
} tpu_shape;

int tpu_shape_equal(const tpu_shape *a, const tpu_shape *b);     /* dtype, dims, tuple structure; ignores layout */
int64_t tpu_shape_numel(const tpu_shape *s);
/* Prints "f32[4,8]{1,0}" / "(f32[], s32[2]{0})" into buf (truncates safely); returns length. */
int tpu_shape_print(const tpu_shape *s, char *buf, size_t n);
struct tpu_strbuf;
void tpu__shape_put(struct tpu_strbuf *b, const tpu_shape *s);

/* ---- Typed attributes ---- */
typedef struct { int64_t *v; int n; } tpu_i64s;
/* The position of x in the list v (a dimension list), or -1. */
int tpu_i64s_find(const tpu_i64s *v, int64_t x);
typedef struct { int64_t start, limit, stride; } tpu_slice_dim;
typedef struct { int64_t lo, hi, interior; } tpu_pad_dim;
typedef struct {
  int64_t size, stride, pad_lo, pad_hi, base_dilation, window_dilation;
  int reversal;
} tpu_window_dim;

typedef struct {
  tpu_i64s lhs_batch, rhs_batch, lhs_contract, rhs_contract;
} tpu_dot_dims;

typedef struct {
  tpu_i64s offset_dims, collapsed_slice_dims, start_index_map, operand_batching_dims,
      start_indices_batching_dims, slice_sizes;
  int64_t index_vector_dim;
} tpu_gather_dims;

typedef struct {
  tpu_i64s update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims,
      input_batching_dims, scatter_indices_batching_dims;
  int64_t index_vector_dim;
} tpu_scatter_dims;

/* Convolution dims from dim_labels "b01f_01io->b01f": which dimension of each operand is
 * batch/feature/spatial i. */
typedef struct {
  int nspatial;
  int64_t in_batch, in_feature, in_spatial[TPU_MAX_RANK];
  int64_t k_in, k_out, k_spatial[TPU_MAX_RANK];
  int64_t out_batch, out_feature, out_spatial[TPU_MAX_RANK];
} tpu_conv_dims;

typedef enum { TPU_CMP_EQ, TPU_CMP_NE, TPU_CMP_LT, TPU_CMP_LE, TPU_CMP_GT, TPU_CMP_GE } tpu_cmp_dir;
typedef enum { TPU_CMPT_DEFAULT, TPU_CMPT_FLOAT, TPU_CMPT_TOTALORDER, TPU_CMPT_SIGNED, TPU_CMPT_UNSIGNED } tpu_cmp_type;
typedef enum { TPU_PREC_CFG_DEFAULT, TPU_PREC_CFG_HIGH, TPU_PREC_CFG_HIGHEST } tpu_prec_cfg;
typedef enum { TPU_RNG_DEFAULT, TPU_RNG_THREEFRY, TPU_RNG_PHILOX } tpu_rng_alg;
typedef enum { TPU_FFT_FFT, TPU_FFT_IFFT, TPU_FFT_RFFT, TPU_FFT_IRFFT } tpu_fft_type;

/* An attribute as written: kept so print(parse(x)) reproduces it. `value` is the source
 * text of the value (computation references re-printed from the resolved pointers). */
typedef struct tpu_attr {
  const char *name;
  const char *value;
  tpu_loc loc;
} tpu_attr;

typedef struct tpu_comp tpu_comp;
typedef struct tpu_module tpu_module;

typedef struct tpu_instr {
  tpu_opcode op;
  const char *name;
  const char *src_name; /* the name in the input text when a pass cloned it under a new one; NULL: `name` */
  tpu_shape shape;
  struct tpu_instr **operands;
  int noperands;
  tpu_loc loc;
  int id;           /* position in its computation */
  int is_root;
  tpu_comp *parent;

  /* Attributes in source order (all of them, known and unknown). */
  tpu_attr *attrs;
  int nattrs;

  /* Typed views of the known attributes (zero/empty when absent). */
  tpu_i64s dimensions;            /* broadcast, transpose, reduce, reverse, concatenate, sort, map */
  int64_t index;                  /* get-tuple-element index; parameter number */
  int64_t iota_dimension;
  tpu_slice_dim *slice;           /* slice: one per dim */
  int nslice;
  tpu_pad_dim *padding;           /* pad: one per dim */
  int npadding;
  tpu_window_dim *window;         /* reduce-window, select-and-scatter, convolution */
  int nwindow;
  tpu_i64s dynamic_slice_sizes;
  tpu_dot_dims dot;
  /* gather, scatter, convolution: out of line (a parsed instruction is cleared and written
   * once per run: 630 bytes, not 1,240), shared by clones; never NULL (tpu_instr_init
   * points them at empty ones), written only by the attribute parser (hlo/attrs.c), which
   * gives the instruction its own copy first. */
  const tpu_gather_dims *gather;
  const tpu_scatter_dims *scatter;
  const tpu_conv_dims *conv;
  int has_conv_dims;
  int64_t feature_group_count, batch_group_count; /* default 1 */
  tpu_cmp_dir direction;
  tpu_cmp_type cmp_type;
  tpu_prec_cfg precision[2];      /* operand_precision for dot/convolution */
  tpu_rng_alg rng_algorithm;
  int is_stable, indices_are_sorted, unique_indices;
  int exponent_bits, mantissa_bits; /* reduce-precision */
  int64_t k;                      /* topk */
  tpu_fft_type fft_type;          /* fft */
  tpu_i64s fft_length;            /* fft: the transform's lengths, outermost first */
  int largest;                    /* topk: 1 = largest first (default) */
  tpu_comp *to_apply;             /* reduce, reduce-window, scatter, sort, map, call, all-reduce */
  tpu_comp *condition, *body;     /* while */
  tpu_comp *select, *scatter_comp; /* select-and-scatter */
  tpu_comp **branches;            /* conditional: true/false or branch_computations */
  int nbranches;
  int pred_branches;              /* conditional uses true_computation/false_computation */
  tpu_comp *calls;                /* fusion */
  tpu_tensor *literal;            /* constant value (owned by the module) */
} tpu_instr;

struct tpu_comp {
  const char *name;
  tpu_instr **instrs; /* in source order */
  int ninstrs;
  tpu_instr **params; /* by parameter number */
  int nparams;
  tpu_instr *root;
  int is_entry;
  int index;          /* position in module->comps */
  tpu_loc loc;
  tpu_module *module;
  tpu_instr **order;  /* post-order (operands before users) of the instructions the root reaches, plus unreached ones */
  int norder;
  tpu_instr **mem_order; /* the same instructions in the order the memory scheduler chose (compile/passes/mem_sched.c):
                          * the order buffers are assigned in; NULL: `order` */
  const char *execution_thread; /* the thread the compiler runs it on ("sparsecore": a SparseCore
                                 * of v5p/v6e, docs/timing.md); NULL: the TensorCore's */
};

struct tpu_module {
  tpu_arena arena;
  const char *name;
  const char *file;   /* input path for diagnostics */
  tpu_attr *attrs;    /* header attributes */
  int nattrs;
  tpu_comp **comps;   /* in source order */
  int ncomps;
  tpu_comp *entry;
  tpu_comp **comp_table; /* open-addressing hash of comps by name (size comp_mask + 1) */
  size_t comp_mask;
  tpu_tensor **literals; /* owned constants, freed with the module */
  int nliterals, capliterals;
  /* The reference interpreter's plans of the computations, kept from one run to the next
   * when keep_plans is set (by a holder that rewrites the module no more: api/run.c's
   * compiled programs); `plans` is taken by one run at a time (atomic exchange) and freed
   * with the module by plans_free (ref/interp.c). */
  int keep_plans;
  void *plans;
  void (*plans_free)(void *plans);
};

/* The instruction's name as the user's input text wrote it (for messages). */
static inline const char *tpu_instr_user_name(const tpu_instr *in) { return in->src_name ? in->src_name : in->name; }
/* XLA's TPU compiler leaves elementwise ops whose float operands differ in type, e.g.
 * `bf16 select(pred, bf16, f32)` (its float-type correction): such an op works in one float
 * type, to which every operand is converted first — the result's type, or for compare the
 * widest operand type. Returns 1 and that type when `in` is such an op with mixed float
 * operands; 0 otherwise (all operands of one type, or not an elementwise op). */
int tpu_instr_mixed_float(const tpu_instr *in, tpu_dtype *work);
/* The same compiler also lets a data-movement op (broadcast, reshape, transpose, slice,
 * dynamic-slice, reverse, pad) change the float type of what it moves, e.g. `bf16[32,32]
 * dynamic-slice(f32[32,128] ...)`: the elements are moved, then converted (rounded to nearest
 * even). 1 when `in` is such an op. */
int tpu_instr_moves_and_converts(const tpu_instr *in);
/* A transpose whose result's minor dimension is not its operand's: a copy into another
 * layout, not a renaming of the elements in place. */
int tpu_instr_moves_minor(const tpu_instr *in);
/* A float or all-integer dot that the XLA TPU compiler runs on the vector unit as multiply +
 * reduce: one operand is a vector (its dimensions all batch, contracting or of size 1), and it
 * has no batch dimension or one of size 1 (a batch of such products runs on the MXU). Returns
 * 1 and which operand is the matrix (0 lhs, 1 rhs; the larger when both are vectors) when it
 * is, and its contracting dimensions are listed in ascending order (so a reduce sums in the
 * dot's order); 0 otherwise. compile/passes/dot_reduce.c rewrites these; the chip executor
 * computes them with the reference kernel (f32 sums; an integer dot's exact and wrapped), not
 * as MXU passes. */
int tpu_dot_on_vector_unit(const tpu_instr *dot, int *matrix);
/* The one instruction of x's computation that reads x (once or more), or NULL (none, several,
 * or x its computation's root). */
const tpu_instr *tpu_instr_sole_user(const tpu_instr *x);
/* A float or all-integer dot that contracts nothing but dimensions of size 1 (an outer
 * product, batched or not: K = 1), with elements, and whose result no reduce alone reading it
 * sums over a batch dimension (XLA folds that sum into the contraction). The XLA TPU compiler makes it a multiply of
 * broadcasts on the vector unit (compile/passes/dot_reduce.c rewrites these); the chip
 * executor computes them with the reference kernel, not as MXU passes. */
int tpu_dot_unit_contraction(const tpu_instr *dot);
/* Whether one operand of the dot is a vector (the shape test of tpu_dot_on_vector_unit,
 * without its batch rule): *matrix as there. */
int tpu_dot_vector_shaped(const tpu_instr *dot, int *matrix);

/* A new instruction's defaults (its memory cleared): group counts 1, index -1, topk's
 * largest 1, the gather/scatter/convolution views empty. */
void tpu_instr_init(tpu_instr *in);

void tpu_module_free(tpu_module *m);
/* Finds a computation by name (n bytes; need not be NUL-terminated); NULL if none. */
tpu_comp *tpu_module_find_comp_n(const tpu_module *m, const char *name, size_t n);
tpu_comp *tpu_module_find_comp(const tpu_module *m, const char *name);
/* (Re)builds the name table and each computation's index; call after changing comps.
 * Returns TPU_ERR_NOMEM on allocation failure. */
tpu_status tpu_module_index_comps(tpu_module *m, tpu_diag *d);

#endif
