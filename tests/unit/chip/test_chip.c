/* Chip presets: every preset loads and is self-consistent; bad files are rejected by field. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "chip/chip.h"
#include "check.h"

static char g_dir[64];

static const char *const k_presets[] = {"v1", "v2", "v3", "v4", "v5e", "v5p", "v6e", "v7"};
#define NPRESETS 8

static void test_presets(void) {
  tpu_chip_presets ps;
  tpu_diag d;
  CHECK_EQ_INT(tpu_chip_list_presets(&ps, &d), TPU_OK);
  CHECK_EQ_INT(ps.count, NPRESETS);
  for (int i = 0; i < ps.count && i < NPRESETS; i++) CHECK_EQ_STR(ps.names[i], k_presets[i]);
  for (int i = 0; i < NPRESETS; i++) {
    tpu_chip c;
    tpu_status s = tpu_chip_load(k_presets[i], &c, &d);
    if (s != TPU_OK) {
      char msg[1200];
      tpu_diag_format(&d, msg, sizeof msg);
      fprintf(stderr, "%s\n", msg);
      CHECK(0);
      continue;
    }
    CHECK_EQ_STR(c.name, k_presets[i]);
    /* Every field has a status and a source; every cited key is listed. */
    for (int f = 0; f < TPU_CHIP_NFIELDS; f++) {
      CHECK(c.prov[f].source[0] != 0);
      if (c.prov[f].status == TPU_PROV_DERIVED || c.prov[f].status == TPU_PROV_UNCERTAIN)
        CHECK(c.prov[f].note[0] != 0);
      if (!tpu_chip_known(&c, (tpu_chip_field)f)) CHECK(tpu_chip_value(&c, (tpu_chip_field)f) == 0 ||
                                                        f == TPU_CHIP_MAX_DIMS);
    }
    /* The listed native peak agrees with 2 * MACs * clock, or the file says why not. */
    double derived = tpu_chip_derived_peak(&c);
    tpu_chip_field native = c.mac_input == TPU_BF16 ? TPU_CHIP_PEAK_BF16_FLOPS : TPU_CHIP_PEAK_INT8_OPS;
    CHECK(tpu_chip_known(&c, native));
    double listed = tpu_chip_value(&c, native);
    double rel = fabs(listed - derived) / derived;
    CHECK(rel <= TPU_CHIP_PEAK_TOL || c.prov[native].mismatch[0]);
    if (rel > 1e-2) CHECK(c.prov[native].mismatch[0]); /* v2 is the one > 1% off; say why */
    CHECK(tpu_chip_peak_int8(&c) >= 0 && tpu_chip_peak_bf16(&c) >= 0);
    /* Sizes are sane. */
    CHECK(c.vmem_bytes > 0 && c.vmem_bytes < c.hbm_bytes);
    CHECK(c.max_dims[0] * c.max_dims[1] * c.max_dims[2] == (tpu_chip_known(&c, TPU_CHIP_MAX_DIMS) ? c.max_chips : 1));
    if (c.topology != TPU_TOPO_NONE && tpu_chip_known(&c, TPU_CHIP_ICI_LINKS))
      CHECK_EQ_INT(c.ici_links, c.topology == TPU_TOPO_TORUS_3D ? 6 : 4);
  }
  /* Spot checks that values arrive in SI units. */
  tpu_chip c;
  CHECK_EQ_INT(tpu_chip_load("v4", &c, &d), TPU_OK);
  CHECK(c.clock_hz == 1.05e9 && c.tensorcores == 2 && c.mxus_per_core == 4);
  CHECK(c.vmem_bytes == 16 << 20 && c.cmem_bytes == 128 << 20 && c.hbm_bytes == (int64_t)32 << 30);
  CHECK(c.mac_input == TPU_BF16 && c.mac_accum == TPU_F32 && c.topology == TPU_TOPO_TORUS_3D);
  CHECK(c.max_dims[0] == 16 && c.max_dims[2] == 16 && c.wraparound == TPU_WRAP_MULTIPLE);
  CHECK(tpu_chip_axis_wraps(&c, 0, 8) && tpu_chip_axis_wraps(&c, 2, 4));
  CHECK(!tpu_chip_axis_wraps(&c, 0, 2) && !tpu_chip_axis_wraps(&c, 1, 6));
  CHECK(tpu_chip_peak_int8(&c) == 275e12);
  CHECK_EQ_STR(c.prov[TPU_CHIP_CLOCK_HZ].source, "ISCA23");
  CHECK_EQ_INT(c.prov[TPU_CHIP_HBM_LATENCY_S].status, TPU_PROV_UNKNOWN);
  /* NAME:core: one TensorCore of a megacore chip (the XLA compile-only device on v4) */
  CHECK_EQ_INT(tpu_chip_load("v4:core", &c, &d), TPU_OK);
  CHECK_EQ_STR(c.name, "v4:core");
  CHECK(c.tensorcores == 1 && c.mxus_per_core == 4 && c.clock_hz == 1.05e9);
  CHECK(c.hbm_bw == 600e9 && c.hbm_bytes == (int64_t)16 << 30 && c.peak_bf16_flops == 137.5e12);
  CHECK_EQ_INT(c.prov[TPU_CHIP_HBM_BW].status, TPU_PROV_DERIVED);
  /* the windowed-einsum range (8-16 chips) counted in its devices, TensorCores */
  CHECK(c.windowed_einsum_min_chips == 16 && c.windowed_einsum_max_chips == 32);
  CHECK_EQ_INT(tpu_chip_load("chips/v5e.json:core", &c, &d), TPU_OK); /* one core already */
  CHECK(c.tensorcores == 1 && c.hbm_bw == 819e9);
  CHECK_EQ_INT(tpu_chip_load("v99:core", &c, &d), TPU_ERR_ARG);
  CHECK_EQ_INT(tpu_chip_load("v5e", &c, &d), TPU_OK);
  CHECK(tpu_chip_axis_wraps(&c, 0, 16) && !tpu_chip_axis_wraps(&c, 0, 8));
  CHECK(c.max_dims[2] == 1 && c.chips_per_host == 8);
  CHECK_EQ_INT(tpu_chip_load("v1", &c, &d), TPU_OK);
  CHECK(c.mac_input == TPU_S8 && tpu_chip_peak_bf16(&c) == 0 && c.topology == TPU_TOPO_NONE);
  CHECK_EQ_INT(c.prov[TPU_CHIP_ICI_LINKS].status, TPU_PROV_ABSENT);
  CHECK(!tpu_chip_axis_wraps(&c, 0, 1));
  /* A path loads the same file as the name. */
  tpu_chip byname, bypath;
  CHECK_EQ_INT(tpu_chip_load("v5p", &byname, &d), TPU_OK);
  CHECK_EQ_INT(tpu_chip_load("chips/v5p.json", &bypath, &d), TPU_OK);
  CHECK(byname.peak_bf16_flops == bypath.peak_bf16_flops && byname.max_chips == bypath.max_chips);
  /* Unknown and malformed names. */
  CHECK_EQ_INT(tpu_chip_load("v99", &c, &d), TPU_ERR_ARG);
  CHECK(strstr(d.msg, "unknown chip 'v99' (presets: v1, v2, v3, v4, v5e, v5p, v6e, v7)") != NULL);
  CHECK_EQ_INT(tpu_chip_load("v5e;rm", &c, &d), TPU_ERR_ARG);
  CHECK_EQ_INT(tpu_chip_load("/nonexistent/chip.json", &c, &d), TPU_ERR_IO);
}

