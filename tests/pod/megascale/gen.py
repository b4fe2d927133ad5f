#!/usr/bin/env python3
"""gen.py: the three exchanges between slices as the XLA TPU compiler writes them for two
v5e 2x2 slices (libtpu compile-only, topologies.get_topology_desc(..., num_slices=2)), and
their values from JAX on XLA CPU over 8 devices: prog.hlo is one slice's module whose psum,
all_gather and ppermute over the "dcn" axis (2 slices x 4 chips, shard_map) are send/recv
pairs to the megascale runtime (ALL_REDUCE, ALL_GATHER, ONE_TO_ONE); x.npy the global input,
outK.npy JAX's results, shardings their HLO shardings. step.hlo: an SGD step of a scanned
4-layer tanh MLP, the batch over 2 slices x 4 chips (FSDP inside each slice): the compiler
all-reduces each layer's weight-gradient shard over DCN inside the backward loop (a megascale
send/recv pair in the while body); step.ws.npy, step.x.npy its inputs, step.outK.npy JAX's
results. tests/cli/megascale.sh runs both with `tpusim run --slices 2` (docs/pod.md, "Many
slices").
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


L, D = 4, 128


def loss(ws, x):
    import jax, jax.numpy as jnp
    h, _ = jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)
    return jnp.mean(h ** 2)


def step(ws, x):
    import jax
    l, g = jax.value_and_grad(loss)(ws, x)
    return l, ws - 10.0 * g  # a large step: the updates stand well above bf16 rounding


def build_step(mesh):
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P
    wsh = NamedSharding(mesh, P(None, "ici", None))
    return jax.jit(step, in_shardings=(wsh, NamedSharding(mesh, P(("dcn", "ici"), None))),
                   out_shardings=(NamedSharding(mesh, P()), wsh))


def build(mesh):
    import jax
    from jax.sharding import PartitionSpec as P
    from jax.experimental.shard_map import shard_map
    return jax.jit(shard_map(lambda x: f(x, "dcn"), mesh=mesh, in_specs=P("dcn", "ici"),
                             out_specs=(P(None, "ici"), P(None, "ici"), P("dcn", "ici")), check_rep=False))


if sys.argv[1:] == ["cpu"]:  # JAX's values on XLA CPU, 8 devices slice-major as tpusim numbers them
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("dcn", "ici"))
    x = np.random.RandomState(0).randn(16, 128).astype(np.float32)
    outs = build(mesh)(x)
    np.save(os.path.join(here, "x.npy"), x)
    for i, o in enumerate(outs):
        np.save(os.path.join(here, f"out{i}.npy"), np.asarray(o))
    r = np.random.RandomState(1)
    ws = (r.randn(L, D, D) * 0.1).astype(np.float32)
    xs = r.randn(16, D).astype(np.float32)
    np.save(os.path.join(here, "step.ws.npy"), ws)
    np.save(os.path.join(here, "step.x.npy"), xs)
    for i, o in enumerate(build_step(mesh)(jnp.asarray(ws, jnp.bfloat16), jnp.asarray(xs, jnp.bfloat16))):
        np.save(os.path.join(here, f"step.out{i}.npy"), np.asarray(o, np.float32))
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
S = jax.ShapeDtypeStruct
mesh = Mesh(np.array(devs).reshape(2, 4), ("dcn", "ici"))
c = build_step(mesh).lower(S((L, D, D), jnp.bfloat16), S((16, D), jnp.bfloat16)).compile()
open(os.path.join(here, "step.hlo"), "w").write(c.as_text())
with open(os.path.join(here, "step.shardings"), "w") as fh:
    for s, nd in zip(c.output_shardings, (0, 3)):
        fh.write(str(s._to_xla_hlo_sharding(nd)) + "\n")
subprocess.run([sys.executable, os.path.abspath(__file__), "cpu"], check=True)
