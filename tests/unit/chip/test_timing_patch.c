/* A patch embedding's image relayout (relayout.c patch_window, copy_kind.c
 * tpu__patch_relayout_cycles) through tpusim's whole compilation: ViT's 16 x 16 stride-16
 * convolution over a 3-feature image reads it through one copy into the batch in the lanes
 * and the features in the sublanes ({0,3,2,1}), whose kernel costs the XLA TPU compiler's
 * blocks of 8 rows of H and up to 128 lanes of W (libtpu probes off the corpus,
 * bench/fidelity/probes/patch_relayout.py, data/patch_relayout.jsonl). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "chip/program.h"
#include "chip/timing.h"
#include "check.h"
#include "compile/compile.h"
#include "hlo/hlo.h"
#include "ir/verify.h"
#include "timing_util.h"

static const char *FMT = "HloModule m\nENTRY e {\n x = bf16[%d,%d,%d,%d] parameter(0)\n w = bf16[%d,%d,%d,256] parameter(1)\n"
                         " ROOT c = bf16[%d,%d,%d,256] convolution(x, w), window={size=%dx%d stride=%dx%d%s},"
                         " dim_labels=b01f_01io->b01f\n}\n";

/* The cycles of the copy of the image (op copy.relayout) of a B x H x H x C image under a
 * P x P window of stride S (padding `pad`, "" or " pad=..."), -1 if there is none; *batch_lanes
 * whether that copy puts the batch in the lanes. */
static double copy_cycles(int b, int h, int c, int p, int s, const char *pad, const tpu_chip *chip, int *batch_lanes) {
  char src[700];
  int o = (h - p) / s + 1;
  if (pad[0]) o = h / s;
  snprintf(src, sizeof src, FMT, b, h, h, c, p, p, c, b, o, o, p, p, s, s, pad);
  *batch_lanes = 0;
  tpu_module *m = NULL;
  tpu_diag d;
  tpu_program *prog = NULL;
  tpu_compile_opts opts;
  memset(&opts, 0, sizeof opts);
  opts.chip = chip;
  opts.precision_override = -1;
  double t = -1;
  if (tpu_hlo_parse("t.hlo", src, strlen(src), &m, &d) == TPU_OK && tpu_ir_verify(m, &d) == TPU_OK &&
      tpu_compile(m, &opts, &prog, &d) == TPU_OK && prog) {
    for (int j = 0; j < m->entry->ninstrs; j++) {
      const tpu_instr *v = m->entry->instrs[j];
      if (v->op == TPU_OP_COPY && v->noperands == 1 && v->operands[0]->op == TPU_OP_PARAMETER && v->shape.has_layout)
        *batch_lanes = v->shape.minor_to_major[0] == 0 && v->shape.minor_to_major[1] == 3;
    }
    prog->module = NULL;
    t = op_cycles(prog, chip, "copy.relayout");
  }
  CHECK(prog != NULL);
  tpu_program_free(prog);
  tpu_module_free(m);
  return t;
}

/* The compiler's figures (probes/data/patch_relayout.jsonl) for bf16[8,224,224,3] and
 * [8,112,112,3], 16 x 16 stride 16, per generation: tpusim within 4 % (its kernel start on
 * top); without the chip's fields the copy is a transfer, under a third of it. */
static void patch_copy(const char *name, const tpu_chip *chip, double c224, double c112) {
  int lanes = 0;
  double t224 = copy_cycles(8, 224, 3, 16, 16, "", chip, &lanes);
  CHECK(lanes);
  double t112 = copy_cycles(8, 112, 3, 16, 16, "", chip, &lanes);
  tpu_chip off = *chip;
  off.patch_relayout_block_cycles = 0;
  double toff = copy_cycles(8, 224, 3, 16, 16, "", &off, &lanes);
  printf("%s patch embedding's image copy: [8,224,224,3] %.0f cycles (compiler %.0f), [8,112,112,3] %.0f (%.0f);"
         " without the fields %.0f\n", name, t224, c224, t112, c112, toff);
  CHECK(fabs(t224 / c224 - 1) < 0.04);
  CHECK(fabs(t112 / c112 - 1) < 0.04);
  CHECK(toff > 0 && toff < c224 / 3);
}

/* Other windows (probes/data/patch_relayout.jsonl): 8 x 8 over [8,160,160,3], smaller than
 * its 20 x 20 output, is a patch embedding too (v5e 83,960 cycles, 40 blocks); 20 x 20 over
 * [8,200,200,3] on v5p, whose two cores share 50 blocks, 25 each (267,275). */
static void other_windows(const tpu_chip *v5e, const tpu_chip *v5p) {
  int lanes = 0;
  double t160 = copy_cycles(8, 160, 3, 8, 8, "", v5e, &lanes);
  CHECK(lanes);
  double t200 = copy_cycles(8, 200, 3, 20, 20, "", v5p, &lanes);
  printf("patch embedding's image copy: v5e 8x8 over [8,160,160,3] %.0f cycles (compiler 83,960); v5p 20x20 over"
         " [8,200,200,3] %.0f (267,275)\n", t160, t200);
  CHECK(fabs(t160 / 83960 - 1) < 0.04);
  CHECK(fabs(t200 / 267275 - 1) < 0.04);
}

/* Not a patch embedding: an overlapping window (7 x 7 stride 2, padded, a stem) keeps the
 * convolution's own layout, the features in the lanes. */
static void stem_not_patch(const tpu_chip *chip) {
  int lanes = 1;
  copy_cycles(8, 224, 3, 7, 2, " pad=3_3x3_3", chip, &lanes);
  printf("7x7 stride-2 stem over [8,224,224,3]: batch in the lanes %s\n", lanes ? "yes" : "no");
  CHECK(!lanes);
}

int main(void) {
  tpu_chip v4c, v5e, v5p, v6e;
  tpu_diag d;
  if (tpu_chip_load("v4:core", &v4c, &d) != TPU_OK || tpu_chip_load("v5e", &v5e, &d) != TPU_OK ||
      tpu_chip_load("v5p", &v5p, &d) != TPU_OK || tpu_chip_load("v6e", &v6e, &d) != TPU_OK) {
    fprintf(stderr, "cannot load the presets\n");
    return 1;
  }
  patch_copy("v4", &v4c, 311920, 70812);
  patch_copy("v5e", &v5e, 117544, 29386);
  patch_copy("v5p", &v5p, 299348, 69377);
  patch_copy("v6e", &v6e, 129080, 32270);
  other_windows(&v5e, &v5p);
  stem_not_patch(&v5e);
  CHECK_DONE();
}
