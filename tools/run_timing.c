/* tpusim run: compile and time the program, print and write the timing report, cached on disk. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/diskcache.h"
#include "base/file.h"
#include "base/json.h"
#include "base/strbuf.h"
#include "chip/timing.h"
#include "ir/collective.h"
#include "pod/cost.h"
#include "pod/mpi.h"
#include "report/report.h"
#include "report/source.h"
#include "cli.h"
#include "run.h"

/* Gives loops whose trip count the compiler could not find the mean trips the values ran
 * (full mode only: timing mode fails on such loops). Returns how many loops it set. */
static int apply_trips(tpu_program *p, const tpu_loop_trips *t) {
  int set = 0;
  for (int i = 0; i < p->ninsns; i++) {
    const tpu_insn *in = &p->insns[i];
    if (in->opc != TPU_ISA_LOOP || in->trips >= 0) continue;
    for (int k = 0; k < t->n; k++)
      if (t->v[k].runs > 0 && tpu_loc_same(t->v[k].loc, in->loc)) {
        set += tpu_program_set_loop_trips_at(p, in->loc, (t->v[k].iters + t->v[k].runs / 2) / t->v[k].runs);
        break;
      }
  }
  return set;
}

/* The whole file (NULL if it cannot be read; *len its size). */
static char *read_text(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = tpu_malloc(cap + 1);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      char *nb = tpu_realloc(buf, cap * 2 + 1);
      if (!nb) tpu_free(buf);
      buf = nb;
      cap *= 2;
    }
  }
  fclose(f);
  if (buf) buf[n] = 0;
  *len = n;
  return buf;
}

typedef struct {
  tpu_podio_report pod;
  const plan_hint *hint;
  double step_s, ici;
} report_extra;

/* The report's pod section, and the better-plan hint beside it. */
static void write_report_extra(void *user, tpu_json_writer *w) {
  report_extra *x = user;
  tpu_podio_write_json(&x->pod, w);
  if (!x->hint || !x->hint->found) return;
  tpu_json_key(w, "better_plan");
  tpu_json_begin_object(w);
  tpu_json_key(w, "step_s");
  tpu_json_number(w, x->hint->step_s);
  tpu_json_key(w, "predicted_step_s");
  tpu_json_number(w, x->step_s);
  tpu_json_key(w, "ici_bytes_per_chip");
  tpu_json_number(w, x->hint->ici_bytes);
  tpu_json_key(w, "predicted_ici_bytes_per_chip");
  tpu_json_number(w, x->ici);
  tpu_json_key(w, "constraints");
  tpu_json_begin_array(w);
  for (const char *p = x->hint->constraints; p && *p;) {
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    char *line = tpu_malloc(n + 1);
    if (line) {
      memcpy(line, p, n);
      line[n] = 0;
      tpu_json_string(w, line);
      tpu_free(line);
    }
    p += n + (e != NULL);
  }
  tpu_json_end_array(w);
  tpu_json_end_object(w);
}

