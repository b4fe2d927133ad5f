/* Reading a program that holds Pallas kernels: decodes their Mosaic bytecode with python3 and
 * jax (python/tpusim/pallas_decode.py) before parsing, so that `tpusim run` takes JAX's HLO. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "hlo/hlo.h"
#include "pallas.h"

#ifndef TPU_PALLAS_DECODER
#define TPU_PALLAS_DECODER "pallas_decode.py"
#endif

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *b = tpu_malloc(cap + 1);
  while (b) {
    if (n == cap) {
      char *nb = cap < ((size_t)1 << 31) ? tpu_realloc(b, cap * 2 + 1) : NULL;
      if (!nb) {
        tpu_free(b);
        b = NULL;
        break;
      }
      b = nb;
      cap *= 2;
    }
    size_t r = fread(b + n, 1, cap - n, f);
    n += r;
    if (!r) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (b && bad) { /* the caller parses the file the usual way, which reports the error */
    tpu_free(b);
    b = NULL;
  }
  if (b) b[n] = 0;
  *len = n;
  return b;
}

static size_t count(const char *s, const char *pat) {
  size_t n = 0;
  for (const char *p = s; (p = strstr(p, pat)) != NULL; p += strlen(pat)) n++;
  return n;
}

/* Runs the decoder on path into out; 0 on success, else fills msg. */
static int decode(const char *path, const char *out, char *msg, size_t nmsg) {
  const char *script = getenv("TPUSIM_PALLAS_DECODER");
  if (!script || !*script) script = TPU_PALLAS_DECODER;
  char errf[] = "/tmp/tpusim-pallas-err-XXXXXX";
  int efd = mkstemp(errf);
  if (efd < 0) {
    snprintf(msg, nmsg, "cannot make a temporary file: %s", strerror(errno));
    return -1;
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    close(efd);
    unlink(errf);
    snprintf(msg, nmsg, "cannot start python3: %s", strerror(errno));
    return -1;
  }
  if (pid == 0) {
    dup2(efd, 2);
    execlp("python3", "python3", script, path, out, (char *)NULL);
    _exit(127);
  }
  close(efd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) break;
  size_t n = 0;
  char *err = slurp(errf, &n);
  unlink(errf);
  int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  if (rc == 0) {
    tpu_free(err);
    return 0;
  }
  /* The decoder's last line says what went wrong. */
  const char *last = "";
  if (err) {
    while (n && (err[n - 1] == '\n' || err[n - 1] == '\r')) err[--n] = 0;
    char *nl = strrchr(err, '\n');
    last = nl ? nl + 1 : err;
  }
  if (rc == 127)
    snprintf(msg, nmsg, "decoding its Pallas kernels needs python3 with jax (apt-get install python3; pip install jax)");
  else if (rc == 3)
    snprintf(msg, nmsg, "%s", last);
  else
    snprintf(msg, nmsg, "decoding its Pallas kernels with %s failed (it needs python3 with jax: pip install jax): %s",
             script, last);
  tpu_free(err);
  return -1;
}

tpu_status tpu_cli_parse_program(const char *path, tpu_module **out, tpu_diag *d) {
  *out = NULL;
  size_t n = 0;
  char *text = slurp(path, &n);
  /* Kernels still in bytecode: more bodies than decoded texts. */
  if (!text || !strstr(text, "\"tpu_custom_call\"") || count(text, "\"body\":") <= count(text, "\"tpusim_mosaic\":")) {
    /* no kernel to decode: the text read here is the program (not read a second time),
     * unless it could not be read or is near the parser's limit, which the file's own
     * parse reports */
    tpu_status st;
    if (text && n < ((size_t)1 << 30))
      st = tpu_hlo_parse(path, text, n, out, d);
    else
      st = tpu_hlo_parse_file(path, out, d);
    tpu_free(text);
    return st;
  }
  tpu_free(text);
  char tmp[] = "/tmp/tpusim-pallas-XXXXXX";
  int fd = mkstemp(tmp);
  if (fd < 0) return TPU_FAIL(d, TPU_ERR_IO, tpu_loc_at(path, 0, 0), "cannot make a temporary file: %s", strerror(errno));
  close(fd);
  char msg[1024];
  if (decode(path, tmp, msg, sizeof msg) != 0) {
    unlink(tmp);
    return TPU_FAIL(d, TPU_ERR_UNSUPPORTED, tpu_loc_at(path, 0, 0), "%s", msg);
  }
  text = slurp(tmp, &n);
  unlink(tmp);
  if (!text) return TPU_FAIL(d, TPU_ERR_IO, tpu_loc_at(path, 0, 0), "cannot read the decoded program");
  /* The decoder keeps every instruction on its line: locations name the user's file. */
  tpu_status st = tpu_hlo_parse(path, text, n, out, d);
  tpu_free(text);
  return st;
}
