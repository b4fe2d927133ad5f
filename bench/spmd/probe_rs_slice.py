"""probe_rs_slice.py [TOPOLOGY ...]: on which slices does the XLA TPU compiler keep an all-reduce
over every device, each device then slicing its own block, rather than making it a
reduce-scatter (docs/spmd.md, "All-reduce kept"; src/compile/spmd/rs_create.c)? x.T @ dy with
the batch split over a 1-D mesh of the whole slice and the result wanted split the same way,
windowed einsums off; libtpu compile-only. Prints RS (an all-reduce-scatter fusion) or AR, and
the algorithm the compiler gives the plain all-reduce of the same sum (its ring strategy and
colors, the rings it runs at once). Device order does not change the answer (tried: JAX's,
by id, x-fastest, y-fastest, snake on v5e 4x4, 4x8, v5p 2x2x2)."""
import os, re, sys
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-8")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
import numpy as np
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding as NS, PartitionSpec as P

TOPOS = sys.argv[1:] or ["v5e:2x2", "v5e:2x4", "v5e:4x4", "v5e:4x8", "v5e:8x8", "v5e:8x16", "v6e:2x2", "v6e:2x4",
                         "v6e:4x4", "v6e:4x8", "v6e:8x8", "v6e:8x16", "v5p:2x2x1", "v5p:2x2x2", "v5p:2x2x4",
                         "v5p:2x2x8", "v5p:2x4x4", "v5p:2x4x8", "v5p:2x8x8", "v5p:2x4x16", "v5p:4x4x4", "v5p:4x4x8",
                         "v5p:4x8x8", "v4:2x2x1", "v4:2x2x2", "v4:2x2x4", "v4:2x4x4", "v4:2x4x8"]
for topo in TOPOS:
    devs = list(topologies.get_topology_desc(platform="tpu", topology_name=topo).devices)
    n = len(devs)
    mesh = Mesh(np.array(devs), ("a",))
    f = lambda x, dy: x.T @ dy
    sds = [jax.ShapeDtypeStruct((256 * n, 2048), jnp.bfloat16, sharding=NS(mesh, P("a")))] * 2
    split = jax.jit(f, out_shardings=NS(mesh, P("a"))).lower(*sds).compile(
        compiler_options={"xla_tpu_enable_windowed_einsum_for_reduce_scatter": False}).as_text()
    whole = jax.jit(f, out_shardings=NS(mesh, P())).lower(*sds).compile().as_text()
    algo = re.findall(r'"strategy":"(\w+)","debug":"\\n\w+\{colors:(\d+)', whole)
    print(topo, n, "RS" if re.search(r"^%all-reduce-scatter", split, re.M) else "AR",
          "all-reduce: %s colors %s" % algo[0] if algo else "", flush=True)
