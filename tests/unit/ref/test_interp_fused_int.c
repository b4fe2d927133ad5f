/* The reference interpreter's fused s32/u32 trees (ref/fused.c): a chain of 32-bit integer
 * ops whose values are read once (Threefry's rotate-xor rounds) runs as one tree into one
 * result, with the bits each op gives on its own. Checked against the same ops with every
 * intermediate value also an output (read twice: nothing fused), element by element and
 * against C, and by counting allocations (the allocation hook's counter). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "hlo/hlo.h"
#include "ref/ref.h"

/* z = (x + y) ^ rotl(y, r) (the rotate as shl | shr by 32 - r: r = 0 and r > 32 shift out);
 * w = max(min(sra(s, c), t), s) - t on s32 (c >= 32 fills with the sign). */
#define BODY                                          \
  "  x = u32[6,4] parameter(0)\n"                    \
  "  y = u32[6,4] parameter(1)\n"                    \
  "  r = u32[] parameter(2)\n"                       \
  "  s = s32[6,4] parameter(3)\n"                    \
  "  t = s32[6,4] parameter(4)\n"                    \
  "  c = s32[] parameter(5)\n"                       \
  "  a = u32[6,4] add(x, y)\n"                       \
  "  rb = u32[6,4] broadcast(r), dimensions={}\n"    \
  "  shl = u32[6,4] shift-left(y, rb)\n"             \
  "  k32 = u32[] constant(32)\n"                     \
  "  sub = u32[] subtract(k32, r)\n"                 \
  "  sb = u32[6,4] broadcast(sub), dimensions={}\n"  \
  "  shr = u32[6,4] shift-right-logical(y, sb)\n"    \
  "  o = u32[6,4] or(shl, shr)\n"                    \
  "  z = u32[6,4] xor(a, o)\n"                       \
  "  cb = s32[6,4] broadcast(c), dimensions={}\n"    \
  "  sa = s32[6,4] shift-right-arithmetic(s, cb)\n"  \
  "  mn = s32[6,4] minimum(sa, t)\n"                 \
  "  mx = s32[6,4] maximum(mn, s)\n"                 \
  "  w = s32[6,4] subtract(mx, t)\n"

static const char *FUSED = "HloModule fused\nENTRY e {\n" BODY
                           "  ROOT out = (u32[6,4], s32[6,4]) tuple(z, w)\n}\n";

/* Every intermediate array is an output too: read twice, so each op runs on its own. */
static const char *SPLIT = "HloModule split\nENTRY e {\n" BODY
                           "  ROOT out = (u32[6,4], s32[6,4], u32[6,4], u32[6,4], u32[6,4], u32[6,4], u32[6,4], "
                           "u32[6,4], u32[6,4], s32[6,4], s32[6,4], s32[6,4], s32[6,4]) tuple(z, w, a, rb, shl, sb, "
                           "shr, o, z, cb, sa, mn, mx)\n}\n";

enum { N = 24 };

static uint32_t rotl_ref(uint32_t y, uint32_t r) {
  uint32_t l = r >= 32 ? 0u : y << r, rr = 32u - r;
  return l | (rr >= 32 ? 0u : y >> rr);
}

static int32_t sra_ref(int32_t v, int32_t c) {
  uint32_t n = (uint32_t)c;
  if (n >= 32) return v < 0 ? -1 : 0;
  return v >= 0 ? v >> n : ~((~v) >> n);
}

/* Runs m on inputs made from seed and rotation r, shift c; returns the allocations of the run
 * (-1 on failure); out gets the result. */
