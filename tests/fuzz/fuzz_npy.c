/* libFuzzer target for the .npy reader (src/base/npy.c): any bytes must end in a clean
 * error located at NAME:0:BYTE within the input, printed as one line without a raw control
 * byte, or an array whose size matches its shape
 * and which writes back and reads back to the same bytes. Built by scripts/fuzz (CMake
 * option TPU_FUZZ). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what, const tpu_diag *d) {
  fprintf(stderr, "fuzz_npy: %s (%s:%d:%d: %s)\n", what, d->file, d->line, d->col, d->msg);
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tpu_diag d;
  memset(&d, 0, sizeof d);
  tpu_tensor t;
  if (tpu_npy_read_mem("fuzz.npy", data, size, &t, &d) != TPU_OK) {
    if (strcmp(d.file, "fuzz.npy") || d.line != 0 || d.col < 0 || (size_t)d.col > size)
      die("an error not located at a byte of the input", &d);
    char line[2048];
    tpu_diag_format(&d, line, sizeof line);
    if (!d.msg[0]) die("an empty message", &d);
    for (const char *c = line; *c; c++) /* echoed bytes are escaped: one printable line */
      if ((unsigned char)*c < 0x20 || *c == 0x7f) die("a raw control byte in the error line", &d);
    if (t.data || t.nbytes) die("a failed read left data", &d);
    return 0;
  }
  int ok;
  int64_t numel = tpu_dims_numel(t.rank, t.dims, &ok);
  if (!ok || (size_t)numel * tpu_dtype_size(t.dtype) != t.nbytes) die("the array's bytes do not match its shape", &d);
  /* Round trip through the writer (a file: the writer is atomic by rename). */
  char path[64];
  snprintf(path, sizeof path, "/tmp/fuzz_npy.%d.npy", (int)getpid());
  if (t.dtype != TPU_BF16 && numel <= (1 << 16)) {
    if (tpu_npy_write(path, &t, &d) != TPU_OK) die("the writer refused an array the reader gave", &d);
    tpu_tensor u;
    if (tpu_npy_read(path, &u, &d) != TPU_OK) die("the reader refused what the writer wrote", &d);
    if (u.dtype != t.dtype || u.rank != t.rank || u.nbytes != t.nbytes ||
        (t.nbytes && memcmp(u.data, t.data, t.nbytes)))
      die("the round trip changed the array", &d);
    tpu_tensor_free(&u);
    remove(path);
  }
  tpu_tensor_free(&t);
  return 0;
}
