/* Back-end pass `tile`: what kernel each instruction becomes, its MXU problem (M, K, N,
 * batch; convolutions as implicit GEMMs), its vector-unit work in (8,128) registers, and
 * useful vs padded FLOPs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "chip/timing.h"
#include "compile/backend/backend.h"
#include "compile/passes/hlo_passes.h"
#include "ir/collective.h"
#include "ir/custom_call.h"

/* ---- Costs (docs/timing.md has the table and the reasons; per-op costs: op_cost.c) ---- */

int64_t tpu__ilog2_ceil(int64_t n) {
  int64_t r = 0;
  while (((int64_t)1 << r) < n && r < 62) r++;
  return r;
}

typedef struct {
  int64_t vpu, eup, xlu;
  double flops, padded_flops;
} cost;

/* Adds the vector work of one non-matmul instruction. */
/* Is every window dimension of reduce-window `in` either of size 1 or wide enough that each
 * output position covers the whole operand dimension (unit stride, no dilation)? */
static int whole_windows(const tpu_instr *in) {
  if (in->noperands != 2 || in->nwindow != in->operands[0]->shape.rank) return 0;
  int any = 0;
  for (int i = 0; i < in->nwindow; i++) {
    const tpu_window_dim *w = &in->window[i];
    int64_t dim = in->operands[0]->shape.dims[i], out = in->shape.dims[i];
    if (w->size == 1 && w->base_dilation <= 1 && w->window_dilation <= 1) continue;
    if (w->stride != 1 || w->base_dilation > 1 || w->window_dilation > 1) return 0;
    if (w->pad_lo < out - 1 || w->size < dim + w->pad_lo) return 0;
    any = 1;
  }
  return any;
}

/* The dimension a reduce-window scans (a forward scan: a window of the whole dimension,
 * padded by its length less one below and not above, or a reverse scan, padded so above and
 * not below; unit stride, no dilation; every other dimension a window of one), or -1. */
static int scan_dim(const tpu_instr *in) {
  if (in->noperands != 2 || in->nwindow != in->operands[0]->shape.rank) return -1;
  int found = -1;
  for (int i = 0; i < in->nwindow; i++) {
    const tpu_window_dim *w = &in->window[i];
    int64_t n = in->operands[0]->shape.dims[i];
    if (w->stride != 1 || w->base_dilation > 1 || w->window_dilation > 1) return -1;
    if (w->size == 1 && w->pad_lo == 0 && w->pad_hi == 0) continue;
    if (found >= 0 || n < 2 || w->size != n) return -1;
    if (!(w->pad_lo == n - 1 && w->pad_hi == 0) && !(w->pad_lo == 0 && w->pad_hi == n - 1)) return -1;
    found = i;
  }
  return found;
}

/* The dimension of s in the lanes: the minor one of its layout where it has one (a compiled
 * program's), else the last. */
static int lane_dim(const tpu_shape *s) { return s->has_layout && s->rank > 0 ? s->minor_to_major[0] : s->rank - 1; }

/* Whether a result (a tuple's leaves alike) holds an array of more than one element outside
 * scalar memory (S(6)): the vector unit's or the MXU's output, not the scalar unit's. */
static int array_outside_smem(const tpu_shape *s) {
  if (s->dtype == TPU_TUPLE) {
    for (int i = 0; i < s->ntuple; i++)
      if (array_outside_smem(&s->elems[i])) return 1;
    return 0;
  }
  return tpu_dtype_is_array(s->dtype) && tpu_shape_numel(s) > 1 &&
         !(s->layout_tail && strstr(s->layout_tail, "S(6)") != NULL);
}

/* The registers a transcendental op pushes through the EUP: 32-bit ones, a 16-bit value
 * widened first (the XLA TPU compiler's cost model gives 64 chained exps of bf16[4096,4096]
 * the cycles of f32[4096,4096]'s, 542,556 against 538,460 on v5e, on all four generations:
 * bench/fidelity/corpus/eup.json). */
static int64_t eup_vregs(const tpu_shape *s, int64_t vr) {
  size_t b = tpu_dtype_size(s->dtype); /* 0 for a tuple: counted as is */
  return b > 0 && b < 4 ? vr * (int64_t)(4 / b) : vr;
}

/* A depthwise convolution's filter gradient: batch_group_count groups of one output feature
 * each (JAX's gradient of a feature_group_count = C convolution with respect to its filter).
 * The XLA TPU compiler runs it on the vector unit, not the MXU: for every filter tap one
 * multiply-add of the input against the shifted output gradient over the whole input
 * (bench/fidelity probes dw3_bwd: 9,439 cycles on v5e for an [8,28,28,256] input and a 3x3
 * filter, the 2 x 9 x 1,568 f32 registers' operations at 4 per cycle plus the kernel start). */
static int conv_on_vpu(const tpu_instr *cv) {
  if (cv->op != TPU_OP_CONVOLUTION || cv->batch_group_count <= 1) return 0;
  const tpu_shape *rs = &cv->operands[1]->shape;
  return rs->dims[cv->conv->k_out] == cv->batch_group_count;
}

static int is_mxu_op(const tpu_instr *in) {
  return in->op == TPU_OP_DOT || (in->op == TPU_OP_CONVOLUTION && !conv_on_vpu(in));
}

/* The vector registers value `in` fills. A value inside a fused computation of rank >= 3
 * (its layout JAX's default one, not a compiled program's tiling) lives in the tiling that
 * pads least, as the XLA TPU compiler's layout assignment lays out every value it computes
 * (layout.c free_layout): a grouped-query attention's scores bf16[4,8,512,512,2] (kv heads,
 * keys, queries, the 2 heads of a group) are not 64 times their size with the 2 in the lanes. */
/* Is fused computation c called by a fusion that is one of the program's results (laid out as
 * it pads least: layout.c free_layout)? Looks at the results alone, not the whole entry. */
static int result_fused_comp(const tpu__be *be, const tpu_comp *c) {
  const tpu_comp *e = be->m->entry;
  if (!e || !e->root) return 0;
  const tpu_instr *r = e->root;
  const int n = r->op == TPU_OP_TUPLE ? r->noperands : 1;
  for (int k = 0; k < n; k++) {
    const tpu_instr *f = r->op == TPU_OP_TUPLE ? r->operands[k] : r;
    if (f->op == TPU_OP_FUSION && f->calls == c) return 1;
  }
  return 0;
}

static int64_t value_vregs(const tpu__be *be, const tpu_instr *in) {
  const tpu_shape *s = &in->shape;
  /* A rank-2 value of the result's shape inside a loop fusion that is the program's result:
   * the XLA TPU compiler lays the result out as it pads least (JAX's out_layout_modes
   * "default") and layout assignment gives the elementwise ops before it that layout too, so
   * the kernel computes on the least padded registers ({0,1} for f32[3000,5], 3000 in the
   * lanes), not on row-major ones that pad 5 columns to 128 lanes (libtpu probes off the
   * corpus, bench/fidelity/probes/result_ew_layout.py: 8 shapes on four generations, one
   * kernel each, result {0,1}; tpusim's median |error| v4/v5e/v5p/v6e 46.0/10.2/6.8/12.0 ->
   * 1.3/2.5/2.0/2.4 %). TPUSIM_NO_RESULT_EW_LAYOUT=1 turns it off (the probe's "before"; read
   * last, only for the values the rule reaches). */
  if (s->dtype != TPU_TUPLE && !s->layout_tail && s->rank == 2 && in->parent &&
      in->parent != be->m->entry && in->parent->root && in->parent->root->shape.rank == 2 &&
      s->dims[0] == in->parent->root->shape.dims[0] && s->dims[1] == in->parent->root->shape.dims[1] &&
      result_fused_comp(be, in->parent) && !tpu_env_flag("TPUSIM_NO_RESULT_EW_LAYOUT")) {
    int64_t sub = be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8;
    int64_t lanes = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
    int64_t reg = sub * lanes * 4, b = tpu__least_tiled_bytes(be->chip, s);
    return (b + reg - 1) / reg;
  }
  if (s->dtype == TPU_TUPLE || s->layout_tail || s->rank < 3 || !in->parent || in->parent == be->m->entry)
    return tpu__vregs(be, s); /* a compiled program's tiled layouts are its own */
  /* a layout tpusim's passes gave it (a grouped convolution's statistics, computed in the
   * convolution's own layout: group_conv.c set_split_layout) */
  if (tpu__kept_layout(in)) return tpu__vregs(be, s);
  int64_t sub = be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8;
  int64_t lanes = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
  int64_t reg = sub * lanes * 4, b = tpu__least_tiled_bytes(be->chip, s);
  return (b + reg - 1) / reg;
}

