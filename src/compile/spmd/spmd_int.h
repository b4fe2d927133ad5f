/* spmd-partition's internals shared by its files: shardings in mesh-axes form (spmd_mesh.c
 * reads and writes them; spmd.c partitions with them). */
#ifndef TPU_COMPILE_SPMD_INT_H
#define TPU_COMPILE_SPMD_INT_H

#include <string.h>

#include "base/strbuf.h"
#include "compile/spmd/spmd.h"
#include "ir/build.h"
#include "ir/ir.h"

#define MAXA TPU_MESH_MAX_AXES

/* A sharding in mesh-axes form: for every dimension, the mesh axes that split it (major
 * first); axes named nowhere replicate the array. */
typedef struct {
  int8_t n[TPU_MAX_RANK];
  int8_t ax[TPU_MAX_RANK][MAXA];
  int manual; /* a shard_map value: already one chip's block */
} dsh;

static inline int64_t factor(const tpu_mesh *mesh, const dsh *s, int k) {
  int64_t f = 1;
  for (int i = 0; i < s->n[k]; i++) f *= mesh->sizes[s->ax[k][i]];
  return f;
}

static inline int is_split(const dsh *s, int rank) {
  for (int k = 0; k < rank; k++)
    if (s->n[k]) return 1;
  return 0;
}

static inline int same_dim(const dsh *a, int ka, const dsh *b, int kb) {
  return a->n[ka] == b->n[kb] && !memcmp(a->ax[ka], b->ax[kb], (size_t)a->n[ka]);
}

/* Whether a and b split every one of rank dimensions alike. */
static inline int same_sharding(const dsh *a, const dsh *b, int rank) {
  for (int k = 0; k < rank; k++)
    if (!same_dim(a, k, b, k)) return 0;
  return 1;
}

/* Whole on every chip. */
static const dsh k_repl = {{0}, {{0}}, 0};

/* The value of attribute `name` as written, or NULL. */
const char *tpu__spmd_attr(const tpu_instr *in, const char *name);
/* "[{"x"}, {}, {"y","z"}]" (sdy dimension shardings) into s for rank dims; 0 when it does
 * not read on mesh. */
int tpu__spmd_parse_sdy(const char *p, const tpu_mesh *mesh, int rank, dsh *s);
/* An HLO sharding as mesh axes (0 when no assignment of the axes gives it). */
int tpu__spmd_from_hlo(const tpu_mesh *mesh, const char *text, int rank, dsh *out);
/* The same for a parsed sharding (pod/sharding.h). */
struct tpu_sharding;
int tpu__spmd_from_parsed(const tpu_mesh *mesh, const struct tpu_sharding *hs, int rank, dsh *out);
/* The tile assignment of s as HLO sharding text. */
void tpu__spmd_hlo_text(const tpu_mesh *mesh, const dsh *s, int rank, tpu_strbuf *b);

/* ---- The pass's state and its resharding machinery (spmd_reshard.c) ---- */

/* One partitioning: the computation being built and every old value's per-chip value and
 * sharding. */
typedef struct {
  tpu_builder b;
  tpu_diag *d;
  tpu_module *m;
  const tpu_mesh *mesh;
  tpu_comp *old, *c;       /* the entry, and the partitioned one being built */
  tpu_instr **val;         /* old id -> its per-chip value */
  dsh *sh;                 /* old id -> its sharding */
  dsh **tsh;               /* old id -> its elements' shardings when it is a tuple of arrays (NULL: whole) */
  dsh **hint;              /* entry's old id of a while -> the splits its results are used with (NULL: none) */
  tpu_instr *pos;          /* this chip's mesh position (s32[]), built on first use */
  const tpu_instr *cur;    /* the old instruction being partitioned: what the ops made for
                            * it are named after it and carry its metadata */
  int channel;
  tpu_comp *adders[16];    /* add computations by dtype, for partial sums */
  struct {                 /* the all-reduces of partial sums this pass made, and their axes */
    const tpu_instr *ar;
    int8_t axes[MAXA];
    int n;
  } sums[256];
  int nsums;
  /* The entry's collectives emitted so far (the first 64), by kind and mesh axes (a bit per
   * axis); dep[old id]: which of them an entry value depends on (a bit per collective);
   * cur_bits: those emitted while partitioning the current entry instruction. */
  struct {
    tpu_opcode op;
    unsigned axes;
  } emitted[64];
  int nemitted;
  uint64_t *dep, cur_bits;
  /* Operands resharded so far, reused by later uses that want the same (XLA's partitioner
   * keeps such a cache too: a weight gathered for the forward dot serves the backward one);
   * bf16: gathered as bf16 for a dot (dot_operand_bf16). */
  struct {
    const tpu_comp *c;
    const tpu_instr *v; /* the operand's per-chip value */
    dsh from, to;
    int bf16;
    tpu_instr *out;
  } reshards[128];
  int nreshards;
  /* A reshape that cuts a dimension split over a mesh axis at a point inside that axis
   * (microbatches cut from a batch split over every chip): the axis to cut into sub-axes
   * (fact_m, its size / fact_m) for the next walk (-1: none; tpu_spmd_partition). */
  int fact_axis;
  int64_t fact_m;
} sp;

