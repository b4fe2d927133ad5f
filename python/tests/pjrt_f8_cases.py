"""float8 programs, run by test_pjrt_users.py on JAX_PLATFORMS=tpusim and on CPU:
`python3 pjrt_f8_cases.py OUT.npz` saves every result (float8 results as their bytes)."""
import sys

import jax
import jax.numpy as jnp
import numpy as np

x = np.concatenate([np.linspace(-500, 500, 41), [1e-3, -2e-3, 3e-3, 0.0017, 2.0 ** -7, 2.0 ** -10, 460, 470, 6e4,
                                                 7e4, -1e5, np.inf, -np.inf, np.nan]]).astype(np.float32)
out = {}
for t in (jnp.float8_e4m3fn, jnp.float8_e5m2):
    n = jnp.dtype(t).name
    q = jax.jit(lambda a: a.astype(t))(x)  # quantize: rounding, subnormals, overflow, inf, NaN
    out[n + ".quant"] = np.asarray(q).view(np.uint8)
    out[n + ".ml_dtypes"] = x.astype(t).view(np.uint8)
    every = np.arange(256, dtype=np.uint8).view(t)  # every code, in and out of the buffers
    out[n + ".decode"] = np.asarray(jax.jit(lambda a: a.astype(jnp.float32))(every))
    out[n + ".negate"] = np.asarray(jax.jit(lambda a: -a)(every)).astype(np.float32)
    a8 = jnp.asarray(np.arange(-8, 8, dtype=np.float32).reshape(4, 4) / 3).astype(t)
    out[n + ".arith"] = np.asarray(jax.jit(lambda a: a + a * a)(a8)).view(np.uint8)
    out[n + ".dot"] = np.asarray(jax.jit(lambda a: jnp.dot(a, a, preferred_element_type=jnp.float32))(a8))
    out[n + ".sum"] = np.asarray(jax.jit(lambda a: a.sum(0))(a8)).view(np.uint8)
np.savez(sys.argv[1], **out)
