/* An all-reduce writes its sum over its dying operand (buffer_assign.c in_place_all_reduce), as
 * the XLA TPU compiler's buffer assignment does: always in an output allocation, in the heap
 * only over a buffer holding one value. Programs from libtpu probes off the corpus, compile-only,
 * v5e 2x4 (bench/plan_memory/probes/mbacc, README "Session 26"); each check fails without its
 * half of the rule. */
#include <stdio.h>

#include "unit/compile/backend_util.h"

static tpu_chip g_chip;

static const int64_t MiB = 1 << 20;

/* The temp bytes (memory_analysis()'s) of src compiled as one chip of a pod; -1 if it fails. */
static int64_t temp_of(const char *src) {
  tpu_module *m = parse(src);
  CHECK(m != NULL);
  tpu_program *p = m ? compile_pod_chip(m, &g_chip, 1) : NULL;
  CHECK(p != NULL);
  int64_t t = p ? p->hbm_temp : -1;
  tpu_program_free(p);
  tpu_module_free(m);
  return t;
}

/* The shared head of the accumulator programs below: a two-microbatch loop accumulating an
 * f32[4096,16000] gradient (250 MiB) in place; the entry ends with `acc`, the loop's sum, and
 * each caller appends what reads it. */
#define ACC_LOOP_HEAD                                                                                     \
  "HloModule acc, num_partitions=8\n"                                                                     \
  "add {\n"                                                                                               \
  "  a = f32[] parameter(0)\n"                                                                            \
  "  b = f32[] parameter(1)\n"                                                                            \
  "  ROOT c = f32[] add(a, b)\n"                                                                          \
  "}\n"                                                                                                   \
  "cond {\n"                                                                                              \
  "  s = (s32[], bf16[2,4096,4096], bf16[4096,16000], f32[4096,16000]) parameter(0)\n"                    \
  "  i = s32[] get-tuple-element(s), index=0\n"                                                           \
  "  n = s32[] constant(2)\n"                                                                             \
  "  ROOT c = pred[] compare(i, n), direction=LT\n"                                                       \
  "}\n"                                                                                                   \
  "body {\n"                                                                                              \
  "  s = (s32[], bf16[2,4096,4096], bf16[4096,16000], f32[4096,16000]) parameter(0)\n"                    \
  "  i = s32[] get-tuple-element(s), index=0\n"                                                           \
  "  x = bf16[2,4096,4096] get-tuple-element(s), index=1\n"                                               \
  "  w = bf16[4096,16000] get-tuple-element(s), index=2\n"                                                \
  "  acc = f32[4096,16000] get-tuple-element(s), index=3\n"                                               \
  "  z = s32[] constant(0)\n"                                                                             \
  "  xs = bf16[1,4096,4096] dynamic-slice(x, i, z, z), dynamic_slice_sizes={1,4096,4096}\n"               \
  "  xi = bf16[4096,4096] reshape(xs)\n"                                                                  \
  "  g = bf16[4096,16000] dot(xi, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"               \
  "  gf = f32[4096,16000] convert(g)\n"                                                                   \
  "  acc2 = f32[4096,16000] add(acc, gf)\n"                                                               \
  "  one = s32[] constant(1)\n"                                                                           \
  "  i1 = s32[] add(i, one)\n"                                                                            \
  "  ROOT r = (s32[], bf16[2,4096,4096], bf16[4096,16000], f32[4096,16000]) tuple(i1, x, w, acc2)\n"     \
  "}\n"                                                                                                   \
  "ENTRY step {\n"                                                                                        \
  "  x = bf16[2,4096,4096] parameter(0)\n"                                                                \
  "  w = bf16[4096,16000] parameter(1)\n"                                                                 \
  "  z = s32[] constant(0)\n"                                                                             \
  "  zf = f32[] constant(0)\n"                                                                            \
  "  a0 = f32[4096,16000] broadcast(zf), dimensions={}\n"                                                 \
  "  init = (s32[], bf16[2,4096,4096], bf16[4096,16000], f32[4096,16000]) tuple(z, x, w, a0)\n"           \
  "  l = (s32[], bf16[2,4096,4096], bf16[4096,16000], f32[4096,16000]) while(init), condition=cond, "     \
  "body=body\n"                                                                                           \
  "  acc = f32[4096,16000] get-tuple-element(l), index=3\n"

/* The loop's sum, summed over 8 chips after the loop into the step's output. An all-reduce
 * writes its sum over the dying accumulator, so the accumulator, the loop's state and the
 * result are the output's one allocation (libtpu 0.0.42.1, v5e 2x4: temp 0;
 * bench/plan_memory/probes/mbacc acc_loop_ar.hlo); a reduce-scatter's smaller result cannot,
 * and the accumulator is a heap buffer of its own (acc_loop_rs.hlo: temp 262,209,024 bytes). */
static void all_reduce_writes_over_its_operand(int scatter) {
  const char *src = scatter ? ACC_LOOP_HEAD "  ROOT o = f32[512,16000] reduce-scatter(acc), channel_id=1, "
                                            "replica_groups=[1,8]<=[8], dimensions={0}, "
                                            "use_global_device_ids=true, to_apply=add\n"
                                            "}\n"
                            : ACC_LOOP_HEAD "  ROOT o = f32[4096,16000] all-reduce(acc), channel_id=1, "
                                            "replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=add\n"
                                            "}\n";
  int64_t t = temp_of(src);
  if (scatter)
    CHECK(t >= 225 * MiB && t <= 275 * MiB); /* 250 MiB, within 10 % */
  else
    CHECK(t >= 0 && t < 25 * MiB); /* 0: 10 % of the 250 MiB it had */
}

