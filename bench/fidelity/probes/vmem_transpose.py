#!/usr/bin/env python3
"""vmem_transpose.py > data/vmem_transpose.jsonl: the relayout copy that follows a dot whose
result the compiler writes in the rhs's orientation (relayout.c dot_result_relaid), its operand
kept in VMEM (S(1)) where the chip allows, and the copy moving the lanes' dimension into the
program's layout. Einsums 'acb,ad->bcd' (and f32, and other letters' orders) at sizes off the
families corpus, compiled through jax.jit for one device of each generation. For each case and
generation: the compiler's entry kernels (name, result shape with layout and memory space,
estimated cycles), the copy's operand's memory space, and tpusim's own compilation of the same
HLO: its per-op cycles (the relayout copy and the dot).

Question (session 20, ein3): what does the XLA TPU compiler charge a copy that moves the lanes
out of VMEM into HBM? tpusim charged it a read from VMEM plus the transpose's per-element cost
(chip transpose_bytes) on top of the write and the stream pass.
Run: GENS=v4,v5e,v5p,v6e (default) TPUSIM=build/tpusim python3 vmem_transpose.py
Data: data/vmem_transpose.before.jsonl (tpusim with relayout.c's dot_result_relaid, the copy
timed as a relayout: a read at vmem_read_cost, transpose_bytes and the stream pass) and
data/vmem_transpose.jsonl (with copy_kind.c tpu__vmem_transpose_op). Answer: v5e and v6e keep
the operand in VMEM (S(1)) and charge a fixed time per tile of the result, whatever the dtype:
v5e 13.28 a tile (bf16[512,12,384] 2,304 tiles 30,588 cycles, bf16[256,33,512] 4,224 tiles
56,078, f32[512,6,384] 1,152 tiles 15,294), v6e 10.10 (23,280 / 42,680 / 11,640); smaller copies
0-2,550 cycles more (about the kernel start); results in tiles of 2 or 4 rows 12.04 (v5e) and
8.67 (v6e) a tile. tpusim's copies on v5e/v6e: +71..+118 % -> -9..+10 % (whole tiles), small
tiles -36..+28 % -> +2..+29 %. v4 keeps the operand in CMEM (S(3)), 16.05 a tile (tpusim reads
HBM there: +14..+35 %, unchanged); v5p in HBM (tpusim -25..+9 %, unchanged)."""
import json, os, re, subprocess, sys, tempfile
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

HERE = os.path.dirname(os.path.abspath(__file__))
TPUSIM = os.environ.get("TPUSIM", os.path.join(HERE, "..", "..", "..", "build", "tpusim"))
TOPO = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
PRESET = {"v4": "v4:core", "v5e": "v5e", "v5p": "v5p", "v6e": "v6e"}
GENS = os.environ.get("GENS", "v4,v5e,v5p,v6e").split(",")
# (einsum, {letter: size}, dtype): sizes not in the families corpus
CASES = [
    ("acb,ad->bcd", dict(a=256, b=384, c=5, d=256), "bfloat16"),
    ("acb,ad->bcd", dict(a=384, b=128, c=3, d=640), "bfloat16"),
    ("acb,ad->bcd", dict(a=256, b=512, c=12, d=384), "bfloat16"),
    ("acb,ad->bcd", dict(a=128, b=256, c=33, d=512), "bfloat16"),
    ("acb,ad->bcd", dict(a=256, b=1024, c=7, d=128), "bfloat16"),
    ("acb,ad->bcd", dict(a=256, b=256, c=2, d=1024), "bfloat16"),
    ("acb,ad->bcd", dict(a=512, b=640, c=4, d=768), "bfloat16"),
    ("acb,ad->bcd", dict(a=128, b=128, c=16, d=256), "bfloat16"),
    ("acb,ad->bcd", dict(a=256, b=256, c=3, d=256), "float32"),
    ("acb,ad->bcd", dict(a=256, b=512, c=6, d=384), "float32"),
    ("acb,ad->bcd", dict(a=128, b=1024, c=4, d=128), "float32"),
    ("acb,da->bcd", dict(a=256, b=384, c=6, d=256), "bfloat16"),
    ("abc,ad->cbd", dict(a=256, b=9, c=512, d=384), "bfloat16"),
]


def operands(spec, sz):
    return [tuple(sz[ch] for ch in s) for s in spec.split("->")[0].split(",")]


def tpusim_ops(text, chip):
    with tempfile.TemporaryDirectory() as d:
        src, rep = os.path.join(d, "t.hlo"), os.path.join(d, "r.json")
        open(src, "w").write(text)
        p = subprocess.run([TPUSIM, "run", src, "--mode", "timing", "--chip", chip, "--report", rep, "--quiet",
                            "--no-cache"], capture_output=True, text=True)
        if p.returncode:
            return None, None
        r = json.load(open(rep))
        return r["step"]["cycles"], [[o["name"], o["kind"], o["cycles"]] for o in r["ops"]]


for spec, sz, dname in CASES[int(os.environ.get("FIRST", "0")):]:
    dt = getattr(jnp, dname)
    f = lambda x, y, spec=spec: jnp.einsum(spec, x, y)
    for gen in GENS:
        dev = topologies.get_topology_desc(platform="tpu", topology_name=TOPO[gen]).devices[0]
        args = [jax.ShapeDtypeStruct(s, dt, sharding=SingleDeviceSharding(dev)) for s in operands(spec, sz)]
        low = jax.jit(f).lower(*args)
        hlo = low.as_text(dialect="hlo")
        text = low.compile().as_text()
        entry = text[text.rfind("\nENTRY"):]
        kernels, shapes = [], {}
        for line in entry.split("\n"):
            name = re.search(r"%([\w.\-]+) = (\w+\[[\d,]*\]\{[^}]*\})", line)
            if name:
                shapes[name.group(1)] = name.group(2)
            m = re.search(r'"estimated_cycles":"(\d+)"', line)
            if not m:
                continue
            kind = re.search(r"kind=(k\w+)", line)
            opnd = re.search(r"copy\(%([\w.\-]+)\)", line)
            kernels.append([name.group(1) if name else "?", name.group(2) if name else "", kind.group(1) if kind else "",
                            int(m.group(1)), shapes.get(opnd.group(1)) if opnd else None])
        cyc, ops = tpusim_ops(hlo, PRESET[gen])
        row = dict(einsum=spec, sizes=sz, dtype=dname, gen=gen, kernels=kernels,
                   compiler_cycles=sum(k[3] for k in kernels), tpusim=cyc, tpusim_ops=ops)
        print(json.dumps(row), flush=True)
