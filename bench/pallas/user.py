#!/usr/bin/env python3
"""user.py: user-style Pallas TPU kernels (not the library's, not tuned on): each is lowered for
a TPU, decoded, run on tpusim (reference and TPU back ends; a time on v5e, v5p and v6e) and
compared with Pallas's interpret mode on CPU.

    PYTHONPATH=python python3 bench/pallas/user.py [NAME_SUBSTRING...]     # one line a kernel

The kernels are the patterns people write: BlockSpec pipelines with K-loop accumulators,
scalar prefetch, manual double-buffered DMA, fori_loop bodies, int8 matmuls, kernels inside
larger jitted functions, odd block shapes, bf16/f32 mixes, pl.when on program_id arithmetic,
broadcasts, reductions and transposes inside kernels. Split tune/test by the first byte of
sha1(name) as gen.py does; the test split is printed first."""
import functools
import hashlib
import os
import sys
import time
import zlib

os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
import numpy as np
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tpusim"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import pallas_decode  # noqa: E402

CASES = []


def case(name, make_args):
    def deco(fn):
        CASES.append((name, fn, make_args))
        return fn
    return deco


def f32(r, *shape, scale=1.0):
    return jnp.asarray(r.standard_normal(shape) * scale, jnp.float32)


def bf(r, *shape):
    return jnp.asarray(r.standard_normal(shape), jnp.bfloat16)


# ---- K-loop accumulating into the output block (no scratch), f32, odd N ----
@case("acc_into_out_f32_48x512x384", lambda r: [f32(r, 48, 512), f32(r, 512, 384)])
def acc_into_out(x, y, interpret=False):
    def kernel(x_ref, y_ref, o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += jnp.dot(x_ref[...], y_ref[...])
    bm, bk = 16, 128
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((48, 384), jnp.float32), grid=(48 // bm, 512 // bk),
                          in_specs=[pl.BlockSpec((bm, bk), lambda i, k: (i, k)),
                                    pl.BlockSpec((bk, 384), lambda i, k: (k, 0))],
                          out_specs=pl.BlockSpec((bm, 384), lambda i, k: (i, 0)), interpret=interpret)(x, y)


# ---- int8 matmul, int32 accumulator scratch, dequantised f32 output ----
@case("int8_matmul_64x256x128", lambda r: [jnp.asarray(r.integers(-128, 128, (64, 256)), jnp.int8),
                                           jnp.asarray(r.integers(-128, 128, (256, 128)), jnp.int8),
                                           jnp.asarray(r.random((1, 128)) * 0.01, jnp.float32)])
def int8_matmul(x, w, s, interpret=False):
    def kernel(x_ref, w_ref, s_ref, o_ref, acc):
        k = pl.program_id(1)

        @pl.when(k == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)
        acc[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.int32)

        @pl.when(k == pl.num_programs(1) - 1)
        def _():
            o_ref[...] = acc[...].astype(jnp.float32) * s_ref[...]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32), grid=(2, 2),
                          in_specs=[pl.BlockSpec((32, 128), lambda i, k: (i, k)),
                                    pl.BlockSpec((128, 128), lambda i, k: (k, 0)),
                                    pl.BlockSpec((1, 128), lambda i, k: (0, 0))],
                          out_specs=pl.BlockSpec((32, 128), lambda i, k: (i, 0)),
                          scratch_shapes=[pltpu.VMEM((32, 128), jnp.int32)], interpret=interpret)(x, w, s)


# ---- fori_loop over row chunks of a block, dynamic pl.ds slices ----
@case("fori_rows_gelu_f32_64x256", lambda r: [f32(r, 64, 256)])
def fori_rows(x, interpret=False):
    def kernel(x_ref, o_ref):
        def body(i, carry):
            rows = pl.ds(pl.multiple_of(i * 8, 8), 8)
            v = x_ref[rows, :]
            o_ref[rows, :] = jax.nn.gelu(v, approximate=True) + carry
            return carry + jnp.sum(v)
        lax.fori_loop(0, x_ref.shape[0] // 8, body, jnp.float32(0))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                          in_specs=[pl.BlockSpec((32, 256), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((32, 256), lambda i: (i, 0)), interpret=interpret)(x)


# ---- scalar prefetch: per-block scale factors and a block permutation ----
@case("prefetch_scale_perm_f32", lambda r: [jnp.asarray([2, 0, 3, 1], jnp.int32),
                                            jnp.asarray([0.5, -1.0, 2.0, 3.0], jnp.float32), f32(r, 64, 128)])
def prefetch_scale(perm, scales, x, interpret=False):
    def kernel(perm_ref, sc_ref, x_ref, o_ref):
        i = pl.program_id(0)
        o_ref[...] = x_ref[...] * sc_ref[i] + perm_ref[i].astype(jnp.float32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=2, grid=(4,),
                              in_specs=[pl.BlockSpec((16, 128), lambda i, p, s: (p[i], 0))],
                              out_specs=pl.BlockSpec((16, 128), lambda i, p, s: (i, 0))),
                          interpret=interpret)(perm, scales, x)


# ---- manual double-buffered DMA in and out (both operands in ANY), scratch semaphores ----
@case("manual_dma_inout_f32_128x128", lambda r: [f32(r, 128, 128)])
def manual_dma_inout(x, interpret=False):
    ch = 16

    def kernel(x_hbm, o_hbm, buf, obuf, sin, sout):
        n = x_hbm.shape[0] // ch

        def cin(i, s):
            return pltpu.make_async_copy(x_hbm.at[pl.ds(i * ch, ch)], buf.at[s], sin.at[s])

        def cout(i, s):
            return pltpu.make_async_copy(obuf.at[s], o_hbm.at[pl.ds(i * ch, ch)], sout.at[s])
        cin(0, 0).start()

        @pl.loop(0, n)
        def _(i):
            s = i % 2

            @pl.when(i + 1 < n)
            def _():
                cin(i + 1, 1 - s).start()
            cin(i, s).wait()

            @pl.when(i >= 2)
            def _():
                cout(i - 2, s).wait()
            obuf[s] = jnp.tanh(buf[s]) * 3.0
            cout(i, s).start()
        cout(n - 2, n % 2).wait()
        cout(n - 1, (n - 1) % 2).wait()
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
                          scratch_shapes=[pltpu.VMEM((2, ch, 128), jnp.float32), pltpu.VMEM((2, ch, 128), jnp.float32),
                                          pltpu.SemaphoreType.DMA((2,)), pltpu.SemaphoreType.DMA((2,))],
                          interpret=interpret)(x)


# ---- a kernel inside a larger jitted function with XLA ops around it ----
@case("inside_jit_layernorm_f32_64x256", lambda r: [f32(r, 64, 256), f32(r, 256), f32(r, 256)])
def inside_jit(x, g, b, interpret=False):
    def kernel(x_ref, g_ref, b_ref, o_ref):
        v = x_ref[...]
        mu = jnp.mean(v, axis=-1, keepdims=True)
        var = jnp.mean((v - mu) ** 2, axis=-1, keepdims=True)
        o_ref[...] = (v - mu) * lax.rsqrt(var + 1e-5) * g_ref[...] + b_ref[...]
    h = jnp.tanh(x) * 2.0 + 1.0
    y = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                       in_specs=[pl.BlockSpec((16, 256), lambda i: (i, 0)), pl.BlockSpec((1, 256), lambda i: (0, 0)),
                                 pl.BlockSpec((1, 256), lambda i: (0, 0))],
                       out_specs=pl.BlockSpec((16, 256), lambda i: (i, 0)),
                       interpret=interpret)(h, g.reshape(1, -1), b.reshape(1, -1))
    return jnp.sum(y, axis=0) + y[3]


# ---- odd shapes: a grid of cdiv blocks over an array that is no multiple of the block ----
@case("edge_blocks_f32_100x300", lambda r: [f32(r, 100, 300), f32(r, 100, 300)])
def edge_blocks(x, y, interpret=False):
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.maximum(x_ref[...], y_ref[...]) - jnp.minimum(x_ref[...], 0.25)
    bs = (32, 128)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(pl.cdiv(100, bs[0]), pl.cdiv(300, bs[1])),
                          in_specs=[pl.BlockSpec(bs, lambda i, j: (i, j))] * 2,
                          out_specs=pl.BlockSpec(bs, lambda i, j: (i, j)), interpret=interpret)(x, y)


# ---- bf16 in, f32 math, bf16 out; a row of bias broadcast; sigmoid ----
@case("bf16_mix_swiglu_64x256x256", lambda r: [bf(r, 64, 256), bf(r, 256, 256), bf(r, 256, 256)])
def swiglu(x, wg, wu, interpret=False):
    def kernel(x_ref, g_ref, u_ref, o_ref):
        xv = x_ref[...]
        g = jnp.dot(xv, g_ref[...], preferred_element_type=jnp.float32)
        u = jnp.dot(xv, u_ref[...], preferred_element_type=jnp.float32)
        o_ref[...] = (g * jax.nn.sigmoid(g) * u).astype(o_ref.dtype)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 256), jnp.bfloat16), grid=(2, 2),
                          in_specs=[pl.BlockSpec((32, 256), lambda i, j: (i, 0)),
                                    pl.BlockSpec((256, 128), lambda i, j: (0, j)),
                                    pl.BlockSpec((256, 128), lambda i, j: (0, j))],
                          out_specs=pl.BlockSpec((32, 128), lambda i, j: (i, j)), interpret=interpret)(x, wg, wu)


# ---- transposes, column reductions, iota masks, where ----
@case("transpose_colsum_mask_f32_128x128", lambda r: [f32(r, 128, 128)])
def transpose_mask(x, interpret=False):
    def kernel(x_ref, o_ref, s_ref):
        v = x_ref[...]
        t = v.T
        row = lax.broadcasted_iota(jnp.int32, t.shape, 0)
        col = lax.broadcasted_iota(jnp.int32, t.shape, 1)
        m = jnp.where(row >= col, t, -v)
        o_ref[...] = m
        s_ref[...] = jnp.sum(m, axis=0, keepdims=True) + jnp.max(v, axis=0, keepdims=True)
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct((128, 128), jnp.float32),
                                             jax.ShapeDtypeStruct((1, 128), jnp.float32)),
                          interpret=interpret)(x)


# ---- q @ k^T (contracting the minor dims of both), 3-D blocks with a squeezed batch dim ----
@case("qkT_batched_f32_4x64x128", lambda r: [f32(r, 4, 64, 128), f32(r, 4, 64, 128)])
def qkT(q, k, interpret=False):
    def kernel(q_ref, k_ref, o_ref):
        s = lax.dot_general(q_ref[...], k_ref[...], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        o_ref[...] = s * 0.125
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((4, 64, 64), jnp.float32), grid=(4,),
                          in_specs=[pl.BlockSpec((None, 64, 128), lambda b: (b, 0, 0))] * 2,
                          out_specs=pl.BlockSpec((None, 64, 64), lambda b: (b, 0, 0)), interpret=interpret)(q, k)


# ---- einsum with a batch dim inside the kernel ----
@case("einsum_bqd_bkd_f32_2x32x128", lambda r: [f32(r, 2, 32, 128), f32(r, 2, 32, 128)])
def einsum_b(q, k, interpret=False):
    def kernel(q_ref, k_ref, o_ref):
        o_ref[...] = jnp.einsum("bqd,bkd->bqk", q_ref[...], k_ref[...], preferred_element_type=jnp.float32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((2, 32, 32), jnp.float32), interpret=interpret)(q, k)


# ---- program_id arithmetic in index maps and pl.when: a lower-triangular block sweep ----
@case("tri_blocks_pid_arith_f32_128x512", lambda r: [f32(r, 128, 512)])
def tri_blocks(x, interpret=False):
    def kernel(x_ref, o_ref):
        i, j = pl.program_id(0), pl.program_id(1)

        @pl.when(j <= i)
        def _():
            o_ref[...] = x_ref[...] * (i * 2 + j + 1).astype(jnp.float32)

        @pl.when(j > i)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4, 4),
                          in_specs=[pl.BlockSpec((32, 128), lambda i, j: (jnp.minimum(i, j), 3 - j))],
                          out_specs=pl.BlockSpec((32, 128), lambda i, j: (i, j)), interpret=interpret)(x)


# ---- SMEM scratch: a scalar running total across the grid, written at the end ----
@case("smem_scalar_total_f32_64x128", lambda r: [f32(r, 64, 128)])
def smem_total(x, interpret=False):
    def kernel(x_ref, o_ref, tot):
        i = pl.program_id(0)

        @pl.when(i == 0)
        def _():
            tot[0] = 0.0
        tot[0] += jnp.sum(x_ref[...])
        o_ref[...] = jnp.full(o_ref.shape, tot[0], jnp.float32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32), grid=(4,),
                          in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                          scratch_shapes=[pltpu.SMEM((1,), jnp.float32)], interpret=interpret)(x)


# ---- int32 bit ops, shifts, integer division, casts ----
@case("int_bits_i32_32x128", lambda r: [jnp.asarray(r.integers(-2**20, 2**20, (32, 128)), jnp.int32)])
def int_bits(x, interpret=False):
    def kernel(x_ref, o_ref, f_ref):
        v = x_ref[...]
        a = (v >> 3) ^ (v << 2) & 0xFFFF
        b = lax.shift_right_logical(v, 5) | 7
        o_ref[...] = a + b - jnp.abs(v) % 5 + jnp.maximum(v, -77)
        f_ref[...] = (v.astype(jnp.float32) * 0.5).astype(jnp.int32).astype(jnp.float32)
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct(x.shape, jnp.int32),
                                             jax.ShapeDtypeStruct(x.shape, jnp.float32)), interpret=interpret)(x)


# ---- a while loop inside the kernel (data-independent trip count from program_id) ----
@case("while_loop_pid_f32_32x128", lambda r: [f32(r, 32, 128, scale=0.1)])
def while_pid(x, interpret=False):
    def kernel(x_ref, o_ref):
        n = pl.program_id(0) + 2

        def cond(c):
            return c[0] < n

        def body(c):
            return c[0] + 1, c[1] * 1.5 + 0.25
        _, v = lax.while_loop(cond, body, (0, x_ref[...]))
        o_ref[...] = v
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                          in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)), interpret=interpret)(x)


# ---- input_output_aliases: update in place; concatenation and roll inside the kernel ----
@case("alias_roll_concat_f32_16x256", lambda r: [f32(r, 16, 256), f32(r, 16, 128)])
def alias_roll(x, y, interpret=False):
    def kernel(x_ref, y_ref, o_ref):
        v = x_ref[...]
        r = pltpu.roll(v, shift=3, axis=1)
        c = jnp.concatenate([y_ref[...], y_ref[...] * 2.0], axis=1)
        o_ref[...] = r + c
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), input_output_aliases={0: 0},
                          interpret=interpret)(x, y)


# ---- unrolled fori_loop accumulating matmuls over a K chunked in VMEM; bf16 operands ----
@case("fori_unrolled_kchunks_bf16_32x512x128", lambda r: [bf(r, 32, 512), bf(r, 512, 128)])
def fori_kchunks(x, w, interpret=False):
    def kernel(x_ref, w_ref, o_ref):
        def body(c, acc):
            ks = pl.ds(pl.multiple_of(c * 128, 128), 128)
            return acc + jnp.dot(x_ref[:, ks], w_ref[ks, :], preferred_element_type=jnp.float32)
        o_ref[...] = lax.fori_loop(0, 4, body, jnp.zeros((32, 128), jnp.float32), unroll=True)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32), interpret=interpret)(x, w)


# ---- online softmax over KV blocks with running max/sum scratch (a user flash attention) ----
@case("user_flash_f32_128x64_b32", lambda r: [f32(r, 128, 64), f32(r, 128, 64), f32(r, 128, 64)])
def user_flash(q, k, v, interpret=False):
    bq = bk = 32

    def kernel(q_ref, k_ref, v_ref, o_ref, m_sc, l_sc, acc):
        j = pl.program_id(1)

        @pl.when(j == 0)
        def _():
            m_sc[...] = jnp.full(m_sc.shape, -jnp.inf, jnp.float32)
            l_sc[...] = jnp.zeros_like(l_sc)
            acc[...] = jnp.zeros_like(acc)
        s = lax.dot_general(q_ref[...], k_ref[...], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        m_prev = m_sc[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
        p = jnp.exp(s - m_new)
        alpha = jnp.exp(m_prev - m_new)
        l_sc[...] = alpha * l_sc[...] + jnp.sum(p, axis=1, keepdims=True)
        acc[...] = alpha * acc[...] + jnp.dot(p, v_ref[...], preferred_element_type=jnp.float32)
        m_sc[...] = m_new

        @pl.when(j == pl.num_programs(1) - 1)
        def _():
            o_ref[...] = acc[...] / l_sc[...]
    n = q.shape[0]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype), grid=(n // bq, n // bk),
                          in_specs=[pl.BlockSpec((bq, 64), lambda i, j: (i, 0)),
                                    pl.BlockSpec((bk, 64), lambda i, j: (j, 0)),
                                    pl.BlockSpec((bk, 64), lambda i, j: (j, 0))],
                          out_specs=pl.BlockSpec((bq, 64), lambda i, j: (i, 0)),
                          scratch_shapes=[pltpu.VMEM((bq, 1), jnp.float32), pltpu.VMEM((bq, 1), jnp.float32),
                                          pltpu.VMEM((bq, 64), jnp.float32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
                          interpret=interpret)(q, k, v)


# ---- two pallas_calls chained in one jit, with a reshape between ----
@case("two_calls_chain_f32_64x128", lambda r: [f32(r, 64, 128)])
def two_calls(x, interpret=False):
    def k1(x_ref, o_ref):
        o_ref[...] = x_ref[...] * x_ref[...]

    def k2(x_ref, o_ref):
        o_ref[...] = jnp.sqrt(x_ref[...] + 1.0)
    a = pl.pallas_call(k1, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)(x)
    a = a.reshape(128, 64).T
    return pl.pallas_call(k2, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype), interpret=interpret)(a)


# ---- int8 weights dequantised in the kernel against bf16 activations ----
@case("int8_weight_dequant_bf16_32x256x256", lambda r: [bf(r, 32, 256),
                                                         jnp.asarray(r.integers(-127, 128, (256, 256)), jnp.int8),
                                                         jnp.asarray(r.random((1, 256)) * 0.02, jnp.float32)])
def w8(x, w, s, interpret=False):
    def kernel(x_ref, w_ref, s_ref, o_ref):
        wv = w_ref[...].astype(jnp.bfloat16)
        acc = jnp.dot(x_ref[...], wv, preferred_element_type=jnp.float32)
        o_ref[...] = (acc * s_ref[...]).astype(jnp.bfloat16)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 256), jnp.bfloat16), grid=(2,),
                          in_specs=[pl.BlockSpec((32, 256), lambda j: (0, 0)),
                                    pl.BlockSpec((256, 128), lambda j: (0, j)),
                                    pl.BlockSpec((1, 128), lambda j: (0, j))],
                          out_specs=pl.BlockSpec((32, 128), lambda j: (0, j)), interpret=interpret)(x, w, s)


