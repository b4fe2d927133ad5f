/* The public simulator API: load a module, run it with values or timing only (the steps of `tpusim run`). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api/api_int.h"
#include "api/diskcache.h"
#include "base/alloc.h"
#include "chip/exec.h"
#include "chip/program.h"
#include "chip/timing.h"
#include "compile/compile.h"
#include "compile/spmd/spmd.h"
#include "hlo/hlo.h"
#include "ir/collective.h"
#include "ir/verify.h"
#include "pod/cost.h"
#include "pod/megascale.h"
#include "pod/podio.h"
#include "ref/ref.h"

#define MAX_TEXT_BYTES ((size_t)1 << 31) /* as the parser's file reader */

/* ORDER: the public values of tpu_sim_dtype. */
static const tpu_dtype k_dtypes[] = {TPU_PRED, TPU_S8,  TPU_S16,  TPU_S32, TPU_S64, TPU_U8,  TPU_U16,
                                     TPU_U32,  TPU_U64, TPU_BF16, TPU_F16, TPU_F32, TPU_F64, TPU_C64,
                                     TPU_C128, TPU_F8E5M2, TPU_F8E4M3FN};
#define NDTYPES ((int)(sizeof k_dtypes / sizeof k_dtypes[0]))
_Static_assert(TPU_SIM_F8E4M3FN + 1 == NDTYPES, "tpu_sim_dtype and k_dtypes disagree");
_Static_assert(TPU_SIM_MAX_RANK == TPU_MAX_RANK, "public and internal ranks disagree");

int tpu__api_public_dtype(tpu_dtype t) {
  for (int i = 0; i < NDTYPES; i++)
    if (k_dtypes[i] == t) return i;
  return -1;
}

int tpu__api_internal_dtype(int public_dtype, tpu_dtype *out) {
  if (public_dtype < 0 || public_dtype >= NDTYPES) return 0;
  *out = k_dtypes[public_dtype];
  return 1;
}

size_t tpu_sim_dtype_size(int dtype) {
  tpu_dtype t;
  return tpu__api_internal_dtype(dtype, &t) ? tpu_dtype_size(t) : 0;
}

const char *tpu_sim_dtype_name(int dtype) {
  tpu_dtype t;
  return tpu__api_internal_dtype(dtype, &t) ? tpu_dtype_name(t) : NULL;
}

void tpu_sim_module_free(tpu_sim_module *sm) {
  if (!sm) return;
  if (sm->memo) {
    tpu__cache_release(sm->memo->c);
    tpu_free(sm->memo->opts);
    tpu_free(sm->memo->chip_name);
    pthread_mutex_destroy(&sm->memo->lock);
    tpu_free(sm->memo);
  }
  tpu__module_release(sm->m, sm->mrefs);
  tpu_free(sm->name);
  tpu_free(sm->text);
  tpu_free(sm);
}

