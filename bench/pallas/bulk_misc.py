"""bulk_misc.py: the rest of Pallas TPU's lowering table in bulk (bulk.py runs them): jnp.pad,
jnp.split, lax.scan inside a kernel, jnp.all / any on masks, stack / unstack, lax.select_n of
several cases, pl.debug_print, jax.named_scope (trace regions), pltpu.delay, stop_gradient,
custom_jvp functions, gathers by a static index vector, pl.num_programs arithmetic, iota-built
masks combined with integer arithmetic, jnp.where chains across dtypes."""
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from bulk_ew import rand, whole, F32, BF16, I32


def f(shape, dt=F32, lo=-3, hi=3):
    return lambda r: rand(r, shape, dt, lo, hi)


def scan_rows(x):
    def step(c, k):
        return c * 0.9 + x * k.astype(F32), None
    c, _ = lax.scan(step, jnp.zeros((8, 128), F32), jnp.arange(5, dtype=I32))
    return c


def debug_print_op(x):
    pl.debug_print("block max {}", jnp.max(x).astype(I32))
    return x * 2.0


def debug_print_vec(x):
    pl.debug_print("rows: {}", x[:2, :4])
    return x - 1.0


def named(x):
    with jax.named_scope("first"):
        y = jnp.exp(x * 0.5)
    with jax.named_scope("second"):
        return y - jnp.mean(y, axis=1, keepdims=True)


def delayed(x):
    pl.delay(100)
    return x + 1.0


@jax.custom_jvp
def softclip(x):
    return jnp.tanh(x) * 2.0


softclip.defjvp(lambda p, t: (softclip(p[0]), t[0] * (1 - jnp.tanh(p[0]) ** 2) * 2.0))

OPS = [
    ("pad_rows", lambda x: jnp.pad(x, ((8, 0), (0, 0))), [f((8, 128))]),
    ("pad_lanes", lambda x: jnp.pad(x, ((0, 0), (0, 128)), constant_values=1.5), [f((8, 128))]),
    ("pad_both_odd", lambda x: jnp.pad(x, ((3, 5), (0, 0))), [f((8, 128))]),
    ("split_lanes", lambda x: jnp.split(x, 2, axis=1)[1] * 2 + jnp.split(x, 2, axis=1)[0], [f((8, 256))]),
    ("split_rows", lambda x: sum(jnp.split(x, 4, axis=0)), [f((32, 128))]),
    ("scan_rows", scan_rows, [f((8, 128))]),
    ("all_any", lambda x: jnp.where(jnp.all(x > -2.5, axis=1, keepdims=True), 1, 0) + jnp.where(jnp.any(x > 2.9, axis=1, keepdims=True), 2, 0)
     + jnp.zeros((16, 128), I32), [f((16, 128))]),
    ("stack_unstack", lambda x: jnp.stack(list(x.reshape(2, 8, 128))[::-1]).reshape(16, 128), [f((16, 128))]),
    ("select_n3", lambda x: lax.select_n((x > 0).astype(I32) + (x > 1.5).astype(I32), x, -x, x * 10), [f((8, 128))]),
    ("debug_print", debug_print_op, [f((8, 128))]),
    ("debug_print_vec", debug_print_vec, [f((8, 128))]),
    ("named_scope", named, [f((8, 256))]),
    ("delay", delayed, [f((8, 128))]),
    ("stop_grad", lambda x: lax.stop_gradient(x) * x, [f((8, 128))]),
    ("custom_jvp", softclip, [f((8, 128))]),
    ("take_static", lambda x: x[:, jnp.array([5, 3, 1, 0] * 32)], [f((8, 128))]),
    ("where_mixed", lambda x, i: jnp.where(i % 3 == 0, x.astype(F32), jnp.where(i > 0, x * 0.5, 0.0)).astype(BF16),
     [f((16, 128), BF16), f((16, 128), I32, -20, 20)]),
    ("iota_checker", lambda x: x * ((lax.broadcasted_iota(I32, (16, 256), 0) + lax.broadcasted_iota(I32, (16, 256), 1) // 128) % 2).astype(F32),
     [f((16, 256))]),
    ("rsqrt_norm_bf16", lambda x: (x.astype(F32) * lax.rsqrt(jnp.mean(jnp.square(x.astype(F32)), axis=-1, keepdims=True) + 1e-5)).astype(BF16),
     [f((16, 256), BF16)]),
    ("softmax_bf16_f32acc", lambda x: jax.nn.softmax(x.astype(F32), axis=-1).astype(BF16), [f((16, 128), BF16)]),
    ("int_mean", lambda x: (jnp.sum(x, axis=1, keepdims=True) // 128) * jnp.ones((8, 128), I32), [f((8, 128), I32, -1000, 1000)]),
    ("minmax_bf16_scale", lambda x: (x - jnp.min(x)) / (jnp.max(x) - jnp.min(x) + 1), [f((16, 128), BF16)]),
    ("bool_xor", lambda a, b: ((a > 0) ^ (b > 0)).astype(F32) + ((a > 0) & ~(b > 0)).astype(F32) * 2, [f((8, 128)), f((8, 128))]),
]


def numprog():
    def fn(x, interpret=False):
        def kernel(x_ref, o_ref):
            i, j = pl.program_id(0), pl.program_id(1)
            pl.debug_print("step {} {}", i, j)
            n, m = jnp.int32(pl.num_programs(0)), jnp.int32(pl.num_programs(1))
            lin = i * m + j
            o_ref[...] = x_ref[...] * (lin.astype(F32) / (n * m).astype(F32)) + (n - 1 - i).astype(F32)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(3, 2),
                              in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
                              out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, j)), interpret=interpret)(x)
    return fn, lambda r: [rand(r, (24, 256), F32)]


def cases():
    out = [("misc_" + name, whole(op), lambda r, mks=mks: [m(r) for m in mks]) for name, op, mks in OPS]
    fn, mk = numprog()
    out.append(("misc_num_programs", fn, mk))
    return out
