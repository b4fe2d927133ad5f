/* The ICI link model against the closed forms of "How to Scale Your Model" (sharding.md;
 * /work/shared/reference/validation.md) on contention-free cases, exactly against the
 * model's own alpha-beta forms, and where links are shared, by how much it differs. */
#include <time.h>

#include "base/alloc.h"
#include "check.h"
#include "pod/ici.h"

static tpu_chip chip_of(const char *name) {
  tpu_chip c;
  tpu_diag d;
  if (tpu_chip_load(name, &c, &d) != TPU_OK) {
    fprintf(stderr, "cannot load chip %s: %s\n", name, d.msg);
    exit(1);
  }
  return c;
}

static tpu_topology topo(const char *chip, const char *text) {
  tpu_chip c = chip_of(chip);
  tpu_topology t;
  tpu_diag d;
  if (tpu_topology_parse(text, &c, &t, &d) != TPU_OK) {
    fprintf(stderr, "bad topology %s: %s\n", text, d.msg);
    exit(1);
  }
  return t;
}

/* Groups along axis a of a topology: every line of the slice along that axis. */
static int64_t *axis_groups(const tpu_topology *t, int a, int64_t *ngroups) {
  int64_t s = t->dims[a], n = t->nchips / s, k = 0;
  int64_t *g = malloc(sizeof *g * (size_t)t->nchips);
  for (int64_t c = 0; c < t->nchips; c++) {
    int64_t xyz[3];
    tpu_topology_coords(t, c, xyz);
    if (xyz[a] != 0) continue;
    for (int64_t i = 0; i < s; i++) {
      xyz[a] = i;
      g[k++] = tpu_topology_chip_at(t, xyz);
    }
  }
  *ngroups = n;
  return g;
}

static tpu_ici_result run(const tpu_topology *t, tpu_ici_kind kind, const int64_t *groups,
                          int64_t ngroups, int64_t size, double operand) {
  tpu_ici_op op = {kind, groups, ngroups, size, NULL, 0, operand, 0};
  tpu_ici_result r;
  tpu_diag d;
  tpu_status st = tpu_ici_time(t, &op, NULL, &r, &d);
  CHECK_EQ_INT(st, TPU_OK);
  if (st) fprintf(stderr, "  %s\n", d.msg);
  return r;
}

static double rel(double a, double b) { return a > b ? a / b - 1 : b / a - 1; }
static double maxd(double a, double b) { return a > b ? a : b; }

/* SB: bidirectional ring all-gather of V bytes (the whole array) over |X| chips:
 * T = max(T_min |X| / 2, V / W_ici), W_ici = 2 W (both directions). */
static double sb_all_gather(double V, double X, double W, double tmin) {
  return maxd(tmin * X / 2, V / (2 * W));
}