/* A broadcast of one value (a scalar, or an array of one element) inside a fused
 * computation: the vector unit takes it as a scalar operand, no register work (the XLA TPU
 * compiler times y * x + c with 100 distinct constants c as with one: 412,791 and 413,815
 * cycles on v4, bench/fidelity/probes cases_9). */
static int scalar_broadcast(const tpu_instr *f) {
  return f->op == TPU_OP_BROADCAST && f->noperands == 1 && tpu_dtype_is_array(f->operands[0]->shape.dtype) &&
         tpu_shape_numel(&f->operands[0]->shape) <= 1;
}

/* How many times a fused computation reads all of parameter p into vector registers: its
 * uses by elementwise ops, a bitcast's uses counted through it (a slice, gather or in-place
 * update touches only part of its operand, a matmul pushes its operands to the MXU: their
 * reads are their own ops' cost). */
static int64_t param_reads(const tpu_instr *p) {
  const tpu_comp *cp = p->parent;
  int64_t n = 0;
  for (int i = 0; cp && i < cp->ninstrs; i++) {
    const tpu_instr *u = cp->instrs[i];
    for (int o = 0; o < u->noperands; o++) {
      if (u->operands[o] != p) continue;
      if (u->op == TPU_OP_BITCAST) n += param_reads(u);
      else if (tpu__is_elementwise(u->op)) n++;
    }
  }
  return n;
}

