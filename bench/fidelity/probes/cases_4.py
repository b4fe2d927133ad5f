import jax, jax.numpy as jnp
BF, F32 = jnp.bfloat16, jnp.float32
def gqa5(q, k, v):
    # q [b, s, kv, g, d], k/v [b, t, kv, d]
    s = jnp.einsum("bskgd,btkd->bkgst", q, k).astype(F32) / 8.0
    p = jax.nn.softmax(s, -1).astype(BF)
    return jnp.einsum("bkgst,btkd->bskgd", p, v)
def gqa4(q, k, v):
    s = jnp.einsum("bhsd,bhtd->bhst", q, k).astype(F32) / 8.0
    p = jax.nn.softmax(s, -1).astype(BF)
    return jnp.einsum("bhst,bhtd->bhsd", p, v)
CASES = [
 ("p_gqa5_b2s1024kv4g4d128", gqa5, [((2, 1024, 4, 4, 128), BF), ((2, 1024, 4, 128), BF), ((2, 1024, 4, 128), BF)]),
 ("p_gqa4_b2h16s1024d128", gqa4, [((2, 16, 1024, 128), BF), ((2, 16, 1024, 128), BF), ((2, 16, 1024, 128), BF)]),
 ("p_gqa5_b4s512kv8g2d64", gqa5, [((4, 512, 8, 2, 64), BF), ((4, 512, 8, 64), BF), ((4, 512, 8, 64), BF)]),
]
