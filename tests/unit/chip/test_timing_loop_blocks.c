/* v4's loop kernels in the compiler's blocks (chip stream_block_elems, stream_block_fill_cycles;
 * schedule.c plan_stream, stream_cost.c tpu__loop_block_elems, timing.c port_floor_op). libtpu
 * probes off the corpora (bench/fidelity/probes/loop_blocks.py, data/loop_blocks.jsonl): chains
 * of x * a + b kernels over f32 / bf16 [R, 1152] on one v4 TensorCore, the values between them
 * in CMEM. The compiler runs a loop kernel that does not reduce in round(sqrt(E / 128,000))
 * blocks of its E result elements: one block costs its start, read, vector work and write end
 * to end (f32[200,1152] CMEM -> HBM 5,213 cycles; tpusim's ~1 MiB tiles overlapped them, 4,188);
 * two or more cost its start, the HBM latency, its transfers and 1,592 more (bf16[304,1152],
 * 2 blocks, 7,868; tpusim before 6,324). Pinned at 10 %; without the two fields both are more
 * than 15 % under. */
#include "timing_util.h"

#define CHAIN(T, R, TILE)                                                                   \
  "HloModule m, is_scheduled=true\n"                                                        \
  "fa {\n"                                                                                  \
  "  p = " T "[" R ",1152]{1,0:" TILE "} parameter(0)\n"                                   \
  "  c = " T "[] constant(2)\n"                                                             \
  "  b = " T "[" R ",1152]{1,0:" TILE "} broadcast(c), dimensions={}\n"                    \
  "  m = " T "[" R ",1152]{1,0:" TILE "} multiply(p, b)\n"                                 \
  "  d = " T "[] constant(1)\n"                                                             \
  "  e = " T "[" R ",1152]{1,0:" TILE "} broadcast(d), dimensions={}\n"                    \
  "  ROOT a = " T "[" R ",1152]{1,0:" TILE "} add(m, e)\n"                                 \
  "}\n"                                                                                     \
  "fb {\n"                                                                                  \
  "  p = " T "[" R ",1152]{1,0:" TILE "} parameter(0)\n"                                   \
  "  c = " T "[] constant(0.5)\n"                                                           \
  "  b = " T "[" R ",1152]{1,0:" TILE "} broadcast(c), dimensions={}\n"                    \
  "  m = " T "[" R ",1152]{1,0:" TILE "} multiply(p, b)\n"                                 \
  "  d = " T "[] constant(2)\n"                                                             \
  "  e = " T "[" R ",1152]{1,0:" TILE "} broadcast(d), dimensions={}\n"                    \
  "  ROOT a = " T "[" R ",1152]{1,0:" TILE "} add(m, e)\n"                                 \
  "}\n"                                                                                     \
  "ENTRY e {\n"                                                                             \
  "  x = " T "[" R ",1152]{1,0:" TILE "} parameter(0)\n"                                   \
  "  y = " T "[" R ",1152]{1,0:" TILE "S(3)} fusion(x), kind=kLoop, calls=fa\n"            \
  "  ROOT z = " T "[" R ",1152]{1,0:" TILE "} fusion(y), kind=kLoop, calls=fb\n"           \
  "}\n"

static void kernel(const char *what, const char *src, const tpu_chip *c, const tpu_chip *off, double compiler) {
  tpu_program *p = compile_src(src, c, -1), *q = compile_src(src, off, -1);
  CHECK(p != NULL && q != NULL);
  if (!p || !q) return;
  int64_t z = (int64_t)op_cycles(p, c, "z"), z0 = (int64_t)op_cycles(q, off, "z");
  printf("v4:core %s, CMEM -> HBM: %lld cycles (the compiler %.0f; without stream_block_elems and "
         "stream_block_fill_cycles %lld)\n",
         what, (long long)z, compiler, (long long)z0);
  CHECK(fabs((double)z / compiler - 1) < 0.10);
  CHECK(z0 < 0.85 * compiler); /* the rule's part */
  tpu_program_free(p);
  tpu_program_free(q);
}

int main(void) {
  tpu_chip c, off;
  tpu_diag d;
  CHECK(tpu_chip_load("v4:core", &c, &d) == TPU_OK);
  CHECK(c.stream_block_elems > 0 && c.stream_block_fill_cycles > 0);
  off = c;
  off.stream_block_elems = 0;
  off.stream_block_fill_cycles = 0;
  kernel("f32[200,1152] x * 0.5 + 2 (1 block)", CHAIN("f32", "200", "T(8,128)"), &c, &off, 5213);
  kernel("bf16[304,1152] x * 0.5 + 2 (2 blocks)", CHAIN("bf16", "304", "T(8,128)(2,1)"), &c, &off, 7868);
  CHECK_DONE();
}
