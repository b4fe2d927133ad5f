/* The ICI link model: routes each collective's traffic over the slice's directed links
 * and times it by its busiest link plus the hop latency of its longest chain.
 *
 * Algorithms (bytes are what crosses a directed link; S members, v bytes per member):
 * - a group that is a whole sub-grid of the torus over axes A (every combination of its
 *   coordinates present) gathers axis by axis: the data is cut into |A| parts and part k
 *   visits the axes in A rotated by k, so every axis is busy at once [SB sharding.md];
 *   over one axis line the gather is a bidirectional ring where the axis wraps (each
 *   member's piece goes ceil((S-1)/2) members forward and floor((S-1)/2) back) and where
 *   it does not, a line: each piece travels to both ends;
 * - reduce-scatter has the gather's traffic reversed; all-reduce is both;
 * - all-to-all routes every block along each axis the short way round (a tie splits);
 * - other groups are rings in group order with every ring edge routed dimension-order;
 * - permutes route each pair dimension-order (x, then y, then z; the short way round on a
 *   wrapped axis, + on a tie); a broadcast sends once down the dimension-order tree from
 *   the group's first member. */
#include "pod/ici.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"

typedef struct ctx {
  const tpu_topology *t;
  double *lb;      /* bytes per link slot */
  int64_t *lstamp; /* broadcast: the group that last used a link (+1) */
  int64_t stamp;
} ctx;

static int64_t stride_of(const tpu_topology *t, int a) {
  return a == 0 ? 1 : a == 1 ? t->dims[0] : t->dims[0] * t->dims[1];
}

/* Adds `bytes` on `steps` links from `chip` along axis a in direction dir (0: +, 1: -);
 * returns the chip reached. With lstamp set, a link already used by this stamp is free. The
 * walk stays on the chip's line of axis a: its position moves by one (around, where the axis
 * wraps), no division per hop (the links are those tpu_topology_link_dest gives, in order). */
static int64_t walk(ctx *x, int64_t chip, int a, int dir, int64_t steps, double bytes) {
  const tpu_topology *t = x->t;
  const int64_t n = t->dims[a];
  if (steps > 0 && n >= 2 && chip >= 0 && chip < t->nchips) {
    const int64_t st = stride_of(t, a), pos0 = chip % t->chips_per_slice / st % n;
    const int64_t line = chip - pos0 * st; /* the chip at position 0 of its line */
    if (t->wrap[a] || (dir ? pos0 - steps >= 0 : pos0 + steps < n)) {
      int64_t pos = pos0;
      for (int64_t s = 0; s < steps; s++) {
        int64_t link = (line + pos * st) * TPU_TOPO_LINK_SLOTS + 2 * a + dir;
        if (!x->lstamp) {
          x->lb[link] += bytes;
        } else if (x->lstamp[link] != x->stamp) {
          x->lstamp[link] = x->stamp;
          x->lb[link] += bytes;
        }
        pos = dir ? (pos == 0 ? n - 1 : pos - 1) : (pos == n - 1 ? 0 : pos + 1);
      }
      return line + pos * st;
    }
  }
  for (int64_t s = 0; s < steps; s++) {
    int64_t link = chip * TPU_TOPO_LINK_SLOTS + 2 * a + dir;
    if (!x->lstamp) {
      x->lb[link] += bytes;
    } else if (x->lstamp[link] != x->stamp) {
      x->lstamp[link] = x->stamp;
      x->lb[link] += bytes;
    }
    chip = tpu_topology_link_dest(x->t, link);
  }
  return chip;
}

static void coords_of(const tpu_topology *t, int64_t chip, int64_t c[3]) {
  int64_t in = chip % t->chips_per_slice;
  c[0] = in % t->dims[0];
  c[1] = in / t->dims[0] % t->dims[1];
  c[2] = in / (t->dims[0] * t->dims[1]);
}