static void test_ring_one_axis(void) {
  tpu_topology t = topo("v5e", "16x16"); /* both axes wrap */
  double W = t.link_bw, a = t.hop_s;
  int64_t ng;
  int64_t *g = axis_groups(&t, 0, &ng);
  CHECK_EQ_INT(ng, 16);
  /* All-gather of a 16 MiB shard per chip over x (16 rings at once, disjoint links). */
  double v = 16 << 20, V = 16 * v;
  tpu_ici_result r = run(&t, TPU_ICI_ALL_GATHER, g, ng, 16, v);
  /* The model's form: 8 pieces forward on the busiest link, 8 hops. */
  CHECK_NEAR(r.seconds, 8 * v / W + 8 * a, 1e-12);
  CHECK_EQ_INT(r.hops, 8);
  double sb = sb_all_gather(V, 16, W, a);
  printf("all-gather 16 x 16 MiB over a 16-ring: model %.1f us, SB %.1f us (%+.2f%%)\n",
         r.seconds * 1e6, sb * 1e6, 100 * (r.seconds / sb - 1));
  CHECK(rel(r.seconds, sb) < 0.005); /* bandwidth-bound: differs by the 8 us of hops */
  CHECK_NEAR(r.bus_bw, V / r.seconds * 15.0 / 16, 1e-3);
  CHECK_NEAR(r.busiest_util, (8 * v / W) / r.seconds, 1e-12);
  /* + links carry 8 pieces, - links 7: every x link of the slice is used. */
  CHECK_EQ_INT(r.links_used, 2 * 256);
  CHECK_NEAR(r.total_link_bytes, 256 * 15 * v, 1);
  CHECK_NEAR(r.max_chip_bytes, 15 * v, 1);
  CHECK_EQ_INT(r.chips, 256);

  /* Latency-bound: a 1 kB shard. SB: T_min |X| / 2 = 8 us; the model adds the bytes. */
  tpu_ici_result s = run(&t, TPU_ICI_ALL_GATHER, g, ng, 16, 1024);
  double sbs = sb_all_gather(16 * 1024, 16, W, a);
  printf("all-gather 16 x 1 kB over a 16-ring: model %.2f us, SB %.2f us (%+.1f%%)\n",
         s.seconds * 1e6, sbs * 1e6, 100 * (s.seconds / sbs - 1));
  CHECK_NEAR(s.seconds, 8 * 1024 / W + 8 * a, 1e-15);
  CHECK(s.seconds - sbs <= 16 * 1024 / (2 * W) + 1e-15);

  /* All-reduce = reduce-scatter + all-gather: 2x the all-gather of operand / S. */
  double op = 256 << 20;
  tpu_ici_result ar = run(&t, TPU_ICI_ALL_REDUCE, g, ng, 16, op);
  tpu_ici_result ag = run(&t, TPU_ICI_ALL_GATHER, g, ng, 16, op / 16);
  tpu_ici_result rs = run(&t, TPU_ICI_REDUCE_SCATTER, g, ng, 16, op);
  CHECK_NEAR(ar.seconds, 2 * ag.seconds, 1e-12);
  CHECK_NEAR(rs.seconds, ag.seconds, 1e-12);
  CHECK_NEAR(ar.seconds, op / W + 16 * a, 1e-12);
  printf("all-reduce 256 MiB over a 16-ring: model %.1f us = %.3f x all-gather (SB: 2)\n",
         ar.seconds * 1e6, ar.seconds / ag.seconds);
  CHECK_NEAR(ar.bus_bw, op / ar.seconds * 2 * 15 / 16, 1e-3);

  /* All-to-all: S^2/8 blocks of operand/S on the busiest link = SB's all-gather / 4. */
  tpu_ici_result a2a = run(&t, TPU_ICI_ALL_TO_ALL, g, ng, 16, op);
  CHECK_NEAR(a2a.link_seconds, op * 16 / 8 / W, 1e-12);
  CHECK_NEAR(a2a.link_seconds, sb_all_gather(16 * op, 16, W, 0) / 4, 1e-12);
  CHECK_EQ_INT(a2a.hops, 8);
  printf("all-to-all 256 MiB over a 16-ring: %.1f us = %.4f x all-gather of the same array "
         "(SB: 1/4)\n",
         a2a.seconds * 1e6, a2a.seconds / run(&t, TPU_ICI_ALL_GATHER, g, ng, 16, op).seconds);
  free(g);
}

/* SB's published v5e case: mesh {X:8, Y:4}, no wrap-around on Y (no axis of 16). */
static void test_v5e_published(void) {
  tpu_topology t = topo("v5e", "8x4");
  double W = t.link_bw, a = t.hop_s;
  int64_t ng;
  int64_t *g = axis_groups(&t, 1, &ng);
  CHECK_EQ_INT(ng, 8);
  /* bf16[2048, 8192] sharded 4 ways over Y: 8 MiB per chip; a line: the end link carries 3. */
  double v = 512.0 * 8192 * 2;
  tpu_ici_result r = run(&t, TPU_ICI_ALL_GATHER, g, ng, 4, v);
  CHECK_NEAR(r.seconds, 3 * v / W + 3 * a, 1e-12);
  CHECK_EQ_INT(r.hops, 3);
  CHECK(rel(r.seconds, 560e-6) < 0.01); /* SB's model: 3 * 8.4e6 / 4.5e10 = 560 us */
  printf("v5e {X:8,Y:4} all-gather bf16[2048,8192] over Y: model %.1f us; SB model 560 us, "
         "measured 680 us (%+.1f%%)\n",
         r.seconds * 1e6, 100 * (r.seconds / 680e-6 - 1));
  /* The same array sharded 4 ways, 32 KiB per chip (bf16[64,256]): latency-bound. */
  tpu_ici_result s = run(&t, TPU_ICI_ALL_GATHER, g, ng, 4, 64.0 * 256 * 2);
  CHECK_NEAR(s.seconds, 3 * 32768 / W + 3 * a, 1e-15);
  printf("v5e {X:8,Y:4} all-gather bf16[256,256] over Y: model %.2f us; SB model 3 us, "
         "measured ~8 us\n",
         s.seconds * 1e6);
  free(g);
}