# ---- reductions to scalars and a broadcast back; log/exp/max chains (log-sum-exp per block) ----
@case("lse_blocks_f32_64x256", lambda r: [f32(r, 64, 256, scale=4.0)])
def lse(x, interpret=False):
    def kernel(x_ref, o_ref):
        v = x_ref[...]
        m = jnp.max(v)
        s = jnp.log(jnp.sum(jnp.exp(v - m))) + m
        o_ref[...] = v - s
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                          in_specs=[pl.BlockSpec((16, 256), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((16, 256), lambda i: (i, 0)), interpret=interpret)(x)


# ---- lax.cond with results, a scalar read out of a vector, argmax along lanes ----
@case("cond_argmax_f32_16x128", lambda r: [f32(r, 16, 128)])
def cond_argmax(x, interpret=False):
    def kernel(x_ref, o_ref, i_ref):
        v = x_ref[...]
        o_ref[...] = lax.cond(jnp.sum(v) > 0, lambda a: a * 2.0, lambda a: a - 1.0, v)
        i_ref[...] = jnp.argmax(v, axis=1, keepdims=True).astype(jnp.int32) + jnp.zeros((16, 128), jnp.int32)
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype),
                                             jax.ShapeDtypeStruct(x.shape, jnp.int32)), interpret=interpret)(x)


# ---- pl.run_scoped scratch, a nested emit_pipeline over HBM operands ----
@case("emit_pipeline_add_f32_64x256", lambda r: [f32(r, 64, 256), f32(r, 64, 256)])
def emit_pipe(x, y, interpret=False):
    def inner(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...] * 0.5

    def kernel(x_hbm, y_hbm, o_hbm):
        pltpu.emit_pipeline(inner, grid=(4, 2),
                            in_specs=[pl.BlockSpec((16, 128), lambda i, j: (i, j))] * 2,
                            out_specs=pl.BlockSpec((16, 128), lambda i, j: (i, j)))(x_hbm, y_hbm, o_hbm)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 2, out_specs=pl.BlockSpec(memory_space=pl.ANY),
                          interpret=interpret)(x, y)


@case("run_scoped_dma_f32_64x128", lambda r: [f32(r, 64, 128)])
def run_scoped(x, interpret=False):
    def kernel(x_hbm, o_ref):
        def body(buf, sem):
            pltpu.async_copy(x_hbm.at[pl.ds(8, 32)], buf, sem).wait()
            o_ref[...] = buf[...] * -1.0
        pl.run_scoped(body, pltpu.VMEM((32, 128), jnp.float32), pltpu.SemaphoreType.DMA)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 128), x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)], interpret=interpret)(x)


# ---- strided reads of a ref, broadcast_to and reshape inside the kernel ----
@case("strided_reshape_f32_32x256", lambda r: [f32(r, 32, 256), f32(r, 1, 256)])
def strided(x, b, interpret=False):
    def kernel(x_ref, b_ref, o_ref):
        ev = x_ref[pl.ds(0, 16, stride=2), :]
        od = x_ref[pl.ds(1, 16, stride=2), :]
        o_ref[...] = (ev - od) * jnp.broadcast_to(b_ref[...], (16, 256))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 256), x.dtype), interpret=interpret)(x, b)


# ---- three-deep buffering of an input (pipeline_mode=pl.Buffered(1)) ----
@case("buffered1_scale_f32_256x128", lambda r: [f32(r, 256, 128)])
def buffered1(x, interpret=False):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3.0 - 1.0
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(8,),
                          in_specs=[pl.BlockSpec((32, 128), lambda i: (i, 0), pipeline_mode=pl.Buffered(1))],
                          out_specs=pl.BlockSpec((32, 128), lambda i: (i, 0)), interpret=interpret)(x)


# ---- regular semaphores: signal and wait within one core ----
@case("sem_signal_wait_f32_8x128", lambda r: [f32(r, 8, 128)])
def sem_sig(x, interpret=False):
    def kernel(x_ref, o_ref, sem):
        pltpu.semaphore_signal(sem, 2)
        pltpu.semaphore_wait(sem, 2)
        o_ref[...] = x_ref[...] + 1.0
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.SemaphoreType.REGULAR], interpret=interpret)(x)


# ---- bf16 elementwise chain stored as bf16 (bf16 VPU math on v6e; f32 on v5e) ----
@case("bf16_elementwise_64x256", lambda r: [bf(r, 64, 256), bf(r, 64, 256)])
def bf16_ew(x, y, interpret=False):
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * y_ref[...] + x_ref[...]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                          in_specs=[pl.BlockSpec((32, 256), lambda i: (i, 0))] * 2,
                          out_specs=pl.BlockSpec((32, 256), lambda i: (i, 0)), interpret=interpret)(x, y)


# ---- a matmul with bf16 result straight from jnp.dot; K-loop in a 3-D grid with batch ----
@case("batched_kloop_bf16_2x64x256x128", lambda r: [bf(r, 2, 64, 256), bf(r, 2, 256, 128)])
def batched_kloop(x, y, interpret=False):
    def kernel(x_ref, y_ref, o_ref, acc):
        @pl.when(pl.program_id(1) == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)
        acc[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(1) == 1)
        def _():
            o_ref[...] = acc[...].astype(jnp.bfloat16)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((2, 64, 128), jnp.bfloat16), grid=(2, 2),
                          in_specs=[pl.BlockSpec((None, 64, 128), lambda b, k: (b, 0, k)),
                                    pl.BlockSpec((None, 128, 128), lambda b, k: (b, k, 0))],
                          out_specs=pl.BlockSpec((None, 64, 128), lambda b, k: (b, 0, 0)),
                          scratch_shapes=[pltpu.VMEM((64, 128), jnp.float32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
                          interpret=interpret)(x, y)


# ---- jnp.tile / repeat along lanes and a sublane-broadcast column ----
@case("tile_repeat_f32_8x128", lambda r: [f32(r, 8, 128), f32(r, 8, 1)])
def tile_rep(x, c, interpret=False):
    def kernel(x_ref, c_ref, o_ref):
        t = jnp.tile(x_ref[...], (1, 2))
        o_ref[...] = t * c_ref[...]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 256), x.dtype), interpret=interpret)(x, c)

# ---- integer division by a constant, strided roll, argmin over sublanes, bitcasts ----
@case("intdiv_roll_stride_argmin_32x128", lambda r: [jnp.asarray(r.integers(-5000, 5000, (32, 128)), jnp.int32),
                                                      f32(r, 32, 128)])
def intdiv_roll(a, x, interpret=False):
    def kernel(a_ref, x_ref, q_ref, r_ref, i_ref, b_ref):
        v = a_ref[...]
        q_ref[...] = v // 7 + v % 7
        r_ref[...] = pltpu.roll(x_ref[...], shift=5, axis=1, stride=1, stride_axis=0)
        i_ref[...] = jnp.argmin(x_ref[...], axis=0, keepdims=True).astype(jnp.int32) + jnp.zeros((8, 128), jnp.int32)
        b_ref[...] = lax.bitcast_convert_type(x_ref[...], jnp.int32) >> 16
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct(a.shape, jnp.int32), jax.ShapeDtypeStruct(x.shape, jnp.float32),
                                             jax.ShapeDtypeStruct((8, 128), jnp.int32), jax.ShapeDtypeStruct(x.shape, jnp.int32)),
                          interpret=interpret)(a, x)


# ---- transcendental zoo in f32 ----
@case("math_zoo_f32_16x256", lambda r: [f32(r, 16, 256)])
def math_zoo(x, interpret=False):
    def kernel(x_ref, o_ref):
        v = x_ref[...]
        o_ref[...] = (jnp.log1p(jnp.abs(v)) + jnp.sin(v) * jnp.cos(v) + jnp.floor(v * 3.0)
                      + jnp.round(v * 2.0) + lax.erf(v) + jnp.power(jnp.abs(v) + 1.0, 1.5) + jnp.sqrt(jnp.abs(v)))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)(x)


# ---- f32 matmul at default precision inside the kernel, 3-D sum over the leading axis ----
@case("f32_dot_default_sum3d_8x128", lambda r: [f32(r, 4, 8, 128), f32(r, 128, 128)])
def dot_default(x, w, interpret=False):
    def kernel(x_ref, w_ref, o_ref):
        s = jnp.sum(x_ref[...], axis=0)
        o_ref[...] = jnp.dot(s, w_ref[...])
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), interpret=interpret)(x, w)


# ---- dynamic row reads indexed by program_id and a prefetched offset ----
@case("dyn_rows_prefetch_f32_64x128", lambda r: [jnp.asarray([5, 17, 40, 2], jnp.int32), f32(r, 64, 128)])
def dyn_rows(off, x, interpret=False):
    def kernel(off_ref, x_ref, o_ref):
        i = pl.program_id(0)
        o_ref[...] = x_ref[pl.ds(off_ref[i], 8), :] + x_ref[pl.ds(i * 8, 8), :]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=1, grid=(4,),
                              in_specs=[pl.BlockSpec((64, 128), lambda i, o: (0, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i, o: (i, 0))),
                          interpret=interpret)(off, x)

# ---- revisited output accumulated over the leading ("arbitrary") grid dimension ----
@case("accum_leading_dim_f32_4x64x128", lambda r: [f32(r, 4, 64, 128)])
def accum_leading(x, interpret=False):
    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += x_ref[...] * (pl.program_id(0) + 1).astype(jnp.float32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32), grid=(4, 2),
                          in_specs=[pl.BlockSpec((None, 32, 128), lambda b, i: (b, i, 0))],
                          out_specs=pl.BlockSpec((32, 128), lambda b, i: (i, 0)),
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary", "parallel")),
                          interpret=interpret)(x)


# ---- lane-dimension slices of refs in a loop, writes through o_ref at dynamic lane offsets ----
@case("lane_slices_loop_f32_16x512", lambda r: [f32(r, 16, 512)])
def lane_slices(x, interpret=False):
    def kernel(x_ref, o_ref):
        def body(j, carry):
            cols = pl.ds(pl.multiple_of(j * 128, 128), 128)
            v = x_ref[:, cols]
            o_ref[:, cols] = v * carry
            return carry + 1.0
        lax.fori_loop(0, 4, body, jnp.float32(1.0))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)(x)


# ---- transposed-LHS matmul (contracting dim 0 of both), clip, sign, select_n ----
@case("transA_dot_clip_f32_128x64", lambda r: [f32(r, 128, 64), f32(r, 128, 128)])
def transA(a, b, interpret=False):
    def kernel(a_ref, b_ref, o_ref):
        m = lax.dot_general(a_ref[...], b_ref[...], (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)
        c = jnp.clip(m, -3.0, 3.0)
        o_ref[...] = lax.select_n(m > 0, -c, jnp.sign(m) * 0.5)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32), interpret=interpret)(a, b)


# ---- a scalar result in SMEM (a reduction to one number) ----
@case("smem_out_scalar_f32_32x128", lambda r: [f32(r, 32, 128)])
def smem_out(x, interpret=False):
    def kernel(x_ref, o_ref):
        o_ref[0, 0] = jnp.sum(x_ref[...] * x_ref[...])
        o_ref[0, 1] = jnp.max(x_ref[...])
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((1, 2), jnp.float32),
                          out_specs=pl.BlockSpec(memory_space=pltpu.SMEM), interpret=interpret)(x)


# ---- bf16 scratch accumulating bf16 products, bf16 reductions, bool masks stored as int32 ----
@case("bf16_scratch_mask_64x128", lambda r: [bf(r, 64, 128), bf(r, 128, 128)])
def bf16_scratch(x, w, interpret=False):
    def kernel(x_ref, w_ref, o_ref, m_ref, sc):
        sc[...] = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32).astype(jnp.bfloat16)
        v = sc[...]
        o_ref[...] = (v.astype(jnp.float32) - jnp.mean(v.astype(jnp.float32), axis=1, keepdims=True)).astype(jnp.bfloat16)
        m_ref[...] = (v > 0).astype(jnp.int32)
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct((64, 128), jnp.bfloat16), jax.ShapeDtypeStruct((64, 128), jnp.int32)),
                          scratch_shapes=[pltpu.VMEM((64, 128), jnp.bfloat16)], interpret=interpret)(x, w)


# ---- softmax via jax.nn in the kernel over a 3-D block; reshape merging leading dims ----
@case("nn_softmax_3d_reshape_f32_2x8x128", lambda r: [f32(r, 2, 8, 128, scale=2.0)])
def nn_softmax(x, interpret=False):
    def kernel(x_ref, o_ref):
        p = jax.nn.softmax(x_ref[...], axis=-1)
        o_ref[...] = p.reshape(16, 128) * 10.0
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), interpret=interpret)(x)


# ---- causal block mask from program ids and iota, nested pl.when inside a fori_loop ----
@case("causal_mask_nested_when_f32_64x128", lambda r: [f32(r, 64, 128)])
def causal_nested(x, interpret=False):
    def kernel(x_ref, o_ref):
        i = pl.program_id(0)
        rows = lax.broadcasted_iota(jnp.int32, (32, 128), 0) + i * 32
        cols = lax.broadcasted_iota(jnp.int32, (32, 128), 1)
        o_ref[...] = jnp.where(cols <= rows, x_ref[...], 0.0)

        def body(t, c):
            @pl.when(t % 2 == i)
            def _():
                o_ref[pl.ds(t * 8, 8), :] = o_ref[pl.ds(t * 8, 8), :] + 1.0
            return c
        lax.fori_loop(0, 4, body, 0)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                          in_specs=[pl.BlockSpec((32, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((32, 128), lambda i: (i, 0)), interpret=interpret)(x)


# ---- int8 elementwise with wraparound and widening; uint32 hashing ----
@case("int8_uint32_ops_32x128", lambda r: [jnp.asarray(r.integers(-128, 128, (32, 128)), jnp.int8),
                                           jnp.asarray(r.integers(0, 2**31, (32, 128)), jnp.uint32)])
def int8_u32(a, u, interpret=False):
    def kernel(a_ref, u_ref, o_ref, h_ref):
        v = a_ref[...].astype(jnp.int32)
        o_ref[...] = (v * 3 + 7).astype(jnp.int8).astype(jnp.int32)
        h = u_ref[...]
        h = (h ^ (h >> 16)) * jnp.uint32(0x45d9f3b)
        h_ref[...] = h ^ (h >> 16)
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct(a.shape, jnp.int32), jax.ShapeDtypeStruct(u.shape, jnp.uint32)),
                          interpret=interpret)(a, u)


# ---- 1-D blocks over a vector ----
@case("one_d_blocks_f32_4096", lambda r: [f32(r, 4096), f32(r, 4096)])
def one_d(x, y, interpret=False):
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * y_ref[...] + jnp.float32(0.5)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                          in_specs=[pl.BlockSpec((1024,), lambda i: (i,))] * 2,
                          out_specs=pl.BlockSpec((1024,), lambda i: (i,)), interpret=interpret)(x, y)


# ---- swapaxes of a 3-D value, a concatenation along lanes ----
@case("swapaxes_concat_f32_8x128", lambda r: [f32(r, 8, 128), f32(r, 2, 8, 128)])
def swap_concat(x, y, interpret=False):
    def kernel(x_ref, y_ref, o_ref, t_ref):
        o_ref[...] = jnp.concatenate([x_ref[...], -x_ref[...]], axis=1)
        t_ref[...] = jnp.swapaxes(y_ref[...], 0, 1).reshape(8, 256)
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct((8, 256), jnp.float32), jax.ShapeDtypeStruct((8, 256), jnp.float32)),
                          interpret=interpret)(x, y)


# ---- jax.vmap over a pallas_call (batching adds a grid dimension) ----
@case("vmap_kernel_f32_3x16x128", lambda r: [f32(r, 3, 16, 128), f32(r, 3, 1, 128)])
def vmapped(x, b, interpret=False):
    def kernel(x_ref, b_ref, o_ref):
        o_ref[...] = jnp.maximum(x_ref[...] + b_ref[...], 0.0)

    def one(xi, bi):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(xi.shape, xi.dtype), grid=(2,),
                              in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0)), pl.BlockSpec((1, 128), lambda i: (0, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)), interpret=interpret)(xi, bi)
    return jax.vmap(one)(x, b)


