#!/usr/bin/env python3
"""vector_dot_unit.py GEN [OUT.jsonl]: which unit the XLA TPU compiler (libtpu, compile-only,
through jax.jit as gen_families.py compiles, so entry layouts are JAX's defaults) runs a
vector-shaped einsum on -- a kLoop multiply_reduce fusion on the vector unit, or a kOutput
(convolution) fusion on the MXU -- with a size-1 dimension in different roles (contracting,
free of the matrix, free of the vector, batch), sizes about the 64 threshold, bf16 and f32;
and tpusim's decision for the same program (its kernel kind for the dot). None of these
programs is in the families corpus (other letters' roles and sizes). Run one generation per
process (GEN: v4, v5e, v5p or v6e), under flock /tmp/libtpu_probe.lock. Writes one JSON line
per case: spec, sizes, dtype, gen, xla kind, xla fusion name, xla cycles, tpusim kind.
Session 28 (issue 30); data: data/vector_dot_unit.jsonl, docs/compiler.md."""
import json, os, re, subprocess, sys, tempfile
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

HERE = os.path.dirname(os.path.abspath(__file__))
TPUSIM = os.environ.get("TPUSIM", os.path.join(HERE, "..", "..", "..", "build", "tpusim"))
TOPO = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
PRESET = {"v4": "v4:core"}

# (spec, sizes): x batch, k contracting, f/g free of the matrix, v free of the vector
CASES = []
for fg in ([100, 1], [1, 100], [80, 1], [200, 1], [40, 1], [1, 40], [100, 2], [100, 4], [64, 1], [72, 1]):
    CASES.append(("xk,xfgk->xfg", dict(x=6, k=96, f=fg[0], g=fg[1])))        # size-1 free dim of the matrix
for f in (48, 80, 200):
    CASES.append(("xk,xfk->xf", dict(x=6, k=96, f=f)))                       # no size-1 dim (control)
    CASES.append(("xk,xfk->xf", dict(x=1, k=96, f=f)))                       # size-1 batch
    CASES.append(("xvk,xfk->xvf", dict(x=6, v=1, k=96, f=f)))                # size-1 free dim of the vector
    CASES.append(("xkr,xfkr->xf", dict(x=6, k=96, r=1, f=f)))                # size-1 minor contracting dim
    CASES.append(("xrk,xrfk->xf", dict(x=6, k=96, r=1, f=f)))                # size-1 major contracting dim
for s in (48, 80, 150, 300):
    CASES.append(("pqr,rsqp->qs", dict(p=200, q=6, r=1, s=s)))               # 'cab,bdac->ad' with b = 1, other sizes
    CASES.append(("pqr,rsqp->qs", dict(p=200, q=6, r=2, s=s)))               # the same with b = 2


def dims(spec_in, sz):
    return tuple(sz[c] for c in spec_in)


def xla(dev, spec, sz, dt):
    a, b = spec.split("->")[0].split(",")
    args = [jax.ShapeDtypeStruct(dims(s, sz), dt, sharding=SingleDeviceSharding(dev)) for s in (a, b)]
    low = jax.jit(lambda p, q: jnp.einsum(spec, p, q)).lower(*args)
    text = low.compile().as_text()
    found = []
    for line in text[text.rfind("\nENTRY"):].split("\n"):
        kind = re.search(r"kind=(k\w+)", line)
        if not kind or "dot_general" not in line:
            continue
        name = re.match(r"\s*(?:ROOT )?%(\S+) =", line).group(1)
        cyc = re.search(r'"estimated_cycles":"(\d+)"', line)
        found.append((kind.group(1), name, int(cyc.group(1)) if cyc else None))
    return found, low.as_text(dialect="hlo")


def tpusim(text, gen):
    with tempfile.TemporaryDirectory() as d:
        src, rep = os.path.join(d, "p.hlo"), os.path.join(d, "r.json")
        open(src, "w").write(text)
        p = subprocess.run([TPUSIM, "run", src, "--mode", "timing", "--chip", PRESET.get(gen, gen), "--report", rep,
                            "--quiet"], capture_output=True, text=True, env=dict(os.environ, TPUSIM_CACHE="off"))
        if p.returncode:
            return None
        r = json.load(open(rep))
    return [(o["name"], o["kind"], o["cycles"]) for o in r["ops"]]


def main():
    gen = sys.argv[1]
    out = open(sys.argv[2], "a") if len(sys.argv) > 2 else None
    dev = topologies.get_topology_desc(platform="tpu", topology_name=TOPO[gen]).devices[0]
    for spec, sz in CASES:
        for dname in ("bfloat16", "float32"):
            found, hlo = xla(dev, spec, sz, getattr(jnp, dname))
            ops = tpusim(hlo, gen)
            rec = dict(gen=gen, spec=spec, sizes=sz, dtype=dname, xla=found, tpusim=ops)
            print(gen, spec, sz, dname, "XLA", found, "TPUSIM", ops, flush=True)
            if out:
                out.write(json.dumps(rec) + "\n")
                out.flush()


if __name__ == "__main__":
    main()
