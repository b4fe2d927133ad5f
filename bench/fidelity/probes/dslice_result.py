#!/usr/bin/env python3
"""dslice_result.py GEN: libtpu probes of the XLA TPU compiler's dynamic-slice of a parameter
that is the program's result (relayout.c tpu__result_slice_copy, copy_kind.c
tpu__relayout_off_core; docs/compiler-layouts.md). Each table (none in the corpora) lies in
the layout that pads least; where the slice pads least in another tile the compiler slices in
the table's layout (constant_dynamic-slice_fusion, into VMEM S(1), or CMEM S(3) on v4) and a
copy relays the slice into the result's; a table whose tile the slice keeps is sliced into
the result directly. Prints one JSON line per table: the compiler's top-level kernels with
their estimated_cycles and layouts ("ops"), its entry cycles ("total") and tpusim's step
cycles ("sim"). data/dslice_result.json holds the session-17 run."""
import json, sys, tempfile

import libtpu
from libtpu import TOPO, tpusim_step_cycles

# (dtype, table rows, row width, rows sliced)
CASES = [("f32", 500, 16, 4), ("bf16", 300, 32, 1), ("bf16", 4096, 96, 2), ("f32", 1000, 48, 8),
         ("bf16", 300, 256, 1), ("f32", 2000, 128, 3)]


def hlo(dt, n, w, k):
    return (f"HloModule probe\n\nENTRY main {{\n  t = {dt}[{n},{w}] parameter(0)\n  i = s32[] parameter(1)\n"
            f"  z = s32[] constant(0)\n  ROOT d = {dt}[{k},{w}] dynamic-slice(t, i, z), dynamic_slice_sizes={{{k},{w}}}\n}}\n")


def main():
    gen = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        for c in CASES:
            text = hlo(*c)
            summ, t = libtpu.compile_retry(text, TOPO[gen], d)
            if not t:
                print(json.dumps(dict(gen=gen, cfg=c, err="compile")), flush=True)
                continue
            ops = [[n, sh, c] for n, sh, _, c in libtpu.entry_ops(t) if c is not None]
            print(json.dumps(dict(gen=gen, cfg=c, total=summ["entry_estimated_cycles"], ops=ops,
                                  sim=tpusim_step_cycles(text, gen, d))), flush=True)


if __name__ == "__main__":
    main()
