"""bulk_ew.py: elementwise kernels in bulk (bulk.py runs them): unary and binary jnp / lax ops,
integer arithmetic and casts between element types, each over a BlockSpec grid whose block
shape varies (aligned tiles, several sublane/lane multiples, a whole odd-shaped array)."""
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

F32, BF16, I32, U32, I8, U8, I16 = jnp.float32, jnp.bfloat16, jnp.int32, jnp.uint32, jnp.int8, jnp.uint8, jnp.int16

# (array shape, block shape or None for one whole-array block)
SHAPES = [((32, 256), (8, 128)), ((64, 128), (16, 128)), ((16, 512), (16, 256)), ((20, 130), None)]


def rand(r, shape, dtype, lo=-3.0, hi=3.0):
    if jnp.issubdtype(dtype, jnp.integer):
        info = jnp.iinfo(dtype)
        a, b = max(int(lo), int(info.min)), min(int(hi), int(info.max))
        return jnp.asarray(r.integers(a, b + 1, shape), dtype)
    return jnp.asarray(r.uniform(lo, hi, shape), dtype)


def ew_call(op, nin, shape, block, out_dtype=None):
    def fn(*xs, interpret=False):
        out_aval = jax.eval_shape(op, *[jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs])
        dt = out_dtype or out_aval.dtype

        def kernel(*refs):
            refs[-1][...] = op(*[r[...] for r in refs[:-1]]).astype(dt)
        if block is None:
            return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shape, dt), interpret=interpret)(*xs)
        grid = (shape[0] // block[0], shape[1] // block[1])
        spec = pl.BlockSpec(block, lambda i, j: (i, j))
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shape, dt), grid=grid,
                              in_specs=[spec] * nin, out_specs=spec, interpret=interpret)(*xs)
    return fn


def whole(op):
    """A kernel applying op to its whole operands, one block each (no grid), its result as op
    gives it."""
    def fn(*xs, interpret=False):
        oav = jax.eval_shape(op, *[jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs])

        def kernel(*refs):
            refs[-1][...] = op(*[r[...] for r in refs[:-1]])
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(oav.shape, oav.dtype), interpret=interpret)(*xs)
    return fn


# unary float ops: (name, op, input range)
UNARY_F = [
    ("exp", jnp.exp, (-4, 4)), ("log", jnp.log, (0.01, 9)), ("sqrt", jnp.sqrt, (0, 9)),
    ("rsqrt", lax.rsqrt, (0.1, 9)), ("tanh", jnp.tanh, (-4, 4)), ("sin", jnp.sin, (-6, 6)),
    ("cos", jnp.cos, (-6, 6)), ("sigmoid", jax.nn.sigmoid, (-8, 8)), ("erf", lax.erf, (-3, 3)),
    ("abs", jnp.abs, (-3, 3)), ("floor", jnp.floor, (-5, 5)), ("ceil", jnp.ceil, (-5, 5)),
    ("round", jnp.round, (-5, 5)), ("trunc", jnp.trunc, (-5, 5)), ("sign", jnp.sign, (-3, 3)),
    ("neg", jnp.negative, (-3, 3)), ("square", jnp.square, (-3, 3)), ("recip", lambda x: 1.0 / x, (0.5, 4)),
    ("log1p", jnp.log1p, (0, 5)), ("exp2", jnp.exp2, (-4, 4)), ("cube", lambda x: x ** 3, (-2, 2)),
    ("powf", lambda x: jnp.power(x, 1.7), (0.1, 4)), ("relu", jax.nn.relu, (-3, 3)),
    ("clip", lambda x: jnp.clip(x, -1.0, 0.5), (-3, 3)), ("softplus", jax.nn.softplus, (-5, 5)),
    ("gelu_erf", lambda x: jax.nn.gelu(x, approximate=False), (-4, 4)),
    ("gelu_tanh", lambda x: jax.nn.gelu(x, approximate=True), (-4, 4)), ("silu", jax.nn.silu, (-5, 5)),
    ("leaky", lambda x: jnp.where(x > 0, x, 0.01 * x), (-3, 3)), ("arctan", jnp.arctan, (-4, 4)),
    ("sinh", jnp.sinh, (-3, 3)), ("cosh", jnp.cosh, (-3, 3)), ("tan", jnp.tan, (-1.2, 1.2)),
    ("arcsin", jnp.arcsin, (-0.99, 0.99)), ("arccos", jnp.arccos, (-0.99, 0.99)), ("log10", jnp.log10, (0.01, 9)),
    ("log2", jnp.log2, (0.01, 9)), ("cbrt", jnp.cbrt, (-8, 8)), ("erf_inv", lax.erf_inv, (-0.95, 0.95)),
    ("rint", jnp.rint, (-5, 5)), ("elu", jax.nn.elu, (-3, 3)),
    ("selu", jax.nn.selu, (-3, 3)), ("hard_tanh", jax.nn.hard_tanh, (-3, 3)), ("mish", lambda x: x * jnp.tanh(jax.nn.softplus(x)), (-4, 4)),
    ("logsig", jax.nn.log_sigmoid, (-6, 6)), ("asinh", jnp.arcsinh, (-4, 4)), ("atanh", jnp.arctanh, (-0.9, 0.9)),
    ("expm1", jnp.expm1, (-3, 3)), ("isfin", lambda x: jnp.where(jnp.isfinite(x * x * 1e38 - jnp.where(x > 1.9, x * x * 1e38, 0.0)), x, -1.0), (-2, 2)),
    ("signbit", lambda x: jnp.where(jnp.signbit(x), 1.0, 2.0), (-2, 2)), ("frac", lambda x: x - jnp.floor(x), (-5, 5)),
]

