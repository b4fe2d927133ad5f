#!/usr/bin/env python3
"""gen_3d.py: JAX's lowered HLO (not partitioned) of a transformer block's training step on
the 3-D mesh of /work/shared/reference ('data', 'fsdp', 'tensor') = 8 x 4 x 4 (128 chips,
a v5p-256 slice): batch over data x fsdp, weights over fsdp (FSDP) and tensor (Megatron).

    python3 examples/spmd/gen_3d.py > examples/spmd/block_3d.hlo

Nothing is allocated (jax.ShapeDtypeStruct); jax 0.10.2."""
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=128"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P, NamedSharding as NS

mesh = Mesh(np.array(jax.devices()).reshape(8, 4, 4), ("data", "fsdp", "tensor"))
B, S, D, H, F = 64, 1024, 2048, 16, 8192
hd = D // H
bf = jnp.bfloat16


def block(p, x):
    wq, wk, wv, wo, w1, w2 = p
    b, s, d = x.shape
    q = (x @ wq).reshape(b, s, H, hd)
    k = (x @ wk).reshape(b, s, H, hd)
    v = (x @ wv).reshape(b, s, H, hd)
    a = jax.nn.softmax(jnp.einsum("bshd,bthd->bhst", q, k) * bf(1 / np.sqrt(hd)), axis=-1).astype(bf)
    x = x + jnp.einsum("bhst,bthd->bshd", a, v).reshape(b, s, d) @ wo
    return x + jax.nn.gelu(x @ w1) @ w2


def step(p, x):
    l, g = jax.value_and_grad(lambda q: jnp.mean(block(q, x).astype(jnp.float32) ** 2))(p)
    return l, [pi - bf(1e-3) * gi for pi, gi in zip(p, g)]


col, row = NS(mesh, P("fsdp", "tensor")), NS(mesh, P("tensor", "fsdp"))
params = [jax.ShapeDtypeStruct(s, bf, sharding=h) for s, h in
          (((D, D), col), ((D, D), col), ((D, D), col), ((D, D), row), ((D, F), col), ((F, D), row))]
x = jax.ShapeDtypeStruct((B, S, D), bf, sharding=NS(mesh, P(("data", "fsdp"), None, None)))
print(jax.jit(step).lower(params, x).as_text(dialect="hlo"))
