/* Collectives on one chip: groups of one device run as the identity; a collective whose
 * group spans several devices is refused, naming the op, by the reference interpreter and
 * by the TPU back end (never a silent identity: psum over 4 devices is not x). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "chip/chip.h"
#include "chip/program.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/collective.h"
#include "ir/verify.h"
#include "ref/ref.h"

static tpu_chip g_chip;

/* An all-reduce of an f32[4] parameter with the given header and group attribute. */
static void all_reduce_src(char *buf, size_t n, const char *header, const char *op, const char *groups) {
  snprintf(buf, n,
           "HloModule m%s\n"
           "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
           "ENTRY e {\n p = f32[4] parameter(0)\n ROOT r = f32[4] %s(p), %s, to_apply=add\n}\n",
           header, op, groups);
}

/* Runs src on the reference interpreter and compiles it for the chip. want == NULL: both
 * succeed and the value is the input; else both fail with a message containing want. */
static void check(const char *src, const char *want) {
  tpu_module *m = NULL;
  tpu_diag d;
  tpu_status st = tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d);
  if (st == TPU_OK) st = tpu_ir_verify(m, &d);
  CHECK(st == TPU_OK);
  if (st != TPU_OK) {
    fprintf(stderr, "%s\n%s\n", d.msg, src);
    tpu_module_free(m);
    return;
  }
  int line = 1; /* the collective's line: errors point at it */
  for (const char *c = src; c < strstr(src, "ROOT r"); c++) line += *c == '\n';
  tpu_tensor x, out;
  int64_t dims[1] = {4};
  CHECK(tpu_tensor_alloc(&x, TPU_F32, 1, dims, &d) == TPU_OK);
  for (int i = 0; i < 4; i++) tpu_tensor_set_f64(&x, i, i + 1.5);
  st = tpu_ref_run(m, &x, 1, &out, &d);
  if (!want) {
    CHECK(st == TPU_OK);
    if (st == TPU_OK) {
      for (int i = 0; i < 4; i++) CHECK(tpu_tensor_get_f64(&out, i) == i + 1.5);
      tpu_tensor_free(&out);
    }
  } else {
    CHECK(st != TPU_OK);
    if (st == TPU_OK) tpu_tensor_free(&out);
    else if (!strstr(d.msg, want) || d.line != line) {
      fprintf(stderr, "ref: unexpected error %d:%d %s (want %s)\n", d.line, d.col, d.msg, want);
      CHECK(0);
    }
  }
  tpu_compile_opts o;
  memset(&o, 0, sizeof o);
  o.chip = &g_chip;
  o.precision_override = -1;
  tpu_program *p = NULL;
  st = tpu_compile(m, &o, &p, &d);
  CHECK((st == TPU_OK) == (want == NULL));
  if (st != TPU_OK && want && (!strstr(d.msg, want) || d.line != line)) {
    fprintf(stderr, "compile: unexpected error %d:%d %s (want %s)\n", d.line, d.col, d.msg, want);
    CHECK(0);
  }
  tpu_program_free(p);
  tpu_tensor_free(&x);
  tpu_module_free(m);
}

/* The groups read once (tpu_coll_groups_*) give every device the members
 * tpu_collective_members gives it, in each group mode; [2,4]<=[4,2]T(1,0) over 8 devices
 * is {0,2,4,6},{1,3,5,7}, and a partition named by two groups is in the first. */
static void members_read_once(void) {
  const char *groups[] = {"channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), use_global_device_ids=true",
                          "channel_id=1, replica_groups={{0,1},{2,3}}", "replica_groups={{1,0}}",
                          "replica_groups={}", "channel_id=1, replica_groups={{0,1},{1,0}}",
                          "channel_id=1, replica_groups={{0,1}}, use_global_device_ids=false"};
  for (size_t k = 0; k < sizeof groups / sizeof *groups; k++) {
    char src[1024];
    all_reduce_src(src, sizeof src, ", replica_count=2, num_partitions=4", "all-reduce", groups[k]);
    tpu_module *m = NULL;
    tpu_diag d;
    CHECK(tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) == TPU_OK);
    if (!m) continue;
    const tpu_comp *e = m->entry;
    const tpu_instr *in = e->instrs[e->ninstrs - 1];
    tpu_coll_groups cg;
    CHECK(tpu_coll_groups_read(in, 2, 4, &cg, &d) == TPU_OK);
    for (int64_t dev = 0; dev < 8; dev++) {
      int64_t a[8], b[8], na = 0, nb = 0, sa = 0, sb = 0;
      tpu_status x = tpu_collective_members(in, 2, 4, dev, a, &na, &sa, &d);
      tpu_status y = tpu_coll_groups_members(in, &cg, 4, dev, b, &nb, &sb, &d);
      CHECK_EQ_INT(x, y);
      CHECK_EQ_INT(na, nb);
      CHECK_EQ_INT(sa, sb);
      CHECK(na == nb && !memcmp(a, b, (size_t)na * sizeof *a));
      if (k == 0) {
        CHECK_EQ_INT(na, 4);
        for (int64_t i = 0; i < na && i < 4; i++) CHECK_EQ_INT(b[i], dev % 2 + 2 * i);
      }
      if (k == 4 && dev % 4 < 2) CHECK(nb == 2 && b[0] == dev / 4 * 4 && b[1] == dev / 4 * 4 + 1);
    }
    /* The group size is device 0's member count, once the groups check (the same verdict). */
    int64_t sz = -1, a0[8], n0 = 0, s0 = 0;
    tpu_status gs = tpu_collective_group_size(in, 2, 4, &sz, &d);
    CHECK_EQ_INT(gs, tpu_collective_check_groups(in, 2, 4, &d));
    if (gs == TPU_OK && tpu_collective_members(in, 2, 4, 0, a0, &n0, &s0, &d) == TPU_OK) CHECK_EQ_INT(sz, n0);
    if (k == 5) CHECK_EQ_INT(sz, 8); /* replicas 0 and 1, every partition */
    tpu_coll_groups_free(&cg);
    tpu_module_free(m);
  }
}

