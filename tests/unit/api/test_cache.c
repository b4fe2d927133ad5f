/* The cache of compiled programs (src/api/cache.c): a cached run gives bit-identical
 * outputs, the same cycles and the same profile as a cold one; every setting in the key
 * misses (chip file contents included); loop trip counts from the values stay per run;
 * results outlive the entries they borrow from. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tpusim/tpusim.h"

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

/* Whether two results are the same run: outputs bit for bit, metrics, every profile row. */
static int same_result(const tpu_sim_result *a, const tpu_sim_result *b) {
  tpu_diag d;
  int same = tpu_sim_result_noutputs(a) == tpu_sim_result_noutputs(b);
  for (int i = 0; same && i < tpu_sim_result_noutputs(a); i++) {
    tpu_sim_array x, y;
    same = tpu_sim_result_output(a, i, &x, &d) == TPU_OK && tpu_sim_result_output(b, i, &y, &d) == TPU_OK &&
           x.dtype == y.dtype && x.nbytes == y.nbytes && (!x.nbytes || !memcmp(x.data, y.data, x.nbytes));
  }
  tpu_sim_metrics ma, mb;
  same = same && tpu_sim_result_metrics(a, &ma, &d) == TPU_OK && tpu_sim_result_metrics(b, &mb, &d) == TPU_OK &&
         ma.cycles == mb.cycles && ma.flops == mb.flops && ma.hbm_bytes == mb.hbm_bytes && ma.mfu == mb.mfu &&
         !memcmp(ma.part_cycles, mb.part_cycles, sizeof ma.part_cycles);
  same = same && tpu_sim_result_nops(a) == tpu_sim_result_nops(b);
  for (int i = 0; same && i < tpu_sim_result_nops(a); i++) {
    tpu_sim_op oa, ob;
    same = tpu_sim_result_op(a, i, &oa, &d) == TPU_OK && tpu_sim_result_op(b, i, &ob, &d) == TPU_OK &&
           !strcmp(oa.name, ob.name) && oa.cycles == ob.cycles && oa.count == ob.count &&
           (oa.op_name == NULL) == (ob.op_name == NULL) && (!oa.op_name || !strcmp(oa.op_name, ob.op_name)) &&
           oa.source_line == ob.source_line;
  }
  return same;
}

static int64_t cycles_of(const tpu_sim_result *r) {
  tpu_sim_metrics m;
  tpu_diag d;
  return r && tpu_sim_result_metrics(r, &m, &d) == TPU_OK ? m.cycles : -1;
}

