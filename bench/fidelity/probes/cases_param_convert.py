# The widening convert of a vector parameter (a norm's bf16[C] scale or offset to f32) read
# through a broadcast (session 21, convmodels): shapes made up off the families corpus. Is
# the convert a top-level kernel of its own, whatever reads it (a batch norm's normalization,
# a plain scale, a bias after a matmul, a layer norm, NHWC and 2-D), and what does it cost?
import jax, jax.numpy as jnp
from jax import lax
BF = jnp.bfloat16
F32 = jnp.float32


def bn(x, g, b):  # a batch norm over batch and space, training statistics, NHWC
    xf = x.astype(F32)
    m = xf.mean((0, 1, 2))
    v = ((xf - m) ** 2).mean((0, 1, 2))
    return jax.nn.relu(((xf - m) * lax.rsqrt(v + 1e-5) * g.astype(F32) + b.astype(F32)).astype(BF))


def scale(x, g):  # an f32 activation times a widened bf16 vector
    return x * g.astype(F32)


def scale_shift(x, g, b):
    return (x.astype(F32) * g.astype(F32) + b.astype(F32)).astype(BF)


def conv_bn(x, w, g, b):
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return bn(y, g, b)


def mm_bias(x, w, b):
    return jax.nn.gelu(jnp.dot(x, w, preferred_element_type=F32) + b.astype(F32)).astype(BF)


CASES = []
for B, H, C in ((8, 16, 96), (4, 20, 200), (2, 30, 384)):
    CASES.append((f"pc_bn_b{B}_{H}x{H}x{C}", bn, [((B, H, H, C), BF), ((C,), BF), ((C,), BF)]))
    CASES.append((f"pc_convbn_b{B}_{H}x{H}x{C}", conv_bn, [((B, H, H, C), BF), ((3, 3, C, C), BF), ((C,), BF), ((C,), BF)]))
CASES.append(("pc_scale_f32_300x640", scale, [((300, 640), F32), ((640,), BF)]))
CASES.append(("pc_scaleshift_6x50x50x72", scale_shift, [((6, 50, 50, 72), BF), ((72,), BF), ((72,), BF)]))
CASES.append(("pc_mmbias_384x256x512", mm_bias, [((384, 256), BF), ((256, 512), BF), ((512,), BF)]))
