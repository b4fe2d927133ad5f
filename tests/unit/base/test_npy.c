/* .npy I/O: NumPy-made fixtures, round trips of every dtype, malformed files, allocation faults. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/bf16.h"
#include "base/npy.h"
#include "check.h"

#define FIX "tests/unit/base/npy/"

static char g_dir[64];

static void tmp_path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

static int file_exists(const char *p) { return access(p, F_OK) == 0; }

/* Whether g_dir holds a file whose name starts with `prefix` (a left-over temporary). */
static int leftover(const char *prefix) {
  DIR *dir = opendir(g_dir);
  if (!dir) return 0;
  int found = 0;
  struct dirent *e;
  while ((e = readdir(dir)))
    if (!strncmp(e->d_name, prefix, strlen(prefix))) found = 1;
  closedir(dir);
  return found;
}

static size_t read_all(const char *p, unsigned char *buf, size_t cap) {
  FILE *f = fopen(p, "rb");
  if (!f) return 0;
  size_t n = fread(buf, 1, cap, f);
  fclose(f);
  return n;
}

static void write_raw(const char *p, const void *bytes, size_t n) {
  FILE *f = fopen(p, "wb");
  CHECK(f != NULL);
  if (!f) return;
  fwrite(bytes, 1, n, f);
  fclose(f);
}

/* A .npy file with the given version, header dict text (padded as NumPy pads) and data. */
static void write_npy(const char *p, int major, const char *dict, const void *data, size_t n) {
  unsigned char buf[4096];
  size_t dl = strlen(dict), pre = major == 1 ? 10 : 12;
  size_t hlen = dl + 1 + (64 - (pre + dl + 1) % 64) % 64;
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)major;
  buf[7] = 0;
  buf[8] = (unsigned char)(hlen & 0xff);
  buf[9] = (unsigned char)(hlen >> 8);
  buf[10] = buf[11] = 0;
  memset(buf + pre, ' ', hlen);
  memcpy(buf + pre, dict, dl);
  buf[pre + hlen - 1] = '\n';
  if (n) memcpy(buf + pre + hlen, data, n);
  write_raw(p, buf, pre + hlen + n);
}

static void expect_read_error(const char *p, tpu_status want, const char *substr) {
  tpu_tensor t;
  tpu_diag d;
  tpu_status s = tpu_npy_read(p, &t, &d);
  CHECK_EQ_INT(s, want);
  if (s == TPU_OK) {
    tpu_tensor_free(&t);
    return;
  }
  char msg[1200];
  tpu_diag_format(&d, msg, sizeof msg);
  if (strncmp(msg, p, strlen(p)) != 0 || !strstr(msg, substr)) {
    fprintf(stderr, "  got:  %s\n  want: %s: ...%s...\n", msg, p, substr);
    CHECK(0);
  }
  CHECK(t.data == NULL && t.rank == 0);
  tpu_tensor_free(&t);
}

static tpu_status read_ok(const char *p, tpu_tensor *t) {
  tpu_diag d;
  tpu_status s = tpu_npy_read(p, t, &d);
  if (s != TPU_OK) {
    char msg[1200];
    tpu_diag_format(&d, msg, sizeof msg);
    fprintf(stderr, "%s\n", msg);
  }
  return s;
}

