"""bulk_layout.py: data movement inside kernels in bulk (bulk.py runs them): transposes (.T,
swapaxes, einshape), reshapes, broadcasts, concatenates, static slices (aligned and not),
pltpu.roll on either axis, iotas, tile / repeat / flip, sort; f32 / bf16 / int32 / int8."""
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from bulk_ew import rand, whole, DT, F32, BF16, I32, I8


def iota2(shape, dt, axis):
    return lambda x: x + lax.broadcasted_iota(jnp.int32, shape, axis).astype(dt)


# (name, op, input shapes)
def ops_for(dt):
    return [
        ("T_128x128", lambda x: x.T, [(128, 128)]),
        ("T_8x128", lambda x: x.T, [(8, 128)]),
        ("T_128x256", lambda x: x.T * 2, [(128, 256)]),
        ("T_256x128", lambda x: x.T, [(256, 128)]),
        ("T_16x384", lambda x: x.T, [(16, 384)]),
        ("swap01_4x8x128", lambda x: jnp.swapaxes(x, 0, 1), [(4, 8, 128)]),
        ("swap12_2x128x128", lambda x: jnp.swapaxes(x, 1, 2), [(2, 128, 128)]),
        ("einshape_mnk", lambda x: pltpu.einshape("mhd->hmd", x), [(8, 4, 128)]),
        ("reshape_8x256_16x128", lambda x: x.reshape(16, 128), [(8, 256)]),
        ("reshape_16x128_8x256", lambda x: x.reshape(8, 256), [(16, 128)]),
        ("reshape_16x128_2x8x128", lambda x: x.reshape(2, 8, 128) + 1, [(16, 128)]),
        ("reshape_2x8x128_16x128", lambda x: x.reshape(16, 128), [(2, 8, 128)]),
        ("reshape_32x128_4x1024", lambda x: x.reshape(4, 1024), [(32, 128)]),
        ("bcast_row", lambda x, y: x + y, [(1, 256), (16, 256)]),
        ("bcast_col", lambda x, y: x * y, [(16, 1), (16, 256)]),
        ("bcast_to", lambda x: jnp.broadcast_to(x, (3, 16, 128)), [(16, 128)]),
        ("bcast_col_to", lambda x: jnp.broadcast_to(x, (8, 384)), [(8, 1)]),
        ("concat_l", lambda x, y: jnp.concatenate([x, y, x], axis=1), [(8, 128), (8, 128)]),
        ("concat_s", lambda x, y: jnp.concatenate([x, y], axis=0), [(8, 128), (16, 128)]),
        ("concat_l_odd", lambda x, y: jnp.concatenate([x, y], axis=1), [(8, 64), (8, 64)]),
        ("slice_l", lambda x: x[:, 128:256], [(8, 384)]),
        ("slice_s", lambda x: x[8:16, :], [(32, 128)]),
        ("slice_l_odd", lambda x: x[:, 3:131], [(8, 256)]),
        ("slice_s_odd", lambda x: x[3:11, :], [(32, 128)]),
        ("slice_both", lambda x: x[5:13, 64:192], [(24, 256)]),
        ("roll_l", lambda x: pltpu.roll(x, 5, 1), [(8, 256)]),
        ("roll_s", lambda x: pltpu.roll(x, 3, 0), [(16, 128)]),
        ("roll_l_big", lambda x: pltpu.roll(x, 200, 1), [(16, 256)]),
        ("jroll_l", lambda x: jnp.roll(x, 7, axis=1), [(8, 128)]),
        ("jroll_s", lambda x: jnp.roll(x, -2, axis=0), [(16, 128)]),
        ("iota_l", iota2((16, 256), dt, 1), [(16, 256)]),
        ("iota_s", iota2((16, 256), dt, 0), [(16, 256)]),
        ("tile", lambda x: jnp.tile(x, (2, 2)), [(8, 128)]),
        ("repeat_s", lambda x: jnp.repeat(x, 2, axis=0), [(8, 128)]),
        ("flip_l", lambda x: jnp.flip(x, 1), [(8, 128)]),
        ("flip_s", lambda x: jnp.flip(x, 0), [(8, 128)]),
        ("sort_l", lambda x: jnp.sort(x, axis=-1), [(8, 128)]),
        ("expand_sum", lambda x: jnp.sum(x[None, :, :] * x[:, None, :], axis=1), [(8, 128)]),
        ("triu", lambda x: jnp.triu(x), [(128, 128)]),
        ("where_iota", lambda x: jnp.where(lax.broadcasted_iota(jnp.int32, (32, 128), 0) >= lax.broadcasted_iota(jnp.int32, (32, 128), 1) // 4, x, x * 0), [(32, 128)]),
        ("stack", lambda x, y: jnp.stack([x, y]), [(8, 128), (8, 128)]),
        ("sq_row", lambda x: x[3], [(8, 128)]),
        ("lane_bcast_elem", lambda x: x * x[:, 5:6], [(16, 128)]),
        ("T_then_dot", lambda x, y: jnp.dot(x.T, y, preferred_element_type=jnp.float32).astype(x.dtype), [(128, 128), (128, 128)]),
    ]


def cases():
    out = []
    for dt in (F32, BF16, I32, I8):
        for k, (opn, op, shapes) in enumerate(ops_for(dt)):
            # f32 every op; the rest on a rotating third of them (bf16/int32) or the movement ones (int8)
            if dt in (BF16, I32) and (k + (dt == I32)) % 2:
                continue
            if dt == I8 and not opn.startswith(("T_", "concat", "slice", "reshape", "bcast")):
                continue
            if dt in (I32, I8) and opn in ("sort_l", "T_then_dot"):
                continue
            out.append(("lay_%s_%s" % (opn, DT[dt]), whole(op),
                        lambda r, ss=shapes, d=dt: [rand(r, s, d, -100, 100) if d in (I32, I8) else rand(r, s, d, -3, 3)
                                                    for s in ss]))
    return out
