#!/usr/bin/env python3
"""gen_families.py: the held-out fidelity corpus bench/fidelity/families/ — programs in many
families (model layers in plain JAX at several sizes, forward and training step; op families
with shapes drawn by a seeded RNG), each as JAX's pre-optimization HLO beside the XLA TPU
compiler's own figures for one device of v4, v5e, v5p and v6e (gen.py's method: libtpu in
compile-only mode, no TPU needed) and the compiler's compiled program per generation.

    pip install "jax[tpu]==0.10.2"
    nohup nice -n 10 python3 bench/fidelity/gen_families.py --keep > /tmp/families.log 2>&1 &
    python3 bench/fidelity/gen_families.py --list              # the programs, family and split
    python3 bench/fidelity/gen_families.py --keep --only lstm  # a subset (name substrings)
    python3 bench/fidelity/gen_families.py --keep --deadline 04:20   # stop starting programs then (UTC)
    python3 bench/fidelity/gen_families.py --keep --out /tmp/fam   # elsewhere (copy finished ones in)

Writes, for each program NAME (bench/fidelity/families/):
  NAME.hlo           jax.jit(f, donate_argnums=...).lower(specs on a TPU device).as_text(
                     dialect="hlo", debug_info=True): lowered for the TPU platform (cumsum and
                     a few others lower differently on CPU), the metadata op_name kept;
  NAME.json          {"name", "family", "split", "kind" (model/op/loop-body), "loop_body" (the
                     name of the program holding this one's loop body, if any), "chips": per
                     generation gen.py's record (topology, estimated_cycles = sum over the
                     compiled entry computation's top-level ops, ops, async copies,
                     unestimated ops, cost_analysis, memory_analysis) plus "while_loops": the
                     number of while ops in the compiled entry computation (their bodies'
                     cycles are not in estimated_cycles)};
  compiled/NAME.GEN.hlo.gz  the compiler's compiled program for GEN, large constants printed
                     (compare.py --compiled reads it).
A program the compiler (or JAX) refuses, or whose four compiles take longer than --timeout
(45 s; --model-timeout 300 s for the model families: the run is a supervisor restarting a
worker process without it), is logged and listed in families/_failed.txt with the reason
(--keep skips it on a rerun too, --retry-failed retries it).

Split: a program is in "test" when int(sha1(NAME).hexdigest()[:8], 16) % 10 < 3, else "tune"
(about 30/70, fixed by the name alone). Calibrate tpusim against "tune" only.

Loops (the compiler's entry sum leaves while-loop bodies out; compare.py adds trip count x
body cycles read from the compiled program, loop_cycles): each scan family (lstm, gru, mamba,
and the scan form of cumulative ops) also has its step function lowered alone as a program of
kind "loop-body" (NAME_step), and short scans fully unrolled (lax.scan(unroll=True)), whose
figures the compiler gives whole.

Programs are built in an order that covers every family early (ordered(): round-robins over
the op families and over the model families, forward passes before training steps, eight op
programs to one model program), so a run cut short still covers every family."""
import argparse, gzip, hashlib, json, math, os, random, sys, time
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen  # noqa: E402  (sets the libtpu environment, the entry-op parsers, the topologies)
import numpy as np  # noqa: E402
import jax, jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

OUT = os.path.join(HERE, "families")
BF, F32, I32, I8 = jnp.bfloat16, jnp.float32, jnp.int32, jnp.int8
FP8 = getattr(jnp, "float8_e4m3fn", None)


def split_of(name):
    return "test" if int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % 10 < 3 else "tune"


class Sp:
    """An argument's shape and dtype (a pytree leaf)."""
    def __init__(self, shape, dt=BF):
        self.shape, self.dt = tuple(shape), dt


def P(*shape, dt=BF):
    return Sp(shape, dt)


FAM = {}  # family -> [(name, kind, f, args, donate, loop_body)]


def prog(fam, name, f, *args, donate=(), kind=None, loop_body=None):
    kind = kind or ("model" if fam.startswith("m_") else "op")
    FAM.setdefault(fam, []).append((name, kind, f, list(args), tuple(donate), loop_body))


def is_sp(a):
    return isinstance(a, Sp)


def specs(args, dev):
    return jax.tree_util.tree_map(lambda s: gen.sds(s.shape, s.dt, dev), args, is_leaf=is_sp)


def tree_sp(d, dt=BF):
    """{name: shape} -> {name: Sp}."""
    return {k: Sp(v, dt) for k, v in d.items()}


def train(fwd):
    """A training step of fwd(params, *inputs): mean-square loss, gradient, SGD update (the
    parameters donated by the caller, as a training loop does)."""
    def step(params, *xs):
        def loss(p):
            y = fwd(p, *xs)
            y = y[0] if isinstance(y, tuple) else y
            return jnp.mean(jnp.square(y.astype(F32)))
        l, g = jax.value_and_grad(loss)(params)
        new = jax.tree_util.tree_map(lambda p, g: (p.astype(F32) - 1e-3 * g.astype(F32)).astype(p.dtype), params, g)
        return new, l
    return step


# ---------------------------------------------------------------------------- layers
def conv(x, w, stride=1, pad="SAME", dil=1, groups=1, lhs_dil=1, dims=2, layout=None):
    dn = layout or {1: ("NWC", "WIO", "NWC"), 2: ("NHWC", "HWIO", "NHWC"), 3: ("NDHWC", "DHWIO", "NDHWC")}[dims]
    return lax.conv_general_dilated(x, w, (stride,) * dims, pad, lhs_dilation=(lhs_dil,) * dims,
                                    rhs_dilation=(dil,) * dims, dimension_numbers=dn, feature_group_count=groups)


def ln(x, g, b, eps=1e-5):
    xf = x.astype(F32)
    m = xf.mean(-1, keepdims=True)
    v = jnp.square(xf - m).mean(-1, keepdims=True)
    return ((xf - m) * lax.rsqrt(v + eps) * g.astype(F32) + b.astype(F32)).astype(x.dtype)


def rms(x, g, eps=1e-6):
    xf = x.astype(F32)
    return (xf * lax.rsqrt(jnp.square(xf).mean(-1, keepdims=True) + eps) * g.astype(F32)).astype(x.dtype)


def bn(x, g, b):
    """Batch norm with batch statistics over every axis but the last."""
    xf = x.astype(F32)
    ax = tuple(range(x.ndim - 1))
    m = xf.mean(ax)
    v = jnp.square(xf - m).mean(ax)
    return ((xf - m) * lax.rsqrt(v + 1e-5) * g.astype(F32) + b.astype(F32)).astype(x.dtype)


