"""A jit over arrays sharded on a 2 x 2 mesh (NamedSharding): on tpusim the shards live on
the simulated chips and the program runs partitioned over all four.

    JAX_PLATFORMS=tpusim TPUSIM_TOPOLOGY=2x2 python3 examples/pjrt/sharded.py [OUT.npz]
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
rng = np.random.default_rng(0)
a = jax.device_put(rng.standard_normal((16, 32), dtype=np.float32), NamedSharding(mesh, P("x", None)))
w = jax.device_put(rng.standard_normal((32, 24), dtype=np.float32), NamedSharding(mesh, P(None, "y")))


@jax.jit
def f(a, w):
    h = jnp.tanh(a @ w)
    return h, h.sum(0)


h, s = f(a, w)
print(h.sharding, s.sharding)
print([(sh.device, sh.index) for sh in a.addressable_shards])
if len(sys.argv) > 1:
    np.savez(sys.argv[1], h=np.asarray(h), s=np.asarray(s))
