# conv nets' layer norm over the features of an NHWC activation (session 20, convnet): shapes
# made up off the families corpus. Does the compiler lay the activation out with the batch in
# the sublanes ({3,0,2,1}) and the row statistics with the batch in the lanes ({0,2,1}), and
# what do the statistics' kernels and the normalization cost against tpusim's own compilation?
import jax, jax.numpy as jnp
from jax import lax
BF = jnp.bfloat16


def ln(x, g, b):
    xf = x.astype(jnp.float32)
    m = xf.mean(-1, keepdims=True)
    v = ((xf - m) ** 2).mean(-1, keepdims=True)
    return ((xf - m) * lax.rsqrt(v + 1e-6) * g.astype(jnp.float32) + b.astype(jnp.float32)).astype(BF)


def dw_ln(x, w, g, b):
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                 feature_group_count=x.shape[-1])
    return ln(y, g, b)


def dw_ln_mlp(x, w, g, b, w1):
    return jnp.dot(dw_ln(x, w, g, b), w1)


CASES = []
for B, H, C in ((1, 24, 160), (4, 24, 160), (8, 24, 160), (16, 12, 96), (4, 20, 96)):
    CASES.append((f"cn_ln_b{B}_{H}x{H}x{C}", ln, [((B, H, H, C), BF), ((C,), BF), ((C,), BF)]))
    CASES.append((f"cn_dwln_b{B}_{H}x{H}x{C}", dw_ln, [((B, H, H, C), BF), ((7, 7, 1, C), BF), ((C,), BF), ((C,), BF)]))
CASES.append(("cn_dwlnmlp_b4_24x24x160", dw_ln_mlp, [((4, 24, 24, 160), BF), ((7, 7, 1, 160), BF), ((160,), BF), ((160,), BF), ((160, 640), BF)]))
