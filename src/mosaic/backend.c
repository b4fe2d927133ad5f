/* A Pallas kernel on the TPU back end: its grid counted step by step (tpu_mosaic_count) and
 * lowered as Pallas's TPU pipeline runs it — each step's input blocks fetched while the step
 * before computes (two VMEM slots a window), the step's MXU, vector and transcendental work,
 * its output blocks written back when the grid moves to another block (docs/pallas.md). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/par.h"

#include "compile/backend/backend.h"
#include "ir/custom_call.h"
#include "mosaic/mosaic.h"

#define MAX_WIN 64
/* Steps of one kernel the program spells out at most (identical steps run as loops). */
#define MAX_GROUPS 256

typedef struct {
  tpu_mosaic_work w; /* the step's work; fetched: the NEXT step's input blocks, flushed: this
                      * step's output blocks written back after it */
  int64_t n;         /* consecutive identical steps */
} mgroup;

typedef struct mplan {
  const char *name;
  int nwin, nin;
  int has_map[MAX_WIN];
  int64_t blk[MAX_WIN];      /* padded bytes of a window's block */
  int64_t scratch;           /* padded bytes of the scratch operands */
  int64_t steps;
  uint64_t pro_fetch;        /* inputs fetched for step 0 */
  mgroup *g;
  int ng, capg;
  int64_t scale;             /* vector work multiplier: the chip's cores when one core runs the grid */
  int mxus;
  double flops, pad_flops, bytes;
  /* A call a values run made several times (in a loop) on other scalars: per recorded call
   * in order, its record and which distinct set of scalars it holds (the first call's: 0);
   * var[v]: the plan counted on set v (var[0] this one; the others counted by lower, when a
   * loop's iterations need them). */
  int nvar, ncalls, nsc;
  const tpu_mosaic_seen **calls;
  int *call_var;
  struct mplan **var;
} mplan;

/* Bytes of a VMEM block of these dims in the (8,128) tiled layout (16-bit: 16 rows a tile,
 * 8-bit: 32). */
static int64_t tiled_bytes(int rank, const int64_t *dims, tpu_dtype dt) {
  int64_t es = (int64_t)tpu_dtype_size(dt), rows = es == 2 ? 16 : es == 1 ? 32 : 8;
  if (rank == 0) return 4;
  int64_t lanes = (dims[rank - 1] + 127) / 128 * 128, sub = rank >= 2 ? (dims[rank - 2] + rows - 1) / rows * rows : rows;
  int64_t outer = 1;
  for (int i = 0; i < rank - 2; i++) outer *= dims[i];
  return outer * sub * lanes * (es < 1 ? 1 : es);
}

typedef struct {
  mplan *pl;
  tpu_mosaic_work prev;
  int have;
  tpu_status st;
  tpu_arena *arena;
} collect;

static int same_work(const tpu_mosaic_work *a, const tpu_mosaic_work *b) { return !memcmp(a, b, sizeof *a); }

static void push(collect *c, const tpu_mosaic_work *w) {
  mplan *p = c->pl;
  if (p->ng && same_work(&p->g[p->ng - 1].w, w)) {
    p->g[p->ng - 1].n++;
    return;
  }
  if (p->ng == p->capg) {
    int cap = p->capg ? 2 * p->capg : 64;
    mgroup *g = tpu_arena_alloc(c->arena, sizeof *g * (size_t)cap);
    if (!g) {
      c->st = TPU_ERR_NOMEM;
      return;
    }
    if (p->ng) memcpy(g, p->g, sizeof *g * (size_t)p->ng);
    p->g = g;
    p->capg = cap;
  }
  p->g[p->ng].w = *w;
  p->g[p->ng].n = 1;
  p->ng++;
}

/* Step s's work arrives with its own fetches and the flushes before it; a group keys on the
 * step's work with the next step's fetches and flushes (what the pipeline does around it). */
static void on_step(void *user, int64_t step, const tpu_mosaic_work *w) {
  collect *c = user;
  if (c->st != TPU_OK) return;
  mplan *p = c->pl;
  p->flops += w->mxu_flops / (w->mm_passes > 0 ? w->mm_passes : 1);
  p->pad_flops += w->mxu_pad_flops;
  if (step == 0) p->pro_fetch = w->fetched;
  if (c->have) {
    tpu_mosaic_work s = c->prev;
    s.fetched = w->fetched;
    s.flushed = w->flushed;
    push(c, &s);
  }
  c->prev = *w;
  c->have = step < p->steps;
}

/* The call's scalar operands from a values run's record (or the HLO's constants) into sc;
 * 0 when some are unknown (the count then reads zeros). */
static int known_scalars(const tpu_instr *in, const tpu_mosaic_seen *seen, int nsc, const tpu_tensor **sc) {
  for (int i = 0; i < nsc; i++) {
    const tpu_instr *op = in->operands[i];
    int64_t n = tpu_shape_numel(&op->shape);
    if (seen && seen->n == nsc && tpu_tensor_numel(&seen->args[i]) == n) sc[i] = &seen->args[i];
    else if (op->op == TPU_OP_CONSTANT && op->literal && tpu_tensor_numel(op->literal) == n) sc[i] = op->literal;
    else return 0;
  }
  return 1;
}

