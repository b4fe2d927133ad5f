/* A sort kernel's work and least time (src/compile/backend/sort_cost.c): the bitonic network's
 * vector ALU operations as libtpu's bundles count them, the waits of its stages within
 * registers, and the kernel's body against the bundles of the same compiled sort
 * (bench/fidelity/probes/sort_bundles.py, v5e). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util.h"
#include "unit/compile/backend_util.h"

/* v5e's wait per stage within registers, fitted on the probe's tune shapes (sort_bundles.py
 * fit; docs/timing.md); the v5e preset carries it with sort_network. */
#define V5E_LANE_STAGE 20.2

/* A compiled program's sort of x (TYPE, LAYOUT) with its iota, the comparator of a stable
 * f32 sort as the compiler leaves it (TOTALORDER expanded, the iotas' tie-break), or s32. */
static void sort_src(char *buf, size_t n, const char *ty, const char *ity, const char *lay, int f32) {
  const char *cmp_f32 =
      "%c {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n  %i = s32[] parameter(2)\n  %j = s32[] parameter(3)\n"
      "  %z = f32[] constant(0)\n  %q = f32[] constant(nan)\n  %k = s32[] constant(0)\n  %m = s32[] constant(2147483647)\n"
      "  %ea = pred[] compare(%a, %z), direction=EQ\n  %sa = f32[] select(%ea, %z, %a)\n"
      "  %na = pred[] compare(%a, %a), direction=NE\n  %ta = f32[] select(%na, %q, %sa)\n"
      "  %ba = s32[] bitcast-convert(%ta)\n  %la = pred[] compare(%ba, %k), direction=LT\n"
      "  %xa = s32[] xor(%m, %ba)\n  %ka = s32[] select(%la, %xa, %ba)\n"
      "  %eb = pred[] compare(%b, %z), direction=EQ\n  %sb = f32[] select(%eb, %z, %b)\n"
      "  %nb = pred[] compare(%b, %b), direction=NE\n  %tb = f32[] select(%nb, %q, %sb)\n"
      "  %bb = s32[] bitcast-convert(%tb)\n  %lb = pred[] compare(%bb, %k), direction=LT\n"
      "  %xb = s32[] xor(%m, %bb)\n  %kb = s32[] select(%lb, %xb, %bb)\n"
      "  %lt = pred[] compare(%ka, %kb), direction=LT\n  %gt = pred[] compare(%kb, %ka), direction=LT\n"
      "  %eq = pred[] compare(%lt, %gt), direction=EQ\n  %il = pred[] compare(%i, %j), direction=LT\n"
      "  ROOT %r = pred[] select(%eq, %il, %lt)\n}\n";
  const char *cmp_s32 =
      "%c {\n  %a = s32[] parameter(0)\n  %b = s32[] parameter(1)\n  %i = s32[] parameter(2)\n  %j = s32[] parameter(3)\n"
      "  %lt = pred[] compare(%a, %b), direction=LT\n  %gt = pred[] compare(%b, %a), direction=LT\n"
      "  %eq = pred[] compare(%lt, %gt), direction=EQ\n  %il = pred[] compare(%i, %j), direction=LT\n"
      "  ROOT %r = pred[] select(%eq, %il, %lt)\n}\n";
  snprintf(buf, n,
           "HloModule s, is_scheduled=true\n%sENTRY e {\n  x = %s%s parameter(0)\n  i = %s%s iota(), iota_dimension=1\n"
           "  r = (%s%s, %s%s) sort(x, i), dimensions={1}, to_apply=%%c\n"
           "  ROOT g = %s%s get-tuple-element(r), index=0\n}\n",
           f32 ? cmp_f32 : cmp_s32, ty, lay, ity, lay, ty, lay, ity, lay, ty, lay);
}

/* The body (min_body_cycles) and vector ALU operations of sort r compiled for chip c. */
static int sort_body(const char *src, const tpu_chip *c, double *body, int64_t *valu) {
  tpu_module *m = NULL;
  tpu_program *p = compile_src_on(src, c, &m);
  int r = p ? op_named(p, "r") : -1;
  *body = r >= 0 ? p->ops[r].min_body_cycles : -1;
  *valu = 0;
  for (int i = 0; p && i < p->ninsns; i++)
    if (p->insns[i].op == r && p->insns[i].opc == TPU_ISA_VPU) *valu += p->insns[i].vregs * p->insns[i].ops;
  tpu_program_free(p);
  tpu_module_free(m);
  return r >= 0;
}

/* libtpu's v5e kernels (tune probes): f32[8,1024]{1,0} and its iota 4,697 bundles (14,007
 * vector ALU operations), s32[32,256]{1,0} 2,475 (5,682), f32[256,64]{0,1} 2,385 (9,463):
 * the network's operations within 10 % and its body within 20 %; without the permute waits
 * the lane sorts fall short. */
