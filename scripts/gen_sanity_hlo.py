#!/usr/bin/env python3
"""Write the HLO programs of the physics sanity checks: bf16 GEMMs, the six TPU v1
applications as int8 models, and a Llama-2-70B-shaped per-chip training step.

  gen_sanity_hlo.py gemm M N K [--out-dtype f32|bf16] -o FILE.hlo
  gen_sanity_hlo.py v1 APP -o FILE.hlo [--stats]      APP: MLP0 MLP1 LSTM0 LSTM1 CNN0 CNN1
  gen_sanity_hlo.py v1-stats                           the six models' statistics as JSON
  gen_sanity_hlo.py llama70b -o FILE.hlo [--layers 80] [--batch 8] [--chips 64]

GEMMs and the v1 models are written as HLO text directly (no dependencies). The Llama
step is lowered with JAX from jax.ShapeDtypeStruct arguments, which allocates nothing;
JAX is needed only for that subcommand. Shapes and the reasons for them are in
docs/validation.md (v1, Llama) and docs/gemm-sweep.md (GEMMs).
"""
import argparse
import json
import sys


# ---------------------------------------------------------------- HLO text writer

class Hlo:
    """Builds one HLO module as text: an ENTRY computation plus scalar reducers."""

    def __init__(self, name):
        self.name = name
        self.lines = []
        self.n = 0
        self.nparam = 0
        self.reducers = {}

    def fresh(self, base):
        self.n += 1
        return f"{base}.{self.n}"

    def op(self, ty, text, base="v"):
        name = self.fresh(base)
        self.lines.append(f"  {name} = {ty} {text}")
        return name

    def param(self, ty, base="p"):
        i = self.nparam
        self.nparam += 1
        return self.op(ty, f"parameter({i})", base)

    def reducer(self, kind, dt):
        key = (kind, dt)
        if key not in self.reducers:
            self.reducers[key] = (f"{kind}_{dt}",
                                  f"{kind}_{dt} {{\n  a = {dt}[] parameter(0)\n"
                                  f"  b = {dt}[] parameter(1)\n"
                                  f"  ROOT r = {dt}[] {kind}(a, b)\n}}\n")
        return self.reducers[key][0]

    def text(self, root):
        body = list(self.lines)
        for i, line in enumerate(body):
            if line.startswith(f"  {root} = "):
                body[i] = "  ROOT " + line[2:]
        out = [f"HloModule {self.name}", ""]
        for _, comp in self.reducers.values():
            out.append(comp)
        out.append("ENTRY main {")
        out += body
        out.append("}")
        return "\n".join(out) + "\n"


def shape(dt, dims):
    layout = ",".join(str(i) for i in reversed(range(len(dims))))
    return f"{dt}[{','.join(str(d) for d in dims)}]{{{layout}}}"


def scalar_bcast(h, dt, value, dims):
    c = h.op(f"{dt}[]", f"constant({value})", "c")
    return h.op(shape(dt, dims), f"broadcast({c}), dimensions={{}}", "b")


# ---------------------------------------------------------------- GEMM

def gemm(m, n, k, out_dtype):
    h = Hlo(f"gemm_{m}x{n}x{k}")
    a = h.param(shape("bf16", [m, k]), "a")
    b = h.param(shape("bf16", [k, n]), "b")
    d = h.op(shape(out_dtype, [m, n]),
             f"dot({a}, {b}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}", "d")
    return h.text(d)


# ---------------------------------------------------------------- TPU v1 models (int8)
#
# Inference as v1 runs it: int8 activations and weights, int32 accumulators, then the
# activation step (ReLU or the LSTM gate functions) and requantisation back to int8.
# Requantisation is modelled as an arithmetic shift right by 8 and a clamp to [-128, 127]
# (assumption: a fixed-point rescale; the exact scale does not change the work).

