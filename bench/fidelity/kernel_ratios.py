#!/usr/bin/env python3
"""kernel_ratios.py: tpusim's unit costs kernel by kernel against the XLA TPU compiler's per-op
estimated_cycles, grouped by kernel category and generation, on the compiler's own compiled
programs (what compare.py --compiled runs: the errors there are unit costs, not decisions).

    python3 bench/fidelity/kernel_ratios.py [--tpusim build/tpusim] [--corpus bench/fidelity/families]
        [--split tune] [--chips v4,v5e,v5p,v6e] [--only SUBSTR] [--by kind,root,space,size]
        [--min-n 3] [--list CATEGORY_SUBSTR] [--save K.json] [--load K.json] [--jobs N]

For every program of the split and generation: `tpusim run COMPILED.hlo --mode timing --report`
(compiled = CORPUS/compiled/NAME.GEN.hlo[.gz]) and, for each top-level op of the compiled entry
computation that the compiler estimated, the ratio tpusim seconds / compiler seconds (its
estimated_cycles at compare.py's COMPILER_CLOCK). Each kernel is described by
  kind   the op (fusion:kLoop/kInput/kOutput/kCustom, copy, ...)
  root   the fused computation's root opcode (through nested fusions and tuples; +dot/+conv when
         the fusion holds a dot or a convolution)
  space  where its operands and result live: h = HBM, v = VMEM (S(1)), c = CMEM (S(3)), e.g.
         'in:hv/out:v'
  size   the result's bytes, in powers of 4 from 4 KiB ('<4K', '<16K', ... '>=64M')
  dtype  the result's element type;  bound  tpusim's bound unit (the largest of unit_cycles)
and groups them by the --by keys (default kind,root,space,size): per generation the count,
median ratio, p10/p90 and the time-weighted ratio (sum tpusim / sum compiler), largest total
compiler time first. --list SUBSTR prints the kernels of the categories whose key contains
SUBSTR, one per line with both figures. --unpaired lists, per generation and kind, the kernels only
one side times under their name (tpusim-only: an op the compiler did not estimate; compiler-only:
an estimated op tpusim has not, dropped or renamed). --save keeps the kernel rows (JSON) for --load.
Nothing here is tuned: it reports where unit costs are biased."""
import argparse, concurrent.futures as cf, json, os, re, subprocess, sys, tempfile
import compare  # sibling module: COMPILER_CLOCK, PRESET, computations, read_compiled, pct, split_of

HERE = os.path.dirname(os.path.abspath(__file__))
SPACE = {"1": "v", "3": "c"}


def shape_space(shape_text):
    """Memory-space letters of an HLO shape's arrays: h (no S(n)), v (S(1)), c (S(3))."""
    out = set()
    for m in re.finditer(r"\w+\[[\d,]*\](\{[^}]*\})?", shape_text):
        s = re.search(r"S\((\d)\)", m.group(1) or "")
        out.add(SPACE.get(s.group(1), "o") if s else "h")
    return "".join(sorted(out)) or "-"


def shape_bytes(shape_text):
    return compare.hbm_array_bytes(re.sub(r"S\(\d\)", "", shape_text))


def size_bucket(b):
    k, lim = 0, 4096
    while b >= lim and k < 8:
        lim *= 4
        k += 1
    names = ["<4K", "<16K", "<64K", "<256K", "<1M", "<4M", "<16M", "<64M", ">=64M"]
    return names[k]


