#!/usr/bin/env python3
"""f32_score_attn.py [GEN ...]: the f32-score attention kernels (q.k^T with the f32 convert, scale,
mask and row max; p.v) as the XLA TPU compiler (libtpu, compile-only, through jax.jit as
gen.py compiles) costs them, against tpusim's unit cycles for the same kernels (DMA = the
dma unit, vector = vpu + eup + xlu), on shapes off the corpora. Question (session 19, llama2):
on v5p do the compiler's cycles fit DMA + vector (added), and on v4/v5e/v6e max(DMA, vector, mxu)?
Prints one JSON line per case (CASES=i,j,... picks cases): the compiler p.v kernel and entry total,
tpusim kernels; data in probes/data/f32_score_attn.jsonl (cases 0,2,3; v5p with main 04:02 build,
v5e/v4 with branch llama build) and f32_score_attn_pv_v5p.jsonl (all 6 cases, v5p, first version)."""
import json, os, re, subprocess, sys, tempfile
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import gen as _gen  # noqa: E402
TPUSIM = os.environ.get("TPUSIM", os.path.join(HERE, "..", "..", "..", "build", "tpusim"))
TOPO = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
PRESET = {"v4": "v4:core"}
F32, BF = jnp.float32, jnp.bfloat16
# (b, h, s, d, causal): none of them a corpus shape (corpus: b1h8s512d64, b4h16s1024d128, b2h32s2048d128,
# b8h12s512d64, b1h32s4096d128; layer_fwd b4s1024 h16 d64, b8s512 h12 d64, b2s2048 h16 d128)
CASES = [(2, 8, 1024, 64, True), (4, 8, 512, 128, True), (2, 12, 1024, 128, False), (1, 16, 2048, 64, True),
         (6, 8, 768, 64, False), (3, 16, 1024, 64, True)]
if os.environ.get("CASES"):
    CASES = [CASES[int(i)] for i in os.environ["CASES"].split(",")]


# the corpus generator's attention (f32 scores, a causal mask by where), as its programs write it
attention = _gen.attention


def which(name):
    if name.endswith("bhqd,bhkd->bhqk/dot_general") or "bhqd,bhkd->bhqk" in name:
        return "qk"
    if "bhqk,bhkd->bhqd" in name:
        return "pv"
    return None


def main():
    gens = sys.argv[1:] or list(TOPO)
    for gen in gens:
        dev = topologies.get_topology_desc(platform="tpu", topology_name=TOPO[gen]).devices[0]
        for b, h, s, d, causal in CASES:
            f = jax.jit(lambda q, k, v, c=causal: attention(q, k, v, c))
            args = [jax.ShapeDtypeStruct((b, h, s, d), BF, sharding=SingleDeviceSharding(dev))] * 3
            low = f.lower(*args)
            text = low.compile().as_text()
            comp, ctotal = {}, 0
            for line in text[text.rfind("\nENTRY"):].split("\n"):
                cyc, name = re.search(r'"estimated_cycles":"(\d+)"', line), re.search(r'op_name="([^"]*)"', line)
                ctotal += int(cyc.group(1)) if cyc else 0
                if cyc and name and which(name.group(1)):
                    comp[which(name.group(1))] = comp.get(which(name.group(1)), 0) + int(cyc.group(1))
            plain = [jax.ShapeDtypeStruct((b, h, s, d), BF)] * 3
            hlo = jax.jit(lambda q, k, v, c=causal: attention(q, k, v, c)).lower(*plain).as_text(dialect="hlo", debug_info=True)
            with tempfile.TemporaryDirectory() as tdir:
                src, rep = os.path.join(tdir, "p.hlo"), os.path.join(tdir, "r.json")
                open(src, "w").write(hlo)
                subprocess.run([TPUSIM, "run", src, "--mode", "timing", "--chip", PRESET.get(gen, gen), "--report", rep,
                                "--quiet"], check=True, env=dict(os.environ, TPUSIM_CACHE="off"))
                r = json.load(open(rep))
            sim = {}
            for o in r["ops"]:
                w = which(o.get("op_name", "") + " " + o.get("fused_ops", ""))
                if w and o.get("kind") != "copy":
                    u = o["unit_cycles"]
                    e = sim.setdefault(w, {"cycles": 0, "dma": 0, "vec": 0, "mxu": 0})
                    e["cycles"] += o["cycles"]
                    e["dma"] += u.get("dma-in", 0) + u.get("dma-out", 0)
                    e["vec"] += u.get("vpu", 0) + u.get("eup", 0) + u.get("xlu", 0)
                    e["mxu"] += u.get("mxu", 0)
            # the compiler fuses q.k^T with the row max and the subtraction (op_name "sub") and the
            # normalisation into p.v: its score chain is its entry total less p.v's kernel
            stotal = sum(o["cycles"] * o.get("count", 1) for o in r["ops"])
            print(json.dumps({"gen": gen, "b": b, "h": h, "s": s, "d": d, "causal": causal,
                              "compiler": {"pv": comp.get("pv"), "total": ctotal},
                              "tpusim": dict(sim, total=stotal)}), flush=True)


if __name__ == "__main__":
    main()
