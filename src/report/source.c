/* Where each op came from: the JAX op name and source line from HLO metadata and the
 * module's stack-frame tables (report/source.h). */
#include "report/source.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "mosaic/mosaic.h"

/* The debug tables XLA and JAX print before the computations (the parser skips them):
 *   FileNames      N "path"
 *   FunctionNames  N "name"
 *   FileLocations  N {file_name_id=F function_name_id=G line=L ...}
 *   StackFrames    N {file_location_id=K parent_frame_id=P}
 * Ids are 1-based; a stack frame's own location is its innermost (the user's) line. */
typedef struct {
  int64_t file, func, line;
} file_loc;

typedef struct {
  char **files, **funcs; /* by id; NULL where missing */
  int nfiles, nfuncs;
  file_loc *locs;
  int nlocs;
  int64_t *frame_loc; /* frame id -> location id */
  int nframes;
} debug_tables;

static void tables_free(debug_tables *t) {
  for (int i = 0; i < t->nfiles; i++) tpu_free(t->files[i]);
  for (int i = 0; i < t->nfuncs; i++) tpu_free(t->funcs[i]);
  tpu_free(t->files);
  tpu_free(t->funcs);
  tpu_free(t->locs);
  tpu_free(t->frame_loc);
  memset(t, 0, sizeof *t);
}

/* Grows *v (elements of `size`) to hold index id; returns 0 when memory runs out. */
static int grow(void **v, int *n, int64_t id, size_t size) {
  if (id < *n) return 1;
  if (id > 1000000) return 0;
  int nn = (int)id + 1;
  char *nv = tpu_realloc(*v, size * (size_t)nn);
  if (!nv) return 0;
  memset(nv + size * (size_t)*n, 0, size * (size_t)(nn - *n));
  *v = nv;
  *n = nn;
  return 1;
}

/* A quoted string at s (after the opening quote) up to the closing one, unescaped. */
static char *quoted(const char *s, const char *end, const char **after) {
  size_t n = 0;
  const char *p = s;
  while (p < end && *p != '"') p += (*p == '\\' && p + 1 < end) ? 2 : 1;
  char *out = tpu_malloc((size_t)(p - s) + 1);
  if (!out) return NULL;
  for (const char *q = s; q < p; q++) {
    if (*q == '\\' && q + 1 < p) q++;
    out[n++] = *q;
  }
  out[n] = 0;
  *after = p < end ? p + 1 : p;
  return out;
}

/* The integer value of `key=` inside [s, end), or -1. */
static int64_t field_int(const char *s, const char *end, const char *key) {
  size_t k = strlen(key);
  for (const char *p = s; p + k < end; p++)
    if ((p == s || (!isalnum((unsigned char)p[-1]) && p[-1] != '_')) && !strncmp(p, key, k) && p[k] == '=')
      return strtoll(p + k + 1, NULL, 10);
  return -1;
}

/* Reads the tables from the module text; returns 0 when memory runs out (tables then partial). */
static int tables_read(const char *text, size_t len, debug_tables *t) {
  memset(t, 0, sizeof *t);
  const char *end = text + len;
  int section = 0; /* 1 files, 2 functions, 3 locations, 4 frames */
  for (const char *line = text; line < end;) {
    const char *eol = memchr(line, '\n', (size_t)(end - line));
    if (!eol) eol = end;
    size_t n = (size_t)(eol - line);
    if (n >= 5 && !strncmp(line, "ENTRY", 5)) break; /* the tables come first */
    if (n == 9 && !strncmp(line, "FileNames", 9)) section = 1;
    else if (n == 13 && !strncmp(line, "FunctionNames", 13)) section = 2;
    else if (n == 13 && !strncmp(line, "FileLocations", 13)) section = 3;
    else if (n == 11 && !strncmp(line, "StackFrames", 11)) section = 4;
    else if (section && n && isdigit((unsigned char)line[0])) {
      char *rest;
      int64_t id = strtoll(line, &rest, 10);
      while (rest < eol && *rest == ' ') rest++;
      if (id <= 0) {
      } else if (section <= 2 && rest < eol && *rest == '"') {
        const char *after;
        char *s = quoted(rest + 1, eol, &after);
        char ***v = section == 1 ? &t->files : &t->funcs;
        int *cnt = section == 1 ? &t->nfiles : &t->nfuncs;
        if (!s || !grow((void **)v, cnt, id, sizeof(char *))) {
          tpu_free(s);
          return 0;
        }
        tpu_free((*v)[id]);
        (*v)[id] = s;
      } else if (section == 3) {
        if (!grow((void **)&t->locs, &t->nlocs, id, sizeof *t->locs)) return 0;
        t->locs[id].file = field_int(rest, eol, "file_name_id");
        t->locs[id].func = field_int(rest, eol, "function_name_id");
        t->locs[id].line = field_int(rest, eol, "line");
      } else if (section == 4) {
        if (!grow((void **)&t->frame_loc, &t->nframes, id, sizeof *t->frame_loc)) return 0;
        t->frame_loc[id] = field_int(rest, eol, "file_location_id");
      }
    } else if (n) {
      section = 0;
    }
    line = eol + 1;
  }
  return 1;
}