void tpu__module_release(tpu_module *m, int *refs) {
  if (refs && __atomic_sub_fetch(refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  tpu_module_free(m);
  tpu_free(refs);
}

/* Parses a fresh module from a loaded handle's text, which was verified when it was loaded:
 * the same text parses to the same module, and verifying reads it only (tpu_ir_verify takes
 * it const), so it is not verified again. */
static tpu_status parse_loaded(const tpu_sim_module *sm, tpu_module **out, tpu_diag *d) {
  return tpu_hlo_parse(sm->name, sm->text, sm->len, out, d);
}

/* Parses and verifies a fresh module from the handle's text. */
static tpu_status parse_verified(const char *name, const char *text, size_t len, tpu_module **out, tpu_diag *d) {
  TPU_TRY(tpu_hlo_parse(name, text, len, out, d));
  tpu_status st = tpu_ir_verify(*out, d);
  if (st != TPU_OK) {
    tpu_module_free(*out);
    *out = NULL;
  }
  return st;
}

tpu_status tpu_sim_load_text(const char *name, const char *text, size_t len, tpu_sim_module **out, tpu_diag *d) {
  if (!out) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_load_text: no out-parameter");
  *out = NULL;
  if (!text && len) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_load_text: no text");
  if (len >= MAX_TEXT_BYTES) return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_loc_at(name, 0, 0), "the module text is too large");
  tpu_sim_module *sm = tpu_calloc(1, sizeof *sm);
  if (!sm) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  sm->memo = tpu_calloc(1, sizeof *sm->memo);
  if (sm->memo) pthread_mutex_init(&sm->memo->lock, NULL);
  sm->name = tpu_strdup(name ? name : "<hlo>");
  sm->text = tpu_malloc(len + 1);
  if (!sm->memo || !sm->name || !sm->text) {
    tpu_sim_module_free(sm);
    return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  }
  if (len) memcpy(sm->text, text, len);
  sm->text[len] = 0;
  sm->len = len;
  tpu_status st = parse_verified(sm->name, sm->text, sm->len, &sm->m, d);
  if (st == TPU_OK && !(sm->mrefs = tpu_malloc(sizeof *sm->mrefs)))
    st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  if (st != TPU_OK) {
    tpu_sim_module_free(sm);
    return st;
  }
  *sm->mrefs = 1;
  *out = sm;
  return TPU_OK;
}

tpu_status tpu_sim_load_file(const char *path, tpu_sim_module **out, tpu_diag *d) {
  if (!out) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_load_file: no out-parameter");
  *out = NULL;
  if (!path) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_load_file: no path");
  FILE *f = fopen(path, "rb");
  if (!f) return TPU_FAIL(d, TPU_ERR_IO, tpu_loc_at(path, 0, 0), "cannot open the file: %s", strerror(errno));
  size_t cap = 1 << 16, len = 0;
  char *buf = tpu_malloc(cap);
  tpu_status st = TPU_OK;
  while (buf) {
    if (len == cap) {
      if (cap >= MAX_TEXT_BYTES) {
        st = TPU_FAIL(d, TPU_ERR_LIMIT, tpu_loc_at(path, 0, 0), "file is too large");
        break;
      }
      char *nb = tpu_realloc(buf, cap * 2);
      if (!nb) {
        tpu_free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
    size_t r = fread(buf + len, 1, cap - len, f);
    len += r;
    if (r == 0) {
      if (ferror(f)) st = TPU_FAIL(d, TPU_ERR_IO, tpu_loc_at(path, 0, 0), "cannot read the file");
      break;
    }
  }
  fclose(f);
  if (st == TPU_OK && !buf) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_loc_at(path, 0, 0), "out of memory reading the file");
  if (st == TPU_OK) st = tpu_sim_load_text(path, buf, len, out, d);
  tpu_free(buf);
  return st;
}

int64_t tpu_sim_module_devices(const tpu_sim_module *sm) {
  if (!sm) return 0;
  if (tpu_spmd_needed(sm->m)) { /* to be partitioned over the header's mesh */
    tpu_mesh mesh;
    memset(&mesh, 0, sizeof mesh);
    int found = 0;
    int64_t n = tpu_mesh_from_module(sm->m, &mesh, &found, NULL) == TPU_OK && found ? mesh.ndev : 1;
    tpu_mesh_free(&mesh);
    return n;
  }
  return tpu_module_device_count(sm->m);
}

int tpu_sim_module_nparams(const tpu_sim_module *sm) { return sm ? sm->m->entry->nparams : 0; }

tpu_status tpu_sim_module_param(const tpu_sim_module *sm, int i, tpu_sim_array *out, tpu_diag *d) {
  if (!sm || !out) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_module_param: no module or out-parameter");
  memset(out, 0, sizeof *out);
  const tpu_comp *e = sm->m->entry;
  if (i < 0 || i >= e->nparams)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "parameter %d does not exist: the entry takes %d", i, e->nparams);
  const tpu_instr *p = e->params[i];
  tpu_shape s = p->shape;
  if (!tpu_dtype_is_array(s.dtype))
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, p->loc, "parameter %d is a %s, not an array", i, tpu_dtype_name(s.dtype));
  if (!tpu_spmd_needed(sm->m) && tpu_module_device_count(sm->m) > 1) { /* else shapes are global already */
    tpu_podio pod;
    const char *any = "{replicated}"; /* the result's sharding does not matter here */
    TPU_TRY(tpu_podio_prepare(sm->m, &any, 1, &pod, d));
    tpu_podio_global_shape(&pod, sm->m, i, &s);
    tpu_podio_free(&pod);
  }
  out->dtype = tpu__api_public_dtype(s.dtype);
  out->rank = s.rank;
  memcpy(out->dims, s.dims, sizeof out->dims[0] * (size_t)s.rank);
  int ok = 1;
  int64_t n = tpu_dims_numel(s.rank, s.dims, &ok);
  out->nbytes = ok ? (size_t)n * tpu_dtype_size(s.dtype) : 0;
  return TPU_OK;
}

void tpu_sim_options_init(tpu_sim_options *o) { memset(o, 0, sizeof *o); }

void tpu_sim_set_progress(tpu_sim_progress_fn fn, void *user) { tpu_ref_set_progress(fn, user); }

static const char *const k_precisions[] = {"default", "high", "highest"}; /* = tpu_precision */

/* Options checked and decoded. */
typedef struct {
  int tpu, timing, precision; /* precision: -1 per-op, else a tpu_precision */
  const char *chip, *mesh, *topology;
  int slices;
  int no_window; /* no_windowed_einsum */
  int no_events;
} run_plan;

