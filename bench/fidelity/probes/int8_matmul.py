#!/usr/bin/env python3
"""int8_matmul.py [GENS] [TPUSIM]: the probe behind the chip fields int8_mxu_rate and
int8_matmul_s (v6e; docs/timing-mxu.md, 8-bit integer matmuls). Needs libtpu
(/work/shared/tools/tpu_compile.py or any jax[tpu] install: compile-only).

Writes plain HLO dots x @ w of 16 shapes outside the corpora, from [8,128] x [128,128] to
[4096,4096] x [4096,4096], each as s8 -> s32 and bf16 -> f32, compiles them with the XLA TPU
compiler for one device of each generation and times the compiled programs with tpusim on a
copy of the preset without the two fields (int8 at the published int8_rate, no extra start).
Prints per shape the compiler's cycles (its kernels' estimated_cycles) and tpusim's, and:
  - int8_mxu_rate: the compiler's bf16 cycles over its s8 cycles at [4096,4096]^2 (MXU-bound);
  - int8_matmul_s: with that rate in the preset, the median over the shapes of how far tpusim
    falls short of the compiler on s8 beyond how far it does on bf16 at the same shape (the
    bf16 dot's own gap is not the int8 kernel's), in seconds at the compiler's clock.
v4 (session 25, timed as "PRESET:core"): rate 0.919 (1,255,424 against 1,153,981 cycles), extra
789 cycles (16 shapes), 427-711 for the 6 under 3,000 cycles (median 450, the start kept).
v6e (session 17): rate 1.315 (226,614 against 298,006 cycles), extra 1,195 cycles (16 shapes;
1,047-1,243 for the 10 smallest), 6.83e-7 s; v5e: rate as published (2), no extra."""
import json, os, re, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
COMPILE = "/work/shared/tools/tpu_compile.py"
TOP = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}
SHAPES = [(8, 128, 128), (8, 512, 512), (8, 1024, 1024), (16, 16, 256), (48, 40, 1536), (64, 512, 512),
          (256, 512, 512), (1024, 512, 512), (4096, 512, 512), (24, 2000, 640), (200, 2500, 300),
          (3000, 800, 40), (80, 3000, 5), (512, 512, 512), (2048, 2048, 2048), (4096, 4096, 4096)]
BIG = (4096, 4096, 4096)
CORE = {"v4"}  # megacore generations: tpusim runs "PRESET:core", one TensorCore (compare.py's v4=v4:core)


def dot(m, k, n, a, acc):
    return (f"HloModule d\nENTRY %main (x: {a}[{m},{k}], w: {a}[{k},{n}]) -> {acc}[{m},{n}] {{\n"
            f"  %x = {a}[{m},{k}] parameter(0)\n  %w = {a}[{k},{n}] parameter(1)\n"
            f"  ROOT %d = {acc}[{m},{n}] dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n}}\n")


def compiled(td, gen, m, k, n, a, acc):
    src = os.path.join(td, f"{a}_{m}x{k}x{n}.hlo")
    out = os.path.join(td, f"{a}_{m}x{k}x{n}.{gen}.hlo")
    open(src, "w").write(dot(m, k, n, a, acc))
    subprocess.run([sys.executable, COMPILE, src, TOP[gen], out], check=True, capture_output=True,
                   env=dict(os.environ, ALLOW_MULTIPLE_LIBTPU_LOAD="1"))
    text = open(out).read()
    entry = text[text.rfind("\nENTRY"):]
    ops = re.findall(r'%([\w.\-]+) = [^\n]*"estimated_cycles":"(\d+)"', entry)
    return out, sum(int(c) for _, c in ops), {name for name, _ in ops}


def tpusim(tp, prog, chip, names, td):
    rep = os.path.join(td, "r.json")
    subprocess.run([tp, "run", prog, "--mode", "timing", "--chip", chip, "--report", rep, "--quiet"], check=True)
    return sum(o["cycles"] for o in json.load(open(rep))["ops"] if o["name"] in names)


def preset(td, gen, rate):
    """A copy of the generation's preset without the two fields, or with int8_mxu_rate = rate."""
    j = json.load(open(os.path.join(ROOT, "chips", gen + ".json")))
    j.pop("int8_matmul_s", None)
    j.pop("int8_mxu_rate", None)
    if rate:
        j["int8_mxu_rate"] = {"value": rate, "source": "XLA", "status": "derived", "note": "int8_matmul.py"}
    path = os.path.join(td, f"{gen}_{rate or 0}.json")
    json.dump(j, open(path, "w"))
    return path


def main():
    gens = (sys.argv[1] if len(sys.argv) > 1 else "v6e,v5e").split(",")
    tp = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "build", "tpusim")
    with tempfile.TemporaryDirectory() as td:
        for gen in gens:
            progs = {}
            for s in SHAPES:
                for a, acc in (("s8", "s32"), ("bf16", "f32")):
                    progs[(s, a)] = compiled(td, gen, *s, a, acc)
            rate = progs[(BIG, "bf16")][1] / progs[(BIG, "s8")][1]
            bare, fit = preset(td, gen, 0), preset(td, gen, round(rate, 3))
            if gen in CORE:  # the compiler's device is one TensorCore of the megacore chip
                bare, fit = bare + ":core", fit + ":core"
            extra = []
            print(f"== {gen}: the compiler's int8 rate over bf16 at {BIG}: {rate:.3f}")
            for s in SHAPES:
                p8, c8, n8 = progs[(s, "s8")]
                pb, cb, nb = progs[(s, "bf16")]
                t8, t8r, tb = tpusim(tp, p8, bare, n8, td), tpusim(tp, p8, fit, n8, td), tpusim(tp, pb, bare, nb, td)
                extra.append((c8 - t8r) - (cb - tb))
                print(f"  {s}: s8 compiler {c8} tpusim {t8} (with the rate {t8r}); bf16 compiler {cb} tpusim {tb}; "
                      f"s8 short beyond bf16 {extra[-1]}")
            clock = {"v4": 1.05e9, "v5e": 1.5e9, "v5p": 1.75e9, "v6e": 1.75e9}[gen]
            med = statistics.median(extra)
            print(f"  int8_mxu_rate {rate:.3f}; int8_matmul_s: median {med:.0f} cycles = {med / clock:.3g} s")


if __name__ == "__main__":
    main()
