/* Helpers shared by the HLO-pass tests (test_passes.c, test_passes_layout.c): the v5e chip the
 * passes compile for, compile options, HLO text compiled through tpu_compile_hlo, a pass's dump,
 * bit-identical tensors and substring counts. */
#ifndef TPU_TESTS_PASSES_UTIL_H
#define TPU_TESTS_PASSES_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ref/ref.h"

static tpu_chip g_chip;

static inline void print_diag(const char *what, const tpu_diag *d) {
  char buf[1200];
  tpu_diag_format(d, buf, sizeof buf);
  fprintf(stderr, "  %s: %s\n", what, buf);
}

static inline tpu_compile_opts opts(const char *dump_after, FILE *dump) {
  tpu_compile_opts o = {&g_chip, dump_after, dump, -1, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL};
  return o;
}

static inline int same_bits(const tpu_tensor *a, const tpu_tensor *b) {
  if (a->dtype != b->dtype || a->rank != b->rank || a->ntuple != b->ntuple) return 0;
  if (a->dtype == TPU_TUPLE) {
    for (int i = 0; i < a->ntuple; i++)
      if (!same_bits(&a->elems[i], &b->elems[i])) return 0;
    return 1;
  }
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return a->nbytes == b->nbytes && (a->nbytes == 0 || !memcmp(a->data, b->data, a->nbytes));
}

static inline char *dump_after(const char *prog, const char *pass) {
  tpu_module *m = NULL;
  tpu_diag d;
  char *buf = NULL;
  size_t len = 0;
  if (tpu_hlo_parse_file(prog, &m, &d) != TPU_OK) {
    print_diag("parse", &d);
    return NULL;
  }
  FILE *f = open_memstream(&buf, &len);
  tpu_compile_opts o = opts(pass, f);
  tpu_status st = tpu_compile_hlo(m, &o, &d);
  fclose(f);
  tpu_module_free(m);
  if (st != TPU_OK) {
    print_diag("compile", &d);
    free(buf);
    return NULL;
  }
  return buf;
}

static inline tpu_module *compile_src(const char *src) {
  tpu_module *m = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) == TPU_OK);
  if (!m) return NULL;
  tpu_compile_opts o = opts(NULL, NULL);
  CHECK(tpu_compile_hlo(m, &o, &d) == TPU_OK);
  return m;
}

/* src parsed twice: *parsed as written, *compiled through tpu_compile_hlo (tests compare the
 * two's values); 0 on any failure (checked), both freed. */
static inline int parse_and_compile(const char *name, const char *src, tpu_module **parsed, tpu_module **compiled) {
  tpu_diag d;
  *parsed = *compiled = NULL;
  CHECK(tpu_hlo_parse(name, src, strlen(src), parsed, &d) == TPU_OK);
  CHECK(tpu_hlo_parse(name, src, strlen(src), compiled, &d) == TPU_OK);
  tpu_compile_opts o = opts(NULL, NULL);
  if (!*parsed || !*compiled || tpu_compile_hlo(*compiled, &o, &d) != TPU_OK) {
    CHECK(0);
    tpu_module_free(*parsed);
    tpu_module_free(*compiled);
    *parsed = *compiled = NULL;
    return 0;
  }
  return 1;
}

static inline int count_in(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)); p++) n++;
  return n;
}

/* dump_after for HLO text: written to `file` (removed after), NULL on any failure (checked). */
static inline char *dump_src_after(const char *src, const char *file, const char *pass) {
  FILE *f = fopen(file, "w");
  CHECK(f != NULL);
  if (!f) return NULL;
  fputs(src, f);
  fclose(f);
  char *out = dump_after(file, pass);
  remove(file);
  CHECK(out != NULL);
  return out;
}

/* Fusion around the matrix unit (docs/compiler-fusion.md): the kernels of a compiled entry, and per
 * kernel the dots, reduces, divides, multiplies and exponentials it holds. */
typedef struct {
  int kernels, dots[8], convs[8], reduces[8], divides[8], multiplies[8], exps[8], selects[8];
} kernel_census;

static inline kernel_census kernel_census_of(const char *src) {
  kernel_census kc;
  memset(&kc, 0, sizeof kc);
  tpu_module *m = compile_src(src);
  if (!m) return kc;
  for (int i = 0; i < m->entry->ninstrs; i++) {
    const tpu_instr *in = m->entry->instrs[i];
    if (in->op == TPU_OP_PARAMETER || in->op == TPU_OP_CONSTANT || in->op == TPU_OP_GET_TUPLE_ELEMENT ||
        in->op == TPU_OP_TUPLE)
      continue;
    int k = kc.kernels++;
    if (k >= 8) continue;
    const tpu_comp *c = in->op == TPU_OP_FUSION ? in->calls : NULL;
    int n = c ? c->ninstrs : 1;
    for (int j = 0; j < n; j++) {
      tpu_opcode op = c ? c->instrs[j]->op : in->op;
      kc.dots[k] += op == TPU_OP_DOT;
      kc.convs[k] += op == TPU_OP_CONVOLUTION;
      kc.reduces[k] += op == TPU_OP_REDUCE;
      kc.divides[k] += op == TPU_OP_DIVIDE;
      kc.multiplies[k] += op == TPU_OP_MULTIPLY;
      kc.exps[k] += op == TPU_OP_EXP;
      kc.selects[k] += op == TPU_OP_SELECT;
    }
  }
  tpu_module_free(m);
  return kc;
}

#endif