/* In the heap an all-reduce's sum takes the buffer of its dying operand only when that buffer
 * holds one value (XLA's heap simulator shares no aliased buffer with its user): the sum of
 * one microbatch's f32[4096,16000] gradient, read by a row sum, takes the gradient's buffer
 * (libtpu: heap 250 MiB, bench/plan_memory/probes/mbacc acc_noloop_ar_heap.hlo); the sum of a
 * loop's accumulator does not (acc_loop_ar_heap.hlo: heap 500 MiB; memory_analysis() temp
 * 750 MiB, the heap and its fragmentation: memory_analysis_counts_fragmentation below). */
static void all_reduce_in_the_heap(int loop) {
  const char *src = loop ? ACC_LOOP_HEAD
                           "  o = f32[4096,16000] all-reduce(acc), channel_id=1, replica_groups=[1,8]<=[8], "
                           "use_global_device_ids=true, to_apply=add\n"
                           "  e = f32[4096,16000] exponential(o)\n"
                           "  ROOT r = f32[4096] reduce(e, zf), dimensions={1}, to_apply=add\n"
                           "}\n"
                         : "HloModule acch, num_partitions=8\n"
                           "add {\n"
                           "  a = f32[] parameter(0)\n"
                           "  b = f32[] parameter(1)\n"
                           "  ROOT c = f32[] add(a, b)\n"
                           "}\n"
                           "ENTRY step {\n"
                           "  x = bf16[2,4096,4096] parameter(0)\n"
                           "  w = bf16[4096,16000] parameter(1)\n"
                           "  xs = bf16[1,4096,4096] slice(x), slice={[0:1], [0:4096], [0:4096]}\n"
                           "  xi = bf16[4096,4096] reshape(xs)\n"
                           "  g = bf16[4096,16000] dot(xi, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                           "  acc = f32[4096,16000] convert(g)\n"
                           "  o = f32[4096,16000] all-reduce(acc), channel_id=1, replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=add\n"
                           "  e = f32[4096,16000] exponential(o)\n"
                           "  zf = f32[] constant(0)\n"
                           "  ROOT r = f32[4096] reduce(e, zf), dimensions={1}, to_apply=add\n"
                           "}\n";
  int64_t want = (loop ? 750 : 250) * MiB, t = temp_of(src);
  CHECK(t >= want - want / 10 && t <= want + want / 10);
}

/* memory_analysis()'s temp is the heap plus the heap simulator's fragmentation, the heap less
 * its no-fragmentation count: each value over its own live range, a loop's phi values (its
 * body's parameter, its result) not counted (buffer_assign.c nofrag_peak). The loop's sum
 * moved to the next chip (collective-permute, read by a row sum) lives beside the loop's
 * state, whose buffer the heap reserves while only the loop's result, a phi, holds it: heap
 * 500 MiB, count 250, temp 750 (libtpu 0.0.42.1, v5e 2x4: temp 786,496,512 bytes,
 * bench/plan_memory/probes/arx acc_loop_cp_heap.hlo; at 256 MiB, loop_cp.hlo: 768 MiB, heap
 * 512); the step needs the heap, not the fragmentation (hbm_footprint; the compiler's
 * peak_memory_in_bytes = argument + output + heap). A second all-reduce that takes the loop
 * state's place after the loop makes the count reach the heap: temp 500 MiB
 * (acc_loop_ar2_heap.hlo: 524,352,512 bytes; loop_ar2.hlo: 512.1 MiB, heap 512). */
static void memory_analysis_counts_fragmentation(int reused) {
  const char *src = reused ? ACC_LOOP_HEAD
                             "  o = f32[4096,16000] all-reduce(acc), channel_id=1, replica_groups=[1,8]<=[8], "
                             "use_global_device_ids=true, to_apply=add\n"
                             "  e = f32[4096,16000] exponential(o)\n"
                             "  r1 = f32[4096] reduce(e, zf), dimensions={1}, to_apply=add\n"
                             "  o2 = f32[4096,16000] all-reduce(e), channel_id=2, replica_groups=[1,8]<=[8], "
                             "use_global_device_ids=true, to_apply=add\n"
                             "  r2 = f32[4096] reduce(o2, zf), dimensions={1}, to_apply=add\n"
                             "  ROOT r = (f32[4096], f32[4096]) tuple(r1, r2)\n"
                             "}\n"
                           : ACC_LOOP_HEAD
                             "  o = f32[4096,16000] collective-permute(acc), channel_id=1, "
                             "source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}\n"
                             "  e = f32[4096,16000] exponential(o)\n"
                             "  ROOT r = f32[4096] reduce(e, zf), dimensions={1}, to_apply=add\n"
                             "}\n";
  tpu_module *m = parse(src);
  CHECK(m != NULL);
  tpu_program *p = m ? compile_pod_chip(m, &g_chip, 1) : NULL;
  CHECK(p != NULL);
  if (p) {
    int64_t want = (reused ? 500 : 750) * MiB, t = p->hbm_temp;
    int64_t need = p->hbm_footprint - p->hbm_arg - p->hbm_out; /* the heap: 500 MiB */
    CHECK(t >= want - want / 10 && t <= want + want / 10);
    CHECK(need >= 450 * MiB && need <= 550 * MiB);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

int main(void) {
  if (!closed_form_v5e(&g_chip)) return 1;
  all_reduce_writes_over_its_operand(0);
  all_reduce_writes_over_its_operand(1);
  all_reduce_in_the_heap(0);
  all_reduce_in_the_heap(1);
  memory_analysis_counts_fragmentation(0);
  memory_analysis_counts_fragmentation(1);
  CHECK_DONE();
}