static void test_fixtures(void) {
  tpu_tensor t;
  if (read_ok(FIX "f32_2x3.npy", &t) == TPU_OK) {
    CHECK_EQ_INT(t.dtype, TPU_F32);
    CHECK(t.rank == 2 && t.dims[0] == 2 && t.dims[1] == 3);
    for (int i = 0; i < 6; i++) CHECK(tpu_tensor_get_f64(&t, i) == 0.5 * i - 1);
    /* Our writer produces the very bytes np.save wrote. */
    char p[128];
    tmp_path(p, sizeof p, "mine.npy");
    tpu_diag d;
    CHECK_EQ_INT(tpu_npy_write(p, &t, &d), TPU_OK);
    unsigned char a[512], b[512];
    size_t na = read_all(p, a, sizeof a), nb = read_all(FIX "f32_2x3.npy", b, sizeof b);
    CHECK(na == nb && na > 0 && memcmp(a, b, na) == 0);
    remove(p);
    tpu_tensor_free(&t);
  }
  if (read_ok(FIX "i16_be.npy", &t) == TPU_OK) {
    const int16_t want[] = {1, -2, 300, -32768};
    CHECK(t.dtype == TPU_S16 && t.rank == 1 && t.dims[0] == 4);
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(tpu_tensor_get_i64(&t, i), want[i]);
    tpu_tensor_free(&t);
  }
  if (read_ok(FIX "f64_fortran.npy", &t) == TPU_OK) {
    CHECK(t.dtype == TPU_F64 && t.rank == 3 && t.dims[0] == 2 && t.dims[1] == 3 && t.dims[2] == 4);
    int bad = 0;
    for (int i = 0; i < 24; i++) bad += tpu_tensor_get_f64(&t, i) != i;
    CHECK_EQ_INT(bad, 0);
    tpu_tensor_free(&t);
  }
  if (read_ok(FIX "bool_0d.npy", &t) == TPU_OK) {
    CHECK(t.dtype == TPU_PRED && t.rank == 0 && t.nbytes == 1);
    CHECK_EQ_INT(tpu_tensor_get_i64(&t, 0), 1);
    tpu_tensor_free(&t);
  }
  if (read_ok(FIX "u8_empty.npy", &t) == TPU_OK) {
    CHECK(t.dtype == TPU_U8 && t.rank == 2 && t.dims[0] == 0 && t.dims[1] == 5 && t.nbytes == 0);
    tpu_tensor_free(&t);
  }
  if (read_ok(FIX "f16_v2.npy", &t) == TPU_OK) {
    CHECK(t.dtype == TPU_F16 && t.dims[0] == 3);
    CHECK(tpu_tensor_get_f64(&t, 0) == 0.5 && tpu_tensor_get_f64(&t, 1) == -1.5);
    CHECK(tpu_tensor_get_f64(&t, 2) == 65504.0);
    tpu_tensor_free(&t);
  }
  if (read_ok(FIX "u64_v3.npy", &t) == TPU_OK) {
    CHECK(t.dtype == TPU_U64 && t.dims[0] == 2);
    CHECK(((uint64_t *)t.data)[0] == UINT64_MAX && ((uint64_t *)t.data)[1] == 7);
    tpu_tensor_free(&t);
  }
  if (read_ok(FIX "f64_be.npy", &t) == TPU_OK) {
    CHECK(t.dtype == TPU_F64 && tpu_tensor_get_f64(&t, 0) == 1.25);
    CHECK(tpu_tensor_get_f64(&t, 1) == -3e300);
    tpu_tensor_free(&t);
  }
  if (read_ok(FIX "i64_2x1x2.npy", &t) == TPU_OK) {
    CHECK(t.dtype == TPU_S64 && t.rank == 3 && t.dims[1] == 1);
    for (int i = 0; i < 4; i++) CHECK(tpu_tensor_get_i64(&t, i) == -(int64_t)i * 1000000000000);
    tpu_tensor_free(&t);
  }
}

/* Writes and reads back a 2x3 array of every array dtype (and 0-d, empty, bf16); bf16 and
 * the float8 types come back as f32 holding their values (NaN where -65504 overflows e4m3fn). */
