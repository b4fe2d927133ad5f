#!/usr/bin/env python3
"""gen.py: writes the bundled pod example, a tanh MLP layer sharded over a (2, 4) mesh of
8 devices, as XLA's SPMD partitioner compiles it for CPU (jax 0.10.2, numpy 2.4):

    mlp.hlo          the partitioned module (num_partitions=8, per-device shapes)
    mlp.a.npy, mlp.w.npy      the global inputs
    mlp.out0..2.npy  the global results from JAX
    mlp.shardings    one line per result: its HLO sharding (XLA's text omits it), for
                     tpusim run --out-sharding

Run by hand: python3 examples/pod/gen.py (needs jax; sets 8 host devices itself)."""
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P, NamedSharding

here = os.path.dirname(os.path.abspath(__file__))
mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))

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