# ---- a kernel called in every iteration of an XLA loop (lax.scan) ----
@case("scan_over_kernel_f32_4x8x128", lambda r: [f32(r, 4, 8, 128), f32(r, 8, 128, scale=0.1)])
def scan_kernel(xs, h0, interpret=False):
    def kernel(x_ref, h_ref, o_ref):
        o_ref[...] = jnp.tanh(x_ref[...] + h_ref[...] * 0.9)

    def step(h, x):
        h2 = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(h.shape, h.dtype), interpret=interpret)(x, h)
        return h2, h2.sum()
    h, sums = lax.scan(step, h0, xs)
    return h, sums


# ---- bf16 dot cast to a bf16 result; index maps with integer division and remainder ----
@case("bf16_out_dot_divmap_64x128x256", lambda r: [bf(r, 64, 128), bf(r, 128, 256)])
def bf16_out_divmap(x, w, interpret=False):
    def kernel(x_ref, w_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32).astype(jnp.bfloat16)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 256), jnp.bfloat16), grid=(4,),
                          in_specs=[pl.BlockSpec((32, 128), lambda t: (t // 2, 0)),
                                    pl.BlockSpec((128, 128), lambda t: (0, t % 2))],
                          out_specs=pl.BlockSpec((32, 128), lambda t: (t // 2, t % 2)), interpret=interpret)(x, w)


# ---- jax.checkpoint around a function with a kernel, differentiated (the kernel's custom VJP
# is plain jnp: only the forward runs as a kernel) ----
@case("remat_grad_kernel_f32_8x128", lambda r: [f32(r, 8, 128)])
def remat_grad(x, interpret=False):
    @jax.custom_vjp
    def sq(v):
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] * x_ref[...]
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(v.shape, v.dtype), interpret=interpret)(v)
    sq.defvjp(lambda v: (sq(v), v), lambda v, g: (2.0 * v * g,))
    return jax.grad(jax.checkpoint(lambda v: jnp.sum(jnp.sin(sq(v)))))(x)

# ==== Round 2: written after the interpreter's fixes above, run once, not tuned on ====

# ---- 3-D grid (batch, rows, K) batched matmul, bf16 in, f32 scratch, bf16 out ----
@case("r2_grid3d_bmm_bf16_3x64x256x128", lambda r: [bf(r, 3, 64, 256), bf(r, 3, 256, 128)])
def r2_grid3d_bmm(x, y, interpret=False):
    def kernel(x_ref, y_ref, o_ref, acc):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)
        acc[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = acc[...].astype(o_ref.dtype)
    b, m, k = x.shape
    n = y.shape[2]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((b, m, n), x.dtype), grid=(b, m // 32, k // 128),
                          in_specs=[pl.BlockSpec((None, 32, 128), lambda bb, i, kk: (bb, i, kk)),
                                    pl.BlockSpec((None, 128, n), lambda bb, i, kk: (bb, kk, 0))],
                          out_specs=pl.BlockSpec((None, 32, n), lambda bb, i, kk: (bb, i, 0)),
                          scratch_shapes=[pltpu.VMEM((32, n), jnp.float32)],
                          compiler_params=pltpu.CompilerParams(
                              dimension_semantics=("parallel", "parallel", "arbitrary")),
                          interpret=interpret)(x, y)


# ---- int8 x int8 -> int32 output directly, accumulated in the output block ----
@case("r2_int8_i32out_64x384x128", lambda r: [jnp.asarray(r.integers(-128, 128, (64, 384)), jnp.int8),
                                              jnp.asarray(r.integers(-128, 128, (384, 128)), jnp.int8)])
def r2_int8_i32(x, w, interpret=False):
    def kernel(x_ref, w_ref, o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.int32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.int32), grid=(2, 3),
                          in_specs=[pl.BlockSpec((32, 128), lambda i, k: (i, k)),
                                    pl.BlockSpec((128, 128), lambda i, k: (k, 0))],
                          out_specs=pl.BlockSpec((32, 128), lambda i, k: (i, 0)), interpret=interpret)(x, w)


# ---- two reductions of a block (over lanes and over sublanes), two outputs ----
@case("r2_row_sum_col_max_f32_64x256", lambda r: [f32(r, 64, 256)])
def r2_reduce2(x, interpret=False):
    def kernel(x_ref, rs_ref, cm_ref):
        v = x_ref[...]
        rs_ref[...] = jnp.sum(v * v, axis=1, keepdims=True) * jnp.ones((1, 128), jnp.float32)
        cm_ref[...] = jnp.max(v, axis=0, keepdims=True) * jnp.ones((8, 1), jnp.float32)
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct((64, 128), jnp.float32),
                                             jax.ShapeDtypeStruct((16, 256), jnp.float32)), grid=(2,),
                          in_specs=[pl.BlockSpec((32, 256), lambda i: (i, 0))],
                          out_specs=(pl.BlockSpec((32, 128), lambda i: (i, 0)),
                                     pl.BlockSpec((8, 256), lambda i: (i, 0))), interpret=interpret)(x)


# ---- a blocked transpose: block (i, j) of the input is block (j, i) of the output ----
@case("r2_block_transpose_f32_256x384", lambda r: [f32(r, 256, 384)])
def r2_block_transpose(x, interpret=False):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...].T * 2.0
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((384, 256), jnp.float32), grid=(2, 3),
                          in_specs=[pl.BlockSpec((128, 128), lambda i, j: (i, j))],
                          out_specs=pl.BlockSpec((128, 128), lambda i, j: (j, i)), interpret=interpret)(x)


# ---- bf16 accumulation in the output block itself (rounded to bf16 at every K step) ----
@case("r2_bf16_acc_out_32x512x256", lambda r: [bf(r, 32, 512), bf(r, 512, 256)])
def r2_bf16_acc(x, y, interpret=False):
    def kernel(x_ref, y_ref, o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32).astype(jnp.bfloat16)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 256), jnp.bfloat16), grid=(1, 4),
                          in_specs=[pl.BlockSpec((32, 128), lambda i, k: (i, k)),
                                    pl.BlockSpec((128, 256), lambda i, k: (k, 0))],
                          out_specs=pl.BlockSpec((32, 256), lambda i, k: (i, 0)), interpret=interpret)(x, y)


# ---- pl.when on the first and last grid step: a running sum across the grid, written once ----
@case("r2_when_first_last_total_f32_128x128", lambda r: [f32(r, 128, 128)])
def r2_first_last(x, interpret=False):
    def kernel(x_ref, o_ref, tot):
        i = pl.program_id(0)

        @pl.when(i == 0)
        def _():
            tot[...] = jnp.zeros_like(tot)
        tot[...] += x_ref[...] * (i + 1).astype(jnp.float32)

        @pl.when(i == pl.num_programs(0) - 1)
        def _():
            o_ref[...] = tot[...] - jnp.mean(tot[...], axis=0, keepdims=True)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), grid=(8,),
                          in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((16, 128), lambda i: (0, 0)),
                          scratch_shapes=[pltpu.VMEM((16, 128), jnp.float32)], interpret=interpret)(x)


# ---- manual double-buffered DMA with a semaphore per slot, out through a VMEM block ----
@case("r2_dbuf_dma_rowscale_f32_256x128", lambda r: [f32(r, 256, 128), f32(r, 256, 1)])
def r2_dbuf(x, s, interpret=False):
    ch = 32

    def kernel(x_hbm, s_ref, o_ref, buf, sems):
        n = x_hbm.shape[0] // ch

        def cp(j, slot):
            return pltpu.make_async_copy(x_hbm.at[pl.ds(j * ch, ch), :], buf.at[slot], sems.at[slot])
        cp(0, 0).start()

        @pl.loop(0, n)
        def _(j):
            slot = lax.rem(j, 2)

            @pl.when(j + 1 < n)
            def _():
                cp(j + 1, 1 - slot).start()
            cp(j, slot).wait()
            rows = pl.ds(pl.multiple_of(j * ch, ch), ch)
            o_ref[rows, :] = buf[slot] * s_ref[rows, :]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pltpu.VMEM)],
                          out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                          scratch_shapes=[pltpu.VMEM((2, ch, 128), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
                          interpret=interpret)(x, s)


# ---- a kernel between XLA ops in one jit: reshape + bias before, transpose + sum after ----
@case("r2_jit_sandwich_rmsnorm_f32_4x16x128", lambda r: [f32(r, 4, 16, 128), f32(r, 128)])
def r2_sandwich(x, g, interpret=False):
    def kernel(x_ref, g_ref, o_ref):
        v = x_ref[...]
        o_ref[...] = v * lax.rsqrt(jnp.mean(v * v, axis=-1, keepdims=True) + 1e-6) * g_ref[...]
    y = (x + 0.5).reshape(64, 128)
    z = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype), grid=(4,),
                       in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0)), pl.BlockSpec((1, 128), lambda i: (0, 0))],
                       out_specs=pl.BlockSpec((16, 128), lambda i: (i, 0)), interpret=interpret)(y, g.reshape(1, 128))
    return z.T.sum(axis=1), z.reshape(4, 16, 128)[:, ::2]


# ---- a fori_loop over sublane groups carrying a vector: a prefix sum down the rows ----
@case("r2_fori_prefix_rows_f32_64x128", lambda r: [f32(r, 64, 128)])
def r2_prefix(x, interpret=False):
    def kernel(x_ref, o_ref):
        def body(i, carry):
            rows = pl.ds(pl.multiple_of(i * 8, 8), 8)
            blk = x_ref[rows, :]
            outs = []
            for r in range(8):  # (Pallas's TPU lowering has no cumsum)
                carry = carry + blk[r:r + 1, :]
                outs.append(carry)
            o_ref[rows, :] = jnp.concatenate(outs, axis=0)
            return carry
        lax.fori_loop(0, x_ref.shape[0] // 8, body, jnp.zeros((1, 128), jnp.float32))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                          in_specs=[pl.BlockSpec((32, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((32, 128), lambda i: (i, 0)), interpret=interpret)(x)


# ---- scalar-prefetched lengths masking the rows of each block (iota against SMEM) ----
@case("r2_prefetch_len_mask_f32_4x32x128", lambda r: [jnp.asarray([5, 32, 0, 17], jnp.int32), f32(r, 4, 32, 128)])
def r2_len_mask(lens, x, interpret=False):
    def kernel(len_ref, x_ref, o_ref):
        b = pl.program_id(0)
        row = lax.broadcasted_iota(jnp.int32, (32, 128), 0)
        v = jnp.where(row < len_ref[b], x_ref[...], 0.0)
        o_ref[...] = v / jnp.maximum(len_ref[b], 1).astype(jnp.float32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=1, grid=(4,),
                              in_specs=[pl.BlockSpec((None, 32, 128), lambda b, lr: (b, 0, 0))],
                              out_specs=pl.BlockSpec((None, 32, 128), lambda b, lr: (b, 0, 0))),
                          interpret=interpret)(lens, x)


# ---- 3-D grid whose output ignores two dimensions: a sum over both "arbitrary" axes ----
@case("r2_grid3d_sum2_f32_2x3x4x8x128", lambda r: [f32(r, 2, 3, 4, 8, 128)])
def r2_sum2(x, interpret=False):
    def kernel(x_ref, o_ref):
        @pl.when((pl.program_id(1) == 0) & (pl.program_id(2) == 0))
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += x_ref[...]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((2, 8, 128), jnp.float32), grid=(2, 3, 4),
                          in_specs=[pl.BlockSpec((None, None, None, 8, 128), lambda a, b, c: (a, b, c, 0, 0))],
                          out_specs=pl.BlockSpec((None, 8, 128), lambda a, b, c: (a, 0, 0)),
                          compiler_params=pltpu.CompilerParams(
                              dimension_semantics=("parallel", "arbitrary", "arbitrary")),
                          interpret=interpret)(x)


# ---- int8 activations x int8 weights -> int32, per-row and per-column scales -> bf16 ----
@case("r2_int8_rowcol_scale_bf16_32x256x256", lambda r: [jnp.asarray(r.integers(-127, 128, (32, 256)), jnp.int8),
                                                         jnp.asarray(r.integers(-127, 128, (256, 256)), jnp.int8),
                                                         jnp.asarray(r.random((32, 1)) * 0.02, jnp.float32),
                                                         jnp.asarray(r.random((1, 256)) * 0.02, jnp.float32)])
def r2_int8_scales(x, w, sx, sw, interpret=False):
    def kernel(x_ref, w_ref, sx_ref, sw_ref, o_ref):
        acc = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.int32)
        o_ref[...] = (acc.astype(jnp.float32) * sx_ref[...] * sw_ref[...]).astype(jnp.bfloat16)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 256), jnp.bfloat16), grid=(2,),
                          in_specs=[pl.BlockSpec((32, 256), lambda j: (0, 0)),
                                    pl.BlockSpec((256, 128), lambda j: (0, j)),
                                    pl.BlockSpec((32, 1), lambda j: (0, 0)),
                                    pl.BlockSpec((1, 128), lambda j: (0, j))],
                          out_specs=pl.BlockSpec((32, 128), lambda j: (0, j)), interpret=interpret)(x, w, sx, sw)


# ---- round 3 (written fresh after the round-2 fixes and run once, not tuned on) ----
# bf16 K-loop with an f32 scratch accumulator, bias and ReLU on the last K step, bf16 out
@case("r3_kloop_bias_relu_bf16_128x384x256", lambda r: [bf(r, 128, 384), bf(r, 384, 256), f32(r, 1, 256)])
def r3_kloop_bias_relu(x, w, b, interpret=False):
    def kernel(x_ref, w_ref, b_ref, o_ref, acc):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)
        acc[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = jnp.maximum(acc[...] + b_ref[...], 0.0).astype(o_ref.dtype)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((128, 256), jnp.bfloat16), grid=(2, 2, 3),
                          in_specs=[pl.BlockSpec((64, 128), lambda i, j, k: (i, k)),
                                    pl.BlockSpec((128, 128), lambda i, j, k: (k, j)),
                                    pl.BlockSpec((1, 128), lambda i, j, k: (0, j))],
                          out_specs=pl.BlockSpec((64, 128), lambda i, j, k: (i, j)),
                          scratch_shapes=[pltpu.VMEM((64, 128), jnp.float32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
                          interpret=interpret)(x, w, b)


# block-sparse rows: per row block, a prefetched list of the K blocks it uses and their count
@case("r3_prefetch_block_sparse_f32_64x512x128",
      lambda r: [jnp.asarray([[3, 0, 0], [1, 2, 0], [0, 1, 3], [2, 2, 2]], jnp.int32), jnp.asarray([1, 2, 3, 0], jnp.int32),
                 f32(r, 64, 512), f32(r, 512, 128)])
def r3_block_sparse(kidx, cnt, x, w, interpret=False):
    def kernel(kidx_ref, cnt_ref, x_ref, w_ref, o_ref):
        i, t = pl.program_id(0), pl.program_id(1)

        @pl.when(t == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        @pl.when(t < cnt_ref[i])
        def _():
            o_ref[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=2, grid=(4, 3),
                              in_specs=[pl.BlockSpec((16, 128), lambda i, t, kx, c: (i, kx[i, t])),
                                        pl.BlockSpec((128, 128), lambda i, t, kx, c: (kx[i, t], 0))],
                              out_specs=pl.BlockSpec((16, 128), lambda i, t, kx, c: (i, 0))),
                          interpret=interpret)(kidx, cnt, x, w)


# manual double-buffered DMA of row chunks from HBM, column sums and sums of squares
@case("r3_dbuf_colstats_f32_512x256", lambda r: [f32(r, 512, 256)])
def r3_dbuf_colstats(x, interpret=False):
    ch = 64

    def kernel(x_hbm, o_ref, buf, sem):
        n = x_hbm.shape[0] // ch

        def cp(i, s):
            return pltpu.make_async_copy(x_hbm.at[pl.ds(i * ch, ch)], buf.at[s], sem.at[s])
        cp(0, 0).start()
        o_ref[...] = jnp.zeros_like(o_ref)

        def body(i, c):
            s = i % 2

            @pl.when(i + 1 < n)
            def _():
                cp(i + 1, 1 - s).start()
            cp(i, s).wait()
            v = buf[s]
            o_ref[0:1, :] += jnp.sum(v, axis=0, keepdims=True)
            o_ref[1:2, :] += jnp.sum(v * v, axis=0, keepdims=True)
            return c
        lax.fori_loop(0, n, body, 0)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 256), jnp.float32),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                          out_specs=pl.BlockSpec((8, 256), lambda: (0, 0)),
                          scratch_shapes=[pltpu.VMEM((2, ch, 256), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
                          interpret=interpret)(x)


# unrolled fori_loop over row chunks: a softmax per row in f32, bf16 result
@case("r3_fori_unrolled_softmax_bf16_64x256", lambda r: [bf(r, 64, 256)])
def r3_fori_softmax(x, interpret=False):
    def kernel(x_ref, o_ref):
        def body(i, c):
            rows = pl.ds(pl.multiple_of(i * 16, 16), 16)
            v = x_ref[rows, :].astype(jnp.float32)
            e = jnp.exp(v - jnp.max(v, axis=1, keepdims=True))
            o_ref[rows, :] = (e / jnp.sum(e, axis=1, keepdims=True)).astype(o_ref.dtype)
            return c
        lax.fori_loop(0, x_ref.shape[0] // 16, body, 0, unroll=True)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(1,),
                          in_specs=[pl.BlockSpec((64, 256), lambda i: (0, 0))],
                          out_specs=pl.BlockSpec((64, 256), lambda i: (0, 0)), interpret=interpret)(x)


# int8 weights dequantised by per-column scales against f32 activations, K-loop into o_ref
@case("r3_int8_dequant_kloop_f32_32x512x256",
      lambda r: [f32(r, 32, 512), jnp.asarray(r.integers(-127, 128, (512, 256)), jnp.int8),
                 jnp.asarray(r.random((1, 256)) * 0.05, jnp.float32)])
def r3_int8_dequant(x, w, s, interpret=False):
    def kernel(x_ref, w_ref, s_ref, o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += jnp.dot(x_ref[...], w_ref[...].astype(jnp.float32) * s_ref[...],
                              preferred_element_type=jnp.float32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 256), jnp.float32), grid=(2, 4),
                          in_specs=[pl.BlockSpec((32, 128), lambda j, k: (0, k)),
                                    pl.BlockSpec((128, 128), lambda j, k: (k, j)),
                                    pl.BlockSpec((1, 128), lambda j, k: (0, j))],
                          out_specs=pl.BlockSpec((32, 128), lambda j, k: (0, j)), interpret=interpret)(x, w, s)


