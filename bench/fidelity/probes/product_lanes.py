#!/usr/bin/env python3
"""product_lanes.py [TPUSIM_OLD] > data/product_lanes.jsonl: strength-reduced dots (a vector
product: the result only batch dimensions, or a vector operand) whose two operands are both
transposed into the product, compiled through jax.jit (entry layouts JAX's defaults, which the
XLA TPU compiler lays out least padded), off the corpus. For each case and generation: the
compiler's entry kernels (kind, estimated cycles) and whether its multiply-reduce fusion holds
a copy that moves the lanes, and tpusim's step cycles (this build, and TPUSIM_OLD where given).

Question (session 19, ein): where both operands' lane dimensions land on the same dimension of
the product, does the compiler's kernel move lanes (a transpose) or only shuffle tiles? The
rule (stream_cost.c product_layout_transpose): the product lies in one operand's layout; another
operand whose lane dimension lands on the product's lanes is no transpose."""
import json, os, re, subprocess, sys, tempfile
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

HERE = os.path.dirname(os.path.abspath(__file__))
TPUSIM = os.environ.get("TPUSIM", os.path.join(HERE, "..", "..", "..", "build", "tpusim"))
OLD = sys.argv[1] if len(sys.argv) > 1 else None
TOPO = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
PRESET = {"v4": "v4:core", "v5e": "v5e", "v5p": "v5p", "v6e": "v6e"}
# (einsum, {letter: size}, dtype): sizes not in the families corpus
CASES = [
    ("badc,adbc->ba", dict(a=16, b=2, c=32, d=256), "bfloat16"),
    ("badc,adbc->ba", dict(a=4, b=8, c=8, d=1024), "bfloat16"),
    ("badc,adbc->ba", dict(a=8, b=8, c=24, d=384), "float32"),
    ("bacd,cdab->ab", dict(a=6, b=4, c=16, d=640), "bfloat16"),
    ("abdc,dbac->ab", dict(a=3, b=16, c=8, d=768), "bfloat16"),
    ("cadb,bcda->ab", dict(a=12, b=2, c=40, d=256), "float32"),
]


def operands(spec, sz):
    ins = spec.split("->")[0].split(",")
    return [tuple(sz[ch] for ch in s) for s in ins]


def tpusim_cycles(binary, text, chip):
    with tempfile.TemporaryDirectory() as d:
        src, rep = os.path.join(d, "t.hlo"), os.path.join(d, "r.json")
        open(src, "w").write(text)
        p = subprocess.run([binary, "run", src, "--mode", "timing", "--chip", chip, "--report", rep, "--quiet"],
                           capture_output=True, text=True)
        return json.load(open(rep))["step"]["cycles"] if p.returncode == 0 else None


for spec, sz, dname in CASES:
    dt = getattr(jnp, dname)
    f = lambda x, y, spec=spec: jnp.einsum(spec, x, y)
    for gen, topo in TOPO.items():
        dev = topologies.get_topology_desc(platform="tpu", topology_name=topo).devices[0]
        args = [jax.ShapeDtypeStruct(s, dt, sharding=SingleDeviceSharding(dev)) for s in operands(spec, sz)]
        low = jax.jit(f).lower(*args)
        hlo = low.as_text(dialect="hlo")
        text = low.compile().as_text()
        entry = text[text.rfind("\nENTRY"):]
        kernels, total = [], 0
        for line in entry.split("\n"):
            m = re.search(r'"estimated_cycles":"(\d+)"', line)
            if not m:
                continue
            kind = re.search(r"kind=(k\w+)", line)
            name = re.search(r"%([\w.\-]+) = ", line)
            kernels.append([name.group(1) if name else "?", kind.group(1) if kind else "", int(m.group(1))])
            total += int(m.group(1))
        # copies inside fusions: does any change the minor (lane) dimension?
        lane_moves = 0
        for m in re.finditer(r"= \w+\[[\d,]*\]\{(\d+)[^}]*\} copy\(%([\w.\-]+)\)", text):
            src = re.search(r"%" + re.escape(m.group(2)) + r" = \w+\[[\d,]*\]\{(\d+)", text)
            if src and src.group(1) != m.group(1):
                lane_moves += 1
        row = dict(einsum=spec, sizes=sz, dtype=dname, gen=gen, compiler_cycles=total, kernels=kernels,
                   lane_moving_copies=lane_moves, tpusim=tpusim_cycles(TPUSIM, hlo, PRESET[gen]))
        if OLD:
            row["tpusim_old"] = tpusim_cycles(OLD, hlo, PRESET[gen])
        print(json.dumps(row), flush=True)
