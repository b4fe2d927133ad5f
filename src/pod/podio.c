/* Running a partitioned module from global arrays: shardings cut the inputs, the pod runs, results are assembled. */
#include "pod/podio.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/json.h"
#include "base/npy.h"
#include "chip/program.h"
#include "chip/timeline.h"
#include "ir/collective.h"
#include "pod/cost.h"
#include "pod/pipeline.h"
#include "report/report.h"
#include "report/report.h"
#include "pod/pod.h"
#include "ref/ref.h"

void tpu_podio_free(tpu_podio *pc) {
  for (int i = 0; i < pc->nparams; i++)
    if (pc->in_mode && pc->in_mode[i] == TPU_POD_IO_SHARDED) tpu_sharding_free(&pc->in_sh[i]);
  for (int i = 0; i < pc->nout; i++)
    if (pc->out_mode && pc->out_mode[i] == TPU_POD_IO_SHARDED) tpu_sharding_free(&pc->out_sh[i]);
  tpu_free(pc->in_mode);
  tpu_free(pc->in_sh);
  tpu_free(pc->out_mode);
  tpu_free(pc->out_sh);
  tpu_free(pc->out_local);
  memset(pc, 0, sizeof *pc);
}

/* Result leaves of shape s in order into v (room for all); returns the count. */
static int shape_leaves(const tpu_shape *s, const tpu_shape **v, int n) {
  if (s->dtype != TPU_TUPLE) {
    if (v) v[n] = s;
    return n + 1;
  }
  for (int i = 0; i < s->ntuple; i++) n = shape_leaves(&s->elems[i], v, n);
  return n;
}

/* A copy of an array sharding (its own device list). */
static tpu_status copy_sharding(const tpu_sharding *sh, tpu_sharding *out, tpu_loc loc, tpu_diag *d) {
  *out = *sh;
  out->devices = NULL;
  out->elems = NULL;
  out->nelems = 0;
  if (!sh->ndevices) return TPU_OK;
  out->devices = tpu_malloc(sizeof *out->devices * (size_t)sh->ndevices);
  if (!out->devices) return TPU_FAIL(d, TPU_ERR_NOMEM, loc, "out of memory");
  memcpy(out->devices, sh->devices, sizeof *out->devices * (size_t)sh->ndevices);
  return TPU_OK;
}

/* The sharding of every leaf of s, in order, into out[*n...]: sh is one sharding for all
 * leaves, a tuple matching s, or (as XLA prints nested tuples) a flat list of the leaves. */
static tpu_status split_leaves(const tpu_sharding *sh, const tpu_shape *s, tpu_sharding *out, int *n, tpu_loc loc,
                               tpu_diag *d) {
  if (sh->kind == TPU_SHARD_TUPLE && (s->dtype != TPU_TUPLE || s->ntuple != sh->nelems)) {
    int nl = shape_leaves(s, NULL, 0);
    if (nl != sh->nelems)
      return TPU_FAIL(d, TPU_ERR_INVALID, loc, "the result sharding has %d elements but the result has %d leaves",
                      sh->nelems, nl);
    for (int i = 0; i < nl; i++) TPU_TRY(copy_sharding(&sh->elems[i], &out[(*n)++], loc, d));
    return TPU_OK;
  }
  if (s->dtype == TPU_TUPLE) {
    for (int i = 0; i < s->ntuple; i++)
      TPU_TRY(split_leaves(sh->kind == TPU_SHARD_TUPLE ? &sh->elems[i] : sh, &s->elems[i], out, n, loc, d));
    return TPU_OK;
  }
  return copy_sharding(sh, &out[(*n)++], loc, d);
}

