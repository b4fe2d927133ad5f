"""Host callbacks as users write them (issue 34), run on whatever JAX_PLATFORMS names:
jax.debug.print (one device, a sharded jit, shard_map), pure_callback, io_callback ordered in
a loop, and a callback that raises. Prints one JSON object: what each case printed and
returned, which test_pjrt_callbacks.py compares between XLA:CPU and tpusim."""
import contextlib
import io
import json
import sys

import numpy as np
import jax
import jax.numpy as jnp
from jax.experimental import io_callback
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

try:
    from jax import shard_map
except ImportError:  # older JAX
    from jax.experimental.shard_map import shard_map

out = {}


def captured(fn):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        r = fn()
        jax.effects_barrier()
    return r, sorted(buf.getvalue().splitlines())


x = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3)


@jax.jit
def printed(x):
    jax.debug.print("sum={s} first={f}", s=x.sum(), f=x[0, 0])
    return x * 2


r, lines = captured(lambda: np.asarray(printed(x)))
out["print_one_device"] = {"lines": lines, "value": r.tolist()}


@jax.jit
def pure(x):
    y = jax.pure_callback(lambda a: np.tanh(a).astype(a.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    return y + 1.0


out["pure_callback"] = np.asarray(pure(x)).tolist()

seen = []


def record(i, v):
    seen.append([int(i), float(v)])
    return np.float32(v * 10)


@jax.jit
def ordered_loop(x):
    def body(i, acc):
        got = io_callback(record, jax.ShapeDtypeStruct((), jnp.float32), i, acc, ordered=True)
        return acc + got
    return jax.lax.fori_loop(0, 4, body, x.sum())


out["io_callback_loop"] = {"value": float(ordered_loop(x)), "calls": seen}

mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("a", "b"))
xs = jax.device_put(jnp.arange(16.0, dtype=jnp.float32).reshape(4, 4), NamedSharding(mesh, P("a", "b")))


@jax.jit
def sharded(x):
    jax.debug.print("sharded sum={s}", s=x.sum())
    y = jax.pure_callback(lambda a: np.cos(a).astype(a.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    return y * 2


r, lines = captured(lambda: sharded(xs))
out["sharded"] = {"lines": lines, "value": np.asarray(r).tolist()}


def per_shard(b):
    jax.debug.print("block sum={s}", s=b.sum())
    return b + 1


sm = jax.jit(shard_map(per_shard, mesh=mesh, in_specs=P("a", "b"), out_specs=P("a", "b")))
r, lines = captured(lambda: sm(xs))
out["shard_map_print"] = {"lines": lines, "value": np.asarray(r).tolist()}


def boom(a):
    raise ValueError("boom from the callback")


try:
    jax.jit(lambda v: jax.pure_callback(boom, jax.ShapeDtypeStruct(v.shape, v.dtype), v))(x).block_until_ready()
    out["raises"] = "no error"
except Exception as e:  # noqa: BLE001 - the message is the result
    out["raises"] = "boom from the callback" in str(e)

json.dump(out, sys.stdout)
