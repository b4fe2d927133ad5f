#!/usr/bin/env python3
"""Generate the JAX conformance fixtures in tests/conformance/cases/<name>/.

Each case is a real JAX program. For each we write the unoptimized HLO (prog.hlo), XLA
CPU's optimized HLO (opt.hlo, for parser round-trips only), the inputs (in<i>.npy, one per
ENTRY parameter), JAX's outputs on CPU (out<i>.npy, one per leaf of the result) and
meta.json with a recommended float tolerance. See README.md for the format.

Usage: python3 tests/conformance/gen.py [--only NAME,...] [--tally]
Seeds are fixed: regenerating with the same JAX version gives identical files.
"""
import argparse
import json
import os
import re
import shutil
import sys
import zlib
from collections import Counter

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

# Pin the settings that change the random bit streams or the dtypes JAX emits.
jax.config.update("jax_enable_x64", False)
jax.config.update("jax_default_prng_impl", "threefry2x32")
jax.config.update("jax_threefry_partitionable", True)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CASES_DIR = os.path.join(HERE, "cases")

BF16 = jnp.bfloat16
F16 = jnp.float16

# HLO element type -> NumPy dtype used in the .npy files (bf16 is stored as float32).
NPY_DTYPE = {
    "pred": np.bool_, "s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
    "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
    "f16": np.float16, "bf16": np.float32, "f32": np.float32, "f64": np.float64,
    "c64": np.complex64, "c128": np.complex128,
}
# Tolerances (rtol, atol) by kind of computation; integers and bools compare exactly.
TOL_ELEM = (1e-6, 1e-6)     # f32 elementwise arithmetic
TOL_TRANS = (2e-6, 1e-6)    # f32 transcendentals (XLA CPU uses its own approximations)
TOL_RED = (1e-5, 1e-5)      # f32 reductions, small matmuls, norms
TOL_MM = (1e-4, 1e-5)       # f32 matmul chains, gradients
TOL_TRAIN = (2e-4, 2e-5)    # whole training steps, long loops
TOL_BF16 = (1e-2, 1e-2)     # bf16 results
TOL_F16 = (2e-3, 2e-3)      # f16 results
TOL_FFT = (2e-6, 2e-6)      # c64 FFTs (error grows with the transform's norm and log N)

CASES = []
# Outputs whose tolerance differs from their case's, by case and output index (meta.json
# "out_tol"; tests/cases.h case_out_tol): an f32 output takes at most TOL_TRAIN from its case's
# tolerance, so an f32 output that carries bf16 rounding names TOL_BF16 here.
OUT_TOL = {
    # (a @ b).astype(f32): bf16 in the HLO, XLA CPU folds the convert into an f32 dot
    "bf16_matmul_f32_acc": {1: TOL_BF16},
    # (x[0] @ w).astype(f32): the same fold
    "vector_dots": {6: TOL_BF16},
}


def case(name, desc, tol=TOL_ELEM):
    """Register a case builder: builder(r) -> (fn, args) where args is a tuple of pytrees."""
    def deco(builder):
        CASES.append((name, desc, tol, builder))
        return builder
    return deco


class Rand:
    """Deterministic input maker, seeded per case from the case name."""

    def __init__(self, name):
        self.g = np.random.default_rng(zlib.crc32(name.encode()))

    def normal(self, *shape, scale=1.0, dtype=np.float32):
        return (self.g.standard_normal(shape) * scale).astype(np.float32).astype(dtype)

    def uniform(self, *shape, lo=0.0, hi=1.0, dtype=np.float32):
        return self.g.uniform(lo, hi, shape).astype(np.float32).astype(dtype)

    def ints(self, *shape, lo=0, hi=10, dtype=np.int32):
        return self.g.integers(lo, hi, shape).astype(dtype)

    def key(self):
        return np.asarray(jax.random.key_data(jax.random.key(int(self.g.integers(0, 2**31)))))


# ----------------------------------------------------------------- shared model pieces

def mlp(params, x, act=jax.nn.relu):
    (w1, b1), (w2, b2) = params
    return act(x @ w1 + b1) @ w2 + b2


def xent(logits, labels):
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


def adam(params, grads, m, v, t, lr=1e-2, b1=0.9, b2=0.999, eps=1e-8):
    """One Adam step written out; t is the (1-based) step number, an int32 scalar."""
    tf = t.astype(jnp.float32)
    m = jax.tree_util.tree_map(lambda m_, g: b1 * m_ + (1 - b1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda v_, g: b2 * v_ + (1 - b2) * g * g, v, grads)
    mhat_scale = 1.0 / (1.0 - b1 ** tf)
    vhat_scale = 1.0 / (1.0 - b2 ** tf)
    params = jax.tree_util.tree_map(
        lambda p, m_, v_: p - lr * (m_ * mhat_scale) / (jnp.sqrt(v_ * vhat_scale) + eps),
        params, m, v)
    return params, m, v


def layer_norm(x, g, b, eps=1e-5):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g + b


def rms_norm(x, g, eps=1e-6):
    return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * g


def causal_attention(q, k, v):
    """q,k,v: [B, T, H, D]; softmax in the input dtype, causal mask with a large negative."""
    d = q.shape[-1]
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d).astype(np.float32)
    t = q.shape[1]
    mask = jnp.tril(jnp.ones((t, t), dtype=bool))
    s = jnp.where(mask, s, jnp.asarray(-1e9, s.dtype) if s.dtype == jnp.float32
                  else jnp.asarray(-3e4, s.dtype))
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v)


def mha(p, x, heads):
    b, t, dm = x.shape
    dh = dm // heads
    q = (x @ p["wq"]).reshape(b, t, heads, dh)
    k = (x @ p["wk"]).reshape(b, t, heads, dh)
    v = (x @ p["wv"]).reshape(b, t, heads, dh)
    return causal_attention(q, k, v).reshape(b, t, dm) @ p["wo"]


def transformer_block(p, x, heads):
    h = x + mha(p, layer_norm(x, p["ln1_g"], p["ln1_b"]), heads)
    f = jax.nn.gelu(layer_norm(h, p["ln2_g"], p["ln2_b"]) @ p["w1"] + p["b1"]) @ p["w2"]
    return h + f + p["b2"]


def block_params(r, dm, ff):
    s = 1.0 / np.sqrt(dm)
    return {
        "ln1_g": 1 + r.normal(dm, scale=0.1), "ln1_b": r.normal(dm, scale=0.1),
        "wq": r.normal(dm, dm, scale=s), "wk": r.normal(dm, dm, scale=s),
        "wv": r.normal(dm, dm, scale=s), "wo": r.normal(dm, dm, scale=s),
        "ln2_g": 1 + r.normal(dm, scale=0.1), "ln2_b": r.normal(dm, scale=0.1),
        "w1": r.normal(dm, ff, scale=s), "b1": r.normal(ff, scale=0.1),
        "w2": r.normal(ff, dm, scale=1.0 / np.sqrt(ff)), "b2": r.normal(dm, scale=0.1),
    }


