/* Running one fixture case (DIR/NAME/FILE with inN.npy inputs and outN.npy results) on the
 * reference or TPU backend against its expected results, for the tests that sweep case
 * folders (conformance opt.hlo, the real-library programs). */
#ifndef TPU_TESTS_CASES_H
#define TPU_TESTS_CASES_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/npy.h"
#include "chip/chip.h"
#include "chip/exec.h"
#include "compare.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "ref/ref.h"
#include "util.h"


/* The tolerance for output k of a case (want: JAX's result): meta.json's "out_tol": {"K":
 * {"rtol", "atol"}} where it names output K, else the case's tol (rtol, atol as given). A
 * 32- or 64-bit float output (real or complex) takes at most 2e-4 relative and 2e-5 absolute,
 * the loosest any all-f32 case needs, from the case's tol: a case tolerance sized for its
 * bf16 outputs gives its f32 ones no slack; an f32 output that needs more names its own in
 * out_tol (with the reason in the case's README line or meta description). */
static inline void case_out_tol(const char *dirpath, const char *cname, int k, const tpu_tensor *got, double rtol,
                                double atol, double *r, double *a) {
  char path[1024], key[16];
  tpu_diag d;
  tpu_json_doc doc;
  int wide = got->dtype == TPU_F32 || got->dtype == TPU_F64 || got->dtype == TPU_C64 || got->dtype == TPU_C128;
  *r = wide && rtol > 2e-4 ? 2e-4 : rtol;
  *a = wide && atol > 2e-5 ? 2e-5 : atol;
  snprintf(path, sizeof path, "%s/%s/meta.json", dirpath, cname);
  if (tpu_json_parse_file(path, &doc, &d) != TPU_OK) return;
  snprintf(key, sizeof key, "%d", k);
  const tpu_json *t = tpu_json_get(tpu_json_get(doc.root, "out_tol"), key);
  const tpu_json *tr = tpu_json_get(t, "rtol"), *ta = tpu_json_get(t, "atol");
  if (tr && tr->kind == TPU_JSON_NUMBER) *r = tr->num;
  if (ta && ta->kind == TPU_JSON_NUMBER) *a = ta->num;
  tpu_json_doc_free(&doc);
}

static inline int case_run(const tpu_chip *chip, const char *dirpath, const char *cname, const char *file, int backend,
                           double rtol, double atol) {
  char path[1024];
  tpu_diag d;
  snprintf(path, sizeof path, "%s/%s/%s", dirpath, cname, file);
  tpu_module *m = NULL;
  if (tpu_hlo_parse_file(path, &m, &d) != TPU_OK || tpu_ir_verify(m, &d) != TPU_OK) {
    fprintf(stderr, "  %s: %s (line %d)\n", path, d.msg, d.line);
    tpu_module_free(m);
    return 0;
  }
  int n = m->entry->nparams, ok = 1;
  tpu_tensor *args = calloc((size_t)n + 1, sizeof *args);
  for (int i = 0; ok && i < n; i++) {
    snprintf(path, sizeof path, "%s/%s/in%d.npy", dirpath, cname, i);
    if (tpu_ref_load_input(path, i, &m->entry->params[i]->shape, &args[i], &d) != TPU_OK) {
      fprintf(stderr, "  %s: %s\n", path, d.msg);
      ok = 0;
    }
  }
  /* an extra input file means the fixture and the program disagree (e.g. jit dropped an unused
   * argument): which file feeds which parameter would be a guess */
  snprintf(path, sizeof path, "%s/%s/in%d.npy", dirpath, cname, n);
  FILE *extra = ok ? fopen(path, "rb") : NULL;
  if (extra) {
    fclose(extra);
    fprintf(stderr, "  %s: more inputs than the %d ENTRY parameters\n", path, n);
    ok = 0;
  }
  tpu_tensor res;
  memset(&res, 0, sizeof res);
  if (ok && (backend ? tpu_chip_run_values(m, chip, TPU_PREC_HIGHEST, args, n, &res, &d)
                     : tpu_ref_run(m, args, n, &res, &d)) != TPU_OK) {
    fprintf(stderr, "  %s %s (%s): %s\n", cname, file, backend ? "tpu" : "ref", d.msg);
    ok = 0;
  }
  if (ok) {
    int nl = tpu_tensor_count_leaves(&res);
    const tpu_tensor **leaves = calloc((size_t)nl + 1, sizeof *leaves);
    tpu_tensor_collect_leaves(&res, leaves);
    int k = 0;
    for (;; k++) {
      snprintf(path, sizeof path, "%s/%s/out%d.npy", dirpath, cname, k);
      FILE *f = fopen(path, "rb");
      if (!f) break;
      fclose(f);
      tpu_tensor want;
      if (k >= nl || tpu_npy_read(path, &want, &d) != TPU_OK) {
        ok = 0;
        break;
      }
      char label[256];
      snprintf(label, sizeof label, "%s %s (%s)", cname, file, backend ? "tpu" : "ref");
      double r, a;
      case_out_tol(dirpath, cname, k, leaves[k], rtol, atol, &r, &a);
      if (test_compare_leaf(label, k, leaves[k], &want, r, a)) ok = 0;
      tpu_tensor_free(&want);
    }
    if (k != nl) {
      fprintf(stderr, "  %s: %d results, JAX gave %d\n", cname, nl, k);
      ok = 0;
    }
    free(leaves);
  }
  tpu_tensor_free(&res);
  for (int i = 0; i < n; i++) tpu_tensor_free(&args[i]);
  free(args);
  tpu_module_free(m);
  return ok;
}

