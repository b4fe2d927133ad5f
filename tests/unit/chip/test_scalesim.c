/* SCALE-Sim interop: config and topology parsing, bad inputs, float format, report file. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "chip/mxu.h"
#include "chip/scalesim.h"
#include "check.h"

static tpu_status cfg(const char *text, tpu_scalesim_config *c, tpu_diag *d) {
  return tpu_scalesim_config_parse("t.cfg", text, strlen(text), c, d);
}

static tpu_status topo(const char *text, tpu_scalesim_input k, tpu_scalesim_topology *t,
                       tpu_diag *d) {
  return tpu_scalesim_topology_parse("t.csv", text, strlen(text), k, t, d);
}

/* SCALE-Sim v2's own scale.cfg layout: ':' and '=' delimiters, CamelCase keys, a
 * network_presets section, no v3 sections. */
static const char *k_v2 =
    "[general]\n"
    "run_name = scale_example_run_32x32_ws\n"
    "\n"
    "[architecture_presets]\n"
    "ArrayHeight:    32\n"
    "ArrayWidth:     16\n"
    "IfmapSramSzkB:    64\n"
    "FilterSramSzkB:   32\n"
    "OfmapSramSzkB:    16\n"
    "IfmapOffset:    0\n"
    "FilterOffset:   10000000\n"
    "OfmapOffset:    20000000\n"
    "Bandwidth : 10,20\n"
    "Dataflow : ws\n"
    "MemoryBanks:   1\n"
    "\n"
    "[network_presets]\n"
    "TopologyCsvLoc: \"./topologies/conv_nets/alexnet_part.csv\"\n"
    "\n"
    "[run_presets]\n"
    "InterfaceBandwidth: USER\n";

static void test_config_v2(void) {
  tpu_scalesim_config c;
  tpu_diag d;
  CHECK_EQ_INT(cfg(k_v2, &c, &d), TPU_OK);
  CHECK_EQ_STR(c.run_name, "scale_example_run_32x32_ws");
  CHECK_EQ_INT(c.array_rows, 32);
  CHECK_EQ_INT(c.array_cols, 16);
  CHECK_EQ_INT(c.ifmap_sram_kb, 64);
  CHECK_EQ_INT(c.filter_sram_kb, 32);
  CHECK_EQ_INT(c.ofmap_sram_kb, 16);
  CHECK_EQ_INT(c.filter_offset, 10000000);
  CHECK_EQ_INT(c.ofmap_offset, 20000000);
  CHECK_EQ_INT(c.dataflow, TPU_SCALESIM_WS);
  CHECK_EQ_INT(c.dataflow_loc.line, 14);
  CHECK_EQ_INT(c.dataflow_loc.col, 12);
  CHECK_EQ_INT(c.user_bandwidth, 1);
  CHECK_EQ_INT(c.n_bandwidths, 2);
  CHECK_EQ_INT(c.bandwidths[1], 20);
  CHECK_EQ_STR(c.topology_path, "./topologies/conv_nets/alexnet_part.csv");
  CHECK_EQ_INT(tpu_scalesim_config_require_ws(&c, &d), TPU_OK);
  tpu_scalesim_config_deinit(&c);
}

/* configparser details: keys in any case, comments, an indented continuation, DEFAULT
 * fallback, CRLF line ends, CALC mode needs no Bandwidth, v3 sections accepted. */
