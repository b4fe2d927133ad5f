# units (session 10): the integer multiply's cost per generation (cases_8 found v4's u32
# multiply chain ~11.6 times its add chain): other shapes, s32, a multiply by a constant,
# a multiply inside an add chain (x * y + x), and chain lengths 40..96, on shapes not in cases_8.
import jax, jax.numpy as jnp
S32, U32, I16 = jnp.int32, jnp.uint32, jnp.int16
def pair(op, n):
    def f(a, b):
        for i in range(n // 2):
            a = op(a, b)
            b = op(b, a)
        return op(a, b)
    return f
def const_chain(op, dt, n):
    def f(a, b):
        for i in range(n):
            a = op(a, jnp.asarray(2 * i + 3, dt))
        return op(a, b)
    return f
CASES = [
 ("p_imul_s32_mul_512x4096", pair(lambda x, y: x * y, 40), [((512, 4096), S32)] * 2),
 ("p_imul_s32_add_512x4096", pair(lambda x, y: x + y, 40), [((512, 4096), S32)] * 2),
 ("p_imul_u32_muladd_768x1024", pair(lambda x, y: x * y + x, 32), [((768, 1024), U32)] * 2),
 ("p_imul_u32_addadd_768x1024", pair(lambda x, y: (x + y) + x, 32), [((768, 1024), U32)] * 2),
 ("p_imul_u32_mul_512x4096", pair(lambda x, y: x * y, 40), [((512, 4096), U32)] * 2),
 ("p_imul_s32_mul96_1024x2048", pair(lambda x, y: x * y, 96), [((1024, 2048), S32)] * 2),
 ("p_imul_u32_mul96_512x1024", pair(lambda x, y: x * y, 96), [((512, 1024), U32)] * 2),
 ("p_imul_u32_add96_512x1024", pair(lambda x, y: x + y, 96), [((512, 1024), U32)] * 2),
 ("p_imul_u32_mul48_512x1024", pair(lambda x, y: x * y, 48), [((512, 1024), U32)] * 2),
 ("p_imul_u32_mul64_512x1024", pair(lambda x, y: x * y, 64), [((512, 1024), U32)] * 2),
 ("p_imul_u32_mul80_512x1024", pair(lambda x, y: x * y, 80), [((512, 1024), U32)] * 2),
 ("p_imul_s32_mulc_2048x512", const_chain(lambda x, c: x * c, S32, 48), [((2048, 512), S32)] * 2),
]
