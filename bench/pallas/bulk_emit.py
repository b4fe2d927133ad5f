"""bulk_emit.py: hand-built pipelines in bulk (bulk.py runs them): pltpu.emit_pipeline over ANY
operands (1-D to 3-D inner grids, K-loops accumulating into the inner output block or a
scratch, element types, inner dimension semantics), an emit_pipeline inside the outer grid of
a pallas_call (per outer step a slice of HBM), two pipelines one after the other, a pipeline in
a fori_loop, pl.run_scoped buffers and semaphores with async copies, pl.kernel on the
TensorCore mesh."""
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from bulk_ew import rand, DT, F32, BF16, I32

ANY = pl.BlockSpec(memory_space=pl.ANY)


def ew_pipe(grid, block, dt, sem):
    pad = len(block) - len(grid)  # trailing block dimensions the grid does not walk
    shape = tuple(g * b for g, b in zip(grid, block)) + tuple(block[len(grid):])

    def fn(x, y, interpret=False):
        def inner(x_ref, y_ref, o_ref):
            o_ref[...] = (x_ref[...].astype(F32) * 1.5 - y_ref[...].astype(F32)).astype(o_ref.dtype)
        idx = lambda *g: tuple(g) + (0,) * pad  # noqa: E731
        kw = {} if sem is None else {"dimension_semantics": tuple(getattr(pltpu, s.upper()) for s in sem)}

        def kernel(x_hbm, y_hbm, o_hbm):
            pltpu.emit_pipeline(inner, grid=grid, in_specs=[pl.BlockSpec(block, idx)] * 2,
                                out_specs=pl.BlockSpec(block, idx), **kw)(x_hbm, y_hbm, o_hbm)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shape, dt), in_specs=[ANY, ANY], out_specs=ANY,
                              interpret=interpret)(x, y)
    return fn, lambda r: [rand(r, shape, dt, -50, 50) if dt == I32 else rand(r, shape, dt), rand(r, shape, dt)]


def kloop_pipe(M, K, N, bm, bk, bn, dt, acc):
    def fn(x, w, interpret=False):
        def body(xb, wb, ob, *scr):
            k = pl.program_id(2)
            if acc == "out":
                @pl.when(k == 0)
                def _():
                    ob[...] = jnp.zeros_like(ob)
                ob[...] += jnp.dot(xb[...], wb[...], preferred_element_type=F32)
            else:
                a = scr[0]

                @pl.when(k == 0)
                def _():
                    a[...] = jnp.zeros_like(a)
                a[...] += jnp.dot(xb[...], wb[...], preferred_element_type=F32)

                @pl.when(k == pl.num_programs(2) - 1)
                def _():
                    ob[...] = a[...].astype(ob.dtype)

        def kernel(x_hbm, w_hbm, o_hbm, *scr):
            b = body if acc == "out" else functools.partial(lambda xb, wb, ob, a: body(xb, wb, ob, a), a=scr[0])
            pltpu.emit_pipeline(b, grid=(M // bm, N // bn, K // bk),
                                in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                                          pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
                                out_specs=[pl.BlockSpec((bm, bn), lambda i, j, k: (i, j))])(x_hbm, w_hbm, o_hbm)
        odt = F32 if acc == "out" else dt
        scratch = [] if acc == "out" else [pltpu.VMEM((bm, bn), F32)]
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((M, N), odt), in_specs=[ANY, ANY], out_specs=ANY,
                              scratch_shapes=scratch, interpret=interpret)(x, w)
    return fn, lambda r: [rand(r, (M, K), dt, -2, 2), rand(r, (K, N), dt, -2, 2)]


def outer_inner(dt):
    """A pallas_call grid over row slabs; each step pipelines its slab's column blocks itself."""
    def fn(x, interpret=False):
        def kernel(x_hbm, o_hbm):
            i = pl.program_id(0)

            def inner(xb, ob):
                ob[...] = (jnp.tanh(xb[...].astype(F32)) + i.astype(F32)).astype(ob.dtype)
            pltpu.emit_pipeline(inner, grid=(4,), in_specs=[pl.BlockSpec((16, 128), lambda j: (0, j))],
                                out_specs=pl.BlockSpec((16, 128), lambda j: (0, j)))(
                x_hbm.at[pl.ds(i * 16, 16)], o_hbm.at[pl.ds(i * 16, 16)])
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(3,),
                              in_specs=[ANY], out_specs=ANY, interpret=interpret)(x)
    return fn, lambda r: [rand(r, (48, 512), dt)]


def two_pipes():
    def fn(x, interpret=False):
        def kernel(x_hbm, o_hbm, t_hbm):
            def p1(xb, tb):
                tb[...] = xb[...] * 2.0

            def p2(tb, ob):
                ob[...] = tb[...] + 1.0
            pltpu.emit_pipeline(p1, grid=(4,), in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0))],
                                out_specs=pl.BlockSpec((16, 128), lambda i: (i, 0)))(x_hbm, t_hbm)
            pltpu.emit_pipeline(p2, grid=(2,), in_specs=[pl.BlockSpec((32, 128), lambda i: (1 - i, 0))],
                                out_specs=pl.BlockSpec((32, 128), lambda i: (i, 0)))(t_hbm, o_hbm)
        return pl.pallas_call(kernel, out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype)] * 2, in_specs=[ANY],
                              out_specs=[ANY, ANY], interpret=interpret)(x)
    return fn, lambda r: [rand(r, (64, 128), F32)]