# two kernels inside lax.scan inside a jit: an elementwise kernel, an XLA op, a row-sum kernel
@case("r3_scan_two_kernels_f32_3x32x128", lambda r: [f32(r, 32, 128), f32(r, 3, 32, 128, scale=0.1)])
def r3_scan_two(x0, xs, interpret=False):
    def k1(a_ref, b_ref, o_ref):
        o_ref[...] = jnp.tanh(a_ref[...]) + b_ref[...]

    def k2(a_ref, o_ref):
        o_ref[...] = jnp.broadcast_to(jnp.sum(a_ref[...], axis=1, keepdims=True), o_ref.shape)

    def step(c, b):
        y = pl.pallas_call(k1, out_shape=jax.ShapeDtypeStruct(c.shape, c.dtype), interpret=interpret)(c, b)
        y = y * 0.5 + 1.0
        srow = pl.pallas_call(k2, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32), interpret=interpret)(y)
        return y, srow[:, 0]
    c, rows = lax.scan(step, x0, xs)
    return c, rows


# prefetched row offsets read with pl.ds from a whole VMEM block
@case("r3_prefetch_ds_offsets_f32_128x128", lambda r: [jnp.asarray([0, 40, 8, 96, 120, 64], jnp.int32), f32(r, 128, 128)])
def r3_ds_offsets(offs, x, interpret=False):
    def kernel(off_ref, x_ref, o_ref):
        i = pl.program_id(0)
        o_ref[...] = x_ref[pl.ds(off_ref[i], 8), :] * (i + 1).astype(jnp.float32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((6 * 8, 128), jnp.float32),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=1, grid=(6,),
                              in_specs=[pl.BlockSpec((128, 128), lambda i, o: (0, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i, o: (i, 0))),
                          interpret=interpret)(offs, x)


# causal mask from a 2-D iota offset by the block's program ids, masked row max
@case("r3_causal_rowmax_f32_256x256", lambda r: [f32(r, 256, 256)])
def r3_causal_rowmax(x, interpret=False):
    def kernel(x_ref, o_ref):
        i, j = pl.program_id(0), pl.program_id(1)
        rows = lax.broadcasted_iota(jnp.int32, (64, 128), 0) + i * 64
        cols = lax.broadcasted_iota(jnp.int32, (64, 128), 1) + j * 128
        m = jnp.max(jnp.where(cols <= rows, x_ref[...], -1e30), axis=1, keepdims=True)

        @pl.when(j == 0)
        def _():
            o_ref[...] = jnp.full(o_ref.shape, -1e30, jnp.float32)
        o_ref[...] = jnp.maximum(o_ref[...], jnp.broadcast_to(m, o_ref.shape))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((256, 128), jnp.float32), grid=(4, 2),
                          in_specs=[pl.BlockSpec((64, 128), lambda i, j: (i, j))],
                          out_specs=pl.BlockSpec((64, 128), lambda i, j: (i, 0)), interpret=interpret)(x)


# ---- Round 4: written fresh, run once, not tuned on ----
# K-loop, bf16 inputs, f32 scratch, A @ B^T through dot_general (contract both minor dims), 3-D grid
@case("r4_kloop_abT_bf16_128x256x256", lambda r: [bf(r, 128, 256), bf(r, 256, 256)])
def r4_kloop_abT(x, w, interpret=False):
    def kernel(x_ref, w_ref, o_ref, acc):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)
        acc[...] += lax.dot_general(x_ref[...], w_ref[...], (((1,), (1,)), ((), ())),
                                    preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = acc[...]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((128, 256), jnp.float32), grid=(2, 2, 2),
                          in_specs=[pl.BlockSpec((64, 128), lambda i, j, k: (i, k)),
                                    pl.BlockSpec((128, 128), lambda i, j, k: (j, k))],
                          out_specs=pl.BlockSpec((64, 128), lambda i, j, k: (i, j)),
                          scratch_shapes=[pltpu.VMEM((64, 128), jnp.float32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
                          interpret=interpret)(x, w)


# int8 x int8 -> int32 scratch, requantised to int8 with a per-column scale (round, clip) on the last K step
@case("r4_int8_requant_i8out_64x512x256",
      lambda r: [jnp.asarray(r.integers(-128, 128, (64, 512)), jnp.int8),
                 jnp.asarray(r.integers(-128, 128, (512, 256)), jnp.int8),
                 jnp.asarray(r.random((1, 256)) * 2e-4, jnp.float32)])
def r4_int8_requant(x, w, s, interpret=False):
    def kernel(x_ref, w_ref, s_ref, o_ref, acc):
        @pl.when(pl.program_id(1) == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)
        acc[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.int32)

        @pl.when(pl.program_id(1) == pl.num_programs(1) - 1)
        def _():
            q = jnp.round(acc[...].astype(jnp.float32) * s_ref[...])
            o_ref[...] = jnp.clip(q, -128.0, 127.0).astype(jnp.int8)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 256), jnp.int8), grid=(2, 4),
                          in_specs=[pl.BlockSpec((64, 128), lambda j, k: (0, k)),
                                    pl.BlockSpec((128, 128), lambda j, k: (k, j)),
                                    pl.BlockSpec((1, 128), lambda j, k: (0, j))],
                          out_specs=pl.BlockSpec((64, 128), lambda j, k: (0, j)),
                          scratch_shapes=[pltpu.VMEM((64, 128), jnp.int32)], interpret=interpret)(x, w, s)


# scalar prefetch: an embedding-style gather of row blocks by prefetched ids, squeezed leading block dim
@case("r4_prefetch_gather_squeezed_bf16_6x8x256",
      lambda r: [jnp.asarray([4, 1, 1, 7, 0, 3], jnp.int32), bf(r, 8, 16, 256)])
def r4_prefetch_gather(ids, table, interpret=False):
    def kernel(ids_ref, t_ref, o_ref):
        v = t_ref[...].astype(jnp.float32)
        o_ref[...] = (v * jax.nn.sigmoid(v)).astype(o_ref.dtype)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((6, 16, 256), jnp.bfloat16),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=1, grid=(6, 2),
                              in_specs=[pl.BlockSpec((None, 16, 128), lambda i, j, ids: (ids[i], 0, j))],
                              out_specs=pl.BlockSpec((None, 16, 128), lambda i, j, ids: (i, 0, j))),
                          interpret=interpret)(ids, table)


# manual double-buffered DMA of column blocks (a strided window of HBM) with a semaphore per slot, into a VMEM output
@case("r4_dbuf_colblocks_f32_64x512", lambda r: [f32(r, 64, 512)])
def r4_dbuf_cols(x, interpret=False):
    cw = 128

    def kernel(x_hbm, o_ref, buf, sem):
        n = x_hbm.shape[1] // cw

        def cp(j, s):
            return pltpu.make_async_copy(x_hbm.at[:, pl.ds(j * cw, cw)], buf.at[s], sem.at[s])
        cp(0, 0).start()

        @pl.loop(0, n)
        def _(j):
            s = j % 2

            @pl.when(j + 1 < n)
            def _():
                cp(j + 1, 1 - s).start()
            cp(j, s).wait()
            v = buf[s]
            o_ref[:, pl.ds(pl.multiple_of(j * cw, cw), cw)] = v * v - jnp.mean(v, axis=0, keepdims=True)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                          out_specs=pl.BlockSpec((64, 512), lambda: (0, 0)),
                          scratch_shapes=[pltpu.VMEM((2, 64, cw), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
                          interpret=interpret)(x)


# fori_loop carrying a tuple (running max, running sum): a log-sum-exp over column chunks of each row block
@case("r4_fori_tuple_lse_f32_64x1024", lambda r: [f32(r, 64, 1024, scale=3.0)])
def r4_fori_lse(x, interpret=False):
    def kernel(x_ref, o_ref):
        def body(c, carry):
            m, l = carry
            v = x_ref[:, pl.ds(pl.multiple_of(c * 128, 128), 128)]
            m2 = jnp.maximum(m, jnp.max(v, axis=1, keepdims=True))
            l2 = l * jnp.exp(m - m2) + jnp.sum(jnp.exp(v - m2), axis=1, keepdims=True)
            return m2, l2
        m0 = jnp.full((x_ref.shape[0], 1), -jnp.inf, jnp.float32)
        m, l = lax.fori_loop(0, x_ref.shape[1] // 128, body, (m0, jnp.zeros_like(m0)))
        o_ref[...] = jnp.broadcast_to(m + jnp.log(l), o_ref.shape)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32), grid=(2,),
                          in_specs=[pl.BlockSpec((32, 1024), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((32, 128), lambda i: (i, 0)), interpret=interpret)(x)


# a kernel inside a jit: XLA dot before, the kernel (two outputs), XLA reduce and concat after
@case("r4_jit_two_outputs_f32_64x128", lambda r: [f32(r, 64, 96), f32(r, 96, 128)])
def r4_jit_two_outputs(a, b, interpret=False):
    def kernel(x_ref, y_ref, z_ref):
        v = x_ref[...]
        y_ref[...] = jnp.where(v > 0, v, 0.1 * v)
        z_ref[...] = jnp.broadcast_to(jnp.max(jnp.abs(v), axis=0, keepdims=True), z_ref.shape)
    h = jnp.dot(a, b, precision=lax.Precision.HIGHEST)
    y, z = pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct((64, 128), jnp.float32),
                                             jax.ShapeDtypeStruct((64, 128), jnp.float32)), grid=(4,),
                          in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0))],
                          out_specs=(pl.BlockSpec((16, 128), lambda i: (i, 0)), pl.BlockSpec((16, 128), lambda i: (i, 0))),
                          interpret=interpret)(h)
    return jnp.concatenate([y.sum(axis=1), z[::4, 0]]), jnp.exp(-y[:8])


# input_output_aliases: an in-place scaled update of rows chosen by prefetched indices (others untouched)
@case("r4_alias_prefetch_rows_f32_64x128", lambda r: [jnp.asarray([5, 0, 7], jnp.int32), f32(r, 64, 128), f32(r, 3, 8, 128)])
def r4_alias_rows(rows, x, upd, interpret=False):
    def kernel(rows_ref, x_ref, u_ref, o_ref):
        o_ref[...] = x_ref[...] * 0.5 + u_ref[...]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=1, grid=(3,),
                              in_specs=[pl.BlockSpec((8, 128), lambda i, r: (r[i], 0)),
                                        pl.BlockSpec((None, 8, 128), lambda i, r: (i, 0, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i, r: (r[i], 0))),
                          input_output_aliases={1: 0}, interpret=interpret)(rows, x, upd)


# iota masking of a ragged K tail: K = 320 with bk = 128 (the last block half outside), masked before the dot
@case("r4_kloop_ktail_mask_f32_64x320x128", lambda r: [f32(r, 64, 320), f32(r, 320, 128)])
def r4_ktail(x, w, interpret=False):
    K, bk = 320, 128

    def kernel(x_ref, w_ref, o_ref):
        k = pl.program_id(0)

        @pl.when(k == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        col = lax.broadcasted_iota(jnp.int32, (64, bk), 1) + k * bk
        row = lax.broadcasted_iota(jnp.int32, (bk, 128), 0) + k * bk
        xv = jnp.where(col < K, x_ref[...], 0.0)
        wv = jnp.where(row < K, w_ref[...], 0.0)
        o_ref[...] += jnp.dot(xv, wv, preferred_element_type=jnp.float32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32), grid=(pl.cdiv(K, bk),),
                          in_specs=[pl.BlockSpec((64, bk), lambda k: (0, k)), pl.BlockSpec((bk, 128), lambda k: (k, 0))],
                          out_specs=pl.BlockSpec((64, 128), lambda k: (0, 0)), interpret=interpret)(x, w)


# pltpu.bitcast and integer bit tricks: the exponent field of f32 values, and sign flips by xor
@case("r4_bitcast_exponent_f32_32x128", lambda r: [f32(r, 32, 128, scale=50.0)])
def r4_bitcast(x, interpret=False):
    def kernel(x_ref, e_ref, y_ref):
        bits = pltpu.bitcast(x_ref[...], jnp.int32)
        e_ref[...] = ((bits >> 23) & 0xFF) - 127
        y_ref[...] = pltpu.bitcast(bits ^ jnp.int32(-2147483648), jnp.float32)
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct((32, 128), jnp.int32),
                                             jax.ShapeDtypeStruct((32, 128), jnp.float32)), grid=(2,),
                          in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0))],
                          out_specs=(pl.BlockSpec((16, 128), lambda i: (i, 0)),) * 2, interpret=interpret)(x)


# pltpu.sync_copy of a whole HBM ref and of a row slice into VMEM scratch (a DMA that accumulates,
# add=True, does not lower in jax 0.10.2: "DMA with add=True is not supported")
@case("r4_sync_copy_slices_f32_32x128", lambda r: [f32(r, 32, 128), f32(r, 64, 128)])
def r4_sync_copy(a, b, interpret=False):
    def kernel(a_hbm, b_hbm, o_ref, buf, buf2):
        pltpu.sync_copy(a_hbm, buf)
        pltpu.sync_copy(b_hbm.at[pl.ds(24, 32)], buf2)
        o_ref[...] = buf[...] * 2.0 - buf2[...]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)] * 2,
                          out_specs=pl.BlockSpec((32, 128), lambda: (0, 0)),
                          scratch_shapes=[pltpu.VMEM((32, 128), jnp.float32)] * 2, interpret=interpret)(a, b)


# pltpu.store / load with masks: a lower-triangular store over the block, the rest keeps its value
@case("r4_masked_store_tril_f32_128x128", lambda r: [f32(r, 128, 128), f32(r, 128, 128)])
def r4_masked_store(x, y, interpret=False):
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = y_ref[...]
        i = pl.program_id(0)
        rows = lax.broadcasted_iota(jnp.int32, (32, 128), 0) + i * 32
        cols = lax.broadcasted_iota(jnp.int32, (32, 128), 1)
        pltpu.store(o_ref, x_ref[...] * 3.0, mask=cols <= rows)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((128, 128), jnp.float32), grid=(4,),
                          in_specs=[pl.BlockSpec((32, 128), lambda i: (i, 0))] * 2,
                          out_specs=pl.BlockSpec((32, 128), lambda i: (i, 0)), interpret=interpret)(x, y)


# SMEM scratch counter carried across grid steps, a scalar read into vector math, "arbitrary" grid
@case("r4_smem_counter_steps_f32_8x32x128", lambda r: [f32(r, 8, 32, 128)])
def r4_smem_counter(x, interpret=False):
    def kernel(x_ref, o_ref, cnt):
        @pl.when(pl.program_id(0) == 0)
        def _():
            cnt[0] = 0.0
        v = x_ref[...]
        cnt[0] = cnt[0] + jnp.sum(v)
        o_ref[...] = v - cnt[0] / 4096.0
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(8,),
                          in_specs=[pl.BlockSpec((None, 32, 128), lambda i: (i, 0, 0))],
                          out_specs=pl.BlockSpec((None, 32, 128), lambda i: (i, 0, 0)),
                          scratch_shapes=[pltpu.SMEM((1,), jnp.float32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
                          interpret=interpret)(x)


# roll along the sublane axis by a shift from program_id, then a column-wise maximum with the original
@case("r4_roll_sublane_dyn_f32_4x64x128", lambda r: [f32(r, 4, 64, 128)])
def r4_roll_sublane(x, interpret=False):
    def kernel(x_ref, o_ref):
        v = x_ref[...]
        o_ref[...] = jnp.maximum(v, pltpu.roll(v, pl.program_id(0) * 8 + 1, 0))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                          in_specs=[pl.BlockSpec((None, 64, 128), lambda i: (i, 0, 0))],
                          out_specs=pl.BlockSpec((None, 64, 128), lambda i: (i, 0, 0)), interpret=interpret)(x)