static void add_cost(const tpu__be *be, const tpu_instr *in, cost *c) {
  const tpu_shape *s = &in->shape;
  int64_t vr = value_vregs(be, in);
  double numel = s->dtype == TPU_TUPLE ? 0 : (double)tpu_shape_numel(s);
  double padded = (double)vr * (double)(be->chip->vector_sublanes * be->chip->vector_lanes);
  if (tpu__is_elementwise(in->op)) {
    int64_t v, e;
    tpu_dtype t = in->noperands ? in->operands[in->noperands - 1]->shape.dtype : s->dtype;
    if (tpu_dtype_is_complex(t) || tpu_dtype_is_complex(s->dtype)) {
      /* per complex element on its two planes: the planes' registers are counted once */
      const tpu_shape *cs = tpu_dtype_is_complex(s->dtype) ? s : &in->operands[in->noperands - 1]->shape;
      int64_t pairs = (tpu__vregs(be, cs) + 1) / 2;
      tpu__complex_elem_cost(in->op, &v, &e);
      c->vpu += pairs * v;
      c->eup += pairs * e;
      c->flops += numel * (double)v;
      c->padded_flops += (double)pairs * (double)(be->chip->vector_sublanes * be->chip->vector_lanes) * (double)v;
      return;
    }
    /* a division by a constant runs as XLA's simplifier writes it: a multiply */
    tpu__elem_cost(tpu__divides_by_constant(in) ? TPU_OP_MULTIPLY : in->op, t, &v, &e);
    c->vpu += (tpu__elem_widened(in->op) ? eup_vregs(s, vr) : vr) * v;
    c->eup += eup_vregs(s, vr) * e;
    c->flops += numel;
    c->padded_flops += padded;
    return;
  }
  switch (in->op) {
    case TPU_OP_PARAMETER: case TPU_OP_CONSTANT: case TPU_OP_TUPLE:
    case TPU_OP_GET_TUPLE_ELEMENT: case TPU_OP_BITCAST: case TPU_OP_BITCAST_CONVERT:
    case TPU_OP_OPT_BARRIER: case TPU_OP_AFTER_ALL: case TPU_OP_ADD_DEPENDENCY:
      return;
    case TPU_OP_REDUCE: {
      const tpu_shape *is = &in->operands[0]->shape;
      int64_t ivr = value_vregs(be, in->operands[0]);
      int n = in->noperands / 2;
      int64_t ops = tpu__comp_ops(in->to_apply);
      c->vpu += ivr * n * ops;
      int minor = 0;
      for (int i = 0; i < in->dimensions.n; i++)
        if (is->rank > 0 && in->dimensions.v[i] == lane_dim(is)) minor = 1;
      if (minor) c->xlu += ivr * n;
      c->flops += (double)tpu_shape_numel(is) * n * (double)ops;
      c->padded_flops += (double)ivr * (double)(be->chip->vector_sublanes * be->chip->vector_lanes) * n * (double)ops;
      return;
    }
    case TPU_OP_REDUCE_WINDOW: case TPU_OP_SELECT_AND_SCATTER: {
      int64_t win = 1;
      for (int i = 0; i < in->nwindow; i++) win *= in->window[i].size;
      if (in->op == TPU_OP_REDUCE_WINDOW && whole_windows(in)) {
        /* every output sees its whole row (the TPU compiler's row maximum as a
         * reduce-window of size 2n-1): one reduction of the input, then a broadcast */
        const tpu_shape *is = &in->operands[0]->shape;
        int64_t ivr = tpu__vregs(be, is), ovr = tpu__vregs(be, s);
        int64_t ops = tpu__comp_ops(in->to_apply);
        c->vpu += ivr * ops + ovr;
        c->xlu += ivr;
        c->flops += (double)tpu_shape_numel(is) * (double)ops;
        c->padded_flops += (double)ivr * (double)(be->chip->vector_sublanes * be->chip->vector_lanes) * (double)ops;
        return;
      }
      int sd = in->op == TPU_OP_REDUCE_WINDOW ? scan_dim(in) : -1;
      if (sd >= 0) {
        /* A scan (cumsum, cummax: a window of the whole dimension padded below) as the XLA
         * TPU compiler rewrites it: blocks of 128 laid out along a major dimension, each
         * block's running sum one op per register there, the blocks' carries added back
         * (one op more), and where the scan runs along a tiled dimension a relayout in and
         * one out (bench/fidelity/probes cumsum: its reduce-windows of 128 and carries).
         * Not a window's worth of ops per element. */
        int64_t ovr = tpu__vregs(be, s), ops = tpu__comp_ops(in->to_apply);
        c->vpu += ovr * ops * 2;
        if (sd >= s->rank - 2) c->xlu += 2 * ovr;
        c->flops += 2.0 * (double)tpu_shape_numel(s) * (double)ops;
        c->padded_flops += 2.0 * (double)ovr * (double)(be->chip->vector_sublanes * be->chip->vector_lanes) * (double)ops;
        return;
      }
      const tpu_shape *os = in->op == TPU_OP_REDUCE_WINDOW ? s : &in->operands[0]->shape;
      int64_t ovr = tpu__vregs(be, os);
      int64_t ops = in->op == TPU_OP_REDUCE_WINDOW ? tpu__comp_ops(in->to_apply) : 3;
      c->vpu += ovr * win * ops;
      c->flops += (double)tpu_shape_numel(os) * (double)win * (double)ops;
      c->padded_flops += (double)ovr * (double)(be->chip->vector_sublanes * be->chip->vector_lanes) * (double)(win * ops);
      return;
    }
    case TPU_OP_CHOLESKY: case TPU_OP_TRIANGULAR_SOLVE: { /* blocked kernels: linalg.c */
      double f, pf;
      tpu__linalg_flops(be, in, &f, &pf);
      c->flops += f;
      c->padded_flops += pf;
      return;
    }
    case TPU_OP_CUSTOM_CALL: /* TopK, PartialReduce */
      if (tpu_custom_call_kind(in) == TPU_CC_PARTIAL_REDUCE) {
        /* A vector reduction whose bins are positions modulo the bin count (a multiple of
         * the lanes): each input register meets its bins' register element by element, no
         * cross-lane work. Per value register: the comparator's ops, then one select per
         * array (values, indices). */
        const tpu_shape *is = &in->operands[0]->shape;
        int64_t ivr = value_vregs(be, in->operands[0]);
        int64_t n = in->noperands / 2, ops = tpu__comp_ops(tpu_custom_call_comp(in)) + n;
        c->vpu += ivr * ops;
        c->flops += (double)tpu_shape_numel(is) * (double)ops;
        c->padded_flops += (double)ivr * (double)(be->chip->vector_sublanes * be->chip->vector_lanes) * (double)ops;
        return;
      }
      /* Inside a fusion only top-k does work here; the compiler's other custom calls there
       * (AllocateBuffer, AssumeGatherIndicesInBound, ...) allocate or pass a value on. */
      if (tpu_custom_call_kind(in) != TPU_CC_TOPK || in->noperands < 1) return;
      /* fall through */
    case TPU_OP_SORT: case TPU_OP_TOPK: {
      if (in->noperands < 1) return;
      if (in->op == TPU_OP_SORT && be->chip->sort_network) {
        /* the compiler's network, counted from its code (sort_cost.c; a preset without the
         * field keeps the count below) */
        tpu__sort_work w;
        tpu__sort_cost(be, in, &w);
        c->vpu += w.valu;
        c->xlu += w.perms;
        return;
      }
      const tpu_shape *is = &in->operands[0]->shape;
      int64_t dim = in->op == TPU_OP_SORT && in->dimensions.n ? in->dimensions.v[0] : is->rank - 1;
      int64_t len = is->rank > 0 && dim >= 0 && dim < is->rank ? is->dims[dim] : 1;
      int64_t lg = tpu__ilog2_ceil(len);
      int64_t stages = lg * (lg + 1) / 2;
      if (stages < 1) stages = 1;
      int64_t ivr = 0;
      for (int i = 0; i < in->noperands; i++) ivr += tpu__vregs(be, &in->operands[i]->shape);
      c->vpu += ivr * stages * 3;
      c->xlu += ivr * stages;
      return;
    }
    case TPU_OP_RNG_BIT_GENERATOR:
      c->vpu += vr * 40;
      return;
    case TPU_OP_FFT: {
      /* On the vector unit as a radix-2 FFT would run (docs/timing.md): 5 N log2 N real
       * flops per complex transform of N points (half for RFFT/IRFFT), each axis of the
       * transform in turn; shuffles of a minor-dim transform on the transpose unit. */
      const tpu_shape *cs = tpu_dtype_is_complex(s->dtype) ? s : &in->operands[0]->shape;
      double lanes = (double)(be->chip->vector_sublanes * be->chip->vector_lanes);
      const tpu_shape *full = in->fft_type == TPU_FFT_RFFT ? &in->operands[0]->shape : s; /* all N points */
      double total = 0, lines_pts = (double)tpu_shape_numel(full);
      int r = in->fft_length.n;
      for (int i = 0; i < r; i++) {
        int64_t L = in->fft_length.v[i];
        double f = 5.0 * lines_pts * (double)tpu__ilog2_ceil(L > 1 ? L : 1);
        if (in->fft_type == TPU_FFT_RFFT || in->fft_type == TPU_FFT_IRFFT) f *= 0.5;
        total += f;
        if (i == r - 1) c->xlu += tpu__vregs(be, cs) * tpu__ilog2_ceil(L > 1 ? L : 1);
      }
      int64_t ops = (int64_t)ceil(total / (lanes > 0 ? lanes : 1024));
      c->vpu += ops + vr; /* the butterflies, plus writing the result */
      c->flops += total;
      c->padded_flops += (double)ops * lanes;
      return;
    }
    case TPU_OP_TRANSPOSE: {
      if (tpu__moves_minor(be->chip, in)) c->xlu += vr;
      else c->vpu += vr;
      return;
    }
    case TPU_OP_MAP:
      c->vpu += vr * tpu__comp_ops(in->to_apply);
      c->flops += numel * (double)tpu__comp_ops(in->to_apply);
      c->padded_flops += padded * (double)tpu__comp_ops(in->to_apply);
      return;
    case TPU_OP_DYNAMIC_UPDATE_SLICE: /* in place: only the update's registers move */
      c->vpu += tpu__vregs(be, &in->operands[1]->shape);
      return;
    case TPU_OP_SCATTER: {
      const tpu_shape *us = &in->operands[in->noperands - 1]->shape;
      c->vpu += tpu__vregs(be, us) * (1 + tpu__comp_ops(in->to_apply));
      return;
    }
    case TPU_OP_FUSION: {
      const double ld = be->chip->vector_load_ops;
      for (int i = 0; in->calls && i < in->calls->ninstrs; i++) {
        const tpu_instr *f = in->calls->instrs[i];
        if (is_mxu_op(f) || (ld > 0 && scalar_broadcast(f))) continue;
        add_cost(be, f, c);
        if (ld > 0 && f->op == TPU_OP_PARAMETER)
          c->vpu += (int64_t)ceil(ld * (double)param_reads(f) * (double)tpu__vregs(be, &f->shape));
      }
      return;
    }
    case TPU_OP_CONVOLUTION: {
      if (!conv_on_vpu(in)) return; /* MXU work: matmul_dims */
      /* one multiply-add per filter tap (the output's spatial positions) over the input's
       * 32-bit registers (16-bit inputs widened, as the EUP widens them) */
      const tpu_shape *is = &in->operands[0]->shape;
      int64_t taps = 1;
      for (int i = 0; i < in->conv->nspatial; i++) taps *= s->dims[in->conv->out_spatial[i]];
      int64_t ivr = eup_vregs(is, tpu__vregs(be, is));
      c->vpu += ivr * taps * 2;
      c->flops += 2.0 * (double)tpu_shape_numel(is) * (double)taps;
      c->padded_flops += 2.0 * (double)ivr * (double)(be->chip->vector_sublanes * be->chip->vector_lanes) * (double)taps;
      return;
    }
    default: /* data movement through VMEM: one vector copy per register */
      if (s->dtype != TPU_TUPLE) c->vpu += vr;
      return;
  }
}

static int64_t prod_dims(const tpu_shape *s, const tpu_i64s *skip1, const tpu_i64s *skip2) {
  int64_t p = 1;
  for (int d = 0; d < s->rank; d++) {
    int sk = 0;
    for (int i = 0; skip1 && i < skip1->n; i++) sk |= skip1->v[i] == d;
    for (int i = 0; skip2 && i < skip2->n; i++) sk |= skip2->v[i] == d;
    if (!sk) p *= s->dims[d];
  }
  return p;
}

static int64_t prod_sel(const tpu_shape *s, const tpu_i64s *sel) {
  int64_t p = 1;
  for (int i = 0; i < sel->n; i++)
    if (sel->v[i] >= 0 && sel->v[i] < s->rank) p *= s->dims[sel->v[i]];
  return p;
}

