#!/usr/bin/env python3
"""hbm_relayout.py GEN [TPUSIM]: libtpu probes of the XLA TPU compiler's relayout of small tiles
between HBM arrays inside a loop fusion (src/compile/backend/copy_kind.c tpu__hbm_relayout_tiles,
the chips' hbm_relayout_tile_cycles). Each probe transposes an array keeping the dimension the
compiler lays in the lanes (the first) and moving the second-minor one, plus 1 (or alone), over
shapes off the families corpus: the compiler lays parameter and result out in T(2,128) or
T(4,128) tiles (a 2- or 4-long second-minor dimension) and fuses a `copy` between them (a
sublane relayout) into the loop fusion, HBM to HBM. Compiles each for one device of GEN with
/work/shared/tools/tpu_compile.py, times the compiled program with tpusim, and prints one JSON
line per program: the compiler's cycles per entry op with its result's tiles and tile rows, and
tpusim's; then per generation the compiler's cycles per tile beyond kov + the HBM latency + the
operand and result bytes at the streaming rate (the chip's hbm_relayout_tile_cycles is their
median). data/hbm_relayout.jsonl holds the session-25 run (v4, v5e, v5p, v6e; tpusim before the
rule). Finding: v4 9.4-13.1 (median 9.9), v5e 8.6-9.9 (9.6), v5p 3.2-4.3 (3.6), v6e 5.0-6.4
(5.9) cycles a tile, bf16 and f32, 2 and 4 rows alike; whole-register results (f32 T(8,128),
bf16 T(8,128)(2,1)) cost their transfers. The families' transpose_501x33x2x2x33_p04132_fused_bf16
(tune) is this kernel: 8,712 tiles, 108,498 cycles on v5e, tpusim 41,715 before."""
import json, math, os, re, statistics, subprocess, sys, tempfile

from libtpu import TOPO, compile_hlo, entry_ops

CASES = [  # shape, dtype, permutation, add 1
    ([1000, 33, 2, 2, 33], "bf16", [0, 4, 1, 3, 2], True), ([300, 20, 2, 2, 40], "bf16", [0, 4, 1, 3, 2], True),
    ([501, 33, 2, 2, 33], "f32", [0, 4, 1, 3, 2], True), ([501, 33, 4, 4, 33], "bf16", [0, 4, 1, 3, 2], True),
    ([400, 30, 4, 4, 20], "f32", [0, 4, 1, 3, 2], True), ([501, 33, 8, 8, 17], "f32", [0, 4, 1, 3, 2], True),
    ([501, 33, 8, 8, 17], "bf16", [0, 4, 1, 3, 2], True), ([700, 40, 2, 2, 25], "bf16", [0, 4, 1, 3, 2], False),
    ([300, 3, 2, 40], "bf16", [0, 3, 2, 1], True), ([640, 5, 2, 30], "bf16", [0, 3, 1, 2], True),
    ([256, 7, 4, 9, 5], "f32", [0, 4, 1, 3, 2], True), ([384, 12, 2, 2, 50], "f32", [0, 4, 1, 3, 2], True),
    ([200, 25, 4, 4, 25], "bf16", [0, 4, 1, 3, 2], True), ([1024, 10, 2, 2, 10], "bf16", [0, 4, 1, 3, 2], False),
]


def hlo(shape, dt, perm, add):
    s, out = ",".join(map(str, shape)), ",".join(str(shape[p]) for p in perm)
    t = f"  t = {dt}[{out}] transpose(a), dimensions={{{','.join(map(str, perm))}}}\n"
    if add:
        t += f"  one = {dt}[] constant(1)\n  b = {dt}[{out}] broadcast(one), dimensions={{}}\n  ROOT r = {dt}[{out}] add(t, b)\n"
    else:
        t = t.replace("  t =", "  ROOT t =")
    return f"HloModule probe\n\nENTRY main {{\n  a = {dt}[{s}] parameter(0)\n{t}}}\n"


def tiles(shape_text):
    """(tiles, tile rows) of a compiled array shape in its T(r,c) tiling."""
    m = re.match(r"\w+\[([\d,]*)\]\{([\d,]*):T\((\d+),(\d+)\)", shape_text)
    if not m:
        return [0, 0]
    d, mm = [int(x) for x in m.group(1).split(",")], [int(x) for x in m.group(2).split(",")]
    r, lanes = int(m.group(3)), int(m.group(4))
    n = math.ceil(d[mm[0]] / lanes) * math.ceil(d[mm[1]] / r)
    for k in mm[2:]:
        n *= d[k]
    return [n, r]


def sim(tpusim, path, chip):
    p = subprocess.run([tpusim, "run", path, "--mode", "timing", "--chip", chip], capture_output=True, text=True,
                       env=dict(os.environ, TPUSIM_CACHE="off"))
    m = re.search(r"\((\d+) cycles", p.stdout)
    return int(m.group(1)) if m else None


def chip_rate(tpusim, chip):
    """(kov + HBM latency cycles, streaming bytes per cycle) from `tpusim chips --json`-free
    constants: the chip files' figures as tpusim loads them (v4 one TensorCore)."""
    base = os.path.join(os.path.dirname(os.path.abspath(tpusim)), "..", "chips")
    j = json.load(open(os.path.join(base, chip.split(":")[0] + ".json")))
    v = lambda k: j[k]["value"] if isinstance(j.get(k), dict) else j.get(k)
    bw = v("hbm_bw") / (2 if chip.endswith(":core") else 1)
    clk = v("clock_hz")
    return v("kernel_overhead_s") * clk + 500e-9 * clk, bw * (v("hbm_efficiency") or 1) / clk


def main():
    gen = sys.argv[1]
    tpusim = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..", "..", "build", "tpusim")
    chip = "v4:core" if gen == "v4" else gen
    start, rate = chip_rate(tpusim, chip)
    per = []
    with tempfile.TemporaryDirectory() as d:
        for shape, dt, perm, add in CASES:
            summ, text = compile_hlo(hlo(shape, dt, perm, add), TOPO[gen], d)
            if not text:
                continue
            path = os.path.join(d, "c.hlo")
            open(path, "w").write(text)
            ops = [[o[0], o[2], o[3], tiles(o[1])] for o in entry_ops(text) if o[3]]
            print(json.dumps({"gen": gen, "shape": shape, "dt": dt, "perm": perm, "add": add,
                              "compiler": summ["entry_estimated_cycles"], "tpusim": sim(tpusim, path, chip),
                              "ops": ops, "fused_copy": "copy(" in text[:text.rfind("\nENTRY")]}), flush=True)
            for name, kind, cyc, (nt, rows) in ops:
                if 0 < rows < 8:
                    per.append((cyc - start - 2 * nt * rows * 128 * (2 if dt == "bf16" else 4) / rate) / nt)
    if per:
        print(f"# {gen}: cycles a tile beyond the start and transfers: {min(per):.2f}-{max(per):.2f}, "
              f"median {statistics.median(per):.2f} ({len(per)} kernels)")


if __name__ == "__main__":
    main()
