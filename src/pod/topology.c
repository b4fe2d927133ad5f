/* Slice shapes: parsing --topology, the default shape for a chip count, device ids to
 * coordinates and the directed ICI links of a torus or mesh. */
#include "pod/topology.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tpu_status bad(tpu_diag *d, const char *fmt, const char *a, const char *b) {
  return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), fmt, a, b);
}

static int chip_axes(const tpu_chip *c) {
  return c->topology == TPU_TOPO_TORUS_3D ? 3 : c->topology == TPU_TOPO_TORUS_2D ? 2 : 0;
}

static void sort3(int64_t v[3]) {
  for (int i = 0; i < 3; i++)
    for (int j = i + 1; j < 3; j++)
      if (v[j] < v[i]) {
        int64_t t = v[i];
        v[i] = v[j];
        v[j] = t;
      }
}

/* A twisted torus needs AxBxC (A <= B <= C) with 2A=B=C or 2A=2B=C, each a multiple of 4
 * (Cloud TPU v4 docs, "3D mesh and 3D torus"). */
static int twist_ok(const int64_t dims[3]) {
  int64_t s[3] = {dims[0], dims[1], dims[2]};
  sort3(s);
  for (int i = 0; i < 3; i++)
    if (s[i] < 4 || s[i] % 4) return 0;
  return (2 * s[0] == s[1] && s[1] == s[2]) || (s[0] == s[1] && 2 * s[1] == s[2]);
}

/* Fills everything but dims/ndims/twisted from the chip and checks the shape against it. */
static tpu_status finish(const tpu_chip *chip, const char *text, tpu_topology *t,
                         tpu_diag *d) {
  int axes = chip_axes(chip);
  char shape[96];
  if (axes == 0 || !(chip->ici_bw_per_link > 0))
    return bad(d, "chip '%s' has no ICI links to form a slice ('%s')", chip->name, text);
  snprintf(t->chip, sizeof t->chip, "%s", chip->name);
  t->slices = 1;
  t->devices_per_chip = 1;
  t->chips_per_slice = t->dims[0] * t->dims[1] * t->dims[2];
  t->nchips = t->chips_per_slice;
  tpu_topology_format(t, shape, sizeof shape);
  if (t->ndims > axes) {
    char msg[200];
    snprintf(msg, sizeof msg, "topology '%%s' has %d axes but the %%s ICI is a %d-D torus",
             t->ndims, axes);
    return bad(d, msg, text, chip->name);
  }
  if (tpu_chip_known(chip, TPU_CHIP_MAX_CHIPS) && t->nchips > chip->max_chips) {
    char msg[200];
    snprintf(msg, sizeof msg, "topology '%%s' has %lld chips; the largest %%s slice has %lld",
             (long long)t->nchips, (long long)chip->max_chips);
    return bad(d, msg, text, chip->name);
  }
  if (tpu_chip_known(chip, TPU_CHIP_MAX_DIMS)) {
    int64_t s[3] = {t->dims[0], t->dims[1], t->dims[2]}, m[3];
    memcpy(m, chip->max_dims, sizeof m);
    sort3(s);
    sort3(m);
    for (int i = 0; i < 3; i++)
      if (s[i] > m[i]) {
        char msg[240];
        snprintf(msg, sizeof msg,
                 "topology '%%s' does not fit the %%s's largest slice %lldx%lldx%lld",
                 (long long)chip->max_dims[0], (long long)chip->max_dims[1],
                 (long long)chip->max_dims[2]);
        return bad(d, msg, text, chip->name);
      }
  }
  if (t->twisted && (axes != 3 || !twist_ok(t->dims)))
    return bad(d,
               "topology '%s' cannot be twisted on %s: a twisted torus is AxBxC with 2A=B=C or "
               "2A=2B=C, each a multiple of 4",
               text, chip->name);
  /* v4/v5p: the optical switches that close the rings exist only between whole 4x4x4
   * cubes, so a slice of whole cubes wraps on every axis and a smaller one (2x2x4) on none
   * [SB tpus.md]; v5e/v6e wrap an axis of the full 16 [SB]. */
  int whole = chip->wraparound == TPU_WRAP_MULTIPLE && chip->wrap_multiple > 0;
  for (int a = 0; a < 3 && whole; a++) whole = t->dims[a] % chip->wrap_multiple == 0;
  for (int a = 0; a < 3; a++)
    t->wrap[a] = t->dims[a] > 2 && (t->twisted || whole ||
                                     (chip->wraparound != TPU_WRAP_MULTIPLE &&
                                      tpu_chip_axis_wraps(chip, a, t->dims[a])));
  t->chips_per_host = chip->chips_per_host;
  t->links_per_chip = chip->ici_links;
  t->link_bw = chip->ici_bw_per_link;
  t->hop_s = chip->ici_latency_s;
  t->dcn_bw = chip->dcn_bw;
  t->dcn_host_bw = tpu_chip_known(chip, TPU_CHIP_DCN_HOST_BW) ? chip->dcn_host_bw
                                                               : chip->dcn_bw * (double)chip->chips_per_host;
  t->dcn_latency_s = chip->dcn_latency_s;
  t->pcie_bw = chip->pcie_bw;
  return TPU_OK;
}

