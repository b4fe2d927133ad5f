import jax, jax.numpy as jnp
BF, F32 = jnp.bfloat16, jnp.float32
def dw(x, w, stride=1):
    C = x.shape[-1]
    return jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=C)
def gconv(x, w, g):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=g)
CASES = [
 ("p_dw3_b8_56_128_bf16", dw, [((8, 56, 56, 128), BF), ((3, 3, 1, 128), BF)]),
 ("p_dw3_b8_28_256_bf16", dw, [((8, 28, 28, 256), BF), ((3, 3, 1, 256), BF)]),
 ("p_dw7_b8_28_384_f32", dw, [((8, 28, 28, 384), F32), ((7, 7, 1, 384), F32)]),
 ("p_dw3_b16_112_32_bf16", dw, [((16, 112, 112, 32), BF), ((3, 3, 1, 32), BF)]),
 ("p_dw5_b8_14_672_bf16", dw, [((8, 14, 14, 672), BF), ((5, 5, 1, 672), BF)]),
 ("p_g32_b8_28_256_bf16", lambda x, w: gconv(x, w, 32), [((8, 28, 28, 256), BF), ((3, 3, 8, 256), BF)]),
 ("p_cumsum_f32_4096x1024_ax1", lambda x: jnp.cumsum(x, 1), [((4096, 1024), F32)]),
 ("p_cumsum_f32_1024x4096_ax0", lambda x: jnp.cumsum(x, 0), [((1024, 4096), F32)]),
 ("p_cumsum_f32_20000", lambda x: jnp.cumsum(x), [((20000,), F32)]),
 ("p_cumsum_bf16_64x8192", lambda x: jnp.cumsum(x, 1), [((64, 8192), BF)]),
]
