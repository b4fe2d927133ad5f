#!/usr/bin/env python3
"""pad_windows.py [--measure] [CHIPS]: libtpu probes of space to batch's pad, the XLA TPU
compiler's pad of a small-batch strided convolution's input to 8 pieces along W
(compile/backend/copy_kind.c tpu__pad_window_tiles). Cases: bf16 [B,H,H,C] x [K,K,C,Co], B 1-4,
stride 2 or 3, shapes off the families corpus. The compiler runs a pad whose result is more than
a sixth of its scoped VMEM (a third where it writes HBM, v5p) in windows of 128 result tiles
(its iteration_bounds), each tile at the chip's pad_window_tile_cycles. With --measure (needs
libtpu: /work/shared/tools/tpu_compile.py) each case is compiled per generation and
data/pad_windows.json rewritten; without, the committed figures are read. Prints, per case, the
compiler's pad (cycles, result tiles, windows, MiB) and tpusim's s2b.pad cycles (the build's
tpusim, own compilation)."""
import json, os, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "pad_windows.json")
sys.path.insert(0, HERE)

from libtpu import PRESET, TOPO, TPUSIM, compile_hlo

CASES = ["4 24 128 128 2 3 valid", "4 40 256 128 3 2 same", "4 48 128 64 2 3 valid", "4 64 128 128 2 3 valid",
         "2 64 256 128 3 2 same", "4 80 64 64 3 2 same", "2 112 128 64 2 3 valid", "4 128 64 64 2 3 valid",
         "1 128 256 64 3 2 same", "4 72 192 96 3 2 same", "2 160 96 64 2 3 valid", "4 120 128 128 3 2 same",
         "2 44 256 128 3 2 same", "4 32 160 64 3 2 same", "4 36 128 64 2 3 valid", "2 56 128 64 3 2 same",
         "1 64 256 64 3 2 same", "4 28 256 64 3 2 same", "4 40 160 64 3 2 same", "2 48 256 64 2 3 valid"]


def hlo(b, h, c, co, k, s, pad):
    if pad == "valid":
        lo = hi = 0
    else:
        tot = max((-(-h // s) - 1) * s + k - h, 0)
        lo, hi = tot // 2, tot - tot // 2
    o = (h + lo + hi - k) // s + 1
    x, w, r = f"bf16[{b},{h},{h},{c}]", f"bf16[{k},{k},{c},{co}]", f"bf16[{b},{o},{o},{co}]"
    return (f"HloModule p, entry_computation_layout={{({x}{{3,2,1,0}}, {w}{{3,2,1,0}})->{r}{{3,2,1,0}}}}\n\n"
            f"ENTRY main {{\n  x = {x}{{3,2,1,0}} parameter(0)\n  w = {w}{{3,2,1,0}} parameter(1)\n"
            f"  ROOT c = {r}{{3,2,1,0}} convolution(x, w), window={{size={k}x{k} stride={s}x{s} pad={lo}_{hi}x{lo}_{hi}}},"
            f" dim_labels=b01f_01io->b01f\n}}\n\n")


def tiles(shape):
    """Result tiles of a compiled shape (its T(r,c) tiling of the two minor dimensions) and the
    tile's rows."""
    dims = [int(x) for x in re.match(r"\w+\[([\d,]*)\]", shape).group(1).split(",") if x]
    t = re.search(r"T\((\d+),(\d+)\)", shape)
    mtm = [int(x) for x in re.search(r"\{([\d,]+)", shape).group(1).split(",")]
    rows, cols = int(t.group(1)), int(t.group(2))
    major = 1
    for d in mtm[2:]:
        major *= dims[d]
    return major * -(-dims[mtm[1]] // rows) * -(-dims[mtm[0]] // cols), rows


def entry_pads(text):
    """The entry computation's pad kernels of a compiled program: cycles, result tiles, windows
    (the product of its iteration_bounds), result MiB, whether the result is in VMEM."""
    entry = text[text.rfind("\nENTRY"):]
    out = []
    for line in entry.splitlines():
        m = re.match(r"\s*(?:ROOT )?%[\w.\-]+ = (\S+) pad\(", line)
        c = re.search(r'"estimated_cycles":"(\d+)"', line)
        if not m or not c:
            continue
        it = re.search(r'"iteration_bounds":\[([^\]]*)\]', line)
        n = 1
        for x in (it.group(1).split(",") if it else []):
            n *= int(x.strip('"'))
        t, rows = tiles(m.group(1))
        out.append({"cycles": int(c.group(1)), "tiles": t, "windows": n,
                    "mib": round(t * rows * 128 * 2 / 2**20, 3), "vmem": "S(1)" in m.group(1)})
    return out


def tpusim_pad(text, chip, d):
    src, rep = os.path.join(d, "t.hlo"), os.path.join(d, "r.json")
    open(src, "w").write(text)
    env = dict(os.environ, TPUSIM_CACHE="off")
    p = subprocess.run([TPUSIM, "run", src, "--mode", "timing", "--chip", PRESET.get(chip, chip), "--report", rep,
                        "--quiet"], capture_output=True, text=True, env=env)
    if p.returncode:
        return None
    return sum(o["cycles"] for o in json.load(open(rep))["ops"] if o["name"] == "s2b.pad") or None


def main():
    args = [a for a in sys.argv[1:] if a != "--measure"]
    chips = (args[0] if args else "v5e,v5p,v6e").split(",")
    data = json.load(open(DATA)) if os.path.exists(DATA) else {}
    with tempfile.TemporaryDirectory() as d:
        for case in CASES:
            name = case.replace(" ", "_")
            text = hlo(*[int(x) if x.isdigit() else x for x in case.split()])
            for chip in chips:
                key = f"{name}/{chip}"
                if "--measure" in sys.argv:
                    _, compiled = compile_hlo(text, TOPO[chip], d)
                    data[key] = entry_pads(compiled) if compiled else None
                for pad in data.get(key) or []:
                    t = tpusim_pad(text, chip, d)
                    print(f"{key:34s} compiler {pad['cycles']:7d} ({pad['tiles']:5d} tiles, {pad['windows']:3d} windows,"
                          f" {pad['mib']:6.2f} MiB, {pad['cycles'] / pad['tiles']:5.1f} a tile) tpusim {t or 0:7.0f}")
    if "--measure" in sys.argv:
        json.dump(data, open(DATA, "w"), indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
