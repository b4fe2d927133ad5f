"""bulk_mem.py: memory patterns in bulk (bulk.py runs them): manual double-buffered DMA from and
to memory_space=ANY (chunk sizes, element types, fori_loop or pl.loop, unrolled or not, into a
VMEM block or out to ANY), several copies in flight on one semaphore,
VMEM-to-VMEM copies, scalar prefetch (row gathers, block permutations, index-map arithmetic on
prefetched ids, prefetched trip counts and skip flags), input_output_aliases (in place, another
operand, blocks not visited keep the input), masked pltpu.load / store, dynamic pl.ds offsets
(aligned and not), SMEM scratch and outputs, and kernels inside larger jitted functions."""
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from bulk_ew import rand, DT, F32, BF16, I32

ANY = pl.BlockSpec(memory_space=pl.ANY)
SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)


def dbuf(ch, dt, loop, unroll, out_any):
    rows, cols = 128, 256

    def fn(x, interpret=False):
        n = rows // ch

        def kernel(x_hbm, o_ref, buf, *rest):
            if out_any:
                obuf = rest[0]
                rest = rest[1:]
            sems = rest

            def cin(i, s):
                return pltpu.make_async_copy(x_hbm.at[pl.ds(i * ch, ch)], buf.at[s], sems[0].at[s])

            def cout(i, s):
                return pltpu.make_async_copy(obuf.at[s], o_ref.at[pl.ds(i * ch, ch)], sems[1].at[s])
            cin(0, 0).start()

            def step(i):
                s = i % 2

                @pl.when(i + 1 < n)
                def _():
                    cin(i + 1, 1 - s).start()
                cin(i, s).wait()
                v = buf[s].astype(F32) * 2.0 + 1.0
                if out_any:
                    @pl.when(i >= 2)
                    def _():
                        cout(i - 2, s).wait()
                    obuf[s] = v.astype(obuf.dtype)
                    cout(i, s).start()
                else:
                    o_ref[pl.ds(pl.multiple_of(i * ch, ch), ch), :] = v.astype(o_ref.dtype)
            if loop == "fori":
                lax.fori_loop(0, n, lambda i, c: (step(i), c)[1], 0, unroll=unroll)
            else:
                pl.loop(0, n)(step)
            if out_any:
                cout(n - 2, n % 2).wait()
                cout(n - 1, (n - 1) % 2).wait()
        scratch = [pltpu.VMEM((2, ch, cols), dt)]
        if out_any:
            scratch.append(pltpu.VMEM((2, ch, cols), dt))
        scratch.append(pltpu.SemaphoreType.DMA((2,)))
        if out_any:
            scratch.append(pltpu.SemaphoreType.DMA((2,)))
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((rows, cols), dt), in_specs=[ANY],
                              out_specs=ANY if out_any else pl.BlockSpec(memory_space=pltpu.VMEM),
                              scratch_shapes=scratch, interpret=interpret)(x)
    return fn, lambda r: [rand(r, (rows, cols), dt, -50, 50) if dt == I32 else rand(r, (rows, cols), dt, -2, 2)]


def inflight(n, shared):
    """n copies started at once (rows of different sizes), waited in reverse order."""
    sizes = [8 * (1 + k % 3) for k in range(n)]
    offs = [sum(sizes[:k]) for k in range(n)]

    def fn(x, interpret=False):
        def kernel(x_hbm, o_ref, buf, sems):
            cps = [pltpu.make_async_copy(x_hbm.at[pl.ds(offs[k], sizes[k])], buf.at[pl.ds(offs[k], sizes[k])],
                                         sems.at[0 if shared else k]) for k in range(n)]
            for c in cps:
                c.start()
            for c in reversed(cps):
                c.wait()
            o_ref[...] = buf[...] + 1.0
        tot = sum(sizes)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((tot, 128), F32), in_specs=[ANY],
                              scratch_shapes=[pltpu.VMEM((tot, 128), F32), pltpu.SemaphoreType.DMA((n,))],
                              interpret=interpret)(x)
    return fn, lambda r: [rand(r, (sum(sizes), 128), F32)]