static void test_config_rules(void) {
  const char *text =
      "# a comment\r\n"
      "[DEFAULT]\r\n"
      "ifmapoffset = 5\r\n"
      "[general]\r\n"
      "RUN_NAME = r1\r\n"
      "; another comment\r\n"
      "[architecture_presets]\r\n"
      "arrayheight=8\r\n"
      "ARRAYWIDTH = 1_024\r\n"
      "ifmapsramszkb = 1\r\n"
      "filtersramszkb = 2\r\n"
      "ofmapsramszkb = 3\r\n"
      "filteroffset = +7\r\n"
      "ofmapoffset = -9\r\n"
      "Dataflow = is\r\n"
      "ReadRequestBuffer: 32\r\n"
      "[layout]\r\n"
      "IfmapCustomLayout: False\r\n"
      "[sparsity]\r\n"
      "SparsitySupport : false\r\n"
      "[run_presets]\r\n"
      "InterfaceBandwidth = CALC\r\n"
      "UseRamulatorTrace: False\r\n";
  tpu_scalesim_config c;
  tpu_diag d;
  CHECK_EQ_INT(cfg(text, &c, &d), TPU_OK);
  CHECK_EQ_STR(c.run_name, "r1");
  CHECK_EQ_INT(c.array_rows, 8);
  CHECK_EQ_INT(c.array_cols, 1024);
  CHECK_EQ_INT(c.ifmap_offset, 5);
  CHECK_EQ_INT(c.filter_offset, 7);
  CHECK_EQ_INT(c.ofmap_offset, -9);
  CHECK_EQ_INT(c.user_bandwidth, 0);
  CHECK_EQ_INT(c.n_bandwidths, 0);
  CHECK(c.topology_path == NULL);
  CHECK_EQ_INT(c.dataflow, TPU_SCALESIM_IS);
  /* 'is' parses (SCALE-Sim accepts it) but is refused where the dataflow matters. */
  memset(&d, 0, sizeof d);
  CHECK_EQ_INT(tpu_scalesim_config_require_ws(&c, &d), TPU_ERR_UNSUPPORTED);
  CHECK_EQ_INT(d.line, 15);
  CHECK_EQ_INT(d.col, 12);
  CHECK(strstr(d.msg, "only ws") != NULL);
  tpu_scalesim_config_deinit(&c);

  /* A multi-line value: the continuation joins with a newline; an integer key rejects it. */
  const char *cont =
      "[general]\nrun_name = r\n[run_presets]\nInterfaceBandwidth = USER\n"
      "[architecture_presets]\nArrayHeight = 4\nArrayWidth = 4\nIfmapSramSzkB = 1\n"
      "FilterSramSzkB = 1\nOfmapSramSzkB = 1\nIfmapOffset = 0\nFilterOffset = 0\n"
      "OfmapOffset = 0\nDataflow = ws\nBandwidth = 10,\n   20\n";
  CHECK_EQ_INT(cfg(cont, &c, &d), TPU_OK);
  CHECK_EQ_INT(c.n_bandwidths, 2);
  CHECK_EQ_INT(c.bandwidths[0], 10);
  CHECK_EQ_INT(c.bandwidths[1], 20);
  tpu_scalesim_config_deinit(&c);
}

/* Replaces the first occurrence of `from` in k_v2 by `to`, then expects a failure with
 * `st` at line:col and `needle` in the message. */
static void bad_cfg(const char *from, const char *to, tpu_status st, int line, int col,
                    const char *needle) {
  char buf[2048];
  const char *p = strstr(k_v2, from);
  CHECK(p != NULL);
  if (!p) return;
  snprintf(buf, sizeof buf, "%.*s%s%s", (int)(p - k_v2), k_v2, to, p + strlen(from));
  tpu_scalesim_config c;
  tpu_diag d;
  memset(&d, 0, sizeof d);
  tpu_status got = cfg(buf, &c, &d);
  CHECK_EQ_INT(got, st);
  CHECK_EQ_STR(d.file, "t.cfg");
  CHECK_EQ_INT(d.line, line);
  CHECK_EQ_INT(d.col, col);
  if (!strstr(d.msg, needle)) fprintf(stderr, "message was: %s\n", d.msg);
  CHECK(strstr(d.msg, needle) != NULL);
  if (got == TPU_OK) tpu_scalesim_config_deinit(&c);
}

