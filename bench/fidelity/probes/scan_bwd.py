#!/usr/bin/env python3
"""scan_bwd.py [GENS] [OUT.jsonl]: LSTM and GRU training steps (lax.scan forward, its transpose
backward, mean-square loss, SGD; bf16 weights and inputs) at shapes off the bench/fidelity
corpora, by the XLA TPU compiler (libtpu, compile-only) and by tpusim's own compilation, with
and without TPUSIM_NO_SHARED_DSLICE. Prints per case and generation the kernels of each while
body in the compiled program (those with estimated_cycles), how many of them are a dynamic
slice alone (a fusion whose root is a dynamic-slice of a stacked value, or a bare
dynamic-slice), and tpusim's dynamic-slice kernels in its own loop bodies (session 32,
scanbwd: fuse.c shared_slice)."""
import json, os, re, subprocess, sys, tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from libtpu import PRESET, TOPO, TPUSIM, compile_retry, emit  # noqa: E402
from compare import computations  # noqa: E402

F32, BF = jnp.float32, jnp.bfloat16
# (cell, T, B, I, H): none of these is a shape of the families corpus (t64b32i256h256 ...)
CASES = [("lstm", 16, 8, 128, 128), ("lstm", 24, 16, 384, 256), ("gru", 16, 8, 128, 128), ("gru", 20, 48, 256, 384)]


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


def program(cell, T, B, I, H):
    g = 4 if cell == "lstm" else 3

    def fwd(p, x):
        if cell == "lstm":
            init = (jnp.zeros((B, H), BF), jnp.zeros((B, H), F32))
            _, ys = lax.scan(lambda c, xt: lstm_cell(p["W"], p["U"], p["b"], c, xt), init, x)
        else:
            _, ys = lax.scan(lambda c, xt: gru_cell(p["W"], p["U"], p["b"], c, xt), jnp.zeros((B, H), BF), x)
        return ys

    def step(p, x):
        l, gr = jax.value_and_grad(lambda q: jnp.mean(jnp.square(fwd(q, x).astype(F32))))(p)
        return jax.tree_util.tree_map(lambda a, b: (a.astype(F32) - 1e-3 * b.astype(F32)).astype(a.dtype), p, gr), l

    sd = jax.ShapeDtypeStruct
    p = {"W": sd((I, g * H), BF), "U": sd((H, g * H), BF), "b": sd((g * H,), BF)}
    return jax.jit(step).lower(p, sd((T, B, I), BF)).as_text(dialect="hlo")


def compiled_bodies(text):
    """[(kernels with estimated_cycles, of them a dynamic slice alone)] per while body."""
    comps = computations(text)
    out = []
    for comp in comps.values():
        for l in comp:
            m = re.search(r" while\(.*body=%([\w.\-]+)", l)
            if not m:
                continue
            n = ds = 0
            for x in comps.get(m.group(1), []):
                if '"estimated_cycles"' not in x:
                    continue
                n += 1
                c = re.search(r"calls=%([\w.\-]+)", x)
                root = [y for y in comps.get(c.group(1), []) if y.lstrip().startswith("ROOT")] if c else [x]
                if root and " dynamic-slice(" in root[0]:
                    ds += 1
            out.append((n, ds))
    return out


def own_slices(text, gen, off):
    """tpusim's own compilation: its dynamic-slice kernels inside loops (ops of kind
    dynamic-slice run more than once, `tpusim run --report`)."""
    with tempfile.TemporaryDirectory() as d:
        src, rep = os.path.join(d, "p.hlo"), os.path.join(d, "r.json")
        open(src, "w").write(text)
        env = dict(os.environ, TPUSIM_CACHE="off")
        if off:
            env["TPUSIM_NO_SHARED_DSLICE"] = "1"
        subprocess.run([TPUSIM, "run", src, "--mode", "timing", "--chip", PRESET.get(gen, gen), "--report", rep,
                        "--quiet"], env=env, check=True)
        return sum(1 for o in json.load(open(rep))["ops"] if o["kind"] == "dynamic-slice" and o["count"] > 1)


def main():
    gens = sys.argv[1].split(",") if len(sys.argv) > 1 else ["v4", "v5e", "v5p", "v6e"]
    out = open(sys.argv[2], "a") if len(sys.argv) > 2 else None
    with tempfile.TemporaryDirectory() as d:
        for case in CASES:
            text = program(*case)
            for g in gens:
                summ, comp = compile_retry(text, TOPO[g], d)
                if comp is None:
                    continue
                emit(dict(case=list(case), gen=g, compiler_bodies=compiled_bodies(comp),
                          tpusim_bare_slices=own_slices(text, g, False),
                          tpusim_bare_slices_rule_off=own_slices(text, g, True)), out)


if __name__ == "__main__":
    main()