tpu_status tpu_podio_prepare(const tpu_module *m, const char *const *out_sh, int n_out_sh, tpu_podio *pc,
                               tpu_diag *d) {
  memset(pc, 0, sizeof *pc);
  tpu_module_device_grid(m, &pc->replicas, &pc->partitions);
  pc->ndev = pc->replicas * pc->partitions;
  const tpu_comp *e = m->entry;
  const tpu_instr *root = e->root;
  pc->nparams = e->nparams;
  pc->nout = shape_leaves(&root->shape, NULL, 0);
  pc->in_mode = tpu_calloc((size_t)(pc->nparams + 1), sizeof *pc->in_mode);
  pc->in_sh = tpu_calloc((size_t)(pc->nparams + 1), sizeof *pc->in_sh);
  pc->out_mode = tpu_calloc((size_t)(pc->nout + 1), sizeof *pc->out_mode);
  pc->out_sh = tpu_calloc((size_t)(pc->nout + 1), sizeof *pc->out_sh);
  pc->out_local = tpu_calloc((size_t)(pc->nout + 1), sizeof *pc->out_local);
  if (!pc->in_mode || !pc->in_sh || !pc->out_mode || !pc->out_sh || !pc->out_local) {
    tpu_podio_free(pc);
    return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  }
  shape_leaves(&root->shape, pc->out_local, 0);
  tpu_status st = TPU_OK;
  for (int i = 0; st == TPU_OK && i < e->nparams; i++) {
    const tpu_instr *p = e->params[i];
    int found;
    tpu_sharding sh;
    st = tpu_sharding_of(p, &sh, &found, d);
    if (st != TPU_OK || !found) continue;
    char what[64];
    snprintf(what, sizeof what, "parameter %d", i);
    if (sh.kind == TPU_SHARD_TUPLE || p->shape.dtype == TPU_TUPLE) {
      tpu_sharding_free(&sh);
      st = TPU_FAIL(d, TPU_ERR_UNSUPPORTED, p->loc, "parameter %d is a tuple; the pod takes array parameters", i);
      break;
    }
    st = tpu_sharding_check(&sh, &p->shape, pc->ndev, p->loc, what, d);
    if (st != TPU_OK) {
      tpu_sharding_free(&sh);
      break;
    }
    pc->in_mode[i] = TPU_POD_IO_SHARDED;
    pc->in_sh[i] = sh;
  }
  if (st == TPU_OK && n_out_sh > 0) {
    if (n_out_sh != 1 && n_out_sh != pc->nout) {
      st = TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "%d --out-sharding given; the result has %d leaves (give one per leaf, or one for all)",
                    n_out_sh, pc->nout);
    }
    for (int k = 0; st == TPU_OK && k < pc->nout; k++) {
      st = tpu_sharding_parse(out_sh[n_out_sh == 1 ? 0 : k], tpu_noloc(), &pc->out_sh[k], d);
      if (st != TPU_OK) break;
      pc->out_mode[k] = TPU_POD_IO_SHARDED;
      char what[64];
      snprintf(what, sizeof what, "result %d", k);
      st = tpu_sharding_check(&pc->out_sh[k], pc->out_local[k], pc->ndev, tpu_noloc(), what, d);
    }
  } else if (st == TPU_OK) {
    int found;
    tpu_sharding sh;
    st = tpu_sharding_of(root, &sh, &found, d);
    if (st == TPU_OK && found) {
      int n = 0;
      st = split_leaves(&sh, &root->shape, pc->out_sh, &n, root->loc, d);
      for (int k = 0; k < n; k++) pc->out_mode[k] = TPU_POD_IO_SHARDED;
      if (st != TPU_OK) /* free what was copied */
        for (int k = n; k < pc->nout; k++) pc->out_mode[k] = TPU_POD_IO_PLAIN;
      for (int k = 0; st == TPU_OK && k < n; k++) {
        char what[64];
        snprintf(what, sizeof what, "result %d", k);
        st = tpu_sharding_check(&pc->out_sh[k], pc->out_local[k], pc->ndev, root->loc, what, d);
      }
      tpu_sharding_free(&sh);
    }
  }
  if (st != TPU_OK) tpu_podio_free(pc);
  return st;
}

void tpu_podio_global_shape(const tpu_podio *pc, const tpu_module *m, int i, tpu_shape *out) {
  *out = m->entry->params[i]->shape;
  out->has_layout = 0;
  if (pc->in_mode[i] == TPU_POD_IO_SHARDED) tpu_sharding_global_dims(&pc->in_sh[i], &m->entry->params[i]->shape, out->dims);
}

tpu_status tpu_podio_load(const tpu_podio *pc, const tpu_module *m, int i, const char *path, tpu_tensor *t,
                            tpu_diag *d) {
  const tpu_shape *local = &m->entry->params[i]->shape;
  if (local->dtype == TPU_TUPLE || local->dtype == TPU_TOKEN) return tpu_ref_load_input(path, i, local, t, d);
  tpu_shape want;
  tpu_tensor probe;
  TPU_TRY(tpu_npy_read(path, &probe, d));
  tpu_podio_input_shape(pc, m, i, probe.rank, probe.dims, &want);
  tpu_tensor_free(&probe);
  return tpu_ref_load_input(path, i, &want, t, d);
}

void tpu_podio_input_shape(const tpu_podio *pc, const tpu_module *m, int i, int rank, const int64_t *dims_in,
                           tpu_shape *out) {
  const tpu_shape *local = &m->entry->params[i]->shape;
  tpu_shape want = *local;
  want.has_layout = 0;
  int64_t dims[TPU_MAX_RANK] = {0};
  if (rank < 0 || rank > TPU_MAX_RANK) rank = 0;
  memcpy(dims, dims_in, sizeof dims[0] * (size_t)rank);
  if (local->dtype == TPU_TUPLE || local->dtype == TPU_TOKEN) {
    *out = want;
    return;
  }
  if (pc->in_mode[i] == TPU_POD_IO_SHARDED) {
    const tpu_sharding *sh = &pc->in_sh[i];
    int ok = rank == local->rank;
    for (int k = 0; ok && k < rank; k++) {
      int64_t tiles = sh->kind == TPU_SHARD_TILED ? sh->tile[k] : 1;
      ok = dims[k] > (local->dims[k] - 1) * tiles && dims[k] <= local->dims[k] * tiles;
    }
    if (ok) memcpy(want.dims, dims, sizeof dims); /* the global shape; may be uneven */
    else tpu_sharding_global_dims(sh, local, want.dims);
  } else if (rank == local->rank + 1 && dims[0] == pc->ndev) { /* stacked, one per device */
    int ok = 1;
    for (int k = 0; ok && k < local->rank; k++) ok = dims[k + 1] == local->dims[k];
    if (ok) {
      want.rank = rank;
      memcpy(want.dims, dims, sizeof dims);
    }
  }
  *out = want;
}