static void test_round_trips(void) {
  const double fvals[] = {0.0, -1.5, 3.25, 1e-3, -65504.0, 0.1};
  const int64_t ivals[] = {0, -1, 127, -128, 1, 42};
  for (int dt = 0; dt < TPU_DTYPE_COUNT; dt++) {
    if (!tpu_dtype_is_array((tpu_dtype)dt)) continue;
    int64_t dims[2] = {2, 3};
    tpu_tensor t, r;
    tpu_diag d;
    CHECK_EQ_INT(tpu_tensor_alloc(&t, (tpu_dtype)dt, 2, dims, &d), TPU_OK);
    for (int i = 0; i < 6; i++) {
      if (tpu_dtype_is_float((tpu_dtype)dt)) tpu_tensor_set_f64(&t, i, fvals[i]);
      else if (tpu_dtype_is_signed((tpu_dtype)dt)) tpu_tensor_set_i64(&t, i, ivals[i]);
      else tpu_tensor_set_i64(&t, i, ivals[i] < 0 ? -ivals[i] : ivals[i]);
    }
    if (dt == TPU_U64) ((uint64_t *)t.data)[5] = UINT64_MAX;
    if (dt == TPU_S64) ((int64_t *)t.data)[5] = INT64_MIN;
    if (dt == TPU_PRED) ((uint8_t *)t.data)[2] = 7; /* any nonzero byte is true */
    char p[128];
    tmp_path(p, sizeof p, "rt.npy");
    CHECK_EQ_INT(tpu_npy_write(p, &t, &d), TPU_OK);
    CHECK(file_exists(p));
    if (read_ok(p, &r) == TPU_OK) {
      int wide = dt == TPU_BF16 || tpu_dtype_is_f8((tpu_dtype)dt);
      tpu_dtype want = wide ? TPU_F32 : (tpu_dtype)dt;
      if (dt == TPU_S4 || dt == TPU_U4) want = dt == TPU_S4 ? TPU_S8 : TPU_U8; /* NumPy has no 4-bit type */
      CHECK_EQ_INT(r.dtype, want);
      CHECK(r.rank == 2 && r.dims[0] == 2 && r.dims[1] == 3);
      for (int i = 0; i < 6; i++) {
        if (dt == TPU_PRED) CHECK_EQ_INT(tpu_tensor_get_i64(&r, i), tpu_tensor_get_i64(&t, i) != 0);
        else if (tpu_dtype_is_float((tpu_dtype)dt) && isnan(tpu_tensor_get_f64(&t, i)))
          CHECK(isnan(tpu_tensor_get_f64(&r, i)));
        else if (tpu_dtype_is_float((tpu_dtype)dt))
          CHECK(tpu_tensor_get_f64(&r, i) == tpu_tensor_get_f64(&t, i));
        else if (dt != TPU_U64) CHECK_EQ_INT(tpu_tensor_get_i64(&r, i), tpu_tensor_get_i64(&t, i));
      }
      if (dt == TPU_U64) CHECK(((uint64_t *)r.data)[5] == UINT64_MAX);
      if (!wide && dt != TPU_PRED) CHECK(memcmp(r.data, t.data, t.nbytes) == 0);
      tpu_tensor_free(&r);
    }
    tpu_tensor_free(&t);
  }
  /* bf16 widening is exact for every bit pattern, NaNs included. */
  {
    int64_t n = 65536;
    tpu_tensor t, r;
    tpu_diag d;
    CHECK_EQ_INT(tpu_tensor_alloc(&t, TPU_BF16, 1, &n, &d), TPU_OK);
    for (int i = 0; i < 65536; i++) ((uint16_t *)t.data)[i] = (uint16_t)i;
    char p[128];
    tmp_path(p, sizeof p, "bf16.npy");
    CHECK_EQ_INT(tpu_npy_write(p, &t, &d), TPU_OK);
    if (read_ok(p, &r) == TPU_OK) {
      int bad = 0;
      for (int i = 0; i < 65536; i++) bad += ((uint32_t *)r.data)[i] != (uint32_t)i << 16;
      CHECK_EQ_INT(bad, 0);
      tpu_tensor_free(&r);
    }
    remove(p);
    tpu_tensor_free(&t);
  }
  /* 0-d and empty arrays. */
  {
    tpu_tensor t, r;
    tpu_diag d;
    CHECK_EQ_INT(tpu_tensor_alloc(&t, TPU_F64, 0, NULL, &d), TPU_OK);
    ((double *)t.data)[0] = -7.5;
    char p[128];
    tmp_path(p, sizeof p, "scalar.npy");
    CHECK_EQ_INT(tpu_npy_write(p, &t, &d), TPU_OK);
    if (read_ok(p, &r) == TPU_OK) {
      CHECK(r.rank == 0 && r.dtype == TPU_F64 && tpu_tensor_get_f64(&r, 0) == -7.5);
      tpu_tensor_free(&r);
    }
    tpu_tensor_free(&t);
    int64_t dims[3] = {4, 0, 2};
    CHECK_EQ_INT(tpu_tensor_alloc(&t, TPU_S32, 3, dims, &d), TPU_OK);
    CHECK_EQ_INT(tpu_npy_write(p, &t, &d), TPU_OK);
    if (read_ok(p, &r) == TPU_OK) {
      CHECK(r.rank == 3 && r.dims[0] == 4 && r.dims[1] == 0 && r.dims[2] == 2 && r.nbytes == 0);
      tpu_tensor_free(&r);
    }
    remove(p);
    tpu_tensor_free(&t);
  }
}

