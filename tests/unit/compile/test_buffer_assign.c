/* Buffer assignment as the XLA TPU compiler allocates: a while loop's state in one set of
 * buffers, a dynamic-update-slice into a loop-carried stack in place, read-only loop inputs
 * not copied, donated parameters holding their outputs, and the argument / output / alias /
 * temp bytes of memory_analysis(). Values larger than VMEM so they live in HBM. */
#include <stdio.h>
#include <string.h>

#include "unit/compile/backend_util.h"

static tpu_chip g_chip;

static const int64_t MiB = 1 << 20;

static tpu_program *build(const char *src, tpu_module **m) {
  *m = parse(src);
  CHECK(*m != NULL);
  if (!*m) return NULL;
  tpu_diag d;
  tpu_program *p = compile(*m, &g_chip, &d);
  if (!p) fprintf(stderr, "compile: %s\n", d.msg);
  CHECK(p != NULL);
  return p;
}

/* A forward scan saving each layer's [4096,1024] f32 activation (16 MiB) into a stack of
 * 16 (256 MiB) by dynamic-update-slice. The stack starts as a broadcast that dies into the
 * loop and is the step's result: the broadcast, the loop state, the body's update and the
 * result are one buffer, so the stack is counted once, as an output. */
static void loop_stack_in_place(void) {
  const char *src =
      "HloModule scan\n"
      "cond {\n"
      "  s = (s32[], f32[4096,1024], f32[16,4096,1024]) parameter(0)\n"
      "  i = s32[] get-tuple-element(s), index=0\n"
      "  n = s32[] constant(16)\n"
      "  ROOT c = pred[] compare(i, n), direction=LT\n"
      "}\n"
      "body {\n"
      "  s = (s32[], f32[4096,1024], f32[16,4096,1024]) parameter(0)\n"
      "  i = s32[] get-tuple-element(s), index=0\n"
      "  x = f32[4096,1024] get-tuple-element(s), index=1\n"
      "  st = f32[16,4096,1024] get-tuple-element(s), index=2\n"
      "  y = f32[4096,1024] tanh(x)\n"
      "  y3 = f32[1,4096,1024] reshape(y)\n"
      "  z = s32[] constant(0)\n"
      "  st2 = f32[16,4096,1024] dynamic-update-slice(st, y3, i, z, z)\n"
      "  one = s32[] constant(1)\n"
      "  i1 = s32[] add(i, one)\n"
      "  ROOT r = (s32[], f32[4096,1024], f32[16,4096,1024]) tuple(i1, y, st2)\n"
      "}\n"
      "ENTRY e {\n"
      "  x0 = f32[4096,1024] parameter(0)\n"
      "  zf = f32[] constant(0)\n"
      "  st0 = f32[16,4096,1024] broadcast(zf), dimensions={}\n"
      "  i0 = s32[] constant(0)\n"
      "  init = (s32[], f32[4096,1024], f32[16,4096,1024]) tuple(i0, x0, st0)\n"
      "  w = (s32[], f32[4096,1024], f32[16,4096,1024]) while(init), condition=cond, body=body\n"
      "  ROOT out = f32[16,4096,1024] get-tuple-element(w), index=2\n"
      "}\n";
  tpu_module *m = NULL;
  tpu_program *p = build(src, &m);
  if (p) {
    printf("scan with a 256 MiB stack: arg %lld, out %lld, temp %lld, footprint %lld bytes\n", (long long)p->hbm_arg,
           (long long)p->hbm_out, (long long)p->hbm_temp, (long long)p->hbm_footprint);
    CHECK_EQ_INT(p->hbm_arg, 16 * MiB);
    CHECK_EQ_INT(p->hbm_out, 256 * MiB);
    CHECK_EQ_INT(p->hbm_alias, 0);
    /* the carried activation (its input is the caller's x0, so the state's copy of it) and
     * tanh's result beside it: never a second stack */
    CHECK(p->hbm_temp <= 2 * 16 * MiB);
    CHECK(p->hbm_footprint < 2 * 256 * MiB);
    CHECK(p->hbm_footprint - (p->hbm_arg + p->hbm_out + p->hbm_temp) < 8192); /* + constants */
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* The order a computation runs in is the XLA memory scheduler's: of the post-order, a list
 * schedule and a DFS schedule, the one with the lowest peak (compile/passes/mem_sched.c).
 * A head's backward as the planner writes it: the logits' gradient g (64 MiB) feeds the
 * input gradient dx, which the rest of the backward pass (a 128 MiB product) consumes, and
 * the head's weight gradient dw, listed last in the root. The post-order from the root runs
 * dw at the end, so g lives beside the 128 MiB product; the list schedule runs dw as soon
 * as dx has run (it frees g), as the XLA TPU compiler schedules the LM head's weight
 * gradient before the backward loop. */
static void weight_gradient_frees_early(void) {
  const char *src =
      "HloModule head_bwd\n"
      "ENTRY e {\n"
      "  x = f32[2048,1024] parameter(0)\n"
      "  w = f32[1024,8192] parameter(1)\n"
      "  w2 = f32[1024,16384] parameter(2)\n"
      "  g = f32[2048,8192] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  dx = f32[2048,1024] dot(g, w), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
      "  h = f32[2048,1024] tanh(dx)\n"
      "  big = f32[2048,16384] dot(h, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  e = f32[2048,16384] exponential(big)\n"
      "  r = f32[2048,1024] dot(e, w2), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
      "  dw = f32[1024,8192] dot(x, g), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
      "  ROOT out = (f32[2048,1024], f32[1024,8192]) tuple(r, dw)\n"
      "}\n";
  tpu_module *m = parse(src);
  CHECK(m != NULL);
  tpu_chip chip; /* the preset as tpusim compile loads it */
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &chip, &d) == TPU_OK);
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = &chip;
  o.precision_override = -1;
  tpu_program *p = NULL;
  CHECK(m && tpu_compile(m, &o, &p, &d) == TPU_OK); /* the HLO passes too: memory-schedule is one */
  if (p) {
    printf("head backward: out %lld, temp %lld, peak %lld bytes\n", (long long)p->hbm_out, (long long)p->hbm_temp,
           (long long)p->hbm_peak);
    CHECK_EQ_INT(p->hbm_out, 8 * MiB + 32 * MiB);
    /* the 128 MiB product and its exponential's without g beside them (with g: 64 MiB more) */
    CHECK(p->hbm_temp < 128 * MiB + 64 * MiB); /* the post-order's: 192 MiB */
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* The temporaries' heap is packed as the XLA TPU compiler packs it: in order of live-range
 * start, each buffer into the smallest gap that holds it (buffer_assign.c pack_temps; libtpu's
 * own heaps, bench/plan_memory/probes/heap_order.py). The kernels run a, b, ra, c, rc, rb: a
 * (256 MiB) dies at ra, b (256 MiB) lives past c (512 MiB), all larger than VMEM. In order of
 * start a takes 0 and b 256 MiB, and c finds no 512 MiB gap below b: a 1 GiB heap, 256 MiB
 * more than the 768 MiB live at once, which memory_analysis() counts twice (temp = heap +
 * heap - 768 MiB = 1280 MiB). XLA's spatial order (largest first: c at 0, b at 512 MiB, a in
 * the gap under b) packs 768 MiB (TPUSIM_NO_START_HEAP=1: temp 768 MiB). */
static void heap_best_fit(void) {
  const char *src =
      "HloModule frag\n"
      "add {\n"
      "  x = f32[] parameter(0)\n"
      "  y = f32[] parameter(1)\n"
      "  ROOT s = f32[] add(x, y)\n"
      "}\n"
      "ENTRY e {\n"
      "  p = f32[8192,8192] parameter(0)\n"
      "  z = f32[] constant(0)\n"
      "  a = f32[8192,8192] tanh(p)\n"
      "  b = f32[8192,8192] exponential(p)\n"
      "  bsl = f32[1,1] slice(b), slice={[0:1], [0:1]}\n"
      "  r = f32[] reshape(bsl)\n"
      "  ra = f32[8192] reduce(a, r), dimensions={1}, to_apply=add\n"
      "  c = f32[16384,8192] concatenate(p, p), dimensions={0}\n"
      "  rc = f32[8192] reduce(c, z), dimensions={0}, to_apply=add\n"
      "  s1 = f32[8192] add(ra, rc)\n"
      "  rb = f32[8192] reduce(b, z), dimensions={1}, to_apply=add\n"
      "  ROOT s = f32[8192] add(s1, rb)\n"
      "}\n";
  tpu_module *m = NULL;
  tpu_program *p = build(src, &m);
  if (p) {
    printf("heap of 256 + 256 + 512 MiB temporaries: temp %lld, peak %lld bytes\n", (long long)p->hbm_temp,
           (long long)p->hbm_peak);
    CHECK(p->hbm_temp >= 1280 * MiB);
    CHECK(p->hbm_temp < 1280 * MiB + MiB); /* largest first: 768 MiB */
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* A forward scan writes a 256 MiB stack; a second loop (the backward pass) reads one slice
 * of it per iteration and computes a 256 MiB product in its body. Nothing after the second
 * loop reads the first loop's result, so only the second loop's rule keeps the stack (a
 * value of the first loop's body) live: the product cannot take its place, and the heap
 * holds both. */
static void stack_read_by_a_later_loop(void) {
  const char *src =
      "HloModule fwd_bwd\n"
      "fcond {\n"
      "  s = (s32[], f32[4096,1024], f32[16,4096,1024]) parameter(0)\n"
      "  i = s32[] get-tuple-element(s), index=0\n"
      "  n = s32[] constant(16)\n"
      "  ROOT c = pred[] compare(i, n), direction=LT\n"
      "}\n"
      "fbody {\n"
      "  s = (s32[], f32[4096,1024], f32[16,4096,1024]) parameter(0)\n"
      "  i = s32[] get-tuple-element(s), index=0\n"
      "  x = f32[4096,1024] get-tuple-element(s), index=1\n"
      "  st = f32[16,4096,1024] get-tuple-element(s), index=2\n"
      "  y = f32[4096,1024] tanh(x)\n"
      "  y3 = f32[1,4096,1024] reshape(y)\n"
      "  z = s32[] constant(0)\n"
      "  st2 = f32[16,4096,1024] dynamic-update-slice(st, y3, i, z, z)\n"
      "  one = s32[] constant(1)\n"
      "  i1 = s32[] add(i, one)\n"
      "  ROOT r = (s32[], f32[4096,1024], f32[16,4096,1024]) tuple(i1, y, st2)\n"
      "}\n"
      "bcond {\n"
      "  s = (s32[], f32[4096,1024], f32[16,4096,1024], f32[1024,16384]) parameter(0)\n"
      "  i = s32[] get-tuple-element(s), index=0\n"
      "  n = s32[] constant(16)\n"
      "  ROOT c = pred[] compare(i, n), direction=LT\n"
      "}\n"
      "bbody {\n"
      "  s = (s32[], f32[4096,1024], f32[16,4096,1024], f32[1024,16384]) parameter(0)\n"
      "  i = s32[] get-tuple-element(s), index=0\n"
      "  g = f32[4096,1024] get-tuple-element(s), index=1\n"
      "  st = f32[16,4096,1024] get-tuple-element(s), index=2\n"
      "  w = f32[1024,16384] get-tuple-element(s), index=3\n"
      "  z = s32[] constant(0)\n"
      "  a3 = f32[1,4096,1024] dynamic-slice(st, i, z, z), dynamic_slice_sizes={1,4096,1024}\n"
      "  a = f32[4096,1024] reshape(a3)\n"
      "  ga = f32[4096,1024] multiply(g, a)\n"
      "  big = f32[4096,16384] dot(ga, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  g2 = f32[4096,1024] dot(big, w), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
      "  one = s32[] constant(1)\n"
      "  i1 = s32[] add(i, one)\n"
      "  ROOT r = (s32[], f32[4096,1024], f32[16,4096,1024], f32[1024,16384]) tuple(i1, g2, st, w)\n"
      "}\n"
      "ENTRY e {\n"
      "  x0 = f32[4096,1024] parameter(0)\n"
      "  w0 = f32[1024,16384] parameter(1)\n"
      "  zf = f32[] constant(0)\n"
      "  st0 = f32[16,4096,1024] broadcast(zf), dimensions={}\n"
      "  i0 = s32[] constant(0)\n"
      "  finit = (s32[], f32[4096,1024], f32[16,4096,1024]) tuple(i0, x0, st0)\n"
      "  f = (s32[], f32[4096,1024], f32[16,4096,1024]) while(finit), condition=fcond, body=fbody\n"
      "  h = f32[4096,1024] get-tuple-element(f), index=1\n"
      "  sv = f32[16,4096,1024] get-tuple-element(f), index=2\n"
      "  binit = (s32[], f32[4096,1024], f32[16,4096,1024], f32[1024,16384]) tuple(i0, h, sv, w0)\n"
      "  b = (s32[], f32[4096,1024], f32[16,4096,1024], f32[1024,16384]) while(binit), condition=bcond, body=bbody\n"
      "  ROOT out = f32[4096,1024] get-tuple-element(b), index=1\n"
      "}\n";
  tpu_module *m = NULL;
  tpu_program *p = build(src, &m);
  if (p) {
    printf("forward stack read by the backward loop: temp %lld bytes\n", (long long)p->hbm_temp);
    CHECK_EQ_INT(p->hbm_arg, 16 * MiB + 64 * MiB);
    CHECK_EQ_INT(p->hbm_out, 16 * MiB);
    int64_t heap = p->hbm_footprint - p->hbm_arg - p->hbm_out; /* temp less the heap's fragmentation */
    CHECK(heap >= 256 * MiB + 256 * MiB); /* the stack and the product, apart */
    CHECK(heap < 256 * MiB + 256 * MiB + 4 * 16 * MiB + 8192);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* The elements of a loop's result are values of their own (XLA's HloValues per ShapeIndex),
 * each live to its own last reader: the forward scan's stack (256 MiB) dies with the backward
 * loop that reads it, though the scan's last carry is read after that loop, beside a
 * 256 MiB product. Held as one, the stack would stay live beside the product. */
static void loop_result_elements_die_apart(void) {
  const char *src =
      "HloModule fwd_bwd_carry\n"
      "fcond {\n"
      "  s = (s32[], f32[4096,1024], f32[16,4096,1024]) parameter(0)\n"
      "  i = s32[] get-tuple-element(s), index=0\n"
      "  n = s32[] constant(16)\n"
      "  ROOT c = pred[] compare(i, n), direction=LT\n"
      "}\n"
      "fbody {\n"
      "  s = (s32[], f32[4096,1024], f32[16,4096,1024]) parameter(0)\n"
      "  i = s32[] get-tuple-element(s), index=0\n"
      "  x = f32[4096,1024] get-tuple-element(s), index=1\n"
      "  st = f32[16,4096,1024] get-tuple-element(s), index=2\n"
      "  y = f32[4096,1024] tanh(x)\n"
      "  y3 = f32[1,4096,1024] reshape(y)\n"
      "  z = s32[] constant(0)\n"
      "  st2 = f32[16,4096,1024] dynamic-update-slice(st, y3, i, z, z)\n"
      "  one = s32[] constant(1)\n"
      "  i1 = s32[] add(i, one)\n"
      "  ROOT r = (s32[], f32[4096,1024], f32[16,4096,1024]) tuple(i1, y, st2)\n"
      "}\n"
      "bcond {\n"
      "  s = (s32[], f32[4096,1024], f32[16,4096,1024]) parameter(0)\n"
      "  i = s32[] get-tuple-element(s), index=0\n"
      "  n = s32[] constant(16)\n"
      "  ROOT c = pred[] compare(i, n), direction=LT\n"
      "}\n"
      "bbody {\n"
      "  s = (s32[], f32[4096,1024], f32[16,4096,1024]) parameter(0)\n"
      "  i = s32[] get-tuple-element(s), index=0\n"
      "  g = f32[4096,1024] get-tuple-element(s), index=1\n"
      "  st = f32[16,4096,1024] get-tuple-element(s), index=2\n"
      "  z = s32[] constant(0)\n"
      "  a3 = f32[1,4096,1024] dynamic-slice(st, i, z, z), dynamic_slice_sizes={1,4096,1024}\n"
      "  a = f32[4096,1024] reshape(a3)\n"
      "  g2 = f32[4096,1024] multiply(g, a)\n"
      "  one = s32[] constant(1)\n"
      "  i1 = s32[] add(i, one)\n"
      "  ROOT r = (s32[], f32[4096,1024], f32[16,4096,1024]) tuple(i1, g2, st)\n"
      "}\n"
      "ENTRY e {\n"
      "  x0 = f32[4096,1024] parameter(0)\n"
      "  w0 = f32[1024,16384] parameter(1)\n"
      "  zf = f32[] constant(0)\n"
      "  st0 = f32[16,4096,1024] broadcast(zf), dimensions={}\n"
      "  i0 = s32[] constant(0)\n"
      "  finit = (s32[], f32[4096,1024], f32[16,4096,1024]) tuple(i0, x0, st0)\n"
      "  f = (s32[], f32[4096,1024], f32[16,4096,1024]) while(finit), condition=fcond, body=fbody\n"
      "  h = f32[4096,1024] get-tuple-element(f), index=1\n"
      "  sv = f32[16,4096,1024] get-tuple-element(f), index=2\n"
      "  binit = (s32[], f32[4096,1024], f32[16,4096,1024]) tuple(i0, x0, sv)\n"
      "  b = (s32[], f32[4096,1024], f32[16,4096,1024]) while(binit), condition=bcond, body=bbody\n"
      "  gb = f32[4096,1024] get-tuple-element(b), index=1\n"
      "  big = f32[4096,16384] dot(gb, w0), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  back = f32[4096,1024] dot(big, w0), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
      "  ROOT out = f32[4096,1024] add(back, h)\n"
      "}\n";
  tpu_module *m = NULL;
  tpu_program *p = build(src, &m);
  if (p) {
    printf("loop result elements die apart: temp %lld bytes\n", (long long)p->hbm_temp);
    CHECK_EQ_INT(p->hbm_out, 16 * MiB);
    CHECK(p->hbm_temp >= 256 * MiB);                 /* the stack, or the product */
    CHECK(p->hbm_temp < 256 * MiB + 8 * 16 * MiB); /* never both at once */
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* Weights passed through a loop unchanged (a parameter of the caller's, read every
 * iteration): no copy, the argument is the loop's buffer. The loop's accumulator starts
 * from the caller's parameter, which the caller keeps: the state is a copy of it. */
static void loop_read_only_and_copied(void) {
  const char *src =
      "HloModule acc\n"
      "cond {\n"
      "  s = (s32[], f32[8192,8192], f32[8192,8192]) parameter(0)\n"
      "  i = s32[] get-tuple-element(s), index=0\n"
      "  n = s32[] constant(4)\n"
      "  ROOT c = pred[] compare(i, n), direction=LT\n"
      "}\n"
      "body {\n"
      "  s = (s32[], f32[8192,8192], f32[8192,8192]) parameter(0)\n"
      "  i = s32[] get-tuple-element(s), index=0\n"
      "  w = f32[8192,8192] get-tuple-element(s), index=1\n"
      "  a = f32[8192,8192] get-tuple-element(s), index=2\n"
      "  a2 = f32[8192,8192] add(a, w)\n"
      "  one = s32[] constant(1)\n"
      "  i1 = s32[] add(i, one)\n"
      "  ROOT r = (s32[], f32[8192,8192], f32[8192,8192]) tuple(i1, w, a2)\n"
      "}\n"
      "ENTRY e {\n"
      "  w0 = f32[8192,8192] parameter(0)\n"
      "  a0 = f32[8192,8192] parameter(1)\n"
      "  i0 = s32[] constant(0)\n"
      "  init = (s32[], f32[8192,8192], f32[8192,8192]) tuple(i0, w0, a0)\n"
      "  l = (s32[], f32[8192,8192], f32[8192,8192]) while(init), condition=cond, body=body\n"
      "  ROOT out = f32[8192,8192] get-tuple-element(l), index=2\n"
      "}\n";
  tpu_module *m = NULL;
  tpu_program *p = build(src, &m);
  if (p) {
    const int64_t sz = 256 * MiB;
    CHECK_EQ_INT(p->hbm_arg, 2 * sz);
    CHECK_EQ_INT(p->hbm_out, sz);
    CHECK(p->hbm_temp < 4096); /* scalars: the accumulator's state is the output's buffer */
    CHECK(p->hbm_footprint >= 3 * sz && p->hbm_footprint < 3 * sz + 8192);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* A donated parameter (input_output_alias) holds its update: argument + output − alias. */
static void donation(int donated) {
  char src[600];
  snprintf(src, sizeof src,
           "HloModule upd%s\n"
           "ENTRY e {\n"
           "  p = f32[8192,8192] parameter(0)\n"
           "  g = f32[8192,8192] parameter(1)\n"
           "  ROOT q = f32[8192,8192] subtract(p, g)\n"
           "}\n",
           donated ? ", input_output_alias={ {}: (0, {}, may-alias) }" : "");
  tpu_module *m = NULL;
  tpu_program *p = build(src, &m);
  if (p) {
    const int64_t sz = 256 * MiB;
    CHECK_EQ_INT(p->hbm_arg, 2 * sz);
    CHECK_EQ_INT(p->hbm_out, sz);
    CHECK_EQ_INT(p->hbm_alias, donated ? sz : 0);
    CHECK_EQ_INT(p->hbm_footprint, donated ? 2 * sz : 3 * sz);
    if (donated) CHECK_EQ_INT(p->hbm[2].offset, p->hbm[0].offset); /* q in p's buffer */
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* A one-core chip keeps a collective's operand and result in VMEM when they fit, as the XLA
 * TPU compiler's memory-space assignment does (bench/spmd/cases: tp_mlp_fwd's last matmul
 * writes S(1) for the all-reduce; sp_mlp_fwd's all-gathered weights are S(1) for their
 * matmul): the matmul results (8 MiB each) and the weights one combined all-gather gathers
 * for them (8 MiB each) take no HBM, so the step's temp is 0 (memory_analysis: 0). */
static void collective_values_in_vmem(void) {
  const char *src =
      "HloModule coll, num_partitions=4\n"
      "add {\n"
      "  a = bf16[] parameter(0)\n"
      "  b = bf16[] parameter(1)\n"
      "  ROOT c = bf16[] add(a, b)\n"
      "}\n"
      "ENTRY e {\n"
      "  x = bf16[2048,2048] parameter(0)\n"
      "  w = bf16[2048,512] parameter(1)\n"
      "  v = bf16[2048,512] parameter(2)\n"
      "  g = (bf16[2048,2048], bf16[2048,2048]) all-gather(w, v), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={1}, use_global_device_ids=true\n"
      "  g0 = bf16[2048,2048] get-tuple-element(g), index=0\n"
      "  g1 = bf16[2048,2048] get-tuple-element(g), index=1\n"
      "  d = bf16[2048,2048] dot(x, g0), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  e = bf16[2048,2048] dot(d, g1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  ROOT r = bf16[2048,2048] all-reduce(e), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add\n"
      "}\n";
  tpu_module *m = parse(src);
  CHECK(m != NULL);
  tpu_program *p = compile_pod_chip(m, &g_chip, 0);
  if (p) {
    CHECK_EQ_INT(p->hbm_arg, 8 * MiB + 2 * 2 * MiB);
    CHECK_EQ_INT(p->hbm_out, 8 * MiB);
    CHECK_EQ_INT(p->hbm_temp, 0);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* A value dying where an elementwise kernel is defined shares that kernel's buffer, whatever
 * wrote the value: the all-reduced gradient (256 MiB, larger than VMEM) read only by the
 * update that writes the step's output is written in the output's buffer (XLA: the
 * multiply_subtract_fusion reading the all-reduce, dp_mlp_step_f32, temp 0). */
static void dying_collective_result_shares_output(void) {
  const char *src =
      "HloModule upd, num_partitions=4\n"
      "add {\n"
      "  a = f32[] parameter(0)\n"
      "  b = f32[] parameter(1)\n"
      "  ROOT c = f32[] add(a, b)\n"
      "}\n"
      "ENTRY e {\n"
      "  w = f32[8192,8192] parameter(0)\n"
      "  g = f32[8192,8192] parameter(1)\n"
      "  s = f32[8192,8192] all-reduce(g), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add\n"
      "  ROOT u = f32[8192,8192] subtract(w, s)\n"
      "}\n";
  tpu_module *m = parse(src);
  CHECK(m != NULL);
  tpu_program *p = compile_pod_chip(m, &g_chip, 0);
  if (p) {
    CHECK_EQ_INT(p->hbm_out, 256 * MiB);
    CHECK_EQ_INT(p->hbm_temp, 0);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* Temporaries try the output allocations smallest first (XLA walks its allocations from the
 * last made, and makes them largest first): t (256 MiB), dying where the 256 MiB output b is
 * written, takes b's allocation, so w (128 MiB), live across b's write and dead before the
 * 512 MiB output a's, takes a's. Largest first, t took a's and w found none (temp 128 MiB).
 * libtpu compiles this program so: t.0 with b, w.0 with a, temp 32 KiB. */
static void output_allocations_smallest_first(void) {
  const char *src =
      "HloModule order, num_partitions=4\n"
      "add {\n"
      "  a = f32[] parameter(0)\n"
      "  b = f32[] parameter(1)\n"
      "  ROOT c = f32[] add(a, b)\n"
      "}\n"
      "ENTRY e {\n"
      "  wa = f32[16384,8192] parameter(0)\n"
      "  gt = f32[8192,8192] parameter(1)\n"
      "  gw = f32[4096,8192] parameter(2)\n"
      "  t = f32[8192,8192] all-reduce(gt), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add\n"
      "  w = f32[4096,8192] all-reduce(gw), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add\n"
      "  z = f32[] constant(0)\n"
      "  r0 = f32[] reduce(w, z), dimensions={0,1}, to_apply=add\n"
      "  r0b = f32[8192,8192] broadcast(r0), dimensions={}\n"
      "  b = f32[8192,8192] subtract(t, r0b)\n"
      "  bs = f32[4096,8192] slice(b), slice={[0:4096], [0:8192]}\n"
      "  wb = f32[4096,8192] multiply(w, bs)\n"
      "  r = f32[] reduce(wb, z), dimensions={0,1}, to_apply=add\n"
      "  rb = f32[16384,8192] broadcast(r), dimensions={}\n"
      "  a = f32[16384,8192] add(wa, rb)\n"
      "  ROOT o = (f32[16384,8192], f32[8192,8192]) tuple(a, b)\n"
      "}\n";
  tpu_module *m = parse(src); /* the whole pipeline (fusion as the compiler's) */
  CHECK(m != NULL);
  tpu_program *p = compile_pod_chip(m, &g_chip, 1);
  if (p) {
    CHECK_EQ_INT(p->hbm_out, 768 * MiB);
    CHECK_EQ_INT(p->hbm_temp, 0);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* An all-gather's, an all-to-all's or a collective-permute's result never lives in an output
 * allocation (XLA's must_not_live_out): bf16[8192,8192] g dies where d = g.w is written,
 * before the second output e = d.w; libtpu (v5e, 8 devices) gives g 128 MiB of temp when a
 * collective other chips write into makes it, 0 when an all-reduce makes it (it lives in e's
 * allocation): bench/plan_memory/probes *_out.hlo. */
static void gathered_values_not_in_outputs(const char *op, const char *attrs, const char *pshape, int64_t want) {
  char src[2048];
  snprintf(src, sizeof src,
           "HloModule out, num_partitions=8\n"
           "add {\n"
           "  a = bf16[] parameter(0)\n"
           "  b = bf16[] parameter(1)\n"
           "  ROOT c = bf16[] add(a, b)\n"
           "}\n"
           "ENTRY e {\n"
           "  p0 = bf16[%s] parameter(0)\n"
           "  w = bf16[8192,8192] parameter(1)\n"
           "  g = bf16[8192,8192] %s(p0), channel_id=1, %s\n"
           "  d = bf16[8192,8192] dot(g, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
           "  e = bf16[8192,8192] dot(d, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
           "  z = bf16[] constant(0)\n"
           "  r = bf16[] reduce(p0, z), dimensions={0,1}, to_apply=add\n"
           "  ROOT o = (bf16[8192,8192], bf16[8192,8192], bf16[]) tuple(d, e, r)\n"
           "}\n",
           pshape, op, attrs);
  tpu_module *m = parse(src);
  CHECK(m != NULL);
  tpu_program *p = m ? compile_pod_chip(m, &g_chip, 1) : NULL;
  CHECK(p != NULL);
  if (p) CHECK_EQ_INT(p->hbm_temp, want);
  tpu_program_free(p);
  tpu_module_free(m);
}

/* A scan of 4 steps over a carried f32[512,512] activation and a f32[4,512,512] stack (the
 * body differs per test): its condition, and an entry that starts the stack as zeros and
 * reads its last row after the loop. */
#define SCAN4_COND \
  "cond {\n" \
  "  s = (s32[], f32[512,512], f32[4,512,512]) parameter(0)\n" \
  "  i = s32[] get-tuple-element(s), index=0\n" \
  "  n = s32[] constant(4)\n" \
  "  ROOT c = pred[] compare(i, n), direction=LT\n" \
  "}\n"
#define SCAN4_ENTRY \
  "ENTRY e {\n" \
  "  x0 = f32[512,512] parameter(0)\n" \
  "  zf = f32[] constant(0)\n" \
  "  st0 = f32[4,512,512] broadcast(zf), dimensions={}\n" \
  "  i0 = s32[] constant(0)\n" \
  "  init = (s32[], f32[512,512], f32[4,512,512]) tuple(i0, x0, st0)\n" \
  "  w = (s32[], f32[512,512], f32[4,512,512]) while(init), condition=cond, body=body\n" \
  "  stk = f32[4,512,512] get-tuple-element(w), index=2\n" \
  "  s3 = f32[1,512,512] slice(stk), slice={[3:4], [0:512], [0:512]}\n" \
  "  ROOT o = f32[1,512,512] multiply(s3, s3)\n" \
  "}\n"

/* A loop state that fits in VMEM stays there for the whole loop, as the XLA TPU compiler's
 * memory-space assignment keeps it on v5e (bench/spmd fsdp_scan_step: its stacks in S(1),
 * memory_analysis() temp 0): a 4 MiB stack a kernel starts before the loop, the body
 * updates in place and a kernel slices after it (the step's 1 MiB result cannot hold it)
 * takes no HBM; only the carried activation, whose input is the caller's parameter (the
 * state a copy of it), may be an HBM temporary. */
static void loop_state_in_vmem(void) {
  const char *src =
      "HloModule scanv\n"
      SCAN4_COND
      "body {\n"
      "  s = (s32[], f32[512,512], f32[4,512,512]) parameter(0)\n"
      "  i = s32[] get-tuple-element(s), index=0\n"
      "  x = f32[512,512] get-tuple-element(s), index=1\n"
      "  st = f32[4,512,512] get-tuple-element(s), index=2\n"
      "  y = f32[512,512] tanh(x)\n"
      "  y3 = f32[1,512,512] reshape(y)\n"
      "  z = s32[] constant(0)\n"
      "  st2 = f32[4,512,512] dynamic-update-slice(st, y3, i, z, z)\n"
      "  one = s32[] constant(1)\n"
      "  i1 = s32[] add(i, one)\n"
      "  ROOT r = (s32[], f32[512,512], f32[4,512,512]) tuple(i1, y, st2)\n"
      "}\n"
      SCAN4_ENTRY;
  tpu_module *m = NULL;
  tpu_program *p = build(src, &m);
  if (p) {
    printf("scan with a 4 MiB stack: out %lld, temp %lld bytes\n", (long long)p->hbm_out, (long long)p->hbm_temp);
    CHECK_EQ_INT(p->hbm_arg, 1 * MiB);
    CHECK_EQ_INT(p->hbm_out, 1 * MiB);
    CHECK(p->hbm_temp < 4 * MiB); /* the stack in VMEM: at most the carried activation */
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* The same scan with its step fused as the compiler fuses it (878dbf51): one multi-output
 * kernel writes the carried activation and updates the stack in place. The kernel's results
 * stay together, so the loop state's slot holds both and the 4 MiB stack stays in VMEM
 * (bench/spmd fsdp_scan_step: its three stacks, each the in-place result of such a kernel
 * or beside one, in S(1) in the compiler's program; memory_analysis() temp 0; tpusim had
 * them in HBM, temp 26 MiB). */
static void loop_state_multi_output(void) {
  const char *src =
      "HloModule scanm\n"
      SCAN4_COND
      "step {\n"
      "  a = f32[512,512] parameter(0)\n"
      "  t = f32[4,512,512] parameter(1)\n"
      "  j = s32[] parameter(2)\n"
      "  k = s32[] parameter(3)\n"
      "  y = f32[512,512] tanh(a)\n"
      "  y3 = f32[1,512,512] reshape(y)\n"
      "  t2 = f32[4,512,512] dynamic-update-slice(t, y3, j, k, k)\n"
      "  ROOT o = (f32[512,512], f32[4,512,512]) tuple(y, t2)\n"
      "}\n"
      "body {\n"
      "  s = (s32[], f32[512,512], f32[4,512,512]) parameter(0)\n"
      "  i = s32[] get-tuple-element(s), index=0\n"
      "  x = f32[512,512] get-tuple-element(s), index=1\n"
      "  st = f32[4,512,512] get-tuple-element(s), index=2\n"
      "  z = s32[] constant(0)\n"
      "  f = (f32[512,512], f32[4,512,512]) fusion(x, st, i, z), kind=kLoop, calls=step\n"
      "  y = f32[512,512] get-tuple-element(f), index=0\n"
      "  st2 = f32[4,512,512] get-tuple-element(f), index=1\n"
      "  one = s32[] constant(1)\n"
      "  i1 = s32[] add(i, one)\n"
      "  ROOT r = (s32[], f32[512,512], f32[4,512,512]) tuple(i1, y, st2)\n"
      "}\n"
      SCAN4_ENTRY;
  tpu_module *m = NULL;
  tpu_program *p = build(src, &m);
  if (p) {
    printf("fused scan with a 4 MiB stack: out %lld, temp %lld bytes\n", (long long)p->hbm_out,
           (long long)p->hbm_temp);
    CHECK_EQ_INT(p->hbm_out, 1 * MiB);
    CHECK(p->hbm_temp < 4 * MiB); /* the stack in VMEM with the kernel's other result */
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* A gradient padded with rows of zeros for its reduce-scatter (rs_pad.c) holds only its
 * unpadded rows: the XLA TPU compiler's all-reduce-scatter fusion supplies the padding as it
 * streams (layout.c tpu__held_shape). The same fusion read by anything else as well holds
 * the padded rows. f32 [8192,8192] (256 MiB, in HBM) padded by 64 rows (2 MiB). */
static void reduce_scatter_padding_not_held(int other_reader) {
  char src[2048];
  snprintf(src, sizeof src,
           "HloModule rs, num_partitions=4\n"
           "fpad {\n"
           "  a = f32[8192,1024] parameter(0)\n"
           "  b = f32[1024,8192] parameter(1)\n"
           "  d = f32[8192,8192] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
           "  z = f32[] constant(0)\n"
           "  ROOT p = f32[8256,8192] pad(d, z), padding=0_64x0_0\n"
           "}\n"
           "add {\n"
           "  x = f32[] parameter(0)\n"
           "  y = f32[] parameter(1)\n"
           "  ROOT s = f32[] add(x, y)\n"
           "}\n"
           "ENTRY e {\n"
           "  a = f32[8192,1024] parameter(0)\n"
           "  b = f32[1024,8192] parameter(1)\n"
           "  g = f32[8256,8192] fusion(a, b), kind=kOutput, calls=fpad\n"
           "  r = f32[2064,8192] reduce-scatter(g), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, dimensions={0}, to_apply=add\n"
           "  %s\n"
           "}\n",
           other_reader ? "s = f32[2064,8192] slice(g), slice={[0:2064], [0:8192]}\n"
                          "  ROOT t = (f32[2064,8192], f32[2064,8192]) tuple(r, s)"
                        : "ROOT t = (f32[2064,8192]) tuple(r)");
  tpu_module *m = parse(src);
  CHECK(m != NULL);
  tpu_program *p = compile_pod_chip(m, &g_chip, 0);
  if (p) {
    printf("padded gradient for a reduce-scatter%s: temp %lld bytes\n", other_reader ? " (and a slice)" : "",
           (long long)p->hbm_temp);
    CHECK_EQ_INT(p->hbm_temp, other_reader ? 8256 * 8192 * 4LL : 256 * MiB);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

/* On a one-core chip a gradient collective's operand runs before a while loop it does not
 * depend on, as the XLA TPU compiler's schedule has it (mem_sched.c hoist_collective_feeds;
 * libtpu's v5e planner steps compute the LM head's weight gradient before the backward
 * layer loop and hold it across the loop; its v5p steps compute it after the loop). Here dw
 * (f32[8192,8192], 256 MiB) feeds an all-reduce a matmul reads with the loop's result, and
 * the loop's body holds a 256 MiB product t. The post-order and the lowest-peak orders run dw
 * after the loop (v5p keeps that); on v5e it runs before the loop and lives beside t. */
static void collective_feed_before_loop(const char *chip_name) {
  const char *src =
      "HloModule lm_bwd, num_partitions=4\n"
      "add {\n"
      "  x = f32[] parameter(0)\n"
      "  y = f32[] parameter(1)\n"
      "  ROOT s = f32[] add(x, y)\n"
      "}\n"
      "cond {\n"
      "  s = (s32[], f32[4096,8192]) parameter(0)\n"
      "  i = s32[] get-tuple-element(s), index=0\n"
      "  n = s32[] constant(4)\n"
      "  ROOT c = pred[] compare(i, n), direction=LT\n"
      "}\n"
      "body {\n"
      "  s = (s32[], f32[4096,8192]) parameter(0)\n"
      "  i = s32[] get-tuple-element(s), index=0\n"
      "  x = f32[4096,8192] get-tuple-element(s), index=1\n"
      "  t = f32[8192,8192] dot(x, x), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
      "  y = f32[4096,8192] dot(x, t), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  one = s32[] constant(1)\n"
      "  i1 = s32[] add(i, one)\n"
      "  ROOT r = (s32[], f32[4096,8192]) tuple(i1, y)\n"
      "}\n"
      "ENTRY e {\n"
      "  a = f32[1024,8192] parameter(0)\n"
      "  g = f32[1024,8192] parameter(1)\n"
      "  x0 = f32[4096,8192] parameter(2)\n"
      "  i0 = s32[] constant(0)\n"
      "  init = (s32[], f32[4096,8192]) tuple(i0, x0)\n"
      "  w = (s32[], f32[4096,8192]) while(init), condition=cond, body=body\n"
      "  xl = f32[4096,8192] get-tuple-element(w), index=1\n"
      "  dw = f32[8192,8192] dot(a, g), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
      "  ar = f32[8192,8192] all-reduce(dw), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add\n"
      "  o = f32[8192,4096] dot(ar, xl), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
      "  ROOT out = (f32[4096,8192], f32[8192,4096]) tuple(xl, o)\n"
      "}\n";
  tpu_module *m = parse(src);
  CHECK(m != NULL);
  tpu_chip chip;
  tpu_diag d;
  CHECK(tpu_chip_load(chip_name, &chip, &d) == TPU_OK);
  int megacore = chip.tensorcores > 1;
  tpu_program *p = compile_pod_chip(m, &chip, 1);
  int at_dw = -1, at_w = -1; /* the entry's order as memory-schedule left it */
  const tpu_comp *c = m ? m->entry : NULL;
  for (int i = 0; c && i < c->norder; i++) {
    const tpu_instr *in = c->mem_order ? c->mem_order[i] : c->order[i];
    if (!strcmp(in->name, "dw")) at_dw = i;
    if (!strcmp(in->name, "w")) at_w = i;
  }
  printf("weight gradient and a loop on %s: dw at %d, the loop at %d; temp %lld bytes\n", chip_name, at_dw, at_w,
         p ? (long long)p->hbm_temp : -1LL);
  CHECK(at_dw >= 0 && at_w >= 0);
  if (megacore)
    CHECK(at_dw > at_w);
  else
    CHECK(at_dw < at_w);
  if (p && !megacore) CHECK(p->hbm_temp >= 256 * MiB + 256 * MiB); /* dw (or its sum) beside the loop's product */
  tpu_program_free(p);
  tpu_module_free(m);
}

/* The sharing rule of XLA's CanShareOperandBufferWithUser (hlo_dataflow_analysis.cc) and its
 * heap simulator: an elementwise kernel writes over an operand that dies there only when the
 * two have the same shape (element type, dimensions, layout), and the heap shares only a
 * value its user reads directly, not an element of a tuple (a multi-output fusion's result,
 * read through get-tuple-element). A dot fused with the row sum of its [8192,8192] f32
 * result (256 MiB, a two-result fusion) feeds an elementwise kernel whose result a sort
 * reads: as bf16 (128 MiB) beside the f32, libtpu's memory_analysis() temp is 402,685,440
 * bytes; as f32, 536,903,168 (bench/plan_memory/probes cvt_sort.hlo, same_sort.hlo). A sort
 * whose f32 result dies into tanh: the tanh writes over it (sort_f32.hlo: libtpu's
 * buffer assignment puts tanh at the sorted value's offset). */
static void operand_sharing_needs_same_shape(int bf16) {
  const char *cvt =
      "HloModule cvt_sort\n"
      "\n"
      "add {\n"
      "  x = f32[] parameter(0)\n"
      "  y = f32[] parameter(1)\n"
      "  ROOT s = f32[] add(x, y)\n"
      "}\n"
      "\n"
      "\n"
      "cmp {\n"
      "  x = bf16[] parameter(0)\n"
      "  y = bf16[] parameter(1)\n"
      "  ROOT l = pred[] compare(x, y), direction=LT\n"
      "}\n"
      "\n"
      "addbf16 {\n"
      "  x = bf16[] parameter(0)\n"
      "  y = bf16[] parameter(1)\n"
      "  ROOT s = bf16[] add(x, y)\n"
      "}\n"
      "\n"
      "ENTRY main {\n"
      "  p0 = f32[8192,4096] parameter(0)\n"
      "  w = f32[4096,8192] parameter(1)\n"
      "  w2 = bf16[8192,256] parameter(2)\n"
      "  w3 = bf16[8192,256] parameter(3)\n"
      "  a = f32[8192,8192] dot(p0, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  z = f32[] constant(0)\n"
      "  zz = bf16[] constant(0)\n"
      "  s = f32[8192] reduce(a, z), dimensions={1}, to_apply=add\n"
      "  sb = f32[8192,8192] broadcast(s), dimensions={0}\n"
      "  t = f32[8192,8192] multiply(a, sb)\n"
      "  e = f32[8192,8192] tanh(t)\n"
      "  b = bf16[8192,8192] convert(e)\n"
      "  c = bf16[8192,8192] sort(b), dimensions={1}, to_apply=cmp\n"
      "  ROOT r = bf16[8192] reduce(c, zz), dimensions={1}, to_apply=addbf16\n"
      "}\n";
  const char *same =
      "HloModule same_sort\n"
      "\n"
      "add {\n"
      "  x = f32[] parameter(0)\n"
      "  y = f32[] parameter(1)\n"
      "  ROOT s = f32[] add(x, y)\n"
      "}\n"
      "\n"
      "\n"
      "cmp {\n"
      "  x = f32[] parameter(0)\n"
      "  y = f32[] parameter(1)\n"
      "  ROOT l = pred[] compare(x, y), direction=LT\n"
      "}\n"
      "\n"
      "ENTRY main {\n"
      "  p0 = f32[8192,4096] parameter(0)\n"
      "  w = f32[4096,8192] parameter(1)\n"
      "  w2 = bf16[8192,256] parameter(2)\n"
      "  w3 = bf16[8192,256] parameter(3)\n"
      "  a = f32[8192,8192] dot(p0, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  z = f32[] constant(0)\n"
      "  zz = f32[] constant(0)\n"
      "  s = f32[8192] reduce(a, z), dimensions={1}, to_apply=add\n"
      "  sb = f32[8192,8192] broadcast(s), dimensions={0}\n"
      "  t = f32[8192,8192] multiply(a, sb)\n"
      "  e = f32[8192,8192] tanh(t)\n"
      "  b = f32[8192,8192] add(e, t)\n"
      "  c = f32[8192,8192] sort(b), dimensions={1}, to_apply=cmp\n"
      "  ROOT r = f32[8192] reduce(c, zz), dimensions={1}, to_apply=add\n"
      "}\n";
  tpu_module *m = NULL;
  tpu_chip chip;
  tpu_program *p = compile_for_with("v5e", bf16 ? cvt : same, 1, &chip, &m); /* fused, as `tpusim compile` */
  if (p) {
    printf("%s result of a dying two-result fusion's f32: temp %lld bytes\n", bf16 ? "bf16" : "f32",
           (long long)p->hbm_temp);
    int64_t want = bf16 ? 384 * MiB : 512 * MiB; /* without the rule 256 MiB: written over the f32 */
    CHECK(p->hbm_temp >= want);
    CHECK(p->hbm_temp < want + MiB);
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

static void operand_sharing_same_shape_single_result(void) {
  const char *src =
      "HloModule sort_f32\n"
      "\n"
      "cmpf {\n"
      "  x = f32[] parameter(0)\n"
      "  y = f32[] parameter(1)\n"
      "  ROOT l = pred[] compare(x, y), direction=LT\n"
      "}\n"
      "\n"
      "cmpo {\n"
      "  x = f32[] parameter(0)\n"
      "  y = f32[] parameter(1)\n"
      "  ROOT l = pred[] compare(x, y), direction=LT\n"
      "}\n"
      "\n"
      "addo {\n"
      "  x = f32[] parameter(0)\n"
      "  y = f32[] parameter(1)\n"
      "  ROOT s = f32[] add(x, y)\n"
      "}\n"
      "\n"
      "ENTRY main {\n"
      "  p = f32[8192,8192] parameter(0)\n"
      "  a = f32[8192,8192] sort(p), dimensions={1}, to_apply=cmpf\n"
      "  t = f32[8192,8192] tanh(a)\n"
      "  b = f32[8192,8192] convert(t)\n"
      "  c = f32[8192,8192] sort(b), dimensions={1}, to_apply=cmpo\n"
      "  z = f32[] constant(0)\n"
      "  ROOT r = f32[8192] reduce(c, z), dimensions={1}, to_apply=addo\n"
      "}\n";
  tpu_module *m = NULL;
  tpu_chip chip;
  tpu_program *p = compile_for_with("v5e", src, 1, &chip, &m);
  if (p) {
    printf("tanh over a dying sort result: temp %lld bytes\n", (long long)p->hbm_temp);
    CHECK(p->hbm_temp < 256 * MiB + MiB); /* the sort's result and the tanh share */
  }
  tpu_program_free(p);
  tpu_module_free(m);
}

int main(void) {
  if (!closed_form_v5e(&g_chip)) return 1;
  dying_collective_result_shares_output();
  output_allocations_smallest_first();
  gathered_values_not_in_outputs("all-gather", "replica_groups=[1,8]<=[8], dimensions={0}, use_global_device_ids=true",
                                 "1024,8192", 128 * MiB);
  gathered_values_not_in_outputs("all-to-all", "replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}", "8192,8192",
                                 128 * MiB);
  gathered_values_not_in_outputs("collective-permute",
                                 "source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}",
                                 "8192,8192", 128 * MiB);
  gathered_values_not_in_outputs("all-reduce", "replica_groups=[1,8]<=[8], use_global_device_ids=true, to_apply=add",
                                 "8192,8192", 0);
  collective_values_in_vmem();
  loop_stack_in_place();
  heap_best_fit();
  stack_read_by_a_later_loop();
  loop_result_elements_die_apart();
  weight_gradient_frees_early();
  collective_feed_before_loop("v5e");
  collective_feed_before_loop("v5p");
  loop_state_in_vmem();
  loop_state_multi_output();
  loop_read_only_and_copied();
  donation(0);
  donation(1);
  reduce_scatter_padding_not_held(0);
  reduce_scatter_padding_not_held(1);
  operand_sharing_needs_same_shape(1);
  operand_sharing_needs_same_shape(0);
  operand_sharing_same_shape_single_result();
  CHECK_DONE();
}
