"""bulk_mm.py: matmul kernels in bulk (bulk.py runs them): K-loop BlockSpec pipelines crossed
over element types (f32 at the default and HIGHEST precision, bf16 to f32 or bf16, int8 x int8
-> int32, int8 weights dequantised to bf16), accumulators (f32/int32 scratch with pl.when init
and finalise, the output block itself, a fori_loop over K chunks of a whole-K block, one K
block), operand layouts (A @ B, A @ B^T, A^T @ B through dot_general), grid orders and
dimension semantics, block shapes and epilogues; and batched dot_generals on 3-D grids."""
import itertools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from bulk_ew import rand, F32, BF16, I32, I8

# (name, lhs dtype, rhs dtype, accumulator dtype, output dtype, precision)
TYPES = [
    ("f32", F32, F32, F32, F32, None), ("f32hi", F32, F32, F32, F32, lax.Precision.HIGHEST),
    ("bf16f32", BF16, BF16, F32, F32, None), ("bf16", BF16, BF16, F32, BF16, None),
    ("i8", I8, I8, I32, I32, None), ("w8bf16", BF16, I8, F32, BF16, None),
]
ACCS = ["scratch", "out", "fori", "one"]
LAYOUTS = ["nn", "nt", "tn"]
# (M, K, N, bm, bk, bn)
SIZES = [(256, 512, 256, 128, 128, 128), (128, 1024, 384, 64, 256, 128), (512, 256, 128, 256, 128, 128),
         (64, 512, 256, 32, 256, 256), (256, 256, 512, 128, 256, 256), (96, 384, 128, 32, 128, 128)]
ORDERS = ["ijk", "jik"]
SEMS = [("parallel", "parallel", "arbitrary"), ("arbitrary", "arbitrary", "arbitrary"), None]
EPIS = ["none", "bias_relu", "scale"]
DN = {"nn": (((1,), (0,)), ((), ())), "nt": (((1,), (1,)), ((), ())), "tn": (((0,), (0,)), ((), ()))}


