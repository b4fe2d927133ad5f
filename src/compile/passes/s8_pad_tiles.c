/* The tiles an 8-bit pad runs in (own compilation; after fusion, fuse.c).
 *
 * The XLA TPU compiler tiles an 8-bit array T(32,128)(4,1) where its second-minor dimension
 * (in its layout) is a multiple of 32, else T(8,128)(4,1) (or fewer rows, layout.c), and runs
 * a pad of one only in T(8,128)(4,1): where the operand arrives in 32-row tiles it is first
 * copied into 8-row tiles in VMEM, a kernel of its own, and the pad's result is copied back
 * into 32-row tiles, a third kernel, only where its second-minor dimension is still a
 * multiple of 32. libtpu probes off the corpus (bench/fidelity/probes/s8_pad.py and
 * small_tiles.py, v4/v5e/v5p/v6e): s8[256,64]{0,1} padded 1_1x0_0 to [258,64]{0,1} runs copy,
 * pad.0, copy.1 (2,002 + 2,095 + 2,089 cycles on v5e); [64,1000]{1,0} padded to [64,1003]
 * alike; [2048,256]{1,0} padded to [2050,256] and [64,1000] to [66,1000] copy the operand and
 * pad straight into the result (2050, 66 rows: T(8,128)); [1000,7]{0,1}, [4096,33]{0,1} and
 * [512,129]{0,1} (7, 33, 129 rows: T(8,128) already) one pad kernel; s8[300,64]{0,1} padded to
 * [304,64] and [96,200]{1,0} to [96,205] copy, pad, copy back, [320,48]{0,1} and [640,40]{0,1}
 * pad alone; s8[2048,256]{1,0} padded to [2048,259]{0,1} copies (and relays) the operand
 * into {0,1} T(8,128)(4,1) once. An array of one column of tiles (s8[128,128]{1,0} padded to [130,130],
 * [8,96,160]{1,2,0} to [9,96,160]) is bitcast between the tilings, no copy. bf16 pads
 * (T(8,128)(2,1) whatever the rows) are one kernel. tpusim tiles 8-bit
 * arrays in 8 rows throughout (layout.c); the copies it inserts keep the layout and carry the
 * compiler's kernels. Values are unchanged. */
#include <string.h>

#include "compile/passes/fuse.h"
#include "compile/passes/hlo_passes.h"
#include "ir/build.h"

static int eight_bit(tpu_dtype dt) { return tpu_dtype_is_array(dt) && tpu_dtype_bits(dt) == 8; }

/* Is s (laid out as it is; row-major without a layout) tiled in 32 rows by the compiler, in
 * more than one column of tiles? Of one column (the minor dimension within the lanes) the
 * 32-row and 8-row tiles hold the same bytes: the compiler bitcasts between them, no kernel. */
static int in_32_rows(const tpu_chip *chip, const tpu_shape *s) {
  if (s->rank < 2 || !eight_bit(s->dtype) || s->layout_tail) return 0;
  int q = s->has_layout ? s->minor_to_major[1] : s->rank - 2, m = s->has_layout ? s->minor_to_major[0] : s->rank - 1;
  int64_t lanes = chip->vector_lanes > 0 ? chip->vector_lanes : 128;
  return s->dims[q] % 32 == 0 && s->dims[m] > lanes;
}

/* The layout the pad's result leaves in: a program result takes the tiling that pads least
 * where that is strictly less than row-major (relayout.c), other values their own. */
static tpu_shape result_layout(const tpu_chip *chip, const tpu_comp *entry, const tpu_instr *p) {
  tpu_shape s = p->shape;
  if (!tpu__entry_result(entry, p)) return s;
  int r = s.rank, ls, lm;
  if (tpu__least_tiling(chip, &s, &ls, &lm) < tpu__tiled_as(chip, &s, r - 2, r - 1))
    tpu__tile_layout(&s, lm, ls);
  else
    tpu__tile_layout(&s, r - 1, r - 2);
  return s;
}

tpu_status tpu__s8_pad_tiles(tpu_builder *b, tpu_comp *entry, const tpu_chip *chip) {
  if (!entry || !chip) return TPU_OK;
  int n = entry->ninstrs, changed = 0;
  for (int i = 0; i < n; i++) {
    tpu_instr *p = entry->instrs[i];
    if (p->op != TPU_OP_PAD || p->noperands != 2 || p->shape.rank < 2 || !eight_bit(p->shape.dtype)) continue;
    tpu_instr *x = p->operands[0];
    /* (an operand relaid by a copy of its own, param_layout.c, arrives in the pad's tiles: the
     * compiler's copy of s8[2048,256]{1,0} into {0,1} writes T(8,128)(4,1), one kernel) */
    if (x->op == TPU_OP_COPY || x->shape.rank != p->shape.rank || !in_32_rows(chip, &x->shape)) continue;
    tpu_instr *c = NULL;
    TPU_TRY(tpu_build_instr_like(b, entry, x, TPU_OP_COPY, "copy.s8_pad_in", &x->shape, &x, 1, &c));
    p->operands[0] = c;
    changed = 1;
    if (!tpu__entry_result(entry, p)) continue; /* (a pad inside the program: its readers' tiles) */
    tpu_shape out = result_layout(chip, entry, p);
    if (!in_32_rows(chip, &out)) continue;
    p->shape = out;
    tpu_instr *o = NULL;
    TPU_TRY(tpu_build_instr_like(b, entry, p, TPU_OP_COPY, "copy.s8_pad_out", &out, &p, 1, &o));
    if (entry->root == p) {
      tpu_build_set_root(entry, o);
    } else {
      for (int q = 0; q < entry->root->noperands; q++)
        if (entry->root->operands[q] == p) entry->root->operands[q] = o;
    }
  }
  return changed ? tpu_build_finish(b, entry) : TPU_OK;
}