def pipe_in_fori():
    def fn(x, interpret=False):
        def kernel(x_hbm, o_hbm):
            def step(t, c):
                def inner(xb, ob):
                    ob[...] = xb[...] + t.astype(F32)
                pltpu.emit_pipeline(inner, grid=(2,), in_specs=[pl.BlockSpec((16, 128), lambda j: (j, 0))],
                                    out_specs=pl.BlockSpec((16, 128), lambda j: (j, 0)))(
                    x_hbm.at[pl.ds(t * 32, 32)], o_hbm.at[pl.ds(t * 32, 32)])
                return c
            lax.fori_loop(0, 3, step, 0)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[ANY], out_specs=ANY,
                              interpret=interpret)(x)
    return fn, lambda r: [rand(r, (96, 128), F32)]


def scoped(kind):
    def fn(x, interpret=False):
        def kernel(x_hbm, o_ref):
            if kind == "two_bufs":
                def body(a, b, sems):
                    c0 = pltpu.async_copy(x_hbm.at[pl.ds(0, 16)], a, sems.at[0])
                    c1 = pltpu.async_copy(x_hbm.at[pl.ds(16, 16)], b, sems.at[1])
                    c1.wait()
                    c0.wait()
                    o_ref[...] = a[...] * b[...]
                pl.run_scoped(body, pltpu.VMEM((16, 128), F32), pltpu.VMEM((16, 128), F32), pltpu.SemaphoreType.DMA((2,)))
            else:  # a scoped buffer per loop iteration
                def step(t, c):
                    def body(buf, sem):
                        pltpu.sync_copy(x_hbm.at[pl.ds(t * 8, 8)], buf)
                        del sem
                        return jnp.sum(buf[...], axis=0, keepdims=True)
                    return c + pl.run_scoped(body, pltpu.VMEM((8, 128), F32), pltpu.SemaphoreType.DMA)
                s = lax.fori_loop(0, 4, step, jnp.zeros((1, 128), F32))
                o_ref[...] = jnp.broadcast_to(s, (16, 128))
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), F32), in_specs=[ANY],
                              interpret=interpret)(x)
    return fn, lambda r: [rand(r, (32, 128), F32)]


def mesh_kernel(dt):
    def fn(x, interpret=False):
        mesh = pltpu.create_tensorcore_mesh("core", num_cores=1)

        @functools.partial(pl.kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh, interpret=interpret,
                           scratch_types=[pltpu.VMEM((8, 256), dt)])
        def k(x_hbm, o_hbm, tmp):
            for s in range(x.shape[0] // 8):
                pltpu.sync_copy(x_hbm.at[pl.ds(s * 8, 8)], tmp)
                tmp[...] = (tmp[...].astype(F32) * (s + 1)).astype(dt)
                pltpu.sync_copy(tmp, o_hbm.at[pl.ds(s * 8, 8)])
        return k(x)
    return fn, lambda r: [rand(r, (32, 256), dt)]


def cases():
    out = []
    for grid, block in (((4,), (16, 128)), ((2, 3), (8, 128)), ((2, 2, 2), (1, 8, 128)), ((3, 1), (16, 256))):
        for dt in (F32, BF16, I32):
            for sem in (None, ("parallel",) * (len(grid) - 1) + ("arbitrary",)):
                if dt == I32 and sem is not None:
                    continue
                fn, mk = ew_pipe(grid, block, dt, sem)
                out.append(("emit_ew_g%s_b%s_%s%s" % ("x".join(map(str, grid)), "x".join(map(str, block)), DT[dt],
                                                     "" if sem is None else "_sem"), fn, mk))
    for (M, K, N, bm, bk, bn) in ((64, 256, 128, 32, 128, 128), (128, 512, 256, 64, 256, 128), (32, 384, 256, 32, 128, 256)):
        for dt in (F32, BF16):
            for acc in ("out", "scratch"):
                fn, mk = kloop_pipe(M, K, N, bm, bk, bn, dt, acc)
                out.append(("emit_k_%dx%dx%d_b%dx%dx%d_%s_%s" % (M, K, N, bm, bk, bn, DT[dt], acc), fn, mk))
    for dt in (F32, BF16):
        fn, mk = outer_inner(dt)
        out.append(("emit_outer_inner_%s" % DT[dt], fn, mk))
        fn, mk = mesh_kernel(dt)
        out.append(("emit_mesh_kernel_%s" % DT[dt], fn, mk))
    fn, mk = two_pipes()
    out.append(("emit_two_pipes_f32", fn, mk))
    fn, mk = pipe_in_fori()
    out.append(("emit_in_fori_f32", fn, mk))
    for kind in ("two_bufs", "per_iter"):
        fn, mk = scoped(kind)
        out.append(("scoped_%s_f32" % kind, fn, mk))
    return out
