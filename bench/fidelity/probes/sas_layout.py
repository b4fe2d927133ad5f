#!/usr/bin/env python3
"""sas_layout.py [--measure] [GEN ...]: the layout the XLA TPU compiler (libtpu, compile-only)
runs a max-pool gradient's select-and-scatter in, the copies it adds around it and their
estimated_cycles, against tpusim's own compilation of the same program (session 28, sas).

Programs (none in the bench/fidelity corpora): jax.grad of sum(2 * max_pool(x)) as
`pool_grad_copies.py` writes it, 1-D ([N,L,C], window over L) and 2-D ([N,H,W,C], window over
H and W), f32 and bf16, windows 2-3, strides 1-3, VALID and SAME-style padding, the entry
parameter's layout left to the compiler. Per case and generation: the select-and-scatter's
layout (minor_to_major and tile), each copy's operand and result layouts and estimated_cycles,
the compiler's entry sum, and tpusim's own-compilation step cycles and per-op cycles of this
build. --measure compiles (libtpu: run under `flock /tmp/libtpu_probe.lock`) and writes
data/sas_layout.jsonl; without it the committed lines are re-timed with this build's tpusim.

Rule read from the lines (every case, every generation): the select-and-scatter's dimensions
that the window slides along are major, in order (the first most major); the two others are
the tile, lanes and sublanes chosen to pad least, in tiles of as few rows as the sublane
dimension has (1, 2, 4, 8; bf16 at least 2); the operand and the source are copied into that
layout and the result copied back wherever laid out otherwise."""
import json, os, re, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from libtpu import TOPO, PRESET, TPUSIM, compile_retry  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "sas_layout.jsonl")
MAXR = "mx {\n a = %s[] parameter(0)\n b = %s[] parameter(1)\n ROOT m = %s[] maximum(a, b)\n}\n"
SEL = "ge {\n a = %s[] parameter(0)\n b = %s[] parameter(1)\n ROOT g = pred[] compare(a, b), direction=GE\n}\n"
ADD = "ad {\n a = %s[] parameter(0)\n b = %s[] parameter(1)\n ROOT s = %s[] add(a, b)\n}\n"

# (dtype, input shape, window, stride, padded: 'same' pads (k-1)//2 below and k//2 above)
CASES = [("f32", [2, 2500, 96], 3, 1, True), ("f32", [4, 1200, 256], 2, 2, False),
         ("bf16", [1, 1800, 64], 3, 1, True), ("f32", [1, 4000, 32], 2, 1, False),
         ("f32", [16, 9, 9, 5], 2, 2, False), ("bf16", [2, 60, 60, 32], 3, 2, False),
         ("f32", [4, 20, 20, 128], 2, 2, False), ("bf16", [8, 14, 14, 256], 3, 1, False),
         ("f32", [3, 50, 50, 8], 2, 1, False), ("bf16", [1, 80, 80, 48], 2, 2, True)]


def dims(v):
    return ",".join(str(x) for x in v)