/* Counts kernel `mo` of call `in` on scalars sc (NULL: unknown) into plan p. */
/* ---- Counts kept across compiles ----
 * A call counted without scalars has the same plan in every compile: its work is a function
 * of the kernel (the call's attributes, its backend_config holding the kernel text), the
 * operand and result shapes, and the chip's cores and MXUs. The process keeps each such plan
 * by that key (under a lock, up to COUNT_KEEP_BYTES), so the planner's candidates, which
 * share a few kernels, count each once: a 540B search counted 1,330 calls of 72 distinct
 * keys (0.86 s of its 10 s of CPU). */
#define COUNT_KEEP_BYTES ((size_t)64 << 20)
#define COUNT_BUCKETS 256

typedef struct count_kept {
  struct count_kept *next;
  uint64_t hash;
  char *key, *name;
  size_t klen;
  int nsc;  /* the kernel's scalar operands (dynamic grid bounds and prefetched) */
  mplan p; /* p.g: its own copy; p.name unset (name) */
} count_kept;

static pthread_mutex_t g_count_lock = PTHREAD_MUTEX_INITIALIZER;
static count_kept *g_count[COUNT_BUCKETS];
static size_t g_count_bytes;
static int64_t g_count_hits;

int64_t tpu__mosaic_count_hits(void) { return tpu_locked_read(&g_count_lock, &g_count_hits); }

typedef struct {
  char *v;
  size_t n, cap;
  int ok;
} kbuf;

static void kput(kbuf *b, const void *s, size_t n) {
  if (!b->ok) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    char *v = tpu_realloc(b->v, cap);
    if (!v) {
      b->ok = 0;
      return;
    }
    b->v = v, b->cap = cap;
  }
  memcpy(b->v + b->n, s, n);
  b->n += n;
}

static void kput_shape(kbuf *b, const tpu_shape *sh) {
  char t[512];
  int n = tpu_shape_print(sh, t, sizeof t);
  if (n < 0 || n >= (int)sizeof t) b->ok = 0; /* too long to key: counted afresh */
  else kput(b, t, (size_t)n + 1);
}

/* The key of call `in` on this back end's chip; 0 when it cannot be made. */
static int count_key(const tpu__be *be, const tpu_instr *in, kbuf *b) {
  b->ok = 1;
  int64_t chip[2] = {be->chip->tensorcores, (int64_t)be->chip->mxus_per_core};
  kput(b, chip, sizeof chip);
  for (int i = 0; i < in->nattrs; i++) {
    const char *v = in->attrs[i].value ? in->attrs[i].value : "";
    kput(b, in->attrs[i].name, strlen(in->attrs[i].name) + 1);
    kput(b, v, strlen(v) + 1);
  }
  for (int k = 0; k < in->noperands; k++) kput_shape(b, &in->operands[k]->shape);
  kput(b, "->", 2);
  kput_shape(b, &in->shape);
  return b->ok;
}