/* s as a JAX PartitionSpec, and a constraint for the better-plan hint (tpu_mesh own_notes). */
void tpu__spmd_pspec_text(const tpu_mesh *mesh, const dsh *s, int rank, tpu_strbuf *b);
void tpu__spmd_note_constraint(const sp *s, const tpu_instr *x, const dsh *h, const tpu_instr *at, const char *why);

/* Emitting collectives and resharding values (spmd_reshard.c). */
tpu_status tpu__spmd_fail_at(sp *s, const tpu_instr *in, const char *what);
tpu_status tpu__spmd_instr(sp *s, tpu_opcode op, const char *hint, const tpu_shape *shape, tpu_instr *const *ops, int n,
                           tpu_loc loc, tpu_instr **out);
tpu_shape tpu__spmd_scalar(tpu_dtype t);
/* A scalar constant v of dtype t, broadcast to shape sh (NULL: the scalar itself). */
tpu_status tpu__spmd_const(sp *s, tpu_dtype t, int64_t v, const tpu_shape *sh, tpu_loc loc, tpu_instr **out);
/* Element i of tuple t, and the tuple of n values. */
tpu_status tpu__spmd_gte(sp *s, tpu_instr *t, int i, tpu_loc loc, tpu_instr **out);
tpu_status tpu__spmd_tuple(sp *s, tpu_instr *const *parts, int n, tpu_loc loc, tpu_instr **out);
/* Where this chip's block starts along a dimension split over `axes` in blocks of len
 * (s32[]: block index x len, from partition-id). */
tpu_status tpu__spmd_block_offset(sp *s, const int8_t *axes, int n, int64_t len, tpu_loc loc, tpu_instr **out);
tpu_status tpu__spmd_convert(sp *s, tpu_instr *x, tpu_dtype t, tpu_loc loc, tpu_instr **out);
unsigned tpu__spmd_axes_mask(const int8_t *axes, int n);
int tpu__spmd_in_entry(const sp *s);
int tpu__spmd_joins_emitted(const sp *s, tpu_opcode op, unsigned axes, uint64_t deps);
tpu_status tpu__spmd_set_attr_text(sp *s, tpu_instr *x, const char *name, tpu_strbuf *b, tpu_loc loc);
tpu_status tpu__spmd_set_groups(sp *s, tpu_instr *x, const int8_t *axes, int n);
tpu_shape tpu__spmd_local_shape(const sp *s, const tpu_shape *g, const dsh *h);
int64_t tpu__spmd_block_at(const tpu_mesh *mesh, const dsh *h, int k, int64_t p);
tpu_status tpu__spmd_reshard(sp *s, tpu_instr *x, const dsh *from, const dsh *to, tpu_loc loc, tpu_instr **out);
/* A sum wanted split along one dimension, after data movement or not (spmd_psum.c): its
 * partial sums reduce-scattered and the movement applied to the block; *done 0 when x is
 * not such a value. */
tpu_status tpu__spmd_moved_sum_scatter(sp *s, tpu_instr *x, const dsh *from, const dsh *to, tpu_loc loc,
                                       tpu_instr **out, int *done);
tpu_status tpu__spmd_reshard_tuple(sp *s, tpu_instr *x, const dsh *el, const dsh *to, tpu_loc loc, tpu_instr **out);
tpu_status tpu__spmd_operand_as(sp *s, const tpu_instr *in, int i, const dsh *to, tpu_instr **out);
/* x's dimension k from s32 offset `off`, `len` long (a dynamic-slice named after hint). */
tpu_status tpu__spmd_slice_at(sp *s, tpu_instr *x, int k, tpu_instr *off, int64_t len, const char *hint, tpu_loc loc,
                              tpu_instr **out);
/* The collective-permute by which each mesh position q receives x from position src[q]
 * (-1: from none, zeros). */
tpu_status tpu__spmd_permute(sp *s, tpu_instr *x, const int64_t *src, const char *hint, tpu_loc loc, tpu_instr **out);
/* x as each chip receives it from the chip `dir` blocks on along dimension k (split as h)
 * whose coordinates on the other axes are its own: round the ring where wrap, else chips
 * at the edge receive zeros. */
