#!/usr/bin/env python3
"""gconv_merge.py [CHIPS] (session 21, gconv; needs libtpu, compile-only): the XLA TPU compiler's
`copy` that merges a grouped convolution's split result [B, H, W, G, Cog] {.., G, B, Cog} (the
batch in the sublanes) back into the features {.., B, G, Cog} (G in the sublanes). For each
(B, H, Cin, Cout, G, k, dtype) below (shapes off the families corpus), NHWC x HWIO, SAME,
feature_group_count G, in gconv_copies.py's HLO form, one JSON line per generation with its
top-level ops (name, shape with layout, opcode, first operand, estimated_cycles, iteration_bounds), as committed
in data/gconv_merge.jsonl."""
import json, os, re, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import libtpu

CASES = [
    # f32, G >= 8: the merged result in whole 32-bit registers (T(8,128))
    (2, 10, 256, 256, 8, 1, "f32"), (4, 12, 512, 512, 16, 1, "f32"), (2, 12, 512, 512, 8, 3, "f32"),
    (8, 10, 512, 512, 32, 1, "f32"), (4, 10, 256, 512, 8, 1, "f32"), (2, 20, 1024, 1024, 16, 1, "f32"),
    # bf16: packed tiles of 16 rows
    (8, 12, 1024, 1024, 32, 1, "bf16"), (8, 10, 512, 512, 16, 1, "bf16"), (8, 12, 512, 512, 32, 1, "bf16"),
    (4, 12, 1024, 1024, 32, 1, "bf16"), (2, 12, 1024, 1024, 32, 1, "bf16"), (8, 12, 2048, 2048, 64, 1, "bf16"),
    (8, 12, 1024, 1024, 16, 1, "bf16"), (8, 12, 256, 256, 8, 1, "bf16"), (4, 10, 512, 512, 16, 1, "bf16"),
    (8, 20, 1024, 1024, 32, 1, "bf16"), (8, 12, 1024, 1024, 32, 3, "bf16"),
    # a second run (SKIP=17, appended; its lines carry iteration_bounds): large bf16 copies of
    # a batch under 8, and two f32 cases again (one failed to compile on v5e; windows)
    (4, 20, 1024, 1024, 32, 1, "bf16"), (2, 28, 1024, 1024, 32, 1, "bf16"),
    (4, 12, 512, 512, 16, 1, "f32"), (8, 10, 512, 512, 32, 1, "f32"),
]
SKIP = int(os.environ.get("SKIP", "0"))  # cases already written (a resumed run appends)

HLO = """HloModule gconv_merge, entry_computation_layout={{({dt}[{B},{H},{H},{C}]{{3,2,1,0}}, {dt}[{k},{k},{cg},{O}]{{3,2,1,0}})->{dt}[{B},{H},{H},{O}]{{3,2,1,0}}}}

ENTRY main.1 {{
  x.1 = {dt}[{B},{H},{H},{C}]{{3,2,1,0}} parameter(0)
  w.1 = {dt}[{k},{k},{cg},{O}]{{3,2,1,0}} parameter(1)
  ROOT conv = {dt}[{B},{H},{H},{O}]{{3,2,1,0}} convolution(x.1, w.1), window={{size={k}x{k} pad={p}_{p}x{p}_{p}}}, dim_labels=b01f_01io->b01f, feature_group_count={G}
}}
"""

chips = sys.argv[1].split(",") if len(sys.argv) > 1 else ["v4", "v5e", "v5p", "v6e"]
with tempfile.TemporaryDirectory() as d:
    for (B, H, C, O, G, k, dt) in CASES[SKIP:]:
        text = HLO.format(dt=dt, B=B, H=H, C=C, O=O, k=k, cg=C // G, G=G, p=k // 2)
        for chip in chips:
            summ, out = libtpu.compile_hlo(text, libtpu.TOPO[chip], d)
            if out is None:
                print(json.dumps(dict(case=[B, H, C, O, G, k, dt], chip=chip, error="compile failed")), flush=True)
                continue
            ops = []
            for line in out[out.rfind("\nENTRY"):].split("\n"):
                m = re.match(r"\s*(ROOT )?%(\S+) = (\S+) ([\w-]+)\((.*?)\)", line)
                if not m:
                    continue
                cyc = re.search(r'"estimated_cycles":"(\d+)"', line)
                it = re.search(r'"iteration_bounds":\[([^\]]*)\]', line)
                ops.append((m.group(2), m.group(3), m.group(4), m.group(5).split(",")[0].strip().lstrip("%"),
                            int(cyc.group(1)) if cyc else None,
                            [int(x) for x in re.findall(r'\d+', it.group(1))] if it else None))
            print(json.dumps(dict(case=[B, H, C, O, G, k, dt], chip=chip, entry=summ["entry_estimated_cycles"], ops=ops)),
                  flush=True)
