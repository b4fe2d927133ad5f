# sortk (session 10): what makes fma100's step (y * x + c) cost two chain steps of cases_8 on
# v4: the reuse of the parameter x at every step, a long-lived value, or the op pair.
import jax, jax.numpy as jnp
F32 = jnp.float32
S = [((1024, 2048), F32)]
def self_fma(x):
    y = x
    for i in range(100):
        y = y * y + y
    return y
def computed_reuse(x):
    z = x * 1.0001 + 0.25
    y = x
    for i in range(100):
        y = y * z + y
    return y
def param_add(x):
    y = x
    for i in range(100):
        y = y + x
    return y
def self_add(x):
    y = x
    for i in range(100):
        y = y + y * 0.5
    return y
CASES = [
 ("p_vop_selffma_1024x2048", self_fma, S),
 ("p_vop_reusefma_1024x2048", computed_reuse, S),
 ("p_vop_paramadd_1024x2048", param_add, S),
 ("p_vop_selfadd_1024x2048", self_add, S),
]