/* Dimension-order route from chip u to chip v (same slice); returns the hops. */
static int64_t route(ctx *x, int64_t u, int64_t v, double bytes) {
  const tpu_topology *t = x->t;
  int64_t cu[3], cv[3], hops = 0;
  coords_of(t, u, cu);
  coords_of(t, v, cv);
  for (int a = 0; a < 3; a++) {
    int64_t n = t->dims[a], delta = cv[a] - cu[a];
    if (!delta) continue;
    int dir;
    int64_t steps;
    if (t->wrap[a]) {
      int64_t f = ((delta % n) + n) % n;
      dir = f <= n - f ? 0 : 1;
      steps = dir ? n - f : f;
    } else {
      dir = delta > 0 ? 0 : 1;
      steps = delta > 0 ? delta : -delta;
    }
    u = walk(x, u, a, dir, steps, bytes);
    hops += steps;
  }
  return hops;
}

/* A gather of m bytes per member along one axis line: members at sorted positions pos[]
 * of axis a, `base` the line's chip at position 0. Returns the hops of its longest chain. */
static int64_t line_gather(ctx *x, int64_t base, int a, const int64_t *pos, int64_t s,
                           double m) {
  const tpu_topology *t = x->t;
  int64_t n = t->dims[a], st = stride_of(t, a), hops = 0;
  if (s < 2 || m <= 0) return 0;
  if (!t->wrap[a] || s == 2) {
    if (t->wrap[a]) { /* two members: each the short way to the other */
      int64_t h0 = route(x, base + pos[0] * st, base + pos[1] * st, m);
      int64_t h1 = route(x, base + pos[1] * st, base + pos[0] * st, m);
      return h0 > h1 ? h0 : h1;
    }
    for (int64_t j = 0; j < s; j++) {
      walk(x, base + pos[j] * st, a, 0, pos[s - 1] - pos[j], m);
      walk(x, base + pos[j] * st, a, 1, pos[j] - pos[0], m);
    }
    return pos[s - 1] - pos[0];
  }
  int64_t kf = s / 2, kb = (s - 1) / 2;
  for (int64_t j = 0; j < s; j++) {
    int64_t df = ((pos[(j + kf) % s] - pos[j]) % n + n) % n;
    int64_t db = ((pos[j] - pos[(j - kb + s) % s]) % n + n) % n;
    walk(x, base + pos[j] * st, a, 0, df, m);
    walk(x, base + pos[j] * st, a, 1, db, m);
    if (df > hops) hops = df;
    if (db > hops) hops = db;
  }
  return hops;
}

/* An all-to-all along one axis line with b bytes per ordered pair of members. */
static int64_t line_all_to_all(ctx *x, int64_t base, int a, const int64_t *pos, int64_t s,
                               double b) {
  const tpu_topology *t = x->t;
  int64_t n = t->dims[a], st = stride_of(t, a), hops = 0;
  for (int64_t i = 0; i < s; i++)
    for (int64_t j = 0; j < s; j++) {
      if (i == j) continue;
      int64_t delta = pos[j] - pos[i], from = base + pos[i] * st, h;
      if (t->wrap[a]) {
        int64_t f = ((delta % n) + n) % n, back = n - f;
        if (f < back) {
          walk(x, from, a, 0, f, b);
        } else if (back < f) {
          walk(x, from, a, 1, back, b);
        } else {
          walk(x, from, a, 0, f, b / 2);
          walk(x, from, a, 1, back, b / 2);
        }
        h = f < back ? f : back;
      } else {
        walk(x, from, a, delta > 0 ? 0 : 1, delta > 0 ? delta : -delta, b);
        h = delta > 0 ? delta : -delta;
      }
      if (h > hops) hops = h;
    }
  return hops;
}

/* Scratch for one group. */
typedef struct group_scratch {
  int64_t *chips;   /* members' chips, group order */
  int64_t *pos[3];  /* distinct coordinates per axis, sorted */
  int64_t npos[3];
  char *seen[3];    /* per axis: coordinate present */
  int64_t *chip_stamp;
} group_scratch;

/* Whether the group's chips are every combination of their distinct coordinates. */
static int sub_grid(const tpu_topology *t, group_scratch *g, int64_t s) {
  int64_t prod = 1;
  for (int a = 0; a < 3; a++) {
    g->npos[a] = 0;
    for (int64_t i = 0; i < s; i++) {
      int64_t c[3];
      coords_of(t, g->chips[i], c);
      g->seen[a][c[a]] = 1;
    }
    for (int64_t v = 0; v < t->dims[a]; v++)
      if (g->seen[a][v]) {
        g->pos[a][g->npos[a]++] = v;
        g->seen[a][v] = 0;
      }
    prod *= g->npos[a];
  }
  return prod == s;
}