def transformer_step(p, x, y, lr, heads):
    """One SGD step of a transformer block on an MSE loss; returns (new params, loss)."""
    def loss_fn(p_):
        return jnp.mean(jnp.square(transformer_block(p_, x, heads) - y))
    loss, g = jax.value_and_grad(loss_fn)(p)
    return jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g), loss


def mlp_params(r, sizes, dtype=np.float32):
    out = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        out.append((r.normal(a, b, scale=1 / np.sqrt(a), dtype=dtype),
                    r.normal(b, scale=0.1, dtype=dtype)))
    return out


# ----------------------------------------------------------------------------- models

@case("mlp_forward", "2-layer MLP forward (relu), batch 8, 32->64->10, f32", TOL_RED)
def _(r):
    return mlp, (mlp_params(r, [32, 64, 10]), r.normal(8, 32))


@case("mlp_train_step_adam", "MLP training step: value_and_grad of softmax cross-entropy + "
      "Adam written out; returns new params, m, v and loss", TOL_TRAIN)
def _(r):
    def step(params, m, v, t, x, y):
        loss, g = jax.value_and_grad(lambda p: xent(mlp(p, x), y))(params)
        params, m, v = adam(params, g, m, v, t)
        return params, m, v, loss
    p = mlp_params(r, [16, 32, 8])
    m = jax.tree_util.tree_map(lambda a: r.normal(*a.shape, scale=0.01), p)
    v = jax.tree_util.tree_map(lambda a: r.uniform(*a.shape, lo=1e-4, hi=1e-3), p)
    return step, (p, m, v, np.int32(3), r.normal(8, 16), r.ints(8, hi=8))


@case("softmax_cross_entropy", "mean softmax cross-entropy via log_softmax and "
      "take_along_axis, plus one-hot form", TOL_RED)
def _(r):
    def f(logits, labels):
        oh = jax.nn.one_hot(labels, logits.shape[-1])
        return xent(logits, labels), -jnp.sum(oh * jax.nn.log_softmax(logits), axis=-1)
    return f, (r.normal(16, 10, scale=3.0), r.ints(16, hi=10))


@case("cross_entropy_grad", "gradient of the mean softmax cross-entropy through take_along_axis: a "
      "scatter-add of one value per row, which tpusim's simplify turns into compare-select", TOL_RED)
def _(r):
    return jax.grad(xent), (r.normal(16, 40, scale=3.0), r.ints(16, hi=40))


@case("layer_norm", "layer norm over the last axis with scale and bias, eps 1e-5", TOL_RED)
def _(r):
    return layer_norm, (r.normal(8, 64, scale=2.0) + 1.0, 1 + r.normal(64, scale=0.1),
                        r.normal(64, scale=0.1))


@case("rms_norm", "RMS norm over the last axis with scale, eps 1e-6", TOL_RED)
def _(r):
    return rms_norm, (r.normal(8, 64, scale=2.0), 1 + r.normal(64, scale=0.1))


@case("attention_causal_fwd", "multi-head attention forward (B2 T8 H2 D16) with a causal "
      "mask, f32", TOL_RED)
def _(r):
    return causal_attention, (r.normal(2, 8, 2, 16), r.normal(2, 8, 2, 16),
                              r.normal(2, 8, 2, 16))


@case("attention_causal_bwd", "gradient of causal attention wrt q, k, v (vjp with a given "
      "cotangent)", TOL_MM)
def _(r):
    def f(q, k, v, ct):
        return jax.grad(lambda a, b, c: jnp.sum(causal_attention(a, b, c) * ct),
                        argnums=(0, 1, 2))(q, k, v)
    return f, tuple(r.normal(2, 8, 2, 16) for _ in range(4))


@case("transformer_block_train_step", "transformer block (LN, causal MHA, GELU MLP) "
      "training step: value_and_grad of MSE + SGD; returns new params and loss", TOL_TRAIN)
def _(r):
    def f(p, x, y):
        return transformer_step(p, x, y, 0.05, heads=2)
    return f, (block_params(r, 32, 64), r.normal(2, 8, 32), r.normal(2, 8, 32))


@case("embedding_lookup", "embedding table lookup table[ids] (gather)")
def _(r):
    return (lambda table, ids: table[ids]), (r.normal(50, 16), r.ints(4, 6, hi=50))


@case("embedding_grad", "gradient of 0.5*sum(table[ids]^2 * ct) wrt the table (scatter-add; "
      "ids repeat)", TOL_RED)
def _(r):
    def f(table, ids, ct):
        return jax.grad(lambda t: 0.5 * jnp.sum(jnp.square(t[ids]) * ct))(table)
    return f, (r.normal(20, 8), r.ints(4, 6, hi=20), r.normal(4, 6, 8))


@case("bf16_mlp_forward", "2-layer MLP forward in bf16 (gelu), batch 8, 32->64->10",
      TOL_BF16)
def _(r):
    f = lambda p, x: mlp(p, x, act=jax.nn.gelu)  # noqa: E731
    return f, (mlp_params(r, [32, 64, 10], dtype=BF16), r.normal(8, 32, dtype=BF16))


@case("bf16_attention_fwd", "causal multi-head attention forward in bf16 (B2 T8 H2 D16)",
      (2e-2, 2e-2))
def _(r):
    return causal_attention, tuple(r.normal(2, 8, 2, 16, dtype=BF16) for _ in range(3))


@case("bf16_matmul_f32_acc", "bf16 x bf16 matmul accumulating in f32 "
      "(preferred_element_type=f32) and a bf16-result dot; the second output is bf16 in the "
      "HLO, but XLA CPU folds convert(dot) into an f32 dot, so JAX's value is more precise "
      "than the HLO's bf16 rounding: bf16 tolerance", TOL_BF16)
def _(r):
    def f(a, b):
        acc = lax.dot_general(a, b, (((1,), (0,)), ((), ())),
                              preferred_element_type=jnp.float32)
        return acc, (a @ b).astype(jnp.float32)
    return f, (r.normal(16, 64, dtype=BF16), r.normal(64, 24, dtype=BF16))


@case("vector_dots", "dots with a vector operand (a decode step with one token, bf16 and f32; "
      "matrix times vector; attention scores and context for one query over a KV cache; a dot "
      "product; two contracting dimensions, ascending and descending): tpusim's compiler runs "
      "them as multiply + reduce on the vector unit, as the XLA TPU compiler does", TOL_BF16)
