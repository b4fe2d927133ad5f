#!/usr/bin/env python3
"""gconv_copies.py [CHIPS] (session 19, gconv; needs libtpu, compile-only): the XLA TPU compiler's
layout copies around a grouped convolution whose input it lays out with W in the lanes. For each
(B, H, C, G, k, dtype) below (shapes off the families corpus), NHWC x HWIO, SAME,
feature_group_count G, as HLO text of the corpus's form (entry layouts left to the compiler,
bench/fidelity/probes/libtpu.py compile_hlo), one JSON line per generation with its top-level
ops (name, shape with layout, estimated_cycles), as committed in data/gconv_copies.jsonl."""
import json, os, re, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import libtpu

CASES = [(8, H, C, G, 3, dt) for (H, C, G) in ((20, 16, 2), (24, 16, 4), (40, 16, 2)) for dt in ("bf16", "f32")] + [
    (8, H, C, G, 3, "bf16") for (H, C, G) in ((40, 32, 4), (48, 24, 2), (36, 32, 2), (64, 32, 2), (30, 8, 2), (44, 48, 4))] + [
    (4, 40, 32, 2, 3, "bf16"), (16, 24, 16, 2, 3, "bf16"), (8, 40, 32, 2, 1, "bf16")]
SKIP = int(os.environ.get("SKIP", "0"))  # cases already written (a resumed run appends)

HLO = """HloModule gconv_copy, entry_computation_layout={{({dt}[{B},{H},{H},{C}]{{3,2,1,0}}, {dt}[{k},{k},{cg},{C}]{{3,2,1,0}})->{dt}[{B},{H},{H},{C}]{{3,2,1,0}}}}

ENTRY main.1 {{
  x.1 = {dt}[{B},{H},{H},{C}]{{3,2,1,0}} parameter(0)
  w.1 = {dt}[{k},{k},{cg},{C}]{{3,2,1,0}} parameter(1)
  ROOT conv = {dt}[{B},{H},{H},{C}]{{3,2,1,0}} convolution(x.1, w.1), window={{size={k}x{k} pad={p}_{p}x{p}_{p}}}, dim_labels=b01f_01io->b01f, feature_group_count={G}
}}
"""

chips = sys.argv[1].split(",") if len(sys.argv) > 1 else ["v4", "v5e", "v5p", "v6e"]
with tempfile.TemporaryDirectory() as d:
    for (B, H, C, G, k, dt) in CASES[SKIP:]:
        text = HLO.format(dt=dt, B=B, H=H, C=C, k=k, cg=C // G, G=G, p=k // 2)
        for chip in chips:
            summ, out = libtpu.compile_hlo(text, libtpu.TOPO[chip], d)
            if out is None:
                print(json.dumps(dict(case=[B, H, C, G, k, dt], chip=chip, error="compile failed")), flush=True)
                continue
            ops = []
            for line in out[out.rfind("\nENTRY"):].split("\n"):
                m = re.match(r"\s*(ROOT )?%(\S+) = (\S+) ([\w-]+)\((.*?)\)", line)
                if not m:
                    continue
                cyc = re.search(r'"estimated_cycles":"(\d+)"', line)
                ops.append((m.group(2), m.group(3), m.group(4), m.group(5).split(",")[0].strip().lstrip("%"),
                            int(cyc.group(1)) if cyc else None))
            print(json.dumps(dict(case=[B, H, C, G, k, dt], chip=chip, entry=summ["entry_estimated_cycles"], ops=ops)),
                  flush=True)