static long run(const tpu_module *m, uint32_t seed, uint32_t r, int32_t c, tpu_tensor *out, uint32_t *xs,
                uint32_t *ys, int32_t *ss, int32_t *ts) {
  tpu_diag d;
  tpu_tensor in[6];
  int64_t dims[2] = {6, 4};
  memset(in, 0, sizeof in);
  for (int i = 0; i < 6; i++) {
    int scalar = i == 2 || i == 5;
    tpu_dtype t = i < 3 ? TPU_U32 : TPU_S32;
    if (tpu_tensor_alloc(&in[i], t, scalar ? 0 : 2, dims, &d) != TPU_OK) return -1;
  }
  uint32_t h = seed;
  for (int e = 0; e < N; e++) {
    h = h * 1664525u + 1013904223u;
    xs[e] = h;
    h = h * 1664525u + 1013904223u;
    ys[e] = h;
    ss[e] = (int32_t)(h ^ 0x5a5a5a5au);
    ts[e] = (int32_t)(h >> 3) - (1 << 28);
    ((uint32_t *)in[0].data)[e] = xs[e];
    ((uint32_t *)in[1].data)[e] = ys[e];
    ((int32_t *)in[3].data)[e] = ss[e];
    ((int32_t *)in[4].data)[e] = ts[e];
  }
  ((uint32_t *)in[2].data)[0] = r;
  ((int32_t *)in[5].data)[0] = c;
  tpu_alloc_fail_after(0); /* resets the counter */
  tpu_status st = tpu_ref_run(m, in, 6, out, &d);
  long allocs = tpu_alloc_fail_after(0);
  for (int i = 0; i < 6; i++) tpu_tensor_free(&in[i]);
  return st == TPU_OK ? allocs : -1;
}

int main(void) {
  tpu_module *fused = NULL, *split = NULL;
  tpu_diag d;
  CHECK_EQ_INT(tpu_hlo_parse("fused.hlo", FUSED, strlen(FUSED), &fused, &d), TPU_OK);
  CHECK_EQ_INT(tpu_hlo_parse("split.hlo", SPLIT, strlen(SPLIT), &split, &d), TPU_OK);
  if (!fused || !split) CHECK_DONE();
  fused->keep_plans = split->keep_plans = 1; /* the runs after the first count values only */
  const uint32_t rs[] = {0, 1, 13, 31, 32, 33, 0xffffffffu};
  const int32_t cs[] = {0, 3, 31, 32, 40, -1};
  long af = 0, as = 0;
  for (int i = 0; i < 7; i++) {
    uint32_t xs[N], ys[N];
    int32_t ss[N], ts[N];
    tpu_tensor of, os;
    af = run(fused, 7u * (uint32_t)i + 1u, rs[i], cs[i % 6], &of, xs, ys, ss, ts);
    as = run(split, 7u * (uint32_t)i + 1u, rs[i], cs[i % 6], &os, xs, ys, ss, ts);
    CHECK(af > 0 && as > 0);
    if (af <= 0 || as <= 0) break;
    for (int k = 0; k < 2; k++) CHECK(memcmp(of.elems[k].data, os.elems[k].data, N * 4) == 0);
    for (int e = 0; e < N; e++) {
      uint32_t z = (xs[e] + ys[e]) ^ rotl_ref(ys[e], rs[i]);
      int32_t v = sra_ref(ss[e], cs[i % 6]);
      v = v < ts[e] ? v : ts[e];
      v = v > ss[e] ? v : ss[e];
      int32_t w = (int32_t)((uint32_t)v - (uint32_t)ts[e]);
      CHECK(((const uint32_t *)of.elems[0].data)[e] == z);
      CHECK(((const int32_t *)of.elems[1].data)[e] == w);
    }
    tpu_tensor_free(&of);
    tpu_tensor_free(&os);
  }
  /* Fused: z and w are one allocation each (their six and five array ops in one tree each);
   * unfused, the nine others are allocated too (16; the split run 17: z read twice). */
  printf("allocations: fused %ld, split %ld\n", af, as);
  CHECK(af <= 6);
  CHECK(as >= af + 11);
  tpu_module_free(fused);
  tpu_module_free(split);
  CHECK_DONE();
}
