"""bulk_bits.py: bit-level and narrow-type kernels in bulk (bulk.py runs them): pltpu.bitcast
and lax.bitcast_convert_type between widths (shape-changing packs of bf16/int8 into 32-bit
rows and back), pltpu.pack_elementwise / unpack_elementwise, casts through float8 / int4 /
float16, pltpu.roll with a stride, one-hot compares, lax.cumsum / cummax on lanes and sublanes,
integer dots of narrow types, dots with a K of 64 or rows of 8, mixed-type dots."""
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from bulk_ew import rand, F32, BF16, I32, I8, U32, I16, U8

F8E4, F8E5 = jnp.float8_e4m3fn, jnp.float8_e5m2


def whole(op):
    def fn(*xs, interpret=False):
        oav = jax.eval_shape(op, *[jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs])
        outs = oav if isinstance(oav, (list, tuple)) else [oav]

        def kernel(*refs):
            res = op(*[r[...] for r in refs[:len(xs)]])
            res = res if isinstance(res, (list, tuple)) else [res]
            for r, v in zip(refs[len(xs):], res):
                r[...] = v
        return pl.pallas_call(kernel, out_shape=[jax.ShapeDtypeStruct(o.shape, o.dtype) for o in outs],
                              interpret=interpret)(*xs)
    return fn


def f(shape, dt, lo=-3, hi=3):
    return lambda r: rand(r, shape, dt, lo, hi)


