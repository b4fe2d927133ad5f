/* print(parse(x)) is a fixed point for every HLO file we have: the golden files under
 * tests/hlo (whose canonical print is checked against *.expected) and every conformance
 * program, both JAX's unoptimized text and XLA's optimized dump. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "check.h"
#include "util.h"
#include "hlo/hlo.h"

static int files_checked;

static void roundtrip(const char *path, const char *expected_path) {
  tpu_diag d;
  tpu_module *m;
  if (tpu_hlo_parse_file(path, &m, &d) != TPU_OK) {
    char buf[1200];
    tpu_diag_format(&d, buf, sizeof buf);
    fprintf(stderr, "parse failed: %s\n", buf);
    CHECK(0);
    return;
  }
  char *p1 = tpu_hlo_print(m);
  CHECK(p1 != NULL);
  tpu_module *m2;
  if (tpu_hlo_parse("printed", p1, strlen(p1), &m2, &d) != TPU_OK) {
    char buf[1200];
    tpu_diag_format(&d, buf, sizeof buf);
    fprintf(stderr, "%s: reparse failed: %s\n", path, buf);
    CHECK(0);
  } else {
    char *p2 = tpu_hlo_print(m2);
    if (strcmp(p1, p2) != 0) fprintf(stderr, "%s: print(parse(print(parse(x)))) differs\n", path);
    CHECK_EQ_STR(p1, p2);
    tpu_free(p2);
    tpu_module_free(m2);
  }
  if (expected_path) {
    char *want = test_read_file(expected_path);
    if (want) {
      if (strcmp(want, p1)) fprintf(stderr, "%s: printed text differs from %s\n", path, expected_path);
      CHECK_EQ_STR(p1, want);
      free(want);
    }
  }
  tpu_free(p1);
  tpu_module_free(m);
  files_checked++;
}

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

/* An attribute's balanced value (the scanner's scan_nested) spans lines, strings holding
 * brackets and comments that are not its end; the errors after and inside one are located at
 * their line and column. */
static void spans_located(void) {
  const char *ok = "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n"
                   "  ROOT a = f32[4] add(p, p), foo={{0,1},\n{2,3}}, metadata={op_name=\"x{(\" a=//}\n}\n";
  tpu_module *m = NULL;
  tpu_diag d;
  CHECK(tpu_hlo_parse("ok.hlo", ok, strlen(ok), &m, &d) == TPU_OK);
  tpu_module_free(m);
  const struct {
    const char *text, *want;
  } bad[] = {
      {"HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] add(p, p), foo={{0,1},\n {2,3}], x=1\n}\n",
       "bad.hlo:5:7: error: expected '}' to close '{' at line 4, found ']'"},
      {"HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] add(p, p), foo={{0,1},\n {2,3}\n",
       "bad.hlo:4:34: error: '{' is never closed"},
      {"HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT a = f32[4] add(p, p), foo={\"a}\",\n {2,3}} )\n}\n",
       "bad.hlo:5:9: error:"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    m = NULL;
    CHECK(tpu_hlo_parse("bad.hlo", bad[k].text, strlen(bad[k].text), &m, &d) != TPU_OK);
    char buf[1200];
    tpu_diag_format(&d, buf, sizeof buf);
    if (strncmp(buf, bad[k].want, strlen(bad[k].want))) fprintf(stderr, "got %s\nwant %s\n", buf, bad[k].want);
    CHECK(strncmp(buf, bad[k].want, strlen(bad[k].want)) == 0);
    tpu_module_free(m);
  }
}

int main(void) {
  spans_located();
  DIR *dir = opendir("tests/hlo");
  CHECK(dir != NULL);
  struct dirent *e;
  while (dir && (e = readdir(dir))) {
    if (!ends_with(e->d_name, ".hlo")) continue;
    char path[1024], exp[1024];
    snprintf(path, sizeof path, "tests/hlo/%s", e->d_name);
    snprintf(exp, sizeof exp, "tests/hlo/%.*s.expected", (int)(strlen(e->d_name) - 4), e->d_name);
    roundtrip(path, exp);
  }
  if (dir) closedir(dir);
  dir = opendir("tests/conformance/cases");
  CHECK(dir != NULL);
  while (dir && (e = readdir(dir))) {
    if (e->d_name[0] == '.') continue;
    const char *names[] = {"prog.hlo", "opt.hlo"};
    for (int i = 0; i < 2; i++) {
      char path[1024];
      snprintf(path, sizeof path, "tests/conformance/cases/%s/%s", e->d_name, names[i]);
      FILE *f = fopen(path, "rb");
      if (!f) continue;
      fclose(f);
      roundtrip(path, NULL);
    }
  }
  if (dir) closedir(dir);
  printf("%d files round-tripped\n", files_checked);
  CHECK(files_checked >= 100);
  CHECK_DONE();
}
