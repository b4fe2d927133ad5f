#!/usr/bin/env python3
"""probe_windowed.py: when the XLA TPU compiler runs a dot's all-gather or reduce-scatter as a
windowed einsum (a loop of collective-permutes), read from its compiled programs.

Run by hand with libtpu (`pip install "jax[tpu]"`; compile-only, no TPU needed):

    python3 bench/spmd/probe_windowed.py [TOPOLOGY ...]

For each slice it compiles `x @ w` (w split along its contraction, to be gathered) and
`x.T @ dy` (partial sums over the split batch, reduce-scattered into w's split) with the split
over every device or over part of them, and prints how many collective-permutes and
all-gathers / reduce-scatters the compiled program has. tpusim's chip field
`windowed_einsum_min_chips` and src/compile/spmd/spmd_window.c follow what it prints
(docs/spmd.md, "Windowed einsum").
"""
import re
import sys

import numpy as np


def main():
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding as NS, PartitionSpec as P

    topos = sys.argv[1:] or ["v5e:2x2", "v5e:2x4", "v5e:4x4", "v5p:2x2x2", "v4:2x2x1", "v4:2x2x2", "v6e:2x4"]
    B, d, F = 8192, 1024, 4096
    for name in topos:
        devs = np.array(topologies.get_topology_desc(platform="tpu", topology_name=name).devices)
        n = devs.size
        cases = [("gather, every device", (n,), ("f",), "ag", [P("f"), P("f")], None),
                 ("reduce-scatter, every device", (n,), ("f",), "rs", [P("f"), P("f")], P("f"))]
        if n >= 4:
            cases += [(f"gather over {n // 2} of {n}", (2, n // 2), ("d", "f"), "ag", [P(("d", "f")), P("f")], None),
                      (f"reduce-scatter over {n // 2} of {n}", (2, n // 2), ("d", "f"), "rs",
                       [P(("d", "f")), P(("d", "f"))], P("f"))]
        for what, shape, axes, kind, specs, out in cases:
            mesh = Mesh(devs.reshape(shape), axes)
            if kind == "ag":
                f, shapes = (lambda x, w: x @ w), [(B, d), (d, F)]
            else:
                f, shapes = (lambda x, dy: x.T @ dy), [(B, d), (B, F)]
            sds = [jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=NS(mesh, sp)) for s, sp in zip(shapes, specs)]
            kw = {"out_shardings": NS(mesh, out)} if out is not None else {}
            t = jax.jit(f, **kw).lower(*sds).compile().as_text()
            cp = len(re.findall(r" collective-permute(-start)?\(", t))
            other = len(re.findall(r"all-gather" if kind == "ag" else r"reduce-scatter|all-reduce", t))
            print(f"{name:10s} {n:3d} devices  {what:32s} collective-permutes {cp:2d}  "
                  f"{'all-gather' if kind == 'ag' else 'reduce-scatter/all-reduce'} mentions {other}", flush=True)


if __name__ == "__main__":
    main()