tpu_status tpu__spmd_shift(sp *s, tpu_instr *x, const dsh *h, int k, int dir, int wrap, const char *hint, tpu_loc loc,
                           tpu_instr **out);
/* gather and scatter (spmd_index.c). */
tpu_status tpu__spmd_index_op(sp *s, const tpu_instr *in);
/* A reshard of per-chip value v made before in this computation (NULL: none), and
 * remembering one. */
tpu_instr *tpu__spmd_resharded(const sp *s, const tpu_instr *v, const dsh *from, const dsh *to, int bf16);
void tpu__spmd_remember(sp *s, const tpu_instr *v, const dsh *from, const dsh *to, int bf16, tpu_instr *out);
int tpu__spmd_fits(const sp *s, const tpu_shape *g, const dsh *h);
/* The first pass's hint for entry instruction `in` (a while's: one per state element), NULL
 * when there is none or `in` is not in the entry (spmd_hint.c). */
static inline const dsh *tpu__spmd_hint_of(const sp *s, const tpu_instr *in) {
  return s->hint && s->old == s->m->entry ? s->hint[in->id] : NULL;
}
/* Whether operand `side` of dot u, as split now, is whole along a contracted dimension that
 * the other operand splits (an axis it does not use yet, dividing it): *h = its split with
 * those added (the split XLA's propagation gives it). */
int tpu__spmd_dot_wants(const sp *s, const tpu_instr *u, int side, dsh *h);
/* Whether `in` is an elementwise op (unary, binary, ternary, compare, select, clamp, convert). */
int tpu__spmd_is_elementwise(const tpu_instr *in);
/* After a first walk over the entry: s->hint, the splits values are used with (spmd_hint.c);
 * left NULL when there is none (no second walk). */
tpu_status tpu__spmd_hints(sp *s);
/* o, or the value o is through unary elementwise ops that keep its split. */
const tpu_instr *tpu__spmd_through_unary(const sp *s, const tpu_instr *o);
tpu_status tpu__spmd_emit_clone(sp *s, const tpu_instr *in, tpu_instr **ops, const dsh *h);
tpu_status tpu__spmd_replicated_op(sp *s, const tpu_instr *in);

/* Dots (spmd_dot.c) and what they share with the other rules (spmd.c). */
int tpu__spmd_bf16_gathers(const sp *s, const tpu_instr *in);
tpu_status tpu__spmd_dot(sp *s, const tpu_instr *in);
int tpu__spmd_has_axis(const dsh *h, int rank, int a);
tpu_status tpu__spmd_adder(sp *s, tpu_dtype t, tpu_comp **out);
tpu_status tpu__spmd_reduce_axes(sp *s, tpu_instr *x, const int8_t *axes, int n, tpu_comp *red, tpu_loc loc,
                                 tpu_instr **out);

/* Control flow (spmd_control.c) and the per-instruction rule it recurses into (spmd.c). */
tpu_status tpu__spmd_while_loop(sp *s, const tpu_instr *in);
tpu_status tpu__spmd_conditional_op(sp *s, const tpu_instr *in);
tpu_status tpu__spmd_partition_instr(sp *s, const tpu_instr *in);

/* Windowed einsums (spmd_window.c): whether operand `side` of dot `in`, split as `from`,
 * gathered to `to`, is one the XLA TPU compiler passes round a ring instead (*dim: the
 * gathered dimension; the ring: the devices of the axes that split it; flops: the dot's work
 * per chip), and the loop that does so, given the other operand as the plan wants
 * it, this chip's block of the gathered one and the result's per-chip shape. */
int tpu__spmd_window_gather(const sp *s, const tpu_instr *in, int side, const dsh *from, const dsh *to,
                            const dsh *other, double flops, int *dim);
tpu_status tpu__spmd_window_dot(sp *s, const tpu_instr *in, int side, int rd, const dsh *from, tpu_instr *other,
                                tpu_instr *shard, const tpu_shape *out_shape, tpu_instr **out);

/* Partial sums `part` (a dot's result on each chip) reduce-scattered along its dimension kd
 * into the blocks of `to`'s dimension k, as the XLA TPU compiler's windowed einsum does it round
 * the ring of the axes that split it: *done 0 when it does not apply. */
tpu_status tpu__spmd_window_sum(sp *s, tpu_instr *part, int kd, const dsh *to, int k, tpu_loc loc, tpu_instr **out,
                                int *done);

/* Convolutions (spmd_conv.c). */
tpu_status tpu__spmd_convolution(sp *s, const tpu_instr *in);

#endif
