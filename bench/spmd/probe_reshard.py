"""probe_reshard.py DIR: reshards where one mesh axis moves to another dimension (to the
major end of its split, or leaving a dimension that keeps nothing), compiled by libtpu
(compile-only): prints the compiler's collective kinds and writes JAX's program (prog.hlo),
the compiler's final one (tpu.hlo) and meta.json to DIR/NAME/, for
`python3 bench/spmd_compare.py DIR` (docs/spmd.md, resharding). Not the corpus: a check of
the rule on programs it was not read from."""
import os, re, sys, json
import numpy as np
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
OUT = sys.argv[1]
CASES = [
    ("v5e:2x4", (2, 4), ("a", "b"), (4096, 4096), ("a", "b"), (None, ("a", "b"))),
    ("v5e:4x4", (4, 4), ("a", "b"), (8192, 4096), ("b", "a"), (None, ("b", "a"))),
    ("v6e:2x4", (2, 4), ("a", "b"), (8192, 8192), ("b", "a"), (("b", "a"), None)),
    ("v5p:2x2x2", (2, 2, 2), ("a", "b", "c"), (4096, 4096), (("a", "b"), "c"), ("a", ("b", "c"))),
    ("v5e:4x8", (4, 8), ("a", "b"), (8192, 8192), ("a", "b"), (("a", "b"), None)),
    ("v4:2x2x2", (4, 4), ("a", "b"), (4096, 8192), ("b", "a"), (("b", "a"), None)),
]
for topo, shape, axes, (r, c), src, dst in CASES:
    tag = lambda sp: "".join("_" if s is None else "".join(s) if isinstance(s, tuple) else s for s in sp)
    name = f"rs_{topo.replace(':', '_')}_{tag(src)}_to_{tag(dst)}"
    td = topologies.get_topology_desc(platform="tpu", topology_name=topo)
    m = Mesh(np.array(td.devices).reshape(shape), axes)
    sds = jax.ShapeDtypeStruct((r, c), jnp.bfloat16, sharding=NamedSharding(m, P(*src)))
    with jax.set_mesh(m):
        lo = jax.jit(lambda x: jnp.tanh(x) * 2, out_shardings=NamedSharding(m, P(*dst))).lower(sds)
        comp = lo.compile()
    t = comp.as_text()
    kinds = sorted(set(k for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
                       if re.search(" " + k + r"(-start)?\(", t)))
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "prog.hlo"), "w").write(lo.as_text(dialect="hlo"))
    open(os.path.join(d, "tpu.hlo"), "w").write(t)
    json.dump({"topology": topo, "chip": "v4:core" if topo.startswith("v4") else topo.split(":")[0],
               "devices": int(np.prod(shape)), "collectives": kinds},
              open(os.path.join(d, "meta.json"), "w"))
    print(name, kinds, flush=True)
