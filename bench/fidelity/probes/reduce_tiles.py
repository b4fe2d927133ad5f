#!/usr/bin/env python3
"""reduce_tiles.py TOPOLOGY SEED N [TPUSIM...]: libtpu probes of what the XLA TPU compiler's cost
model charges a reduce per element (src/compile/backend/layout.c reduce_source_elems,
widened_reduce). Draws N random sums (f32 or bf16 x, converted to f32 and summed as JAX does,
the result f32 or narrowed back to x's type) over the major axes of [A, B, R, C], over the rows
(axis 2) or over N, H, W of [N, H, W, C], with R and C off the tiles (neither a multiple of 8 nor
of 128 as often as not), compiles each with /work/shared/tools/tpu_compile.py for one device of
TOPOLOGY, and again with R and C rounded up to the tile (8 rows, 128 lanes), and prints one
JSON line per program: the compiler's cycles for the drawn shape ("cycles") and for the
rounded one ("tiled"), and with TPUSIM (tpusim binaries) each one's cycles for the drawn one ("tpusim", a list).
Finding (session 14, seed 1414, 8-10 draws per generation): cycles == tiled for 5-6 of them on
every generation: the compiler charges a reduce over an array in memory per element of its
tiles, lanes padded to 128 (the others differ where the compiler lays the array out with
another dimension in the sublanes, e.g. [33,8,38,245] with the 8 there: 0.95 of tiled). A sum
whose result stays f32 is a fusion of its own (no unfused-op cost), one narrowed back to bf16
the unfused reduce (lone_op_bytes). tpusim median |err| on those draws, before -> after the
rule: v4 8.5 -> 4.2 %, v5e 14.5 -> 8.6 %, v6e 16.4 -> 24.9 % (v6e's f32 sums over)."""
import json, random, sys, tempfile

from libtpu import compile_hlo, tpusim_cycles


def sum_hlo(shape, dt, dims, narrow):
    s = ",".join(map(str, shape))
    out = ",".join(str(d) for i, d in enumerate(shape) if i not in dims)
    odt = dt if narrow else "f32"
    tail = (f"  r = f32[{out}] reduce(c, z), dimensions={{{','.join(map(str, dims))}}}, to_apply=add\n"
            f"  ROOT o = {odt}[{out}] convert(r)\n" if narrow else
            f"  ROOT r = f32[{out}] reduce(c, z), dimensions={{{','.join(map(str, dims))}}}, to_apply=add\n")
    return (f"HloModule probe\n\nadd {{\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}}\n\n"
            f"ENTRY main {{\n  a = {dt}[{s}] parameter(0)\n  c = f32[{s}] convert(a)\n  z = f32[] constant(0)\n{tail}}}\n")


def compiler_cycles(text, topo, d):
    summary, _ = compile_hlo(text, topo, d)
    return summary["entry_estimated_cycles"] if summary else None


def main():
    topo, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    tpusims = sys.argv[4:]
    gen = topo.split(":")[0]
    chip = "v4:core" if gen == "v4" else gen
    rng = random.Random(seed)
    up = lambda v, m: (v + m - 1) // m * m
    with tempfile.TemporaryDirectory() as d:
        for _ in range(n):
            dt, narrow = rng.choice(["f32", "bf16"]), rng.random() < 0.5
            kind = rng.choice(["major", "rows", "nhw"])
            if kind == "nhw":
                shape = [rng.choice([2, 4, 8]), rng.randint(7, 60), rng.randint(7, 60), rng.randint(17, 300)]
                dims, tiled = [0, 1, 2], None
                tiled = shape[:3] + [up(shape[3], 128)]
            else:
                shape = [rng.randint(3, 40), rng.randint(3, 40), rng.randint(9, 100), rng.randint(17, 300)]
                dims = [0, 1] if kind == "major" else [2]
                tiled = shape[:2] + [up(shape[2], 8), up(shape[3], 128)]
            text = sum_hlo(shape, dt, dims, narrow)
            row = {"gen": gen, "dtype": dt, "narrow": narrow, "kind": kind, "shape": shape,
                   "cycles": compiler_cycles(text, topo, d),
                   "tiled": compiler_cycles(sum_hlo(tiled, dt, dims, narrow), topo, d)}
            if tpusims:
                row["tpusim"] = [tpusim_cycles(t, text, chip, d) for t in tpusims]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