static tpu_status plan_run(const tpu_sim_options *o, run_plan *p, tpu_diag *d) {
  tpu_sim_options def;
  tpu_sim_options_init(&def);
  if (!o) o = &def;
  memset(p, 0, sizeof *p);
  p->tpu = !o->backend || !strcmp(o->backend, "tpu");
  if (!p->tpu && strcmp(o->backend, "ref") != 0)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "unknown backend '%s' (available: tpu, ref)", o->backend);
  if (o->mode && strcmp(o->mode, "full") && strcmp(o->mode, "timing"))
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "unknown mode '%s' (full or timing)", o->mode);
  p->timing = o->mode && !strcmp(o->mode, "timing");
  p->precision = -1;
  if (o->precision && strcmp(o->precision, "per-op")) {
    p->precision = -2;
    for (int k = 0; k < 3; k++)
      if (!strcmp(o->precision, k_precisions[k])) p->precision = k;
    if (p->precision == -2)
      return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "unknown precision '%s' (default, high or highest)", o->precision);
  }
  if (!p->tpu && (p->timing || o->chip || p->precision >= 0))
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "mode timing, a chip and a precision need the tpu backend");
  if (o->n_out_shardings < 0 || (o->n_out_shardings > 0 && !o->out_shardings))
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "out_shardings: %d given without the strings", o->n_out_shardings);
  for (int k = 0; k < o->n_out_shardings; k++)
    if (!o->out_shardings[k]) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "out_shardings[%d] is NULL", k);
  p->chip = o->chip ? o->chip : "v5e";
  p->mesh = o->mesh;
  p->topology = o->topology;
  p->slices = o->slices;
  p->no_window = o->no_windowed_einsum;
  p->no_events = o->no_events != 0;
  if (o->slices < 0) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "slices is %d; it must be 1 or more", o->slices);
  if (!p->tpu && (o->topology || o->slices > 1))
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "a topology and slices need the tpu backend");
  return TPU_OK;
}

/* A program with sharding annotations becomes the one program every chip runs (as
 * `tpusim run` does): over `spec`, or the module's own mesh; without either it runs as
 * written. */
static tpu_status partition(tpu_module *m, const char *spec, const tpu_chip *chip, int precision, int no_window,
                            tpu_diag *d) {
  if (!spec && !tpu_spmd_needed(m)) return TPU_OK;
  tpu_mesh mesh;
  memset(&mesh, 0, sizeof mesh);
  int found = 0;
  tpu_status st = spec ? tpu_mesh_parse(spec, &mesh, d) : tpu_mesh_from_module(m, &mesh, &found, d);
  if (st == TPU_OK && (spec || found)) {
    tpu_mesh_configure(&mesh, chip, precision, no_window); /* reference backend: the default chip's prices */
    st = tpu_spmd_partition(m, &mesh, d);
  }
  tpu_mesh_free(&mesh);
  return st;
}

/* The module a run compiles and computes: partitioned over the mesh (above), and one slice's
 * program from the TPU compiler (send/recv pairs to the megascale runtime) widened to the
 * run's slices, as `tpusim run --slices K` does (docs/pod.md, "Many slices"). */
static tpu_status prepare_module(tpu_module *m, const run_plan *p, const tpu_chip *chip, tpu_diag *d) {
  TPU_TRY(partition(m, p->mesh, chip, p->precision, p->no_window, d));
  if (!tpu_megascale_present(m, NULL)) return TPU_OK;
  TPU_TRY(tpu_megascale_widen(m, p->slices, d));
  return tpu_ir_verify(m, d);
}

/* Whether prepare_module would rewrite m (a mesh to partition over, or slices to widen to). */
static int prepare_changes(const tpu_module *m, const run_plan *p) {
  return p->mesh || tpu_spmd_needed(m) || tpu_megascale_present(m, NULL);
}

/* Copies caller array i into a tensor checked against `want` (f32 rounded for bf16/f16).
 * An array that needs no change (its dtype and dims are the parameter's; not pred) is
 * borrowed instead: *borrowed = 1, t->data is the caller's (the interpreter never writes a
 * parameter's value), and the tensor must be released with put_input. */
static tpu_status take_input(const tpu_sim_array *a, int i, const tpu_shape *want, tpu_tensor *t, int *borrowed,
                             tpu_diag *d) {
  memset(t, 0, sizeof *t);
  *borrowed = 0;
  tpu_dtype dt;
  if (!tpu__api_internal_dtype(a->dtype, &dt))
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "input %d has an unknown dtype code %d", i, a->dtype);
  if (a->rank < 0 || a->rank > TPU_MAX_RANK)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "input %d has rank %d (0 to %d)", i, a->rank, TPU_MAX_RANK);
  for (int k = 0; k < a->rank; k++)
    if (a->dims[k] < 0) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "input %d has a negative dimension", i);
  int same = dt == want->dtype && dt != TPU_PRED && a->rank == want->rank && a->data;
  for (int k = 0; same && k < a->rank; k++) same = a->dims[k] == want->dims[k];
  if (same && a->nbytes == (size_t)tpu_shape_numel(want) * tpu_dtype_size(dt) && a->nbytes) {
    t->dtype = dt;
    t->rank = a->rank;
    if (a->rank) memcpy(t->dims, a->dims, sizeof(int64_t) * (size_t)a->rank);
    t->nbytes = a->nbytes;
    t->data = (void *)(uintptr_t)a->data;
    *borrowed = 1;
    return TPU_OK;
  }
  TPU_TRY(tpu_tensor_alloc(t, dt, a->rank, a->dims, d));
  if (a->nbytes != t->nbytes || (t->nbytes && !a->data)) {
    size_t got = a->nbytes, need = t->nbytes;
    tpu_tensor_free(t);
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "input %d: %zu bytes given, its dtype and dims need %zu", i, got, need);
  }
  if (t->nbytes) memcpy(t->data, a->data, t->nbytes);
  if (dt == TPU_PRED) /* as .npy reading does: any non-zero byte is true */
    for (size_t k = 0; k < t->nbytes; k++) ((unsigned char *)t->data)[k] = ((unsigned char *)t->data)[k] != 0;
  return tpu_ref_accept_input(t, i, want, tpu_noloc(), d);
}