def program(ty, x, k, s, same):
    n = len(x)
    lo, hi = ((k - 1) // 2, k // 2) if same else (0, 0)
    o = [x[0]] + [(v + lo + hi - k) // s + 1 for v in x[1:-1]] + [x[-1]]
    w = "x".join(["1"] + [str(k)] * (n - 2) + ["1"])
    st = "x".join(["1"] + [str(s)] * (n - 2) + ["1"])
    pad = " pad=" + "x".join(["0_0"] + ["%d_%d" % (lo, hi)] * (n - 2) + ["0_0"]) if same else ""
    win = "window={size=%s stride=%s%s}" % (w, st, pad)
    return ("HloModule m\n" + MAXR % (ty, ty, ty) + SEL % (ty, ty) + ADD % (ty, ty, ty) +
            "ENTRY e {\n x = %s[%s] parameter(0)\n z = %s[] constant(-inf)\n"
            " r = %s[%s] reduce-window(x, z), %s, to_apply=mx\n"
            " c = %s[] constant(2)\n cb = %s[%s] broadcast(c), dimensions={}\n m = %s[%s] multiply(r, cb)\n"
            " zz = %s[] constant(0)\n"
            " ROOT g = %s[%s] select-and-scatter(x, m, zz), %s, select=ge, scatter=ad\n}\n"
            % (ty, dims(x), ty, ty, dims(o), win, ty, ty, dims(o), ty, dims(o), ty, ty, dims(x), win))


def name(c):
    ty, x, k, s, same = c
    return "sasgrad_%s_%s_w%ds%d_%s" % ("x".join(map(str, x)), ty, k, s, "same" if same else "valid")


LINE = re.compile(r'\s*(?:ROOT )?%(\S+) = (\S+) (\S+?)\((.*)')


def compiled_view(text):
    """The select-and-scatter's layout and the copies around it: {'sas': shape, 'copies':
    [[name, operand shape, result shape, estimated_cycles]], 'sum': entry estimated sum}."""
    shapes, rows, sas, total = {}, [], None, 0
    for line in text[text.rfind("\nENTRY"):].splitlines()[1:]:
        m = LINE.match(line)
        if not m:
            continue
        nm, sh, op, rest = m.groups()
        shapes[nm] = sh
        e = re.search(r'"estimated_cycles":"(\d+)"', line)
        total += int(e.group(1)) if e else 0
        args = re.findall(r'%([\w.\-]+)', rest.split(")")[0])
        if op == "select-and-scatter":
            sas = sh
        if op == "copy":
            rows.append([nm, shapes.get(args[0], "?") if args else "?", sh, int(e.group(1)) if e else None])
    return {"sas": sas, "copies": rows, "sum": total}


def tpusim_own(text, gen):
    with tempfile.TemporaryDirectory() as d:
        src, rep = os.path.join(d, "p.hlo"), os.path.join(d, "r.json")
        open(src, "w").write(text)
        p = subprocess.run([TPUSIM, "run", src, "--mode", "timing", "--chip", PRESET.get(gen, gen), "--report", rep,
                            "--quiet", "--no-cache"], capture_output=True, text=True)
        if p.returncode:
            return None, [], "?"
        r = json.load(open(rep))
        h = subprocess.run([TPUSIM, "compile", src, "--chip", PRESET.get(gen, gen), "--emit", "hlo"],
                           capture_output=True, text=True).stdout
    m = re.search(r"= \w+\[[\d,]*\](\{[\d,]*\}) select-and-scatter", h)
    return r["step"]["cycles"], [[o["name"], o["kind"], o["cycles"]] for o in r["ops"]], m.group(1) if m else "?"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    gens = args or list(TOPO)
    if "--measure" in sys.argv:
        out = []
        for c in CASES:
            text = program(*c)
            for g in gens:
                with tempfile.TemporaryDirectory() as d:
                    summ, comp = compile_retry(text, TOPO[g], d)
                if not comp:
                    print(name(c), g, "compile failed", file=sys.stderr)
                    continue
                row = {"case": name(c), "gen": g, "dtype": c[0], "shape": c[1], "window": c[2], "stride": c[3],
                       "same": c[4], "compiler": compiled_view(comp)}
                out.append(row)
                print(json.dumps(row), flush=True)
        with open(DATA, "w") as f:
            for r in out:
                f.write(json.dumps(r) + "\n")
    rows = [json.loads(l) for l in open(DATA)]
    bycase = {name(c): c for c in CASES}
    # the compiler's copy of the operand (copy), of the source (copy.1), of the result (copy.2)
    # against tpusim's own copy.sas_operand, copy.sas_source, copy.sas_result
    pair = {"copy": "copy.sas_operand", "copy.1": "copy.sas_source", "copy.2": "copy.sas_result"}
    ratios = {}
    for r in rows:
        if r["gen"] not in gens:
            continue
        text = program(*bycase[r["case"]])
        step, ops, lay = tpusim_own(text, r["gen"])
        comp = r["compiler"]
        mine = {o[0]: o[2] for o in ops}
        cells = []
        for c in comp["copies"]:
            t_ = mine.get(pair.get(c[0], ""), None)
            cells.append("%s %s/%s" % (c[0], c[3], "%.0f" % t_ if t_ is not None else "-"))
            if t_ is not None and c[3]:
                ratios.setdefault(r["gen"], []).append(t_ / c[3])
        extra = [o[0] for o in ops if o[1] == "copy" and o[0] not in pair.values()]
        print("%-38s %-3s sas %-30s tpusim %-11s copies (compiler/tpusim) %s%s" % (
            r["case"], r["gen"], comp["sas"].split("{")[1].rstrip("}"), lay, "; ".join(cells) or "none",
            "  tpusim's others: " + ",".join(extra) if extra else ""))
        if len(comp["copies"]) != sum(1 for o in ops if o[0] in pair.values()):
            print("   copies differ: compiler %d, tpusim %s" % (len(comp["copies"]), [o[0] for o in ops if o[1] == "copy"]))
    for g, v in sorted(ratios.items()):
        v.sort()
        print("%s: tpusim / compiler per copy, median %.2f (%.2f-%.2f, n=%d)" % (g, v[len(v) // 2], v[0], v[-1], len(v)))

if __name__ == "__main__":
    main()
