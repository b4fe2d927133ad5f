#!/usr/bin/env python3
"""v4_gemm_sweep.py [GENS] [OUT.jsonl] [SET] | v4_gemm_sweep.py --time [CHIP.json[:core]]: libtpu probes of plain dots x @ w ([M,K] x [K,N], both
parameters) over M, K, N and the operand type (bf16, f32, s8, f8e4m3fn), compiled for one device
of each generation (v4 as one TensorCore, tpusim's v4:core), shapes off the families corpus.
Prints one JSON line per case and chip: the compiler's estimated_cycles of each entry kernel, its
window_config (blocks and iteration bounds) and where the weight lives, and tpusim's cycles for
the same kernels of the compiled program (TPUSIM: the binary). Session 31 (v4gemm): the probe
behind v4's matmul kernel rules in docs/timing-mxu.md. Needs libtpu (compile-only). Each compiled
program is kept in data/v4_gemm_sweep/DT_MxKxN.GEN.hlo.gz; --time re-times those kept programs
with tpusim (on the given chip file, default each generation's preset) and prints per case the
compiler's kernel cycles, tpusim's and their ratio, without libtpu."""
import glob, gzip, json, os, re, subprocess, sys, tempfile
from libtpu import TPUSIM, chips_arg, each_compiled, emit, entry_ops, tpusim_ops

ACC = {"bf16": "bf16", "f32": "f32", "s8": "s32", "f8e4m3fn": "bf16", "f8w": "bf16", "bf16f32": "f32"}
BASE = [("bf16", m, 2048, 1024) for m in (8, 32, 64, 96, 128, 192, 256, 512, 1024)]
BASE += [("bf16", m, 4096, 4096) for m in (32, 128, 256)]
BASE += [("s8", m, 4096, 4096) for m in (32, 128, 256, 512)]
BASE += [("f32", m, 2048, 1024) for m in (8, 64, 128, 256)]
BASE += [("f32", 197, 7, 1024), ("f32", 512, 7, 2048), ("bf16", 512, 16, 2048)]
BASE += [("f8e4m3fn", m, 2048, 1024) for m in (64, 256)]
# second sweep (v4 only): s8 against bf16 at K = N = 4096 (the fit) and other shapes
S8 = [(8, 4096, 4096), (16, 4096, 4096), (64, 4096, 4096), (512, 4096, 4096), (4096, 4096, 4096), (32, 1024, 4096),
      (32, 4096, 1024), (128, 2048, 2048), (64, 8192, 1024), (1000, 1024, 1024), (2048, 2048, 512), (200, 3000, 1500),
      (384, 1536, 2560), (8, 128, 128), (48, 40, 1536), (24, 2000, 640)]
BASE += [(d,) + s for s in S8 for d in ("s8", "bf16")]
# third sweep (v4 only): s8 shapes made after the fit, the rule's check
BASE += [("s8",) + s for s in [(96, 2560, 3072), (160, 1024, 6144), (512, 512, 2048), (64, 6144, 768),
                               (1536, 1024, 2048), (40, 4096, 2304), (100, 1000, 2000), (320, 2048, 1280)]]
BASE = list(dict.fromkeys(BASE))
# fourth sweep (v4mid, v4 only): bf16 rows around the 64-cycle weight load, K = N = 4096 and
# K = 2048, N = 1024; the set is chosen by the third argument (mid), the default runs BASE
MID = [("bf16", m, 4096, 4096) for m in (40, 48, 56, 72, 80, 96, 112)]
MID += [("bf16", m, 2048, 2048) for m in (32, 48, 64, 80, 96)]
# fp8 set (v4mid, v4): f8e4m3fn dots (both operands converted to bf16 in the fusion; f8w: only
# the weight is f8e4m3fn, x is bf16) against bf16 at the same shapes
F8S = [(8, 2048, 1024), (64, 2048, 1024), (256, 2048, 1024), (1024, 2048, 1024), (64, 4096, 4096), (256, 1024, 4096),
       (512, 512, 512)]
F8 = [(d,) + s for s in F8S for d in ("f8e4m3fn", "f8w", "bf16")]
# big set (v4mid, v4): bf16 of many rows, where the compiler blocks N in 2 column tiles
BIG = [("bf16", m, k, n) for m, k, n in [(1024, 1024, 256), (1024, 1024, 512), (1024, 1024, 2048), (512, 1024, 1024),
                                         (2048, 1024, 1024), (1000, 512, 1024), (1000, 2048, 1024), (768, 1024, 1024)]]
# out set (v4mid, v4): the same bf16 dots with an f32 result (no 16-bit write)
OUT = [("bf16f32", m, k, n) for m, k, n in [(1000, 1024, 1024), (768, 1024, 1024), (512, 1024, 1024), (1000, 512, 1024),
                                            (64, 4096, 4096), (64, 2048, 2048), (128, 4096, 4096), (2048, 1024, 1024)]]
# fp8 small set (v4mid, v4): a weight of one or few MXU tiles, the shapes not used for the fit
F8SMALL = [(d,) + s for s in [(7, 100, 7), (8, 128, 128), (128, 256, 256), (32, 512, 128), (100, 1000, 1000),
                              (200, 3000, 1500)] for d in ("f8e4m3fn", "f8w", "bf16")]