typedef struct {
  const tpu_module *m;
  const tpu_chip *chip;
  int precision;
  tpu_loop_trips *trips;
} run_ctx;

static tpu_status run_device(void *user, int64_t dev, const tpu_ref_comm *comm, const tpu_tensor *args, int nargs,
                             tpu_tensor *out, tpu_diag *d) {
  const run_ctx *c = user;
  if (c->chip)
    return tpu_chip_run_values_dev(c->m, c->chip, c->precision, comm, args, nargs, dev == 0 ? c->trips : NULL, out, d);
  tpu_ref_opts o = {NULL, NULL, NULL, comm, NULL, 0, NULL, 0};
  return tpu_ref_run_opts(c->m, args, nargs, &o, out, d);
}

/* Device dev's value of parameter i from the global input g. */
static tpu_status shard_input(const tpu_podio *pc, const tpu_shape *local, int i, int64_t dev, const tpu_tensor *g,
                              tpu_tensor *out, tpu_diag *d) {
  if (pc->in_mode[i] == TPU_POD_IO_SHARDED) return tpu_sharding_shard(&pc->in_sh[i], dev, g, local, out, d);
  if (g->rank == local->rank + 1 && g->dtype != TPU_TUPLE) { /* stacked: row dev */
    TPU_TRY(tpu_tensor_alloc(out, g->dtype, local->rank, local->dims, d));
    memcpy(out->data, (const char *)g->data + (size_t)dev * out->nbytes, out->nbytes);
    return TPU_OK;
  }
  return tpu_tensor_clone(out, g, d);
}

/* The global value of result leaf k from every device's leaf. */
static tpu_status assemble(const tpu_podio *pc, int k, const tpu_tensor *const *leaves, tpu_tensor *out,
                           tpu_diag *d) {
  const tpu_shape *local = pc->out_local[k];
  if (pc->out_mode[k] == TPU_POD_IO_SHARDED)
    return tpu_sharding_assemble(&pc->out_sh[k], leaves, pc->ndev, local, out, d);
  int64_t dims[TPU_MAX_RANK];
  dims[0] = pc->ndev;
  memcpy(dims + 1, local->dims, sizeof dims[0] * (size_t)local->rank);
  if (local->rank + 1 > TPU_MAX_RANK)
    return TPU_FAIL(d, TPU_ERR_LIMIT, tpu_noloc(), "result %d has rank %d: stacking per device needs one more", k,
                    local->rank);
  TPU_TRY(tpu_tensor_alloc(out, local->dtype, local->rank + 1, dims, d));
  for (int64_t dev = 0; dev < pc->ndev; dev++)
    memcpy((char *)out->data + (size_t)dev * leaves[dev]->nbytes, leaves[dev]->data, leaves[dev]->nbytes);
  return TPU_OK;
}

tpu_status tpu_podio_values(const tpu_podio *pc, const tpu_module *m, const tpu_chip *chip, int precision,
                              const tpu_tensor *args, int nargs, tpu_loop_trips *trips, tpu_tensor *result,
                              tpu_tensor *per_device, tpu_diag *d) {
  return tpu_podio_values_dist(pc, NULL, m, chip, precision, args, nargs, trips, result, per_device, d);
}

tpu_status tpu_podio_values_dist(const tpu_podio *pc, const tpu_pod_transport *tr, const tpu_module *m,
                                   const tpu_chip *chip, int precision, const tpu_tensor *args, int nargs,
                                   tpu_loop_trips *trips, tpu_tensor *result, tpu_tensor *per_device, tpu_diag *d) {
  memset(result, 0, sizeof *result);
  int64_t lo = tr ? tr->first : 0, hi = tr ? tr->first + tr->count : pc->ndev;
  int root = !tr || tr->rank == 0;
  int64_t n = pc->ndev;
  const tpu_comp *e = m->entry;
  tpu_tensor **dargs = tpu_calloc((size_t)n, sizeof *dargs);
  tpu_tensor *outs = tpu_calloc((size_t)n, sizeof *outs);
  const tpu_tensor **leaves = tpu_calloc((size_t)n * (size_t)(pc->nout + 1), sizeof *leaves);
  tpu_status st = TPU_OK;
  if (!dargs || !outs || !leaves) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  for (int64_t dev = 0; st == TPU_OK && dev < n; dev++) {
    dargs[dev] = tpu_calloc((size_t)(nargs + 1), sizeof *dargs[dev]);
    if (!dargs[dev]) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
    for (int i = 0; st == TPU_OK && dev >= lo && dev < hi && i < nargs; i++)
      st = shard_input(pc, &e->params[i]->shape, i, dev, &args[i], &dargs[dev][i], d);
  }
  run_ctx c = {m, chip, precision, lo == 0 ? trips : NULL};
  if (st == TPU_OK) st = tpu_pod_run_dist(m, tr, run_device, &c, dargs, nargs, outs, d);
  /* Inputs are no longer needed: free them before assembling. */
  for (int64_t dev = 0; dargs && dev < n; dev++) {
    for (int i = 0; dargs[dev] && i < nargs; i++) tpu_tensor_free(&dargs[dev][i]);
    tpu_free(dargs[dev]);
  }
  tpu_free(dargs);
  if (st == TPU_OK && root) {
    for (int64_t dev = 0; dev < n; dev++) tpu_tensor_collect_leaves(&outs[dev], leaves + dev * pc->nout);
    int tuple = e->root->shape.dtype == TPU_TUPLE;
    if (tuple) st = tpu_tensor_alloc_tuple(result, pc->nout, d);
    const tpu_tensor **col = tpu_calloc((size_t)n, sizeof *col);
    if (st == TPU_OK && !col) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
    for (int k = 0; st == TPU_OK && k < pc->nout; k++) {
      for (int64_t dev = 0; dev < n; dev++) col[dev] = leaves[dev * pc->nout + k];
      st = assemble(pc, k, col, tuple ? &result->elems[k] : result, d);
    }
    tpu_free(col);
    if (st != TPU_OK) tpu_tensor_free(result);
  }
  for (int64_t dev = 0; outs && dev < n; dev++) {
    if (st == TPU_OK && per_device) per_device[dev] = outs[dev];
    else tpu_tensor_free(&outs[dev]);
  }
  tpu_free(outs);
  tpu_free(leaves);
  return st;
}

