#!/usr/bin/env python3
"""Generate the bundled example programs: examples/<name>.hlo with <name>.in<i>.npy inputs,
JAX's CPU outputs <name>.out<i>.npy, and examples/README.md listing them.

Usage: python3 examples/gen_examples.py   (needs `pip install jax numpy`)
The HLO is JAX's unoptimized lowering, jax.jit(f).lower(*args).as_text(dialect="hlo").
Inputs are flattened the way jit flattens them (jax.tree_util.tree_leaves); bf16 arrays are
stored as float32 holding the exact bf16 values. Seeds are fixed.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "conformance"))
import gen  # noqa: E402  (model pieces, input maker, HLO signature checks)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def mlp(x, w1, b1, w2, b2):
    """2-layer MLP forward: relu(x @ w1 + b1) @ w2 + b2."""
    return jax.nn.relu(x @ w1 + b1) @ w2 + b2


def attention(x, wq, wk, wv):
    """One causal self-attention head in bf16: softmax(q k^T / sqrt(d), causal) v."""
    q, k, v = x @ wq, x @ wk, x @ wv
    s = (q @ k.T) / jnp.asarray(np.sqrt(q.shape[-1]), q.dtype)
    t = x.shape[0]
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, jnp.asarray(-3e4, s.dtype))
    return jax.nn.softmax(s, axis=-1) @ v


def transformer_step(p, x, y):
    """SGD step (lr 0.05) of a pre-LN transformer block (4 heads) on an MSE loss."""
    return gen.transformer_step(p, x, y, 0.05, heads=4)


def build():
    r = gen.Rand("examples")
    s64, s128 = 1 / np.sqrt(64), 1 / np.sqrt(128)
    return [
        ("mlp", "2-layer MLP forward, batch 8, 64 -> 128 (relu) -> 10, f32", mlp,
         (r.normal(8, 64), r.normal(64, 128, scale=s64), r.normal(128, scale=0.1),
          r.normal(128, 10, scale=s128), r.normal(10, scale=0.1)),
         ["x f32[8,64]", "w1 f32[64,128]", "b1 f32[128]", "w2 f32[128,10]", "b2 f32[10]"]),
        ("attention", "one causal self-attention head in bf16, T=32, d_model=d_head=64",
         attention,
         (r.normal(32, 64, dtype=gen.BF16),) + tuple(
             r.normal(64, 64, scale=s64, dtype=gen.BF16) for _ in range(3)),
         ["x bf16[32,64]", "wq bf16[64,64]", "wk bf16[64,64]", "wv bf16[64,64]"]),
        ("transformer_step", "training step of a pre-LN transformer block (LN, 4-head causal "
         "attention, GELU MLP 64->256->64), batch 2, T=16; value_and_grad of MSE + SGD; "
         "returns the 12 updated params and the loss", transformer_step,
         (gen.block_params(r, 64, 256), r.normal(2, 16, 64), r.normal(2, 16, 64)),
         ("params", "x", "y")),
    ]


def main():
    lines = ["# Examples", "",
             "HLO programs lowered from JAX by `python3 examples/gen_examples.py` "
             f"(JAX {jax.__version__}, CPU), each with its inputs and JAX's outputs as .npy.",
             "Inputs are numbered in ENTRY parameter order; bf16 tensors are stored as float32 "
             "holding the exact bf16 values.", "",
             "Run one with the CLI, e.g.:", "",
             "    tpusim run examples/mlp.hlo -i examples/mlp.in0.npy -i examples/mlp.in1.npy \\",
             "        -i examples/mlp.in2.npy -i examples/mlp.in3.npy -i examples/mlp.in4.npy",
             ""]
    examples = build()
    for name, desc, fn, args, labels in examples:
        fn.__name__ = name
        jitted = jax.jit(fn)
        hlo = jitted.lower(*args).as_text(dialect="hlo")
        if "custom-call" in hlo:
            raise RuntimeError(f"{name}: custom-call in HLO")
        psig, rsig = gen.hlo_signature(hlo)
        ins = jax.tree_util.tree_leaves(args)
        outs = jax.tree_util.tree_leaves(jitted(*args))
        gen.check_leaves("in", ins, psig)
        gen.check_leaves("out", outs, rsig)
        with open(os.path.join(HERE, f"{name}.hlo"), "w") as fh:
            fh.write(hlo)
        for prefix, leaves, sig in (("in", ins, psig), ("out", outs, rsig)):
            for i, (a, (t, _)) in enumerate(zip(leaves, sig)):
                np.save(os.path.join(HERE, f"{name}.{prefix}{i}.npy"), gen.to_npy(a, t),
                        allow_pickle=False)
        if isinstance(labels, tuple):  # pytree inputs: name each leaf by its key path
            paths = [kp for kp, _ in jax.tree_util.tree_flatten_with_path(args)[0]]
            labels = [labels[kp[0].idx] + jax.tree_util.keystr(kp[1:]) for kp in paths]
            labels = [f"{lb} {t}[{','.join(map(str, d))}]" for lb, (t, d) in zip(labels, psig)]
        lines += [f"## {name}.hlo", "", desc + ".", "",
                  f"- inputs: " + ", ".join(f"`{name}.in{i}.npy` = {lb}"
                                           for i, lb in enumerate(labels)),
                  f"- outputs: `{name}.out0.npy` .. `{name}.out{len(rsig) - 1}.npy` "
                  f"({len(rsig)} leaves, result tuple flattened in order)"
                  if len(rsig) > 1 else f"- output: `{name}.out0.npy`", ""]
        print("wrote", name)
    lines += ["The functions are in `examples/gen_examples.py`; the transformer block and the "
              "input maker are shared with `tests/conformance/gen.py`.", ""]
    # Sections this script does not write (e.g. llama70b_shard_step.hlo, written by
    # scripts/gen_sanity_hlo.py) are kept: everything from the first heading not ours on.
    path = os.path.join(HERE, "README.md")
    ours = {f"## {e[0]}.hlo" for e in examples}
    kept = []
    if os.path.exists(path):
        old = open(path).read().splitlines()
        for i, ln in enumerate(old):
            if ln.startswith("## ") and ln not in ours:
                kept = old[i:]
                break
    with open(path, "w") as fh:
        fh.write("\n".join(lines + kept) + ("\n" if kept else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