/* A minimal valid chip, one field per line; a case replaces one line (or adds one). */
static const char *const k_base[] = {
    "{",
    "\"schema\": \"tpusim-chip/1\", \"name\": \"t\", \"sources\": {\"S\": \"test\"},",
    "\"clock_hz\": {\"value\": 1e9, \"source\": \"S\", \"status\": \"published\"},",
    "\"tensorcores\": {\"value\": 1, \"source\": \"S\", \"status\": \"published\"},",
    "\"mxus_per_core\": {\"value\": 1, \"source\": \"S\", \"status\": \"published\"},",
    "\"mxu_rows\": {\"value\": 128, \"source\": \"S\", \"status\": \"published\"},",
    "\"mxu_cols\": {\"value\": 128, \"source\": \"S\", \"status\": \"published\"},",
    "\"mac_input\": {\"value\": \"bf16\", \"source\": \"S\", \"status\": \"published\"},",
    "\"mac_accum\": {\"value\": \"f32\", \"source\": \"S\", \"status\": \"published\"},",
    "\"vmem_bytes\": {\"value\": 1048576, \"source\": \"S\", \"status\": \"published\"},",
    "\"hbm_bytes\": {\"value\": 1073741824, \"source\": \"S\", \"status\": \"published\"},",
    "\"hbm_bw\": {\"value\": 1e11, \"source\": \"S\", \"status\": \"published\"},",
    "\"topology\": {\"value\": \"2d-torus\", \"source\": \"S\", \"status\": \"published\"},",
    "\"max_chips\": {\"value\": 16, \"source\": \"S\", \"status\": \"published\"},",
    "\"peak_bf16_flops\": {\"value\": 32.768e12, \"source\": \"S\", \"status\": \"published\"},",
    "\"chips_per_host\": {\"value\": 4, \"source\": \"S\", \"status\": \"published\"}",
    "}",
};
#define NBASE ((int)(sizeof k_base / sizeof k_base[0]))