OPS = [
    ("bitcast_f32_i32", lambda x: pltpu.bitcast(x, I32) >> 3, [f((16, 128), F32)]),
    ("bitcast_i32_f32", lambda x: pltpu.bitcast(x & 0x3fffffff, F32), [f((16, 128), I32, -10 ** 9, 10 ** 9)]),
    ("bitcast_bf16_i32", lambda x: pltpu.bitcast(x, I32), [f((16, 128), BF16)]),
    ("bitcast_i32_bf16", lambda x: pltpu.bitcast(x & 0x3f7f3f7f, BF16), [f((8, 128), I32, -10 ** 9, 10 ** 9)]),
    ("bitcast_i8_i32", lambda x: pltpu.bitcast(x, I32), [f((32, 128), I8, -128, 127)]),
    ("bitcast_i32_i8", lambda x: pltpu.bitcast(x, I8), [f((8, 256), I32, -10 ** 9, 10 ** 9)]),
    ("bitcast_bf16_i16", lambda x: pltpu.bitcast(x, I16), [f((16, 128), BF16)]),
    ("bcc_f32_u32", lambda x: lax.bitcast_convert_type(x, U32) >> 23, [f((8, 128), F32)]),
    ("bcc_i32_f32", lambda x: lax.bitcast_convert_type(x & 0x3fffffff, F32), [f((8, 128), I32, 0, 10 ** 9)]),
    ("bcc_bf16_i16", lambda x: lax.bitcast_convert_type(x, I16).astype(I32), [f((16, 128), BF16)]),
    ("pack_i32_i16", lambda a, b: pltpu.pack_elementwise([a, b], packed_dtype=I16), [f((8, 128), I32, -30000, 30000)] * 2),
    ("pack_f32_bf16", lambda a, b: pltpu.pack_elementwise([a, b], packed_dtype=BF16), [f((8, 128), F32)] * 2),
    ("unpack_bf16", lambda x: pltpu.unpack_elementwise(x, index=1, packed_dtype=BF16, unpacked_dtype=F32),
     [f((8, 128), I32, -10 ** 9, 10 ** 9)]),
    ("unpack_i8", lambda x: pltpu.unpack_elementwise(x, index=2, packed_dtype=I8, unpacked_dtype=I32),
     [f((8, 128), I32, -10 ** 9, 10 ** 9)]),
    ("cast_f32_f8e4", lambda x: x.astype(F8E4).astype(F32), [f((16, 128), F32, -300, 300)]),
    ("cast_f32_f8e5", lambda x: x.astype(F8E5).astype(F32), [f((16, 128), F32, -300, 300)]),
    ("cast_bf16_f8e4", lambda x: x.astype(F8E4).astype(BF16), [f((16, 128), BF16, -20, 20)]),
    ("f8e4_in", lambda x: x.astype(F32) * 2.0, [f((32, 128), F8E4, -200, 200)]),
    ("f8e5_out", lambda x: (x * 3.0).astype(F8E5), [f((32, 128), F32, -5000, 5000)]),
    ("f8e4_dot", lambda a, b: jnp.dot(a.astype(BF16), b.astype(BF16), preferred_element_type=F32),
     [f((32, 128), F8E4, -8, 8), f((128, 128), F8E4, -8, 8)]),
    ("cast_f32_f16", lambda x: x.astype(jnp.float16).astype(F32), [f((16, 128), F32, -7e4, 7e4)]),
    ("cast_i32_i4", lambda x: x.astype(jnp.int4).astype(I32), [f((16, 128), I32, -8, 7)]),
    ("cast_f32_u16", lambda x: x.astype(jnp.uint16).astype(F32), [f((16, 128), F32, 0, 65000)]),
    ("cast_i8_u8", lambda x: x.astype(U8).astype(I32), [f((32, 128), I8, -128, 127)]),
    ("roll_stride", lambda x: pltpu.roll(x, 3, 1, stride=1, stride_axis=0), [f((8, 128), F32)]),
    ("roll_stride_s", lambda x: pltpu.roll(x, 1, 0, stride=2, stride_axis=1), [f((16, 128), F32)]),
    ("onehot", lambda x: jax.nn.one_hot(x[:, 0] % 128, 128, dtype=F32) + jax.nn.one_hot(x[:, 1] % 128, 128, dtype=F32),
     [f((16, 128), I32, 0, 1000)]),
    ("cumsum_l", lambda x: lax.cumsum(x, axis=1), [f((8, 128), F32)]),
    ("cumsum_s", lambda x: lax.cumsum(x, axis=0), [f((8, 128), F32)]),
    ("cummax_l", lambda x: lax.cummax(x, axis=1), [f((8, 128), F32)]),
    ("cumsum_i32", lambda x: lax.cumsum(x, axis=1), [f((8, 128), I32, -100, 100)]),
    ("dot_i8_out8", lambda a, b: jnp.dot(a, b, preferred_element_type=I32).astype(I8), [f((32, 128), I8, -8, 8), f((128, 128), I8, -8, 8)]),
    ("dot_k64", lambda a, b: jnp.dot(a, b, preferred_element_type=F32), [f((32, 64), F32), f((64, 128), F32)]),
    ("dot_m8", lambda a, b: jnp.dot(a, b, preferred_element_type=F32), [f((8, 256), BF16), f((256, 256), BF16)]),
    ("dot_bf16_f32", lambda a, b: jnp.dot(a.astype(F32), b, preferred_element_type=F32), [f((32, 128), BF16), f((128, 128), F32)]),
    ("dot_f32_bf16out", lambda a, b: jnp.dot(a, b, preferred_element_type=F32).astype(BF16), [f((32, 128), F32), f((128, 256), F32)]),
    ("dot_n64", lambda a, b: jnp.dot(a, b, preferred_element_type=F32), [f((16, 128), BF16), f((128, 64), BF16)]),
    ("dot_vec", lambda a, b: jnp.dot(a, b, preferred_element_type=F32), [f((1, 256), F32), f((256, 128), F32)]),
    ("dot_i16", lambda a, b: jnp.dot(a.astype(I32), b.astype(I32), preferred_element_type=I32), [f((16, 128), I16, -100, 100), f((128, 128), I16, -100, 100)]),
    ("dot_3x", lambda a, b: jnp.dot(a, b, precision=lax.Precision.HIGH, preferred_element_type=F32), [f((16, 128), F32), f((128, 128), F32)]),
    ("dot_bf16xbf16_bf16", lambda a, b: jnp.dot(a, b), [f((32, 256), BF16), f((256, 128), BF16)]),
    ("sel_i8", lambda a, b: jnp.where(a > b, a, b - a), [f((32, 128), I8, -60, 60)] * 2),
    ("minmax_u32", lambda a, b: jnp.maximum(a, b) - jnp.minimum(a, b), [lambda r: jnp.asarray(r.integers(0, 2 ** 32, (8, 128), dtype="uint64").astype("uint32"))] * 2),
    ("max_bf16_nan", lambda a: jnp.max(jnp.where(a > 2.5, jnp.nan, a), axis=1, keepdims=True), [f((8, 128), BF16)]),
    ("min_f32_nan", lambda a: jnp.minimum(jnp.where(a > 2.5, jnp.nan, a), 0.5), [f((8, 128), F32)]),
    ("reduce_prec", lambda a: lax.reduce_precision(a, exponent_bits=5, mantissa_bits=10), [f((8, 128), F32)]),
    ("int_pow", lambda a: lax.integer_pow(a, 5) + lax.integer_pow(a, -2), [f((8, 128), F32, 0.5, 2)]),
    ("clamp_lax", lambda a: lax.clamp(-1.0, a, 1.5), [f((8, 128), F32)]),
    ("is_close", lambda a, b: jnp.isclose(a, b, atol=0.5).astype(I32), [f((8, 128), F32)] * 2),
    ("sign_i8", lambda a: jnp.sign(a) * a, [f((32, 128), I8, -128, 127)]),
]


def cases():
    out = []
    for name, op, mks in OPS:
        out.append(("bits_" + name, whole(op), lambda r, mks=mks: [m(r) for m in mks]))
    return out
