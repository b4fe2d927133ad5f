/* While loops on slots (ref/sloop.c): a loop whose condition and body, with the
 * computations they call inlined, compute only arrays (jax.random's Threefry loops,
 * counters, small scalar iterations) is compiled once into steps on fixed byte slots of one
 * buffer: an iteration looks nothing up and moves no tensor structs. s32/u32 binary ops,
 * f32 binary, unary and compare ops, selects, reshapes, broadcasts and slices run in place
 * with the interpreter kernels' own arithmetic (tpu__ew_i32_binary, the f32 block kernels,
 * the compare kernel's signedness rule, tpu__ref_copy_box) and allocate nothing; any other
 * op with a kernel of its own runs that kernel on views of its operands' slots. The values
 * are bit-identical to stepping the loop's computations op by op. A loop nested in the
 * body is a step that runs its own steps on its own state slots (the run's on_while hook
 * told of its trips, as the interpreter tells it); a dot or convolution calls the run's
 * TPU numerics hook first, as the interpreter does. Steps that read only constants (a
 * broadcast of a literal, and what is computed from such) run once a run, before the first
 * iteration; an s32/u32 op calls its op's kernel directly (tpu__ew_i32_binary_fn); the next
 * state is copied once, not gathered first, where no element is read from another's slot. Not compiled: conditionals, custom
 * calls, collectives, tuples other than the states' and calls' results. */
#ifndef TPU_REF_SLOOP_H
#define TPU_REF_SLOOP_H

#include "ref/ref_int.h"

typedef struct tpu__sloop tpu__sloop;

/* The compiled loop of while instruction w, or NULL when some op, type or size is outside
 * the set above (or memory runs out): the loop is then stepped by the interpreter. */
tpu__sloop *tpu__sloop_compile(const tpu_instr *w);
void tpu__sloop_free(tpu__sloop *l);

/* One run of the loop (ip: the interpreter's run, for the kernels): the state loaded from
 * init (a value of the loop's shape, only read), iterations while the condition holds, the
 * final state into *out (a new value); *iters counts them; tick (or NULL) is called after
 * each of the loop's own iterations (not a nested loop's). More than limit iterations (limit > 0) fail with TPU_ERR_LIMIT, as
 * the interpreter's loop does. */
typedef void (*tpu__sloop_tick)(tpu_interp *ip, int64_t iters); /* after each iteration (progress) */
tpu_status tpu__sloop_run(const tpu__sloop *l, tpu_interp *ip, const tpu_tensor *init, int64_t limit,
                          tpu__sloop_tick tick, int64_t *iters, tpu_tensor *out, tpu_diag *d);

/* Tests: how many steps run once before the loop (on constants only: hoisted out of the
 * iterations), and whether the loop copies its next state into its state's slots directly
 * (1) or through slots of their own (0: some state element is read from another's slot). */
void tpu__sloop_shape(const tpu__sloop *l, int *hoisted, int *direct);

/* Tests: 0 turns compiling off (every loop is stepped op by op), 1 back on. */
void tpu__sloop_enable(int on);

#endif
