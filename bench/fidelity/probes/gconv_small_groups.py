#!/usr/bin/env python3
"""gconv_small_groups.py [CHIPS] (session 27, conv; needs libtpu, compile-only): grouped
convolutions of many features (C >= 128) in groups of few features (Cg 4-16), where tpusim's own
compilation runs 40-60 % fast on v4/v5p in the families' tune split. For each (B, H, C, Co, G, k,
dtype) below (shapes off the families corpus), NHWC x HWIO, SAME, feature_group_count G, entry
layouts left to the compiler (libtpu.py compile_retry), one JSON line per generation with the
compiler's top-level ops (name, shape with layout, opcode, estimated_cycles) and tpusim's own
kernels for the same text (name, kind, cycles), as committed in data/gconv_small_groups.jsonl."""
import json, os, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import libtpu

CASES = [(4, 28, 256, 256, 32, 1, "f32"), (8, 28, 128, 256, 16, 1, "f32"), (8, 28, 256, 512, 32, 1, "bf16"),
         (4, 14, 256, 256, 64, 3, "f32"), (4, 28, 128, 128, 16, 3, "bf16"), (8, 28, 512, 512, 32, 1, "f32"),
         # the decision's edges: Cog 32 at W 28 (sublane merge expected), W 7 with Cg 8, W 56 with Cg 16,
         # a batch of 2, Cg 12 (not dividing 16)
         (8, 28, 512, 1024, 16, 1, "bf16"), (8, 7, 256, 256, 32, 3, "bf16"), (4, 56, 256, 256, 16, 1, "bf16"),
         (2, 28, 256, 256, 32, 1, "bf16"), (8, 28, 192, 192, 16, 1, "bf16")]
SKIP = int(os.environ.get("SKIP", "0"))

HLO = """HloModule gconv_small, entry_computation_layout={{({dt}[{B},{H},{H},{C}]{{3,2,1,0}}, {dt}[{k},{k},{cg},{Co}]{{3,2,1,0}})->{dt}[{B},{H},{H},{Co}]{{3,2,1,0}}}}

ENTRY main.1 {{
  x.1 = {dt}[{B},{H},{H},{C}]{{3,2,1,0}} parameter(0)
  w.1 = {dt}[{k},{k},{cg},{Co}]{{3,2,1,0}} parameter(1)
  ROOT conv = {dt}[{B},{H},{H},{Co}]{{3,2,1,0}} convolution(x.1, w.1), window={{size={k}x{k} pad={p}_{p}x{p}_{p}}}, dim_labels=b01f_01io->b01f, feature_group_count={G}
}}
"""

chips = sys.argv[1].split(",") if len(sys.argv) > 1 else ["v4", "v5p", "v5e", "v6e"]
with tempfile.TemporaryDirectory() as d:
    for (B, H, C, Co, G, k, dt) in CASES[SKIP:]:
        text = HLO.format(dt=dt, B=B, H=H, C=C, Co=Co, k=k, cg=C // G, G=G, p=k // 2)
        for chip in chips:
            own = libtpu.tpusim_ops(libtpu.TPUSIM, text, chip)
            summ, out = libtpu.compile_retry(text, libtpu.TOPO[chip], d)
            if out is None:
                print(json.dumps(dict(case=[B, H, C, Co, G, k, dt], chip=chip, error="compile failed")), flush=True)
                continue
            print(json.dumps(dict(case=[B, H, C, Co, G, k, dt], chip=chip, entry=summ["entry_estimated_cycles"],
                                  ops=libtpu.entry_ops(out), tpusim=own)), flush=True)