def _(r):
    def f(x, w, wf, xf, q, k, v, a3, b3):
        p = jax.nn.softmax(jnp.einsum("bhqd,bhkd->bhqk", q, k).astype(jnp.float32), axis=-1)
        ctx = jnp.einsum("bhqk,bhkd->bhqd", p.astype(BF16), v)
        return (x @ w, wf @ xf, jnp.dot(xf, xf), ctx,
                jnp.einsum("ij,kij->k", a3, b3), jnp.einsum("ji,kij->k", a3.T, b3),
                (x[0] @ w).astype(jnp.float32))
    return f, (r.normal(1, 64, dtype=BF16), r.normal(64, 48, dtype=BF16), r.normal(40, 96),
               r.normal(96), r.normal(2, 3, 1, 16, dtype=BF16), r.normal(2, 3, 24, 16, dtype=BF16),
               r.normal(2, 3, 24, 16, dtype=BF16), r.normal(6, 5), r.normal(7, 6, 5))


@case("bf16_conv2d", "bf16 2-D convolution NHWC/HWIO, stride 1, SAME padding", TOL_BF16)
def _(r):
    def f(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return f, (r.normal(2, 8, 8, 4, dtype=BF16), r.normal(3, 3, 4, 8, scale=0.3, dtype=BF16))


@case("conv2d_relayout", "bf16 conv + ReLU over a batch of 16: the TPU backend writes the conv's own "
      "layout (batch in the sublanes) and relays it out by a transpose kernel (compile/passes/relayout.c)", TOL_BF16)
def _(r):
    def f(x, w):
        return jax.nn.relu(lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                    dimension_numbers=("NHWC", "HWIO", "NHWC")))
    return f, (r.normal(16, 8, 8, 32, dtype=BF16), r.normal(3, 3, 32, 64, scale=0.2, dtype=BF16))


# ------------------------------------------------------------------------ control flow

@case("scan_rnn", "lax.scan of a tanh RNN over 6 steps; returns final state and all "
      "states", TOL_MM)
def _(r):
    def f(h0, xs, w, u, b):
        def cell(h, x):
            h = jnp.tanh(x @ w + h @ u + b)
            return h, h
        return lax.scan(cell, h0, xs)
    return f, (r.normal(4, 16), r.normal(6, 4, 8), r.normal(8, 16, scale=0.3),
               r.normal(16, 16, scale=0.25), r.normal(16, scale=0.1))


@case("scan_reverse_cumprod", "reverse lax.scan computing a running product and a "
      "running max", TOL_RED)
def _(r):
    def f(xs):
        def body(c, x):
            p, m = c
            return (p * x, jnp.maximum(m, x)), p * x
        return lax.scan(body, (jnp.ones(5), jnp.full(5, -jnp.inf)), xs, reverse=True)
    return f, (r.uniform(7, 5, lo=0.5, hi=1.5),)


@case("fori_loop", "lax.fori_loop: 10 Newton iterations for sqrt plus an int accumulator",
      TOL_RED)
def _(r):
    def f(a):
        def body(i, c):
            x, acc = c
            return 0.5 * (x + a / x), acc + i * i
        return lax.fori_loop(0, 10, body, (jnp.ones_like(a), jnp.int32(0)))
    return f, (r.uniform(12, lo=0.1, hi=50.0),)


@case("while_loop", "lax.while_loop with a data-dependent trip count (halve until the "
      "norm < 1; count the steps)", TOL_RED)
def _(r):
    def f(x):
        return lax.while_loop(lambda c: jnp.sum(c[0] * c[0]) >= 1.0,
                              lambda c: (c[0] * 0.5, c[1] + 1), (x, jnp.int32(0)))
    return f, (r.normal(10, scale=20.0),)


@case("cond", "lax.cond on a pred input and on a data-dependent predicate", TOL_TRANS)
def _(r):
    def f(p, x):
        a = lax.cond(p, lambda v: jnp.sin(v), lambda v: jnp.cos(v) * 2, x)
        b = lax.cond(jnp.sum(x) > 100.0, lambda v: v + 1, lambda v: v * v, x)
        return a, b
    return f, (np.bool_(False), r.normal(3, 4))


@case("switch", "lax.switch with 3 branches; one index in range, one out of range "
      "(JAX clamps it to the last branch)", TOL_TRANS)
def _(r):
    branches = [lambda v: v + 1.0, lambda v: jnp.exp(v), lambda v: -v * 3.0]

    def f(i, j, x):
        return lax.switch(i, branches, x), lax.switch(j, branches, x)
    return f, (np.int32(1), np.int32(7), r.normal(3, 4))


@case("optimization_barrier", "lax.optimization_barrier around a tuple of intermediates")
def _(r):
    def f(x, y):
        a, b = lax.optimization_barrier((x * 2.0, y + 1.0))
        return a - b
    return f, (r.normal(4, 4), r.normal(4, 4))


# ---------------------------------------------------------------------------- random

@case("random_normal", "jax.random.normal with threefry2x32, key passed as uint32[2]",
      TOL_TRANS)
def _(r):
    return (lambda k: jax.random.normal(k, (4, 8))), (r.key(),)


@case("random_uniform", "jax.random.uniform in [-2, 3) with threefry2x32 (split key)",
      TOL_ELEM)
def _(r):
    def f(k):
        k1, k2 = jax.random.split(k)
        return jax.random.uniform(k1, (5, 7), minval=-2.0, maxval=3.0), jax.random.uniform(k2, (3,))
    return f, (r.key(),)


@case("random_bernoulli", "jax.random.bernoulli p=0.3 (bool output)")
def _(r):
    return (lambda k: jax.random.bernoulli(k, 0.3, (6, 8))), (r.key(),)


@case("random_randint", "jax.random.randint in [-5, 100) (int32 output) and a "
      "permutation")
def _(r):
    def f(k):
        k1, k2 = jax.random.split(k)
        return jax.random.randint(k1, (6, 8), -5, 100), jax.random.permutation(k2, 10)
    return f, (r.key(),)


@case("rng_bit_generator", "lax.rng_bit_generator with explicit THREE_FRY and PHILOX "
      "algorithms (the default algorithm is implementation-defined); state u32[4] is "
      "bitcast to u64[2] in HLO")
def _(r):
    def f(s):
        s1, a = lax.rng_bit_generator(s, (4, 8), dtype=jnp.uint32,
                                      algorithm=lax.RandomAlgorithm.RNG_THREE_FRY)
        s2, b = lax.rng_bit_generator(s, (3, 5), dtype=jnp.uint32,
                                      algorithm=lax.RandomAlgorithm.RNG_PHILOX)
        return s1, a, s2, b
    return f, (r.ints(4, lo=0, hi=2**32, dtype=np.uint32),)


