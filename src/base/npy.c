/* .npy reader (v1-v3, both byte orders, C or Fortran order) and atomic v1.0 writer. */
#include "base/npy.h"

#include "base/file.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/bf16.h"

#define NPY_MAX_HEADER (1u << 20) /* bytes; NumPy itself refuses far smaller headers */
#define NPY_CHUNK 65536           /* elements converted per write */

static int host_is_le(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

static void swap_bytes(unsigned char *p, size_t count, size_t size) {
  if (size < 2) return;
  for (size_t i = 0; i < count; i++, p += size)
    for (size_t a = 0, b = size - 1; a < b; a++, b--) {
      unsigned char t = p[a];
      p[a] = p[b];
      p[b] = t;
    }
}

/* ---- the bytes: a file or a buffer, read in order, with the offset of the next byte
 * (errors are located as FILE:0:BYTE) */

typedef struct {
  FILE *f;                  /* or */
  const unsigned char *mem; /* with len bytes */
  size_t len, pos;
  const char *path;
} npy_src;

static size_t src_read(npy_src *s, void *buf, size_t n) {
  size_t got;
  if (s->f) {
    got = fread(buf, 1, n, s->f);
  } else {
    got = s->len - s->pos < n ? s->len - s->pos : n;
    memcpy(buf, s->mem + s->pos, got);
  }
  s->pos += got;
  return got;
}

/* Bytes left, if known (a regular file or a buffer): 1 and *left, else 0. */
static int src_left(npy_src *s, uint64_t *left) {
  if (!s->f) {
    *left = s->len - s->pos;
    return 1;
  }
  struct stat st;
  if (fstat(fileno(s->f), &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < s->pos) return 0;
  *left = (uint64_t)st.st_size - s->pos;
  return 1;
}

static int src_at_end(npy_src *s) { return s->f ? fgetc(s->f) == EOF : s->pos == s->len; }

static tpu_loc at_byte(const npy_src *s, size_t byte) {
  tpu_loc l = {s->path, 0, byte > (size_t)INT32_MAX ? INT32_MAX : (int)byte};
  return l;
}

/* ---- header: a Python dict literal such as
 * {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } */

typedef struct {
  const char *p, *start, *end;
  const npy_src *s;
  size_t base; /* file offset of start */
  tpu_diag *d;
} hdr;

static tpu_loc hloc(const hdr *h, const char *at) { return at_byte(h->s, h->base + (size_t)(at - h->start)); }

static void hskip(hdr *h) {
  while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n' || *h->p == '\r'))
    h->p++;
}

static tpu_status hbad(hdr *h, const char *what) {
  return TPU_FAIL(h->d, TPU_ERR_PARSE, hloc(h, h->p), "bad .npy header: %s", what);
}

/* A quoted string (single or double quotes, no escapes needed in valid headers). */
static tpu_status hstring(hdr *h, char *out, size_t n) {
  if (h->p >= h->end || (*h->p != '\'' && *h->p != '"')) return hbad(h, "expected a string");
  char q = *h->p++;
  size_t k = 0;
  while (h->p < h->end && *h->p != q) {
    if (k + 1 >= n) return hbad(h, "string too long");
    out[k++] = *h->p++;
  }
  if (h->p >= h->end) return hbad(h, "unterminated string");
  h->p++;
  out[k] = 0;
  return TPU_OK;
}

static int hword(hdr *h, const char *w) {
  size_t n = strlen(w);
  if ((size_t)(h->end - h->p) < n || memcmp(h->p, w, n) != 0) return 0;
  h->p += n;
  return 1;
}

/* A tuple of non-negative decimal integers as Python 3's repr writes them: "(2, 3)", "(5,)"
 * or "()". (Python 2's "2L" is refused: NumPy on Python 3 never writes it.) */
static tpu_status hshape(hdr *h, int *rank, int64_t *dims) {
  if (h->p >= h->end || *h->p != '(') return hbad(h, "'shape' must be a tuple");
  h->p++;
  *rank = 0;
  for (;;) {
    hskip(h);
    if (h->p < h->end && *h->p == ')') {
      h->p++;
      return TPU_OK;
    }
    if (h->p >= h->end || *h->p < '0' || *h->p > '9')
      return hbad(h, "'shape' must hold non-negative integers");
    const char *num = h->p;
    int64_t v = 0;
    while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
      int dig = *h->p++ - '0';
      if (v > (INT64_MAX - dig) / 10)
        return TPU_FAIL(h->d, TPU_ERR_LIMIT, hloc(h, num), "bad .npy header: a dimension overflows int64");
      v = v * 10 + dig;
    }
    if (*rank >= TPU_MAX_RANK)
      return TPU_FAIL(h->d, TPU_ERR_LIMIT, hloc(h, num), "array rank exceeds the limit of %d", TPU_MAX_RANK);
    dims[(*rank)++] = v;
    hskip(h);
    if (h->p < h->end && *h->p == ',') {
      h->p++;
      continue;
    }
    if (h->p < h->end && *h->p == ')') continue;
    return hbad(h, "expected ',' or ')' in 'shape'");
  }
}

/* Maps a descriptor like "<f4" to a dtype; *swap is set when the data needs byte swapping. */
static tpu_status parse_descr(hdr *h, const char *s, const char *at, tpu_dtype *dt, int *swap) {
  tpu_loc l = hloc(h, at);
  char order = '=';
  const char *t = s;
  if (*t == '<' || *t == '>' || *t == '|' || *t == '=') order = *t++;
  static const struct {
    const char *code;
    tpu_dtype dt;
  } map[] = {{"b1", TPU_PRED}, {"?", TPU_PRED},  {"i1", TPU_S8},  {"i2", TPU_S16},
             {"i4", TPU_S32},  {"i8", TPU_S64},  {"u1", TPU_U8},  {"u2", TPU_U16},
             {"u4", TPU_U32},  {"u8", TPU_U64},  {"f2", TPU_F16}, {"f4", TPU_F32},
             {"f8", TPU_F64},  {"c8", TPU_C64},  {"c16", TPU_C128}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    if (strcmp(t, map[i].code) != 0) continue;
    *dt = map[i].dt;
    size_t size = tpu_dtype_size(*dt);
    int file_le = order == '<' || (order == '=' && host_is_le());
    if (order == '|' && size > 1)
      return TPU_FAIL(h->d, TPU_ERR_PARSE, l, "bad .npy header: descr '%s' lacks a byte order", s);
    *swap = size > 1 && file_le != host_is_le();
    return TPU_OK;
  }
  return TPU_FAIL(h->d, TPU_ERR_UNSUPPORTED, l,
                  "unsupported .npy dtype '%s' (supported: bool, int8-64, uint8-64, float16/32/64, "
                  "complex64/128)",
                  s);
}

static tpu_status parse_header(hdr *h, tpu_dtype *dt, int *swap, int *fortran, int *rank,
                               int64_t *dims) {
  int have_descr = 0, have_fortran = 0, have_shape = 0;
  hskip(h);
  if (h->p >= h->end || *h->p != '{') return hbad(h, "expected '{'");
  h->p++;
  for (;;) {
    hskip(h);
    if (h->p < h->end && *h->p == '}') {
      h->p++;
      break;
    }
    char key[32], val[64];
    const char *key_at = h->p;
    TPU_TRY(hstring(h, key, sizeof key));
    hskip(h);
    if (h->p >= h->end || *h->p != ':') return hbad(h, "expected ':' after a key");
    h->p++;
    hskip(h);
    if (!strcmp(key, "descr") && !have_descr) {
      if (h->p < h->end && *h->p == '[')
        return TPU_FAIL(h->d, TPU_ERR_UNSUPPORTED, hloc(h, h->p), "structured .npy dtypes are not supported");
      const char *val_at = h->p;
      TPU_TRY(hstring(h, val, sizeof val));
      TPU_TRY(parse_descr(h, val, val_at, dt, swap));
      have_descr = 1;
    } else if (!strcmp(key, "fortran_order") && !have_fortran) {
      if (hword(h, "True")) *fortran = 1;
      else if (hword(h, "False")) *fortran = 0;
      else return hbad(h, "'fortran_order' must be True or False");
      have_fortran = 1;
    } else if (!strcmp(key, "shape") && !have_shape) {
      TPU_TRY(hshape(h, rank, dims));
      have_shape = 1;
    } else {
      return TPU_FAIL(h->d, TPU_ERR_PARSE, hloc(h, key_at), "bad .npy header: unexpected or repeated key '%s'", key);
    }
    hskip(h);
    if (h->p < h->end && *h->p == ',') {
      h->p++;
      continue;
    }
    if (h->p < h->end && *h->p == '}') continue;
    return hbad(h, "expected ',' or '}'");
  }
  hskip(h);
  if (h->p != h->end) return hbad(h, "unexpected text after the dictionary");
  h->p = h->start;
  if (!have_descr) return hbad(h, "missing key 'descr'");
  if (!have_fortran) return hbad(h, "missing key 'fortran_order'");
  if (!have_shape) return hbad(h, "missing key 'shape'");
  return TPU_OK;
}

/* Copies src (laid out in Fortran order with dims `dims`) into dst (C order, same dims). */
static void fortran_to_c(const unsigned char *from, unsigned char *dst, int rank,
                         const int64_t *dims, size_t size, int64_t numel) {
  int64_t idx[TPU_MAX_RANK] = {0}, fstride[TPU_MAX_RANK];
  int64_t s = 1;
  for (int k = 0; k < rank; k++) {
    fstride[k] = s;
    s *= dims[k];
  }
  int64_t off = 0; /* Fortran offset of the current C-order index */
  for (int64_t i = 0; i < numel; i++) {
    memcpy(dst + (size_t)i * size, from + (size_t)off * size, size);
    for (int k = rank - 1; k >= 0; k--) { /* C order: the last index moves fastest */
      idx[k]++;
      off += fstride[k];
      if (idx[k] < dims[k]) break;
      off -= fstride[k] * dims[k];
      idx[k] = 0;
    }
  }
}

static uint32_t le32(const unsigned char *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static tpu_status read_body(npy_src *in, tpu_tensor *out, tpu_diag *d) {
  unsigned char pre[12];
  size_t got = src_read(in, pre, 8);
  if (got < 6 || memcmp(pre, "\x93NUMPY", 6) != 0)
    return TPU_FAIL(d, TPU_ERR_PARSE, at_byte(in, 0), "not a .npy file (bad magic)");
  if (got < 8) return TPU_FAIL(d, TPU_ERR_PARSE, at_byte(in, got), "truncated .npy file (no version)");
  int major = pre[6], minor = pre[7];
  if (major < 1 || major > 3 || minor != 0)
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, at_byte(in, 6), "unsupported .npy format version %d.%d", major, minor);
  size_t lenbytes = major == 1 ? 2 : 4;
  if (src_read(in, pre + 8, lenbytes) != lenbytes)
    return TPU_FAIL(d, TPU_ERR_PARSE, at_byte(in, in->pos), "truncated .npy file (no header length)");
  uint32_t hlen = major == 1 ? (uint32_t)(pre[8] | pre[9] << 8) : le32(pre + 8);
  if (hlen > NPY_MAX_HEADER)
    return TPU_FAIL(d, TPU_ERR_LIMIT, at_byte(in, 8), ".npy header of %u bytes exceeds the limit of %u",
                    (unsigned)hlen, NPY_MAX_HEADER);
  char *text = tpu_malloc(hlen + 1);
  if (!text) return TPU_FAIL(d, TPU_ERR_NOMEM, at_byte(in, in->pos), "out of memory reading the .npy header");
  size_t base = in->pos;
  if (src_read(in, text, hlen) != hlen) {
    tpu_free(text);
    return TPU_FAIL(d, TPU_ERR_PARSE, at_byte(in, in->pos),
                    "truncated .npy file (the header of %u bytes is cut short)", (unsigned)hlen);
  }
  text[hlen] = 0;
  const char *nul = memchr(text, 0, hlen);
  if (nul) {
    size_t off = base + (size_t)(nul - text);
    tpu_free(text);
    return TPU_FAIL(d, TPU_ERR_PARSE, at_byte(in, off), "bad .npy header: contains a NUL byte");
  }
  hdr h = {text, text, text + hlen, in, base, d};
  tpu_dtype dt = TPU_F32;
  int swap = 0, fortran = 0, rank = 0;
  int64_t dims[TPU_MAX_RANK];
  tpu_status s = parse_header(&h, &dt, &swap, &fortran, &rank, dims);
  tpu_free(text);
  if (s != TPU_OK) return s;

  /* Check the size against the file before allocating anything that large. */
  size_t data_at = in->pos;
  int ok;
  int64_t numel = tpu_dims_numel(rank, dims, &ok);
  size_t need;
  if (!ok || !tpu_mul_ok((size_t)numel, tpu_dtype_size(dt), &need) || need > (size_t)INT64_MAX)
    return TPU_FAIL(d, TPU_ERR_LIMIT, at_byte(in, base), "bad .npy header: the array's size overflows");
  uint64_t have;
  if (src_left(in, &have)) {
    if (have < need)
      return TPU_FAIL(d, TPU_ERR_PARSE, at_byte(in, data_at + have),
                      "truncated .npy file: the shape needs %zu data bytes, the file has %llu", need,
                      (unsigned long long)have);
    if (have > need)
      return TPU_FAIL(d, TPU_ERR_PARSE, at_byte(in, data_at + need),
                      ".npy size mismatch: the shape needs %zu data bytes, the file has %llu", need,
                      (unsigned long long)have);
  }
  tpu_tensor raw;
  s = tpu_tensor_alloc_uninit(&raw, dt, rank, dims, d);
  if (s != TPU_OK) {
    char why[200] = "";
    if (d) snprintf(why, sizeof why, "%.150s", d->msg);
    return TPU_FAIL(d, s, at_byte(in, data_at), "%s (the array needs %zu bytes)",
                    s == TPU_ERR_NOMEM ? "the host has not the memory for this array" : why, need);
  }
  if (src_read(in, raw.data, need) != need) {
    tpu_tensor_free(&raw);
    return TPU_FAIL(d, TPU_ERR_PARSE, at_byte(in, in->pos), "truncated .npy file: data cut short");
  }
  if (!src_at_end(in)) {
    tpu_tensor_free(&raw);
    return TPU_FAIL(d, TPU_ERR_PARSE, at_byte(in, in->pos), ".npy size mismatch: bytes after the data");
  }
  if (swap) { /* a complex element swaps as two floats */
    size_t parts = tpu_dtype_is_complex(dt) ? 2 : 1;
    swap_bytes(raw.data, (size_t)numel * parts, tpu_dtype_size(dt) / parts);
  }
  if (dt == TPU_PRED)
    for (size_t i = 0; i < need; i++) ((unsigned char *)raw.data)[i] = ((unsigned char *)raw.data)[i] != 0;
  if (fortran && rank > 1 && numel > 0) {
    tpu_tensor c;
    s = tpu_tensor_alloc_uninit(&c, dt, rank, dims, d);
    if (s != TPU_OK) {
      tpu_tensor_free(&raw);
      return TPU_FAIL(d, s, at_byte(in, data_at), "the host has not the memory to reorder this Fortran-order array "
                      "(%zu bytes)", need);
    }
    fortran_to_c(raw.data, c.data, rank, dims, tpu_dtype_size(dt), numel);
    tpu_tensor_free(&raw);
    raw = c;
  }
  *out = raw;
  return TPU_OK;
}

tpu_status tpu_npy_read(const char *path, tpu_tensor *out, tpu_diag *d) {
  memset(out, 0, sizeof *out);
  npy_src in = {NULL, NULL, 0, 0, path};
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
    return TPU_FAIL(d, TPU_ERR_IO, at_byte(&in, 0), "cannot read: it is a directory");
  in.f = fopen(path, "rb");
  if (!in.f) return TPU_FAIL(d, TPU_ERR_IO, at_byte(&in, 0), "cannot open: %s", strerror(errno));
  tpu_status s = read_body(&in, out, d);
  if (s == TPU_OK && ferror(in.f)) s = TPU_FAIL(d, TPU_ERR_IO, at_byte(&in, in.pos), "cannot read: %s", strerror(errno));
  fclose(in.f);
  if (s != TPU_OK) {
    tpu_tensor_free(out);
    memset(out, 0, sizeof *out);
  }
  return s;
}

tpu_status tpu_npy_read_mem(const char *name, const void *data, size_t len, tpu_tensor *out, tpu_diag *d) {
  memset(out, 0, sizeof *out);
  npy_src in = {NULL, data, len, 0, name};
  tpu_status s = read_body(&in, out, d);
  if (s != TPU_OK) memset(out, 0, sizeof *out);
  return s;
}

/* ---- writer */

/* Writes the elements [i0, i0 + n) converted to the file representation. */
static void convert_chunk(const tpu_tensor *t, size_t i0, size_t n, unsigned char *buf,
                          size_t fsize) {
  const unsigned char *src = (const unsigned char *)t->data;
  if (t->dtype == TPU_BF16) {
    for (size_t i = 0; i < n; i++) {
      tpu_bf16 b;
      memcpy(&b, src + (i0 + i) * 2, 2);
      float v = tpu_bf16_to_f32(b);
      memcpy(buf + i * 4, &v, 4);
    }
  } else if (tpu_dtype_is_f8(t->dtype)) {
    for (size_t i = 0; i < n; i++) {
      tpu_f8 b = {src[i0 + i]};
      float v = tpu_f8_to_f32(b, t->dtype == TPU_F8E4M3FN);
      memcpy(buf + i * 4, &v, 4);
    }
  } else if (t->dtype == TPU_PRED) {
    for (size_t i = 0; i < n; i++) buf[i] = src[i0 + i] != 0;
  } else {
    memcpy(buf, src + i0 * fsize, n * fsize);
  }
  if (!host_is_le()) {
    size_t parts = tpu_dtype_is_complex(t->dtype) ? 2 : 1;
    swap_bytes(buf, n * parts, fsize / parts);
  }
}

static tpu_status write_file(FILE *f, const tpu_tensor *t, const char *path, tpu_diag *d) {
  tpu_loc at = {path, 0, 0};
  int wide = t->dtype == TPU_BF16 || tpu_dtype_is_f8(t->dtype); /* written as f32 */
  const char *descr = wide ? "<f4" : tpu_dtype_npy(t->dtype);
  size_t fsize = wide ? 4 : tpu_dtype_size(t->dtype);
  char dict[1024];
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int i = 0; i < t->rank; i++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
  n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", t->rank == 1 ? "," : "");
  /* Pad with spaces so magic + version + length + header (ending in '\n') is a multiple of
   * 64 bytes, as NumPy does. */
  size_t total = 10 + (size_t)n + 1;
  size_t pad = (64 - total % 64) % 64;
  size_t hlen = (size_t)n + pad + 1;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                           (unsigned char)(hlen >> 8)};
  fwrite(pre, 1, 10, f);
  fwrite(dict, 1, (size_t)n, f);
  for (size_t i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  int64_t numel = tpu_tensor_numel(t);
  if (numel > 0) {
    unsigned char *buf = tpu_malloc(NPY_CHUNK * fsize);
    if (!buf) return TPU_FAIL(d, TPU_ERR_NOMEM, at, "out of memory writing .npy");
    for (size_t i0 = 0; i0 < (size_t)numel; i0 += NPY_CHUNK) {
      size_t cnt = (size_t)numel - i0 < NPY_CHUNK ? (size_t)numel - i0 : NPY_CHUNK;
      convert_chunk(t, i0, cnt, buf, fsize);
      if (fwrite(buf, fsize, cnt, f) != cnt) break;
    }
    tpu_free(buf);
  }
  if (ferror(f)) return TPU_FAIL(d, TPU_ERR_IO, at, "write failed: %s", strerror(errno));
  return TPU_OK;
}

tpu_status tpu_npy_write(const char *path, const tpu_tensor *t, tpu_diag *d) {
  tpu_loc at = {path, 0, 0};
  if (!tpu_dtype_is_array(t->dtype) ||
      (t->dtype != TPU_BF16 && !tpu_dtype_is_f8(t->dtype) && !tpu_dtype_npy(t->dtype)[0]))
    return TPU_FAIL(d, TPU_ERR_ARG, at, "cannot write a %s as .npy", tpu_dtype_name(t->dtype));
  if (t->rank < 0 || t->rank > TPU_MAX_RANK)
    return TPU_FAIL(d, TPU_ERR_ARG, at, "rank %d out of range", t->rank);
  int ok;
  int64_t numel = tpu_dims_numel(t->rank, t->dims, &ok);
  if (!ok || (size_t)numel * tpu_dtype_size(t->dtype) > t->nbytes || (numel && !t->data))
    return TPU_FAIL(d, TPU_ERR_ARG, at, "tensor data does not match its shape");
  char *tmp;
  FILE *f;
  TPU_TRY(tpu_file_begin(path, &tmp, &f, d));
  tpu_status s = write_file(f, t, path, d);
  tpu_status c = tpu_file_commit(path, tmp, f, s == TPU_OK, d);
  return s != TPU_OK ? s : c;
}
