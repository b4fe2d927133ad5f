/* Topology: --topology strings, slice names, default shapes, wrap-around, links, and device
 * ids to coordinates against JAX's own (tests/pod/coords, dumped from libtpu). */
#include "base/json.h"
#include "check.h"
#include "pod/topology.h"

static tpu_chip chip_of(const char *name) {
  tpu_chip c;
  tpu_diag d;
  if (tpu_chip_load(name, &c, &d) != TPU_OK) {
    fprintf(stderr, "cannot load chip %s: %s\n", name, d.msg);
    exit(1);
  }
  return c;
}

static void expect_shape(const char *chip, const char *text, int64_t x, int64_t y, int64_t z,
                         const char *formatted) {
  tpu_chip c = chip_of(chip);
  tpu_topology t;
  tpu_diag d;
  tpu_status st = tpu_topology_parse(text, &c, &t, &d);
  CHECK_EQ_INT(st, TPU_OK);
  if (st != TPU_OK) {
    fprintf(stderr, "  %s on %s: %s\n", text, chip, d.msg);
    return;
  }
  CHECK_EQ_INT(t.dims[0], x);
  CHECK_EQ_INT(t.dims[1], y);
  CHECK_EQ_INT(t.dims[2], z);
  CHECK_EQ_INT(t.nchips, x * y * z);
  char buf[96];
  tpu_topology_format(&t, buf, sizeof buf);
  CHECK_EQ_STR(buf, formatted);
}

static void expect_error(const char *chip, const char *text, const char *part) {
  tpu_chip c = chip_of(chip);
  tpu_topology t;
  tpu_diag d;
  memset(&d, 0, sizeof d);
  CHECK_EQ_INT(tpu_topology_parse(text, &c, &t, &d), TPU_ERR_ARG);
  if (!strstr(d.msg, part)) fprintf(stderr, "  '%s' on %s: message '%s'\n", text, chip, d.msg);
  CHECK(strstr(d.msg, part) != NULL);
}

static void test_parse(void) {
  expect_shape("v5p", "4x4x8", 4, 4, 8, "4x4x8 (wrap x y z)");
  expect_shape("v5p", "2x2x4", 2, 2, 4, "2x2x4 (no wrap)"); /* not whole cubes [SB] */
  expect_shape("v5p", "16x16x24", 16, 16, 24, "16x16x24 (wrap x y z)");
  expect_shape("v4", "4x4x8_twisted", 4, 4, 8, "4x4x8_twisted (wrap x y z)");
  expect_shape("v5e", "16x16", 16, 16, 1, "16x16 (wrap x y)");
  expect_shape("v5e", "8x16", 8, 16, 1, "8x16 (wrap y)"); /* full 16 axis only [SB] */
  expect_shape("v5e", "2x4", 2, 4, 1, "2x4 (no wrap)");
  expect_shape("v5e", "8", 8, 1, 1, "8 (no wrap)");
  /* Slice names count TensorCores: v4/v5p have two per chip, v5e/v6e one. */
  expect_shape("v5p", "v5p-128", 4, 4, 4, "4x4x4 (wrap x y z)");
  expect_shape("v5p", "v5p-8", 2, 2, 1, "2x2x1 (no wrap)");
  expect_shape("v5p", "v5p-384", 4, 4, 12, "4x4x12 (wrap x y z)");
  expect_shape("v5p", "v5p-12288", 16, 16, 24, "16x16x24 (wrap x y z)");
  expect_shape("v4", "v4-4096", 8, 16, 16, "8x16x16 (wrap x y z)");
  expect_shape("v4", "v4-16", 2, 2, 2, "2x2x2 (no wrap)");
  expect_shape("v5e", "v5e-256", 16, 16, 1, "16x16 (wrap x y)");
  expect_shape("v5e", "v5litepod-8", 2, 4, 1, "2x4 (no wrap)");
  expect_shape("v5e", "v5e-32", 4, 8, 1, "4x8 (no wrap)");
  expect_shape("v6e", "v6e-64", 8, 8, 1, "8x8 (no wrap)");

  expect_error("v5e", "4x4x4", "2-D torus");
  expect_error("v5e", "32x32", "largest v5e slice has 256");
  expect_error("v5e", "16x32", "largest v5e slice has 256");
  expect_error("v5p", "32x16x4", "does not fit");
  expect_error("v5e", "4x", "expected AxBxC");
  expect_error("v5e", "4xx4", "expected AxBxC");
  expect_error("v5e", "0x4", "1 to 2^20");
  expect_error("v5e", "4x4y", "unexpected 'y'");
  expect_error("v5e", "1x2x3x4", "more than 3 axes");
  expect_error("v5p", "v5e-8", "not a slice of the chip 'v5p'");
  expect_error("v5p", "v5p-7", "not whole v5p chips");
  expect_error("v5p", "v5p-x", "positive integer");
  expect_error("v5p", "v5p-", "slice name");
  expect_error("v5p", "4x4x4_twisted", "cannot be twisted");
  expect_error("v5e", "4x8_twisted", "cannot be twisted");
  expect_error("v1", "2x2", "no ICI links");
  expect_error("v5e", "", "empty topology");
}

