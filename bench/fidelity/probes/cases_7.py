# sortk (session 10): the vector unit's integer rate (Threefry-style rounds) and the cost of
# kernels without operands (an iota feeding a sort); shapes drawn, none in the corpora.
import jax, jax.numpy as jnp
U32, F32, BF, S32 = jnp.uint32, jnp.float32, jnp.bfloat16, jnp.int32
def rounds(n):
    def f(a, b):
        for i in range(n):
            a = a + b
            b = ((b << ((13 + 7 * i) % 31 + 1)) | (b >> (31 - (13 + 7 * i) % 31))) ^ a
        return a ^ b
    return f
def fchain(n):
    def f(a, b):
        for i in range(n):
            a = a * b + b
            b = b * a
        return a + b
    return f
def argsort(axis):
    return lambda x: jnp.argsort(x, axis=axis)
CASES = [
 ("p_vpu_u32_rounds8_2048x1536", rounds(8), [((2048, 1536), U32), ((2048, 1536), U32)]),
 ("p_vpu_u32_rounds20_1024x3072", rounds(20), [((1024, 3072), U32), ((1024, 3072), U32)]),
 ("p_vpu_u32_rounds20_3000x640", rounds(20), [((3000, 640), U32), ((3000, 640), U32)]),
 ("p_vpu_f32_chain16_2048x1536", fchain(16), [((2048, 1536), F32), ((2048, 1536), F32)]),
 ("p_iota_sort_16x300_f32", argsort(1), [((16, 300), F32)]),
 ("p_iota_sort_40x1200_f32", argsort(1), [((40, 1200), F32)]),
 ("p_iota_sort_3x500_f32", argsort(1), [((3, 500), F32)]),
 ("p_iota_sort_1x3000_f32", argsort(1), [((1, 3000), F32)]),
 ("p_iota_sort_600x24_f32", argsort(1), [((600, 24), F32)]),
 ("p_iota_sort_256x64_bf16", argsort(1), [((256, 64), BF)]),
 ("p_iota_sort_700x5_ax0_s32", argsort(0), [((700, 5), S32)]),
 ("p_iota_sort_2000_f32", argsort(0), [((2000,), F32)]),
 ("p_iota_sort_96_f32", argsort(0), [((96,), F32)]),
]