/* Several axes at once: SB T = max(T_min sum|X_i|/2, V / (W_ici n_axes)). The model
 * cuts the data into n parts, each gathering axis after axis, so it also carries the
 * earlier, smaller phases: V / (2 W n) * (1 + 1/S + 1/S^2 ...). */
static void test_multi_axis(void) {
  tpu_topology t = topo("v5e", "16x16");
  double W = t.link_bw, a = t.hop_s, v = 1 << 20, V = 256 * v;
  int64_t all[256];
  for (int i = 0; i < 256; i++) all[i] = i;
  tpu_ici_result r = run(&t, TPU_ICI_ALL_GATHER, all, 1, 256, v);
  CHECK_NEAR(r.link_seconds, 8 * (v / 2) * (1 + 16) / W, 1e-12);
  CHECK_EQ_INT(r.hops, 16);
  double sb = maxd(a * 32 / 2, V / (2 * W * 2));
  printf("all-gather over 16x16 (2 axes): model %.1f us, SB %.1f us (%+.2f%%; 1 + 1/16 "
         "in the bytes)\n",
         r.seconds * 1e6, sb * 1e6, 100 * (r.seconds / sb - 1));
  CHECK(rel(r.link_seconds, sb) < 1.0 / 16 + 1e-9);

  tpu_topology c = topo("v5p", "4x4x4");
  int64_t cube[64];
  for (int i = 0; i < 64; i++) cube[i] = i;
  double Wp = c.link_bw;
  tpu_ici_result q = run(&c, TPU_ICI_ALL_GATHER, cube, 1, 64, v);
  CHECK_NEAR(q.link_seconds, 2 * (v / 3) * (1 + 4 + 16) / Wp, 1e-12);
  CHECK_EQ_INT(q.hops, 6);
  double sbq = maxd(c.hop_s * 12 / 2, 64 * v / (2 * Wp * 3));
  printf("all-gather over 4x4x4 (3 axes): model %.1f us, SB %.1f us (%+.1f%%; 1 + 1/4 + "
         "1/16 in the bytes)\n",
         q.seconds * 1e6, sbq * 1e6, 100 * (q.seconds / sbq - 1));
  CHECK(rel(q.link_seconds, sbq) < 0.3126);
  /* All-to-all over two axes: each axis line carries blocks for the whole other axis. */
  tpu_ici_result x = run(&t, TPU_ICI_ALL_TO_ALL, all, 1, 256, 256 * v);
  CHECK_NEAR(x.link_seconds, (16.0 * 16 / 8) * (v * 16) / W, 1e-12);
  CHECK_EQ_INT(x.hops, 16);
}

/* Where links are shared the model and the contention-free closed form part ways. */
static void test_contention(void) {
  tpu_topology t = topo("v5e", "16x16");
  double W = t.link_bw, a = t.hop_s, v = 4 << 20;
  /* Two interleaved rings on every x line: even and odd chips. */
  int64_t g[256], k = 0;
  for (int y = 0; y < 16; y++)
    for (int par = 0; par < 2; par++)
      for (int x = par; x < 16; x += 2) g[k++] = x + 16 * y;
  tpu_ici_result r = run(&t, TPU_ICI_ALL_GATHER, g, 32, 8, v);
  double free_ring = 4 * v / W + 4 * a; /* an 8-ring with links of its own */
  CHECK_NEAR(r.link_seconds, 2 * 4 * v / W, 1e-12);
  CHECK_EQ_INT(r.hops, 8);
  printf("two interleaved 8-rings per x line: model %.1f us vs %.1f us contention-free "
         "(x%.2f)\n",
         r.seconds * 1e6, free_ring * 1e6, r.seconds / free_ring);
  /* One group of 8 alone on a line uses its links only half as hard. */
  tpu_ici_result one = run(&t, TPU_ICI_ALL_GATHER, g, 1, 8, v);
  CHECK_NEAR(one.link_seconds, 4 * v / W, 1e-12);

  /* A diagonal group on a 4x4 mesh (not a sub-grid): a ring in group order, edges routed
   * x then y. Forward edges carry 2 pieces, backward ones 1: link 0->1 carries the 0->5
   * edge and the backward 0->15 edge (3 pieces), as does (0,1)->(0,0) (the 15->0 and the
   * backward 5->0 edges); ties go to the lowest link slot. */
  tpu_topology m = topo("v5e", "4x4");
  int64_t diag[4] = {0, 5, 10, 15};
  tpu_ici_result dg = run(&m, TPU_ICI_ALL_GATHER, diag, 1, 4, v);
  CHECK_NEAR(dg.link_seconds, 3 * v / W, 1e-12);
  CHECK_EQ_INT(dg.hops, 12);
  CHECK_EQ_INT(dg.busiest_from, 0);
  CHECK_EQ_INT(dg.busiest_to, 1);
  CHECK_EQ_INT(dg.busiest_axis, 0);
  CHECK_EQ_INT(dg.busiest_dir, 0);
  printf("diagonal group {0,5,10,15} on a 4x4 mesh: %.1f us (busiest link %lld->%lld)\n",
         dg.seconds * 1e6, (long long)dg.busiest_from, (long long)dg.busiest_to);
}

