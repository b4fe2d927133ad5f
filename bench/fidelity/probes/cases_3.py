import jax, jax.numpy as jnp
BF, F32 = jnp.bfloat16, jnp.float32
CASES = [
 ("p_sum_f32_to_bf16", lambda x: x.astype(F32).sum(-1).astype(BF), [((4096, 1000), BF)]),
 ("p_sel_f32_to_bf16", lambda m, a, b: jnp.where(m > 0, a * 2, b * 3).astype(BF), [((2048, 1000), F32), ((2048, 1000), F32), ((2048, 1000), F32)]),
 ("p_max_f32_to_bf16", lambda x: (x.astype(F32) * 1.5).max(0).astype(BF), [((1000, 4096), BF)]),
 ("p_ln_bf16_197", lambda x, g: ((x.astype(F32) - x.astype(F32).mean(-1, keepdims=True)) * g).astype(BF), [((64, 197, 768), BF), ((768,), F32)]),
]