/* Writes the base file with line `line` (1-based; 0 = none) replaced by `text` (NULL deletes
 * it) and `extra` inserted before the last field; returns the load status and message. */
static tpu_status load_variant(int line, const char *text, const char *extra, char *msg,
                               size_t n, char *path, size_t pn) {
  snprintf(path, pn, "%s/t.json", g_dir);
  FILE *f = fopen(path, "w");
  if (!f) return TPU_ERR_IO;
  for (int i = 0; i < NBASE; i++) {
    if (extra && i == NBASE - 2) fprintf(f, "%s\n", extra);
    if (i + 1 == line) {
      if (text) fprintf(f, "%s\n", text);
      else fprintf(f, "\n"); /* keep the line numbers */
    } else {
      fprintf(f, "%s\n", k_base[i]);
    }
  }
  fclose(f);
  tpu_chip c;
  tpu_diag d;
  tpu_status s = tpu_chip_load(path, &c, &d);
  msg[0] = 0;
  if (s != TPU_OK) tpu_diag_format(&d, msg, n);
  return s;
}

/* Expects the variant to fail with `st` and a message "PATH:<where>: error: <what>...". */
static void expect_bad(int line, const char *text, const char *extra, tpu_status st,
                       const char *where, const char *what) {
  char msg[1200], path[128], want[600];
  tpu_status s = load_variant(line, text, extra, msg, sizeof msg, path, sizeof path);
  snprintf(want, sizeof want, "%s:%s: error: %s", path, where, what);
  CHECK_EQ_INT(s, st);
  if (strncmp(msg, want, strlen(want)) != 0) {
    fprintf(stderr, "  got:  %s\n  want: %s...\n", msg, want);
    CHECK(0);
  }
}