# batched attention scores over a 3-D grid (batch, q block, k block), bf16 in, online max/sum in f32 scratch
@case("r4_grid3d_online_softmax_bf16_2x128x256", lambda r: [bf(r, 2, 128, 128), bf(r, 2, 256, 128), bf(r, 2, 256, 128)])
def r4_online_softmax(q, k, v, interpret=False):
    bq, bk = 64, 128

    def kernel(q_ref, k_ref, v_ref, o_ref, m_sc, l_sc, acc):
        kb = pl.program_id(2)

        @pl.when(kb == 0)
        def _():
            m_sc[...] = jnp.full(m_sc.shape, -1e30, jnp.float32)
            l_sc[...] = jnp.zeros_like(l_sc)
            acc[...] = jnp.zeros_like(acc)
        s = lax.dot_general(q_ref[...], k_ref[...], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        s = s * 0.125
        m_new = jnp.maximum(m_sc[...], jnp.max(s, axis=1, keepdims=True))
        p = jnp.exp(s - m_new)
        alpha = jnp.exp(m_sc[...] - m_new)
        l_sc[...] = alpha * l_sc[...] + jnp.sum(p, axis=1, keepdims=True)
        acc[...] = alpha * acc[...] + jnp.dot(p.astype(jnp.bfloat16), v_ref[...], preferred_element_type=jnp.float32)
        m_sc[...] = m_new

        @pl.when(kb == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = (acc[...] / l_sc[...]).astype(o_ref.dtype)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(q.shape, jnp.bfloat16), grid=(2, 128 // bq, 256 // bk),
                          in_specs=[pl.BlockSpec((None, bq, 128), lambda b, i, j: (b, i, 0)),
                                    pl.BlockSpec((None, bk, 128), lambda b, i, j: (b, j, 0)),
                                    pl.BlockSpec((None, bk, 128), lambda b, i, j: (b, j, 0))],
                          out_specs=pl.BlockSpec((None, bq, 128), lambda b, i, j: (b, i, 0)),
                          scratch_shapes=[pltpu.VMEM((bq, 1), jnp.float32), pltpu.VMEM((bq, 1), jnp.float32),
                                          pltpu.VMEM((bq, 128), jnp.float32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
                          interpret=interpret)(q, k, v)


# einshape: split the lane dim into (heads, d) and merge the heads into rows, per block
@case("r4_einshape_heads_f32_16x256", lambda r: [f32(r, 16, 256)])
def r4_einshape(x, interpret=False):
    def kernel(x_ref, o_ref):
        o_ref[...] = pltpu.einshape("s(hd)->hsd", x_ref[...], h=2) * 2.0
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((2, 16, 128), jnp.float32),
                          in_specs=[pl.BlockSpec((16, 256), lambda: (0, 0))],
                          out_specs=pl.BlockSpec((2, 16, 128), lambda: (0, 0, 0)), interpret=interpret)(x)


# a kernel inside jit called twice on different shapes, with a vmap over the batch of the second call
@case("r4_jit_twice_vmap_f32_3x16x128", lambda r: [f32(r, 3, 16, 128), f32(r, 32, 128)])
def r4_jit_twice(xs, y, interpret=False):
    def kernel(x_ref, o_ref):
        v = x_ref[...]
        o_ref[...] = v * lax.rsqrt(jnp.mean(v * v, axis=1, keepdims=True) + 1e-6)

    def norm(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)(x)
    a = norm(y)
    b = jax.vmap(norm)(xs)
    return a[:16] + b.sum(0), b[1]


# ---- Round 5: written fresh after round 4's fixes, run once, not tuned on ----
# mixture-of-experts style: a prefetched expert id per row block picks the weight block, K-loop in f32 scratch
@case("r5_prefetch_expert_kloop_bf16_4x32x256x128",
      lambda r: [jnp.asarray([2, 0, 2, 1], jnp.int32), bf(r, 128, 256), bf(r, 3, 256, 128)])
def r5_expert(eid, x, w, interpret=False):
    def kernel(eid_ref, x_ref, w_ref, o_ref, acc):
        k = pl.program_id(1)

        @pl.when(k == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)
        acc[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)

        @pl.when(k == pl.num_programs(1) - 1)
        def _():
            o_ref[...] = jax.nn.gelu(acc[...]).astype(o_ref.dtype)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((128, 128), jnp.bfloat16),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=1, grid=(4, 2),
                              in_specs=[pl.BlockSpec((32, 128), lambda i, k, e: (i, k)),
                                        pl.BlockSpec((None, 128, 128), lambda i, k, e: (e[i], k, 0))],
                              out_specs=pl.BlockSpec((32, 128), lambda i, k, e: (i, 0)),
                              scratch_shapes=[pltpu.VMEM((32, 128), jnp.float32)]),
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
                          interpret=interpret)(eid, x, w)


# BlockSpec input, manual double-buffered DMA out to an ANY output (row chunks written as they finish)
@case("r5_dbuf_dma_out_f32_128x256", lambda r: [f32(r, 128, 256)])
def r5_dma_out(x, interpret=False):
    ch = 32

    def kernel(x_ref, o_hbm, buf, sem):
        n = x_ref.shape[0] // ch

        def cp(i, s):
            return pltpu.make_async_copy(buf.at[s], o_hbm.at[pl.ds(i * ch, ch)], sem.at[s])

        def body(i, c):
            s = i % 2

            @pl.when(i >= 2)
            def _():
                cp(i - 2, s).wait()
            v = x_ref[pl.ds(pl.multiple_of(i * ch, ch), ch), :]
            buf[s] = jnp.sin(v) * jnp.cos(v) + c
            cp(i, s).start()
            return c + 1.0
        lax.fori_loop(0, n, body, jnp.float32(0))
        cp(n - 2, n % 2).wait()
        cp(n - 1, (n - 1) % 2).wait()
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          in_specs=[pl.BlockSpec((128, 256), lambda: (0, 0))],
                          out_specs=pl.BlockSpec(memory_space=pl.ANY),
                          scratch_shapes=[pltpu.VMEM((2, ch, 256), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
                          interpret=interpret)(x)


# fori_loop whose trip count is a prefetched scalar (per grid step), summing that many row chunks
@case("r5_fori_dynamic_trips_f32_4x64x128", lambda r: [jnp.asarray([3, 0, 8, 5], jnp.int32), f32(r, 4, 64, 128)])
def r5_dyn_trips(n_ref_vals, x, interpret=False):
    def kernel(n_ref, x_ref, o_ref):
        i = pl.program_id(0)

        def body(j, acc):
            return acc + x_ref[pl.ds(pl.multiple_of(j * 8, 8), 8), :]
        o_ref[...] = lax.fori_loop(0, n_ref[i], body, jnp.zeros((8, 128), jnp.float32))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((4, 8, 128), jnp.float32),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=1, grid=(4,),
                              in_specs=[pl.BlockSpec((None, 64, 128), lambda i, n: (i, 0, 0))],
                              out_specs=pl.BlockSpec((None, 8, 128), lambda i, n: (i, 0, 0))),
                          interpret=interpret)(n_ref_vals, x)


# symmetric int8 quantisation per row: int8 values and an f32 scale per row (two outputs)
@case("r5_quantize_rows_int8_64x256", lambda r: [f32(r, 64, 256, scale=4.0)])
def r5_quantize(x, interpret=False):
    def kernel(x_ref, q_ref, s_ref):
        v = x_ref[...]
        amax = jnp.max(jnp.abs(v), axis=1, keepdims=True)
        scale = jnp.maximum(amax, 1e-6) / 127.0
        q_ref[...] = jnp.clip(jnp.round(v / scale), -127, 127).astype(jnp.int8)
        s_ref[...] = jnp.broadcast_to(scale, s_ref.shape)
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct((64, 256), jnp.int8),
                                             jax.ShapeDtypeStruct((64, 128), jnp.float32)), grid=(2,),
                          in_specs=[pl.BlockSpec((32, 256), lambda i: (i, 0))],
                          out_specs=(pl.BlockSpec((32, 256), lambda i: (i, 0)), pl.BlockSpec((32, 128), lambda i: (i, 0))),
                          interpret=interpret)(x)


# two kernels in one jit, the second updating the first's result in place (input_output_aliases), XLA ops between
@case("r5_jit_alias_chain_f32_64x128", lambda r: [f32(r, 64, 128), f32(r, 64, 128)])
def r5_alias_chain(a, b, interpret=False):
    def k1(a_ref, b_ref, o_ref):
        o_ref[...] = a_ref[...] * b_ref[...]

    def k2(y_ref, o_ref):
        o_ref[...] = y_ref[...] + jnp.max(y_ref[...], axis=0, keepdims=True)
    spec = pl.BlockSpec((16, 128), lambda i: (i, 0))
    y = pl.pallas_call(k1, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype), grid=(4,), in_specs=[spec, spec],
                       out_specs=spec, interpret=interpret)(a, b)
    y = jnp.abs(y) - 0.5
    z = pl.pallas_call(k2, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype), grid=(4,), in_specs=[spec],
                       out_specs=spec, input_output_aliases={0: 0}, interpret=interpret)(y)
    return z.T @ b


# a band mask (|row - col| <= 40) from iotas offset by two program ids over a 3-D grid, bf16 in and out
@case("r5_band_mask_3d_bf16_2x128x256", lambda r: [bf(r, 2, 128, 256)])
def r5_band(x, interpret=False):
    def kernel(x_ref, o_ref):
        i, j = pl.program_id(1), pl.program_id(2)
        rows = lax.broadcasted_iota(jnp.int32, (64, 128), 0) + i * 64
        cols = lax.broadcasted_iota(jnp.int32, (64, 128), 1) + j * 128
        keep = jnp.abs(rows - cols) <= 40
        o_ref[...] = jnp.where(keep, x_ref[...].astype(jnp.float32) * 2.0, 0.0).astype(o_ref.dtype)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2, 2, 2),
                          in_specs=[pl.BlockSpec((None, 64, 128), lambda b, i, j: (b, i, j))],
                          out_specs=pl.BlockSpec((None, 64, 128), lambda b, i, j: (b, i, j)), interpret=interpret)(x)


# uint8 pixels normalised to f32 per channel (prefetch-free), mean and inverse std as (1, C) rows
@case("r5_uint8_normalize_f32_64x384", lambda r: [jnp.asarray(r.integers(0, 256, (64, 384)), jnp.uint8),
                                                  f32(r, 1, 384), jnp.asarray(r.random((1, 384)) + 0.5, jnp.float32)])
def r5_uint8(x, mu, inv, interpret=False):
    def kernel(x_ref, m_ref, s_ref, o_ref):
        o_ref[...] = (x_ref[...].astype(jnp.float32) / 255.0 - m_ref[...]) * s_ref[...]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 384), jnp.float32), grid=(2, 3),
                          in_specs=[pl.BlockSpec((32, 128), lambda i, j: (i, j)), pl.BlockSpec((1, 128), lambda i, j: (0, j)),
                                    pl.BlockSpec((1, 128), lambda i, j: (0, j))],
                          out_specs=pl.BlockSpec((32, 128), lambda i, j: (i, j)), interpret=interpret)(x, mu, inv)


# while_loop with a vector carry and a scalar count: Newton steps for 1/sqrt until a fixed count
@case("r5_while_newton_rsqrt_f32_32x128", lambda r: [jnp.asarray(np.abs(r.standard_normal((32, 128))) + 0.5, jnp.float32)])
def r5_newton(x, interpret=False):
    def kernel(x_ref, o_ref):
        a = x_ref[...]

        def cond(c):
            return c[0] < 6

        def body(c):
            n, y = c
            return n + 1, y * (1.5 - 0.5 * a * y * y)
        _, y = lax.while_loop(cond, body, (jnp.int32(0), jnp.full(a.shape, 0.7, jnp.float32)))
        o_ref[...] = y
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)(x)


# blocks visited in reverse order (index map n-1-k) accumulating into a revisited output over an "arbitrary" axis
@case("r5_reverse_kloop_f32_32x512x128", lambda r: [f32(r, 32, 512), f32(r, 512, 128)])
def r5_reverse(x, w, interpret=False):
    nk = 4

    def kernel(x_ref, w_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] = o_ref[...] * 0.5 + jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32), grid=(nk,),
                          in_specs=[pl.BlockSpec((32, 128), lambda k: (0, nk - 1 - k)),
                                    pl.BlockSpec((128, 128), lambda k: (nk - 1 - k, 0))],
                          out_specs=pl.BlockSpec((32, 128), lambda k: (0, 0)),
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
                          interpret=interpret)(x, w)


# ---- round 6: written fresh after round 5, run once (not tuned on) ----

# K-loop with the inputs' buffering stated (pl.Buffered(2); jax 0.10.2 refuses 3) and the output visited
# column-major (grid j, i, k)
@case("r6_buffered2_colmajor_kloop_bf16_128x512x256", lambda r: [bf(r, 128, 512), bf(r, 512, 256)])
def r6_buf3(x, w, interpret=False):
    def kernel(x_ref, w_ref, o_ref, acc):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)
        acc[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = acc[...].astype(o_ref.dtype)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((128, 256), jnp.bfloat16), grid=(2, 2, 4),
                          in_specs=[pl.BlockSpec((64, 128), lambda j, i, k: (i, k), pipeline_mode=pl.Buffered(2)),
                                    pl.BlockSpec((128, 128), lambda j, i, k: (k, j), pipeline_mode=pl.Buffered(2))],
                          out_specs=pl.BlockSpec((64, 128), lambda j, i, k: (i, j)),
                          scratch_shapes=[pltpu.VMEM((64, 128), jnp.float32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
                          interpret=interpret)(x, w)


# two scalar-prefetch arrays: a row-block id choosing the input block and a per-step f32 scale read in the body
@case("r6_two_prefetch_ids_scales_f32_6x16x128", lambda r: [jnp.asarray([4, 1, 1, 5, 0, 2], jnp.int32),
                                                            jnp.asarray(r.random(6) + 0.25, jnp.float32), f32(r, 96, 128)])
def r6_two_prefetch(ids, sc, x, interpret=False):
    def kernel(id_ref, s_ref, x_ref, o_ref):
        i = pl.program_id(0)
        o_ref[...] = x_ref[...] * s_ref[i] + id_ref[i].astype(jnp.float32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((96, 128), jnp.float32),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=2, grid=(6,),
                              in_specs=[pl.BlockSpec((16, 128), lambda i, ids, s: (ids[i], 0))],
                              out_specs=pl.BlockSpec((16, 128), lambda i, ids, s: (i, 0))),
                          interpret=interpret)(ids, sc, x)


# manual DMA prefetch across grid steps: step i starts the copy for step i+1 into the other slot (Pallas guide pattern)
@case("r6_cross_step_dma_f32_8x32x128", lambda r: [f32(r, 8, 32, 128)])
def r6_cross_step(x, interpret=False):
    n = x.shape[0]

    def kernel(x_hbm, o_ref, buf, sem):
        i = pl.program_id(0)

        def cp(j, s):
            return pltpu.make_async_copy(x_hbm.at[j], buf.at[s], sem.at[s])

        @pl.when(i == 0)
        def _():
            cp(0, 0).start()

        @pl.when(i + 1 < n)
        def _():
            cp(i + 1, (i + 1) % 2).start()
        cp(i, i % 2).wait()
        v = buf[i % 2]
        o_ref[...] = jnp.tanh(v) + jnp.sum(v, axis=0, keepdims=True) * 0.01
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(n,),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                          out_specs=pl.BlockSpec((None, 32, 128), lambda i: (i, 0, 0)),
                          scratch_shapes=[pltpu.VMEM((2, 32, 128), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
                          interpret=interpret)(x)


# a jit whose lax.cond picks one of two kernels on a data-dependent predicate, XLA ops around
@case("r6_jit_cond_two_kernels_f32_64x128", lambda r: [f32(r, 64, 128), f32(r, 64, 128)])
def r6_cond(a, b, interpret=False):
    spec = pl.BlockSpec((32, 128), lambda i: (i, 0))

    def k_mul(a_ref, b_ref, o_ref):
        o_ref[...] = a_ref[...] * b_ref[...]

    def k_max(a_ref, b_ref, o_ref):
        o_ref[...] = jnp.maximum(a_ref[...], b_ref[...]) - 1.0

    def call(k, u, v):
        return pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct(u.shape, u.dtype), grid=(2,), in_specs=[spec, spec],
                              out_specs=spec, interpret=interpret)(u, v)
    y = lax.cond(jnp.sum(a) > jnp.sum(b), lambda u, v: call(k_mul, u, v), lambda u, v: call(k_max, u, v), a, b)
    return jnp.exp(-jnp.abs(y)) + a


# a kernel called in a scan nested in a fori_loop (calls inside nested loops), the carry feeding the next call
@case("r6_nested_loop_kernel_f32_3x2x8x128", lambda r: [f32(r, 3, 2, 8, 128), f32(r, 8, 128)])
def r6_nested(xs, h0, interpret=False):
    def kernel(x_ref, h_ref, o_ref):
        o_ref[...] = jnp.tanh(x_ref[...] + 0.5 * h_ref[...])

    def step(h, x):
        h = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(h.shape, h.dtype), interpret=interpret)(x, h)
        return h, jnp.sum(h)

    def outer(t, c):
        h, tot = c
        h, s = lax.scan(step, h, xs[t])
        return h, tot + jnp.sum(s)
    return lax.fori_loop(0, xs.shape[0], outer, (h0, jnp.float32(0)))


# int8 x int8 accumulated straight into an int32 output block over a batched 3-D grid
@case("r6_int8_bmm_i32_acc_out_2x64x384x128", lambda r: [jnp.asarray(r.integers(-128, 128, (2, 64, 384)), jnp.int8),
                                                         jnp.asarray(r.integers(-128, 128, (2, 384, 128)), jnp.int8)])
def r6_int8_bmm(x, w, interpret=False):
    def kernel(x_ref, w_ref, o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.int32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((2, 64, 128), jnp.int32), grid=(2, 3),
                          in_specs=[pl.BlockSpec((None, 64, 128), lambda b, k: (b, 0, k)),
                                    pl.BlockSpec((None, 128, 128), lambda b, k: (b, k, 0))],
                          out_specs=pl.BlockSpec((None, 64, 128), lambda b, k: (b, 0, 0)),
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
                          interpret=interpret)(x, w)


