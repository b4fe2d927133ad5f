#!/usr/bin/env python3
"""v4_divide.py [OUT.jsonl]: how the XLA TPU compiler prices an element-wise divide's loop kernel on
v4 against v5p (session 28, v4div; issue 30). Off-corpus programs: k chained divides
y = y / p1 (k = 1, 4, 16) over f32 and bf16 [256,1024] and [1024,2048], both operands parameters
in HBM, compiled with libtpu (compile-only); records the compiler's estimated cycles of each
entry op beside tpusim's kernels (v4 as one TensorCore, `v4:core`). The per-divide, per-register
cost is the slope between k = 4 and k = 16 over the 32-bit registers (8 x 128 elements).
    flock /tmp/libtpu_probe.lock python3 bench/fidelity/probes/v4_divide.py \\
        bench/fidelity/probes/data/v4_divide.jsonl"""
import json, os, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from libtpu import compile_retry, entry_ops, tpusim_ops, TOPO, TPUSIM


def program(dt, shape, k):
    s = f"{dt}[{','.join(map(str, shape))}]"
    lines = [f"p0 = {s} parameter(0)", f"p1 = {s} parameter(1)"]
    prev = "p0"
    for i in range(k):
        lines.append(f"{'ROOT ' if i == k - 1 else ''}y{i} = {s} divide({prev}, p1)")
        prev = f"y{i}"
    return "HloModule m\n\nENTRY e {\n  " + "\n  ".join(lines) + "\n}\n"


def main():
    out = open(sys.argv[1], "w") if len(sys.argv) > 1 else None
    print("chip dtype shape k compiler tpusim")
    for gen in ["v4", "v5p"]:
        for dt in ["f32", "bf16"]:
            for shape in [[256, 1024], [1024, 2048]]:
                for k in [1, 4, 16]:
                    text = program(dt, shape, k)
                    with tempfile.TemporaryDirectory() as d:
                        _, comp = compile_retry(text, TOPO[gen], d)
                    ops = entry_ops(comp) if comp else []
                    cyc = sum(o[3] or 0 for o in ops) if comp else None
                    sim = tpusim_ops(TPUSIM, text, gen)
                    rec = {"chip": gen, "dtype": dt, "shape": shape, "k": k, "compiler": cyc,
                           "compiler_ops": ops, "tpusim": sum(c for _, _, c in sim), "tpusim_ops": sim}
                    print(gen, dt, shape, k, cyc, rec["tpusim"], flush=True)
                    if out:
                        out.write(json.dumps(rec) + "\n")
                        out.flush()


if __name__ == "__main__":
    main()
