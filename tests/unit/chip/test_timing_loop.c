/* Loops in closed form (src/chip/timing.c): the same timeline as stepping every iteration,
 * on assembled loops of every shape and on every compiled test program; a loop of 2^31 - 1
 * iterations timed; loops that cannot be timed refused at their place in the input. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chip/chip.h"
#include "chip/program.h"
#include "chip/timing.h"
#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/verify.h"

static tpu_chip g_chip;
static int g_loops_compared;

/* Times p both ways and checks every figure of the two timelines is the same. */
static void same_both_ways(const tpu_program *p, const char *what) {
  tpu_timeline a, b;
  tpu_diag d;
  tpu_timing_set_loops_stepwise(1);
  tpu_status sa = tpu_timing_run(p, &g_chip, 1, &a, &d);
  tpu_timing_set_loops_stepwise(0);
  tpu_status sb = tpu_timing_run(p, &g_chip, 1, &b, &d);
  CHECK_EQ_INT(sa, sb);
  if (sa != TPU_OK || sb != TPU_OK) {
    if (sa == TPU_OK) tpu_timeline_free(&a);
    if (sb == TPU_OK) tpu_timeline_free(&b);
    return;
  }
  int bad = a.total_cycles != b.total_cycles || a.hbm_wait_cycles != b.hbm_wait_cycles ||
            a.ici_wait_cycles != b.ici_wait_cycles || a.spf_wait_cycles != b.spf_wait_cycles ||
            a.ici_bytes != b.ici_bytes || a.flops != b.flops || a.hbm_bytes != b.hbm_bytes || a.nevents != b.nevents ||
            memcmp(a.busy, b.busy, sizeof a.busy);
  for (int i = 0; !bad && i < a.nops; i++)
    bad = a.ops[i].count != b.ops[i].count || a.ops[i].cycles != b.ops[i].cycles ||
          a.ops[i].hbm_bytes != b.ops[i].hbm_bytes || memcmp(a.ops[i].unit_cycles, b.ops[i].unit_cycles, sizeof a.ops[i].unit_cycles);
  for (int64_t e = 0; !bad && e < a.nevents; e++)
    bad = a.events[e].start != b.events[e].start || a.events[e].end != b.events[e].end ||
          a.events[e].op != b.events[e].op || a.events[e].unit != b.events[e].unit;
  if (bad)
    fprintf(stderr, "%s: stepwise %lld cycles (%lld events), closed form %lld (%lld events)\n", what,
            (long long)a.total_cycles, (long long)a.nevents, (long long)b.total_cycles, (long long)b.nevents);
  CHECK(!bad);
  g_loops_compared++;
  if (getenv("TPU_VERBOSE")) fprintf(stderr, "ok %s\n", what);
  tpu_timeline_free(&a);
  tpu_timeline_free(&b);
}

static tpu_program *assemble(const char *text) {
  tpu_program *p = NULL;
  tpu_diag d;
  if (tpu_program_parse("t.s", text, strlen(text), &p, &d) != TPU_OK) {
    char buf[1200];
    tpu_diag_format(&d, buf, sizeof buf);
    fprintf(stderr, "assemble: %s\n", buf);
  }
  return p;
}

/* Times p (stepping its loops when `stepwise`), reporting a refusal with `what` and n; p is
 * freed. */
static tpu_status time_program(tpu_program *p, int stepwise, tpu_timeline *tl, const char *what, long long n) {
  if (!p) return TPU_ERR_ARG;
  tpu_diag d;
  tpu_timing_set_loops_stepwise(stepwise);
  tpu_status st = tpu_timing_run(p, &g_chip, 0, tl, &d);
  tpu_timing_set_loops_stepwise(0);
  if (st != TPU_OK) {
    char buf[1200];
    tpu_diag_format(&d, buf, sizeof buf);
    fprintf(stderr, "%s %lld: %s\n", what, n, buf);
  }
  CHECK_EQ_INT(st, TPU_OK);
  tpu_program_free(p);
  return st;
}

/* Loop bodies of each kind the lowering emits, and some it does not: double buffers
 * (v[i+1]), slots every q iterations (v[i/q]), predicates (when=P:R), nested loops,
 * conditionals, prefetches across kernels, collectives and waits, HBM-to-HBM copies. Each
 * for trip counts 1 to 40 (periods start at different iterations) and one past the port's
 * list cap. */
