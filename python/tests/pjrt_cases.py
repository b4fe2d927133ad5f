"""JAX programs of many kinds, run by test_pjrt.py on JAX_PLATFORMS=tpusim and on 4 CPU
devices: `python3 pjrt_cases.py OUT.npz` saves every case's result leaves."""
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import shard_map
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
x = jax.device_put(np.arange(64, dtype=np.float32).reshape(8, 8) / 64, NamedSharding(mesh, P("x", "y")))
w = jax.device_put(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8), NamedSharding(mesh, P("x", None)))
key = jax.random.PRNGKey(0)

CASES = {
    "random": (jax.jit(lambda k: jax.random.normal(k, (4, 3))), key),
    "scan": (jax.jit(lambda v: jax.lax.scan(lambda c, y: (c + y, c * y), 0.0, v)), jnp.arange(5.0)),
    "cond": (jax.jit(lambda v: jax.lax.cond(v.sum() > 0, lambda u: u * 2, lambda u: u - 1, v)), jnp.arange(3.0)),
    "fori": (jax.jit(lambda n: jax.lax.fori_loop(0, n, lambda i, c: c + i, 0)), 10),
    "vmap": (jax.jit(jax.vmap(lambda a, b: a @ b)), jnp.ones((3, 4, 5)), jnp.ones((3, 5, 2))),
    "bf16": (jax.jit(lambda a: (a @ a).astype(jnp.float32)), jnp.arange(16, dtype=jnp.bfloat16).reshape(4, 4)),
    "int_argmax": (jax.jit(lambda a: (a * 3 // 2, jnp.argmax(a))), jnp.arange(10)),
    "uint8_bool": (jax.jit(lambda a: (a + 1, a > 1)), jnp.arange(3, dtype=jnp.uint8)),
    "at_set": (jax.jit(lambda a: a.at[2].set(7.0)), jnp.zeros(5)),
    "conv": (jax.jit(lambda a, b: jax.lax.conv(a, b, (1, 1), "SAME")), jnp.ones((1, 2, 6, 6)), jnp.ones((3, 2, 3, 3))),
    "fft": (jax.jit(jnp.fft.fft), jnp.arange(4.0)),
    "empty": (jax.jit(lambda a: a * 2), jnp.zeros((0, 3))),
    "eager_add": (lambda a, b: a + b, jnp.ones(3), jnp.ones(3)),
    "device_put": (lambda a: jax.device_put(a, jax.devices()[3]) * 2, np.ones(3, np.float32)),
    "out_sharded": (jax.jit(lambda a: jnp.sin(a) * 2, out_shardings=NamedSharding(mesh, P("x", "y"))), x),
    "constraint": (jax.jit(lambda a: jax.lax.with_sharding_constraint(a @ a.T, NamedSharding(mesh, P(None, "y"))).sum(1)), x),
    "shard_map_psum": (jax.jit(shard_map(lambda a: jax.lax.psum(a, "x"), mesh=mesh, in_specs=P("x", "y"),
                                         out_specs=P(None, "y"))), x),
    "fsdp_grad": (jax.jit(jax.grad(lambda v, a: jnp.tanh(a @ v).sum())), w, x),
    "pmap_axis_index": (jax.pmap(lambda v: v * jax.lax.axis_index("i"), axis_name="i"), np.ones((4, 3), np.float32)),
    "pmap_psum_int": (jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i"), np.arange(8, dtype=np.int32).reshape(4, 2)),
}

out = {}
for name, (fn, *args) in CASES.items():
    for i, leaf in enumerate(jax.tree_util.tree_leaves(fn(*args))):
        out["%s.%d" % (name, i)] = np.asarray(leaf)
np.savez(sys.argv[1], **out)
