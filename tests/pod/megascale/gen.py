#!/usr/bin/env python3
"""gen.py: the three exchanges between slices as the XLA TPU compiler writes them for two
v5e 2x2 slices (libtpu compile-only, topologies.get_topology_desc(..., num_slices=2)), and
their values from JAX on XLA CPU over 8 devices: prog.hlo is one slice's module whose psum,
all_gather and ppermute over the "dcn" axis (2 slices x 4 chips, shard_map) are send/recv
pairs to the megascale runtime (ALL_REDUCE, ALL_GATHER, ONE_TO_ONE); x.npy the global input,
outK.npy JAX's results, shardings their HLO shardings. tests/cli/megascale.sh runs prog.hlo
with `tpusim run --slices 2` (docs/pod.md, "Many slices").
Run by hand (jax 0.10.2 with libtpu): python3 tests/pod/megascale/gen.py"""
import os, subprocess, sys
here = os.path.dirname(os.path.abspath(__file__))
import numpy as np


def f(x, axis):
    import jax
    s = jax.lax.psum(x, axis)                                # ALL_REDUCE (SUM)
    g = jax.lax.all_gather(x * 2.0, axis, tiled=True)        # ALL_GATHER along the rows
    p = jax.lax.ppermute(x + 1.0, axis, [(0, 1), (1, 0)])    # ONE_TO_ONE
    return s, g, p


def build(mesh):
    import jax
    from jax.sharding import PartitionSpec as P
    from jax.experimental.shard_map import shard_map
    return jax.jit(shard_map(lambda x: f(x, "dcn"), mesh=mesh, in_specs=P("dcn", "ici"),
                             out_specs=(P(None, "ici"), P(None, "ici"), P("dcn", "ici")), check_rep=False))


if sys.argv[1:] == ["cpu"]:  # JAX's values on XLA CPU, 8 devices slice-major as tpusim numbers them
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax
    from jax.sharding import Mesh
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("dcn", "ici"))
    x = np.random.RandomState(0).randn(16, 128).astype(np.float32)
    outs = build(mesh)(x)
    np.save(os.path.join(here, "x.npy"), x)
    for i, o in enumerate(outs):
        np.save(os.path.join(here, f"out{i}.npy"), np.asarray(o))
    sys.exit(0)

import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import Mesh
topo = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2", num_slices=2)
devs = sorted(topo.devices, key=lambda d: (d.slice_index, d.id))
c = build(Mesh(np.array(devs).reshape(2, 4), ("dcn", "ici"))).lower(jax.ShapeDtypeStruct((16, 128), jnp.float32)).compile()
open(os.path.join(here, "prog.hlo"), "w").write(c.as_text())
with open(os.path.join(here, "shardings"), "w") as fh:
    for s in c.output_shardings:
        fh.write(str(s._to_xla_hlo_sharding(2)) + "\n")
subprocess.run([sys.executable, os.path.abspath(__file__), "cpu"], check=True)
