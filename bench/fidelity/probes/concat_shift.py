#!/usr/bin/env python3
"""concat_shift.py [--measure] [CHIPS]: libtpu probes of the XLA TPU compiler's concatenate
(chips/*.json concat_shift_cycles). The compiler runs a concatenate along a dimension other
than the lanes as a pad_maximum_fusion (pad_add for integers): each operand padded to the
result's shape with -inf, the pads combined by maximum, and charges, beyond its transfers, a
cost per vector register of the result that lies before each operand along the concatenated
dimension (linear in the operands' offsets, not their sizes: two parts of 8 ... 256 rows of
bf16 [16,384,256] cost v5e 30,892 ... 35,146 cycles; 128-128-128 and 32-320-32 alike).
Cases: f32 and bf16 [B,R,C] from 2-4 equal parts along axis 1 (B,R,C in [16,384,256],
[64,384,256], [16,384,1024], [4,96,128]), unequal parts of [16,384,256] (s2_*, s3_*), two
halves along axis 0 (m2_*); and five to eight parts (k*_), which the compiler writes in place
(dynamic-update-slice kernels and ConcatBitcast copies, no pads) and tpusim charges no shift. With --measure (needs libtpu: /work/shared/tools/tpu_compile.py)
each case is compiled per generation and data/concat_shift.json rewritten; without, the
committed figures are read. Prints per generation the median over the cases of (compiler -
tpusim without the shift) / shift registers (the fit) and tpusim's median |error| with the
chip's concat_shift_cycles as it is (run with the build's tpusim)."""
import json, os, statistics, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
DATA = os.path.join(HERE, "data", "concat_shift.json")

from libtpu import TOPO, compile_hlo, tpusim_step_cycles


def cases():
    out = {}
    for dt in ("f32", "bf16"):
        for n in (2, 3, 4):
            for b, r, c in ((16, 384, 256), (64, 384, 256), (16, 384, 1024), (4, 96, 128)):
                out[f"q{n}_{dt}_{b}x{r}x{c}"] = (dt, [[b, r // n, c]] * n, 1)
        for parts in ((8, 376), (32, 352), (64, 320), (128, 256), (256, 128),
                      (64, 64, 256), (32, 320, 32), (256, 64, 64), (128, 128, 128)):
            out[f"s{len(parts)}_{dt}_" + "-".join(map(str, parts))] = (dt, [[16, p, 256] for p in parts], 1)
        out[f"m2_{dt}_16x384x256"] = (dt, [[8, 384, 256]] * 2, 0)
    # five parts or more: the compiler's dynamic-update-slice chain, no shift (tpusim: none)
    for name, dt, n, (b, r, c) in (("k5_f32_16x160x256", "f32", 5, (16, 160, 256)), ("k6_f32_16x384x256", "f32", 6, (16, 384, 256)),
                                   ("k5_bf16_16x320x256", "bf16", 5, (16, 320, 256)), ("k5_f32_4x40x128", "f32", 5, (4, 40, 128)),
                                   ("k8_f32_16x64x256", "f32", 8, (16, 64, 256))):
        out[name] = (dt, [[b, r // n, c]] * n, 1)
    return out


def hlo(dt, shapes, axis):
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    sh = lambda s: f"{dt}[{','.join(map(str, s))}]"
    ps = "".join(f"  p{i} = {sh(s)} parameter({i})\n" for i, s in enumerate(shapes))
    args = ", ".join(f"p{i}" for i in range(len(shapes)))
    return f"HloModule c\n\nENTRY main {{\n{ps}  ROOT r = {sh(out)} concatenate({args}), dimensions={{{axis}}}\n}}\n"


def shift_regs(dt, shapes, axis):
    """Registers before each operand: the result's (8 or 16 rows x 128 lanes) times each
    operand's offset over the concatenated dimension, summed."""
    if len(shapes) > 4:
        return 0
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    rows = 8 if dt == "f32" else 16
    regs = out[0] * -(-out[1] // rows) * -(-out[2] // 128)
    offs, o = [], 0
    for s in shapes:
        offs.append(o)
        o += s[axis]
    return regs * sum(offs[1:]) / out[axis]


def main():
    args = [a for a in sys.argv[1:] if a != "--measure"]
    chips = args[0].split(",") if args else list(TOPO)
    cs = cases()
    data = json.load(open(DATA)) if os.path.exists(DATA) else {}
    with tempfile.TemporaryDirectory() as d:
        if "--measure" in sys.argv:
            for chip in chips:
                for name, (dt, shapes, axis) in cs.items():
                    summary, _ = compile_hlo(hlo(dt, shapes, axis), TOPO[chip], d)
                    if summary:
                        data.setdefault(name, {})[chip] = summary["entry_estimated_cycles"]
            json.dump(data, open(DATA, "w"), indent=0, sort_keys=True)
        for chip in chips:
            fit, errs = [], []
            for name, (dt, shapes, axis) in cs.items():
                comp = data.get(name, {}).get(chip)
                if not comp:
                    continue
                text = hlo(dt, shapes, axis)
                sim = tpusim_step_cycles(text, chip, d)
                errs.append(abs(sim / comp - 1))
                # tpusim's figure without the shift: the chip's field times the registers off
                f = json.load(open(os.path.join(HERE, "..", "..", "..", "chips", chip + ".json")))
                k = f.get("concat_shift_cycles", {}).get("value", 0)
                regs = shift_regs(dt, shapes, axis)
                base = sim - k * regs
                if regs > 0:
                    fit.append((comp - base) / regs)
            if fit:
                print(f"{chip}: {len(errs)} cases, fit (median cycles per shift register) {statistics.median(fit):.2f}, "
                      f"tpusim median |error| {100 * statistics.median(errs):.1f} %, max {100 * max(errs):.1f} %")


if __name__ == "__main__":
    main()