/* Compiles and times the program; what it prints goes to `out`. */
static int time_program(const run_opts *o, tpu_module *m, const tpu_chip *chip, const tpu_loop_trips *trips,
                        const tpu_podio *pod, FILE *out) {
  tpu_op_source *srcs = NULL;
  int nsrcs = 0;
  tpu_diag d;
  tpu_program *prog = NULL;
  tpu_timeline tl;
  memset(&tl, 0, sizeof tl);
  tpu_profile prof;
  memset(&prof, 0, sizeof prof);
  tpu_report_metrics r;
  int rc = 2;
  tpu_peak_kind pk = tpu_report_peak_kind(m); /* before fusion hides the dots */
  tpu_pod_cost_ctx pc;
  memset(&pc, 0, sizeof pc);
  plan_hint hint;
  memset(&hint, 0, sizeof hint);
  pc.chip = chip;
  tpu_topology topo;
  int have_topo = 0;
  if (tpu__run_pod_topology(o, chip, tpu_module_device_count(m), &topo, &have_topo, &d) != TPU_OK)
    return tpu_cli_report_arg(&d, o->topology_i >= 0 ? o->topology_i : o->slices_i);
  if (have_topo) pc.topo = &topo;
  tpu_compile_opts co = {chip, NULL, NULL, o->precision, tpu_pod_coll_cost, &pc, o->sync_collectives, o->no_window, NULL,
                         &trips->mosaic, tpu_pod_hops, NULL};
  tpu__run_progress(o, "compiling");
  tpu_status cst = tpu_compile(m, &co, &prog, &d);
  tpu__run_progress(o, NULL);
  if (cst != TPU_OK) {
    tpu_cli_report_file(&d, o->prog);
    goto out;
  }
  int nset = apply_trips(prog, trips);
  tpu__run_progress(o, "timing");
  tpu_status tst = tpu_timing_run(prog, chip, 1, &tl, &d);
  tpu__run_progress(o, NULL);
  /* Where each op came from (JAX op names and source lines, from the module's metadata). */
  if (tst == TPU_OK) {
    srcs = tpu_calloc((size_t)(prog->nops + 1), sizeof *srcs);
    size_t len = 0;
    char *text = read_text(o->prog, &len);
    tpu_sources *tab = NULL;
    if (srcs && text && tpu_sources_read(text, len, &tab, &d) == TPU_OK) {
      nsrcs = prog->nops;
      for (int i = 0; i < prog->nops && i < tl.nops; i++)
        if (tpu_sources_fill(tab, prog->ops[i].instr, &srcs[i]) &&
            (srcs[i].op_name || srcs[i].source_file))
          tl.ops[i].src = &srcs[i];
    }
    tpu_sources_free(tab);
    tpu_free(text);
  }
  if (tst != TPU_OK ||
      tpu_report_metrics_compute(&tl, chip, pk, &r, &d) != TPU_OK ||
      tpu_report_profile(&tl, r.clock_hz, &prof, &d) != TPU_OK) {
    tpu_cli_report_file(&d, o->prog);
    goto out;
  }
  if (!o->quiet) {
    if (nset) fprintf(out, "loops: trip counts of %d loop(s) taken from the values\n", nset);
    tpu_report_print_summary(out, &r);
    if (prog->xprefetch_bytes > 0) {
      char sz[48];
      tpu_report_si(sz, sizeof sz, (double)prog->xprefetch_bytes, "B");
      fprintf(out, "cross-program prefetch: %s (%s) read from %s; the previous step loads it, as XLA's TPU compiler "
              "does (a first step pays it: --first-step)\n",
              prog->hbm[prog->xprefetch_hbm].name, sz, prog->xprefetch_cmem ? "CMEM" : "VMEM");
    }
    double spf_bytes;
    int spf_big, nspf = tpu_report_step_prefetch(prog, NULL, &spf_bytes, &spf_big);
    if (nspf > 0) {
      char sz[48], wt[48];
      tpu_report_si(sz, sizeof sz, spf_bytes, "B");
      tpu_report_time(wt, sizeof wt, (double)tl.spf_wait_cycles / r.clock_hz);
      fprintf(out, "in-step prefetch: %d parameter(s), %s, copied into VMEM while other kernels run (largest: %s), "
              "as XLA's copy-start / copy-done do; %s%s\n", nspf, sz, prog->hbm[spf_big].name,
              tl.spf_wait_cycles > 0 ? "their readers waited " : "their readers did not wait for them",
              tl.spf_wait_cycles > 0 ? wt : "");
    }
  }
  double step_s = (double)tl.total_cycles / (tl.clock_hz > 0 ? tl.clock_hz : chip->clock_hz);
  if (o->partitioned && pod && pod->ndev > 1) {
    tpu__run_progress(o, "searching for a better plan");
    tpu__run_find_plan_hint(o, chip, step_s, tl.ici_bytes, &hint);
    tpu__run_progress(o, NULL);
  }
  if (!o->quiet) {
    if (pod && pod->ndev > 1) {
      tpu_podio_print(out, pod, prog, &tl, chip, r.flops_per_s, o->top, &pc);
      tpu__run_print_plan_hint(out, &hint, step_s, tl.ici_bytes);
    }
    tpu_report_print_profile(out, &prof, o->top);
  }
  rc = 0;
  tpu_podio_report pr = {pod, prog, &tl, chip, &pc};
  report_extra rx = {pr, &hint, step_s, tl.ici_bytes};
  tpu_report_info info = {o->prog, "tpu", o->timing ? "timing" : "full",
                          o->precision >= 0 ? tpu__run_precisions[o->precision] : "per-op",
                          pod && pod->ndev > 1 ? write_report_extra : NULL, &rx, NULL, NULL, 0, NULL};
  tpu_report_info_prefetch(&info, prog);
  if (o->report && tpu_report_write_json(o->report, &info, chip, &tl, &r, &prof, &d) != TPU_OK) {
    tpu_cli_report_file(&d, o->prog);
    rc = 1;
  }
  if (rc == 0 && o->trace) {
    if (tpu_report_write_trace_ex(o->trace, chip, &tl, pod && pod->ndev > 1 ? tpu_podio_trace : NULL, &pr, &d) !=
        TPU_OK) {
      tpu_cli_report_file(&d, o->prog);
      rc = 1;
    } else if (!o->quiet && tpu_timing_events_truncated(&tl)) {
      fprintf(out, "trace: the first %lld unit events only\n", (long long)tl.nevents);
    }
  }
out:
  tpu_free(hint.constraints);
  tpu_profile_free(&prof);
  tpu_timeline_free(&tl);
  tpu_program_free(prog);
  tpu_pod_cost_free(&pc);
  for (int i = 0; i < nsrcs; i++) tpu_op_source_free(&srcs[i]);
  tpu_free(srcs);
  return rc;
}

