#!/usr/bin/env python3
"""lane_scan.py [--measure] [CHIPS]: libtpu probes of a short scan (at most 128, one window,
no blocks) along the lanes of a rank-1 or rank-2 array: does the XLA TPU compiler run it in
the lanes, or turn the lanes into rows first? Cases off the corpus: jnp.cumsum-style
reduce-windows (the window the whole axis, padded by its length less one below; `rev`: above)
of f32/s32/bf16 vectors of 16..128 and of matrices along their last axis. With --measure (needs
libtpu: /work/shared/tools/tpu_compile.py) each case is compiled per generation and
data/lane_scan.jsonl rewritten (one line per case and generation: the compiled entry's ops
with opcode, result shape and layout, estimated_cycles); without, the committed lines are read.
Prints per case the compiler's kernels and estimated sum against tpusim's kernels and its sum
without its reduce-window (the compiler estimates none of its scan windows)."""
import json, os, re, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
DATA = os.path.join(HERE, "data", "lane_scan.jsonl")

from libtpu import TOPO, TPUSIM, compile_hlo, tpusim_ops

INIT = {("add", "f32"): "0", ("add", "s32"): "0", ("add", "bf16"): "0", ("multiply", "f32"): "1",
        ("minimum", "s32"): "2147483647", ("maximum", "f32"): "-inf", ("maximum", "bf16"): "-inf"}
# (shape, axis, dtype, op, reverse)
CASES = [([128], 0, "f32", "add", 0), ([100], 0, "f32", "add", 0), ([64], 0, "s32", "minimum", 1),
         ([128], 0, "f32", "multiply", 1), ([16], 0, "f32", "add", 0), ([96], 0, "bf16", "maximum", 0),
         ([8, 100], 1, "f32", "add", 0), ([33, 64], 1, "s32", "minimum", 0), ([4, 128], 1, "f32", "add", 1),
         ([200, 50], 1, "f32", "add", 0), ([16, 16], 0, "f32", "add", 0), ([120, 8], 0, "s32", "minimum", 0)]


def name(c):
    shape, axis, dt, op, rev = c
    return "%s_%s_ax%d%s_%s" % (op, "x".join(map(str, shape)), axis, "_rev" if rev else "", dt)


def scan_hlo(c):
    shape, axis, dt, op, rev = c
    n, r = shape[axis], len(shape)
    s = ",".join(map(str, shape))
    size = "x".join(str(n if i == axis else 1) for i in range(r))
    pad = "x".join((("0_%d" % (n - 1)) if rev else ("%d_0" % (n - 1))) if i == axis else "0_0" for i in range(r))
    lay = ",".join(str(i) for i in reversed(range(r)))
    return (f"HloModule p, entry_computation_layout={{({dt}[{s}]{{{lay}}})->{dt}[{s}]{{{lay}}}}}\n\n"
            f"r {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n  ROOT c = {dt}[] {op}(a, b)\n}}\n\n"
            f"ENTRY e {{\n  x = {dt}[{s}]{{{lay}}} parameter(0)\n  i = {dt}[] constant({INIT[(op, dt)]})\n"
            f"  ROOT w = {dt}[{s}]{{{lay}}} reduce-window(x, i), window={{size={size} pad={pad}}}, to_apply=r\n}}\n")


def entry_ops(text):
    """The compiled entry's ops that do work: [name, result type with layout, opcode, estimated_cycles]."""
    out = []
    for line in text[text.rfind("\nENTRY"):].split("\n"):
        m = re.search(r"%(\S+) = (\S+) ([\w-]+)\(", line)
        if not m or m.group(3) in ("parameter", "constant", "bitcast", "tuple", "get-tuple-element"):
            continue
        cyc = re.search(r'"estimated_cycles":"(\d+)"', line)
        out.append([m.group(1), m.group(2), m.group(3), int(cyc.group(1)) if cyc else None])
    return out


def main():
    args = [a for a in sys.argv[1:] if a != "--measure"]
    chips = args[0].split(",") if args else list(TOPO)
    data = {}
    if os.path.exists(DATA):
        for line in open(DATA):
            j = json.loads(line)
            data[(j["case"], j["gen"])] = j["ops"]
    with tempfile.TemporaryDirectory() as d:
        for c in CASES:
            text = scan_hlo(c)
            for g in chips:
                if "--measure" in sys.argv:
                    _, out = compile_hlo(text, TOPO[g], d)
                    if out:
                        data[(name(c), g)] = entry_ops(out)
                ops = data.get((name(c), g))
                if ops is None:
                    continue
                comp = sum(o[3] or 0 for o in ops)
                sim = tpusim_ops(TPUSIM, text, g)
                est = sum(o[2] for o in sim if o[1] != "reduce-window")
                print("%-28s %-4s compiler %6d (%s)  tpusim %6d (%s)  %.2f" % (
                    name(c), g, comp, " ".join("%s:%s" % (o[2], o[3]) for o in ops), est,
                    " ".join("%s:%d" % (o[1], o[2]) for o in sim), est / comp if comp else float("nan")), flush=True)
    if "--measure" in sys.argv:
        with open(DATA, "w") as f:
            for (n, g), ops in sorted(data.items()):
                f.write(json.dumps({"case": n, "gen": g, "ops": ops}) + "\n")


if __name__ == "__main__":
    main()