static int passes_for(const tpu__be *be, const tpu_instr *mm, tpu_dtype t) {
  if (t == TPU_BF16 || t == TPU_F16 || t == TPU_S8 || t == TPU_U8) return 1;
  int p = be->o->precision_override;
  if (p < 0) {
    p = 0;
    for (int i = 0; i < 2; i++) {
      int q = mm->precision[i] == TPU_PREC_CFG_HIGHEST ? 2 : mm->precision[i] == TPU_PREC_CFG_HIGH ? 1 : 0;
      if (q > p) p = q;
    }
  }
  return p == TPU_PREC_HIGHEST ? 6 : p == TPU_PREC_HIGH ? 3 : 1;
}

static int64_t round_up(int64_t a, int64_t m) { return m > 0 ? (a + m - 1) / m * m : a; }

/* Does the 8-bit weight `w` arrive tiled in 32 rows? The XLA TPU compiler tiles an 8-bit
 * array T(32,128)(4,1) where its second-minor dimension (in its layout) is a multiple of 32
 * and it spans more than one column of tiles, else T(8,128)(4,1) (s8_pad_tiles.c); on v4 a
 * matmul kernel copies such a weight into 8-row tiles for the MXU (its compiled kOutput
 * fusions hold the copy_fusion), which int8_weight_load_cycles times. The dims decide, not
 * a compiled program's explicit tile (the fused operand is the re-tiled copy). */
static int i8_wide(const tpu__be *be, const tpu_shape *w) {
  if (w->rank < 2 || !tpu_dtype_is_array(w->dtype) || tpu_dtype_bits(w->dtype) != 8) return 0;
  int q = w->has_layout ? w->minor_to_major[1] : w->rank - 2, m = w->has_layout ? w->minor_to_major[0] : w->rank - 1;
  int64_t lanes = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
  return w->dims[q] % 32 == 0 && w->dims[m] > lanes;
}

/* Does the XLA TPU compiler hold the lhs of one-tap convolution (a dot) mm stationary on the
 * MXU, its result's rows streaming? It does where the lhs is laid out with its batch (the
 * dot's M) in the lanes and the result too (emitter EmitInputBatchInLanes): the result is
 * written transposed ({0,1} for [M,N]), M across the MXU's columns and the N output features
 * the streamed rows. It lays a narrow dot out so for a short contraction (libtpu probes,
 * bench/fidelity/probes/narrow_dot.py; docs/timing-mxu.md "Narrow results"). A result
 * transposed with the lhs's batch in the sublanes (EmitOutputBatchInLanesInputBatchInSublanes,
 * a long contraction) streams the lhs's rows as usual. Taken for N below the lanes and M above
 * N (the probes' cases; a wider transposed result keeps tpusim's orientation). */
static int lhs_stationary(const tpu__be *be, const tpu_instr *mm, const tpu__kinfo *k) {
  if (mm->op != TPU_OP_CONVOLUTION || !mm->conv || tpu_env_flag("TPUSIM_NO_NARROW_LHS_STATIONARY")) return 0;
  const tpu_conv_dims *cd = mm->conv;
  const tpu_shape *ls = &mm->operands[0]->shape, *rs = &mm->operands[1]->shape, *os = &mm->shape;
  if (mm->feature_group_count > 1 || mm->batch_group_count > 1 || k->b != 1) return 0;
  for (int i = 0; i < cd->nspatial; i++)
    if (rs->dims[cd->k_spatial[i]] != 1 || ls->dims[cd->in_spatial[i]] != 1) return 0;
  if (!ls->has_layout || !os->has_layout || ls->rank < 2) return 0;
  int64_t lanes = be->chip->vector_lanes > 0 ? be->chip->vector_lanes : 128;
  return ls->minor_to_major[0] == cd->in_batch && os->minor_to_major[0] == cd->out_batch && k->n < lanes &&
         k->m > k->n;
}

/* The MXU problem of a dot or convolution. */
static void matmul_dims(const tpu__be *be, const tpu_instr *mm, tpu__kinfo *k) {
  const tpu_shape *ls = &mm->operands[0]->shape, *rs = &mm->operands[1]->shape;
  if (mm->op == TPU_OP_DOT) {
    k->b = prod_sel(ls, &mm->dot.lhs_batch);
    k->k = prod_sel(ls, &mm->dot.lhs_contract);
    k->m = prod_dims(ls, &mm->dot.lhs_batch, &mm->dot.lhs_contract);
    k->n = prod_dims(rs, &mm->dot.rhs_batch, &mm->dot.rhs_contract);
  } else {
    tpu__conv_matmul_dims(be, mm, k);
  }
  if (mm->op == TPU_OP_DOT) k->k_flops = k->k;
  if (k->m < 1) k->m = 1;
  if (k->k < 1) k->k = 1;
  if (k->k_flops < 1) k->k_flops = 1;
  if (k->n < 1) k->n = 1;
  if (k->b < 1) k->b = 1;
  if (lhs_stationary(be, mm, k)) {
    int64_t t = k->m;
    k->m = k->n, k->n = t;
  }
  k->mm = mm;
  k->mm_dtype = ls->dtype;
  k->mm_i8_wide = i8_wide(be, rs);
  k->passes = passes_for(be, mm, ls->dtype);
  /* A complex dot is four real ones (re re, im im, re im, im re) at f32 precision. */
  if (tpu_dtype_is_complex(ls->dtype)) k->passes *= 4;
}


/* The operand index of fusion `f` whose value feeds `x` inside the fused computation,
 * following layout-only and elementwise unary ops (convert, bitcast, copy...); -1 when
 * `x` is computed from several operands. */
#define NEST_MAX 4

/* The dot or convolution fused computation c runs, also inside the fusions it nests (the
 * TPU compiler's programs nest a kOutput fusion in another); path[0..*depth) gets those
 * nested fusion instructions, outermost first. */
static const tpu_instr *find_matmul(const tpu_comp *c, const tpu_instr **path, int *depth) {
  for (int i = 0; c && i < c->ninstrs; i++)
    if (is_mxu_op(c->instrs[i])) return c->instrs[i];
  for (int i = 0; c && *depth < NEST_MAX && i < c->ninstrs; i++) {
    const tpu_instr *f = c->instrs[i];
    if (f->op != TPU_OP_FUSION || !f->calls) continue;
    path[(*depth)++] = f;
    const tpu_instr *mm = find_matmul(f->calls, path, depth);
    if (mm) return mm;
    (*depth)--;
  }
  return NULL;
}

static void add_xdots(const tpu__be *be, const tpu_comp *c, const tpu_instr *main, tpu__xdot *out, int *n,
                      int depth) {
  for (int i = 0; c && i < c->ninstrs; i++) {
    const tpu_instr *x = c->instrs[i];
    if (x->op == TPU_OP_FUSION && x->calls && depth < NEST_MAX) {
      add_xdots(be, x->calls, main, out, n, depth + 1);
      continue;
    }
    if (x == main || !is_mxu_op(x)) continue;
    tpu__kinfo d;
    memset(&d, 0, sizeof d);
    matmul_dims(be, x, &d);
    const tpu_shape *ls = &x->operands[0]->shape;
    const double cx = tpu_dtype_is_complex(ls->dtype) ? 4.0 : 1.0;
    const int64_t R = be->chip->mxu_rows, C = be->chip->mxu_cols;
    double f = d.mm_flops > 0 ? d.mm_flops : cx * 2.0 * (double)d.b * (double)d.m * (double)d.k_flops * (double)d.n;
    double pf = cx * 2.0 * (double)d.b * (double)round_up(d.m, be->chip->vector_sublanes) *
                (double)round_up(d.k, R) * (double)round_up(d.n, C);
    int g = 0;
    while (g < *n && !(out[g].k == d.k && out[g].n == d.n && out[g].passes == d.passes && out[g].dtype == d.mm_dtype)) g++;
    int64_t rows = d.b * d.m, prods = d.b;
    if (g == *n && *n == TPU__XDOT_MAX) { /* full: rows of the last group with the same MXU work */
      g = *n - 1;
      double w = (double)round_up(d.k, R) * (double)round_up(d.n, C) * d.passes;
      double wg = (double)round_up(out[g].k, R) * (double)round_up(out[g].n, C) * out[g].passes;
      rows = (int64_t)ceil((double)rows * w / (wg > 0 ? wg : 1));
      prods = 0;
    } else if (g == *n) {
      memset(&out[g], 0, sizeof out[g]);
      out[g].k = d.k;
      out[g].n = d.n;
      out[g].passes = d.passes;
      out[g].dtype = d.mm_dtype;
      (*n)++;
    }
    out[g].rows += rows;
    out[g].prods += prods;
    out[g].flops += f;
    out[g].padded_flops += pf;
  }
}

