/* Physical layouts: where each element of an array lives in its buffer, from the shape's
 * minor_to_major order and XLA's tiling (`{1,0:T(8,128)(2,1)}`). Only ops whose meaning is
 * physical (bitcast) need this; every other op is defined on logical indices. */
#ifndef TPU_IR_LAYOUT_H
#define TPU_IR_LAYOUT_H

#include "ir/ir.h"

#define TPU_LAYOUT_MAX_TILES 4

/* A shape's layout, read: minor_to_major (the default {rank-1,...,0} when the shape has
 * none) and up to TPU_LAYOUT_MAX_TILES tiling levels, each applying to the minor dims of
 * what the previous level produced (XLA's tiled layout semantics). */
typedef struct {
  int rank;
  int minor_to_major[TPU_MAX_RANK];
  int ntiles;
  int tile_rank[TPU_LAYOUT_MAX_TILES];
  int64_t tile[TPU_LAYOUT_MAX_TILES][TPU_MAX_RANK];
} tpu_layout;

/* Reads s's layout. Memory-space marks (S(n)) are ignored; an element size other than the
 * type's (E(n)), a combined tile dim (`*`) or any other tail item is refused (reported at
 * `loc`), since the physical order it implies is not modelled. */
tpu_status tpu_layout_read(const tpu_shape *s, tpu_loc loc, tpu_layout *out, tpu_diag *d);

/* Is element i of the logical row-major order stored at physical position i, with no
 * padding (the buffer is the plain row-major array)? */
int tpu_layout_is_row_major(const tpu_shape *s, const tpu_layout *l);

/* off[i] = physical position (in elements) of logical row-major element i of an array of
 * s's dims; *phys = elements the buffer holds, padding included. off has numel entries. */
/* Bytes of s in memory: its elements in their tiled layout, padding included (the logical
 * bytes without a layout or with one that is not modelled). */
int64_t tpu_shape_physical_bytes(const tpu_shape *s);

void tpu_layout_offsets(const tpu_shape *s, const tpu_layout *l, int64_t *off, int64_t *phys);

#endif
