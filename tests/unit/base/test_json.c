/* JSON reader and writer: values, locations, every error path, allocation faults, round trips. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/json.h"
#include "check.h"

/* Parses `text`; returns the status and leaves the formatted diagnostic in msg. */
static tpu_status parse(const char *text, tpu_json_doc *doc, char *msg, size_t n) {
  tpu_diag d;
  memset(&d, 0, sizeof d);
  tpu_status s = tpu_json_parse(text, strlen(text), "t.json", doc, &d);
  msg[0] = 0;
  if (s != TPU_OK) tpu_diag_format(&d, msg, n);
  return s;
}

/* Expects `text` to fail with a message that starts with `prefix` (location included). */
static void expect_error(const char *text, const char *prefix) {
  tpu_json_doc doc;
  char msg[1200];
  tpu_status s = parse(text, &doc, msg, sizeof msg);
  CHECK_EQ_INT(s, TPU_ERR_PARSE);
  if (strncmp(msg, prefix, strlen(prefix)) != 0) {
    fprintf(stderr, "input %s\n  got:  %s\n  want: %s...\n", text, msg, prefix);
    CHECK(0);
  }
  if (s == TPU_OK) tpu_json_doc_free(&doc);
}

static void test_values(void) {
  const char *text =
      "{\n"
      "  \"a\": 1, \"b\": -2.5e3, \"c\": [true, false, null],\n"
      "  \"s\": \"x\\ty\\u00e9\\ud83d\\ude00\\\"\\\\\\/\",\n"
      "  \"big\": 123456789012345678901234,\n"
      "  \"i64\": -9223372036854775808, \"e\": {}, \"z\": [], \"zero\": -0\n"
      "}";
  tpu_json_doc doc;
  char msg[1200];
  CHECK_EQ_INT(parse(text, &doc, msg, sizeof msg), TPU_OK);
  const tpu_json *r = doc.root;
  CHECK_EQ_INT(r->kind, TPU_JSON_OBJECT);
  CHECK_EQ_INT(r->count, 9);
  /* Members keep document order. */
  const char *order[] = {"a", "b", "c", "s", "big", "i64", "e", "z", "zero"};
  for (int i = 0; i < 9; i++) CHECK_EQ_STR(r->items[i]->key, order[i]);
  const tpu_json *a = tpu_json_get(r, "a");
  CHECK(a && a->kind == TPU_JSON_NUMBER && a->is_int && a->ival == 1 && a->num == 1.0);
  CHECK_EQ_INT(a->line, 2);
  CHECK_EQ_INT(a->col, 8);
  CHECK_EQ_INT(a->key_line, 2);
  CHECK_EQ_INT(a->key_col, 3);
  const tpu_json *b = tpu_json_get(r, "b");
  CHECK(b && !b->is_int && b->num == -2500.0);
  const tpu_json *c = tpu_json_get(r, "c");
  CHECK(c && c->kind == TPU_JSON_ARRAY && c->count == 3);
  CHECK(c->items[0]->kind == TPU_JSON_BOOL && c->items[0]->boolean == 1);
  CHECK(c->items[1]->kind == TPU_JSON_BOOL && c->items[1]->boolean == 0);
  CHECK(c->items[2]->kind == TPU_JSON_NULL);
  CHECK(c->items[0]->next == c->items[1] && c->items[2]->next == NULL);
  const tpu_json *s = tpu_json_get(r, "s");
  CHECK(s && s->kind == TPU_JSON_STRING);
  CHECK_EQ_STR(s->str, "x\ty\xc3\xa9\xf0\x9f\x98\x80\"\\/");
  CHECK_EQ_INT(s->len, strlen("x\ty\xc3\xa9\xf0\x9f\x98\x80\"\\/"));
  const tpu_json *big = tpu_json_get(r, "big");
  CHECK(big && !big->is_int && fabs(big->num - 1.2345678901234568e23) < 1e8);
  const tpu_json *i64 = tpu_json_get(r, "i64");
  CHECK(i64 && i64->is_int && i64->ival == INT64_MIN);
  CHECK(tpu_json_get(r, "e")->kind == TPU_JSON_OBJECT && tpu_json_get(r, "e")->count == 0);
  CHECK(tpu_json_get(r, "z")->kind == TPU_JSON_ARRAY && tpu_json_get(r, "z")->count == 0);
  const tpu_json *zero = tpu_json_get(r, "zero");
  CHECK(zero && zero->is_int && signbit(zero->num));
  CHECK(tpu_json_get(r, "missing") == NULL);
  CHECK(tpu_json_get(a, "a") == NULL);
  tpu_loc l = tpu_json_loc(&doc, b, 1);
  CHECK_EQ_STR(l.file, "t.json");
  CHECK_EQ_INT(l.line, 2);
  CHECK_EQ_INT(l.col, 11);
  tpu_json_doc_free(&doc);

  /* A string holding \u0000 keeps its length; columns count characters, not bytes. */
  CHECK_EQ_INT(parse("[\"a\\u0000b\", \"\xc3\xa9\xc3\xa9\", 7]", &doc, msg, sizeof msg), TPU_OK);
  CHECK_EQ_INT(doc.root->items[0]->len, 3);
  CHECK(memcmp(doc.root->items[0]->str, "a\0b", 3) == 0);
  CHECK_EQ_INT(doc.root->items[2]->col, 20);
  tpu_json_doc_free(&doc);

  /* A BOM and surrounding whitespace are fine; a bare scalar is a document. */
  CHECK_EQ_INT(parse("\xEF\xBB\xBF \n 42 \n", &doc, msg, sizeof msg), TPU_OK);
  CHECK(doc.root->kind == TPU_JSON_NUMBER && doc.root->ival == 42 && doc.root->line == 2);
  tpu_json_doc_free(&doc);
}

