#!/usr/bin/env python3
"""pool_fused.py [--measure] [GENS]: libtpu probes of an average pool's reduce-window (sum, then
a divide, as bench/fidelity/gen_families.py writes avgpool2d_*): when does the XLA TPU compiler
run the window inside an estimated kOutput fusion, and when as a plain reduce-window kernel it
gives no estimated_cycles (gen.py "unestimated")? And where it estimates it, how does that
figure compare with tpusim's own timing of the same compiled program (compare.py --compiled)?
Shapes off the families corpus (f32 and bf16 [N,H,H,C], windows 2-5, strides 1-3, VALID and
SAME). With --measure (needs libtpu: /work/shared/tools/tpu_compile.py) each case is compiled
per generation and data/pool_fused.json rewritten; without, the committed figures are read.
Prints, per case and generation: the compiled entry ops (opcode, estimated cycles or '-'),
the compiler's sum, tpusim's cycles for each compiled op and tpusim's sum over the ops the
compiler estimated (the figure compare.py judges) and over all ops."""
import json, os, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "pool_fused.json")
sys.path.insert(0, HERE)

from libtpu import TOPO, TPUSIM, compile_retry, entry_ops, tpusim_ops  # noqa: E402

# n h c dtype k s pad
CASES = ["8 96 256 f32 5 2 same", "8 96 256 f32 5 2 valid", "4 64 512 f32 3 1 same", "4 64 512 f32 3 1 valid",
         "16 40 128 f32 5 2 same", "16 40 128 f32 5 2 valid", "8 80 384 bf16 3 2 same", "8 80 384 bf16 3 2 valid",
         "2 20 160 f32 5 3 same", "2 20 160 f32 5 3 valid", "16 24 64 f32 3 1 valid", "16 24 64 f32 3 1 same"]


def hlo(n, h, c, dt, k, s, pad):
    if pad == "valid":
        lo = hi = 0
    else:
        tot = max((-(-h // s) - 1) * s + k - h, 0)
        lo, hi = tot // 2, tot - tot // 2
    o = (h + lo + hi - k) // s + 1
    x, r = f"{dt}[{n},{h},{h},{c}]", f"{dt}[{n},{o},{o},{c}]"
    return (f"HloModule p, entry_computation_layout={{({x}{{3,2,1,0}})->{r}{{3,2,1,0}}}}\n\n"
            f"add {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n  ROOT s = {dt}[] add(a, b)\n}}\n\n"
            f"ENTRY main {{\n  x = {x}{{3,2,1,0}} parameter(0)\n  z = {dt}[] constant(0)\n"
            f"  w = {r}{{3,2,1,0}} reduce-window(x, z), window={{size=1x{k}x{k}x1 stride=1x{s}x{s}x1 "
            f"pad=0_0x{lo}_{hi}x{lo}_{hi}x0_0}}, to_apply=add\n"
            f"  d = {dt}[] constant({k * k})\n  db = {r}{{3,2,1,0}} broadcast(d), dimensions={{}}\n"
            f"  ROOT q = {r}{{3,2,1,0}} divide(w, db)\n}}\n")


def measure(gens):
    out = json.load(open(DATA)) if os.path.exists(DATA) else {}
    for gen in gens:
        for case in CASES:
            with tempfile.TemporaryDirectory() as d:
                _, text = compile_retry(hlo(*[int(v) if v.isdigit() else v for v in case.split()]), TOPO[gen], d)
            if not text:
                print("no compile:", gen, case, file=sys.stderr)
                continue
            out.setdefault(gen, {})[case] = {"ops": entry_ops(text), "text": text}
            json.dump(out, open(DATA, "w"))
            print(gen, case, out[gen][case]["ops"], flush=True)
    return out


def main():
    args = [a for a in sys.argv[1:] if a != "--measure"]
    gens = args[0].split(",") if args else ["v5e", "v5p"]
    data = measure(gens) if "--measure" in sys.argv else json.load(open(DATA))
    for gen in gens:
        for case, v in data.get(gen, {}).items():
            sim = {name: cyc for name, _, cyc in tpusim_ops(TPUSIM, v["text"], gen)}
            comp = sum(o[3] or 0 for o in v["ops"])
            judged = sum(sim.get(o[0], 0) for o in v["ops"] if o[3])
            rows = ", ".join(f"{o[2]} {o[3] if o[3] else '-'}/{sim.get(o[0], 0):.0f}" for o in v["ops"]
                             if o[2] not in ("parameter", "constant"))
            print(f"{gen} {case:26s} compiler {comp:8d} tpusim judged {judged:9.0f} ({judged / comp - 1 if comp else 0:+.0%})"
                  f" all {sum(sim.values()):9.0f}   [{rows}]")


if __name__ == "__main__":
    main()
