/* tpusim chips: the preset table, one chip in full with sources, or either as JSON. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/json.h"
#include "chip/chip.h"
#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: tpusim chips [--json]            list the chip presets with their peaks\n"
          "       tpusim chips [--json] NAME|FILE  one chip in full, each number with its source\n"
          "\n"
          "NAME is a preset (v5e) looked up in $TPUSIM_CHIPS, then the chips/ folder near the\n"
          "executable, then ./chips; FILE is a chip JSON file (see chips/README.md).\n"
          "In the table, '?' marks an uncertain number and '*' one derived from 2 x MACs x clock.\n");
}

/* Marks a value: '?' uncertain, '*' computed here rather than listed, ' ' otherwise. */
static char mark(const tpu_chip *c, tpu_chip_field f) {
  if (!tpu_chip_known(c, f)) return '*';
  return c->prov[f].status == TPU_PROV_UNCERTAIN ? '?' : ' ';
}

static void print_peak(char *buf, size_t n, const tpu_chip *c, tpu_chip_field f, double v) {
  if (v <= 0) snprintf(buf, n, "-");
  else snprintf(buf, n, "%.1f%c", v / 1e12, mark(c, f));
}

static void table_row(const tpu_chip *c) {
  char clock[24], mxu[32], hbm[24], bw[24], bf16[24], int8[24], ici[48];
  snprintf(clock, sizeof clock, "%.2f%c", c->clock_hz / 1e9, mark(c, TPU_CHIP_CLOCK_HZ));
  snprintf(mxu, sizeof mxu, "%lld x %lldx%lld%s", (long long)c->mxus_per_core,
           (long long)c->mxu_rows, (long long)c->mxu_cols,
           mark(c, TPU_CHIP_MXUS_PER_CORE) == '?' || mark(c, TPU_CHIP_MXU_ROWS) == '?' ? "?" : "");
  snprintf(hbm, sizeof hbm, "%.0f", (double)c->hbm_bytes / (1024.0 * 1024 * 1024));
  snprintf(bw, sizeof bw, "%.0f%c", c->hbm_bw / 1e9, mark(c, TPU_CHIP_HBM_BW));
  print_peak(bf16, sizeof bf16, c, TPU_CHIP_PEAK_BF16_FLOPS, tpu_chip_peak_bf16(c));
  print_peak(int8, sizeof int8, c, TPU_CHIP_PEAK_INT8_OPS, tpu_chip_peak_int8(c));
  if (c->topology == TPU_TOPO_NONE || !tpu_chip_known(c, TPU_CHIP_ICI_LINKS))
    snprintf(ici, sizeof ici, "-");
  else if (tpu_chip_known(c, TPU_CHIP_ICI_BW_PER_LINK))
    snprintf(ici, sizeof ici, "%lld x %.0f%c GB/s %s", (long long)c->ici_links,
             c->ici_bw_per_link / 1e9, mark(c, TPU_CHIP_ICI_BW_PER_LINK),
             tpu_chip_topology_name(c->topology));
  else
    snprintf(ici, sizeof ici, "%lld x ? GB/s %s", (long long)c->ici_links,
             tpu_chip_topology_name(c->topology));
  printf("%-5s %-9s %5lld  %-13s %7s %9s %12s %11s  %s\n", c->name, clock,
         (long long)c->tensorcores, mxu, hbm, bw, bf16, int8, ici);
}

/* A field's value as text ("-" when unknown or absent). */
static void format_value(const tpu_chip *c, tpu_chip_field f, char *buf, size_t n) {
  if (!tpu_chip_known(c, f)) {
    snprintf(buf, n, "-");
    return;
  }
  switch (tpu_chip_field_kind(f)) {
    case 'f': snprintf(buf, n, "%.6g", tpu_chip_value(c, f)); break;
    case 'i': snprintf(buf, n, "%.0f", tpu_chip_value(c, f)); break;
    case 't':
      snprintf(buf, n, "%s", tpu_dtype_name(f == TPU_CHIP_MAC_INPUT ? c->mac_input : c->mac_accum));
      break;
    case 'o': snprintf(buf, n, "%s", tpu_chip_topology_name(c->topology)); break;
    case 'w': snprintf(buf, n, "%s", tpu_chip_wrap_name(c->wraparound)); break;
    case 'm':
      snprintf(buf, n, "%lldx%lldx%lld", (long long)c->max_dims[0], (long long)c->max_dims[1],
               (long long)c->max_dims[2]);
      break;
    default: snprintf(buf, n, "?");
  }
}

