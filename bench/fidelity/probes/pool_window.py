#!/usr/bin/env python3
"""pool_window.py GEN TOPOLOGY SEED N: libtpu probes of the XLA TPU compiler's pooling window
kernel (chips/*.json window_start_cycles). Compiles N random max / sum pools (f32 and bf16
[8..64, 9..26, 9..26, 128..384], windows 2-5, strides 1-3, VALID) with
/work/shared/tools/tpu_compile.py for one device of TOPOLOGY, keeps those whose input the
compiler prefetches into VMEM (batch in the sublanes, a kOutput window fusion), compiles each
again with the input also negated (so the window kernel reads HBM), and prints one JSON line
per pool: the window fusion's estimated_cycles from VMEM ("vmem") and from HBM ("hbm").
Fit (session 11): vmem - (kernel_overhead + output bytes at the stream rate + the 16-bit
stream pass) is a start of its own, median 2,411 / 2,602 / 3,024 / 2,868 cycles on v4 / v5e /
v5p / v6e (22 / 22 / 7 / 22 pools), whatever the window; hbm exceeds vmem by the input's bytes
at the stream rate (4.6 to 17 % more, median)."""
import json, os, random, re, subprocess, sys, tempfile

from libtpu import compile_hlo


def pool_hlo(k, n, h, c, dt, win, st, negate):
    ho = (h - win) // st + 1
    init, op = ("-inf", "maximum") if k == "max" else ("0", "add")
    tail = (f"  z = {dt}[{n},{h},{h},{c}] negate(x)\n  ROOT t = ({dt}[{n},{ho},{ho},{c}], {dt}[{n},{h},{h},{c}]) tuple(y, z)\n"
            if negate else "")
    root = "" if negate else "ROOT "
    return (f"HloModule probe\n\nr {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n  ROOT c = {dt}[] {op}(a, b)\n}}\n\n"
            f"ENTRY main {{\n  x = {dt}[{n},{h},{h},{c}] parameter(0)\n  i = {dt}[] constant({init})\n"
            f"  {root}y = {dt}[{n},{ho},{ho},{c}] reduce-window(x, i), window={{size=1x{win}x{win}x1 stride=1x{st}x{st}x1}}, to_apply=r\n"
            f"{tail}}}\n")


def compile_text(text, topo, d):
    return compile_hlo(text, topo, d)[1]


def window_fusion(t):
    ent = t[t.rfind("\nENTRY"):]
    m = re.search(r'kind=kOutput[^\n]*"window_config":\{[^\n]*?"estimated_cycles":"(\d+)"', ent)
    return (int(m.group(1)) if m else None), "cross_program_prefetch_index" in t


def main():
    gen, topo, seed, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    random.seed(seed)
    done = 0
    with tempfile.TemporaryDirectory() as d:
        while done < n:
            k, dt = random.choice(["max", "avg"]), random.choice(["f32", "bf16"])
            b, h = random.choice([8, 16, 24, 32, 48, 64]), random.choice([9, 10, 11, 13, 14, 17, 20, 22, 26])
            c, win, st = random.choice([128, 256, 384]), random.choice([2, 3, 4, 5]), random.choice([1, 2, 3])
            if win > h:
                continue
            t = compile_text(pool_hlo(k, b, h, c, dt, win, st, False), topo, d)
            if not t:
                continue
            vmem, xpf = window_fusion(t)
            if not vmem or not xpf:
                continue
            t2 = compile_text(pool_hlo(k, b, h, c, dt, win, st, True), topo, d)
            hbm = window_fusion(t2)[0] if t2 else None
            print(json.dumps(dict(gen=gen, cfg=[k, b, h, h, c, dt, win, st], vmem=vmem, hbm=hbm)), flush=True)
            done += 1


if __name__ == "__main__":
    main()