/* Gives loops whose trip count the compiler could not find the mean trips the values ran
 * (as `tpusim run` does). */
static void apply_trips(tpu_program *p, const tpu_loop_trips *t) {
  for (int i = 0; i < p->ninsns; i++) {
    const tpu_insn *in = &p->insns[i];
    if (in->opc != TPU_ISA_LOOP || in->trips >= 0) continue;
    for (int k = 0; k < t->n; k++)
      if (t->v[k].runs > 0 && tpu_loc_same(t->v[k].loc, in->loc)) {
        tpu_program_set_loop_trips_at(p, in->loc, (t->v[k].iters + t->v[k].runs / 2) / t->v[k].runs);
        break;
      }
  }
}

/* Times `prog` on the chip into tl, metrics, prof and src (src rows linked into prof and tl,
 * as the CLI's report and trace show them). */
static tpu_status time_into(const tpu_program *prog, const tpu_chip *chip, tpu_peak_kind pk, const tpu_sim_module *sm,
                            int events, tpu_timeline *tl, tpu_report_metrics *metrics, tpu_profile *prof,
                            tpu_op_source **src, tpu_diag *d) {
  TPU_TRY(tpu_timing_run(prog, chip, events, tl, d));
  TPU_TRY(tpu_report_metrics_compute(tl, chip, pk, metrics, d));
  TPU_TRY(tpu_report_profile(tl, metrics->clock_hz, prof, d));
  TPU_TRY(tpu__api_source_rows(prog, prof, sm->text, sm->len, src, d));
  for (int i = 0; i < prof->nrows; i++) {
    const tpu_op_source *s = &(*src)[i];
    if (!s->op_name && !s->source_file) continue;
    prof->rows[i].src = s;
    if (prof->rows[i].op >= 0 && prof->rows[i].op < tl->nops) tl->ops[prof->rows[i].op].src = s;
  }
  return TPU_OK;
}

/* Compiles the entry's program for its chip (once: under the build lock, the first run that
 * times it) and, when no loop's trip count waits for the values, times it. */
static tpu_status build_program(tpu__compiled *c, const tpu_sim_module *sm, const run_plan *p,
                                const tpu_loop_trips *trips, tpu_diag *d) {
  if (c->prog) return TPU_OK;
  tpu_status st = parse_loaded(sm, &c->cm, d);
  if (st == TPU_OK) st = prepare_module(c->cm, p, &c->chip, d);
  if (st == TPU_OK) {
    c->pk = tpu_report_peak_kind(c->cm); /* before fusion hides the dots */
    memset(&c->costs, 0, sizeof c->costs);
    c->costs.chip = &c->chip;
    int set;
    st = tpu_topology_for_run(p->topology, p->slices, &c->chip, c->devices, &c->topo, &set, d);
    if (set) c->costs.topo = &c->topo;
  }
  if (st == TPU_OK) {
    tpu_compile_opts co = {&c->chip, NULL, NULL, p->precision, tpu_pod_coll_cost, &c->costs, 0, 0, NULL,
                           trips ? &trips->mosaic : NULL, tpu_pod_hops, /* the first run's Pallas scalars */
                           tpu__cache_mm_memo(&c->chip)}; /* earlier compiles' matmul plans */
    c->costs.memo = tpu__cache_coll_memo(); /* earlier compiles' collective costs */
    st = tpu_compile(c->cm, &co, &c->prog, d);
    c->costs.memo = NULL; /* only the compile, under the build lock, uses it */
  }
  if (st == TPU_OK) st = tpu_mosaic_seen_copy(&c->seen, trips ? &trips->mosaic : NULL, d);
  for (int i = 0; st == TPU_OK && i < c->prog->ninsns; i++)
    c->dyn_trips |= c->prog->insns[i].opc == TPU_ISA_LOOP && c->prog->insns[i].trips < 0;
  if (st == TPU_OK && !c->dyn_trips) {
    st = time_into(c->prog, &c->chip, c->pk, sm, !p->no_events, &c->tl, &c->metrics, &c->prof, &c->src, d);
    c->timed = st == TPU_OK;
  }
  if (st != TPU_OK) { /* a later run starts again */
    tpu__api_source_free_rows(c->src, c->prof.nrows);
    c->src = NULL;
    tpu_profile_free(&c->prof);
    tpu_timeline_free(&c->tl);
    tpu_program_free(c->prog);
    c->prog = NULL;
    tpu_module_free(c->cm);
    c->cm = NULL;
    tpu_pod_cost_free(&c->costs);
    tpu_mosaic_seen_free(&c->seen);
    c->dyn_trips = c->timed = 0;
  }
  return st;
}

/* A run whose Pallas calls were given other scalar operands (scalar prefetch, a dynamic
 * grid's bound) than those the entry's program was compiled with: its own program, compiled
 * on its scalars (the kernels' grids, DMAs and control flow follow them) and timed with its
 * own trip counts; the result owns it. */