static void test_malformed(void) {
  char p[128];
  tmp_path(p, sizeof p, "bad.npy");
  const float four[4] = {1, 2, 3, 4};

  write_raw(p, "", 0);
  expect_read_error(p, TPU_ERR_PARSE, "not a .npy file (bad magic)");
  write_raw(p, "\x92NUMPY\x01\x00\x10\x00", 10);
  expect_read_error(p, TPU_ERR_PARSE, "not a .npy file (bad magic)");
  write_raw(p, "\x93NUMPY\x01", 7);
  expect_read_error(p, TPU_ERR_PARSE, "truncated .npy file (no version)");
  write_raw(p, "\x93NUMPY\x01\x00\x10", 9);
  expect_read_error(p, TPU_ERR_PARSE, "truncated .npy file (no header length)");
  write_raw(p, "\x93NUMPY\x04\x00\x10\x00\x00\x00", 12);
  expect_read_error(p, TPU_ERR_UNSUPPORTED, "unsupported .npy format version 4.0");
  write_raw(p, "\x93NUMPY\x01\x00\x40\x00{'descr'", 17);
  expect_read_error(p, TPU_ERR_PARSE, "truncated .npy file (the header of 64 bytes is cut short)");
  write_raw(p, "\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12);
  expect_read_error(p, TPU_ERR_LIMIT, "exceeds the limit");

  write_npy(p, 1, "{'descr': '<f4', 'fortran_order': False, }", four, 16);
  expect_read_error(p, TPU_ERR_PARSE, "missing key 'shape'");
  write_npy(p, 1, "{'fortran_order': False, 'shape': (4,), }", four, 16);
  expect_read_error(p, TPU_ERR_PARSE, "missing key 'descr'");
  write_npy(p, 1, "{'descr': '<f4', 'shape': (4,), }", four, 16);
  expect_read_error(p, TPU_ERR_PARSE, "missing key 'fortran_order'");
  write_npy(p, 1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (4,), }", four, 16);
  expect_read_error(p, TPU_ERR_PARSE, "'fortran_order' must be True or False");
  write_npy(p, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", four, 16);
  expect_read_error(p, TPU_ERR_PARSE, "unexpected or repeated key 'x'");
  write_npy(p, 1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,)}",
            four, 16);
  expect_read_error(p, TPU_ERR_PARSE, "unexpected or repeated key 'descr'");
  write_npy(p, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': [4], }", four, 16);
  expect_read_error(p, TPU_ERR_PARSE, "'shape' must be a tuple");
  write_npy(p, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }", four, 16);
  expect_read_error(p, TPU_ERR_PARSE, "'shape' must hold non-negative integers");
  write_npy(p, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4 4), }", four, 16);
  expect_read_error(p, TPU_ERR_PARSE, "expected ',' or ')' in 'shape'");
  write_npy(p, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), } junk", four, 16);
  expect_read_error(p, TPU_ERR_PARSE, "unexpected text after the dictionary");
  write_npy(p, 1, "['descr']", four, 16);
  expect_read_error(p, TPU_ERR_PARSE, "expected '{'");
  write_npy(p, 1, "{'descr': '<c32', 'fortran_order': False, 'shape': (1,), }", four, 16);
  expect_read_error(p, TPU_ERR_UNSUPPORTED, "unsupported .npy dtype '<c32'");
  {
    /* complex64 as NumPy lays it out (re, im per element); big-endian swaps each part. */
    const float z[4] = {1.5f, -2.0f, 0.25f, 3.0f};
    unsigned char be[16];
    for (int i = 0; i < 4; i++)
      for (int b = 0; b < 4; b++) be[4 * i + b] = ((const unsigned char *)&z[i])[3 - b];
    const char *dicts[2] = {"{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }",
                            "{'descr': '>c8', 'fortran_order': False, 'shape': (2,), }"};
    for (int k = 0; k < 2; k++) {
      write_npy(p, 1, dicts[k], k ? (const void *)be : (const void *)z, 16);
      tpu_tensor t;
      tpu_diag d;
      CHECK_EQ_INT(tpu_npy_read(p, &t, &d), TPU_OK);
      CHECK_EQ_INT(t.dtype, TPU_C64);
      CHECK(t.rank == 1 && t.dims[0] == 2 && t.nbytes == 16);
      if (t.nbytes == 16) CHECK(memcmp(t.data, z, 16) == 0);
      tpu_tensor_free(&t);
    }
  }
  write_npy(p, 1, "{'descr': '<V2', 'fortran_order': False, 'shape': (2,), }", four, 4);
  expect_read_error(p, TPU_ERR_UNSUPPORTED, "unsupported .npy dtype '<V2'");
  write_npy(p, 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }", four, 16);
  expect_read_error(p, TPU_ERR_UNSUPPORTED, "structured .npy dtypes are not supported");
  write_npy(p, 1, "{'descr': '|f4', 'fortran_order': False, 'shape': (4,), }", four, 16);
  expect_read_error(p, TPU_ERR_PARSE, "descr '|f4' lacks a byte order");
  write_npy(p, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", four, 8);
  expect_read_error(p, TPU_ERR_PARSE, "truncated .npy file: the shape needs 16 data bytes, the file has 8");
  write_npy(p, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", four, 16);
  expect_read_error(p, TPU_ERR_PARSE, ".npy size mismatch: the shape needs 12 data bytes, the file has 16");
  write_npy(p, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }",
            four, 16);
  expect_read_error(p, TPU_ERR_LIMIT, "the array's size overflows");
  write_npy(p, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
            four, 16);
  expect_read_error(p, TPU_ERR_LIMIT, "a dimension overflows int64");
  write_npy(p, 1,
            "{'descr': '<f4', 'fortran_order': False, "
            "'shape': (1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1), }",
            four, 4);
  expect_read_error(p, TPU_ERR_LIMIT, "array rank exceeds the limit of 16");
  write_npy(p, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, }", four, 16);
  expect_read_error(p, TPU_ERR_PARSE, "bad .npy header");
  write_npy(p, 1, "{'descr: '<f4'", four, 16);
  expect_read_error(p, TPU_ERR_PARSE, "bad .npy header");
  expect_read_error("/nonexistent/dir/x.npy", TPU_ERR_IO, "cannot open");
  remove(p);

  /* Python 2's 'L' suffix is refused at the byte it stands on (NumPy on Python 3 never
   * writes it); the error names the file, line 0, the byte offset. */
  write_npy(p, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2L), }", four, 16);
  expect_read_error(p, TPU_ERR_PARSE, ":0:65: error: bad .npy header: expected ',' or ')' in 'shape'");
  /* A header written by hand in another valid style (double quotes, no trailing comma)
   * still reads. */
  write_npy(p, 1, "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 2)}", four, 16);
  tpu_tensor t;
  if (read_ok(p, &t) == TPU_OK) {
    CHECK(t.rank == 2 && t.dims[0] == 2 && tpu_tensor_get_f64(&t, 3) == 4.0);
    tpu_tensor_free(&t);
  }
  remove(p);

  /* Writing: bad tensors and unwritable places fail without leaving files. */
  tpu_tensor tup;
  tpu_diag d;
  CHECK_EQ_INT(tpu_tensor_alloc_tuple(&tup, 0, &d), TPU_OK);
  tmp_path(p, sizeof p, "tuple.npy");
  CHECK_EQ_INT(tpu_npy_write(p, &tup, &d), TPU_ERR_ARG);
  CHECK(!file_exists(p));
  tpu_tensor_free(&tup);
  int64_t n = 4;
  CHECK_EQ_INT(tpu_tensor_alloc(&t, TPU_F32, 1, &n, &d), TPU_OK);
  CHECK_EQ_INT(tpu_npy_write("/nonexistent/dir/x.npy", &t, &d), TPU_ERR_IO);
  CHECK_EQ_STR(d.file, "/nonexistent/dir/x.npy");
  tpu_tensor_free(&t);
}

