#!/usr/bin/env python3
"""pv_unit.py TOPOLOGY FORM B H K DTYPE: where the XLA TPU compiler (libtpu, compile-only, through
jax.jit as gen.py / gen_families.py compile, so entry layouts are JAX's defaults) runs one-query
attention's p . v: prints the kind (kOutput: the MXU, kLoop: a multiply-reduce on the vector
unit) and estimated cycles of each entry kernel named after the p . v einsum.
FORM: fam   [b,q,h,d] arrays, the scale in the dot's type before the f32 softmax (gen_families attend)
      corp  [b,h,q,d] arrays, the dot converted to f32 then divided by sqrt(d) (gen.py attention)
      mul32 as corp, multiplied by d**-0.5 in f32
      noscale as corp without the scale
      pf32  p = f32 softmax of a parameter, converted
Session 15 finding (docs/compiler.md, "p . v of one query"): an f32 scale between q . k and the
softmax with more than one batch element puts p . v on the MXU on v4/v5e/v5p; otherwise kLoop.
Note: tpu_compile.py on the HLO text lets the compiler choose entry layouts and answers
differently for these programs (e.g. families attn_b8q1k77h8kv8d128_bf16: kOutput there,
kLoop through jax.jit as stored in families/compiled)."""
import os, re, sys
# this folder's libtpu.py would shadow the libtpu package jax loads
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

topo_name, form, b, h, k, dname = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
dt, d, F32 = getattr(jnp, dname), 128, jnp.float32
dev = topologies.get_topology_desc(platform="tpu", topology_name=topo_name).devices[0]


def pv(p, v):
    return jnp.einsum("bhqk,bhkd->bhqd", p, v)


if form == "fam":
    def f(q, kk, v):
        s = jnp.einsum("bqhd,bkhd->bhqk", q, kk) * (d ** -0.5)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s.astype(F32), -1).astype(dt), v)
    shapes = [(b, 1, h, d), (b, k, h, d), (b, k, h, d)]
elif form == "pf32":
    def f(s, v):
        return pv(jax.nn.softmax(s.astype(F32), -1).astype(dt), v)
    shapes = [(b, h, 1, k), (b, h, k, d)]
else:
    scale = {"corp": lambda s: s / (d ** 0.5), "mul32": lambda s: s * (d ** -0.5), "noscale": lambda s: s}[form]
    def f(q, kk, v):
        s = scale(jnp.einsum("bhqd,bhkd->bhqk", q, kk).astype(F32))
        return pv(jax.nn.softmax(s, -1).astype(dt), v)
    shapes = [(b, h, 1, d), (b, h, k, d), (b, h, k, d)]
args = [jax.ShapeDtypeStruct(s, dt, sharding=SingleDeviceSharding(dev)) for s in shapes]
text = jax.jit(f).lower(*args).compile().as_text()
for line in text[text.rfind("\nENTRY"):].split("\n"):
    kind, cyc, name = (re.search(p, line) for p in (r"kind=(k\w+)", r'"estimated_cycles":"(\d+)"', r'op_name="([^"]*)"'))
    if kind and name and name.group(1).endswith(("bhqk,bhkd->bhqd/dot_general", "bhqk,bkhd->bqhd/dot_general")):
        print(topo_name, form, b, h, k, dname, kind.group(1), cyc.group(1) if cyc else None)