static const char *k_bodies[] = {
    /* a stream tile loop: loads of tile i+1 overlap compute and store of tile i */
    "kernel op=0\ndma.in dst=v0[0] hbm=h0 bytes=300000 op=0\nloop trips=%d op=0\n"
    "  dma.in dst=v0[i+1] hbm=h0 bytes=300000 op=0\n  vpu src=v0[i] dst=v1[i] vregs=%d ops=3 op=0\n"
    "  dma.out src=v1[i] hbm=h1 bytes=200000 op=0\nend op=0\nvpu src=v0[1] dst=v1[1] vregs=30 ops=1 op=0\n",
    /* a matmul accumulating over K blocks: the result written every third iteration */
    "kernel op=0\nloop trips=%d op=0\n  dma.in dst=v0[i] hbm=h0 bytes=65536 op=0\n"
    "  matmul src=v0[i],v0[i] dst=v1[i/3] m=256 k=%d n=256 b=1 mxus=4 passes=1 dtype=bf16 op=0\n"
    "  dma.out src=v1[i/3] hbm=h1 bytes=65536 op=0 when=3:2\nend op=0\n",
    /* a while loop of kernels, one a prefetching reader of the other's result */
    "loop trips=%d what=\"while.1\"\n  kernel op=0\n  dma.in dst=v0[0] hbm=h0 bytes=4096 op=0\n"
    "  vpu src=v0[0] dst=v1[0] vregs=%d ops=1 op=0\n  dma.out src=v1[0] hbm=h1 bytes=4096 op=0\n"
    "  kernel op=1\n  dma.in dst=v2[0] hbm=h1 bytes=4096 op=1 prefetch=1\n  dma.in dst=v3[0] hbm=h0 bytes=512 op=1 prefetch=1\n"
    "  eup src=v2[0] vregs=2 ops=1 op=1\n  vpu src=v2[0],v3[0] dst=v3[0] vregs=3 ops=2 op=1\n"
    "  dma.out src=v3[0] hbm=h0 bytes=512 op=1\nend\nkernel op=1\nvpu vregs=1 ops=1 op=1\n",
    /* nested: a while loop around a tile loop and a conditional */
    "loop trips=%d what=\"while.2\"\n  kernel op=0\n  dma.in dst=v0[0] hbm=h0 bytes=8192 op=0\n"
    "  loop trips=5 op=0\n    dma.in dst=v0[i+1] hbm=h0 bytes=8192 op=0\n"
    "    xlu src=v0[i] vregs=%d ops=2 op=0\n    vpu src=v0[i] dst=v1[i] vregs=4 ops=1 op=0\n"
    "    dma.out src=v1[i] hbm=h1 bytes=8192 op=0 when=2:1\n  end op=0\n"
    "  cond trips=2 what=\"c\"\n  case trips=0\n    kernel op=1\n    vpu vregs=10 ops=1 op=1\n"
    "  case trips=1\n    kernel op=1\n    dma.hbm hbm=h0 hbm2=h1 bytes=20000 op=1\n  endcond\nend\n",
    /* collectives on the links, waited for a kernel later */
    "loop trips=%d what=\"while.3\"\n  kernel op=0\n  ici cycles=%d bytes=1000 links=3 op=0\n"
    "  dma.in dst=v0[0] hbm=h0 bytes=40000 op=0\n  vpu src=v0[0] dst=v1[0] vregs=40 ops=1 op=0\n"
    "  kernel op=1\n  wait at=2\n  dma.out src=v1[0] hbm=h1 bytes=40000 op=1\n  ici cycles=500 bytes=10 links=12 op=1\n"
    "end\n",
    /* plans predicated on the iteration counted over both loops (flat=1), one in a branch */
    "loop trips=%d what=\"while.4\"\n  loop trips=3 what=\"while.5\"\n"
    "    kernel op=0 when=4:1 flat=1\n    dma.in dst=v0[0] hbm=h0 bytes=%d op=0 when=4:1 flat=1\n"
    "    kernel op=0 when=4:3 flat=1\n    dma.in dst=v0[0] hbm=h0 bytes=64 op=0 when=4:3 flat=1\n"
    "    cond trips=2 what=\"c\"\n    case trips=0\n      kernel op=1 when=2:0 flat=1\n"
    "      vpu vregs=10 ops=1 op=1 when=2:0 flat=1\n    case trips=1\n    endcond\n  end\nend\n",
    /* a tile loop beside a collective still on the links (its end ahead of every boundary) */
    "kernel op=1\nici cycles=9000000 bytes=1000 links=3 op=1\nkernel op=0\ndma.in dst=v0[0] hbm=h0 bytes=300000 op=0\n"
    "loop trips=%d op=0\n  dma.in dst=v0[i+1] hbm=h0 bytes=300000 op=0\n  vpu src=v0[i] dst=v1[i] vregs=%d ops=3 op=0\n"
    "  dma.out src=v1[i] hbm=h1 bytes=200000 op=0\nend op=0\nkernel op=1\nwait at=1\n",
    /* a period of 128 iterations: a result slot every 64 of a double buffer, written at the 64th */
    "kernel op=0\ndma.in dst=v0[0] hbm=h0 bytes=30000 op=0\nloop trips=%d op=0\n"
    "  dma.in dst=v0[i+1] hbm=h0 bytes=30000 op=0\n  vpu src=v0[i] dst=v1[i/64] vregs=%d ops=3 op=0\n"
    "  dma.out src=v1[i/64] hbm=h1 bytes=200000 op=0 when=64:63\nend op=0\n",
};

