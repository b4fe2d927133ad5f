"""Trains a small character-level transformer language model on examples/data/coriolanus.txt
(the opening of Shakespeare's Coriolanus, public domain; see examples/README.md) with a
seed-style JAX train step (jax.value_and_grad, then Adam written with
jax.tree_util.tree_map), step after step on tpusim's v5e and v5p through the API (the
parameters and Adam's moments stay in tpusim between steps: tpusim.jit with
donate_argnums=0), and the same loop with jax.jit on JAX's CPU backend.

Prints the loss curves, the held-out loss, a sample of generated text, the simulated time to
reach a target loss on v5e and v5p, and plots both (examples/train_lm.png).

    python3 examples/train_lm.py [--steps 200] [--target 2.5] [--compute-dtype bfloat16] [--plot PATH|--no-plot]

Needs: jax, matplotlib (for the plot), and the tpusim package.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import trainlib  # noqa: E402  (sets JAX_PLATFORMS=cpu before jax is imported)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import tpusim  # noqa: E402


def init_params(key, vocab, d_model, n_layers, context):
    keys = iter(jax.random.split(key, 4 + 4 * n_layers))
    normal = lambda shape, scale: jax.random.normal(next(keys), shape) * scale  # noqa: E731
    proj = d_model ** -0.5 / (2 * n_layers) ** 0.5  # residual projections scaled down
    params = {"embed": normal((vocab, d_model), 0.02), "pos": normal((context, d_model), 0.02),
              "norm": jnp.ones(d_model), "layers": []}
    for _ in range(n_layers):
        params["layers"].append({
            "norm1": jnp.ones(d_model), "qkv": normal((d_model, 3 * d_model), d_model ** -0.5),
            "out": normal((d_model, d_model), proj),
            "norm2": jnp.ones(d_model), "up": normal((d_model, 4 * d_model), d_model ** -0.5),
            "down": normal((4 * d_model, d_model), proj / 2)})
    return params


def rms_norm(x, g):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-5) * g


def model_forward(params, tokens, n_heads, dtype=jnp.float32):
    # dtype: the compute type (bfloat16: params and activations cast, f32 master params).
    params = jax.tree_util.tree_map(lambda p: p.astype(dtype), params)
    b, t = tokens.shape
    d = params["embed"].shape[1]
    x = params["embed"][tokens] + params["pos"][:t]
    causal = jnp.tril(jnp.ones((t, t), bool))
    for layer in params["layers"]:
        q, k, v = jnp.split(rms_norm(x, layer["norm1"]) @ layer["qkv"], 3, axis=-1)
        heads = lambda a: a.reshape(b, t, n_heads, d // n_heads).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = heads(q), heads(k), heads(v)
        scores = jnp.where(causal, q @ k.transpose(0, 1, 3, 2) * (d // n_heads) ** -0.5, -1e9)
        att = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        x = x + att @ layer["out"]
        x = x + jax.nn.gelu(rms_norm(x, layer["norm2"]) @ layer["up"]) @ layer["down"]
    return (rms_norm(x, params["norm"]) @ params["embed"].T).astype(jnp.float32)  # tied output embedding


def make_train_step(n_heads, lr, dtype=jnp.float32, b1=0.9, b2=0.99, eps=1e-8):
    def loss_fn(params, tokens, targets):
        logp = jax.nn.log_softmax(model_forward(params, tokens, n_heads, dtype), axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))

    def train_step(state, tokens, targets):
        params, m, v, count = state["params"], state["m"], state["v"], state["count"] + 1
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, targets)
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
        scale = lr * jnp.sqrt(1 - b2 ** count) / (1 - b1 ** count)
        params = jax.tree_util.tree_map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps), params, m, v)
        return {"params": params, "m": m, "v": v, "count": count}, loss

    return train_step, loss_fn


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--target", type=float, default=2.5, help="target training loss (10-step running mean), nats")
    ap.add_argument("--chips", default="v5e,v5p")
    ap.add_argument("--compute-dtype", choices=["float32", "bfloat16"], default="float32",
                    help="float32: f32 dots (one bf16 MXU pass on a TPU); bfloat16: params and activations in bf16")
    ap.add_argument("--text", default=os.path.join(HERE, "data", "coriolanus.txt"))
    ap.add_argument("--plot", default=os.path.join(HERE, "train_lm.png"))
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--sample-chars", type=int, default=160, help="characters to sample from the trained model")
    args = ap.parse_args(argv)

    text = open(args.text, encoding="utf-8").read()
    chars = sorted(set(text))
    ids = np.array([chars.index(c) for c in text], np.int32)
    split = int(len(ids) * 0.9)
    train_ids, val_ids = ids[:split], ids[split:]
    rng = np.random.default_rng(0)
    starts = rng.integers(0, len(train_ids) - args.context - 1, (args.steps, args.batch))

    def batches(i):
        s = starts[i][:, None] + np.arange(args.context + 1)
        return train_ids[s[:, :-1]], train_ids[s[:, 1:]]

    params = init_params(jax.random.PRNGKey(0), len(chars), args.d_model, args.layers, args.context)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = {"params": params, "m": zeros, "v": zeros, "count": jnp.zeros((), jnp.float32)}
    train_step, loss_fn = make_train_step(args.heads, args.lr, jnp.dtype(args.compute_dtype))
    nparams = sum(x.size for x in jax.tree_util.tree_leaves(params))
    print(f"{os.path.basename(args.text)}: {len(text)} characters, vocabulary {len(chars)}; transformer "
          f"{args.layers} layers, d_model {args.d_model}, {args.heads} heads, context {args.context}, "
          f"{nparams} parameters; batch {args.batch}, Adam lr {args.lr}, {args.steps} steps, compute in "
          f"{args.compute_dtype}")
    log = max(1, args.steps // 5)
    runs = {}
    for chip in args.chips.split(","):
        runs[chip] = trainlib.train_tpusim(train_step, state, batches, chip, args.steps, log_every=log)
    jx = trainlib.train_jax(train_step, state, batches, args.steps, log_every=log)

    vs = np.arange(0, len(val_ids) - args.context - 1, args.context)[:args.batch]
    vt = val_ids[vs[:, None] + np.arange(args.context)]
    vy = val_ids[vs[:, None] + np.arange(1, args.context + 1)]
    print("\nheld-out loss:", end="")
    for chip, r in runs.items():
        val = tpusim.jit(loss_fn, chip=chip)(r["state"]["params"], vt, vy)
        print(f"  tpusim {chip} {float(val):.3f}", end="")
    print(f"  JAX CPU {float(jax.jit(loss_fn)(jx['state']['params'], vt, vy)):.3f}  (uniform: "
          f"{np.log(len(chars)):.3f})")
    chips = list(runs)
    if len(chips) == 2:
        same = np.array_equal(runs[chips[0]]["losses"], runs[chips[1]]["losses"])
        print(f"{chips[0]} and {chips[1]} losses bit-identical: {same} (same MXU numerics; only the timing differs)")
    if chips and args.sample_chars:  # sampled from the tpusim-trained parameters (on JAX CPU)
        p = jax.tree_util.tree_map(np.asarray, runs[chips[0]]["state"]["params"])
        got = sample(p, chars, text[:args.context], args, args.sample_chars)
        print(f"sample from the {chips[0]}-trained model: {got!r}")
    rows = trainlib.summary(runs, jx, args.target)
    t = {r["run"]: r.get("time_to_target_s") for r in rows}
    if t.get("tpusim v5e") and t.get("tpusim v5p"):
        print(f"v5e / v5p simulated time to loss {args.target}: {t['tpusim v5e'] / t['tpusim v5p']:.2f}x")
    if not args.no_plot:
        trainlib.plot(args.plot, f"char transformer LM ({args.compute_dtype})", runs, jx, args.target)
    return rows


def sample(params, chars, prompt, args, n, seed=0):
    """n characters sampled after `prompt` (temperature 0.8), on JAX's CPU backend."""
    fwd = jax.jit(lambda p, t: model_forward(p, t, args.heads))
    ctx = [chars.index(c) for c in prompt][-args.context:]
    key = jax.random.PRNGKey(seed)
    out = []
    for _ in range(n):
        logits = fwd(params, np.array([ctx], np.int32))[0, -1]
        key, k = jax.random.split(key)
        c = int(jax.random.categorical(k, logits / 0.8))
        out.append(chars[c])
        ctx = (ctx + [c])[-args.context:]
    return "".join(out)


if __name__ == "__main__":
    main()