/* Doubles the last of the shortest axes among the first `axes`. */
static void double_shortest(int64_t dims[3], int axes) {
  int best = 0;
  for (int a = 1; a < axes; a++)
    if (dims[a] <= dims[best]) best = a;
  dims[best] *= 2;
}

tpu_status tpu_topology_default(const tpu_chip *chip, int64_t nchips, tpu_topology *out,
                                tpu_diag *d) {
  memset(out, 0, sizeof *out);
  int axes = chip_axes(chip);
  char text[64];
  snprintf(text, sizeof text, "%lld chips", (long long)nchips);
  if (nchips < 1) return bad(d, "no default topology for %s on %s", text, chip->name);
  out->ndims = axes ? axes : 1;
  out->dims[0] = out->dims[1] = out->dims[2] = 1;
  if (axes == 0) {
    out->dims[0] = nchips;
    return finish(chip, text, out, d);
  }
  if ((nchips & (nchips - 1)) == 0) {
    /* 3-D chips grow as 1x1x1, 1x2x1, 2x2x1 (one host), then through z as well. */
    for (int64_t n = 1; n < nchips; n *= 2) double_shortest(out->dims, n < 4 ? 2 : axes);
    return finish(chip, text, out, d);
  }
  if (axes == 3 && nchips % 16 == 0) {
    out->dims[0] = out->dims[1] = 4;
    out->dims[2] = nchips / 16;
    tpu_diag tmp;
    memset(&tmp, 0, sizeof tmp);
    if (finish(chip, text, out, &tmp) == TPU_OK) return TPU_OK;
    out->dims[0] = out->dims[1] = out->dims[2] = 1;
  }
  /* The most nearly square or cubic factorisation, shortest axis first. */
  int64_t best[3] = {1, 1, nchips}, best_span = nchips;
  for (int64_t a = 1; a * a <= nchips; a++) {
    if (nchips % a) continue;
    int64_t rest = nchips / a;
    if (axes == 2) {
      if (rest >= a && rest - a < best_span) {
        best[0] = a, best[1] = rest, best[2] = 1, best_span = rest - a;
      }
      continue;
    }
    for (int64_t b = a; b * b <= rest; b++) {
      if (rest % b) continue;
      int64_t c = rest / b;
      if (c - a < best_span) best[0] = a, best[1] = b, best[2] = c, best_span = c - a;
    }
  }
  memcpy(out->dims, best, sizeof best);
  return finish(chip, text, out, d);
}