static void assembled_loops(void) {
  const char *head =
      ".program chip=\"v5e\"\n"
      ".op name=\"a\" kind=\"fusion:kLoop\" flops=100 padded_flops=100 bytes=1000 padded_bytes=1000 xbytes=300\n"
      ".op name=\"b\" kind=\"add\" flops=10 padded_flops=10 bytes=100 padded_bytes=100\n"
      ".hbm name=\"x\" offset=0 bytes=1048576\n.hbm name=\"y\" offset=1048576 bytes=1048576\n"
      ".vmem op=0 offset=0 slot_bytes=300000 slots=2\n.vmem op=0 offset=600064 slot_bytes=200000 slots=2\n"
      ".vmem op=1 offset=1000448 slot_bytes=4096 slots=1\n.vmem op=1 offset=1004544 slot_bytes=4096 slots=1\n";
  const int trips[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 16, 17, 23, 31, 40, 5000};
  const int work[] = {1, 64, 900};
  for (size_t b = 0; b < sizeof k_bodies / sizeof *k_bodies; b++)
    for (size_t w = 0; w < sizeof work / sizeof *work; w++)
      for (size_t k = 0; k < sizeof trips / sizeof *trips; k++) {
        char body[2000], text[4000], what[64];
        snprintf(body, sizeof body, k_bodies[b], trips[k], work[w]);
        snprintf(text, sizeof text, "%s%s", head, body);
        tpu_program *p = assemble(text);
        CHECK(p != NULL);
        if (!p) continue;
        snprintf(what, sizeof what, "body %zu work %d trips %d", b, work[w], trips[k]);
        same_both_ways(p, what);
        tpu_program_free(p);
      }
}

/* Reads a whole file (NULL if it cannot). */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  fclose(f);
  if (s) s[n] = 0;
  *len = s ? (size_t)n : 0;
  return s;
}

/* The program `text` compiles to for one chip (NULL when it does not: a program of several
 * devices, say). *m gets the module (its loops' places point into it; tpu_module_free). */
static tpu_program *compile_text(const char *name, const char *text, size_t len, tpu_module **m) {
  tpu_diag d;
  tpu_program *p = NULL;
  *m = NULL;
  if (tpu_hlo_parse(name, text, len, m, &d) == TPU_OK && tpu_ir_verify(*m, &d) == TPU_OK) {
    tpu_compile_opts o;
    memset(&o, 0, sizeof o);
    o.chip = &g_chip;
    o.precision_override = -1;
    if (tpu_compile(*m, &o, &p, &d) != TPU_OK) p = NULL;
  }
  return p;
}

/* Every test program and example: its loops as compiled, and with each while loop given
 * 3, 40 and 1500 iterations (300 in a program of over 300 instructions; those inside another
 * loop: 3). The long runs fill the HBM port's reservation list past its halving. */
