#!/usr/bin/env python3
"""gen_tpu.py: the bundled TPU-compiled pod example. The gradient of a two-layer MLP loss,
batch split over 8 chips and the layers tensor-parallel over 4, compiled by the real XLA
TPU compiler for a v5e 2x4 slice in compile-only mode (libtpu, no TPU needed):

    tpu_fsdp.hlo          the partitioned, TPU-optimized module (tiled layouts, S(1)
                          memory spaces, copy-start/copy-done, fusions, collectives)
    tpu_fsdp.{x,a,b}.npy  global inputs;  tpu_fsdp.inputs lists them in order
    tpu_fsdp.outK.npy     the gradients from JAX on CPU (bf16, as float32)
    tpu_fsdp.shardings    the results' HLO shardings (for --out-sharding @FILE)

Run by hand: pip install "jax[tpu]==0.10.2"; python3 examples/pod/gen_tpu.py"""
import os
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import topologies
from jax.sharding import Mesh, PartitionSpec as P, NamedSharding as NS

here = os.path.dirname(os.path.abspath(__file__))
topo = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x4")
mesh = Mesh(np.array(topo.devices).reshape(2, 4), ("x", "y"))


def f(x, a, b):
    return jnp.mean((jnp.tanh(x @ a) @ b) ** 2)


g = jax.grad(f, argnums=(1, 2))
M, K, N = 256, 512, 1024
sx, sa, sb = NS(mesh, P(("x", "y"), None)), NS(mesh, P(None, "y")), NS(mesh, P("y", None))
shapes = [((M, K), sx), ((K, N), sa), ((N, K), sb)]
c = jax.jit(g).lower(*[jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=h) for s, h in shapes]).compile()
open(os.path.join(here, "tpu_fsdp.hlo"), "w").write(c.as_text())
with open(os.path.join(here, "tpu_fsdp.shardings"), "w") as fh:
    for s in c.output_shardings:
        fh.write(str(s._to_xla_hlo_sharding(2)) + "\n")
r = np.random.RandomState(0)
vals = [(r.randn(M, K) * 0.5).astype(np.float32), (r.randn(K, N) * 0.03).astype(np.float32),
        (r.randn(N, K) * 0.03).astype(np.float32)]
names = ["x", "a", "b"]
for n, v in zip(names, vals):
    np.save(os.path.join(here, f"tpu_fsdp.{n}.npy"), v)
with open(os.path.join(here, "tpu_fsdp.inputs"), "w") as fh:
    fh.write("".join(f"tpu_fsdp.{n}.npy\n" for n in names))
cpu = jax.devices("cpu")[0]
out = jax.jit(g)(*(jax.device_put(jnp.asarray(v, jnp.bfloat16), cpu) for v in vals))
for i, o in enumerate(out):
    np.save(os.path.join(here, f"tpu_fsdp.out{i}.npy"), np.asarray(o.astype(jnp.float32)))
