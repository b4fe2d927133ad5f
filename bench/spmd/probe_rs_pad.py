"""probe_rs_pad.py [FILTER]: when does the XLA TPU compiler pad an all-reduce-scatter and fix
it up with a collective-permute (the 3-axis meshes of bench/spmd/corpus, docs/spmd.md)? A
weight gradient x^T dy summed over a batch split over (data, fsdp), wanted split as
P(fsdp, tensor) (its rows over fsdp), on meshes data x fsdp x tensor; libtpu compile-only
(ALLOW_MULTIPLE_LIBTPU_LOAD=1 where others use libtpu at the same time). Prints, per case,
the scatter fusion's local operand, its shard count S, the padded shape (or -), the
emitter's span count C and span size (its debug fields; granules of 512 B on v4/v5e, of
32 B on v5p/v6e), the operand's granules T and the collective-permutes of the program."""
import re, sys, time
import numpy as np
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

def run(topo, shape, rows, cols):
    td = topologies.get_topology_desc(platform="tpu", topology_name=topo)
    m = Mesh(np.array(td.devices).reshape(shape), ("data", "fsdp", "tensor"))
    bt = 64 * shape[0] * shape[1]
    def fn(x, dy):
        return jnp.einsum("bd,bf->df", x, dy)
    sds = [jax.ShapeDtypeStruct((bt, rows), jnp.bfloat16, sharding=NamedSharding(m, P(("data", "fsdp"), None))),
           jax.ShapeDtypeStruct((bt, cols), jnp.bfloat16, sharding=NamedSharding(m, P(("data", "fsdp"), "tensor")))]
    with jax.set_mesh(m):
        t = jax.jit(fn, out_shardings=NamedSharding(m, P("fsdp", "tensor"))).lower(*sds).compile().as_text()
    mm = re.search(r"original_shape: (\S+?)\{[^;]*; per_color_shard_counts: (\d+);.*?formatting steps: \((.*?)\)"
                   r"\\nall-reduce-scatter fusion ND: span_size:(\d+)(\S*), shard count:\d+, span_count:(\d+), "
                   r"total_size:\d+\S*, valid_granules:(\d+)", t)
    perms = len(re.findall(r"collective-permute(?:-start)?\(", t))
    if not mm:
        return f"no scatter fusion; permutes {perms}"
    pad = re.search(r"bf16\[([0-9,]+)\]", mm.group(3))
    return (f"local {mm.group(1)} S {mm.group(2)} pad {pad.group(1) if pad else '-'} C {mm.group(6)} "
            f"span {mm.group(4)}{mm.group(5)} T {mm.group(7)} permutes {perms}")

cases = []
for topo, shape in [("v5e:4x8", (2, 4, 4)), ("v5e:4x8", (4, 2, 4)), ("v5e:4x8", (2, 8, 2)), ("v5e:4x4", (1, 4, 4)),
                    ("v5e:8x8", (2, 8, 4)), ("v5e:8x8", (4, 4, 4)), ("v6e:4x4", (2, 2, 4)), ("v6e:4x4", (2, 4, 2)),
                    ("v6e:8x8", (4, 4, 4)), ("v6e:8x8", (2, 8, 4)), ("v5p:2x2x4", (2, 2, 4)), ("v5p:2x2x4", (2, 4, 2)),
                    ("v5p:4x4x4", (4, 4, 4))]:
    for rows, cols in [(2048, 8192), (2048, 16384), (4096, 8192), (4096, 16384)]:
        cases.append((topo, shape, rows, cols))
for rows in (1024, 2048, 3072, 4096, 8192):
    for cols in (4096, 8192, 12288, 16384, 32768):
        cases.append(("v5e:4x8", (2, 4, 4), rows, cols))
sel = sys.argv[1] if len(sys.argv) > 1 else ""
for topo, shape, rows, cols in cases:
    name = f"{topo}_{'x'.join(map(str, shape))}_{rows}x{cols}"
    if sel and sel not in name:
        continue
    t0 = time.time()
    try:
        r = run(topo, shape, rows, cols)
    except Exception as e:
        r = "error: " + str(e).splitlines()[0][:200]
    print(name, r, f"({time.time() - t0:.1f} s)", flush=True)
