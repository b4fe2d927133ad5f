#!/usr/bin/env python3
"""lone_reduce.py [--measure] [CHIPS]: libtpu probes of the size from which the XLA TPU compiler
charges an unfused reduce its lone-op cost (chips/*.json lone_reduce_min_bytes, lone_op_bytes).
Cases: f32[R,1024] summed over its rows (red_R), and f32[R,1024] negated (neg_R, the elementwise
threshold lone_op_min_bytes, for comparison), R on both sides of each generation's step: v5e
between R = 1200 (4.69 MiB) and 1280 (5.00 MiB), v5p and v6e between 2400 (9.38 MiB) and 2600
(10.16 MiB); negations of 12 MiB in and out still pay none on v5p/v6e (neg_1552). With
--measure (needs libtpu: /work/shared/tools/tpu_compile.py) each case is compiled per
generation and data/lone_reduce.json rewritten; without, the committed figures are read.
Prints per case the compiler's cycles, tpusim's, and their ratio (run with the build's tpusim)."""
import json, os, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
DATA = os.path.join(HERE, "data", "lone_reduce.json")

from libtpu import TOPO, compile_hlo, tpusim_step_cycles

ROWS = {"v4": (1400,), "v5e": (1200, 1280, 1344, 1400, 1552), "v5p": (1400, 1600, 2000, 2200, 2400, 2600, 2800, 3000, 3104),
        "v6e": (1400, 1600, 2000, 2200, 2400, 2600, 2800, 3000, 3104)}
NEG = {"v5e": (760, 776), "v5p": (1528, 1552), "v6e": (1528, 1552)}


def red(r):
    return ("HloModule r\n\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\n"
            f"ENTRY main {{\n  x = f32[{r},1024] parameter(0)\n  z = f32[] constant(0)\n"
            f"  ROOT y = f32[{r}] reduce(x, z), dimensions={{1}}, to_apply=add\n}}\n")


def neg(r):
    return f"HloModule n\n\nENTRY main {{\n  x = f32[{r},1024] parameter(0)\n  ROOT y = f32[{r},1024] negate(x)\n}}\n"


def main():
    args = [a for a in sys.argv[1:] if a != "--measure"]
    chips = args[0].split(",") if args else list(TOPO)
    data = json.load(open(DATA)) if os.path.exists(DATA) else {}
    with tempfile.TemporaryDirectory() as d:
        for chip in chips:
            cases = [(f"red_{r}", red(r)) for r in ROWS.get(chip, ())] + [(f"neg_{r}", neg(r)) for r in NEG.get(chip, ())]
            for name, text in cases:
                if "--measure" in sys.argv:
                    summary, _ = compile_hlo(text, TOPO[chip], d)
                    if summary:
                        data.setdefault(name, {})[chip] = summary["entry_estimated_cycles"]
                comp = data.get(name, {}).get(chip)
                sim = tpusim_step_cycles(text, chip, d)
                if comp:
                    print(f"{chip:4s} {name:9s} {int(name.split('_')[1]) * 4096 / 2**20:6.2f} MiB  compiler {comp:7d}  tpusim {sim:7d}  {sim / comp - 1:+.1%}")
    if "--measure" in sys.argv:
        json.dump(data, open(DATA, "w"), indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