static const tpu_attr *find_attr(const tpu_instr *in, const char *name) {
  for (int i = 0; in && i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, name)) return &in->attrs[i];
  return NULL;
}

/* The instruction whose metadata names a profiled op: the op itself when it has some;
 * for a fusion, its first dot or convolution with metadata, else its root's, else the
 * last of its instructions with metadata. */
static const tpu_instr *source_instr(const tpu_instr *in) {
  if (!in || find_attr(in, "metadata") || !in->calls) return in;
  const tpu_comp *c = in->calls;
  const tpu_instr *last = NULL;
  for (int i = 0; i < c->ninstrs; i++) {
    const tpu_instr *x = c->instrs[i];
    if (!find_attr(x, "metadata")) continue;
    if (x->op == TPU_OP_DOT || x->op == TPU_OP_CONVOLUTION) return x;
    last = x;
  }
  return find_attr(c->root, "metadata") ? c->root : last ? last : in;
}

/* Fills one row's source from metadata={op_name="..." source_file="..." source_line=N
 * stack_frame_id=K}. Returns 0 when memory runs out. */
static int fill_row(tpu_op_source *row, const tpu_instr *in, const debug_tables *t) {
  const tpu_attr *a = find_attr(source_instr(in), "metadata");
  if (!a || !a->value) return 1;
  const char *s = a->value, *end = s + strlen(s);
  int64_t frame = -1;
  while (s < end) {
    while (s < end && !isalpha((unsigned char)*s) && *s != '_') s++;
    const char *k = s;
    while (s < end && (isalnum((unsigned char)*s) || *s == '_')) s++;
    size_t kn = (size_t)(s - k);
    if (s >= end || *s != '=') continue;
    s++;
    if (*s == '"') {
      const char *after;
      char *v = quoted(s + 1, end, &after);
      if (!v) return 0;
      s = after;
      char **dst = kn == 7 && !strncmp(k, "op_name", 7) ? &row->op_name
                 : kn == 11 && !strncmp(k, "source_file", 11) ? &row->source_file
                 : NULL;
      if (dst) {
        tpu_free(*dst);
        *dst = v;
      } else {
        tpu_free(v);
      }
    } else {
      int64_t v = strtoll(s, NULL, 10);
      if (kn == 11 && !strncmp(k, "source_line", 11)) row->source_line = (int)v;
      else if (kn == 14 && !strncmp(k, "stack_frame_id", 14)) frame = v;
      while (s < end && *s != ' ' && *s != '}') s++;
    }
  }
  if (frame > 0 && frame < t->nframes) {
    int64_t l = t->frame_loc[frame];
    if (l > 0 && l < t->nlocs) {
      const file_loc *fl = &t->locs[l];
      if (!row->source_file && fl->file > 0 && fl->file < t->nfiles && t->files[fl->file]) {
        row->source_file = tpu_strdup(t->files[fl->file]);
        if (!row->source_file) return 0;
        row->source_line = (int)fl->line;
      }
      if (fl->func > 0 && fl->func < t->nfuncs && t->funcs[fl->func]) {
        row->function = tpu_strdup(t->funcs[fl->func]);
        if (!row->function) return 0;
      }
    }
  }
  return 1;
}