# pl.loop with a step of 2 over row chunks, pl.when inside on the chunk index, writing o_ref slices
@case("r6_pl_loop_step2_when_f32_64x256", lambda r: [f32(r, 64, 256)])
def r6_loop_step(x, interpret=False):
    def kernel(x_ref, o_ref):
        @pl.loop(0, 8, step=2)
        def _(j):
            rows = pl.ds(pl.multiple_of(j * 8, 8), 16)
            v = x_ref[rows, :]

            @pl.when(j % 4 == 0)
            def _():
                o_ref[rows, :] = v * v

            @pl.when(j % 4 != 0)
            def _():
                o_ref[rows, :] = jnp.abs(v) + 1.0
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(1, 2),
                          in_specs=[pl.BlockSpec((64, 128), lambda i, j: (i, j))],
                          out_specs=pl.BlockSpec((64, 128), lambda i, j: (i, j)), interpret=interpret)(x)


# two outputs with different block shapes: the elementwise result per (i, j) block and row sums revisited over j
@case("r6_two_outs_rowsum_revisit_f32_64x512", lambda r: [f32(r, 64, 512)])
def r6_two_outs(x, interpret=False):
    def kernel(x_ref, y_ref, s_ref):
        j = pl.program_id(1)
        v = x_ref[...]
        y_ref[...] = v * jax.nn.sigmoid(v)

        @pl.when(j == 0)
        def _():
            s_ref[...] = jnp.zeros_like(s_ref)
        s_ref[...] += jnp.broadcast_to(jnp.sum(v, axis=1, keepdims=True), s_ref.shape)
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct((64, 512), jnp.float32),
                                             jax.ShapeDtypeStruct((64, 128), jnp.float32)), grid=(2, 4),
                          in_specs=[pl.BlockSpec((32, 128), lambda i, j: (i, j))],
                          out_specs=(pl.BlockSpec((32, 128), lambda i, j: (i, j)), pl.BlockSpec((32, 128), lambda i, j: (i, 0))),
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
                          interpret=interpret)(x)


# an inclusive prefix sum along lanes by log-step pltpu.roll and an iota mask (Hillis-Steele)
@case("r6_roll_prefix_sum_lanes_f32_16x128", lambda r: [jnp.asarray(r.integers(-8, 8, (16, 128)), jnp.float32)])
def r6_prefix(x, interpret=False):
    def kernel(x_ref, o_ref):
        v = x_ref[...]
        lane = lax.broadcasted_iota(jnp.int32, v.shape, 1)
        s = 1
        while s < 128:
            v = v + jnp.where(lane >= s, pltpu.roll(v, s, 1), 0.0)
            s *= 2
        o_ref[...] = v
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)(x)


# bit tricks: f32 -> int32 bitcast, sign flip and exponent clamp by integer ops, back to f32
@case("r6_bitcast_sign_exp_f32_32x256", lambda r: [f32(r, 32, 256, scale=100.0)])
def r6_bits(x, interpret=False):
    def kernel(x_ref, o_ref):
        b = pltpu.bitcast(x_ref[...], jnp.int32)
        b = b ^ jnp.int32(-2147483648)
        e = (b >> 23) & 0xFF
        b = jnp.where(e > 130, (b & jnp.int32(-2139095041)) | (130 << 23), b)
        o_ref[...] = pltpu.bitcast(b, jnp.float32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                          in_specs=[pl.BlockSpec((16, 256), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((16, 256), lambda i: (i, 0)), interpret=interpret)(x)


# a cdiv grid over 200 rows (last block partial) masked by an iota of the true row count, bf16, column means
@case("r6_cdiv_tail_colmean_bf16_200x256", lambda r: [bf(r, 200, 256)])
def r6_tail(x, interpret=False):
    n, bm = x.shape[0], 64

    def kernel(x_ref, o_ref, acc):
        i = pl.program_id(0)

        @pl.when(i == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)
        rows = lax.broadcasted_iota(jnp.int32, (bm, 256), 0) + i * bm
        v = jnp.where(rows < n, x_ref[...].astype(jnp.float32), 0.0)
        acc[...] += jnp.sum(v.reshape(bm // 8, 8, 256), axis=0)

        @pl.when(i == pl.num_programs(0) - 1)
        def _():
            o_ref[...] = (jnp.sum(acc[...], axis=0, keepdims=True) / n).astype(o_ref.dtype)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((1, 256), jnp.bfloat16), grid=(pl.cdiv(n, bm),),
                          in_specs=[pl.BlockSpec((bm, 256), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((1, 256), lambda i: (0, 0)),
                          scratch_shapes=[pltpu.VMEM((8, 256), jnp.float32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
                          interpret=interpret)(x)


# input_output_aliases on a grid: a residual add updating the aliased buffer block by block, in a jit with a matmul before
@case("r6_jit_dot_then_alias_residual_f32_128x128", lambda r: [f32(r, 128, 128), f32(r, 128, 128)])
def r6_alias_resid(x, w, interpret=False):
    def kernel(h_ref, x_ref, o_ref):
        o_ref[...] = h_ref[...] + jnp.maximum(x_ref[...], 0.0)
    h = jnp.dot(x, w, precision=lax.Precision.HIGHEST)
    spec = pl.BlockSpec((32, 128), lambda i: (i, 0))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(h.shape, h.dtype), grid=(4,), in_specs=[spec, spec],
                          out_specs=spec, input_output_aliases={0: 0}, interpret=interpret)(h, x)


# fori_loop over the K chunks of one VMEM block with a dynamic lane slice of w, bf16 dot into an f32 carry
@case("r6_fori_kchunk_lane_slices_bf16_64x512x128", lambda r: [bf(r, 64, 512), bf(r, 512, 128)])
def r6_fori_k(x, w, interpret=False):
    def kernel(x_ref, w_ref, o_ref):
        def body(k, acc):
            c = pl.ds(pl.multiple_of(k * 128, 128), 128)
            return acc + jnp.dot(x_ref[:, c], w_ref[c, :], preferred_element_type=jnp.float32)
        acc = lax.fori_loop(0, 4, body, jnp.zeros((64, 128), jnp.float32))
        o_ref[...] = jnp.maximum(acc, 0.0).astype(o_ref.dtype)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.bfloat16), interpret=interpret)(x, w)


# a (1, C) SMEM-free bias broadcast and an exact reciprocal (pl.reciprocal) normalising rows, 2-D parallel grid
@case("r6_reciprocal_rownorm_f32_128x256", lambda r: [f32(r, 128, 256), f32(r, 1, 256)])
def r6_recip(x, b, interpret=False):
    def kernel(x_ref, b_ref, o_ref):
        v = x_ref[...] + b_ref[...]
        o_ref[...] = v * pl.reciprocal(jnp.sum(v * v, axis=1, keepdims=True) + 1.0)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                          in_specs=[pl.BlockSpec((32, 256), lambda i: (i, 0)), pl.BlockSpec((1, 256), lambda i: (0, 0))],
                          out_specs=pl.BlockSpec((32, 256), lambda i: (i, 0)),
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
                          interpret=interpret)(x, b)


# the pl.kernel / core_map API (no grid): a whole-array kernel on the TensorCore mesh
@case("r6_pl_kernel_mesh_f32_32x128", lambda r: [f32(r, 32, 128)])
def r6_pl_kernel(x, interpret=False):
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=1)

    @functools.partial(pl.kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh, interpret=interpret)
    def k(x_hbm, o_hbm):
        def body(xv, ov):
            ov[...] = jnp.exp(xv[...] * 0.5) - 1.0
        pltpu.emit_pipeline(body, grid=(4,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                            out_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))])(x_hbm, o_hbm)
    return k(x)


# unaligned row windows chosen by prefetched element offsets (pl.Element block dimension)
@case("r6_element_offsets_rows_f32_4x8x128", lambda r: [jnp.asarray([3, 17, 0, 40], jnp.int32), f32(r, 64, 128)])
def r6_element(offs, x, interpret=False):
    def kernel(o_ref_s, x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0 + 1.0
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((4, 8, 128), jnp.float32),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=1, grid=(4,),
                              in_specs=[pl.BlockSpec((pl.Element(8), pl.Element(128)), lambda i, o: (o[i], 0))],
                              out_specs=pl.BlockSpec((None, 8, 128), lambda i, o: (i, 0, 0))),
                          interpret=interpret)(offs, x)


# the max and the sum over the leading axis of a 3-D block (jnp.cumsum, tried first, does not lower)
@case("r6_leading_axis_max_sum_3d_f32_4x16x128", lambda r: [jnp.asarray(r.integers(-4, 5, (4, 16, 128)), jnp.float32)])
def r6_lead(x, interpret=False):
    def kernel(x_ref, o_ref, m_ref):
        v = x_ref[...]
        o_ref[...] = v - jnp.sum(v, axis=0, keepdims=True)
        m_ref[...] = jnp.max(v, axis=0)
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype),
                                             jax.ShapeDtypeStruct((16, 128), x.dtype)), interpret=interpret)(x)


# a regular semaphore signalled from a loop and read back (pl.semaphore_read) into an SMEM result
@case("r6_sem_read_count_i32_4", lambda r: [f32(r, 8, 128)])
def r6_semread(x, interpret=False):
    def kernel(x_ref, o_ref, c_ref, sem):
        @pl.loop(0, 5)
        def _(j):
            pl.semaphore_signal(sem, 1)
        c_ref[0] = pl.semaphore_read(sem)
        pl.semaphore_wait(sem, 5)
        c_ref[1] = pl.semaphore_read(sem)
        o_ref[...] = x_ref[...] + c_ref[0].astype(jnp.float32)
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((2,), jnp.int32)),
                          out_specs=(pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pltpu.SMEM)),
                          scratch_shapes=[pltpu.SemaphoreType.REGULAR], interpret=interpret)(x)


# f32 dots inside a kernel at precision HIGHEST and at DEFAULT, both results out
@case("r6_dot_precisions_f32_64x128x128", lambda r: [f32(r, 64, 128), f32(r, 128, 128)])
def r6_prec(x, w, interpret=False):
    def kernel(x_ref, w_ref, hi_ref, lo_ref):
        hi_ref[...] = jnp.dot(x_ref[...], w_ref[...], precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
        lo_ref[...] = jnp.dot(x_ref[...].astype(jnp.bfloat16), w_ref[...].astype(jnp.bfloat16),
                              preferred_element_type=jnp.float32)
    s = jax.ShapeDtypeStruct((64, 128), jnp.float32)
    return pl.pallas_call(kernel, out_shape=(s, s), interpret=interpret)(x, w)


# "parallel" over a megacore-sized leading dim with a bf16 transposed output block (x.T inside the kernel)
@case("r6_transpose_out_bf16_256x384", lambda r: [bf(r, 256, 384)])
def r6_tr(x, interpret=False):
    def kernel(x_ref, o_ref):
        o_ref[...] = (x_ref[...].astype(jnp.float32).T * 0.5).astype(o_ref.dtype)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((384, 256), jnp.bfloat16), grid=(3, 2),
                          in_specs=[pl.BlockSpec((128, 128), lambda j, i: (i, j))],
                          out_specs=pl.BlockSpec((128, 128), lambda j, i: (j, i)),
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
                          interpret=interpret)(x)


# a row gather inside a VMEM block by take_along_axis on lanes (a per-row lane permutation)
@case("r6_take_along_lanes_f32_8x128", lambda r: [f32(r, 8, 128), jnp.asarray(r.integers(0, 128, (8, 128)), jnp.int32)])
def r6_take(x, idx, interpret=False):
    def kernel(x_ref, i_ref, o_ref):
        o_ref[...] = jnp.take_along_axis(x_ref[...], i_ref[...], axis=1)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)(x, idx)


# take_along_axis over sublanes (axis 0 of a block) with indices from an iota expression, bf16 in, f32 out
@case("r6_take_along_sublanes_bf16_16x256", lambda r: [bf(r, 16, 256)])
def r6_take_sub(x, interpret=False):
    def kernel(x_ref, o_ref):
        rows = lax.broadcasted_iota(jnp.int32, (16, 128), 0)
        cols = lax.broadcasted_iota(jnp.int32, (16, 128), 1)
        idx = (rows * 5 + cols) % 16
        o_ref[...] = jnp.take_along_axis(x_ref[...].astype(jnp.float32), idx, axis=0) * 3.0
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 256), jnp.float32), grid=(2,),
                          in_specs=[pl.BlockSpec((16, 128), lambda j: (0, j))],
                          out_specs=pl.BlockSpec((16, 128), lambda j: (0, j)), interpret=interpret)(x)


# a jit of a layer: XLA matmul, a Pallas fused bias+GELU+dropout-free residual over a 2-D grid, then an XLA reduction
@case("r6_jit_mlp_block_bf16_128x256x256", lambda r: [bf(r, 128, 256), bf(r, 256, 256), bf(r, 1, 256)])
def r6_mlp(x, w, b, interpret=False):
    def kernel(h_ref, b_ref, x_ref, o_ref):
        h = h_ref[...].astype(jnp.float32) + b_ref[...].astype(jnp.float32)
        o_ref[...] = (jax.nn.gelu(h, approximate=True) + x_ref[...].astype(jnp.float32)).astype(o_ref.dtype)
    h = jnp.dot(x, w, preferred_element_type=jnp.float32).astype(jnp.bfloat16)
    y = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(h.shape, h.dtype), grid=(2, 2),
                       in_specs=[pl.BlockSpec((64, 128), lambda i, j: (i, j)), pl.BlockSpec((1, 128), lambda i, j: (0, j)),
                                 pl.BlockSpec((64, 128), lambda i, j: (i, j))],
                       out_specs=pl.BlockSpec((64, 128), lambda i, j: (i, j)), interpret=interpret)(h, b, x)
    return y, jnp.sum(y.astype(jnp.float32), axis=0)


# an int8 weight-only matmul whose per-group (128-row) scales are applied inside the K loop, bf16 activations
# (groups of 64 rows, tried first, are blocks Mosaic refuses)
@case("r6_int8_group_scales_bf16_32x256x128", lambda r: [bf(r, 32, 256), jnp.asarray(r.integers(-127, 128, (256, 128)), jnp.int8),
                                                         jnp.asarray(r.random((2, 1, 128)) * 0.02, jnp.float32)])
def r6_groupq(x, w, s, interpret=False):
    def kernel(x_ref, w_ref, s_ref, o_ref, acc):
        k = pl.program_id(0)

        @pl.when(k == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)
        wq = w_ref[...].astype(jnp.float32) * s_ref[...]
        acc[...] += jnp.dot(x_ref[...].astype(jnp.float32), wq, preferred_element_type=jnp.float32)

        @pl.when(k == pl.num_programs(0) - 1)
        def _():
            o_ref[...] = acc[...].astype(o_ref.dtype)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.bfloat16), grid=(2,),
                          in_specs=[pl.BlockSpec((32, 128), lambda k: (0, k)), pl.BlockSpec((128, 128), lambda k: (k, 0)),
                                    pl.BlockSpec((None, 1, 128), lambda k: (k, 0, 0))],
                          out_specs=pl.BlockSpec((32, 128), lambda k: (0, 0)),
                          scratch_shapes=[pltpu.VMEM((32, 128), jnp.float32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
                          interpret=interpret)(x, w, s)


# ---- round 7: written fresh after round 6's fixes, run once (not tuned on) ----

# jnp.tile and jnp.concatenate along lanes inside a kernel
@case("r7_tile_concat_lanes_f32_16x128", lambda r: [f32(r, 16, 128), f32(r, 16, 128)])
def r7_tile(a, b, interpret=False):
    def kernel(a_ref, b_ref, o_ref):
        t = jnp.tile(a_ref[:, :64], (1, 2))
        o_ref[...] = jnp.concatenate([t + b_ref[...], b_ref[...] * 2.0], axis=1)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 256), jnp.float32), interpret=interpret)(a, b)


# an in-kernel reshape of rows into sublane groups and a sum over the groups
@case("r7_reshape_group_sum_f32_64x128", lambda r: [f32(r, 64, 128)])
def r7_reshape(x, interpret=False):
    def kernel(x_ref, o_ref):
        v = x_ref[...].reshape(4, 16, 128)
        o_ref[...] = jnp.sum(v, axis=0) - jnp.max(v, axis=0)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), interpret=interpret)(x)


# NaN and infinity cleaning: isnan / isinf, nan-propagating max against a nan-ignoring where
@case("r7_nan_inf_clean_f32_16x128", lambda r: [jnp.asarray(np.where(r.random((16, 128)) < 0.1, np.nan,
                                                                      np.where(r.random((16, 128)) < 0.1, np.inf, r.standard_normal((16, 128)))), jnp.float32)])
def r7_nan(x, interpret=False):
    def kernel(x_ref, o_ref, m_ref):
        v = x_ref[...]
        bad = jnp.isnan(v) | jnp.isinf(v)
        o_ref[...] = jnp.where(bad, 0.0, v) + jnp.where(jnp.isposinf(v), 1.0, 0.0)
        m_ref[...] = jnp.broadcast_to(jnp.max(v, axis=1, keepdims=True), m_ref.shape)
    s = jax.ShapeDtypeStruct((16, 128), jnp.float32)
    return pl.pallas_call(kernel, out_shape=(s, s), interpret=interpret)(x)


# integer floor division, modulo and sign on vectors with negative operands
@case("r7_floordiv_mod_sign_i32_8x128", lambda r: [jnp.asarray(r.integers(-1000, 1000, (8, 128)), jnp.int32),
                                                   jnp.asarray(r.choice([-7, -3, 2, 5, 9], (8, 128)), jnp.int32)])
