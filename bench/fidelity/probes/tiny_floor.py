#!/usr/bin/env python3
"""tiny_floor.py TPUSIM CHIPS: the XLA TPU compiler's floor for a tiny vector kernel (session 15,
cvt; docs/timing.md, Known gap "the tiny-kernel floor"). Single-op programs of each kind (convert,
add, broadcast, negate, slice, concatenate, select), f32 and bf16, 128 and 65,536 elements,
operands in HBM, compiled with libtpu (compile-only); prints the compiler's cycles beside
tpusim's. Measured: 128 elements v5e 1,826-1,827, v6e 2,121-2,122 (tpusim 1,717-1,726 /
2,016-2,020); convert f32[128] v5p 2,123 (2,059), v4 612 (613).
    python3 bench/fidelity/probes/tiny_floor.py build/tpusim v5e,v6e"""
import os, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from libtpu import compile_hlo, tpusim_cycles

TOPO = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}


def program(kind, n, dt):
    s, odt = f"{dt}[{n}]", "bf16" if dt == "f32" else "f32"
    one, two = f"p0 = {s} parameter(0)", f"p0 = {s} parameter(0)\n  p1 = {s} parameter(1)"
    body = {
        "convert": (one, f"ROOT r = {odt}[{n}] convert(p0)"),
        "add": (two, f"ROOT r = {s} add(p0, p1)"),
        "broadcast": (one, f"ROOT r = {dt}[8,{n}] broadcast(p0), dimensions={{1}}"),
        "negate": (one, f"ROOT r = {s} negate(p0)"),
        "slice": (one, f"ROOT r = {dt}[{n // 2}] slice(p0), slice={{[0:{n // 2}]}}"),
        "concatenate": (two, f"ROOT r = {dt}[{2 * n}] concatenate(p0, p1), dimensions={{0}}"),
        "select": (two + f"\n  c = pred[{n}] compare(p0, p1), direction=GT", f"ROOT r = {s} select(c, p0, p1)"),
    }[kind]
    return f"HloModule m\n\nENTRY e {{\n  {body[0]}\n  {body[1]}\n}}\n"


def main():
    tpusim, chips = sys.argv[1], sys.argv[2].split(",")
    print("kind dtype elements chip compiler tpusim")
    for kind in ["convert", "add", "broadcast", "negate", "slice", "concatenate", "select"]:
        for dt in ["f32", "bf16"]:
            for n in [128, 65536]:
                text = program(kind, n, dt)
                for c in chips:
                    with tempfile.TemporaryDirectory() as d:
                        s, _ = compile_hlo(text, TOPO[c], d)
                        print(kind, dt, n, c, s and s["entry_estimated_cycles"], tpusim_cycles(tpusim, text, c, d),
                              flush=True)


if __name__ == "__main__":
    main()
