#!/usr/bin/env python3
"""gen_slices.py: a data-parallel SGD step over two slices, as XLA's SPMD partitioner
compiles it for 8 CPU devices (jax 0.10.2), for `tpusim run --slices 2` (docs/pod.md,
"Many slices").

The mesh is MaxText's hybrid one (jax.experimental.mesh_utils.create_hybrid_device_mesh
with dcn_mesh_shape (2, 1) and ici_mesh_shape (2, 2)): axis "data" = 2 slices x 2 chips,
"model" = 2 chips in a slice; devices 0-3 are slice 0 and 4-7 slice 1, as tpusim numbers
them (device id = slice * chips_per_slice + chip). The weight gradients are all-reduced
over "data", whose groups span both slices: over DCN.

Writes dp2s.hlo, dp2s.<arg>.npy, dp2s.outK.npy (JAX's results), dp2s.shardings,
dp2s.inputs. Run by hand: python3 examples/pod/gen_slices.py."""
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P, NamedSharding

here = os.path.dirname(os.path.abspath(__file__))
devs = np.array(jax.devices()[:8]).reshape(2, 2, 2)           # [slice, data in slice, model]
mesh = Mesh(devs.reshape(4, 2), ("data", "model"))            # data = (slice, data in slice)


def loss(params, x, y):
    w1, w2 = params
    h = jnp.tanh(x @ w1)
    return jnp.mean((h @ w2 - y) ** 2)


def step(params, x, y):
    l, g = jax.value_and_grad(loss)(params, x, y)
    return l, jax.tree.map(lambda p, g: p - 0.1 * g, params, g)


r = np.random.RandomState(0)
w1 = r.randn(64, 128).astype(np.float32) * 0.1
w2 = r.randn(128, 32).astype(np.float32) * 0.1
x = r.randn(64, 64).astype(np.float32)
y = r.randn(64, 32).astype(np.float32)
pshard = (NamedSharding(mesh, P(None, "model")), NamedSharding(mesh, P("model", None)))
bshard = NamedSharding(mesh, P("data", None))
js = jax.jit(step, in_shardings=(pshard, bshard, bshard))
c = js.lower((w1, w2), x, y).compile()
open(os.path.join(here, "dp2s.hlo"), "w").write(c.as_text())
leaves = jax.tree.leaves(js((w1, w2), x, y))
for i, o in enumerate(leaves):
    np.save(os.path.join(here, f"dp2s.out{i}.npy"), np.asarray(o))
names = ["w1", "w2", "x", "y"]
for n, v in zip(names, [w1, w2, x, y]):
    np.save(os.path.join(here, f"dp2s.{n}.npy"), v)
with open(os.path.join(here, "dp2s.inputs"), "w") as fh:
    fh.write("".join(f"dp2s.{n}.npy\n" for n in names))
with open(os.path.join(here, "dp2s.shardings"), "w") as fh:
    for s, o in zip(jax.tree.leaves(c.output_shardings), leaves):
        fh.write(str(s._to_xla_hlo_sharding(o.ndim)) + "\n")
