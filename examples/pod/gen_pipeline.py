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

For each NAME: NAME.hlo, NAME.<arg>.npy, NAME.outK.npy (JAX's loss and updated weights),
NAME.shardings, NAME.inputs. Run by hand: python3 examples/pod/gen_pipeline.py."""
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


def write(name, body, ws, M):
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
write("ppg", gpipe, (r.randn(NS, d, d) * 0.3).astype(np.float32), 4)
write("ppc", circular, (r.randn(NS, 2, d, d) * 0.3).astype(np.float32), NS)
