import jax, jax.numpy as jnp
BF, F32 = jnp.bfloat16, jnp.float32
def dw(x, w, stride=1):
    C = x.shape[-1]
    return jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=C)
CASES = [
 ("p_dw3_b1_56_128_bf16", dw, [((1, 56, 56, 128), BF), ((3, 3, 1, 128), BF)]),
 ("p_dw3_b32_14_512_bf16", dw, [((32, 14, 14, 512), BF), ((3, 3, 1, 512), BF)]),
 ("p_dw3s2_b8_56_128_bf16", lambda x, w: dw(x, w, 2), [((8, 56, 56, 128), BF), ((3, 3, 1, 128), BF)]),
 ("p_dw3m2_b8_28_128_bf16", lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=128), [((8, 28, 28, 128), BF), ((3, 3, 1, 256), BF)]),
 ("p_dw3_b8_28_200_f32", dw, [((8, 28, 28, 200), F32), ((3, 3, 1, 200), F32)]),
 ("p_dw3_bwd_b8_28_256_bf16", lambda x, w: jax.grad(lambda x, w: dw(x, w).astype(F32).sum(), (0, 1))(x, w), [((8, 28, 28, 256), BF), ((3, 3, 1, 256), BF)]),
]