def r7_intdiv(a, b, interpret=False):
    def kernel(a_ref, b_ref, q_ref, m_ref):
        x, y = a_ref[...], b_ref[...]
        q_ref[...] = jnp.floor_divide(x, y) * jnp.sign(x)
        m_ref[...] = jnp.remainder(x, y) + lax.rem(x, y)
    s = jax.ShapeDtypeStruct((8, 128), jnp.int32)
    return pl.pallas_call(kernel, out_shape=(s, s), interpret=interpret)(a, b)


# round-half-to-even, clip and a cast to uint8 (an image quantiser), uint8 output
@case("r7_round_clip_u8_32x128", lambda r: [jnp.asarray(np.round(r.standard_normal((32, 128)) * 80 + 128) + 0.5 * (r.random((32, 128)) < 0.3), jnp.float32)])
def r7_u8(x, interpret=False):
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.clip(jnp.round(x_ref[...]), 0, 255).astype(jnp.uint8)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.uint8), interpret=interpret)(x)


# bf16 reductions in bf16: lane max and a sublane sum of a bf16 block, bf16 results
@case("r7_bf16_reduce_max_sum_bf16_32x256", lambda r: [bf(r, 32, 256)])
def r7_bfred(x, interpret=False):
    def kernel(x_ref, m_ref, s_ref):
        v = x_ref[...]
        m_ref[...] = jnp.broadcast_to(jnp.max(v, axis=1, keepdims=True), m_ref.shape)
        s_ref[...] = jnp.broadcast_to(jnp.sum(v.astype(jnp.float32), axis=0, keepdims=True), s_ref.shape).astype(jnp.bfloat16)
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct((32, 128), jnp.bfloat16),
                                             jax.ShapeDtypeStruct((8, 256), jnp.bfloat16)), interpret=interpret)(x)


# rows gathered by prefetched ids through one DMA each from an ANY input into scratch (paged-style), then scaled
@case("r7_dma_gather_rows_prefetch_f32_8x128", lambda r: [jnp.asarray([5, 0, 63, 17, 17, 2, 40, 8], jnp.int32), f32(r, 64, 128)])
def r7_dma_gather(ids, x, interpret=False):
    def kernel(id_ref, x_hbm, o_ref, buf, sem):
        for j in range(8):
            pltpu.make_async_copy(x_hbm.at[pl.ds(id_ref[j], 1)], buf.at[pl.ds(j, 1)], sem.at[0]).start()
        for j in range(8):
            pltpu.make_async_copy(x_hbm.at[pl.ds(id_ref[j], 1)], buf.at[pl.ds(j, 1)], sem.at[0]).wait()
        o_ref[...] = buf[...] * 3.0 - 1.0
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=1, grid=(1,),
                              in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                              out_specs=pl.BlockSpec((8, 128), lambda i, ids: (0, 0)),
                              scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA((1,))]),
                          interpret=interpret)(ids, x)


# a nested emit_pipeline over (m, k) accumulating into its output block across k, inside a kernel with ANY refs
@case("r7_emit_pipeline_kloop_f32_64x256x128", lambda r: [f32(r, 64, 256), f32(r, 256, 128)])
def r7_emit_k(x, w, interpret=False):
    def kernel(x_hbm, w_hbm, o_hbm):
        def body(xb, wb, ob):
            @pl.when(pl.program_id(1) == 0)
            def _():
                ob[...] = jnp.zeros_like(ob)
            ob[...] += jnp.dot(xb[...], wb[...], preferred_element_type=jnp.float32)
        pltpu.emit_pipeline(body, grid=(2, 2),
                            in_specs=[pl.BlockSpec((32, 128), lambda i, k: (i, k)), pl.BlockSpec((128, 128), lambda i, k: (k, 0))],
                            out_specs=[pl.BlockSpec((32, 128), lambda i, k: (i, 0))])(x_hbm, w_hbm, o_hbm)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pl.ANY)],
                          out_specs=pl.BlockSpec(memory_space=pl.ANY), interpret=interpret)(x, w)


# exp2 / log2 / log1p / softplus on wide-ranged inputs (expm1, tried first, does not lower)
@case("r7_exp2_log2_softplus_f32_16x256", lambda r: [f32(r, 16, 256, scale=6.0)])
def r7_math(x, interpret=False):
    def kernel(x_ref, o_ref):
        v = x_ref[...]
        o_ref[...] = jnp.exp2(v * 0.25) + jnp.log2(jnp.abs(v) + 1.0) + jax.nn.softplus(v) + jnp.log1p(v * v)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)(x)


# int8 weights stored transposed (N, K), dequantised to bf16 and contracted on both minor dims, K-loop in scratch
@case("r7_int8_wT_dot_general_bf16_32x256x128", lambda r: [bf(r, 32, 256), jnp.asarray(r.integers(-127, 128, (128, 256)), jnp.int8)])
def r7_wT(x, wt, interpret=False):
    def kernel(x_ref, w_ref, o_ref, acc):
        @pl.when(pl.program_id(0) == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)
        w = w_ref[...].astype(jnp.bfloat16)
        acc[...] += lax.dot_general(x_ref[...], w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(0) == pl.num_programs(0) - 1)
        def _():
            o_ref[...] = (acc[...] * 0.01).astype(o_ref.dtype)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.bfloat16), grid=(2,),
                          in_specs=[pl.BlockSpec((32, 128), lambda k: (0, k)), pl.BlockSpec((128, 128), lambda k: (0, k))],
                          out_specs=pl.BlockSpec((32, 128), lambda k: (0, 0)),
                          scratch_shapes=[pltpu.VMEM((32, 128), jnp.float32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)), interpret=interpret)(x, wt)


# a while_loop whose exit depends on vector data (a reduction below a threshold) and a prefetched cap
@case("r7_while_data_exit_f32_8x128", lambda r: [jnp.asarray([20], jnp.int32), jnp.asarray(np.abs(r.standard_normal((8, 128))) * 50, jnp.float32)])
def r7_while_data(cap, x, interpret=False):
    def kernel(c_ref, x_ref, o_ref, n_ref):
        def cond(c):
            i, v = c
            return (i < c_ref[0]) & (jnp.max(v) > 1.0)

        def body(c):
            i, v = c
            return i + 1, v * 0.5
        n, v = lax.while_loop(cond, body, (jnp.int32(0), x_ref[...]))
        o_ref[...] = v
        n_ref[0] = n
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((1,), jnp.int32)),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=1, grid=(1,),
                              in_specs=[pl.BlockSpec((8, 128), lambda i, c: (0, 0))],
                              out_specs=(pl.BlockSpec((8, 128), lambda i, c: (0, 0)), pl.BlockSpec(memory_space=pltpu.SMEM))),
                          interpret=interpret)(cap, x)


# a grid over (heads, batch) whose index maps put batch first, both squeezed, and a per-head bias
@case("r7_grid_heads_batch_swap_f32_2x3x16x128", lambda r: [f32(r, 2, 3, 16, 128), f32(r, 3, 1, 128)])
def r7_hb(x, b, interpret=False):
    def kernel(x_ref, b_ref, o_ref):
        o_ref[...] = jnp.tanh(x_ref[...] + b_ref[...]) * (pl.program_id(0) + 1).astype(jnp.float32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(3, 2),
                          in_specs=[pl.BlockSpec((None, None, 16, 128), lambda h, bb: (bb, h, 0, 0)),
                                    pl.BlockSpec((None, 1, 128), lambda h, bb: (h, 0, 0))],
                          out_specs=pl.BlockSpec((None, None, 16, 128), lambda h, bb: (bb, h, 0, 0)),
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
                          interpret=interpret)(x, b)


# pltpu.async_copy (the copy-and-start form) of two halves into scratch, waited, then combined
@case("r7_async_copy_halves_f32_32x256", lambda r: [f32(r, 32, 256)])
def r7_async(x, interpret=False):
    def kernel(x_hbm, o_ref, buf, sem):
        c0 = pltpu.async_copy(x_hbm.at[pl.ds(0, 16)], buf.at[0], sem.at[0])
        c1 = pltpu.async_copy(x_hbm.at[pl.ds(16, 16)], buf.at[1], sem.at[1])
        c0.wait()
        c1.wait()
        o_ref[...] = buf[0] * buf[1] + 1.0
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 256), jnp.float32),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                          scratch_shapes=[pltpu.VMEM((2, 16, 256), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
                          interpret=interpret)(x)


# a small SMEM table (whole-array SMEM input) read in a scalar loop to build per-row offsets
@case("r7_smem_table_scalar_loop_f32_8x128", lambda r: [jnp.asarray(r.integers(-5, 6, (8,)), jnp.int32), f32(r, 8, 128)])
def r7_smem_tab(t, x, interpret=False):
    def kernel(t_ref, x_ref, o_ref):
        acc = jnp.int32(0)
        for j in range(8):
            acc = acc + t_ref[j]
            o_ref[pl.ds(j, 1), :] = x_ref[pl.ds(j, 1), :] + acc.astype(jnp.float32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
                          interpret=interpret)(t, x)


# ---- Round 8: written fresh after round 7 and the nested-loop / conditional timing, not tuned on ----

# RMSNorm of a residual sum, bf16 in and out, f32 inside; two outputs (the normed rows and the new residual)
@case("r8_rmsnorm_residual_two_out_bf16_64x256", lambda r: [bf(r, 64, 256), bf(r, 64, 256), bf(r, 1, 256)])
def r8_rmsnorm(x, res, g, interpret=False):
    def kernel(x_ref, r_ref, g_ref, o_ref, nr_ref):
        h = x_ref[...].astype(jnp.float32) + r_ref[...].astype(jnp.float32)
        nr_ref[...] = h.astype(nr_ref.dtype)
        ms = jnp.mean(h * h, axis=-1, keepdims=True)
        o_ref[...] = (h * lax.rsqrt(ms + 1e-6) * g_ref[...].astype(jnp.float32)).astype(o_ref.dtype)
    spec = pl.BlockSpec((16, 256), lambda i: (i, 0))
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype)),
                          grid=(4,), in_specs=[spec, spec, pl.BlockSpec((1, 256), lambda i: (0, 0))],
                          out_specs=(spec, spec), interpret=interpret)(x, res, g)


# grouped-query attention: 4 query heads share 2 kv heads (kv index map h // 2), online softmax over kv blocks
@case("r8_gqa_online_softmax_f32_4h_64x128", lambda r: [f32(r, 4, 64, 128, scale=0.3), f32(r, 2, 128, 128, scale=0.3), f32(r, 2, 128, 128)])
def r8_gqa(q, k, v, interpret=False):
    def kernel(q_ref, k_ref, v_ref, o_ref, m_sc, l_sc, acc):
        j = pl.program_id(1)

        @pl.when(j == 0)
        def _():
            m_sc[...] = jnp.full_like(m_sc, -jnp.inf)
            l_sc[...] = jnp.zeros_like(l_sc)
            acc[...] = jnp.zeros_like(acc)
        s = lax.dot_general(q_ref[...], k_ref[...], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
        m_new = jnp.maximum(m_sc[...], jnp.max(s, axis=-1, keepdims=True))
        p = jnp.exp(s - m_new)
        a = jnp.exp(m_sc[...] - m_new)
        l_sc[...] = a * l_sc[...] + jnp.sum(p, axis=-1, keepdims=True)
        acc[...] = a * acc[...] + jnp.dot(p, v_ref[...], preferred_element_type=jnp.float32)
        m_sc[...] = m_new

        @pl.when(j == pl.num_programs(1) - 1)
        def _():
            o_ref[...] = acc[...] / l_sc[...]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype), grid=(4, 2),
                          in_specs=[pl.BlockSpec((None, 64, 128), lambda h, j: (h, 0, 0)),
                                    pl.BlockSpec((None, 64, 128), lambda h, j: (h // 2, j, 0)),
                                    pl.BlockSpec((None, 64, 128), lambda h, j: (h // 2, j, 0))],
                          out_specs=pl.BlockSpec((None, 64, 128), lambda h, j: (h, 0, 0)),
                          scratch_shapes=[pltpu.VMEM((64, 1), jnp.float32), pltpu.VMEM((64, 1), jnp.float32),
                                          pltpu.VMEM((64, 128), jnp.float32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
                          interpret=interpret)(q, k, v)


# rotary embedding by halves: x1*cos - x2*sin | x2*cos + x1*sin, cos/sin tables blocked with the rows
@case("r8_rope_halves_f32_32x256", lambda r: [f32(r, 32, 256), f32(r, 32, 128), f32(r, 32, 128)])
def r8_rope(x, c, s_, interpret=False):
    def kernel(x_ref, c_ref, s_ref, o_ref):
        x1 = x_ref[:, :128]
        x2 = x_ref[:, 128:]
        o_ref[:, :128] = x1 * c_ref[...] - x2 * s_ref[...]
        o_ref[:, 128:] = x2 * c_ref[...] + x1 * s_ref[...]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                          in_specs=[pl.BlockSpec((8, 256), lambda i: (i, 0)), pl.BlockSpec((8, 128), lambda i: (i, 0)),
                                    pl.BlockSpec((8, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((8, 256), lambda i: (i, 0)), interpret=interpret)(x, c, s_)


# a 3-tap causal conv along rows: the previous block (index map max(i-1, 0)) gives the halo
@case("r8_causal_conv3_halo_f32_64x128", lambda r: [f32(r, 64, 128), f32(r, 3, 128)])
def r8_conv(x, w, interpret=False):
    def kernel(prev_ref, x_ref, w_ref, o_ref):
        i = pl.program_id(0)
        cur = x_ref[...]
        prev = jnp.where(i > 0, prev_ref[...], 0.0)
        both = jnp.concatenate([prev[-8:], cur], axis=0)  # 8 halo rows + 16 rows
        o_ref[...] = (both[8:24] * w_ref[2:3, :] + both[7:23] * w_ref[1:2, :] + both[6:22] * w_ref[0:1, :])
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                          in_specs=[pl.BlockSpec((16, 128), lambda i: (jnp.maximum(i - 1, 0), 0)),
                                    pl.BlockSpec((16, 128), lambda i: (i, 0)), pl.BlockSpec((3, 128), lambda i: (0, 0))],
                          out_specs=pl.BlockSpec((16, 128), lambda i: (i, 0)), interpret=interpret)(x, x, w)


# a histogram of int32 bin ids (one-hot compares summed), accumulated across an "arbitrary" grid into an int32 row
@case("r8_histogram_onehot_i32_64x128", lambda r: [jnp.asarray(r.integers(0, 128, (64, 128)), jnp.int32)])
def r8_hist(ids, interpret=False):
    def kernel(id_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        bins = lax.broadcasted_iota(jnp.int32, (1, 128), 1)
        cnt = jnp.zeros((1, 128), jnp.int32)
        for rr in range(8):
            row = id_ref[rr:rr + 1, :]  # (1, 128) ids
            for c in range(0, 128, 32):
                cnt = cnt + jnp.sum((row[:, c:c + 32].reshape(32, 1) == bins).astype(jnp.int32), axis=0, keepdims=True)
        o_ref[...] += cnt
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((1, 128), jnp.int32), grid=(8,),
                          in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((1, 128), lambda i: (0, 0)),
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)), interpret=interpret)(ids)


# running column max and its row index across an "arbitrary" grid (two revisited outputs, f32 and int32)
@case("r8_running_argmax_cols_f32_64x128", lambda r: [f32(r, 64, 128)])
def r8_argmax(x, interpret=False):
    def kernel(x_ref, m_ref, i_ref):
        g = pl.program_id(0)

        @pl.when(g == 0)
        def _():
            m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
            i_ref[...] = jnp.zeros_like(i_ref)
        v = x_ref[...]
        bm = jnp.max(v, axis=0, keepdims=True)
        rows = lax.broadcasted_iota(jnp.int32, v.shape, 0) + g * 8
        bi = jnp.min(jnp.where(v == bm, rows, 1 << 30), axis=0, keepdims=True)
        better = bm > m_ref[...]
        i_ref[...] = jnp.where(better, bi, i_ref[...])
        m_ref[...] = jnp.where(better, bm, m_ref[...])
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct((1, 128), jnp.float32), jax.ShapeDtypeStruct((1, 128), jnp.int32)),
                          grid=(8,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                          out_specs=(pl.BlockSpec((1, 128), lambda i: (0, 0)), pl.BlockSpec((1, 128), lambda i: (0, 0))),
                          interpret=interpret)(x)


# int8 x int8 K-loop on a 3-D grid, int32 scratch, per-channel f32 scale + bias + ReLU, bf16 out
@case("r8_int8_3d_scale_bias_relu_bf16_64x256x256", lambda r: [jnp.asarray(r.integers(-128, 128, (64, 256)), jnp.int8),
                                                               jnp.asarray(r.integers(-128, 128, (256, 256)), jnp.int8),
                                                               jnp.asarray(r.random((1, 256)) * 1e-3, jnp.float32), f32(r, 1, 256)])
def r8_int8(x, w, sc, b, interpret=False):
    def kernel(x_ref, w_ref, s_ref, b_ref, o_ref, acc):
        k = pl.program_id(2)

        @pl.when(k == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)
        acc[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.int32)

        @pl.when(k == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = jnp.maximum(acc[...].astype(jnp.float32) * s_ref[...] + b_ref[...], 0.0).astype(o_ref.dtype)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 256), jnp.bfloat16), grid=(2, 2, 2),
                          in_specs=[pl.BlockSpec((32, 128), lambda i, j, k: (i, k)), pl.BlockSpec((128, 128), lambda i, j, k: (k, j)),
                                    pl.BlockSpec((1, 128), lambda i, j, k: (0, j)), pl.BlockSpec((1, 128), lambda i, j, k: (0, j))],
                          out_specs=pl.BlockSpec((32, 128), lambda i, j, k: (i, j)),
                          scratch_shapes=[pltpu.VMEM((32, 128), jnp.int32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
                          interpret=interpret)(x, w, sc, b)


# a kernel in a fori_loop nested in a scan: block ids prefetched per (outer, inner) iteration
@case("r8_kernel_in_fori_in_scan_f32_64x128", lambda r: [jnp.asarray(r.integers(0, 4, (3, 2, 4)), jnp.int32), f32(r, 64, 128)])
def r8_nested(ids, x, interpret=False):
    def call(idx, v):
        def kernel(idx_ref, x_ref, o_ref):
            o_ref[...] = x_ref[...] * 0.5 + 1.0
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32),
                              grid_spec=pltpu.PrefetchScalarGridSpec(
                                  num_scalar_prefetch=1, grid=(4,),
                                  in_specs=[pl.BlockSpec((16, 128), lambda i, idx: (idx[i], 0))],
                                  out_specs=pl.BlockSpec((16, 128), lambda i, idx: (i, 0))), interpret=interpret)(idx, v)

    def outer(c, row):
        return lax.fori_loop(0, 2, lambda j, v: call(row[j], v), c), None
    return lax.scan(outer, x, ids)[0]


# lax.cond in a jit choosing between the same kernel on two prefetched orders, inside a scan
@case("r8_cond_kernel_in_scan_f32_64x128", lambda r: [jnp.asarray(r.integers(0, 4, (4, 4)), jnp.int32), f32(r, 64, 128)])
def r8_cond(ids, x, interpret=False):
    def call(idx, v):
        def kernel(idx_ref, x_ref, o_ref):
            o_ref[...] = x_ref[...] * 0.5 + 1.0
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32),
                              grid_spec=pltpu.PrefetchScalarGridSpec(
                                  num_scalar_prefetch=1, grid=(4,),
                                  in_specs=[pl.BlockSpec((16, 128), lambda i, idx: (idx[i], 0))],
                                  out_specs=pl.BlockSpec((16, 128), lambda i, idx: (i, 0))), interpret=interpret)(idx, v)

    def body(c, idx):
        return lax.cond(jnp.sum(idx) % 2 == 0, lambda v: call(idx, v), lambda v: call(3 - idx, v), c), None
    return lax.scan(body, x, ids)[0]