static void test_default_and_devices(void) {
  static const struct {
    const char *chip;
    int64_t n, x, y, z;
  } cases[] = {
      {"v5e", 1, 1, 1, 1},   {"v5e", 4, 2, 2, 1},    {"v5e", 8, 2, 4, 1},
      {"v5e", 16, 4, 4, 1},  {"v5e", 128, 8, 16, 1}, {"v5e", 6, 2, 3, 1},
      {"v5p", 2, 1, 2, 1},   {"v5p", 4, 2, 2, 1},    {"v5p", 8, 2, 2, 2},
      {"v5p", 16, 2, 2, 4},  {"v5p", 32, 2, 4, 4},   {"v5p", 64, 4, 4, 4},
      {"v5p", 512, 8, 8, 8}, {"v5p", 6144, 16, 16, 24},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tpu_chip c = chip_of(cases[i].chip);
    tpu_topology t;
    tpu_diag d;
    CHECK_EQ_INT(tpu_topology_default(&c, cases[i].n, &t, &d), TPU_OK);
    CHECK_EQ_INT(t.dims[0], cases[i].x);
    CHECK_EQ_INT(t.dims[1], cases[i].y);
    CHECK_EQ_INT(t.dims[2], cases[i].z);
  }
  tpu_chip c = chip_of("v5e");
  tpu_topology t;
  tpu_diag d;
  CHECK_EQ_INT(tpu_topology_default(&c, 512, &t, &d), TPU_ERR_ARG);
  CHECK_EQ_INT(tpu_topology_default(&c, 0, &t, &d), TPU_ERR_ARG);
  CHECK_EQ_INT(tpu_topology_parse("4x4", &c, &t, &d), TPU_OK);
  CHECK_EQ_INT(tpu_topology_check_devices(&t, 16, &d), TPU_OK);
  CHECK_EQ_INT(tpu_topology_check_devices(&t, 8, &d), TPU_ERR_ARG);
  CHECK(strstr(d.msg, "topology 4x4 (no wrap) has 16 devices but the program runs on 8") != NULL);
}

static void test_links(void) {
  tpu_chip c = chip_of("v5e");
  tpu_topology t;
  tpu_diag d;
  CHECK_EQ_INT(tpu_topology_parse("2x4", &c, &t, &d), TPU_OK);
  /* x: 1 link per row of 2, 4 rows; y: 3 per column of 4, 2 columns; both directions. */
  CHECK_EQ_INT(tpu_topology_count_links(&t), 2 * (4 * 1 + 2 * 3));
  int64_t n = 0;
  for (int64_t l = 0; l < tpu_topology_nlinks(&t); l++) n += tpu_topology_link_exists(&t, l);
  CHECK_EQ_INT(n, tpu_topology_count_links(&t));
  /* chip 1 = (1,0): +x leaves the slice (no link), -x reaches chip 0, +y reaches chip 3. */
  CHECK_EQ_INT(tpu_topology_link_dest(&t, 1 * 6 + 0), -1);
  CHECK_EQ_INT(tpu_topology_link_dest(&t, 1 * 6 + 1), 0);
  CHECK_EQ_INT(tpu_topology_link_dest(&t, 1 * 6 + 2), 3);
  CHECK_EQ_INT(tpu_topology_link_dest(&t, 1 * 6 + 3), -1);
  CHECK_EQ_INT(tpu_topology_link_dest(&t, 1 * 6 + 4), -1); /* no z axis */
  char name[64];
  tpu_topology_link_name(&t, 1 * 6 + 2, name, sizeof name);
  CHECK_EQ_STR(name, "(1,0)->(1,1) +y");
  tpu_topology_link_name(&t, 1 * 6 + 0, name, sizeof name);
  CHECK_EQ_STR(name, "-");
  tpu_chip p = chip_of("v5p");
  CHECK_EQ_INT(tpu_topology_parse("4x4x4", &p, &t, &d), TPU_OK);
  CHECK_EQ_INT(tpu_topology_count_links(&t), 64 * 6);
  /* chip 0 -x wraps to (3,0,0) = 3; -z wraps to (0,0,3) = 48. */
  CHECK_EQ_INT(tpu_topology_link_dest(&t, 1), 3);
  CHECK_EQ_INT(tpu_topology_link_dest(&t, 5), 48);
  tpu_topology_link_name(&t, 5, name, sizeof name);
  CHECK_EQ_STR(name, "(0,0,0)->(0,0,3) -z");
}

