#!/usr/bin/env python3
"""gen_pipeline.py: pipelined training steps as XLA's SPMD partitioner compiles them for 8
CPU devices (jax 0.10.2), for `tpusim run` (docs/pod.md, "Pipelines").

Both are shard_map programs over a mesh axis "stage" of 8 devices that pass activations
round the ring with lax.ppermute inside a loop, one microbatch entering per iteration, and
are differentiated by JAX (the backward pass is the loop transposed, its permute reversed):

  ppg   GPipe: one tanh layer per stage, M = 4 microbatches, M + P - 1 = 11 iterations;
  ppc   circular (interleaved, MaxText's num_pipeline_repeats): two layers per stage
        (layer r*P + s on stage s), M = P = 8 microbatches going round the ring twice,
        M*2 + P - 1 = 23 iterations.

pp1 is a 1F1B schedule (PipeDream-Flush's order, Narayanan et al. SC'21) written by hand in
one loop: in iteration t stage s runs the forward of microbatch t - s and the backward of
microbatch t - (2P - 2 - s) (the last stage's backward right after its own forward), the
activations passed round the ring and the input gradients round the reversed ring, each
stage's inputs and outputs kept until their backward; M = 8, M + 2P - 2 = 22 iterations.
Its loss and gradients are checked here against jax.value_and_grad of the same layers
unpipelined.

For each NAME: NAME.hlo, NAME.<arg>.npy, NAME.outK.npy (JAX's loss and updated weights),
NAME.shardings, NAME.inputs. Run by hand: python3 examples/pod/gen_pipeline.py [NAME...]."""
import sys
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, jax.numpy as jnp, numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P, NamedSharding
from jax import shard_map

here = os.path.dirname(os.path.abspath(__file__))
NS, b, d = 8, 8, 32
mesh = Mesh(np.array(jax.devices()[:NS]), ("stage",))
ring = [(i, (i + 1) % NS) for i in range(NS)]


def varying(x):
    return lax.pcast(x, ("stage",), to="varying")


def gpipe(ws, xs):
    """ws: [1, d, d] this stage's layer; xs: [M, b, d] every microbatch."""
    M, stage, w = xs.shape[0], lax.axis_index("stage"), ws[0]

    def step(t, carry):
        state, outs = carry
        inp = jnp.where(stage == 0, xs[jnp.minimum(t, M - 1)], state)
        out = jnp.tanh(inp @ w)
        j = t - (NS - 1)  # the microbatch leaving the last stage
        outs = jnp.where((stage == NS - 1) & (j >= 0), outs.at[jnp.clip(j, 0, M - 1)].set(out), outs)
        return lax.ppermute(out, "stage", ring), outs

    _, outs = lax.fori_loop(0, M + NS - 1, step, (varying(jnp.zeros((b, d), xs.dtype)), varying(jnp.zeros_like(xs))))
    return lax.psum(outs, "stage")


