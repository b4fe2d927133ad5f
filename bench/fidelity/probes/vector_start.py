#!/usr/bin/env python3
"""vector_start.py [OUT.jsonl]: the fixed start of the XLA TPU compiler's small vector kernels
(session 30; issue 30). Single-op programs outside the corpora — elementwise (negate, exp,
multiply-add), a row reduction, a pad, a broadcast and a convert; f32 / bf16 / s32; 96 to 98,304
elements in odd shapes — compiled with libtpu (compile-only) for v4, v5e, v5p and v6e. Each
compiled program is then timed by tpusim as `compare.py --compiled` times it (the compiler's own
program, so only unit costs differ), and each entry op's estimated cycles are recorded beside
tpusim's cycles for the op of the same name (TPUSIM: the binary; v4 as one TensorCore).
    flock /tmp/libtpu_probe.lock python3 bench/fidelity/probes/vector_start.py \\
        bench/fidelity/probes/data/vector_start.jsonl"""
import json, os, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from libtpu import compile_retry, entry_ops, tpusim_ops, TOPO, TPUSIM

SHAPES = [(3, 32), (24, 40), (384, 256)]


def program(kind, dt, r, c):
    s = f"{dt}[{r},{c}]"
    one = f"  p0 = {s} parameter(0)\n"
    if kind == "negate":
        body = one + f"  ROOT o = {s} negate(p0)\n"
    elif kind == "exp":
        body = one + f"  ROOT o = {s} exponential(p0)\n"
    elif kind == "fma":
        body = (one + f"  p1 = {s} parameter(1)\n  m = {s} multiply(p0, p1)\n"
                f"  ROOT o = {s} add(m, p0)\n")
    elif kind == "rowsum":
        return (f"HloModule m\n\nadd {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n"
                f"  ROOT s = {dt}[] add(a, b)\n}}\n\nENTRY e {{\n" + one +
                f"  z = {dt}[] constant(0)\n  ROOT o = {dt}[{r}] reduce(p0, z), dimensions={{1}}, to_apply=add\n}}\n")
    elif kind == "pad":
        body = one + f"  z = {dt}[] constant(0)\n  ROOT o = {dt}[{r + 2},{c + 3}] pad(p0, z), padding=1_1x0_3\n"
    elif kind == "bcast":
        body = f"  p0 = {dt}[{c}] parameter(0)\n  ROOT o = {s} broadcast(p0), dimensions={{1}}\n"
    elif kind == "convert":
        odt = "f32" if dt != "f32" else "bf16"
        body = one + f"  ROOT o = {odt}[{r},{c}] convert(p0)\n"
    return f"HloModule m\n\nENTRY e {{\n{body}}}\n"


CASES = [(k, dt) for k in ["negate", "exp", "fma", "rowsum", "pad", "bcast", "convert"] for dt in ["f32", "bf16"]
         if not (k == "exp" and dt == "s32")] + [("negate", "s32"), ("pad", "s32")]


def main():
    out = open(sys.argv[1], "w") if len(sys.argv) > 1 else None
    for gen in ["v4", "v5e", "v5p", "v6e"]:
        for kind, dt in CASES:
            for r, c in SHAPES:
                text = program(kind, dt, r, c)
                with tempfile.TemporaryDirectory() as d:
                    _, comp = compile_retry(text, TOPO[gen], d)
                if not comp:
                    print(gen, kind, dt, r, c, "no compile", flush=True)
                    continue
                ops = entry_ops(comp)
                sim = tpusim_ops(TPUSIM, comp, gen)
                rec = {"chip": gen, "kind": kind, "dtype": dt, "shape": [r, c], "compiler_ops": ops,
                       "tpusim_ops": sim}
                print(gen, kind, dt, r, c, [(o[0], o[3]) for o in ops if o[3]], [(a, x) for a, _, x in sim],
                      flush=True)
                if out:
                    out.write(json.dumps(rec) + "\n")
                    out.flush()


if __name__ == "__main__":
    main()