def gn(x, g, b, groups=32):
    B, H, W, C = x.shape
    xf = x.astype(F32).reshape(B, H, W, groups, C // groups)
    m = xf.mean((1, 2, 4), keepdims=True)
    v = jnp.square(xf - m).mean((1, 2, 4), keepdims=True)
    xf = ((xf - m) * lax.rsqrt(v + 1e-5)).reshape(B, H, W, C)
    return (xf * g.astype(F32) + b.astype(F32)).astype(x.dtype)


def softmax32(s):
    return jax.nn.softmax(s.astype(F32), axis=-1)


def attend(q, k, v, causal=False, bias=None, window=None, mask=None):
    """q [B,S,H,Dh], k/v [B,T,H,Dh] -> [B,S,H,Dh]."""
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (q.shape[-1] ** -0.5)
    if bias is not None:
        s = s + bias
    S, T = q.shape[1], k.shape[1]
    if causal or window:
        i = jnp.arange(S)[:, None] + (T - S)
        j = jnp.arange(T)[None, :]
        ok = j <= i
        if window:
            ok = ok & (j > i - window)
        s = jnp.where(ok, s, jnp.finfo(s.dtype).min)
    if mask is not None:
        s = jnp.where(mask[:, None, None, :], s, jnp.finfo(s.dtype).min)
    a = softmax32(s).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", a, v)


def mha(x, p, H, **kw):
    B, S, D = x.shape
    q = (x @ p["wq"]).reshape(B, S, H, D // H)
    k = (x @ p["wk"]).reshape(B, S, H, D // H)
    v = (x @ p["wv"]).reshape(B, S, H, D // H)
    return attend(q, k, v, **kw).reshape(B, S, D) @ p["wo"]


def attn_params(D, bias=False):
    d = {"wq": (D, D), "wk": (D, D), "wv": (D, D), "wo": (D, D)}
    return d


# ---------------------------------------------------------------------------- model families
def m_resnet():
    def basic(p, x):
        h = jax.nn.relu(bn(conv(x, p["w1"]), p["g1"], p["b1"]))
        h = bn(conv(h, p["w2"]), p["g2"], p["b2"])
        return jax.nn.relu(h + x)

    def bottleneck(p, x, groups=1):
        h = jax.nn.relu(bn(conv(x, p["w1"]), p["g1"], p["b1"]))
        h = jax.nn.relu(bn(conv(h, p["w2"], groups=groups), p["g2"], p["b2"]))
        h = bn(conv(h, p["w3"]), p["g3"], p["b3"])
        return jax.nn.relu(h + x)
    for B, Hs, C in [(8, 56, 64), (8, 28, 128), (8, 14, 256), (4, 7, 512), (16, 28, 128)]:
        pr = tree_sp({"w1": (3, 3, C, C), "w2": (3, 3, C, C), "g1": (C,), "b1": (C,), "g2": (C,), "b2": (C,)})
        x = P(B, Hs, Hs, C)
        prog("m_resnet_basic", f"resnet_basic_fwd_b{B}_{Hs}x{Hs}x{C}", basic, pr, x)
        prog("m_resnet_basic", f"resnet_basic_train_b{B}_{Hs}x{Hs}x{C}", train(basic), pr, x, donate=(0,))
    for B, Hs, C, mid, G in [(8, 56, 256, 64, 1), (8, 28, 512, 128, 1), (4, 14, 1024, 256, 1), (8, 56, 256, 128, 32),
                              (8, 28, 512, 256, 32), (4, 14, 1024, 512, 32), (4, 7, 2048, 1024, 32)]:
        pr = tree_sp({"w1": (1, 1, C, mid), "w2": (3, 3, mid // G, mid), "w3": (1, 1, mid, C), "g1": (mid,), "b1": (mid,),
                      "g2": (mid,), "b2": (mid,), "g3": (C,), "b3": (C,)})
        x = P(B, Hs, Hs, C)
        fam = "m_resnext" if G > 1 else "m_resnet_bottleneck"
        f = lambda p, x, G=G: bottleneck(p, x, G)
        prog(fam, f"{fam[2:]}_fwd_b{B}_{Hs}x{Hs}x{C}_g{G}", f, pr, x)
        prog(fam, f"{fam[2:]}_train_b{B}_{Hs}x{Hs}x{C}_g{G}", train(f), pr, x, donate=(0,))


def m_mobilenet():
    def v2(p, x, stride, res):
        h = jnp.clip(bn(conv(x, p["we"]), p["g1"], p["b1"]), 0, 6)
        h = jnp.clip(bn(conv(h, p["wd"], stride=stride, groups=h.shape[-1]), p["g2"], p["b2"]), 0, 6)
        h = bn(conv(h, p["wp"]), p["g3"], p["b3"])
        return h + x if res else h

    for B, Hs, Ci, Co, s in [(8, 112, 16, 24, 2), (8, 56, 24, 24, 1), (8, 28, 32, 64, 2), (8, 14, 64, 64, 1),
                             (8, 14, 96, 160, 2), (8, 7, 160, 160, 1), (32, 28, 32, 32, 1)]:
        E = 6 * Ci
        pr = tree_sp({"we": (1, 1, Ci, E), "wd": (3, 3, 1, E), "wp": (1, 1, E, Co), "g1": (E,), "b1": (E,),
                      "g2": (E,), "b2": (E,), "g3": (Co,), "b3": (Co,)})
        f = lambda p, x, s=s, r=(s == 1 and Ci == Co): v2(p, x, s, r)
        x = P(B, Hs, Hs, Ci)
        prog("m_mobilenet_v2", f"mbv2_fwd_b{B}_{Hs}x{Hs}_{Ci}to{Co}_s{s}", f, pr, x)
        prog("m_mobilenet_v2", f"mbv2_train_b{B}_{Hs}x{Hs}_{Ci}to{Co}_s{s}", train(f), pr, x, donate=(0,))

    def hswish(x):
        return x * jnp.clip(x + 3, 0, 6) / 6

    def se(h, p):
        s = h.astype(F32).mean((1, 2))
        s = jax.nn.relu(s @ p["ws1"].astype(F32))
        s = jnp.clip(s @ p["ws2"].astype(F32) + 3, 0, 6) / 6
        return (h * s[:, None, None, :].astype(h.dtype))

    def v3(p, x, k, stride, res):
        h = hswish(bn(conv(x, p["we"]), p["g1"], p["b1"]))
        h = hswish(bn(conv(h, p["wd"], stride=stride, groups=h.shape[-1]), p["g2"], p["b2"]))
        h = se(h, p)
        h = bn(conv(h, p["wp"]), p["g3"], p["b3"])
        return h + x if res else h

    for B, Hs, Ci, E, Co, k, s in [(8, 56, 24, 72, 40, 5, 2), (8, 28, 40, 120, 40, 5, 1), (8, 14, 80, 240, 80, 3, 1),
                                   (8, 14, 80, 480, 112, 3, 1), (8, 14, 112, 672, 160, 5, 2), (8, 7, 160, 960, 160, 5, 1)]:
        pr = tree_sp({"we": (1, 1, Ci, E), "wd": (k, k, 1, E), "wp": (1, 1, E, Co), "g1": (E,), "b1": (E,),
                      "g2": (E,), "b2": (E,), "g3": (Co,), "b3": (Co,), "ws1": (E, E // 4), "ws2": (E // 4, E)})
        f = lambda p, x, k=k, s=s, r=(s == 1 and Ci == Co): v3(p, x, k, s, r)
        x = P(B, Hs, Hs, Ci)
        prog("m_mobilenet_v3", f"mbv3_fwd_b{B}_{Hs}x{Hs}_{Ci}e{E}to{Co}_k{k}s{s}", f, pr, x)
        prog("m_mobilenet_v3", f"mbv3_train_b{B}_{Hs}x{Hs}_{Ci}e{E}to{Co}_k{k}s{s}", train(f), pr, x, donate=(0,))

    def mbconv(p, x, s, res):
        h = jax.nn.silu(bn(conv(x, p["we"]), p["g1"], p["b1"]))
        h = jax.nn.silu(bn(conv(h, p["wd"], stride=s, groups=h.shape[-1]), p["g2"], p["b2"]))
        sq = jax.nn.silu(h.astype(F32).mean((1, 2)) @ p["ws1"].astype(F32))
        h = h * jax.nn.sigmoid(sq @ p["ws2"].astype(F32))[:, None, None, :].astype(h.dtype)
        h = bn(conv(h, p["wp"]), p["g3"], p["b3"])
        return h + x if res else h

    for B, Hs, Ci, Co, k, s in [(8, 112, 16, 24, 3, 2), (8, 56, 24, 24, 3, 1), (8, 56, 24, 40, 5, 2),
                                (8, 28, 40, 80, 3, 2), (8, 14, 80, 112, 5, 1), (8, 14, 112, 192, 5, 2), (8, 7, 192, 320, 3, 1)]:
        E = 6 * Ci
        pr = tree_sp({"we": (1, 1, Ci, E), "wd": (k, k, 1, E), "wp": (1, 1, E, Co), "g1": (E,), "b1": (E,),
                      "g2": (E,), "b2": (E,), "g3": (Co,), "b3": (Co,), "ws1": (E, max(1, Ci // 4)), "ws2": (max(1, Ci // 4), E)})
        f = lambda p, x, s=s, r=(s == 1 and Ci == Co): mbconv(p, x, s, r)
        x = P(B, Hs, Hs, Ci)
        prog("m_efficientnet", f"mbconv_fwd_b{B}_{Hs}x{Hs}_{Ci}to{Co}_k{k}s{s}", f, pr, x)
        prog("m_efficientnet", f"mbconv_train_b{B}_{Hs}x{Hs}_{Ci}to{Co}_k{k}s{s}", train(f), pr, x, donate=(0,))


def m_convnext_unet():
    def cnx(p, x):
        C = x.shape[-1]
        h = conv(x, p["wd"], groups=C) + p["bd"]
        h = ln(h, p["g"], p["b"])
        h = jax.nn.gelu(h @ p["w1"] + p["b1"])
        h = h @ p["w2"] + p["b2"]
        return x + p["ls"] * h
    for B, Hs, C in [(4, 56, 96), (4, 28, 192), (4, 14, 384), (4, 7, 768), (16, 14, 384), (2, 56, 128)]:
        pr = tree_sp({"wd": (7, 7, 1, C), "bd": (C,), "g": (C,), "b": (C,), "w1": (C, 4 * C), "b1": (4 * C,),
                      "w2": (4 * C, C), "b2": (C,), "ls": (C,)})
        x = P(B, Hs, Hs, C)
        prog("m_convnext", f"convnext_fwd_b{B}_{Hs}x{Hs}x{C}", cnx, pr, x)
        prog("m_convnext", f"convnext_train_b{B}_{Hs}x{Hs}x{C}", train(cnx), pr, x, donate=(0,))

    def unet(p, x):
        B, Hs, W, C = x.shape
        h = jax.nn.silu(gn(conv(x, p["c1"]), p["g1"], p["b1"]))
        h = jax.nn.silu(gn(conv(h, p["c2"]), p["g2"], p["b2"]))
        d = conv(h, p["down"], stride=2)
        d = jax.nn.silu(gn(conv(d, p["c3"]), p["g3"], p["b3"]))
        u = lax.conv_transpose(d, p["up"], (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = jnp.concatenate([h, u], axis=-1)
        return jax.nn.silu(gn(conv(h, p["c4"]), p["g4"], p["b4"]))
    for B, Hs, C in [(4, 64, 64), (2, 64, 128), (4, 32, 128), (2, 32, 256), (2, 16, 320)]:
        pr = tree_sp({"c1": (3, 3, C, C), "c2": (3, 3, C, C), "down": (3, 3, C, 2 * C), "c3": (3, 3, 2 * C, 2 * C),
                      "up": (2, 2, 2 * C, C), "c4": (3, 3, 2 * C, C), "g1": (C,), "b1": (C,), "g2": (C,), "b2": (C,),
                      "g3": (2 * C,), "b3": (2 * C,), "g4": (C,), "b4": (C,)})
        x = P(B, Hs, Hs, C)
        prog("m_unet", f"unet_fwd_b{B}_{Hs}x{Hs}x{C}", unet, pr, x)
        prog("m_unet", f"unet_train_b{B}_{Hs}x{Hs}x{C}", train(unet), pr, x, donate=(0,))


def m_transformers():
    def bert(p, x, mask, H):
        h = ln(x + mha(x, p, H, mask=mask), p["g1"], p["b1"])
        f = jax.nn.gelu(h @ p["w1"] + p["bb1"], approximate=False) @ p["w2"] + p["bb2"]
        return ln(h + f, p["g2"], p["b2"])

    def gpt2(p, x, H):
        x = x + mha(ln(x, p["g1"], p["b1"]), p, H, causal=True)
        h = ln(x, p["g2"], p["b2"])
        return x + jax.nn.gelu(h @ p["w1"] + p["bb1"]) @ p["w2"] + p["bb2"]

    def lnmlp(D, F):
        return dict(attn_params(D), g1=(D,), b1=(D,), g2=(D,), b2=(D,), w1=(D, F), bb1=(F,), w2=(F, D), bb2=(D,))
    for B, S, D, H in [(8, 128, 768, 12), (4, 512, 768, 12), (2, 512, 1024, 16), (16, 128, 256, 4), (4, 384, 512, 8),
                       (1, 512, 1024, 16)]:
        pr = tree_sp(lnmlp(D, 4 * D))
        f = lambda p, x, m, H=H: bert(p, x, m, H)
        prog("m_bert", f"bert_fwd_b{B}s{S}d{D}h{H}", f, pr, P(B, S, D), P(B, S, dt=jnp.bool_))
        prog("m_bert", f"bert_train_b{B}s{S}d{D}h{H}", train(f), pr, P(B, S, D), P(B, S, dt=jnp.bool_), donate=(0,))
    for B, S, D, H in [(8, 256, 768, 12), (4, 1024, 768, 12), (2, 1024, 1024, 16), (8, 128, 512, 8), (1, 1024, 1600, 25),
                       (16, 64, 768, 12)]:
        pr = tree_sp(lnmlp(D, 4 * D))
        f = lambda p, x, H=H: gpt2(p, x, H)
        prog("m_gpt2", f"gpt2_fwd_b{B}s{S}d{D}h{H}", f, pr, P(B, S, D))
        prog("m_gpt2", f"gpt2_train_b{B}s{S}d{D}h{H}", train(f), pr, P(B, S, D), donate=(0,))

    def t5_bias(table, S, nb=32, maxd=128):
        ctx = jnp.arange(S)[:, None]
        mem = jnp.arange(S)[None, :]
        n = ctx - mem
        ret = (n < 0).astype(I32) * (nb // 2)
        n = jnp.abs(n)
        me = nb // 4
        large = me + (jnp.log(jnp.maximum(n, 1).astype(F32) / me) / math.log(maxd / me) * (nb // 2 - me)).astype(I32)
        large = jnp.minimum(large, nb // 2 - 1)
        bucket = ret + jnp.where(n < me, n, large)
        return jnp.transpose(table[bucket], (2, 0, 1))[None]

    def t5(p, x, H):
        B, S, D = x.shape
        Dh = p["wq"].shape[1] // H
        h = rms(x, p["n1"])
        q = (h @ p["wq"]).reshape(B, S, H, Dh)
        k = (h @ p["wk"]).reshape(B, S, H, Dh)
        v = (h @ p["wv"]).reshape(B, S, H, Dh)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) + t5_bias(p["rel"], S).astype(q.dtype)
        a = softmax32(s).astype(x.dtype)
        x = x + jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(B, S, H * Dh) @ p["wo"]
        h = rms(x, p["n2"])
        return x + jax.nn.relu(h @ p["w1"]) @ p["w2"]
    for B, S, D, H, F in [(4, 512, 512, 8, 2048), (8, 128, 768, 12, 3072), (2, 512, 1024, 16, 2816), (16, 64, 512, 8, 2048)]:
        pr = tree_sp({"n1": (D,), "n2": (D,), "wq": (D, D), "wk": (D, D), "wv": (D, D), "wo": (D, D), "rel": (32, H),
                      "w1": (D, F), "w2": (F, D)})
        f = lambda p, x, H=H: t5(p, x, H)
        prog("m_t5", f"t5_fwd_b{B}s{S}d{D}h{H}", f, pr, P(B, S, D))
        prog("m_t5", f"t5_train_b{B}s{S}d{D}h{H}", train(f), pr, P(B, S, D), donate=(0,))

    def rope(x, base=10000.0):
        """x [B,S,...,Dh]: rotate halves by position (along axis 1)."""
        S, Dh = x.shape[1], x.shape[-1]
        inv = 1.0 / base ** (jnp.arange(0, Dh // 2, dtype=F32) * 2 / Dh)
        ang = jnp.arange(S, dtype=F32)[:, None] * inv[None, :]
        shp = (1, S) + (1,) * (x.ndim - 3) + (Dh // 2,)
        c, s = jnp.cos(ang).reshape(shp), jnp.sin(ang).reshape(shp)
        x1, x2 = x[..., :Dh // 2].astype(F32), x[..., Dh // 2:].astype(F32)
        return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1).astype(x.dtype)

    def llama(p, x, window=None):
        B, S, D = x.shape
        KV, G, Dh = p["wq"].shape[1:]
        h = rms(x, p["n1"])
        q = rope(jnp.einsum("bsd,dkgh->bskgh", h, p["wq"]))
        k = rope(jnp.einsum("bsd,dkh->bskh", h, p["wk"]))
        v = jnp.einsum("bsd,dkh->bskh", h, p["wv"])
        s = jnp.einsum("bskgh,btkh->bkgst", q, k) * Dh ** -0.5
        i, j = jnp.arange(S)[:, None], jnp.arange(S)[None, :]
        ok = j <= i
        if window:
            ok = ok & (j > i - window)
        s = jnp.where(ok, s, jnp.finfo(s.dtype).min)
        a = softmax32(s).astype(x.dtype)
        o = jnp.einsum("bkgst,btkh->bskgh", a, v)
        x = x + jnp.einsum("bskgh,kghd->bsd", o, p["wo"])
        h = rms(x, p["n2"])
        return x + (jax.nn.silu(h @ p["w1"]) * (h @ p["w3"])) @ p["w2"]

    def llama_params(D, H, KV, F):
        Dh = D // H
        return tree_sp({"n1": (D,), "n2": (D,), "wq": (D, KV, H // KV, Dh), "wk": (D, KV, Dh), "wv": (D, KV, Dh),
                        "wo": (KV, H // KV, Dh, D), "w1": (D, F), "w3": (D, F), "w2": (F, D)})
    for B, S, D, H, KV, F in [(2, 512, 1024, 16, 4, 2816), (1, 1024, 2048, 16, 8, 5632), (4, 256, 512, 8, 2, 1408),
                              (1, 2048, 1024, 8, 2, 2816), (8, 128, 768, 12, 4, 2048), (2, 512, 2048, 32, 8, 5632)]:
        pr = llama_params(D, H, KV, F)
        prog("m_llama", f"llama_fwd_b{B}s{S}d{D}h{H}kv{KV}", llama, pr, P(B, S, D))
        prog("m_llama", f"llama_train_b{B}s{S}d{D}h{H}kv{KV}", train(llama), pr, P(B, S, D), donate=(0,))
    for B, S, D, H, KV, F, W in [(1, 1024, 1024, 16, 4, 2816, 256), (2, 2048, 512, 8, 2, 1408, 512),
                                 (1, 4096, 512, 8, 2, 1408, 1024), (4, 512, 1024, 16, 8, 3584, 128)]:
        pr = llama_params(D, H, KV, F)
        f = lambda p, x, W=W: llama(p, x, W)
        prog("m_mistral", f"mistral_fwd_b{B}s{S}d{D}h{H}kv{KV}w{W}", f, pr, P(B, S, D))
        prog("m_mistral", f"mistral_train_b{B}s{S}d{D}h{H}kv{KV}w{W}", train(f), pr, P(B, S, D), donate=(0,))

    def moe(p, x, k=2, cf=1.25):
        B, S, D = x.shape
        E = p["router"].shape[1]
        T = B * S
        h = rms(x, p["n"]).reshape(T, D)
        probs = softmax32(h @ p["router"])
        topv, topi = lax.top_k(probs, k)
        topv = topv / topv.sum(-1, keepdims=True)
        C = max(1, int(cf * T * k / E))
        m = jax.nn.one_hot(topi, E, dtype=I32)                        # [T,k,E]
        mk = jnp.transpose(m, (1, 0, 2)).reshape(k * T, E)
        pos = (jnp.cumsum(mk, axis=0) - 1).reshape(k, T, E).transpose(1, 0, 2)
        pos = jnp.where(m > 0, pos, C)                                 # dropped beyond capacity
        disp = jax.nn.one_hot(pos, C, dtype=x.dtype)                   # [T,k,E,C]
        comb = (disp * topv[:, :, None, None].astype(x.dtype)).sum(1)
        disp = disp.sum(1)
        xe = jnp.einsum("tec,td->ecd", disp, h)
        g = jax.nn.silu(jnp.einsum("ecd,edf->ecf", xe, p["w1"])) * jnp.einsum("ecd,edf->ecf", xe, p["w3"])
        y = jnp.einsum("ecf,efd->ecd", g, p["w2"])
        return x + jnp.einsum("tec,ecd->td", comb, y).reshape(B, S, D)
    for B, S, D, E, F in [(4, 256, 512, 8, 1024), (2, 512, 1024, 8, 2048), (8, 128, 768, 16, 1536), (1, 1024, 1024, 8, 3584),
                          (4, 128, 2048, 8, 4096)]:
        pr = tree_sp({"n": (D,), "router": (D, E), "w1": (E, D, F), "w3": (E, D, F), "w2": (E, F, D)})
        prog("m_mixtral_moe", f"moe_top2_fwd_b{B}s{S}d{D}e{E}f{F}", moe, pr, P(B, S, D))
        prog("m_mixtral_moe", f"moe_top2_train_b{B}s{S}d{D}e{E}f{F}", train(moe), pr, P(B, S, D), donate=(0,))


def m_vision_speech():
    def enc_layer(p, x, H):
        x = x + mha(ln(x, p["g1"], p["b1"]), p, H)
        h = ln(x, p["g2"], p["b2"])
        return x + jax.nn.gelu(h @ p["w1"] + p["bb1"]) @ p["w2"] + p["bb2"]

    def lp(D):
        return dict(attn_params(D), g1=(D,), b1=(D,), g2=(D,), b2=(D,), w1=(D, 4 * D), bb1=(4 * D,), w2=(4 * D, D), bb2=(D,))

    def vit(p, img, H):
        B = img.shape[0]
        x = conv(img, p["patch"], stride=16, pad="VALID") + p["pb"]
        D = x.shape[-1]
        x = x.reshape(B, -1, D)
        x = jnp.concatenate([jnp.broadcast_to(p["cls"], (B, 1, D)), x], 1) + p["pos"]
        return enc_layer(p, x, H)
    for B, D, H in [(8, 384, 6), (4, 768, 12), (2, 1024, 16), (16, 192, 3), (32, 384, 6)]:
        pr = tree_sp(dict(lp(D), patch=(16, 16, 3, D), pb=(D,), cls=(1, 1, D), pos=(1, 197, D)))
        f = lambda p, img, H=H: vit(p, img, H)
        prog("m_vit", f"vit_fwd_b{B}d{D}h{H}", f, pr, P(B, 224, 224, 3))
        prog("m_vit", f"vit_train_b{B}d{D}h{H}", train(f), pr, P(B, 224, 224, 3), donate=(0,))
    for B, D in [(8, 768), (32, 384), (4, 1024)]:
        f = lambda img, w, b: (conv(img, w, stride=16, pad="VALID") + b).reshape(img.shape[0], -1, w.shape[-1])
        prog("m_vit", f"vit_patch_embed_b{B}d{D}", f, P(B, 224, 224, 3), P(16, 16, 3, D), P(D))

    def swin(p, x, H, shift):
        B, Hs, W, C = x.shape
        ws = 7
        h = ln(x, p["g1"], p["b1"])
        if shift:
            h = jnp.roll(h, (-3, -3), (1, 2))
        h = h.reshape(B, Hs // ws, ws, W // ws, ws, C).transpose(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, C)
        n = h.shape[0]
        q = (h @ p["wq"]).reshape(n, ws * ws, H, C // H)
        k = (h @ p["wk"]).reshape(n, ws * ws, H, C // H)
        v = (h @ p["wv"]).reshape(n, ws * ws, H, C // H)
        coords = np.stack(np.meshgrid(np.arange(ws), np.arange(ws), indexing="ij")).reshape(2, -1)
        rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0) + ws - 1
        idx = rel[..., 0] * (2 * ws - 1) + rel[..., 1]
        bias = jnp.transpose(p["rpb"][idx.reshape(-1)].reshape(ws * ws, ws * ws, H), (2, 0, 1))[None]
        o = attend(q, k, v, bias=bias.astype(q.dtype)).reshape(n, ws * ws, C) @ p["wo"]
        o = o.reshape(B, Hs // ws, W // ws, ws, ws, C).transpose(0, 1, 3, 2, 4, 5).reshape(B, Hs, W, C)
        if shift:
            o = jnp.roll(o, (3, 3), (1, 2))
        x = x + o
        h = ln(x, p["g2"], p["b2"])
        return x + jax.nn.gelu(h @ p["w1"] + p["bb1"]) @ p["w2"] + p["bb2"]
    for B, Hs, C, H in [(4, 56, 96, 3), (4, 28, 192, 6), (4, 14, 384, 12), (4, 7, 768, 24), (16, 14, 384, 12)]:
        pr = tree_sp(dict(lp(C), rpb=(169, H)))
        for shift in ([False, True] if Hs > 7 else [False]):
            f = lambda p, x, H=H, s=shift: swin(p, x, H, s)
            t = "_shift" if shift else ""
            prog("m_swin", f"swin_fwd_b{B}_{Hs}x{Hs}x{C}h{H}{t}", f, pr, P(B, Hs, Hs, C))
            if not shift or Hs == 28:
                prog("m_swin", f"swin_train_b{B}_{Hs}x{Hs}x{C}h{H}{t}", train(f), pr, P(B, Hs, Hs, C), donate=(0,))

    def whisper(p, mel, H):
        x = jax.nn.gelu(conv(mel, p["c1"], dims=1) + p["cb1"])
        x = jax.nn.gelu(conv(x, p["c2"], stride=2, dims=1) + p["cb2"])
        T, D = x.shape[1], x.shape[2]
        pos = jnp.arange(T, dtype=F32)[:, None] * jnp.exp(-math.log(10000.0) / (D // 2 - 1) * jnp.arange(D // 2, dtype=F32))[None]
        x = x + jnp.concatenate([jnp.sin(pos), jnp.cos(pos)], 1).astype(x.dtype)
        return enc_layer(p, x, H)
    for B, T, D, H in [(1, 3000, 384, 6), (2, 3000, 512, 8), (4, 1000, 384, 6), (1, 3000, 768, 12), (8, 500, 512, 8)]:
        pr = tree_sp(dict(lp(D), c1=(3, 80, D), cb1=(D,), c2=(3, D, D), cb2=(D,)))
        f = lambda p, m, H=H: whisper(p, m, H)
        prog("m_whisper", f"whisper_enc_fwd_b{B}t{T}d{D}h{H}", f, pr, P(B, T, 80))
        prog("m_whisper", f"whisper_enc_train_b{B}t{T}d{D}h{H}", train(f), pr, P(B, T, 80), donate=(0,))


def m_recurrent():
    def lstm_cell(W, U, b, carry, xt):
        h, c = carry
        z = xt @ W + h @ U + b
        i, f, g, o = jnp.split(z.astype(F32), 4, -1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = (jax.nn.sigmoid(o) * jnp.tanh(c)).astype(xt.dtype)
        return (h, c), h

    def gru_cell(W, U, b, h, xt):
        Hd = h.shape[-1]
        zx = xt @ W + b
        zh = h @ U
        r = jax.nn.sigmoid((zx[:, :Hd] + zh[:, :Hd]).astype(F32))
        z = jax.nn.sigmoid((zx[:, Hd:2 * Hd] + zh[:, Hd:2 * Hd]).astype(F32))
        n = jnp.tanh(zx[:, 2 * Hd:].astype(F32) + r * zh[:, 2 * Hd:].astype(F32))
        h = ((1 - z) * n + z * h.astype(F32)).astype(xt.dtype)
        return h, h

    def lstm(p, x, unroll=1):
        T, B, _ = x.shape
        Hd = p["U"].shape[0]
        init = (jnp.zeros((B, Hd), x.dtype), jnp.zeros((B, Hd), F32))
        _, ys = lax.scan(lambda c, xt: lstm_cell(p["W"], p["U"], p["b"], c, xt), init, x, unroll=unroll)
        return ys

    def gru(p, x, unroll=1):
        T, B, _ = x.shape
        Hd = p["U"].shape[0]
        _, ys = lax.scan(lambda c, xt: gru_cell(p["W"], p["U"], p["b"], c, xt), jnp.zeros((B, Hd), x.dtype), x, unroll=unroll)
        return ys

    for fam, fn, cell, g in [("m_lstm", lstm, lstm_cell, 4), ("m_gru", gru, gru_cell, 3)]:
        nm = fam[2:]
        for T, B, I, Hd in [(64, 32, 256, 256), (128, 16, 512, 512), (32, 64, 128, 1024), (256, 8, 256, 256), (16, 128, 512, 512)]:
            pr = tree_sp({"W": (I, g * Hd), "U": (Hd, g * Hd), "b": (g * Hd,)})
            x = P(T, B, I)
            step = f"{nm}_step_b{B}i{I}h{Hd}"
            prog(fam, f"{nm}_fwd_t{T}b{B}i{I}h{Hd}", fn, pr, x, loop_body=step)
            prog(fam, f"{nm}_train_t{T}b{B}i{I}h{Hd}", train(fn), pr, x, donate=(0,), loop_body=step)
            if T <= 32:
                prog(fam, f"{nm}_fwd_unrolled_t{T}b{B}i{I}h{Hd}", lambda p, x, fn=fn, T=T: fn(p, x, unroll=T), pr, x)
            carry = (P(B, Hd), P(B, Hd, dt=F32)) if g == 4 else P(B, Hd)
            if not any(q[0] == step for q in FAM.get(fam, [])):
                prog(fam, step, lambda p, c, xt, cell=cell: cell(p["W"], p["U"], p["b"], c, xt), pr, carry, P(B, I),
                     kind="loop-body")

    def sscan(x, delta, A, Bm, Cm, assoc=False, unroll=1):
        """Selective scan: x, delta [B,L,D]; A [D,N]; Bm, Cm [B,L,N] -> y [B,L,D]."""
        dA = jnp.exp(delta.astype(F32)[..., None] * A.astype(F32))                     # [B,L,D,N]
        dBx = (delta * x).astype(F32)[..., None] * Bm.astype(F32)[:, :, None, :]
        if assoc:
            def comb(a, b):
                return (a[0] * b[0], b[0] * a[1] + b[1])
            _, h = lax.associative_scan(comb, (dA, dBx), axis=1)
            y = jnp.einsum("bldn,bln->bld", h, Cm.astype(F32))
        else:
            def step(h, t):
                a, bx, c = t
                h = a * h + bx
                return h, jnp.einsum("bdn,bn->bd", h, c)
            B, L, D, N = dA.shape
            _, y = lax.scan(step, jnp.zeros((B, D, N), F32),
                            (dA.transpose(1, 0, 2, 3), dBx.transpose(1, 0, 2, 3), Cm.astype(F32).transpose(1, 0, 2)),
                            unroll=unroll)
            y = y.transpose(1, 0, 2)
        return y.astype(x.dtype)

    def mamba(p, u, assoc=False, unroll=1):
        B, L, Dm = u.shape
        N = p["A"].shape[1]
        R = p["dt_w"].shape[0]
        xz = u @ p["in"]
        x, z = jnp.split(xz, 2, -1)
        D = x.shape[-1]
        x = conv(jnp.pad(x, ((0, 0), (3, 0), (0, 0))), p["conv"], pad="VALID", groups=D, dims=1) + p["conv_b"]
        x = jax.nn.silu(x)
        dbc = x @ p["xproj"]
        dt, Bm, Cm = dbc[..., :R], dbc[..., R:R + N], dbc[..., R + N:]
        delta = jax.nn.softplus((dt @ p["dt_w"]).astype(F32) + p["dt_b"].astype(F32)).astype(x.dtype)
        y = sscan(x, delta, -jnp.exp(p["A"].astype(F32)), Bm, Cm, assoc, unroll) + x * p["Dskip"]
        return u + (y * jax.nn.silu(z)) @ p["out"]
    for B, L, Dm, N in [(2, 256, 512, 16), (1, 1024, 768, 16), (4, 128, 1024, 16), (8, 64, 256, 16)]:
        D, R = 2 * Dm, max(1, Dm // 16)
        pr = tree_sp({"in": (Dm, 2 * D), "conv": (4, 1, D), "conv_b": (D,), "xproj": (D, R + 2 * N), "dt_w": (R, D),
                      "dt_b": (D,), "A": (D, N), "Dskip": (D,), "out": (D, Dm)})
        step = f"mamba_scan_step_b{B}d{D}n{N}"
        prog("m_mamba", f"mamba_fwd_scan_b{B}l{L}d{Dm}", mamba, pr, P(B, L, Dm), loop_body=step)
        prog("m_mamba", f"mamba_fwd_assoc_b{B}l{L}d{Dm}", lambda p, u: mamba(p, u, True), pr, P(B, L, Dm))
        prog("m_mamba", f"mamba_train_assoc_b{B}l{L}d{Dm}", train(lambda p, u: mamba(p, u, True)), pr, P(B, L, Dm), donate=(0,))
        if L <= 64:
            prog("m_mamba", f"mamba_fwd_unrolled_b{B}l{L}d{Dm}", lambda p, u, L=L: mamba(p, u, unroll=L), pr, P(B, L, Dm))

        def body(h, a, bx, c):
            h = a * h + bx
            return h, jnp.einsum("bdn,bn->bd", h, c)
        prog("m_mamba", step, body, P(B, D, N, dt=F32), P(B, D, N, dt=F32), P(B, D, N, dt=F32), P(B, N, dt=F32),
             kind="loop-body")
        prog("m_mamba", f"selective_scan_seq_b{B}l{L}d{D}n{N}", lambda x, d, A, Bm, Cm: sscan(x, d, A, Bm, Cm), P(B, L, D),
             P(B, L, D), P(D, N, dt=F32), P(B, L, N), P(B, L, N), loop_body=step)
        prog("m_mamba", f"selective_scan_assoc_b{B}l{L}d{D}n{N}", lambda x, d, A, Bm, Cm: sscan(x, d, A, Bm, Cm, True),
             P(B, L, D), P(B, L, D), P(D, N, dt=F32), P(B, L, N), P(B, L, N))


# ---------------------------------------------------------------------------- op families
ODD = [3, 7, 12, 33, 77, 96, 100, 127, 197, 257, 384, 500, 768, 1000, 1024, 1280]
DTS = {"bf16": BF, "f32": F32}


def dname(dt):
    return {BF: "bf16", F32: "f32", I32: "s32", I8: "s8"}.get(dt, jnp.dtype(dt).name)


def cap(shape, limit=1 << 23):
    """Shrink the largest dimensions until the shape holds at most limit elements."""
    shape = list(shape)
    while math.prod(shape) > limit:
        i = shape.index(max(shape))
        shape[i] = max(1, shape[i] // 2 + 1)
    return tuple(shape)


def ops_conv():
    r = random.Random(1)
    seen = set()

    def add(fam, name, *a, **k):
        if name not in seen:
            seen.add(name)
            prog(fam, name, *a, **k)
    for i in range(26):   # depthwise
        B, Hs, C, k, s = r.choice([1, 4, 8, 16]), r.choice([7, 14, 17, 28, 33, 56, 112]), r.choice([32, 96, 144, 197, 240, 384, 576, 960]), \
            r.choice([3, 5, 7]), r.choice([1, 1, 2])
        dt = r.choice([BF, BF, F32])
        add("conv_depthwise", f"dwconv_b{B}_{Hs}x{Hs}x{C}_k{k}s{s}_{dname(dt)}",
            lambda x, w, s=s: conv(x, w, stride=s, groups=x.shape[-1]), P(B, Hs, Hs, C, dt=dt), P(k, k, 1, C, dt=dt))
    for i in range(22):   # grouped
        B, Hs, G, cg = r.choice([2, 4, 8]), r.choice([7, 14, 28, 56]), r.choice([2, 4, 8, 16, 32, 64]), r.choice([4, 8, 16, 32, 64])
        C, Co, k = G * cg, G * cg * r.choice([1, 2]), r.choice([1, 3, 3, 5])
        dt = r.choice([BF, F32])
        add("conv_grouped", f"gconv_b{B}_{Hs}x{Hs}_c{C}to{Co}_g{G}_k{k}_{dname(dt)}", lambda x, w, G=G: conv(x, w, groups=G),
            P(B, Hs, Hs, C, dt=dt), P(k, k, C // G, Co, dt=dt))
    for i in range(18):   # dilated
        B, Hs, C, Co, d, k = r.choice([1, 2, 4]), r.choice([17, 28, 33, 64, 65]), r.choice([32, 64, 256, 100]), \
            r.choice([64, 256, 21]), r.choice([2, 3, 4, 6, 12]), r.choice([3, 3, 5])
        add("conv_dilated", f"dilconv_b{B}_{Hs}x{Hs}_c{C}to{Co}_k{k}d{d}", lambda x, w, d=d: conv(x, w, dil=d),
            P(B, Hs, Hs, C), P(k, k, C, Co))
    for i in range(22):   # strided / valid / odd kernels
        B, Hs, C, Co, k, s = r.choice([1, 4, 8, 32]), r.choice([15, 32, 56, 99, 224]), r.choice([3, 16, 64, 128, 256]), \
            r.choice([32, 64, 96, 128, 512]), r.choice([1, 2, 3, 4, 7, 11]), r.choice([2, 2, 3, 4])
        pad = r.choice(["SAME", "VALID"])
        add("conv_strided", f"sconv_b{B}_{Hs}x{Hs}_c{C}to{Co}_k{k}s{s}_{pad.lower()}", lambda x, w, s=s, pad=pad: conv(x, w, stride=s, pad=pad),
            P(B, Hs, Hs, C), P(k, k, C, Co))
    for i in range(22):   # 1-D
        B, L, C, Co, k, s = r.choice([1, 4, 16]), r.choice([100, 256, 1000, 3000, 4096]), r.choice([1, 80, 128, 256, 512, 768]), \
            r.choice([64, 128, 512, 768]), r.choice([2, 3, 4, 5, 9, 31]), r.choice([1, 1, 2])
        causal = r.random() < 0.4
        if causal:
            f = lambda x, w, k=k, s=s: conv(jnp.pad(x, ((0, 0), (k - 1, 0), (0, 0))), w, stride=s, pad="VALID", dims=1)
        else:
            f = lambda x, w, s=s: conv(x, w, stride=s, dims=1)
        dw = r.random() < 0.3
        if dw:
            f = lambda x, w, k=k: conv(jnp.pad(x, ((0, 0), (k - 1, 0), (0, 0))), w, pad="VALID", dims=1, groups=x.shape[-1])
            Co = C
        add("conv_1d", f"conv1d_b{B}l{L}_c{C}to{Co}_k{k}s{1 if dw else s}{'_causal' if causal or dw else ''}{'_dw' if dw else ''}",
            f, P(B, L, C), P(k, 1 if dw else C, Co))
    for i in range(16):   # 3-D
        B, D, Hs, C, Co, k, s = r.choice([1, 2]), r.choice([4, 8, 16]), r.choice([14, 28, 32, 56]), r.choice([3, 16, 32, 64]), \
            r.choice([16, 32, 64, 128]), r.choice([1, 3, 3]), r.choice([1, 1, 2])
        add("conv_3d", f"conv3d_b{B}_{D}x{Hs}x{Hs}_c{C}to{Co}_k{k}s{s}", lambda x, w, s=s: conv(x, w, stride=s, dims=3),
            P(B, D, Hs, Hs, C), P(k, k, k, C, Co))
    for i in range(18):   # transposed
        B, Hs, C, Co, k, s = r.choice([1, 2, 4, 8]), r.choice([7, 8, 16, 28, 32, 64]), r.choice([32, 64, 128, 256, 512]), \
            r.choice([3, 32, 64, 128, 256]), r.choice([2, 3, 4]), r.choice([2, 2, 4])
        pad = r.choice(["SAME", "VALID"])
        add("conv_transposed", f"tconv_b{B}_{Hs}x{Hs}_c{C}to{Co}_k{k}s{s}_{pad.lower()}",
            lambda x, w, s=s, pad=pad: lax.conv_transpose(x, w, (s, s), pad, dimension_numbers=("NHWC", "HWIO", "NHWC")),
            P(B, Hs, Hs, C), P(k, k, C, Co))
    for i in range(16):   # other layouts (NCHW: ported PyTorch code), forward and gradient
        B, Hs, C, Co, k = r.choice([2, 8, 16]), r.choice([14, 28, 56]), r.choice([3, 32, 64, 128]), r.choice([32, 64, 128]), r.choice([1, 3])
        lay = r.choice([("NCHW", "OIHW", "NCHW"), ("NHWC", "OIHW", "NHWC"), ("NCHW", "HWIO", "NCHW")])
        tag = "_".join(lay).lower()
        xs = P(B, C, Hs, Hs) if lay[0] == "NCHW" else P(B, Hs, Hs, C)
        ws = P(Co, C, k, k) if lay[1] == "OIHW" else P(k, k, C, Co)
        f = lambda x, w, lay=lay: conv(x, w, layout=lay)
        if i % 2:
            add("conv_layout", f"conv_{tag}_b{B}_{Hs}_c{C}to{Co}_k{k}", f, xs, ws)
        else:
            add("conv_grad", f"conv_grad_{tag}_b{B}_{Hs}_c{C}to{Co}_k{k}",
                lambda x, w, f=f: jax.grad(lambda x, w: jnp.sum(f(x, w).astype(F32) ** 2), (0, 1))(x, w), xs, ws)
    for i in range(12):   # gradients of depthwise / grouped / strided (NHWC)
        B, Hs, C, k, s, G = r.choice([4, 8]), r.choice([14, 28, 56]), r.choice([64, 96, 144, 384]), r.choice([3, 5, 7]), r.choice([1, 2]), \
            r.choice([0, 0, 4, 32])
        g = C if G == 0 else G
        add("conv_grad", f"conv_grad_b{B}_{Hs}x{Hs}x{C}_k{k}s{s}_g{g}",
            lambda x, w, s=s, g=g: jax.grad(lambda x, w: jnp.sum(conv(x, w, stride=s, groups=g).astype(F32) ** 2), (0, 1))(x, w),
            P(B, Hs, Hs, C), P(k, k, C // g, C))


def ops_data():
    r = random.Random(2)
    seen = set()

    def add(fam, name, *a, **k):
        if name not in seen:
            seen.add(name)
            prog(fam, name, *a, **k)
    for i in range(24):   # gather
        N, D, M = r.choice([1000, 30522, 32000, 50257, 8192, 197]), r.choice([64, 128, 384, 768, 1024, 4096]), r.choice([1, 7, 128, 1000, 4096, 8192])
        dt = r.choice([BF, F32])
        form = r.choice(["rows", "take_axis1", "along", "points", "bag"])
        if form == "rows":
            add("gather", f"gather_rows_{N}x{D}_m{M}_{dname(dt)}", lambda t, i: t[i], P(N, D, dt=dt), P(M, dt=I32))
        elif form == "take_axis1":
            add("gather", f"gather_axis1_{D}x{N}_m{M}_{dname(dt)}", lambda t, i: jnp.take(t, i, axis=1), P(D, N, dt=dt), P(M, dt=I32))
        elif form == "along":
            B, K = r.choice([8, 32, 128]), r.choice([1, 2, 8, 64])
            add("gather", f"gather_along_b{B}n{N}_k{K}_{dname(dt)}", lambda t, i: jnp.take_along_axis(t, i, axis=1),
                P(B, N, dt=dt), P(B, K, dt=I32))
        elif form == "points":
            add("gather", f"gather_points_{N}x{D}_m{M}_{dname(dt)}", lambda t, i, j: t[i, j], P(N, D, dt=dt), P(M, dt=I32), P(M, dt=I32))
        else:
            B, K = r.choice([16, 64, 256]), r.choice([4, 16, 50])
            add("gather", f"embedding_bag_{N}x{D}_b{B}k{K}_{dname(dt)}", lambda t, i: t[i].sum(1), P(N, D, dt=dt), P(B, K, dt=I32))
    for i in range(24):   # scatter
        N, D, M = r.choice([1000, 8192, 32000, 50257, 197]), r.choice([64, 128, 768, 1024]), r.choice([1, 16, 512, 4096, 8192])
        dt = r.choice([BF, F32])
        form = r.choice(["add", "set", "max", "segment", "axis1", "grad"])
        if form == "add":
            add("scatter", f"scatter_add_{N}x{D}_m{M}_{dname(dt)}", lambda t, i, u: t.at[i].add(u), P(N, D, dt=dt), P(M, dt=I32), P(M, D, dt=dt))
        elif form == "set":
            add("scatter", f"scatter_set_{N}x{D}_m{M}_{dname(dt)}", lambda t, i, u: t.at[i].set(u), P(N, D, dt=dt), P(M, dt=I32), P(M, D, dt=dt))
        elif form == "max":
            add("scatter", f"scatter_max_{N}x{D}_m{M}_f32", lambda t, i, u: t.at[i].max(u), P(N, D, dt=F32), P(M, dt=I32), P(M, D, dt=F32))
        elif form == "segment":
            add("scatter", f"segment_sum_m{M}x{D}_n{N}_{dname(dt)}", lambda u, i, N=N: jax.ops.segment_sum(u, i, num_segments=N),
                P(M, D, dt=dt), P(M, dt=I32))
        elif form == "axis1":
            add("scatter", f"scatter_add_axis1_{D}x{N}_m{M}_{dname(dt)}", lambda t, i, u: t.at[:, i].add(u),
                P(D, N, dt=dt), P(M, dt=I32), P(D, M, dt=dt))
        else:
            add("scatter", f"embedding_grad_{N}x{D}_m{M}_{dname(dt)}",
                lambda t, i: jax.grad(lambda t: jnp.sum(t[i].astype(F32) ** 2))(t), P(N, D, dt=dt), P(M, dt=I32))
    for i in range(22):   # sort
        shape = cap((r.choice([1, 8, 64, 128, 1000]), r.choice([100, 1000, 4096, 32000, 50257, 65536])), 1 << 21)
        dt = r.choice([BF, F32, I32])
        form = r.choice(["sort", "sort0", "argsort", "kv", "desc"])
        if form == "sort":
            add("sort", f"sort_{shape[0]}x{shape[1]}_{dname(dt)}", lambda x: jnp.sort(x, axis=-1), P(*shape, dt=dt))
        elif form == "sort0":
            add("sort", f"sort_axis0_{shape[1]}x{shape[0]}_{dname(dt)}", lambda x: jnp.sort(x, axis=0), P(shape[1], shape[0], dt=dt))
        elif form == "argsort":
            add("sort", f"argsort_{shape[0]}x{shape[1]}_{dname(dt)}", lambda x: jnp.argsort(x, axis=-1), P(*shape, dt=dt))
        elif form == "kv":
            add("sort", f"sort_kv_{shape[0]}x{shape[1]}_{dname(dt)}", lambda k, v: lax.sort((k, v), dimension=1, num_keys=1),
                P(*shape, dt=dt), P(*shape, dt=F32))
        else:
            add("sort", f"sort_desc_{shape[0]}x{shape[1]}_{dname(dt)}", lambda x: -jnp.sort(-x, axis=-1), P(*shape, dt=dt))
    for i in range(22):   # top_k
        B, N, k = r.choice([1, 8, 32, 128, 1024]), r.choice([128, 1000, 32000, 50257, 8, 64, 4096]), r.choice([1, 2, 4, 8, 40, 64, 128])
        k = min(k, N)
        dt = r.choice([BF, F32])
        if r.random() < 0.25:
            add("top_k", f"approx_max_k_b{B}n{N}k{k}_{dname(dt)}", lambda x, k=k: lax.approx_max_k(x, k), P(B, N, dt=dt))
        else:
            add("top_k", f"top_k_b{B}n{N}k{k}_{dname(dt)}", lambda x, k=k: lax.top_k(x, k), P(B, N, dt=dt))
    for i in range(28):   # cumulative
        shape = cap(tuple(r.choice([8, 33, 128, 197, 1000, 1024, 4096, 20000]) for _ in range(r.choice([1, 2, 2, 3]))), 1 << 20)
        ax = r.randrange(len(shape))
        dt = r.choice([BF, F32, I32])
        op = r.choice(["cumsum", "cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp"])
        if op == "cumlogsumexp" and dt == I32:
            dt = F32
        rev = r.random() < 0.25
        fn = {"cumsum": lax.cumsum, "cumprod": lax.cumprod, "cummax": lax.cummax, "cummin": lax.cummin,
              "cumlogsumexp": lax.cumlogsumexp}[op]
        add("cumulative", f"{op}_{'x'.join(map(str, shape))}_ax{ax}{'_rev' if rev else ''}_{dname(dt)}",
            lambda x, fn=fn, ax=ax, rev=rev: fn(x, axis=ax, reverse=rev), P(*shape, dt=dt))
    for T, B, D in [(128, 8, 256), (1000, 4, 128), (64, 64, 64)]:   # the scan form (a while loop) and its body
        step = f"cumsum_scan_step_b{B}d{D}"
        add("cumulative", f"cumsum_scan_t{T}b{B}d{D}", lambda x: lax.scan(lambda c, xt: (c + xt, c + xt), jnp.zeros(x.shape[1:], x.dtype), x)[1],
            P(T, B, D, dt=F32), loop_body=step)
        add("cumulative", step, lambda c, xt: (c + xt, c + xt), P(B, D, dt=F32), P(B, D, dt=F32), kind="loop-body")
    for i in range(26):   # pad / concatenate / slice / roll
        rank = r.choice([2, 3, 4])
        shape = cap(tuple(r.choice([3, 7, 16, 33, 64, 128, 197, 256, 1000]) for _ in range(rank)), 1 << 22)
        dt = r.choice([BF, F32, I8])
        form = r.choice(["pad", "pad_edge", "concat", "slice", "strided_slice", "roll", "split"])
        sh = "x".join(map(str, shape))
        if form == "pad":
            pw = tuple((r.choice([0, 1, 3]), r.choice([0, 1, 5])) for _ in range(rank))
            add("pad", f"pad_{sh}_{'_'.join('%d-%d' % p for p in pw)}_{dname(dt)}", lambda x, pw=pw: jnp.pad(x, pw), P(*shape, dt=dt))
        elif form == "pad_edge":
            pw = tuple((r.choice([0, 2]), r.choice([1, 3])) for _ in range(rank))
            mode = r.choice(["edge", "reflect"])
            add("pad", f"pad_{mode}_{sh}_{'_'.join('%d-%d' % p for p in pw)}_{dname(dt)}", lambda x, pw=pw, mode=mode: jnp.pad(x, pw, mode=mode),
                P(*shape, dt=dt))
        elif form == "concat":
            ax, n = r.randrange(rank), r.choice([2, 3, 4])
            shapes = [tuple(d if j != ax else r.choice([1, 7, 64, 100, 128]) for j, d in enumerate(shape)) for _ in range(n)]
            add("concat_slice", f"concat_ax{ax}_{'_'.join('x'.join(map(str, s)) for s in shapes)}_{dname(dt)}",
                lambda *xs, ax=ax: jnp.concatenate(xs, ax), *[P(*s, dt=dt) for s in shapes])
        elif form == "slice":
            st = tuple(r.randrange(max(1, d // 3)) for d in shape)
            add("concat_slice", f"slice_{sh}_from{'-'.join(map(str, st))}_{dname(dt)}", lambda x, st=st: x[tuple(slice(s, None) for s in st)] * 2,
                P(*shape, dt=dt))
        elif form == "strided_slice":
            ax, s = r.randrange(rank), r.choice([2, 3, 4])
            add("concat_slice", f"strided_slice_{sh}_ax{ax}s{s}_{dname(dt)}",
                lambda x, ax=ax, s=s: x[tuple(slice(None, None, s) if j == ax else slice(None) for j in range(x.ndim))], P(*shape, dt=dt))
        elif form == "roll":
            ax = r.randrange(rank)
            sft = r.randrange(1, max(2, shape[ax]))
            add("concat_slice", f"roll_{sh}_ax{ax}_{sft}_{dname(dt)}", lambda x, ax=ax, sft=sft: jnp.roll(x, sft, ax), P(*shape, dt=dt))
        else:
            ax = r.randrange(rank)
            n = r.choice([2, 3, 4])
            shape = tuple(d * n if j == ax else d for j, d in enumerate(shape))
            sh = "x".join(map(str, shape))
            add("concat_slice", f"split{n}_{sh}_ax{ax}_{dname(dt)}",
                lambda x, ax=ax, n=n: [y * (j + 1) for j, y in enumerate(jnp.split(x, n, ax))] if dt != I8 else jnp.split(x, n, ax),
                P(*shape, dt=dt))
    for i in range(22):   # reduce-window (pooling)
        nd = r.choice([1, 2, 2, 2])
        B, C = r.choice([1, 8, 32]), r.choice([3, 64, 96, 256, 512])
        sp = (r.choice([100, 1000, 3000]),) if nd == 1 else (r.choice([7, 14, 28, 56, 112, 33]),) * 2
        w, s = r.choice([2, 3, 3, 5]), r.choice([1, 2, 2, 3])
        pad = r.choice(["SAME", "VALID"])
        kind = r.choice(["max", "avg", "max_grad"])
        win, strd = (1,) + (w,) * nd + (1,), (1,) + (s,) * nd + (1,)
        dt = r.choice([BF, F32])
        shp = (B,) + sp + (C,)
        nm = f"{kind}pool{nd}d_{'x'.join(map(str, shp))}_w{w}s{s}_{pad.lower()}_{dname(dt)}"

        def mp(x, win=win, strd=strd, pad=pad):
            return lax.reduce_window(x, -jnp.inf, lax.max, win, strd, pad)

        def ap(x, win=win, strd=strd, pad=pad):
            return (lax.reduce_window(x.astype(F32), 0.0, lax.add, win, strd, pad) / math.prod(win)).astype(x.dtype)
        f = {"max": mp, "avg": ap, "max_grad": lambda x, mp=mp: jax.grad(lambda x: jnp.sum(mp(x).astype(F32) ** 2))(x)}[kind]
        add("reduce_window", nm, f, P(*shp, dt=dt))
    for i in range(22):   # dynamic-update-slice / dynamic-slice (KV caches), donated or not
        L, B, S, H, Dh = r.choice([1, 1, 4]), r.choice([1, 4, 8, 16]), r.choice([512, 1024, 2048, 4096]), r.choice([8, 16, 32]), r.choice([64, 128])
        dt = r.choice([BF, F32])
        n = r.choice([1, 1, 16])
        don = r.random() < 0.5
        form = r.choice(["dus", "dus", "at_set", "dslice"])
        if L > 1:
            cache = P(L, B, S, H, Dh, dt=dt)
            upd = P(L, B, n, H, Dh, dt=dt)
            f = lambda c, u, pos: lax.dynamic_update_slice(c, u, (0, 0, pos, 0, 0))
            nm = f"dus_cache_l{L}b{B}s{S}h{H}d{Dh}_n{n}_{dname(dt)}"
        else:
            cache, upd = P(B, S, H, Dh, dt=dt), P(B, n, H, Dh, dt=dt)
            if form == "at_set":
                upd = P(B, H, Dh, dt=dt)
                f = lambda c, u, pos: c.at[:, pos].set(u)
                nm = f"at_set_cache_b{B}s{S}h{H}d{Dh}_{dname(dt)}"
            elif form == "dslice":
                f = lambda c, u, pos, n=n: (lax.dynamic_slice_in_dim(c, pos, n, 1) + u).sum(1)
                nm = f"dslice_cache_b{B}s{S}h{H}d{Dh}_n{n}_{dname(dt)}"
                don = False
            else:
                f = lambda c, u, pos: lax.dynamic_update_slice(c, u, (0, pos, 0, 0))
                nm = f"dus_cache_b{B}s{S}h{H}d{Dh}_n{n}_{dname(dt)}"
        add("dynamic_update_slice", nm + ("_donated" if don else ""), f, cache, upd, P(dt=I32), donate=(0,) if don else ())


def ops_math():
    r = random.Random(3)
    seen = set()

    def add(fam, name, *a, **k):
        if name not in seen:
            seen.add(name)
            prog(fam, name, *a, **k)
    for i in range(32):   # reductions over each axis set
        rank = r.choice([2, 3, 3, 4])
        shape = cap(tuple(r.choice([3, 8, 33, 64, 128, 197, 256, 1000, 1024, 4096]) for _ in range(rank)), 1 << 23)
        axes = tuple(sorted(r.sample(range(rank), r.randrange(1, rank + 1))))
        op = r.choice(["sum", "max", "min", "mean", "argmax", "logsumexp", "var", "prod", "any", "sumsq"])
        dt = r.choice([BF, F32, I32]) if op in ("sum", "max", "min") else r.choice([BF, F32])
        if op == "any":
            dt = jnp.bool_
        fn = {"sum": lambda x, a: x.sum(a), "max": lambda x, a: x.max(a), "min": lambda x, a: x.min(a),
              "mean": lambda x, a: x.astype(F32).mean(a), "argmax": lambda x, a: jnp.argmax(x, axis=a[0]),
              "logsumexp": lambda x, a: jax.nn.logsumexp(x.astype(F32), a), "var": lambda x, a: x.astype(F32).var(a),
              "prod": lambda x, a: x.prod(a), "any": lambda x, a: x.any(a), "sumsq": lambda x, a: jnp.square(x.astype(F32)).sum(a)}[op]
        if op == "argmax":
            axes = axes[:1]
        add("reduction", f"reduce_{op}_{'x'.join(map(str, shape))}_ax{''.join(map(str, axes))}_{dname(dt)}",
            lambda x, fn=fn, axes=axes: fn(x, axes), P(*shape, dt=dt))
    for i in range(28):   # transposes
        rank = r.choice([2, 3, 3, 4, 4, 5])
        shape = cap(tuple(r.choice([2, 3, 8, 12, 16, 33, 64, 128, 197, 256, 1000]) for _ in range(rank)), 1 << 22)
        perm = list(range(rank))
        while perm == sorted(perm):
            r.shuffle(perm)
        dt = r.choice([BF, F32, I8, I32])
        plus = r.random() < 0.5
        add("transpose", f"transpose_{'x'.join(map(str, shape))}_p{''.join(map(str, perm))}{'_fused' if plus else ''}_{dname(dt)}",
            (lambda x, p=tuple(perm): jnp.transpose(x, p) + 1) if plus else (lambda x, p=tuple(perm): jnp.transpose(x, p)), P(*shape, dt=dt))
    letters = "abcdefghij"
    for fam, lo, hi, count in [("einsum_rank2_3", 2, 3, 30), ("einsum_rank4_5", 4, 5, 30)]:
        made = 0
        while made < count:
            nb, nc = r.choice([0, 1, 1, 2]), r.choice([1, 1, 2])
            nl, nr = r.choice([0, 1, 1, 2]), r.choice([0, 1, 1, 2])
            ra, rb = nb + nc + nl, nb + nc + nr
            if not (lo <= max(ra, rb) <= hi and ra >= 1 and rb >= 1):
                continue
            ls = iter(letters)
            bd, cd, ld, rd = [[next(ls) for _ in range(n)] for n in (nb, nc, nl, nr)]
            size = {c: r.choice([1, 3, 8, 16, 33, 64, 96, 128, 197, 256, 512, 1000, 1024]) for c in bd + cd + ld + rd}
            for c in bd:
                size[c] = r.choice([2, 4, 8, 12, 16, 32])
            A, Bs = bd + cd + ld, bd + cd + rd
            r.shuffle(A)
            r.shuffle(Bs)
            O = bd + ld + rd
            r.shuffle(O)
            if math.prod(size[c] for c in A) > 1 << 22 or math.prod(size[c] for c in Bs) > 1 << 22 \
                    or math.prod(size[c] for c in set(A + Bs)) > 1 << 33:
                continue
            dt = r.choice([BF, BF, F32])
            spec = f"{''.join(A)},{''.join(Bs)}->{''.join(O)}"
            nm = f"einsum_{''.join(A)}_{''.join(Bs)}_{''.join(O)}_" + "_".join(f"{c}{size[c]}" for c in sorted(size)) + f"_{dname(dt)}"
            if nm in seen:
                continue
            add(fam, nm, lambda a, b, spec=spec: jnp.einsum(spec, a, b), P(*[size[c] for c in A], dt=dt), P(*[size[c] for c in Bs], dt=dt))
            made += 1
    for i in range(30):   # GEMMs of odd shapes and dtypes (int8, fp8, weight-only int8)
        m, k, n = (r.choice([1, 7, 33, 100, 197, 257, 1000, 1024, 2048, 3000, 4096]) for _ in range(3))
        kind = r.choice(["bf16", "f32", "int8", "int8", "w8a16", "fp8", "fp8"] if FP8 is not None else ["bf16", "f32", "int8", "w8a16"])
        nm = f"gemm_{kind}_{m}x{k}x{n}"
        if kind == "int8":
            add("gemm_dtype", nm, lambda a, b: lax.dot(a, b, preferred_element_type=I32), P(m, k, dt=I8), P(k, n, dt=I8))
        elif kind == "w8a16":
            add("gemm_dtype", nm, lambda a, w, s: a @ (w.astype(BF) * s), P(m, k, dt=BF), P(k, n, dt=I8), P(n, dt=BF))
        elif kind == "fp8":
            add("gemm_dtype", nm, lambda a, b: lax.dot(a, b, preferred_element_type=F32), P(m, k, dt=FP8), P(k, n, dt=FP8))
        else:
            add("gemm_dtype", nm, lambda a, b: a @ b, P(m, k, dt=DTS[kind]), P(k, n, dt=DTS[kind]))
    for i in range(14):   # quantize / dequantize
        m, n = r.choice([128, 1000, 4096]), r.choice([197, 1024, 4096, 11008])
        form = r.choice(["quant_int8", "dequant_matmul", "fp8_cast"] if FP8 is not None else ["quant_int8", "dequant_matmul"])
        if form == "quant_int8":
            add("quantize", f"quant_int8_{m}x{n}", lambda x: (lambda s: (jnp.clip(jnp.round(x.astype(F32) / s), -127, 127).astype(I8), s))(
                jnp.max(jnp.abs(x.astype(F32)), -1, keepdims=True) / 127), P(m, n))
        elif form == "fp8_cast":
            add("quantize", f"fp8_cast_{m}x{n}", lambda x, s: (x.astype(F32) * s).astype(FP8), P(m, n), P(dt=F32))
        else:
            k = r.choice([512, 1024, 4096])
            add("quantize", f"dequant_matmul_{m}x{k}x{n}", lambda a, q, s: (lax.dot(a, q, preferred_element_type=I32).astype(F32) * s).astype(BF),
                P(m, k, dt=I8), P(k, n, dt=I8), P(n, dt=F32))
    unary = [jnp.exp, jnp.tanh, jax.nn.sigmoid, jnp.log1p, lax.rsqrt, jax.scipy.special.erf, jnp.abs, jnp.sin, jnp.square,
             lambda x: jnp.clip(x, -1, 1), jax.nn.gelu, jax.nn.softplus]
    for i in range(24):   # element-wise chains with broadcasts
        rank = r.choice([2, 3, 4])
        shape = cap(tuple(r.choice([3, 16, 33, 128, 197, 256, 1000, 1024, 4096]) for _ in range(rank)), 1 << 22)
        bshape = tuple(d if r.random() < 0.5 else 1 for d in shape)
        ops = [r.randrange(len(unary)) for _ in range(r.choice([1, 2, 4, 8]))]
        dt = r.choice([BF, F32])
        sel = r.random() < 0.3
        out_dt = r.choice([None, None, BF, F32])

        def f(x, y, ops=tuple(ops), sel=sel, out_dt=out_dt):
            z = x * y + y
            for o in ops:
                z = unary[o](z)
            if sel:
                z = jnp.where(x > y, z, -z)
            return z if out_dt is None else z.astype(out_dt)
        add("elementwise", f"ew_{'x'.join(map(str, shape))}_by{'x'.join(map(str, bshape))}_ops{'-'.join(map(str, ops))}"
            f"{'_sel' if sel else ''}{'_to' + dname(out_dt) if out_dt else ''}_{dname(dt)}", f, P(*shape, dt=dt), P(*bshape, dt=dt))
    for i in range(20):   # norms and softmax on odd shapes, forward and gradient
        shape = cap((r.choice([8, 32, 197 * 8, 1000, 4096]), r.choice([77, 197, 384, 768, 1000, 1280, 32000])), 1 << 23)
        kind = r.choice(["layernorm", "rmsnorm", "softmax", "log_softmax", "groupnorm"])
        dt = r.choice([BF, F32])
        grad = r.random() < 0.4
        sh = "x".join(map(str, shape))
        if kind == "layernorm":
            f, args = (lambda x, g, b: ln(x, g, b)), [P(*shape, dt=dt), P(shape[1], dt=dt), P(shape[1], dt=dt)]
        elif kind == "rmsnorm":
            f, args = (lambda x, g: rms(x, g)), [P(*shape, dt=dt), P(shape[1], dt=dt)]
        elif kind == "softmax":
            f, args = (lambda x: jax.nn.softmax(x, -1)), [P(*shape, dt=dt)]
        elif kind == "log_softmax":
            f, args = (lambda x: jax.nn.log_softmax(x, -1)), [P(*shape, dt=dt)]
        else:
            B, Hs, C = r.choice([2, 8]), r.choice([16, 32, 64]), r.choice([64, 128, 320])
            sh = f"{B}x{Hs}x{Hs}x{C}"
            f, args = (lambda x, g, b: gn(x, g, b)), [P(B, Hs, Hs, C, dt=dt), P(C, dt=dt), P(C, dt=dt)]
        if grad:
            f0 = f
            f = lambda *a, f0=f0: jax.grad(lambda *a: jnp.sum(f0(*a).astype(F32) ** 2), tuple(range(len(a))))(*a)
        add("norm_softmax", f"{kind}{'_grad' if grad else ''}_{sh}_{dname(dt)}", f, *args)
    for i in range(20):   # attention variants: MQA, cross-attention, odd lengths, f32, biases; forward and backward
        B, S, T, H, Dh = r.choice([1, 2, 4, 8]), r.choice([1, 77, 128, 197, 500, 1024]), r.choice([77, 197, 256, 1000, 1500, 2048]), \
            r.choice([4, 8, 12, 16]), r.choice([64, 80, 96, 128])
        kvh = r.choice([1, H])
        causal = S == T and r.random() < 0.5
        dt = r.choice([BF, BF, F32])
        bwd = r.random() < 0.35

        def f(q, k, v, causal=causal, H=H, kvh=kvh):
            if kvh == 1:
                k, v = jnp.broadcast_to(k, k.shape[:2] + (H, k.shape[3])), jnp.broadcast_to(v, v.shape[:2] + (H, v.shape[3]))
            return attend(q, k, v, causal=causal)
        if bwd:
            f0 = f
            f = lambda q, k, v, f0=f0: jax.grad(lambda q, k, v: jnp.sum(f0(q, k, v).astype(F32) ** 2), (0, 1, 2))(q, k, v)
        add("attention_var", f"attn{'_bwd' if bwd else ''}_b{B}q{S}k{T}h{H}kv{kvh}d{Dh}{'_causal' if causal else ''}_{dname(dt)}",
            f, P(B, S, H, Dh, dt=dt), P(B, T, kvh, Dh, dt=dt), P(B, T, kvh, Dh, dt=dt))
    for i in range(12):   # random numbers and dropout
        shape = cap((r.choice([8, 128, 1024, 4096]), r.choice([197, 768, 1024, 4096])), 1 << 23)
        kind = r.choice(["normal", "uniform", "dropout", "bernoulli"])
        sh = "x".join(map(str, shape))
        if kind == "dropout":
            add("random", f"dropout_{sh}", lambda k, x: jnp.where(jax.random.bernoulli(jax.random.wrap_key_data(k), 0.9, x.shape), x / 0.9, 0).astype(x.dtype),
                P(2, dt=jnp.uint32), P(*shape))
        else:
            fn = {"normal": lambda k, s: jax.random.normal(k, s, BF), "uniform": lambda k, s: jax.random.uniform(k, s),
                  "bernoulli": lambda k, s: jax.random.bernoulli(k, 0.5, s)}[kind]
            add("random", f"random_{kind}_{sh}", lambda k, fn=fn, s=shape: fn(jax.random.wrap_key_data(k), s), P(2, dt=jnp.uint32))
    for i in range(12):   # optimizers on parameter trees of odd shapes
        shapes = [cap((r.choice([197, 768, 1000, 3072, 32000]), r.choice([64, 768, 1024, 4096])), 1 << 22) for _ in range(r.choice([1, 3, 6]))]
        kind = r.choice(["lion", "adafactor", "adam_clip", "nesterov"])
        tree = [P(*s, dt=F32) for s in shapes]

        def upd(ps, ms, vs, gs, kind=kind):
            if kind == "adam_clip":
                n = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in gs))
                gs = [g * jnp.minimum(1.0, 1.0 / (n + 1e-6)) for g in gs]
            out = []
            for p, m, v, g in zip(ps, ms, vs, gs):
                if kind == "lion":
                    u = jnp.sign(0.9 * m + 0.1 * g)
                    out.append((p - 1e-4 * (u + 0.01 * p), 0.99 * m + 0.01 * g, v))
                elif kind == "adafactor":
                    g2 = jnp.square(g) + 1e-30
                    rr = 0.8 * m[:, :1] + 0.2 * g2.mean(1, keepdims=True)
                    cc = 0.8 * v[:1, :] + 0.2 * g2.mean(0, keepdims=True)
                    vh = rr * cc / rr.mean()
                    out.append((p - 1e-3 * g * lax.rsqrt(vh), jnp.broadcast_to(rr, m.shape), jnp.broadcast_to(cc, v.shape)))
                elif kind == "nesterov":
                    m2 = 0.9 * m + g
                    out.append((p - 1e-2 * (g + 0.9 * m2), m2, v))
                else:
                    m2, v2 = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
                    out.append((p - 1e-3 * m2 / (jnp.sqrt(v2) + 1e-8), m2, v2))
            return out
        add("optimizer", f"opt_{kind}_" + "_".join("x".join(map(str, s)) for s in shapes), upd, tree, tree, tree, tree, donate=(0, 1, 2))


def build():
    m_resnet()
    m_mobilenet()
    m_convnext_unet()
    m_transformers()
    m_vision_speech()
    m_recurrent()
    ops_conv()
    ops_data()
    ops_math()


RATIO = 8


def ordered():
    """The order of generation, so that a run cut short covers every family: the op families
    (about 1-20 s a program) in a round-robin over their families (the first program of each,
    then the second, ...), and the model families' programs (10-60 s) likewise, forward passes
    before training steps (loop bodies first, then the smallest of each family first), one model program after every RATIO op programs
    (a model program takes 10-40 times an op program's compile time)."""
    def rr(groups):
        out, i = [], 0
        while any(i < len(g) for g in groups):
            out += [g[i] for g in groups if i < len(g)]
            i += 1
        return out
    ops = rr([[(f,) + q for q in FAM[f]] for f in sorted(FAM) if not f.startswith("m_")])
    def size(q):
        return sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(q[3], is_leaf=is_sp))
    models = [(f,) + q for f in sorted(FAM) if f.startswith("m_") for q in FAM[f] if q[1] == "loop-body"] + \
        rr([[(f,) + q for q in sorted(FAM[f], key=size) if "_train" not in q[0] and q[1] != "loop-body"]
            for f in sorted(FAM) if f.startswith("m_")]) + \
        rr([[(f,) + q for q in sorted(FAM[f], key=size) if "_train" in q[0]] for f in sorted(FAM) if f.startswith("m_")])
    out = []
    while ops or models:
        out += ops[:RATIO] + models[:1]
        ops, models = ops[RATIO:], models[1:]
    return out


def count_while(txt):
    entry = txt[txt.rfind("\nENTRY"):]
    return sum(1 for line in entry.splitlines() if " while(" in line)


def one(fam, name, kind, f, args, donate, loop_body):
    import jaxlib._hlo as H
    opts = H.HloPrintOptions()
    opts.print_large_constants = True
    rec = {"name": name, "family": fam, "category": fam, "split": split_of(name), "kind": kind, "jax": jax.__version__,
           "donate_argnums": list(donate), "chips": {}}
    if loop_body:
        rec["loop_body"] = loop_body
    hlo, compiled = None, {}
    for chip in gen.TOPOLOGIES:
        dev = gen.device(chip)
        low = jax.jit(f, donate_argnums=donate).lower(*specs(args, dev))
        if hlo is None:
            hlo = low.as_text(dialect="hlo", debug_info=True)
        c = low.compile()
        txt = c.as_text()
        ops = gen.entry_ops(txt)
        ca = c.cost_analysis()
        ca = ca[0] if isinstance(ca, list) else ca
        ms = c.memory_analysis()
        rec["chips"][chip] = {
            "topology": gen.TOPOLOGIES[chip], "device_kind": dev.device_kind, "cores_per_device": getattr(dev, "num_cores", 1),
            "estimated_cycles": sum(o[4] for o in ops), "ops": ops, "async_copies": gen.async_copies(txt),
            "unestimated": gen.unestimated_ops(txt), "while_loops": count_while(txt),
            "flops": ca.get("flops"), "bytes_accessed": ca.get("bytes accessed"),
            "transcendentals": ca.get("transcendentals"), "optimal_seconds": ca.get("optimal_seconds"),
            "memory": {"argument": ms.argument_size_in_bytes, "output": ms.output_size_in_bytes,
                       "alias": ms.alias_size_in_bytes, "temp": ms.temp_size_in_bytes,
                       "code": ms.generated_code_size_in_bytes}}
        compiled[chip] = c.runtime_executable().hlo_modules()[0].to_string(opts)
    os.makedirs(os.path.join(OUT, "compiled"), exist_ok=True)
    for chip, txt in compiled.items():
        with gzip.open(os.path.join(OUT, "compiled", f"{name}.{chip}.hlo.gz"), "wt", compresslevel=9) as fh:
            fh.write(txt)
    open(os.path.join(OUT, name + ".hlo"), "w").write(hlo)
    with open(os.path.join(OUT, name + ".json"), "w") as fh:
        json.dump(rec, fh, separators=(",", ":"))


def supervise(a):
    """Runs the generator as a worker process and restarts it without the program it spent more
    than a.timeout seconds on (a compile that long is listed in _failed.txt as a timeout)."""
    import subprocess, select
    os.makedirs(OUT, exist_ok=True)
    args = [sys.executable, os.path.abspath(__file__), "--worker", "--keep", "--out", OUT] + \
        (["--only", a.only] if a.only else []) + (["--deadline", a.deadline] if a.deadline else []) + \
        (["--retry-failed"] if a.retry_failed else [])
    kind = {q[0]: f for f in FAM for q in FAM[f]}
    while True:
        p = subprocess.Popen(args, stdout=subprocess.PIPE)
        cur, t0, killed, buf = None, time.time(), False, b""
        while True:
            rd, _, _ = select.select([p.stdout], [], [], 5)
            if rd:
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    line = line.decode(errors="replace")
                    print(line, flush=True)
                    if line.startswith("START "):
                        cur, t0 = line.split()[1], time.time()
                    elif cur and line.startswith(f"{kind.get(cur, '?')} {cur}:"):
                        cur = None
            limit = a.model_timeout if cur and kind.get(cur, "").startswith("m_") else a.timeout
            if cur and time.time() - t0 > limit:
                p.kill()
                p.wait()
                fam = kind.get(cur, "?")
                print(f"{fam} {cur}: FAILED timeout after {limit:.0f} s", flush=True)
                with open(os.path.join(OUT, "_failed.txt"), "a") as fh:
                    fh.write(f"{cur}\t{fam}\ttimeout: the compiler took more than {limit:.0f} s (4 generations)\n")
                killed = True
                break
        p.wait()
        if not killed:
            return p.returncode


def main():
    global OUT
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keep", action="store_true", help="skip programs already written (and those listed as failed)")
    ap.add_argument("--retry-failed", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated name substrings")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--deadline", default="", help="HH:MM UTC: start no program after it")
    ap.add_argument("--timeout", type=float, default=45,
                    help="seconds a program may take (all generations); beyond, the worker is killed, the program "
                         "listed as failed (timeout) and a new worker started; 0: no supervisor")
    ap.add_argument("--out", default=OUT, help="the corpus directory (default bench/fidelity/families)")
    ap.add_argument("--model-timeout", type=float, default=300, help="the same for the model families")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    OUT = os.path.abspath(a.out)
    build()
    if a.timeout and not a.worker and not a.list:
        return supervise(a)
    progs = ordered()
    names = [p[1] for p in progs]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, dup
    if a.list:
        for fam, name, kind, *_ in progs:
            print(f"{fam:22s} {split_of(name):5s} {kind:9s} {name}")
        print(len(progs), "programs in", len(FAM), "families;", sum(split_of(n) == "test" for n in names), "test")
        return 0
    os.makedirs(OUT, exist_ok=True)
    failed_path = os.path.join(OUT, "_failed.txt")
    failed = set(l.split("\t")[0] for l in open(failed_path)) if os.path.exists(failed_path) else set()
    only = [w for w in a.only.split(",") if w]
    deadline = None
    if a.deadline:
        hh, mm = map(int, a.deadline.split(":"))
        t = time.gmtime()
        deadline = time.mktime(time.struct_time((t.tm_year, t.tm_mon, t.tm_mday, hh, mm, 0, 0, 0, 0))) - time.timezone
    done = 0
    for fam, name, kind, f, args, donate, loop_body in progs:
        if only and not any(w in name for w in only):
            continue
        if a.keep and os.path.exists(os.path.join(OUT, name + ".json")):
            continue
        if a.keep and name in failed and not a.retry_failed:
            continue
        if deadline and time.time() > deadline:
            print("deadline reached", flush=True)
            break
        t0 = time.time()
        print(f"START {name}", flush=True)
        try:
            one(fam, name, kind, f, args, donate, loop_body)
            done += 1
            print(f"{fam} {name}: {time.time() - t0:.1f} s", flush=True)
        except Exception as e:  # a program the compiler (or JAX) refuses is logged, not fatal
            msg = f"{type(e).__name__}: {str(e)[:300]}".replace("\n", " ")
            print(f"{fam} {name}: FAILED {msg}", flush=True)
            if name not in failed:
                failed.add(name)
                with open(failed_path, "a") as fh:
                    fh.write(f"{name}\t{fam}\t{msg}\n")
    print(done, "written;", len(progs), "programs in", len(FAM), "families", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
