#!/usr/bin/env python3
"""pool_grad_copies.py [GEN ...]: the copies around a max-pool gradient's select-and-scatter,
by the XLA TPU compiler (libtpu, compile-only) and by tpusim timing the compiled program, on
pools outside the bench/fidelity corpora (session 19, pool).

The compiler runs a select-and-scatter with the window's dimensions major: it copies the
operand and the source into that layout (`copy`, `copy.1`) and the result back (`copy.2`).
Those copies carry estimated_cycles (the select-and-scatter and, on some chips, the forward
reduce-window do not). Per case and generation: each copy's operand and result layouts with
their tile counts (tiles of the layout's T(r,128)), the compiler's estimated_cycles and
tpusim's cycles for the same op of the compiled program (this build's). Output: one row per
copy, and with --save data/pool_grad_copies.json: the compiler's side of each row (layouts,
tiles, estimated_cycles; session 19's run, 75 copies: a few compiles failed on libtpu's lock
and are left out). Per small tile (T(1,128), T(2,128)) after the start: v4 6.2-7.5, v5p 4.3-4.7
into HBM and 6.4-7.2 out of it, v5e/v6e 3.3-3.7 out of VMEM into HBM (chips'
small_tile_transpose_cycles, copy_kind.c tpu__small_tile_transpose_tiles)."""
import json, os, re, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from libtpu import TOPO, PRESET, TPUSIM, compile_hlo  # noqa: E402

MAXR = "mx {\n a = %s[] parameter(0)\n b = %s[] parameter(1)\n ROOT m = %s[] maximum(a, b)\n}\n"
SEL = "ge {\n a = %s[] parameter(0)\n b = %s[] parameter(1)\n ROOT g = pred[] compare(a, b), direction=GE\n}\n"
ADD = "ad {\n a = %s[] parameter(0)\n b = %s[] parameter(1)\n ROOT s = %s[] add(a, b)\n}\n"


def dims(v):
    return ",".join(str(x) for x in v)


def grad_pool(ty, x, k, s):
    """jax.grad of sum(2 * max_pool(x)) (valid windows k, stride s over the middle dims)."""
    o = [x[0]] + [(n - k) // s + 1 for n in x[1:-1]] + [x[-1]]
    w = "x".join(["1"] + [str(k)] * (len(x) - 2) + ["1"])
    st = "x".join(["1"] + [str(s)] * (len(x) - 2) + ["1"])
    return ("HloModule m\n" + MAXR % (ty, ty, ty) + SEL % (ty, ty) + ADD % (ty, ty, ty) +
            "ENTRY e {\n x = %s[%s] parameter(0)\n z = %s[] constant(-inf)\n"
            " r = %s[%s] reduce-window(x, z), window={size=%s stride=%s}, to_apply=mx\n"
            " c = %s[] constant(2)\n cb = %s[%s] broadcast(c), dimensions={}\n m = %s[%s] multiply(r, cb)\n"
            " zz = %s[] constant(0)\n"
            " ROOT g = %s[%s] select-and-scatter(x, m, zz), window={size=%s stride=%s}, select=ge, scatter=ad\n}\n"
            % (ty, dims(x), ty, ty, dims(o), w, st, ty, ty, dims(o), ty, dims(o), ty, ty, dims(x), w, st))


CASES = [("bf16", [1, 96, 96, 64], 2, 1), ("bf16", [2, 56, 56, 32], 2, 2), ("f32", [1, 2000, 64], 3, 1),
         ("f32", [1, 1024, 96], 2, 2), ("bf16", [4, 40, 40, 48], 3, 1), ("f32", [2, 64, 64, 16], 2, 2),
         ("f32", [8, 20, 20, 8], 2, 2), ("bf16", [16, 14, 14, 128], 2, 2), ("f32", [4, 1500, 256], 3, 3)]

SHAPE = re.compile(r"(\w+)\[([\d,]*)\]\{([\d,]*)(?::([^}]*))?\}")


def tiles(shape):
    """(tiles, rows of a tile, in VMEM/CMEM) of a layout string 'bf16[..]{m2m:T(r,c)...S(n)}'."""
    m = SHAPE.match(shape)
    if not m:
        return None
    d = [int(v) for v in m.group(2).split(",") if v]
    order = [int(v) for v in m.group(3).split(",") if v]
    tail = m.group(4) or ""
    t = re.search(r"T\((\d+),(\d+)\)", tail)
    r, c = (int(t.group(1)), int(t.group(2))) if t else (1, 128)
    n = 1
    for i, a in enumerate(order):
        n *= -(-d[a] // c) if i == 0 else -(-d[a] // r) if i == 1 else d[a]
    sp = re.search(r"S\((\d)\)", tail)
    return n, r, sp.group(1) if sp else "0"


def copies(text):
    """The entry's copies: name -> (result shape, operand name, estimated_cycles)."""
    entry = text[text.rfind("\nENTRY"):]
    shapes, out = {}, {}
    for line in entry.splitlines():
        m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (\S+) (\S+?)\((.*)", line)
        if not m:
            continue
        name, shp, op = m.group(1), m.group(2), m.group(3)
        shapes[name] = shp
        if op == "copy":
            src = re.match(r"%?([\w.\-]+)", m.group(4)).group(1)
            est = re.search(r'"estimated_cycles":"(\d+)"', line)
            out[name] = (shp, src, int(est.group(1)) if est else None)
    return {k: (v[0], shapes.get(v[1], "?"), v[2]) for k, v in out.items()}


def tpusim_ops(text, gen, d):
    src, rep = os.path.join(d, "c.hlo"), os.path.join(d, "r.json")
    open(src, "w").write(text)
    p = subprocess.run([TPUSIM, "run", src, "--mode", "timing", "--chip", PRESET.get(gen, gen), "--report", rep,
                        "--quiet"], capture_output=True, text=True, env=dict(os.environ, TPUSIM_CACHE="off"))
    if p.returncode:
        return {}
    return {o["name"]: o["cycles"] for o in json.load(open(rep))["ops"]}


def main():
    gens = [a for a in sys.argv[1:] if not a.startswith("--")] or ["v4", "v5e", "v5p", "v6e"]
    rows = []
    for ty, x, k, s in CASES:
        for gen in gens:
            with tempfile.TemporaryDirectory() as d:
                _, text = compile_hlo(grad_pool(ty, x, k, s), TOPO[gen], d)
                if not text:
                    print("compile failed", gen, ty, x)
                    continue
                sim = tpusim_ops(text, gen, d)
            for name, (res, opd, est) in sorted(copies(text).items()):
                tr, to = tiles(res), tiles(opd)
                row = {"gen": gen, "case": "%s%s w%ds%d" % (ty, x, k, s), "copy": name, "result": res,
                       "operand": opd, "est": est, "tpusim": sim.get(name), "result_tiles": tr, "operand_tiles": to}
                rows.append({k: v for k, v in row.items() if k != "tpusim"})
                print("%-4s %-28s %-7s est %7s tpusim %7s  %s(%s tiles) <- %s(%s tiles)" % (
                    gen, row["case"], name, est, sim.get(name), res[res.find("{"):], tr and tr[0],
                    opd[opd.find("{"):], to and to[0]), flush=True)
    if "--save" in sys.argv:
        out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "pool_grad_copies.json")
        json.dump(rows, open(out, "w"), indent=0)


if __name__ == "__main__":
    main()
