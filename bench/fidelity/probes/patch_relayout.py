#!/usr/bin/env python3
"""patch_relayout.py GEN[,GEN...] [SHAPES]: libtpu probes of a patch embedding's input relayout
(ViT's stride = window convolution of a 1-4 feature image). Each probe is one convolution
bf16/f32[B,H,W,C] x [P,P,C,F] with window P stride P, made up off the corpus; for every
generation it prints one JSON line: the compiler's copies of the image (result layout, memory
space, estimated_cycles, window and iteration bounds) and the convolution kernel's cycles.
SHAPES: B,H,C,P,F,dtype;... (default: the set below)."""
import json, re, sys, tempfile

from libtpu import TOPO, compile_hlo

DEFAULT = [(8, 224, 3, 16, 768, "bf16"), (8, 112, 3, 16, 256, "bf16"), (16, 224, 3, 16, 256, "bf16"),
           (8, 224, 1, 16, 256, "bf16"), (32, 128, 3, 16, 256, "bf16"), (8, 224, 3, 16, 256, "f32"),
           (4, 224, 3, 16, 256, "bf16"), (8, 160, 3, 8, 256, "bf16"), (8, 200, 3, 20, 256, "bf16"),
           (2, 224, 3, 16, 256, "bf16"), (64, 64, 3, 8, 256, "bf16"), (8, 256, 3, 16, 256, "bf16")]


def hlo(b, h, c, p, f, dt):
    o = h // p
    return (f"HloModule probe\n\nENTRY main {{\n  img = {dt}[{b},{h},{h},{c}] parameter(0)\n"
            f"  w = {dt}[{p},{p},{c},{f}] parameter(1)\n"
            f"  ROOT y = {dt}[{b},{o},{o},{f}] convolution(img, w), window={{size={p}x{p} stride={p}x{p}}}, "
            f"dim_labels=b01f_01io->b01f\n}}\n")


def ops(text):
    entry = text[text.rfind("\nENTRY"):]
    head = text[:text.find("\n")]
    out = []
    for line in entry.splitlines():
        m = re.match(r"\s*(?:ROOT )?%(\S+) = (\S+) (\w[\w-]*)\((.*?)\)", line)
        if not m or "estimated_cycles" not in line:
            continue
        cyc = int(re.search(r'"estimated_cycles":"(\d+)"', line).group(1))
        wb = re.search(r'"output_window_bounds":\[(.*?)\].*?"input_window_bounds":\[(.*?)\].*?"iteration_bounds":\[(.*?)\]', line)
        out.append({"name": m.group(1), "shape": m.group(2), "op": m.group(3), "operands": m.group(4)[:120],
                    "cycles": cyc, "bounds": [x.replace('"', '') for x in wb.groups()] if wb else None})
    return head[head.find("entry_computation_layout"):][:300], out


def main():
    gens = sys.argv[1].split(",")
    shapes = DEFAULT
    if len(sys.argv) > 2:
        shapes = [tuple(int(x) if x.isdigit() else x for x in s.split(",")) for s in sys.argv[2].split(";")]
    with tempfile.TemporaryDirectory() as d:
        for s in shapes:
            for g in gens:
                for _ in range(8):  # libtpu is shared: compile_hlo gives up after six tries
                    summary, text = compile_hlo(hlo(*s), TOPO[g], d)
                    if summary:
                        break
                if not summary:
                    print(json.dumps({"gen": g, "probe": s, "error": True}), flush=True)
                    continue
                layout, o = ops(text)
                print(json.dumps({"gen": g, "probe": s, "total": summary["entry_estimated_cycles"],
                                  "layout": layout, "ops": o}), flush=True)


if __name__ == "__main__":
    main()
