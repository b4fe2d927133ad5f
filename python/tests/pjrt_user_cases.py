"""JAX programs as new users write them (issue 34), run by test_pjrt_users.py on
JAX_PLATFORMS=tpusim (TPUSIM_TOPOLOGY=2x2) and on 4 CPU devices:
`python3 pjrt_user_cases.py OUT.npz` saves every case's result leaves and, for each, which
block of it every device holds (its sharding, as `DEVICE:start-stop,...` per device)."""
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
rep = NamedSharding(mesh, P())
rows = NamedSharding(mesh, P("x", None))
x = jax.device_put(np.arange(64, dtype=np.float32).reshape(8, 8) / 64, NamedSharding(mesh, P("x", "y")))
w = jax.device_put(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8), rows)
X4 = jnp.asarray(np.arange(24.0, dtype=np.float32).reshape(2, 2, 2, 3))


def fsdp_loop(params, n=3):
    """An FSDP step with explicit out_shardings, three times: params stay sharded."""
    def step(p, opt, data):
        loss, g = jax.value_and_grad(lambda q: jnp.mean(jnp.tanh(data @ q["w"]) ** 2))(p)
        opt = jax.tree_util.tree_map(lambda m, gi: 0.9 * m + gi, opt, g)
        p = jax.tree_util.tree_map(lambda q, m: q - 0.1 * m, p, opt)
        return p, opt, loss
    shard = {"w": rows}
    f = jax.jit(step, out_shardings=(shard, shard, rep))
    opt = jax.tree_util.tree_map(jnp.zeros_like, params)
    losses = []
    for _ in range(n):
        params, opt, loss = f(params, opt, x)
        losses.append(loss)
    return params, opt, jnp.stack(losses)


CASES = {
    # 1: a jit over sharded arrays and a Python scalar (a learning rate)
    "scalar_lr": (jax.jit(lambda a, t: a * t), x, 2.0),
    # 2: a closure over a non-uniform constant of rank 4 (printed with /*i0=0*/ comments)
    "closure_rank4": (jax.jit(lambda y: y + X4), 1.0),
    # 3: a scalar result with an explicit replicated out_sharding beside a sharded one
    "out_shardings_scalar": (jax.jit(lambda a: (a * 2, (a * a).sum()), out_shardings=(rows, rep)), w),
    # 4: results keep the shardings the program gives them beside a replicated scalar
    "constraint_and_scalar": (jax.jit(lambda a: (jax.lax.with_sharding_constraint(a * 2, NamedSharding(mesh, P(None, "y"))),
                                                 (a * a).sum())), w),
    "propagated": (jax.jit(lambda a, b: (jnp.tanh(a) + 1, (a * b + 1).mean())), w, x),
    "fsdp_loop": (fsdp_loop, {"w": w}),
}

out, shardings = {}, {}
for name, (fn, *args) in CASES.items():
    for i, leaf in enumerate(jax.tree_util.tree_leaves(fn(*args))):
        key = "%s.%d" % (name, i)
        out[key] = np.asarray(leaf)
        blocks = leaf.sharding.devices_indices_map(leaf.shape)
        shardings[key] = " ".join(
            "%d:%s" % (d.id, ",".join("%s-%s" % (s.start or 0, s.stop if s.stop is not None else n)
                                      for s, n in zip(idx, leaf.shape)))
            for d, idx in sorted(blocks.items(), key=lambda kv: kv[0].id))
out["__shardings__"] = np.array(json.dumps(shardings))
np.savez(sys.argv[1], **out)
