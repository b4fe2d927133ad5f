#!/usr/bin/env python3
"""probe_ring4.py [ARG ...]: when does the XLA TPU compiler run a reduce-scatter round a ring of
4 devices (one axis of a 2-D mesh) as a windowed einsum? libtpu compile-only
(ALLOW_MULTIPLE_LIBTPU_LOAD=1 where others use libtpu at the same time).

Megatron's second matmul with sequence parallelism: h[b,s,f] split (data, -, model) times
w[f,d] split (model, -), the result kept split (data, model, -): partial sums over the model
axis of 4 reduce-scattered along s. The dot's time over the collective's, C/M at tpusim's prices
(spmd_window.c: C at the chip's peak, M three blocks round a ring of links, half each way), is
f * ici_bw_per_link / (1.5 * peak per device); f is swept. Prints the program's permutes,
all-gathers, reduce-scatter mentions and all-reduces per case. Read (libtpu 0.0.42.1):
v5e 2x4 (data 2): no loop at f = 4096 (C/M 0.62), a loop of 5 permutes from 4608 (0.70);
v5e 4x4 (4 x 4): none at 4096, loops from 6144; v6e 4x4: none at 8192 (0.54), loops at 12288
(0.80); v4 2x2x2 (16 cores, 4 x 4): loops from 4096 (0.89); v4 2x2x1 (8 cores, 2 x 4) and v5p
2x2x2, 2x2x4: never up to f = 12288 / 32768 (C/M 2.7 / 3.2+).

    python3 bench/spmd/probe_ring4.py v5e:2x4,2x4,8,1024,2048,4096 ...   (topology,mesh,b,s,d,f)
"""
import re
import sys
import time

import numpy as np


def run(topo, shape, b, s, d, f):
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding as NS, PartitionSpec as P
    td = topologies.get_topology_desc(platform="tpu", topology_name=topo)
    m = Mesh(np.array(td.devices).reshape(shape), ("data", "model"))
    sds = [jax.ShapeDtypeStruct((b, s, f), jnp.bfloat16, sharding=NS(m, P("data", None, "model"))),
           jax.ShapeDtypeStruct((f, d), jnp.bfloat16, sharding=NS(m, P("model", None)))]
    with jax.set_mesh(m):
        t = jax.jit(lambda h, w: jnp.einsum("bsf,fd->bsd", h, w),
                    out_shardings=NS(m, P("data", "model", None))).lower(*sds).compile().as_text()
    return (f"permutes {len(re.findall(r' collective-permute(?:-start)?[(]', t))} "
            f"all-gathers {len(re.findall(r' all-gather(?:-start)?[(]', t))} "
            f"reduce-scatter mentions {len(re.findall(r'reduce-scatter', t))} "
            f"all-reduces {len(re.findall(r' all-reduce(?:-start)?[(]', t))}")


def main():
    args = sys.argv[1:]
    if not args:
        args = [f"{t},{m},{b},{s},2048,{f}" for t, m, b, s, fs in [
            ("v5e:2x4", "2x4", 8, 1024, (4096, 4608, 6144, 8192)), ("v5e:4x4", "4x4", 8, 2048, (4096, 6144, 8192)),
            ("v6e:4x4", "4x4", 8, 2048, (8192, 12288)), ("v4:2x2x2", "4x4", 16, 1024, (4096, 8192)),
            ("v4:2x2x1", "2x4", 8, 1024, (8192, 12288)), ("v5p:2x2x2", "2x4", 8, 1024, (8192, 12288)),
            ("v5p:2x2x4", "4x4", 16, 1024, (8192, 32768))] for f in fs]
    for a in args:
        topo, mesh, b, s, d, f = a.split(",")
        t0 = time.time()
        try:
            r = run(topo, tuple(map(int, mesh.split("x"))), int(b), int(s), int(d), int(f))
        except Exception as e:  # a slice or mesh libtpu refuses: say so and go on
            r = "error: " + str(e).splitlines()[0][:160]
        print(a, r, f"({time.time() - t0:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