def split_instr(line):
    """(name, shape text, opcode, operand text, attributes) of an HLO instruction line."""
    m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (\(.*?\)|\S+) ([\w\-]+)\((.*)$", line)
    if not m:
        return None
    rest, depth, i = m.group(4), 1, 0
    while i < len(rest) and depth:
        depth += {"(": 1, ")": -1}.get(rest[i], 0)
        i += 1
    return m.group(1), m.group(2), m.group(3), rest[:i - 1], rest[i:]


def describe(text):
    """{entry op name: {kind, root, space, size, dtype}} of a compiled module's text."""
    comps = compare.computations(text)
    shapes = {}
    for lines in comps.values():
        for l in lines:
            p = split_instr(l)
            if p:
                shapes[p[0]] = p[1]

    def body_ops(comp, seen=0):
        ops = []
        for l in comps.get(comp, []):
            p = split_instr(l)
            if not p:
                continue
            ops.append(p[2])
            c = re.search(r"calls=%([\w.\-]+)", p[4])
            if p[2] == "fusion" and c and seen < 4:
                ops += body_ops(c.group(1), seen + 1)
        return ops

    def root_of(comp, seen=0):
        root = next((l for l in comps.get(comp, []) if l.lstrip().startswith("ROOT ")), "")
        p = split_instr(root)
        if not p:
            return "?"
        op, c = p[2], re.search(r"calls=%([\w.\-]+)", p[4])
        if op == "fusion" and c and seen < 4:
            return root_of(c.group(1), seen + 1)
        if op in ("tuple", "bitcast", "copy") and seen < 4:
            # a tuple root: its first non-trivial operand's producer
            names = re.findall(r"%([\w.\-]+)", p[3])
            prod = {split_instr(l)[0]: l for l in comps.get(comp, []) if split_instr(l)}
            for n in names:
                q = split_instr(prod.get(n, ""))
                if q and q[2] != "parameter":
                    if q[2] == "fusion":
                        cc = re.search(r"calls=%([\w.\-]+)", q[4])
                        return root_of(cc.group(1), seen + 1) if cc else "fusion"
                    return q[2]
        return op

    out = {}
    for l in comps.get("ENTRY", []):
        p = split_instr(l)
        if not p:
            continue
        name, shape, op, operands, attrs = p
        kind, root = op, op
        if op == "fusion":
            k = re.search(r"kind=(\w+)", attrs)
            kind = "fusion:" + (k.group(1) if k else "?")
            c = re.search(r"calls=%([\w.\-]+)", attrs)
            if c:
                root = root_of(c.group(1))
                inner = body_ops(c.group(1))
                if "convolution" in inner and root != "convolution":
                    root += "+conv"
                elif "dot" in inner and root != "dot":
                    root += "+dot"
        ins = [shapes.get(n, "") for n in re.findall(r"%([\w.\-]+)", operands)]
        ispace = "".join(sorted(set("".join(shape_space(s) for s in ins if s)))) or "-"
        dt = re.match(r"\(?(\w+)\[", shape)
        out[name] = {"kind": kind, "root": root, "space": f"in:{ispace}/out:{shape_space(shape)}",
                     "size": size_bucket(shape_bytes(shape)), "dtype": dt.group(1) if dt else "?",
                     "in_bytes": sum(shape_bytes(s) for s in ins), "out_bytes": shape_bytes(shape)}
    return out


def run_one(tpusim, path, chip):
    text = compare.read_compiled(path)
    if text is None:
        return None, None
    with tempfile.TemporaryDirectory() as td:
        hlo, rep = os.path.join(td, "p.hlo"), os.path.join(td, "r.json")
        open(hlo, "w").write(text)
        p = subprocess.run([tpusim, "run", hlo, "--mode", "timing", "--chip", chip, "--report", rep, "--quiet"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            return text, None
        return text, json.load(open(rep))


def collect(a):
    corpus = a.corpus
    cdir = os.path.join(corpus, "compiled")
    names = sorted(f[:-5] for f in os.listdir(corpus) if f.endswith(".json"))
    recs = {n: json.load(open(os.path.join(corpus, n + ".json"))) for n in names}
    if a.split:
        names = [n for n in names if (recs[n].get("split") or compare.split_of(n)) == a.split]
    if a.only:
        names = [n for n in names if any(s in n for s in a.only.split(","))]
    chips = a.chips.split(",")
    jobs = [(n, c) for n in names for c in chips if c in recs[n].get("chips", {})]

    def work(j):
        n, c = j
        text, rep = run_one(a.tpusim, os.path.join(cdir, f"{n}.{c}.hlo"), compare.PRESET.get(c, c))
        if rep is None:
            return []
        desc = describe(text)
        sim = {}
        for o in rep["ops"]:
            sim.setdefault(o["name"], o)
        rows, est = [], {name for name, opc, kind, on, cyc in recs[n]["chips"][c]["ops"] if cyc}
        for name, o in sim.items():  # tpusim's ops the compiler did not estimate under that name
            if name not in est and o["cycles"] > 0:
                rows.append(dict(desc.get(name, {"kind": o.get("kind", "?"), "root": "?", "space": "?", "size": "?",
                                                 "dtype": "?", "in_bytes": 0, "out_bytes": 0}),
                                 chip=c, program=n, family=recs[n].get("family") or recs[n]["category"], op=name,
                                 side="tpusim-only", compiler_cycles=0, compiler_s=0.0, tpusim_s=o["seconds"],
                                 tpusim_cycles=o["cycles"], bound="-", unit_cycles=o.get("unit_cycles") or {}, ratio=None))
        for name, opc, kind, on, cyc in recs[n]["chips"][c]["ops"]:
            o = sim.get(name)
            if cyc and o is None and name in desc:  # estimated by the compiler, absent from tpusim's ops
                rows.append(dict(desc[name], chip=c, program=n, family=recs[n].get("family") or recs[n]["category"],
                                 op=name, side="compiler-only", compiler_cycles=cyc,
                                 compiler_s=cyc / compare.COMPILER_CLOCK[c], tpusim_s=0.0, tpusim_cycles=0, bound="-",
                                 unit_cycles={}, ratio=None))
            if o is None or not cyc or name not in desc:
                continue
            cs = cyc / compare.COMPILER_CLOCK[c]
            uc = o.get("unit_cycles") or {}
            bound = max(uc, key=uc.get) if uc and max(uc.values()) > 0 else "-"
            rows.append(dict(desc[name], chip=c, program=n, family=recs[n].get("family") or recs[n]["category"],
                             op=name, compiler_cycles=cyc, compiler_s=cs, tpusim_s=o["seconds"],
                             tpusim_cycles=o["cycles"], bound=bound, unit_cycles=uc, ratio=o["seconds"] / cs))
        return rows

    with cf.ThreadPoolExecutor(max(1, a.jobs)) as ex:
        return [r for rs in ex.map(work, jobs) for r in rs]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tpusim", default=os.path.join(os.path.dirname(os.path.dirname(HERE)), "build", "tpusim"))
    ap.add_argument("--corpus", default=os.path.join(HERE, "families"))
    ap.add_argument("--split", default="tune", choices=["", "test", "tune"])
    ap.add_argument("--chips", default="v4,v5e,v5p,v6e")
    ap.add_argument("--only", default="")
    ap.add_argument("--by", default="kind,root,space,size")
    ap.add_argument("--min-n", type=int, default=3)
    ap.add_argument("--list", default=None)
    ap.add_argument("--save", default="")
    ap.add_argument("--load", default="")
    ap.add_argument("--unpaired", action="store_true", help="also list kernels only one side times under that name")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    rows = json.load(open(a.load)) if a.load else collect(a)
    if a.save:
        json.dump(rows, open(a.save, "w"))
    unpaired = [r for r in rows if r.get("side")]
    rows = [r for r in rows if not r.get("side")]
    chips = [c for c in a.chips.split(",") if any(r["chip"] == c for r in rows)]
    keys = a.by.split(",")
    groups = {}
    for r in rows:
        groups.setdefault(" ".join(str(r[k]) for k in keys), {}).setdefault(r["chip"], []).append(r)
    order = sorted(groups, key=lambda g: -sum(r["compiler_s"] for rs in groups[g].values() for r in rs))
    print(f"tpusim / compiler seconds per kernel ({len(rows)} kernels; split {a.split or 'all'}; by {a.by}): "
          "n  median [p10, p90]  time-weighted")
    print(f"{'category':58s} " + " ".join(f"{c:>30s}" for c in chips))
    for g in order:
        cells, big = [], False
        for c in chips:
            rs = groups[g].get(c, [])
            if len(rs) < a.min_n:
                cells.append(f"{len(rs):>30d}" if rs else " " * 30)
                continue
            big = True
            x = [r["ratio"] for r in rs]
            w = sum(r["tpusim_s"] for r in rs) / sum(r["compiler_s"] for r in rs)
            cells.append(f"{len(rs):4d} {compare.pct(x, .5):5.2f} [{compare.pct(x, .1):4.2f},{compare.pct(x, .9):5.2f}] {w:5.2f}")
        if big:
            print(f"{g[:58]:58s} " + " ".join(cells))
        if a.list is not None and a.list in g:
            for c in chips:
                for r in sorted(groups[g].get(c, []), key=lambda r: r["ratio"]):
                    print(f"    {c:4s} {r['ratio']:6.3f} sim {r['tpusim_cycles']:>9} comp {r['compiler_cycles']:>9} "
                          f"{r['program']}:{r['op']} in={r['in_bytes']} out={r['out_bytes']} {r['dtype']} bound={r['bound']}")
    if a.unpaired:
        # kernels one side times and the other has no estimate for under that name: per
        # generation and side, the count and their summed seconds over the programs' compiler seconds
        print("\nunpaired kernels (by kind): n, sum of seconds, largest")
        agg = {}
        for r in unpaired:
            k = (r["chip"], r["side"], r["kind"])
            a_ = agg.setdefault(k, [0, 0.0, None])
            sec = r["tpusim_s"] or r["compiler_s"]
            a_[0] += 1
            a_[1] += sec
            if a_[2] is None or sec > a_[2][0]:
                a_[2] = (sec, r["program"] + ":" + r["op"])
        for k in sorted(agg, key=lambda k: (k[0], -agg[k][1])):
            n_, s_, big = agg[k]
            print(f"  {k[0]:4s} {k[1]:13s} {k[2]:24s} {n_:5d} {1e6 * s_:10.1f} us  {big[1]} {1e6 * big[0]:.1f} us")


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()