/* Calls the line function over every line of the sub-grid along axis a. */
static int64_t grid_lines(ctx *x, group_scratch *g, int64_t slice_base, int a, int all_to_all,
                          double bytes) {
  const tpu_topology *t = x->t;
  int b1 = (a + 1) % 3, b2 = (a + 2) % 3;
  int64_t hops = 0;
  for (int64_t i = 0; i < g->npos[b1]; i++)
    for (int64_t j = 0; j < g->npos[b2]; j++) {
      int64_t c[3];
      c[a] = 0;
      c[b1] = g->pos[b1][i];
      c[b2] = g->pos[b2][j];
      int64_t base = slice_base + tpu_topology_chip_at(t, c);
      int64_t h = all_to_all ? line_all_to_all(x, base, a, g->pos[a], g->npos[a], bytes)
                             : line_gather(x, base, a, g->pos[a], g->npos[a], bytes);
      if (h > hops) hops = h;
    }
  return hops;
}

/* Gather traffic of v bytes per member over one group; returns its hops. */
static int64_t group_gather(ctx *x, group_scratch *g, int64_t s, int64_t slice_base, double v) {
  const tpu_topology *t = x->t;
  if (sub_grid(t, g, s)) {
    int axes[3], n = 0;
    double m[3] = {0, 0, 0};
    for (int a = 0; a < 3; a++)
      if (g->npos[a] > 1) axes[n++] = a;
    for (int k = 0; k < n; k++) {
      double size = v / n;
      for (int j = 0; j < n; j++) {
        int a = axes[(k + j) % n];
        m[a] += size;
        size *= (double)g->npos[a];
      }
    }
    int64_t hops = 0;
    for (int i = 0; i < n; i++) hops += grid_lines(x, g, slice_base, axes[i], 0, m[axes[i]]);
    return hops;
  }
  /* A ring in group order, both directions, each edge routed dimension-order. */
  int64_t kf = s / 2, kb = (s - 1) / 2, edge = 0;
  for (int64_t i = 0; i < s; i++) {
    int64_t hf = route(x, g->chips[i], g->chips[(i + 1) % s], (double)kf * v);
    int64_t hb = kb ? route(x, g->chips[(i + 1) % s], g->chips[i], (double)kb * v) : 0;
    if (hf > edge) edge = hf;
    if (hb > edge) edge = hb;
  }
  return kf * edge;
}

static int64_t group_all_to_all(ctx *x, group_scratch *g, int64_t s, int64_t slice_base,
                                double block) {
  const tpu_topology *t = x->t;
  if (sub_grid(t, g, s)) {
    int64_t hops = 0;
    for (int a = 0; a < 3; a++)
      if (g->npos[a] > 1)
        hops += grid_lines(x, g, slice_base, a, 1, block * (double)(s / g->npos[a]));
    return hops;
  }
  int64_t hops = 0;
  for (int64_t i = 0; i < s; i++)
    for (int64_t j = 0; j < s; j++) {
      if (i == j) continue;
      int64_t h = route(x, g->chips[i], g->chips[j], block);
      if (h > hops) hops = h;
    }
  return hops;
}

const char *tpu_ici_kind_name(tpu_ici_kind k) {
  switch (k) {
    case TPU_ICI_ALL_REDUCE: return "all-reduce";
    case TPU_ICI_ALL_GATHER: return "all-gather";
    case TPU_ICI_REDUCE_SCATTER: return "reduce-scatter";
    case TPU_ICI_ALL_TO_ALL: return "all-to-all";
    case TPU_ICI_PERMUTE: return "collective-permute";
    case TPU_ICI_BROADCAST: return "collective-broadcast";
  }
  return "?";
}

