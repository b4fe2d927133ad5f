"""A pre-LayerNorm transformer block (causal 4-head attention, GELU MLP) trained for three
jitted steps with value_and_grad and tree_map:

    JAX_PLATFORMS=tpusim python3 examples/pjrt/transformer_step.py [OUT.npz]
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np


def layernorm(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b


def block(p, x):
    B, T, D = x.shape
    H = 4
    h = layernorm(x, p["g1"], p["b1"])
    q, k, v = jnp.split(h @ p["wqkv"], 3, -1)
    q, k, v = (t.reshape(B, T, H, D // H) for t in (q, k, v))
    s = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(D // H)
    s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -1e9)
    a = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(s, -1), v).reshape(B, T, D)
    x = x + a @ p["wo"]
    h = layernorm(x, p["g2"], p["b2"])
    return x + jax.nn.gelu(h @ p["w1"]) @ p["w2"]


def loss(p, x, y):
    return ((block(p, x) - y) ** 2).mean()


@jax.jit
def step(p, x, y):
    l, g = jax.value_and_grad(loss)(p, x, y)
    return jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g), l


rng = np.random.default_rng(0)
D = 64
p = {"g1": jnp.ones(D), "b1": jnp.zeros(D), "g2": jnp.ones(D), "b2": jnp.zeros(D),
     "wqkv": jnp.asarray(rng.standard_normal((D, 3 * D), dtype=np.float32) * 0.1),
     "wo": jnp.asarray(rng.standard_normal((D, D), dtype=np.float32) * 0.1),
     "w1": jnp.asarray(rng.standard_normal((D, 4 * D), dtype=np.float32) * 0.1),
     "w2": jnp.asarray(rng.standard_normal((4 * D, D), dtype=np.float32) * 0.1)}
x = jnp.asarray(rng.standard_normal((2, 16, D), dtype=np.float32))
y = jnp.asarray(rng.standard_normal((2, 16, D), dtype=np.float32))
for i in range(3):
    p, l = step(p, x, y)
    print(f"step {i}: loss = {float(l):.6f}")
if len(sys.argv) > 1:
    np.savez(sys.argv[1], l=np.asarray(l), **{k: np.asarray(v) for k, v in p.items()})
