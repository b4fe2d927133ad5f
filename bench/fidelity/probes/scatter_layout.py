#!/usr/bin/env python3
"""scatter_layout.py GEN [CASE...]: libtpu probes of the layout the XLA TPU compiler runs a
scatter in (relayout.c's scatter layouts, tpu__scatter_layouts; docs/compiler-layouts.md).
Each program (none in the corpora) scatters M update rows into a table through an index
vector: `add` or `set` (the combiner), the table an entry parameter (`p`, not donated) or
zeros (`z`, a broadcast: a segment sum), scattered along its major dimension (axis 0: rows of
W elements, [N,W]) or its minor one (axis 1: columns of W elements, [W,N]). Entry parameters
and results lie in the layout that pads least ([N,64] is {0,1}: N in the lanes); the
question is whether the scatter kernel runs in that layout or in one with its window (the
W elements of an update) in the lanes, relaying its operand, its updates and its result
through copies. Prints one JSON line per case: the compiler's top-level kernels with their
layouts and estimated_cycles ("ops", none for the scatter fusion), its entry cycles
("total") and tpusim's step cycles ("sim"). data/scatter_layout.jsonl holds the
session-23 run."""
import json, sys, tempfile

import libtpu
from libtpu import TOPO, tpusim_step_cycles

# (dtype, combiner, table, axis, N, W, M)
CASES = [
    ("f32", "add", "p", 0, 300, 64, 512), ("bf16", "add", "p", 0, 1000, 64, 2048),
    ("f32", "add", "p", 0, 5000, 32, 256), ("bf16", "add", "p", 0, 4000, 96, 1024),
    ("f32", "add", "p", 0, 3000, 128, 512), ("bf16", "add", "p", 0, 600, 256, 300),
    ("f32", "set", "p", 0, 2000, 64, 100), ("f32", "add", "z", 0, 3000, 64, 64),
    ("bf16", "add", "z", 0, 500, 48, 1000), ("f32", "add", "z", 0, 20000, 64, 512),
    ("f32", "add", "p", 1, 1000, 64, 128), ("bf16", "add", "p", 1, 3000, 256, 64),
    ("f32", "add", "z", 1, 700, 128, 32), ("f32", "add", "p", 0, 700, 16, 4),
]


def hlo(dt, comb, table, axis, n, w, m):
    shape = f"[{n},{w}]" if axis == 0 else f"[{w},{n}]"
    ushape = f"[{m},{w}]" if axis == 0 else f"[{w},{m}]"
    body = "ROOT r = %s[] add(a, b)" % dt if comb == "add" else "ROOT r = %s[] parameter(1)" % dt
    if table == "p":
        t = f"  t = {dt}{shape} parameter(0)\n"
    else:
        t = f"  zero = {dt}[] constant(0)\n  t = {dt}{shape} broadcast(zero), dimensions={{}}\n  dummy = {dt}[] parameter(0)\n"
    return (f"HloModule probe\n\ncomb {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n  {body}\n}}\n\n"
            f"ENTRY main {{\n{t}  i = s32[{m},1] parameter(1)\n  u = {dt}{ushape} parameter(2)\n"
            f"  ROOT s = {dt}{shape} scatter(t, i, u), update_window_dims={{{1 - axis}}}, inserted_window_dims={{{axis}}}, "
            f"scatter_dims_to_operand_dims={{{axis}}}, index_vector_dim=1, to_apply=comb\n}}\n")


def main():
    gen = sys.argv[1]
    pick = [int(x) for x in sys.argv[2:]] or range(len(CASES))
    with tempfile.TemporaryDirectory() as d:
        for k in pick:
            c = CASES[k]
            text = hlo(*c)
            summ, t = libtpu.compile_retry(text, TOPO[gen], d)
            if not t:
                print(json.dumps(dict(gen=gen, cfg=c, err="compile")), flush=True)
                continue
            ops = [[n, op, sh, c] for n, sh, op, c in libtpu.entry_ops(t)
                   if op not in ("parameter", "constant", "copy-done")]
            print(json.dumps(dict(gen=gen, cfg=c, total=summ["entry_estimated_cycles"], ops=ops,
                                  sim=tpusim_step_cycles(text, gen, d))), flush=True)


if __name__ == "__main__":
    main()