static void test_errors(void) {
  expect_error("", "t.json:1:1: error: expected a value, found end of input");
  expect_error("{\"a\": 1,}", "t.json:1:9: error: expected a string key, found '}'");
  expect_error("[1, 2", "t.json:1:6: error: expected ',' or ']' in an array, found end of input");
  expect_error("{\"a\" 1}", "t.json:1:6: error: expected ':' after key \"a\"");
  expect_error("{\"a\": 1, \"a\": 2}", "t.json:1:10: error: duplicate key \"a\" (first at line 1)");
  expect_error("\n  tru", "t.json:2:3: error: expected a value, found 't'");
  expect_error("01", "t.json:1:1: error: invalid number: leading zeros");
  expect_error("1.", "t.json:1:3: error: invalid number: expected a digit after '.'");
  expect_error("1e+", "t.json:1:4: error: invalid number: expected a digit in the exponent");
  expect_error("-", "t.json:1:1: error: invalid number: expected a digit");
  expect_error("1e999", "t.json:1:1: error: number 1e999 is out of range");
  expect_error("\"abc", "t.json:1:5: error: unterminated string");
  expect_error("\"a\nb\"", "t.json:1:3: error: control character 0x0a in a string");
  expect_error("\"\\q\"", "t.json:1:2: error: invalid escape '\\q' in a string");
  expect_error("\"\\u12G4\"", "t.json:1:6: error: expected 4 hex digits after \\u");
  expect_error("\"\\ud800\"", "t.json:1:2: error: unpaired high surrogate \\uD800");
  expect_error("\"\\ud800\\u0041\"", "t.json:1:2: error: unpaired high surrogate");
  expect_error("\"\\udc00\"", "t.json:1:2: error: unpaired low surrogate \\uDC00");
  expect_error("\"\xc0\xaf\"", "t.json:1:2: error: invalid UTF-8 in a string");
  expect_error("\"\xed\xa0\x80\"", "t.json:1:2: error: invalid UTF-8 in a string");
  expect_error("\"\xe2\x82\"", "t.json:1:2: error: invalid UTF-8 in a string");
  expect_error("1 2", "t.json:1:3: error: unexpected '2' after the JSON value");
  expect_error("[1]\x01", "t.json:1:4: error: unexpected byte 0x01 after the JSON value");
  expect_error("{1: 2}", "t.json:1:2: error: expected a string key, found '1'");
  /* Depth: exactly the limit parses, one more fails. */
  char deep[2 * TPU_JSON_MAX_DEPTH + 4];
  for (int i = 0; i < TPU_JSON_MAX_DEPTH; i++) deep[i] = '[';
  for (int i = 0; i < TPU_JSON_MAX_DEPTH; i++) deep[TPU_JSON_MAX_DEPTH + i] = ']';
  deep[2 * TPU_JSON_MAX_DEPTH] = 0;
  tpu_json_doc doc;
  char msg[1200];
  CHECK_EQ_INT(parse(deep, &doc, msg, sizeof msg), TPU_OK);
  tpu_json_doc_free(&doc);
  char deeper[2 * TPU_JSON_MAX_DEPTH + 4];
  deeper[0] = '[';
  memcpy(deeper + 1, deep, 2 * TPU_JSON_MAX_DEPTH);
  deeper[2 * TPU_JSON_MAX_DEPTH + 1] = ']';
  deeper[2 * TPU_JSON_MAX_DEPTH + 2] = 0;
  expect_error(deeper, "t.json:1:201: error: nesting deeper than 200 levels");
  /* Files. */
  tpu_diag d;
  CHECK_EQ_INT(tpu_json_parse_file("/nonexistent/x.json", &doc, &d), TPU_ERR_IO);
  CHECK_EQ_STR(d.file, "/nonexistent/x.json");
}