static void test_bad_files(void) {
  char msg[1200], path[128];
  CHECK_EQ_INT(load_variant(0, NULL, NULL, msg, sizeof msg, path, sizeof path), TPU_OK);
  if (msg[0]) fprintf(stderr, "%s\n", msg);
  /* Missing, wrong type, non-positive, fraction, bad enum. */
  expect_bad(3, NULL, NULL, TPU_ERR_INVALID, "1:1", "missing field 'clock_hz'");
  expect_bad(3, "\"clock_hz\": {\"value\": \"fast\", \"source\": \"S\", \"status\": \"published\"},",
             NULL, TPU_ERR_INVALID, "3:23", "field 'clock_hz': 'value' must be a positive number (Hz), found string");
  expect_bad(6, "\"mxu_rows\": {\"value\": 0, \"source\": \"S\", \"status\": \"published\"},", NULL,
             TPU_ERR_INVALID, "6:23", "field 'mxu_rows': 'value' must be a positive integer, found a non-positive one");
  expect_bad(4, "\"tensorcores\": {\"value\": 1.5, \"source\": \"S\", \"status\": \"published\"},",
             NULL, TPU_ERR_INVALID, "4:26", "field 'tensorcores': 'value' must be a positive integer, found a fraction");
  expect_bad(8, "\"mac_input\": {\"value\": \"bf17\", \"source\": \"S\", \"status\": \"published\"},",
             NULL, TPU_ERR_INVALID, "8:24", "field 'mac_input': 'value' must be an element type");
  expect_bad(13, "\"topology\": {\"value\": \"ring\", \"source\": \"S\", \"status\": \"published\"},",
             NULL, TPU_ERR_INVALID, "13:23", "field 'topology': 'value' must be one of \"none\", \"2d-torus\", \"3d-torus\"");
  expect_bad(3, "\"clock_hz\": 1e9,", NULL, TPU_ERR_INVALID, "3:13", "field 'clock_hz' must be an object");
  /* Provenance rules. */
  expect_bad(3, "\"clock_hz\": {\"value\": 1e9, \"source\": \"S\", \"status\": \"maybe\"},", NULL,
             TPU_ERR_INVALID, "3:53", "field 'clock_hz': 'value' must be one of \"published\"");
  expect_bad(3, "\"clock_hz\": {\"value\": 1e9, \"source\": \"X\", \"status\": \"published\"},", NULL,
             TPU_ERR_INVALID, "3:38", "field 'clock_hz': source 'X' is not listed in \"sources\"");
  expect_bad(3, "\"clock_hz\": {\"value\": 1e9, \"status\": \"published\"},", NULL, TPU_ERR_INVALID,
             "3:13", "field 'clock_hz': missing \"source\"");
  expect_bad(3, "\"clock_hz\": {\"value\": 1e9, \"source\": \"S\", \"status\": \"uncertain\"},", NULL,
             TPU_ERR_INVALID, "3:13", "field 'clock_hz': status \"uncertain\" needs a \"note\"");
  expect_bad(3, "\"clock_hz\": {\"valu\": 1e9, \"source\": \"S\", \"status\": \"published\"},", NULL,
             TPU_ERR_INVALID, "3:14", "field 'clock_hz': unknown key \"valu\"");
  expect_bad(12, "\"hbm_bw\": {\"value\": null, \"source\": \"none\", \"status\": \"unknown\"},", NULL,
             TPU_ERR_INVALID, "12:21", "field 'hbm_bw' is required and cannot be null");
  expect_bad(0, NULL, "\"pcie_bw\": {\"value\": null, \"source\": \"none\", \"status\": \"published\"},",
             TPU_ERR_INVALID, "16:22", "field 'pcie_bw': status \"published\" needs a value");
  expect_bad(0, NULL, "\"pcie_bw\": {\"value\": 1e9, \"source\": \"S\", \"status\": \"unknown\"},",
             TPU_ERR_INVALID, "16:52", "field 'pcie_bw': status \"unknown\" needs \"value\": null");
  expect_bad(0, NULL, "\"pcie_bw\": {\"value\": 1e9, \"source\": \"S\", \"status\": \"published\", \"mismatch\": \"x\"},",
             TPU_ERR_INVALID, "16:77", "field 'pcie_bw': \"mismatch\" is only for");
  expect_bad(0, NULL, "\"clock\": {\"value\": 1e9, \"source\": \"S\", \"status\": \"published\"},",
             TPU_ERR_INVALID, "16:1", "unknown field 'clock'");
  /* Consistency. */
  expect_bad(15, "\"peak_bf16_flops\": {\"value\": 40e12, \"source\": \"S\", \"status\": \"published\"},",
             NULL, TPU_ERR_INVALID, "15:30", "field 'peak_bf16_flops': 4e+13 disagrees with 2 * 1 cores * 1 MXUs * 128x128 * 1e+09 Hz = 3.277e+13 by 22.1% (tolerance 2%)");
  char m2[1200];
  CHECK_EQ_INT(load_variant(15, "\"peak_bf16_flops\": {\"value\": 40e12, \"source\": \"S\", \"status\": \"published\", \"mismatch\": \"vendor rounding\"},",
                            NULL, m2, sizeof m2, path, sizeof path), TPU_OK);
  expect_bad(0, NULL, "\"int8_rate\": {\"value\": 2, \"source\": \"derived\", \"status\": \"derived\", \"note\": \"n\"},\n"
                      "\"peak_int8_ops\": {\"value\": 32.768e12, \"source\": \"S\", \"status\": \"published\"},",
             TPU_ERR_INVALID, "17:28", "field 'peak_int8_ops': 3.277e+13 disagrees with 2 * 1 cores");
  expect_bad(9, "\"mac_accum\": {\"value\": \"s32\", \"source\": \"S\", \"status\": \"published\"},", NULL,
             TPU_ERR_INVALID, "9:24", "field 'mac_accum': bf16 inputs with s32 accumulation are not modelled");
  expect_bad(0, NULL, "\"ici_links\": {\"value\": 6, \"source\": \"S\", \"status\": \"published\"},",
             TPU_ERR_INVALID, "16:24", "field 'ici_links': a 2d-torus has 4 links per chip, not 6");
  expect_bad(0, NULL, "\"max_dims\": {\"value\": [4, 8], \"source\": \"S\", \"status\": \"published\"},",
             TPU_ERR_INVALID, "16:23", "field 'max_dims': the dimensions multiply to 32 chips but max_chips is 16");
  expect_bad(0, NULL, "\"max_dims\": {\"value\": [4, 2, 2], \"source\": \"S\", \"status\": \"published\"},",
             TPU_ERR_INVALID, "16:23", "field 'max_dims': a 2d-torus topology needs 2 dimensions, found 3");
  expect_bad(0, NULL, "\"wraparound\": {\"value\": \"multiple\", \"source\": \"S\", \"status\": \"published\"},",
             TPU_ERR_INVALID, "16:25", "field 'wraparound': \"multiple\" needs field 'wrap_multiple'");
  expect_bad(0, NULL, "\"pod_chips\": {\"value\": 8, \"source\": \"S\", \"status\": \"published\"},",
             TPU_ERR_INVALID, "16:24", "field 'pod_chips': a pod (8) cannot be smaller");
  /* File-level problems. */
  expect_bad(2, "\"schema\": \"tpusim-chip/2\", \"name\": \"t\", \"sources\": {\"S\": \"test\"},", NULL,
             TPU_ERR_INVALID, "2:11", "\"schema\" must be \"tpusim-chip/1\"");
  expect_bad(2, "\"schema\": \"tpusim-chip/1\", \"name\": \"t\", \"sources\": {},", NULL,
             TPU_ERR_INVALID, "2:52", "\"sources\" must be a non-empty object");
  expect_bad(2, "\"schema\": \"tpusim-chip/1\", \"sources\": {\"S\": \"test\"},", NULL, TPU_ERR_INVALID,
             "1:1", "missing \"name\"");
  expect_bad(3, "\"clock_hz\": {\"value\": 1e9 \"source\": \"S\"},", NULL, TPU_ERR_PARSE, "3:27",
             "expected ',' or '}' in an object");
}

