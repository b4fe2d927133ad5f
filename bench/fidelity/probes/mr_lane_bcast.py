#!/usr/bin/env python3
"""mr_lane_bcast.py GEN [OUT.jsonl]: a strength-reduced (vector-unit) dot whose vector is
broadcast along the matrix's lanes: 'cab,badc->dab' (JAX's default layouts; the compiler lays
the matrix out d-minor, b in the sublanes, and reduces over the major c, the vector [a,b,c]
spread along the 128 lanes of d) with a, b, c, d swept one at a time around a = 6, b = 8, c = 33,
d = 128 (none of these shapes is in the families corpus, whose program is a = 12). Records the
compiler's dot fusion cycles, tpusim's kernels for JAX's HLO (own mode) and for the compiled
program (--compiled mode). Reuses vector_dot_unit.py's helpers. Run under flock
/tmp/libtpu_probe.lock. Session 29 (issue 30, einsum45); data: data/mr_lane_bcast.jsonl."""
import json, os, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vector_dot_unit as v
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

BASE = dict(a=6, b=8, c=33, d=128)
CASES = [dict(BASE)]
for k, vals in (("a", (3, 24)), ("c", (17, 65, 129)), ("b", (4, 16, 32)), ("d", (256, 200, 512))):
    for x in vals:
        CASES.append(dict(BASE, **{k: x}))
# the vector's lanes (b) filled: a = 2, b up to 128
CASES += [dict(BASE, a=2, b=b) for b in (8, 64, 128)]
SPEC = "cab,badc->dab"
# the same vector spread along the lanes, the sum over the matrix's rows (its second-minor
# dimension, k) instead of a major dimension: 'hk,hkd->hd' (p . v of decode attention)
CASES2 = [("hk,hkd->hd", dict(h=h, k=k, d=d)) for h, k, d in
          ((12, 40, 128), (12, 100, 128), (24, 100, 128), (12, 100, 256), (6, 200, 128), (12, 300, 128))]


def compiled_text(dev, sz, dt, spec=SPEC):
    a, b = spec.split("->")[0].split(",")
    args = [jax.ShapeDtypeStruct(v.dims(s, sz), dt, sharding=SingleDeviceSharding(dev)) for s in (a, b)]
    return jax.jit(lambda p, q: jnp.einsum(spec, p, q)).lower(*args).compile().as_text()


def main():
    gen = sys.argv[1]
    out = open(sys.argv[2], "a") if len(sys.argv) > 2 else None
    dts = sys.argv[3].split(",") if len(sys.argv) > 3 else ["bfloat16"]
    dev = topologies.get_topology_desc(platform="tpu", topology_name=v.TOPO[gen]).devices[0]
    for spec, sz in [(SPEC, c) for c in CASES] + CASES2:
        for dname in dts:
            dt = getattr(jnp, dname)
            found, hlo = v.xla(dev, spec, sz, dt)
            own = v.tpusim(hlo, gen)
            comp = v.tpusim(compiled_text(dev, sz, dt, spec), gen)
            rec = dict(gen=gen, spec=spec, sizes=sz, dtype=dname, xla=found, tpusim=own, tpusim_compiled=comp)
            print(gen, sz, dname, "XLA", found, "OWN", own, "COMPILED", comp, flush=True)
            if out:
                out.write(json.dumps(rec) + "\n")
                out.flush()


if __name__ == "__main__":
    main()
