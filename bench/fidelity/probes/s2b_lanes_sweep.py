#!/usr/bin/env python3
"""s2b_lanes_sweep.py [CHIPS] (session 30, conv3d; needs libtpu, compile-only): 1x1 convolutions
(1-D stride 1 or 2, 2-D and 3-D) at batch 1-2 that the compiler folds into the batch (space to
batch) with W splitting evenly into 8 pieces, where the least padded entry layout puts W in the
lanes (fewer features than W). Extends s2b_lanes.py (v4/v5p, five shapes) to every generation
and other shapes, all off the corpus: does the compiler relay the input and the result through
two copies each way (W out of the tile, a bitcast, then the convolution's layout), and what do
they cost. NHWC-style x HWIO, entry layouts left to the compiler. One JSON line per case and
generation with the compiler's top-level ops and tpusim's own kernels, as committed in
data/s2b_lanes_sweep.jsonl."""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import libtpu

# (batch, spatial dims, Ci, Co, stride along every spatial dimension)
CASES = [(1, (8, 40, 40), 32, 32, 1), (2, (4, 48, 48), 16, 64, 1), (1, (4, 64, 64), 24, 24, 1),
         (1, (8, 64, 64), 16, 32, 2), (1, (64, 64), 32, 32, 1), (2, (56, 56), 16, 64, 1),
         (1, (40, 40), 8, 16, 1), (1, (8, 40, 40), 128, 128, 1)]


def hlo(B, sp, ci, co, st):
    n = len(sp)
    sh = lambda s: "bf16[" + ",".join(map(str, s)) + "]"
    lay = "{" + ",".join(str(i) for i in range(n + 1, -1, -1)) + "}"
    xs, ws = [B, *sp, ci], [1] * n + [ci, co]
    os_ = [B, *[(d + st - 1) // st for d in sp], co]
    dims = "012"[:n]
    return f"""HloModule s2b_lanes_sweep, entry_computation_layout={{({sh(xs)}{lay}, {sh(ws)}{lay})->{sh(os_)}{lay}}}

ENTRY main.1 {{
  x.1 = {sh(xs)}{lay} parameter(0)
  w.1 = {sh(ws)}{lay} parameter(1)
  ROOT conv = {sh(os_)}{lay} convolution(x.1, w.1), window={{size={"x".join(["1"] * n)} stride={"x".join([str(st)] * n)}}}, dim_labels=b{dims}f_{dims}io->b{dims}f
}}
"""


if __name__ == "__main__":
    for case, chip, _, own, summ, out in libtpu.each_compiled(CASES, hlo, libtpu.chips_arg(sys.argv)):
        print(json.dumps(dict(case=case, chip=chip, entry=summ["entry_estimated_cycles"],
                              ops=libtpu.entry_ops(out), tpusim=own)), flush=True)