static void test_env_and_faults(void) {
  /* TPUSIM_CHIPS points the search (and the preset list) at another folder. */
  char msg[1200], path[128];
  CHECK_EQ_INT(load_variant(0, NULL, NULL, msg, sizeof msg, path, sizeof path), TPU_OK);
  setenv("TPUSIM_CHIPS", g_dir, 1);
  tpu_chip c;
  tpu_diag d;
  CHECK_EQ_INT(tpu_chip_load("t", &c, &d), TPU_OK);
  CHECK_EQ_STR(c.path, path);
  tpu_chip_presets ps;
  CHECK_EQ_INT(tpu_chip_list_presets(&ps, &d), TPU_OK);
  CHECK(ps.count == 1 && !strcmp(ps.names[0], "t") && !strcmp(ps.dir, g_dir));
  unsetenv("TPUSIM_CHIPS");
  /* A preset is searched for once: the file found is kept by the name, $TPUSIM_CHIPS and
   * the working folder, while it is there. */
  CHECK_EQ_INT(tpu_chip_load("v5e", &c, &d), TPU_OK);
  char v5e[600];
  snprintf(v5e, sizeof v5e, "%s", c.path);
  int64_t s0 = tpu_chip_searches();
  for (int k = 0; k < 3; k++) CHECK_EQ_INT(tpu_chip_load("v5e", &c, &d), TPU_OK);
  CHECK_EQ_INT(tpu_chip_searches() - s0, 0);
  CHECK_EQ_STR(c.path, v5e);
  char mine[700];
  snprintf(mine, sizeof mine, "%s/v5e.json", g_dir);
  FILE *fi = fopen(v5e, "rb"), *fo = fopen(mine, "wb");
  CHECK(fi && fo);
  for (int ch; fi && fo && (ch = fgetc(fi)) != EOF;) fputc(ch, fo);
  if (fi) fclose(fi);
  if (fo) fclose(fo);
  setenv("TPUSIM_CHIPS", g_dir, 1); /* another search: the folder it names comes first */
  CHECK_EQ_INT(tpu_chip_load("v5e", &c, &d), TPU_OK);
  CHECK_EQ_STR(c.path, mine);
  CHECK_EQ_INT(tpu_chip_searches() - s0, 1);
  remove(mine); /* gone: searched again, found where it was before */
  CHECK_EQ_INT(tpu_chip_load("v5e", &c, &d), TPU_OK);
  CHECK_EQ_STR(c.path, v5e);
  CHECK_EQ_INT(tpu_chip_searches() - s0, 2);
  unsetenv("TPUSIM_CHIPS");
  CHECK_EQ_INT(tpu_chip_load("v5e", &c, &d), TPU_OK);
  CHECK_EQ_STR(c.path, v5e);
  /* Allocation failure at every point: an error, never a crash or a leak. */
  int ok_seen = 0;
  for (long n = 1; n < 100000 && !ok_seen; n++) {
    tpu_alloc_fail_after(n);
    tpu_status s = tpu_chip_load("v5p", &c, &d);
    tpu_alloc_fail_after(0);
    if (s == TPU_OK) ok_seen = 1;
    else CHECK_EQ_INT(s, TPU_ERR_NOMEM);
  }
  CHECK(ok_seen);
  CHECK(c.peak_bf16_flops == 459e12);
  remove(path);
}

int main(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/tpusim_chip_XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return 1;
  }
  unsetenv("TPUSIM_CHIPS");
  test_presets();
  test_bad_files();
  test_env_and_faults();
  rmdir(g_dir);
  CHECK_DONE();
}
