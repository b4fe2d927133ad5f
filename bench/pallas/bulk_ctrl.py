"""bulk_ctrl.py: control flow inside kernels in bulk (bulk.py runs them): fori_loop over row or
lane chunks (unrolled or not, a scalar or vector carry, static or program_id-dependent trip
counts, nested), pl.loop with a step, while_loop, lax.cond / lax.switch on program_id and on
data, pl.when init/finalise on 2-D and 3-D grids whose dimension semantics vary, program_id
arithmetic in index maps, several outputs of different types."""
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from bulk_ew import rand, DT, F32, BF16, I32


def cp(sem):
    return {} if sem is None else {"compiler_params": pltpu.CompilerParams(dimension_semantics=sem)}


def fori_rows(ch, unroll, carry, dyn, dt):
    """A (32 x 256) block per grid step; fori over row chunks of ch, carrying a scalar sum or a
    vector running max; with dyn the trip count depends on program_id."""
    def fn(x, interpret=False):
        def kernel(x_ref, o_ref, s_ref):
            n = x_ref.shape[0] // ch
            o_ref[...] = jnp.zeros_like(o_ref)
            hi = n - pl.program_id(0) % 2 if dyn else n

            def body(i, c):
                rows = pl.ds(pl.multiple_of(i * ch, ch), ch)
                v = x_ref[rows, :].astype(F32)
                if carry == "scalar":
                    o_ref[rows, :] = (v * 2.0 + c).astype(o_ref.dtype)
                    return c + jnp.sum(v) * 0.01
                o_ref[rows, :] = jnp.maximum(v, c).astype(o_ref.dtype)
                return jnp.maximum(c, v)
            init = jnp.float32(0) if carry == "scalar" else jnp.full((ch, x_ref.shape[1]), -1.0, F32)
            c = lax.fori_loop(0, hi, body, init, unroll=unroll)
            if carry == "scalar":
                s_ref[...] = jnp.full(s_ref.shape, c, F32)
            else:
                s_ref[...] = jnp.max(c, axis=0, keepdims=True) * jnp.ones(s_ref.shape, F32)
        return pl.pallas_call(kernel, out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((16, 256), F32)],
                              grid=(2,), in_specs=[pl.BlockSpec((32, 256), lambda i: (i, 0))],
                              out_specs=[pl.BlockSpec((32, 256), lambda i: (i, 0)), pl.BlockSpec((8, 256), lambda i: (i, 0))],
                              interpret=interpret)(x)
    return fn, lambda r: [rand(r, (64, 256), dt, -3, 3)]


def fori_lanes(unroll, nested, dt):
    def fn(x, interpret=False):
        def kernel(x_ref, o_ref):
            nl = x_ref.shape[1] // 128

            def lane_body(j, acc):
                cols = pl.ds(pl.multiple_of(j * 128, 128), 128)
                if nested:
                    def row_body(i, a):
                        rows = pl.ds(pl.multiple_of(i * 8, 8), 8)
                        v = x_ref[rows, cols].astype(F32)
                        o_ref[rows, cols] = (v * (j + 1) - a).astype(o_ref.dtype)
                        return a + jnp.sum(v, axis=0, keepdims=True)
                    return lax.fori_loop(0, x_ref.shape[0] // 8, row_body, acc, unroll=unroll)
                v = x_ref[:, cols].astype(F32)
                o_ref[:, cols] = (jnp.exp(v * 0.5) + acc).astype(o_ref.dtype)
                return acc + jnp.max(v, axis=0, keepdims=True)
            lax.fori_loop(0, nl, lane_body, jnp.zeros((1, 128), F32), unroll=unroll)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                              in_specs=[pl.BlockSpec((16, 512), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((16, 512), lambda i: (i, 0)), interpret=interpret)(x)
    return fn, lambda r: [rand(r, (32, 512), dt, -2, 2)]


def pl_loop_step(step, start):
    def fn(x, interpret=False):
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...]

            @pl.loop(start, x_ref.shape[0] // 8, step=step)
            def _(i):
                rows = pl.ds(pl.multiple_of(i * 8, 8), 8)

                @pl.when(i % 3 != 1)
                def _():
                    o_ref[rows, :] = o_ref[rows, :] * 2.0 + i.astype(F32)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)(x)
    return fn, lambda r: [rand(r, (64, 128), F32)]


def while_vec(kind):
    def fn(x, interpret=False):
        def kernel(x_ref, o_ref):
            v0 = x_ref[...]
            if kind == "count":
                lim = 5 + pl.program_id(0)

                def cond(c):
                    return c[0] < lim

                def body(c):
                    return c[0] + 1, c[1] * 0.5 + jnp.tanh(c[1])
                _, v = lax.while_loop(cond, body, (jnp.int32(0), v0))
            else:  # until the block's max falls under a bound (a vector reduction steering the loop)
                def cond(c):
                    return (jnp.max(jnp.abs(c[1])) > 0.05) & (c[0] < 40)

                def body(c):
                    return c[0] + 1, c[1] * 0.7
                k, v = lax.while_loop(cond, body, (jnp.int32(0), v0))
                v = v + k.astype(F32)
            o_ref[...] = v
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                              in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)), interpret=interpret)(x)
    return fn, lambda r: [rand(r, (16, 128), F32)]