static void test_permute_broadcast(void) {
  tpu_topology t = topo("v5e", "16x16");
  double W = t.link_bw, a = t.hop_s, v = 1 << 20;
  int64_t pairs[512];
  for (int c = 0; c < 256; c++) { /* shift by one along x, wrapping */
    pairs[2 * c] = c;
    pairs[2 * c + 1] = (c / 16) * 16 + (c % 16 + 1) % 16;
  }
  tpu_ici_op op = {TPU_ICI_PERMUTE, NULL, 0, 0, pairs, 256, v, v};
  tpu_ici_result r;
  tpu_diag d;
  CHECK_EQ_INT(tpu_ici_time(&t, &op, NULL, &r, &d), TPU_OK);
  CHECK_NEAR(r.seconds, v / W + a, 1e-12);
  CHECK_EQ_INT(r.links_used, 256);
  /* SB's 4x4 v5e question: (0,0) -> (3,3), 6 hops. Dimension-order routing uses one path
   * (SB splits over both ports: 188 + 6 us for 1.7e7 bytes). */
  tpu_topology m = topo("v5e", "4x4");
  int64_t p2[2] = {0, 15};
  tpu_ici_op op2 = {TPU_ICI_PERMUTE, NULL, 0, 0, p2, 1, 2.0 * 8 * 128 * 8192, 0};
  CHECK_EQ_INT(tpu_ici_time(&m, &op2, NULL, &r, &d), TPU_OK);
  CHECK_EQ_INT(r.hops, 6);
  CHECK_NEAR(r.seconds, op2.operand_bytes / W + 6 * a, 1e-12);
  printf("permute (0,0)->(3,3) on v5e 4x4, 16.8 MB: model %.0f us (one path); SB 194 us "
         "(two ports)\n",
         r.seconds * 1e6);
  /* Broadcast down a line of 4 from its first chip: every link once. */
  int64_t line[4] = {0, 4, 8, 12};
  tpu_ici_result b = run(&m, TPU_ICI_BROADCAST, line, 1, 4, v);
  CHECK_NEAR(b.seconds, v / W + 3 * a, 1e-12);
  CHECK_NEAR(b.total_link_bytes, 3 * v, 1e-6);
  int64_t mid[4] = {8, 0, 4, 12}; /* from the third chip: both ways */
  b = run(&m, TPU_ICI_BROADCAST, mid, 1, 4, v);
  CHECK_EQ_INT(b.hops, 2);
  CHECK_NEAR(b.total_link_bytes, 3 * v, 1e-6);
}