/* Bytes of a shape's leaves. */
static double shape_bytes(const tpu_shape *s) {
  if (s->dtype == TPU_TUPLE) {
    double b = 0;
    for (int i = 0; i < s->ntuple; i++) b += shape_bytes(&s->elems[i]);
    return b;
  }
  return tpu_dtype_is_array(s->dtype) ? (double)tpu_shape_numel(s) * (double)tpu_dtype_size(s->dtype) : 0;
}

/* Bus bandwidth as NCCL defines it: the bytes a ring moves per chip over the time, so it is
 * comparable with a link's bandwidth whatever the group size. */
static double bus_bytes(const tpu_instr *in, int64_t n) {
  double f = n > 0 ? (double)(n - 1) / (double)n : 0, in_b = 0;
  for (int i = 0; i < in->noperands; i++) in_b += shape_bytes(&in->operands[i]->shape);
  switch (tpu_collective_base(in->op)) {
    case TPU_OP_ALL_REDUCE: return 2 * f * in_b;
    case TPU_OP_ALL_GATHER: return f * in_b * (double)n;
    case TPU_OP_REDUCE_SCATTER:
    case TPU_OP_ALL_TO_ALL: return f * in_b;
    default: return in_b;
  }
}

/* One collective of the program as the timing ran it. */
typedef struct {
  const char *name, *kind;
  int64_t group, count;
  double seconds; /* one execution */
  double bytes;   /* sent by each chip, one execution */
  double bus_bw;  /* bytes/s */
  const tpu_pod_coll_info *info; /* the link model's answer (NULL: unknown) */
} coll_row;

/* The program's collectives, longest total time first; *n rows (caller frees). */
static coll_row *collect(const tpu_program *p, const tpu_timeline *tl, double clock, const tpu_pod_cost_ctx *costs,
                         int *n) {
  int nc = 0;
  for (int i = 0; i < p->ninsns; i++) nc += p->insns[i].opc == TPU_ISA_ICI;
  *n = 0;
  coll_row *rows = tpu_calloc((size_t)(nc ? nc : 1), sizeof *rows);
  if (!rows) return NULL;
  for (int i = 0; i < p->ninsns; i++) {
    const tpu_insn *x = &p->insns[i];
    if (x->opc != TPU_ISA_ICI) continue;
    const tpu_prog_op *po = x->op >= 0 ? &p->ops[x->op] : NULL;
    coll_row *r = &rows[(*n)++];
    r->name = po ? po->name : "?";
    r->kind = po ? po->kind : "ici";
    r->count = x->op >= 0 ? tl->ops[x->op].count : 1;
    r->seconds = (double)x->cycles / clock;
    r->bytes = (double)x->bytes;
    r->group = 1;
    tpu_diag d;
    if (po && po->instr) (void)tpu_collective_devices(po->instr, &r->group, &d);
    r->bus_bw = po && po->instr && r->seconds > 0 ? bus_bytes(po->instr, r->group) / r->seconds : 0;
    for (int k = 0; costs && po && k < costs->ninfo; k++)
      if (costs->info[k].in == po->instr) r->info = &costs->info[k];
  }
  for (int i = 1; i < *n; i++) /* insertion sort: programs have few collectives */
    for (int j = i; j > 0 && rows[j].seconds * (double)rows[j].count > rows[j - 1].seconds * (double)rows[j - 1].count; j--) {
      coll_row t = rows[j];
      rows[j] = rows[j - 1];
      rows[j - 1] = t;
    }
  return rows;
}

/* Over the step: the DCN phases' time and bytes per chip, and every collective's time
 * (each times its executions); returns how many collectives span slices. */
static int dcn_totals(const coll_row *rows, int nc, double *dcn_s, double *dcn_b, double *coll_s) {
  int n = 0;
  *dcn_s = *dcn_b = *coll_s = 0;
  for (int r = 0; r < nc; r++) {
    *coll_s += rows[r].seconds * (double)rows[r].count;
    if (!rows[r].info || rows[r].info->dcn_slices < 2) continue;
    n++;
    *dcn_s += rows[r].info->dcn_seconds * (double)rows[r].count;
    *dcn_b += rows[r].info->dcn_bytes * (double)rows[r].count;
  }
  return n;
}

