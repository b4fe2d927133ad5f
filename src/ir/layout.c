/* Physical layouts: minor_to_major order and XLA tiling, read from a shape and turned into
 * each element's position in the buffer. */
#include "ir/layout.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* Physical index dims an array can reach: its rank plus every tiling level's tile rank. */
#define TPU__LAYOUT_DIMS (3 * TPU_MAX_RANK)

static tpu_status bad_tail(const tpu_shape *s, tpu_loc loc, const char *why, tpu_diag *d) {
  return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, loc, "layout '%s' of %s[...]: %s", s->layout_tail, tpu_dtype_name(s->dtype),
                  why);
}

/* Reads "(a,b,...)" at *p into v; returns the count, 0 on a malformed or combined ('*') list. */
static int read_tuple(const char **p, int64_t *v, int max, long long min) {
  const char *q = *p;
  if (*q != '(') return 0;
  q++;
  int n = 0;
  for (;;) {
    while (*q == ' ') q++;
    if (!isdigit((unsigned char)*q) || n >= max) return 0;
    char *end;
    long long x = strtoll(q, &end, 10);
    if (x < min) return 0;
    v[n++] = x;
    q = end;
    while (*q == ' ') q++;
    if (*q == ',') {
      q++;
      continue;
    }
    if (*q != ')') return 0;
    *p = q + 1;
    return n;
  }
}

tpu_status tpu_layout_read(const tpu_shape *s, tpu_loc loc, tpu_layout *out, tpu_diag *d) {
  memset(out, 0, sizeof *out);
  out->rank = s->rank;
  for (int i = 0; i < s->rank; i++)
    out->minor_to_major[i] = s->has_layout ? s->minor_to_major[i] : s->rank - 1 - i;
  const char *p = s->layout_tail;
  if (!p) return TPU_OK;
  int dims_total = s->rank;
  if (*p == ':') p++;
  while (*p) {
    if (*p == ' ') {
      p++;
    } else if (*p == 'T') {
      p++;
      do {
        if (out->ntiles >= TPU_LAYOUT_MAX_TILES) return bad_tail(s, loc, "more tiling levels than modelled", d);
        int n = read_tuple(&p, out->tile[out->ntiles], TPU_MAX_RANK, 1);
        if (!n) return bad_tail(s, loc, "a tile must list positive sizes ('*' tiles are not modelled)", d);
        out->tile_rank[out->ntiles++] = n;
        dims_total = (dims_total > n ? dims_total : n) + n;
        if (dims_total > TPU__LAYOUT_DIMS) return bad_tail(s, loc, "too many tiled dimensions", d);
      } while (*p == '(');
    } else if (*p == 'S' || *p == 'E') {
      char c = *p++;
      int64_t v;
      if (read_tuple(&p, &v, 1, 0) != 1) return bad_tail(s, loc, "cannot read its memory space or element size", d);
      if (c == 'E' && v != (int64_t)tpu_dtype_bits(s->dtype))
        return bad_tail(s, loc, "an element size other than the type's is not modelled", d);
    } else {
      return bad_tail(s, loc, "this layout item is not modelled", d);
    }
  }
  return TPU_OK;
}

/* The physical index space of an array: dims major to minor after the permutation and every
 * tiling level. Returns its rank. */
static int phys_dims(const tpu_shape *s, const tpu_layout *l, int64_t *dims) {
  int m = s->rank;
  for (int j = 0; j < m; j++) dims[j] = s->dims[l->minor_to_major[m - 1 - j]];
  for (int t = 0; t < l->ntiles; t++) {
    int k = l->tile_rank[t];
    if (k > m) { /* a tile wider than the shape pads it with unit dims on the major side */
      memmove(dims + (k - m), dims, sizeof *dims * (size_t)m);
      for (int j = 0; j < k - m; j++) dims[j] = 1;
      m = k;
    }
    for (int i = 0; i < k; i++) {
      int64_t dm = dims[m - k + i], tl = l->tile[t][i];
      dims[m - k + i] = (dm + tl - 1) / tl;
      dims[m + i] = tl;
    }
    m += k;
  }
  return m;
}

