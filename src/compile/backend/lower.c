/* Back-end pass `lower` and the back-end driver: each kernel becomes a software-pipelined
 * tile loop in the tpusim ISA (docs/isa.md); control flow becomes loop/cond. */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "compile/backend/backend.h"
#include "ir/collective.h"
#include "ir/custom_call.h"

static int64_t cdiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : a; }

/* A kernel as a template: loads run one iteration ahead of the body (double buffering).
 * In templates a VMEM reference's `div` is the iteration divisor q of its slot index
 * (the slot advances every q iterations); lowering turns it into the real reference. */
#define MAX_TMPL 64
typedef struct {
  tpu_insn ins[MAX_TMPL];
  int is_load[MAX_TMPL];
  int n;
} tmpl;

static int emit(tpu__be *be, const tpu_insn *in) {
  return tpu_program_add_insn(be->p, in) < 0
             ? (TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory"), 0)
             : 1;
}

static void tadd(tmpl *t, const tpu_insn *in, int is_load) {
  if (t->n < MAX_TMPL) {
    t->ins[t->n] = *in;
    t->is_load[t->n++] = is_load;
  }
}

/* mode 0: a single iteration or the prologue (fixed slot 0); 1: inside the loop;
 * 2: the epilogue (iteration T-1). */
static tpu_vref fix(const tpu__be *be, tpu_vref r, int is_load, int mode, int64_t T) {
  if (r.buf < 0) return r;
  int q = r.div > 0 ? r.div : 1;
  int ns = be->p->vmem[r.buf].nslots;
  if (mode == 0) return tpu_vref_make(r.buf, 0, 0);
  /* A load in iteration i fills tile i+1's slot; a load whose slot advances every q
   * iterations runs only when (i+1) % q == 0 (its predicate), where (i+1)/q == i/q + 1. */
  if (mode == 1) return is_load ? tpu_vref_make(r.buf, q, 1) : tpu_vref_make(r.buf, q, 0);
  return tpu_vref_make(r.buf, 0, (int)(((T - 1) / q) % ns));
}

static tpu_status emit_part(tpu__be *be, const tmpl *t, int loads, int mode, int64_t T) {
  for (int i = 0; i < t->n; i++) {
    if (t->is_load[i] != loads) continue;
    tpu_insn in = t->ins[i];
    for (int s = 0; s < TPU_INSN_MAX_SRC; s++) in.src[s] = fix(be, in.src[s], loads, mode, T);
    in.dst = fix(be, in.dst, loads, mode, T);
    if (mode != 1) in.pmod = in.prem = 0;
    if (!emit(be, &in)) return TPU_ERR_NOMEM;
  }
  return TPU_OK;
}

/* The in-step copies into VMEM of the parameters kernel `in` is the first to read
 * (tpu__kinfo.spf): whole-parameter transfers marked prefetch=2, which take the HBM port's
 * gaps from the step's start, in pieces so they fit between other transfers; then the
 * kernel waits for the last piece (the compiler's copy-done). A copy beside its first
 * reader (spf_beside) is emitted after that reader's transfers (`after`), so it takes the
 * gaps they leave; the next reader waits for it. */
#define SPF_PIECE ((int64_t)256 << 10)
static tpu_status emit_step_prefetch(tpu__be *be, const tpu_instr *in, const tpu__kinfo *k, int after) {
  int gi = tpu__be_index(be, in);
  for (int j = 0; j < in->noperands; j++) {
    tpu__kinfo *kp = tpu__be_info(be, in->operands[j]);
    if (!kp || !kp->spf) continue;
    int dup = 0;
    for (int o = 0; o < j; o++) dup |= in->operands[o] == in->operands[j];
    if (dup) continue;
    int first = kp->spf_reader == gi;
    int copy = first && kp->spf_beside == after;
    int64_t at = -1;
    if (copy) {
      int64_t size = tpu__padded_bytes(be, &in->operands[j]->shape);
      int64_t pieces = cdiv(size, SPF_PIECE);
      if (pieces > 256) pieces = 256;
      int64_t per = cdiv(size, pieces);
      int hbm = tpu__be_buffer_of(be, in->operands[j], 0);
      for (int64_t q = 0; q < pieces; q++) {
        tpu_insn d = tpu_insn_make(TPU_ISA_DMA_IN, k->op);
        d.hbm = hbm;
        d.bytes = q + 1 < pieces ? per : size - per * (pieces - 1);
        d.dst = tpu_vref_make(kp->spf_buf, 1, 0);
        d.prefetch = 2;
        if (!emit(be, &d)) return TPU_ERR_NOMEM;
      }
      if (kp->spf_beside) kp->spf_last = be->p->ninsns - 1;
      else at = be->p->ninsns - 1;
    } else if (!first && !after && kp->spf_beside && kp->spf_last >= 0) {
      at = kp->spf_last;
    }
    if (at < 0) continue;
    tpu_insn w = tpu_insn_make(TPU_ISA_WAIT, -1);
    w.at = at;
    if (!emit(be, &w)) return TPU_ERR_NOMEM;
  }
  return TPU_OK;
}

static tpu_status emit_kernel(tpu__be *be, const tpu_instr *in, const tpu__kinfo *k, const tmpl *t) {
  tpu_insn kin = tpu_insn_make(TPU_ISA_KERNEL, k->op);
  if (!emit(be, &kin)) return TPU_ERR_NOMEM;
  TPU_TRY(emit_step_prefetch(be, in, k, 0));
  int64_t T = k->tiles;
  if (T <= 1) {
    TPU_TRY(emit_part(be, t, 1, 0, T));
    TPU_TRY(emit_part(be, t, 0, 0, T));
    return emit_step_prefetch(be, in, k, 1);
  }
  TPU_TRY(emit_part(be, t, 1, 0, T)); /* prologue: the first tiles' loads */
  tpu_insn lp = tpu_insn_make(TPU_ISA_LOOP, k->op);
  lp.trips = T - 1;
  if (!emit(be, &lp)) return TPU_ERR_NOMEM;
  TPU_TRY(emit_part(be, t, 1, 1, T)); /* loads of tile i+1 ... */
  TPU_TRY(emit_part(be, t, 0, 1, T)); /* ... overlap compute and stores of tile i */
  tpu_insn en = tpu_insn_make(TPU_ISA_END, k->op);
  if (!emit(be, &en)) return TPU_ERR_NOMEM;
  TPU_TRY(emit_part(be, t, 0, 2, T)); /* epilogue: the last tile */
  return emit_step_prefetch(be, in, k, 1);
}

/* Vector work of one unit as an instruction template. */
static void add_vec(tmpl *t, tpu_isa_op opc, const tpu__kinfo *k, int64_t total, int64_t space,
                    int64_t iters, const tpu_vref *src, int nsrc, tpu_vref dst, int pmod, int prem) {
  tpu_insn in = tpu_insn_make(opc, k->op);
  for (int s = 0; s < nsrc && s < TPU_INSN_MAX_SRC; s++) in.src[s] = src[s];
  in.dst = dst;
  in.vregs = cdiv(space, iters);
  in.ops = space > 0 ? cdiv(total, space) : 0;
  in.what = k->what;
  in.pmod = pmod;
  in.prem = prem;
  tadd(t, &in, 0);
}

/* The per-element stream costs of an operand read where it lives in VMEM, or of a matmul's
 * result kept there: the XLA TPU compiler still charges them, at the HBM streaming rate
 * (bf16[8192,512] x [512,2048] with relu: 245,115 cycles on v5e with its result in HBM,
 * 176,448 with it in VMEM — the 2 bytes per element of the transfer saved, the 4-byte pass
 * not; a kernel reading a VMEM-resident bf16[4096,4096] and writing it to HBM pays its
 * write and the pass, 7.2 bytes per element on v6e). Such a transfer is a `dma` marked
 * `onchip`: no HBM buffer, no bytes moved, only its share of the op's stream costs
 * (docs/isa.md). A vector kernel whose result stays in VMEM gets none: it pays its stream
 * costs only on the reads it makes from HBM (the compiler's transpose of bf16[4096,4096]
 * into VMEM on v6e costs 8.5 bytes per element, its read with that share 8.8, its read and
 * the whole costs 15.5). */
static void add_onchip(tmpl *t, tpu_isa_op opc, const tpu__kinfo *k, int64_t bytes, tpu_vref slot, int pmod, int prem) {
  tpu_insn d = tpu_insn_make(opc, k->op);
  d.onchip = 1;
  d.bytes = bytes;
  if (opc == TPU_ISA_DMA_IN) d.dst = slot;
  else d.src[0] = slot;
  d.pmod = pmod;
  d.prem = prem;
  tadd(t, &d, opc == TPU_ISA_DMA_IN);
}

static tpu_status lower_stream(tpu__be *be, const tpu_instr *in, const tpu__kinfo *k) {
  tmpl t;
  t.n = 0;
  if (k->vcopy_windows > 0) { /* the compiler's windowed copy within VMEM (tile.c): one piece */
    tpu_insn kin = tpu_insn_make(TPU_ISA_KERNEL, k->op), x = tpu_insn_make(TPU_ISA_XLU, k->op);
    x.vregs = k->vcopy_windows;
    x.ops = k->vcopy_ops > 0 ? k->vcopy_ops : 100;
    x.what = k->what;
    if (!emit(be, &kin)) return TPU_ERR_NOMEM;
    TPU_TRY(emit_step_prefetch(be, in, k, 0));
    if (!emit(be, &x)) return TPU_ERR_NOMEM;
    return emit_step_prefetch(be, in, k, 1);
  }
  int64_t T = k->tiles;
  int nin = k->nvmem - 1, seq = 0;
  double fin, fout;
  tpu__scan_window_factors(be, in, &fin, &fout);
  int vout = k->vmem0 + nin;
  /* A kernel whose result stays in VMEM and that reads nothing from HBM itself (its
   * parameters copied in by the step's own copies, its other operands kept) is resident:
   * the timing charges its whole stream costs once (chip/timing.c resident_cycles), not a
   * share spread over its parameters' on-chip reads. The XLA TPU compiler times such a kernel alike
   * whatever its small operand is: v5e f32[32,128,512] kept in VMEM times a f32[512] scale
   * into VMEM, 23,565 cycles with the scale a constant, 23,569 copied in from a parameter,
   * 23,569 from a convert kernel (v6e 6,024 / 6,026 / 6,026); tpusim charged 21,894 / 3,261 /
   * 22,422 before (libtpu probes, docs/timing.md Resident kernels). */
  int on_chip = k->vres;
  /* (a parameter tpusim's own compilation prefetched, not probed, keeps the spread share:
   * counting it moved the families own test p90 the wrong way, v6e 38.8 -> 46.3 %) */
  for (int j = 0; on_chip && j < in->noperands; j++) {
    const int w = tpu__read_bytes(be, in, j) ? tpu__be_reads_vmem(be, in->operands[j], in) : 1;
    if (!w || (w == 2 && !tpu__be_copied_in(in->operands[j]))) on_chip = 0;
  }
  for (int j = 0; j < in->noperands; j++) {
    int64_t r = tpu__read_bytes(be, in, j);
    if (!r) continue;
    int buf = k->vmem0 + (seq < 2 ? seq : 2);
    seq++;
    int where = tpu__be_reads_vmem(be, in->operands[j], in);
    if (where) { /* read in VMEM where it lives (a kernel whose result stays there too and
                  * that reads HBM pays for the parameters copied in, not for the values kept) */
      if ((!k->vres || (where == 2 && !on_chip)) && k->op >= 0 && (be->p->ops[k->op].xbytes > 0 || be->chip->vmem_read_cost > 0) &&
          !tpu__scan_result_copy(in))
        add_onchip(&t, TPU_ISA_DMA_IN, k, cdiv(r, T), tpu_vref_make(buf, 1, 0), 0, 0);
      continue;
    }
    if (j == 0) r = (int64_t)ceil((double)r * fin); /* a short scan's halo (scan_window.c) */
    tpu_insn d = tpu_insn_make(TPU_ISA_DMA_IN, k->op);
    d.hbm = tpu__be_buffer_of(be, in->operands[j], 0);
    d.bytes = cdiv(r, T);
    d.dst = tpu_vref_make(buf, 1, 0);
    tadd(&t, &d, 1);
  }
  tpu_vref src[3];
  for (int j = 0; j < nin && j < 3; j++) src[j] = tpu_vref_make(k->vmem0 + j, 1, 0);
  tpu_vref out = tpu_vref_make(vout, 1, 0);
  /* The tile's cross-lane (XLU) and transcendental (EUP) work read the tile's inputs and
   * none waits for another's result; the VPU instruction writes the result the store waits
   * for. The XLU works beside the VPU; the EUP's pushes take the VPU's issue slots, so the
   * timing adds their cycles (chip/timing.c; XLA's cost model: 64 chained exp(y) * 0.5 of
   * f32[4096,4096] on v5e, 800,604 cycles, the exps' 524,288 and the multiplies' 262,144). */
  tpu_vref none = tpu_vref_make(-1, 1, 0);
  if (k->xlu) add_vec(&t, TPU_ISA_XLU, k, k->xlu, k->space_vregs, T, src, nin, none, 0, 0);
  if (k->eup) add_vec(&t, TPU_ISA_EUP, k, k->eup, k->space_vregs, T, src, nin, none, 0, 0);
  add_vec(&t, TPU_ISA_VPU, k, k->vpu, k->space_vregs, T, src, nin, out, 0, 0);
  int nl = tpu__leaves(&in->shape);
  /* a kernel writing into VMEM for the program's own copies out (vmem_assign.c
   * mark_evictions) writes on chip, at the chip's cost of VMEM access (timing.c) */
  if ((k->evict || k->evict_leaves) && k->op >= 0) be->p->ops[k->op].vmem_write = 1;
  for (int l = 0; l < nl && !k->vres; l++) {
    int64_t w = tpu__write_bytes(be, in, l);
    if (!w) continue;
    if (k->evict || (l < 64 && (k->evict_leaves >> l & 1))) {
      add_onchip(&t, TPU_ISA_DMA_OUT, k, cdiv(w, T), out, 0, 0);
      continue;
    }
    w = (int64_t)ceil((double)w * fout);
    tpu_insn d = tpu_insn_make(TPU_ISA_DMA_OUT, k->op);
    d.src[0] = out;
    d.hbm = k->hbm0 >= 0 ? k->hbm0 + l : tpu__be_buffer_of(be, in, l);
    d.bytes = cdiv(w, T);
    tadd(&t, &d, 0);
  }
  return emit_kernel(be, in, k, &t);
}

/* Does matmul kernel `in` find the block of its lhs (j = 0) or rhs (j = 1) on chip: its
 * source kept or copied there, or, where the kernel computes that operand itself (source
 * unknown) and the other side's source is known, every operand besides that source read
 * on chip, or none read at all (a convolution of a broadcast constant)? The compiler's
 * matmul kernels pay nothing for such blocks: attention's probabilities times V with the
 * f32 scores and row maxima in VMEM, attn_fwd_b8h12s512d64 on v5e, 57,496 cycles, the
 * MXU's work; with the scores in HBM and V copied in, its blocks stream from HBM. With both
 * sources unknown, operands 0 and 1 stand for them. */
static int on_chip_block(const tpu__be *be, const tpu_instr *in, const tpu__kinfo *k, int j) {
  int src = j ? k->mm_rhs : k->mm_lhs, other = j ? k->mm_lhs : k->mm_rhs;
  if (src < 0 && other < 0 && j < in->noperands) src = j;
  if (src >= 0) return tpu__be_reads_vmem(be, in->operands[src], in) != 0;
  for (int o = 0; o < in->noperands; o++)
    if (o != other && tpu__read_bytes(be, in, o) && !tpu__be_reads_vmem(be, in->operands[o], in)) return 0;
  return 1;
}

/* Does matmul kernel k run a grouped convolution (its steps, tile_conv.c group_steps) whose
 * result either is whole unpacked 32-bit registers kept in VMEM for the next kernel
 * (vmem_assign.c), an f32 result with the batch filling the sublanes, or runs on a chip
 * whose compiler times such matmul kernels at the rows they stream (mxu_fill_hidden: v6e,
 * tile_conv.c tpu__conv_group_window) with its operand and result, in the grouped layout, within half
 * the kernel's share of VMEM (one window of the compiler's: libtpu probes, v6e, bf16
 * [B,H,H,256] in 8 groups, 1x1: B = 8, H = 14 (12.8 MB) 4,160 cycles, 2.7 a step; the
 * compiled families' one-window kernels 2.3-4.6 a step, tune gconv_b2_14x14_c512to512_g8_k3_f32
 * 3,772 cycles for 1,568 steps; windowed ones keep the floor: B = 8, H = 28 (51 MB) 29,308,
 * 4.7 a step, tune gconv_b4_28x28_c512to512_g16_k1_f32 5.0; between them B = 8, H = 20 (26 MB)
 * one window, 2.3 a step, and B = 4, H = 28 (26 MB) two, 3.5 a step; at batch 1, no merge
 * copy after it, [1,14,14,256] 3x3 2,280 cycles, 1.5 a step)? The XLA TPU compiler's cost
 * model then charges its MXU work, not conv_group_step_cycles a step: libtpu probes outside
 * the corpora, [B,H,W,C] x [k,k,C/G,Co] in G groups, f32, result in S(1): v5e B8 14x14 C256
 * G8 k1 3,392 cycles (1,568 steps, 2.2 a step; its MXU passes 3,136), 28x28 14,336, k3 9,664,
 * B16 7,296; v6e 4,160 / 16,512 / 7,296 (B16 7,296; the step floor there 5.1). The floor
 * stays for a bf16 result (packed rows: B8 14x14 G8 k1 bf16 18,251 on v5e), a batch under the
 * sublanes (f32 B2 14x14 G8 k3 18,476 on v5e), and a result written to HBM or v4's CMEM
 * (f32 B8 14x14 G8 k1: v5p 13,195, 8.4 a step; v4 31,772; the 128-feature groups of f32
 * B8 14x14 C256 G4, no merge copy after them, 15,088 on v5e). */
/* Bytes of s in a grouped convolution's layout: the features (fd) in the lanes, the batch
 * (bd) in the sublanes in tiles of its rows (2, 4, 8 or whole 8-row tiles; a packed bf16 tile
 * holds twice the rows in the same bytes), 32-bit words, the other dimensions major. */
static int64_t group_layout_bytes(const tpu_shape *s, int bd, int fd) {
  if (bd < 0 || fd < 0 || bd >= s->rank || fd >= s->rank) return 0;
  int64_t rows = s->dims[bd], r = 1;
  while (r < rows && r < 8) r *= 2;
  if (rows > 8) r = cdiv(rows, 8) * 8;
  int64_t n = r * 128 * 4 * cdiv(s->dims[fd], 128);
  for (int d = 0; d < s->rank; d++)
    if (d != bd && d != fd) n *= s->dims[d];
  return n;
}

static int group_rows_on_chip(const tpu__be *be, const tpu__kinfo *k) {
  const tpu_instr *mm = k->mm;
  if (!mm || mm->op != TPU_OP_CONVOLUTION || !mm->has_conv_dims || mm->shape.dtype == TPU_TUPLE ||
      !tpu__conv_group_window(mm))
    return 0;
  int64_t sub = be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8;
  int64_t batch = mm->shape.dims[mm->conv->out_batch];
  if (k->vres && tpu_dtype_size(mm->shape.dtype) == 4 && batch > 0 && batch % sub == 0) return 1;
  if (!be->chip->mxu_fill_hidden || mm->noperands < 1) return 0;
  const tpu_conv_dims *cd = mm->conv;
  int64_t bytes = group_layout_bytes(&mm->operands[0]->shape, (int)cd->in_batch, (int)cd->in_feature) +
                  group_layout_bytes(&mm->shape, (int)cd->out_batch, (int)cd->out_feature);
  return bytes <= tpu__vmem_budget(be->chip) / 2;
}

static tpu_status lower_matmul(tpu__be *be, const tpu_instr *in, const tpu__kinfo *k) {
  tmpl t;
  t.n = 0;
  int va = k->vmem0, vb = k->vmem0 + 1, vo = k->vmem0 + 2, ve = k->nvmem > 3 ? k->vmem0 + 3 : -1;
  int pm = k->kb > 1 ? (int)k->kb : 0, pr = k->kb > 1 ? (int)k->kb - 1 : 0;
  /* a streamed epilogue (schedule.c: es pieces per output block, one K step): the block's
   * product, computed with its first piece, stays in the output slot for all of them */
  int es = k->es > 1 ? (int)k->es : 1, od = (int)k->kb * es;
  for (int j = 0; j < 2; j++) {
    int64_t bytes = be->p->vmem[j ? vb : va].slot_bytes;
    int src = j ? k->mm_rhs : k->mm_lhs;
    if (!bytes || on_chip_block(be, in, k, j)) continue;
    if (src < 0 && j < in->noperands) src = j; /* sources unknown: operands 0 and 1 */
    /* A block that stays for q iterations loads when the next tile starts a new one. */
    int64_t q = j ? k->qb : k->qa;
    int pmod = q > 1 ? (int)q : 0, prem = q > 1 ? (int)q - 1 : 0;
    tpu_insn d = tpu_insn_make(TPU_ISA_DMA_IN, k->op);
    d.hbm = src >= 0 ? tpu__be_buffer_of(be, in->operands[src], 0) : -1;
    d.bytes = bytes;
    d.dst = tpu_vref_make(j ? vb : va, (int)q, 0);
    d.pmod = pmod;
    d.prem = prem;
    tadd(&t, &d, 1);
  }
  /* Epilogue operands: one output block's slice each, loaded with the block's first
   * K step (in iteration i the loads are tile i+1's: predicate (i+1) % kb == 0). */
  int64_t oblocks = k->tiles / (k->kb > 0 ? k->kb : 1);
  int nepi = 0;
  for (int j = 0; ve >= 0 && j < in->noperands; j++) {
    if (j == k->mm_lhs || j == k->mm_rhs) continue;
    if ((k->mm_lhs < 0 || k->mm_rhs < 0) && j < 2) continue;
    int64_t r = tpu__read_bytes(be, in, j);
    if (!r || tpu__be_reads_vmem(be, in->operands[j], in)) continue;
    tpu_insn d = tpu_insn_make(TPU_ISA_DMA_IN, k->op);
    d.hbm = tpu__be_buffer_of(be, in->operands[j], 0);
    d.bytes = cdiv(r, oblocks);
    d.dst = tpu_vref_make(ve, (int)k->kb, 0);
    d.pmod = pm;
    d.prem = pr;
    if (++nepi > 16) { /* keep the template bounded: fold the rest into the last load */
      t.ins[t.n - 1].bytes += d.bytes;
      continue;
    }
    tadd(&t, &d, 1);
  }
  tpu_insn mm = tpu_insn_make(TPU_ISA_MATMUL, k->op);
  mm.src[0] = tpu_vref_make(va, (int)k->qa, 0);
  mm.src[1] = tpu_vref_make(vb, (int)k->qb, 0);
  mm.dst = tpu_vref_make(vo, od, 0);
  if (es > 1) {
    mm.pmod = es;
    mm.prem = 0;
  }
  mm.m = k->bm;
  mm.k = k->bk;
  mm.n = k->bn;
  mm.b = k->bb;
  mm.mxus = (int)(be->chip->mxus_per_core * be->chip->tensorcores);
  mm.passes = k->passes;
  mm.dtype = k->mm_dtype;
  mm.i8_wide = k->mm_i8_wide;
  if (k->steps > 0 && !group_rows_on_chip(be, k)) { /* the grouped convolution's steps, spread over the tiles */
    int64_t runs = k->tiles / (es > 1 ? es : 1);
    mm.steps = cdiv(k->steps, runs > 0 ? runs : 1);
  }
  if (k->min_cycles > 0) { /* the input-dilated convolution's least time, likewise */
    int64_t runs = k->tiles / (es > 1 ? es : 1);
    mm.min_cycles = (int64_t)ceil(k->min_cycles / (double)(runs > 0 ? runs : 1));
  }
  mm.what = k->mm->op == TPU_OP_DOT ? "dot" : "convolution";
  tadd(&t, &mm, 0);
  /* The fusion's other dots run on the MXUs in every tile too, each tile its share of
   * their rows (a Pallas attention kernel's score and value dots per block of keys): whole
   * products per tile while there are at least as many as tiles, else rows of one. */
  tpu__xdot xd[TPU__XDOT_MAX];
  int nx = k->mm == in ? 0 : tpu__fusion_xdots(be, in, k->mm, xd);
  int64_t tiles = k->tiles > 0 ? k->tiles : 1;
  for (int i = 0; i < nx; i++) {
    tpu_insn x = mm;
    x.pmod = x.prem = 0; /* every tile its share, a streamed epilogue's pieces too */
    int per = xd[i].prods >= tiles;
    x.b = per ? cdiv(xd[i].prods, tiles) : 1;
    x.m = cdiv(xd[i].rows, tiles * x.b);
    if (x.m < 1) x.m = 1;
    x.k = xd[i].k;
    x.n = xd[i].n;
    x.passes = xd[i].passes;
    x.dtype = xd[i].dtype;
    tadd(&t, &x, 0);
  }
  tpu_vref o = tpu_vref_make(vo, od, 0);
  tpu_vref osrc[2] = {o, tpu_vref_make(ve, (int)k->kb, 0)};
  int no = ve >= 0 ? 2 : 1;
  int64_t writes = oblocks;
  /* the result's registers as laid out (a value computed here in the tiling that pads least:
   * layout.c tpu__value_bytes) */
  int64_t ov = 0;
  {
    int64_t sub = be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8;
    int64_t reg = sub * (be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128) * 4;
    for (int l = 0; l < tpu__leaves(&in->shape); l++) {
      const tpu_shape *ls = tpu__leaf(&in->shape, l);
      if (ls) ov += cdiv(tpu__value_bytes(be, in, ls), reg);
    }
    if (ov < 1) ov = 1;
  }
  if (k->eup) add_vec(&t, TPU_ISA_EUP, k, k->eup, ov, writes, osrc, no, o, pm, pr);
  if (k->vpu) add_vec(&t, TPU_ISA_VPU, k, k->vpu, ov, writes, osrc, no, o, pm, pr);
  if (k->xlu) add_vec(&t, TPU_ISA_XLU, k, k->xlu, ov, writes, osrc, no, o, pm, pr);
  int nl = tpu__leaves(&in->shape);
  /* a result kept in VMEM moves nothing; a 16-bit one still pays its pass (add_onchip) */
  /* (as does one whose result the compiled program's own copy takes from VMEM to HBM:
   * vmem_assign.c mark_evictions) */
  const int on_chip = k->vres || k->evict;
  int pass_on_chip = on_chip && k->op >= 0 && be->p->ops[k->op].out_scale > 1;
  for (int l = 0; l < nl && (!on_chip || pass_on_chip); l++) {
    int64_t w = tpu__write_bytes(be, in, l);
    if (!w) continue;
    if (on_chip) {
      add_onchip(&t, TPU_ISA_DMA_OUT, k, cdiv(w, writes), o, pm, pr);
      continue;
    }
    tpu_insn d = tpu_insn_make(TPU_ISA_DMA_OUT, k->op);
    d.src[0] = o;
    d.hbm = k->hbm0 >= 0 ? k->hbm0 + l : tpu__be_buffer_of(be, in, l);
    d.bytes = cdiv(w, writes);
    d.pmod = pm;
    d.prem = pr;
    tadd(&t, &d, 0);
  }
  return emit_kernel(be, in, k, &t);
}

/* Whether `in` is a synchronous collective lowered as links work of its own. */
static int sync_collective(tpu__be *be, const tpu_instr *in) {
  const tpu__kinfo *k = tpu__be_info(be, in);
  return k && k->kind == TPU__K_ICI && tpu_collective_base(in->op) == in->op && in->op != TPU_OP_FUSION;
}

/* The fused computation's root custom call kind of a fusion (the TPU compiler's async
 * collective fusions: AsyncCollectiveStart ... AsyncCollectiveDone), else TPU_CC_OTHER. */
static tpu_cc_kind fusion_root_kind(const tpu_instr *in) {
  return in->op == TPU_OP_FUSION && in->calls && in->calls->root ? tpu_custom_call_kind(in->calls->root) : TPU_CC_OTHER;
}

/* A collective the chip need not wait for where it is lowered: a synchronous one (waited
 * for at its first use), or the start of the TPU compiler's async collective fusion pair
 * (waited for at its done). */
static int deferred_collective(tpu__be *be, const tpu_instr *in) {
  const tpu__kinfo *k = tpu__be_info(be, in);
  return sync_collective(be, in) ||
         (k && k->kind == TPU__K_ICI && fusion_root_kind(in) == TPU_CC_ASYNC_START);
}

/* Whether x reaches `target` through at most `depth` operand steps. */
static int reaches(const tpu_instr *x, const tpu_instr *target, int depth) {
  if (x == target) return 1;
  for (int j = 0; depth > 0 && j < x->noperands; j++)
    if (reaches(x->operands[j], target, depth - 1)) return 1;
  return 0;
}

/* An asynchronous collective's start: all-gather-start, collective-permute-start,
 * all-reduce-start, or the start of the TPU compiler's async collective fusion pair. */
static int async_start(tpu__be *be, const tpu_instr *in) {
  const tpu__kinfo *k = tpu__be_info(be, in);
  if (!k || k->kind != TPU__K_ICI) return 0;
  return in->op == TPU_OP_ALL_GATHER_START || in->op == TPU_OP_COLLECTIVE_PERMUTE_START ||
         in->op == TPU_OP_ALL_REDUCE_START || fusion_root_kind(in) == TPU_CC_ASYNC_START;
}

/* Marks in feed[] (by id) every asynchronous start of c and what only the starts read:
 * an instruction all of whose users are marked (a start's operand slice and convert, and
 * the loop counter arithmetic only they use), walking c->order users first. Parameters,
 * constants and other collectives stay unmarked. */
static void mark_feeds(tpu__be *be, const tpu_comp *c, int maxid, unsigned char *feed, int *left) {
  int n = c->norder, *uses = left + maxid + 1; /* left: users not marked; uses: all users */
  for (int i = 0; i <= maxid; i++) feed[i] = 0, left[i] = 0;
  for (int i = 0; i < n; i++) {
    const tpu_instr *in = c->order[i];
    for (int k = 0; k < in->noperands; k++) {
      const tpu_instr *o = in->operands[k];
      int dup = 0;
      for (int j = 0; j < k && !dup; j++) dup = in->operands[j] == o;
      if (!dup && o->parent == c && o->id <= maxid) left[o->id]++;
    }
  }
  if (c->root && c->root->id <= maxid) left[c->root->id]++; /* the computation's value: used */
  for (int i = 0; i <= maxid; i++) uses[i] = left[i];
  for (int i = n - 1; i >= 0; i--) {
    const tpu_instr *in = c->order[i];
    if (in->id > maxid || in->op == TPU_OP_PARAMETER || in->op == TPU_OP_CONSTANT) continue;
    const tpu__kinfo *ki = tpu__be_info(be, in);
    int start = async_start(be, in);
    if (!start && (left[in->id] || !uses[in->id] || (ki && ki->kind == TPU__K_ICI))) continue;
    feed[in->id] = 1;
    for (int k = 0; k < in->noperands; k++) {
      const tpu_instr *o = in->operands[k];
      int dup = 0;
      for (int j = 0; j < k && !dup; j++) dup = in->operands[j] == o;
      if (!dup && o->parent == c && o->id <= maxid) left[o->id]--;
    }
  }
}

/* The order c's instructions are lowered in. As XLA's TPU compiler makes collectives
 * asynchronous and its latency-hiding scheduler starts them early (docs/timing.md,
 * "Collectives overlap compute"), a synchronous collective starts right after the last
 * of its operands is computed and the chip waits for it only where its result is first
 * used (lower_comp); an asynchronous start, with what only it reads (mark_feeds), moves
 * up to right after the last of its other operands, as the scheduler issues the next
 * layer's weight gather at the top of a loop body rather than where the memory-minimal
 * post-order puts it (next to its done); with o->sync_collectives, program order and waits
 * as written. Returns a tpu_malloc'd array of c->norder instructions (NULL: out of memory). */
static const tpu_instr **overlap_order(tpu__be *be, const tpu_comp *c) {
  int n = c->norder;
  const tpu_instr **out = tpu_malloc(sizeof *out * (size_t)(n ? n : 1));
  int *anchor = tpu_malloc(sizeof *anchor * (size_t)(n ? n : 1)), *pos = NULL;
  int maxid = 0;
  for (int i = 0; i < n; i++)
    if (c->order[i]->id > maxid) maxid = c->order[i]->id;
  pos = tpu_malloc(sizeof *pos * (size_t)((maxid > n ? maxid : n) + 1));
  int *left = tpu_malloc(sizeof *left * (size_t)(2 * maxid + 2));
  unsigned char *feed = tpu_malloc((size_t)maxid + 1);
  if (!out || !anchor || !pos || !left || !feed) {
    tpu_free(out);
    tpu_free(anchor);
    tpu_free(pos);
    tpu_free(left);
    tpu_free(feed);
    return NULL;
  }
  for (int i = 0; i <= maxid; i++) pos[i] = -1;
  for (int i = 0; i < n; i++) pos[c->order[i]->id] = i;
  int hoist = !be->o->sync_collectives, prev = -1; /* the anchor of the last collective so far */
  if (hoist) mark_feeds(be, c, maxid, feed, left);
  else memset(feed, 0, (size_t)maxid + 1);
  tpu_free(left);
  for (int i = 0; i < n; i++) {
    const tpu_instr *in = c->order[i];
    anchor[i] = i; /* lowered in place */
    const tpu__kinfo *ki = tpu__be_info(be, in);
    int coll = ki && ki->kind == TPU__K_ICI;
    if (feed[in->id]) { /* an async start or what only starts read: after its last operand */
      int a = -1;
      for (int j = 0; j < in->noperands; j++) {
        const tpu_instr *o = in->operands[j];
        while (o->op == TPU_OP_GET_TUPLE_ELEMENT && o->noperands == 1 && (o->id > maxid || !feed[o->id]))
          o = o->operands[0];
        int p = o->id <= maxid && o->parent == c && o->op != TPU_OP_PARAMETER && o->op != TPU_OP_CONSTANT ? pos[o->id] : -1;
        if (p > a) a = p;
      }
      anchor[i] = a < i ? a : i;
      if (coll) prev = anchor[i] > prev ? anchor[i] : prev;
      continue;
    }
    if (!hoist || !sync_collective(be, in)) {
      if (coll) prev = i;
      continue;
    }
    /* the links take collectives in the order they are issued: none moves ahead of one the
     * program issues before it */
    int a = prev;
    for (int j = 0; j < in->noperands; j++) {
      const tpu_instr *o = in->operands[j];
      /* an element of a tuple is there when the tuple is (the post-order places a loop
       * state's get-tuple-element right before its first reader, which may follow the
       * body's matmuls: XLA's scheduler starts a windowed einsum's first permutes at the
       * top of the body, tpu.hlo's collective-permute-start) */
      while (o->op == TPU_OP_GET_TUPLE_ELEMENT && o->noperands == 1) o = o->operands[0];
      /* parameters and constants are there from the start */
      int p = o->id <= maxid && o->parent == c && o->op != TPU_OP_PARAMETER && o->op != TPU_OP_CONSTANT ? pos[o->id] : -1;
      if (p > a) a = p;
    }
    anchor[i] = a; /* right after its last operand (-1: first) */
    prev = a;
  }
  /* Each instruction in place, each hoisted collective after its anchor (and after the
   * collectives hoisted behind it): a depth-first walk of the anchor lists. pos[] now
   * holds the lists: first[a + 1] the first instruction anchored at a, next[j] the one
   * after j. */
  int *first = pos, *next = tpu_malloc(sizeof *next * (size_t)(n ? n : 1)), *stack = tpu_malloc(sizeof *stack * (size_t)(n + 1));
  if (!next || !stack) {
    tpu_free(next);
    tpu_free(stack);
    tpu_free(anchor);
    tpu_free(pos);
    tpu_free(feed);
    tpu_free(out);
    return NULL;
  }
  for (int i = 0; i <= n; i++) first[i] = -1;
  for (int j = n - 1; j >= 0; j--)
    if (anchor[j] != j) {
      next[j] = first[anchor[j] + 1];
      first[anchor[j] + 1] = j;
    }
  int m = 0, sp = 0;
  for (int i = -1; i < n; i++) {
    if (i >= 0 && anchor[i] != i) continue;
    if (i >= 0) out[m++] = c->order[i];
    stack[sp++] = first[i + 1];
    while (sp) {
      int j = stack[--sp];
      if (j < 0) continue;
      out[m++] = c->order[j];
      stack[sp++] = next[j];      /* its siblings after ... */
      stack[sp++] = first[j + 1]; /* ... what hangs behind it */
    }
  }
  tpu_free(next);
  tpu_free(stack);
  tpu_free(anchor);
  tpu_free(pos);
  tpu_free(feed);
  return out;
}

/* Waits for the collectives in pend[0..*np) that `in` reads (all of them when in is NULL:
 * the computation's end). */
static tpu_status wait_pending(tpu__be *be, const tpu_instr *in, const tpu_instr **pend, int *np) {
  for (int q = 0; q < *np;) {
    int used = !in;
    if (in && fusion_root_kind(pend[q]) == TPU_CC_ASYNC_START) /* its done, through the buffers */
      used = fusion_root_kind(in) == TPU_CC_ASYNC_DONE && reaches(in, pend[q], 6);
    else
      for (int j = 0; in && j < in->noperands; j++) used |= in->operands[j] == pend[q];
    if (!used) {
      q++;
      continue;
    }
    tpu_insn w = tpu_insn_make(TPU_ISA_WAIT, -1);
    w.at = tpu__be_info(be, pend[q])->ici_insn;
    if (!emit(be, &w)) return TPU_ERR_NOMEM;
    pend[q] = pend[--*np];
  }
  return TPU_OK;
}

static tpu_status lower_instr(tpu__be *be, const tpu_instr *in, int depth, int defer);

static tpu_status lower_comp(tpu__be *be, const tpu_comp *c, int depth) {
  if (depth > 64) return TPU_FAIL(be->d, TPU_ERR_LIMIT, c->loc, "computations nested too deeply");
  const tpu_instr **ord = overlap_order(be, c), **pend = tpu_malloc(sizeof *pend * (size_t)(c->norder + 1));
  if (!ord || !pend) {
    tpu_free(ord);
    tpu_free(pend);
    return TPU_FAIL(be->d, TPU_ERR_NOMEM, c->loc, "out of memory");
  }
  int np = 0, defer = !be->o->sync_collectives;
  tpu_status st = TPU_OK;
  for (int i = 0; st == TPU_OK && i < c->norder; i++) {
    const tpu_instr *in = ord[i];
    if (np) st = wait_pending(be, in, pend, &np);
    if (st == TPU_OK) st = lower_instr(be, in, depth, defer);
    if (st == TPU_OK && defer && deferred_collective(be, in)) pend[np++] = in;
  }
  if (st == TPU_OK && np) st = wait_pending(be, NULL, pend, &np);
  tpu_free(ord);
  tpu_free(pend);
  return st;
}

/* A loop or conditional's opening instruction, named and placed after HLO instruction `in`. */
static int emit_control(tpu__be *be, tpu_isa_op opc, int64_t trips, const tpu_instr *in) {
  tpu_insn x = tpu_insn_make(opc, -1);
  x.trips = trips;
  x.what = tpu_instr_user_name(in);
  x.loc = in->loc;
  return emit(be, &x);
}

/* Lowers one instruction of a computation; defer: a synchronous collective's wait is left
 * to lower_comp (where its result is first used). */
static tpu_status lower_instr(tpu__be *be, const tpu_instr *in, int depth, int defer) {
  const tpu__kinfo *k = tpu__be_info(be, in);
  if (tpu_collective_is_done(in->op)) { /* wait for the links where the result is used */
    const tpu__kinfo *ks = tpu__be_info(be, in->operands[0]);
    if (ks && ks->kind == TPU__K_ICI) {
      tpu_insn w = tpu_insn_make(TPU_ISA_WAIT, -1);
      w.at = ks->ici_insn;
      if (!emit(be, &w)) return TPU_ERR_NOMEM;
    }
    return TPU_OK;
  }
  switch (k->kind) {
    case TPU__K_NONE:
      break;
    case TPU__K_ICI: {
      tpu_insn kin = tpu_insn_make(TPU_ISA_KERNEL, k->op);
      tpu_insn ic = tpu_insn_make(TPU_ISA_ICI, k->op);
      ic.cycles = k->ici_cycles;
      ic.bytes = (int64_t)ceil(k->ici_bytes);
      ic.lane = (int)k->ici_lanes;
      if (!emit(be, &kin)) return TPU_ERR_NOMEM;
      tpu__be_info(be, in)->ici_insn = be->p->ninsns;
      if (!emit(be, &ic)) return TPU_ERR_NOMEM;
      if (tpu_collective_base(in->op) == in->op && !defer) { /* synchronous: the chip waits */
        tpu_insn w = tpu_insn_make(TPU_ISA_WAIT, -1);
        w.at = be->p->ninsns - 1;
        if (!emit(be, &w)) return TPU_ERR_NOMEM;
      }
      break;
    }
    case TPU__K_CALL:
      TPU_TRY(lower_comp(be, in->to_apply, depth + 1));
      break;
    case TPU__K_WHILE: {
      if (!emit_control(be, TPU_ISA_LOOP, k->trips, in)) return TPU_ERR_NOMEM;
      TPU_TRY(lower_comp(be, in->condition, depth + 1));
      TPU_TRY(lower_comp(be, in->body, depth + 1));
      tpu_insn en = tpu_insn_make(TPU_ISA_END, -1);
      if (!emit(be, &en)) return TPU_ERR_NOMEM;
      TPU_TRY(lower_comp(be, in->condition, depth + 1)); /* the test that exits */
      break;
    }
    case TPU__K_COND: {
      if (!emit_control(be, TPU_ISA_COND, in->nbranches, in)) return TPU_ERR_NOMEM;
      for (int b = 0; b < in->nbranches; b++) {
        tpu_insn cs = tpu_insn_make(TPU_ISA_CASE, -1);
        cs.trips = b;
        if (!emit(be, &cs)) return TPU_ERR_NOMEM;
        TPU_TRY(lower_comp(be, in->branches[b], depth + 1));
      }
      tpu_insn ec = tpu_insn_make(TPU_ISA_ENDCOND, -1);
      if (!emit(be, &ec)) return TPU_ERR_NOMEM;
      break;
    }
    case TPU__K_COPY: {
      if (k->vcopy_windows > 0) { /* a copy within VMEM (tile.c prefetched_param_copy) */
        TPU_TRY(lower_stream(be, in, k));
        break;
      }
      tpu_insn kin = tpu_insn_make(TPU_ISA_KERNEL, k->op);
      tpu_insn d = tpu_insn_make(TPU_ISA_DMA_HBM, k->op);
      d.hbm = tpu__be_buffer_of(be, in->operands[0], 0);
      d.hbm2 = k->hbm0;
      d.bytes = k->out_bytes;
      d.onchip = tpu__dup_output_copy(be, in); /* from the value kept in VMEM (copy_kind.c) */
      if (!emit(be, &kin) || !emit(be, &d)) return TPU_ERR_NOMEM;
      break;
    }
    case TPU__K_STREAM:
      TPU_TRY(lower_stream(be, in, k));
      break;
    case TPU__K_MATMUL:
      TPU_TRY(lower_matmul(be, in, k));
      break;
    case TPU__K_LINALG:
      TPU_TRY(tpu__linalg_lower(be, in, k));
      break;
    case TPU__K_MOSAIC:
      TPU_TRY(tpu__mosaic_lower(be, in, k));
      break;
  }
  return TPU_OK;
}

/* Does HBM buffer h overlap any buffer the instructions in [lo, hi) write? */
static int hbm_written(const tpu_program *p, int lo, int hi, int h) {
  const tpu_hbm_buf *x = &p->hbm[h];
  for (int j = lo; j < hi; j++) {
    const tpu_insn *w = &p->insns[j];
    int wb = w->opc == TPU_ISA_DMA_OUT ? w->hbm : w->opc == TPU_ISA_DMA_HBM ? w->hbm2 : -1;
    if (wb < 0) continue;
    const tpu_hbm_buf *y = &p->hbm[wb];
    if (wb == h || (x->offset < y->offset + y->bytes && y->offset < x->offset + x->bytes)) return 1;
  }
  return 0;
}

/* Cross-kernel prefetch (docs/timing.md, "Prefetch"): for each kernel that directly follows
 * another (nothing but the previous kernel's own instructions in between), the dma.in
 * instructions opening its prologue whose HBM source the previous kernel does not write
 * get prefetch=1, provided its VMEM buffers lie clear of the previous kernel's. When they
 * overlap, the kernel's buffers move (once, at its first occurrence) to just above the
 * previous kernel's, if that stays below VMEM's top and every resident value; else no
 * prefetch. A kernel's buffers never move after a later kernel was checked against them. */
static tpu_status mark_prefetch(tpu__be *be) {
  tpu_program *p = be->p;
  int64_t cores = be->chip->tensorcores > 0 ? be->chip->tensorcores : 1;
  int64_t top = be->chip->vmem_bytes * cores;
  size_t no = (size_t)(p->nops ? p->nops : 1);
  int64_t *lo = tpu_calloc(no, sizeof *lo), *hi = tpu_calloc(no, sizeof *hi);
  unsigned char *seen = tpu_calloc(no, 1);
  tpu_status st = TPU_OK;
  if (!lo || !hi || !seen) {
    st = TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
    goto done;
  }
  for (int v = 0; v < p->nvmem; v++) {
    const tpu_vmem_buf *b = &p->vmem[v];
    int64_t l = b->offset, h = b->offset + b->slot_bytes * b->nslots;
    if (b->op < 0) { /* a resident value: the moved buffers stay below all of them */
      if (l < top) top = l;
      continue;
    }
    if (lo[b->op] >= hi[b->op]) lo[b->op] = l, hi[b->op] = h;
    if (l < lo[b->op]) lo[b->op] = l;
    if (h > hi[b->op]) hi[b->op] = h;
  }
  for (int i = 0, prev = -1, first = -1, head = -1; i < p->ninsns; i++) {
    if (p->insns[i].opc != TPU_ISA_KERNEL) continue;
    int o = p->insns[i].op, pk = prev, po = pk >= 0 ? p->insns[pk].op : -1;
    /* Predicated plans of one op side by side (a Pallas call timed per loop iteration,
     * src/mosaic/backend.c): the one that runs follows the kernel before the first. */
    int sib = p->insns[i].pmod && po == o && o >= 0 && p->insns[pk].pmod;
    if (sib) pk = first, po = pk >= 0 ? p->insns[pk].op : -1;
    else first = prev, head = i;
    int chain = o >= 0 && po >= 0 && o != po;
    for (int j = pk + 1; chain && j < head; j++)
      if (p->insns[j].op != po) chain = 0;
    prev = o >= 0 ? i : -1;
    if (!chain) {
      if (o >= 0) seen[o] = 1;
      continue;
    }
    int apart = hi[o] <= lo[po] || hi[po] <= lo[o];
    if (!apart && !seen[o]) {
      int64_t base = (hi[po] + 511) / 512 * 512, delta = base - lo[o];
      if (base + (hi[o] - lo[o]) <= top) {
        for (int v = 0; v < p->nvmem; v++)
          if (p->vmem[v].op == o) p->vmem[v].offset += delta;
        lo[o] += delta;
        hi[o] += delta;
        apart = 1;
      }
    }
    seen[o] = 1;
    if (!apart) continue;
    for (int j = i + 1; j < p->ninsns; j++) {
      tpu_insn *in = &p->insns[j];
      if (in->opc == TPU_ISA_WAIT || (in->opc == TPU_ISA_DMA_IN && in->prefetch == 2)) continue; /* in-step copies */
      if (in->opc != TPU_ISA_DMA_IN || in->op != o) break;
      if (in->pmod == p->insns[i].pmod && in->prem == p->insns[i].prem && in->hbm >= 0 &&
          !hbm_written(p, pk + 1, head, in->hbm))
        in->prefetch = 1;
    }
  }
done:
  tpu_free(lo);
  tpu_free(hi);
  tpu_free(seen);
  return st;
}

tpu_status tpu__pass_lower(tpu__be *be) {
  TPU_TRY(lower_comp(be, be->m->entry, 0));
  return mark_prefetch(be);
}

/* ---- Lookups shared by the passes (the tables tpu_backend builds below) ---- */

int tpu__be_comp_index(const tpu__be *be, const tpu_comp *c) {
  int lo = 0, hi = be->m->ncomps - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (be->sorted[mid] == c) return be->sorted_idx[mid];
    if (be->sorted[mid] < c) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

int tpu__be_index(const tpu__be *be, const tpu_instr *in) {
  int c = tpu__be_comp_index(be, in->parent);
  return c < 0 ? -1 : be->comp_base[c] + in->id;
}

tpu__kinfo *tpu__be_info(const tpu__be *be, const tpu_instr *in) {
  int i = tpu__be_index(be, in);
  return i < 0 ? NULL : &be->k[i];
}

int tpu__leaves(const tpu_shape *s) {
  if (s->dtype == TPU_TUPLE) {
    int n = 0;
    for (int i = 0; i < s->ntuple; i++) n += tpu__leaves(&s->elems[i]);
    return n;
  }
  return s->dtype == TPU_TOKEN ? 0 : 1;
}

int tpu__leaf_offset(const tpu_shape *s, int e) {
  int n = 0;
  for (int i = 0; i < e && i < s->ntuple; i++) n += tpu__leaves(&s->elems[i]);
  return n;
}

const tpu_shape *tpu__leaf(const tpu_shape *s, int leaf) {
  if (s->dtype != TPU_TUPLE) return (leaf == 0 && s->dtype != TPU_TOKEN) ? s : NULL;
  for (int i = 0; i < s->ntuple; i++) {
    int n = tpu__leaves(&s->elems[i]);
    if (leaf < n) return tpu__leaf(&s->elems[i], leaf);
    leaf -= n;
  }
  return NULL;
}

/* ---- The driver ---- */

typedef tpu_status (*pass_fn)(tpu__be *);
static const struct {
  const char *name;
  pass_fn fn;
} k_passes[] = {
    {"tile", tpu__pass_tile},
    {"layout", tpu__pass_layout},
    {"buffer-assign", tpu__pass_buffer_assign},
    {"schedule", tpu__pass_schedule},
    {"lower", tpu__pass_lower},
};

typedef struct {
  const tpu_comp *c;
  int idx;
} comp_ref;

static int cmp_ref(const void *a, const void *b) {
  const comp_ref *x = a, *y = b;
  return x->c < y->c ? -1 : x->c > y->c;
}

tpu_status tpu_compile_backend(const tpu_module *m, const tpu_compile_opts *o, tpu_program **out,
                               tpu_diag *d) {
  *out = NULL;
  if (!o || !o->chip) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "compile: no target chip");
  if (!m || !m->entry) return TPU_FAIL(d, TPU_ERR_ARG, tpu_noloc(), "compile: no entry computation");
  tpu__be be;
  memset(&be, 0, sizeof be);
  be.m = m;
  be.o = o;
  be.chip = o->chip;
  be.d = d;
  int nc = m->ncomps;
  size_t ncs = (size_t)(nc ? nc : 1);
  be.comp_base = tpu_calloc(ncs, sizeof(int));
  be.sorted = tpu_calloc(ncs, sizeof(tpu_comp *));
  be.sorted_idx = tpu_calloc(ncs, sizeof(int));
  be.caller = tpu_calloc(ncs, sizeof(tpu_instr *));
  be.scheduled = tpu_calloc(ncs, 1);
  for (int i = 0; i < nc; i++) be.ninstrs += m->comps[i]->ninstrs;
  be.k = tpu_calloc((size_t)(be.ninstrs ? be.ninstrs : 1), sizeof(tpu__kinfo));
  be.p = tpu_program_new(o->chip->name);
  tpu_status st = TPU_OK;
  if (!be.comp_base || !be.sorted || !be.sorted_idx || !be.caller || !be.scheduled || !be.k || !be.p) {
    st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
    goto done;
  }
  be.p->module = m;
  be.mm_memo = o->mm_memo;
  be.mm_memo_shared = o->mm_memo != NULL;
  comp_ref *refs = tpu_calloc(ncs, sizeof *refs);
  if (!refs) {
    st = TPU_FAIL(d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
    goto done;
  }
  for (int i = 0, base = 0; i < nc; i++) {
    be.comp_base[i] = base;
    base += m->comps[i]->ninstrs;
    refs[i].c = m->comps[i];
    refs[i].idx = i;
  }
  qsort(refs, (size_t)nc, sizeof *refs, cmp_ref);
  for (int i = 0; i < nc; i++) {
    be.sorted[i] = refs[i].c;
    be.sorted_idx[i] = refs[i].idx;
  }
  tpu_free(refs);
  for (size_t i = 0; i < sizeof k_passes / sizeof k_passes[0] && st == TPU_OK; i++) {
    double t0 = tpu__pass_clock();
    st = k_passes[i].fn(&be);
    tpu__pass_report(k_passes[i].name, t0);
    if (st == TPU_OK && o->dump_after && !strcmp(o->dump_after, k_passes[i].name))
      st = tpu_program_print(be.p, o->dump ? o->dump : stdout, d);
  }
  if (st == TPU_OK) st = tpu_program_check(be.p, d);
done:
  tpu_free(be.comp_base);
  tpu_free(be.sorted);
  tpu_free(be.sorted_idx);
  tpu_free(be.caller);
  tpu_free(be.scheduled);
  tpu_free(be.k);
  tpu__mm_memo_free(&be);
  if (st != TPU_OK) {
    tpu_program_free(be.p);
    return st;
  }
  *out = be.p;
  return TPU_OK;
}
