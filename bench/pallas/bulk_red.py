"""bulk_red.py: reductions inside kernels in bulk (bulk.py runs them): sum / max / min / prod /
mean / argmax / argmin / any / logsumexp / variance over lanes, sublanes, both, and the leading
axis of 3-D blocks, f32 / bf16 / int32, keepdims or not, one block or a grid of row blocks."""
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from bulk_ew import rand, DT, F32, BF16, I32

OPS = [
    ("sum", jnp.sum), ("max", jnp.max), ("min", jnp.min), ("mean", jnp.mean),
    ("prod", lambda x, axis, keepdims: jnp.prod(1.0 + x * 0.01 if jnp.issubdtype(x.dtype, jnp.floating) else x % 3 - 1,
                                                axis=axis, keepdims=keepdims)),
    ("argmax", lambda x, axis, keepdims: jnp.argmax(x, axis=axis, keepdims=keepdims).astype(jnp.int32)),
    ("argmin", lambda x, axis, keepdims: jnp.argmin(x, axis=axis, keepdims=keepdims).astype(jnp.int32)),
    ("any", lambda x, axis, keepdims: jnp.any(x > 2, axis=axis, keepdims=keepdims).astype(jnp.int32)),
    ("lse", lambda x, axis, keepdims: jax.nn.logsumexp(x.astype(jnp.float32), axis=axis, keepdims=keepdims)),
    ("var", lambda x, axis, keepdims: jnp.var(x.astype(jnp.float32), axis=axis, keepdims=keepdims)),
    ("l2n", lambda x, axis, keepdims: x / jnp.sqrt(jnp.sum(x * x, axis=axis, keepdims=True) + 1e-3)),
    ("cnt", lambda x, axis, keepdims: jnp.sum((x > 0).astype(jnp.int32), axis=axis, keepdims=keepdims)),
]

# (array shape, block shape, axis, keepdims)
LAYOUTS = [
    ((32, 256), (8, 256), -1, True), ((32, 256), (8, 256), 0, True), ((16, 512), (16, 512), (0, 1), True),
    ((64, 128), (16, 128), -1, False), ((2, 16, 256), (1, 16, 256), 1, True), ((4, 8, 128), (4, 8, 128), 0, False),
    ((2, 8, 384), (2, 8, 384), 2, True), ((24, 128), (24, 128), 0, False),
]


def red_call(op, shape, block, axis, keepdims):
    def fn(x, interpret=False):
        body = lambda v: op(v, axis=axis, keepdims=keepdims)  # noqa: E731
        oblk = jax.eval_shape(body, jax.ShapeDtypeStruct(block, x.dtype))
        nb = shape[0] // block[0]
        oshape = (oblk.shape[0] * nb,) + oblk.shape[1:] if oblk.shape else ()
        if nb > 1 and (not oblk.shape or oblk.shape[0] != block[0]):
            raise ValueError("layout does not tile")  # generated layouts keep the row axis when gridded

        def kernel(x_ref, o_ref):
            o_ref[...] = body(x_ref[...]).astype(o_ref.dtype)
        nd = len(block)
        zeros = (0,) * (nd - 1)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(oshape, oblk.dtype), grid=(nb,),
                              in_specs=[pl.BlockSpec(block, lambda i: (i,) + zeros)],
                              out_specs=pl.BlockSpec(oblk.shape, lambda i: (i,) + (0,) * (len(oblk.shape) - 1)),
                              interpret=interpret)(x)
    return fn


def cases():
    out = []
    for k, (opn, op) in enumerate(OPS):
        for m, (shape, block, axis, keep) in enumerate(LAYOUTS):
            dts = (F32, BF16, I32)
            dt = dts[(k + m) % 3]
            if dt == I32 and opn in ("lse", "var", "l2n", "mean"):
                dt = F32
            if dt == BF16 and opn in ("prod",):
                dt = F32
            # only layouts whose output keeps the row blocks when gridded
            nb = shape[0] // block[0]
            ax = axis if isinstance(axis, tuple) else (axis,)
            if nb > 1 and (0 in ax or (not keep and -1 not in ax and len(shape) - 1 not in ax and 1 in ax)):
                continue
            an = "all" if isinstance(axis, tuple) else ("l" if axis in (-1, len(shape) - 1) else "a%d" % axis)
            name = "red_%s_%s_%s_%s%s" % (opn, DT[dt], "x".join(map(str, shape)), an, "k" if keep else "")
            out.append((name, red_call(op, shape, block, axis, keep),
                        lambda r, s=shape, d=dt: [rand(r, s, d, -100, 100) if d == I32 else rand(r, s, d, -3, 3)]))
    return out
