#!/usr/bin/env python3
"""straight_prefetch.py [OUT.jsonl]: does the XLA TPU compiler let a straight-line kernel's HBM read
hide behind the kernel before it (session 28, v4div; issue 30)? Off-corpus programs of two
independent kernels: a = exp(p0) over f32[512,1024] then b = p1 / (p1 * p1) over a small f32[N]
(N = 12, 300, 4096) whose operand is a parameter, ready before a starts; compiled with libtpu
(compile-only) on v4 and v5p; records the compiler's estimated cycles of each entry op beside
tpusim's per-op cycles (TPUSIM: the binary; v4 as one TensorCore).
    flock /tmp/libtpu_probe.lock python3 bench/fidelity/probes/straight_prefetch.py \\
        bench/fidelity/probes/data/straight_prefetch.jsonl"""
import json, os, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from libtpu import compile_retry, entry_ops, tpusim_ops, TOPO, TPUSIM


def program(n):
    return ("HloModule m\n\nENTRY e {\n  p0 = f32[512,1024] parameter(0)\n  p1 = f32[%d] parameter(1)\n"
            "  a = f32[512,1024] exponential(p0)\n  m = f32[%d] multiply(p1, p1)\n  b = f32[%d] divide(p1, m)\n"
            "  ROOT t = (f32[512,1024], f32[%d]) tuple(a, b)\n}\n") % (n, n, n, n)


def main():
    out = open(sys.argv[1], "w") if len(sys.argv) > 1 else None
    for gen in ["v4", "v5p"]:
        for n in [12, 300, 4096]:
            text = program(n)
            with tempfile.TemporaryDirectory() as d:
                _, comp = compile_retry(text, TOPO[gen], d)
            ops = entry_ops(comp) if comp else []
            sim = tpusim_ops(TPUSIM, text, gen)
            rec = {"chip": gen, "n": n, "compiler_ops": ops, "tpusim_ops": sim}
            print(gen, n, [(o[0], o[3]) for o in ops], [(a, c) for a, _, c in sim], flush=True)
            if out:
                out.write(json.dumps(rec) + "\n")
                out.flush()


if __name__ == "__main__":
    main()