/* tpu_collective_permute_sources (the pairs read once) against the per-device answer: cross
 * partition and cross replica, a target named twice (the last pair wins), a target out of the
 * grid, no pairs, and pairs of three ids (an error in both). */
static void permute_sources_once(void) {
  const char *pairs[] = {"channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}",
                         "source_target_pairs={{0,1},{1,0}}", "channel_id=1, source_target_pairs={{0,1},{2,1},{3,9}}",
                         "channel_id=1, source_target_pairs={}", "channel_id=1, source_target_pairs={{0,1,2}}"};
  for (size_t k = 0; k < sizeof pairs / sizeof *pairs; k++) {
    char src[1024];
    snprintf(src, sizeof src,
             "HloModule m, replica_count=2, num_partitions=4\nENTRY e {\n p = f32[4] parameter(0)\n"
             " ROOT r = f32[4] collective-permute(p), %s\n}\n",
             pairs[k]);
    tpu_module *m = NULL;
    tpu_diag d;
    CHECK(tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) == TPU_OK);
    if (!m) continue;
    const tpu_instr *in = m->entry->instrs[m->entry->ninstrs - 1];
    int64_t all[8];
    tpu_status sa = tpu_collective_permute_sources(in, 2, 4, all, &d);
    for (int64_t dev = 0; dev < 8; dev++) {
      int64_t one = -7;
      tpu_status so = tpu_collective_permute_source(in, 2, 4, dev, &one, &d);
      CHECK_EQ_INT(sa, so);
      if (sa == TPU_OK && so == TPU_OK) CHECK_EQ_INT(all[dev], one);
    }
    if (k == 0) CHECK(sa == TPU_OK && all[1] == 0 && all[0] == 3 && all[5] == 4);
    if (k == 2) CHECK(sa == TPU_OK && all[1] == 2 && all[0] == -1);
    if (k == 4) CHECK(sa != TPU_OK);
    tpu_module_free(m);
  }
}

/* tpu_iota_read against the definition: ids 0..n-1 reshaped to the dims, transposed by the
 * permutation, flattened (element f of the result is the id at the transposed index f). */
static void check_iota(const int64_t *dims, const int *perm, int nr) {
  char text[128];
  int k = snprintf(text, sizeof text, "<=[");
  for (int i = 0; i < nr; i++) k += snprintf(text + k, sizeof text - (size_t)k, "%s%lld", i ? "," : "", (long long)dims[i]);
  k += snprintf(text + k, sizeof text - (size_t)k, "]T(");
  for (int i = 0; i < nr; i++) k += snprintf(text + k, sizeof text - (size_t)k, "%s%d", i ? "," : "", perm[i]);
  snprintf(text + k, sizeof text - (size_t)k, ")");
  const char *p = text;
  int64_t *ids = NULL, n = 0, total = 1, str[4], td[4];
  for (int i = nr - 1; i >= 0; i--) str[i] = total, total *= dims[i];
  for (int i = 0; i < nr; i++) td[i] = dims[perm[i]];
  CHECK(tpu_iota_read(&p, &ids, &n) == 1);
  CHECK_EQ_INT(n, total);
  for (int64_t f = 0; ids && f < n; f++) {
    int64_t rest = f, id = 0; /* f's index in the transposed dims, then the id it names */
    for (int i = nr - 1; i >= 0; i--) {
      id += (rest % td[i]) * str[perm[i]];
      rest /= td[i];
    }
    if (ids[f] != id) {
      fprintf(stderr, "%s: element %lld\n", text, (long long)f);
      CHECK_EQ_INT(ids[f], id);
      break;
    }
  }
  tpu_free(ids);
}