BINARY_F = [
    ("add", jnp.add), ("sub", jnp.subtract), ("mul", jnp.multiply), ("div", jnp.divide),
    ("max", jnp.maximum), ("min", jnp.minimum), ("pow", lambda a, b: jnp.power(jnp.abs(a) + 0.1, b)),
    ("atan2", jnp.arctan2), ("copysign", jnp.copysign), ("fmod", jnp.fmod), ("rem", jnp.remainder),
    ("fdiv", jnp.floor_divide), ("hypot", jnp.hypot), ("logaddexp", jnp.logaddexp),
    ("where_gt", lambda a, b: jnp.where(a > b, a * b, a - b)), ("sqdiff", lambda a, b: (a - b) ** 2),
    ("eq_ne", lambda a, b: jnp.where((a >= b) & (a != 0.5), 1.0, 0.0) + jnp.where(a <= b, 2.0, 0.0)),
    ("fma", lambda a, b: a * b + a), ("nextafter", jnp.nextafter),
]

UNARY_I = [
    ("neg", jnp.negative), ("abs", jnp.abs), ("sign", jnp.sign), ("not", jnp.invert),
    ("shl3", lambda x: x << 3), ("shr2", lambda x: x >> 2), ("srl2", lambda x: lax.shift_right_logical(x, jnp.asarray(2, x.dtype))),
    ("popcnt", lax.population_count), ("clz", lax.clz), ("sq", lambda x: x * x), ("mod7", lambda x: x % 7),
    ("div7", lambda x: x // 7), ("cdiv", lambda x: -(-x // 5)), ("and", lambda x: x & 0x5a), ("xor", lambda x: x ^ 0x33),
    ("clip", lambda x: jnp.clip(x, -50, 40)), ("tof", lambda x: (x.astype(F32) * 0.5).astype(x.dtype)),
]

BINARY_I = [
    ("add", jnp.add), ("sub", jnp.subtract), ("mul", jnp.multiply), ("max", jnp.maximum), ("min", jnp.minimum),
    ("fdiv", lambda a, b: a // jnp.where(b == 0, 1, b)), ("rem", lambda a, b: a % jnp.where(b == 0, 1, b)),
    ("trem", lambda a, b: lax.rem(a, jnp.where(b == 0, 1, b))), ("tdiv", lambda a, b: lax.div(a, jnp.where(b == 0, 1, b))),
    ("or", jnp.bitwise_or), ("shl", lambda a, b: a << (b & 7)), ("sra", lambda a, b: a >> (b & 7)),
    ("sel", lambda a, b: jnp.where(a < b, a, b * 2)),
]

# casts: (from dtype, to dtype, input range)
CASTS = [
    (F32, BF16, (-100, 100)), (BF16, F32, (-100, 100)), (F32, I32, (-1000, 1000)), (I32, F32, (-(1 << 30), 1 << 30)),
    (I32, BF16, (-100000, 100000)), (BF16, I32, (-1000, 1000)), (F32, I8, (-127, 127)), (I8, F32, (-128, 127)),
    (I8, I32, (-128, 127)), (I32, I8, (-100000, 100000)), (U8, F32, (0, 255)), (F32, U8, (0, 255)),
    (U32, F32, (0, 4000000000)), (F32, U32, (0, 1e9)), (I16, F32, (-32768, 32767)), (F32, I16, (-30000, 30000)),
    (U8, I32, (0, 255)), (I32, U32, (-1000, 1000)), (U32, I32, (0, 4000000000)), (BF16, I8, (-127, 127)),
    (I8, BF16, (-128, 127)), (I16, I32, (-32768, 32767)), (I32, I16, (-100000, 100000)), (U8, BF16, (0, 255)),
    (jnp.bool_, F32, (0, 1)), (F32, jnp.float16, (-100, 100)), (jnp.float16, F32, (-100, 100)),
]

DT = {F32: "f32", BF16: "bf16", I32: "i32", U32: "u32", I8: "i8", U8: "u8", I16: "i16", jnp.bool_: "bool",
      jnp.float16: "f16"}


def sname(shape, block):
    return "%dx%d" % shape + ("_b%dx%d" % block if block else "_whole")


def cases():
    out = []
    for k, (opn, op, (lo, hi)) in enumerate(UNARY_F):
        for dt in (F32, BF16):
            shape, block = SHAPES[(k + (dt == BF16)) % len(SHAPES)]
            out.append(("ew_%s_%s_%s" % (opn, DT[dt], sname(shape, block)), ew_call(op, 1, shape, block),
                        lambda r, s=shape, d=dt, lo=lo, hi=hi: [rand(r, s, d, lo, hi)]))
    for k, (opn, op) in enumerate(BINARY_F):
        for dt in (F32, BF16):
            shape, block = SHAPES[(k + 2 * (dt == BF16)) % len(SHAPES)]
            out.append(("ew2_%s_%s_%s" % (opn, DT[dt], sname(shape, block)), ew_call(op, 2, shape, block),
                        lambda r, s=shape, d=dt: [rand(r, s, d, -4, 4), rand(r, s, d, -4, 4) + 0.25]))
    for k, (opn, op) in enumerate(UNARY_I):
        for dt in (I32, U32, I8, I16):
            if dt == U32 and opn in ("neg", "abs", "sign"):
                continue
            shape, block = SHAPES[(k + (dt == I8)) % len(SHAPES)]
            if dt in (I8, I16) and block is not None:
                shape, block = (64, 256), (32, 128)
            out.append(("ewi_%s_%s_%s" % (opn, DT[dt], sname(shape, block)), ew_call(op, 1, shape, block),
                        lambda r, s=shape, d=dt: [rand(r, s, d, -120, 120) if d != U32 else rand(r, s, d, 0, 4000000000)]))
    for k, (opn, op) in enumerate(BINARY_I):
        for dt in (I32, U32, I8):
            shape, block = SHAPES[k % len(SHAPES)]
            if dt == I8 and block is not None:
                shape, block = (64, 256), (32, 128)
            rng = (0, 200) if dt == U32 else (-100, 100)
            out.append(("ewi2_%s_%s_%s" % (opn, DT[dt], sname(shape, block)), ew_call(op, 2, shape, block),
                        lambda r, s=shape, d=dt, g=rng: [rand(r, s, d, *g), rand(r, s, d, *g)]))
    for k, (src, dst, (lo, hi)) in enumerate(CASTS):
        shape, block = [((64, 256), (32, 128)), ((32, 512), None), ((20, 130), None)][k % 3]

        def mk(r, s=shape, d=src, lo=lo, hi=hi):
            if d == jnp.bool_:
                return [jnp.asarray(r.integers(0, 2, s), jnp.bool_)]
            if d == U32:
                return [jnp.asarray(r.integers(lo, hi, s, dtype="uint64").astype("uint32"), U32)]
            return [rand(r, s, d, lo, hi)]
        out.append(("cast_%s_%s_%s" % (DT[src], DT[dst], sname(shape, block)),
                    ew_call(lambda x, d=dst: x.astype(d), 1, shape, block), mk))
    return out
