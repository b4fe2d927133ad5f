"""bulk_pipe.py: BlockSpec pipeline shapes in bulk (bulk.py runs them): cdiv grids with partial
edge blocks in one or both dimensions, 4-D grids, long grids, squeezed block dimensions (None,
pl.Squeezed()), pl.Buffered(1) inputs, blocks covering whole odd-sized dimensions, one operand
passed twice under two index maps, blocks whose index maps ignore a grid axis (broadcast
operands re-used across steps), outputs of other block shapes than the inputs."""
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from bulk_ew import rand, DT, F32, BF16, I32


def cdiv_grid(shape, block, dt):
    def fn(x, y, interpret=False):
        def kernel(x_ref, y_ref, o_ref):
            o_ref[...] = (x_ref[...].astype(F32) * 2.0 + y_ref[...].astype(F32)).astype(o_ref.dtype)
        grid = (pl.cdiv(shape[0], block[0]), pl.cdiv(shape[1], block[1]))
        spec = pl.BlockSpec(block, lambda i, j: (i, j))
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shape, dt), grid=grid,
                              in_specs=[spec, spec], out_specs=spec, interpret=interpret)(x, y)
    return fn, lambda r: [rand(r, shape, dt), rand(r, shape, dt)]


def grid4(sem, dt):
    def fn(x, interpret=False):
        def kernel(x_ref, o_ref, acc):
            k = pl.program_id(3)

            @pl.when(k == 0)
            def _():
                acc[...] = jnp.zeros_like(acc)
            acc[...] += x_ref[0, 0].astype(F32)

            @pl.when(k == pl.num_programs(3) - 1)
            def _():
                o_ref[0, 0] = acc[...].astype(o_ref.dtype)
        kw = {} if sem is None else {"compiler_params": pltpu.CompilerParams(dimension_semantics=sem)}
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((2, 3, 16, 128), dt), grid=(2, 3, 2, 4),
                              in_specs=[pl.BlockSpec((1, 1, 8, 128), lambda a, b, c, k: (a, b, c, k))],
                              out_specs=pl.BlockSpec((1, 1, 8, 128), lambda a, b, c, k: (a, b, c, 0)),
                              scratch_shapes=[pltpu.VMEM((8, 128), F32)], interpret=interpret, **kw)(x)
    return fn, lambda r: [rand(r, (2, 3, 16, 512), dt)]


def long_grid(n, dt):
    def fn(x, interpret=False):
        def kernel(x_ref, o_ref):
            o_ref[...] = jnp.maximum(x_ref[...], 0) + pl.program_id(0).astype(x_ref.dtype)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(n,),
                              in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)), interpret=interpret)(x)
    return fn, lambda r: [rand(r, (8 * n, 128), dt, -50, 50) if dt == I32 else rand(r, (8 * n, 128), dt)]


def squeezed(kind):
    def fn(x, interpret=False):
        sq = None if kind == "none" else pl.Squeezed()

        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] * 2.0 + jnp.sum(x_ref[...], axis=0, keepdims=True)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0], x.shape[1]),
                              in_specs=[pl.BlockSpec((sq, sq, 16, 128), lambda a, b: (a, b, 0, 0))],
                              out_specs=pl.BlockSpec((sq, sq, 16, 128), lambda a, b: (a, b, 0, 0)),
                              interpret=interpret)(x)
    return fn, lambda r: [rand(r, (2, 3, 16, 128), F32)]


def buffered1(dt):
    def fn(x, w, interpret=False):
        def kernel(x_ref, w_ref, o_ref):
            o_ref[...] = jnp.dot(x_ref[...], w_ref[...], preferred_element_type=F32).astype(o_ref.dtype)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 128), dt), grid=(4,),
                              in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0)),
                                        pl.BlockSpec((128, 128), lambda i: (0, 0), pipeline_mode=pl.Buffered(1))],
                              out_specs=pl.BlockSpec((16, 128), lambda i: (i, 0)), interpret=interpret)(x, w)
    return fn, lambda r: [rand(r, (64, 128), dt), rand(r, (128, 128), dt)]


def twice(kind):
    def fn(x, interpret=False):
        def kernel(a_ref, b_ref, o_ref):
            o_ref[...] = a_ref[...] - b_ref[...] * 0.5
        n = x.shape[0] // 8
        other = {"next": lambda i: ((i + 1) % n, 0), "mirror": lambda i: (n - 1 - i, 0), "first": lambda i: (0, 0)}[kind]
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(n,),
                              in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0)), pl.BlockSpec((8, 128), other)],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)), interpret=interpret)(x, x)
    return fn, lambda r: [rand(r, (48, 128), F32)]


def reduce_out(kind):
    """Row blocks in, one (8, 128) output per column block: the output index ignores the row axis."""
    def fn(x, interpret=False):
        def kernel(x_ref, o_ref):
            i = pl.program_id(1)

            @pl.when(i == 0)
            def _():
                o_ref[...] = jnp.full_like(o_ref, -jnp.inf) if kind == "max" else jnp.zeros_like(o_ref)
            v = x_ref[...].reshape(-1, 8, 128)
            if kind == "max":
                o_ref[...] = jnp.maximum(o_ref[...], jnp.max(v, axis=0))
            else:
                o_ref[...] += jnp.sum(v, axis=0)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, x.shape[1]), F32),
                              grid=(x.shape[1] // 128, x.shape[0] // 32),
                              in_specs=[pl.BlockSpec((32, 128), lambda j, i: (i, j))],
                              out_specs=pl.BlockSpec((8, 128), lambda j, i: (0, j)),
                              compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
                              interpret=interpret)(x)
    return fn, lambda r: [rand(r, (128, 384), F32)]


def cases():
    out = []
    for k, (shape, block) in enumerate([((100, 256), (32, 128)), ((64, 300), (16, 128)), ((37, 200), (8, 128)),
                                        ((130, 130), (64, 128)), ((24, 1000), (24, 512)), ((9, 128), (8, 128))]):
        for dt in (F32, BF16):
            fn, mk = cdiv_grid(shape, block, dt)
            out.append(("cdiv_%dx%d_b%dx%d_%s" % (shape + block + (DT[dt],)), fn, mk))
    for sem in (("parallel", "parallel", "arbitrary", "arbitrary"), ("parallel",) * 3 + ("arbitrary",), None):
        for dt in (F32, BF16):
            fn, mk = grid4(sem, dt)
            out.append(("grid4_%s_%s" % ("nosem" if sem is None else "".join(s[0] for s in sem), DT[dt]), fn, mk))
    for n in (64, 257, 1024):
        for dt in (F32, I32):
            fn, mk = long_grid(n, dt)
            out.append(("longgrid_%d_%s" % (n, DT[dt]), fn, mk))
    for kind in ("none", "squeezed"):
        fn, mk = squeezed(kind)
        out.append(("sqz_%s_f32" % kind, fn, mk))
    for dt in (F32, BF16):
        fn, mk = buffered1(dt)
        out.append(("buffered1_w_%s" % DT[dt], fn, mk))
    for kind in ("next", "mirror", "first"):
        fn, mk = twice(kind)
        out.append(("twice_%s_f32" % kind, fn, mk))
    for kind in ("max", "sum"):
        fn, mk = reduce_out(kind)
        out.append(("redout_%s_f32" % kind, fn, mk))
    return out