static tpu_status own_program(tpu_sim_result *r, const tpu_sim_module *sm, const run_plan *p,
                              const tpu_loop_trips *trips, tpu_diag *d) {
  tpu__compiled *c = r->cc;
  tpu_module *cm = NULL;
  tpu_program *prog = NULL;
  tpu_pod_cost_ctx costs;
  memset(&costs, 0, sizeof costs);
  costs.chip = &c->chip;
  costs.topo = c->costs.topo; /* c->topo, which the result's reference keeps */
  tpu_status st = parse_loaded(sm, &cm, d);
  if (st == TPU_OK) st = prepare_module(cm, p, &c->chip, d);
  if (st == TPU_OK) {
    tpu_compile_opts co = {&c->chip, NULL, NULL, p->precision, tpu_pod_coll_cost, &costs, 0, 0, NULL, &trips->mosaic,
                           tpu_pod_hops, NULL};
    st = tpu_compile(cm, &co, &prog, d);
  }
  if (st == TPU_OK) {
    apply_trips(prog, trips);
    st = time_into(prog, &c->chip, c->pk, sm, !p->no_events, &r->tl, &r->metrics, &r->prof, &r->src, d);
  }
  if (st != TPU_OK) {
    tpu_program_free(prog);
    tpu_module_free(cm);
    tpu_pod_cost_free(&costs);
    return st;
  }
  r->compiled = cm;
  r->prog = prog;
  r->costs = costs;
  r->topo = c->topo;
  r->own_prog = r->own_timing = r->timed = 1;
  return TPU_OK;
}

/* Distinct trip counts whose timings an entry keeps. */
enum { TRIP_TIMINGS = 8 };

/* The timing of the run: the entry's, or this run's own when trip counts come from its values. */
static tpu_status time_program(tpu_sim_result *r, const tpu_sim_module *sm, const run_plan *p,
                               const tpu_loop_trips *trips, tpu_diag *d) {
  tpu__compiled *c = r->cc;
  tpu__cache_build_lock();
  tpu_status st = build_program(c, sm, p, trips, d);
  tpu__cache_build_unlock();
  TPU_TRY(st);
  if (trips && trips->mosaic.n > 0 && !tpu_mosaic_seen_same(&c->seen, &trips->mosaic))
    return own_program(r, sm, p, trips, d);
  r->compiled = c->cm;
  r->prog = c->prog;
  r->costs = c->costs;
  r->topo = c->topo;
  if (!c->dyn_trips) {
    r->tl = c->tl;
    r->metrics = c->metrics;
    r->prof = c->prof;
    r->src = c->src;
    r->timed = 1;
    return TPU_OK;
  }
  /* the entry's program with this run's trip counts */
  tpu_program own = *c->prog;
  own.insns = tpu_malloc((size_t)(own.ninsns ? own.ninsns : 1) * sizeof *own.insns);
  if (!own.insns) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  memcpy(own.insns, c->prog->insns, (size_t)own.ninsns * sizeof *own.insns);
  apply_trips(&own, trips);
  /* The timing depends on the program only through its loops' trip counts: an earlier run
   * with the same counts has it already. */
  int nloops = 0;
  for (int i = 0; i < own.ninsns; i++) nloops += own.insns[i].opc == TPU_ISA_LOOP;
  int64_t *key = tpu_malloc((size_t)(nloops ? nloops : 1) * sizeof *key);
  if (!key) {
    tpu_free(own.insns);
    return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  }
  for (int i = 0, k = 0; i < own.ninsns; i++)
    if (own.insns[i].opc == TPU_ISA_LOOP) key[k++] = own.insns[i].trips;
  const tpu__trip_timing *hit = NULL;
  tpu__cache_build_lock();
  for (int i = 0; i < c->ntrip_timings && !hit; i++)
    if (c->trip_timings[i].ntrips == nloops && !memcmp(c->trip_timings[i].trips, key, (size_t)nloops * sizeof *key))
      hit = &c->trip_timings[i];
  if (hit) {
    r->tl = hit->tl;
    r->metrics = hit->metrics;
    r->prof = hit->prof;
    r->src = hit->src;
  }
  tpu__cache_build_unlock();
  if (hit) {
    tpu_free(key);
    tpu_free(own.insns);
    r->timed = 1;
    return TPU_OK;
  }
  r->own_timing = 1;
  st = time_into(&own, &c->chip, c->pk, sm, !p->no_events, &r->tl, &r->metrics, &r->prof, &r->src, d);
  tpu_free(own.insns);
  if (st != TPU_OK) {
    tpu_free(key);
    return st;
  }
  r->timed = 1;
  /* Kept for later runs (the first TRIP_TIMINGS distinct counts; the entry owns them from now). */
  tpu__cache_build_lock();
  if (c->ntrip_timings < TRIP_TIMINGS) {
    if (!c->trip_timings) c->trip_timings = tpu_calloc(TRIP_TIMINGS, sizeof *c->trip_timings);
    if (c->trip_timings) {
      tpu__trip_timing *t = &c->trip_timings[c->ntrip_timings++];
      t->trips = key;
      t->ntrips = nloops;
      t->tl = r->tl;
      t->metrics = r->metrics;
      t->prof = r->prof;
      t->src = r->src;
      key = NULL;
      r->own_timing = 0;
    }
  }
  tpu__cache_build_unlock();
  tpu_free(key);
  return TPU_OK;
}