static inline int case_cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The case folders under dirpath, sorted (caller frees each and the array); *n the count. */
static inline char **case_list(const char *dirpath, int *n) {
  *n = 0;
  DIR *dir = opendir(dirpath);
  if (!dir) return NULL;
  int cap = 64;
  char **names = malloc(sizeof *names * (size_t)cap);
  for (struct dirent *e; names && (e = readdir(dir));) {
    if (e->d_name[0] == '.') continue;
    if (*n == cap) {
      char **nn = realloc(names, sizeof *names * (size_t)(cap *= 2));
      if (!nn) break;
      names = nn;
    }
    names[(*n)++] = strdup(e->d_name);
  }
  closedir(dir);
  if (names) qsort(names, (size_t)*n, sizeof *names, case_cmp_str);
  return names;
}

/* A case's tolerance from meta.json ("tol": {"rtol", "atol"}; default 1e-5). */
static inline void case_tol(const char *dirpath, const char *cname, double *rtol, double *atol) {
  char path[1024];
  tpu_diag d;
  tpu_json_doc doc;
  *rtol = *atol = 1e-5;
  snprintf(path, sizeof path, "%s/%s/meta.json", dirpath, cname);
  if (tpu_json_parse_file(path, &doc, &d) != TPU_OK) return;
  const tpu_json *tol = tpu_json_get(doc.root, "tol");
  const tpu_json *r = tol ? tpu_json_get(tol, "rtol") : NULL, *a = tol ? tpu_json_get(tol, "atol") : NULL;
  if (r && r->kind == TPU_JSON_NUMBER) *rtol = r->num;
  if (a && a->kind == TPU_JSON_NUMBER) *atol = a->num;
  tpu_json_doc_free(&doc);
}

/* The known-failures list (tests/programs/known_failures.txt): one "CASE FILE BACKEND: why"
 * per line, '#' lines are comments; CASE is a folder of tests/programs/cases or
 * "conformance/NAME" for tests/conformance/cases. A listed run must fail and an unlisted one
 * must pass; an entry that no run names is an error too, so the list stays true. */
typedef struct {
  char *text;   /* the file, with each entry's key cut at its ':' */
  char **keys;  /* "CASE FILE BACKEND" of each entry */
  int *seen;
  int n;
} case_known;

static inline void case_known_load(const char *path, case_known *k) {
  memset(k, 0, sizeof *k);
  k->text = test_read_file(path);
  if (!k->text) return;
  int cap = 1;
  for (const char *c = k->text; *c; c++) cap += *c == '\n';
  k->keys = calloc((size_t)cap, sizeof *k->keys);
  k->seen = calloc((size_t)cap, sizeof *k->seen);
  if (!k->keys || !k->seen) return;
  for (char *line = k->text; line && *line;) {
    char *next = strchr(line, '\n');
    if (next) *next++ = 0;
    char *colon = strchr(line, ':');
    if (line[0] != '#' && line[0] && colon) {
      *colon = 0;
      k->keys[k->n++] = line;
    }
    line = next;
  }
}

/* Checks one run against the list: returns 1 when it is as the list says (listed and failed,
 * or unlisted and passed), printing why not otherwise. */
static inline int case_known_expect(case_known *k, const char *cname, const char *file, int backend, int ok) {
  char key[512];
  snprintf(key, sizeof key, "%s %s %s", cname, file, backend ? "tpu" : "ref");
  for (int i = 0; i < k->n; i++)
    if (strcmp(k->keys[i], key) == 0) {
      k->seen[i] = 1;
      if (ok) fprintf(stderr, "  %s passes but is listed in known_failures.txt\n", key);
      return !ok;
    }
  if (!ok) fprintf(stderr, "  %s fails and is not listed in known_failures.txt\n", key);
  return ok;
}

/* Whether an entry belongs to a sweep: "conformance/..." entries to the conformance opt.hlo
 * test (prefix "conformance/"), the others to the programs test (prefix ""). */
static inline int case_known_mine(const char *key, const char *prefix) {
  return *prefix ? strncmp(key, prefix, strlen(prefix)) == 0 : strchr(key, '/') == NULL;
}

/* The sweep's entries that no run named (each printed); *listed the sweep's entry count. */
static inline int case_known_unseen(const case_known *k, const char *prefix, int *listed) {
  int bad = 0;
  *listed = 0;
  for (int i = 0; i < k->n; i++) {
    if (!case_known_mine(k->keys[i], prefix)) continue;
    ++*listed;
    if (k->seen[i]) continue;
    fprintf(stderr, "  known_failures.txt names %s, which no run is\n", k->keys[i]);
    bad++;
  }
  return bad;
}

static inline void case_known_free(case_known *k) {
  free(k->text);
  free(k->keys);
  free(k->seen);
}

static inline int case_has(const char *dirpath, const char *cname, const char *file) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s/%s", dirpath, cname, file);
  FILE *f = fopen(path, "rb");
  if (f) fclose(f);
  return f != NULL;
}

#endif
