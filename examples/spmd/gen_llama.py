#!/usr/bin/env python3
"""gen_llama.py LAYERS [DEVICES]: JAX's lowered HLO (not partitioned) of a training step of a
Llama-2-70B-shaped decoder (d_model 8192, 64 heads of 128, SwiGLU-style MLP of 28,672,
sequence 2048, one sequence per device) with its weights and batch sharded FSDP-style
over a mesh ("fsdp",) of DEVICES devices (default 16), for tpusim's partitioner:

    python3 examples/spmd/gen_llama.py 2 > examples/spmd/llama70b_2layers.hlo

Nothing is allocated (jax.ShapeDtypeStruct); jax 0.10.2."""
import os, sys
NDEV = int(sys.argv[2]) if len(sys.argv) > 2 else 16
os.environ["XLA_FLAGS"]=f"--xla_force_host_platform_device_count={NDEV}"
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P, NamedSharding
bf = jnp.bfloat16
L, D, F, H, S, B = int(sys.argv[1]), 8192, 28672, 64, 2048, NDEV
mesh = Mesh(np.array(jax.devices()), ("fsdp",))
hd = D // H
def layer(x, p):
    wq, wk, wv, wo, w1, w2 = p
    b, s, d = x.shape
    q = (x @ wq).reshape(b, s, H, hd); k = (x @ wk).reshape(b, s, H, hd); v = (x @ wv).reshape(b, s, H, hd)
    a = jax.nn.softmax(jnp.einsum("bshd,bthd->bhst", q, k) * bf(1 / np.sqrt(hd)), axis=-1).astype(bf)
    o = jnp.einsum("bhst,bthd->bshd", a, v).reshape(b, s, d) @ wo
    x = x + o
    return x + jax.nn.silu(x @ w1) @ w2, None
def loss(params, x):
    y, _ = jax.lax.scan(layer, x, params)
    return jnp.mean(y.astype(jnp.float32) ** 2)
def step(params, x):
    l, g = jax.value_and_grad(loss)(params, x)
    return l, jax.tree.map(lambda p, g: p - 1e-3 * g.astype(p.dtype), params, g)
bf = jnp.bfloat16
shapes = [(L, D, D)] * 4 + [(L, D, F), (L, F, D)]
pspec = NamedSharding(mesh, P(None, "fsdp", None))
params = [jax.ShapeDtypeStruct(s, bf, sharding=pspec) for s in shapes]
x = jax.ShapeDtypeStruct((B, S, D), bf, sharding=NamedSharding(mesh, P("fsdp", None, None)))
print(jax.jit(step).lower(params, x).as_text(dialect="hlo"))
