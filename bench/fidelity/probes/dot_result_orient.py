#!/usr/bin/env python3
"""dot_result_orient.py > data/dot_result_orient.jsonl: two-operand einsums whose one operand
has two free dimensions (one small, 'c') and the other one ('d'), the result laid out with the
single-free operand's dimension in the lanes and the other's large free dimension in the
sublanes (the swapped orientation of relayout.c dot_result_relaid), compiled through jax.jit
off the corpus. For each case and generation: the compiler's entry kernels (name, kind,
estimated cycles), whether a relayout copy follows the dot's kernel, the convolution's
dim_labels, and tpusim's step cycles.

Question (session 19, ein2): when does the compiler write such a dot's result in the
program's layout, and when in its natural orientation (the two-free operand's last free
dimension in the lanes) followed by a copy? (einsum_acb_ad_bcd_a512_b256_c3_d512_bf16, tune.)
Run: GENS=v5e (default; a comma list) [FIRST=n] python3 dot_result_orient.py. Data (v5e):
data/dot_result_orient.before_v5e.jsonl (tpusim at the session's start, no orientation rule)
and data/dot_result_orient.jsonl (with relayout.c's rule). Answer: the compiler's convolution
writes the rhs's free dimension in the lanes whenever an operand has several free dimensions
(10 of 10 with the lhs's in the result's lanes copied, 0 of 3 with the rhs's; the 4 controls
with one free dimension each, no copy)."""
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
GENS = os.environ.get("GENS", "v5e").split(",")
# (einsum, {letter: size}, dtype): sizes not in the families corpus
CASES = [
    ("acb,ad->bcd", dict(a=256, b=384, c=5, d=256), "bfloat16"),
    ("acb,ad->bcd", dict(a=384, b=128, c=3, d=640), "bfloat16"),
    ("acb,ad->bcd", dict(a=256, b=512, c=12, d=384), "bfloat16"),
    ("acb,ad->bcd", dict(a=128, b=256, c=33, d=512), "bfloat16"),
    ("acb,ad->bcd", dict(a=256, b=1024, c=7, d=128), "bfloat16"),
    ("acb,ad->bcd", dict(a=256, b=256, c=3, d=256), "float32"),
    ("abc,ad->cbd", dict(a=256, b=5, c=384, d=256), "bfloat16"),
    ("ad,acb->bcd", dict(a=256, b=384, c=5, d=256), "bfloat16"),
    ("cab,ad->bcd", dict(a=256, b=384, c=4, d=384), "bfloat16"),
    ("acb,da->bcd", dict(a=256, b=384, c=6, d=256), "bfloat16"),
    # the two-free operand the dot's lhs, the result's lanes its free dimension
    ("acb,ad->cdb", dict(a=256, b=384, c=5, d=256), "bfloat16"),
    ("ad,acb->cdb", dict(a=256, b=384, c=5, d=256), "bfloat16"),
    ("ad,acb->dcb", dict(a=256, b=384, c=5, d=256), "bfloat16"),
    # controls: one free dimension each (a plain and a batched matrix product), swapped
    ("ab,ac->cb", dict(a=256, b=384, c=256), "bfloat16"),
    ("ac,ab->cb", dict(a=256, b=384, c=256), "bfloat16"),
    ("nab,nac->ncb", dict(n=4, a=256, b=384, c=256), "bfloat16"),
    ("nac,nab->ncb", dict(n=4, a=256, b=384, c=256), "bfloat16"),
]


def operands(spec, sz):
    return [tuple(sz[ch] for ch in s) for s in spec.split("->")[0].split(",")]


def tpusim_run(text, chip):
    with tempfile.TemporaryDirectory() as d:
        src, rep = os.path.join(d, "t.hlo"), os.path.join(d, "r.json")
        open(src, "w").write(text)
        p = subprocess.run([TPUSIM, "run", src, "--mode", "timing", "--chip", chip, "--report", rep, "--quiet"],
                           capture_output=True, text=True)
        if p.returncode:
            return None, None
        r = json.load(open(rep))
        ks = r.get("kernels") or r.get("step", {}).get("kernels") or []
        return r["step"]["cycles"], len(ks) if isinstance(ks, list) else None


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
        kernels = []
        for line in entry.split("\n"):
            m = re.search(r'"estimated_cycles":"(\d+)"', line)
            if not m:
                continue
            kind = re.search(r"kind=(k\w+)", line)
            name = re.search(r"%([\w.\-]+) = (\w+\[[\d,]*\]\{[^}]*\})", line)
            kernels.append([name.group(1) if name else "?", name.group(2) if name else "", kind.group(1) if kind else "",
                            int(m.group(1))])
        labels = re.findall(r"dim_labels=(\S+?),", text)
        root = re.search(r"ROOT %\S+ = (\w+\[[\d,]*\]\{[^}]*\})", entry)
        cyc, nk = tpusim_run(hlo, PRESET[gen])
        dot = re.search(r"\bdot\((\w+)\.\d+, (\w+)\.\d+\)", hlo)
        row = dict(einsum=spec, dot_operands=dot.groups() if dot else None, sizes=sz, dtype=dname, gen=gen, kernels=kernels, dim_labels=labels,
                   result=root.group(1) if root else None, copy_after=any(k[0].startswith("copy") for k in kernels),
                   compiler_cycles=sum(k[3] for k in kernels), tpusim=cyc, tpusim_kernels=nk)
        print(json.dumps(row), flush=True)
