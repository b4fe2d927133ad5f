# units (session 10): reduces over a short second-minor dimension (embedding_bag_*'s, k = 4
# and 16 rows per bag: tpusim 1.5-4.5x under) against a long one (50) and plain 2-D/3-D reduces.
import jax, jax.numpy as jnp
F32, BF = jnp.float32, jnp.bfloat16
CASES = [
 ("p_red_bf16_256x4x4096_ax1", lambda a: jnp.sum(a, axis=1), [((256, 4, 4096), BF)]),
 ("p_red_f32_256x4x4096_ax1", lambda a: jnp.sum(a, axis=1), [((256, 4, 4096), F32)]),
 ("p_red_bf16_256x16x4096_ax1", lambda a: jnp.sum(a, axis=1), [((256, 16, 4096), BF)]),
 ("p_red_f32_4096x2048_ax0", lambda a: jnp.sum(a, axis=0), [((4096, 2048), F32)]),
 ("p_red_f32_16x512x512_ax1", lambda a: jnp.sum(a, axis=1), [((16, 512, 512), F32)]),
 ("p_red_f32_256x50x1024_ax1", lambda a: jnp.sum(a, axis=1), [((256, 50, 1024), F32)]),
]