def cond_kind(kind, dt):
    def fn(x, interpret=False):
        def kernel(x_ref, o_ref):
            i = pl.program_id(0)
            v = x_ref[...]
            if kind == "pid":
                o_ref[...] = lax.cond(i % 2 == 0, lambda a: a * 2, lambda a: a - 1, v)
            elif kind == "data":
                o_ref[...] = lax.cond(jnp.sum(v.astype(F32)) > 0, lambda a: jnp.abs(a), lambda a: -a, v)
            elif kind == "switch":
                o_ref[...] = lax.switch(i % 3, [lambda a: a + 1, lambda a: a * a, lambda a: jnp.maximum(a, 0)], v)
            else:  # nested: a cond inside a fori inside a cond
                def outer(a):
                    def body(j, acc):
                        return lax.cond(j % 2 == 0, lambda b: b + 1, lambda b: b * 2, acc)
                    return lax.fori_loop(0, i + 1, body, a)
                o_ref[...] = lax.cond(i < 3, outer, lambda a: a, v)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                              in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((16, 128), lambda i: (i, 0)), interpret=interpret)(x)
    return fn, lambda r: [rand(r, (64, 128), dt, -3, 3) if dt != I32 else rand(r, (64, 128), dt, -50, 50)]


def grid3(sem, order, dt):
    """Sum over the last two grid axes into a (16, 128) output block per leading index, with
    pl.when init on the first (j, k) step and a finalising scale on the last."""
    def fn(x, interpret=False):
        def kernel(x_ref, o_ref, acc):
            j, k = pl.program_id(1), pl.program_id(2)

            @pl.when((j == 0) & (k == 0))
            def _():
                acc[...] = jnp.zeros_like(acc)
            acc[...] += x_ref[0].astype(F32) * (1 + k)

            @pl.when((j == pl.num_programs(1) - 1) & (k == pl.num_programs(2) - 1))
            def _():
                o_ref[0] = (acc[...] * 0.5).astype(o_ref.dtype)
        B, J, K = 2, 3, 2
        if order == "bjk":
            imap = lambda b, j, kk: (b, j, kk)  # noqa: E731
        else:  # a swapped index map: (b, j, k) reads row block k and lane block j
            imap = lambda b, j, kk: (b, kk, j)  # noqa: E731
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((B, 16, 128), dt), grid=(B, J, K),
                              in_specs=[pl.BlockSpec((1, 16, 128), imap)],
                              out_specs=pl.BlockSpec((1, 16, 128), lambda b, j, kk: (b, 0, 0)),
                              scratch_shapes=[pltpu.VMEM((16, 128), F32)], interpret=interpret, **cp(sem))(x)
    shape = (2, 48, 256) if order == "bjk" else (2, 32, 384)
    return fn, lambda r: [rand(r, shape, dt, -2, 2)]