# ------------------------------------------------------------------- reductions, sort

@case("argmax_argmin", "argmax (axis 1) and argmin (axis 0) with ties; variadic reduce "
      "of (value, index)")
def _(r):
    x = r.ints(6, 9, lo=-4, hi=5).astype(np.float32)
    return (lambda x: (jnp.argmax(x, axis=1), jnp.argmin(x, axis=0))), (x,)


@case("variadic_reduce", "explicit lax.reduce over two operands (sum and max at once) and "
      "a 3-operand reduce", TOL_RED)
def _(r):
    def f(x, y, n):
        s, m = lax.reduce((x, y), (np.float32(0), np.float32(-np.inf)),
                          lambda a, b: (a[0] + b[0], jnp.maximum(a[1], b[1])), (1,))
        c = lax.reduce((x, y, n), (np.float32(0), np.float32(0), np.int32(0)),
                       lambda a, b: (a[0] + b[0], a[1] * b[1], a[2] + b[2]), (0,))
        return s, m, c
    return f, (r.normal(4, 6), r.uniform(4, 6, lo=0.5, hi=1.5), r.ints(4, 6, hi=100))


@case("reductions", "sum, prod, max, min, mean, var, any, all over various axes; int sum "
      "wraps around", TOL_RED)
def _(r):
    def f(x, n, b):
        return (jnp.sum(x, axis=(0, 2)), jnp.prod(x[0], axis=1), jnp.max(x, axis=1),
                jnp.min(x), jnp.mean(x, axis=-1), jnp.var(x, axis=0), jnp.sum(n),
                jnp.max(n, axis=0), jnp.any(b, axis=1), jnp.all(b, axis=0))
    n = r.ints(8, 4, lo=2**28, hi=2**30)
    return f, (r.uniform(3, 4, 5, lo=0.5, hi=1.5), n, r.ints(5, 3, hi=2).astype(bool))


@case("top_k", "lax.top_k k=3 on rows (JAX emits the HLO `topk` op, not a sort)")
def _(r):
    return (lambda x: lax.top_k(x, 3)), (r.normal(5, 10),)


@case("top_k_ties", "lax.top_k k=4 over the last axis of a [3,4,10] array of small integers "
      "(many ties: the lower index comes first), with -inf; XLA CPU's opt.hlo calls its TopK")
def _(r):
    x = r.ints(3, 4, 10, lo=0, hi=4).astype(np.float32)
    x[0, 0, :] = 1.0
    x[1, 2, 3] = -np.inf
    return (lambda x: lax.top_k(x, 4)), (x,)


@case("sort", "jnp.sort on rows and columns, with NaN, -0.0 and inf in the input")
def _(r):
    x = r.normal(4, 8)
    x[0, 1], x[1, 2], x[2, 3], x[3, 0], x[0, 5] = np.nan, -0.0, np.inf, -np.inf, 0.0
    return (lambda x: (jnp.sort(x, axis=1), jnp.sort(x, axis=0))), (x,)


@case("argsort", "jnp.argsort (stable, multi-operand sort with an iota) and a 2-key "
      "lax.sort")
def _(r):
    def f(x, k2):
        a = jnp.argsort(x, axis=-1)
        s = lax.sort((x[0], k2, jnp.arange(8, dtype=jnp.int32)), num_keys=2)
        return (a,) + tuple(s)
    x = r.ints(3, 8, lo=0, hi=4).astype(np.float32)
    return f, (x, r.ints(8, hi=3))


@case("cumulative", "cumsum (both axes), cumprod, cummax, cummin and a reverse cumsum "
      "(lower to reduce-window)", TOL_RED)
def _(r):
    def f(x, n):
        return (jnp.cumsum(x, axis=0), jnp.cumsum(x, axis=1), jnp.cumprod(x, axis=1),
                lax.cummax(x, axis=0), lax.cummin(x, axis=1),
                lax.cumsum(x, axis=1, reverse=True), jnp.cumsum(n))
    return f, (r.uniform(5, 6, lo=0.5, hi=1.5), r.ints(10, lo=-5, hi=5))


# --------------------------------------------------------------------- convolutions

def conv_nhwc(x, w, stride=(2, 1), pad=((1, 2), (0, 1)), rdil=(2, 1), groups=1):
    return lax.conv_general_dilated(x, w, stride, pad, rhs_dilation=rdil,
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                    feature_group_count=groups)


@case("conv2d_nhwc", "2-D convolution NHWC/HWIO with stride (2,1), padding ((1,2),(0,1)) "
      "and kernel dilation (2,1)", TOL_RED)
def _(r):
    return conv_nhwc, (r.normal(2, 9, 9, 3), r.normal(3, 3, 3, 4, scale=0.3))


@case("conv2d_grad", "gradient of the strided, padded, dilated conv wrt input and kernel",
      TOL_MM)
def _(r):
    def f(x, w, ct):
        return jax.grad(lambda a, b: jnp.sum(conv_nhwc(a, b) * ct), argnums=(0, 1))(x, w)
    x, w = r.normal(2, 9, 9, 3), r.normal(3, 3, 3, 4, scale=0.3)
    ct = r.normal(*jax.eval_shape(conv_nhwc, x, w).shape)
    return f, (x, w, ct)


@case("conv_depthwise_grouped", "depthwise conv (feature_group_count=C) and a grouped conv "
      "(2 groups)", TOL_RED)
def _(r):
    def f(x, wd, wg):
        d = conv_nhwc(x, wd, (1, 1), "SAME", (1, 1), groups=4)
        g = conv_nhwc(x, wg, (1, 1), "VALID", (1, 1), groups=2)
        return d, g
    return f, (r.normal(2, 7, 7, 4), r.normal(3, 3, 1, 4, scale=0.3),
               r.normal(3, 3, 2, 6, scale=0.3))


@case("conv1d_transpose", "1-D convolution NWC with lhs dilation (a transposed conv) via "
      "lax.conv_transpose", TOL_RED)
def _(r):
    def f(x, w):
        return lax.conv_transpose(x, w, (2,), "SAME", dimension_numbers=("NWC", "WIO", "NWC"))
    return f, (r.normal(2, 10, 3), r.normal(4, 3, 5, scale=0.3))


def maxpool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")


@case("maxpool", "max pooling 3x3 stride 2 SAME (reduce-window max, -inf init)")
def _(r):
    return maxpool, (r.normal(2, 7, 7, 3),)


