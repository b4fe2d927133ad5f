#!/usr/bin/env python3
"""outlayout.py GEN [TPUSIM]: libtpu probes (session 29, outlayout) of the result layout the XLA
TPU compiler picks for a program that leaves it to the compiler (no layouts in the HLO text:
JAX's out_layout_modes "default") and of the loop fusion that relays small tiles out when a
transpose keeps the lane dimension and reorders the others (copy_kind.c
own_small_relayout_tiles). Each probe transposes an array (plus 1, or alone) over shapes off the
families corpus; it prints one JSON line per program: the compiler's entry layout of the
parameter and the result, its entry ops (cycles, result tiles and tile rows), its total
cycles, tpusim's own compilation of the same text (`tpusim run --mode timing`) and tpusim's
timing of the compiler's program (tpusim_compiled). Cases
`rm_*` keep the row-major minor dimension and move a small dimension into the sublanes (the
case where the compiler may lay the result out otherwise than tpusim's least-padded, nearest
row-major choice). data/outlayout.jsonl holds the session-29 run."""
import json, os, re, subprocess, sys, tempfile

from libtpu import TOPO, compile_retry, entry_ops, tpusim_cycles
from hbm_relayout import hlo, tiles  # the same transpose programs and tile count

CASES = [  # name, shape, dtype, permutation, add 1
    ("t5_bf16", [600, 20, 2, 2, 40], "bf16", [0, 4, 1, 3, 2], True),
    ("t5_f32", [420, 24, 2, 2, 30], "f32", [0, 4, 1, 3, 2], True),
    ("t5_bf16_4", [300, 18, 4, 4, 20], "bf16", [0, 4, 1, 3, 2], True),
    ("t4_bf16", [900, 6, 2, 30], "bf16", [0, 3, 1, 2], True),
    ("t4_f32_alone", [700, 5, 2, 36], "f32", [0, 3, 1, 2], False),
    ("t4_f32_8", [520, 9, 8, 21], "f32", [0, 3, 1, 2], True),
    ("rm_f32_p102", [4, 640, 384], "f32", [1, 0, 2], True),
    ("rm_bf16_p102", [2, 900, 256], "bf16", [1, 0, 2], True),
    ("rm_f32_p0213", [6, 3, 200, 256], "f32", [0, 2, 1, 3], True),
    ("rm_bf16_p2103", [40, 3, 2, 512], "bf16", [2, 1, 0, 3], True),
    ("rm4_f32_p3021", [30, 2, 12, 640], "f32", [3, 0, 2, 1], True),
    ("rm4_bf16_p3021", [25, 2, 16, 768], "bf16", [3, 0, 2, 1], True),
]


def main():
    gen = sys.argv[1]
    tpusim = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..", "..", "build", "tpusim")
    chip = "v4:core" if gen == "v4" else gen
    only = sys.argv[3].split(",") if len(sys.argv) > 3 else None
    with tempfile.TemporaryDirectory() as d:
        for name, shape, dt, perm, add in CASES:
            if only and name not in only:
                continue
            text = hlo(shape, dt, perm, add)
            summ, comp = compile_retry(text, TOPO[gen], d)
            if not comp:
                continue
            lay = re.search(r"entry_computation_layout=\{\((.*?)\)->(.*?)\}, ", comp)
            ops = [[o[0], o[2], o[3], tiles(o[1]), o[1]] for o in entry_ops(comp) if o[3] is not None]
            cpath = os.path.join(d, "c.hlo")
            open(cpath, "w").write(comp)
            tc = subprocess.run([tpusim, "run", cpath, "--mode", "timing", "--chip", chip], capture_output=True, text=True,
                                env=dict(os.environ, TPUSIM_CACHE="off"))
            m = re.search(r"\((\d+) cycles", tc.stdout)
            print(json.dumps({"gen": gen, "name": name, "shape": shape, "dt": dt, "perm": perm, "add": add,
                              "param_layout": lay.group(1) if lay else None, "result_layout": lay.group(2) if lay else None,
                              "compiler": summ["entry_estimated_cycles"], "tpusim": tpusim_cycles(tpusim, text, chip, d),
                              "tpusim_compiled": int(m.group(1)) if m else None,
                              "ops": ops}), flush=True)


if __name__ == "__main__":
    main()
