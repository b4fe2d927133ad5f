#!/usr/bin/env python3
"""user_pod.py: a user's Pallas kernel inside shard_map over 4 chips (data parallel, an XLA psum
around it), not tuned on: lowered for a v5e 2x2 slice, run on tpusim (both back ends, the
global result) against Pallas's interpret mode on 4 CPU devices, and timed on v5e, v5p, v6e.

    PYTHONPATH=python python3 bench/pallas/user_pod.py

Tolerance as user.py's f32 one (2^-20 of the largest value); split by sha1 of the name as
user.py splits (r7_shard_map_dp_rmsnorm_f32_4dev_128x256: tune)."""
import os
import sys
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
import numpy as np, jax, jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jax._src import shard_map
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "tpusim"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import pallas_decode, tpusim

def build(mesh, interpret=False):
    def local(x, w):
        def kernel(x_ref, w_ref, o_ref):
            v = x_ref[...]
            o_ref[...] = v * lax.rsqrt(jnp.mean(v * v, axis=1, keepdims=True) + 1e-6) * w_ref[...]
        y = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 16,),
                           in_specs=[pl.BlockSpec((16, 256), lambda i: (i, 0)), pl.BlockSpec((1, 256), lambda i: (0, 0))],
                           out_specs=pl.BlockSpec((16, 256), lambda i: (i, 0)), interpret=interpret)(x, w)
        s = lax.psum(jnp.sum(y, axis=0, keepdims=True), "x")
        return y - s / 256.0
    return jax.jit(lambda x, w: shard_map.shard_map(local, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"), check_vma=False)(x, w))

r = np.random.default_rng(7)
x = jnp.asarray(r.standard_normal((128, 256)), jnp.float32)
w = jnp.asarray(r.standard_normal((1, 256)), jnp.float32)
from jax.experimental import topologies
tdevs = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices[:4]
tmesh = Mesh(np.array(tdevs), ("x",))
sx = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(tmesh, P("x")))
sw = jax.ShapeDtypeStruct(w.shape, w.dtype, sharding=NamedSharding(tmesh, P()))
with jax.default_device(tdevs[0]):
    text = build(tmesh).trace(sx, sw).lower(lowering_platforms=("tpu",)).as_text(dialect="hlo")
text = pallas_decode.decode_hlo(text)
cmesh = Mesh(np.array(jax.devices("cpu")[:4]), ("x",))
want = np.asarray(build(cmesh, True)(jax.device_put(x, NamedSharding(cmesh, P("x"))), jax.device_put(w, NamedSharding(cmesh, P()))))
for b in ("ref", "tpu"):
    try:
        outs, rep = tpusim.run(text, [np.asarray(x), np.asarray(w)], backend=b, chip="v5e")
        g = np.asarray(outs[0])
        err = float(np.max(np.abs(g - want)) / (np.max(np.abs(want)) / 2**20))
        print("r7_shard_map_dp_rmsnorm_f32_4dev_128x256", b, g.shape, "err/tol", err)
    except Exception as e:
        print("r7_shard_map_dp_rmsnorm_f32_4dev_128x256", b, "FAIL", str(e)[:300])
for chip in ("v5e", "v5p", "v6e"):
    try:
        _, rep = tpusim.run(text, [np.asarray(x), np.asarray(w)], chip=chip)
        print(chip, "%.2fus" % (rep.step_time_s * 1e6))
    except Exception as e:
        print(chip, "FAIL", str(e)[:300])
