"""Linear algebra as users call it, run by test_pjrt_users.py on JAX_PLATFORMS=tpusim and on
CPU: `python3 pjrt_linalg_cases.py OUT.npz`. Results that are unique up to signs (Q, the
eigenvectors) are saved as products that are not (Q R, V diag(w) Vᵀ, |R|)."""
import sys

import jax
import jax.numpy as jnp
import numpy as np

rng = np.random.default_rng(0)
A = rng.standard_normal((6, 4)).astype(np.float32)
S = A.T @ A + np.eye(4, dtype=np.float32)
S7 = (lambda m: m + m.T)(rng.standard_normal((7, 7)).astype(np.float32))  # odd size, indefinite
B = rng.standard_normal((6, 2)).astype(np.float32)
Ab = rng.standard_normal((3, 5, 5)).astype(np.float32)

out = {}
q, r = jax.jit(jnp.linalg.qr)(A)
out["qr.recon"], out["qr.abs_r"], out["qr.qtq"] = q @ r, jnp.abs(r), q.T @ q
w, v = jax.jit(jnp.linalg.eigh)(S)
out["eigh.w"], out["eigh.recon"] = w, (v * w) @ v.T
w7, v7 = jax.jit(jnp.linalg.eigh)(S7)
out["eigh7.w"], out["eigh7.recon"] = w7, (v7 * w7) @ v7.T
out["svd.s"] = jax.jit(lambda a: jnp.linalg.svd(a, compute_uv=False))(A)
u, s, vt = jax.jit(lambda a: jnp.linalg.svd(a, full_matrices=False))(A)
out["svd.recon"] = (u * s) @ vt
out["norm2"] = jax.jit(lambda a: jnp.linalg.norm(a, ord=2))(A)
out["lstsq"] = jax.jit(lambda a, b: jnp.linalg.lstsq(a, b)[0])(A, B)
out["pinv"] = jax.jit(jnp.linalg.pinv)(A)
out["qr_batched.recon"] = jax.jit(lambda a: jnp.matmul(*jnp.linalg.qr(a)))(Ab)
out["solve"] = jax.jit(jnp.linalg.solve)(S, B[:4])
out["cholesky"] = jax.jit(jnp.linalg.cholesky)(S)
np.savez(sys.argv[1], **{k: np.asarray(x) for k, x in out.items()})
