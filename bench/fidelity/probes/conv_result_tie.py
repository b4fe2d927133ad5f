#!/usr/bin/env python3
"""conv_result_tie.py [CHIPS] (session 30, conv3d; needs libtpu, compile-only): which layout a
program's convolution result leaves in when the convolution's own layout (the batch of 1, 2 or 4
in the sublanes in a tile of its rows) pads exactly as little as another dimension's (D or H of
2, 4 or 8 in the sublanes). Off the corpus: 2-D and 3-D bf16 convolutions, SAME, small W (no
space to batch), entry layouts left to the compiler. Prints one JSON line per case and
generation: the compiler's top-level ops (name, shape with layout, opcode, estimated_cycles),
its result layout, and tpusim's own kernels; committed in data/conv_result_tie.jsonl."""
import json, os, re, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import libtpu

# (batch, spatial dims, Ci, Co, k): the result ties where the batch's tile rows times the other
# dimensions equal another sublane dimension's
CASES = [(2, (8, 10, 10), 16, 16, 1), (2, (4, 12, 12), 32, 32, 3), (4, (4, 12, 12), 32, 64, 3),
         (4, (2, 12, 12), 16, 16, 3), (2, (6, 10, 10), 32, 32, 1), (1, (8, 12, 12), 32, 32, 3),
         (2, (4, 12), 64, 64, 3), (4, (2, 12), 32, 32, 3), (2, (6, 12), 32, 32, 3), (4, (8, 12), 32, 128, 3),
         (2, (2, 10, 10), 64, 64, 1), (4, (4, 9), 48, 48, 3)]


def hlo(B, sp, ci, co, k):
    n = len(sp)
    xs = [B, *sp, ci]
    os_ = [B, *sp, co]
    ws = [k] * n + [ci, co]
    lay = lambda r: "{" + ",".join(str(i) for i in range(r - 1, -1, -1)) + "}"
    dims = "".join("012"[:n])
    win = "x".join([str(k)] * n)
    pad = "x".join([f"{k // 2}_{k // 2}"] * n)
    sh = lambda s: "bf16[" + ",".join(map(str, s)) + "]"
    return f"""HloModule tie, entry_computation_layout={{({sh(xs)}{lay(n + 2)}, {sh(ws)}{lay(n + 2)})->{sh(os_)}{lay(n + 2)}}}

ENTRY main.1 {{
  x.1 = {sh(xs)}{lay(n + 2)} parameter(0)
  w.1 = {sh(ws)}{lay(n + 2)} parameter(1)
  ROOT conv = {sh(os_)}{lay(n + 2)} convolution(x.1, w.1), window={{size={win} pad={pad}}}, dim_labels=b{dims}f_{dims}io->b{dims}f
}}
"""


if __name__ == "__main__":
    for case, chip, _, own, summ, out in libtpu.each_compiled(CASES, hlo, libtpu.chips_arg(sys.argv)):
        m = re.search(r"->(\S+?\{[^}]*\})", out[:out.find("\n")])
        print(json.dumps(dict(case=case, chip=chip, entry=summ["entry_estimated_cycles"], result=m.group(1) if m else None,
                              ops=libtpu.entry_ops(out), tpusim=own)), flush=True)