static void print_chip(const tpu_chip *c) {
  printf("%s  (%s)\n\n", c->title, c->path);
  printf("  %-16s %-12s %-7s %-10s %-12s %s\n", "field", "value", "unit", "status", "source", "note");
  for (int f = 0; f < TPU_CHIP_NFIELDS; f++) {
    char v[48];
    format_value(c, (tpu_chip_field)f, v, sizeof v);
    const tpu_chip_prov *p = &c->prov[f];
    printf("  %-16s %-12s %-7s %-10s %-12s %s\n", tpu_chip_field_key((tpu_chip_field)f), v,
           tpu_chip_field_unit((tpu_chip_field)f), tpu_chip_prov_name(p->status), p->source,
           p->note[0] ? p->note : tpu_chip_field_meaning((tpu_chip_field)f));
    if (p->mismatch[0]) printf("  %-16s %-12s %-7s %-10s %-12s mismatch: %s\n", "", "", "", "", "", p->mismatch);
  }
  double derived = tpu_chip_derived_peak(c);
  int bf16 = c->mac_input == TPU_BF16;
  tpu_chip_field native = bf16 ? TPU_CHIP_PEAK_BF16_FLOPS : TPU_CHIP_PEAK_INT8_OPS;
  printf("\nderived\n");
  printf("  MACs per cycle       %.0f  (%lld cores x %lld MXUs x %lldx%lld)\n",
         tpu_chip_macs_per_cycle(c), (long long)c->tensorcores, (long long)c->mxus_per_core,
         (long long)c->mxu_rows, (long long)c->mxu_cols);
  printf("  2 x MACs x clock     %.4g %s/s", derived, bf16 ? "bf16 FLOP" : "int8 OP");
  if (tpu_chip_known(c, native)) {
    double listed = tpu_chip_value(c, native);
    printf("  (listed %.4g, %.1f%% apart; tolerance %.0f%%)", listed,
           100 * fabs(listed - derived) / derived, 100 * TPU_CHIP_PEAK_TOL);
  }
  printf("\n");
  if (c->hbm_bw > 0)
    printf("  roofline ridge       %.0f %s per HBM byte\n", tpu_chip_peak_bf16(c) > 0 ? tpu_chip_peak_bf16(c) / c->hbm_bw : tpu_chip_peak_int8(c) / c->hbm_bw,
           tpu_chip_peak_bf16(c) > 0 ? "bf16 FLOP" : "int8 OP");
  printf("\nsources\n");
  for (int i = 0; i < c->nsources; i++) printf("  %-8s %s\n", c->sources[i].key, c->sources[i].cite);
}

static void json_summary(tpu_json_writer *w, const tpu_chip *c) {
  tpu_json_begin_object(w);
  tpu_json_key(w, "name");
  tpu_json_string(w, c->name);
  tpu_json_key(w, "title");
  tpu_json_string(w, c->title);
  tpu_json_key(w, "clock_hz");
  tpu_json_number(w, c->clock_hz);
  tpu_json_key(w, "tensorcores");
  tpu_json_int(w, c->tensorcores);
  tpu_json_key(w, "mxus_per_core");
  tpu_json_int(w, c->mxus_per_core);
  tpu_json_key(w, "mxu_rows");
  tpu_json_int(w, c->mxu_rows);
  tpu_json_key(w, "mxu_cols");
  tpu_json_int(w, c->mxu_cols);
  tpu_json_key(w, "hbm_bytes");
  tpu_json_int(w, c->hbm_bytes);
  tpu_json_key(w, "hbm_bw");
  tpu_json_number(w, c->hbm_bw);
  tpu_json_key(w, "peak_bf16_flops");
  if (tpu_chip_peak_bf16(c) > 0) tpu_json_number(w, tpu_chip_peak_bf16(c));
  else tpu_json_null(w);
  tpu_json_key(w, "peak_int8_ops");
  if (tpu_chip_peak_int8(c) > 0) tpu_json_number(w, tpu_chip_peak_int8(c));
  else tpu_json_null(w);
  tpu_json_key(w, "derived_peak");
  tpu_json_number(w, tpu_chip_derived_peak(c));
  tpu_json_key(w, "topology");
  tpu_json_string(w, tpu_chip_topology_name(c->topology));
  tpu_json_key(w, "ici_links");
  if (tpu_chip_known(c, TPU_CHIP_ICI_LINKS)) tpu_json_int(w, c->ici_links);
  else tpu_json_null(w);
  tpu_json_key(w, "ici_bw_per_link");
  if (tpu_chip_known(c, TPU_CHIP_ICI_BW_PER_LINK)) tpu_json_number(w, c->ici_bw_per_link);
  else tpu_json_null(w);
  tpu_json_end_object(w);
}

static void json_value(tpu_json_writer *w, const tpu_chip *c, tpu_chip_field f) {
  if (!tpu_chip_known(c, f)) {
    tpu_json_null(w);
    return;
  }
  char buf[48];
  switch (tpu_chip_field_kind(f)) {
    case 'f': tpu_json_number(w, tpu_chip_value(c, f)); break;
    case 'i': tpu_json_int(w, (int64_t)tpu_chip_value(c, f)); break;
    case 'm':
      tpu_json_begin_array(w);
      for (int i = 0; i < 3; i++) tpu_json_int(w, c->max_dims[i]);
      tpu_json_end_array(w);
      break;
    default:
      format_value(c, f, buf, sizeof buf);
      tpu_json_string(w, buf);
  }
}

