"""A flax + optax training step (a CNN with batch norm and dropout, adamw with clipping) and
everyday JAX patterns (top_k/sort gradients, remat inside scan, while with random, bf16,
pmap, vmap of solve, donation, shard_map ring, a 5-D GQA einsum), run on JAX_PLATFORMS;
prints one JSON object that test_pjrt_flax.py compares between XLA:CPU and tpusim."""
import json

import numpy as np
import jax
import jax.numpy as jnp
import optax
from flax import linen as nn
from jax.sharding import Mesh, PartitionSpec as P

try:
    from jax import shard_map
except ImportError:  # older JAX
    from jax.experimental.shard_map import shard_map

out = {}


class CNN(nn.Module):
    @nn.compact
    def __call__(self, x, train=True):
        x = nn.relu(nn.BatchNorm(use_running_average=not train)(nn.Conv(8, (3, 3))(x)))
        x = nn.avg_pool(x, (2, 2), (2, 2)).reshape(x.shape[0], -1)
        x = nn.Dropout(0.1, deterministic=not train)(nn.gelu(nn.Dense(16)(x)))
        return nn.Dense(4)(x)


m = CNN()
rng = jax.random.PRNGKey(0)
x = jax.random.normal(rng, (8, 8, 8, 3))
y = jax.random.randint(rng, (8,), 0, 4)
v = m.init({"params": rng, "dropout": rng}, x)
params, bs = v["params"], v["batch_stats"]
tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2))
opt = tx.init(params)


@jax.jit
def step(params, bs, opt, x, y, key):
    def loss_fn(p):
        logits, upd = m.apply({"params": p, "batch_stats": bs}, x, rngs={"dropout": key}, mutable=["batch_stats"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), upd
    (l, upd), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
    u, opt = tx.update(g, opt, params)
    return optax.apply_updates(params, u), upd["batch_stats"], opt, l


losses = []
for i in range(4):
    params, bs, opt, l = step(params, bs, opt, x, y, jax.random.fold_in(rng, i))
    losses.append(float(l))
leaves = jax.tree_util.tree_leaves(params)
out["flax_losses"] = losses
out["flax_params"] = [float(jnp.abs(a).sum()) for a in leaves]
jax.config.update("jax_default_matmul_precision", "highest")
k = jax.random.PRNGKey(1)
x = jax.random.normal(k, (16, 32))
# sort / top_k gradients
f = lambda a: (jax.lax.top_k(a, 4)[0] ** 2).sum() + (jnp.sort(a, axis=0)[:3] * jnp.arange(32.)).sum()
out["topk_sort_grad"] = float(jnp.abs(jax.jit(jax.grad(f))(x)).sum())
# scan RNN with remat
W = jax.random.normal(k, (32, 32)) * 0.1
g = jax.jit(jax.grad(lambda W_, xs: jax.lax.scan(jax.checkpoint(lambda h, xt: (jnp.tanh(h @ W_ + xt), (h**2).sum())), jnp.zeros(32), xs)[1].sum()))
out["scan_remat_grad"] = float(jnp.abs(g(W, x)).sum())
# while loop with random


def body(c):
    i, key, acc = c
    key, sub = jax.random.split(key)
    return i + 1, key, acc + jax.random.uniform(sub, (4,))


out["while_random"] = np.asarray(jax.jit(lambda: jax.lax.while_loop(lambda c: c[0] < 7, body, (0, k, jnp.zeros(4)))[2])()).tolist()
# bf16 matmul + softmax
xb = x.astype(jnp.bfloat16)
out["bf16"] = float(jax.jit(lambda a: jax.nn.softmax(a @ a.T, axis=-1).astype(jnp.float32).sum())(xb))
# pmap
n = jax.device_count()
out["pmap"] = np.asarray(jax.pmap(lambda a: jax.lax.psum(a * 2, "i"), axis_name="i")(jnp.arange(n * 3.).reshape(n, 3))).tolist()
# vmap of a linear solve + cumsum
A = jax.random.normal(k, (4, 5, 5)) + 5 * jnp.eye(5)
out["vmap_solve_cumsum"] = float(jax.jit(jax.vmap(lambda a: jnp.cumsum(jnp.linalg.solve(a, jnp.ones(5)))))(A).sum())
# donation
d = jax.jit(lambda a: a * 3 + 1, donate_argnums=0)
out["donate"] = float(d(jnp.ones(100)).sum())
# shard_map ring reduce
mesh = Mesh(np.array(jax.devices()[:4]), ("x",))


def ring(a):
    perm = [(i, (i + 1) % 4) for i in range(4)]
    return a + jax.lax.ppermute(a, "x", perm)

out["shard_map_ring"] = np.asarray(jax.jit(shard_map(ring, mesh=mesh, in_specs=P("x"), out_specs=P("x")))(jnp.arange(8.))).tolist()
# einsum attention gqa 5-D
q = jax.random.normal(k, (2, 8, 2, 4, 16)); kk = jax.random.normal(k, (2, 8, 2, 16))
out["gqa"] = float(jax.jit(lambda q, kk: jax.nn.softmax(jnp.einsum("btgqd,bsgd->bgqts", q, kk), -1).sum())(q, kk))
print(json.dumps(out))
