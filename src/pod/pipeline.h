/* Pipeline parallelism in an SPMD program: a loop whose collective-permute passes
 * activations round a ring (or along a line) of P stages — JAX's shard_map + ppermute
 * schedules (GPipe, circular/interleaved as MaxText's) — and the bubble it leaves
 * (docs/pod.md, "Pipelines"). */
#ifndef TPU_POD_PIPELINE_H
#define TPU_POD_PIPELINE_H

#include <stdint.h>

#include "chip/program.h"
#include "chip/timeline.h"

typedef struct tpu_pod_pipeline {
  const char *loop;    /* the loop's HLO name */
  const char *permute; /* its collective-permute */
  int permute_op;      /* index into the program's ops */
  const char *reverse; /* a 1F1B loop's permute sending gradients back (NULL: none) */
  int reverse_op;      /* its op index, or -1 */
  int64_t stages;      /* P: the length of each ring or line of the permute */
  int64_t trips;       /* T: iterations of the loop (each execution of it) */
  int64_t padding;     /* iterations' worth each stage computes on padding: P-1, 2(P-1) for 1F1B */
  int64_t runs;        /* times the loop ran */
  double loop_cycles;  /* wall cycles of all its runs (first to last event of its body) */
  double bubble_cycles; /* padding/T of them: what each stage spends outside real microbatches */
} tpu_pod_pipeline;

/* The program's pipeline loops (at most max; returns how many): the innermost loop around
 * each collective-permute whose source -> target pairs split the devices into rings or
 * lines of the same length P >= 2, visiting each stage once, with T > P iterations (a
 * ring algorithm passing each block once round runs P - 1 or P; a pipeline with one
 * microbatch, all bubble, is not reported). A
 * schedule that feeds one microbatch per iteration fills its P stages in P-1 iterations
 * and drains them in P-1 more, so every stage computes on padding in P-1 of the T
 * iterations (T = M + P - 1 for GPipe with M microbatches; M*V + P - 1 circular with V
 * repeats). A loop that also sends along the reversed pairs (a 1F1B schedule in one SPMD
 * loop: stage s runs the forward of microbatch t - s and the backward of t - (2P-2-s) in
 * iteration t, T = M + 2P - 2) is one pipeline whose forward and backward each compute on
 * padding in 2(P-1) of its iterations: its padding is 2(P-1) iterations of both. Needs the
 * timeline's events for the loop time (0 without them). */
int tpu_pod_find_pipelines(const tpu_program *p, const tpu_timeline *tl, tpu_pod_pipeline *out, int max);

/* The start cycle of each iteration's end (the permute's end, in order), for the trace:
 * ends[k] for k < n; returns how many (at most max). */
int64_t tpu_pod_pipeline_marks(const tpu_timeline *tl, const tpu_pod_pipeline *pl, int64_t *ends, int64_t max);

#endif