class V1Model:
    def __init__(self, name):
        self.h = Hlo(name)
        self.weights = 0     # int8 weight count
        self.macs = 0        # multiply-accumulates per batch
        self.fc = 0
        self.conv = 0
        self.pool = 0
        self.vector = 0

    def requant(self, acc, dims, relu):
        h = self.h
        if relu:
            acc = h.op(shape("s32", dims), f"maximum({acc}, {scalar_bcast(h, 's32', 0, dims)})", "relu")
        sh = h.op(shape("s32", dims),
                  f"shift-right-arithmetic({acc}, {scalar_bcast(h, 's32', 8, dims)})", "rescale")
        lo = h.op("s32[]", "constant(-128)", "c")
        hi = h.op("s32[]", "constant(127)", "c")
        cl = h.op(shape("s32", dims), f"clamp({lo}, {sh}, {hi})", "clamp")
        return h.op(shape("s8", dims), f"convert({cl})", "q")

    def fc_layer(self, x, b, k, n, relu=True, requant=True):
        h = self.h
        w = h.param(shape("s8", [k, n]), "w")
        acc = h.op(shape("s32", [b, n]),
                   f"dot({x}, {w}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}", "fc")
        self.weights += k * n
        self.macs += b * k * n
        self.fc += 1
        return self.requant(acc, [b, n], relu) if requant else acc

    def conv_layer(self, x, b, hw, cin, cout, ksize):
        h = self.h
        w = h.param(shape("s8", [ksize, ksize, cin, cout]), "w")
        p = ksize // 2
        acc = h.op(shape("s32", [b, hw, hw, cout]),
                   f"convolution({x}, {w}), window={{size={ksize}x{ksize} pad={p}_{p}x{p}_{p}}}, "
                   f"dim_labels=b01f_01io->b01f", "conv")
        self.weights += ksize * ksize * cin * cout
        self.macs += b * hw * hw * ksize * ksize * cin * cout
        self.conv += 1
        return self.requant(acc, [b, hw, hw, cout], True)

    def max_pool(self, x, b, hw, c, stride):
        """3x3 'same' pooling at stride 1, or 2x2 at stride 2 (odd sizes padded up)."""
        h = self.h
        init = h.op("s8[]", "constant(-128)", "c")
        red = h.reducer("maximum", "s8")
        if stride == 1:
            win, out = "size=1x3x3x1 pad=0_0x1_1x1_1x0_0", hw
        else:
            out = (hw + 1) // 2
            e = out * 2 - hw
            win = f"size=1x2x2x1 stride=1x2x2x1 pad=0_0x0_{e}x0_{e}x0_0"
        self.pool += 1
        return h.op(shape("s8", [b, out, out, c]),
                    f"reduce-window({x}, {init}), window={{{win}}}, to_apply={red}", "pool"), out

    def lstm_cell(self, x, hprev, cprev, b, hid):
        """One LSTM layer step: gates = [x, h] W (int8 MXU), then the gate functions in
        f32 on the vector unit; returns int8 h and f32 c."""
        h = self.h
        xh = h.op(shape("s8", [b, 2 * hid]), f"concatenate({x}, {hprev}), dimensions={{1}}", "xh")
        g = self.fc_layer(xh, b, 2 * hid, 4 * hid, relu=False, requant=False)
        gf = h.op(shape("f32", [b, 4 * hid]), f"convert({g})", "gf")
        gf = h.op(shape("f32", [b, 4 * hid]),
                  f"multiply({gf}, {scalar_bcast(h, 'f32', '0.0001', [b, 4 * hid])})", "scale")

        def part(i):
            return h.op(shape("f32", [b, hid]),
                        f"slice({gf}), slice={{[0:{b}], [{i * hid}:{(i + 1) * hid}]}}", "gate")
        gi, gfo, go, gg = part(0), part(1), part(2), part(3)
        dims = [b, hid]
        i_ = h.op(shape("f32", dims), f"logistic({gi})", "i")
        f_ = h.op(shape("f32", dims), f"logistic({gfo})", "f")
        o_ = h.op(shape("f32", dims), f"logistic({go})", "o")
        g_ = h.op(shape("f32", dims), f"tanh({gg})", "g")
        fc = h.op(shape("f32", dims), f"multiply({f_}, {cprev})", "fc")
        ig = h.op(shape("f32", dims), f"multiply({i_}, {g_})", "ig")
        c = h.op(shape("f32", dims), f"add({fc}, {ig})", "c")
        tc = h.op(shape("f32", dims), f"tanh({c})", "tc")
        hn = h.op(shape("f32", dims), f"multiply({o_}, {tc})", "h")
        hs = h.op(shape("f32", dims), f"multiply({hn}, {scalar_bcast(h, 'f32', 127, dims)})", "hs")
        hr = h.op(shape("f32", dims), f"round-nearest-even({hs})", "hr")
        hq = h.op(shape("s8", dims), f"convert({hr})", "hq")
        self.vector += 1
        return hq, c