@case("maxpool_grad", "gradient of max pooling (select-and-scatter)", TOL_ELEM)
def _(r):
    def f(x, ct):
        return jax.grad(lambda a: jnp.sum(maxpool(a) * ct))(x)
    x = r.normal(2, 7, 7, 3)
    return f, (x, r.normal(*jax.eval_shape(maxpool, x).shape))


@case("avgpool", "average pooling 2x2 stride 2 VALID (reduce-window add / 4) and a padded "
      "window with base dilation", TOL_RED)
def _(r):
    def f(x):
        a = lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4.0
        b = lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 1, 1, 1),
                              ((0, 0), (1, 1), (0, 1), (0, 0)), base_dilation=(1, 2, 1, 1))
        return a, b
    return f, (r.normal(2, 8, 8, 3),)


# ------------------------------------------------------------------------ elementwise

@case("elementwise_unary_math", "exp, log, log1p, expm1, tanh, logistic, erf, sin, cos, "
      "tan, sqrt, rsqrt, cbrt (JAX expands logistic to 1/(1+exp(-x)): no `logistic` op)",
      TOL_TRANS)
def _(r):
    def f(x, p):
        return (jnp.exp(x), jnp.log(p), jnp.log1p(p), jnp.expm1(x), jnp.tanh(x),
                jax.nn.sigmoid(x), lax.erf(x), jnp.sin(x), jnp.cos(x), jnp.tan(x * 0.3),
                jnp.sqrt(p), lax.rsqrt(p), jnp.cbrt(x))
    return f, (r.normal(64, scale=3.0), r.uniform(64, lo=1e-3, hi=20.0))


@case("elementwise_rounding", "round (half to even and half away from zero), floor, ceil, "
      "sign, abs, negate on values with exact halves")
def _(r):
    def f(x):
        return (jnp.round(x), lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO), jnp.floor(x),
                jnp.ceil(x), jnp.sign(x), jnp.abs(x), -x)
    x = np.concatenate([np.arange(-3, 3.5, 0.5, dtype=np.float32),
                        np.array([-0.0, 0.0, np.inf, -np.inf, np.nan], np.float32),
                        r.normal(16, scale=5.0)])
    return f, (x,)


@case("elementwise_binary_math", "atan2, pow, remainder (jnp and lax sign conventions), "
      "clamp, maximum, minimum, divide, integer_pow", TOL_TRANS)
def _(r):
    def f(x, y, p):
        return (jnp.arctan2(x, y), jnp.power(p, y), jnp.remainder(x * 5, y),
                lax.rem(x * 5, y), jnp.clip(x, -0.5, 0.7), lax.clamp(-1.0, y, 1.0),
                jnp.maximum(x, y), jnp.minimum(x, y), x / y, x ** 3, x ** -2)
    y = r.normal(48, scale=2.0)
    y[np.abs(y) < 0.1] = 0.5
    return f, (r.normal(48, scale=2.0), y, r.uniform(48, lo=0.1, hi=4.0))


@case("activations", "jax.nn.gelu (tanh approx and exact erf), softmax, log_softmax, "
      "logsumexp, relu, silu, softplus", TOL_TRANS)
def _(r):
    def f(x):
        return (jax.nn.gelu(x), jax.nn.gelu(x, approximate=False), jax.nn.softmax(x, axis=-1),
                jax.nn.log_softmax(x, axis=0), jax.nn.logsumexp(x, axis=-1), jax.nn.relu(x),
                jax.nn.silu(x), jax.nn.softplus(x))
    return f, (r.normal(6, 10, scale=3.0),)


@case("integer_ops", "shifts (amounts up to 33), bitwise and/or/xor/not, popcount, clz, "
      "int32 and uint32")
def _(r):
    def f(a, s, u):
        return (lax.shift_left(a, s), lax.shift_right_arithmetic(a, s),
                lax.shift_right_logical(a, s), a & s, a | s, a ^ s, ~a,
                lax.population_count(a), lax.clz(a), u >> (s.astype(jnp.uint32) & 31),
                ~u, u * u + u, lax.population_count(u))
    a = r.ints(24, lo=-2**31, hi=2**31)
    a[:3] = [-1, 0, -2**31]
    s = np.concatenate([np.array([0, 1, 31, 32, 33, -1], np.int32), r.ints(18, hi=31)])
    return f, (a, s, r.ints(24, lo=0, hi=2**32, dtype=np.uint32))


@case("integer_division", "integer division and remainder with negative operands: lax.div/"
      "rem truncate, jnp // and % floor; divide by zero and INT_MIN/-1 (XLA-defined)")
def _(r):
    def f(a, b, u, v):
        return lax.div(a, b), lax.rem(a, b), a // b, a % b, u // v, u % v, jnp.abs(a)
    a = np.array([7, -7, 7, -7, 0, -2**31, -2**31, 5, -5, 13], np.int32)
    b = np.array([2, 2, -2, -2, 3, -1, 1, 0, 0, -4], np.int32)
    u = np.array([7, 4294967295, 0, 9, 100, 3, 1, 5, 2, 8], np.uint32)
    v = np.array([2, 2, 5, 0, 7, 3, 4, 6, 1, 3], np.uint32)
    return f, (a, b, u, v)


@case("small_int_wraparound", "s8/u8 add, multiply and subtract with wraparound; s32->s8 "
      "and s32->u8 converts truncate")
def _(r):
    def f(a, b, c, d, n):
        return (a + b, a * b, a - b, c + d, c * d, c - d, n.astype(jnp.int8),
                n.astype(jnp.uint8), (a.astype(jnp.int32) * 3))
    return f, (r.ints(16, lo=-128, hi=128, dtype=np.int8), r.ints(16, lo=-128, hi=128, dtype=np.int8),
               r.ints(16, lo=0, hi=256, dtype=np.uint8), r.ints(16, lo=0, hi=256, dtype=np.uint8),
               r.ints(16, lo=-1000, hi=1000))


@case("compare_select", "all comparison directions on f32 with NaN and on s32, select, "
      "jnp.where, logical and/or/xor/not on pred")
def _(r):
    def f(x, y, n, m):
        c = (x == y, x != y, x < y, x <= y, x > y, x >= y, n < m, n >= m)
        lg = (c[2] & c[6], c[2] | c[6], c[2] ^ c[6], ~c[2])
        return c + lg + (jnp.where(x > y, x, y), lax.select(n > m, n, m))
    x, y = r.ints(16, lo=-2, hi=3).astype(np.float32), r.ints(16, lo=-2, hi=3).astype(np.float32)
    x[0], y[1], x[2], y[2] = np.nan, np.nan, np.inf, np.inf
    return f, (x, y, r.ints(16, lo=-3, hi=3), r.ints(16, lo=-3, hi=3))