tpu_status tpu_topology_parse(const char *text, const tpu_chip *chip, tpu_topology *out,
                              tpu_diag *d) {
  memset(out, 0, sizeof *out);
  out->dims[0] = out->dims[1] = out->dims[2] = 1;
  const char *p = text;
  if (!p || !*p) return bad(d, "empty topology%s%s", "", "");
  if (isalpha((unsigned char)*p)) {
    /* A slice name: GENERATION-COUNT. */
    const char *dash = strrchr(p, '-');
    if (!dash || !dash[1])
      return bad(d, "topology '%s': expected AxBxC or a slice name like %s-128", text,
                 chip->name);
    char gen[32];
    size_t glen = (size_t)(dash - p);
    if (glen >= sizeof gen) glen = sizeof gen - 1;
    memcpy(gen, p, glen);
    gen[glen] = 0;
    const char *g = strcmp(gen, "v5litepod") == 0 ? "v5e" : strcmp(gen, "tpu7x") == 0 ? "v7" : gen;
    if (strcmp(g, chip->name) != 0)
      return bad(d, "slice '%s' is not a slice of the chip '%s' (give --chip)", text,
                 chip->name);
    char *end;
    long long n = strtoll(dash + 1, &end, 10);
    if (*end || n < 1 || !isdigit((unsigned char)dash[1]))
      return bad(d, "topology '%s': the slice size after '-' must be a positive integer%s",
                 text, "");
    int64_t cores = chip->tensorcores > 0 ? chip->tensorcores : 1;
    if (n % cores) {
      char msg[200];
      snprintf(msg, sizeof msg,
               "slice '%%s' counts %lld TensorCores, not whole %%s chips of %lld", n,
               (long long)cores);
      return bad(d, msg, text, chip->name);
    }
    tpu_status st = tpu_topology_default(chip, n / cores, out, d);
    return st;
  }
  int nd = 0;
  while (1) {
    if (!isdigit((unsigned char)*p))
      return bad(d, "topology '%s': expected AxBxC (chips per axis, e.g. 4x4x8) or a slice "
                    "name like %s-128",
                 text, chip->name);
    char *end;
    long long v = strtoll(p, &end, 10);
    if (v < 1 || v > 1 << 20)
      return bad(d, "topology '%s': an axis must hold 1 to 2^20 chips%s", text, "");
    if (nd == 3) return bad(d, "topology '%s' has more than 3 axes%s", text, "");
    out->dims[nd++] = v;
    p = end;
    if (*p == 'x') {
      p++;
      continue;
    }
    break;
  }
  if (strcmp(p, "_twisted") == 0)
    out->twisted = 1;
  else if (strcmp(p, "_untwisted") != 0 && *p)
    return bad(d, "topology '%s': unexpected '%s' after the axes", text, p);
  out->ndims = nd;
  return finish(chip, text, out, d);
}

tpu_status tpu_topology_check_devices(const tpu_topology *t, int64_t ndevices, tpu_diag *d) {
  int64_t have = t->nchips * t->devices_per_chip;
  if (have == ndevices) return TPU_OK;
  char shape[96];
  tpu_topology_format(t, shape, sizeof shape);
  return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(),
                  "topology %s has %lld devices but the program runs on %lld", shape,
                  (long long)have, (long long)ndevices);
}

int tpu_topology_coords(const tpu_topology *t, int64_t device_id, int64_t coords[3]) {
  coords[0] = coords[1] = coords[2] = 0;
  int64_t chip = tpu_topology_chip(t, device_id);
  if (chip < 0) return -1;
  int64_t c = chip % t->chips_per_slice;
  coords[0] = c % t->dims[0];
  coords[1] = c / t->dims[0] % t->dims[1];
  coords[2] = c / (t->dims[0] * t->dims[1]);
  return (int)(device_id % t->devices_per_chip);
}

int64_t tpu_topology_chip(const tpu_topology *t, int64_t device_id) {
  if (device_id < 0 || device_id >= t->nchips * t->devices_per_chip) return -1;
  return device_id / t->devices_per_chip;
}

int64_t tpu_topology_chip_at(const tpu_topology *t, const int64_t coords[3]) {
  return coords[0] + t->dims[0] * (coords[1] + t->dims[1] * coords[2]);
}

int64_t tpu_topology_nlinks(const tpu_topology *t) { return t->nchips * TPU_TOPO_LINK_SLOTS; }

int64_t tpu_topology_link_dest(const tpu_topology *t, int64_t link) {
  if (link < 0 || link >= tpu_topology_nlinks(t)) return -1;
  int64_t chip = link / TPU_TOPO_LINK_SLOTS;
  int axis = (int)(link % TPU_TOPO_LINK_SLOTS) / 2, neg = (int)(link % 2);
  int64_t n = t->dims[axis];
  if (n < 2) return -1;
  int64_t base = chip - chip % t->chips_per_slice, c = chip % t->chips_per_slice;
  int64_t stride = axis == 0 ? 1 : axis == 1 ? t->dims[0] : t->dims[0] * t->dims[1];
  int64_t pos = c / stride % n, to = neg ? pos - 1 : pos + 1;
  if (to < 0 || to >= n) {
    if (!t->wrap[axis]) return -1;
    to = (to + n) % n;
  }
  return base + c + (to - pos) * stride;
}