static void hits_and_identity(void) {
  size_t len;
  char *text = slurp("tests/programs/cases/flax_lstm_adam/prog.hlo", &len);
  CHECK(text != NULL);
  if (!text) return;
  tpu_diag d;
  tpu_sim_module *m = NULL;
  CHECK(tpu_sim_load_text("lstm.hlo", text, len, &m, &d) == TPU_OK);
  if (!m) return;
  int np = tpu_sim_module_nparams(m);
  tpu_sim_array *in = calloc((size_t)np, sizeof *in);
  void **bufs = calloc((size_t)np, sizeof *bufs);
  for (int i = 0; i < np; i++) { /* inputs: small deterministic values of each parameter's type */
    CHECK(tpu_sim_module_param(m, i, &in[i], &d) == TPU_OK);
    bufs[i] = calloc(1, in[i].nbytes + 1);
    for (size_t k = 0; k < in[i].nbytes; k++) ((unsigned char *)bufs[i])[k] = (unsigned char)(k * 7 % 61 == 0 ? 0x3c : 0);
    in[i].data = bufs[i];
  }
  tpu_sim_options o;
  tpu_sim_options_init(&o);
  tpu_sim_cache_clear();
  tpu_sim_result *cold = NULL, *warm = NULL, *off = NULL, *again = NULL;
  CHECK(tpu_sim_run(m, &o, in, np, &cold, &d) == TPU_OK);
  CHECK(tpu_sim_run(m, &o, in, np, &warm, &d) == TPU_OK);
  int64_t hits, misses;
  int entries;
  tpu_sim_cache_stats(&hits, &misses, &entries);
  CHECK_EQ_INT(hits, 1);
  CHECK_EQ_INT(misses, 1);
  CHECK_EQ_INT(entries, 1);
  CHECK(cold && warm && same_result(cold, warm));
  /* the cache off: the same again */
  tpu_sim_cache_configure(0);
  CHECK(tpu_sim_run(m, &o, in, np, &off, &d) == TPU_OK);
  CHECK(off && cold && same_result(cold, off));
  tpu_sim_cache_configure(16);
  /* a new module of the same text finds the entry; the result outlives a clear */
  tpu_sim_module *m2 = NULL;
  CHECK(tpu_sim_load_text("lstm.hlo", text, len, &m2, &d) == TPU_OK);
  tpu_sim_run(m, &o, in, np, &again, &d); /* fills the cache again */
  tpu_sim_result_free(again);
  again = NULL;
  tpu_sim_cache_stats(&hits, NULL, NULL);
  int64_t h0 = hits;
  CHECK(m2 && tpu_sim_run(m2, &o, in, np, &again, &d) == TPU_OK);
  tpu_sim_cache_stats(&hits, NULL, NULL);
  CHECK_EQ_INT(hits, h0 + 1);
  tpu_sim_cache_clear();
  CHECK(again && cold && same_result(cold, again)); /* after the clear: ASan checks the memory */
  /* another name (diagnostics and the report say it), precision, chip: misses */
  const char *prec[] = {"highest", NULL};
  for (int k = 0; k < 2; k++) {
    tpu_sim_module *m3 = NULL;
    tpu_sim_options o3 = o;
    if (k == 0) o3.precision = prec[0];
    else o3.chip = "v6e";
    CHECK(tpu_sim_load_text(k == 0 ? "lstm.hlo" : "other.hlo", text, len, &m3, &d) == TPU_OK);
    tpu_sim_result *r3 = NULL;
    tpu_sim_cache_stats(NULL, &misses, NULL);
    int64_t m0 = misses;
    CHECK(m3 && tpu_sim_run(m3, &o3, in, np, &r3, &d) == TPU_OK);
    tpu_sim_cache_stats(NULL, &misses, NULL);
    CHECK_EQ_INT(misses, m0 + 1);
    tpu_sim_result_free(r3);
    tpu_sim_module_free(m3);
  }
  /* timing mode shares the entry: the same cycles */
  tpu_sim_options ot = o;
  ot.mode = "timing";
  tpu_sim_result *rt = NULL;
  CHECK(tpu_sim_run(m, &ot, NULL, 0, &rt, &d) == TPU_OK);
  CHECK_EQ_INT(cycles_of(rt), cycles_of(cold));
  tpu_sim_result_free(rt);
  tpu_sim_result_free(cold);
  tpu_sim_result_free(warm);
  tpu_sim_result_free(off);
  tpu_sim_result_free(again);
  tpu_sim_module_free(m);
  tpu_sim_module_free(m2);
  for (int i = 0; i < np; i++) free(bufs[i]);
  free(bufs);
  free(in);
  free(text);
}

/* A chip file is keyed by what it says, not its name: a changed clock is a miss. */
static void chip_file_contents(void) {
  size_t len;
  char *chip = slurp("chips/v5e.json", &len);
  CHECK(chip != NULL);
  if (!chip) return;
  char path[64];
  snprintf(path, sizeof path, "/tmp/tpusim_cache_chip_%d.json", (int)getpid());
  const char *hlo = "HloModule m\nENTRY e {\n  a = f32[256,256] parameter(0)\n"
                    "  ROOT d = f32[256,256] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  tpu_diag d;
  tpu_sim_module *m = NULL;
  CHECK(tpu_sim_load_text("dot.hlo", hlo, strlen(hlo), &m, &d) == TPU_OK);
  tpu_sim_options o;
  tpu_sim_options_init(&o);
  o.mode = "timing";
  o.chip = path;
  int64_t cyc[2] = {-1, -1};
  for (int k = 0; k < 2 && m; k++) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) break;
    if (k == 0) {
      fwrite(chip, 1, len, f);
    } else { /* the same file with twice the HBM bandwidth */
      const char *at = strstr(chip, "\"hbm_bw\"");
      const char *num = at ? strchr(at, ':') : NULL;
      CHECK(num != NULL);
      if (!num) {
        fclose(f);
        break;
      }
      num++;
      while (*num == ' ' || *num == '{' || (*num && strncmp(num, "\"value\"", 7) && !(*num >= '0' && *num <= '9'))) num++;
      if (!strncmp(num, "\"value\"", 7)) {
        num = strchr(num, ':') + 1;
        while (*num == ' ') num++;
      }
      double v = strtod(num, NULL);
      char *end;
      strtod(num, &end);
      fwrite(chip, 1, (size_t)(num - chip), f);
      fprintf(f, "%.17g", v * 2);
      fwrite(end, 1, len - (size_t)(end - chip), f);
    }
    fclose(f);
    tpu_sim_result *r = NULL;
    CHECK(tpu_sim_run(m, &o, NULL, 0, &r, &d) == TPU_OK);
    cyc[k] = cycles_of(r);
    tpu_sim_result_free(r);
  }
  CHECK(cyc[0] > 0 && cyc[1] > 0 && cyc[1] < cyc[0]);
  /* The same size, one byte changed (the loader keeps the last file it parsed): 819e9 B/s
   * becomes 419e9, and a fresh module of the same text misses too. */
  const char *at = strstr(chip, "819e9");
  CHECK(at != NULL);
  FILE *f = at ? fopen(path, "wb") : NULL;
  if (f) {
    fwrite(chip, 1, len, f);
    fclose(f);
    tpu_sim_result *r = NULL;
    CHECK(tpu_sim_run(m, &o, NULL, 0, &r, &d) == TPU_OK);
    CHECK_EQ_INT(cycles_of(r), cyc[0]);
    tpu_sim_result_free(r);
    chip[at - chip] = '4';
    f = fopen(path, "wb");
    fwrite(chip, 1, len, f);
    fclose(f);
    r = NULL;
    CHECK(tpu_sim_run(m, &o, NULL, 0, &r, &d) == TPU_OK);
    CHECK(cycles_of(r) > cyc[0]);
    tpu_sim_result_free(r);
  }
  remove(path);
  tpu_sim_module_free(m);
  free(chip);
}

