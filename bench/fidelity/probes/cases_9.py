# sortk (session 10): why gen.py's fma100 (y = y * x + i, 100 steps) runs at fewer vector ops
# per cycle than chains of one op (cases_8): its form at cases_8's shape, cases_8's form at
# its shape, and the form without constants.
import jax, jax.numpy as jnp
F32 = jnp.float32
def fma100(x):
    y = x
    for i in range(100):
        y = y * x + float(i)
    return y
def fma100_nc(x):
    y = x
    for i in range(100):
        y = y * x + y
    return y
def add_pair(a, b):
    for i in range(48):
        a = a + b
        b = b + a
    return a + b
def fma_cached(x):
    y = x
    for i in range(100):
        y = y * x + 0.5
    return y
CASES = [
 ("p_vop_fma100_1024x2048", fma100, [((1024, 2048), F32)]),
 ("p_vop_fma100nc_1024x2048", fma100_nc, [((1024, 2048), F32)]),
 ("p_vop_fma100c1_1024x2048", fma_cached, [((1024, 2048), F32)]),
 ("p_vop_addpair_4096x4096", add_pair, [((4096, 4096), F32), ((4096, 4096), F32)]),
]