static void test_config_bad(void) {
  bad_cfg("ArrayHeight:    32", "ArrayHeight:    3x2", TPU_ERR_INVALID, 5, 17, "integer");
  bad_cfg("ArrayHeight:    32", "ArrayHeight:    0", TPU_ERR_INVALID, 5, 17, "between 1");
  bad_cfg("ArrayHeight:    32", "ArrayHeight:", TPU_ERR_INVALID, 5, 1, "integer");
  bad_cfg("ArrayHeight:    32\n", "", TPU_ERR_INVALID, 4, 1, "has no 'ArrayHeight'");
  bad_cfg("[run_presets]", "[run_preset]", TPU_ERR_INVALID, 0, 0, "missing section [run_presets]");
  bad_cfg("Dataflow : ws", "Dataflow : WS", TPU_ERR_INVALID, 14, 12, "os, ws or is");
  bad_cfg("InterfaceBandwidth: USER", "InterfaceBandwidth: user", TPU_ERR_INVALID, 21, 21,
          "CALC or USER");
  bad_cfg("Bandwidth : 10,20", "Bandwidth : 10,,20", TPU_ERR_INVALID, 13, 13, "Bandwidth");
  bad_cfg("Bandwidth : 10,20\n", "", TPU_ERR_INVALID, 4, 1, "has no 'Bandwidth'");
  bad_cfg("MemoryBanks:   1", "ArrayWidth: 4", TPU_ERR_PARSE, 15, 1, "already set");
  bad_cfg("[run_presets]", "[general]", TPU_ERR_PARSE, 20, 1, "already appears on line 1");
  bad_cfg("MemoryBanks:   1", "MemoryBanks 1", TPU_ERR_PARSE, 15, 1, "key = value");
  bad_cfg("MemoryBanks:   1", "= 1", TPU_ERR_PARSE, 15, 1, "missing key");
  bad_cfg("[general]\n", "", TPU_ERR_PARSE, 1, 1, "section header");
  bad_cfg("scale_example_run_32x32_ws", "a/b", TPU_ERR_INVALID, 2, 12, "folder name");
  bad_cfg("scale_example_run_32x32_ws", "50%", TPU_ERR_UNSUPPORTED, 2, 12, "interpolation");
  bad_cfg("\"./topologies/conv_nets/alexnet_part.csv\"", "\"x.csv", TPU_ERR_INVALID, 18, 17,
          "closing");
  bad_cfg("MemoryBanks:   1", "[sparsity]\nSparsitySupport = True", TPU_ERR_UNSUPPORTED, 16,
          19, "SparsitySupport");
  bad_cfg("ArrayWidth:     16", "ArrayWidth:     99999999999999999999", TPU_ERR_INVALID, 6, 17,
          "between 1");

  /* A missing file: an I/O error naming the file. */
  tpu_scalesim_config c;
  tpu_diag d;
  memset(&d, 0, sizeof d);
  CHECK_EQ_INT(tpu_scalesim_config_load("tests/scalesim/no_such.cfg", &c, &d), TPU_ERR_IO);
  CHECK_EQ_STR(d.file, "tests/scalesim/no_such.cfg");
}

static void test_topology_conv(void) {
  /* SCALE-Sim's alexnet_part.csv plus a blank line, CRLF ends, a dense N:M column, an
   * uneven stride, and a depthwise layer. */
  const char *text =
      "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num "
      "Filter, Strides,\r\n"
      "Conv1,  224, 224,    11, 11,    3,      96,     4,\r\n"
      "\r\n"
      "  Odd , 13, 11, 3, 3, 4, 10, 3, 1:1,\r\n"
      "DP1, 10, 10, 3, 3, 3, 7, 1,\r\n"
      "Last, 5, 5, 5, 5, 2, 16, 1, 2:4\r\n";
  tpu_scalesim_topology t;
  tpu_diag d;
  CHECK_EQ_INT(topo(text, TPU_SCALESIM_CONV, &t, &d), TPU_OK);
  CHECK_EQ_INT(t.n, 6);
  if (t.n == 6) {
    CHECK_EQ_STR(t.layers[0].name, "Conv1");
    CHECK_EQ_INT(t.layers[0].line, 2);
    CHECK_EQ_INT(t.layers[0].M, 55 * 55);
    CHECK_EQ_INT(t.layers[0].K, 363);
    CHECK_EQ_INT(t.layers[0].N, 96);
    CHECK_EQ_INT(t.layers[0].stride_w, 4);
    CHECK_EQ_STR(t.layers[1].name, "Odd");
    CHECK_EQ_INT(t.layers[1].M, 5 * 4); /* ceil(13/3) x ceil(11/3) */
    CHECK_EQ_INT(t.layers[1].K, 36);
    CHECK_EQ_STR(t.layers[2].name, "DP1Channel_0");
    CHECK_EQ_STR(t.layers[4].name, "DP1Channel_2");
    CHECK_EQ_INT(t.layers[4].channels, 1);
    CHECK_EQ_INT(t.layers[4].K, 9);
    CHECK_EQ_INT(t.layers[4].N, 7);
    CHECK_EQ_INT(t.layers[4].line, 5);
    /* No trailing comma: SCALE-Sim drops the last field, here the N:M ratio. */
    CHECK_EQ_STR(t.layers[5].name, "Last");
    CHECK_EQ_INT(t.layers[5].M, 1);
    CHECK_EQ_INT(t.layers[5].K, 50);
  }
  tpu_scalesim_topology_deinit(&t);
}