/* A long explicit list is parsed once: read again (another pass asking for the same
 * collective's groups) it is a copy of what was read; another list of the same length is
 * read as itself; ids past int64 saturate (then fail the range check, as strtoll's did). */
static void long_groups_read_once(void) {
  enum { N = 256 };
  static char src[32768], pairs[2][4096];
  for (int s = 0; s < 2; s++) {
    int k = snprintf(pairs[s], sizeof pairs[s], "{");
    for (int j = 0; j < N; j++) k += snprintf(pairs[s] + k, sizeof pairs[s] - (size_t)k, "%s{%03d,%03d}", j ? "," : "", j, (j + 1 + s) % N);
    snprintf(pairs[s] + k, sizeof pairs[s] - (size_t)k, "}");
  }
  snprintf(src, sizeof src,
           "HloModule m, num_partitions=%d\nENTRY e {\n p = f32[4] parameter(0)\n"
           " a = f32[4] collective-permute(p), channel_id=1, source_target_pairs=%s\n"
           " ROOT b = f32[4] collective-permute(a), channel_id=2, source_target_pairs=%s\n}\n",
           N, pairs[0], pairs[1]);
  CHECK(strlen(pairs[0]) == strlen(pairs[1]) && strlen(pairs[0]) >= 512);
  tpu_module *m = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) == TPU_OK);
  if (!m) return;
  int64_t before = tpu_groups_texts_parsed();
  for (int rep = 0; rep < 3; rep++)
    for (int s = 0; s < 2; s++) {
      tpu_groups g;
      const tpu_instr *in = m->entry->instrs[m->entry->ninstrs - 2 + s];
      CHECK(tpu_groups_read(in, "source_target_pairs", &g, &d) == TPU_OK);
      CHECK_EQ_INT(g.ngroups, N);
      int ok = g.ngroups == N;
      for (int j = 0; ok && j < N; j++)
        ok = g.start[j] == 2 * j && g.ids[2 * j] == j && g.ids[2 * j + 1] == (j + 1 + s) % N;
      CHECK(ok);
      tpu_groups_free(&g);
    }
  CHECK_EQ_INT(tpu_groups_texts_parsed() - before, 2);
  CHECK(tpu_collective_check_groups(m->entry->instrs[m->entry->ninstrs - 1], 1, N, &d) == TPU_OK);
  /* Checked good, a long list is kept by its text, grid and kind: the verifier's next check of
   * it (after each HLO pass) is answered without reading it again; another grid is checked,
   * and a list that fails is checked (and fails) every time. */
  int64_t checked = tpu_collective_groups_checked();
  for (int rep = 0; rep < 3; rep++) {
    CHECK(tpu_collective_check_groups(m->entry->instrs[m->entry->ninstrs - 1], 1, N, &d) == TPU_OK);
    CHECK(tpu_ir_verify(m, &d) == TPU_OK);
  }
  CHECK_EQ_INT(tpu_collective_groups_checked() - checked, 1); /* the other permute's, once */
  CHECK(tpu_collective_check_groups(m->entry->instrs[m->entry->ninstrs - 1], 2, N, &d) == TPU_OK);
  CHECK_EQ_INT(tpu_collective_groups_checked() - checked, 2);
  for (int rep = 0; rep < 2; rep++) {
    CHECK(tpu_collective_check_groups(m->entry->instrs[m->entry->ninstrs - 1], 1, N / 2, &d) != TPU_OK);
    CHECK(strstr(d.msg, "name 128, but there are 128") != NULL);
  }
  CHECK_EQ_INT(tpu_collective_groups_checked() - checked, 4);
  tpu_module_free(m);
  /* A short list is kept too (the planner's candidates repeat them by the thousand): the
   * second check of {{0,2},{1,3}} on 4 partitions reads nothing; 2 partitions is checked. */
  snprintf(src, sizeof src,
           "HloModule m, num_partitions=4\nENTRY e {\n p = f32[4] parameter(0)\n"
           " ROOT r = f32[4] all-reduce(p), channel_id=1, replica_groups={{0,2},{1,3}}, use_global_device_ids=true, "
           "to_apply=add\n}\nadd {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n");
  CHECK(tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) == TPU_OK);
  if (m) {
    const tpu_instr *r = m->entry->root;
    checked = tpu_collective_groups_checked();
    for (int rep = 0; rep < 3; rep++) CHECK(tpu_collective_check_groups(r, 1, 4, &d) == TPU_OK);
    CHECK_EQ_INT(tpu_collective_groups_checked() - checked, 1);
    CHECK(tpu_collective_check_groups(r, 1, 2, &d) != TPU_OK);
    CHECK_EQ_INT(tpu_collective_groups_checked() - checked, 2);
    tpu_module_free(m);
  }
  snprintf(src, sizeof src,
           "HloModule m, num_partitions=2\nENTRY e {\n p = f32[4] parameter(0)\n"
           " ROOT r = f32[4] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{99999999999999999999,0}}\n}\n");
  CHECK(tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) == TPU_OK);
  if (m) {
    tpu_groups g;
    CHECK(tpu_groups_read(m->entry->instrs[m->entry->ninstrs - 1], "source_target_pairs", &g, &d) == TPU_OK);
    CHECK(g.ngroups == 2 && g.ids[2] == INT64_MAX);
    tpu_groups_free(&g);
    CHECK(tpu_ir_verify(m, &d) != TPU_OK && strstr(d.msg, "name 9223372036854775807"));
    tpu_module_free(m);
  }
}