int tpu__fusion_xdots(const tpu__be *be, const tpu_instr *in, const tpu_instr *main, tpu__xdot *out) {
  int n = 0;
  if (in->op == TPU_OP_FUSION && in->calls) add_xdots(be, in->calls, main, out, &n, 0);
  return n;
}

/* The operand index of fusion `f` whose value feeds `x` inside the fused computation (and
 * the fusions path[0..depth) nested in it, x in the innermost), following layout-only and
 * elementwise unary ops (convert, bitcast, copy...); -1 when `x` is computed from several
 * operands. */
static int fused_source(const tpu_instr *f, const tpu_instr *const *path, int depth, const tpu_instr *x) {
  int k = tpu__fused_source(x);
  for (int d = depth - 1; d >= 0 && k >= 0; d--) {
    if (k >= path[d]->noperands) return -1;
    k = tpu__fused_source(path[d]->operands[k]);
  }
  return k < f->noperands ? k : -1;
}

static const char *fusion_kind(const tpu_instr *in) {
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, "kind")) {
      const char *v = in->attrs[i].value;
      if (!strcmp(v, "kLoop")) return "fusion:kLoop";
      if (!strcmp(v, "kOutput")) return "fusion:kOutput";
      if (!strcmp(v, "kInput")) return "fusion:kInput";
      return "fusion";
    }
  return "fusion";
}

/* A collective: within one chip (groups of one) the identity; across chips a kernel on the
 * links, timed by the pod's link model (compile options), with its own result buffers. */
static tpu_status tile_collective(tpu__be *be, const tpu_instr *in, tpu__kinfo *k) {
  int64_t n;
  TPU_TRY(tpu_collective_devices(in, &n, be->d));
  int start = tpu_collective_base(in->op) != in->op;
  if (n <= 1 && !start) return TPU_OK; /* an alias of its operand */
  tpu_coll_cost c = {0, 0, 0};
  if (n > 1) {
    if (!be->o->coll_cost) return tpu_collective_check_one_device(in, be->d);
    TPU_TRY(be->o->coll_cost(be->o->coll_user, in, &c, be->d));
  }
  k->kind = TPU__K_ICI;
  k->own = 1;
  k->ici_cycles = (int64_t)ceil(c.seconds * be->chip->clock_hz);
  k->ici_bytes = c.bytes;
  k->ici_lanes = c.lanes;
  tpu_prog_op po;
  memset(&po, 0, sizeof po);
  po.name = in->name;
  po.kind = tpu_op_name(in->op);
  po.instr = in;
  k->op = tpu_program_add_op(be->p, &po);
  if (k->op < 0) return TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  return TPU_OK;
}

/* A fusion the TPU compiler built around a collective (kCustom "all-reduce-scatter": an
 * all-reduce whose result is cut by a dynamic-slice — its reduce-scatter; or a collective
 * fused with elementwise work) is timed as that collective on ICI: as a reduce-scatter of
 * the fusion's result when its root slices the all-reduce, else as the collective itself.
 * The fused elementwise work (a few vector ops per element) is not added. */
static const tpu_instr *fused_collective(const tpu_instr *in) {
  const tpu_comp *c = in->calls;
  const tpu_instr *coll = NULL;
  /* An async collective fusion pair: the start is timed as the collective (its overlap with
   * the continuation is not credited); the continuation and the done repeat the collective
   * for the compiler's bookkeeping and are timed as their other work. */
  tpu_cc_kind root = c && c->root ? tpu_custom_call_kind(c->root) : TPU_CC_OTHER;
  if (root == TPU_CC_ASYNC_DONE) return NULL;
  for (int i = 0; c && i < c->ninstrs; i++)
    if (tpu_op_class_of(c->instrs[i]->op) == TPU_CLS_COLLECTIVE && c->instrs[i]->op != TPU_OP_PARTITION_ID &&
        c->instrs[i]->op != TPU_OP_REPLICA_ID) {
      if (coll) return NULL; /* several: not a shape the compiler makes */
      coll = c->instrs[i];
    }
  if (coll && root != TPU_CC_ASYNC_START) {
    for (int i = 0; i < coll->nattrs; i++)
      if (!strcmp(coll->attrs[i].name, "frontend_attributes") && strstr(coll->attrs[i].value, "chain_id"))
        return NULL; /* a continuation */
  }
  return coll;
}