static void test_alloc_faults(void) {
  /* Reading (Fortran order needs a second buffer). */
  int ok_seen = 0;
  for (long n = 1; n < 100 && !ok_seen; n++) {
    tpu_tensor t;
    tpu_diag d;
    tpu_alloc_fail_after(n);
    tpu_status s = tpu_npy_read(FIX "f64_fortran.npy", &t, &d);
    tpu_alloc_fail_after(0);
    if (s == TPU_OK) {
      ok_seen = 1;
      CHECK(tpu_tensor_get_f64(&t, 23) == 23.0);
    } else {
      CHECK_EQ_INT(s, TPU_ERR_NOMEM);
      CHECK(t.data == NULL);
    }
    tpu_tensor_free(&t);
  }
  CHECK(ok_seen);
  /* Writing over an existing file: a failed write leaves the old file intact. */
  char p[128];
  tmp_path(p, sizeof p, "keep.npy");
  write_raw(p, "old", 3);
  int64_t dims[2] = {3, 5};
  tpu_tensor t;
  tpu_diag d;
  CHECK_EQ_INT(tpu_tensor_alloc(&t, TPU_BF16, 2, dims, &d), TPU_OK);
  ok_seen = 0;
  for (long n = 1; n < 100 && !ok_seen; n++) {
    tpu_alloc_fail_after(n);
    tpu_status s = tpu_npy_write(p, &t, &d);
    tpu_alloc_fail_after(0);
    CHECK(!leftover("keep.npy.tmp"));
    if (s == TPU_OK) {
      ok_seen = 1;
    } else {
      unsigned char buf[8];
      CHECK_EQ_INT(s, TPU_ERR_NOMEM);
      CHECK(read_all(p, buf, sizeof buf) == 3 && memcmp(buf, "old", 3) == 0);
    }
  }
  CHECK(ok_seen);
  tpu_tensor r;
  if (read_ok(p, &r) == TPU_OK) {
    CHECK(r.dtype == TPU_F32 && r.dims[1] == 5);
    tpu_tensor_free(&r);
  }
  remove(p);
  tpu_tensor_free(&t);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/tpusim_npy_XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_fixtures();
  test_round_trips();
  test_malformed();
  test_alloc_faults();
  char p[128];
  tmp_path(p, sizeof p, "rt.npy");
  remove(p);
  tmp_path(p, sizeof p, "scalar.npy");
  remove(p);
  rmdir(g_dir);
  CHECK_DONE();
}