void tpu_podio_print(FILE *f, const tpu_podio *pc, const tpu_program *p, const tpu_timeline *tl,
                     const tpu_chip *chip, double flops_per_s, int top, const tpu_pod_cost_ctx *costs) {
  double clock = tl->clock_hz > 0 ? tl->clock_hz : chip->clock_hz, step = (double)tl->total_cycles / clock;
  char a[32], b[32];
  tpu_report_si(a, sizeof a, flops_per_s * (double)pc->ndev, "FLOP/s");
  tpu_report_si(b, sizeof b, tl->ici_bytes, "B");
  char ts[32];
  if (step >= 1) snprintf(ts, sizeof ts, "%.4g s", step);
  else if (step >= 1e-3) snprintf(ts, sizeof ts, "%.4g ms", step * 1e3);
  else snprintf(ts, sizeof ts, "%.4g us", step * 1e6);
  fprintf(f, "pod: %lld chips, one step %s; the slice computes %s; each chip sends %s over ICI\n", (long long)pc->ndev,
          ts, a, b);
  double ici_busy = tl->total_cycles > 0 ? (double)tl->busy[TPU_UNIT_ICI] / (double)tl->total_cycles : 0;
  double ici_wait = tl->total_cycles > 0 ? (double)tl->ici_wait_cycles / (double)tl->total_cycles : 0;
  fprintf(f, "communication: ICI busy %.1f%% of the step, %.1f%% not hidden behind compute (waiting on ICI)\n",
          100 * ici_busy, 100 * ici_wait);
  tpu_report_si(a, sizeof a, (double)p->hbm_peak, "B");
  tpu_report_si(b, sizeof b, (double)chip->hbm_bytes, "B");
  fprintf(f, "memory: each chip holds at most %s of its %s HBM (%.1f%%)\n", a, b,
          chip->hbm_bytes > 0 ? 100.0 * (double)p->hbm_peak / (double)chip->hbm_bytes : 0);
  int nc;
  const tpu_topology *topo = costs ? tpu_pod_cost_topology(costs) : NULL;
  char tn[96];
  if (topo) {
    tpu_topology_format(topo, tn, sizeof tn);
    tpu_report_si(a, sizeof a, topo->link_bw, "B/s");
    fprintf(f, "slice: %s on %s, %lld links per chip at %s each way, %.3g us per hop", tn, chip->name,
            (long long)topo->links_per_chip, a, topo->hop_s * 1e6);
    if (topo->slices > 1) {
      tpu_report_si(b, sizeof b, topo->dcn_host_bw, "B/s");
      fprintf(f, "; %lld slices joined by DCN: %s out of each host's NICs, shared by its %lld chips, %.3g us per step",
              (long long)topo->slices, b, (long long)topo->chips_per_host, topo->dcn_latency_s * 1e6);
    }
    fprintf(f, "\n");
  }
  coll_row *rows = collect(p, tl, clock, costs, &nc);
  if (!rows || !nc) {
    tpu_free(rows);
    return;
  }
  fprintf(f, "collectives:\n  %-28s %-20s %5s %6s %10s %7s %10s %10s  %s\n", "op", "kind", "group", "count", "time(us)",
          "%step", "sent B", "bus GB/s", "busiest link (util)");
  int shown = top > 0 && top < nc ? top : nc;
  for (int r = 0; r < shown; r++) {
    const coll_row *x = &rows[r];
    double t = x->seconds * (double)x->count;
    char ln[160] = "-";
    if (x->info && topo && x->info->r.busiest_link >= 0) {
      char l[80];
      tpu_topology_link_name(topo, x->info->r.busiest_link, l, sizeof l);
      snprintf(ln, sizeof ln, "%s (%.0f%%)", l, 100 * x->info->r.busiest_util);
    }
    if (x->info && x->info->dcn_slices > 1) {
      char dl[160];
      snprintf(dl, sizeof dl, "DCN %.3f us over %lld slices, %.4g B per chip; ICI %s", x->info->dcn_seconds * 1e6,
               (long long)x->info->dcn_slices, x->info->dcn_bytes, ln);
      snprintf(ln, sizeof ln, "%s", dl);
    }
    fprintf(f, "  %-28.28s %-20.20s %5lld %6lld %10.3f %7.1f %10.4g %10.4g  %s\n", x->name, x->kind,
            (long long)x->group, (long long)x->count, t * 1e6, step > 0 ? 100 * t / step : 0, x->bytes, x->bus_bw / 1e9,
            ln);
  }
  if (shown < nc) fprintf(f, "  ... %d more (--top 0 lists all)\n", nc - shown);
  if (topo && topo->slices > 1) {
    double dcn_t, dcn_b, coll_t;
    int nd = dcn_totals(rows, nc, &dcn_t, &dcn_b, &coll_t);
    tpu_report_si(a, sizeof a, dcn_b, "B");
    fprintf(f, "DCN: %d collective%s span slices; each chip sends %s over DCN per step, %.4g us (%.1f%% of the step) "
            "beside %.4g us on ICI\n", nd, nd == 1 ? "" : "s", a, dcn_t * 1e6, step > 0 ? 100 * dcn_t / step : 0,
            (coll_t - dcn_t) * 1e6);
  }
  /* The links over the whole step: bytes of every collective times its executions. */
  if (topo && costs) {
    int64_t nl = tpu_topology_nlinks(topo);
    double *use = tpu_calloc((size_t)(nl ? nl : 1), sizeof *use);
    int complete = use != NULL;
    for (int r = 0; use && r < nc; r++) {
      if (!rows[r].info) continue;
      if (!rows[r].info->link_bytes) {
        complete = 0;
        continue;
      }
      for (int64_t l = 0; l < nl; l++) use[l] += rows[r].info->link_bytes[l] * (double)rows[r].count;
    }
    if (use && complete && step > 0 && topo->link_bw > 0) {
      int64_t best = -1, busy = 0;
      for (int64_t l = 0; l < nl; l++) {
        if (use[l] > 0) busy++;
        if (use[l] > 0 && (best < 0 || use[l] > use[best])) best = l;
      }
      if (best >= 0) {
        char l[80];
        tpu_topology_link_name(topo, best, l, sizeof l);
        fprintf(f, "links: %lld of %lld carry traffic; the busiest, %s, is busy %.1f%% of the step\n", (long long)busy,
                (long long)tpu_topology_count_links(topo), l, 100 * use[best] / topo->link_bw / step);
      }
    }
    tpu_free(use);
  }
  /* Pipeline loops: the bubble each stage spends on padding. */
  tpu_pod_pipeline pls[8];
  int npl = tpu_pod_find_pipelines(p, tl, pls, 8);
  for (int k = 0; k < npl; k++) {
    const tpu_pod_pipeline *pl = &pls[k];
    double ls = pl->loop_cycles / clock;
    char back[128] = "";
    if (pl->reverse) snprintf(back, sizeof back, " and gradients back (%s)", pl->reverse);
    fprintf(f, "pipeline: %s passes activations round %lld stages (%s)%s in %lld iterations: each stage computes on "
            "padding in %lld of them%s, the bubble: %.1f%% of the loop's %.4g us, %.4g us per stage\n", pl->loop,
            (long long)pl->stages, pl->permute, back, (long long)pl->trips, (long long)pl->padding,
            pl->reverse ? " (forward and backward each, 1F1B)" : "", 100.0 * (double)pl->padding / (double)pl->trips,
            ls * 1e6, pl->bubble_cycles / clock * 1e6);
  }
  /* What to try, from where the step waits. */
  if (ici_wait > 0.3)
    fprintf(f, "hint: %.0f%% of the step waits on ICI: the largest collective is %s over %lld chips; fewer chips in its "
            "groups, a sharding that moves less, or overlapping it with compute (async collectives) would help\n",
            100 * ici_wait, rows[0].name, (long long)rows[0].group);
  else if (ici_busy > 0 && ici_wait < 0.05)
    fprintf(f, "hint: communication is %s hidden or small (%.1f%% of the step waits on ICI): the step scales with "
            "compute per chip\n", ici_busy > ici_wait * 2 ? "mostly" : "", 100 * ici_wait);
  tpu_free(rows);
}