# kstore set (gemmstore, all four generations): [1024,K] x [K,1024] with a bf16 and an f32
# result over K (few to many K steps to hide the result's store behind), and N = 512 / 2048
KSTORE = [(d, 1024, k, 1024) for k in (256, 512, 2048, 4096) for d in ("bf16", "bf16f32")]
KSTORE += [(d, 1024, 1024, n) for n in (512, 2048) for d in ("bf16", "bf16f32")]
SETS = {"kstore": KSTORE, "base": BASE, "mid": MID, "fp8": F8, "big": BIG, "out": OUT, "fp8small": F8SMALL}


def hlo(dt, m, k, n):
    acc = ACC[dt]
    conv = ""
    if dt == "f8w":  # a bf16 activation times an fp8 weight converted in the fusion
        return (f"HloModule d\nENTRY %main (x: bf16[{m},{k}], w: f8e4m3fn[{k},{n}]) -> bf16[{m},{n}] {{\n"
                f"  %x = bf16[{m},{k}] parameter(0)\n  %w = f8e4m3fn[{k},{n}] parameter(1)\n"
                f"  %cw = bf16[{k},{n}] convert(%w)\n"
                f"  ROOT %d = bf16[{m},{n}] dot(%x, %cw), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n}}\n")
    if dt == "f8e4m3fn":  # jnp's fp8 matmul: both operands converted, an f32 dot, the result rounded
        return (f"HloModule d\nENTRY %main (x: {dt}[{m},{k}], w: {dt}[{k},{n}]) -> bf16[{m},{n}] {{\n"
                f"  %x = {dt}[{m},{k}] parameter(0)\n  %w = {dt}[{k},{n}] parameter(1)\n"
                f"  %cx = bf16[{m},{k}] convert(%x)\n  %cw = bf16[{k},{n}] convert(%w)\n"
                f"  ROOT %d = bf16[{m},{n}] dot(%cx, %cw), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n}}\n")
    if dt == "bf16f32":  # bf16 operands, an f32 result (preferred_element_type=f32)
        dt = "bf16"
    return (f"HloModule d\nENTRY %main (x: {dt}[{m},{k}], w: {dt}[{k},{n}]) -> {acc}[{m},{n}] {{\n"
            f"  %x = {dt}[{m},{k}] parameter(0)\n  %w = {dt}[{k},{n}] parameter(1)\n{conv}"
            f"  ROOT %d = {acc}[{m},{n}] dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n}}\n")


DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "v4_gemm_sweep")


def retime(chip_arg):
    """--time: tpusim against the compiler on the kept compiled programs (no libtpu)."""
    rows = []
    for path in sorted(glob.glob(os.path.join(DATA, "*.hlo.gz"))):
        name, gen = os.path.basename(path)[:-7].rsplit(".", 1)
        text = gzip.open(path, "rt").read()
        ent = text[text.rfind("\nENTRY"):]
        comp = {n: int(c) for n, c in re.findall(r'%([\w.\-]+) = [^\n]*"estimated_cycles":"(\d+)"', ent)}
        chip = chip_arg or ("v4:core" if gen == "v4" else gen)
        with tempfile.TemporaryDirectory() as d:
            src, rep = os.path.join(d, "p.hlo"), os.path.join(d, "r.json")
            open(src, "w").write(text)
            subprocess.run([TPUSIM, "run", src, "--mode", "timing", "--chip", chip, "--report", rep, "--quiet"],
                           check=True)
            sim = sum(o["cycles"] for o in json.load(open(rep))["ops"] if o["name"] in comp)
        c = sum(comp.values())
        rows.append((gen, name, c, sim))
        print(f"{gen} {name:28s} compiler {c:9d} tpusim {sim:9d} ratio {sim / c:.3f}")
    return rows


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--time":
        retime(sys.argv[2] if len(sys.argv) > 2 else None)
        return
    chips = chips_arg(sys.argv)
    os.makedirs(DATA, exist_ok=True)
    out = open(sys.argv[2], "a") if len(sys.argv) > 2 else None
    for case, chip, text, own, summ, comp in each_compiled(SETS[sys.argv[3] if len(sys.argv) > 3 else "base"], hlo, chips):
        ops = entry_ops(comp)
        dt, m, k, n = case
        with gzip.open(os.path.join(DATA, f"{dt}_{m}x{k}x{n}.{chip}.hlo.gz"), "wt") as f:
            f.write(comp)
        try:
            sim = {n: c for n, _, c in tpusim_ops(TPUSIM, comp, chip)}
        except Exception as e:  # noqa: BLE001
            sim = {"error": str(e)}
        ent = comp[comp.rfind("\nENTRY"):]
        kern = []
        for name, shape, opc, cyc in ops:
            if cyc is None:
                continue
            line = next((l for l in ent.splitlines() if re.match(rf"\s*(ROOT )?%{re.escape(name)} = ", l)), "")
            wc = re.search(r'"window_config":\{(.*?)\}', line)
            kern.append(dict(name=name, shape=shape, op=opc, compiler=cyc, tpusim=sim.get(name),
                             window=wc.group(1) if wc else None, cmem="S(3)" in line, vmem="S(1)" in line))
        rec = dict(case=case, chip=chip, compiler=sum(k["compiler"] for k in kern),
                   tpusim=sum(k["tpusim"] or 0 for k in kern), own=sum(c for _, _, c in own), kernels=kern)
        emit(rec, out)


if __name__ == "__main__":
    main()