@case("where_isfinite", "jnp.where / isfinite / isnan / isinf / nan_to_num with inf and "
      "nan inputs")
def _(r):
    def f(x):
        return (jnp.isfinite(x), jnp.isnan(x), jnp.isinf(x), jnp.where(jnp.isfinite(x), x, 0.0),
                jnp.nan_to_num(x, nan=-1.0, posinf=1e30, neginf=-1e30), x * 0.0, x - x)
    x = r.normal(12)
    x[[1, 4, 7, 9]] = [np.inf, -np.inf, np.nan, -np.nan]
    return f, (x,)


@case("f16_arithmetic", "f16 arithmetic: fma-like chain, exp, division, reduction (f16 "
      "result) and a small f16 dot", TOL_F16)
def _(r):
    def f(a, b, c):
        return a * b + c, jnp.exp(a), a / (jnp.abs(b) + 1), jnp.sum(a, axis=1), a @ b.T
    return f, (r.normal(6, 8, dtype=F16), r.normal(6, 8, dtype=F16), r.normal(6, 8, dtype=F16))


@case("bitcast_convert", "lax.bitcast_convert_type f32<->s32/u32, f32->u8[...,4] (byte "
      "split, little-endian element order) and u16 pairs -> f32")
def _(r):
    def f(x, n, h):
        return (lax.bitcast_convert_type(x, jnp.int32), lax.bitcast_convert_type(x, jnp.uint32),
                lax.bitcast_convert_type(n, jnp.float32), lax.bitcast_convert_type(x, jnp.uint8),
                lax.bitcast_convert_type(h, jnp.float32))
    x = r.normal(8)
    x[:3] = [np.nan, -0.0, np.inf]
    n = np.array([0x3F800000, 0x7F800001, -1, 1, 0x00000001, -2**31, 0x7F7FFFFF, 0x40490FDB],
                 np.int32)
    return f, (x, n, r.ints(4, 2, lo=0, hi=2**14, dtype=np.uint16))


@case("convert_types", "convert f32->s32/u32/s8/u8 with out-of-range, inf and NaN (XLA CPU "
      "saturates, NaN->0), f32->bf16 (round to nearest even), s32->f32, pred->f32, "
      "reduce_precision")
def _(r):
    def f(x, n, b):
        return (x.astype(jnp.int32), x.astype(jnp.uint32), x.astype(jnp.int8),
                x.astype(jnp.uint8), x.astype(BF16), x.astype(BF16).astype(jnp.int32),
                n.astype(jnp.float32), n.astype(BF16), b.astype(jnp.float32),
                b.astype(jnp.int32), x.astype(jnp.float16), (x != 0).astype(jnp.int8),
                lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10))
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.5, -2.5, -0.7, 255.9, 256.5, -1.0,
                  1.00390625, 1.01171875, 1.0 + 2**-9, 70000.0, 1e-30, -0.0, 3.4e38],
                 np.float32)
    n = np.array([0, 1, -1, 16777217, 2**31 - 1, -2**31, 257, 12345678], np.int32)
    return f, (x, n, np.array([True, False, True], bool))


@case("convert_float8", "f32 -> f8e4m3fn / f8e5m2 and back (round to nearest even, "
      "subnormals, ties, e4m3fn overflow to NaN, e5m2 to inf), f8 -> bf16, and an f8e4m3fn "
      "matmul accumulating in f32")
def _(r):
    F8A, F8B = jnp.float8_e4m3fn, jnp.float8_e5m2

    def f(x, a, b):
        return (x.astype(F8A).astype(jnp.float32), x.astype(F8B).astype(jnp.float32),
                x.astype(F8A).astype(BF16).astype(jnp.float32),
                jnp.dot(a.astype(F8A), b.astype(F8A), preferred_element_type=jnp.float32))
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 1.0625, 1.1875, 448.0, 460.0, 464.0,
                  465.0, 500.0, -57344.0, 61439.0, 61440.0, 1e5, 2.0**-9, 2.0**-10, 3 * 2.0**-11,
                  2.0**-16, 2.0**-17, 0.3, -0.3, 3.14159, 1e-30], np.float32)
    return f, (x, r.normal(8, 40, scale=4.0), r.normal(40, 16, scale=4.0))


@case("convert_int4", "f32 -> s4 / u4 and back (truncate toward zero, saturate at -8..7 / "
      "0..15, NaN -> 0), s32 -> s4 / u4 (wraps to 4 bits), s4 and u4 adds that wrap, and an "
      "int4-weight matmul (s4 weights converted to bf16, f32 accumulation)")
def _(r):
    S4, U4 = jnp.int4, jnp.uint4

    def f(x, i, a, w):
        wq = jnp.round(w * 2.0).astype(S4)
        return (x.astype(S4).astype(jnp.float32), x.astype(U4).astype(jnp.float32),
                i.astype(S4).astype(jnp.int32), i.astype(U4).astype(jnp.int32),
                (i.astype(S4) + S4(7)).astype(jnp.int32), (i.astype(U4) * U4(3)).astype(jnp.int32),
                jnp.dot(a.astype(BF16), wq.astype(BF16), preferred_element_type=jnp.float32) * 0.5)
    x = np.array([np.nan, -100.0, -9.0, -8.7, -8.0, -1.5, -0.5, 0.5, 7.0, 7.9, 8.0, 15.5, 16.0,
                  20.0, np.inf, -np.inf], np.float32)
    i = np.array([-9, -8, -1, 0, 7, 8, 15, 16, 17, 100, -100, 2**31 - 1], np.int32)
    return f, (x, i, r.normal(8, 64), r.normal(64, 16, scale=3.0))


# ------------------------------------------------------------------- data movement

@case("pad", "lax.pad with negative low/high and interior padding, and jnp.pad "
      "(constant, edge, reflect)")
def _(r):
    def f(x):
        a = lax.pad(x, np.float32(-1), ((-1, 2, 1), (2, -1, 0)))
        return (a, jnp.pad(x, ((1, 0), (0, 2)), constant_values=7.0),
                jnp.pad(x, 1, mode="edge"), jnp.pad(x, ((2, 1), (0, 0)), mode="reflect"))
    return f, (r.normal(4, 5),)


@case("reverse", "lax.rev over dims (0, 2) and jnp.flip of one axis")
def _(r):
    return (lambda x: (lax.rev(x, (0, 2)), jnp.flip(x, 1))), (r.normal(2, 3, 4),)


@case("concatenate", "concatenate along each axis, including three operands")
def _(r):
    def f(a, b, c):
        return jnp.concatenate([a, b], axis=0), jnp.concatenate([a, c, a], axis=1)
    return f, (r.normal(2, 3), r.normal(4, 3), r.normal(2, 5))