void tpu_podio_write_json(void *user, tpu_json_writer *w) {
  const tpu_podio_report *x = user;
  const tpu_timeline *tl = x->tl;
  double clock = tl->clock_hz > 0 ? tl->clock_hz : x->chip->clock_hz;
  double total = (double)tl->total_cycles;
  tpu_json_key(w, "pod");
  tpu_json_begin_object(w);
  tpu_json_key(w, "chips");
  tpu_json_int(w, x->pc->ndev);
  tpu_json_key(w, "replicas");
  tpu_json_int(w, x->pc->replicas);
  tpu_json_key(w, "partitions");
  tpu_json_int(w, x->pc->partitions);
  tpu_json_key(w, "ici_bytes_per_chip");
  tpu_json_number(w, tl->ici_bytes);
  tpu_json_key(w, "ici_busy_fraction");
  tpu_json_number(w, total > 0 ? (double)tl->busy[TPU_UNIT_ICI] / total : 0);
  tpu_json_key(w, "ici_wait_fraction");
  tpu_json_number(w, total > 0 ? (double)tl->ici_wait_cycles / total : 0);
  tpu_json_key(w, "hbm_peak_bytes_per_chip");
  tpu_json_int(w, x->p->hbm_peak);
  tpu_json_key(w, "hbm_capacity_bytes");
  tpu_json_int(w, x->chip->hbm_bytes);
  const tpu_topology *topo = x->costs ? tpu_pod_cost_topology(x->costs) : NULL;
  if (topo) {
    char tn[96];
    tpu_topology_format(topo, tn, sizeof tn);
    tpu_json_key(w, "topology");
    tpu_json_string(w, tn);
    tpu_json_key(w, "link_bandwidth");
    tpu_json_number(w, topo->link_bw);
  }
  int nc;
  coll_row *rows = collect(x->p, tl, clock, x->costs, &nc);
  if (topo && topo->slices > 1) {
    double dcn_t, dcn_b, coll_t;
    (void)dcn_totals(rows, rows ? nc : 0, &dcn_t, &dcn_b, &coll_t);
    tpu_json_key(w, "slices");
    tpu_json_int(w, topo->slices);
    tpu_json_key(w, "dcn_host_bandwidth");
    tpu_json_number(w, topo->dcn_host_bw);
    tpu_json_key(w, "dcn_latency");
    tpu_json_number(w, topo->dcn_latency_s);
    tpu_json_key(w, "dcn_seconds");
    tpu_json_number(w, dcn_t);
    tpu_json_key(w, "dcn_bytes_per_chip");
    tpu_json_number(w, dcn_b);
    tpu_json_key(w, "ici_seconds");
    tpu_json_number(w, coll_t - dcn_t);
  }
  tpu_pod_pipeline pls[8];
  int npl = tpu_pod_find_pipelines(x->p, tl, pls, 8);
  if (npl) {
    tpu_json_key(w, "pipelines");
    tpu_json_begin_array(w);
    for (int k = 0; k < npl; k++) {
      tpu_json_begin_object(w);
      tpu_json_key(w, "loop");
      tpu_json_string(w, pls[k].loop);
      tpu_json_key(w, "permute");
      tpu_json_string(w, pls[k].permute);
      if (pls[k].reverse) {
        tpu_json_key(w, "reverse_permute");
        tpu_json_string(w, pls[k].reverse);
      }
      tpu_json_key(w, "stages");
      tpu_json_int(w, pls[k].stages);
      tpu_json_key(w, "iterations");
      tpu_json_int(w, pls[k].trips);
      tpu_json_key(w, "padding_iterations");
      tpu_json_int(w, pls[k].padding);
      tpu_json_key(w, "bubble_fraction");
      tpu_json_number(w, (double)pls[k].padding / (double)pls[k].trips);
      tpu_json_key(w, "loop_seconds");
      tpu_json_number(w, pls[k].loop_cycles / clock);
      tpu_json_key(w, "bubble_seconds_per_stage");
      tpu_json_number(w, pls[k].bubble_cycles / clock);
      tpu_json_end_object(w);
    }
    tpu_json_end_array(w);
  }
  tpu_json_key(w, "collectives");
  tpu_json_begin_array(w);
  for (int i = 0; rows && i < nc; i++) {
    tpu_json_begin_object(w);
    tpu_json_key(w, "name");
    tpu_json_string(w, rows[i].name);
    tpu_json_key(w, "kind");
    tpu_json_string(w, rows[i].kind);
    tpu_json_key(w, "group_size");
    tpu_json_int(w, rows[i].group);
    tpu_json_key(w, "count");
    tpu_json_int(w, rows[i].count);
    tpu_json_key(w, "seconds_each");
    tpu_json_number(w, rows[i].seconds);
    tpu_json_key(w, "bytes_sent_per_chip");
    tpu_json_number(w, rows[i].bytes);
    tpu_json_key(w, "bus_bandwidth");
    tpu_json_number(w, rows[i].bus_bw);
    if (rows[i].info && topo && rows[i].info->r.busiest_link >= 0) {
      char l[80];
      tpu_topology_link_name(topo, rows[i].info->r.busiest_link, l, sizeof l);
      tpu_json_key(w, "busiest_link");
      tpu_json_string(w, l);
      tpu_json_key(w, "busiest_link_utilization");
      tpu_json_number(w, rows[i].info->r.busiest_util);
      tpu_json_key(w, "hops");
      tpu_json_int(w, rows[i].info->r.hops);
    }
    if (rows[i].info && rows[i].info->dcn_slices > 1) {
      tpu_json_key(w, "dcn_slices");
      tpu_json_int(w, rows[i].info->dcn_slices);
      tpu_json_key(w, "dcn_seconds_each");
      tpu_json_number(w, rows[i].info->dcn_seconds);
      tpu_json_key(w, "dcn_bytes_per_chip");
      tpu_json_number(w, rows[i].info->dcn_bytes);
      tpu_json_key(w, "dcn_rate");
      tpu_json_number(w, rows[i].info->dcn_rate);
      tpu_json_key(w, "dcn_chips_per_host");
      tpu_json_int(w, rows[i].info->dcn_per_host);
    }
    tpu_json_end_object(w);
  }
  tpu_free(rows);
  tpu_json_end_array(w);
  tpu_json_end_object(w);
}