def imap_arith(kind):
    def fn(x, interpret=False):
        n = 8

        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] + pl.program_id(0).astype(F32)
        maps = {"rev": lambda i: (n - 1 - i, 0), "divmod": lambda i: (i % 4 * 2 + i // 4, 0),
                "pair": lambda i: ((i // 2) * 2 + (1 - i % 2), 0)}
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(n,),
                              in_specs=[pl.BlockSpec((8, 128), maps[kind])],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)), interpret=interpret)(x)
    return fn, lambda r: [rand(r, (64, 128), F32)]


def multi_out(kind):
    def fn(x, interpret=False):
        if kind == "three":
            def kernel(x_ref, a_ref, b_ref, c_ref):
                v = x_ref[...]
                a_ref[...] = v.astype(BF16)
                b_ref[...] = (v > 0).astype(I32) + jnp.argmax(v, axis=1, keepdims=True).astype(I32)
                c_ref[...] = jnp.sum(v, axis=1, keepdims=True) * jnp.ones((16, 128), F32)
            outs = [jax.ShapeDtypeStruct((64, 256), BF16), jax.ShapeDtypeStruct((64, 256), I32),
                    jax.ShapeDtypeStruct((64, 128), F32)]
            specs = [pl.BlockSpec((16, 256), lambda i: (i, 0))] * 2 + [pl.BlockSpec((16, 128), lambda i: (i, 0))]
            return pl.pallas_call(kernel, out_shape=outs, grid=(4,), in_specs=[pl.BlockSpec((16, 256), lambda i: (i, 0))],
                                  out_specs=specs, interpret=interpret)(x)
        # revisited: one output per block, one accumulated over the whole grid
        def kernel(x_ref, a_ref, t_ref):
            i = pl.program_id(0)
            a_ref[...] = x_ref[...] * 3.0

            @pl.when(i == 0)
            def _():
                t_ref[...] = jnp.zeros_like(t_ref)
            t_ref[...] += jnp.sum(x_ref[...].reshape(2, 8, 256), axis=0)
        return pl.pallas_call(kernel, out_shape=[jax.ShapeDtypeStruct((64, 256), F32), jax.ShapeDtypeStruct((8, 256), F32)],
                              grid=(4,), in_specs=[pl.BlockSpec((16, 256), lambda i: (i, 0))],
                              out_specs=[pl.BlockSpec((16, 256), lambda i: (i, 0)), pl.BlockSpec((8, 256), lambda i: (0, 0))],
                              interpret=interpret, **cp(("arbitrary",)))(x)
    return fn, lambda r: [rand(r, (64, 256), F32)]


def cases():
    out = []
    k = 0
    for ch in (8, 16):
        for unroll in (False, True, 2):
            for carry in ("scalar", "vector"):
                for dyn in (False, True):
                    if dyn and unroll:
                        continue  # fori_loop refuses unroll with a dynamic trip count
                    dt = (F32, BF16)[k % 2]
                    k += 1
                    fn, mk = fori_rows(ch, unroll, carry, dyn, dt)
                    out.append(("fori_rows_c%d_u%s_%s%s_%s" % (ch, str(unroll)[0], carry, "_dyn" if dyn else "", DT[dt]), fn, mk))
    for unroll in (False, True):
        for nested in (False, True):
            for dt in (F32, BF16):
                fn, mk = fori_lanes(unroll, nested, dt)
                out.append(("fori_lanes_u%s%s_%s" % (str(unroll)[0], "_nested" if nested else "", DT[dt]), fn, mk))
    for step, start in ((2, 0), (3, 1), (1, 2)):
        fn, mk = pl_loop_step(step, start)
        out.append(("plloop_step%d_from%d_f32" % (step, start), fn, mk))
    for kind in ("count", "data"):
        fn, mk = while_vec(kind)
        out.append(("while_%s_f32" % kind, fn, mk))
    for kind in ("pid", "data", "switch", "nested"):
        for dt in (F32, BF16, I32):
            fn, mk = cond_kind(kind, dt)
            out.append(("cond_%s_%s" % (kind, DT[dt]), fn, mk))
    for sem in (("parallel", "arbitrary", "arbitrary"), ("arbitrary",) * 3, None):
        for order in ("bjk", "bkj"):
            for dt in (F32, BF16):
                fn, mk = grid3(sem, order, dt)
                sn = {None: "nosem", ("arbitrary",) * 3: "aaa"}.get(sem, "paa")
                out.append(("grid3_%s_%s_%s" % (sn, order, DT[dt]), fn, mk))
    for kind in ("rev", "divmod", "pair"):
        fn, mk = imap_arith(kind)
        out.append(("imap_%s_f32" % kind, fn, mk))
    for kind in ("three", "revisit"):
        fn, mk = multi_out(kind)
        out.append(("multiout_%s" % kind, fn, mk))
    return out
