/* Reshapes no layout makes a bitcast: the relayout copy around a transpose (fuse pass).
 *
 * XLA's layout assignment makes a reshape or transpose a bitcast wherever it can choose the
 * layouts on both sides so that the bytes stay where they are. A reshape that merges
 * dimensions a transpose under it separated, and that a split under the transpose tied
 * together, cannot be one: Swin's window partition, [B,H,W,C] -> [B,H/w,w,W/w,w,C] ->
 * transpose(0,1,3,2,4,5) -> [B*(H/w)*(W/w), w*w, C], needs H/w and w adjacent in memory (one
 * dimension of the source) and H/w next to W/w (one of the result) at once; ViT's patch
 * embedding alike. The XLA TPU compiler moves those bytes in a `copy` kernel of its own that
 * holds the data movement and nothing else (libtpu, v5e, outside the corpus:
 * bf16[4,28,28,192] partitioned into 7x7 windows and multiplied by [192,192] is a `copy` of
 * 19,316 cycles into bf16[4,4,4,7,7,192]{5,2,1,0,4,3} and the dot's kOutput fusion after it;
 * a layer norm before the partition stays a kLoop fusion of its own before the copy, and the
 * same norm without the partition fuses into each of three dots reading it; in the compiled
 * swin_fwd_b4_28x28x192h6 the partition is `copy_bitcast_fusion` after the norm's `fusion.24`
 * and the window reverse `copy.80` after the output projection's kernel). */
#include "compile/passes/fuse.h"

#define MAX_ATOMS (3 * TPU_MAX_RANK + 3)

typedef struct {
  int64_t size;
  int sd, ld; /* the source dimension and the transpose operand's dimension it lies in */
  int rd;     /* the result dimension */
  int sk;     /* order in the source's row-major sequence */
} atom;

/* Splits the row-major sequence of shape a (atoms, in order) at the boundaries of shape b's
 * dimensions, which factor the same number of elements; sets each atom's dimension of b. 0
 * when the atoms run out (the shapes disagree). */
static int refine(atom *at, int *n, const tpu_shape *b, int which) {
  atom out[MAX_ATOMS];
  int m = 0, i = 0;
  int64_t carry = at[0].size; /* what is left of atom i */
  for (int d = 0; d < b->rank; d++) {
    int64_t need = b->dims[d];
    while (need > 1) {
      if (i >= *n || m >= MAX_ATOMS) return 0;
      atom x = at[i];
      if (carry <= need) {
        if (need % carry) return 0;
        x.size = carry;
        need /= carry;
        if (++i < *n) carry = at[i].size;
      } else {
        if (carry % need) return 0;
        x.size = need;
        carry /= need;
        need = 1;
      }
      if (which) x.rd = d;
      else x.ld = d;
      out[m++] = x;
    }
  }
  for (int k = 0; k < m; k++) at[k] = out[k];
  *n = m;
  return 1;
}

int tpu__reshape_relayouts(const tpu_instr *r) {
  if (r->op != TPU_OP_RESHAPE || r->noperands != 1 || r->shape.layout_tail) return 0;
  const tpu_instr *t = r->operands[0];
  if (t->op != TPU_OP_TRANSPOSE || t->noperands != 1 || t->dimensions.n != t->shape.rank) return 0;
  const tpu_instr *l = t->operands[0], *s = l;
  while ((s->op == TPU_OP_RESHAPE || s->op == TPU_OP_BITCAST) && s->noperands == 1 && !s->shape.layout_tail)
    s = s->operands[0];
  if (!tpu_dtype_is_array(s->shape.dtype) || s->shape.layout_tail || tpu_shape_numel(&s->shape) <= 1) return 0;
  /* the source's dimensions, one atom each (size-1 dimensions hold no order) */
  atom at[MAX_ATOMS];
  int n = 0;
  for (int d = 0; d < s->shape.rank; d++)
    if (s->shape.dims[d] > 1) at[n++] = (atom){s->shape.dims[d], d, -1, -1, 0};
  if (n == 0) return 0;
  /* split by the transpose operand's dimensions; then the source's order is fixed */
  if (!refine(at, &n, &l->shape, 0)) return 0;
  for (int k = 0; k < n; k++) at[k].sk = k;
  /* the transposed sequence: result dimension i of the transpose is operand dimension perm[i] */
  atom f[MAX_ATOMS];
  int m = 0; /* f: the atoms in the transpose's result order */
  for (int i = 0; i < t->shape.rank; i++)
    for (int k = 0; k < n; k++)
      if (at[k].ld == (int)t->dimensions.v[i]) f[m++] = at[k];
  if (m != n) return 0;
  /* split by the reshape's dimensions: splits keep both orders, so a split atom's pieces keep
   * its source rank (ties broken by position) */
  int sk[MAX_ATOMS];
  for (int k = 0; k < m; k++) sk[k] = f[k].sk;
  atom g[MAX_ATOMS];
  for (int k = 0; k < m; k++) g[k] = f[k];
  int ng = m;
  {
    /* refine g by the result's dimensions, carrying each piece's source rank */
    atom out[MAX_ATOMS];
    int o = 0, i = 0;
    int64_t carry = g[0].size;
    for (int d = 0; d < r->shape.rank; d++) {
      int64_t need = r->shape.dims[d];
      while (need > 1) {
        if (i >= ng || o >= MAX_ATOMS) return 0;
        atom x = g[i];
        int64_t take = carry <= need ? carry : need;
        if (carry <= need ? need % carry : carry % need) return 0;
        x.size = take;
        x.rd = d;
        x.sk = sk[i] * MAX_ATOMS + o; /* pieces of one atom stay in order */
        out[o++] = x;
        if (carry <= need) {
          need /= carry;
          if (++i < ng) carry = g[i].size;
        } else {
          carry /= need;
          need = 1;
        }
      }
    }
    for (int k = 0; k < o; k++) g[k] = out[k];
    ng = o;
  }
  /* A bitcast exists for some layouts of both sides when the memory sequence can run through
   * every source dimension's atoms in order and every result dimension's atoms in order: the
   * atom after x in memory is its successor in its source dimension and its successor in its
   * result dimension where it has them (then the same one), and the first atom of the other
   * side's next dimension where it has only one of them. */
  for (int a = 0; a < ng; a++) {
    int ssucc = -1, rsucc = -1, best = -1;
    for (int b = 0; b < ng; b++) /* the next atom of a's source dimension, in source order */
      if (b != a && g[b].sd == g[a].sd && g[b].sk > g[a].sk && (best < 0 || g[b].sk < g[best].sk)) best = b;
    ssucc = best;
    if (a + 1 < ng && g[a + 1].rd == g[a].rd) rsucc = a + 1;
    if (ssucc >= 0 && rsucc >= 0 && ssucc != rsucc) return 1;
    if (ssucc >= 0 && rsucc < 0 && ssucc > 0 && g[ssucc - 1].rd == g[ssucc].rd) return 1; /* not first of its result dim */
    if (rsucc >= 0 && ssucc < 0) {
      /* rsucc must open its source dimension */
      for (int b = 0; b < ng; b++)
        if (b != rsucc && g[b].sd == g[rsucc].sd && g[b].sk < g[rsucc].sk) return 1;
    }
  }
  return 0;
}