/* One module run on chips read from one file under two names and on another file, back and
 * forth: each run has its own chip's cycles (a module takes its last entry back only for
 * the same chip name and file bytes). */
static void chip_names_back_and_forth(void) {
  const char *hlo = "HloModule m\nENTRY e {\n  a = f32[512,512] parameter(0)\n"
                    "  ROOT d = f32[512,512] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  tpu_diag d;
  tpu_sim_module *m = NULL;
  CHECK(tpu_sim_load_text("dot.hlo", hlo, strlen(hlo), &m, &d) == TPU_OK);
  if (!m) return;
  tpu_sim_options o;
  tpu_sim_options_init(&o);
  o.mode = "timing";
  const char *names[] = {"v4", "v4:core", "v4", "v6e", "v4:core", "v6e", "v4"};
  int64_t cyc[7];
  for (int k = 0; k < 7; k++) {
    o.chip = names[k];
    tpu_sim_result *r = NULL;
    CHECK(tpu_sim_run(m, &o, NULL, 0, &r, &d) == TPU_OK);
    cyc[k] = r ? cycles_of(r) : -1;
    tpu_sim_result_free(r);
  }
  CHECK(cyc[0] > 0 && cyc[1] > 0 && cyc[3] > 0);
  CHECK(cyc[1] != cyc[0]); /* one TensorCore of v4 is not v4 */
  CHECK(cyc[3] != cyc[0] && cyc[3] != cyc[1]);
  CHECK_EQ_INT(cyc[2], cyc[0]);
  CHECK_EQ_INT(cyc[6], cyc[0]);
  CHECK_EQ_INT(cyc[4], cyc[1]);
  CHECK_EQ_INT(cyc[5], cyc[3]);
  tpu_sim_module_free(m);
}

/* A loop whose trip count only the values give ("halve until the norm is below 1"): each
 * run's cycles follow its own inputs, cached or not. */
static void trips_per_run(void) {
  size_t len;
  char *text = slurp("tests/conformance/cases/while_loop/prog.hlo", &len);
  CHECK(text != NULL);
  if (!text) return;
  tpu_diag d;
  tpu_sim_module *m = NULL;
  CHECK(tpu_sim_load_text("while.hlo", text, len, &m, &d) == TPU_OK);
  tpu_sim_options o;
  tpu_sim_options_init(&o);
  float x[10];
  tpu_sim_array a;
  memset(&a, 0, sizeof a);
  a.dtype = TPU_SIM_F32;
  a.rank = 1;
  a.dims[0] = 10;
  a.data = x;
  a.nbytes = sizeof x;
  int64_t cyc[2][2];
  for (int pass = 0; pass < 2; pass++) { /* pass 0: the cache off, 1: on */
    tpu_sim_cache_configure(pass ? 16 : 0);
    for (int k = 0; k < 2; k++) {
      for (int i = 0; i < 10; i++) x[i] = k ? 1000.0f : 3.0f; /* more halvings for larger values */
      tpu_sim_result *r = NULL;
      CHECK(m && tpu_sim_run(m, &o, &a, 1, &r, &d) == TPU_OK);
      cyc[pass][k] = cycles_of(r);
      tpu_sim_result_free(r);
    }
  }
  CHECK(cyc[0][1] > cyc[0][0]);
  CHECK_EQ_INT(cyc[1][0], cyc[0][0]);
  CHECK_EQ_INT(cyc[1][1], cyc[0][1]);
  /* An entry keeps the timings of the trip counts it has seen: each run still gets its own
   * counts' cycles, back and forth and past the number kept. */
  int64_t want[12];
  for (int pass = 0; pass < 2; pass++) {
    tpu_sim_cache_configure(pass ? 16 : 0);
    for (int k = 0; k < 24; k++) {
      int j = k < 12 ? k : 23 - k;
      for (int i = 0; i < 10; i++) x[i] = (float)(1 << j) + 0.5f;
      tpu_sim_result *r = NULL;
      CHECK(m && tpu_sim_run(m, &o, &a, 1, &r, &d) == TPU_OK);
      if (!pass && k < 12) want[j] = cycles_of(r);
      if (pass) CHECK_EQ_INT(cycles_of(r), want[j]);
      tpu_sim_result_free(r);
    }
  }
  CHECK(want[11] > want[1]);
  tpu_sim_module_free(m);
  free(text);
}

