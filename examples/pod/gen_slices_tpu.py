#!/usr/bin/env python3
"""gen_slices_tpu.py: examples/pod/dp2s's data-parallel SGD step (gen_slices.py) as the real
XLA TPU compiler compiles it for two v5e 2x2 slices (libtpu compile-only,
topologies.get_topology_desc(..., num_slices=2)): dp2s_tpu.hlo, one slice's module, its
gradient all-reduces over "data" split into an in-slice reduce-scatter (the loss: an
in-slice all-reduce), a send/recv pair to the megascale runtime (DCN, ALL_REDUCE) and an
in-slice all-gather. tests/cli/slices.sh reads this program as a judge of how tpusim splits
dp2s's all-reduce between ICI and DCN; tests/cli/megascale.sh runs it (`tpusim run --slices
2`, docs/pod.md, "Many slices"). Run by hand: pip install "jax[tpu]==0.10.2"; python3 examples/pod/gen_slices_tpu.py"""
import os
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import topologies
from jax.sharding import Mesh, PartitionSpec as P, NamedSharding

here = os.path.dirname(os.path.abspath(__file__))
topo = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2", num_slices=2)
devs = sorted(topo.devices, key=lambda d: (d.slice_index, d.id))  # slice-major, as gen_slices.py
mesh = Mesh(np.array(devs).reshape(4, 2), ("data", "model"))     # data = (slice, data in slice)


def loss(params, x, y):
    w1, w2 = params
    h = jnp.tanh(x @ w1)
    return jnp.mean((h @ w2 - y) ** 2)


def step(params, x, y):
    l, g = jax.value_and_grad(loss)(params, x, y)
    return l, jax.tree.map(lambda p, g: p - 0.1 * g, params, g)


pshard = (NamedSharding(mesh, P(None, "model")), NamedSharding(mesh, P("model", None)))
bshard = NamedSharding(mesh, P("data", None))
S = jax.ShapeDtypeStruct
args = ((S((64, 128), jnp.float32), S((128, 32), jnp.float32)), S((64, 64), jnp.float32), S((64, 32), jnp.float32))
c = jax.jit(step, in_shardings=(pshard, bshard, bshard)).lower(*args).compile()
open(os.path.join(here, "dp2s_tpu.hlo"), "w").write(c.as_text())