def vmem_copy(kind):
    def fn(x, interpret=False):
        def kernel(x_ref, o_ref, tmp, sem):
            if kind == "whole":
                c = pltpu.make_async_copy(x_ref, tmp, sem)
                c.start()
                c.wait()
                o_ref[...] = tmp[...] * 2.0
            else:  # rows shifted by 8 through a local DMA, the first 8 rows kept
                c = pltpu.make_async_copy(x_ref.at[pl.ds(0, 24)], o_ref.at[pl.ds(8, 24)], sem)
                o_ref[pl.ds(0, 8), :] = x_ref[pl.ds(24, 8), :]
                c.start()
                c.wait()
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                              in_specs=[pl.BlockSpec((32, 128), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((32, 128), lambda i: (i, 0)),
                              scratch_shapes=[pltpu.VMEM((32, 128), F32), pltpu.SemaphoreType.DMA(())],
                              interpret=interpret)(x)
    return fn, lambda r: [rand(r, (64, 128), F32)]


def prefetch(kind, dt):
    def fn(ids, x, interpret=False):
        if kind == "gather_rows":  # ids pick 8-row blocks
            def kernel(ids_ref, x_ref, o_ref):
                o_ref[...] = x_ref[...] * (ids_ref[pl.program_id(0)] + 1).astype(x_ref.dtype)
            gs = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(ids.shape[0],),
                                              in_specs=[pl.BlockSpec((8, 128), lambda i, ids: (ids[i], 0))],
                                              out_specs=pl.BlockSpec((8, 128), lambda i, ids: (i, 0)))
            oshape = (8 * ids.shape[0], 128)
        elif kind == "perm2d":  # a 2-D grid reading tile (ids[i] // 2, ids[i] % 2 + j)
            def kernel(ids_ref, x_ref, o_ref):
                o_ref[...] = x_ref[...] + pl.program_id(1).astype(x_ref.dtype)
            gs = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(ids.shape[0], 2),
                                              in_specs=[pl.BlockSpec((8, 128), lambda i, j, ids: (ids[i] // 2, ids[i] % 2 + j))],
                                              out_specs=pl.BlockSpec((8, 128), lambda i, j, ids: (i, j)))
            oshape = (8 * ids.shape[0], 256)
        elif kind == "trips":  # a prefetched trip count per block
            def kernel(ids_ref, x_ref, o_ref):
                n = ids_ref[pl.program_id(0)]
                o_ref[...] = lax.fori_loop(0, n, lambda k, a: a * 0.5 + x_ref[...], jnp.zeros_like(o_ref))
            gs = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(ids.shape[0],),
                                              in_specs=[pl.BlockSpec((8, 128), lambda i, ids: (i, 0))],
                                              out_specs=pl.BlockSpec((8, 128), lambda i, ids: (i, 0)))
            oshape = (8 * ids.shape[0], 128)
        else:  # skip: a prefetched flag skips the block's work (its output block zeroed)
            def kernel(ids_ref, x_ref, o_ref):
                i = pl.program_id(0)

                @pl.when(ids_ref[i] % 2 == 1)
                def _():
                    o_ref[...] = jnp.exp(x_ref[...].astype(F32)).astype(o_ref.dtype)

                @pl.when(ids_ref[i] % 2 == 0)
                def _():
                    o_ref[...] = jnp.zeros_like(o_ref)
            gs = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(ids.shape[0],),
                                              in_specs=[pl.BlockSpec((8, 128), lambda i, ids: (i, 0))],
                                              out_specs=pl.BlockSpec((8, 128), lambda i, ids: (i, 0)))
            oshape = (8 * ids.shape[0], 128)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(oshape, x.dtype), grid_spec=gs,
                              interpret=interpret)(ids, x)

    def mk(r):
        n = 6
        if kind == "gather_rows":
            ids = r.integers(0, 8, n)
        elif kind == "perm2d":
            ids = r.integers(0, 7, n)  # ids // 2 < 4 row tiles, ids % 2 + 1 < 3 lane tiles
        else:
            ids = r.integers(0, 5, n)
        shape = (32, 384) if kind == "perm2d" else (64, 128) if kind == "gather_rows" else (48, 128)
        return [jnp.asarray(ids, I32), rand(r, shape, dt, -2, 2)]
    return fn, mk