/* Trace tracks for the pod: one per group shape of the collectives (all-reduce over groups
 * of 12, ...) and one per link among the busiest of each collective, each event lasting
 * the link's bytes at the link's bandwidth from the collective's start. */
void tpu_podio_trace(void *user, tpu_json_writer *w, double clock) {
  const tpu_podio_report *x = user;
  const tpu_timeline *tl = x->tl;
  const tpu_topology *topo = x->costs ? tpu_pod_cost_topology(x->costs) : NULL;
  int nc;
  coll_row *rows = collect(x->p, tl, clock, x->costs, &nc);
  if (!rows) return;
  enum { MAXT = 64 };
  char names[MAXT][96];
  int nt = 0;
  for (int64_t i = 0; i < tl->nevents; i++) {
    const tpu_event *e = &tl->events[i];
    if (e->unit != TPU_UNIT_ICI || e->op < 0 || e->op >= x->p->nops) continue;
    const coll_row *r = NULL;
    for (int k = 0; k < nc && !r; k++)
      if (rows[k].info && rows[k].info->in == x->p->ops[e->op].instr) r = &rows[k];
    const char *nm = x->p->ops[e->op].name;
    double start = (double)e->start * 1e6 / clock, dur = (double)(e->end - e->start) * 1e6 / clock;
    /* The group track: "groups of N". */
    char track[96];
    snprintf(track, sizeof track, "ICI groups of %lld", (long long)(r ? r->group : 0));
    int tid = -1;
    for (int k = 0; k < nt; k++)
      if (!strcmp(names[k], track)) tid = 1000 + k;
    if (tid < 0 && nt < MAXT) {
      snprintf(names[nt], sizeof names[nt], "%s", track);
      tpu_trace_track(w, tid = 1000 + nt, track);
      nt++;
    }
    if (tid >= 0) tpu_trace_event(w, tid, nm, "collective", start, dur);
    /* Its exchange between slices, where the hierarchical collective runs it: an
     * all-gather first, a reduce-scatter last, an all-reduce between its two ICI halves. */
    if (r && r->info->dcn_slices > 1) {
      double ds = r->info->dcn_seconds * 1e6, at = start;
      if (ds > dur) ds = dur;
      tpu_opcode b = tpu_collective_base(r->info->in->op);
      if (b == TPU_OP_REDUCE_SCATTER) at = start + dur - ds;
      else if (b == TPU_OP_ALL_REDUCE) at = start + (dur - ds) / 2;
      snprintf(track, sizeof track, "DCN between slices");
      tid = -1;
      for (int k = 0; k < nt; k++)
        if (!strcmp(names[k], track)) tid = 1000 + k;
      if (tid < 0 && nt < MAXT) {
        snprintf(names[nt], sizeof names[nt], "%s", track);
        tpu_trace_track(w, tid = 1000 + nt, track);
        nt++;
      }
      if (tid >= 0) tpu_trace_event(w, tid, nm, "dcn", at, ds);
    }
    /* Its three busiest links. */
    if (!r || !topo || !r->info->link_bytes || !(topo->link_bw > 0)) continue;
    int64_t nl = tpu_topology_nlinks(topo), top[3] = {-1, -1, -1};
    const double *lb = r->info->link_bytes;
    for (int64_t l = 0; l < nl; l++) {
      if (!(lb[l] > 0)) continue;
      for (int s = 0; s < 3; s++)
        if (top[s] < 0 || lb[l] > lb[top[s]]) {
          for (int q = 2; q > s; q--) top[q] = top[q - 1];
          top[s] = l;
          break;
        }
    }
    for (int s = 0; s < 3 && top[s] >= 0; s++) {
      char ln[80];
      tpu_topology_link_name(topo, top[s], ln, sizeof ln);
      snprintf(track, sizeof track, "link %s", ln);
      tid = -1;
      for (int k = 0; k < nt; k++)
        if (!strcmp(names[k], track)) tid = 1000 + k;
      if (tid < 0 && nt < MAXT) {
        snprintf(names[nt], sizeof names[nt], "%s", track);
        tpu_trace_track(w, tid = 1000 + nt, track);
        nt++;
      }
      double busy = lb[top[s]] / topo->link_bw * 1e6;
      if (tid >= 0) tpu_trace_event(w, tid, nm, "link", start, busy < dur ? busy : dur);
    }
  }
  tpu_free(rows);
  /* Pipeline loops: a track per stage (the first 16) with the iterations it spends on
   * padding, stage s idle in iterations [0, s) and [T - (P-1-s), T) of each run; in a 1F1B
   * loop its forward is padding outside [s, s + M) and its backward outside
   * [2P-2-s, 2P-2-s + M) (M = T - 2(P-1)): "bubble" where both are, else "bubble (forward)"
   * or "bubble (backward)" for the half that is. */
  tpu_pod_pipeline pls[4];
  int npl = tpu_pod_find_pipelines(x->p, tl, pls, 4);
  for (int k = 0; k < npl; k++) {
    const tpu_pod_pipeline *pl = &pls[k];
    int64_t max = pl->trips * pl->runs, *ends = tpu_malloc(sizeof *ends * (size_t)(max + 1));
    if (!ends) continue;
    int64_t ne = tpu_pod_pipeline_marks(tl, pl, ends, max);
    for (int64_t s = 0; s < pl->stages && s < 16 && ne >= 2; s++) {
      char track[96];
      snprintf(track, sizeof track, "stage %lld bubble (%s)", (long long)s, pl->loop);
      int tid = 2000 + 16 * k + (int)s;
      tpu_trace_track(w, tid, track);
      for (int64_t it = 0; it < ne; it++) {
        int64_t i = it % pl->trips, P = pl->stages, M = pl->trips - pl->padding;
        int fwd_idle = pl->reverse ? i < s || i >= s + M : i < s || i >= pl->trips - (P - 1 - s);
        int bwd_idle = pl->reverse ? i < 2 * P - 2 - s || i >= 2 * P - 2 - s + M : fwd_idle;
        if (!fwd_idle && !bwd_idle) continue;
        const char *what = fwd_idle && bwd_idle ? "bubble" : fwd_idle ? "bubble (forward)" : "bubble (backward)";
        double b = (double)(it ? ends[it - 1] : ends[0] - (ends[1] - ends[0])), e = (double)ends[it];
        tpu_trace_event(w, tid, what, "pipeline", b * 1e6 / clock, (e - b) * 1e6 / clock);
      }
    }
    tpu_free(ends);
  }
}
