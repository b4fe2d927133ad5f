#!/usr/bin/env python3
"""Values-path speed: training-step programs on tpusim (full values) against XLA on CPU.

    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2
    python3 bench/values_speed.py [--lib build/libtpusim.so] [--reps N] [--only NAME ...] [--backends tpu ref]
                                  [--save OUT.npz] [--compare REF.npz] [--dump DIR]

Each program is a JAX function lowered to HLO text (`jax.jit(f).lower(*args)
.as_text(dialect="hlo")`, the text tpusim takes). In the same run it times

  - XLA on CPU: the compiled executable on the same inputs (best of --xla-reps, default 20,
    after a warm-up);
  - tpusim, backend "tpu", mode "full": `tpusim.load(hlo).run(inputs, backend="tpu")`, the
    call the Python API makes (values with TPU numerics, then compile and timing model);
  - tpusim, backend "ref": the reference interpreter (`backend="ref"`).

and prints each time (tpusim: best of --reps, default 10) and the ratio tpusim / XLA. `--save` writes every
tpusim output (both backends) to an .npz; `--compare` checks them bit for bit against such a
file written by another build (the values must not change when the code gets faster).
`--lib` picks the libtpusim.so to time (another build's, for a before/after in one session).
TPUSIM_THREADS sets tpusim's thread count (default: the CPUs).
Needs jax and numpy (`pip install jax numpy`). Not a test: timings depend on the machine.
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


# ---- the programs -------------------------------------------------------------------------

def programs(jax, jnp):
    """name -> (function, args): training steps with f32 parameters, default precision."""
    rng = np.random.default_rng(0)

    def f32(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def xent(logits, labels):
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    def sgd(params, grads, lr=0.01):
        return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)

    progs = {}

    # MLP 64 -> 256 -> 256 -> 10, batch 128.
    def mlp_loss(p, x, y):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        h = jax.nn.relu(h @ p["w2"] + p["b2"])
        return xent(h @ p["w3"] + p["b3"], y)

    def mlp_step(p, x, y):
        loss, g = jax.value_and_grad(mlp_loss)(p, x, y)
        return loss, sgd(p, g)

    mlp_p = {"w1": f32(64, 256, scale=0.125), "b1": f32(256, scale=0.01), "w2": f32(256, 256, scale=0.06),
             "b2": f32(256, scale=0.01), "w3": f32(256, 10, scale=0.06), "b3": f32(10, scale=0.01)}
    progs["mlp_step"] = (mlp_step, (mlp_p, f32(128, 64), rng.integers(0, 10, 128).astype(np.int32)))

    # Transformer LM: 2 layers, d_model 128, 4 heads, seq 64, batch 8, vocab 100.
    V, D, H, S, B, L = 100, 128, 4, 64, 8, 2

    def layernorm(x, g, b):
        m = jnp.mean(x, -1, keepdims=True)
        v = jnp.mean((x - m) ** 2, -1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b

    def lm_loss(p, tok, tgt):
        x = p["emb"][tok] + p["pos"][None]
        mask = jnp.tril(jnp.ones((S, S), bool))
        for l in range(L):
            q = p[f"l{l}"]
            h = layernorm(x, q["g1"], q["b1"])
            qkv = h @ q["wqkv"]
            qh, kh, vh = [t.reshape(B, S, H, D // H) for t in jnp.split(qkv, 3, -1)]
            att = jnp.einsum("bqhd,bkhd->bhqk", qh, kh) / np.sqrt(D // H)
            att = jax.nn.softmax(jnp.where(mask, att, -1e9), -1)
            o = jnp.einsum("bhqk,bkhd->bqhd", att, vh).reshape(B, S, D)
            x = x + o @ q["wo"]
            h = layernorm(x, q["g2"], q["b2"])
            x = x + jax.nn.gelu(h @ q["w1"]) @ q["w2"]
        x = layernorm(x, p["gf"], p["bf"])
        logits = x @ p["emb"].T
        return xent(logits.reshape(B * S, V), tgt.reshape(B * S))

    def lm_step(p, tok, tgt):
        loss, g = jax.value_and_grad(lm_loss)(p, tok, tgt)
        return loss, sgd(p, g)

    lm_p = {"emb": f32(V, D, scale=0.02), "pos": f32(S, D, scale=0.02), "gf": np.ones(D, np.float32),
            "bf": np.zeros(D, np.float32)}
    for l in range(L):
        lm_p[f"l{l}"] = {"g1": np.ones(D, np.float32), "b1": np.zeros(D, np.float32), "wqkv": f32(D, 3 * D, scale=0.05),
                         "wo": f32(D, D, scale=0.05), "g2": np.ones(D, np.float32), "b2": np.zeros(D, np.float32),
                         "w1": f32(D, 4 * D, scale=0.05), "w2": f32(4 * D, D, scale=0.03)}
    tok = rng.integers(0, V, (B, S)).astype(np.int32)
    progs["transformer_lm_step"] = (lm_step, (lm_p, tok, np.roll(tok, -1, 1)))

    # CNN (ResNet-style): 32x32x3 images, batch 32, 3x3 convolutions, a residual block,
    # global average pooling, a dense head.
    def conv(x, w, stride=1):
        return jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def cnn_loss(p, x, y):
        h = jax.nn.relu(conv(x, p["c1"]) + p["b1"])
        h = jax.nn.relu(conv(h, p["c2"], 2) + p["b2"])
        r = jax.nn.relu(conv(h, p["c3"]) + p["b3"])
        h = jax.nn.relu(h + conv(r, p["c4"]) + p["b4"])
        h = jnp.mean(h, (1, 2))
        return xent(h @ p["wd"] + p["bd"], y)

    def cnn_step(p, x, y):
        loss, g = jax.value_and_grad(cnn_loss)(p, x, y)
        return loss, sgd(p, g)

    cnn_p = {"c1": f32(3, 3, 3, 16, scale=0.2), "b1": np.zeros(16, np.float32), "c2": f32(3, 3, 16, 32, scale=0.08),
             "b2": np.zeros(32, np.float32), "c3": f32(3, 3, 32, 32, scale=0.06), "b3": np.zeros(32, np.float32),
             "c4": f32(3, 3, 32, 32, scale=0.06), "b4": np.zeros(32, np.float32), "wd": f32(32, 10, scale=0.2),
             "bd": np.zeros(10, np.float32)}
    progs["cnn_step"] = (cnn_step, (cnn_p, f32(32, 32, 32, 3), rng.integers(0, 10, 32).astype(np.int32)))

    # Adam update of ~1.3 M parameters.
    def adam(p, g, m, v, t):
        b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        p = jax.tree_util.tree_map(lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), p, m, v)
        return p, m, v

    shapes = {"w1": (512, 1024), "b1": (1024,), "w2": (1024, 512), "b2": (512,), "emb": (256, 512)}
    mk = lambda s: {k: f32(*v, scale=s) for k, v in shapes.items()}
    vv = {k: np.abs(a) for k, a in mk(0.01).items()}
    progs["adam_update"] = (adam, (mk(0.05), mk(0.01), mk(0.01), vv, np.float32(3.0)))
    return progs


# ---- timing -------------------------------------------------------------------------------

def best(fn, reps):
    t = float("inf")
    out = None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        t = min(t, time.perf_counter() - t0)
    return t, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=os.path.join(HERE, "..", "build", "libtpusim.so"))
    ap.add_argument("--reps", type=int, default=10, help="tpusim runs per program (best taken)")
    ap.add_argument("--xla-reps", type=int, default=20, help="XLA runs per program (best taken)")
    ap.add_argument("--only", nargs="*", help="program names to run")
    ap.add_argument("--backends", nargs="*", default=["tpu", "ref"], help="tpusim backends to time")
    ap.add_argument("--dump", help="also write each program as DIR/NAME.hlo and DIR/NAME.inK.npy (for `tpusim run`)")
    ap.add_argument("--save", help="write tpusim's outputs to this .npz")
    ap.add_argument("--compare", help="compare tpusim's outputs bit for bit with this .npz")
    a = ap.parse_args()

    os.environ["TPUSIM_LIBRARY"] = os.path.abspath(a.lib)
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import jax
    import jax.numpy as jnp
    import tpusim

    jax.config.update("jax_platforms", "cpu")
    saved = {}
    ref = dict(np.load(a.compare)) if a.compare else None
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; tpusim {tpusim.version()}; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    hdr = f"{'program':<22} {'XLA CPU ms':>10} {'tpu ms':>10} {'tpu/XLA':>8} {'ref ms':>10} {'ref/XLA':>8}  values"
    print(hdr)
    print("-" * len(hdr))
    worst = 0.0
    all_same = True
    for name, (fn, args) in programs(jax, jnp).items():
        if a.only and name not in a.only:
            continue
        hlo = jax.jit(fn).lower(*args).as_text(dialect="hlo")
        leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(args)]
        if a.dump:
            os.makedirs(a.dump, exist_ok=True)
            with open(os.path.join(a.dump, name + ".hlo"), "w") as f:
                f.write(hlo)
            for k, x in enumerate(leaves):
                np.save(os.path.join(a.dump, f"{name}.in{k}.npy"), x)
        compiled = jax.jit(fn).lower(*args).compile()
        dev_args = jax.device_put(args)
        jax.block_until_ready(compiled(*dev_args))
        t_xla, _ = best(lambda: jax.block_until_ready(compiled(*dev_args)), a.xla_reps)
        mod = tpusim.load(hlo)
        row = f"{name:<22} {t_xla * 1e3:>10.2f}"
        same = []
        for backend in ("tpu", "ref"):
            if backend not in a.backends:
                row += f" {'-':>10} {'-':>8}"
                continue
            t, (outs, _) = best(lambda: mod.run(leaves, backend=backend, progress=False), a.reps)
            r = t / t_xla
            worst = max(worst, r)
            row += f" {t * 1e3:>10.1f} {r:>7.1f}x"
            for i, o in enumerate(outs):
                key = f"{name}/{backend}/{i}"
                saved[key] = np.asarray(o)
                if ref is not None:
                    b = ref.get(key)
                    same.append(b is not None and b.dtype == saved[key].dtype and b.shape == saved[key].shape
                                and b.tobytes() == saved[key].tobytes())
        if ref is not None:
            ok = all(same)
            all_same &= ok
            row += "  bit-identical" if ok else f"  DIFFER ({same.count(False)} of {len(same)} outputs)"
        print(row, flush=True)
    print(f"worst ratio {worst:.1f}x")
    if a.save:
        np.savez(a.save, **saved)
        print(f"outputs written to {a.save}")
    if ref is not None:
        print("all outputs bit-identical to " + a.compare if all_same else "OUTPUTS DIFFER from " + a.compare)
        return 0 if all_same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
