#!/usr/bin/env python3
"""pad_window.py [--measure] [CHIPS]: libtpu probes of the XLA TPU compiler's standalone pad
(compile/backend/layout.c whole_window_pad). Cases: f32/bf16 [B,192,256] padded along the
major, sublane or lane dimension (high, low and high, one each side, interior), and negates of
the padded shapes (neg_*) for reference: a large pad costs the compiler what the unfused
elementwise kernel over its result does (v5e f32 to [16,384,256]: 47,440 and 47,440).
With --measure (needs libtpu: /work/shared/tools/tpu_compile.py) each case is compiled per
generation and data/pad_window.json rewritten; without, the committed figures are read.
Prints compiler and tpusim cycles per case (run with the build's tpusim)."""
import json, os, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "pad_window.json")
sys.path.insert(0, HERE)

from libtpu import TOPO, compile_hlo, tpusim_step_cycles


def cases():
    out = {}
    for dt in ("f32", "bf16"):
        z = (0, 0, 0)
        for name, shape, cfg in (("ax1_16x192x256_hi192", [16, 192, 256], [z, (0, 192, 0), z]),
                                 ("ax1_16x192x256_lo96hi96", [16, 192, 256], [z, (96, 96, 0), z]),
                                 ("ax0_16x192x256_hi16", [16, 192, 256], [(0, 16, 0), z, z]),
                                 ("ax2_16x192x256_hi256", [16, 192, 256], [z, z, (0, 256, 0)]),
                                 ("ax1_16x192x256_lo1hi1", [16, 192, 256], [z, (1, 1, 0), z]),
                                 ("ax2_16x192x256_lo1hi1", [16, 192, 256], [z, z, (1, 1, 0)]),
                                 ("ax1_64x192x256_hi192", [64, 192, 256], [z, (0, 192, 0), z]),
                                 ("ax1_4x192x256_hi192", [4, 192, 256], [z, (0, 192, 0), z]),
                                 ("ax0_4x192x256_hi4", [4, 192, 256], [(0, 4, 0), z, z]),
                                 ("ax1_16x192x256_int1", [16, 192, 256], [z, (0, 0, 1), z]),
                                 ("ax1_256x192x256_hi8", [256, 192, 256], [z, (0, 8, 0), z]),
                                 ("ax0_2x64x128_hi2", [2, 64, 128], [(0, 2, 0), z, z])):
            out[f"{dt}_{name}"] = (dt, shape, cfg)
    for dt, s in (("f32", [16, 384, 256]), ("f32", [32, 192, 256]), ("f32", [16, 192, 512]), ("f32", [64, 384, 256]),
                  ("f32", [4, 384, 256]), ("f32", [256, 200, 256]), ("f32", [16, 194, 256]), ("bf16", [16, 384, 256])):
        out[f"neg_{dt}_{'x'.join(map(str, s))}"] = (dt, s, None)
    return out


def hlo(dt, shape, cfg):
    sh = lambda s: f"{dt}[{','.join(map(str, s))}]"
    if cfg is None:
        return f"HloModule n\n\nENTRY main {{\n  p0 = {sh(shape)} parameter(0)\n  ROOT r = {sh(shape)} negate(p0)\n}}\n"
    out = [lo + hi + s + (s - 1) * it for s, (lo, hi, it) in zip(shape, cfg)]
    pc = "x".join(f"{lo}_{hi}" + (f"_{it}" if it else "") for lo, hi, it in cfg)
    return (f"HloModule p\n\nENTRY main {{\n  p0 = {sh(shape)} parameter(0)\n  c = {dt}[] constant(0)\n"
            f"  ROOT r = {sh(out)} pad(p0, c), padding={pc}\n}}\n")


def main():
    args = [a for a in sys.argv[1:] if a != "--measure"]
    chips = (args[0] if args else "v4,v5e,v5p,v6e").split(",")
    data = json.load(open(DATA)) if os.path.exists(DATA) else {}
    with tempfile.TemporaryDirectory() as d:
        for name, (dt, shape, cfg) in cases().items():
            text = hlo(dt, shape, cfg)
            for chip in chips:
                key = f"{name}/{chip}"
                if "--measure" in sys.argv:
                    summary, _ = compile_hlo(text, TOPO[chip], d)
                    data[key] = summary["entry_estimated_cycles"] if summary else None
                c = data.get(key)
                if c:
                    t = tpusim_step_cycles(text, chip, d)
                    print(f"{key:40s} compiler {c:8d} tpusim {t:8d} {100.0 * (t / c - 1):+7.1f} %")
    if "--measure" in sys.argv:
        json.dump(data, open(DATA, "w"), indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
