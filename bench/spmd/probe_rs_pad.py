"""probe_rs_pad.py [FILTER]: when does the XLA TPU compiler pad an all-reduce-scatter and fix
it up with a collective-permute (the 3-axis meshes of bench/spmd/corpus, docs/spmd.md)? A
weight gradient x^T dy summed over a batch split over (data, fsdp), wanted split as
P(fsdp, tensor) (dimension 0 over fsdp) or P(tensor, fsdp) (dimension 1), on meshes
data x fsdp x tensor; libtpu compile-only. Prints, per case, the pads, permutes, all-reduces
and all-reduce-scatter fusions of the compiled program."""
import os, re, sys, time, json
import numpy as np
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

def run(topo, shape, axes, bt, d, f, out_spec, x_spec, dy_spec):
    td = topologies.get_topology_desc(platform="tpu", topology_name=topo)
    m = Mesh(np.array(td.devices).reshape(shape), axes)
    def fn(x, dy):
        return jnp.einsum("bd,bf->df", x, dy)
    sds = [jax.ShapeDtypeStruct((bt, d), jnp.bfloat16, sharding=NamedSharding(m, P(*x_spec))),
           jax.ShapeDtypeStruct((bt, f), jnp.bfloat16, sharding=NamedSharding(m, P(*dy_spec)))]
    with jax.set_mesh(m):
        c = jax.jit(fn, out_shardings=NamedSharding(m, P(*out_spec))).lower(*sds).compile()
    t = c.as_text()
    pads = re.findall(r"pad\(.*padding=([0-9_x]+)", t)
    perms = re.findall(r"= (\S+) collective-permute(?:-start)?\(", t)
    ars = re.findall(r"= (\S+) all-reduce(?:-start)?\(", t)
    rsf = re.findall(r"%all-reduce-scatter\S* \(input\S*: (\S+)\) -> (\S+)", t)
    return {"pads": pads, "permutes": perms, "all_reduces": ars, "ars_fusions": rsf,
            "rs": len(re.findall(r" reduce-scatter(?:-start)?\(", t))}

cases = []
for topo, shape in [("v5e:4x8", (2, 4, 4)), ("v5e:4x8", (4, 2, 4)), ("v5e:4x8", (2, 8, 2)), ("v5e:4x8", (1, 4, 8)),
                    ("v5e:4x8", (8, 4, 1)), ("v5e:4x4", (1, 4, 4)), ("v5e:4x4", (4, 4, 1)), ("v5p:2x2x4", (2, 4, 2)), ("v5e:8x8", (2, 8, 4)), ("v5e:8x8", (4, 16, 1))]:
    for d in (2048, 4096):
        for dim in (0, 1):
            cases.append((topo, shape, d, dim))
sel = sys.argv[1] if len(sys.argv) > 1 else ""
for topo, shape, d, dim in cases:
    name = f"{topo}_{'x'.join(map(str, shape))}_d{d}_dim{dim}"
    if sel and sel not in name:
        continue
    axes = ("data", "fsdp", "tensor")
    bt = 64 * shape[0] * shape[1]
    f = 4 * d
    if dim == 0:
        out, dys = ("fsdp", "tensor"), (("data", "fsdp"), "tensor")
        rows, cols = d, f
    else:
        out, dys = ("tensor", "fsdp"), (("data", "fsdp"), None)
        rows, cols = d, f
    xs = (("data", "fsdp"), None) if dim == 0 else (("data", "fsdp"), "tensor")
    t0 = time.time()
    try:
        r = run(topo, shape, axes, bt, d, f, out, xs, dys)
    except Exception as e:
        r = {"error": str(e).splitlines()[0][:200]}
    r["s"] = round(time.time() - t0, 1)
    print(name, json.dumps(r), flush=True)