static void test_alloc_faults(void) {
  const char *text = "{\"a\": [1, 2, {\"b\": \"str\\u00e9\"}], \"c\": {\"d\": null, \"e\": 1.5}}";
  int ok_seen = 0;
  for (long n = 1; n < 10000 && !ok_seen; n++) {
    tpu_json_doc doc;
    tpu_diag d;
    tpu_alloc_fail_after(n);
    tpu_status s = tpu_json_parse(text, strlen(text), "f.json", &doc, &d);
    tpu_alloc_fail_after(0);
    if (s == TPU_OK) {
      ok_seen = 1;
      CHECK(tpu_json_get(doc.root, "c") != NULL);
      tpu_json_doc_free(&doc);
    } else {
      CHECK_EQ_INT(s, TPU_ERR_NOMEM);
    }
  }
  CHECK(ok_seen);
}

/* Writes a document with the writer, reads it back and compares. */
static void test_writer(void) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  CHECK(f != NULL);
  if (!f) return;
  const double nums[] = {0.1, 1.0 / 3.0, 1e300, -2.5e-310, 123456789.0, -0.0, 5e-324, 2.0 / 3.0};
  const int nn = (int)(sizeof nums / sizeof nums[0]);
  tpu_json_writer w;
  tpu_json_writer_init(&w, f, 2);
  tpu_json_begin_object(&w);
  tpu_json_key(&w, "name \"q\"\n\x01");
  tpu_json_string(&w, "tab\there \xc3\xa9 back\\slash");
  tpu_json_key(&w, "nums");
  tpu_json_begin_array(&w);
  for (int i = 0; i < nn; i++) tpu_json_number(&w, nums[i]);
  tpu_json_number(&w, NAN);
  tpu_json_end_array(&w);
  tpu_json_key(&w, "i");
  tpu_json_int(&w, INT64_MIN);
  tpu_json_key(&w, "flags");
  tpu_json_begin_array(&w);
  tpu_json_bool(&w, 1);
  tpu_json_bool(&w, 0);
  tpu_json_null(&w);
  tpu_json_begin_object(&w);
  tpu_json_end_object(&w);
  tpu_json_end_array(&w);
  tpu_json_end_object(&w);
  tpu_diag d;
  CHECK_EQ_INT(tpu_json_writer_finish(&w, &d), TPU_OK);
  fclose(f);
  tpu_json_doc doc;
  CHECK_EQ_INT(tpu_json_parse(buf, len, "w.json", &doc, &d), TPU_OK);
  if (doc.root) {
    CHECK_EQ_STR(doc.root->items[0]->key, "name \"q\"\n\x01");
    CHECK_EQ_STR(doc.root->items[0]->str, "tab\there \xc3\xa9 back\\slash");
    const tpu_json *arr = tpu_json_get(doc.root, "nums");
    CHECK(arr && arr->count == (size_t)nn + 1);
    for (int i = 0; arr && i < nn; i++) {
      CHECK(arr->items[i]->num == nums[i]);
      CHECK(signbit(arr->items[i]->num) == signbit(nums[i]));
    }
    if (arr) CHECK_EQ_INT(arr->items[nn]->kind, TPU_JSON_NULL);
    CHECK(tpu_json_get(doc.root, "i")->ival == INT64_MIN);
    CHECK_EQ_INT(tpu_json_get(doc.root, "flags")->count, 4);
    tpu_json_doc_free(&doc);
  }
  free(buf);

  /* Shortest round-trip formatting. */
  char nb[40];
  tpu_json_format_double(0.1, nb, sizeof nb);
  CHECK_EQ_STR(nb, "0.1");
  tpu_json_format_double(918e12, nb, sizeof nb);
  CHECK_EQ_STR(nb, "918000000000000");
  tpu_json_format_double(1.0 / 3.0, nb, sizeof nb);
  CHECK_EQ_STR(nb, "0.3333333333333333");
  tpu_json_format_double(INFINITY, nb, sizeof nb);
  CHECK_EQ_STR(nb, "null");

  /* Misuse is reported, not written silently. */
  FILE *g = fopen("/dev/null", "w");
  CHECK(g != NULL);
  if (!g) return;
  tpu_json_writer_init(&w, g, 0);
  tpu_json_begin_object(&w);
  tpu_json_int(&w, 1); /* value without a key */
  tpu_json_end_object(&w);
  CHECK_EQ_INT(tpu_json_writer_finish(&w, &d), TPU_ERR_ARG);
  tpu_json_writer_init(&w, g, 0);
  tpu_json_begin_array(&w);
  tpu_json_key(&w, "k"); /* key inside an array */
  CHECK_EQ_INT(tpu_json_writer_finish(&w, &d), TPU_ERR_ARG);
  tpu_json_writer_init(&w, g, 0);
  tpu_json_begin_array(&w); /* never closed */
  CHECK_EQ_INT(tpu_json_writer_finish(&w, &d), TPU_ERR_ARG);
  tpu_json_writer_init(&w, g, 0);
  tpu_json_int(&w, 1);
  tpu_json_int(&w, 2); /* two top-level values */
  CHECK_EQ_INT(tpu_json_writer_finish(&w, &d), TPU_ERR_ARG);
  fclose(g);
}

int main(void) {
  test_values();
  test_errors();
  test_alloc_faults();
  test_writer();
  CHECK_DONE();
}