def circular(ws, xs, V=2):
    """ws: [1, V, d, d] (layer r*P + s of the model on stage s); xs: [M, b, d], M = P."""
    M, stage = xs.shape[0], lax.axis_index("stage")

    def step(t, carry):
        state, outs = carry
        j = t - stage                     # the work item at this stage: repeat j // M, microbatch j % M
        r = jnp.clip(j // M, 0, V - 1)
        inp = jnp.where((stage == 0) & (j < M), xs[jnp.clip(j, 0, M - 1)], state)
        out = jnp.tanh(inp @ ws[0, r])
        last = (stage == NS - 1) & (j >= (V - 1) * M) & (j < V * M)
        outs = jnp.where(last, outs.at[jnp.clip(j - (V - 1) * M, 0, M - 1)].set(out), outs)
        return lax.ppermute(out, "stage", ring), outs

    _, outs = lax.fori_loop(0, M * V + NS - 1, step, (varying(jnp.zeros((b, d), xs.dtype)), varying(jnp.zeros_like(xs))))
    return lax.psum(outs, "stage")


back = [(i, (i - 1) % NS) for i in range(NS)]


def one_f_one_b(ws, xs, ys):
    """ws: [1, d, d] this stage's layer; xs, ys: [M, b, d]. Returns the loss (mean squared
    error over every microbatch) and this stage's weight gradient, by hand."""
    M, stage, w = xs.shape[0], lax.axis_index("stage"), ws[0]
    N = xs.size

    def step(t, carry):
        fin, gin, s_in, s_out, gw, loss = carry
        j = t - stage                      # forward: microbatch j
        jv, jc = (j >= 0) & (j < M), jnp.clip(j, 0, M - 1)
        inp = jnp.where(stage == 0, xs[jc], fin)
        out = jnp.tanh(inp @ w)
        s_in = jnp.where(jv, s_in.at[jc].set(inp), s_in)
        s_out = jnp.where(jv, s_out.at[jc].set(out), s_out)
        last = stage == NS - 1
        err = out - ys[jc]
        loss = loss + jnp.where(last & jv, jnp.sum(err * err) / N, 0.0)
        k = t - (2 * NS - 2 - stage)       # backward: microbatch k
        kv, kc = (k >= 0) & (k < M), jnp.clip(k, 0, M - 1)
        gz = jnp.where(last, 2.0 * err / N, gin) * (1.0 - s_out[kc] ** 2)
        gw = gw + jnp.where(kv, s_in[kc].T @ gz, 0.0)
        return lax.ppermute(out, "stage", ring), lax.ppermute(gz @ w.T, "stage", back), s_in, s_out, gw, loss

    z = varying(jnp.zeros((b, d), xs.dtype))
    init = (z, z, varying(jnp.zeros_like(xs)), varying(jnp.zeros_like(xs)), jnp.zeros_like(w),
            varying(jnp.zeros((), xs.dtype)))
    _, _, _, _, gw, loss = lax.fori_loop(0, M + 2 * NS - 2, step, init)
    return lax.psum(loss, "stage"), gw[None]


def write(name, body, ws, M):
    if body is one_f_one_b:  # the schedule computes its own gradients
        f1 = shard_map(body, mesh=mesh, in_specs=(P("stage"), P(), P()), out_specs=(P(), P("stage")))

        def step(ws, xs, ys):
            l, g = f1(ws, xs, ys)
            return l, ws - 0.5 * g
    else:
        f = shard_map(body, mesh=mesh, in_specs=(P("stage"), P()), out_specs=P())

        def step(ws, xs, ys):
            l, g = jax.value_and_grad(lambda w: jnp.mean((f(w, xs) - ys) ** 2))(ws)
            return l, ws - 0.5 * g

    r = np.random.RandomState(1)
    xs = r.randn(M, b, d).astype(np.float32)
    ys = r.randn(M, b, d).astype(np.float32)
    sh = (NamedSharding(mesh, P("stage")), NamedSharding(mesh, P()), NamedSharding(mesh, P()))
    js = jax.jit(step, in_shardings=sh)
    c = js.lower(ws, xs, ys).compile()
    open(os.path.join(here, f"{name}.hlo"), "w").write(c.as_text())
    outs = jax.tree.leaves(js(ws, xs, ys))
    if body is one_f_one_b:  # the same step unpipelined, differentiated by JAX
        def plain(w):
            h = xs
            for s in range(NS):
                h = jnp.tanh(h @ w[s])
            return jnp.mean((h - ys) ** 2)
        l0, g0 = jax.value_and_grad(plain)(ws)
        upd = np.abs(0.5 * np.asarray(g0)).max()
        assert abs(float(outs[0]) - float(l0)) <= 1e-5 * abs(float(l0)), (outs[0], l0)
        assert np.abs(np.asarray(outs[1]) - (ws - 0.5 * np.asarray(g0))).max() <= 1e-4 * upd
    for i, o in enumerate(outs):
        np.save(os.path.join(here, f"{name}.out{i}.npy"), np.asarray(o))
    for n, v in zip(["ws", "xs", "ys"], [ws, xs, ys]):
        np.save(os.path.join(here, f"{name}.{n}.npy"), v)
    with open(os.path.join(here, f"{name}.inputs"), "w") as fh:
        fh.write("".join(f"{name}.{n}.npy\n" for n in ["ws", "xs", "ys"]))
    with open(os.path.join(here, f"{name}.shardings"), "w") as fh:
        for s, o in zip(jax.tree.leaves(c.output_shardings), outs):
            fh.write(str(s._to_xla_hlo_sharding(o.ndim)) + "\n")


r = np.random.RandomState(0)
wg = (r.randn(NS, d, d) * 0.3).astype(np.float32)
wc = (r.randn(NS, 2, d, d) * 0.3).astype(np.float32)
want = sys.argv[1:] or ["ppg", "ppc", "pp1"]
if "ppg" in want:
    write("ppg", gpipe, wg, 4)
if "ppc" in want:
    write("ppc", circular, wc, NS)
if "pp1" in want:
    write("pp1", one_f_one_b, wg, NS)