static tpu_status check_id(const tpu_topology *t, int64_t id, tpu_diag *d) {
  if (id < 0 || id >= t->nchips * t->devices_per_chip)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(),
                    "device %lld is not in the topology (%lld devices)", (long long)id,
                    (long long)(t->nchips * t->devices_per_chip));
  return TPU_OK;
}

static void summarize(const tpu_topology *t, const tpu_ici_op *op, const double *lb,
                      const char *part, int64_t hops, tpu_ici_result *r) {
  int64_t nl = tpu_topology_nlinks(t);
  double best = 0;
  r->busiest_link = -1;
  for (int64_t c = 0; c < t->nchips; c++) {
    double out = 0;
    for (int k = 0; k < TPU_TOPO_LINK_SLOTS; k++) {
      int64_t l = c * TPU_TOPO_LINK_SLOTS + k;
      double b = lb[l];
      if (!(b > 0)) continue;
      out += b;
      r->links_used++;
      if (b > best) best = b, r->busiest_link = l;
    }
    r->total_link_bytes += out;
    if (out > r->max_chip_bytes) r->max_chip_bytes = out;
    if (part[c]) r->chips++;
  }
  (void)nl;
  r->hops = hops;
  r->busiest_bytes = best;
  r->link_seconds = best / t->link_bw;
  r->latency_seconds = (double)hops * t->hop_s;
  r->seconds = r->link_seconds + r->latency_seconds;
  if (r->busiest_link >= 0) {
    r->busiest_from = r->busiest_link / TPU_TOPO_LINK_SLOTS;
    r->busiest_to = tpu_topology_link_dest(t, r->busiest_link);
    r->busiest_axis = (int)(r->busiest_link % TPU_TOPO_LINK_SLOTS) / 2;
    r->busiest_dir = (int)(r->busiest_link % 2);
  } else {
    r->busiest_from = r->busiest_to = -1;
  }
  if (r->chips) r->mean_chip_bytes = r->total_link_bytes / (double)r->chips;
  if (r->seconds > 0) {
    r->busiest_util = r->link_seconds / r->seconds;
    double n = (double)op->group_size, size = op->operand_bytes, f = 1;
    switch (op->kind) {
      case TPU_ICI_ALL_REDUCE: f = 2 * (n - 1) / n; break;
      case TPU_ICI_ALL_GATHER:
        size = op->result_bytes > 0 ? op->result_bytes : n * op->operand_bytes;
        f = (n - 1) / n;
        break;
      case TPU_ICI_REDUCE_SCATTER:
      case TPU_ICI_ALL_TO_ALL: f = (n - 1) / n; break;
      default: break;
    }
    r->alg_bw = size / r->seconds;
    r->bus_bw = r->alg_bw * f;
  }
}