static void compiled_programs(void) {
  const char *src = getenv("TPU_SRC");
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/tests/programs/cases", src ? src : ".");
  DIR *dd = opendir(dir);
  CHECK(dd != NULL);
  if (!dd) return;
  struct dirent *e;
  int nprog = 0;
  while ((e = readdir(dd)) != NULL) {
    if (e->d_name[0] == '.') continue;
    for (int v = 0; v < 2; v++) {
      char path[2048];
      snprintf(path, sizeof path, "%s/%s/%s", dir, e->d_name, v ? "opt.hlo" : "prog.hlo");
      size_t len;
      char *text = slurp(path, &len);
      if (!text) continue;
      tpu_module *m;
      tpu_program *p = compile_text(path, text, len, &m);
      free(text);
      if (!p) {
        tpu_module_free(m);
        continue;
      }
      nprog++;
      same_both_ways(p, path);
      int has_while = 0;
      for (int i = 0; i < p->ninsns; i++) has_while |= p->insns[i].opc == TPU_ISA_LOOP && p->insns[i].what;
      const int64_t counts[] = {3, 40, 1500};
      for (int c = 0; has_while && c < 3; c++) {
        for (int i = 0, depth = 0; i < p->ninsns; i++) { /* nested ones: 3 */
          if (p->insns[i].opc == TPU_ISA_LOOP && p->insns[i].what) p->insns[i].trips = depth && c > 0 ? 3 : c == 2 && p->ninsns > 300 ? 300 : counts[c];
          depth += p->insns[i].opc == TPU_ISA_LOOP ? 1 : p->insns[i].opc == TPU_ISA_END ? -1 : 0;
        }
        char what[2100];
        snprintf(what, sizeof what, "%s with %lld iterations", path, (long long)counts[c]);
        same_both_ways(p, what);
      }
      tpu_program_free(p);
      tpu_module_free(m);
    }
  }
  closedir(dd);
  CHECK(nprog >= 30);
}

/* Tile loops whose transfers queue ahead of the compute, so the HBM port's list after L grows
 * every iteration (its tail enters the compared state only once its length repeats:
 * timing.c bnd_take): the same figures both ways. */
static void growing_port_tails(void) {
  const char *src = getenv("TPU_SRC");
  const char *names[] = {"softmax_8192x32000_bfloat16", "attn_bwd_b2h32s2048d128_causal", "silu_mul_16x1024x11008_bf16"};
  for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/bench/fidelity/corpus/%s.hlo", src ? src : ".", names[k]);
    size_t len;
    char *text = slurp(path, &len);
    CHECK(text != NULL);
    if (!text) continue;
    tpu_module *m;
    tpu_program *p = compile_text(path, text, len, &m);
    free(text);
    CHECK(p != NULL);
    if (p) same_both_ways(p, path);
    tpu_program_free(p);
    tpu_module_free(m);
  }
}

