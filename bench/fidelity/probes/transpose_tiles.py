#!/usr/bin/env python3
"""transpose_tiles.py TOPOLOGY SEED N [TPUSIM...]: libtpu probes of what the XLA TPU compiler's
cost model charges a transpose per element (src/compile/backend/layout.c streams_tiles). Draws
N random transposes of rank 3 or 4 (f32, bf16 or s8; dimensions off the tiles as often as not;
alone or incremented by 1 in the same kernel, as the families corpus's `_fused` programs),
compiles each with /work/shared/tools/tpu_compile.py for one device of TOPOLOGY and prints one
JSON line per program: the compiler's cycles ("cycles") and, with TPUSIM (tpusim binaries),
each one's cycles ("tpusim", a list).
Finding (session 15): the compiler charges a transpose kernel, alone or fused, by the elements
of the tiles it writes, padding included, as any other vector kernel that streams tiles — a
16- or 8-bit one pays the narrow-result stream pass on every padded element, not on the
elements it holds (families tune: s8[33,33,64,33] transposed (1,2,3,0), 33 in the rows of
its 8-row tiles and 64 in 128 lanes: 84,540 cycles on v5e, tpusim 47,449 before). Seed 1515,
20 draws per generation, tpusim median |err| before -> after the rule, the bf16 and s8 ones:
v4 23.9 -> 13.9 %, v5e 14.3 -> 4.1 %, v5p 14.5 -> 7.2 %, v6e 12.7 -> 6.7 % (f32 unchanged:
9.4, 1.5, 9.1, 2.8 %). Left: bf16[16,33,33,31] (0,2,1,3) + 1, which moves the lanes, is the
compiler's copy into VMEM (29,538 cycles on v5e) and an add kernel (38,734); tpusim's one
fused kernel is 0.4-0.6 of it."""
import json, random, sys, tempfile

from libtpu import compile_hlo, draw_transpose, tpusim_cycles


def transpose_hlo(shape, dt, perm, fused):
    s = ",".join(map(str, shape))
    out = ",".join(str(shape[p]) for p in perm)
    dims = ",".join(map(str, perm))
    body = f"  a = {dt}[{s}] parameter(0)\n"
    if fused:
        body += (f"  t = {dt}[{out}] transpose(a), dimensions={{{dims}}}\n"
                 f"  one = {dt}[] constant(1)\n  b = {dt}[{out}] broadcast(one), dimensions={{}}\n"
                 f"  ROOT r = {dt}[{out}] add(t, b)\n")
    else:
        body += f"  ROOT t = {dt}[{out}] transpose(a), dimensions={{{dims}}}\n"
    return f"HloModule probe\n\nENTRY main {{\n{body}}}\n"


def main():
    topo, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    tpusims = sys.argv[4:]
    gen = topo.split(":")[0]
    chip = "v4:core" if gen == "v4" else gen
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as d:
        done = 0
        while done < n:
            drawn = draw_transpose(rng, ["f32", "bf16", "s8"])
            if drawn is None:
                continue
            dt, shape, perm = drawn
            fused = rng.random() < 0.5
            text = transpose_hlo(shape, dt, perm, fused)
            summary, _ = compile_hlo(text, topo, d)
            row = {"dtype": dt, "shape": shape, "perm": perm, "fused": fused,
                   "cycles": summary["entry_estimated_cycles"] if summary else None}
            if tpusims:
                row["tpusim"] = [tpusim_cycles(t, text, chip, d) for t in tpusims]
            print(json.dumps(row), flush=True)
            done += 1


if __name__ == "__main__":
    main()