/* Every device of every dumped slice lands where libtpu puts it. */
static void test_coords_fixtures(void) {
  static const char *files[] = {"v4_2x2x2", "v4_4x4x4", "v5p_2x2x1", "v5p_4x4x4", "v5p_4x4x8",
                                "v5e_2x2",  "v5e_2x4",  "v5e_4x4",   "v5e_16x16", "v6e_4x4",
                                "v6e_8x8"};
  int64_t total = 0;
  for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
    char path[256];
    snprintf(path, sizeof path, "tests/pod/coords/%s.json", files[f]);
    tpu_json_doc doc;
    tpu_diag d;
    if (tpu_json_parse_file(path, &doc, &d) != TPU_OK) {
      fprintf(stderr, "%s: %s\n", path, d.msg);
      CHECK(0);
      continue;
    }
    const tpu_json *topo = tpu_json_get(doc.root, "topology");
    const tpu_json *devs = tpu_json_get(doc.root, "devices");
    CHECK(topo && devs);
    if (!topo || !devs) {
      tpu_json_doc_free(&doc);
      continue;
    }
    char chipname[16];
    const char *colon = strchr(topo->str, ':');
    snprintf(chipname, sizeof chipname, "%.*s", (int)(colon - topo->str), topo->str);
    tpu_chip c = chip_of(chipname);
    tpu_topology t;
    CHECK_EQ_INT(tpu_topology_parse(colon + 1, &c, &t, &d), TPU_OK);
    /* libtpu's compile-only v4 lists each TensorCore as a device; v5p is one per chip. */
    if (strcmp(chipname, "v4") == 0) t.devices_per_chip = 2;
    CHECK_EQ_INT(tpu_topology_check_devices(&t, (int64_t)devs->count, &d), TPU_OK);
    for (size_t i = 0; i < devs->count; i++) {
      const tpu_json *row = devs->items[i];
      int64_t id = row->items[0]->ival, want[3], got[3];
      for (int a = 0; a < 3; a++) want[a] = row->items[1]->items[a]->ival;
      int core = tpu_topology_coords(&t, id, got);
      CHECK_EQ_INT(core, row->items[2]->ival);
      for (int a = 0; a < 3; a++) CHECK_EQ_INT(got[a], want[a]);
      CHECK_EQ_INT(tpu_topology_chip_at(&t, got), tpu_topology_chip(&t, id));
      total++;
    }
    tpu_json_doc_free(&doc);
  }
  CHECK_EQ_INT(total, 16 + 128 + 4 + 64 + 128 + 4 + 8 + 16 + 256 + 16 + 64);
  int64_t xyz[3];
  tpu_topology t;
  tpu_chip c = chip_of("v5e");
  tpu_diag d;
  CHECK_EQ_INT(tpu_topology_parse("2x4", &c, &t, &d), TPU_OK);
  CHECK_EQ_INT(tpu_topology_coords(&t, 8, xyz), -1);
  CHECK_EQ_INT(tpu_topology_coords(&t, -1, xyz), -1);
}

int main(void) {
  test_parse();
  test_default_and_devices();
  test_links();
  test_coords_fixtures();
  CHECK_DONE();
}