def v1_mlp(name, batch, dims):
    m = V1Model(name)
    x = m.h.param(shape("s8", [batch, dims[0]]), "x")
    for i in range(len(dims) - 1):
        x = m.fc_layer(x, batch, dims[i], dims[i + 1])
    return m, x


def v1_lstm(name, batch, hid, cells, proj_every):
    """`cells` stacked LSTM layers of hidden size `hid` (one time step), with an extra
    hid x hid projection FC after every `proj_every`-th cell (0: none)."""
    m = V1Model(name)
    x = m.h.param(shape("s8", [batch, hid]), "x")
    outs = []
    for layer in range(cells):
        hp = m.h.param(shape("s8", [batch, hid]), "h_prev")
        cp = m.h.param(shape("f32", [batch, hid]), "c_prev")
        x, c = m.lstm_cell(x, hp, cp, batch, hid)
        outs.append(c)
        if proj_every and layer % proj_every == proj_every - 1 and layer + 1 < cells:
            x = m.fc_layer(x, batch, hid, hid)
    root = m.h.op("(" + ", ".join([shape("s8", [batch, hid])] + [shape("f32", [batch, hid])] * len(outs)) + ")",
                  f"tuple({', '.join([x] + outs)})", "out")
    return m, root


def v1_cnn0():
    """16 conv layers on a 19x19 board (MACs per weight byte = batch x 361 = 2888)."""
    b, hw = 8, 19
    m = V1Model("CNN0")
    x = m.h.param(shape("s8", [b, hw, hw, 48]), "x")
    x = m.conv_layer(x, b, hw, 48, 256, 5)
    for _ in range(13):
        x = m.conv_layer(x, b, hw, 256, 256, 3)
    for _ in range(2):
        x = m.conv_layer(x, b, hw, 256, 256, 1)
    return m, x


def v1_cnn1():
    """72 conv layers in three stages (128, 256, 512 channels at 22, 11, 6 pixels),
    13 max-pools (2 downsampling, 11 stride-1 3x3), then 4 FC layers."""
    b = 32
    m = V1Model("CNN1")
    stages = [(128, 22, 25, 4), (256, 11, 25, 4), (512, 6, 22, 3)]   # channels, size, convs, s1 pools
    cin = 128
    x = m.h.param(shape("s8", [b, 22, 22, cin]), "x")
    for si, (c, hw, nconv, npool) in enumerate(stages):
        every = nconv // npool
        for i in range(nconv):
            x = m.conv_layer(x, b, hw, cin, c, 3)
            cin = c
            if i % every == every - 1 and npool > 0:
                x, _ = m.max_pool(x, b, hw, c, 1)
                npool -= 1
        if si + 1 < len(stages):
            x, _ = m.max_pool(x, b, hw, c, 2)
    flat = 6 * 6 * 512
    x = m.h.op(shape("s8", [b, flat]), f"reshape({x})", "flat")
    dims = [flat, 1408, 1024, 1024, 1024]
    for i in range(4):
        x = m.fc_layer(x, b, dims[i], dims[i + 1])
    return m, x


# Published figures [ISCA17] (Jouppi et al., Table 1), for the statistics printout.
V1_PUBLISHED = {
    "MLP0": {"weights": 20e6, "ops_per_byte": 200, "batch": 200},
    "MLP1": {"weights": 5e6, "ops_per_byte": 168, "batch": 168},
    "LSTM0": {"weights": 52e6, "ops_per_byte": 64, "batch": 64},
    "LSTM1": {"weights": 34e6, "ops_per_byte": 96, "batch": 96},
    "CNN0": {"weights": 8e6, "ops_per_byte": 2888, "batch": 8},
    "CNN1": {"weights": 100e6, "ops_per_byte": 1750, "batch": 32},
}