static char *with_bound(const char *text, const char *from, const char *to) {
  const char *at = strstr(text, from);
  if (!at) return NULL;
  size_t n = strlen(text) - strlen(from) + strlen(to) + 1;
  char *s = malloc(n);
  if (!s) return NULL;
  snprintf(s, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
  return s;
}

/* A fori_loop bounded by 2^31 - 1 (the bound of the robustness issue) is timed, and its
 * cycles are those of a stepped loop of the same body: cycles(N) is c0 + N * per once the
 * loop repeats, with c0 and per taken from stepped runs of 100 and 101 iterations. */
static void loop_of_2_31(void) {
  const char *src = getenv("TPU_SRC");
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/programs/cases/fori_cond/prog.hlo", src ? src : ".");
  size_t len;
  char *text = slurp(path, &len);
  CHECK(text != NULL);
  if (!text) return;
  const char *k = "constant.7 = s32[] constant(5)";
  char *big = with_bound(text, k, "constant.7 = s32[] constant(2147483647)");
  char *n100 = with_bound(text, k, "constant.7 = s32[] constant(100)");
  char *n101 = with_bound(text, k, "constant.7 = s32[] constant(101)");
  CHECK(big && n100 && n101);
  tpu_module *mb = NULL, *m0 = NULL, *m1 = NULL, *mn = NULL;
  tpu_program *pb = big ? compile_text("big.hlo", big, strlen(big), &mb) : NULL;
  tpu_program *p0 = n100 ? compile_text("n100.hlo", n100, strlen(n100), &m0) : NULL;
  tpu_program *p1 = n101 ? compile_text("n101.hlo", n101, strlen(n101), &m1) : NULL;
  CHECK(pb && p0 && p1);
  if (pb && p0 && p1) {
    tpu_timeline tb, t0, t1;
    tpu_diag d;
    tpu_timing_set_loops_stepwise(1);
    CHECK(tpu_timing_run(p0, &g_chip, 0, &t0, &d) == TPU_OK);
    CHECK(tpu_timing_run(p1, &g_chip, 0, &t1, &d) == TPU_OK);
    tpu_timing_set_loops_stepwise(0);
    CHECK(tpu_timing_run(pb, &g_chip, 1, &tb, &d) == TPU_OK);
    int64_t per = t1.total_cycles - t0.total_cycles;
    CHECK(per > 0);
    CHECK_EQ_INT(tb.total_cycles, t0.total_cycles + (2147483647LL - 100) * per);
    CHECK_EQ_INT(tb.nevents, TPU_TIMING_MAX_EVENTS); /* events stop at the cap */
    /* Timed again, the run takes the full events array tb's freeing left
     * (tpu__timeline_full_events): the same events. */
    tpu_event *kept = malloc(sizeof *kept * (size_t)tb.nevents);
    CHECK(kept != NULL);
    if (kept) memcpy(kept, tb.events, sizeof *kept * (size_t)tb.nevents);
    uintptr_t spare = (uintptr_t)tb.events;
    tpu_timeline_free(&tb);
    tpu_timeline tc;
    CHECK(tpu_timing_run(pb, &g_chip, 1, &tc, &d) == TPU_OK);
    CHECK((uintptr_t)tc.events == spare); /* the same memory, reused */
    CHECK_EQ_INT(tc.nevents, TPU_TIMING_MAX_EVENTS);
    int64_t diff = -1;
    for (int64_t e = 0; kept && e < tc.nevents && diff < 0; e++)
      if (kept[e].unit != tc.events[e].unit || kept[e].lane != tc.events[e].lane || kept[e].start != tc.events[e].start ||
          kept[e].end != tc.events[e].end || kept[e].op != tc.events[e].op)
        diff = e;
    CHECK_EQ_INT(diff, -1);
    free(kept);
    tpu_timeline_free(&tc);
    tpu_timeline_free(&t0);
    tpu_timeline_free(&t1);
  }
  /* A loop that never ends (its bound cannot be reached) is refused at its place. */
  char *never = text ? with_bound(text, "direction=LT", "direction=NE") : NULL;
  char *never2 = never ? with_bound(never, k, "constant.7 = s32[] constant(-1)") : NULL;
  tpu_program *pn = never2 ? compile_text("never.hlo", never2, strlen(never2), &mn) : NULL;
  CHECK(pn != NULL);
  if (pn) {
    tpu_timeline tn;
    tpu_diag d;
    CHECK_EQ_INT(tpu_timing_run(pn, &g_chip, 0, &tn, &d), TPU_ERR_UNSUPPORTED);
    char buf[1200];
    tpu_diag_format(&d, buf, sizeof buf);
    CHECK(strstr(buf, "never.hlo:") == buf && strstr(buf, "trip count unknown") != NULL);
  }
  tpu_program_free(pb);
  tpu_program_free(p0);
  tpu_program_free(p1);
  tpu_program_free(pn);
  tpu_module_free(mb);
  tpu_module_free(m0);
  tpu_module_free(m1);
  tpu_module_free(mn);
  free(big);
  free(n100);
  free(n101);
  free(never);
  free(never2);
  free(text);
}

/* A tile loop (a kernel's body of unit instructions) of 2^30 iterations is timed in closed
 * form: its units' earliest free cycle stands in for the kernel's barrier, which does not
 * move inside the kernel (timing_loop.c, bnd_take); stepped, it is refused as a loop that
 * does not repeat. Its cycles are those of stepped loops of 100 and 102 iterations (the
 * period is two: the double buffer's slots), extended. */
static void tile_loop_of_2_30(void) {
  const char *head =
      ".program chip=\"v5e\"\n"
      ".op name=\"a\" kind=\"fusion:kLoop\" flops=100 padded_flops=100 bytes=1000 padded_bytes=1000\n"
      ".hbm name=\"x\" offset=0 bytes=1048576\n.hbm name=\"y\" offset=1048576 bytes=1048576\n"
      ".vmem op=0 offset=0 slot_bytes=300000 slots=2\n.vmem op=0 offset=600064 slot_bytes=200000 slots=2\n";
  const int vregs[] = {1, 900}; /* transfer-bound and compute-bound */
  for (int w = 0; w < 2; w++) {
    tpu_timeline tl[3];
    tpu_status st[3];
    const long long trips[3] = {100, 102, 1LL << 30};
    for (int k = 0; k < 3; k++) {
      char text[4000];
      snprintf(text, sizeof text,
               "%skernel op=0\ndma.in dst=v0[0] hbm=h0 bytes=300000 op=0\nloop trips=%lld op=0\n"
               "  dma.in dst=v0[i+1] hbm=h0 bytes=300000 op=0\n  vpu src=v0[i] dst=v1[i] vregs=%d ops=3 op=0\n"
               "  dma.out src=v1[i] hbm=h1 bytes=200000 op=0\nend op=0\nvpu src=v0[1] dst=v1[1] vregs=30 ops=1 op=0\n",
               head, trips[k], vregs[w]);
      tpu_program *p = assemble(text);
      CHECK(p != NULL);
      st[k] = time_program(p, k < 2, &tl[k], "tile loop of", trips[k]);
    }
    if (st[0] == TPU_OK && st[1] == TPU_OK && st[2] == TPU_OK) {
      const int64_t n = ((1LL << 30) - 100) / 2;
      CHECK(tl[1].total_cycles > tl[0].total_cycles);
      CHECK_EQ_INT(tl[2].total_cycles, tl[0].total_cycles + n * (tl[1].total_cycles - tl[0].total_cycles));
      CHECK_EQ_INT(tl[2].busy[TPU_UNIT_VPU], tl[0].busy[TPU_UNIT_VPU] + n * (tl[1].busy[TPU_UNIT_VPU] - tl[0].busy[TPU_UNIT_VPU]));
      CHECK_EQ_INT(tl[2].busy[TPU_UNIT_DMA_IN], tl[0].busy[TPU_UNIT_DMA_IN] +
                   n * (tl[1].busy[TPU_UNIT_DMA_IN] - tl[0].busy[TPU_UNIT_DMA_IN]));
    }
    for (int k = 0; k < 3; k++)
      if (st[k] == TPU_OK) tpu_timeline_free(&tl[k]);
  }
}

/* Tile loops of 2^30 iterations that repeat only under two rules of timing_loop.c, timed in
 * closed form with the cycles of stepped loops of 256 and 384 iterations extended (stepped,
 * each is refused as a loop that does not repeat): one beside a collective that holds the
 * links past the loop's end (the links' free time is no time the body reads, so it is held
 * as it is, quiet_vars: relative to L it differed at every boundary), and one whose period
 * is 128 iterations (a result slot of a double buffer every 64: over the 64 a period was
 * once capped at). */
static void tile_loops_that_repeat_late(void) {
  const char *head =
      ".program chip=\"v5e\"\n"
      ".op name=\"a\" kind=\"fusion:kLoop\" flops=100 padded_flops=100 bytes=1000 padded_bytes=1000\n"
      ".op name=\"b\" kind=\"add\" flops=10 padded_flops=10 bytes=100 padded_bytes=100\n"
      ".hbm name=\"x\" offset=0 bytes=1048576\n.hbm name=\"y\" offset=1048576 bytes=1048576\n"
      ".vmem op=0 offset=0 slot_bytes=300000 slots=2\n.vmem op=0 offset=600064 slot_bytes=200000 slots=2\n";
  const char *bodies[2] = {
      "kernel op=1\nici cycles=4611686018427387 bytes=1000 links=3 op=1\nkernel op=0\n"
      "dma.in dst=v0[0] hbm=h0 bytes=300000 op=0\nloop trips=%lld op=0\n"
      "  dma.in dst=v0[i+1] hbm=h0 bytes=300000 op=0\n  vpu src=v0[i] dst=v1[i] vregs=900 ops=3 op=0\n"
      "  dma.out src=v1[i] hbm=h1 bytes=200000 op=0\nend op=0\n",
      "kernel op=0\ndma.in dst=v0[0] hbm=h0 bytes=30000 op=0\nloop trips=%lld op=0\n"
      "  dma.in dst=v0[i+1] hbm=h0 bytes=30000 op=0\n  vpu src=v0[i] dst=v1[i/64] vregs=900 ops=3 op=0\n"
      "  dma.out src=v1[i/64] hbm=h1 bytes=200000 op=0 when=64:63\nend op=0\n"};
  for (int b = 0; b < 2; b++) {
    tpu_timeline tl[3];
    tpu_status st[3];
    const long long trips[3] = {256, 384, 1LL << 30};
    for (int k = 0; k < 3; k++) {
      char body[1000], text[4000];
      snprintf(body, sizeof body, bodies[b], trips[k]);
      snprintf(text, sizeof text, "%s%s", head, body);
      tpu_program *p = assemble(text);
      CHECK(p != NULL);
      st[k] = time_program(p, k < 2, &tl[k], b ? "tile loop 1 of" : "tile loop 0 of", trips[k]);
    }
    if (st[0] == TPU_OK && st[1] == TPU_OK && st[2] == TPU_OK) {
      /* the step is the links' end in the first; the kernel's end is what the loop moves */
      const int64_t n = ((1LL << 30) - 256) / 128;
      const int64_t c0 = tl[0].ops[0].cycles, c1 = tl[1].ops[0].cycles;
      CHECK(c1 > c0);
      CHECK_EQ_INT(tl[2].ops[0].cycles, c0 + n * (c1 - c0));
      CHECK_EQ_INT(tl[2].busy[TPU_UNIT_VPU], tl[0].busy[TPU_UNIT_VPU] + n * (tl[1].busy[TPU_UNIT_VPU] - tl[0].busy[TPU_UNIT_VPU]));
      CHECK_EQ_INT(tl[2].busy[TPU_UNIT_DMA_OUT],
                   tl[0].busy[TPU_UNIT_DMA_OUT] + n * (tl[1].busy[TPU_UNIT_DMA_OUT] - tl[0].busy[TPU_UNIT_DMA_OUT]));
    }
    for (int k = 0; k < 3; k++)
      if (st[k] == TPU_OK) tpu_timeline_free(&tl[k]);
  }
}

/* A layer loop whose every iteration leaves more reservations on the HBM port than the
 * list's first room (a tile loop of 3,000 transfers with gaps, then a kernel whose prefetch
 * may fill them): the port's list drops only the reservations no later prefetch can reach,
 * so the loop's period repeats exactly and 2^31 - 1 layers are timed in closed form, with
 * the cycles of stepped loops of 100 and 101 layers extended (before, the list halved every
 * iteration, no period repeated, and the loop was refused); 7 layers the same both ways. */
static void layers_past_the_port_list(void) {
  const char *head =
      ".program chip=\"v5e\"\n"
      ".op name=\"a\" kind=\"fusion:kLoop\" flops=100 padded_flops=100 bytes=1000 padded_bytes=1000\n"
      ".op name=\"b\" kind=\"add\" flops=10 padded_flops=10 bytes=100 padded_bytes=100\n"
      ".hbm name=\"x\" offset=0 bytes=1048576\n.hbm name=\"y\" offset=1048576 bytes=1048576\n"
      ".vmem op=0 offset=0 slot_bytes=4096 slots=2\n.vmem op=0 offset=8192 slot_bytes=4096 slots=2\n"
      ".vmem op=1 offset=16384 slot_bytes=4096 slots=1\n.vmem op=1 offset=20480 slot_bytes=4096 slots=1\n";
  const long long trips[4] = {100, 101, 2147483647LL, 7};
  tpu_timeline tl[3];
  tpu_status st[3];
  for (int k = 0; k < 4; k++) {
    char text[4000];
    snprintf(text, sizeof text,
             "%sloop trips=%lld what=\"layers\"\n  kernel op=0\n  dma.in dst=v0[0] hbm=h0 bytes=4096 op=0\n"
             "  loop trips=3000 op=0\n    dma.in dst=v0[i+1] hbm=h0 bytes=4096 op=0\n"
             "    vpu src=v0[i] dst=v1[i] vregs=64 ops=3 op=0\n  end op=0\n"
             "  kernel op=1\n  dma.in dst=v2[0] hbm=h1 bytes=4096 op=1 prefetch=1\n"
             "  vpu src=v2[0] dst=v3[0] vregs=3 ops=2 op=1\n  dma.out src=v3[0] hbm=h0 bytes=512 op=1\nend\n",
             head, trips[k]);
    tpu_program *p = assemble(text);
    CHECK(p != NULL);
    if (!p) return;
    if (k == 3) {
      same_both_ways(p, "layers past the port list");
      tpu_program_free(p);
      break;
    }
    st[k] = time_program(p, k < 2, &tl[k], "layers", trips[k]);
  }
  if (st[0] == TPU_OK && st[1] == TPU_OK && st[2] == TPU_OK) {
    int64_t per = tl[1].total_cycles - tl[0].total_cycles;
    CHECK(per > 0);
    CHECK_EQ_INT(tl[2].total_cycles, tl[0].total_cycles + (2147483647LL - 100) * per);
    CHECK_EQ_INT(tl[2].busy[TPU_UNIT_DMA_IN],
                 tl[0].busy[TPU_UNIT_DMA_IN] + (2147483647LL - 100) * (tl[1].busy[TPU_UNIT_DMA_IN] - tl[0].busy[TPU_UNIT_DMA_IN]));
  }
  for (int k = 0; k < 3; k++)
    if (st[k] == TPU_OK) tpu_timeline_free(&tl[k]);
}

/* A predicate with flat=1 reads the iteration counted over every enclosing loop, through a
 * conditional's branch: in a loop of 3 around a loop of 2, when=4:2 runs once (iteration
 * 1 x 2 + 0) where the inner loop's own count (0, 1) never meets it, and in a branch in a
 * loop of 4, when=2:1 runs twice where the branch's own count (0) never meets it. */
static void flat_predicates(void) {
  const char *head = ".program chip=\"v5e\"\n.op name=\"a\" kind=\"fusion:kLoop\" flops=100 padded_flops=100 bytes=1000 "
                     "padded_bytes=1000\n";
  const char *body[2] = {"loop trips=3\n  loop trips=2\n    kernel op=0 when=4:2%s\n    vpu vregs=10 ops=1 op=0\n  end\nend\n",
                         "loop trips=4\n  cond trips=2\n  case trips=0\n    kernel op=0 when=2:1%s\n"
                         "    vpu vregs=10 ops=1 op=0\n  case trips=1\n  endcond\nend\n"};
  const int64_t want[2][2] = {{0, 1}, {0, 2}};
  for (int b = 0; b < 2; b++)
    for (int flat = 0; flat < 2; flat++) {
      char text[1200];
      char tail[2][8] = {"", " flat=1"};
      char bod[600];
      snprintf(bod, sizeof bod, body[b], tail[flat]);
      snprintf(text, sizeof text, "%s%s", head, bod);
      tpu_program *p = assemble(text);
      CHECK(p != NULL);
      if (!p) continue;
      tpu_timeline tl;
      tpu_diag d;
      CHECK_EQ_INT(tpu_timing_run(p, &g_chip, 1, &tl, &d), TPU_OK);
      CHECK_EQ_INT(tl.ops[0].count, want[b][flat]);
      tpu_timeline_free(&tl);
      tpu_program_free(p);
    }
}

int main(void) {
  tpu_diag d;
  if (tpu_chip_load("v5e", &g_chip, &d) != TPU_OK) {
    fprintf(stderr, "cannot load v5e\n");
    return 1;
  }
  assembled_loops();
  compiled_programs();
  growing_port_tails();
  loop_of_2_31();
  tile_loop_of_2_30();
  tile_loops_that_repeat_late();
  layers_past_the_port_list();
  flat_predicates();
  fprintf(stderr, "%d programs timed both ways\n", g_loops_compared);
  CHECK_DONE();
}