def alias(kind):
    def fn(x, y, interpret=False):
        if kind == "inplace":
            def kernel(x_ref, y_ref, o_ref):
                o_ref[...] = x_ref[...] * 2.0 + y_ref[...]
            return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                                  in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0))] * 2,
                                  out_specs=pl.BlockSpec((16, 128), lambda i: (i, 0)),
                                  input_output_aliases={0: 0}, interpret=interpret)(x, y)
        if kind == "second":  # output 0 aliases input 1
            def kernel(x_ref, y_ref, o_ref):
                o_ref[...] = y_ref[...] - x_ref[...]
            return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype), grid=(4,),
                                  in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0))] * 2,
                                  out_specs=pl.BlockSpec((16, 128), lambda i: (i, 0)),
                                  input_output_aliases={1: 0}, interpret=interpret)(x, y)
        if kind == "partial":  # only blocks 1 and 2 are written; 0 and 3 keep the aliased input
            def kernel(x_ref, y_ref, o_ref):
                o_ref[...] = y_ref[...] * 10.0
            return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                                  in_specs=[ANY, pl.BlockSpec((16, 128), lambda i: (i + 1, 0))],
                                  out_specs=pl.BlockSpec((16, 128), lambda i: (i + 1, 0)),
                                  input_output_aliases={0: 0}, interpret=interpret)(x, y)
        # anyout: an ANY output aliased to an ANY input, one row chunk rewritten by DMA

        def kernel(x_hbm, y_ref, o_hbm, buf, sem):
            buf[...] = y_ref[pl.ds(8, 8), :] + 1.0
            c = pltpu.make_async_copy(buf, o_hbm.at[pl.ds(24, 8)], sem)
            c.start()
            c.wait()
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              in_specs=[ANY, pl.BlockSpec(memory_space=pltpu.VMEM)], out_specs=ANY,
                              scratch_shapes=[pltpu.VMEM((8, 128), F32), pltpu.SemaphoreType.DMA(())],
                              input_output_aliases={0: 0}, interpret=interpret)(x, y)
    return (lambda x, y, interpret=False: fn(x, y, interpret) * 1.0 if kind in ("partial", "anyout") else fn(x, y, interpret)), \
        lambda r: [rand(r, (64, 128), F32), rand(r, (64, 128), F32)]


def masked(kind, dt):
    def fn(x, y, interpret=False):
        def kernel(x_ref, y_ref, o_ref):
            rows = lax.broadcasted_iota(I32, (16, 128), 0)
            cols = lax.broadcasted_iota(I32, (16, 128), 1)
            o_ref[...] = y_ref[...]
            if kind == "store_tri":
                pltpu.store(o_ref, x_ref[...] * 2, mask=cols < rows * 8)
            elif kind == "store_even":
                pltpu.store(o_ref, x_ref[...] + 1, mask=(cols % 2 == 0) & (rows > 3))
            else:  # a masked load: masked-off lanes are unspecified, so only used under the same mask
                m = cols >= 64
                v = pltpu.load(x_ref, mask=m)
                o_ref[...] = jnp.where(m, v, y_ref[...])
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 128), dt), grid=(2,),
                              in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0))] * 2,
                              out_specs=pl.BlockSpec((16, 128), lambda i: (i, 0)), interpret=interpret)(x, y)
    return fn, lambda r: [rand(r, (32, 128), dt, -20, 20), rand(r, (32, 128), dt, -20, 20)]


def dyn_ds(kind):
    def fn(x, interpret=False):
        def kernel(x_ref, o_ref):
            i = pl.program_id(0)
            if kind == "aligned":
                o_ref[...] = x_ref[pl.ds(pl.multiple_of(i * 16, 8), 16), pl.ds(128, 128)] * 2.0
            elif kind == "unaligned":
                o_ref[...] = x_ref[pl.ds(i * 3 + 1, 16), pl.ds(256, 128)] - 1.0
            elif kind == "lanes":
                o_ref[...] = x_ref[pl.ds(0, 16), pl.ds(pl.multiple_of(i * 128, 128), 128)]
            else:  # store at a dynamic row offset into a whole output, the rest zeros
                o_ref[...] = x_ref[pl.ds(0, 16), pl.ds(0, 128)]
                o_ref[pl.ds(i + 2, 8), :] = x_ref[pl.ds(i * 5, 8), pl.ds(384, 128)] * 7.0
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 128), F32), grid=(4,),
                              in_specs=[pl.BlockSpec((64, 512), lambda i: (0, 0))],
                              out_specs=pl.BlockSpec((16, 128), lambda i: (i, 0)), interpret=interpret)(x)
    return fn, lambda r: [rand(r, (64, 512), F32)]