/* A module takes its last run's entry back without the whole key only while the cache
 * holds it: after a clear, an eviction or the cache turned off, a run misses and compiles. */
static void module_memo(void) {
  const char *hlo = "HloModule m\nENTRY e {\n  a = f32[64,64] parameter(0)\n"
                    "  ROOT d = f32[64,64] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
  const char *hlo2 = "HloModule m2\nENTRY e {\n  a = f32[64,64] parameter(0)\n  ROOT n = f32[64,64] negate(a)\n}\n";
  tpu_diag d;
  tpu_sim_module *m = NULL, *m2 = NULL;
  CHECK(tpu_sim_load_text("memo.hlo", hlo, strlen(hlo), &m, &d) == TPU_OK);
  CHECK(tpu_sim_load_text("memo2.hlo", hlo2, strlen(hlo2), &m2, &d) == TPU_OK);
  if (!m || !m2) return;
  tpu_sim_options o;
  tpu_sim_options_init(&o);
  o.mode = "timing";
  int64_t hits, misses, h0, m0;
  int entries;
  tpu_sim_result *r = NULL;
#define RUN(mod, dh, dm)                                               \
  do {                                                                 \
    tpu_sim_cache_stats(&h0, &m0, NULL);                               \
    CHECK(tpu_sim_run(mod, &o, NULL, 0, &r, &d) == TPU_OK);            \
    tpu_sim_result_free(r);                                            \
    r = NULL;                                                          \
    tpu_sim_cache_stats(&hits, &misses, NULL);                         \
    CHECK_EQ_INT(hits - h0, dh);                                       \
    CHECK_EQ_INT(misses - m0, dm);                                     \
  } while (0)
  tpu_sim_cache_configure(16);
  tpu_sim_cache_clear();
  RUN(m, 0, 1);
  RUN(m, 1, 0);
  tpu_sim_cache_clear();
  RUN(m, 0, 1); /* cleared: compiled again */
  RUN(m, 1, 0);
  tpu_sim_cache_configure(1);
  RUN(m2, 0, 1); /* evicts m's entry */
  tpu_sim_cache_stats(NULL, NULL, &entries);
  CHECK_EQ_INT(entries, 1);
  RUN(m, 0, 1);
  RUN(m, 1, 0);
  tpu_sim_cache_configure(0);
  RUN(m, 0, 0); /* off: neither a hit nor a miss */
  tpu_sim_cache_configure(16);
  RUN(m, 0, 1);
  o.precision = "highest"; /* another setting: its own entry */
  RUN(m, 0, 1);
  RUN(m, 1, 0);
  o.precision = NULL;
  RUN(m, 1, 0);
  setenv("TPUSIM_NO_UNIT_REDUCE", "1", 1); /* a rule's switch set between runs: its own entry */
  RUN(m, 0, 1);
  RUN(m, 1, 0);
  setenv("TPUSIM_CACHE_LOG", "0", 1); /* the caches' own settings are not in the key */
  RUN(m, 1, 0);
  unsetenv("TPUSIM_CACHE_LOG");
  unsetenv("TPUSIM_NO_UNIT_REDUCE");
  RUN(m, 1, 0);
#undef RUN
  tpu_sim_module_free(m);
  tpu_sim_module_free(m2);
  tpu_sim_cache_clear();
}

int main(void) {
  hits_and_identity();
  module_memo();
  chip_file_contents();
  chip_names_back_and_forth();
  trips_per_run();
  tpu_sim_cache_clear();
  CHECK_DONE();
}