static void test_topology_gemm(void) {
  const char *text = "anything at all\n10, 20, 30, 40,\nTest 1, 256, 128, 64,\n";
  tpu_scalesim_topology t;
  tpu_diag d;
  CHECK_EQ_INT(topo(text, TPU_SCALESIM_GEMM, &t, &d), TPU_OK);
  CHECK_EQ_INT(t.n, 2);
  if (t.n == 2) {
    CHECK_EQ_STR(t.layers[0].name, "10");
    CHECK_EQ_INT(t.layers[0].M, 20);
    CHECK_EQ_INT(t.layers[0].N, 30);
    CHECK_EQ_INT(t.layers[0].K, 40);
    CHECK_EQ_STR(t.layers[1].name, "Test 1");
    CHECK_EQ_INT(t.layers[1].M, 256);
    CHECK_EQ_INT(t.layers[1].N, 128);
    CHECK_EQ_INT(t.layers[1].K, 64);
    /* SCALE-Sim's own conv view of a GEMM: ifmap M x K, filter 1 x K, N filters. */
    CHECK_EQ_INT(t.layers[1].ifmap_h, 256);
    CHECK_EQ_INT(t.layers[1].filter_w, 64);
    CHECK_EQ_INT(t.layers[1].num_filters, 128);
  }
  tpu_scalesim_topology_deinit(&t);
  /* A "DP" GEMM name is not depthwise. */
  CHECK_EQ_INT(topo("h\nDP, 2, 3, 4,\n", TPU_SCALESIM_GEMM, &t, &d), TPU_OK);
  CHECK_EQ_INT(t.n, 1);
  tpu_scalesim_topology_deinit(&t);
}

static void bad_topo(const char *text, tpu_scalesim_input k, tpu_status st, int line, int col,
                     const char *needle) {
  tpu_scalesim_topology t;
  tpu_diag d;
  memset(&d, 0, sizeof d);
  tpu_status got = topo(text, k, &t, &d);
  CHECK_EQ_INT(got, st);
  CHECK_EQ_STR(d.file, "t.csv");
  CHECK_EQ_INT(d.line, line);
  CHECK_EQ_INT(d.col, col);
  if (!strstr(d.msg, needle)) fprintf(stderr, "message was: %s\n", d.msg);
  CHECK(strstr(d.msg, needle) != NULL);
  if (got == TPU_OK) tpu_scalesim_topology_deinit(&t);
}