static void test_errors(void) {
  tpu_topology t = topo("v5e", "2x4");
  tpu_ici_result r;
  tpu_diag d;
  int64_t bad[2] = {0, 8}, dup[2] = {3, 3};
  tpu_ici_op op = {TPU_ICI_ALL_REDUCE, bad, 1, 2, NULL, 0, 1024, 0};
  CHECK_EQ_INT(tpu_ici_time(&t, &op, NULL, &r, &d), TPU_ERR_ARG);
  CHECK(strstr(d.msg, "device 8 is not in the topology") != NULL);
  op.groups = dup;
  CHECK_EQ_INT(tpu_ici_time(&t, &op, NULL, &r, &d), TPU_ERR_ARG);
  CHECK(strstr(d.msg, "appears twice") != NULL);
  op.groups = bad;
  op.operand_bytes = -1;
  CHECK_EQ_INT(tpu_ici_time(&t, &op, NULL, &r, &d), TPU_ERR_ARG);
  tpu_topology two = t;
  two.devices_per_chip = 2;
  op.operand_bytes = 1;
  op.groups = dup;
  CHECK_EQ_INT(tpu_ici_time(&two, &op, NULL, &r, &d), TPU_ERR_ARG);
  /* Groups of one and empty lists cost nothing. */
  int64_t solo[1] = {3};
  tpu_ici_op s1 = {TPU_ICI_ALL_GATHER, solo, 1, 1, NULL, 0, 1024, 0};
  CHECK_EQ_INT(tpu_ici_time(&t, &s1, NULL, &r, &d), TPU_OK);
  CHECK_NEAR(r.seconds, 0, 0);
  CHECK_EQ_INT(r.busiest_link, -1);
}

/* Scale: a 6,144-chip all-reduce (v5p 16x16x24) and per-link bytes for a report. */
static void test_scale(void) {
  tpu_topology t = topo("v5p", "16x16x24");
  int64_t n = t.nchips;
  int64_t *all = malloc(sizeof *all * (size_t)n);
  for (int64_t i = 0; i < n; i++) all[i] = i;
  double *lb = malloc(sizeof *lb * (size_t)tpu_topology_nlinks(&t));
  double op = 1 << 30;
  tpu_ici_op o = {TPU_ICI_ALL_REDUCE, all, 1, n, NULL, 0, op, 0};
  tpu_ici_result r;
  tpu_diag d;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_EQ_INT(tpu_ici_time(&t, &o, lb, &r, &d), TPU_OK);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  /* Parts x, y, z rotated: per-chip bytes entering each axis phase; busiest axis z is the
   * last phase of part 0: m_z = v/3 (1 + 16*16 + 16) with v = op / n, 12 pieces forward;
   * x and y: m = v/3 (1 + 16 + 16*24), 8 pieces. Twice (reduce-scatter + all-gather). */
  double v = op / (double)n;
  double mz = v / 3 * (1 + 16 * 16 + 16), mx = v / 3 * (1 + 16 + 16 * 24);
  double busiest = 2 * maxd(12 * mz, 8 * mx);
  CHECK_NEAR(r.link_seconds, busiest / t.link_bw, 1e-12);
  CHECK_EQ_INT(r.hops, 2 * (8 + 8 + 12));
  double sum = 0;
  for (int64_t l = 0; l < tpu_topology_nlinks(&t); l++) sum += lb[l];
  CHECK_NEAR(sum, r.total_link_bytes, r.total_link_bytes * 1e-12);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  printf("all-reduce of 1 GiB over 6144 chips (v5p 16x16x24): %.1f us, bus bandwidth %.0f "
         "GB/s; host time %.2f ms\n",
         r.seconds * 1e6, r.bus_bw / 1e9, ms);
  free(all);
  free(lb);
}

/* Every allocation failing in turn gives TPU_ERR_NOMEM, never a crash or a leak. */
static void test_out_of_memory(void) {
  tpu_topology t = topo("v5e", "4x4");
  int64_t all[16];
  for (int i = 0; i < 16; i++) all[i] = i;
  for (int kind = TPU_ICI_ALL_REDUCE; kind <= TPU_ICI_BROADCAST; kind++) {
    int64_t pairs[2] = {0, 5};
    tpu_ici_op op = {(tpu_ici_kind)kind, all, 1, 16, pairs, 1, 4096, 0};
    tpu_ici_result r;
    tpu_diag d;
    tpu_alloc_fail_after(0);
    CHECK_EQ_INT(tpu_ici_time(&t, &op, NULL, &r, &d), TPU_OK);
    long n = tpu_alloc_fail_after(0);
    CHECK(n >= 2);
    for (long i = 1; i <= n; i++) {
      tpu_alloc_fail_after(i);
      tpu_status st = tpu_ici_time(&t, &op, NULL, &r, &d);
      tpu_alloc_fail_after(0);
      CHECK_EQ_INT(st, TPU_ERR_NOMEM);
    }
  }
}

int main(void) {
  test_out_of_memory();
  test_ring_one_axis();
  test_v5e_published();
  test_multi_axis();
  test_contention();
  test_permute_broadcast();
  test_errors();
  test_scale();
  CHECK_DONE();
}
