/* What a values run gave each Pallas call's scalar operands (dynamic grid bounds, scalar
 * prefetch), kept by the call's place in the HLO (every call there, in order: a call in a
 * loop runs on other scalars each iteration) so that the timing of a module parsed again
 * from the same text counts the kernel on the same scalars. */
#include <string.h>

#include "base/alloc.h"
#include "mosaic/mosaic.h"
#include "mosaic/mosaic_int.h"

static int same_call(const tpu_mosaic_seen *s, const tpu_instr *in) {
  if (in->loc.line > 0 || s->loc.line > 0) return tpu_loc_same(s->loc, in->loc);
  return s->name && in->name && !strcmp(s->name, in->name);
}

const tpu_mosaic_seen *tpu_mosaic_seen_find(const tpu_mosaic_seen_set *s, const tpu_instr *in) {
  for (int i = 0; s && i < s->n; i++)
    if (same_call(&s->v[i], in)) return &s->v[i];
  return NULL;
}

int tpu_mosaic_seen_calls(const tpu_mosaic_seen_set *s, const tpu_instr *in, const tpu_mosaic_seen **out, int max) {
  int n = 0;
  for (int i = 0; s && i < s->n; i++)
    if (same_call(&s->v[i], in)) {
      if (out && n < max) out[n] = &s->v[i];
      n++;
    }
  return n;
}

tpu_status tpu_mosaic_seen_add(tpu_mosaic_seen_set *s, const tpu_instr *in, const tpu_tensor *const *args, int n,
                               int64_t flat, tpu_diag *d) {
  /* every call at each place, in the order they ran, up to TPU_MOSAIC_SEEN_MAX */
  if (tpu_mosaic_seen_calls(s, in, NULL, 0) >= TPU_MOSAIC_SEEN_MAX) return TPU_OK;
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 4;
    tpu_mosaic_seen *v = tpu_realloc(s->v, sizeof *v * (size_t)cap);
    if (!v) return TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory recording a Pallas call's scalars");
    s->v = v;
    s->cap = cap;
  }
  tpu_mosaic_seen *e = &s->v[s->n];
  memset(e, 0, sizeof *e);
  e->loc = in->loc;
  e->flat = flat;
  e->name = tpu_strdup(in->name ? in->name : "");
  e->args = tpu_calloc((size_t)(n > 0 ? n : 1), sizeof *e->args);
  tpu_status st = e->name && e->args ? TPU_OK : TPU_FAIL(d, TPU_ERR_NOMEM, in->loc, "out of memory");
  for (int i = 0; st == TPU_OK && i < n; i++) {
    st = tpu_tensor_clone(&e->args[i], args[i], d);
    if (st == TPU_OK) e->n = i + 1;
  }
  s->n++; /* kept even when incomplete, so that it is freed */
  return st;
}

static int same_tensor(const tpu_tensor *a, const tpu_tensor *b) {
  if (a->dtype != b->dtype || a->rank != b->rank || a->nbytes != b->nbytes) return 0;
  if (memcmp(a->dims, b->dims, sizeof a->dims[0] * (size_t)a->rank)) return 0;
  return !a->nbytes || !memcmp(a->data, b->data, a->nbytes);
}

int tpu_mosaic_seen_args_same(const tpu_mosaic_seen *a, const tpu_mosaic_seen *b) {
  if (a->n != b->n) return 0;
  for (int j = 0; j < a->n; j++)
    if (!same_tensor(&a->args[j], &b->args[j])) return 0;
  return 1;
}

int tpu_mosaic_seen_same(const tpu_mosaic_seen_set *a, const tpu_mosaic_seen_set *b) {
  int na = a ? a->n : 0, nb = b ? b->n : 0;
  if (na != nb) return 0;
  for (int i = 0; i < na; i++) {
    const tpu_mosaic_seen *x = &a->v[i], *y = &b->v[i];
    if (x->n != y->n || x->flat != y->flat || !tpu_loc_same(x->loc, y->loc) || strcmp(x->name ? x->name : "", y->name ? y->name : "")) return 0;
    for (int j = 0; j < x->n; j++)
      if (!same_tensor(&x->args[j], &y->args[j])) return 0;
  }
  return 1;
}

tpu_status tpu_mosaic_seen_copy(tpu_mosaic_seen_set *dst, const tpu_mosaic_seen_set *src, tpu_diag *d) {
  memset(dst, 0, sizeof *dst);
  if (!src || !src->n) return TPU_OK;
  dst->v = tpu_calloc((size_t)src->n, sizeof *dst->v);
  if (!dst->v) return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory copying Pallas calls' scalars");
  dst->cap = src->n;
  tpu_status st = TPU_OK;
  for (int i = 0; i < src->n && st == TPU_OK; i++) {
    const tpu_mosaic_seen *x = &src->v[i];
    tpu_mosaic_seen *e = &dst->v[dst->n++];
    e->loc = x->loc;
    e->flat = x->flat;
    e->name = tpu_strdup(x->name ? x->name : "");
    e->args = tpu_calloc((size_t)(x->n > 0 ? x->n : 1), sizeof *e->args);
    if (!e->name || !e->args) st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory copying Pallas calls' scalars");
    for (int j = 0; st == TPU_OK && j < x->n; j++) {
      st = tpu_tensor_clone(&e->args[j], &x->args[j], d);
      if (st == TPU_OK) e->n = j + 1;
    }
  }
  if (st != TPU_OK) tpu_mosaic_seen_free(dst);
  return st;
}

void tpu_mosaic_seen_free(tpu_mosaic_seen_set *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) {
    for (int j = 0; j < s->v[i].n; j++) tpu_tensor_free(&s->v[i].args[j]);
    tpu_free(s->v[i].args);
    tpu_free(s->v[i].name);
  }
  tpu_free(s->v);
  memset(s, 0, sizeof *s);
}

/* The grid of a call (mosaic.h): kept here beside the scalars the values run gave the calls. */
int64_t tpu_mosaic_grid(const tpu_mosaic *k, const tpu_instr *in, const tpu_tensor *const *args, int64_t *grid) {
  int64_t steps = 1, guess = 1;
  for (int i = 0; !args && i < k->nprefetch && k->ndyn + i < in->noperands; i++) {
    const tpu_shape *sh = &in->operands[k->ndyn + i]->shape;
    int64_t n = tpu__mo_numel(sh->rank, sh->dims);
    if (n > guess) guess = n;
  }
  for (int i = 0, d = 0; i < k->ngrid; i++) {
    grid[i] = k->grid[i];
    if (grid[i] < 0) {
      grid[i] = args && d < in->noperands ? (int64_t)tpu_tensor_get_f64(args[d], 0) : guess;
      if (grid[i] < 0) grid[i] = 0;
      d++;
    }
    steps *= grid[i];
  }
  return steps;
}