static void test_topology_bad(void) {
  const tpu_scalesim_input G = TPU_SCALESIM_GEMM, V = TPU_SCALESIM_CONV;
  bad_topo("h\nl, 64, 64, 64\n", G, TPU_ERR_PARSE, 2, 12, "must end with a comma");
  bad_topo("h\nl, 64, x4, 64,\n", G, TPU_ERR_PARSE, 2, 8, "N must be an integer");
  bad_topo("h\nl, 0, 4, 64,\n", G, TPU_ERR_INVALID, 2, 4, "M must be between 1");
  bad_topo("h\nl, 1, 4, -3,\n", G, TPU_ERR_INVALID, 2, 10, "K must be between 1");
  bad_topo("h\nl, 1, 4, 3, 9, 9,\n", G, TPU_ERR_PARSE, 2, 1, "expected 4 fields");
  bad_topo("h\nl, 1, 4, 3, half,\n", G, TPU_ERR_PARSE, 2, 13, "sparsity ratio");
  bad_topo("h\n\n", G, TPU_ERR_INVALID, 0, 0, "no layers");
  bad_topo("", G, TPU_ERR_INVALID, 0, 0, "no layers");
  bad_topo("h\nc, 4, 4, 5, 1, 1, 1, 1,\n", V, TPU_ERR_INVALID, 2, 10,
           "Filter height cannot be larger");
  bad_topo("h\nc, 4, 4, 1, 5, 1, 1, 1,\n", V, TPU_ERR_INVALID, 2, 13,
           "Filter width cannot be larger");
  bad_topo("h\nc, 4, 4, 1, 1, 1, 1, 0,\n", V, TPU_ERR_INVALID, 2, 22, "Strides must be");
  bad_topo("h\nc, 4, 4, 1, 1, 1, 1,\n", V, TPU_ERR_PARSE, 2, 1, "expected 8 fields");
  bad_topo("h\nc, 4, 4, 1, 1, 1, 1, 1\n", V, TPU_ERR_PARSE, 2, 22, "must end with a comma");
  bad_topo("h\nc, 4, 4, 1, 1, 3000000000, 1, 1,\n", V, TPU_ERR_INVALID, 2, 16,
           "Channels must be between 1");
  bad_topo("h\nc, 99999, 99999, 99999, 99999, 2147483647, 1, 1,\n", V, TPU_ERR_LIMIT, 2, 1,
           "too large");
  bad_topo("h\nDPc, 4, 4, 1, 1, 2000000, 1, 1,\n", V, TPU_ERR_LIMIT, 2, 18, "depthwise");
  tpu_scalesim_topology t;
  tpu_diag d;
  CHECK_EQ_INT(tpu_scalesim_topology_load("tests/scalesim/none.csv", V, &t, &d), TPU_ERR_IO);
}

static void fmt_is(double v, const char *want) {
  char buf[64];
  tpu_scalesim_format_float(v, buf, sizeof buf);
  CHECK_EQ_STR(buf, want);
}

/* Python repr() digits for the values the reports hold and its switch points. */
static void test_format(void) {
  fmt_is(91.68309650614964, "91.68309650614964");
  fmt_is(94.53125, "94.53125");
  fmt_is(100.0, "100.0");
  fmt_is(50, "50.0");
  fmt_is(0.1, "0.1");
  fmt_is(1.0 / 3.0, "0.3333333333333333");
  fmt_is(2.0 / 3.0 * 100.0, "66.66666666666666");
  fmt_is(0.0001, "0.0001");
  fmt_is(0.00001, "1e-05");
  fmt_is(0.000015, "1.5e-05");
  fmt_is(1e16, "1e+16");
  fmt_is(1234567890123456.0, "1234567890123456.0");
  fmt_is(123456789012345678.0, "1.2345678901234568e+17");
  fmt_is(-2.5, "-2.5");
  fmt_is(0.0, "0.0");
  fmt_is(-0.0, "-0.0");
  fmt_is(5e-324, "5e-324");
  fmt_is(1.7976931348623157e308, "1.7976931348623157e+308");
}

/* One SCALE-Sim row from the tile model, written and read back exactly; a write into a
 * missing folder fails and leaves nothing. */