struct tpu_sources {
  debug_tables t;
};

tpu_status tpu_sources_read(const char *text, size_t len, tpu_sources **out, tpu_diag *d) {
  *out = tpu_calloc(1, sizeof **out);
  if (!*out || !tables_read(text, len, &(*out)->t)) {
    tpu_sources_free(*out);
    *out = NULL;
    return TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory reading the module's debug tables");
  }
  return TPU_OK;
}

void tpu_sources_free(tpu_sources *s) {
  if (!s) return;
  tables_free(&s->t);
  tpu_free(s);
}

int tpu_sources_fill(const tpu_sources *s, const tpu_instr *in, tpu_op_source *row) {
  static const debug_tables none;
  const debug_tables *t = s ? &s->t : &none;
  if (!fill_row(row, in, t)) return 0;
  char kern[300];
  if (in && tpu_mosaic_source(in, kern, sizeof kern)) { /* a Pallas call: its kernel, where it is written */
    row->fused = tpu_strdup(kern);
    if (!row->op_name && !row->source_file) row->op_name = tpu_strdup("pallas_call"); /* no metadata */
    return row->fused != NULL && (row->op_name || row->source_file);
  }
  if (!in || in->op != TPU_OP_FUSION || !in->calls) return 1;
  /* The ops the fusion holds, by the last part of their JAX names, each once, in order. */
  char list[200] = "";
  size_t used = 0;
  int shown = 0, more = 0;
  for (int i = 0; i < in->calls->ninstrs; i++) {
    tpu_op_source x;
    memset(&x, 0, sizeof x);
    const tpu_instr *y = in->calls->instrs[i];
    if (y->op == TPU_OP_PARAMETER || y->op == TPU_OP_CONSTANT) continue;
    if (!find_attr(y, "metadata")) continue;
    if (!fill_row(&x, y, &none)) return 0;
    const char *nm = x.op_name ? strrchr(x.op_name, '/') : NULL;
    nm = nm ? nm + 1 : x.op_name;
    if (nm && *nm) {
      char key[64];
      snprintf(key, sizeof key, "%s", nm);
      int dup = 0;
      for (const char *p = list; (p = strstr(p, key)) != NULL; p++)
        if ((p == list || p[-1] == ' ') && (p[strlen(key)] == ',' || p[strlen(key)] == 0)) dup = 1;
      if (!dup) {
        if (shown < 4 && used + strlen(key) + 3 < sizeof list) {
          used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", shown ? ", " : "", key);
          shown++;
        } else {
          more++;
        }
      }
    }
    tpu_op_source_free(&x);
  }
  if (more) snprintf(list + used, sizeof list - used, " +%d more", more);
  if (shown > 1) {
    row->fused = tpu_strdup(list);
    if (!row->fused) return 0;
  }
  return 1;
}

void tpu_op_source_free(tpu_op_source *row) {
  tpu_free(row->op_name);
  tpu_free(row->source_file);
  tpu_free(row->function);
  tpu_free(row->fused);
  memset(row, 0, sizeof *row);
}

void tpu_op_source_format(const tpu_op_source *row, char *buf, size_t n) {
  buf[0] = 0;
  if (!row) return;
  const char *file = row->source_file;
  if (file) { /* the file's own name is enough next to its line */
    const char *slash = strrchr(file, '/');
    if (slash) file = slash + 1;
  }
  int k = 0;
  const char *nm = row->op_name;
  if (nm && !strncmp(nm, "jit(", 4)) { /* the function's own jit(...)/ prefix: the user knows it */
    const char *close = strstr(nm, ")/");
    if (close) nm = close + 2;
  }
  if (nm && file) k = snprintf(buf, n, "%s @ %s:%d", nm, file, row->source_line);
  else if (nm) k = snprintf(buf, n, "%s", nm);
  else if (file) k = snprintf(buf, n, "%s:%d", file, row->source_line);
  if (row->fused && k >= 0 && (size_t)k < n) snprintf(buf + k, n - (size_t)k, " [%s]", row->fused);
}