def mm_call(tn, lt, rt, at, ot, prec, acc, lay, size, order, sem, epi):
    M, K, N, bm, bk, bn = size
    if acc == "one":
        bk = K

    def dot(a, b):
        if rt == I8 and lt == BF16:
            b = b.astype(BF16)
        return lax.dot_general(a, b, DN[lay], precision=prec, preferred_element_type=at)

    def finish(v, bias):
        if epi == "bias_relu":
            v = jnp.maximum(v + bias.astype(v.dtype), 0)
        elif epi == "scale":
            v = v * (3 if at == I32 else 0.5)
        return v.astype(ot)

    def fn(a, b, bias, interpret=False):
        nk = K // bk
        if order == "ijk":
            grid, ix = (M // bm, N // bn, nk), lambda i, j, k: (i, j, k)
        else:
            grid, ix = (N // bn, M // bm, nk), lambda j, i, k: (i, j, k)
        a_blk, a_map = ((bm, bk), lambda i, j, k: (i, k)) if lay != "tn" else ((bk, bm), lambda i, j, k: (k, i))
        b_blk, b_map = ((bk, bn), lambda i, j, k: (k, j)) if lay != "nt" else ((bn, bk), lambda i, j, k: (j, k))
        specs = [pl.BlockSpec(a_blk, lambda *g: a_map(*ix(*g))), pl.BlockSpec(b_blk, lambda *g: b_map(*ix(*g))),
                 pl.BlockSpec((1, bn), lambda *g: (0, ix(*g)[1]))]
        out_spec = pl.BlockSpec((bm, bn), lambda *g: ix(*g)[:2])
        scratch = []

        def kernel(a_ref, b_ref, bias_ref, o_ref, *scr):
            k = pl.program_id(2)
            last = k == pl.num_programs(2) - 1
            if acc == "scratch":
                acc_ref = scr[0]

                @pl.when(k == 0)
                def _():
                    acc_ref[...] = jnp.zeros_like(acc_ref)
                acc_ref[...] += dot(a_ref[...], b_ref[...])

                @pl.when(last)
                def _():
                    o_ref[...] = finish(acc_ref[...], bias_ref[...])
            elif acc == "out":
                @pl.when(k == 0)
                def _():
                    o_ref[...] = jnp.zeros_like(o_ref)
                o_ref[...] += dot(a_ref[...], b_ref[...]).astype(o_ref.dtype)
            elif acc == "fori":
                ch = 128

                def body(c, s):
                    kk = pl.ds(pl.multiple_of(c * ch, ch), ch)
                    av = a_ref[:, kk] if lay != "tn" else a_ref[kk, :]
                    bv = b_ref[kk, :] if lay != "nt" else b_ref[:, kk]
                    return s + dot(av, bv)
                v = lax.fori_loop(0, bk // ch, body, jnp.zeros((bm, bn), at), unroll=(bk // ch) % 2 == 0)
                o_ref[...] = finish(v, bias_ref[...])
            else:
                o_ref[...] = finish(dot(a_ref[...], b_ref[...]), bias_ref[...])
        if acc == "scratch":
            scratch = [pltpu.VMEM((bm, bn), at)]
        kw = {}
        if sem is not None:
            kw["compiler_params"] = pltpu.CompilerParams(dimension_semantics=sem)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((M, N), ot), grid=grid, in_specs=specs,
                              out_specs=out_spec, scratch_shapes=scratch, interpret=interpret, **kw)(a, b, bias)

    def args(r):
        ash = (M, K) if lay != "tn" else (K, M)
        bsh = (K, N) if lay != "nt" else (N, K)
        lo = -100 if lt == I8 else -2
        return [rand(r, ash, lt, lo, -lo), rand(r, bsh, rt, -100 if rt == I8 else -2, 100 if rt == I8 else 2),
                rand(r, (1, N), I32 if at == I32 else F32, -50 if at == I32 else -1, 50 if at == I32 else 1)]
    return fn, args


def bmm_call(b, m, k, n, bb, dt, eq):
    def fn(x, y, interpret=False):
        def kernel(x_ref, y_ref, o_ref):
            o_ref[...] = jnp.einsum(eq, x_ref[...], y_ref[...], preferred_element_type=F32).astype(o_ref.dtype)
        xs = (b, m, k)
        ys = (b, k, n) if eq.endswith("bkn->bmn") else (b, n, k)
        del xs, ys
        osh = (b, m, n)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(osh, dt), grid=(b // bb,),
                              in_specs=[pl.BlockSpec((bb,) + x.shape[1:], lambda i: (i, 0, 0)),
                                        pl.BlockSpec((bb,) + y.shape[1:], lambda i: (i, 0, 0))],
                              out_specs=pl.BlockSpec((bb, m, n), lambda i: (i, 0, 0)),
                              compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
                              interpret=interpret)(x, y)

    def args(r):
        ysh = (b, k, n) if eq.endswith("bkn->bmn") else (b, n, k)
        return [rand(r, (b, m, k), dt, -2, 2), rand(r, ysh, dt, -2, 2)]
    return fn, args


def cases():
    out = []
    combos = list(itertools.product(range(len(TYPES)), ACCS, LAYOUTS))
    for c, (t, acc, lay) in enumerate(combos):
        tn, lt, rt, at, ot, prec = TYPES[t]
        if acc == "out" and ot != at:
            continue  # accumulating into a narrower output block is not the pattern
        size = SIZES[c % len(SIZES)]
        if lay == "tn" and size[3] % 128:  # A^T's block has bm on lanes: a multiple of 128
            size = next(s for d in range(len(SIZES)) for s in [SIZES[(c + d) % len(SIZES)]] if s[3] % 128 == 0)
        order = ORDERS[(c // 2) % 2]
        sem = SEMS[c % 3]
        epi = EPIS[(c // 3) % 3] if acc != "out" else "none"
        M, K, N, bm, bk, bn = size
        name = "mm_%s_%s_%s_%s_%dx%dx%d_b%dx%dx%d_%s%s" % (
            tn, acc, lay, order, M, K, N, bm, (K if acc == "one" else bk), bn,
            {None: "nosem", SEMS[0]: "ppa", SEMS[1]: "aaa"}[sem], "" if epi == "none" else "_" + epi)
        fn, args = mm_call(tn, lt, rt, at, ot, prec, acc, lay, size, order, sem, epi)
        out.append((name, fn, args))
    for (b, m, k, n, bb), dt, eq in [((4, 128, 128, 128, 2), F32, "bmk,bkn->bmn"), ((4, 64, 128, 256, 1), BF16, "bmk,bkn->bmn"),
                                     ((2, 128, 64, 128, 2), F32, "bmk,bnk->bmn"), ((8, 32, 128, 128, 4), BF16, "bmk,bnk->bmn"),
                                     ((2, 8, 128, 128, 1), F32, "bmk,bkn->bmn"), ((6, 16, 256, 128, 3), BF16, "bmk,bnk->bmn")]:
        fn, args = bmm_call(b, m, k, n, bb, dt, eq)
        out.append(("bmm_%s_%s_%dx%dx%dx%d_bb%d" % ("f32" if dt == F32 else "bf16", eq.replace(",", "_").replace("->", "_"),
                                                     b, m, k, n, bb), fn, args))
    return out