static void v5e_kernels(void) {
  static const struct {
    const char *ty, *ity, *lay;
    int f32;
    double bundles, valu;
    int lanes;
  } k[] = {
      {"f32[8,1024]", "s32[8,1024]", "{1,0:T(8,128)}", 1, 4697, 14007, 1},
      {"s32[32,256]", "s32[32,256]", "{1,0:T(8,128)}", 0, 2475, 5682, 1},
      {"f32[256,64]", "s32[256,64]", "{0,1:T(8,128)}", 1, 2385, 9463, 0},
  };
  tpu_chip c, off, preset, old;
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &c, &d) == TPU_OK);
  preset = c;
  CHECK(preset.sort_network == 1 && preset.sort_lane_stage_cycles == V5E_LANE_STAGE);
  old = c;
  old.sort_network = 0; /* a chip file without the field: the earlier count */
  c.sort_network = 1;
  c.sort_lane_stage_cycles = V5E_LANE_STAGE;
  off = c;
  off.sort_lane_stage_cycles = 0; /* the network's operations alone */
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    char src[4000];
    sort_src(src, sizeof src, k[i].ty, k[i].ity, k[i].lay, k[i].f32);
    double body = 0, body0 = 0, bodyp = 0, bodyo = 0;
    int64_t valu = 0, valu0 = 0, valup = 0, valuo = 0;
    CHECK(sort_body(src, &c, &body, &valu));
    CHECK(sort_body(src, &off, &body0, &valu0));
    CHECK(sort_body(src, &preset, &bodyp, &valup));
    CHECK(sort_body(src, &old, &bodyo, &valuo));
    CHECK(bodyp == body && valup == valu); /* the preset runs the network */
    CHECK(bodyo == 0 && valuo < valu / 2); /* without the field: the earlier count, no least body */
    printf("sort %s%s on v5e: body %.0f cycles (libtpu %.0f bundles), without waits %.0f; %lld vector ALU ops (libtpu %.0f)\n",
           k[i].ty, k[i].lay, body, k[i].bundles, body0, (long long)valu, k[i].valu);
    CHECK(fabs((double)valu / k[i].valu - 1) <= 0.10);
    CHECK(fabs(body / k[i].bundles - 1) <= 0.20);
    if (k[i].lanes) CHECK(body0 < 0.85 * k[i].bundles);
    else CHECK(fabs(body - body0) < 1);
  }
}

/* A sort of N elements runs the network of the next power of two: 2049 costs what 4096 does
 * (libtpu: s32[200,3000] 345,197 bundles as run, 25 blocks of 8 rows x 32 registers). */
static void padded_network(void) {
  tpu_chip c;
  tpu_diag d;
  CHECK(tpu_chip_load("v5e", &c, &d) == TPU_OK);
  c.sort_lane_stage_cycles = V5E_LANE_STAGE;
  char a[4000], b[4000];
  sort_src(a, sizeof a, "s32[8,2049]", "s32[8,2049]", "{1,0:T(8,128)}", 0);
  sort_src(b, sizeof b, "s32[8,4096]", "s32[8,4096]", "{1,0:T(8,128)}", 0);
  double ba = 0, bb = 0;
  int64_t va = 0, vb = 0;
  CHECK(sort_body(a, &c, &ba, &va));
  CHECK(sort_body(b, &c, &bb, &vb));
  printf("s32[8,2049] sort %.0f cycles (%lld ops), s32[8,4096] %.0f (%lld)\n", ba, (long long)va, bb, (long long)vb);
  CHECK(fabs((double)(va - vb)) <= 0.001 * (double)vb && fabs(ba - bb) < 1);
}

/* A megacore chip (v5p) runs a sort that fits the registers on one core and shares a looping
 * one's blocks between its two: libtpu's v5p f32[8,1024] 4,663 bundles (v5e 4,697), s32[64,4096]
 * 53,281 as run (v5e 106,061); fitted wait 21.0 cycles (sort_bundles.py). */
static void megacore_share(void) {
  tpu_chip c, one;
  tpu_diag d;
  CHECK(tpu_chip_load("v5p", &c, &d) == TPU_OK);
  c.sort_lane_stage_cycles = 21.0;
  one = c;
  one.tensorcores = 1;
  char a[4000], b[4000];
  sort_src(a, sizeof a, "f32[8,1024]", "s32[8,1024]", "{1,0:T(8,128)}", 1);
  sort_src(b, sizeof b, "s32[64,4096]", "s32[64,4096]", "{1,0:T(8,128)}", 0);
  double ba = 0, bb = 0, bb1 = 0;
  int64_t v = 0;
  CHECK(sort_body(a, &c, &ba, &v));
  CHECK(sort_body(b, &c, &bb, &v));
  CHECK(sort_body(b, &one, &bb1, &v));
  printf("v5p: f32[8,1024] sort %.0f cycles (libtpu 4,663), s32[64,4096] %.0f (53,281; one core %.0f)\n", ba, bb, bb1);
  CHECK(fabs(ba / 4663 - 1) <= 0.10);
  CHECK(fabs(bb / 53281 - 1) <= 0.10);
  CHECK(fabs(bb1 / bb - 2) < 0.01);
}

int main(void) {
  v5e_kernels();
  megacore_share();
  padded_network();
  CHECK_DONE();
}