/* The cache key of a timing run (api/diskcache.h): the build, the TPUSIM_* settings of the
 * environment (tpu_dcache_env_settings: the rules' switches), the program's path and text,
 * the chip as loaded (a digest), every option that changes what time_program prints or writes, and
 * the loop trip counts the values gave. Fields are length-prefixed. NULL on out of memory. */
static void key_field(tpu_strbuf *k, const void *p, size_t n) {
  uint64_t len = p ? n : UINT64_MAX;
  tpu_strbuf_append(k, (const char *)&len, sizeof len);
  if (p && n) tpu_strbuf_append(k, p, n);
}

static void key_str(tpu_strbuf *k, const char *s) { key_field(k, s, s ? strlen(s) : 0); }

static void key_int(tpu_strbuf *k, int64_t v) { key_field(k, &v, sizeof v); }

static char *timing_key(const run_opts *o, const tpu_chip *chip, const tpu_loop_trips *trips, size_t *len) {
  size_t tlen = 0;
  char *text = read_text(o->prog, &tlen);
  if (!text) return NULL;
  tpu_strbuf k;
  tpu_strbuf_init(&k);
  key_str(&k, "tpusim run: timing");
  key_str(&k, tpu_dcache_build_id());
  char *env = tpu_dcache_env_settings(); /* the rule switches change the compile */
  if (!env) k.oom = 1;
  key_str(&k, env ? env : "");
  tpu_free(env);
  key_str(&k, o->prog);
  key_field(&k, text, tlen);
  tpu_free(text);
  /* the chip as a 128-bit digest (its whole form was most of an entry: every warm run read,
   * hashed and compared it): its numbers, then its texts' bytes (the struct holds pointers) */
  tpu_strbuf cb;
  tpu_strbuf_init(&cb);
  key_field(&cb, chip, offsetof(tpu_chip, prov));
  for (int f = 0; f < TPU_CHIP_NFIELDS; f++) {
    const tpu_chip_prov *p = &chip->prov[f];
    key_int(&cb, p->status);
    key_str(&cb, p->source);
    key_str(&cb, p->note);
    key_str(&cb, p->mismatch);
  }
  for (int i = 0; i < chip->nsources; i++) {
    key_str(&cb, chip->sources[i].key);
    key_str(&cb, chip->sources[i].cite);
  }
  uint64_t ch[2] = {tpu_dcache_hash(cb.s, cb.len, 11), tpu_dcache_hash(cb.s, cb.len, 12)};
  if (cb.oom) k.oom = 1;
  tpu_strbuf_deinit(&cb);
  key_field(&k, ch, sizeof ch);
  int64_t ints[] = {o->precision, o->timing, o->first_step, o->sync_collectives, o->no_window, o->quiet, o->top,
                    o->report != NULL, o->trace != NULL, o->slices, o->per_device, o->nout_sh};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) key_int(&k, ints[i]);
  key_str(&k, o->topology);
  key_str(&k, o->mesh);
  for (int i = 0; i < o->nout_sh; i++) key_str(&k, o->out_sh[i]);
  key_int(&k, trips->n);
  for (int i = 0; i < trips->n; i++) {
    const tpu_loop_trip *t = &trips->v[i];
    key_str(&k, t->name);
    key_str(&k, t->loc.file);
    int64_t v[] = {t->loc.line, t->loc.col, t->iters, t->runs};
    for (size_t j = 0; j < 4; j++) key_int(&k, v[j]);
  }
  key_int(&k, trips->mosaic.n); /* the Pallas calls' scalars the timing counts kernels on */
  for (int i = 0; i < trips->mosaic.n; i++) {
    const tpu_mosaic_seen *s = &trips->mosaic.v[i];
    key_str(&k, s->name);
    key_int(&k, s->loc.line);
    key_int(&k, s->loc.col);
    key_int(&k, s->flat);
    for (int j = 0; j < s->n; j++) key_field(&k, s->args[j].data, s->args[j].nbytes);
  }
  *len = k.len;
  return tpu_strbuf_take(&k);
}

/* The chip as tpu_chip_load gives it, read back from the disk cache where a run of this
 * build stored it: the key is the name as given, the file's path and a digest of its bytes
 * (so an edited file is loaded afresh); the entry is the loaded struct and its texts
 * (tpu_chip_image), not the 20 KB of JSON parsed and checked field by field (a tenth of a
 * small program's warm run). Without the cache, or when the file cannot be read here, it
 * loads the file (which reports any error). */