@case("transpose_reshape", "transpose (rank 3 and 4 permutations), reshape, broadcast, "
      "iota, strided slice, squeeze/expand_dims")
def _(r):
    def f(x, y):
        return (jnp.transpose(x, (2, 0, 1)), jnp.transpose(y, (3, 1, 0, 2)), x.reshape(6, 4),
                jnp.broadcast_to(x[:, :1, :], (2, 3, 4)) + jnp.arange(4, dtype=jnp.float32),
                x[:, ::2, 1::2], jnp.expand_dims(x[0], 1).squeeze(1),
                lax.broadcasted_iota(jnp.int32, (3, 4), 1))
    return f, (r.normal(2, 3, 4), r.normal(2, 3, 4, 5))


@case("dynamic_slice", "lax.dynamic_slice with in-range and out-of-range starts (XLA "
      "clamps the start so the slice fits) and negative starts")
def _(r):
    def f(x, i, j, k):
        return (lax.dynamic_slice(x, (i, j), (3, 4)), lax.dynamic_slice(x, (k, i), (2, 2)),
                lax.dynamic_slice_in_dim(x, j, 5, axis=1))
    return f, (r.normal(6, 8), np.int32(2), np.int32(7), np.int32(-3))


@case("dynamic_update_slice", "lax.dynamic_update_slice with in-range, out-of-range and "
      "negative starts (clamped)")
def _(r):
    def f(x, u, i, j):
        return (lax.dynamic_update_slice(x, u, (i, np.int32(1))),
                lax.dynamic_update_slice(x, u, (j, j)), lax.dynamic_update_slice(x, u, (-j, i)))
    return f, (r.normal(6, 8), r.normal(2, 3), np.int32(1), np.int32(9))


@case("take_along_axis", "jnp.take_along_axis on both axes (gather), jnp.take with clip and "
      "fill modes (out-of-range indices)")
def _(r):
    def f(x, i0, i1, t):
        return (jnp.take_along_axis(x, i0, axis=0), jnp.take_along_axis(x, i1, axis=1),
                jnp.take(x, t, axis=1, mode="clip"), jnp.take(x, t, axis=0, mode="fill"))
    return f, (r.normal(5, 6), r.ints(3, 6, hi=5), r.ints(5, 4, hi=6),
               np.array([0, 5, 7, -1, 2], np.int32))


@case("scatter", "x.at[idx].set / .add / .max / .min / .mul with duplicate indices "
      "(set uses unique indices) and a 2-D index scatter")
def _(r):
    def f(x, iu, idup, v, m):
        return (x.at[iu].set(v), x.at[idup].add(v), x.at[idup].max(v), x.at[idup].min(v),
                x.at[idup].multiply(v), m.at[iu[:2], idup[:2]].add(1.0))
    return f, (r.normal(8, 3), np.array([5, 0, 3, 7], np.int32), np.array([2, 2, 6, 2], np.int32),
               r.normal(4, 3), r.normal(8, 6))


@case("einsum_batch", "jnp.einsum with batch dims (bij,bjk->bik; bhqd,bhkd->bhqk; "
      "contraction over two dims) and dot precision HIGHEST/DEFAULT", TOL_RED)
def _(r):
    def f(a, b, q, k):
        return (jnp.einsum("bij,bjk->bik", a, b), jnp.einsum("bhqd,bhkd->bhqk", q, k),
                jnp.einsum("bij,bij->j", a, a), jnp.dot(a[0], b[0], precision="highest"),
                jnp.matmul(a[1, 0], b[1]))
    return f, (r.normal(3, 4, 5), r.normal(3, 5, 6), r.normal(2, 2, 4, 8), r.normal(2, 2, 6, 8))


@case("mixed_tuple_outputs", "a nested tuple/dict result of f32, int32, uint32, bool and "
      "bf16 leaves (flattened depth-first)", TOL_RED)
def _(r):
    def f(x, n):
        return {"a": (jnp.sum(x), n * 2), "b": [(x > 0), n.astype(jnp.uint32) + 7],
                "c": x.astype(BF16) * 2}
    return f, (r.normal(3, 3), r.ints(5, lo=-5, hi=5))


# ------------------------------------------------------------------------- complex

def cnormal(r, *shape):
    return (r.normal(*shape) + 1j * r.normal(*shape)).astype(np.complex64)


@case("fft_c2c", "jnp.fft.fft and ifft (c64) over the last axis, lengths 8, 6, 7 and 12 "
      "(powers of two, mixed radix, prime), and fft along axis 0", TOL_FFT)
def _(r):
    def f(a, b, c, d):
        return (jnp.fft.fft(a), jnp.fft.ifft(a), jnp.fft.fft(b), jnp.fft.ifft(c),
                jnp.fft.fft(d), jnp.fft.fft(d, axis=0))
    return f, (cnormal(r, 3, 8), cnormal(r, 2, 6), cnormal(r, 4, 7), cnormal(r, 12, 12))


@case("fft_real", "jnp.fft.rfft / irfft (f32 <-> c64) for even and odd lengths (8, 7, 12), "
      "irfft with n= given, and an rfft->irfft round trip", TOL_FFT)
def _(r):
    def f(x, y, h, z):
        return (jnp.fft.rfft(x), jnp.fft.rfft(y), jnp.fft.irfft(h), jnp.fft.irfft(h, n=9),
                jnp.fft.irfft(jnp.fft.rfft(z)))
    return f, (r.normal(2, 8), r.normal(3, 7), cnormal(r, 2, 5), r.normal(4, 12))


@case("fft_nd", "jnp.fft.fft2, ifft2, fftn over 3 axes, rfft2 and irfft2 (c64/f32), "
      "shapes with odd lengths", TOL_FFT)
def _(r):
    def f(a, b, x, h):
        return (jnp.fft.fft2(a), jnp.fft.ifft2(a), jnp.fft.fftn(b), jnp.fft.rfft2(x),
                jnp.fft.irfft2(h, s=(6, 6)))
    return f, (cnormal(r, 2, 6, 5), cnormal(r, 3, 4, 5), r.normal(5, 6), cnormal(r, 6, 4))


@case("complex_elementwise", "z = x*exp(1j*theta); abs, angle (via real/imag/atan2), conj, "
      "z*w, z/w, z+w, z-w, -z, exp, log, sqrt, sign of c64 values; complex(re, im); "
      "== and != on c64", TOL_TRANS)