void tpu__trip_timings_free(tpu__compiled *c) {
  for (int i = 0; i < c->ntrip_timings; i++) {
    tpu__trip_timing *t = &c->trip_timings[i];
    tpu__api_source_free_rows(t->src, t->prof.nrows);
    tpu_profile_free(&t->prof);
    tpu_timeline_free(&t->tl);
    tpu_free(t->trips);
  }
  tpu_free(c->trip_timings);
  c->trip_timings = NULL;
  c->ntrip_timings = 0;
}

/* The settings of a run that change the compiled program, its timing or the values, less the
 * module and the chip: mesh, topology, backend, precision, slices, windowed einsum, events,
 * and the environment's TPUSIM_* settings (the rules' switches, read at each run: a process
 * may set one between runs). */
static unsigned char *make_opts(const run_plan *p, size_t *len) {
  const char *mesh = p->mesh ? p->mesh : "", *topo = p->topology ? p->topology : "";
  char *env = tpu_dcache_env_settings();
  if (!env) return NULL;
  size_t nm = strlen(mesh), nt = strlen(topo), ne = strlen(env);
  size_t n = nm + 1 + nt + 1 + ne + 1 + 5 * sizeof(int);
  unsigned char *k = tpu_malloc(n), *q = k;
  if (!k) {
    tpu_free(env);
    return NULL;
  }
  memcpy(q, mesh, nm + 1);
  q += nm + 1;
  memcpy(q, topo, nt + 1);
  q += nt + 1;
  memcpy(q, env, ne + 1);
  q += ne + 1;
  tpu_free(env);
  int ints[5] = {p->tpu, p->precision, p->slices, p->no_window, p->no_events}; /* the timeline kept has events or not */
  memcpy(q, ints, sizeof ints);
  *len = n;
  return k;
}

/* The cache key of a run: the module's name and text, then the settings (make_opts) and the
 * chip as loaded (its file's numbers, not its name). Inputs, mode and out_shardings are not
 * in it: they change the run, not the program. */
static unsigned char *make_key(const tpu_sim_module *sm, const unsigned char *opts, size_t optlen,
                               const tpu_chip *chip, size_t *len) {
  size_t nn = strlen(sm->name);
  size_t n = 16 + nn + 1 + sm->len + 1 + optlen + (chip ? sizeof *chip : 0);
  unsigned char *k = tpu_malloc(n), *q = k;
  if (!k) return NULL;
  memcpy(q, "tpusim-cache-2\0\0", 16);
  q += 16;
  memcpy(q, sm->name, nn + 1);
  q += nn + 1;
  memcpy(q, sm->text, sm->len);
  q += sm->len;
  *q++ = 0;
  memcpy(q, opts, optlen);
  q += optlen;
  if (chip) memcpy(q, chip, sizeof *chip);
  *len = n;
  return k;
}

/* The module's last entry when this run's settings and chip are that run's and the entry is
 * still in the cache (with a new reference, a hit), else NULL. The chip is that run's when
 * its load was the same (chip_gen, nonzero) or, failing that, its struct is. */
static tpu__compiled *memo_take(tpu__module_memo *mm, const unsigned char *opts, size_t optlen, const tpu_chip *chip,
                                uint64_t chip_gen, const char *chip_name) {
  tpu__compiled *c = NULL;
  pthread_mutex_lock(&mm->lock);
  if (mm->c && mm->optlen == optlen && !memcmp(mm->opts, opts, optlen) &&
      (chip_gen ? chip_gen == mm->chip_gen && mm->chip_name && !strcmp(mm->chip_name, chip_name)
                : !chip || !memcmp(&mm->c->chip, chip, sizeof *chip)))
    c = tpu__cache_reuse(mm->c, 1);
  pthread_mutex_unlock(&mm->lock);
  return c;
}

/* Remembers c (with a reference of its own, if it is in the cache) and opts (taken over) as
 * the module's last run. */
static void memo_put(tpu__module_memo *mm, tpu__compiled *c, unsigned char *opts, size_t optlen, uint64_t chip_gen,
                     const char *chip_name) {
  tpu__compiled *old = NULL;
  unsigned char *old_opts = NULL;
  char *name = chip_gen ? tpu_strdup(chip_name) : NULL;
  pthread_mutex_lock(&mm->lock);
  char *old_name = mm->chip_name;
  mm->chip_gen = name ? chip_gen : 0;
  mm->chip_name = name;
  if (mm->c != c) {
    old = mm->c;
    old_opts = mm->opts;
    mm->c = tpu__cache_reuse(c, 0); /* NULL when c is not in the cache (size 0) */
    mm->opts = mm->c ? opts : NULL;
    mm->optlen = mm->c ? optlen : 0;
    if (mm->c) opts = NULL;
  }
  pthread_mutex_unlock(&mm->lock);
  tpu_free(old_name);
  tpu__cache_release(old);
  tpu_free(old_opts);
  tpu_free(opts);
}

