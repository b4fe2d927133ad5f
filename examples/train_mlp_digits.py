"""Trains an MLP on scikit-learn's digits (8x8 images of handwritten digits, 1,797 of them,
shipped inside scikit-learn) with a seed-style JAX train step (jax.value_and_grad, then
jax.tree_util.tree_map for SGD), step after step on tpusim's v5e and v5p through the API,
the parameters kept in tpusim between steps (tpusim.jit with donate_argnums=0), and the
same loop with jax.jit on JAX's CPU backend.

Prints the loss curves, the test accuracy, the simulated time to reach a target loss on
v5e and v5p, and plots both (examples/train_mlp_digits.png).

    python3 examples/train_mlp_digits.py [--steps 300] [--target 0.25] [--compute-dtype bfloat16]
                                         [--plot PATH|--no-plot]

Needs: jax, scikit-learn, matplotlib (for the plot), and the tpusim package (pip install
./python, or PYTHONPATH=python TPUSIM_LIBRARY=build/libtpusim.so from a build).
"""
import argparse
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainlib  # noqa: E402  (sets JAX_PLATFORMS=cpu before jax is imported)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import tpusim  # noqa: E402


def init_params(key, sizes):
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        key, k = jax.random.split(key)
        params.append({"W": jax.random.normal(k, (n_in, n_out)) * jnp.sqrt(2.0 / n_in), "b": jnp.zeros(n_out)})
    return params


def model_forward(params, x, dtype=jnp.float32):
    # dtype: the compute type (bfloat16: params and activations cast, f32 master params).
    params = jax.tree_util.tree_map(lambda p: p.astype(dtype), params)
    x = x.astype(dtype)
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["W"] + layer["b"])
    return (x @ params[-1]["W"] + params[-1]["b"]).astype(jnp.float32)


def cross_entropy_loss(params, x, labels, dtype=jnp.float32):
    logits = model_forward(params, x, dtype)
    return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits, axis=-1), axis=-1))


def train_step(params, x, labels, learning_rate, dtype=jnp.float32):
    loss, grads = jax.value_and_grad(cross_entropy_loss)(params, x, labels, dtype)
    new_params = jax.tree_util.tree_map(lambda p, g: p - learning_rate * g, params, grads)
    return new_params, loss


def accuracy(params, x, y, dtype=jnp.float32):
    return jnp.mean(jnp.argmax(model_forward(params, x, dtype), axis=-1) == y)


def load_data(seed=0):
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    perm = np.random.default_rng(seed).permutation(len(x))
    x, y = x[perm], y[perm].astype(np.int32)
    n_test = 297
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--target", type=float, default=0.25, help="target training loss (10-step running mean)")
    ap.add_argument("--chips", default="v5e,v5p")
    ap.add_argument("--compute-dtype", choices=["float32", "bfloat16"], default="float32",
                    help="float32: f32 dots (one bf16 MXU pass on a TPU); bfloat16: params and activations in bf16")
    ap.add_argument("--plot", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_mlp_digits.png"))
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)

    (xtr, ytr), (xte, yte) = load_data()
    onehot = np.eye(10, dtype=np.float32)
    order = np.random.default_rng(1).permutation(len(xtr))
    nb = len(xtr) // args.batch

    def batches(i):  # epoch after epoch over the same shuffled order
        idx = order[(i % nb) * args.batch:(i % nb + 1) * args.batch]
        return xtr[idx], onehot[ytr[idx]], np.float32(args.lr)

    dtype = jnp.dtype(args.compute_dtype)
    step_fn = functools.partial(train_step, dtype=dtype)
    acc_fn = functools.partial(accuracy, dtype=dtype)
    params = init_params(jax.random.PRNGKey(0), [64, args.hidden, args.hidden, 10])
    print(f"digits: {len(xtr)} training / {len(xte)} test images; MLP 64-{args.hidden}-{args.hidden}-10, "
          f"batch {args.batch}, SGD lr {args.lr}, {args.steps} steps, compute in {args.compute_dtype}")
    log = max(1, args.steps // 6)
    runs = {}
    for chip in args.chips.split(","):
        runs[chip] = trainlib.train_tpusim(step_fn, params, batches, chip, args.steps, log_every=log)
    jx = trainlib.train_jax(step_fn, params, batches, args.steps, log_every=log)

    print("\ntest accuracy:", end="")
    for chip, r in runs.items():
        acc = tpusim.jit(acc_fn, chip=chip)(r["state"], xte, yte)
        print(f"  tpusim {chip} {float(acc) * 100:.1f} %", end="")
    print(f"  JAX CPU {float(jax.jit(acc_fn)(jx['state'], xte, yte)) * 100:.1f} %")
    chips = list(runs)
    if len(chips) == 2:
        same = np.array_equal(runs[chips[0]]["losses"], runs[chips[1]]["losses"])
        print(f"{chips[0]} and {chips[1]} losses bit-identical: {same} (same MXU numerics; only the timing differs)")
    rows = trainlib.summary(runs, jx, args.target)
    t = {r["run"]: r.get("time_to_target_s") for r in rows}
    if "tpusim v5e" in t and "tpusim v5p" in t and t["tpusim v5e"] and t["tpusim v5p"]:
        print(f"v5e / v5p simulated time to loss {args.target}: {t['tpusim v5e'] / t['tpusim v5p']:.2f}x")
    if not args.no_plot:
        trainlib.plot(args.plot, f"MLP on digits ({args.compute_dtype})", runs, jx, args.target)
    return rows


if __name__ == "__main__":
    main()
