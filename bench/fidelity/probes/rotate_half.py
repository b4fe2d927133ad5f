#!/usr/bin/env python3
"""rotate_half.py [--measure]: libtpu probes of rotary embeddings' rotate_half, x cos +
concatenate(-x2, x1) sin (x2, x1 the halves of head_dim), and of the concatenation alone or
times sin. The XLA TPU compiler runs x2's slice and negation as a kernel of their own
(`slice_negate_fusion`, which also writes x1 as a second result) before the concatenation's
pad_maximum kernel; tpusim makes the negated slice a kernel of its own (fuse.c may_join) and
takes x1 into the concatenation. With --measure (needs libtpu) each case is compiled and
data/rotate_half.json rewritten; without, the committed figures are read. Prints tpusim /
compiler per case (TPUSIM: the binary, default build/tpusim)."""
import json, os, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
DATA = os.path.join(HERE, "data", "rotate_half.json")

from libtpu import TOPO, compile_hlo, tpusim_step_cycles

# name: (b, S, heads, head_dim, dtype, body, chips)
CASES = {
    "rope_bf16_4x1024x8x128": (4, 1024, 8, 128, "bf16", "rope", ("v4", "v5e", "v5p", "v6e")),
    "rope_bf16_4x1024x8x256": (4, 1024, 8, 256, "bf16", "rope", ("v5e",)),
    "rope_f32_4x1024x8x64": (4, 1024, 8, 64, "f32", "rope", ("v5e",)),
    "rope_bf16_6x2048x32x256": (6, 2048, 32, 256, "bf16", "rope", ("v5e",)),
    "concat_bf16_4x1024x8x128": (4, 1024, 8, 128, "bf16", "concat", ("v5e",)),
    "concat_mul_bf16_4x1024x8x128": (4, 1024, 8, 128, "bf16", "concat_mul", ("v5e",)),
}


def hlo(b, S, h, hd, ty, body):
    half = hd // 2
    sh, hs = f"{ty}[{b},{S},{h},{hd}]", f"{ty}[{b},{S},{h},{half}]"
    t = (f"HloModule rope\n\nENTRY e {{\n  x = {sh} parameter(0)\n  c = {ty}[{S},{hd}] parameter(1)\n"
         f"  s = {ty}[{S},{hd}] parameter(2)\n  cb = {sh} broadcast(c), dimensions={{1,3}}\n"
         f"  sb = {sh} broadcast(s), dimensions={{1,3}}\n"
         f"  x1 = {hs} slice(x), slice={{[0:{b}], [0:{S}], [0:{h}], [0:{half}]}}\n"
         f"  x2 = {hs} slice(x), slice={{[0:{b}], [0:{S}], [0:{h}], [{half}:{hd}]}}\n"
         f"  n2 = {hs} negate(x2)\n")
    if body == "concat":
        return t + f"  ROOT rt = {sh} concatenate(n2, x1), dimensions={{3}}\n}}\n"
    t += f"  rt = {sh} concatenate(n2, x1), dimensions={{3}}\n"
    if body == "concat_mul":
        return t + f"  ROOT rs = {sh} multiply(rt, sb)\n}}\n"
    return t + (f"  xc = {sh} multiply(x, cb)\n  rs = {sh} multiply(rt, sb)\n"
                f"  ROOT o = {sh} add(xc, rs)\n}}\n")


def main():
    data = json.load(open(DATA)) if os.path.exists(DATA) else {}
    with tempfile.TemporaryDirectory() as d:
        for name, (b, S, h, hd, ty, body, chips) in CASES.items():
            text = hlo(b, S, h, hd, ty, body)
            for chip in chips:
                if "--measure" in sys.argv:
                    summary, _ = compile_hlo(text, TOPO[chip], d)
                    if summary:
                        data.setdefault(name, {})[chip] = summary["entry_estimated_cycles"]
                comp = data.get(name, {}).get(chip)
                if comp:
                    sim = tpusim_step_cycles(text, chip, d)
                    print(f"{name} {chip}: compiler {comp}, tpusim {sim} ({sim / comp:.2f})")
    if "--measure" in sys.argv:
        json.dump(data, open(DATA, "w"), indent=0, sort_keys=True)


if __name__ == "__main__":
    main()
