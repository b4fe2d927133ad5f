/* scatter_form.c: which form the XLA TPU compiler's scatter kernel takes, staged in VMEM or row by row. */
#include "backend.h"

/* The XLA TPU compiler's scatter kernel (a lone scatter in tpusim's own compilation, a
 * kCustom scatter_fusion in the compiler's programs; its result aliases operand 0) takes
 * one of two forms, as the VMEM it reserves shows (used_scoped_memory_configs, libtpu
 * compile-only probes of f32[N,D] scatter-add of M rows, bench/fidelity/probes/scatter_form.py):
 *
 *  - staged: the whole operand, widened to 32-bit elements, sits in VMEM beside a chunk of
 *    min(M, 1024) update rows: (N padded to the sublanes + chunk) rows of 4 x D (lanes
 *    padded) bytes — v5e D=768 M=512: N=1000 4,644,864 B = 1512 rows of 3,072 B; M=4096:
 *    chunks of 1024 rows (the families corpus: scatter_add_1000x128_m4096_bf16 1,036,288 B
 *    = 2024 rows of 512 B, scatter_set_197x1024_m4096_f32 5,013,504 B = 1224 rows of
 *    4,096 B). The kernel reads the operand once, combines every update in VMEM and
 *    writes the operand back: HBM moves the whole operand twice and the updates once.
 *  - row by row: otherwise a fixed 272 rows of scratch (v5e f32 D=768: 835,584 B, for
 *    M = 16 to 4096 and N from 4,302 to 50,257); each update reads and writes back its row
 *    of the operand in HBM: HBM moves the updates' rows three times (update, row in, row
 *    out), the operand's other rows not at all.
 *
 * A scatter of one update is neither: XLA's ScatterExpander (kEliminateSimpleScatters)
 * makes it a loop of one trip, a dynamic-update-slice of the combined row
 * (scatter_add_1000x128_m1_f32's compiled dynamic-update-slice.1), in place like the
 * row-by-row form.
 *
 * The compiler stages the operand while operand and chunk fit the kernel's scoped VMEM
 * less the room it keeps beside them: the largest staged f32 operands (M=512) are, on v5e
 * (16 MiB), 30,541 rows of D=128 (15,900,672 B staged; 30,546 rows go row by row), 14,939
 * of D=256 (15,826,944 B) and 4,295 of D=768 (14,770,176 B), v4 4,294 of D=768 alike; on
 * v6e (32 MiB) 62,867 of D=128 (32,452,608 B) and 9,619 of D=768 (31,137,792 B). Taking
 * that room as a second chunk (the updates double-buffered) and 1/40 of the scoped VMEM
 * (left beside them: v5e D=256 416 KiB, D=768 424 KiB; v6e D=128 820 KiB, D=768 824 KiB;
 * 1/40 is 410 and 819 KiB) decides these probes but v5e D=128 (600 KiB left) between
 * 30,546 and about 30,900 rows. (Not modelled: with M=1024 the compiler shrinks the chunk
 * to what is left, v5e D=768 staging up to 4,395 rows with 408-row chunks.) */
#define SCATTER_CHUNK_ROWS 1024   /* update rows staged at once (M = 4096 probes) */

/* Bytes of shape s laid out with 32-bit elements (a 16-bit or 8-bit scatter's operand is
 * staged widened: scatter_add_1000x128_m4096_bf16's 2024 rows of 512 B). */
static int64_t widened_bytes(const tpu__be *be, const tpu_shape *s) {
  tpu_shape w = *s;
  if (tpu_dtype_is_array(w.dtype) && tpu_dtype_size(w.dtype) < 4) w.dtype = TPU_F32;
  return tpu__padded_bytes(be, &w);
}

/* The updates' count: the indices' elements over the index vector's length. */
static int64_t scatter_updates(const tpu_instr *sc) {
  int nops = (sc->noperands - 1) / 2;
  const tpu_shape *ix = &sc->operands[nops]->shape;
  int64_t n = tpu_shape_numel(ix);
  int64_t ivd = sc->scatter->index_vector_dim;
  if (ivd >= 0 && ivd < ix->rank && ix->dims[ivd] > 0) n /= ix->dims[ivd];
  return n > 0 ? n : 1;
}

int tpu__scatter_staged(const tpu__be *be, const tpu_instr *sc) {
  if (!sc || sc->op != TPU_OP_SCATTER || sc->noperands < 3) return 0;
  int nops = (sc->noperands - 1) / 2;
  int64_t budget = be->chip->scoped_vmem_bytes > 0 ? be->chip->scoped_vmem_bytes : be->chip->vmem_bytes * 3 / 4;
  int64_t operand = 0, chunk = 0, m = scatter_updates(sc);
  if (m <= 1) return 0;
  for (int j = 0; j < nops; j++) {
    operand += widened_bytes(be, &sc->operands[j]->shape);
    int64_t u = widened_bytes(be, &sc->operands[nops + 1 + j]->shape);
    chunk += m > SCATTER_CHUNK_ROWS ? u / m * SCATTER_CHUNK_ROWS : u;
  }
  return operand + 2 * chunk + budget / 40 <= budget;
}

/* A staged scatter onto a broadcast scalar (a segment sum's or an embedding gradient's
 * zeros): the XLA TPU compiler fuses the broadcast into the scatter kernel (the compiled
 * segment_sum_m16x64_n197_bf16's and embedding_grad_8192x64_m16_bf16's
 * scatter_custom_fusion take constants, not an array, as the operand), which fills its
 * VMEM copy of the operand and reads none of it from HBM. */