int main(void) {
  tpu_diag d;
  if (tpu_chip_load("v5e", &g_chip, &d) != TPU_OK) {
    fprintf(stderr, "chip: %s\n", d.msg);
    return 1;
  }
  char src[1024];
  /* Groups of one: the identity, in every printed form. */
  all_reduce_src(src, sizeof src, "", "all-reduce", "replica_groups={{0}}");
  check(src, NULL);
  all_reduce_src(src, sizeof src, ", num_partitions=4", "all-reduce", "channel_id=1, replica_groups={{0},{1},{2},{3}}");
  check(src, NULL);
  all_reduce_src(src, sizeof src, "", "all-reduce", "replica_groups={}");
  check(src, NULL);
  all_reduce_src(src, sizeof src, ", num_partitions=4", "all-reduce", "channel_id=1, replica_groups=[4,1]<=[4]");
  check(src, NULL);
  /* Groups of several devices: JAX's psum over 4 devices gives 4x, never x. */
  all_reduce_src(src, sizeof src, ", num_partitions=4", "all-reduce", "channel_id=1, replica_groups={{0,1,2,3}}");
  check(src, "all-reduce 'r' communicates across 4 devices");
  all_reduce_src(src, sizeof src, ", num_partitions=4", "all-reduce", "channel_id=1, replica_groups={{0,2},{1,3}}");
  check(src, "across 2 devices");
  all_reduce_src(src, sizeof src, ", num_partitions=4", "all-reduce", "channel_id=1, replica_groups={}");
  check(src, "across 4 devices");
  /* Without channel_id a collective is cross-replica: one replica of four partitions is a
   * group of one (XLA's CollectiveOpGroupMode). */
  all_reduce_src(src, sizeof src, ", num_partitions=4", "all-reduce", "replica_groups={}");
  check(src, NULL);
  all_reduce_src(src, sizeof src, ", replica_count=4", "all-reduce", "replica_groups={}");
  check(src, "across 4 devices");
  all_reduce_src(src, sizeof src, ", replica_count=2, num_partitions=4", "all-reduce",
                 "channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), use_global_device_ids=true");
  check(src, "across 4 devices");
  /* collective-permute: pairs onto the device itself are the identity. */
  snprintf(src, sizeof src,
           "HloModule m, num_partitions=2\nENTRY e {\n p = f32[4] parameter(0)\n"
           " ROOT r = f32[4] collective-permute(p), channel_id=1, source_target_pairs={{0,0},{1,1}}\n}\n");
  check(src, NULL);
  snprintf(src, sizeof src,
           "HloModule m, num_partitions=2\nENTRY e {\n p = f32[4] parameter(0)\n"
           " ROOT r = f32[4] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,0}}\n}\n");
  check(src, "collective-permute 'r' communicates across 2 devices");
  /* all-gather over 2 devices would change the shape: refused, not mis-shaped. */
  snprintf(src, sizeof src,
           "HloModule m, num_partitions=2\nENTRY e {\n p = f32[4] parameter(0)\n"
           " ROOT r = f32[8] all-gather(p), channel_id=1, replica_groups={{0,1}}, dimensions={0}\n}\n");
  check(src, "all-gather 'r' communicates across 2 devices");
  members_read_once();
  permute_sources_once();
  long_groups_read_once();
  /* every permutation of ranks 1-4 over dims 3, 1, 4, 2 */
  const int64_t dims[4] = {3, 1, 4, 2};
  for (int nr = 1; nr <= 4; nr++)
    for (int code = 0; code < 256; code++) {
      int perm[4], used = 0, ok = 1;
      for (int i = 0, c = code; i < nr; i++, c /= 4) {
        perm[i] = c % 4;
        ok &= perm[i] < nr && !(used >> perm[i] & 1);
        used |= 1 << perm[i];
      }
      if (ok && code < 1 << (2 * nr)) check_iota(dims, perm, nr);
    }
  CHECK_DONE();
}