tpu_status tpu_ici_time(const tpu_topology *t, const tpu_ici_op *op, double *link_bytes,
                        tpu_ici_result *r, tpu_diag *d) {
  memset(r, 0, sizeof *r);
  r->busiest_link = r->busiest_from = r->busiest_to = -1;
  if (t->devices_per_chip != 1)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(),
                    "the ICI model needs one device per chip (topology has %lld)",
                    (long long)t->devices_per_chip);
  if (!(t->link_bw > 0))
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "chip '%s' has no ICI bandwidth", t->chip);
  if (!(op->operand_bytes >= 0) || !(op->result_bytes >= 0) || !isfinite(op->operand_bytes) ||
      !isfinite(op->result_bytes))
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "%s: byte counts must be finite and >= 0",
                    tpu_ici_kind_name(op->kind));
  int permute = op->kind == TPU_ICI_PERMUTE;
  if (permute ? op->npairs < 0 || (op->npairs && !op->pairs)
              : op->ngroups < 0 || op->group_size < 0 || (op->ngroups && !op->groups))
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "%s: bad group or pair list",
                    tpu_ici_kind_name(op->kind));
  int64_t nl = tpu_topology_nlinks(t), s = op->group_size;
  double *lb = link_bytes ? link_bytes : tpu_malloc(sizeof *lb * (size_t)nl);
  char *part = tpu_calloc((size_t)t->nchips, 1);
  group_scratch g;
  memset(&g, 0, sizeof g);
  ctx x = {t, lb, NULL, 0};
  tpu_status st = TPU_OK;
  if (!lb || !part) goto nomem;
  memset(lb, 0, sizeof *lb * (size_t)nl);
  int64_t hops = 0;
  if (permute) {
    for (int64_t i = 0; i < op->npairs; i++) {
      int64_t u = op->pairs[2 * i], v = op->pairs[2 * i + 1];
      if ((st = check_id(t, u, d)) || (st = check_id(t, v, d))) goto done;
      if (u / t->chips_per_slice != v / t->chips_per_slice) goto cross;
      part[u] = part[v] = 1;
      int64_t h = route(&x, u, v, op->operand_bytes);
      if (h > hops) hops = h;
    }
    summarize(t, op, lb, part, hops, r);
    goto done;
  }
  if (s > 1) {
    g.chips = tpu_malloc(sizeof *g.chips * (size_t)s);
    g.chip_stamp = tpu_calloc((size_t)t->nchips, sizeof *g.chip_stamp);
    if (!g.chips || !g.chip_stamp) goto nomem;
    for (int a = 0; a < 3; a++) {
      g.pos[a] = tpu_malloc(sizeof *g.pos[a] * (size_t)t->dims[a]);
      g.seen[a] = tpu_calloc((size_t)t->dims[a], 1);
      if (!g.pos[a] || !g.seen[a]) goto nomem;
    }
    if (op->kind == TPU_ICI_BROADCAST) {
      x.lstamp = tpu_calloc((size_t)nl, sizeof *x.lstamp);
      if (!x.lstamp) goto nomem;
    }
  }
  for (int64_t gi = 0; gi < op->ngroups && s > 1; gi++) {
    const int64_t *ids = op->groups + gi * s;
    for (int64_t i = 0; i < s; i++) {
      if ((st = check_id(t, ids[i], d))) goto done;
      int64_t c = ids[i];
      if (g.chip_stamp[c] == gi + 1) {
        st = TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "%s: device %lld appears twice in group %lld",
                      tpu_ici_kind_name(op->kind), (long long)c, (long long)gi);
        goto done;
      }
      g.chip_stamp[c] = gi + 1;
      if (c / t->chips_per_slice != ids[0] / t->chips_per_slice) goto cross;
      g.chips[i] = c;
      part[c] = 1;
    }
    int64_t slice_base = ids[0] - ids[0] % t->chips_per_slice, h = 0;
    double sd = (double)s;
    switch (op->kind) {
      case TPU_ICI_ALL_GATHER: h = group_gather(&x, &g, s, slice_base, op->operand_bytes); break;
      case TPU_ICI_REDUCE_SCATTER:
        h = group_gather(&x, &g, s, slice_base,
                         op->result_bytes > 0 ? op->result_bytes : op->operand_bytes / sd);
        break;
      case TPU_ICI_ALL_REDUCE:
        h = 2 * group_gather(&x, &g, s, slice_base, op->operand_bytes / sd);
        group_gather(&x, &g, s, slice_base, op->operand_bytes / sd);
        break;
      case TPU_ICI_ALL_TO_ALL:
        h = group_all_to_all(&x, &g, s, slice_base, op->operand_bytes / sd);
        break;
      case TPU_ICI_BROADCAST:
        x.stamp = gi + 1;
        for (int64_t i = 1; i < s; i++) {
          int64_t hi = route(&x, g.chips[0], g.chips[i], op->operand_bytes);
          if (hi > h) h = hi;
        }
        break;
      default: break;
    }
    if (h > hops) hops = h;
  }
  summarize(t, op, lb, part, hops, r);
  goto done;
cross:
  st = TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(),
                "%s: a group spans two slices (traffic over DCN is not modelled)",
                tpu_ici_kind_name(op->kind));
  goto done;
nomem:
  st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
done:
  if (!link_bytes) tpu_free(lb);
  tpu_free(part);
  tpu_free(g.chips);
  tpu_free(g.chip_stamp);
  tpu_free(x.lstamp);
  for (int a = 0; a < 3; a++) {
    tpu_free(g.pos[a]);
    tpu_free(g.seen[a]);
  }
  return st;
}
