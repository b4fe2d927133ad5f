#!/usr/bin/env python3
"""mr_narrow_rows.py GEN [OUT.jsonl]: which tile padding a strength-reduced (vector-unit) dot's
multiply_reduce pays, by the dimension it reduces (none of these shapes is in the families
corpus). 'cab,bdac->dc' (b = 1) reduces over the matrix's second-minor dimension a (its rows);
'ab,bdac->dac' (b = 8) reduces over a major dimension and keeps the lanes c and rows a;
'cab,bdac->ad' (b = 1) reduces over the lanes c and keeps a (mr_narrow.py's). Each for a = 2,
4, 8 or c = 200, 256. The compiler's fusion cycles against tpusim's kernels. Reuses
vector_dot_unit.py's helpers. Run under flock /tmp/libtpu_probe.lock. Session 28 (issue 30,
mrnarrow2); data: data/mr_narrow_rows.jsonl."""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vector_dot_unit as v
import jax.numpy as jnp
from jax.experimental import topologies

CASES = ([("cab,bdac->dc", dict(a=a, b=1, c=256, d=96)) for a in (2, 4, 8)] +
         [("ab,bdac->dac", dict(a=8, b=8, c=c, d=24)) for c in (200, 256)] +
         [("ab,bdac->dac", dict(a=a, b=8, c=256, d=24)) for a in (4, 8)] +
         [("cab,bdac->ad", dict(a=4, b=1, c=c, d=96)) for c in (200, 256)])


def main():
    gen = sys.argv[1]
    out = open(sys.argv[2], "a") if len(sys.argv) > 2 else None
    dev = topologies.get_topology_desc(platform="tpu", topology_name=v.TOPO[gen]).devices[0]
    for spec, sz in CASES:
        found, hlo = v.xla(dev, spec, sz, jnp.bfloat16)
        ops = v.tpusim(hlo, gen)
        rec = dict(gen=gen, spec=spec, sizes=sz, dtype="bfloat16", xla=found, tpusim=ops)
        print(gen, spec, sz, "XLA", found, "TPUSIM", ops, flush=True)
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
