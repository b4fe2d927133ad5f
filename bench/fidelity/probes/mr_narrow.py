#!/usr/bin/env python3
"""mr_narrow.py GEN [OUT.jsonl]: 'cab,bdac->ad' (b = 1) multiply_reduce kernels with a narrow
output ([a, d], a of 128 lanes) about the corpus's a4_c256_d96, other a, c and d (none in the
families corpus); the compiler's kLoop fusion cycles (and its copy) against tpusim's kernels.
Reuses vector_dot_unit.py's compile and tpusim helpers. Run under flock /tmp/libtpu_probe.lock.
Session 28 (issue 30, mrnarrow); data: data/mr_narrow.jsonl."""
import json, os, re, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vector_dot_unit as v
import jax.numpy as jnp
from jax.experimental import topologies

CASES = [dict(a=a, b=1, c=c, d=d) for a, c, d in
         [(2, 256, 96), (8, 256, 96), (16, 256, 96), (4, 256, 64), (4, 256, 160), (4, 128, 96),
          (4, 512, 96), (4, 200, 96), (6, 200, 80), (6, 256, 80)]]


def main():
    gen = sys.argv[1]
    out = open(sys.argv[2], "a") if len(sys.argv) > 2 else None
    dev = topologies.get_topology_desc(platform="tpu", topology_name=v.TOPO[gen]).devices[0]
    for sz in CASES:
        found, hlo = v.xla(dev, "cab,bdac->ad", sz, jnp.bfloat16)
        ops = v.tpusim(hlo, gen)
        rec = dict(gen=gen, spec="cab,bdac->ad", sizes=sz, dtype="bfloat16", xla=found, tpusim=ops)
        print(gen, sz, "XLA", found, "TPUSIM", ops, flush=True)
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