/* The compiled entry of the run: from the cache, or parsed and partitioned now (and cached). */
static tpu_status find_compiled(const tpu_sim_module *sm, const run_plan *p, tpu__compiled **out, tpu_diag *d) {
  *out = NULL;
  /* The chip file is read on every run (an edited file is a miss); when it still holds the
   * bytes the module's last run loaded, that run's entry is taken back without loading it
   * again or comparing the 49 KB structs. */
  tpu_chip chip;
  uint64_t gen = 0;
  int same = 0;
  if (p->tpu) {
    pthread_mutex_lock(&sm->memo->lock);
    gen = sm->memo->chip_gen;
    pthread_mutex_unlock(&sm->memo->lock);
    TPU_TRY(tpu_chip_load_again(p->chip, &gen, &same, &chip, d));
  }
  size_t optlen = 0, klen = 0;
  unsigned char *opts = make_opts(p, &optlen);
  if (!opts) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  tpu__compiled *c = memo_take(sm->memo, opts, optlen, p->tpu && !same ? &chip : NULL, same ? gen : 0, p->chip);
  if (c) {
    tpu_free(opts);
    *out = c;
    return TPU_OK;
  }
  if (same) { /* another setting: the chip itself is needed for the key (gen 0: loaded) */
    gen = 0;
    tpu_status cst = tpu_chip_load_again(p->chip, &gen, &same, &chip, d);
    if (cst != TPU_OK) {
      tpu_free(opts);
      return cst;
    }
  }
  unsigned char *key = make_key(sm, opts, optlen, p->tpu ? &chip : NULL, &klen);
  if (!key) {
    tpu_free(opts);
    return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  }
  c = tpu__cache_find(key, klen);
  tpu_status st = TPU_OK;
  if (!c) {
    st = tpu__cache_new(key, klen, &c, d);
    if (st == TPU_OK) {
      if (p->tpu) c->chip = chip;
      if (!prepare_changes(sm->m, p)) { /* the values run on the loaded module itself */
        __atomic_add_fetch(sm->mrefs, 1, __ATOMIC_ACQ_REL);
        c->vm = sm->m;
        c->vm_refs = sm->mrefs;
      } else {
        st = parse_loaded(sm, &c->vm, d);
        if (st == TPU_OK) st = prepare_module(c->vm, p, p->tpu ? &c->chip : NULL, d);
      }
      if (st == TPU_OK) {
        c->devices = tpu_module_device_count(c->vm);
        c->vm->keep_plans = 1; /* nothing rewrites it now: its runs keep the interpreter's plans */
        tpu__cache_insert(c);
      } else {
        tpu__cache_release(c);
        c = NULL;
      }
    }
  }
  tpu_free(key);
  if (c)
    memo_put(sm->memo, c, opts, optlen, p->tpu ? gen : 0, p->chip);
  else
    tpu_free(opts);
  *out = c;
  return st;
}

/* A buffer as input i: read in place when it has the parameter's type and dims
 * (*borrowed = 1: t shares the buffer's data), else a converted copy (as take_input). */
static tpu_status take_buffer(const tpu_sim_buffer *b, int i, const tpu_shape *want, tpu_tensor *t, int *borrowed,
                              tpu_diag *d) {
  memset(t, 0, sizeof *t);
  *borrowed = 0;
  if (!b) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "input %d: no buffer", i);
  if (b->donated)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "input %d: the buffer was donated to an earlier run", i);
  int same = b->t.dtype == want->dtype && b->t.rank == want->rank;
  for (int k = 0; same && k < want->rank; k++) same = b->t.dims[k] == want->dims[k];
  if (same) {
    *t = b->t;
    *borrowed = 1;
    return TPU_OK;
  }
  TPU_TRY(tpu_tensor_clone(t, &b->t, d));
  return tpu_ref_accept_input(t, i, want, tpu_noloc(), d);
}

/* Where a run's inputs come from: caller arrays (copied), or buffers (read in place). */
typedef struct {
  const tpu_sim_array *arrays;
  tpu_sim_buffer *const *bufs;
  const int *donate;
  int n;
} run_inputs;

