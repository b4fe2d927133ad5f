#!/usr/bin/env python3
"""A GPT-2-small-sized training step through the PJRT plugin against JAX on the CPU.

    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2
    python3 bench/pjrt_gpt2.py [--layers 12] [--d-model 768] [--heads 12] [--seq 128]
                               [--batch 1] [--vocab 50257] [--reps 3] [--platforms cpu tpusim]

The model is GPT-2 small as written in plain JAX (token and position embeddings, pre-norm
blocks of causal multi-head attention and a 4x GELU MLP, a final layer norm, logits tied to
the token embedding; 124 M parameters at the defaults), f32, and one training step is
`jax.jit(value_and_grad(cross-entropy) + an SGD update)` with the parameters donated. The
same script runs in one child process per platform, in the same run, on the same
parameters and batch (drawn by NumPy from one seed):

  - JAX_PLATFORMS=cpu: XLA's CPU compiler and runtime;
  - JAX_PLATFORMS=tpusim: the PJRT plugin (build/libtpusim_pjrt.so), values with TPU
    numerics and the timing model behind every step (docs/pjrt.md).

Each child times the first call (compile and run) and then the best of --reps steps (warm:
compiled once), and prints the loss of each step. The parent prints both and the ratio
tpusim / CPU of the warm step. Not a test: timings depend on the machine and its load.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def child(cfg):
    import numpy as np
    import jax
    import jax.numpy as jnp

    L, D, H, T, B, V = cfg["layers"], cfg["d_model"], cfg["heads"], cfg["seq"], cfg["batch"], cfg["vocab"]
    rng = np.random.default_rng(0)

    def w(*shape, scale=0.02):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    params = {"wte": w(V, D), "wpe": w(1024, D, scale=0.01), "lnf_g": np.ones(D, np.float32),
              "lnf_b": np.zeros(D, np.float32), "blocks": []}
    for _ in range(L):
        params["blocks"].append({
            "ln1_g": np.ones(D, np.float32), "ln1_b": np.zeros(D, np.float32),
            "qkv_w": w(D, 3 * D), "qkv_b": np.zeros(3 * D, np.float32),
            "proj_w": w(D, D, scale=0.02 / np.sqrt(2 * L)), "proj_b": np.zeros(D, np.float32),
            "ln2_g": np.ones(D, np.float32), "ln2_b": np.zeros(D, np.float32),
            "fc_w": w(D, 4 * D), "fc_b": np.zeros(4 * D, np.float32),
            "out_w": w(4 * D, D, scale=0.02 / np.sqrt(2 * L)), "out_b": np.zeros(D, np.float32)})
    tokens = rng.integers(0, V, size=(B, T + 1)).astype(np.int32)
    x, y = tokens[:, :-1], tokens[:, 1:]

    def layer_norm(h, g, b):
        mu = h.mean(-1, keepdims=True)
        var = ((h - mu) ** 2).mean(-1, keepdims=True)
        return (h - mu) * jax.lax.rsqrt(var + 1e-5) * g + b

    def block(h, p):
        a = layer_norm(h, p["ln1_g"], p["ln1_b"])
        qkv = a @ p["qkv_w"] + p["qkv_b"]
        q, k, v = jnp.split(qkv, 3, axis=-1)
        q, k, v = (t.reshape(B, T, H, D // H).transpose(0, 2, 1, 3) for t in (q, k, v))
        s = (q @ k.transpose(0, 1, 3, 2)) / np.sqrt(D // H)
        mask = jnp.tril(jnp.ones((T, T), bool))
        s = jnp.where(mask, s, -1e9)
        o = jax.nn.softmax(s, axis=-1) @ v
        o = o.transpose(0, 2, 1, 3).reshape(B, T, D)
        h = h + o @ p["proj_w"] + p["proj_b"]
        m = layer_norm(h, p["ln2_g"], p["ln2_b"])
        m = jax.nn.gelu(m @ p["fc_w"] + p["fc_b"])
        return h + m @ p["out_w"] + p["out_b"]

    def loss_fn(p, x, y):
        h = p["wte"][x] + p["wpe"][:T]
        for bp in p["blocks"]:
            h = block(h, bp)
        h = layer_norm(h, p["lnf_g"], p["lnf_b"])
        logits = h @ p["wte"].T
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, y[..., None], axis=-1))

    def step(p, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        return jax.tree_util.tree_map(lambda a, b: a - 1e-3 * b, p, g), loss

    step = jax.jit(step, donate_argnums=0)
    dev = jax.devices()[0]
    p = jax.device_put(params, dev)
    x, y = jax.device_put(x, dev), jax.device_put(y, dev)
    nparams = sum(a.size for a in jax.tree_util.tree_leaves(params))
    t0 = time.perf_counter()
    p, loss = step(p, x, y)
    losses = [float(loss)]
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(cfg["reps"]):
        t0 = time.perf_counter()
        p, loss = step(p, x, y)
        loss = float(loss)  # waits for the step
        best = min(best, time.perf_counter() - t0)
        losses.append(loss)
    print(json.dumps({"device": str(dev), "params": int(nparams), "first_s": first, "step_s": best,
                      "losses": losses}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--reps", type=int, default=3, help="warm steps per platform (best taken)")
    ap.add_argument("--platforms", nargs="*", default=["cpu", "tpusim"])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    cfg = {"layers": a.layers, "d_model": a.d_model, "heads": a.heads, "seq": a.seq, "batch": a.batch,
           "vocab": a.vocab, "reps": a.reps}
    if a.child:
        child(json.loads(a.child))
        return 0
    print(f"GPT-2-sized step: {a.layers} layers, d_model {a.d_model}, {a.heads} heads, sequence {a.seq}, "
          f"batch {a.batch}, vocabulary {a.vocab}, f32, SGD; {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    res = {}
    for plat in a.platforms:
        env = dict(os.environ, JAX_PLATFORMS=plat)
        env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
        r = subprocess.run([sys.executable, __file__, "--child", json.dumps(cfg)], env=env, capture_output=True,
                           text=True)
        if r.returncode != 0:
            print(f"{plat}: failed (exit {r.returncode}): {r.stderr.strip().splitlines()[-1:]}")
            continue
        res[plat] = json.loads(r.stdout.strip().splitlines()[-1])
        o = res[plat]
        print(f"{plat:<7} {o['device']:<22} {o['params'] / 1e6:.1f} M parameters; first call {o['first_s']:.2f} s, "
              f"warm step {o['step_s']:.3f} s; losses {', '.join(f'{v:.5f}' for v in o['losses'])}", flush=True)
    if "cpu" in res and "tpusim" in res:
        print(f"tpusim / JAX CPU, warm step: {res['tpusim']['step_s'] / res['cpu']['step_s']:.2f}x "
              f"(first call {res['tpusim']['first_s'] / res['cpu']['first_s']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