int tpu_layout_is_row_major(const tpu_shape *s, const tpu_layout *l) {
  for (int i = 0; i < s->rank; i++)
    if (l->minor_to_major[i] != s->rank - 1 - i) return 0;
  if (l->ntiles == 0) return 1;
  /* Tiled: row-major when every tiling level leaves the order alone and adds no padding,
   * i.e. each tile spans its dims fully except the most major tiled dim, which it divides. */
  int64_t dims[TPU__LAYOUT_DIMS];
  int m = s->rank;
  for (int j = 0; j < m; j++) dims[j] = s->dims[j];
  for (int t = 0; t < l->ntiles; t++) {
    int k = l->tile_rank[t];
    if (k > m) {
      memmove(dims + (k - m), dims, sizeof *dims * (size_t)m);
      for (int j = 0; j < k - m; j++) dims[j] = 1;
      m = k;
    }
    /* Order and size are kept when no tile splits a dim (tile > 1) major to a dim that is
     * split into several blocks, and no tile pads. */
    int split_seen = 0;
    for (int i = 0; i < k; i++) {
      int64_t dm = dims[m - k + i], tl = l->tile[t][i];
      if (dm % tl) return 0;
      if (split_seen && dm / tl > 1) return 0;
      if (tl > 1) split_seen = 1;
    }
    /* Re-express the tiled shape for the next level: blocks then tile dims. */
    for (int i = 0; i < k; i++) {
      int64_t tl = l->tile[t][i];
      dims[m + i] = tl;
      dims[m - k + i] /= tl;
    }
    m += k;
  }
  return 1;
}

int64_t tpu_shape_physical_bytes(const tpu_shape *s) {
  if (!tpu_dtype_is_array(s->dtype)) return 0;
  const int64_t bits = tpu_dtype_bits(s->dtype); /* s4/u4 pack two per byte on the TPU */
  int64_t logical = (tpu_shape_numel(s) * bits + 7) / 8;
  tpu_layout l;
  tpu_diag d;
  if (!s->has_layout || tpu_layout_read(s, tpu_noloc(), &l, &d) != TPU_OK) return logical;
  int64_t pd[TPU__LAYOUT_DIMS], n = 1;
  int pm = phys_dims(s, &l, pd);
  for (int j = 0; j < pm; j++) n *= pd[j];
  return (n * bits + 7) / 8;
}

void tpu_layout_offsets(const tpu_shape *s, const tpu_layout *l, int64_t *off, int64_t *phys) {
  int64_t pd[TPU__LAYOUT_DIMS];
  int pm = phys_dims(s, l, pd);
  int64_t total = 1;
  for (int j = 0; j < pm; j++) total *= pd[j];
  *phys = total;
  int r = s->rank;
  int64_t n = tpu_shape_numel(s), idx[TPU_MAX_RANK] = {0};
  for (int64_t e = 0; e < n; e++) {
    int64_t c[TPU__LAYOUT_DIMS];
    int m = r;
    for (int j = 0; j < r; j++) c[j] = idx[l->minor_to_major[r - 1 - j]];
    for (int t = 0; t < l->ntiles; t++) {
      int k = l->tile_rank[t];
      if (k > m) {
        memmove(c + (k - m), c, sizeof *c * (size_t)m);
        for (int j = 0; j < k - m; j++) c[j] = 0;
        m = k;
      }
      for (int i = 0; i < k; i++) {
        int64_t v = c[m - k + i], tl = l->tile[t][i];
        c[m - k + i] = v / tl;
        c[m + i] = v % tl;
      }
      m += k;
    }
    int64_t o = 0;
    for (int j = 0; j < m; j++) o = o * pd[j] + c[j];
    off[e] = o;
    for (int j = r - 1; j >= 0; j--) {
      if (++idx[j] < s->dims[j]) break;
      idx[j] = 0;
    }
  }
}