static tpu_status run_impl(const tpu_sim_module *sm, const tpu_sim_options *o, const run_inputs *in,
                           tpu_sim_result **out, tpu_diag *d) {
  int ninputs = in->n;
  const tpu_sim_array *inputs = in->arrays;
  if (!out) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_run: no out-parameter");
  *out = NULL;
  if (!sm) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_run: no module");
  run_plan p;
  TPU_TRY(plan_run(o, &p, d));
  const tpu_comp *e0 = sm->m->entry;
  if (ninputs < 0 || (ninputs > 0 && !inputs && !in->bufs))
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_run: %d inputs without the array list", ninputs);
  if (p.timing && ninputs)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "mode timing computes no values: it takes no inputs (%d given)",
                    ninputs);
  if (!p.timing && ninputs != e0->nparams)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_loc_at(sm->name, 0, 0),
                    "the entry computation '%s' takes %d parameters; %d inputs were given", e0->name, e0->nparams,
                    ninputs);

  tpu_sim_result *r = tpu_calloc(1, sizeof *r);
  if (!r) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  r->program = tpu_strdup(sm->name);
  r->mode = p.timing ? "timing" : "full";
  r->precision = p.precision >= 0 ? k_precisions[p.precision] : "per-op";
  tpu_tensor *args = NULL;
  int *borrowed = NULL; /* per arg: shares a buffer's data (not freed here) */
  int nargs = 0;
  tpu_loop_trips trips;
  memset(&trips, 0, sizeof trips);
  tpu_status st = r->program ? TPU_OK : TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  if (st == TPU_OK) st = find_compiled(sm, &p, &r->cc, d);
  if (st == TPU_OK) r->chip = &r->cc->chip;
  const tpu_module *m = r->cc ? r->cc->vm : NULL;
  if (st == TPU_OK) {
    r->devices = r->cc->devices;
    if (r->devices > 1) {
      st = tpu_podio_prepare(m, o ? o->out_shardings : NULL, o ? o->n_out_shardings : 0, &r->pod, d);
      r->have_pod = st == TPU_OK;
    }
  }
  if (st == TPU_OK && !p.timing) {
    const tpu_comp *e = m->entry;
    args = tpu_calloc((size_t)(e->nparams ? e->nparams : 1), sizeof *args);
    borrowed = tpu_calloc((size_t)(e->nparams ? e->nparams : 1), sizeof *borrowed);
    if (!args || !borrowed) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
    for (; st == TPU_OK && nargs < e->nparams; nargs++) {
      tpu_shape want = e->params[nargs]->shape;
      want.has_layout = 0;
      const tpu_sim_buffer *b = in->bufs ? in->bufs[nargs] : NULL;
      if (r->have_pod && (b || !in->bufs)) {
        int rank = b ? b->t.rank : inputs[nargs].rank;
        const int64_t *dims = b ? b->t.dims : inputs[nargs].dims;
        tpu_podio_input_shape(&r->pod, m, nargs, rank, dims, &want);
      }
      st = in->bufs ? take_buffer(b, nargs, &want, &args[nargs], &borrowed[nargs], d)
                    : take_input(&inputs[nargs], nargs, &want, &args[nargs], &borrowed[nargs], d);
      if (st != TPU_OK) break;
    }
    /* Values run on the partitioned module as written (the compiler rewrites its own copy). */
    if (st == TPU_OK)
      st = r->have_pod ? tpu_podio_values(&r->pod, m, p.tpu ? r->chip : NULL, p.precision, args, nargs, &trips, &r->value,
                                       NULL, d)
           : p.tpu  ? tpu_chip_run_values_trips(m, r->chip, p.precision, args, nargs, &trips, &r->value, d)
                    : tpu_ref_run(m, args, nargs, &r->value, d);
    if (st == TPU_OK) {
      r->nleaves = tpu_tensor_count_leaves(&r->value);
      r->leaves = tpu_calloc((size_t)r->nleaves + 1, sizeof *r->leaves);
      r->taken = tpu_calloc((size_t)r->nleaves + 1, 1);
      if (!r->leaves || !r->taken) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
      else tpu_tensor_collect_leaves(&r->value, r->leaves);
    }
  }
  if (st == TPU_OK && p.tpu) st = time_program(r, sm, &p, &trips, d);
  for (int i = 0; i < nargs; i++)
    if (borrowed[i]) memset(&args[i], 0, sizeof args[i]); /* the caller's memory */
    else tpu_tensor_free(&args[i]);
  tpu_free(args);
  tpu_free(borrowed);
  tpu_loop_trips_free(&trips);
  if (st != TPU_OK) {
    tpu_sim_result_free(r);
    return st;
  }
  if (in->bufs && in->donate && !p.timing) /* the run succeeded: donated buffers give up their memory */
    for (int i = 0; i < ninputs; i++)
      if (in->donate[i]) {
        tpu_tensor_free(&in->bufs[i]->t);
        in->bufs[i]->donated = 1;
      }
  *out = r;
  return TPU_OK;
}

tpu_status tpu_sim_run(const tpu_sim_module *sm, const tpu_sim_options *o, const tpu_sim_array *inputs, int ninputs,
                       tpu_sim_result **out, tpu_diag *d) {
  run_inputs in = {inputs, NULL, NULL, ninputs};
  return run_impl(sm, o, &in, out, d);
}

tpu_status tpu_sim_run_buffers(const tpu_sim_module *sm, const tpu_sim_options *o, tpu_sim_buffer *const *inputs,
                               int ninputs, const int *donate, tpu_sim_result **out, tpu_diag *d) {
  if (out) *out = NULL;
  if (ninputs > 0 && !inputs)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "tpu_sim_run_buffers: %d inputs without the buffer list", ninputs);
  for (int i = 0; donate && i < ninputs; i++) {
    if (!donate[i]) continue;
    if (!inputs[i]) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "input %d: no buffer", i);
    for (int j = 0; j < ninputs; j++)
      if (j != i && inputs[j] == inputs[i])
        return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "input %d is donated but the same buffer is also input %d", i,
                        j);
  }
  run_inputs in = {NULL, inputs, donate, ninputs};
  return run_impl(sm, o, &in, out, d);
}