# manual triple-buffered DMA of row chunks (3 slots, a semaphore each) in a fori_loop, summed into the output
@case("r8_manual_dma_3slot_f32_96x128", lambda r: [f32(r, 96, 128)])
def r8_dma3(x, interpret=False):
    def kernel(x_hbm, o_ref, buf, sem):
        n = 6

        def copy(c):
            return pltpu.make_async_copy(x_hbm.at[pl.ds(c * 16, 16)], buf.at[c % 3], sem.at[c % 3])
        copy(0).start()
        copy(1).start()

        def body(c, acc):
            @pl.when(c + 2 < n)
            def _():
                copy(c + 2).start()
            copy(c).wait()
            return acc + buf[c % 3] * (c + 1).astype(jnp.float32)
        o_ref[...] = lax.fori_loop(0, n, body, jnp.zeros((16, 128), jnp.float32))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
                          in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                          scratch_shapes=[pltpu.VMEM((3, 16, 128), jnp.float32), pltpu.SemaphoreType.DMA((3,))],
                          interpret=interpret)(x)


# a fori_loop whose trip count is the grid index (program_id + 1 Newton-style halvings)
@case("r8_pid_trip_count_fori_f32_32x128", lambda r: [f32(r, 32, 128, scale=8.0)])
def r8_pid_trip(x, interpret=False):
    def kernel(x_ref, o_ref):
        n = pl.program_id(0) + 1
        o_ref[...] = lax.fori_loop(0, n, lambda i, v: 0.5 * (v + 2.0 / jnp.where(v == 0, 1.0, v)), x_ref[...])
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                          in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)), interpret=interpret)(x)


# lax.cond inside the kernel on a prefetched flag per block, each branch yielding a value
@case("r8_in_kernel_cond_prefetch_flag_f32_64x128", lambda r: [jnp.asarray([1, 0, 0, 1], jnp.int32), f32(r, 64, 128)])
def r8_kcond(flags, x, interpret=False):
    def kernel(f_ref, x_ref, o_ref):
        v = x_ref[...]
        o_ref[...] = lax.cond(f_ref[pl.program_id(0)] == 1, lambda u: jnp.tanh(u) * 2.0, lambda u: u * u - 1.0, v)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=1, grid=(4,),
                              in_specs=[pl.BlockSpec((16, 128), lambda i, f: (i, 0))],
                              out_specs=pl.BlockSpec((16, 128), lambda i, f: (i, 0))),
                          interpret=interpret)(flags, x)


# ---- Round 9: written fresh after round 8, not tuned on ----

# cyclic block order: the input's index map (i + 1) % n, a 4-D block with two squeezed dims
@case("r9_cyclic_4d_squeezed_f32_2x3x16x128", lambda r: [f32(r, 2, 3, 16, 128)])
def r9_cyclic(x, interpret=False):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3.0 - 1.0
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2, 3),
                          in_specs=[pl.BlockSpec((None, None, 16, 128), lambda b, h: (b, (h + 1) % 3, 0, 0))],
                          out_specs=pl.BlockSpec((None, None, 16, 128), lambda b, h: (b, h, 0, 0)),
                          interpret=interpret)(x)


# int16 and uint16 arithmetic with wraparound, bool mask output as int32
@case("r9_int16_wrap_mask_8x128", lambda r: [jnp.asarray(r.integers(-30000, 30000, (8, 128)), jnp.int16),
                                             jnp.asarray(r.integers(0, 60000, (8, 128)), jnp.uint16)])
def r9_i16(a, u, interpret=False):
    def kernel(a_ref, u_ref, o_ref, m_ref):
        a32 = a_ref[...].astype(jnp.int32)
        u32 = u_ref[...].astype(jnp.int32)
        o_ref[...] = (a32 * 3 + u32).astype(jnp.int16)
        m_ref[...] = (u32 > 30000).astype(jnp.int32) + (a32 < 0).astype(jnp.int32) * 2
    return pl.pallas_call(kernel, out_shape=(jax.ShapeDtypeStruct((8, 128), jnp.int16), jax.ShapeDtypeStruct((8, 128), jnp.int32)),
                          interpret=interpret)(a, u)


# batched einsum in a kernel ('bqd,bkd->bqk' then 'bqk,bkd->bqd'), bf16 operands, f32 accumulate
@case("r9_batched_einsum_bf16_4x32x128", lambda r: [bf(r, 4, 32, 128), bf(r, 4, 128, 128)])
def r9_bein(q, k, interpret=False):
    def kernel(q_ref, k_ref, o_ref):
        s = jnp.einsum("bqd,bkd->bqk", q_ref[...], k_ref[...], preferred_element_type=jnp.float32)
        p = jax.nn.softmax(s * 0.05, axis=-1)
        o_ref[...] = jnp.einsum("bqk,bkd->bqd", p.astype(jnp.bfloat16), k_ref[...],
                                preferred_element_type=jnp.float32).astype(o_ref.dtype)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype), interpret=interpret)(q, k)


# SMEM scratch filled by a scalar loop (a prefix count) then used as DMA row offsets
@case("r9_smem_offsets_dma_rows_f32_64x128", lambda r: [jnp.asarray([1, 0, 2, 1, 0, 2, 1, 0], jnp.int32), f32(r, 64, 128)])
def r9_smem_dma(cnt, x, interpret=False):
    def kernel(c_ref, x_hbm, o_ref, off, buf, sem):
        acc = jnp.int32(0)
        for j in range(8):
            off[j] = acc
            acc = acc + c_ref[j]

        def body(j, carry):
            cp = pltpu.make_async_copy(x_hbm.at[pl.ds(off[j] * 8, 8)], buf, sem)
            cp.start()
            cp.wait()
            o_ref[pl.ds(pl.multiple_of(j * 8, 8), 8), :] = buf[...] + j.astype(jnp.float32)
            return carry
        lax.fori_loop(0, 8, body, 0)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY)],
                          scratch_shapes=[pltpu.SMEM((8,), jnp.int32), pltpu.VMEM((8, 128), jnp.float32),
                                          pltpu.SemaphoreType.DMA(())],
                          interpret=interpret)(cnt, x)


# a kernel called in a scan carrying its output through input_output_aliases (in-place update per step)
@case("r9_alias_in_scan_f32_32x128", lambda r: [f32(r, 5, 32, 128), f32(r, 32, 128)])
def r9_alias_scan(xs, h0, interpret=False):
    def kernel(x_ref, h_ref, o_ref):
        o_ref[...] = jnp.tanh(h_ref[...] * 0.9 + x_ref[...])

    def step(h, x):
        h2 = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(h.shape, h.dtype), grid=(2,),
                            in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0)), pl.BlockSpec((16, 128), lambda i: (i, 0))],
                            out_specs=pl.BlockSpec((16, 128), lambda i: (i, 0)),
                            input_output_aliases={1: 0}, interpret=interpret)(x, h)
        return h2, jnp.sum(h2)
    h, sums = lax.scan(step, h0, xs)
    return h, sums


# bf16 softmax with jax.nn.softmax on bf16 (f32 inside), output bf16, rows over a grid
@case("r9_bf16_nn_softmax_rows_32x256", lambda r: [bf(r, 32, 256)])
def r9_bsm(x, interpret=False):
    def kernel(x_ref, o_ref):
        o_ref[...] = jax.nn.softmax(x_ref[...].astype(jnp.float32) * 2.0, axis=-1).astype(o_ref.dtype)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                          in_specs=[pl.BlockSpec((8, 256), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((8, 256), lambda i: (i, 0)), interpret=interpret)(x)


# a K-loop whose A block index comes from a prefetched permutation of K blocks (shuffled reduction order)
@case("r9_prefetch_k_perm_kloop_f32_32x512x128", lambda r: [jnp.asarray([2, 0, 3, 1], jnp.int32), f32(r, 32, 512), f32(r, 512, 128)])
def r9_kperm(perm, x, w, interpret=False):
    def kernel(p_ref, x_ref, w_ref, o_ref, acc):
        k = pl.program_id(0)

        @pl.when(k == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)
        acc[...] += jnp.dot(x_ref[...], w_ref[...], precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)

        @pl.when(k == pl.num_programs(0) - 1)
        def _():
            o_ref[...] = acc[...]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32),
                          grid_spec=pltpu.PrefetchScalarGridSpec(
                              num_scalar_prefetch=1, grid=(4,),
                              in_specs=[pl.BlockSpec((32, 128), lambda k, p: (0, p[k])),
                                        pl.BlockSpec((128, 128), lambda k, p: (p[k], 0))],
                              out_specs=pl.BlockSpec((32, 128), lambda k, p: (0, 0)),
                              scratch_shapes=[pltpu.VMEM((32, 128), jnp.float32)]),
                          interpret=interpret)(perm, x, w)


# clamp / abs / min / max / select chains on int32 with broadcasting of an SMEM scalar into a vector
@case("r9_smem_scalar_broadcast_clamp_i32_16x128", lambda r: [jnp.asarray([-7, 9], jnp.int32),
                                                           jnp.asarray(r.integers(-20, 20, (16, 128)), jnp.int32)])
def r9_clamp(lim, x, interpret=False):
    def kernel(l_ref, x_ref, o_ref):
        lo = l_ref[0]
        hi = l_ref[1]
        v = x_ref[...]
        o_ref[...] = jnp.where(jnp.abs(v) > 15, jnp.full_like(v, hi) * 2, jnp.clip(v, lo, hi)) + jnp.minimum(v, 0)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
                          interpret=interpret)(lim, x)


# "parallel" x "parallel" grid with a block-diagonal mask: off-diagonal blocks write zeros without a dot
@case("r9_block_diag_skip_bf16_256x256", lambda r: [bf(r, 256, 256), bf(r, 256, 256)])
def r9_bdiag(x, y, interpret=False):
    def kernel(x_ref, y_ref, o_ref):
        i, j = pl.program_id(0), pl.program_id(1)

        @pl.when(i == j)
        def _():
            o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)

        @pl.when(i != j)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((256, 256), jnp.bfloat16), grid=(2, 2),
                          in_specs=[pl.BlockSpec((128, 256), lambda i, j: (i, 0)), pl.BlockSpec((256, 128), lambda i, j: (0, j))],
                          out_specs=pl.BlockSpec((128, 128), lambda i, j: (i, j)),
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
                          interpret=interpret)(x, y)


# a reduction to a (1, 1) SMEM-free VMEM output over two grid axes, with a final sqrt (a Frobenius norm)
@case("r9_frobenius_two_axis_f32_64x256", lambda r: [f32(r, 64, 256)])
def r9_frob(x, interpret=False):
    def kernel(x_ref, o_ref, acc):
        i, j = pl.program_id(0), pl.program_id(1)

        @pl.when((i == 0) & (j == 0))
        def _():
            acc[...] = jnp.zeros_like(acc)
        v = x_ref[...]
        acc[...] += jnp.sum(v * v, axis=0, keepdims=True)

        @pl.when((i == pl.num_programs(0) - 1) & (j == pl.num_programs(1) - 1))
        def _():
            o_ref[...] = jnp.sqrt(jnp.sum(acc[...], axis=1, keepdims=True)) * jnp.ones((8, 128), jnp.float32)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), grid=(4, 2),
                          in_specs=[pl.BlockSpec((16, 128), lambda i, j: (i, j))],
                          out_specs=pl.BlockSpec((8, 128), lambda i, j: (0, 0)),
                          scratch_shapes=[pltpu.VMEM((1, 128), jnp.float32)],
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary", "arbitrary")),
                          interpret=interpret)(x)


def split(name):
    return "test" if hashlib.sha1(name.encode()).digest()[0] % 2 else "tune"


_dev = None


def tpu_device():
    global _dev
    if _dev is None:
        from jax.experimental import topologies
        _dev = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices[0]
    return _dev


def lower(fn, args):
    from jax.sharding import SingleDeviceSharding
    sds = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=SingleDeviceSharding(tpu_device())) for a in args]
    with jax.default_device(tpu_device()):  # kernels that ask the TPU's kind while lowering
        text = jax.jit(fn).lower(*sds).as_text(dialect="hlo")
    return pallas_decode.decode_hlo(text)


def worst_err(got, want):
    """Error in units of a tolerance: bf16 one ulp; ints exact; f32 2^-20 of the largest value."""
    w = np.asarray(want, np.float64)
    g = np.asarray(got, np.float64)
    if g.shape != w.shape:
        return float("inf")
    # NaN and infinities must match exactly (NaN where the reference has NaN); the rest by value
    special = ~np.isfinite(w) | ~np.isfinite(g)
    if np.any(special):
        same = (np.isnan(w) & np.isnan(g)) | (w == g)
        if not np.all(same[special]):
            return float("inf")
        w, g = np.where(special, 0.0, w), np.where(special, 0.0, g)
    if want.dtype == jnp.bfloat16:  # one bf16 ulp: an f32 sum in another order may round either way
        lim = np.abs(w) / 128.0 + 1e-6
    elif np.issubdtype(np.asarray(want).dtype, np.integer):
        lim = np.full(w.shape, 1e-9)
    else:
        lim = np.full(w.shape, np.max(np.abs(w)) / (1 << 20) + 1e-6)
    return float(np.max(np.abs(g - w) / lim)) if w.size else 0.0


def main(argv):
    import tpusim
    rows = []
    for name, fn, make_args in sorted(CASES, key=lambda c: (split(c[0]) != "test", c[0])):
        if argv and not any(s in name for s in argv):
            continue
        args = make_args(np.random.default_rng(zlib.crc32(name.encode())))
        line = "%-40s %-4s " % (name, split(name))
        try:
            text = lower(fn, args)
        except Exception as e:  # noqa: BLE001
            print(line + "LOWER FAILED: %s" % str(e).splitlines()[0][:150], flush=True)
            continue
        try:  # on CPU; traced with the TPU as default device (kernels that ask its kind while tracing)
            cpu_args = [jax.device_put(a, jax.devices("cpu")[0]) for a in args]
            with jax.default_device(tpu_device()):
                want = jax.tree_util.tree_leaves(jax.jit(functools.partial(fn, interpret=True))(*cpu_args))
        except Exception as e:  # noqa: BLE001
            print(line + "INTERPRET FAILED: %s" % str(e).splitlines()[0][:150], flush=True)
            continue
        inputs = [np.asarray(a, np.float32) if a.dtype == jnp.bfloat16 else np.asarray(a) for a in args]
        res = []
        for backend in ("ref", "tpu"):
            try:
                outs, _ = tpusim.run(text, inputs, backend=backend, chip="v5e")
                res.append("%s %.2g" % (backend, max(worst_err(o, w) for o, w in zip(outs, want))))
            except Exception as e:  # noqa: BLE001
                res.append("%s FAIL: %s" % (backend, str(e).splitlines()[0][-160:]))
        times = []
        for chip in ("v5e", "v5p", "v6e"):
            try:  # with the values: the kernels' scalar operands are the inputs' (not zeros)
                _, rep = tpusim.run(text, inputs, chip=chip)
                times.append("%s %.2fus" % (chip, rep.step_time_s * 1e6))
            except Exception as e:  # noqa: BLE001
                times.append("%s FAIL: %s" % (chip, str(e).splitlines()[0][-100:]))
        print(line + " | ".join(res) + " | " + " ".join(times), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
