"""probe_rs_keep.py [--no-window] [FILTER]: when does the XLA TPU compiler turn a gradient's
all-reduce + own-block slice into a reduce-scatter (docs/spmd.md, "all-reduce kept")?
x.T @ dy (batch split over n devices), the result wanted split over the same n along its rows;
one or two gradients; 1-D meshes of 8 to 256 devices; libtpu compile-only. --no-window
compiles with xla_tpu_enable_windowed_einsum_for_reduce_scatter=false."""
import re, sys, time, json
import numpy as np
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding as NS, PartitionSpec as P
args = [a for a in sys.argv[1:] if a != "--no-window"]
opts = {"xla_tpu_enable_windowed_einsum_for_reduce_scatter": False} if "--no-window" in sys.argv else {}
sel = args[0] if args else ""
for topo in ["v5e:2x4", "v5e:4x4", "v5e:4x8", "v5e:8x8", "v5e:16x16", "v6e:2x4", "v6e:4x4", "v6e:8x8", "v5p:2x2x2",
             "v5p:2x2x4", "v5p:2x4x4"]:
    if sel and sel not in topo:
        continue
    devs = np.array(topologies.get_topology_desc(platform="tpu", topology_name=topo).devices)
    n = devs.size
    mesh = Mesh(devs.reshape((n,)), ("d",))
    B, d, F = 1024 * n, 1024, 1024
    for two in (0, 1):
        if two:
            f = lambda x, dy, dz: (x.T @ dy, x.T @ dz)
            shapes = [(B, d), (B, F), (B, F)]
            outs = (NS(mesh, P("d")), NS(mesh, P("d")))
        else:
            f = lambda x, dy: x.T @ dy
            shapes = [(B, d), (B, F)]
            outs = NS(mesh, P("d"))
        sds = [jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=NS(mesh, P("d"))) for s in shapes]
        t0 = time.time()
        t = jax.jit(f, out_shardings=outs).lower(*sds).compile(compiler_options=opts).as_text()
        k = {c: len(re.findall(" " + c + r"(-start)?\(", t)) for c in ("all-reduce", "reduce-scatter", "collective-permute", "all-gather")}
        k["ars_fusion"] = len(re.findall(r"^%all-reduce-scatter", t, re.M))
        print(topo, n, "two" if two else "one", {a: b for a, b in k.items() if b}, round(time.time() - t0, 1), flush=True)