static void json_chip(tpu_json_writer *w, const tpu_chip *c) {
  tpu_json_begin_object(w);
  tpu_json_key(w, "name");
  tpu_json_string(w, c->name);
  tpu_json_key(w, "title");
  tpu_json_string(w, c->title);
  tpu_json_key(w, "path");
  tpu_json_string(w, c->path);
  tpu_json_key(w, "fields");
  tpu_json_begin_object(w);
  for (int f = 0; f < TPU_CHIP_NFIELDS; f++) {
    const tpu_chip_prov *p = &c->prov[f];
    tpu_json_key(w, tpu_chip_field_key((tpu_chip_field)f));
    tpu_json_begin_object(w);
    tpu_json_key(w, "value");
    json_value(w, c, (tpu_chip_field)f);
    tpu_json_key(w, "unit");
    tpu_json_string(w, tpu_chip_field_unit((tpu_chip_field)f));
    tpu_json_key(w, "status");
    tpu_json_string(w, tpu_chip_prov_name(p->status));
    tpu_json_key(w, "source");
    tpu_json_string(w, p->source);
    if (p->note[0]) {
      tpu_json_key(w, "note");
      tpu_json_string(w, p->note);
    }
    if (p->mismatch[0]) {
      tpu_json_key(w, "mismatch");
      tpu_json_string(w, p->mismatch);
    }
    tpu_json_end_object(w);
  }
  tpu_json_end_object(w);
  tpu_json_key(w, "derived");
  tpu_json_begin_object(w);
  tpu_json_key(w, "macs_per_cycle");
  tpu_json_number(w, tpu_chip_macs_per_cycle(c));
  tpu_json_key(w, "peak_native");
  tpu_json_number(w, tpu_chip_derived_peak(c));
  tpu_json_key(w, "peak_tolerance");
  tpu_json_number(w, TPU_CHIP_PEAK_TOL);
  tpu_json_end_object(w);
  tpu_json_key(w, "sources");
  tpu_json_begin_object(w);
  for (int i = 0; i < c->nsources; i++) {
    tpu_json_key(w, c->sources[i].key);
    tpu_json_string(w, c->sources[i].cite);
  }
  tpu_json_end_object(w);
  tpu_json_end_object(w);
}

int tpu_cli_chips(int argc, char **argv) {
  int json = 0;
  const char *which = NULL;
  int which_i = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      return tpu_cli_arg_error(i, 1, "unknown option '%s' (see tpusim chips --help)", argv[i]);
    } else if (which) {
      return tpu_cli_arg_error(i, 1, "give one chip name or file ('%s' and '%s')", which, argv[i]);
    } else {
      which = argv[i];
      which_i = i;
    }
  }
  tpu_diag d;
  tpu_json_writer w;
  tpu_json_writer_init(&w, stdout, 2);
  if (which) {
    tpu_chip c;
    if (tpu_chip_load(which, &c, &d) != TPU_OK) return tpu_cli_report_arg(&d, which_i);
    if (json) {
      json_chip(&w, &c);
      if (tpu_json_writer_finish(&w, &d) != TPU_OK) return tpu_cli_report(&d);
    } else {
      print_chip(&c);
    }
    return 0;
  }
  tpu_chip_presets ps;
  if (tpu_chip_list_presets(&ps, &d) != TPU_OK) return tpu_cli_report(&d);
  if (json) {
    tpu_json_begin_object(&w);
    tpu_json_key(&w, "dir");
    tpu_json_string(&w, ps.dir);
    tpu_json_key(&w, "presets");
    tpu_json_begin_array(&w);
  } else {
    printf("%-5s %-9s %5s  %-13s %7s %9s %12s %11s  %s\n", "chip", "clock GHz", "cores",
           "MXUs x size", "HBM GiB", "HBM GB/s", "bf16 TFLOP/s", "int8 TOP/s", "ICI links x one-way");
  }
  for (int i = 0; i < ps.count; i++) {
    tpu_chip c;
    char path[600];
    snprintf(path, sizeof path, "%s/%s.json", ps.dir, ps.names[i]);
    if (tpu_chip_load(path, &c, &d) != TPU_OK) return tpu_cli_report(&d);
    if (json) json_summary(&w, &c);
    else table_row(&c);
  }
  if (json) {
    tpu_json_end_array(&w);
    tpu_json_end_object(&w);
    if (tpu_json_writer_finish(&w, &d) != TPU_OK) return tpu_cli_report(&d);
  } else {
    printf("\n? uncertain, * derived from 2 x MACs x clock (not listed by a source). "
           "'tpusim chips NAME' shows every number with its source.\n"
           "A preset is one whole chip: with cores > 1 its TensorCores run as one device "
           "(megacore). NAME:core\n(e.g. v4:core) is one TensorCore, the device XLA compiles "
           "for on v2, v3 and v4 without megacore.\n");
  }
  return 0;
}
