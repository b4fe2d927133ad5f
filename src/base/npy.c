/* .npy reader (v1-v3, both byte orders, C or Fortran order) and atomic v1.0 writer. */
#include "base/npy.h"

#include "base/file.h"

#include <errno.h>
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

/* ---- header: a Python dict literal such as
 * {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } */

typedef struct {
  const char *p, *end;
  const char *path;
  tpu_diag *d;
} hdr;

static void hskip(hdr *h) {
  while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n' || *h->p == '\r'))
    h->p++;
}

static tpu_status hbad(hdr *h, const char *what) {
  tpu_loc l = {h->path, 0, 0};
  return TPU_FAIL(h->d, TPU_ERR_PARSE, l, "bad .npy header: %s", what);
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
    int64_t v = 0;
    while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
      int dig = *h->p++ - '0';
      if (v > (INT64_MAX - dig) / 10) {
        tpu_loc l = {h->path, 0, 0};
        return TPU_FAIL(h->d, TPU_ERR_LIMIT, l, "bad .npy header: a dimension overflows int64");
      }
      v = v * 10 + dig;
    }
    if (h->p < h->end && *h->p == 'L') h->p++; /* Python 2 long suffix */
    if (*rank >= TPU_MAX_RANK) {
      tpu_loc l = {h->path, 0, 0};
      return TPU_FAIL(h->d, TPU_ERR_LIMIT, l, "array rank exceeds the limit of %d", TPU_MAX_RANK);
    }
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
static tpu_status parse_descr(hdr *h, const char *s, tpu_dtype *dt, int *swap) {
  tpu_loc l = {h->path, 0, 0};
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
    TPU_TRY(hstring(h, key, sizeof key));
    hskip(h);
    if (h->p >= h->end || *h->p != ':') return hbad(h, "expected ':' after a key");
    h->p++;
    hskip(h);
    if (!strcmp(key, "descr") && !have_descr) {
      if (h->p < h->end && *h->p == '[') {
        tpu_loc l = {h->path, 0, 0};
        return TPU_FAIL(h->d, TPU_ERR_UNSUPPORTED, l, "structured .npy dtypes are not supported");
      }
      TPU_TRY(hstring(h, val, sizeof val));
      TPU_TRY(parse_descr(h, val, dt, swap));
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
      char what[80];
      snprintf(what, sizeof what, "unexpected or repeated key '%s'", key);
      return hbad(h, what);
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
  if (!have_descr) return hbad(h, "missing key 'descr'");
  if (!have_fortran) return hbad(h, "missing key 'fortran_order'");
  if (!have_shape) return hbad(h, "missing key 'shape'");
  return TPU_OK;
}

/* Copies src (laid out in Fortran order with dims `dims`) into dst (C order, same dims). */
static void fortran_to_c(const unsigned char *src, unsigned char *dst, int rank,
                         const int64_t *dims, size_t size, int64_t numel) {
  int64_t idx[TPU_MAX_RANK] = {0}, fstride[TPU_MAX_RANK];
  int64_t s = 1;
  for (int k = 0; k < rank; k++) {
    fstride[k] = s;
    s *= dims[k];
  }
  int64_t off = 0; /* Fortran offset of the current C-order index */
  for (int64_t i = 0; i < numel; i++) {
    memcpy(dst + (size_t)i * size, src + (size_t)off * size, size);
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

static tpu_status read_body(FILE *f, const char *path, tpu_tensor *out, tpu_diag *d) {
  tpu_loc at = {path, 0, 0};
  unsigned char pre[12];
  size_t got = fread(pre, 1, 8, f);
  if (got < 6 || memcmp(pre, "\x93NUMPY", 6) != 0)
    return TPU_FAIL(d, TPU_ERR_PARSE, at, "not a .npy file (bad magic)");
  if (got < 8) return TPU_FAIL(d, TPU_ERR_PARSE, at, "truncated .npy file (no version)");
  int major = pre[6], minor = pre[7];
  if (major < 1 || major > 3 || minor != 0)
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, at, "unsupported .npy format version %d.%d", major,
                    minor);
  size_t lenbytes = major == 1 ? 2 : 4;
  if (fread(pre + 8, 1, lenbytes, f) != lenbytes)
    return TPU_FAIL(d, TPU_ERR_PARSE, at, "truncated .npy file (no header length)");
  uint32_t hlen = major == 1 ? (uint32_t)(pre[8] | pre[9] << 8) : le32(pre + 8);
  if (hlen > NPY_MAX_HEADER)
    return TPU_FAIL(d, TPU_ERR_LIMIT, at, ".npy header of %u bytes exceeds the limit of %u",
                    (unsigned)hlen, NPY_MAX_HEADER);
  char *text = tpu_malloc(hlen + 1);
  if (!text) return TPU_FAIL(d, TPU_ERR_NOMEM, at, "out of memory reading the .npy header");
  if (fread(text, 1, hlen, f) != hlen) {
    tpu_free(text);
    return TPU_FAIL(d, TPU_ERR_PARSE, at, "truncated .npy file (header cut short)");
  }
  text[hlen] = 0;
  if (memchr(text, 0, hlen)) {
    tpu_free(text);
    return TPU_FAIL(d, TPU_ERR_PARSE, at, "bad .npy header: contains a NUL byte");
  }
  hdr h = {text, text + hlen, path, d};
  tpu_dtype dt = TPU_F32;
  int swap = 0, fortran = 0, rank = 0;
  int64_t dims[TPU_MAX_RANK];
  tpu_status s = parse_header(&h, &dt, &swap, &fortran, &rank, dims);
  tpu_free(text);
  if (s != TPU_OK) return s;

  /* Check the size against the file before allocating anything that large. */
  int ok;
  int64_t numel = tpu_dims_numel(rank, dims, &ok);
  size_t need;
  if (!ok || !tpu_mul_ok((size_t)numel, tpu_dtype_size(dt), &need))
    return TPU_FAIL(d, TPU_ERR_LIMIT, at, "array size overflows");
  long pos = ftell(f);
  struct stat st;
  if (pos >= 0 && fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) {
    uint64_t have = (uint64_t)st.st_size - (uint64_t)pos;
    if (have < need)
      return TPU_FAIL(d, TPU_ERR_PARSE, at,
                      "truncated .npy file: shape needs %zu data bytes, file has %llu", need,
                      (unsigned long long)have);
    if (have > need)
      return TPU_FAIL(d, TPU_ERR_PARSE, at,
                      ".npy size mismatch: shape needs %zu data bytes, file has %llu", need,
                      (unsigned long long)have);
  }
  tpu_tensor raw;
  TPU_TRY(tpu_tensor_alloc(&raw, dt, rank, dims, d));
  if (fread(raw.data, 1, need, f) != need) {
    tpu_tensor_free(&raw);
    return TPU_FAIL(d, TPU_ERR_PARSE, at, "truncated .npy file: data cut short");
  }
  if (fgetc(f) != EOF) {
    tpu_tensor_free(&raw);
    return TPU_FAIL(d, TPU_ERR_PARSE, at, ".npy size mismatch: bytes after the data");
  }
  if (swap) { /* a complex element swaps as two floats */
    size_t parts = tpu_dtype_is_complex(dt) ? 2 : 1;
    swap_bytes(raw.data, (size_t)numel * parts, tpu_dtype_size(dt) / parts);
  }
  if (dt == TPU_PRED)
    for (size_t i = 0; i < need; i++) ((unsigned char *)raw.data)[i] = ((unsigned char *)raw.data)[i] != 0;
  if (fortran && rank > 1 && numel > 0) {
    tpu_tensor c;
    s = tpu_tensor_alloc(&c, dt, rank, dims, d);
    if (s != TPU_OK) {
      tpu_tensor_free(&raw);
      return s;
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
  FILE *f = fopen(path, "rb");
  if (!f) {
    tpu_loc at = {path, 0, 0};
    return TPU_FAIL(d, TPU_ERR_IO, at, "cannot open: %s", strerror(errno));
  }
  tpu_status s = read_body(f, path, out, d);
  fclose(f);
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
  const char *descr = t->dtype == TPU_BF16 ? "<f4" : tpu_dtype_npy(t->dtype);
  size_t fsize = t->dtype == TPU_BF16 ? 4 : tpu_dtype_size(t->dtype);
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
  if (!tpu_dtype_is_array(t->dtype) || (t->dtype != TPU_BF16 && !tpu_dtype_npy(t->dtype)[0]))
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
