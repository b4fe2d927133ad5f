#!/usr/bin/env python3
"""cmem_relayout.py [fit|check] DIR... : the XLA TPU compiler's sublane relayout copies within
v4's CMEM (a copy that keeps the lanes' dimension and reorders the others, S(3) on both sides),
read from compiled v4 programs (NAME.v4.hlo or .hlo.gz under each DIR). Prints one JSON line per
copy (program, shapes, result tiles, 32-bit sublanes per result tile, the compiler's
estimated_cycles, tpusim's cycles for that op of the compiled program with the rule on and with
TPUSIM_NO_CMEM_RELAYOUT_SUBLANES=1) and, with `fit`, the least-squares per-tile fit a + b x
sublanes of (compiler - 610) / tiles over the copies of 100 tiles or more (610: tpusim's start
and latency for such a copy on v4). Session 32 (einsum45): `fit` over the families tune split
(bench/fidelity/families/compiled, tune programs only) gave 13.70 + 2.11 (chips/v4.json
cmem_relayout_*); `check` over the probes' own compiled mini corpora (shapes off the families
corpus). Needs no libtpu (reads compiled programs); TPUSIM: the binary."""
import glob, gzip, hashlib, json, math, os, re, subprocess, sys, tempfile

from libtpu import TPUSIM

SHAPE = re.compile(r'(\w+)\[([\d,]*)\]\{([\d,]*):T\((\d+),(\d+)\)(\(\d,1\))?(S\(\d\))?')


def parse(s):
    m = SHAPE.match(s)
    if not m:
        return None
    dt, dims, mtm, tr, tc, pk, sp = m.groups()
    return dict(dt=dt, dims=[int(x) for x in dims.split(",")] if dims else [],
                mtm=[int(x) for x in mtm.split(",")] if mtm else [], tr=int(tr), tc=int(tc), sp=sp)


def tiles(p):
    d, m = p["dims"], p["mtm"]
    if len(d) < 2:
        return 0
    t = math.ceil(d[m[0]] / p["tc"]) * math.ceil(d[m[1]] / p["tr"])
    for i in m[2:]:
        t *= d[i]
    return t


def sublanes(p):
    bits = {"bf16": 16, "f16": 16, "f32": 32, "s32": 32, "u32": 32, "s8": 8, "u8": 8, "pred": 8}.get(p["dt"], 32)
    return math.ceil(p["tr"] * p["tc"] * bits / 32 / 128)


def moving(p):
    return [i for i in p["mtm"] if p["dims"][i] != 1]


def tune(name):
    """The families corpus's split of a program (compare.py split_of), True for tune."""
    return int(hashlib.sha1(name.encode()).hexdigest()[:8], 16) % 10 >= 3


def copies(text):
    ent = text[text.rfind("\nENTRY"):]
    for m in re.finditer(r'%([\w.\-]+) = (\S+) copy\(%([\w.\-]+)\).*?"estimated_cycles":"(\d+)"', ent):
        src = re.search(r'%' + re.escape(m.group(3)) + r' = (\S+) ', ent)
        a, b = parse(src.group(1)) if src else None, parse(m.group(2))
        if not a or not b or a["sp"] != "S(3)" or b["sp"] != "S(3)":
            continue
        ma, mb = moving(a), moving(b)
        if ma and mb and ma[0] == mb[0] and ma != mb:
            yield m.group(1), src.group(1), m.group(2), b, int(m.group(4))


def sim_ops(text, env):
    with tempfile.TemporaryDirectory() as d:
        src, rep = os.path.join(d, "p.hlo"), os.path.join(d, "r.json")
        open(src, "w").write(text)
        e = dict(os.environ, TPUSIM_CACHE="off", **env)
        p = subprocess.run([TPUSIM, "run", src, "--mode", "timing", "--chip", "v4:core", "--report", rep, "--quiet"],
                           capture_output=True, env=e)
        return {o["name"]: o["cycles"] for o in json.load(open(rep))["ops"]} if p.returncode == 0 else {}


def main():
    mode, dirs = sys.argv[1], sys.argv[2:]
    recs = []
    for d in dirs:
        families = os.path.basename(os.path.dirname(os.path.abspath(d))) == "families"
        for path in sorted(glob.glob(os.path.join(d, "*.v4.hlo")) + glob.glob(os.path.join(d, "*.v4.hlo.gz"))):
            name = os.path.basename(path).split(".v4.hlo")[0]
            if families and mode == "fit" and not tune(name):
                continue
            text = gzip.open(path, "rt").read() if path.endswith(".gz") else open(path).read()
            found = list(copies(text))
            if not found:
                continue
            on, off = sim_ops(text, {}), sim_ops(text, {"TPUSIM_NO_CMEM_RELAYOUT_SUBLANES": "1"})
            for op, src, dst, b, est in found:
                rec = dict(program=name, op=op, src=src, dst=dst, tiles=tiles(b), sublanes=sublanes(b), compiler=est,
                           tpusim=on.get(op), tpusim_off=off.get(op))
                recs.append(rec)
                print(json.dumps(rec), flush=True)
    big = [r for r in recs if r["tiles"] >= 100]
    if mode == "fit" and big:
        # least squares of (compiler - 610) = tiles * (a + b * sublanes)
        sxx = sum((r["tiles"]) ** 2 for r in big)
        sxy = sum(r["tiles"] ** 2 * r["sublanes"] for r in big)
        syy = sum((r["tiles"] * r["sublanes"]) ** 2 for r in big)
        bx = sum(r["tiles"] * (r["compiler"] - 610) for r in big)
        by = sum(r["tiles"] * r["sublanes"] * (r["compiler"] - 610) for r in big)
        det = sxx * syy - sxy * sxy
        print(json.dumps(dict(fit_n=len(big), a=(bx * syy - by * sxy) / det, b=(by * sxx - bx * sxy) / det)))
    for key in ("tpusim", "tpusim_off"):
        rs = [abs(math.log(r[key] / r["compiler"])) for r in recs if r.get(key)]
        if rs:
            rs.sort()
            print(json.dumps(dict(summary=key, n=len(rs), median_abs_log_ratio=round(rs[len(rs) // 2], 3))))


if __name__ == "__main__":
    main()