def smem(kind):
    def fn(x, s, interpret=False):
        if kind == "acc":  # an SMEM scratch running sum over the grid, written to an SMEM output
            def kernel(x_ref, s_ref, o_ref, so_ref, acc):
                i = pl.program_id(0)

                @pl.when(i == 0)
                def _():
                    acc[0] = 0.0
                    acc[1] = 0.0
                acc[0] += jnp.sum(x_ref[...])
                acc[1] = jnp.maximum(acc[1], jnp.max(x_ref[...]) * s_ref[i % 2])
                o_ref[...] = x_ref[...] - acc[0] * 0.001
                so_ref[0] = acc[0]
                so_ref[1] = acc[1]
            return pl.pallas_call(kernel, out_shape=[jax.ShapeDtypeStruct(x.shape, F32), jax.ShapeDtypeStruct((2,), F32)],
                                  grid=(4,), in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0)), SMEM],
                                  out_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0)), SMEM],
                                  scratch_shapes=[pltpu.SMEM((2,), F32)], interpret=interpret,
                                  compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)))(x, s)
        # scalar loop over an SMEM table building per-row scales

        def kernel(x_ref, s_ref, o_ref, tab):
            def body(k, c):
                tab[k] = s_ref[k % 2] * k.astype(F32) + c
                return c + 0.5
            lax.fori_loop(0, 16, body, jnp.float32(0))
            for r in range(0, 16, 4):
                o_ref[pl.ds(r, 4), :] = x_ref[pl.ds(r, 4), :] * tab[r] + tab[r + 1]
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), F32),
                              in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), SMEM],
                              scratch_shapes=[pltpu.SMEM((16,), F32)], interpret=interpret)(x[:16], s)
    return fn, lambda r: [rand(r, (64, 128), F32), jnp.asarray([0.5, -2.0], F32)]


def in_jit(kind):
    def kern(x, interpret):
        def kernel(x_ref, o_ref):
            o_ref[...] = jnp.tanh(x_ref[...]) * 2.0
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 8,),
                              in_specs=[pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0))],
                              out_specs=pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0)), interpret=interpret)(x)

    def fn(x, w, interpret=False):
        if kind == "dot_around":
            h = jnp.dot(x, w, precision="highest")
            return jnp.sum(kern(h, interpret) * h, axis=0)
        if kind == "scan":
            def step(c, xi):
                y = kern(xi + c, interpret)
                return y * 0.5 + w[:16], jnp.max(y)
            c, ys = lax.scan(step, jnp.zeros((16, 128), F32), x.reshape(4, 16, 128))
            return c, ys
        if kind == "vmap":
            return jax.vmap(lambda a: kern(a, interpret))(x.reshape(4, 16, 128)) + w[0]
        # fori_loop of XLA around the kernel, a trip count from the data
        n = (jnp.sum(x > 0) % 3 + 1).astype(I32)
        return lax.fori_loop(0, n, lambda k, a: kern(a, interpret) + w[:64], x)
    return fn, lambda r: [rand(r, (64, 128), F32, -1, 1), rand(r, (128, 128), F32, -0.1, 0.1)]


def cases():
    out = []
    for k, (ch, dt) in enumerate([(8, F32), (16, F32), (32, BF16), (16, I32), (8, BF16), (32, F32)]):
        for loop, unroll in (("fori", False), ("fori", True), ("plloop", False)):
            for out_any in (False, True):
                if (k + (loop == "plloop") + out_any) % 2 and not (loop == "fori" and unroll):
                    continue  # about half the crossing
                fn, mk = dbuf(ch, dt, loop, unroll, out_any)
                out.append(("dbuf_c%d_%s_%s%s%s" % (ch, DT[dt], loop, "_unroll" if unroll else "", "_anyout" if out_any else ""),
                            fn, mk))
    for n in (2, 3, 5):
        for shared in (False, True):
            fn, mk = inflight(n, shared)
            out.append(("inflight_%d_%s" % (n, "sharedsem" if shared else "semeach"), fn, mk))
    for kind in ("whole", "shift"):
        fn, mk = vmem_copy(kind)
        out.append(("vmemcopy_%s_f32" % kind, fn, mk))
    for kind in ("gather_rows", "perm2d", "trips", "skip"):
        for dt in (F32, BF16):
            fn, mk = prefetch(kind, dt)
            out.append(("prefetch_%s_%s" % (kind, DT[dt]), fn, mk))
    for kind in ("inplace", "second", "partial", "anyout"):
        fn, mk = alias(kind)
        out.append(("alias_%s_f32" % kind, fn, mk))
    for kind in ("store_tri", "store_even", "load"):
        for dt in (F32, BF16, I32):
            fn, mk = masked(kind, dt)
            out.append(("masked_%s_%s" % (kind, DT[dt]), fn, mk))
    for kind in ("aligned", "unaligned", "lanes", "store"):
        fn, mk = dyn_ds(kind)
        out.append(("dynds_%s_f32" % kind, fn, mk))
    for kind in ("acc", "table"):
        fn, mk = smem(kind)
        out.append(("smem_%s_f32" % kind, fn, mk))
    for kind in ("dot_around", "scan", "vmap", "fori_xla"):
        fn, mk = in_jit(kind)
        out.append(("injit_%s_f32" % kind, fn, mk))
    return out