static void test_report(void) {
  tpu_mxu_cycles c;
  tpu_diag d;
  CHECK_EQ_INT(tpu_mxu_tile_cycles(32, 32, 3025, 363, 96, TPU_WLOAD_SERIAL, &c, &d), TPU_OK);
  tpu_scalesim_row rows[2];
  tpu_scalesim_row_from_cycles(&c, 32, 32, &rows[0]);
  CHECK_EQ_INT(rows[0].total_cycles, 112283); /* SCALE-Sim's alexnet_part CI figure */
  CHECK_NEAR(rows[0].mapping_eff_pct, 94.53125, 1e-9);
  rows[1] = rows[0];
  rows[1].total_cycles = 7;
  rows[1].overall_util_pct = 100.0;
  rows[1].cycles_saved = 42;
  char dir[] = "/tmp/tpusim_test_scalesim_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[128];
  snprintf(path, sizeof path, "%s/COMPUTE_REPORT.csv", dir);
  CHECK_EQ_INT(tpu_scalesim_report_write(path, rows, 2, 1, &d), TPU_OK);
  char buf[1024] = {0};
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  if (f) {
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
  }
  char want[1024];
  char cu[40];
  tpu_scalesim_format_float(rows[0].compute_util_pct, cu, sizeof cu);
  snprintf(want, sizeof want,
           "LayerID, Total Cycles, Stall Cycles, Overall Util %%, Mapping Efficiency %%, "
           "Compute Util %%, Cycles Saved,\n"
           "0, 112283, 0, 91.68309650614964, 94.53125, %s, 0,\n"
           "1, 7, 0, 100.0, 94.53125, %s, 42,\n",
           cu, cu);
  CHECK_EQ_STR(buf, want);
  CHECK_EQ_INT(tpu_scalesim_report_write(path, rows, 1, 0, &d), TPU_OK);
  f = fopen(path, "r");
  if (f) {
    CHECK(fgets(buf, sizeof buf, f) != NULL);
    fclose(f);
  }
  CHECK_EQ_STR(buf, "LayerID, Total Cycles, Stall Cycles, Overall Util %, Mapping Efficiency %, "
                    "Compute Util %,\n");
  unlink(path);
  rmdir(dir);
  char bad[160];
  snprintf(bad, sizeof bad, "%s/missing/COMPUTE_REPORT.csv", dir);
  memset(&d, 0, sizeof d);
  CHECK_EQ_INT(tpu_scalesim_report_write(bad, rows, 1, 0, &d), TPU_ERR_IO);
  CHECK_EQ_STR(d.file, bad);
  struct stat sb;
  CHECK(stat(bad, &sb) != 0);
}

/* Every allocation of a parse fails in turn: a clean NOMEM each time (ASan checks leaks). */
static void test_oom(void) {
  const char *ttext = "h\nConv1, 224, 224, 11, 11, 3, 96, 4,\nDPx, 9, 9, 3, 3, 4, 2, 1,\n";
  for (int which = 0; which < 2; which++) {
    tpu_alloc_fail_after(0);
    tpu_scalesim_config c;
    tpu_scalesim_topology t;
    tpu_diag d;
    if (which == 0) {
      CHECK_EQ_INT(cfg(k_v2, &c, &d), TPU_OK);
      tpu_scalesim_config_deinit(&c);
    } else {
      CHECK_EQ_INT(topo(ttext, TPU_SCALESIM_CONV, &t, &d), TPU_OK);
      tpu_scalesim_topology_deinit(&t);
    }
    long count = tpu_alloc_fail_after(0);
    CHECK(count > 3);
    for (long n = 1; n <= count; n++) {
      tpu_alloc_fail_after(n);
      tpu_status st = which == 0 ? cfg(k_v2, &c, &d) : topo(ttext, TPU_SCALESIM_CONV, &t, &d);
      tpu_alloc_fail_after(0);
      CHECK_EQ_INT(st, TPU_ERR_NOMEM);
      if (st == TPU_OK) {
        if (which == 0) tpu_scalesim_config_deinit(&c);
        else tpu_scalesim_topology_deinit(&t);
      }
    }
  }
}

int main(void) {
  test_config_v2();
  test_config_rules();
  test_config_bad();
  test_topology_conv();
  test_topology_gemm();
  test_topology_bad();
  test_format();
  test_report();
  test_oom();
  CHECK_DONE();
}
