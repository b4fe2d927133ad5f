#!/usr/bin/env python3
"""s2b_lanes.py [CHIPS] (session 27, conv; needs libtpu, compile-only; a lead, no rule yet): 3-D
convolutions whose W the compiler splits into the batch (space to batch) where its entry layout
puts W in the lanes: the layout copies it makes around the convolution (families tune,
conv3d_b1_16x56x56_c32to32_k1s1: H moved into the lanes, W bitcast apart, a second copy, each
way). NDHWC x DHWIO, SAME, entry layouts left to the compiler (libtpu.py compile_retry); one JSON
line per generation with the compiler's top-level ops and tpusim's own kernels, as committed in
data/s2b_lanes.jsonl."""
import json, os, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import libtpu

CASES = [(1, 8, 48, 48, 32, 32, 1, "bf16"), (2, 8, 40, 40, 16, 16, 1, "bf16"), (1, 16, 28, 28, 64, 64, 1, "bf16"),
         (1, 8, 64, 64, 16, 32, 1, "f32"), (1, 8, 48, 48, 32, 32, 3, "bf16")]
HLO = """HloModule s2b_lanes, entry_computation_layout={{({dt}[{B},{D},{H},{W},{C}]{{4,3,2,1,0}}, {dt}[{k},{k},{k},{C},{Co}]{{4,3,2,1,0}})->{dt}[{B},{D},{H},{W},{Co}]{{4,3,2,1,0}}}}

ENTRY main.1 {{
  x.1 = {dt}[{B},{D},{H},{W},{C}]{{4,3,2,1,0}} parameter(0)
  w.1 = {dt}[{k},{k},{k},{C},{Co}]{{4,3,2,1,0}} parameter(1)
  ROOT conv = {dt}[{B},{D},{H},{W},{Co}]{{4,3,2,1,0}} convolution(x.1, w.1), window={{size={k}x{k}x{k} pad={p}_{p}x{p}_{p}x{p}_{p}}}, dim_labels=b012f_012io->b012f
}}
"""
chips = sys.argv[1].split(",") if len(sys.argv) > 1 else ["v4", "v5p", "v5e", "v6e"]
with tempfile.TemporaryDirectory() as d:
    for (B, D, H, W, C, Co, k, dt) in CASES:
        text = HLO.format(dt=dt, B=B, D=D, H=H, W=W, C=C, Co=Co, k=k, p=k // 2)
        for chip in chips:
            own = libtpu.tpusim_ops(libtpu.TPUSIM, text, chip)
            summ, out = libtpu.compile_retry(text, libtpu.TOPO[chip], d)
            if out is None:
                print(json.dumps(dict(case=[B, D, H, W, C, Co, k, dt], chip=chip, error="compile failed")), flush=True)
                continue
            print(json.dumps(dict(case=[B, D, H, W, C, Co, k, dt], chip=chip, entry=summ["entry_estimated_cycles"],
                                  ops=libtpu.entry_ops(out), tpusim=own)), flush=True)
