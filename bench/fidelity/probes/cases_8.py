# sortk (session 10): the vector unit's rate per op class and generation, and whether a
# broadcast scalar operand costs a register op: chains of one op on two arrays (each step
# reads the other's last value, so nothing folds), 96 steps on [1024,2048] (2,048 registers).
import jax, jax.numpy as jnp
U32, F32, S32 = jnp.uint32, jnp.float32, jnp.int32
N = 96
def pair(op):
    def f(a, b):
        for i in range(N // 2):
            a = op(a, b)
            b = op(b, a)
        return op(a, b)
    return f
def const_chain(op, dt):
    def f(a, b):
        for i in range(N):
            a = op(a, jnp.asarray(i + 3, dt))
        return op(a, b)
    return f
SH = [((1024, 2048), F32), ((1024, 2048), F32)]
SU = [((1024, 2048), U32), ((1024, 2048), U32)]
CASES = [
 ("p_vop_f32_add", pair(lambda x, y: x + y), SH),
 ("p_vop_f32_mul", pair(lambda x, y: x * y), SH),
 ("p_vop_f32_max", pair(lambda x, y: jnp.maximum(x, y * 0.5)), SH),
 ("p_vop_u32_add", pair(lambda x, y: x + y), SU),
 ("p_vop_u32_xor", pair(lambda x, y: x ^ (y + 1)), SU),
 ("p_vop_u32_shl", pair(lambda x, y: x << (y & 31)), SU),
 ("p_vop_u32_mul", pair(lambda x, y: x * y), SU),
 ("p_vop_f32_addc", const_chain(lambda x, c: x + c, F32), SH),
 ("p_vop_f32_mulc", const_chain(lambda x, c: x * c, F32), SH),
 ("p_vop_u32_shlc", const_chain(lambda x, c: (x << (c % 7 + 1)) + x, U32), SU),
 ("p_vop_u32_xorc", const_chain(lambda x, c: (x ^ c) + x, U32), SU),
]