def _(r):
    def f(x, th, w):
        z = x * jnp.exp(1j * th)
        return (jnp.abs(z), jnp.angle(z), jnp.conj(z), z * w, z / w, z + w, z - w, -z,
                jnp.exp(z * 0.5), jnp.log(w), jnp.sqrt(w), jnp.sign(w),
                lax.complex(x, th), z == w, z != z)
    return f, (r.uniform(3, 5, lo=0.5, hi=2.0), r.uniform(3, 5, lo=-3.0, hi=3.0), cnormal(r, 3, 5))


@case("complex_reduce_dot", "sum and mean of c64 (reduce with a complex add), a c64 matmul "
      "(dot), jnp.vdot, and a real-imag split of the result", TOL_RED)
def _(r):
    def f(a, b):
        return (jnp.sum(a, axis=1), jnp.mean(a), a @ b, jnp.vdot(a[0], a[1]),
                jnp.real(a @ b) - jnp.imag(a @ b))
    return f, (cnormal(r, 4, 6), cnormal(r, 6, 3))


# ------------------------------------------------------------------------- driver

SHAPE_RE = re.compile(r"\b(pred|f8e\w+|[sufc]\d+|bf16)\[([0-9,]*)\]")


def hlo_signature(hlo):
    """(param shapes, result leaf shapes) from the entry_computation_layout line."""
    m = re.search(r"entry_computation_layout=\{\((.*)\)->(.*)\}", hlo.splitlines()[0])
    if not m:
        raise RuntimeError("no entry_computation_layout")

    def shapes(s):
        return [(t, tuple(int(d) for d in dims.split(",") if d))
                for t, dims in SHAPE_RE.findall(s)]
    return shapes(m.group(1)), shapes(m.group(2))


def to_npy(a, hlo_type):
    a = np.asarray(a)
    if a.dtype == jnp.bfloat16:
        a = a.astype(np.float32)  # exact: every bf16 value is an f32 value
    want = NPY_DTYPE[hlo_type]
    if a.dtype != want:
        raise RuntimeError(f"dtype {a.dtype} does not match HLO {hlo_type}")
    return np.array(a, order="C", copy=True)  # keeps 0-d arrays 0-d


def check_leaves(kind, leaves, sig):
    if len(leaves) != len(sig):
        raise RuntimeError(f"{kind}: {len(leaves)} leaves vs {len(sig)} in HLO")
    for i, (a, (t, dims)) in enumerate(zip(leaves, sig)):
        if tuple(np.shape(a)) != dims:
            raise RuntimeError(f"{kind}{i}: shape {np.shape(a)} vs HLO {t}{list(dims)}")


def normalize_paths(text):
    """Make the source paths recorded in the optimized HLO relative to the repo root."""
    return text.replace(REPO + os.sep, "")


def generate(name, desc, tol, builder):
    fn, args = builder(Rand(name))
    fn.__name__ = name
    jitted = jax.jit(fn)
    lowered = jitted.lower(*args)
    prog = lowered.as_text(dialect="hlo")
    opt = normalize_paths(lowered.compile().as_text())
    if "custom-call" in prog:
        raise RuntimeError(f"{name}: prog.hlo contains a custom-call")
    psig, rsig = hlo_signature(prog)
    ins = jax.tree_util.tree_leaves(args)
    outs = jax.tree_util.tree_leaves(jitted(*args))
    check_leaves("in", ins, psig)
    check_leaves("out", outs, rsig)

    write_case(name, desc, tol, prog, opt, ins, outs, psig, rsig)


def write_case(name, desc, tol, prog, opt, ins, outs, psig, rsig, **extra_meta):
    """Writes cases/NAME: prog.hlo, opt.hlo, in*/out*.npy (read back and checked against the
    HLO signature) and meta.json (extra_meta added to it)."""
    d = os.path.join(CASES_DIR, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    with open(os.path.join(d, "prog.hlo"), "w") as fh:
        fh.write(prog)
    with open(os.path.join(d, "opt.hlo"), "w") as fh:
        fh.write(opt)
    for prefix, leaves, sig in (("in", ins, psig), ("out", outs, rsig)):
        for i, (a, (t, dims)) in enumerate(zip(leaves, sig)):
            path = os.path.join(d, f"{prefix}{i}.npy")
            np.save(path, to_npy(a, t), allow_pickle=False)
            back = np.load(path)
            if back.shape != dims or back.dtype != NPY_DTYPE[t]:
                raise RuntimeError(f"{path}: wrote {back.dtype}{back.shape}, HLO {t}{dims}")
    dtypes = sorted(set(t for t, _ in SHAPE_RE.findall(prog)))
    fmt = lambda s: [f"{t}[{','.join(map(str, dims))}]" for t, dims in s]  # noqa: E731
    meta = {"name": name, "description": desc, "dtypes": dtypes,
            "tol": {"rtol": tol[0], "atol": tol[1]},
            "inputs": fmt(psig), "outputs": fmt(rsig), "jax_version": jax.__version__, **extra_meta}
    if name in OUT_TOL:
        meta["out_tol"] = {str(k): {"rtol": t[0], "atol": t[1]} for k, t in sorted(OUT_TOL[name].items())}
    with open(os.path.join(d, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=2)
        fh.write("\n")


OPCODE_RE = re.compile(r"^\s*(?:ROOT )?\S+ = .*? ([a-z][a-z0-9\-]*)\(", re.M)


def tally():
    """Count HLO opcodes over every cases/*/prog.hlo; returns a Counter."""
    c = Counter()
    for n in sorted(os.listdir(CASES_DIR)):
        p = os.path.join(CASES_DIR, n, "prog.hlo")
        if os.path.exists(p):
            with open(p) as fh:
                c.update(OPCODE_RE.findall(fh.read()))
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated case names")
    ap.add_argument("--tally", action="store_true", help="print opcode counts and exit")
    a = ap.parse_args()
    if a.tally:
        for op, n in sorted(tally().items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"{n:6d} {op}")
        return 0
    names = [c[0] for c in CASES]
    if len(set(names)) != len(names):
        raise RuntimeError("duplicate case names")
    only = set(a.only.split(",")) if a.only else None
    os.makedirs(CASES_DIR, exist_ok=True)
    if only is None:  # drop directories of cases that no longer exist
        for n in os.listdir(CASES_DIR):
            if n.startswith("linalg_"):
                continue  # lowered for TPU: gen_linalg.py (and gen_linalg_opt.py) write them
            if n not in names and os.path.isdir(os.path.join(CASES_DIR, n)):
                shutil.rmtree(os.path.join(CASES_DIR, n))
    for c in CASES:
        if only is None or c[0] in only:
            generate(*c)
            print("wrote", c[0])
    print(f"{len(CASES)} cases, JAX {jax.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