def v1_model(app):
    if app == "MLP0":
        return v1_mlp("MLP0", 200, [2000] * 6)
    if app == "MLP1":
        return v1_mlp("MLP1", 168, [1120] * 5)
    if app == "LSTM0":
        return v1_lstm("LSTM0", 64, 520, 24, 0)
    if app == "LSTM1":
        return v1_lstm("LSTM1", 96, 448, 19, 1)
    if app == "CNN0":
        return v1_cnn0()
    if app == "CNN1":
        return v1_cnn1()
    raise SystemExit(f"unknown v1 app '{app}' (MLP0 MLP1 LSTM0 LSTM1 CNN0 CNN1)")


def v1_stats(app, m):
    return {"app": app, "batch": V1_PUBLISHED[app]["batch"], "weights": m.weights,
            "macs": m.macs, "ops": 2 * m.macs, "macs_per_weight_byte": m.macs / m.weights,
            "fc_layers": m.fc, "conv_layers": m.conv, "pool_layers": m.pool,
            "lstm_cells": m.vector, "published": V1_PUBLISHED[app]}


# ---------------------------------------------------------------- Llama-2-70B per-chip step

def llama70b(layers, batch, chips, seq=2048):
    """One chip's program of a training step with 1-D Megatron tensor parallelism over
    `chips` chips: attention heads, the MLP hidden dimension and the vocabulary are split;
    activations [batch, seq, d_model] are replicated. The all-reduces that tensor
    parallelism needs after the row-parallel matmuls (and in the vocab-parallel loss) do
    not change any shape, so leaving them out (collectives are not modelled yet) keeps
    the per-chip program well formed."""
    import jax
    import jax.numpy as jnp

    d, heads, kv_heads, hd, ff, vocab = 8192, 64, 8, 128, 28672, 32000
    assert heads % chips == 0 or chips % heads == 0
    hq = max(1, heads // chips)              # query heads per chip
    hkv = max(1, kv_heads * hq // heads)     # kv heads per chip (replicated when chips > 8)
    ffc, vc = ff // chips, vocab // chips
    f32, bf16 = jnp.float32, jnp.bfloat16

    def rms(x, g):
        x32 = x.astype(f32)
        return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-5) * g).astype(bf16)

    def rope(x, cos, sin):
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    def layer(x, p, cos, sin):
        b, s, _ = x.shape
        w = {k: v.astype(bf16) for k, v in p.items()}
        xn = rms(x, p["ln1"])
        q = (xn @ w["wq"]).reshape(b, s, hq, hd)
        k = (xn @ w["wk"]).reshape(b, s, hkv, hd)
        v = (xn @ w["wv"]).reshape(b, s, hkv, hd)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        k = jnp.repeat(k, hq // hkv, axis=2)
        v = jnp.repeat(v, hq // hkv, axis=2)
        sc = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(f32) / jnp.sqrt(f32(hd))
        mask = jnp.tril(jnp.ones((s, s), bool))
        sc = jnp.where(mask, sc, -1e30)
        pr = jax.nn.softmax(sc, -1).astype(bf16)
        o = jnp.einsum("bhqk,bkhd->bqhd", pr, v).reshape(b, s, hq * hd)
        x = x + o @ w["wo"]                  # all-reduce over the chips omitted
        xn = rms(x, p["ln2"])
        hmid = jax.nn.silu(xn @ w["w1"]) * (xn @ w["w3"])
        return x + hmid @ w["w2"]            # all-reduce omitted

    def loss_fn(params, tokens, labels, cos, sin):
        emb = params["embed"].astype(bf16)
        local = jnp.clip(tokens, 0, vc - 1)  # this chip's vocabulary slice (chip 0)
        x = jnp.where((tokens < vc)[..., None], emb[local], 0).astype(bf16)

        body = jax.checkpoint(lambda xc, p: (layer(xc, p, cos, sin), None))
        x, _ = jax.lax.scan(body, x, params["layers"])
        xn = rms(x, params["ln_f"])
        logits = (xn @ params["head"].astype(bf16)).astype(f32)
        lp = jax.nn.log_softmax(logits, -1)  # vocab-parallel max/sum all-reduces omitted
        lab = jnp.clip(labels, 0, vc - 1)
        nll = -jnp.take_along_axis(lp, lab[..., None], -1)[..., 0]
        return jnp.mean(jnp.where(labels < vc, nll, 0.0))

    def step(params, m, v, tokens, labels, cos, sin):
        loss, g = jax.value_and_grad(loss_fn)(params, tokens, labels, cos, sin)
        b1, b2, lr, eps = 0.9, 0.95, 3e-4, 1e-8
        m = jax.tree_util.tree_map(lambda a, gi: b1 * a + (1 - b1) * gi, m, g)
        v = jax.tree_util.tree_map(lambda a, gi: b2 * a + (1 - b2) * gi * gi, v, g)
        params = jax.tree_util.tree_map(
            lambda p_, mi, vi: p_ - lr * (mi / (1 - b1)) / (jnp.sqrt(vi / (1 - b2)) + eps), params, m, v)
        return params, m, v, loss

    S = jax.ShapeDtypeStruct
    L = layers
    params = {
        "embed": S((vc, d), f32), "head": S((d, vc), f32), "ln_f": S((d,), f32),
        "layers": {
            "ln1": S((L, d), f32), "ln2": S((L, d), f32),
            "wq": S((L, d, hq * hd), f32), "wk": S((L, d, hkv * hd), f32),
            "wv": S((L, d, hkv * hd), f32), "wo": S((L, hq * hd, d), f32),
            "w1": S((L, d, ffc), f32), "w3": S((L, d, ffc), f32), "w2": S((L, ffc, d), f32),
        },
    }
    toks = S((batch, seq), jnp.int32)
    trig = S((seq, 1, hd // 2), bf16)
    lowered = jax.jit(step).lower(params, params, params, toks, toks, trig, trig)
    hlo = lowered.as_text(dialect="hlo")
    nparams = sum(int(jnp.prod(jnp.array(x.shape))) for x in jax.tree_util.tree_leaves(params))
    info = {"layers": L, "batch": batch, "seq": seq, "chips": chips, "q_heads_per_chip": hq,
            "kv_heads_per_chip": hkv, "mlp_per_chip": ffc, "vocab_per_chip": vc,
            "params_per_chip": nparams, "jax": jax.__version__}
    return hlo, info


# ---------------------------------------------------------------- CLI

def write(path, text):
    with open(path, "w") as fh:
        fh.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gemm")
    g.add_argument("m", type=int)
    g.add_argument("n", type=int)
    g.add_argument("k", type=int)
    g.add_argument("--out-dtype", default="f32", choices=["f32", "bf16"])
    g.add_argument("-o", required=True)
    v = sub.add_parser("v1")
    v.add_argument("app")
    v.add_argument("-o", required=True)
    v.add_argument("--stats", action="store_true")
    sub.add_parser("v1-stats")
    ll = sub.add_parser("llama70b")
    ll.add_argument("-o", required=True)
    ll.add_argument("--layers", type=int, default=80)
    ll.add_argument("--batch", type=int, default=8)
    ll.add_argument("--chips", type=int, default=64)
    a = ap.parse_args()

    if a.cmd == "gemm":
        write(a.o, gemm(a.m, a.n, a.k, a.out_dtype))
    elif a.cmd == "v1":
        m, root = v1_model(a.app)
        write(a.o, m.h.text(root))
        if a.stats:
            print(json.dumps(v1_stats(a.app, m)))
    elif a.cmd == "v1-stats":
        out = [v1_stats(app, v1_model(app)[0]) for app in V1_PUBLISHED]
        json.dump(out, sys.stdout, indent=1)
        print()
    elif a.cmd == "llama70b":
        hlo, info = llama70b(a.layers, a.batch, a.chips)
        write(a.o, hlo)
        print(json.dumps(info))


if __name__ == "__main__":
    main()