int tpu_topology_link_exists(const tpu_topology *t, int64_t link) {
  return tpu_topology_link_dest(t, link) >= 0;
}

int64_t tpu_topology_count_links(const tpu_topology *t) {
  int64_t n = 0;
  for (int a = 0; a < 3; a++) {
    if (t->dims[a] < 2) continue;
    int64_t per_line = t->wrap[a] ? t->dims[a] : t->dims[a] - 1;
    n += 2 * per_line * (t->chips_per_slice / t->dims[a]);
  }
  return n * t->slices;
}

void tpu_topology_format(const tpu_topology *t, char *buf, size_t n) {
  static const char axis_name[3] = {'x', 'y', 'z'};
  int nd = t->ndims > 0 ? t->ndims : 1, any = 0, off;
  off = snprintf(buf, n, "%lld", (long long)t->dims[0]);
  for (int a = 1; a < nd && off >= 0 && (size_t)off < n; a++)
    off += snprintf(buf + off, n - (size_t)off, "x%lld", (long long)t->dims[a]);
  if (t->twisted && off >= 0 && (size_t)off < n)
    off += snprintf(buf + off, n - (size_t)off, "_twisted");
  for (int a = 0; a < nd && off >= 0 && (size_t)off < n; a++)
    if (t->wrap[a]) {
      off += snprintf(buf + off, n - (size_t)off, "%s%c", any ? " " : " (wrap ", axis_name[a]);
      any = 1;
    }
  if (off >= 0 && (size_t)off < n) snprintf(buf + off, n - (size_t)off, any ? ")" : " (no wrap)");
}

static int put_coords(const tpu_topology *t, int64_t chip, char *buf, size_t n) {
  int64_t c[3];
  tpu_topology_coords(t, chip * t->devices_per_chip, c);
  int nd = t->ndims > 0 ? t->ndims : 1;
  int off = snprintf(buf, n, "(%lld", (long long)c[0]);
  for (int a = 1; a < nd && off >= 0 && (size_t)off < n; a++)
    off += snprintf(buf + off, n - (size_t)off, ",%lld", (long long)c[a]);
  if (off >= 0 && (size_t)off < n) off += snprintf(buf + off, n - (size_t)off, ")");
  return off;
}

void tpu_topology_link_name(const tpu_topology *t, int64_t link, char *buf, size_t n) {
  int64_t to = tpu_topology_link_dest(t, link);
  if (to < 0) {
    snprintf(buf, n, "-");
    return;
  }
  int64_t from = link / TPU_TOPO_LINK_SLOTS, slice = from / t->chips_per_slice;
  char a[64], b[64];
  put_coords(t, from, a, sizeof a);
  put_coords(t, to, b, sizeof b);
  int axis = (int)(link % TPU_TOPO_LINK_SLOTS) / 2;
  char pre[32] = "";
  if (slice) snprintf(pre, sizeof pre, "s%lld:", (long long)slice);
  snprintf(buf, n, "%s%s->%s %c%c", pre, a, b, link % 2 ? '-' : '+', "xyz"[axis]);
}

tpu_status tpu_topology_for_run(const char *text, int64_t slices, const tpu_chip *chip, int64_t ndevices,
                                tpu_topology *out, int *set, tpu_diag *d) {
  *set = 0;
  int64_t k = slices > 1 ? slices : 1;
  if (!text && k == 1) return TPU_OK;
  if (ndevices % k)
    return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "%lld devices do not split into %lld slices", (long long)ndevices,
                    (long long)k);
  TPU_TRY(text ? tpu_topology_parse(text, chip, out, d) : tpu_topology_default(chip, ndevices / k, out, d));
  out->slices = k;
  out->nchips = out->chips_per_slice * k;
  TPU_TRY(tpu_topology_check_devices(out, ndevices, d));
  *set = 1;
  return TPU_OK;
}
