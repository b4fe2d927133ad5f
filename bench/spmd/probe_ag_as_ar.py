"""probe_ag_as_ar.py [TOPOLOGY/MiB ...]: when does the XLA TPU compiler run an all-gather over
every device as an all-reduce (each device's block written into zeros, then summed; docs/spmd.md,
"All-gathers run as all-reduces"; src/compile/spmd/ag_as_ar.c)? tanh(x @ w) with w split along
its rows over a 1-D mesh of the whole slice (gathered for the dot), windowed einsums off;
libtpu compile-only. Prints the collectives of the compiled program."""
import os, re, sys
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-8")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
import numpy as np
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding as NS, PartitionSpec as P

SPECS = sys.argv[1:] or [f"{t}/{mb}" for t in ("v5e:4x4", "v5e:4x8", "v5e:8x8", "v5e:8x16", "v5e:16x16", "v6e:8x8",
                                               "v6e:16x16", "v5p:2x2x2", "v5p:2x4x4", "v5p:4x4x4", "v5p:4x4x8",
                                               "v4:2x4x4") for mb in (2, 8, 16, 32, 64)]
for spec in SPECS:
    topo, mb = spec.split("/")
    devs = list(topologies.get_topology_desc(platform="tpu", topology_name=topo).devices)
    n = len(devs)
    mesh = Mesh(np.array(devs), ("a",))
    rows, cols = 1024, int(float(mb) * 2**20 / 2 / 1024)
    f = lambda x, w: jnp.tanh(x @ w)
    sds = [jax.ShapeDtypeStruct((128 * n, rows), jnp.bfloat16, sharding=NS(mesh, P("a"))),
           jax.ShapeDtypeStruct((rows, cols), jnp.bfloat16, sharding=NS(mesh, P("a")))]
    t = jax.jit(f, out_shardings=NS(mesh, P("a"))).lower(*sds).compile(
        compiler_options={"xla_tpu_enable_windowed_einsum_for_all_gather": False}).as_text()
    k = {c: len(re.findall(" " + c + r"(-start)?\(", t)) for c in ("all-reduce", "all-gather", "collective-permute")}
    print(spec, n, "MiB gathered:", mb, {q: v for q, v in k.items() if v}, flush=True)
