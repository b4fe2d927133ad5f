#!/usr/bin/env python3
"""values_check.py: a sample of bench/spmd/gen_corpus.py's families at small shapes, run by
JAX on 8 CPU devices and by tpusim (its own partitioning of JAX's lowered program, tpu
backend), values compared. The corpus itself is for communication and time (no inputs are
stored); this checks that the partitioned programs compute what JAX computes.

    python3 bench/spmd/values_check.py [--tpusim build/tpusim] [NAME...]

Prints one line per program: the largest |difference| relative to the largest |value| of
JAX's result (tpusim's tpu backend runs f32 dots as the TPU does, one bf16 pass at default
precision, so f32 programs differ from the CPU's by about 1e-2 relative at most)."""
import argparse, os, subprocess, sys, tempfile
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"
import numpy as np
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

F32 = jnp.float32


def wsc(x, *spec):
    return jax.lax.with_sharding_constraint(x, P(*spec))


def rms(x, g):
    return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g


def mlp(x, w1, w2):
    return jnp.tanh(x @ w1) @ w2


def sgd(fn, nparams):
    def step(*a):
        ps, data = a[:nparams], a[nparams:]
        g = jax.grad(lambda ps: jnp.mean(jnp.square(fn(*data[:1], *ps))))(ps)
        return tuple(p - 0.5 * d for p, d in zip(ps, g))
    return step