static uint64_t key_hash(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

/* The kept plan of key b into p (its groups copied to the program's arena); 0 on a miss
 * (and, with `plain`, when the kernel has scalar operands). */
static int count_take(tpu__be *be, const kbuf *b, uint64_t h, int plain, mplan *p) {
  int hit = 0;
  pthread_mutex_lock(&g_count_lock);
  for (const count_kept *e = g_count[h % COUNT_BUCKETS]; e && !hit; e = e->next) {
    if (e->hash != h || e->klen != b->n || memcmp(e->key, b->v, b->n)) continue;
    if (plain && e->nsc) break;
    mgroup *g = e->p.ng ? tpu_arena_alloc(&be->p->arena, sizeof *g * (size_t)e->p.ng) : NULL;
    const char *name = tpu_program_str(be->p, e->name);
    if ((e->p.ng && !g) || !name) break; /* out of memory: counted afresh */
    *p = e->p;
    if (g) memcpy(g, e->p.g, sizeof *g * (size_t)e->p.ng);
    p->g = g;
    p->capg = p->ng;
    p->name = name;
    g_count_hits++;
    hit = 1;
  }
  pthread_mutex_unlock(&g_count_lock);
  return hit;
}

/* Keeps plan p (counted without scalars) by key b; best effort. */
static void count_keep(const kbuf *b, uint64_t h, int nsc, const mplan *p) {
  size_t gbytes = sizeof *p->g * (size_t)p->ng, nlen = strlen(p->name) + 1;
  size_t bytes = sizeof(count_kept) + b->n + nlen + gbytes;
  count_kept *e = tpu_calloc(1, sizeof *e);
  char *key = tpu_malloc(b->n + 1), *name = tpu_malloc(nlen);
  mgroup *g = gbytes ? tpu_malloc(gbytes) : NULL;
  pthread_mutex_lock(&g_count_lock);
  int keep = e && key && name && (!gbytes || g) && g_count_bytes + bytes <= COUNT_KEEP_BYTES;
  for (const count_kept *x = g_count[h % COUNT_BUCKETS]; keep && x; x = x->next)
    keep = !(x->hash == h && x->klen == b->n && !memcmp(x->key, b->v, b->n)); /* kept by another thread */
  if (keep) {
    memcpy(key, b->v, b->n);
    memcpy(name, p->name, nlen);
    if (g) memcpy(g, p->g, gbytes);
    e->hash = h, e->key = key, e->klen = b->n, e->name = name, e->nsc = nsc;
    e->p = *p;
    e->p.name = NULL;
    e->p.g = g;
    e->p.capg = p->ng;
    e->next = g_count[h % COUNT_BUCKETS];
    g_count[h % COUNT_BUCKETS] = e;
    g_count_bytes += bytes;
  }
  pthread_mutex_unlock(&g_count_lock);
  if (!keep) {
    tpu_free(e);
    tpu_free(key);
    tpu_free(name);
    tpu_free(g);
  }
}

static tpu_status count_fresh(tpu__be *be, const tpu_mosaic *mo, const tpu_instr *in, const tpu_tensor **sc, mplan *p);

/* Counts call `in` into plan p (fresh, zeroed): a kept plan when there are no scalars. */
static tpu_status count_plan(tpu__be *be, const tpu_mosaic *mo, const tpu_instr *in, const tpu_tensor **sc, mplan *p) {
  if (sc) return count_fresh(be, mo, in, sc, p);
  kbuf b = {NULL, 0, 0, 1};
  int keyed = count_key(be, in, &b);
  uint64_t h = keyed ? key_hash(b.v, b.n) : 0;
  tpu_status st = TPU_OK;
  if (!keyed || !count_take(be, &b, h, 0, p)) {
    st = count_fresh(be, mo, in, sc, p);
    if (st == TPU_OK && keyed && p->name) count_keep(&b, h, mo->ndyn + mo->nprefetch, p);
  }
  tpu_free(b.v);
  return st;
}

static tpu_status count_fresh(tpu__be *be, const tpu_mosaic *mo, const tpu_instr *in, const tpu_tensor **sc, mplan *p) {
  p->name = tpu_program_str(be->p, mo->name);
  p->nwin = mo->nwindows;
  p->nin = in->noperands - mo->ndyn - mo->nprefetch;
  int64_t grid[TPU_MO_MAX_RANK];
  p->steps = tpu_mosaic_grid(mo, in, sc, grid);
  if (p->nwin > MAX_WIN || p->steps > ((int64_t)1 << 22))
    return TPU_FAIL(be->d, TPU_ERR_UNSUPPORTED, in->loc, "Pallas kernel '%s': %s", mo->name,
                    p->nwin > MAX_WIN ? "more than 64 operands" : "a grid of more than 2^22 steps is not timed");
  const tpu_mo_block *body = &mo->main->reg[0];
  for (int w = 0; w < p->nwin; w++) {
    const tpu_mo_type *t = &body->argt[mo->ngrid + mo->nprefetch + w];
    p->has_map[w] = mo->win[w].has_map;
    p->blk[w] = tiled_bytes(t->rank, t->dims, t->dt);
  }
  for (int i = 0; i < mo->nscratch; i++) {
    const tpu_mo_type *t = &body->argt[mo->ngrid + mo->nprefetch + mo->nwindows + i];
    if (t->kind == TPU_MO_MEMREF && t->space == TPU_MO_VMEM) p->scratch += tiled_bytes(t->rank, t->dims, t->dt);
  }
  /* "parallel" grid dimensions split over a megacore chip's TensorCores (the timing model
   * divides vector work by the cores and gives matmuls every core's MXUs); a grid without
   * one runs on one core. */
  int par = 0;
  for (int i = 0; i < mo->ngrid; i++) par |= mo->parallel[i] && grid[i] > 1;
  int64_t cores = be->chip->tensorcores > 0 ? be->chip->tensorcores : 1;
  p->scale = par ? 1 : cores;
  p->mxus = (int)(be->chip->mxus_per_core * (par ? cores : 1));
  collect c;
  memset(&c, 0, sizeof c);
  c.pl = p;
  c.st = TPU_OK;
  c.arena = &be->p->arena;
  tpu_mosaic_opts o;
  memset(&o, 0, sizeof o);
  o.on_step = on_step;
  o.user = &c;
  tpu_status st = sc ? tpu_mosaic_count_scalars(mo, in, sc, &o, be->d) : tpu_mosaic_count(mo, in, &o, be->d);
  if (st == TPU_OK && c.st != TPU_OK) st = TPU_FAIL(be->d, c.st, in->loc, "out of memory");
  if (st != TPU_OK) return st;
  /* bytes the pipeline moves: each fetch and write-back of a block */
  double moved = 0;
  for (int w = 0; w < p->nwin; w++)
    if (p->has_map[w] && (p->pro_fetch >> w & 1)) moved += (double)p->blk[w];
  for (int g = 0; g < p->ng; g++)
    for (int w = 0; w < p->nwin; w++)
      if (p->has_map[w] && ((p->g[g].w.fetched | p->g[g].w.flushed) >> w & 1)) moved += (double)p->blk[w] * (double)p->g[g].n;
  for (int g = 0; g < p->ng; g++) moved += p->g[g].w.dma_bytes * (double)p->g[g].n;
  p->bytes = moved;
  return TPU_OK;
}

static mplan *new_plan(tpu__be *be) {
  mplan *p = tpu_arena_alloc(&be->p->arena, sizeof *p);
  if (p) memset(p, 0, sizeof *p);
  return p;
}

/* The op of a counted call p (its kind "pallas:NAME"). */
static tpu_status tile_op(tpu__be *be, const tpu_instr *in, tpu__kinfo *k, mplan *p, const char *name) {
  double flops = p->flops, pad_flops = p->pad_flops, bytes = p->bytes;
  k->kind = TPU__K_MOSAIC;
  k->own = 1;
  k->mosaic = p;
  k->tiles = p->steps;
  tpu_prog_op po;
  memset(&po, 0, sizeof po);
  po.name = in->name;
  char kind[160];
  snprintf(kind, sizeof kind, "pallas:%s", name);
  po.kind = tpu_program_str(be->p, kind);
  po.instr = in;
  po.flops = flops;
  po.padded_flops = pad_flops;
  po.bytes = bytes;
  po.padded_bytes = bytes;
  po.tiles = p->steps;
  k->what = po.kind;
  k->op = tpu_program_add_op(be->p, &po);
  if (k->op < 0 || !po.kind) return TPU_FAIL(be->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  return TPU_OK;
}

tpu_status tpu__mosaic_tile(tpu__be *be, const tpu_instr *in, tpu__kinfo *k) {
  tpu_mosaic *mo = NULL;
  if (!tpu_mosaic_is_decoded(in)) return tpu_custom_call_refuse(in, "the TPU back end", be->d);
  mplan *p = new_plan(be);
  if (!p) return TPU_FAIL(be->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  { /* a kept count of a kernel with no scalar operands: not even parsed again */
    kbuf b = {NULL, 0, 0, 1};
    int hit = count_key(be, in, &b) && count_take(be, &b, key_hash(b.v, b.n), 1, p);
    tpu_free(b.v);
    if (hit) {
      p->nvar = 1;
      return tile_op(be, in, k, p, p->name);
    }
  }
  TPU_TRY(tpu_mosaic_of_instr(in, &mo, be->d));
  tpu_status st = TPU_OK;
  /* The scalar operands when they are known: what a values run gave this call, or constants
   * (else the count reads zeros and guesses a dynamic grid's bound). A call the run made
   * several times (in a loop) is counted on each distinct set of scalars (lower picks each
   * iteration's). */
  int nsc = mo->ndyn + mo->nprefetch;
  const tpu_tensor **sc = nsc > 0 && nsc <= in->noperands ? tpu_arena_alloc(&be->p->arena, sizeof *sc * (size_t)nsc) : NULL;
  static const int cap = TPU_MOSAIC_SEEN_MAX;
  const tpu_mosaic_seen **calls = NULL;
  int ncalls = 0;
  if (sc && be->o->mosaic_seen) {
    calls = tpu_arena_alloc(&be->p->arena, sizeof *calls * (size_t)cap);
    ncalls = calls ? tpu_mosaic_seen_calls(be->o->mosaic_seen, in, calls, cap) : 0;
    if (ncalls > cap) ncalls = cap;
  }
  if (sc && !known_scalars(in, ncalls ? calls[0] : NULL, nsc, sc)) sc = NULL;
  st = count_plan(be, mo, in, sc, p);
  if (st != TPU_OK) goto done;
  p->nvar = 1;
  if (sc && ncalls > 1) { /* the distinct sets of scalars among the calls */
    p->call_var = tpu_arena_alloc(&be->p->arena, sizeof *p->call_var * (size_t)ncalls);
    if (!p->call_var) {
      st = TPU_FAIL(be->d, TPU_ERR_NOMEM, in->loc, "out of memory");
      goto done;
    }
    p->call_var[0] = 0;
    for (int c = 1; c < ncalls; c++) {
      int v = -1;
      for (int e = 0; e < c && v < 0; e++)
        if (tpu_mosaic_seen_args_same(calls[e], calls[c])) v = p->call_var[e];
      p->call_var[c] = v >= 0 ? v : p->nvar++;
    }
    if (p->nvar > 1) {
      p->var = tpu_arena_alloc(&be->p->arena, sizeof *p->var * (size_t)p->nvar);
      if (!p->var) {
        st = TPU_FAIL(be->d, TPU_ERR_NOMEM, in->loc, "out of memory");
        goto done;
      }
      memset(p->var, 0, sizeof *p->var * (size_t)p->nvar);
      p->var[0] = p;
      p->calls = calls;
      p->ncalls = ncalls;
      p->nsc = nsc;
    }
  }
  st = tile_op(be, in, k, p, mo->name);
done:
  tpu_mosaic_free(mo);
  return st;
}

tpu_status tpu__mosaic_plan(tpu__be *be, const tpu_instr *in, tpu__kinfo *k) {
  (void)in;
  const mplan *p = k->mosaic;
  if (!p) return TPU_OK;
  int64_t off = 0;
  k->nvmem = 0;
  for (int w = 0; w <= p->nwin; w++) {
    /* a window's two slots (a block fetched while the other computes); then the scratch */
    int64_t slot = w < p->nwin ? (p->has_map[w] ? p->blk[w] : 0) : p->scratch;
    int slots = w < p->nwin ? 2 : 1;
    if (!be->dry) {
      int v = tpu_program_add_vmem(be->p, k->op, off, slot > 0 ? slot : 1, slots);
      if (v < 0) return TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
      if (!k->nvmem) k->vmem0 = v;
      k->nvmem++;
    }
    off += (slot * slots + 511) / 512 * 512;
  }
  k->ws = off;
  if (!be->dry && off > be->p->vmem_peak) be->p->vmem_peak = off;
  return TPU_OK;
}

static int put(tpu__be *be, const tpu_insn *x) {
  if (tpu_program_add_insn(be->p, x) >= 0) return 1;
  TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  return 0;
}

typedef struct {
  tpu__be *be;
  const tpu_instr *in;
  const tpu__kinfo *k;
  const mplan *p;
  int hbm[MAX_WIN];  /* HBM buffer of each window's operand / result, -1: none */
  int pmod, prem;    /* the plan's predicate on the loops' iteration (0: always; tpu_insn.pflat) */
  int pflat;
  int depth;         /* loops of the kernel's own open around the next instruction */
} lctx;

/* An instruction of the kernel: at its top level it carries the plan's predicate (a loop
 * skipped whole with its header). */
static int lput(lctx *l, tpu_insn *x) {
  if (l->depth == 0) {
    x->pmod = l->pmod;
    x->prem = l->prem;
    x->pflat = l->pflat;
  }
  return put(l->be, x);
}

static tpu_vref slot(lctx *l, int w, int div, int par) { return tpu_vref_make(l->k->vmem0 + w, div, par); }

static int fetch(lctx *l, int w, tpu_vref dst) {
  tpu_insn d = tpu_insn_make(TPU_ISA_DMA_IN, l->k->op);
  d.hbm = l->hbm[w];
  d.onchip = l->hbm[w] < 0;
  d.bytes = l->p->blk[w];
  d.dst = dst;
  return lput(l, &d);
}

/* The step's DMAs and signals to other devices of the pod, and the step waiting for them:
 * each target device's DMAs one after another on the route toward it (its hops' latency
 * plus the bytes at one link's bandwidth each), the targets' routes at once; signals (a
 * barrier) one hop's latency before them. The hops are the pod link model's route from
 * device 0 (whose kernel the count runs) on the slice's topology (tpu_compile_opts hops);
 * without it, or across slices, a target is taken as a neighbour (one hop). */
static int emit_ici(lctx *l, const tpu_mosaic_work *w) {
  const tpu_chip *chip = l->be->chip;
  double bw = chip->ici_bw_per_link > 0 ? chip->ici_bw_per_link : 0, hop = chip->ici_latency_s > 0 ? chip->ici_latency_s : 0;
  if (bw <= 0)
    return TPU_FAIL(l->be->d, TPU_ERR_UNSUPPORTED, l->in->loc, "Pallas kernel '%s' sends to other chips, but %s has no ICI links",
                    l->p->name, chip->name) == TPU_OK;
  double s = 0, bytes = 0;
  for (int t = 0; t < w->nici; t++) {
    int64_t nh = -1;
    if (l->be->o->hops && l->be->o->hops(l->be->o->coll_user, l->in, 0, w->ici_dev[t], &nh, l->be->d) != TPU_OK)
      return 0;
    if (nh < 1) nh = 1;
    double chain = (double)w->ici_dmas[t] * (double)nh * hop + w->ici_bytes[t] / bw;
    if (chain > s) s = chain;
    bytes += w->ici_bytes[t];
  }
  if (w->ici_signals > 0) s += hop;
  tpu_insn x = tpu_insn_make(TPU_ISA_ICI, l->k->op);
  x.cycles = (int64_t)ceil(s * chip->clock_hz);
  x.bytes = (int64_t)ceil(bytes);
  if (!lput(l, &x)) return 0;
  tpu_insn wt = tpu_insn_make(TPU_ISA_WAIT, -1);
  wt.at = l->be->p->ninsns - 1;
  return lput(l, &wt);
}

/* One grid step: the next step's fetches, this step's work on its slots, its write-backs.
 * div/par: the slot of this step is (i/div + par) mod 2 (div 0: fixed). */
static int emit_step(lctx *l, const tpu_mosaic_work *w, int div, int par) {
  const mplan *p = l->p;
  for (int j = 0; j < p->nin && j < p->nwin; j++)
    if (p->has_map[j] && (w->fetched >> j & 1) && !fetch(l, j, slot(l, j, div, par + 1))) return 0;
  if (w->dma_bytes > 0) { /* manual copies (memory_space=ANY) into scratch */
    tpu_insn d = tpu_insn_make(TPU_ISA_DMA_IN, l->k->op);
    int src = -1;
    for (int j = 0; j < p->nin && j < p->nwin && src < 0; j++)
      if (!p->has_map[j]) src = j;
    d.hbm = src >= 0 ? l->hbm[src] : -1;
    d.onchip = d.hbm < 0;
    d.bytes = (int64_t)ceil(w->dma_bytes);
    d.dst = tpu_vref_make(l->k->vmem0 + p->nwin, 0, 0);
    if (!lput(l, &d)) return 0;
  }
  if ((w->nici > 0 || w->ici_signals > 0) && !emit_ici(l, w)) return 0;
  tpu_vref src[TPU_INSN_MAX_SRC], none = tpu_vref_make(-1, 0, 0), out = none;
  int ns = 0;
  for (int j = 0; j < p->nin && j < p->nwin && ns < TPU_INSN_MAX_SRC; j++)
    if (p->has_map[j]) src[ns++] = slot(l, j, div, par);
  for (int j = p->nin; j < p->nwin && out.buf < 0; j++)
    if (p->has_map[j]) out = slot(l, j, div, par);
  if (w->mxu_flops > 0 && w->mm_m > 0) {
    tpu_insn mm = tpu_insn_make(TPU_ISA_MATMUL, l->k->op);
    for (int s = 0; s < ns && s < 2; s++) mm.src[s] = src[s];
    mm.dst = out;
    mm.m = w->mm_m;
    mm.k = w->mm_k;
    mm.n = w->mm_n;
    mm.passes = w->mm_passes > 0 ? w->mm_passes : 1;
    double one = 2.0 * (double)w->mm_m * (double)w->mm_k * (double)w->mm_n * mm.passes;
    mm.b = (int64_t)llround(w->mxu_flops / one); /* the step's products as copies of its largest */
    if (mm.b < 1) mm.b = 1;
    mm.mxus = p->mxus;
    mm.dtype = w->mm_dt;
    mm.what = l->k->what;
    if (!lput(l, &mm)) return 0;
  }
  const struct { tpu_isa_op opc; int64_t v; } vec[3] = {
      {TPU_ISA_XLU, w->xlu_vregs}, {TPU_ISA_EUP, w->eup_vregs}, {TPU_ISA_VPU, w->vpu_vregs}};
  for (int u = 0; u < 3; u++) {
    if (vec[u].v <= 0) continue;
    tpu_insn x = tpu_insn_make(vec[u].opc, l->k->op);
    for (int s = 0; s < ns; s++) x.src[s] = src[s];
    x.dst = vec[u].opc == TPU_ISA_VPU ? out : none;
    x.vregs = vec[u].v * p->scale;
    x.ops = 1;
    x.what = l->k->what;
    if (!lput(l, &x)) return 0;
  }
  for (int j = p->nin; j < p->nwin; j++) {
    if (!p->has_map[j] || !(w->flushed >> j & 1)) continue;
    tpu_insn d = tpu_insn_make(TPU_ISA_DMA_OUT, l->k->op);
    d.src[0] = slot(l, j, div, par);
    d.hbm = l->hbm[j];
    d.onchip = l->hbm[j] < 0;
    d.bytes = p->blk[j];
    if (!lput(l, &d)) return 0;
  }
  return 1;
}

/* Groups [a, b): each a step, or a loop of identical steps; *par: the slot parity of the
 * next step (advanced). */
static int emit_groups(lctx *l, int a, int b, int *par) {
  for (int g = a; g < b; g++) {
    const mgroup *x = &l->p->g[g];
    if (x->n == 1) {
      if (!emit_step(l, &x->w, 0, *par)) return 0;
    } else {
      tpu_insn lp = tpu_insn_make(TPU_ISA_LOOP, l->k->op);
      lp.trips = x->n;
      if (!lput(l, &lp)) return 0;
      l->depth++;
      int ok = emit_step(l, &x->w, 1, *par);
      l->depth--;
      tpu_insn en = tpu_insn_make(TPU_ISA_END, l->k->op);
      if (!ok || !lput(l, &en)) return 0;
    }
    *par = (int)((*par + x->n) % 2);
  }
  return 1;
}

static int same_group(const mgroup *a, const mgroup *b) { return a->n == b->n && same_work(&a->w, &b->w); }

/* One plan of the kernel: the prologue, then its groups (a repeating pattern as one loop). */
static tpu_status emit_plan(lctx *l) {
  tpu__be *be = l->be;
  const tpu_instr *in = l->in;
  const tpu__kinfo *k = l->k;
  const mplan *p = l->p;
  tpu_insn x = tpu_insn_make(TPU_ISA_KERNEL, k->op);
  if (!lput(l, &x)) return TPU_ERR_NOMEM;
  /* the prologue: step 0's blocks */
  for (int j = 0; j < p->nin && j < p->nwin; j++)
    if (p->has_map[j] && (p->pro_fetch >> j & 1) && !fetch(l, j, slot(l, j, 0, 0))) return TPU_ERR_NOMEM;
  /* A repeating pattern of groups (the inner grid dimensions) as one loop: the smallest
   * period q from group `off` on, with an even number of steps a period (so each position
   * keeps its slot). */
  int best_off = 0, best_q = 0;
  int64_t best_reps = 0, best_size = p->ng;
  for (int off = 0; off <= 1 && off < p->ng; off++)
    for (int q = 1; 2 * q <= p->ng - off; q++) {
      int64_t reps = 1;
      while (off + (reps + 1) * q <= p->ng) {
        int ok = 1;
        for (int i = 0; i < q && ok; i++) ok = same_group(&p->g[off + reps * q + i], &p->g[off + i]);
        if (!ok) break;
        reps++;
      }
      int64_t st = 0;
      for (int i = 0; i < q; i++) st += p->g[off + i].n;
      if (st % 2) reps -= reps % 2; /* an odd period: loop over two of them (below) */
      if (reps < 2) continue;
      int64_t size = off + (st % 2 ? 2 * q : q) + (p->ng - off - reps * q);
      if (size < best_size) {
        best_size = size;
        best_off = off;
        best_q = q;
        best_reps = reps;
      }
    }
  if (best_size > MAX_GROUPS)
    return TPU_FAIL(be->d, TPU_ERR_UNSUPPORTED, in->loc,
                    "Pallas kernel '%s': its %lld grid steps do not repeat in a pattern of at most %d kinds",
                    p->name, (long long)p->steps, MAX_GROUPS);
  int par = 0;
  if (!best_q) {
    if (!emit_groups(l, 0, p->ng, &par)) return TPU_ERR_NOMEM;
    return TPU_OK;
  }
  int64_t st = 0;
  for (int i = 0; i < best_q; i++) st += p->g[best_off + i].n;
  int q = st % 2 ? 2 * best_q : best_q;
  int64_t trips = st % 2 ? best_reps / 2 : best_reps;
  if (!emit_groups(l, 0, best_off, &par)) return TPU_ERR_NOMEM;
  tpu_insn lp = tpu_insn_make(TPU_ISA_LOOP, k->op);
  lp.trips = trips;
  if (!lput(l, &lp)) return TPU_ERR_NOMEM;
  l->depth++;
  int p0 = par;
  int ok = emit_groups(l, best_off, best_off + q, &par);
  l->depth--;
  if (!ok) return TPU_ERR_NOMEM;
  par = p0; /* an even number of steps a period */
  tpu_insn en = tpu_insn_make(TPU_ISA_END, k->op);
  if (!lput(l, &en)) return TPU_ERR_NOMEM;
  if (!emit_groups(l, best_off + (int)(best_reps * best_q), p->ng, &par)) return TPU_ERR_NOMEM;
  return TPU_OK;
}

/* The iterations of the while loops around call `in`, counted together (each enclosing
 * loop's trips multiplied, through calls and conditionals): the order a values run made the
 * call in, outer iteration by outer iteration, when it ran once an iteration; or -1 (no loop
 * around it, a trip count unknown, or the call in a loop's condition). *cond: a conditional
 * is on the way (its branch may not have run every iteration). */
static int64_t loop_trips(const tpu__be *be, const tpu_instr *in, int *cond) {
  const tpu_comp *c = in->parent;
  int64_t F = 1;
  int loops = 0;
  *cond = 0;
  for (int depth = 0; c && depth < 64; depth++) {
    int ci = tpu__be_comp_index(be, c);
    const tpu_instr *caller = ci >= 0 ? be->caller[ci] : NULL;
    if (!caller) break;
    if (caller->op == TPU_OP_WHILE) {
      const tpu__kinfo *kw = tpu__be_info(be, caller);
      if (caller->body != c || !kw || kw->trips < 1 || F > INT64_MAX / kw->trips) return -1;
      F *= kw->trips;
      loops++;
    } else if (caller->op == TPU_OP_CONDITIONAL) {
      *cond = 1;
    } else if (caller->op != TPU_OP_CALL) {
      return -1;
    }
    c = caller->parent;
  }
  return loops ? F : -1;
}

tpu_status tpu__mosaic_lower(tpu__be *be, const tpu_instr *in, const tpu__kinfo *k) {
  const mplan *p = k->mosaic;
  if (!p) return TPU_OK;
  lctx l;
  memset(&l, 0, sizeof l);
  l.be = be;
  l.in = in;
  l.k = k;
  l.p = p;
  for (int w = 0; w < p->nwin; w++) {
    if (w < p->nin) {
      const tpu_instr *op = in->operands[in->noperands - p->nin + w];
      l.hbm[w] = tpu__be_buffer_of(be, op, 0);
    } else {
      l.hbm[w] = k->hbm0 >= 0 ? k->hbm0 + (w - p->nin) : tpu__be_buffer_of(be, in, w - p->nin);
    }
  }
  /* A call in a loop's body that the values run made on other scalars in other iterations:
   * iteration i (counted over every loop around the call: a nested loop's iterations run
   * outer pass by outer pass) runs the plan of the run's call in iteration i, as a plan per
   * position of the calls' shortest period r (i mod r), each predicated on it. A call in a
   * conditional's branch is found by the iteration the run recorded with it (the timing runs
   * the costliest branch every iteration, docs/timing.md: an iteration whose branch did not
   * run takes the first call's plan). Without that to go by (a loop of unknown count, more
   * iterations than were recorded, calls past the record's cap), every iteration runs the
   * first call's plan. */
  int cond = 0;
  int64_t T = p->nvar > 1 ? loop_trips(be, in, &cond) : -1;
  if (T < 2) return emit_plan(&l);
  int *at = NULL; /* the call each iteration runs the plan of */
  if (!cond || T == p->ncalls) {
    if (T > p->ncalls) return emit_plan(&l);
    at = tpu_arena_alloc(&be->p->arena, sizeof *at * (size_t)T);
    if (!at) return TPU_FAIL(be->d, TPU_ERR_NOMEM, in->loc, "out of memory");
    for (int64_t i = 0; i < T; i++) at[i] = (int)i;
  } else {
    if (T > 16 * TPU_MOSAIC_SEEN_MAX || p->ncalls >= TPU_MOSAIC_SEEN_MAX) return emit_plan(&l);
    at = tpu_arena_alloc(&be->p->arena, sizeof *at * (size_t)T);
    if (!at) return TPU_FAIL(be->d, TPU_ERR_NOMEM, in->loc, "out of memory");
    for (int64_t i = 0; i < T; i++) at[i] = 0;
    for (int c = 0; c < p->ncalls; c++) { /* each call in its own iteration, in order */
      int64_t f = p->calls[c]->flat;
      if (f < 0 || f >= T || (c > 0 && f <= p->calls[c - 1]->flat)) return emit_plan(&l);
      at[f] = c;
    }
  }
  int64_t r = 1;
  for (; r < T; r++) {
    int ok = 1;
    for (int64_t i = r; i < T && ok; i++) ok = p->call_var[at[i]] == p->call_var[at[i % r]];
    if (ok) break;
  }
  /* the plans the period needs, counted on their calls' scalars */
  tpu_mosaic *mo = NULL;
  const tpu_tensor **sc = tpu_arena_alloc(&be->p->arena, sizeof *sc * (size_t)(p->nsc > 0 ? p->nsc : 1));
  tpu_status st = sc ? TPU_OK : TPU_FAIL(be->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  for (int64_t i = 0; i < r && st == TPU_OK; i++) {
    int v = p->call_var[at[i]];
    if (p->var[v]) continue;
    mplan *q = new_plan(be);
    if (!q) st = TPU_FAIL(be->d, TPU_ERR_NOMEM, in->loc, "out of memory");
    if (st == TPU_OK && !mo) st = tpu_mosaic_of_instr(in, &mo, be->d);
    if (st == TPU_OK)
      st = count_plan(be, mo, in, known_scalars(in, p->calls[at[i]], p->nsc, sc) ? sc : NULL, q);
    if (st == TPU_OK) p->var[v] = q;
  }
  tpu_mosaic_free(mo);
  TPU_TRY(st);
  /* the op's figures: the mean iteration's */
  double flops = 0, pad_flops = 0, bytes = 0;
  for (int64_t i = 0; i < r; i++) {
    const mplan *q = p->var[p->call_var[at[i]]];
    flops += q->flops / (double)r;
    pad_flops += q->pad_flops / (double)r;
    bytes += q->bytes / (double)r;
  }
  if (!be->dry && k->op >= 0) {
    tpu_prog_op *po = &be->p->ops[k->op];
    po->flops = flops;
    po->padded_flops = pad_flops;
    po->bytes = po->padded_bytes = bytes;
  }
  if (r == 1) {
    l.p = p->var[p->call_var[at[0]]];
    return emit_plan(&l);
  }
  for (int64_t i = 0; i < r; i++) {
    l.p = p->var[p->call_var[at[i]]];
    l.pmod = (int)r;
    l.prem = (int)i;
    l.pflat = 1;
    TPU_TRY(emit_plan(&l));
  }
  return TPU_OK;
}
