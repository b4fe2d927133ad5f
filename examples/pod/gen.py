#!/usr/bin/env python3
"""gen.py: writes the bundled pod examples as XLA's SPMD partitioner compiles them for CPU
(jax 0.10.2, numpy 2.4):

  mlp   a tanh MLP layer sharded over a (2, 4) mesh of 8 devices (an all-reduce);
  dp64  an SGD step of a two-layer MLP over a (16 data, 4 model) mesh of 64 devices.

For each NAME:
    NAME.hlo          the partitioned module (num_partitions=N, per-device shapes)
    NAME.<arg>.npy    the global inputs, in parameter order (see NAME.inputs)
    NAME.outK.npy     the global results from JAX
    NAME.shardings    one line per result: its HLO sharding (XLA's text omits it), for
                      tpusim run --out-sharding @NAME.shardings

Run by hand: python3 examples/pod/gen.py (needs jax; sets 64 host devices itself)."""
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=64"
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P, NamedSharding

here = os.path.dirname(os.path.abspath(__file__))
mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("x", "y"))

def f(a, w):
    h = jnp.tanh(a @ w)
    return h, jnp.sum(h, axis=0), jnp.mean(a)

a = np.random.RandomState(0).randn(16, 32).astype(np.float32)
w = np.random.RandomState(1).randn(32, 24).astype(np.float32)
jf = jax.jit(f, in_shardings=(NamedSharding(mesh, P("x", None)), NamedSharding(mesh, P(None, "y"))))
c = jf.lower(a, w).compile()
open(os.path.join(here, "mlp.hlo"), "w").write(c.as_text())
np.save(os.path.join(here, "mlp.a.npy"), a)
np.save(os.path.join(here, "mlp.w.npy"), w)
for i, o in enumerate(jf(a, w)):
    np.save(os.path.join(here, f"mlp.out{i}.npy"), np.asarray(o))
with open(os.path.join(here, "mlp.shardings"), "w") as fh:
    for s, o in zip(c.output_shardings, jf(a, w)):
        fh.write(str(s._to_xla_hlo_sharding(o.ndim)) + "\n")

with open(os.path.join(here, "mlp.inputs"), "w") as fh:
    fh.write("mlp.a.npy\nmlp.w.npy\n")

# dp64: data x model parallel SGD step on 64 devices.
mesh64 = Mesh(np.array(jax.devices()).reshape(16, 4), ("data", "model"))

def loss(params, x, y):
    w1, w2 = params
    h = jax.nn.relu(x @ w1)
    return jnp.mean((h @ w2 - y) ** 2)

def step(params, x, y):
    l, g = jax.value_and_grad(loss)(params, x, y)
    return l, jax.tree.map(lambda p, g: p - 0.1 * g, params, g)

r = np.random.RandomState(0)
w1 = r.randn(64, 128).astype(np.float32) * 0.1
w2 = r.randn(128, 16).astype(np.float32) * 0.1
x = r.randn(256, 64).astype(np.float32)
y = r.randn(256, 16).astype(np.float32)
pshard = (NamedSharding(mesh64, P(None, "model")), NamedSharding(mesh64, P("model", None)))
bshard = NamedSharding(mesh64, P("data", None))
js = jax.jit(step, in_shardings=(pshard, bshard, bshard))
c64 = js.lower((w1, w2), x, y).compile()
open(os.path.join(here, "dp64.hlo"), "w").write(c64.as_text())
leaves = jax.tree.leaves(js((w1, w2), x, y))
for i, o in enumerate(leaves):
    np.save(os.path.join(here, f"dp64.out{i}.npy"), np.asarray(o))
names = ["w1", "w2", "x", "y"]
for n, v in zip(names, [w1, w2, x, y]):
    np.save(os.path.join(here, f"dp64.{n}.npy"), v)
with open(os.path.join(here, "dp64.inputs"), "w") as fh:
    fh.write("".join(f"dp64.{n}.npy\n" for n in names))
with open(os.path.join(here, "dp64.shardings"), "w") as fh:
    for s, o in zip(jax.tree.leaves(c64.output_shardings), leaves):
        fh.write(str(s._to_xla_hlo_sharding(o.ndim)) + "\n")