def accum(micro):
    def step(w1, w2, x):
        xs = x.reshape(micro, x.shape[0] // micro, x.shape[1]) if x.ndim == 2 else x
        loss = lambda ps, xb: jnp.mean(jnp.square(mlp(xb, *ps)))
        def body(acc, xb):
            g = jax.grad(loss)((w1, w2), xb)
            return tuple(s + d for s, d in zip(acc, g)), None
        acc = jax.lax.scan(body, (jnp.zeros_like(w1), jnp.zeros_like(w2)), xs)[0]
        return w1 - 0.5 * acc[0], w2 - 0.5 * acc[1]
    return step


def megatron_sp(x, g, w1, w2):
    h = wsc(rms(x, g), "data", None, None)
    return wsc(x + mlp(h, w1, w2), "data", "model", None)


def gqa(x, wq, wk, wv, wo):
    b, s, _ = x.shape
    hq, hk = wq.shape[1], wk.shape[1]
    q = jnp.einsum("bsd,dhk->bshk", x, wq).reshape(b, s, hk, hq // hk, -1)
    k = jnp.einsum("bsd,dhk->bshk", x, wk)
    v = jnp.einsum("bsd,dhk->bshk", x, wv)
    p = jax.nn.softmax(jnp.einsum("bsgrk,btgk->bgrst", q, k) / 4.0, -1)
    o = jnp.einsum("bgrst,btgk->bsgrk", p, v).reshape(b, s, hq, -1)
    return jnp.einsum("bshk,hkd->bsd", o, wo)


def ring(n):
    def body(q, k, v):
        perm = [(i, (i + 1) % n) for i in range(n)]
        def step(i, c):
            k, v, o, m, l = c
            s = jnp.einsum("bqhk,bshk->bhqs", q, k) / 4.0
            mn = jnp.maximum(m, s.max(-1))
            p = jnp.exp(s - mn[..., None])
            sc = jnp.exp(m - mn)
            l = l * sc + p.sum(-1)
            o = o * sc.transpose(0, 2, 1)[..., None] + jnp.einsum("bhqs,bshk->bqhk", p, v)
            return jax.lax.ppermute(k, "sp", perm), jax.lax.ppermute(v, "sp", perm), o, mn, l
        b, sq, h, dk = q.shape
        init = (k, v, jnp.zeros((b, sq, h, dk), F32), jnp.full((b, h, sq), -1e30, F32), jnp.zeros((b, h, sq), F32))
        _, _, o, m, l = jax.lax.fori_loop(0, n, step, init)
        return o / l.transpose(0, 2, 1)[..., None]
    return body


def conv(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def zero1(x, w1, w2, m1, m2):
    g = jax.grad(lambda p: jnp.mean(jnp.square(mlp(x, *p))))((w1, w2))
    outs = []
    for w, gd, m in zip((w1, w2), g, (m1, m2)):
        m = 0.9 * m + 0.1 * wsc(gd, "data", None)
        outs += [wsc(w - 0.5 * m, None, None), m]
    return tuple(outs)


def programs():
    """name -> (function, [(shape, spec)], out specs, mesh shape, axes)"""
    def smap(f, in_specs, out_specs):
        return lambda *a: jax.shard_map(f, in_specs=in_specs, out_specs=out_specs, check_vma=False)(*a)
    tp = [(None, "model"), ("model", None)]
    return {
        "megatron_sp_fwd": (megatron_sp, [((2, 16, 32), ("data", "model", None)), ((32,), (None,)), ((32, 64), tp[0]),
                                          ((64, 32), tp[1])], [("data", "model", None)], (2, 4), ("data", "model")),
        "gqa_tp_fwd": (gqa, [((2, 8, 32), ("data", None, None)), ((32, 8, 4), (None, "model", None)),
                             ((32, 4, 4), (None, "model", None)), ((32, 4, 4), (None, "model", None)),
                             ((8, 4, 32), ("model", None, None))], [("data", None, None)], (2, 4), ("data", "model")),
        "fsdp_scan_step": (sgd(lambda x, ws: jax.lax.scan(lambda c, w: (jnp.tanh(c @ w), None), x, ws)[0], 1),
                           [((3, 32, 32), (None, "fsdp", None)), ((64, 32), ("fsdp", None))], [(None, "fsdp", None)],
                           (8,), ("fsdp",)),
        "grad_accum_mb": (accum(4), [((16, 32), (None, None)), ((32, 16), (None, None)), ((4, 32, 16), (None, "data", None))],
                          [(None, None), (None, None)], (8,), ("data",)),
        "grad_accum_reshape": (accum(4), [((16, 32), (None, None)), ((32, 16), (None, None)), ((128, 16), ("data", None))],
                               [(None, None), (None, None)], (8,), ("data",)),
        "ring_attn": (smap(ring(8), (P(None, "sp", None, None),) * 3, P(None, "sp", None, None)),
                      [((1, 64, 2, 8), (None, "sp", None, None))] * 3, [(None, "sp", None, None)], (8,), ("sp",)),
        "summa": (lambda a, b: wsc(a @ b, "x", "y"), [((64, 64), ("x", "y")), ((64, 64), ("x", "y"))], [("x", "y")],
                  (2, 4), ("x", "y")),
        "embed_tied": (lambda t, e: jax.nn.logsumexp(jnp.einsum("bsd,vd->bsv", rms(e[t], 1.0), e), -1),
                       [((2, 8), ("data", None)), ((64, 16), ("model", None))], [("data", None)], (2, 4), ("data", "model")),
        "conv_spatial_step": (sgd(lambda x, w1, w2: jnp.tanh(conv(jnp.tanh(conv(x, w1)), w2)), 2),
                              [((3, 3, 8, 8), (None,) * 4), ((3, 3, 8, 8), (None,) * 4), ((2, 16, 16, 8), ("data", "space", None, None))],
                              [(None,) * 4] * 2, (2, 4), ("data", "space")),
        "zero1": (zero1, [((64, 16), ("data", None)), ((16, 32), (None, None)), ((32, 16), (None, None)),
                          ((16, 32), ("data", None)), ((32, 16), ("data", None))],
                  [(None, None), ("data", None), (None, None), ("data", None)], (8,), ("data",)),
        "mesh3d_step": (sgd(lambda x, g, w1, w2: x + mlp(rms(x, g), w1, w2), 3),
                        [((32,), (None,)), ((32, 64), ("fsdp", "tensor")), ((64, 32), ("tensor", "fsdp")),
                         ((4, 8, 32), (("data", "fsdp"), None, None))],
                        [(None,), ("fsdp", "tensor"), ("tensor", "fsdp")], (2, 2, 2), ("data", "fsdp", "tensor")),
        "reshard": (lambda x: jnp.tanh(x) * 2, [((32, 64), ("a", "b"))], [("b", "a")], (2, 4), ("a", "b")),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpusim", default="build/tpusim")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    bad = 0
    rng = np.random.RandomState(0)
    for name, (f, args, outs, shape, axes) in programs().items():
        if a.names and name not in a.names:
            continue
        m = Mesh(np.array(jax.devices()[:int(np.prod(shape))]).reshape(shape), axes)
        vals = [rng.randint(0, 16, s).astype(np.int32) if name == "embed_tied" and i == 0 else
                (rng.randint(-4, 5, s) / 8).astype(np.float32) for i, (s, _) in enumerate(args)]
        ins = [NamedSharding(m, P(*sp)) for _, sp in args]
        osh = tuple(NamedSharding(m, P(*sp)) for sp in outs)
        with jax.set_mesh(m):
            jf = jax.jit(f, in_shardings=ins, out_shardings=osh if len(osh) > 1 else osh[0])
            text = jf.lower(*vals).as_text(dialect="hlo")
            want = jax.tree_util.tree_leaves(jf(*vals))
        with tempfile.TemporaryDirectory() as t:
            open(os.path.join(t, "prog.hlo"), "w").write(text)
            files = []
            for i, v in enumerate(vals):
                files += ["-i", os.path.join(t, f"in{i}.npy")]
                np.save(files[-1], v)
            r = subprocess.run([a.tpusim, "run", os.path.join(t, "prog.hlo"), *files, "-o", os.path.join(t, "out"), "-q"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{name}: FAILED ({(r.stderr.strip().splitlines() or ['?'])[-1]})")
                bad += 1
                continue
            got = [np.load(os.path.join(t, "out", f"{i}.npy")) for i in range(len(want))]
        rel = max(float(np.abs(g.astype(np.float64) - np.asarray(w, np.float64)).max() /
                        max(1e-30, float(np.abs(np.asarray(w, np.float64)).max()))) for g, w in zip(got, want))
        ok = rel <= 2e-2
        bad += not ok
        print(f"{name}: {len(want)} result(s), largest |difference| / largest |value| {rel:.2e}{'' if ok else '  MISMATCH'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
