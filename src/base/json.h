/* A small JSON reader (a tree whose nodes carry line:col) and a streaming writer for reports. */
#ifndef TPU_BASE_JSON_H
#define TPU_BASE_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/alloc.h"
#include "base/status.h"

/* Nesting deeper than this is rejected (reader) or refused (writer). */
#define TPU_JSON_MAX_DEPTH 200

typedef enum {
  TPU_JSON_NULL,
  TPU_JSON_BOOL,
  TPU_JSON_NUMBER,
  TPU_JSON_STRING,
  TPU_JSON_ARRAY,
  TPU_JSON_OBJECT
} tpu_json_kind;

/* One value. Everything it points to lives in its document's arena. */
typedef struct tpu_json tpu_json;
struct tpu_json {
  tpu_json_kind kind;
  int line, col;   /* where the value starts; 1-based, col counts UTF-8 characters */
  int boolean;     /* BOOL */
  double num;      /* NUMBER: the nearest double */
  int is_int;      /* NUMBER written without fraction or exponent and within int64: ival exact */
  int64_t ival;    /* NUMBER when is_int */
  const char *str; /* STRING: decoded UTF-8, NUL-terminated (may hold NULs from \u0000) */
  size_t len;      /* STRING: byte length without the terminator */
  size_t count;    /* ARRAY/OBJECT: number of items */
  tpu_json **items; /* ARRAY/OBJECT: items in document order (object members keep key order) */
  tpu_json *next;  /* next sibling in the enclosing container, NULL at the end */
  const char *key; /* object members: decoded key (NUL-terminated); NULL otherwise */
  size_t key_len;
  int key_line, key_col; /* object members: where the key starts */
};

/* A parsed document: the tree, the arena that owns it and the file name for messages. */
typedef struct tpu_json_doc {
  tpu_arena arena;
  const char *file; /* copy in the arena; "<input>" when none was given */
  tpu_json *root;
} tpu_json_doc;

/* Parses `n` bytes of JSON (RFC 8259; a leading UTF-8 BOM is skipped). Rejects invalid
 * UTF-8, duplicate object keys, numbers that overflow a double and nesting deeper than
 * TPU_JSON_MAX_DEPTH with TPU_ERR_PARSE at FILE:LINE:COL. On failure `doc` holds nothing
 * to free; on success free it with tpu_json_doc_free. `file` may be NULL. */
tpu_status tpu_json_parse(const char *text, size_t n, const char *file, tpu_json_doc *doc,
                          tpu_diag *d);
/* Reads and parses a file (TPU_ERR_IO when it cannot be read). */
tpu_status tpu_json_parse_file(const char *path, tpu_json_doc *doc, tpu_diag *d);
void tpu_json_doc_free(tpu_json_doc *doc);

/* The member named `key` of an object, or NULL (also when `obj` is NULL or not an object). */
const tpu_json *tpu_json_get(const tpu_json *obj, const char *key);
/* "null", "boolean", "number", "string", "array", "object". */
const char *tpu_json_kind_name(tpu_json_kind k);
/* The location of a value (or, for an object member, of its key when `at_key`). */
tpu_loc tpu_json_loc(const tpu_json_doc *doc, const tpu_json *v, int at_key);

/* ---- Writer: emits one JSON value to a FILE, checking that calls nest properly ---- */

typedef struct tpu_json_writer {
  FILE *f;
  int indent;     /* spaces per level; 0 writes everything on one line */
  int depth;      /* open containers */
  int after_key;  /* a key was written and awaits its value */
  int done;       /* a complete top-level value was written */
  int err;        /* misuse (e.g. a value without a key inside an object) or write failure */
  unsigned char kind[TPU_JSON_MAX_DEPTH];  /* 'o' object or 'a' array per open level */
  unsigned char empty[TPU_JSON_MAX_DEPTH]; /* the level has no item yet */
} tpu_json_writer;

void tpu_json_writer_init(tpu_json_writer *w, FILE *f, int indent);
void tpu_json_begin_object(tpu_json_writer *w);
void tpu_json_end_object(tpu_json_writer *w);
void tpu_json_begin_array(tpu_json_writer *w);
void tpu_json_end_array(tpu_json_writer *w);
/* Inside an object, each value is preceded by exactly one key. */
void tpu_json_key(tpu_json_writer *w, const char *key);
void tpu_json_string(tpu_json_writer *w, const char *s);
/* Shortest decimal that reads back to the same double; NaN and infinities become null. */
void tpu_json_number(tpu_json_writer *w, double v);
void tpu_json_int(tpu_json_writer *w, int64_t v);
void tpu_json_bool(tpu_json_writer *w, int b);
void tpu_json_null(tpu_json_writer *w);
/* Ends the document with a newline. Fails (TPU_ERR_ARG) on misuse or unclosed containers,
 * (TPU_ERR_IO) when writing failed. */
tpu_status tpu_json_writer_finish(tpu_json_writer *w, tpu_diag *d);

/* Low-level helpers. Writes `s` (n bytes, UTF-8) as a quoted JSON string. */
void tpu_json_write_escaped(FILE *f, const char *s, size_t n);
/* Formats v as the shortest of %.15g/%.16g/%.17g that round-trips into buf (>= 32 bytes);
 * writes "null" for NaN or infinity. Returns the length. */
int tpu_json_format_double(double v, char *buf, size_t n);

#endif
