#!/usr/bin/env python3
"""gen_grad_accum.py: writes grad_accum.hlo (JAX's lowered gradient-accumulation step: a scan
over 4 microbatches split over data=8, weights replicated; tests/cli/spmd.sh) and, beside it
in the current directory, JAX's results on 8 CPU devices (in*.npy, out*.npy) to compare with
`tpusim run grad_accum.hlo -i in0.npy -i in1.npy -i in2.npy`."""
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"
import numpy as np, jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
m = Mesh(np.array(jax.devices()).reshape(8), ("data",))
F32 = jnp.float32
def mlp(x, w1, w2): return jnp.tanh(x @ w1) @ w2
def step(w1, w2, xs):
    loss = lambda ps, xb: jnp.mean(jnp.square(mlp(xb, *ps)))
    def body(acc, xb):
        g = jax.grad(loss)((w1, w2), xb)
        return tuple(s + d for s, d in zip(acc, g)), None
    acc = jax.lax.scan(body, (jnp.zeros_like(w1), jnp.zeros_like(w2)), xs)[0]
    return w1 - 0.25 * acc[0], w2 - 0.25 * acc[1]
r = np.random.RandomState(0)
w1 = (r.randint(-3, 4, (8, 16)) / 8).astype(np.float32)
w2 = (r.randint(-3, 4, (16, 8)) / 8).astype(np.float32)
xs = (r.randint(-3, 4, (4, 32, 8)) / 4).astype(np.float32)
sh = [NamedSharding(m, P(None, None)), NamedSharding(m, P(None, None)), NamedSharding(m, P(None, "data", None))]
f = jax.jit(step, in_shardings=sh, out_shardings=(sh[0], sh[1]))
open("grad_accum.hlo", "w").write(f.lower(w1, w2, xs).as_text(dialect="hlo"))
out = f(w1, w2, xs)
for i, a in enumerate((w1, w2, xs)): np.save(f"in{i}.npy", a)
for i, o in enumerate(out): np.save(f"out{i}.npy", np.asarray(o))