int tpu__scatter_fills(const tpu__be *be, const tpu_instr *sc, int j) {
  if (!tpu__scatter_staged(be, sc) || j < 0 || j >= (sc->noperands - 1) / 2) return 0;
  const tpu_instr *o = sc->operands[j];
  while (o->op == TPU_OP_BITCAST && o->noperands == 1) o = o->operands[0];
  return o->op == TPU_OP_BROADCAST && o->noperands == 1 && tpu_shape_numel(&o->operands[0]->shape) <= 1;
}

/* Whether `u` updates value v in place: a dynamic-update-slice or a scatter of more than one
 * update on v (operand 0), or a fusion whose root is one on the parameter v feeds. */
static int updates_in_place(const tpu_instr *u, const tpu_instr *v) {
  if (u->noperands < 1) return 0;
  if (u->op == TPU_OP_DYNAMIC_UPDATE_SLICE) return u->operands[0] == v;
  if (u->op == TPU_OP_SCATTER) return u->operands[0] == v && scatter_updates(u) > 1;
  if (u->op != TPU_OP_FUSION || !u->calls || !u->calls->root) return 0;
  const tpu_instr *r = u->calls->root;
  if ((r->op != TPU_OP_DYNAMIC_UPDATE_SLICE && r->op != TPU_OP_SCATTER) || r->noperands < 1 ||
      r->operands[0]->op != TPU_OP_PARAMETER)
    return 0;
  int64_t k = r->operands[0]->index;
  return k >= 0 && k < u->noperands && u->operands[k] == v;
}

/* A copy of an entry parameter in its own layout that a kernel reads besides the one that
 * updates it in place: the XLA TPU compiler's memory-space assignment keeps it in VMEM on a
 * chip whose one TensorCore has no CMEM beside it (v5e, v6e), where it fits. The copy is then
 * the DMA engines' transfer from HBM into VMEM (a `copy` into S(1) with no kernel: no
 * window_config, no estimated_cycles), the update writes VMEM and an asynchronous copy-start
 * takes the result back to HBM. The compiled families corpus shows it on v5e and v6e for
 * every non-donated scatter of one update (ScatterExpander's row read and dynamic-update-slice:
 * scatter_set_50257x128_m1_bf16's copy.3, 12,865,792 B; scatter_add_axis1_768x50257_m1_bf16's
 * 77,194,752 B) and at_set_cache_b1s2048h16d64_bf16's copy.6; a copy that only its in-place
 * update reads stays a vector kernel from HBM to HBM with its estimated_cycles (every
 * dus_cache_* and scatter of many updates, 1 MiB to 128 MiB), as do all of them on v4 (into
 * CMEM) and v5p (HBM). It moves the bytes in and out at the HBM rate, no kernel start, none of
 * a vector kernel's stream costs. */
int tpu__copy_via_vmem(const tpu__be *be, const tpu_instr *in) {
  const tpu_chip *ch = be->chip;
  if (!in || in->op != TPU_OP_COPY || in->noperands != 1 || !in->parent || ch->tensorcores > 1 || ch->cmem_bytes > 0)
    return 0;
  const tpu_instr *p = in->operands[0];
  if (p->op != TPU_OP_PARAMETER || p->parent != in->parent || in->parent != be->m->entry) return 0;
  const tpu_shape *a = &p->shape, *b = &in->shape;
  if (a->rank != b->rank || a->has_layout != b->has_layout) return 0;
  for (int d = 0; a->has_layout && d < a->rank; d++)
    if (a->minor_to_major[d] != b->minor_to_major[d]) return 0; /* a relayout: a kernel */
  if (ch->vmem_bytes <= 0 || tpu__padded_bytes(be, &in->shape) > ch->vmem_bytes) return 0;
  for (int i = 0; i < in->parent->ninstrs; i++) {
    const tpu_instr *u = in->parent->instrs[i];
    if (u == in || u->op == TPU_OP_TUPLE || u->op == TPU_OP_GET_TUPLE_ELEMENT || u->op == TPU_OP_BITCAST) continue;
    for (int o = 0; o < u->noperands; o++) {
      const tpu_instr *v = u->operands[o];
      if (v != in && v != p) continue;
      if (v == in && u->op == TPU_OP_SCATTER && o == 0 && scatter_updates(u) <= 1) return 1;
      if (!updates_in_place(u, v)) return 1;
    }
  }
  return 0;
}

/* Whether `in` runs inside the scatter kernel that alone reads it, as the XLA TPU compiler's
 * kCustom scatter fusion takes its operands' producers in (segment_sum_m16x64_n197_bf16's
 * scatter_custom_fusion holds the broadcast of its zeros and the reshape of its indices
 * s32[16] -> s32[16,1]): a broadcast scalar a staged scatter fills its operand with
 * (tpu__scatter_fills), or a reshape or bitcast of its indices, read in their own layout. No
 * kernel of its own. */
int tpu__scatter_fused_operand(const tpu__be *be, const tpu_instr *in) {
  if (!in->parent || (in->op != TPU_OP_BROADCAST && in->op != TPU_OP_RESHAPE && in->op != TPU_OP_BITCAST) ||
      in->noperands != 1 || in->parent->root == in)
    return 0;
  const tpu_instr *sc = NULL;
  int at = -1;
  for (int i = 0; i < in->parent->ninstrs; i++) {
    const tpu_instr *u = in->parent->instrs[i];
    for (int o = 0; o < u->noperands; o++)
      if (u->operands[o] == in) {
        if (sc) return 0; /* a second reader */
        sc = u, at = o;
      }
  }
  if (!sc || sc->op != TPU_OP_SCATTER || sc->noperands < 3) return 0;
  int nops = (sc->noperands - 1) / 2;
  if (in->op == TPU_OP_BROADCAST) return at == 0 && tpu__scatter_fills(be, sc, 0);
  return at == nops;
}
