#!/usr/bin/env python3
"""fused_copy.py TOPOLOGY SEED N TPUSIM...: libtpu probes of a compiled program's copy inside a
fusion (src/compile/backend/stream_cost.c streams_tiles). Draws N random transposes of rank 3
or 4 (bf16 or s8, with --all f32 too; dimensions off the tiles as often as not), each
incremented by 1 in the same kernel, compiles each with /work/shared/tools/tpu_compile.py for
one device of TOPOLOGY and times the COMPILED program (the compiler's fusions and layouts, as
compare.py --compiled) with each tpusim binary given. Prints one JSON line per program: the
compiler's cycles, each binary's ("tpusim"), the entry's kernels and whether a fusion holds a
`copy` (the compiler's relayout inside its loop).
Finding (session 18): where the compiler keeps a relayout inside a loop fusion (a copy between
two tiled layouts, then a bitcast to the result), it charges the fusion over the tiles it
writes, as tpusim's own transpose kernel: families tune transpose_33x33x64x33_p1230_s8's
copy_bitcast_fusion (s8 {2,3,1,0} -> {2,0,3,1}) 84,540 cycles on v5e, tpusim 47,449 -> 77,369;
bf16[14,182,37,37] (3,1,0,2) + 1 (seed 77, v5e) 99,836, tpusim 81,309 -> 97,899. Random draws
rarely give such a fusion (the compiler picks the entry layouts, mostly making the transpose
a bitcast): seed 2024 with --all, 14 draws on v5e / v6e, 4 fused copies each, tpusim within
0-12 % of the compiler (v5e -4.8/-11.5/-0.0/-0.9 %, v6e -3.4/-6.3/+0.9/-3.5 %) and unchanged
by the rule (f32 results, or results whose tiles the stream pass already counted)."""
import json, os, random, re, subprocess, sys, tempfile

from libtpu import compile_hlo, draw_transpose


def hlo(shape, dt, perm):
    s = ",".join(map(str, shape))
    out = ",".join(str(shape[p]) for p in perm)
    dims = ",".join(map(str, perm))
    return (f"HloModule probe\n\nENTRY main {{\n  a = {dt}[{s}] parameter(0)\n"
            f"  t = {dt}[{out}] transpose(a), dimensions={{{dims}}}\n"
            f"  one = {dt}[] constant(1)\n  b = {dt}[{out}] broadcast(one), dimensions={{}}\n"
            f"  ROOT r = {dt}[{out}] add(t, b)\n}}\n")


def sim(tpusim, path, chip):
    r = subprocess.run([tpusim, "run", path, "--mode", "timing", "--chip", chip], capture_output=True, text=True,
                       env=dict(os.environ, TPUSIM_CACHE="off"))
    m = re.search(r"\((\d+) cycles", r.stdout)
    return int(m.group(1)) if m else None


def main():
    args = [a for a in sys.argv[1:] if a != "--all"]
    topo, seed, n, tpusims = args[0], int(args[1]), int(args[2]), args[3:]
    types = ["f32", "bf16", "s8"] if "--all" in sys.argv else ["bf16", "s8"]
    gen = topo.split(":")[0]
    chip = "v4:core" if gen == "v4" else gen
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as d:
        done = 0
        while done < n:
            drawn = draw_transpose(rng, types)
            if drawn is None:
                continue
            dt, shape, perm = drawn
            done += 1
            summary, text = compile_hlo(hlo(shape, dt, perm), topo, d)
            if not summary:
                continue
            entry = text[text.rfind("\nENTRY"):]
            path = os.path.join(d, "compiled.hlo")
            open(path, "w").write(text)
            row = {"dtype": dt, "shape": shape, "perm": perm, "kernels": re.findall(r"= \S+ (fusion|copy)\(", entry),
                   "fused_copy": any(c.startswith("fused") and " copy(" in c for c in text.split("\n%")),
                   "cycles": summary["entry_estimated_cycles"], "tpusim": [sim(t, path, chip) for t in tpusims]}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