tpu_status tpu__run_chip_load(const run_opts *o, const char *name, tpu_chip *chip, tpu_diag *d) {
  tpu_dcache dc;
  tpu_dcache_open(&dc, o->cache_dir, o->no_cache || tpu_mpi_launched());
  static char bytes[65536];
  char path[600];
  size_t n = 0;
  if (!dc.dir || !tpu_chip_read_file(name, path, sizeof path, bytes, sizeof bytes, &n)) {
    tpu_dcache_close(&dc);
    return tpu_chip_load(name, chip, d);
  }
  tpu_strbuf k;
  tpu_strbuf_init(&k);
  key_str(&k, "tpusim run: chip");
  key_str(&k, tpu_dcache_build_id());
  key_str(&k, name);
  key_str(&k, path);
  uint64_t digest[2] = {tpu_dcache_hash(bytes, n, 11), tpu_dcache_hash(bytes, n, 12)};
  key_field(&k, digest, sizeof digest);
  key_int(&k, (int64_t)n);
  tpu_dcache_part part;
  int hit = !k.oom && tpu_dcache_get(&dc, k.s, k.len, 1, &part);
  if (hit) {
    hit = tpu_chip_from_image(part.data, part.len, chip);
    tpu_free(part.data);
  }
  tpu_status st = TPU_OK;
  if (!hit) {
    st = tpu_chip_load(name, chip, d);
    if (st == TPU_OK && !k.oom) {
      part.data = tpu_chip_image(chip, &part.len);
      if (part.data) tpu_dcache_put(&dc, k.s, k.len, 1, &part);
      tpu_free(part.data);
    }
  }
  tpu_strbuf_deinit(&k);
  tpu_dcache_close(&dc);
  return st;
}

/* Writes a cached file's bytes to path (whole or not at all). */
static int put_file(const run_opts *o, const char *path, const tpu_dcache_part *part) {
  char *tmp;
  FILE *f;
  tpu_diag d;
  tpu_status st = tpu_file_begin(path, &tmp, &f, &d);
  if (st == TPU_OK) st = tpu_file_commit(path, tmp, f, fwrite(part->data, 1, part->len, f) == part->len, &d);
  if (st != TPU_OK) tpu_cli_report_file(&d, o->prog);
  return st == TPU_OK;
}

/* Compiles and times the program, or replays what a run with the same key printed and
 * wrote (the disk cache: stdout, report, trace). Only complete, successful runs are stored. */
int tpu__run_timing(const run_opts *o, tpu_module *m, const tpu_chip *chip, const tpu_loop_trips *trips,
                    const tpu_podio *pod) {
  tpu_dcache dc;
  tpu_dcache_open(&dc, o->cache_dir, o->no_cache || tpu_mpi_launched());
  size_t klen = 0;
  char *key = dc.dir ? timing_key(o, chip, trips, &klen) : NULL;
  tpu_dcache_part parts[3];
  if (key && tpu_dcache_get(&dc, key, klen, 3, parts)) {
    int rc = (!o->report || put_file(o, o->report, &parts[1])) && (!o->trace || put_file(o, o->trace, &parts[2])) ? 0 : 1;
    if (rc == 0) fwrite(parts[0].data, 1, parts[0].len, stdout);
    for (int i = 0; i < 3; i++) tpu_free(parts[i].data);
    tpu_free(key);
    tpu_dcache_close(&dc);
    return rc;
  }
  char *obuf = NULL;
  size_t olen = 0;
  FILE *out = key ? open_memstream(&obuf, &olen) : NULL;
  int rc = time_program(o, m, chip, trips, pod, out ? out : stdout);
  if (out) {
    int ok = fclose(out) == 0 && obuf;
    if (ok) fwrite(obuf, 1, olen, stdout);
    if (ok && rc == 0) {
      memset(parts, 0, sizeof parts);
      parts[0].data = (unsigned char *)obuf;
      parts[0].len = olen;
      if (o->report) parts[1].data = (unsigned char *)read_text(o->report, &parts[1].len);
      if (o->trace) parts[2].data = (unsigned char *)read_text(o->trace, &parts[2].len);
      if ((!o->report || parts[1].data) && (!o->trace || parts[2].data)) tpu_dcache_put(&dc, key, klen, 3, parts);
      tpu_free(parts[1].data);
      tpu_free(parts[2].data);
    }
    free(obuf); /* open_memstream's buffer comes from malloc */
  }
  tpu_free(key);
  tpu_dcache_close(&dc);
  return rc;
}