static tpu_status tile_fused_collective(tpu__be *be, const tpu_instr *in, const tpu_instr *coll, tpu__kinfo *k) {
  const tpu_instr *r = in->calls->root;
  while (r && (r->op == TPU_OP_BITCAST || r->op == TPU_OP_COPY) && r->noperands == 1) r = r->operands[0];
  /* The collective as the fusion performs it, kept with the program (the reports read its
   * groups), named as the fusion and carrying the fusion's metadata. */
  tpu_instr *as = tpu_arena_alloc(&be->p->arena, sizeof *as);
  if (!as) return TPU_FAIL(be->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  *as = *coll;
  as->name = in->name;
  as->src_name = in->src_name;
  as->loc = in->loc;
  if (r && r->op == TPU_OP_DYNAMIC_SLICE && r->operands[0] == coll && coll->op == TPU_OP_ALL_REDUCE) {
    as->op = TPU_OP_REDUCE_SCATTER;
    as->shape = in->shape;
  }
  tpu_attr *at = tpu_arena_alloc(&be->p->arena, sizeof *at * (size_t)(coll->nattrs + in->nattrs + 1));
  if (!at) return TPU_FAIL(be->d, TPU_ERR_NOMEM, in->loc, "out of memory");
  int na = 0; /* the collective's attributes, the fusion's metadata */
  for (int i = 0; i < coll->nattrs; i++)
    if (strcmp(coll->attrs[i].name, "metadata")) at[na++] = coll->attrs[i];
  for (int i = 0; i < in->nattrs; i++)
    if (!strcmp(in->attrs[i].name, "metadata")) at[na++] = in->attrs[i];
  as->attrs = at;
  as->nattrs = na;
  return tile_collective(be, as, k);
}

/* Classifies one instruction of a scheduled computation. */
static tpu_status tile_instr(tpu__be *be, const tpu_instr *in) {
  tpu__kinfo *k = tpu__be_info(be, in);
  k->op = -1;
  k->trips = -1;
  k->mm_lhs = k->mm_rhs = -1;
  k->nleaves = tpu__leaves(&in->shape);
  k->what = tpu_op_name(in->op);
  switch (in->op) {
    case TPU_OP_FUSION: {
      const tpu_instr *coll = fused_collective(in);
      if (coll) return tile_fused_collective(be, in, coll, k);
      break;
    }
    case TPU_OP_PARAMETER:
      k->own = in->parent->is_entry;
      return TPU_OK;
    case TPU_OP_CONSTANT: case TPU_OP_IOTA: case TPU_OP_RNG_BIT_GENERATOR:
      k->own = 1;
      break;
    case TPU_OP_CUSTOM_CALL:
      if (tpu_custom_call_kind(in) == TPU_CC_IDENTITY || tpu_custom_call_kind(in) == TPU_CC_CONCAT_BITCAST ||
          tpu_custom_call_kind(in) == TPU_CC_ZERO_CROP)
        return TPU_OK; /* an alias of its operand (ConcatBitcast: its slices already side by side; ZeroCrop
                        * zeroes the padding in place, time not modelled) */
      if (tpu_custom_call_kind(in) == TPU_CC_HOST_CALLBACK) {
        /* A host callback: the host's time is not modelled (docs/pjrt.md); its result is a
         * buffer of its own, written over the host link. */
        k->own = 1;
        return TPU_OK;
      }
      if (tpu_custom_call_kind(in) == TPU_CC_MOSAIC) return tpu__mosaic_tile(be, in, k); /* src/mosaic/backend.c */
      if (tpu_custom_call_kind(in) == TPU_CC_ALLOCATE) {
        k->own = 1; /* a buffer of its own that later ops fill: no work */
        return TPU_OK;
      }
      if (tpu_custom_call_kind(in) != TPU_CC_TOPK && tpu_custom_call_kind(in) != TPU_CC_PARTIAL_REDUCE)
        return tpu_custom_call_refuse(in, "the TPU back end", be->d);
      k->own = 1;
      break; /* top-k, PartialReduce: a kernel costed as one (add_cost) */
    case TPU_OP_TUPLE: case TPU_OP_GET_TUPLE_ELEMENT: case TPU_OP_BITCAST:
    case TPU_OP_OPT_BARRIER: case TPU_OP_AFTER_ALL: case TPU_OP_ADD_DEPENDENCY:
    case TPU_OP_COPY_START: case TPU_OP_COPY_DONE: /* a prefetch XLA scheduled: its copy aliases the source */
    case TPU_OP_SLICE_START: case TPU_OP_SLICE_DONE: /* so does its slice */
    case TPU_OP_PARTITION_ID: case TPU_OP_REPLICA_ID:
    case TPU_OP_ALL_REDUCE_DONE: case TPU_OP_ALL_GATHER_DONE: case TPU_OP_COLLECTIVE_PERMUTE_DONE:
      /* -done hands over its -start's result (lower waits for the links there). */
      k->own = in->op == TPU_OP_PARTITION_ID || in->op == TPU_OP_REPLICA_ID;
      return TPU_OK;
    case TPU_OP_ALL_REDUCE: case TPU_OP_ALL_GATHER: case TPU_OP_REDUCE_SCATTER:
    case TPU_OP_ALL_TO_ALL: case TPU_OP_COLLECTIVE_PERMUTE: case TPU_OP_COLLECTIVE_BROADCAST:
    case TPU_OP_ALL_REDUCE_START: case TPU_OP_ALL_GATHER_START: case TPU_OP_COLLECTIVE_PERMUTE_START:
      return tile_collective(be, in, k);
    case TPU_OP_RESHAPE: {
      if (tpu__scatter_fused_operand(be, in)) return TPU_OK; /* inside the scatter kernel */
      if (tpu__reshape_moves_no_bytes(be->chip, in)) return TPU_OK;
      break;
    }
    case TPU_OP_WHILE: k->kind = TPU__K_WHILE; return TPU_OK;
    case TPU_OP_CONDITIONAL: k->kind = TPU__K_COND; return TPU_OK;
    case TPU_OP_CALL: k->kind = TPU__K_CALL; return TPU_OK;
    default:
      if (tpu_op_class_of(in->op) == TPU_CLS_PARSE_ONLY)
        return TPU_FAIL(be->d, TPU_ERR_UNSUPPORTED, in->loc,
                        "%s '%s': the TPU back end cannot compile this op", tpu_op_name(in->op), tpu_instr_user_name(in));
      break;
  }
  k->own = 1;
  if (in->op == TPU_OP_CONSTANT) return TPU_OK; /* loaded into HBM with the program */
  if (in->op == TPU_OP_BROADCAST && tpu__scatter_fused_operand(be, in)) return TPU_OK; /* the scatter fills it */
  tpu_prog_op po;
  memset(&po, 0, sizeof po);
  po.name = in->name;
  po.kind = in->op == TPU_OP_FUSION ? fusion_kind(in) : tpu_op_name(in->op);
  po.instr = in;
  /* A loop counter's compare, a slice offset from partition-id: the scalar unit's work. */
  po.scalar = tpu_dtype_is_array(in->shape.dtype) && in->shape.rank == 0;
  for (int i = 0; po.scalar && i < in->noperands; i++)
    po.scalar = tpu_dtype_is_array(in->operands[i]->shape.dtype) && in->operands[i]->shape.rank == 0;
  /* A compiled program's op on values in scalar memory (memory space S(6), SMEM: loop
   * counters, indices, a clipped norm's scale) is the scalar unit's work too: the compiler
   * gives none of them estimated_cycles (97 ops of the compiled families corpus on v5e).
   * Not a fusion writing an array outside SMEM that only reads such a value (a scan step's
   * matmul selecting its first state by `counter == 0`, Threefry's key): a vector or MXU
   * kernel, which the compiler times as one (all 299 top-level fusions of that kind in the
   * compiled corpora have estimated_cycles; the 100 unestimated ops reading SMEM are in-place
   * dynamic-update-slices and one-element and/convert/select). */
  int smem_reader_kernel = in->op == TPU_OP_FUSION && array_outside_smem(&in->shape);
  for (int i = -1; !po.scalar && !smem_reader_kernel && i < in->noperands; i++) {
    const tpu_shape *s = i < 0 ? &in->shape : &in->operands[i]->shape;
    po.scalar = s->layout_tail && strstr(s->layout_tail, "S(6)") != NULL;
  }
  k->vcopy_windows = tpu__windowed_vmem_copy(be, in);
  /* Own compilation's copy of a select-and-scatter's operand or source into its layout
   * (sas_layout.c) on a chip of one TensorCore without CMEM (v5e, v6e): the compiler keeps both
   * sides in VMEM and runs it as its windowed copy, 100 cycles a window of 640 of the small
   * tiles (output_window_bounds [640,1,1]), no start: libtpu probes off the corpus
   * (probes/sas_layout.py), f32[1,4000,32] into T(1,128) 4,000 tiles 700 cycles, [2,2500,96]
   * T(2,128) 2,500 tiles 400, bf16[1,80,80,48] T(2,128) 6,400 tiles 1,000, f32[3,50,50,8]
   * T(4,128) 2,500 tiles 400, on v5e and v6e alike. Where both sides fit in the scoped VMEM. */
  int64_t sas_tiles = tpu__sas_copy_in(in) ? tpu__sas_copy_small_tiles(be->chip, in) : 0;
  if (!k->vcopy_windows && sas_tiles > 0 && be->chip->cmem_bytes <= 0 && be->chip->tensorcores <= 1 &&
      tpu__padded_bytes(be, &in->shape) + tpu__padded_bytes(be, &in->operands[0]->shape) <= be->chip->vmem_bytes) {
    k->vcopy_windows = 1;
    k->vcopy_ops = 100 * ((sas_tiles + 639) / 640);
  } else {
    sas_tiles = 0;
  }
  /* ... and one that keeps the lanes' dimension and writes whole tiles (f32[8,3000,512] {2,1,0}
   * into {2,0,1}): the windowed relayout of whole registers within VMEM that a grouped
   * convolution's merge copy is (below: whole_relayout_window_cycles a window, one unless the
   * two sides outgrow the scoped VMEM, then windows of 128 tiles, and whole_relayout_tile_cycles
   * a tile; max_gradpool1d_8x3000x512_w3s3_same_f32's copy of 96,000 tiles 28,248 cycles on
   * v5e, tpusim 60,000) */
  if (!k->vcopy_windows && tpu__sas_copy_in(in) && be->chip->cmem_bytes <= 0 && be->chip->tensorcores <= 1 &&
      be->chip->whole_relayout_tile_cycles > 0 && !tpu__moves_minor(be->chip, in) && in->shape.has_layout &&
      in->shape.rank >= 2 &&
      tpu__tile_rows(be->chip, in->shape.dtype, in->shape.dims[in->shape.minor_to_major[1]]) >=
          (be->chip->vector_sublanes > 0 ? be->chip->vector_sublanes : 8) &&
      tpu__padded_bytes(be, &in->shape) + tpu__padded_bytes(be, &in->operands[0]->shape) <= be->chip->vmem_bytes) {
    int64_t t = tpu__tiles_as(be->chip, &in->shape, in->shape.minor_to_major[1], in->shape.minor_to_major[0]);
    int64_t windows = 2 * tpu__padded_bytes(be, &in->shape) > tpu__vmem_budget(be->chip) ? (t + 127) / 128 : 1;
    k->vcopy_windows = 1;
    k->vcopy_ops = (int64_t)ceil((double)windows * be->chip->whole_relayout_window_cycles +
                                 (double)t * be->chip->whole_relayout_tile_cycles);
    sas_tiles = t;
  }
  /* A parameter's copy after another kernel reads the parameter prefetched into VMEM
   * (prefetched_param_copy): on a chip of one TensorCore without CMEM (v5e, v6e) it writes
   * VMEM too (relayout_off_core) and is the compiler's windowed copy within VMEM (100 cycles
   * on v5e and v6e for s8[1,16] and s8[7,16] {1,0} -> {0,1}); elsewhere without CMEM (v5p)
   * it writes HBM and pays one kernel start, not a relayout's two (2,212 cycles where the
   * first copy, from HBM, costs 4,318). v4 reads it from CMEM, timed as HBM: unchanged. */
  int pf_copy = !k->vcopy_windows && be->chip->cmem_bytes <= 0 && tpu__prefetched_param_copy(be, in);
  if (pf_copy && be->chip->tensorcores <= 1 && !tpu__relayout_off_core(be, in) && tpu__moves_minor(be->chip, in)) {
    int64_t bytes = tpu__padded_bytes(be, &in->shape), win = (int64_t)1 << 20;
    k->vcopy_windows = bytes > win ? (bytes + win - 1) / win : 1;
  }
  /* A grouped convolution's merge copy of whole f32 registers (copy_kind.c
   * tpu__group_merge_whole_tiles): within VMEM on a chip of one TensorCore without CMEM, a
   * windowed copy of its result's tiles (4 KiB each), no start: whole_relayout_window_cycles a
   * window, one unless its two sides outgrow the scoped VMEM (then 128 tiles each), and
   * whole_relayout_tile_cycles a tile (probes/gconv_merge.py); off the core, a relayout of two
   * half-register units a tile. */
  int64_t whole = tpu__group_merge_whole_tiles(be->chip, in);
  int off_core = be->chip->cmem_bytes > 0 || be->chip->tensorcores > 1;
  if (whole > 0 && !off_core && !k->vcopy_windows) {
    int64_t bytes = whole * 4096, win = (int64_t)1 << 20;
    k->vcopy_windows = (bytes + win - 1) / win;
    if (be->chip->whole_relayout_tile_cycles > 0) {
      int64_t windows = 2 * bytes > tpu__vmem_budget(be->chip) ? (whole + 127) / 128 : 1;
      k->vcopy_windows = 1;
      k->vcopy_ops = (int64_t)ceil((double)windows * be->chip->whole_relayout_window_cycles +
                                   (double)whole * be->chip->whole_relayout_tile_cycles);
    }
  }
  if (k->vcopy_windows) po.scalar = 1; /* no kernel start: see windowed_vmem_copy */
  if (tpu__vmem_source_kernel(be, in)) po.scalar = 1; /* no kernel start (vmem_source.c) */
  int wide = tpu__wide_int_source_kernels(be, in); /* 64-bit words computed apart (vmem_source.c) */
  if (wide < 0) po.scalar = 1;
  else if (wide > 1) po.starts = wide;
  po.relayout = tpu__relayout_off_core(be, in) && !k->vcopy_windows && !pf_copy;
  /* A compiled program's top-level dynamic-update-slice (in place, no window_config: the
   * compiler gives none of its 20 in the v5e families corpus an estimate) is the DMA engines'
   * transfer of the update, no kernel. */
  if (in->op == TPU_OP_DYNAMIC_UPDATE_SLICE && in->shape.layout_tail && in->parent && in->parent->is_entry) po.dma = 1;
  /* A kernel timed by its tiles starts them after its first load's latency as well as its
   * kernel start: relayout_tile_cycles is the slope of the compiler's figures after an
   * intercept of kov + the HBM latency (v5e 1,815 cycles: 224 tiles 3,849, 896 9,950; v6e
   * 2,116; the tiny-kernel floor, docs/timing.md), whether the kernel reads HBM or VMEM
   * (probes/small_tiles.py: bf16[304,6,128] padded within VMEM, 5,824 cycles on v5e). */
  int64_t rtiles = be->chip->relayout_tile_cycles > 0 ? tpu__relayout_tiles(be->chip, in) : 0;
  if (rtiles > 0) {
    double lat_s = tpu_timing_hbm_latency_s(be->chip);
    po.min_body_cycles = lat_s * be->chip->clock_hz + (double)rtiles * tpu__relayout_tile_cost(be->chip, in);
  }
  if (whole > 0 && off_core && be->chip->relayout_tile_cycles > 0) po.min_body_cycles = 2.0 * (double)whole * be->chip->relayout_tile_cycles;
  /* a grouped convolution's lane transpose into or out of its split layout: its start and
   * each side's tiles at the chip's rates (copy_kind.c tpu__group_transpose_tiles) */
  int64_t gsplit, gwide;
  if (be->chip->group_transpose_tile_cycles > 0 && tpu__group_transpose_tiles(be, in, &gsplit, &gwide)) {
    const tpu_chip *ch = be->chip;
    double least = ch->group_transpose_start_cycles + (double)gsplit * ch->group_transpose_tile_cycles +
                   (double)gwide * ch->group_transpose_wide_tile_cycles;
    if (least > po.min_cycles) po.min_cycles = least;
  }
  double patch = tpu__patch_relayout_cycles(be->chip, in); /* a patch embedding's image relaid out */
  if (patch > po.min_body_cycles) po.min_body_cycles = patch;
  int64_t pad_windows = tpu__pad_window_tiles(be->chip, in); /* a pad the compiler windows */
  if ((double)pad_windows * be->chip->pad_window_tile_cycles > po.min_body_cycles)
    po.min_body_cycles = (double)pad_windows * be->chip->pad_window_tile_cycles;
  /* a transposing copy into or out of tiles of fewer than 8 rows (copy_kind.c) */
  double small = sas_tiles > 0 ? 0 : (double)tpu__small_tile_transpose_tiles(be->chip, in) * be->chip->small_tile_transpose_cycles;
  if (small > po.min_body_cycles) po.min_body_cycles = small;
  /* a loop fusion relaying out small tiles between HBM arrays: its transfers at the streaming
   * rate and hbm_relayout_tile_cycles a tile after kov + the HBM latency (copy_kind.c) */
  int64_t htiles = be->chip->hbm_relayout_tile_cycles > 0 ? tpu__hbm_relayout_tiles(be->chip, in) : 0;
  if (htiles > 0) {
    double lat_s = tpu_timing_hbm_latency_s(be->chip);
    /* (in tpusim's own compilation, its arrays as the back end lays them out: a program's
     * result in its least padded tiling, not JAX's entry layout) */
    int own = !in->shape.layout_tail;
    double bytes = (double)(own ? tpu__value_bytes(be, in, &in->shape) : tpu__padded_bytes(be, &in->shape));
    for (int i = 0; i < in->noperands; i++)
      bytes += (double)(own ? tpu__value_bytes(be, in->operands[i], &in->operands[i]->shape)
                            : tpu__padded_bytes(be, &in->operands[i]->shape));
    double body = lat_s * be->chip->clock_hz + (double)htiles * be->chip->hbm_relayout_tile_cycles +
                  bytes * be->chip->clock_hz / tpu_chip_hbm_stream_bw(be->chip);
    if (body > po.min_body_cycles) po.min_body_cycles = body;
  }
  /* a lane-moving copy between HBM arrays: hbm_relayout_row_cycles a row of 128 lanes of its
   * two sides, start to end, the TensorCores sharing the rows (copy_kind.c) */
  int64_t lrows = po.relayout && be->chip->hbm_relayout_row_cycles > 0 ? tpu__relayout_rows(be, in) : 0;
  if (lrows > 0) {
    double least = (double)lrows * be->chip->hbm_relayout_row_cycles /
                   (double)(be->chip->tensorcores > 1 ? be->chip->tensorcores : 1);
    if (least > po.min_cycles) po.min_cycles = least;
  }
  /* a transposing copy from HBM into VMEM: per tile of its HBM side, no start (copy_kind.c) */
  int64_t cin_tiles = tpu__copy_in_transpose_tiles(be->chip, in);
  double cin = (double)cin_tiles * be->chip->copy_in_transpose_tile_cycles;
  if (cin > po.min_cycles) po.min_cycles = cin;
  /* ... and, however few its tiles, it waits for its first load after its start: at least kov
   * plus the HBM latency, read prefetched or not (compiled families, tune split: 1 or 2 tiles,
   * bf16[16,7] {0,1} -> {1,0} into VMEM 1,908 cycles on v5e, 2,204 on v6e; bf16[169,6] 1,916;
   * tpusim, its read prefetched during the kernel before, 964) */
  if (cin_tiles > 0) {
    double lat_s = tpu_timing_hbm_latency_s(be->chip);
    if (lat_s * be->chip->clock_hz > po.min_body_cycles) po.min_body_cycles = lat_s * be->chip->clock_hz;
  }
  if (in->op == TPU_OP_SORT && be->chip->sort_network) { /* its network's waits too */
    tpu__sort_work w;
    tpu__sort_cost(be, in, &w);
    po.min_body_cycles = w.body_cycles; /* one TensorCore's share already */
  }
  const tpu_instr *path[NEST_MAX];
  int depth = 0;
  const tpu_instr *mm = is_mxu_op(in) ? in : in->op == TPU_OP_FUSION ? find_matmul(in->calls, path, &depth) : NULL;
  cost c = {0, 0, 0, 0, 0};
  if (!is_mxu_op(in)) add_cost(be, in, &c);
  if (mm) {
    k->kind = TPU__K_MATMUL;
    matmul_dims(be, mm, k);
    if (mm == in) {
      k->mm_lhs = 0;
      k->mm_rhs = 1;
    } else {
      k->mm_lhs = fused_source(in, path, depth, mm->operands[0]);
      k->mm_rhs = fused_source(in, path, depth, mm->operands[1]);
    }
    const int64_t R = be->chip->mxu_rows, C = be->chip->mxu_cols;
    /* a packed convolution's least time is one TensorCore's: a megacore chip's cores share
     * its positions */
    po.min_cycles = k->kernel_min_cycles / (double)(be->chip->tensorcores > 1 ? be->chip->tensorcores : 1);
    po.m = k->m;
    po.k = k->k_flops;
    po.n = k->n;
    po.b = k->b;
    const double cx = tpu_dtype_is_complex(k->mm_dtype) ? 4.0 : 1.0; /* real flops of a complex MAC */
    po.flops = (k->mm_flops > 0 ? k->mm_flops : cx * 2.0 * (double)k->b * (double)k->m * (double)k->k_flops * (double)k->n) + c.flops;
    po.padded_flops = cx * 2.0 * (double)k->b * (double)round_up(k->m, be->chip->vector_sublanes) *
                          (double)round_up(k->k, R) * (double)round_up(k->n, C) + c.padded_flops;
    /* the fusion's other dots (an attention kernel's value dot): their work too */
    tpu__xdot xd[TPU__XDOT_MAX];
    int nx = mm == in ? 0 : tpu__fusion_xdots(be, in, mm, xd);
    for (int i = 0; i < nx; i++) {
      po.flops += xd[i].flops;
      po.padded_flops += xd[i].padded_flops;
    }
  } else if (in->op == TPU_OP_COPY &&
             ((!tpu__vmem_copy(in) && !tpu__relayout_kernel(be, in)) || tpu__dup_output_copy(be, in))) {
    k->kind = TPU__K_COPY;
    po.dma = tpu__copy_via_vmem(be, in) || tpu__dup_output_copy(be, in);
  } else if (in->op == TPU_OP_COPY && tpu__copy_out_of_vmem(be, in)) {
    k->kind = TPU__K_STREAM; /* a vector kernel that pays no read of its operand in VMEM */
    po.copy_out = 1;
    po.flops = c.flops;
    po.padded_flops = c.padded_flops;
  } else if (in->op == TPU_OP_CHOLESKY || in->op == TPU_OP_TRIANGULAR_SOLVE) {
    k->kind = TPU__K_LINALG;
    po.flops = c.flops;
    po.padded_flops = c.padded_flops;
  } else {
    k->kind = TPU__K_STREAM;
    po.flops = c.flops;
    po.padded_flops = c.padded_flops;
  }
  k->vpu = c.vpu;
  k->eup = c.eup;
  k->xlu = c.xlu;
  if (in->op == TPU_OP_FUSION) k->what = po.kind;
  k->op = tpu_program_add_op(be->p, &po);
  if (k->op < 0) return TPU_FAIL(be->d, TPU_ERR_NOMEM, tpu_noloc(), "out of memory");
  return TPU_OK;
}

/* Marks the computations that run as kernels, remembering who runs each. */
static tpu_status mark(tpu__be *be, const tpu_comp *c, const tpu_instr *caller, int depth) {
  int ci = tpu__be_comp_index(be, c);
  if (ci < 0) return TPU_OK;
  if (depth > 64)
    return TPU_FAIL(be->d, TPU_ERR_LIMIT, c->loc, "computations nested more than 64 deep");
  if (be->scheduled[ci]) return TPU_OK;
  be->scheduled[ci] = 1;
  be->caller[ci] = caller;
  for (int i = 0; i < c->norder; i++) {
    const tpu_instr *in = c->order[i];
    if (in->op == TPU_OP_WHILE) {
      TPU_TRY(mark(be, in->condition, in, depth + 1));
      TPU_TRY(mark(be, in->body, in, depth + 1));
    } else if (in->op == TPU_OP_CONDITIONAL) {
      for (int b = 0; b < in->nbranches; b++) TPU_TRY(mark(be, in->branches[b], in, depth + 1));
    } else if (in->op == TPU_OP_CALL) {
      TPU_TRY(mark(be, in->to_apply, in, depth + 1));
    }
  }
  return TPU_OK;
}

tpu_status tpu__pass_tile(tpu__be *be) {
  const tpu_module *m = be->m;
  TPU_TRY(mark(be, m->entry, NULL, 0));
  for (int ci = 0; ci < m->ncomps; ci++) {
    if (!be->scheduled[ci]) continue;
    const tpu_comp *c = m->comps[ci];
    for (int i = 0; i < c->norder; i++) TPU_TRY(tile_instr(be, c->order[i]));
  }
  return TPU_OK;
}
