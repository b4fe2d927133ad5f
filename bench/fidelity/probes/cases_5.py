import jax, jax.numpy as jnp
BF, F32 = jnp.bfloat16, jnp.float32
CASES = []
for n in (16, 64, 128, 256):
    CASES.append((f"p_vdot_b4d2048n{n}_f32", lambda h, c: jnp.einsum("bdn,bn->bd", h, c), [((4, 2048, n), F32), ((4, n), F32)]))
for n in (16, 128):
    CASES.append((f"p_vdot_b8h32n{n}_bf16", lambda k, q: jnp.einsum("bhkd,bhd->bhk", k, q), [((8, 32, 1024, n), BF), ((8, 32, n), BF)]))
