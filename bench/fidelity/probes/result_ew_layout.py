#!/usr/bin/env python3
"""result_ew_layout.py GEN [TPUSIM]: libtpu probes (session 29, outlayout) of rank-2 elementwise
programs whose result the compiler lays out itself (no layouts in the HLO text: JAX's
out_layout_modes "default"): a chain of elementwise ops (multiply, add, tanh, exp, maximum) on
[R, C] with C well under the lanes, so the least padded layout is {0,1} (R in the lanes). The
compiler lays the parameter, the result and every fused elementwise value out so (layout
assignment gives an elementwise op its operand's and its user's layout), and times the kernel
on those registers. Prints one JSON line per program: the compiler's entry layouts, entry ops,
cycles, and tpusim's own compilation of the same text with the rule (tpusim) and without it
(tpusim_before: TPUSIM_NO_RESULT_EW_LAYOUT=1). Shapes off the families corpus (its ew_* are
[4096,3], [256,3], [128,197]); data/result_ew_layout.jsonl holds the session-29 run."""
import json, os, re, sys, tempfile

from libtpu import TOPO, compile_retry, entry_ops, tpusim_cycles

CASES = [  # name, rows, cols, dtype, ops
    ("f32_3000x5", 3000, 5, "f32", "tanh"), ("bf16_6000x3", 6000, 3, "bf16", "tanh"),
    ("f32_2000x12", 2000, 12, "f32", "exp"), ("bf16_1500x7", 1500, 7, "bf16", "exp"),
    ("f32_8000x2", 8000, 2, "f32", "mul"), ("bf16_3000x40", 3000, 40, "bf16", "tanh"),
    ("f32_700x90", 700, 90, "f32", "exp"), ("f32_5000x1x", 5000, 6, "f32", "mul"),
]


def hlo(r, c, dt, kind):
    s = f"{dt}[{r},{c}]"
    body = [f"  a = {s} parameter(0)", f"  b = {s} parameter(1)", f"  m = {s} multiply(a, b)", f"  x = {s} add(m, a)"]
    if kind == "tanh":
        body += [f"  y = {s} tanh(x)"]
    elif kind == "exp":
        body += [f"  y = {s} exponential(x)"]
    else:
        body += [f"  y = {s} multiply(x, x)"]
    body += [f"  ROOT z = {s} maximum(y, b)"]
    return "HloModule probe\n\nENTRY main {\n" + "\n".join(body) + "\n}\n"


def main():
    gen = sys.argv[1]
    tpusim = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..", "..", "build", "tpusim")
    chip = "v4:core" if gen == "v4" else gen
    with tempfile.TemporaryDirectory() as d:
        for name, r, c, dt, kind in CASES:
            text = hlo(r, c, dt, kind)
            summ, comp = compile_retry(text, TOPO[gen], d)
            if not comp:
                continue
            lay = re.search(r"entry_computation_layout=\{\((.*?)\)->(.*?)\}, ", comp)
            ops = [[o[0], o[2], o[3], o[1]] for o in entry_ops(comp) if o[3] is not None]
            after = tpusim_cycles(tpusim, text, chip, d)
            os.environ["TPUSIM_NO_RESULT_EW_LAYOUT"] = "1"
            before = tpusim_cycles(tpusim, text, chip, d)
            del os.environ["TPUSIM_NO_RESULT_EW_LAYOUT"]
            print(json.dumps({"gen": gen, "name": name, "param_layout": lay.group(1) if lay else None,
                              "result_layout": lay.group(2) if lay else None, "compiler": summ["entry_estimated_cycles"],
                              "tpusim": after, "tpusim_before": before, "ops": ops}), flush=True)


if __name__ == "__main__":
    main()
